//! Output: aligned tables for people, JSON for scripts, and the question asked before a change.

use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};

use serde_json::Value;

/// What a command ends with: done, or the message to print.
pub(crate) type Outcome = Result<(), String>;

/// Prints `value` as JSON, or the text `human` makes.
pub(crate) fn say(json: bool, value: Value, human: impl FnOnce() -> String) -> Outcome {
    let mut out = std::io::stdout().lock();
    let text = if json {
        format!("{value:#}\n")
    } else {
        human()
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the output: {e}"))
}

/// Asks on the terminal unless `--yes`, after showing `state`; refuses without a terminal.
pub(crate) fn confirm(state: &str, what: &str, yes: bool) -> Outcome {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "refusing to {what} without confirmation: stdin is not a terminal (pass --yes)"
        ));
    }
    eprintln!("{state}");
    eprint!("{what}? [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    match answer.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => Err("aborted: nothing was changed".into()),
    }
}

/// A table: a header and rows of cells, printed with aligned columns.
#[derive(Debug)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut text = String::new();
            for (i, cell) in cells.enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                let _ = write!(text, "{cell}{:pad$}  ", "");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&mut self.header.iter().map(String::as_str));
        for row in &self.rows {
            line(&mut row.iter().map(String::as_str));
        }
        out
    }
}

/// A span of µs for people: `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub(crate) fn duration(micros: i64) -> String {
    let (sign, us) = if micros < 0 {
        ("-", micros.unsigned_abs())
    } else {
        ("", micros.unsigned_abs())
    };
    let ms = us / 1000;
    let s = ms / 1000;
    let text = if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{}.{}s", s, (ms % 1000) / 100)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    };
    format!("{sign}{text}")
}

/// When `at` is, seen from `now` (both µs): `in 25.0s` or `3.1s ago`; `never` for the largest
/// `i64` (a control-table row inserted without the library keeps that default expiry).
pub(crate) fn relative(at: i64, now: i64) -> String {
    if at == i64::MAX {
        "never".to_owned()
    } else if at >= now {
        format!("in {}", duration(at - now))
    } else {
        format!("{} ago", duration(now - at))
    }
}

/// A lease's STATE in the listing, the page and a forced release's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// A holder has it.
    Held,
    /// Its holder released it, but its at-least-for keeps it from other nodes until it expires.
    Kept,
    /// Any node can take it.
    Free,
}

impl LeaseState {
    pub(crate) fn of(lease: &diesel_lease::lease::LeaseRecord) -> Self {
        match (lease.is_held(), lease.is_released()) {
            (true, false) => LeaseState::Held,
            (true, true) => LeaseState::Kept,
            (false, _) => LeaseState::Free,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LeaseState::Held => "held",
            LeaseState::Kept => "kept",
            LeaseState::Free => "free",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(relative(i64::MAX, 1_000_000), "never");
        assert_eq!(relative(3_100_000, 0), "in 3.1s");
        assert_eq!(duration(850_000), "850ms");
        assert_eq!(duration(12_345_000), "12.3s");
        assert_eq!(duration(245_000_000), "4m05s");
        assert_eq!(duration(7_380_000_000), "2h03m");
        assert_eq!(duration(-2_000_000), "-2.0s");
        assert_eq!(relative(10_000_000, 0), "in 10.0s");
        assert_eq!(relative(0, 3_100_000), "3.1s ago");
    }

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["name", "token"]);
        t.row(vec!["nightly-report".into(), "7".into()]);
        t.row(vec!["a".into(), "12".into()]);
        assert_eq!(
            t.render(),
            "name            token\nnightly-report  7\na               12\n"
        );
    }
}
