//! The span table: from each model [`Location`] to the tokens the user wrote for it, and the
//! shared validator's diagnostics turned into spanned compile errors.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use workflow_model::{Definition, Diagnostic, Location, Related, Segment};

/// From a model location to the tokens the user wrote for it.
///
/// An element the user did not write but the macro derived from another (a trigger id taken
/// from the transition's name) is an *alias* of that one: a diagnostic on it lands on the same
/// tokens, and the same rule is reported there once.
#[derive(Default)]
pub(crate) struct SpanTable {
    tokens: HashMap<Location, TokenStream>,
    aliases: HashMap<Location, Location>,
}

impl SpanTable {
    pub(crate) fn insert(&mut self, at: Location, tokens: impl ToTokens) {
        let tokens = tokens.into_token_stream();
        if !tokens.is_empty() {
            self.tokens.insert(at, tokens);
        }
    }

    /// Records every entry under `from` again under `to` (a subtree the lowering moved, such
    /// as the root wrapped in a saga scope).
    pub(crate) fn remap_prefix(&mut self, from: &Location, to: &Location) {
        let moved: Vec<(Location, TokenStream)> = self
            .tokens
            .iter()
            .filter(|(at, _)| at.starts_with(from))
            .map(|(at, tokens)| {
                let rest = at
                    .segments()
                    .get(from.segments().len()..)
                    .unwrap_or_default();
                let mut new_at = to.clone();
                for segment in rest {
                    new_at = match segment {
                        Segment::Field(name) => new_at.field(name.clone()),
                        Segment::Index(index) => new_at.index(*index),
                    };
                }
                (new_at, tokens.clone())
            })
            .collect();
        self.tokens.extend(moved);
    }

    pub(crate) fn alias(&mut self, at: Location, of: Location) {
        self.aliases.insert(at, of);
    }

    /// The recorded location `at` resolves to: itself, what it is an alias of, or its
    /// closest recorded ancestor.
    pub(crate) fn resolve(&self, at: &Location) -> Option<Location> {
        if let Some(of) = self.aliases.get(at) {
            return self.resolve(of);
        }
        let segments = at.segments();
        (0..=segments.len())
            .rev()
            .map(|len| prefix(segments.get(..len).unwrap_or_default()))
            .find(|candidate| self.tokens.contains_key(candidate))
    }

    /// The tokens of `at` (see [`SpanTable::resolve`]).
    pub(crate) fn tokens_of(&self, at: &Location) -> Option<&TokenStream> {
        self.resolve(at).and_then(|at| self.tokens.get(&at))
    }

    /// The span of the first token of `at`.
    fn first_span(&self, at: &Location) -> Option<Span> {
        Some(self.tokens_of(at)?.clone().into_iter().next()?.span())
    }

    /// Where the tokens of `at` start: line and column, for ordering.
    pub(crate) fn start_of(&self, at: &Location) -> Option<(usize, usize)> {
        let start = self.first_span(at)?.start();
        (start.line > 0).then_some((start.line, start.column))
    }

    /// An error with `message` on the tokens of `at`.
    pub(crate) fn error(&self, at: &Location, message: &str) -> syn::Error {
        match self.tokens_of(at) {
            Some(tokens) => syn::Error::new_spanned(tokens, message),
            None => syn::Error::new(Span::call_site(), message),
        }
    }
}

fn prefix(segments: &[Segment]) -> Location {
    segments
        .iter()
        .fold(Location::root(), |at, segment| match segment {
            Segment::Field(name) => at.field(name.clone()),
            Segment::Index(index) => at.index(*index),
        })
}

/// Runs the shared validator on `definition`; every diagnostic that `skip` does not drop
/// becomes an error on the user's tokens, all combined, `hint` adding a macro-specific hint to
/// a diagnostic's message (how to fix it in this DSL).
///
/// One broken rule is one error. Its primary span is the offending element; every other
/// element involved (the diagnostic's related locations: the first occurrence of a duplicate,
/// the transition that shadows this one, the rest of a loop) is a note under the message
/// naming what it is and its line and column. A stable proc macro cannot attach secondary
/// labels to an error (`proc_macro::Diagnostic` is nightly-only), so the notes stand in for
/// them (`workflow-macros/docs/` shows the form).
///
/// A duplicate that the validator reports on both occurrences is reported once, at the later
/// one. A rule already reported on the same tokens (an id derived from a name the user wrote)
/// is reported once. "No start can be chosen" (FC-V7) is reported on the first node without
/// an inbound connection, the others as notes, rather than on the workflow's name.
pub(crate) fn validate_with(
    definition: &Definition,
    spans: &SpanTable,
    skip: impl Fn(&Diagnostic) -> bool,
    hint: impl Fn(&Diagnostic) -> Option<String>,
) -> Option<syn::Error> {
    let diagnostics = workflow_model::validate(definition).err()?;
    let kept: Vec<&Diagnostic> = diagnostics.iter().filter(|d| !skip(d)).collect();
    let mut all: Option<syn::Error> = None;
    let mut reported = HashSet::new();
    for &diagnostic in &kept {
        if reported_at_a_later_twin(diagnostic, &kept, spans) {
            continue;
        }
        let mut related: Vec<&Related> = diagnostic.related.iter().collect();
        let mut at = &diagnostic.at;
        let first_root = related
            .first()
            .filter(|r| diagnostic.rule == "FC-V7" && spans.tokens_of(&r.at).is_some());
        if let Some(first) = first_root {
            at = &first.at;
            related.remove(0);
        }
        if !reported.insert((diagnostic.rule, spans.resolve(at))) {
            continue;
        }
        let mut message = match hint(diagnostic) {
            Some(hint) => format!("{}{hint}", diagnostic.message),
            None => diagnostic.message.clone(),
        };
        let here = spans.resolve(at);
        for other in related {
            if spans.resolve(&other.at) == here {
                continue;
            }
            if let Some(span) = spans.first_span(&other.at) {
                message.push_str(&crate::common::errors::note(&other.label, span));
            }
        }
        let error = spans.error(at, &message);
        match &mut all {
            Some(all) => all.combine(error),
            None => all = Some(error),
        }
    }
    all
}

/// Whether `diagnostic` is one occurrence of a duplicate whose other occurrence, later in the
/// source, carries the same rule and message (and so reports both).
fn reported_at_a_later_twin(
    diagnostic: &Diagnostic,
    all: &[&Diagnostic],
    spans: &SpanTable,
) -> bool {
    let Some(here) = spans.start_of(&diagnostic.at) else {
        return false;
    };
    diagnostic.related.iter().any(|related| {
        all.iter().any(|other| {
            other.rule == diagnostic.rule
                && other.message == diagnostic.message
                && other.at == related.at
                && spans.start_of(&other.at).is_some_and(|there| there > here)
        })
    })
}
