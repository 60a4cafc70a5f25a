//! The model's scripts (`tests/model/server.rs`) held to the real ones:
//! random sequences of calls and faults, applied to the model and, through
//! the very script texts the library loads, to a real `redis-server`; after
//! each step the replies and every key (fields, token, counter, replay
//! records, TTLs) must agree. proptest shrinks a failing sequence to the
//! shortest one that still diverges.
//!
//! Time does not run in the model here (the real server's clock does, a
//! few milliseconds per sequence): leases are minutes long and a lease's
//! end is a step of its own (the key deleted on both sides), as is a
//! record's.
mod common;
mod diff;
mod model;

use common::{Reply, Resp};
use diff::{check_key_set, check_ttl, which, Requests, Tokens, Which, ACQUIRE, RELEASE, RENEW, SLACK};
use model::server::{AcquireReply, Key, ReleaseCall, ReleaseReply, Server};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Leases in milliseconds (the model counts the same units here).
const LEASES: [i32; 3] = [100_000, 200_000, 300_000];
const KEEP: i32 = 60_000;

const LOCK: &str = "{diff}:lock";
const COUNTER: &str = "{diff}:token";
const WAITERS: &str = "{diff}:waiters";
const ASKS: &str = "{diff}:asks";

fn owner(o: u8) -> String {
    format!("c{o}:t1")
}

fn record(req: u32) -> String {
    format!("{{diff}}:rec:{req}")
}

/// Which token a release names.
#[derive(Clone, Copy, Debug)]
enum Named {
    /// The current hold's (or the last one handed out).
    Current,
    /// One handed out before.
    Older(usize),
    /// Unknown: "".
    Unknown,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Acquire {
        owner: u8,
        which: Which,
        /// A new request sent as a re-send (its first send never arrived).
        resent: bool,
        lease: usize,
    },
    Release {
        owner: u8,
        which: Which,
        resent: bool,
        token: Named,
        relet: bool,
    },
    Renew {
        owner: u8,
        lease: usize,
    },
    LeaseEnds,
    RecordEnds(usize),
    Flush,
    EvictCounter,
    WriteForeign,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3u8, which(), prop::bool::weighted(0.2), 0..3usize)
            .prop_map(|(owner, which, resent, lease)| Step::Acquire { owner, which, resent, lease }),
        5 => (
            0..3u8,
            which(),
            prop::bool::weighted(0.2),
            prop_oneof![4 => Just(Named::Current), 1 => (0..4usize).prop_map(Named::Older), 1 => Just(Named::Unknown)],
            any::<bool>()
        )
            .prop_map(|(owner, which, resent, token, relet)| Step::Release { owner, which, resent, token, relet }),
        2 => (0..3u8, 0..3usize).prop_map(|(owner, lease)| Step::Renew { owner, lease }),
        1 => Just(Step::LeaseEnds),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => Just(Step::Flush),
        1 => Just(Step::EvictCounter),
        1 => Just(Step::WriteForeign),
    ]
}

/// One sequence's run: the model, the real server, and what ties their
/// tokens together.
struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    /// Requests made so far, by owner.
    reqs: Requests<u8>,
    /// Tokens handed out so far (model values).
    tokens: Vec<u64>,
    /// What ties the real tokens to the model's.
    map: Tokens,
}

