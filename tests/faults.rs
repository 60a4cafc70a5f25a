//! Faults: cancellation, flushed data and scripts, lost replies.
#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::LossReason;
use rand::Rng;

const LONG: Duration = Duration::from_secs(30);

both_kinds!(
    cancelling_lock_at_random_points_leaves_nothing_behind,
    a_dropped_reply_never_leaves_a_hold_count_off_by_one
);

fn assert_no_queue(server: &RedisServer, name: &str) {
    assert!(
        server.keys(&format!("lockwarden:{{{name}}}:queue")).is_empty(),
        "queue left behind"
    );
    assert!(
        server.keys(&format!("lockwarden:{{{name}}}:timeouts")).is_empty(),
        "deadlines left behind"
    );
}

async fn cancelling_lock_at_random_points_leaves_nothing_behind(kind: Kind) {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(2);
        let holders = client(&server.url(), lease).await;
        let cancelled = client(&server.url(), lease).await;
        let stop = Instant::now() + Duration::from_secs(60);
        let done = Arc::new(AtomicUsize::new(0));
        // Background contention: two tasks hand the lock around.
        let mut bg = Vec::new();
        for _ in 0..2 {
            let lock = kind.of(&holders, "cancel");
            let done = done.clone();
            bg.push(tokio::spawn(async move {
                while done.load(Ordering::SeqCst) < 1000 && Instant::now() < stop {
                    let g = lock.lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.unlock().await.unwrap();
                }
            }));
        }
        let acquired = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for w in 0..8 {
            let (lock, done, acquired) = (kind.of(&cancelled, "cancel"), done.clone(), acquired.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..125 {
                    let cut = Duration::from_micros(rand::thread_rng().gen_range(0..4000));
                    if (w + i) % 2 == 0 {
                        // Dropped future (timeout).
                        if let Ok(Ok(g)) = tokio::time::timeout(cut, lock.lock()).await {
                            acquired.fetch_add(1, Ordering::SeqCst);
                            drop(g);
                        }
                    } else {
                        // Aborted task.
                        let l = lock.clone();
                        let acquired = acquired.clone();
                        let t = tokio::spawn(async move {
                            let g = l.lock().await.unwrap();
                            acquired.fetch_add(1, Ordering::SeqCst);
                            g.unlock().await.unwrap();
                        });
                        tokio::time::sleep(cut).await;
                        t.abort();
                        let _ = t.await;
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        for t in bg {
            t.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 1000);
        // Released in the background, so long before the lease: no orphan.
        assert!(
            eventually(lease, || server.cmd(&["EXISTS", "cancel"]).as_int() == Some(0)).await,
            "orphan lock held by {:?}",
            server.cmd(&["HGETALL", "cancel"])
        );
        assert!(
            eventually(Duration::from_secs(5), || cancelled.held_locks() == 0
                && holders.held_locks() == 0)
            .await,
            "renewals leaked"
        );
        assert!(
            eventually(Duration::from_secs(5), || server.pubsub_channels().is_empty()
                && cancelled.waiting_channels() == 0)
            .await,
            "subscriptions leaked: {:?}",
            server.pubsub_channels()
        );
        // And nothing comes back once leases could have run out.
        tokio::time::sleep(lease).await;
        assert_eq!(server.cmd(&["EXISTS", "cancel"]).as_int(), Some(0));
        eprintln!(
            "{} of 1000 cancelled calls acquired before being cut",
            acquired.load(Ordering::SeqCst)
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_while_held_is_reported_lost_and_never_recreated() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(1);
        let c = client(&server.url(), lease).await;
        let guard = c.lock("flushed").unwrap().lock().await.unwrap();
        server.flushall();
        let flushed = Instant::now();
        let why = tokio::time::timeout(lease / 3 + Duration::from_millis(150), guard.lost())
            .await
            .expect("loss reported within one renewal period");
        assert_eq!(why, LossReason::Gone);
        assert!(guard.is_lost());
        eprintln!("loss seen {:?} after FLUSHALL", flushed.elapsed());
        assert_eq!(c.held_locks(), 1, "the guard still exists");
        tokio::time::sleep(lease).await;
        assert_eq!(
            server.cmd(&["EXISTS", "flushed"]).as_int(),
            Some(0),
            "the watchdog did not re-create it"
        );
        assert!(matches!(guard.unlock().await, Err(lockwarden::Error::NotHeld { .. })));
        assert_eq!(c.held_locks(), 0);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_is_invisible() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = client(&server.url(), Duration::from_millis(300)).await;
        let port = server.port;
        let flusher = tokio::spawn(async move {
            let mut r = Resp::connect(port).unwrap();
            for _ in 0..100 {
                r.cmd(&["SCRIPT", "FLUSH"]);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let lock = c.lock("flushing-scripts").unwrap();
        while !flusher.is_finished() {
            let g = lock.lock().await.expect("no NOSCRIPT reaches the caller");
            let g2 = lock.lock().await.unwrap();
            g2.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
            g.unlock().await.unwrap();
        }
        let noscript = server
            .info_field("errorstats", "errorstat_NOSCRIPT")
            .and_then(|v| v.strip_prefix("count=").map(|n| n.parse::<u64>().unwrap()))
            .unwrap_or(0);
        assert!(noscript > 0, "the flushes did hit the lock's calls");
    })
    .await
}

async fn a_dropped_reply_never_leaves_a_hold_count_off_by_one(kind: Kind) {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let c = client(&proxy.url(), LONG).await;
        let lock = kind.of(&c, "replayed");
        let field = |g: &lockwarden::LockGuard| g.owner().field().to_string();

        // Acquire: the script runs, its reply is lost, the connection resets.
        proxy.drop_next_reply();
        let g1 = lock.lock().await.expect("acquire survives a lost reply");
        assert_eq!(proxy.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(server.cmd(&["HGET", "replayed", &field(&g1)]).as_int(), Some(1));

        // Re-entry, then a release whose reply is lost.
        let g2 = lock.lock().await.unwrap();
        proxy.drop_next_reply();
        let g3 = lock.lock().await.unwrap();
        assert_eq!(proxy.dropped.load(Ordering::SeqCst), 2);
        assert_eq!(server.cmd(&["HGET", "replayed", &field(&g1)]).as_int(), Some(3));
        proxy.drop_next_reply();
        g3.unlock().await.expect("release survives a lost reply");
        assert_eq!(proxy.dropped.load(Ordering::SeqCst), 3);
        assert_eq!(server.cmd(&["HGET", "replayed", &field(&g1)]).as_int(), Some(2));
        g2.unlock().await.unwrap();
        proxy.drop_next_reply();
        g1.unlock().await.unwrap();
        assert_eq!(proxy.dropped.load(Ordering::SeqCst), 4);
        assert_eq!(server.cmd(&["EXISTS", "replayed"]).as_int(), Some(0));
        assert_no_queue(&server, "replayed");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_lock_and_unlock_is_two_script_calls() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let lock = c.lock("counted").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap(); // scripts cached
        let before = server.command_calls("evalsha");
        let cmds_before: u64 = server
            .info_field("stats", "total_commands_processed")
            .unwrap()
            .parse()
            .unwrap();
        for _ in 0..100 {
            lock.lock().await.unwrap().unlock().await.unwrap();
        }
        let cmds_after: u64 = server
            .info_field("stats", "total_commands_processed")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(server.command_calls("evalsha") - before, 200);
        assert_eq!(server.command_calls("eval"), 0);
        // 200 script calls + the INFO call in between; nothing else left the client.
        let outside_scripts = server.command_calls("evalsha") - before;
        eprintln!(
            "redis commands per lock+unlock (scripts' inner commands included): {:.1}",
            (cmds_after - cmds_before - 1) as f64 / 100.0
        );
        assert_eq!(outside_scripts, 200);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_failing_for_a_whole_lease_report_the_lock_lost() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(1);
        let c = lockwarden::Client::builder(&server.url())
            .watchdog_lease(lease)
            .command_timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap();
        let guard = c.lock("unconfirmed").unwrap().lock().await.unwrap();
        let acquired = Instant::now();
        server.pause();
        let why = tokio::time::timeout(lease * 3, guard.lost())
            .await
            .expect("loss reported");
        let after = acquired.elapsed();
        server.resume();
        assert_eq!(why, LossReason::RenewalFailed);
        // Not before the validity (lease − 1 % − 2 ms from when the acquire
        // was sent, just before `acquired`) ran out, and at most one renewal
        // period after the lease.
        let validity = lease - lease / 100 - Duration::from_millis(2);
        assert!(
            after + Duration::from_millis(20) >= validity,
            "reported lost too early: {after:?}"
        );
        assert!(
            after <= lease + lease / 3 + Duration::from_millis(300),
            "reported late: {after:?}"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_never_comes_is_undone_once_the_server_answers() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = lockwarden::Client::builder(&server.url())
            .command_timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap();
        let lock = c.lock("paused-acquire").unwrap();
        server.pause();
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(e.is_outcome_unknown(), "{e}");
        server.resume(); // the queued script now runs and takes the lock
        assert!(
            eventually(Duration::from_secs(3), || server
                .cmd(&["EXISTS", "paused-acquire"])
                .as_int()
                == Some(0))
            .await,
            "an acquisition nobody received is held for its 30 s lease: {:?}",
            server.cmd(&["HGETALL", "paused-acquire"])
        );
    })
    .await
}

/// A lock handle of one layout, made from a client and a name.
type Handle = fn(&lockwarden::Client, &str) -> lockwarden::Lock;

/// A force-unlock whose reply is lost (the script ran, the connection broke
/// before its answer) is sent again by the client: the second sending must
/// neither say there was no lock nor delete a lock taken since. The first
/// is shown here for every layout's force-unlock (lockwarden's, a
/// read-write side's, Redisson's lock, fair lock and read-write lock); the
/// next test plays the second on the scripts themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_whose_reply_was_lost_says_it_freed_the_lock() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let holder = client(&server.url(), LONG).await;
        let admin = client(&proxy.url(), LONG).await;
        let cases: [(&str, Handle); 6] = [
            ("plain", |c, n| c.lock(n).unwrap()),
            ("fair", |c, n| c.fair_lock(n).unwrap()),
            ("write", |c, n| c.rw_lock(n).unwrap().write()),
            ("redisson", |c, n| c.redisson_lock(n).unwrap()),
            ("redisson-fair", |c, n| c.redisson_fair_lock(n).unwrap()),
            ("redisson-write", |c, n| c.redisson_rw_lock(n).unwrap().write()),
        ];
        for (name, of) in cases {
            let held = of(&holder, name).lock().await.unwrap();
            let dropped = proxy.dropped.load(Ordering::SeqCst);
            proxy.drop_next_reply();
            assert!(
                of(&admin, name).force_unlock().await.expect("survives the lost reply"),
                "{name}: the force-unlock freed a lock, and says so"
            );
            assert_eq!(proxy.dropped.load(Ordering::SeqCst), dropped + 1, "{name}");
            assert!(!of(&admin, name).is_locked().await.unwrap(), "{name}");
            assert!(held.unlock().await.is_err(), "{name}: the hold was freed");
        }
    })
    .await
}

/// The force-unlock scripts as `src/protocol/` puts them together.
const FORCE_UNLOCK: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_wake.lua"),
    include_str!("../lua/force_unlock.lua")
);
const REDISSON_FORCE_UNLOCK: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/redisson_force_unlock.lua")
);

/// A force-unlock sent again after its first sending freed the lock and
/// another client took it since: the re-send finds its record, answers as
/// the first did, and leaves the new hold alone (lockwarden's layout and
/// Redisson's). Run on the very script texts the library loads (checked
/// against the server's script cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_sent_again_leaves_a_lock_taken_since_alone() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let cached = server.info_field("memory", "number_of_cached_scripts");
        for text in [FORCE_UNLOCK, REDISSON_FORCE_UNLOCK] {
            server.cmd(&["SCRIPT", "LOAD", text]);
        }
        assert_eq!(
            server.info_field("memory", "number_of_cached_scripts"),
            cached,
            "the library's own scripts"
        );
        let forced = |text: &str, name: &str, rec: &str, first: &str| {
            let (keys, args): (Vec<String>, Vec<&str>) = if text == FORCE_UNLOCK {
                let k = |s: &str| format!("lockwarden:{{{name}}}:{s}");
                (
                    vec![
                        name.to_string(),
                        k("channel"),
                        k("queue"),
                        k("asks"),
                        k("waiters"),
                        k("writers"),
                        rec.to_string(),
                    ],
                    vec!["0", "lockwarden:wake:", "PUBLISH", "", "60000", first],
                )
            } else {
                (
                    vec![
                        name.to_string(),
                        format!("redisson_lock__channel:{{{name}}}"),
                        rec.to_string(),
                    ],
                    vec!["PUBLISH", "60000", first],
                )
            };
            let n = keys.len().to_string();
            let mut cmd = vec!["EVAL", text, &n];
            cmd.extend(keys.iter().map(String::as_str));
            cmd.extend(args);
            server.cmd(&cmd).as_int()
        };
        for (text, name, lock) in [
            (FORCE_UNLOCK, "again", c.lock("again").unwrap()),
            (
                REDISSON_FORCE_UNLOCK,
                "again-redisson",
                c.redisson_lock("again-redisson").unwrap(),
            ),
        ] {
            let rec = format!("lockwarden:{{{name}}}:req:force");
            let first = lock.lock().await.unwrap();
            assert_eq!(forced(text, name, &rec, "1"), Some(1), "{name}: freed");
            assert!(first.unlock().await.is_err(), "{name}: the first hold is gone");
            let since = lock.lock().await.unwrap();
            assert_eq!(
                forced(text, name, &rec, "0"),
                Some(1),
                "{name}: the first sending's answer"
            );
            assert!(lock.is_locked().await.unwrap(), "{name}: the hold taken since stays");
            since.unlock().await.expect("still held");
            // Without its record (it lapsed), a re-send is a new call.
            server.cmd(&["DEL", &rec]);
            let third = lock.lock().await.unwrap();
            assert_eq!(forced(text, name, &rec, "0"), Some(1), "{name}");
            assert!(third.unlock().await.is_err(), "{name}");
        }
    })
    .await
}
