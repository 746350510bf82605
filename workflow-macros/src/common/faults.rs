//! The fault-handling options shared by the macros (FLT-2, FLT-10,
//! FLT-17, ENG-32): `retry(..)`, `timeout(..)`, `compensate(..)` and `commit(..)` on a task.
//! Values go into the model as written; the shared validator checks them (FLT-V1..FLT-V5) and
//! its diagnostics land on the tokens recorded here.

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Ident, Token};
use workflow_model::{Decimal, Location, NodeCommit, RetryPolicy, Task, backticked, did_you_mean};

use super::SpanTable;
use super::parse::{FnRef, fn_path, parse_duration, tokens_between};

/// The keys of `retry(..)`.
pub(crate) const RETRY_OPTIONS: [&str; 5] = ["attempts", "backoff", "multiplier", "jitter", "on"];
/// The methods after `task(..)`.
pub(crate) const TASK_OPTIONS: [&str; 7] = [
    "retry",
    "timeout",
    "compensate",
    "commit",
    "queue",
    "priority",
    "key",
];
/// The values of `commit(..)` on a task (ENG-32).
pub(crate) const NODE_COMMITS: [&str; 5] =
    ["default", "before", "after", "before_and_after", "never"];

/// A value with the tokens the user wrote for it.
pub(crate) type Spanned<T> = (T, TokenStream);

/// `retry(attempts = 5, backoff = secs(1)..mins(1), multiplier = 2, jitter = 0.2, on = [a, b])`.
#[derive(Default)]
pub(crate) struct RetryDecl {
    pub(crate) tokens: TokenStream,
    pub(crate) attempts: Option<Spanned<u32>>,
    pub(crate) initial: Option<Spanned<u64>>,
    pub(crate) max: Option<Spanned<u64>>,
    pub(crate) multiplier: Option<Spanned<Decimal>>,
    pub(crate) jitter: Option<Spanned<Decimal>>,
    pub(crate) on: Option<Spanned<Vec<Ident>>>,
}

impl RetryDecl {
    /// The model's policy.
    pub(crate) fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.attempts.as_ref().map(|(v, _)| *v),
            initial_delay_ms: self.initial.as_ref().map(|(v, _)| *v),
            max_delay_ms: self.max.as_ref().map(|(v, _)| *v),
            multiplier: self.multiplier.as_ref().map(|(v, _)| *v),
            jitter: self.jitter.as_ref().map(|(v, _)| *v),
            retry_on: self
                .on
                .as_ref()
                .map(|(v, _)| v.iter().map(|i| i.unraw().to_string()).collect()),
        }
    }

    /// Records the tokens of the policy at `at` (the `retry` field).
    pub(crate) fn record(&self, at: &Location, spans: &mut SpanTable) {
        spans.insert(at.clone(), &self.tokens);
        let mut field = |name: &'static str, tokens: Option<&TokenStream>| {
            if let Some(tokens) = tokens {
                spans.insert(at.field(name), tokens);
            }
        };
        field("max_attempts", self.attempts.as_ref().map(|(_, t)| t));
        field("initial_delay_ms", self.initial.as_ref().map(|(_, t)| t));
        field("max_delay_ms", self.max.as_ref().map(|(_, t)| t));
        field("multiplier", self.multiplier.as_ref().map(|(_, t)| t));
        field("jitter", self.jitter.as_ref().map(|(_, t)| t));
        field("retry_on", self.on.as_ref().map(|(_, t)| t));
    }
}

