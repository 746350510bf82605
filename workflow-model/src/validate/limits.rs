//! Size limits of a definition (DEF-3): how long a name may be, how many elements a list may
//! hold, how many activities a definition may have and how deeply they may nest.
//!
//! A definition is data that may come from anywhere (a JSON file, a request body), and some
//! rules compare names with each other (the "did you mean" of FC-25), so every size the
//! validator works on is bounded before any other rule runs. A definition over a limit gets
//! one DEF-3 diagnostic per offending element, naming the field, its size and the limit, and
//! no other rule runs on it: the work stays linear in the size of the input.
//!
//! The check walks the JSON form of the definition, so it sees every string and every list
//! whatever its activity kind, and it runs on the raw JSON value before decoding
//! ([`crate::Definition::from_json`]) as well as on a decoded definition ([`crate::validate`]).
//!
//! ```
//! use workflow_model::{Definition, limits};
//!
//! let long = "S".repeat(limits::MAX_NAME_BYTES + 1);
//! let json = format!(
//!     r#"{{"name": "Demo", "root": {{"kind": "state_machine", "id": "root", "initial": "{long}",
//!        "states": [{{"name": "{long}"}}], "transitions": []}}}}"#
//! );
//! let problems = Definition::from_json(&json).unwrap_err().to_string();
//! assert!(problems.contains("DEF-3 at /root/initial: `initial` is 257 bytes long"), "{problems}");
//! assert!(problems.contains("at most 256 bytes"), "{problems}");
//! ```

use serde_json::Value;

use crate::definition::Definition;
use crate::diagnostics::{Diagnostic, Diagnostics, Location};

/// The rule id of a definition over a size limit.
pub const LIMIT_RULE: &str = "DEF-3";

/// The longest name, in bytes of UTF-8: ids, state and transition names, ports, the names of
/// registered fns, error codes, the workflow's name (the longest stimulus name, RT-2, is the
/// same).
pub const MAX_NAME_BYTES: usize = 256;

/// The longest free text, in bytes of UTF-8: `description`, `display_name`, a fault's
/// `message`, a cron `expression`.
pub const MAX_TEXT_BYTES: usize = 4_096;

/// The most elements one list may hold (states, transitions, nodes, connections, steps,
/// branches, cases, ports, ...).
pub const MAX_LIST_LEN: usize = 1_000;

/// The most activities one definition may hold, at every depth.
pub const MAX_ACTIVITIES: usize = 10_000;

/// The deepest nesting of activities (the root is at depth 1).
pub const MAX_DEPTH: usize = 32;

/// Fields whose value is free text, held to [`MAX_TEXT_BYTES`] instead of [`MAX_NAME_BYTES`].
const TEXT_FIELDS: &[&str] = &["description", "display_name", "message", "expression"];

/// Fields checked by a rule of their own with the same limit: an event's name (ACT-V4 reports
/// it with the stimulus-name grammar of RT-2).
const OWN_RULE_FIELDS: &[&str] = &["event"];

/// The size problems of `definition`; `Ok` when it is within every limit.
pub(crate) fn check_definition(definition: &Definition) -> Result<(), Diagnostics> {
    // Every type of the model serializes to JSON infallibly (string keys, finite numbers).
    match serde_json::to_value(definition) {
        Ok(value) => check_value(&value),
        Err(_) => Ok(()),
    }
}

