//! Worker process for the integration suite (filled in by its module).
fn main() {}
