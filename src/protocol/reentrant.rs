//! The reentrant lock's calls: `lua/acquire.lua`, `lua/release.lua` and
//! `lua/wake_next.lua`.

use std::sync::LazyLock;

use fred::types::Value;

use super::LockKeys;
use super::{
    first_send_flag, lit, ms, name, token_arg, Acquire, Call, Env, Protocol, Release, Script, Waiting, UNLOCK_MESSAGE,
};
use crate::keys::Str;

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "acquire",
        lua!(
            "acquire_free.lua",
            "shared.lua",
            "shared_acquire.lua",
            "shared_listen.lua",
            "acquire.lua"
        ),
    )
});
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "release",
        lua!(
            "release_last.lua",
            "shared.lua",
            "shared_release.lua",
            "shared_wake.lua",
            "release.lua"
        ),
    )
});
static WAKE_NEXT: LazyLock<Script> =
    LazyLock::new(|| Script::new("wake_next", lua!("shared.lua", "shared_wake.lua", "wake_next.lua")));

pub(super) struct Reentrant;

impl Protocol for Reentrant {
    fn label(&self) -> &'static str {
        "reentrant"
    }

    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        let mut call = Call {
            script: &ACQUIRE,
            keys: vec![&keys.lock, &keys.token, rec],
            args: vec![
                name(a.owner),
                ms(a.lease).into(),
                ms(env.record_ttl).into(),
                first_send_flag(!a.resent),
            ],
            first_send: Some(3),
        };
        // An attempt that only tries leaves out what only a waiter's
        // attempt reads (see lua/acquire.lua): the waiters list, how it
        // waits, and its client id.
        if a.waiting != Waiting::No {
            super::push_listening(&mut call, keys, a, Some(lit(a.waiting.arg())));
        }
        call
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        let mut args = vec![
            name(r.owner),
            ms(r.relet).into(),
            ms(env.record_ttl).into(),
            token_arg(r.token),
            first_send_flag(!r.resent),
            name(&keys.wake_prefix),
        ];
        // The message is always the plain one, and PUBLISH is what leaving
        // the command out means (see lua/release.lua).
        if env.publish != "PUBLISH" {
            args.push(lit(UNLOCK_MESSAGE));
            args.push(lit(env.publish));
        }
        Call {
            script: &RELEASE,
            keys: vec![&keys.lock, &keys.waiters, rec, &keys.token, &keys.asks],
            args,
            first_send: Some(4),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&ACQUIRE, &RELEASE, &WAKE_NEXT]
    }

    /// Passes a wake-up on (`lua/wake_next.lua`): the caller's client may
    /// have taken an unlock's only wake-up without using it. With `rec`, a
    /// wait of `owner` that asked for direct grants also takes its ask back
    /// and gives back a grant it never learned of.
    fn leave<'a>(
        &self,
        keys: &'a LockKeys,
        owner: &Str,
        rec: Option<&'a Str>,
        _asked: &[String],
        env: &Env,
    ) -> Option<Call<'a>> {
        let mut args = vec![lit(UNLOCK_MESSAGE), name(&keys.wake_prefix), lit(env.publish)];
        if let Some(rec) = rec {
            // The ask's field is the client id, the owner field's first part.
            let client = owner.split(':').next().unwrap_or_default();
            args.extend([name(rec), name(owner), Value::from(client)]);
        }
        Some(Call {
            script: &WAKE_NEXT,
            keys: vec![&keys.lock, &keys.waiters, &keys.asks, &keys.token],
            args,
            first_send: None,
        })
    }
}
