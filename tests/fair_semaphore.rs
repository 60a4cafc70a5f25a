//! The fair semaphore (`Client::fair_semaphore`) on real servers: permits
//! in request order with no barging, direct grants, the bound under
//! contention, a waiter that dies leaving the queue, a flush.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwarden::{Client, Error, Lease};

use common::*;

const BOUND: Duration = Duration::from_secs(90);
const LONG: Duration = Duration::from_secs(30);

fn queue_len(server: &RedisServer, name: &str) -> i64 {
    server
        .cmd(&["LLEN", &format!("lockwarden:{{{name}}}:queue")])
        .as_int()
        .unwrap_or(0)
}

/// Six waiters (each its own client) queue one after another behind a
/// holder of the only permit: they get it in exactly that order, each by
/// a direct grant (its wait makes one acquire call: the one that queued
/// it), and a newcomer trying while they wait never gets in ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_go_in_request_order_by_direct_grants() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), LONG).await;
        let sem = c.fair_semaphore("fifo", 1).unwrap();
        let first = sem.acquire().await.unwrap();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..6 {
            let w = client(&server.url(), LONG).await;
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                let p = w.fair_semaphore("fifo", 1).unwrap().acquire().await.unwrap();
                order.lock().push(i);
                tokio::time::sleep(Duration::from_millis(20)).await;
                p.release().await.unwrap();
            }));
            assert!(
                eventually(Duration::from_secs(5), || queue_len(&server, "fifo") == i + 1).await,
                "waiter {i} did not queue"
            );
        }
        let evals = server.command_calls("evalsha");
        let newcomer = client(&server.url(), LONG).await.fair_semaphore("fifo", 1).unwrap();
        first.release().await.unwrap();
        // A newcomer tries while the queue is served: it gets the permit
        // only once every waiter had it.
        let mut tries = 0;
        loop {
            let served = order.lock().len();
            tries += 1;
            if let Some(p) = newcomer.try_acquire(Duration::ZERO, None).await.unwrap() {
                assert_eq!(served, 6, "a newcomer barged ahead of the queue");
                p.release().await.unwrap();
                tries += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock(), vec![0, 1, 2, 3, 4, 5]);
        // The 7 releases and the newcomer's calls: no waiter needed an
        // acquire call of its own after it queued (a grant by message).
        let calls = server.command_calls("evalsha") - evals;
        assert!(calls <= 7 + tries, "{calls} script calls for {tries} of the newcomer's");
        assert_eq!(newcomer.available_permits().await.unwrap(), 1);
    })
    .await;
}

/// A permit freed by its lease running out (no release script hands it
/// on) still goes to the queue: a newcomer trying all the while gets it
/// only after the three waiters that asked first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_permit_freed_by_expiry_goes_to_the_queue_not_a_newcomer() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), LONG).await;
        let sem = c.fair_semaphore("expiry", 1).unwrap();
        let held = sem
            .try_acquire(Duration::ZERO, Lease::Fixed(Duration::from_millis(600)))
            .await
            .unwrap()
            .unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let w = client(&server.url(), LONG).await;
            let served = served.clone();
            waiters.push(tokio::spawn(async move {
                let p = w.fair_semaphore("expiry", 1).unwrap().acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                served.fetch_add(1, Ordering::SeqCst);
                p.release().await.unwrap();
            }));
            assert!(eventually(Duration::from_secs(5), || queue_len(&server, "expiry") == i + 1).await);
        }
        let newcomer = client(&server.url(), LONG).await.fair_semaphore("expiry", 1).unwrap();
        loop {
            if let Some(p) = newcomer.try_acquire(Duration::ZERO, None).await.unwrap() {
                // Read while the newcomer holds the one permit: a waiter
                // counts itself before it releases, and none can be served
                // meanwhile.
                let served = served.load(Ordering::SeqCst);
                assert_eq!(served, 3, "a newcomer took the expired permit ahead of the queue");
                p.release().await.unwrap();
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for w in waiters {
            w.await.unwrap();
        }
        drop(held);
    })
    .await;
}

/// 16 clients contend for 4 permits: never more than 4 held at once, and
/// every client is served (none is kept out); first, four holders meet
/// while holding, so all 4 permits are given together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_never_hold_more_than_the_permits() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        // All four permits are given at once: four holders meet while
        // holding (a semaphore that gave fewer would keep one out, and the
        // meeting would time out).
        let meet = Arc::new(tokio::sync::Barrier::new(4));
        let mut first = Vec::new();
        for _ in 0..4 {
            let (c, meet) = (client(&server.url(), LONG).await, meet.clone());
            first.push(tokio::spawn(async move {
                let p = c.fair_semaphore("pool", 4).unwrap().acquire().await.unwrap();
                tokio::time::timeout(Duration::from_secs(10), meet.wait())
                    .await
                    .expect("the four permits were never held at once");
                p.release().await.unwrap();
            }));
        }
        for t in first {
            t.await.unwrap();
        }
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let c = client(&server.url(), LONG).await;
            let (inside, most) = (inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let sem = c.fair_semaphore("pool", 4).unwrap();
                for _ in 0..10 {
                    let p = sem.acquire().await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            most.load(Ordering::SeqCst) <= 4,
            "{} held at once",
            most.load(Ordering::SeqCst)
        );
        assert_no_queues(&server).await;
    })
    .await;
}

