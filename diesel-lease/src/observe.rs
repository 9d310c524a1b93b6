//! What diesel-lease tells an operator: a `tracing` span per operation and WARN events for what
//! went wrong in the background (feature `tracing`, on by default), and counters and histograms
//! through the `metrics` facade (feature `metrics`).
//!
//! Every call site goes through this module, so with both features off nothing of it is
//! compiled in, and with no subscriber or recorder installed an operation pays one disabled-span
//! check (measured in BENCHMARKS.md, "Instrumentation overhead").
//!
//! # Spans
//!
//! Target `diesel_lease`, level DEBUG, named after the operation: `claim`, `complete`, `guard`,
//! `insert_once`, `lease_acquire`, `lease_extend`, `lease_release`, `semaphore_acquire`,
//! `semaphore_release`. Fields: what it acts on (`table` or `name`/`resource`), `owner`, `token`
//! or `ticket` where there is one, `backend`, and when it ends `outcome`, `rows` and
//! `db_time_us` (the operation's time on the client's clock, which its database round trips
//! dominate).
//!
//! # Events (WARN, target `diesel_lease`)
//!
//! A lost lease, permit or claim; a failed heartbeat; a retried deadlock or serialization
//! failure; stale claims moved to the failed state; an error the farm scheduler retries; waiters
//! that poll instead of being woken by `LISTEN/NOTIFY` (a pool built for a transaction pooler
//! without a direct URL, once per pool; a wait on a caller's own connection in a process with
//! such a pool, once per process).
//!
//! # Metrics
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `diesel_lease_claims_total` | counter (rows claimed) | `table` |
//! | `diesel_lease_completions_total` | counter | `table`, `to` (`done`, `failed`, `ready`) |
//! | `diesel_lease_rescues_total` | counter (stale claims moved to the failed state) | `table` |
//! | `diesel_lease_lost_total` | counter | `what` (`lease`, `permit`, `claim`) |
//! | `diesel_lease_retries_total` | counter | `cause` (`deadlock`, `schedule`) |
//! | `diesel_lease_claim_seconds` | histogram (one claim statement) | `table` |
//! | `diesel_lease_semaphore_wait_seconds` | histogram (request to grant) | |

#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::time::Instant;

/// The operations that get a span (and their metric names where they have one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Claim,
    Complete,
    Guard,
    InsertOnce,
    LeaseAcquire,
    LeaseExtend,
    LeaseRelease,
    SemaphoreAcquire,
    SemaphoreRelease,
}

/// One running operation: its span (entered until [`Op::finish`]) and its start.
#[must_use]
pub(crate) struct Op {
    #[cfg(feature = "tracing")]
    span: tracing::span::EnteredSpan,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    started: Option<Instant>,
    #[cfg(feature = "metrics")]
    kind: OpKind,
    #[cfg(feature = "metrics")]
    label: &'static str,
}

/// Starts an operation: `op!(Claim, label, backend, table = …, owner = …)`. `label` is a
/// `&'static str` for the metrics (the table name, or `""`), `backend` a
/// [`BackendKind`](lease_core::BackendKind); the fields are tracing fields, evaluated only when a
/// subscriber wants the span.
macro_rules! op {
    ($kind:ident, $label:expr, $backend:expr $(, $field:ident = $value:expr)* $(,)?) => {{
        #[cfg(feature = "tracing")]
        let span = ::tracing::debug_span!(
            target: "diesel_lease",
            $crate::observe::span_name!($kind),
            $($field = $value,)*
            backend = ::tracing::field::debug($backend),
            outcome = ::tracing::field::Empty,
            rows = ::tracing::field::Empty,
            db_time_us = ::tracing::field::Empty,
            error = ::tracing::field::Empty,
        );
        #[cfg(not(feature = "tracing"))]
        let span = {
            let _ = $backend;
        };
        $crate::observe::Op::start($crate::observe::OpKind::$kind, $label, span)
    }};
}
pub(crate) use op;

