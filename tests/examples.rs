//! The examples' logic against a real server and a real store.

mod common;

#[allow(dead_code)]
#[path = "../examples/fenced_write.rs"]
mod fenced_write;

#[allow(dead_code)]
#[path = "../examples/web_handler.rs"]
mod web_handler;

use common::RedisServer;
use fenced_write::{FencedStore, Write};

#[test]
fn the_store_refuses_only_lower_tokens() {
    let mut store = FencedStore::open_in_memory().unwrap();
    assert_eq!(store.write("d", "a", 5).unwrap(), Write::Done);
    assert_eq!(store.write("d", "b", 5).unwrap(), Write::Done, "the same hold again");
    assert_eq!(store.write("d", "c", 4).unwrap(), Write::Refused { token: 4, seen: 5 });
    assert_eq!(store.write("d", "e", 6).unwrap(), Write::Done);
    assert_eq!(store.read("d").unwrap().as_deref(), Some("e"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_write_is_refused_by_its_token() {
    let server = RedisServer::start();
    let (fresh, late, kept) = fenced_write::scenario(&server.url()).await.unwrap();
    assert_eq!(fresh, Write::Done);
    assert!(
        matches!(late, Write::Refused { token, seen } if token < seen),
        "{late:?}"
    );
    assert_eq!(kept.as_deref(), Some("written by the second holder"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_for_one_order_one_updates_one_gets_409() {
    let server = RedisServer::start();
    let client = lockwarden::Client::connect(&server.url()).await.unwrap();
    // Each request in its own task, as a web server runs them.
    let spawn = |client: lockwarden::Client| tokio::spawn(async move { web_handler::handle(&client, 7).await });
    let (a, b) = (spawn(client.clone()), spawn(client.clone()));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let mut codes = [a.0, b.0];
    codes.sort();
    assert_eq!(codes, [200, 409], "{a:?} {b:?}");
    // Another order is independent.
    assert_eq!(web_handler::handle(&client, 8).await.0, 200);
}
