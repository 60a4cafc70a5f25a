//! The raw protocol of each lock kind: its Lua scripts, the KEYS and ARGV
//! of each call, and what the replies mean. Nothing here talks to a
//! server: `node.rs` runs the calls (EVALSHA, replays, confirmations).
//!
//! A kind implements [`Protocol`] (`reentrant.rs`, `fair.rs`, `rw.rs`,
//! `semaphore.rs`): its calls and everything else in which kinds differ
//! below the handles (its label, the field an owner writes, what makes it
//! locked, how it is forced free). A handle picks its kind (a [`Kind`])
//! and the lock's [`LockKeys`] carry it; nothing below the handles asks
//! which kind it is. The scripts every kind shares (renew, status,
//! force-unlock, raising the token) are here. Each script's header in
//! `lua/` is its contract.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use fred::types::Value;

use crate::error::{Error, Result};
use crate::keys::{Names, Str};

/// A Lua script from `lua/` with its SHA1.
pub(crate) struct Script {
    pub(crate) op: &'static str,
    pub(crate) src: &'static str,
    /// The SHA1, made once per process (scripts live as long as the
    /// program): an argument that is sent without a copy.
    pub(crate) sha: &'static str,
}

impl Script {
    fn new(op: &'static str, src: &'static str) -> Script {
        Script {
            op,
            src,
            sha: Box::leak(fred::util::sha1_hash(src).into_boxed_str()),
        }
    }
}

/// A lock kind as the floors below the handles see it: the protocol of its
/// calls. Chosen by the handle that makes the lock (`lock.rs`), then only
/// passed on: every way in which kinds differ there is a method of
/// [`Protocol`].
pub(crate) type Kind = Arc<dyn Protocol>;

/// Every key and channel of one lock (its [`Names`], which it derefs to)
/// and its kind.
#[derive(Clone)]
pub(crate) struct LockKeys {
    names: Names,
    pub(crate) kind: Kind,
}

impl LockKeys {
    pub(crate) fn new(names: Names, kind: Kind) -> LockKeys {
        LockKeys { names, kind }
    }
}

impl std::ops::Deref for LockKeys {
    type Target = Names;

    fn deref(&self) -> &Names {
        &self.names
    }
}

impl std::fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockKeys")
            .field("lock", &self.names.lock)
            .field("kind", &self.kind.label())
            .finish()
    }
}

/// A script's source: the files of `lua/` named, one after the other. A
/// script that writes a lock starts with `shared.lua` (`refused`, a refusal
/// that names its key, and `next_token`); acquire scripts add
/// `shared_acquire.lua` (`take`, `reenter`), release scripts
/// `shared_release.lua` (`leave_level`). Each script carries only the
/// parts it uses: every call of a script defines its functions anew. For
/// that reason the reentrant lock's acquire and release put their common
/// case first, written without functions (`acquire_free.lua`,
/// `release_last.lua`): a fresh take and a last release then define none.
macro_rules! lua {
    ($($file:literal),+) => {
        concat!($(include_str!(concat!("../../lua/", $file))),+)
    };
}

pub(crate) mod election;
mod fair;
pub(crate) mod latch;
pub(crate) mod redisson;
mod reentrant;
mod rw;
pub(crate) mod semaphore;

pub(crate) use fair::worth_an_attempt;

pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new("renew", lua!("renew.lua")));
pub(crate) static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new("status", lua!("status.lua")));
pub(crate) static RAISE_TOKEN: LazyLock<Script> =
    LazyLock::new(|| Script::new("raise_token", lua!("shared.lua", "raise_token.lua")));
static FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "force_unlock",
        lua!("shared.lua", "shared_wake.lua", "force_unlock.lua"),
    )
});

static REENTRANT: LazyLock<Kind> = LazyLock::new(|| Arc::new(reentrant::Reentrant));
static FAIR: LazyLock<Kind> = LazyLock::new(|| Arc::new(fair::Fair));
static READ: LazyLock<Kind> = LazyLock::new(|| Arc::new(rw::Side { read: true }));
static WRITE: LazyLock<Kind> = LazyLock::new(|| Arc::new(rw::Side { read: false }));
static REDISSON: LazyLock<Kind> = LazyLock::new(|| Arc::new(redisson::RedissonLock));
static REDISSON_FAIR: LazyLock<Kind> = LazyLock::new(|| Arc::new(redisson::RedissonFair));
static REDISSON_READ: LazyLock<Kind> = LazyLock::new(|| Arc::new(redisson::RedissonSide { read: true }));
static REDISSON_WRITE: LazyLock<Kind> = LazyLock::new(|| Arc::new(redisson::RedissonSide { read: false }));

