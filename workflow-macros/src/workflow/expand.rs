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
//! - a check that each `workflow(Type)` child implements `Workflow`;
//! - `pub enum ExpenseNode` with one variant per top-level node (or step) where an instance
//!   waits and can be migrated (ENG-55: a non-trigger `event`, `after`, `start_at` or `cron`),
//!   named in `UpperCamelCase` and spanned on the node's id, and `impl Positioned for
//!   Expense` naming them both ways: a `Migrate` between two versions is a `match` rustc checks.
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
use crate::common::expand::{
    EventSend, diagram_fns, field_checks, payload_type_checks, push_const, register_task,
    stimulus_constructors, type_exists_checks,
};
use crate::common::parse::{AssignDecl, FieldPath, FnRef, existing_derives};

/// The emitted code. `definition` is `None` when there were errors (the stub).
pub(crate) fn expand(decl: &WorkflowDecl, definition: Option<&Definition>) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let ident = &decl.ident;
    let vis = &decl.vis;
    let attrs = &decl.attrs;
    let data = &decl.data;
    let mut uses = Uses::default();
    for (id, kind) in kinds(decl) {
        uses.collect(id, kind);
    }
    let stub;
    let stub_only = definition.is_none();
    let (definition, registry) = match definition {
        Some(definition) => (definition, registry(&uses)),
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
            let paths = uses.fns().map(|f| &f.path);
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
    let children = uses.children.iter().map(|path| {
        let check = quote_spanned!(path.span()=> __is_workflow::<#path>);
        quote! {
            const _: () = {
                fn __is_workflow<W: #private::Workflow>() {}
                let _ = #check;
            };
        }
    });
    let durations = type_exists_checks(uses.durations.iter().copied());
    let mut queue_paths = uses.queues.clone();
    queue_paths.extend(decl.options.queue.as_ref());
    let queues = crate::common::queues::queue_code(&queue_paths);
    let queue_consts = &queues.consts;
    // QU-10: the stand-in names of the queues are replaced by theirs when the definition is
    // first built; the version is then the fingerprint of that definition.
    let (load_queues, version_fn, queues_fn) = if queues.any && !stub_only {
        let names = &queues.names;
        let list = &queues.list;
        (
            quote!(let definition = #private::resolve_queues(definition, #names);),
            quote! {
                fn version() -> &'static str {
                    static VERSION: ::std::sync::OnceLock<::std::string::String> =
                        ::std::sync::OnceLock::new();
                    VERSION.get_or_init(|| <Self as #private::Workflow>::definition().fingerprint())
                }
            },
            quote! {
                fn queues() -> ::std::vec::Vec<#private::model::Queue> {
                    #list
                }
            },
        )
    } else {
        (
            TokenStream::new(),
            quote! {
                fn version() -> &'static str {
                    #version
                }
            },
            TokenStream::new(),
        )
    };
    let payload_types = payload_type_checks(&uses.sends);
    let sends = stimulus_constructors(&uses.sends);
    let positions = positions(decl);

    quote! {
        #(#attrs)*
        #derive
        #vis struct #ident;

        #(#children)*
        #durations
        #payload_types

        #[allow(dead_code)]
        impl #ident {
            /// The ids of the top-level nodes (or steps), in declaration order.
            pub const NODES: &'static [&'static str] = &[#(#ids),*];
            #consts
            #queue_consts
            #diagrams
            #sends
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
                    let definition = match #private::serde_json::from_str::<#private::model::Definition>(#json) {
                        ::core::result::Result::Ok(definition) => definition,
                        ::core::result::Result::Err(error) => ::core::panic!(
                            "internal error: the definition generated by `workflow!` does not load: {}",
                            error
                        ),
                    };
                    #load_queues
                    definition
                })
            }

            #version_fn

            fn registry() -> #private::Registry<Self::Data> {
                #registry
            }

            #queues_fn
        }

        #positions
    }
}

/// Whether an instance can wait at a node of this kind and be migrated there (ENG-55): the
/// node's own execution is its wait, so running it again in the new version re-arms it.
fn waits(kind: &KindDecl) -> bool {
    match kind {
        KindDecl::Event(node) => !node.event.trigger,
        KindDecl::After { .. } => true,
        KindDecl::StartAt { trigger, .. } | KindDecl::Cron { trigger, .. } => !trigger,
        _ => false,
    }
}

