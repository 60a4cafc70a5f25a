//! `lockwarden bench`: the benchmark workloads (W1–W6, see the README)
//! against one server,
//! with the limits measured in the same run.

#[path = "../../../benches/support/workloads.rs"]
mod workloads;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Args;
use fred::prelude::{ClientLike, LuaInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use serde_json::{json, Map};

use crate::{Ctx, EX_UNAVAILABLE, EX_USAGE};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// W1, W2, W3, W4, W5, W6 or all.
    #[arg(long, default_value = "all")]
    workload: String,
    /// Measured time per workload (after a 1 s warm-up).
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "10s")]
    duration: Duration,
    /// Workers for W2 (default 32), W3 and W5 (default 8).
    #[arg(long)]
    workers: Option<usize>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// A hash-lock-like acquire script: the EVALSHA the limits are measured with.
const BARE_ACQUIRE: &str =
    "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
     redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil end \
     return redis.call('pttl', KEYS[1])";

/// Server counters read from INFO.
#[derive(Clone, Copy)]
struct Counters {
    commands: f64,
    cpu_us: f64,
    evalsha: f64,
    at: Instant,
}

async fn counters(redis: &fred::clients::Client) -> Option<Counters> {
    let info: String = redis
        .custom(
            CustomCommand::new_static("INFO", ClusterHash::Random, false),
            vec!["everything"],
        )
        .await
        .ok()?;
    let field = |name: &str| -> Option<f64> {
        info.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|v| v.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        })
    };
    let evalsha = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("cmdstat_evalsha:calls=")
                .and_then(|v| v.split(',').next()?.parse().ok())
        })
        .unwrap_or(0.0);
    Some(Counters {
        commands: field("total_commands_processed")?,
        cpu_us: (field("used_cpu_user")? + field("used_cpu_sys")?) * 1e6,
        evalsha,
        at: Instant::now(),
    })
}

/// The client's CPU per operation: with the server's, what a host with few
/// cores has to fit into each operation.
fn add_client_cost(m: &mut Map<String, serde_json::Value>, cpu_us: f64, all_ops: usize) {
    let ops = all_ops.max(1) as f64;
    m.insert(
        "client_cpu_us_per_op".into(),
        json!((cpu_us / ops * 10.0).round() / 10.0),
    );
}

/// The counters of every master added up (`None` if any cannot be read).
async fn all_counters(masters: &[&fred::clients::Client]) -> Option<Counters> {
    let all = futures::future::join_all(masters.iter().map(|m| counters(m))).await;
    all.into_iter().try_fold(None::<Counters>, |sum, c| {
        let c = c?;
        Some(Some(match sum {
            None => c,
            Some(s) => Counters {
                commands: s.commands + c.commands,
                cpu_us: s.cpu_us + c.cpu_us,
                evalsha: s.evalsha + c.evalsha,
                at: s.at,
            },
        }))
    })?
}

struct Report {
    json: bool,
    header_printed: std::cell::Cell<bool>,
    /// W6's result, printed after the table.
    w6: std::cell::RefCell<Option<Map<String, serde_json::Value>>>,
}

/// The table's columns: heading, the JSON field shown, width.
const COLUMNS: &[(&str, &str, usize)] = &[
    ("ops/s", "ops_per_s", 10),
    ("p50 µs", "p50_us", 9),
    ("p99 µs", "p99_us", 9),
    ("gap p50 µs", "gap_p50_us", 11),
    ("errors", "errors", 7),
    ("cmds/op", "redis_cmds_per_op", 8),
    ("cpu µs/op", "redis_cpu_us_per_op", 10),
    ("2 inside", "violations", 9),
];

/// What the table's columns mean, printed under it.
const LEGEND: &str = "\
ops/s: lock + unlock pairs per second, all workers together. p50/p99 µs: one
pair's time (W3, W5: wait + hold + release). gap p50 µs: from one release to
the next holder's grant (W3, W5). errors: failed calls. cmds/op and cpu µs/op:
Redis commands and Redis CPU per pair (INFO). 2 inside: times a worker found
another inside its critical section (must be 0). W6 is per renewal tick.
--json has every field.";

impl Report {
    fn new(json: bool) -> Report {
        Report {
            json,
            header_printed: std::cell::Cell::new(false),
            w6: Default::default(),
        }
    }

    /// After the last row: W6's line and what the columns mean.
    fn finish(&self) {
        if self.json {
            return;
        }
        if let Some(w6) = self.w6.take() {
            let field = |k: &str| w6.get(k).map_or("-".to_string(), |v| v.to_string());
            println!(
                "\nW6: the watchdog holding {} locks: {} Redis commands ({} script calls) per renewal tick, \
                 Redis CPU {} %, {} lost",
                field("locks"),
                field("redis_cmds_per_tick"),
                field("script_calls_per_tick"),
                field("redis_cpu_pct"),
                field("lost"),
            );
        }
        if self.header_printed.get() {
            println!("\n{LEGEND}");
        }
    }

