//! One master of a client: its node, whether it counts toward the majority
//! now (a delayed rejoin after a restart, a rest after a failure, a server
//! given twice), and what the quorum needs of it ([`NodeOps`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::fanout::{majority, quorum_error};
use crate::keys::Str;
use crate::node::{AcquireReply, Node, ReleaseReply};
use crate::protocol::{Acquire, LockKeys, Release};
use crate::runtime::{Backoff, Spawner, RESEND};

/// What the quorum needs of one master.
pub(crate) trait NodeOps: Send + Sync + 'static {
    /// One acquire attempt (`a.resent`: its request was sent before, its
    /// outcome unknown).
    fn acquire(&self, keys: &LockKeys, a: &Acquire<'_>) -> impl Future<Output = Result<AcquireReply>> + Send;

    /// One release (`r.resent` as for an acquire).
    fn release(&self, keys: &LockKeys, r: &Release<'_>) -> impl Future<Output = Result<ReleaseReply>> + Send;

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
    async fn acquire(&self, keys: &LockKeys, a: &Acquire<'_>) -> Result<AcquireReply> {
        let r = self.note(self.node.acquire(keys, a).await);
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

    async fn release(&self, keys: &LockKeys, r: &Release<'_>) -> Result<ReleaseReply> {
        self.note(self.node.release(keys, r).await)
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
