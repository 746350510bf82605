//! Parsing helpers shared by the macros: user fn paths, event keys, constant durations.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitInt, LitStr, Path, Token};

/// The duration units of `after(...)`, with their length in milliseconds.
pub(crate) const UNITS: [(&str, u64); 10] = [
    ("millis", 1),
    ("secs", 1_000),
    ("mins", 60_000),
    ("hours", 3_600_000),
    ("days", 86_400_000),
    ("from_millis", 1),
    ("from_secs", 1_000),
    ("from_mins", 60_000),
    ("from_hours", 3_600_000),
    ("from_days", 86_400_000),
];

/// A user fn named by its path (`send_confirmation`, `orders::send`).
#[derive(Clone)]
pub(crate) struct FnRef {
    pub(crate) path: Path,
}

impl FnRef {
    /// The registry name: the path as written, without spaces.
    pub(crate) fn name(&self) -> String {
        path_name(&self.path)
    }
}

/// The path as written, without spaces (`orders::send`).
pub(crate) fn path_name(path: &Path) -> String {
    let mut out = String::new();
    if path.leading_colon.is_some() {
        out.push_str("::");
    }
    for (i, segment) in path.segments.iter().enumerate() {
        if i > 0 {
            out.push_str("::");
        }
        out.push_str(&segment.ident.to_string());
    }
    out
}

/// A fn path: no generic arguments (the registry name is the path as written).
pub(crate) fn fn_path(path: Path, what: &str) -> syn::Result<Path> {
    for segment in &path.segments {
        if !segment.arguments.is_none() {
            return Err(syn::Error::new_spanned(
                &segment.arguments,
                format!("`{what}` takes the path of a fn without generic arguments"),
            ));
        }
    }
    Ok(path)
}

/// The tokens consumed from `start` up to where `end` stands.
pub(crate) fn tokens_between(start: ParseStream<'_>, end: ParseStream<'_>) -> TokenStream {
    let mut out = TokenStream::new();
    let mut cursor = start.cursor();
    let stop = end.cursor();
    while cursor != stop {
        let Some((tt, next)) = cursor.token_tree() else {
            break;
        };
        out.extend(std::iter::once(tt));
        cursor = next;
    }
    out
}

/// `order_id`, `customer.id` or `"customer.id"`.
pub(crate) fn parse_key(input: ParseStream<'_>) -> syn::Result<(String, TokenStream)> {
    let tokens: TokenStream = input.fork().parse()?;
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return Ok((lit.value(), tokens));
    }
    let mut parts = Vec::new();
    loop {
        let part: Ident = input.call(Ident::parse_any).map_err(|e| {
            syn::Error::new(
                e.span(),
                "malformed `.key`: expected a field path into the data, as in `.key(order_id)` or `.key(customer.id)`",
            )
        })?;
        parts.push(part.to_string());
        if input.peek(Token![.]) {
            input.parse::<Token![.]>()?;
        } else {
            break;
        }
    }
    if !input.is_empty() {
        return Err(input.error("unexpected token in the key path"));
    }
    Ok((parts.join("."), tokens))
}

/// `secs(30)`, `millis(1500)`, `mins(5)`, `hours(48)`, `days(2)`, or
/// `Duration::from_secs(48 * 3600)` (any path ending in `from_millis`, `from_secs`,
/// `from_mins`, `from_hours`, `from_days`); the argument is integer arithmetic with `+`, `-`,
/// `*`, `/` and parentheses, evaluated by the macro because it goes into the definition.
pub(crate) fn parse_duration(input: ParseStream<'_>) -> syn::Result<(u64, Option<Path>)> {
    let start_span = input.span();
    let unit_path: Path = input.parse().map_err(|_| duration_error(start_span))?;
    let unit = unit_path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    let Some((_, factor)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(duration_error(unit_path.span()));
    };
    let content;
    syn::parenthesized!(content in input);
    let amount = parse_sum(&content)?;
    if !content.is_empty() {
        return Err(content.error("expected an integer expression such as `48 * 3600`"));
    }
    let millis = amount.checked_mul(*factor).ok_or_else(|| {
        syn::Error::new(
            unit_path.span(),
            "the duration overflows `u64` milliseconds",
        )
    })?;
    let mut duration_type = None;
    if unit.starts_with("from_") && unit_path.segments.len() > 1 {
        let count = unit_path.segments.len() - 1;
        duration_type = Some(Path {
            leading_colon: unit_path.leading_colon,
            segments: unit_path.segments.into_iter().take(count).collect(),
        });
    }
    Ok((millis, duration_type))
}

fn duration_error(span: Span) -> syn::Error {
    syn::Error::new(
        span,
        "malformed `after`: expected a constant duration such as `secs(30)`, `mins(5)`, `hours(48)` or `Duration::from_secs(48 * 3600)`",
    )
}

fn parse_sum(input: ParseStream<'_>) -> syn::Result<u64> {
    let span = input.span();
    let mut total = parse_product(input)?;
    loop {
        let next = if input.peek(Token![+]) {
            input.parse::<Token![+]>()?;
            total.checked_add(parse_product(input)?)
        } else if input.peek(Token![-]) {
            input.parse::<Token![-]>()?;
            total.checked_sub(parse_product(input)?)
        } else {
            return Ok(total);
        };
        total = next.ok_or_else(|| {
            syn::Error::new(span, "the duration is out of range (negative or too large)")
        })?;
    }
}

fn parse_product(input: ParseStream<'_>) -> syn::Result<u64> {
    let span = input.span();
    let mut total = parse_atom(input)?;
    loop {
        let next = if input.peek(Token![*]) {
            input.parse::<Token![*]>()?;
            total.checked_mul(parse_atom(input)?)
        } else if input.peek(Token![/]) {
            input.parse::<Token![/]>()?;
            total.checked_div(parse_atom(input)?)
        } else {
            return Ok(total);
        };
        total = next.ok_or_else(|| {
            syn::Error::new(
                span,
                "the duration is out of range (division by zero or too large)",
            )
        })?;
    }
}

fn parse_atom(input: ParseStream<'_>) -> syn::Result<u64> {
    if input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in input);
        let value = parse_sum(&content)?;
        if !content.is_empty() {
            return Err(content.error("unexpected token in the duration"));
        }
        return Ok(value);
    }
    let lit: LitInt = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected an integer literal: the duration must be known when the macro runs",
        )
    })?;
    lit.base10_parse::<u64>()
}

/// The last segment of every path the user derives (`Debug`, `Clone`, ...).
pub(crate) fn existing_derives(attrs: &[Attribute]) -> Vec<String> {
    let mut out = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let _ = attr.parse_nested_meta(|meta| {
            if let Some(last) = meta.path.segments.last() {
                out.push(last.ident.to_string());
            }
            Ok(())
        });
    }
    out
}
