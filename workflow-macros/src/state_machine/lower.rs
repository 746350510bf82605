//! Lowering: the parsed [`Machine`] to a `workflow_model::Definition` plus a span table from
//! each model [`Location`] to the user's tokens, then the shared validator's diagnostics to
//! spanned compile errors.
//!
//! Node-id conventions (the same machine written as JSON must use them to get the same
//! fingerprint):
//!
//! - the root state machine's id is `root`;
//! - a state's name is the variant's ident, or `#[state(name = "...")]`;
//! - entry `{Variant}_entry`, exit `{Variant}_exit` (the variant ident, never the renamed name);
//! - a transition's *base id* is its explicit `id = "..."`, else its name, else
//!   `{FromVariant}_{index}` with `index` the 0-based position among all the machine's
//!   transitions in declaration order; the trigger's id is the base id and the action's id is
//!   `{base}_action`;
//! - the registry name of a user fn is its path as written (`send_confirmation`,
//!   `orders::send`); an event's `payload` is left out (type names are not graph).

use quote::ToTokens;
use syn::ext::IdentExt;
use workflow_model::{
    Activity, Definition, Delay, Location, State, StateMachine, Task, Transition,
};

use super::parse::{Machine, StateDecl, TransitionDecl, TriggerDecl};
use crate::common::SpanTable;

/// The lowered machine.
pub(crate) struct Lowered {
    pub(crate) definition: Definition,
    pub(crate) spans: SpanTable,
}

/// The name of the workflow: `name = "..."`, else the enum's ident.
pub(crate) fn workflow_name(machine: &Machine) -> String {
    match &machine.options.name {
        Some(lit) => lit.value(),
        None => machine.item.ident.to_string(),
    }
}

/// The model name of the state whose variant is `ident`, or the ident itself when no variant
/// has it (the validator then reports it, SM-C1 / SM-C4).
fn state_name_of(machine: &Machine, ident: &syn::Ident) -> String {
    machine
        .states
        .iter()
        .find(|s| s.ident == *ident)
        .map_or_else(|| ident.to_string(), StateDecl::name)
}

/// The base id of the transition at global `index` declared on `from`.
pub(crate) fn base_id(from: &StateDecl, index: usize, transition: &TransitionDecl) -> String {
    if let Some(id) = &transition.id {
        id.value()
    } else if let Some(name) = &transition.name {
        name.unraw().to_string()
    } else {
        format!("{}_{index}", from.ident.unraw())
    }
}

