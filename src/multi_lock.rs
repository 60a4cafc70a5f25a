//! Several locks taken together: all of them or none.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::runtime::Backoff;
use crate::settings::check_wait;
use crate::settings::Lease;
use crate::watchdog::LossReason;

/// Several named locks taken as one: [`MultiLock::lock`] returns when it
/// holds all of them, with one [`MultiGuard`]. Made by
/// [`Client::multi_lock`](crate::Client::multi_lock).
///
/// - All or none: the locks are tried in one fixed order (their keys,
///   sorted), each without waiting. When one is held by someone else, the
///   ones taken so far are given back at once, the call waits for that one
///   lock alone (woken by its unlock, as a plain `lock()` waits), and then
///   tries the rest again.
/// - Refused again after that wait (others keep taking the names), the
///   call keeps the locks before the refused one in the fixed order,
///   gives back the ones after it, and waits for it while holding them, so
///   it is not kept out by others taking the names one at a time. It waits
///   so for at most a second (half a fixed lease, if less) a round, then
///   gives everything back and starts again: a task that holds a later
///   name and then asks for an earlier one is kept waiting no longer.
///   Since every call waits only for a lock after all those it holds, two
///   multi-locks naming the same locks in any orders cannot deadlock.
/// - With a fixed lease, the locks held across such a wait get the lease
///   again once all are held: every lock's lease runs from when the call
///   returns.
/// - Each lock is a plain reentrant lock with its own key (names may live
///   in different cluster slots), its own watchdog renewal or fixed lease,
///   and its own fencing token ([`MultiGuard::tokens`]).
/// - Works on every deployment the reentrant lock works on, the quorum of
///   masters included.
#[derive(Clone, Debug)]
pub struct MultiLock {
    locks: Vec<Lock>,
}

impl MultiLock {
    /// `locks` in their fixed order (sorted by key, duplicates removed).
    pub(crate) fn new(mut locks: Vec<Lock>) -> MultiLock {
        locks.sort_by(|a, b| a.keys.lock.cmp(&b.keys.lock));
        locks.dedup_by(|a, b| a.keys.lock == b.keys.lock);
        MultiLock { locks }
    }

