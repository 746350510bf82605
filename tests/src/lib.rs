//! Workspace-level tests live in `tests/`. This library carries the README as its
//! documentation, so the README's program is compiled and run as a doctest with the suite.
//! A doctest borrows this package's dev-dependencies; `tests/readme_crate.rs` builds and runs
//! the same program again as a user's crate, with only the README's dependency block.
#![doc = include_str!("../../README.md")]
