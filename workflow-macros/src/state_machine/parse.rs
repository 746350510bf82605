//! Parsing: the attribute arguments and the annotated enum into a [`Machine`] AST that keeps
//! every token (and so every span) the user wrote.
//!
//! Syntax errors inside one attribute stop that attribute (syn's span, fail fast); every other
//! attribute is still parsed, so independent mistakes are all reported in one build. Option
//! errors (unknown, duplicate, missing, malformed) are SM-C9.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Fields, Ident, ItemEnum, LitStr, Path, Token, Type};
use workflow_model::{backticked, did_you_mean};

pub(crate) use crate::common::Errors;
use crate::common::event::{EventDecl, STATE_MACHINE_EVENTS, parse_event};
use crate::common::faults::{RetryDecl, TaskOptions, parse_retry};
use crate::common::parse::{
    FnRef, fn_path, parse_commit_strategy, parse_duration, parse_look_back, tokens_between,
};
use workflow_model::{CommitStrategy, LookBack};

/// The options of `#[state_machine(...)]`.
pub(crate) const MACHINE_OPTIONS: [&str; 7] = [
    "data",
    "initial",
    "name",
    "retry",
    "commit",
    "look_back",
    "queue",
];
/// The options after a transition's target.
pub(crate) const TRANSITION_OPTIONS: [&str; 4] = ["when", "action", "display", "id"];
/// The attributes the macro reads on a variant.
pub(crate) const STATE_ATTRIBUTES: [&str; 4] = ["entry", "exit", "on", "state"];
/// The options of `#[state(...)]`.
pub(crate) const STATE_OPTIONS: [&str; 2] = ["name", "display"];
/// The trigger kinds.
pub(crate) const TRIGGERS: [&str; 3] = ["event", "after", "task"];
/// `#[state_machine(data = Order, initial = New, name = "OrderFlow", commit = ..)]`.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) data: Option<Type>,
    pub(crate) initial: Option<Ident>,
    pub(crate) name: Option<LitStr>,
    /// `retry(..)`: the machine's default retry policy (FLT-2).
    pub(crate) retry: Option<RetryDecl>,
    /// `commit = ..`: when a run commits (ENG-32), with the tokens written.
    pub(crate) commit: Option<(CommitStrategy, TokenStream)>,
    /// `look_back = ..`: the look-back of every event transition without its own
    /// `.look_back(..)` (RT-30); absent, `since_entered`.
    pub(crate) look_back: Option<(LookBack, TokenStream)>,
    /// `queue = IMPORTS`: the queue every run takes a slot of (QU-14).
    pub(crate) queue: Option<Path>,
}

/// One variant of the enum: a state.
pub(crate) struct StateDecl {
    pub(crate) ident: Ident,
    /// `#[state(name = "...")]`: the state's name in the definition (default: the ident).
    pub(crate) rename: Option<LitStr>,
    /// `#[state(display = "...")]`.
    pub(crate) display: Option<LitStr>,
    pub(crate) entry: Option<FnRef>,
    /// `.retry(..)`, `.timeout(..)`, ... after the entry's fn path.
    pub(crate) entry_options: Box<TaskOptions>,
    pub(crate) exit: Option<FnRef>,
    pub(crate) exit_options: Box<TaskOptions>,
    pub(crate) transitions: Vec<TransitionDecl>,
}

impl StateDecl {
    /// The state's name in the definition.
    pub(crate) fn name(&self) -> String {
        match &self.rename {
            Some(lit) => lit.value(),
            None => self.ident.unraw().to_string(),
        }
    }
}

/// `#[on(name: trigger => Target, when = f, action = g, display = "..", id = "..")]`.
pub(crate) struct TransitionDecl {
    /// Every token inside `on(...)`, for diagnostics about the whole transition.
    pub(crate) tokens: TokenStream,
    pub(crate) name: Option<Ident>,
    pub(crate) trigger: Option<TriggerDecl>,
    pub(crate) target: Ident,
    pub(crate) when: Option<FnRef>,
    pub(crate) action: Option<FnRef>,
    pub(crate) action_options: Box<TaskOptions>,
    pub(crate) display: Option<LitStr>,
    pub(crate) id: Option<LitStr>,
}

