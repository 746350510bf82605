//! The version fingerprint of a definition (ENG-44).
//!
//! The fingerprint is the lowercase hex SHA-256 of a canonical encoding of the definition's
//! graph: the definition is turned into JSON, the presentation fields (`description`,
//! `display_name`) and the workflow's name are dropped, object keys are sorted, lists keep
//! their order (transition order is evaluation order), and the result is written without
//! whitespace behind the domain prefix `workflow-model/fingerprint/v1\n`.
//!
//! It depends only on the data, never on the Rust types, spans, fn bodies or the machine: the
//! macro and JSON forms of one graph agree, and any change to states, transitions, their
//! order, triggers, nodes, ports or connections changes it. Optional settings that are absent
//! are not written at all, so adding a new optional setting to the model in a later release
//! does not change the fingerprint of definitions that do not use it.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::definition::Definition;

const DOMAIN: &str = "workflow-model/fingerprint/v1\n";
const PRESENTATION_FIELDS: [&str; 2] = ["description", "display_name"];

/// The fingerprint of `definition`: 64 lowercase hex digits.
///
/// ```
/// use workflow_model::{Definition, Task};
///
/// let a = Definition::new("A", Task::new("root", "work"));
/// let mut b = a.clone();
/// b.name = "Renamed".into();
/// assert_eq!(a.fingerprint(), b.fingerprint()); // the name is identity, not graph
/// assert_eq!(a.fingerprint().len(), 64);
///
/// // Fault settings are graph: a retry policy is a new version (FLT-2, ENG-44).
/// let mut c = a.clone();
/// c.retry = Some(workflow_model::RetryPolicy { max_attempts: Some(5), ..Default::default() });
/// assert_ne!(a.fingerprint(), c.fingerprint());
/// let mut d = a.clone();
/// let workflow_model::Activity::Task(task) = &mut d.root else { unreachable!() };
/// task.attempt_timeout_ms = Some(30_000);
/// assert_ne!(a.fingerprint(), d.fingerprint());
/// ```
pub fn fingerprint(definition: &Definition) -> String {
    let mut canonical = String::from(DOMAIN);
    canonical.push_str(&canonical_form(definition));
    Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

impl Definition {
    /// The version fingerprint of this definition (ENG-44): [`fingerprint`] of it, 64
    /// lowercase hex digits.
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_model::{Definition, Task};
    ///
    /// let definition = Definition::new("Order", Task::new("root", "work"));
    /// assert_eq!(
    ///     definition.fingerprint(),
    ///     workflow_model::fingerprint::fingerprint(&definition)
    /// );
    /// ```
    pub fn fingerprint(&self) -> String {
        fingerprint(self)
    }
}

/// The canonical text the fingerprint hashes, for debugging a fingerprint change: the root's
/// canonical JSON, then, only when the definition has workflow-level settings (the default
/// retry policy, FLT-2, and the commit strategy, ENG-32), a line `settings:` with their
/// canonical JSON. Definitions without them keep the fingerprint they always had.
pub fn canonical_form(definition: &Definition) -> String {
    let mut canonical = String::new();
    match serde_json::to_value(&definition.root) {
        Ok(value) => write_canonical(&value, &mut canonical),
        // The model only holds strings, numbers, bools, lists and maps with string keys: it
        // always converts. Should that ever change, hash the debug form rather than panic.
        Err(_) => canonical.push_str(&format!("{:?}", definition.root)),
    }
    if definition.retry.is_some() || definition.commit_strategy.is_some() {
        let mut settings = serde_json::Map::new();
        if let Some(retry) = &definition.retry {
            settings.insert(
                "retry".to_owned(),
                serde_json::to_value(retry).unwrap_or(Value::Null),
            );
        }
        if let Some(strategy) = &definition.commit_strategy {
            settings.insert(
                "commit_strategy".to_owned(),
                serde_json::to_value(strategy).unwrap_or(Value::Null),
            );
        }
        canonical.push_str("\nsettings:");
        write_canonical(&Value::Object(settings), &mut canonical);
    }
    canonical
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|k| !PRESENTATION_FIELDS.contains(&k.as_str()))
                .collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
    }
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's string escaping is fixed by the JSON grammar and stable across versions.
    out.push_str(&Value::String(s.to_owned()).to_string());
}
