//! The semaphore with expiring permits: its handle and its permit guard.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::Names;
use crate::lock::Kind;
use crate::lock::Lock;
use crate::owner::Owner;
use crate::settings::Lease;
use crate::watchdog::LossReason;

static NEXT_PERMIT: AtomicU64 = AtomicU64::new(1);

/// A semaphore of a fixed number of permits whose holds expire: each
/// acquisition has a lease (the watchdog's, renewed while the [`Permit`]
/// lives, or a fixed one), so a holder that dies gives its permits back
/// when its lease ends. Made by [`Client::semaphore`](crate::Client::semaphore).
///
/// - Permits in use never exceed the number: every grant checks it in one
///   script, and each acquisition has an id of its own, so a re-sent
///   request finds its grant instead of taking more.
/// - The number of permits belongs to the handle: every acquisition counts
///   against the number of the handle it goes through. Lowering it (a
///   handle made with a smaller number) takes nothing from current holders;
///   new acquisitions through that handle wait until the permits in use
///   fit it. Raising it lets waiters in at once (at their next attempt).
///   Use one number per name unless you mean to change it.
/// - Waiters wake on the release message (published when a waiter listens),
///   bounded by the first holder's lease: no polling.
/// - One master only (one server, Sentinel, Cluster): over independent
///   masters a majority does not bound a count (with 5 masters and 2
///   permits, three holders can each reach a majority), so a quorum client
///   refuses to make one.
#[derive(Clone)]
pub struct Semaphore {
    core: Arc<Core>,
    keys: Names,
    permits: u32,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.keys.name)
            .field("permits", &self.permits)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(core: Arc<Core>, keys: Names, permits: u32) -> Semaphore {
        Semaphore { core, keys, permits }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The number of permits this handle counts against.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes one permit, waiting as long as it takes, with the watchdog
    /// lease.
    ///
    /// # Errors
    ///
    /// Redis errors that outlast the client's retries; [`Error::WrongType`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a permit the dropped call may have been granted is
    /// given back in the background (as for [`Lock::lock`]).
    pub async fn acquire(&self) -> Result<Permit> {
        self.acquire_many(1).await
    }

    /// Takes `n` permits at once (all or none), waiting as long as it
    /// takes, with the watchdog lease.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `n` is 0 or more than the permits; otherwise
    /// as [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn acquire_many(&self, n: u32) -> Result<Permit> {
        match self.take(n, None, Lease::Watchdog).await? {
            Some(p) => Ok(p),
            None => Err(Error::Config(
                "an unbounded wait ended without a permit (a lockwarden bug)".into(),
            )),
        }
    }

    /// Takes one permit if one comes free within `wait` (zero: only try),
    /// with `lease` (`None`: the watchdog's). `Ok(None)` when none did.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`]; [`Error::InvalidDuration`] for a fixed
    /// lease below [`MIN_LEASE`](crate::MIN_LEASE), and for a lease or a
    /// wait above 30 days (a zero wait is valid: one attempt).
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self, wait: Duration, lease: impl Into<Lease>) -> Result<Option<Permit>> {
        self.take(1, Some(wait), lease.into()).await
    }

    /// Takes `n` permits (all or none) if they come free within `wait`, with
    /// `lease`. `Ok(None)` when they did not.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many`] and [`Semaphore::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire_many(&self, n: u32, wait: Duration, lease: impl Into<Lease>) -> Result<Option<Permit>> {
        self.take(n, Some(wait), lease.into()).await
    }

    /// The permits free now, out of this handle's number (holders whose
    /// lease ended count as gone).
    ///
    /// # Errors
    ///
    /// Redis errors; [`Error::WrongType`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn available_permits(&self) -> Result<u64> {
        self.core.first().available_permits(&self.keys, self.permits).await
    }

    async fn take(&self, n: u32, wait: Option<Duration>, lease: Lease) -> Result<Option<Permit>> {
        if n == 0 || n > self.permits {
            return Err(Error::Config(format!(
                "cannot take {n} permits of semaphore {:?}, which has {}",
                self.keys.name, self.permits
            )));
        }
        let kind = Kind::Permits {
            total: self.permits,
            take: n,
        };
        // Each acquisition is an owner of its own: its id is its field, and
        // the hold's key in the client's registry.
        let id = NEXT_PERMIT.fetch_add(1, Ordering::Relaxed);
        let owner = Owner {
            id: 0,
            field: format!("{}:p{}{}", self.core.uuid, id, crate::keys::READ_SUFFIX).into(),
        };
        let lock = Lock::new(self.core.clone(), self.keys.clone(), kind).with_owner(owner);
        let guard = match wait {
            Some(w) => lock.try_lock(w, lease).await?,
            None => Some(lock.lock_with_lease(lease).await?),
        };
        Ok(guard.map(|guard| Permit { guard, n }))
    }
}

/// Permits held: given back by [`Permit::release`], or in the background
/// when dropped (with no runtime, the lease bounds them).
#[derive(Debug)]
pub struct Permit {
    guard: LockGuard,
    n: u32,
}

impl Permit {
    /// How many permits this holds.
    pub fn permits(&self) -> u32 {
        self.n
    }

    /// The permit id, its field in the semaphore's hash.
    pub fn id(&self) -> String {
        self.guard.owner().field().to_string()
    }

    /// Why the permits were lost, if they were.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.guard.loss_reason()
    }

    /// Whether the permits were lost (their lease ran out unrenewed, or the
    /// semaphore was force-unlocked).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Waits until the permits are lost; why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// How long the permits are known to be held at least.
    pub fn validity(&self) -> Duration {
        self.guard.validity()
    }

    /// Whether the permits are at risk: less than half of their lease is
    /// left of their validity (see [`LockGuard::is_at_risk`]).
    pub fn is_at_risk(&self) -> bool {
        self.guard.is_at_risk()
    }

    /// Resolves when the permits are at risk, with the validity left then
    /// (see [`LockGuard::at_risk`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn at_risk(&self) -> Duration {
        self.guard.at_risk().await
    }

    /// Keeps the permits for at least `lease` from now, if they are still
    /// held (see [`LockGuard::extend`]).
    ///
    /// # Errors
    ///
    /// As [`LockGuard::extend`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::extend`].
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.guard.extend(lease).await
    }

    /// Gives the permits back.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when they were lost already; Redis errors.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock`]: the release completes in the background.
    pub async fn release(self) -> Result<()> {
        self.guard.unlock().await
    }
}
