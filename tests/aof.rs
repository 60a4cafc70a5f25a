//! Grants confirmed on disk (`ClientBuilder::min_aof_fsynced`, `WAITAOF`):
//! a write that is not in the append-only files asked for gives nothing.
//! Runs on a server with `WAITAOF` (Redis 7.2 or later, or Valkey; see
//! `waitaof_server_bin`).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Error, RedisErrorKind};

const LONG: Duration = Duration::from_secs(30);
const FSYNC_TIMEOUT: Duration = Duration::from_millis(200);

fn not_persisted(e: &Error) -> bool {
    matches!(
        e,
        Error::Redis {
            kind: RedisErrorKind::NotPersisted,
            ..
        }
    )
}

/// A server with `WAITAOF`, its append-only file fsynced as `fsync` says
/// (`always`, `everysec`, `no`).
fn aof_server(fsync: &str, extra: &[&str]) -> RedisServer {
    let bin = waitaof_server_bin();
    let mut args = vec!["--appendonly", "yes", "--appendfsync", fsync];
    args.extend_from_slice(extra);
    RedisServer::start_bin(Some(&bin), &args)
}

/// A master and one replica, both writing append-only files fsynced on
/// every write, the link up.
fn master_with_replica() -> (RedisServer, RedisServer) {
    let bin = waitaof_server_bin();
    RedisServer::start_master_with_replica(Some(&bin), &["--appendonly", "yes", "--appendfsync", "always"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_count_once_the_masters_own_file_has_them() {
    bounded(Duration::from_secs(60), async {
        let synced = aof_server("always", &[]);
        let c = Client::builder(&synced.url())
            .min_aof_fsynced(true, 0, FSYNC_TIMEOUT)
            .build()
            .await
            .unwrap();
        let before = synced.command_calls("waitaof");
        let g = c.lock("durable").unwrap().lock().await.unwrap();
        assert!(synced.command_calls("waitaof") > before, "the grant was confirmed");
        g.unlock().await.unwrap();

        // `appendfsync no`: the server never fsyncs, so its own copy is
        // never confirmed and nothing is handed out.
        let unsynced = aof_server("no", &[]);
        let c = Client::builder(&unsynced.url())
            .min_aof_fsynced(true, 0, FSYNC_TIMEOUT)
            .build()
            .await
            .unwrap();
        let lock = c.lock("durable").unwrap();
        let t = Instant::now();
        let e = lock.try_lock(Duration::from_millis(600), LONG).await.unwrap_err();
        assert!(not_persisted(&e), "{e}");
        assert!(e.is_retryable());
        assert!(e.to_string().contains("master's append-only file"), "{e}");
        assert!(t.elapsed() < Duration::from_millis(600) + FSYNC_TIMEOUT * 3);
        assert_eq!(unsynced.cmd(&["EXISTS", "durable"]).as_int(), Some(0), "given back");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_replica_is_stopped_grants_nothing() {
    bounded(Duration::from_secs(60), async {
        let (master, replica) = master_with_replica();
        let c = Client::builder(&master.url())
            .min_aof_fsynced(true, 1, FSYNC_TIMEOUT)
            .command_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let lock = c.lock("replicated").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();

        replica.pause();
        let e = lock.try_lock(Duration::from_millis(800), LONG).await.unwrap_err();
        assert!(not_persisted(&e), "{e}");
        assert!(e.to_string().contains("0 of 1 replicas"), "{e}");
        assert_eq!(master.cmd(&["EXISTS", "replicated"]).as_int(), Some(0), "given back");

        replica.resume();
        assert!(eventually(Duration::from_secs(10), || replica.replica_link_up()).await);
        let g = lock.try_lock(Duration::from_secs(5), LONG).await.unwrap().unwrap();
        g.unlock().await.unwrap();
    })
    .await
}

/// Renewals the replica does not fsync do not count: the hold goes at risk,
/// and a renewal confirmed again clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpersisted_renewals_put_the_hold_at_risk() {
    bounded(Duration::from_secs(60), async {
        let (master, replica) = master_with_replica();
        // Most of the command timeout (500 ms) for the replica's fsync: right
        // after a build, with the disk writing out the build's files, one
        // `appendfsync always` write can take longer than FSYNC_TIMEOUT.
        let builder = Client::builder(&master.url()).min_aof_fsynced(false, 1, Duration::from_millis(450));
        renewals_go_at_risk_while_paused(builder, &replica, "fsync").await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_settings_are_checked_when_the_client_is_built() {
    bounded(Duration::from_secs(30), async {
        let synced = aof_server("always", &[]);
        for (local, replicas, timeout) in [(false, 0, FSYNC_TIMEOUT), (true, 0, Duration::from_secs(5))] {
            let e = Client::builder(&synced.url())
                .min_aof_fsynced(local, replicas, timeout)
                .build()
                .await
                .unwrap_err();
            assert!(matches!(e, Error::Config(_)), "{e}");
        }

        // The master's own copy needs an append-only file.
        let no_aof = RedisServer::start_bin(Some(&waitaof_server_bin()), &[]);
        let e = Client::builder(&no_aof.url())
            .min_aof_fsynced(true, 0, FSYNC_TIMEOUT)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::Config(m) if m.contains("appendonly off")), "{e}");
        // Replicas' copies do not.
        Client::builder(&no_aof.url())
            .min_aof_fsynced(false, 1, FSYNC_TIMEOUT)
            .build()
            .await
            .unwrap();

        // The usual server of the tests: refused if it predates WAITAOF.
        let usual = RedisServer::start_with(&["--appendonly", "yes"]);
        let has_waitaof =
            !matches!(usual.cmd(&["WAITAOF", "0", "0", "1"]), Reply::Err(e) if e.contains("unknown command"));
        let built = Client::builder(&usual.url())
            .min_aof_fsynced(true, 0, FSYNC_TIMEOUT)
            .build()
            .await;
        match built {
            Ok(_) => assert!(has_waitaof, "built against a server without WAITAOF"),
            Err(e) => {
                assert!(!has_waitaof, "{e}");
                assert!(matches!(&e, Error::Config(m) if m.contains("7.2")), "{e}");
            }
        }
    })
    .await
}

#[test]
fn the_command_takes_aof_confirmations() {
    let (master, replica) = master_with_replica();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .env_remove("LOCKWARDEN_REDIS")
            .args([
                "--redis",
                &master.url(),
                "--aof-local",
                "--aof-replicas",
                "1",
                "--replica-timeout",
                "200ms",
            ])
            .args(["run", "cli-durable", "--wait", "1s", "--", "true"])
            .output()
            .unwrap()
    };
    let o = run();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    replica.pause();
    let o = run();
    assert_eq!(o.status.code(), Some(69), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("WAITAOF"));
    replica.resume();
}
