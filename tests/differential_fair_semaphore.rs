//! The fair semaphore's model scripts (`tests/model/fair_sem.rs`) held to
//! the real ones: random sequences of attempts (queuing or only trying,
//! new or re-sent, numbered) of three clients taking one, two and one of
//! two permits, releases, leaves, renewals, holds and waiters whose
//! deadlines pass, records and queues that end, and FLUSHALL, applied to
//! the model and, through the very script texts the library loads, to a
//! real `redis-server`; after each step the replies, the messages
//! published on the clients' wake channels and every key (the semaphore
//! hash with each hold's permits, deadline and request, the queue, the
//! deadlines, the grant asks, the request records, TTLs) must agree.
//! proptest shrinks a failing sequence to the shortest one that still
//! diverges.
//!
//! As in `tests/differential_fair.rs`, a tick is [`UNIT`] ms and the
//! model's clock stands still: a deadline's end is a step of its own, done
//! on both sides.
mod common;
mod diff;
mod model;

use common::{Reply, Resp};
use diff::{check_key_set, check_ttl, messages as published, which, Requests, Which, RENEW, SLACK};
use model::fair::{RECORD, WAITER};
use model::fair_sem::{Acquire, AcquireReply, Id, Msg, ReleaseReply, Server, TOTAL};
use model::server::Recorded;
use model::{KEEP, LEASE};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The fair semaphore's scripts, put together as
/// `src/protocol/semaphore.rs` does.
const ACQUIRE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/fsem_acquire.lua")
);
const RELEASE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/fsem_release.lua")
);
const LEAVE: &str = concat!(include_str!("../lua/shared.lua"), include_str!("../lua/fsem_leave.lua"));

/// A model tick, in ms.
const UNIT: i32 = 100_000;

const LOCK: &str = "{fsdiff}:sem";
const QUEUE: &str = "{fsdiff}:queue";
const TIMEOUTS: &str = "{fsdiff}:timeouts";
const ASKS: &str = "{fsdiff}:asks";
const PERMITS: &str = "{fsdiff}:permits";
const REC_PREFIX: &str = "{fsdiff}:rec:";
const WAKE_PREFIX: &str = "{fsdiff}:wake:";
/// The permits each client's acquisitions take.
const TAKES: [u8; 3] = [1, 2, 1];

/// The permit id of client `c`'s acquisition `n`.
fn id(c: u8, n: u8) -> Id {
    c * 16 + n
}

/// The permit id's text: `<client>:p<n>:r`.
fn permit(id: Id) -> String {
    format!("c{}:p{}:r", id / 16, id % 16)
}

fn wake_id(id: Id) -> String {
    format!("w{}", id / 16)
}

fn record(req: u32) -> String {
    format!("{REC_PREFIX}{req}")
}

fn ms(ticks: i32) -> String {
    (ticks * UNIT).to_string()
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// An attempt of client `c`'s acquisition `n` (`wait`: it queues when
    /// refused), numbered `attempt`.
    Attempt {
        c: u8,
        n: u8,
        which: Which,
        attempt: u8,
        wait: bool,
    },
    /// A release of client `c`'s acquisition `n`, naming one of its
    /// attempt requests (`named`: the holder's own release, or a
    /// give-back's) or none.
    Release {
        c: u8,
        n: u8,
        named: Option<usize>,
    },
    /// The wait of one of the acquisition's attempt requests leaves.
    Leave {
        c: u8,
        n: u8,
        which: usize,
    },
    Renew {
        c: u8,
        n: u8,
    },
    /// A hold's deadline passes.
    LeaseEnds(usize),
    RecordEnds(usize),
    /// A queued waiter's deadline comes within a tick, or passes.
    DeadlineNears(usize),
    DeadlinePasses(usize),
    QueueEnds,
    Flush,
}

fn step() -> impl Strategy<Value = Step> {
    let acq = || (0..3u8, 0..2u8);
    prop_oneof![
        8 => (acq(), which(), 1..4u8, prop::bool::weighted(0.8))
            .prop_map(|((c, n), which, attempt, wait)| Step::Attempt { c, n, which, attempt, wait }),
        4 => (acq(), prop::option::of(0..4usize)).prop_map(|((c, n), named)| Step::Release { c, n, named }),
        2 => (acq(), 0..4usize).prop_map(|((c, n), which)| Step::Leave { c, n, which }),
        2 => acq().prop_map(|(c, n)| Step::Renew { c, n }),
        1 => (0..3usize).prop_map(Step::LeaseEnds),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => (0..3usize).prop_map(Step::DeadlineNears),
        1 => (0..3usize).prop_map(Step::DeadlinePasses),
        1 => Just(Step::QueueEnds),
        1 => Just(Step::Flush),
    ]
}

struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    /// Subscribed to every client's wake channel.
    sub: &'a mut Resp,
    reqs: Requests<Id>,
}

impl Run<'_> {
    /// The server's clock, in ms.
    fn server_ms(&mut self) -> i64 {
        let t = self.redis.cmd(&["TIME"]).strings();
        t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
    }

    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        self.model.sent.clear();
        match step {
            Step::Attempt {
                c,
                n,
                which,
                attempt,
                wait,
            } => {
                let p = id(c, n);
                let (req, _) = self.reqs.request(which, "acquire", p);
                let take = TAKES[usize::from(c)];
                let a = Acquire {
                    id: p,
                    take,
                    req,
                    attempt,
                    wait,
                };
                let want = self.model.acquire(a, None);
                let ask = if wait {
                    format!("{} {} {req} {attempt} {}", ms(LEASE), ms(RECORD), wake_id(p))
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
                    &record(req),
                    ASKS,
                    PERMITS,
                    &permit(p),
                    &take.to_string(),
                    &TOTAL.to_string(),
                    &ms(LEASE),
                    &ms(WAITER),
                    &ms(KEEP),
                    if wait { "wait" } else { "try" },
                    WAKE_PREFIX,
                    "PUBLISH",
                    &ask,
                    &ms(2 * WAITER),
                    &req.to_string(),
                ]);
                check_acquire(want, &got)?;
            }
            Step::Release { c, n, named } => {
                let p = id(c, n);
                let mine = self.reqs.of("acquire", p);
                let req = named.filter(|_| !mine.is_empty()).map(|i| mine[i % mine.len()]);
                let want = self.model.release(p, req, None);
                let req = req.map_or(String::new(), |r| r.to_string());
                let got = self.redis.cmd(&[
                    "EVAL",
                    RELEASE,
                    "5",
                    LOCK,
                    QUEUE,
                    TIMEOUTS,
                    ASKS,
                    PERMITS,
                    &permit(p),
                    WAKE_PREFIX,
                    "PUBLISH",
                    REC_PREFIX,
                    &TOTAL.to_string(),
                    &req,
                ]);
                let ok = matches!(
                    (want, &got),
                    (ReleaseReply::Released, Reply::Int(0)) | (ReleaseReply::NotHeld, Reply::Int(-1))
                );
                prop_assert!(ok, "release: the model answers {want:?}, the server {got:?}");
            }
            Step::Leave { c, n, which } => {
                let p = id(c, n);
                let mine = self.reqs.of("acquire", p);
                if mine.is_empty() {
                    return self.check();
                }
                let req = mine[which % mine.len()];
                let want = self.model.leave(p, req);
                let rec = record(req);
                let got = self.redis.cmd(&[
                    "EVAL",
                    LEAVE,
                    "5",
                    LOCK,
                    QUEUE,
                    TIMEOUTS,
                    ASKS,
                    &rec,
                    &permit(p),
                    WAKE_PREFIX,
                    "PUBLISH",
                    REC_PREFIX,
                ]);
                prop_assert_eq!(got, Reply::Int(i64::from(want)), "leave");
            }
            Step::Renew { c, n } => {
                let p = id(c, n);
                let want = self.model.renew(p);
                let got = self.redis.cmd(&["EVAL", RENEW, "1", LOCK, &ms(LEASE), &permit(p)]);
                prop_assert_eq!(got, Reply::Array(vec![Reply::Int(i64::from(want))]), "renew");
            }
            Step::LeaseEnds(i) => {
                let live: Vec<Id> = self.model.live().map(|h| h.id).collect();
                if !live.is_empty() {
                    let p = live[i % live.len()];
                    let now = self.model.now;
                    if let Some(h) = self.model.holds.iter_mut().find(|h| h.id == p) {
                        h.deadline = now;
                    }
                    let past = (self.server_ms() - 1).to_string();
                    self.redis.cmd(&["HSET", LOCK, &format!(":{}", permit(p)), &past]);
                    // The hash's TTL ends with its last live hold.
                    self.model.advance(0);
                    if self.model.holds.is_empty() {
                        self.redis.cmd(&["DEL", LOCK]);
                    }
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
                    let q = *q;
                    let deadline = if ticks == 1 {
                        self.server_ms() + i64::from(UNIT)
                    } else {
                        self.server_ms() - 1
                    };
                    let deadline = deadline.to_string();
                    self.redis.cmd(&["ZADD", TIMEOUTS, "XX", &deadline, &permit(q.id)]);
                    self.redis.cmd(&["HSET", ASKS, &permit(q.id), &ask(&deadline, q)]);
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
        }
        self.check()
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        let mut want = Vec::new();
        for (c, msg) in self.model.sent.clone() {
            let payload = match msg {
                Msg::Wake => "0".to_string(),
                Msg::Grant { ms, req, attempt } => format!("g 0 {} {req} {attempt}", ms * UNIT),
            };
            want.push((format!("{WAKE_PREFIX}{}", wake_id(c as Id * 16)), payload));
        }
        let got = published(self.sub);
        let close =
            got.len() == want.len()
                && got.iter().zip(&want).all(|(g, w)| {
                    // A grant's lease is cut to the waiter's deadline, which
                    // the real clock moved towards by a few ms.
                    let (gp, wp): (Vec<&str>, Vec<&str>) = (g.1.split(' ').collect(), w.1.split(' ').collect());
                    g.0 == w.0
                        && gp.len() == wp.len()
                        && gp.iter().zip(&wp).enumerate().all(|(i, (a, b))| {
                            a == b || (i == 2 && within(a.parse().unwrap_or(0), b.parse().unwrap_or(0)))
                        })
                });
        prop_assert!(close, "messages: the model {:?}, the server {:?}", want, got);
        self.check_keys()
    }

    fn check_keys(&mut self) -> Result<(), TestCaseError> {
        let now = self.model.now;
        let server_now = self.server_ms();
        let mut want_keys = Vec::new();
        if !self.model.holds.is_empty() {
            want_keys.push(LOCK.to_string());
            let pairs = diff::hash_fields(self.redis, LOCK);
            let mut want = vec![(":kind".to_string(), "fair-semaphore".to_string())];
            for h in self.model.holds.clone() {
                let f = permit(h.id);
                want.push((f.clone(), h.permits.to_string()));
                want.push((format!(":q:{f}"), h.req.to_string()));
                let real = pairs.iter().find(|(k, _)| *k == format!(":{f}"));
                let real = real.and_then(|(_, v)| v.parse::<i64>().ok()).unwrap_or(i64::MIN);
                let left = i64::from((h.deadline - now) * UNIT);
                prop_assert!(
                    within(real - server_now, left),
                    "{f}'s deadline: the model {left} ms ahead, the server {} ms",
                    real - server_now
                );
                want.push((format!(":{f}"), real.to_string()));
                if h.deadline > now {
                    // The hash's TTL covers every live hold (less the
                    // time since the clock was read).
                    let pttl = self.redis.cmd(&["PTTL", LOCK]).as_int().unwrap_or(i64::MIN);
                    prop_assert!(
                        pttl > real - server_now - SLACK,
                        "the hash's TTL {pttl} ms ends before {f}'s"
                    );
                }
            }
            want.sort();
            prop_assert_eq!(pairs, want, "the semaphore hash");
        }
        if !self.model.queue.is_empty() {
            want_keys.extend([QUEUE, TIMEOUTS, ASKS].map(String::from));
            self.check_queue(now, server_now)?;
        }
        for r in self.model.records.clone() {
            let key = record(r.req);
            let value = match r.value {
                Recorded::Granted { .. } => "g",
                Recorded::GaveBack => "left",
                other => return Err(TestCaseError::fail(format!("a record {other:?}"))),
            };
            prop_assert_eq!(
                self.redis.cmd(&["GET", &key]),
                Reply::Str(value.into()),
                "record {}",
                key
            );
            check_ttl(self.redis, &key, (r.expires - now) * UNIT)?;
            want_keys.push(key);
        }
        check_key_set(self.redis, want_keys)
    }

    /// The queue's order, each waiter's deadline and ask, their TTLs.
    fn check_queue(&mut self, now: i32, server_now: i64) -> Result<(), TestCaseError> {
        let order: Vec<String> = self.model.queue.iter().map(|q| permit(q.id)).collect();
        prop_assert_eq!(
            self.redis.cmd(&["LRANGE", QUEUE, "0", "-1"]).strings(),
            order,
            "the queue"
        );
        for q in self.model.queue.clone() {
            let score = self.redis.cmd(&["ZSCORE", TIMEOUTS, &permit(q.id)]);
            let score = score.as_str().unwrap_or_default().to_string();
            let left = i64::from((q.deadline - now) * UNIT);
            let real = score.parse::<i64>().unwrap_or(i64::MIN) - server_now;
            prop_assert!(
                within(real, left),
                "{}'s deadline: the model {left} ms ahead, the server {real} ms",
                permit(q.id)
            );
            prop_assert_eq!(
                self.redis.cmd(&["HGET", ASKS, &permit(q.id)]),
                Reply::Str(ask(&score, q)),
                "{}'s ask",
                permit(q.id)
            );
        }
        let len = Some(self.model.queue.len() as i64);
        prop_assert_eq!(self.redis.cmd(&["ZCARD", TIMEOUTS]).as_int(), len, "the deadlines");
        prop_assert_eq!(self.redis.cmd(&["HLEN", ASKS]).as_int(), len, "the asks");
        for key in [QUEUE, TIMEOUTS, ASKS] {
            check_ttl(self.redis, key, (self.model.queue_expires - now) * UNIT)?;
        }
        Ok(())
    }
}

