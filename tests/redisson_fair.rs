//! The fair lock in Redisson's layout (`Client::redisson_fair_lock`, or
//! `Client::fair_lock` with `redisson_compatible`) beside Redisson's
//! `RFairLock`. node-redisson has no fair lock, so the Redisson side here
//! is a pair of scripts of our own that make RFairLock's decisions on its
//! layout: RLock's hash at the name, the waiters' list
//! `redisson_lock_queue:{name}`, their times `redisson_lock_timeout:{name}`
//! (on the client's clock: the time of the waiter before, or now plus the
//! lock's lease, plus the thread wait time; taking the lock moves every
//! time back by the thread wait time; a waiter whose time passed is dropped
//! from the head), and an unlock that wakes only the head, publishing `0`
//! on `redisson_lock__channel:{name}:<its owner field>`.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use lockwarden::{Client, Lease, LockGuard};

const BOUND: Duration = Duration::from_secs(60);

/// How late a wake-up may come and still be one: the holds below have a
/// minute's lease.
const WOKEN_WITHIN: Duration = Duration::from_secs(2);

const JAVA: &str = "5f0c1f9e-1d7a-4c2b-9a51-0d6e2b7c3a10";

/// Redisson's default thread wait time (5 minutes).
const THREAD_WAIT: i64 = 300_000;

/// RFairLock's lock attempt of a waiting thread: KEYS[1] the hash, KEYS[2]
/// the queue, KEYS[3] the times; ARGV[1] lease, ARGV[2] owner field,
/// ARGV[3] thread wait time, ARGV[4] the client's clock. "OK" taken, else
/// the wait its place gives it (it is queued).
const R_LOCK: &str = "local now = tonumber(ARGV[4]) \
    while true do \
      local h = redis.call('LINDEX', KEYS[2], 0) \
      if not h then break end \
      local t = tonumber(redis.call('ZSCORE', KEYS[3], h)) \
      if t and t > now then break end \
      redis.call('ZREM', KEYS[3], h) redis.call('LPOP', KEYS[2]) \
    end \
    if redis.call('EXISTS', KEYS[1]) == 0 and (redis.call('EXISTS', KEYS[2]) == 0 \
        or redis.call('LINDEX', KEYS[2], 0) == ARGV[2]) then \
      redis.call('LPOP', KEYS[2]) redis.call('ZREM', KEYS[3], ARGV[2]) \
      local ks = redis.call('ZRANGE', KEYS[3], 0, -1) \
      for i = 1, #ks do redis.call('ZINCRBY', KEYS[3], -tonumber(ARGV[3]), ks[i]) end \
      redis.call('HSET', KEYS[1], ARGV[2], 1) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 'OK' \
    end \
    if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then \
      redis.call('HINCRBY', KEYS[1], ARGV[2], 1) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 'OK' \
    end \
    local t = redis.call('ZSCORE', KEYS[3], ARGV[2]) \
    if t then return tonumber(t) - tonumber(ARGV[3]) - now end \
    local last = redis.call('LINDEX', KEYS[2], -1) \
    local ttl \
    if last and last ~= ARGV[2] then ttl = tonumber(redis.call('ZSCORE', KEYS[3], last)) - now \
    else ttl = redis.call('PTTL', KEYS[1]) end \
    if redis.call('ZADD', KEYS[3], ttl + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then \
      redis.call('RPUSH', KEYS[2], ARGV[2]) end \
    return ttl";

/// RFairLock's unlock: KEYS as above, KEYS[4] the channel prefix; ARGV[1]
/// owner field, ARGV[2] the client's clock. 1 freed, 0 still held, -1 not
/// held.
const R_UNLOCK: &str = "local now = tonumber(ARGV[2]) \
    while true do \
      local h = redis.call('LINDEX', KEYS[2], 0) \
      if not h then break end \
      local t = tonumber(redis.call('ZSCORE', KEYS[3], h)) \
      if t and t > now then break end \
      redis.call('ZREM', KEYS[3], h) redis.call('LPOP', KEYS[2]) \
    end \
    local function wake() \
      local n = redis.call('LINDEX', KEYS[2], 0) \
      if n then redis.call('PUBLISH', KEYS[4] .. ':' .. n, 0) end \
    end \
    if redis.call('EXISTS', KEYS[1]) == 0 then wake() return 1 end \
    if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end \
    if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then return 0 end \
    redis.call('DEL', KEYS[1]) wake() return 1";

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A Redisson thread `t` on the fair lock `name`.
struct Redisson<'a> {
    server: &'a RedisServer,
    name: String,
    t: u32,
}

