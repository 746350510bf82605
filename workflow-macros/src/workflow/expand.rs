//! Expansion: a unit struct implementing `Workflow`, all hygienic
//! (`::workflow_runtime::__private::...`, `::core`, `::std` only).
//!
//! What is emitted for `pub workflow Expense(ExpenseData) { .. }`:
//!
//! - `pub struct Expense;` with the user's attributes (the doc comment), deriving `Debug`,
//!   `Clone`, `Copy` and `Default` unless the user already derives them;
//! - `impl Workflow for Expense` (`type Data = ExpenseData`; `name()`; `definition()` loaded
//!   once from the JSON the macro computed; `version()` = the fingerprint computed at compile
//!   time; `registry()` with every task (`registry.task`) and every decision or switch
//!   condition (`registry.condition`), each call spanned on the user's path so that a type
//!   error lands there);
//! - inherent items: `NODES` (the top-level node ids in declaration order), `NODE_{ID}` for
//!   each of them (in `SCREAMING_SNAKE_CASE`), `mermaid()` and `dot()` computed at compile time;
//! - a check that each `workflow(Type)` child implements `Workflow`.
//!
//! With errors, the same items are emitted over an empty flowchart and an empty registry, so a
//! mistake in the workflow does not cascade into unrelated errors.

use std::collections::HashSet;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use workflow_model::{Definition, Flowchart};

use super::lower::{step_id, workflow_name};
use super::parse::{Body, KindDecl, StepDecl, SubWorkflowRef, WorkflowDecl};
use crate::common::expand::{diagram_fns, push_const, register_task, type_exists_checks};
use crate::common::parse::{FnRef, existing_derives};

/// The emitted code. `definition` is `None` when there were errors (the stub).
pub(crate) fn expand(decl: &WorkflowDecl, definition: Option<&Definition>) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let ident = &decl.ident;
    let vis = &decl.vis;
    let attrs = &decl.attrs;
    let data = &decl.data;
    let mut tasks = Vec::new();
    let mut conditions = Vec::new();
    let mut children = Vec::new();
    let mut durations = Vec::new();
    for kind in kinds(decl) {
        collect(
            kind,
            &mut tasks,
            &mut conditions,
            &mut children,
            &mut durations,
        );
    }
    let stub;
    let (definition, registry) = match definition {
        Some(definition) => (
            definition,
            registry(&tasks, &conditions, &choosing_events(decl)),
        ),
        None => {
            stub = Definition::new(
                workflow_name(decl),
                Flowchart {
                    id: "root".to_owned(),
                    ..Flowchart::default()
                },
            );
            // The fns are named but not registered: an unknown name is still reported (it is
            // the user's mistake), a type mismatch is not (it may only echo another error).
            let paths = tasks.iter().chain(&conditions).map(|f| &f.path);
            (
                &stub,
                quote!({
                    let _ = (#(#paths,)*);
                    #private::Registry::new()
                }),
            )
        }
    };
    let name = &definition.name;
    let version = definition.fingerprint();
    let diagrams = diagram_fns(
        definition,
        "The workflow as a Mermaid flowchart, computed at compile time.",
        "The workflow as a Graphviz DOT digraph, computed at compile time.",
    );
    let json = definition.to_json_pretty();

    let have = existing_derives(attrs);
    let derives: Vec<TokenStream> = [
        ("Debug", quote!(::core::fmt::Debug)),
        ("Clone", quote!(::core::clone::Clone)),
        ("Copy", quote!(::core::marker::Copy)),
        ("Default", quote!(::core::default::Default)),
    ]
    .into_iter()
    .filter(|(name, _)| !have.iter().any(|h| h == name))
    .map(|(_, path)| path)
    .collect();
    let derive = (!derives.is_empty()).then(|| quote!(#[derive(#(#derives),*)]));

    let (ids, consts) = node_constants(decl);
    let children = children.into_iter().map(|path| {
        let check = quote_spanned!(path.span()=> __is_workflow::<#path>);
        quote! {
            const _: () = {
                fn __is_workflow<W: #private::Workflow>() {}
                let _ = #check;
            };
        }
    });
    let durations = type_exists_checks(durations);

    quote! {
        #(#attrs)*
        #derive
        #vis struct #ident;

        #(#children)*
        #durations

        #[allow(dead_code)]
        impl #ident {
            /// The ids of the top-level nodes (or steps), in declaration order.
            pub const NODES: &'static [&'static str] = &[#(#ids),*];
            #consts
            #diagrams
        }

        impl #private::Workflow for #ident {
            type Data = #data;

            fn name() -> &'static str {
                #name
            }

            #[allow(clippy::panic)]
            fn definition() -> &'static #private::model::Definition {
                static DEFINITION: ::std::sync::OnceLock<#private::model::Definition> =
                    ::std::sync::OnceLock::new();
                DEFINITION.get_or_init(|| {
                    match #private::serde_json::from_str::<#private::model::Definition>(#json) {
                        ::core::result::Result::Ok(definition) => definition,
                        ::core::result::Result::Err(error) => ::core::panic!(
                            "internal error: the definition generated by `workflow!` does not load: {}",
                            error
                        ),
                    }
                })
            }

            fn version() -> &'static str {
                #version
            }

            fn registry() -> #private::Registry<Self::Data> {
                #registry
            }
        }
    }
}

/// The kinds of the top-level nodes or steps.
fn kinds(decl: &WorkflowDecl) -> Vec<&KindDecl> {
    match &decl.body {
        Body::Flowchart { nodes, .. } => nodes.iter().map(|n| &n.kind).collect(),
        Body::Sequence { steps, .. } => steps.iter().map(|s| &s.kind).collect(),
    }
}