/// `snake_case` (or any id) to `UpperCamelCase`: `wait_payment` is `WaitPayment`.
fn upper_camel(id: &str) -> String {
    id.split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

/// `<Name>Node` and `impl Positioned` (ENG-55), see the module docs. A variant whose name would
/// repeat another's (or is not an identifier) is left out.
fn positions(decl: &WorkflowDecl) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let ident = &decl.ident;
    let vis = &decl.vis;
    // `r#type` names `typeNode`: a raw identifier's `r#` is no part of the name.
    let base = syn::ext::IdentExt::unraw(ident);
    let enum_ident = syn::Ident::new(&format!("{base}Node"), ident.span());
    let waiting: Vec<(String, proc_macro2::Span)> = match &decl.body {
        Body::Flowchart { nodes, .. } => nodes
            .iter()
            .filter(|n| waits(&n.kind))
            .map(|n| (syn::ext::IdentExt::unraw(&n.id).to_string(), n.id.span()))
            .collect(),
        Body::Sequence { steps } => steps
            .iter()
            .enumerate()
            .filter(|(_, s)| waits(&s.kind))
            .map(|(i, s)| {
                let span =
                    s.id.as_ref()
                        .map_or_else(proc_macro2::Span::call_site, syn::Ident::span);
                (step_id(s, i), span)
            })
            .collect(),
    };
    let mut seen = HashSet::new();
    let mut variants = Vec::new();
    let mut names = Vec::new();
    let mut docs = Vec::new();
    for (id, span) in waiting {
        let name = upper_camel(&id);
        if syn::parse_str::<syn::Ident>(&name).is_err() || !seen.insert(name.clone()) {
            continue;
        }
        variants.push(syn::Ident::new(&name, span));
        docs.push(format!("Waiting at node `{id}`."));
        names.push(id);
    }
    let doc = format!(
        "The nodes of [`{ident}`] where an instance waits, for a `Migrate` between versions (ENG-55)."
    );
    // Spanned on the workflow's name: rustc's notes on the enum (a variant not found, one
    // not covered) point there.
    let item = quote_spanned! {ident.span()=>
        #[doc = #doc]
        #[derive(
            ::core::fmt::Debug,
            ::core::clone::Clone,
            ::core::marker::Copy,
            ::core::cmp::PartialEq,
            ::core::cmp::Eq,
            ::core::hash::Hash
        )]
        #vis enum #enum_ident {
            #(#[doc = #docs] #variants,)*
        }
    };
    quote! {
        #item

        impl #private::Positioned for #ident {
            type Position = #enum_ident;

            fn position_name(position: #enum_ident) -> &'static str {
                match position {
                    #(#enum_ident::#variants => #names,)*
                }
            }

            fn position_from_name(name: &str) -> ::core::option::Option<#enum_ident> {
                match name {
                    #(#names => ::core::option::Option::Some(#enum_ident::#variants),)*
                    _ => ::core::option::Option::None,
                }
            }
        }
    }
}

/// The ids and kinds of the top-level nodes or steps.
fn kinds(decl: &WorkflowDecl) -> Vec<(String, &KindDecl)> {
    match &decl.body {
        Body::Flowchart { nodes, .. } => nodes
            .iter()
            .map(|n| (syn::ext::IdentExt::unraw(&n.id).to_string(), &n.kind))
            .collect(),
        Body::Sequence { steps, .. } => steps
            .iter()
            .enumerate()
            .map(|(i, s)| (step_id(s, i), &s.kind))
            .collect(),
    }
}

/// Everything user code the declaration names, nested steps included.
#[derive(Default)]
struct Uses<'a> {
    tasks: Vec<&'a FnRef>,
    conditions: Vec<&'a FnRef>,
    items: Vec<&'a FnRef>,
    values: Vec<&'a FnRef>,
    /// `.assign_with(fn)`: the fn and the event's payload type.
    assign_fns: Vec<(&'a FnRef, &'a syn::Type)>,
    /// `.assign(field)`: the field and the event's payload type.
    assign_fields: Vec<(&'a FieldPath, &'a syn::Type)>,
    /// `.key(path)`, of events and of tasks in a queue.
    keys: Vec<&'a FieldPath>,
    /// `.queue(PATH)` of tasks, and the workflow's `queue = PATH`.
    queues: Vec<&'a syn::Path>,
    /// `(node id, payload type)` of every event that declares its ports.
    choosing: Vec<(String, &'a syn::Type)>,
    children: Vec<&'a syn::Path>,
    durations: Vec<&'a syn::Path>,
    /// `.assign_with(fn)` of a sub-workflow: the child's output type is the fn's.
    sub_assigns: Vec<&'a FnRef>,
    /// Every event, for its typed stimulus constructor.
    sends: Vec<EventSend<'a>>,
}

impl<'a> Uses<'a> {
    /// Every user fn, for the stub that names them without registering them.
    fn fns(&self) -> impl Iterator<Item = &'a FnRef> + '_ {
        self.tasks
            .iter()
            .chain(&self.conditions)
            .chain(&self.items)
            .chain(&self.values)
            .chain(&self.sub_assigns)
            .copied()
            .chain(self.assign_fns.iter().map(|(f, _)| *f))
    }

    fn steps(&mut self, steps: &'a [StepDecl]) {
        for (i, step) in steps.iter().enumerate() {
            self.collect(step_id(step, i), &step.kind);
        }
    }

