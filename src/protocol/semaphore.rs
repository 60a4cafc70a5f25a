//! The semaphore's calls: `lua/sem_acquire.lua`, `lua/sem_release.lua` and
//! `lua/sem_available.lua`. The number of permits and how many to take
//! come with the kind (a `Semaphore` per acquisition); the owner field is the permit id.

use std::sync::LazyLock;

use super::LockKeys;
use super::{lit, ms, name, Acquire, Call, Env, Protocol, Release, Script, UNLOCK_MESSAGE};
use crate::keys::Str;

static SEM_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new("acquire", lua!("shared.lua", "shared_rw.lua", "sem_acquire.lua")));
static SEM_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("release", lua!("shared.lua", "shared_rw.lua", "sem_release.lua")));
pub(crate) static SEM_AVAILABLE: LazyLock<Script> =
    LazyLock::new(|| Script::new("available_permits", lua!("shared.lua", "sem_available.lua")));

/// A semaphore of `total` permits; an acquisition takes `take` of them.
pub(super) struct Semaphore {
    pub(super) total: u32,
    pub(super) take: u32,
}

impl Protocol for Semaphore {
    fn label(&self) -> &'static str {
        "semaphore"
    }

    /// Permit ids are unique per acquisition, so the hash itself is the
    /// replay record: `rec` is not used. The request id says which attempt
    /// of the acquisition holds its grant (an attempt whose reply was lost
    /// is given back by a re-send in the background, while a later attempt
    /// may have taken the grant over).
    fn acquire<'a>(&self, keys: &'a LockKeys, _rec: &'a Str, a: &Acquire<'_>, _env: &Env) -> Call<'a> {
        let (total, take) = (self.total, self.take);
        Call {
            script: &SEM_ACQUIRE,
            keys: vec![&keys.lock],
            args: vec![
                name(a.owner),
                (take as i64).into(),
                (total as i64).into(),
                ms(a.lease).into(),
                lit(a.waiting.arg()),
                a.request.into(),
            ],
            first_send: None,
        }
    }

    fn release<'a>(&self, keys: &'a LockKeys, _rec: &'a Str, r: &Release<'_>, env: &Env) -> Call<'a> {
        Call {
            script: &SEM_RELEASE,
            keys: vec![&keys.lock, &keys.channel],
            args: vec![name(r.owner), lit(env.publish), lit(UNLOCK_MESSAGE)],
            first_send: None,
        }
    }

    fn scripts(&self) -> Vec<&'static Script> {
        vec![&SEM_ACQUIRE, &SEM_RELEASE, &SEM_AVAILABLE]
    }
}
