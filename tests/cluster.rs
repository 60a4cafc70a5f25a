//! Both locks on a real 3-primary Redis Cluster (no replicas): locks whose
//! slots live on different nodes, wake-ups over sharded pub/sub on the
//! lock's own node, the watchdog renewing across nodes, and `locks()`
//! listing every node.
#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::{app_client, bounded, eventually, Kind, RedisCluster};

/// One lock name per node of `cluster`, so each test covers every node.
fn names_on_every_node(cluster: &RedisCluster, stem: &str) -> Vec<String> {
    let mut names = Vec::new();
    for node in cluster.primaries() {
        let name = (0..)
            .map(|i| format!("{stem}-{i}"))
            .find(|n| cluster.node_for(&format!("app:{n}")).port == node.port)
            .unwrap();
        names.push(name);
    }
    names
}

async fn excluded_and_admitted_on_every_node(kind: Kind) {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let a = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(30)).await;
        for name in names_on_every_node(&cluster, "ex") {
            let key = format!("app:{name}");
            let guard = kind.of(&a, &name).lock().await.unwrap();
            let inner = kind.of(&a, &name).lock().await.unwrap();
            assert_eq!(guard.token(), inner.token(), "re-entry keeps the token");
            assert_eq!(kind.of(&a, &name).hold_count().await.unwrap(), 2);
            assert_eq!(
                cluster.node_for(&key).keys(&key),
                vec![key.clone()],
                "the hash is on its slot's node"
            );
            assert!(
                kind.of(&b, &name)
                    .try_lock(Duration::ZERO, None)
                    .await
                    .unwrap()
                    .is_none(),
                "{name}: another client got in while the lock was held"
            );
            let first = guard.token();
            inner.unlock().await.unwrap();
            guard.unlock().await.unwrap();
            let g = kind.of(&b, &name).try_lock(Duration::ZERO, None).await.unwrap();
            let g = g.unwrap_or_else(|| panic!("{name}: not admitted after the unlock"));
            assert!(g.token() > first, "fencing tokens increase");
            g.unlock().await.unwrap();
            assert!(cluster.keys(&key).is_empty(), "{name}: the hash is left behind");
        }
        // Every call went straight to its slot's node: no redirects.
        for node in cluster.primaries() {
            assert_eq!(
                node.info_field("errorstats", "errorstat_MOVED"),
                None,
                "node {}",
                node.port
            );
        }
    })
    .await
}

/// A waiter on each node is woken by the unlock message, long before the
/// holder's 30 s lease would have ended its sleep, and the message travels on
/// a sharded channel of the lock's own node. Nothing stays subscribed.
async fn waiters_wake_on_sharded_messages(kind: Kind) {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let a = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(30)).await;
        for name in names_on_every_node(&cluster, "wake") {
            let node = cluster.node_for(&format!("app:{name}"));
            let guard = kind.of(&a, &name).lock().await.unwrap();
            let waiter = {
                let lock = kind.of(&b, &name);
                tokio::spawn(async move {
                    let g = lock.lock().await.unwrap();
                    let at = Instant::now();
                    g.unlock().await.unwrap();
                    at
                })
            };
            let shard = || node.cmd(&["PUBSUB", "SHARDCHANNELS"]).strings();
            assert!(
                eventually(Duration::from_secs(5), || shard().len() == 1).await,
                "{name}: no sharded subscription on the lock's node (shard channels {:?}, all {:?})",
                shard(),
                cluster.channels()
            );
            // The waiter has tried once and sleeps on the holder's lease now.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let released = Instant::now();
            guard.unlock().await.unwrap();
            let woke = waiter.await.unwrap();
            assert!(
                woke - released < Duration::from_secs(2),
                "{name}: the waiter took {:?} after the unlock (lease 30 s): no message",
                woke - released
            );
        }
        assert!(
            eventually(Duration::from_secs(5), || cluster.channels().is_empty()).await,
            "channels left subscribed: {:?}",
            cluster.channels()
        );
        assert_eq!(b.waiting_channels(), 0);
    })
    .await
}

