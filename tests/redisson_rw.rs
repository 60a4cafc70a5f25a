//! The read-write lock in Redisson's layout (`Client::redisson_rw_lock`,
//! or `Client::rw_lock` with `redisson_compatible`) beside Redisson's
//! `RReadWriteLock`. node-redisson has no read-write lock, so the Redisson
//! side here is a few scripts of our own that make Redisson's decisions on
//! its layout: a hash at the name with `mode` (`read` or `write`), a
//! reader's field `<uuid>:<thread>` with its count and a key
//! `{name}:<uuid>:<thread>:rwlock_timeout:<k>` per level with the lease as
//! its TTL, a writer's field `<uuid>:<thread>:write`; a read unlock sets the
//! hash's TTL to the longest of every hold's timeout keys (or deletes it
//! and publishes `0` on `redisson_rwlock:{name}`), a write unlock deletes
//! the hash when only `mode` is left and publishes `1`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Error, Lease, LockKind};

const BOUND: Duration = Duration::from_secs(60);

/// How late a wake-up may come and still be one: the waits below are
/// otherwise bounded by a lease of a minute.
const WOKEN_WITHIN: Duration = Duration::from_secs(2);

/// A Redisson client's id, as it writes it in its holders' fields.
const JAVA: &str = "5f0c1f9e-1d7a-4c2b-9a51-0d6e2b7c3a10";

/// Read lock: KEYS[1] the hash, KEYS[2] the caller's timeout prefix;
/// ARGV[1] lease, ARGV[2] the reader's field, ARGV[3] its writer field.
/// "OK" taken, else the hash's PTTL.
const R_READ: &str = "local mode = redis.call('HGET', KEYS[1], 'mode') \
    if not mode then \
      redis.call('HSET', KEYS[1], 'mode', 'read', ARGV[2], 1) \
      redis.call('SET', KEYS[2] .. ':1', 1, 'PX', ARGV[1]) \
      redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 'OK' \
    end \
    if mode == 'read' or (mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1) then \
      local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1) \
      redis.call('SET', KEYS[2] .. ':' .. n, 1, 'PX', ARGV[1]) \
      redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[1]))) return 'OK' \
    end \
    return redis.call('PTTL', KEYS[1])";

/// Write lock: KEYS[1] the hash; ARGV[1] lease, ARGV[2] the writer's field.
const R_WRITE: &str = "local mode = redis.call('HGET', KEYS[1], 'mode') \
    if not mode then \
      redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1) \
      redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 'OK' \
    end \
    if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then \
      redis.call('HINCRBY', KEYS[1], ARGV[2], 1) \
      redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]) + ARGV[1]) return 'OK' \
    end \
    return redis.call('PTTL', KEYS[1])";

/// Read unlock: KEYS[1] the hash, KEYS[2] the channel, KEYS[3] the
/// caller's timeout prefix, KEYS[4] the name's tag; ARGV[1] the reader's
/// field. 1 freed, 0 still held, -1 not held.
const R_READ_UNLOCK: &str = "local mode = redis.call('HGET', KEYS[1], 'mode') \
    if not mode then redis.call('PUBLISH', KEYS[2], 0) return 1 end \
    if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end \
    local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1) \
    if n == 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end \
    redis.call('DEL', KEYS[3] .. ':' .. (n + 1)) \
    if redis.call('HLEN', KEYS[1]) > 1 then \
      local best = -3 \
      local flat = redis.call('HGETALL', KEYS[1]) \
      for i = 1, #flat, 2 do \
        local c = tonumber(flat[i + 1]) \
        if c then for k = c, 1, -1 do \
          best = math.max(best, redis.call('PTTL', KEYS[4] .. ':' .. flat[i] .. ':rwlock_timeout:' .. k)) \
        end end \
      end \
      if best > 0 then redis.call('PEXPIRE', KEYS[1], best) return 0 end \
      if mode == 'write' then return 0 end \
    end \
    redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[2], 0) return 1";

/// Write unlock: KEYS[1] the hash, KEYS[2] the channel; ARGV[1] lease,
/// ARGV[2] the writer's field. 1 freed, 0 still held, -1 not held.
const R_WRITE_UNLOCK: &str = "local mode = redis.call('HGET', KEYS[1], 'mode') \
    if not mode then redis.call('PUBLISH', KEYS[2], 1) return 1 end \
    if mode ~= 'write' or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return -1 end \
    local n = redis.call('HINCRBY', KEYS[1], ARGV[2], -1) \
    if n > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 0 end \
    redis.call('HDEL', KEYS[1], ARGV[2]) \
    if redis.call('HLEN', KEYS[1]) == 1 then \
      redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[2], 1) \
    else redis.call('HSET', KEYS[1], 'mode', 'read') end \
    return 1";