/// A waiter's ask as fsem_acquire.lua writes it.
fn ask(deadline: &str, q: model::fair_sem::Queued) -> String {
    format!(
        "{deadline} {} {} {} {} {} {}",
        q.take,
        ms(LEASE),
        ms(RECORD),
        q.req,
        q.attempt,
        wake_id(q.id)
    )
}

/// A real time left (`real` ms) against the model's (`model` ms): at most
/// it, less the time the sequence took.
fn within(real: i64, model: i64) -> bool {
    real <= model && real > model - SLACK
}

fn check_acquire(want: AcquireReply, got: &Reply) -> Result<(), TestCaseError> {
    let int = |r: &Reply| r.as_int();
    match (want, got) {
        (AcquireReply::Held, Reply::Array(v)) if v.len() == 3 => {
            let v: Vec<Option<i64>> = v.iter().map(int).collect();
            prop_assert_eq!(v, vec![Some(1), Some(0), Some(1)], "acquired: {:?}", got);
        }
        (AcquireReply::Refused { hint }, Reply::Array(v)) if v.len() == 2 => {
            prop_assert_eq!(int(&v[0]), Some(0), "refused: {:?}", got);
            let real = int(&v[1]).unwrap_or(i64::MIN);
            let hint = i64::from(hint * UNIT);
            // No holder: the script's 1 ms, the model's one tick.
            let ok = if hint == i64::from(UNIT) && real == 1 {
                true
            } else {
                within(real, hint)
            };
            prop_assert!(ok, "the first holder's time left: the model {hint}, the server {real}");
        }
        (AcquireReply::Behind, Reply::Array(v)) if v.len() == 2 => {
            prop_assert_eq!((int(&v[0]), int(&v[1])), (Some(0), Some(-3)), "behind: {:?}", got);
        }
        _ => prop_assert!(false, "acquire: the model answers {want:?}, the server {got:?}"),
    }
    Ok(())
}

