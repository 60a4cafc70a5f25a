//! lockwarden side by side with what users would pick instead, in one run
//! against the same throwaway servers:
//!
//!     cargo bench --bench peers
//!
//! - `lockwarden`: `lock()` + `unlock()` (watchdog lease), at its defaults;
//! - `rslock`: the Redlock crate, `lock(key, 30 s)` + `unlock`, at its defaults;
//! - `floor`: a bare `SET key token NX PX 30000` and a compare-and-delete
//!   script, sent through fred: the cheapest thing that takes and gives back
//!   an expiring lock (no reentrancy, no replay safety, no fencing, no
//!   waiting).
//! - `kept floor`: the same work as lockwarden's scripts on an uncontended
//!   lock (hash with the owner's count, fencing `INCR`, the take's record in
//!   the hold, the lease; a release that checks owner and token, deletes,
//!   and publishes only for a waiter), written as two bare scripts and sent
//!   through fred without any client logic: the cheapest thing that keeps
//!   the guarantees, sent the same way.
//!
//! Workloads: W1 (one task, one key), W2 (32 tasks on distinct keys, one
//! client), W4 (W1 over five independent masters). Each row runs for
//! `LOCKWARDEN_PEERS_SECS` seconds (default 3; `cargo test --benches` runs
//! a tenth of a second) after a short warm-up; the rows of one workload are
//! interleaved in `LOCKWARDEN_PEERS_ROUNDS` rounds (default 2) and summed.
//! Redis commands and CPU per pair come from `INFO commandstats` and
//! `INFO cpu` of the servers used, read before and after each row; client
//! CPU per pair from this process's own CPU time (`getrusage`), so
//! it includes the bench's loop. The
//! servers share the machine with the clients; pin them apart with
//! `taskset` to compare with other runs.
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/floors.rs"]
mod floors;
#[path = "support/workloads.rs"]
mod workloads;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::RedisServer;

/// What one row measured.
#[derive(Default, Clone)]
struct Row {
    pairs: u64,
    secs: f64,
    samples: Vec<Duration>,
    cmds: u64,
    cpu_s: f64,
    /// CPU seconds of this process (the clients) during the row.
    client_cpu_s: f64,
}

impl Row {
    fn add(&mut self, other: Row) {
        self.pairs += other.pairs;
        self.secs += other.secs;
        self.samples.extend(other.samples);
        self.cmds += other.cmds;
        self.cpu_s += other.cpu_s;
        self.client_cpu_s += other.client_cpu_s;
    }
}

/// Every command the servers ran so far, and their CPU seconds.
fn server_totals(servers: &[&RedisServer]) -> (u64, f64) {
    let mut cmds = 0;
    let mut cpu = 0.0;
    for s in servers {
        let stats = s.cmd(&["INFO", "commandstats"]);
        for line in stats.as_str().unwrap_or("").lines() {
            if let Some(calls) = line.split("calls=").nth(1).and_then(|v| v.split(',').next()) {
                cmds += calls.parse::<u64>().unwrap_or(0);
            }
        }
        cpu += s.cpu_seconds();
    }
    (cmds, cpu)
}

