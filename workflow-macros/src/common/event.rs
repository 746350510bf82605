//! `event::<Payload>("name").key(..).assign(..).look_back(..)`: the event trigger both macros
//! write, parsed and lowered in one place. A state machine's transition and a flowchart's
//! `event` node differ only in the options they take (a flowchart's event also has
//! `.trigger()` and `.timeout(..)`), which [`EventSyntax`] names.

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Ident, LitStr, Token, Type};
use workflow_model::{Event, Location, LookBack};

use super::parse::{
    AssignDecl, FieldPath, parse_assign, parse_duration, parse_key, parse_look_back, tokens_between,
};
use super::spans::SpanTable;

/// What one macro's events accept.
pub(crate) struct EventSyntax {
    /// The options after `event(..)`, each with how the "expected one of" list shows it.
    pub(crate) options: &'static [(&'static str, &'static str)],
    /// An example of the whole trigger, for the messages (`event("payment")`).
    pub(crate) example: &'static str,
}

/// The options of a state machine's event: a transition's deadline is another transition
/// (`after(..)`), and a machine's start is its initial state, so no `.timeout` or `.trigger`.
pub(crate) const STATE_MACHINE_EVENTS: EventSyntax = EventSyntax {
    options: &[
        ("key", "`.key(field)`"),
        ("assign", "`.assign(field)`"),
        ("assign_with", "`.assign_with(fn)`"),
        ("look_back", "`.look_back(policy)`"),
    ],
    example: "event(\"payment\")",
};

/// The options of a flowchart's `event` node.
pub(crate) const WORKFLOW_EVENTS: EventSyntax = EventSyntax {
    options: &[
        ("key", "`.key(field)`"),
        ("trigger", "`.trigger()`"),
        ("timeout", "`.timeout(duration)`"),
        ("assign", "`.assign(field)`"),
        ("assign_with", "`.assign_with(fn)`"),
        ("look_back", "`.look_back(policy)`"),
    ],
    example: "event(\"expense.decision\")",
};

impl EventSyntax {
    fn takes(&self, option: &str) -> bool {
        self.options.iter().any(|(name, _)| *name == option)
    }
}

/// `event::<Payload>("name")` and its options (ACT-19).
pub(crate) struct EventDecl {
    pub(crate) payload: Option<Box<Type>>,
    pub(crate) name: LitStr,
    pub(crate) key: Option<FieldPath>,
    /// `.trigger()`: the event starts the workflow (flowcharts only).
    pub(crate) trigger: bool,
    /// `.timeout(duration)`: the deadline, with the tokens written (flowcharts only).
    pub(crate) timeout: Option<(u64, TokenStream)>,
    /// `.assign(field)` or `.assign_with(fn)` (ACT-19).
    pub(crate) assign: Option<AssignDecl>,
    /// `.look_back(..)` (RT-30).
    pub(crate) look_back: Option<(LookBack, TokenStream)>,
}

impl EventDecl {
    /// The model's event `id`, with the span of every field the user wrote recorded at `at`.
    /// The payload type is left to the caller: a flowchart records it, a state machine does not.
    pub(crate) fn lower(&self, id: String, at: &Location, spans: &mut SpanTable) -> Event {
        spans.insert(at.field("event"), &self.name);
        let mut event = Event::new(id, self.name.value());
        if let Some(key) = &self.key {
            spans.insert(at.field("key"), &key.tokens);
            event.key = Some(key.text.clone());
        }
        event.trigger = self.trigger;
        if let Some((millis, tokens)) = &self.timeout {
            spans.insert(at.field("deadline_ms"), tokens);
            event.deadline_ms = Some(*millis);
        }
        if let Some(assign) = &self.assign {
            spans.insert(at.field("assign"), assign.tokens());
            event.assign = Some(assign.model());
        }
        if let Some((look_back, tokens)) = &self.look_back {
            spans.insert(at.field("look_back"), tokens);
            event.look_back = Some(*look_back);
        }
        event
    }
}

/// Everything after the `event` keyword: `::<Payload>("name")` and the options `syntax` takes.
pub(crate) fn parse_event(input: ParseStream<'_>, syntax: &EventSyntax) -> syn::Result<EventDecl> {
    let payload = if input.peek(Token![::]) {
        input.parse::<Token![::]>()?;
        input.parse::<Token![<]>()?;
        let ty: Type = input.parse()?;
        input.parse::<Token![>]>()?;
        Some(Box::new(ty))
    } else {
        None
    };
    if !input.peek(syn::token::Paren) {
        return Err(input.error(format!(
            "expected `(..)` after `event`, as in `{}`",
            syntax.example
        )));
    }
    let content;
    syn::parenthesized!(content in input);
    let name: LitStr = content.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!(
                "malformed `event`: expected the event name as a string literal, as in `{}`",
                syntax.example
            ),
        )
    })?;
    if !content.is_empty() {
        return Err(content.error("unexpected token after the event name"));
    }
    let mut event = EventDecl {
        payload,
        name,
        key: None,
        trigger: false,
        timeout: None,
        assign: None,
        look_back: None,
    };
    while input.peek(Token![.]) {
        input.parse::<Token![.]>()?;
        let method: Ident = input.call(Ident::parse_any)?;
        let method_name = method.to_string();
        if matches!(method_name.as_str(), "queue" | "priority") {
            return Err(syn::Error::new(
                method.span(),
                format!(
                    "an event takes no queue slot: `.{method_name}(..)` is a task option; put it on the task that runs after the event"
                ),
            ));
        }
        if !syntax.takes(&method_name) {
            let hint = workflow_model::suggest(&method_name, syntax.options.iter().map(|o| o.0))
                .map(|found| format!("; did you mean `.{found}`?"))
                .unwrap_or_default();
            let expected = syntax
                .options
                .iter()
                .map(|o| o.1)
                .collect::<Vec<_>>()
                .join(", ");
            return Err(syn::Error::new(
                method.span(),
                format!("unknown event option `.{method_name}`; expected one of {expected}{hint}"),
            ));
        }
        let content;
        syn::parenthesized!(content in input);
        let duplicate = match method_name.as_str() {
            "key" => event.key.is_some(),
            "trigger" => event.trigger,
            "timeout" => event.timeout.is_some(),
            "look_back" => event.look_back.is_some(),
            _ => event.assign.is_some(),
        };
        if duplicate {
            let message = if method_name.starts_with("assign") {
                "an event folds its payload in once: `.assign(field)` or `.assign_with(fn)`, not both"
                    .to_owned()
            } else {
                format!("duplicate event option `.{method_name}`")
            };
            return Err(syn::Error::new(method.span(), message));
        }
        match method_name.as_str() {
            "key" => event.key = Some(parse_key(&content)?),
            "trigger" => {
                if !content.is_empty() {
                    return Err(content.error("`.trigger()` takes no argument"));
                }
                event.trigger = true;
            }
            "timeout" => {
                let start = content.fork();
                let (millis, _) = parse_duration(&content)?;
                if !content.is_empty() {
                    return Err(content.error("unexpected token after the duration"));
                }
                event.timeout = Some((millis, tokens_between(&start, &content)));
            }
            "look_back" => event.look_back = Some(parse_look_back(&content)?),
            _ => {
                if event.payload.is_none() {
                    return Err(syn::Error::new(
                        method.span(),
                        format!(
                            "`.{method_name}(..)` needs the payload type, as in `event::<Payment>({:?})`",
                            event.name.value()
                        ),
                    ));
                }
                event.assign = Some(parse_assign(&method_name, &content)?);
            }
        }
    }
    Ok(event)
}
