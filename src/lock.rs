//! The reentrant lock handle and its acquire loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{check_lease, check_wait, Inner};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::LockKeys;
use crate::owner::{Owner, OwnerPin, Owners};
use crate::quorum::{Ask, Attempt, Released};

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

/// A handle on one named reentrant lock.
///
/// Cheap to clone; it holds nothing by itself. Holding the lock is what a
/// [`LockGuard`] represents. By default the owner is the calling tokio task:
/// `lock()` in a task that holds the lock already re-enters it, and each
/// guard must then be released. [`Lock::with_owner`] fixes the owner instead.
#[derive(Clone)]
pub struct Lock {
    pub(crate) inner: Arc<Inner>,
    pub(crate) keys: Arc<LockKeys>,
    owner: Option<Owner>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.keys.name)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(inner: Arc<Inner>, keys: Arc<LockKeys>) -> Lock {
        Lock {
            inner,
            keys,
            owner: None,
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
    /// Re-enters when the owner holds it already. Waiting is driven by the
    /// unlock message on the lock's channel, bounded by the holder's
    /// remaining lease, so a lost message only delays.
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
    pub async fn status(&self) -> Result<crate::LockStatus> {
        let mut all = self
            .each("status", |node| async {
                let raw = node.status(&self.keys).await?;
                crate::LockStatus::parse(&self.keys.name, &self.keys.lock, raw)
            })
            .await?;
        // Over a quorum: the view of the master ranking at the majority line
        // by remaining lease (held, with at least that lease, on a majority),
        // with the highest token any master has.
        let need = crate::quorum::majority(self.inner.members.len());
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
        let n = self.inner.members.len();
        let results = futures::future::join_all(self.inner.members.iter().map(|m| f(&m.node))).await;
        let mut ok = Vec::with_capacity(n);
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(v) => ok.push(v),
                Err(e) => errors.push(e),
            }
        }
        if ok.len() < crate::quorum::majority(n) {
            return Err(crate::quorum::quorum_error(op, n, ok.len(), errors));
        }
        Ok(ok)
    }

    /// The largest value at least a majority of all masters reported
    /// (`floor` when fewer did).
    fn majority_value<T: Ord>(&self, mut values: Vec<T>, floor: T) -> T {
        let need = crate::quorum::majority(self.inner.members.len());
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
            let res = crate::quorum::release(
                &inner.members,
                &keys,
                &owner.field,
                &tokens,
                Duration::ZERO,
                &request,
                inner.first().record_ttl,
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
    /// left untouched).
    ///
    /// # Cancel safety
    ///
    /// The script may or may not have run when the future is dropped.
    pub async fn force_unlock(&self) -> Result<bool> {
        let deleted = self.each("force_unlock", |node| node.force_unlock(&self.keys)).await?;
        Ok(deleted.into_iter().any(|d| d))
    }

    fn current_owner(&self) -> Option<Owner> {
        self.owner.clone().or_else(|| self.inner.owners.peek_current())
    }

    fn pin(&self) -> OwnerPin {
        match &self.owner {
            Some(owner) => Owners::pin_explicit(owner.clone()),
            None => self.inner.owners.pin_current(),
        }
    }

    pub(crate) fn labels(&self) -> crate::observe::Labels<'_> {
        crate::observe::Labels::of(&self.keys, self.inner.settings.metric_lock_names)
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

    /// The acquire loop: register interest in the wake channel, attempt,
    /// then sleep until a wake message or the holder's remaining lease; a fair
    /// lock adds its queue rules (see `lua/fair_acquire.lua`).
    /// `wait: None` waits forever.
    async fn acquire_inner(&self, wait: Option<Duration>, lease: Lease) -> Result<Option<LockGuard>> {
        if let Lease::Fixed(d) = lease {
            check_lease(d)?;
        }
        let deadline = wait.map(|w| Instant::now() + w);
        let pin = self.pin();
        let fair = self.keys.fair;
        // A fair waiter takes its place in the queue with its very first
        // attempt, so its position is the order it asked in. From then on,
        // every way out without the lock leaves the queue.
        let will_wait = wait != Some(Duration::ZERO);
        // On one master a queued fair waiter asks for direct grants: an
        // unlock hands it the lock and says so in the wake message, which
        // saves the waiter's acquire round trip. Every attempt of the wait
        // then carries the same request id, whose record an unlock fills
        // with the grant (so a lost message only delays). No record exists
        // before a success, so re-using the id across attempts is safe,
        // except after an attempt whose outcome is unknown: the quorum layer
        // then re-sends that request in the background and gives back what
        // it got, so the wait goes on under a new id (see `renew_request`).
        // (Not with replica acknowledgements: a grant is written by the
        // unlock, and only the waiter's own write can be waited for.)
        let direct = fair && will_wait && self.inner.members.len() == 1 && !self.inner.first().confirm.any();
        let mut request = direct.then(crate::keys::fresh_request_id);
        let wake = request.as_ref().map(|_| crate::client::WakeId::take(&self.inner));
        let wake_name = wake.as_ref().map(|w| w.name.as_str());
        let mut queued = QueueExit {
            lock: self,
            owner: &pin.owner.field,
            request: request.clone(),
            armed: fair && will_wait,
        };
        // A fair waiter is woken on a channel of its own (its wake id's, or
        // its owner's), so an unlock wakes only the head; others share the
        // lock's channel.
        let channel = match (&wake, fair) {
            (Some(w), _) => format!("{}{}", self.keys.wake_prefix, w.name),
            (None, true) => format!("{}{}", self.keys.wake_prefix, pin.owner.field),
            (None, false) => self.keys.channel.clone(),
        };
        // A waiter whose channel is still subscribed (its wake id waited a
        // moment ago) keeps it from before its first attempt: any grant
        // after that attempt then reaches it as a message.
        let early = wake
            .as_ref()
            .and_then(|_| self.inner.pubsub.interest_if_subscribed(&channel));
        let subscribed_first = early.is_some();
        // First attempt without subscribing: the uncontended path is a
        // single script call.
        let first_sent = Instant::now();
        let mut retries = Retries::new(self, deadline);
        let mut first = true;
        let first_pttl = match self
            .attempt(&pin, lease, will_wait, request.as_deref().zip(wake_name))
            .await
        {
            Ok(Ok(guard)) => {
                queued.armed = false; // taking the lock removed us from the queue
                return Ok(Some(guard));
            }
            Ok(Err((pttl, _))) => pttl,
            Err(e) => {
                // Nothing is known of the lock: the loop's first turn makes a
                // full attempt after the pause.
                first = false;
                renew_request(&e, &mut request, &mut queued);
                tokio::time::sleep(retries.after(e)?).await;
                0
            }
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            queued.leave_now().await;
            return retries.at_deadline();
        }
        let interest = early.unwrap_or_else(|| self.inner.pubsub.interest(&channel));
        // Subscribing counts against the wait like everything else, and is
        // retried like an attempt.
        let subscribed = async {
            loop {
                match interest.ready().await {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        let pause = retries.after(e)?;
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        };
        match deadline {
            Some(d) => {
                if tokio::time::timeout_at(d.into(), subscribed).await.is_err() {
                    queued.leave_now().await;
                    return retries.at_deadline();
                }
            }
            None => subscribed.await?,
        }
        // Live fair waiters re-run the acquire script (refreshing their
        // deadline) three times per waiter timeout, however long the holder
        // keeps the lock.
        let refresh = self.inner.first().waiter_timeout / 3;
        let mut queued_backoff = Duration::from_millis(10);
        let mut split_backoff = Duration::from_millis(5);
        let _waiting = crate::observe::Waiting::enter(&self.inner.uuid);
        let mut sent_at = first_sent;
        loop {
            // Registered before the attempt: an unlock landing between the
            // attempt and the sleep still wakes us. (The first attempt above
            // ran before the subscription existed, so it is not enough.)
            let notified = interest.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            queued.armed = fair;
            // A waiter asking for grants first checks cheaply whether the
            // lock was freed or granted to it before it subscribed; if
            // neither, its queued place and its first attempt's answer stand
            // (a later grant arrives as a message, or in the record).
            let unchanged = match (first, request.as_deref()) {
                (true, Some(_)) if subscribed_first => Ok(true),
                (true, Some(id)) => self
                    .inner
                    .first()
                    .worth_an_attempt(&self.keys, id)
                    .await
                    .map(|worth| !worth),
                _ => Ok(false),
            };
            first = false;
            let outcome = match unchanged {
                Ok(true) => Ok(Err((first_pttl, false))),
                Ok(false) => {
                    sent_at = Instant::now();
                    self.attempt(&pin, lease, true, request.as_deref().zip(wake_name)).await
                }
                Err(e) => Err(e),
            };
            // A retryable failure pauses (backing off) and tries again, until
            // the deadline or the client's retry limit: a blip must not end
            // a wait that has time left.
            let (pttl, split, pause) = match outcome {
                Ok(Ok(guard)) => {
                    queued.armed = false; // taking the lock removed us from the queue
                    return Ok(Some(guard));
                }
                Ok(Err((pttl, split))) => {
                    retries.answered();
                    (pttl, split, None)
                }
                Err(e) => {
                    renew_request(&e, &mut request, &mut queued);
                    (0, false, Some(retries.after(e)?))
                }
            };
            let mut sleep = sleep_hint(pttl);
            if split {
                // Masters granted to different contenders and each gave its
                // part back: retry after a random pause so they do not
                // collide again (and again). A fair waiter also leaves every
                // queue: masters whose queues disagree on the order would
                // otherwise keep handing their heads different waiters.
                if fair {
                    queued.leave_now().await;
                }
                sleep = jitter(split_backoff);
                split_backoff = (split_backoff * 2).min(Duration::from_millis(200));
            } else {
                split_backoff = Duration::from_millis(5);
            }
            if fair && !split {
                if pttl == FREE_BUT_QUEUED {
                    // The head is about to take the lock; re-read soon to learn
                    // its lease (an expiring lease publishes nothing). Backs
                    // off, so a dead head costs a handful of attempts until
                    // it is evicted.
                    sleep = queued_backoff;
                    queued_backoff = (queued_backoff * 2).min(refresh);
                } else {
                    queued_backoff = Duration::from_millis(10);
                }
                sleep = sleep.min(refresh);
            }
            if let Some(pause) = pause {
                sleep = pause;
            }
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    queued.leave_now().await;
                    return retries.at_deadline();
                }
                sleep = sleep.min(d - now);
            }
            if split || pause.is_some() {
                // Not woken by messages: after a split, the unlock message
                // of our own give-back (and every other contender's) would
                // end the pause at once, and the attempts would spin; after
                // a failure, a message says nothing about when Redis will
                // answer again. An unlock during the pause waits for its end.
                tokio::time::sleep(sleep).await;
                continue;
            }
            tokio::select! {
                _ = notified => {
                    crate::observe::wakeup(self.labels(), "pubsub");
                    let granted = match (&request, interest.take_grant()) {
                        (Some(id), Some(msg)) => self.claim_grant(&pin, lease, &msg, id, sent_at),
                        _ => None,
                    };
                    if let Some(guard) = granted {
                        queued.armed = false; // the grant removed us from the queue
                        tracing::trace!("granted the lock by an unlock");
                        return Ok(Some(guard));
                    }
                    tracing::trace!("woken by an unlock message");
                }
                _ = tokio::time::sleep(sleep) => {
                    crate::observe::wakeup(self.labels(), "lease_timeout");
                    tracing::trace!(slept_ms = sleep.as_millis() as u64, "woken by the lease bound");
                }
            }
        }
    }

    /// The guard for a direct grant (see `lua/fair_release.lua`),
    /// when `msg` ("g <token> <lease ms> <request id>") names this wait's
    /// `request`. The grant happened after the attempt sent at `sent_at`
    /// (else that attempt would have returned it), so its lease is counted
    /// from there; `None` also when half of it would be gone by that count.
    /// A grant's lease is at most the waiter's queue deadline, so a grantee
    /// that died blocks the queue no longer than its eviction would; a
    /// third of the way into it, a hold still held gets its own lease (as a
    /// renewal would). Short holds never need that call.
    fn claim_grant(
        &self,
        pin: &OwnerPin,
        lease: Lease,
        msg: &str,
        request: &str,
        sent_at: Instant,
    ) -> Option<LockGuard> {
        let mut parts = msg.split(' ');
        let (Some("g"), Some(token), Some(ms), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let (Ok(token), Ok(ms)) = (token.parse::<u64>(), ms.parse::<u64>()) else {
            return None;
        };
        if id != request {
            return None; // an earlier wait's grant, already settled by it
        }
        let granted = Duration::from_millis(ms);
        if Instant::now() >= sent_at + granted / 2 {
            // The waiter slept long since its last attempt (or the lease is
            // short): counted from then, too little of the grant would be
            // left. Its next attempt returns the grant from the record, with
            // its own lease counted from now.
            return None;
        }
        let grant = crate::quorum::Grant {
            token,
            depth: 1,
            node_tokens: vec![Some(token)],
            sent_at,
            valid_until: sent_at + granted.saturating_sub(crate::quorum::drift(granted)),
        };
        let guard = LockGuard::new(self.inner.clone(), self.keys.clone(), pin.duplicate(), &grant, lease);
        // Where the hold's own lease ends: the watchdog's runs from the
        // extension, a fixed one from the acquisition.
        let end = match lease {
            Lease::Watchdog if self.inner.settings.watchdog_lease > granted => None,
            Lease::Fixed(d) if d > granted => Some(sent_at + d),
            _ => return Some(guard),
        };
        self.inner.extensions.schedule(guard.hold(), sent_at + granted / 3, end);
        Some(guard)
    }

    /// One acquire attempt on every master (`enqueue`: a fair waiter joins
    /// or refreshes its place in the queue). Returns the guard, or the
    /// holders' smallest PTTL and whether masters split between contenders.
    /// `grant_to`: the wait's request id and wake id when it asks for
    /// direct grants.
    ///
    /// Cancel safe: levels granted anywhere are released in the background if
    /// this future is dropped, and requests whose reply was lost are settled
    /// the same way (see `quorum::acquire`).
    async fn attempt(
        &self,
        pin: &OwnerPin,
        lease: Lease,
        enqueue: bool,
        grant_to: Option<(&str, &str)>,
    ) -> Result<std::result::Result<LockGuard, (i64, bool)>> {
        let lease_d = match lease {
            Lease::Watchdog => self.inner.settings.watchdog_lease,
            Lease::Fixed(d) => d,
        };
        let request = grant_to.map_or_else(crate::keys::fresh_request_id, |(r, _)| r.to_owned());
        let known = self
            .inner
            .holds
            .find(&self.keys.lock, &pin.owner.field)
            .filter(|h| h.lost_reason().is_none())
            .map(|h| (h.token, h.node_tokens.clone()));
        let ask = Ask {
            keys: &self.keys,
            owner: &pin.owner.field,
            lease: lease_d,
            request: &request,
            enqueue,
            grant: grant_to.map(|(_, w)| w),
            known,
        };
        let reply = crate::quorum::acquire(&self.inner.members, &ask).await;
        tracing::trace!(enqueue, reply = ?reply, "attempt");
        Ok(match reply? {
            Attempt::Granted(grant) => {
                if self.keys.fair && enqueue && self.inner.members.len() > 1 {
                    self.leave_where_not_held(&pin.owner.field, &grant.node_tokens);
                }
                Ok(LockGuard::new(
                    self.inner.clone(),
                    self.keys.clone(),
                    pin.duplicate(),
                    &grant,
                    lease,
                ))
            }
            Attempt::Denied { pttl, split } => Err((pttl, split)),
        })
    }

    /// A fair waiter granted by a majority leaves the queues of the other
    /// masters (in the background) so it does not block them.
    fn leave_where_not_held(&self, owner: &Arc<str>, node_tokens: &[Option<u64>]) {
        for (i, t) in node_tokens.iter().enumerate() {
            if t.is_none() {
                let (m, keys, owner) = (self.inner.members[i].clone(), self.keys.clone(), owner.clone());
                self.inner.spawner().spawn(async move {
                    let _ = m.node.leave(&keys, &owner, None).await;
                });
            }
        }
    }

    /// Leaves the queue on every master; fine when a majority confirmed.
    /// `request`: the wait's id, when it asked for direct grants.
    async fn leave_all(&self, owner: &str, request: Option<&str>) -> Result<()> {
        self.each("leave", |node| node.leave(&self.keys, owner, request))
            .await
            .map(|_| ())
    }
}

/// A fair waiter's place in the queue. Dropped while armed (the waiting
/// future cancelled, or an error), it leaves the queue in the background at
/// once, re-sending until the server answers (leaving is idempotent).
/// A wait that asked for direct grants also gives back a grant it never
/// learned of.
struct QueueExit<'a> {
    lock: &'a Lock,
    owner: &'a Arc<str>,
    /// The wait's current request id, when it asks for direct grants.
    request: Option<String>,
    armed: bool,
}

/// After a failed attempt of a wait that asks for direct grants: when the
/// attempt's outcome is unknown, the quorum layer re-sends it in the
/// background and gives back whatever it got (a hold, or a grant an unlock
/// wrote to its record), so the wait must not replay that id and take the
/// same record as its own: it goes on under a fresh id, which its next
/// attempt writes into its ask. After a known refusal the id stays: a grant
/// written to it since is the wait's to claim.
fn renew_request(e: &Error, request: &mut Option<String>, queued: &mut QueueExit<'_>) {
    if request.is_some() && e.is_outcome_unknown() {
        *request = Some(crate::keys::fresh_request_id());
        queued.request = request.clone();
    }
}

impl QueueExit<'_> {
    /// Leaves now and waits for it; on failure the drop retries in the background.
    async fn leave_now(&mut self) {
        if !self.armed {
            return;
        }
        if self.lock.leave_all(self.owner, self.request.as_deref()).await.is_ok() {
            self.armed = false;
        }
    }
}

