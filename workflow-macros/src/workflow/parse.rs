//! Parsing: the `workflow!` input into a [`WorkflowDecl`] AST that keeps every token (and so
//! every span) the user wrote.
//!
//! The body of a flowchart is split at its top-level `;` first and each statement is parsed on
//! its own: a syntax error stops that statement only (syn's span, fail fast), every other
//! statement is still parsed, so independent mistakes are all reported in one build.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::{Attribute, Ident, LitStr, Path, Token, Type, Visibility};
use workflow_model::{
    Activation, CommitStrategy, JoinMode, ParallelMode, SagaOnFailure, SwitchMode, backticked,
    did_you_mean,
};

use crate::common::Errors;
use crate::common::event::{EventDecl, WORKFLOW_EVENTS, parse_event};
use crate::common::faults::{RetryDecl, TaskOptions, parse_retry};
use crate::common::parse::{FnRef, fn_path, parse_commit_strategy, parse_duration, tokens_between};

syn::custom_keyword!(workflow);

/// The node kinds of a flowchart.
pub(crate) const NODE_KINDS: [&str; 24] = [
    "task",
    "event",
    "after",
    "decide",
    "switch",
    "fork",
    "join",
    "end",
    "finish",
    "fault",
    "workflow",
    "sequence",
    "saga",
    "cron",
    "every",
    "start_at",
    "if",
    "while",
    "for_each",
    "parallel_for_each",
    "parallel",
    "break",
    "set",
    "correlate",
];
/// The step kinds of a sequence (and of the bodies of `if`, loops, `parallel` and `switch`).
pub(crate) const STEP_KINDS: [&str; 19] = [
    "task",
    "event",
    "after",
    "finish",
    "fault",
    "workflow",
    "sequence",
    "saga",
    "cron",
    "start_at",
    "if",
    "while",
    "for_each",
    "parallel_for_each",
    "parallel",
    "switch",
    "break",
    "set",
    "correlate",
];
/// The options of `#[workflow(...)]`.
pub(crate) const WORKFLOW_OPTIONS: [&str; 6] =
    ["name", "saga", "retry", "commit", "activation", "queue"];

/// The activation strategies of `#[workflow(activation = ..)]` (RT-15).
pub(crate) const ACTIVATIONS: [&str; 4] =
    ["always", "singleton", "correlation", "correlated_singleton"];
/// The modes of `saga(..)` (FLT-10).
pub(crate) const SAGA_MODES: [&str; 2] = ["fault", "continue"];
/// The modes of `parallel(..)` (ACT-18).
pub(crate) const PARALLEL_MODES: [&str; 2] = ["all", "any"];
/// The modes of `switch(..)` (ACT-14).
pub(crate) const SWITCH_MODES: [&str; 2] = ["first", "any"];
/// The modes of `join(...)`.
pub(crate) const JOIN_MODES: [&str; 2] = ["all", "any"];

/// The whole input: `#[workflow(name = "..")] pub workflow Name(Data) { .. }` or
/// `pub workflow Name(Data) = sequence [..];`.
pub(crate) struct WorkflowDecl {
    /// The user's attributes (doc comments, derives), emitted on the struct.
    pub(crate) attrs: Vec<Attribute>,
    /// `#[workflow(name = "...")]`.
    pub(crate) name: Option<LitStr>,
    /// `#[workflow(saga = fault)]`, `retry(..)` and `commit = ..`.
    pub(crate) options: WorkflowOptions,
    pub(crate) vis: Visibility,
    pub(crate) ident: Ident,
    pub(crate) data: Type,
    pub(crate) body: Body,
}

