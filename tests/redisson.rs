//! lockwarden beside a real Redisson client: node-redisson (pinned in
//! tests/redisson/package-lock.json, installed by scripts/redis-env.sh),
//! a port of Redisson's `RLock` that sends Redisson's scripts and listens on
//! its channel. Driven through tests/redisson/client.js.
//!
//! With `redisson_compatible(true)` the two exclude each other and wake
//! each other's waiters; without it lockwarden refuses a name node-redisson
//! holds and never writes into it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lockwarden::{Client, Error, Lease};

const BOUND: Duration = Duration::from_secs(90);

/// How late a wake-up may come and still be one: far below the 30 s lease
/// a waiter would otherwise sleep out (node-redisson's, and lockwarden's
/// bound by the holder's lease), far above a message's delivery.
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

/// The directory whose `node_modules` holds node-redisson:
/// `LOCKWARDEN_NODE_REDISSON` (set by scripts/test.sh), else installed
/// here the same way.
fn node_modules() -> String {
    if let Ok(dir) = std::env::var("LOCKWARDEN_NODE_REDISSON") {
        return format!("{dir}/node_modules");
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". {root}/scripts/redis-env.sh && ensure_node_redisson >&2 && echo \"$LOCKWARDEN_NODE_REDISSON\""
        ))
        .output()
        .expect("run scripts/redis-env.sh");
    assert!(
        out.status.success(),
        "installing node-redisson failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("{}/node_modules", String::from_utf8_lossy(&out.stdout).trim())
}

/// The wall clock in ms, as node's `Date.now()` reads it.
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// One node-redisson client process.
struct Node {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Node {
    fn start(server: &RedisServer) -> Node {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redisson/client.js");
        let mut child = Command::new("node")
            .arg(script)
            .arg(server.url().rsplit(':').next().unwrap())
            .env("NODE_PATH", node_modules())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start node");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut node = Node { child, stdin, lines };
        node.expect("ready", Duration::from_secs(20));
        node
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("write to node");
    }

    /// The next line, which must start with `what`; its time (ms).
    fn expect(&mut self, what: &str, within: Duration) -> (String, u64) {
        let line = self
            .lines
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("node said nothing within {within:?} (waiting for {what:?})"));
        assert!(line.starts_with(what), "node said {line:?}, not {what:?}");
        let at = line.rsplit(' ').next().unwrap().parse().unwrap_or(0);
        (line, at)
    }

    /// Nothing said for `quiet`.
    fn silent(&mut self, quiet: Duration) -> bool {
        match self.lines.recv_timeout(quiet) {
            Ok(line) => panic!("node said {line:?} while it should wait"),
            Err(_) => true,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn compatible(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(&server.url())
        .redisson_compatible(true)
        .watchdog_lease(watchdog)
        .wake_patience(NO_PATIENCE)
        .build()
        .await
        .unwrap()
}

/// Exclusion both ways, and each side's unlock wakes the other side's
/// waiter by message (not at the end of a lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusion_and_wake_ups_cross_both_ways() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let mut node = Node::start(&server);

        // node-redisson holds; lockwarden is kept out, then woken.
        node.send("lock x");
        node.expect("locked x", Duration::from_secs(10));
        let lock = c.lock("x").unwrap();
        assert!(lock.try_lock(Duration::ZERO, Lease::Watchdog).await.unwrap().is_none());
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move {
                let g = lock.lock().await.unwrap();
                (g, now_ms())
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiter.is_finished(),
            "lockwarden got the lock while node-redisson held it"
        );
        node.send("unlock x");
        let (_, unlocked_at) = node.expect("unlocked x", Duration::from_secs(10));
        let (guard, got_at) = waiter.await.unwrap();
        let woken = got_at.saturating_sub(unlocked_at);
        assert!(
            woken < WOKEN_WITHIN.as_millis() as u64,
            "lockwarden woke {woken} ms after node-redisson's unlock"
        );
        eprintln!("lockwarden woken {woken} ms after node-redisson's unlock");

        // lockwarden holds; node-redisson is kept out, then woken.
        node.send("trylock x 0");
        node.expect("trylock x false", Duration::from_secs(10));
        node.send("lock x");
        assert!(node.silent(Duration::from_millis(500)));
        let released_at = now_ms();
        guard.unlock().await.unwrap();
        let (_, locked_at) = node.expect("locked x", Duration::from_secs(20));
        let woken = locked_at.saturating_sub(released_at);
        assert!(
            woken < WOKEN_WITHIN.as_millis() as u64,
            "node-redisson woke {woken} ms after lockwarden's unlock"
        );
        eprintln!("node-redisson woken {woken} ms after lockwarden's unlock");
        assert!(lock.try_lock(Duration::ZERO, Lease::Watchdog).await.unwrap().is_none());
        node.send("unlock x");
        node.expect("unlocked x", Duration::from_secs(10));
        assert!(lock.try_lock(Duration::ZERO, Lease::Watchdog).await.unwrap().is_some());
    })
    .await
}

