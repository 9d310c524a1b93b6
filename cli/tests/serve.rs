//! `diesel-lease serve` in a real browser: headless Chromium driven over WebDriver
//! (chromedriver), against PostgreSQL and MySQL/MariaDB (`DIESEL_LEASE_TEST_PG`,
//! `DIESEL_LEASE_TEST_MYSQL`, which `scripts/test.sh` sets) and SQLite. The page shows a lease this test holds with a `LeaseGuard`; pressing its release
//! button with the token releases it and the guard's lost signal fires; without the token the
//! action is refused and the lease stays held. Also: an unreachable database is a page that
//! says so while the server stays up, and a table that is not claimable is named with what it
//! lacks.
//!
//! `scripts/test.sh` installs Debian's `chromium` and `chromium-driver` when they are missing
//! and sets `chromium` in `DIESEL_LEASE_TEST_REQUIRE`; without them (and not required) the
//! browser tests say SKIPPED and return. `DIESEL_LEASE_SERVE_SCREENSHOT=path.png` saves the
//! page as the browser shows it (`docs/serve.png`, which the `operating` guide describes).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel::Connection;
use diesel_lease::__private::Notifications;
use diesel_lease::semaphore::Semaphore;
use diesel_lease::{admin, Held, LeaseConnection, LeaseGuard, LeaseOptions, OwnerId};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789abcdef";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Bounds for things that happen in milliseconds; generous so a loaded machine does not fail.
const PATIENCE: Duration = Duration::from_secs(60);

fn required(what: &str) -> bool {
    std::env::var("DIESEL_LEASE_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|r| r.trim() == what)
}

/// Whether `DIESEL_LEASE_TEST_BACKENDS` (a pass of the test script that runs one backend's
/// tests only) leaves `backend` in; says SKIPPED when not.
fn selected(backend: &str) -> bool {
    let Ok(selected) = std::env::var("DIESEL_LEASE_TEST_BACKENDS") else {
        return true;
    };
    let keep = selected.split(',').any(|s| s.trim() == backend);
    if !keep {
        eprintln!(
            "SKIPPED the browser test on {backend}: not in DIESEL_LEASE_TEST_BACKENDS={selected}"
        );
    }
    keep
}

/// The `diesel-lease serve` process, killed on drop.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `diesel-lease serve` on a free port and waits for its banner.
fn serve(url: &str, args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_diesel-lease"))
        .env("DATABASE_URL", url)
        .env_remove("DIESEL_LEASE_SERVE_TOKEN")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start diesel-lease serve");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read the banner");
    let base = line
        .trim()
        .strip_prefix("diesel-lease serve: listening on ")
        .unwrap_or_else(|| panic!("unexpected banner {line:?}"))
        .trim_end_matches('/')
        .to_string();
    // Keep reading its output so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in out.lines() {});
    Served { child, base }
}

/// `(status, body)` of a request; error statuses are answers too.
fn http(req: ureq::Request, form: Option<&[(&str, &str)]>) -> (u16, String) {
    let result = match form {
        Some(form) => req.send_form(form),
        None => req.call(),
    };
    match result {
        Ok(r) => (r.status(), r.into_string().expect("body")),
        Err(ureq::Error::Status(status, r)) => (status, r.into_string().expect("body")),
        Err(e) => panic!("request failed: {e}"),
    }
}

fn get(url: &str) -> (u16, String) {
    http(ureq::get(url), None)
}

fn post(url: &str, form: &[(&str, &str)]) -> (u16, String) {
    http(ureq::post(url), Some(form))
}

/// A chromedriver process and one headless Chromium session, ended on drop.
struct Browser {
    driver: Child,
    session: String,
    _profile: TempDir,
}

