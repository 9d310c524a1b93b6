//! A multi-primary cluster: MariaDB Galera, three nodes, workers connected to different nodes.
//!
//! Galera replicates writes, not row locks: a `SELECT … FOR UPDATE` on one node does not block
//! the same row on another. Two transactions that *write* the same row on two nodes conflict at
//! commit (certification), and the one that loses fails with a deadlock error; a local
//! transaction holding a row that a replicated write changes is aborted the same way.
//!
//! What these tests show, on a three-node cluster that `scripts/test.sh` starts
//! (`DIESEL_LEASE_TEST_GALERA`: the nodes' admin URLs, comma-separated):
//! - a claim farm with workers on all three nodes hands each row to one worker (a history of
//!   every hand-out and completion, judged by `common::history`: each row once per claim epoch,
//!   always marked by the claim that returned it, completed by its current holder), completes
//!   every row exactly once, and no worker hangs (a worker stuck in a call fails the test at its deadline instead of hanging
//!   the suite);
//! - lease grants from all three nodes: fencing tokens strictly increasing in grant order, never
//!   two holders at once;
//! - a semaphore of 2 permits (and a mutex) whose clients are on one node of the three: every
//!   permit held at once, then never more holders than permits, and no deadlock reaches a
//!   caller. With its clients on all three nodes it is not safe (more holders than permits seen
//!   under load): those two tests are `#[ignore]`d reproductions;
//! - `kill -9` of one node in the middle of a claim farm: the workers of the dead node move to
//!   the others (one pool per node, the next node on a lost connection), the rows claimed on
//!   the dead node are rescued after their claim timeout (a new epoch), nothing is lost and
//!   nothing is handed out twice in one epoch. The killed node is restarted afterwards (`restart.sh` in its directory).
//!
//! The farm is small in CI; `DIESEL_LEASE_TEST_GALERA_ROWS=5000 bash scripts/test.sh --
//! faults::galera` runs the large one.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::MysqlConnection;
use diesel_lease::lease::{Lease, LeaseOptions};
use diesel_lease::prelude::*;
use diesel_lease::semaphore::Semaphore;

use crate::common::history::{Event, History};

mod schema {
    diesel::table! {
        galera_jobs (id) {
            id -> BigInt,
            status -> Text,
            owner -> Nullable<Text>,
            claimed_at -> Nullable<Timestamp>,
            attempts -> Integer,
        }
    }
}
use schema::galera_jobs;

/// A job whose claim is rescued 2 s after its holder went silent (here: died with its node).
#[derive(Debug, Queryable, Selectable, Claimable)]
#[diesel(table_name = galera_jobs)]
#[claimable(state = status, ready = "new", claimed = "running", done = "done",
            owner = owner, claimed_at = claimed_at, attempts = attempts, timeout_ms = 2000)]
#[allow(dead_code)] // the columns the claim reads back; the test records what a worker was given
struct GaleraJob {
    id: i64,
    status: String,
    owner: Option<String>,
    claimed_at: Option<NaiveDateTime>,
    attempts: i32,
}

type MyPool = Pool<ConnectionManager<MysqlConnection>>;

/// Tests share one cluster: the one that kills a node runs alone (write), the others together
/// (read).
static CLUSTER: RwLock<()> = RwLock::new(());

/// A database of its own on the cluster, reached through each node.
struct Cluster {
    admin: Vec<String>,
    /// The test database's URL on each node.
    urls: Vec<String>,
    name: String,
}

