//! Flow-control queues in the macros (QU-10, QU-14): a queue is a Rust item (`const PAYMENTS:
//! Queue = ..`) named by path, `task(charge).queue(PAYMENTS).priority(5).key(customer)` or
//! `queue = IMPORTS` on the definition. The definition the macro computes records a stand-in
//! name for each path; the generated code makes rustc check the path (a misspelt queue is
//! rustc's "cannot find value"), lists the queues for `Workflow::queues()` and replaces each
//! stand-in with the queue's name when the definition is first built.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

/// The stand-in name a queue path takes in the definition the macro computes: `__queue.` and
/// the path's segments joined by `.` (a valid queue name, QU-V1), replaced at run time.
pub(crate) fn placeholder(path: &syn::Path) -> String {
    let segments: Vec<String> = path
        .segments
        .iter()
        .map(|s| syn::ext::IdentExt::unraw(&s.ident).to_string())
        .collect();
    format!("__queue.{}", segments.join("."))
}

/// Checks that `path` can name a queue item: no generic arguments.
pub(crate) fn queue_path(path: syn::Path, what: &str) -> syn::Result<syn::Path> {
    if path
        .segments
        .iter()
        .any(|s| !matches!(s.arguments, syn::PathArguments::None))
    {
        return Err(syn::Error::new(
            path.span(),
            format!(
                "malformed `{what}`: expected the path of a `Queue` item, as in `{what}(PAYMENTS)`"
            ),
        ));
    }
    Ok(path)
}

/// The code for the queues a declaration names, each path once: `consts`, hidden associated
/// consts `__WORKFLOW_QUEUE_{i}: &Queue = &PATH` for the inherent impl (rustc resolves each
/// path there, once, on the user's tokens), `list` (the body of `Workflow::queues()`) and
/// `names` (each stand-in with the queue's name, for `__private::resolve_queues`).
pub(crate) struct QueueCode {
    pub(crate) consts: TokenStream,
    pub(crate) list: TokenStream,
    pub(crate) names: TokenStream,
    pub(crate) any: bool,
}

/// See [`QueueCode`].
pub(crate) fn queue_code(paths: &[&syn::Path]) -> QueueCode {
    let private = quote!(::workflow_runtime::__private);
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&syn::Path> = paths
        .iter()
        .copied()
        .filter(|p| seen.insert(placeholder(p)))
        .collect();
    let idents: Vec<syn::Ident> = (0..unique.len())
        .map(|i| quote::format_ident!("__WORKFLOW_QUEUE_{}", i))
        .collect();
    let consts = unique.iter().zip(&idents).map(|(path, ident)| {
        let span = path.span();
        let value = quote_spanned!(span=> &#path);
        quote! {
            #[doc(hidden)]
            pub const #ident: &'static #private::model::Queue = #value;
        }
    });
    let names = unique.iter().zip(&idents).map(|(path, ident)| {
        let stand_in = placeholder(path);
        quote!((#stand_in, #private::model::Queue::name(Self::#ident)))
    });
    QueueCode {
        consts: quote!(#(#consts)*),
        list: quote!(::std::vec![#(::core::clone::Clone::clone(Self::#idents)),*]),
        names: quote!(&[#(#names),*]),
        any: !unique.is_empty(),
    }
}
