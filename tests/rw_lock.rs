//! The read-write lock against a real redis-server: sharing, exclusion,
//! reentrancy and downgrade, the deadlock refusal, a dead reader's share,
//! writer preference, fencing, wake-ups, cancellation and replays.
#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Error, Lease};

const LONG: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(60);

/// The owner fields of the hash that hold the read side.
fn readers(server: &RedisServer, key: &str) -> Vec<String> {
    let mut r: Vec<String> = server
        .owners(key)
        .into_iter()
        .map(|(f, _)| f)
        .filter(|f| f.ends_with(":r"))
        .collect();
    r.sort();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_them() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let ra = a.rw_lock("doc").unwrap().read().lock().await.unwrap();
        let rb = b.rw_lock("doc").unwrap().read().lock().await.unwrap();
        assert_eq!(readers(&server, "doc").len(), 2, "two readers at once");
        let st = a.rw_lock("doc").unwrap().read().status().await.unwrap();
        let mut seen: Vec<(String, u64)> = st.readers().map(|(o, c)| (o.to_string(), c)).collect();
        seen.sort();
        let mut want = vec![
            (ra.owner().field().trim_end_matches(":r").to_string(), 1),
            (rb.owner().field().trim_end_matches(":r").to_string(), 1),
        ];
        want.sort();
        assert_eq!(seen, want, "status lists the readers");
        // Each reader's hold has its own lease deadline.
        for f in readers(&server, "doc") {
            let d = server.cmd(&["HGET", "doc", &format!(":{f}")]);
            assert!(d.as_str().is_some(), "deadline of {f}");
        }
        let w = b.rw_lock("doc").unwrap().write();
        let none = tokio::spawn(async move { w.try_lock(Duration::from_millis(200), LONG).await });
        assert!(none.await.unwrap().unwrap().is_none(), "readers exclude a writer");
        ra.unlock().await.unwrap();
        assert!(
            a.rw_lock("doc").unwrap().read().is_locked().await.unwrap(),
            "one reader left"
        );
        rb.unlock().await.unwrap();
        assert!(!a.rw_lock("doc").unwrap().read().is_locked().await.unwrap());
        assert_eq!(
            server.cmd(&["EXISTS", "doc"]).as_int(),
            Some(0),
            "nothing left, no mark"
        );

        let wg = a.rw_lock("doc").unwrap().write().lock().await.unwrap();
        let r = b.rw_lock("doc").unwrap().read();
        assert!(
            r.try_lock(Duration::from_millis(200), LONG).await.unwrap().is_none(),
            "a writer excludes readers"
        );
        let w2 = b.rw_lock("doc").unwrap().write();
        assert!(
            w2.try_lock(Duration::ZERO, LONG).await.unwrap().is_none(),
            "and other writers"
        );
        wg.unlock().await.unwrap();
        let rg = r.try_lock(Duration::ZERO, LONG).await.unwrap().expect("free again");
        rg.unlock().await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_reenter_and_the_writer_may_downgrade() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let rw = c.rw_lock("grade").unwrap();
        let w1 = rw.write().lock().await.unwrap();
        let w2 = rw.write().lock().await.unwrap();
        assert_eq!((w1.depth(), w2.depth()), (1, 2));
        assert_eq!(w1.token(), w2.token(), "a re-entry keeps the write token");
        // The writer reads too, and keeps reading after it stops writing.
        let r1 = rw.read().lock().await.unwrap();
        let r2 = rw.read().lock().await.unwrap();
        assert_eq!((r1.depth(), r2.depth()), (1, 2));
        assert_eq!(rw.read().hold_count().await.unwrap(), 2);
        assert_eq!(rw.write().hold_count().await.unwrap(), 2);
        let other_read = other.rw_lock("grade").unwrap().read();
        assert!(other_read.try_lock(Duration::ZERO, LONG).await.unwrap().is_none());
        w2.unlock().await.unwrap();
        w1.unlock().await.unwrap();
        assert_eq!(rw.write().hold_count().await.unwrap(), 0);
        assert_eq!(rw.read().hold_count().await.unwrap(), 2, "downgraded: still reading");
        let joined = other_read
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("another reader joins once the writer left");
        // (Another client: this task reads through `other`, so its write
        // would be a deadlock.)
        let third = client(&server.url(), LONG).await;
        let third_write = third.rw_lock("grade").unwrap().write();
        assert!(third_write.try_lock(Duration::ZERO, LONG).await.unwrap().is_none());
        joined.unlock().await.unwrap();
        r2.unlock().await.unwrap();
        r1.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "grade"]).as_int(), Some(0));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_asking_for_the_write_side_gets_an_error_at_once() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let rw = c.rw_lock("upgrade").unwrap();
        let r = rw.read().lock().await.unwrap();
        let before = server.cmd(&["HGETALL", "upgrade"]);
        let started = Instant::now();
        let e = rw.write().lock().await.unwrap_err();
        assert!(matches!(&e, Error::WouldDeadlock { key } if key == "upgrade"), "{e}");
        assert!(!e.is_retryable());
        let e = rw.write().try_lock(Duration::from_secs(5), LONG).await.unwrap_err();
        assert!(matches!(e, Error::WouldDeadlock { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2), "no waiting");
        assert_eq!(server.cmd(&["HGETALL", "upgrade"]), before, "nothing changed");
        r.unlock().await.unwrap();
        rw.write().lock().await.unwrap().unlock().await.unwrap();
    })
    .await
}

