//! The fair lock: FIFO among waiters, one wake-up per unlock.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Lease};

const LONG: Duration = Duration::from_secs(30);

async fn fair_client(url: &str, waiter_timeout: Duration) -> Client {
    Client::builder(url)
        .fair_waiter_timeout(waiter_timeout)
        .build()
        .await
        .expect("connect")
}

/// The queue and the deadline map of `name` are empty (absent).
fn assert_queue_empty(server: &RedisServer, name: &str) {
    let q = format!("lockwarden:{{{name}}}:queue");
    let t = format!("lockwarden:{{{name}}}:timeouts");
    assert_eq!(
        server.cmd(&["LLEN", &q]).as_int(),
        Some(0),
        "queue of {name}: {:?}",
        server.cmd(&["LRANGE", &q, "0", "-1"])
    );
    assert_eq!(server.cmd(&["ZCARD", &t]).as_int(), Some(0), "deadlines of {name}");
    let a = format!("lockwarden:{{{name}}}:asks");
    assert_eq!(server.cmd(&["HLEN", &a]).as_int(), Some(0), "grant asks of {name}");
}

/// Releases the hold of `field` on the fair lock `name` with the library's
/// own release script, but publishes the wake-up where no waiter listens:
/// the head is granted the lock and never told.
fn release_without_telling(server: &RedisServer, name: &str, field: &str) -> Reply {
    let base = format!("lockwarden:{{{name}}}");
    let (queue, timeouts, token, asks) = (
        format!("{base}:queue"),
        format!("{base}:timeouts"),
        format!("{base}:token"),
        format!("{base}:asks"),
    );
    let (rec, req_prefix) = (format!("{base}:req:test-release"), format!("{base}:req:"));
    server.cmd(&[
        "EVAL",
        concat!(
            include_str!("../lua/shared.lua"),
            include_str!("../lua/shared_release.lua"),
            include_str!("../lua/fair_release.lua")
        ),
        "6",
        name,
        &queue,
        &timeouts,
        &token,
        &rec,
        &asks,
        field,
        "0",
        "10000",
        "",
        "nobody-listens:",
        "PUBLISH",
        &req_prefix,
        "1",
    ])
}

/// A lock held by a made-up owner `field` (30 s lease), so a test can
/// release it with [`release_without_telling`].
fn hold_as(server: &RedisServer, name: &str, field: &str) {
    server.cmd(&["HSET", name, field, "1", ":kind", "fair"]);
    server.cmd(&["PEXPIRE", name, "30000"]);
}

fn queue_len(server: &RedisServer, name: &str) -> i64 {
    server
        .cmd(&["LLEN", &format!("lockwarden:{{{name}}}:queue")])
        .as_int()
        .unwrap()
}

/// A waiter that holds the lock until told to unlock.
struct Waiter {
    /// Resolves once the waiter holds the lock.
    got: tokio::sync::oneshot::Receiver<()>,
    release: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a task that waits for `lock` (up to 20 s) with a fixed 60 s
/// lease, so no watchdog renewal (a script call) falls into a count of
/// script calls.
fn wait_and_hold(lock: lockwarden::Lock) -> Waiter {
    let (got_tx, got) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let lease = Lease::Fixed(Duration::from_secs(60));
        let g = lock.try_lock(Duration::from_secs(20), lease).await.unwrap().unwrap();
        got_tx.send(()).unwrap();
        release_rx.await.unwrap();
        g.unlock().await.unwrap();
    });
    Waiter { got, release, task }
}

