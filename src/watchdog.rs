//! Holds and the watchdog: one scheduler per client renews every watched hold.
//!
//! Each tick (every lease/3) renews all holds that have at least one
//! watchdog guard, batched per cluster slot in calls of at most
//! [`BATCH`] keys. A reply saying the owner field is gone marks the hold lost
//! at once; renewal errors are retried on the next ticks until the lease must
//! have run out since the last confirmed renewal, then the hold is lost.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::future::join_all;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::Result;
use crate::fanout::majority;
use crate::keys::Str;
use crate::member::Member;
use crate::quorum::{drift, Grant};
use crate::settings::Settings;

/// Most keys renewed by one script call.
pub(crate) const BATCH: usize = 100;

/// Why a hold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Renewal found the owner's field gone: the key was deleted,
    /// force-unlocked, flushed or expired.
    Gone,
    /// Renewals failed (timeouts, disconnects) until the lease must have run
    /// out without a confirmed renewal.
    RenewalFailed,
    /// A fixed lease ran out (no watchdog renews it).
    LeaseExpired,
    /// An unlock found the lock no longer held by this owner.
    NotHeld,
}

/// Sets a loss channel's reason unless it has one.
fn tell_loss(tx: &watch::Sender<Option<LossReason>>, why: LossReason) {
    tx.send_if_modified(|l| {
        if l.is_none() {
            *l = Some(why);
            true
        } else {
            false
        }
    });
}

impl LossReason {
    /// Every reason (the codes' table).
    const ALL: [LossReason; 4] = [
        LossReason::Gone,
        LossReason::RenewalFailed,
        LossReason::LeaseExpired,
        LossReason::NotHeld,
    ];

    /// The reason as a number from 1 (0 is "not lost"; a new reason
    /// fails to compile here until it has a number).
    fn code(self) -> u8 {
        match self {
            LossReason::Gone => 1,
            LossReason::RenewalFailed => 2,
            LossReason::LeaseExpired => 3,
            LossReason::NotHeld => 4,
        }
    }

    fn from_code(code: u8) -> Option<LossReason> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            LossReason::Gone => "gone",
            LossReason::RenewalFailed => "renewal_failed",
            LossReason::LeaseExpired => "lease_expired",
            LossReason::NotHeld => "not_held",
        }
    }
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Gone => "the lock key or the owner's field is gone",
            LossReason::RenewalFailed => "renewals failed until the lease ran out",
            LossReason::LeaseExpired => "the fixed lease ran out",
            LossReason::NotHeld => "an unlock found the lock no longer held",
        })
    }
}

/// The state one owner's hold of one lock shares among its guards.
pub(crate) struct Hold {
    pub(crate) lock_key: Str,
    pub(crate) owner_field: Str,
    pub(crate) token: u64,
    /// Per master: the fencing counter the hold left there (what a release
    /// checks), `None` where not held or not known.
    pub(crate) node_tokens: Vec<Option<u64>>,
    /// The id of the request whose take made the hold, which its releases
    /// name (see `Grant::take`).
    pub(crate) take: Option<String>,
    /// Why the hold was lost: 0 while it is not, else `LossReason::code`.
    lost: std::sync::atomic::AtomicU8,
    /// Tells those waiting for a loss; made by the first of them (most
    /// holds end without anyone waiting for their loss).
    lost_tx: Mutex<Option<watch::Sender<Option<LossReason>>>>,
    state: Mutex<HoldState>,
    /// The end of the hold's validity (lease − elapsed − drift from the
    /// latest acquire or renewal a majority confirmed), as µs since `epoch`.
    valid_until_us: AtomicU64,
    epoch: Instant,
    /// Whether the hold was last seen at risk (see `LockGuard::is_at_risk`).
    at_risk: std::sync::atomic::AtomicBool,
    /// A directly granted hold's first lease, in µs, while the extension to
    /// its own lease is still to come (`crate::extend`); 0 otherwise. Its
    /// validity is measured against this shorter lease until then.
    first_lease_us: AtomicU64,
}

#[derive(Default)]
struct HoldState {
    guards: usize,
    watchdog_guards: usize,
    /// Levels released through `Lock::unlock` whose guards still exist: the
    /// next guards to go release nothing on the server.
    released_elsewhere: usize,
}

