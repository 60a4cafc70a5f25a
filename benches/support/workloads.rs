//! The contended workloads of the README's benchmark workloads (W3 non-fair, W5 fair), written
//! once so the CLI's `bench` command and `cargo bench` share them.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwarden::{Client, Lease, Lock};

/// CPU time this process has used so far (user + system), in µs.
pub fn client_cpu_us() -> f64 {
    let (user, system) = client_cpu_split_us();
    user + system
}

/// CPU time this process has used so far, in µs: (user, system). The
/// system part is mostly the kernel's socket work for the process.
pub fn client_cpu_split_us() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// One hold as a worker saw it.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    pub worker: usize,
    pub t_req: Instant,
    pub t_acq: Instant,
    pub t_rel: Instant,
}

/// The result of one contended run.
#[derive(Debug, Default)]
pub struct Contended {
    pub workload: &'static str,
    /// Acquisitions including the warm-up (for per-operation server costs).
    pub all_ops: usize,
    pub workers: usize,
    pub duration_s: f64,
    pub ops: usize,
    pub errors: u64,
    pub violations: u64,
    pub overlaps: u64,
    pub lost_updates: i64,
    pub gap_us: Stats,
    pub xgap_us: Stats,
    pub self_handoff_frac: f64,
    pub wait_us: Stats,
    pub per_worker_min: usize,
    pub per_worker_max: usize,
    pub in_request_order_frac: f64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentile of sorted samples.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn stats(mut v: Vec<f64>) -> Stats {
    if v.is_empty() {
        return Stats::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Stats {
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: nearest_rank(&v, 0.5),
        p99: nearest_rank(&v, 0.99),
        max: v[v.len() - 1],
    }
}

/// `n` sequential PING round trips on `redis` (the one-round-trip limit),
/// in µs. Call it from a spawned task: the `block_on` thread is slower.
pub async fn ping_us(redis: &fred::clients::Client, n: usize) -> Stats {
    use fred::prelude::ClientLike;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        if redis.ping::<String>(None).await.is_ok() {
            v.push(us(t.elapsed()));
        }
    }
    stats(v)
}

/// The fan-out floor of a quorum: round trips of one PING sent to every
/// master at once, waiting for all (`n` samples).
pub async fn fanout_ping_us(masters: &[&fred::clients::Client], n: usize) -> Stats {
    use fred::prelude::ClientLike;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = futures::future::join_all(masters.iter().map(|m| m.ping::<String>(None))).await;
        if r.iter().all(|r| r.is_ok()) {
            v.push(us(t.elapsed()));
        }
    }
    stats(v)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What the workers of one contended run share: its window (a 1 s
/// warm-up, then the measured `duration`), the critical section's checks
/// and the error count.
#[derive(Clone)]
pub struct Race {
    measure_from: Instant,
    end: Instant,
    inside: Arc<AtomicUsize>,
    violations: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    /// A shared counter updated with a non-atomic read-modify-write.
    counter: Arc<AtomicU64>,
}

impl Race {
    pub fn new(duration: Duration) -> Race {
        let measure_from = Instant::now() + Duration::from_secs(1);
        Race {
            measure_from,
            end: measure_from + duration,
            inside: Arc::default(),
            violations: Arc::default(),
            errors: Arc::default(),
            counter: Arc::default(),
        }
    }

    /// A hold just taken, asked for at `t_req`: runs the critical section
    /// and gives the hold's times, its release time taken before the
    /// release is sent.
    pub fn hold(&self, worker: usize, t_req: Instant) -> Hold {
        let t_acq = Instant::now();
        self.critical();
        Hold {
            worker,
            t_req,
            t_acq,
            t_rel: Instant::now(),
        }
    }

    /// Whether the run goes on.
    pub fn running(&self) -> bool {
        Instant::now() < self.end
    }

    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The critical section: a violation when another worker is inside,
    /// and one more on the shared counter, without atomicity (only the
    /// lock keeps it exact).
    pub fn critical(&self) {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        let v = self.counter.load(Ordering::SeqCst);
        self.counter.store(v + 1, Ordering::SeqCst);
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// Waits for the workers (each returns the holds it saw) and analyses
    /// the run.
    pub async fn finish(self, workload: &'static str, tasks: Vec<tokio::task::JoinHandle<Vec<Hold>>>) -> Contended {
        let workers = tasks.len();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("worker panicked"));
        }
        analyse(
            workload,
            workers,
            (self.measure_from, self.end),
            all,
            self.errors.load(Ordering::Relaxed),
            self.violations.load(Ordering::Relaxed),
            self.counter.load(Ordering::SeqCst),
        )
    }
}

/// W3 (`fair = false`) or W5 (`fair = true`): `workers` workers, each with
/// its own client, contend for one key for a 1 s warm-up plus `duration`.
pub async fn contended(url: &str, fair: bool, workers: usize, duration: Duration) -> lockwarden::Result<Contended> {
    let key = if fair { "w5" } else { "w3" };
    let mut locks: Vec<Lock> = Vec::new();
    for _ in 0..workers {
        let c = Client::connect(url).await?;
        locks.push(if fair { c.fair_lock(key)? } else { c.lock(key)? });
    }
    let race = Race::new(duration);
    let mut tasks = Vec::new();
    for (worker, lock) in locks.into_iter().enumerate() {
        let race = race.clone();
        tasks.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            while race.running() {
                let t_req = Instant::now();
                let guard = match lock.try_lock(Duration::from_secs(5), Lease::Watchdog).await {
                    Ok(Some(g)) => g,
                    Ok(None) | Err(_) => {
                        race.error();
                        continue;
                    }
                };
                let hold = race.hold(worker, t_req);
                if guard.unlock().await.is_err() {
                    race.error();
                }
                holds.push(hold);
            }
            holds
        }));
    }
    Ok(race.finish(if fair { "W5" } else { "W3" }, tasks).await)
}

