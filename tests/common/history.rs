//! Histories of what real workers were handed, and a checker of the properties users count on.
//!
//! A test that counts end states (every row done, each completed once) cannot see a row whose
//! work ran twice: the second worker's owner-checked `complete` says `false`, and the row still
//! ends done once. So workers record every hand-out (what a claim returned to them) and every
//! completion as it happens, and [`History::check_claims`] judges the record:
//! - a claim returns only rows it marked: in the claimed state, with its holder's stamp, and an
//!   attempts count (the row's *epoch*) of at least 1;
//! - each row is handed out at most once per epoch: a rescue after a claim timeout increments
//!   the attempts and starts a new epoch, so it counts as the new epoch's one hand-out;
//! - each acknowledged completion (`complete` said `true`) comes from a holder the row was
//!   handed to, of the row's newest epoch handed out so far, and a row is acknowledged once.
//!
//! The record is not a mock: it is what real threads (or processes, whose lines a test parses)
//! were given by the database.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// One event of a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A claim returned row `row` to `holder` (the claim's stamp, the row's owner column) with
    /// `state` and attempts `epoch`.
    HandedOut {
        row: i64,
        holder: String,
        state: String,
        epoch: i64,
    },
    /// `holder`'s owner-checked completion of `row` answered `acknowledged`.
    Completed {
        row: i64,
        holder: String,
        acknowledged: bool,
    },
}

/// Events in the order they were recorded (one lock: a total order consistent with each
/// thread's own order).
#[derive(Debug, Default)]
pub struct History {
    events: Mutex<Vec<Event>>,
}

impl History {
    /// Records one event.
    pub fn record(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many hand-outs were recorded.
    pub fn hand_outs(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::HandedOut { .. }))
            .count()
    }

    /// Checks the claim properties (see the module docs), with `claimed` the claimed state's
    /// text; returns every violation found, empty when there is none.
    pub fn claim_violations(&self, claimed: &str) -> Vec<String> {
        check_claims(&self.events(), claimed)
    }

    /// Panics, listing the violations (at most 20), unless [`claim_violations`] is empty.
    ///
    /// [`claim_violations`]: Self::claim_violations
    pub fn check_claims(&self, claimed: &str) {
        let violations = self.claim_violations(claimed);
        assert!(
            violations.is_empty(),
            "{} violation(s) in a history of {} events, the first: {:#?}",
            violations.len(),
            self.events().len(),
            &violations[..violations.len().min(20)]
        );
    }
}

/// The checker itself, on a plain list of events (unit-tested below on made-up histories).
pub fn check_claims(events: &[Event], claimed: &str) -> Vec<String> {
    let mut violations = Vec::new();
    // Per row: holders per epoch, and the newest epoch handed out so far.
    let mut epochs: BTreeMap<i64, BTreeMap<i64, BTreeSet<String>>> = BTreeMap::new();
    let mut acknowledged: BTreeMap<i64, String> = BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        match event {
            Event::HandedOut {
                row,
                holder,
                state,
                epoch,
            } => {
                if state != claimed || *epoch < 1 {
                    violations.push(format!(
                        "event {i}: row {row} handed to {holder} unmarked (state {state:?}, attempts {epoch})"
                    ));
                }
                let holders = epochs.entry(*row).or_default().entry(*epoch).or_default();
                if !holders.is_empty() {
                    violations.push(format!(
                        "event {i}: row {row} handed out twice in epoch {epoch}: to {holders:?} and to {holder}"
                    ));
                }
                holders.insert(holder.clone());
            }
            Event::Completed {
                row,
                holder,
                acknowledged: true,
            } => {
                let newest = epochs.get(row).and_then(|e| e.iter().next_back());
                match newest {
                    Some((_, holders)) if holders.contains(holder) => {}
                    Some((epoch, holders)) => violations.push(format!(
                        "event {i}: row {row} completed by {holder}, but its newest epoch {epoch} was handed to {holders:?}"
                    )),
                    None => violations.push(format!(
                        "event {i}: row {row} completed by {holder}, to whom it was never handed"
                    )),
                }
                if let Some(first) = acknowledged.insert(*row, holder.clone()) {
                    violations.push(format!(
                        "event {i}: row {row} acknowledged twice, to {first} and to {holder}"
                    ));
                }
            }
            Event::Completed { .. } => {}
        }
    }
    violations
}

#[test]
fn the_claim_checker_finds_what_it_is_for() {
    let out = |row, holder: &str, epoch| Event::HandedOut {
        row,
        holder: holder.into(),
        state: "running".into(),
        epoch,
    };
    let done = |row, holder: &str| Event::Completed {
        row,
        holder: holder.into(),
        acknowledged: true,
    };
    // A clean history: one hand-out, a rescue in a new epoch, the rescuer completes.
    let clean = [out(1, "a", 1), out(1, "b", 2), done(1, "b"), out(2, "a", 1)];
    assert!(check_claims(&clean, "running").is_empty());
    // Two holders in one epoch.
    let twice = [out(1, "a", 1), out(1, "b", 1)];
    assert_eq!(check_claims(&twice, "running").len(), 1);
    // An unmarked hand-out (what Galera's read-back returned).
    let unmarked = [Event::HandedOut {
        row: 1,
        holder: "a".into(),
        state: "new".into(),
        epoch: 0,
    }];
    assert_eq!(check_claims(&unmarked, "running").len(), 1);
    // A completion by the holder of an older epoch, and one by nobody's holder.
    let stale = [out(1, "a", 1), out(1, "b", 2), done(1, "a"), done(2, "c")];
    assert_eq!(check_claims(&stale, "running").len(), 2);
    // One row acknowledged twice.
    let acked = [out(1, "a", 1), done(1, "a"), done(1, "a")];
    assert_eq!(check_claims(&acked, "running").len(), 1);
}
