//! Durable, compile-time checked workflows.
//!
//! This crate is the one users depend on: it re-exports the definition model
//! ([`model`]) and, behind the default feature `macros`, the `#[state_machine]` and
//! `workflow!` macros.

/// The definition model and its validator (the `workflow-model` crate).
pub use workflow_model as model;
