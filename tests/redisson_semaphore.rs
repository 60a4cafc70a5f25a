//! The semaphore in Redisson's layout (`Client::redisson_semaphore`, or
//! `Client::semaphore` with `redisson_compatible`) beside Redisson's
//! `RSemaphore` and `RPermitExpirableSemaphore`. node-redisson has no
//! semaphore, so the Redisson side here is a few scripts of our own that
//! make Redisson's decisions on its layout: a counter of free permits at
//! the name (taken by DECRBY when it covers the ask, given back by INCRBY),
//! the new count published on `redisson_sc:{name}` by every release, and
//! for expiring permits a sorted set `{name}:timeout` of permit ids scored
//! with their deadline on the client's clock, reclaimed by the next acquire
//! once passed.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use lockwarden::{Client, Error, Lease};

const BOUND: Duration = Duration::from_secs(60);

/// How late a wake-up may come and still be one: the waits below are
/// otherwise bounded by a lease of a minute or more.
const WOKEN_WITHIN: Duration = Duration::from_secs(2);

/// RSemaphore's tryAcquire(n): KEYS[1] the counter; ARGV[1] n. 1 taken, 0 not.
const R_TRY_ACQUIRE: &str = "local v = redis.call('GET', KEYS[1]) \
    if v and tonumber(v) >= tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[1]) return 1 end \
    return 0";

/// RSemaphore's release(n): KEYS[1] the counter, KEYS[2] the channel; ARGV[1] n.
const R_RELEASE: &str = "local v = redis.call('INCRBY', KEYS[1], ARGV[1]) \
    redis.call('PUBLISH', KEYS[2], v) return v";

/// trySetPermits(n): KEYS[1] the counter, KEYS[2] the channel; ARGV[1] n.
const R_TRY_SET: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end \
    redis.call('SET', KEYS[1], ARGV[1]) redis.call('PUBLISH', KEYS[2], ARGV[1]) return 1";

/// RPermitExpirableSemaphore's tryAcquire of one permit: KEYS[1] the
/// counter, KEYS[2] the timeout set, KEYS[3] the channel; ARGV[1] the
/// permit id, ARGV[2] its deadline, ARGV[3] the client's clock now (ms).
/// Reclaims passed permits first. 1 taken, 0 not.
const RX_TRY_ACQUIRE: &str = "local gone = redis.call('ZRANGEBYSCORE', KEYS[2], 0, ARGV[3]) \
    if #gone > 0 then \
      redis.call('ZREM', KEYS[2], unpack(gone)) \
      redis.call('PUBLISH', KEYS[3], redis.call('INCRBY', KEYS[1], #gone)) \
    end \
    local v = redis.call('GET', KEYS[1]) \
    if v and tonumber(v) >= 1 then \
      redis.call('DECRBY', KEYS[1], 1) redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) return 1 \
    end \
    return 0";

/// RPermitExpirableSemaphore's release(id): KEYS as above; ARGV[1] the id.
const RX_RELEASE: &str = "if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end \
    redis.call('PUBLISH', KEYS[3], redis.call('INCRBY', KEYS[1], 1)) return 1";

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A Redisson client's view of the semaphore `name`.
struct Redisson<'a> {
    server: &'a RedisServer,
    counter: String,
    timeouts: String,
    channel: String,
}

