//! The reentrant lock's behaviour against a real redis-server.
#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Error, Lease, LossReason};

const LONG: Duration = Duration::from_secs(30);

both_kinds!(
    lock_and_unlock,
    reentrancy_three_deep_with_hold_counts,
    another_task_is_excluded_until_the_count_reaches_zero,
    owner_can_be_carried_into_a_spawned_task,
    unlock_by_a_non_owner_errors_and_changes_nothing,
    lock_unlock_by_owner_does_not_double_release_with_a_guard,
    fixed_lease_expires_and_the_old_owner_cannot_touch_the_new_hold,
    watchdog_keeps_a_hold_alive_for_ten_leases,
    a_fixed_lease_is_never_renewed,
    a_dropped_guard_stops_renewal_and_releases,
    try_lock_returns_after_its_wait_when_the_lock_stays_held,
    sixteen_clients_increment_a_counter_without_overlap,
    fencing_tokens_increase_across_holders_and_stay_on_reentry,
    force_unlock_deletes_and_wakes_waiters,
    a_guard_of_a_lost_hold_cannot_release_a_newer_hold_of_the_same_owner,
    replay_records_keep_large_fencing_tokens_exact
);
const BOUND: Duration = Duration::from_secs(60);

async fn lock_and_unlock(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "plain");
        let guard = lock.lock().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        assert!(lock.is_held_by_current_task().await.unwrap());
        assert_eq!(
            server.owners("plain"),
            vec![(format!("{}:1", c.id()), "1".to_string())],
            "field <client-uuid>:<task-id> -> count"
        );
        // The hold's own fields: its token, and the record of the take.
        assert_eq!(
            server.cmd(&["HGET", "plain", ":token"]).as_str(),
            Some(guard.token().to_string().as_str())
        );
        let take = server.cmd(&["HGET", "plain", ":take"]);
        assert!(
            take.as_str().is_some_and(|t| t.starts_with("lockwarden:{plain}:req:")),
            "{take:?}"
        );
        // And its kind: one name is one kind while it is held.
        let want = if kind == Kind::Fair { "fair" } else { "reentrant" };
        assert_eq!(server.cmd(&["HGET", "plain", ":kind"]).as_str(), Some(want));
        assert_eq!(
            server.cmd(&["HLEN", "plain"]).as_int(),
            Some(4),
            "nobody waits: no ':wait'"
        );
        let pttl = server.cmd(&["PTTL", "plain"]).as_int().unwrap();
        assert!(pttl > 29_000 && pttl <= 30_000, "watchdog lease applied: {pttl}");
        guard.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(server.cmd(&["EXISTS", "plain"]).as_int(), Some(0));
        assert_eq!(c.held_locks(), 0);
        assert_no_queues(&server).await;
    })
    .await
}

async fn reentrancy_three_deep_with_hold_counts(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "reentrant");
        let g1 = lock.lock().await.unwrap();
        let g2 = lock.lock().await.unwrap();
        let g3 = lock
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .expect("re-entry never waits");
        assert_eq!((g1.depth(), g2.depth(), g3.depth()), (1, 2, 3));
        assert_eq!(lock.hold_count().await.unwrap(), 3);
        assert_eq!(g1.token(), g3.token(), "re-entry keeps the hold's token");
        g3.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        g2.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        assert!(lock.is_locked().await.unwrap());
        g1.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 0);
        assert!(!lock.is_locked().await.unwrap());
        assert_no_queues(&server).await;
    })
    .await
}

async fn another_task_is_excluded_until_the_count_reaches_zero(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "exclusive");
        let g1 = lock.lock().await.unwrap();
        let g2 = lock.lock().await.unwrap();
        let other = lock.clone();
        let contender = tokio::spawn(async move {
            assert!(
                other.try_lock(Duration::ZERO, LONG).await.unwrap().is_none(),
                "other task excluded"
            );
            assert!(!other.is_held_by_current_task().await.unwrap());
            let g = other.lock().await.unwrap();
            let at = Instant::now();
            g.unlock().await.unwrap();
            at
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        g2.unlock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!contender.is_finished(), "one level still held");
        let released = Instant::now();
        g1.unlock().await.unwrap();
        let admitted = contender.await.unwrap();
        assert!(admitted >= released, "admitted only after the last level");
        assert_no_queues(&server).await;
    })
    .await
}

