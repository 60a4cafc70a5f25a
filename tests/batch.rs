//! Calls of one client made together go out together: several lock calls
//! in one script call, each with its own reply, error and replay.
mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use futures::future::join_all;
use lockwarden::Error;

const LONG: Duration = Duration::from_secs(30);

/// A client whose scripts are cached and connection made, so the calls a
/// test counts are its own.
async fn warmed(url: &str) -> lockwarden::Client {
    let c = client(url, LONG).await;
    c.lock("warm").unwrap().lock().await.unwrap().unlock().await.unwrap();
    c
}

/// Unlocks every guard, and checks that no lock of theirs is left.
async fn unlock_all(server: &RedisServer, guards: Vec<lockwarden::LockGuard>) {
    let names: Vec<String> = guards.iter().map(|g| g.name().to_string()).collect();
    for g in guards {
        g.unlock().await.unwrap();
    }
    for n in &names {
        assert_eq!(server.cmd(&["EXISTS", n]).as_int(), Some(0), "{n} left held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_together_share_script_calls() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let c = warmed(&server.url()).await; // scripts cached
        let before = server.command_calls("evalsha");
        let (tasks, rounds) = (32usize, 20usize);
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let lock = c.lock(&format!("b{t}")).unwrap();
                tokio::spawn(async move {
                    let mut last = 0;
                    for _ in 0..rounds {
                        let g = lock.lock().await.unwrap();
                        assert!(g.token() > last, "tokens of one lock go up");
                        last = g.token();
                        g.unlock().await.unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        let calls = server.command_calls("evalsha") - before;
        let made = (2 * tasks * rounds) as u64;
        eprintln!("{made} lock calls went out in {calls} script calls");
        assert!(
            calls * 4 <= made * 3,
            "{made} calls made by 32 tasks at once took {calls} script calls"
        );
        for t in 0..tasks {
            assert_eq!(
                server.cmd(&["EXISTS", &format!("b{t}")]).as_int(),
                Some(0),
                "b{t} left held"
            );
        }
    })
    .await
}

#[tokio::test]
async fn a_refused_call_in_a_batch_fails_alone() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = warmed(&server.url()).await;
        server.cmd(&["SET", "wrong", "x"]);
        let mut names: Vec<String> = (0..7).map(|i| format!("ok{i}")).collect();
        names.push("wrong".to_string());
        let locks: Vec<_> = names.iter().map(|n| c.lock(n).unwrap()).collect();
        let before = server.command_calls("evalsha");
        // One thread: the eight calls are all made before the batch task
        // runs, so the first goes out alone and the other seven together.
        let results = join_all(locks.iter().map(|l| l.lock())).await;
        let calls = server.command_calls("evalsha") - before;
        assert_eq!(
            calls, 2,
            "8 lock calls made at once: one alone, then the rest in one script call"
        );
        let mut guards = Vec::new();
        for (name, r) in names.iter().zip(results) {
            if name == "wrong" {
                match r {
                    Err(Error::WrongType { key, found }) => {
                        assert_eq!(key, "wrong");
                        assert_eq!(found, "string");
                    }
                    other => panic!("the call on a string key: {other:?}"),
                }
            } else {
                let g = r.unwrap_or_else(|e| panic!("{name} failed beside a refused call: {e}"));
                assert_eq!(
                    server.cmd(&["HGET", name, g.owner().field()]).as_int(),
                    Some(1),
                    "{name} held once"
                );
                guards.push(g);
            }
        }
        assert_eq!(
            server.cmd(&["GET", "wrong"]).as_str(),
            Some("x"),
            "the string is untouched"
        );
        unlock_all(&server, guards).await;
    })
    .await
}

