//! A TCP proxy inside the test process, between the library and a database server, that can
//! black-hole the link: once [`Proxy::black_hole`] is called it forwards nothing more in either
//! direction, and closes nothing, so the client sees what a partitioned network shows it — a
//! server that never answers (no reset, no end of stream). Connections opened afterwards are
//! accepted and then black-holed too. Dropping the proxy closes every connection, which ends
//! whatever still waits on one.
//!
//! It sits above the kernel: the client's own TCP stack still gets its packets acknowledged (by
//! the proxy's), so TCP keepalives and `tcp_user_timeout` see a healthy link. What this tests is
//! the library's own bounds, which must hold whatever the kernel notices.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How often an idle proxy thread looks at the switches.
const TICK: Duration = Duration::from_millis(20);

/// A proxy listening on a port of 127.0.0.1, forwarding to one server.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    black_holed: AtomicBool,
    stopped: AtomicBool,
    /// Every socket opened, both ends, to be shut down when the proxy goes.
    sockets: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// A proxy to the server of `url` (`scheme://user@host:port/database`).
    pub fn to_server_of(url: &str) -> Proxy {
        let (_, host_port, _) = split_url(url);
        let upstream: SocketAddr = host_port
            .parse()
            .unwrap_or_else(|_| panic!("the test URL's server is not an address: {host_port}"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(listener, upstream, accepting));
        Proxy { port, shared }
    }

    /// `url` with its server replaced by this proxy.
    pub fn url(&self, url: &str) -> String {
        let (head, _, tail) = split_url(url);
        format!("{head}@127.0.0.1:{}/{tail}", self.port)
    }

    /// From now on nothing is forwarded, in either direction, and nothing is closed.
    pub fn black_hole(&self) {
        self.shared.black_holed.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for socket in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// `(scheme://user, host:port, database?query)` of a test URL.
fn split_url(url: &str) -> (&str, &str, &str) {
    let (head, rest) = url.rsplit_once('@').expect("user@host in the test URL");
    let (host_port, tail) = rest.split_once('/').expect("a database in the test URL");
    (head, host_port, tail)
}

fn accept(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(TICK);
                continue;
            }
            Err(_) => return,
        };
        let Ok(server) = TcpStream::connect(upstream) else {
            continue;
        };
        let _ = client.set_nonblocking(false);
        {
            let mut sockets = shared.sockets.lock().unwrap();
            if shared.stopped.load(Ordering::SeqCst) {
                return;
            }
            sockets.push(client.try_clone().unwrap());
            sockets.push(server.try_clone().unwrap());
        }
        for (from, to) in [
            (client.try_clone().unwrap(), server.try_clone().unwrap()),
            (server, client),
        ] {
            let shared = Arc::clone(&shared);
            thread::spawn(move || forward(from, to, &shared));
        }
    }
}

/// Copies `from` to `to` until either closes or the proxy stops; while black-holed it reads
/// nothing (what was sent stays in the socket buffers, undelivered).
fn forward(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    from.set_read_timeout(Some(TICK)).unwrap();
    let mut buf = [0u8; 16 * 1024];
    while !shared.stopped.load(Ordering::SeqCst) {
        if shared.black_holed.load(Ordering::SeqCst) {
            thread::sleep(TICK);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // A black hole that opened during the read swallows what was read.
                if shared.black_holed.load(Ordering::SeqCst) {
                    continue;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
