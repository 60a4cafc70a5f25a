//! Distributed reentrant locks over Redis, in the style of Redisson's lock
//! family. A lock is a Redis hash with a lease that a watchdog keeps alive
//! while you hold it; waiters sleep until an unlock message wakes them.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn demo() -> lockwarden::Result<()> {
//! let client = lockwarden::Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("invoices")?;
//!
//! // Wait as long as it takes; the watchdog keeps a 30 s lease alive.
//! let guard = lock.lock().await?;
//! println!("fencing token {}", guard.token());
//! guard.unlock().await?;
//!
//! // Wait at most 2 s, hold for at most 10 s (never renewed).
//! if let Some(guard) = lock.try_lock(Duration::from_secs(2), Duration::from_secs(10)).await? {
//!     guard.unlock().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Which lock when
//!
//! - [`Lock::lock`] / [`Lock::try_lock`] with [`Lease::Watchdog`]: the
//!   default. The hold lasts until you unlock or drop the guard, or until
//!   your process stops renewing it (crash, partition): then the lease ends
//!   it within 30 s (configurable with [`ClientBuilder::watchdog_lease`]).
//! - A fixed lease (`try_lock(wait, Duration)`): when the critical section
//!   has a known upper bound and you want the lock gone after it whatever
//!   happens. It is never renewed.
//! - [`Client::fair_lock`]: the same API, but waiters get the lock in the
//!   order they asked for it and an unlock wakes only the next waiter. Use
//!   it when starvation matters (long queues, a hot lock some callers keep
//!   re-taking). It costs a little more per handoff. A queued waiter
//!   refreshes its place every third of the waiter timeout
//!   ([`ClientBuilder::fair_waiter_timeout`], 5 s); one that stops
//!   refreshing (its process died) is evicted after it. A waiter that gives
//!   up (timeout, dropped future) leaves the queue at once.
//! - [`Client::rw_lock`]: a [`RwLock`], many readers or one writer, each
//!   side a [`Lock`]. Each hold has its own lease; waiting writers hold
//!   new readers back, and never a holder's lease; the readers that waited
//!   for a writer go in before the next one.
//! - [`Client::semaphore`]: a [`Semaphore`] of N permits whose holds expire
//!   ([`Permit`]); one server, Sentinel or Cluster only.
//! - [`Client::multi_lock`]: a [`MultiLock`], several names taken together
//!   or not at all, without deadlock between callers.
//! - Reentrancy is per owner: by default the current tokio task. Share a
//!   hold across tasks with [`LockGuard::owner`] and [`Lock::with_owner`].
//!
//! # Guarantees
//!
//! - At most one owner holds a lock at a time, *as long as leases are
//!   honoured* (see below). Reentrant acquisitions need as many releases.
//! - No acquire or release is applied twice, even when a reply is lost and
//!   the call is retried: each carries a request id that the scripts record.
//! - Every fresh hold gets a fencing token strictly greater than all earlier
//!   tokens of that lock ([`LockGuard::token`]); re-entries share it. A
//!   token counter lost to a flush, a restart without persistence or
//!   eviction restarts at the server's clock in microseconds, above every
//!   earlier token, unless that clock now reads earlier than when the lost
//!   counter started (a clock set back).
//! - Retryable failures (Redis unreachable for a moment, a failover) do not
//!   end a wait: `try_lock` retries until its wait is over, `lock` for
//!   [`ClientBuilder::retry_transient_for`].
//! - A guard whose lock was lost (key deleted, flushed, lease run out with
//!   no confirmed renewal) says so: [`LockGuard::is_lost`],
//!   [`LockGuard::lost`]. A lost lock is never re-created by the watchdog.
//! - Cancelling any call leaves nothing held beyond what the caller got;
//!   dropping a guard releases it in the background and never blocks.
//! - Waiters are woken by pub/sub, and never sleep longer than the holder's
//!   remaining lease, so a lost message only delays them.
//! - A dead or hung server is an error within the command timeout (3 s by
//!   default), never a hang.
//! - One name is one kind while it is held: another kind's acquire is
//!   [`Error::WrongKind`] and changes nothing; a hash lockwarden did not
//!   write is never written ([`Error::WrongType`]); a name a Redisson
//!   client holds is never taken nor written ([`Error::HeldByRedisson`];
//!   the README's "Beside Redisson" says which pairs of kinds exclude each
//!   other).
//! - No message, log line or `Debug` output shows a password given in a
//!   URL ([`redact_url`]).
//! - Over a quorum of independent masters ([`Client::builder_for_masters`]),
//!   all of the above with a majority: a lock survives the loss of any
//!   minority of masters; a hold is valid for its lease minus the time
//!   acquiring took and a clock-drift allowance ([`LockGuard::validity`]);
//!   fencing tokens stay increasing (the chosen token is written back to a
//!   majority; a lost counter restarts at its master's clock, so masters'
//!   clocks must agree to within the time between fresh holds). A master
//!   that restarts empty and counts at once can break mutual exclusion: see
//!   [`ClientBuilder::rejoin_delay`].
//!
//! # What is *not* guaranteed
//!
//! A lease-based lock cannot be safe against a holder that stops running
//! (GC-like pause, SIGSTOP, swapped out) longer than its lease: the lock
//! expires and someone else gets it while the paused holder still believes
//! it holds it. Clock jumps on the Redis server, and a failover to a replica
//! that had not received the lock yet (Redis replication is asynchronous)
//! break mutual exclusion the same way. Use the fencing token: pass it to the
//! resource you protect and have it reject writes with a lower token.
//!
//! # Differences from Redisson
//!
//! - The owner is a tokio task (or an explicit [`Owner`]), not a thread; a
//!   guard can be unlocked from any task.
//! - `unlock` by someone who does not hold the lock is a typed error
//!   ([`Error::NotHeld`]), and unlocking after the lease ran out too.
//! - Replies lost to a broken connection never double-count a re-entry or a
//!   release (Redisson's retries can).
//! - A re-entry with a shorter lease never shortens the current one.
//! - Fencing tokens come with every lock.
//! - Keys of another type at the lock's name are reported, never replaced;
//!   so is another kind of lock holding the name ([`Error::WrongKind`]),
//!   and a hash some other program wrote there.
//!
//! # Feature flags
//!
//! - `tls` (default): `rediss://` URLs, through rustls with ring.
//! - `blocking` (default): [`blocking`], the locks for code that is not
//!   async.
//! - `metrics` (default): counters and gauges through the `metrics` crate.
//! - `cli` (default): the `lockwarden` command (pulls in clap and friends);
//!   the library alone: `default-features = false`.
//!
//! # Examples
//!
//! In the repository's `examples/` (`cargo run --example NAME --
//! redis://127.0.0.1:6379`): `cron_job` (one machine at a time, stopping
//! early when the lock is at risk), `web_handler` (a per-order lock with a
//! short wait), `fenced_write` (a store that refuses stale tokens),
//! `blocking` and `demo`.
//!
//! See the README for the Redis data layout.

