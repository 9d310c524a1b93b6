//! Claims, locked finders, guards and insert-once on the seeds' own tables (seeds 002, 003, 004).

pub(crate) mod basics;
mod contention;
mod guards;
mod heartbeat;
mod jobs;
mod locking;
mod schedule;
mod worker;
mod zones;
