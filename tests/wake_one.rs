//! An unlock of the reentrant lock wakes one waiting client, not every
//! client with a wait, and that one wake-up is never lost on the way: a
//! client that cannot use it passes it on, and a client that is gone is
//! skipped.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::Lease;
use parking_lot::Mutex;

const LONG: Duration = Duration::from_secs(30);

/// How many clients stand in the waiters list of the lock `name`.
fn listed(server: &RedisServer, name: &str) -> i64 {
    server
        .cmd(&["LLEN", &format!("lockwarden:{{{name}}}:waiters")])
        .as_int()
        .unwrap_or(-1)
}

/// Every acquire attempt of the reentrant lock reads the lock's PTTL once
/// (`lua/acquire.lua`), and no other script of it does.
fn attempts(server: &RedisServer) -> u64 {
    server.command_calls("pttl")
}

/// A task that waits for the lock `name` with `c`, unlocks it at once and
/// returns when it got it.
fn waiter(c: &lockwarden::Client, name: &str) -> tokio::task::JoinHandle<Instant> {
    let lock = c.lock(name).unwrap();
    tokio::spawn(async move {
        let g = lock.lock().await.unwrap();
        let at = Instant::now();
        g.unlock().await.unwrap();
        at
    })
}

/// The waiter got the lock soon after the unlock at `unlocked`, not at its
/// lease bound (30 s).
async fn woken_soon(waiter: tokio::task::JoinHandle<Instant>, unlocked: Instant) {
    woken_within(waiter, unlocked, Duration::from_secs(2)).await
}

/// The waiter got the lock less than `limit` after `unlocked`, not at its
/// lease bound (30 s).
async fn woken_within(waiter: tokio::task::JoinHandle<Instant>, unlocked: Instant, limit: Duration) {
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiting client was never woken")
        .unwrap();
    assert!(
        got - unlocked < limit,
        "woken {:?} after the unlock, not at its lease bound",
        got - unlocked
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_unlock_wakes_one_client_and_every_wait_gets_its_turn() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("one").unwrap().lock().await.unwrap();
        // Three clients; the first has two waits, the others one each.
        let clients = [
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
            client(&server.url(), LONG).await,
        ];
        let order = Arc::new(Mutex::new(Vec::new()));
        let wait = |i: usize| {
            let (c, order) = (clients[i].clone(), order.clone());
            tokio::spawn(async move {
                let g = c.lock("one").unwrap().lock().await.unwrap();
                order.lock().push(i);
                g.unlock().await.unwrap();
            })
        };
        let mut tasks = Vec::new();
        for i in 0..3 {
            tasks.push(wait(i));
            // Each client stands in the list in the order its wait was
            // refused.
            assert!(
                eventually(Duration::from_secs(5), || listed(&server, "one") == i as i64 + 1).await,
                "{} clients listed",
                i + 1
            );
        }
        // A second wait of the first client: its channel is subscribed, so
        // its first attempt listens, and its refusal leaves the list as it
        // is (the client is in it).
        let before = attempts(&server);
        tasks.push(wait(0));
        assert!(eventually(Duration::from_secs(5), || attempts(&server) > before).await);
        assert_eq!(listed(&server, "one"), 3);
        let before = attempts(&server);
        held.unlock().await.unwrap();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("a wait was stranded until its lease bound")
                .unwrap();
        }
        // Four waits, four holds, and not one attempt more: every unlock
        // told one client. The first client, with two waits on the lock,
        // was woken and one of its waits took the lock (twice); the others,
        // one wait each, were handed the lock by the unlock, no attempt.
        assert_eq!(attempts(&server) - before, 2, "acquire attempts after the first unlock");
        // The first client was put back behind the others when its first
        // wait took the lock with the second still asleep.
        assert_eq!(*order.lock(), vec![0, 1, 2, 0]);
        assert_eq!(server.cmd(&["EXISTS", "lockwarden:{one}:waiters"]).as_int(), Some(0));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_for_a_client_whose_wait_gave_up_is_passed_on() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("pass").unwrap().lock().await.unwrap();
        let (a, b) = (client(&server.url(), LONG).await, client(&server.url(), LONG).await);
        let quitter = tokio::spawn(async move {
            let got = a
                .lock("pass")
                .unwrap()
                .try_lock(Duration::from_millis(500), Lease::Watchdog)
                .await
                .unwrap();
            assert!(got.is_none(), "the lock stayed held");
            a
        });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "pass") == 1).await);
        let stayer = waiter(&b, "pass");
        assert!(eventually(Duration::from_secs(5), || listed(&server, "pass") == 2).await);
        // The client that gave up is first in the list, and its channel
        // still lingers: the unlock's one wake-up goes to it.
        let _a = quitter.await.unwrap();
        let unlocked = Instant::now();
        held.unlock().await.unwrap();
        woken_soon(stayer, unlocked).await;
    })
    .await
}

