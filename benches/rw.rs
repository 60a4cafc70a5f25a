//! The read-write lock under a read-heavy load, beside the same load on the
//! reentrant lock (every reader exclusive), in one run against one
//! throwaway server:
//!
//!     cargo bench --bench rw
//!
//! 8 reader tasks and 1 writer task, each with its own client, on one lock
//! name. A reader holds the read side for `HOLD` (standing for the work it
//! does under the lock), a writer the write side for the same time. Each
//! row runs `LOCKWARDEN_RW_SECS` seconds (default 5; `cargo test --benches`
//! runs half a second) and reports reads/s, writes/s, the writer's wait
//! (p50, p99, max), Redis commands per acquisition and the safety checks:
//! no reader while a writer holds the lock, never two writers.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile_ms, RedisServer};

const READERS: usize = 8;
const HOLD: Duration = Duration::from_micros(500);

#[derive(Default)]
struct Shared {
    reading: AtomicUsize,
    writing: AtomicBool,
    violations: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
}

struct Row {
    reads: u64,
    writes: u64,
    secs: f64,
    write_waits: Vec<Duration>,
    cmds: u64,
    violations: u64,
}

/// One row: `rw` uses the read-write lock, otherwise every task takes the
/// reentrant lock (readers exclude each other too).
async fn row(server: &RedisServer, rw: bool, secs: f64) -> Row {
    let name = format!("rw-bench-{}", if rw { "rw" } else { "plain" });
    let shared = Arc::new(Shared::default());
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let before = server.commands_processed();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let client = lockwarden::Client::connect(&server.url()).await.unwrap();
        let lock = if rw {
            client.rw_lock(&name).unwrap().read()
        } else {
            client.lock(&name).unwrap()
        };
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let Some(g) = lock.try_lock(Duration::from_secs(5), None).await.unwrap() else {
                    continue;
                };
                shared.reading.fetch_add(1, Ordering::SeqCst);
                if shared.writing.load(Ordering::SeqCst) {
                    shared.violations.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(HOLD).await;
                shared.reading.fetch_sub(1, Ordering::SeqCst);
                shared.reads.fetch_add(1, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }
            Vec::new()
        }));
    }
    let client = lockwarden::Client::connect(&server.url()).await.unwrap();
    let lock = if rw {
        client.rw_lock(&name).unwrap().write()
    } else {
        client.lock(&name).unwrap()
    };
    let s = shared.clone();
    tasks.push(tokio::spawn(async move {
        let mut waits = Vec::new();
        while Instant::now() < end {
            let asked = Instant::now();
            let Some(g) = lock.try_lock(Duration::from_secs(5), None).await.unwrap() else {
                continue;
            };
            waits.push(asked.elapsed());
            if s.writing.swap(true, Ordering::SeqCst) || (rw && s.reading.load(Ordering::SeqCst) > 0) {
                s.violations.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(HOLD).await;
            s.writing.store(false, Ordering::SeqCst);
            s.writes.fetch_add(1, Ordering::SeqCst);
            g.unlock().await.unwrap();
        }
        waits
    }));
    let mut write_waits = Vec::new();
    for t in tasks {
        write_waits.extend(t.await.unwrap());
    }
    Row {
        reads: shared.reads.load(Ordering::SeqCst),
        writes: shared.writes.load(Ordering::SeqCst),
        secs: started.elapsed().as_secs_f64(),
        write_waits,
        cmds: server.commands_processed() - before,
        violations: shared.violations.load(Ordering::SeqCst),
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let secs = if benching {
        std::env::var("LOCKWARDEN_RW_SECS")
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
            "{:<11} {:>8} {:>8} {:>22} {:>9} {:>10}",
            "", "reads/s", "writes/s", "write wait p50/p99/max", "cmds/acq", "violations"
        );
        for rw in [true, false] {
            let mut r = row(&server, rw, secs).await;
            r.write_waits.sort();
            let label = if rw { "rw lock" } else { "plain lock" };
            let acquisitions = (r.reads + r.writes).max(1);
            println!(
                "{label:<11} {:>8.0} {:>8.0} {:>8.2}/{:.2}/{:.2} ms {:>9.1} {:>10}",
                r.reads as f64 / r.secs,
                r.writes as f64 / r.secs,
                percentile_ms(&r.write_waits, 0.5),
                percentile_ms(&r.write_waits, 0.99),
                r.write_waits.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
                r.cmds as f64 / acquisitions as f64,
                r.violations
            );
            assert_eq!(r.violations, 0, "{label}: a reader and a writer overlapped");
        }
    });
}