/// The script texts here are the library's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_tested_are_the_ones_the_library_loads() {
    diff::assert_the_librarys_scripts(&[ACQUIRE, RELEASE, LEAVE, RENEW]).await;
}

/// Sequences the random ones seldom reach, run first.
fn known_sequences() -> Vec<Vec<Step>> {
    let attempt = |c, which, wait| Step::Attempt {
        c,
        n: 0,
        which,
        attempt: 1,
        wait,
    };
    vec![
        // A leave whose wait was granted permits that are gone since, while
        // another attempt of the same acquisition holds them anew: that
        // hold is not the leave's to give back.
        vec![
            attempt(1, Which::New, true),
            attempt(0, Which::New, true),
            attempt(0, Which::New, true),
            Step::Release {
                c: 1,
                n: 0,
                named: None,
            },
            Step::Release {
                c: 0,
                n: 0,
                named: None,
            },
            attempt(0, Which::Again(0), false),
            Step::Leave { c: 0, n: 0, which: 1 },
        ],
        // The give-back of an attempt whose hold lapsed, after another
        // attempt of the same acquisition took the permits anew: it leaves
        // them alone, and the holder's own release frees them.
        vec![
            attempt(0, Which::New, true),
            Step::LeaseEnds(0),
            attempt(0, Which::New, true),
            Step::Release {
                c: 0,
                n: 0,
                named: Some(0),
            },
            Step::Release {
                c: 0,
                n: 0,
                named: Some(1),
            },
        ],
    ]
}

/// Runs `steps` from a flushed server, on the model and on the server.
fn run_steps(redis: &mut Resp, sub: &mut Resp, steps: Vec<Step>) -> Result<(), TestCaseError> {
    // Messages of an earlier sequence (a failed one's) are that sequence's.
    published(sub);
    let mut run = Run {
        model: Server::new(TAKES.len()),
        redis,
        sub,
        reqs: Requests::default(),
    };
    for step in steps {
        run.apply(step)?;
    }
    Ok(())
}

#[test]
fn the_real_fair_semaphore_scripts_answer_publish_and_write_as_the_model() {
    let server = common::RedisServer::start();
    let sub = std::cell::RefCell::new(server.resp());
    sub.borrow_mut().cmd(&["PSUBSCRIBE", &format!("{WAKE_PREFIX}*")]);
    let mut redis = server.resp();
    for steps in known_sequences() {
        redis.cmd(&["FLUSHALL"]);
        if let Err(e) = run_steps(&mut redis, &mut sub.borrow_mut(), steps.clone()) {
            panic!("the model and the scripts differ: {e}\nthe sequence: {steps:#?}");
        }
    }
    diff::run_sequences_on(&server, step(), |redis, steps| {
        run_steps(redis, &mut sub.borrow_mut(), steps)
    });
}
