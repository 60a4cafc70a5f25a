//! The semaphore with expiring permits against a real redis-server: the
//! bound, many permits at once, a dead holder's permits coming back, the
//! bound under 32 clients with replies dropped, wake-ups, cancellation,
//! changing the number, replays and the quorum refusal.
#[macro_use]
mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::Error;

const LONG: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(90);

/// Permits held in the hash `key` (live or not yet pruned).
fn held(server: &RedisServer, key: &str) -> u64 {
    server.owners(key).iter().map(|(_, n)| n.parse::<u64>().unwrap()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_the_number_of_permits_is_held() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(client(&server.url(), LONG).await);
        }
        let sem = clients[0].semaphore("pool", 3).unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 3);
        let mut permits = Vec::new();
        for c in &clients[..3] {
            let p = c
                .semaphore("pool", 3)
                .unwrap()
                .try_acquire(Duration::ZERO, None)
                .await
                .unwrap();
            permits.push(p.expect("a permit is free"));
        }
        assert_eq!(held(&server, "pool"), 3);
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        let fourth = clients[3].semaphore("pool", 3).unwrap();
        assert!(fourth
            .try_acquire(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none());
        permits.pop().unwrap().release().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 1);
        let p = fourth
            .try_acquire(Duration::ZERO, None)
            .await
            .unwrap()
            .expect("one came back");
        assert_eq!(p.permits(), 1);
        p.release().await.unwrap();
        for p in permits {
            p.release().await.unwrap();
        }
        assert_eq!(server.cmd(&["EXISTS", "pool"]).as_int(), Some(0), "nothing left");
        // Bad requests change nothing.
        assert!(matches!(sem.acquire_many(0).await, Err(Error::Config(_))));
        assert!(matches!(sem.acquire_many(4).await, Err(Error::Config(_))));
        assert!(matches!(clients[0].semaphore("pool", 0), Err(Error::Config(_))));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_permits_are_taken_all_or_none_and_waiters_wake_on_release() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let two = a.semaphore("batch", 3).unwrap().acquire_many(2).await.unwrap();
        assert_eq!(two.permits(), 2);
        let sem = b.semaphore("batch", 3).unwrap();
        let waiting = tokio::spawn(async move { sem.acquire_many(2).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "two of the three are taken");
        assert_eq!(held(&server, "batch"), 2, "nothing taken while waiting");
        let released = Instant::now();
        two.release().await.unwrap();
        let p = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the release, not by the 30 s lease")
            .unwrap()
            .unwrap();
        assert!(released.elapsed() < Duration::from_secs(5));
        assert_eq!(held(&server, "batch"), 2);
        p.release().await.unwrap();
    })
    .await
}

/// A holder that stops renewing (its process died: a fixed lease, a permit
/// never released) gives its permit back when the lease ends, while a
/// watchdog holder keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_gives_its_permits_back_when_its_lease_ends() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let dead = client(&server.url(), LONG).await;
        let alive = client(&server.url(), Duration::from_millis(900)).await;
        let other = client(&server.url(), LONG).await;
        let p = dead
            .semaphore("expiring", 2)
            .unwrap()
            .try_acquire(Duration::ZERO, Duration::from_millis(800))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(p);
        let kept = alive.semaphore("expiring", 2).unwrap().acquire().await.unwrap();
        let sem = other.semaphore("expiring", 2).unwrap();
        assert!(sem.try_acquire(Duration::ZERO, None).await.unwrap().is_none());
        let started = Instant::now();
        let got = sem
            .try_acquire(Duration::from_secs(10), None)
            .await
            .unwrap()
            .expect("the dead holder's permit came back");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!kept.is_lost(), "the live holder renews its own lease");
        assert_eq!(held(&server, "expiring"), 2);
        got.release().await.unwrap();
        kept.release().await.unwrap();
    })
    .await
}

