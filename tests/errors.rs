//! Every class of Redis refusal a user can meet, produced on a real server,
//! and what it becomes: its `Error` kind and whether a retry can help.
//! (READONLY, OOM, WRONGTYPE and channel NOPERM are in tests/safety.rs.)

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Error, RedisErrorKind};

const LONG: Duration = Duration::from_secs(30);

fn kind_of(e: &Error) -> Option<RedisErrorKind> {
    match e {
        Error::Redis { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// A client of an ACL user that may not run scripts (EVAL, EVALSHA).
async fn client_without_scripts(server: &RedisServer) -> Client {
    server.cmd(&[
        "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
    ]);
    Client::connect(&format!("redis://noeval:pw@127.0.0.1:{}", server.port))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noperm_on_a_command_is_no_permission() {
    let server = RedisServer::start();
    let c = client_without_scripts(&server).await;
    let e = c
        .lock("p")
        .unwrap()
        .try_lock(Duration::from_secs(1), LONG)
        .await
        .unwrap_err();
    assert_eq!(kind_of(&e), Some(RedisErrorKind::NoPermission), "{e}");
    assert!(!e.is_retryable(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noauth_is_an_auth_error_at_build() {
    let server = RedisServer::start_with(&["--requirepass", "secret"]);
    let e = Client::connect(&server.url()).await.unwrap_err();
    assert_eq!(kind_of(&e), Some(RedisErrorKind::Auth), "{e}");
    assert!(!e.is_retryable(), "{e}");
    let e = Client::connect(&format!("redis://:wrong@127.0.0.1:{}", server.port))
        .await
        .unwrap_err();
    assert_eq!(kind_of(&e), Some(RedisErrorKind::Auth), "{e}");
    Client::connect(&format!("redis://:secret@127.0.0.1:{}", server.port))
        .await
        .unwrap();
}

/// A script that loops: the server answers BUSY until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_retryable_and_a_wait_rides_it_out() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start_with(&["--busy-reply-threshold", "50"]);
        let c = client(&server.url(), LONG).await;
        let lock = c.lock("busy").unwrap();
        let port = server.port;
        let looping = std::thread::spawn(move || {
            let mut r = Resp::connect(port).unwrap();
            r.cmd(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"])
        });
        // BUSY once the script has run past the threshold.
        let busy = || matches!(Resp::connect(port).unwrap().cmd(&["EVAL", "return 1", "0"]), Reply::Err(e) if e.starts_with("BUSY"));
        assert!(eventually(Duration::from_secs(5), busy).await, "the server became busy");
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert_eq!(kind_of(&e), Some(RedisErrorKind::Busy), "{e}");
        assert!(e.is_retryable());
        // A wait rides it out: the script is killed 300 ms later.
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            Resp::connect(port).unwrap().cmd(&["SCRIPT", "KILL"])
        });
        let g = lock.try_lock(Duration::from_secs(5), LONG).await.unwrap().unwrap();
        g.unlock().await.unwrap();
        killer.join().unwrap();
        looping.join().unwrap();
    })
    .await
}

/// A server still loading its data set answers LOADING: building a client
/// against it fails with `Busy` (retryable); a client built before the
/// restart gets retryable errors and rides them out in a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_is_busy_and_retryable() {
    bounded(Duration::from_secs(60), async {
        // A data set to load: 3,000 keys, saved.
        let mut first = RedisServer::start();
        for chunk in 0..30 {
            let mut args = vec!["MSET".to_string()];
            for i in 0..100 {
                args.push(format!("k{chunk}-{i}"));
                args.push("v".into());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            first.cmd(&args);
        }
        assert_eq!(first.cmd(&["SAVE"]).as_str(), Some("OK"));
        let dir = match first.cmd(&["CONFIG", "GET", "dir"]) {
            Reply::Array(v) => v[1].as_str().unwrap().to_string(),
            other => panic!("{other:?}"),
        };
        let c = Client::builder(&first.url())
            .command_timeout(Duration::from_millis(500))
            .build()
            .await
            .unwrap();
        let lock = c.lock("loading").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();

        // The same port, loading at 1 ms a key: about 3 s.
        let port = first.port;
        first.stop();
        let bin = std::env::var("LOCKWARDEN_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--dir", &dir, "--key-load-delay", "1000"])
            // Small, so the server answers (LOADING) while it loads.
            .args(["--loading-process-events-interval-bytes", "1024"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while Resp::connect(port).is_err() {
            assert!(Instant::now() < until, "the server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        let still_loading = || {
            let mut r = Resp::connect(port).unwrap();
            matches!(r.cmd(&["EVAL", "return 1", "0"]), Reply::Err(e) if e.starts_with("LOADING"))
        };
        assert!(still_loading(), "the server answers LOADING at first");
        let url = format!("redis://127.0.0.1:{port}");
        let e = Client::builder(&url)
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap_err();
        assert_eq!(kind_of(&e), Some(RedisErrorKind::Busy), "{e}");
        assert!(e.is_retryable());
        // Client::connect retries a passing refusal (within the default
        // retry_transient_for, 10 s): it connects once the load is over.
        let connecting = tokio::spawn({
            let url = url.clone();
            async move { Client::connect(&url).await }
        });
        // The client from before: fred's reconnect handshake meets LOADING,
        // so its calls fail as connection errors until the load is over.
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(still_loading(), "the refusal came while loading");
        // A wait rides it out.
        let g = lock.try_lock(Duration::from_secs(20), LONG).await.unwrap().unwrap();
        assert!(!still_loading());
        g.unlock().await.unwrap();
        let late = connecting.await.unwrap().expect("connect rode the load out");
        assert!(late
            .lock("m2")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .is_some());
        let _ = child.kill();
        let _ = child.wait();
    })
    .await
}

/// A replica whose master is gone, told not to serve stale data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masterdown_is_retryable() {
    bounded(Duration::from_secs(30), async {
        let mut primary = RedisServer::start();
        let port = primary.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port, "--replica-serve-stale-data", "no"]);
        assert!(
            eventually(Duration::from_secs(10), || replica
                .info_field("replication", "master_link_status")
                .as_deref()
                == Some("up"))
            .await
        );
        let c = client(&replica.url(), LONG).await;
        primary.stop();
        assert!(
            eventually(Duration::from_secs(10), || replica
                .info_field("replication", "master_link_status")
                .as_deref()
                == Some("down"))
            .await
        );
        let e = c.lock("m").unwrap().try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert_eq!(kind_of(&e), Some(RedisErrorKind::MasterDown), "{e}");
        assert!(e.is_retryable());
        // Building a client against it fails the same way (once its
        // retries are over: none here).
        let e = Client::builder(&replica.url())
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap_err();
        assert_eq!(kind_of(&e), Some(RedisErrorKind::MasterDown), "{e}");
    })
    .await
}

/// NOSCRIPT after the script cache was flushed never reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_after_a_flush_is_handled() {
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    let lock = c.lock("n").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    server.cmd(&["SCRIPT", "FLUSH"]);
    let evals = server.command_calls("eval");
    lock.lock().await.unwrap().unlock().await.unwrap();
    assert!(server.command_calls("eval") > evals, "the scripts were sent again");
}

// --- Cluster refusals ------------------------------------------------------

/// A client of `cluster` with key prefix `app:` and a short command timeout.
async fn cluster_client(cluster: &RedisCluster, timeout: Duration) -> Client {
    Client::builder(&cluster.url())
        .key_prefix("app:")
        .command_timeout(timeout)
        .build()
        .await
        .unwrap()
}

fn node_id(node: &RedisServer) -> String {
    node.cmd(&["CLUSTER", "MYID"]).as_str().unwrap().to_string()
}

fn slot_of(node: &RedisServer, key: &str) -> String {
    node.cmd(&["CLUSTER", "KEYSLOT", key]).as_int().unwrap().to_string()
}

/// A slot being migrated, with some of the lock's keys still at the source
/// and others not: TRYAGAIN.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tryagain_during_a_migration_is_retryable() {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let c = app_client(&cluster.url(), LONG).await;
        let lock = c.lock("moving").unwrap();
        let source = cluster.node_for("app:moving");
        let target = cluster.nodes.iter().find(|n| n.port != source.port).unwrap();
        let slot = slot_of(source, "app:moving");
        source.cmd(&["SET", "lockwarden:{app:moving}:token", "5"]);
        assert_eq!(
            target
                .cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &node_id(source)])
                .as_str(),
            Some("OK")
        );
        assert_eq!(
            source
                .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &node_id(target)])
                .as_str(),
            Some("OK")
        );
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert_eq!(kind_of(&e), Some(RedisErrorKind::Cluster), "{e}");
        assert!(e.is_retryable());
        assert!(e.to_string().contains("TRYAGAIN"), "{e}");
    })
    .await
}

