//! Criterion benches against a throwaway local redis-server (started by the
//! test harness). Compare `lock_unlock` with `evalsha_x2` (two round trips of
//! a hash-lock-like script, the floor for lock + unlock) and `handoff` with
//! `ping` (one round trip), all measured in the same run:
//!
//!     cargo bench --bench lock
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fred::prelude::{ClientLike, LuaInterface};
use lockwarden::Client;

/// A hash-lock-like acquire (what redis-benchmark would be given).
const BARE_ACQUIRE: &str =
    "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
     redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil end \
     return redis.call('pttl', KEYS[1])";

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = common::RedisServer::start();
    let url = server.url();
    let (a, b) = rt.block_on(async {
        (
            Client::connect(&url).await.unwrap(),
            Client::connect(&url).await.unwrap(),
        )
    });
    let sha: String = rt.block_on(a.redis().script_load(BARE_ACQUIRE)).unwrap();

    let mut g = c.benchmark_group("redis");
    g.sample_size(50).measurement_time(Duration::from_secs(5));

    let fred = a.redis().clone();
    g.bench_function("ping", |bench| {
        bench.to_async(&rt).iter_custom(|iters| {
            let fred = fred.clone();
            // Spawned: calls from the block_on thread are slower (FRED.md §4).
            async move {
                tokio::spawn(async move {
                    let t = Instant::now();
                    for _ in 0..iters {
                        let _: String = fred.ping(None).await.unwrap();
                    }
                    t.elapsed()
                })
                .await
                .unwrap()
            }
        })
    });

    let fred = a.redis().clone();
    g.bench_function("evalsha_x2", |bench| {
        bench.to_async(&rt).iter_custom(|iters| {
            let (fred, sha) = (fred.clone(), sha.clone());
            async move {
                tokio::spawn(async move {
                    let t = Instant::now();
                    for _ in 0..iters {
                        for _ in 0..2 {
                            let _: Option<i64> =
                                fred.evalsha(&sha, "bench:bare", vec!["30000", "owner"]).await.unwrap();
                        }
                    }
                    t.elapsed()
                })
                .await
                .unwrap()
            }
        })
    });

    let lock = a.lock("bench:w1").unwrap();
    g.bench_function("lock_unlock", |bench| {
        bench.to_async(&rt).iter_custom(|iters| {
            let lock = lock.clone();
            async move {
                tokio::spawn(async move {
                    let t = Instant::now();
                    for _ in 0..iters {
                        lock.lock().await.unwrap().unlock().await.unwrap();
                    }
                    t.elapsed()
                })
                .await
                .unwrap()
            }
        })
    });

    // Handoff: a holder on client A unlocks while a task of client B waits;
    // time from calling unlock until B holds the lock.
    let (la, lb) = (a.lock("bench:handoff").unwrap(), b.lock("bench:handoff").unwrap());
    let b2 = b.clone();
    g.bench_function("handoff", |bench| {
        bench.to_async(&rt).iter_custom(|iters| {
            let (la, lb, b2) = (la.clone(), lb.clone(), b2.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let held = la.lock().await.unwrap();
                    let lb = lb.clone();
                    let waiter = tokio::spawn(async move {
                        let g = lb.lock().await.unwrap();
                        let at = Instant::now();
                        g.unlock().await.unwrap();
                        at
                    });
                    // Wait until the waiter is subscribed and asleep.
                    while b2.waiting_channels() == 0 {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let t0 = Instant::now();
                    held.unlock().await.unwrap();
                    let t1 = waiter.await.unwrap();
                    total += t1 - t0;
                    while b2.waiting_channels() != 0 {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                }
                total
            }
        })
    });
    g.finish();

    // Server-side cost of one uncontended lock + unlock.
    rt.block_on(async {
        let before = server.command_calls("evalsha");
        let cmds: u64 = server
            .info_field("stats", "total_commands_processed")
            .unwrap()
            .parse()
            .unwrap();
        for _ in 0..1000 {
            lock.lock().await.unwrap().unlock().await.unwrap();
        }
        let after: u64 = server
            .info_field("stats", "total_commands_processed")
            .unwrap()
            .parse()
            .unwrap();
        println!(
            "lock_unlock server cost: {} script calls per op, {:.1} redis commands per op (inner commands included)",
            (server.command_calls("evalsha") - before) as f64 / 1000.0,
            (after - cmds - 1) as f64 / 1000.0
        );
    });
    rt.block_on(async move { drop((a, b)) });
}

criterion_group!(lock_benches, benches);
criterion_main!(lock_benches);
