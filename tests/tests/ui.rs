//! The `#[state_machine]` and `workflow!` compile-fail and pass suites (trybuild).
//!
//! Layout: `ui/<macro>/<kind-of-mistake>/<exact-mistake>.rs` with the expected compiler output
//! in the `.stderr` beside it; `ui/<macro>/pass/*.rs` must compile and run. The cases named
//! `sm_cN_*` and `fc_vN_*` are the rules of the shared validator; the others are the macros' own
//! syntax and option errors and rustc's type errors on user fns.
//! Regenerate the expected output with `TRYBUILD=overwrite` and read every changed file.

#[test]
fn state_machine_ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/state_machine/pass/*.rs");
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
    ] {
        t.compile_fail(format!("ui/state_machine/{kind}/*.rs"));
    }
}

#[test]
fn workflow_ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/workflow/pass/*.rs");
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
    ] {
        t.compile_fail(format!("ui/workflow/{kind}/*.rs"));
    }
}
