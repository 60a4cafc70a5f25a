//! Read-only snapshots of locks, for tools and dashboards.

use std::time::Duration;

use fred::types::Value;

use crate::error::{Error, Result};

/// A consistent snapshot of one lock, read in one script call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's name (without the key prefix).
    pub name: String,
    /// The Redis key of the lock hash.
    pub key: String,
    /// Each holder's owner field (`<client-uuid>:<owner-id>`) and reentry
    /// count. A read-write lock's readers are listed with their own field,
    /// the owner field followed by `:r` (see [`LockStatus::readers`]).
    pub holders: Vec<(String, u64)>,
    /// The holder's remaining lease; `None` when free or when the key has no
    /// TTL (see [`LockStatus::leaked`]).
    pub remaining_lease: Option<Duration>,
    /// Held, but the key has no TTL: nothing will ever free it by itself.
    pub leaked: bool,
    /// The last fencing token handed out for this lock, if any.
    pub last_token: Option<u64>,
    /// Fair lock: waiting owner fields, next in line first.
    pub queue: Vec<String>,
    /// The kind of lock that holds the name (`None` while nobody does: a
    /// free name has no kind).
    pub kind: Option<LockKind>,
}

/// The kind of lock a name is held as (see [`LockStatus::kind`]); one name
/// is one kind while it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// [`Client::lock`](crate::Client::lock) (and a multi-lock's names).
    Reentrant,
    /// [`Client::fair_lock`](crate::Client::fair_lock).
    Fair,
    /// [`Client::rw_lock`](crate::Client::rw_lock).
    ReadWrite,
    /// [`Client::semaphore`](crate::Client::semaphore).
    Semaphore,
    /// [`Client::fair_semaphore`](crate::Client::fair_semaphore).
    FairSemaphore,
    /// A Redisson client's lock, fenced lock or fair lock (a hash without
    /// lockwarden's `:kind` whose holders' fields are
    /// `<uuid>:<thread id>`): lockwarden's acquires refuse it
    /// ([`Error::HeldByRedisson`]).
    Redisson,
    /// A Redisson client's read-write lock (a hash with Redisson's `mode`
    /// field and no `:kind`).
    RedissonReadWrite,
    /// A semaphore in Redisson's layout (a counter of free permits at the
    /// name): [`Client::redisson_semaphore`](crate::Client::redisson_semaphore)'s,
    /// or Redisson's `RSemaphore` / `RPermitExpirableSemaphore`. Its
    /// holders are the permits held by an id (Redisson's `RSemaphore`
    /// keeps no record of its holders).
    RedissonSemaphore,
}

impl LockKind {
    /// What the kind is called in messages: "lock", "fair lock",
    /// "read-write lock", "semaphore".
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Reentrant => "lock",
            LockKind::Fair => "fair lock",
            LockKind::ReadWrite => "read-write lock",
            LockKind::Semaphore => "semaphore",
            LockKind::FairSemaphore => "fair semaphore",
            LockKind::Redisson => "Redisson lock",
            LockKind::RedissonReadWrite => "Redisson read-write lock",
            LockKind::RedissonSemaphore => "Redisson semaphore",
        }
    }

    /// The kind a lock hash's `:kind` field names.
    fn from_field(v: &str) -> Option<LockKind> {
        Some(match v {
            "reentrant" => LockKind::Reentrant,
            "fair" => LockKind::Fair,
            "rw" => LockKind::ReadWrite,
            "semaphore" => LockKind::Semaphore,
            "fair-semaphore" => LockKind::FairSemaphore,
            "redisson-semaphore" => LockKind::RedissonSemaphore,
            _ => return None,
        })
    }
}

impl LockStatus {
    /// Whether anyone holds the lock.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// A read-write lock's readers: their owner fields and reentry counts.
    pub fn readers(&self) -> impl Iterator<Item = (&str, u64)> {
        self.holders
            .iter()
            .filter_map(|(f, c)| f.strip_suffix(crate::keys::READ_SUFFIX).map(|o| (o, *c)))
    }

    pub(crate) fn parse(name: &str, key: &str, raw: Value) -> Result<LockStatus> {
        let bad = || Error::Redis {
            op: "status",
            kind: crate::error::RedisErrorKind::Other,
            message: "unexpected status reply".into(),
        };
        let Value::Array(parts) = raw else { return Err(bad()) };
        let [holders, pttl, token, queue] = <[Value; 4]>::try_from(parts).map_err(|_| bad())?;
        let strings = |v: Value| -> Vec<String> {
            match v {
                Value::Array(items) => items.into_iter().filter_map(|i| i.into_string()).collect(),
                _ => Vec::new(),
            }
        };
        let flat = strings(holders);
        // Fields starting with ':' are the hold's own (its token, its
        // take's record, the waiters' mark), never an owner; nor is a
        // read-write lock's `mode`.
        let holders = flat
            .chunks(2)
            .filter(|p| crate::keys::is_owner_field(&p[0]))
            .filter_map(|p| Some((p[0].clone(), p.get(1)?.parse().ok()?)))
            .collect::<Vec<_>>();
        let field = |name: &str| flat.chunks(2).find(|p| p[0] == name).and_then(|p| p.get(1));
        let kind = match field(":kind") {
            Some(k) => LockKind::from_field(k),
            // No `:kind`: not lockwarden's. Redisson's layouts are named
            // (as `foreign` in `lua/shared.lua` tells them apart).
            None if field("mode").is_some() => Some(LockKind::RedissonReadWrite),
            None if holders.iter().any(|(f, _)| is_redisson_owner(f)) => Some(LockKind::Redisson),
            None => None,
        };
        let pttl = pttl.as_i64().unwrap_or(-2);
        Ok(LockStatus {
            name: name.to_string(),
            key: key.to_string(),
            leaked: !holders.is_empty() && pttl == -1,
            holders,
            remaining_lease: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            last_token: token.as_u64(),
            queue: strings(queue),
            kind,
        })
    }
}

/// Whether `field` is a Redisson holder's: `<uuid>:<thread id>` (Redisson),
/// or `<uuid>:<uuid>` (ports such as node-redisson), each uuid in its
/// 8-4-4-4-12 hex form (as `foreign` in `lua/shared.lua` reads them).
fn is_redisson_owner(field: &str) -> bool {
    let is_uuid = |s: &str| {
        let groups: Vec<&str> = s.split('-').collect();
        groups.len() == 5
            && groups
                .iter()
                .all(|g| !g.is_empty() && g.chars().all(|c| c.is_ascii_hexdigit()))
    };
    let Some((uuid, thread)) = field.split_once(':') else {
        return false;
    };
    is_uuid(uuid) && (is_uuid(thread) || (!thread.is_empty() && thread.chars().all(|c| c.is_ascii_digit())))
}

/// Redis-style glob match (`*`, `?`, `\\` escapes) of `text` against `pattern`.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some(pi);
                mark = ti;
                pi += 1;
            }
            Some('?') => {
                pi += 1;
                ti += 1;
            }
            Some('\\') if p.get(pi + 1) == Some(&t[ti]) => {
                pi += 2;
                ti += 1;
            }
            Some(c) if *c == t[ti] && *c != '\\' => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some(s) => {
                    pi = s + 1;
                    mark += 1;
                    ti = mark;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("job:*", "job:nightly"));
        assert!(!glob_match("job:*", "jobs"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*x*y", "axbxy"));
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("a\\*", "ab"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
    }
}
