//! The reentrant lock in Redisson's layout (the client's
//! `redisson_compatible`): `lua/redisson_acquire.lua`,
//! `lua/redisson_release.lua` and `lua/redisson_force_unlock.lua`. The
//! lock's `Names` carry Redisson's channel and token counter
//! (`Names::redisson`). And the semaphore in Redisson's layout (Redisson's
//! RSemaphore and RPermitExpirableSemaphore at once): `lua/rsem_*.lua`,
//! with `Names::redisson_semaphore`.

use std::sync::LazyLock;

use fred::types::Value;

use super::{
    channel_release_args, first_send_flag, lit, ms, name, Acquire, Call, Env, LockKeys, Protocol, Release, Script,
    CHANNEL_RELEASE_FIRST_SEND,
};
use crate::keys::{Names, Str};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "redisson_acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new("release", lua!("shared.lua", "redisson_release.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new("force_unlock", lua!("shared.lua", "redisson_force_unlock.lua")));

pub(super) struct RedissonLock;

impl Protocol for RedissonLock {
    fn label(&self) -> &'static str {
        "redisson"
    }

    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &ACQUIRE,
            keys: vec![&keys.lock, &keys.token, rec],
            args: vec![
                name(a.owner),
                ms(a.lease).into(),
                ms(env.record_ttl).into(),
                first_send_flag(!a.resent),
            ],
            first_send: Some(3),
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &RELEASE,
            keys: vec![&keys.lock, &keys.channel, rec],
            args: channel_release_args(r, env),
            first_send: Some(CHANNEL_RELEASE_FIRST_SEND),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&ACQUIRE, &RELEASE, &FORCE_UNLOCK]
    }

    fn force_unlock<'a>(&self, keys: &'a LockKeys, rec: &'a Str, env: &Env) -> Call<'a> {
        Call {
            script: &FORCE_UNLOCK,
            keys: vec![&keys.lock, &keys.channel, rec],
            args: vec![lit(env.publish), ms(env.record_ttl).into(), lit("1")],
            first_send: Some(2),
        }
    }
}

static RSEM_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "rsem_shared.lua", "rsem_acquire.lua")));
static RSEM_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "rsem_shared.lua", "rsem_release.lua")));
static RSEM_COUNT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "available_permits",
        lua!("shared.lua", "rsem_shared.lua", "rsem_count.lua"),
    )
});
static RSEM_PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new("permits", lua!("shared.lua", "rsem_shared.lua", "rsem_permits.lua")));

/// The semaphore in Redisson's layout (`lua/rsem_*.lua`): Redisson's
/// counter of free permits at the name (`Names::permits`, see
/// `Names::redisson_semaphore`) and its sorted set of expiring permits
/// (`Names::lock`, where each hold is a member scored with its deadline).
/// `total` is the handle's number (the counter's first value when there is
/// none), `take` how many an acquisition takes.
pub(super) struct RedissonSemaphore {
    pub(super) total: u32,
    pub(super) take: u32,
}

impl Protocol for RedissonSemaphore {
    fn label(&self) -> &'static str {
        "redisson_semaphore"
    }

    /// Permits carry no token.
    fn own_tokens(&self) -> bool {
        false
    }

    /// `rec` records which request got the acquisition's grant.
    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &RSEM_ACQUIRE,
            keys: vec![&keys.permits, &keys.lock, &keys.channel, rec],
            args: vec![
                name(a.owner),
                (self.take as i64).into(),
                (self.total as i64).into(),
                ms(a.lease).into(),
                ms(env.record_ttl).into(),
                lit(env.publish),
            ],
            first_send: None,
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, _rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        release_permits(keys, name(r.owner), env)
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&RSEM_ACQUIRE, &RSEM_RELEASE, &RSEM_COUNT, &RSEM_PERMITS]
    }
}

/// Gives back the permits of the acquisition `id` (a lockwarden permit id,
/// or a Redisson permit's raw 16 bytes) of the semaphore `keys` in
/// Redisson's layout: replies 0 released, -1 not held.
pub(crate) fn release_permits<'a>(keys: &'a Names, id: Value, env: &Env) -> Call<'a> {
    Call {
        script: &RSEM_RELEASE,
        keys: vec![&keys.permits, &keys.lock, &keys.channel],
        args: vec![id, lit(env.publish)],
        first_send: None,
    }
}

/// The permits of the semaphore `keys` in Redisson's layout, for a handle
/// of `total`: `[free, held, free + held]` (`lua/rsem_count.lua`).
pub(crate) fn count(keys: &Names, total: u32) -> Call<'_> {
    Call {
        script: &RSEM_COUNT,
        keys: vec![&keys.permits, &keys.lock],
        args: vec![(total as i64).into()],
        first_send: None,
    }
}

/// Sets or changes the count of the semaphore `keys` in Redisson's layout
/// (`lua/rsem_permits.lua`): replies `[1, number]` done, `[0, number]` not.
/// `record`: the call's replay record (see `semaphore::number`).
pub(crate) fn number<'a>(
    keys: &'a Names,
    record: &'a Str,
    what: super::semaphore::Number,
    handle: u32,
    env: &Env,
) -> Call<'a> {
    let (op, n) = match what {
        super::semaphore::Number::Set(n) => ("set", n as i64),
        super::semaphore::Number::Add(d) => ("add", d),
    };
    Call {
        script: &RSEM_PERMITS,
        keys: vec![&keys.permits, &keys.lock, &keys.channel, record],
        args: vec![
            lit(op),
            n.into(),
            (handle as i64).into(),
            lit(env.publish),
            ms(env.record_ttl).into(),
            lit("1"),
        ],
        first_send: Some(5),
    }
}