/// 32 clients, each taking and giving back one of 4 permits in a loop, with
/// replies dropped now and then (the script ran, the client never heard):
/// never more than 4 held at once, on the server and as the holders count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_are_never_over_granted_under_32_clients_with_replies_dropped() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let proxy = Arc::new(Proxy::start(server.port).await);
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..32 {
            let url = if i % 4 == 0 { proxy.url() } else { server.url() };
            let c = client(&url, LONG).await;
            let (inside, most, done) = (inside.clone(), most.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let sem = c.semaphore("bounded", 4).unwrap();
                let end = Instant::now() + Duration::from_secs(4);
                while Instant::now() < end {
                    let Ok(Some(p)) = sem.try_acquire(Duration::from_secs(2), LONG).await else {
                        continue;
                    };
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let _ = p.release().await;
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        let dropper = {
            let (proxy, server) = (proxy.clone(), &server);
            let mut over = 0;
            let end = Instant::now() + Duration::from_secs(4);
            while Instant::now() < end {
                proxy.drop_next_reply();
                over = over.max(held(server, "bounded"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            over
        };
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            most.load(Ordering::SeqCst) <= 4,
            "{} held at once",
            most.load(Ordering::SeqCst)
        );
        assert!(dropper <= 4, "{dropper} permits on the server at once");
        assert!(proxy.dropped.load(Ordering::SeqCst) > 5, "replies were dropped");
        assert!(
            done.load(Ordering::SeqCst) > 100,
            "{} acquisitions",
            done.load(Ordering::SeqCst)
        );
        assert!(
            eventually(Duration::from_secs(10), || held(&server, "bounded") == 0).await,
            "every permit came back: {:?}",
            server.cmd(&["HGETALL", "bounded"])
        );
    })
    .await
}

/// Dropping a waiting or in-flight acquire leaves no permit held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_no_permit() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let p = a.semaphore("drop", 1).unwrap().acquire().await.unwrap();
        let sem = b.semaphore("drop", 1).unwrap();
        let waiting = tokio::spawn(async move { sem.acquire().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        waiting.abort();
        let _ = waiting.await;
        p.release().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "drop"]).as_int(), Some(0));
        // Dropped at every point of an uncontended acquire.
        for i in 0..50u64 {
            let sem = b.semaphore("drop", 1).unwrap();
            // Every acquiring call, in turn.
            let call = tokio::spawn(async move {
                let p = match i % 4 {
                    0 => sem.acquire().await,
                    1 => sem.acquire_many(1).await,
                    2 => sem.try_acquire(Duration::from_secs(5), None).await.map(Option::unwrap),
                    _ => sem
                        .try_acquire_many(1, Duration::from_secs(5), None)
                        .await
                        .map(Option::unwrap),
                };
                p.map(std::mem::forget)
            });
            tokio::time::sleep(Duration::from_micros(50 * (i % 10))).await;
            call.abort();
            if let Ok(Ok(())) = call.await {
                // Completed before the abort: the forgotten permit's guard
                // never releases, so give it back by hand.
                server.cmd(&["DEL", "drop"]);
            }
        }
        assert!(
            eventually(Duration::from_secs(5), || server.cmd(&["EXISTS", "drop"]).as_int()
                == Some(0))
            .await,
            "an orphan permit: {:?}",
            server.cmd(&["HGETALL", "drop"])
        );
    })
    .await
}

/// While no number is stored, the number belongs to the handle: a smaller
/// one takes nothing from holders and waits for the use to fit; a larger
/// one lets more in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_number_of_permits() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let two = c.semaphore("resize", 2).unwrap();
        let p1 = two.acquire().await.unwrap();
        let p2 = two.acquire().await.unwrap();
        let one = c.semaphore("resize", 1).unwrap();
        assert_eq!(one.available_permits().await.unwrap(), 0);
        assert!(one.try_acquire(Duration::ZERO, None).await.unwrap().is_none());
        assert!(!p1.is_lost() && !p2.is_lost(), "lowering takes nothing from holders");
        let five = c.semaphore("resize", 5).unwrap();
        assert_eq!(five.available_permits().await.unwrap(), 3);
        let p3 = five.try_acquire(Duration::ZERO, None).await.unwrap().expect("raised");
        p1.release().await.unwrap();
        p2.release().await.unwrap();
        assert!(
            one.try_acquire(Duration::ZERO, None).await.unwrap().is_none(),
            "one held, one permit"
        );
        p3.release().await.unwrap();
        one.try_acquire(Duration::ZERO, None)
            .await
            .unwrap()
            .expect("fits now")
            .release()
            .await
            .unwrap();
    })
    .await
}

