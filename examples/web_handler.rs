//! A web handler that takes a per-order lock with a short timeout, so two
//! requests for the same order never run at once and a busy order answers
//! 409 quickly instead of queueing requests. `handle` has no framework in
//! it: call it from your route (axum, actix-web, warp, ...).
//!
//! `cargo run --example web_handler -- redis://127.0.0.1:6379`

use std::time::Duration;

use lockwarden::Client;

/// What the handler answers: an HTTP status and a body.
pub type Response = (u16, String);

/// Updates one order under its lock: 200 when done, 409 when another
/// request holds the order for longer than 200 ms, 503 when Redis cannot
/// answer (the client may retry later), 500 for anything else. Call it from
/// the request's own task (web servers run each request in one): ownership
/// is per task.
pub async fn handle(client: &Client, order_id: u64) -> Response {
    let lock = match client.lock(&format!("order:{order_id}")) {
        Ok(l) => l,
        Err(e) => return (500, e.to_string()),
    };
    // Wait at most 200 ms; hold at most 5 s (a fixed lease: a request that
    // hangs cannot keep the order locked forever).
    match lock.try_lock(Duration::from_millis(200), Duration::from_secs(5)).await {
        Ok(Some(guard)) => {
            tokio::time::sleep(Duration::from_millis(300)).await; // the update
            let token = guard.token();
            match guard.unlock().await {
                Ok(()) => (200, format!("order {order_id} updated (token {token})")),
                Err(e) => (500, e.to_string()),
            }
        }
        Ok(None) => (409, format!("order {order_id} is being updated by another request")),
        Err(e) if e.is_retryable() => (503, e.to_string()),
        Err(e) => (500, e.to_string()),
    }
}

#[tokio::main]
async fn main() -> lockwarden::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    // Two requests for the same order at once: one updates, one gets 409.
    // Each request runs in its own task, as in a web server: ownership is
    // per task, so two calls joined inside one task would re-enter instead.
    let requests: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { handle(&client, 42).await })
        })
        .collect();
    for r in requests {
        println!("{:?}", r.await.expect("request task"));
    }
    Ok(())
}
