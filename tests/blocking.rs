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

#[test]
fn readers_share_and_a_writer_waits_for_them_from_threads() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let rw = client.rw_lock("doc").unwrap();
    let r1 = rw.read().lock().unwrap();
    let r2 = {
        let rw = rw.clone();
        std::thread::spawn(move || rw.read().try_lock(Duration::ZERO, LONG).unwrap().is_some())
    };
    assert!(r2.join().unwrap(), "another thread reads beside this one");
    let writer = {
        let rw = rw.clone();
        std::thread::spawn(move || {
            let g = rw
                .write()
                .try_lock(Duration::from_secs(10), LONG)
                .unwrap()
                .expect("written");
            let written = Instant::now();
            g.unlock().unwrap();
            written
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!writer.is_finished(), "the writer waits for the reader");
    // The instants are compared, not the writer's own wait: its thread may
    // start late, and only the order against the reader's unlock matters.
    let released = Instant::now();
    r1.unlock().unwrap();
    let written = writer.join().unwrap();
    assert!(written >= released, "the writer got in only after the reader left");
    assert!(
        written - released < Duration::from_secs(5),
        "woken by the unlock, not the lease: {:?}",
        written - released
    );
}

#[test]
fn threads_never_hold_more_permits_than_the_semaphore_has() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let sem = client.semaphore("pool", 2).unwrap();
    let inside = Arc::new(AtomicU64::new(0));
    let worst = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (sem, inside, worst) = (sem.clone(), inside.clone(), worst.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let p = sem.acquire().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    worst.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(worst.load(Ordering::SeqCst), 2, "never more than two, and both used");
    assert_eq!(sem.available_permits().unwrap(), 2);
    // A permit given back by its id, from another handle.
    let p = sem
        .try_acquire_many(2, Duration::ZERO, LONG)
        .unwrap()
        .expect("both free");
    assert_eq!(p.permits(), 2);
    assert!(sem.try_acquire(Duration::ZERO, LONG).unwrap().is_none());
    client.semaphore("pool", 2).unwrap().release_by_id(&p.id()).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 2);
    assert!(p.release().is_err(), "given back already");
    let fair = client.fair_semaphore("fair-pool", 1).unwrap();
    fair.acquire().unwrap().release().unwrap();
}

#[test]
fn a_thread_waits_on_a_latch_until_others_count_it_down() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let latch = client.count_down_latch("ready").unwrap();
    assert!(latch.try_set_count(2).unwrap());
    let waiter = {
        let latch = latch.clone();
        std::thread::spawn(move || latch.wait_for(Duration::from_secs(10)).unwrap())
    };
    assert!(!latch.wait_for(Duration::from_millis(100)).unwrap(), "not at zero");
    for _ in 0..2 {
        let other = client.count_down_latch("ready").unwrap();
        std::thread::spawn(move || other.count_down().unwrap()).join().unwrap();
    }
    assert!(waiter.join().unwrap(), "the waiter saw zero");
    assert_eq!(latch.count().unwrap(), Some(0));
}