/// The script's own replay safety: the same acquisition (same permit id)
/// sent twice takes its permits once; a release sent twice gives them back
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_acquire_or_release_applies_once() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let shared = include_str!("../lua/shared.lua").to_string() + include_str!("../lua/shared_rw.lua");
        let shared = shared + include_str!("../lua/shared_claim.lua");
        let acquire =
            shared.clone() + include_str!("../lua/shared_listen.lua") + include_str!("../lua/sem_acquire.lua");
        let release = shared
            + include_str!("../lua/shared_wake.lua")
            + include_str!("../lua/shared_permits.lua")
            + include_str!("../lua/sem_release.lua");
        let acq_by = |id: &str, req: &str| {
            server.cmd(&[
                "EVAL",
                &acquire,
                "2",
                "replay",
                "replay-number",
                id,
                "2",
                "3",
                "30000",
                "0",
                req,
            ])
        };
        let acq = |id: &str| acq_by(id, "req-1");
        assert_eq!(acq("c:p1:r"), acq("c:p1:r"));
        assert_eq!(held(&server, "replay"), 2, "taken once");
        let granted = acq("c:p1:r");
        assert_ne!(acq("c:p2:r"), granted, "refused: 2 of 3 held");
        assert_eq!(held(&server, "replay"), 2, "still 2");
        // Another attempt of the same acquisition (another request) does
        // not count the first attempt's grant as its own: that one's
        // re-send gives it back.
        assert_ne!(acq_by("c:p1:r", "req-2"), granted, "another request is refused");
        assert_eq!(held(&server, "replay"), 2, "still 2");
        let rel = |id: &str| {
            server
                .cmd(&["EVAL", &release, "2", "replay", "ch", id, "PUBLISH", "0"])
                .as_int()
        };
        assert_eq!(rel("c:p1:r"), Some(0));
        assert_eq!(rel("c:p1:r"), Some(-1), "the replay finds nothing");
        assert_eq!(server.cmd(&["EXISTS", "replay"]).as_int(), Some(0));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_masters_refuses_a_semaphore() {
    bounded(BOUND, async {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let c = lockwarden::Client::builder_for_masters(&urls).build().await.unwrap();
        let e = c.semaphore("q", 2).unwrap_err();
        assert!(matches!(&e, Error::Config(m) if m.contains("quorum")), "{e}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_refused_and_left_alone() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        server.cmd(&["SET", "notsem", "x"]);
        let sem = c.semaphore("notsem", 2).unwrap();
        let e = sem.try_acquire(Duration::ZERO, None).await.unwrap_err();
        assert!(matches!(&e, Error::WrongType { key, .. } if key == "notsem"), "{e}");
        assert!(matches!(sem.available_permits().await, Err(Error::WrongType { .. })));
        assert_eq!(server.cmd(&["GET", "notsem"]).as_str(), Some("x"));
    })
    .await
}

/// Redisson's permit-expirable scenarios: a permit whose lease ended cannot
/// be released (it is reported lost, and `release` says not held), and its
/// permit is free for others at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_permit_is_lost_and_its_release_says_so() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let sem = c.semaphore("expire", 1).unwrap();
        let p = sem
            .try_acquire(Duration::ZERO, Duration::from_millis(300))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        tokio::time::timeout(Duration::from_secs(3), p.lost())
            .await
            .expect("lost at its lease's end");
        assert!(p.is_lost());
        // The holder counts it lost a little before the server's deadline
        // (the drift allowance); the server frees it at the deadline.
        let started = Instant::now();
        while sem.available_permits().await.unwrap() != 1 {
            assert!(started.elapsed() < Duration::from_secs(2), "free again on the server");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(matches!(p.release().await, Err(Error::NotHeld { .. })));
        let again = sem
            .try_acquire(Duration::ZERO, None)
            .await
            .unwrap()
            .expect("taken again");
        again.release().await.unwrap();
    })
    .await
}

