//! The fair lock's model scripts (`tests/model/fair.rs`) held to the real
//! ones: random sequences of attempts (queuing or only trying, new or
//! re-sent, numbered), releases naming the current or an older token,
//! leaves, renewals and faults, applied to the model and, through the very
//! script texts the library loads, to a real `redis-server`; after each
//! step the replies, the messages published on the waiters' channels and
//! every key (the lock hash, the queue, the deadlines, the grant asks, the
//! counter, the replay records, TTLs) must agree. proptest shrinks a
//! failing sequence to the shortest one that still diverges. Run twice:
//! with every waiter leaving its grant ask (one master), and with none, as
//! a quorum's waiters queue (woken on their owner field's channel, never
//! handed the lock, leaving without naming a request).
//!
//! The model counts time in ticks; here a tick is [`UNIT`] ms and the
//! model's clock stands still (the real one moves a few milliseconds per
//! sequence): a lease's, a record's, a queue's or a waiter's end is a step
//! of its own, done on both sides.
mod common;
mod diff;
mod model;

use common::{Reply, Resp};
use diff::{check_key_set, check_ttl, messages as published, which, Requests, Tokens, Which, RENEW, SLACK};
use model::fair::{Acquire, AcquireReply, Msg, ReleaseReply, Server, RECORD, WAITER};
use model::{KEEP, LEASE};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The fair lock's scripts, put together as `src/protocol/fair.rs` does.
const ACQUIRE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_acquire.lua"),
    include_str!("../lua/fair_acquire.lua")
);
const RELEASE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_release.lua"),
    include_str!("../lua/fair_release.lua")
);
const LEAVE: &str = concat!(include_str!("../lua/shared.lua"), include_str!("../lua/fair_leave.lua"));

/// A model tick, in ms.
const UNIT: i32 = 100_000;

const LOCK: &str = "{fdiff}:lock";
const QUEUE: &str = "{fdiff}:queue";
const TIMEOUTS: &str = "{fdiff}:timeouts";
const COUNTER: &str = "{fdiff}:token";
const ASKS: &str = "{fdiff}:asks";
const REC_PREFIX: &str = "{fdiff}:rec:";
const WAKE_PREFIX: &str = "{fdiff}:wake:";
const OWNERS: u8 = 3;

fn owner(o: u8) -> String {
    format!("c{o}:t1")
}

fn wake_id(o: u8) -> String {
    format!("w{o}")
}

fn record(req: u32) -> String {
    format!("{REC_PREFIX}{req}")
}

fn ms(ticks: i32) -> String {
    (ticks * UNIT).to_string()
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// An attempt of a wait (`wait`: it queues when refused) numbered
    /// `attempt`, or a re-entry's (only trying).
    Attempt {
        owner: u8,
        which: Which,
        attempt: u8,
        wait: bool,
    },
    Release {
        owner: u8,
        which: Which,
        older: Option<usize>,
    },
    /// The wait of an earlier attempt request leaves the queue.
    Leave {
        owner: u8,
        which: usize,
    },
    Renew {
        owner: u8,
    },
    LeaseEnds,
    RecordEnds(usize),
    /// A queued waiter's deadline comes within a tick, or passes.
    DeadlineNears(usize),
    DeadlinePasses(usize),
    QueueEnds,
    Flush,
    EvictCounter,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..OWNERS, which(), 1..4u8, prop::bool::weighted(0.8))
            .prop_map(|(owner, which, attempt, wait)| Step::Attempt { owner, which, attempt, wait }),
        5 => (0..OWNERS, which(), prop::option::weighted(0.2, 0..4usize))
            .prop_map(|(owner, which, older)| Step::Release { owner, which, older }),
        2 => (0..OWNERS, 0..4usize).prop_map(|(owner, which)| Step::Leave { owner, which }),
        2 => (0..OWNERS).prop_map(|owner| Step::Renew { owner }),
        1 => Just(Step::LeaseEnds),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => (0..3usize).prop_map(Step::DeadlineNears),
        1 => (0..3usize).prop_map(Step::DeadlinePasses),
        1 => Just(Step::QueueEnds),
        1 => Just(Step::Flush),
        1 => Just(Step::EvictCounter),
    ]
}

struct Run<'a> {
    /// The waiters leave grant asks, and their leaves name their requests
    /// (one master); or neither (a quorum).
    asks: bool,
    model: Server,
    redis: &'a mut Resp,
    /// Subscribed to every waiter's wake channel.
    sub: &'a mut Resp,
    reqs: Requests<u8>,
    tokens: Vec<u64>,
    map: Tokens,
}