impl WorkflowDecl {
    /// The doc comment, lines trimmed and joined: the definition's description.
    pub(crate) fn description(&self) -> Option<String> {
        let lines: Vec<String> = self
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .filter_map(|a| match &a.meta {
                syn::Meta::NameValue(nv) => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Some(s.value().trim().to_owned()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        let text = lines.join("\n").trim().to_owned();
        (!text.is_empty()).then_some(text)
    }
}

/// The fault-handling options of `#[workflow(..)]`.
#[derive(Default)]
pub(crate) struct WorkflowOptions {
    /// `saga = fault | continue`: the root is a saga scope (FLT-10).
    pub(crate) saga: Option<(SagaOnFailure, Ident)>,
    /// `retry(..)`: the workflow's default policy (FLT-2).
    pub(crate) retry: Option<RetryDecl>,
    /// `commit = ..` (ENG-32).
    pub(crate) commit: Option<(CommitStrategy, TokenStream)>,
    /// `activation = ..` (RT-15).
    pub(crate) activation: Option<(Activation, TokenStream)>,
    /// `queue = IMPORTS`: the queue every run takes a slot of (QU-14).
    pub(crate) queue: Option<Path>,
}

/// A flowchart body or the plain sequence form.
pub(crate) enum Body {
    /// `{ nodes and connections }`.
    Flowchart {
        nodes: Vec<NodeDecl>,
        starts: Vec<Ident>,
        connections: Vec<ConnectionDecl>,
        /// The ids of nodes whose declaration had a syntax error: not reported as unknown.
        broken: Vec<String>,
    },
    /// `= sequence [ steps ]`.
    Sequence { steps: Vec<StepDecl> },
}

/// `id = kind;`
pub(crate) struct NodeDecl {
    pub(crate) tokens: TokenStream,
    pub(crate) id: Ident,
    pub(crate) kind: KindDecl,
}

/// `[id =] kind` in a sequence.
pub(crate) struct StepDecl {
    pub(crate) tokens: TokenStream,
    pub(crate) id: Option<Ident>,
    pub(crate) kind: KindDecl,
}

/// `-> [approved, rejected]` after a task or an event.
pub(crate) struct PortList {
    pub(crate) tokens: TokenStream,
    pub(crate) ports: Vec<Ident>,
}

/// What a node or a step is.
pub(crate) enum KindDecl {
    /// `task(path).retry(..).timeout(..).compensate(..).commit(..) [-> [ports]]`.
    Task {
        function: FnRef,
        options: Box<TaskOptions>,
        ports: Option<PortList>,
    },
    /// `saga(fault) [ steps ]` or `saga(continue) [ steps ]` (FLT-10).
    Saga {
        on_failure: SagaOnFailure,
        mode: Ident,
        steps: Vec<StepDecl>,
    },
    /// `cron("0 9 * * MON-FRI", tz = "Europe/Berlin", missed = skip).trigger()` (ACT-23,
    /// TM-12, TM-16, TM-19).
    Cron {
        expression: LitStr,
        zone: Option<LitStr>,
        /// The policy and its tokens, for the span of a diagnostic on it.
        missed: Option<(workflow_model::Missed, TokenStream)>,
        trigger: bool,
    },
    /// `every(mins(5), missed = skip).trigger()`: a repeating timer (ACT-21, TM-11, TM-19).
    Every {
        millis: u64,
        /// The policy and its tokens, for the span of a diagnostic on it.
        missed: Option<(workflow_model::Missed, TokenStream)>,
        trigger: bool,
    },
    /// `start_at("2026-03-29T02:30:00", tz = "Europe/Berlin").trigger()`: a wait for an
    /// instant, or a one-shot trigger (ACT-22, TM-13, TM-16).
    StartAt {
        at: LitStr,
        zone: Option<LitStr>,
        trigger: bool,
    },
    /// `event::<Payload>("name").key(path).trigger().timeout(hours(1)) [-> [ports]]`.
    Event(Box<EventNode>),
    /// `if(condition) [ steps ] else [ steps ]` (ACT-13, structured).
    If {
        condition: FnRef,
        then: Vec<StepDecl>,
        otherwise: Option<Vec<StepDecl>>,
    },
    /// `while(condition) [ steps ]` (ACT-15).
    While {
        condition: FnRef,
        body: Vec<StepDecl>,
    },
    /// `for_each(items) [ steps ]` (ACT-16).
    ForEach { items: FnRef, body: Vec<StepDecl> },
    /// `parallel_for_each(items).max_in_flight(4) [ steps ]` (ACT-17).
    ParallelForEach {
        items: FnRef,
        max_in_flight: Option<(u32, TokenStream)>,
        body: Vec<StepDecl>,
    },
    /// `parallel [ branch, .. ]` or `parallel(any) [ .. ]` (ACT-18).
    Parallel {
        mode: ParallelMode,
        branches: Vec<StepDecl>,
    },
    /// `switch(any) { label: condition => [ steps ], .., default => [ steps ] }` (ACT-14).
    StructuredSwitch {
        mode: SwitchMode,
        cases: Vec<(Ident, FnRef, Vec<StepDecl>)>,
        default: Option<Vec<StepDecl>>,
    },
    /// `break` (ACT-29).
    Break,
    /// `set(variable = value_fn)` (ACT-28).
    Set { variable: Ident, value: FnRef },
    /// `correlate(key_fn)` (ACT-27).
    Correlate { key: FnRef },
    /// `after(secs(30))`.
    After {
        millis: u64,
        duration_type: Option<Path>,
    },
    /// `decide(condition)`: ports `true` and `false`.
    Decide { condition: FnRef },
    /// `switch { label: condition, .. }`: one port per label, plus `default`.
    Switch {
        mode: SwitchMode,
        cases: Vec<(Ident, FnRef)>,
    },
    /// `fork [left, right]`.
    Fork {
        tokens: TokenStream,
        branches: Vec<Ident>,
    },
    /// `join(all)` or `join(any)`.
    Join { mode: JoinMode },
    /// `end`.
    End,
    /// `finish` or `finish(output_fn)` (ACT-25).
    Finish { output: Option<FnRef> },
    /// `fault("code", "message")`.
    Fault {
        code: LitStr,
        message: Option<LitStr>,
    },
    /// `workflow(Shipping)` or `workflow("shipping")`, optionally `.timeout(duration)` (TM-14).
    Workflow(SubWorkflowRef, Box<SubOptions>),
    /// `sequence [ steps ]`.
    Sequence { steps: Vec<StepDecl> },
}

impl KindDecl {
    /// The kind as written (`task`, `decide`, ...).
    pub(crate) fn keyword(&self) -> &'static str {
        match self {
            KindDecl::Task { .. } => "task",
            KindDecl::Event(_) => "event",
            KindDecl::If { .. } => "if",
            KindDecl::While { .. } => "while",
            KindDecl::ForEach { .. } => "for_each",
            KindDecl::ParallelForEach { .. } => "parallel_for_each",
            KindDecl::Parallel { .. } => "parallel",
            KindDecl::Break => "break",
            KindDecl::Set { .. } => "set",
            KindDecl::Correlate { .. } => "correlate",
            KindDecl::After { .. } => "after",
            KindDecl::Decide { .. } => "decide",
            KindDecl::Switch { .. } | KindDecl::StructuredSwitch { .. } => "switch",
            KindDecl::Fork { .. } => "fork",
            KindDecl::Join { .. } => "join",
            KindDecl::End => "end",
            KindDecl::Finish { .. } => "finish",
            KindDecl::Fault { .. } => "fault",
            KindDecl::Workflow(..) => "workflow",
            KindDecl::Sequence { .. } => "sequence",
            KindDecl::Saga { .. } => "saga",
            KindDecl::Cron { .. } => "cron",
            KindDecl::Every { .. } => "every",
            KindDecl::StartAt { .. } => "start_at",
        }
    }
}

/// An `event` node: the event and the outcomes its payload chooses (ACT-19).
pub(crate) struct EventNode {
    pub(crate) event: EventDecl,
    pub(crate) ports: Option<PortList>,
}

/// The options after `workflow(Child)` (ACT-24).
#[derive(Default)]
pub(crate) struct SubOptions {
    /// `.timeout(duration)` (TM-14).
    pub(crate) timeout: Option<(u64, TokenStream)>,
    /// `.input(fn)`: the child's input computed from the data.
    pub(crate) input: Option<FnRef>,
    /// `.assign_with(fn)`: folds the child's output into the data.
    pub(crate) assign: Option<FnRef>,
    /// `.detach()`: complete once the child is created.
    pub(crate) detach: Option<Ident>,
}

/// The methods after `workflow(..)`.
pub(crate) const SUB_OPTIONS: [&str; 4] = ["timeout", "input", "assign_with", "detach"];

/// The child workflow of a `workflow(..)` node.
pub(crate) enum SubWorkflowRef {
    /// A workflow type: its name is the path's last ident, and the type must implement
    /// `Workflow`.
    Type(Path),
    /// A registered name.
    Name(LitStr),
}

impl SubWorkflowRef {
    /// The child's registered name.
    pub(crate) fn name(&self) -> String {
        match self {
            SubWorkflowRef::Type(path) => path
                .segments
                .last()
                .map(|s| s.ident.unraw().to_string())
                .unwrap_or_default(),
            SubWorkflowRef::Name(lit) => lit.value(),
        }
    }

    pub(crate) fn tokens(&self) -> TokenStream {
        match self {
            SubWorkflowRef::Type(path) => path.to_token_stream(),
            SubWorkflowRef::Name(lit) => lit.to_token_stream(),
        }
    }
}

/// One end of a connection: `node` or `node.port`.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) node: Ident,
    pub(crate) port: Option<Ident>,
}

/// `source[.port] -> target`, one link of a chain.
pub(crate) struct ConnectionDecl {
    pub(crate) tokens: TokenStream,
    pub(crate) source: Endpoint,
    pub(crate) target: Ident,
}

/// Parses the input. `Err` only when the header (`workflow Name(Data)`) cannot be read; every
/// other mistake is collected in `errors` and parsing goes on.
pub(crate) fn parse(input: TokenStream, errors: &mut Errors) -> syn::Result<WorkflowDecl> {
    let parser = |input: ParseStream<'_>| parse_header(input, errors);
    parser.parse2(input)
}

fn parse_header(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<WorkflowDecl> {
    let all_attrs = input.call(Attribute::parse_outer)?;
    let mut attrs = Vec::new();
    let mut name = None;
    let mut options = WorkflowOptions::default();
    for attr in all_attrs {
        if attr.path().is_ident("workflow") {
            parse_options(&attr, &mut name, &mut options, errors);
        } else {
            attrs.push(attr);
        }
    }
    let vis: Visibility = input.parse()?;
    if !input.peek(workflow) {
        return Err(input.error(
            "expected `workflow Name(Data) { .. }`, as in `pub workflow Expense(ExpenseData) { .. }`",
        ));
    }
    input.parse::<workflow>()?;
    let ident: Ident = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the workflow's type name after `workflow`, as in `workflow Expense(ExpenseData)`",
        )
    })?;
    if !input.peek(syn::token::Paren) {
        return Err(input.error(format!(
            "expected the data type in parentheses after `{ident}`, as in `workflow {ident}(MyData)`"
        )));
    }
    let content;
    syn::parenthesized!(content in input);
    let data: Type = content.parse()?;
    if !content.is_empty() {
        return Err(content.error("expected one data type in the parentheses"));
    }
    let body = if input.peek(syn::token::Brace) {
        let group: proc_macro2::Group = input.parse()?;
        parse_flowchart(&group, errors)
    } else if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        let kind: Ident = input.call(Ident::parse_any)?;
        if kind != "sequence" {
            return Err(syn::Error::new(
                kind.span(),
                format!("expected `sequence [..]` after `=`, found `{kind}`"),
            ));
        }
        let steps = if input.peek(syn::token::Bracket) {
            // A mistake in a step still emits the struct (over no steps), so that uses of the
            // workflow type do not cascade into more errors.
            let group: TokenTree = input.parse()?;
            parse_steps
                .parse2(group.into_token_stream())
                .unwrap_or_else(|e| {
                    errors.push(e);
                    Vec::new()
                })
        } else {
            parse_steps(input)?
        };
        if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
        }
        Body::Sequence { steps }
    } else {
        return Err(input.error(format!(
            "expected `{{ nodes and connections }}` or `= sequence [..]` after `{ident}(..)`"
        )));
    };
    if !input.is_empty() {
        return Err(
            input.error("unexpected tokens after the workflow; `workflow!` declares one workflow")
        );
    }
    Ok(WorkflowDecl {
        attrs,
        name,
        options,
        vis,
        ident,
        data,
        body,
    })
}