/// Several waits of one client behind a holder of another: each gets the
/// permit in turn by release messages (a client wakes one wait per message,
/// so a permit taken while others of its client wait is marked to wake
/// them on release), not by the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_of_one_client_get_the_permit_in_turn() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let c = client(&server.url(), LONG).await;
        let p = holder.semaphore("turns", 1).unwrap().acquire().await.unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (sem, done) = (c.semaphore("turns", 1).unwrap(), done.clone());
            tasks.push(tokio::spawn(async move {
                let p = sem.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
                p.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert!(eventually(Duration::from_secs(5), || c.waiting_channels() == 1).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
        p.release().await.unwrap();
        assert!(
            eventually(Duration::from_secs(5), || done.load(Ordering::SeqCst) == 3).await,
            "{} of 3 got the permit by release messages",
            done.load(Ordering::SeqCst)
        );
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

/// A dropped `Permit` gives its permits back in the background, long
/// before its 30 s lease would, and its renewals stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_permit_is_given_back() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let sem = c.semaphore("dropped", 2).unwrap();
        let p = sem.acquire_many(2).await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        drop(p);
        assert!(
            eventually(Duration::from_secs(5), || server.cmd(&["EXISTS", "dropped"]).as_int()
                == Some(0))
            .await,
            "given back: {:?}",
            server.cmd(&["HGETALL", "dropped"])
        );
        assert!(
            eventually(Duration::from_secs(5), || c.held_locks() == 0).await,
            "renewals stopped"
        );
        assert_eq!(sem.available_permits().await.unwrap(), 2);
    })
    .await
}

/// The number stored with the semaphore (Redisson's verbs): it applies to
/// every handle; `try_set_permits` stores it once; `add_permits` raises it
/// (waking a waiter by message, long before the holders' leases end) or
/// lowers it (taking nothing from holders), never below zero;
/// `acquired_permits` and `total_permits` read it; a FLUSHALL loses it and
/// the handles' numbers apply again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_number_stored_with_the_semaphore_applies_to_every_handle() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let two = c.semaphore("stored", 2).unwrap();
        assert_eq!(two.total_permits().await.unwrap(), 2);
        assert!(two.try_set_permits(1).await.unwrap());
        assert!(!two.try_set_permits(4).await.unwrap(), "stored once");
        assert_eq!(two.total_permits().await.unwrap(), 1);
        let held = two.acquire().await.unwrap();
        assert_eq!(two.acquired_permits().await.unwrap(), 1);
        assert_eq!(two.available_permits().await.unwrap(), 0);
        assert!(
            two.try_acquire(Duration::ZERO, None).await.unwrap().is_none(),
            "the stored 1 applies"
        );
        let w = client(&server.url(), LONG).await;
        let waiter = tokio::spawn(async move {
            w.semaphore("stored", 2)
                .unwrap()
                .acquire()
                .await
                .map(|p| (Instant::now(), p))
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished());
        let raised = Instant::now();
        assert_eq!(two.add_permits(1).await.unwrap(), 2);
        let (got_at, p) = waiter.await.unwrap().unwrap();
        // Woken by the raise's message: the holder's lease is 30 s.
        assert!(
            got_at.duration_since(raised) < Duration::from_secs(2),
            "{:?}",
            got_at.duration_since(raised)
        );
        assert!(matches!(two.add_permits(-3).await, Err(Error::Config(_))));
        assert_eq!(two.add_permits(-2).await.unwrap(), 0);
        assert!(!held.is_lost() && !p.is_lost(), "lowering takes nothing from holders");
        assert_eq!(two.acquired_permits().await.unwrap(), 2);
        assert_eq!(two.available_permits().await.unwrap(), 0);
        held.release().await.unwrap();
        p.release().await.unwrap();
        assert!(
            two.try_acquire(Duration::ZERO, None).await.unwrap().is_none(),
            "zero permits"
        );
        server.flushall();
        assert_eq!(two.total_permits().await.unwrap(), 2, "lost: the handle's number");
        two.try_acquire(Duration::ZERO, None)
            .await
            .unwrap()
            .expect("the handle's 2")
            .release()
            .await
            .unwrap();
        server.cmd(&["SET", "lockwarden:{stored}:permits", "x"]);
        assert!(matches!(
            two.try_acquire(Duration::ZERO, None).await,
            Err(Error::WrongType { .. })
        ));
        assert!(matches!(two.add_permits(1).await, Err(Error::WrongType { .. })));
        assert_eq!(server.cmd(&["GET", "lockwarden:{stored}:permits"]).as_str(), Some("x"));
    })
    .await
}

/// A semaphore whose number was lowered to none, with nobody holding
/// permits: a waiting acquire is refused (its wait runs out) and leaves no
/// key behind, so raising the number lets the next acquire in (a stray
/// hash of the waiter's mark alone, without kind or TTL, once refused every
/// later call as no lockwarden hash; the model check found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_semaphore_of_no_permits_leaves_no_key() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let sem = c.semaphore("none", 2).unwrap();
        assert_eq!(sem.add_permits(-2).await.unwrap(), 0);
        assert!(sem
            .try_acquire(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            server.cmd(&["EXISTS", "none"]).as_int(),
            Some(0),
            "the refused waiter wrote the semaphore's hash"
        );
        assert_eq!(sem.add_permits(1).await.unwrap(), 1);
        let p = sem
            .try_acquire(Duration::ZERO, None)
            .await
            .unwrap()
            .expect("the raised number's permit");
        p.release().await.unwrap();
    })
    .await
}

/// `drain_permits` takes every free permit in one acquisition;
/// `release_by_id` gives back an acquisition by its id from another
/// client (the holder learns it lost them at its next renewal, and a
/// waiter gets them); `acquire_with_lease` waits without a bound and keeps
/// a fixed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_release_by_id_and_acquire_with_a_lease() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let lease = Duration::from_millis(1500);
        let a = client(&server.url(), lease).await;
        let b = client(&server.url(), lease).await;
        let sem = a.semaphore("pool3", 3).unwrap();
        let one = sem.acquire().await.unwrap();
        let drained = sem.drain_permits(None).await.unwrap().expect("two were free");
        assert_eq!(drained.permits(), 2);
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        assert!(sem.drain_permits(None).await.unwrap().is_none());
        let other = b.semaphore("pool3", 3).unwrap();
        let waiter = tokio::spawn({
            let other = other.clone();
            async move { other.acquire_with_lease(Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        other.release_by_id(&one.id()).await.unwrap();
        assert!(matches!(
            other.release_by_id(&one.id()).await,
            Err(Error::NotHeld { .. })
        ));
        assert!(matches!(
            other.release_by_id("not-a-permit").await,
            Err(Error::NotHeld { .. })
        ));
        let got = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("woken")
            .unwrap()
            .unwrap();
        assert_eq!(got.permits(), 1);
        assert_eq!(got.lease(), lockwarden::Lease::Fixed(Duration::from_secs(5)));
        let why = tokio::time::timeout(lease, one.lost())
            .await
            .expect("the holder is told");
        assert_eq!(why, lockwarden::LossReason::Gone);
        assert!(matches!(one.release().await, Err(Error::NotHeld { .. })));
        drained.release().await.unwrap();
        got.release().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 3);
    })
    .await
}