async fn owner_can_be_carried_into_a_spawned_task(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "carried");
        let guard = lock.lock().await.unwrap();
        let as_owner = lock.with_owner(guard.owner());
        let inner = tokio::spawn(async move {
            let g = as_owner
                .try_lock(Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("re-enter as owner");
            assert_eq!(as_owner.hold_count().await.unwrap(), 2);
            g.unlock().await.unwrap();
        });
        inner.await.unwrap();
        // The guard itself can be unlocked from another task.
        tokio::spawn(async move { guard.unlock().await.unwrap() })
            .await
            .unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_no_queues(&server).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_ids_are_not_reused_across_tasks() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let mut fields = std::collections::HashSet::new();
        for _ in 0..50 {
            let lock = c.lock("ids").unwrap();
            let field = tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let f = g.owner().field().to_string();
                g.unlock().await.unwrap();
                f
            })
            .await
            .unwrap();
            assert!(fields.insert(field), "an owner id came back");
        }
    })
    .await
}

async fn unlock_by_a_non_owner_errors_and_changes_nothing(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "not-mine");
        let guard = lock.lock().await.unwrap();
        let before = server.cmd(&["HGETALL", "not-mine"]);
        let stranger = lock.with_owner(c.new_owner());
        assert!(matches!(stranger.unlock().await, Err(Error::NotHeld { .. })));
        let other_task = lock.clone();
        let r = tokio::spawn(async move { other_task.unlock().await }).await.unwrap();
        assert!(matches!(r, Err(Error::NotHeld { .. })), "{r:?}");
        let other_client = client(&server.url(), LONG).await;
        assert!(matches!(
            kind.of(&other_client, "not-mine").unlock().await,
            Err(Error::NotHeld { .. })
        ));
        assert_eq!(server.cmd(&["HGETALL", "not-mine"]), before, "nothing changed");
        guard.unlock().await.unwrap();
        assert_no_queues(&server).await;
    })
    .await
}

async fn lock_unlock_by_owner_does_not_double_release_with_a_guard(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "by-owner");
        let g1 = lock.lock().await.unwrap();
        let g2 = lock.lock().await.unwrap();
        lock.unlock().await.unwrap(); // releases one level, Redisson style
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        drop(g2); // its level is gone already: must not release g1's
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        g1.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_no_queues(&server).await;
    })
    .await
}

async fn fixed_lease_expires_and_the_old_owner_cannot_touch_the_new_hold(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let lease = Duration::from_millis(500);
        let start = Instant::now();
        let old = kind
            .of(&a, "leased")
            .try_lock(Duration::ZERO, lease)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(old.lease(), Lease::Fixed(lease));
        let new = kind
            .of(&b, "leased")
            .try_lock(Duration::from_secs(5), LONG)
            .await
            .unwrap()
            .expect("acquired after expiry");
        let took = start.elapsed();
        assert!(
            took >= lease - Duration::from_millis(5),
            "not before the lease ran out: {took:?}"
        );
        assert!(
            took <= lease + Duration::from_millis(50),
            "within lease + 50 ms: {took:?}"
        );
        assert!(old.is_lost());
        assert_eq!(old.loss_reason(), Some(LossReason::LeaseExpired));
        let before = server.cmd(&["HGETALL", "leased"]);
        assert!(matches!(old.unlock().await, Err(Error::NotHeld { .. })));
        assert_eq!(
            server.cmd(&["HGETALL", "leased"]),
            before,
            "the new owner's hold is untouched"
        );
        assert!(new.token() > 1);
        new.unlock().await.unwrap();
        assert_no_queues(&server).await;
    })
    .await
}