/// A reader that stops renewing (its process died: here a fixed lease and
/// a guard that is never released) frees its share when its lease ends,
/// while another reader keeps renewing its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_reader_frees_its_share_while_others_renew() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let dead = client(&server.url(), LONG).await;
        let alive = client(&server.url(), Duration::from_millis(900)).await;
        let writer = client(&server.url(), LONG).await;
        let g = dead
            .rw_lock("share")
            .unwrap()
            .read()
            .try_lock(Duration::ZERO, Duration::from_millis(800))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(g);
        let live = alive.rw_lock("share").unwrap().read().lock().await.unwrap();
        assert_eq!(readers(&server, "share").len(), 2);
        // The writer waits; its attempts prune the dead reader once its lease
        // has passed, while the live one is renewed every 300 ms.
        let w = writer.rw_lock("share").unwrap().write();
        let waiting = tokio::spawn(async move { w.try_lock(Duration::from_secs(20), LONG).await });
        assert!(
            eventually(Duration::from_secs(5), || readers(&server, "share").len() == 1).await,
            "the dead reader's share is gone: {:?}",
            readers(&server, "share")
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            readers(&server, "share").len(),
            1,
            "the live reader renews its own lease"
        );
        assert!(!live.is_lost());
        assert!(!waiting.is_finished(), "the live reader still excludes the writer");
        let released = Instant::now();
        live.unlock().await.unwrap();
        let g = waiting.await.unwrap().unwrap().expect("the writer gets the lock");
        assert!(released.elapsed() < Duration::from_secs(5));
        g.unlock().await.unwrap();
    })
    .await
}

/// Readers that overlap without end never leave the lock free; a writer
/// still gets it, because readers not yet in queue behind a waiting writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_readers_does_not_starve_a_writer() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..4 {
            let c = client(&server.url(), LONG).await;
            let (stop, reads) = (stop.clone(), reads.clone());
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20 * i)).await;
                let r = c.rw_lock("busy").unwrap().read();
                let end = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::SeqCst) && Instant::now() < end {
                    if let Some(g) = r.try_lock(Duration::from_secs(10), LONG).await.unwrap() {
                        reads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(80)).await;
                        g.unlock().await.unwrap();
                    }
                }
            }));
        }
        assert!(eventually(Duration::from_secs(5), || reads.load(Ordering::SeqCst) >= 8).await);
        let c = client(&server.url(), LONG).await;
        let started = Instant::now();
        let g = c
            .rw_lock("busy")
            .unwrap()
            .write()
            .try_lock(Duration::from_secs(10), LONG)
            .await
            .unwrap()
            .expect("the writer is not starved");
        let waited = started.elapsed();
        assert!(readers(&server, "busy").is_empty(), "no reader while writing");
        let during = reads.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(reads.load(Ordering::SeqCst), during, "readers wait for the writer");
        g.unlock().await.unwrap();
        assert!(
            eventually(Duration::from_secs(5), || reads.load(Ordering::SeqCst) > during).await,
            "readers go on after the writer"
        );
        stop.store(true, Ordering::SeqCst);
        for t in tasks {
            t.await.unwrap();
        }
        eprintln!("writer waited {waited:?} behind a stream of readers");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_tokens_increase_and_readers_carry_the_last_one() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let rw = c.rw_lock("fence").unwrap();
        // No write yet: the read starts the counter at the clock, and the
        // first write token is above it.
        let r0 = rw.read().lock().await.unwrap();
        assert!(r0.token() > 0, "the counter started at the clock");
        let mut last = r0.token();
        r0.unlock().await.unwrap();
        for _ in 0..3 {
            let w = rw.write().lock().await.unwrap();
            assert!(w.token() > last, "{} after {last}", w.token());
            last = w.token();
            w.unlock().await.unwrap();
            let r = rw.read().lock().await.unwrap();
            assert_eq!(r.token(), last, "a read hold carries the last write token");
            r.unlock().await.unwrap();
        }
        // A plain lock's token rules hold for the write side: a write hold
        // that was lost cannot release a newer one of the same owner.
        let old = rw
            .write()
            .try_lock(Duration::ZERO, Duration::from_millis(200))
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let new = rw.write().lock().await.unwrap();
        assert!(new.token() > old.token());
        assert!(matches!(old.unlock().await, Err(Error::NotHeld { .. })));
        assert_eq!(rw.write().hold_count().await.unwrap(), 1, "the new hold stands");
        new.unlock().await.unwrap();
    })
    .await
}

/// A counter lost with the server's data (here evicted alone) does not
/// hand a reader a token below the last write's: the read starts the
/// counter at the clock, and the next write's token is above the read's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_the_counter_is_lost_is_not_below_the_last_write() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let rw = c.rw_lock("lost-counter").unwrap();
        let w = rw.write().lock().await.unwrap();
        let written = w.token();
        w.unlock().await.unwrap();
        let counter = "lockwarden:{lost-counter}:token";
        assert_eq!(server.cmd(&["DEL", counter]).as_int(), Some(1), "the counter is there");
        let r = rw.read().lock().await.unwrap();
        let read = r.token();
        assert!(read >= written, "read token {read} below the last write's {written}");
        let again = rw.read().lock().await.unwrap();
        assert_eq!(again.token(), read, "a re-entry carries the same value");
        again.unlock().await.unwrap();
        r.unlock().await.unwrap();
        let w = rw.write().lock().await.unwrap();
        assert!(
            w.token() > read,
            "the next write's token {} is above the read's {read}",
            w.token()
        );
        w.unlock().await.unwrap();
    })
    .await
}

/// Waiting is woken by the unlock (not by the 30 s leases), for a writer
/// behind readers and for readers behind a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_either_side_wake_on_the_unlock() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let r = a.rw_lock("wake").unwrap().read().lock().await.unwrap();
        let w = b.rw_lock("wake").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await });
        assert!(eventually(Duration::from_secs(5), || marks(&server, "wake") == 1).await);
        assert!(a.rw_lock("wake").unwrap().read().is_locked().await.unwrap());
        let t = Instant::now();
        r.unlock().await.unwrap();
        let wg = tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("woken")
            .unwrap()
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));

        let mut readers_waiting = Vec::new();
        for c in [&a, &b] {
            let r = c.rw_lock("wake").unwrap().read();
            readers_waiting.push(tokio::spawn(async move { r.lock().await }));
        }
        assert!(
            eventually(Duration::from_secs(5), || server
                .cmd(&["HEXISTS", "wake", ":wait"])
                .as_int()
                == Some(1))
            .await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        wg.unlock().await.unwrap();
        let mut guards = Vec::new();
        for h in readers_waiting {
            guards.push(
                tokio::time::timeout(Duration::from_secs(5), h)
                    .await
                    .expect("woken")
                    .unwrap()
                    .unwrap(),
            );
        }
        assert_eq!(readers(&server, "wake").len(), 2, "both readers in together");
        for g in guards {
            g.unlock().await.unwrap();
        }
    })
    .await
}

