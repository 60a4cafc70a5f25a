//! Several names at once against a real redis-server: all or none, no
//! deadlock between callers naming the locks in opposite orders, tokens
//! per name, partial holds given back at once, cancellation.
#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const LONG: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_names_are_held_together_with_a_token_each() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let m = c.multi_lock(&["b", "a", "c", "a"]).unwrap();
        assert_eq!(m.names(), ["a", "b", "c"], "sorted, once each");
        let g = m.lock().await.unwrap();
        let tokens = g.tokens();
        assert_eq!(tokens.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(tokens.iter().all(|(_, t)| *t > 0));
        for name in ["a", "b", "c"] {
            assert_eq!(server.owners(name).len(), 1, "{name} held");
            assert!(other
                .lock(name)
                .unwrap()
                .try_lock(Duration::ZERO, LONG)
                .await
                .unwrap()
                .is_none());
        }
        assert!(g.validity() > Duration::from_secs(20));
        g.unlock().await.unwrap();
        for name in ["a", "b", "c"] {
            assert_eq!(server.cmd(&["EXISTS", name]).as_int(), Some(0), "{name} released");
        }
        assert!(c.multi_lock::<&str>(&[]).is_err());
    })
    .await
}

/// One name held by someone else: nothing else stays held while waiting,
/// and the call gets all of them once that one is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_hold_is_given_back_at_once() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let blocker = other.lock("y").unwrap().lock().await.unwrap();
        let m = c.multi_lock(&["x", "y", "z"]).unwrap();
        assert!(m.try_lock(Duration::ZERO, LONG).await.unwrap().is_none());
        for name in ["x", "z"] {
            assert_eq!(server.cmd(&["EXISTS", name]).as_int(), Some(0), "{name} given back");
        }
        let waiting = tokio::spawn(async move { m.try_lock(Duration::from_secs(20), LONG).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            server.cmd(&["EXISTS", "x"]).as_int(),
            Some(0),
            "x is not held while waiting for y"
        );
        // Others can take x meanwhile.
        other
            .lock("x")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("x free")
            .unlock()
            .await
            .unwrap();
        let released = Instant::now();
        blocker.unlock().await.unwrap();
        let g = waiting.await.unwrap().unwrap().expect("all three");
        assert!(released.elapsed() < Duration::from_secs(5), "woken by y's unlock");
        assert_eq!(g.guards().len(), 3);
        g.unlock().await.unwrap();
    })
    .await
}

/// Two callers naming the same locks in opposite orders, over and over:
/// no deadlock (every call ends well within its bound) and never both
/// inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opposite_orders_never_deadlock() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let inside = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for names in [["p", "q", "r"], ["r", "q", "p"], ["q", "p", "r"], ["r", "p", "q"]] {
            let c = client(&server.url(), LONG).await;
            let (inside, done) = (inside.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let m = c.multi_lock(&names).unwrap();
                for _ in 0..40 {
                    let g = m
                        .try_lock(Duration::from_secs(20), LONG)
                        .await
                        .unwrap()
                        .expect("no deadlock: every call gets all three");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two callers inside");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 160);
        for name in ["p", "q", "r"] {
            assert_eq!(server.cmd(&["EXISTS", name]).as_int(), Some(0));
        }
    })
    .await
}

/// Dropping a waiting multi-lock call leaves none of its locks held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_leaves_nothing_held() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let blocker = other.lock("n2").unwrap().lock().await.unwrap();
        let m = c.multi_lock(&["n1", "n2"]).unwrap();
        let call = tokio::spawn(async move { m.lock().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        call.abort();
        let _ = call.await;
        blocker.unlock().await.unwrap();
        assert!(
            eventually(Duration::from_secs(5), || server.keys("n*").is_empty()).await,
            "left behind: {:?}",
            server.keys("n*")
        );
        // And dropped at any point of an uncontended call.
        for i in 0..30u64 {
            let m = c.multi_lock(&["n1", "n2", "n3"]).unwrap();
            let call = tokio::spawn(async move {
                if i % 2 == 0 {
                    m.lock().await.map(drop)
                } else {
                    m.try_lock(Duration::from_secs(5), LONG).await.map(drop)
                }
            });
            tokio::time::sleep(Duration::from_micros(100 * (i % 10))).await;
            call.abort();
            let _ = call.await;
        }
        assert!(
            eventually(Duration::from_secs(5), || server.keys("n*").is_empty()).await,
            "left behind: {:?}",
            server.keys("n*")
        );
    })
    .await
}