/// The contents of `retry(..)`; `tokens` is the whole option as written.
pub(crate) fn parse_retry(input: ParseStream<'_>, tokens: TokenStream) -> syn::Result<RetryDecl> {
    let mut decl = RetryDecl {
        tokens,
        ..RetryDecl::default()
    };
    while !input.is_empty() {
        let key: Ident = input.call(Ident::parse_any)?;
        let name = key.to_string();
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("expected `=` after `{name}`, as in `retry(attempts = 5)`"),
            ));
        }
        input.parse::<Token![=]>()?;
        let start = input.fork();
        let duplicate = match name.as_str() {
            "attempts" => {
                let lit: syn::LitInt = input.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "expected the number of attempts, as in `attempts = 5`",
                    )
                })?;
                let value = lit.base10_parse::<u32>()?;
                decl.attempts
                    .replace((value, tokens_between(&start, input)))
                    .is_some()
            }
            "backoff" => {
                let (initial, _) = parse_duration(input)?;
                let initial_tokens = tokens_between(&start, input);
                let max = if input.peek(Token![..]) {
                    input.parse::<Token![..]>()?;
                    let max_start = input.fork();
                    let (max, _) = parse_duration(input)?;
                    Some((max, tokens_between(&max_start, input)))
                } else {
                    None
                };
                let duplicate = decl.initial.replace((initial, initial_tokens)).is_some();
                decl.max = max;
                duplicate
            }
            "multiplier" => {
                let value = parse_decimal(input)?;
                decl.multiplier
                    .replace((value, tokens_between(&start, input)))
                    .is_some()
            }
            "jitter" => {
                let value = parse_decimal(input)?;
                decl.jitter
                    .replace((value, tokens_between(&start, input)))
                    .is_some()
            }
            "on" => {
                if !input.peek(syn::token::Bracket) {
                    return Err(input.error(
                        "expected the retried error codes in brackets, as in `on = [timeout, unavailable]`",
                    ));
                }
                let content;
                syn::bracketed!(content in input);
                let mut codes = Vec::new();
                while !content.is_empty() {
                    codes.push(content.call(Ident::parse_any)?);
                    if !content.is_empty() {
                        content.parse::<Token![,]>()?;
                    }
                }
                decl.on
                    .replace((codes, tokens_between(&start, input)))
                    .is_some()
            }
            _ => {
                let (hint, _) = did_you_mean(&name, RETRY_OPTIONS);
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown retry option `{name}`; expected one of {}{hint}",
                        backticked(RETRY_OPTIONS)
                    ),
                ));
            }
        };
        if duplicate {
            return Err(syn::Error::new(
                key.span(),
                format!("duplicate retry option `{name}`"),
            ));
        }
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(decl)
}

/// `2`, `1.5`, `0.2`, `-1` as a [`Decimal`].
fn parse_decimal(input: ParseStream<'_>) -> syn::Result<Decimal> {
    let negative = if input.peek(Token![-]) {
        input.parse::<Token![-]>()?;
        true
    } else {
        false
    };
    let lookahead = input.lookahead1();
    let (digits, span) = if lookahead.peek(syn::LitFloat) {
        let lit: syn::LitFloat = input.parse()?;
        (lit.base10_digits().to_owned(), lit.span())
    } else if lookahead.peek(syn::LitInt) {
        let lit: syn::LitInt = input.parse()?;
        (lit.base10_digits().to_owned(), lit.span())
    } else {
        return Err(lookahead.error());
    };
    let value: f64 = digits
        .parse()
        .map_err(|_| syn::Error::new(span, "expected a number such as `2` or `0.2`"))?;
    Decimal::from_f64(if negative { -value } else { value })
        .ok_or_else(|| syn::Error::new(span, "the number is out of range"))
}

/// The options after `task(fn)`: `.retry(..)`, `.timeout(dur)`, `.compensate(fn)`,
/// `.commit(mode)`, each at most once.
#[derive(Default)]
pub(crate) struct TaskOptions {
    pub(crate) retry: Option<RetryDecl>,
    pub(crate) timeout: Option<Spanned<u64>>,
    pub(crate) compensate: Option<FnRef>,
    pub(crate) commit: Option<Spanned<NodeCommit>>,
    /// `.queue(PAYMENTS)`: the path of the queue item (QU-10).
    pub(crate) queue: Option<syn::Path>,
    /// `.priority(5)` (QU-4).
    pub(crate) priority: Option<Spanned<u8>>,
    /// `.key(customer.id)`: the partition key's field path (QU-10).
    pub(crate) key: Option<super::parse::FieldPath>,
}

