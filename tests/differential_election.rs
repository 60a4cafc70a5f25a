//! The leader election's model (`tests/model/election.rs`) held to the real
//! `elect_proclaim.lua`: random sequences of campaigns (the reentrant
//! lock's real `acquire.lua`), proclaims under the term the leadership
//! knows, an earlier term or one never handed out, leases ending, FLUSHALL
//! and keys of another type, applied to the model and to a real
//! `redis-server`. After each step the replies, the value in the lock's
//! hash, the election's log and what was published on its channel must be
//! as the model says (the log is kept here beside the model: every
//! proclaim the model accepts appends its term and value, which the model
//! checker leaves out to keep its state small). proptest shrinks a failing
//! sequence to the shortest one that still diverges.
mod common;
mod diff;
mod model;

use common::{Reply, Resp};
use diff::{Tokens, ACQUIRE};
use model::election::{Reply as ElectReply, Server};
use model::server::Counter;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The script as `src/protocol/election.rs` loads it.
const PROCLAIM: &str = include_str!("../lua/elect_proclaim.lua");

/// The lease of a campaign's hold, and a replay record's lifetime, in ms:
/// longer than any sequence (a lease's end is a step of its own).
const LEASE: i32 = 100_000;
const KEEP: i32 = 60_000;
/// How long the log lives after its last entry (ARGV[5]), in ms.
const LOG_TTL: i32 = 86_400_000;

const LOCK: &str = "{diff}:election";
const COUNTER: &str = "{diff}:token";
const LOG: &str = "{diff}:log";
const CHANNEL: &str = "{diff}:channel";

fn owner(o: u8) -> String {
    format!("c{o}:t1")
}

/// The value campaign `o` proclaims under the (real) term it names: the
/// same call always writes the same value.
fn value(o: u8, term: &str) -> String {
    format!("v{o}@{term}")
}

/// Which term a proclaim names.
#[derive(Clone, Copy, Debug)]
enum Term {
    /// The term its campaign was handed last (the leadership's).
    Own,
    /// One handed out earlier, to anyone.
    Earlier(usize),
    /// A number no hold ever had.
    Never,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Campaign(u8),
    Proclaim(u8, Term),
    LeaseEnds,
    Flush,
    /// A key of another type at KEYS[i] (1: the lock, 2: the log) for one
    /// proclaim, then deleted.
    Foreign(u8, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..3u8).prop_map(Step::Campaign),
        6 => (
            0..3u8,
            prop_oneof![4 => Just(Term::Own), 2 => (0..4usize).prop_map(Term::Earlier), 1 => Just(Term::Never)]
        )
            .prop_map(|(o, t)| Step::Proclaim(o, t)),
        1 => Just(Step::LeaseEnds),
        1 => Just(Step::Flush),
        1 => (0..3u8, 1..3usize).prop_map(|(o, k)| Step::Foreign(o, k)),
    ]
}

struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    sub: &'a mut Resp,
    /// Each campaign's last term (model values), and every term handed out.
    own: [Option<u64>; 3],
    terms: Vec<u64>,
    /// The log as the model's proclaims make it: (real term, value).
    log: Vec<(String, String)>,
    map: Tokens,
    requests: u32,
}

