//! The semaphore with expiring permits under contention, in one run
//! against one throwaway server:
//!
//!     cargo bench --bench semaphore
//!
//! 16 tasks, each with its own client, take one permit at a time of a
//! semaphore of `P` permits, hold it for `HOLD` and give it back, for
//! `LOCKWARDEN_SEM_SECS` seconds per row (default 5; `cargo test --benches`
//! runs half a second). Rows: 4 permits, and 1 permit (a lock's worth, the
//! reference in the same run), each for the semaphore, the fair
//! semaphore (`Client::fair_semaphore`) and two peers: the polling semaphore
//! most Redis libraries make (`Kind::Polling`, W8's reference) and the
//! queue of tokens the fair Python semaphores make (`Kind::Queue`, the fair
//! semaphore's reference). Reports
//! acquisitions/s, the wait (p50, p99, max), Redis commands, Redis CPU and
//! script calls per acquisition, the least and the most acquisitions of
//! one task as a share of the most (1.00: all served alike) and the most
//! permits ever held at once, which must not pass `P`.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile_ms, RedisServer};

const TASKS: usize = 16;
const HOLD: Duration = Duration::from_micros(500);

/// What a row runs.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `Client::semaphore`.
    Plain,
    /// `Client::fair_semaphore`.
    Fair,
    /// The peer: a semaphore as most Redis semaphore libraries make it (the
    /// npm package redis-semaphore among them), written here over fred: a
    /// sorted set of holders scored by their deadline, an acquire script
    /// that drops the expired ones and adds the caller while fewer than
    /// the permits remain, a release that removes it, and a waiter that
    /// tries again every 10 ms (redis-semaphore's default retry interval).
    /// No wake-ups, no fencing, no replay safety.
    Polling,
    /// The fair peer: a semaphore as the fair Python Redis semaphores make
    /// it, written here over fred: a list holding one token per permit,
    /// `BLPOP` to take one (Redis serves blocked clients first come, first
    /// served), `RPUSH` to give it back. No leases (a holder that dies
    /// keeps its permit for good), no fencing, no replay safety.
    Queue,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Polling => "poll",
            Kind::Queue => "queue",
        }
    }
}

/// The polling peer's acquire: KEYS[1] the holders; ARGV: the permits, the
/// lease in ms, the caller's id. 1 when taken.
const POLL_ACQUIRE: &str = "local t = redis.call('TIME') \
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
    if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then \
      redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3]) \
      redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0";

/// What a row's workers count together: holders inside now, the most ever
/// inside, acquisitions.
#[derive(Clone, Default)]
struct Tally {
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    count: Arc<AtomicU64>,
}

