//! The fair lock's calls: `lua/fair_acquire.lua`, `lua/fair_release.lua`
//! and `lua/fair_leave.lua`, and the cheap check of a grant-asking waiter.

use std::sync::LazyLock;

use super::LockKeys;
use super::{first_send_flag, lit, ms, name, token_arg, Acquire, Call, Env, Protocol, Release, Script};
use crate::keys::Str;

static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "shared_acquire.lua", "fair_acquire.lua")));
static FAIR_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "shared_release.lua", "fair_release.lua")));
static FAIR_LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new("leave", lua!("shared.lua", "fair_leave.lua")));

pub(super) struct Fair;

impl Protocol for Fair {
    fn label(&self) -> &'static str {
        "fair"
    }

    /// Joins the queue when `waiting` ("wait"; "try" only looks); with
    /// `grant`, also leaves an ask so an unlock may hand the lock straight
    /// to this waiter (its request record then holds the grant).
    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        let ask = super::grant_ask(a, env);
        Call {
            script: &FAIR_ACQUIRE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.token, rec, &keys.asks],
            args: vec![
                name(a.owner),
                ms(a.lease).into(),
                ms(env.waiter_timeout).into(),
                ms(env.record_ttl).into(),
                lit(if a.waiting.waits() { "wait" } else { "try" }),
                name(&keys.wake_prefix),
                lit(env.publish),
                ask.into(),
                ms(env.waiter_timeout * 2).into(),
            ],
            // A waiter's request id may have a record before its first send
            // of an attempt: an unlock writes the grant there.
            first_send: None,
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &FAIR_RELEASE,
            keys: vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.token, rec, &keys.asks],
            args: vec![
                name(r.owner),
                ms(r.relet).into(),
                ms(env.record_ttl).into(),
                token_arg(r.token),
                name(&keys.wake_prefix),
                lit(env.publish),
                keys.req_prefix.as_str().into(),
                first_send_flag(!r.resent),
            ],
            first_send: Some(7),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&FAIR_ACQUIRE, &FAIR_RELEASE, &FAIR_LEAVE]
    }

    /// The waiter leaves the queue. `rec`: the record of the wait's request
    /// when it asked for direct grants, so a grant it never learned of is
    /// given back; `asked`: every request id the wait's asks named, so a
    /// leave that comes late leaves alone the place of a later wait of the
    /// same owner (whose ask names another).
    fn leave<'a>(
        &self,
        keys: &'a LockKeys,
        owner: &Str,
        rec: Option<&'a Str>,
        asked: &[String],
        env: &Env,
    ) -> Option<Call<'a>> {
        let mut key_list = vec![&keys.lock, &keys.queue, &keys.timeouts, &keys.token, &keys.asks];
        key_list.extend(rec);
        Some(Call {
            script: &FAIR_LEAVE,
            keys: key_list,
            args: [name(owner), name(&keys.wake_prefix), lit(env.publish)]
                .into_iter()
                .chain(asked.iter().map(|id| id.as_str().into()))
                .collect(),
            first_send: None,
        })
    }
}

/// The keys whose existence tells a grant-asking waiter whether it has
/// something to re-check (see `Node::worth_an_attempt`): the lock, and its
/// request's record.
pub(crate) fn worth_an_attempt<'a>(keys: &'a LockKeys, rec: &'a str) -> [&'a str; 2] {
    [&keys.lock, rec]
}
