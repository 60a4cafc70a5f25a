//! A quorum of independent masters, on real redis-servers (3 and 5 of them).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bounded, eventually, RedisServer};
use lockwarden::{Client, Error, Lease, LossReason};

fn masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

async fn quorum(servers: &[RedisServer], node_timeout: Duration) -> Client {
    Client::builder_for_masters(urls(servers))
        .command_timeout(node_timeout)
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await
        .expect("connect to the masters")
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99).div_ceil(100) - 1]
}

/// 8 workers hand one lock around while `stopped` of `n` masters are
/// SIGSTOPped: no overlap, no lost update, every attempt bounded.
async fn hand_around_with_masters_stopped(n: usize, stopped: usize) {
    bounded(Duration::from_secs(90), async {
        let servers = masters(n);
        let node_timeout = Duration::from_millis(100);
        let mut clients = Vec::new();
        for _ in 0..8 {
            clients.push(quorum(&servers, node_timeout).await);
        }
        for s in servers.iter().take(stopped) {
            s.pause();
        }
        let in_use = Arc::new(AtomicBool::new(false));
        let counter = Arc::new(AtomicU64::new(0));
        let acquired = Arc::new(AtomicU64::new(0));
        let stop_at = Instant::now() + Duration::from_secs(4);
        let mut tasks = Vec::new();
        for c in &clients {
            let lock = c.lock("handed").unwrap();
            let (in_use, counter, acquired) = (in_use.clone(), counter.clone(), acquired.clone());
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < stop_at && acquired.load(Ordering::SeqCst) < 400 {
                    let t = Instant::now();
                    let r = lock.try_lock(Duration::ZERO, Duration::from_secs(2)).await;
                    latencies.push(t.elapsed());
                    match r {
                        Ok(Some(guard)) => {
                            assert!(!in_use.swap(true, Ordering::SeqCst), "two holders at once");
                            // A read-modify-write that loses updates under overlap.
                            let v = counter.load(Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            counter.store(v + 1, Ordering::SeqCst);
                            in_use.store(false, Ordering::SeqCst);
                            acquired.fetch_add(1, Ordering::SeqCst);
                            guard.unlock().await.expect("unlock with a majority up");
                        }
                        Ok(None) => tokio::time::sleep(Duration::from_millis(1)).await,
                        Err(e) => panic!("acquire failed with a majority up: {e}"),
                    }
                }
                latencies
            }));
        }
        let mut latencies = Vec::new();
        for t in tasks {
            latencies.extend(t.await.unwrap());
        }
        for s in servers.iter().take(stopped) {
            s.resume();
        }
        let done = acquired.load(Ordering::SeqCst);
        assert!(done >= 50, "only {done} acquisitions in 4 s");
        assert_eq!(counter.load(Ordering::SeqCst), done, "lost updates");
        let p = p99(latencies);
        eprintln!("{n} masters, {stopped} stopped: {done} acquisitions, attempt p99 {p:?}");
        assert!(
            p < node_timeout + Duration::from_millis(30),
            "attempt p99 {p:?} above the node timeout + 30 ms"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_masters_stopped_no_overlap_no_lost_update() {
    hand_around_with_masters_stopped(3, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_masters_stopped_no_overlap_no_lost_update() {
    hand_around_with_masters_stopped(5, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_stopped_grants_nothing_and_the_holder_learns_in_time() {
    bounded(Duration::from_secs(30), async {
        let servers = masters(5);
        let node_timeout = Duration::from_millis(100);
        let lease = Duration::from_secs(1);
        let holder = quorum(&servers, node_timeout).await;
        let other = quorum(&servers, node_timeout).await;
        let guard = holder.lock("long").unwrap().lock().await.unwrap();
        assert!(guard.validity() > Duration::ZERO);
        for s in &servers[..3] {
            s.pause();
        }
        let paused_at = Instant::now();
        // The validity can only shrink from here: nothing confirms a renewal.
        let valid_until = paused_at + guard.validity();
        let lock = other.lock("long").unwrap();
        let contender = tokio::spawn(async move {
            let mut grants = Vec::new();
            while paused_at.elapsed() < lease * 2 {
                if let Ok(Some(g)) = lock.try_lock(Duration::ZERO, Duration::from_millis(500)).await {
                    grants.push(paused_at.elapsed());
                    drop(g);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            grants
        });
        let why = tokio::time::timeout(lease * 2, guard.lost())
            .await
            .expect("loss reported");
        let reported = Instant::now();
        assert_eq!(why, LossReason::RenewalFailed);
        assert!(
            reported <= valid_until + Duration::from_millis(30),
            "loss reported {:?} after the validity ended",
            reported - valid_until
        );
        assert!(guard.is_lost() && guard.validity() == Duration::ZERO);
        let grants = contender.await.unwrap();
        assert!(grants.is_empty(), "granted with 3 of 5 masters stopped at {grants:?}");
        drop(guard);

        for s in &servers[..3] {
            s.resume();
        }
        let resumed = Instant::now();
        let lock = other.lock("long").unwrap();
        let first = loop {
            if let Ok(Some(g)) = lock.try_lock(Duration::ZERO, Duration::from_secs(1)).await {
                break (resumed.elapsed(), g);
            }
            assert!(resumed.elapsed() < lease * 3, "no grant after SIGCONT");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            first.0 <= lease + Duration::from_secs(1),
            "first grant {:?} after SIGCONT",
            first.0
        );
        first.1.unlock().await.unwrap();
    })
    .await
}

/// One round of the crash-restart hazard: `first` holds on masters 0 and 1
/// (master 2 was stopped while it acquired), master 0 restarts empty, and
/// `second` tries for a while. Returns whether `second` got the lock while
/// `first`'s hold was still valid.
async fn restart_round(servers: &mut [RedisServer], first: &Client, second: &Client, name: &str) -> bool {
    servers[2].pause();
    let guard = first
        .lock(name)
        .unwrap()
        .try_lock(Duration::from_secs(1), Duration::from_millis(2500))
        .await
        .unwrap()
        .expect("first client acquires on masters 0 and 1");
    servers[2].resume();
    // Master 2 runs the stale request it had queued; the client undoes it.
    let key_gone = eventually(Duration::from_secs(2), || servers[2].keys(name).is_empty()).await;
    assert!(key_gone, "master 2 kept the stale level");
    servers[0].restart();
    let lock = second.lock(name).unwrap();
    let mut overlap = false;
    // Longer than a master rests after a failed call (5 × 100 ms): the first
    // try after the restart may meet the broken connection.
    let until = Instant::now() + Duration::from_millis(1200);
    while Instant::now() < until && guard.validity() > Duration::from_millis(50) {
        if let Ok(Some(g)) = lock.try_lock(Duration::ZERO, Duration::from_millis(300)).await {
            // `first` still believes it holds the lock.
            overlap = guard.validity() > Duration::ZERO && !guard.is_lost();
            drop(g);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(guard);
    // Leave nothing behind for the next round.
    let clean = eventually(Duration::from_secs(3), || {
        servers.iter().all(|s| s.keys(name).is_empty())
    })
    .await;
    assert!(clean, "lock keys left after the round");
    overlap
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_lets_a_second_client_in_without_delayed_rejoin() {
    bounded(Duration::from_secs(30), async {
        let mut servers = masters(3);
        let first = quorum(&servers, Duration::from_millis(100)).await;
        let second = quorum(&servers, Duration::from_millis(100)).await;
        // The checker must see the hazard, or the next test proves nothing.
        assert!(
            restart_round(&mut servers, &first, &second, "hazard").await,
            "the restarted master did not let the second client in"
        );
    })
    .await
}

/// Twenty rounds: the hazard shows in the first round without the delay
/// (above), and the model checker covers every interleaving of a restart
/// with the rejoin delay (`model-check/tests/model_check.rs`, the quorum's bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_rejoin_prevents_the_overlap_over_20_restarts() {
    bounded(Duration::from_secs(120), async {
        let mut servers = masters(3);
        let first = quorum(&servers, Duration::from_millis(100)).await;
        let second = Client::builder_for_masters(urls(&servers))
            .command_timeout(Duration::from_millis(100))
            .rejoin_delay(Duration::from_secs(3))
            .build()
            .await
            .unwrap();
        for round in 0..20 {
            let overlap = restart_round(&mut servers, &first, &second, &format!("rejoin{round}")).await;
            assert!(
                !overlap,
                "round {round}: two holders after a restart despite the delayed rejoin"
            );
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_majority_hands_out_no_guard_without_validity() {
    bounded(Duration::from_secs(30), async {
        let servers = masters(3);
        let c = quorum(&servers, Duration::from_secs(2)).await;
        let lock = c.lock("slow").unwrap();
        for _ in 0..3 {
            // Two masters answer only after the lease has run out.
            for s in &servers[1..] {
                s.cmd(&["CLIENT", "PAUSE", "300", "ALL"]);
            }
            let r = lock.try_lock(Duration::ZERO, Duration::from_millis(200)).await.unwrap();
            assert!(r.is_none(), "a guard was handed out after the lease: {r:?}");
            for (i, s) in servers.iter().enumerate() {
                assert!(s.keys("slow").is_empty(), "master {i} kept the partial grant");
            }
        }
        // Without the pause the same call succeeds.
        let g = lock.try_lock(Duration::ZERO, Duration::from_millis(200)).await.unwrap();
        assert!(g.is_some_and(|g| g.validity() > Duration::ZERO));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_while_masters_stop_and_restart() {
    use rand::{Rng, SeedableRng};
    bounded(Duration::from_secs(120), async {
        let mut servers = masters(3);
        let c = quorum(&servers, Duration::from_millis(50)).await;
        let lock = c.lock("fenced").unwrap();
        let seed: u64 = rand::random();
        eprintln!("seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut paused: Option<usize> = None;
        let mut last = 0u64;
        let mut faults = 0;
        let mut last_fault = Instant::now();
        for i in 0..1000 {
            if i % 20 == 10 {
                // Give a restarted master's connection time to come back, so
                // faults do not overlap.
                tokio::time::sleep(Duration::from_millis(300).saturating_sub(last_fault.elapsed())).await;
                last_fault = Instant::now();
                // One fault at a time between acquisitions: stop one master,
                // resume it, or restart one (empty: its counters are gone).
                let victim = rng.gen_range(0..3);
                match (paused, rng.gen_range(0..2)) {
                    (Some(p), _) => {
                        servers[p].resume();
                        paused = None;
                    }
                    (None, 0) => {
                        servers[victim].pause();
                        paused = Some(victim);
                    }
                    (None, _) => servers[victim].restart(),
                }
                faults += 1;
            }
            // A master that just came back may still be reconnecting, or be
            // left out after a timeout while another is stopped: retry then.
            let mut tries = 0;
            let g = loop {
                match lock
                    .try_lock(Duration::from_secs(3), Lease::Fixed(Duration::from_secs(2)))
                    .await
                {
                    Ok(Some(g)) => break g,
                    Err(Error::QuorumNotReached { .. }) if tries < 100 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => panic!("acquisition {i}: {other:?}"),
                }
            };
            assert!(g.token() > last, "acquisition {i}: token {} after {last}", g.token());
            last = g.token();
            g.unlock().await.unwrap();
        }
        if let Some(p) = paused {
            servers[p].resume();
        }
        assert!(faults >= 40);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_need_the_write_back() {
    // Counters that diverged (a master missed acquisitions while stopped):
    // the highest counter of a majority must reach the others before the
    // token is handed out, or a later majority without that master could
    // hand out a lower token.
    bounded(Duration::from_secs(30), async {
        let servers = masters(3);
        let c = quorum(&servers, Duration::from_millis(100)).await;
        let lock = c.lock("diverged").unwrap();
        let token_key = "lockwarden:{diverged}:token";
        // Existing counters (a new one starts at the server's clock).
        servers[0].cmd(&["SET", token_key, "5"]);
        servers[1].cmd(&["SET", token_key, "5"]);
        servers[2].cmd(&["SET", token_key, "100"]);
        let g = lock
            .try_lock(Duration::from_secs(1), Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(g.token(), 101, "the highest counter wins");
        g.unlock().await.unwrap();
        // Every granting master now has it (a majority at least: a master
        // slow to answer is left out of the hold, not waited for), so any
        // later majority goes on from there.
        let at_101 = servers
            .iter()
            .filter(|s| s.cmd(&["GET", token_key]).as_str() == Some("101"))
            .count();
        assert!(at_101 >= 2, "the token reached {at_101} of 3 masters");
        servers[2].pause();
        let g = lock
            .try_lock(Duration::from_secs(1), Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        servers[2].resume();
        assert_eq!(g.token(), 102);
        g.unlock().await.unwrap();
    })
    .await
}

/// A hold the watchdog lost on a majority but that is left on a minority
/// master, re-entered there by the same task's next acquisition: the new
/// hold must not carry the lost one's token (a fencing resource could not
/// tell the two apart), even when the other masters' counters are far
/// behind it. The acquisition waits for a fresh take instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_hold_never_carries_the_token_of_a_lost_hold_left_on_a_minority() {
    bounded(Duration::from_secs(30), async {
        let servers = masters(3);
        let c = quorum(&servers, Duration::from_millis(100)).await;
        let lock = c.lock("stale").unwrap();
        let token_key = "lockwarden:{stale}:token";
        let other = |s: &RedisServer, token: &str| {
            s.cmd(&["HSET", "stale", "other:1", "1", ":kind", "reentrant", ":token", token]);
            s.cmd(&["PEXPIRE", "stale", "60000"]);
        };
        servers[0].cmd(&["SET", token_key, "100"]);
        servers[1].cmd(&["SET", token_key, "100"]);
        servers[2].cmd(&["SET", token_key, "5"]);
        // Master 2 is another owner's: the hold is on masters 0 and 1.
        other(&servers[2], "5");
        let g = lock.lock().await.unwrap();
        assert_eq!(g.token(), 101);
        // Master 0 loses it (evicted) and master 2 frees: the watchdog finds
        // the hold on master 1 alone, and says it is lost.
        servers[0].cmd(&["DEL", "stale"]);
        servers[2].cmd(&["DEL", "stale"]);
        tokio::time::timeout(Duration::from_secs(5), g.lost())
            .await
            .expect("the loss is seen");
        // Master 0 is another owner's now: the next majority is master 1 (the
        // lost hold's level, token 101) and master 2 (its counter at 5).
        other(&servers[0], "102");
        let g2 = lock
            .try_lock(Duration::from_secs(10), Duration::from_secs(5))
            .await
            .unwrap()
            .expect("acquired once the lost hold's level ended");
        assert!(
            g2.token() > 101,
            "the new hold's token {} is the lost hold's",
            g2.token()
        );
        g2.unlock().await.unwrap();
        drop(g);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_are_checked_when_the_client_is_built() {
    bounded(Duration::from_secs(30), async {
        let servers = masters(2);
        let same = format!("redis://localhost:{}", servers[0].port);
        // The same server under two names would count twice.
        let e = Client::builder_for_masters([servers[0].url(), same, servers[1].url()])
            .build()
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::Config(m) if m.contains("same server")), "{e}");
        // Even and empty lists, unparsable URLs.
        let e = Client::builder_for_masters(urls(&servers)).build().await.unwrap_err();
        assert!(matches!(&e, Error::Config(m) if m.contains("odd")), "{e}");
        let e = Client::builder_for_masters(Vec::<String>::new())
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        let e = Client::builder_for_masters([servers[0].url(), "redis//nope".into(), servers[1].url()])
            .build()
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::Config(m) if m.contains("nope")), "{e}");
        // One URL through the quorum builder is the single-master client.
        let one = Client::builder_for_masters([servers[0].url()]).build().await.unwrap();
        one.lock("single")
            .unwrap()
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_masters_down_is_a_clear_error_within_the_node_timeout_plus_the_wait() {
    bounded(Duration::from_secs(30), async {
        let mut servers = masters(3);
        let node_timeout = Duration::from_millis(200);
        let c = quorum(&servers, node_timeout).await;
        let lock = c.lock("down").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();
        for s in &mut servers {
            s.stop();
        }
        let wait = Duration::from_millis(300);
        let t = Instant::now();
        let e = lock.try_lock(wait, Lease::Watchdog).await.unwrap_err();
        let took = t.elapsed();
        assert!(
            matches!(
                e,
                Error::QuorumNotReached {
                    needed: 2,
                    masters: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.is_retryable());
        assert!(
            took <= node_timeout + wait + Duration::from_millis(100),
            "took {took:?}"
        );
        // Building against dead masters fails too, within the connect
        // timeout (once retries are over: none here).
        let t = Instant::now();
        let e = Client::builder_for_masters(urls(&servers))
            .connect_timeout(Duration::from_millis(300))
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::QuorumNotReached { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_and_waiting_work_over_a_quorum() {
    bounded(Duration::from_secs(30), async {
        let servers = masters(3);
        let c = quorum(&servers, Duration::from_millis(200)).await;
        let other = quorum(&servers, Duration::from_millis(200)).await;
        let lock = c.lock("nested").unwrap();
        let a = lock.lock().await.unwrap();
        let b = lock.lock().await.unwrap();
        assert_eq!((a.token(), b.depth()), (b.token(), 2));
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        let at_two = servers
            .iter()
            .filter(|s| s.cmd(&["HGET", "nested", a.owner().field()]).as_str() == Some("2"))
            .count();
        assert!(at_two >= 2, "depth 2 on {at_two} of 3 masters");
        // A waiter on the other client wakes on the unlock message, long
        // before the watchdog lease (1 s, renewed) would end.
        let waiter_lock = other.lock("nested").unwrap();
        let waiter = tokio::spawn(async move {
            let g = waiter_lock.lock().await.unwrap();
            let at = Instant::now();
            g.unlock().await.unwrap();
            at
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!waiter.is_finished(), "the watchdog kept the lock");
        b.unlock().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        let released = Instant::now();
        a.unlock().await.unwrap();
        let woke = waiter.await.unwrap();
        assert!(
            woke - released < Duration::from_millis(300),
            "woke after {:?}",
            woke - released
        );
        assert!(!lock.is_locked().await.unwrap());
        let gone = eventually(Duration::from_secs(2), || {
            servers.iter().all(|s| s.pubsub_channels().is_empty())
        })
        .await;
        assert!(gone, "subscriptions left");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_with_different_orders_on_each_master_all_get_the_lock() {
    bounded(Duration::from_secs(60), async {
        let servers = masters(3);
        let holder = quorum(&servers, Duration::from_millis(200)).await;
        let guard = holder.fair_lock("fifo").unwrap().lock().await.unwrap();
        let in_use = Arc::new(AtomicBool::new(false));
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let c = quorum(&servers, Duration::from_millis(200)).await;
            let in_use = in_use.clone();
            waiters.push(tokio::spawn(async move {
                let g = c.fair_lock("fifo").unwrap().lock().await.unwrap();
                assert!(!in_use.swap(true, Ordering::SeqCst), "two holders");
                tokio::time::sleep(Duration::from_millis(20)).await;
                in_use.store(false, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Rotate the queues so each master has another waiter at its head.
        let queue = "lockwarden:{fifo}:queue";
        for (i, s) in servers.iter().enumerate() {
            assert_eq!(s.cmd(&["LLEN", queue]).as_int(), Some(3));
            for _ in 0..i {
                s.cmd(&["LMOVE", queue, queue, "LEFT", "RIGHT"]);
            }
        }
        let heads: Vec<String> = servers
            .iter()
            .map(|s| s.cmd(&["LINDEX", queue, "0"]).as_str().unwrap().to_string())
            .collect();
        assert!(heads[0] != heads[1] && heads[1] != heads[2] && heads[0] != heads[2]);
        guard.unlock().await.unwrap();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(20), w)
                .await
                .expect("a waiter never got the lock (deadlock)")
                .unwrap();
        }
        for s in &servers {
            common::assert_no_queues(s).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_does_not_hold_up_waiters() {
    bounded(Duration::from_secs(30), async {
        let servers = masters(3);
        // A long per-master timeout: any wait for the stopped master shows.
        let client = || {
            Client::builder_for_masters(urls(&servers))
                .command_timeout(Duration::from_secs(2))
                .watchdog_lease(Duration::from_secs(10))
                .build()
        };
        let (a, b) = (client().await.unwrap(), client().await.unwrap());
        servers[2].pause();
        let holder = a.lock("slowsub").unwrap().lock().await.unwrap();
        // try_lock keeps to its wait though the stopped master never
        // confirms the subscription.
        let lock = b.lock("slowsub").unwrap();
        let t = Instant::now();
        let got = lock
            .try_lock(Duration::from_millis(300), Lease::Watchdog)
            .await
            .unwrap();
        let took = t.elapsed();
        assert!(got.is_none());
        assert!(took < Duration::from_millis(450), "try_lock(300 ms) took {took:?}");
        // A waiter is woken by the unlock message of the masters that run,
        // long before the holder's 10 s lease. (It may cost one per-master
        // timeout, rarely: woken by one running master's message, its
        // attempt can reach the other before the holder's release does,
        // and then the stopped master decides; a clean-clone run on a
        // loaded machine saw 2.01 s once.)
        let waiter = tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            (Instant::now(), g)
        });
        let subscribed = || {
            servers[..2]
                .iter()
                .all(|s| s.pubsub_channels().iter().any(|c| c.contains("slowsub")))
        };
        assert!(eventually(Duration::from_secs(1), subscribed).await);
        // Past the waiter's first attempts, so it sleeps on the message.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = Instant::now();
        holder.unlock().await.unwrap();
        let (at, g) = waiter.await.unwrap();
        assert!(
            at - t0 < Duration::from_millis(2500),
            "woken {:?} after the unlock",
            at - t0
        );
        g.unlock().await.unwrap();
        servers[2].resume();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_master_that_comes_up_later_never_counts_twice() {
    bounded(Duration::from_secs(40), async {
        let mut servers = masters(4);
        // Masters 3 and 4 are one server under two names, down at build.
        servers[3].stop();
        let p = servers[3].port;
        let c = Client::builder_for_masters([
            servers[0].url(),
            servers[1].url(),
            servers[2].url(),
            format!("redis://127.0.0.1:{p}"),
            format!("redis://localhost:{p}"),
        ])
        .command_timeout(Duration::from_millis(100))
        .build()
        .await
        .expect("three of five masters are up");
        servers[3].restart();
        let lock = c.lock("dup").unwrap();
        let try_once = || async { matches!(lock.try_lock(Duration::ZERO, Duration::from_secs(1)).await, Ok(Some(_))) };
        // With master 1 stopped, a grant needs the late server: it counts.
        servers[1].pause();
        let mut counted = false;
        let until = Instant::now() + Duration::from_secs(5);
        while !counted && Instant::now() < until {
            counted = try_once().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(counted, "the server that came up late never counted");
        // With master 2 stopped too, only 0 and the late server run: two
        // servers of five listed. Counted twice they would make a majority.
        servers[2].pause();
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            assert!(!try_once().await, "a grant from two servers out of five");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        servers[1].resume();
        servers[2].resume();
    })
    .await
}

/// An unlock that returns `Ok` has released the lock on every master that
/// granted it and answers, not only on a majority: here master 2 is held
/// by someone else (it answers "not held" at once), master 3 is slow to
/// answer the release, and master 1 answers at once; a majority is known
/// before master 3 has applied the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unlock_returns_after_every_granting_master_released() {
    bounded(Duration::from_secs(60), async {
        let servers = masters(3);
        let c = quorum(&servers, Duration::from_millis(500)).await;
        servers[1].cmd(&["HSET", "slow", "someone:1", "1", ":kind", "reentrant"]);
        servers[1].cmd(&["PEXPIRE", "slow", "60000"]);
        let lock = c.lock("slow").unwrap();
        for round in 0..5 {
            let g = lock
                .try_lock(Duration::from_millis(500), Duration::from_secs(5))
                .await
                .unwrap()
                .expect("two of three masters grant");
            assert_eq!(servers[0].cmd(&["EXISTS", "slow"]).as_int(), Some(1));
            assert_eq!(servers[2].cmd(&["EXISTS", "slow"]).as_int(), Some(1));
            // Master 3 holds every script call (it may write) for 150 ms
            // from now; reads, such as the checks below, are answered.
            servers[2].cmd(&["CLIENT", "PAUSE", "150", "WRITE"]);
            g.unlock().await.unwrap();
            for (i, s) in [(1, &servers[0]), (3, &servers[2])] {
                assert_eq!(
                    s.cmd(&["EXISTS", "slow"]).as_int(),
                    Some(0),
                    "round {round}: unlock returned Ok while master {i} still held the lock"
                );
            }
            assert_eq!(servers[1].owners("slow").len(), 1, "the other holder is untouched");
        }
    })
    .await
}