/// Runs `tasks` tasks, each calling `pair(task)` in a loop for `secs`; the
/// INFO calls that read the servers' totals are subtracted from the count.
async fn measure<F, Fut>(servers: &[&RedisServer], tasks: usize, secs: f64, pair: F) -> Row
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let pair = Arc::new(pair);
    // Warm-up: connections, script caches, the first allocations.
    let warm = Instant::now() + Duration::from_secs_f64((secs / 10.0).min(0.3));
    while Instant::now() < warm {
        pair(0).await;
    }
    let (cmds0, cpu0) = server_totals(servers);
    let own0 = workloads::client_cpu_us() / 1e6;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let pair = pair.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                // Bounded in count as well as in time.
                while Instant::now() < end && samples.len() < 2_000_000 {
                    let s = Instant::now();
                    pair(t).await;
                    samples.push(s.elapsed());
                }
                samples
            })
        })
        .collect();
    let mut samples = Vec::new();
    for h in handles {
        samples.extend(h.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    let own1 = workloads::client_cpu_us() / 1e6;
    let (cmds1, cpu1) = server_totals(servers);
    Row {
        pairs: samples.len() as u64,
        secs,
        samples,
        // Two INFO calls per server read the totals once.
        cmds: (cmds1 - cmds0).saturating_sub(2 * servers.len() as u64),
        cpu_s: cpu1 - cpu0,
        client_cpu_s: own1 - own0,
    }
}

fn p50_us(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples.get(samples.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

async fn run(secs: f64, rounds: usize) -> Vec<(&'static str, &'static str, Row)> {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let one = &servers[..1];
    let all: Vec<&RedisServer> = servers.iter().collect();

    let lw1 = lockwarden::Client::connect(&urls[0]).await.unwrap();
    let lw5 = lockwarden::Client::builder_for_masters(&urls).build().await.unwrap();
    let rs1 = Arc::new(rslock::LockManager::new(vec![urls[0].clone()]));
    let rs5 = Arc::new(rslock::LockManager::new(urls.clone()));
    let fl1 = Arc::new(vec![floors::fred_client(&urls[0]).await]);
    let mut fl5 = Vec::new();
    for u in &urls {
        fl5.push(floors::fred_client(u).await);
    }
    let fl5 = Arc::new(fl5);
    let shas = floors::Shas::load(&fl5).await;
    let sha = shas.compare_and_delete;
    let kept = Arc::new(shas.kept);

    let mut out = Vec::new();
    for (workload, tasks, five) in [("W1", 1usize, false), ("W2", 32, false), ("W4", 1, true)] {
        let used: Vec<&RedisServer> = if five { all.clone() } else { one.iter().collect() };
        let mut rows: [Row; 4] = Default::default();
        for _ in 0..rounds {
            let lw = if five { lw5.clone() } else { lw1.clone() };
            let locks: Arc<Vec<lockwarden::Lock>> = Arc::new(
                (0..tasks)
                    .map(|t| lw.lock(&format!("peers:{workload}:lw:{t}")).unwrap())
                    .collect(),
            );
            rows[0].add(
                measure(&used, tasks, secs, move |t| {
                    let lock = locks[t].clone();
                    async move { lock.lock().await.unwrap().unlock().await.unwrap() }
                })
                .await,
            );
            let rs = if five { rs5.clone() } else { rs1.clone() };
            let keys: Arc<Vec<String>> = Arc::new((0..tasks).map(|t| format!("peers:{workload}:rs:{t}")).collect());
            rows[1].add(
                measure(&used, tasks, secs, move |t| {
                    let (rs, keys) = (rs.clone(), keys.clone());
                    async move {
                        let l = rs.lock(keys[t].as_bytes(), Duration::from_secs(30)).await.unwrap();
                        rs.unlock(&l).await;
                    }
                })
                .await,
            );
            let fl = if five { fl5.clone() } else { fl1.clone() };
            let sha = sha.clone();
            let keys: Arc<Vec<String>> = Arc::new((0..tasks).map(|t| format!("peers:{workload}:floor:{t}")).collect());
            rows[2].add(
                measure(&used, tasks, secs, move |t| {
                    let (fl, sha, keys) = (fl.clone(), sha.clone(), keys.clone());
                    async move { floors::floor_pair(&fl, &sha, &keys[t], "token-of-this-pair").await }
                })
                .await,
            );
            let fl = if five { fl5.clone() } else { fl1.clone() };
            let kept = kept.clone();
            let keys: Arc<Vec<String>> = Arc::new((0..tasks).map(|t| format!("peers:{workload}:kept:{t}")).collect());
            rows[3].add(
                measure(&used, tasks, secs, move |t| {
                    let (fl, kept, keys) = (fl.clone(), kept.clone(), keys.clone());
                    async move { floors::kept_floor_pair(&fl, &kept, &keys[t]).await }
                })
                .await,
            );
        }
        let [a, b, c, d] = rows;
        out.push((workload, "lockwarden", a));
        out.push((workload, "rslock", b));
        out.push((workload, "floor", c));
        out.push((workload, "kept floor", d));
    }
    out
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: then
    // one short round checks that every row still runs.
    let benching = std::env::args().any(|a| a == "--bench");
    let env = |name: &str, default: f64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (secs, rounds) = if benching {
        (
            env("LOCKWARDEN_PEERS_SECS", 3.0),
            env("LOCKWARDEN_PEERS_ROUNDS", 2.0) as usize,
        )
    } else {
        (0.1, 1)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rows = rt.block_on(run(secs, rounds.max(1)));
    println!(
        "{:<4} {:<11} {:>10} {:>9} {:>9} {:>14} {:>15}",
        "", "", "pairs/s", "p50 µs", "cmds/pair", "Redis µs/pair", "client µs/pair"
    );
    for (workload, peer, mut row) in rows {
        let per_s = row.pairs as f64 / row.secs.max(1e-9);
        let p50 = p50_us(&mut row.samples);
        let pairs = row.pairs.max(1) as f64;
        println!(
            "{workload:<4} {peer:<11} {per_s:>10.0} {p50:>9.1} {:>9.1} {:>14.1} {:>15.1}",
            row.cmds as f64 / pairs,
            row.cpu_s * 1e6 / pairs,
            row.client_cpu_s * 1e6 / pairs
        );
        if benching {
            println!(
                "{}",
                serde_json::json!({
                    "workload": workload, "peer": peer, "pairs_per_s": per_s, "p50_us": p50,
                    "cmds_per_pair": row.cmds as f64 / pairs, "redis_cpu_us_per_pair": row.cpu_s * 1e6 / pairs,
                    "client_cpu_us_per_pair": row.client_cpu_s * 1e6 / pairs,
                })
            );
        }
    }
}
