//! The procedural macros of the workflow runtime. Use them through `workflow_runtime`, which
//! re-exports them; the generated code refers only to `::workflow_runtime::__private`.
//!
//! The macros lower their DSL to a `workflow_model::Definition` and run the same validator the
//! runtime runs on JSON definitions, so a bad transition is a compile error on the offending
//! token.

mod common;
#[cfg(test)]
mod robustness;
mod state_machine;
mod workflow;

use proc_macro::TokenStream;

#[doc = include_str!("../docs/state_machine.md")]
#[proc_macro_attribute]
pub fn state_machine(args: TokenStream, item: TokenStream) -> TokenStream {
    state_machine::state_machine(args.into(), item.into()).into()
}

#[doc = include_str!("../docs/workflow.md")]
#[proc_macro]
pub fn workflow(input: TokenStream) -> TokenStream {
    workflow::workflow(input.into()).into()
}
