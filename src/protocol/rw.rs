//! The read-write lock's calls: `lua/rw_acquire.lua` and `lua/rw_release.lua`,
//! for either side (the field says which: a reader's ends in `:r`).

use std::sync::LazyLock;

use super::LockKeys;
use super::{
    channel_release_args, first_send_flag, lit, ms, name, Acquire, Call, Env, Protocol, Release, Script,
    CHANNEL_RELEASE_FIRST_SEND, UNLOCK_MESSAGE,
};
use crate::keys::{Str, READ_SUFFIX};

static RW_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "shared_rw.lua", "rw_acquire.lua")));
static RW_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "shared_rw.lua", "rw_release.lua")));
static RW_LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new("leave", lua!("shared.lua", "shared_rw.lua", "rw_leave.lua")));

/// One side of a read-write lock.
pub(super) struct Side {
    pub(super) read: bool,
}

impl Protocol for Side {
    fn label(&self) -> &'static str {
        if self.read {
            "read"
        } else {
            "write"
        }
    }

    /// A reader's token is the counter's value, which every reader shares.
    fn own_tokens(&self) -> bool {
        !self.read
    }

    /// A waiting writer on one master (`a.grant_lease`) leaves an ask
    /// beside its mark, so the release that frees the lock hands it the
    /// write hold (`lua/rw_acquire.lua`, ARGV[9] and ARGV[10]).
    fn acquire<'a>(&self, keys: &'a LockKeys, rec: &'a Str, a: &Acquire<'_>, env: &Env) -> Call<'a> {
        let mut args = vec![
            name(a.owner),
            ms(a.lease).into(),
            ms(env.record_ttl).into(),
            first_send_flag(!a.resent),
            lit(a.waiting.arg()),
            lit(if self.read { "read" } else { "write" }),
            ms(env.waiter_timeout).into(),
            a.request.into(),
        ];
        if let (false, true, Some(first)) = (self.read, a.waiting.waits(), a.grant_lease) {
            args.push(ms(first).into());
            args.push((a.attempt as i64).into());
        }
        Call {
            script: &RW_ACQUIRE,
            keys: vec![&keys.lock, &keys.token, rec],
            args,
            first_send: Some(3),
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &RW_RELEASE,
            // KEYS[5], the counter: a release that frees the lock may hand
            // it to a waiting writer.
            keys: vec![&keys.lock, &keys.channel, rec, &keys.writers, &keys.token],
            args: {
                // ARGV[8]: the read hold's identity (rw_release.lua).
                let mut args = channel_release_args(r, env);
                args.push(r.take.unwrap_or("").into());
                args
            },
            first_send: Some(CHANNEL_RELEASE_FIRST_SEND),
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&RW_ACQUIRE, &RW_RELEASE, &RW_LEAVE]
    }

    /// A waiting writer gives up: its mark goes, with its ask and a write
    /// hold a release handed to one of the `asked` requests that the wait
    /// never learned of. A mark whose ask names none of them is a later
    /// wait's of the same owner, and stays. A waiting reader's mark and
    /// pass go (`owner` is then its reader field; it asks for nothing).
    fn leave<'a>(
        &self,
        keys: &'a LockKeys,
        owner: &Str,
        _rec: Option<&'a Str>,
        asked: &[String],
        env: &Env,
    ) -> Option<Call<'a>> {
        Some(Call {
            script: &RW_LEAVE,
            keys: vec![&keys.lock, &keys.channel, &keys.writers, &keys.token],
            args: [name(owner), lit(env.publish), lit(UNLOCK_MESSAGE)]
                .into_iter()
                .chain(asked.iter().map(|id| name(&super::record(keys, id))))
                .collect(),
            first_send: None,
        })
    }

    /// A reader's field is its owner field followed by `:r`, so one owner's
    /// read and write holds of one lock are two fields (and two holds).
    fn field(&self, owner: &str) -> Option<String> {
        let base = owner.strip_suffix(READ_SUFFIX);
        match (self.read, base) {
            (true, None) => Some(format!("{owner}{READ_SUFFIX}")),
            (false, Some(base)) => Some(base.to_string()),
            _ => None,
        }
    }

    fn locked_by(&self) -> Option<fn(&str) -> bool> {
        Some(if self.read { is_reader } else { |f| !is_reader(f) })
    }

    /// Frees the lock only while this side holds it (a read side forced
    /// while a writer holds the lock leaves the writer alone).
    fn force_unlock<'a>(&self, keys: &'a LockKeys, rec: &'a Str, env: &Env) -> Call<'a> {
        super::force_unlock(keys, rec, env, if self.read { "read" } else { "write" })
    }
}

fn is_reader(field: &str) -> bool {
    field.ends_with(READ_SUFFIX)
}