/// A Redisson client's view of the read-write lock `name`, as thread `t`,
/// over a connection of its own.
struct Redisson {
    conn: std::cell::RefCell<Resp>,
    port: u16,
    name: String,
    t: u32,
}

impl Redisson {
    fn new(server: &RedisServer, name: &str, t: u32) -> Redisson {
        Redisson::at(port_of(server), name, t)
    }

    fn at(port: u16, name: &str, t: u32) -> Redisson {
        Redisson {
            conn: std::cell::RefCell::new(Resp::connect(port).unwrap()),
            port,
            name: name.to_string(),
            t,
        }
    }

    fn reader(&self) -> String {
        format!("{JAVA}:{}", self.t)
    }

    fn writer(&self) -> String {
        format!("{JAVA}:{}:write", self.t)
    }

    fn prefix(&self) -> String {
        format!("{{{}}}:{}:rwlock_timeout", self.name, self.reader())
    }

    fn channel(&self) -> String {
        format!("redisson_rwlock:{{{}}}", self.name)
    }

    fn eval(&self, script: &str, keys: &[&str], args: &[&str]) -> Reply {
        let n = keys.len().to_string();
        let mut cmd = vec!["EVAL", script, &n];
        cmd.extend(keys);
        cmd.extend(args);
        self.conn.borrow_mut().cmd(&cmd)
    }

    fn read(&self, lease: Duration) -> bool {
        let lease = lease.as_millis().to_string();
        let r = self.eval(
            R_READ,
            &[&self.name, &self.prefix()],
            &[&lease, &self.reader(), &self.writer()],
        );
        r.as_str() == Some("OK")
    }

    fn write(&self, lease: Duration) -> bool {
        let lease = lease.as_millis().to_string();
        self.eval(R_WRITE, &[&self.name], &[&lease, &self.writer()]).as_str() == Some("OK")
    }

    fn read_unlock(&self) -> i64 {
        let tag = format!("{{{}}}", self.name);
        let r = self.eval(
            R_READ_UNLOCK,
            &[&self.name, &self.channel(), &self.prefix(), &tag],
            &[&self.reader()],
        );
        r.as_int().unwrap_or_else(|| panic!("{r:?}"))
    }

    fn write_unlock(&self) -> i64 {
        let r = self.eval(
            R_WRITE_UNLOCK,
            &[&self.name, &self.channel()],
            &["30000", &self.writer()],
        );
        r.as_int().unwrap_or_else(|| panic!("{r:?}"))
    }

    fn listen(&self) -> Resp {
        let mut sub = Resp::connect(self.port).unwrap();
        sub.cmd(&["SUBSCRIBE", &self.channel()]);
        sub
    }
}

