//! A quorum of independent masters.
//!
//! Every lock operation goes to all masters at once, each call bounded by the
//! per-node timeout, and counts when a majority (N/2 + 1) agrees. One master
//! is the single-deployment case of the same code: its majority is itself.
//!
//! The fan-out is generic over [`NodeOps`] so the arithmetic can be checked
//! against in-memory masters as well as real ones.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{Stream, StreamExt};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::keys::{LockKeys, Str};
use crate::node::{AcquireReply, Node, ReleaseReply};
use crate::protocol::Waiting;
use crate::runtime::{Backoff, DropGuard, Spawner, Undo};

/// The pauses between re-sends of a request whose outcome is unknown.
const RESEND: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// Masters needed out of `n`.
pub(crate) const fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The clock-drift allowance of a lease: 1 % of it plus 2 ms.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// What the quorum needs of one master.
pub(crate) trait NodeOps: Send + Sync + 'static {
    /// `resent`: `request` was sent before, its outcome unknown.
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        keys: &LockKeys,
        owner: &Str,
        lease: Duration,
        request: &str,
        waiting: Waiting,
        grant: Option<&str>,
        resent: bool,
    ) -> impl Future<Output = Result<AcquireReply>> + Send;

    #[allow(clippy::too_many_arguments)]
    fn release(
        &self,
        keys: &LockKeys,
        owner: &Str,
        token: Option<u64>,
        relet: Duration,
        request: &str,
        resent: bool,
    ) -> impl Future<Output = Result<ReleaseReply>> + Send;

    /// Raises the lock's counter to `token` (the quorum's), and the hold
    /// of `owner` that got `held` there to it as well.
    fn raise_token(
        &self,
        keys: &LockKeys,
        owner: &Str,
        held: u64,
        token: u64,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Whether this master may count toward a majority now (false while a
    /// restarted master waits out its delayed rejoin).
    fn counts(&self) -> bool;

    /// Where this master's background work (re-sends, give-backs) runs.
    fn spawner(&self) -> &Spawner;
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
}

/// One quorum acquire attempt's outcome.
#[derive(Debug)]
pub(crate) enum Attempt {
    Granted(Grant),
    /// Not granted. `pttl` is the smallest remaining lease the holders
    /// reported (-1: a key without TTL, -3: fair lock free but others
    /// queued). `split`: some masters granted but not a majority (rolled back).
    /// `place`: the waiter's client's place in line to be woken, where
    /// the masters keep one (see `AcquireReply::Held`).
    Denied {
        pttl: i64,
        split: bool,
        place: Option<u64>,
    },
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
                match member
                    .acquire(&keys, &owner, lease, &request, Waiting::No, None, true)
                    .await
                {
                    Ok(AcquireReply::Acquired { token, .. }) => {
                        undo_one(&*member, &keys, &owner, Some(token)).await;
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

/// Releases one level that nobody will own a guard for.
async fn undo_one<M: NodeOps>(member: &M, keys: &LockKeys, owner: &Str, token: Option<u64>) {
    let request = crate::keys::fresh_request_id();
    if let Err(e) = member
        .release(keys, owner, token, Duration::ZERO, &request, false)
        .await
    {
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
            let resent = self.requests[i].is_some();
            let request = self.requests[i]
                .get_or_insert_with(crate::keys::fresh_request_id)
                .clone();
            let (keys, owner) = (&self.keys, &self.owner);
            async move {
                let r = member
                    .release(keys, owner, token, Duration::ZERO, &request, resent)
                    .await;
                (i, r)
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
            requests: std::mem::take(&mut self.requests),
        };
        let spawner = rest.members[0].spawner().clone();
        spawner.spawn(async move { rest.undo().await });
    }
}

/// The replies of one fan-out, in the order they arrive.
///
/// `FuturesUnordered` would do, but it wakes its own task whenever it has
/// polled as many futures as it holds: with one to five masters that is on
/// nearly every reply, and on a multi-thread runtime each such wake hands the
/// task to the run queue and rouses an idle worker thread (measured: three
/// extra context switches per lock + unlock on one master). A quorum has a
/// handful of masters, so polling the unfinished ones on each wake is cheaper.
pub(crate) struct Unordered<F> {
    futures: Vec<Option<Pin<Box<F>>>>,
}

impl<F: Future> Unordered<F> {
    pub(crate) fn new(futures: impl IntoIterator<Item = F>) -> Self {
        Unordered {
            futures: futures.into_iter().map(|f| Some(Box::pin(f))).collect(),
        }
    }

    fn len(&self) -> usize {
        self.futures.iter().filter(|f| f.is_some()).count()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.futures.iter().all(Option::is_none)
    }

    /// Lets the futures still running finish in a task of their own (their
    /// outputs are dropped): the caller has what it needed from a majority.
    pub(crate) fn finish_in_background(mut self, spawner: &Spawner)
    where
        F: Send + 'static,
        F::Output: Send,
    {
        if !self.is_empty() {
            spawner.spawn(async move { while self.next().await.is_some() {} });
        }
    }
}

impl<F: Future> Stream for Unordered<F> {
    type Item = F::Output;

    fn poll_next(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<F::Output>> {
        // Every future is boxed and pinned, so the vector itself may move.
        let this = self.get_mut();
        let mut any = false;
        for slot in this.futures.iter_mut() {
            let Some(f) = slot else { continue };
            any = true;
            if let std::task::Poll::Ready(out) = f.as_mut().poll(cx) {
                *slot = None;
                return std::task::Poll::Ready(Some(out));
            }
        }
        if any {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(None)
        }
    }
}

/// Runs `f` on every master at once and waits for all; the answers, when a
/// majority answered, else the quorum error naming the failures.
pub(crate) async fn on_each<'a, T, F, Fut>(members: &'a [Arc<Member>], op: &'static str, f: F) -> Result<Vec<T>>
where
    F: Fn(&'a Node) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let n = members.len();
    let results = futures::future::join_all(members.iter().map(|m| f(&m.node))).await;
    let mut ok = Vec::with_capacity(n);
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(v) => ok.push(v),
            Err(e) => errors.push(e),
        }
    }
    if ok.len() < majority(n) {
        return Err(quorum_error(op, n, ok.len(), errors));
    }
    Ok(ok)
}

/// Runs one future per master and returns each one's output, `None` for
/// those still running once a majority of outputs passed `good` and a grace
/// as long again as that took has passed (at least 20 ms, at most
/// `max_grace`). Those go on in the background, their outputs dropped: a
/// stopped master holds nobody up. With one master this waits for it.
pub(crate) async fn majority_then_grace<T, F>(
    futures: Vec<F>,
    good: impl Fn(&T) -> bool,
    max_grace: Duration,
    spawner: &Spawner,
) -> Vec<Option<T>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let n = futures.len();
    let start = Instant::now();
    let mut pending = Unordered::new(
        futures
            .into_iter()
            .enumerate()
            .map(|(i, f)| async move { (i, f.await) }),
    );
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut goods = 0;
    while goods < majority(n) {
        let Some((i, r)) = pending.next().await else {
            return out;
        };
        goods += usize::from(good(&r));
        out[i] = Some(r);
    }
    let grace = start
        .elapsed()
        .clamp(Duration::from_millis(20), max_grace.max(Duration::from_millis(20)));
    let end = Instant::now() + grace;
    while let Ok(Some((i, r))) = tokio::time::timeout_at(end.into(), pending.next()).await {
        out[i] = Some(r);
    }
    pending.finish_in_background(spawner);
    out
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

/// The error of an operation that reached fewer than a majority.
pub(crate) fn quorum_error(op: &'static str, n: usize, reached: usize, mut errors: Vec<Error>) -> Error {
    if n == 1 {
        if let Some(e) = errors.pop() {
            return e;
        }
    }
    // A refusal that a retry cannot fix (wrong type, permissions) says more
    // than "not enough masters".
    if let Some(i) = errors.iter().position(|e| !e.is_retryable()) {
        return errors.swap_remove(i);
    }
    Error::QuorumNotReached {
        op,
        reached,
        needed: majority(n),
        masters: n,
        last: describe_failures(&errors),
    }
}

/// Every distinct failure once, in the order seen, so a quorum error says
/// why each master did not count (a replica's READONLY, a timeout, ...).
fn describe_failures(errors: &[Error]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let text = e.to_string();
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    if seen.is_empty() {
        return "masters left out (failing recently, or waiting out the delayed rejoin)".into();
    }
    seen.join("; ")
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
            let r = pending
                .member
                .acquire(
                    ask.keys,
                    ask.owner,
                    ask.lease,
                    ask.request,
                    ask.waiting,
                    ask.grant,
                    false,
                )
                .await;
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
/// late or with no token a majority can agree on, undone and denied.
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
    let (token, node_tokens) = match (&ask.known, reentered) {
        (Some((token, tokens)), true) => (*token, tokens.clone()),
        _ => match write_back(members, ask.keys, ask.owner, &mut partial, need).await {
            Some(token) => (token, partial.tokens.clone()),
            None => {
                partial.undo().await;
                crate::observe::quorum_attempt("token_write_back_failed", None);
                return Ok(Attempt::Denied {
                    pttl: 0,
                    split: true,
                    place: None,
                });
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
        return Ok(Attempt::Denied {
            pttl: 0,
            split: true,
            place: None,
        });
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
    Ok(Attempt::Denied {
        pttl: combine_pttl(&pttls),
        split,
        place,
    })
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

/// Releases one level on every master (per-master tokens as
/// [`Node::release`]). Returns once the outcome is known on a majority and
/// every master the hold is known on (a token in `tokens`) has answered or
/// failed (each within its command timeout); other masters still answering
/// finish in the background, and those whose outcome is unknown get the
/// same request again there.
pub(crate) async fn release<M: NodeOps>(
    members: &[Arc<M>],
    keys: &Arc<LockKeys>,
    owner: &Str,
    tokens: &[Option<u64>],
    relet: Duration,
    request: &str,
    record_ttl: Duration,
) -> Result<Released> {
    let n = members.len();
    let need = majority(n);
    let mut replies = Unordered::new(members.iter().enumerate().map(|(i, m)| {
        let (m, keys, owner, request) = (m.clone(), keys.clone(), owner.clone(), request.to_string());
        let token = tokens.get(i).copied().flatten();
        async move {
            let r = m.release(&keys, &owner, token, relet, &request, false).await;
            if matches!(r, Err(ref e) if e.is_outcome_unknown()) {
                crate::observe::node_failure(i);
                let give_up = Instant::now() + record_ttl / 2;
                let spawner = m.spawner().clone();
                spawner.spawn(resend_release(m, keys, owner, token, relet, request, give_up));
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
    owner: Str,
    token: Option<u64>,
    relet: Duration,
    request: String,
    give_up: Instant,
) {
    let mut pause = RESEND;
    loop {
        match member.release(&keys, &owner, token, relet, &request, true).await {
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

/// One master of a client: its connection and its rejoin state.
pub(crate) struct Member {
    pub(crate) node: Node,
    pub(crate) index: usize,
    rejoin: Arc<Rejoin>,
    /// In a quorum: a master that just failed to answer is left out of
    /// acquire attempts until then, so a stopped master does not cost every
    /// attempt the node timeout. The first attempt after it probes again.
    resting_until: Mutex<Option<Instant>>,
    quorum: bool,
    /// False while the server behind this master has not been told apart
    /// from the others (it was down at build); a duplicate stays false.
    identified: AtomicBool,
    /// Where this master's background work runs.
    spawner: Spawner,
}

/// The delayed-rejoin state of one master.
struct Rejoin {
    index: usize,
    /// How long a master that (re)started must wait before it counts.
    delay: Option<Duration>,
    /// While set, the master is out of the majority until this instant.
    out_until: Mutex<Option<Instant>>,
    /// The connection broke since the master's uptime was last checked.
    suspect: AtomicBool,
    /// fred announces a re-opened connection before it writes anything on
    /// it, so an event pending here after a reply means the command may have
    /// run on a new connection (to a restarted server).
    reconnects: Mutex<Option<tokio::sync::broadcast::Receiver<fred::types::config::Server>>>,
}

impl Rejoin {
    fn observe_uptime(&self, uptime: Duration) {
        let Some(delay) = self.delay else { return };
        if uptime >= delay {
            return;
        }
        let until = Instant::now() + (delay - uptime);
        let mut out = self.out_until.lock();
        if out.is_none_or(|t| t < until) {
            tracing::warn!(
                master = self.index,
                uptime_s = uptime.as_secs(),
                out_ms = (delay - uptime).as_millis() as u64,
                "master (re)started recently; it stays out of the majority for the rejoin delay"
            );
            *out = Some(until);
        }
    }
}

impl Member {
    pub(crate) fn new(
        node: Node,
        index: usize,
        rejoin_delay: Option<Duration>,
        quorum: bool,
        spawner: Spawner,
    ) -> Member {
        let reconnects = rejoin_delay.map(|_| fred::prelude::EventInterface::reconnect_rx(&node.client));
        Member {
            spawner,
            resting_until: Mutex::new(None),
            quorum,
            identified: AtomicBool::new(true),
            node,
            index,
            rejoin: Arc::new(Rejoin {
                index,
                delay: rejoin_delay,
                out_until: Mutex::new(None),
                suspect: AtomicBool::new(false),
                reconnects: Mutex::new(reconnects),
            }),
        }
    }

    /// Whether the connection was re-opened since the last look (then the
    /// master is suspect until its uptime was checked).
    fn reconnected(&self) -> bool {
        use tokio::sync::broadcast::error::TryRecvError;
        let mut rx = self.rejoin.reconnects.lock();
        let Some(rx) = rx.as_mut() else { return false };
        let mut seen = false;
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = rx.try_recv() {
            seen = true;
        }
        if seen {
            self.suspect();
        }
        seen
    }

    /// Records the master's uptime: one that started less than the rejoin
    /// delay ago stays out until the delay has passed since its start.
    pub(crate) fn observe_uptime(&self, uptime: Duration) {
        self.rejoin.observe_uptime(uptime);
    }

    /// A master that was down when the client was built: it stays out of
    /// the majority until its server answers and is found to be none of the
    /// other masters (`seen`: run_id → master). One that is the same server
    /// as another master never counts (it would count twice).
    pub(crate) fn identify_later(self: &Arc<Self>, seen: Arc<Mutex<std::collections::HashMap<String, usize>>>) {
        self.identified.store(false, Ordering::Release);
        let member = Arc::downgrade(self);
        self.spawner.spawn(async move {
            let mut pause = RESEND;
            loop {
                // Ends with the client.
                let Some(m) = member.upgrade() else { return };
                match m.node.identity().await {
                    Ok((run_id, uptime)) => {
                        m.observe_uptime(uptime);
                        if !run_id.is_empty() {
                            let mut seen = seen.lock();
                            if let Some(&other) = seen.get(&run_id).filter(|&&j| j != m.index) {
                                tracing::error!(
                                    master = m.index,
                                    same_as = other,
                                    %run_id,
                                    "this master is the same server as another one; it never counts toward the majority"
                                );
                                return;
                            }
                            seen.insert(run_id, m.index);
                        }
                        m.identified.store(true, Ordering::Release);
                        return;
                    }
                    // Still down: ask again later.
                    Err(e) if e.is_outcome_unknown() => {}
                    // It answers, but not INFO (an ACL, say): as at build, a
                    // master that cannot be checked counts.
                    Err(e) => {
                        tracing::warn!(master = m.index, error = %e, "cannot tell this master apart from the others");
                        m.identified.store(true, Ordering::Release);
                        return;
                    }
                }
                drop(m);
                tokio::time::sleep(pause.next()).await;
            }
        });
    }

    /// Keeps the master out of the majority until its uptime was checked
    /// again (its connection broke or was re-opened: it may have restarted).
    pub(crate) fn suspect(&self) {
        if self.rejoin.delay.is_none() || self.rejoin.suspect.swap(true, Ordering::AcqRel) {
            return;
        }
        let (node, rejoin) = (self.node.clone(), self.rejoin.clone());
        self.spawner.spawn(async move {
            let mut pause = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
            loop {
                match node.identity().await {
                    Ok((_, uptime)) => {
                        rejoin.observe_uptime(uptime);
                        rejoin.suspect.store(false, Ordering::Release);
                        return;
                    }
                    Err(_) => tokio::time::sleep(pause.next()).await,
                }
            }
        });
    }

    fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if matches!(e, Error::Connection { .. }) {
                self.suspect();
            }
            if self.quorum && e.is_outcome_unknown() {
                let rest = (self.node.command_timeout * 5).min(Duration::from_secs(1));
                *self.resting_until.lock() = Some(Instant::now() + rest);
            }
        }
        r
    }
}

impl NodeOps for Member {
    async fn acquire(
        &self,
        keys: &LockKeys,
        owner: &Str,
        lease: Duration,
        request: &str,
        waiting: Waiting,
        grant: Option<&str>,
        resent: bool,
    ) -> Result<AcquireReply> {
        let r = self.note(
            self.node
                .acquire(keys, owner, lease, request, waiting, grant, resent)
                .await,
        );
        if r.is_ok() && self.reconnected() {
            // It ran on a re-opened connection, maybe on a restarted master:
            // not counted (and undone, as a reply of unknown outcome).
            return Err(Error::Connection {
                op: "acquire",
                message: "the master's connection was re-opened; not counted until its uptime is checked".into(),
            });
        }
        r
    }

    async fn release(
        &self,
        keys: &LockKeys,
        owner: &Str,
        token: Option<u64>,
        relet: Duration,
        request: &str,
        resent: bool,
    ) -> Result<ReleaseReply> {
        self.note(self.node.release(keys, owner, token, relet, request, resent).await)
    }

    async fn raise_token(&self, keys: &LockKeys, owner: &Str, held: u64, token: u64) -> Result<u64> {
        self.note(self.node.raise_token(keys, owner, held, token).await)
    }

    fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    fn counts(&self) -> bool {
        if !self.identified.load(Ordering::Acquire) {
            return false;
        }
        if self.quorum {
            let mut resting = self.resting_until.lock();
            match *resting {
                Some(t) if Instant::now() < t => return false,
                Some(_) => *resting = None,
                None => {}
            }
        }
        if self.rejoin.delay.is_none() {
            return true;
        }
        if self.reconnected() || self.rejoin.suspect.load(Ordering::Acquire) {
            return false;
        }
        let mut out = self.rejoin.out_until.lock();
        match *out {
            Some(t) if Instant::now() < t => false,
            Some(_) => {
                *out = None;
                tracing::info!(master = self.index, "master counts toward the majority again");
                true
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The quorum arithmetic against in-memory masters (pure logic; the
    //! real-server behaviour is in tests/quorum.rs).

    use super::*;

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
        async fn acquire(
            &self,
            _: &LockKeys,
            owner: &Str,
            _: Duration,
            request: &str,
            _: Waiting,
            _: Option<&str>,
            _: bool,
        ) -> Result<AcquireReply> {
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

        async fn release(
            &self,
            _: &LockKeys,
            owner: &Str,
            token: Option<u64>,
            _: Duration,
            request: &str,
            _: bool,
        ) -> Result<ReleaseReply> {
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
        let keys = Arc::new(LockKeys::new("", "fake").unwrap());
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
                    let released = release(
                        &members,
                        &keys,
                        &me,
                        &g.node_tokens,
                        Duration::ZERO,
                        "rel",
                        Duration::from_secs(1),
                    )
                    .await;
                    assert!(matches!(released, Ok(Released::Done)), "{label}");
                } else {
                    match r {
                        Ok(Attempt::Denied { .. }) => {
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
        let keys = Arc::new(LockKeys::new("", "fake").unwrap());
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
