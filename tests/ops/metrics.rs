//! diesel-lease's metrics, recorded by a test recorder installed for the test's thread: claims,
//! completions, a lost lease, the claim and semaphore-wait histograms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::common::TestDb;
use diesel_lease::prelude::*;
use diesel_lease::Lease;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Sums per metric, keyed `name{label=value,…}`; histograms count their samples.
#[derive(Clone, Default)]
pub(crate) struct Sums(Arc<Mutex<HashMap<String, f64>>>);

struct Cell(String, Sums);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        *self.1 .0.lock().unwrap().entry(self.0.clone()).or_default() += value as f64;
    }
    fn absolute(&self, value: u64) {
        self.1
             .0
            .lock()
            .unwrap()
            .insert(self.0.clone(), value as f64);
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        assert!(value >= 0.0, "{} recorded {value}", self.0);
        *self.1 .0.lock().unwrap().entry(self.0.clone()).or_default() += 1.0;
    }
}

impl Sums {
    pub(crate) fn get(&self, key: &str) -> f64 {
        self.0.lock().unwrap().get(key).copied().unwrap_or(0.0)
    }
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        Arc::new(Cell(
            format!("{}{{{}}}", key.name(), labels.join(",")),
            self.clone(),
        ))
    }
}

impl Recorder for Sums {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.cell(key))
    }
}

backend_suite! {
    fixtures: crate::claim::basics;
    tests: [operations_are_counted];

    pub(crate) fn operations_are_counted(db: &TestDb<B>) {
        use std::time::Duration;
        use diesel_lease::semaphore::Semaphore;
        use crate::models::ImportJob;

        fixtures::seed_jobs(db, 5);
        db.migrate();
        let sums = Sums::default();
        let mut conn = db.conn();
        metrics::with_local_recorder(&sums, || {
            let jobs = ImportJob::claim().batch(3).rows(&mut conn).unwrap();
            assert_eq!(jobs.len(), 3);
            assert!(jobs[0].complete(&mut conn).unwrap());
            assert!(ImportJob::claim().batch(10).rows(&mut conn).unwrap().len() == 2);

            let mut paused = Lease::try_acquire(&mut conn, "metrics", &crate::lease::opts(100)).unwrap().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let _next = Lease::try_acquire(&mut conn, "metrics", &crate::lease::opts(5_000)).unwrap().unwrap();
            assert!(paused.extend(&mut conn, Duration::from_secs(1)).is_err());

            let permit = Semaphore::new("metrics", 1).acquire_on(&mut conn, Duration::from_secs(5)).unwrap();
            let _ = permit.release(&mut conn).unwrap();
        });
        assert_eq!(sums.get("diesel_lease_claims_total{table=importjobs}"), 5.0);
        assert_eq!(sums.get("diesel_lease_claim_seconds{table=importjobs}"), 2.0, "one sample per claim statement");
        assert_eq!(sums.get("diesel_lease_completions_total{table=importjobs,to=done}"), 1.0);
        assert_eq!(sums.get("diesel_lease_lost_total{what=lease}"), 1.0);
        assert_eq!(sums.get("diesel_lease_semaphore_wait_seconds{}"), 1.0);
    }
}
