//! The identity of a stimulus: names, keys and their hash (RT-1 to RT-8), at the bottom of the
//! crate because the engine hashes the bookmarks it creates and routing the stimuli it sends;
//! the encoding is described in the module docs of [`crate::routing`], which re-exports it.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A SHA-256 over length-prefixed parts, as hex: the derived ids of idempotent sends, trigger
/// starts and time-trigger schedules.
pub(crate) fn sha_hex(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        for nibble in [byte >> 4, byte & 0x0f] {
            hex.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
        }
    }
    hex
}

/// Why a stimulus name or key cannot be routed (RT-2, RT-3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    /// The name is empty, longer than 256 bytes, or holds a control character (RT-2).
    #[error("invalid stimulus name `{name}`: {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The name starts with the reserved prefix `wf.` (RT-2).
    #[error("stimulus name `{name}` is reserved: names beginning with `wf.` are built in")]
    ReservedName {
        /// The offending name.
        name: String,
    },
    /// The correlation id is empty, longer than 256 bytes, or holds a control character
    /// (RT-33).
    #[error("invalid correlation id `{id}`")]
    InvalidCorrelationId {
        /// The offending id.
        id: String,
    },
    /// The key holds a value that cannot be hashed stably (RT-3).
    #[error("key cannot be routed at `{path}`: {reason}")]
    UnhashableKey {
        /// Where in the key, e.g. `$.lines[2].price`.
        path: String,
        /// Why.
        reason: String,
    },
    /// The send names both an instance and a bookmark of another instance (RT-14): the
    /// narrowings exclude each other, nothing was written.
    #[error(
        "the send targets instance `{instance}` and bookmark `{bookmark}` of instance `{owner}`"
    )]
    ConflictingTargets {
        /// The instance the send names.
        instance: String,
        /// The bookmark the send names.
        bookmark: String,
        /// The instance that bookmark belongs to.
        owner: String,
    },
}

