//! The guard of a held lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::owner::{Owner, OwnerPin};
use crate::protocol::LockKeys;
use crate::quorum::{Grant, Released};
use crate::settings::Lease;
use crate::watchdog::{Hold, LossReason};

/// One level of a held lock.
///
/// Release it with [`LockGuard::unlock`], which reports errors. Dropping it
/// without `unlock` stops its renewal at once and releases it in the
/// background. The guard is `Send + 'static`: it may be moved to, and
/// unlocked from, any task.
#[must_use = "dropping the guard releases the lock in the background at once; keep it for the whole critical section"]
pub struct LockGuard {
    inner: Arc<Core>,
    keys: Arc<LockKeys>,
    hold: Arc<Hold>,
    pin: Option<OwnerPin>,
    lease: Lease,
    depth: u64,
    acquired_at: Instant,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.keys.name)
            .field("token", &self.hold.token)
            .field("depth", &self.depth)
            .field("lease", &self.lease)
            .field("lost", &self.loss_reason())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(inner: Arc<Core>, keys: Arc<LockKeys>, pin: OwnerPin, grant: &Grant, lease: Lease) -> LockGuard {
        let watchdog = lease == Lease::Watchdog;
        let hold = inner.holds.enter(&keys.lock, &pin.owner.field, grant, watchdog);
        let depth = grant.depth;
        tracing::trace!(lock = %keys.name, token = grant.token, depth, "acquired");
        LockGuard {
            inner,
            keys,
            hold,
            pin: Some(pin),
            lease,
            depth,
            acquired_at: Instant::now(),
        }
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// The fencing token of this hold: strictly greater than every token
    /// handed out before for this lock, and the same for every re-entry of
    /// the hold. A new lock's tokens start at the server's clock in
    /// microseconds (so a lost counter restarts above the old tokens) and
    /// grow by one per fresh hold; they stay below 2^53. Pass it to the resource you protect and have it reject
    /// writes carrying a lower token than one it has seen.
    pub fn token(&self) -> u64 {
        self.hold.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The owner of this hold; give it to [`Lock::with_owner`](crate::Lock::with_owner)
    /// to re-enter the hold from another task.
    pub fn owner(&self) -> Owner {
        match &self.pin {
            Some(pin) => pin.owner.clone(),
            None => unreachable_owner(),
        }
    }

    /// The lease this guard was acquired with.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The reentry depth this guard reached: 1 for a fresh acquisition.
    pub fn depth(&self) -> u64 {
        self.depth
    }

    /// Why the lock was lost, if it was: its owner field vanished, renewals
    /// failed for a whole lease, or a fixed lease ran out.
    pub fn loss_reason(&self) -> Option<LossReason> {
        if let Some(reason) = self.hold.lost_reason() {
            return Some(reason);
        }
        (Instant::now() >= self.hold.valid_until()).then(|| self.expiry_reason())
    }

    /// Why a hold whose validity ended is lost.
    fn expiry_reason(&self) -> LossReason {
        if self.hold.is_watched() {
            LossReason::RenewalFailed
        } else {
            LossReason::LeaseExpired
        }
    }

    /// How long the hold stays valid as far as the masters confirmed: the
    /// lease from the latest acquire or renewal a majority confirmed, minus
    /// the time it took and the clock-drift allowance (1 % of the lease +
    /// 2 ms). Zero once the lock is lost or its validity ran out. The
    /// watchdog moves it forward at every renewal.
    pub fn validity(&self) -> Duration {
        if self.hold.lost_reason().is_some() {
            return Duration::ZERO;
        }
        self.hold.valid_until().saturating_duration_since(Instant::now())
    }

    /// The lease of this hold: the watchdog's (the client's
    /// `watchdog_lease`) or the fixed one.
    fn lease_length(&self) -> Duration {
        match self.lease {
            Lease::Watchdog => self.inner.settings.watchdog_lease,
            Lease::Fixed(d) => d,
        }
    }

    /// Whether the hold is at risk: less than half of its lease is left of
    /// its validity ([`LockGuard::validity`], as the masters confirmed it).
    /// With the watchdog, which renews every lease/3, more than two thirds
    /// are left while renewals get through, so at risk means a renewal has
    /// gone unconfirmed; the next one is due before a third of the lease is
    /// left, and it clears the risk if it is confirmed. With a fixed lease it
    /// is the lease's second half. A lost hold is at risk too.
    ///
    /// Use it to stop work that must not outlive the lock while there is
    /// still time: the lock is not lost yet, but it will be when the validity
    /// ends unless a renewal gets through. Each time a hold becomes at risk
    /// it is counted (`lockwarden_holds_at_risk_total`) and logged once at
    /// `warn`: by the watchdog for renewed holds, when observed through this
    /// method or [`LockGuard::at_risk`] for fixed leases.
    pub fn is_at_risk(&self) -> bool {
        let at_risk = self.validity() < self.risk_threshold();
        self.hold.note_risk(at_risk);
        at_risk
    }

    /// Below this validity the hold is at risk: half its lease, or half
    /// the first lease of a direct grant whose extension is still to come
    /// (an unlock hands the lock over with a short first lease, see
    /// [`LockGuard::is_extension_pending`]).
    fn risk_threshold(&self) -> Duration {
        let lease = match self.hold.pending_first_lease() {
            Some(first) => first.min(self.lease_length()),
            None => self.lease_length(),
        };
        lease / 2
    }

    /// Whether the hold still runs on a shorter first lease than it asked
    /// for, to be set to its own lease shortly. An unlock may hand the lock
    /// straight to a waiter (on one master: the fair lock's next waiter,
    /// and the reentrant lock's next waiting client when that client has
    /// one wait on the lock) with a first lease of at most
    /// [`ClientBuilder::fair_waiter_timeout`](crate::ClientBuilder::fair_waiter_timeout)
    /// (for the fair lock, cut to the waiter's queue deadline), so that a
    /// waiter that stopped meanwhile blocks the lock no longer than that; a
    /// third of the way into that lease the holder's client sets the lease
    /// it asked for. Until then [`LockGuard::validity`]
    /// is below the asked lease by design, and [`LockGuard::is_at_risk`]
    /// measures it against the first lease. False for every other hold.
    pub fn is_extension_pending(&self) -> bool {
        self.hold.pending_first_lease().is_some() && !self.is_lost()
    }

    /// Resolves when the hold is at risk (see [`LockGuard::is_at_risk`]),
    /// with the validity left then; at once if it is already. It does not
    /// resolve while renewals keep the validity above half the lease.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn at_risk(&self) -> Duration {
        let mut rx = self.hold.subscribe_lost();
        loop {
            if self.is_at_risk() {
                return self.validity();
            }
            // A pending extension changes the threshold when it lands: look
            // again then at the latest (a third of the first lease in).
            let threshold = self.risk_threshold();
            // The validity moves forward with each confirmed renewal: sleep
            // until the threshold as it stands, then look again.
            let due = self
                .hold
                .valid_until()
                .checked_sub(threshold)
                .unwrap_or_else(Instant::now);
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()) => {}
                _ = rx.wait_for(Option::is_some) => {}
            }
        }
    }

    /// Whether the lock was lost (see [`LockGuard::loss_reason`]). A lost lock
    /// is never re-acquired behind the holder's back.
    pub fn is_lost(&self) -> bool {
        self.loss_reason().is_some()
    }

    /// Resolves when the lock is lost, with the reason; never resolves while
    /// the lock stays held. Watchdog holds learn of a loss at the next
    /// renewal (at most lease/3 later).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) -> LossReason {
        let mut rx = self.hold.subscribe_lost();
        // The validity moves forward with each confirmed renewal.
        let expiry = async {
            loop {
                let until = self.hold.valid_until();
                if Instant::now() >= until {
                    return;
                }
                tokio::time::sleep_until(until.into()).await;
            }
        };
        let signalled = async {
            match rx.wait_for(Option::is_some).await.map(|r| *r) {
                Ok(Some(reason)) => reason,
                // The sender lives in the hold, which this guard keeps alive.
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            reason = signalled => reason,
            _ = expiry => {
                let reason = self.expiry_reason();
                self.hold.mark_lost(reason);
                self.hold.lost_reason().unwrap_or(reason)
            }
        }
    }

    /// Keeps the hold for at least `lease` from now, if it is still held:
    /// its lease on the server becomes `lease` from now unless it is longer
    /// already (a lease is never shortened), and [`LockGuard::validity`]
    /// (and with it [`LockGuard::is_at_risk`]) follows: `lease` minus the
    /// time the call took and the drift allowance. For a fixed lease that
    /// needs more time than planned (Redisson's `updateLeaseTime`,
    /// redsync's `Extend`); on a watchdog hold the watchdog keeps renewing
    /// as before, and the longer lease stands until it runs out. Every
    /// level of the hold shares it. Over a quorum, a majority must confirm
    /// within the new validity, as for a renewal.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the hold is lost (its lease ran out, it was
    /// force-unlocked or flushed): it is marked lost, and nothing changes;
    /// [`Error::InvalidDuration`] for a lease below
    /// [`MIN_LEASE`](crate::MIN_LEASE) or above 30 days; Redis errors (then
    /// the hold's validity is as it was).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the extension may or may not have reached the
    /// servers; the validity is moved only by a confirmed one, and a lease
    /// is never shortened either way.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        crate::settings::check_lease(lease)?;
        crate::watchdog::extend_hold(self.inner.renewing(), &self.hold, lease, &self.keys.name).await
    }

    /// Releases this level of the lock; the last level frees it and wakes a
    /// waiter. `Ok` means the release was applied on every master that
    /// granted the hold and answered within its command timeout (over a
    /// quorum: on a majority at least, and on each granting master that
    /// answered); a granting master that did not answer gets the release
    /// again in the background, and its copy of the hold ends with its
    /// lease at the latest.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the lock is no longer held by this owner (its
    /// lease ran out, it was force-unlocked or flushed): nothing was changed.
    /// Redis errors when the release could not be confirmed; it is re-sent in
    /// the background, and the lease bounds the hold, since renewal stopped.
    /// When a reply was lost and the re-sent release finds the lock no longer
    /// ours, the call reports success: the first send freed it, or the lease
    /// had run out just before; either way the lock is free of this hold.
    ///
    /// # Cancel safety
    ///
    /// Renewal stops before the first await. If this future is dropped while
    /// the release is in flight, the same release request is settled in the
    /// background; only its result is lost.
    pub async fn unlock(mut self) -> Result<()> {
        self.begin_release().run().await
    }

    /// Local bookkeeping of a release: stops renewal of the last level.
    fn begin_release(&mut self) -> Release {
        crate::observe::released(
            crate::observe::Labels::of(
                self.keys.kind.label(),
                &self.keys.name,
                self.inner.settings.metric_lock_names,
            ),
            self.acquired_at.elapsed(),
        );
        let pin = self.pin.take();
        let watchdog = self.lease == Lease::Watchdog;
        let (still_watched, must_release) = self.inner.holds.leave(&self.hold, watchdog);
        Release {
            inner: self.inner.clone(),
            keys: self.keys.clone(),
            hold: self.hold.clone(),
            // A level released under a renewed hold gives the rest a full lease.
            relet: if still_watched {
                self.inner.settings.watchdog_lease
            } else {
                Duration::ZERO
            },
            // `Lock::unlock` may have released this level already.
            must_release,
            _pin: pin,
        }
    }
}