/// Lowers `machine` to the model.
pub(crate) fn lower(machine: &Machine) -> Lowered {
    let mut spans = SpanTable::default();
    let ident = &machine.item.ident;
    let machine_look_back = machine
        .options
        .look_back
        .as_ref()
        .map_or(workflow_model::LookBack::SinceEntered, |(look_back, _)| {
            *look_back
        });
    let top = Location::root();
    let at = top.field("root");
    spans.insert(top.clone(), ident);
    spans.insert(
        top.field("name"),
        machine
            .options
            .name
            .as_ref()
            .map_or_else(|| ident.to_token_stream(), ToTokens::into_token_stream),
    );
    spans.insert(at.clone(), ident);

    let initial = match &machine.options.initial {
        Some(initial) => {
            spans.insert(at.field("initial"), initial);
            state_name_of(machine, initial)
        }
        // SM-C9 already reported the missing option; validate the rest as if it named the
        // first state rather than echo the same mistake as SM-C1.
        None => machine
            .states
            .first()
            .map(StateDecl::name)
            .unwrap_or_default(),
    };

    let mut states = Vec::new();
    let mut transitions = Vec::new();
    for (i, decl) in machine.states.iter().enumerate() {
        let state_at = at.field("states").index(i);
        spans.insert(state_at.clone(), &decl.ident);
        match &decl.rename {
            Some(lit) => spans.insert(state_at.field("name"), lit),
            None => spans.insert(state_at.field("name"), &decl.ident),
        }
        let mut state = State::new(decl.name());
        state.display_name = decl.display.as_ref().map(syn::LitStr::value);
        for (field, function, options) in [
            ("entry", &decl.entry, &decl.entry_options),
            ("exit", &decl.exit, &decl.exit_options),
        ] {
            if let Some(function) = function {
                spans.insert(state_at.field(field), &function.path);
                let mut task =
                    Task::new(format!("{}_{field}", decl.ident.unraw()), function.name());
                options.apply(&mut task, &state_at.field(field), &mut spans);
                if field == "entry" {
                    state.entry = Some(task.into());
                } else {
                    state.exit = Some(task.into());
                }
            }
        }
        states.push(state);

        for transition in &decl.transitions {
            let index = transitions.len();
            let t_at = at.field("transitions").index(index);
            spans.insert(t_at.clone(), &transition.tokens);
            spans.insert(t_at.field("from"), &decl.ident);
            spans.insert(t_at.field("to"), &transition.target);
            let base = base_id(decl, index, transition);
            let mut model =
                Transition::new(decl.name(), state_name_of(machine, &transition.target));
            if let Some(name) = &transition.name {
                spans.insert(t_at.field("name"), name);
                model.name = Some(name.unraw().to_string());
            }
            if let Some(display) = &transition.display {
                spans.insert(t_at.field("display_name"), display);
                model.display_name = Some(display.value());
            }
            if let Some(trigger) = &transition.trigger {
                let trigger_at = t_at.field("trigger");
                spans.insert(trigger_at.clone(), trigger.tokens());
                match (&transition.id, &transition.name) {
                    (Some(id), _) => spans.insert(trigger_at.field("id"), id),
                    (None, Some(_)) => spans.alias(trigger_at.field("id"), t_at.field("name")),
                    (None, None) => {}
                }
                model.trigger = Some(lower_trigger(
                    trigger,
                    base.clone(),
                    &trigger_at,
                    machine_look_back,
                    &mut spans,
                ));
            }
            if let Some(when) = &transition.when {
                spans.insert(t_at.field("condition"), &when.path);
                model.condition = Some(when.name());
            }
            if let Some(action) = &transition.action {
                let action_at = t_at.field("action");
                spans.insert(action_at.clone(), &action.path);
                // The action's id is derived from the base id the user wrote (`{base}_action`):
                // a duplicate of it follows from a duplicate name or id, reported there once.
                match (&transition.id, &transition.name, &transition.trigger) {
                    (Some(_), _, Some(_)) => {
                        spans.alias(action_at.field("id"), t_at.field("trigger").field("id"));
                    }
                    (Some(id), _, None) => spans.insert(action_at.field("id"), id),
                    (None, Some(_), _) => spans.alias(action_at.field("id"), t_at.field("name")),
                    (None, None, _) => {}
                }
                let mut task = Task::new(format!("{base}_action"), action.name());
                transition
                    .action_options
                    .apply(&mut task, &t_at.field("action"), &mut spans);
                model.action = Some(task.into());
            }
            transitions.push(model);
        }
    }

    let root = StateMachine {
        id: "root".to_owned(),
        initial,
        states,
        transitions,
    };
    let mut definition = Definition::new(workflow_name(machine), root);
    if let Some(retry) = &machine.options.retry {
        retry.record(&Location::root().field("retry"), &mut spans);
        definition.retry = Some(retry.policy());
    }
    if let Some((strategy, tokens)) = &machine.options.commit {
        spans.insert(Location::root().field("commit_strategy"), tokens);
        definition.commit_strategy = Some(*strategy);
    }
    if let Some(path) = &machine.options.queue {
        spans.insert(Location::root().field("queue"), path);
        definition.queue = Some(crate::common::queues::placeholder(path));
    }
    Lowered { definition, spans }
}

fn lower_trigger(
    trigger: &TriggerDecl,
    id: String,
    at: &Location,
    machine_look_back: workflow_model::LookBack,
    spans: &mut SpanTable,
) -> Activity {
    match trigger {
        TriggerDecl::Event { event, .. } => {
            let mut event = event.lower(id, at, spans);
            // RT-30: a transition waits for stimuli sent since its state was entered unless
            // it, or the machine, says otherwise.
            event.look_back.get_or_insert(machine_look_back);
            event.into()
        }
        TriggerDecl::After { millis, .. } => Delay::new(id, *millis).into(),
        TriggerDecl::Task {
            function, options, ..
        } => {
            spans.insert(at.field("function"), &function.path);
            let mut task = Task::new(id, function.name());
            options.apply(&mut task, at, spans);
            task.into()
        }
    }
}

