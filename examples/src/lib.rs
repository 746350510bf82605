//! Runnable examples live in `examples/`; run one with `cargo run -p examples --example <name>`.
//!
//! The HTTP service of the `web` example is a library module, [`web`], so that its routes
//! are tested by `examples/tests/web.rs` without opening a socket.

pub mod web;