impl Hold {
    fn new(lock_key: Str, owner_field: Str, grant: &Grant) -> Hold {
        let h = Hold {
            lock_key,
            owner_field,
            token: grant.token,
            node_tokens: grant.node_tokens.clone(),
            take: grant.take.clone(),
            lost: std::sync::atomic::AtomicU8::new(0),
            lost_tx: Mutex::new(None),
            state: Mutex::new(HoldState::default()),
            valid_until_us: AtomicU64::new(0),
            epoch: grant.sent_at,
            at_risk: std::sync::atomic::AtomicBool::new(false),
            first_lease_us: AtomicU64::new(0),
        };
        h.extend(grant.valid_until);
        h
    }

    /// Whose hold this is, as its releases name it.
    pub(crate) fn holder(&self) -> crate::quorum::Holder {
        crate::quorum::Holder {
            owner: self.owner_field.clone(),
            take: self.take.clone(),
        }
    }

    /// Marks the hold lost (once: later reasons are ignored), counts it and
    /// says so at `warn`.
    pub(crate) fn mark_lost(&self, why: LossReason) {
        let first = self
            .lost
            .compare_exchange(0, why.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if first {
            // After the reason is set: a channel made before this lock is
            // told here, one made after it reads the reason (see
            // `subscribe_lost`).
            if let Some(tx) = &*self.lost_tx.lock() {
                tell_loss(tx, why);
            }
            crate::observe::lost(why.label());
            tracing::warn!(lock = %self.lock_key, reason = why.label(), "lock lost: {why}");
        }
    }

    /// Records whether the hold is at risk now: the start of each period at
    /// risk is counted and logged at `warn`, its end at `info`.
    pub(crate) fn note_risk(&self, at_risk: bool) {
        if self.at_risk.swap(at_risk, Ordering::AcqRel) == at_risk {
            return;
        }
        if at_risk {
            crate::observe::at_risk();
            let left = self.valid_until().saturating_duration_since(Instant::now());
            tracing::warn!(
                lock = %self.lock_key,
                validity_ms = left.as_millis() as u64,
                "lock at risk: renewals unconfirmed, less than half of the lease left"
            );
        } else if self.lost_reason().is_none() {
            tracing::info!(lock = %self.lock_key, "lock no longer at risk: a renewal was confirmed");
        }
    }

    pub(crate) fn lost_reason(&self) -> Option<LossReason> {
        LossReason::from_code(self.lost.load(Ordering::Acquire))
    }

    /// A receiver that holds the loss reason once there is one.
    pub(crate) fn subscribe_lost(&self) -> watch::Receiver<Option<LossReason>> {
        let mut slot = self.lost_tx.lock();
        let tx = slot.get_or_insert_with(|| watch::channel(None).0);
        // Read under the lock: a loss marked before the channel existed
        // found none to tell, and is told here (telling twice changes
        // nothing).
        if let Some(why) = self.lost_reason() {
            tell_loss(tx, why);
        }
        tx.subscribe()
    }

    pub(crate) fn is_watched(&self) -> bool {
        self.state.lock().watchdog_guards > 0
    }

    /// Moves the end of validity to `until` if that is later.
    pub(crate) fn extend(&self, until: Instant) {
        let us = until.saturating_duration_since(self.epoch).as_micros() as u64;
        self.valid_until_us.fetch_max(us, Ordering::AcqRel);
    }

    /// Notes that the hold runs on a first lease of `lease`, shorter than it
    /// asked for, until its extension ([`Hold::extension_done`]).
    pub(crate) fn extension_pending(&self, lease: Duration) {
        let us = (lease.as_micros() as u64).max(1);
        self.first_lease_us.store(us, Ordering::Release);
    }

    /// The extension of a directly granted hold ran (confirmed or not).
    pub(crate) fn extension_done(&self) {
        self.first_lease_us.store(0, Ordering::Release);
    }

    /// The first lease of a directly granted hold whose extension is still
    /// to come.
    pub(crate) fn pending_first_lease(&self) -> Option<Duration> {
        match self.first_lease_us.load(Ordering::Acquire) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Until when the hold is valid, as far as the masters confirmed.
    pub(crate) fn valid_until(&self) -> Instant {
        self.epoch + Duration::from_micros(self.valid_until_us.load(Ordering::Acquire))
    }
}

/// A hold's identity: (lock key, owner field).
type HoldKey = (Str, Str);

/// Every live hold of a client.
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Arc<Hold>>>,
    /// The client's `lockwarden_locks_held`.
    held_gauge: crate::observe::ClientGauge,
}

impl Holds {
    /// `client`: the client's uuid, the label of its gauge.
    pub(crate) fn new(client: &str) -> Holds {
        Holds {
            map: Mutex::new(HashMap::new()),
            held_gauge: crate::observe::ClientGauge::held(client),
        }
    }

