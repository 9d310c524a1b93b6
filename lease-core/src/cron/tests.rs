use super::*;
use chrono::TimeZone;
use proptest::prelude::*;

const BERLIN: Tz = Tz::Europe__Berlin;
const NEW_YORK: Tz = Tz::America__New_York;

/// µs of a wall-clock time in `tz` (its first pass when the time happens twice).
fn at(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    tz.with_ymd_and_hms(y, mo, d, h, mi, 0)
        .earliest()
        .unwrap()
        .timestamp_micros()
}

/// µs of a UTC time.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    at(Tz::UTC, y, mo, d, h, mi)
}

fn slots(cron: &Cron, from: i64, n: usize) -> Vec<i64> {
    let mut t = from;
    (0..n)
        .map(|_| {
            t = cron.next_after(t).unwrap();
            t
        })
        .collect()
}

const MINUTE: i64 = 60_000_000;
const SECOND: i64 = 1_000_000;

#[test]
fn spring_forward_runs_a_fixed_time_in_the_gap_once_right_after_it() {
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    let daily = Cron::parse("30 2 * * *").unwrap().in_tz(BERLIN);
    let got = slots(&daily, at(BERLIN, 2026, 3, 28, 0, 0), 3);
    assert_eq!(
        got,
        [
            utc(2026, 3, 28, 1, 30),
            utc(2026, 3, 29, 1, 0),
            utc(2026, 3, 30, 0, 30)
        ]
    );
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT.
    let daily = Cron::parse("30 2 * * *").unwrap().in_tz(NEW_YORK);
    let got = slots(&daily, at(NEW_YORK, 2026, 3, 7, 0, 0), 3);
    assert_eq!(
        got,
        [
            utc(2026, 3, 7, 7, 30),
            utc(2026, 3, 8, 7, 0),
            utc(2026, 3, 9, 6, 30)
        ]
    );
}

#[test]
fn spring_forward_has_no_step_slots_inside_the_gap() {
    let half_hourly = Cron::parse("*/30 * * * *").unwrap().in_tz(BERLIN);
    let got = slots(&half_hourly, at(BERLIN, 2026, 3, 29, 1, 0), 3);
    // 01:30 CET, then 03:00 CEST (one real half hour later), 03:30 CEST.
    assert_eq!(
        got,
        [
            utc(2026, 3, 29, 0, 30),
            utc(2026, 3, 29, 1, 0),
            utc(2026, 3, 29, 1, 30)
        ]
    );
}

#[test]
fn fall_back_runs_a_fixed_time_once_in_the_first_pass() {
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    let daily = Cron::parse("30 2 * * *").unwrap().in_tz(BERLIN);
    let got = slots(&daily, at(BERLIN, 2026, 10, 24, 12, 0), 2);
    assert_eq!(got, [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]);
    // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    let daily = Cron::parse("30 1 * * *").unwrap().in_tz(NEW_YORK);
    let got = slots(&daily, at(NEW_YORK, 2026, 10, 31, 12, 0), 2);
    assert_eq!(got, [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]);
}

#[test]
fn fall_back_runs_step_slots_in_both_passes() {
    let half_hourly = Cron::parse("*/30 * * * *").unwrap().in_tz(BERLIN);
    let got = slots(&half_hourly, at(BERLIN, 2026, 10, 25, 1, 45), 5);
    // 02:00, 02:30 CEST, then 02:00, 02:30 CET, 03:00 CET: half an hour apart, all distinct.
    let first = utc(2026, 10, 25, 0, 0);
    assert_eq!(
        got,
        (0..5).map(|i| first + i * 30 * MINUTE).collect::<Vec<_>>()
    );
}

#[test]
fn bad_expressions_are_typed_errors() {
    for bad in [
        "",
        "0 3 * *",
        "61 * * * *",
        "* * * * * * * *",
        "0 3 * * FOO",
        "every day",
    ] {
        let err = Cron::parse(bad).unwrap_err();
        assert!(
            matches!(err, InvalidInput::BadCron { ref expr, .. } if expr == bad),
            "{bad:?}: {err:?}"
        );
    }
    assert!(Cron::parse("0 3 * * *")
        .unwrap()
        .grace(Duration::ZERO)
        .check()
        .is_err());
    let never = Cron::parse("0 0 30 2 *");
    if let Ok(never) = never {
        assert!(matches!(
            never.next_after(0),
            Err(InvalidInput::BadCron { .. })
        ));
    }
}

#[test]
fn plan_skips_slots_missed_beyond_grace_and_runs_on_time_ones() {
    let hourly = Cron::parse("0 * * * *").unwrap();
    let stored = utc(2026, 1, 1, 0, 0);
    // On time: five seconds after 03:00, with next_run from midnight: runs 03:00 only.
    let now = utc(2026, 1, 1, 3, 0) + 5 * SECOND;
    // It must start within the grace (one minute), which ends before the next slot.
    let run = Plan::Run {
        slot: utc(2026, 1, 1, 3, 0),
        next: utc(2026, 1, 1, 4, 0),
        until: utc(2026, 1, 1, 3, 1),
    };
    assert_eq!(hourly.plan(Some(stored), now).unwrap(), run);
    // Late (03:20): skipped; the next run is 04:00.
    let now = utc(2026, 1, 1, 3, 20);
    let wait = Plan::Wait {
        next: utc(2026, 1, 1, 4, 0),
    };
    assert_eq!(hourly.plan(Some(stored), now).unwrap(), wait);
    // Run once late instead: 03:00 now, then back on schedule at 04:00.
    let once = hourly.clone().on_missed(Missed::RunOnce);
    // A late run may start until the next slot comes.
    let late = Plan::Run {
        slot: utc(2026, 1, 1, 3, 0),
        next: utc(2026, 1, 1, 4, 0),
        until: utc(2026, 1, 1, 4, 0),
    };
    assert_eq!(once.plan(Some(stored), now).unwrap(), late);
    assert_eq!(once.plan(Some(utc(2026, 1, 1, 4, 0)), now).unwrap(), wait);
    // Never ran: a late slot is not owed under either policy.
    assert_eq!(once.plan(None, now).unwrap(), wait);
}

