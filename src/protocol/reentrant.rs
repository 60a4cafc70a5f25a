//! The reentrant lock's calls: `lua/acquire.lua` and `lua/release.lua`.

use std::sync::LazyLock;

use super::{
    channel_release_args, first_send_flag, ms, Acquire, Call, Env, Protocol, Release, Script,
    CHANNEL_RELEASE_FIRST_SEND,
};
use crate::keys::LockKeys;

pub(super) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "shared_acquire.lua", "acquire.lua")));
pub(super) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "shared_release.lua", "release.lua")));

pub(super) struct Reentrant;

impl Protocol for Reentrant {
    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &ACQUIRE,
            keys: vec![&keys.lock, &keys.token, rec],
            args: vec![
                a.owner.into(),
                ms(a.lease).into(),
                ms(env.record_ttl).into(),
                first_send_flag(!a.resent),
                a.waiting.arg().into(),
            ],
            first_send: Some(3),
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a str, r: &Release<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &RELEASE,
            keys: vec![&keys.lock, &keys.channel, rec, &keys.token],
            args: channel_release_args(r, env),
            first_send: Some(CHANNEL_RELEASE_FIRST_SEND),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&ACQUIRE, &RELEASE]
    }
}
