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
//! Leases and semaphores have their own records: workers record each grant (with its fencing
//! token) and the moment they stopped believing they held it, and each permit held and released.
//! [`History::check_grants`] judges that fencing tokens of a name strictly increase in grant
//! order and that a name never has two holders at once (a grant while another holder has not
//! ended is one); [`History::check_permits`] that a resource never has more holders than its
//! permits. A holder records its grant after the acquire returned and its end before it
//! releases, so an overlap in the record is an overlap in what the workers believed.
//!
//! The record is not a mock: it is what real threads (or processes, whose lines a test parses
//! with [`hand_out_from_worker_line`]) were given by the database.

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
    /// An acquire of lease `name` returned to `holder` with fencing token `token`. `holder`
    /// names the worker (a thread, not the lease's owner id, which the threads of a process
    /// share).
    Granted {
        name: String,
        token: i64,
        holder: String,
    },
    /// `holder` stopped believing it holds lease `name`: it is about to release it, learnt it
    /// lost it, or its work under it ended.
    GrantEnded { name: String, holder: String },
    /// An acquire of a permit of `resource` returned to `holder`.
    PermitHeld { resource: String, holder: String },
    /// `holder` stopped believing it holds its permit of `resource` (recorded before it
    /// releases, or when it learnt the permit was lost).
    PermitReleased { resource: String, holder: String },
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

    /// Records that lease `name` was granted to `holder` with fencing token `token`.
    pub fn granted(&self, name: &str, token: i64, holder: &str) {
        self.record(Event::Granted {
            name: name.into(),
            token,
            holder: holder.into(),
        });
    }

    /// Records that `holder` stopped believing it holds lease `name`.
    pub fn grant_ended(&self, name: &str, holder: &str) {
        self.record(Event::GrantEnded {
            name: name.into(),
            holder: holder.into(),
        });
    }

    /// Records that `holder` holds a permit of `resource`.
    pub fn permit_held(&self, resource: &str, holder: &str) {
        self.record(Event::PermitHeld {
            resource: resource.into(),
            holder: holder.into(),
        });
    }

    /// Records that `holder` stopped believing it holds its permit of `resource`.
    pub fn permit_released(&self, resource: &str, holder: &str) {
        self.record(Event::PermitReleased {
            resource: resource.into(),
            holder: holder.into(),
        });
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
        self.assert_none(self.claim_violations(claimed));
    }

    /// Checks the lease properties: fencing tokens of each name strictly increase in grant
    /// order, and a name is never granted while another grant of it has not ended; returns
    /// every violation found, empty when there is none.
    pub fn grant_violations(&self) -> Vec<String> {
        check_grants(&self.events())
    }

    /// Panics, listing the violations (at most 20), unless [`grant_violations`] is empty.
    ///
    /// [`grant_violations`]: Self::grant_violations
    pub fn check_grants(&self) {
        self.assert_none(self.grant_violations());
    }

    /// Checks that no resource ever had more than `max` holders of a permit at once; returns
    /// every violation found, empty when there is none.
    pub fn permit_violations(&self, max: usize) -> Vec<String> {
        check_permits(&self.events(), max)
    }

    /// Panics, listing the violations (at most 20), unless [`permit_violations`] is empty.
    ///
    /// [`permit_violations`]: Self::permit_violations
    pub fn check_permits(&self, max: usize) {
        self.assert_none(self.permit_violations(max));
    }

    /// Panics, listing at most 20 of `violations`, unless there is none.
    fn assert_none(&self, violations: Vec<String>) {
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
                if state != claimed || *epoch < 1 || holder.is_empty() {
                    violations.push(format!(
                        "event {i}: row {row} handed to {holder:?} unmarked (state {state:?}, attempts {epoch})"
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
            _ => {}
        }
    }
    violations
}

/// The hand-out a claim returned to this process's thread: `job` as the claim gave it.
pub fn hand_out(job: &crate::models::ImportJob) -> Event {
    Event::HandedOut {
        row: job.id,
        holder: job.worker.clone().unwrap_or_default(),
        state: job.statuscode.clone(),
        epoch: job.attempts.into(),
    }
}

/// `job`'s holder's owner-checked completion, which answered `acknowledged`.
pub fn completion(job: &crate::models::ImportJob, acknowledged: bool) -> Event {
    Event::Completed {
        row: job.id,
        holder: job.worker.clone().unwrap_or_default(),
        acknowledged,
    }
}

/// The hand-out a worker process reported in `line`, which `claim-worker` prints as
/// `claimed <row> <attempts> <state> <owner stamp>` (the stamp last, as it may hold spaces;
/// empty when the row had none); `None` for the process's other lines. Panics on a `claimed`
/// line it cannot read: a record the test cannot read judges nothing.
pub fn hand_out_from_worker_line(line: &str) -> Option<Event> {
    let rest = line.strip_prefix("claimed ")?;
    let mut fields = rest.splitn(4, ' ');
    let mut number = |what: &str| -> i64 {
        fields
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("worker line {line:?}: no {what}"))
    };
    let (row, epoch) = (number("row"), number("attempts"));
    let state = fields
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| panic!("worker line {line:?}: no state"));
    Some(Event::HandedOut {
        row,
        holder: fields.next().unwrap_or_default().into(),
        state: state.into(),
        epoch,
    })
}

