//! The count-down latch's model (`tests/model/latch.rs`) held to the real
//! `latch.lua`: random sequences of settings, count-downs and reads (new
//! requests and re-sends of earlier ones), records ending, FLUSHALL and
//! evictions, applied to the model and, through the script text the
//! library loads, to a real `redis-server`; after each step the replies,
//! the latch hash, the token counter and the replay records must agree,
//! and the server must have no other key. proptest shrinks a failing
//! sequence to the shortest one that still diverges.
mod common;
mod diff;
mod model;

use common::{Reply, Resp};
use diff::{check_key_set, check_ttl, which, Requests, Tokens, Which};
use model::latch::{Latch, Op, Read, Reply as LatchReply, Server};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The script as `src/protocol/latch.rs` puts it together.
const LATCH: &str = concat!(include_str!("../lua/shared.lua"), include_str!("../lua/latch.lua"));

/// A replay record's lifetime in ms (the model's records do not age here:
/// a record's end is a step of its own).
const KEEP: i32 = 60_000;

const KEY: &str = "{diff}:latch";
const COUNTER: &str = "{diff}:token";
const CHANNEL: &str = "{diff}:channel";

fn record(req: u32) -> String {
    format!("{{diff}}:rec:{req}")
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Set {
        by: u8,
        n: u8,
        which: Which,
        /// A new request sent as a re-send (its first send never arrived).
        resent: bool,
    },
    Down {
        by: u8,
        which: Which,
        resent: bool,
    },
    Read,
    RecordEnds(usize),
    Flush,
    Evict,
    EvictCounter,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2u8, 1..4u8, which(), prop::bool::weighted(0.2))
            .prop_map(|(by, n, which, resent)| Step::Set { by, n, which, resent }),
        6 => (0..3u8, which(), prop::bool::weighted(0.2)).prop_map(|(by, which, resent)| Step::Down { by, which, resent }),
        2 => Just(Step::Read),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => Just(Step::Flush),
        1 => Just(Step::Evict),
        1 => Just(Step::EvictCounter),
    ]
}

struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    reqs: Requests<u8>,
    map: Tokens,
}

impl Run<'_> {
    fn call(&mut self, op: Op, req: u32, first: bool) -> Result<(), TestCaseError> {
        let want = self.model.call(op, req, first, None);
        let (what, n) = match op {
            Op::Set(n) => ("set", n),
            Op::Down => ("down", 0),
        };
        let got = self.eval(what, n, req, first);
        self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
        if let LatchReply::Set { ok: true, gen } = want {
            self.map.handed_out(gen);
        }
        let want = self.reply(want)?;
        prop_assert_eq!(got, Reply::Array(want), "{:?}", op);
        Ok(())
    }

    /// `latch.lua`'s call `what` (with the count `n`) as request `req`.
    fn eval(&mut self, what: &str, n: u8, req: u32, first: bool) -> Reply {
        self.redis.cmd(&[
            "EVAL",
            LATCH,
            "3",
            KEY,
            COUNTER,
            &record(req),
            what,
            &n.to_string(),
            CHANNEL,
            "PUBLISH",
            &KEEP.to_string(),
            if first { "1" } else { "0" },
        ])
    }

    /// The script's reply for the model's, in real generations.
    fn reply(&self, r: LatchReply) -> Result<Vec<Reply>, TestCaseError> {
        let int = |n: i128| Reply::Int(n as i64);
        Ok(match r {
            LatchReply::Set { ok, gen } => vec![int(i128::from(ok)), int(self.map.real(gen)?)],
            LatchReply::Down { left: None, .. } => vec![int(-1)],
            LatchReply::Down { left: Some(n), gen } => vec![int(i128::from(n)), int(self.map.real(gen)?)],
        })
    }

    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::Set { by, n, which, resent } => {
                let (req, new) = self.reqs.request(which, "set", by);
                self.call(Op::Set(n), req, new && !resent)?;
            }
            Step::Down { by, which, resent } => {
                let (req, new) = self.reqs.request(which, "down", by);
                self.call(Op::Down, req, new && !resent)?;
            }
            Step::Read => {
                let got = self.eval("read", 0, 0, true);
                let want = match self.model.read() {
                    Read::Absent => vec![Reply::Int(-1)],
                    Read::Counting(l) => vec![
                        Reply::Int(i64::from(l.count)),
                        Reply::Int(self.map.real(l.gen)? as i64),
                        Reply::Int(self.map.real(l.zeroed)? as i64),
                    ],
                };
                prop_assert_eq!(got, Reply::Array(want), "read");
            }
            Step::RecordEnds(i) => {
                if !self.model.records.is_empty() {
                    let r = self.model.records.remove(i % self.model.records.len());
                    self.redis.cmd(&["DEL", &record(r.0)]);
                }
            }
            Step::Flush => {
                self.model.flush();
                self.redis.cmd(&["FLUSHALL"]);
            }
            Step::Evict => {
                self.model.evict();
                self.redis.cmd(&["DEL", KEY]);
            }
            Step::EvictCounter => {
                self.model.counter.value = None;
                self.redis.cmd(&["DEL", COUNTER]);
            }
        }
        self.check_keys()
    }

    /// The latch hash, the counter and the records as the model has them,
    /// and no other key.
    fn check_keys(&mut self) -> Result<(), TestCaseError> {
        let mut keys = Vec::new();
        if let Some(Latch { count, gen, zeroed }) = self.model.latch {
            keys.push(KEY.to_string());
            let mut want = vec![
                (":count".to_string(), count.to_string()),
                (":gen".to_string(), self.map.real(gen)?.to_string()),
                (":kind".to_string(), "latch".to_string()),
            ];
            if zeroed != 0 {
                want.push((":zeroed".to_string(), self.map.real(zeroed)?.to_string()));
            }
            want.sort();
            prop_assert_eq!(diff::hash_fields(self.redis, KEY), want, "the latch hash");
            prop_assert_eq!(self.redis.cmd(&["PTTL", KEY]), Reply::Int(-1), "the latch has no TTL");
        }
        if let Some(c) = self.model.counter.value {
            keys.push(COUNTER.to_string());
            prop_assert_eq!(
                self.redis.cmd(&["GET", COUNTER]).as_int().map(i128::from),
                Some(self.map.real(c)?),
                "the counter"
            );
        }
        for &(req, reply, _) in &self.model.records {
            let key = record(req);
            let want: Vec<String> = self
                .reply(reply)?
                .iter()
                .map(|r| r.as_int().unwrap_or_default().to_string())
                .collect();
            prop_assert_eq!(
                self.redis.cmd(&["GET", &key]),
                Reply::Str(want.join(" ")),
                "record {}",
                key
            );
            check_ttl(self.redis, &key, KEEP)?;
            keys.push(key);
        }
        check_key_set(self.redis, keys)
    }
}

/// The script text here is the library's: a client of the library loads
/// its scripts, and loading this adds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_tested_is_the_one_the_library_loads() {
    diff::assert_the_librarys_scripts(&[LATCH]).await;
}

#[test]
fn the_real_latch_script_answers_and_writes_as_the_model() {
    diff::run_sequences(step(), |redis, steps| {
        let mut run = Run {
            model: Server::new(),
            redis,
            reqs: Requests::default(),
            map: Tokens::default(),
        };
        for step in steps {
            run.apply(step)?;
        }
        Ok(())
    });
}
