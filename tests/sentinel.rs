//! Locks behind Redis Sentinel: one master, one replica, one sentinel, all
//! started by the test. A failover must move the client to the new master
//! within seconds, not leave it writing locks to the demoted one.
#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::{app_client, bounded, eventually, Kind, RedisSentinel, RedisServer};

struct Setup {
    master: RedisServer,
    replica: RedisServer,
    sentinel: RedisSentinel,
}

async fn setup() -> Setup {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    assert!(
        eventually(Duration::from_secs(20), || {
            replica.info_field("replication", "master_link_status").as_deref() == Some("up")
        })
        .await,
        "the replica never synced"
    );
    let sentinel = RedisSentinel::start(&master);
    // Sentinel learns of replicas from the master's INFO.
    assert!(
        eventually(Duration::from_secs(30), || {
            matches!(sentinel.cmd(&["SENTINEL", "REPLICAS", "mymaster"]), common::Reply::Array(ref v) if v.len() == 1)
        })
        .await,
        "the sentinel never saw the replica"
    );
    Setup {
        master,
        replica,
        sentinel,
    }
}

/// After `SENTINEL FAILOVER`, new locks land on the new master within a few
/// seconds; a lock held across the failover is released on it and its
/// waiter, subscribed on the old master, gets the lock.
async fn a_failover_moves_the_client_to_the_new_master(kind: Kind) {
    bounded(Duration::from_secs(90), async {
        let s = setup().await;
        let a = app_client(&s.sentinel.url(), Duration::from_secs(30)).await;
        let b = app_client(&s.sentinel.url(), Duration::from_secs(30)).await;
        let g = kind.of(&a, "before").lock().await.unwrap();
        assert_eq!(s.master.keys("app:before").len(), 1, "locks start on the master");
        g.unlock().await.unwrap();

        let held = kind.of(&a, "held").lock().await.unwrap();
        let waiter = {
            let lock = kind.of(&b, "held");
            tokio::spawn(async move { lock.lock().await.unwrap() })
        };
        assert!(eventually(Duration::from_secs(5), || !s.master.pubsub_channels().is_empty()).await);
        // The replica has the hold before it is promoted.
        assert!(eventually(Duration::from_secs(5), || s.replica.keys("app:held").len() == 1).await);

        // NOGOODSLAVE until the sentinel has read the replica's own INFO.
        assert!(
            eventually(Duration::from_secs(30), || {
                s.sentinel.cmd(&["SENTINEL", "FAILOVER", "mymaster"]).as_str() == Some("OK")
            })
            .await,
            "SENTINEL FAILOVER never started: {:?}",
            s.sentinel.cmd(&["SENTINEL", "FAILOVER", "mymaster"])
        );
        assert!(
            eventually(Duration::from_secs(30), || s.sentinel.master_port()
                == Some(s.replica.port))
            .await,
            "the sentinel never switched"
        );
        let switched = Instant::now();
        // Probe with fresh names until one lands on the new master.
        let mut k = 0;
        let landed = loop {
            k += 1;
            let name = format!("probe-{k}");
            if let Ok(Some(g)) = kind
                .of(&a, &name)
                .try_lock(Duration::ZERO, Duration::from_secs(30))
                .await
            {
                let on_new = s.replica.keys(&format!("app:{name}")).len() == 1;
                let _ = g.unlock().await;
                if on_new {
                    break switched.elapsed();
                }
            }
            assert!(
                switched.elapsed() < Duration::from_secs(20),
                "still not locking on the new master 20 s after the switch"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            landed < Duration::from_secs(3),
            "new locks reached the new master only {landed:?} after the switch"
        );
        held.unlock().await.unwrap();
        let g = bounded(Duration::from_secs(5), waiter).await.unwrap();
        assert_eq!(
            s.replica.keys("app:held").len(),
            1,
            "the waiter holds it on the new master"
        );
        g.unlock().await.unwrap();
    })
    .await
}

both_kinds!(a_failover_moves_the_client_to_the_new_master);

/// The read-write lock, the semaphore and the multi-lock through Sentinel:
/// written on the master, waiters woken by unlock messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_works_through_sentinel() {
    bounded(Duration::from_secs(90), async {
        let s = setup().await;
        let a = app_client(&s.sentinel.url(), Duration::from_secs(30)).await;
        let b = app_client(&s.sentinel.url(), Duration::from_secs(30)).await;

        let r1 = a.rw_lock("doc").unwrap().read().lock().await.unwrap();
        let r2 = b.rw_lock("doc").unwrap().read().lock().await.unwrap();
        assert_eq!(s.master.keys("app:doc").len(), 1, "on the master");
        let w = b.rw_lock("doc").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!writer.is_finished(), "the readers exclude the writer");
        r1.unlock().await.unwrap();
        r2.unlock().await.unwrap();
        let g = bounded(Duration::from_secs(5), writer).await.unwrap().unwrap();
        g.unlock().await.unwrap();

        let sem = a.semaphore("pool", 2).unwrap();
        let p1 = sem.acquire().await.unwrap();
        let p2 = sem.acquire().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        let other = b.semaphore("pool", 2).unwrap();
        let waiting = tokio::spawn(async move { other.acquire().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "two of two permits held");
        p1.release().await.unwrap();
        let p3 = bounded(Duration::from_secs(5), waiting).await.unwrap().unwrap();
        p2.release().await.unwrap();
        p3.release().await.unwrap();

        let g = a.multi_lock(&["m1", "m2"]).unwrap().lock().await.unwrap();
        assert_eq!(s.master.keys("app:m*").len(), 2);
        assert!(b
            .multi_lock(&["m2", "m1"])
            .unwrap()
            .try_lock(Duration::ZERO, None)
            .await
            .unwrap()
            .is_none());
        g.unlock().await.unwrap();
    })
    .await
}
