//! The client's settings, the lease of a hold, and the checks of durations
//! given by users, and the checks of a client's settings. Imports nothing
//! of the library but its errors and the limits of names.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::{MAX_NAME_LEN, RESERVED};

/// The default watchdog lease, as in Redisson.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// The default per-call Redis timeout.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
/// The default time after which a fair-lock waiter that stopped refreshing
/// its place in the queue is evicted.
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(5);
/// The default per-node timeout of a quorum of masters (the command timeout
/// when several masters are given).
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(250);
/// The default time a wait without a deadline retries retryable errors
/// ([`ClientBuilder::retry_transient_for`](crate::ClientBuilder::retry_transient_for)).
pub const DEFAULT_RETRY_TRANSIENT_FOR: Duration = Duration::from_secs(10);
/// The default
/// [`ClientBuilder::wake_patience`](crate::ClientBuilder::wake_patience).
pub const DEFAULT_WAKE_PATIENCE: Duration = Duration::from_secs(1);
/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest accepted watchdog lease: renewing every lease/3 must leave room
/// for round trips.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(100);
/// Shortest accepted fixed lease: a hold is valid for its lease minus the
/// time acquiring took and a clock-drift allowance (1 % + 2 ms), so a shorter
/// lease could never be granted.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// Longest accepted lease, wait or timeout.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) prefix: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) metric_lock_names: bool,
    /// How long a wait without a deadline retries retryable errors.
    pub(crate) retry_transient_for: Duration,
    /// How long the first client in line for a reentrant lock sleeps at
    /// most before it looks again on its own (more per place behind it).
    pub(crate) wake_patience: Duration,
    /// How long a waiter's queue place or mark lasts without being
    /// refreshed (`fair_waiter_timeout`).
    pub(crate) waiter_timeout: Duration,
    /// How long a request's replay record lives on the server: long enough
    /// to outlive every retry of the call that wrote it (bounded by the
    /// command timeout), with a wide margin.
    pub(crate) record_ttl: Duration,
    /// Whether replicas or disks must confirm a write before it counts.
    pub(crate) confirmed_writes: bool,
    /// `Client::lock` takes its locks in Redisson's layout.
    pub(crate) redisson_compatible: bool,
}

/// Every setting of a [`ClientBuilder`](crate::ClientBuilder) but the
/// masters and TLS, as given: [`Options::check`] turns them into the
/// [`Settings`] the client runs with.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) prefix: String,
    pub(crate) watchdog_lease: Duration,
    /// `None`: the default for the number of masters.
    pub(crate) command_timeout: Option<Duration>,
    pub(crate) rejoin_delay: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) fair_waiter_timeout: Duration,
    pub(crate) metric_lock_names: bool,
    pub(crate) retry_transient_for: Duration,
    pub(crate) wake_patience: Duration,
    pub(crate) min_replicas: Option<(u32, Duration)>,
    pub(crate) min_aof: Option<AofConfirm>,
    pub(crate) redisson_compatible: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            prefix: String::new(),
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            command_timeout: None,
            rejoin_delay: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            fair_waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
            metric_lock_names: false,
            retry_transient_for: DEFAULT_RETRY_TRANSIENT_FOR,
            wake_patience: DEFAULT_WAKE_PATIENCE,
            min_replicas: None,
            min_aof: None,
            redisson_compatible: false,
        }
    }
}