/// `events` with its first hand-out recorded once more at the end, to another holder: a history
/// in which a row was handed out twice in one epoch. A test shows with it that the checker, fed
/// that test's own record, can fail: a check that cannot fail proves nothing.
pub fn with_first_hand_out_doubled(events: &[Event]) -> Vec<Event> {
    let mut doubled = events.to_vec();
    let first = events
        .iter()
        .find_map(|e| match e {
            Event::HandedOut {
                row,
                holder,
                state,
                epoch,
            } => Some(Event::HandedOut {
                row: *row,
                holder: format!("{holder}-again"),
                state: state.clone(),
                epoch: *epoch,
            }),
            _ => None,
        })
        .expect("the history has a hand-out");
    doubled.push(first);
    doubled
}

/// `events` with its first grant recorded once more at the end, to another holder and with the
/// same token: a history in which a fencing token was granted twice. As
/// [`with_first_hand_out_doubled`] does for claims, it shows a test's grant check can fail on
/// that test's own record.
pub fn with_first_grant_doubled(events: &[Event]) -> Vec<Event> {
    let mut doubled = events.to_vec();
    let first = events
        .iter()
        .find_map(|e| match e {
            Event::Granted {
                name,
                token,
                holder,
            } => Some(Event::Granted {
                name: name.clone(),
                token: *token,
                holder: format!("{holder}-again"),
            }),
            _ => None,
        })
        .expect("the history has a grant");
    doubled.push(first);
    doubled
}

/// The lease checker, on a plain list of events: tokens per name strictly increasing in grant
/// order, and no grant of a name while another of its grants has not ended.
pub fn check_grants(events: &[Event]) -> Vec<String> {
    let mut violations = Vec::new();
    // Per name: the last token granted, and the holders that have not ended.
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    let mut holding: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        match event {
            Event::Granted {
                name,
                token,
                holder,
            } => {
                if let Some(previous) = last.insert(name, *token) {
                    if *token <= previous {
                        violations.push(format!(
                            "event {i}: `{name}` granted to {holder} with token {token}, after token {previous}"
                        ));
                    }
                }
                let holders = holding.entry(name).or_default();
                if !holders.is_empty() {
                    violations.push(format!(
                        "event {i}: `{name}` granted to {holder} while {holders:?} still held it"
                    ));
                }
                holders.insert(holder);
            }
            Event::GrantEnded { name, holder } => {
                let held = holding.entry(name).or_default().remove(holder.as_str());
                if !held {
                    violations.push(format!(
                        "event {i}: {holder}'s grant of `{name}` ended, but it held none"
                    ));
                }
            }
            _ => {}
        }
    }
    violations
}