/// `#[workflow(name = "Expense")]`.
fn parse_options(
    attr: &Attribute,
    name: &mut Option<LitStr>,
    options: &mut WorkflowOptions,
    errors: &mut Errors,
) {
    let result = attr.parse_nested_meta(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        match key.as_str() {
            "name" => {
                let lit: LitStr = meta.value()?.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "malformed `name`: expected a string literal, as in `name = \"Expense\"`",
                    )
                })?;
                if lit.value().trim().is_empty() {
                    errors.at(&lit, "the workflow `name` cannot be empty");
                }
                if name.is_some() {
                    errors.at(&meta.path, "duplicate workflow option `name`");
                } else {
                    *name = Some(lit);
                }
            }
            "saga" => {
                let mode: Ident = meta.value()?.call(Ident::parse_any)?;
                let on_failure = saga_mode(&mode)?;
                if options.saga.replace((on_failure, mode)).is_some() {
                    errors.at(&meta.path, "duplicate workflow option `saga`");
                }
            }
            "retry" => {
                let content;
                syn::parenthesized!(content in meta.input);
                let tokens = quote::quote!(#attr);
                let retry = parse_retry(&content, tokens)?;
                if options.retry.replace(retry).is_some() {
                    errors.at(&meta.path, "duplicate workflow option `retry`");
                }
            }
            "commit" => {
                let commit = parse_commit_strategy(meta.value()?)?;
                if options.commit.replace(commit).is_some() {
                    errors.at(&meta.path, "duplicate workflow option `commit`");
                }
            }
            "queue" => {
                let path: Path = meta.value()?.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "malformed `queue`: expected the path of a `Queue` item, as in `queue = IMPORTS`",
                    )
                })?;
                let path = crate::common::queues::queue_path(path, "queue")?;
                if options.queue.replace(path).is_some() {
                    errors.at(&meta.path, "duplicate workflow option `queue`");
                }
            }
            "activation" => {
                let value = meta.value()?;
                let start = value.fork();
                let mode: Ident = value.call(Ident::parse_any)?;
                let activation = match mode.to_string().as_str() {
                    "always" => Activation::Always,
                    "singleton" => Activation::Singleton,
                    "correlation" => Activation::Correlation,
                    "correlated_singleton" => Activation::CorrelatedSingleton,
                    other => {
                        let (hint, _) = did_you_mean(other, ACTIVATIONS);
                        return Err(syn::Error::new(
                            mode.span(),
                            format!(
                                "unknown activation strategy `{other}`; expected one of {}{hint}",
                                backticked(ACTIVATIONS)
                            ),
                        ));
                    }
                };
                let tokens = tokens_between(&start, value);
                if options.activation.replace((activation, tokens)).is_some() {
                    errors.at(&meta.path, "duplicate workflow option `activation`");
                }
            }
            _ => {
                let hint = match workflow_model::suggest(&key, WORKFLOW_OPTIONS) {
                    Some(found) => format!("did you mean `{found}`?"),
                    None => format!("expected one of {}", backticked(WORKFLOW_OPTIONS)),
                };
                errors.at(
                    &meta.path,
                    format!("unknown workflow option `{key}`; {hint}"),
                );
                if meta.input.peek(Token![=]) {
                    let _: syn::Expr = meta.value()?.parse()?;
                }
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        errors.push(e);
    }
}

/// Splits the braced body at its top-level `;` and parses each statement.
fn parse_flowchart(group: &proc_macro2::Group, errors: &mut Errors) -> Body {
    let mut nodes = Vec::new();
    let mut starts = Vec::new();
    let mut connections = Vec::new();
    let mut statement = TokenStream::new();
    let mut statements = Vec::new();
    for tt in group.stream() {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ';' => {
                statements.push(std::mem::take(&mut statement));
            }
            _ => statement.extend(std::iter::once(tt)),
        }
    }
    if !statement.is_empty() {
        // The last statement without its `;`.
        let last = statement.clone().into_iter().last();
        errors.push(syn::Error::new(
            last.map_or_else(|| group.span_close(), |tt| tt.span()),
            "expected `;` after the last statement",
        ));
        statements.push(statement);
    }
    let mut broken = Vec::new();
    for tokens in statements {
        let mut inner = Errors::default();
        let parser = |input: ParseStream<'_>| {
            parse_statement(
                input,
                &mut nodes,
                &mut starts,
                &mut connections,
                &mut broken,
                &mut inner,
            )
        };
        let result = parser.parse2(tokens);
        if let Some(e) = inner.into_error() {
            errors.push(e);
        }
        if let Err(e) = result {
            errors.push(e);
        }
    }
    Body::Flowchart {
        nodes,
        starts,
        connections,
        broken,
    }
}