/// Each side re-enters its own hold (its own count in the one hash) and
/// the other stays out until the last level goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_side_reenters_its_own_hold_only() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let mut node = Node::start(&server);
        let lock = c.lock("r").unwrap();

        let outer = lock.lock().await.unwrap();
        let inner = lock.lock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        node.send("trylock r 0");
        node.expect("trylock r false", Duration::from_secs(10));
        inner.unlock().await.unwrap();
        node.send("trylock r 0");
        node.expect("trylock r false", Duration::from_secs(10));
        outer.unlock().await.unwrap();

        node.send("lock r");
        node.expect("locked r", Duration::from_secs(10));
        node.send("lock r");
        node.expect("locked r", Duration::from_secs(10));
        let status = lock.status().await.unwrap();
        assert_eq!(status.kind, Some(lockwarden::LockKind::Redisson), "{status:?}");
        assert_eq!(status.holders.len(), 1, "{status:?}");
        assert_eq!(status.holders[0].1, 2, "node-redisson's own count: {status:?}");
        assert!(lock.try_lock(Duration::ZERO, Lease::Watchdog).await.unwrap().is_none());
        assert_eq!(lock.hold_count().await.unwrap(), 0, "lockwarden holds nothing of it");
        node.send("unlock r");
        node.expect("unlocked r", Duration::from_secs(10));
        assert!(lock.try_lock(Duration::ZERO, Lease::Watchdog).await.unwrap().is_none());
        node.send("unlock r");
        node.expect("unlocked r", Duration::from_secs(10));
        let g = lock
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .expect("free");
        // Tokens come from Redisson's counter.
        let counter = server.cmd(&["GET", "redisson_lock_token:{r}"]).as_int();
        assert_eq!(counter, Some(g.token() as i64));
        g.unlock().await.unwrap();
    })
    .await
}

/// Renewals of one side never keep the other's hold alive: a lockwarden
/// hold renewed by its watchdog outlasts its lease while node-redisson
/// waits, and node-redisson's waiting writes nothing into it.
/// `force_unlock` and `status` see the other side's holder; a hold forced
/// away by the other side is reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_force_unlock_and_status_see_the_other_side() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(3)).await;
        let mut node = Node::start(&server);
        let lock = c.lock("f").unwrap();

        let g = lock.lock().await.unwrap();
        let fields = || {
            let mut f = server.cmd(&["HKEYS", "f"]).strings();
            f.sort();
            f
        };
        let before = fields();
        node.send("trylock f 4000");
        // Longer than the 3 s lease: the watchdog keeps it, node waits on.
        node.expect("trylock f false", Duration::from_secs(10));
        assert!(!g.is_lost());
        assert_eq!(fields(), before, "node-redisson's waiting wrote into the hold");

        // node-redisson forces lockwarden's hold away: the guard learns it.
        node.send("force f");
        node.expect("forced f true", Duration::from_secs(10));
        let lost = tokio::time::timeout(Duration::from_secs(10), g.lost()).await;
        assert!(
            lost.is_ok(),
            "a hold forced away by node-redisson was not reported lost"
        );
        assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));

        // node-redisson holds: status names it; lockwarden forces it away and
        // node-redisson's waiter is woken.
        node.send("lock f");
        let (line, _) = node.expect("locked f", Duration::from_secs(10));
        let status = lock.status().await.unwrap();
        assert_eq!(status.kind, Some(lockwarden::LockKind::Redisson), "{status:?}");
        assert!(status.is_held(), "{line}: {status:?}");
        let mut other = Node::start(&server);
        other.send("lock f");
        assert!(other.silent(Duration::from_millis(300)));
        let forced_at = now_ms();
        assert!(lock.force_unlock().await.unwrap());
        let (_, locked_at) = other.expect("locked f", Duration::from_secs(20));
        assert!(
            locked_at.saturating_sub(forced_at) < WOKEN_WITHIN.as_millis() as u64,
            "node-redisson's waiter was not woken by the forced unlock"
        );
        node.send("unlock f");
        node.expect("error f", Duration::from_secs(10));
    })
    .await
}