/// Entry point of the child process of the next test: waits for the lock
/// named in the environment and never gets it. Run by the test binary
/// itself; returns at once in a normal test run.
#[tokio::test]
async fn child_waiter_entry_point() {
    let Ok(url) = std::env::var("LOCKWARDEN_TEST_CHILD_URL") else {
        return;
    };
    let c = lockwarden::Client::connect(&url).await.unwrap();
    let _g = c.lock("gone").unwrap().lock().await.unwrap();
    std::future::pending::<()>().await;
}

/// The lock "gone" held by a client of this process, and a child process
/// (`child_waiter_entry_point`) first in line for it.
async fn held_with_a_child_in_line(server: &RedisServer) -> (lockwarden::LockGuard, std::process::Child) {
    let holder = client(&server.url(), LONG).await;
    let held = holder.lock("gone").unwrap().lock().await.unwrap();
    let child = child_test("child_waiter_entry_point", &server.url());
    assert!(
        eventually(Duration::from_secs(20), || listed(server, "gone") == 1).await,
        "child listed"
    );
    (held, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_is_gone_is_skipped() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let (held, mut child) = held_with_a_child_in_line(&server).await;
        let b = client(&server.url(), LONG).await;
        let live = waiter(&b, "gone");
        assert!(eventually(Duration::from_secs(5), || listed(&server, "gone") == 2).await);
        child.kill().unwrap();
        child.wait().unwrap();
        // The server has seen the child's connections close: its wake
        // channel has no subscriber left.
        let mine = format!("lockwarden:{{gone}}:wake:{}", b.id());
        assert!(
            eventually(Duration::from_secs(5), || server
                .pubsub_channels()
                .into_iter()
                .filter(|c| c.starts_with("lockwarden:{gone}:wake:"))
                .eq([mine.clone()]))
            .await,
            "only the live client's wake channel is left"
        );
        let unlocked = Instant::now();
        held.unlock().await.unwrap();
        woken_soon(live, unlocked).await;
        assert_eq!(server.cmd(&["EXISTS", "lockwarden:{gone}:waiters"]).as_int(), Some(0));
    })
    .await
}