/// The fair waiters' wake channels of lock `name` the server has subscribers on.
fn wake_channels(server: &RedisServer, name: &str) -> Vec<String> {
    let prefix = format!("lockwarden:{{{name}}}:wake:");
    server
        .pubsub_channels()
        .into_iter()
        .filter(|ch| ch.starts_with(&prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_acquire_in_submission_order_as_leases_run_out() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let lock = c.fair_lock("leases").unwrap();
            tasks.push(tokio::spawn(async move {
                let g = lock
                    .try_lock(Duration::from_secs(10), Duration::from_secs(1))
                    .await
                    .unwrap()
                    .expect("acquired");
                (i, start.elapsed(), g)
            }));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.unwrap());
        }
        got.sort_by_key(|(_, at, _)| *at);
        let order: Vec<usize> = got.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(order, (0..8).collect::<Vec<_>>(), "FIFO by submission");
        for w in got.windows(2) {
            let gap = w[1].1 - w[0].1;
            assert!(
                gap >= Duration::from_millis(950) && gap <= Duration::from_millis(1300),
                "next one soon after the lease: {gap:?}"
            );
        }
        assert_queue_empty(&server, "leases");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_queued_waiters_acquire_in_queue_order_every_time() {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let evict = Duration::from_millis(200);
        let c = fair_client(&server.url(), evict).await;
        for rep in 0..21 {
            // The last repetition holds 3x the eviction timeout: only
            // refreshing keeps the waiters in the queue (six of them, each
            // waiting up to 18 eviction timeouts).
            let (hold, waiters) = if rep == 20 {
                (evict * 3, 6)
            } else {
                (Duration::from_millis(2), 20)
            };
            let name = format!("order-{rep}");
            let first = c.fair_lock(&name).unwrap().lock().await.unwrap();
            let seq = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for i in 0..waiters {
                let (lock, seq) = (c.fair_lock(&name).unwrap(), seq.clone());
                tasks.push(tokio::spawn(async move {
                    let g = lock.lock().await.unwrap();
                    let at = seq.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    g.unlock().await.unwrap();
                    (i, at)
                }));
                let want = i + 1;
                assert!(
                    eventually(Duration::from_secs(2), || queue_len(&server, &name) == want as i64).await,
                    "waiter {i} queued"
                );
            }
            if rep == 20 {
                tokio::time::sleep(evict * 3).await; // the first holder too holds long
            }
            first.unlock().await.unwrap();
            for t in tasks {
                let (i, at) = t.await.unwrap();
                assert_eq!(i, at, "repetition {rep}: waiter {i} acquired as number {at}");
            }
            assert_queue_empty(&server, &name);
        }
    })
    .await
}

