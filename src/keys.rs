//! Lock names and the Redis keys derived from them.
//!
//! A lock named `N`, with the client's key prefix `P`, lives at the hash
//! `P N`. Its companion keys and channel share the lock's cluster hash slot:
//!
//! | what | key |
//! |---|---|
//! | lock hash | `PN` |
//! | unlock channel | `lockwarden:{PN}:channel` |
//! | read-write lock: its waiting writers' channel | `lockwarden:{PN}:writers` |
//! | fencing-token counter | `lockwarden:{PN}:token` |
//! | replay record of one request | `lockwarden:{PN}:req:<request-id>` |
//! | reentrant lock, semaphore: clients whose waits sleep (list) | `lockwarden:{PN}:waiters` |
//! | reentrant lock, semaphore: what each client's wait asks of a direct grant (hash) | `lockwarden:{PN}:asks` |
//! | reentrant lock, semaphore: one client's wake channel | `lockwarden:{PN}:wake:<client-uuid>` |
//! | fair lock, fair semaphore: waiter queue (list) | `lockwarden:{PN}:queue` |
//! | fair lock, fair semaphore: waiter deadlines (sorted set) | `lockwarden:{PN}:timeouts` |
//! | fair lock, fair semaphore: what each waiter asks of a direct grant (hash) | `lockwarden:{PN}:asks` |
//! | fair lock, fair semaphore: one waiter's wake channel | `lockwarden:{PN}:wake:<wake-id>` (`<client-uuid>:w<n>`, or the owner field with a quorum) |
//! | semaphore: the number of permits stored with it (string) | `lockwarden:{PN}:permits` |
//! | election: leader changes (channel) | `lockwarden:{PN}:leader` |
//! | election: the log of proclaimed leaders (stream) | `lockwarden:{PN}:leaders` |
//!
//! An election's leader is the holder of the lock `PN` (a reentrant lock
//! hash); the value it proclaims is the hash's `:value` field.
//!
//! When `PN` already contains a hash tag (`orders{eu}`), braces are not
//! added; a `#` marks that form instead: `lockwarden:#orders{eu}:channel`
//! hashes on `eu` like the lock, and cannot be confused with the companions
//! of a lock whose whole name would otherwise produce the same text (`x` and
//! `{x}` get `lockwarden:{x}:…` and `lockwarden:#{x}:…`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use crate::error::{Error, Result};

/// The longest lock name accepted, in bytes (prefix included).
pub const MAX_NAME_LEN: usize = 512;

/// The fixed namespace of every companion key and channel.
pub const NAMESPACE: &str = "lockwarden";

/// The start of every companion key; no lock key may start with it.
pub(crate) const RESERVED: &str = "lockwarden:";

/// A key or channel name made once and sent many times: fred sends it
/// without a copy, where a `&str` argument is copied for every call.
pub(crate) type Str = fred::bytes_utils::Str;

/// Every Redis key and channel of one lock: the names alone (the kind
/// whose calls use them comes with `protocol::LockKeys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// The lock name as the user gave it (without prefix).
    pub name: String,
    /// The lock hash.
    pub lock: Str,
    pub channel: Str,
    /// Read-write lock: the channel its waiting writers listen on (its
    /// readers listen on `channel`), told only when the lock is free.
    pub writers: Str,
    pub token: Str,
    /// `lockwarden:{PN}:req:`; a request id is appended.
    pub req_prefix: String,
    /// Reentrant lock: the ids of clients whose waits sleep until an
    /// unlock wakes one (`lua/shared_wake.lua`).
    pub waiters: Str,
    pub queue: Str,
    pub timeouts: Str,
    /// Queued waiter -> "<deadline ms> <lease ms> <record ms> <request id>
    /// <attempt> <wake id>" (fair_release.lua).
    pub asks: Str,
    /// `lockwarden:{PN}:wake:`; a wake id (or an owner field) is appended.
    pub wake_prefix: Str,
    /// Semaphore: the number of permits stored with it (a string), which
    /// every handle counts against when it is there.
    pub permits: Str,
}

