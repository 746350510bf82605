//! Store benchmark (placeholder).
fn main() {}
