//! The model of the reentrant lock's waits (`tests/model/wake.rs`) held to
//! the real scripts: random sequences of attempts (only trying, listening
//! or woken; new, or re-sent under a wait's request; numbered), releases
//! naming the current or an older token, stopped waits' leaves and
//! wake-ups passed on, renewals, clients subscribing to their wake channel
//! and leaving it, and faults, applied to the model and, through the very
//! script texts the library loads, to a real `redis-server`; after each
//! step the replies, the messages each subscribed client got (a PUBLISH
//! counts only subscribers: a grant nobody heard is undone) and every key
//! (the lock hash with its `:wait` mark, the waiters list, the grant asks,
//! the counter, the replay records, TTLs) must agree. proptest shrinks a
//! failing sequence to the shortest one that still diverges.
//!
//! A tick is [`UNIT`] ms and the model's clock stands still (see
//! `tests/differential_fair.rs`): a lease's, a record's, the list's or the
//! asks' end is a step of its own.
mod common;
mod diff;
mod model;

use common::{Reply, Resp};
use diff::{check_key_set, check_ttl, which, Requests, Tokens, Which, ACQUIRE, RELEASE, RENEW, SLACK};
use model::wake::{Acquire, AcquireReply, Mode, Msg, ReleaseReply, Server, GRANT};
use model::{KEEP, LEASE};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The reentrant lock's wake_next script, put together as
/// `src/protocol/reentrant.rs` does (its acquire and release: `diff`'s).
const WAKE_NEXT: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_wake.lua"),
    include_str!("../lua/wake_next.lua")
);

/// A model tick, in ms.
const UNIT: i32 = 100_000;
/// What the list and the asks outlive the lease they were kept for by.
const PAST_LEASE_MS: i32 = 1000;

const LOCK: &str = "{wdiff}:lock";
const COUNTER: &str = "{wdiff}:token";
const WAITERS: &str = "{wdiff}:waiters";
const ASKS: &str = "{wdiff}:asks";
const REC_PREFIX: &str = "{wdiff}:rec:";
const WAKE_PREFIX: &str = "{wdiff}:wake:";
const OWNERS: u8 = 3;

/// Client `o`'s id (its wake channel's end, its ask's field).
fn client(o: u8) -> String {
    format!("c{o}")
}

fn owner(o: u8) -> String {
    format!("c{o}:t1")
}

fn record(req: u32) -> String {
    format!("{REC_PREFIX}{req}")
}

fn ms(ticks: i32) -> String {
    (ticks * UNIT).to_string()
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Attempt {
        owner: u8,
        which: Which,
        attempt: u8,
        mode: Mode,
    },
    Release {
        owner: u8,
        which: Which,
        older: Option<usize>,
    },
    /// A stopped wait of an earlier attempt's request (`Some`), or a
    /// wake-up passed on (`None`).
    Leave {
        owner: u8,
        which: Option<usize>,
    },
    Renew {
        owner: u8,
    },
    Subscribe(u8),
    Unsubscribe(u8),
    LeaseEnds,
    RecordEnds(usize),
    WaitersEnd,
    AsksEnd,
    Flush,
    EvictCounter,
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Try), Just(Mode::Listening), Just(Mode::Woken)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..OWNERS, which(), 1..4u8, mode())
            .prop_map(|(owner, which, attempt, mode)| Step::Attempt { owner, which, attempt, mode }),
        5 => (0..OWNERS, which(), prop::option::weighted(0.2, 0..4usize))
            .prop_map(|(owner, which, older)| Step::Release { owner, which, older }),
        2 => (0..OWNERS, prop::option::weighted(0.7, 0..4usize)).prop_map(|(owner, which)| Step::Leave { owner, which }),
        2 => (0..OWNERS).prop_map(|owner| Step::Renew { owner }),
        3 => (0..OWNERS).prop_map(Step::Subscribe),
        1 => (0..OWNERS).prop_map(Step::Unsubscribe),
        1 => Just(Step::LeaseEnds),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => Just(Step::WaitersEnd),
        1 => Just(Step::AsksEnd),
        1 => Just(Step::Flush),
        1 => Just(Step::EvictCounter),
    ]
}

struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    /// Per client: a connection that subscribes to its wake channel while
    /// the model says the client listens.
    subs: &'a mut [Resp],
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

    /// After a step that may have made a token (a take, a grant).
    fn learn_lock(&mut self) -> Result<(), TestCaseError> {
        self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
        if let Some(h) = self.model.lock {
            self.handed_out(h.token);
        }
        Ok(())
    }

    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        self.model.sent.clear();
        match step {
            Step::Attempt {
                owner: o,
                which,
                attempt,
                mode,
            } => {
                let (req, new) = self.reqs.request(which, "acquire", o);
                let a = Acquire {
                    owner: o,
                    req,
                    attempt,
                    mode,
                    first: new,
                };
                let want = self.model.acquire(a, None);
                let rec = record(req);
                let (lease, keep, first) = (ms(LEASE), ms(KEEP), if new { "1" } else { "0" });
                let mut args = vec!["EVAL", ACQUIRE, "3", LOCK, COUNTER, &rec];
                let (mode_arg, id, grant, n) = (
                    match mode {
                        Mode::Try => "0",
                        Mode::Listening => "1",
                        Mode::Woken => "3",
                    },
                    client(o),
                    ms(GRANT),
                    attempt.to_string(),
                );
                let who = owner(o);
                if mode == Mode::Try {
                    args.extend([who.as_str(), &lease, &keep, first]);
                } else {
                    args[2] = "5";
                    args.extend([
                        WAITERS,
                        ASKS,
                        who.as_str(),
                        &lease,
                        &keep,
                        first,
                        mode_arg,
                        &id,
                        &grant,
                        &n,
                    ]);
                }
                let got = self.redis.cmd(&args);
                self.learn_lock()?;
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
                    "5",
                    LOCK,
                    WAITERS,
                    &record(req),
                    COUNTER,
                    ASKS,
                    &owner(o),
                    "0",
                    &ms(KEEP),
                    &real,
                    if new { "1" } else { "0" },
                    WAKE_PREFIX,
                ]);
                self.learn_lock()?;
                let ok = match (want, &got) {
                    (ReleaseReply::Left(n), Reply::Int(m)) => i64::from(n) == *m,
                    (ReleaseReply::NotHeld, Reply::Int(-1)) => true,
                    _ => false,
                };
                prop_assert!(ok, "release: the model answers {want:?}, the server {got:?}");
            }
            Step::Leave { owner: o, which } => {
                let mine = self.reqs.of("acquire", o);
                let stopped = which.filter(|_| !mine.is_empty()).map(|i| mine[i % mine.len()]);
                self.model.leave(o, stopped, None);
                let (rec, who, id) = (stopped.map(record).unwrap_or_default(), owner(o), client(o));
                let mut args = vec![
                    "EVAL",
                    WAKE_NEXT,
                    "4",
                    LOCK,
                    WAITERS,
                    ASKS,
                    COUNTER,
                    "0",
                    WAKE_PREFIX,
                    "PUBLISH",
                ];
                if stopped.is_some() {
                    args.extend([rec.as_str(), &who, &id]);
                }
                self.redis.cmd(&args);
                self.learn_lock()?;
            }
            Step::Renew { owner: o } => {
                let want = self.model.renew(o);
                let got = self.redis.cmd(&["EVAL", RENEW, "1", LOCK, &ms(LEASE), &owner(o)]);
                prop_assert_eq!(got, Reply::Array(vec![Reply::Int(i64::from(want))]), "renew");
            }
            Step::Subscribe(o) | Step::Unsubscribe(o) => {
                let on = matches!(step, Step::Subscribe(_));
                let channel = format!("{WAKE_PREFIX}{}", client(o));
                if self.model.subscribed[o as usize] != on {
                    self.model.subscribed[o as usize] = on;
                    let sub = &mut self.subs[o as usize];
                    // Messages of the client's earlier subscription are read
                    // (and compared) by the step that published them.
                    sub.cmd(&[if on { "SUBSCRIBE" } else { "UNSUBSCRIBE" }, &channel]);
                }
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
            Step::WaitersEnd => {
                self.model.waiters.clear();
                self.redis.cmd(&["DEL", WAITERS]);
            }
            Step::AsksEnd => {
                self.model.asks.clear();
                self.redis.cmd(&["DEL", ASKS]);
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
            (AcquireReply::Fresh(token), Reply::Int(t)) => {
                prop_assert_eq!(i128::from(*t), self.real(token)?, "the fresh token");
            }
            (AcquireReply::Held { token, count }, Reply::Array(v)) if v.len() == 3 => {
                prop_assert_eq!(int(&v[0]), Some(1), "acquired: {:?}", got);
                prop_assert_eq!(int(&v[1]), Some(self.real(token)?), "the token: {:?}", got);
                prop_assert_eq!(int(&v[2]), Some(i128::from(count)), "the count: {:?}", got);
            }
            (AcquireReply::Refused { pttl, place }, Reply::Array(v)) if v.len() == 2 + usize::from(place.is_some()) => {
                prop_assert_eq!(int(&v[0]), Some(0), "refused: {:?}", got);
                let real = v[1].as_int().unwrap_or(i64::MIN);
                let pttl = i64::from(pttl * UNIT);
                prop_assert!(
                    real <= pttl && real > pttl - SLACK,
                    "the holder's pttl: the model {pttl}, the server {real}"
                );
                if let Some(p) = place {
                    prop_assert_eq!(int(&v[2]), Some(p as i128), "the place: {:?}", got);
                }
            }
            _ => prop_assert!(false, "acquire: the model answers {want:?}, the server {got:?}"),
        }
        Ok(())
    }

    /// The messages each subscribed client got, against the model's (a
    /// message to a client not subscribed reaches nobody).
    fn check_messages(&mut self) -> Result<(), TestCaseError> {
        for o in 0..OWNERS {
            let mut want = Vec::new();
            for (to, msg) in self.model.sent.clone() {
                if to != o || !self.model.subscribed[o as usize] {
                    continue;
                }
                want.push(match msg {
                    Msg::Wake => "0".to_string(),
                    Msg::Grant {
                        token,
                        ms,
                        req,
                        attempt,
                    } => format!("g {} {} {} {attempt}", self.real(token)?, ms * UNIT, record(req)),
                });
            }
            let got = if self.model.subscribed[o as usize] {
                diff::published(&mut self.subs[o as usize])
            } else {
                Vec::new()
            };
            prop_assert_eq!(got, want, "messages to client {}", o);
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        self.check_messages()?;
        let now = self.model.now;
        let mut want_keys = Vec::new();
        if let Some(h) = self.model.lock {
            want_keys.push(LOCK.to_string());
            let mut want = vec![
                (owner(h.owner), h.count.to_string()),
                (":kind".to_string(), "reentrant".to_string()),
                (":take".to_string(), record(h.take)),
                (":token".to_string(), self.real(h.token)?.to_string()),
            ];
            if h.wait {
                want.push((":wait".to_string(), "1".to_string()));
            }
            want.sort();
            prop_assert_eq!(diff::hash_fields(self.redis, LOCK), want, "the lock hash");
            check_ttl(self.redis, LOCK, (h.expires - now) * UNIT)?;
        }
        if !self.model.waiters.is_empty() {
            want_keys.push(WAITERS.to_string());
            let order: Vec<String> = self.model.waiters.iter().map(|&o| client(o)).collect();
            prop_assert_eq!(
                self.redis.cmd(&["LRANGE", WAITERS, "0", "-1"]).strings(),
                order,
                "the waiters list"
            );
            let left = (self.model.waiters_expires - now) * UNIT + PAST_LEASE_MS;
            check_ttl(self.redis, WAITERS, left)?;
        }
        if !self.model.asks.is_empty() {
            want_keys.push(ASKS.to_string());
            let mut want: Vec<(String, String)> = self
                .model
                .asks
                .iter()
                .map(|k| {
                    let text = format!("{} {} {} {}", ms(k.ms), record(k.req), k.attempt, owner(k.client));
                    (client(k.client), text)
                })
                .collect();
            want.sort();
            prop_assert_eq!(diff::hash_fields(self.redis, ASKS), want, "the asks");
            let left = (self.model.asks_expires - now) * UNIT + PAST_LEASE_MS;
            check_ttl(self.redis, ASKS, left)?;
        }
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
    diff::assert_the_librarys_scripts(&[ACQUIRE, RELEASE, WAKE_NEXT, RENEW]).await;
}

#[test]
fn the_real_wait_scripts_answer_publish_and_write_as_the_model() {
    let server = common::RedisServer::start();
    let subs = std::cell::RefCell::new((0..OWNERS).map(|_| server.resp()).collect::<Vec<_>>());
    diff::run_sequences_on(&server, step(), |redis, steps| {
        let mut subs = subs.borrow_mut();
        // Every client starts unsubscribed, with nothing left to read.
        for (o, sub) in subs.iter_mut().enumerate() {
            sub.cmd(&["UNSUBSCRIBE", &format!("{WAKE_PREFIX}{}", client(o as u8))]);
            while sub.next(std::time::Duration::from_millis(1)).is_some() {}
        }
        let mut run = Run {
            model: Server::new(OWNERS as usize),
            redis,
            subs: &mut subs,
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