/// The waiter of [`a_dead_waiter_leaves_the_queue`], in a child process:
/// queues behind the holder and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiter_entry_point() {
    let Ok(url) = std::env::var("LOCKWARDEN_TEST_CHILD_URL") else {
        return;
    };
    let c = Client::builder(&url)
        .fair_waiter_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let _ = c.fair_semaphore("dead", 1).unwrap().acquire().await;
}

/// A waiter that dies (SIGKILL) at the head of the queue holds the others
/// up no longer than its waiter timeout: the permit released after its
/// death goes to it by direct grant only for what is left of its queue
/// deadline, then to the live waiter behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_leaves_the_queue() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), LONG).await;
        let sem = c.fair_semaphore("dead", 1).unwrap();
        let held = sem.acquire().await.unwrap();
        let mut child = child_test("dead_waiter_entry_point", &server.url());
        assert!(
            eventually(Duration::from_secs(20), || queue_len(&server, "dead") == 1).await,
            "the child did not queue"
        );
        let live = Client::builder(&server.url())
            .fair_waiter_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let waiter = tokio::spawn(async move { live.fair_semaphore("dead", 1).unwrap().acquire().await });
        assert!(eventually(Duration::from_secs(5), || queue_len(&server, "dead") == 2).await);
        child.kill().unwrap();
        let _ = child.wait();
        held.release().await.unwrap();
        let released = Instant::now();
        let p = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the live waiter was kept out")
            .unwrap()
            .unwrap();
        // At most the dead waiter's queue deadline (1 s), and the live
        // waiter's own re-check.
        assert!(
            released.elapsed() < Duration::from_millis(2500),
            "{:?}",
            released.elapsed()
        );
        p.release().await.unwrap();
    })
    .await;
}

/// A FLUSHALL takes the permits: holders are told; queued waiters go on
/// and are served; a fixed-lease holder's release answers `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_is_told_to_holders_and_waiters_go_on() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let lease = Duration::from_millis(1500);
        let c = client(&server.url(), lease).await;
        let sem = c.fair_semaphore("flushed", 1).unwrap();
        let held = sem.acquire().await.unwrap();
        let w = client(&server.url(), lease).await;
        let waiter = tokio::spawn(async move { w.fair_semaphore("flushed", 1).unwrap().acquire().await });
        assert!(eventually(Duration::from_secs(5), || queue_len(&server, "flushed") == 1).await);
        server.flushall();
        let why = tokio::time::timeout(lease, held.lost())
            .await
            .expect("the holder is told");
        assert_eq!(why, lockwarden::LossReason::Gone);
        let p = tokio::time::timeout(Duration::from_secs(15), waiter)
            .await
            .expect("the waiter went on")
            .unwrap()
            .unwrap();
        assert!(matches!(held.release().await, Err(Error::NotHeld { .. })));
        assert!(!p.is_lost());
        p.release().await.unwrap();
        let fixed = sem
            .try_acquire(Duration::ZERO, Lease::Fixed(Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap();
        server.flushall();
        assert!(matches!(fixed.release().await, Err(Error::NotHeld { .. })));
    })
    .await;
}

/// A release grants the permit to the waiter, whose message is held up on
/// the way (its subscriber connection lags). The grant's lease runs out,
/// another client takes the permit, and the waiter's next refresh is
/// refused; then the message arrives. It is older than that refresh, and
/// must not give the waiter a second permit of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_message_that_comes_after_the_grant_lapsed_is_not_taken_for_a_permit() {
    bounded(
        Duration::from_secs(150),
        until_premise_holds(3, |_| late_grant_message()),
    )
    .await
}

/// One play of the test above; `None` when the waiter's own attempt took the
/// grant before it lapsed, or the permit once it had (a loaded machine).
async fn late_grant_message() -> Option<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let holder = client(&server.url(), LONG).await;
    let first = holder.fair_semaphore("late", 1).unwrap().acquire().await.unwrap();
    // Refreshes (attempts) every second.
    let w = Client::builder(&proxy.url())
        .fair_waiter_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let sem = w.fair_semaphore("late", 1).unwrap();
    let waiter = tokio::spawn(async move {
        let p = sem
            .try_acquire(Duration::from_secs(20), Some(Duration::from_millis(400)))
            .await
            .unwrap()
            .expect("granted in the end");
        (Instant::now(), p)
    });
    assert!(eventually(Duration::from_secs(5), || queue_len(&server, "late") == 1).await);
    // Right after one of the waiter's refreshes (the next is a second
    // away), the release grants it the permit, for 400 ms.
    let calls = server.command_calls("evalsha");
    assert!(eventually(Duration::from_secs(3), || server.command_calls("evalsha") > calls).await);
    proxy.hold_messages();
    first.release().await.unwrap();
    assert_eq!(queue_len(&server, "late"), 0, "granted");
    assert!(
        eventually(Duration::from_secs(2), || server.cmd(&["EXISTS", "late"]).as_int()
            == Some(0))
        .await,
        "the grant's lease ran out"
    );
    if waiter.is_finished() {
        return None; // its own attempt came within the grant's lease and took it
    }
    let other = client(&server.url(), LONG).await;
    let taken = other
        .fair_semaphore("late", 1)
        .unwrap()
        .try_acquire(Duration::ZERO, None)
        .await
        .unwrap()?; // else its own attempt came between the lapse and this
                    // The waiter's next refresh is refused (it queues again); the old
                    // message comes right after.
    assert!(eventually(Duration::from_secs(3), || queue_len(&server, "late") == 1).await);
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
