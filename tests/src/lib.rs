//! Workspace-level tests live in `tests/`. This library carries the README as its
//! documentation, so the README's program is compiled and run as a doctest with the suite.
#![doc = include_str!("../../README.md")]