/// The permit checker, on a plain list of events: never more than `max` holders of one
/// resource at once.
pub fn check_permits(events: &[Event], max: usize) -> Vec<String> {
    let mut violations = Vec::new();
    // Per resource: the permits each holder has and has not released.
    let mut holding: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        match event {
            Event::PermitHeld { resource, holder } => {
                let holders = holding.entry(resource).or_default();
                *holders.entry(holder).or_default() += 1;
                let now: usize = holders.values().sum();
                if now > max {
                    violations.push(format!(
                        "event {i}: {now} permits of `{resource}` held at once (at most {max}): {holders:?}"
                    ));
                }
            }
            Event::PermitReleased { resource, holder } => {
                let holders = holding.entry(resource).or_default();
                match holders.get_mut(holder.as_str()) {
                    Some(n) if *n > 1 => *n -= 1,
                    Some(_) => {
                        holders.remove(holder.as_str());
                    }
                    None => violations.push(format!(
                        "event {i}: {holder} released a permit of `{resource}` it did not hold"
                    )),
                }
            }
            _ => {}
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
    // A hand-out in the claimed state but without its holder's stamp.
    assert_eq!(check_claims(&[out(1, "", 1)], "running").len(), 1);
    // A completion by the holder of an older epoch, and one by nobody's holder.
    let stale = [out(1, "a", 1), out(1, "b", 2), done(1, "a"), done(2, "c")];
    assert_eq!(check_claims(&stale, "running").len(), 2);
    // One row acknowledged twice.
    let acked = [out(1, "a", 1), done(1, "a"), done(1, "a")];
    assert_eq!(check_claims(&acked, "running").len(), 1);
}

#[test]
fn worker_lines_read_as_hand_outs() {
    let out = |row, holder: &str, state: &str, epoch| {
        Some(Event::HandedOut {
            row,
            holder: holder.into(),
            state: state.into(),
            epoch,
        })
    };
    let read = hand_out_from_worker_line;
    assert_eq!(
        read("claimed 7 2 running host-1 pid 9#00ab12cd34ef"),
        out(7, "host-1 pid 9#00ab12cd34ef", "running", 2),
        "the stamp is the rest of the line, spaces and all"
    );
    assert_eq!(read("claimed 7 0 new "), out(7, "", "new", 0));
    assert_eq!(read("claimed 7 0 new"), out(7, "", "new", 0));
    assert_eq!(read("empty 3"), None);
    assert_eq!(read("holding"), None);
    // What the line says is what the checker judges: an unmarked hand-out read from a worker
    // process is a violation.
    let events: Vec<Event> = ["claimed 1 1 running a#1", "claimed 2 0 new "]
        .into_iter()
        .filter_map(read)
        .collect();
    assert_eq!(check_claims(&events, "running").len(), 1);
    for bad in ["claimed 7", "claimed x 1 running a", "claimed 7 1"] {
        let panicked = std::panic::catch_unwind(|| read(bad)).is_err();
        assert!(panicked, "{bad:?} was read");
    }
}

#[test]
fn the_grant_checker_finds_what_it_is_for() {
    let granted = |name: &str, token, holder: &str| Event::Granted {
        name: name.into(),
        token,
        holder: holder.into(),
    };
    let ended = |name: &str, holder: &str| Event::GrantEnded {
        name: name.into(),
        holder: holder.into(),
    };
    // A clean history: two names, each granted in turn with rising tokens.
    let clean = [
        granted("a", 1, "x"),
        granted("b", 1, "y"),
        ended("a", "x"),
        granted("a", 2, "y"),
        ended("b", "y"),
        ended("a", "y"),
        granted("a", 5, "x"),
    ];
    assert!(check_grants(&clean).is_empty());
    // A token granted again (what asynchronous replication does after a failover).
    let again = [granted("a", 1, "x"), ended("a", "x"), granted("a", 1, "y")];
    assert_eq!(check_grants(&again).len(), 1);
    // Two holders at once, the second with a larger token.
    let overlap = [granted("a", 1, "x"), granted("a", 2, "y")];
    assert_eq!(check_grants(&overlap).len(), 1);
    // An end without a grant (a record that misses its grants).
    assert_eq!(check_grants(&[ended("a", "x")]).len(), 1);
    // The clean history, up to where every grant has ended, with its first grant given again:
    // token 1 after token 2.
    assert_eq!(
        check_grants(&with_first_grant_doubled(&clean[..6])).len(),
        1
    );
}

#[test]
fn the_permit_checker_finds_what_it_is_for() {
    let held = |resource: &str, holder: &str| Event::PermitHeld {
        resource: resource.into(),
        holder: holder.into(),
    };
    let released = |resource: &str, holder: &str| Event::PermitReleased {
        resource: resource.into(),
        holder: holder.into(),
    };
    // A clean history of two permits: two holders, a third after one left; another resource.
    let clean = [
        held("r", "x"),
        held("r", "y"),
        held("s", "z"),
        released("r", "x"),
        held("r", "z"),
        released("r", "y"),
        released("r", "z"),
    ];
    assert!(check_permits(&clean, 2).is_empty());
    // The same history with one permit: two holders at once, twice.
    assert_eq!(check_permits(&clean, 1).len(), 2);
    // One holder holding two permits counts twice.
    let twice = [held("r", "x"), held("r", "x"), held("r", "y")];
    assert_eq!(check_permits(&twice, 2).len(), 1);
    // A release without a hold.
    assert_eq!(check_permits(&[released("r", "x")], 1).len(), 1);
}
