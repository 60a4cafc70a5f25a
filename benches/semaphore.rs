//! The semaphore with expiring permits under contention, in one run
//! against one throwaway server:
//!
//!     cargo bench --bench semaphore
//!
//! 16 tasks, each with its own client, take one permit at a time of a
//! semaphore of `P` permits, hold it for `HOLD` and give it back, for
//! `LOCKWARDEN_SEM_SECS` seconds per row (default 5; `cargo test --benches`
//! runs half a second). Rows: 4 permits, and 1 permit (a lock's worth, the
//! reference in the same run), each for the semaphore and the fair
//! semaphore (`Client::fair_semaphore`). Reports acquisitions/s, the wait
//! (p50, p99, max), Redis commands per acquisition, the least and the most
//! acquisitions of one task as a share of the most (1.00: all served
//! alike) and the most permits ever held at once, which must not pass `P`.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile_ms, RedisServer};

const TASKS: usize = 16;
const HOLD: Duration = Duration::from_micros(500);

async fn row(server: &RedisServer, permits: u32, fair: bool, secs: f64) {
    let name = format!("sem-bench-{permits}-{fair}");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let before = server.commands_processed();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = lockwarden::Client::connect(&server.url()).await.unwrap();
        let sem = if fair {
            client.fair_semaphore(&name, permits).unwrap()
        } else {
            client.semaphore(&name, permits).unwrap()
        };
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
    let mut shares = Vec::new();
    for t in tasks {
        let w = t.await.unwrap();
        shares.push(w.len());
        waits.extend(w);
    }
    let fewest = *shares.iter().min().unwrap_or(&0) as f64;
    let most_of_one = (*shares.iter().max().unwrap_or(&1)).max(1) as f64;
    waits.sort();
    let secs = started.elapsed().as_secs_f64();
    let n = count.load(Ordering::SeqCst).max(1);
    println!(
        "{:>5} {permits:>7} {:>10.0} {:>8.2}/{:.2}/{:.2} ms {:>9.1} {:>11.2} {:>9}",
        if fair { "fair" } else { "plain" },
        n as f64 / secs,
        percentile_ms(&waits, 0.5),
        percentile_ms(&waits, 0.99),
        waits.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        (server.commands_processed() - before) as f64 / n as f64,
        fewest / most_of_one,
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
            "{:>5} {:>7} {:>10} {:>22} {:>9} {:>11} {:>9}",
            "kind", "permits", "acq/s", "wait p50/p99/max", "cmds/acq", "share min", "most held"
        );
        for fair in [false, true] {
            for permits in [4, 1] {
                row(&server, permits, fair, secs).await;
            }
        }
    });
}
