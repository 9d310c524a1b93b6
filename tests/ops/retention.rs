//! `diesel-lease purge` and `diesel-lease redrive` against each backend (issue 24.6): the same
//! rows go, in the same batches, as with the library; the dead rows chosen come back reset.

use std::collections::BTreeSet;

use diesel::prelude::*;

use crate::common::TestDb;
use crate::models::schema::tasks;
use crate::models::*;
use crate::ops::cli::{fails, json};

backend_suite! {
    fixtures: crate::claim::retention;
    tests: [the_cli_purges_and_redrives_like_the_library];

    pub(crate) fn the_cli_purges_and_redrives_like_the_library(db: &TestDb<B>) {
        fixtures::table(db);
        let mut conn = db.conn();
        let (keep, _, _) = fixtures::seed(&mut conn);
        let purge = [
            "purge", "--table", "tasks", "--state-column", "status", "--done", "done",
            "--failed", "dead", "--age-column", "claimed_at", "--older-than", "1d", "--batch", "3",
        ];
        // Without --yes and without a terminal it refuses, and nothing changes.
        let err = fails(db, &purge);
        assert!(err.contains("refusing to delete them"), "{err}");
        assert_eq!(fixtures::ids(&mut conn).len(), keep.len() + 12);
        let mut args = purge.to_vec();
        args.push("--yes");
        let out = json(db, &args);
        assert_eq!((out["deleted"].as_u64(), out["batches"].as_u64(), out["largest_batch"].as_u64()), (Some(12), Some(5), Some(3)));
        assert_eq!(fixtures::ids(&mut conn), keep);

        // Two more dead rows: with the newer one kept above, three; redrive two of them.
        for _ in 0..2 {
            fixtures::insert(&mut conn, "dead", Some(60), "x");
        }
        let out = json(db, &[
            "redrive", "--table", "tasks", "--state-column", "status", "--ready", "new",
            "--failed", "dead", "--attempts-column", "attempts", "--owner-column", "owner",
            "--error-column", "last_error", "--available-at-column", "run_at", "--limit", "2", "--yes",
        ]);
        assert_eq!(out["redriven"].as_u64(), Some(2));
        let rows: Vec<Task> = tasks::table.select(Task::as_select()).load(&mut conn).unwrap();
        let dead: Vec<&Task> = rows.iter().filter(|t| t.status == "dead").collect();
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].attempts, dead[0].last_error.as_deref()), (5, Some("boom")));
        let reset: BTreeSet<i64> = rows
            .iter()
            .filter(|t| t.attempts == 0 && t.owner.is_none() && t.last_error.is_none())
            .map(|t| t.id)
            .collect();
        assert_eq!(reset.len(), 2, "exactly the two redriven rows were reset");
        assert!(rows.iter().filter(|t| reset.contains(&t.id)).all(|t| t.status == "new"));
        let err = fails(db, &["redrive", "--table", "tasks", "--state-column", "nope", "--ready", "new", "--failed", "dead", "--yes"]);
        assert!(err.contains("has no column `nope`"), "{err}");
    }
}
