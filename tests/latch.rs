//! The count-down latch (`Client::count_down_latch`) on real servers: set
//! only at zero, counted down by several clients, waiters woken at zero by
//! the message, a lost key never taken for zero.
mod common;

use std::time::{Duration, Instant};

use lockwarden::{Client, Error};

use common::*;

const BOUND: Duration = Duration::from_secs(60);

/// Three waiters in other clients (one of them started before the count
/// was set) are let through by the last of three count-downs, within
/// moments (the message, not the 2 s recheck), and not before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_let_through_by_the_last_count_down_only() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), Duration::from_secs(5)).await;
        let latch = c.count_down_latch("ready").unwrap();
        assert_eq!(latch.count().await.unwrap(), None);
        let early = {
            let w = client(&server.url(), Duration::from_secs(5)).await;
            tokio::spawn(async move {
                let l = w.count_down_latch("ready").unwrap();
                l.wait().await.map(|_| Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(latch.try_set_count(3).await.unwrap());
        assert!(!latch.try_set_count(5).await.unwrap(), "reset while counting");
        assert_eq!(latch.count().await.unwrap(), Some(3));
        let mut waiters = vec![early];
        for _ in 0..2 {
            let w = client(&server.url(), Duration::from_secs(5)).await;
            waiters.push(tokio::spawn(async move {
                let l = w.count_down_latch("ready").unwrap();
                l.wait().await.map(|_| Instant::now())
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(latch.count_down().await.unwrap(), 2);
        assert_eq!(latch.count_down().await.unwrap(), 1);
        assert!(
            !latch.wait_for(Duration::from_millis(300)).await.unwrap(),
            "through before zero"
        );
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "a waiter got through before zero"
        );
        let other = client(&server.url(), Duration::from_secs(5)).await;
        let zero_at = Instant::now();
        assert_eq!(other.count_down_latch("ready").unwrap().count_down().await.unwrap(), 0);
        for w in waiters {
            let through = w.await.unwrap().unwrap();
            // Woken by the message, not by the 2 s recheck.
            assert!(
                through.duration_since(zero_at) < Duration::from_millis(1000),
                "{:?}",
                through.duration_since(zero_at)
            );
        }
        // At zero: a count-down changes nothing, a wait returns at once, and
        // the latch can be set again.
        assert_eq!(latch.count_down().await.unwrap(), 0);
        assert!(latch.wait_for(Duration::ZERO).await.unwrap());
        assert_eq!(latch.count().await.unwrap(), Some(0));
        assert!(latch.try_set_count(1).await.unwrap());
        assert!(latch.delete().await.unwrap());
        assert!(matches!(latch.count_down().await, Err(Error::LatchGone { .. })));
        assert!(matches!(latch.try_set_count(0).await, Err(Error::Config(_))));
    })
    .await;
}

/// A FLUSHALL while waiters wait: they are told the latch is gone
/// (within the 2 s recheck, no message comes), never let through; a
/// count-down on the lost latch is refused and writes nothing; deleting
/// the latch tells its waiters the same way, by message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_latch_is_never_taken_for_zero() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), Duration::from_secs(5)).await;
        let latch = c.count_down_latch("lost").unwrap();
        assert!(latch.try_set_count(2).await.unwrap());
        let w = client(&server.url(), Duration::from_secs(5)).await;
        let waiter = tokio::spawn(async move { w.count_down_latch("lost").unwrap().wait().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.flushall();
        let flushed = Instant::now();
        let r = waiter.await.unwrap();
        assert!(matches!(r, Err(Error::LatchGone { .. })), "{r:?}");
        assert!(
            flushed.elapsed() < Duration::from_millis(2500),
            "{:?}",
            flushed.elapsed()
        );
        assert!(matches!(latch.count_down().await, Err(Error::LatchGone { .. })));
        assert_eq!(
            server.cmd(&["EXISTS", "lost"]).as_int(),
            Some(0),
            "written after the loss"
        );
        // Set again after the loss: a fresh generation, above the old one.
        assert!(latch.try_set_count(1).await.unwrap());
        let w = client(&server.url(), Duration::from_secs(5)).await;
        let waiter = tokio::spawn(async move { w.count_down_latch("lost").unwrap().wait().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let deleted = Instant::now();
        assert!(latch.delete().await.unwrap());
        let r = waiter.await.unwrap();
        assert!(matches!(r, Err(Error::LatchGone { .. })), "{r:?}");
        assert!(
            deleted.elapsed() < Duration::from_millis(1000),
            "{:?}",
            deleted.elapsed()
        );
    })
    .await;
}

/// One name is one kind: a latch refuses a name a lock holds and a lock
/// refuses a latch's name, both untouched; a key of another type is
/// refused by name; a quorum client refuses to make a latch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_and_a_lock_never_share_a_name() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), Duration::from_secs(5)).await;
        let held = c.lock("shared").unwrap().lock().await.unwrap();
        let latch = c.count_down_latch("shared").unwrap();
        assert!(matches!(latch.try_set_count(1).await, Err(Error::WrongKind { .. })));
        assert!(matches!(latch.delete().await, Err(Error::WrongKind { .. })));
        assert!(!held.is_lost());
        held.unlock().await.unwrap();
        assert!(latch.try_set_count(2).await.unwrap());
        match c
            .lock("shared")
            .unwrap()
            .try_lock(Duration::ZERO, lockwarden::Lease::Watchdog)
            .await
        {
            Err(Error::WrongKind { found, .. }) => assert_eq!(found, "count-down latch"),
            other => panic!("a lock on a latch's name: {other:?}"),
        }
        assert_eq!(latch.count().await.unwrap(), Some(2));
        server.cmd(&["SET", "text", "x"]);
        match c.count_down_latch("text").unwrap().count_down().await {
            Err(Error::WrongType { key, .. }) => assert_eq!(key, "text"),
            other => panic!("{other:?}"),
        }
        let (s2, s3) = (RedisServer::start(), RedisServer::start());
        let q = Client::builder_for_masters([server.url(), s2.url(), s3.url()])
            .build()
            .await
            .unwrap();
        assert!(matches!(q.count_down_latch("q"), Err(Error::Config(_))));
    })
    .await;
}

/// On a cluster and through Sentinel: a latch set, a waiter woken by the
/// (sharded) message at zero; and the semaphore's stored number (its key
/// in the semaphore's slot), raised to wake a waiter of the fair
/// semaphore, and a permit given back by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latches_and_semaphore_verbs_work_on_a_cluster_and_through_sentinel() {
    let cluster = RedisCluster::start(3);
    let master = RedisServer::start();
    let sentinel = RedisSentinel::start(&master);
    bounded(BOUND, async {
        for url in [cluster.url(), sentinel.url()] {
            let a = app_client(&url, Duration::from_secs(5)).await;
            let b = app_client(&url, Duration::from_secs(5)).await;
            let latch = a.count_down_latch("batch").unwrap();
            assert!(latch.try_set_count(2).await.unwrap(), "{url}");
            let waiter = tokio::spawn(async move { b.count_down_latch("batch").unwrap().wait().await });
            tokio::time::sleep(Duration::from_millis(300)).await;
            latch.count_down().await.unwrap();
            let zero_at = Instant::now();
            latch.count_down().await.unwrap();
            waiter.await.unwrap().unwrap();
            assert!(
                zero_at.elapsed() < Duration::from_millis(1000),
                "{url}: {:?}",
                zero_at.elapsed()
            );
            assert!(latch.delete().await.unwrap());

            let sem = a.fair_semaphore("pool{x}", 1).unwrap();
            assert!(sem.try_set_permits(1).await.unwrap(), "{url}");
            let held = sem.acquire().await.unwrap();
            let c = app_client(&url, Duration::from_secs(5)).await;
            let waiter = tokio::spawn(async move { c.fair_semaphore("pool{x}", 1).unwrap().acquire().await });
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(sem.add_permits(1).await.unwrap(), 2, "{url}");
            let second = tokio::time::timeout(Duration::from_secs(2), waiter)
                .await
                .expect("woken by the raise")
                .unwrap()
                .unwrap();
            assert_eq!(sem.acquired_permits().await.unwrap(), 2, "{url}");
            assert_eq!(sem.add_permits(-1).await.unwrap(), 1);
            sem.release_by_id(&held.id()).await.unwrap();
            assert!(matches!(held.release().await, Err(Error::NotHeld { .. })));
            second.release().await.unwrap();
            assert_eq!(sem.available_permits().await.unwrap(), 1, "{url}");
        }
    })
    .await;
}

/// A count-down whose reply is lost (the script ran, the connection broke
/// before its answer) is sent again by the client: the second sending
/// must not count a second time, or the latch opens before every party
/// counted down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_whose_reply_was_lost_counts_once() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let proxy = Proxy::start(server.port).await;
        let c = client(&proxy.url(), Duration::from_secs(5)).await;
        let latch = c.count_down_latch("replayed").unwrap();
        assert!(latch.try_set_count(3).await.unwrap());
        proxy.drop_next_reply();
        assert_eq!(latch.count_down().await.expect("survives the lost reply"), 2);
        assert_eq!(proxy.dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            server.cmd(&["HGET", "replayed", ":count"]).as_int(),
            Some(2),
            "counted once"
        );
        // A setting whose reply was lost is not set twice either (the
        // second sending finds the latch counting, and says so).
        assert_eq!(latch.count_down().await.unwrap(), 1);
        assert_eq!(latch.count_down().await.unwrap(), 0);
        proxy.drop_next_reply();
        assert!(latch.try_set_count(2).await.expect("survives the lost reply"));
        assert_eq!(latch.count().await.unwrap(), Some(2));
    })
    .await
}
