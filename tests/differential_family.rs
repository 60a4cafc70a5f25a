//! The read-write lock's and the semaphore's model (`tests/model/shared_hash.rs`)
//! held to their real scripts, as `tests/differential.rs` does for the
//! reentrant lock: random sequences of both kinds' calls on one name, with
//! holds' and marks' leases ending, records ending, FLUSHALL, a lost
//! counter, a foreign key and the semaphore's number changing, applied to
//! the model and to a real `redis-server`; after each step every reply and
//! every key (fields, deadlines, token, counter, records, TTLs) must agree.
//!
//! The model's clock stays at 0 here (leases are minutes long): a lease's
//! end is a step that dates the hold's deadline field in the past on both
//! sides, and the next script to look prunes it.
mod common;
mod diff;
mod model;

use std::collections::BTreeMap;

use common::{Reply, Resp};
use diff::{check_key_set, check_ttl, which, Requests, Tokens, Which, RENEW, SLACK};
use model::shared_hash::{AcquireReply, Field, Kind, Name, ReleaseReply, RwAcquire, RwRelease, SemAcquire, Server};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const RW_ACQUIRE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/rw_acquire.lua")
);
const RW_RELEASE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/rw_release.lua")
);
const RW_LEAVE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/rw_leave.lua")
);
const SEM_ACQUIRE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/sem_acquire.lua")
);
const SEM_RELEASE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/sem_release.lua")
);

const LEASES: [i32; 3] = [100_000, 200_000, 300_000];
const MARK: i32 = 150_000;
const KEEP: i32 = 60_000;
/// The semaphore handle's number.
const PERMITS: u32 = 3;

const LOCK: &str = "{fam}:lock";
const COUNTER: &str = "{fam}:token";
const NUMBER: &str = "{fam}:permits";
const CHANNEL: &str = "{fam}:channel";

fn field_name(f: Field) -> String {
    match f {
        Field::Writer(o) => format!("c{o}:t1"),
        Field::Reader(o) => format!("c{o}:t1:r"),
        Field::Permit(p) => format!("c9:p{p}:r"),
    }
}

fn record(req: u32) -> String {
    format!("{{fam}}:rec:{req}")
}

#[derive(Clone, Copy, Debug)]
enum Step {
    RwAcquire {
        owner: u8,
        read: bool,
        which: Which,
        resent: bool,
        lease: usize,
        waits: bool,
    },
    RwRelease {
        owner: u8,
        read: bool,
        which: Which,
        resent: bool,
        /// Name the current write token (else an older one, or "").
        token: u8,
        /// Name the current read hold's take (else an older request, or "").
        take: u8,
        relet: bool,
    },
    RwLeave {
        owner: u8,
    },
    SemAcquire {
        permit: u8,
        take: u32,
        which: Which,
        waits: bool,
    },
    SemRelease {
        permit: u8,
    },
    Renew {
        field: u8,
        lease: usize,
    },
    HoldEnds(usize),
    MarkEnds(usize),
    RecordEnds(usize),
    Flush,
    EvictCounter,
    WriteForeign,
    SetNumber(u32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3u8, any::<bool>(), which(), prop::bool::weighted(0.2), 0..3usize, any::<bool>())
            .prop_map(|(owner, read, which, resent, lease, waits)| Step::RwAcquire { owner, read, which, resent, lease, waits }),
        4 => (0..3u8, any::<bool>(), which(), prop::bool::weighted(0.2), 0..4u8, 0..4u8, any::<bool>())
            .prop_map(|(owner, read, which, resent, token, take, relet)| Step::RwRelease { owner, read, which, resent, token, take, relet }),
        1 => (0..3u8).prop_map(|owner| Step::RwLeave { owner }),
        4 => (0..4u8, 1..3u32, which(), any::<bool>())
            .prop_map(|(permit, take, which, waits)| Step::SemAcquire { permit, take, which, waits }),
        2 => (0..4u8).prop_map(|permit| Step::SemRelease { permit }),
        2 => (0..10u8, 0..3usize).prop_map(|(field, lease)| Step::Renew { field, lease }),
        2 => (0..8usize).prop_map(Step::HoldEnds),
        1 => (0..4usize).prop_map(Step::MarkEnds),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => Just(Step::Flush),
        1 => Just(Step::EvictCounter),
        1 => Just(Step::WriteForeign),
        1 => (0..4u32).prop_map(Step::SetNumber),
    ]
}

struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    /// Requests so far, by field.
    reqs: Requests<Field>,
    /// Write tokens handed out (model values).
    tokens: Vec<u64>,
    /// What ties the real tokens to the model's.
    map: Tokens,
}

impl Run<'_> {
    fn real(&self, token: u64) -> Result<i128, TestCaseError> {
        self.map.real(token)
    }

    /// The server's clock in ms.
    fn now_ms(&mut self) -> i64 {
        let t = self.redis.cmd(&["TIME"]).strings();
        t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
    }

    fn check_acquire(&mut self, want: AcquireReply, got: &Reply) -> Result<(), TestCaseError> {
        let int = |r: &Reply| r.as_int().map(i128::from);
        match (want, got) {
            (AcquireReply::Granted { token, count }, Reply::Array(v)) if v.len() == 3 => {
                prop_assert_eq!(int(&v[0]), Some(1), "granted: {:?}", got);
                prop_assert_eq!(int(&v[1]), Some(self.real(token)?), "the token: {:?}", got);
                prop_assert_eq!(int(&v[2]), Some(i128::from(count)), "the count: {:?}", got);
            }
            (AcquireReply::Refused { hint }, Reply::Array(v)) if v.len() == 2 => {
                prop_assert_eq!(int(&v[0]), Some(0), "refused: {:?}", got);
                let real = v[1].as_int().unwrap_or(i64::MIN);
                let hint = i64::from(hint);
                prop_assert!(
                    real <= hint && real > hint - SLACK,
                    "the hint: the model {hint}, the server {real}"
                );
            }
            (AcquireReply::Deadlock, Reply::Err(e)) if e.starts_with("DEADLOCK") => {}
            (AcquireReply::WrongKind(Kind::Rw), Reply::Err(e)) if e.starts_with("WRONGKIND rw") => {}
            (AcquireReply::WrongKind(Kind::Semaphore), Reply::Err(e)) if e.starts_with("WRONGKIND semaphore") => {}
            (AcquireReply::WrongType, Reply::Err(e)) if e.starts_with("WRONGTYPE string 1") => {}
            (AcquireReply::ForeignHash, Reply::Err(e)) if e.starts_with("WRONGTYPE foreign-hash 1") => {}
            _ => prop_assert!(false, "acquire: the model answers {want:?}, the server {got:?}"),
        }
        Ok(())
    }

    fn check_release(want: ReleaseReply, got: &Reply) -> Result<(), TestCaseError> {
        let ok = match (want, got) {
            (ReleaseReply::Left(n), Reply::Int(m)) => i64::from(n) == *m,
            (ReleaseReply::NotHeld, Reply::Int(-1)) => true,
            (ReleaseReply::WrongType, Reply::Err(e)) => e.starts_with("WRONGTYPE string 1"),
            _ => false,
        };
        prop_assert!(ok, "release: the model answers {want:?}, the server {got:?}");
        Ok(())
    }

    fn apply(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::RwAcquire {
                owner,
                read,
                which,
                resent,
                lease,
                waits,
            } => {
                let field = if read {
                    Field::Reader(owner)
                } else {
                    Field::Writer(owner)
                };
                let (req, new) = self.reqs.request(which, "acquire", field);
                let first = new && !resent;
                let a = RwAcquire {
                    field,
                    req,
                    lease: LEASES[lease],
                    keep: KEEP,
                    first,
                    waits,
                    mark: MARK,
                };
                let want = self.model.rw_acquire(a, None);
                let got = self.redis.cmd(&[
                    "EVAL",
                    RW_ACQUIRE,
                    "3",
                    LOCK,
                    COUNTER,
                    &record(req),
                    &field_name(field),
                    &LEASES[lease].to_string(),
                    &KEEP.to_string(),
                    if first { "1" } else { "0" },
                    if waits { "1" } else { "0" },
                    if read { "read" } else { "write" },
                    &MARK.to_string(),
                    &format!("q{req}"),
                ]);
                self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
                if let AcquireReply::Granted { token, .. } = want {
                    if !read && !self.tokens.contains(&token) {
                        self.tokens.push(token);
                        self.map.handed_out(token);
                    }
                }
                self.check_acquire(want, &got)?;
            }
            Step::RwRelease {
                owner,
                read,
                which,
                resent,
                token,
                take,
                relet,
            } => {
                let field = if read {
                    Field::Reader(owner)
                } else {
                    Field::Writer(owner)
                };
                let takes = self.reqs.of("acquire", field);
                let held = match &self.model.name {
                    Name::Hash(h) => h.holds.iter().find(|x| x.field == field).and_then(|x| x.req),
                    _ => None,
                };
                let take = match take {
                    0 | 1 => held.or(takes.last().copied()),
                    2 => takes.first().copied(),
                    _ => None,
                };
                let (req, new) = self.reqs.request(which, "release", field);
                let first = new && !resent;
                let current = match &self.model.name {
                    Name::Hash(h) => h.token,
                    _ => None,
                };
                let token = match token {
                    0 | 1 => current.or(self.tokens.last().copied()),
                    2 if !self.tokens.is_empty() => Some(self.tokens[0]),
                    _ => None,
                };
                let relet = if relet { LEASES[2] } else { 0 };
                let r = RwRelease {
                    field,
                    req,
                    token,
                    take,
                    relet,
                    keep: KEEP,
                    first,
                };
                let want = self.model.rw_release(r, None);
                let token_arg = match token {
                    Some(t) => self.real(t)?.to_string(),
                    None => String::new(),
                };
                let got = self.redis.cmd(&[
                    "EVAL",
                    RW_RELEASE,
                    "3",
                    LOCK,
                    CHANNEL,
                    &record(req),
                    &field_name(field),
                    &relet.to_string(),
                    &KEEP.to_string(),
                    "0",
                    &token_arg,
                    "PUBLISH",
                    if first { "1" } else { "0" },
                    &take.map(|q| format!("q{q}")).unwrap_or_default(),
                ]);
                Self::check_release(want, &got)?;
            }
            Step::RwLeave { owner } => {
                let want = self.model.rw_leave(owner);
                let got = self.redis.cmd(&[
                    "EVAL",
                    RW_LEAVE,
                    "2",
                    LOCK,
                    CHANNEL,
                    &field_name(Field::Writer(owner)),
                    "PUBLISH",
                    "0",
                ]);
                let ok = match (want, &got) {
                    (Ok(true), Reply::Int(1)) | (Ok(false), Reply::Int(0)) => true,
                    (Err(ReleaseReply::WrongType), Reply::Err(e)) => e.starts_with("WRONGTYPE string 1"),
                    _ => false,
                };
                prop_assert!(ok, "leave: the model answers {want:?}, the server {got:?}");
            }
            Step::SemAcquire {
                permit,
                take,
                which,
                waits,
            } => {
                let field = Field::Permit(permit);
                let (req, _) = self.reqs.request(which, "attempt", field);
                let a = SemAcquire {
                    permit,
                    take,
                    total: PERMITS,
                    lease: LEASES[0],
                    waits,
                    req,
                };
                let want = self.model.sem_acquire(a, None);
                let got = self.redis.cmd(&[
                    "EVAL",
                    SEM_ACQUIRE,
                    "2",
                    LOCK,
                    NUMBER,
                    &field_name(field),
                    &take.to_string(),
                    &PERMITS.to_string(),
                    &LEASES[0].to_string(),
                    if waits { "1" } else { "0" },
                    &format!("q{req}"),
                ]);
                self.check_acquire(want, &got)?;
            }
            Step::SemRelease { permit } => {
                let want = self.model.sem_release(permit);
                let got = self.redis.cmd(&[
                    "EVAL",
                    SEM_RELEASE,
                    "2",
                    LOCK,
                    CHANNEL,
                    &field_name(Field::Permit(permit)),
                    "PUBLISH",
                    "0",
                ]);
                Self::check_release(want, &got)?;
            }
            Step::Renew { field, lease } => {
                let f = match field {
                    0..=2 => Field::Writer(field),
                    3..=5 => Field::Reader(field - 3),
                    _ => Field::Permit(field - 6),
                };
                let lease = LEASES[lease];
                let want = self.model.renew(f, lease);
                let got = self
                    .redis
                    .cmd(&["EVAL", RENEW, "1", LOCK, &lease.to_string(), &field_name(f)]);
                prop_assert_eq!(got, Reply::Array(vec![Reply::Int(i64::from(want))]), "renew");
            }
            Step::HoldEnds(i) => {
                let now = self.model.now;
                if let Name::Hash(h) = &mut self.model.name {
                    if !h.holds.is_empty() {
                        let n = h.holds.len();
                        let x = &mut h.holds[i % n];
                        x.deadline = now;
                        let name = format!(":{}", field_name(x.field));
                        self.redis.cmd(&["HSET", LOCK, &name, "1"]);
                    }
                }
            }
            Step::MarkEnds(i) => {
                let now = self.model.now;
                if let Name::Hash(h) = &mut self.model.name {
                    if !h.marks.is_empty() {
                        let n = h.marks.len();
                        let m = &mut h.marks[i % n];
                        m.1 = now;
                        let name = format!(":ww:{}", field_name(Field::Writer(m.0)));
                        self.redis.cmd(&["HSET", LOCK, &name, "1"]);
                    }
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
                if self.model.name == Name::Absent {
                    self.model.name = Name::Foreign;
                    self.redis.cmd(&["SET", LOCK, "another program's"]);
                }
            }
            Step::SetNumber(n) => {
                self.model.set_number(n);
                self.redis.cmd(&["SET", NUMBER, &n.to_string()]);
            }
        }
        self.check_keys()
    }

    /// A time field: the real deadline (server ms) against the model's
    /// (ticks from now, 0 or less: passed).
    fn check_time(&self, what: &str, real: &str, model: i32, now_ms: i64) -> Result<(), TestCaseError> {
        let real: i64 = real
            .parse()
            .map_err(|_| TestCaseError::fail(format!("{what}: {real:?}")))?;
        let left = real - now_ms;
        let model = i64::from(model - self.model.now);
        if model <= 0 {
            prop_assert!(
                left <= 0,
                "{}: passed in the model, {} ms left on the server",
                what,
                left
            );
        } else {
            prop_assert!(
                left <= model && left > model - SLACK,
                "{}: the model {} ms, the server {}",
                what,
                model,
                left
            );
        }
        Ok(())
    }

    fn check_keys(&mut self) -> Result<(), TestCaseError> {
        let mut want_keys = Vec::new();
        let now_ms = self.now_ms();
        match self.model.name.clone() {
            Name::Absent => {}
            Name::Foreign => {
                want_keys.push(LOCK.to_string());
                prop_assert_eq!(self.redis.cmd(&["TYPE", LOCK]), Reply::Str("string".into()));
            }
            Name::Stray => {
                want_keys.push(LOCK.to_string());
                let all = self.redis.cmd(&["HGETALL", LOCK]).strings();
                prop_assert_eq!(all, vec![":wait".to_string(), "1".to_string()]);
            }
            Name::Hash(h) => {
                want_keys.push(LOCK.to_string());
                let all = self.redis.cmd(&["HGETALL", LOCK]).strings();
                let mut real: BTreeMap<String, String> = all.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
                let mut want: BTreeMap<String, String> = BTreeMap::new();
                want.insert(
                    ":kind".into(),
                    match h.kind {
                        Kind::Rw => "rw".into(),
                        Kind::Semaphore => "semaphore".into(),
                    },
                );
                if h.kind == Kind::Rw {
                    want.insert("mode".into(), "lockwarden".into());
                }
                if let Some(t) = h.token {
                    want.insert(":token".into(), self.real(t)?.to_string());
                }
                if h.wait {
                    want.insert(":wait".into(), "1".into());
                }
                for x in &h.holds {
                    let name = field_name(x.field);
                    want.insert(name.clone(), x.count.to_string());
                    if let Some(q) = x.req {
                        want.insert(format!(":q:{name}"), format!("q{q}"));
                    }
                    let d = real.remove(&format!(":{name}")).unwrap_or_default();
                    self.check_time(&format!("the deadline of {name}"), &d, x.deadline, now_ms)?;
                }
                for &(o, d) in &h.marks {
                    let key = format!(":ww:{}", field_name(Field::Writer(o)));
                    let r = real.remove(&key).unwrap_or_default();
                    self.check_time(&format!("the mark {key}"), &r, d, now_ms)?;
                }
                prop_assert_eq!(real, want, "the hash's other fields");
                check_ttl(self.redis, LOCK, h.expires - self.model.now)?;
            }
        }
        if let Some(n) = self.model.number {
            want_keys.push(NUMBER.to_string());
            prop_assert_eq!(self.redis.cmd(&["GET", NUMBER]), Reply::Str(n.to_string()));
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
    diff::assert_the_librarys_scripts(&[RW_ACQUIRE, RW_RELEASE, RW_LEAVE, SEM_ACQUIRE, SEM_RELEASE, RENEW]).await;
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
