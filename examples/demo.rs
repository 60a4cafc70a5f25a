//! A tour of lockwarden: contention with handoff, reentrancy, the watchdog
//! and fencing tokens, printing what happens.
//!
//! Run it with `scripts/demo.sh`, which starts a throwaway redis-server, or
//! point it at a server of your own: `cargo run --example demo -- redis://127.0.0.1:6379`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwarden::{Client, Lease};
use parking_lot::Mutex;

#[tokio::main]
async fn main() -> lockwarden::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let t0 = Instant::now();
    let say = move |who: &str, what: String| println!("{:>7.1} ms  {who:<9} {what}", t0.elapsed().as_secs_f64() * 1e3);

    println!("== contention and handoff: three workers, one lock, each with its own client");
    let mut workers = Vec::new();
    for name in ["alice", "bob", "carol"] {
        let client = Client::connect(&url).await?;
        workers.push(tokio::spawn(async move {
            let lock = client.lock("demo:report")?;
            for round in 1..=2 {
                say(name, format!("wants the lock (round {round})"));
                let guard = lock.lock().await?;
                say(name, format!("holds it, fencing token {}", guard.token()));
                tokio::time::sleep(Duration::from_millis(30)).await;
                say(name, "releases it".into());
                guard.unlock().await?;
            }
            lockwarden::Result::Ok(())
        }));
    }
    for w in workers {
        w.await.expect("worker panicked")?;
    }

    println!("\n== reentrancy: nested lock() calls in one task");
    let client = Client::builder(&url)
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await?;
    let lock = client.lock("demo:nested")?;
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    say(
        "main",
        format!(
            "depth {} then {}, hold count in Redis {}",
            outer.depth(),
            inner.depth(),
            lock.hold_count().await?
        ),
    );
    let other = lock.clone();
    let excluded = tokio::spawn(async move {
        other
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await
            .map(|g| g.is_none())
    });
    say(
        "main",
        format!("another task is excluded: {}", excluded.await.expect("task panicked")?),
    );
    inner.unlock().await?;
    say(
        "main",
        format!("after one unlock the hold count is {}", lock.hold_count().await?),
    );

    println!("\n== watchdog: a 1 s lease kept alive for 3 s");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let left = lock.remaining_lease().await?.unwrap_or_default();
        say(
            "watchdog",
            format!(
                "still held, {} ms of lease left, lost: {}",
                left.as_millis(),
                outer.is_lost()
            ),
        );
    }
    outer.unlock().await?;
    say("main", format!("released; locked now: {}", lock.is_locked().await?));

    println!("\n== fencing: a storage that rejects writes with an older token");
    let storage = Arc::new(Mutex::new((0u64, String::new())));
    let write = |token: u64, value: &str| {
        let mut s = storage.lock();
        if token < s.0 {
            return Err(format!("rejected write {value:?}: token {token} < {}", s.0));
        }
        *s = (token, value.to_string());
        Ok(format!("accepted write {value:?} with token {token}"))
    };
    let slow = client
        .lock("demo:fenced")?
        .try_lock(Duration::ZERO, Duration::from_millis(200))
        .await?
        .expect("free");
    let slow_token = slow.token();
    say(
        "slow",
        format!("holds token {slow_token} with a 200 ms lease, then stalls"),
    );
    let fast_client = Client::connect(&url).await?;
    let fast = fast_client.lock("demo:fenced")?.lock().await?;
    say(
        "fast",
        format!("got the lock after the lease ran out, token {}", fast.token()),
    );
    say("fast", write(fast.token(), "fresh").unwrap_or_else(|e| e));
    say("slow", format!("wakes up, lock lost: {}", slow.is_lost()));
    say("slow", write(slow_token, "stale").unwrap_or_else(|e| e));
    fast.unlock().await?;
    if let Err(e) = slow.unlock().await {
        say("slow", format!("unlock: {e}"));
    }
    Ok(())
}