impl Cluster {
    /// A fresh database on the cluster, or `None` (SKIPPED) when `DIESEL_LEASE_TEST_GALERA` is
    /// not set; a failure when `galera` is required.
    fn create(test: &str) -> Option<Cluster> {
        let Some(list) = std::env::var("DIESEL_LEASE_TEST_GALERA")
            .ok()
            .filter(|l| !l.is_empty())
        else {
            let required = std::env::var("DIESEL_LEASE_TEST_REQUIRE").unwrap_or_default();
            assert!(
                !required.split(',').any(|r| r.trim() == "galera"),
                "galera is required (DIESEL_LEASE_TEST_REQUIRE) but DIESEL_LEASE_TEST_GALERA is not set; run the suite through scripts/test.sh"
            );
            eprintln!(
                "SKIPPED {test}: DIESEL_LEASE_TEST_GALERA is not set (scripts/test.sh starts a Galera cluster when galera-4 is installed)"
            );
            return None;
        };
        let admin: Vec<String> = list.split(',').map(str::to_owned).collect();
        assert_eq!(admin.len(), 3, "three nodes: {list}");
        // A database name has at most 64 characters: the process id first, so that cutting
        // the name keeps it.
        let name = format!("dl_g{}_{test}", std::process::id()).to_lowercase();
        let name: String = name.chars().take(64).collect();
        let mut conn = MysqlConnection::establish(&admin[0]).expect("connect to node 1");
        conn.batch_execute(&format!("CREATE DATABASE `{name}`"))
            .expect("create the test database");
        let urls = admin
            .iter()
            .map(|a| format!("{}/{name}", a.rsplit_once('/').expect("URL ends in /db").0))
            .collect();
        Some(Cluster { admin, urls, name })
    }

    /// Runs the migrations on node 1 and waits until every node has applied them (a causal
    /// read, `wsrep_sync_wait`): with Galera's default (`wsrep_sync_wait = 0`) a node may answer
    /// a read before it has applied what another node committed just before.
    fn migrate(&self) {
        diesel_lease::run_migrations(&mut self.conn(0)).unwrap();
        self.sync();
    }

    /// Waits until every node has applied what was committed anywhere before.
    fn sync(&self) {
        for n in 0..self.urls.len() {
            let mut conn = self.conn(n);
            conn.batch_execute("SET SESSION wsrep_sync_wait = 1")
                .expect("wsrep_sync_wait");
            diesel::sql_query("SELECT COUNT(*) FROM information_schema.TABLES")
                .execute(&mut conn)
                .expect("causal read");
        }
    }

    /// A pool on node `n` (0-based) whose checkouts give up after 2 s.
    fn pool(&self, n: usize, size: u32) -> MyPool {
        Pool::builder()
            .max_size(size)
            .min_idle(Some(0))
            .connection_timeout(Duration::from_secs(2))
            .build_unchecked(ConnectionManager::new(&self.urls[n]))
    }

    fn conn(&self, n: usize) -> MysqlConnection {
        MysqlConnection::establish(&self.urls[n]).expect("connect")
    }

    /// A string variable of node `n`.
    fn variable(&self, n: usize, name: &str) -> String {
        #[derive(QueryableByName)]
        struct Value {
            #[diesel(sql_type = diesel::sql_types::Text)]
            #[diesel(column_name = Value)]
            value: String,
        }
        let mut conn = MysqlConnection::establish(&self.admin[n]).expect("connect");
        diesel::sql_query("SHOW VARIABLES WHERE Variable_name = ?")
            .bind::<diesel::sql_types::Text, _>(name)
            .get_result::<Value>(&mut conn)
            .expect("SHOW VARIABLES")
            .value
    }

    /// `kill -9` of node `n`'s server; returns the directory holding its `restart.sh`.
    fn kill(&self, n: usize) -> std::path::PathBuf {
        let pid_file = self.variable(n, "pid_file");
        let datadir = self.variable(n, "datadir");
        let pid = std::fs::read_to_string(&pid_file).expect("pid file");
        let status = Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -9 {pid}");
        std::path::Path::new(datadir.trim_end_matches('/'))
            .parent()
            .expect("node dir")
            .to_owned()
    }