/// Sends `signal` (`STOP`, `CONT`) to the process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_behind_a_woken_client_that_cannot_act_take_over() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let (held, mut child) = held_with_a_child_in_line(&server).await;
        // At the default patience: second in line, it looks again on its
        // own every 2 s.
        let b = lockwarden::Client::builder(&server.url())
            .watchdog_lease(LONG)
            .build()
            .await
            .unwrap();
        let behind = waiter(&b, "gone");
        assert!(eventually(Duration::from_secs(5), || listed(&server, "gone") == 2).await);
        let first = server.cmd(&["LINDEX", "lockwarden:{gone}:waiters", "0"]);
        assert_ne!(first.as_str(), Some(b.id()), "the child is first in line");
        // The child stops, its connections open: the server still counts it
        // as listening, and the unlock hands the lock to it, with a first
        // lease of its waiter timeout (5 s, the default).
        signal(child.id(), "STOP");
        let unlocked = Instant::now();
        held.unlock().await.unwrap();
        assert_eq!(server.owners("gone").len(), 1, "handed to the stopped child");
        let pttl = server.cmd(&["PTTL", "gone"]).as_int().unwrap();
        assert!((1..=5000).contains(&pttl), "the grant's first lease: {pttl} ms");
        // The grant's lease ends, and the client second in line when it
        // last looked takes the lock at its next look (every 2 s).
        woken_within(behind, unlocked, Duration::from_secs(8)).await;
        assert_eq!(
            listed(&server, "gone"),
            0,
            "the child was popped, then the other client"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_has_the_hold_wake_the_clients_behind_it() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("behind").unwrap().lock().await.unwrap();
        // Kept open all along: only the dropped wait may act for it.
        let (a, b) = (client(&server.url(), LONG).await, client(&server.url(), LONG).await);
        let lock = a.lock("behind").unwrap();
        let dropped = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "behind") == 1).await);
        let stayer = waiter(&b, "behind");
        assert!(eventually(Duration::from_secs(5), || listed(&server, "behind") == 2).await);
        // A hold taken by a first attempt (one that did not listen) while
        // clients sleep is not marked: its unlock wakes nobody until a
        // listening wait is refused. The mark is taken off by hand here, as
        // if such a hold stood; the dropped wait, which may have taken a
        // wake-up with it, must put the mark back.
        server.cmd(&["HDEL", "behind", ":wait"]);
        dropped.abort();
        assert!(dropped.await.unwrap_err().is_cancelled());
        assert!(
            eventually(Duration::from_secs(5), || server
                .cmd(&["HEXISTS", "behind", ":wait"])
                .as_int()
                == Some(1))
            .await,
            "the hold is marked again"
        );
        let unlocked = Instant::now();
        held.unlock().await.unwrap();
        woken_soon(stayer, unlocked).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_client_that_loses_the_race_is_woken_next() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("race").unwrap().lock().await.unwrap();
        let (a, b) = (client(&server.url(), LONG).await, client(&server.url(), LONG).await);
        let mut tasks = Vec::new();
        for (i, c) in [a.clone(), b.clone()].into_iter().enumerate() {
            tasks.push(tokio::spawn(async move {
                let g = c.lock("race").unwrap().lock().await.unwrap();
                g.unlock().await.unwrap();
            }));
            assert!(eventually(Duration::from_secs(5), || listed(&server, "race") == i as i64 + 1).await);
        }
        let list = "lockwarden:{race}:waiters";
        // What an unlock does, while another owner got the lock before the
        // woken client could: pop the first client and tell it.
        assert_eq!(server.cmd(&["LPOP", list]).as_str(), Some(a.id()));
        let before = attempts(&server);
        server.cmd(&["PUBLISH", &format!("lockwarden:{{race}}:wake:{}", a.id()), "0"]);
        // Refused, the woken client goes back to the front: it is next.
        assert!(eventually(Duration::from_secs(5), || attempts(&server) > before).await);
        assert!(eventually(Duration::from_secs(5), || listed(&server, "race") == 2).await);
        let front = server.cmd(&["LINDEX", list, "0"]);
        assert_eq!(front.as_str(), Some(a.id()), "the woken client is first again");
        held.unlock().await.unwrap();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("a wait was stranded")
                .unwrap();
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_passes_on_a_wake_up_it_may_have_had() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("close").unwrap().lock().await.unwrap();
        // A waits, is woken and takes the lock: its wake channel stays
        // subscribed a moment, then is remembered as recently left (a
        // late wake-up on it is passed on).
        let a = client(&server.url(), LONG).await;
        let a_wait = waiter(&a, "close");
        assert!(eventually(Duration::from_secs(5), || listed(&server, "close") == 1).await);
        held.unlock().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), a_wait)
            .await
            .expect("A woken")
            .unwrap();
        // C waits behind a hold that then ends without an unlock (its key
        // deleted, as an expiry would): nobody wakes C, which sleeps to the
        // 10 s lease it saw.
        let held = holder
            .lock("close")
            .unwrap()
            .try_lock(Duration::ZERO, Duration::from_secs(10))
            .await
            .unwrap()
            .expect("free");
        let c = client(&server.url(), LONG).await;
        let c_wait = waiter(&c, "close");
        assert!(eventually(Duration::from_secs(5), || listed(&server, "close") == 1).await);
        assert_eq!(server.cmd(&["DEL", "close"]).as_int(), Some(1));
        // Its release finds no hold, and wakes nobody.
        drop(held);
        // A closes: it may have had a wake-up its relay had not passed on
        // yet, so it passes one on, and C is woken.
        let closed = Instant::now();
        drop(a);
        woken_soon(c_wait, closed).await;
    })
    .await
}