async fn watchdog_keeps_a_hold_alive_for_ten_leases(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(1);
        let c = client(&server.url(), lease).await;
        let lock = kind.of(&c, "watched");
        let guard = lock.lock().await.unwrap();
        let until = Instant::now() + lease * 10 + Duration::from_millis(500);
        let mut min_pttl = i64::MAX;
        while Instant::now() < until {
            let pttl = server.cmd(&["PTTL", "watched"]).as_int().unwrap();
            assert!(pttl > 0, "lease ran out while watched");
            min_pttl = min_pttl.min(pttl);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!guard.is_lost());
        assert!(min_pttl > 300, "renewed every lease/3, lowest pttl seen {min_pttl}");
        guard.unlock().await.unwrap();
        assert_no_queues(&server).await;
    })
    .await
}

async fn a_fixed_lease_is_never_renewed(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), Duration::from_millis(300)).await;
        let lock = kind.of(&c, "fixed");
        let guard = lock
            .try_lock(Duration::ZERO, Duration::from_millis(700))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(guard.lost().await, LossReason::LeaseExpired);
        assert!(
            eventually(Duration::from_millis(200), || server.cmd(&["EXISTS", "fixed"]).as_int()
                == Some(0))
            .await
        );
        drop(guard);
        assert_no_queues(&server).await;
    })
    .await
}

async fn a_dropped_guard_stops_renewal_and_releases(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(1);
        let c = client(&server.url(), lease).await;
        let lock = kind.of(&c, "dropped");
        let guard = lock.lock().await.unwrap();
        drop(guard);
        assert_eq!(c.held_locks(), 0, "renewal stopped synchronously");
        assert!(eventually(lease, || server.cmd(&["EXISTS", "dropped"]).as_int() == Some(0)).await);
        assert_no_queues(&server).await;
    })
    .await
}

#[test]
fn a_client_whose_runtime_died_stops_renewing_and_the_key_expires_within_one_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let url = server.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let guard = rt.block_on(async {
        let c = client(&url, lease).await;
        c.lock("abandoned").unwrap().lock().await.unwrap()
    });
    // The process "dies": its runtime goes away while the lock is held.
    let died = Instant::now();
    rt.shutdown_background();
    drop(guard); // no runtime: drop must neither block nor panic
    while server.cmd(&["EXISTS", "abandoned"]).as_int() == Some(1) {
        assert!(
            died.elapsed() < lease + Duration::from_millis(300),
            "still held after a lease"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(lease);
    assert_eq!(
        server.cmd(&["EXISTS", "abandoned"]).as_int(),
        Some(0),
        "no renewal re-created it"
    );
}

async fn try_lock_returns_after_its_wait_when_the_lock_stays_held(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let holder = kind.of(&c, "busy").lock().await.unwrap();
        let lock = kind.of(&c, "busy");
        for wait in [Duration::ZERO, Duration::from_millis(100), Duration::from_millis(700)] {
            let lock = lock.clone();
            let (r, took) = tokio::spawn(async move {
                let t = Instant::now();
                let r = lock.try_lock(wait, LONG).await.unwrap();
                (r.is_none(), t.elapsed())
            })
            .await
            .unwrap();
            assert!(r, "not acquired");
            assert!(
                took >= wait && took <= wait + Duration::from_millis(150),
                "wait {wait:?} took {took:?}"
            );
        }
        holder.unlock().await.unwrap();
        assert_no_queues(&server).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_on_unlock_long_before_the_lease_ends() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let holder = c.lock("wake").unwrap().lock().await.unwrap();
        let lock = c.lock("wake").unwrap();
        let waiter = tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            let at = Instant::now();
            g.unlock().await.unwrap();
            at
        });
        assert!(
            eventually(Duration::from_secs(5), || server
                .pubsub_channels()
                .contains(&format!("lockwarden:{{wake}}:wake:{}", c.id())))
            .await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let unlocked = Instant::now();
        holder.unlock().await.unwrap();
        let woke = waiter.await.unwrap();
        assert!(
            woke - unlocked < Duration::from_millis(500),
            "woken by pub/sub, not the 30 s lease: {:?}",
            woke - unlocked
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_no_unlock_message_comes() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        // The holder never unlocks: only its lease ends, and nothing is published.
        let lease = Duration::from_millis(800);
        let _held = a
            .lock("silent")
            .unwrap()
            .try_lock(Duration::ZERO, lease)
            .await
            .unwrap()
            .unwrap();
        let start = Instant::now();
        let g = b.lock("silent").unwrap().lock().await.unwrap();
        let took = start.elapsed();
        assert!(
            took < lease + Duration::from_millis(200),
            "bounded by the holder's pttl: {took:?}"
        );
        g.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_its_subscriber_connection_is_killed() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let holder = a.lock("cut").unwrap().lock().await.unwrap();
        let lock = b.lock("cut").unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() });
        let channel = format!("lockwarden:{{cut}}:wake:{}", b.id());
        assert!(eventually(Duration::from_secs(5), || server.pubsub_channels().contains(&channel)).await);
        // Kill every subscriber connection and unlock while it is down: the
        // message is lost.
        server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        holder.unlock().await.unwrap();
        // The holder had 30 s of lease left: only the reconnect path can wake it this fast.
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("waiter stranded")
            .unwrap();
        assert!(eventually(Duration::from_secs(5), || server.pubsub_channels().is_empty()).await);
    })
    .await
}