/// A redirect that never settles (the source sends ASK to a node that
/// sends MOVED back): the call ends within the command timeout, retryable.
/// A slot left MIGRATING on its source without IMPORTING on the target is
/// an operator's mistake (`redis-cli --cluster reshard` sets IMPORTING
/// first), but it must not hang a lock call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redirect_loop_ends_in_time_and_is_retryable() {
    bounded(Duration::from_secs(60), async {
        let cluster = RedisCluster::start(3);
        let timeout = Duration::from_millis(500);
        let c = cluster_client(&cluster, timeout).await;
        let lock = c.lock("asked").unwrap();
        let source = cluster.node_for("app:asked");
        let target = cluster.nodes.iter().find(|n| n.port != source.port).unwrap();
        let slot = slot_of(source, "app:asked");
        // MIGRATING at the source only: with every key absent it answers
        // ASK; the target, not importing, answers MOVED back.
        assert_eq!(
            source
                .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &node_id(target)])
                .as_str(),
            Some("OK")
        );
        let t = Instant::now();
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(t.elapsed() < timeout * 3, "{:?}", t.elapsed());
        assert!(
            matches!(e, Error::Connection { .. } | Error::Timeout { .. })
                || kind_of(&e) == Some(RedisErrorKind::Cluster),
            "{e}"
        );
        assert!(e.is_retryable(), "{e}");
        assert_eq!(
            source.cmd(&["CLUSTER", "SETSLOT", &slot, "STABLE"]).as_str(),
            Some("OK")
        );
        // The slot made stable again serves a new client. (The old one
        // stays unusable: fred's router does not recover from the loop,
        // see the README's Cluster notes.)
        let fresh = Client::builder(&cluster.url())
            .key_prefix("app:")
            .command_timeout(timeout)
            .build()
            .await
            .unwrap();
        let g = fresh.lock("asked").unwrap().lock().await.unwrap();
        g.unlock().await.unwrap();
        drop(c);
    })
    .await
}

