//! The fair lock: FIFO among waiters, one wake-up per unlock.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Lease};

const LONG: Duration = Duration::from_secs(30);

async fn fair_client(url: &str, waiter_timeout: Duration) -> Client {
    Client::builder(url)
        .fair_waiter_timeout(waiter_timeout)
        .build()
        .await
        .expect("connect")
}

/// The queue and the deadline map of `name` are empty (absent).
fn assert_queue_empty(server: &RedisServer, name: &str) {
    let q = format!("lockwarden:{{{name}}}:queue");
    let t = format!("lockwarden:{{{name}}}:timeouts");
    assert_eq!(
        server.cmd(&["LLEN", &q]).as_int(),
        Some(0),
        "queue of {name}: {:?}",
        server.cmd(&["LRANGE", &q, "0", "-1"])
    );
    assert_eq!(server.cmd(&["ZCARD", &t]).as_int(), Some(0), "deadlines of {name}");
}

fn queue_len(server: &RedisServer, name: &str) -> i64 {
    server
        .cmd(&["LLEN", &format!("lockwarden:{{{name}}}:queue")])
        .as_int()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_acquire_in_submission_order_as_leases_run_out() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let lock = c.fair_lock("leases").unwrap();
            tasks.push(tokio::spawn(async move {
                let g = lock
                    .try_lock(Duration::from_secs(10), Duration::from_secs(1))
                    .await
                    .unwrap()
                    .expect("acquired");
                (i, start.elapsed(), g)
            }));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.unwrap());
        }
        got.sort_by_key(|(_, at, _)| *at);
        let order: Vec<usize> = got.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(order, (0..8).collect::<Vec<_>>(), "FIFO by submission");
        for w in got.windows(2) {
            let gap = w[1].1 - w[0].1;
            assert!(
                gap >= Duration::from_millis(950) && gap <= Duration::from_millis(1300),
                "next one soon after the lease: {gap:?}"
            );
        }
        assert_queue_empty(&server, "leases");
    })
    .await
}