/// The result of a contended run from every hold its workers saw; holds
/// acquired in `window` are measured. `counter`: the shared counter each
/// hold added one to without atomicity (fewer than the holds: lost updates).
fn analyse(
    workload: &'static str,
    workers: usize,
    window: (Instant, Instant),
    mut all: Vec<Hold>,
    errors: u64,
    violations: u64,
    counter: u64,
) -> Contended {
    let (measure_from, end) = window;
    let duration = end - measure_from;
    let total_holds = all.len() as i64;
    let final_counter = counter as i64;
    all.sort_by_key(|h| h.t_acq);
    let mut overlaps = 0;
    let (mut gaps, mut xgaps, mut waits) = (Vec::new(), Vec::new(), Vec::new());
    let mut self_handoffs = 0usize;
    let mut counted = vec![0usize; workers];
    for (k, h) in all.iter().enumerate() {
        if k > 0 && h.t_acq < all[k - 1].t_rel {
            overlaps += 1;
        }
        if h.t_acq < measure_from || h.t_acq >= end {
            continue;
        }
        counted[h.worker] += 1;
        waits.push(us(h.t_acq - h.t_req));
        if k > 0 {
            let prev = &all[k - 1];
            let gap = us(h.t_acq.saturating_duration_since(prev.t_rel));
            gaps.push(gap);
            if prev.worker == h.worker {
                self_handoffs += 1;
            } else {
                xgaps.push(gap);
            }
        }
    }
    // In request order: nobody who asked earlier was still waiting.
    let measured: Vec<&Hold> = all
        .iter()
        .filter(|h| h.t_acq >= measure_from && h.t_acq < end)
        .collect();
    let mut in_order = 0;
    let mut later_min_req: Option<Instant> = None;
    for h in measured.iter().rev() {
        if later_min_req.is_none_or(|m| h.t_req <= m) {
            in_order += 1;
        }
        later_min_req = Some(later_min_req.map_or(h.t_req, |m| m.min(h.t_req)));
    }
    let ops = measured.len();
    Contended {
        all_ops: total_holds as usize,
        workload,
        workers,
        duration_s: duration.as_secs_f64(),
        ops,
        errors,
        violations,
        overlaps,
        lost_updates: total_holds - final_counter,
        self_handoff_frac: if gaps.is_empty() {
            0.0
        } else {
            self_handoffs as f64 / gaps.len() as f64
        },
        gap_us: stats(gaps),
        xgap_us: stats(xgaps),
        wait_us: stats(waits),
        per_worker_min: counted.iter().copied().min().unwrap_or(0),
        per_worker_max: counted.iter().copied().max().unwrap_or(0),
        in_request_order_frac: if ops == 0 { 0.0 } else { in_order as f64 / ops as f64 },
    }
}