/// Checks a user-sent stimulus name (RT-2).
///
/// # Errors
///
/// [`RoutingError::InvalidName`] for an empty or over-long name, or one with control
/// characters; [`RoutingError::ReservedName`] for a name starting with `wf.`.
pub fn check_name(name: &str) -> Result<(), RoutingError> {
    let invalid = |reason| RoutingError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > 256 {
        return Err(invalid("it is longer than 256 bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("it contains a control character"));
    }
    if name.starts_with("wf.") {
        return Err(RoutingError::ReservedName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Checks a correlation id: 1 to 256 bytes of UTF-8 without control characters (RT-33).
///
/// # Errors
///
/// [`RoutingError::InvalidCorrelationId`] for an empty or over-long id, or one with control
/// characters.
pub fn check_correlation_id(id: &str) -> Result<(), RoutingError> {
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(RoutingError::InvalidCorrelationId { id: id.to_owned() });
    }
    Ok(())
}

/// The stimulus hash of `name` and `key` (unit when `None`), optionally scoped to one activity
/// instance `(instance_id, context_id)` (RT-4, RT-5, RT-7): 64 lowercase hex digits.
///
/// ```
/// use workflow_runtime::routing::stimulus_hash;
/// let hash = stimulus_hash("payment", Some(&serde_json::json!("o-42")), None).unwrap();
/// assert_eq!(hash, "89deb7f6126d9e31f806e0874f2bd4da1ad929d9f6192eaa895697f36adb7c6f");
/// ```
///
/// # Errors
///
/// [`RoutingError::UnhashableKey`] when the key holds a value that cannot be routed on (a
/// float, say), with the path of the offending part.
pub fn stimulus_hash(
    name: &str,
    key: Option<&Value>,
    scope: Option<(&str, &str)>,
) -> Result<String, RoutingError> {
    let mut message = Vec::with_capacity(64);
    message.extend_from_slice(b"wf-stimulus/1\0");
    encode_str(&mut message, name);
    match key {
        None => message.push(0),
        Some(key) => encode_value(&mut message, key, &mut String::from("$"))?,
    }
    match scope {
        None => message.push(0),
        Some((instance, context)) => {
            message.push(1);
            encode_str(&mut message, instance);
            encode_str(&mut message, context);
        }
    }
    let digest = Sha256::digest(&message);
    let mut hex = String::with_capacity(64);
    for byte in &digest {
        hex.push(char::from(
            HEX.get(usize::from(byte >> 4)).copied().unwrap_or(b'0'),
        ));
        hex.push(char::from(
            HEX.get(usize::from(byte & 0xF)).copied().unwrap_or(b'0'),
        ));
    }
    Ok(hex)
}

/// The digest of a routing key, as the key index holds it (RT-36): 64 lowercase hex digits,
/// equal for equal keys however their objects' members are ordered.
///
/// ```
/// use workflow_runtime::routing::key_digest;
/// let digest = key_digest(&serde_json::json!("T-2")).unwrap();
/// assert_eq!(digest.len(), 64);
/// assert_ne!(digest, key_digest(&serde_json::json!("T-3")).unwrap());
/// ```
///
/// # Errors
///
/// [`RoutingError::UnhashableKey`] when the key holds a value that cannot be routed on (a
/// float, say), with the path of the offending part.
pub fn key_digest(key: &Value) -> Result<String, RoutingError> {
    stimulus_hash("wf.key", Some(key), None)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn encode_len(out: &mut Vec<u8>, len: usize) {
    // Lengths above u32::MAX cannot occur for names (256 bytes) and are clamped for keys.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

fn encode_str(out: &mut Vec<u8>, s: &str) {
    out.push(3);
    encode_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn encode_value(out: &mut Vec<u8>, value: &Value, path: &mut String) -> Result<(), RoutingError> {
    match value {
        Value::Null => out.push(0),
        Value::Bool(b) => {
            out.push(1);
            out.push(u8::from(*b));
        }
        Value::Number(n) => {
            let int = if let Some(i) = n.as_i64() {
                i128::from(i)
            } else if let Some(u) = n.as_u64() {
                i128::from(u)
            } else {
                return Err(RoutingError::UnhashableKey {
                    path: path.clone(),
                    reason: format!("floating-point number `{n}` cannot be a key"),
                });
            };
            out.push(2);
            out.extend_from_slice(&int.to_be_bytes());
        }
        Value::String(s) => encode_str(out, s),
        Value::Array(items) => {
            out.push(5);
            encode_len(out, items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                encode_value(out, item, path)?;
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            out.push(6);
            encode_len(out, map.len());
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            for (k, v) in entries {
                encode_str(out, k);
                let len = path.len();
                path.push('.');
                path.push_str(k);
                encode_value(out, v, path)?;
                path.truncate(len);
            }
        }
    }
    Ok(())
}

/// The value at a dotted key path (`"order_id"`, `"customer.id"`) in the data, if present.
pub(crate) fn value_at_path<'a>(data: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(data, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
}

/// Replaces the value at the dotted field path `path` of `data` (objects by key, arrays by
/// index) with `value`; `false` when a segment on the way, or the last one, does not exist.
pub(crate) fn set_at_path(data: &mut Value, path: &str, value: Value) -> bool {
    let mut current = data;
    for segment in path.split('.') {
        let next = match current {
            Value::Object(map) => map.get_mut(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        match next {
            Some(next) => current = next,
            None => return false,
        }
    }
    *current = value;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // RT-5: the conformance vectors.
    #[test]
    fn rt5_hash_vectors_are_reproduced() {
        type Case<'a> = (&'a str, Option<Value>, Option<(&'a str, &'a str)>, &'a str);
        let cases: [Case<'_>; 8] = [
            (
                "payment",
                Some(json!("o-42")),
                None,
                "89deb7f6126d9e31f806e0874f2bd4da1ad929d9f6192eaa895697f36adb7c6f",
            ),
            (
                "payment",
                None,
                None,
                "a87c610ebcfbce4748567de59a3212352a1feed5bd35a9b9aabbe237afaa78bf",
            ),
            (
                "payment",
                Some(json!(-1)),
                None,
                "b6258c601e831ed9aa1438b535dc738fb7670e84cbe053eb8afeb9dcf5b729b3",
            ),
            (
                "expense.decision",
                Some(json!(7)),
                None,
                "98e67589afa9fed54cdbd99ff4aa59c7ea8f034234c3ca4abd3da5a0fa8c77ba",
            ),
            (
                "order",
                Some(json!({"region": "eu", "id": 42})),
                None,
                "d440ff5e84561a927e623e27599e32a24b1187a7f81c881069e3f56e09afd4f2",
            ),
            (
                "pair",
                Some(json!(["a", 1])),
                None,
                "d3be344e5533a94a749bfbe7225054ae31468e1614f59b804e406ef91b17f4e4",
            ),
            (
                "go",
                Some(json!(true)),
                None,
                "1395945c7c6718306bc9dfd868e8c048b629ee778d043031f2049abe7c0d3cb0",
            ),
            (
                "approve",
                None,
                Some(("01J9ZQ3K8W0000000000000000", "7")),
                "a5232e9675aee3b0c0e6964d3b36fc13c573011f24680b188a0004f8ca160077",
            ),
        ];
        for (name, key, scope, expected) in cases {
            assert_eq!(
                stimulus_hash(name, key.as_ref(), scope).unwrap(),
                expected,
                "{name} {key:?}"
            );
        }
    }

    #[test]
    fn rt3_null_key_equals_absent_and_floats_are_rejected_with_a_path() {
        assert_eq!(
            stimulus_hash("payment", Some(&Value::Null), None).unwrap(),
            stimulus_hash("payment", None, None).unwrap()
        );
        let err = stimulus_hash("x", Some(&json!({"lines": [1, 2.5]})), None).unwrap_err();
        assert_eq!(
            err,
            RoutingError::UnhashableKey {
                path: "$.lines[1]".into(),
                reason: "floating-point number `2.5` cannot be a key".into()
            }
        );
    }

    #[test]
    fn rt2_names_are_checked() {
        assert!(check_name("payment").is_ok());
        assert!(matches!(
            check_name("wf.delay"),
            Err(RoutingError::ReservedName { .. })
        ));
        assert!(matches!(
            check_name(""),
            Err(RoutingError::InvalidName { .. })
        ));
        assert!(matches!(
            check_name("a\nb"),
            Err(RoutingError::InvalidName { .. })
        ));
    }

    #[test]
    fn key_paths_walk_objects_and_arrays() {
        let data = json!({"customer": {"id": 7}, "lines": [{"sku": "a"}]});
        assert_eq!(value_at_path(&data, "customer.id"), Some(&json!(7)));
        assert_eq!(value_at_path(&data, "lines.0.sku"), Some(&json!("a")));
        assert_eq!(value_at_path(&data, "missing"), None);
    }
}
