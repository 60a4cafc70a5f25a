//! A quorum of independent masters (DESIGN.md §8).
//!
//! Every lock operation goes to all masters at once, each call bounded by the
//! per-node timeout, and counts when a majority (N/2 + 1) agrees. One master
//! is the single-deployment case of the same code: its majority is itself.
//!
//! The fan-out is generic over [`NodeOps`] so the arithmetic can be checked
//! against in-memory masters as well as real ones.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::node::{AcquireReply, Node, ReleaseReply};

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
    fn acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        request: &str,
        enqueue: bool,
    ) -> impl Future<Output = Result<AcquireReply>> + Send;

    #[allow(clippy::too_many_arguments)]
    fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        token: Option<u64>,
        relet: Duration,
        request: &str,
        resent: bool,
    ) -> impl Future<Output = Result<ReleaseReply>> + Send;

    fn raise_token(&self, keys: &LockKeys, token: u64) -> impl Future<Output = Result<u64>> + Send;

    /// Whether this master may count toward a majority now (false while a
    /// restarted master waits out its delayed rejoin).
    fn counts(&self) -> bool;
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
    Denied {
        pttl: i64,
        split: bool,
    },
}

/// The owned context of one acquire attempt, shared with background undo.
pub(crate) struct Ask<'a> {
    pub keys: &'a Arc<LockKeys>,
    pub owner: &'a Arc<str>,
    pub lease: Duration,
    pub request: &'a str,
    pub enqueue: bool,
    /// The live hold this owner has already: (its token, its per-master
    /// tokens). A majority re-entering keeps them.
    pub known: Option<(u64, Vec<Option<u64>>)>,
}

/// An acquire sent to one master whose outcome nobody will act on yet. If
/// dropped armed (the attempt was cancelled or its reply lost) it re-sends the
/// same request in the background (a replay returns the first run's record)
/// and gives back what it got.
struct Pending<M: NodeOps> {
    member: Arc<M>,
    keys: Arc<LockKeys>,
    owner: Arc<str>,
    lease: Duration,
    request: String,
    armed: bool,
}

impl<M: NodeOps> Drop for Pending<M> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (member, keys, owner, lease) = (self.member.clone(), self.keys.clone(), self.owner.clone(), self.lease);
        let request = std::mem::take(&mut self.request);
        spawn(async move {
            let give_up = Instant::now() + lease;
            let mut pause = Duration::from_millis(50);
            loop {
                match member.acquire(&keys, &owner, lease, &request, false).await {
                    Ok(AcquireReply::Acquired { token, .. }) => {
                        undo_one(&*member, &keys, &owner, Some(token)).await;
                        break;
                    }
                    Err(e) if e.is_outcome_unknown() && Instant::now() + pause < give_up => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    _ => break,
                }
            }
        });
    }
}

/// Releases one level that nobody will own a guard for.
async fn undo_one<M: NodeOps>(member: &M, keys: &LockKeys, owner: &str, token: Option<u64>) {
    let request = crate::client::fresh_request_id();
    if let Err(e) = member
        .release(keys, owner, token, Duration::ZERO, &request, false)
        .await
    {
        tracing::debug!(lock = %keys.name, error = %e, "undoing a level nobody received failed; its lease bounds it");
    }
}

/// The levels an attempt holds on some masters before it is a guard: on
/// drop while armed they are released in the background.
struct Partial<M: NodeOps> {
    members: Vec<Arc<M>>,
    keys: Arc<LockKeys>,
    owner: Arc<str>,
    /// Per master: granted, and the token to release it with.
    held: Vec<bool>,
    tokens: Vec<Option<u64>>,
    armed: bool,
}

