//! `Lock`, the handle every kind's holds go through: the reentrant and
//! fair locks directly, each side of a read-write lock (`rw_lock.rs`) and
//! each acquisition of a semaphore (`semaphore.rs`) inside. Its public
//! verbs, and the choice of the wait policy of its kind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::fair::FairWait;
use crate::guard::LockGuard;
use crate::keys::{Names, Str};
use crate::owner::{Owner, OwnerPin, Owners};
use crate::protocol::LockKeys;
use crate::quorum::Released;
use crate::rw::SideWait;
use crate::settings::{check_lease, check_wait, Lease};
use crate::wait::{Shared, Target, WakeOne};

/// A handle on one named lock: reentrant ([`Client::lock`](crate::Client::lock)),
/// fair as well ([`Client::fair_lock`](crate::Client::fair_lock)), or one side
/// of a read-write lock ([`RwLock`](crate::RwLock)).
///
/// Cheap to clone; it holds nothing by itself. Holding the lock is what a
/// [`LockGuard`] represents. By default the owner is the calling tokio task:
/// `lock()` in a task that holds the lock already re-enters it, and each
/// guard must then be released. [`Lock::with_owner`] fixes the owner instead.
#[derive(Clone)]
pub struct Lock {
    pub(crate) inner: Arc<Core>,
    /// The lock's keys, and its kind's protocol (made from `kind`).
    pub(crate) keys: Arc<LockKeys>,
    kind: Kind,
    owner: Option<Owner>,
    /// The reentrant lock's wake channel for this client, named on first use.
    wake_channel: std::sync::OnceLock<Str>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.keys.name)
            .field("owner", &self.owner)
            .finish()
    }
}

/// A lock kind, as a handle chooses it: the protocol of its calls (what
/// the floors below see, as a `protocol::Kind`) and the policy of its
/// waits. One kind per name: kinds share the lock hash and its counter,
/// not their other keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any owner may take a free lock; waiters race.
    Reentrant,
    /// Waiters are served in the order they asked (a queue).
    Fair,
    /// The read side of a read-write lock: shared with other readers.
    Read,
    /// The write side of a read-write lock: exclusive.
    Write,
    /// A semaphore of `total` permits, taking `take` of them; each
    /// acquisition's owner field is its own permit id. Its waits are the
    /// reentrant lock's (one client woken, or handed the permits, per
    /// permit freed).
    Permits { total: u32, take: u32 },
    /// A fair semaphore: as `Permits`, served in request order.
    FairPermits { total: u32, take: u32 },
    /// The reentrant lock in Redisson's layout (the client's
    /// `redisson_compatible`): waiters listen on Redisson's channel.
    Redisson,
    /// A semaphore in Redisson's layout: as `Permits`; waiters listen on
    /// Redisson's channel.
    RedissonPermits { total: u32, take: u32 },
    /// The fair lock in Redisson's layout: waits as `Fair` does, without
    /// direct grants, each waiter on its own Redisson channel.
    RedissonFair,
    /// The read side of a read-write lock in Redisson's layout.
    RedissonRead,
    /// The write side of a read-write lock in Redisson's layout.
    RedissonWrite,
}

impl Kind {
    fn protocol(self) -> crate::protocol::Kind {
        match self {
            Kind::Reentrant => crate::protocol::reentrant(),
            Kind::Fair => crate::protocol::fair(),
            Kind::Read => crate::protocol::read(),
            Kind::Write => crate::protocol::write(),
            Kind::Permits { total, take } => crate::protocol::permits(total, take),
            Kind::FairPermits { total, take } => crate::protocol::fair_permits(total, take),
            Kind::Redisson => crate::protocol::redisson(),
            Kind::RedissonPermits { total, take } => crate::protocol::redisson_permits(total, take),
            Kind::RedissonFair => crate::protocol::redisson_fair(),
            Kind::RedissonRead => crate::protocol::redisson_side(true),
            Kind::RedissonWrite => crate::protocol::redisson_side(false),
        }
    }
}