impl<'a> Redisson<'a> {
    fn new(server: &'a RedisServer, name: &str) -> Redisson<'a> {
        Redisson {
            server,
            counter: name.to_string(),
            timeouts: format!("{{{name}}}:timeout"),
            channel: format!("redisson_sc:{{{name}}}"),
        }
    }

    fn eval(&self, script: &str, keys: &[&str], args: &[&str]) -> i64 {
        let n = keys.len().to_string();
        let mut cmd = vec!["EVAL", script, &n];
        cmd.extend(keys);
        cmd.extend(args);
        let reply = self.server.cmd(&cmd);
        reply.as_int().unwrap_or_else(|| panic!("{reply:?}"))
    }

    fn try_acquire(&self, n: u32) -> bool {
        self.eval(R_TRY_ACQUIRE, &[&self.counter], &[&n.to_string()]) == 1
    }

    fn release(&self, n: u32) {
        self.eval(R_RELEASE, &[&self.counter, &self.channel], &[&n.to_string()]);
    }

    fn try_set_permits(&self, n: u32) -> bool {
        self.eval(R_TRY_SET, &[&self.counter, &self.channel], &[&n.to_string()]) == 1
    }

    /// An expiring permit `id` with `lease` on the client's clock.
    fn try_acquire_expiring(&self, id: &str, lease: Duration) -> bool {
        let now = now_ms();
        let deadline = (now + lease.as_millis() as i64).to_string();
        self.eval(
            RX_TRY_ACQUIRE,
            &[&self.counter, &self.timeouts, &self.channel],
            &[id, &deadline, &now.to_string()],
        ) == 1
    }

    fn release_expiring(&self, id: &str) -> bool {
        self.eval(RX_RELEASE, &[&self.counter, &self.timeouts, &self.channel], &[id]) == 1
    }

    fn count(&self) -> Option<i64> {
        self.server.cmd(&["GET", &self.counter]).as_int()
    }

    fn members(&self) -> Vec<String> {
        self.server.cmd(&["ZRANGE", &self.timeouts, "0", "-1"]).strings()
    }

    /// A subscriber to the channel, as Redisson's waiters listen.
    fn listen(&self) -> Resp {
        let port: u16 = self.server.url().rsplit(':').next().unwrap().parse().unwrap();
        let mut sub = Resp::connect(port).unwrap();
        sub.cmd(&["SUBSCRIBE", &self.channel]);
        sub
    }
}

async fn compatible(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(&server.url())
        .watchdog_lease(watchdog)
        .wake_patience(NO_PATIENCE)
        .redisson_compatible(true)
        .build()
        .await
        .expect("connect")
}

#[tokio::test]
async fn both_libraries_count_one_set_of_permits() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let sem = c.semaphore("jobs", 5).unwrap();
        assert!(sem.is_redisson());
        let r = Redisson::new(&server, "jobs");
        // Redisson's trySetPermits comes first: its number stands.
        assert!(r.try_set_permits(2));
        assert!(!sem.try_set_permits(7).await.unwrap(), "a counter is there");
        assert!(r.try_acquire(1), "Redisson takes one");
        let p = sem
            .try_acquire(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .expect("one left");
        assert_eq!(r.count(), Some(0));
        let mine = r.members();
        assert_eq!(
            mine,
            vec![p.id()],
            "the permit is recorded as Redisson's expiring ones are"
        );
        let score: i64 = server.cmd(&["ZSCORE", "{jobs}:timeout", &p.id()]).as_int().unwrap();
        assert!(
            (score - now_ms()).abs() < 31_000 && score > now_ms(),
            "scored with its deadline: {score}"
        );
        assert!(sem
            .try_acquire(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .is_none());
        assert!(
            !r.try_acquire(1),
            "Redisson refused while lockwarden holds the last permit"
        );
        assert!(!r.try_acquire_expiring("0123456789abcdef", Duration::from_secs(60)));
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        assert_eq!(
            sem.acquired_permits().await.unwrap(),
            1,
            "RSemaphore holders keep no record"
        );
        // lockwarden's release gives the permit back and tells Redisson's waiters the count.
        let mut sub = r.listen();
        p.release().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("1"));
        assert_eq!(r.count(), Some(1));
        assert!(r.members().is_empty());
        assert!(r.try_acquire_expiring("0123456789abcdef", Duration::from_secs(60)));
        // Taking two at once: two members, both given back together.
        r.release(1);
        assert!(r.release_expiring("0123456789abcdef"));
        assert_eq!(r.count(), Some(2));
        let two = sem
            .try_acquire_many(2, Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .expect("two free");
        assert_eq!(r.members().len(), 2);
        assert_eq!(r.count(), Some(0));
        two.release().await.unwrap();
        assert_eq!(r.count(), Some(2));
        assert!(r.members().is_empty());
        // Nothing of lockwarden's own beside Redisson's keys but replay records.
        let keys = server.keys("*");
        assert!(
            keys.iter()
                .all(|k| k == "jobs" || k.starts_with("lockwarden:{jobs}:req:")),
            "{keys:?}"
        );
    })
    .await
}

