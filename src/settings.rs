//! The client's settings, the lease of a hold, and the checks of durations
//! given by users. Imports nothing of the library but its errors.

use std::time::Duration;

use crate::error::{Error, Result};

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