/// The span name of an [`OpKind`] (a literal, as `tracing` wants it).
#[allow(unused_macros)] // without the `tracing` feature
macro_rules! span_name {
    (Claim) => {
        "claim"
    };
    (Complete) => {
        "complete"
    };
    (Guard) => {
        "guard"
    };
    (InsertOnce) => {
        "insert_once"
    };
    (LeaseAcquire) => {
        "lease_acquire"
    };
    (LeaseExtend) => {
        "lease_extend"
    };
    (LeaseRelease) => {
        "lease_release"
    };
    (SemaphoreAcquire) => {
        "semaphore_acquire"
    };
    (SemaphoreRelease) => {
        "semaphore_release"
    };
}
#[allow(unused_imports)]
pub(crate) use span_name;

#[cfg(feature = "tracing")]
type SpanArg = tracing::Span;
#[cfg(not(feature = "tracing"))]
type SpanArg = ();

impl Op {
    #[doc(hidden)]
    #[inline]
    pub(crate) fn start(kind: OpKind, label: &'static str, span: SpanArg) -> Op {
        let _ = (kind, label);
        #[cfg(feature = "tracing")]
        let timed = !span.is_disabled();
        #[cfg(not(feature = "tracing"))]
        let (timed, ()) = (false, span);
        #[cfg(feature = "metrics")]
        let timed = timed || matches!(kind, OpKind::Claim | OpKind::SemaphoreAcquire);
        let _ = timed;
        Op {
            #[cfg(feature = "tracing")]
            span: span.entered(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            started: timed.then(Instant::now),
            #[cfg(feature = "metrics")]
            kind,
            #[cfg(feature = "metrics")]
            label,
        }
    }

    /// Ends the operation: records `outcome` and `rows` on the span and in the metrics, or the
    /// error, and passes `result` on.
    #[inline]
    pub(crate) fn finish<T>(
        self,
        result: crate::Result<T>,
        describe: impl FnOnce(&T) -> (&'static str, u64),
    ) -> crate::Result<T> {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        {
            let elapsed = self.started.map(|s| s.elapsed());
            let (outcome, rows) = match &result {
                Ok(value) => describe(value),
                Err(_) => ("error", 0),
            };
            #[cfg(feature = "tracing")]
            if !self.span.is_disabled() {
                self.span.record("outcome", outcome);
                self.span.record("rows", rows);
                if let Some(elapsed) = elapsed {
                    self.span.record(
                        "db_time_us",
                        u64::try_from(elapsed.as_micros()).unwrap_or(0),
                    );
                }
                if let Err(e) = &result {
                    self.span.record("error", tracing::field::display(e));
                }
            }
            #[cfg(feature = "metrics")]
            self.record_metrics(outcome, rows, elapsed);
        }
        #[cfg(not(any(feature = "tracing", feature = "metrics")))]
        let _ = describe;
        result
    }

    #[cfg(feature = "metrics")]
    fn record_metrics(
        &self,
        outcome: &'static str,
        rows: u64,
        elapsed: Option<std::time::Duration>,
    ) {
        let table = self.label;
        match self.kind {
            OpKind::Claim if outcome != "error" => {
                metrics::counter!("diesel_lease_claims_total", "table" => table).increment(rows);
                if let Some(elapsed) = elapsed {
                    metrics::histogram!("diesel_lease_claim_seconds", "table" => table)
                        .record(elapsed.as_secs_f64());
                }
            }
            OpKind::Complete if rows > 0 => {
                metrics::counter!("diesel_lease_completions_total", "table" => table, "to" => outcome)
                    .increment(rows);
            }
            OpKind::SemaphoreAcquire if outcome == "granted" => {
                if let Some(elapsed) = elapsed {
                    metrics::histogram!("diesel_lease_semaphore_wait_seconds")
                        .record(elapsed.as_secs_f64());
                }
            }
            _ => {}
        }
    }
}

/// A grant (lease, permit, claim) is lost: someone else has it now, or it expired.
pub(crate) fn lost(
    what: &'static str,
    name: &str,
    id: Option<i64>,
    reason: &dyn std::fmt::Display,
) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", what, name, id, %reason, "{what} lost");
    #[cfg(feature = "metrics")]
    metrics::counter!("diesel_lease_lost_total", "what" => what).increment(1);
    let _ = (what, name, id, reason);
}

/// A heartbeat (lease keep-alive, permit or claim heartbeat) failed; it is retried until the
/// holder's local deadline.
pub(crate) fn heartbeat_failed(name: &str, error: &dyn std::fmt::Debug) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", name, ?error, "heartbeat failed; retrying until the local deadline");
    let _ = (name, error);
}