/// What a transition waits for.
pub(crate) enum TriggerDecl {
    /// `event::<Payload>("name").key(path)`.
    Event {
        tokens: TokenStream,
        event: Box<EventDecl>,
    },
    /// `after(secs(30))`: the duration in milliseconds, evaluated here; `duration_type` is
    /// the `Duration` of `Duration::from_secs(..)`, named in the expansion so that the user's
    /// import of it is used (and checked).
    After {
        tokens: TokenStream,
        millis: u64,
        duration_type: Option<Path>,
    },
    /// `task(run_audit)`: any user activity.
    Task {
        tokens: TokenStream,
        function: FnRef,
        options: Box<TaskOptions>,
    },
}

impl TriggerDecl {
    pub(crate) fn tokens(&self) -> &TokenStream {
        match self {
            TriggerDecl::Event { tokens, .. }
            | TriggerDecl::After { tokens, .. }
            | TriggerDecl::Task { tokens, .. } => tokens,
        }
    }
}

/// The parsed machine.
pub(crate) struct Machine {
    /// The enum with the macro's own attributes removed: what is emitted.
    pub(crate) item: ItemEnum,
    pub(crate) options: Options,
    pub(crate) states: Vec<StateDecl>,
}

/// Parses the attribute arguments and the enum. `Err` only when the item is not an enum at
/// all; every other mistake is collected in `errors` and parsing goes on.
pub(crate) fn parse(
    args: TokenStream,
    item: TokenStream,
    errors: &mut Errors,
) -> syn::Result<Machine> {
    let mut item: ItemEnum = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "`#[state_machine]` goes on an enum whose unit variants are the states",
        )
    })?;
    let options = parse_options(args, errors);
    if let Some(param) = item.generics.params.first() {
        errors.at(
            param,
            "a state machine enum cannot be generic; its data type goes in `data = ...`",
        );
    }
    if let Some(clause) = &item.generics.where_clause {
        errors.at(clause, "a state machine enum cannot have a `where` clause");
    }
    let mut states = Vec::new();
    for variant in &mut item.variants {
        if !matches!(variant.fields, Fields::Unit) {
            errors.at(
                &variant.fields,
                format!(
                    "state `{}` cannot carry fields; states are names, the data lives in `data = ...`",
                    variant.ident
                ),
            );
        }
        let attrs = std::mem::take(&mut variant.attrs);
        let (ours, theirs) = split_attributes(attrs, errors);
        variant.attrs = theirs;
        states.push(parse_state(variant.ident.clone(), &ours, errors));
    }
    check_derives(&item.attrs, errors);
    Ok(Machine {
        item,
        options,
        states,
    })
}

/// Separates the macro's attributes from the user's; a close misspelling of one of ours
/// (`#[entyr(...)]`) is an error rather than a confusing "cannot find attribute".
fn split_attributes(
    attrs: Vec<Attribute>,
    errors: &mut Errors,
) -> (Vec<Attribute>, Vec<Attribute>) {
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for attr in attrs {
        let Some(ident) = attr.path().get_ident().map(ToString::to_string) else {
            theirs.push(attr);
            continue;
        };
        if STATE_ATTRIBUTES.contains(&ident.as_str()) {
            ours.push(attr);
        } else if let Some(found) = workflow_model::suggest(&ident, STATE_ATTRIBUTES)
            && !KNOWN_RUST_ATTRIBUTES.contains(&ident.as_str())
        {
            errors.at(
                attr.path(),
                format!(
                    "unknown state attribute `{ident}`; expected one of {}; did you mean `{found}`?",
                    backticked(STATE_ATTRIBUTES)
                ),
            );
        } else {
            theirs.push(attr);
        }
    }
    (ours, theirs)
}

/// Attributes of the language that must never be mistaken for a misspelling of ours.
const KNOWN_RUST_ATTRIBUTES: [&str; 8] = [
    "doc", "cfg", "cfg_attr", "allow", "warn", "deny", "expect", "serde",
];