#[tokio::test]
async fn a_batch_whose_reply_is_lost_is_sent_again_and_enters_once() {
    bounded(Duration::from_secs(60), async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let c = client(&proxy.url(), LONG).await;
        c.lock("warm").unwrap().lock().await.unwrap().unlock().await.unwrap();
        let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
        let locks: Vec<_> = names.iter().map(|n| c.lock(n).unwrap()).collect();

        // The server stops: the first call goes out alone, the seven made
        // with it (on this one thread, before the batch task runs) queue
        // behind it and go out as one batch; both wait in the server's
        // socket.
        let evalsha_before = server.command_calls("evalsha");
        server.pause();
        let gets_before = {
            let from = proxy.forwarded.load(Ordering::SeqCst);
            let task = tokio::spawn(async move { join_all(locks.iter().map(|l| l.lock())).await });
            assert!(
                eventually(Duration::from_secs(5), || proxy.forwarded.load(Ordering::SeqCst) - from
                    > 1200)
                .await,
                "the calls reached the proxy"
            );
            // The first reply is swallowed and the connection reset, so
            // the batch's reply behind it is lost too: both go again.
            proxy.drop_next_reply();
            server.resume();
            task
        };
        let results = gets_before.await.unwrap();
        assert_eq!(proxy.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(
            server.command_calls("evalsha") - evalsha_before,
            4,
            "the lone call and the batch, each sent twice"
        );
        let gets = server.command_calls("get");
        assert!(gets >= 8, "every re-sent call read its record ({gets} GETs)");
        let mut guards = Vec::new();
        for (name, r) in names.iter().zip(results) {
            let g = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                server.cmd(&["HGET", name, g.owner().field()]).as_int(),
                Some(1),
                "{name} entered once, not once per send"
            );
            let token = server
                .cmd(&["HGET", name, ":token"])
                .as_str()
                .map(|t| t.parse::<u64>().unwrap());
            assert_eq!(token, Some(g.token()), "{name}: the guard's token is the hold's");
            guards.push(g);
        }
        unlock_all(&server, guards).await;
    })
    .await
}

#[tokio::test]
async fn a_queued_call_whose_caller_left_is_given_back_after_it_runs() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = warmed(&server.url()).await;
        let (a, d) = (c.lock("a").unwrap(), c.lock("d").unwrap());
        let mut first = Box::pin(a.lock());
        let mut queued = Box::pin(d.lock());
        // The first call goes out alone; the second queues behind it.
        assert!(futures::poll!(&mut first).is_pending());
        assert!(futures::poll!(&mut queued).is_pending());
        // Its caller leaves: the acquire still goes out in its batch, and
        // the give-back (the same request sent again, then released) is
        // queued behind it, as every call is while one waits. Had it run
        // first, the acquire would take the lock afterwards and hold it
        // for its whole lease.
        drop(queued);
        let held = first.await.unwrap();
        assert!(
            eventually(Duration::from_secs(5), || server
                .cmd(&["EXISTS", "lockwarden:{d}:token"])
                .as_int()
                == Some(1)
                && server.cmd(&["EXISTS", "d"]).as_int() == Some(0))
            .await,
            "the left call's acquire ran and was given back"
        );
        held.unlock().await.unwrap();
    })
    .await
}

#[tokio::test]
async fn a_batch_to_a_hung_server_fails_in_time_and_is_undone_once_it_answers() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let timeout = Duration::from_millis(300);
        let c = lockwarden::Client::builder(&server.url())
            .command_timeout(timeout)
            .build()
            .await
            .unwrap();
        c.lock("warm").unwrap().lock().await.unwrap().unlock().await.unwrap();
        let names: Vec<String> = (0..8).map(|i| format!("h{i}")).collect();
        let locks: Vec<_> = names.iter().map(|n| c.lock(n).unwrap()).collect();
        server.pause();
        // One alone and seven in a batch (one thread), none answered.
        let results = tokio::time::timeout(
            timeout * 10,
            join_all(locks.iter().map(|l| l.try_lock(Duration::ZERO, LONG))),
        )
        .await
        .expect("calls to a hung server end in errors, not a hang");
        for (name, r) in names.iter().zip(results) {
            let e = r.expect_err("nothing answered");
            assert!(e.is_outcome_unknown(), "{name}: {e}");
        }
        // The queued scripts now run and take the locks; each caller's
        // give-back re-sends its request and releases what it took.
        server.resume();
        for n in &names {
            assert!(
                eventually(Duration::from_secs(5), || server.cmd(&["EXISTS", n]).as_int()
                    == Some(0))
                .await,
                "{n}: an acquisition nobody received is held for its 30 s lease"
            );
        }
    })
    .await
}
