//! The fair lock's policy over the wait loop: its place in the queue, its
//! own wake channel, and direct grants.
//!
//! A fair waiter takes its place in the queue with its very first attempt,
//! so its position is the order it asked in; from then on every way out
//! without the lock leaves the queue (`FairWait::queued`, a `wait::LeaveOnExit`). Unlocks wake only the
//! head, on a channel of its own. On one master a queued waiter also asks
//! for direct grants: an unlock hands it the lock and says so in the wake
//! message (`lua/fair_release.lua`), which saves the waiter's acquire round
//! trip.

use std::future::Future;
use std::time::Duration;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::Str;
use crate::protocol::{Waiting, FREE_BUT_QUEUED};
use crate::pubsub::Interest;
use crate::quorum::Grant;
use crate::runtime::Backoff;
use crate::wait::{Channel, LeaveOnExit, Message, Outcome, Policy, Refusal, Request, Target, Wake};

/// Where one grant-asking fair waiter of this client listens:
/// `wake_prefix` + `<client-uuid>:w<n>`. Each waiting call holds the lowest
/// free `n` while it waits, so no two waiters share one, and a client that
/// waits again and again listens on the same channel, which then stays
/// subscribed between its waits (pubsub's linger).
struct WakeId<'a> {
    core: &'a Core,
    n: u64,
    name: String,
}

impl WakeId<'_> {
    fn take(core: &Core) -> WakeId<'_> {
        let n = core.grants.wake_numbers.lock().take();
        WakeId {
            core,
            n,
            name: format!("{}:w{n}", core.uuid),
        }
    }
}

impl Drop for WakeId<'_> {
    fn drop(&mut self) {
        self.core.grants.wake_numbers.lock().give_back(self.n);
    }
}

/// One wait of a fair lock.
pub(crate) struct FairWait<'a> {
    t: Target<'a>,
    owner: &'a Str,
    /// The wait joins the queue (it is not a single attempt).
    will_wait: bool,
    /// The wait's request id, when it asks for direct grants: every attempt
    /// carries it, and an unlock fills its record with the grant (so a lost
    /// message only delays). No record exists before a success, so re-using
    /// it across attempts is safe, except after an attempt whose outcome is
    /// unknown (see [`FairWait::on_error`]).
    request: Option<String>,
    wake: Option<WakeId<'a>>,
    /// A fair waiter's place in the queue, armed while it may be there.
    /// Dropped armed (the waiting future cancelled, or an error), it leaves
    /// the queue in the background at once, re-sending until the server
    /// answers (leaving is idempotent). A wait that asked for direct
    /// grants also gives back a grant it never learned of.
    queued: LeaveOnExit,
    /// Live waiters re-run the acquire script (refreshing their deadline)
    /// three times per waiter timeout, however long the holder keeps it.
    refresh: Duration,
    queued_backoff: Backoff,
}

impl<'a> FairWait<'a> {
    /// The wait of `owner`; `will_wait`: more than one attempt; `grants`:
    /// the kind hands the lock to its head directly (lockwarden's fair
    /// kinds; Redisson's fair lock only wakes it).
    pub(crate) fn new(t: Target<'a>, owner: &'a Str, will_wait: bool, grants: bool) -> FairWait<'a> {
        // Direct grants need one master, and none of the replica or disk
        // confirmations: a grant is written by the unlock, and only the
        // waiter's own write can be waited for.
        let direct = grants && will_wait && t.core.members.len() == 1 && !t.core.settings.confirmed_writes;
        let request = direct.then(crate::keys::fresh_request_id);
        let refresh = t.core.settings.waiter_timeout / 3;
        FairWait {
            t,
            owner,
            will_wait,
            wake: request.as_ref().map(|_| WakeId::take(t.core)),
            queued: {
                let mut queued = LeaveOnExit::leave(t, owner, will_wait);
                queued.request = request.clone();
                queued.asked.extend(request.clone());
                queued
            },
            request,
            refresh,
            queued_backoff: Backoff::new(Duration::from_millis(10), refresh),
        }
    }
}