/// Runs the shared validator; every diagnostic becomes an error on the user's tokens.
/// `syntax_errors` tells that some declarations were dropped by a syntax error: reachability
/// (SM-C5) is then not reported, since the dropped transition is the likely cause.
pub(crate) fn validate(lowered: &Lowered, syntax_errors: bool) -> Option<syn::Error> {
    crate::common::spans::validate_with(
        &lowered.definition,
        &lowered.spans,
        |diagnostic| syntax_errors && diagnostic.rule == "SM-C5",
        |diagnostic| {
            (diagnostic.rule == "SM-C8").then(|| {
                "; add `when = <condition fn>` to one of them to choose between them".to_owned()
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Errors;
    use crate::state_machine::parse::parse;
    use proc_macro2::TokenStream;
    use quote::quote;

    fn lower_tokens(args: TokenStream, item: TokenStream) -> Lowered {
        let mut errors = Errors::default();
        let machine = parse(args, item, &mut errors).unwrap();
        assert!(errors.is_empty());
        lower(&machine)
    }

    #[test]
    fn lowers_to_the_model_with_the_id_conventions() {
        let lowered = lower_tokens(
            quote!(data = Order, initial = New),
            quote! {
                enum OrderFlow {
                    #[entry(send_confirmation)]
                    #[exit(log_exit)]
                    #[on(pay: event::<Payment>("payment").key(customer.id) => Paid, when = covers_amount, action = record_payment)]
                    #[on(event("cancel") => Cancelled, id = "cancel")]
                    #[on(after(mins(5)) => Cancelled, display = "Expire")]
                    #[on(=> Paid, when = is_free, action = orders::note)]
                    New,
                    #[state(name = "Settled")]
                    #[on(audit: task(run_audit) => Cancelled)]
                    Paid,
                    Cancelled,
                }
            },
        );
        let definition = &lowered.definition;
        assert_eq!(definition.name, "OrderFlow");
        let Activity::StateMachine(machine) = &definition.root else {
            panic!("a state machine")
        };
        assert_eq!(machine.id, "root");
        assert_eq!(machine.initial, "New");
        let names: Vec<&str> = machine.states.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["New", "Settled", "Cancelled"]);
        assert_eq!(machine.states[0].entry.as_ref().unwrap().id(), "New_entry");
        assert_eq!(machine.states[0].exit.as_ref().unwrap().id(), "New_exit");

        let t = &machine.transitions;
        assert_eq!(t.len(), 5);
        assert_eq!(t[0].name.as_deref(), Some("pay"));
        assert_eq!(t[0].to, "Settled");
        assert_eq!(t[0].condition.as_deref(), Some("covers_amount"));
        let Some(Activity::Event(event)) = &t[0].trigger else {
            panic!("an event")
        };
        assert_eq!(
            (event.id.as_str(), event.event.as_str()),
            ("pay", "payment")
        );
        assert_eq!(event.key.as_deref(), Some("customer.id"));
        assert_eq!(event.payload, None);
        assert_eq!(t[0].action.as_ref().unwrap().id(), "pay_action");
        assert_eq!(t[1].trigger.as_ref().unwrap().id(), "cancel");
        let Some(Activity::Delay(delay)) = &t[2].trigger else {
            panic!("a delay")
        };
        assert_eq!(
            (delay.id.as_str(), delay.duration_ms),
            ("New_2", Some(300_000))
        );
        assert_eq!(t[2].display_name.as_deref(), Some("Expire"));
        assert!(t[3].trigger.is_none());
        let Some(Activity::Task(action)) = &t[3].action else {
            panic!("a task")
        };
        assert_eq!(
            (action.id.as_str(), action.function.as_str()),
            ("New_3_action", "orders::note")
        );
        assert_eq!(
            (t[4].from.as_str(), t[4].to.as_str()),
            ("Settled", "Cancelled")
        );
        let Some(Activity::Task(audit)) = &t[4].trigger else {
            panic!("a task")
        };
        assert_eq!(
            (audit.id.as_str(), audit.function.as_str()),
            ("audit", "run_audit")
        );
    }

    #[test]
    fn span_table_falls_back_to_the_closest_ancestor() {
        let lowered = lower_tokens(
            quote!(data = D, initial = A),
            quote!(
                enum E {
                    #[on(go: event("go") => B)]
                    A,
                    B,
                }
            ),
        );
        let to = Location::root()
            .field("root")
            .field("transitions")
            .index(0)
            .field("to");
        assert_eq!(lowered.spans.tokens_of(&to).unwrap().to_string(), "B");
        let deep = to.field("nowhere").index(9);
        assert_eq!(lowered.spans.tokens_of(&deep).unwrap().to_string(), "B");
        let trigger_id = Location::root()
            .field("root")
            .field("transitions")
            .index(0)
            .field("trigger")
            .field("id");
        assert_eq!(
            lowered.spans.tokens_of(&trigger_id).unwrap().to_string(),
            "go"
        );
    }

    #[test]
    fn an_unknown_target_keeps_its_ident_for_the_validator() {
        let lowered = lower_tokens(
            quote!(data = D, initial = Nwe),
            quote!(
                enum E {
                    #[on(=> Shiped)]
                    New,
                    Shipped,
                }
            ),
        );
        let Activity::StateMachine(machine) = &lowered.definition.root else {
            panic!("a state machine")
        };
        assert_eq!(machine.initial, "Nwe");
        assert_eq!(machine.transitions[0].to, "Shiped");
    }
}
