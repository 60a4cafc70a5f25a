//! The read-write lock's and the semaphore's model (`tests/model/shared_hash.rs`)
//! held to their real scripts, as `tests/differential.rs` does for the
//! reentrant lock: random sequences of both kinds' calls on one name, with
//! holds' and marks' leases ending, records ending, FLUSHALL, a lost
//! counter, a foreign key and the semaphore's number changing, applied to
//! the model and to a real `redis-server`; after each step every reply and
//! every key (fields, deadlines, token, counter, records, the semaphore's
//! waiters list and asks, TTLs) must agree, and so must the messages each
//! semaphore client got on its wake channel (one real subscriber
//! connection per client, subscribing and unsubscribing as steps, so that
//! PUBLISH counts as in the library).
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
use model::shared_hash::{
    AcquireReply, Field, Kind, Mode, Name, ReleaseReply, RwAcquire, RwRelease, SemAcquire, Server, Sides, Told,
};
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
    include_str!("../lua/shared_claim.lua"),
    include_str!("../lua/shared_listen.lua"),
    include_str!("../lua/sem_acquire.lua")
);
const SEM_RELEASE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/shared_claim.lua"),
    include_str!("../lua/shared_wake.lua"),
    include_str!("../lua/shared_permits.lua"),
    include_str!("../lua/sem_release.lua")
);
/// force_unlock.lua, as `src/protocol/mod.rs` puts it together.
const FORCE_UNLOCK: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_wake.lua"),
    include_str!("../lua/force_unlock.lua")
);
const SEM_LEAVE: &str = concat!(
    include_str!("../lua/shared.lua"),
    include_str!("../lua/shared_rw.lua"),
    include_str!("../lua/shared_claim.lua"),
    include_str!("../lua/shared_wake.lua"),
    include_str!("../lua/shared_permits.lua"),
    include_str!("../lua/sem_leave.lua")
);

const LEASES: [i32; 3] = [100_000, 200_000, 300_000];
/// A waiting writer's asked first lease: shorter than its mark, or longer
/// (the grant's is then cut to the mark's end).
const WRITER_GRANTS: [i32; 2] = [20_000, 400_000];
const MARK: i32 = 150_000;
const KEEP: i32 = 60_000;
/// The semaphore handle's number.
const PERMITS: u32 = 3;

const LOCK: &str = "{fam}:lock";
const COUNTER: &str = "{fam}:token";
const NUMBER: &str = "{fam}:permits";
const CHANNEL: &str = "{fam}:channel";
const WRITERS: &str = "{fam}:writers";
const WAITERS: &str = "{fam}:waiters";
const ASKS: &str = "{fam}:asks";
const WAKE_PREFIX: &str = "{fam}:wake:";
const REC_PREFIX: &str = "{fam}:rec:";
/// The semaphore's clients (each with its own wake channel), and the
/// permit ids each uses.
const CLIENTS: u8 = 3;
const PERMIT_IDS: u8 = 3;
/// A direct grant's first lease.
const GRANT: i32 = 20_000;
/// A semaphore claim's length (a waiter timeout).
const CLAIM: i32 = 30_000;
/// How long past the time a refusal gives the list and the asks live.
const PAST_MS: i32 = 1000;

fn field_name(f: Field) -> String {
    match f {
        Field::Writer(o) => format!("c{o}:t1"),
        Field::Reader(o) => format!("c{o}:t1:r"),
        Field::Permit(p) => format!("{}:p{}:r", client(p / 16), p % 16),
    }
}

/// A semaphore client's id (the end of its wake channel's name).
fn client(c: u8) -> String {
    format!("s{c}")
}