/// Over a quorum of three masters, with one of them down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_masters_holds_every_name() {
    bounded(BOUND, async {
        let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let a = lockwarden::Client::builder_for_masters(&urls).build().await.unwrap();
        let b = lockwarden::Client::builder_for_masters(&urls).build().await.unwrap();
        servers[1].stop();
        let g = a.multi_lock(&["qa", "qb"]).unwrap().lock().await.unwrap();
        for s in [&servers[0], &servers[2]] {
            assert_eq!(s.keys("q*").len(), 2, "both names on the live masters");
        }
        let m = b.multi_lock(&["qb", "qa"]).unwrap();
        assert!(m.try_lock(Duration::from_millis(200), LONG).await.unwrap().is_none());
        g.unlock().await.unwrap();
        m.try_lock(Duration::from_secs(5), LONG)
            .await
            .unwrap()
            .expect("free")
            .unlock()
            .await
            .unwrap();
    })
    .await
}

/// Redisson's multi-lock scenarios: held by the current task while held,
/// not after; and of ten callers trying at once without waiting, exactly
/// one gets all the names (the others hold nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_by_the_current_task_and_one_of_ten_tries_wins() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let m = c.multi_lock(&["l1", "l2", "l3"]).unwrap();
        let g = m.lock().await.unwrap();
        assert!(m.is_held_by_current_task().await.unwrap());
        let elsewhere = {
            let m = m.clone();
            tokio::spawn(async move { m.is_held_by_current_task().await.unwrap() })
        };
        assert!(!elsewhere.await.unwrap(), "another task does not hold them");
        g.unlock().await.unwrap();
        assert!(!m.is_held_by_current_task().await.unwrap());

        let start = Arc::new(tokio::sync::Barrier::new(10));
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let c = client(&server.url(), LONG).await;
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                let m = c.multi_lock(&["t1", "t2", "t3"]).unwrap();
                start.wait().await;
                let g = m.try_lock(Duration::ZERO, Duration::from_secs(10)).await.unwrap();
                (g, c)
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            let (g, c) = t.await.unwrap();
            if let Some(g) = g {
                winners.push((g, c));
            }
        }
        assert_eq!(winners.len(), 1, "exactly one caller got all three");
        for name in ["t1", "t2", "t3"] {
            assert_eq!(server.owners(name).len(), 1, "{name}: held once, by the winner");
        }
        let (g, _c) = winners.pop().unwrap();
        g.unlock().await.unwrap();
    })
    .await
}

/// The watchdog keeps every name of a multi-lock held past its lease, and
/// a name lost (force-unlocked) shows in the guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_every_name_and_a_loss_shows() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), Duration::from_millis(600)).await;
        let g = c.multi_lock(&["w1", "w2"]).unwrap().lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert!(!g.is_lost(), "renewed past three leases");
        for name in ["w1", "w2"] {
            assert_eq!(server.owners(name).len(), 1, "{name} still held");
        }
        assert!(c.lock("w2").unwrap().force_unlock().await.unwrap());
        tokio::time::timeout(Duration::from_secs(3), g.lost())
            .await
            .expect("the loss of w2 shows");
        assert!(g.is_lost());
        assert!(g.unlock().await.is_err(), "w2 is not held any more");
        assert_eq!(
            server.cmd(&["EXISTS", "w1"]).as_int(),
            Some(0),
            "w1 released all the same"
        );
    })
    .await
}

/// The multi-lock waits as `Lock::try_lock` does: a server that stops
/// answering for a while during the wait is retried within it, and every
/// wait is checked (above the 30-day maximum: an error, never a panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blip_during_the_wait_is_retried_within_it() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = lockwarden::Client::builder(&server.url())
            .command_timeout(Duration::from_millis(300))
            .build()
            .await
            .unwrap();
        let m = c.multi_lock(&["blip-a", "blip-b"]).unwrap();
        for wait in [Duration::MAX, Duration::from_secs(31 * 24 * 3600)] {
            assert!(
                matches!(
                    m.try_lock(wait, Duration::from_secs(5)).await,
                    Err(lockwarden::Error::InvalidDuration { what: "wait", .. })
                ),
                "{wait:?}"
            );
        }
        server.pause();
        let (got, ()) = tokio::join!(m.try_lock(Duration::from_secs(10), Duration::from_secs(5)), async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            server.resume();
        });
        let g = got
            .expect("a pause shorter than the wait is retried, not an error")
            .expect("both locks are free once the server answers");
        assert_eq!(g.guards().len(), 2);
        g.unlock().await.unwrap();
    })
    .await
}

