//! Machinery shared by `#[state_machine]` and `workflow!`: error collection, the span table
//! and the validator's diagnostics as spanned errors, the event trigger, parsing helpers (fn
//! paths, keys, constant durations), constant names and the debug switch.

pub(crate) mod errors;
pub(crate) mod event;
pub(crate) mod expand;
pub(crate) mod faults;
pub(crate) mod parse;
pub(crate) mod queues;
pub(crate) mod spans;

pub(crate) use errors::Errors;
pub(crate) use spans::SpanTable;

use proc_macro2::TokenStream;

/// `WORKFLOW_MACROS_DEBUG=1` prints every expansion to stderr.
#[allow(clippy::print_stderr)] // printing is the point of this switch
pub(crate) fn debug_print(macro_name: &str, output: &TokenStream) {
    if std::env::var_os("WORKFLOW_MACROS_DEBUG").is_some_and(|v| v == "1") {
        eprintln!("{macro_name} expansion:\n{output}");
    }
}

/// `pay` -> `PAY`, `ShipOrder_2` -> `SHIP_ORDER_2`.
pub(crate) fn screaming_snake(value: &str) -> String {
    let mut out = String::new();
    let mut previous: Option<char> = None;
    for c in value.chars() {
        if !(c.is_ascii_alphanumeric() || c == '_') {
            out.push('_');
        } else {
            if c.is_ascii_uppercase()
                && previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
            {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        previous = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::screaming_snake;

    #[test]
    fn constant_names() {
        assert_eq!(screaming_snake("pay"), "PAY");
        assert_eq!(screaming_snake("ShipOrder_2"), "SHIP_ORDER_2");
        assert_eq!(screaming_snake("pay_again"), "PAY_AGAIN");
        assert_eq!(screaming_snake("a-b"), "A_B");
    }
}
