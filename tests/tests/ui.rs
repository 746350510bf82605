//! The `#[state_machine]` compile-fail and pass suites (trybuild).
//!
//! Layout: `ui/state_machine/<kind-of-mistake>/<exact-mistake>.rs` with the expected compiler
//! output in the `.stderr` beside it; `ui/state_machine/pass/*.rs` must compile and run.
//! Regenerate the expected output with `TRYBUILD=overwrite` and read every changed file.

#[test]
fn state_machine_ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/state_machine/pass/*.rs");
    t.compile_fail("ui/state_machine/syntax/*.rs");
    t.compile_fail("ui/state_machine/options/*.rs");
    t.compile_fail("ui/state_machine/states/*.rs");
    t.compile_fail("ui/state_machine/transitions/*.rs");
    t.compile_fail("ui/state_machine/types/*.rs");
    t.compile_fail("ui/state_machine/several/*.rs");
}