/// With a 1 s watchdog lease, holds on all three nodes outlive 4 leases; once
/// released, every key is gone.
async fn the_watchdog_renews_on_every_node(kind: Kind) {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let c = app_client(&cluster.url(), Duration::from_secs(1)).await;
        let names = names_on_every_node(&cluster, "wd");
        let mut guards = Vec::new();
        for name in &names {
            guards.push(kind.of(&c, name).lock().await.unwrap());
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        for (name, g) in names.iter().zip(&guards) {
            assert!(g.loss_reason().is_none(), "{name}: lost: {:?}", g.loss_reason());
            let left = kind.of(&c, name).remaining_lease().await.unwrap();
            assert!(
                left.is_some_and(|l| l > Duration::ZERO),
                "{name}: not held after 4 leases"
            );
        }
        for g in guards {
            g.unlock().await.unwrap();
        }
        assert!(
            eventually(Duration::from_secs(2), || cluster.keys("app:*").is_empty()).await,
            "lock hashes left: {:?}",
            cluster.keys("app:*")
        );
    })
    .await
}

/// `locks()` finds locks on every node, not just one.
async fn locks_lists_every_node(kind: Kind) {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let c = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let names = names_on_every_node(&cluster, "ls");
        let mut guards = Vec::new();
        for name in &names {
            guards.push(kind.of(&c, name).lock().await.unwrap());
        }
        let mut listed: Vec<String> = c.locks("*").await.unwrap().into_iter().map(|s| s.name).collect();
        listed.sort();
        let mut want = names.clone();
        want.sort();
        assert_eq!(listed, want);
        for g in guards {
            g.unlock().await.unwrap();
        }
    })
    .await
}

/// A coordinated failover moves a lock's slot to its replica while one
/// client holds the lock and another waits on it. The holder's unlock
/// reaches the new primary, and the waiter, subscribed on the old one
/// (which drops sharded subscriptions without closing the connection), is
/// woken within seconds, not at the holder's 30 s lease. Then both clients
/// lock and unlock on the new primary.
async fn a_failover_keeps_locks_usable_and_waiters_woken(kind: Kind) {
    bounded(Duration::from_secs(90), async {
        let cluster = RedisCluster::start_with_replicas(3, true);
        let a = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let name = names_on_every_node(&cluster, "fo").remove(0);
        let old = cluster.node_for(&format!("app:{name}"));
        let guard = kind.of(&a, &name).lock().await.unwrap();
        let first = guard.token();
        let waiter = {
            let lock = kind.of(&b, &name);
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                (Instant::now(), g)
            })
        };
        let shard = || old.cmd(&["PUBSUB", "SHARDCHANNELS"]).strings();
        assert!(
            eventually(Duration::from_secs(5), || shard().len() == 1).await,
            "the waiter never subscribed"
        );
        let replica = cluster.nodes.iter().position(|n| n.port == old.port).unwrap() + 3;
        cluster.failover(replica);
        let new = &cluster.nodes[replica];
        let released = Instant::now();
        bounded(Duration::from_secs(10), guard.unlock()).await.unwrap();
        let (woke, g) = waiter.await.unwrap();
        assert!(
            woke - released < Duration::from_secs(5),
            "the waiter took {:?} after the unlock (lease 30 s)",
            woke - released
        );
        assert!(g.token() > first, "tokens increase across the failover");
        assert_eq!(
            new.keys(&format!("app:{name}")).len(),
            1,
            "the hold is on the new primary"
        );
        g.unlock().await.unwrap();
        for c in [&a, &b] {
            let g = kind.of(c, &name).lock().await.unwrap();
            g.unlock().await.unwrap();
        }
        assert!(new.keys(&format!("app:{name}")).is_empty());
        assert_eq!(b.waiting_channels(), 0);
    })
    .await
}

/// A lock's primary dies; its replica is elected after the node timeout
/// (2 s). The hold, replicated before the kill, survives on the new
/// primary: the watchdog renews it there, the holder unlocks it there, and
/// the waiter gets it.
async fn a_killed_primary_is_replaced_and_the_hold_survives(kind: Kind) {
    bounded(Duration::from_secs(90), async {
        let mut cluster = RedisCluster::start_with_replicas(3, true);
        let a = app_client(&cluster.url(), Duration::from_secs(6)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(6)).await;
        let name = names_on_every_node(&cluster, "kill").remove(0);
        let key = format!("app:{name}");
        let primary = cluster
            .nodes
            .iter()
            .position(|n| n.port == cluster.node_for(&key).port)
            .unwrap();
        let replica = primary + 3;
        let guard = kind.of(&a, &name).lock().await.unwrap();
        assert!(eventually(Duration::from_secs(5), || cluster.nodes[replica].keys(&key).len() == 1).await);
        let waiter = {
            let lock = kind.of(&b, &name);
            tokio::spawn(async move { lock.lock().await.unwrap() })
        };
        // Subscribed on the server, not only registered: a kill in the
        // middle of subscribing fails the waiter's lock() instead.
        assert!(
            eventually(Duration::from_secs(5), || b.waiting_channels() == 1
                && !cluster.channels().is_empty())
            .await
        );
        cluster.nodes[primary].kill();
        assert!(
            eventually(Duration::from_secs(30), || {
                cluster.nodes[replica].info_field("replication", "role").as_deref() == Some("master")
            })
            .await,
            "the replica was never elected"
        );
        // Two renewal periods on the new primary.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(guard.loss_reason(), None, "the hold was lost across the failover");
        let left = cluster.nodes[replica].cmd(&["PTTL", &key]).as_int().unwrap();
        assert!(
            left > 4000,
            "the watchdog did not renew on the new primary (pttl {left} ms)"
        );
        bounded(Duration::from_secs(10), guard.unlock()).await.unwrap();
        let g = bounded(Duration::from_secs(10), waiter).await.unwrap();
        assert_eq!(
            cluster.nodes[replica].keys(&key).len(),
            1,
            "the waiter holds it on the new primary"
        );
        g.unlock().await.unwrap();
    })
    .await
}

