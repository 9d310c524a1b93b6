//! What operators see: the `diesel-lease` command-line tool against real servers (`cli`), and
//! diesel-lease's tracing output (`tracing`).

mod cli;
#[cfg(feature = "metrics")]
mod metrics;
pub(crate) mod tracing;
