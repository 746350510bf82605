//! The `#[state_machine]` compile-fail and pass suites (trybuild).
//!
//! Layout: `ui/state_machine/<kind-of-mistake>/<exact-mistake>.rs` with the expected compiler
//! output in the `.stderr` beside it; `ui/state_machine/pass/*.rs` must compile and run. The
//! cases named `sm_cN_*` are the state-machine rules of the shared validator; the others are
//! the macro's own syntax and option errors (SM-C9) and rustc's type errors on user fns.
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
        "several",
    ] {
        t.compile_fail(format!("ui/state_machine/{kind}/*.rs"));
    }
}
