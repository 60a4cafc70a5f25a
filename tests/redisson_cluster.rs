//! The Redisson-compatible kinds (lock, fair lock, semaphore, read-write
//! lock) on a 3-primary cluster, beside a Redisson
//! client acted by scripts of our own (node-redisson talks to one node
//! only): on a Redis 7 cluster Redisson publishes its unlock messages by
//! sharded pub/sub (`SPUBLISH`, its `shardedSubscriptionMode` `AUTO`), as
//! lockwarden does there, so wake-ups cross both ways; every key of a name
//! shares its slot.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Lease};

const BOUND: Duration = Duration::from_secs(90);

/// How late a wake-up may come and still be one: the holds below have a
/// minute's lease.
const WOKEN_WITHIN: Duration = Duration::from_secs(2);

const JAVA: &str = "5f0c1f9e-1d7a-4c2b-9a51-0d6e2b7c3a10";

/// RLock's lock: KEYS[1] the hash; ARGV[1] lease, ARGV[2] the owner field.
const R_LOCK: &str = "if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then \
      redis.call('HINCRBY', KEYS[1], ARGV[2], 1) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 'OK' \
    end return redis.call('PTTL', KEYS[1])";

/// RLock's unlock: KEYS[1] the hash, KEYS[2] its channel; ARGV[1] the owner field.
const R_UNLOCK: &str = "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end \
    if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then return 0 end \
    redis.call('DEL', KEYS[1]) redis.call('SPUBLISH', KEYS[2], 0) return 1";

/// RSemaphore's tryAcquire(1) and release(1): KEYS[1] the counter, KEYS[2] the channel.
const R_SEM_TAKE: &str = "local v = redis.call('GET', KEYS[1]) \
    if v and tonumber(v) >= 1 then redis.call('DECRBY', KEYS[1], 1) return 1 end return 0";
const R_SEM_GIVE: &str = "local v = redis.call('INCRBY', KEYS[1], 1) redis.call('SPUBLISH', KEYS[2], v) return v";

/// RReadWriteLock's write lock and unlock (the write side only): KEYS[1]
/// the hash, KEYS[2] the channel; ARGV[1] lease, ARGV[2] the writer field.
const R_WRITE: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then \
      redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 'OK' \
    end return redis.call('PTTL', KEYS[1])";
const R_WRITE_UNLOCK: &str = "if redis.call('HGET', KEYS[1], 'mode') ~= 'write' then return -1 end \
    if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then return -1 end \
    if redis.call('HLEN', KEYS[1]) == 1 then redis.call('DEL', KEYS[1]) redis.call('SPUBLISH', KEYS[2], 1) \
    else redis.call('HSET', KEYS[1], 'mode', 'read') end return 1";

fn eval(node: &RedisServer, script: &str, keys: &[&str], args: &[&str]) -> Reply {
    let n = keys.len().to_string();
    let mut cmd = vec!["EVAL", script, &n];
    cmd.extend(keys);
    cmd.extend(args);
    node.cmd(&cmd)
}

/// A sharded subscriber to `channel` on the node that owns its slot.
fn listen(cluster: &RedisCluster, channel: &str) -> Resp {
    let node = cluster.node_for(channel);
    let port: u16 = node.url().rsplit(':').next().unwrap().parse().unwrap();
    let mut sub = Resp::connect(port).unwrap();
    sub.cmd(&["SSUBSCRIBE", channel]);
    sub
}