#![warn(missing_docs)]

#[cfg(feature = "blocking")]
pub mod blocking;
mod client;
mod connect;
mod core;
mod election;
mod error;
mod extend;
mod fair;
mod fanout;
mod guard;
mod keys;
mod latch;
mod lock;
mod member;
mod multi_lock;
mod node;
mod observe;
mod owner;
mod protocol;
mod pubsub;
mod quorum;
mod runtime;
mod rw;
mod rw_lock;
mod semaphore;
mod sentinel;
mod settings;
mod status;
mod tls;
mod wait;
mod watchdog;

pub use client::{Client, ClientBuilder};
pub use connect::redact_url;
pub use election::{Election, Leader, Leadership};
pub use error::{Error, RedisErrorKind, Result};
/// The Redis client lockwarden is built on, re-exported: its types appear in
/// [`Client::redis`], [`Client::masters`] and [`Client::builder_from_config`].
/// Use this path (`lockwarden::fred`) rather than a `fred` dependency of your
/// own, so both always name the same version.
pub use fred;
pub use guard::LockGuard;
pub use keys::{MAX_NAME_LEN, NAMESPACE};
pub use latch::CountDownLatch;
pub use lock::Lock;
pub use multi_lock::{MultiGuard, MultiLock};
pub use owner::Owner;
pub use rw_lock::RwLock;
pub use semaphore::{Permit, Semaphore};
pub use settings::Lease;
pub use settings::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_NODE_TIMEOUT,
    DEFAULT_RETRY_TRANSIENT_FOR, DEFAULT_WAKE_PATIENCE, DEFAULT_WATCHDOG_LEASE, MAX_DURATION, MIN_LEASE,
    MIN_WATCHDOG_LEASE,
};
pub use status::{LockKind, LockStatus};
pub use watchdog::LossReason;

/// Every Rust block of the README, compiled as a doc test (`cargo test
/// --doc`), so the README's code keeps building as the API changes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