/// A primary down without a replica: the others answer CLUSTERDOWN. fred
/// takes that reply for a broken connection: it drops the connection and
/// re-sends after reconnecting, so the caller meets a timeout (or a
/// connection error) within the command timeout, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusterdown_is_retryable() {
    bounded(Duration::from_secs(60), async {
        let mut cluster = RedisCluster::start(3);
        let timeout = Duration::from_millis(500);
        let c = cluster_client(&cluster, timeout).await;
        let lock = c.lock("down").unwrap();
        let owner = cluster.node_for("app:down").port;
        let victim = cluster.nodes.iter().position(|n| n.port != owner).unwrap();
        cluster.nodes[victim].stop();
        let owner_node = cluster.nodes.iter().find(|n| n.port == owner).unwrap();
        assert!(
            eventually(Duration::from_secs(20), || owner_node
                .cmd(&["CLUSTER", "INFO"])
                .as_str()
                .unwrap_or("")
                .contains("cluster_state:fail"))
            .await,
            "the cluster noticed the failure"
        );
        let t = Instant::now();
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(t.elapsed() < timeout * 2, "{:?}", t.elapsed());
        assert!(e.is_retryable(), "{e}");
        assert!(
            kind_of(&e) == Some(RedisErrorKind::Cluster)
                || matches!(e, Error::Connection { .. } | Error::Timeout { .. }),
            "{e}"
        );
    })
    .await
}