impl Run<'_> {
    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        let mut published = Vec::new();
        match step {
            Step::Campaign(o) => {
                self.requests += 1;
                let want = self.model.acquire(o, None);
                let got = self.redis.cmd(&[
                    "EVAL",
                    ACQUIRE,
                    "3",
                    LOCK,
                    COUNTER,
                    &format!("{{diff}}:rec:{}", self.requests),
                    &owner(o),
                    &LEASE.to_string(),
                    &KEEP.to_string(),
                    "1",
                ]);
                self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
                let token = match &got {
                    Reply::Int(t) => Some(i128::from(*t)),
                    Reply::Array(v) if v.len() == 3 && v[0].as_int() == Some(1) => v[1].as_int().map(i128::from),
                    _ => None,
                };
                match want {
                    ElectReply::Acquired(t) => {
                        prop_assert_eq!(token, Some(self.map.real(t)?), "campaign: {:?}", got);
                        self.map.handed_out(t);
                        self.own[usize::from(o)] = Some(t);
                        if !self.terms.contains(&t) {
                            self.terms.push(t);
                        }
                    }
                    _ => prop_assert!(token.is_none(), "campaign refused by the model: {:?}", got),
                }
            }
            Step::Proclaim(o, term) => {
                let (model_term, real) = self.term(o, term)?;
                let want = self.model.proclaim(o, model_term, None);
                let got = self.proclaim(o, &real);
                match want {
                    ElectReply::Proclaimed(Some(t)) => {
                        let t = self.map.real(t)?.to_string();
                        prop_assert_eq!(got, Reply::Int(t.parse().unwrap_or_default()), "proclaim");
                        self.log.push((t.clone(), value(o, &real)));
                        published.push(t);
                    }
                    _ => prop_assert_eq!(got, Reply::Int(-1), "proclaim refused by the model"),
                }
            }
            Step::LeaseEnds => {
                self.model.lock = None;
                self.redis.cmd(&["DEL", LOCK]);
            }
            Step::Flush => {
                self.model.lock = None;
                self.model.counter.value = None;
                self.log.clear();
                self.redis.cmd(&["FLUSHALL"]);
            }
            Step::Foreign(o, k) => {
                let key = [LOCK, LOG][k - 1];
                self.redis.cmd(&["DEL", key]);
                self.redis.cmd(&["SET", key, "foreign"]);
                if k == 1 {
                    self.model.lock = None;
                } else {
                    self.log.clear();
                }
                let (_, real) = self.term(o, Term::Own)?;
                let got = self.proclaim(o, &real);
                prop_assert_eq!(got, Reply::Err(format!("WRONGTYPE string {k}")), "a foreign key");
                prop_assert_eq!(
                    self.redis.cmd(&["GET", key]),
                    Reply::Str("foreign".into()),
                    "left alone"
                );
                self.redis.cmd(&["DEL", key]);
            }
        }
        prop_assert_eq!(diff::published(self.sub), published, "published after {:?}", step);
        self.check()
    }

    /// The term a proclaim of campaign `o` names: the model's number and
    /// the real one sent.
    fn term(&self, o: u8, term: Term) -> Result<(u64, String), TestCaseError> {
        let known = match term {
            Term::Own => self.own[usize::from(o)],
            Term::Earlier(i) if !self.terms.is_empty() => Some(self.terms[i % self.terms.len()]),
            _ => None,
        };
        Ok(match known {
            Some(t) => (t, self.map.real(t)?.to_string()),
            None => (0, "7".to_string()),
        })
    }

    fn proclaim(&mut self, o: u8, term: &str) -> Reply {
        self.redis.cmd(&[
            "EVAL",
            PROCLAIM,
            "2",
            LOCK,
            LOG,
            &owner(o),
            &value(o, term),
            CHANNEL,
            "PUBLISH",
            &LOG_TTL.to_string(),
            term,
        ])
    }

    /// The value in the lock's hash, and the log, as the model has them.
    fn check(&mut self) -> Result<(), TestCaseError> {
        let want = match self.model.lock {
            Some(h) => match h.value {
                Some((o, t)) => Reply::Str(value(o, &self.map.real(t)?.to_string())),
                None => Reply::Nil,
            },
            None => Reply::Nil,
        };
        prop_assert_eq!(self.redis.cmd(&["HGET", LOCK, ":value"]), want, "the value");
        let entries = match self.redis.cmd(&["XRANGE", LOG, "-", "+"]) {
            Reply::Array(v) => v
                .iter()
                .map(|e| match e {
                    Reply::Array(p) if p.len() == 2 => match &p[1] {
                        Reply::Array(f) if f.len() == 4 => (
                            f[1].as_str().unwrap_or_default().to_string(),
                            f[3].as_str().unwrap_or_default().to_string(),
                        ),
                        _ => Default::default(),
                    },
                    _ => Default::default(),
                })
                .collect::<Vec<_>>(),
            other => return Err(TestCaseError::fail(format!("XRANGE: {other:?}"))),
        };
        prop_assert_eq!(&entries, &self.log, "the log");
        if !self.log.is_empty() {
            let pttl = self.redis.cmd(&["PTTL", LOG]).as_int().unwrap_or(i64::MIN);
            prop_assert!(
                pttl <= i64::from(LOG_TTL) && pttl > i64::from(LOG_TTL) - diff::SLACK,
                "the log's TTL {pttl}"
            );
        }
        Ok(())
    }
}

/// The script text here is the library's: a client of the library loads
/// its scripts, and loading this adds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_tested_is_the_one_the_library_loads() {
    diff::assert_the_librarys_scripts(&[PROCLAIM, ACQUIRE]).await;
}

#[test]
fn the_real_proclaim_script_answers_writes_and_publishes_as_the_model() {
    let server = common::RedisServer::start();
    let mut sub = server.resp();
    sub.cmd(&["SUBSCRIBE", CHANNEL]);
    let sub = std::cell::RefCell::new(sub);
    diff::run_sequences_on(&server, step(), |redis, steps| {
        let mut sub = sub.borrow_mut();
        // Nothing left over from the last sequence.
        diff::published(&mut sub);
        let mut run = Run {
            model: Server {
                lock: None,
                counter: Counter::default(),
                value_under_other_term: false,
            },
            redis,
            sub: &mut sub,
            own: [None; 3],
            terms: Vec::new(),
            log: Vec::new(),
            map: Tokens::default(),
            requests: 0,
        };
        for step in steps {
            run.apply(step)?;
        }
        Ok(())
    });
}