#[tokio::test]
async fn each_side_wakes_the_other() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let sem = c.redisson_semaphore("pool", 1).unwrap();
        let r = Redisson::new(&server, "pool");
        assert!(r.try_set_permits(1));
        // A Redisson holder with a long lease: only the message can wake
        // lockwarden's waiter early.
        assert!(r.try_acquire_expiring("redisson-permit-1", Duration::from_secs(120)));
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move {
                let p = sem.acquire().await.unwrap();
                (Instant::now(), p)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished());
        let released = Instant::now();
        assert!(r.release_expiring("redisson-permit-1"));
        let (got, p) = waiter.await.unwrap();
        let late = got - released;
        assert!(
            late < WOKEN_WITHIN,
            "lockwarden's waiter woke {late:?} after Redisson's release"
        );
        // And lockwarden's release wakes a Redisson waiter.
        let mut sub = r.listen();
        assert!(!r.try_acquire(1));
        let released = Instant::now();
        p.release().await.unwrap();
        let msg = Resp::message(&mut sub, WOKEN_WITHIN);
        assert_eq!(msg.as_deref(), Some("1"), "{:?} after the release", released.elapsed());
        assert!(r.try_acquire(1));
        // add_permits publishes too (a Redisson waiter wakes).
        assert_eq!(sem.add_permits(1).await.unwrap(), 1);
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("1"));
        assert_eq!(r.count(), Some(1));
    })
    .await
}

#[tokio::test]
async fn a_dead_holders_permits_come_back_to_either_side() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let sem = c.redisson_semaphore("dead", 1).unwrap();
        let r = Redisson::new(&server, "dead");
        // A Redisson holder that dies: its permit's deadline passes, and
        // lockwarden's next acquire reclaims it (its wait bounded by it).
        assert!(r.try_set_permits(1));
        assert!(r.try_acquire_expiring("redisson-dies", Duration::from_millis(800)));
        let start = Instant::now();
        let p = sem
            .try_acquire(Duration::from_secs(10), Lease::Watchdog)
            .await
            .unwrap()
            .expect("reclaimed");
        assert!(start.elapsed() >= Duration::from_millis(500), "{:?}", start.elapsed());
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
        assert_eq!(r.members(), vec![p.id()]);
        p.release().await.unwrap();
        // A lockwarden holder with a fixed lease that never releases:
        // Redisson's acquire reclaims it after the lease, not before.
        let dying = sem
            .try_acquire(Duration::ZERO, Duration::from_millis(800))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(dying);
        assert!(!r.try_acquire_expiring("redisson-2", Duration::from_secs(60)));
        let back = eventually(Duration::from_secs(5), || {
            r.try_acquire_expiring("redisson-2", Duration::from_secs(60))
        })
        .await;
        assert!(back, "the dead lockwarden permit was never reclaimed");
        assert_eq!(r.count(), Some(0));
    })
    .await
}