/// The macro implements these by state name; a derive of them would conflict.
fn check_derives(attrs: &[Attribute], errors: &mut Errors) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let _ = attr.parse_nested_meta(|meta| {
            if let Some(last) = meta.path.segments.last() {
                let name = last.ident.to_string();
                if name == "Serialize" || name == "Deserialize" {
                    errors.at(
                        &meta.path,
                        format!(
                            "`#[state_machine]` implements `{name}` by state name; remove this derive"
                        ),
                    );
                }
            }
            Ok(())
        });
    }
}

fn parse_options(args: TokenStream, errors: &mut Errors) -> Options {
    let mut options = Options::default();
    let mut seen: Vec<Ident> = Vec::new();
    // Options named by a misspelling: their absence is that one mistake, not a second one.
    let mut misspelled: Vec<String> = Vec::new();
    let parser = |input: ParseStream<'_>| -> syn::Result<()> {
        while !input.is_empty() {
            let key: Ident = input.call(Ident::parse_any)?;
            let key_name = key.to_string();
            if let Some(first) = seen.iter().find(|k| **k == key) {
                let message = format!("duplicate state machine option `{key_name}`");
                errors.duplicate(first, &key, &message);
            }
            seen.push(key.clone());
            if key_name == "retry" && input.peek(syn::token::Paren) {
                let start = input.fork();
                let content;
                syn::parenthesized!(content in input);
                let tokens = tokens_between(&start, input);
                options.retry = Some(parse_retry(&content, quote::quote!(#key #tokens))?);
                if input.is_empty() {
                    break;
                }
                input.parse::<Token![,]>()?;
                continue;
            }
            if !input.peek(Token![=]) {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "expected `=` after `{key_name}`, as in `{}`",
                        example(&key_name)
                    ),
                ));
            }
            input.parse::<Token![=]>()?;
            match key_name.as_str() {
                "data" => {
                    let ty = value::<Type>(input, &key_name)?;
                    options.data.get_or_insert(ty);
                }
                "initial" => {
                    let ident = value::<Ident>(input, &key_name)?;
                    options.initial.get_or_insert(ident);
                }
                "name" => {
                    let lit = value::<LitStr>(input, &key_name)?;
                    if lit.value().trim().is_empty() {
                        errors.at(&lit, "the workflow `name` cannot be empty");
                    }
                    options.name.get_or_insert(lit);
                }
                "commit" => {
                    let commit = parse_commit_strategy(input)?;
                    options.commit.get_or_insert(commit);
                }
                "look_back" => {
                    let look_back = parse_look_back(input)?;
                    options.look_back.get_or_insert(look_back);
                }
                "queue" => {
                    let path = value::<Path>(input, &key_name)?;
                    let path = crate::common::queues::queue_path(path, "queue")?;
                    options.queue.get_or_insert(path);
                }
                _ => {
                    let (hint, found) = did_you_mean(&key_name, MACHINE_OPTIONS);
                    misspelled.extend(found);
                    errors.at(
                        &key,
                        format!(
                            "unknown state machine option `{key_name}`; expected one of {}{hint}",
                            backticked(MACHINE_OPTIONS)
                        ),
                    );
                    skip_value(input)?;
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(())
    };
    if let Err(e) = parser.parse2(args) {
        errors.push(e);
        return options;
    }
    for (option, missing) in [
        ("data", options.data.is_none()),
        ("initial", options.initial.is_none()),
    ] {
        if missing && !seen.iter().any(|k| k == option) && !misspelled.iter().any(|m| m == option) {
            errors.push(syn::Error::new(
                Span::call_site(),
                format!(
                    "missing state machine option `{option}`; expected `{}`",
                    example(option)
                ),
            ));
        }
    }
    options
}

fn example(option: &str) -> &'static str {
    match option {
        "data" => "data = MyData",
        "initial" => "initial = FirstState",
        "name" => "name = \"OrderFlow\"",
        "look_back" => "look_back = since_origin",
        "when" => "when = a_condition_fn",
        "action" => "action = an_async_fn",
        "display" => "display = \"Pay the order\"",
        "id" => "id = \"pay\"",
        "retry" => "retry(attempts = 5)",
        "commit" => "commit = after_each_activity",
        "queue" => "queue = IMPORTS",
        _ => "option = value",
    }
}

/// Parses one option value, turning syn's message into a rustc-style one naming the option.
fn value<T: syn::parse::Parse>(input: ParseStream<'_>, key: &str) -> syn::Result<T> {
    let span = input.span();
    input.parse::<T>().map_err(|_| {
        let what = match key {
            "data" => "a type",
            "initial" => "the name of a state (a variant of this enum)",
            "name" | "display" | "id" => "a string literal",
            "when" | "action" => "the path of a fn",
            _ => "a value",
        };
        syn::Error::new(
            span,
            format!(
                "malformed `{key}`: expected {what}, as in `{}`",
                example(key)
            ),
        )
    })
}

/// Skips tokens up to the next top-level comma (for an unknown option's value).
fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    input.step(|cursor| {
        let mut rest = *cursor;
        let mut depth = 0usize;
        while let Some((tt, next)) = rest.token_tree() {
            if let TokenTree::Punct(p) = &tt {
                match p.as_char() {
                    ',' if depth == 0 => return Ok(((), rest)),
                    '<' => depth += 1,
                    '>' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            rest = next;
        }
        Ok(((), rest))
    })
}

fn parse_state(ident: Ident, attrs: &[Attribute], errors: &mut Errors) -> StateDecl {
    let mut state = StateDecl {
        ident,
        rename: None,
        display: None,
        entry: None,
        entry_options: Box::default(),
        exit: None,
        exit_options: Box::default(),
        transitions: Vec::new(),
    };
    let mut first_entry: Option<&Attribute> = None;
    let mut first_exit: Option<&Attribute> = None;
    let mut first_state: Option<&Attribute> = None;
    for attr in attrs {
        let Some(kind) = attr.path().get_ident().map(ToString::to_string) else {
            continue;
        };
        let slot = match kind.as_str() {
            "entry" => Some(&mut first_entry),
            "exit" => Some(&mut first_exit),
            "state" => Some(&mut first_state),
            _ => None,
        };
        if let Some(slot) = slot {
            if let Some(first) = slot {
                let message = format!("duplicate `#[{kind}]` on state `{}`", state.ident);
                errors.duplicate(first.path(), attr.path(), &message);
                continue;
            }
            *slot = Some(attr);
        }
        match kind.as_str() {
            "entry" | "exit" => match attr.parse_args_with(|input: ParseStream<'_>| {
                let path = input
                    .parse::<Path>()
                    .and_then(|p| fn_path(p, &kind))
                    .map_err(|e| {
                        syn::Error::new(
                            e.span(),
                            format!(
                                "malformed `#[{kind}]`: expected the path of an async fn, as in `#[{kind}(send_confirmation)]`"
                            ),
                        )
                    })?;
                let options = TaskOptions::parse(input)?;
                if !input.is_empty() {
                    return Err(input.error(
                        "unexpected token after the fn path; task options are written `.retry(..)`, `.timeout(..)`",
                    ));
                }
                Ok((path, options))
            }) {
                Ok((path, options)) => {
                    let function = Some(FnRef { path });
                    if kind == "entry" {
                        state.entry = function;
                        state.entry_options = Box::new(options);
                    } else {
                        state.exit = function;
                        state.exit_options = Box::new(options);
                    }
                }
                Err(e) => errors.push(e),
            },
            "state" => {
                if let Err(e) = attr.parse_args_with(|input: ParseStream<'_>| {
                    parse_state_options(input, &mut state, errors)
                }) {
                    errors.push(e);
                }
            }
            "on" => match attr.parse_args_with(|input: ParseStream<'_>| parse_transition(input, errors)) {
                Ok(transition) => state.transitions.push(transition),
                Err(e) => errors.push(e),
            },
            _ => {}
        }
    }
    state
}

