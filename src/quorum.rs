//! A quorum of independent masters.
//!
//! Every lock operation goes to all masters at once, each call bounded by the
//! per-node timeout, and counts when a majority (N/2 + 1) agrees. One master
//! is the single-deployment case of the same code: its majority is itself.
//!
//! The rules are generic over [`NodeOps`] (`member.rs`) so the arithmetic
//! can be checked against in-memory masters as well as real ones; the
//! fan-outs themselves are in `fanout.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::StreamExt;

use crate::error::{Error, Result};
use crate::fanout::{majority, quorum_error, Unordered};
use crate::keys::Str;
use crate::member::NodeOps;
use crate::node::{AcquireReply, ReleaseReply};
use crate::protocol::Waiting;
use crate::protocol::{Acquire, LockKeys, Release};
use crate::runtime::{DropGuard, Undo, RESEND};

/// The clock-drift allowance of a lease: 1 % of it plus 2 ms.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// A hold granted by a majority.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub token: u64,
    /// The reentry depth a majority reports.
    pub depth: u64,
    /// Per master: the fencing counter there as this hold left it (what a
    /// release checks), `None` where not held or not known.
    pub node_tokens: Vec<Option<u64>>,
    /// When the attempt was sent.
    pub sent_at: Instant,
    /// Lease − elapsed − drift, from `sent_at`.
    pub valid_until: Instant,
    /// A fresh hold's identity: the id of the request whose take made it
    /// (`None` for a re-entry, or when not known). See `Release::take`.
    pub take: Option<String>,
}

/// One quorum acquire attempt's outcome.
#[derive(Debug)]
pub(crate) enum Attempt {
    Granted(Grant),
    Denied(Refusal),
}

/// An attempt that was not granted.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Refusal {
    /// The holders' smallest remaining lease in ms (-1: a key without TTL,
    /// -3: a fair lock free but others queued).
    pub(crate) pttl: i64,
    /// Some masters granted but not a majority, and each gave its part back.
    pub(crate) split: bool,
    /// The waiter's client's place in line to be woken by an unlock (0:
    /// next), where the masters keep one (see `AcquireReply::Held`).
    pub(crate) place: Option<u64>,
}

impl Refusal {
    /// Masters split between contenders (or a grant that came too late):
    /// every part given back.
    fn split() -> Refusal {
        Refusal {
            pttl: 0,
            split: true,
            place: None,
        }
    }
}

/// The owned context of one acquire attempt, shared with background undo.
pub(crate) struct Ask<'a> {
    pub keys: &'a Arc<LockKeys>,
    pub owner: &'a Str,
    pub lease: Duration,
    pub request: &'a str,
    pub waiting: Waiting,
    /// The waiter's wake id: a queued fair waiter's, which may be granted
    /// the lock directly by an unlock (one master only: `request` is then
    /// the whole wait's id), or a reentrant lock's client id.
    pub grant: Option<&'a str>,
    /// A reentrant lock's waiter asks for direct grants: their first
    /// lease (see [`Acquire::grant_lease`]).
    pub grant_lease: Option<Duration>,
    /// `request` was sent before by the same wait (a grant-asking wait keeps
    /// its id across attempts).
    pub sent_before: bool,
    /// The attempt's number within its wait (see [`Acquire::attempt`]).
    pub attempt: u64,
    /// The live hold this owner has already: (its token, its per-master
    /// tokens). A majority re-entering keeps them.
    pub known: Option<(u64, Vec<Option<u64>>)>,
}

/// An acquire sent to one master whose outcome nobody will act on yet. If
/// dropped armed (the attempt was cancelled or its reply lost) it re-sends the
/// same request in the background (a replay returns the first run's record)
/// and gives back what it got.
type Pending<M> = DropGuard<Resend<M>>;

/// See [`Pending`].
struct Resend<M: NodeOps> {
    member: Arc<M>,
    keys: Arc<LockKeys>,
    owner: Str,
    lease: Duration,
    request: String,
}

