//! The diesel-lease integration suite: one set of tests, run on every enabled backend.
#![allow(missing_docs, missing_debug_implementations, clippy::unwrap_used)]

#[macro_use]
pub mod common;

mod asyncapp;
pub(crate) mod claim;
mod engines;
#[cfg(feature = "postgres")]
mod examples;
mod faults;
mod lease;
pub mod models;
pub(crate) mod ops;
mod pooler;
mod semaphore;
mod smoke;