/// Whether a field of a lock hash is an owner's (a hold's reentry count):
/// every other field starts with `:`, but for the read-write lock's `mode`
/// (which keeps Redisson's read-write lock out, see `lua/rw_acquire.lua`;
/// Redisson's own hashes have one too).
pub(crate) fn is_owner_field(field: &str) -> bool {
    !field.starts_with(':') && field != "mode"
}

/// What a reader's field adds to its owner field.
pub(crate) const READ_SUFFIX: &str = ":r";

impl Names {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Names> {
        let invalid = |reason| Error::InvalidName {
            name: name.chars().take(64).collect(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("the name is empty"));
        }
        let full = format!("{prefix}{name}");
        if full.len() > MAX_NAME_LEN {
            return Err(invalid("prefix and name are longer than 512 bytes"));
        }
        if full.chars().any(char::is_control) {
            return Err(invalid("the name contains control characters"));
        }
        // Every companion key starts with the namespace: a lock key that
        // did too could be another lock's counter, queue or record.
        if full.starts_with(RESERVED) {
            return Err(invalid(
                "keys starting with \"lockwarden:\" (prefix included) are reserved for lockwarden's own keys",
            ));
        }
        let base = match hash_tag(&full) {
            Tag::Some => format!("{NAMESPACE}:#{full}"),
            Tag::None => format!("{NAMESPACE}:{{{full}}}"),
            Tag::Broken => return Err(invalid(
                "braces must form one non-empty {hash tag}: the lock's companion keys could not share its cluster slot",
            )),
        };
        Ok(Names {
            name: name.to_string(),
            lock: full.into(),
            channel: format!("{base}:channel").into(),
            writers: format!("{base}:writers").into(),
            token: format!("{base}:token").into(),
            req_prefix: format!("{base}:req:"),
            waiters: format!("{base}:waiters").into(),
            queue: format!("{base}:queue").into(),
            timeouts: format!("{base}:timeouts").into(),
            asks: format!("{base}:asks").into(),
            wake_prefix: format!("{base}:wake:").into(),
            permits: format!("{base}:permits").into(),
        })
    }
}

impl Names {
    /// An election's change channel and its log of proclaimed leaders
    /// (see the module docs), beside the lock's other companions.
    pub(crate) fn election(&self) -> (Str, Str) {
        let base = self.token.strip_suffix(":token").unwrap_or(&self.token);
        (format!("{base}:leader").into(), format!("{base}:leaders").into())
    }

    /// The same lock in Redisson's layout: its unlock channel is Redisson's
    /// `redisson_lock__channel:{PN}` and its fencing-token counter
    /// Redisson's `redisson_lock_token:{PN}` (`PN` in braces, or as it is
    /// when it has a brace already, as Redisson names them). Both share the
    /// lock's cluster slot, as the other companions do.
    pub(crate) fn redisson(mut self) -> Names {
        let tagged = self.redisson_tag();
        self.channel = format!("redisson_lock__channel:{tagged}").into();
        self.token = format!("redisson_lock_token:{tagged}").into();
        self
    }

    /// The same semaphore in Redisson's layout (`lua/rsem_shared.lua`):
    /// `permits` is Redisson's counter of free permits at the name,
    /// `lock` its sorted set of expiring permits `{PN}:timeout` (where
    /// holds live, so the watchdog renews them there), `channel` its
    /// `redisson_sc:{PN}`.
    pub(crate) fn redisson_semaphore(mut self) -> Names {
        self.permits = self.lock.clone();
        self.lock = self.redisson_timeouts();
        let tagged = redisson_tag_of(&self.permits);
        self.channel = format!("redisson_sc:{tagged}").into();
        self
    }

    /// The same read-write lock in Redisson's layout
    /// (`lua/rrw_shared.lua`): its channel is Redisson's
    /// `redisson_rwlock:{PN}`; the hash stays at the name and the write
    /// side's token counter stays lockwarden's (Redisson's read-write lock
    /// has none).
    pub(crate) fn redisson_rw(mut self) -> Names {
        let tagged = self.redisson_tag();
        self.channel = format!("redisson_rwlock:{tagged}").into();
        self
    }

