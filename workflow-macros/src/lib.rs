//! The procedural macros of the workflow runtime. Use them through `workflow_runtime`, which
//! re-exports them; the generated code refers only to `::workflow_runtime::__private`.
//!
//! The macros lower their DSL to a `workflow_model::Definition` and run the same validator the
//! runtime runs on JSON definitions, so a bad transition is a compile error on the offending
//! token.