impl Run<'_> {
    fn real(&self, token: u64) -> Result<i128, TestCaseError> {
        self.map.real(token)
    }

    fn learn_counter(&mut self) -> Result<(), TestCaseError> {
        self.map.learn(self.model.counter.value, self.redis, COUNTER)
    }

    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::Acquire {
                owner: o,
                which,
                resent,
                lease,
            } => {
                let (req, new) = self.reqs.request(which, "acquire", o);
                let first = new && !resent;
                let lease = LEASES[lease];
                let want = self.model.acquire(o, req, lease, KEEP, first, None);
                let got = self.redis.cmd(&[
                    "EVAL",
                    ACQUIRE,
                    "3",
                    LOCK,
                    COUNTER,
                    &record(req),
                    &owner(o),
                    &lease.to_string(),
                    &KEEP.to_string(),
                    if first { "1" } else { "0" },
                ]);
                self.learn_counter()?;
                self.check_acquire(want, &got)?;
            }
            Step::Release {
                owner: o,
                which,
                resent,
                token,
                relet,
            } => {
                let (req, new) = self.reqs.request(which, "release", o);
                let first = new && !resent;
                let token = match (token, self.tokens.last()) {
                    (Named::Unknown, _) | (_, None) => None,
                    (Named::Current, _) => match self.model.lock {
                        Key::Hold(h) => Some(h.token),
                        _ => self.tokens.last().copied(),
                    },
                    (Named::Older(i), _) => Some(self.tokens[i % self.tokens.len()]),
                };
                let relet = if relet { LEASES[2] } else { 0 };
                let call = ReleaseCall {
                    owner: o,
                    req,
                    token,
                    relet,
                    keep: KEEP,
                    first,
                };
                let want = self.model.release(call, None);
                let token_arg = match token {
                    Some(t) => self.real(t)?.to_string(),
                    None => String::new(),
                };
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
                    &relet.to_string(),
                    &KEEP.to_string(),
                    &token_arg,
                    if first { "1" } else { "0" },
                    "{diff}:wake:",
                ]);
                let ok = match (want, &got) {
                    (ReleaseReply::Left(n), Reply::Int(m)) => i64::from(n) == *m,
                    (ReleaseReply::NotHeld, Reply::Int(-1)) => true,
                    (ReleaseReply::WrongType, Reply::Err(e)) => e.starts_with("WRONGTYPE string 1"),
                    _ => false,
                };
                prop_assert!(ok, "release: the model answers {want:?}, the server {got:?}");
            }
            Step::Renew { owner: o, lease } => {
                let lease = LEASES[lease];
                let want = self.model.renew(o, lease, None);
                let got = self
                    .redis
                    .cmd(&["EVAL", RENEW, "1", LOCK, &lease.to_string(), &owner(o)]);
                prop_assert_eq!(got, Reply::Array(vec![Reply::Int(i64::from(want))]), "renew");
            }
            Step::LeaseEnds => {
                if let Key::Hold(_) = self.model.lock {
                    self.model.lock = Key::Absent;
                    self.redis.cmd(&["DEL", LOCK]);
                }
            }
            Step::RecordEnds(i) => {
                if !self.model.records.is_empty() {
                    let r = self.model.records.remove(i % self.model.records.len());
                    self.redis.cmd(&["DEL", &record(r.req)]);
                }
            }
            Step::Flush => {
                self.model.flush();
                self.redis.cmd(&["FLUSHALL"]);
            }
            Step::EvictCounter => {
                self.model.counter.value = None;
                self.redis.cmd(&["DEL", COUNTER]);
            }
            Step::WriteForeign => {
                if self.model.lock == Key::Absent {
                    self.model.lock = Key::Foreign;
                    self.redis.cmd(&["SET", LOCK, "another program's"]);
                }
            }
        }
        self.check_keys()
    }

    fn check_acquire(&mut self, want: AcquireReply, got: &Reply) -> Result<(), TestCaseError> {
        let int = |r: &Reply| r.as_int().map(i128::from);
        match (want, got) {
            (AcquireReply::Fresh(t), Reply::Int(real)) => {
                prop_assert_eq!(i128::from(*real), self.real(t)?, "a fresh take's token");
                self.handed_out(t);
            }
            (AcquireReply::Held { token, count }, Reply::Array(v)) if v.len() == 3 => {
                prop_assert_eq!(int(&v[0]), Some(1), "acquired: {:?}", got);
                prop_assert_eq!(int(&v[1]), Some(self.real(token)?), "the token: {:?}", got);
                prop_assert_eq!(int(&v[2]), Some(i128::from(count)), "the count: {:?}", got);
                self.handed_out(token);
            }
            (AcquireReply::Refused { pttl }, Reply::Array(v)) if v.len() == 2 => {
                prop_assert_eq!(int(&v[0]), Some(0), "refused: {:?}", got);
                let real = v[1].as_int().unwrap_or(i64::MIN);
                prop_assert!(
                    real <= i64::from(pttl) && real > i64::from(pttl) - SLACK,
                    "the holder's pttl: the model {pttl}, the server {real}"
                );
            }
            (AcquireReply::WrongType, Reply::Err(e)) if e.starts_with("WRONGTYPE string 1") => {}
            _ => prop_assert!(false, "acquire: the model answers {want:?}, the server {got:?}"),
        }
        Ok(())
    }

    fn handed_out(&mut self, token: u64) {
        if !self.tokens.contains(&token) {
            self.tokens.push(token);
        }
        self.map.handed_out(token);
    }

    /// Every key the model has, the server has, with the same contents;
    /// and no other.
    fn check_keys(&mut self) -> Result<(), TestCaseError> {
        let mut want_keys = Vec::new();
        match self.model.lock {
            Key::Absent => {}
            Key::Foreign => {
                want_keys.push(LOCK.to_string());
                prop_assert_eq!(self.redis.cmd(&["TYPE", LOCK]), Reply::Str("string".into()));
            }
            Key::Hold(h) => {
                want_keys.push(LOCK.to_string());
                let pairs = diff::hash_fields(self.redis, LOCK);
                let mut want = vec![
                    (owner(h.owner), h.count.to_string()),
                    (":kind".to_string(), "reentrant".to_string()),
                    (":take".to_string(), record(h.take)),
                    (":token".to_string(), self.real(h.token)?.to_string()),
                ];
                want.sort();
                prop_assert_eq!(pairs, want, "the lock hash");
                check_ttl(self.redis, LOCK, h.expires - self.model.now)?;
            }
        }
        want_keys.extend(self.map.check_counter_and_records(
            self.redis,
            (COUNTER, self.model.counter.value),
            &self.model.records,
            self.model.now,
            record,
        )?);
        check_key_set(self.redis, want_keys)
    }
}

/// The script texts here are the library's: a client of the library
/// loads its scripts, and loading these adds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_tested_are_the_ones_the_library_loads() {
    diff::assert_the_librarys_scripts(&[ACQUIRE, RELEASE, RENEW]).await;
}

#[test]
fn the_real_scripts_answer_and_write_as_the_model() {
    diff::run_sequences(step(), |redis, steps| {
        let mut run = Run {
            model: Server::new(),
            redis,
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