    /// The same fair lock in Redisson's layout (`lua/rfair_shared.lua`):
    /// Redisson's channel and token counter (as `Names::redisson`), its
    /// waiters' list `redisson_lock_queue:{PN}` and times
    /// `redisson_lock_timeout:{PN}`, and its waiters' channels
    /// `redisson_lock__channel:{PN}:<owner field>` (the wake prefix).
    pub(crate) fn redisson_fair(self) -> Names {
        let mut names = self.redisson();
        let tagged = names.redisson_tag();
        names.queue = format!("redisson_lock_queue:{tagged}").into();
        names.timeouts = format!("redisson_lock_timeout:{tagged}").into();
        names.wake_prefix = format!("redisson_lock__channel:{tagged}:").into();
        names
    }

    /// Redisson's set of expiring permits for this name, were it a
    /// Redisson semaphore (`status` reads one there).
    pub(crate) fn redisson_timeouts(&self) -> Str {
        format!("{}:timeout", self.redisson_tag()).into()
    }

    /// The lock key in braces, or as it is when it has a brace already:
    /// the prefix of Redisson's companion keys.
    pub(crate) fn redisson_tag(&self) -> String {
        redisson_tag_of(&self.lock)
    }
}

/// `key` in braces, or as it is when it has a brace already: how Redisson
/// names the companion keys of `key`.
fn redisson_tag_of(key: &str) -> String {
    if key.contains('{') {
        key.to_string()
    } else {
        format!("{{{key}}}")
    }
}

/// The key of the Redisson semaphore whose set of expiring permits is
/// `key` (`{name}:timeout`, or `<name with a brace>:timeout`).
pub(crate) fn name_of_redisson_timeouts(key: &str) -> Option<String> {
    let tagged = key.strip_suffix(":timeout")?;
    match tagged.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        Some(inner) if !inner.contains(['{', '}']) => Some(inner.to_string()),
        _ if tagged.contains('{') && tagged.matches('{').count() == 1 && !tagged.starts_with('{') => {
            Some(tagged.to_string())
        }
        _ => None,
    }
}

/// A random 64-bit nonce, as 16 hex digits (written once).
static REQUEST_NONCE: LazyLock<String> = LazyLock::new(|| {
    let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
    format!("{:016x}", hi ^ lo)
});
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(0);

/// A request id: unique within this process (a counter) and across processes
/// (a random 64-bit nonce; shorter keys than a uuid).
pub(crate) fn fresh_request_id() -> String {
    let n = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
    let mut id = String::with_capacity(32);
    id.push_str(&REQUEST_NONCE);
    push_hex(&mut id, n);
    id
}

/// A fresh replay record key under `names` (its `req_prefix`, in the
/// name's slot), for a call that changes a count and must not change it
/// twice when it is sent again (`lua/shared.lua`'s `answer`).
pub(crate) fn record_key(names: &Names) -> Str {
    joined(&[&names.req_prefix, &fresh_request_id()]).into()
}

