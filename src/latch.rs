//! The count-down latch: its handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::Names;
use crate::protocol::latch::{self as proto, Op, State};

/// A count-down latch shared by processes: one sets a count, others count
/// it down, and waiters are let through when it reaches zero (Redisson's
/// `RCountDownLatch`, Java's `CountDownLatch`). Made by
/// [`Client::count_down_latch`](crate::Client::count_down_latch).
///
/// - [`try_set_count`](CountDownLatch::try_set_count) sets it only when
///   it is at zero or absent (a latch counting is never reset from under
///   its waiters); each setting is a new generation.
/// - Waiters wake on the message its last count-down publishes, and look
///   again every 2 s in case a message was lost.
/// - **A lost count is never taken for zero.** Redisson deletes a latch
///   that reaches zero, so a key lost to `FLUSHALL` or eviction reads as
///   zero and lets its waiters through. Here a latch at zero stays (at
///   zero, until set again or [deleted](CountDownLatch::delete)), and a
///   waiter that saw it counting gets [`Error::LatchGone`] when its key
///   disappears, within 2 s.
/// - A waiter that starts before the latch is set waits for it to be set,
///   then for zero.
/// - The latch has no TTL: it lives until deleted. One server, Sentinel or
///   Cluster; a quorum client refuses to make one (a count over
///   independent masters has no majority rule).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: lockwarden::Client) -> lockwarden::Result<()> {
/// let ready = client.count_down_latch("shards-loaded")?;
/// ready.try_set_count(3).await?;
/// // ... each of three loaders calls `ready.count_down().await?` when done ...
/// ready.wait().await?; // all three are done
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    core: Arc<Core>,
    keys: Names,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch").field("name", &self.keys.name).finish()
    }
}

/// How long a waiter sleeps without a message before it reads again: a
/// lost message, or a lost key (which publishes nothing), is noticed
/// within this.
const RECHECK: Duration = Duration::from_secs(2);

impl CountDownLatch {
    pub(crate) fn new(core: Arc<Core>, keys: Names) -> CountDownLatch {
        CountDownLatch { core, keys }
    }

    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    async fn op(&self, op: Op) -> Result<Vec<i64>> {
        let record = crate::keys::record_key(&self.keys);
        self.core
            .first()
            .run_call(|env| proto::call(&self.keys, &record, op, env))
            .await
    }

    fn gone(&self) -> Error {
        Error::LatchGone {
            name: self.keys.name.clone(),
        }
    }

    /// Sets the count to `count` if the latch is at zero or absent, and
    /// wakes waiters that wait for it to be set. `Ok(false)` when it is
    /// still counting (nothing changed).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a count of 0; [`Error::WrongType`] /
    /// [`Error::WrongKind`] when the name holds something else; Redis
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the count may or may not have been set (read it with
    /// [`CountDownLatch::count`]); a second call cannot set it twice.
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        if count == 0 || count > i64::MAX as u64 {
            return Err(Error::Config(format!(
                "count-down latch {:?}: the count must be at least 1",
                self.keys.name
            )));
        }
        Ok(self.op(Op::Set(count)).await?.first() == Some(&1))
    }

    /// Counts down by one and returns what is left; at zero, the waiters
    /// are let through. At zero already, nothing changes (`Ok(0)`).
    ///
    /// # Errors
    ///
    /// [`Error::LatchGone`] when there is no latch (never set, or lost):
    /// nothing is written; as [`CountDownLatch::try_set_count`] otherwise.
    ///
    /// # Cancel safety
    ///
    /// Not idempotent: dropped, the count-down may or may not have been
    /// applied, and calling again may count twice. Read
    /// [`CountDownLatch::count`] when that matters. (A call whose reply is
    /// lost to a broken connection is sent again by the client itself, and
    /// that counts once: the call carries a replay record.)
    pub async fn count_down(&self) -> Result<u64> {
        match self.op(Op::Down).await?.first() {
            Some(n) if *n >= 0 => Ok(*n as u64),
            _ => Err(self.gone()),
        }
    }

    /// What is left to count down; `None` when there is no latch (never
    /// set, deleted, or lost).
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::try_set_count`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn count(&self) -> Result<Option<u64>> {
        Ok(match proto::state(&self.op(Op::Read).await?) {
            State::Absent => None,
            State::Counting { count, .. } => Some(count),
        })
    }

    /// Deletes the latch; its waiters get [`Error::LatchGone`]. `Ok(false)`
    /// when there was none.
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::try_set_count`] (a name held by a lock is left
    /// alone).
    ///
    /// # Cancel safety
    ///
    /// Dropped, it may or may not have been deleted.
    pub async fn delete(&self) -> Result<bool> {
        Ok(self.op(Op::Delete).await?.first() == Some(&1))
    }

    /// Waits as long as it takes for the count to reach zero (for a latch
    /// not set yet: to be set, then to reach zero).
    ///
    /// # Errors
    ///
    /// [`Error::LatchGone`] when the latch this wait saw counting
    /// disappeared (deleted, flushed, evicted) or was set again without
    /// this wait seeing its zero; Redis errors (each read is retried for
    /// the client's `retry_transient_for` first); as
    /// [`CountDownLatch::try_set_count`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: waiting writes nothing.
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(None).await.map(|_| ())
    }

    /// As [`CountDownLatch::wait`], for at most `timeout`: `Ok(false)` when
    /// the count did not reach zero by then.
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::wait`]; [`Error::InvalidDuration`] above 30
    /// days.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        crate::settings::check_wait(timeout)?;
        self.wait_until(Some(Instant::now() + timeout)).await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let interest = self.core.pubsub.interest(&self.keys.channel);
        interest.wake_every_wait();
        interest.ready().await?;
        // The generation this wait saw counting.
        let mut seen: Option<u64> = None;
        let mut failing_since: Option<Instant> = None;
        loop {
            let woken = interest.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let state = match self.op(Op::Read).await {
                Ok(r) => {
                    failing_since = None;
                    proto::state(&r)
                }
                Err(e) if e.is_retryable() => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.core.settings.retry_transient_for {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match (seen, state) {
                (None, State::Absent) => {}
                (Some(_), State::Absent) => return Err(self.gone()),
                (None, State::Counting { count: 0, .. }) => return Ok(true),
                (None, State::Counting { gen, .. }) => seen = Some(gen),
                (Some(g), State::Counting { count, gen, .. }) if gen == g => {
                    if count == 0 {
                        return Ok(true);
                    }
                }
                // Set again since: this wait's generation reached zero
                // if the new one was set from its zero.
                (Some(g), State::Counting { gen, zeroed, .. }) => {
                    return if gen > g && zeroed == g {
                        Ok(true)
                    } else {
                        Err(self.gone())
                    };
                }
            }
            let nap = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    left.min(RECHECK)
                }
                None => RECHECK,
            };
            let _ = tokio::time::timeout(nap, woken).await;
        }
    }
}