    /// Records one more guard on the hold an acquisition returned. A reply
    /// with another token than the known hold, or a fresh take by another
    /// request (a reader's token is the same across its holds), means that
    /// hold ended (lost) and this is a fresh one.
    pub(crate) fn enter(&self, lock_key: &Str, owner_field: &Str, grant: &Grant, watchdog: bool) -> Arc<Hold> {
        let mut map = self.map.lock();
        let fresh = || Arc::new(Hold::new(lock_key.clone(), owner_field.clone(), grant));
        // One lookup: the entry is found or made in the same step.
        let hold = match map.entry((lock_key.clone(), owner_field.clone())) {
            Entry::Occupied(e)
                if e.get().token == grant.token
                    && e.get().lost_reason().is_none()
                    && (grant.depth > 1 || grant.take.is_none() || grant.take == e.get().take) =>
            {
                let h = e.get();
                h.extend(grant.valid_until);
                h.clone()
            }
            Entry::Occupied(mut e) => {
                e.get().mark_lost(LossReason::Gone);
                let h = fresh();
                e.insert(h.clone());
                h
            }
            Entry::Vacant(e) => {
                let h = e.insert(fresh()).clone();
                crate::observe::held(&self.held_gauge, map.len());
                h
            }
        };
        let mut st = hold.state.lock();
        st.guards += 1;
        if watchdog {
            st.watchdog_guards += 1;
        }
        drop(st);
        hold
    }

    /// The live hold of `owner_field` on `lock_key`, if any.
    pub(crate) fn find(&self, lock_key: &Str, owner_field: &Str) -> Option<Arc<Hold>> {
        self.map.lock().get(&(lock_key.clone(), owner_field.clone())).cloned()
    }

    /// Notes that one level of `hold` was released without its guard.
    pub(crate) fn released_elsewhere(&self, hold: &Hold, levels: isize) {
        let mut st = hold.state.lock();
        st.released_elsewhere = st.released_elsewhere.saturating_add_signed(levels);
    }

    /// Removes one guard. Returns whether watchdog guards remain on the hold,
    /// and whether the guard's level must still be released on the server.
    /// The last guard forgets the hold, which stops its renewal at once.
    pub(crate) fn leave(&self, hold: &Arc<Hold>, watchdog: bool) -> (bool, bool) {
        let mut map = self.map.lock();
        let mut st = hold.state.lock();
        let release = st.released_elsewhere == 0;
        if !release {
            st.released_elsewhere -= 1;
        }
        st.guards = st.guards.saturating_sub(1);
        if watchdog {
            st.watchdog_guards = st.watchdog_guards.saturating_sub(1);
        }
        if st.guards == 0 {
            // One lookup in the usual case: the hold is the map's.
            let key = (hold.lock_key.clone(), hold.owner_field.clone());
            if let Entry::Occupied(e) = map.entry(key) {
                if Arc::ptr_eq(e.get(), hold) {
                    e.remove();
                    crate::observe::held(&self.held_gauge, map.len());
                }
            }
        }
        (st.watchdog_guards > 0, release)
    }

    fn watched(&self) -> Vec<Arc<Hold>> {
        self.map
            .lock()
            .values()
            .filter(|h| h.lost_reason().is_none() && h.is_watched())
            .cloned()
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}

/// What renewing holds needs of a client: its holds, its masters and its
/// settings (lent by the client's core, which owns them).
pub(crate) struct Renewing<'a> {
    pub(crate) holds: &'a Holds,
    pub(crate) members: &'a [Arc<Member>],
    pub(crate) settings: &'a Settings,
}

/// The watchdog task: a [`tick`] every `period` on what `parts` lends of
/// `owner`, until `owner` is gone.
pub(crate) async fn run<T: Send + Sync + 'static>(owner: Weak<T>, period: Duration, parts: fn(&T) -> Renewing<'_>) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(owner) = owner.upgrade() else { return };
        tick(parts(&owner)).await;
    }
}

