//! `#[state_machine]`: parse (syn, spans kept) -> lower (model definition + span table) ->
//! validate (the shared `workflow_model::validate`) -> expand (or a stub with the errors).

mod expand;
mod lower;
mod parse;

use proc_macro2::TokenStream;

/// The whole macro on token streams (testable without a compiler).
pub(crate) fn state_machine(args: TokenStream, item: TokenStream) -> TokenStream {
    let output = expand_or_errors(args, item);
    debug_print(&output);
    output
}

fn expand_or_errors(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = parse::Errors::default();
    let machine = match parse::parse(args, item, &mut errors) {
        Ok(machine) => machine,
        Err(error) => {
            let mut all = error;
            if let Some(more) = errors.into_error() {
                all.combine(more);
            }
            return all.into_compile_error();
        }
    };
    let syntax_errors = !errors.is_empty();
    let lowered = lower::lower(&machine);
    if let Some(validation) = lower::validate(&lowered, syntax_errors) {
        errors.push(validation);
    }
    match errors.into_error() {
        None => expand::expand(&machine, Some(&lowered.definition)),
        Some(error) => {
            let mut output = error.into_compile_error();
            output.extend(expand::expand(&machine, None));
            output
        }
    }
}

/// `WORKFLOW_MACROS_DEBUG=1` prints every expansion to stderr.
#[allow(clippy::print_stderr)] // printing is the point of this switch
fn debug_print(output: &TokenStream) {
    if std::env::var_os("WORKFLOW_MACROS_DEBUG").is_some_and(|v| v == "1") {
        eprintln!("#[state_machine] expansion:\n{output}");
    }
}