/// Entry point of the child process of the next test: joins the queue of
/// the lock named in the environment and waits until killed. Run by the
/// test binary itself; returns at once in a normal test run.
#[tokio::test]
async fn child_waiter_entry_point() {
    let Ok(url) = std::env::var("LOCKWARDEN_TEST_CHILD_URL") else {
        return;
    };
    let c = Client::connect(&url).await.unwrap();
    let _g = c.fair_lock("killed-waiter").unwrap().lock().await.unwrap();
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_delays_the_others_by_at_most_the_eviction_timeout() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let evict = Duration::from_secs(5); // the child uses the default
        let c = fair_client(&server.url(), evict).await;
        let holder = c.fair_lock("killed-waiter").unwrap().lock().await.unwrap();
        let mut child = child_test("child_waiter_entry_point", &server.url());
        assert!(
            eventually(Duration::from_secs(20), || queue_len(&server, "killed-waiter") == 1).await,
            "child queued"
        );
        let lock = c.fair_lock("killed-waiter").unwrap();
        let live = tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            let at = Instant::now();
            g.unlock().await.unwrap();
            at
        });
        assert!(
            eventually(Duration::from_secs(5), || queue_len(&server, "killed-waiter") == 2).await,
            "live waiter queued behind"
        );
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        holder.unlock().await.unwrap();
        let got = live.await.unwrap();
        let delay = got - killed;
        assert!(
            delay <= evict + evict / 3 + Duration::from_millis(500),
            "delayed by {delay:?}"
        );
        eprintln!("live waiter got the lock {delay:?} after the queued child was killed");
        assert_queue_empty(&server, "killed-waiter");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let holder = c.fair_lock("give-up").unwrap().lock().await.unwrap();
        // try_lock times out: gone from the queue by the time it returns.
        let lock = c.fair_lock("give-up").unwrap();
        let r = tokio::spawn(async move { lock.try_lock(Duration::from_millis(300), LONG).await.unwrap() })
            .await
            .unwrap();
        assert!(r.is_none());
        assert_queue_empty(&server, "give-up");
        // A dropped lock() future and an aborted task.
        let lock = c.fair_lock("give-up").unwrap();
        let dropped = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(300), lock.lock())
                .await
                .is_err()
        });
        assert!(dropped.await.unwrap());
        // Its leave runs in the background: wait for it, so the count
        // below sees the next waiter and not this one.
        assert!(
            eventually(Duration::from_secs(1), || queue_len(&server, "give-up") == 0).await,
            "dropped waiter left at once"
        );
        assert_queue_empty(&server, "give-up");
        let lock = c.fair_lock("give-up").unwrap();
        let aborted = tokio::spawn(async move { lock.lock().await.map(drop) });
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "give-up") == 1).await);
        aborted.abort();
        let t = Instant::now();
        assert!(
            eventually(Duration::from_secs(1), || queue_len(&server, "give-up") == 0).await,
            "left at once"
        );
        eprintln!("aborted waiter gone from the queue after {:?}", t.elapsed());
        assert_queue_empty(&server, "give-up");
        holder.unlock().await.unwrap();
        assert!(eventually(Duration::from_secs(2), || server.pubsub_channels().is_empty()).await);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_tasks_take_turns() {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let inside = Arc::new(AtomicUsize::new(0));
        let counter = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..500 {
            let (lock, inside, counter) = (c.fair_lock("crowd").unwrap(), inside.clone(), counter.clone());
            tasks.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                // Non-atomic read-modify-write across the hold.
                let v = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                counter.store(v + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(counter.load(Ordering::SeqCst), 500);
        assert_queue_empty(&server, "crowd");
        assert!(eventually(Duration::from_secs(5), || server.pubsub_channels().is_empty()).await);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_wakes_exactly_one_waiter() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let mut watcher = server.resp();
        watcher.cmd(&["PSUBSCRIBE", "lockwarden:{wakes}:*"]);
        let holder = c.fair_lock("wakes").unwrap().lock().await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..5 {
            let lock = c.fair_lock("wakes").unwrap();
            tasks.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
                g.unlock().await.unwrap();
            }));
        }
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "wakes") == 5).await);
        // Each waiter listens on a channel of its own. A waiter joins the
        // queue with its first attempt and subscribes right after it.
        assert!(eventually(Duration::from_secs(2), || wake_channels(&server, "wakes").len() == 5).await);
        assert_eq!(
            wake_channels(&server, "wakes").len(),
            5,
            "{:?}",
            server.pubsub_channels()
        );
        let head = server
            .cmd(&["LINDEX", "lockwarden:{wakes}:queue", "0"])
            .as_str()
            .unwrap()
            .to_string();
        // The head listens where its grant ask says (its wake id).
        let ask = server
            .cmd(&["HGET", "lockwarden:{wakes}:asks", &head])
            .as_str()
            .unwrap()
            .to_string();
        let wake_id = ask.rsplit(' ').next().unwrap().to_string();
        holder.unlock().await.unwrap();
        let mut woken = Vec::new();
        while let Some(Reply::Array(m)) = watcher.next(Duration::from_millis(200)) {
            woken.push((m[2].as_str().unwrap().to_string(), m[3].as_str().unwrap().to_string()));
        }
        assert_eq!(woken.len(), 1, "one message, to the head only: {woken:?}");
        assert_eq!(woken[0].0, format!("lockwarden:{{wakes}}:wake:{wake_id}"));
        // The message grants the lock to the head.
        assert!(woken[0].1.starts_with("g "), "{woken:?}");
        assert_eq!(server.cmd(&["HEXISTS", "wakes", &head]).as_int(), Some(1));
        for t in tasks {
            t.await.unwrap();
        }
        assert_queue_empty(&server, "wakes");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_timing_out_during_client_pause_leave_no_stale_entries() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let evict = Duration::from_secs(1);
        let c = fair_client(&server.url(), evict).await;
        let holder = c.fair_lock("paused").unwrap().lock().await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let lock = c.fair_lock("paused").unwrap();
            tasks.push(tokio::spawn(async move {
                lock.try_lock(Duration::from_millis(500), LONG).await
            }));
        }
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "paused") == 10).await);
        server.cmd(&["CLIENT", "PAUSE", "1500", "ALL"]);
        for t in tasks {
            // Leaving or timing out: either way, not acquired.
            assert!(!matches!(t.await.unwrap(), Ok(Some(_))));
        }
        assert!(
            eventually(evict * 3, || queue_len(&server, "paused") == 0).await,
            "stale entries: {:?}",
            server.cmd(&["LRANGE", "lockwarden:{paused}:queue", "0", "-1"])
        );
        assert_queue_empty(&server, "paused");
        holder.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_never_barges_past_queued_waiters() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let holder = c.fair_lock("barge").unwrap().lock().await.unwrap();
        let lock = c.fair_lock("barge").unwrap();
        let queued = tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            g.unlock().await.unwrap();
        });
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "barge") == 1).await);
        holder.unlock().await.unwrap();
        // Right after the unlock the lock may be free for a moment, but it is
        // the queued waiter's turn: a one-shot attempt must not take it.
        let newcomer = c.fair_lock("barge").unwrap();
        let got = tokio::spawn(async move {
            newcomer
                .try_lock(Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .map(drop)
        })
        .await
        .unwrap();
        assert!(got.is_none(), "barged past the queue");
        queued.await.unwrap();
        assert_queue_empty(&server, "barge");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_waiters_on_one_lock_all_get_their_turn() {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(10)).await;
        let holder = c.fair_lock("thousands").unwrap().lock().await.unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..2000 {
            let (lock, done) = (c.fair_lock("thousands").unwrap(), done.clone());
            tasks.push(tokio::spawn(async move {
                lock.lock().await.unwrap().unlock().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert!(
            eventually(Duration::from_secs(60), || queue_len(&server, "thousands") == 2000).await,
            "all queued"
        );
        // One subscription per waiting task, all on one connection.
        assert!(
            eventually(Duration::from_secs(60), || server.pubsub_channels().len() == 2000).await,
            "{} wake channels",
            server.pubsub_channels().len()
        );
        let subscribers = server.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]);
        assert_eq!(
            subscribers.as_str().unwrap().lines().count(),
            1,
            "one subscriber connection"
        );
        holder.unlock().await.unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 2000);
        assert_queue_empty(&server, "thousands");
        assert!(eventually(Duration::from_secs(10), || server.pubsub_channels().is_empty()).await);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_message_is_lost_is_claimed_by_the_next_attempt() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        // Refreshes (attempts) every 0.5 s.
        let c = fair_client(&server.url(), Duration::from_millis(1500)).await;
        hold_as(&server, "lost-grant", "someone:1");
        let lock = c.fair_lock("lost-grant").unwrap();
        let waiter = tokio::spawn(async move {
            let g = lock
                .try_lock(Duration::from_secs(10), LONG)
                .await
                .unwrap()
                .expect("granted");
            (lock, g)
        });
        // Queued (a script call), subscribed and re-checked once (the only
        // EXISTS: the scripts read the lock with PTTL): the next attempt is
        // a refresh, 0.5 s away.
        assert!(eventually(Duration::from_secs(2), || server.command_calls("exists") >= 1).await);
        assert_eq!(server.command_calls("evalsha"), 1);
        assert_eq!(queue_len(&server, "lost-grant"), 1);
        let granted = Instant::now();
        assert_eq!(
            release_without_telling(&server, "lost-grant", "someone:1").as_int(),
            Some(0)
        );
        // The unlock handed the lock to the waiter (out of the queue) and
        // bounded the grant's lease by the waiter's deadline.
        assert_eq!(queue_len(&server, "lost-grant"), 0);
        assert_eq!(server.owners("lost-grant").len(), 1);
        let grant_pttl = server.cmd(&["PTTL", "lost-grant"]).as_int().unwrap();
        assert!((1..=1500).contains(&grant_pttl), "grant lease {grant_pttl} ms");
        let (lock, g) = waiter.await.unwrap();
        eprintln!("lost grant claimed after {:?}", granted.elapsed());
        // Claimed as the fresh hold it is: depth 1, the granted token, and
        // the waiter's own lease now.
        assert_eq!(g.depth(), 1);
        assert_eq!(lock.with_owner(g.owner()).hold_count().await.unwrap(), 1);
        assert_eq!(
            server.owners("lost-grant"),
            [(g.owner().field().to_string(), "1".to_string())]
        );
        let token: u64 = server
            .cmd(&["GET", "lockwarden:{lost-grant}:token"])
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(g.token(), token);
        let pttl = server.cmd(&["PTTL", "lost-grant"]).as_int().unwrap();
        assert!(pttl > 20_000, "the waiter's 30 s lease is set, PTTL {pttl} ms");
        g.unlock().await.unwrap();
        assert_eq!(
            server.cmd(&["EXISTS", "lost-grant"]).as_int(),
            Some(0),
            "one level, one unlock"
        );
        assert_queue_empty(&server, "lost-grant");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_after_an_unheard_grant_gives_the_lock_back() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        // Refreshes only every 10 s: the waiter sleeps through the grant.
        let c = fair_client(&server.url(), Duration::from_secs(30)).await;
        hold_as(&server, "dropped-grant", "someone:1");
        let lock = c.fair_lock("dropped-grant").unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
        // Queued (a script call), subscribed and re-checked once (the only
        // EXISTS: the scripts read the lock with PTTL): asleep until the
        // refresh. (A grant landing before the re-check would be claimed by
        // it instead.)
        assert!(eventually(Duration::from_secs(2), || server.command_calls("exists") >= 1).await);
        assert_eq!(queue_len(&server, "dropped-grant"), 1);
        assert_eq!(
            release_without_telling(&server, "dropped-grant", "someone:1").as_int(),
            Some(0)
        );
        assert_eq!(server.owners("dropped-grant").len(), 1, "granted");
        let pttl = server.cmd(&["PTTL", "dropped-grant"]).as_int().unwrap();
        assert!(pttl > 20_000, "the grant's lease runs {pttl} ms more");
        waiter.abort();
        let t = Instant::now();
        assert!(
            eventually(Duration::from_secs(2), || server
                .cmd(&["EXISTS", "dropped-grant"])
                .as_int()
                == Some(0))
            .await,
            "the dropped waiter gave the grant back"
        );
        eprintln!("grant given back after {:?}", t.elapsed());
        assert_queue_empty(&server, "dropped-grant");
        // Free for the next one at once.
        let other = fair_client(&server.url(), Duration::from_secs(5)).await;
        let g = other
            .fair_lock("dropped-grant")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("free");
        g.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_waiting_again_reuses_its_subscribed_wake_channel() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        // A long waiter timeout: a direct grant's first lease is cut to the
        // grantee's queue deadline and extended a third of the way in, and
        // that extension (a script call) must not fall into the count below
        // on a loaded machine.
        let holder_client = fair_client(&server.url(), Duration::from_secs(60)).await;
        let holder = holder_client.fair_lock("again").unwrap().lock().await.unwrap();
        let c = fair_client(&server.url(), Duration::from_secs(60)).await;
        // Fixed leases (see `wait_and_hold`).
        let first = wait_and_hold(c.fair_lock("again").unwrap());
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "again") == 1).await);
        assert!(eventually(Duration::from_secs(2), || c.waiting_channels() == 1).await);
        holder.unlock().await.unwrap();
        first.got.await.unwrap();
        // The first waiter holds the lock now; a second call of the same
        // client waits at once, on the channel the first one listened on.
        let subscribes = server.command_calls("subscribe");
        let scripts = server.command_calls("evalsha");
        let second = wait_and_hold(c.fair_lock("again").unwrap());
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "again") == 1).await);
        assert_eq!(server.command_calls("subscribe"), subscribes, "subscribed again");
        let wake = wake_channels(&server, "again");
        assert_eq!(wake.len(), 1, "{wake:?}");
        assert!(wake[0].ends_with(":w0"), "{wake:?}");
        first.release.send(()).unwrap();
        second.got.await.unwrap();
        // The whole contended acquisition cost the server two script
        // calls: the queued try, and the release that granted the lock (no
        // re-check after subscribing: the channel was subscribed before).
        assert_eq!(server.command_calls("evalsha") - scripts, 2);
        second.release.send(()).unwrap();
        first.task.await.unwrap();
        second.task.await.unwrap();
        assert_queue_empty(&server, "again");
        assert!(eventually(Duration::from_secs(2), || server.pubsub_channels().is_empty()).await);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_meant_for_an_earlier_wait_does_not_make_a_waiter_try_again() {
    bounded(Duration::from_secs(30), async {
        // A client's wake channel serves its waits one after the other. A
        // grant message for an earlier wait can reach the next one (the
        // earlier wait took its grant from the record and left before the
        // message came): the next wait must sleep on, not send its acquire
        // again.
        let server = RedisServer::start();
        let holder_client = fair_client(&server.url(), Duration::from_secs(60)).await;
        let holder = holder_client.fair_lock("stale").unwrap().lock().await.unwrap();
        let c = fair_client(&server.url(), Duration::from_secs(60)).await;
        let waiter = wait_and_hold(c.fair_lock("stale").unwrap());
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "stale") == 1).await);
        assert!(eventually(Duration::from_secs(2), || c.waiting_channels() == 1).await);
        let wake = wake_channels(&server, "stale");
        assert_eq!(wake.len(), 1, "{wake:?}");
        let scripts = server.command_calls("evalsha");
        // An earlier wait's grant on this wait's channel, then the real one
        // (the holder's unlock), in that order on the client's connection.
        let stale = server.cmd(&["PUBLISH", &wake[0], "g 1 60000 an-earlier-wait"]);
        assert_eq!(format!("{stale:?}"), "Int(1)", "the waiter's client listens");
        holder.unlock().await.unwrap();
        waiter.got.await.unwrap();
        // The holder's release (which granted the lock) is the only script
        // call: the waiter took the grant from its message.
        assert_eq!(server.command_calls("evalsha") - scripts, 1);
        waiter.release.send(()).unwrap();
        waiter.task.await.unwrap();
        assert_queue_empty(&server, "stale");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lease_granted_long_after_the_last_attempt_is_not_lost_at_once() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        // Refreshes every 10 s: the waiter's last attempt is long past when
        // the lock is granted to it.
        let c = fair_client(&server.url(), Duration::from_secs(30)).await;
        let holder = c.fair_lock("short-grant").unwrap().lock().await.unwrap();
        let lock = c.fair_lock("short-grant").unwrap();
        let waiter = tokio::spawn(async move {
            let g = lock
                .try_lock(Duration::from_secs(10), Duration::from_millis(400))
                .await
                .unwrap()
                .expect("granted");
            (g.is_lost(), g.validity())
        });
        assert!(eventually(Duration::from_secs(2), || queue_len(&server, "short-grant") == 1).await);
        // Holding on for longer than the waiter's lease, with no attempt of
        // the waiter in between (its refresh is 10 s away).
        let attempts = server.command_calls("evalsha");
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            server.command_calls("evalsha"),
            attempts,
            "the waiter attempted meanwhile"
        );
        holder.unlock().await.unwrap();
        let (lost, validity) = waiter.await.unwrap();
        assert!(!lost, "the fresh hold reported itself lost");
        assert!(validity > Duration::from_millis(200), "validity {validity:?}");
        assert_queue_empty(&server, "short-grant");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_key_of_another_type_is_an_error_and_the_queue_is_left_as_it_was() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = fair_client(&server.url(), Duration::from_secs(5)).await;
        let other = fair_client(&server.url(), Duration::from_secs(5)).await;
        // Each queue key in turn holds a string. The lock is held, so the
        // waiter's attempt goes straight to joining the queue: each write
        // there must find the wrong type before anything of it stays.
        for (i, kind) in ["queue", "timeouts", "asks"].into_iter().enumerate() {
            let name = format!("typed-{i}");
            let bad = format!("lockwarden:{{{name}}}:{kind}");
            let holder = c.fair_lock(&name).unwrap().lock().await.unwrap();
            server.cmd(&["SET", &bad, "precious"]);
            let e = other
                .fair_lock(&name)
                .unwrap()
                .try_lock(Duration::from_millis(200), LONG)
                .await
                .unwrap_err();
            assert!(matches!(&e, lockwarden::Error::WrongType { .. }), "{kind}: {e}");
            assert_eq!(server.cmd(&["GET", &bad]).as_str(), Some("precious"), "{kind}");
            assert_eq!(server.cmd(&["PTTL", &bad]).as_int(), Some(-1), "{kind}");
            for other in ["queue", "timeouts", "asks"].into_iter().filter(|k| *k != kind) {
                let key = format!("lockwarden:{{{name}}}:{other}");
                assert_eq!(
                    server.cmd(&["EXISTS", &key]).as_int(),
                    Some(0),
                    "{kind} of another type: nothing left in {other}"
                );
            }
            holder.unlock().await.unwrap();
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_that_only_wakes_the_head_keeps_it_first_and_the_queue_expiring() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        // A head without a grant ask (as a quorum's waiters are), alone in
        // the queue, with a live deadline: the release takes it off the
        // queue to look at it, does not grant, and must put it back.
        let (queue, timeouts) = ("lockwarden:{woken}:queue", "lockwarden:{woken}:timeouts");
        hold_as(&server, "woken", "someone:1");
        let now_ms = server.cmd(&["TIME"]).strings()[0].parse::<i64>().unwrap() * 1000;
        server.cmd(&["RPUSH", queue, "waiter:1"]);
        server.cmd(&["ZADD", timeouts, &(now_ms + 60_000).to_string(), "waiter:1"]);
        server.cmd(&["PEXPIRE", queue, "20000"]);
        server.cmd(&["PEXPIRE", timeouts, "20000"]);
        assert_eq!(release_without_telling(&server, "woken", "someone:1").as_int(), Some(0));
        assert_eq!(
            server.cmd(&["EXISTS", "woken"]).as_int(),
            Some(0),
            "released, not granted"
        );
        assert_eq!(server.cmd(&["LRANGE", queue, "0", "-1"]).strings(), ["waiter:1"]);
        let pttl = server.cmd(&["PTTL", queue]).as_int().unwrap();
        assert!((1..=20_000).contains(&pttl), "the queue still expires: PTTL {pttl}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_expired_before_its_claim_is_not_taken_from_its_record() {
    bounded(Duration::from_secs(30), async {
        // A waiter paused past its grant's lease (cut to its queue
        // deadline) comes back to a lock someone else holds: its record
        // still says "granted", and must not be believed.
        let server = RedisServer::start();
        // Refreshes (attempts) every 0.5 s.
        let c = fair_client(&server.url(), Duration::from_millis(1500)).await;
        hold_as(&server, "expired-grant", "someone:1");
        let lock = c.fair_lock("expired-grant").unwrap();
        let (got_tx, mut got) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn(async move {
            let g = lock
                .try_lock(Duration::from_secs(10), LONG)
                .await
                .unwrap()
                .expect("granted in the end");
            let _ = got_tx.send(Instant::now());
            g
        });
        assert!(eventually(Duration::from_secs(2), || server.command_calls("exists") >= 1).await);
        assert_eq!(queue_len(&server, "expired-grant"), 1);
        assert_eq!(
            release_without_telling(&server, "expired-grant", "someone:1").as_int(),
            Some(0)
        );
        assert_eq!(server.owners("expired-grant").len(), 1, "granted");
        // The grant's lease runs out before the waiter's next attempt (as
        // it would while the waiter's process is stopped), and another
        // client takes the free lock.
        server.cmd(&["PEXPIRE", "expired-grant", "1"]);
        assert!(
            eventually(Duration::from_secs(1), || server
                .cmd(&["EXISTS", "expired-grant"])
                .as_int()
                == Some(0))
            .await
        );
        let other = fair_client(&server.url(), Duration::from_secs(5)).await;
        let held = other
            .fair_lock("expired-grant")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("free after the grant ran out");
        // The waiter refreshes at least twice while the other holds.
        let attempts = server.command_calls("evalsha");
        let waiting = waiter.is_finished();
        assert!(
            !waiting,
            "the waiter took the lock from its stale record while another held it"
        );
        assert!(
            eventually(Duration::from_secs(3), || waiter.is_finished()
                || server.command_calls("evalsha") >= attempts + 2)
            .await
        );
        assert!(
            !waiter.is_finished(),
            "the waiter took the lock from its stale record while another held it"
        );
        let released = Instant::now();
        held.unlock().await.unwrap();
        let g = waiter.await.unwrap();
        assert!(got.try_recv().unwrap() >= released);
        g.unlock().await.unwrap();
        assert_queue_empty(&server, "expired-grant");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_message_that_comes_after_the_grant_lapsed_is_not_taken_for_the_lock() {
    bounded(
        Duration::from_secs(150),
        until_premise_holds(3, |_| late_grant_message()),
    )
    .await
}

/// One play of the test above; `None` when the waiter's own attempt took the
/// grant before it lapsed, or the lock once it had (a loaded machine).
async fn late_grant_message() -> Option<()> {
    // An unlock grants the lock to the waiter, whose message is held
    // up on the way (its subscriber connection lags). The grant's
    // lease runs out, another client takes the lock, and the waiter's
    // next attempt is refused; then the message arrives. It is older
    // than that attempt, and must not make the waiter a second holder.
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let holder = fair_client(&server.url(), Duration::from_secs(5)).await;
    // Refreshes (attempts) every second.
    let waiting = fair_client(&proxy.url(), Duration::from_secs(3)).await;
    let first = holder.fair_lock("late-grant").unwrap().lock().await.unwrap();
    let lock = waiting.fair_lock("late-grant").unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock
            .try_lock(Duration::from_secs(20), Duration::from_millis(400))
            .await
            .unwrap()
            .expect("granted in the end");
        (Instant::now(), g)
    });
    assert!(eventually(Duration::from_secs(3), || queue_len(&server, "late-grant") == 1).await);
    assert!(
        eventually(Duration::from_secs(3), || wake_channels(&server, "late-grant").len()
            == 1)
        .await
    );
    // Right after one of the waiter's refreshes (the next is a second
    // away), the unlock grants the lock to it, for 400 ms.
    let calls = server.command_calls("evalsha");
    assert!(eventually(Duration::from_secs(3), || server.command_calls("evalsha") > calls).await);
    proxy.hold_messages();
    first.unlock().await.unwrap();
    assert_eq!(queue_len(&server, "late-grant"), 0, "granted");
    assert!(
        eventually(Duration::from_secs(2), || server
            .cmd(&["EXISTS", "late-grant"])
            .as_int()
            == Some(0))
        .await,
        "the grant's lease ran out"
    );
    if waiter.is_finished() {
        return None; // its own attempt came within the grant's lease and took it
    }
    let other = fair_client(&server.url(), Duration::from_secs(5)).await;
    let held = other
        .fair_lock("late-grant")
        .unwrap()
        .try_lock(Duration::ZERO, LONG)
        .await
        .unwrap()?; // else its own attempt came between the lapse and this
                    // The waiter's next attempt is refused (it queues again); the old
                    // message comes right after.
    assert!(eventually(Duration::from_secs(3), || queue_len(&server, "late-grant") == 1).await);
    proxy.pass_messages();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took the late message for the lock while another held it"
    );
    let released = Instant::now();
    held.unlock().await.unwrap();
    let (got, g) = waiter.await.unwrap();
    assert!(got >= released);
    g.unlock().await.unwrap();
    assert_queue_empty(&server, "late-grant");
    Some(())
}

/// A wait's leave takes back only its own place: one that reaches the
/// server late (sent again in the background after a break, say), once
/// the same task waits again, leaves the later wait's place alone (its ask
/// names another request), and that wait keeps its turn. Played with the
/// library's own `fair_leave.lua` text, as a late leave of an earlier
/// request; the later wait's own leave still takes the place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_leave_of_an_earlier_wait_leaves_the_next_wait_of_its_owner_in_its_place() {
    const LEAVE: &str = concat!(include_str!("../lua/shared.lua"), include_str!("../lua/fair_leave.lua"));
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let holder = fair_client(&server.url(), Duration::from_secs(5)).await;
        let waiting = fair_client(&server.url(), Duration::from_secs(5)).await;
        let held = holder.fair_lock("late-leave").unwrap().lock().await.unwrap();
        let lock = waiting.fair_lock("late-leave").unwrap();
        let waiter = tokio::spawn(async move {
            lock.try_lock(Duration::from_secs(20), LONG)
                .await
                .unwrap()
                .expect("its turn in the end")
        });
        assert!(eventually(Duration::from_secs(3), || queue_len(&server, "late-leave") == 1).await);
        let asks = server.cmd(&["HGETALL", "lockwarden:{late-leave}:asks"]).strings();
        assert_eq!(asks.len(), 2, "one ask: {asks:?}");
        let (owner, ask) = (asks[0].clone(), asks[1].clone());
        let own = ask.split(' ').nth(3).expect("the ask's request id").to_string();
        let leave = |id: &str| {
            server.cmd(&[
                "EVAL",
                LEAVE,
                "6",
                "late-leave",
                "lockwarden:{late-leave}:queue",
                "lockwarden:{late-leave}:timeouts",
                "lockwarden:{late-leave}:token",
                "lockwarden:{late-leave}:asks",
                &format!("lockwarden:{{late-leave}}:req:{id}"),
                &owner,
                "lockwarden:{late-leave}:wake:",
                "PUBLISH",
                id,
            ])
        };
        assert_eq!(
            leave("an-earlier-request"),
            Reply::Int(0),
            "nothing of that wait's is left"
        );
        assert_eq!(queue_len(&server, "late-leave"), 1, "the later wait keeps its place");
        assert_eq!(
            server.cmd(&["HGET", "lockwarden:{late-leave}:asks", &owner]),
            Reply::Str(ask.clone()),
            "and its ask"
        );
        assert_eq!(
            server.cmd(&["ZCARD", "lockwarden:{late-leave}:timeouts"]).as_int(),
            Some(1),
            "and its deadline"
        );
        // The leave of the wait's own request (or one its asks named).
        assert_eq!(leave(&own), Reply::Int(1));
        assert_eq!(queue_len(&server, "late-leave"), 0);
        assert_eq!(
            server.cmd(&["EXISTS", "lockwarden:{late-leave}:asks"]).as_int(),
            Some(0)
        );
        held.unlock().await.unwrap();
        // The wait queues again at its next attempt and gets the lock.
        let g = waiter.await.unwrap();
        g.unlock().await.unwrap();
    })
    .await
}
