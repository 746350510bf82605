//! The `#[state_machine]` and `workflow!` compile-fail and pass suites (trybuild).
//!
//! Layout: `ui/<macro>/<kind-of-mistake>/<exact-mistake>.rs` with the expected compiler output
//! in the `.stderr` beside it; `ui/<macro>/pass/*.rs` must compile and run. The cases named
//! `sm_cN_*` and `fc_vN_*` are the rules of the shared validator; the others are the macros' own
//! syntax and option errors and rustc's type errors on user fns.
//! Regenerate the expected output with `TRYBUILD=overwrite` and read every changed file.
//!
//! `UI_CASES=state_machine/diagnostics cargo test -p tests --test ui` runs only the folders
//! whose path contains `UI_CASES` (for iterating on a few cases: the whole suite is slow).

/// Whether the folder `ui/{folder}` is selected by `UI_CASES` (all of them without it).
fn selected(folder: &str) -> bool {
    std::env::var("UI_CASES").map_or(true, |only| folder.contains(&only))
}

#[test]
fn state_machine_ui() {
    let t = trybuild::TestCases::new();
    if selected("state_machine/pass") {
        t.pass("ui/state_machine/pass/*.rs");
    }
    for kind in [
        "syntax",
        "options",
        "states",
        "transitions",
        "types",
        "faults",
        "several",
        "dsl",
        "diagnostics",
        "migrations",
        "queues",
    ] {
        if selected(&format!("state_machine/{kind}")) {
            t.compile_fail(format!("ui/state_machine/{kind}/*.rs"));
        }
    }
}

#[test]
fn workflow_ui() {
    let t = trybuild::TestCases::new();
    if selected("workflow/pass") {
        t.pass("ui/workflow/pass/*.rs");
    }
    for kind in [
        "syntax",
        "nodes",
        "connections",
        "start",
        "graph",
        "types",
        "faults",
        "several",
        "dsl",
        "diagnostics",
        "migrations",
        "queues",
    ] {
        if selected(&format!("workflow/{kind}")) {
            t.compile_fail(format!("ui/workflow/{kind}/*.rs"));
        }
    }
}
