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
    #[error("lock {name:?} is not held by this owner (never taken, lease ran out, or force-unlocked): take it again before touching what it protects")]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The write side of a read-write lock was asked for by an owner that
    /// holds its read side (and not its write side): the write lock waits
    /// for every reader to leave, this owner included, so it would wait
    /// forever. Release the read holds first. Nothing was changed in Redis.
    #[error("the write lock of {key:?} was asked for by an owner holding its read lock, so it would wait for itself: release the read lock first")]
    WouldDeadlock {
        /// The lock's key.
        key: String,
    },
    /// The key at the lock's name (or one of its companion keys) holds a value
    /// of another type; it was left untouched.
    #[error("key {key:?} holds a value that is not a lockwarden lock ({found}) and was left untouched: use a name no other program writes")]
    WrongType {
        /// The Redis key.
        key: String,
        /// What the server reported.
        found: String,
    },
    /// The name is in use by another kind of lockwarden lock (for example
    /// a semaphore asked for while a reentrant lock holds the name): one
    /// name is one kind while it is held. Nothing was changed in Redis;
    /// once the other kind's holders are gone the name is free for any
    /// kind.
    #[error("lock {key:?} is held as a {found}, which this handle's kind cannot share, and was left untouched: use one kind per name")]
    WrongKind {
        /// The lock's key.
        key: String,
        /// The kind found: "reentrant lock", "fair lock", "read-write
        /// lock" or "semaphore".
        found: String,
    },
    /// The name is held by a Redisson client (a Java service, or a port of
    /// Redisson), in a layout lockwarden recognises: Redisson's lock, fenced
    /// lock or fair lock (a hash with a `<uuid>:<thread id>` field), or its
    /// read-write lock (a hash with a `mode` field). lockwarden never takes
    /// a name a Redisson client holds and never writes into its keys:
    /// nothing was changed in Redis. The README's "Beside Redisson" says
    /// which combinations are safe.
    #[error("lock {key:?} is held by a Redisson client ({found}) and was left untouched: try again once the Redisson holder has released it, or give the two services different names")]
    HeldByRedisson {
        /// The lock's key.
        key: String,
        /// The layout found: "a Redisson lock" or "a Redisson read-write
        /// lock".
        found: String,
    },
    /// A count-down latch has no count: it was never set, it was deleted,
    /// or its key was lost (FLUSHALL, eviction, a restart without
    /// persistence) while it counted. A waiter that saw it counting gets
    /// this rather than being let through: a lost count is never taken for
    /// zero. Nothing was changed in Redis.
    #[error("count-down latch {name:?} has no count (never set, deleted, or its key was lost while it counted): it is not taken for zero; set it again with try_set_count")]
    LatchGone {
        /// The latch's name.
        name: String,
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
    #[error(
        "redis{} did not answer {op} within {timeout:?}: the server is down, unreachable or overloaded (retry, or \
         raise the timeout)",
        at(server)
    )]
    Timeout {
        /// The operation that timed out.
        op: &'static str,
        /// The server that did not answer, as its URL without credentials
        /// (empty when the operation had no one server).
        server: String,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// Fewer than a majority of the masters of a quorum answered the
    /// operation (the others failed or are waiting out a delayed rejoin).
    /// Nothing is held; what a minority may have done is undone in the
    /// background or bounded by the lease.
    #[error("{op} reached {reached} of {masters} masters, {needed} needed (a majority); failures: {last}")]
    QuorumNotReached {
        /// The operation.
        op: &'static str,
        /// Masters that answered.
        reached: usize,
        /// Masters needed (a majority).
        needed: usize,
        /// Masters configured.
        masters: usize,
        /// Why the other masters did not count: each distinct failure
        /// seen, as text, separated by "; ".
        last: String,
    },
    /// The TLS handshake failed: the server's certificate is not signed by
    /// a trusted CA, has expired or does not name the URL's host, or the
    /// server refused the client's certificate. The message names the
    /// server, what was wrong and what to do. Not retryable: the configuration (CA,
    /// certificate, URL) has to change.
    #[error("TLS handshake failed during {op}: {message}")]
    Tls {
        /// The operation that failed.
        op: &'static str,
        /// What rustls or the server said.
        message: String,
    },
    /// The server refused the command.
    #[error("redis refused {op}: {message}{}", kind.fix())]
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
    /// A replica that lost its master and serves no stale data
    /// (`MASTERDOWN`): a failover or a broken link, usually passing.
    MasterDown,
    /// Fewer replicas than
    /// [`ClientBuilder::min_replicas_acked`](crate::ClientBuilder::min_replicas_acked)
    /// asks acknowledged the write within its timeout (`WAIT`). An
    /// acquisition was given back; a renewal did not count.
    NotReplicated,
    /// The master's append-only file, or fewer replicas' than
    /// [`ClientBuilder::min_aof_fsynced`](crate::ClientBuilder::min_aof_fsynced)
    /// asks, had the write on disk within its timeout (`WAITAOF`). An
    /// acquisition was given back; a renewal did not count.
    NotPersisted,
    /// A cluster routing problem (`MOVED`, `ASK`, `CLUSTERDOWN`, `CROSSSLOT`,
    /// `TRYAGAIN`).
    Cluster,
    /// Anything else.
    Other,
}

