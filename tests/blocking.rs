//! The blocking API: plain threads, no async code in the test.
#![cfg(feature = "blocking")]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::RedisServer;
use lockwarden::blocking::Client;

const LONG: Duration = Duration::from_secs(30);

#[test]
fn threads_own_their_holds_and_reenter() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("threads").unwrap();
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!((outer.depth(), inner.depth()), (1, 2), "the same thread re-enters");
    assert_eq!(outer.token(), inner.token());
    assert_eq!(lock.hold_count().unwrap(), 2);
    let other = lock.clone();
    let denied = std::thread::spawn(move || other.try_lock(Duration::ZERO, LONG).unwrap().is_none());
    assert!(denied.join().unwrap(), "another thread waits");
    inner.unlock().unwrap();
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_waiting_thread_is_woken_by_the_unlock_and_a_dropped_guard_releases() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("handoff").unwrap();
    let guard = lock.lock().unwrap();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let g = lock.try_lock(Duration::from_secs(10), LONG).unwrap().expect("acquired");
            (t.elapsed(), g.token())
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let held_token = guard.token();
    drop(guard); // released in the background at once
    let (waited, token) = waiter.join().unwrap();
    assert!(token > held_token);
    // Woken by the unlock message, not by the 30 s lease.
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
}

#[test]
fn threads_never_overlap_on_a_fair_lock() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (lock, inside, done) = (client.fair_lock("fair").unwrap(), inside.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let g = lock.try_lock(Duration::from_secs(10), LONG).unwrap().expect("acquired");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    std::thread::sleep(Duration::from_millis(2));
                    inside.store(false, Ordering::SeqCst);
                    g.unlock().unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 40);
}

#[test]
fn calls_from_inside_an_async_runtime_are_refused_with_a_clear_panic() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("refused").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = server.url();
    rt.block_on(async {
        for call in [
            Box::new(|| drop(lock.lock())) as Box<dyn Fn()>,
            Box::new(|| drop(Client::connect(&url))),
        ] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
            let msg = r.expect_err("refused");
            let msg = msg
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| msg.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            assert!(msg.contains("inside an async runtime"), "{msg}");
        }
    });
    assert!(!lock.is_locked().unwrap(), "nothing was taken");
}