async fn sixteen_clients_increment_a_counter_without_overlap(kind: Kind) {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let inside = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let c = client(&server.url(), LONG).await;
            let (inside, overlaps, port) = (inside.clone(), overlaps.clone(), server.port);
            tasks.push(tokio::spawn(async move {
                let lock = kind.of(&c, "counter-lock");
                let mut r = Resp::connect(port).unwrap();
                for _ in 0..100 {
                    let g = lock.lock().await.unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    // A non-atomic read-modify-write: only the lock makes it exact.
                    let v = r.cmd(&["GET", "counter"]).as_int().unwrap_or(0);
                    r.cmd(&["SET", "counter", &(v + 1).to_string()]);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        assert_eq!(server.cmd(&["GET", "counter"]).as_int(), Some(1600));
        assert_no_queues(&server).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_waits_leave_no_subscription_behind() {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let mut tasks = Vec::new();
        for t in 0..32 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..(5000 / 32 + 1) {
                    if t * (5000 / 32 + 1) + i >= 5000 {
                        break;
                    }
                    let lock = c.lock(&format!("pool-{}", (t + i) % 5)).unwrap();
                    lock.lock().await.unwrap().unlock().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            eventually(Duration::from_secs(5), || server.pubsub_channels().is_empty()
                && c.waiting_channels() == 0)
            .await,
            "leaked subscriptions: {:?}",
            server.pubsub_channels()
        );
        assert_eq!(c.held_locks(), 0);
    })
    .await
}

async fn fencing_tokens_increase_across_holders_and_stay_on_reentry(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let mut last = 0;
        for i in 0..20 {
            let c = if i % 2 == 0 { &a } else { &b };
            let lock = kind.of(c, "fenced");
            let g = lock.lock().await.unwrap();
            assert!(g.token() > last, "token {} after {last}", g.token());
            last = g.token();
            let inner = lock.lock().await.unwrap();
            assert_eq!(inner.token(), g.token());
            inner.unlock().await.unwrap();
            if i == 10 {
                assert!(lock.force_unlock().await.unwrap());
                assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));
            } else {
                g.unlock().await.unwrap();
            }
        }
        assert_no_queues(&server).await;
    })
    .await
}

async fn force_unlock_deletes_and_wakes_waiters(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let holder = kind.of(&c, "forced").lock().await.unwrap();
        let lock = kind.of(&c, "forced");
        let waiter = tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            g.unlock().await.unwrap();
        });
        assert!(eventually(Duration::from_secs(5), || !server.pubsub_channels().is_empty()).await);
        let admin = client(&server.url(), LONG).await;
        assert!(kind.of(&admin, "forced").force_unlock().await.unwrap());
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("woken by force_unlock")
            .unwrap();
        assert!(
            !kind.of(&admin, "forced").force_unlock().await.unwrap(),
            "nothing left to delete"
        );
        assert!(matches!(holder.unlock().await, Err(Error::NotHeld { .. })));
        assert_no_queues(&server).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_lease_reports_the_holders_pttl() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = c.lock("ttl").unwrap();
        assert_eq!(lock.remaining_lease().await.unwrap(), None);
        let g = lock
            .try_lock(Duration::ZERO, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        let left = lock.remaining_lease().await.unwrap().unwrap();
        assert!(
            left > Duration::from_secs(9) && left <= Duration::from_secs(10),
            "{left:?}"
        );
        g.unlock().await.unwrap();
    })
    .await
}