impl<M: NodeOps> Undo for Resend<M> {
    fn undo_in_background(&mut self) {
        let (member, keys, owner, lease) = (self.member.clone(), self.keys.clone(), self.owner.clone(), self.lease);
        let request = std::mem::take(&mut self.request);
        let spawner = self.member.spawner().clone();
        spawner.spawn(async move {
            let give_up = Instant::now() + lease;
            let mut pause = RESEND;
            loop {
                let again = Acquire {
                    owner: &owner,
                    lease,
                    request: &request,
                    waiting: Waiting::No,
                    grant: None,
                    grant_lease: None,
                    resent: true,
                    attempt: 0,
                };
                match member.acquire(&keys, &again).await {
                    Ok(AcquireReply::Acquired { token, count }) => {
                        let take = (count == 1).then_some(request.as_str());
                        undo_one(&*member, &keys, &owner, Some(token), take).await;
                        break;
                    }
                    Err(e) if e.is_outcome_unknown() && Instant::now() + pause.peek() < give_up => {
                        tokio::time::sleep(pause.next()).await;
                    }
                    _ => break,
                }
            }
        });
    }
}

/// Releases one level that nobody will own a guard for (`take`: the
/// request whose fresh take made it, when it was one).
async fn undo_one<M: NodeOps>(member: &M, keys: &LockKeys, owner: &Str, token: Option<u64>, take: Option<&str>) {
    let request = crate::keys::fresh_request_id();
    let r = Release {
        owner,
        token,
        relet: Duration::ZERO,
        request: &request,
        resent: false,
        take,
    };
    if let Err(e) = member.release(keys, &r).await {
        tracing::debug!(lock = %keys.name, error = %e, "undoing a level nobody received failed; its lease bounds it");
    }
}

/// The levels an attempt holds on some masters before it is a guard: on
/// drop while armed they are released in the background.
type Partial<M> = DropGuard<Levels<M>>;

/// See [`Partial`].
struct Levels<M: NodeOps> {
    members: Vec<Arc<M>>,
    keys: Arc<LockKeys>,
    owner: Str,
    /// Per master: granted, and the token to release it with.
    held: Vec<bool>,
    tokens: Vec<Option<u64>>,
    /// Per master: the level granted was a fresh take (made by `take`, the
    /// attempt's request), not a re-entry.
    fresh: Vec<bool>,
    take: String,
    /// Per master: the request id of its give-back, once sent. A give-back
    /// whose outcome is unknown goes again under the same id, so a master
    /// that ran it answers from its record: a re-entered level is never
    /// given back twice.
    requests: Vec<Option<String>>,
}

impl<M: NodeOps> Levels<M> {
    /// Releases every granted level and waits for it (each call bounded by
    /// the node timeout); what fails stays armed for the background.
    async fn undo(&mut self) {
        let calls = self.held.iter().enumerate().filter(|(_, h)| **h).map(|(i, _)| {
            let member = self.members[i].clone();
            let token = self.tokens[i];
            let take = self.fresh[i].then_some(self.take.as_str());
            let resent = self.requests[i].is_some();
            let request = self.requests[i]
                .get_or_insert_with(crate::keys::fresh_request_id)
                .clone();
            let (keys, owner) = (&self.keys, &self.owner);
            async move {
                let r = Release {
                    owner,
                    token,
                    relet: Duration::ZERO,
                    request: &request,
                    resent,
                    take,
                };
                (i, member.release(keys, &r).await)
            }
        });
        for (i, r) in futures::future::join_all(calls).await {
            if !matches!(r, Err(ref e) if e.is_outcome_unknown()) {
                self.held[i] = false;
            }
        }
    }
}

impl<M: NodeOps> Undo for Levels<M> {
    fn undo_in_background(&mut self) {
        if !self.held.iter().any(|h| *h) {
            return;
        }
        let mut rest = Levels {
            members: std::mem::take(&mut self.members),
            keys: self.keys.clone(),
            owner: self.owner.clone(),
            held: std::mem::take(&mut self.held),
            tokens: std::mem::take(&mut self.tokens),
            fresh: std::mem::take(&mut self.fresh),
            take: std::mem::take(&mut self.take),
            requests: std::mem::take(&mut self.requests),
        };
        let spawner = rest.members[0].spawner().clone();
        spawner.spawn(async move { rest.undo().await });
    }
}

