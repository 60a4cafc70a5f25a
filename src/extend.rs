//! Lease extensions of directly granted fair holds.
//!
//! An unlock that hands a fair lock straight to the head of the queue gives
//! it a lease cut to the head's queue deadline (`lua/fair_release.lua`), so a grantee that died blocks the queue no longer than
//! its eviction would. A third of the way into that lease, a hold that is
//! still held gets the lease it asked for, as a renewal would.
//!
//! Those extensions wait in one queue per client, ordered by when they are
//! due, and one task runs them. A grant therefore costs neither a task nor a
//! timer of its own: at thousands of handoffs per second, a task per grant
//! (almost always finding its hold released long before) cost wake-ups that
//! showed in the handoff time. Extensions due within [`SLACK`] of each
//! other run together, a little early, so the task wakes at most about once
//! per [`SLACK`] however many grants come in.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::quorum::drift;
use crate::watchdog::{Hold, LossReason, Renewing};

/// Extensions due this close together run in one wake-up (early by at most
/// this much, which only makes the lease start sooner).
const SLACK: Duration = Duration::from_millis(20);

/// The longest the task sleeps without checking that its client still exists.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The pending extensions of one client.
/// A client's direct grants: the numbers of the wake channels its
/// grant-asking waiters listen on, and the lease extensions of the holds
/// granted to them.
#[derive(Default)]
pub(crate) struct DirectGrants {
    pub(crate) wake_numbers: Mutex<WakeNumbers>,
    pub(crate) extensions: Arc<Extensions>,
}

/// Each grant-asking waiter holds the lowest free number while it waits,
/// so no two waiters of a client share a wake channel, and a client that
/// waits again and again listens on the same one.
#[derive(Default)]
pub(crate) struct WakeNumbers {
    /// Numbers given back.
    free: BTreeSet<u64>,
    /// The lowest number never taken.
    next: u64,
}

impl WakeNumbers {
    pub(crate) fn take(&mut self) -> u64 {
        self.free.pop_first().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    pub(crate) fn give_back(&mut self, n: u64) {
        self.free.insert(n);
    }
}

#[derive(Default)]
pub(crate) struct Extensions {
    due: Mutex<BinaryHeap<Due>>,
    /// Told when an extension is queued ahead of all others.
    sooner: Notify,
}

/// One pending extension: at `at`, if `hold` is still held, set its lease to
/// run until `end` (`None`: a full watchdog lease from then).
struct Due {
    at: Instant,
    hold: Weak<Hold>,
    end: Option<Instant>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

impl Extensions {
    /// Queues the extension of the granted `hold` at `at` (to `end`, or a
    /// full watchdog lease when `None`). Never blocks; a hold released by
    /// then is skipped.
    /// Until then the hold's at-risk threshold is half of `first`, the
    /// lease it was granted with.
    pub(crate) fn schedule(&self, hold: &Arc<Hold>, at: Instant, end: Option<Instant>, first: Duration) {
        hold.extension_pending(first);
        let mut due = self.due.lock();
        let first = due.peek().is_none_or(|d| at < d.at);
        due.push(Due {
            at,
            hold: Arc::downgrade(hold),
            end,
        });
        drop(due);
        if first {
            self.sooner.notify_one();
        }
    }

    /// Takes the extensions due by `now` (+ [`SLACK`]); returns them and
    /// when the next one is due.
    fn take_due(&self, now: Instant) -> (Vec<Due>, Option<Instant>) {
        let mut due = self.due.lock();
        let mut taken = Vec::new();
        while due.peek().is_some_and(|d| d.at <= now + SLACK) {
            taken.extend(due.pop());
        }
        (taken, due.peek().map(|d| d.at))
    }
}

/// The task running a client's extensions on what `parts` lends of `owner`,
/// until `owner` is gone. Each extension runs in a task of its own, on
/// `spawner`'s runtime.
pub(crate) async fn run<T: Send + Sync + 'static>(
    owner: Weak<T>,
    ext: Arc<Extensions>,
    parts: fn(&T) -> Renewing<'_>,
    spawner: crate::runtime::Spawner,
) {
    loop {
        // Registered before looking at the queue: an extension queued after
        // the look still wakes this sleep.
        let sooner = ext.sooner.notified();
        tokio::pin!(sooner);
        sooner.as_mut().enable();
        let now = Instant::now();
        let (due, next) = ext.take_due(now);
        if !due.is_empty() {
            let Some(owner) = owner.upgrade() else { return };
            for d in due {
                let Some(hold) = d.hold.upgrade() else { continue };
                if still_held(parts(&owner).holds, &hold) {
                    let owner = owner.clone();
                    spawner.spawn(async move { extend(parts(&owner), &hold, d.end).await });
                }
            }
        } else if owner.strong_count() == 0 {
            return;
        }
        let until = next.map_or(now + IDLE_CHECK, |n| n.min(now + IDLE_CHECK));
        tokio::select! {
            _ = sooner => {}
            _ = tokio::time::sleep_until(until.into()) => {}
        }
    }
}

/// Whether `hold` is still this client's live hold of its lock.
fn still_held(holds: &crate::watchdog::Holds, hold: &Arc<Hold>) -> bool {
    hold.lost_reason().is_none()
        && holds
            .find(&hold.lock_key, &hold.owner_field)
            .is_some_and(|h| Arc::ptr_eq(&h, hold))
}

/// Sets `hold`'s lease (never shortening) to run until `end` (`None`: a
/// full watchdog lease) and moves its validity on when confirmed. A hold
/// found gone is lost. Directly granted holds exist on one master only.
async fn extend(r: Renewing<'_>, hold: &Arc<Hold>, end: Option<Instant>) {
    let sent = Instant::now();
    let lease = match end {
        None => r.settings.watchdog_lease,
        Some(end) => end.saturating_duration_since(sent),
    };
    if lease.is_zero() {
        // A fixed lease that ends now: nothing to extend, and the hold is
        // measured against its own lease again.
        hold.extension_done();
        return;
    }
    let timeout = r.settings.command_timeout;
    let renewed = r.members[0]
        .node
        .renew(&[(&hold.lock_key, &hold.owner_field)], lease, timeout)
        .await;
    // Confirmed or not, the hold is measured against its own lease from
    // now: an extension that failed leaves it at risk, as it is.
    if let Ok(flags) = &renewed {
        // Confirmed after the grant's validity ended: revives nothing
        // (see `watchdog::Renewal::settle`); the hold is lost with its
        // validity.
        if flags.first() == Some(&true) {
            if Instant::now() < hold.valid_until() {
                hold.extend(sent + lease.saturating_sub(drift(lease)));
            } else {
                hold.mark_lost(LossReason::RenewalFailed);
            }
        }
    }
    hold.extension_done();
    match renewed {
        Ok(flags) if flags.first() == Some(&true) => {}
        Ok(_) => {
            if still_held(r.holds, hold) {
                hold.mark_lost(LossReason::Gone);
            }
        }
        Err(e) => {
            tracing::debug!(lock = %hold.lock_key, error = %e, "setting a granted hold's lease failed; its validity ends with the grant's")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WakeNumbers;

    #[test]
    fn a_waiter_takes_the_lowest_free_wake_number() {
        let mut n = WakeNumbers::default();
        assert_eq!([n.take(), n.take(), n.take()], [0, 1, 2]);
        n.give_back(1);
        n.give_back(0);
        assert_eq!([n.take(), n.take(), n.take()], [0, 1, 3]);
    }
}
