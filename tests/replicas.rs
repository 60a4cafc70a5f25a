//! Grants confirmed by replicas (`ClientBuilder::min_replicas_acked`): with
//! the replica stopped, nothing is handed out that a failover would lose.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Error, RedisErrorKind};

const LONG: Duration = Duration::from_secs(30);
const ACK_TIMEOUT: Duration = Duration::from_millis(200);

fn not_replicated(e: &Error) -> bool {
    matches!(
        e,
        Error::Redis {
            kind: RedisErrorKind::NotReplicated,
            ..
        }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_master_whose_replica_is_stopped_grants_nothing() {
    bounded(Duration::from_secs(60), async {
        let (master, replica) = RedisServer::start_master_with_replica(None, &[]);
        let sentinel = RedisSentinel::start(&master);
        let c = Client::builder(&sentinel.url())
            .min_replicas_acked(1, ACK_TIMEOUT)
            .command_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let lock = c.lock("replicated").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();

        // Without the setting a stopped replica changes nothing (the
        // control); with it the acquisition is refused, within the wait.
        replica.pause();
        let plain = Client::builder(&sentinel.url()).build().await.unwrap();
        plain
            .lock("unchecked")
            .unwrap()
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
        let t = Instant::now();
        let e = lock.try_lock(Duration::from_millis(800), LONG).await.unwrap_err();
        let took = t.elapsed();
        assert!(not_replicated(&e), "{e}");
        assert!(e.is_retryable());
        assert!(took < Duration::from_millis(800) + ACK_TIMEOUT * 3, "took {took:?}");
        assert_eq!(master.cmd(&["EXISTS", "replicated"]).as_int(), Some(0), "given back");
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(not_replicated(&e), "{e}");

        replica.resume();
        assert!(eventually(Duration::from_secs(10), || replica.replica_link_up()).await);
        let g = lock.try_lock(Duration::from_secs(5), LONG).await.unwrap().unwrap();
        g.unlock().await.unwrap();
    })
    .await
}

/// Renewals the replica does not acknowledge do not count: the hold goes at
/// risk, and a renewal confirmed again clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_renewals_put_the_hold_at_risk() {
    bounded(Duration::from_secs(60), async {
        let (master, replica) = RedisServer::start_master_with_replica(None, &[]);
        let builder = Client::builder(&master.url()).min_replicas_acked(1, ACK_TIMEOUT);
        renewals_go_at_risk_while_paused(builder, &replica, "acknowledge").await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_primary_whose_replica_is_stopped_grants_nothing() {
    bounded(Duration::from_secs(90), async {
        let cluster = RedisCluster::start_with_replicas(3, true);
        let c = Client::builder(&cluster.url())
            .key_prefix("app:")
            .min_replicas_acked(1, ACK_TIMEOUT)
            .command_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let lock = c.lock("slot").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();
        let owner = cluster.node_for("app:slot").port;
        let i = cluster.nodes.iter().position(|n| n.port == owner).unwrap();
        let replica = &cluster.nodes[3 + i];
        replica.pause();
        let e = lock.try_lock(Duration::from_millis(500), LONG).await.unwrap_err();
        assert!(not_replicated(&e), "{e}");
        assert_eq!(
            cluster.nodes[i].cmd(&["EXISTS", "app:slot"]).as_int(),
            Some(0),
            "given back"
        );
        replica.resume();
        let g = lock.try_lock(Duration::from_secs(5), LONG).await.unwrap().unwrap();
        g.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledgement_settings_are_checked() {
    let server = RedisServer::start();
    for (n, timeout) in [(0, ACK_TIMEOUT), (1, Duration::from_secs(5))] {
        let e = Client::builder(&server.url())
            .min_replicas_acked(n, timeout)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
    }
}

#[test]
fn the_command_takes_min_replicas() {
    let (master, replica) = RedisServer::start_master_with_replica(None, &[]);
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .env_remove("LOCKWARDEN_REDIS")
            .args([
                "--redis",
                &master.url(),
                "--min-replicas",
                "1",
                "--replica-timeout",
                "200ms",
            ])
            .args(["run", "cli-replicated", "--wait", "1s", "--", "true"])
            .output()
            .unwrap()
    };
    assert_eq!(run().status.code(), Some(0));
    replica.pause();
    let o = run();
    assert_eq!(o.status.code(), Some(69), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("replicas acknowledged"));
    replica.resume();
}
