//! Claims, locked finders, guards and insert-once on the seeds' own tables (seeds 002, 003, 004).

pub(crate) mod basics;
mod batch;
mod builder;
mod cancel;
mod contention;
mod cursor;
mod guards;
mod heartbeat;
mod idle;
mod jobs;
mod keys;
mod literals;
mod locking;
pub(crate) mod pause;
mod precision;
pub(crate) mod priority;
mod rate;
pub(crate) mod retention;
pub(crate) mod schedule;
mod waiting;
mod worker;
mod zones;