fn parse_statement(
    input: ParseStream<'_>,
    nodes: &mut Vec<NodeDecl>,
    starts: &mut Vec<Ident>,
    connections: &mut Vec<ConnectionDecl>,
    broken: &mut Vec<String>,
    errors: &mut Errors,
) -> syn::Result<()> {
    // Doc comments on a node are allowed and ignored.
    let attrs = input.call(Attribute::parse_outer)?;
    if let Some(attr) = attrs.iter().find(|a| !a.path().is_ident("doc")) {
        return Err(syn::Error::new_spanned(
            attr,
            "only doc comments may stand before a node or a connection",
        ));
    }
    if input.peek(Ident::peek_any) && input.peek2(Token![=]) && !input.peek2(Token![==]) {
        let start = input.fork();
        let id: Ident = input.call(Ident::parse_any)?;
        if id == "start" {
            return Err(syn::Error::new(
                id.span(),
                "`start` is reserved for the explicit start (`start -> first_node`); name this node otherwise",
            ));
        }
        input.parse::<Token![=]>()?;
        broken.push(id.unraw().to_string());
        let kind = parse_kind(input, &NODE_KINDS, "node")?;
        broken.pop();
        let tokens = tokens_between(&start, input);
        // `.queue(..)` on a node that is no task: one error on the method, the statement kept.
        if input.peek(Token![.]) {
            let ahead = input.fork();
            ahead.parse::<Token![.]>()?;
            if let Ok(method) = ahead.call(Ident::parse_any)
                && matches!(method.to_string().as_str(), "queue" | "priority")
            {
                errors.push(syn::Error::new(
                    method.span(),
                    format!(
                        "a `{}` node takes no queue slot: `.{method}(..)` is a task option",
                        kind.keyword()
                    ),
                ));
                while !input.is_empty() && !input.peek(Token![;]) {
                    input.parse::<TokenTree>()?;
                }
            }
        }
        let missing_semicolon = !input.is_empty();
        if missing_semicolon {
            let last = tokens.clone().into_iter().last();
            errors.push(syn::Error::new(
                match last {
                    Some(TokenTree::Group(group)) => group.span_close(),
                    Some(tt) => tt.span(),
                    None => input.span(),
                },
                format!("expected `;` after the `{}` node `{id}`", kind.keyword()),
            ));
        }
        nodes.push(NodeDecl { tokens, id, kind });
        if missing_semicolon {
            // The rest is most likely the next statement.
            return parse_statement(input, nodes, starts, connections, broken, errors);
        }
        return Ok(());
    }
    if input.is_empty() {
        return Err(input.error("expected a node (`id = kind;`) or a connection (`a -> b;`)"));
    }
    parse_chain(input, starts, connections)
}

/// `start -> a -> b.port -> c;`: each `->` is one connection from the endpoint before it
/// (its port, `done` when absent) to the node after it; `start ->` marks the explicit start.
fn parse_chain(
    input: ParseStream<'_>,
    starts: &mut Vec<Ident>,
    connections: &mut Vec<ConnectionDecl>,
) -> syn::Result<()> {
    let mut endpoints: Vec<(Endpoint, TokenStream)> = Vec::new();
    loop {
        let start = input.fork();
        let endpoint: Endpoint = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected a node (`id = kind;`) or a connection (`a -> b;`)",
            )
        })?;
        let tokens = tokens_between(&start, input);
        if endpoint.node == "start" {
            if !endpoints.is_empty() {
                return Err(syn::Error::new(
                    endpoint.node.span(),
                    "`start` can only begin a chain, as in `start -> submit`",
                ));
            }
            if let Some(port) = &endpoint.port {
                return Err(syn::Error::new(port.span(), "`start` has no outcome ports"));
            }
        }
        endpoints.push((endpoint, tokens));
        if input.peek(Token![->]) {
            input.parse::<Token![->]>()?;
            continue;
        }
        if !input.is_empty() {
            return Err(input.error("expected `->` or `;` in the connection"));
        }
        break;
    }
    let Some((last, _)) = endpoints.last() else {
        return Ok(());
    };
    if endpoints.len() < 2 {
        return Err(syn::Error::new(
            last.node.span(),
            format!(
                "expected `-> target` after `{}`, or `= kind` to declare a node",
                last.node
            ),
        ));
    }
    if let Some(port) = &last.port {
        return Err(syn::Error::new(
            port.span(),
            format!(
                "a connection's target is a node, not a port: nodes have a single input; write `-> {}`",
                last.node
            ),
        ));
    }
    for pair in endpoints.windows(2) {
        let [(source, source_tokens), (target, target_tokens)] = pair else {
            continue;
        };
        if source.node == "start" {
            starts.push(target.node.clone());
            continue;
        }
        let target_node = &target.node;
        let _ = target_tokens;
        connections.push(ConnectionDecl {
            tokens: quote::quote!(#source_tokens -> #target_node),
            source: source.clone(),
            target: target.node.clone(),
        });
    }
    Ok(())
}

