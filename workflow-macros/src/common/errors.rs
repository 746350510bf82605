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

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn into_error(self) -> Option<syn::Error> {
        self.0
    }
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
