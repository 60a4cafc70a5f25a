//! The reentrant lock in Redisson's layout (the client's
//! `redisson_compatible`): `lua/redisson_acquire.lua`,
//! `lua/redisson_release.lua` and `lua/redisson_force_unlock.lua`. The
//! lock's `Names` carry Redisson's channel and token counter
//! (`Names::redisson`).

use std::sync::LazyLock;

use super::{
    channel_release_args, first_send_flag, lit, ms, name, Acquire, Call, Env, LockKeys, Protocol, Release, Script,
    CHANNEL_RELEASE_FIRST_SEND,
};
use crate::keys::Str;

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

    fn force_unlock<'a>(&self, keys: &'a LockKeys, env: &Env) -> Call<'a> {
        Call {
            script: &FORCE_UNLOCK,
            keys: vec![&keys.lock, &keys.channel],
            args: vec![lit(env.publish)],
            first_send: None,
        }
    }
}
