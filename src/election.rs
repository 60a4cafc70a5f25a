//! Leader election: its handle, a leadership, and the observers of
//! leaders.
//!
//! The leader of an election is the holder of its lock (a reentrant lock of
//! the election's name, held by an owner of its own for each campaign and
//! kept by the watchdog); its term is that hold's fencing token, and the
//! value it proclaims lives in the lock's hash, so the value ends with the
//! hold. Each proclaimed value is appended to the election's log (a stream
//! beside the lock) and announced on its channel, so observers follow
//! every change in order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::Names;
use crate::lock::{Kind, Lock};
use crate::protocol::election::{self as proto, After, ElectionKeys, Proclaimed};
use crate::pubsub::Interest;
use crate::settings::Lease;
use crate::watchdog::LossReason;

/// An election: processes campaign with a value, one of them leads at a
/// time, and anyone can ask who leads or follow the leaders as they
/// change. Made by [`Client::election`](crate::Client::election). The
/// model is etcd's `concurrency.Election` (campaign, proclaim, resign,
/// leader, observe).
///
/// - **One leader at a time**, as one holder of a lock: leadership is the
///   hold of the election's lock, renewed by the watchdog while the
///   [`Leadership`] lives; a leader that dies or pauses past its lease is
///   replaced once the lease ends.
/// - **Terms strictly increase**: a term is the hold's fencing token (see
///   [`LockGuard::token`]), also across a `FLUSHALL` or a server restarted
///   empty. Pass it to what the leader writes, so a deposed leader's late
///   writes can be refused.
/// - **A leader is its value**: [`Election::leader`] and the observers
///   see a leader once it has said its value (the campaign does that as
///   soon as it holds the lock); the value ends with the hold.
/// - One master only (one server, Sentinel, Cluster): a quorum client
///   refuses to make one.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: lockwarden::Client) -> lockwarden::Result<()> {
/// let election = client.election("billing-cron")?;
/// let leadership = election.campaign("worker-7").await?;
/// tokio::select! {
///     _ = run_jobs(leadership.term()) => {}
///     reason = leadership.lost() => eprintln!("no longer leading: {reason}"),
/// }
/// leadership.resign().await.ok();
/// # Ok(()) }
/// # async fn run_jobs(_term: u64) {}
/// ```
#[derive(Clone)]
pub struct Election {
    core: Arc<Core>,
    lock: Lock,
    keys: Arc<ElectionKeys>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election").field("name", &self.lock.name()).finish()
    }
}

/// A leader as others see it: the value it proclaimed and its term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader proclaimed (an address, a host name, ...).
    pub value: String,
    /// The leadership's term: its fencing token, strictly greater than
    /// every earlier leader's.
    pub term: u64,
}

impl Leader {
    /// A leader of this value and term (to compare with what
    /// [`Election::leader`] and [`Election::observe`] give).
    pub fn new(value: impl Into<String>, term: u64) -> Leader {
        Leader {
            value: value.into(),
            term,
        }
    }
}

impl From<Proclaimed> for Leader {
    fn from(p: Proclaimed) -> Leader {
        Leader {
            value: p.value,
            term: p.term,
        }
    }
}

