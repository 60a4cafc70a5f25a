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
//! W3 is also run as a **kept floor** (`"library":"kept floor"`): the work
//! lockwarden's non-fair lock does on the server for a contended
//! acquisition, as two bare scripts sent through fred with no client logic,
//! so the cheapest thing that keeps the guarantees, measured in the same
//! run. The try takes a free lock the way lockwarden's does (`PTTL`, fencing
//! `INCR`, the hash with the owner's count, token and the take's record, the
//! lease); refused, it puts its worker's ask (the worker, its owner field
//! and its request's record key, one list element) at the end of the
//! lock's waiters and answers the holder's remaining lease. The release
//! checks owner and token, deletes, and hands the lock to the first waiter
//! as a take of its request would (the next token, the hash, the lease),
//! telling it on its own channel: a direct grant, as lockwarden's unlock
//! makes one. A worker subscribes once to its channel and, refused, sleeps
//! until its grant or the holder's remaining lease, then tries again.
//!
//! Prints one JSON object per line. Besides the workload's own fields, each
//! row has the server's commands and CPU per acquisition (`INFO` before and
//! after) and this process's CPU per acquisition (all the clients, and the
//! bench's own bookkeeping; also its system part alone), all counted over
//! the warm-up too.
//!
//! `LOCKWARDEN_BENCH_ROWS` picks rows, for a profiler attached to one of
//! them: a comma-separated list of `lockwarden` (W3), `rslock`,
//! `kept-floor` and `fair` (W5); all four by default.
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
        let all = [
            Run::Lockwarden { fair: false },
            Run::Rslock,
            Run::KeptFloor,
            Run::Lockwarden { fair: true },
        ];
        let rows = std::env::var("LOCKWARDEN_BENCH_ROWS").unwrap_or_default();
        let rows: Vec<&str> = rows.split(',').map(str::trim).filter(|r| !r.is_empty()).collect();
        if let Some(bad) = rows.iter().find(|r| !all.iter().any(|run| run.row() == **r)) {
            panic!("LOCKWARDEN_BENCH_ROWS: unknown row {bad:?} (rows: lockwarden, rslock, kept-floor, fair)");
        }
        for run in all {
            if !rows.is_empty() && !rows.contains(&run.row()) {
                continue;
            }
            let (cmds0, redis_cpu0) = (server.commands_processed(), server.cpu_seconds());
            let client_cpu0 = workloads::client_cpu_split_us();
            let u = url.clone();
            let r = tokio::spawn(async move {
                match run {
                    Run::Lockwarden { fair } => workloads::contended(&u, fair, 8, duration).await.unwrap(),
                    Run::Rslock => rslock_w3(&u, 8, duration).await,
                    Run::KeptFloor => kept_floor_w3(&u, 8, duration).await,
                }
            })
            .await
            .unwrap();
            let client_cpu1 = workloads::client_cpu_split_us();
            let client_sys = client_cpu1.1 - client_cpu0.1;
            let client_cpu = client_cpu1.0 - client_cpu0.0 + client_sys;
            let (cmds1, redis_cpu1) = (server.commands_processed(), server.cpu_seconds());
            let ops = r.all_ops.max(1) as f64;
            let line = r.json();
            let library = match run {
                Run::Lockwarden { .. } => "lockwarden",
                Run::Rslock => "rslock",
                Run::KeptFloor => "kept floor",
            };
            println!(
                "{},\"library\":\"{library}\",\"redis_cmds_per_op_incl_warmup\":{:.1},\
                 \"redis_cpu_us_per_op_incl_warmup\":{:.1},\"client_cpu_us_per_op_incl_warmup\":{:.1},\
                 \"client_sys_cpu_us_per_op_incl_warmup\":{:.1}}}",
                &line[..line.len() - 1],
                (cmds1 - cmds0) as f64 / ops,
                (redis_cpu1 - redis_cpu0) * 1e6 / ops,
                client_cpu / ops,
                client_sys / ops,
            );
            assert_eq!((r.violations, r.overlaps, r.lost_updates), (0, 0, 0), "safety");
        }
    });
}

#[derive(Clone, Copy)]
enum Run {
    Lockwarden { fair: bool },
    Rslock,
    KeptFloor,
}

impl Run {
    /// The row's name in `LOCKWARDEN_BENCH_ROWS`.
    fn row(self) -> &'static str {
        match self {
            Run::Lockwarden { fair: false } => "lockwarden",
            Run::Rslock => "rslock",
            Run::KeptFloor => "kept-floor",
            Run::Lockwarden { fair: true } => "fair",
        }
    }
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
                let hold = race.hold(worker, t_req);
                rl.unlock(&lock).await;
                holds.push(hold);
            }
            holds
        }));
    }
    race.finish("W3", tasks).await
}