struct Release {
    inner: Arc<Core>,
    keys: Arc<LockKeys>,
    hold: Arc<Hold>,
    relet: Duration,
    must_release: bool,
    /// Keeps the task's owner mapping alive until the release is done.
    _pin: Option<OwnerPin>,
}

impl Release {
    async fn run(self) -> Result<()> {
        if !self.must_release {
            return Ok(());
        }
        // Armed before the await: dropping this future mid-call re-sends too.
        let mut pending = Resend {
            release: Some(self.clone_parts()),
            request: crate::keys::fresh_request_id(),
            sent_at: Instant::now(),
        };
        let res = crate::quorum::release(
            &self.inner.members,
            &self.keys,
            &self.hold.holder(),
            &self.hold.node_tokens,
            self.relet,
            &pending.request,
            self.inner.settings.record_ttl,
        )
        .await;
        // Masters whose outcome is unknown were handed to the background.
        pending.release = None;
        drop(pending);
        match res {
            Ok(Released::Done) => {
                tracing::debug!(lock = %self.keys.name, "released");
                Ok(())
            }
            Ok(Released::NotHeld) => {
                self.hold.mark_lost(LossReason::NotHeld);
                Err(Error::NotHeld {
                    name: self.keys.name.clone(),
                })
            }
            Err(e) => {
                tracing::debug!(lock = %self.keys.name, error = %e, "release unconfirmed; re-sending in the background");
                Err(e)
            }
        }
    }

