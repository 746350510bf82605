//! Runnable examples live in `examples/`; run one with `cargo run -p examples --example <name>`.
//!
//! The HTTP service of the `web` example is a library module, [`web`], so that its routes
//! are tested by `examples/tests/web.rs` without opening a socket. The definitions and the loop
//! of one cluster process on PostgreSQL are [`cluster`], run by the `worker` example and by the
//! multi-process test `examples/tests/cluster.rs`. The `deferred` example's process is
//! [`deferred`], run twice by `examples/tests/deferred.rs` as two processes would be.

pub mod cluster;
pub mod deferred;
pub mod web;