impl<M: NodeOps> Partial<M> {
    /// Releases every granted level and waits for it (each call bounded by
    /// the node timeout); what fails stays armed for the background.
    async fn undo(&mut self) {
        let calls = self.held.iter().enumerate().filter(|(_, h)| **h).map(|(i, _)| {
            let member = self.members[i].clone();
            let token = self.tokens[i];
            let (keys, owner) = (&self.keys, &self.owner);
            async move {
                let request = crate::client::fresh_request_id();
                let r = member
                    .release(keys, owner, token, Duration::ZERO, &request, false)
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

impl<M: NodeOps> Drop for Partial<M> {
    fn drop(&mut self) {
        if !self.armed || !self.held.iter().any(|h| *h) {
            return;
        }
        let mut rest = Partial {
            members: std::mem::take(&mut self.members),
            keys: self.keys.clone(),
            owner: self.owner.clone(),
            held: std::mem::take(&mut self.held),
            tokens: std::mem::take(&mut self.tokens),
            armed: false,
        };
        spawn(async move { rest.undo().await });
    }
}

/// Spawns on the current runtime; with none (a drop after shutdown) the work
/// is dropped and leases bound what it would have undone.
fn spawn<F: Future<Output = ()> + Send + 'static>(f: F) {
    if let Ok(h) = tokio::runtime::Handle::try_current() {
        h.spawn(f);
    }
}

/// The smallest meaningful PTTL among holders' replies.
fn combine_pttl(pttls: &[i64]) -> i64 {
    if let Some(p) = pttls.iter().copied().filter(|p| *p >= 0).min() {
        return p;
    }
    if pttls.contains(&-3) {
        return -3;
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
        last: errors
            .last()
            .map_or_else(|| "masters excluded (delayed rejoin)".into(), |e| e.to_string()),
    }
}

/// One acquire attempt on every master.
///
/// Granted only by a majority, within the lease after the clock-drift
/// allowance; otherwise every level granted anywhere is released (at once
/// where the reply is known, in the background where it is not). Cancel safe
/// the same way: dropping the future releases in the background.
pub(crate) async fn acquire<M: NodeOps>(members: &[Arc<M>], ask: &Ask<'_>) -> Result<Attempt> {
    let n = members.len();
    let need = majority(n);
    let sent_at = Instant::now();
    let mut partial = Partial {
        members: members.to_vec(),
        keys: ask.keys.clone(),
        owner: ask.owner.clone(),
        held: vec![false; n],
        tokens: vec![None; n],
        armed: true,
    };
    let mut replies: FuturesUnordered<_> = members
        .iter()
        .enumerate()
        .filter(|(_, m)| m.counts())
        .map(|(i, m)| {
            let mut pending = Pending {
                member: m.clone(),
                keys: ask.keys.clone(),
                owner: ask.owner.clone(),
                lease: ask.lease,
                request: ask.request.to_string(),
                armed: true,
            };
            async move {
                let r = pending
                    .member
                    .acquire(ask.keys, ask.owner, ask.lease, ask.request, ask.enqueue)
                    .await;
                if !matches!(r, Err(ref e) if e.is_outcome_unknown()) {
                    pending.armed = false;
                }
                (i, r, pending)
            }
        })
        .collect();
    let mut refused = n - replies.len();
    let mut counts: Vec<(usize, u64)> = Vec::with_capacity(n);
    let mut pttls = Vec::new();
    let mut errors = Vec::new();
    // Requests whose outcome is unknown: re-sent and undone when dropped.
    let mut unknown = Vec::new();
    // Stop once granted, or once refused for sure with enough answers to
    // call it contention; fewer answers than a majority is an error.
    while counts.len() < need && !(refused > n - need && counts.len() + pttls.len() >= need) {
        let Some((i, r, pending)) = replies.next().await else {
            break;
        };
        match r {
            Ok(AcquireReply::Acquired { token, count }) => {
                partial.held[i] = true;
                partial.tokens[i] = Some(token);
                counts.push((i, count));
            }
            Ok(AcquireReply::Held { pttl }) => {
                refused += 1;
                pttls.push(pttl);
            }
            Err(e) => {
                refused += 1;
                crate::observe::node_failure(i);
                errors.push(e);
                unknown.push(pending);
            }
        }
    }
    // Masters that have not answered yet are settled in the background.
    drop(replies);
    drop(unknown);

    if counts.len() >= need {
        let mut depths: Vec<u64> = counts.iter().map(|(_, c)| *c).collect();
        depths.sort_unstable_by(|a, b| b.cmp(a));
        let depth = depths[need - 1];
        let reentered = counts.iter().filter(|(_, c)| *c > 1).count() >= need;
        let (token, node_tokens) = match (&ask.known, reentered) {
            (Some((token, tokens)), true) => (*token, tokens.clone()),
            _ => match write_back(members, ask.keys, &mut partial, need).await {
                Some(token) => (token, partial.tokens.clone()),
                None => {
                    partial.undo().await;
                    crate::observe::quorum_attempt("token_write_back_failed", None);
                    return Ok(Attempt::Denied { pttl: 0, split: true });
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
            return Ok(Attempt::Denied { pttl: 0, split: true });
        }
        partial.armed = false;
        if n > 1 {
            crate::observe::quorum_attempt("granted", Some(valid_until - now));
        }
        let mut node_tokens = node_tokens;
        for (i, held) in partial.held.iter().enumerate() {
            if !held {
                node_tokens[i] = None;
            }
        }
        return Ok(Attempt::Granted(Grant {
            token,
            depth,
            node_tokens,
            sent_at,
            valid_until,
        }));
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
    })
}

/// Picks the token of a fresh hold: the highest counter among the granting
/// masters, written back until a majority holds at least it (any later
/// majority overlaps this one, so its highest counter is higher). Updates the
/// per-master tokens; `None` when no majority could be brought to it.
async fn write_back<M: NodeOps>(
    members: &[Arc<M>],
    keys: &LockKeys,
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
            async move { (*i, m.raise_token(keys, token).await) }
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

/// Releases one level on every master (the `resent` flag and per-master
/// tokens as [`Node::release`]). Masters whose outcome is unknown get the
/// same request again in the background.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release<M: NodeOps>(
    members: &[Arc<M>],
    keys: &Arc<LockKeys>,
    owner: &Arc<str>,
    tokens: &[Option<u64>],
    relet: Duration,
    request: &str,
    record_ttl: Duration,
) -> Result<Released> {
    let n = members.len();
    let need = majority(n);
    let results = futures::future::join_all(members.iter().enumerate().map(|(i, m)| {
        let token = tokens.get(i).copied().flatten();
        async move { m.release(keys, owner, token, relet, request, false).await }
    }))
    .await;
    let (mut done, mut not_held) = (0, 0);
    let mut errors = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(ReleaseReply::Released | ReleaseReply::StillHeld(_)) => done += 1,
            Ok(ReleaseReply::NotHeld) => not_held += 1,
            Err(e) => {
                crate::observe::node_failure(i);
                if e.is_outcome_unknown() {
                    resend_release(
                        members[i].clone(),
                        keys.clone(),
                        owner.clone(),
                        tokens.get(i).copied().flatten(),
                        relet,
                        request.to_string(),
                        record_ttl,
                    );
                }
                errors.push(e);
            }
        }
    }
    if not_held >= need {
        return Ok(Released::NotHeld);
    }
    if done + not_held >= need {
        return Ok(if done > 0 { Released::Done } else { Released::NotHeld });
    }
    Err(quorum_error("release", n, done + not_held, errors))
}

/// Re-sends a release whose outcome is unknown until a master answers; stops
/// well inside the request record's life, so a late run never subtracts twice.
fn resend_release<M: NodeOps>(
    member: Arc<M>,
    keys: Arc<LockKeys>,
    owner: Arc<str>,
    token: Option<u64>,
    relet: Duration,
    request: String,
    record_ttl: Duration,
) {
    let give_up = Instant::now() + record_ttl / 2;
    spawn(async move {
        let mut pause = Duration::from_millis(50);
        loop {
            match member.release(&keys, &owner, token, relet, &request, true).await {
                Err(e) if e.is_outcome_unknown() && Instant::now() + pause < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    tracing::warn!(lock = %keys.name, error = %e, "release still unconfirmed; the lease bounds the hold");
                    break;
                }
                Ok(_) => break,
            }
        }
    });
}

/// One master of a client: its connection and its rejoin state.
pub(crate) struct Member {
    pub(crate) node: Node,
    pub(crate) index: usize,
    rejoin: Arc<Rejoin>,
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
}

impl Rejoin {
    fn observe_uptime(&self, uptime: Duration) {
        let Some(delay) = self.delay else { return };
        if uptime >= delay {
            return;
        }
        let until = Instant::now() + (delay - uptime);
        let mut out = self.out_until.lock();
        if out.map_or(true, |t| t < until) {
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
    pub(crate) fn new(node: Node, index: usize, rejoin_delay: Option<Duration>) -> Member {
        Member {
            node,
            index,
            rejoin: Arc::new(Rejoin {
                index,
                delay: rejoin_delay,
                out_until: Mutex::new(None),
                suspect: AtomicBool::new(false),
            }),
        }
    }

    /// Records the master's uptime: one that started less than the rejoin
    /// delay ago stays out until the delay has passed since its start.
    pub(crate) fn observe_uptime(&self, uptime: Duration) {
        self.rejoin.observe_uptime(uptime);
    }

    /// Keeps the master out of the majority until its uptime was checked
    /// again (its connection broke or was re-opened: it may have restarted).
    pub(crate) fn suspect(&self) {
        if self.rejoin.delay.is_none() || self.rejoin.suspect.swap(true, Ordering::AcqRel) {
            return;
        }
        let (node, rejoin) = (self.node.clone(), self.rejoin.clone());
        spawn(async move {
            let mut pause = Duration::from_millis(20);
            loop {
                match node.identity().await {
                    Ok((_, uptime)) => {
                        rejoin.observe_uptime(uptime);
                        rejoin.suspect.store(false, Ordering::Release);
                        return;
                    }
                    Err(_) => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                }
            }
        });
    }

    fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(Error::Connection { .. }) = &r {
            self.suspect();
        }
        r
    }
}

impl NodeOps for Member {
    async fn acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        request: &str,
        enqueue: bool,
    ) -> Result<AcquireReply> {
        self.note(self.node.acquire(keys, owner, lease, request, enqueue).await)
    }

    async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        token: Option<u64>,
        relet: Duration,
        request: &str,
        resent: bool,
    ) -> Result<ReleaseReply> {
        self.note(self.node.release(keys, owner, token, relet, request, resent).await)
    }

    async fn raise_token(&self, keys: &LockKeys, token: u64) -> Result<u64> {
        self.note(self.node.raise_token(keys, token).await)
    }

    fn counts(&self) -> bool {
        if self.rejoin.suspect.load(Ordering::Acquire) {
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
