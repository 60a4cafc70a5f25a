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
/// - The number of permits: a number stored with the semaphore
///   ([`try_set_permits`](Semaphore::try_set_permits),
///   [`add_permits`](Semaphore::add_permits), as Redisson's) is the number
///   for every handle; while none is stored, each acquisition counts
///   against the number of the handle it goes through. Lowering the number
///   takes nothing from current holders; new acquisitions wait until the
///   permits in use fit it. Raising it (a stored number) wakes the
///   waiters. The stored number has no TTL; lost (a `FLUSHALL`), the
///   handles' numbers apply again. One acquisition never takes more than
///   its handle's number.
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
    /// A fair semaphore (`Client::fair_semaphore`).
    fair: bool,
    /// In Redisson's layout (`Client::redisson_semaphore`): `keys` are
    /// `Names::redisson_semaphore`'s.
    redisson: bool,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.keys.name)
            .field("permits", &self.permits)
            .field("fair", &self.fair)
            .field("redisson", &self.redisson)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(core: Arc<Core>, keys: Names, permits: u32, fair: bool) -> Semaphore {
        Semaphore {
            core,
            keys,
            permits,
            fair,
            redisson: false,
        }
    }

    /// A semaphore in Redisson's layout (see
    /// [`Client::redisson_semaphore`](crate::Client::redisson_semaphore)).
    pub(crate) fn redisson(core: Arc<Core>, keys: Names, permits: u32) -> Semaphore {
        Semaphore {
            core,
            keys: keys.redisson_semaphore(),
            permits,
            fair: false,
            redisson: true,
        }
    }

    /// Whether this semaphore is in Redisson's layout, shared with
    /// Redisson's `RSemaphore` and `RPermitExpirableSemaphore` (see
    /// [`Client::redisson_semaphore`](crate::Client::redisson_semaphore)).
    pub fn is_redisson(&self) -> bool {
        self.redisson
    }

    /// Whether this is a fair semaphore (permits granted in request
    /// order).
    pub fn is_fair(&self) -> bool {
        self.fair
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
        Ok(self.counts().await?[0])
    }

    /// The permits held now (holders whose lease passed count as gone).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::available_permits`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn acquired_permits(&self) -> Result<u64> {
        Ok(self.counts().await?[1])
    }

    /// The number of permits in force: the one stored with the semaphore,
    /// else this handle's.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::available_permits`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn total_permits(&self) -> Result<u64> {
        Ok(self.counts().await?[2])
    }

    /// `[free, in use, number]`.
    async fn counts(&self) -> Result<[u64; 3]> {
        let r: Vec<i64> = self
            .core
            .first()
            .run_call(|_| {
                if self.redisson {
                    crate::protocol::redisson::count(&self.keys, self.permits)
                } else {
                    crate::protocol::semaphore::available(&self.keys, self.permits, self.fair)
                }
            })
            .await?;
        let at = |i: usize| r.get(i).copied().unwrap_or(0).max(0) as u64;
        Ok([at(0), at(1), at(2)])
    }

    async fn number(&self, what: crate::protocol::semaphore::Number) -> Result<(bool, u64)> {
        let record = crate::keys::record_key(&self.keys);
        let r: Vec<i64> = self
            .core
            .first()
            .run_call(|env| {
                if self.redisson {
                    crate::protocol::redisson::number(&self.keys, &record, what, self.permits, env)
                } else {
                    crate::protocol::semaphore::number(&self.keys, &record, what, self.permits, env)
                }
            })
            .await?;
        Ok((r.first() == Some(&1), r.get(1).copied().unwrap_or(0).max(0) as u64))
    }

    /// Stores `permits` as the semaphore's number, for every handle, unless
    /// one is stored already (Redisson's `trySetPermits`): `Ok(false)` then,
    /// and nothing changes. A number above the one in force wakes waiters.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the number's key holds something else;
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped, it may or may not have stored the number (calling again
    /// cannot store it twice).
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        Ok(self.number(crate::protocol::semaphore::Number::Set(permits)).await?.0)
    }

    /// Adds `delta` (negative: removes) to the number stored with the
    /// semaphore, or to this handle's number while none is stored (storing
    /// the result), and returns the new number. Raising it wakes waiters;
    /// lowering it takes nothing from holders.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the number would go below zero (nothing
    /// changes); as [`Semaphore::try_set_permits`].
    ///
    /// # Cancel safety
    ///
    /// Not idempotent: dropped, the change may or may not have been made,
    /// and calling again may add twice. Read
    /// [`Semaphore::total_permits`] when that matters. (A call whose reply
    /// is lost to a broken connection is sent again by the client itself,
    /// and that adds once: the call carries a replay record.)
    pub async fn add_permits(&self, delta: i64) -> Result<u64> {
        match self.number(crate::protocol::semaphore::Number::Add(delta)).await? {
            (true, n) => Ok(n),
            (false, n) => Err(Error::Config(format!(
                "semaphore {:?} has {n} permits: adding {delta} would leave fewer than none",
                self.keys.name
            ))),
        }
    }

    /// Takes every permit free now, in one acquisition with `lease` (the
    /// watchdog's or a fixed one), without waiting; `Ok(None)` when none
    /// is free. Its [`Permit::permits`] says how many it got.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn drain_permits(&self, lease: impl Into<Lease>) -> Result<Option<Permit>> {
        let lease = lease.into();
        // Others may take some between the count and the take: count again.
        for _ in 0..16 {
            let free = self.available_permits().await?;
            if free == 0 {
                return Ok(None);
            }
            let n = u32::try_from(free).unwrap_or(u32::MAX);
            if let Some(p) = self.take_unchecked(n, Some(Duration::ZERO), lease).await? {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    /// Gives back the permits of the acquisition `id` (a [`Permit::id`],
    /// or the `LOCKWARDEN_PERMIT` of a `lockwarden run --permits`
    /// command), from any process; the holder finds them lost at its next
    /// renewal, or its release answers [`Error::NotHeld`].
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when no acquisition of that id holds permits
    /// (released, expired, or not a permit id of this semaphore); Redis
    /// errors. A call whose reply was lost to a broken connection is sent
    /// again, and when that finds nothing it answers `Ok`: the first
    /// sending may have given the permits back, and either way none is
    /// held under that id now (as a lock's release that was sent again).
    ///
    /// # Cancel safety
    ///
    /// Dropped, the permits may or may not have been given back (calling
    /// again cannot give back twice).
    pub async fn release_by_id(&self, id: &str) -> Result<()> {
        let not_held = || Error::NotHeld {
            name: self.keys.name.clone(),
        };
        // Only a permit id: `<client-uuid>:p<n>:r`.
        let permit = id
            .strip_suffix(crate::keys::READ_SUFFIX)
            .and_then(|b| b.rsplit_once(":p"))
            .is_some_and(|(client, n)| !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        // Or, in Redisson's layout, a Redisson permit's id (16 bytes in hex,
        // as its RPermitExpirableSemaphore hands them out).
        let redisson_id = self.redisson.then(|| redisson_permit_id(id)).flatten();
        if !permit && redisson_id.is_none() {
            return Err(not_held());
        }
        let (r, resent): (i64, bool) = self
            .core
            .first()
            .run_call_counted(|env| match (self.redisson, redisson_id) {
                (true, Some(raw)) => crate::protocol::redisson::release_permits(
                    &self.keys,
                    fred::types::Value::Bytes(raw.to_vec().into()),
                    env,
                ),
                (true, None) => crate::protocol::redisson::release_permits(&self.keys, id.into(), env),
                (false, _) => crate::protocol::semaphore::release_by_id(&self.keys, id, self.permits, self.fair, env),
            })
            .await?;
        // Sent twice (its connection broke before the reply) and nothing
        // found the second time: the first sending may have given them
        // back. Either way no acquisition of that id holds permits now, as
        // a lock's release says of a re-sent release (`release_reply`).
        if r == 0 || resent {
            Ok(())
        } else {
            Err(not_held())
        }
    }

    /// Takes one permit with `lease` (the watchdog's, or a fixed one, never
    /// renewed), waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`]; [`Error::InvalidDuration`] for a fixed
    /// lease below [`MIN_LEASE`](crate::MIN_LEASE) or above 30 days.
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn acquire_with_lease(&self, lease: impl Into<Lease>) -> Result<Permit> {
        match self.take(1, None, lease.into()).await? {
            Some(p) => Ok(p),
            None => Err(Error::Config(
                "an unbounded wait ended without a permit (a lockwarden bug)".into(),
            )),
        }
    }

    async fn take(&self, n: u32, wait: Option<Duration>, lease: Lease) -> Result<Option<Permit>> {
        if n == 0 || n > self.permits {
            return Err(Error::Config(format!(
                "cannot take {n} permits of semaphore {:?}, which has {}",
                self.keys.name, self.permits
            )));
        }
        self.take_unchecked(n, wait, lease).await
    }

    /// [`Semaphore::take`] of any number (drain takes what is free, which
    /// a stored number may put above the handle's).
    async fn take_unchecked(&self, n: u32, wait: Option<Duration>, lease: Lease) -> Result<Option<Permit>> {
        let (total, take) = (self.permits, n);
        let kind = if self.redisson {
            Kind::RedissonPermits { total, take }
        } else if self.fair {
            Kind::FairPermits { total, take }
        } else {
            Kind::Permits { total, take }
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

/// The 16 bytes of a Redisson permit id given in hex (32 digits).
fn redisson_permit_id(id: &str) -> Option<[u8; 16]> {
    if id.len() != 32 {
        return None;
    }
    let mut raw = [0u8; 16];
    for (i, byte) in raw.iter_mut().enumerate() {
        *byte = u8::from_str_radix(id.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(raw)
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

    /// The lease the permits were taken with (the watchdog's, or a fixed
    /// one).
    pub fn lease(&self) -> Lease {
        self.guard.lease()
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

    /// Whether the permits came by a fair semaphore's direct grant whose
    /// own lease is still to be set (see
    /// [`LockGuard::is_extension_pending`]): a short validity is expected
    /// then.
    pub fn is_extension_pending(&self) -> bool {
        self.guard.is_extension_pending()
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