/// The smallest meaningful PTTL among holders' replies.
fn combine_pttl(pttls: &[i64]) -> i64 {
    if let Some(p) = pttls.iter().copied().filter(|p| *p >= 0).min() {
        return p;
    }
    if pttls.contains(&crate::protocol::FREE_BUT_QUEUED) {
        return crate::protocol::FREE_BUT_QUEUED;
    }
    -1
}

/// One acquire attempt on every master.
///
/// Sends the attempt to every master that counts and gathers the replies:
/// until a majority granted, or refused for sure, then for a short grace.
/// Grants are entered in `partial`; masters still answering after that are
/// settled in the background (their requests undone when dropped).
async fn gather<M: NodeOps>(members: &[Arc<M>], ask: &Ask<'_>, partial: &mut Partial<M>, sent_at: Instant) -> Tally<M> {
    let n = members.len();
    let need = majority(n);
    let mut replies = Unordered::new(members.iter().enumerate().filter(|(_, m)| m.counts()).map(|(i, m)| {
        let mut pending = Pending::new(
            Resend {
                member: m.clone(),
                keys: ask.keys.clone(),
                owner: ask.owner.clone(),
                lease: ask.lease,
                request: ask.request.to_string(),
            },
            true,
        );
        async move {
            let a = Acquire {
                owner: ask.owner,
                lease: ask.lease,
                request: ask.request,
                waiting: ask.waiting,
                grant: ask.grant,
                grant_lease: ask.grant_lease,
                resent: ask.sent_before,
                attempt: ask.attempt,
            };
            let r = pending.member.acquire(ask.keys, &a).await;
            if !matches!(r, Err(ref e) if e.is_outcome_unknown()) {
                pending.disarm();
            }
            (i, r, pending)
        }
    }));
    let left_out = n - replies.len();
    let mut t = Tally {
        counts: Vec::with_capacity(n),
        pttls: Vec::new(),
        place: None,
        errors: Vec::new(),
        unknown: Vec::new(),
    };
    // Stop once granted, or once refused for sure with enough answers to
    // call it contention; fewer answers than a majority is an error.
    loop {
        let refused = left_out + t.pttls.len() + t.errors.len();
        if t.counts.len() >= need || (refused > n - need && t.counts.len() + t.pttls.len() >= need) {
            break;
        }
        let Some((i, r, pending)) = replies.next().await else {
            break;
        };
        t.absorb(partial, i, r, pending);
    }
    // The decision is made. Masters still answering get a short grace (as
    // long again as the decision took): their levels then join the hold or
    // are undone here instead of by a second round trip in the background.
    if !replies.is_empty() {
        let grace_end = Instant::now() + sent_at.elapsed().max(Duration::from_micros(200));
        while !replies.is_empty() {
            let Ok(Some((i, r, pending))) = tokio::time::timeout_at(grace_end.into(), replies.next()).await else {
                break;
            };
            t.absorb(partial, i, r, pending);
        }
    }
    drop(replies);
    t
}