static RRW_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "rrw_shared.lua", "rrw_acquire.lua")));
static RRW_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "rrw_shared.lua", "rrw_release.lua")));
static RRW_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "force_unlock",
        lua!("shared.lua", "rrw_shared.lua", "rrw_force_unlock.lua"),
    )
});

/// The suffix of a write holder's field in Redisson's read-write lock.
const WRITE_SUFFIX: &str = ":write";

/// One side of a read-write lock in Redisson's layout (`lua/rrw_*.lua`):
/// Redisson's hash at the name (`mode`, a reader's field is its owner
/// field, the writer's its owner field followed by `:write`), a timeout
/// key per level of each hold, Redisson's channel (`Names::redisson_rw`).
pub(super) struct RedissonSide {
    pub(super) read: bool,
}

impl RedissonSide {
    fn side(&self) -> Value {
        lit(if self.read { "read" } else { "write" })
    }
}

impl Protocol for RedissonSide {
    fn label(&self) -> &'static str {
        if self.read {
            "redisson_read"
        } else {
            "redisson_write"
        }
    }

    /// A reader's token is shared with the other readers.
    fn own_tokens(&self) -> bool {
        !self.read
    }

    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &RRW_ACQUIRE,
            keys: vec![&keys.lock, &keys.token, rec],
            args: vec![
                name(a.owner),
                ms(a.lease).into(),
                ms(env.record_ttl).into(),
                first_send_flag(!a.resent),
                self.side(),
                keys.redisson_tag().into(),
            ],
            first_send: Some(3),
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        let mut args = channel_release_args(r, env);
        args.push(self.side());
        args.push(keys.redisson_tag().into());
        Call {
            script: &RRW_RELEASE,
            keys: vec![&keys.lock, &keys.channel, rec],
            args,
            first_send: Some(CHANNEL_RELEASE_FIRST_SEND),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&RRW_ACQUIRE, &RRW_RELEASE, &RRW_FORCE_UNLOCK]
    }

    /// Redisson's fields: a reader's is its owner field, a writer's the
    /// owner field followed by `:write`.
    fn field(&self, owner: &str) -> Option<String> {
        let base = owner.strip_suffix(WRITE_SUFFIX);
        match (self.read, base) {
            (true, Some(base)) => Some(base.to_string()),
            (false, None) => Some(format!("{owner}{WRITE_SUFFIX}")),
            _ => None,
        }
    }

    fn locked_by(&self) -> Option<fn(&str) -> bool> {
        Some(if self.read {
            |f| !f.ends_with(WRITE_SUFFIX)
        } else {
            |f| f.ends_with(WRITE_SUFFIX)
        })
    }

    /// Frees the lock only while this side holds it (Redisson's
    /// `forceUnlock` of that side).
    fn force_unlock<'a>(&self, keys: &'a LockKeys, rec: &'a Str, env: &Env) -> Call<'a> {
        Call {
            script: &RRW_FORCE_UNLOCK,
            keys: vec![&keys.lock, &keys.channel, rec],
            args: vec![lit(env.publish), self.side(), ms(env.record_ttl).into(), lit("1")],
            first_send: Some(3),
        }
    }
}

static RFAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "rfair_shared.lua", "rfair_acquire.lua")));
static RFAIR_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "rfair_shared.lua", "rfair_release.lua")));
static RFAIR_LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new("leave", lua!("shared.lua", "rfair_shared.lua", "rfair_leave.lua")));
static RFAIR_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "force_unlock",
        lua!("shared.lua", "rfair_shared.lua", "rfair_force_unlock.lua"),
    )
});

/// Redisson's `threadWaitTime` of its fair lock (its default, 5 minutes):
/// how much later than the waiter before it a queued waiter is dropped
/// from the queue when it has not taken the lock.
pub(crate) const THREAD_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The fair lock in Redisson's layout (`lua/rfair_*.lua`): RLock's hash,
/// Redisson's queue, waiters' times and per-waiter channels
/// (`Names::redisson_fair`).
pub(super) struct RedissonFair;

impl Protocol for RedissonFair {
    fn label(&self) -> &'static str {
        "redisson_fair"
    }

    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &RFAIR_ACQUIRE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.token, rec],
            args: vec![
                name(a.owner),
                ms(a.lease).into(),
                ms(env.record_ttl).into(),
                lit(if a.waiting.waits() { "wait" } else { "try" }),
                ms(THREAD_WAIT).into(),
            ],
            first_send: None,
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        let mut args = channel_release_args(r, env);
        args.push(name(&keys.wake_prefix));
        Call {
            script: &RFAIR_RELEASE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, rec],
            args,
            first_send: Some(CHANNEL_RELEASE_FIRST_SEND),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&RFAIR_ACQUIRE, &RFAIR_RELEASE, &RFAIR_LEAVE, &RFAIR_FORCE_UNLOCK]
    }

    /// The waiter leaves the queue, as Redisson's does when it gives up.
    fn leave<'a>(
        &self,
        keys: &'a LockKeys,
        owner: &Str,
        _rec: Option<&'a Str>,
        _asked: &[String],
        env: &Env,
    ) -> Option<Call<'a>> {
        Some(Call {
            script: &RFAIR_LEAVE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts],
            args: vec![
                name(owner),
                ms(THREAD_WAIT).into(),
                name(&keys.wake_prefix),
                lit(env.publish),
            ],
            first_send: None,
        })
    }

    fn force_unlock<'a>(&self, keys: &'a LockKeys, rec: &'a Str, env: &Env) -> Call<'a> {
        Call {
            script: &RFAIR_FORCE_UNLOCK,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, rec],
            args: vec![
                lit(env.publish),
                name(&keys.wake_prefix),
                ms(env.record_ttl).into(),
                lit("1"),
            ],
            first_send: Some(3),
        }
    }
}