/// The kind after `id =` (or a sequence step). `allowed` lists the kinds valid here.
fn parse_kind(input: ParseStream<'_>, allowed: &[&str], place: &str) -> syn::Result<KindDecl> {
    let kind: Ident = input.call(Ident::parse_any).map_err(|e| {
        syn::Error::new(
            e.span(),
            format!(
                "expected a {place} kind: one of {}",
                backticked(allowed.iter().copied())
            ),
        )
    })?;
    let name = kind.to_string();
    if !allowed.contains(&name.as_str()) {
        if NODE_KINDS.contains(&name.as_str()) {
            return Err(syn::Error::new(
                kind.span(),
                format!(
                    "`{name}` is a flowchart node, not a sequence step; expected one of {}",
                    backticked(allowed.iter().copied())
                ),
            ));
        }
        let (hint, _) = did_you_mean(&name, allowed.iter().copied());
        return Err(syn::Error::new(
            kind.span(),
            format!(
                "unknown {place} kind `{name}`; expected one of {}{hint}",
                backticked(allowed.iter().copied())
            ),
        ));
    }
    let decl = match name.as_str() {
        "task" => {
            let function = parenthesized_fn(input, "task", "task(submit_expense)")?;
            KindDecl::Task {
                function,
                options: Box::new(TaskOptions::parse(input)?),
                ports: parse_ports(input)?,
            }
        }
        "saga" => {
            let content = parenthesized(input, "saga", "saga(fault) [task(a), task(b)]")?;
            let mode: Ident = content.call(Ident::parse_any)?;
            let on_failure = saga_mode(&mode)?;
            if !content.is_empty() {
                return Err(content.error("unexpected token after the saga mode"));
            }
            KindDecl::Saga {
                on_failure,
                mode,
                steps: parse_steps(input)?,
            }
        }
        "cron" => {
            let content = parenthesized(input, "cron", "cron(\"0 9 * * MON-FRI\")")?;
            let expression: LitStr = content.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "malformed `cron`: expected the expression as a string, as in `cron(\"0 9 * * MON-FRI\")`",
                )
            })?;
            let (zone, missed) = parse_time_options(&content, "cron", true, true)?;
            KindDecl::Cron {
                expression,
                zone,
                missed,
                trigger: parse_trigger(input)?,
            }
        }
        "every" => {
            let content = parenthesized(input, "every", "every(mins(5))")?;
            let (millis, _) = parse_duration(&content)?;
            let (_, missed) = parse_time_options(&content, "every", false, true)?;
            KindDecl::Every {
                millis,
                missed,
                trigger: parse_trigger(input)?,
            }
        }
        "start_at" => {
            let example = "start_at(\"2026-03-29T09:00:00\", tz = \"Europe/Berlin\")";
            let content = parenthesized(input, "start_at", example)?;
            let at: LitStr = content.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    format!(
                        "malformed `start_at`: expected the instant as a string, as in `{example}`"
                    ),
                )
            })?;
            let (zone, _) = parse_time_options(&content, "start_at", true, false)?;
            KindDecl::StartAt {
                at,
                zone,
                trigger: parse_trigger(input)?,
            }
        }
        "event" => parse_event_node(input)?,
        "after" => {
            let content = parenthesized(input, "after", "after(hours(24))")?;
            let (millis, duration_type) = parse_duration(&content)?;
            if !content.is_empty() {
                return Err(content.error("unexpected token after the duration"));
            }
            KindDecl::After {
                millis,
                duration_type,
            }
        }
        "decide" => KindDecl::Decide {
            condition: parenthesized_fn(input, "decide", "decide(is_large)")?,
        },
        "switch" => parse_switch(input, place)?,
        "fork" => {
            let start = input.fork();
            if !input.peek(syn::token::Bracket) {
                return Err(
                    input.error("expected `[branch, ..]` after `fork`, as in `fork [left, right]`")
                );
            }
            let content;
            syn::bracketed!(content in input);
            let branches = ident_list(&content)?;
            KindDecl::Fork {
                tokens: tokens_between(&start, input),
                branches,
            }
        }
        "join" => {
            let content = parenthesized(input, "join", "join(all)")?;
            let mode: Ident = content.call(Ident::parse_any).map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "a join states its mode: `join(all)` or `join(any)`",
                )
            })?;
            let mode = match mode.to_string().as_str() {
                "all" => JoinMode::All,
                "any" => JoinMode::Any,
                other => {
                    let (hint, _) = did_you_mean(other, JOIN_MODES);
                    return Err(syn::Error::new(
                        mode.span(),
                        format!(
                            "unknown join mode `{other}`; expected one of {}{hint}",
                            backticked(JOIN_MODES)
                        ),
                    ));
                }
            };
            if !content.is_empty() {
                return Err(content.error("unexpected token after the join mode"));
            }
            KindDecl::Join { mode }
        }
        "end" => KindDecl::End,
        "finish" => {
            let output = if input.peek(syn::token::Paren) {
                Some(parenthesized_fn(input, "finish", "finish(order_total)")?)
            } else {
                None
            };
            KindDecl::Finish { output }
        }
        "if" => {
            let condition = parenthesized_fn(input, "if", "if(is_large) [task(review)]")?;
            let then = parse_body(input, "if(is_large) [task(review)] else [task(pay)]")?;
            let otherwise = if input.peek(Token![else]) {
                input.parse::<Token![else]>()?;
                Some(parse_body(
                    input,
                    "if(is_large) [task(review)] else [task(pay)]",
                )?)
            } else {
                None
            };
            KindDecl::If {
                condition,
                then,
                otherwise,
            }
        }
        "while" => KindDecl::While {
            condition: parenthesized_fn(input, "while", "while(has_more) [task(fetch)]")?,
            body: parse_body(input, "while(has_more) [task(fetch)]")?,
        },
        "for_each" => KindDecl::ForEach {
            items: parenthesized_fn(input, "for_each", "for_each(order_lines) [task(ship_line)]")?,
            body: parse_body(input, "for_each(order_lines) [task(ship_line)]")?,
        },
        "parallel_for_each" => {
            let example = "parallel_for_each(order_lines).max_in_flight(4) [task(ship_line)]";
            let items = parenthesized_fn(input, "parallel_for_each", example)?;
            let mut max_in_flight = None;
            if input.peek(Token![.]) {
                input.parse::<Token![.]>()?;
                let method: Ident = input.call(Ident::parse_any)?;
                if method != "max_in_flight" {
                    return Err(syn::Error::new(
                        method.span(),
                        format!(
                            "unknown option `.{method}`; the only option here is `.max_in_flight(n)`"
                        ),
                    ));
                }
                let content = parenthesized(input, "max_in_flight", "max_in_flight(4)")?;
                let lit: syn::LitInt = content.parse()?;
                let value = lit.base10_parse::<u32>()?;
                if value == 0 {
                    return Err(syn::Error::new(
                        lit.span(),
                        "`max_in_flight` must be at least 1; leave it out for no limit",
                    ));
                }
                max_in_flight = Some((value, lit.to_token_stream()));
            }
            KindDecl::ParallelForEach {
                items,
                max_in_flight,
                body: parse_body(input, example)?,
            }
        }
        "parallel" => {
            let mode = if input.peek(syn::token::Paren) {
                let content = parenthesized(input, "parallel", "parallel(any) [task(a), task(b)]")?;
                let mode: Ident = content.call(Ident::parse_any)?;
                if !content.is_empty() {
                    return Err(content.error("unexpected token after the parallel mode"));
                }
                match mode.to_string().as_str() {
                    "all" => ParallelMode::All,
                    "any" => ParallelMode::Any,
                    other => {
                        let (hint, _) = did_you_mean(other, PARALLEL_MODES);
                        return Err(syn::Error::new(
                            mode.span(),
                            format!(
                                "unknown parallel mode `{other}`; expected one of {}{hint}",
                                backticked(PARALLEL_MODES)
                            ),
                        ));
                    }
                }
            } else {
                ParallelMode::All
            };
            KindDecl::Parallel {
                mode,
                branches: parse_body(input, "parallel [sequence [task(a), task(b)], task(c)]")?,
            }
        }
        "break" => KindDecl::Break,
        "set" => {
            let content = parenthesized(input, "set", "set(total = order_total)")?;
            let variable: Ident = content.call(Ident::parse_any)?;
            if !content.peek(Token![=]) {
                return Err(syn::Error::new(
                    variable.span(),
                    format!(
                        "expected `= value_fn` after `{variable}`, as in `set({variable} = compute_{variable})`"
                    ),
                ));
            }
            content.parse::<Token![=]>()?;
            let path: Path = content.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "malformed `set`: expected the path of a value fn, as in `set(total = order_total)`",
                )
            })?;
            let path = fn_path(path, "set")?;
            if !content.is_empty() {
                return Err(content.error("unexpected token after the value fn"));
            }
            KindDecl::Set {
                variable,
                value: FnRef { path },
            }
        }
        "correlate" => KindDecl::Correlate {
            key: parenthesized_fn(input, "correlate", "correlate(order_key)")?,
        },
        "fault" => {
            let content = parenthesized(
                input,
                "fault",
                "fault(\"rejected\", \"the expense was rejected\")",
            )?;
            let code: LitStr = content.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "malformed `fault`: expected an error code string, as in `fault(\"rejected\", \"the expense was rejected\")`",
                )
            })?;
            let message = if content.peek(Token![,]) {
                content.parse::<Token![,]>()?;
                if content.is_empty() {
                    None
                } else {
                    Some(content.parse::<LitStr>()?)
                }
            } else {
                None
            };
            if !content.is_empty() {
                return Err(content.error("unexpected token after the fault message"));
            }
            KindDecl::Fault { code, message }
        }
        "workflow" => {
            let content = parenthesized(input, "workflow", "workflow(Shipping)")?;
            let child = if content.peek(LitStr) {
                SubWorkflowRef::Name(content.parse()?)
            } else {
                let path: Path = content.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "malformed `workflow`: expected a workflow type or its name, as in `workflow(Shipping)`",
                    )
                })?;
                SubWorkflowRef::Type(path)
            };
            if !content.is_empty() {
                return Err(content.error("unexpected token after the child workflow"));
            }
            let mut options = SubOptions::default();
            while input.peek(Token![.]) {
                input.parse::<Token![.]>()?;
                let method: Ident = input.call(Ident::parse_any)?;
                let method_name = method.to_string();
                let duplicate = match method_name.as_str() {
                    "timeout" => {
                        let content = parenthesized(input, "timeout", "timeout(hours(1))")?;
                        let start = content.fork();
                        let (millis, _) = parse_duration(&content)?;
                        if !content.is_empty() {
                            return Err(content.error("unexpected token after the duration"));
                        }
                        options
                            .timeout
                            .replace((millis, tokens_between(&start, &content)))
                            .is_some()
                    }
                    "input" => {
                        let f = parenthesized_fn(input, "input", "input(child_input)")?;
                        options.input.replace(f).is_some()
                    }
                    "assign_with" => {
                        let f = parenthesized_fn(input, "assign_with", "assign_with(take_result)")?;
                        options.assign.replace(f).is_some()
                    }
                    "detach" => {
                        let content = parenthesized(input, "detach", "detach()")?;
                        if !content.is_empty() {
                            return Err(content.error("`.detach()` takes no argument"));
                        }
                        options.detach.replace(method.clone()).is_some()
                    }
                    _ => {
                        let hint = workflow_model::suggest(&method_name, SUB_OPTIONS)
                            .map(|found| format!("; did you mean `.{found}`?"))
                            .unwrap_or_default();
                        return Err(syn::Error::new(
                            method.span(),
                            format!(
                                "unknown sub-workflow option `.{method_name}`; expected one of `.timeout(duration)`, `.input(fn)`, `.assign_with(fn)`, `.detach()`{hint}"
                            ),
                        ));
                    }
                };
                if duplicate {
                    return Err(syn::Error::new(
                        method.span(),
                        format!("duplicate sub-workflow option `.{method_name}`"),
                    ));
                }
            }
            if let (Some(detach), Some(_)) = (&options.detach, &options.timeout) {
                // TM-14: a detached child is not waited for; the runtime refuses the pair.
                return Err(syn::Error::new(
                    detach.span(),
                    "a detached sub-workflow is not waited for, so it cannot have a `.timeout(..)`; remove one of them",
                ));
            }
            KindDecl::Workflow(child, Box::new(options))
        }
        // "sequence"
        _ => KindDecl::Sequence {
            steps: parse_steps(input)?,
        },
    };
    if input.peek(Token![->]) && !matches!(decl, KindDecl::Task { .. } | KindDecl::Event(_)) {
        return Err(syn::Error::new(
            input.span(),
            format!(
                "only `task` and `event` declare their outcome ports; `{name}` has fixed ports"
            ),
        ));
    }
    Ok(decl)
}