fn parse_state_options(
    input: ParseStream<'_>,
    state: &mut StateDecl,
    errors: &mut Errors,
) -> syn::Result<()> {
    let mut seen: Vec<Ident> = Vec::new();
    while !input.is_empty() {
        let key: Ident = input.call(Ident::parse_any)?;
        let key_name = key.to_string();
        if let Some(first) = seen.iter().find(|k| **k == key) {
            let message = format!("duplicate state option `{key_name}`");
            errors.duplicate(first, &key, &message);
        }
        seen.push(key.clone());
        input.parse::<Token![=]>()?;
        match key_name.as_str() {
            "name" => {
                let lit = value::<LitStr>(input, "name")?;
                if lit.value().is_empty() {
                    // Reported here, and the ident stays the name, so targets still resolve.
                    errors.at(&lit, "a state name cannot be empty");
                } else {
                    state.rename.get_or_insert(lit);
                }
            }
            "display" => {
                let lit = value::<LitStr>(input, "display")?;
                state.display.get_or_insert(lit);
            }
            _ => {
                let (hint, _) = did_you_mean(&key_name, STATE_OPTIONS);
                errors.at(
                    &key,
                    format!(
                        "unknown state option `{key_name}`; expected one of {}{hint}",
                        backticked(STATE_OPTIONS)
                    ),
                );
                skip_value(input)?;
            }
        }
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(())
}

/// `[name:] [trigger] => Target [, option = value]*`
fn parse_transition(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<TransitionDecl> {
    let tokens: TokenStream = input.fork().parse()?;
    let name = if input.peek(Ident) && input.peek2(Token![:]) && !input.peek2(Token![::]) {
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        Some(name)
    } else {
        None
    };
    let trigger = if input.peek(Token![=>]) {
        None
    } else {
        Some(parse_trigger(input)?)
    };
    if !input.peek(Token![=>]) {
        return Err(input.error(
            "expected `=> TargetState` after the trigger, as in `#[on(pay: event(\"payment\") => Paid)]`",
        ));
    }
    input.parse::<Token![=>]>()?;
    let target: Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected the target state after `=>`"))?;
    let mut transition = TransitionDecl {
        tokens,
        name,
        trigger,
        target,
        when: None,
        action: None,
        action_options: Box::default(),
        display: None,
        id: None,
    };
    let mut seen: Vec<Ident> = Vec::new();
    while !input.is_empty() {
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            break;
        }
        let key: Ident = input.call(Ident::parse_any)?;
        let key_name = key.to_string();
        if let Some(first) = seen.iter().find(|k| **k == key) {
            let message = format!("duplicate transition option `{key_name}`");
            errors.duplicate(first, &key, &message);
        }
        seen.push(key.clone());
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!(
                    "expected `=` after `{key_name}`, as in `{}`",
                    example(&key_name)
                ),
            ));
        }
        input.parse::<Token![=]>()?;
        match key_name.as_str() {
            "when" | "action" => {
                let path = value::<Path>(input, &key_name)?;
                let path = fn_path(path, &key_name)?;
                let slot = if key_name == "when" {
                    &mut transition.when
                } else {
                    transition.action_options = Box::new(TaskOptions::parse(input)?);
                    &mut transition.action
                };
                slot.get_or_insert(FnRef { path });
            }
            "display" => {
                let lit = value::<LitStr>(input, &key_name)?;
                transition.display.get_or_insert(lit);
            }
            "id" => {
                let lit = value::<LitStr>(input, &key_name)?;
                if transition.trigger.is_none() {
                    errors.at(
                        &key,
                        "`id` names the trigger, and this transition has none; name the transition instead, as in `#[on(skip: => Done)]`",
                    );
                }
                transition.id.get_or_insert(lit);
            }
            _ => {
                let (hint, _) = did_you_mean(&key_name, TRANSITION_OPTIONS);
                errors.at(
                    &key,
                    format!(
                        "unknown transition option `{key_name}`; expected one of {}{hint}",
                        backticked(TRANSITION_OPTIONS)
                    ),
                );
                skip_value(input)?;
            }
        }
    }
    Ok(transition)
}

