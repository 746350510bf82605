//! Small conversions the backends share: integer columns, JSON columns and `NotFound`.
// Built without either SQL backend (`default-features = false`), only `not_found` is used.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

use serde_json::Value;

use super::error::{StoreError, StoreResult};

/// A `u64` as a signed integer column (saturating).
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A signed integer column as a `u64` (negative is 0).
pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A page size as a `LIMIT` parameter.
pub(crate) fn limit_i64(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// `NotFound` for the `what` named `id`.
pub(crate) fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_owned(),
    }
}

/// A JSON value as the text of a column.
pub(crate) fn json_text(value: &Value) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid {
        what: "json",
        reason: e.to_string(),
    })
}

/// A JSON column's text decoded; a failure is a `Decode` naming the row and column (ST-22).
pub(crate) fn decode_json(
    what: &'static str,
    id: &str,
    path: &str,
    text: &str,
) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Decode {
        what,
        id: id.to_owned(),
        path: path.to_owned(),
        message: e.to_string(),
    })
}