/// A majority granted (`counts`: each granting master and its reentry
/// count): the hold's depth and token, and its validity; or, granted too
/// late, with no token a majority can agree on, or with the token of a
/// level re-entered without a hold the client knows of, undone and denied.
async fn granted<M: NodeOps>(
    members: &[Arc<M>],
    ask: &Ask<'_>,
    mut partial: Partial<M>,
    counts: &[(usize, u64)],
    sent_at: Instant,
) -> Result<Attempt> {
    let n = members.len();
    let need = majority(n);
    let mut depths: Vec<u64> = counts.iter().map(|(_, c)| *c).collect();
    depths.sort_unstable_by(|a, b| b.cmp(a));
    let depth = depths[need - 1];
    let reentered = counts.iter().filter(|(_, c)| *c > 1).count() >= need;
    // A level this attempt re-entered without a hold the client knows of
    // is left from a hold of the same owner it lost (its renewal found no
    // majority) or never learned of: its token was that hold's.
    let unknown_hold = ask.known.is_none() && ask.keys.kind.own_tokens();
    let stale = (0..n)
        .filter(|&i| unknown_hold && partial.held[i] && !partial.fresh[i])
        .filter_map(|i| partial.tokens[i])
        .max();
    let (token, node_tokens) = match (&ask.known, reentered) {
        (Some((token, tokens)), true) => (*token, tokens.clone()),
        _ => match write_back(members, ask.keys, ask.owner, &mut partial, need).await {
            // A new hold whose token would be that old hold's: a resource
            // that fences on tokens could not tell the two apart. Undone,
            // and tried again after a pause: the old level ends with its
            // lease, and a fresh take's token is above it.
            Some(token) if stale.is_some_and(|t| t >= token) => {
                partial.undo().await;
                if n > 1 {
                    crate::observe::quorum_attempt("stale_level_token", None);
                }
                return Ok(Attempt::Denied(Refusal::split()));
            }
            Some(token) => (token, partial.tokens.clone()),
            None => {
                partial.undo().await;
                crate::observe::quorum_attempt("token_write_back_failed", None);
                return Ok(Attempt::Denied(Refusal::split()));
            }
        },
    };
    let valid_until = sent_at + ask.lease.saturating_sub(drift(ask.lease));
    let now = Instant::now();
    if now >= valid_until {
        tracing::debug!(
            elapsed_ms = sent_at.elapsed().as_millis() as u64,
            lease_ms = ask.lease.as_millis() as u64,
            "majority granted too late (validity <= 0); releasing"
        );
        partial.undo().await;
        crate::observe::quorum_attempt("validity_expired", None);
        return Ok(Attempt::Denied(Refusal::split()));
    }
    partial.disarm();
    if n > 1 {
        crate::observe::quorum_attempt("granted", Some(valid_until - now));
    }
    let mut node_tokens = node_tokens;
    for (i, held) in partial.held.iter().enumerate() {
        if !held {
            node_tokens[i] = None;
        }
    }
    Ok(Attempt::Granted(Grant {
        token,
        depth,
        node_tokens,
        sent_at,
        valid_until,
        take: (depth == 1).then(|| ask.request.to_string()),
    }))
}

/// Granted only by a majority, within the lease after the clock-drift
/// allowance; otherwise every level granted anywhere is released (at once
/// where the reply is known, in the background where it is not). Cancel safe
/// the same way: dropping the future releases in the background.
pub(crate) async fn acquire<M: NodeOps>(members: &[Arc<M>], ask: &Ask<'_>) -> Result<Attempt> {
    let n = members.len();
    let need = majority(n);
    let sent_at = Instant::now();
    let mut partial = Partial::new(
        Levels {
            members: members.to_vec(),
            keys: ask.keys.clone(),
            owner: ask.owner.clone(),
            held: vec![false; n],
            tokens: vec![None; n],
            fresh: vec![false; n],
            take: ask.request.to_string(),
            requests: vec![None; n],
        },
        true,
    );
    let t = gather(members, ask, &mut partial, sent_at).await;
    let Tally {
        counts,
        pttls,
        place,
        errors,
        unknown,
    } = t;
    drop(unknown);

    if counts.len() >= need {
        return granted(members, ask, partial, &counts, sent_at).await;
    }
    let split = !counts.is_empty();
    partial.undo().await;
    let answered = counts.len() + pttls.len();
    if n - answered > n - need {
        if n > 1 {
            crate::observe::quorum_attempt("unreachable", None);
        }
        return Err(quorum_error("acquire", n, answered, errors));
    }
    if n > 1 {
        crate::observe::quorum_attempt(if split { "split" } else { "held" }, None);
    }
    Ok(Attempt::Denied(Refusal {
        pttl: combine_pttl(&pttls),
        split,
        place,
    }))
}