/// Futures and guards can cross threads (compile-time check).
#[allow(dead_code)]
fn futures_and_guards_are_send() {
    fn send<T: Send + 'static>(_: T) {}
    fn sync<T: Sync>() {}
    fn check(lock: lockwarden::Lock, guard: lockwarden::LockGuard) {
        send(lock.clone().lock_owned());
        send(guard);
        sync::<lockwarden::LockGuard>();
        sync::<lockwarden::Lock>();
        sync::<lockwarden::Client>();
    }
    trait Owned {
        fn lock_owned(self) -> impl std::future::Future + Send + 'static;
    }
    impl Owned for lockwarden::Lock {
        fn lock_owned(self) -> impl std::future::Future + Send + 'static {
            async move {
                let _ = self.lock().await;
                let _ = self.try_lock(Duration::ZERO, Lease::Watchdog).await;
                let _ = self.unlock().await;
                let _ = self.hold_count().await;
                let _ = self.force_unlock().await;
                if let Ok(g) = self.lock().await {
                    let _ = g.lost().await;
                    let _ = g.unlock().await;
                }
            }
        }
    }
    let _ = check;
}

async fn a_guard_of_a_lost_hold_cannot_release_a_newer_hold_of_the_same_owner(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "generations");
        let old = lock.lock().await.unwrap();
        assert!(lock.force_unlock().await.unwrap());
        // Same task, same owner: a fresh hold with a higher token.
        let new = lock.lock().await.unwrap();
        assert_eq!(new.owner(), old.owner());
        assert!(new.token() > old.token());
        assert!(old.is_lost(), "the fresh hold supersedes the old one");
        assert!(matches!(old.unlock().await, Err(Error::NotHeld { .. })));
        assert_eq!(lock.hold_count().await.unwrap(), 1, "the new hold is untouched");
        new.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_no_queues(&server).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_all_held_locks_in_batches_of_a_hundred() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let lease = Duration::from_millis(1500);
        let c = client(&server.url(), lease).await;
        let mut guards = Vec::new();
        for i in 0..250 {
            guards.push(c.lock(&format!("batch-{i}")).unwrap().lock().await.unwrap());
        }
        let before_tick = server.command_calls("evalsha");
        assert!(
            eventually(lease, || server.command_calls("evalsha") > before_tick).await,
            "no renewal tick"
        );
        tokio::time::sleep(Duration::from_millis(150)).await; // the tick's calls are concurrent
        let per_tick = server.command_calls("evalsha") - before_tick;
        assert_eq!(per_tick, 3, "250 locks renew in ceil(250/100) script calls");
        tokio::time::sleep(lease).await;
        for i in (0..250).step_by(50) {
            let pttl = server.cmd(&["PTTL", &format!("batch-{i}")]).as_int().unwrap();
            assert!(pttl > 500, "batch-{i} renewed: {pttl}");
        }
        for g in guards {
            g.unlock().await.unwrap();
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unlock_wakes_one_local_waiter_not_all() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let holder = c.lock("herd").unwrap().lock().await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let (lock, tx, first) = (c.lock("herd").unwrap(), tx.clone(), first.clone());
            tasks.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let _ = tx.send(());
                if first.swap(false, Ordering::SeqCst) {
                    // The first one keeps it until the test is done measuring.
                    tokio::time::sleep(Duration::from_millis(600)).await;
                }
                g.unlock().await.unwrap();
            }));
        }
        assert!(eventually(Duration::from_secs(5), || c.waiting_channels() == 1).await);
        tokio::time::sleep(Duration::from_millis(300)).await; // all ten asleep
        let before = server.command_calls("evalsha");
        holder.unlock().await.unwrap();
        rx.recv().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let calls = server.command_calls("evalsha") - before;
        // The release and one acquire; not ten attempts for one free lock.
        assert!(calls <= 3, "{calls} script calls after one unlock");
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