/// The permit id `n` of semaphore client `c`.
fn permit(c: u8, n: u8) -> u8 {
    c * 16 + n
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
        /// A waiting writer's ask for a direct grant: its first lease
        /// (`WRITER_GRANTS`), and the attempt's number.
        ask: Option<usize>,
        attempt: u32,
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
        /// The counter's key given: the release may hand the lock to a
        /// waiting writer.
        grants: bool,
    },
    /// A waiting writer's leave, naming (bit 0) its latest acquire
    /// request and (bit 1) its first one; none: the old rule, without the
    /// counter's key.
    RwLeave {
        owner: u8,
        named: u8,
    },
    /// A waiting reader's leave; with `grants` the counter's key is given.
    RwLeaveRead {
        owner: u8,
        grants: bool,
    },
    SemAcquire {
        client: u8,
        n: u8,
        take: u32,
        which: Which,
        mode: u8,
        ask: bool,
        attempt: u32,
        claim: bool,
    },
    /// A release of permit id `n` of `client`, or (`held`) of the
    /// `client * 3 + n`-th permit id the model has holding, when any;
    /// naming (`named`) one of the requests of that permit id's attempts,
    /// as a holder's release or a give-back does, or none.
    SemRelease {
        client: u8,
        n: u8,
        held: bool,
        named: Option<u8>,
    },
    /// A client passes a wake-up on; with `stopped`, its wait of that
    /// permit id (the latest attempt's request) stops.
    SemLeave {
        client: u8,
        stopped: Option<u8>,
    },
    Subscribe {
        client: u8,
        on: bool,
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
    /// force_unlock.lua through a plain handle (`None`) or a read-write
    /// side's (`Some(read)`).
    Force(Option<bool>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => rw_acquire(0.2, 0.5),
        4 => (0..3u8, any::<bool>(), which(), prop::bool::weighted(0.2), 0..4u8, 0..4u8, any::<bool>(), any::<bool>())
            .prop_map(|(owner, read, which, resent, token, take, relet, grants)| Step::RwRelease { owner, read, which, resent, token, take, relet, grants }),
        1 => (0..3u8, 0..4u8).prop_map(|(owner, named)| Step::RwLeave { owner, named }),
        1 => (0..3u8, any::<bool>()).prop_map(|(owner, grants)| Step::RwLeaveRead { owner, grants }),
        6 => sem_acquire(),
        3 => sem_release(0.8),
        1 => sem_leave(),
        1 => subscribe(),
        2 => (0..10u8, 0..3usize).prop_map(|(field, lease)| Step::Renew { field, lease }),
        2 => (0..8usize).prop_map(Step::HoldEnds),
        1 => (0..4usize).prop_map(Step::MarkEnds),
        1 => (0..8usize).prop_map(Step::RecordEnds),
        1 => Just(Step::Flush),
        1 => Just(Step::EvictCounter),
        1 => Just(Step::WriteForeign),
        1 => (0..4u32).prop_map(Step::SetNumber),
        1 => prop::option::of(any::<bool>()).prop_map(Step::Force),
    ]
}

/// The read-write lock's steps alone (and the faults that meet them): its
/// wake-ups (which side's channel a release or a leave tells) come up far
/// more often than among the semaphore's steps.
fn rw_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => rw_acquire(0.1, 0.8),
        5 => (0..3u8, any::<bool>(), which(), prop::bool::weighted(0.1), 0..2u8, 0..2u8, any::<bool>(), prop::bool::weighted(0.7))
            .prop_map(|(owner, read, which, resent, token, take, relet, grants)| Step::RwRelease { owner, read, which, resent, token, take, relet, grants }),
        2 => (0..3u8, 0..4u8).prop_map(|(owner, named)| Step::RwLeave { owner, named }),
        2 => (0..3u8, any::<bool>()).prop_map(|(owner, grants)| Step::RwLeaveRead { owner, grants }),
        1 => (0..6u8, 0..3usize).prop_map(|(field, lease)| Step::Renew { field, lease }),
        1 => (0..8usize).prop_map(Step::HoldEnds),
        1 => (0..4usize).prop_map(Step::MarkEnds),
        1 => Just(Step::Flush),
        1 => prop::option::of(any::<bool>()).prop_map(Step::Force),
    ]
}