impl Lock {
    pub(crate) fn new(inner: Arc<Core>, names: Names, kind: Kind) -> Lock {
        Lock {
            inner,
            keys: Arc::new(LockKeys::new(
                // A semaphore's names come from its handle
                // (`Names::redisson_semaphore` for `RedissonPermits`).
                match kind {
                    Kind::Redisson => names.redisson(),
                    Kind::RedissonFair => names.redisson_fair(),
                    Kind::RedissonRead | Kind::RedissonWrite => names.redisson_rw(),
                    _ => names,
                },
                kind.protocol(),
            )),
            kind,
            owner: None,
            wake_channel: std::sync::OnceLock::new(),
        }
    }

    /// The lock's name, as given to [`Client::lock`](crate::Client::lock).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key of the lock hash (prefix + name).
    pub fn key(&self) -> &str {
        &self.keys.lock
    }

    /// The same lock, acquired and inspected as `owner` instead of the
    /// current task: use the owner of a [`LockGuard`] to re-enter its hold
    /// from a spawned task, or one from [`Client::new_owner`](crate::Client::new_owner)
    /// to share a hold across tasks.
    pub fn with_owner(&self, owner: Owner) -> Lock {
        Lock {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// Acquires the lock, waiting as long as it takes, with the watchdog lease.
    ///
    /// Re-enters when the owner holds it already. Waiting is driven by
    /// wake-up messages (an unlock wakes one waiting client), bounded by the
    /// holder's remaining lease, so a lost message only delays; a client
    /// in line behind others also looks again after its
    /// [`wake_patience`](crate::ClientBuilder::wake_patience) per place,
    /// in case the client woken before it cannot act.
    ///
    /// # Errors
    ///
    /// A retryable error ([`Error::is_retryable`]: Redis unreachable or
    /// slow, a majority not reached, a read-only replica during a failover,
    /// ...) is retried with a backoff; the last one is returned once
    /// failures have lasted
    /// [`ClientBuilder::retry_transient_for`](crate::ClientBuilder::retry_transient_for)
    /// (10 s by default) with no answer in between. Other errors end the wait
    /// at once: [`Error::WrongType`] when a key of the lock holds something
    /// else, [`Error::Redis`] for a refusal such as a missing permission.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves nothing held. An
    /// attempt already sent runs to completion in the background and, if it
    /// acquired, is released again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: lockwarden::Client) -> lockwarden::Result<()> {
    /// let lock = client.lock("orders")?;
    /// let guard = lock.lock().await?;
    /// // ... critical section; guard.token() fences writes ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        match self.acquire(None, Lease::Watchdog).await? {
            Some(guard) => Ok(guard),
            None => unreachable_wait(),
        }
    }