/// The reentrant lock: any owner may take a free lock; waiters race.
pub(crate) fn reentrant() -> Kind {
    REENTRANT.clone()
}

/// The fair lock: waiters are served in the order they asked (a queue).
pub(crate) fn fair() -> Kind {
    FAIR.clone()
}

/// The read side of a read-write lock: shared with other readers.
pub(crate) fn read() -> Kind {
    READ.clone()
}

/// The write side of a read-write lock: exclusive.
pub(crate) fn write() -> Kind {
    WRITE.clone()
}

/// The reentrant lock in Redisson's layout.
pub(crate) fn redisson() -> Kind {
    REDISSON.clone()
}

/// The fair lock in Redisson's layout.
pub(crate) fn redisson_fair() -> Kind {
    REDISSON_FAIR.clone()
}

/// One side of a read-write lock in Redisson's layout.
pub(crate) fn redisson_side(read: bool) -> Kind {
    if read {
        REDISSON_READ.clone()
    } else {
        REDISSON_WRITE.clone()
    }
}

/// A semaphore in Redisson's layout of `total` permits (the handle's), an
/// acquisition taking `take` of them.
pub(crate) fn redisson_permits(total: u32, take: u32) -> Kind {
    Arc::new(redisson::RedissonSemaphore { total, take })
}

/// A semaphore of `total` permits, an acquisition taking `take` of them;
/// each acquisition's owner field is its own permit id.
pub(crate) fn permits(total: u32, take: u32) -> Kind {
    Arc::new(semaphore::Semaphore { total, take })
}

/// A fair semaphore of `total` permits, an acquisition taking `take`:
/// served in request order, with direct grants.
pub(crate) fn fair_permits(total: u32, take: u32) -> Kind {
    Arc::new(semaphore::FairSemaphore { total, take })
}

/// The scripts whose calls a node may send together in one [`BATCH`]
/// call, each by its place here: the reentrant lock's acquire and
/// release, the calls of a client's uncontended locking.
fn batched() -> [&'static Script; 2] {
    [&reentrant::ACQUIRE, &reentrant::RELEASE]
}

/// The place of `script` among the batchable scripts (from 1, as the
/// batch script's `ops` are numbered), if it is one.
pub(crate) fn batch_index(script: &Script) -> Option<usize> {
    batched().iter().position(|s| std::ptr::eq(*s, script)).map(|i| i + 1)
}

/// Runs several calls of the batchable scripts in one call
/// (`lua/batch.lua`, after each batchable script wrapped as a function of
/// its own KEYS and ARGV).
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    let mut src = String::from("local ops = {}\n");
    for (i, script) in batched().iter().enumerate() {
        src.push_str(&format!("ops[{}] = function(KEYS, ARGV)\n{}\nend\n", i + 1, script.src));
    }
    src.push_str(lua!("batch.lua"));
    // Built once per process; scripts live as long as the program.
    Script::new("batch", Box::leak(src.into_boxed_str()))
});

/// The fair acquire's PTTL when the lock is free but other waiters are
/// ahead (the quorum keeps it when no master reports a holder).
pub(crate) const FREE_BUT_QUEUED: i64 = -3;

/// The message published on a lock's channel when it becomes free.
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// What a node adds to the arguments of its calls.
pub(crate) struct Env {
    /// How long a request's replay record lives on the server.
    pub(crate) record_ttl: Duration,
    /// Fair locks: how long a queued waiter may go without refreshing its
    /// deadline before it is evicted.
    pub(crate) waiter_timeout: Duration,
    /// `PUBLISH`, or `SPUBLISH` on a cluster (the channels share the lock's
    /// slot).
    pub(crate) publish: &'static str,
}

