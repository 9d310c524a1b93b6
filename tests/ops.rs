//! What operators see: the `diesel-lease` command-line tool against real servers (`cli`, and its
//! `doctor` in `doctor`), and diesel-lease's tracing output (`tracing`).

pub(crate) mod cli;
mod doctor;
#[cfg(feature = "metrics")]
mod metrics;
mod retention;
pub(crate) mod tracing;
