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

/// A field path into the workflow data (`order_id`, `customer.id`), as written.
#[derive(Clone)]
pub(crate) struct FieldPath {
    /// The dotted path (`customer.id`), as the definition records it.
    pub(crate) text: String,
    /// The tokens written, for diagnostics.
    pub(crate) tokens: TokenStream,
    /// Each segment, spanned on the user's tokens, so that rustc checks the path against the
    /// data type; `None` for a string path with a segment that is not an identifier (an
    /// array index), which rustc cannot check.
    pub(crate) idents: Option<Vec<Ident>>,
    /// The key's type when written (`.key(order_id: String)`): the event's typed constructor
    /// then takes a key of that type, and rustc checks that it is the field's type.
    pub(crate) ty: Option<Box<syn::Type>>,
}

impl FieldPath {
    /// `let _ = &data.a.b;` on `data`: the field access that makes rustc check the path
    /// against the data type, with its "no field" error (and suggestion) on the user's token.
    pub(crate) fn access(&self, data: &TokenStream) -> Option<TokenStream> {
        let idents = self.idents.as_ref()?;
        Some(quote::quote!(#data #(.#idents)*))
    }
}

/// `order_id`, `customer.id` or `"customer.id"`: the key path of an event (RT-3), optionally
/// with the key's type, `order_id: String`.
pub(crate) fn parse_key(input: ParseStream<'_>) -> syn::Result<FieldPath> {
    let example = "`.key(order_id)`, `.key(customer.id)` or `.key(order_id: String)`";
    let mut path = field_path(input, "key", example)?;
    if input.peek(Token![:]) {
        input.parse::<Token![:]>()?;
        let ty: syn::Type = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("malformed `.key`: expected the key's type after `:`, as in {example}"),
            )
        })?;
        path.ty = Some(Box::new(ty));
    }
    if !input.is_empty() {
        return Err(input.error("unexpected token in the `key` path"));
    }
    Ok(path)
}

/// A field path into the data: idents joined by `.`, or a string literal.
pub(crate) fn parse_field_path(
    input: ParseStream<'_>,
    what: &str,
    example: &str,
) -> syn::Result<FieldPath> {
    let path = field_path(input, what, example)?;
    if !input.is_empty() {
        return Err(input.error(format!("unexpected token in the `{what}` path")));
    }
    Ok(path)
}

/// The field path at the start of `input`, leaving what follows it.
fn field_path(input: ParseStream<'_>, what: &str, example: &str) -> syn::Result<FieldPath> {
    let tokens: TokenStream = input.fork().parse()?;
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        let text = lit.value();
        let idents = text
            .split('.')
            .map(|segment| {
                syn::parse_str::<Ident>(segment)
                    .ok()
                    .map(|i| Ident::new(&i.to_string(), lit.span()))
            })
            .collect::<Option<Vec<Ident>>>();
        return Ok(FieldPath {
            text,
            tokens,
            idents,
            ty: None,
        });
    }
    let mut parts = Vec::new();
    loop {
        let part: Ident = input.call(Ident::parse_any).map_err(|e| {
            syn::Error::new(
                e.span(),
                format!(
                    "malformed `.{what}`: expected a field path into the data, as in {example}"
                ),
            )
        })?;
        // `parse_any` also takes keywords (`true`, `self`, `type`), which are no field names:
        // `data.true` would not even parse. A raw `r#type` is a field name and passes.
        if syn::parse_str::<Ident>(&part.to_string()).is_err() {
            return Err(syn::Error::new(
                part.span(),
                format!(
                    "malformed `.{what}`: `{part}` is a keyword, not a field of the data; \
                     expected a field path, as in {example}"
                ),
            ));
        }
        parts.push(part);
        if input.peek(Token![.]) {
            input.parse::<Token![.]>()?;
        } else {
            break;
        }
    }
    Ok(FieldPath {
        text: parts
            .iter()
            .map(|p| p.unraw().to_string())
            .collect::<Vec<_>>()
            .join("."),
        tokens,
        idents: Some(parts),
        ty: None,
    })
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

/// `.assign(field.path)` or `.assign_with(fn)` on an event (ACT-19).
pub(crate) enum AssignDecl {
    /// The payload is written to this field of the data.
    Field(FieldPath),
    /// The fn `(&mut Data, Payload)` folds it in.
    Function(FnRef),
}

impl AssignDecl {
    /// The model's form.
    pub(crate) fn model(&self) -> workflow_model::PayloadAssign {
        match self {
            AssignDecl::Field(path) => workflow_model::PayloadAssign::Field(path.text.clone()),
            AssignDecl::Function(f) => workflow_model::PayloadAssign::Function(f.name()),
        }
    }

    /// The tokens written.
    pub(crate) fn tokens(&self) -> TokenStream {
        match self {
            AssignDecl::Field(path) => path.tokens.clone(),
            AssignDecl::Function(f) => quote::ToTokens::to_token_stream(&f.path),
        }
    }
}

