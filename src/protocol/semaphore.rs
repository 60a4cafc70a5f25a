//! The semaphore's calls: `lua/sem_acquire.lua`, `lua/sem_release.lua`,
//! `lua/sem_available.lua` and `lua/sem_permits.lua`. The handle's number
//! of permits and how many to take come with the kind (a `Semaphore` per
//! acquisition); the owner field is the permit id. A number stored with
//! the semaphore (`Names::permits`) overrides the handle's.

use std::sync::LazyLock;

use fred::types::Value;

use super::LockKeys;
use super::{lit, ms, name, Acquire, Call, Env, Protocol, Release, Script, UNLOCK_MESSAGE};
use crate::keys::{Names, Str};

static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "acquire",
        lua!(
            "shared.lua",
            "shared_rw.lua",
            "shared_claim.lua",
            "shared_listen.lua",
            "sem_acquire.lua"
        ),
    )
});
static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "release",
        lua!(
            "shared.lua",
            "shared_rw.lua",
            "shared_claim.lua",
            "shared_wake.lua",
            "shared_permits.lua",
            "sem_release.lua"
        ),
    )
});
static SEM_LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "leave",
        lua!(
            "shared.lua",
            "shared_rw.lua",
            "shared_claim.lua",
            "shared_wake.lua",
            "shared_permits.lua",
            "sem_leave.lua"
        ),
    )
});
static SEM_AVAILABLE: LazyLock<Script> =
    LazyLock::new(|| Script::new("available_permits", lua!("shared.lua", "sem_available.lua")));
static FSEM_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "shared_rw.lua", "fsem_acquire.lua")));
static FSEM_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "shared_rw.lua", "fsem_release.lua")));
static FSEM_LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new("leave", lua!("shared.lua", "fsem_leave.lua")));
static SEM_PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new("permits", lua!("shared.lua", "shared_wake.lua", "sem_permits.lua")));

/// A semaphore of `total` permits; an acquisition takes `take` of them.
pub(super) struct Semaphore {
    pub(super) total: u32,
    pub(super) take: u32,
}

impl Protocol for Semaphore {
    fn label(&self) -> &'static str {
        "semaphore"
    }

    /// Permits carry no token.
    fn own_tokens(&self) -> bool {
        false
    }

    /// Permit ids are unique per acquisition, so the hash itself is the
    /// replay record: `rec` is not used. The request id says which attempt
    /// of the acquisition holds its grant (an attempt whose reply was lost
    /// is given back by a re-send in the background, while a later attempt
    /// may have taken the grant over). A waiting attempt lists its client
    /// (`a.grant`, its wake id) to be woken, and with `a.grant_lease`
    /// leaves an ask to be handed the permits, as the reentrant lock's.
    fn acquire<'a>(&self, keys: &'a LockKeys, _rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        let (total, take) = (self.total, self.take);
        let mut call = Call {
            script: &SEM_ACQUIRE,
            keys: vec![&keys.lock, &keys.permits],
            args: vec![
                name(a.owner),
                (take as i64).into(),
                (total as i64).into(),
                ms(a.lease).into(),
                lit(a.waiting.arg()),
                a.request.into(),
            ],
            first_send: None,
        };
        if a.waiting.waits() {
            super::push_listening(&mut call, keys, a, None);
            if a.grant_lease.is_none() {
                call.args.extend([lit(""), lit("")]);
            }
            // The claim's length: the waiter timeout, as a fair waiter's
            // place (its attempts renew it).
            call.args.push(ms(env.waiter_timeout).into());
        }
        call
    }

    /// Names the request that took the permits when the caller knows it
    /// (`r.take`): a hold of the same permit id that another attempt made
    /// is left alone (see [`FairSemaphore::release`]).
    fn release<'a>(&self, keys: &'a LockKeys, _rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        let mut call = release_call(keys, name(r.owner), self.total, env);
        if let Some(take) = r.take {
            call.args.push(take.into());
        }
        call
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&SEM_ACQUIRE, &SEM_RELEASE, &SEM_LEAVE, &SEM_AVAILABLE, &SEM_PERMITS]
    }

    /// Passes a wake-up on (`lua/sem_leave.lua`): the caller's client may
    /// have taken a release's wake-up without using it. With `rec`, a wait
    /// of `owner` (its permit id) that asked for direct grants also takes
    /// its ask back and gives back a grant it never learned of.
    fn leave<'a>(
        &self,
        keys: &'a LockKeys,
        owner: &Str,
        rec: Option<&'a Str>,
        _asked: &[String],
        env: &Env,
    ) -> Option<Call<'a>> {
        let mut call = Call {
            script: &SEM_LEAVE,
            ..release_call(keys, lit(""), self.total, env)
        };
        if let Some(rec) = rec {
            let request = rec.strip_prefix(&*keys.req_prefix).unwrap_or(rec);
            // The ask's field is the client id, the permit id's first part.
            let client = owner.split(':').next().unwrap_or_default();
            call.args
                .extend([Value::from(request), name(owner), Value::from(client)]);
        }
        Some(call)
    }
}

/// A semaphore's release of `id` (`lua/sem_release.lua`), which hands the
/// permits it frees to the listed clients, for a handle of `total`.
fn release_call<'a>(keys: &'a Names, id: Value, total: u32, env: &Env) -> Call<'a> {
    Call {
        script: &SEM_RELEASE,
        keys: vec![&keys.lock, &keys.channel, &keys.waiters, &keys.asks, &keys.permits],
        args: vec![
            id,
            lit(env.publish),
            lit(UNLOCK_MESSAGE),
            (total as i64).into(),
            name(&keys.wake_prefix),
            keys.req_prefix.as_str().into(),
        ],
        first_send: None,
    }
}