impl<'a> Redisson<'a> {
    fn new(server: &'a RedisServer, name: &str, t: u32) -> Redisson<'a> {
        Redisson {
            server,
            name: name.to_string(),
            t,
        }
    }

    fn owner(&self) -> String {
        format!("{JAVA}:{}", self.t)
    }

    fn keys(&self) -> [String; 4] {
        [
            self.name.clone(),
            format!("redisson_lock_queue:{{{}}}", self.name),
            format!("redisson_lock_timeout:{{{}}}", self.name),
            format!("redisson_lock__channel:{{{}}}", self.name),
        ]
    }

    /// One attempt, queueing when refused, with `wait` as the thread wait
    /// time: true when it got the lock.
    fn lock_with(&self, lease: Duration, wait: i64) -> bool {
        let k = self.keys();
        let reply = self.server.cmd(&[
            "EVAL",
            R_LOCK,
            "3",
            &k[0],
            &k[1],
            &k[2],
            &lease.as_millis().to_string(),
            &self.owner(),
            &wait.to_string(),
            &now_ms().to_string(),
        ]);
        reply.as_str() == Some("OK")
    }

    fn lock(&self, lease: Duration) -> bool {
        self.lock_with(lease, THREAD_WAIT)
    }

    fn unlock(&self) -> i64 {
        let k = self.keys();
        let reply = self.server.cmd(&[
            "EVAL",
            R_UNLOCK,
            "4",
            &k[0],
            &k[1],
            &k[2],
            &k[3],
            &self.owner(),
            &now_ms().to_string(),
        ]);
        reply.as_int().unwrap_or_else(|| panic!("{reply:?}"))
    }

    /// A subscriber to this thread's own wake channel.
    fn listen(&self) -> Resp {
        let port: u16 = self.server.url().rsplit(':').next().unwrap().parse().unwrap();
        let mut sub = Resp::connect(port).unwrap();
        sub.cmd(&["SUBSCRIBE", &format!("{}:{}", self.keys()[3], self.owner())]);
        sub
    }

    fn queue(&self) -> Vec<String> {
        self.server.cmd(&["LRANGE", &self.keys()[1], "0", "-1"]).strings()
    }

    fn time_of(&self, owner: &str) -> Option<i64> {
        self.server.cmd(&["ZSCORE", &self.keys()[2], owner]).as_int()
    }
}

async fn compatible(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .watchdog_lease(Duration::from_secs(30))
        .wake_patience(NO_PATIENCE)
        .redisson_compatible(true)
        .build()
        .await
        .expect("connect")
}

/// A lockwarden waiter in its own task: its guard and when it got it.
fn waiter(client: &Client, name: &str) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    let lock = client.fair_lock(name).unwrap();
    tokio::spawn(async move {
        let g = lock.lock().await.unwrap();
        (Instant::now(), g)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_queue_served_in_order_across_both_libraries() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = compatible(&server).await;
        let b = compatible(&server).await;
        let holder = Redisson::new(&server, "q", 1);
        let r2 = Redisson::new(&server, "q", 2);
        assert!(holder.lock(Duration::from_secs(60)));
        let w1 = waiter(&a, "q");
        assert!(eventually(Duration::from_secs(5), || holder.queue().len() == 1).await);
        assert!(!r2.lock(Duration::from_secs(60)), "queued behind lockwarden's waiter");
        let w3 = waiter(&b, "q");
        assert!(eventually(Duration::from_secs(5), || holder.queue().len() == 3).await);
        let queue = holder.queue();
        assert!(!queue[0].starts_with(JAVA) && queue[1] == r2.owner() && !queue[2].starts_with(JAVA));
        // Times as Redisson sets them: each the one before plus the thread wait time.
        let times: Vec<i64> = queue.iter().map(|o| holder.time_of(o).unwrap()).collect();
        assert!(times[1] - times[0] == THREAD_WAIT || (times[1] - times[0] - THREAD_WAIT).abs() < 50);
        assert!((times[2] - times[1] - THREAD_WAIT).abs() < 50, "{times:?}");

        let mut r2_channel = r2.listen();
        let released = Instant::now();
        assert_eq!(holder.unlock(), 1);
        let (at, g1) = w1.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "the head woke {:?} after Redisson's unlock",
            at - released
        );
        assert!(!w3.is_finished());
        assert_eq!(holder.queue(), queue[1..].to_vec(), "the head left the queue");
        assert!(
            Resp::message(&mut r2_channel, Duration::from_millis(200)).is_none(),
            "only the head is woken"
        );
        // lockwarden's unlock wakes Redisson's waiter, now the head, and only it.
        g1.unlock().await.unwrap();
        assert_eq!(Resp::message(&mut r2_channel, WOKEN_WITHIN).as_deref(), Some("0"));
        let barging = a
            .fair_lock("q")
            .unwrap()
            .try_lock(Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap();
        assert!(
            barging.is_none(),
            "a newcomer took the free lock from Redisson's head of the queue"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!w3.is_finished(), "the third waiter stays behind Redisson's");
        assert!(r2.lock(Duration::from_secs(60)), "Redisson's waiter takes its turn");
        let released = Instant::now();
        assert_eq!(r2.unlock(), 1);
        let (at, g3) = w3.await.unwrap();
        assert!(
            at - released < WOKEN_WITHIN,
            "woke {:?} after Redisson's unlock",
            at - released
        );
        g3.unlock().await.unwrap();
        assert!(holder.queue().is_empty());
        assert_eq!(server.cmd(&["ZCARD", &holder.keys()[2]]).as_int(), Some(0));
    })
    .await
}