/// One script call: the script, its KEYS and its ARGV.
pub(crate) struct Call<'a> {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<&'a Str>,
    pub(crate) args: Vec<Value>,
    /// The ARGV index (from 0) of the flag that says the request was never
    /// sent before ("1"): whoever sends it again sets it to "0", so the
    /// script reads the request's record then.
    pub(crate) first_send: Option<usize>,
}

/// The ARGV of a release that wakes its waiters on the lock's channel
/// (`rw_release.lua`): owner, relet, record lifetime,
/// message, token, publish command, and the first-send flag at index
/// [`CHANNEL_RELEASE_FIRST_SEND`].
fn channel_release_args(r: &Release<'_>, env: &Env) -> Vec<Value> {
    vec![
        name(r.owner),
        ms(r.relet).into(),
        ms(env.record_ttl).into(),
        lit(UNLOCK_MESSAGE),
        token_arg(r.token),
        lit(env.publish),
        first_send_flag(!r.resent),
    ]
}

/// See [`channel_release_args`].
const CHANNEL_RELEASE_FIRST_SEND: usize = 6;

/// The value of a first-send flag.
fn first_send_flag(first: bool) -> Value {
    lit(if first { "1" } else { "0" })
}

/// A key or name of the lock's (or an owner field) as an argument: shared,
/// not copied.
pub(crate) fn name(s: &Str) -> Value {
    Value::String(s.clone())
}

/// An argument that is the same in every call: sent without a copy (a
/// `Value` made from a `&str` copies it, and again when it is framed).
pub(crate) fn lit(s: &'static str) -> Value {
    Value::from_static_str(s)
}

/// What the caller of an acquire attempt does if it is refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Nothing: it was only trying.
    #[default]
    No,
    /// It waits on, listening for the unlock.
    Listening,
    /// It waits on, and other waits of its client listen on the same
    /// channel (the client wakes one of them per message).
    WithOthers,
    /// As `Listening` (`others`: as `WithOthers`), and an unlock's wake-up
    /// brought it here: refused (another owner got in first), its client
    /// goes back to the front of the reentrant lock's waiters list, not
    /// the end, so it is the one woken next.
    Woken { others: bool },
}

impl Waiting {
    pub(crate) fn waits(self) -> bool {
        self != Waiting::No
    }

    /// As the scripts take it: "0" only trying, "1" waiting, "2" waiting
    /// with other waits of the client (a hold taken then must publish its
    /// release too: the others may still sleep); "3" and "4" as "1" and
    /// "2", woken by an unlock (only the reentrant lock's acquire tells
    /// them apart).
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Waiting::No => "0",
            Waiting::Listening => "1",
            Waiting::WithOthers => "2",
            Waiting::Woken { others: false } => "3",
            Waiting::Woken { others: true } => "4",
        }
    }
}

/// What a queued waiter asks of a direct grant (the fair lock's and the
/// fair semaphore's): "<lease ms> <record ms> <request id> <attempt>
/// <wake id>", or "" when it does not ask (only trying, or no wake id: a
/// quorum).
fn grant_ask(a: &Acquire<'_>, env: &Env) -> String {
    match a.grant {
        Some(wake) if a.waiting.waits() => format!(
            "{} {} {} {} {wake}",
            ms(a.lease),
            ms(env.record_ttl),
            a.request,
            a.attempt
        ),
        _ => String::new(),
    }
}

/// What a listening attempt adds to its call, for the kinds whose unlock
/// wakes one waiting client at a time (`lua/shared_listen.lua`): the
/// waiters list, then `mode` (when the kind passes how it waits here) and
/// the client id; with a grant lease, the asks hash, the grant's first
/// lease and the attempt's number, so the script leaves the wait's ask or
/// takes the client's back.
fn push_listening<'a>(call: &mut Call<'a>, keys: &'a LockKeys, a: &Acquire<'_>, mode: Option<Value>) {
    call.keys.push(&keys.waiters);
    call.args.extend(mode);
    call.args.push(a.grant.map_or_else(|| lit(""), Value::from));
    if let Some(first) = a.grant_lease {
        call.keys.push(&keys.asks);
        call.args.push(ms(first).into());
        call.args.push((a.attempt as i64).into());
    }
}

