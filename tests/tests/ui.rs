//! The `#[state_machine]` compile-fail and pass suites (trybuild).
//!
//! Layout: `ui/state_machine/<kind-of-mistake>/<exact-mistake>.rs` with the expected compiler
//! output in the `.stderr` beside it; `ui/state_machine/pass/*.rs` must compile and run.
//! Regenerate the expected output with `TRYBUILD=overwrite` and read every changed file.
//!
//! The cases named `sm_c1_*` .. `sm_c8_*` exercise the state-machine rules of the shared
//! validator (`workflow_model::validate`); they run once the validator reports them (probed
//! below), so this suite does not depend on the order in which the two land.

use std::path::PathBuf;

use workflow_runtime::model::{Definition, State, StateMachine, Transition, validate};

const KINDS: [&str; 6] = [
    "syntax",
    "options",
    "states",
    "transitions",
    "types",
    "several",
];

/// Whether the validator implements the state-machine rules yet (SM-C1 as the probe).
fn validator_has_state_machine_rules() -> bool {
    let machine = StateMachine {
        id: "root".into(),
        initial: "Nwe".into(),
        states: vec![State::new("New"), State::new("Done")],
        transitions: vec![Transition::new("New", "Done")],
    };
    validate(&Definition::new("Probe", machine))
        .err()
        .is_some_and(|problems| problems.iter().any(|d| d.rule == "SM-C1"))
}

fn cases(kind: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from("ui/state_machine").join(kind);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    cases.sort();
    cases
}

#[test]
fn state_machine_ui() {
    let with_rules = validator_has_state_machine_rules();
    let t = trybuild::TestCases::new();
    t.pass("ui/state_machine/pass/*.rs");
    for kind in KINDS {
        for case in cases(kind) {
            let name = case.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("sm_c") && !with_rules {
                eprintln!(
                    "skipped until the state-machine validator lands: {}",
                    case.display()
                );
                continue;
            }
            t.compile_fail(case);
        }
    }
}
