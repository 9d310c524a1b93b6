//! Claims, locked finders, guards and insert-once on the seeds' own tables (seeds 002, 003, 004).

pub(crate) mod basics;
mod contention;
mod guards;
mod jobs;
mod locking;
