//! What the differential tests share (`tests/differential.rs`,
//! `tests/differential_family.rs`): running random step sequences on the
//! model and a real server, telling the real tokens from the model's, and
//! comparing the keys every kind keeps alike (the counter, replay records,
//! TTLs, the key set).

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::common::{RedisServer, Reply, Resp};
use crate::model::server::{Record, Recorded, EPOCH};

/// The reentrant lock's scripts, put together as `src/protocol/reentrant.rs`
/// does (each test checks the server holds the same texts after a client
/// loaded the library's).
#[allow(dead_code)]
pub const ACQUIRE: &str = concat!(
    include_str!("../../lua/acquire_free.lua"),
    include_str!("../../lua/shared.lua"),
    include_str!("../../lua/shared_acquire.lua"),
    include_str!("../../lua/shared_listen.lua"),
    include_str!("../../lua/acquire.lua")
);
#[allow(dead_code)]
pub const RELEASE: &str = concat!(
    include_str!("../../lua/release_last.lua"),
    include_str!("../../lua/shared.lua"),
    include_str!("../../lua/shared_release.lua"),
    include_str!("../../lua/shared_wake.lua"),
    include_str!("../../lua/release.lua")
);
/// The renewal (every kind's).
#[allow(dead_code)]
pub const RENEW: &str = include_str!("../../lua/renew.lua");

/// How far a real TTL may be below the model's: the time a sequence takes.
pub const SLACK: i64 = 5_000;

/// Runs `cases` (`LOCKWARDEN_DIFF_CASES`, else 200) random sequences of
/// `step`s, each from a flushed server, through `apply`; a sequence that
/// fails is shrunk to the shortest that still fails, and panics.
#[allow(dead_code)]
pub fn run_sequences<S: Strategy>(step: S, apply: impl Fn(&mut Resp, Vec<S::Value>) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    run_sequences_on(&RedisServer::start(), step, apply)
}

/// [`run_sequences`] on `server`.
pub fn run_sequences_on<S: Strategy>(
    server: &RedisServer,
    step: S,
    apply: impl Fn(&mut Resp, Vec<S::Value>) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let redis = std::cell::RefCell::new(server.resp());
    let cases = std::env::var("LOCKWARDEN_DIFF_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(step, 1..40), |steps| {
        let mut redis = redis.borrow_mut();
        redis.cmd(&["FLUSHALL"]);
        apply(&mut redis, steps)
    });
    if let Err(e) = result {
        panic!("the model and the scripts differ: {e}");
    }
}

/// Loading `texts` into a server whose scripts a library client loaded
/// adds none: they are the library's own.
pub async fn assert_the_librarys_scripts(texts: &[&str]) {
    let server = RedisServer::start();
    let cached = |s: &RedisServer| s.info_field("memory", "number_of_cached_scripts");
    server.cmd(&["SCRIPT", "FLUSH"]);
    let _client = crate::common::client(&server.url(), Duration::from_secs(30)).await;
    let loaded = cached(&server);
    assert!(
        loaded.as_deref().is_some_and(|n| n != "0"),
        "the client loaded its scripts"
    );
    for text in texts {
        server.cmd(&["SCRIPT", "LOAD", text]);
    }
    assert_eq!(
        cached(&server),
        loaded,
        "a script text here is not one the library loads"
    );
}

/// The real tokens against the model's: the real counter starts at the
/// server's clock, the model's at `n * EPOCH` for its `n`-th start.
#[derive(Default)]
#[allow(dead_code)]
pub struct Tokens {
    /// Per counter start (model token / EPOCH): the real counter's value
    /// minus the model's.
    offsets: BTreeMap<u64, i128>,
    /// The highest real token seen.
    real_max: i128,
}

#[allow(dead_code)]
impl Tokens {
    /// The real token for the model's `token` (0 stays 0: none).
    pub fn real(&self, token: u64) -> Result<i128, TestCaseError> {
        if token == 0 {
            return Ok(0);
        }
        let off = self
            .offsets
            .get(&(token / EPOCH))
            .ok_or_else(|| TestCaseError::fail(format!("no real counter seen for model token {token}")))?;
        Ok(i128::from(token) + off)
    }

    /// Learns the real counter's start when the model (whose counter is
    /// `model`) made a new one; checks the clock assumption on the real
    /// server: a new counter starts above every token handed out before.
    pub fn learn(&mut self, model: Option<u64>, redis: &mut Resp, counter: &str) -> Result<(), TestCaseError> {
        let Some(model) = model else { return Ok(()) };
        let start = model / EPOCH;
        if self.offsets.contains_key(&start) {
            return Ok(());
        }
        let real: i128 = match redis.cmd(&["GET", counter]) {
            Reply::Str(s) => s.parse().map_err(|_| TestCaseError::fail(format!("counter {s:?}")))?,
            other => {
                return Err(TestCaseError::fail(format!(
                    "the model has a counter, the server {other:?}"
                )))
            }
        };
        prop_assert!(
            real > self.real_max,
            "a restarted counter {real} is not above {}",
            self.real_max
        );
        self.offsets.insert(start, real - i128::from(model));
        Ok(())
    }

    /// A token handed out: the highest real one so far.
    pub fn handed_out(&mut self, token: u64) {
        if let Ok(real) = self.real(token) {
            self.real_max = self.real_max.max(real);
        }
    }

