//! The store conformance suite (ST-33) run against every backend.