    /// The names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::name).collect()
    }

    /// Whether the current task (the owner) holds every one of the locks,
    /// as Redis sees it now.
    ///
    /// # Errors
    ///
    /// As [`Lock::hold_count`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        for lock in &self.locks {
            if !lock.is_held_by_current_task().await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Takes every lock, waiting as long as it takes, with the watchdog
    /// lease on each.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]; the locks taken so far are given back first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the locks a dropped call holds (or may have been
    /// granted) are given back in the background, as a dropped
    /// [`Lock::lock`] and a dropped guard do.
    pub async fn lock(&self) -> Result<MultiGuard> {
        match self.take(None, Lease::Watchdog).await? {
            Some(g) => Ok(g),
            None => Err(Error::Config(
                "an unbounded wait ended without the locks (a lockwarden bug)".into(),
            )),
        }
    }

    /// Takes every lock if they all come free within `wait` (zero: only
    /// try), each with `lease` (`None`: the watchdog's). `Ok(None)` when
    /// they did not; nothing is held then.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_lock`]; the locks taken so far are given back first.
    ///
    /// # Cancel safety
    ///
    /// As [`MultiLock::lock`].
    pub async fn try_lock(&self, wait: Duration, lease: impl Into<Lease>) -> Result<Option<MultiGuard>> {
        self.take(Some(wait), lease.into()).await
    }

    async fn take(&self, wait: Option<Duration>, lease: Lease) -> Result<Option<MultiGuard>> {
        if let Some(w) = wait {
            check_wait(w)?;
        }
        let deadline = wait.map(|w| Instant::now() + w);
        // Retryable failures are retried as `Lock::try_lock` retries them:
        // within the wait, or for a wait without one, while they last less
        // than the client's `retry_transient_for`.
        let retry_for = self
            .locks
            .first()
            .map_or(Duration::ZERO, |l| l.inner.settings.retry_transient_for);
        let mut failing_since: Option<Instant> = None;
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_MAX);
        // Per lock, in order: its guard once held.
        let mut held: Vec<Option<LockGuard>> = (0..self.locks.len()).map(|_| None).collect();
        // Set once a wait has ended with its lock: from then on, a refusal
        // is waited out holding the locks before the refused one.
        let mut lost_a_race = false;
        // Whether a lock was held across a wait (a fixed lease then ticked
        // on it while waiting: set again once all are held).
        let mut held_across_wait = false;
        loop {
            let blocked = match self.sweep(&mut held, lease).await {
                Ok(blocked) => blocked,
                Err(e) => {
                    give_back(&mut held).await;
                    let now = Instant::now();
                    let since = *failing_since.get_or_insert(now);
                    let end = deadline.unwrap_or(since + retry_for);
                    if !e.is_retryable() || now >= end {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "a multi-lock attempt failed; retrying");
                    tokio::time::sleep(backoff.next_jittered().min(end - now)).await;
                    continue;
                }
            };
            failing_since = None;
            backoff.reset();
            let Some(i) = blocked else {
                let guards: Vec<LockGuard> = held.into_iter().flatten().collect();
                match (lease, held_across_wait) {
                    (Lease::Fixed(l), true) => match lease_again(guards, l).await? {
                        Some(guards) => return Ok(Some(MultiGuard { guards })),
                        None => {
                            held = (0..self.locks.len()).map(|_| None).collect();
                            held_across_wait = false;
                            continue;
                        }
                    },
                    _ => return Ok(Some(MultiGuard { guards })),
                }
            };
            // Until the call has lost a race, nothing is held while it waits;
            // after, it keeps the locks before the refused one (the fixed
            // order: a caller waits only for a lock after every one it
            // holds, so no two callers wait for each other) and gives back
            // the ones after it.
            let keep = if lost_a_race { i } else { 0 };
            give_back(&mut held[keep..]).await;
            let holding = held[..keep].iter().any(Option::is_some);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                give_back(&mut held).await;
                return Ok(None);
            }
            held_across_wait |= holding;
            match self.wait_for(i, deadline, holding, lease).await {
                Ok(Some(g)) => {
                    held[i] = Some(g);
                    lost_a_race = true;
                }
                Ok(None) if holding && deadline.is_none_or(|d| Instant::now() < d) => {
                    // The round is over: give everything back and start again.
                    give_back(&mut held).await;
                    held_across_wait = false;
                }
                Ok(None) => {
                    give_back(&mut held).await;
                    return Ok(None);
                }
                Err(e) => {
                    give_back(&mut held).await;
                    return Err(e);
                }
            }
        }
    }
}

impl MultiLock {
    /// Waits for lock `i` until `deadline`, and while `holding` others for
    /// a round at most ([`holding_round`]).
    async fn wait_for(
        &self,
        i: usize,
        deadline: Option<Instant>,
        holding: bool,
        lease: Lease,
    ) -> Result<Option<LockGuard>> {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let bound = match (holding, remaining) {
            (true, r) => Some(r.map_or(holding_round(lease), |r| r.min(holding_round(lease)))),
            (false, r) => r,
        };
        match bound {
            Some(b) => self.locks[i].try_lock(b, lease).await,
            None => self.locks[i].lock_with_lease(lease).await.map(Some),
        }
    }

    /// Tries every lock not in `held` yet, in order, without waiting, until
    /// one is refused: its index (`None`: all are held). The locks taken
    /// stay in `held`, also on an error.
    async fn sweep(&self, held: &mut [Option<LockGuard>], lease: Lease) -> Result<Option<usize>> {
        for (i, lock) in self.locks.iter().enumerate() {
            if held[i].is_some() {
                continue;
            }
            match lock.try_lock(Duration::ZERO, lease).await? {
                Some(g) => held[i] = Some(g),
                None => return Ok(Some(i)),
            }
        }
        Ok(None)
    }
}

/// The longest a call waits for one lock while holding others of its
/// locks; then it gives them back and starts again.
const HOLDING_WAIT: Duration = Duration::from_secs(1);

/// How long a wait while holding lasts at most: [`HOLDING_WAIT`], so a
/// caller that takes these names in another order (a plain lock held,
/// then another asked) is never kept waiting on this one for long; half a
/// fixed lease if less, which keeps half of it for after the wait.
fn holding_round(lease: Lease) -> Duration {
    match lease {
        Lease::Fixed(l) => HOLDING_WAIT.min(l / 2),
        Lease::Watchdog => HOLDING_WAIT,
    }
}

