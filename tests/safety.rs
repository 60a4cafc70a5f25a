//! Safety under faults and bad input, on real servers: fencing tokens that
//! never go back, errors that name what happened, waits that ride out a
//! blip, quorum waiters that do not spin.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Error, RedisErrorKind};

const LONG: Duration = Duration::from_secs(30);

fn is_kind(e: &Error, want: RedisErrorKind) -> bool {
    matches!(e, Error::Redis { kind, .. } if *kind == want)
}

/// Takes and releases `name` `n` times; the tokens seen.
async fn tokens(lock: &lockwarden::Lock, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..n {
        let g = lock.lock().await.unwrap();
        out.push(g.token());
        g.unlock().await.unwrap();
    }
    out
}

// --- 1. Fencing tokens never go back --------------------------------------

async fn tokens_stay_above_a_lost_counter(kind: Kind) {
    bounded(Duration::from_secs(30), async {
        let mut server = RedisServer::start();
        let c = client(&server.url(), Duration::from_secs(1)).await;
        let lock = kind.of(&c, "fenced");
        let before = tokens(&lock, 3).await;
        assert!(before.windows(2).all(|w| w[1] > w[0]), "{before:?}");

        // Held while the data set is flushed: the holder loses it, and the
        // next holder's token is still above every earlier one.
        let held = lock.lock().await.unwrap();
        let flushed_token = held.token();
        server.flushall();
        assert!(bounded(Duration::from_secs(3), held.lost()).await == lockwarden::LossReason::Gone);
        let after_flush = tokens(&lock, 2).await;
        assert!(
            after_flush[0] > flushed_token,
            "token went back after FLUSHALL: {flushed_token} then {after_flush:?}"
        );

        // A restart without persistence loses the counter too.
        let last = *after_flush.last().unwrap();
        drop(held);
        server.restart();
        let mut after_restart = None;
        let until = Instant::now() + Duration::from_secs(10);
        while after_restart.is_none() && Instant::now() < until {
            match lock.try_lock(Duration::from_secs(1), Duration::from_secs(5)).await {
                Ok(Some(g)) => {
                    after_restart = Some(g.token());
                    g.unlock().await.unwrap();
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        let after_restart = after_restart.expect("the lock works after the restart");
        assert!(
            after_restart > last,
            "token went back after a restart: {last} then {after_restart}"
        );
    })
    .await
}

both_kinds!(tokens_stay_above_a_lost_counter);

// --- 2. Errors that name what happened -------------------------------------

async fn a_replica_refuses_with_read_only_not_a_wrong_type(kind: Kind) {
    bounded(Duration::from_secs(30), async {
        let primary = RedisServer::start();
        let port = primary.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let c = client(&replica.url(), LONG).await;
        let lock = kind.of(&c, "on-replica");
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(is_kind(&e, RedisErrorKind::ReadOnly), "{e}");
        assert!(e.is_retryable(), "{e}");
        assert!(primary.keys("*").is_empty(), "nothing written");
    })
    .await
}

async fn a_full_server_refuses_with_out_of_memory_and_nothing_changes(kind: Kind) {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
        let c = client(&server.url(), LONG).await;
        let lock = kind.of(&c, "full");
        // A second owner holds it, so the fair waiter's queue write is tried too.
        let other = client(&server.url(), LONG).await;
        let held = kind.of(&other, "held-full").lock().await.unwrap();
        let keys_before = {
            let mut k = server.keys("*");
            k.sort();
            k
        };
        server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(is_kind(&e, RedisErrorKind::OutOfMemory), "{e}");
        assert!(e.is_retryable());
        // Waiting behind the holder writes nothing for the reentrant lock
        // (its waiter's mark on the hold is refused, which only leaves it
        // to wake at the lease's end); the fair waiter's place in the
        // queue is refused, retried until the wait ends, and the last
        // refusal returned.
        let waiter = kind.of(&c, "held-full");
        let r = waiter.try_lock(Duration::from_millis(300), LONG).await;
        match kind {
            Kind::Reentrant => assert!(matches!(r, Ok(None)), "{r:?}"),
            Kind::Fair => assert!(matches!(&r, Err(e) if is_kind(e, RedisErrorKind::OutOfMemory)), "{r:?}"),
        }
        let mut keys_after = server.keys("*");
        keys_after.sort();
        assert_eq!(keys_before, keys_after, "nothing was written");
        server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
        lock.lock().await.unwrap().unlock().await.unwrap();
        held.unlock().await.unwrap();
    })
    .await
}

both_kinds!(
    a_replica_refuses_with_read_only_not_a_wrong_type,
    a_full_server_refuses_with_out_of_memory_and_nothing_changes
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_names_the_companion_key_that_has_it() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        // The fencing counter is a list.
        server.cmd(&["RPUSH", "lockwarden:{tok}:token", "x"]);
        for lock in [c.lock("tok").unwrap(), c.fair_lock("tok").unwrap()] {
            let e = lock.lock().await.unwrap_err();
            assert!(
                matches!(&e, Error::WrongType { key, found } if key == "lockwarden:{tok}:token" && found == "list"),
                "{e}"
            );
        }
        assert_eq!(server.cmd(&["LLEN", "lockwarden:{tok}:token"]).as_int(), Some(1));
        assert_eq!(server.cmd(&["EXISTS", "tok"]).as_int(), Some(0));

        // The fair queue is a string: a waiter behind a holder meets it.
        let holder = client(&server.url(), LONG).await;
        let held = holder.fair_lock("q").unwrap().lock().await.unwrap();
        server.cmd(&["SET", "lockwarden:{q}:queue", "precious"]);
        let e = c
            .fair_lock("q")
            .unwrap()
            .try_lock(Duration::from_millis(200), LONG)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::WrongType { key, found } if key == "lockwarden:{q}:queue" && found == "string"),
            "{e}"
        );
        assert_eq!(server.cmd(&["GET", "lockwarden:{q}:queue"]).as_str(), Some("precious"));
        held.unlock().await.unwrap();

        // The lock key itself still names the lock key.
        server.cmd(&["SET", "plain", "x"]);
        let e = c.lock("plain").unwrap().lock().await.unwrap_err();
        assert!(
            matches!(&e, Error::WrongType { key, found } if key == "plain" && found == "string"),
            "{e}"
        );
    })
    .await
}

