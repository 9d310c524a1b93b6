//! diesel-lease's tracing output, captured: the WARN events for a lost lease (found by an extend,
//! and found by a keep-alive in the background, which used to be silent) and the span of an
//! operation with its fields.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use diesel_lease::lease::{Lease, LeaseGuard, LeaseOptions};
use diesel_lease::prelude::*;
use diesel_lease::{admin, Error};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::fmt::MakeWriter;

use super::super::lease::{ms, opts};
use crate::common::{TestBackend, TestDb};

/// A writer that appends to a shared buffer.
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

/// The process-wide WARN subscriber (background threads log outside any test's thread), set
/// once for the suite; each test looks for its own lease names in it.
pub(crate) fn warnings() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing_subscriber::fmt()
            .with_max_level(::tracing::Level::WARN)
            .with_writer(capture.clone())
            .init();
        capture
    })
}

/// Waits up to 10 s for a captured line that contains every one of `needles`.
fn wait_for_line(capture: &Capture, needles: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = capture.text();
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no line with {needles:?} in:\n{text}"
        );
        std::thread::sleep(ms(20));
    }
}

fn an_extend_that_finds_the_lease_lost_warns<B: TestBackend>(db: &TestDb<B>) {
    let capture = warnings();
    db.migrate();
    let name = format!("observe-extend-{}", B::NAME);
    let (mut a, mut b) = (db.conn(), db.conn());
    let mut paused = Lease::try_acquire(&mut a, &name, &opts(100))
        .unwrap()
        .unwrap();
    std::thread::sleep(ms(300));
    let next = Lease::try_acquire(&mut b, &name, &opts(10_000))
        .unwrap()
        .unwrap();
    assert!(matches!(
        paused.extend(&mut a, ms(1_000)),
        Err(Error::LeaseLost { .. })
    ));
    let line = wait_for_line(capture, &["WARN", "lease lost", &name]);
    assert!(
        line.contains(&format!("fencing token {}", next.token())),
        "{line}"
    );
}

fn a_keep_alive_that_finds_the_lease_fenced_warns<B: TestBackend>(db: &TestDb<B>) {
    let capture = warnings();
    db.migrate();
    let name = format!("observe-keep-alive-{}", B::NAME);
    let pool = db.pool(3);
    let guard = LeaseGuard::try_acquire(&pool, &name, &LeaseOptions::new(ms(900)).keep_alive(true))
        .unwrap()
        .unwrap();
    admin::force_release_lease(&mut db.conn(), &name)
        .unwrap()
        .unwrap();
    // The next beat (every ttl/3) finds the token moved on.
    assert!(guard.lost_signal().wait_timeout(Duration::from_secs(10)));
    let line = wait_for_line(capture, &["WARN", "now lost", &name]);
    assert!(line.contains("no longer ours"), "{line}");
    drop(guard);
}

fn an_operation_is_one_span_with_its_fields<B: TestBackend>(db: &TestDb<B>) {
    db.migrate();
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(::tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(capture.clone())
        .finish();
    let mut conn = db.conn();
    let name = format!("observe-span-{}", B::NAME);
    ::tracing::subscriber::with_default(subscriber, || {
        let mut held = Lease::try_acquire(&mut conn, &name, &opts(5_000))
            .unwrap()
            .unwrap();
        let _ = held.release(&mut conn).unwrap();
    });
    let text = capture.text();
    let acquire = text
        .lines()
        .find(|l| l.contains("lease_acquire") && l.contains("close"))
        .unwrap_or_else(|| panic!("no closed lease_acquire span in:\n{text}"));
    for field in [
        name.as_str(),
        "outcome=\"granted\"",
        "db_time_us=",
        "backend=",
    ] {
        assert!(acquire.contains(field), "{field} missing: {acquire}");
    }
    let release = text
        .lines()
        .find(|l| l.contains("lease_release") && l.contains("close"))
        .unwrap_or_else(|| panic!("no closed lease_release span in:\n{text}"));
    assert!(
        release.contains("outcome=\"released\"") && release.contains("token="),
        "{release}"
    );
}

backend_tests!(
    an_extend_that_finds_the_lease_lost_warns,
    a_keep_alive_that_finds_the_lease_fenced_warns,
    an_operation_is_one_span_with_its_fields,
);