/// The `[ steps ]` body of a structured kind.
fn parse_body(input: ParseStream<'_>, example: &str) -> syn::Result<Vec<StepDecl>> {
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(format!("expected the body in brackets, as in `{example}`")));
    }
    parse_steps(input)
}

/// `switch { label: condition, .. }` (a flowchart node, routing by ports) or
/// `switch { label: condition => [ steps ], .., default => [ steps ] }` (structured), each
/// optionally with its mode: `switch(any) { .. }` (ACT-14).
fn parse_switch(input: ParseStream<'_>, place: &str) -> syn::Result<KindDecl> {
    let mode = if input.peek(syn::token::Paren) {
        let content = parenthesized(input, "switch", "switch(any) { high: is_high }")?;
        let mode: Ident = content.call(Ident::parse_any)?;
        if !content.is_empty() {
            return Err(content.error("unexpected token after the switch mode"));
        }
        match mode.to_string().as_str() {
            "first" => SwitchMode::First,
            "any" => SwitchMode::Any,
            other => {
                let (hint, _) = did_you_mean(other, SWITCH_MODES);
                return Err(syn::Error::new(
                    mode.span(),
                    format!(
                        "unknown switch mode `{other}`; expected one of {}{hint}",
                        backticked(SWITCH_MODES)
                    ),
                ));
            }
        }
    } else {
        SwitchMode::First
    };
    if !input.peek(syn::token::Brace) {
        return Err(input.error(
            "expected `{ label: condition, .. }` after `switch`, as in `switch { high: is_high, low: is_low }`",
        ));
    }
    let content;
    syn::braced!(content in input);
    let mut cases = Vec::new();
    let mut bodies = Vec::new();
    let mut default = None;
    let mut without_body: Option<Ident> = None;
    while !content.is_empty() {
        let label: Ident = content.call(Ident::parse_any)?;
        if label == "default" && content.peek(Token![=>]) {
            content.parse::<Token![=>]>()?;
            default = Some((label, parse_body(&content, "default => [task(fallback)]")?));
        } else {
            if !content.peek(Token![:]) || content.peek(Token![::]) {
                return Err(syn::Error::new(
                    label.span(),
                    format!(
                        "expected `: condition` after the case `{label}`, as in `{label}: is_{label}`"
                    ),
                ));
            }
            content.parse::<Token![:]>()?;
            let path: Path = content.parse()?;
            let path = fn_path(path, "switch")?;
            if content.peek(Token![=>]) {
                content.parse::<Token![=>]>()?;
                let body = parse_body(&content, "high: is_high => [task(review)]")?;
                bodies.push(Some(body));
            } else {
                without_body.get_or_insert_with(|| label.clone());
                bodies.push(None);
            }
            cases.push((label, FnRef { path }));
        }
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    let structured = default.is_some() || bodies.iter().any(Option::is_some) || place == "step";
    if !structured {
        return Ok(KindDecl::Switch { mode, cases });
    }
    if let Some(label) = without_body {
        return Err(syn::Error::new(
            label.span(),
            format!(
                "the case `{label}` has no body; in a sequence, or when another case has one, every case runs steps: `{label}: condition => [task(..)]`"
            ),
        ));
    }
    Ok(KindDecl::StructuredSwitch {
        mode,
        cases: cases
            .into_iter()
            .zip(bodies)
            .map(|((label, condition), body)| (label, condition, body.unwrap_or_default()))
            .collect(),
        default: default.map(|(_, body)| body),
    })
}

/// `fault` or `continue` in `saga(..)` (FLT-10).
fn saga_mode(mode: &Ident) -> syn::Result<SagaOnFailure> {
    match mode.to_string().as_str() {
        "fault" => Ok(SagaOnFailure::CompensateThenFault),
        "continue" => Ok(SagaOnFailure::CompensateThenContinue),
        other => {
            let (hint, _) = did_you_mean(other, SAGA_MODES);
            Err(syn::Error::new(
                mode.span(),
                format!(
                    "unknown saga mode `{other}`; expected one of {}{hint}",
                    backticked(SAGA_MODES)
                ),
            ))
        }
    }
}

/// The options after the first argument of `cron(..)`, `every(..)` or `start_at(..)`: `tz =
/// "Europe/Berlin"` where `zone` says the kind takes one, `missed = ..` where `missed` does;
/// each at most once.
#[allow(clippy::type_complexity)]
fn parse_time_options(
    content: ParseStream<'_>,
    kind: &str,
    zone: bool,
    missed: bool,
) -> syn::Result<(
    Option<LitStr>,
    Option<(workflow_model::Missed, TokenStream)>,
)> {
    let expected = match (zone, missed) {
        (true, true) => "`tz = \"Europe/Berlin\"` or `missed = skip`, `once` or `backfill(5)`",
        (true, false) => "`tz = \"Europe/Berlin\"`",
        _ => "`missed = skip`, `once` or `backfill(5)`",
    };
    let mut found_zone = None;
    let mut found_missed = None;
    while content.peek(Token![,]) {
        content.parse::<Token![,]>()?;
        if content.is_empty() {
            break;
        }
        let key: Ident = content.call(Ident::parse_any)?;
        let fresh = (zone && key == "tz" && found_zone.is_none())
            || (missed && key == "missed" && found_missed.is_none());
        if !fresh {
            return Err(syn::Error::new(
                key.span(),
                format!("unknown or repeated {kind} option `{key}`; expected {expected}"),
            ));
        }
        content.parse::<Token![=]>()?;
        if key == "tz" {
            found_zone = Some(content.parse::<LitStr>()?);
        } else {
            found_missed = Some(parse_missed(content)?);
        }
    }
    if !content.is_empty() {
        return Err(content.error(format!("unexpected token in `{kind}(..)`")));
    }
    Ok((found_zone, found_missed))
}

/// `skip`, `once` or `backfill(N)`: a cron or timer trigger's missed-occurrence policy (TM-19), with
/// its tokens.
fn parse_missed(input: ParseStream<'_>) -> syn::Result<(workflow_model::Missed, TokenStream)> {
    let name: Ident = input.call(Ident::parse_any)?;
    let expected = "expected `skip`, `once` or `backfill(N)`";
    match name.to_string().as_str() {
        "skip" => Ok((workflow_model::Missed::Skip, name.into_token_stream())),
        "once" => Ok((workflow_model::Missed::Once, name.into_token_stream())),
        "backfill" => {
            let content;
            let parens = syn::parenthesized!(content in input);
            let count_error = |span| {
                syn::Error::new(
                    span,
                    "`backfill` takes how many missed occurrences to start at most, as in `backfill(5)`",
                )
            };
            let count: syn::LitInt = content.parse().map_err(|e| count_error(e.span()))?;
            let n = count
                .base10_parse::<u32>()
                .map_err(|_| count_error(count.span()))?;
            let mut tokens = name.into_token_stream();
            parens.surround(&mut tokens, |t| count.to_tokens(t));
            Ok((workflow_model::Missed::Backfill(n), tokens))
        }
        other => Err(syn::Error::new(
            name.span(),
            format!("unknown missed-occurrence policy `{other}`; {expected}"),
        )),
    }
}

/// An optional `.trigger()` after `cron(..)`, `every(..)` or `start_at(..)` (ACT-7).
fn parse_trigger(input: ParseStream<'_>) -> syn::Result<bool> {
    if !input.peek(Token![.]) {
        return Ok(false);
    }
    input.parse::<Token![.]>()?;
    let method: Ident = input.call(Ident::parse_any)?;
    if method != "trigger" {
        return Err(syn::Error::new(
            method.span(),
            format!("unknown option `.{method}`; the only option here is `.trigger()`"),
        ));
    }
    let content;
    syn::parenthesized!(content in input);
    if !content.is_empty() {
        return Err(content.error("`.trigger()` takes no argument"));
    }
    Ok(true)
}

fn parenthesized<'a>(
    input: ParseStream<'a>,
    kind: &str,
    example: &str,
) -> syn::Result<syn::parse::ParseBuffer<'a>> {
    if !input.peek(syn::token::Paren) {
        return Err(input.error(format!("expected `(..)` after `{kind}`, as in `{example}`")));
    }
    let content;
    syn::parenthesized!(content in input);
    Ok(content)
}