/// A user who may touch the keys but no channel (Redis 7's default for new
/// ACL users): the client refuses to start, naming the missing permission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_rights_is_refused_at_connect() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let r = server.cmd(&["ACL", "SETUSER", "nochan", "on", ">pw", "~*", "resetchannels", "+@all"]);
        assert_eq!(r.as_str(), Some("OK"));
        let e = Client::connect(&format!("redis://nochan:pw@127.0.0.1:{}", server.port))
            .await
            .unwrap_err();
        assert!(is_kind(&e, RedisErrorKind::NoPermission), "{e}");
        assert!(
            e.to_string().contains("&lockwarden:*"),
            "names the missing permission: {e}"
        );
        assert!(!e.is_retryable());

        // With the lockwarden channels granted it works.
        server.cmd(&["ACL", "SETUSER", "nochan", "&lockwarden:*"]);
        let c = Client::connect(&format!("redis://nochan:pw@127.0.0.1:{}", server.port))
            .await
            .unwrap();
        c.lock("acl").unwrap().lock().await.unwrap().unlock().await.unwrap();
    })
    .await
}

/// Channel rights taken away while a lock is held: the release happens,
/// and is never reported as failed.
async fn a_release_whose_publish_is_refused_is_still_a_release(kind: Kind) {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        server.cmd(&["ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all"]);
        let c = client(&format!("redis://u:pw@127.0.0.1:{}", server.port), LONG).await;
        let lock = kind.of(&c, "revoked");
        // A waiter (another user's client) makes the release publish.
        let other = client(&server.url(), LONG).await;
        let queued = |server: &RedisServer| server.cmd(&["LLEN", "lockwarden:{revoked}:queue"]).as_int() == Some(1);
        for by_owner in [false, true] {
            let guard = lock.lock().await.unwrap();
            // Counted before the waiter starts: its first attempt may run
            // before this task is scheduled again.
            let calls = server.command_calls("evalsha");
            let waiter = kind.of(&other, "revoked");
            let waiting = tokio::spawn(async move {
                if let Ok(Some(g)) = waiter.try_lock(Duration::from_secs(3), LONG).await {
                    g.unlock().await.unwrap();
                }
            });
            assert!(
                eventually(Duration::from_secs(2), || server.command_calls("evalsha") > calls
                    && (kind == Kind::Reentrant || queued(&server)))
                .await
            );
            server.cmd(&["ACL", "SETUSER", "u", "resetchannels"]);
            if by_owner {
                lock.unlock().await.expect("the release by owner happened");
                drop(guard);
            } else {
                guard.unlock().await.expect("the release happened");
            }
            assert!(!lock.is_held_by_current_task().await.unwrap());
            waiting.abort();
            server.cmd(&["DEL", "revoked"]);
            server.cmd(&["ACL", "SETUSER", "u", "&*"]);
        }
    })
    .await
}

