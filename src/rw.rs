//! The read-write lock's wait policy for its write side.
//!
//! Both sides of a read-write lock (`crate::rw_lock::RwLock`) are lock
//! handles on one lock hash (see `lua/shared_rw.lua` for its fields); a
//! reader's field is its owner field followed by `:r`, so an owner's read
//! and write holds are two holds. The read side waits with
//! `wait::Shared`; the write side listens on the lock's writers' channel
//! (told only when the lock is free, so a writer is not woken to be
//! refused by readers, nor readers to be refused by a writer's mark) and
//! keeps alive, while it waits, its mark that holds new readers back.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::keys::Str;
use crate::pubsub::Interest;
use crate::wait::{Channel, LeaveOnExit, Outcome, Policy, Refusal, Request, Shared, Target};

/// The write side's policy: the readers' (`wait::Shared`) on the writers'
/// channel, a pause short enough
/// that each attempt renews the writer's mark before it lapses, and the
/// mark taken back when the wait ends without the lock (given up, failed or
/// dropped: in the background then).
pub(crate) struct WriteWait {
    /// The readers' policy: every wait of the client listening on the
    /// writers' channel is woken by a message there.
    inner: Shared,
    refresh: Duration,
    /// Armed while an attempt may have left the mark and nothing took it
    /// back yet.
    mark: LeaveOnExit,
}

impl WriteWait {
    pub(crate) fn new(t: Target<'_>, owner: &Str) -> WriteWait {
        WriteWait {
            // Its channel is never open before the first attempt (see
            // `channel`), so whether it waits does not matter.
            inner: Shared::new(false),
            refresh: t.core.settings.waiter_timeout / 3,
            mark: LeaveOnExit::leave(t, owner, false),
        }
    }
}

impl Policy for WriteWait {
    /// The lock's writers' channel: `rw_release.lua` tells it when the
    /// lock is free, the readers' channel when readers may join.
    /// Subscribed after the first refusal, even when the client has it
    /// subscribed already: a first attempt that listened would leave the
    /// mark at once, and a writer that leaves the lock and asks again
    /// would hold back the readers its release just woke before they got
    /// in (W7: a writer's share of the acquisitions rose from 14 % to
    /// 58 % and the reads fell 8-fold when it did). Its first attempt
    /// leaves no mark; the second, a round trip later, does.
    fn channel(&mut self, t: Target<'_>) -> Channel {
        Channel::Named(t.keys.writers.clone())
    }

    /// This turn's attempt waits, so a refusal leaves the mark.
    fn turn(
        &mut self,
        t: Target<'_>,
        interest: &Interest,
        first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        let stands = self.inner.turn(t, interest, first);
        self.mark.arm();
        stands
    }

    fn request(&self) -> Request<'_> {
        self.inner.request()
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
            Outcome::Failed(_) | Outcome::Split => false,
        };
        async move {
            if give_up {
                self.mark.leave_now().await;
            }
        }
    }
}