fn parse_trigger(input: ParseStream<'_>) -> syn::Result<TriggerDecl> {
    let start = input.fork();
    let kind: Ident = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected a trigger (`event(\"name\")`, `after(secs(30))`, `task(my_fn)`) or `=>` for an automatic transition",
        )
    })?;
    let kind_name = kind.to_string();
    let trigger = match kind_name.as_str() {
        "event" => TriggerDecl::Event {
            tokens: TokenStream::new(),
            event: Box::new(parse_event(input, &STATE_MACHINE_EVENTS)?),
        },
        "after" => {
            let content;
            syn::parenthesized!(content in input);
            let (millis, duration_type) = parse_duration(&content)?;
            if !content.is_empty() {
                return Err(content.error("unexpected token after the duration"));
            }
            TriggerDecl::After {
                tokens: TokenStream::new(),
                millis,
                duration_type,
            }
        }
        "task" => {
            let content;
            syn::parenthesized!(content in input);
            let path: Path = content.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "malformed `task`: expected the path of an async fn, as in `task(run_audit)`",
                )
            })?;
            let path = fn_path(path, "task")?;
            if !content.is_empty() {
                return Err(content.error("unexpected token after the fn path"));
            }
            TriggerDecl::Task {
                tokens: TokenStream::new(),
                function: FnRef { path },
                options: Box::new(TaskOptions::parse(input)?),
            }
        }
        _ => {
            let (hint, _) = did_you_mean(&kind_name, TRIGGERS);
            return Err(syn::Error::new(
                kind.span(),
                format!(
                    "unknown trigger `{kind_name}`; expected one of {}{hint}",
                    backticked(TRIGGERS)
                ),
            ));
        }
    };
    Ok(with_tokens(trigger, tokens_between(&start, input)))
}