/// A release hands its permit to the client that has waited longest: the
/// permit is written for that client's waiting attempt and the message
/// tells it so, with no attempt of its own after the release (each
/// handoff is one release call), and the waiting clients get the permit in
/// the order they were refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_permit_to_the_client_waiting_longest() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let p = holder.semaphore("handoff", 1).unwrap().acquire().await.unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..4u64 {
            let c = client(&server.url(), LONG).await;
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let p = c.semaphore("handoff", 1).unwrap().acquire().await.unwrap();
                order.lock().push(i);
                tokio::time::sleep(Duration::from_millis(20)).await;
                p.release().await.unwrap();
                c
            }));
            // Listed in turn: each waits until the one before is in line.
            let listed = || server.cmd(&["LLEN", "lockwarden:{handoff}:waiters"]).as_int() == Some(i as i64 + 1);
            assert!(eventually(Duration::from_secs(5), listed).await, "waiter {i} listed");
        }
        let calls = server.command_calls("evalsha");
        p.release().await.unwrap();
        // The clients stay open until counted: a client that closes passes
        // on any wake-up its channels may have had, with a call of its own.
        let mut clients = Vec::new();
        for t in tasks {
            clients.push(t.await.unwrap());
        }
        assert_eq!(*order.lock(), vec![0, 1, 2, 3], "served in the order they were refused");
        assert_eq!(
            server.command_calls("evalsha") - calls,
            5,
            "five releases, each handing the permit over: no waiter made an attempt after one"
        );
    })
    .await
}

/// A force-unlock of a semaphore (`lockwarden unlock --force`, a plain
/// lock handle) frees every permit: every listed client is told, not only
/// the first (the others would sleep until their wake patience, an hour
/// here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_tells_every_waiting_client() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let _both = holder.semaphore("forced", 2).unwrap().acquire_many(2).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..2i64 {
            let c = client(&server.url(), LONG).await;
            tasks.push(tokio::spawn(async move {
                let p = c.semaphore("forced", 2).unwrap().acquire().await.unwrap();
                (p, c)
            }));
            let listed = || server.cmd(&["LLEN", "lockwarden:{forced}:waiters"]).as_int() == Some(i + 1);
            assert!(eventually(Duration::from_secs(5), listed).await, "waiter {i} listed");
        }
        assert!(holder.lock("forced").unwrap().force_unlock().await.unwrap());
        // Both held at once (a permit given back would wake the other).
        let both = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(tasks))
            .await
            .expect("each waiting client is told by the force-unlock");
        assert_eq!(held(&server, "forced"), 2);
        drop(both);
    })
    .await
}

/// A waiting client that is gone (its wake channel no longer subscribed)
/// is not handed the permit: the release undoes the grant nobody heard and
/// hands it to the next client in line instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_nobody_hears_goes_to_the_next_client() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let p = holder.semaphore("gone", 1).unwrap().acquire().await.unwrap();
        // A client that asked and left: listed, with an ask, and no
        // subscriber on its wake channel.
        server.cmd(&["RPUSH", "lockwarden:{gone}:waiters", "ghost"]);
        server.cmd(&["HSET", "lockwarden:{gone}:asks", "ghost", "20000 req-1 1 1 ghost:p1:r"]);
        let waiter = client(&server.url(), LONG).await;
        let wait = tokio::spawn(async move {
            waiter
                .semaphore("gone", 1)
                .unwrap()
                .try_acquire(Duration::from_secs(10), None)
                .await
        });
        let listed = || server.cmd(&["LLEN", "lockwarden:{gone}:waiters"]).as_int() == Some(2);
        assert!(eventually(Duration::from_secs(5), listed).await, "the waiter is listed");
        p.release().await.unwrap();
        let got = wait.await.unwrap().unwrap().expect("the permit, past the ghost");
        let owners = server.owners("gone");
        assert_eq!(owners.len(), 1, "only the waiter holds: {owners:?}");
        assert!(!owners[0].0.starts_with("ghost"), "{owners:?}");
        assert_eq!(
            server.cmd(&["HEXISTS", "lockwarden:{gone}:asks", "ghost"]).as_int(),
            Some(0)
        );
        got.release().await.unwrap();
    })
    .await
}