impl Run<'_> {
    fn real(&self, token: u64) -> Result<i128, TestCaseError> {
        self.map.real(token)
    }

    fn handed_out(&mut self, token: u64) {
        if !self.tokens.contains(&token) {
            self.tokens.push(token);
        }
        self.map.handed_out(token);
    }

    /// The server's clock, in ms.
    fn server_ms(&mut self) -> i64 {
        let t = self.redis.cmd(&["TIME"]).strings();
        t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
    }

    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        self.model.sent.clear();
        match step {
            Step::Attempt {
                owner: o,
                which,
                attempt,
                wait,
            } => {
                let (req, _) = self.reqs.request(which, "acquire", o);
                let a = Acquire {
                    owner: o,
                    req,
                    attempt,
                    wait,
                    ask: wait && self.asks,
                };
                let want = self.model.acquire(a, None);
                let ask = if a.ask {
                    format!("{} {} {req} {attempt} {}", ms(LEASE), ms(RECORD), wake_id(o))
                } else {
                    String::new()
                };
                let got = self.redis.cmd(&[
                    "EVAL",
                    ACQUIRE,
                    "6",
                    LOCK,
                    QUEUE,
                    TIMEOUTS,
                    COUNTER,
                    &record(req),
                    ASKS,
                    &owner(o),
                    &ms(LEASE),
                    &ms(WAITER),
                    &ms(KEEP),
                    if wait { "wait" } else { "try" },
                    WAKE_PREFIX,
                    "PUBLISH",
                    &ask,
                    &ms(2 * WAITER),
                ]);
                self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
                self.check_acquire(want, &got)?;
            }
            Step::Release { owner: o, which, older } => {
                let (req, new) = self.reqs.request(which, "release", o);
                let token = match (older, self.model.lock) {
                    (None, Some(h)) => h.token,
                    (Some(i), _) if !self.tokens.is_empty() => self.tokens[i % self.tokens.len()],
                    _ => match self.tokens.last() {
                        Some(&t) => t,
                        None => return self.check(),
                    },
                };
                let want = self.model.release(o, req, token, new, None);
                let real = self.real(token)?.to_string();
                let got = self.redis.cmd(&[
                    "EVAL",
                    RELEASE,
                    "6",
                    LOCK,
                    QUEUE,
                    TIMEOUTS,
                    COUNTER,
                    &record(req),
                    ASKS,
                    &owner(o),
                    "0",
                    &ms(KEEP),
                    &real,
                    WAKE_PREFIX,
                    "PUBLISH",
                    REC_PREFIX,
                    if new { "1" } else { "0" },
                ]);
                self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
                let ok = match (want, &got) {
                    (ReleaseReply::Left(n), Reply::Int(m)) => i64::from(n) == *m,
                    (ReleaseReply::NotHeld, Reply::Int(-1)) => true,
                    _ => false,
                };
                prop_assert!(ok, "release: the model answers {want:?}, the server {got:?}");
                if let Some(h) = self.model.lock {
                    self.handed_out(h.token);
                }
            }
            Step::Leave { owner: o, which } => {
                let mine = self.reqs.of("acquire", o);
                if mine.is_empty() {
                    return self.check();
                }
                let req = mine[which % mine.len()];
                if self.asks {
                    self.model.leave(o, Some((req, req..=req)), None);
                    let rec = record(req);
                    self.redis.cmd(&[
                        "EVAL",
                        LEAVE,
                        "6",
                        LOCK,
                        QUEUE,
                        TIMEOUTS,
                        COUNTER,
                        ASKS,
                        &rec,
                        &owner(o),
                        WAKE_PREFIX,
                        "PUBLISH",
                        &req.to_string(),
                    ]);
                } else {
                    self.model.leave(o, None, None);
                    self.redis.cmd(&[
                        "EVAL",
                        LEAVE,
                        "5",
                        LOCK,
                        QUEUE,
                        TIMEOUTS,
                        COUNTER,
                        ASKS,
                        &owner(o),
                        WAKE_PREFIX,
                        "PUBLISH",
                    ]);
                }
            }
            Step::Renew { owner: o } => {
                let want = self.model.renew(o);
                let got = self.redis.cmd(&["EVAL", RENEW, "1", LOCK, &ms(LEASE), &owner(o)]);
                prop_assert_eq!(got, Reply::Array(vec![Reply::Int(i64::from(want))]), "renew");
            }
            Step::LeaseEnds => {
                if self.model.lock.take().is_some() {
                    self.redis.cmd(&["DEL", LOCK]);
                }
            }
            Step::RecordEnds(i) => {
                if !self.model.records.is_empty() {
                    let r = self.model.records.remove(i % self.model.records.len());
                    self.redis.cmd(&["DEL", &record(r.req)]);
                }
            }
            Step::DeadlineNears(i) | Step::DeadlinePasses(i) => {
                if !self.model.queue.is_empty() {
                    let n = i % self.model.queue.len();
                    let ticks = if matches!(step, Step::DeadlineNears(_)) { 1 } else { 0 };
                    let q = &mut self.model.queue[n];
                    q.deadline = self.model.now + ticks;
                    let (o, req, attempt, asks) = (q.owner, q.req, q.attempt, q.asks);
                    // Within a tick (the model's deadline is now + 1), or
                    // just passed (now: no longer after it).
                    let deadline = if ticks == 1 {
                        self.server_ms() + i64::from(UNIT)
                    } else {
                        self.server_ms() - 1
                    };
                    let deadline = deadline.to_string();
                    self.redis.cmd(&["ZADD", TIMEOUTS, "XX", &deadline, &owner(o)]);
                    if asks {
                        let ask = format!("{deadline} {} {} {req} {attempt} {}", ms(LEASE), ms(RECORD), wake_id(o));
                        self.redis.cmd(&["HSET", ASKS, &owner(o), &ask]);
                    }
                }
            }
            Step::QueueEnds => {
                self.model.queue.clear();
                self.redis.cmd(&["DEL", QUEUE, TIMEOUTS, ASKS]);
            }
            Step::Flush => {
                self.model.flush();
                self.redis.cmd(&["FLUSHALL"]);
            }
            Step::EvictCounter => {
                self.model.counter.value = None;
                self.redis.cmd(&["DEL", COUNTER]);
            }
        }
        self.check()
    }

    fn check_acquire(&mut self, want: AcquireReply, got: &Reply) -> Result<(), TestCaseError> {
        let int = |r: &Reply| r.as_int().map(i128::from);
        match (want, got) {
            (AcquireReply::Held { token, count }, Reply::Array(v)) if v.len() == 3 => {
                prop_assert_eq!(int(&v[0]), Some(1), "acquired: {:?}", got);
                prop_assert_eq!(int(&v[1]), Some(self.real(token)?), "the token: {:?}", got);
                prop_assert_eq!(int(&v[2]), Some(i128::from(count)), "the count: {:?}", got);
                self.handed_out(token);
            }
            (AcquireReply::Refused { pttl }, Reply::Array(v)) if v.len() == 2 => {
                prop_assert_eq!(int(&v[0]), Some(0), "refused: {:?}", got);
                let real = v[1].as_int().unwrap_or(i64::MIN);
                let pttl = i64::from(pttl * UNIT);
                prop_assert!(
                    real <= pttl && real > pttl - SLACK,
                    "the holder's pttl: the model {pttl}, the server {real}"
                );
            }
            (AcquireReply::Behind, Reply::Array(v)) if v.len() == 2 => {
                prop_assert_eq!((int(&v[0]), int(&v[1])), (Some(0), Some(-3)), "behind: {:?}", got);
            }
            _ => prop_assert!(false, "acquire: the model answers {want:?}, the server {got:?}"),
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        let mut want = Vec::new();
        for (o, msg, to_wake_id) in self.model.sent.clone() {
            let payload = match msg {
                Msg::Wake => "0".to_string(),
                Msg::Grant {
                    token,
                    ms,
                    req,
                    attempt,
                } => format!("g {} {} {req} {attempt}", self.real(token)?, ms * UNIT),
            };
            let channel = if to_wake_id { wake_id(o) } else { owner(o) };
            want.push((format!("{WAKE_PREFIX}{channel}"), payload));
        }
        let got = published(self.sub);
        prop_assert_eq!(
            got.len(),
            want.len(),
            "messages: the model {:?}, the server {:?}",
            want,
            got
        );
        for (g, w) in got.iter().zip(&want) {
            // A grant's lease is cut to the waiter's deadline, which the
            // real clock moved towards by a few ms.
            let (gp, wp): (Vec<&str>, Vec<&str>) = (g.1.split(' ').collect(), w.1.split(' ').collect());
            let close = gp.len() == wp.len()
                && gp.iter().zip(&wp).enumerate().all(|(i, (a, b))| {
                    a == b
                        || (i == 2 && {
                            let (a, b): (i64, i64) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                            a <= b && a > b - SLACK
                        })
                });
            prop_assert!(
                g.0 == w.0 && close,
                "messages: the model {:?}, the server {:?}",
                want,
                got
            );
        }
        self.check_keys()
    }

    fn check_keys(&mut self) -> Result<(), TestCaseError> {
        let now = self.model.now;
        let server_now = self.server_ms();
        let mut want_keys = Vec::new();
        if let Some(h) = self.model.lock {
            want_keys.push(LOCK.to_string());
            let pairs = diff::hash_fields(self.redis, LOCK);
            let mut want = vec![
                (owner(h.owner), h.count.to_string()),
                (":kind".to_string(), "fair".to_string()),
                (":token".to_string(), self.real(h.token)?.to_string()),
            ];
            if let Some(take) = h.take {
                want.push((":take".to_string(), record(take)));
            }
            want.sort();
            prop_assert_eq!(pairs, want, "the lock hash");
            check_ttl(self.redis, LOCK, (h.expires - now) * UNIT)?;
        }
        let asking = self.model.queue.iter().filter(|q| q.asks).count();
        if !self.model.queue.is_empty() {
            want_keys.extend([QUEUE, TIMEOUTS].map(String::from));
            if asking > 0 {
                want_keys.push(ASKS.to_string());
            }
            let order: Vec<String> = self.model.queue.iter().map(|q| owner(q.owner)).collect();
            prop_assert_eq!(
                self.redis.cmd(&["LRANGE", QUEUE, "0", "-1"]).strings(),
                order,
                "the queue"
            );
            for q in self.model.queue.clone() {
                let score = self.redis.cmd(&["ZSCORE", TIMEOUTS, &owner(q.owner)]);
                let score: i64 = score.as_str().and_then(|s| s.parse().ok()).unwrap_or(i64::MIN);
                let left = i64::from((q.deadline - now) * UNIT);
                prop_assert!(
                    score - server_now <= left && score - server_now > left - SLACK,
                    "{}'s deadline: the model {left} ms ahead, the server {} ms",
                    owner(q.owner),
                    score - server_now
                );
                let ask = q.asks.then(|| {
                    Reply::Str(format!(
                        "{score} {} {} {} {} {}",
                        ms(LEASE),
                        ms(RECORD),
                        q.req,
                        q.attempt,
                        wake_id(q.owner)
                    ))
                });
                prop_assert_eq!(
                    self.redis.cmd(&["HGET", ASKS, &owner(q.owner)]),
                    ask.unwrap_or(Reply::Nil),
                    "{}'s ask",
                    owner(q.owner)
                );
            }
            prop_assert_eq!(
                self.redis.cmd(&["ZCARD", TIMEOUTS]).as_int(),
                Some(self.model.queue.len() as i64),
                "the deadlines"
            );
            prop_assert_eq!(
                self.redis.cmd(&["HLEN", ASKS]).as_int(),
                Some(asking as i64),
                "the asks"
            );
            for key in [QUEUE, TIMEOUTS, ASKS].iter().take(if asking > 0 { 3 } else { 2 }) {
                check_ttl(self.redis, key, (self.model.queue_expires - now) * UNIT)?;
            }
        }
        // The model's records count ticks; the shared check counts ms.
        let mut records = self.model.records.clone();
        for r in &mut records {
            r.expires *= UNIT;
        }
        want_keys.extend(self.map.check_counter_and_records(
            self.redis,
            (COUNTER, self.model.counter.value),
            &records,
            now * UNIT,
            record,
        )?);
        check_key_set(self.redis, want_keys)
    }
}