#[tokio::test]
async fn renewals_keep_a_permit_past_its_lease_and_flushall_is_a_loss() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_millis(900)).await;
        let sem = c.redisson_semaphore("kept", 1).unwrap();
        let r = Redisson::new(&server, "kept");
        let p = sem.acquire().await.unwrap();
        let first: i64 = server.cmd(&["ZSCORE", "{kept}:timeout", &p.id()]).as_int().unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // Three leases later Redisson (which reclaims by deadline) still
        // finds it held: the watchdog moved the member's deadline.
        assert!(!r.try_acquire_expiring("redisson-x", Duration::from_secs(60)));
        let later: i64 = server.cmd(&["ZSCORE", "{kept}:timeout", &p.id()]).as_int().unwrap();
        assert!(later > first + 1000, "deadline {first} -> {later}");
        assert!(!p.is_lost());
        // The data lost: the holder is told at its next renewal.
        server.flushall();
        let reason = tokio::time::timeout(Duration::from_secs(3), p.lost()).await;
        assert!(reason.is_ok(), "the permit was not reported lost");
        assert!(matches!(p.release().await, Err(Error::NotHeld { .. })));
        // The next acquire starts the count again from the handle's number.
        let again = sem.try_acquire(Duration::ZERO, Lease::Watchdog).await.unwrap();
        assert!(again.is_some());
        assert_eq!(r.count(), Some(0));
    })
    .await
}

#[tokio::test]
async fn never_more_holders_than_permits_across_both_libraries() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        const PERMITS: i64 = 2;
        let sem = c.redisson_semaphore("mixed", PERMITS as u32).unwrap();
        assert!(Redisson::new(&server, "mixed").try_set_permits(PERMITS as u32));
        let inside = Arc::new(AtomicI64::new(0));
        let worst = Arc::new(AtomicI64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let enter = |inside: &AtomicI64, worst: &AtomicI64| {
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            worst.fetch_max(now, Ordering::SeqCst);
        };
        // Redisson's side: two threads, RSemaphore and expiring permits.
        let mut threads = Vec::new();
        for t in 0..2 {
            let (inside, worst, stop) = (inside.clone(), worst.clone(), stop.clone());
            let url = server.url();
            threads.push(std::thread::spawn(move || {
                let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
                let mut conn = Resp::connect(port).unwrap();
                let mut eval = |script: &str, keys: &[&str], args: &[&str]| -> i64 {
                    let n = keys.len().to_string();
                    let mut cmd = vec!["EVAL", script, &n];
                    cmd.extend(keys);
                    cmd.extend(args);
                    conn.cmd(&cmd).as_int().unwrap()
                };
                let mut rounds = 0;
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) && i < 5_000 {
                    i += 1;
                    let id = format!("r{t}-{i}");
                    let got = if t == 0 {
                        eval(R_TRY_ACQUIRE, &["mixed"], &["1"]) == 1
                    } else {
                        let now = now_ms();
                        eval(
                            RX_TRY_ACQUIRE,
                            &["mixed", "{mixed}:timeout", "redisson_sc:{mixed}"],
                            &[&id, &(now + 60_000).to_string(), &now.to_string()],
                        ) == 1
                    };
                    if !got {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    worst.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    if t == 0 {
                        eval(R_RELEASE, &["mixed", "redisson_sc:{mixed}"], &["1"]);
                    } else {
                        eval(RX_RELEASE, &["mixed", "{mixed}:timeout", "redisson_sc:{mixed}"], &[&id]);
                    }
                    rounds += 1;
                }
                rounds
            }));
        }
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (sem, inside, worst) = (sem.clone(), inside.clone(), worst.clone());
            tasks.push(tokio::spawn(async move {
                let mut rounds = 0;
                for _ in 0..40 {
                    let p = sem.try_acquire(Duration::from_secs(10), Lease::Watchdog).await.unwrap();
                    let Some(p) = p else { continue };
                    enter(&inside, &worst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    p.release().await.unwrap();
                    rounds += 1;
                }
                rounds
            }));
        }
        let mut ours = 0;
        for t in tasks {
            ours += t.await.unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        let theirs: i32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(
            ours >= 60 && theirs > 0,
            "lockwarden {ours}, Redisson {theirs} acquisitions"
        );
        assert!(
            worst.load(Ordering::SeqCst) <= PERMITS,
            "{} holders at once with {PERMITS} permits",
            worst.load(Ordering::SeqCst)
        );
        let r = Redisson::new(&server, "mixed");
        assert_eq!(r.count(), Some(PERMITS), "every permit came back");
        assert!(r.members().is_empty());
    })
    .await
}

