//! The read-write lock under a read-heavy load (W7), beside a peer and
//! the reentrant lock, in one run against one throwaway server:
//!
//!     cargo bench --bench rw
//!
//! 8 reader tasks and 1 writer task, each with its own client, on one lock
//! name. A reader holds the read side for `HOLD` (standing for the work it
//! does under the lock), a writer the write side for the same time. Rows:
//! lockwarden's read-write lock; the peer, the `rlock` crate's read-write
//! lock at its defaults (it prefers readers and polls every 100 ms); the
//! reentrant lock, where readers exclude each other too; and the floor of
//! any lock that keeps lockwarden's read-write promises (readers wait
//! behind a waiting writer, so the writer gets its turns): tokio's fair
//! read-write lock in this process, each hold also paying the one round
//! trip to Redis (a PING) that the least a Redis lock costs per handoff
//! (a release reaching the server, which hands the lock on in place). Each row runs
//! `LOCKWARDEN_RW_SECS` seconds (default 5; `cargo test --benches` runs half
//! a second) and reports reads/s, writes/s, the writer's share of the
//! acquisitions, the writer's and the readers' waits (p50, p99, max), Redis
//! commands, Redis CPU and script calls per acquisition, and the safety
//! checks: no reader while a writer holds the lock, never two writers.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile_ms, RedisServer};
use rlock::AcquireOptions;

const READERS: usize = 8;
const HOLD: Duration = Duration::from_micros(500);
/// How long one acquisition may wait before the task asks again.
const PATIENCE: Duration = Duration::from_secs(5);

/// What a row runs.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `Client::rw_lock`.
    Rw,
    /// The peer: the `rlock` crate's read-write lock (a sorted set of
    /// readers and a writer key, scripts that read the server's time, a
    /// waiter that tries again every 100 ms; readers never wait for a
    /// waiting writer).
    Rlock,
    /// `Client::lock` for every task: readers exclude each other too.
    Plain,
    /// The floor (see the header): `tokio::sync::RwLock` (fair: a reader
    /// asking after a waiting writer queues behind it), each hold one
    /// round trip longer.
    Floor,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Rw => "rw lock",
            Kind::Rlock => "rlock",
            Kind::Plain => "plain lock",
            Kind::Floor => "floor",
        }
    }
}

/// One task's handle on the row's name: takes its side and gives it back.
enum Side {
    Lockwarden(lockwarden::Lock),
    Rlock {
        client: rlock::async_lock::RLock,
        name: String,
        write: bool,
    },
    Floor {
        client: lockwarden::Client,
        lock: Arc<tokio::sync::RwLock<()>>,
        write: bool,
    },
}

/// A hold of either library, given back by `release`.
enum Hold {
    Lockwarden(lockwarden::LockGuard),
    Read(rlock::async_lock::RReadLockGuard),
    Write(rlock::async_lock::RWriteLockGuard),
    FloorRead(tokio::sync::OwnedRwLockReadGuard<()>, lockwarden::Client),
    FloorWrite(tokio::sync::OwnedRwLockWriteGuard<()>, lockwarden::Client),
}

impl Side {
    async fn new(
        server: &RedisServer,
        kind: Kind,
        name: &str,
        write: bool,
        floor: &Arc<tokio::sync::RwLock<()>>,
    ) -> Side {
        if kind == Kind::Floor {
            let client = lockwarden::Client::connect(&server.url()).await.unwrap();
            let lock = floor.clone();
            return Side::Floor { client, lock, write };
        }
        if kind == Kind::Rlock {
            let client = rlock::async_lock::RLock::new(server.url()).await.unwrap();
            return Side::Rlock {
                client,
                name: name.to_string(),
                write,
            };
        }
        let client = lockwarden::Client::connect(&server.url()).await.unwrap();
        Side::Lockwarden(match (kind, write) {
            (Kind::Rw, false) => client.rw_lock(name).unwrap().read(),
            (Kind::Rw, true) => client.rw_lock(name).unwrap().write(),
            _ => client.lock(name).unwrap(),
        })
    }

    /// `None` when `PATIENCE` passed first.
    async fn take(&self) -> Option<Hold> {
        match self {
            Side::Lockwarden(lock) => lock.try_lock(PATIENCE, None).await.unwrap().map(Hold::Lockwarden),
            Side::Rlock { client, name, write } => {
                let options = AcquireOptions::builder().lock_timeout(Some(PATIENCE)).build().unwrap();
                let taken = if *write {
                    client.acquire_write_with_options(name, options).await.map(Hold::Write)
                } else {
                    client.acquire_read_with_options(name, options).await.map(Hold::Read)
                };
                match taken {
                    Ok(hold) => Some(hold),
                    Err(rlock::AcquireError::LockTimeout) => None,
                    Err(e) => panic!("rlock: {e}"),
                }
            }
            Side::Floor { client, lock, write } => Some(if *write {
                Hold::FloorWrite(lock.clone().write_owned().await, client.clone())
            } else {
                Hold::FloorRead(lock.clone().read_owned().await, client.clone())
            }),
        }
    }
}

