//! Expansion: the enum, kept as the typed state, and the runtime glue, all hygienic
//! (`::workflow_runtime::__private::...`, `::core`, `::std` only).
//!
//! What is emitted for `enum OrderFlow`:
//!
//! - the enum itself, with `Clone`, `Copy`, `PartialEq`, `Eq` and `Debug` derived unless the
//!   user already derives them, and `Serialize`/`Deserialize` implemented as the state name;
//! - `impl Workflow for OrderFlow` (`type Data` = the `data` option; `name()`, `definition()`
//!   built once, `version()` = the fingerprint computed at compile time, `registry()` with
//!   the user's fns, each call spanned on the user's path so a type error lands there);
//! - `impl StateMachineWorkflow for OrderFlow` (`type State = Self`, names both ways);
//! - inherent items: `STATES`, `TRANSITION_{NAME}` for each named transition,
//!   `TRIGGER_{ID}` for each trigger id (in `SCREAMING_SNAKE_CASE`), `mermaid()` and `dot()`
//!   computed at compile time.
//!
//! With errors, the same items are emitted over a minimal definition (the states only) and an
//! empty registry, so a mistake in the machine does not cascade into unrelated errors.

use std::collections::HashSet;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use workflow_model::{Activity, Definition, State, StateMachine};

use super::lower::base_id;
use super::parse::{Machine, TriggerDecl};
use crate::common::expand::{EventSend, diagram_fns, push_const, type_exists_checks};
use crate::common::parse::existing_derives;
use crate::common::parse::{AssignDecl, FnRef};

/// The emitted code. `definition` is `None` when there were errors (the stub).
pub(crate) fn expand(machine: &Machine, definition: Option<&Definition>) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let ident = &machine.item.ident;
    let stub;
    let stub_only = definition.is_none();
    let (definition, registry) = match definition {
        Some(definition) => (definition, registry(machine)),
        None => {
            stub = stub_definition(machine);
            // The fns are named but not registered: an unknown name is still reported (it is
            // the user's mistake), a type mismatch is not (it may only echo another error).
            let paths = user_fns(machine);
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
        "The machine as a Mermaid `stateDiagram-v2`, computed at compile time.",
        "The machine as a Graphviz DOT digraph, computed at compile time.",
    );
    let build = definition_tokens(definition);
    let data = machine
        .options
        .data
        .as_ref()
        .map_or_else(|| quote!(()), |ty| quote!(#ty));

    let mut item = machine.item.clone();
    if stub_only {
        // What the errors said is wrong is dropped, so that it is reported once.
        item.generics = syn::Generics::default();
        for variant in &mut item.variants {
            variant.fields = syn::Fields::Unit;
        }
    }
    let have = existing_derives(&item.attrs);
    let derives: Vec<TokenStream> = [
        ("Clone", quote!(::core::clone::Clone)),
        ("Copy", quote!(::core::marker::Copy)),
        ("PartialEq", quote!(::core::cmp::PartialEq)),
        ("Eq", quote!(::core::cmp::Eq)),
        ("Debug", quote!(::core::fmt::Debug)),
    ]
    .into_iter()
    .filter(|(name, _)| !have.iter().any(|h| h == name))
    .map(|(_, path)| path)
    .collect();
    if !derives.is_empty() {
        item.attrs.push(syn::parse_quote!(#[derive(#(#derives),*)]));
    }

    let variants: Vec<&syn::Ident> = machine.states.iter().map(|s| &s.ident).collect();
    let names: Vec<String> = machine
        .states
        .iter()
        .map(super::parse::StateDecl::name)
        .collect();
    let consts = constants(machine);
    let serialize = serde_impls(ident, &names, &have);
    let duration_types = machine
        .states
        .iter()
        .flat_map(|s| &s.transitions)
        .filter_map(|t| match &t.trigger {
            Some(TriggerDecl::After {
                duration_type: Some(ty),
                ..
            }) => Some(ty),
            _ => None,
        });
    let duration_types = type_exists_checks(duration_types);
    let mut queue_paths: Vec<&syn::Path> = task_options(machine)
        .into_iter()
        .filter_map(|o| o.queue.as_ref())
        .collect();
    queue_paths.extend(machine.options.queue.as_ref());
    let queues = crate::common::queues::queue_code(&queue_paths);
    let queue_consts = &queues.consts;
    // QU-10: the stand-in names of the queues are replaced by theirs when the definition is
    // first built; the version is then the fingerprint of that definition.
    let (build, version_fn, queues_fn) = if queues.any && !stub_only {
        let names = &queues.names;
        let list = &queues.list;
        (
            quote!(#private::resolve_queues(#build, #names)),
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
            build,
            quote! {
                fn version() -> &'static str {
                    #version
                }
            },
            TokenStream::new(),
        )
    };
    let sends: Vec<EventSend<'_>> = machine
        .states
        .iter()
        .flat_map(|s| &s.transitions)
        .filter_map(|t| match &t.trigger {
            Some(TriggerDecl::Event { event, .. }) => Some(EventSend::of(event)),
            _ => None,
        })
        .collect();
    let payload_types = crate::common::expand::payload_type_checks(&sends);
    let sends = crate::common::expand::stimulus_constructors(&sends);

    quote! {
        #item

        #duration_types

        #payload_types

        #[allow(dead_code)]
        impl #ident {
            /// Every state, in declaration order.
            pub const STATES: &'static [Self] = &[#(Self::#variants),*];
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

            fn definition() -> &'static #private::model::Definition {
                static DEFINITION: ::std::sync::OnceLock<#private::model::Definition> =
                    ::std::sync::OnceLock::new();
                DEFINITION.get_or_init(|| #build)
            }

            #version_fn

            fn registry() -> #private::Registry<Self::Data> {
                #registry
            }

            #queues_fn
        }

        impl #private::StateMachineWorkflow for #ident {
            type State = Self;

            fn state_name(state: Self) -> &'static str {
                match state {
                    #(Self::#variants => #names,)*
                }
            }

            fn state_from_name(name: &str) -> ::core::option::Option<Self> {
                match name {
                    #(#names => ::core::option::Option::Some(Self::#variants),)*
                    _ => ::core::option::Option::None,
                }
            }
        }

        #serialize
    }
}