/// What an unlock of the lock `name` does when clients wait (the library's
/// own `wake_next`, `lua/shared_wake.lua`), but with the wake channels'
/// prefix `prefix`: the hold is deleted and the first listed client is
/// handed the lock if it asked, told on `prefix` + its id. `then_gone`: the
/// hold handed over is deleted too, at once (as its lease running out
/// would).
fn unlock_and_hand_over(server: &RedisServer, name: &str, prefix: &str, then_gone: bool) -> Reply {
    let base = format!("lockwarden:{{{name}}}");
    let (waiters, asks, token) = (
        format!("{base}:waiters"),
        format!("{base}:asks"),
        format!("{base}:token"),
    );
    let script = concat!(
        include_str!("../lua/shared.lua"),
        include_str!("../lua/shared_wake.lua"),
        "redis.call('DEL', KEYS[1]) local r = wake_next(2, ARGV[1], 'PUBLISH', '0', reentrant_grant(1, 3, 4, 2)) \
         if ARGV[2] == '1' then redis.call('DEL', KEYS[1]) end return r and 1 or 0"
    );
    let gone = if then_gone { "1" } else { "0" };
    server.cmd(&["EVAL", script, "4", name, &waiters, &asks, &token, prefix, gone])
}

/// A lock `name` held by a made-up owner for 30 s (a hold the tests end by
/// hand, see [`unlock_and_hand_over`]).
fn hold_as(server: &RedisServer, name: &str) {
    server.cmd(&["HSET", name, "someone:1", "1", ":kind", "reentrant"]);
    server.cmd(&["PEXPIRE", name, "30000"]);
}

/// A connection subscribed to `channel`, so a PUBLISH there counts one
/// listener: a message that reaches no wait of the library.
fn decoy(server: &RedisServer, channel: &str) -> Resp {
    let mut r = server.resp();
    r.cmd(&["SUBSCRIBE", channel]);
    r
}