async fn compatible(cluster: &RedisCluster) -> Client {
    Client::builder(&cluster.url())
        .watchdog_lease(Duration::from_secs(30))
        .wake_patience(NO_PATIENCE)
        .redisson_compatible(true)
        .build()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locks_semaphores_and_rw_locks_cross_on_a_cluster() {
    bounded(BOUND, async {
        let cluster = RedisCluster::start(3);
        let c = compatible(&cluster).await;
        let owner = format!("{JAVA}:1");

        // The plain lock.
        let node = cluster.node_for("orders");
        let channel = "redisson_lock__channel:{orders}";
        assert_eq!(eval(node, R_LOCK, &["orders"], &["60000", &owner]).as_str(), Some("OK"));
        let lock = c.lock("orders").unwrap();
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                (Instant::now(), g)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert_eq!(eval(node, R_UNLOCK, &["orders", channel], &[&owner]).as_int(), Some(1));
        let (at, g) = waiter.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "woke {:?} after Redisson's unlock",
            at - released
        );
        assert!(
            eval(node, R_LOCK, &["orders"], &["60000", &owner]).as_int().is_some(),
            "excluded"
        );
        let mut sub = listen(&cluster, channel);
        g.unlock().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("0"));
        assert_eq!(eval(node, R_LOCK, &["orders"], &["60000", &owner]).as_str(), Some("OK"));
        assert_eq!(eval(node, R_UNLOCK, &["orders", channel], &[&owner]).as_int(), Some(1));

        // The semaphore.
        let node = cluster.node_for("slots");
        let channel = "redisson_sc:{slots}";
        node.cmd(&["SET", "slots", "1"]);
        assert_eq!(eval(node, R_SEM_TAKE, &["slots"], &[]).as_int(), Some(1));
        let sem = c.semaphore("slots", 1).unwrap();
        assert!(sem.is_redisson());
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move {
                let p = sem.acquire().await.unwrap();
                (Instant::now(), p)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        eval(node, R_SEM_GIVE, &["slots", channel], &[]);
        let (at, p) = waiter.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "woke {:?} after Redisson's release",
            at - released
        );
        assert_eq!(
            eval(node, R_SEM_TAKE, &["slots"], &[]).as_int(),
            Some(0),
            "no permit left"
        );
        let mut sub = listen(&cluster, channel);
        p.release().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("1"));
        assert_eq!(eval(node, R_SEM_TAKE, &["slots"], &[]).as_int(), Some(1));

        // The read-write lock: a Redisson writer, lockwarden readers.
        let node = cluster.node_for("doc");
        let channel = "redisson_rwlock:{doc}";
        let writer = format!("{JAVA}:1:write");
        assert_eq!(
            eval(node, R_WRITE, &["doc", channel], &["60000", &writer]).as_str(),
            Some("OK")
        );
        let rw = c.rw_lock("doc").unwrap();
        let waiter = {
            let read = rw.read().clone();
            tokio::spawn(async move {
                let g = read.lock().await.unwrap();
                (Instant::now(), g)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert_eq!(
            eval(node, R_WRITE_UNLOCK, &["doc", channel], &["60000", &writer]).as_int(),
            Some(1)
        );
        let (at, g) = waiter.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "woke {:?} after Redisson's unlock",
            at - released
        );
        assert!(
            eval(node, R_WRITE, &["doc", channel], &["60000", &writer])
                .as_int()
                .is_some(),
            "excluded"
        );
        let mut sub = listen(&cluster, channel);
        g.unlock().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("0"));
        assert_eq!(
            eval(node, R_WRITE, &["doc", channel], &["60000", &writer]).as_str(),
            Some("OK")
        );
        // The fair lock: a lockwarden waiter queued behind a Redisson
        // holder is woken on its own channel by Redisson's unlock, and
        // wakes a Redisson waiter queued behind it the same way.
        let node = cluster.node_for("line");
        let queue = "redisson_lock_queue:{line}";
        assert_eq!(eval(node, R_LOCK, &["line"], &["60000", &owner]).as_str(), Some("OK"));
        let fair = c.fair_lock("line").unwrap();
        let waiter = {
            let fair = fair.clone();
            tokio::spawn(async move {
                let g = fair.lock().await.unwrap();
                (Instant::now(), g)
            })
        };
        assert!(
            eventually(Duration::from_secs(5), || node.cmd(&["LLEN", queue]).as_int()
                == Some(1))
            .await
        );
        let head = node.cmd(&["LINDEX", queue, "0"]).as_str().unwrap().to_string();
        let released = Instant::now();
        node.cmd(&["DEL", "line"]);
        node.cmd(&["SPUBLISH", &format!("redisson_lock__channel:{{line}}:{head}"), "0"]);
        let (at, g) = waiter.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "woke {:?} after Redisson's unlock",
            at - released
        );
        let next = format!("{JAVA}:2");
        node.cmd(&["RPUSH", queue, &next]);
        node.cmd(&["ZADD", "redisson_lock_timeout:{line}", "99999999999999", &next]);
        let mut sub = listen(&cluster, &format!("redisson_lock__channel:{{line}}:{next}"));
        g.unlock().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("0"));

        // A fixed-lease read of lockwarden's while nothing holds it: every
        // key it writes is in the name's slot (the script ran on one node).
        assert_eq!(
            eval(node, R_WRITE_UNLOCK, &["doc", channel], &["60000", &writer]).as_int(),
            Some(1)
        );
        let g = rw
            .read()
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(node.keys("{doc}:*:rwlock_timeout:1").len(), 1);
        g.unlock().await.unwrap();
    })
    .await
}