    /// One result: a JSON line, or a row of the table (a person reading it
    /// gets the same numbers, aligned; `--json` has every field).
    fn emit(&self, mut obj: Map<String, serde_json::Value>) {
        if self.json {
            println!("{}", serde_json::Value::Object(std::mem::take(&mut obj)));
            return;
        }
        if obj.get("workload").and_then(|w| w.as_str()) == Some("W6") {
            // Per renewal tick, not per lock + unlock: a row of its own.
            self.w6.replace(Some(obj));
            return;
        }
        if !self.header_printed.replace(true) {
            let mut line = format!("{:<22}", "workload");
            for (head, _, width) in COLUMNS {
                line.push_str(&format!(" {head:>width$}"));
            }
            println!("{line}");
        }
        let name = match (obj.get("workload"), obj.get("limit"), obj.get("peer")) {
            (Some(w), _, Some(p)) => format!("{} ({})", w.as_str().unwrap_or(""), p.as_str().unwrap_or("")),
            (Some(w), _, None) => w.as_str().unwrap_or("").to_string(),
            (None, Some(l), _) => format!("limit {}", l.as_str().unwrap_or("")),
            _ => String::new(),
        };
        let mut line = format!("{name:<22}");
        for (_, field, width) in COLUMNS {
            let cell = match obj.get(*field).and_then(serde_json::Value::as_f64) {
                Some(f) if f.fract() != 0.0 => format!("{f:.1}"),
                Some(f) => format!("{f:.0}"),
                None => "-".to_string(),
            };
            line.push_str(&format!(" {cell:>width$}"));
        }
        println!("{line}");
    }
}

/// Shows what runs on stderr; a ticking counter when stderr is a terminal.
fn progress(label: &str, total: Duration) -> tokio::task::JoinHandle<()> {
    let label = label.to_string();
    let tty = std::io::stderr().is_terminal();
    eprintln!("lockwarden bench: {label} ({:.0} s)", total.as_secs_f64());
    tokio::spawn(async move {
        if !tty {
            return;
        }
        let start = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            eprint!(
                "\r  {label}: {:.0}/{:.0} s ",
                start.elapsed().as_secs_f64(),
                total.as_secs_f64()
            );
        }
    })
}

fn obj(v: serde_json::Value) -> Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn parse(line: &str) -> Map<String, serde_json::Value> {
    obj(serde_json::from_str(line).unwrap_or_default())
}

fn add_server_cost(
    m: &mut Map<String, serde_json::Value>,
    before: Option<Counters>,
    after: Option<Counters>,
    all_ops: usize,
) {
    if let (Some(b), Some(a)) = (before, after) {
        let ops = all_ops.max(1) as f64;
        m.insert(
            "redis_cmds_per_op".into(),
            json!(((a.commands - b.commands - 1.0) / ops * 10.0).round() / 10.0),
        );
        m.insert(
            "redis_cpu_us_per_op".into(),
            json!(((a.cpu_us - b.cpu_us) / ops * 10.0).round() / 10.0),
        );
    }
}