both_kinds!(
    excluded_and_admitted_on_every_node,
    waiters_wake_on_sharded_messages,
    the_watchdog_renews_on_every_node,
    locks_lists_every_node,
    a_failover_keeps_locks_usable_and_waiters_woken,
    a_killed_primary_is_replaced_and_the_hold_survives,
);

/// The read-write lock on every node: readers share, a writer waits for
/// them and is woken over sharded pub/sub, with no redirect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rw_lock_on_every_node() {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let a = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(30)).await;
        for name in names_on_every_node(&cluster, "rw") {
            let ra = a.rw_lock(&name).unwrap().read().lock().await.unwrap();
            let rb = b.rw_lock(&name).unwrap().read().lock().await.unwrap();
            let w = b.rw_lock(&name).unwrap().write();
            let writer = tokio::spawn(async move { w.lock().await });
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!writer.is_finished(), "{name}: the writer waits for the readers");
            ra.unlock().await.unwrap();
            rb.unlock().await.unwrap();
            let started = Instant::now();
            let g = tokio::time::timeout(Duration::from_secs(10), writer)
                .await
                .expect("woken by the unlock, not the 30 s lease")
                .unwrap()
                .unwrap();
            assert!(started.elapsed() < Duration::from_secs(10));
            g.unlock().await.unwrap();
            assert!(
                cluster.keys(&format!("app:{name}")).is_empty(),
                "{name}: the hash is left behind"
            );
        }
        for node in cluster.primaries() {
            assert_eq!(
                node.info_field("errorstats", "errorstat_MOVED"),
                None,
                "node {}",
                node.port
            );
        }
    })
    .await
}

/// A multi-lock whose names live on every node: all held together, a
/// token each, all released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_across_nodes() {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let a = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let names = names_on_every_node(&cluster, "multi");
        let g = a.multi_lock(&names).unwrap().lock().await.unwrap();
        assert_eq!(g.tokens().len(), 3);
        for name in &names {
            assert_eq!(cluster.keys(&format!("app:{name}")).len(), 1, "{name} held");
        }
        let m = b.multi_lock(&names).unwrap();
        assert!(m.try_lock(Duration::from_millis(200), None).await.unwrap().is_none());
        g.unlock().await.unwrap();
        let g = m.try_lock(Duration::ZERO, None).await.unwrap().expect("free");
        g.unlock().await.unwrap();
        for name in &names {
            assert!(cluster.keys(&format!("app:{name}")).is_empty(), "{name} released");
        }
    })
    .await
}

/// A semaphore on every node: the bound, and a waiter woken by a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_on_every_node() {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let a = app_client(&cluster.url(), Duration::from_secs(30)).await;
        let b = app_client(&cluster.url(), Duration::from_secs(30)).await;
        for name in names_on_every_node(&cluster, "sem") {
            let p = a.semaphore(&name, 1).unwrap().acquire().await.unwrap();
            let sem = b.semaphore(&name, 1).unwrap();
            assert_eq!(sem.available_permits().await.unwrap(), 0);
            let waiting = tokio::spawn(async move { sem.acquire().await });
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!waiting.is_finished(), "{name}: one permit, held");
            p.release().await.unwrap();
            let p = tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("woken by the release")
                .unwrap()
                .unwrap();
            p.release().await.unwrap();
            assert!(cluster.keys(&format!("app:{name}")).is_empty(), "{name}: left behind");
        }
    })
    .await
}