/// Two tasks taking turns on each name (5 ms holds, asking again at once):
/// a multi-lock over both names still gets in, every time it asks. Before
/// 2026-11-28 it gave back what it held whenever another name was taken,
/// and both names were seldom free at once: refused for the whole 5 s of
/// each wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_gets_in_among_tasks_taking_turns_on_each_name() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let stop = Arc::new(AtomicBool::new(false));
        let turns = Arc::new(AtomicU64::new(0));
        let mut loops = Vec::new();
        for name in ["ta", "ta", "tb", "tb"] {
            let c = client(&server.url(), LONG).await;
            let (stop, turns) = (stop.clone(), turns.clone());
            loops.push(tokio::spawn(async move {
                let l = c.lock(name).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let g = l.lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.unlock().await.unwrap();
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        assert!(eventually(Duration::from_secs(10), || turns.load(Ordering::Relaxed) >= 40).await);
        let c = client(&server.url(), LONG).await;
        let m = c.multi_lock(&["ta", "tb"]).unwrap();
        for _ in 0..3 {
            let before = turns.load(Ordering::Relaxed);
            let g = m
                .try_lock(Duration::from_secs(5), LONG)
                .await
                .unwrap()
                .expect("the multi-lock gets in between the others' turns");
            assert_eq!(g.guards().len(), 2);
            g.unlock().await.unwrap();
            assert!(turns.load(Ordering::Relaxed) >= before);
        }
        stop.store(true, Ordering::Relaxed);
        for l in loops {
            l.await.unwrap();
        }
        assert!(turns.load(Ordering::Relaxed) > 40, "the others kept their turns");
    })
    .await
}

/// Starts a multi-lock over `hx` and `hy` that has lost a race: it waited
/// for `hx` (held by `a`), got it when `a` let go, and found `hy` held (by
/// the returned guard). Returns the waiting call.
async fn a_call_holding_hx_waiting_for_hy(
    server: &RedisServer,
    lease: lockwarden::Lease,
) -> (
    lockwarden::LockGuard,
    tokio::task::JoinHandle<lockwarden::Result<Option<lockwarden::MultiGuard>>>,
) {
    let a = client(&server.url(), LONG).await;
    let b = client(&server.url(), LONG).await;
    let c = client(&server.url(), LONG).await;
    let hx = a.lock("hx").unwrap().lock().await.unwrap();
    let hy = b.lock("hy").unwrap().lock().await.unwrap();
    let m = c.multi_lock(&["hx", "hy"]).unwrap();
    let call = tokio::spawn(async move { m.try_lock(Duration::from_secs(30), lease).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.cmd(&["EXISTS", "hx"]).as_int(), Some(1));
    hx.unlock().await.unwrap();
    // It takes hx and keeps it while it waits for hy.
    assert!(
        eventually(Duration::from_secs(5), || server.cmd(&["EXISTS", "hx"]).as_int()
            == Some(1))
        .await,
        "hx taken by the call"
    );
    (hy, call)
}

/// The guard of `call` (from [`a_call_holding_hx_waiting_for_hy`]) once
/// it holds both names, within 10 s.
async fn both(
    call: tokio::task::JoinHandle<lockwarden::Result<Option<lockwarden::MultiGuard>>>,
) -> lockwarden::MultiGuard {
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call gets both")
        .unwrap()
        .unwrap()
        .expect("both free")
}

/// Once a multi-lock has lost a race, it waits for the refused name while
/// holding the names before it; a task that holds the later name and then
/// asks for the earlier one (the other order) is kept waiting only for a
/// round (about a second), not for ever: the call gives its names back
/// and starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_taking_the_names_in_the_other_order_is_kept_waiting_only_a_round() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let (hy, call) = a_call_holding_hx_waiting_for_hy(&server, lockwarden::Lease::Watchdog).await;
        let b = client(&server.url(), LONG).await;
        let asked = Instant::now();
        let hx = b
            .lock("hx")
            .unwrap()
            .try_lock(Duration::from_secs(10), LONG)
            .await
            .unwrap()
            .expect("hx given back within a round");
        assert!(asked.elapsed() < Duration::from_secs(5), "{:?}", asked.elapsed());
        assert!(!call.is_finished(), "the call waits on");
        hx.unlock().await.unwrap();
        hy.unlock().await.unwrap();
        let g = both(call).await;
        assert_eq!(g.guards().len(), 2);
        g.unlock().await.unwrap();
    })
    .await
}

/// With a fixed lease, a name held while the call waited for another gets
/// its lease again once all are held: every name's lease runs from when
/// the call returns, as asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_runs_from_when_all_are_held() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(10);
        let (hy, call) = a_call_holding_hx_waiting_for_hy(&server, lease.into()).await;
        // Within the call's round (a second): hx is held all that while.
        tokio::time::sleep(Duration::from_millis(800)).await;
        hy.unlock().await.unwrap();
        let g = both(call).await;
        let ttl = server.cmd(&["PTTL", "hx"]).as_int().unwrap();
        assert!(ttl > 9_500, "hx's lease set again: {ttl} ms left of 10 s");
        assert!(g.validity() > Duration::from_secs(9), "{:?}", g.validity());
        g.unlock().await.unwrap();
    })
    .await
}