/// Dropping a wait of either side leaves nothing held and no mark that
/// would keep readers out for long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_leaves_nothing_held() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let w = a.rw_lock("drop").unwrap().write().lock().await.unwrap();
        let r = b.rw_lock("drop").unwrap().read();
        let reader = tokio::spawn(async move { r.lock().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        reader.abort();
        let _ = reader.await;
        w.unlock().await.unwrap();
        // The dropped wait takes its mark (or the pass the unlock made of
        // it) back in the background.
        assert!(
            eventually(Duration::from_secs(2), || server.cmd(&["EXISTS", "drop"]).as_int()
                == Some(0))
            .await,
            "no reader was left behind: {:?}",
            server.cmd(&["HGETALL", "drop"]).strings()
        );

        let r = a.rw_lock("drop").unwrap().read().lock().await.unwrap();
        let w = b.rw_lock("drop").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await });
        assert!(eventually(Duration::from_secs(5), || marks(&server, "drop") == 1).await);
        writer.abort();
        let _ = writer.await;
        // The dropped wait takes its mark back in the background: readers
        // are held back no more, long before the mark's 5 s would lapse.
        assert!(eventually(Duration::from_secs(2), || marks(&server, "drop") == 0).await);
        let r2 = a.rw_lock("drop").unwrap().read();
        let other_reader = b.rw_lock("drop").unwrap().read();
        let g = other_reader
            .try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("a new reader gets in at once");
        g.unlock().await.unwrap();
        // A writer whose wait ends (its deadline) takes its mark back too.
        let w = b.rw_lock("drop").unwrap().write();
        assert!(w.try_lock(Duration::from_millis(300), LONG).await.unwrap().is_none());
        assert_eq!(marks(&server, "drop"), 0, "given up: no mark left");
        drop(r2);
        r.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "drop"]).as_int(), Some(0), "nothing left");
    })
    .await
}

/// The marks of waiting writers in the hash `key`.
fn marks(server: &RedisServer, key: &str) -> usize {
    server
        .cmd(&["HKEYS", key])
        .strings()
        .iter()
        .filter(|f| f.starts_with(":ww:"))
        .count()
}

/// The scripts' replay records: the same acquire or release sent twice (its
/// first reply lost) applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_calls_apply_once() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let shared = include_str!("../lua/shared.lua").to_string() + include_str!("../lua/shared_rw.lua");
        let acquire = shared.clone() + include_str!("../lua/rw_acquire.lua");
        let release = shared + include_str!("../lua/rw_release.lua");
        let tok = "lockwarden:{replay}:token";
        let acq = |rec: &str, first: &str, side: &str, field: &str| {
            server.cmd(&[
                "EVAL", &acquire, "3", "replay", tok, rec, field, "30000", "60000", first, "0", side, "5000",
            ])
        };
        for (side, field) in [("read", "me:1:r"), ("write", "me:1")] {
            let once = acq("rec-a", "1", side, field);
            let again = acq("rec-a", "0", side, field);
            assert_eq!(once, again, "{side}: the replay returns the recorded reply");
            assert_eq!(
                server.cmd(&["HGET", "replay", field]).as_str(),
                Some("1"),
                "{side}: one level"
            );
            let twice = acq("rec-b", "1", side, field);
            assert_eq!(
                server.cmd(&["HGET", "replay", field]).as_str(),
                Some("2"),
                "{side}: {twice:?}"
            );
            let rel = |rec: &str, first: &str| {
                server.cmd(&[
                    "EVAL",
                    &release,
                    "4",
                    "replay",
                    "lockwarden:{replay}:channel",
                    rec,
                    "lockwarden:{replay}:writers",
                    field,
                    "0",
                    "60000",
                    "0",
                    "",
                    "PUBLISH",
                    first,
                ])
            };
            assert_eq!(rel("rel-a", "1").as_int(), Some(1));
            assert_eq!(rel("rel-a", "0").as_int(), Some(1), "{side}: the replayed release");
            assert_eq!(
                server.cmd(&["HGET", "replay", field]).as_str(),
                Some("1"),
                "{side}: left once"
            );
            assert_eq!(rel("rel-b", "1").as_int(), Some(0));
            assert_eq!(
                rel("rel-b", "0").as_int(),
                Some(0),
                "{side}: the replay of the last level"
            );
            assert_eq!(server.cmd(&["EXISTS", "replay"]).as_int(), Some(0));
            for k in server.keys("lockwarden:{replay}:req:*") {
                server.cmd(&["DEL", &k]);
            }
            for rec in ["rec-a", "rec-b", "rel-a", "rel-b"] {
                server.cmd(&["DEL", rec]);
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_refused_and_left_alone() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        server.cmd(&["SET", "notrw", "x"]);
        for side in ["read", "write"] {
            let rw = c.rw_lock("notrw").unwrap();
            let lock = if side == "read" { rw.read() } else { rw.write() };
            let e = lock.try_lock(Duration::ZERO, Lease::Fixed(LONG)).await.unwrap_err();
            assert!(
                matches!(&e, Error::WrongType { key, found } if key == "notrw" && found == "string"),
                "{e}"
            );
        }
        assert_eq!(server.cmd(&["GET", "notrw"]).as_str(), Some("x"));
    })
    .await
}