#[tokio::test]
async fn the_verbs_act_on_redissons_counter() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let sem = c.redisson_semaphore("verbs", 3).unwrap();
        let r = Redisson::new(&server, "verbs");
        // No counter: the handle's number, as the first acquire would set it.
        assert_eq!(sem.available_permits().await.unwrap(), 3);
        assert_eq!(r.count(), None, "reading wrote nothing");
        assert!(sem.try_set_permits(4).await.unwrap());
        assert!(!r.try_set_permits(9), "Redisson's trySetPermits finds the counter");
        assert_eq!(r.count(), Some(4));
        assert_eq!(sem.add_permits(-1).await.unwrap(), 3);
        assert!(matches!(sem.add_permits(-4).await, Err(Error::Config(_))));
        assert_eq!(r.count(), Some(3));
        // A Redisson expiring permit, given back by its id in hex (as a
        // Java service would print it): 16 bytes, here printable ones.
        assert!(r.try_acquire_expiring("0123456789abcdef", Duration::from_secs(60)));
        assert_eq!(sem.acquired_permits().await.unwrap(), 1);
        assert_eq!(sem.total_permits().await.unwrap(), 3);
        sem.release_by_id("30313233343536373839616263646566").await.unwrap();
        assert!(r.members().is_empty());
        assert_eq!(r.count(), Some(3));
        assert!(matches!(
            sem.release_by_id("30313233343536373839616263646566").await,
            Err(Error::NotHeld { .. })
        ));
        // Drain takes every free permit, as one acquisition of lockwarden's.
        let all = sem.drain_permits(Lease::Watchdog).await.unwrap().expect("three free");
        assert_eq!(all.permits(), 3);
        assert_eq!(r.count(), Some(0));
        sem.release_by_id(&all.id()).await.unwrap();
        assert_eq!(r.count(), Some(3));
        assert!(matches!(all.release().await, Err(Error::NotHeld { .. })));
    })
    .await
}

#[tokio::test]
async fn a_name_of_another_kind_is_refused_and_left_alone() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let plain = Client::builder(&server.url()).build().await.unwrap();
        // lockwarden's own semaphore on the name: its layout is not Redisson's.
        let own = plain.semaphore("own", 2).unwrap();
        let held = own.acquire().await.unwrap();
        let sem = c.redisson_semaphore("own", 2).unwrap();
        let e = sem.try_acquire(Duration::ZERO, Lease::Watchdog).await.unwrap_err();
        assert!(matches!(e, Error::WrongKind { .. }), "{e:?}");
        held.release().await.unwrap();
        // A Redisson lock on the name.
        server.cmd(&["HSET", "rlock", "5f0c1f9e-1d7a-4c2b-9a51-0d6e2b7c3a10:1", "1"]);
        let e = c
            .redisson_semaphore("rlock", 1)
            .unwrap()
            .try_acquire(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::HeldByRedisson { .. }), "{e:?}");
        // A counter that is no number.
        server.cmd(&["SET", "text", "hello"]);
        let e = c
            .redisson_semaphore("text", 1)
            .unwrap()
            .available_permits()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::WrongType { .. }), "{e:?}");
        assert_eq!(server.cmd(&["GET", "text"]).as_str(), Some("hello"));
        // Without the setting, Redisson's counter is refused, as before.
        assert!(Redisson::new(&server, "counted").try_set_permits(2));
        let e = plain
            .semaphore("counted", 2)
            .unwrap()
            .try_acquire(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::WrongType { .. }), "{e:?}");
        assert_eq!(Redisson::new(&server, "counted").count(), Some(2));
        // The fair semaphore has no Redisson counterpart: lockwarden's layout.
        let fair = c.fair_semaphore("fair", 1).unwrap();
        assert!(!fair.is_redisson());
    })
    .await
}