/// The semaphore's steps alone (and the faults that meet them): its waits,
/// direct grants and wake-ups come up far more often than among the read-write
/// lock's steps.
fn sem_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => sem_acquire(),
        4 => sem_release(0.9),
        1 => sem_leave(),
        1 => subscribe(),
        1 => (6..10u8, 0..3usize).prop_map(|(field, lease)| Step::Renew { field, lease }),
        1 => (0..8usize).prop_map(Step::HoldEnds),
        1 => Just(Step::Flush),
        1 => (1..4u32).prop_map(Step::SetNumber),
    ]
}

/// A read-write acquire, re-sent with probability `resent`, waiting with
/// probability `waits`; a waiting writer asks for a direct grant three
/// times in five.
fn rw_acquire(resent: f64, waits: f64) -> impl Strategy<Value = Step> {
    (
        (0..3u8, any::<bool>(), which(), prop::bool::weighted(resent), 0..3usize),
        prop::bool::weighted(waits),
        prop::option::weighted(0.6, 0..2usize),
        1..4u32,
    )
        .prop_map(
            |((owner, read, which, resent, lease), waits, ask, attempt)| Step::RwAcquire {
                owner,
                read,
                which,
                resent,
                lease,
                waits,
                ask,
                attempt,
            },
        )
}

fn sem_acquire() -> impl Strategy<Value = Step> {
    (
        0..CLIENTS,
        0..PERMIT_IDS,
        1..3u32,
        which(),
        sem_mode(),
        prop::bool::weighted(0.8),
        0..3u32,
        prop::bool::weighted(0.8),
    )
        .prop_map(|(client, n, take, which, mode, ask, attempt, claim)| Step::SemAcquire {
            client,
            n,
            take,
            which,
            mode,
            ask,
            attempt,
            claim,
        })
}

/// A release, of a permit id the model has holding with probability `held`.
fn sem_release(held: f64) -> impl Strategy<Value = Step> {
    let named = prop::option::of(0..4u8);
    (0..CLIENTS, 0..PERMIT_IDS, prop::bool::weighted(held), named)
        .prop_map(|(client, n, held, named)| Step::SemRelease { client, n, held, named })
}

fn sem_leave() -> impl Strategy<Value = Step> {
    (0..CLIENTS, prop::option::of(0..PERMIT_IDS)).prop_map(|(client, stopped)| Step::SemLeave { client, stopped })
}

fn subscribe() -> impl Strategy<Value = Step> {
    (0..CLIENTS, any::<bool>()).prop_map(|(client, on)| Step::Subscribe { client, on })
}

/// A semaphore attempt's mode (see `Mode`), the modes of a client's only
/// wait (which may ask for direct grants) the most often.
fn sem_mode() -> impl Strategy<Value = u8> {
    prop_oneof![1 => Just(0u8), 3 => Just(1u8), 1 => Just(2u8), 2 => Just(3u8), 1 => Just(4u8)]
}

