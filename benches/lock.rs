//! Benches against a throwaway local redis-server (started by the test
//! harness), compared with the limits measured in the same run:
//!
//!     cargo bench --bench lock
//!
//! Criterion measures four loops: `ping` (one round trip), `evalsha_x2` (two
//! round trips of a hash-lock-like script: the floor for lock + unlock),
//! `lock_unlock` (uncontended) and `handoff` (two clients hand one lock back
//! and forth; time from the holder calling unlock until the waiter holds it).
//! A summary then interleaves the four in rounds, so that drift on a noisy
//! machine hits all alike, and prints nearest-rank p50/p99 and the ratios as
//! JSON lines.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fred::prelude::{ClientLike, LuaInterface};
use lockwarden::{Client, Lock};

/// A hash-lock-like acquire (what redis-benchmark would be given).
const BARE_ACQUIRE: &str =
    "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
     redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil end \
     return redis.call('pttl', KEYS[1])";

struct Setup {
    a: Client,
    b: Client,
    sha: String,
    /// Raw fred clients for the handoff floor: a command client and a
    /// subscriber, as a waiting lock client would have.
    floor_cmd: fred::clients::Client,
    floor_sub: fred::clients::SubscriberClient,
    release_sha: String,
}

/// A release-like script: delete and publish.
const BARE_RELEASE: &str = "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], '0') return 0";

async fn ping(s: &Setup, n: u64, out: &mut Vec<Duration>) {
    for _ in 0..n {
        let t = Instant::now();
        let _: String = s.a.redis().ping(None).await.unwrap();
        out.push(t.elapsed());
    }
}

async fn evalsha_x2(s: &Setup, n: u64, out: &mut Vec<Duration>) {
    for _ in 0..n {
        let t = Instant::now();
        for _ in 0..2 {
            let _: Option<i64> =
                s.a.redis()
                    .evalsha(&s.sha, "bench:bare", vec!["30000", "owner"])
                    .await
                    .unwrap();
        }
        out.push(t.elapsed());
    }
}

async fn lock_unlock(lock: &Lock, n: u64, out: &mut Vec<Duration>) {
    for _ in 0..n {
        let t = Instant::now();
        lock.lock().await.unwrap().unlock().await.unwrap();
        out.push(t.elapsed());
    }
}

/// `n` handoffs, alternating between client A and client B: the waiter
/// calls `lock()` in its own task; once it is subscribed and asleep the
/// holder (kept busy meanwhile, like a holder doing work) calls unlock. The
/// sample is from that call until the waiter holds the lock.
async fn handoffs(s: &Setup, n: u64, out: &mut Vec<Duration>) {
    let mut holder = (s.a.lock("bench:handoff").unwrap(), s.a.clone());
    let mut waiter = (s.b.lock("bench:handoff").unwrap(), s.b.clone());
    let mut guard = holder.0.lock().await.unwrap();
    for _ in 0..n {
        let wl = waiter.0.clone();
        let task = tokio::spawn(async move {
            let g = wl.lock().await.unwrap();
            (Instant::now(), g)
        });
        while waiter.1.waiting_channels() == 0 {
            tokio::task::yield_now().await;
        }
        let busy_until = Instant::now() + Duration::from_micros(500);
        while Instant::now() < busy_until {
            tokio::task::yield_now().await;
        }
        let t0 = Instant::now();
        guard.unlock().await.unwrap();
        let (acquired, g) = task.await.unwrap();
        out.push(acquired - t0);
        guard = g;
        std::mem::swap(&mut holder, &mut waiter);
    }
    guard.unlock().await.unwrap();
}

/// The floor a handoff is compared with: a release-like script (DEL +
/// PUBLISH) from client A, the message reaching a raw fred subscriber, then
/// one acquire script from the waiter's command client: two script round
/// trips plus one pub/sub delivery, with no lock logic.
async fn handoff_floor(s: &Setup, n: u64, out: &mut Vec<Duration>) {
    use fred::prelude::EventInterface;
    for _ in 0..n {
        let mut rx = s.floor_sub.message_rx();
        let (cmd, sha) = (s.floor_cmd.clone(), s.sha.clone());
        let waiter = tokio::spawn(async move {
            let _ = rx.recv().await;
            let _: Option<i64> = cmd.evalsha(&sha, "bench:floor", vec!["30000", "waiter"]).await.unwrap();
            Instant::now()
        });
        let busy_until = Instant::now() + Duration::from_micros(500);
        while Instant::now() < busy_until {
            tokio::task::yield_now().await;
        }
        let t0 = Instant::now();
        let _: i64 =
            s.a.redis()
                .evalsha(&s.release_sha, vec!["bench:floor", "bench:floor:ch"], ())
                .await
                .unwrap();
        out.push(waiter.await.unwrap() - t0);
    }
}