/// The script texts here are the library's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_tested_are_the_ones_the_library_loads() {
    diff::assert_the_librarys_scripts(&[ACQUIRE, RELEASE, LEAVE, RENEW]).await;
}

#[test]
fn the_real_fair_scripts_answer_publish_and_write_as_the_model() {
    hold_to_the_model(true);
}

/// A quorum's fair waiters: no grant asks, woken on their owner fields'
/// channels, leaves naming no request.
#[test]
fn the_real_fair_scripts_without_grant_asks_answer_publish_and_write_as_the_model() {
    hold_to_the_model(false);
}

fn hold_to_the_model(asks: bool) {
    let server = common::RedisServer::start();
    let sub = std::cell::RefCell::new(server.resp());
    sub.borrow_mut().cmd(&["PSUBSCRIBE", &format!("{WAKE_PREFIX}*")]);
    diff::run_sequences_on(&server, step(), |redis, steps| {
        let mut sub = sub.borrow_mut();
        // Messages of an earlier sequence (a failed one's) are that
        // sequence's.
        published(&mut sub);
        let mut run = Run {
            asks,
            model: Server::new(OWNERS as usize),
            redis,
            sub: &mut sub,
            reqs: Requests::default(),
            tokens: Vec::new(),
            map: Tokens::default(),
        };
        for step in steps {
            run.apply(step)?;
        }
        Ok(())
    });
}