    /// Starts a killed node again and waits (up to 180 s) until it is Synced, for the tests
    /// that come after.
    fn restart(&self, n: usize, dir: &std::path::Path) {
        let status = Command::new("bash")
            .arg(dir.join("restart.sh"))
            .status()
            .expect("restart.sh");
        assert!(status.success(), "restart.sh of node {n}");
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            if let Ok(mut c) = MysqlConnection::establish(&self.admin[n]) {
                #[derive(QueryableByName)]
                struct Status {
                    #[diesel(sql_type = diesel::sql_types::Text)]
                    #[diesel(column_name = Value)]
                    value: String,
                }
                let state = diesel::sql_query("SHOW STATUS LIKE 'wsrep_local_state_comment'")
                    .get_result::<Status>(&mut c);
                if state.is_ok_and(|s| s.value == "Synced") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("node {n} did not come back Synced within 180 s (its log: {dir:?}/server.log)");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for admin in &self.admin {
            if let Ok(mut c) = MysqlConnection::establish(admin) {
                let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS `{}`", self.name));
                return;
            }
        }
    }
}

/// How many rows the claim farm has: `DIESEL_LEASE_TEST_GALERA_ROWS`, else 300.
fn farm_rows() -> i64 {
    std::env::var("DIESEL_LEASE_TEST_GALERA_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

fn seed(cluster: &Cluster, rows: i64) {
    let mut conn = cluster.conn(0);
    conn.batch_execute(
        "CREATE TABLE galera_jobs (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL,
             owner VARCHAR(255) NULL, claimed_at DATETIME(6) NULL, attempts INT NOT NULL DEFAULT 0,
             INDEX galera_jobs_status (status, id))",
    )
    .unwrap();
    let ids: Vec<i64> = (1..=rows).collect();
    for chunk in ids.chunks(1000) {
        let values: Vec<_> = chunk
            .iter()
            .map(|&id| (galera_jobs::id.eq(id), galera_jobs::status.eq("new")))
            .collect();
        diesel::insert_into(galera_jobs::table)
            .values(&values)
            .execute(&mut conn)
            .unwrap();
    }
    drop(conn);
    cluster.migrate();
}

fn done_rows(pool: &MyPool) -> Option<i64> {
    let mut conn = pool.get().ok()?;
    galera_jobs::table
        .filter(galera_jobs::status.eq("done"))
        .count()
        .get_result(&mut conn)
        .ok()
}

/// What the workers of a farm report.
#[derive(Default)]
struct Farm {
    /// How many times `complete` said `true`, per row.
    completed: Mutex<BTreeMap<i64, u32>>,
    /// Every hand-out and completion, as the workers saw them.
    history: History,
    errors: Mutex<Vec<String>>,
    stop: AtomicBool,
    /// Workers that returned (the others are stuck in a call).
    finished: AtomicUsize,
}

/// A claim worker on the nodes `order` (its own node first), one pool per node: it works on
/// its current node and moves to the next one after an error that says the node is gone
/// (a checkout timeout or a lost connection).
fn claim_worker(farm: Arc<Farm>, pools: Vec<MyPool>) {
    let mut node = 0;
    while !farm.stop.load(Ordering::SeqCst) {
        let step = pools[node]
            .get()
            .map_err(|e| (true, e.to_string()))
            .and_then(|mut conn| {
                let lost = |e: diesel_lease::Error| {
                    (
                        matches!(e, diesel_lease::Error::ConnectionLost(_)),
                        e.to_string(),
                    )
                };
                let Some(job) = GaleraJob::claim().row(&mut conn).map_err(lost)? else {
                    return Ok(false);
                };
                let holder = job.owner.clone().unwrap_or_default();
                farm.history.record(Event::HandedOut {
                    row: job.id,
                    holder: holder.clone(),
                    state: job.status.clone(),
                    epoch: job.attempts.into(),
                });
                let acknowledged = job.complete(&mut conn).map_err(lost)?;
                farm.history.record(Event::Completed {
                    row: job.id,
                    holder,
                    acknowledged,
                });
                if acknowledged {
                    *farm.completed.lock().unwrap().entry(job.id).or_default() += 1;
                }
                Ok(true)
            });
        match step {
            Ok(true) => {}
            Ok(false) => std::thread::sleep(Duration::from_millis(50)),
            Err((gone, e)) => {
                farm.errors.lock().unwrap().push(e);
                if gone {
                    node = (node + 1) % pools.len();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    farm.finished.fetch_add(1, Ordering::SeqCst);
}

/// Runs a claim farm of `workers` threads (worker `w` starts on node `w % 3`); `during` is
/// called with the farm's progress (rows done) until it returns `true` for "all done". Returns
/// the farm once every worker returned; panics, naming the stuck ones, if some did not return
/// within 60 s of the stop (their threads are left behind: a hang must fail, not hang, the
/// suite).
fn run_farm(
    cluster: &Cluster,
    workers: usize,
    deadline: Duration,
    mut during: impl FnMut(usize) -> bool,
) -> Farm {
    let farm = Arc::new(Farm::default());
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let pools: Vec<MyPool> = (0..3).map(|k| cluster.pool((w + k) % 3, 2)).collect();
            let farm = Arc::clone(&farm);
            std::thread::spawn(move || claim_worker(farm, pools))
        })
        .collect();
    let start = Instant::now();
    while !during(farm.completed.lock().unwrap().len()) && start.elapsed() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    farm.stop.store(true, Ordering::SeqCst);
    let stop = Instant::now();
    while farm.finished.load(Ordering::SeqCst) < workers && stop.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stuck = workers - farm.finished.load(Ordering::SeqCst);
    assert_eq!(
        stuck, 0,
        "{stuck} of {workers} workers were stuck in a call 60 s after the stop"
    );
    for h in handles {
        h.join().unwrap();
    }
    Arc::try_unwrap(farm).unwrap_or_else(|_| unreachable!("every worker returned"))
}

#[test]
fn a_claim_farm_on_three_nodes_does_each_row_once() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::create("a_claim_farm_on_three_nodes_does_each_row_once") else {
        return;
    };
    let rows = farm_rows();
    seed(&cluster, rows);
    let pool = cluster.pool(0, 1);
    let farm = run_farm(&cluster, 6, Duration::from_secs(600), |_| {
        done_rows(&pool) == Some(rows)
    });
    farm.history.check_claims("running");
    assert!(
        farm.history.hand_outs() as i64 >= rows,
        "every row handed out"
    );
    let completed = farm.completed.into_inner().unwrap();
    let twice: Vec<_> = completed.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "completed more than once: {twice:?}");
    assert_eq!(done_rows(&pool), Some(rows), "every row done");
    assert_eq!(
        completed.len() as i64,
        rows,
        "every completion acknowledged (errors: {:?})",
        farm.errors.into_inner().unwrap()
    );
}

/// Every node says it is one of a Galera cluster of three, and what holds across nodes; strict
/// grants (which refuse asynchronous PostgreSQL standbys only) go ahead.
#[test]
fn each_node_is_seen_as_a_galera_cluster_of_three() {
    use diesel_lease::backend::{check_replication, Replication};
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::create("each_node_is_seen_as_a_galera_cluster_of_three") else {
        return;
    };
    seed(&cluster, 10);
    // `diesel-lease doctor` says it beside its verdict on the claim.
    let out = Command::new(crate::ops::cli::cli_path())
        .env("DATABASE_URL", &cluster.urls[1])
        .args([
            "doctor",
            "--table",
            "galera_jobs",
            "--state-column",
            "status",
        ])
        .args([
            "--ready",
            "new",
            "--claimed",
            "running",
            "--owner-column",
            "owner",
        ])
        .output()
        .expect("run diesel-lease doctor");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("replication: MariaDB Galera cluster of 3 node(s): ")
            && said.contains("hold across nodes"),
        "doctor said: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in 0..3 {
        let mut conn = cluster.conn(n);
        let replication = check_replication(&mut conn).unwrap();
        assert_eq!(replication, Replication::Galera { nodes: 3 }, "node {n}");
        let warning = replication.warning().expect("Galera is said");
        assert!(
            warning.contains("hold across nodes") && warning.contains("semaphores"),
            "{warning}"
        );
        assert_eq!(replication.fencing_refusal(), None);
        let strict =
            LeaseOptions::new(Duration::from_secs(30)).require_synchronous_replication(true);
        let mut lease = Lease::try_acquire(&mut conn, "strict", &strict)
            .unwrap()
            .expect("free");
        assert!(lease.release(&mut conn).unwrap().was_held());
    }
}

/// Lease grants from three nodes: tokens strictly increasing in grant order, and never two
/// threads believing they hold the lease at once.
#[test]
fn lease_grants_on_three_nodes_are_exclusive_and_ordered() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::create("lease_grants_on_three_nodes_are_exclusive_and_ordered")
    else {
        return;
    };
    cluster.migrate();
    const THREADS: usize = 6;
    const GRANTS: usize = 40; // per thread
    let granted = Mutex::new(Vec::<i64>::new());
    let holders = Mutex::new((0u32, 0u32)); // (now, most ever)
    let errors = Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (cluster, granted, holders, errors) = (&cluster, &granted, &holders, &errors);
            s.spawn(move || {
                let mut conn = cluster.conn(t % 3);
                let options = LeaseOptions::new(Duration::from_secs(30));
                let mut got = 0;
                while got < GRANTS {
                    let mut lease = match Lease::acquire(
                        &mut conn,
                        "galera",
                        &options,
                        Duration::from_secs(120),
                    ) {
                        Ok(lease) => lease,
                        Err(e) => {
                            errors.lock().unwrap().push(e.to_string());
                            continue;
                        }
                    };
                    {
                        let mut h = holders.lock().unwrap();
                        h.0 += 1;
                        h.1 = h.1.max(h.0);
                        granted.lock().unwrap().push(lease.token().get());
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    holders.lock().unwrap().0 -= 1;
                    let token = lease.token().get();
                    if lease.release(&mut conn).expect("release").was_lost() {
                        let now = Lease::inspect(&mut conn, "galera");
                        panic!("grant {token} was no longer held at its release: {now:?}, granted so far {:?}", granted.lock().unwrap());
                    }
                    got += 1;
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    assert!(errors.is_empty(), "errors reached callers: {errors:?}");
    let (_, most) = holders.into_inner().unwrap();
    assert_eq!(most, 1, "{most} holders of one lease at once");
    let granted = granted.into_inner().unwrap();
    assert_eq!(granted.len(), THREADS * GRANTS);
    let out_of_order: Vec<_> = granted.windows(2).filter(|w| w[0] >= w[1]).collect();
    assert!(
        out_of_order.is_empty(),
        "tokens not strictly increasing in grant order: {out_of_order:?}"
    );
}

/// Threads spread over `nodes` of the cluster's nodes take turns on a semaphore of `permits`:
/// first every permit is held at once, then never more holders than permits (counted inside the
/// critical section), and no error (a deadlock in particular) reaches `acquire` or `release`.
fn semaphore_on_the_cluster(test: &str, permits: u32, nodes: usize) {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::create(test) else {
        return;
    };
    cluster.migrate();
    const THREADS: usize = 6;
    const ROUNDS: usize = 15;
    let sem = Semaphore::new("galera", permits).with_ttl(Duration::from_secs(30));
    // Every permit at once, each from another node: the semaphore does admit `permits` holders
    // together across the cluster (decided here, not left to how the threads below happen to
    // be scheduled), and the database shows them all granted.
    let pools: Vec<MyPool> = (0..permits as usize)
        .map(|n| cluster.pool(n % nodes, 1))
        .collect();
    let all: Vec<_> = pools
        .iter()
        .map(|pool| {
            sem.acquire(pool, Duration::from_secs(60))
                .expect("a free permit is granted on any node")
        })
        .collect();
    cluster.sync();
    let granted = sem
        .queue(&mut cluster.conn(0))
        .expect("the queue")
        .iter()
        .filter(|row| row.granted)
        .count();
    assert_eq!(
        granted, permits as usize,
        "granted rows while all permits are held"
    );
    for permit in all {
        let _ = permit.release().expect("release");
    }
    let holders = Mutex::new((0u32, 0u32));
    let errors = Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (cluster, sem, holders, errors) = (&cluster, &sem, &holders, &errors);
            s.spawn(move || {
                let pool = cluster.pool(t % nodes, 3);
                for _ in 0..ROUNDS {
                    let permit = match sem.acquire(&pool, Duration::from_secs(120)) {
                        Ok(p) => p,
                        Err(e) => {
                            errors.lock().unwrap().push(e.to_string());
                            continue;
                        }
                    };
                    {
                        let mut h = holders.lock().unwrap();
                        h.0 += 1;
                        h.1 = h.1.max(h.0);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    holders.lock().unwrap().0 -= 1;
                    if let Err(e) = permit.release() {
                        errors.lock().unwrap().push(format!("release: {e}"));
                    }
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    assert!(errors.is_empty(), "errors reached callers: {errors:?}");
    let (_, most) = holders.into_inner().unwrap();
    assert!(most <= permits, "{most} holders of {permits} permits");
    assert!(most >= 1, "nobody ever held a permit");
}

/// The configuration README's "MariaDB Galera" section asks for: every client of a semaphore
/// on one node (the other nodes replicate, and run other work).
#[test]
fn a_semaphore_of_two_with_its_clients_on_one_node_never_over_grants() {
    semaphore_on_the_cluster(
        "a_semaphore_of_two_with_its_clients_on_one_node_never_over_grants",
        2,
        1,
    );
}

#[test]
fn a_mutex_with_its_clients_on_one_node_has_one_holder() {
    semaphore_on_the_cluster("a_mutex_with_its_clients_on_one_node_has_one_holder", 1, 1);
}

/// Clients of one semaphore on all three nodes: not a guarantee, a reproduction. Looped under
/// load (two busy CPU loops on two cores), it saw 3 holders of a semaphore of 2, and 2 holders
/// of a mutex, a few times in a hundred runs, although every granting transaction writes the
/// resource's row and Galera should fail one of two such transactions at certification; it
/// also saw releases lose certification 16 times in a row. Run it with
/// `bash scripts/test.sh -- --ignored faults::galera::a_semaphore_of_two_on_three_nodes`.
#[test]
#[ignore = "Galera let two grants decided on different nodes both commit under load: a reproduction, not a guarantee (README, MariaDB Galera)"]
fn a_semaphore_of_two_on_three_nodes_never_over_grants() {
    semaphore_on_the_cluster("a_semaphore_of_two_on_three_nodes_never_over_grants", 2, 3);
}

/// The mutex of the reproduction above.
#[test]
#[ignore = "Galera let two grants decided on different nodes both commit under load: a reproduction, not a guarantee (README, MariaDB Galera)"]
fn a_mutex_on_three_nodes_has_one_holder() {
    semaphore_on_the_cluster("a_mutex_on_three_nodes_has_one_holder", 1, 3);
}

/// `kill -9` of node 3 once a quarter of the rows are done: workers move to the other nodes,
/// rows claimed on the dead node are rescued, every row ends done, none is completed twice.
#[test]
fn killing_a_node_mid_farm_loses_nothing_and_doubles_nothing() {
    let _alone = CLUSTER.write().unwrap_or_else(|e| e.into_inner());
    let Some(cluster) = Cluster::create("killing_a_node_mid_farm") else {
        return;
    };
    let rows = farm_rows();
    seed(&cluster, rows);
    const WORKERS: usize = 6;
    let pool = cluster.pool(0, 1);
    let mut killed = None;
    let farm = run_farm(&cluster, WORKERS, Duration::from_secs(600), |completed| {
        if killed.is_none() && completed as i64 >= rows / 4 {
            killed = Some(cluster.kill(2));
        }
        killed.is_some() && done_rows(&pool) == Some(rows)
    });
    let dir = killed.expect("the node was killed");
    farm.history.check_claims("running");
    let completed = farm.completed.into_inner().unwrap();
    let twice: Vec<_> = completed.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "completed more than once: {twice:?}");
    assert_eq!(
        done_rows(&pool),
        Some(rows),
        "every row done on the survivors"
    );
    // A completion whose commit the kill interrupted errs for its caller although the other
    // nodes may have it: at most one such row per worker of the dead node.
    assert!(
        completed.len() as i64 >= rows - WORKERS as i64 / 3,
        "only {} of {rows} completions acknowledged",
        completed.len()
    );
    assert!(
        !farm.errors.into_inner().unwrap().is_empty(),
        "no worker saw the node die: the kill came after the work"
    );
    cluster.restart(2, &dir);
}