/// Without the setting, a name node-redisson holds is refused
/// (`HeldByRedisson`) and nothing is written into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_setting_a_redisson_hold_is_refused() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = Client::builder(&server.url()).build().await.unwrap();
        let mut node = Node::start(&server);
        node.send("lock d");
        node.expect("locked d", Duration::from_secs(10));
        let before = server.cmd(&["HGETALL", "d"]).strings();
        let lock = c.lock("d").unwrap();
        for wait in [Duration::ZERO, Duration::from_millis(300)] {
            match lock.try_lock(wait, Lease::Watchdog).await {
                Err(Error::HeldByRedisson { key, found }) => {
                    assert_eq!((key.as_str(), found.as_str()), ("d", "a Redisson lock"));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(server.cmd(&["HGETALL", "d"]).strings(), before);
        node.send("unlock d");
        node.expect("unlocked d", Duration::from_secs(10));
    })
    .await
}

/// `lockwarden run --redisson-compatible` waits for a name node-redisson
/// holds, is woken by its unlock, and holds the name in Redisson's layout
/// while its command runs (node-redisson is kept out).
#[test]
fn the_command_takes_redisson_compatible_locks() {
    let server = RedisServer::start();
    let mut node = Node::start(&server);
    node.send("lock job");
    node.expect("locked job", Duration::from_secs(10));
    let mut run = Command::new(env!("CARGO_BIN_EXE_lockwarden"))
        .env_remove("LOCKWARDEN_REDIS")
        .args([
            "run",
            "job",
            "--redisson-compatible",
            "--wait",
            "30s",
            "--redis",
            &server.url(),
        ])
        .args(["--", "sh", "-c", "sleep 1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        run.try_wait().unwrap().is_none(),
        "run went ahead while node-redisson held the name"
    );
    node.send("unlock job");
    let (_, unlocked_at) = node.expect("unlocked job", Duration::from_secs(10));
    // While the command runs, the name is held in Redisson's layout.
    let held = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        server.cmd(&["EXISTS", "job"]).as_int() == Some(1)
    });
    assert!(held, "run did not take the name after node-redisson's unlock");
    let taken_at = now_ms();
    assert!(
        taken_at.saturating_sub(unlocked_at) < WOKEN_WITHIN.as_millis() as u64,
        "run was not woken by node-redisson's unlock"
    );
    assert!(
        server.cmd(&["HGET", "job", ":kind"]).as_str().is_none(),
        "lockwarden's own layout"
    );
    node.send("trylock job 0");
    node.expect("trylock job false", Duration::from_secs(10));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = run.kill();
            panic!("run did not end within 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0));
    node.send("trylock job 0");
    node.expect("trylock job true", Duration::from_secs(10));
}

/// As Redisson's `RFencedLock`, every acquisition of a compatible lock
/// takes a token from `redisson_lock_token:{name}`, re-entries included;
/// the re-entered guard keeps its hold's token (which its release checks),
/// and the next hold's token is above every token handed out.
#[tokio::test]
async fn reentries_move_the_fenced_lock_counter_as_redisson_does() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = Client::builder(&server.url())
            .redisson_compatible(true)
            .build()
            .await
            .unwrap();
        let lock = c.lock("fenced").unwrap();
        let counter = || server.cmd(&["GET", "redisson_lock_token:{fenced}"]).as_int().unwrap() as u64;
        let outer = lock.lock().await.unwrap();
        assert_eq!(counter(), outer.token());
        let inner = lock.lock().await.unwrap();
        assert_eq!(inner.token(), outer.token(), "one token per hold");
        assert_eq!(
            counter(),
            outer.token() + 1,
            "the re-entry took a token, as RFencedLock's does"
        );
        let first = outer.token();
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
        let next = lock.lock().await.unwrap();
        assert_eq!(next.token(), first + 2);
        next.unlock().await.unwrap();
    })
    .await
}