/// Over a quorum of three masters: readers share, a writer excludes them,
/// and a master down does not change that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_masters_keeps_the_rules() {
    bounded(BOUND, async {
        let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let connect = || async {
            lockwarden::Client::builder_for_masters(&urls)
                .watchdog_lease(LONG)
                .build()
                .await
                .unwrap()
        };
        let (a, b) = (connect().await, connect().await);
        let ra = a.rw_lock("q").unwrap().read().lock().await.unwrap();
        let rb = b.rw_lock("q").unwrap().read().lock().await.unwrap();
        // Each read hold stands on a majority; the third master's grant may
        // still be settling (a master slow to answer is left out, not waited
        // for), so only a majority is certain here.
        for guard in [&ra, &rb] {
            let on = servers
                .iter()
                .filter(|s| readers(s, "q").contains(&guard.owner().field().to_string()))
                .count();
            assert!(on >= 2, "a read hold stands on {on} of 3 masters");
        }
        let w = b.rw_lock("q").unwrap().write();
        let waiting = tokio::spawn(async move { w.try_lock(Duration::from_secs(20), LONG).await });
        servers[2].stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "readers exclude the writer on the majority left"
        );
        ra.unlock().await.unwrap();
        rb.unlock().await.unwrap();
        let wg = waiting.await.unwrap().unwrap().expect("the writer gets it");
        assert!(wg.token() > 0);
        let r = a.rw_lock("q").unwrap().read();
        assert!(r.try_lock(Duration::from_millis(200), LONG).await.unwrap().is_none());
        wg.unlock().await.unwrap();
        r.try_lock(Duration::ZERO, LONG)
            .await
            .unwrap()
            .expect("free")
            .unlock()
            .await
            .unwrap();
    })
    .await
}

/// Redisson's write-read-write re-entrancy: the writer reads, then writes
/// again (it still holds the write side); and a force-unlock frees both
/// sides at once, wakes the waiting writer, and tells the reader its hold
/// is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_write_reentrancy_and_force_unlock() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let rw = c.rw_lock("wrw").unwrap();
        let w1 = rw.write().lock().await.unwrap();
        let r = rw.read().lock().await.unwrap();
        let w2 = rw.write().lock().await.unwrap();
        assert_eq!(w2.depth(), 2, "the writer writes again while reading");
        w2.unlock().await.unwrap();
        r.unlock().await.unwrap();
        w1.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "wrw"]).as_int(), Some(0));

        let reader_client = client(&server.url(), Duration::from_millis(900)).await;
        let reading = reader_client.rw_lock("forced").unwrap().read().lock().await.unwrap();
        let w = c.rw_lock("forced").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await });
        assert!(eventually(Duration::from_secs(5), || marks(&server, "forced") == 1).await);
        assert!(c.rw_lock("forced").unwrap().read().force_unlock().await.unwrap());
        let g = tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("woken by the force-unlock")
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), reading.lost())
            .await
            .expect("the reader learns its hold is gone");
        g.unlock().await.unwrap();
    })
    .await
}

/// A force-unlock through a plain lock handle (what `lockwarden unlock
/// --force` opens) tells the read-write lock's waiting writers too, on
/// their own channel: the writer behind a reader gets in at once, not at
/// its next look (a third of the 30 s waiter timeout of `slow_client`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_through_a_plain_handle_wakes_the_waiting_writer() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let reader = slow_client(&server).await.unwrap();
        let _reading = reader.rw_lock("plain").unwrap().read().lock().await.unwrap();
        let c = slow_client(&server).await.unwrap();
        let w = c.rw_lock("plain").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await });
        assert!(eventually(Duration::from_secs(5), || marks(&server, "plain") == 1).await);
        assert!(c.lock("plain").unwrap().force_unlock().await.unwrap());
        let g = tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("the writer is told by the force-unlock")
            .unwrap()
            .unwrap();
        g.unlock().await.unwrap();
    })
    .await
}

/// A read-write side's force-unlock frees only a read-write lock: on a
/// name a semaphore or a reentrant lock holds it is `WrongKind`, and the
/// holder's hash is left as it was (a permit's field ends in `:r`, as a
/// reader's does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sides_force_unlock_leaves_another_kinds_lock_alone() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let permit = c.semaphore("sem", 2).unwrap().acquire().await.unwrap();
        let held = c.lock("plain").unwrap().lock().await.unwrap();
        for name in ["sem", "plain"] {
            let before = server.cmd(&["HGETALL", name]).strings();
            let rw = c.rw_lock(name).unwrap();
            for side in [rw.read(), rw.write()] {
                let r = side.force_unlock().await;
                assert!(matches!(r, Err(Error::WrongKind { .. })), "{name}: {r:?}");
            }
            assert_eq!(server.cmd(&["HGETALL", name]).strings(), before, "{name}");
        }
        permit.release().await.unwrap();
        held.unlock().await.unwrap();
    })
    .await
}

/// Redisson's read-write scenarios on lock state: each side's `is_locked`,
/// and each side's force-unlock acting only while that side holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_side_reports_and_force_unlocks_its_own_holds() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let rw = c.rw_lock("sides").unwrap();
        let w = rw.write().lock().await.unwrap();
        assert!(
            !rw.read().is_locked().await.unwrap(),
            "a writer alone: the read side is free"
        );
        assert!(rw.write().is_locked().await.unwrap());
        let r = rw.read().lock().await.unwrap();
        assert!(rw.read().is_locked().await.unwrap(), "the writer reads");
        r.unlock().await.unwrap();
        assert!(rw.write().is_locked().await.unwrap());
        assert!(
            !rw.read().force_unlock().await.unwrap(),
            "no reader: the read side's force-unlock does nothing"
        );
        assert!(rw.write().is_locked().await.unwrap());
        w.unlock().await.unwrap();
        assert!(!rw.write().is_locked().await.unwrap());

        let r = rw.read().lock().await.unwrap();
        assert!(
            !rw.write().force_unlock().await.unwrap(),
            "no writer: the write side's force-unlock does nothing"
        );
        assert!(rw.read().is_locked().await.unwrap());
        assert!(rw.read().force_unlock().await.unwrap());
        assert!(!rw.read().is_locked().await.unwrap());
        assert!(matches!(r.unlock().await, Err(lockwarden::Error::NotHeld { .. })));
    })
    .await
}

