//! The early warning on a guard: at risk before lost, cleared by a renewal.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Lease};

/// Renewals stop getting through (the server is SIGSTOPped): the hold is at
/// risk before it is lost; once the server answers again a renewal clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_failing_put_the_hold_at_risk_and_a_renewal_clears_it() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let lease = Duration::from_secs(3);
        let c = Client::builder(&server.url())
            .watchdog_lease(lease)
            .command_timeout(Duration::from_millis(200))
            .build()
            .await
            .unwrap();
        let guard = c.lock("risky").unwrap().lock().await.unwrap();
        assert!(!guard.is_at_risk());
        // Healthy renewals keep it out of risk.
        assert!(
            tokio::time::timeout(lease, guard.at_risk()).await.is_err(),
            "at risk while renewals get through"
        );
        server.pause();
        let paused = Instant::now();
        let left = tokio::time::timeout(lease, guard.at_risk())
            .await
            .expect("at risk before the lease runs out");
        assert!(!guard.is_lost(), "at risk comes before lost");
        assert!(left < lease / 2 && left > Duration::ZERO, "{left:?} left");
        eprintln!("at risk {:?} after the pause, {left:?} left", paused.elapsed());
        server.resume();
        assert!(
            eventually(lease / 2, || !guard.is_at_risk()).await,
            "a confirmed renewal clears the risk"
        );
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    })
    .await
}

/// A fixed lease is at risk in its second half, and never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_is_at_risk_in_its_second_half() {
    bounded(Duration::from_secs(30), async {
        let server = RedisServer::start();
        let c = client(&server.url(), Duration::from_secs(30)).await;
        let lease = Duration::from_millis(1000);
        let t = Instant::now();
        let guard = c
            .lock("fixed")
            .unwrap()
            .lock_with_lease(Lease::Fixed(lease))
            .await
            .unwrap();
        assert!(!guard.is_at_risk());
        guard.at_risk().await;
        let at = t.elapsed();
        assert!(
            at >= lease / 2 - Duration::from_millis(50) && at < lease,
            "at risk after {at:?}"
        );
        assert!(guard.is_at_risk());
        guard.unlock().await.unwrap();
    })
    .await
}

/// Over a quorum the validity is what a majority confirmed: two of three
/// masters stopped put the hold at risk, their return clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_quorum_the_majoritys_validity_decides() {
    bounded(Duration::from_secs(30), async {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let lease = Duration::from_secs(3);
        let c = Client::builder_for_masters(servers.iter().map(|s| s.url()))
            .watchdog_lease(lease)
            .command_timeout(Duration::from_millis(150))
            .build()
            .await
            .unwrap();
        let guard = c.lock("q-risky").unwrap().lock().await.unwrap();
        // One master stopped: a majority still confirms.
        servers[0].pause();
        assert!(tokio::time::timeout(lease, guard.at_risk()).await.is_err());
        servers[1].pause();
        tokio::time::timeout(lease, guard.at_risk())
            .await
            .expect("at risk without a majority");
        assert!(!guard.is_lost());
        servers[1].resume();
        assert!(eventually(lease / 2, || !guard.is_at_risk()).await);
        servers[0].resume();
        guard.unlock().await.unwrap();
    })
    .await
}