async fn replay_records_keep_large_fencing_tokens_exact(kind: Kind) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        // Lua writes numbers with 14 significant digits ("1e+15") unless the
        // script formats them as integers; a replayed acquire could then not
        // read its record back.
        server.cmd(&["SET", "lockwarden:{big}:token", "1000000000000000"]);
        let lock = kind.of(&c, "big");
        let g = lock.lock().await.unwrap();
        assert_eq!(g.token(), 1_000_000_000_000_001);
        let inner = lock.lock().await.unwrap();
        let mut records: Vec<String> = server
            .keys("lockwarden:{big}:req:*")
            .iter()
            .filter_map(|k| server.cmd(&["GET", k]).as_str().map(str::to_string))
            .collect();
        records.sort();
        // The fresh take keeps its token in the hold; the re-entry has a record.
        assert_eq!(records, ["1000000000000001:2"]);
        assert_eq!(
            server.cmd(&["HGET", "big", ":token"]).as_str(),
            Some("1000000000000001")
        );
        inner.unlock().await.unwrap();
        g.unlock().await.unwrap();
    })
    .await
}

/// An unlock publishes only when a waiter listens: nobody waited, nothing
/// is published; a waiter that subscribed and was refused marks the hold,
/// and its unlock wakes it long before the holder's 30 s lease would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_publishes_only_when_a_waiter_listens() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let lock = c.lock("quiet").unwrap();
        // (Counted after both clients started: each checks its right to
        // publish once when it connects.)
        let published = server.command_calls("publish");
        for _ in 0..3 {
            lock.lock().await.unwrap().unlock().await.unwrap();
        }
        // A try without a wait is refused and leaves no mark either.
        let g = lock.lock().await.unwrap();
        assert!(other
            .lock("quiet")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .is_none());
        assert_eq!(server.cmd(&["HEXISTS", "quiet", ":wait"]).as_int(), Some(0));
        g.unlock().await.unwrap();
        assert_eq!(server.command_calls("publish"), published, "nobody listened");

        let g = lock.lock().await.unwrap();
        let waiter = {
            let l = other.lock("quiet").unwrap();
            tokio::spawn(async move {
                let g = l.lock().await.unwrap();
                let t = Instant::now();
                g.unlock().await.unwrap();
                t
            })
        };
        assert!(
            eventually(Duration::from_secs(5), || server
                .cmd(&["HEXISTS", "quiet", ":wait"])
                .as_int()
                == Some(1))
            .await,
            "the listening waiter's refusal marks the hold"
        );
        let unlocked = Instant::now();
        g.unlock().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the unlock, not by the lease")
            .unwrap();
        assert!(got >= unlocked);
        // The holder's unlock; not the waiter's own (nobody else waited).
        assert_eq!(server.command_calls("publish"), published + 1, "one unlock message");
    })
    .await
}