impl TaskOptions {
    /// Parses `.option(..)` calls while the input starts with `.`.
    pub(crate) fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut options = TaskOptions::default();
        while input.peek(Token![.]) {
            input.parse::<Token![.]>()?;
            let start = input.fork();
            let method: Ident = input.call(Ident::parse_any)?;
            let name = method.to_string();
            if !TASK_OPTIONS.contains(&name.as_str()) {
                let hint = workflow_model::suggest(&name, TASK_OPTIONS)
                    .map(|found| format!("; did you mean `.{found}`?"))
                    .unwrap_or_default();
                return Err(syn::Error::new(
                    method.span(),
                    format!(
                        "unknown task option `.{name}`; expected one of `.retry(..)`, `.timeout(duration)`, `.compensate(fn)`, `.commit(mode)`, `.queue(QUEUE)`, `.priority(n)`, `.key(field)`{hint}"
                    ),
                ));
            }
            if !input.peek(syn::token::Paren) {
                return Err(input.error(format!("expected `(..)` after `.{name}`")));
            }
            let content;
            syn::parenthesized!(content in input);
            let duplicate = match name.as_str() {
                "retry" => {
                    let retry = parse_retry(&content, tokens_between(&start, input))?;
                    options.retry.replace(retry).is_some()
                }
                "timeout" => {
                    let at = content.fork();
                    let (millis, _) = parse_duration(&content)?;
                    let tokens = tokens_between(&at, &content);
                    options.timeout.replace((millis, tokens)).is_some()
                }
                "compensate" => {
                    let path: syn::Path = content.parse().map_err(|e| {
                        syn::Error::new(
                            e.span(),
                            "expected the path of the compensation fn, as in `.compensate(refund)`",
                        )
                    })?;
                    let path = fn_path(path, "compensate")?;
                    options.compensate.replace(FnRef { path }).is_some()
                }
                "queue" => {
                    let path: syn::Path = content.parse().map_err(|e| {
                        syn::Error::new(
                            e.span(),
                            "expected the path of a `Queue` item, as in `.queue(PAYMENTS)`",
                        )
                    })?;
                    let path = super::queues::queue_path(path, ".queue")?;
                    options.queue.replace(path).is_some()
                }
                "priority" => {
                    let lit: syn::LitInt = content.parse().map_err(|e| {
                        syn::Error::new(
                            e.span(),
                            "expected a priority from 0 to 9, as in `.priority(5)`",
                        )
                    })?;
                    let value = lit.base10_parse::<u8>().map_err(|_| {
                        syn::Error::new(lit.span(), "priority is out of range; use 0 to 9")
                    })?;
                    let tokens = quote::ToTokens::into_token_stream(&lit);
                    options.priority.replace((value, tokens)).is_some()
                }
                "key" => {
                    let key = super::parse::parse_field_path(
                        &content,
                        "key",
                        "`.key(customer)` or `.key(customer.id)`",
                    )?;
                    options.key.replace(key).is_some()
                }
                // "commit"
                _ => {
                    let mode: Ident = content.call(Ident::parse_any)?;
                    let commit = match mode.to_string().as_str() {
                        "default" => NodeCommit::Default,
                        "before" => NodeCommit::Before,
                        "after" => NodeCommit::After,
                        "before_and_after" => NodeCommit::BeforeAndAfter,
                        "never" => NodeCommit::Never,
                        other => {
                            let (hint, _) = did_you_mean(other, NODE_COMMITS);
                            return Err(syn::Error::new(
                                mode.span(),
                                format!(
                                    "unknown commit mode `{other}`; expected one of {}{hint}",
                                    backticked(NODE_COMMITS)
                                ),
                            ));
                        }
                    };
                    let tokens = quote::ToTokens::into_token_stream(&mode);
                    options.commit.replace((commit, tokens)).is_some()
                }
            };
            if !content.is_empty() {
                return Err(content.error(format!("unexpected token in `.{name}(..)`")));
            }
            if duplicate {
                return Err(syn::Error::new(
                    method.span(),
                    format!("duplicate task option `.{name}`"),
                ));
            }
        }
        Ok(options)
    }

    /// Sets the options on `task` located at `at`, recording their tokens.
    pub(crate) fn apply(&self, task: &mut Task, at: &Location, spans: &mut SpanTable) {
        if let Some(retry) = &self.retry {
            retry.record(&at.field("retry"), spans);
            task.retry = Some(retry.policy());
        }
        if let Some((millis, tokens)) = &self.timeout {
            spans.insert(at.field("attempt_timeout_ms"), tokens);
            task.attempt_timeout_ms = Some(*millis);
        }
        if let Some(function) = &self.compensate {
            spans.insert(at.field("compensation"), &function.path);
            task.compensation = Some(function.name());
        }
        if let Some((commit, tokens)) = &self.commit {
            spans.insert(at.field("commit"), tokens);
            task.commit = Some(*commit);
        }
        if let Some(path) = &self.queue {
            spans.insert(at.field("queue"), path);
            task.queue = Some(super::queues::placeholder(path));
        }
        if let Some((priority, tokens)) = &self.priority {
            spans.insert(at.field("priority"), tokens);
            task.priority = Some(*priority);
        }
        if let Some(key) = &self.key {
            spans.insert(at.field("queue_key"), &key.tokens);
            task.queue_key = Some(key.text.clone());
        }
    }
}