/// Sets `lease` again on every guard, so that every lock's lease runs
/// from now, as asked: the guards, or `None` when one was lost meanwhile
/// or the extension failed in a way worth trying again (all are given
/// back then, and the call goes round again).
async fn lease_again(guards: Vec<LockGuard>, lease: Duration) -> Result<Option<Vec<LockGuard>>> {
    let extended = futures::future::join_all(guards.iter().map(|g| g.extend(lease))).await;
    let Some(e) = extended.into_iter().find_map(Result::err) else {
        return Ok(Some(guards));
    };
    let mut held: Vec<Option<LockGuard>> = guards.into_iter().map(Some).collect();
    give_back(&mut held).await;
    if !e.is_retryable() && !matches!(e, Error::NotHeld { .. }) {
        return Err(e);
    }
    tracing::debug!(error = %e, "setting a multi-lock's leases failed; trying again");
    Ok(None)
}

/// The first pause before a failed attempt is tried again; it doubles up
/// to [`RETRY_MAX`] (as `Lock::try_lock`'s retries).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Gives back every guard in `held` at once (the releases run together).
async fn give_back(held: &mut [Option<LockGuard>]) {
    let releases = held.iter_mut().filter_map(Option::take).map(|g| async move {
        if let Err(e) = g.unlock().await {
            tracing::debug!(error = %e, "giving back a lock of a multi-lock failed; its lease frees it");
        }
    });
    futures::future::join_all(releases).await;
}

/// The locks of a [`MultiLock`], held together. Released together by
/// [`MultiGuard::unlock`], or in the background when dropped.
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// Each lock's guard, in the order they were taken.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Each lock's name and fencing token.
    pub fn tokens(&self) -> Vec<(&str, u64)> {
        self.guards.iter().map(|g| (g.name(), g.token())).collect()
    }

    /// How long all the locks are known to be held at least: the least of
    /// their validities.
    pub fn validity(&self) -> Duration {
        self.guards.iter().map(LockGuard::validity).min().unwrap_or_default()
    }

    /// Whether one of the locks is at risk (see
    /// [`LockGuard::is_at_risk`]).
    pub fn is_at_risk(&self) -> bool {
        self.guards.iter().any(LockGuard::is_at_risk)
    }

    /// Whether one of the locks still runs on the short first lease of a
    /// direct grant, its own lease to be set shortly (see
    /// [`LockGuard::is_extension_pending`]): [`MultiGuard::validity`]
    /// is short by design until then.
    pub fn is_extension_pending(&self) -> bool {
        self.guards.iter().any(LockGuard::is_extension_pending)
    }

    /// Resolves when one of the locks is at risk, with the least validity
    /// left then (see [`LockGuard::at_risk`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn at_risk(&self) -> Duration {
        let each = self.guards.iter().map(|g| Box::pin(g.at_risk()));
        futures::future::select_all(each).await;
        self.validity()
    }

    /// Why one of the locks was lost, if one was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.guards.iter().find_map(LockGuard::loss_reason)
    }

    /// Whether one of the locks was lost.
    pub fn is_lost(&self) -> bool {
        self.loss_reason().is_some()
    }

    /// Waits until one of the locks is lost; why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) -> LossReason {
        let each = self.guards.iter().map(|g| Box::pin(g.lost()));
        futures::future::select_all(each).await.0
    }

    /// Keeps every lock for at least `lease` from now (see
    /// [`LockGuard::extend`]), all at once.
    ///
    /// # Errors
    ///
    /// The first error of any lock's extension ([`Error::NotHeld`](crate::Error::NotHeld) when
    /// one of them is lost); the others are extended all the same.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::extend`].
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let results = futures::future::join_all(self.guards.iter().map(|g| g.extend(lease))).await;
        results.into_iter().collect()
    }

    /// Releases every lock (together).
    ///
    /// # Errors
    ///
    /// The first error among the releases ([`Error::NotHeld`](crate::Error::NotHeld)
    /// for a lock that was lost); the others are released regardless.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock`]: each release completes in the background.
    pub async fn unlock(self) -> Result<()> {
        let results = futures::future::join_all(self.guards.into_iter().map(LockGuard::unlock)).await;
        results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
    }
}