/// `Serialize` and `Deserialize` by state name, except those the user derives (an error
/// already says to remove that derive; a second, conflicting impl would only repeat it).
fn serde_impls(ident: &syn::Ident, names: &[String], have: &[String]) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let mut out = TokenStream::new();
    if !have.iter().any(|h| h == "Serialize") {
        out.extend(quote! {
        impl #private::serde::Serialize for #ident {
            fn serialize<__S>(&self, serializer: __S) -> ::core::result::Result<__S::Ok, __S::Error>
            where
                __S: #private::serde::Serializer,
            {
                serializer.serialize_str(
                    <Self as #private::StateMachineWorkflow>::state_name(*self),
                )
            }
        }
        });
    }
    if !have.iter().any(|h| h == "Deserialize") {
        out.extend(quote! {
        impl<'de> #private::serde::Deserialize<'de> for #ident {
            fn deserialize<__D>(deserializer: __D) -> ::core::result::Result<Self, __D::Error>
            where
                __D: #private::serde::Deserializer<'de>,
            {
                const NAMES: &[&str] = &[#(#names),*];
                let name = <::std::string::String as #private::serde::Deserialize>::deserialize(
                    deserializer,
                )?;
                match <Self as #private::StateMachineWorkflow>::state_from_name(&name) {
                    ::core::option::Option::Some(state) => ::core::result::Result::Ok(state),
                    ::core::option::Option::None => ::core::result::Result::Err(
                        <__D::Error as #private::serde::de::Error>::unknown_variant(&name, NAMES),
                    ),
                }
            }
        }
        });
    }
    out
}

/// The states alone: what a machine with errors still exposes.
fn stub_definition(machine: &Machine) -> Definition {
    let states: Vec<State> = machine
        .states
        .iter()
        .map(|s| State::new(s.name()))
        .collect();
    let initial = states.first().map(|s| s.name.clone()).unwrap_or_default();
    Definition::new(
        super::lower::workflow_name(machine),
        StateMachine {
            id: "root".to_owned(),
            initial,
            states,
            transitions: Vec::new(),
        },
    )
}

/// `TRANSITION_PAY`, `TRIGGER_PAY`, ...; a name that would repeat one already emitted is
/// skipped (the validator reports real duplicates, SM-C3).
fn constants(machine: &Machine) -> TokenStream {
    let mut seen = HashSet::new();
    let mut out = TokenStream::new();
    let mut index = 0usize;
    for state in &machine.states {
        for transition in &state.transitions {
            if let Some(name) = &transition.name {
                let value = syn::ext::IdentExt::unraw(name).to_string();
                push_const(
                    &mut out,
                    &mut seen,
                    "TRANSITION",
                    &value,
                    "The transition named",
                );
            }
            if transition.trigger.is_some() {
                let value = base_id(state, index, transition);
                push_const(
                    &mut out,
                    &mut seen,
                    "TRIGGER",
                    &value,
                    "The id of the trigger",
                );
            }
            index += 1;
        }
    }
    out
}