fn percentile(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1].as_secs_f64() * 1e6
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = common::RedisServer::start();
    let url = server.url();
    let setup = Arc::new(rt.block_on(async {
        let (a, b) = (
            Client::connect(&url).await.unwrap(),
            Client::connect(&url).await.unwrap(),
        );
        use fred::prelude::PubsubInterface;
        let sha: String = a.redis().script_load(BARE_ACQUIRE).await.unwrap();
        let release_sha: String = a.redis().script_load(BARE_RELEASE).await.unwrap();
        let config = fred::prelude::Config::from_url(&url).unwrap();
        let builder = fred::prelude::Builder::from_config(config);
        let floor_cmd = builder.build().unwrap();
        floor_cmd.init().await.unwrap();
        let floor_sub = builder.build_subscriber_client().unwrap();
        floor_sub.init().await.unwrap();
        floor_sub.subscribe("bench:floor:ch").await.unwrap();
        Setup {
            a,
            b,
            sha,
            floor_cmd,
            floor_sub,
            release_sha,
        }
    }));
    let lock = setup.a.lock("bench:w1").unwrap();

    let mut g = c.benchmark_group("redis");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    // Everything runs in a spawned task: calls from the block_on thread are
    // slower (measured with fred 10.1).
    macro_rules! bench {
        ($name:literal, |$s:ident, $n:ident, $out:ident| $body:expr) => {
            g.bench_function($name, |bench| {
                bench.to_async(&rt).iter_custom(|iters| {
                    let $s = setup.clone();
                    let lock = lock.clone();
                    async move {
                        tokio::spawn(async move {
                            let _ = &lock;
                            let mut v = Vec::with_capacity(iters as usize);
                            let ($s, $n, $out) = (&*$s, iters, &mut v);
                            let _ = &lock;
                            $body;
                            let total: Duration = v.iter().sum();
                            total * iters as u32 / v.len().max(1) as u32
                        })
                        .await
                        .unwrap()
                    }
                })
            });
        };
    }
    bench!("ping", |s, n, out| ping(s, n, out).await);
    bench!("evalsha_x2", |s, n, out| evalsha_x2(s, n, out).await);
    let l2 = lock.clone();
    g.bench_function("lock_unlock", |bench| {
        bench.to_async(&rt).iter_custom(|iters| {
            let l = l2.clone();
            async move {
                tokio::spawn(async move {
                    let mut v = Vec::new();
                    lock_unlock(&l, iters, &mut v).await;
                    v.iter().sum::<Duration>()
                })
                .await
                .unwrap()
            }
        })
    });
    bench!("handoff", |s, n, out| handoffs(s, n, out).await);
    g.finish();

    // Interleaved summary.
    let s2 = setup.clone();
    let l3 = lock.clone();
    let summary = rt.block_on(rt.spawn(async move {
        let (mut p, mut e, mut l, mut h, mut f) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..20 {
            ping(&s2, 500, &mut p).await;
            evalsha_x2(&s2, 500, &mut e).await;
            lock_unlock(&l3, 500, &mut l).await;
            handoffs(&s2, 50, &mut h).await;
            handoff_floor(&s2, 50, &mut f).await;
        }
        (p, e, l, h, f)
    }));
    let (mut p, mut e, mut l, mut h, mut f) = summary.unwrap();
    let (p50p, p50e, p50l, p50h, p50f) = (
        percentile(&mut p, 0.5),
        percentile(&mut e, 0.5),
        percentile(&mut l, 0.5),
        percentile(&mut h, 0.5),
        percentile(&mut f, 0.5),
    );
    for (name, v, p50) in [
        ("ping", &mut p, p50p),
        ("evalsha_x2", &mut e, p50e),
        ("lock_unlock", &mut l, p50l),
        ("handoff", &mut h, p50h),
        ("handoff_floor", &mut f, p50f),
    ] {
        println!(
            "{{\"bench\":\"{name}\",\"samples\":{},\"p50_us\":{p50:.1},\"p99_us\":{:.1}}}",
            v.len(),
            percentile(v, 0.99)
        );
    }
    println!(
        "{{\"lock_unlock_over_evalsha_x2\":{:.2},\"handoff_over_ping\":{:.2},\"handoff_floor_over_ping\":{:.2},\"handoff_over_floor\":{:.2}}}",
        p50l / p50e,
        p50h / p50p,
        p50f / p50p,
        p50h / p50f
    );

    // Server-side cost of one uncontended lock + unlock.
    let l4 = lock.clone();
    rt.block_on(async {
        let before = server.command_calls("evalsha");
        let cmds: u64 = server
            .info_field("stats", "total_commands_processed")
            .unwrap()
            .parse()
            .unwrap();
        tokio::spawn(async move {
            for _ in 0..1000 {
                l4.lock().await.unwrap().unlock().await.unwrap();
            }
        })
        .await
        .unwrap();
        let after: u64 = server
            .info_field("stats", "total_commands_processed")
            .unwrap()
            .parse()
            .unwrap();
        println!(
            "{{\"lock_unlock_script_calls_per_op\":{},\"redis_cmds_per_op\":{:.1}}}",
            (server.command_calls("evalsha") - before) as f64 / 1000.0,
            (after - cmds - 1) as f64 / 1000.0
        );
    });
    rt.block_on(async move { drop((setup, lock)) });
}

criterion_group!(lock_benches, benches);
criterion_main!(lock_benches);
