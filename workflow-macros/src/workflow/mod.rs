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
            return crate::common::errors::in_source_order(all).into_compile_error();
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
            let mut output = crate::common::errors::in_source_order(error).into_compile_error();
            output.extend(expand::expand(&decl, None));
            output
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::workflow;

    #[test]
    fn a_valid_flowchart_expands_to_the_struct_and_the_glue() {
        let output = workflow(quote! {
            /// Approval.
            pub workflow Approval(Data) {
                check = decide(is_large);
                pay = task(pay_out);
                ask = task(ask_manager);

                start -> check;
                check.true -> ask -> pay;
                check.false -> pay;
            }
        })
        .to_string();
        assert!(!output.contains("compile_error"), "{output}");
        assert!(output.contains("pub struct Approval ;"), "{output}");
        assert!(output.contains(":: workflow_runtime :: __private :: Workflow for Approval"));
        assert!(output.contains("pub const NODE_CHECK : & 'static str = \"check\""));
        assert!(
            output.contains(". condition (\"is_large\" , :: workflow_runtime :: __private :: condition_takes_data :: < Self :: Data > (is_large))"),
            "{output}"
        );
        assert!(output.contains(". task (\"pay_out\""));
        assert!(output.contains(". task (\"ask_manager\""));
        assert!(output.contains("type Data = Data"));
        // Only hygienic paths: every runtime path is absolute.
        assert_eq!(
            output.matches("workflow_runtime").count(),
            output.matches(":: workflow_runtime :: __private").count()
        );
    }

    #[test]
    fn the_waiting_nodes_become_the_positions_of_a_migration() {
        let output = workflow(quote! {
            pub workflow Shipping(Data) {
                wait_payment = event("payment");
                pack = task(pack);
                cool_off = after(secs(60));
                hello = event("hello").trigger();

                start -> wait_payment -> pack -> cool_off;
                hello -> pack;
            }
        })
        .to_string();
        assert!(!output.contains("compile_error"), "{output}");
        let item = output
            .split("pub enum ShippingNode")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .unwrap_or_default();
        // Only the nodes an instance waits at: not the task, not the trigger.
        assert!(item.contains("WaitPayment ,"), "{item}");
        assert!(item.contains("CoolOff ,"), "{item}");
        assert!(!item.contains("Pack"), "{item}");
        assert!(!item.contains("Hello"), "{item}");
        assert!(output.contains("Positioned for Shipping"), "{output}");
        assert!(
            output.contains("ShippingNode :: WaitPayment => \"wait_payment\""),
            "{output}"
        );
        assert!(
            output.contains(
                "\"cool_off\" => :: core :: option :: Option :: Some (ShippingNode :: CoolOff)"
            ),
            "{output}"
        );
    }

    #[test]
    fn a_raw_workflow_name_gives_its_node_enum_a_plain_name() {
        let output = workflow(quote! {
            pub workflow r#type(Data) = sequence [wait = event("go")];
        })
        .to_string();
        assert!(!output.contains("compile_error"), "{output}");
        assert!(output.contains("pub enum typeNode"), "{output}");
    }

    #[test]
    fn errors_come_with_a_stub() {
        let output = workflow(quote! {
            workflow Approval(Data) {
                pay = task(pay_out);
                start -> pya;
            }
        })
        .to_string();
        assert_eq!(output.matches("compile_error").count(), 1, "{output}");
        assert!(output.contains("unknown node `pya`; did you mean `pay`?"));
        assert!(output.contains("pub struct Approval") || output.contains("struct Approval"));
        // The stub registers nothing but still names the user's fns.
        assert!(!output.contains(". task (\"pay_out\""));
        assert!(output.contains("let _ = (pay_out ,)"), "{output}");
    }

    #[test]
    fn a_bad_header_is_only_an_error() {
        let output = workflow(quote!(
            struct S;
        ))
        .to_string();
        assert!(output.starts_with(":: core :: compile_error !"), "{output}");
        assert!(!output.contains("struct S"));
    }
}