/// The replies of one acquire attempt so far.
struct Tally<M: NodeOps> {
    /// (master, reentry count) of each grant.
    counts: Vec<(usize, u64)>,
    /// Remaining leases of the holders that refused.
    pttls: Vec<i64>,
    /// The waiter's client's nearest place to the front among the clients
    /// the refusing masters wake one by one.
    place: Option<u64>,
    errors: Vec<Error>,
    /// Requests whose outcome is unknown: re-sent and undone when dropped.
    unknown: Vec<Pending<M>>,
}

impl<M: NodeOps> Tally<M> {
    fn absorb(&mut self, partial: &mut Partial<M>, i: usize, r: Result<AcquireReply>, pending: Pending<M>) {
        match r {
            Ok(AcquireReply::Acquired { token, count }) => {
                partial.held[i] = true;
                partial.tokens[i] = Some(token);
                partial.fresh[i] = count == 1;
                self.counts.push((i, count));
            }
            Ok(AcquireReply::Held { pttl, place }) => {
                self.pttls.push(pttl);
                self.place = self.place.into_iter().chain(place).min();
            }
            Err(e) => {
                crate::observe::node_failure(i);
                self.errors.push(e);
                self.unknown.push(pending);
            }
        }
    }
}

/// Picks the token of a fresh hold: the highest counter among the granting
/// masters, written back until a majority holds at least it (any later
/// majority overlaps this one, so its highest counter is higher). Updates the
/// per-master tokens; `None` when no majority could be brought to it.
async fn write_back<M: NodeOps>(
    members: &[Arc<M>],
    keys: &LockKeys,
    owner: &Str,
    partial: &mut Partial<M>,
    need: usize,
) -> Option<u64> {
    let token = partial.tokens.iter().flatten().copied().max()?;
    let lagging: Vec<usize> = (0..members.len())
        .filter(|i| partial.held[*i] && partial.tokens[*i].is_some_and(|t| t < token))
        .collect();
    if !lagging.is_empty() {
        let raised = futures::future::join_all(lagging.iter().map(|i| {
            let m = members[*i].clone();
            let held = partial.tokens[*i].unwrap_or_default();
            async move { (*i, m.raise_token(keys, owner, held, token).await) }
        }))
        .await;
        for (i, r) in raised {
            partial.tokens[i] = match r {
                // The hold's own counter there is now `token` (it is held, so
                // nobody else moved it).
                Ok(_) => Some(token),
                // Unknown: the release there goes without a token check.
                Err(_) => None,
            };
        }
    }
    let at_token = partial.tokens.iter().filter(|t| **t == Some(token)).count();
    (at_token >= need).then_some(token)
}

/// What a release on every master found.
pub(crate) enum Released {
    /// Released (or one level left) on a majority.
    Done,
    /// A majority no longer had the hold.
    NotHeld,
}

/// Whose hold a release leaves: the owner field, and the request whose
/// fresh take made the hold (see `Release::take`), when known.
#[derive(Clone)]
pub(crate) struct Holder {
    pub(crate) owner: Str,
    pub(crate) take: Option<String>,
}