/// One acquire-hold-release loop of a row's kind, until `end`: the waits.
async fn worker(
    server: &RedisServer,
    kind: Kind,
    name: String,
    permits: u32,
    end: Instant,
    tally: Tally,
) -> tokio::task::JoinHandle<Vec<Duration>> {
    let mut waits = Vec::new();
    let Tally { inside, most, count } = tally;
    let note = move |waits: &mut Vec<Duration>, asked: Instant| {
        waits.push(asked.elapsed());
        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(n, Ordering::SeqCst);
        (inside.clone(), count.clone())
    };
    if kind == Kind::Polling {
        use fred::prelude::{Builder, ClientLike, Config, LuaInterface};
        use fred::types::{ClusterHash, CustomCommand};
        let client = Builder::from_config(Config::from_url(&server.url()).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        let sha: String = client.script_load(POLL_ACQUIRE).await.unwrap();
        let id = uuid_like();
        return tokio::spawn(async move {
            while Instant::now() < end {
                let asked = Instant::now();
                let give_up = asked + Duration::from_secs(5);
                let mut got = false;
                while Instant::now() < give_up {
                    let args = vec![permits.to_string(), "30000".to_string(), id.clone()];
                    let r: i64 = client.evalsha(&sha, vec![name.clone()], args).await.unwrap();
                    if r == 1 {
                        got = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                if !got {
                    continue;
                }
                let (inside, count) = note(&mut waits, asked);
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                count.fetch_add(1, Ordering::SeqCst);
                let zrem = CustomCommand::new_static("ZREM", ClusterHash::FirstKey, false);
                let _: i64 = client.custom(zrem, vec![name.clone(), id.clone()]).await.unwrap();
            }
            waits
        });
    }
    if kind == Kind::Queue {
        use fred::prelude::{Builder, ClientLike, Config};
        use fred::types::{ClusterHash, CustomCommand, Value};
        let client = Builder::from_config(Config::from_url(&server.url()).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        return tokio::spawn(async move {
            let blpop = CustomCommand::new_static("BLPOP", ClusterHash::FirstKey, true);
            let rpush = CustomCommand::new_static("RPUSH", ClusterHash::FirstKey, false);
            while Instant::now() < end {
                let asked = Instant::now();
                let got: Value = client
                    .custom(blpop.clone(), vec![name.clone(), "5".into()])
                    .await
                    .unwrap();
                let Value::Array(pair) = got else {
                    continue;
                };
                let token = pair[1].as_string().unwrap();
                let (inside, count) = note(&mut waits, asked);
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                count.fetch_add(1, Ordering::SeqCst);
                let _: i64 = client.custom(rpush.clone(), vec![name.clone(), token]).await.unwrap();
            }
            waits
        });
    }
    let client = lockwarden::Client::connect(&server.url()).await.unwrap();
    let sem = if kind == Kind::Fair {
        client.fair_semaphore(&name, permits).unwrap()
    } else {
        client.semaphore(&name, permits).unwrap()
    };
    tokio::spawn(async move {
        let _client = client;
        while Instant::now() < end {
            let asked = Instant::now();
            let Some(p) = sem.try_acquire(Duration::from_secs(5), None).await.unwrap() else {
                continue;
            };
            let (inside, count) = note(&mut waits, asked);
            tokio::time::sleep(HOLD).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            count.fetch_add(1, Ordering::SeqCst);
            p.release().await.unwrap();
        }
        waits
    })
}

/// An id of its own for each polling worker.
fn uuid_like() -> String {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("poll-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst))
}

async fn row(server: &RedisServer, permits: u32, kind: Kind, secs: f64) {
    let name = format!("sem-bench-{permits}-{}", kind.label());
    if kind == Kind::Queue {
        let mut push = vec!["RPUSH".to_string(), name.clone()];
        push.extend((0..permits).map(|i| format!("permit-{i}")));
        let push: Vec<&str> = push.iter().map(String::as_str).collect();
        server.cmd(&push);
    }
    let tally = Tally::default();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (before, scripts_before, cpu_before) = (
        server.commands_processed(),
        server.command_calls("evalsha"),
        server.cpu_seconds(),
    );
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        tasks.push(worker(server, kind, name.clone(), permits, end, tally.clone()).await);
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
    let n = tally.count.load(Ordering::SeqCst).max(1);
    println!(
        "{:>5} {permits:>7} {:>10.0} {:>8.2}/{:.2}/{:.2} ms {:>9.1} {:>10.1} {:>9.1} {:>11.2} {:>9}",
        kind.label(),
        n as f64 / secs,
        percentile_ms(&waits, 0.5),
        percentile_ms(&waits, 0.99),
        waits.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        (server.commands_processed() - before) as f64 / n as f64,
        (server.cpu_seconds() - cpu_before) * 1e6 / n as f64,
        (server.command_calls("evalsha") - scripts_before) as f64 / n as f64,
        fewest / most_of_one,
        tally.most.load(Ordering::SeqCst)
    );
    assert!(
        tally.most.load(Ordering::SeqCst) <= permits as usize,
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
            "{:>5} {:>7} {:>10} {:>22} {:>9} {:>10} {:>9} {:>11} {:>9}",
            "kind",
            "permits",
            "acq/s",
            "wait p50/p99/max",
            "cmds/acq",
            "redis µs",
            "evals/acq",
            "share min",
            "most held"
        );
        for kind in [Kind::Plain, Kind::Fair, Kind::Polling, Kind::Queue] {
            for permits in [4, 1] {
                row(&server, permits, kind, secs).await;
            }
        }
    });
}