fn parenthesized_fn(input: ParseStream<'_>, kind: &str, example: &str) -> syn::Result<FnRef> {
    let content = parenthesized(input, kind, example)?;
    let path: Path = content.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("malformed `{kind}`: expected the path of a fn, as in `{example}`"),
        )
    })?;
    let path = fn_path(path, kind)?;
    if !content.is_empty() {
        return Err(content.error("unexpected token after the fn path"));
    }
    Ok(FnRef { path })
}

/// `a, b, c` (ports, branches), any identifier including `true`.
fn ident_list(input: ParseStream<'_>) -> syn::Result<Vec<Ident>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        out.push(input.call(Ident::parse_any)?);
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(out)
}

/// `-> [approved, rejected]`.
fn parse_ports(input: ParseStream<'_>) -> syn::Result<Option<PortList>> {
    if !input.peek(Token![->]) {
        return Ok(None);
    }
    input.parse::<Token![->]>()?;
    let start = input.fork();
    if !input.peek(syn::token::Bracket) {
        return Err(
            input.error("expected the outcome ports in brackets, as in `-> [approved, rejected]`")
        );
    }
    let content;
    syn::bracketed!(content in input);
    let ports = ident_list(&content)?;
    Ok(Some(PortList {
        tokens: tokens_between(&start, input),
        ports,
    }))
}

fn parse_event_node(input: ParseStream<'_>) -> syn::Result<KindDecl> {
    let event = parse_event(input, &WORKFLOW_EVENTS)?;
    let ports = parse_ports(input)?;
    if let (Some(list), None) = (&ports, &event.payload) {
        // ACT-19: declared outcomes are chosen by the payload type's outcome mapping.
        return Err(syn::Error::new_spanned(
            &list.tokens,
            format!(
                "an event that declares its outcomes needs a payload type that chooses one, as in `event::<Decision>({:?})`",
                event.name.value()
            ),
        ));
    }
    Ok(KindDecl::Event(Box::new(EventNode { event, ports })))
}

/// `[ step, step, .. ]`.
fn parse_steps(input: ParseStream<'_>) -> syn::Result<Vec<StepDecl>> {
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(
            "expected `[step, ..]` after `sequence`, as in `sequence [task(a), after(secs(5)), task(b)]`",
        ));
    }
    let content;
    syn::bracketed!(content in input);
    let mut steps = Vec::new();
    while !content.is_empty() {
        let start = content.fork();
        let id = if content.peek(Ident::peek_any) && content.peek2(Token![=]) {
            let id: Ident = content.call(Ident::parse_any)?;
            content.parse::<Token![=]>()?;
            Some(id)
        } else {
            None
        };
        let kind = parse_kind(&content, &STEP_KINDS, "step")?;
        steps.push(StepDecl {
            tokens: tokens_between(&start, &content),
            id,
            kind,
        });
        if content.is_empty() {
            break;
        }
        if !content.peek(Token![,]) {
            return Err(content.error("expected `,` between the steps of a sequence"));
        }
        content.parse::<Token![,]>()?;
    }
    Ok(steps)
}

impl Parse for Endpoint {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let node = input.call(Ident::parse_any)?;
        let port = if input.peek(Token![.]) {
            input.parse::<Token![.]>()?;
            Some(input.call(Ident::parse_any)?)
        } else {
            None
        };
        Ok(Endpoint { node, port })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse_ok(input: TokenStream) -> WorkflowDecl {
        let mut errors = Errors::default();
        let decl = parse(input, &mut errors).unwrap();
        assert!(errors.is_empty(), "{:?}", errors.into_error());
        decl
    }

    fn messages(input: TokenStream) -> Vec<String> {
        let mut errors = Errors::default();
        let mut out = Vec::new();
        if let Err(e) = parse(input, &mut errors) {
            out.extend(e.into_iter().map(|e| e.to_string()));
        }
        if let Some(e) = errors.into_error() {
            out.extend(e.into_iter().map(|e| e.to_string()));
        }
        out
    }