fn zone() -> impl Strategy<Value = Tz> {
    prop::sample::select(vec![
        Tz::UTC,
        BERLIN,
        NEW_YORK,
        Tz::Australia__Lord_Howe,
        Tz::Asia__Kolkata,
    ])
}

fn expression() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "30 2 * * *",
        "0 1 * * *",
        "*/30 * * * *",
        "15 * * * *",
        "0 */7 * * *",
        "*/20 2 * * *",
        "0 30 1,2 * * *",
        "0 0 * * SUN",
        "0 2 L * *",
    ])
}

/// Instants in 2024–2030, where every zone above changes its clocks several times.
fn instant() -> impl Strategy<Value = i64> {
    utc(2024, 1, 1, 0, 0)..utc(2030, 12, 31, 0, 0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Around DST changes or not, slots strictly increase (so none is produced twice), and
    /// `latest_at_or_before` and `next_after` agree on where one slot ends and the next begins.
    #[test]
    fn slots_strictly_increase_and_bracket_every_instant(tz in zone(), expr in expression(), start in instant()) {
        let cron = Cron::parse(expr).unwrap().in_tz(tz);
        let mut previous = start;
        for _ in 0..50 {
            let next = cron.next_after(previous).unwrap();
            prop_assert!(next > previous, "{expr} in {tz}: {next} after {previous}");
            prop_assert_eq!(next % SECOND, 0);
            let latest = cron.latest_at_or_before(next).unwrap();
            prop_assert_eq!(latest, Some(next));
            previous = next;
        }
        let latest = cron.latest_at_or_before(start).unwrap().unwrap();
        prop_assert!(latest <= start);
        prop_assert_eq!(cron.next_after(latest).unwrap(), cron.next_after(start).unwrap());
    }

    /// A farm polling at random moments: every run's slot is new and later than the one before;
    /// while some node polls within the grace of every slot, no slot is skipped; a gap longer
    /// than the grace costs only the slots inside it, and with `RunOnce` exactly one late run.
    #[test]
    fn polls_run_each_slot_at_most_once(
        tz in zone(),
        expr in expression(),
        start in instant(),
        steps in prop::collection::vec((0..20 * MINUTE, 0..10u8), 1..300),
        run_once in any::<bool>(),
    ) {
        let policy = if run_once { Missed::RunOnce } else { Missed::Skip };
        let cron = Cron::parse(expr).unwrap().in_tz(tz).on_missed(policy);
        let (mut now, mut stored) = (start, None::<i64>);
        let mut runs: Vec<i64> = Vec::new();
        for (i, (step, outage)) in steps.into_iter().enumerate() {
            // Now and then the farm is down for up to ten hours.
            let before = now;
            now += if outage == 0 { step * 30 } else { step };
            // The slots owed: from the stored next run (or, never run, the ones since the last
            // poll; at the first poll, which no poll came before, also the start itself and any
            // slot still within the grace) up to now.
            let mut owed = Vec::new();
            let since = if i == 0 { (before - 1).min(now - MINUTE) } else { before };
            let mut t = stored.map_or(since, |s| s - 1);
            loop {
                let s = cron.next_after(t).unwrap();
                if s > now { break; }
                owed.push(s);
                t = s;
            }
            match cron.plan(stored, now).unwrap() {
                Plan::Run { slot, next, until } => {
                    prop_assert!(slot <= now && next > now);
                    // The bound is after now (the run may start), never past the next slot,
                    // and within the grace unless a late run is allowed.
                    prop_assert!(until > now && until <= next);
                    let late_ok = policy == Missed::RunOnce && stored.is_some();
                    prop_assert!(late_ok || until <= slot + MINUTE);
                    prop_assert_eq!(Some(&slot), owed.last(), "runs the latest owed slot");
                    if let Some(&last) = runs.last() { prop_assert!(slot > last); }
                    let on_time = now - slot < MINUTE;
                    prop_assert!(on_time || (policy == Missed::RunOnce && stored.is_some()));
                    runs.push(slot);
                    stored = Some(next);
                }
                Plan::Wait { next } => {
                    prop_assert!(next > now);
                    // Waiting with a slot owed happens only for a slot late beyond its grace,
                    // under `Skip` (or before the first run).
                    if let Some(&latest) = owed.last() {
                        prop_assert!(policy == Missed::Skip || stored.is_none());
                        prop_assert!(now - latest >= MINUTE, "{expr}: owed {latest} at {now}");
                    }
                }
            }
            // A slot that came since the last poll, within the grace: it is the one just run.
            if let Some(&fresh) = owed.last().filter(|&&s| s > before && now - s < MINUTE) {
                prop_assert_eq!(runs.last(), Some(&fresh));
            }
        }
    }
}