impl Browser {
    /// Starts chromedriver and a session; `None` (after saying SKIPPED) when Chromium is not
    /// installed and not required.
    fn start() -> Option<Browser> {
        if !(Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists()) {
            let why = format!("{CHROMIUM} or {CHROMEDRIVER} is missing (Debian's chromium and chromium-driver; scripts/test.sh installs them)");
            if required("chromium") || std::env::var("CI").as_deref() == Ok("true") {
                panic!("the browser tests must run, but {why}");
            }
            eprintln!("SKIPPED the browser test of `diesel-lease serve`: {why}");
            return None;
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = TempDir::new("chromium-profile");
        let mut browser = Browser {
            driver,
            session: String::new(),
            _profile: profile,
        };
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while ureq::get(&format!("{base}/status")).call().is_err() {
            assert!(started.elapsed() < PATIENCE, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1100,1000",
            &format!("--user-data-dir={}", browser._profile.0.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let created = ureq::post(&format!("{base}/session"))
            .send_json(caps)
            .expect("create a browser session")
            .into_json::<Value>()
            .expect("session JSON");
        browser.session = format!(
            "{base}/session/{}",
            created["value"]["sessionId"]
                .as_str()
                .expect("a session id")
        );
        Some(browser)
    }

    /// A WebDriver command: `POST`s `body` (or `GET`s without one) under the session.
    fn cmd(&self, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        let reply = match body {
            Some(body) => ureq::post(&url).send_json(body),
            None => ureq::get(&url).call(),
        };
        let reply = match reply {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("WebDriver {path}: {e}"),
        };
        let v: Value = reply.into_json().expect("WebDriver JSON");
        assert!(
            v["value"].get("error").is_none(),
            "WebDriver {path} failed: {v}"
        );
        v["value"].clone()
    }

    fn go(&self, url: &str) {
        self.cmd("/url", Some(json!({"url": url})));
    }

    /// The element `css` selects, waiting for it to appear.
    fn find(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            let url = format!("{}/element", self.session);
            if let Ok(r) =
                ureq::post(&url).send_json(json!({"using": "css selector", "value": css}))
            {
                let v: Value = r.into_json().expect("WebDriver JSON");
                if let Some(id) = v["value"]
                    .as_object()
                    .and_then(|o| o.values().next())
                    .and_then(Value::as_str)
                {
                    return id.to_string();
                }
            }
            assert!(started.elapsed() < PATIENCE, "no element `{css}` appeared");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn text(&self, css: &str) -> String {
        let id = self.find(css);
        self.cmd(&format!("/element/{id}/text"), None)
            .as_str()
            .expect("text")
            .to_string()
    }

    fn script(&self, js: &str) -> Value {
        self.cmd("/execute/sync", Some(json!({"script": js, "args": []})))
    }

    fn screenshot(&self, to: &Path) {
        use base64::Engine as _;
        let png = self.cmd("/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64"))
            .expect("valid base64");
        std::fs::write(to, bytes).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = ureq::delete(&self.session).call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "diesel-lease-serve-{what}-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lease `name` as the database holds it: (held, token).
fn lease_state<C>(pool: &Pool<ConnectionManager<C>>, name: &str) -> (bool, i64)
where
    C: LeaseConnection + diesel_lease::__private::AdminStatements + R2D2Connection,
{
    let mut conn = pool.get().expect("a connection");
    let all = admin::leases(&mut conn).expect("read the leases");
    let lease = all.iter().find(|l| l.name == name).expect("the lease");
    (lease.record.is_held(), lease.record.token.get())
}

/// The page flow on one database: see the file's docs. `jobs_sql` makes `import_jobs` with a
/// claim older than the timeout (the backend's own SQL for "20 minutes ago").
fn page_flow<C>(url: &str, jobs_sql: &str, screenshot: Option<&Path>)
where
    C: LeaseConnection
        + diesel_lease::__private::AdminStatements
        + R2D2Connection
        + Notifications
        + diesel_lease::__private::SemaphoreDialect,
{
    let Some(browser) = Browser::start() else {
        return;
    };
    let pool = diesel_lease::pool::build_pool::<C>(url, 4).expect("a pool");
    diesel_lease::run_migrations(&mut pool.get().expect("a connection")).expect("migrations");
    pool.get()
        .expect("a connection")
        .batch_execute(jobs_sql)
        .expect("import_jobs");
    let holder = "report-worker-7";
    let options = LeaseOptions::new(Duration::from_secs(6))
        .keep_alive(true)
        .owner(OwnerId::new(holder).expect("an owner id"));
    let guard = LeaseGuard::try_acquire(&pool, "nightly-report", &options)
        .expect("acquire")
        .expect("the lease is free");
    // A semaphore with a holder and a waiter in line.
    let slots = |owner: &str| {
        Semaphore::new("etl-slots", 1)
            .with_ttl(Duration::from_secs(30))
            .with_owner(OwnerId::new(owner).expect("an owner id"))
    };
    let permit = slots("etl-worker-1")
        .try_acquire(&pool)
        .expect("acquire")
        .expect("free");
    let waiter = std::thread::spawn({
        let (pool, slots) = (pool.clone(), slots("etl-worker-2"));
        move || slots.acquire(&pool, PATIENCE).map(|p| p.ticket())
    });
    let started = Instant::now();
    while slots("x")
        .queue(&mut pool.get().expect("a connection"))
        .expect("queue")
        .len()
        < 2
    {
        assert!(started.elapsed() < PATIENCE, "the waiter never queued");
        std::thread::sleep(Duration::from_millis(20));
    }

    let served = serve(
        url,
        &[
            "--allow-actions",
            "--token",
            TOKEN,
            // The click below must not race a refresh; the refresh has its own check.
            "--refresh",
            "3600",
            "--table",
            "import_jobs --state-column status --claimed running --claimed-at-column claimed_at --failed failed",
            "--table",
            "archived_jobs --state-column status",
        ],
    );
    let base = &served.base;

    // Without the token (or with a wrong one) the action is refused and changes nothing.
    let (before_held, before_token) = lease_state(&pool, "nightly-report");
    assert!(before_held);
    for form in [
        vec![("name", "nightly-report")],
        vec![
            ("name", "nightly-report"),
            ("token", "not-the-token-at-all"),
        ],
        vec![("name", "nightly-report"), ("token", "")],
    ] {
        let (status, body) = post(&format!("{base}/actions/release-lease"), &form);
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("token is missing or wrong"), "{body}");
    }
    assert_eq!(get(&format!("{base}/actions/release-lease")).0, 405);
    assert_eq!(
        lease_state(&pool, "nightly-report"),
        (true, before_token),
        "a refused action changed the lease"
    );
    assert!(!guard.is_lost());

    // The page, in the browser: the lease and its holder, the semaphore's queue, the claims with
    // the stale and the dead ones, the table that is not claimable.
    browser.go(&format!("{base}/"));
    let row = browser.text("tr[data-lease='nightly-report']");
    assert!(row.contains(holder) && row.contains("held"), "{row}");
    let semaphores = browser.text("#semaphores");
    assert!(
        semaphores.contains("etl-worker-1") && semaphores.contains("holding"),
        "{semaphores}"
    );
    assert!(
        semaphores.contains("etl-worker-2") && semaphores.contains("waiting #1"),
        "{semaphores}"
    );
    let claims = browser.text(".claims");
    assert!(
        claims.contains("ready 3") && claims.contains("dead"),
        "{claims}"
    );
    assert!(claims.contains("running 2"), "{claims}");
    let stale = browser.text(".claims tr[data-state='running'] .stale");
    assert_eq!(stale, "1", "one claim is older than the timeout");
    let missing = browser.text(".not-claimable");
    assert!(
        missing.contains("there is no table `archived_jobs`"),
        "{missing}"
    );
    let holders = browser.text("#holders");
    assert!(
        holders.contains(holder) && holders.contains("etl-worker-1"),
        "{holders}"
    );
    if let Some(path) = screenshot {
        browser.screenshot(path);
    }

    // Every value is escaped: a name an attacker might choose shows as text.
    let _odd = LeaseGuard::try_acquire(&pool, "<script>window.pwned=1</script>", &options)
        .expect("acquire")
        .expect("free");
    let (status, html) = get(&format!("{base}/"));
    assert_eq!(status, 200);
    assert!(
        html.contains("&lt;script&gt;window.pwned=1&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script>window.pwned"));
    browser.go(&format!("{base}/"));
    assert!(browser
        .text("#leases")
        .contains("<script>window.pwned=1</script>"));
    assert_eq!(
        browser.script("return window.pwned === undefined;"),
        json!(true)
    );

    // With the token: the lease is released, the page says so, and the holder learns it.
    let token_field = browser.find("#token");
    browser.cmd(
        &format!("/element/{token_field}/value"),
        Some(json!({"text": TOKEN})),
    );
    let button = browser.find("tr[data-lease='nightly-report'] button");
    browser.cmd(&format!("/element/{button}/click"), Some(json!({})));
    let message = browser.text("#message");
    assert!(
        message.contains("Released lease `nightly-report`"),
        "{message}"
    );
    let (held, token) = lease_state(&pool, "nightly-report");
    assert!(
        !held && token == before_token + 1,
        "held {held}, token {token}"
    );
    assert!(
        guard.lost_signal().wait_timeout(PATIENCE),
        "the holder's lost signal did not fire"
    );
    assert!(guard.is_lost());

    // The page refreshes by itself.
    let refreshing = serve(url, &["--refresh", "1"]);
    browser.go(&format!("{}/", refreshing.base));
    browser.script("window.notReloaded = true; return null;");
    let started = Instant::now();
    while browser.script("return window.notReloaded === true;") == json!(true) {
        assert!(started.elapsed() < PATIENCE, "the page did not refresh");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Read-only: no buttons, and the endpoints refuse even with the token.
    assert_eq!(
        browser.script("return document.querySelectorAll('form').length;"),
        json!(0)
    );
    let (status, body) = post(
        &format!("{}/actions/release-lease", refreshing.base),
        &[
            ("name", "<script>window.pwned=1</script>"),
            ("token", TOKEN),
        ],
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Actions are off"), "{body}");
    assert!(lease_state(&pool, "<script>window.pwned=1</script>").0);

    drop(permit);
    let next = waiter.join().expect("the waiter thread");
    assert!(next.is_ok(), "the waiter gets the permit: {next:?}");
}

/// Runs `body` with the URL of a new database on the server whose admin URL is in `env` (the
/// test script sets it), dropped afterwards; SKIPPED when it is not set and not required.
fn on_server<C: Connection>(env: &str, backend: &str, body: impl FnOnce(&str)) {
    if !selected(backend) {
        return;
    }
    let Some(admin_url) = std::env::var(env).ok().filter(|u| !u.is_empty()) else {
        assert!(
            !required(backend),
            "{backend} is required (DIESEL_LEASE_TEST_REQUIRE) but {env} is not set"
        );
        eprintln!("SKIPPED the browser test on {backend}: {env} is not set (scripts/test.sh starts the server)");
        return;
    };
    // `MariadbConnection` takes the same server's URL with its own scheme.
    let admin_url = match backend {
        "mariadb" => admin_url.replacen("mysql://", "mariadb://", 1),
        _ => admin_url,
    };
    // Test-chosen text only: a name no quoting can go wrong with.
    let name = format!("dl_serve_browser_{backend}_{}", std::process::id());
    let mut admin = C::establish(&admin_url).expect("connect");
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the test database");
    let (base, _) = admin_url.rsplit_once('/').expect("URL ends in /database");
    body(&format!("{base}/{name}"));
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"));
}

#[test]
fn the_page_in_a_browser_on_postgres() {
    on_server::<diesel::PgConnection>("DIESEL_LEASE_TEST_PG", "postgres", |url| {
        let screenshot = std::env::var_os("DIESEL_LEASE_SERVE_SCREENSHOT").map(PathBuf::from);
        page_flow::<diesel::PgConnection>(
            url,
            "CREATE TABLE import_jobs (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL, claimed_at TIMESTAMPTZ);
             INSERT INTO import_jobs (status, claimed_at) VALUES ('ready', NULL), ('ready', NULL), ('ready', NULL),
               ('running', now() - INTERVAL '20 minutes'), ('running', now() - INTERVAL '1 minute'),
               ('done', now() - INTERVAL '2 hours'), ('failed', now() - INTERVAL '3 hours');",
            screenshot.as_deref(),
        );
    });
}

#[test]
fn the_page_in_a_browser_on_mysql() {
    on_server::<diesel::MysqlConnection>("DIESEL_LEASE_TEST_MYSQL", "mysql", |url| {
        page_flow::<diesel::MysqlConnection>(
            url,
            "CREATE TABLE import_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(20) NOT NULL, claimed_at DATETIME(6));
             INSERT INTO import_jobs (status, claimed_at) VALUES ('ready', NULL), ('ready', NULL), ('ready', NULL),
               ('running', UTC_TIMESTAMP(6) - INTERVAL 20 MINUTE), ('running', UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE),
               ('done', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR), ('failed', UTC_TIMESTAMP(6) - INTERVAL 3 HOUR);",
            None,
        );
    });
}

/// The same server through `mariadb://`: the tool runs on Diesel's `MariadbConnection`.
#[test]
fn the_page_in_a_browser_on_mariadb() {
    on_server::<diesel::mariadb::MariadbConnection>("DIESEL_LEASE_TEST_MYSQL", "mariadb", |url| {
        page_flow::<diesel::mariadb::MariadbConnection>(
            url,
            "CREATE TABLE import_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(20) NOT NULL, claimed_at DATETIME(6));
             INSERT INTO import_jobs (status, claimed_at) VALUES ('ready', NULL), ('ready', NULL), ('ready', NULL),
               ('running', UTC_TIMESTAMP(6) - INTERVAL 20 MINUTE), ('running', UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE),
               ('done', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR), ('failed', UTC_TIMESTAMP(6) - INTERVAL 3 HOUR);",
            None,
        );
    });
}

#[test]
fn the_page_in_a_browser_on_sqlite() {
    if !selected("sqlite") {
        return;
    }
    let dir = TempDir::new("sqlite");
    let url = dir.0.join("app.db").display().to_string();
    page_flow::<diesel::SqliteConnection>(
        &url,
        "CREATE TABLE import_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, status TEXT NOT NULL, claimed_at TIMESTAMP);
         INSERT INTO import_jobs (status, claimed_at) VALUES ('ready', NULL), ('ready', NULL), ('ready', NULL),
           ('running', datetime('now', '-20 minutes')), ('running', datetime('now', '-1 minute')),
           ('done', datetime('now', '-2 hours')), ('failed', datetime('now', '-3 hours'));",
        None,
    );
}

/// An unreachable database is a page that says so; the server stays up and keeps answering.
#[test]
fn an_unreachable_database_is_a_page_and_the_server_stays_up() {
    let served = serve("postgres://nobody@127.0.0.1:1/none", &["--refresh", "2"]);
    for _ in 0..2 {
        let (status, body) = get(&format!("{}/", served.base));
        assert_eq!(status, 200);
        assert!(body.contains("cannot be reached"), "{body}");
        assert!(body.contains("http-equiv=\"refresh\""), "{body}");
    }
    let (status, _) = get(&format!("{}/nothing-here", served.base));
    assert_eq!(status, 404);
    // A name that is not the page's own (a web page's, pointed at 127.0.0.1) is not answered.
    let (status, body) = http(
        ureq::get(&format!("{}/", served.base)).set("Host", "attacker.example:80"),
        None,
    );
    assert_eq!(status, 421, "{body}");
    let port = served.base.rsplit(':').next().expect("a port");
    let (status, _) = http(
        ureq::get(&format!("{}/", served.base)).set("Host", &format!("localhost:{port}")),
        None,
    );
    assert_eq!(status, 200);
}

/// The page's pause, resume, cancel and retry-dead-rows actions, over HTTP with the token (SQLite; the library
/// functions they call are tested on every backend): what each did is in the database, and the
/// page shows the pauses in force.
#[test]
fn the_page_pauses_resumes_and_cancels_rows() {
    if !selected("sqlite") {
        return;
    }
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        a: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        b: String,
    }
    let dir = TempDir::new("actions");
    let url = dir.0.join("app.db").display().to_string();
    let mut conn = diesel::SqliteConnection::establish(&url).expect("connect");
    diesel_lease::run_migrations(&mut conn).expect("migrations");
    conn.batch_execute(
        "CREATE TABLE import_jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL, claimed_at TIMESTAMP, tenant TEXT NOT NULL,
                                   attempts INTEGER NOT NULL DEFAULT 0);
         INSERT INTO import_jobs (id, status, tenant) VALUES (1, 'ready', 'acme'), (2, 'done', 'acme'), (3, 'ready', 'globex');
         INSERT INTO import_jobs (id, status, tenant, attempts) VALUES (4, 'failed', 'acme', 5), (5, 'failed', 'globex', 5);",
    )
    .expect("table");
    let pauses = |conn: &mut diesel::SqliteConnection| -> Vec<(String, String)> {
        diesel::RunQueryDsl::load::<Row>(
            diesel::sql_query("SELECT key_column AS a, key_value AS b FROM diesel_lease_pauses WHERE table_name = 'import_jobs' ORDER BY a, b"),
            conn,
        )
        .expect("pauses")
        .into_iter()
        .map(|r| (r.a, r.b))
        .collect()
    };
    let status_of = |conn: &mut diesel::SqliteConnection, id: i64| -> String {
        diesel::RunQueryDsl::get_result::<Row>(
            diesel::sql_query(format!(
                "SELECT status AS a, tenant AS b FROM import_jobs WHERE id = {id}"
            )),
            conn,
        )
        .expect("row")
        .a
    };
    let token = "a-token-of-twenty-chars";
    let served = serve(
        &url,
        &[
            "--allow-actions",
            "--token",
            token,
            "--table",
            "import_jobs --state-column status --claimed-at-column claimed_at --claimed running --ready ready --cancelled cancelled --failed failed --attempts-column attempts",
        ],
    );
    let action = |name: &str, fields: &[(&str, &str)]| {
        let mut form = vec![("token", token)];
        form.extend_from_slice(fields);
        post(&format!("{}/actions/{name}", served.base), &form)
    };
    // The whole table.
    let (status, body) = action("pause", &[("table", "import_jobs")]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(pauses(&mut conn), [(String::new(), String::new())]);
    let (_, page) = get(&format!("{}/", served.base));
    assert!(page.contains("Claims paused (the whole table)"), "{page}");
    assert!(page.contains("Resume claims"), "{page}");
    let (status, body) = action("resume", &[("table", "import_jobs")]);
    assert_eq!(status, 200, "{body}");
    assert!(pauses(&mut conn).is_empty());
    // One key.
    let (status, body) = action(
        "pause",
        &[
            ("table", "import_jobs"),
            ("key_column", "tenant"),
            ("key", "acme"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        pauses(&mut conn),
        [("tenant".to_string(), "acme".to_string())]
    );
    let (_, page) = get(&format!("{}/", served.base));
    assert!(page.contains("tenant = acme"), "{page}");
    let (status, _) = action(
        "pause",
        &[("table", "import_jobs"), ("key_column", "tenant")],
    );
    assert_eq!(status, 400, "a key's pause needs its value");
    // Only tables the page was started with; only with the token.
    let (status, _) = action("pause", &[("table", "other_table")]);
    assert_eq!(status, 404);
    let (status, _) = post(
        &format!("{}/actions/resume", served.base),
        &[
            ("table", "import_jobs"),
            ("key_column", "tenant"),
            ("key", "acme"),
        ],
    );
    assert_eq!(status, 403);
    assert_eq!(pauses(&mut conn).len(), 1, "refused: nothing changed");
    // Cancel: a ready row goes to the cancelled state; a finished row is left alone.
    let (status, body) = action("cancel", &[("table", "import_jobs"), ("key", "1")]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Cancelled row 1"), "{body}");
    assert_eq!(status_of(&mut conn, 1), "cancelled");
    let (status, body) = action("cancel", &[("table", "import_jobs"), ("key", "2")]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("nothing changed"), "{body}");
    assert_eq!(status_of(&mut conn, 2), "done");
    let (status, _) = post(
        &format!("{}/actions/cancel", served.base),
        &[("table", "import_jobs"), ("key", "3")],
    );
    assert_eq!(status, 403);
    assert_eq!(status_of(&mut conn, 3), "ready");
    // Retry the dead rows: both go back to ready with their attempts reset; not without the token.
    let (_, page) = get(&format!("{}/", served.base));
    assert!(page.contains("Retry dead rows"), "{page}");
    let (status, _) = post(
        &format!("{}/actions/retry-dead", served.base),
        &[("table", "import_jobs")],
    );
    assert_eq!(status, 403);
    assert_eq!(status_of(&mut conn, 4), "failed");
    let (status, body) = action("retry-dead", &[("table", "import_jobs")]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Moved 2 dead rows"), "{body}");
    for id in [4, 5] {
        assert_eq!(status_of(&mut conn, id), "ready");
    }
    let attempts: i64 = diesel::RunQueryDsl::get_result::<Row>(
        diesel::sql_query(
            "SELECT CAST(SUM(attempts) AS TEXT) AS a, '' AS b FROM import_jobs WHERE id IN (4, 5)",
        ),
        &mut conn,
    )
    .expect("attempts")
    .a
    .parse()
    .expect("a number");
    // The table has no owner column: the attempts number fences a stale worker, so a redrive
    // keeps it counting (it resets it only next to an owner column).
    assert_eq!(attempts, 10, "attempts kept");
}