pub async fn bench(ctx: &Ctx, args: BenchArgs) -> i32 {
    let wanted: Vec<String> = match args.workload.to_ascii_uppercase().as_str() {
        "ALL" => ["W1", "W2", "W3", "W4", "W5", "W6"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        w @ ("W1" | "W2" | "W3" | "W4" | "W5" | "W6") => vec![w.to_string()],
        other => {
            eprintln!("lockwarden: unknown workload {other:?} (W1..W6 or all)");
            return EX_USAGE;
        }
    };
    if wanted == ["W4"] && ctx.urls.len() != 5 {
        eprintln!("lockwarden: W4 needs 5 masters (give --redis five times)");
        return EX_USAGE;
    }
    // Every workload but W4 runs against the first master alone.
    let single = Ctx {
        urls: vec![ctx.url.clone()],
        ..ctx.clone()
    };
    let client = match single.connect(lockwarden::DEFAULT_WATCHDOG_LEASE).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let report = Report::new(args.json);
    let redis = client.redis().clone();
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();

    // The limits, measured first.
    let p = progress("limits", Duration::from_secs(3));
    let sha: String = match redis.script_load(BARE_ACQUIRE).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lockwarden: loading the limit script: {e}");
            return EX_UNAVAILABLE;
        }
    };
    let limits = tokio::spawn(limits(redis.clone(), sha)).await.unwrap_or_default();
    p.abort();
    for mut l in limits {
        l.insert("date".into(), json!(date));
        report.emit(l);
    }

    for w in wanted {
        let before = counters(&redis).await;
        let cpu_before = workloads::client_cpu_us();
        let total = args.duration + Duration::from_secs(1);
        let url = ctx.url.clone();
        let (mut m, all_ops) = match w.as_str() {
            "W1" | "W2" => {
                let workers = if w == "W1" { 1 } else { args.workers.unwrap_or(32) };
                let p = progress(&w, total);
                let (c, d) = (client.clone(), args.duration);
                let r = tokio::spawn(async move { workloads::uncontended(&c, workers, d).await }).await;
                p.abort();
                match r {
                    Ok(r) => (parse(&r.json()), r.all_ops),
                    Err(e) => {
                        eprintln!("lockwarden: {w} failed: {e}");
                        continue;
                    }
                }
            }
            "W3" | "W5" => {
                let workers = args.workers.unwrap_or(8);
                let p = progress(&w, total);
                let d = args.duration;
                let fair = w == "W5";
                let r = tokio::spawn(async move { workloads::contended(&url, fair, workers, d).await }).await;
                p.abort();
                match r {
                    Ok(Ok(r)) => (parse(&r.json()), r.all_ops),
                    Ok(Err(e)) => return crate::fail(&w, &e),
                    Err(e) => {
                        eprintln!("lockwarden: {w} failed: {e}");
                        continue;
                    }
                }
            }
            "W4" => {
                if ctx.urls.len() != 5 {
                    eprintln!("lockwarden bench: skipping W4 (needs 5 masters: give --redis five times)");
                    continue;
                }
                let quorum = match ctx.connect(lockwarden::DEFAULT_WATCHDOG_LEASE).await {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let p = progress("W4", total * 2);
                // W1 on the first master in the same run: the yardstick.
                let (c, q, d) = (client.clone(), quorum.clone(), args.duration);
                let r = tokio::spawn(async move {
                    // The floor: one PING to all 5 at once, against one PING.
                    let masters = q.masters();
                    let fanout = workloads::fanout_ping_us(&masters, 2000).await;
                    let one = workloads::ping_us(masters[0], 2000).await;
                    let w1 = workloads::uncontended(&c, 1, d).await;
                    let before = all_counters(&masters).await;
                    let cpu = workloads::client_cpu_us();
                    let w4 = workloads::uncontended(&q, 1, d).await;
                    let cpu = workloads::client_cpu_us() - cpu;
                    let after = all_counters(&masters).await;
                    (w1, w4, fanout, one, before, after, cpu)
                })
                .await;
                p.abort();
                match r {
                    Ok((w1, w4, fanout, one, before, after, cpu)) => {
                        let mut m = parse(&w4.json());
                        add_client_cost(&mut m, cpu, w4.all_ops);
                        // Summed over the five masters: the server work one
                        // quorum lock + unlock costs, against the host's cores.
                        add_server_cost(&mut m, before, after, w4.all_ops);
                        m.insert(
                            "cores".into(),
                            json!(std::thread::available_parallelism().map_or(0, |n| n.get())),
                        );
                        m.insert("ping_p50_us".into(), json!((one.p50 * 10.0).round() / 10.0));
                        m.insert("ping5_p50_us".into(), json!((fanout.p50 * 10.0).round() / 10.0));
                        m.insert("workload".into(), json!("W4"));
                        m.insert("servers".into(), json!(5));
                        m.insert("w1_p50_us".into(), json!((w1.latency_us.p50 * 10.0).round() / 10.0));
                        m.insert(
                            "p50_vs_w1".into(),
                            json!((w4.latency_us.p50 / w1.latency_us.p50 * 100.0).round() / 100.0),
                        );
                        (m, w4.all_ops)
                    }
                    Err(e) => {
                        eprintln!("lockwarden: W4 failed: {e}");
                        continue;
                    }
                }
            }
            _ => {
                let p = progress("W6", Duration::from_secs(6));
                let r = w6(&ctx.url, &ctx.prefix, &redis).await;
                p.abort();
                match r {
                    Ok(m) => (m, 0),
                    Err(e) => return crate::fail("W6", &e),
                }
            }
        };
        // W4 counts its own, over all five masters.
        if w != "W6" && w != "W4" {
            add_client_cost(&mut m, workloads::client_cpu_us() - cpu_before, all_ops);
            add_server_cost(&mut m, before, counters(&redis).await, all_ops);
        }
        report.emit(m);
    }
    report.finish();
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    0
}

fn percentile_us(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    (workloads::nearest_rank(&v, q) * 10.0).round() / 10.0
}