/// Every user fn path, in declaration order.
fn user_fns(machine: &Machine) -> Vec<&syn::Path> {
    let mut out = Vec::new();
    for state in &machine.states {
        out.extend(state.entry.iter().map(|f| &f.path));
        out.extend(state.exit.iter().map(|f| &f.path));
        for transition in &state.transitions {
            if let Some(TriggerDecl::Task { function, .. }) = &transition.trigger {
                out.push(&function.path);
            }
            out.extend(transition.when.iter().map(|f| &f.path));
            out.extend(transition.action.iter().map(|f| &f.path));
        }
    }
    out
}

/// The options of every task the machine declares: entries, exits, task triggers, actions.
fn task_options(machine: &Machine) -> Vec<&crate::common::faults::TaskOptions> {
    let mut out = Vec::new();
    for state in &machine.states {
        out.push(&*state.entry_options);
        out.push(&*state.exit_options);
        for transition in &state.transitions {
            if let Some(TriggerDecl::Task { options, .. }) = &transition.trigger {
                out.push(&**options);
            }
            out.push(&*transition.action_options);
        }
    }
    out
}

/// The registry: each user fn once per name, each call spanned on the user's path.
fn registry(machine: &Machine) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let mut tasks: Vec<&FnRef> = Vec::new();
    let mut conditions: Vec<(&FnRef, Option<&syn::Type>)> = Vec::new();
    let mut keys = Vec::new();
    let mut assign_fields = Vec::new();
    let mut assign_fns: Vec<(&FnRef, &syn::Type)> = Vec::new();
    // QU-10: a task's partition key is a field of the data, checked like an event's key.
    keys.extend(
        task_options(machine)
            .into_iter()
            .filter_map(|o| o.key.as_ref()),
    );
    for state in &machine.states {
        tasks.extend(state.entry.iter());
        tasks.extend(state.exit.iter());
        // Compensations run as tasks (FLT-11): registered like them.
        tasks.extend(state.entry_options.compensate.iter());
        tasks.extend(state.exit_options.compensate.iter());
        for transition in &state.transitions {
            let payload = match &transition.trigger {
                Some(TriggerDecl::Task {
                    function, options, ..
                }) => {
                    tasks.push(function);
                    tasks.extend(options.compensate.iter());
                    None
                }
                Some(TriggerDecl::Event { event, .. }) => {
                    keys.extend(event.key.as_ref());
                    if let Some(ty) = event.payload.as_deref() {
                        match &event.assign {
                            Some(AssignDecl::Field(path)) => assign_fields.push((path, ty)),
                            Some(AssignDecl::Function(f)) => assign_fns.push((f, ty)),
                            None => {}
                        }
                    }
                    event.payload.as_deref()
                }
                _ => None,
            };
            tasks.extend(transition.action.iter());
            tasks.extend(transition.action_options.compensate.iter());
            if let Some(when) = &transition.when {
                conditions.push((when, payload));
            }
        }
    }
    let mut seen = HashSet::new();
    let mut calls = TokenStream::new();
    for task in tasks {
        let name = task.name();
        if !seen.insert(name.clone()) {
            continue;
        }
        calls.extend(crate::common::expand::register_task(task));
    }
    let mut seen = HashSet::new();
    for (condition, payload) in conditions {
        let name = condition.name();
        let key = (name.clone(), payload.map(|ty| quote!(#ty).to_string()));
        if !seen.insert(key) {
            continue;
        }
        // Spanned on the user's path, method included: a condition of the wrong type is one
        // error on `when = ..`, not a second one on the whole attribute.
        let path = &condition.path;
        // Through the `__private` check named for what it checks: rustc's note on a fn of the
        // wrong shape names it (`condition_takes_data_and_payload`), not the registry.
        calls.extend(match payload {
            Some(ty) => quote_spanned!(path.span()=>
                .condition_with_payload::<#ty, _>(
                    #name,
                    ::workflow_runtime::__private::condition_takes_data_and_payload::<Self::Data, #ty>(#path),
                )
            ),
            None => quote_spanned!(path.span()=>
                .condition(#name, ::workflow_runtime::__private::condition_takes_data::<Self::Data>(#path))
            ),
        });
    }
    let mut seen = HashSet::new();
    for (f, ty) in assign_fns {
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
    let checks = crate::common::expand::field_checks(&keys, &assign_fields);
    quote!({
        #checks
        #private::Registry::<Self::Data>::new() #calls
    })
}

/// Code that builds `definition` with the model's public types (what one would write by hand).
fn definition_tokens(definition: &Definition) -> TokenStream {
    let model = quote!(::workflow_runtime::__private::model);
    let name = &definition.name;
    let root = match &definition.root {
        Activity::StateMachine(machine) => machine_tokens(machine),
        other => activity_tokens(other),
    };
    let mut settings = TokenStream::new();
    if let Some(retry) = &definition.retry {
        let retry = retry_tokens(retry);
        settings.extend(quote!(definition.retry = ::core::option::Option::Some(#retry);));
    }
    if let Some(strategy) = &definition.commit_strategy {
        let strategy = commit_strategy_tokens(*strategy);
        settings.extend(quote!(
            definition.commit_strategy = ::core::option::Option::Some(#strategy);
        ));
    }
    if let Some(queue) = &definition.queue {
        settings.extend(quote!(
            definition.queue = ::core::option::Option::Some(::std::string::String::from(#queue));
        ));
    }
    if settings.is_empty() {
        return quote!(#model::Definition::new(#name, #root));
    }
    quote!({
        let mut definition = #model::Definition::new(#name, #root);
        #settings
        definition
    })
}

fn commit_strategy_tokens(strategy: workflow_model::CommitStrategy) -> TokenStream {
    use workflow_model::CommitStrategy;
    let model = quote!(::workflow_runtime::__private::model);
    match strategy {
        CommitStrategy::RunEnd => quote!(#model::CommitStrategy::RunEnd),
        CommitStrategy::BeforeEachActivity => quote!(#model::CommitStrategy::BeforeEachActivity),
        CommitStrategy::AfterEachActivity => quote!(#model::CommitStrategy::AfterEachActivity),
        CommitStrategy::Periodic { interval_ms } => {
            quote!(#model::CommitStrategy::Periodic { interval_ms: #interval_ms })
        }
    }
}

/// A `RetryPolicy` literal (FLT-2).
fn retry_tokens(retry: &workflow_model::RetryPolicy) -> TokenStream {
    let model = quote!(::workflow_runtime::__private::model);
    fn option<T: quote::ToTokens>(value: Option<T>) -> TokenStream {
        match value {
            Some(value) => quote!(::core::option::Option::Some(#value)),
            None => quote!(::core::option::Option::None),
        }
    }
    let max_attempts = option(retry.max_attempts);
    let initial_delay_ms = option(retry.initial_delay_ms);
    let max_delay_ms = option(retry.max_delay_ms);
    let decimal = |d: Option<workflow_model::Decimal>| {
        option(d.map(|d| {
            let millis = d.millis();
            quote!(#model::Decimal::from_millis(#millis))
        }))
    };
    let multiplier = decimal(retry.multiplier);
    let jitter = decimal(retry.jitter);
    let retry_on = option(retry.retry_on.as_ref().map(|codes| {
        let codes = codes.iter().map(|c| string(c));
        quote!(::std::vec![#(#codes),*])
    }));
    quote!(#model::RetryPolicy {
        max_attempts: #max_attempts,
        initial_delay_ms: #initial_delay_ms,
        max_delay_ms: #max_delay_ms,
        multiplier: #multiplier,
        jitter: #jitter,
        retry_on: #retry_on,
    })
}

fn string(value: &str) -> TokenStream {
    quote!(::std::string::String::from(#value))
}

fn option_string(value: Option<&String>) -> TokenStream {
    match value {
        Some(value) => {
            let value = string(value);
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    }
}

fn option_activity(value: Option<&Activity>) -> TokenStream {
    match value {
        Some(value) => {
            let value = activity_tokens(value);
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    }
}

fn machine_tokens(machine: &StateMachine) -> TokenStream {
    let model = quote!(::workflow_runtime::__private::model);
    let id = string(&machine.id);
    let initial = string(&machine.initial);
    let states = machine.states.iter().map(|state| {
        let name = string(&state.name);
        let display_name = option_string(state.display_name.as_ref());
        let entry = option_activity(state.entry.as_ref());
        let exit = option_activity(state.exit.as_ref());
        quote!(#model::State { name: #name, display_name: #display_name, entry: #entry, exit: #exit })
    });
    let transitions = machine.transitions.iter().map(|t| {
        let name = option_string(t.name.as_ref());
        let display_name = option_string(t.display_name.as_ref());
        let from = string(&t.from);
        let to = string(&t.to);
        let trigger = option_activity(t.trigger.as_ref());
        let condition = option_string(t.condition.as_ref());
        let action = option_activity(t.action.as_ref());
        quote! {
            #model::Transition {
                name: #name,
                display_name: #display_name,
                from: #from,
                to: #to,
                trigger: #trigger,
                condition: #condition,
                action: #action,
            }
        }
    });
    quote! {
        #model::StateMachine {
            id: #id,
            initial: #initial,
            states: ::std::vec![#(#states),*],
            transitions: ::std::vec![#(#transitions),*],
        }
    }
}

/// The activities the macro lowers to: tasks, events and delays.
fn activity_tokens(activity: &Activity) -> TokenStream {
    let model = quote!(::workflow_runtime::__private::model);
    match activity {
        Activity::Task(task) => {
            let (id, function) = (&task.id, &task.function);
            let mut settings = TokenStream::new();
            if let Some(retry) = &task.retry {
                let retry = retry_tokens(retry);
                settings.extend(quote!(task.retry = ::core::option::Option::Some(#retry);));
            }
            if let Some(ms) = task.attempt_timeout_ms {
                settings
                    .extend(quote!(task.attempt_timeout_ms = ::core::option::Option::Some(#ms);));
            }
            if let Some(compensation) = &task.compensation {
                let compensation = string(compensation);
                settings.extend(
                    quote!(task.compensation = ::core::option::Option::Some(#compensation);),
                );
            }
            if let Some(commit) = task.commit {
                let variant =
                    syn::Ident::new(&format!("{commit:?}"), proc_macro2::Span::call_site());
                settings.extend(quote!(task.commit = ::core::option::Option::Some(#model::NodeCommit::#variant);));
            }
            if let Some(queue) = &task.queue {
                settings.extend(quote!(
                    task.queue = ::core::option::Option::Some(::std::string::String::from(#queue));
                ));
            }
            if let Some(priority) = task.priority {
                settings.extend(quote!(task.priority = ::core::option::Option::Some(#priority);));
            }
            if let Some(key) = &task.queue_key {
                settings.extend(quote!(
                    task.queue_key = ::core::option::Option::Some(::std::string::String::from(#key));
                ));
            }
            if settings.is_empty() {
                quote!(#model::Activity::Task(#model::Task::new(#id, #function)))
            } else {
                quote!(#model::Activity::Task({
                    let mut task = #model::Task::new(#id, #function);
                    #settings
                    task
                }))
            }
        }
        Activity::Event(event) => {
            let (id, name) = (&event.id, &event.event);
            let key = event.key.as_ref().map(|key| quote!(.with_key(#key)));
            let assign = event.assign.as_ref().map(|assign| {
                let value = match assign {
                    workflow_model::PayloadAssign::Field(f) => {
                        quote!(#model::PayloadAssign::Field(::std::string::String::from(#f)))
                    }
                    workflow_model::PayloadAssign::Function(f) => {
                        quote!(#model::PayloadAssign::Function(::std::string::String::from(#f)))
                    }
                };
                quote!(.with_assign(#value))
            });
            let look_back = event.look_back.map(|look_back| {
                let value = match look_back {
                    workflow_model::LookBack::None => quote!(#model::LookBack::None),
                    workflow_model::LookBack::SinceOrigin => quote!(#model::LookBack::SinceOrigin),
                    workflow_model::LookBack::SinceEntered => {
                        quote!(#model::LookBack::SinceEntered)
                    }
                    workflow_model::LookBack::Any => quote!(#model::LookBack::Any),
                    workflow_model::LookBack::Window { ms } => {
                        quote!(#model::LookBack::Window { ms: #ms })
                    }
                };
                quote!(.with_look_back(#value))
            });
            quote!(#model::Activity::Event(#model::Event::new(#id, #name) #key #assign #look_back))
        }
        Activity::Delay(delay) => {
            let id = &delay.id;
            let millis = delay.duration_ms.unwrap_or_default();
            quote!(#model::Activity::Delay(#model::Delay::new(#id, #millis)))
        }
        other => {
            let message = format!(
                "internal error: `#[state_machine]` cannot emit a `{}` activity",
                other.kind_name()
            );
            quote!(::core::compile_error!(#message))
        }
    }
}
