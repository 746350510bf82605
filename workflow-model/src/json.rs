//! Loading definitions from JSON: every problem at once, each with its JSON Pointer.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::definition::{Activity, Connection, Definition, State, Transition};
use crate::diagnostics::{Diagnostic, Diagnostics, Location, did_you_mean};
use crate::validate::validate;

/// Why a JSON definition could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The text is not JSON at all.
    #[error("definition is not valid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the parser expected.
        message: String,
    },
    /// The JSON does not have the shape of a definition, or the definition breaks rules of the
    /// validator; every problem is listed with its JSON Pointer.
    #[error("{0}")]
    Invalid(Diagnostics),
}

impl LoadError {
    /// The diagnostics, when the error is [`LoadError::Invalid`].
    pub fn diagnostics(&self) -> Option<&Diagnostics> {
        match self {
            LoadError::Invalid(d) => Some(d),
            LoadError::Syntax { .. } => None,
        }
    }
}

/// The rule id of a JSON value that does not have the shape the model expects (a missing or
/// unknown field, a value of the wrong type).
pub const SHAPE_RULE: &str = "DEF-1";

impl Definition {
    /// Parses and validates a definition from JSON text.
    ///
    /// Shape problems (unknown activity kinds, missing or unknown fields, wrong types) are
    /// reported for every element that has them; when the shape is right, every validator rule
    /// runs and all violations are reported together. Never panics.
    ///
    /// ```
    /// use workflow_model::{Definition, LoadError};
    ///
    /// let err = Definition::from_json(r#"{
    ///   "name": "Expense",
    ///   "root": { "kind": "flowchart", "id": "root", "start": "submit",
    ///     "nodes": [ { "kind": "task", "id": "submit", "function": "submit_expense" },
    ///                { "kind": "delya", "id": "wait", "duration_ms": 1000 } ],
    ///     "connections": [ { "source": "submit", "target": "wait" } ] }
    /// }"#).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "1 problem in the definition\n  FC-V17 at /root/nodes/1/kind: \
    ///      unknown activity kind `delya`; did you mean `delay`?"
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`LoadError::Syntax`] for text that is not JSON, [`LoadError::Invalid`] with every shape
    /// problem (DEF-1) or every rule violation otherwise.
    pub fn from_json(text: &str) -> Result<Definition, LoadError> {
        let value: Value = serde_json::from_str(text).map_err(|e| LoadError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Self::from_json_value(value)
    }

    /// Like [`Definition::from_json`], from an already parsed value.
    ///
    /// # Errors
    ///
    /// [`LoadError::Invalid`] with every shape problem (DEF-1) or every rule violation.
    pub fn from_json_value(value: Value) -> Result<Definition, LoadError> {
        // Sizes before shapes (DEF-3): decoding and its suggestions never see a huge value.
        crate::validate::limits::check_value(&value).map_err(LoadError::Invalid)?;
        let definition = crate::diagnostics::with_suggestion_budget(
            crate::diagnostics::SUGGESTION_BUDGET,
            || decode(value),
        )
        .map_err(LoadError::Invalid)?;
        validate(&definition).map_err(LoadError::Invalid)?;
        Ok(definition)
    }

    /// The definition as pretty-printed JSON, the format [`Definition::from_json`] reads.
    pub fn to_json_pretty(&self) -> String {
        // Every type of the model serializes infallibly (string keys, no non-finite floats).
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Decodes the shape only, collecting every shape problem.
fn decode(value: Value) -> Result<Definition, Diagnostics> {
    match deserialize::<Definition>(value.clone(), &Location::root()) {
        Ok(definition) => Ok(definition),
        Err(first) => {
            let mut cx = Diagnostics::new();
            let mut top = value;
            if let Some(root) = top.as_object_mut().and_then(|o| o.get_mut("root")) {
                let root_at = Location::root().field("root");
                collect_activity_errors(root, &root_at, &mut cx);
                *root = placeholder();
            }
            if let Err(d) = deserialize::<Definition>(top, &Location::root()) {
                cx.push(d);
            }
            if cx.is_empty() {
                cx.push(first);
            }
            Err(cx)
        }
    }
}

/// A minimal valid activity that stands in for a child whose own errors were collected.
fn placeholder() -> Value {
    serde_json::json!({ "kind": "start", "id": "placeholder" })
}

/// Collects the shape problems of the activity `value` at `at` and of everything inside it.
fn collect_activity_errors(value: &mut Value, at: &Location, cx: &mut Diagnostics) {
    if deserialize::<Activity>(value.clone(), at).is_ok() {
        return;
    }
    let Some(object) = value.as_object_mut() else {
        cx.push(Diagnostic::new(
            SHAPE_RULE,
            at.clone(),
            format!("expected an activity object, found {}", describe(value)),
        ));
        return;
    };
    let kind = match object.get("kind") {
        Some(Value::String(kind)) => kind.clone(),
        Some(other) => {
            cx.push(Diagnostic::new(
                SHAPE_RULE,
                at.field("kind"),
                format!(
                    "invalid activity kind: expected a string, found {}",
                    describe(other)
                ),
            ));
            return;
        }
        None => {
            cx.push(Diagnostic::new(
                SHAPE_RULE,
                at.clone(),
                "missing field `kind`; every activity names its kind",
            ));
            return;
        }
    };
    // Children first: each one reports its own problems and is then replaced by a placeholder,
    // so what remains at this level is only this activity's own shape.
    for (key, child) in object.iter_mut() {
        let child_at = at.field(key.clone());
        replace_children(child, &child_at, cx);
    }
    if !Activity::KINDS.contains(&kind.as_str()) {
        let (hint, suggestion) = did_you_mean(&kind, Activity::KINDS.iter().copied());
        let hint = if hint.is_empty() {
            format!(
                "; expected one of {}",
                crate::diagnostics::backticked(Activity::KINDS.iter().copied())
            )
        } else {
            hint
        };
        let mut d = Diagnostic::new(
            "FC-V17",
            at.field("kind"),
            format!("unknown activity kind `{kind}`{hint}"),
        );
        d.suggestion = suggestion;
        cx.push(d);
        return;
    }
    // Elements of the lists of structs get their own precise locations.
    let mut precise = false;
    precise |= check_list::<State>(object, "states", at, cx);
    precise |= check_list::<Transition>(object, "transitions", at, cx);
    precise |= check_list::<Connection>(object, "connections", at, cx);
    if let Err(d) = deserialize::<Activity>(Value::Object(object.clone()), at) {
        // A list element already reported makes the whole activity fail again; do not repeat it.
        if !precise {
            cx.push(d);
        }
    }
}

/// Within one field of an activity: any nested object that is an activity (it has a `kind`) is
/// checked on its own and replaced by a placeholder.
fn replace_children(value: &mut Value, at: &Location, cx: &mut Diagnostics) {
    match value {
        Value::Object(object) if object.contains_key("kind") => {
            collect_activity_errors(value, at, cx);
            *value = placeholder();
        }
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                replace_children(child, &at.field(key.clone()), cx);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                replace_children(item, &at.index(i), cx);
            }
        }
        _ => {}
    }
}