/// Waiters of several clients all get the lock in turn by unlock messages
/// (each client wakes one of its waiters per message; whoever takes the
/// lock after waiting marks the new hold, so its unlock publishes too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_several_clients_are_all_woken_by_unlocks() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder_client = client(&server.url(), LONG).await;
        let holder = holder_client.lock("chain").unwrap().lock().await.unwrap();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(client(&server.url(), LONG).await);
        }
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for c in &clients {
            for _ in 0..3 {
                let (l, done) = (c.lock("chain").unwrap(), done.clone());
                tasks.push(tokio::spawn(async move {
                    let g = l.lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.unlock().await.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }));
            }
        }
        assert!(
            eventually(Duration::from_secs(5), || clients
                .iter()
                .all(|c| c.waiting_channels() == 1))
            .await,
            "every client listens"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        holder.unlock().await.unwrap();
        // Nine holds one after the other, each woken by the previous unlock:
        // well within the 30 s lease that a missed wake-up would cost.
        assert!(
            eventually(Duration::from_secs(10), || done.load(Ordering::SeqCst) == 9).await,
            "{} of 9 waiters got the lock",
            done.load(Ordering::SeqCst)
        );
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

/// fred's futures for one command are about 7 KB. lockwarden boxes them, so
/// the futures of its own calls stay small: a caller moves its `lock()`
/// future at every `.await` that holds it, and copying 8 KB per call took
/// an eighth of a 32-task client's CPU. A future's size is its type's, so
/// the ones measured are never awaited (but the unlock's).
#[tokio::test]
async fn the_futures_of_locking_calls_stay_small() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        const MAX: usize = 4096;
        let lock = c.lock("small").unwrap();
        let fair = c.fair_lock("small-fair").unwrap();
        let write = c.rw_lock("small-rw").unwrap().write();
        let sem = c.semaphore("small-sem", 2).unwrap();
        let multi = c.multi_lock(&["a", "b"]).unwrap();
        let sizes = [
            ("lock", std::mem::size_of_val(&lock.lock())),
            ("try_lock", std::mem::size_of_val(&lock.try_lock(LONG, Lease::Watchdog))),
            ("fair lock", std::mem::size_of_val(&fair.lock())),
            ("rw write", std::mem::size_of_val(&write.lock())),
            ("semaphore", std::mem::size_of_val(&sem.acquire())),
            ("multi lock", std::mem::size_of_val(&multi.lock())),
        ];
        for (call, size) in sizes {
            assert!(size <= MAX, "{call}() future is {size} bytes (at most {MAX})");
        }
        let guard = lock.lock().await.unwrap();
        let unlock = guard.unlock();
        let size = std::mem::size_of_val(&unlock);
        assert!(size <= MAX, "unlock() future is {size} bytes (at most {MAX})");
        unlock.await.unwrap();
    })
    .await
}

/// The reentrant lock's scripts read the lock once per call: the
/// common-case part that runs first (`acquire_free.lua`,
/// `release_last.lua`) hands what it read to the rest of the script. A
/// refused attempt reads the lock's PTTL once, and a release that leaves a
/// level (not the last) reads the hash once.
#[tokio::test]
async fn a_refused_attempt_and_a_nested_release_read_the_lock_once() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let lock = c.lock("once").unwrap();
        let outer = lock.lock().await.unwrap();
        let inner = lock.lock().await.unwrap();

        let pttl = server.command_calls("pttl");
        let refused = other
            .lock("once")
            .unwrap()
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap();
        assert!(refused.is_none(), "the lock is held");
        assert_eq!(
            server.command_calls("pttl") - pttl,
            1,
            "PTTL calls of one refused attempt"
        );

        let hmget = server.command_calls("hmget");
        inner.unlock().await.unwrap();
        assert_eq!(
            server.command_calls("hmget") - hmget,
            1,
            "HMGET calls of one nested release"
        );
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        outer.unlock().await.unwrap();
    })
    .await
}

/// A first send that takes a free lock answers with the bare token, not
/// `{1, token, 1}`: making and answering a table cost the server about as
/// much as the hash's writes. Every other grant keeps the list (here a
/// re-entry: `{1, token, 2}`, the same token). The library reads both
/// (every other test); this one sends the script itself.
#[tokio::test]
async fn a_fresh_take_answers_with_the_bare_token() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let acquire = concat!(
            include_str!("../lua/acquire_free.lua"),
            include_str!("../lua/shared.lua"),
            include_str!("../lua/shared_acquire.lua"),
            include_str!("../lua/shared_listen.lua"),
            include_str!("../lua/acquire.lua")
        );
        let take = |request: &str| {
            server.cmd(&[
                "EVAL",
                acquire,
                "3",
                "bare",
                "lockwarden:{bare}:token",
                request,
                "client:1",
                "30000",
                "10000",
                "1",
            ])
        };
        let fresh = take("lockwarden:{bare}:req:a");
        let Reply::Int(token) = fresh else {
            panic!("a fresh take answers with a number, got {fresh:?}");
        };
        assert!(token > 0);
        assert_eq!(
            server.cmd(&["HGET", "bare", ":token"]).as_int(),
            Some(token),
            "the hold's token is the one answered"
        );
        assert_eq!(
            take("lockwarden:{bare}:req:b"),
            Reply::Array(vec![Reply::Int(1), Reply::Int(token), Reply::Int(2)]),
            "a re-entry answers with the list"
        );
    })
    .await
}

