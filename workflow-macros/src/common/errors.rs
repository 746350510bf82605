//! Collecting errors so that independent mistakes are all reported in one build.

use quote::ToTokens;

/// Collects errors so that independent mistakes are all reported in one build.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn at(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// One error for a duplicate, on the repeat `again`, with a note naming where `first` is
    /// (a stable proc macro cannot label a second span: see [`note`]).
    pub(crate) fn duplicate(
        &mut self,
        first: impl ToTokens,
        again: impl ToTokens,
        message: impl std::fmt::Display,
    ) {
        let mut message = message.to_string();
        if let Some(start) = first.into_token_stream().into_iter().next() {
            message.push_str(&note("first used here", start.span()));
        }
        self.at(again, message);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn into_error(self) -> Option<syn::Error> {
        self.0
    }
}

/// `\n= note: {label} (line L, column C)`: another site of an error, as a note under its
/// message, in place of the secondary label rustc would draw there; empty when the span has
/// no location (outside a proc macro).
pub(crate) fn note(label: &str, span: proc_macro2::Span) -> String {
    let start = span.start();
    if start.line == 0 {
        return String::new();
    }
    format!(
        "\n= note: {label} (line {}, column {})",
        start.line,
        start.column + 1
    )
}

/// The errors of `error` sorted by where they start in the source (line, then column), as
/// rustc orders its own; errors at the same place keep their order.
pub(crate) fn in_source_order(error: syn::Error) -> syn::Error {
    let mut all: Vec<syn::Error> = error.into_iter().collect();
    all.sort_by_key(|e| {
        let start = e.span().start();
        (start.line, start.column)
    });
    let mut all = all.into_iter();
    let Some(mut first) = all.next() else {
        // `into_iter` of an error yields at least that error.
        return syn::Error::new(proc_macro2::Span::call_site(), "internal error: no error");
    };
    for e in all {
        first.combine(e);
    }
    first
}