/// Checks each element of `object[field]` as a `T`; returns whether anything was reported.
fn check_list<T: DeserializeOwned>(
    object: &Map<String, Value>,
    field: &'static str,
    at: &Location,
    cx: &mut Diagnostics,
) -> bool {
    let Some(Value::Array(items)) = object.get(field) else {
        return false;
    };
    let mut reported = false;
    for (i, item) in items.iter().enumerate() {
        if let Err(d) = deserialize::<T>(item.clone(), &at.field(field).index(i)) {
            cx.push(d);
            reported = true;
        }
    }
    reported
}

/// Deserializes `value` as a `T`, turning a failure into a diagnostic at the deepest location
/// serde reports.
fn deserialize<T: DeserializeOwned>(value: Value, at: &Location) -> Result<T, Diagnostic> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|err| {
        let mut location = at.clone();
        for segment in err.path() {
            location = match segment {
                serde_path_to_error::Segment::Seq { index } => location.index(*index),
                serde_path_to_error::Segment::Map { key } => location.field(key.clone()),
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => location,
            };
        }
        let message = tidy(&err.into_inner().to_string());
        Diagnostic::new(SHAPE_RULE, location, message)
    })
}

/// serde's messages are already lowercase; drop a trailing period and serde's `variant`
/// wording for internally tagged kinds.
fn tidy(message: &str) -> String {
    let message = message.trim_end_matches('.');
    message.replace("unknown variant", "unknown value")
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