both_kinds!(a_release_whose_publish_is_refused_is_still_a_release);

// --- 5. Names inside the library's own namespace ---------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_inside_the_lockwarden_namespace_are_refused() {
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    for name in ["lockwarden:{x}:token", "lockwarden:#a{b}:queue", "lockwarden:x"] {
        assert!(matches!(c.lock(name), Err(Error::InvalidName { .. })), "{name}");
        assert!(matches!(c.fair_lock(name), Err(Error::InvalidName { .. })), "{name}");
    }
    // The lock `x` and its counter stay apart.
    let g = c.lock("x").unwrap().lock().await.unwrap();
    assert!(g.token() > 0);
    g.unlock().await.unwrap();
    let e = Client::builder(&server.url())
        .key_prefix("lockwarden:")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(server.keys("*").iter().all(|k| k.starts_with("lockwarden:{x}:")));
}

// --- Quorum: tokens, refusals, spinning, a usable client -------------------

fn masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// The issue's sequence: the lock is taken while masters 4 and 5 are held
/// by another owner, master 3 restarts empty and waits out its rejoin
/// delay, masters 1 and 2 stop. The next token is still the highest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_tokens_never_go_back_when_the_granting_masters_are_lost() {
    bounded(Duration::from_secs(60), async {
        let mut servers = masters(5);
        let c = Client::builder_for_masters(urls(&servers))
            .command_timeout(Duration::from_millis(200))
            .rejoin_delay(Duration::from_millis(600))
            .watchdog_lease(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        for s in &servers[3..] {
            s.cmd(&["HSET", "q", "someone:1", "1", ":kind", "reentrant"]);
            s.cmd(&["PEXPIRE", "q", "60000"]);
        }
        let lock = c.lock("q").unwrap();
        let before = tokens(&lock, 4).await;
        let highest = *before.iter().max().unwrap();
        servers[2].restart();
        servers[0].stop();
        servers[1].stop();
        for s in &servers[3..] {
            s.cmd(&["DEL", "q"]);
        }
        // Granted once master 3 counts again (masters 3, 4 and 5).
        let g = lock
            .try_lock(Duration::from_secs(10), Duration::from_secs(5))
            .await
            .unwrap()
            .expect("granted by masters 3, 4 and 5");
        assert!(g.token() > highest, "token went back: {before:?} then {}", g.token());
        g.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_never_count_and_the_quorum_error_says_why() {
    bounded(Duration::from_secs(30), async {
        let primary = RedisServer::start();
        let port = primary.port.to_string();
        let replicas: Vec<RedisServer> = (0..2)
            .map(|_| RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]))
            .collect();
        let free = RedisServer::start();
        let c = Client::builder_for_masters(vec![replicas[0].url(), replicas[1].url(), free.url()])
            .build()
            .await
            .unwrap();
        let e = c.lock("r").unwrap().try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(matches!(e, Error::QuorumNotReached { reached: 1, .. }), "{e}");
        assert!(e.to_string().contains("READONLY"), "{e}");
        assert!(e.is_retryable());
        assert!(free.keys("r").is_empty(), "the lone grant was given back");
    })
    .await
}

/// A holder took the lock while one of three masters was down; that master
/// came back empty. Each attempt of a waiter is granted there only (a
/// split) and given back; the give-back's unlock message must not wake the
/// waiter (or the other waiter) at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_waiter_facing_a_split_does_not_spin() {
    bounded(Duration::from_secs(60), async {
        let mut servers = masters(3);
        servers[2].stop();
        let holder = Client::builder_for_masters(urls(&servers))
            .command_timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap();
        let held = holder.lock("split").unwrap().lock().await.unwrap();
        servers[2].restart();
        let mut waiters = Vec::new();
        for _ in 0..2 {
            waiters.push(
                Client::builder_for_masters(urls(&servers))
                    .command_timeout(Duration::from_millis(200))
                    .build()
                    .await
                    .unwrap(),
            );
        }
        let calls = servers[2].command_calls("evalsha") + servers[2].command_calls("eval");
        let wait = Duration::from_secs(2);
        let tasks: Vec<_> = waiters
            .iter()
            .map(|w| {
                let lock = w.lock("split").unwrap();
                tokio::spawn(async move { lock.try_lock(wait, LONG).await })
            })
            .collect();
        for t in tasks {
            assert!(matches!(t.await.unwrap(), Ok(None)));
        }
        let used = servers[2].command_calls("evalsha") + servers[2].command_calls("eval") - calls;
        // Each attempt is an acquire and a give-back there: at most a few
        // dozen attempts per second per waiter.
        let attempts_per_s = used as f64 / 2.0 / 2.0 / wait.as_secs_f64();
        eprintln!("{used} script calls on the free master: {attempts_per_s:.1} attempts/s per waiter");
        assert!(attempts_per_s <= 30.0, "{attempts_per_s:.1} attempts/s per waiter");
        assert!(attempts_per_s >= 1.0, "the waiters kept trying");
        held.unlock().await.unwrap();
    })
    .await
}