    fn clone_parts(&self) -> Release {
        Release {
            inner: self.inner.clone(),
            keys: self.keys.clone(),
            hold: self.hold.clone(),
            relet: self.relet,
            must_release: self.must_release,
            _pin: None,
        }
    }
}

/// A release request whose outcome is unknown (reply lost, or the `unlock`
/// future dropped mid-call). On drop it re-sends the same request in the
/// background until the server answers: the request's record makes a second
/// run a no-op. Re-sends stop well inside the record's lifetime, so a late
/// one can never subtract a second level.
struct Resend {
    /// Set while the outcome is unknown.
    release: Option<Release>,
    request: String,
    sent_at: Instant,
}

impl Drop for Resend {
    fn drop(&mut self) {
        let Some(release) = self.release.take() else { return };
        let request = std::mem::take(&mut self.request);
        let give_up = self.sent_at + release.inner.settings.record_ttl / 2;
        // Every master gets the same request again; a master that ran it
        // already answers from its record.
        let spawner = release.inner.spawner();
        for (i, m) in release.inner.members.iter().enumerate() {
            spawner.spawn(crate::quorum::resend_release(
                m.clone(),
                release.keys.clone(),
                release.hold.holder(),
                release.hold.node_tokens.get(i).copied().flatten(),
                release.relet,
                request.clone(),
                give_up,
            ));
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.pin.is_some() {
            // Detached: never block or panic in drop. With no runtime left the
            // task is dropped and the lease frees the lock.
            let release = self.begin_release();
            self.inner.spawner().spawn(async move {
                let _ = release.run().await;
            });
        }
    }
}

fn unreachable_owner() -> Owner {
    // `pin` is taken only by `unlock` and by the drop, which both consume
    // the guard: no `&self` method runs after.
    unreachable!("a guard's owner asked for after its release")
}