    fn collect(&mut self, id: String, kind: &'a KindDecl) {
        match kind {
            KindDecl::Task {
                function, options, ..
            } => {
                self.tasks.push(function);
                // A compensation runs as a task (FLT-11): registered like one.
                self.tasks.extend(options.compensate.as_ref());
                self.queues.extend(options.queue.as_ref());
                self.keys.extend(options.key.as_ref());
            }
            KindDecl::Event(node) => {
                let event: &'a crate::common::event::EventDecl = &node.event;
                self.keys.extend(event.key.as_ref());
                self.sends.push(EventSend::of(event));
                if let Some(ty) = &event.payload {
                    if node.ports.is_some() {
                        self.choosing.push((id, ty));
                    }
                    match &event.assign {
                        Some(AssignDecl::Field(path)) => self.assign_fields.push((path, ty)),
                        Some(AssignDecl::Function(f)) => self.assign_fns.push((f, ty)),
                        None => {}
                    }
                }
            }
            KindDecl::Decide { condition } => self.conditions.push(condition),
            KindDecl::Switch { cases, .. } => {
                self.conditions.extend(cases.iter().map(|(_, c)| c));
            }
            KindDecl::StructuredSwitch { cases, default, .. } => {
                for (_, condition, body) in cases {
                    self.conditions.push(condition);
                    self.steps(body);
                }
                if let Some(body) = default {
                    self.steps(body);
                }
            }
            KindDecl::If {
                condition,
                then,
                otherwise,
            } => {
                self.conditions.push(condition);
                self.steps(then);
                if let Some(body) = otherwise {
                    self.steps(body);
                }
            }
            KindDecl::While { condition, body } => {
                self.conditions.push(condition);
                self.steps(body);
            }
            KindDecl::ForEach { items, body } | KindDecl::ParallelForEach { items, body, .. } => {
                self.items.push(items);
                self.steps(body);
            }
            KindDecl::Parallel { branches, .. } => self.steps(branches),
            KindDecl::Set { value, .. } => self.values.push(value),
            KindDecl::Correlate { key } => self.values.push(key),
            KindDecl::Finish { output: Some(f) } => self.values.push(f),
            KindDecl::Workflow(child, options) => {
                if let SubWorkflowRef::Type(path) = child {
                    self.children.push(path);
                }
                self.values.extend(options.input.as_ref());
                self.sub_assigns.extend(options.assign.as_ref());
            }
            KindDecl::After {
                duration_type: Some(ty),
                ..
            } => self.durations.push(ty),
            KindDecl::Sequence { steps } | KindDecl::Saga { steps, .. } => self.steps(steps),
            _ => {}
        }
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

/// The registry: each user fn once per name, each event's outcome mapping once per type;
/// before it, the checks that make rustc type-check key and assign field paths against the
/// data and payload types (never run).
fn registry(uses: &Uses<'_>) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let mut calls = TokenStream::new();
    let mut seen = HashSet::new();
    for task in &uses.tasks {
        if seen.insert(task.name()) {
            calls.extend(register_task(task));
        }
    }
    // Each fn goes through the `__private` check named for what it checks (the check spanned
    // on the user's path: a type error lands there, its note naming the check); `typed` when
    // the check is also generic over what the fn returns or takes besides the data.
    let mut register = |fns: &[&FnRef], method: &str, check: &str, typed: bool| {
        let mut seen = HashSet::new();
        for f in fns {
            let name = f.name();
            if seen.insert(name.clone()) {
                let path = &f.path;
                let method = syn::Ident::new(method, path.span());
                let check = syn::Ident::new(check, path.span());
                let generics = if typed {
                    quote_spanned!(path.span()=> ::<Self::Data, _>)
                } else {
                    quote_spanned!(path.span()=> ::<Self::Data>)
                };
                calls.extend(quote_spanned!(path.span()=>
                    .#method(#name, ::workflow_runtime::__private::#check #generics(#path))
                ));
            }
        }
    };
    register(&uses.conditions, "condition", "condition_takes_data", false);
    register(
        &uses.items,
        "items",
        "for_each_takes_data_returns_a_vec",
        true,
    );
    register(&uses.values, "value", "value_takes_data", true);
    register(
        &uses.sub_assigns,
        "assign",
        "assign_with_takes_data_and_child_output",
        true,
    );
    let mut seen = HashSet::new();
    for (f, ty) in &uses.assign_fns {
        let name = f.name();
        if seen.insert(name.clone()) {
            let path = &f.path;
            calls.extend(quote_spanned!(path.span()=>
                .assign::<#ty, _>(
                    #name,
                    ::workflow_runtime::__private::assign_with_takes_data_and_payload::<Self::Data, #ty>(#path),
                )
            ));
        }
    }
    let mut seen = HashSet::new();
    let outcomes: Vec<TokenStream> = uses
        .choosing
        .iter()
        .filter(|(_, ty)| seen.insert(quote::ToTokens::to_token_stream(*ty).to_string()))
        .map(|(id, ty)| register_outcome(id, ty))
        .collect();
    let checks = field_checks(&uses.keys, &uses.assign_fields);
    quote!({
        #checks
        let registry = #private::Registry::<Self::Data>::new() #calls;
        #(#outcomes)*
        registry
    })
}