/// Two of five masters stopped (SIGSTOP: they accept connections and never
/// answer): the client is built and takes a lock about one per-master
/// timeout after a majority answered (bounded at 4: a loaded machine took
/// 0.94 s once; the behaviour this guards against took 4.3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_client_is_usable_once_a_majority_answers() {
    bounded(Duration::from_secs(60), async {
        let servers = masters(5);
        servers[0].pause();
        servers[3].pause();
        let node_timeout = Duration::from_millis(250);
        let t = Instant::now();
        let c = Client::builder_for_masters(urls(&servers))
            .command_timeout(node_timeout)
            .build()
            .await
            .unwrap();
        let built = t.elapsed();
        let g = c.lock("usable").unwrap().lock().await.unwrap();
        let locked = t.elapsed();
        g.unlock().await.unwrap();
        eprintln!("built in {built:?}, locked after {locked:?}");
        assert!(locked < node_timeout * 4, "built in {built:?}, locked after {locked:?}");
        servers[0].resume();
        servers[3].resume();
    })
    .await
}

// --- 3. Waits that ride out a blip -----------------------------------------

async fn a_wait_rides_out_a_server_that_stops_answering(kind: Kind) {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = Client::builder(&server.url())
            .command_timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap();
        let lock = kind.of(&c, "blip");
        lock.lock().await.unwrap().unlock().await.unwrap();
        server.pause();
        let pid = server.pid();
        let resumer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        });
        let t = Instant::now();
        let g = lock
            .try_lock(Duration::from_secs(5), LONG)
            .await
            .expect("retried through the blip")
            .expect("acquired once the server answered");
        assert!(t.elapsed() >= Duration::from_millis(700), "{:?}", t.elapsed());
        g.unlock().await.unwrap();
        resumer.join().unwrap();

        // `lock()` too.
        server.pause();
        let resumer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        });
        lock.lock()
            .await
            .expect("retried through the blip")
            .unlock()
            .await
            .unwrap();
        resumer.join().unwrap();
    })
    .await
}

both_kinds!(a_wait_rides_out_a_server_that_stops_answering);

/// With nothing answering, a wait ends at its deadline (or, without one,
/// after the client's retry time) with the last error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_nothing_answering_ends_with_the_last_error_in_time() {
    bounded(Duration::from_secs(30), async {
        let mut server = RedisServer::start();
        let c = Client::builder(&server.url())
            .command_timeout(Duration::from_millis(200))
            .retry_transient_for(Duration::from_millis(1500))
            .build()
            .await
            .unwrap();
        let lock = c.lock("down").unwrap();
        server.stop();
        let t = Instant::now();
        let e = lock.try_lock(Duration::from_millis(1000), LONG).await.unwrap_err();
        let took = t.elapsed();
        assert!(e.is_retryable(), "{e}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_millis(1600),
            "try_lock gave up after {took:?}"
        );
        let t = Instant::now();
        let e = lock.lock().await.unwrap_err();
        let took = t.elapsed();
        assert!(e.is_retryable(), "{e}");
        assert!(
            took >= Duration::from_millis(1400) && took < Duration::from_millis(2200),
            "lock gave up after {took:?}"
        );
        // One attempt only without a wait.
        let t = Instant::now();
        assert!(lock.try_lock(Duration::ZERO, LONG).await.is_err());
        assert!(t.elapsed() < Duration::from_millis(500), "{:?}", t.elapsed());
    })
    .await
}

/// A wait whose first attempt is refused at once (a full server) and whose
/// pause runs into the deadline returns that refusal, not "not acquired".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_wait_that_only_met_refusals_returns_the_last_one() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
        let c = client(&server.url(), LONG).await;
        let lock = c.lock("short").unwrap();
        server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
        for wait in [
            Duration::from_millis(1),
            Duration::from_millis(30),
            Duration::from_millis(300),
        ] {
            let r = lock.try_lock(wait, LONG).await;
            assert!(
                matches!(&r, Err(e) if is_kind(e, RedisErrorKind::OutOfMemory)),
                "wait {wait:?}: {r:?}"
            );
        }
    })
    .await
}
