//! W3 (non-fair) and W5 (fair) of the README's benchmark workloads against a throwaway local
//! redis-server, with the PING round trip measured in the same run:
//!
//!     cargo bench --bench contended            # 10 s per workload
//!     LOCKWARDEN_BENCH_SECS=3 cargo bench --bench contended
//!     LOCKWARDEN_BENCH_THREADS=1 cargo bench --bench contended
//!
//! All workers' clients share one tokio runtime of `LOCKWARDEN_BENCH_THREADS`
//! worker threads (default 2). On a 2-core host that also runs the
//! redis-server, 2 busy client threads and Redis compete for the cores, and
//! the handoff chain waits for preempted threads; 1 thread leaves Redis a
//! core. README reports both.
//!
//! W3 is also run with rslock (the Redlock crate, a dev-dependency) at its
//! defaults, as a user would pick instead: `acquire` (which retries every
//! 0–200 ms until it gets the lock), 30 s TTL, `unlock`; its row is
//! `"workload":"W3","library":"rslock"`.
//!
//! Prints one JSON object per line.
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/workloads.rs"]
mod workloads;

use std::time::Duration;

fn main() {
    // `cargo test --benches` runs this once with `--bench` absent: keep it short then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("LOCKWARDEN_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 0.5 } else { 10.0 });
    let duration = Duration::from_secs_f64(secs);
    let threads: usize = std::env::var("LOCKWARDEN_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap();
    let server = common::RedisServer::start();
    let url = server.url();
    rt.block_on(async {
        let c = lockwarden::Client::connect(&url).await.unwrap();
        let fred = c.redis().clone();
        let ping = tokio::spawn(async move { workloads::ping_us(&fred, 5000).await })
            .await
            .unwrap();
        println!(
            "{{\"limit\":\"ping\",\"p50_us\":{:.1},\"p99_us\":{:.1},\"client_threads\":{threads}}}",
            ping.p50, ping.p99
        );
        for run in [
            Run::Lockwarden { fair: false },
            Run::Rslock,
            Run::Lockwarden { fair: true },
        ] {
            let cmds0: u64 = server
                .info_field("stats", "total_commands_processed")
                .unwrap()
                .parse()
                .unwrap();
            let u = url.clone();
            let r = tokio::spawn(async move {
                match run {
                    Run::Lockwarden { fair } => workloads::contended(&u, fair, 8, duration).await.unwrap(),
                    Run::Rslock => rslock_w3(&u, 8, duration).await,
                }
            })
            .await
            .unwrap();
            let cmds1: u64 = server
                .info_field("stats", "total_commands_processed")
                .unwrap()
                .parse()
                .unwrap();
            let line = r.json();
            let library = match run {
                Run::Lockwarden { .. } => "lockwarden",
                Run::Rslock => "rslock",
            };
            println!(
                "{},\"library\":\"{library}\",\"redis_cmds_per_op_incl_warmup\":{:.1}}}",
                &line[..line.len() - 1],
                (cmds1 - cmds0) as f64 / r.all_ops.max(1) as f64
            );
            assert_eq!((r.violations, r.overlaps, r.lost_updates), (0, 0, 0), "safety");
        }
    });
}

#[derive(Clone, Copy)]
enum Run {
    Lockwarden { fair: bool },
    Rslock,
}

/// W3 with rslock: `workers` workers, each with its own lock manager (its
/// own connection), contend for one key for a 1 s warm-up plus `duration`.
async fn rslock_w3(url: &str, workers: usize, duration: Duration) -> workloads::Contended {
    use std::time::Instant;

    let race = workloads::Race::new(duration);
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let rl = rslock::LockManager::new(vec![url.to_string()]);
        let race = race.clone();
        tasks.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            while race.running() {
                let t_req = Instant::now();
                let Ok(lock) = rl.acquire_no_guard("w3-rslock", Duration::from_secs(30)).await else {
                    race.error();
                    continue;
                };
                let t_acq = Instant::now();
                race.critical();
                let t_rel = Instant::now();
                rl.unlock(&lock).await;
                holds.push(workloads::Hold {
                    worker,
                    t_req,
                    t_acq,
                    t_rel,
                });
            }
            holds
        }));
    }
    race.finish("W3", tasks).await
}