fn with_tokens(trigger: TriggerDecl, spanned: TokenStream) -> TriggerDecl {
    match trigger {
        TriggerDecl::Event { event, .. } => TriggerDecl::Event {
            tokens: spanned,
            event,
        },
        TriggerDecl::After {
            millis,
            duration_type,
            ..
        } => TriggerDecl::After {
            tokens: spanned,
            millis,
            duration_type,
        },
        TriggerDecl::Task {
            function, options, ..
        } => TriggerDecl::Task {
            tokens: spanned,
            function,
            options,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse_ok(args: TokenStream, item: TokenStream) -> Machine {
        let mut errors = Errors::default();
        let machine = parse(args, item, &mut errors).unwrap();
        assert!(errors.is_empty(), "{:?}", errors.into_error());
        machine
    }

    fn parse_err(args: TokenStream, item: TokenStream) -> Vec<String> {
        let mut errors = Errors::default();
        let result = parse(args, item, &mut errors);
        let mut out = Vec::new();
        if let Err(e) = result {
            out.extend(e.into_iter().map(|e| e.to_string()));
        }
        if let Some(e) = errors.into_error() {
            out.extend(e.into_iter().map(|e| e.to_string()));
        }
        out
    }

    #[test]
    fn parses_the_full_grammar() {
        let machine = parse_ok(
            quote!(data = Order, initial = New, name = "Orders"),
            quote! {
                pub enum OrderFlow {
                    #[entry(send_confirmation)]
                    #[exit(orders::log_exit)]
                    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_amount, action = record_payment, display = "Pay", id = "pay_event")]
                    #[on(expire: after(Duration::from_secs(48 * 3600)) => Cancelled)]
                    #[on(audit: task(run_audit) => Paid)]
                    #[on(=> Paid, when = is_free)]
                    New,
                    #[state(name = "paid", display = "Paid in full")]
                    Paid,
                    Cancelled,
                }
            },
        );
        assert_eq!(machine.options.initial.unwrap().to_string(), "New");
        assert_eq!(machine.options.name.unwrap().value(), "Orders");
        let [new, paid, _] = &machine.states[..] else {
            panic!("three states")
        };
        assert_eq!(new.entry.as_ref().unwrap().name(), "send_confirmation");
        assert_eq!(new.exit.as_ref().unwrap().name(), "orders::log_exit");
        assert_eq!(new.transitions.len(), 4);
        let pay = &new.transitions[0];
        assert_eq!(pay.name.as_ref().unwrap().to_string(), "pay");
        assert_eq!(pay.target.to_string(), "Paid");
        assert_eq!(pay.id.as_ref().unwrap().value(), "pay_event");
        let Some(TriggerDecl::Event { event, .. }) = &pay.trigger else {
            panic!("an event")
        };
        assert!(event.payload.is_some());
        assert_eq!(event.name.value(), "payment");
        assert_eq!(event.key.as_ref().unwrap().text, "order_id");
        let Some(TriggerDecl::After { millis, .. }) = &new.transitions[1].trigger else {
            panic!("a delay")
        };
        assert_eq!(*millis, 48 * 3600 * 1000);
        assert!(new.transitions[3].trigger.is_none());
        assert!(new.transitions[3].name.is_none());
        assert_eq!(paid.name(), "paid");
        // The macro's own attributes are removed from the emitted enum.
        assert!(machine.item.variants.iter().all(|v| v.attrs.is_empty()));
    }

    #[test]
    fn durations_are_evaluated() {
        for (tokens, expected) in [
            (quote!(secs(30)), 30_000),
            (quote!(millis(1_500)), 1_500),
            (quote!(mins(2 + 3)), 300_000),
            (quote!(hours((1 + 1) * 24)), 48 * 3_600_000),
            (quote!(std::time::Duration::from_millis(10 / 2 - 1)), 4),
        ] {
            let (millis, _) = parse_duration.parse2(tokens.clone()).unwrap();
            assert_eq!(millis, expected, "{tokens}");
        }
        let error = parse_duration.parse2(quote!(fortnights(2))).unwrap_err();
        assert!(error.to_string().starts_with("malformed `after`"));
        let error = parse_duration.parse2(quote!(secs(x))).unwrap_err();
        assert!(error.to_string().contains("integer literal"));
    }

    #[test]
    fn unknown_duplicate_and_missing_options_sm_c9() {
        let errors = parse_err(
            quote!(data = Order, intial = New, data = Order),
            quote!(
                enum E {
                    A,
                }
            ),
        );
        assert_eq!(
            errors,
            [
                "unknown state machine option `intial`; expected one of `data`, `initial`, `name`, `retry`, `commit`, `look_back`, `queue`; did you mean `initial`?",
                "duplicate state machine option `data`\n= note: first used here (line 1, column 1)",
            ]
        );
        assert_eq!(
            parse_err(
                quote!(initial = A),
                quote!(
                    enum E {
                        A,
                    }
                )
            ),
            ["missing state machine option `data`; expected `data = MyData`"]
        );
    }

    #[test]
    fn transition_option_mistakes_sm_c9() {
        let errors = parse_err(
            quote!(data = D, initial = A),
            quote!(
                enum E {
                    #[on(event("go") => B, wen = ok, when = a, when = b)]
                    #[entyr(x)]
                    A,
                    B(u32),
                }
            ),
        );
        assert_eq!(
            errors,
            [
                "unknown state attribute `entyr`; expected one of `entry`, `exit`, `on`, `state`; did you mean `entry`?",
                "unknown transition option `wen`; expected one of `when`, `action`, `display`, `id`; did you mean `when`?",
                "duplicate transition option `when`\n= note: first used here (line 1, column 1)",
                "state `B` cannot carry fields; states are names, the data lives in `data = ...`",
            ]
        );
    }

    #[test]
    fn syntax_errors_fail_fast_per_attribute() {
        let errors = parse_err(
            quote!(data = D, initial = A),
            quote!(
                enum E {
                    #[on(evnt("go") => B)]
                    #[on(event("go") B)]
                    A,
                    B,
                }
            ),
        );
        assert_eq!(
            errors,
            [
                "unknown trigger `evnt`; expected one of `event`, `after`, `task`; did you mean `event`?",
                "expected `=> TargetState` after the trigger, as in `#[on(pay: event(\"payment\") => Paid)]`",
            ]
        );
        let errors = parse_err(
            quote!(data = D, initial = A),
            quote!(
                struct S;
            ),
        );
        assert_eq!(
            errors,
            ["`#[state_machine]` goes on an enum whose unit variants are the states"]
        );
    }
}