impl Drop for QueueExit<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (lock, owner, request) = (self.lock.clone(), self.owner.clone(), self.request.take());
        lock.inner.spawner().spawn(async move {
            let give_up = Instant::now() + lock.inner.first().waiter_timeout;
            let mut pause = Duration::from_millis(50);
            while let Err(e) = lock.leave_all(&owner, request.as_deref()).await {
                if Instant::now() + pause >= give_up {
                    // The waiter timeout evicts it anyway.
                    tracing::debug!(lock = %lock.keys.name, error = %e, "leaving the queue failed; eviction will remove the entry");
                    break;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }
}

/// The retryable failures of one wait. They are retried with a backoff
/// (50 ms doubling to 1 s, jittered) until the wait's deadline, or for a wait
/// without one, until they have lasted the client's `retry_transient_for`
/// with no answer in between; the last error is returned then.
struct Retries<'a> {
    lock: &'a Lock,
    deadline: Option<Instant>,
    /// When the current run of failures began, and its last error.
    failing: Option<(Instant, Error)>,
    backoff: Duration,
}

impl<'a> Retries<'a> {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);

    fn new(lock: &'a Lock, deadline: Option<Instant>) -> Retries<'a> {
        Retries {
            lock,
            deadline,
            failing: None,
            backoff: Self::FIRST,
        }
    }

    /// After a failed call: the pause before trying again, or the error
    /// when it is not retryable or no time is left.
    fn after(&mut self, e: Error) -> Result<Duration> {
        if !e.is_retryable() {
            return Err(e);
        }
        let now = Instant::now();
        let since = self.failing.as_ref().map_or(now, |(t, _)| *t);
        let end = self
            .deadline
            .unwrap_or_else(|| since + self.lock.inner.settings.retry_transient_for);
        if now >= end {
            return Err(e);
        }
        let pause = jitter(self.backoff).min(end - now);
        self.backoff = (self.backoff * 2).min(Self::MAX);
        crate::observe::acquire_retry(self.lock.labels(), crate::observe::reason(&e));
        if self.failing.is_none() {
            tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "acquire attempt failed; retrying");
        } else {
            tracing::debug!(error = %e, retry_in_ms = pause.as_millis() as u64, "acquire attempt failed again; retrying");
        }
        self.failing = Some((since, e));
        Ok(pause)
    }

    /// An attempt was answered: the run of failures is over.
    fn answered(&mut self) {
        if self.failing.take().is_some() {
            tracing::info!("acquire attempts answered again");
        }
        self.backoff = Self::FIRST;
    }

    /// The outcome of a wait whose deadline passed: the last error while
    /// failures were still going on, otherwise "not acquired".
    fn at_deadline(&mut self) -> Result<Option<LockGuard>> {
        match self.failing.take() {
            Some((_, e)) => Err(e),
            None => Ok(None),
        }
    }
}

/// The fair acquire's reply when the lock is free but other waiters are ahead.
const FREE_BUT_QUEUED: i64 = -3;

/// How long to sleep when the holder has `pttl` ms of lease left.
fn sleep_hint(pttl: i64) -> Duration {
    match pttl {
        // Fair lock free but others ahead: the wake message (or the refresh
        // bound) ends the sleep.
        FREE_BUT_QUEUED => Duration::MAX,
        // A key without expiry (leaked by a tool or a bug): re-check now and then.
        -1 => Duration::from_secs(1),
        p if p <= 0 => Duration::from_millis(1),
        p => Duration::from_millis(p as u64 + 1),
    }
}

/// A random pause in `[max/2, max]`.
fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    let frac = (h.finish() % 1000) as u32;
    max / 2 + max / 2 * frac / 1000
}

fn unreachable_wait() -> Result<LockGuard> {
    Err(Error::Config(
        "an unbounded wait ended without a lock (a lockwarden bug)".into(),
    ))
}
