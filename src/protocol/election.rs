//! An election's calls: `lua/elect_proclaim.lua` (the leader says its
//! value) and `lua/elect_read.lua` (the leader, and the log its observers
//! follow). The leader itself is the holder of the election's lock, a
//! reentrant lock taken with that kind's calls.

use std::sync::LazyLock;
use std::time::Duration;

use fred::types::Value;

use super::{lit, ms, name, Call, Env, Script};
use crate::error::{Error, Result};
use crate::keys::Str;

static PROCLAIM: LazyLock<Script> = LazyLock::new(|| Script::new("proclaim", lua!("elect_proclaim.lua")));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new("leader", lua!("elect_read.lua")));

/// How long an election's log lives after its last entry: an observer away
/// longer than this catches up from the current leader alone.
pub(crate) const LOG_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The election's scripts, loaded at start-up.
pub(crate) fn scripts() -> [&'static Script; 2] {
    [&PROCLAIM, &READ]
}

/// The keys and channel of one election (see `keys.rs`).
pub(crate) struct ElectionKeys {
    pub(crate) lock: Str,
    pub(crate) channel: Str,
    pub(crate) log: Str,
}

/// `owner`, the holder of the election's lock under `term` (its hold's
/// token), says `value`.
pub(crate) fn proclaim<'a>(keys: &'a ElectionKeys, owner: &Str, term: u64, value: &str, env: &Env) -> Call<'a> {
    Call {
        script: &PROCLAIM,
        keys: vec![&keys.lock, &keys.log],
        args: vec![
            name(owner),
            value.into(),
            name(&keys.channel),
            lit(env.publish),
            ms(LOG_LIFETIME).into(),
            term.to_string().into(),
        ],
        first_send: None,
    }
}

/// The term of a proclaim's reply; `None` when the owner no longer holds
/// the lock.
pub(crate) fn proclaimed(reply: i64) -> Option<u64> {
    u64::try_from(reply).ok()
}

/// What to read of the log with the leader.
pub(crate) enum After<'a> {
    /// Nothing: the leader only.
    Nothing,
    /// The log's last entry id, to follow it from there.
    End,
    /// The log's entries after this id (and its last id).
    Id(&'a str),
}

/// Reads the leader (and the log, as `after` says).
pub(crate) fn read<'a>(keys: &'a ElectionKeys, after: After<'_>) -> Call<'a> {
    let arg = match after {
        After::Nothing => lit(""),
        After::End => lit("$"),
        After::Id(id) => id.into(),
    };
    Call {
        script: &READ,
        keys: vec![&keys.lock, &keys.log],
        args: vec![arg],
        first_send: None,
    }
}

/// One proclaimed leader: its term and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proclaimed {
    pub(crate) term: u64,
    pub(crate) value: String,
}

/// What [`read`] found.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) leader: Option<Proclaimed>,
    /// The log's last entry id.
    pub(crate) last: Option<String>,
    /// The log's entries after the id asked for: (id, leader).
    pub(crate) entries: Vec<(String, Proclaimed)>,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        v => v.as_string(),
    }
}

fn bad(what: &str) -> Error {
    Error::Redis {
        op: "leader",
        kind: crate::error::RedisErrorKind::Other,
        message: format!("unexpected reply of the election's read script: {what}"),
    }
}

/// Reads [`read`]'s reply.
pub(crate) fn snapshot(reply: Value) -> Result<Snapshot> {
    let Value::Array(parts) = reply else {
        return Err(bad("not a list"));
    };
    let [value, term, last, entries] = <[Value; 4]>::try_from(parts).map_err(|_| bad("not four parts"))?;
    let leader = match (text(&value), text(&term).and_then(|t| t.parse::<u64>().ok())) {
        (Some(value), Some(term)) => Some(Proclaimed { term, value }),
        _ => None,
    };
    let mut out = Snapshot {
        leader,
        last: text(&last),
        entries: Vec::new(),
    };
    let Value::Array(entries) = entries else {
        return Ok(out);
    };
    for entry in entries {
        let Value::Array(entry) = entry else {
            return Err(bad("a log entry is not a list"));
        };
        let [id, fields] = <[Value; 2]>::try_from(entry).map_err(|_| bad("a log entry is not a pair"))?;
        let Value::Array(fields) = fields else {
            return Err(bad("a log entry's fields are not a list"));
        };
        let (mut term, mut value) = (None, None);
        for pair in fields.chunks(2) {
            match (text(&pair[0]).as_deref(), pair.get(1)) {
                (Some("term"), Some(v)) => term = text(v).and_then(|t| t.parse::<u64>().ok()),
                (Some("value"), Some(v)) => value = text(v),
                _ => {}
            }
        }
        if let (Some(id), Some(term), Some(value)) = (text(&id), term, value) {
            out.entries.push((id, Proclaimed { term, value }));
        }
    }
    Ok(out)
}