    /// The counter and the replay records (`record(req)`: a record's key)
    /// as the model has them at `now`; returns their keys.
    pub fn check_counter_and_records(
        &self,
        redis: &mut Resp,
        counter: (&str, Option<u64>),
        records: &[Record],
        now: i32,
        record: impl Fn(u32) -> String,
    ) -> Result<Vec<String>, TestCaseError> {
        let mut keys = Vec::new();
        if let Some(c) = counter.1 {
            keys.push(counter.0.to_string());
            let real = redis.cmd(&["GET", counter.0]);
            prop_assert_eq!(real.as_int().map(i128::from), Some(self.real(c)?), "the counter");
        }
        for r in records {
            let key = record(r.req);
            let want = match r.value {
                Recorded::Entered { token, count } => format!("{}:{count}", self.real(token)?),
                Recorded::Left(n) => n.to_string(),
                Recorded::Granted { token } => format!("{}:1:g", self.real(token)?),
                Recorded::GaveBack => "left".to_string(),
            };
            prop_assert_eq!(redis.cmd(&["GET", &key]), Reply::Str(want), "record {}", key);
            check_ttl(redis, &key, r.expires - now)?;
            keys.push(key);
        }
        Ok(keys)
    }
}

/// The key's TTL is the model's `left` ms, less the time the sequence took.
pub fn check_ttl(redis: &mut Resp, key: &str, left: i32) -> Result<(), TestCaseError> {
    let pttl = redis.cmd(&["PTTL", key]).as_int().unwrap_or(i64::MIN);
    let left = i64::from(left);
    prop_assert!(
        pttl <= left && pttl > left - SLACK,
        "{key}: the model's TTL {left} ms, the server's {pttl}"
    );
    Ok(())
}

/// The fields of the hash `key`, sorted.
#[allow(dead_code)]
pub fn hash_fields(redis: &mut Resp, key: &str) -> Vec<(String, String)> {
    let mut fields = redis.cmd(&["HGETALL", key]).strings();
    let mut pairs: Vec<(String, String)> = fields
        .chunks_mut(2)
        .map(|p| (std::mem::take(&mut p[0]), std::mem::take(&mut p[1])))
        .collect();
    pairs.sort();
    pairs
}

/// The server has exactly the keys `want`.
#[allow(dead_code)]
pub fn check_key_set(redis: &mut Resp, mut want: Vec<String>) -> Result<(), TestCaseError> {
    want.sort();
    let mut keys = redis.cmd(&["KEYS", "*"]).strings();
    keys.sort();
    prop_assert_eq!(keys, want, "the keys");
    Ok(())
}

/// Which request a call is: a new one, or one sent before (a re-send).
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)]
pub enum Which {
    New,
    Again(usize),
}

#[allow(dead_code)]
pub fn which() -> impl Strategy<Value = Which> {
    prop_oneof![3 => Just(Which::New), 2 => (0..8usize).prop_map(Which::Again)]
}

/// The requests made so far: id, call ("acquire", "release", ...) and who
/// made it (`K`: an owner, a field); a re-send is of one of the same call
/// and maker.
#[allow(dead_code)]
pub struct Requests<K> {
    made: Vec<(u32, &'static str, K)>,
}

impl<K> Default for Requests<K> {
    fn default() -> Self {
        Requests { made: Vec::new() }
    }
}

#[allow(dead_code)]
impl<K: PartialEq + Copy> Requests<K> {
    /// The ids of `call`s `by` made so far, oldest first.
    pub fn of(&self, call: &str, by: K) -> Vec<u32> {
        self.made
            .iter()
            .filter(|r| r.1 == call && r.2 == by)
            .map(|r| r.0)
            .collect()
    }

    /// The request a step sends, and whether it is new.
    pub fn request(&mut self, which: Which, call: &'static str, by: K) -> (u32, bool) {
        let mine = self.of(call, by);
        match which {
            Which::Again(i) if !mine.is_empty() => (mine[i % mine.len()], false),
            _ => {
                let req = self.made.len() as u32 + 1;
                self.made.push((req, call, by));
                (req, true)
            }
        }
    }
}

/// The payloads `sub` (subscribed to one channel) got since the last call:
/// everything before the reply to a PING it sends now.
#[allow(dead_code)]
pub fn published(sub: &mut Resp) -> Vec<String> {
    messages(sub).into_iter().map(|(_, m)| m).collect()
}

/// As [`published`], each message with its channel; for a subscriber to
/// channels (SUBSCRIBE) or to patterns (PSUBSCRIBE).
#[allow(dead_code)]
pub fn messages(sub: &mut Resp) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut reply = sub.cmd(&["PING"]);
    loop {
        let at = match &reply {
            Reply::Array(parts) if parts.len() == 3 && parts[0].as_str() == Some("message") => 1,
            Reply::Array(parts) if parts.len() == 4 && parts[0].as_str() == Some("pmessage") => 2,
            _ => return out,
        };
        if let Reply::Array(parts) = &reply {
            let text = |i: usize| parts[i].as_str().unwrap_or_default().to_string();
            out.push((text(at), text(at + 1)));
        }
        reply = sub.next(std::time::Duration::from_secs(10)).expect("the PING's reply");
    }
}