/// `WAITAOF local replicas timeout`: what must have an acquisition or a
/// renewal on disk before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AofConfirm {
    /// The master's own append-only file must have it on disk.
    pub(crate) local: bool,
    /// At least this many replicas must have it on disk.
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl Options {
    /// The settings a client of `masters` masters runs with, or the first
    /// one out of range ([`Error::InvalidDuration`]) or that does not fit
    /// with the others ([`Error::Config`]).
    pub(crate) fn check(&self, masters: usize) -> Result<Settings> {
        let command_timeout = self.command_timeout.unwrap_or(if masters == 1 {
            DEFAULT_COMMAND_TIMEOUT
        } else {
            DEFAULT_NODE_TIMEOUT
        });
        check_duration("watchdog lease", self.watchdog_lease, MIN_WATCHDOG_LEASE)?;
        check_duration("command timeout", command_timeout, Duration::from_millis(1))?;
        if let Some(d) = self.rejoin_delay {
            check_duration("rejoin delay", d, Duration::from_millis(1))?;
        }
        check_duration("connect timeout", self.connect_timeout, Duration::from_millis(1))?;
        check_duration("retry time", self.retry_transient_for, Duration::ZERO)?;
        check_duration("wake patience", self.wake_patience, Duration::from_millis(1))?;
        let confirm_timeout = |what: &str, name: &'static str, timeout: Duration| {
            check_duration(name, timeout, Duration::from_millis(1))?;
            if timeout >= command_timeout || timeout >= self.watchdog_lease / 3 {
                return Err(Error::Config(format!(
                    "{what}: the timeout ({timeout:?}) must be below the command timeout \
                 ({command_timeout:?}) and a third of the watchdog lease ({:?})",
                    self.watchdog_lease / 3
                )));
            }
            Ok(())
        };
        if let Some((n, timeout)) = self.min_replicas {
            if n == 0 {
                return Err(Error::Config("min_replicas_acked: ask for at least one replica".into()));
            }
            confirm_timeout("min_replicas_acked", "replica timeout", timeout)?;
        }
        if let Some(aof) = self.min_aof {
            if !aof.local && aof.replicas == 0 {
                return Err(Error::Config(
                    "min_aof_fsynced: ask for the master's own file, at least one replica, or both".into(),
                ));
            }
            confirm_timeout("min_aof_fsynced", "aof timeout", aof.timeout)?;
        }
        check_duration(
            "fair waiter timeout",
            self.fair_waiter_timeout,
            Duration::from_millis(100),
        )?;
        if self.redisson_compatible && masters > 1 {
            return Err(Error::Config(
                "redisson_compatible: Redisson's lock lives on one deployment; a quorum of independent \
                 masters has no Redisson layout to share (use one server, Sentinel or a cluster)"
                    .into(),
            ));
        }
        if self.prefix.len() > MAX_NAME_LEN / 2 {
            return Err(Error::Config("the key prefix is longer than 256 bytes".into()));
        }
        if self.prefix.starts_with(RESERVED) {
            return Err(Error::Config(format!(
                "the key prefix {:?} starts with {:?}, which is reserved for lockwarden's own keys",
                self.prefix, RESERVED
            )));
        }
        Ok(Settings {
            prefix: self.prefix.clone(),
            watchdog_lease: self.watchdog_lease,
            command_timeout,
            metric_lock_names: self.metric_lock_names,
            retry_transient_for: self.retry_transient_for,
            wake_patience: self.wake_patience,
            waiter_timeout: self.fair_waiter_timeout,
            record_ttl: (command_timeout * 4).max(Duration::from_secs(1)),
            confirmed_writes: self.min_replicas.is_some() || self.min_aof.is_some(),
            redisson_compatible: self.redisson_compatible,
        })
    }
}

/// How long a hold lasts without being renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Lease {
    /// The client's watchdog lease (30 s by default), renewed every lease/3
    /// until the guard is released or dropped.
    #[default]
    Watchdog,
    /// A fixed lease, never renewed: the lock frees itself when it runs out.
    Fixed(Duration),
}

impl From<Duration> for Lease {
    fn from(d: Duration) -> Lease {
        Lease::Fixed(d)
    }
}

impl From<Option<Duration>> for Lease {
    /// `None` is the watchdog, `Some(d)` a fixed lease.
    fn from(d: Option<Duration>) -> Lease {
        d.map_or(Lease::Watchdog, Lease::Fixed)
    }
}

pub(crate) fn check_duration(what: &'static str, value: Duration, min: Duration) -> Result<()> {
    if value < min {
        // The minimums in use, named in the message.
        let reason = match min.as_millis() {
            1 => "below the minimum of 1 ms",
            10 => "below the minimum of 10 ms",
            100 => "below the minimum of 100 ms",
            _ => "below the minimum",
        };
        return Err(Error::InvalidDuration { what, value, reason });
    }
    if value > MAX_DURATION {
        return Err(Error::InvalidDuration {
            what,
            value,
            reason: "above the maximum of 30 days",
        });
    }
    Ok(())
}

pub(crate) fn check_lease(value: Duration) -> Result<()> {
    check_duration("lease", value, MIN_LEASE)
}

pub(crate) fn check_wait(value: Duration) -> Result<()> {
    if value > MAX_DURATION {
        return Err(Error::InvalidDuration {
            what: "wait",
            value,
            reason: "above the maximum of 30 days",
        });
    }
    Ok(())
}
