//! A lock from ordinary, non-async code: a batch step that must run on one
//! machine at a time.
//!
//! `cargo run --example blocking -- redis://127.0.0.1:6379`

use std::time::Duration;

fn main() -> lockwarden::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = lockwarden::blocking::Client::connect(&url)?;
    let lock = client.lock("nightly-batch")?;
    // Wait up to 5 s; the watchdog keeps the lease alive while we work.
    match lock.try_lock(Duration::from_secs(5), lockwarden::Lease::Watchdog)? {
        Some(guard) => {
            println!("running the batch with fencing token {}", guard.token());
            std::thread::sleep(Duration::from_millis(200));
            guard.unlock()?;
        }
        None => println!("another machine is running the batch"),
    }
    Ok(())
}