/// Redisson's read lease scenarios, scaled down: each reader's lease is its
/// own (a second reader coming and going does not extend the first's), and
/// a writer waiting behind fixed-lease readers gets in when the last one's
/// lease ends, not later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_reader_lease_is_its_own() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let started = Instant::now();
        let first = c
            .rw_lock("leases")
            .unwrap()
            .read()
            .try_lock(Duration::ZERO, Duration::from_millis(800))
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let second = other
            .rw_lock("leases")
            .unwrap()
            .read()
            .try_lock(Duration::ZERO, Duration::from_millis(2000))
            .await
            .unwrap()
            .unwrap();
        second.unlock().await.unwrap();
        std::mem::forget(first);
        let w = other.rw_lock("leases").unwrap().write();
        let g = w
            .try_lock(Duration::from_secs(10), LONG)
            .await
            .unwrap()
            .expect("the first reader's lease ended");
        let at = started.elapsed();
        assert!(
            at >= Duration::from_millis(700) && at < Duration::from_secs(3),
            "writer in after {at:?}"
        );
        g.unlock().await.unwrap();

        // Two fixed-lease readers, a writer waiting: it gets in when the
        // longer lease ends, not at the shorter one.
        let started = Instant::now();
        let long = c
            .rw_lock("leases2")
            .unwrap()
            .read()
            .try_lock(Duration::ZERO, Duration::from_millis(1500))
            .await
            .unwrap()
            .unwrap();
        let short = other
            .rw_lock("leases2")
            .unwrap()
            .read()
            .try_lock(Duration::ZERO, Duration::from_millis(500))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(long);
        std::mem::forget(short);
        let third = client(&server.url(), LONG).await;
        let g = third
            .rw_lock("leases2")
            .unwrap()
            .write()
            .try_lock(Duration::from_secs(10), LONG)
            .await
            .unwrap()
            .expect("both leases ended");
        let at = started.elapsed();
        assert!(
            at >= Duration::from_millis(1400) && at < Duration::from_secs(4),
            "writer in after {at:?}"
        );
        g.unlock().await.unwrap();
    })
    .await
}

/// Redisson's write-then-many-readers scenario: 20 readers of one client
/// wait behind a writer; its unlock lets all of them in together (each
/// reader that gets in passes the wake-up to the next), not one per unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_leaving_lets_every_waiting_reader_in_together() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let other = client(&server.url(), LONG).await;
        let w = other.rw_lock("crowd").unwrap().write().lock().await.unwrap();
        let inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (r, inside) = (c.rw_lock("crowd").unwrap().read(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let g = r.lock().await.unwrap();
                inside.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(800)).await;
                g.unlock().await.unwrap();
            }));
        }
        assert!(eventually(Duration::from_secs(5), || c.waiting_channels() == 1).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
        w.unlock().await.unwrap();
        assert!(
            eventually(Duration::from_secs(1), || inside.load(Ordering::SeqCst) == 20).await,
            "{} of 20 readers in within a second",
            inside.load(Ordering::SeqCst)
        );
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

/// Waits of one client on both sides behind another client's writer: all
/// get in by unlock messages (a hold taken while others of its client wait
/// wakes them on release), not by the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_of_one_client_on_both_sides_get_in_by_messages() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder = client(&server.url(), LONG).await;
        // A long waiter timeout: waiting writers re-check only every 20 s,
        // so only unlock messages can get everyone in within the bound.
        let c = lockwarden::Client::builder(&server.url())
            .watchdog_lease(LONG)
            .fair_waiter_timeout(Duration::from_secs(60))
            .build()
            .await
            .unwrap();
        let w = holder.rw_lock("mixed").unwrap().write().lock().await.unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..4 {
            let rw = c.rw_lock("mixed").unwrap();
            let done = done.clone();
            tasks.push(tokio::spawn(async move {
                let lock = if i % 2 == 0 { rw.write() } else { rw.read() };
                let g = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
                g.unlock().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        // The readers' channel and the writers'.
        assert!(eventually(Duration::from_secs(5), || c.waiting_channels() == 2).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
        w.unlock().await.unwrap();
        assert!(
            eventually(Duration::from_secs(8), || done.load(Ordering::SeqCst) == 4).await,
            "{} of 4 got in by messages",
            done.load(Ordering::SeqCst)
        );
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

/// A read hold is named by the request that made it, and its release names
/// it too: a release of an earlier read hold of the same task (one given up
/// on that reaches the server late) finds another hold under the same
/// field and leaves it alone. Here the hold's identity is changed under
/// the guard, as a newer hold of the task would have it: the guard's
/// release answers `NotHeld` and the hold stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_release_leaves_a_newer_read_hold_of_its_task_alone() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = client(&server.url(), LONG).await;
        let r = c.rw_lock("named").unwrap().read().lock().await.unwrap();
        let field = readers(&server, "named").pop().expect("one reader");
        let id = format!(":q:{field}");
        let take = server.cmd(&["HGET", "named", &id]);
        assert!(
            take.as_str().is_some_and(|t| !t.is_empty()),
            "the hold keeps its take: {take:?}"
        );
        server.cmd(&["HSET", "named", &id, "a-later-request"]);
        assert!(matches!(r.unlock().await, Err(Error::NotHeld { .. })));
        assert_eq!(readers(&server, "named"), vec![field.clone()], "the newer hold stays");
        // The hold's own identity releases it.
        let again = c.rw_lock("named").unwrap().read();
        server.cmd(&["HDEL", "named", &field, &format!(":{field}"), &id]);
        let r = again.lock().await.unwrap();
        r.unlock().await.unwrap();
        assert!(readers(&server, "named").is_empty());
    })
    .await
}

/// A client whose waiting writers re-check every 10 s and whose readers
/// held back by a mark wait for its end (30 s): within a test's bound,
/// only messages wake them.
async fn slow_client(server: &RedisServer) -> lockwarden::Result<lockwarden::Client> {
    lockwarden::Client::builder(&server.url())
        .watchdog_lease(LONG)
        .fair_waiter_timeout(LONG)
        .build()
        .await
}

/// The last reader's release, with a writer waiting, hands the writer the
/// lock and tells the writers' channel only: the readers waiting behind the
/// writer's mark are not woken to be refused again (each would make an
/// attempt), and the writer takes the lock from the message, without an
/// attempt of its own (nor waiting for its pause). The writer's release
/// then lets the readers in, again by a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_readers_release_wakes_the_writer_and_not_the_readers_behind_it() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let slow = || slow_client(&server);
        let holder = slow().await.unwrap();
        let r = holder.rw_lock("turns").unwrap().read();
        let held = r.try_lock(Duration::ZERO, Some(LONG)).await.unwrap().expect("free");
        let wc = slow().await.unwrap();
        let w = wc.rw_lock("turns").unwrap().write();
        let writer = tokio::spawn(async move { w.try_lock(LONG, Some(LONG)).await });
        assert!(eventually(Duration::from_secs(5), || marks(&server, "turns") == 1).await);
        let mut waiting = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..2 {
            let c = slow().await.unwrap();
            let r = c.rw_lock("turns").unwrap().read();
            waiting.push(tokio::spawn(async move { r.try_lock(LONG, Some(LONG)).await }));
            clients.push(c);
        }
        assert!(
            eventually(Duration::from_secs(5), || clients
                .iter()
                .all(|c| c.waiting_channels() == 1))
            .await
        );
        // Each reader's listening attempt was refused (it listens once it
        // made one after subscribing).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let calls = server.command_calls("evalsha");
        held.unlock().await.unwrap();
        let wg = tokio::time::timeout(Duration::from_secs(3), writer)
            .await
            .expect("the writer woken by the release")
            .unwrap()
            .unwrap()
            .expect("the writer's lock");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            server.command_calls("evalsha") - calls,
            1,
            "the release alone: no attempt of the writer's, no reader's"
        );
        // The hold the release made is the writer's, at one level.
        let field = wg.owner().field().to_string();
        assert_eq!(server.cmd(&["HGET", "turns", &field]).as_str(), Some("1"));
        assert_eq!(marks(&server, "turns"), 0, "the writer's mark went with the grant");
        wg.unlock().await.unwrap();
        for h in waiting {
            let g = tokio::time::timeout(Duration::from_secs(3), h)
                .await
                .expect("a reader woken by the writer's release")
                .unwrap()
                .unwrap()
                .expect("the read lock");
            g.unlock().await.unwrap();
        }
    })
    .await
}