/// One acquire attempt for `owner` with a lease of `lease`. `request`
/// names the logical attempt (its replay record). `waiting`: when the
/// caller waits for the lock if this attempt is refused, the refusal leaves
/// a mark: a place in the queue (fair lock), or the hold's note that the
/// unlock must publish (reentrant lock; with other waits of the client, a
/// hold the attempt takes is noted too). `grant`: the waiter's wake id; a
/// fair waiter asks for direct grants with it, a reentrant lock's waiter
/// (its client id) is woken by it.
pub(crate) struct Acquire<'a> {
    pub(crate) owner: &'a Str,
    pub(crate) lease: Duration,
    pub(crate) request: &'a str,
    pub(crate) waiting: Waiting,
    pub(crate) grant: Option<&'a str>,
    /// A reentrant lock's waiter that may be handed the lock by an unlock
    /// (one master; `request` is then the whole wait's id): the first
    /// lease of such a grant. The script leaves the ask only while no
    /// other wait of the client listens on the lock.
    pub(crate) grant_lease: Option<Duration>,
    /// `request` was sent before (its outcome unknown, or a grant-asking
    /// wait's earlier attempt): its record, or a hold it made, may exist.
    /// A request sent for the first time has none, and the script need not
    /// look.
    pub(crate) resent: bool,
    /// The number of this attempt within its wait. A waiter's ask carries
    /// it and the message of a direct grant names it back, so the waiter
    /// claims by message only a grant made after its latest attempt ran:
    /// a message can come late, after a later attempt of the wait found
    /// that grant's hold already gone (its lease, counted from that
    /// attempt, would then outlast the hold).
    pub(crate) attempt: u64,
}

/// Leaving one level of `owner`'s hold whose fencing token is `token`
/// (`None`: whichever hold the owner has); `relet` is re-applied as the
/// lease while levels remain (zero leaves it alone). `request` names the
/// release (its replay record).
pub(crate) struct Release<'a> {
    pub(crate) owner: &'a Str,
    pub(crate) token: Option<u64>,
    pub(crate) relet: Duration,
    pub(crate) request: &'a str,
    /// As [`Acquire::resent`].
    pub(crate) resent: bool,
    /// The id of the request whose fresh take made the hold (`None`: not
    /// known). A read-write lock's reader names its hold by it, as a
    /// writer does by its token: a late release of an earlier hold of the
    /// same owner then leaves a newer one alone.
    pub(crate) take: Option<&'a str>,
}

/// A lock kind's calls, and every other way in which kinds differ below
/// the handles. `rec` is the request's replay record key.
pub(crate) trait Protocol: Send + Sync {
    /// The kind's name in metrics and logs.
    fn label(&self) -> &'static str;
    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a>;
    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a>;
    /// The kind's own scripts, loaded at start-up.
    fn scripts(&self) -> Vec<&'static Script>;
    /// A waiter that stops waiting takes back what its attempts left (a
    /// fair waiter its place in the queue and, with `rec`, a grant it never
    /// learned of; a writer of a read-write lock its mark). Idempotent.
    /// `asked`: the request ids the wait's asks for direct grants named
    /// (none without asks).
    /// `None`: the kind's attempts leave nothing behind.
    fn leave<'a>(
        &self,
        _keys: &'a LockKeys,
        _owner: &Str,
        _rec: Option<&'a Str>,
        _asked: &[String],
        _env: &Env,
    ) -> Option<Call<'a>> {
        None
    }

    /// The field `owner` (an owner field, `<client-uuid>:<owner-id>`, or a
    /// reader's field) writes in a lock of this kind, when it is not the
    /// owner field itself.
    fn field(&self, _owner: &str) -> Option<String> {
        None
    }

    /// Whether each hold gets a fencing token of its own (an exclusive
    /// hold), so that a new hold must never carry one an earlier hold had.
    /// Readers share the counter's value, and permits carry none.
    fn own_tokens(&self) -> bool {
        true
    }

    /// Which owner fields of the lock's hash make this kind locked (a side
    /// of a read-write lock is locked while that side holds it); `None`:
    /// the hash existing does.
    fn locked_by(&self) -> Option<fn(&str) -> bool> {
        None
    }

    /// Frees the lock whoever holds it, and wakes its waiters
    /// (`lua/force_unlock.lua`). `rec`: the call's replay record, so that
    /// a re-send after a broken connection answers as the first sending
    /// did and frees no lock taken since.
    fn force_unlock<'a>(&self, keys: &'a LockKeys, rec: &'a Str, env: &Env) -> Call<'a> {
        force_unlock(keys, rec, env, "")
    }
}