/// A fair semaphore of `total` permits (the handle's); an acquisition
/// takes `take`. Its waiters queue as the fair lock's do, and a release
/// hands the free permits to the head of the queue (`lua/fsem_*.lua`).
pub(super) struct FairSemaphore {
    pub(super) total: u32,
    pub(super) take: u32,
}

impl Protocol for FairSemaphore {
    fn label(&self) -> &'static str {
        "fair_semaphore"
    }

    /// Permits carry no token.
    fn own_tokens(&self) -> bool {
        false
    }

    /// As the semaphore's (the permit id is its own record), and as the
    /// fair lock's: a waiting attempt joins the queue, with an ask for
    /// direct grants when `grant` names its wake id.
    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        let ask = super::grant_ask(a, env);
        Call {
            script: &FSEM_ACQUIRE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, rec, &keys.asks, &keys.permits],
            args: vec![
                name(a.owner),
                (self.take as i64).into(),
                (self.total as i64).into(),
                ms(a.lease).into(),
                ms(env.waiter_timeout).into(),
                ms(env.record_ttl).into(),
                lit(if a.waiting.waits() { "wait" } else { "try" }),
                name(&keys.wake_prefix),
                lit(env.publish),
                ask.into(),
                ms(env.waiter_timeout * 2).into(),
                a.request.into(),
            ],
            first_send: None,
        }
    }

    /// Names the request that took the permits when the caller knows it
    /// (`r.take`: a guard's fresh take, or the give-back of an attempt whose
    /// outcome was unknown), so that a hold of the same permit id that
    /// another attempt made is left alone: the give-back may run after the
    /// hold it was for lapsed and the wait, going on under a fresh request,
    /// took the permits again.
    fn release<'a>(&self, keys: &'a LockKeys, _rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &FSEM_RELEASE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.asks, &keys.permits],
            args: vec![
                name(r.owner),
                name(&keys.wake_prefix),
                lit(env.publish),
                keys.req_prefix.as_str().into(),
                (self.total as i64).into(),
                r.take.unwrap_or_default().into(),
            ],
            first_send: None,
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&FSEM_ACQUIRE, &FSEM_RELEASE, &FSEM_LEAVE]
    }

    /// The waiter leaves the queue; `rec`: its wait's record, so a grant it
    /// never learned of is given back.
    fn leave<'a>(
        &self,
        keys: &'a LockKeys,
        owner: &Str,
        rec: Option<&'a Str>,
        _asked: &[String],
        env: &Env,
    ) -> Option<Call<'a>> {
        let mut key_list = vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.asks];
        key_list.extend(rec);
        Some(Call {
            script: &FSEM_LEAVE,
            keys: key_list,
            args: vec![
                name(owner),
                name(&keys.wake_prefix),
                lit(env.publish),
                keys.req_prefix.as_str().into(),
            ],
            first_send: None,
        })
    }
}

/// The permits of the semaphore `keys` (`fair`: a fair semaphore) now,
/// for a handle of `total`: `[free, in use, number]`
/// (`lua/sem_available.lua`).
pub(crate) fn available<'a>(keys: &'a Names, total: u32, fair: bool) -> Call<'a> {
    Call {
        script: &SEM_AVAILABLE,
        keys: vec![&keys.lock, &keys.permits],
        args: vec![
            (total as i64).into(),
            lit(if fair { "fair-semaphore" } else { "semaphore" }),
        ],
        first_send: None,
    }
}

/// What to do with the number stored with a semaphore.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Number {
    /// Store it, unless one is stored.
    Set(u32),
    /// Add to it (to the handle's number while none is stored).
    Add(i64),
}

/// Stores or changes the number (`lua/sem_permits.lua`): replies
/// `[1, number]` stored, `[0, number]` not. `record`: the call's replay
/// record, so an `Add` sent again after a broken connection is not made
/// twice.
pub(crate) fn number<'a>(keys: &'a Names, record: &'a Str, what: Number, handle: u32, env: &Env) -> Call<'a> {
    let (op, n) = match what {
        Number::Set(n) => ("set", n as i64),
        Number::Add(d) => ("add", d),
    };
    Call {
        script: &SEM_PERMITS,
        keys: vec![&keys.permits, &keys.queue, &keys.asks, &keys.waiters, record],
        args: vec![
            lit(op),
            n.into(),
            (handle as i64).into(),
            name(&keys.channel),
            lit(env.publish),
            name(&keys.wake_prefix),
            ms(env.record_ttl).into(),
            lit("1"),
        ],
        first_send: Some(7),
    }
}

/// Gives back the permits of the acquisition `id`, whoever holds them
/// (`lua/sem_release.lua`, or `lua/fsem_release.lua` for a fair semaphore),
/// for a handle of `total`: replies 0 released, -1 not held.
pub(crate) fn release_by_id<'a>(keys: &'a Names, id: &str, total: u32, fair: bool, env: &Env) -> Call<'a> {
    match fair {
        false => release_call(keys, id.into(), total, env),
        true => Call {
            script: &FSEM_RELEASE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.asks, &keys.permits],
            args: vec![
                id.into(),
                name(&keys.wake_prefix),
                lit(env.publish),
                keys.req_prefix.as_str().into(),
                (total as i64).into(),
            ],
            first_send: None,
        },
    }
}