/// A reader whose client listens on the readers' channel already (another
/// of its waits does) makes one attempt before it sleeps, not two: its
/// first attempt listens, so its refusal marks the hold and stands. A
/// writer still makes two (its first attempt leaves no mark, see
/// `WriteWait::channel`). The unlock lets both waits in, by its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_a_channel_its_client_has_open_makes_one_attempt() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let slow = || slow_client(&server);
        for write in [false, true] {
            let name = if write { "open-w" } else { "open-r" };
            let holder = slow().await.unwrap();
            // Readers wait behind a writer; writers behind a reader.
            let rw = holder.rw_lock(name).unwrap();
            let side = if write { rw.read() } else { rw.write() };
            let held = side.try_lock(Duration::ZERO, Some(LONG)).await.unwrap().expect("free");
            let c = slow().await.unwrap();
            let mut waits = Vec::new();
            let mut spawn = |c: &lockwarden::Client| {
                let rw = c.rw_lock(name).unwrap();
                let lock = if write { rw.write() } else { rw.read() };
                waits.push(tokio::spawn(async move {
                    let g = lock.try_lock(LONG, Some(LONG)).await.unwrap().expect("the lock");
                    g.unlock().await.unwrap();
                }));
            };
            spawn(&c);
            assert!(eventually(Duration::from_secs(5), || c.waiting_channels() == 1).await);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let calls = server.command_calls("evalsha");
            spawn(&c);
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                server.command_calls("evalsha") - calls,
                if write { 2 } else { 1 },
                "write {write}: the attempts before the wait sleeps"
            );
            held.unlock().await.unwrap();
            for h in waits {
                tokio::time::timeout(Duration::from_secs(3), h)
                    .await
                    .expect("woken by the unlock")
                    .unwrap();
            }
        }
    })
    .await
}

/// The fields of the write side's direct grant machinery in the hash: the
/// waiting writers' asks (`:wa:<field>`), and the write hold's `:take`.
fn asks(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    let all = server.cmd(&["HGETALL", key]).strings();
    all.chunks(2)
        .filter(|kv| kv[0].starts_with(":wa:"))
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect()
}

/// The server's clock, in ms.
fn server_ms(server: &RedisServer) -> i64 {
    let t = server.cmd(&["TIME"]).strings();
    t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
}

/// A reader holding `name` (from its own client, kept alive beside it).
async fn read_held(server: &RedisServer, name: &str) -> (lockwarden::Client, lockwarden::LockGuard) {
    let holder = client(&server.url(), LONG).await;
    let held = holder
        .rw_lock(name)
        .unwrap()
        .read()
        .try_lock(Duration::ZERO, Some(LONG))
        .await
        .unwrap()
        .expect("free");
    (holder, held)
}

/// A writer waiting behind a reader, its ask left beside its mark; the
/// writer's client reaches the server through `proxy` and looks again
/// every third of `waiter_timeout`.
async fn asking_writer(
    server: &RedisServer,
    proxy: &Proxy,
    name: &'static str,
    waiter_timeout: Duration,
) -> (
    lockwarden::Client,
    tokio::task::JoinHandle<lockwarden::Result<Option<lockwarden::LockGuard>>>,
) {
    let c = lockwarden::Client::builder(&proxy.url())
        .watchdog_lease(LONG)
        .fair_waiter_timeout(waiter_timeout)
        .build()
        .await
        .unwrap();
    let w = c.rw_lock(name).unwrap().write();
    let writer = tokio::spawn(async move { w.try_lock(LONG, Some(LONG)).await });
    assert!(eventually(Duration::from_secs(5), || asks(server, name).len() == 1).await);
    (c, writer)
}