/// A release hands the permit to the waiting client, whose message is held
/// up on the way (its subscriber connection lags). The grant's first lease
/// runs out, another client takes the permit, and the waiter's next look
/// is refused (its client listed again); then the message arrives. It
/// names an earlier attempt than that look, and must not give the waiter
/// a second permit of one (the model checker's `ClaimIgnoresAttempt`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_message_that_comes_after_the_grant_lapsed_is_not_taken_for_a_permit() {
    bounded(
        Duration::from_secs(150),
        until_premise_holds(3, |_| late_grant_message()),
    )
    .await
}

/// One play of the test above; `None` when the waiter's own look took the grant
/// before it lapsed, or the permit once it had (a loaded machine).
async fn late_grant_message() -> Option<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let holder = client(&server.url(), LONG).await;
    let held = holder.semaphore("late", 1).unwrap().acquire().await.unwrap();
    // Looks every 2 s; the grant's first lease is its lease, 400 ms:
    // it lapses long before the waiter's next look.
    let c = lockwarden::Client::builder(&proxy.url())
        .watchdog_lease(LONG)
        .wake_patience(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let sem = c.semaphore("late", 1).unwrap();
    let waiter = tokio::spawn(async move {
        let p = sem
            .try_acquire(Duration::from_secs(20), Duration::from_millis(400))
            .await
            .unwrap()
            .expect("handed a permit in the end");
        (Instant::now(), p)
    });
    let listed = || {
        server
            .cmd(&["LLEN", "lockwarden:{late}:waiters"])
            .as_int()
            .unwrap_or(-1)
    };
    assert!(eventually(Duration::from_secs(5), || listed() == 1).await);
    // Right after one of the waiter's looks (the next is 2 s away), the
    // release hands it the permit.
    let calls = server.command_calls("evalsha");
    assert!(eventually(Duration::from_secs(3), || server.command_calls("evalsha") > calls).await);
    proxy.hold_messages();
    held.release().await.unwrap();
    assert_eq!(listed(), 0, "handed over");
    assert!(
        eventually(Duration::from_secs(2), || server.cmd(&["EXISTS", "late"]).as_int()
            == Some(0))
        .await,
        "the grant's first lease ran out"
    );
    if waiter.is_finished() {
        return None; // its own attempt came within the grant's lease and took it
    }
    let other = client(&server.url(), LONG).await;
    let taken = other
        .semaphore("late", 1)
        .unwrap()
        .try_acquire(Duration::ZERO, LONG)
        .await
        .unwrap()?; // else its own attempt came between the lapse and this
                    // The waiter's next look is refused (its client listed again); the
                    // old message comes right after.
    assert!(eventually(Duration::from_secs(3), || listed() == 1).await);
    proxy.pass_messages();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took the late message for a permit while another held the only one"
    );
    let released = Instant::now();
    taken.release().await.unwrap();
    let (got, p) = waiter.await.unwrap();
    assert!(got >= released);
    p.release().await.unwrap();
    Some(())
}

/// A release names the request that took its permits: a hold of the same
/// permit id that another attempt of the acquisition made (which a
/// give-back of an attempt whose outcome was unknown could meet, once the
/// hold it was for had lapsed and the wait took the permits again) is
/// left alone. Played here by rewriting the hold's request on the server;
/// for the semaphore and the fair semaphore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_leaves_alone_a_hold_of_its_permit_id_that_another_request_made() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        for (name, fair) in [("plain", false), ("fair", true)] {
            let sem = match fair {
                false => c.semaphore(name, 2).unwrap(),
                true => c.fair_semaphore(name, 2).unwrap(),
            };
            let permit = sem.try_acquire(Duration::ZERO, None).await.unwrap().expect("free");
            let fields = server.cmd(&["HKEYS", name]).strings();
            let q = fields
                .iter()
                .find(|f| f.starts_with(":q:"))
                .expect("the hold's request field")
                .clone();
            server.cmd(&["HSET", name, &q, "another-attempt"]);
            assert!(
                permit.release().await.is_err(),
                "{name}: released another request's hold"
            );
            assert_eq!(held(&server, name), 1, "{name}: the other request's hold stays");
        }
    })
    .await;
}