/// The inside of `.assign(..)` (`method` = `assign`) or `.assign_with(..)`.
pub(crate) fn parse_assign(method: &str, content: ParseStream<'_>) -> syn::Result<AssignDecl> {
    if method == "assign" {
        return Ok(AssignDecl::Field(parse_field_path(
            content,
            "assign",
            "`.assign(payment)` or `.assign(order.payment)`",
        )?));
    }
    let path: Path = content.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "malformed `.assign_with`: expected the path of a fn `(&mut Data, Payload)`, as in `.assign_with(record_payment)`",
        )
    })?;
    let path = fn_path(path, "assign_with")?;
    if !content.is_empty() {
        return Err(content.error("unexpected token after the fn path"));
    }
    Ok(AssignDecl::Function(FnRef { path }))
}

/// The definition-level commit strategies of `commit = ..` (ENG-32).
pub(crate) const COMMIT_STRATEGIES: [&str; 4] = [
    "run_end",
    "before_each_activity",
    "after_each_activity",
    "periodic",
];

/// The value of `commit = ..` in `#[workflow(..)]` and `#[state_machine(..)]` (ENG-32):
/// `run_end`, `before_each_activity`, `after_each_activity` or `periodic(duration)`, with the
/// tokens written.
pub(crate) fn parse_commit_strategy(
    value: ParseStream<'_>,
) -> syn::Result<(workflow_model::CommitStrategy, TokenStream)> {
    use workflow_model::CommitStrategy;
    let start = value.fork();
    let mode: Ident = value.call(Ident::parse_any)?;
    let strategy = match mode.to_string().as_str() {
        "run_end" => CommitStrategy::RunEnd,
        "before_each_activity" => CommitStrategy::BeforeEachActivity,
        "after_each_activity" => CommitStrategy::AfterEachActivity,
        "periodic" => {
            let content;
            syn::parenthesized!(content in value);
            let (interval_ms, _) = parse_duration(&content)?;
            CommitStrategy::Periodic { interval_ms }
        }
        other => {
            let (hint, _) = workflow_model::did_you_mean(other, COMMIT_STRATEGIES);
            return Err(syn::Error::new(
                mode.span(),
                format!(
                    "unknown commit strategy `{other}`; expected one of {}{hint}",
                    workflow_model::backticked(COMMIT_STRATEGIES)
                ),
            ));
        }
    };
    Ok((strategy, tokens_between(&start, value)))
}

/// The look-back policies of `.look_back(..)` (RT-30).
pub(crate) const LOOK_BACKS: [&str; 5] = ["none", "since_origin", "since_entered", "window", "any"];

/// The inside of `.look_back(..)`: `none`, `since_origin`, `since_entered`, `window(duration)`
/// or `any` (RT-30).
pub(crate) fn parse_look_back(
    content: ParseStream<'_>,
) -> syn::Result<(workflow_model::LookBack, TokenStream)> {
    use workflow_model::LookBack;
    let start = content.fork();
    let policy: Ident = content.call(Ident::parse_any)?;
    let value = match policy.to_string().as_str() {
        "none" => LookBack::None,
        "since_origin" => LookBack::SinceOrigin,
        "since_entered" => LookBack::SinceEntered,
        "any" => LookBack::Any,
        "window" => {
            let inner;
            syn::parenthesized!(inner in content);
            let (ms, _) = parse_duration(&inner)?;
            if !inner.is_empty() {
                return Err(inner.error("unexpected token after the duration"));
            }
            LookBack::Window { ms }
        }
        other => {
            let (hint, _) = workflow_model::did_you_mean(other, LOOK_BACKS);
            return Err(syn::Error::new(
                policy.span(),
                format!(
                    "unknown look-back `{other}`; expected one of `none`, `since_origin`, `since_entered`, `window(duration)`, `any`{hint}"
                ),
            ));
        }
    };
    if !content.is_empty() {
        return Err(content.error("unexpected token after the look-back"));
    }
    Ok((value, tokens_between(&start, content)))
}

#[cfg(test)]
mod tests {
    use super::parse_key;
    use syn::parse::Parser;

    #[test]
    fn a_key_path_with_and_without_its_type() {
        let key = parse_key.parse_str("customer.id").unwrap();
        assert_eq!(key.text, "customer.id");
        assert!(key.ty.is_none());

        let key = parse_key.parse_str("order_id: String").unwrap();
        assert_eq!(key.text, "order_id");
        let ty = key.ty.unwrap();
        assert_eq!(quote::quote!(#ty).to_string(), "String");

        let key = parse_key.parse_str("\"customer.id\": u64").unwrap();
        assert_eq!(key.text, "customer.id");
        assert!(key.ty.is_some());

        let missing = parse_key.parse_str("order_id:").err().unwrap().to_string();
        assert!(
            missing.contains("expected the key's type after `:`"),
            "{missing}"
        );
        let extra = parse_key
            .parse_str("order_id: String, x")
            .err()
            .unwrap()
            .to_string();
        assert!(
            extra.contains("unexpected token in the `key` path"),
            "{extra}"
        );
    }
}
