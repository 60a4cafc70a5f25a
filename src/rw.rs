//! The read-write lock's wait policy, for either side.
//!
//! Both sides of a read-write lock (`crate::rw_lock::RwLock`) are lock
//! handles on one lock hash (see `lua/shared_rw.lua` for its fields); a
//! reader's field is its owner field followed by `:r`, so an owner's read
//! and write holds are two holds. Each side waits as `wait::Shared` on its
//! own channel and keeps alive, while it waits, the mark its refusals
//! leave: a writer's listens on the lock's writers' channel (told only
//! when the lock is free, so a writer is not woken to be refused by
//! readers, nor readers to be refused by a writer's mark), and its mark
//! holds new readers back; a reader's listens on the lock's channel, and
//! its mark becomes a pass when a write hold is released, so the readers
//! that waited for a writer go in before the next one.
//!
//! On one master (without replica or disk confirmations) a waiting writer
//! also asks to be handed the lock: the release that leaves the lock free
//! makes the write hold the writer's attempt would have made and says so
//! on the writers' channel (`lua/shared_rw.lua`, `hand_to_writer`), which
//! saves the writer's attempt. The wait keeps one request id for its
//! attempts, so a grant whose message is lost is found by its next
//! attempt; stopping without the lock, it takes its mark and ask back and
//! gives back a grant it never learned of.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::error::Result;
use crate::keys::Str;
use crate::protocol::LockKeys;
use crate::pubsub::Interest;
use crate::settings::Lease;
use crate::wait::{Channel, LeaveOnExit, Message, Outcome, Policy, Refusal, Request, Shared, Target, Wake};

/// A side's policy: `wait::Shared` on the side's channel, a pause short
/// enough that each attempt renews the waiter's mark before it lapses, and
/// the mark taken back when the wait ends without the lock (given up,
/// failed or dropped: in the background then).
pub(crate) struct SideWait {
    /// Every wait of the client listening on the side's channel is woken
    /// by a message there.
    inner: Shared,
    read: bool,
    refresh: Duration,
    /// Armed while an attempt may have left the mark and nothing took it
    /// back yet.
    mark: LeaveOnExit,
    core: Arc<Core>,
    keys: Arc<LockKeys>,
    /// The grants' first lease when the wait may ask for direct grants
    /// (`wait::grant_lease`); its request id once it listens (an
    /// uncontended lock never needs one).
    grant_lease: Option<Duration>,
    request: Option<String>,
    /// An attempt carried `request` (an ask, or a grant to it, may exist).
    asked: AtomicBool,
}

impl SideWait {
    /// The write side's wait of `owner` (its client's own owners only ask
    /// for grants); `will_wait`: more than one attempt, with `lease`.
    pub(crate) fn writer(t: Target<'_>, owner: &Str, will_wait: bool, lease: Lease) -> SideWait {
        // Its channel is never open before the first attempt (see
        // `channel`), so whether it waits does not matter.
        let grant_lease = crate::wait::grant_lease(t, owner, will_wait, lease);
        SideWait::new(t, owner, false, Shared::new(false), grant_lease)
    }

    /// The read side's wait of `field` (the owner's reader field); it asks
    /// for no grant. `will_wait`: more than one attempt.
    pub(crate) fn reader(t: Target<'_>, field: &Str, will_wait: bool) -> SideWait {
        SideWait::new(t, field, true, Shared::new(will_wait), None)
    }

    fn new(t: Target<'_>, field: &Str, read: bool, inner: Shared, grant_lease: Option<Duration>) -> SideWait {
        let core = t.core;
        SideWait {
            inner,
            read,
            refresh: core.settings.waiter_timeout / 3,
            mark: LeaveOnExit::leave(t, field, false),
            core: core.clone(),
            keys: t.keys.clone(),
            grant_lease,
            request: None,
            asked: AtomicBool::new(false),
        }
    }

    fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    /// A fresh request id for the wait's asks from now on; the leave names
    /// every one (a grant to an earlier one may still come).
    fn fresh_request(&mut self) {
        let id = crate::keys::fresh_request_id();
        self.mark.asked.push(id.clone());
        self.request = Some(id);
        self.asked.store(false, Ordering::Relaxed);
    }
}

impl Policy for SideWait {
    /// A reader's: the lock's channel, open when the client has it
    /// subscribed already (its first attempt then listens, and a refusal
    /// leaves its mark at once, so the mark is taken back whatever
    /// happens next). A writer's: the lock's writers' channel;
    /// `rw_release.lua` tells it when the lock is free, the readers'
    /// channel when readers may join.
    /// Subscribed after the first refusal, even when the client has it
    /// subscribed already: a first attempt that listened would leave the
    /// mark at once, and a writer that leaves the lock and asks again
    /// would hold back the readers its release just woke before they got
    /// in (W7: a writer's share of the acquisitions rose from 14 % to
    /// 58 % and the reads fell 8-fold when it did). Its first attempt
    /// leaves no mark; the second, a round trip later, does.
    fn channel(&mut self, t: Target<'_>) -> Channel {
        if self.read {
            let channel = self.inner.channel(t);
            if matches!(channel, Channel::Open(_)) {
                self.mark.arm();
            }
            return channel;
        }
        Channel::Named(t.keys.writers.clone())
    }

    /// This turn's attempt waits, so a refusal leaves the mark.
    fn turn(
        &mut self,
        t: Target<'_>,
        interest: &Interest,
        first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        if self.grant_lease.is_some() && self.request.is_none() {
            self.fresh_request();
        }
        self.mark.arm();
        self.inner.turn(t, interest, first)
    }

    fn request(&self) -> Request<'_> {
        let mut request = self.inner.request();
        if let (Some(id), true) = (&self.request, request.waiting.waits()) {
            request.grant_to = Some((id, &self.core.uuid));
            request.grant_lease = self.grant_lease;
            request.sent_before = self.asked.swap(true, Ordering::Relaxed);
        }
        request
    }

    /// A grant to this wait's request is its lock. Any other message
    /// (a grant to another writer included) wakes it to look: a message
    /// is never taken for nothing, so none is lost to a wait that cannot
    /// use it.
    fn on_wake(&mut self, m: Message<'_>) -> Wake {
        let grant = m.payload.as_deref().and_then(crate::wait::parse_grant);
        if let (Some((token, ms, rec, n)), Some(id)) = (grant, &self.request) {
            if self.asked() && rec == &*crate::protocol::record(&self.keys, id) {
                let t = Target {
                    core: &self.core,
                    keys: &self.keys,
                };
                if let Some(guard) = crate::wait::claim_grant(t, &m, id, token, ms, n) {
                    self.mark.disarm();
                    return Wake::Granted(guard);
                }
            }
        }
        Wake::Attempt
    }

    fn pause(&mut self, _refusal: &Refusal, bound: Duration) -> Duration {
        bound.min(self.refresh)
    }

    /// Taking the lock removed the mark where it was granted; a master of
    /// a quorum that did not grant may still have it (refused by the last
    /// attempt there), and it goes in the background when the wait ends.
    /// Giving up takes the mark back now.
    fn on_outcome(&mut self, _t: Target<'_>, outcome: Outcome<'_>) -> impl Future<Output = ()> + Send {
        let give_up = match outcome {
            Outcome::Granted(grant) => {
                if grant.node_tokens.iter().all(Option::is_some) {
                    self.mark.disarm();
                }
                false
            }
            Outcome::GaveUp => true,
            Outcome::Failed(e) => {
                // The attempt may have run: its request's ask (or a grant
                // to it) may stand, and the quorum layer gives back what it
                // got. The wait goes on under a fresh id.
                if self.request.is_some() && e.is_outcome_unknown() {
                    self.fresh_request();
                }
                false
            }
            Outcome::Split => false,
        };
        async move {
            if give_up {
                self.mark.leave_now().await;
            }
        }
    }
}
