//! The guard of a held lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Inner;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::Lease;
use crate::node::ReleaseReply;
use crate::owner::{Owner, OwnerPin};
use crate::watchdog::{Hold, LossReason};

/// One level of a held lock.
///
/// Release it with [`LockGuard::unlock`], which reports errors. Dropping it
/// without `unlock` stops its renewal at once and releases it in the
/// background. The guard is `Send + 'static`: it may be moved to, and
/// unlocked from, any task.
#[must_use = "dropping the guard releases the lock in the background at once; keep it for the whole critical section"]
pub struct LockGuard {
    inner: Arc<Inner>,
    keys: Arc<LockKeys>,
    hold: Arc<Hold>,
    pin: Option<OwnerPin>,
    lease: Lease,
    /// End of a fixed lease, counted from when the acquire was sent.
    expires_at: Option<Instant>,
    depth: u64,
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
    pub(crate) fn new(
        inner: Arc<Inner>,
        keys: Arc<LockKeys>,
        pin: OwnerPin,
        token: u64,
        depth: u64,
        lease: Lease,
        sent_at: Instant,
    ) -> LockGuard {
        let watchdog = lease == Lease::Watchdog;
        let hold = inner
            .holds
            .enter(&keys.lock, &pin.owner.field, token, watchdog, sent_at);
        let expires_at = match lease {
            Lease::Fixed(d) => Some(sent_at + d),
            Lease::Watchdog => None,
        };
        tracing::trace!(lock = %keys.name, token, depth, "acquired");
        LockGuard {
            inner,
            keys,
            hold,
            pin: Some(pin),
            lease,
            expires_at,
            depth,
        }
    }

    /// The fencing token of this hold: strictly greater than every token
    /// handed out before for this lock, and the same for every re-entry of
    /// the hold. Pass it to the resource you protect and have it reject
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
        match self.expires_at {
            Some(t) if Instant::now() >= t && !self.hold.is_watched() => Some(LossReason::LeaseExpired),
            _ => None,
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
        let expiry = async {
            match self.expires_at {
                Some(t) => {
                    tokio::time::sleep_until(t.into()).await;
                    while self.hold.is_watched() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                None => std::future::pending().await,
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
            _ = expiry => LossReason::LeaseExpired,
        }
    }

    /// Releases this level of the lock; the last level frees it and wakes a
    /// waiter.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the lock is no longer held by this owner (its
    /// lease ran out, it was force-unlocked or flushed): nothing was changed.
    /// Redis errors when the release could not be confirmed; the lease bounds
    /// the hold then, since renewal stopped.
    ///
    /// # Cancel safety
    ///
    /// Renewal stops before the first await. The release runs in its own task,
    /// so dropping this future does not stop it; only its result is lost.
    pub async fn unlock(mut self) -> Result<()> {
        match self.release().await {
            Ok(r) => r,
            Err(_) => Err(Error::Connection {
                op: "release",
                message: "the runtime dropped the release task".into(),
            }),
        }
    }

    fn release(&mut self) -> tokio::task::JoinHandle<Result<()>> {
        let pin = self.pin.take();
        let watchdog = self.lease == Lease::Watchdog;
        let (still_watched, must_release) = self.inner.holds.leave(&self.hold, watchdog);
        // A level released under a renewed hold gives the rest a full lease.
        let relet = if still_watched {
            self.inner.settings.watchdog_lease
        } else {
            Duration::ZERO
        };
        let inner = self.inner.clone();
        let keys = self.keys.clone();
        let hold = self.hold.clone();
        inner.spawner().spawn(async move {
            if !must_release {
                // `Lock::unlock` released this level already.
                drop(pin);
                return Ok(());
            }
            let request = inner.request_id();
            let res = inner.node.release(&keys, &hold.owner_field, relet, &request).await;
            drop(pin);
            match res {
                Ok(ReleaseReply::Released) => {
                    tracing::trace!(lock = %keys.name, "released");
                    Ok(())
                }
                Ok(ReleaseReply::StillHeld(n)) => {
                    tracing::trace!(lock = %keys.name, remaining = n, "left one level");
                    Ok(())
                }
                Ok(ReleaseReply::NotHeld) => {
                    hold.mark_lost(LossReason::NotHeld);
                    Err(Error::NotHeld {
                        name: keys.name.clone(),
                    })
                }
                Err(e) => {
                    tracing::debug!(lock = %keys.name, error = %e, "release failed; the lease bounds the hold");
                    Err(e)
                }
            }
        })
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.pin.is_some() {
            // Detached: never block or panic in drop. With no runtime left the
            // task is dropped and the lease frees the lock.
            drop(self.release());
        }
    }
}

fn unreachable_owner() -> Owner {
    // `pin` is only taken by `unlock`, which consumes the guard.
    Owner {
        id: 0,
        field: Arc::from(""),
    }
}
