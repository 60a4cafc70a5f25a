//! A cron-style job that must run on one machine at a time: every machine's
//! crontab starts it, one gets the lock, the others exit at once. The
//! watchdog keeps the lease alive however long the job runs, and the job
//! stops early if the lock is at risk (Redis unreachable for a while).
//!
//! `cargo run --example cron_job -- redis://127.0.0.1:6379`

use std::time::Duration;

use lockwarden::{Client, Lease};

#[tokio::main]
async fn main() -> lockwarden::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let lock = client.lock("cron:nightly-cleanup")?;
    // No waiting: if another machine runs the job, this one has nothing to do.
    let Some(guard) = lock.try_lock(Duration::ZERO, Lease::Watchdog).await? else {
        println!("another machine is running the job");
        return Ok(());
    };
    println!("running the job (fencing token {})", guard.token());
    tokio::select! {
        () = run_job() => println!("job done"),
        left = guard.at_risk() => {
            // Renewals are failing: stop while the lock is still ours.
            println!("lock at risk ({left:?} left), stopping the job early");
        }
    }
    guard.unlock().await
}

async fn run_job() {
    for step in 1..=3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        println!("  step {step} of 3");
    }
}
