//! MySQL / MariaDB: a client waiting for a reply the server will never send. Diesel sets no
//! client-side read timeout on `MysqlConnection` (nor `MariadbConnection`) and offers no way to set one, so
//! `ConnectionTuning::mysql_idle_timeout` has the server close the idle session instead
//! (`wait_timeout`). Injected with a TCP proxy between the client and the server that swallows
//! the server's replies from a given moment on: the server answers, goes idle, and the client
//! waits — until the server closes the session and the call fails with
//! `Error::ConnectionLost`.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use diesel::Connection;
use diesel_lease::pool::ConnectionTuning;
use diesel_lease::prelude::*;
use diesel_lease::Error;

use crate::common::TestDb;
use crate::models::ImportJob;

/// Forwards one client connection to `upstream`; once `swallow` is set, the server's bytes are
/// read and dropped instead of forwarded. When the server closes, the client side is closed
/// too. Returns the port to connect to.
fn proxy(upstream: String, swallow: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let server = TcpStream::connect(upstream).unwrap();
        let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n @ 1..) = c_read.read(&mut buf) {
                if s_write.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = s_write.shutdown(Shutdown::Write);
        });
        let (mut s_read, mut c_write) = (server, client);
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = s_read.read(&mut buf) {
            if !swallow.load(Ordering::SeqCst) && c_write.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        // The server closed the session: so does the client's side.
        let _ = c_write.shutdown(Shutdown::Both);
    });
    port
}

/// `mysql://user@host:port/db` with the port replaced.
fn through(url: &str, port: u16) -> String {
    let (scheme_auth, rest) = url.rsplit_once('@').expect("user@host in the test URL");
    let (_host_port, db) = rest.split_once('/').expect("a database in the test URL");
    format!("{scheme_auth}@127.0.0.1:{port}/{db}")
}

crate::mysql_suite! {
    fixtures: crate::claim::basics;
    tests: [a_reply_that_never_comes_ends_in_connection_lost];

    pub(crate) fn a_reply_that_never_comes_ends_in_connection_lost(db: &TestDb<B>) {
        fixtures::seed_jobs(db, 3);
        let (host, port) = {
            let rest = db.url.rsplit_once('@').unwrap().1;
            let host_port = rest.split_once('/').unwrap().0;
            let (host, port) = host_port.rsplit_once(':').unwrap();
            (host.to_owned(), port.to_owned())
        };
        let swallow = Arc::new(AtomicBool::new(false));
        let local = proxy(format!("{host}:{port}"), Arc::clone(&swallow));
        let mut conn = <B as crate::common::TestBackend>::Conn::establish(&through(&db.url, local)).unwrap();
        let tuning = ConnectionTuning {
            mysql_idle_timeout: Some(Duration::from_secs(2)),
            ..ConnectionTuning::default()
        };
        tuning.apply(&mut conn).unwrap();
        // The connection works through the proxy.
        let job = ImportJob::claim().row(&mut conn).unwrap().expect("a row");
        assert!(job.complete(&mut conn).unwrap());

        // From now on no reply reaches the client.
        swallow.store(true, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        std::thread::spawn(move || {
            let outcome = ImportJob::claim().row(&mut conn);
            let _ = tx.send((outcome.map(|row| row.map(|r| r.id)), started.elapsed()));
        });
        let (outcome, took) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the claim still waits for its reply after 30 s: no read timeout");
        assert!(
            matches!(outcome, Err(Error::ConnectionLost(_))),
            "expected ConnectionLost, got {outcome:?}"
        );
        assert!(
            took >= Duration::from_millis(1500),
            "failed after {took:?}, before the idle timeout"
        );
        eprintln!("a swallowed reply ended in ConnectionLost after {took:?} (idle timeout 2 s)");
    }
}
