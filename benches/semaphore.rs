//! The semaphore with expiring permits under contention, in one run
//! against one throwaway server:
//!
//!     cargo bench --bench semaphore
//!
//! 16 tasks, each with its own client, take one permit at a time of a
//! semaphore of `P` permits, hold it for `HOLD` and give it back, for
//! `LOCKWARDEN_SEM_SECS` seconds per row (default 5; `cargo test --benches`
//! runs half a second). Rows: 4 permits, and 1 permit (a lock's worth, the
//! reference in the same run). Reports acquisitions/s, the wait (p50, p99,
//! max), Redis commands per acquisition and the most permits ever held at
//! once, which must not pass `P`.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile_ms, RedisServer};

const TASKS: usize = 16;
const HOLD: Duration = Duration::from_micros(500);

async fn row(server: &RedisServer, permits: u32, secs: f64) {
    let name = format!("sem-bench-{permits}");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let before = server.commands_processed();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = lockwarden::Client::connect(&server.url()).await.unwrap();
        let sem = client.semaphore(&name, permits).unwrap();
        let (inside, most, count) = (inside.clone(), most.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let _client = client;
            let mut waits = Vec::new();
            while Instant::now() < end {
                let asked = Instant::now();
                let Some(p) = sem.try_acquire(Duration::from_secs(5), None).await.unwrap() else {
                    continue;
                };
                waits.push(asked.elapsed());
                let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                count.fetch_add(1, Ordering::SeqCst);
                p.release().await.unwrap();
            }
            waits
        }));
    }
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    waits.sort();
    let secs = started.elapsed().as_secs_f64();
    let n = count.load(Ordering::SeqCst).max(1);
    println!(
        "{permits:>7} {:>10.0} {:>8.2}/{:.2}/{:.2} ms {:>9.1} {:>9}",
        n as f64 / secs,
        percentile_ms(&waits, 0.5),
        percentile_ms(&waits, 0.99),
        waits.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        (server.commands_processed() - before) as f64 / n as f64,
        most.load(Ordering::SeqCst)
    );
    assert!(
        most.load(Ordering::SeqCst) <= permits as usize,
        "more permits held than there are"
    );
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let secs = if benching {
        std::env::var("LOCKWARDEN_SEM_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5.0)
    } else {
        0.5
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = RedisServer::start();
        println!(
            "{:>7} {:>10} {:>22} {:>9} {:>9}",
            "permits", "acq/s", "wait p50/p99/max", "cmds/acq", "most held"
        );
        for permits in [4, 1] {
            row(&server, permits, secs).await;
        }
    });
}