/// Calls leave out the arguments they do not need. An attempt that only
/// tries leaves out what only a waiter's attempt reads (the waiters list,
/// how it waits, its client id): the first attempt of an uncontended
/// `lock()` sends 3 keys and 4 arguments, and the attempts of a wait send
/// all 4 keys and 6 arguments. A release off a cluster leaves out the
/// unlock message and the publish command (4 keys and 6 arguments). (The
/// server's slow log, told to keep every command, shows each call's
/// arguments.)
#[tokio::test]
async fn calls_leave_out_the_arguments_they_do_not_need() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        server.cmd(&["CONFIG", "SET", "slowlog-max-len", "10000"]);
        server.cmd(&["SLOWLOG", "RESET"]);

        let held = a.lock("trim").unwrap().lock().await.unwrap();
        let waiter = tokio::spawn(async move {
            let g = b.lock("trim").unwrap().lock().await.unwrap();
            g.unlock().await.unwrap();
        });
        // The waiter listens once its refused attempt put its client in
        // the waiters list.
        let listed = eventually(Duration::from_secs(10), || {
            server.cmd(&["LLEN", "lockwarden:{trim}:waiters"]).as_int() == Some(1)
        })
        .await;
        assert!(listed, "the waiter's client is in the waiters list");
        held.unlock().await.unwrap();
        waiter.await.unwrap();

        // EVALSHA sha numkeys lock token record ... (acquire) and
        // EVALSHA sha numkeys lock waiters record token ... (release).
        let log = server.cmd(&["SLOWLOG", "GET", "10000"]);
        let Reply::Array(entries) = log else {
            panic!("SLOWLOG GET: {log:?}")
        };
        let calls: Vec<Vec<String>> = entries
            .iter()
            .filter_map(|e| match e {
                Reply::Array(fields) => Some(fields.get(3)?.strings()),
                _ => None,
            })
            .filter(|args| {
                args.first().is_some_and(|c| c.eq_ignore_ascii_case("evalsha"))
                    && args.get(3).map(String::as_str) == Some("trim")
            })
            .collect();
        let with_second_key = |key: &str| -> Vec<&Vec<String>> {
            calls
                .iter()
                .filter(|args| args.get(4).map(String::as_str) == Some(key))
                .collect()
        };
        let acquires = with_second_key("lockwarden:{trim}:token");
        // (A client that got a wake-up it did not use passes it on: a
        // call with four keys, the lock, its waiters list, the asks and the
        // token counter, and three arguments.)
        let releases: Vec<_> = with_second_key("lockwarden:{trim}:waiters")
            .into_iter()
            .filter(|args| args[2] == "5")
            .collect();
        assert_eq!(releases.len(), 2, "both unlocks: {calls:?}");
        for r in &releases {
            assert_eq!(r.len(), 3 + 5 + 6, "a release call's arguments: {r:?}");
        }
        let tries = acquires.iter().filter(|a| a[2] == "3").count();
        let waits = acquires.iter().filter(|a| a[2] == "5").count();
        assert!(
            tries >= 2,
            "the first attempts of both lock() calls only try: {acquires:?}"
        );
        assert!(
            waits >= 1,
            "the waiter's later attempts say it waits, and ask for a grant: {acquires:?}"
        );
        for a in &acquires {
            // A waiter's: its ask's first lease and its attempt's number too.
            let expected = if a[2] == "3" { 3 + 3 + 4 } else { 3 + 5 + 8 };
            assert_eq!(a.len(), expected, "an acquire call's arguments: {a:?}");
        }
    })
    .await
}