/// Appends `n` in lowercase hex without leading zeros (as `{:x}` writes it,
/// without the formatting machinery: request ids are made on every call).
fn push_hex(s: &mut String, n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = DIGITS[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    // Only ASCII hex digits were written.
    s.push_str(std::str::from_utf8(&buf[i..]).expect("hex digits"));
}

/// `parts` one after the other, in one allocation (`format!` grows its
/// string as it goes).
pub(crate) fn joined(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// The lock key whose fencing-token counter is `token_key`, if it is one.
pub(crate) fn lock_key_of_token(token_key: &str) -> Option<String> {
    let base = token_key
        .strip_prefix(NAMESPACE)?
        .strip_prefix(':')?
        .strip_suffix(":token")?;
    match base.strip_prefix('#') {
        Some(tagged) => Some(tagged.to_string()),
        None => Some(base.strip_prefix('{')?.strip_suffix('}')?.to_string()),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Tag {
    /// No brace at all: wrap the whole key in braces.
    None,
    /// An effective `{tag}` (Redis Cluster rule: first `{`, then the first `}`
    /// after it, with at least one byte between).
    Some,
    /// Braces that are not an effective tag: wrapping would change the slot.
    Broken,
}

fn hash_tag(key: &str) -> Tag {
    match key.find('{') {
        None if key.contains('}') => Tag::Broken,
        None => Tag::None,
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => Tag::Some,
            _ => Tag::Broken,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(key: &str) -> u16 {
        fred::util::redis_keyslot(key.as_bytes())
    }

    #[test]
    fn companions_share_the_lock_slot() {
        for (prefix, name) in [
            ("", "orders"),
            ("app:", "orders"),
            ("", "orders{eu}"),
            ("", "{eu}x"),
            ("p{t}:", "n"),
        ] {
            let k = Names::new(prefix, name).unwrap();
            assert_eq!(slot(&k.lock), slot(&k.channel), "{k:?}");
            assert_eq!(slot(&k.lock), slot(&k.token), "{k:?}");
            assert_eq!(slot(&k.lock), slot(&format!("{}abc", k.req_prefix)), "{k:?}");
            assert_eq!(slot(&k.lock), slot(&k.queue), "{k:?}");
            assert_eq!(slot(&k.lock), slot(&k.timeouts), "{k:?}");
            assert_eq!(slot(&k.lock), slot(&k.asks), "{k:?}");
            assert_eq!(slot(&k.lock), slot(&format!("{}u:1", k.wake_prefix)), "{k:?}");
        }
    }

    #[test]
    fn layout_is_documented_one() {
        let k = Names::new("", "orders").unwrap();
        assert_eq!(k.lock, "orders");
        assert_eq!(k.channel, "lockwarden:{orders}:channel");
        assert_eq!(k.token, "lockwarden:{orders}:token");
        let k = Names::new("", "a{eu}").unwrap();
        assert_eq!(k.channel, "lockwarden:#a{eu}:channel");
        // Distinct names never share companions.
        assert_ne!(Names::new("", "x").unwrap().token, Names::new("", "{x}").unwrap().token);
        assert_eq!(lock_key_of_token("lockwarden:{x}:token").as_deref(), Some("x"));
        assert_eq!(lock_key_of_token("lockwarden:#{x}:token").as_deref(), Some("{x}"));
        assert_eq!(lock_key_of_token("lockwarden:#a{eu}:token").as_deref(), Some("a{eu}"));
        assert_eq!(lock_key_of_token("other"), None);
        assert_eq!(name_of_redisson_timeouts("{jobs}:timeout").as_deref(), Some("jobs"));
        assert_eq!(name_of_redisson_timeouts("a{eu}:timeout").as_deref(), Some("a{eu}"));
        assert_eq!(name_of_redisson_timeouts("jobs:timeout"), None);
        assert_eq!(name_of_redisson_timeouts("{jobs}"), None);
    }

    #[test]
    fn request_ids_are_the_nonce_then_the_counter_in_hex() {
        for n in [0u64, 1, 9, 10, 15, 16, 255, 0xdead_beef, u64::MAX] {
            let mut s = String::from("x");
            push_hex(&mut s, n);
            assert_eq!(s, format!("x{n:x}"));
        }
        let (a, b) = (fresh_request_id(), fresh_request_id());
        assert_ne!(a, b);
        assert_eq!(a[..16], b[..16], "one nonce per process");
        assert!(a[..16].chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        let (na, nb) = (
            u64::from_str_radix(&a[16..], 16).unwrap(),
            u64::from_str_radix(&b[16..], 16).unwrap(),
        );
        assert!(nb > na, "{a} then {b}");
    }

    #[test]
    fn bad_names_are_rejected() {
        for bad in ["", "a{}b", "a}b", "a{b", "x\ny", "lockwarden:{x}:token", "lockwarden:x"] {
            assert!(matches!(Names::new("", bad), Err(Error::InvalidName { .. })), "{bad:?}");
        }
        assert!(Names::new("", &"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(Names::new("", &"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(Names::new("p:", &"x".repeat(MAX_NAME_LEN - 1)).is_err());
        assert!(Names::new("lockwarden", ":x").is_err(), "the prefix counts");
        assert!(Names::new("", "lockwardenx").is_ok());
    }
}
