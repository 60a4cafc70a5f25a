//! A count-down latch's calls: `lua/latch.lua` (set, count down, read,
//! delete), one script with the operation as its first argument.

use std::sync::LazyLock;

use fred::types::Value;

use super::{lit, ms, name, Call, Env, Script};
use crate::keys::{Names, Str};

static LATCH: LazyLock<Script> = LazyLock::new(|| Script::new("latch", lua!("shared.lua", "latch.lua")));

/// The latch's script, loaded at start-up.
pub(crate) fn scripts() -> [&'static Script; 1] {
    [&LATCH]
}

/// What a call does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// Sets the count, if at zero or absent.
    Set(u64),
    /// One less.
    Down,
    Read,
    Delete,
}

/// The call `op` on the latch; `record`: the call's replay record (a
/// fresh request id under the name's `req_prefix`), so a re-sent count-down
/// or setting returns the first sending's reply instead of counting (or
/// setting) again.
pub(crate) fn call<'a>(keys: &'a Names, record: &'a Str, op: Op, env: &Env) -> Call<'a> {
    let (what, n) = match op {
        Op::Set(n) => ("set", n),
        Op::Down => ("down", 0),
        Op::Read => ("read", 0),
        Op::Delete => ("delete", 0),
    };
    Call {
        script: &LATCH,
        keys: vec![&keys.lock, &keys.token, record],
        args: vec![
            lit(what),
            Value::from(n as i64),
            name(&keys.channel),
            lit(env.publish),
            ms(env.record_ttl).into(),
            lit("1"),
        ],
        first_send: Some(5),
    }
}

/// A latch as `read` finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// No latch: never set, deleted, or its key lost.
    Absent,
    /// `count` left in generation `gen`; `zeroed`: the generation that
    /// reached zero before `gen` was set from it (0: none).
    Counting { count: u64, gen: u64, zeroed: u64 },
}

/// Reads a `read` reply (`[-1]` or `[count, gen, zeroed]`).
pub(crate) fn state(reply: &[i64]) -> State {
    match reply {
        [count, gen, zeroed] if *count >= 0 => State::Counting {
            count: *count as u64,
            gen: *gen as u64,
            zeroed: *zeroed as u64,
        },
        _ => State::Absent,
    }
}