/// The size problems of a definition in its JSON form (decoded or not); `Ok` when it is within
/// every limit. Iterative: the depth of the value costs no stack.
pub(crate) fn check_value(value: &Value) -> Result<(), Diagnostics> {
    let mut cx = Diagnostics::new();
    let mut activities = 0usize;
    let mut counted_over = false;
    // (value, location, the field it is the value of, activity depth of the value)
    let mut stack: Vec<(&Value, Location, Option<&str>, usize)> =
        vec![(value, Location::root(), None, 0)];
    while let Some((value, at, field, depth)) = stack.pop() {
        match value {
            Value::String(text) => check_string(text, field, &at, &mut cx),
            Value::Array(items) => {
                if items.len() > MAX_LIST_LEN {
                    cx.push(Diagnostic::new(
                        LIMIT_RULE,
                        at.clone(),
                        format!(
                            "{} has {} elements; at most {MAX_LIST_LEN} are allowed",
                            field_name(field),
                            items.len()
                        ),
                    ));
                    // Its elements are not looked at: the list alone is the problem.
                    continue;
                }
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push((item, at.index(i), field, depth));
                }
            }
            Value::Object(object) => {
                let mut depth = depth;
                if object.contains_key("kind") {
                    depth += 1;
                    activities += 1;
                    if activities > MAX_ACTIVITIES && !counted_over {
                        counted_over = true;
                        cx.push(Diagnostic::new(
                            LIMIT_RULE,
                            at.clone(),
                            format!(
                                "the definition has more than {MAX_ACTIVITIES} activities; \
                                 at most {MAX_ACTIVITIES} are allowed"
                            ),
                        ));
                    }
                    if depth > MAX_DEPTH {
                        cx.push(Diagnostic::new(
                            LIMIT_RULE,
                            at.clone(),
                            format!(
                                "activities nest {depth} deep here; at most {MAX_DEPTH} levels \
                                 are allowed"
                            ),
                        ));
                        continue;
                    }
                }
                let entries: Vec<_> = object.iter().collect();
                for (key, child) in entries.into_iter().rev() {
                    if key.len() > MAX_NAME_BYTES {
                        cx.push(Diagnostic::new(
                            LIMIT_RULE,
                            at.clone(),
                            format!(
                                "a field name `{}` is {} bytes long; at most {MAX_NAME_BYTES} \
                                 bytes are allowed",
                                shown(key),
                                key.len()
                            ),
                        ));
                        continue;
                    }
                    stack.push((child, at.field(key.clone()), Some(key.as_str()), depth));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    cx.into_result()
}

fn check_string(text: &str, field: Option<&str>, at: &Location, cx: &mut Diagnostics) {
    if field.is_some_and(|f| OWN_RULE_FIELDS.contains(&f)) {
        return;
    }
    let limit = if field.is_some_and(|f| TEXT_FIELDS.contains(&f)) {
        MAX_TEXT_BYTES
    } else {
        MAX_NAME_BYTES
    };
    if text.len() > limit {
        cx.push(Diagnostic::new(
            LIMIT_RULE,
            at.clone(),
            format!(
                "{} is {} bytes long; at most {limit} bytes are allowed (it starts `{}...`)",
                field_name(field),
                text.len(),
                shown(text)
            ),
        ));
    }
}

/// `` `states` `` or `the definition`.
fn field_name(field: Option<&str>) -> String {
    match field {
        Some(field) => format!("`{}`", shown(field)),
        None => "the definition".to_owned(),
    }
}

/// The first 32 characters of `text`, control characters escaped, for a message.
fn shown(text: &str) -> String {
    let head: String = text.chars().take(32).collect();
    head.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn problems(json: &str) -> Vec<(String, String)> {
        match Definition::from_json(json) {
            Ok(_) => Vec::new(),
            Err(err) => err
                .diagnostics()
                .map(|d| {
                    d.iter()
                        .map(|d| (d.at.json_pointer(), format!("{}: {}", d.rule, d.message)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// A state machine whose names are `len` characters: every transition's target is a
    /// near-miss of a state name, the worst case of the did-you-mean search.
    fn long_names(len: usize) -> String {
        let a = "a".repeat(len);
        let b = format!("{}b", "a".repeat(len - 1));
        format!(
            r#"{{"name": "{a}", "root": {{"kind": "state_machine", "id": "root", "initial": "{b}",
               "states": [{{"name": "{a}"}}],
               "transitions": [{{"from": "{b}", "to": "{b}"}}]}}}}"#
        )
    }

    #[test]
    fn huge_names_are_refused_quickly_and_by_field() {
        // 32 000-character names once made the edit distance allocate 8 GB and abort.
        let json = long_names(32_000);
        assert!(json.len() > 64_000);
        let started = Instant::now();
        let found = problems(&json);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let at: Vec<&str> = found.iter().map(|(at, _)| at.as_str()).collect();
        assert_eq!(
            at,
            [
                "/name",
                "/root/initial",
                "/root/states/0/name",
                "/root/transitions/0/from",
                "/root/transitions/0/to"
            ],
            "{found:?}"
        );
        assert_eq!(
            found[0].1,
            format!(
                "DEF-3: `name` is 32000 bytes long; at most 256 bytes are allowed (it starts `{}...`)",
                "a".repeat(32)
            )
        );
        // Every problem is a limit: no other rule ran on it.
        assert!(
            found.iter().all(|(_, m)| m.starts_with("DEF-3: ")),
            "{found:?}"
        );
    }

    #[test]
    fn names_at_the_limit_are_accepted_and_one_more_byte_is_not() {
        let at_limit = long_names(MAX_NAME_BYTES);
        let found = problems(&at_limit);
        // Within limits the other rules run: the unknown states are reported with no
        // suggestion limit problem.
        assert!(
            found.iter().all(|(_, m)| !m.starts_with("DEF-3")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|(_, m)| m.starts_with("SM-C1")),
            "{found:?}"
        );
        let over = long_names(MAX_NAME_BYTES + 1);
        assert_eq!(problems(&over).len(), 5);
    }

    #[test]
    fn long_text_fields_have_their_own_limit() {
        let text = "x".repeat(MAX_TEXT_BYTES);
        let json = format!(
            r#"{{"name": "Demo", "description": "{text}",
               "root": {{"kind": "fault", "id": "root", "code": "bad", "message": "{text}"}}}}"#
        );
        assert_eq!(problems(&json), Vec::new());
        let json = json.replace(&text, &format!("{text}x"));
        let found = problems(&json);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, "/description");
        assert!(
            found[1]
                .1
                .starts_with("DEF-3: `message` is 4097 bytes long; at most 4096 bytes")
        );
    }

    #[test]
    fn too_many_elements_too_many_activities_and_too_deep() {
        let steps: Vec<String> = (0..=MAX_LIST_LEN)
            .map(|i| format!(r#"{{"kind": "task", "id": "t{i}", "function": "f"}}"#))
            .collect();
        let json = format!(
            r#"{{"name": "Demo", "root": {{"kind": "sequence", "id": "root", "steps": [{}]}}}}"#,
            steps.join(",")
        );
        assert_eq!(
            problems(&json),
            [(
                "/root/steps".to_owned(),
                "DEF-3: `steps` has 1001 elements; at most 1000 are allowed".to_owned()
            )]
        );

        // Eleven sequences of 1 000 tasks: each list fits, the whole does not.
        let tasks: Vec<String> = (0..1_000)
            .map(|i| format!(r#"{{"kind": "task", "id": "t{i}", "function": "f"}}"#))
            .collect();
        let sequence = |i: usize| {
            format!(
                r#"{{"kind": "sequence", "id": "s{i}", "steps": [{}]}}"#,
                tasks.join(",")
            )
        };
        let sequences: Vec<String> = (0..11).map(sequence).collect();
        let json = format!(
            r#"{{"name": "Demo", "root": {{"kind": "sequence", "id": "root", "steps": [{}]}}}}"#,
            sequences.join(",")
        );
        let found = problems(&json);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].1.contains("more than 10000 activities"),
            "{found:?}"
        );

        // 33 nested sequences (the JSON parser's own depth limit is higher).
        let mut nested = r#"{"kind": "task", "id": "t", "function": "f"}"#.to_owned();
        for i in 0..MAX_DEPTH {
            nested = format!(r#"{{"kind": "sequence", "id": "s{i}", "steps": [{nested}]}}"#);
        }
        let json = format!(r#"{{"name": "Demo", "root": {nested}}}"#);
        let found = problems(&json);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].1,
            "DEF-3: activities nest 33 deep here; at most 32 levels are allowed"
        );
    }

    #[test]
    fn many_long_near_miss_names_within_the_limits_are_validated_quickly() {
        // A thousand states with 244-char names and a thousand transitions from near misses
        // of them (every third char changed): the did-you-mean search alone once needed about
        // 40 billion edit-distance cells (minutes of CPU); it now shares a fixed budget.
        let base: String = (0..240u8).map(|i| char::from(b'a' + i % 26)).collect();
        let name = |k: usize| format!("{base}{k:04}");
        let miss = |k: usize| -> String {
            name(k)
                .chars()
                .enumerate()
                .map(|(i, c)| if i % 3 == 0 { 'Z' } else { c })
                .collect()
        };
        let states: Vec<String> = (0..1_000)
            .map(|k| format!(r#"{{"name": "{}"}}"#, name(k)))
            .collect();
        let transitions: Vec<String> = (0..1_000)
            .map(|k| format!(r#"{{"from": "{}", "to": "{}"}}"#, miss(k), name(0)))
            .collect();
        let json = format!(
            r#"{{"name": "Demo", "root": {{"kind": "state_machine", "id": "root",
               "initial": "{}", "states": [{}], "transitions": [{}]}}}}"#,
            name(0),
            states.join(","),
            transitions.join(",")
        );
        let started = Instant::now();
        let found = problems(&json);
        let elapsed = started.elapsed();
        // Well under a second of CPU even in a debug build; before the budget, minutes. The
        // bound is generous so a loaded machine cannot fail it; the work itself is bounded by
        // the checks below, not by the clock.
        assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
        // Every unknown source is still reported; only the suggestions are bounded.
        let unknown = found.iter().filter(|(_, m)| m.starts_with("SM-C4")).count();
        assert_eq!(unknown, 1_000, "{:?}", found.first());
        // The names past the suggestion budget list the choices, a bounded few of them: each
        // message stays short (it once listed all thousand 244-char names, a quarter of a
        // megabyte per message and quadratic work to deduplicate them).
        let longest = found.iter().map(|(_, m)| m.len()).max().unwrap_or(0);
        assert!(longest < 8 * 1024, "a message of {longest} bytes");
        let listing = found
            .iter()
            .find(|(_, m)| m.contains("expected one of"))
            .map(|(_, m)| m.as_str())
            .unwrap_or_default();
        assert!(listing.ends_with(" and 988 more"), "{listing}");
    }

    #[test]
    fn a_decoded_definition_is_checked_too() {
        use crate::definition::{State, StateMachine};
        let name = "N".repeat(MAX_NAME_BYTES + 1);
        let machine = StateMachine {
            id: "root".into(),
            initial: name.clone(),
            states: vec![State::new(name)],
            transitions: vec![],
        };
        let found = crate::validate(&Definition::new("Demo", machine)).unwrap_err();
        let at: Vec<String> = found.iter().map(|d| d.at.json_pointer()).collect();
        assert_eq!(at, ["/root/initial", "/root/states/0/name"]);
    }
}