fn port_of(server: &RedisServer) -> u16 {
    server.url().rsplit(':').next().unwrap().parse().unwrap()
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

fn fields(server: &RedisServer, key: &str) -> Vec<String> {
    let mut f: Vec<String> = server.cmd(&["HKEYS", key]).strings();
    f.sort();
    f
}

#[tokio::test]
async fn readers_share_and_writers_exclude_across_both_libraries() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let other = compatible(&server, Duration::from_secs(30)).await;
        let rw = c.rw_lock("doc").unwrap();
        let java = Redisson::new(&server, "doc", 1);
        let java2 = Redisson::new(&server, "doc", 2);
        let zero = Duration::ZERO;

        // A Redisson reader: lockwarden reads beside it, never writes.
        assert!(java.read(Duration::from_secs(60)));
        let r = rw
            .read()
            .try_lock(zero, Lease::Watchdog)
            .await
            .unwrap()
            .expect("readers share");
        let o = other.rw_lock("doc").unwrap();
        assert!(o.write().try_lock(zero, Lease::Watchdog).await.unwrap().is_none());
        // Its own owner asking for the write side would wait for itself.
        let e = rw.write().try_lock(zero, Lease::Watchdog).await;
        assert!(matches!(e, Err(Error::WouldDeadlock { .. })), "{e:?}");
        assert!(
            !java2.write(Duration::from_secs(60)),
            "Redisson's writer over two readers"
        );
        let mine = r.owner().field().to_string();
        assert_eq!(fields(&server, "doc"), {
            let mut want = vec!["mode".to_string(), java.reader(), mine.clone()];
            want.sort();
            want
        });
        let level = format!("{{doc}}:{mine}:rwlock_timeout:1");
        let pttl = server.cmd(&["PTTL", &level]).as_int().unwrap();
        assert!(pttl > 25_000 && pttl <= 30_000, "the read hold's level key: {pttl}");
        r.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", &level]).as_int(), Some(0));
        assert_eq!(java.read_unlock(), 1, "Redisson's last reader frees the lock");
        assert_eq!(server.cmd(&["EXISTS", "doc"]).as_int(), Some(0));

        // A lockwarden writer: nobody else reads or writes; its owner may read.
        let w = rw.write().try_lock(zero, Lease::Watchdog).await.unwrap().expect("free");
        assert!(!java.read(Duration::from_secs(60)));
        assert!(!java.write(Duration::from_secs(60)));
        assert!(o.read().try_lock(zero, Lease::Watchdog).await.unwrap().is_none());
        let own_read = rw
            .read()
            .try_lock(zero, Lease::Watchdog)
            .await
            .unwrap()
            .expect("its owner reads");
        assert!(w.token() > 0);
        own_read.unlock().await.unwrap();
        assert_eq!(server.cmd(&["HGET", "doc", "mode"]).as_str(), Some("write"));
        w.unlock().await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", "doc"]).as_int(), Some(0));

        // A Redisson writer: lockwarden neither reads nor writes.
        assert!(java.write(Duration::from_secs(60)));
        assert!(rw.read().try_lock(zero, Lease::Watchdog).await.unwrap().is_none());
        assert!(rw.write().try_lock(zero, Lease::Watchdog).await.unwrap().is_none());
        assert_eq!(java.write_unlock(), 1);
        // Tokens grow across write holds.
        let a = rw.write().lock().await.unwrap();
        let ta = a.token();
        a.unlock().await.unwrap();
        let b = rw.write().lock().await.unwrap();
        assert!(b.token() > ta);
        b.unlock().await.unwrap();
        assert!(server.keys("*rwlock_timeout*").is_empty(), "{:?}", server.keys("*"));
    })
    .await
}

#[tokio::test]
async fn reentry_counts_are_each_sides_own() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let rw = c.redisson_rw_lock("re").unwrap();
        let java = Redisson::new(&server, "re", 7);
        assert!(java.read(Duration::from_secs(60)));
        assert!(java.read(Duration::from_secs(60)));
        let a = rw.read().lock().await.unwrap();
        let b = rw.read().lock().await.unwrap();
        let mine = a.owner().field().to_string();
        assert_eq!(server.cmd(&["HGET", "re", &mine]).as_int(), Some(2));
        assert_eq!(server.cmd(&["HGET", "re", &java.reader()]).as_int(), Some(2));
        assert_eq!(
            server.keys("{re}:*:rwlock_timeout:*").len(),
            4,
            "a level key per level, each side"
        );
        b.unlock().await.unwrap();
        assert_eq!(java.read_unlock(), 0);
        assert_eq!(server.cmd(&["HGET", "re", &mine]).as_int(), Some(1));
        assert_eq!(server.cmd(&["HGET", "re", &java.reader()]).as_int(), Some(1));
        a.unlock().await.unwrap();
        assert_eq!(java.read_unlock(), 1);
        assert_eq!(server.cmd(&["EXISTS", "re"]).as_int(), Some(0));
        assert!(server.keys("*rwlock_timeout*").is_empty());
    })
    .await
}

/// Redisson's read unlock keeps the hash for as long as the longest level
/// key of any hold: a lockwarden reader's keys keep its hold (without them
/// the hash would be deleted under it, and a Redisson writer let in).
#[tokio::test]
async fn a_redisson_readers_unlock_leaves_a_lockwarden_reader_holding() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let rw = c.redisson_rw_lock("keep").unwrap();
        let java = Redisson::new(&server, "keep", 1);
        let writer = Redisson::new(&server, "keep", 2);
        assert!(java.read(Duration::from_secs(5)));
        let r = rw.read().lock().await.unwrap();
        assert_eq!(java.read_unlock(), 0, "the hash stays");
        assert!(
            !writer.write(Duration::from_secs(60)),
            "Redisson's writer over lockwarden's reader"
        );
        let pttl = server.cmd(&["PTTL", "keep"]).as_int().unwrap();
        assert!(pttl > 25_000, "the hash keeps the lockwarden reader's lease: {pttl}");
        // And the other way: lockwarden's reader leaves first.
        assert!(java.read(Duration::from_secs(60)));
        r.unlock().await.unwrap();
        assert_eq!(server.cmd(&["HGET", "keep", &java.reader()]).as_int(), Some(1));
        let pttl = server.cmd(&["PTTL", "keep"]).as_int().unwrap();
        assert!(pttl > 55_000, "the hash keeps the Redisson reader's lease: {pttl}");
        assert!(!writer.write(Duration::from_secs(60)));
        assert_eq!(java.read_unlock(), 1);
    })
    .await
}