/// Releases one level on every master (per-master tokens as
/// [`Node::release`]). Returns once the outcome is known on a majority and
/// every master the hold is known on (a token in `tokens`) has answered or
/// failed (each within its command timeout); other masters still answering
/// finish in the background, and those whose outcome is unknown get the
/// same request again there.
pub(crate) async fn release<M: NodeOps>(
    members: &[Arc<M>],
    keys: &Arc<LockKeys>,
    holder: &Holder,
    tokens: &[Option<u64>],
    relet: Duration,
    request: &str,
    record_ttl: Duration,
) -> Result<Released> {
    let n = members.len();
    let need = majority(n);
    let mut replies = Unordered::new(members.iter().enumerate().map(|(i, m)| {
        let (m, keys, holder, request) = (m.clone(), keys.clone(), holder.clone(), request.to_string());
        let token = tokens.get(i).copied().flatten();
        async move {
            let first = Release {
                owner: &holder.owner,
                token,
                relet,
                request: &request,
                resent: false,
                take: holder.take.as_deref(),
            };
            let r = m.release(&keys, &first).await;
            if matches!(r, Err(ref e) if e.is_outcome_unknown()) {
                crate::observe::node_failure(i);
                let give_up = Instant::now() + record_ttl / 2;
                let spawner = m.spawner().clone();
                spawner.spawn(resend_release(m, keys, holder, token, relet, request, give_up));
            }
            (token.is_some(), r)
        }
    }));
    let (mut done, mut not_held) = (0, 0);
    let mut errors = Vec::new();
    // Every master the hold is known on answers (or fails, within its
    // command timeout) before the release returns: `Ok` means released
    // wherever the hold was granted, not only on a majority.
    let mut held_left = tokens.iter().take(n).filter(|t| t.is_some()).count();
    while (done + not_held < need || held_left > 0) && errors.len() <= n - need {
        let Some((held, r)) = replies.next().await else { break };
        if held {
            held_left -= 1;
        }
        match r {
            Ok(ReleaseReply::Released | ReleaseReply::StillHeld(_)) => done += 1,
            Ok(ReleaseReply::NotHeld) => not_held += 1,
            Err(e) => errors.push(e),
        }
    }
    replies.finish_in_background(members[0].spawner());
    if not_held >= need || (done + not_held >= need && done == 0) {
        return Ok(Released::NotHeld);
    }
    if done + not_held >= need {
        return Ok(Released::Done);
    }
    Err(quorum_error("release", n, done + not_held, errors))
}