impl Election {
    pub(crate) fn new(core: Arc<Core>, names: Names) -> Election {
        let (channel, log) = names.election();
        let keys = Arc::new(ElectionKeys {
            lock: names.lock.clone(),
            channel,
            log,
        });
        let lock = Lock::new(core.clone(), names, Kind::Reentrant);
        Election { core, lock, keys }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Waits as long as it takes to lead, then proclaims `value` and
    /// returns the leadership. Each call is a contender of its own (a task
    /// already leading that campaigns again waits for its own resignation).
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]: retryable errors are retried for the client's
    /// `retry_transient_for`; [`Error::WrongType`] or [`Error::WrongKind`]
    /// when the election's key holds something else.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped at any point, it leaves no leadership behind (a
    /// lock it was granted meanwhile is released in the background).
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        match self.contend(value.into(), None).await? {
            Some(l) => Ok(l),
            None => unreachable!("a wait without a deadline ended without leading"),
        }
    }

    /// Campaigns for at most `wait` (zero: one attempt); `Ok(None)` when
    /// another process still leads by then.
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`]; [`Error::InvalidDuration`] for a wait
    /// above 30 days.
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub async fn try_campaign(&self, value: impl Into<String>, wait: Duration) -> Result<Option<Leadership>> {
        crate::settings::check_wait(wait)?;
        self.contend(value.into(), Some(Instant::now() + wait)).await
    }

    async fn contend(&self, value: String, deadline: Option<Instant>) -> Result<Option<Leadership>> {
        loop {
            let lock = self.lock.with_owner(self.core.owners.fresh());
            let guard = match deadline {
                None => lock.lock().await?,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    match lock.try_lock(left, Lease::Watchdog).await? {
                        Some(g) => g,
                        None => return Ok(None),
                    }
                }
            };
            let leadership = Leadership {
                guard,
                election: self.clone(),
                value: parking_lot::Mutex::new(String::new()),
            };
            match leadership.proclaim(value.clone()).await {
                Ok(()) => return Ok(Some(leadership)),
                // Lost between the grant and the proclaim (flushed, forced
                // free): nobody saw this leadership; campaign again.
                Err(Error::NotHeld { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The current leader, or `None` when nobody leads (the election's
    /// lock is free, or its holder has not proclaimed a value yet).
    ///
    /// # Errors
    ///
    /// Redis errors; [`Error::WrongType`] when the election's keys hold
    /// something else.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.read(After::Nothing).await?.leader.map(Leader::from))
    }

    async fn read(&self, after: After<'_>) -> Result<proto::Snapshot> {
        let reply = self.core.first().run_call(|_| proto::read(&self.keys, after)).await?;
        proto::snapshot(reply)
    }

    /// The leaders as they change: first the current one (if any), then
    /// every value proclaimed after it, in order, each a new term or a new
    /// value of the same term. A leader that resigns or whose lease runs
    /// out is followed by the next one to proclaim; nothing is yielded for
    /// the gap (ask [`Election::leader`] for that). Woken by the election's
    /// channel; the changes themselves are read from the election's log,
    /// so none is missed while the stream is polled (the log keeps the
    /// last 100 or so, for a day). The stream never ends; an item is an
    /// error when Redis failed, and the stream goes on after it (a second
    /// later).
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream, or a `next()` on it, at any point is safe: the
    /// stream keeps its place in the log, so a later `next()` yields what
    /// the dropped one would have.
    pub fn observe(&self) -> BoxStream<'static, Result<Leader>> {
        let watch = Watch {
            election: self.clone(),
            interest: None,
            after: None,
            last: None,
            queue: VecDeque::new(),
            failed: false,
        };
        futures::stream::unfold(watch, |mut w| async move {
            let item = w.next().await;
            Some((item, w))
        })
        .boxed()
    }
}

/// How long an observer sleeps without a message before it reads again
/// (a message lost on a reconnection only delays it this long).
const OBSERVE_RECHECK: Duration = Duration::from_secs(5);

/// An observer's place: its subscription, where it is in the log, what it
/// yielded last, and what it read but did not yield yet.
struct Watch {
    election: Election,
    interest: Option<Interest>,
    /// The log id after which the next read starts (`None`: not read yet).
    after: Option<String>,
    last: Option<Proclaimed>,
    queue: VecDeque<Proclaimed>,
    /// The last read failed: the next waits a moment first.
    failed: bool,
}

impl Watch {
    async fn next(&mut self) -> Result<Leader> {
        if std::mem::take(&mut self.failed) {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let r = self.step().await;
        self.failed = r.is_err();
        r
    }

    async fn step(&mut self) -> Result<Leader> {
        loop {
            if let Some(p) = self.queue.pop_front() {
                return Ok(p.into());
            }
            // Taken out while in use (a dropped call subscribes again).
            let interest = match self.interest.take() {
                Some(i) => i,
                None => {
                    // Subscribed before the first read: no change falls in
                    // between.
                    let i = self.election.core.pubsub.interest(&self.election.keys.channel);
                    i.wake_every_wait();
                    i.ready().await?;
                    i
                }
            };
            let outcome = {
                let woken = interest.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                let snapshot = match &self.after {
                    None => self.election.read(After::End).await,
                    Some(id) => self.election.read(After::Id(id)).await,
                };
                match snapshot {
                    Ok(s) => {
                        self.take(s);
                        if self.queue.is_empty() {
                            let _ = tokio::time::timeout(OBSERVE_RECHECK, woken).await;
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            };
            self.interest = Some(interest);
            outcome?;
        }
    }

    /// Queues what a read found that was not yielded yet.
    fn take(&mut self, s: proto::Snapshot) {
        let first = self.after.is_none();
        // The log's entries after our place, oldest first; the first read
        // starts at the log's end (or its beginning when there is no log
        // yet, so that its first entry is not skipped).
        for (id, p) in s.entries {
            self.after = Some(id);
            self.offer(p);
        }
        if first {
            self.after = Some(s.last.unwrap_or_else(|| "0-0".to_string()));
        }
        // The current leader, in case the log missed it (a log lost to a
        // FLUSHALL, or trimmed): yielded when it is newer than the last.
        if let Some(leader) = s.leader {
            self.offer(leader);
        }
    }

    fn offer(&mut self, p: Proclaimed) {
        let newer = match (&self.last, self.queue.back()) {
            (_, Some(q)) => p.term > q.term || (p.term == q.term && p.value != q.value),
            (Some(l), None) => p.term > l.term || (p.term == l.term && p.value != l.value),
            (None, None) => true,
        };
        if newer {
            self.last = Some(p.clone());
            self.queue.push_back(p);
        }
    }
}

/// Leading an election: made by [`Election::campaign`]. The leadership
/// lasts while its lock's hold does: the watchdog renews it, and
/// [`Leadership::lost`] says when it ends otherwise. Dropping it resigns
/// in the background.
pub struct Leadership {
    guard: LockGuard,
    election: Election,
    value: parking_lot::Mutex<String>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.election.name())
            .field("term", &self.term())
            .field("value", &*self.value.lock())
            .field("lost", &self.loss_reason())
            .finish()
    }
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.election.name()
    }

    /// This leadership's term: strictly greater than every earlier
    /// leader's (its hold's fencing token).
    pub fn term(&self) -> u64 {
        self.guard.token()
    }

    /// The value proclaimed last.
    pub fn value(&self) -> String {
        self.value.lock().clone()
    }

    /// The hold under the leadership (to extend a lease, read its validity
    /// or owner, ...).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// How long the leadership stays valid as far as the server confirmed
    /// (see [`LockGuard::validity`]).
    pub fn validity(&self) -> Duration {
        self.guard.validity()
    }

    /// Whether the leadership is lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Why the leadership was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.guard.loss_reason()
    }

    /// Resolves when the leadership is lost: stop acting as leader then
    /// (see [`LockGuard::lost`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// Whether renewals stopped getting through and less than half the
    /// validity is left (see [`LockGuard::is_at_risk`]).
    pub fn is_at_risk(&self) -> bool {
        self.guard.is_at_risk()
    }

    /// Whether the leadership still runs on the short first lease of a
    /// direct grant (an unlock handed the election's lock to this
    /// campaign), its own lease to be set shortly (see
    /// [`LockGuard::is_extension_pending`]).
    pub fn is_extension_pending(&self) -> bool {
        self.guard.is_extension_pending()
    }

    /// Resolves when the leadership goes at risk, with the validity left
    /// (see [`LockGuard::at_risk`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn at_risk(&self) -> Duration {
        self.guard.at_risk().await
    }

    /// Says a new value as this leader: [`Election::leader`] and the
    /// observers see it, with the same term.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the leadership is lost or its validity is
    /// over, or the election's lock is no longer held under this
    /// leadership's term (nothing is written; it is marked lost); Redis
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the value may or may not have been proclaimed
    /// (observers see it at most once).
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        let not_held = || Error::NotHeld {
            name: self.name().to_string(),
        };
        // Lost, or its validity over (the watchdog is about to say so): no
        // longer the leader, whatever the server still has.
        if self.guard.is_lost() || self.guard.validity().is_zero() {
            return Err(not_held());
        }
        let owner = self.guard.owner();
        let term = self.term();
        let reply: i64 = self
            .election
            .core
            .first()
            .run_call(|env| proto::proclaim(&self.election.keys, &owner.field, term, &value, env))
            .await?;
        match proto::proclaimed(reply) {
            Some(_) => {
                *self.value.lock() = value;
                Ok(())
            }
            None => {
                self.guard.hold().mark_lost(LossReason::Gone);
                Err(not_held())
            }
        }
    }

    /// Steps down: the election's lock is released, and the next campaign
    /// leads.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`]: [`Error::NotHeld`] when the leadership was
    /// lost already.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock`]: a release in flight is settled in the
    /// background.
    pub async fn resign(self) -> Result<()> {
        self.guard.unlock().await
    }
}
