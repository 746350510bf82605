//! Runnable examples live in `examples/`; run one with `cargo run -p examples --example <name>`.