/// The floor's round trip per hold: the release reaching the server.
async fn round_trip(client: &lockwarden::Client) {
    use fred::prelude::ClientLike;
    let _: String = client.redis().ping(None).await.unwrap();
}

impl Hold {
    async fn release(self) {
        match self {
            Hold::Lockwarden(g) => g.unlock().await.unwrap(),
            Hold::Read(mut g) => g.release().await.unwrap(),
            Hold::Write(mut g) => g.release().await.unwrap(),
            Hold::FloorRead(g, client) => {
                round_trip(&client).await;
                drop(g);
            }
            Hold::FloorWrite(g, client) => {
                round_trip(&client).await;
                drop(g);
            }
        }
    }
}

#[derive(Default)]
struct Shared {
    reading: AtomicUsize,
    writing: AtomicBool,
    violations: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
}

/// One task: takes its side until `end`, checks what it may overlap with,
/// and returns its waits.
async fn task(side: Side, write: bool, plain: bool, s: Arc<Shared>, end: Instant) -> Vec<Duration> {
    let mut waits = Vec::new();
    while Instant::now() < end {
        let asked = Instant::now();
        let Some(hold) = side.take().await else {
            continue;
        };
        waits.push(asked.elapsed());
        if write {
            if s.writing.swap(true, Ordering::SeqCst) || (!plain && s.reading.load(Ordering::SeqCst) > 0) {
                s.violations.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            s.reading.fetch_add(1, Ordering::SeqCst);
            if s.writing.load(Ordering::SeqCst) {
                s.violations.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(HOLD).await;
        if write {
            s.writing.store(false, Ordering::SeqCst);
            s.writes.fetch_add(1, Ordering::SeqCst);
        } else {
            s.reading.fetch_sub(1, Ordering::SeqCst);
            s.reads.fetch_add(1, Ordering::SeqCst);
        }
        hold.release().await;
    }
    waits
}

async fn row(server: &RedisServer, kind: Kind, secs: f64) {
    let name = format!("rw-bench-{}", kind.label().replace(' ', "-"));
    let shared = Arc::new(Shared::default());
    let floor = Arc::new(tokio::sync::RwLock::new(()));
    let mut sides = Vec::new();
    for i in 0..=READERS {
        sides.push((Side::new(server, kind, &name, i == READERS, &floor).await, i == READERS));
    }
    let (before, scripts_before, cpu_before) = (
        server.commands_processed(),
        server.command_calls("evalsha") + server.command_calls("eval"),
        server.cpu_seconds(),
    );
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(secs);
    let plain = kind == Kind::Plain;
    let tasks: Vec<_> = sides
        .into_iter()
        .map(|(side, write)| (write, tokio::spawn(task(side, write, plain, shared.clone(), end))))
        .collect();
    let (mut read_waits, mut write_waits) = (Vec::new(), Vec::new());
    for (write, t) in tasks {
        let waits = t.await.unwrap();
        if write {
            write_waits.extend(waits);
        } else {
            read_waits.extend(waits);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (reads, writes) = (
        shared.reads.load(Ordering::SeqCst),
        shared.writes.load(Ordering::SeqCst),
    );
    let n = (reads + writes).max(1) as f64;
    read_waits.sort();
    write_waits.sort();
    let waits = |w: &[Duration]| {
        format!(
            "{:.2}/{:.2}/{:.2}",
            percentile_ms(w, 0.5),
            percentile_ms(w, 0.99),
            w.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
        )
    };
    let violations = shared.violations.load(Ordering::SeqCst);
    println!(
        "{:<11} {:>8.0} {:>8.0} {:>6.1} % {:>20} {:>20} {:>9.1} {:>9.1} {:>9.2} {:>10}",
        kind.label(),
        reads as f64 / secs,
        writes as f64 / secs,
        writes as f64 * 100.0 / n,
        waits(&write_waits),
        waits(&read_waits),
        (server.commands_processed() - before) as f64 / n,
        (server.cpu_seconds() - cpu_before) * 1e6 / n,
        (server.command_calls("evalsha") + server.command_calls("eval") - scripts_before) as f64 / n,
        violations
    );
    assert_eq!(violations, 0, "{}: a reader and a writer overlapped", kind.label());
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
            "{:<11} {:>8} {:>8} {:>8} {:>20} {:>20} {:>9} {:>9} {:>9} {:>10}",
            "",
            "reads/s",
            "writes/s",
            "writes",
            "write wait ms",
            "read wait ms",
            "cmds/acq",
            "redis µs",
            "evals/acq",
            "violations"
        );
        for kind in [Kind::Rw, Kind::Rlock, Kind::Plain, Kind::Floor] {
            row(&server, kind, secs).await;
        }
    });
}
