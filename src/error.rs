//! The error type shared by every lockwarden operation.

use std::time::Duration;

/// What went wrong in a lockwarden operation.
///
/// Contention is not an error: [`Lock::try_lock`](crate::Lock::try_lock)
/// returns `Ok(None)` when the lock stays held by someone else.
/// [`Error::is_retryable`] says whether trying the same call again can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is not held by this owner: it was never taken, its lease ran
    /// out, it was force-unlocked, or it belongs to someone else. Nothing was
    /// changed in Redis.
    #[error("lock {name:?} is not held by this owner (never taken, lease ran out, or force-unlocked)")]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The key at the lock's name (or one of its companion keys) holds a value
    /// of another type; it was left untouched.
    #[error("key {key:?} holds a value that is not a lockwarden lock ({found}); it was left untouched")]
    WrongType {
        /// The Redis key.
        key: String,
        /// What the server reported.
        found: String,
    },
    /// The lock name cannot be used.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name (truncated to 64 characters).
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A duration argument is out of range.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidDuration {
        /// Which argument.
        what: &'static str,
        /// The rejected value.
        value: Duration,
        /// The accepted range.
        reason: &'static str,
    },
    /// The client configuration is invalid (bad URL, bad combination of settings).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Redis could not be reached, the connection broke mid-call, or the
    /// command could not be sent again after a cluster redirect. Whether a
    /// script that was sent ran is unknown; lockwarden's own retries are
    /// safe to repeat (request records).
    #[error("redis connection failed during {op}: {message}")]
    Connection {
        /// The operation that failed.
        op: &'static str,
        /// The client library's description.
        message: String,
    },
    /// A Redis command did not answer within the command timeout. The command
    /// may still have run; lockwarden undoes or bounds its effect (see the
    /// operation's documentation).
    #[error("redis did not answer {op} within {timeout:?}")]
    Timeout {
        /// The operation that timed out.
        op: &'static str,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// Fewer than a majority of the masters of a quorum answered the
    /// operation (the others failed or are waiting out a delayed rejoin).
    /// Nothing is held; what a minority may have done is undone in the
    /// background or bounded by the lease.
    #[error("{op} reached {reached} of {masters} masters, {needed} needed (a majority); last failure: {last}")]
    QuorumNotReached {
        /// The operation.
        op: &'static str,
        /// Masters that answered.
        reached: usize,
        /// Masters needed (a majority).
        needed: usize,
        /// Masters configured.
        masters: usize,
        /// The last failure seen, as text.
        last: String,
    },
    /// The server refused the command.
    #[error("redis refused {op} ({kind:?}): {message}")]
    Redis {
        /// The operation that failed.
        op: &'static str,
        /// The class of refusal.
        kind: RedisErrorKind,
        /// The server's message.
        message: String,
    },
}

/// The class of a server-side refusal, see [`Error::Redis`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisErrorKind {
    /// The ACL user may not run the command or touch the key (`NOPERM`).
    NoPermission,
    /// Authentication failed (`NOAUTH`, `WRONGPASS`).
    Auth,
    /// The server is a read-only replica (`READONLY`).
    ReadOnly,
    /// The server is out of memory (`OOM`).
    OutOfMemory,
    /// The server is busy running a script or loading its data (`BUSY`, `LOADING`).
    Busy,
    /// A cluster routing problem (`MOVED`, `ASK`, `CLUSTERDOWN`, `CROSSSLOT`).
    Cluster,
    /// Anything else.
    Other,
}

impl Error {
    /// Whether the same call may succeed if tried again later.
    ///
    /// True for connection problems, timeouts and transient server states
    /// (read-only replica during a failover, out of memory, busy, cluster
    /// changes); false for bad input, wrong types, permissions and
    /// [`Error::NotHeld`].
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Connection { .. } | Error::Timeout { .. } | Error::QuorumNotReached { .. } => true,
            Error::Redis { kind, .. } => matches!(
                kind,
                RedisErrorKind::ReadOnly | RedisErrorKind::OutOfMemory | RedisErrorKind::Busy | RedisErrorKind::Cluster
            ),
            _ => false,
        }
    }

    /// Whether the failed command may have run on the server anyway (a reply
    /// lost to a broken connection or a timeout).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::Connection { .. } | Error::Timeout { .. } | Error::QuorumNotReached { .. }
        )
    }

    pub(crate) fn from_redis(op: &'static str, key: &str, timeout: Duration, e: fred::error::Error) -> Error {
        use fred::error::ErrorKind as K;
        let details = e.details().to_string();
        if let Some(found) = details.strip_prefix("WRONGTYPE") {
            let found = found.trim();
            let found = if found.is_empty() {
                "another type".to_string()
            } else {
                found.to_string()
            };
            return Error::WrongType {
                key: key.to_string(),
                found,
            };
        }
        // fred's "Failed to route command." means no connection was available:
        // the command was not written.
        if details.starts_with("Failed to route command") {
            return Error::Connection { op, message: details };
        }
        // fred gave up writing the command again: after a cluster redirect
        // (MOVED, ASK) the resend counts as a write attempt, and lockwarden
        // allows one; after a broken connection the first write may have
        // run. Either way the outcome is unknown, as for a broken connection.
        if details.starts_with("Too many failed write attempts") {
            return Error::Connection {
                op,
                message: format!("{details} (a cluster redirect or a broken connection)"),
            };
        }
        let kind = match e.kind() {
            K::IO | K::Canceled | K::Routing => return Error::Connection { op, message: details },
            K::Timeout => return Error::Timeout { op, timeout },
            K::Config | K::Url => return Error::Config(details),
            K::Auth => RedisErrorKind::Auth,
            K::Cluster => RedisErrorKind::Cluster,
            _ => classify(&details),
        };
        Error::Redis {
            op,
            kind,
            message: details,
        }
    }
}

fn classify(details: &str) -> RedisErrorKind {
    let code = details.split_whitespace().next().unwrap_or("");
    match code {
        "NOPERM" => RedisErrorKind::NoPermission,
        "NOAUTH" | "WRONGPASS" => RedisErrorKind::Auth,
        "READONLY" => RedisErrorKind::ReadOnly,
        "OOM" => RedisErrorKind::OutOfMemory,
        "BUSY" | "LOADING" => RedisErrorKind::Busy,
        "MOVED" | "ASK" | "CLUSTERDOWN" | "CROSSSLOT" | "TRYAGAIN" => RedisErrorKind::Cluster,
        _ => RedisErrorKind::Other,
    }
}

/// Shorthand for `Result<T, lockwarden::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