    #[test]
    fn parses_every_node_kind_and_chains() {
        let decl = parse_ok(quote! {
            /// Expense approval.
            #[workflow(name = "ExpenseApproval")]
            pub workflow Expense(ExpenseData) {
                submit  = task(expenses::submit);
                review  = task(auto_review) -> [approved, rejected, manual];
                manager = event::<Decision>("expense.decision").key(customer.id).trigger().timeout(hours(24)) -> [approved, rejected];
                remind  = after(Duration::from_secs(48 * 3600));
                check   = decide(is_large);
                route   = switch { high: is_high, low: is_low };
                split   = fork [left, right];
                merge   = join(any);
                done    = end;
                stop    = finish;
                fail    = fault("rejected", "no");
                child   = workflow(Shipping);
                named   = workflow("shipping-v2");
                later   = sequence [task(audit), wait = after(secs(5))];

                start -> submit -> review;
                review.approved -> check.true -> done;
            }
        });
        assert_eq!(decl.ident.to_string(), "Expense");
        assert_eq!(decl.name.as_ref().unwrap().value(), "ExpenseApproval");
        assert_eq!(decl.description().as_deref(), Some("Expense approval."));
        let Body::Flowchart {
            nodes,
            starts,
            connections,
            broken,
        } = &decl.body
        else {
            panic!("a flowchart")
        };
        assert!(broken.is_empty());
        let kinds: Vec<&str> = nodes.iter().map(|n| n.kind.keyword()).collect();
        assert_eq!(
            kinds,
            [
                "task", "task", "event", "after", "decide", "switch", "fork", "join", "end",
                "finish", "fault", "workflow", "workflow", "sequence"
            ]
        );
        let Some(KindDecl::Task {
            function, ports, ..
        }) = nodes.get(1).map(|n| &n.kind)
        else {
            panic!("a task")
        };
        assert_eq!(function.name(), "auto_review");
        assert_eq!(ports.as_ref().unwrap().ports.len(), 3);
        let Some(KindDecl::Event(event)) = nodes.get(2).map(|n| &n.kind) else {
            panic!("an event")
        };
        let EventNode {
            event:
                EventDecl {
                    payload,
                    name,
                    key,
                    trigger,
                    timeout,
                    ..
                },
            ports,
        } = &**event;
        assert!(payload.is_some() && *trigger);
        assert_eq!(name.value(), "expense.decision");
        assert_eq!(key.as_ref().unwrap().text, "customer.id");
        assert_eq!(timeout.as_ref().map(|(ms, _)| *ms), Some(24 * 3_600_000));
        assert_eq!(ports.as_ref().unwrap().ports.len(), 2);
        let Some(KindDecl::After { millis, .. }) = nodes.get(3).map(|n| &n.kind) else {
            panic!("a delay")
        };
        assert_eq!(*millis, 48 * 3600 * 1000);
        let Some(KindDecl::Join { mode }) = nodes.get(7).map(|n| &n.kind) else {
            panic!("a join")
        };
        assert_eq!(*mode, JoinMode::Any);
        let Some(KindDecl::Workflow(child, _)) = nodes.get(11).map(|n| &n.kind) else {
            panic!("a sub-workflow")
        };
        assert_eq!(child.name(), "Shipping");
        let Some(KindDecl::Sequence { steps }) = nodes.get(13).map(|n| &n.kind) else {
            panic!("a sequence")
        };
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1].id.as_ref().unwrap().to_string(), "wait");

        // `start -> submit -> review` is the start plus one connection; a port in the middle
        // of a chain is the source port of the next link.
        let starts: Vec<String> = starts.iter().map(ToString::to_string).collect();
        assert_eq!(starts, ["submit"]);
        let links: Vec<(String, Option<String>, String)> = connections
            .iter()
            .map(|c| {
                (
                    c.source.node.to_string(),
                    c.source.port.as_ref().map(ToString::to_string),
                    c.target.to_string(),
                )
            })
            .collect();
        assert_eq!(
            links,
            [
                ("submit".to_owned(), None, "review".to_owned()),
                (
                    "review".to_owned(),
                    Some("approved".to_owned()),
                    "check".to_owned()
                ),
                (
                    "check".to_owned(),
                    Some("true".to_owned()),
                    "done".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn parses_the_sequence_form() {
        let decl = parse_ok(quote! {
            workflow Deferred(Data) = sequence [task(start_step), after(secs(5)), task(continue_step)];
        });
        let Body::Sequence { steps } = &decl.body else {
            panic!("a sequence")
        };
        let kinds: Vec<&str> = steps.iter().map(|s| s.kind.keyword()).collect();
        assert_eq!(kinds, ["task", "after", "task"]);
    }

    #[test]
    fn every_statement_error_is_reported_and_parsing_goes_on() {
        let errors = messages(quote! {
            #[workflow(nmae = "X")]
            workflow W(D) {
                a = tsak(f);
                b = task(g)
                c = join(sometimes);
                start = end;
                a -> b.done;
                a;
                d = decide(h) -> [yes];
            }
        });
        assert_eq!(
            errors,
            [
                "unknown workflow option `nmae`; did you mean `name`?",
                "unknown node kind `tsak`; expected one of `task`, `event`, `after`, `decide`, `switch`, `fork`, `join`, `end`, `finish`, `fault`, `workflow`, `sequence`, `saga`, `cron`, `every`, `start_at`, `if`, `while`, `for_each`, `parallel_for_each`, `parallel`, `break`, `set`, `correlate`; did you mean `task`?",
                "expected `;` after the `task` node `b`",
                "unknown join mode `sometimes`; expected one of `all`, `any`",
                "`start` is reserved for the explicit start (`start -> first_node`); name this node otherwise",
                "a connection's target is a node, not a port: nodes have a single input; write `-> b`",
                "expected `-> target` after `a`, or `= kind` to declare a node",
                "only `task` and `event` declare their outcome ports; `decide` has fixed ports",
            ]
        );
    }

    #[test]
    fn cron_options_are_a_zone_and_a_missed_policy_each_once() {
        let errors = messages(quote! {
            workflow W(D) {
                a = cron("0 9 * * *", zone = "UTC");
                b = cron("0 9 * * *", tz = "UTC", tz = "Europe/Berlin");
                c = cron("0 9 * * *", missed = backfill(-1));
                d = cron("0 9 * * *", tz = "Europe/Berlin", missed = once).trigger();
            }
        });
        let expected =
            "expected `tz = \"Europe/Berlin\"` or `missed = skip`, `once` or `backfill(5)`";
        assert_eq!(
            errors,
            [
                format!("unknown or repeated cron option `zone`; {expected}"),
                format!("unknown or repeated cron option `tz`; {expected}"),
                "`backfill` takes how many missed occurrences to start at most, as in `backfill(5)`"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn header_mistakes_are_one_error() {
        assert_eq!(
            messages(quote!(
                pub struct W;
            )),
            [
                "expected `workflow Name(Data) { .. }`, as in `pub workflow Expense(ExpenseData) { .. }`"
            ]
        );
        assert_eq!(
            messages(quote!(workflow W(D) = sequnce [])),
            ["expected `sequence [..]` after `=`, found `sequnce`"]
        );
        // A mistake in a step: the error, and the workflow over no steps.
        assert_eq!(
            messages(quote!(workflow W(D) = sequence [decide(f)])),
            [
                "`decide` is a flowchart node, not a sequence step; expected one of `task`, `event`, `after`, `finish`, `fault`, `workflow`, `sequence`, `saga`, `cron`, `start_at`, `if`, `while`, `for_each`, `parallel_for_each`, `parallel`, `switch`, `break`, `set`, `correlate`"
            ]
        );
    }
}
