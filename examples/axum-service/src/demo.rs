// The service itself. `main.rs` compiles this file twice, with `Conn = SqliteConnection` and
// `Conn = PgConnection`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_lease::pool::Deadpool;
use diesel_lease::worker::Worker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{orders, stock, BoxError, Order, ORDERS, STOCK};

/// What every request handler shares: the application's pool.
#[derive(Clone)]
struct App {
    db: Deadpool<Conn>,
}

/// Why a request's transaction rolled back.
enum Refused {
    SoldOut,
    Db(diesel::result::Error),
}

impl From<diesel::result::Error> for Refused {
    fn from(e: diesel::result::Error) -> Self {
        Refused::Db(e)
    }
}

pub(super) async fn run(url: &str, serve: bool, listen: &str) -> Result<(), BoxError> {
    // The application's one pool: request handlers and diesel-lease share it. On PostgreSQL
    // the Worker's waits are woken by NOTIFY through one listener connection.
    let db = Deadpool::<Conn>::build(url, 8)?;
    let setup = db.pool().get().await?;
    setup
        .interact(|conn| {
            conn.batch_execute(DDL)?;
            for (item, units) in STOCK {
                diesel::insert_into(stock::table)
                    .values((stock::item.eq(item), stock::units.eq(units)))
                    .execute(conn)?;
            }
            Ok::<_, diesel::result::Error>(())
        })
        .await
        .map_err(|e| e.to_string())??;
    drop(setup);

    // The Worker beside the runtime: a thread of its own, stopped by `stop`.
    let stop = Arc::new(AtomicBool::new(false));
    // What the carrier was handed: order id -> (item, times).
    let shipped = Arc::new(Mutex::new(HashMap::<i64, (String, u32)>::new()));
    let worker = {
        let (db, stop, shipped) = (db.clone(), stop.clone(), shipped.clone());
        std::thread::spawn(move || {
            Worker::<Order, Conn>::new(db).concurrency(2).run_until(
                &stop,
                |_conn, order: &Order| {
                    // … hand it to the carrier …
                    std::thread::sleep(Duration::from_millis(20));
                    let mut shipped = shipped.lock().expect("not poisoned");
                    shipped
                        .entry(order.id)
                        .or_insert_with(|| (order.item.clone(), 0))
                        .1 += 1;
                    Ok::<_, diesel::result::Error>(())
                },
            )
        })
    };

    let app = Router::new()
        .route("/orders", post(place))
        .route("/orders/{id}", get(status))
        .with_state(App { db: db.clone() });
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    println!("listening on http://{address} (Ctrl-C stops the server, then the worker)");

    // The demo client stops the service the way Ctrl-C does, once every order is shipped.
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<Vec<i64>, BoxError>>();
    if !serve {
        tokio::spawn(async move {
            let _ = done_tx.send(client(address).await);
        });
    }
    let accepted = Arc::new(Mutex::new(None));
    let shutdown = {
        let accepted = accepted.clone();
        async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => println!("Ctrl-C: stopping the server, then the worker"),
                Ok(done) = done_rx => {
                    println!("demo client done: stopping the server, then the worker");
                    *accepted.lock().expect("not poisoned") = Some(done);
                }
            }
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    // Requests are finished; now the Worker: rows in flight finish, the rest stay queued.
    stop.store(true, Ordering::SeqCst);
    let report = tokio::task::spawn_blocking(move || worker.join())
        .await?
        .map_err(|_| "the worker thread panicked")??;
    println!(
        "worker stopped: {} shipped, {} retried, {} handed back",
        report.completed, report.retried, report.released
    );
    let accepted = accepted.lock().expect("not poisoned").take();
    if let Some(accepted) = accepted {
        let shipped = shipped.lock().expect("not poisoned").clone();
        check(&db, accepted?, &shipped).await?;
    }
    Ok(())
}