/// Changing the number whose reply is lost (the script ran, the connection
/// broke before its answer): the client sends the same call again, which
/// must not add a second time (more permits than anyone asked for), and a
/// setting that stored the number still says so. Every layout: plain,
/// fair, Redisson's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_the_number_whose_reply_was_lost_is_made_once() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let c = client(&proxy.url(), LONG).await;
        for (i, sem) in [
            c.semaphore("lost-plain", 2).unwrap(),
            c.fair_semaphore("lost-fair", 2).unwrap(),
            c.redisson_semaphore("lost-redisson", 2).unwrap(),
        ]
        .into_iter()
        .enumerate()
        {
            let dropped = proxy.dropped.load(Ordering::SeqCst);
            proxy.drop_next_reply();
            assert!(
                sem.try_set_permits(3).await.expect("survives the lost reply"),
                "{i}: stored"
            );
            assert_eq!(proxy.dropped.load(Ordering::SeqCst), dropped + 1);
            proxy.drop_next_reply();
            assert_eq!(sem.add_permits(2).await.expect("survives the lost reply"), 5, "{i}");
            assert_eq!(proxy.dropped.load(Ordering::SeqCst), dropped + 2);
            assert_eq!(sem.total_permits().await.unwrap(), 5, "{i}: added once");
            assert_eq!(sem.available_permits().await.unwrap(), 5, "{i}");
            // A give-back by id whose reply is lost: its re-send finds
            // nothing to give back, and the call still says it is done.
            let p = sem.try_acquire(Duration::ZERO, LONG).await.unwrap().expect("free");
            assert_eq!(sem.available_permits().await.unwrap(), 4, "{i}");
            proxy.drop_next_reply();
            sem.release_by_id(&p.id()).await.expect("given back, its reply lost");
            assert_eq!(proxy.dropped.load(Ordering::SeqCst), dropped + 3);
            assert_eq!(sem.available_permits().await.unwrap(), 5, "{i}");
            assert!(
                matches!(sem.release_by_id(&p.id()).await, Err(Error::NotHeld { .. })),
                "{i}"
            );
            drop(p);
        }
    })
    .await
}

/// A permit handed over by a release and claimed from its message (no
/// attempt of the waiter's after the release) names the waiting request in
/// its release, as a permit the waiter's own attempt took does: a hold of
/// the same permit id that another request made (a re-send of one of the
/// acquisition's earlier attempts, taking the permits anew after this hold
/// lapsed) is left alone. Played by rewriting the hold's request on the
/// server; for the semaphore and the fair semaphore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_grant_releases_only_the_hold_its_request_was_granted() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        for (name, fair) in [("claimed-plain", false), ("claimed-fair", true)] {
            let holder = client(&server.url(), LONG).await;
            // A fair grant's first lease is cut to the waiter's queue
            // deadline, and a third of it in the waiter extends it: a long
            // timeout keeps that call out of the count below.
            let waiter = lockwarden::Client::builder(&server.url())
                .watchdog_lease(LONG)
                .fair_waiter_timeout(Duration::from_secs(60))
                .build()
                .await
                .unwrap();
            let sem = |c: &lockwarden::Client| match fair {
                false => c.semaphore(name, 1).unwrap(),
                true => c.fair_semaphore(name, 1).unwrap(),
            };
            // The waiter may still be settling into its sleep (its reply
            // read, its subscription made) when the release hands it the
            // permit: it then takes it with an attempt of its own, from its
            // record. Until a round where it claims the message instead.
            let mut claimed = None;
            for _ in 0..10 {
                let held_first = sem(&holder).acquire().await.unwrap();
                let waiting = sem(&waiter);
                let task = tokio::spawn(async move { waiting.try_acquire(Duration::from_secs(20), LONG).await });
                let asks = format!("lockwarden:{{{name}}}:asks");
                assert!(
                    eventually(Duration::from_secs(5), || server.cmd(&["HLEN", &asks]).as_int()
                        == Some(1))
                    .await,
                    "{name}: the waiter asked to be handed the permit"
                );
                let calls = server.command_calls("evalsha");
                held_first.release().await.unwrap();
                let permit = task.await.unwrap().unwrap().expect("handed the permit");
                // The release was the only call: claimed from the message.
                if server.command_calls("evalsha") - calls == 1 {
                    claimed = Some(permit);
                    break;
                }
                permit.release().await.unwrap();
            }
            let permit = claimed.expect("a round where the waiter claimed the grant from its message");
            let q = server
                .cmd(&["HKEYS", name])
                .strings()
                .into_iter()
                .find(|f| f.starts_with(":q:"))
                .expect("the hold's request field");
            server.cmd(&["HSET", name, &q, "another-attempt"]);
            assert!(
                permit.release().await.is_err(),
                "{name}: the claimed grant released another request's hold"
            );
            assert_eq!(held(&server, name), 1, "{name}: the other request's hold stays");
        }
    })
    .await;
}