struct Run<'a> {
    model: Server,
    redis: &'a mut Resp,
    /// One subscriber connection per semaphore client.
    subs: &'a mut [Resp],
    /// Subscribed to the read-write lock's two channels.
    sides: &'a mut Resp,
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
            (AcquireReply::Refused { hint, place }, Reply::Array(v)) if v.len() == 2 + usize::from(place.is_some()) => {
                if let Some(place) = place {
                    prop_assert_eq!(int(&v[2]), Some(i128::from(place)), "the place: {:?}", got);
                }
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

    /// An rw_leave.lua call: its reply, and what it published.
    fn check_leave(
        &mut self,
        what: &str,
        want: Result<(bool, Sides), ReleaseReply>,
        got: &Reply,
    ) -> Result<(), TestCaseError> {
        if let Ok((_, told)) = &want {
            self.learn_handed(told)?;
        }
        let ok = match (want, got) {
            (Ok((true, _)), Reply::Int(1)) | (Ok((false, _)), Reply::Int(0)) => true,
            (Err(ReleaseReply::WrongType), Reply::Err(e)) => e.starts_with("WRONGTYPE string 1"),
            _ => false,
        };
        prop_assert!(ok, "{what}: the model answers {want:?}, the server {got:?}");
        self.check_sides(want.map_or(Sides::default(), |(_, told)| told))
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
                ask,
                attempt,
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
                    ask: ask.filter(|_| !read && waits).map(|i| (WRITER_GRANTS[i], attempt)),
                };
                let want = self.model.rw_acquire(a, None);
                let (rec, lease_ms, keep) = (record(req), LEASES[lease].to_string(), KEEP.to_string());
                let (mark, q, name) = (MARK.to_string(), format!("q{req}"), field_name(field));
                let mut args = vec![
                    "EVAL",
                    RW_ACQUIRE,
                    "3",
                    LOCK,
                    COUNTER,
                    &rec,
                    &name,
                    &lease_ms,
                    &keep,
                    if first { "1" } else { "0" },
                    if waits { "1" } else { "0" },
                    if read { "read" } else { "write" },
                    &mark,
                    &q,
                ];
                let asked = a.ask.map(|(ms, n)| (ms.to_string(), n.to_string()));
                if let Some((ms, n)) = &asked {
                    args.push(ms);
                    args.push(n);
                }
                let got = self.redis.cmd(&args);
                if !read && waits {
                    // A mark set by a later step has a later deadline on
                    // the server (in ms) too, as the model orders the marks
                    // of one tick: the release hands the lock to the one
                    // set longest ago.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
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
                grants,
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
                    grants,
                };
                diff::messages(self.sides);
                let (want, told) = self.model.rw_release_telling(r, None);
                let token_arg = match token {
                    Some(t) => self.real(t)?.to_string(),
                    None => String::new(),
                };
                let (rec, relet, keep) = (record(req), relet.to_string(), KEEP.to_string());
                let (name, take) = (field_name(field), take.map(|q| format!("q{q}")).unwrap_or_default());
                let mut args = vec!["EVAL", RW_RELEASE, "4", LOCK, CHANNEL, &rec, WRITERS];
                if grants {
                    args[2] = "5";
                    args.push(COUNTER);
                }
                args.extend([
                    name.as_str(),
                    &relet,
                    &keep,
                    "0",
                    &token_arg,
                    "PUBLISH",
                    if first { "1" } else { "0" },
                    &take,
                ]);
                let got = self.redis.cmd(&args);
                self.learn_handed(&told)?;
                Self::check_release(want, &got)?;
                self.check_sides(told)?;
            }
            Step::RwLeave { owner, named } => {
                diff::messages(self.sides);
                let reqs = self.reqs.of("acquire", Field::Writer(owner));
                let mut asked = Vec::new();
                if named & 1 != 0 {
                    asked.extend(reqs.last().copied());
                }
                if named & 2 != 0 && reqs.len() > 1 {
                    asked.extend(reqs.first().copied());
                }
                let want = self.model.rw_leave_telling(owner, &asked, named != 0, None);
                let field = field_name(Field::Writer(owner));
                let mut args = vec!["EVAL", RW_LEAVE];
                let recs: Vec<String> = asked.iter().map(|&q| record(q)).collect();
                if named == 0 {
                    args.extend(["3", LOCK, CHANNEL, WRITERS, &field, "PUBLISH", "0"]);
                } else {
                    args.extend(["4", LOCK, CHANNEL, WRITERS, COUNTER, &field, "PUBLISH", "0"]);
                    args.extend(recs.iter().map(String::as_str));
                }
                let got = self.redis.cmd(&args);
                self.check_leave("leave", want, &got)?;
            }
            Step::RwLeaveRead { owner, grants } => {
                diff::messages(self.sides);
                let want = self.model.rw_leave_reader(owner, grants, None);
                let field = field_name(Field::Reader(owner));
                let mut args = vec!["EVAL", RW_LEAVE];
                if grants {
                    args.extend(["4", LOCK, CHANNEL, WRITERS, COUNTER, &field, "PUBLISH", "0"]);
                } else {
                    args.extend(["3", LOCK, CHANNEL, WRITERS, &field, "PUBLISH", "0"]);
                }
                let got = self.redis.cmd(&args);
                self.check_leave("reader's leave", want, &got)?;
            }
            Step::SemAcquire {
                client: c,
                n,
                take,
                which,
                mode,
                ask,
                attempt,
                claim,
            } => {
                let p = permit(c, n);
                let field = Field::Permit(p);
                let (req, _) = self.reqs.request(which, "attempt", field);
                let mode = [
                    Mode::Try,
                    Mode::Listening,
                    Mode::WithOthers,
                    Mode::Woken,
                    Mode::WokenWithOthers,
                ][usize::from(mode)];
                let ask = (ask && mode != Mode::Try).then_some((GRANT, attempt));
                let a = SemAcquire {
                    permit: p,
                    take,
                    total: PERMITS,
                    lease: LEASES[0],
                    mode,
                    req,
                    ask,
                    claim: (claim && mode != Mode::Try).then_some(CLAIM),
                };
                let want = self.model.sem_acquire(a, None);
                let name = field_name(field);
                let (take, total, lease, q, id) = (
                    take.to_string(),
                    PERMITS.to_string(),
                    LEASES[0].to_string(),
                    format!("q{req}"),
                    client(c),
                );
                let mut args = vec!["EVAL", SEM_ACQUIRE, "2", LOCK, NUMBER];
                let (grant, n, claim_ms) = (GRANT.to_string(), attempt.to_string(), CLAIM.to_string());
                if mode != Mode::Try {
                    args.push(WAITERS);
                    if ask.is_some() {
                        args.push(ASKS);
                    }
                }
                args[2] = ["2", "3", "4"][args.len() - 5];
                args.extend([&*name, &take, &total, &lease, mode.arg(), &q]);
                if mode != Mode::Try {
                    args.push(&id);
                    if ask.is_some() {
                        args.extend([&*grant, &n]);
                    } else if claim {
                        args.extend(["", ""]);
                    }
                    if claim {
                        args.push(&claim_ms);
                    }
                }
                let got = self.redis.cmd(&args);
                self.check_acquire(want, &got)?;
            }
            Step::SemRelease {
                client: c,
                n,
                held,
                named,
            } => {
                let holding: Vec<u8> = match &self.model.name {
                    Name::Hash(h) => h
                        .holds
                        .iter()
                        .filter_map(|x| match x.field {
                            Field::Permit(p) => Some(p),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let p = match holding.len() {
                    0 => permit(c, n),
                    k if held => holding[usize::from(c * PERMIT_IDS + n) % k],
                    _ => permit(c, n),
                };
                let mine = self.reqs.of("attempt", Field::Permit(p));
                let req = named
                    .filter(|_| !mine.is_empty())
                    .map(|i| mine[usize::from(i) % mine.len()]);
                let want = self.model.sem_release(p, req, PERMITS, None);
                // The requests go as the acquires send them: "q<id>".
                let req = req.map_or(String::new(), |r| format!("q{r}"));
                let got = self.redis.cmd(&[
                    "EVAL",
                    SEM_RELEASE,
                    "5",
                    LOCK,
                    CHANNEL,
                    WAITERS,
                    ASKS,
                    NUMBER,
                    &field_name(Field::Permit(p)),
                    "PUBLISH",
                    "0",
                    &PERMITS.to_string(),
                    WAKE_PREFIX,
                    REC_PREFIX,
                    &req,
                ]);
                Self::check_release(want, &got)?;
            }
            Step::SemLeave { client: c, stopped } => {
                let stopped = stopped.and_then(|n| {
                    let p = permit(c, n);
                    let req = *self.reqs.of("attempt", Field::Permit(p)).last()?;
                    Some((req, p))
                });
                self.model.sem_leave(c, stopped, PERMITS);
                let total = PERMITS.to_string();
                let mut args = vec![
                    "EVAL".to_string(),
                    SEM_LEAVE.to_string(),
                    "5".to_string(),
                    LOCK.to_string(),
                    CHANNEL.to_string(),
                    WAITERS.to_string(),
                    ASKS.to_string(),
                    NUMBER.to_string(),
                    String::new(),
                    "PUBLISH".to_string(),
                    "0".to_string(),
                    total,
                    WAKE_PREFIX.to_string(),
                    REC_PREFIX.to_string(),
                ];
                if let Some((req, p)) = stopped {
                    args.extend([format!("q{req}"), field_name(Field::Permit(p)), client(c)]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let got = self.redis.cmd(&args);
                prop_assert_eq!(got, Reply::Int(0), "leave");
            }
            Step::Subscribe { client: c, on } => {
                let subscribed = self.model.waiting.subscribed.contains(&c);
                if subscribed != on {
                    if on {
                        self.model.waiting.subscribed.push(c);
                        self.model.waiting.subscribed.sort();
                    } else {
                        self.model.waiting.subscribed.retain(|&x| x != c);
                    }
                    let channel = format!("{WAKE_PREFIX}{}", client(c));
                    self.subs[usize::from(c)].cmd(&[if on { "SUBSCRIBE" } else { "UNSUBSCRIBE" }, &channel]);
                }
                self.model.waiting.told.clear();
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
                    let (n, r) = (h.marks.len(), h.readers_waiting.len());
                    if n + r > 0 {
                        let i = i % (n + r);
                        let name = if i < n {
                            let m = &mut h.marks[i];
                            m.1 = now;
                            format!(":ww:{}", field_name(Field::Writer(m.0)))
                        } else {
                            let m = &mut h.readers_waiting[i - n];
                            m.deadline = now;
                            let head = if m.pass { ":rp:" } else { ":wr:" };
                            format!("{head}{}", field_name(Field::Reader(m.owner)))
                        };
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
            Step::Force(side) => {
                diff::messages(self.sides);
                let want = match (side, &self.model.name) {
                    (None, Name::Foreign | Name::Stray) => Err(ReleaseReply::WrongType),
                    (None, _) => Ok(self.model.force_unlock(None)),
                    (Some(read), _) => self.model.force_unlock_side(read, None),
                };
                let side_arg = match side {
                    None => "",
                    Some(true) => "read",
                    Some(false) => "write",
                };
                let got = self.redis.cmd(&[
                    "EVAL",
                    FORCE_UNLOCK,
                    "6",
                    LOCK,
                    CHANNEL,
                    "{fam}:queue",
                    ASKS,
                    WAITERS,
                    WRITERS,
                    "0",
                    WAKE_PREFIX,
                    "PUBLISH",
                    side_arg,
                ]);
                let ok = match (want, &got) {
                    (Ok((true, _)), Reply::Int(1)) | (Ok((false, _)), Reply::Int(0)) => true,
                    (Err(ReleaseReply::WrongType), Reply::Err(e)) => e.starts_with("WRONGTYPE"),
                    (Err(ReleaseReply::WrongKind), Reply::Err(e)) => e.starts_with("WRONGKIND"),
                    _ => false,
                };
                prop_assert!(
                    ok,
                    "force-unlock {side:?}: the model answers {want:?}, the server {got:?}"
                );
                self.check_sides(want.map_or(Sides::default(), |(_, told)| told))?;
                self.check_messages()?;
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

    /// The read-write lock's channels the step published on, against the
    /// model's: a writer told only when it can take the lock, readers only
    /// when no writer's mark holds them back.
    /// A direct grant's token (the model's) tied to the real counter's.
    fn learn_handed(&mut self, told: &Sides) -> Result<(), TestCaseError> {
        if let Some(h) = told.handed {
            self.map.learn(self.model.counter.value, self.redis, COUNTER)?;
            if !self.tokens.contains(&h.token) {
                self.tokens.push(h.token);
                self.map.handed_out(h.token);
            }
        }
        Ok(())
    }

    fn check_sides(&mut self, want: Sides) -> Result<(), TestCaseError> {
        let mut got: Vec<String> = diff::messages(self.sides)
            .into_iter()
            .map(|(channel, message)| format!("{channel} {message}"))
            .collect();
        got.sort();
        let mut expected = Vec::new();
        if want.readers {
            expected.push(format!("{CHANNEL} 0"));
        }
        if want.writers {
            expected.push(format!("{WRITERS} 0"));
        }
        if let Some(h) = want.handed {
            // The grant's lease is cut to the writer's mark's end: as
            // counted from the real script's clock, up to SLACK less.
            let (token, rec) = (self.real(h.token)?, record(h.req));
            let prefix = format!("{WRITERS} g {token} ");
            let at = got.iter().position(|m| m.starts_with(&prefix));
            let m = at.map(|i| got.remove(i)).unwrap_or_default();
            let parts: Vec<&str> = m.split(' ').collect();
            let ms: i32 = parts.get(3).and_then(|p| p.parse().ok()).unwrap_or(-1);
            prop_assert!(
                parts.len() == 6 && parts[4] == rec && parts[5] == h.attempt.to_string(),
                "the grant's message {m:?}, the model's {h:?}"
            );
            prop_assert!(
                ms <= h.ms && ms >= h.ms - SLACK as i32,
                "the grant's lease {ms}, the model's {}",
                h.ms
            );
        }
        expected.sort();
        prop_assert_eq!(got, expected, "the read-write lock's wake-ups");
        Ok(())
    }

    /// The messages each subscribed semaphore client got in the step,
    /// against the model's (a message to a client not subscribed reaches
    /// nobody, and the model tells none).
    fn check_messages(&mut self) -> Result<(), TestCaseError> {
        let told = std::mem::take(&mut self.model.waiting.told);
        for c in 0..CLIENTS {
            let want: Vec<String> = told
                .iter()
                .filter(|(to, _)| *to == c)
                .map(|(_, t)| match *t {
                    Told::Wake => "0".to_string(),
                    Told::Grant { ms, req, attempt } => format!("g 0 {ms} {REC_PREFIX}q{req} {attempt}"),
                    // On the writers' channel (`check_sides`), never a client's.
                    Told::Handed(h) => format!("handed {h:?}"),
                })
                .collect();
            let got = if self.model.waiting.subscribed.contains(&c) {
                diff::published(&mut self.subs[usize::from(c)])
            } else {
                Vec::new()
            };
            prop_assert_eq!(got, want, "messages to client {}", c);
        }
        Ok(())
    }

    /// The semaphore's waiters list and asks, with their TTLs.
    fn check_waiting(&mut self, want_keys: &mut Vec<String>) -> Result<(), TestCaseError> {
        let w = self.model.waiting.clone();
        let now = self.model.now;
        if !w.list.is_empty() {
            want_keys.push(WAITERS.to_string());
            let order: Vec<String> = w.list.iter().map(|&c| client(c)).collect();
            prop_assert_eq!(
                self.redis.cmd(&["LRANGE", WAITERS, "0", "-1"]).strings(),
                order,
                "the waiters list"
            );
            check_ttl(self.redis, WAITERS, w.list_expires - now)?;
        }
        if !w.asks.is_empty() {
            want_keys.push(ASKS.to_string());
            let mut want: Vec<(String, String)> = w
                .asks
                .iter()
                .map(|k| {
                    let text = format!(
                        "{} q{} {} {} {}",
                        k.ms,
                        k.req,
                        k.attempt,
                        k.take,
                        field_name(Field::Permit(k.permit))
                    );
                    (client(k.client), text)
                })
                .collect();
            want.sort();
            prop_assert_eq!(diff::hash_fields(self.redis, ASKS), want, "the asks");
            check_ttl(self.redis, ASKS, w.asks_expires - now)?;
        }
        Ok(())
    }

    fn check_keys(&mut self) -> Result<(), TestCaseError> {
        self.check_messages()?;
        let mut want_keys = Vec::new();
        self.check_waiting(&mut want_keys)?;
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
                for m in &h.readers_waiting {
                    let head = if m.pass { ":rp:" } else { ":wr:" };
                    let key = format!("{head}{}", field_name(Field::Reader(m.owner)));
                    let r = real.remove(&key).unwrap_or_default();
                    self.check_time(&format!("the reader's mark {key}"), &r, m.deadline, now_ms)?;
                }
                for &(o, k) in &h.asks {
                    let key = format!(":wa:{}", field_name(Field::Writer(o)));
                    want.insert(key, format!("{} {} {}", k.ms, k.attempt, record(k.req)));
                }
                if let Some(q) = h.take {
                    want.insert(":take".into(), record(q));
                }
                if let Some(c) = h.claim {
                    let r = real.remove(":claim").unwrap_or_default();
                    let (head, till) = r.rsplit_once(' ').unwrap_or_default();
                    prop_assert_eq!(head, format!("{} {}", client(c.client), c.need), "the claim");
                    self.check_time("the claim's deadline", till, c.till, now_ms)?;
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
    diff::assert_the_librarys_scripts(&[
        RW_ACQUIRE,
        RW_RELEASE,
        RW_LEAVE,
        SEM_ACQUIRE,
        SEM_RELEASE,
        SEM_LEAVE,
        RENEW,
        FORCE_UNLOCK,
    ])
    .await;
}

#[test]
fn the_real_scripts_answer_and_write_as_the_model() {
    sequences(step());
}

/// As above, the read-write lock's steps alone: which of its channels each
/// release and leave tells.
#[test]
fn the_real_read_write_scripts_answer_publish_and_write_as_the_model() {
    sequences(rw_step());
}

/// As above, the semaphore's steps alone: its waiters list, asks, direct
/// grants and wake-ups.
#[test]
fn the_real_semaphore_scripts_answer_publish_and_write_as_the_model() {
    sequences(sem_step());
}

/// Runs sequences of `steps` on one server, with a subscriber connection
/// per semaphore client.
fn sequences(steps: impl Strategy<Value = Step>) {
    let server = common::RedisServer::start();
    let subs = std::cell::RefCell::new((0..CLIENTS).map(|_| server.resp()).collect::<Vec<_>>());
    let mut sides = server.resp();
    sides.cmd(&["SUBSCRIBE", CHANNEL]);
    sides.cmd(&["SUBSCRIBE", WRITERS]);
    let sides = std::cell::RefCell::new(sides);
    diff::run_sequences_on(&server, steps, |redis, steps| {
        let mut subs = subs.borrow_mut();
        let mut sides = sides.borrow_mut();
        // Every client starts subscribed (as a listening client of the
        // library is), with nothing left to read.
        for (c, sub) in subs.iter_mut().enumerate() {
            let channel = format!("{WAKE_PREFIX}{}", client(c as u8));
            sub.cmd(&["UNSUBSCRIBE", &channel]);
            while sub.next(std::time::Duration::from_millis(1)).is_some() {}
            sub.cmd(&["SUBSCRIBE", &channel]);
        }
        let mut model = Server::new();
        model.slack = PAST_MS;
        model.waiting.subscribed = (0..CLIENTS).collect();
        let mut run = Run {
            model,
            redis,
            subs: &mut subs,
            sides: &mut sides,
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
