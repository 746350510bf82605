//! `#[state_machine]`: parse (syn, spans kept) -> lower (model definition + span table) ->
//! validate (the shared `workflow_model::validate`) -> expand (or a stub with the errors).

mod expand;
mod lower;
mod parse;

use proc_macro2::TokenStream;

/// The whole macro on token streams (testable without a compiler).
pub(crate) fn state_machine(args: TokenStream, item: TokenStream) -> TokenStream {
    let output = expand_or_errors(args, item);
    crate::common::debug_print("#[state_machine]", &output);
    output
}

fn expand_or_errors(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = crate::common::Errors::default();
    let machine = match parse::parse(args, item, &mut errors) {
        Ok(machine) => machine,
        Err(error) => {
            let mut all = error;
            if let Some(more) = errors.into_error() {
                all.combine(more);
            }
            return crate::common::errors::in_source_order(all).into_compile_error();
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
            let mut output = crate::common::errors::in_source_order(error).into_compile_error();
            output.extend(expand::expand(&machine, None));
            output
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::state_machine;

    #[test]
    fn a_valid_machine_expands_to_the_enum_and_the_glue() {
        let output = state_machine(
            quote!(data = Order, initial = New),
            quote!(
                #[derive(Debug)]
                pub enum Flow {
                    #[on(go: event("go") => Done, when = ready)]
                    New,
                    Done,
                }
            ),
        )
        .to_string();
        assert!(!output.contains("compile_error"), "{output}");
        assert!(output.contains("pub enum Flow"));
        assert!(output.contains(":: workflow_runtime :: __private :: Workflow for Flow"));
        assert!(output.contains("pub const TRIGGER_GO"));
        assert!(
            output.contains(". condition (\"ready\" , :: workflow_runtime :: __private :: condition_takes_data :: < Self :: Data > (ready))"),
            "{output}"
        );
        // `Debug` is the user's: not derived twice.
        assert!(!output.contains(":: core :: fmt :: Debug"));
    }

    #[test]
    fn errors_come_with_the_enum_and_a_stub() {
        let output = state_machine(
            quote!(data = Order, initial = Nwe),
            quote!(
                enum Flow {
                    #[on(=> Dnoe, when = ready)]
                    New,
                    Done,
                }
            ),
        )
        .to_string();
        assert_eq!(output.matches("compile_error").count(), 2, "{output}");
        assert!(output.contains("did you mean `New`?"));
        assert!(output.contains("did you mean `Done`?"));
        assert!(output.contains("enum Flow"));
        // The stub registers nothing but still names the user's fns.
        assert!(!output.contains(". condition"));
        assert!(output.contains("let _ = (ready ,)"), "{output}");
    }

    #[test]
    fn an_empty_event_name_is_the_validators_error() {
        let output = state_machine(
            quote!(data = Order, initial = New),
            quote!(
                enum Flow {
                    #[on(go: event("") => Done)]
                    New,
                    Done,
                }
            ),
        )
        .to_string();
        assert_eq!(output.matches("compile_error").count(), 1, "{output}");
        assert!(
            output.contains("event name is empty; a stimulus name has 1 to 256 bytes"),
            "{output}"
        );
    }

    #[test]
    fn the_machine_takes_a_commit_strategy() {
        let machine = |commit| {
            state_machine(
                quote!(data = Order, initial = New, commit = #commit),
                quote!(
                    enum Flow {
                        #[on(go: event("go") => Done)]
                        New,
                        Done,
                    }
                ),
            )
            .to_string()
        };
        let output = machine(quote!(periodic(secs(5))));
        assert!(!output.contains("compile_error"), "{output}");
        assert!(
            output.contains(
                "definition . commit_strategy = :: core :: option :: Option :: Some (:: workflow_runtime :: __private :: model :: CommitStrategy :: Periodic { interval_ms : 5000u64 })"
            ),
            "{output}"
        );
        let output = machine(quote!(after_each_activty));
        assert!(
            output.contains("unknown commit strategy `after_each_activty`; expected one of `run_end`, `before_each_activity`, `after_each_activity`, `periodic`; did you mean `after_each_activity`?"),
            "{output}"
        );
    }

    #[test]
    fn not_an_enum_is_only_an_error() {
        let output = state_machine(
            quote!(data = D, initial = A),
            quote!(
                struct S;
            ),
        )
        .to_string();
        assert!(output.starts_with(":: core :: compile_error !"), "{output}");
        assert!(!output.contains("struct S"));
    }
}
