//! Expansion helpers shared by the macros (hygienic: `::workflow_runtime::__private`, `::core`
//! and `::std` only).

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::parse::FnRef;

/// `.task("name", ...)`: registers the user's async fn, the call spanned on the user's path so
/// that a type error lands there.
pub(crate) fn register_task(task: &FnRef) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let name = task.name();
    let path = &task.path;
    let span = path.span();
    let call = quote_spanned!(span=> #path(ctx).await);
    quote! {
        .task(#name, |ctx| ::std::boxed::Box::pin(async move {
            #private::IntoTaskResult::into_task_result(#call)
        }))
    }
}

/// `pub const {PREFIX}_{VALUE}: &str = "value";` unless a constant of that name was already
/// emitted (the validator reports real duplicates) or the name is not an identifier.
pub(crate) fn push_const(
    out: &mut TokenStream,
    seen: &mut HashSet<String>,
    prefix: &str,
    value: &str,
    doc: &str,
) {
    let name = format!("{prefix}_{}", super::screaming_snake(value));
    if syn::parse_str::<syn::Ident>(&name).is_err() || !seen.insert(name.clone()) {
        return;
    }
    let ident = syn::Ident::new(&name, Span::call_site());
    let doc = format!("{doc} `{value}`.");
    out.extend(quote! {
        #[doc = #doc]
        pub const #ident: &'static str = #value;
    });
}

/// `mermaid()` and `dot()`, both computed at compile time from `definition`, with their docs.
pub(crate) fn diagram_fns(
    definition: &workflow_model::Definition,
    mermaid_doc: &str,
    dot_doc: &str,
) -> TokenStream {
    let mermaid = workflow_model::diagram::mermaid(definition);
    let dot = workflow_model::diagram::dot(definition);
    quote! {
        #[doc = #mermaid_doc]
        pub fn mermaid() -> &'static str {
            #mermaid
        }

        #[doc = #dot_doc]
        pub fn dot() -> &'static str {
            #dot
        }
    }
}

/// `const _: Option<T> = None;` for each type a duration was written with
/// (`Duration::from_secs(..)`), so rustc resolves the path the macro only read as text.
pub(crate) fn type_exists_checks<'a, I>(types: I) -> TokenStream
where
    I: IntoIterator<Item = &'a syn::Path>,
{
    let checks = types
        .into_iter()
        .map(|ty| quote!(const _: ::core::option::Option<#ty> = ::core::option::Option::None;));
    quote!(#(#checks)*)
}

/// Closures that are never called: `&data.customer.id` for each key path, and
/// `data.decision = payload` for each assign field, so that a misspelt field is rustc's own
/// "no field" error (with its suggestion) on the user's token, and a field of another type than
/// the payload a mismatch there (item 4 of the macro contract: paths are checked by rustc).
pub(crate) fn field_checks(
    keys: &[&super::parse::FieldPath],
    assign_fields: &[(&super::parse::FieldPath, &syn::Type)],
) -> TokenStream {
    let data = quote!(__data);
    let mut out = TokenStream::new();
    for key in keys {
        if let Some(access) = key.access(&data) {
            out.extend(quote! {
                let _ = |#data: &Self::Data| {
                    let _ = &#access;
                };
            });
        }
    }
    for (field, ty) in assign_fields {
        if let Some(access) = field.access(&data) {
            let span = field
                .idents
                .as_ref()
                .and_then(|i| i.last())
                .map_or_else(Span::call_site, syn::Ident::span);
            let assign = quote_spanned!(span=> #access = __payload);
            out.extend(quote! {
                let _ = |#data: &mut Self::Data, __payload: #ty| {
                    #assign;
                };
            });
        }
    }
    out
}
