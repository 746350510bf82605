//! `workflow!`: parse (syn, spans kept) -> lower (model definition + span table) -> validate
//! (the shared `workflow_model::validate`) -> expand (or a stub with the errors).

mod expand;
mod lower;
mod parse;

use proc_macro2::TokenStream;

use crate::common::Errors;

/// The whole macro on token streams (testable without a compiler).
pub(crate) fn workflow(input: TokenStream) -> TokenStream {
    let output = expand_or_errors(input);
    crate::common::debug_print("workflow!", &output);
    output
}

fn expand_or_errors(input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let decl = match parse::parse(input, &mut errors) {
        Ok(decl) => decl,
        Err(error) => {
            let mut all = error;
            if let Some(more) = errors.into_error() {
                all.combine(more);
            }
            return all.into_compile_error();
        }
    };
    let syntax_errors = !errors.is_empty();
    let lowered = lower::lower(&decl);
    let broken: &[String] = match &decl.body {
        parse::Body::Flowchart { broken, .. } => broken,
        parse::Body::Sequence { .. } => &[],
    };
    if let Some(validation) = lower::validate(&lowered, syntax_errors, broken) {
        errors.push(validation);
    }
    match errors.into_error() {
        None => expand::expand(&decl, Some(&lowered.definition)),
        Some(error) => {
            let mut output = error.into_compile_error();
            output.extend(expand::expand(&decl, None));
            output
        }
    }
}