/// The user fns, child workflow types and `Duration` types named by `kind` and its steps.
fn collect<'a>(
    kind: &'a KindDecl,
    tasks: &mut Vec<&'a FnRef>,
    conditions: &mut Vec<&'a FnRef>,
    children: &mut Vec<&'a syn::Path>,
    durations: &mut Vec<&'a syn::Path>,
) {
    match kind {
        KindDecl::Task {
            function, options, ..
        } => {
            tasks.push(function);
            // A compensation runs as a task (FLT-11): registered like one.
            tasks.extend(options.compensate.as_ref());
        }
        KindDecl::Decide { condition } => conditions.push(condition),
        KindDecl::Switch { cases } => conditions.extend(cases.iter().map(|(_, c)| c)),
        KindDecl::Workflow(SubWorkflowRef::Type(path), _) => children.push(path),
        KindDecl::After {
            duration_type: Some(ty),
            ..
        } => durations.push(ty),
        KindDecl::Sequence { steps } | KindDecl::Saga { steps, .. } => {
            for step in steps {
                collect(&step.kind, tasks, conditions, children, durations);
            }
        }
        _ => {}
    }
}

/// `NODES` and `NODE_{ID}`; a constant that would repeat one already emitted is skipped (the
/// validator reports real duplicates, FC-V1).
fn node_constants(decl: &WorkflowDecl) -> (Vec<String>, TokenStream) {
    let ids: Vec<String> = match &decl.body {
        Body::Flowchart { nodes, .. } => nodes
            .iter()
            .map(|n| syn::ext::IdentExt::unraw(&n.id).to_string())
            .collect(),
        Body::Sequence { steps, .. } => steps
            .iter()
            .enumerate()
            .map(|(i, s): (usize, &StepDecl)| step_id(s, i))
            .collect(),
    };
    let mut seen = HashSet::new();
    let mut out = TokenStream::new();
    for id in &ids {
        push_const(&mut out, &mut seen, "NODE", id, "The id of the node");
    }
    (ids, out)
}

/// `(node id, payload type)` of every event that declares its ports, nested steps included.
fn choosing_events(decl: &WorkflowDecl) -> Vec<(String, &syn::Type)> {
    fn walk<'a>(id: String, kind: &'a KindDecl, out: &mut Vec<(String, &'a syn::Type)>) {
        match kind {
            KindDecl::Event {
                payload: Some(ty),
                ports: Some(_),
                ..
            } => out.push((id, ty)),
            KindDecl::Sequence { steps } => {
                for (i, step) in steps.iter().enumerate() {
                    walk(step_id(step, i), &step.kind, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    match &decl.body {
        Body::Flowchart { nodes, .. } => {
            for node in nodes {
                walk(
                    syn::ext::IdentExt::unraw(&node.id).to_string(),
                    &node.kind,
                    &mut out,
                );
            }
        }
        Body::Sequence { steps, .. } => {
            for (i, step) in steps.iter().enumerate() {
                walk(step_id(step, i), &step.kind, &mut out);
            }
        }
    }
    out
}

/// The registration of an event's outcome mapping (ACT-19) under the payload type's name as
/// the definition records it, through a bound that makes rustc report ACT-V8 on the type.
fn register_outcome(id: &str, ty: &syn::Type) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let name = quote::ToTokens::to_token_stream(ty)
        .to_string()
        .replace(' ', "");
    let message = format!(
        "event `{id}` declares outcomes but its payload type `{{Self}}` does not choose one"
    );
    let call = quote_spanned!(ty.span()=> __outcome::<_, #ty>);
    quote! {
        let registry = {
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "this payload type does not implement `ChooseOutcome`",
                note = "implement `workflow_runtime::ChooseOutcome` for it to choose among the event's declared ports (ACT-V8)"
            )]
            trait __ChoosesOutcome: #private::ChooseOutcome {}
            impl<T: #private::ChooseOutcome + ?::core::marker::Sized> __ChoosesOutcome for T {}
            fn __outcome<D, T>(registry: #private::Registry<D>, name: &str) -> #private::Registry<D>
            where
                D: ::core::marker::Send + ::core::marker::Sync + 'static,
                T: __ChoosesOutcome + #private::serde::de::DeserializeOwned + 'static,
            {
                registry.outcome::<T>(name)
            }
            #call(registry, #name)
        };
    }
}

/// The registry: each user fn once per name, each event's outcome mapping once per type.
fn registry(
    tasks: &[&FnRef],
    conditions: &[&FnRef],
    events: &[(String, &syn::Type)],
) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let mut seen = HashSet::new();
    let mut calls = TokenStream::new();
    for task in tasks {
        if seen.insert(task.name()) {
            calls.extend(register_task(task));
        }
    }
    let mut seen = HashSet::new();
    for condition in conditions {
        let name = condition.name();
        if seen.insert(name.clone()) {
            let path = &condition.path;
            calls.extend(quote_spanned!(path.span()=> .condition(#name, #path)));
        }
    }
    let mut seen = HashSet::new();
    let outcomes: Vec<TokenStream> = events
        .iter()
        .filter(|(_, ty)| seen.insert(quote::ToTokens::to_token_stream(*ty).to_string()))
        .map(|(id, ty)| register_outcome(id, ty))
        .collect();
    quote!({
        let registry = #private::Registry::<Self::Data>::new() #calls;
        #(#outcomes)*
        registry
    })
}