/// The release that leaves the lock free hands it to the waiting writer
/// even when the message saying so is lost on the way: the hold is the
/// writer's from the release on, and the writer's next attempt finds it as
/// its own (one level, not a second one) and sets its own lease on it (the
/// grant's first lease is only the writer's mark's time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_grant_whose_message_is_lost_is_found_by_its_next_attempt() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let (_holder, held) = read_held(&server, "lost-grant").await;
        let (_c, writer) = asking_writer(&server, &proxy, "lost-grant", Duration::from_secs(3)).await;
        let (field, ask) = asks(&server, "lost-grant").remove(0);
        let field = field.trim_start_matches(":wa:").to_string();
        let rec = ask.split(' ').nth(2).expect("the ask's record").to_string();
        proxy.hold_messages();
        held.unlock().await.unwrap();
        assert_eq!(
            server.cmd(&["HGET", "lost-grant", &field]).as_str(),
            Some("1"),
            "the release made the writer's hold"
        );
        assert_eq!(
            server.cmd(&["HGET", "lost-grant", ":take"]).as_str(),
            Some(rec.as_str())
        );
        let first = server
            .cmd(&["HGET", "lost-grant", &format!(":{field}")])
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap();
        assert!(
            first - server_ms(&server) <= 3_000,
            "the grant's first lease is the mark's time"
        );
        let g = tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("the writer's next attempt found its grant")
            .unwrap()
            .unwrap()
            .expect("the write lock");
        assert_eq!(g.owner().field(), field);
        assert_eq!(
            server.cmd(&["HGET", "lost-grant", &field]).as_str(),
            Some("1"),
            "one level: the attempt found the grant as its own"
        );
        let deadline = server
            .cmd(&["HGET", "lost-grant", &format!(":{field}")])
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap();
        assert!(deadline - server_ms(&server) > 10_000, "its own lease now");
        proxy.pass_messages();
        g.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "lost-grant"]).as_int(), Some(0), "nothing left");
    })
    .await
}

/// A writer's wait dropped after a release handed it the lock, before it
/// learned of it (the message held up), gives the hold back: the name is
/// free again at once, not at the end of the grant's first lease (30 s
/// here, the mark's time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_writers_wait_gives_back_a_grant_it_never_learned_of() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let (_holder, held) = read_held(&server, "given-back").await;
        let (_c, writer) = asking_writer(&server, &proxy, "given-back", LONG).await;
        let field = asks(&server, "given-back")
            .remove(0)
            .0
            .trim_start_matches(":wa:")
            .to_string();
        proxy.hold_messages();
        held.unlock().await.unwrap();
        assert_eq!(
            server.cmd(&["HGET", "given-back", &field]).as_str(),
            Some("1"),
            "granted"
        );
        writer.abort();
        assert!(writer.await.unwrap_err().is_cancelled());
        assert!(
            eventually(Duration::from_secs(3), || server
                .cmd(&["EXISTS", "given-back"])
                .as_int()
                == Some(0))
            .await,
            "the grant given back, and nothing else left"
        );
        let other = client(&server.url(), LONG).await;
        let g = other
            .rw_lock("given-back")
            .unwrap()
            .write()
            .try_lock(Duration::ZERO, Some(LONG))
            .await
            .unwrap()
            .expect("free at once");
        g.unlock().await.unwrap();
        proxy.pass_messages();
    })
    .await
}

/// A writer's leave that comes late, after its task waits again, leaves
/// the later wait's mark and ask alone (that ask names another request),
/// so readers stay held back for it; the leave of the later wait's own
/// request takes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_leave_of_an_earlier_write_wait_leaves_the_next_wait_of_its_owner_alone() {
    const LEAVE: &str = concat!(
        include_str!("../lua/shared.lua"),
        include_str!("../lua/shared_rw.lua"),
        include_str!("../lua/rw_leave.lua")
    );
    bounded(BOUND, async {
        let server = RedisServer::start();
        let (_holder, held) = read_held(&server, "late-leave").await;
        let (_c, writer) = asking_writer(&server, &Proxy::start(server.port).await, "late-leave", LONG).await;
        let (ask_field, ask) = asks(&server, "late-leave").remove(0);
        let owner = ask_field.trim_start_matches(":wa:").to_string();
        let rec = ask.split(' ').nth(2).expect("the ask's record").to_string();
        let leave = |rec: &str| {
            server.cmd(&[
                "EVAL",
                LEAVE,
                "4",
                "late-leave",
                "lockwarden:{late-leave}:channel",
                "lockwarden:{late-leave}:writers",
                "lockwarden:{late-leave}:token",
                &owner,
                "PUBLISH",
                "0",
                rec,
            ])
        };
        assert_eq!(leave("lockwarden:{late-leave}:req:an-earlier-request"), Reply::Int(0));
        assert_eq!(marks(&server, "late-leave"), 1, "the later wait keeps its mark");
        assert_eq!(
            asks(&server, "late-leave"),
            vec![(ask_field.clone(), ask.clone())],
            "and its ask"
        );
        assert_eq!(leave(&rec), Reply::Int(1), "its own request's leave");
        assert_eq!(marks(&server, "late-leave"), 0);
        assert!(asks(&server, "late-leave").is_empty());
        writer.abort();
        held.unlock().await.unwrap();
    })
    .await
}

/// A grant's `:take` that a renewal leaves behind (it prunes a dead
/// writer's own fields only) is not carried over to the next write hold:
/// a fresh take clears it, so a late re-send of the granted request can
/// never take the new hold for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_write_hold_never_carries_an_earlier_grants_request() {
    const RENEW: &str = include_str!("../lua/renew.lua");
    bounded(BOUND, async {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port).await;
        let (_holder, held) = read_held(&server, "left-take").await;
        let (_c, writer) = asking_writer(&server, &proxy, "left-take", LONG).await;
        let field = asks(&server, "left-take")
            .remove(0)
            .0
            .trim_start_matches(":wa:")
            .to_string();
        // The writer's client hears nothing more, and sends nothing more.
        proxy.hold_messages();
        proxy.stall();
        held.unlock().await.unwrap();
        assert!(
            server.cmd(&["HGET", "left-take", ":take"]).as_str().is_some(),
            "granted"
        );
        // The grant's lease ends; a renewal of it finds it gone and prunes
        // its fields.
        server.cmd(&["HSET", "left-take", &format!(":{field}"), "1"]);
        let renewed = server.cmd(&["EVAL", RENEW, "1", "left-take", "30000", &field]);
        assert_eq!(renewed, Reply::Array(vec![Reply::Int(0)]));
        assert!(
            server.cmd(&["HGET", "left-take", ":take"]).as_str().is_some(),
            "left behind"
        );
        let other = client(&server.url(), LONG).await;
        let g = other
            .rw_lock("left-take")
            .unwrap()
            .write()
            .try_lock(Duration::ZERO, Some(LONG))
            .await
            .unwrap()
            .expect("free");
        assert_eq!(
            server.cmd(&["HGET", "left-take", ":take"]),
            Reply::Nil,
            "the new hold names no earlier request"
        );
        g.unlock().await.unwrap();
        writer.abort();
        proxy.resume();
        proxy.pass_messages();
    })
    .await
}

