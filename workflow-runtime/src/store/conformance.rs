//! The store conformance suite (ST-33).