/// Re-sends a release whose outcome is unknown until the master answers or
/// `give_up` (keep it well inside the request record's life, so a late run
/// never subtracts twice). The caller spawns it.
pub(crate) async fn resend_release<M: NodeOps>(
    member: Arc<M>,
    keys: Arc<LockKeys>,
    holder: Holder,
    token: Option<u64>,
    relet: Duration,
    request: String,
    give_up: Instant,
) {
    let mut pause = RESEND;
    loop {
        let again = Release {
            owner: &holder.owner,
            token,
            relet,
            request: &request,
            resent: true,
            take: holder.take.as_deref(),
        };
        match member.release(&keys, &again).await {
            Err(e) if e.is_outcome_unknown() && Instant::now() + pause.peek() < give_up => {
                tokio::time::sleep(pause.next()).await;
            }
            Err(e) => {
                tracing::warn!(lock = %keys.name, error = %e, "release still unconfirmed; the lease bounds the hold");
                break;
            }
            Ok(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The quorum arithmetic against in-memory masters (pure logic; the
    //! real-server behaviour is in tests/quorum.rs).

    use super::*;
    use crate::runtime::Spawner;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// An in-memory master: one lock, a fencing counter, up or down.
    struct Fake {
        down: bool,
        spawner: Spawner,
        /// (owner, count) of the hold, if any.
        hold: Mutex<Option<(String, u64)>>,
        counter: Mutex<u64>,
        /// Replay records: request id -> (token, count).
        records: Mutex<std::collections::HashMap<String, (u64, u64)>>,
        /// Release replay records: request id -> reply.
        release_records: Mutex<std::collections::HashMap<String, ReleaseReply>>,
        /// The next release runs and its reply is lost.
        lose_next_release_reply: AtomicBool,
        release_calls: std::sync::atomic::AtomicUsize,
    }

    impl Default for Fake {
        fn default() -> Fake {
            Fake {
                down: false,
                spawner: Spawner::new(tokio::runtime::Handle::current()),
                hold: Default::default(),
                counter: Default::default(),
                records: Default::default(),
                release_records: Default::default(),
                lose_next_release_reply: AtomicBool::new(false),
                release_calls: Default::default(),
            }
        }
    }

    fn unreachable() -> Error {
        Error::Connection {
            op: "fake",
            message: "master down".into(),
        }
    }

    impl NodeOps for Fake {
        async fn acquire(&self, _: &LockKeys, a: &Acquire<'_>) -> Result<AcquireReply> {
            let (owner, request) = (a.owner, a.request);
            if self.down {
                return Err(unreachable());
            }
            if let Some((token, count)) = self.records.lock().get(request) {
                return Ok(AcquireReply::Acquired {
                    token: *token,
                    count: *count,
                });
            }
            let mut hold = self.hold.lock();
            let mut counter = self.counter.lock();
            let count = match &mut *hold {
                None => {
                    *counter += 1;
                    *hold = Some((owner.to_string(), 1));
                    1
                }
                Some((o, c)) if o == owner => {
                    *c += 1;
                    *c
                }
                Some(_) => {
                    return Ok(AcquireReply::Held {
                        pttl: 1000,
                        place: None,
                    })
                }
            };
            self.records.lock().insert(request.to_string(), (*counter, count));
            Ok(AcquireReply::Acquired { token: *counter, count })
        }

        async fn release(&self, _: &LockKeys, r: &Release<'_>) -> Result<ReleaseReply> {
            let (owner, token, request) = (r.owner, r.token, r.request);
            self.release_calls.fetch_add(1, Ordering::SeqCst);
            if self.down {
                return Err(unreachable());
            }
            if let Some(reply) = self.release_records.lock().get(request) {
                return Ok(*reply);
            }
            let mut hold = self.hold.lock();
            let reply = match &mut *hold {
                Some((o, c)) if o == owner && token.is_none_or(|t| t == *self.counter.lock()) => {
                    *c -= 1;
                    if *c == 0 {
                        *hold = None;
                        ReleaseReply::Released
                    } else {
                        ReleaseReply::StillHeld(*c)
                    }
                }
                _ => ReleaseReply::NotHeld,
            };
            self.release_records.lock().insert(request.to_string(), reply);
            if self.lose_next_release_reply.swap(false, Ordering::SeqCst) {
                return Err(unreachable());
            }
            Ok(reply)
        }

        async fn raise_token(&self, _: &LockKeys, _: &Str, _: u64, token: u64) -> Result<u64> {
            if self.down {
                return Err(unreachable());
            }
            let mut c = self.counter.lock();
            *c = (*c).max(token);
            Ok(*c)
        }

        fn spawner(&self) -> &Spawner {
            &self.spawner
        }

        fn counts(&self) -> bool {
            true
        }
    }

    fn holder(m: &Fake) -> Option<String> {
        m.hold.lock().as_ref().map(|(o, _)| o.clone())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grant_iff_a_majority_is_free_and_partial_grants_are_rolled_back() {
        let keys = Arc::new(LockKeys::new(
            crate::keys::Names::new("", "fake").unwrap(),
            crate::protocol::reentrant(),
        ));
        let me: Str = Str::from_static("me:1");
        let mut cases = 0;
        for n in 1..=7usize {
            // Each master is free (0), held by another owner (1) or down (2).
            for code in 0..3usize.pow(n as u32) {
                let states: Vec<usize> = (0..n).map(|i| code / 3usize.pow(i as u32) % 3).collect();
                let members: Vec<Arc<Fake>> = states
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let f = Fake {
                            down: *s == 2,
                            ..Default::default()
                        };
                        // Counters differ between masters, as after failures.
                        *f.counter.lock() = (i as u64 * 7) % 5;
                        if *s == 1 {
                            *f.hold.lock() = Some(("other:1".into(), 1));
                        }
                        Arc::new(f)
                    })
                    .collect();
                let free = states.iter().filter(|s| **s == 0).count();
                let answering = states.iter().filter(|s| **s != 2).count();
                let before: Vec<u64> = members.iter().map(|m| *m.counter.lock()).collect();
                let request = format!("r{n}-{code}");
                let ask = Ask {
                    keys: &keys,
                    owner: &me,
                    lease: Duration::from_secs(10),
                    request: &request,
                    waiting: Waiting::No,
                    grant: None,
                    grant_lease: None,
                    sent_before: false,
                    attempt: 0,
                    known: None,
                };
                let r = acquire(&members, &ask).await;
                let label = format!("n={n} states={states:?}");
                if free >= majority(n) {
                    let Ok(Attempt::Granted(g)) = r else {
                        panic!("{label}: expected a grant, got {r:?}")
                    };
                    assert_eq!(g.depth, 1, "{label}");
                    // The token is above every counter any granting master had,
                    // and a majority's counters now hold it.
                    let highest_free = (0..n).filter(|i| states[*i] == 0).map(|i| before[i]).max().unwrap();
                    assert!(g.token > highest_free, "{label}");
                    let at_least = members.iter().filter(|m| *m.counter.lock() >= g.token).count();
                    assert!(at_least >= majority(n), "{label}: token written back to {at_least}");
                    let mine = members.iter().filter(|m| holder(m).as_deref() == Some("me:1")).count();
                    assert!(mine >= majority(n), "{label}");
                    // Releasing frees every master we held.
                    let holder = Holder {
                        owner: me.clone(),
                        take: g.take.clone(),
                    };
                    let released = release(
                        &members,
                        &keys,
                        &holder,
                        &g.node_tokens,
                        Duration::ZERO,
                        "rel",
                        Duration::from_secs(1),
                    )
                    .await;
                    assert!(matches!(released, Ok(Released::Done)), "{label}");
                } else {
                    match r {
                        Ok(Attempt::Denied(_)) => {
                            assert!(answering >= majority(n), "{label}: denied, not an error")
                        }
                        Err(Error::QuorumNotReached { reached, .. }) => {
                            assert!(answering < majority(n), "{label}: an error with a majority answering");
                            assert!(reached < majority(n), "{label}");
                        }
                        Err(e) if n == 1 => assert!(matches!(e, Error::Connection { .. }), "{label}"),
                        other => panic!("{label}: expected no grant, got {other:?}"),
                    }
                }
                // Masters still answering finish in the background.
                let settled = Instant::now() + Duration::from_secs(2);
                while members.iter().any(|m| holder(m).as_deref() == Some("me:1")) && Instant::now() < settled {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                for (i, m) in members.iter().enumerate() {
                    assert_ne!(
                        holder(m).as_deref(),
                        Some("me:1"),
                        "{label}: master {i} still held after the call"
                    );
                    if states[i] == 1 {
                        assert_eq!(
                            holder(m).as_deref(),
                            Some("other:1"),
                            "{label}: another owner's hold touched"
                        );
                    }
                }
                cases += 1;
            }
        }
        assert_eq!(cases, (1..=7u32).map(|n| 3usize.pow(n)).sum::<usize>());
    }

    #[test]
    fn majority_and_drift() {
        assert_eq!([1, 3, 5, 7].map(majority), [1, 2, 3, 4]);
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(combine_pttl(&[-3, 40, 7, -1]), 7);
        assert_eq!(combine_pttl(&[-1, -3]), -3);
        assert_eq!(combine_pttl(&[-1]), -1);
    }

    /// A give-back whose reply was lost goes again under the same request
    /// id: a re-entered level the master did give back is not given back a
    /// second time (the owner keeps the level it held before the attempt).
    #[tokio::test]
    async fn a_give_back_whose_reply_was_lost_is_not_applied_twice() {
        let keys = Arc::new(LockKeys::new(
            crate::keys::Names::new("", "fake").unwrap(),
            crate::protocol::reentrant(),
        ));
        let master = Arc::new(Fake::default());
        *master.counter.lock() = 7;
        // Held twice: once before the attempt, once by the attempt itself.
        *master.hold.lock() = Some(("me:1".into(), 2));
        master.lose_next_release_reply.store(true, Ordering::SeqCst);
        let mut partial = Partial::new(
            Levels {
                members: vec![master.clone()],
                keys,
                owner: Str::from_static("me:1"),
                held: vec![true],
                tokens: vec![Some(7)],
                fresh: vec![false],
                take: "attempt".into(),
                requests: vec![None],
            },
            true,
        );
        partial.undo().await;
        assert_eq!(master.hold.lock().as_ref().map(|h| h.1), Some(1), "given back once");
        assert!(partial.held[0], "outcome unknown: still to settle");
        drop(partial); // settles in the background
        let until = Instant::now() + Duration::from_secs(5);
        while master.release_calls.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < until, "the background give-back ran");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            master.hold.lock().as_ref().map(|h| h.1),
            Some(1),
            "the level held before the attempt is still held"
        );
    }
}