/// The force-unlock call; `side`: "read" or "write" to free one side of a
/// read-write lock only, "" the whole lock.
fn force_unlock<'a>(keys: &'a LockKeys, rec: &'a Str, env: &Env, side: &'static str) -> Call<'a> {
    Call {
        script: &FORCE_UNLOCK,
        keys: vec![
            &keys.lock,
            &keys.channel,
            &keys.queue,
            &keys.asks,
            &keys.waiters,
            &keys.writers,
            rec,
        ],
        args: vec![
            lit(UNLOCK_MESSAGE),
            name(&keys.wake_prefix),
            lit(env.publish),
            lit(side),
            ms(env.record_ttl).into(),
            lit("1"),
        ],
        first_send: Some(5),
    }
}

/// Every script of every kind, for SCRIPT LOAD.
pub(crate) fn all_scripts() -> Vec<&'static Script> {
    let mut all: Vec<&'static Script> = vec![&RENEW, &FORCE_UNLOCK, &RAISE_TOKEN, &BATCH];
    for kind in [
        reentrant(),
        fair(),
        write(),
        permits(1, 1),
        fair_permits(1, 1),
        redisson(),
        redisson_permits(1, 1),
        redisson_side(false),
        redisson_fair(),
    ] {
        all.extend(kind.scripts());
    }
    all.extend(election::scripts());
    all.extend(latch::scripts());
    all
}

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Held now by the caller's owner, at this reentry depth.
    Acquired { token: u64, count: u64 },
    /// Held by another owner; its remaining lease in ms (-1: no TTL).
    /// `place`: a listening waiter's client's place among the clients an
    /// unlock wakes one by one (0: woken next), when the kind keeps them.
    Held { pttl: i64, place: Option<u64> },
}

/// What one release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    Released,
    StillHeld(u64),
    NotHeld,
}

/// The reply of every kind's acquire script: `{1, token, count}` or
/// `{0, pttl}`, or `{0, pttl, place}` for a listening waiter of the
/// reentrant lock, whose fresh take by a first send replies with the bare
/// token (`lua/acquire_free.lua`; it reaches here as a one-element list).
pub(crate) fn acquire_reply(reply: &[i64]) -> Result<AcquireReply> {
    match reply {
        [token] => Ok(AcquireReply::Acquired {
            token: *token as u64,
            count: 1,
        }),
        [1, token, count] => Ok(AcquireReply::Acquired {
            token: *token as u64,
            count: *count as u64,
        }),
        [0, pttl] => Ok(AcquireReply::Held {
            pttl: *pttl,
            place: None,
        }),
        [0, pttl, place] if *place >= 0 => Ok(AcquireReply::Held {
            pttl: *pttl,
            place: Some(*place as u64),
        }),
        other => Err(unexpected("acquire", other)),
    }
}

/// The reply of every kind's release script: 0 released, n > 0 levels
/// left, -1 not this hold. `resent`: the request was written more than
/// once (an earlier reply was lost).
pub(crate) fn release_reply(reply: i64, resent: bool) -> ReleaseReply {
    match reply {
        0 => ReleaseReply::Released,
        n if n > 0 => ReleaseReply::StillHeld(n as u64),
        // A re-sent release that finds no hold of ours: the first send
        // freed the lock (no record is kept for that), or the hold was gone
        // already. Either way the lock is not ours any more.
        _ if resent => ReleaseReply::Released,
        _ => ReleaseReply::NotHeld,
    }
}

/// The record key of `request`.
pub(crate) fn record(keys: &LockKeys, request: &str) -> Str {
    crate::keys::joined(&[&keys.req_prefix, request]).into()
}

pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// A token argument: the number, or "" when unknown.
fn token_arg(token: Option<u64>) -> Value {
    token.map_or_else(|| lit(""), |t| (t as i64).into())
}

pub(crate) fn unexpected(op: &'static str, reply: &[i64]) -> Error {
    Error::Redis {
        op,
        kind: crate::error::RedisErrorKind::Other,
        message: format!("unexpected script reply {reply:?}"),
    }
}