    /// Acquires the lock, waiting as long as it takes, with the given lease.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`], plus [`Error::InvalidDuration`] for a fixed lease
    /// below [`MIN_LEASE`](crate::MIN_LEASE) (10 ms) or above 30 days.
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::lock`].
    pub async fn lock_with_lease(&self, lease: impl Into<Lease>) -> Result<LockGuard> {
        match self.acquire(None, lease.into()).await? {
            Some(guard) => Ok(guard),
            None => unreachable_wait(),
        }
    }

    /// Tries to acquire the lock within `wait` (zero: one attempt).
    ///
    /// `lease` is [`Lease::Watchdog`] (or `None`) for a renewed hold, or a
    /// fixed lease (`Duration`, `Some(Duration)`, [`Lease::Fixed`]) that is
    /// never renewed. Returns `Ok(None)` when another owner keeps the lock
    /// for the whole wait: contention is not an error. Subscribing to the
    /// unlock messages counts against `wait` too, so the call returns about
    /// `wait` after it started even if a master is slow to confirm the
    /// subscription (it may take up to one script call longer).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidDuration`] for a wait above 30 days or a fixed lease of
    /// below [`MIN_LEASE`](crate::MIN_LEASE) (10 ms) or above 30 days (nothing is
    /// sent). A retryable error is retried with a backoff until `wait` is
    /// over, and the last one is returned then (not `Ok(None)`: Redis did
    /// not answer, so whether the lock is free is unknown); with a zero
    /// `wait` the first error is returned. Other errors as [`Lock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(client: lockwarden::Client) -> lockwarden::Result<()> {
    /// let lock = client.lock("nightly-report")?;
    /// match lock.try_lock(Duration::from_secs(2), Duration::from_secs(60)).await? {
    ///     Some(guard) => { /* ... */ guard.unlock().await? }
    ///     None => println!("someone else is running the report"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, wait: Duration, lease: impl Into<Lease>) -> Result<Option<LockGuard>> {
        check_wait(wait)?;
        self.acquire(Some(wait), lease.into()).await
    }

    /// How many times the owner (the current task, or the one set with
    /// [`Lock::with_owner`]) holds this lock: 0 when it does not.
    ///
    /// # Errors
    ///
    /// Redis errors; [`Error::WrongType`] when the key is not a lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u64> {
        let Some(owner) = self.current_owner() else {
            return Ok(0);
        };
        let counts = self
            .each("hold_count", |node| node.hold_count(&self.keys, &owner.field))
            .await?;
        // The depth a majority holds at least.
        Ok(self.majority_value(counts, 0))
    }

    /// Whether the owner (the current task, or the one set with
    /// [`Lock::with_owner`]) holds this lock, as Redis sees it now.
    ///
    /// # Errors
    ///
    /// As [`Lock::hold_count`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// Whether anyone holds this lock.
    ///
    /// # Errors
    ///
    /// Redis errors; [`Error::WrongType`] when the key is not a lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        let locked = self.each("is_locked", |node| node.is_locked(&self.keys)).await?;
        Ok(self.majority_value(locked, false))
    }

    /// The holder's remaining lease: `None` when the lock is free,
    /// `Some(Duration::MAX)` when the key has no expiry (a leaked lock).
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let leases = self
            .each("remaining_lease", |node| async {
                Ok(match node.pttl(&self.keys).await? {
                    -2 => None,
                    -1 => Some(Duration::MAX),
                    ms => Some(Duration::from_millis(ms.max(0) as u64)),
                })
            })
            .await?;
        Ok(self.majority_value(leases, None))
    }

    /// A consistent snapshot of the lock: holders and their reentry counts,
    /// remaining lease, last fencing token and (fair lock) the queue.
    ///
    /// # Errors
    ///
    /// Redis errors; [`Error::WrongType`] when the key is not a lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn status(&self) -> Result<crate::status::LockStatus> {
        let mut all = self
            .each("status", |node| async {
                let raw = node.status(&self.keys).await?;
                crate::status::LockStatus::parse(&self.keys.name, &self.keys.lock, raw)
            })
            .await?;
        // Over a quorum: the view of the master ranking at the majority line
        // by remaining lease (held, with at least that lease, on a majority),
        // with the highest token any master has.
        let need = crate::fanout::majority(self.inner.members.len());
        let last_token = all.iter().filter_map(|s| s.last_token).max();
        all.sort_by_key(|s| std::cmp::Reverse((s.is_held(), s.leaked, s.remaining_lease)));
        let mut status = all.swap_remove(need.min(all.len()) - 1);
        status.last_token = last_token;
        Ok(status)
    }

    /// Runs a read on every master; the answers, when a majority answered.
    async fn each<'a, T, F, Fut>(&'a self, op: &'static str, f: F) -> Result<Vec<T>>
    where
        F: Fn(&'a crate::node::Node) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        crate::member::on_each(&self.inner.members, op, f).await
    }

    /// The largest value at least a majority of all masters reported
    /// (`floor` when fewer did).
    fn majority_value<T: Ord>(&self, mut values: Vec<T>, floor: T) -> T {
        let need = crate::fanout::majority(self.inner.members.len());
        values.sort_unstable_by(|a, b| b.cmp(a));
        if values.len() >= need {
            values.swap_remove(need - 1)
        } else {
            floor
        }
    }

    /// Releases one level held by this handle's owner (the current task, or
    /// the one set with [`Lock::with_owner`]) without its guard, as
    /// Redisson's `unlock()` does. Prefer [`LockGuard::unlock`]; this is for
    /// code that acts as an owner from elsewhere. A guard of the hold that is
    /// released later gives up its level without releasing another one.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when this owner does not hold the lock (a
    /// non-owner, or a lease that ran out): nothing is changed. Redis errors
    /// otherwise.
    ///
    /// # Cancel safety
    ///
    /// The release runs in its own task and completes even if this future is
    /// dropped.
    pub async fn unlock(&self) -> Result<()> {
        let Some(owner) = self.current_owner() else {
            return Err(Error::NotHeld {
                name: self.keys.name.clone(),
            });
        };
        let hold = self.inner.holds.find(&self.keys.lock, &owner.field);
        if let Some(h) = &hold {
            self.inner.holds.released_elsewhere(h, 1);
        }
        let inner = self.inner.clone();
        let keys = self.keys.clone();
        let task = self.inner.spawner().spawn(async move {
            let request = crate::keys::fresh_request_id();
            let tokens = match &hold {
                Some(h) => h.node_tokens.clone(),
                None => vec![None; inner.members.len()],
            };
            let holder = crate::quorum::Holder {
                owner: owner.field.clone(),
                take: hold.as_ref().and_then(|h| h.take.clone()),
            };
            let res = crate::quorum::release(
                &inner.members,
                &keys,
                &holder,
                &tokens,
                Duration::ZERO,
                &request,
                inner.settings.record_ttl,
            )
            .await;
            if let (Some(h), Ok(Released::NotHeld) | Err(_)) = (&hold, &res) {
                inner.holds.released_elsewhere(h, -1);
            }
            match res? {
                Released::NotHeld => Err(Error::NotHeld {
                    name: keys.name.clone(),
                }),
                Released::Done => Ok(()),
            }
        });
        task.await.map_err(|_| Error::Connection {
            op: "release",
            message: "the runtime dropped the release task".into(),
        })?
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Returns
    /// whether there was a lock to delete. The fencing counter is kept, so
    /// the next holder still gets a larger token. Holders find out at their
    /// next renewal (watchdog) or unlock ([`Error::NotHeld`]).
    ///
    /// # Errors
    ///
    /// Redis errors; [`Error::WrongType`] when the key is not a lock (it is
    /// left untouched); [`Error::WrongKind`] when a read-write lock's side
    /// finds another kind's lock (left untouched too: a side frees only a
    /// read-write lock, where a plain handle frees any lockwarden lock),
    /// and when the name is a count-down latch's (no lock: see
    /// [`CountDownLatch::delete`](crate::CountDownLatch::delete)).
    ///
    /// # Cancel safety
    ///
    /// The script may or may not have run when the future is dropped. (A
    /// call whose reply is lost to a broken connection is sent again by
    /// the client itself; that re-send answers as the first sending did,
    /// and frees no lock taken since: the call carries a replay record.)
    pub async fn force_unlock(&self) -> Result<bool> {
        let deleted = self.each("force_unlock", |node| node.force_unlock(&self.keys)).await?;
        Ok(deleted.into_iter().any(|d| d))
    }

    fn current_owner(&self) -> Option<Owner> {
        let owner = self.owner.clone().or_else(|| self.inner.owners.peek_current())?;
        Some(self.sided(owner))
    }

    fn pin(&self) -> OwnerPin {
        let mut pin = match &self.owner {
            Some(owner) => Owners::pin_explicit(owner.clone()),
            None => self.inner.owners.pin_current(),
        };
        if let Some(field) = self.keys.kind.field(&pin.owner.field) {
            pin.owner.field = field.into();
        }
        pin
    }

    /// `owner` as this handle's kind writes it: a read-write lock's reader
    /// has a field of its own (see `Protocol::field`).
    fn sided(&self, owner: Owner) -> Owner {
        match self.keys.kind.field(&owner.field) {
            Some(field) => Owner {
                id: owner.id,
                field: field.into(),
            },
            None => owner,
        }
    }

    pub(crate) fn labels(&self) -> crate::observe::Labels<'_> {
        crate::observe::Labels::of(
            self.keys.kind.label(),
            &self.keys.name,
            self.inner.settings.metric_lock_names,
        )
    }

    /// [`Lock::acquire_inner`] in a tracing span, with its outcome recorded.
    async fn acquire(&self, wait: Option<Duration>, lease: Lease) -> Result<Option<LockGuard>> {
        use tracing::Instrument;
        let labels = self.labels();
        let span = tracing::debug_span!(
            "lockwarden.acquire",
            lock = %self.keys.name,
            kind = labels.kind,
            wait_ms = wait.map(|w| w.as_millis() as u64),
            lease = ?lease,
        );
        let start = Instant::now();
        let result = self.acquire_inner(wait, lease).instrument(span.clone()).await;
        let waited = start.elapsed();
        span.in_scope(|| match &result {
            Ok(Some(g)) => {
                crate::observe::acquired(labels, waited);
                tracing::debug!(
                    token = g.token(),
                    hold_count = g.depth(),
                    waited_us = waited.as_micros() as u64,
                    "acquired"
                );
            }
            Ok(None) => {
                crate::observe::not_acquired(labels, waited, "timeout");
                tracing::debug!(
                    waited_us = waited.as_micros() as u64,
                    "not acquired within the wait (deadline)"
                );
            }
            Err(e) => {
                crate::observe::not_acquired(labels, waited, crate::observe::reason(e));
                match e {
                    Error::InvalidName { .. } | Error::InvalidDuration { .. } => {
                        tracing::debug!(error = %e, "rejected")
                    }
                    _ => tracing::warn!(error = %e, "acquire failed"),
                }
            }
        });
        result
    }

    /// Checks the lease and runs the wait loop with this lock's kind as
    /// its policy. `wait: None` waits forever.
    async fn acquire_inner(&self, wait: Option<Duration>, lease: Lease) -> Result<Option<LockGuard>> {
        if let Lease::Fixed(d) = lease {
            check_lease(d)?;
        }
        let deadline = wait.map(|w| Instant::now() + w);
        let pin = self.pin();
        let t = Target {
            core: &self.inner,
            keys: &self.keys,
        };
        match self.kind {
            Kind::Reentrant | Kind::Permits { .. } => {
                let channel = self
                    .wake_channel
                    .get_or_init(|| crate::keys::joined(&[&self.keys.wake_prefix, &self.inner.uuid]).into());
                let will_wait = wait != Some(Duration::ZERO);
                let mut policy = WakeOne::new(t, channel, &pin.owner.field, will_wait, lease);
                if matches!(self.kind, Kind::Permits { .. }) {
                    policy = policy.renewing_claims();
                }
                crate::wait::wait(t, &pin, lease, deadline, policy).await
            }
            Kind::Fair | Kind::FairPermits { .. } | Kind::RedissonFair => {
                let will_wait = wait != Some(Duration::ZERO);
                // Redisson's unlock wakes the head on its own channel with
                // no grant in the message.
                let direct = self.kind != Kind::RedissonFair;
                let policy = FairWait::new(t, &pin.owner.field, will_wait, direct);
                crate::wait::wait(t, &pin, lease, deadline, policy).await
            }
            Kind::Read => {
                let will_wait = wait != Some(Duration::ZERO);
                let policy = SideWait::reader(t, &pin.owner.field, will_wait);
                crate::wait::wait(t, &pin, lease, deadline, policy).await
            }
            Kind::Redisson | Kind::RedissonPermits { .. } | Kind::RedissonRead | Kind::RedissonWrite => {
                let will_wait = wait != Some(Duration::ZERO);
                crate::wait::wait(t, &pin, lease, deadline, Shared::new(will_wait)).await
            }
            Kind::Write => {
                let will_wait = wait != Some(Duration::ZERO);
                let policy = SideWait::writer(t, &pin.owner.field, will_wait, lease);
                crate::wait::wait(t, &pin, lease, deadline, policy).await
            }
        }
    }
}

fn unreachable_wait() -> Result<LockGuard> {
    // `wait::wait` returns `Ok(None)` only through `Retries::at_deadline`,
    // reached only when its deadline is `Some` and has passed; `lock` and
    // `lock_with_lease` wait without one.
    unreachable!("a wait without a deadline ended without the lock")
}