/// Renews every watched hold once, on every master. A hold's renewal counts
/// when a majority confirms it: its validity then runs from when the
/// renewal was sent. A majority reporting the owner's field gone loses it at
/// once; otherwise it is lost when its validity ends unconfirmed.
pub(crate) async fn tick(r: Renewing<'_>) {
    let holds = r.holds.watched();
    if holds.is_empty() {
        return;
    }
    let lease = r.settings.watchdog_lease;
    // A renewal call must not outlive its period, or ticks pile up.
    let timeout = r.settings.command_timeout.min(lease / 3).max(Duration::from_millis(1));
    let n = r.members.len();
    let need = majority(n);
    let sent_at = Instant::now();
    // (confirmed, gone) per hold.
    let tally: Mutex<Vec<(usize, usize)>> = Mutex::new(vec![(0, 0); holds.len()]);
    let indexed: Vec<(usize, &Arc<Hold>)> = holds.iter().enumerate().collect();
    let per_master = r.members.iter().filter(|m| crate::member::NodeOps::counts(&***m)).map(|m| {
        let clustered = fred::prelude::ClientLike::is_clustered(&m.node.client);
        let mut groups: HashMap<u16, Vec<(usize, &Arc<Hold>)>> = HashMap::new();
        for (i, h) in &indexed {
            let slot = if clustered {
                fred::util::redis_keyslot(h.lock_key.as_bytes())
            } else {
                0
            };
            groups.entry(slot).or_default().push((*i, *h));
        }
        let batches: Vec<Vec<(usize, &Arc<Hold>)>> = groups
            .into_values()
            .flat_map(|g| g.chunks(BATCH).map(<[_]>::to_vec).collect::<Vec<_>>())
            .collect();
        let tally = &tally;
        join_all(batches.into_iter().map(move |batch| async move {
            let pairs: Vec<(&Str, &Str)> = batch.iter().map(|(_, h)| (&h.lock_key, &h.owner_field)).collect();
            match m.node.renew(&pairs, lease, timeout).await {
                Ok(flags) => {
                    let renewed = flags.iter().filter(|ok| **ok).count();
                    tracing::trace!(size = batch.len(), node = m.index, renewed, "renewal batch done");
                    crate::observe::renewals(renewed as u64, 0);
                    let mut t = tally.lock();
                    for ((i, _), ok) in batch.iter().zip(flags) {
                        if ok {
                            t[*i].0 += 1;
                        } else {
                            t[*i].1 += 1;
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(size = batch.len(), node = m.index, error = %e, "renewal batch failed, retrying next tick");
                    crate::observe::renewals(0, batch.len() as u64);
                    crate::observe::node_failure(m.index);
                    if matches!(e, crate::error::Error::Connection { .. }) {
                        m.suspect();
                    }
                }
            }
        }))
    });
    join_all(per_master).await;
    let now = Instant::now();
    let valid_until = sent_at + lease.saturating_sub(drift(lease));
    for (h, (confirmed, gone)) in holds.iter().zip(tally.into_inner()) {
        let renewal = Renewal {
            confirmed: confirmed >= need,
            gone: gone > n - need,
            valid_until,
        };
        renewal.settle(h, now);
        if h.lost_reason().is_none() {
            h.note_risk(h.valid_until().saturating_duration_since(now) < lease / 2);
        }
    }
}

/// What a renewal of one hold came back with, heard at `now`.
struct Renewal {
    /// A majority confirmed the owner's field.
    confirmed: bool,
    /// A majority found it gone.
    gone: bool,
    /// The validity a confirmation gives: from the renewal's send.
    valid_until: Instant,
}

impl Renewal {
    /// Moves `h`'s validity on, or loses it. A confirmation heard after
    /// the hold's validity ended does not revive it: the renewal may have
    /// run after the hold lapsed on the server and found another hold of
    /// the same owner field there (one that a background re-send of the
    /// owner's own earlier attempt took, and is about to give back). Under
    /// the clock assumption the server's lease outlasts the validity, so a
    /// renewal that found the hold itself is heard in time.
    fn settle(&self, h: &Hold, now: Instant) {
        if self.confirmed && now < self.valid_until && now < h.valid_until() {
            h.extend(self.valid_until);
        } else if self.gone {
            h.mark_lost(LossReason::Gone);
        } else if now >= h.valid_until() {
            h.mark_lost(LossReason::RenewalFailed);
        }
    }
}

/// Keeps `hold` at least `lease` from now on every master that counts
/// (one renewal call each, as a tick's): a majority confirming within the
/// new validity moves the validity on; a majority finding it gone marks it
/// lost (`NotHeld`); otherwise the error, the hold as it was.
pub(crate) async fn extend_hold(r: Renewing<'_>, hold: &Arc<Hold>, lease: Duration, name: &str) -> Result<()> {
    let not_held = || crate::error::Error::NotHeld { name: name.to_string() };
    if hold.lost_reason().is_some() {
        return Err(not_held());
    }
    let n = r.members.len();
    let need = majority(n);
    let timeout = r.settings.command_timeout;
    let sent = Instant::now();
    let pair = [(&hold.lock_key, &hold.owner_field)];
    let counting = r.members.iter().filter(|m| crate::member::NodeOps::counts(&***m));
    let replies = join_all(counting.map(|m| m.node.renew(&pair, lease, timeout))).await;
    let (mut confirmed, mut gone, mut errors) = (0, 0, Vec::new());
    for reply in replies {
        match reply {
            Ok(flags) if flags.first() == Some(&true) => confirmed += 1,
            Ok(_) => gone += 1,
            Err(e) => errors.push(e),
        }
    }
    let valid_until = sent + lease.saturating_sub(drift(lease));
    let now = Instant::now();
    // As in `tick`: a confirmation after the validity ended revives
    // nothing.
    if confirmed >= need && now < valid_until && now < hold.valid_until() {
        hold.extend(valid_until);
        return Ok(());
    }
    if confirmed >= need && now >= hold.valid_until() {
        hold.mark_lost(LossReason::RenewalFailed);
        return Err(not_held());
    }
    if gone > n - need {
        hold.mark_lost(LossReason::Gone);
        return Err(not_held());
    }
    Err(crate::fanout::quorum_error("extend", n, confirmed, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold() -> Hold {
        let now = Instant::now();
        let grant = Grant {
            token: 7,
            depth: 1,
            node_tokens: vec![Some(7)],
            sent_at: now,
            valid_until: now + Duration::from_secs(30),
            take: None,
        };
        Hold::new("lock".into(), "owner:1".into(), &grant)
    }

    #[test]
    fn a_renewal_confirmed_after_the_validity_ended_revives_nothing() {
        let h = hold();
        let end = h.valid_until();
        let renewal = Renewal {
            confirmed: true,
            gone: false,
            valid_until: end + Duration::from_secs(20),
        };
        // Heard in time: the validity moves on.
        renewal.settle(&h, end - Duration::from_millis(1));
        assert_eq!(h.valid_until(), end + Duration::from_secs(20));
        assert_eq!(h.lost_reason(), None);
        // Heard after the validity it had then ended: lost, not extended.
        let h = hold();
        let end = h.valid_until();
        let later = Renewal {
            valid_until: end + Duration::from_secs(40),
            ..renewal
        };
        later.settle(&h, end + Duration::from_millis(1));
        assert_eq!(h.lost_reason(), Some(LossReason::RenewalFailed));
        assert_eq!(h.valid_until(), end, "the validity stays where it ended");
    }

    #[test]
    fn loss_reasons_round_trip_through_their_codes() {
        assert_eq!(LossReason::from_code(0), None);
        for r in LossReason::ALL {
            assert_ne!(r.code(), 0);
            assert_eq!(LossReason::from_code(r.code()), Some(r));
        }
        for code in LossReason::ALL.len() as u8 + 1..=u8::MAX {
            assert_eq!(LossReason::from_code(code), None, "{code}");
        }
    }

    #[test]
    fn a_loss_reaches_receivers_made_before_and_after_it_and_the_first_reason_stays() {
        let h = hold();
        assert_eq!(h.lost_reason(), None);
        let early = h.subscribe_lost();
        assert_eq!(*early.borrow(), None);
        h.mark_lost(LossReason::RenewalFailed);
        h.mark_lost(LossReason::Gone);
        assert_eq!(h.lost_reason(), Some(LossReason::RenewalFailed));
        assert!(early.has_changed().unwrap(), "the early receiver was told");
        assert_eq!(*early.borrow(), Some(LossReason::RenewalFailed));
        let late = h.subscribe_lost();
        assert_eq!(*late.borrow(), Some(LossReason::RenewalFailed));

        // Lost before anyone listened: the first receiver still sees it.
        let h = hold();
        h.mark_lost(LossReason::NotHeld);
        assert_eq!(*h.subscribe_lost().borrow(), Some(LossReason::NotHeld));
    }
}