impl RedisErrorKind {
    /// What to do about it, as the end of a sentence ("" when nothing is
    /// to be done but to retry).
    fn fix(self) -> &'static str {
        match self {
            RedisErrorKind::NoPermission => {
                " (give the ACL user lockwarden's commands, its keys and the channels `&lockwarden:*`; see the \
                 README's ACL note)"
            }
            RedisErrorKind::Auth => " (check the user name and password in the URL)",
            RedisErrorKind::ReadOnly => " (the URL names a replica: give the master, or use Sentinel)",
            RedisErrorKind::OutOfMemory => " (free memory on the server or raise its maxmemory)",
            RedisErrorKind::Busy => " (a script or a load is running on the server: retry)",
            RedisErrorKind::MasterDown => " (a failover is under way: retry)",
            RedisErrorKind::NotReplicated | RedisErrorKind::NotPersisted => {
                " (check the replicas, or raise the confirmation timeout)"
            }
            RedisErrorKind::Cluster => " (the cluster is changing its slots: retry)",
            RedisErrorKind::Other => "",
        }
    }
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
                RedisErrorKind::ReadOnly
                    | RedisErrorKind::OutOfMemory
                    | RedisErrorKind::Busy
                    | RedisErrorKind::MasterDown
                    | RedisErrorKind::NotReplicated
                    | RedisErrorKind::NotPersisted
                    | RedisErrorKind::Cluster
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

    /// The error of a script call on `keys`. A script names the key of a
    /// wrong type by its place in KEYS (`WRONGTYPE <type> <i>`, see
    /// `lua/shared.lua`); the server's own WRONGTYPE names none, and is put
    /// on the first key.
    pub(crate) fn from_script(
        op: &'static str,
        keys: &[&fred::bytes_utils::Str],
        timeout: Duration,
        e: fred::error::Error,
    ) -> Error {
        let first = keys.first().map_or("", |k| &k[..]);
        if e.details().starts_with("DEADLOCK") {
            return Error::WouldDeadlock { key: first.to_string() };
        }
        if let Some(found) = e.details().strip_prefix("WRONGKIND ") {
            let found = match found.trim() {
                "reentrant" => "reentrant lock",
                "fair" => "fair lock",
                "rw" => "read-write lock",
                "semaphore" => "semaphore",
                "latch" => "count-down latch",
                "fair-semaphore" => "fair semaphore",
                other => other,
            };
            return Error::WrongKind {
                key: first.to_string(),
                found: found.to_string(),
            };
        }
        if let Some(rest) = e.details().strip_prefix("WRONGTYPE ") {
            let mut words = rest.split_whitespace();
            if let (Some(found), Some(i), None) = (words.next(), words.next(), words.next()) {
                if let Some(key) = i.parse::<usize>().ok().and_then(|i| keys.get(i.checked_sub(1)?)) {
                    let redisson = match found {
                        "redisson-lock" => Some("a Redisson lock"),
                        "redisson-rwlock" => Some("a Redisson read-write lock"),
                        _ => None,
                    };
                    if let Some(found) = redisson {
                        return Error::HeldByRedisson {
                            key: key.to_string(),
                            found: found.to_string(),
                        };
                    }
                    let found = match found {
                        "foreign-hash" => "a hash lockwarden did not write",
                        other => other,
                    };
                    return Error::WrongType {
                        key: key.to_string(),
                        found: found.to_string(),
                    };
                }
            }
        }
        Error::from_redis(op, first, timeout, e)
    }

    pub(crate) fn from_redis(op: &'static str, key: &str, timeout: Duration, e: fred::error::Error) -> Error {
        use fred::error::ErrorKind as K;
        let details = e.details().to_string();
        if let Some(found) = details.strip_prefix("WRONGTYPE") {
            // The server's own wording ("Operation against a key holding
            // the wrong kind of value") names no type.
            let found = match found.split_whitespace().next() {
                Some(word) if word.chars().all(|c| c.is_ascii_lowercase()) => word.to_string(),
                _ => "another type".to_string(),
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
        if is_tls_failure(&e) {
            return Error::Tls {
                op,
                message: readable_tls(&details),
            };
        }
        let kind = match e.kind() {
            K::IO | K::Canceled | K::Routing => {
                return Error::Connection {
                    op,
                    message: readable_io(&details),
                }
            }
            K::Timeout => {
                return Error::Timeout {
                    op,
                    server: String::new(),
                    timeout,
                }
            }
            K::Config | K::Url => return Error::Config(details),
            K::Auth => RedisErrorKind::Auth,
            K::Cluster => RedisErrorKind::Cluster,
            _ => classify(&details),
        };
        let message = if key.is_empty() {
            details
        } else {
            format!("{details} (key {key:?})")
        };
        Error::Redis { op, kind, message }
    }
}

/// " at <server>", or nothing for no server.
fn at(server: &str) -> String {
    if server.is_empty() {
        String::new()
    } else {
        format!(" at {server}")
    }
}

/// An I/O error as fred words it, readable: the `Debug` form of an OS
/// error (`Os { code: 111, kind: ConnectionRefused, message: "Connection
/// refused" }`) becomes its message and code ("Connection refused (os
/// error 111)"); anything else is kept.
fn readable_io(details: &str) -> String {
    let Some(rest) = details.strip_prefix("Os { code: ") else {
        return details.to_string();
    };
    let code = rest.split(',').next().unwrap_or("").trim();
    match rest.split_once("message: \"").and_then(|(_, m)| m.split_once('"')) {
        Some((message, _)) => format!("{message} (os error {code})"),
        None => details.to_string(),
    }
}

/// A failed TLS handshake in one sentence with its fix, from rustls's
/// `Debug` wording as fred passes it on (`Custom { kind: InvalidData,
/// error: InvalidCertificate(UnknownIssuer) }`); a wording not known here is
/// kept as it is.
fn readable_tls(details: &str) -> String {
    let has = |s: &str| details.contains(s);
    let text = if has("CaUsedAsEndEntity") {
        "the server presents a CA certificate as its own (as `openssl req -x509` makes them), which is trusted \
         only when given as the CA: give exactly that certificate (tls_ca_pem, --tls-ca) to pin it"
    } else if has("UnknownIssuer") {
        "the server's certificate is not signed by a CA the client trusts: give the CA that issued it \
         (tls_ca_pem, --tls-ca)"
    } else if has("NotValidForName") {
        return name_mismatch(details);
    } else if has("NotValidYet") {
        "the server's certificate is not valid yet: check its start date and the clocks"
    } else if has("Expired") {
        "the server's certificate has expired: renew it"
    } else if has("BadSignature") || has("InvalidSignatureForPublicKey") {
        "the server's certificate has a signature that does not verify: reissue it"
    } else if has("CertificateRequired") {
        "the server requires a client certificate: give one (tls_client_cert_pem, --tls-cert and --tls-key)"
    } else if has("UnknownCA") || has("BadCertificate") || has("AccessDenied") {
        "the server refused the client certificate: it must be signed by a CA the server trusts (its \
         tls-ca-cert-file)"
    } else if has("InvalidContentType") || has("corrupt message") || has("InvalidMessage") {
        "the server did not answer in TLS: if its port is a plain one, use redis:// instead of rediss://"
    } else {
        return details.to_string();
    };
    text.to_string()
}

/// "the server's certificate does not name localhost (it names
/// 127.0.0.1)", from `NotValidForNameContext { expected:
/// DnsName("localhost"), presented: ["IpAddress(127.0.0.1)"] }`.
fn name_mismatch(details: &str) -> String {
    // `DnsName("localhost")`, `IpAddress(V4(Ipv4Addr([127, 0, 0, 1])))`,
    // `"DnsName(\"other.example\")"`: the name inside.
    let unwrap = |s: &str| -> String {
        if let Some((_, rest)) = s.split_once("Ipv4Addr([") {
            let octets = rest.split(']').next().unwrap_or("");
            return octets.split(',').map(str::trim).collect::<Vec<_>>().join(".");
        }
        let s = s.replace(['"', '\\'], "");
        let inner = s.rsplit_once('(').map_or(s.as_str(), |(_, rest)| rest);
        inner.trim_end_matches(')').trim().to_string()
    };
    let expected = details
        .split_once("expected: ")
        .and_then(|(_, rest)| rest.split_once(", presented").map(|(e, _)| unwrap(e)));
    let presented: Vec<String> = details
        .split_once("presented: [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list.split(", ").filter(|n| !n.is_empty()).map(unwrap).collect())
        .unwrap_or_default();
    let host = expected.map_or("the URL's host".to_string(), |h| h.to_string());
    let names = if presented.is_empty() {
        String::new()
    } else {
        format!(" (it names {})", presented.join(", "))
    };
    format!(
        "the server's certificate does not name {host}{names}: connect by a name it lists, or reissue it for {host}"
    )
}

/// A failed TLS handshake: fred's TLS errors, and rustls's verdicts, which
/// reach fred as I/O errors.
fn is_tls_failure(e: &fred::error::Error) -> bool {
    #[cfg(feature = "tls")]
    if matches!(e.kind(), fred::error::ErrorKind::Tls) {
        return true;
    }
    let d = e.details();
    d.contains("InvalidCertificate") || d.contains("invalid peer certificate") || d.contains("CertificateRequired")
}

fn classify(details: &str) -> RedisErrorKind {
    let code = details.split_whitespace().next().unwrap_or("");
    match code {
        "NOPERM" => RedisErrorKind::NoPermission,
        "NOAUTH" | "WRONGPASS" => RedisErrorKind::Auth,
        "READONLY" => RedisErrorKind::ReadOnly,
        "OOM" => RedisErrorKind::OutOfMemory,
        "BUSY" | "LOADING" => RedisErrorKind::Busy,
        "MASTERDOWN" => RedisErrorKind::MasterDown,
        "MOVED" | "ASK" | "CLUSTERDOWN" | "CROSSSLOT" | "TRYAGAIN" => RedisErrorKind::Cluster,
        // An ACL refusal inside a script is worded "ERR The user executing
        // the script can't ..." (Redis 7.0); elsewhere NOPERM may follow
        // another word.
        _ if details.contains("NOPERM")
            || details.contains("user executing the script can't")
            || details.contains("no permissions to") =>
        {
            RedisErrorKind::NoPermission
        }
        _ => RedisErrorKind::Other,
    }
}

/// Shorthand for `Result<T, lockwarden::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::readable_io;

    #[test]
    fn os_errors_read_as_sentences() {
        assert_eq!(
            readable_io("Os { code: 111, kind: ConnectionRefused, message: \"Connection refused\" }"),
            "Connection refused (os error 111)"
        );
        assert_eq!(readable_io("Connection closed."), "Connection closed.");
    }

    #[test]
    fn tls_failures_read_as_sentences() {
        use super::readable_tls;
        assert_eq!(
            readable_tls(
                "Custom { kind: InvalidData, error: InvalidCertificate(NotValidForNameContext { expected: \
                 DnsName(\"localhost\"), presented: [\"IpAddress(127.0.0.1)\"] }) }"
            ),
            "the server's certificate does not name localhost (it names 127.0.0.1): connect by a name it \
             lists, or reissue it for localhost"
        );
        assert_eq!(
            readable_tls(
                "InvalidCertificate(NotValidForNameContext { expected: IpAddress(V4(Ipv4Addr([127, 0, 0, 1]))), \
                 presented: [\"DnsName(\\\"other.example\\\")\"] })"
            ),
            "the server's certificate does not name 127.0.0.1 (it names other.example): connect by a name it \
             lists, or reissue it for 127.0.0.1"
        );
        assert!(readable_tls("InvalidCertificate(UnknownIssuer)").contains("not signed by a CA the client trusts"));
        assert_eq!(readable_tls("something new"), "something new");
    }
}