#[tokio::test]
async fn a_lockwarden_waiter_that_gives_up_leaves_redissons_queue() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server).await;
        let holder = Redisson::new(&server, "g", 1);
        let behind = Redisson::new(&server, "g", 2);
        assert!(holder.lock(Duration::from_secs(60)));
        let lock = c.fair_lock("g").unwrap();
        let trying = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.try_lock(Duration::from_millis(800), Lease::Watchdog).await })
        };
        assert!(eventually(Duration::from_secs(5), || holder.queue().len() == 1).await);
        assert!(!behind.lock(Duration::from_secs(60)));
        let before = behind.time_of(&behind.owner()).unwrap();
        assert!(trying.await.unwrap().unwrap().is_none(), "gave up");
        assert_eq!(holder.queue(), vec![behind.owner()]);
        let after = behind.time_of(&behind.owner()).unwrap();
        assert_eq!(
            before - after,
            THREAD_WAIT,
            "the waiter behind moved up, as Redisson's rule says"
        );
        // A try without a wait never joins.
        assert!(lock.try_lock(Duration::ZERO, Lease::Watchdog).await.unwrap().is_none());
        assert_eq!(holder.queue(), vec![behind.owner()]);
    })
    .await
}

/// A Redisson waiter that died keeps its place until its time passes, and
/// then no longer: lockwarden's waiter behind it drops it and takes the
/// lock.
#[tokio::test]
async fn a_dead_redisson_waiter_is_dropped_at_its_time() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = compatible(&server).await;
        let holder = Redisson::new(&server, "d", 1);
        let dead = Redisson::new(&server, "d", 2);
        assert!(holder.lock(Duration::from_millis(600)));
        // Queued with a short thread wait time: dropped 300 ms after the
        // holder's lease ends.
        assert!(!dead.lock_with(Duration::from_secs(60), 300));
        let start = Instant::now();
        let g = c
            .fair_lock("d")
            .unwrap()
            .try_lock(Duration::from_secs(10), Lease::Watchdog)
            .await
            .unwrap()
            .expect("the dead waiter was dropped");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(700),
            "{took:?}: inside the dead waiter's time"
        );
        assert!(took < Duration::from_secs(4), "{took:?}");
        assert!(holder.queue().is_empty());
        // Its reentrancy and status, while a Redisson thread waits.
        let again = c.fair_lock("d").unwrap().lock().await.unwrap();
        assert_eq!(server.cmd(&["HGET", "d", g.owner().field()]).as_int(), Some(2));
        assert!(!holder.lock(Duration::from_secs(60)));
        let s = c.fair_lock("d").unwrap().status().await.unwrap();
        assert_eq!(s.kind, Some(lockwarden::LockKind::Redisson));
        assert_eq!(s.queue, vec![holder.owner()]);
        again.unlock().await.unwrap();
        let mut sub = holder.listen();
        g.unlock().await.unwrap();
        assert_eq!(Resp::message(&mut sub, WOKEN_WITHIN).as_deref(), Some("0"));
        assert!(holder.lock(Duration::from_secs(60)));
    })
    .await
}

/// The command: `run --fair --redisson-compatible` queues in Redisson's
/// queue behind a Redisson holder and runs when woken.
#[tokio::test]
async fn the_command_queues_with_redisson() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let holder = Redisson::new(&server, "cf", 1);
        assert!(holder.lock(Duration::from_secs(60)));
        let dir = std::env::temp_dir().join(format!("lockwarden-rfair-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .env_remove("LOCKWARDEN_REDIS")
            .args(["--redis", &server.url(), "--redisson-compatible"])
            .args(["run", "cf", "--fair", "--"])
            .args(["sh", "-c", &format!("touch {}/in; sleep 1", dir.display())])
            .spawn()
            .unwrap();
        assert!(eventually(Duration::from_secs(10), || holder.queue().len() == 1).await);
        assert!(!dir.join("in").exists());
        let released = Instant::now();
        assert_eq!(holder.unlock(), 1);
        assert!(eventually(WOKEN_WITHIN, || dir.join("in").exists()).await, "not woken");
        assert!(released.elapsed() < WOKEN_WITHIN);
        assert!(
            !holder.lock(Duration::from_secs(60)),
            "Redisson waits while the command runs"
        );
        assert!(run.wait().unwrap().success());
        assert!(eventually(Duration::from_secs(3), || holder.lock(Duration::from_secs(60))).await);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}
