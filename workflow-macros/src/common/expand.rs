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
    // A return value that is not a task result takes the `ViaMismatch` method, whose bound
    // names the expected signature, spanned on the user's fn.
    let convert = quote_spanned!(span=> (&#private::TaskReturn::of(&__returned)).converter());
    quote! {
        .task(#name, |ctx| ::std::boxed::Box::pin(async move {
            #[allow(unused_imports)]
            use #private::{ViaMismatch as _, ViaTaskResult as _};
            let __returned = #call;
            let __convert = #convert;
            __convert(__returned)
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
/// `data.decision = From::from(payload)` for each assign field, so that a misspelt field is
/// rustc's own "no field" error (with its suggestion) on the user's token, and a field that
/// cannot take the payload type an error there.
pub(crate) fn field_checks(
    keys: &[&super::parse::FieldPath],
    assign_fields: &[(&super::parse::FieldPath, &syn::Type)],
) -> TokenStream {
    let data = quote!(__data);
    let mut out = TokenStream::new();
    for key in keys {
        if let Some(access) = key.access(&data) {
            // With the key's type written (`.key(order_id: String)`), the field must be of
            // that type: a mismatch is rustc's "expected `String`" on the path, "expected
            // due to this" on the type.
            let Some(ty) = &key.ty else {
                out.extend(quote! {
                    let _ = |#data: &Self::Data| {
                        let _ = &#access;
                    };
                });
                continue;
            };
            // Every token of the borrow on the path, of the type on the type, so that rustc's
            // spans land on the user's tokens and not on the macro call.
            let span = key
                .idents
                .as_ref()
                .and_then(|i| i.last())
                .map_or_else(Span::call_site, syn::Ident::span);
            let here = syn::Ident::new("__data", span);
            let Some(borrow) = key.access(&quote!(#here)) else {
                continue;
            };
            let borrow = quote_spanned!(span=> &#borrow);
            let ty = quote_spanned!(ty.span()=> &#ty);
            out.extend(quote! {
                let _ = |#data: &Self::Data| {
                    let _: #ty = #borrow;
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
            // `From`: a field `Option<Payment>` takes a `Payment`, as its JSON form does.
            let assign = quote_spanned!(span=> #access = ::core::convert::From::from(__payload));
            out.extend(quote! {
                let _ = |#data: &mut Self::Data, __payload: #ty| {
                    #assign;
                };
            });
        }
    }
    out
}

/// One event a macro declares, for its typed constructor.
pub(crate) struct EventSend<'a> {
    /// The event name (`"payment"`).
    pub(crate) name: &'a syn::LitStr,
    /// The payload type, if declared.
    pub(crate) payload: Option<&'a syn::Type>,
    /// Whether the event is correlated by a key.
    pub(crate) keyed: bool,
    /// The key's type, when written (`.key(order_id: String)`).
    pub(crate) key_type: Option<&'a syn::Type>,
}

/// The inherent fns a macro's type already has (or inherits from its trait): a constructor
/// named like one of them is suffixed with `_event`.
const RESERVED_FNS: [&str; 9] = [
    "name",
    "definition",
    "version",
    "registry",
    "mermaid",
    "dot",
    "state_name",
    "state_from_name",
    "new",
];

impl<'a> EventSend<'a> {
    /// The event as its typed constructor needs it.
    pub(crate) fn of(event: &'a super::event::EventDecl) -> Self {
        EventSend {
            name: &event.name,
            payload: event.payload.as_deref(),
            keyed: event.key.is_some(),
            key_type: event.key.as_ref().and_then(|k| k.ty.as_deref()),
        }
    }
}

/// The type as written, without spaces (`crate::Payment`).
fn type_text(ty: &syn::Type) -> String {
    quote::ToTokens::to_token_stream(ty)
        .to_string()
        .replace(' ', "")
}

/// One event name carries one payload type: for each event declared again with a payload type
/// written differently, a check that makes rustc compare the two types. The same type written
/// two ways (`Payment`, `crate::Payment`) passes; two types are one error on the later one,
/// naming the event and where the first is declared (a stimulus has one payload, and a wait
/// that takes another type would reject it).
pub(crate) fn payload_type_checks(events: &[EventSend<'_>]) -> TokenStream {
    let mut first: Vec<(String, &syn::Type)> = Vec::new();
    let mut out = TokenStream::new();
    for event in events {
        let Some(ty) = event.payload else {
            continue;
        };
        let name = event.name.value();
        let Some((_, earlier)) = first.iter().find(|(n, _)| *n == name) else {
            first.push((name, ty));
            continue;
        };
        if type_text(earlier) == type_text(ty) {
            continue;
        }
        let mut message = format!(
            "event `{name}` is declared with two payload types: `{}` here and `{}`",
            type_text(ty),
            type_text(earlier)
        );
        let start = earlier.span().start();
        if start.line > 0 {
            message.push_str(&format!(" at line {}", start.line));
        }
        let note = format!(
            "a stimulus `{name}` carries one payload, so every wait for `{name}` takes the same type: use one type, or give the events different names"
        );
        let call = quote_spanned!(ty.span()=> one_payload_type_per_event::<#ty, #earlier>());
        out.extend(quote! {
            const _: () = {
                #[diagnostic::on_unimplemented(
                    message = #message,
                    label = "another payload type for the same event",
                    note = #note
                )]
                trait SamePayloadAs<T: ?::core::marker::Sized> {}
                impl<T: ?::core::marker::Sized> SamePayloadAs<T> for T {}
                fn one_payload_type_per_event<A, B>()
                where
                    A: SamePayloadAs<B> + ?::core::marker::Sized,
                    B: ?::core::marker::Sized,
                {
                }
                #[allow(dead_code)]
                fn __check() {
                    #call
                }
            };
        });
    }
    out
}

/// The typed stimulus constructors: for each event name, `fn payment(key, payload: Payment)
/// -> Stimulus` (without `key` for an event without one, without `payload` for one without a
/// payload type), so that a sender's payload type is checked by rustc at the send site. The
/// fn is the event name in snake case (`expense.decision` -> `expense_decision`). An event
/// name used with and without a payload type, or with different keys, gets no constructor (it
/// is ambiguous); one used with two payload types takes the first, and
/// [`payload_type_checks`] makes rustc check that the others are the same type.
pub(crate) fn stimulus_constructors(events: &[EventSend<'_>]) -> TokenStream {
    let private = quote!(::workflow_runtime::__private);
    let mut out = TokenStream::new();
    let mut seen: Vec<(String, bool, bool, String)> = Vec::new();
    let mut ambiguous = HashSet::new();
    let text = |ty: Option<&syn::Type>| ty.map(type_text).unwrap_or_default();
    for event in events {
        let name = event.name.value();
        let has_payload = event.payload.is_some();
        let key_ty = text(event.key_type);
        match seen.iter().find(|(n, _, _, _)| *n == name) {
            Some((_, p, k, kt)) if *p != has_payload || *k != event.keyed || *kt != key_ty => {
                ambiguous.insert(name);
            }
            Some(_) => {}
            None => seen.push((name, has_payload, event.keyed, key_ty)),
        }
    }
    let mut emitted = HashSet::new();
    for event in events {
        let name = event.name.value();
        if ambiguous.contains(&name) || !emitted.insert(name.clone()) {
            continue;
        }
        let mut fn_name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        if fn_name.is_empty() || fn_name.starts_with(|c: char| c.is_ascii_digit()) {
            fn_name.insert_str(0, "event_");
        }
        if RESERVED_FNS.contains(&fn_name.as_str()) {
            fn_name.push_str("_event");
        }
        let Ok(ident) = syn::parse_str::<syn::Ident>(&fn_name) else {
            continue;
        };
        let ident = syn::Ident::new(&ident.to_string(), event.name.span());
        // A typed key (`.key(order_id: String)`) is checked by rustc at the send site:
        // `IsKey<String>` takes a `String`, a `&String` or a `&str`.
        let key_param = event.keyed.then(|| match event.key_type {
            Some(ty) => quote!(key: impl #private::serde::Serialize + #private::IsKey<#ty>,),
            None => quote!(key: impl #private::serde::Serialize,),
        });
        let key_call = event.keyed.then(|| quote!(.key(key)));
        // Generic over the payload with the bound `P: IsPayload<Payment>`: a payload of another
        // type is an error at the send site naming both types, and a payload type that is not
        // `Serialize` is only an error where it is sent.
        let (generics, payload_param, payload_call) = match event.payload {
            Some(ty) => (
                Some(quote!(<__P: #private::serde::Serialize + #private::IsPayload<#ty>>)),
                Some(quote!(payload: __P)),
                Some(quote!(.payload(&payload))),
            ),
            None => (None, None, None),
        };
        let doc = format!(
            "A stimulus for the event `{name}`{}{}: send it with `Runtime::send`.",
            match (event.keyed, event.key_type) {
                (false, _) => String::new(),
                (true, None) => " with its key".to_owned(),
                (true, Some(ty)) => format!(
                    " with its `{}` key",
                    quote::ToTokens::to_token_stream(ty)
                        .to_string()
                        .replace(' ', "")
                ),
            },
            match event.payload {
                Some(ty) => format!(
                    " and a `{}` payload, the type checked by rustc at the send site",
                    quote::ToTokens::to_token_stream(ty)
                        .to_string()
                        .replace(' ', "")
                ),
                None => String::new(),
            }
        );
        out.extend(quote! {
            #[doc = #doc]
            #[must_use]
            pub fn #ident #generics(#key_param #payload_param) -> #private::Stimulus {
                #private::Stimulus::new(#name) #key_call #payload_call
            }
        });
    }
    out
}