/// The kept floor's try (see the header). KEYS: lock, token counter,
/// waiters; ARGV: owner, lease ms, the take's record, worker. Answers the
/// token (> 0) when taken, else `-1 - PTTL` (the worker's ask listed).
const KEPT_TRY: &str = "local p = redis.call('PTTL', KEYS[1]) \
    if p == -2 then \
      local t = redis.call('INCR', KEYS[2]) \
      redis.call('HSET', KEYS[1], ARGV[1], 1, ':token', t, ':take', ARGV[3], ':kind', 'reentrant') \
      redis.call('PEXPIRE', KEYS[1], ARGV[2]) return t end \
    redis.call('RPUSH', KEYS[3], ARGV[4] .. ' ' .. ARGV[1] .. ' ' .. ARGV[3]) return -1 - p";

/// The kept floor's release. KEYS: lock, waiters, token counter; ARGV:
/// owner, token, wake channel prefix, lease ms. Answers 0, or -1 when not
/// the holder; the first waiter is handed the lock ("<token>" on its
/// channel).
const KEPT_RELEASE: &str = "local h = redis.call('HMGET', KEYS[1], ARGV[1], ':token') \
    if not h[1] or h[2] ~= ARGV[2] then return -1 end \
    redis.call('DEL', KEYS[1]) \
    local w = redis.call('LPOP', KEYS[2]) \
    if w then \
      local id, owner, rec = string.match(w, '^(%S+) (%S+) (%S+)$') \
      local t = redis.call('INCR', KEYS[3]) \
      redis.call('HSET', KEYS[1], owner, 1, ':token', t, ':take', rec, ':kind', 'reentrant') \
      redis.call('PEXPIRE', KEYS[1], ARGV[4]) \
      redis.call('PUBLISH', ARGV[3] .. id, t) end return 0";

/// W3 as the kept floor (see the header): `workers` workers, each with its
/// own fred client and subscriber, contend for one key for a 1 s warm-up
/// plus `duration`.
async fn kept_floor_w3(url: &str, workers: usize, duration: Duration) -> workloads::Contended {
    use fred::prelude::{Builder, ClientLike, Config, EventInterface, LuaInterface, PubsubInterface};
    use std::time::Instant;

    const KEYS: [&str; 3] = ["{w3kept}", "{w3kept}:token", "{w3kept}:waiters"];
    const WAKE: &str = "{w3kept}:wake:";
    let config = Config::from_url(url).unwrap();
    let race = workloads::Race::new(duration);
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let client = Builder::from_config(config.clone()).build().unwrap();
        client.init().await.unwrap();
        let sub = Builder::from_config(config.clone()).build_subscriber_client().unwrap();
        sub.init().await.unwrap();
        let mut wakes = sub.message_rx();
        sub.subscribe(format!("{WAKE}{worker}")).await.unwrap();
        let take: String = client.script_load(KEPT_TRY).await.unwrap();
        let release: String = client.script_load(KEPT_RELEASE).await.unwrap();
        let race = race.clone();
        tasks.push(tokio::spawn(async move {
            let _sub = sub;
            let owner = format!("kept-floor-client-{worker}:1");
            let mut holds = Vec::new();
            let mut attempts = 0u64;
            while race.running() {
                let t_req = Instant::now();
                let deadline = t_req + Duration::from_secs(5);
                let token = loop {
                    attempts += 1;
                    let rec = format!("{worker}:{attempts:016x}");
                    let args = vec![owner.clone(), "30000".to_string(), rec, worker.to_string()];
                    let r: i64 = client.evalsha(&take, KEYS.to_vec(), args).await.unwrap();
                    if r > 0 {
                        break Some(r);
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break None;
                    }
                    // Handed the lock by a release, or the holder's lease ran
                    // out: try again.
                    let pttl = Duration::from_millis((-1 - r).max(0) as u64);
                    if let Ok(Ok(m)) = tokio::time::timeout(pttl.min(left), wakes.recv()).await {
                        if let Some(t) = m.value.as_str().and_then(|t| t.parse::<i64>().ok()) {
                            break Some(t);
                        }
                    }
                };
                let Some(token) = token else {
                    race.error();
                    continue;
                };
                let hold = race.hold(worker, t_req);
                let args = vec![owner.clone(), token.to_string(), WAKE.to_string(), "30000".to_string()];
                let r: i64 = client
                    .evalsha(&release, vec![KEYS[0], KEYS[2], KEYS[1]], args)
                    .await
                    .unwrap();
                if r != 0 {
                    race.error();
                }
                holds.push(hold);
            }
            holds
        }));
    }
    race.finish("W3", tasks).await
}