/// `POST /orders`: one unit of stock and the queued order, in one transaction.
async fn place(State(app): State<App>, body: String) -> (StatusCode, String) {
    let item = body.trim().to_owned();
    let conn = match app.db.pool().get().await {
        Ok(conn) => conn,
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("no connection: {e}\n"),
            )
        }
    };
    let placed = conn
        .interact(move |conn| {
            conn.transaction(|conn| {
                let taken = diesel::update(stock::table.find(&item).filter(stock::units.gt(0)))
                    .set(stock::units.eq(stock::units - 1))
                    .execute(conn)?;
                if taken == 0 {
                    return Err(Refused::SoldOut); // rolls back: nothing was taken or queued
                }
                // The enqueue: a row of our own table that the Worker will claim.
                Ok(diesel::insert_into(orders::table)
                    .values(orders::item.eq(&item))
                    .returning(orders::id)
                    .get_result::<i64>(conn)?)
            })
        })
        .await;
    match placed {
        Ok(Ok(id)) => (StatusCode::CREATED, format!("{id}\n")),
        Ok(Err(Refused::SoldOut)) => (StatusCode::CONFLICT, "sold out\n".into()),
        Ok(Err(Refused::Db(e))) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// `GET /orders/{id}`: the order's state.
async fn status(State(app): State<App>, Path(id): Path<i64>) -> (StatusCode, String) {
    let Ok(conn) = app.db.pool().get().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no connection\n".into());
    };
    let found = conn
        .interact(move |conn| {
            orders::table
                .find(id)
                .select(orders::status)
                .first::<String>(conn)
                .optional()
        })
        .await;
    match found {
        Ok(Ok(Some(status))) => (StatusCode::OK, format!("{status}\n")),
        Ok(Ok(None)) => (StatusCode::NOT_FOUND, "no such order\n".into()),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// The demo client: places the orders, then waits until each accepted one is shipped. Returns
/// the accepted orders' ids.
async fn client(address: std::net::SocketAddr) -> Result<Vec<i64>, BoxError> {
    let mut accepted = Vec::new();
    for (item, n) in ORDERS {
        for _ in 0..n {
            let (code, body) = http(address, "POST", "/orders", item).await?;
            match code {
                201 => accepted.push(body.trim().parse::<i64>()?),
                409 => println!("POST /orders {item}: 409 {}", body.trim()),
                _ => return Err(format!("POST /orders {item}: {code} {body}").into()),
            }
        }
    }
    println!(
        "{} orders accepted; waiting for the worker to ship them",
        accepted.len()
    );
    for id in &accepted {
        for attempt in 0.. {
            let (_, body) = http(address, "GET", &format!("/orders/{id}"), "").await?;
            if body.trim() == "shipped" {
                break;
            }
            if attempt > 600 {
                return Err(format!("order {id} not shipped after a minute: {body}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(accepted)
}

/// One HTTP/1.1 request; the status code and the body.
async fn http(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), BoxError> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or("no status line")?;
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((code, body))
}

/// What the demo must have done: exactly the accepted orders shipped, each once; the stock
/// taken for exactly those.
async fn check(
    db: &Deadpool<Conn>,
    accepted: Vec<i64>,
    shipped: &HashMap<i64, (String, u32)>,
) -> Result<(), BoxError> {
    let conn = db.pool().get().await?;
    let (rows, stock_left) = conn
        .interact(|conn| {
            let rows = orders::table
                .select((orders::id, orders::item, orders::status))
                .order(orders::id)
                .load::<(i64, String, String)>(conn)?;
            let stock_left = stock::table
                .select((stock::item, stock::units))
                .load::<(String, i32)>(conn)?;
            Ok::<_, diesel::result::Error>((rows, stock_left))
        })
        .await
        .map_err(|e| e.to_string())??;
    let ids: Vec<i64> = rows.iter().map(|(id, _, _)| *id).collect();
    if ids != accepted {
        return Err(format!("orders in the table {ids:?}, accepted {accepted:?}").into());
    }
    if let Some((id, _, status)) = rows.iter().find(|(_, _, status)| status != "shipped") {
        return Err(format!("order {id} is {status}, not shipped").into());
    }
    let once = rows
        .iter()
        .all(|(id, item, _)| shipped.get(id) == Some(&(item.clone(), 1)));
    if !once || shipped.len() != accepted.len() {
        return Err(format!("shipped {shipped:?}, expected each of {accepted:?} once").into());
    }
    for (item, units) in &stock_left {
        let (_, start) = STOCK
            .iter()
            .find(|(name, _)| name == item)
            .ok_or("unknown item")?;
        let sold = rows.iter().filter(|(_, i, _)| i == item).count();
        if i64::from(*start) - i64::from(*units) != i64::try_from(sold)? {
            return Err(format!("{item}: {units} left of {start}, {sold} sold").into());
        }
    }
    println!(
        "OK: {} orders placed and shipped exactly once (5 lamps, 10 desks); 3 lamps sold out, \
         and their transactions left neither an order nor a missing lamp",
        accepted.len()
    );
    Ok(())
}
