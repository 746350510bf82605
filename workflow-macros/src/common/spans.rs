//! The span table: from each model [`Location`] to the tokens the user wrote for it, and the
//! shared validator's diagnostics turned into spanned compile errors.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use workflow_model::{Definition, Diagnostic, Location, Segment};

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
/// becomes an error on the user's tokens, all combined. A diagnostic whose rule was already
/// reported on the same tokens (an id derived from a name the user wrote) is reported once.
pub(crate) fn validate(
    definition: &Definition,
    spans: &SpanTable,
    skip: impl Fn(&Diagnostic) -> bool,
) -> Option<syn::Error> {
    validate_with(definition, spans, skip, |_| None)
}

/// [`validate`], with `hint` adding a macro-specific hint to a diagnostic's message (how to
/// fix it in this DSL).
pub(crate) fn validate_with(
    definition: &Definition,
    spans: &SpanTable,
    skip: impl Fn(&Diagnostic) -> bool,
    hint: impl Fn(&Diagnostic) -> Option<String>,
) -> Option<syn::Error> {
    let diagnostics = workflow_model::validate(definition).err()?;
    let mut all: Option<syn::Error> = None;
    let mut reported = HashSet::new();
    for diagnostic in &diagnostics {
        if skip(diagnostic) {
            continue;
        }
        if !reported.insert((diagnostic.rule, spans.resolve(&diagnostic.at))) {
            continue;
        }
        let message = match hint(diagnostic) {
            Some(hint) => format!("{}{hint}", diagnostic.message),
            None => diagnostic.message.clone(),
        };
        let error = spans.error(&diagnostic.at, &message);
        match &mut all {
            Some(all) => all.combine(error),
            None => all = Some(error),
        }
    }
    all
}