impl Contended {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.duration_s
    }

    /// One JSON object (the field names the README lists).
    pub fn json(&self) -> String {
        format!(
            concat!(
                "{{\"workload\":\"{}\",\"workers\":{},\"servers\":1,\"duration_s\":{:.1},\"ops\":{},\"ops_per_s\":{:.1},",
                "\"gap_mean_us\":{:.1},\"gap_p50_us\":{:.1},\"gap_p99_us\":{:.1},\"xgap_mean_us\":{:.1},\"xgap_p50_us\":{:.1},",
                "\"xgap_p99_us\":{:.1},\"self_handoff_frac\":{:.3},\"wait_p50_us\":{:.1},\"wait_p99_us\":{:.1},\"wait_max_us\":{:.1},",
                "\"per_worker_min\":{},\"per_worker_max\":{},\"in_request_order_frac\":{:.4},",
                "\"violations\":{},\"overlaps\":{},\"lost_updates\":{},\"errors\":{}}}"
            ),
            self.workload,
            self.workers,
            self.duration_s,
            self.ops,
            self.ops_per_s(),
            self.gap_us.mean,
            self.gap_us.p50,
            self.gap_us.p99,
            self.xgap_us.mean,
            self.xgap_us.p50,
            self.xgap_us.p99,
            self.self_handoff_frac,
            self.wait_us.p50,
            self.wait_us.p99,
            self.wait_us.max,
            self.per_worker_min,
            self.per_worker_max,
            self.in_request_order_frac,
            self.violations,
            self.overlaps,
            self.lost_updates,
            self.errors,
        )
    }
}

/// The result of an uncontended run (W1, W2).
#[derive(Debug, Default)]
pub struct Uncontended {
    pub workload: &'static str,
    /// Pairs including the warm-up (for per-operation server costs).
    pub all_ops: usize,
    pub workers: usize,
    pub duration_s: f64,
    pub ops: usize,
    pub errors: u64,
    pub latency_us: Stats,
}

impl Uncontended {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.duration_s
    }

    pub fn json(&self) -> String {
        format!(
            concat!(
                "{{\"workload\":\"{}\",\"workers\":{},\"servers\":1,\"duration_s\":{:.1},\"ops\":{},\"ops_per_s\":{:.1},",
                "\"p50_us\":{:.1},\"p99_us\":{:.1},\"violations\":0,\"overlaps\":0,\"lost_updates\":0,\"errors\":{}}}"
            ),
            self.workload,
            self.workers,
            self.duration_s,
            self.ops,
            self.ops_per_s(),
            self.latency_us.p50,
            self.latency_us.p99,
            self.errors
        )
    }
}

/// W1 (`workers = 1`, one key) or W2 (`workers` tasks sharing one client,
/// task i on key `w2:i`): lock + unlock pairs for a 1 s warm-up plus
/// `duration`; a pair counts if it started inside the measured window.
pub async fn uncontended(client: &Client, workers: usize, duration: Duration) -> Uncontended {
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(1);
    let end = measure_from + duration;
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..workers {
        let name = if workers == 1 {
            "w1".to_string()
        } else {
            format!("w2:{i}")
        };
        let lock = client.lock(&name).expect("valid name");
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut all = 0usize;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let ok = match lock.lock().await {
                    Ok(g) => g.unlock().await.is_ok(),
                    Err(_) => false,
                };
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                all += 1;
                if t0 >= measure_from {
                    samples.push(us(t0.elapsed()));
                }
            }
            (samples, all)
        }));
    }
    let mut all = Vec::new();
    let mut all_ops = 0;
    for t in tasks {
        let (samples, n) = t.await.expect("worker panicked");
        all.extend(samples);
        all_ops += n;
    }
    Uncontended {
        all_ops,
        workload: if workers == 1 { "W1" } else { "W2" },
        workers,
        duration_s: duration.as_secs_f64(),
        ops: all.len(),
        errors: errors.load(Ordering::Relaxed),
        latency_us: stats(all),
    }
}