impl Policy for FairWait<'_> {
    /// Its wake id's channel, or its owner's: an unlock wakes only the
    /// head. A wake id's channel may still be subscribed (by an earlier
    /// wait of the client): the wait then listens from before its first
    /// attempt.
    fn channel(&mut self, t: Target<'_>) -> Channel {
        let end: &str = match &self.wake {
            Some(w) => &w.name,
            None => self.owner,
        };
        let name: Str = crate::keys::joined(&[&t.keys.wake_prefix, end]).into();
        match self
            .wake
            .as_ref()
            .and_then(|_| t.core.pubsub.interest_if_subscribed(&name))
        {
            Some(interest) => Channel::Open(interest),
            None => Channel::Named(name),
        }
    }

    /// Each attempt (re-)joins the queue, so leaving is owed again. On the
    /// first turn, a waiter asking for grants first checks cheaply whether
    /// the lock was freed or granted to it before it subscribed; if
    /// neither, its queued place and its first attempt's answer stand (a
    /// later grant arrives as a message, or in the record).
    fn turn(
        &mut self,
        t: Target<'_>,
        _interest: &Interest,
        first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.queued.arm();
        let request = self.request.as_deref();
        async move {
            match (first, request) {
                (None, _) | (_, None) => Ok(false),
                (Some(true), Some(_)) => Ok(true),
                (Some(false), Some(id)) => t.core.first().worth_an_attempt(t.keys, id).await.map(|worth| !worth),
            }
        }
    }

    fn request(&self) -> Request<'_> {
        Request {
            waiting: if self.will_wait {
                Waiting::Listening
            } else {
                Waiting::No
            },
            grant_to: self.request.as_deref().zip(self.wake.as_ref().map(|w| w.name.as_str())),
            ..Request::default()
        }
    }

    fn pause(&mut self, refusal: &Refusal, bound: Duration) -> Duration {
        let sleep = if refusal.pttl == FREE_BUT_QUEUED {
            // The head is about to take the lock; re-read soon to learn its
            // lease (an expiring lease publishes nothing). Backs off, so a
            // dead head costs a handful of attempts until it is evicted.
            self.queued_backoff.next()
        } else {
            self.queued_backoff.reset();
            bound
        };
        sleep.min(self.refresh)
    }

    fn on_wake(&mut self, m: Message<'_>) -> Wake {
        let (Some(request), Some((token, ms, id, n))) = (
            self.request.as_deref(),
            m.payload.as_deref().and_then(crate::wait::parse_grant),
        ) else {
            return Wake::Attempt;
        };
        if id != request {
            // This wait's channel was an earlier wait's (each channel serves
            // one wait at a time): a grant for another request is that
            // wait's, which settled it otherwise, and says nothing new to
            // this one.
            return Wake::Stale;
        }
        match crate::wait::claim_grant(self.t, &m, request, token, ms, n) {
            Some(guard) => {
                self.queued.disarm(); // the grant removed us from the queue
                Wake::Granted(guard)
            }
            None => Wake::Attempt,
        }
    }

    /// Granted: see [`FairWait::granted`]. Failed: see
    /// [`FairWait::failed`]. A split leaves every queue: masters whose
    /// queues disagree on the order would otherwise keep handing their
    /// heads different waiters. Giving up leaves the queue.
    fn on_outcome(&mut self, t: Target<'_>, outcome: Outcome<'_>) -> impl Future<Output = ()> + Send {
        let leave = match outcome {
            Outcome::Granted(grant) => {
                self.granted(t, grant);
                false
            }
            Outcome::Failed(e) => {
                self.failed(e);
                false
            }
            Outcome::Split | Outcome::GaveUp => true,
        };
        async move {
            if leave {
                self.queued.leave_now().await;
            }
        }
    }
}

impl FairWait<'_> {
    /// Taking the lock removed the waiter from the queue. Granted by a
    /// majority, it leaves the queues of the other masters in the
    /// background, so it does not block them.
    fn granted(&mut self, t: Target<'_>, grant: &Grant) {
        self.queued.disarm();
        if !self.will_wait || t.core.members.len() == 1 {
            return;
        }
        for (i, token) in grant.node_tokens.iter().enumerate() {
            if token.is_none() {
                let (m, keys, owner) = (t.core.members[i].clone(), t.keys.clone(), self.owner.clone());
                t.core.spawner().spawn(async move {
                    let _ = m.node.leave(&keys, &owner, None, &[]).await;
                });
            }
        }
    }

    /// When the attempt's outcome is unknown, the quorum layer re-sends it
    /// in the background and gives back whatever it got (a hold, or a grant
    /// an unlock wrote to its record), so the wait must not replay that id
    /// and take the same record as its own: it goes on under a fresh id,
    /// which its next attempt writes into its ask. After a known refusal
    /// the id stays: a grant written to it since is the wait's to claim.
    fn failed(&mut self, e: &Error) {
        if self.request.is_some() && e.is_outcome_unknown() {
            self.request = Some(crate::keys::fresh_request_id());
            self.queued.request = self.request.clone();
            // The ask on the server may still name the id given up on.
            self.queued.asked.extend(self.request.clone());
        }
    }
}