/// No credential given in a URL shows in an error (`Display` or `Debug`)
/// or a builder's `Debug`: a wrong password, an unreachable server, a
/// Sentinel's password parameter, quorum masters, a URL that does not
/// parse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_show_in_errors_or_debug() {
    bounded(Duration::from_secs(60), async {
        const SECRET: &str = "s3cretPW";
        let server = RedisServer::start_with(&["--requirepass", "right-one"]);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let cases: Vec<(&str, lockwarden::ClientBuilder)> = vec![
            (
                "wrong password",
                Client::builder(&format!("redis://app:{SECRET}@127.0.0.1:{}", server.port)),
            ),
            (
                "unreachable",
                Client::builder(&format!("redis://:{SECRET}@127.0.0.1:{closed}")),
            ),
            (
                "sentinel",
                Client::builder(&format!(
                    "redis-sentinel://127.0.0.1:{closed}/0?sentinelServiceName=m&sentinelUsername=app&sentinelPassword={SECRET}"
                )),
            ),
            (
                "quorum",
                Client::builder_for_masters([
                    format!("redis://:{SECRET}@127.0.0.1:{}", server.port),
                    format!("redis://:{SECRET}@127.0.0.1:{closed}"),
                    format!("redis://:{SECRET}@127.0.0.1:{closed}"),
                ]),
            ),
            ("unparsable", Client::builder(&format!("redis://:{SECRET}@127.0.0.1:notaport"))),
            ("scheme", Client::builder(&format!("http://:{SECRET}@127.0.0.1:1"))),
            (
                "password with a slash and a question mark",
                Client::builder(&format!("redis://:a/b?{SECRET}@127.0.0.1:{closed}")),
            ),
        ];
        for (what, builder) in cases {
            let shown = format!("{builder:?}");
            assert!(!shown.contains(SECRET), "{what}: builder Debug {shown}");
            let e = builder
                .connect_timeout(Duration::from_millis(500))
                .retry_transient_for(Duration::ZERO)
                .build()
                .await
                .expect_err(what);
            for text in [e.to_string(), format!("{e:?}")] {
                assert!(!text.contains(SECRET), "{what}: {text}");
            }
        }
        assert_eq!(
            lockwarden::redact_url("redis://:a/b?pw@h:1/0?sentinelPassword=x@y&node=h:2"),
            "redis://***@y&node=h:2",
            "everything before the last @ is hidden"
        );
    })
    .await
}

/// Each error reads as one sentence naming what failed (the server, the
/// key) and, where there is one, the fix; never a `Debug` dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_what_failed_and_the_fix() {
    bounded(Duration::from_secs(60), async {
        let readable = |text: &str| {
            assert!(
                !text.contains('\n') && !text.contains("Os {") && !text.contains("kind:"),
                "{text}"
            );
        };
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = Client::builder(&format!("redis://127.0.0.1:{closed}"))
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap_err()
            .to_string();
        readable(&e);
        assert!(
            e.contains(&format!("127.0.0.1:{closed}")) && e.contains("Connection refused"),
            "{e}"
        );

        // A server that never answers: the message names it too.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        let e = Client::builder(&format!("redis://127.0.0.1:{silent_port}"))
            .connect_timeout(Duration::from_millis(300))
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap_err()
            .to_string();
        readable(&e);
        assert!(
            e.contains(&format!("127.0.0.1:{silent_port}")) && e.contains("check that the server is up"),
            "{e}"
        );

        let server = RedisServer::start();
        let c = client_without_scripts(&server).await;
        let e = c
            .lock("perm")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap_err()
            .to_string();
        readable(&e);
        assert!(e.contains("\"perm\"") && e.contains("give the ACL user"), "{e}");

        let c = Client::connect(&server.url()).await.unwrap();
        let held = c.lock("kinds").unwrap().lock().await.unwrap();
        let e = c
            .semaphore("kinds", 2)
            .unwrap()
            .try_acquire(Duration::ZERO, LONG)
            .await
            .unwrap_err()
            .to_string();
        readable(&e);
        assert!(e.contains("\"kinds\"") && e.contains("use one kind per name"), "{e}");
        held.unlock().await.unwrap();

        server.cmd(&["SET", "plain", "x"]);
        let e = c
            .lock("plain")
            .unwrap()
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap_err()
            .to_string();
        readable(&e);
        assert!(
            e.contains("\"plain\"") && e.contains("use a name no other program writes"),
            "{e}"
        );

        let g = c.lock("gone").unwrap().lock().await.unwrap();
        c.lock("gone").unwrap().force_unlock().await.unwrap();
        let e = g.unlock().await.unwrap_err().to_string();
        readable(&e);
        assert!(e.contains("\"gone\"") && e.contains("take it again"), "{e}");

        // A server that stops answering a lock call: named too.
        let slow = Client::builder(&server.url())
            .command_timeout(Duration::from_millis(300))
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap();
        server.pause();
        let e = slow.lock("stopped").unwrap().try_lock(Duration::ZERO, LONG).await;
        server.resume();
        let e = e.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        let e = e.to_string();
        readable(&e);
        assert!(e.contains(&format!("127.0.0.1:{}", server.port)), "{e}");
    })
    .await
}
