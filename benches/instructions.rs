//! A fixed number of W1 pairs (lock + unlock by one task on one key) for
//! one row of the peers bench, to count the client's instructions with
//! callgrind. Counts, unlike times, do not move with the other tenants of a
//! noisy machine, so they show where one lock + unlock spends its client
//! work:
//!
//!     scripts/instructions.sh             # every row, per pair
//!
//! which runs, for each row and for two pair counts,
//!
//!     LOCKWARDEN_COST_ROW=lockwarden LOCKWARDEN_COST_PAIRS=2000 \
//!         valgrind --tool=callgrind target/release/deps/instructions-<hash> --bench
//!
//! and takes the difference, so that starting the server, connecting and
//! loading scripts cancel out. Rows (`LOCKWARDEN_COST_ROW`): `lockwarden`
//! (`lock()` + `unlock()`, watchdog lease), `rslock` (`lock(key, 30 s)` +
//! `unlock`), `floor` and `kept-floor` (see `support/floors.rs`). Each row
//! runs on a current-thread runtime after 200 warm-up pairs; the server is
//! a throwaway local redis-server, which callgrind does not follow.
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/floors.rs"]
mod floors;

use std::time::{Duration, Instant};

const ROWS: [&str; 4] = ["lockwarden", "rslock", "floor", "kept-floor"];

fn main() {
    // `cargo test --benches` runs this without --bench: a few pairs of
    // every row then, to check that each still runs.
    let benching = std::env::args().any(|a| a == "--bench");
    let pairs: usize = std::env::var("LOCKWARDEN_COST_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if benching { 2000 } else { 20 });
    let rows: Vec<String> = match std::env::var("LOCKWARDEN_COST_ROW") {
        Ok(row) => {
            assert!(
                ROWS.contains(&row.as_str()),
                "LOCKWARDEN_COST_ROW: unknown row {row:?} (rows: {})",
                ROWS.join(", ")
            );
            vec![row]
        }
        Err(_) => ROWS.iter().map(|r| r.to_string()).collect(),
    };
    let warm_up = if benching { 200 } else { 5 };
    let server = common::RedisServer::start();
    let url = server.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for row in rows {
            let secs = run(&row, &url, warm_up, pairs).await;
            println!("{{\"row\":\"{row}\",\"pairs\":{pairs},\"warm_up\":{warm_up},\"secs\":{secs:.3}}}");
        }
    });
}

/// Runs `warm_up` and then `pairs` pairs of `row`; the seconds the pairs took.
async fn run(row: &str, url: &str, warm_up: usize, pairs: usize) -> f64 {
    let key = format!("instructions:{row}");
    let total = warm_up + pairs;
    let mut start = Instant::now();
    match row {
        "lockwarden" => {
            let client = lockwarden::Client::connect(url).await.unwrap();
            let lock = client.lock(&key).unwrap();
            for i in 0..total {
                if i == warm_up {
                    start = Instant::now();
                }
                lock.lock().await.unwrap().unlock().await.unwrap();
            }
        }
        "rslock" => {
            let rs = rslock::LockManager::new(vec![url.to_string()]);
            for i in 0..total {
                if i == warm_up {
                    start = Instant::now();
                }
                let l = rs.lock(key.as_bytes(), Duration::from_secs(30)).await.unwrap();
                rs.unlock(&l).await;
            }
        }
        "floor" | "kept-floor" => {
            let client = vec![floors::fred_client(url).await];
            let shas = floors::Shas::load(&client).await;
            for i in 0..total {
                if i == warm_up {
                    start = Instant::now();
                }
                if row == "floor" {
                    floors::floor_pair(&client, &shas.compare_and_delete, &key, "token-of-this-pair").await;
                } else {
                    floors::kept_floor_pair(&client, &shas.kept, &key).await;
                }
            }
        }
        _ => unreachable!("rows are checked in main"),
    }
    start.elapsed().as_secs_f64()
}