/// The command: `run --permits N --redisson-compatible` takes from
/// Redisson's counter and records its permit as Redisson's expiring ones
/// are; `unlock --permit` gives back a Redisson permit by its hex id.
#[test]
fn the_command_takes_and_gives_back_redisson_permits() {
    let server = RedisServer::start();
    let r = Redisson::new(&server, "cmd");
    assert!(r.try_set_permits(2));
    assert!(r.try_acquire_expiring("0123456789abcdef", Duration::from_secs(60)));
    let dir = std::env::temp_dir().join(format!("lockwarden-rsem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lockwarden = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"));
        c.env_remove("LOCKWARDEN_REDIS")
            .args(["--redis", &server.url(), "--redisson-compatible"])
            .args(args);
        c
    };
    let mut running = lockwarden(&["run", "cmd", "--permits", "1", "--"])
        .args([
            "sh",
            "-c",
            &format!("echo $LOCKWARDEN_PERMIT > {}/id; sleep 2", dir.display()),
        ])
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let id = loop {
        match std::fs::read_to_string(dir.join("id")) {
            Ok(s) if s.ends_with('\n') => break s.trim().to_string(),
            _ => {
                assert!(Instant::now() < until, "the command never ran");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert_eq!(r.count(), Some(0));
    let mut members = r.members();
    members.sort();
    let mut want = vec![id.clone(), "0123456789abcdef".to_string()];
    want.sort();
    assert_eq!(members, want);
    let o = lockwarden(&["unlock", "cmd", "--permit", "30313233343536373839616263646566"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(r.count(), Some(1), "the Redisson permit came back");
    assert!(running.wait().unwrap().success());
    assert_eq!(r.count(), Some(2), "the command's permit came back");
    assert!(r.members().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `status` and `list` (the library's and the command's) show a Redisson
/// semaphore as such, with its permits held by an id.
#[tokio::test]
async fn status_and_list_show_a_redisson_semaphore() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let r = Redisson::new(&server, "shown");
        assert!(r.try_set_permits(3));
        assert!(r.try_acquire_expiring("0123456789abcdef", Duration::from_secs(60)));
        let p = c.redisson_semaphore("shown", 3).unwrap().acquire().await.unwrap();
        let plain = Client::builder(&server.url()).build().await.unwrap();
        for client in [&c, &plain] {
            let s = client.lock("shown").unwrap().status().await.unwrap();
            assert_eq!(s.kind, Some(lockwarden::LockKind::RedissonSemaphore));
            let mut holders: Vec<String> = s.holders.iter().map(|(f, _)| f.clone()).collect();
            holders.sort();
            let mut want = vec![p.id(), "0123456789abcdef".to_string()];
            want.sort();
            assert_eq!(holders, want);
            let lease = s.remaining_lease.expect("a deadline");
            assert!(
                lease > Duration::from_secs(50) && lease <= Duration::from_secs(60),
                "{lease:?}"
            );
            let listed = client.locks("*").await.unwrap();
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert_eq!(listed[0].name, "shown");
            assert_eq!(listed[0].kind, Some(lockwarden::LockKind::RedissonSemaphore));
        }
        let command = |args: &[&str]| {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
                .env_remove("LOCKWARDEN_REDIS")
                .args(["--redis", &server.url()])
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let out = command(&["status", "shown"]);
        assert!(out.starts_with("Redisson semaphore \"shown\""), "{out}");
        let out = command(&["list", "--json"]);
        assert!(
            out.contains("\"shown\"") && out.contains("\"Redisson semaphore\""),
            "{out}"
        );
        p.release().await.unwrap();
    })
    .await
}