/// PING and EVALSHA round trips (`-c 1`), EVALSHA from 50 concurrent
/// callers (`-c 50`) and pipelined by 16 (`-P 16`).
async fn limits(redis: fred::clients::Client, sha: String) -> Vec<Map<String, serde_json::Value>> {
    let mut out = Vec::new();
    let ping = workloads::ping_us(&redis, 2000).await;
    let round = |x: f64| (x * 10.0).round() / 10.0;
    out.push(obj(
        json!({"limit": "ping_c1", "p50_us": round(ping.p50), "p99_us": round(ping.p99)}),
    ));
    let args = || vec!["30000", "bench-owner"];
    let mut evals = Vec::new();
    let t0 = Instant::now();
    for _ in 0..2000 {
        let t = Instant::now();
        if redis
            .evalsha::<Option<i64>, _, _, _>(&sha, "bench:limit", args())
            .await
            .is_ok()
        {
            evals.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let rate = evals.len() as f64 / t0.elapsed().as_secs_f64();
    out.push(obj(json!({"limit": "evalsha_c1", "ops_per_s": (rate * 10.0).round() / 10.0, "p50_us": percentile_us(evals.clone(), 0.5), "p99_us": percentile_us(evals, 0.99)})));
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (r, sha) = (redis.clone(), sha.clone());
            tokio::spawn(async move {
                let key = format!("bench:limit:{i}");
                for _ in 0..400 {
                    let _ = r
                        .evalsha::<Option<i64>, _, _, _>(&sha, key.as_str(), vec!["30000", "bench-owner"])
                        .await;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    out.push(obj(
        json!({"limit": "evalsha_c50", "ops_per_s": (20000.0 / t0.elapsed().as_secs_f64()).round()}),
    ));
    let t0 = Instant::now();
    for _ in 0..500 {
        let p = redis.pipeline();
        for _ in 0..16 {
            let argv: Vec<Value> = vec![
                sha.as_str().into(),
                1.into(),
                "bench:limit".into(),
                "30000".into(),
                "bench-owner".into(),
            ];
            let _: Result<(), _> = p
                .custom(
                    // fred routes a custom command only by a given slot.
                    CustomCommand::new_static(
                        "EVALSHA",
                        ClusterHash::Custom(fred::util::redis_keyslot(b"bench:limit")),
                        false,
                    ),
                    argv,
                )
                .await;
        }
        let _: Result<Vec<Value>, _> = p.all().await;
    }
    out.push(obj(
        json!({"limit": "evalsha_p16", "ops_per_s": (8000.0 / t0.elapsed().as_secs_f64()).round()}),
    ));
    let _: Result<i64, _> = redis
        .custom(
            CustomCommand::new_static("DEL", ClusterHash::FirstKey, false),
            vec!["bench:limit"],
        )
        .await;
    out
}

/// W6: one client holds 10,000 locks with a 3 s watchdog lease for three
/// renewal periods; Redis commands per renewal tick and Redis CPU.
async fn w6(
    url: &str,
    prefix: &str,
    redis: &fred::clients::Client,
) -> lockwarden::Result<Map<String, serde_json::Value>> {
    const LOCKS: usize = 10_000;
    let lease = Duration::from_secs(3);
    let client = lockwarden::Client::builder(url)
        .key_prefix(prefix)
        .watchdog_lease(lease)
        .build()
        .await?;
    let mut guards = Vec::with_capacity(LOCKS);
    for chunk in (0..LOCKS).collect::<Vec<_>>().chunks(64) {
        let acquired = futures::future::join_all(chunk.iter().map(|i| {
            let c = client.clone();
            async move { c.lock(&format!("w6:{i}"))?.lock().await }
        }))
        .await;
        for g in acquired {
            guards.push(g?);
        }
    }
    let before = counters(redis).await;
    tokio::time::sleep(lease).await; // three renewal periods
    let after = counters(redis).await;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    for chunk in guards.chunks(64).map(|c| c.len()).collect::<Vec<_>>() {
        let batch: Vec<_> = guards.drain(..chunk).collect();
        futures::future::join_all(batch.into_iter().map(|g| g.unlock())).await;
    }
    let mut m = obj(json!({"workload": "W6", "workers": 1, "servers": 1, "locks": LOCKS, "ticks": 3, "lost": lost}));
    if let (Some(b), Some(a)) = (before, after) {
        let wall_us = (a.at - b.at).as_secs_f64() * 1e6;
        m.insert(
            "redis_cmds_per_tick".into(),
            json!(((a.commands - b.commands) / 3.0).round()),
        );
        m.insert(
            "script_calls_per_tick".into(),
            json!(((a.evalsha - b.evalsha) / 3.0).round()),
        );
        m.insert(
            "redis_cpu_pct".into(),
            json!(((a.cpu_us - b.cpu_us) / wall_us * 1000.0).round() / 10.0),
        );
    }
    Ok(m)
}