/// The waiter's client waits with `patience` between its own looks, and a
/// waiter timeout (a grant's first lease) of `waiter_timeout`.
async fn waiting_client(url: &str, patience: Duration, waiter_timeout: Duration) -> lockwarden::Client {
    lockwarden::Client::builder(url)
        .watchdog_lease(LONG)
        .wake_patience(patience)
        .fair_waiter_timeout(waiter_timeout)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_hands_the_lock_to_a_lone_wait_and_its_own_lease_follows() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("handed").unwrap().lock().await.unwrap();
        // Grants' first lease 1.5 s; extended to the waiter's own lease a
        // third of the way in.
        let c = waiting_client(&server.url(), NO_PATIENCE, Duration::from_millis(1500)).await;
        let lock = c.lock("handed").unwrap();
        let waiter = tokio::spawn(async move {
            lock.try_lock(Duration::from_secs(20), Duration::from_secs(30))
                .await
                .unwrap()
                .expect("handed the lock")
        });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "handed") == 1).await);
        let ask = server.cmd(&["HGET", "lockwarden:{handed}:asks", c.id()]);
        let ask = ask.as_str().expect("the lone wait left an ask").to_string();
        assert!(ask.starts_with("1500 lockwarden:{handed}:req:"), "{ask}");
        let before = attempts(&server);
        held.unlock().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        // Handed over by the unlock: the waiter made no attempt.
        assert_eq!(attempts(&server), before, "the waiter attempted after the unlock");
        assert_eq!(g.depth(), 1);
        let token: u64 = server
            .cmd(&["GET", "lockwarden:{handed}:token"])
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(g.token(), token);
        assert_eq!(
            server.owners("handed"),
            [(g.owner().field().to_string(), "1".to_string())]
        );
        assert_eq!(server.cmd(&["EXISTS", "lockwarden:{handed}:asks"]).as_int(), Some(0));
        // The grant's first lease, then the waiter's own 30 s.
        assert!(
            eventually(Duration::from_secs(3), || server
                .cmd(&["PTTL", "handed"])
                .as_int()
                .unwrap()
                > 20_000)
            .await,
            "the grant's hold got the waiter's own lease"
        );
        tokio::time::sleep(Duration::from_millis(1600)).await;
        assert!(!g.is_lost(), "the handed-over hold was lost");
        assert!(g.validity() > Duration::from_secs(20), "validity {:?}", g.validity());
        g.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "handed"]).as_int(), Some(0));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_message_is_lost_is_claimed_by_the_next_look() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        hold_as(&server, "lost");
        let c = waiting_client(&server.url(), Duration::from_millis(500), Duration::from_secs(5)).await;
        let lock = c.lock("lost").unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await.unwrap() });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "lost") == 1).await);
        let _decoy = decoy(&server, &format!("elsewhere:{}", c.id()));
        let handed = Instant::now();
        assert_eq!(
            unlock_and_hand_over(&server, "lost", "elsewhere:", false).as_int(),
            Some(1)
        );
        assert_eq!(server.owners("lost").len(), 1, "handed over");
        let pttl = server.cmd(&["PTTL", "lost"]).as_int().unwrap();
        assert!((1..=5000).contains(&pttl), "the grant's first lease: {pttl} ms");
        // No message reaches the waiter: its next look (within 0.5 s)
        // finds the hold as its own.
        let g = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        eprintln!("claimed {:?} after the grant", handed.elapsed());
        assert_eq!(g.depth(), 1);
        let token: u64 = server
            .cmd(&["GET", "lockwarden:{lost}:token"])
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(g.token(), token);
        let pttl = server.cmd(&["PTTL", "lost"]).as_int().unwrap();
        assert!(pttl > 20_000, "the waiter's own lease is set: {pttl} ms");
        g.unlock().await.unwrap();
        assert_eq!(
            server.cmd(&["EXISTS", "lost"]).as_int(),
            Some(0),
            "one level, one unlock"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_after_an_unheard_grant_gives_the_lock_back() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        hold_as(&server, "dropped");
        let c = waiting_client(&server.url(), NO_PATIENCE, Duration::from_secs(30)).await;
        let lock = c.lock("dropped").unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "dropped") == 1).await);
        let _decoy = decoy(&server, &format!("elsewhere:{}", c.id()));
        assert_eq!(
            unlock_and_hand_over(&server, "dropped", "elsewhere:", false).as_int(),
            Some(1)
        );
        assert_eq!(server.owners("dropped").len(), 1, "handed over");
        let pttl = server.cmd(&["PTTL", "dropped"]).as_int().unwrap();
        assert!(pttl > 20_000, "the grant's lease runs {pttl} ms more");
        waiter.abort();
        assert!(
            eventually(Duration::from_secs(2), || server.cmd(&["EXISTS", "dropped"]).as_int()
                == Some(0))
            .await,
            "the dropped wait gave the grant back"
        );
        assert_eq!(server.cmd(&["EXISTS", "lockwarden:{dropped}:asks"]).as_int(), Some(0));
        let other = client(&server.url(), LONG).await;
        let g = other
            .lock("dropped")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("free at once");
        g.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_lease_ran_out_before_its_claim_is_not_taken() {
    bounded(Duration::from_secs(60), async {
        // A waiter stopped past its grant's first lease comes back to a
        // lock another client holds: nothing of the grant may count.
        let server = RedisServer::start();
        hold_as(&server, "expired");
        let c = waiting_client(&server.url(), Duration::from_millis(300), Duration::from_secs(5)).await;
        let lock = c.lock("expired").unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await.unwrap() });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "expired") == 1).await);
        let _decoy = decoy(&server, &format!("elsewhere:{}", c.id()));
        // Handed over unheard, and gone at once (as its lease running out
        // would), before the waiter's next look.
        let r = unlock_and_hand_over(&server, "expired", "elsewhere:", true);
        assert_eq!(r.as_int(), Some(1));
        let other = client(&server.url(), LONG).await;
        let held = other
            .lock("expired")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("free once the grant is gone");
        // The waiter looks at least twice while the other holds the lock.
        let before = attempts(&server);
        assert!(
            eventually(Duration::from_secs(5), || waiter.is_finished()
                || attempts(&server) >= before + 2)
            .await
        );
        assert!(!waiter.is_finished(), "the waiter took a lock another client holds");
        let released = Instant::now();
        held.unlock().await.unwrap();
        woken_soon(
            tokio::spawn(async move {
                let g = waiter.await.unwrap();
                let at = Instant::now();
                g.unlock().await.unwrap();
                at
            }),
            released,
        )
        .await;
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