/// Six tasks taking one permit of four in a loop (5 ms holds, asking again
/// at once): an acquisition of two, three or four permits still gets in,
/// each time it asks. Before 2026-11-28 every permit freed went to whoever
/// asked first, the loops took them one at a time, and such an acquisition
/// was refused for the whole of its 5 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_of_several_permits_gets_in_among_acquisitions_of_one() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let turns = Arc::new(AtomicUsize::new(0));
        let mut loops = Vec::new();
        for _ in 0..6 {
            let c = client(&server.url(), LONG).await;
            let (stop, turns) = (stop.clone(), turns.clone());
            loops.push(tokio::spawn(async move {
                let s = c.semaphore("several", 4).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let p = s.acquire().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    p.release().await.unwrap();
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        assert!(eventually(Duration::from_secs(10), || turns.load(Ordering::Relaxed) >= 40).await);
        let c = client(&server.url(), LONG).await;
        let s = c.semaphore("several", 4).unwrap();
        for n in [2, 3, 4, 4] {
            let p = s
                .try_acquire_many(n, Duration::from_secs(5), LONG)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{n} permits among the loops"));
            p.release().await.unwrap();
        }
        let before = turns.load(Ordering::Relaxed);
        assert!(
            eventually(Duration::from_secs(5), || turns.load(Ordering::Relaxed) >= before + 20).await,
            "the loops go on"
        );
        stop.store(true, Ordering::Relaxed);
        for l in loops {
            l.await.unwrap();
        }
    })
    .await
}

/// The client at the front of the line claims the permits its wait asks
/// for: a permit freed while the claim does not fit yet stays free for it
/// (neither a client waiting for one permit behind it nor a newcomer gets
/// it), and the claimant goes in when enough are free, before that client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_freed_one_at_a_time_gather_for_the_claim_at_the_front() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let (a, b, c, d) = (
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
        );
        let pa = a.semaphore("gather", 2).unwrap().acquire().await.unwrap();
        let pd = d.semaphore("gather", 2).unwrap().acquire().await.unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (two, o) = (c.semaphore("gather", 2).unwrap(), order.clone());
        let claimant = tokio::spawn(async move {
            let p = two.acquire_many(2).await.unwrap();
            o.lock().push("two");
            p
        });
        let listed = |n| server.cmd(&["LLEN", "lockwarden:{gather}:waiters"]).as_int() == Some(n);
        assert!(
            eventually(Duration::from_secs(5), || listed(1)).await,
            "the wait for two is listed"
        );
        let (one, o) = (b.semaphore("gather", 2).unwrap(), order.clone());
        let single = tokio::spawn(async move {
            let p = one.acquire().await.unwrap();
            o.lock().push("one");
            p
        });
        assert!(
            eventually(Duration::from_secs(5), || listed(2)).await,
            "both wait, listed"
        );
        pa.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(order.lock().is_empty(), "the freed permit waits for the claim");
        assert_eq!(held(&server, "gather"), 1, "one free, kept");
        // Nor does a newcomer get it.
        let newcomer = a.semaphore("gather", 2).unwrap();
        assert!(newcomer.try_acquire(Duration::ZERO, LONG).await.unwrap().is_none());
        pd.release().await.unwrap();
        let two = tokio::time::timeout(Duration::from_secs(5), claimant)
            .await
            .unwrap()
            .unwrap();
        two.release().await.unwrap();
        let one = tokio::time::timeout(Duration::from_secs(5), single)
            .await
            .unwrap()
            .unwrap();
        one.release().await.unwrap();
        assert_eq!(*order.lock(), ["two", "one"]);
    })
    .await
}

/// A claimant that stops waiting takes its claim with it: the permits it
/// kept go to the next waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_goes_with_its_wait() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let (a, b, c) = (
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
        );
        let pa = a.semaphore("gone", 2).unwrap().acquire().await.unwrap();
        let two = c.semaphore("gone", 2).unwrap();
        let claimant = tokio::spawn(async move { two.acquire_many(2).await });
        assert!(
            eventually(Duration::from_secs(5), || {
                server.cmd(&["LLEN", "lockwarden:{gone}:waiters"]).as_int() == Some(1)
            })
            .await
        );
        let one = b.semaphore("gone", 2).unwrap();
        assert!(
            one.try_acquire(Duration::ZERO, LONG).await.unwrap().is_none(),
            "the free permit is kept for the claim"
        );
        claimant.abort();
        // Well before the claim would lapse (the waiter timeout, 5 s).
        let dropped = Instant::now();
        let p = loop {
            if let Some(p) = one.try_acquire(Duration::ZERO, LONG).await.unwrap() {
                break p;
            }
            assert!(
                dropped.elapsed() < Duration::from_secs(2),
                "the dropped wait's claim stays"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        p.release().await.unwrap();
        pa.release().await.unwrap();
    })
    .await
}