#[tokio::test]
async fn each_side_wakes_the_other() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let rw = c.rw_lock("wake").unwrap();
        let java = Redisson::new(&server, "wake", 1);
        // A Redisson writer with a minute's lease: only its message can
        // wake lockwarden's readers early.
        assert!(java.write(Duration::from_secs(60)));
        let mut readers = Vec::new();
        for _ in 0..2 {
            let read = rw.read().clone();
            readers.push(tokio::spawn(async move {
                let g = read.lock().await.unwrap();
                (Instant::now(), g)
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert_eq!(java.write_unlock(), 1);
        let mut held = Vec::new();
        for r in readers {
            let (at, g) = r.await.unwrap();
            assert!(
                at - released < WOKEN_WITHIN,
                "a reader woke {:?} after the release",
                at - released
            );
            held.push(g);
        }
        // lockwarden's releases wake Redisson's waiters: "0" for the last reader...
        let mut sub = java.listen();
        assert!(!java.write(Duration::from_secs(60)));
        held.pop().unwrap().unlock().await.unwrap();
        held.pop().unwrap().unlock().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("0"));
        // ...and "1" for a writer (Redisson wakes all its waiters on it).
        let w = rw.write().lock().await.unwrap();
        assert!(!java.read(Duration::from_secs(60)));
        w.unlock().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("1"));
        assert!(java.read(Duration::from_secs(60)));
        // A lockwarden writer waiting on Redisson's readers wakes at the last one's unlock.
        let write = rw.write().clone();
        let waiting = tokio::spawn(async move {
            let g = write.lock().await.unwrap();
            (Instant::now(), g)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert_eq!(java.read_unlock(), 1);
        let (at, g) = waiting.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "the writer woke {:?} after the release",
            at - released
        );
        g.unlock().await.unwrap();
    })
    .await
}