/// The marks and passes of waiting readers in the hash `key`.
fn reader_marks(server: &RedisServer, key: &str) -> Vec<String> {
    let mut m: Vec<String> = server
        .cmd(&["HKEYS", key])
        .strings()
        .into_iter()
        .filter(|f| f.starts_with(":wr:") || f.starts_with(":rp:"))
        .collect();
    m.sort();
    m
}

/// Two writers taking turns (each asking again as soon as it gave the lock
/// back) never keep a reader out: the write release lets the readers that
/// waited for it in before the next writer. (Before passes the reader was
/// refused for the whole 5 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_taking_turns_never_keep_a_reader_out() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let stop = Arc::new(AtomicBool::new(false));
        let turns = Arc::new(AtomicUsize::new(0));
        let mut writers = Vec::new();
        for _ in 0..2 {
            let c = client(&server.url(), LONG).await;
            let (stop, turns) = (stop.clone(), turns.clone());
            writers.push(tokio::spawn(async move {
                let w = c.rw_lock("turns").unwrap().write();
                while !stop.load(Ordering::Relaxed) {
                    let g = w.lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.unlock().await.unwrap();
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        assert!(eventually(Duration::from_secs(10), || turns.load(Ordering::Relaxed) >= 20).await);
        let c = client(&server.url(), LONG).await;
        let r = c.rw_lock("turns").unwrap().read();
        for _ in 0..5 {
            let before = turns.load(Ordering::Relaxed);
            let g = r
                .try_lock(Duration::from_secs(5), LONG)
                .await
                .unwrap()
                .expect("the reader gets in between the writers' turns");
            // It went in while the writers kept going, not after they stopped.
            assert!(turns.load(Ordering::Relaxed) >= before);
            g.unlock().await.unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.await.unwrap();
        }
        assert!(turns.load(Ordering::Relaxed) > 20, "the writers kept their turns");
    })
    .await
}

/// A reader that waited for a writer goes in before the writer that
/// waited behind it; that writer goes in once the reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_waited_for_a_writer_goes_in_before_the_next_writer() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = client(&server.url(), LONG).await;
        let c = client(&server.url(), LONG).await;
        let first = a.rw_lock("phase").unwrap().write().lock().await.unwrap();
        let r = b.rw_lock("phase").unwrap().read();
        let reader = tokio::spawn(async move { r.lock().await.unwrap() });
        assert!(eventually(Duration::from_secs(5), || reader_marks(&server, "phase").len() == 1).await);
        let w = c.rw_lock("phase").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await.unwrap() });
        assert!(eventually(Duration::from_secs(5), || marks(&server, "phase") == 1).await);
        first.unlock().await.unwrap();
        // The reader goes in on its pass, past the waiting writer's mark.
        let read = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("the reader goes in")
            .unwrap();
        assert!(reader_marks(&server, "phase").is_empty(), "its pass is used");
        assert!(!writer.is_finished(), "the writer waits for the reader");
        read.unlock().await.unwrap();
        let write = tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("then the writer goes in")
            .unwrap();
        write.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "phase"]).as_int(), Some(0), "nothing left");
    })
    .await
}

/// A reader's wait dropped takes its mark (or the pass a write release
/// made of it) back: the writer behind it is not held back until the
/// mark's deadline (the waiter timeout, here 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_readers_pass_holds_no_writer_back() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = client(&server.url(), LONG).await;
        let b = slow_client(&server).await.unwrap();
        let c = client(&server.url(), LONG).await;
        let first = a.rw_lock("pass").unwrap().write().lock().await.unwrap();
        let r = b.rw_lock("pass").unwrap().read();
        let reader = tokio::spawn(async move { r.lock().await });
        assert!(eventually(Duration::from_secs(5), || reader_marks(&server, "pass").len() == 1).await);
        // Its mark lasts 30 s (the client's waiter timeout), and the unlock
        // would make it a pass: dropped, the wait takes it back.
        reader.abort();
        let w = c.rw_lock("pass").unwrap().write();
        let writer = tokio::spawn(async move { w.lock().await.unwrap() });
        let started = Instant::now();
        first.unlock().await.unwrap();
        let write = tokio::time::timeout(Duration::from_secs(4), writer)
            .await
            .expect("the writer goes in before the pass would lapse")
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(4));
        write.unlock().await.unwrap();
    })
    .await
}

/// Three writers taking turns each get turns: the release hands the lock
/// to the waiting writer whose mark was renewed longest ago, not to the
/// first by field (with which the two writers first by field handed the
/// lock to each other and the third got 1 turn in 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_writers_taking_turns_each_get_turns() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for _ in 0..3 {
            let c = client(&server.url(), LONG).await;
            let stop = stop.clone();
            writers.push(tokio::spawn(async move {
                let w = c.rw_lock("three").unwrap().write();
                let mut turns = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let g = w.lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.unlock().await.unwrap();
                    turns += 1;
                }
                turns
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        let mut turns = Vec::new();
        for w in writers {
            turns.push(w.await.unwrap());
        }
        assert!(turns.iter().all(|&t| t >= 10), "every writer gets turns: {turns:?}");
    })
    .await
}