/// A heartbeat found its grant lost (gone from the database, or its local deadline passed).
pub(crate) fn heartbeat_lost(name: &str, reason: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", name, %reason, "held in the background, now lost");
    #[cfg(feature = "metrics")]
    metrics::counter!("diesel_lease_lost_total", "what" => "heartbeat").increment(1);
    let _ = (name, reason);
}

/// The message of the WARN event (target `diesel_lease`, fields `attempt` and `error`) emitted
/// each time diesel-lease retries work that a deadlock or serialization failure rolled back:
/// match on it to count the retries.
pub const RETRIED_CONFLICT: &str = "deadlock or serialization failure, retrying";

/// A deadlock or serialization failure rolled the work back; it is tried again.
pub(crate) fn retried_conflict(attempt: u32, error: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", attempt, %error, "{}", RETRIED_CONFLICT);
    #[cfg(feature = "metrics")]
    metrics::counter!("diesel_lease_retries_total", "cause" => "deadlock").increment(1);
    let _ = (attempt, error);
}

/// Stale claims that used up their attempts were moved to the failed state.
pub(crate) fn rescued(table: &'static str, rows: usize) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", table, rows, "stale claims rescued: out of attempts, moved to the failed state");
    #[cfg(feature = "metrics")]
    metrics::counter!("diesel_lease_rescues_total", "table" => table).increment(rows as u64);
    let _ = (table, rows);
}

/// A lease could not be released after the work under it failed; the caller gets the work's
/// error, and the lease expires by itself at the end of its ttl.
pub(crate) fn release_after_failure(name: &str, error: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", name, %error, "the work failed and the lease could not be released; it expires at the end of its ttl");
    let _ = (name, error);
}

/// The farm scheduler hit an error it reports and retries at its next poll.
pub(crate) fn schedule_retry(name: &str, error: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", name, %error, "scheduled job failed; retrying at the next poll");
    #[cfg(feature = "metrics")]
    metrics::counter!("diesel_lease_retries_total", "cause" => "schedule").increment(1);
    let _ = (name, error);
}

/// Waiters will not be woken by PostgreSQL's `LISTEN/NOTIFY`, for the reason `why`: they poll
/// (within their max poll interval) and wake each other within this process only. The callers
/// say it once (per pool, per process).
/// A pool's server replicates in a way some guarantees depend on (`Replication::warning`).
#[cfg_attr(not(feature = "r2d2"), allow(dead_code))]
pub(crate) fn replication_warning(warning: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", "{warning}");
    let _ = warning;
}

pub(crate) fn wakeups_polled(why: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "diesel_lease", "{why}: no LISTEN/NOTIFY wake-ups, waiters poll (within their max poll interval) and wake each other within this process only");
    let _ = why;
}

/// The table name of a Diesel `table!` type (`app::schema::jobs::table` → `jobs`): no allocation,
/// for span fields and metric labels.
pub(crate) fn table_name<T: ?Sized>() -> &'static str {
    let path = std::any::type_name::<T>();
    let path = path.strip_suffix("::table").unwrap_or(path);
    // After the last `:` of the path, found by a plain scan back over a short name (every claim
    // and finish names its table: a `"::"` pattern built a substring searcher each time, 1 % of
    // a claim's client CPU, and `rsplit(':')` still cost some 200 instructions a call).
    let start = path.bytes().rposition(|b| b == b':').map_or(0, |i| i + 1);
    &path[start..]
}

// For the benchmark program, through `__private`.
pub(crate) mod bench {

    /// The cost of one instrumented operation with nothing else in it: the span of a claim (created,
    /// entered, finished) and its metrics. For the benchmark program (`--overhead`): `n` of them.
    pub fn overhead(n: u64) -> std::time::Duration {
        let started = std::time::Instant::now();
        for i in 0..n {
            let op = op!(
                Claim,
                "bench_jobs",
                lease_core::BackendKind::Postgres,
                table = "bench_jobs",
                owner = "overhead",
            );
            let rows = op.finish(Ok(std::hint::black_box(i)), |_| ("claimed", 1));
            std::hint::black_box(rows.ok());
        }
        started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_names_come_from_the_schema_type() {
        mod schema {
            diesel::table! { importjobs (id) { id -> BigInt, } }
        }
        assert_eq!(
            super::table_name::<schema::importjobs::table>(),
            "importjobs"
        );
    }
}