/// One play of the test above; `None` when the waiter's own look took the
/// grant before it lapsed, or the lock once it had (a loaded machine).
async fn late_grant_message() -> Option<()> {
    // An unlock hands the lock to the waiting client, whose message is
    // held up on the way (its subscriber connection lags). The grant's
    // first lease runs out, another client takes the lock, and the
    // waiter's next look is refused; then the message arrives. It is older
    // than that look, and must not make the waiter a second holder.
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let holder = client(&server.url(), LONG).await;
    let held = holder.lock("late").unwrap().lock().await.unwrap();
    // Looks every 2 s; grants' first lease 400 ms (its lease): the grant
    // lapses long before the waiter's next look, which then finds the lock
    // taken by another.
    let c = waiting_client(&proxy.url(), Duration::from_secs(2), Duration::from_secs(5)).await;
    let lock = c.lock("late").unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock
            .try_lock(Duration::from_secs(20), Duration::from_millis(400))
            .await
            .unwrap()
            .expect("handed the lock in the end");
        (Instant::now(), g)
    });
    assert!(eventually(Duration::from_secs(5), || listed(&server, "late") == 1).await);
    // Right after one of the waiter's looks (the next is 2 s away), the
    // unlock hands it the lock.
    let before = attempts(&server);
    assert!(eventually(Duration::from_secs(3), || attempts(&server) > before).await);
    proxy.hold_messages();
    held.unlock().await.unwrap();
    assert_eq!(listed(&server, "late"), 0, "handed over");
    assert!(
        eventually(Duration::from_secs(2), || server.cmd(&["EXISTS", "late"]).as_int()
            == Some(0))
        .await,
        "the grant's first lease ran out"
    );
    if waiter.is_finished() {
        return None; // a look came within the grant's lease and took it
    }
    let other = client(&server.url(), LONG).await;
    let again = other
        .lock("late")
        .unwrap()
        .try_lock(Duration::ZERO, LONG)
        .await
        .unwrap()?; // else a look came between the lapse and this
                    // The waiter's next look is refused (its client is listed again); the
                    // old message comes right after.
    assert!(eventually(Duration::from_secs(3), || listed(&server, "late") == 1).await);
    proxy.pass_messages();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took the late message for the lock while another held it"
    );
    let released = Instant::now();
    again.unlock().await.unwrap();
    let (got, g) = waiter.await.unwrap();
    assert!(got >= released);
    g.unlock().await.unwrap();
    Some(())
}

/// A grant's message that comes later than a third of the grant's first
/// lease after the waiter's last attempt is not claimed from the message:
/// claimed, the hold would count as at risk (below half that lease)
/// before its extension could land (held up here with the waiter's
/// commands). The waiter's next attempt takes the grant instead, with its
/// own lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_message_a_third_of_its_lease_late_is_taken_by_an_attempt_not_claimed() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let holder = client(&server.url(), LONG).await;
        let held = holder.lock("third").unwrap().lock().await.unwrap();
        // No look of its own within the test; a grant's first lease of 3 s.
        let c = waiting_client(&proxy.url(), Duration::from_secs(20), Duration::from_secs(3)).await;
        let lock = c.lock("third").unwrap();
        let waiter = tokio::spawn(async move {
            lock.try_lock(Duration::from_secs(30), LONG)
                .await
                .unwrap()
                .expect("handed the lock")
        });
        assert!(eventually(Duration::from_secs(5), || listed(&server, "third") == 1).await);
        let asked = Instant::now();
        proxy.hold_messages();
        held.unlock().await.unwrap();
        assert_eq!(listed(&server, "third"), 0, "handed over");
        // 1.2 s after the waiter's attempt: past a third of the grant's
        // 3 s, short of half.
        tokio::time::sleep_until((asked + Duration::from_millis(1200)).into()).await;
        proxy.hold_commands();
        proxy.pass_messages();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            !waiter.is_finished(),
            "claimed from the message with its extension held up: at risk at once"
        );
        proxy.pass_commands();
        let g = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("its attempt took the grant")
            .unwrap();
        assert!(!g.is_at_risk(), "its own lease");
        assert!(g.validity() > Duration::from_secs(10), "{:?}", g.validity());
        g.unlock().await.unwrap();
    })
    .await
}