#[tokio::test]
async fn renewals_keep_the_holds_and_flushall_is_a_loss() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_millis(900)).await;
        let rw = c.rw_lock("renew").unwrap();
        let java = Redisson::new(&server, "renew", 1);
        let r = rw.read().lock().await.unwrap();
        let r2 = rw.read().lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!r.is_lost());
        assert!(
            !java.write(Duration::from_secs(60)),
            "the reader's hold outlived its lease by renewal"
        );
        let mine = r.owner().field().to_string();
        for k in 1..=2 {
            let pttl = server
                .cmd(&["PTTL", &format!("{{renew}}:{mine}:rwlock_timeout:{k}")])
                .as_int()
                .unwrap();
            assert!(pttl > 0, "level {k} renewed: {pttl}");
        }
        // A Redisson reader comes and goes: the hash's TTL stays ours.
        assert!(java.read(Duration::from_millis(300)));
        assert_eq!(java.read_unlock(), 0);
        r2.unlock().await.unwrap();
        let w = rw.write().clone();
        let w2 = tokio::spawn(async move { w.try_lock(Duration::from_millis(1500), Lease::Watchdog).await });
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert!(!r.is_lost());
        r.unlock().await.unwrap();
        let g = w2.await.unwrap().unwrap();
        assert!(g.is_none(), "the writer gave up while the reader held");
        let g = rw.write().lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert!(
            !java.read(Duration::from_secs(60)),
            "the writer's hold outlived its lease by renewal"
        );
        server.flushall();
        assert!(tokio::time::timeout(Duration::from_secs(3), g.lost()).await.is_ok());
        assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_a_writer_beside_anyone_across_both_libraries() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let readers = Arc::new(AtomicI64::new(0));
        let writers = Arc::new(AtomicI64::new(0));
        let broken = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let check = |readers: &AtomicI64, writers: &AtomicI64, broken: &AtomicBool| {
            let (r, w) = (readers.load(Ordering::SeqCst), writers.load(Ordering::SeqCst));
            if w > 1 || (w == 1 && r > 0) {
                broken.store(true, Ordering::SeqCst);
            }
        };
        let mut threads = Vec::new();
        for t in 1..=2u32 {
            let (readers, writers, broken, stop) = (readers.clone(), writers.clone(), broken.clone(), stop.clone());
            let port = port_of(&server);
            threads.push(std::thread::spawn(move || {
                let java = Redisson::at(port, "mix", t);
                let mut rounds = 0;
                for i in 0..3_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let write = i % 3 == 0;
                    let got = if write {
                        java.write(Duration::from_secs(30))
                    } else {
                        java.read(Duration::from_secs(30))
                    };
                    if !got {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    let count = if write { &writers } else { &readers };
                    count.fetch_add(1, Ordering::SeqCst);
                    check(&readers, &writers, &broken);
                    std::thread::sleep(Duration::from_millis(1));
                    check(&readers, &writers, &broken);
                    count.fetch_sub(1, Ordering::SeqCst);
                    if write {
                        java.write_unlock();
                    } else {
                        java.read_unlock();
                    }
                    rounds += 1;
                }
                rounds
            }));
        }
        let mut tasks = Vec::new();
        for t in 0..4 {
            let rw = c.rw_lock("mix").unwrap();
            let (readers, writers, broken) = (readers.clone(), writers.clone(), broken.clone());
            tasks.push(tokio::spawn(async move {
                let mut rounds = 0;
                for i in 0..30 {
                    let write = (i + t) % 3 == 0;
                    let side = if write { rw.write() } else { rw.read() };
                    let Some(g) = side.try_lock(Duration::from_secs(5), Lease::Watchdog).await.unwrap() else {
                        continue;
                    };
                    let count = if write { &writers } else { &readers };
                    count.fetch_add(1, Ordering::SeqCst);
                    check(&readers, &writers, &broken);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    check(&readers, &writers, &broken);
                    count.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
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
        assert!(ours >= 60 && theirs > 0, "lockwarden {ours}, Redisson {theirs} holds");
        assert!(!broken.load(Ordering::SeqCst), "a writer held beside another holder");
        assert_eq!(server.cmd(&["EXISTS", "mix"]).as_int(), Some(0));
    })
    .await
}

#[tokio::test]
async fn kinds_force_unlock_status_and_the_command() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server, Duration::from_secs(30)).await;
        let plain = Client::builder(&server.url()).build().await.unwrap();
        // lockwarden's own read-write lock on the name: not Redisson's layout.
        let own = plain.rw_lock("own").unwrap().read().lock().await.unwrap();
        let e = c
            .rw_lock("own")
            .unwrap()
            .write()
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await;
        assert!(matches!(e, Err(Error::WrongKind { .. })), "{e:?}");
        own.unlock().await.unwrap();
        // Redisson's plain lock on the name.
        server.cmd(&["HSET", "rl", &format!("{JAVA}:1"), "1"]);
        let e = c
            .rw_lock("rl")
            .unwrap()
            .read()
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await;
        assert!(matches!(e, Err(Error::HeldByRedisson { .. })), "{e:?}");
        assert_eq!(fields(&server, "rl"), vec![format!("{JAVA}:1")]);
        // Status and force-unlock of a Redisson writer.
        let java = Redisson::new(&server, "fw", 1);
        assert!(java.write(Duration::from_secs(60)));
        let rw = c.rw_lock("fw").unwrap();
        let s = rw.write().status().await.unwrap();
        assert_eq!(s.kind, Some(LockKind::RedissonReadWrite));
        assert!(rw.write().is_locked().await.unwrap());
        assert!(!rw.read().is_locked().await.unwrap());
        assert!(
            !rw.read().force_unlock().await.unwrap(),
            "the read side does not hold it"
        );
        let mut sub = java.listen();
        assert!(rw.write().force_unlock().await.unwrap());
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("1"));
        assert_eq!(server.cmd(&["EXISTS", "fw"]).as_int(), Some(0));
        // The command's shared hold keeps Redisson's writer out while it runs.
        let dir = std::env::temp_dir().join(format!("lockwarden-rrw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .env_remove("LOCKWARDEN_REDIS")
            .args(["--redis", &server.url(), "--redisson-compatible"])
            .args(["run", "cmdrw", "--shared", "--"])
            .args(["sh", "-c", &format!("touch {}/in; sleep 1", dir.display())])
            .spawn()
            .unwrap();
        assert!(eventually(Duration::from_secs(20), || dir.join("in").exists()).await);
        let w = Redisson::new(&server, "cmdrw", 3);
        assert!(
            !w.write(Duration::from_secs(60)),
            "Redisson's writer while the command reads"
        );
        assert!(
            Redisson::new(&server, "cmdrw", 4).read(Duration::from_millis(200)),
            "readers share"
        );
        assert!(run.wait().unwrap().success());
        assert!(eventually(Duration::from_secs(3), || w.write(Duration::from_secs(60))).await);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}
