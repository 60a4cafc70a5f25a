//! A blocking API (feature `blocking`) for programs that are not async:
//! command-line tools, synchronous web frameworks, batch jobs.
//!
//! [`Client`] owns a small tokio runtime (one worker thread) that runs the
//! connections, the watchdog and the pub/sub wake-ups in the background;
//! each call blocks the calling thread until it is done. The locks and their
//! guarantees are those of the async API ([`crate::Lock`]): reentrancy,
//! watchdog leases, fencing tokens, waiting without polling.
//!
//! Ownership is per OS thread: nested `lock()` calls on one thread re-enter,
//! other threads wait (as with Redisson's `RLock`).
//!
//! ```no_run
//! # fn main() -> lockwarden::Result<()> {
//! use std::time::Duration;
//!
//! let client = lockwarden::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let lock = client.lock("nightly-report")?;
//! if let Some(guard) = lock.try_lock(Duration::from_secs(2), Duration::from_secs(60))? {
//!     println!("fencing token {}", guard.token());
//!     guard.unlock()?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Panics
//!
//! Every blocking call panics when made from inside an async runtime, where
//! it would stall that runtime's thread (and could deadlock it): use the
//! async [`crate::Client`] there, or move the call to
//! `tokio::task::spawn_blocking`.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::settings::Lease;
use crate::watchdog::LossReason;

/// Panics when called from inside an async runtime (see the module docs).
fn refuse_inside_runtime() {
    if tokio::runtime::Handle::try_current().is_ok() {
        panic!(
            "lockwarden::blocking called from inside an async runtime, where blocking would stall it: use the \
             async lockwarden::Client there, or tokio::task::spawn_blocking"
        );
    }
}

/// Runs `f` to completion on `rt`, from a thread outside any runtime.
fn block<F: std::future::Future>(rt: &tokio::runtime::Runtime, f: F) -> F::Output {
    refuse_inside_runtime();
    rt.block_on(f)
}

/// A blocking client: the async [`crate::Client`] and the runtime it runs on.
/// Cheap to clone; the runtime stops when the client, its locks and their
/// guards are all gone (drop the last of them outside any async runtime:
/// tokio refuses to stop a runtime from inside another).
#[derive(Clone)]
pub struct Client {
    inner: crate::client::Client,
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Client").field(&self.inner).finish()
    }
}

impl Client {
    /// Connects to `url` with the default settings, as
    /// [`crate::Client::connect`].
    ///
    /// # Errors
    ///
    /// As [`crate::ClientBuilder::build`]; [`Error::Config`] when the
    /// runtime cannot be started.
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn connect(url: &str) -> Result<Client> {
        Client::build(crate::client::Client::builder(url))
    }

    /// Builds a client from any [`crate::ClientBuilder`] (several masters,
    /// TLS, leases, timeouts).
    ///
    /// # Errors
    ///
    /// As [`Client::connect`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn build(builder: crate::client::ClientBuilder) -> Result<Client> {
        refuse_inside_runtime();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lockwarden-blocking")
            .enable_all()
            .build()
            .map_err(runtime_error)?;
        let inner = block(&rt, builder.build())?;
        Ok(Client {
            inner,
            rt: Arc::new(rt),
        })
    }

    /// A handle on the reentrant lock `name`; no I/O.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::lock`].
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock {
            inner: self.inner.lock(name)?,
            rt: self.rt.clone(),
        })
    }

    /// A handle on the fair lock `name` (FIFO waiters); no I/O.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::fair_lock`].
    pub fn fair_lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock {
            inner: self.inner.fair_lock(name)?,
            rt: self.rt.clone(),
        })
    }

    /// The lock `name` in Redisson's layout; see
    /// [`crate::Client::redisson_lock`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::redisson_lock`].
    pub fn redisson_lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock {
            inner: self.inner.redisson_lock(name)?,
            rt: self.rt.clone(),
        })
    }

    /// A handle on the read-write lock `name`: its two sides are blocking
    /// [`Lock`]s (see [`crate::RwLock`]); no I/O.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::rw_lock`].
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        let rw = self.inner.rw_lock(name)?;
        Ok(RwLock {
            read: Lock {
                inner: rw.read().clone(),
                rt: self.rt.clone(),
            },
            write: Lock {
                inner: rw.write().clone(),
                rt: self.rt.clone(),
            },
        })
    }

    /// A handle on the semaphore `name` with `permits` permits, whose holds
    /// expire (see [`crate::Semaphore`]); no I/O.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore {
            inner: self.inner.semaphore(name, permits)?,
            rt: self.rt.clone(),
        })
    }

    /// A handle on the fair semaphore `name` (permits in request order; see
    /// [`crate::Client::fair_semaphore`]); no I/O.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::fair_semaphore`].
    pub fn fair_semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore {
            inner: self.inner.fair_semaphore(name, permits)?,
            rt: self.rt.clone(),
        })
    }

    /// A handle on the count-down latch `name` (see
    /// [`crate::CountDownLatch`]); no I/O.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::count_down_latch`].
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        Ok(CountDownLatch {
            inner: self.inner.count_down_latch(name)?,
            rt: self.rt.clone(),
        })
    }

    /// The async client underneath.
    pub fn as_async(&self) -> &crate::client::Client {
        &self.inner
    }
}

fn runtime_error(e: std::io::Error) -> Error {
    Error::Config(format!("cannot start the blocking client's runtime: {e}"))
}

/// A blocking handle on one named lock; see [`crate::Lock`]. The owner is
/// the calling OS thread.
#[derive(Clone)]
pub struct Lock {
    inner: crate::lock::Lock,
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Lock").field(&self.inner).finish()
    }
}

impl Lock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Acquires the lock, waiting as long as it takes, with the watchdog
    /// lease; re-enters when this thread holds it already.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::lock`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn lock(&self) -> Result<LockGuard> {
        self.guard(block(&self.rt, self.inner.lock()))
    }

    /// Acquires the lock, waiting as long as it takes, with `lease`.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::lock_with_lease`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn lock_with_lease(&self, lease: impl Into<Lease>) -> Result<LockGuard> {
        self.guard(block(&self.rt, self.inner.lock_with_lease(lease)))
    }

    /// Tries to acquire the lock within `wait` (zero: one attempt); `None`
    /// when another owner keeps it the whole time.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::try_lock`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn try_lock(&self, wait: Duration, lease: impl Into<Lease>) -> Result<Option<LockGuard>> {
        match block(&self.rt, self.inner.try_lock(wait, lease)) {
            Ok(Some(g)) => self.guard(Ok(g)).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Releases one level held by this thread without its guard, as
    /// Redisson's `unlock()`.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::unlock`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn unlock(&self) -> Result<()> {
        block(&self.rt, self.inner.unlock())
    }

    /// Deletes the lock whoever holds it; whether there was one.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::force_unlock`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn force_unlock(&self) -> Result<bool> {
        block(&self.rt, self.inner.force_unlock())
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::is_locked`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn is_locked(&self) -> Result<bool> {
        block(&self.rt, self.inner.is_locked())
    }

    /// How many levels this thread holds (0 when none).
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::hold_count`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn hold_count(&self) -> Result<u64> {
        block(&self.rt, self.inner.hold_count())
    }

    /// A snapshot of the lock: holders, lease, last token, queue.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::status`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn status(&self) -> Result<crate::status::LockStatus> {
        block(&self.rt, self.inner.status())
    }

    fn guard(&self, r: Result<crate::guard::LockGuard>) -> Result<LockGuard> {
        r.map(|inner| LockGuard {
            inner,
            rt: self.rt.clone(),
        })
    }
}

/// One level of a held lock, from the blocking API. Dropping it without
/// [`LockGuard::unlock`] releases it at once in the background, on the
/// client's runtime (it never blocks); `unlock` reports errors.
#[must_use = "dropping the guard releases the lock at once; keep it for the whole critical section"]
pub struct LockGuard {
    inner: crate::guard::LockGuard,
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::LockGuard").field(&self.inner).finish()
    }
}

impl LockGuard {
    /// Releases this level and waits for Redis to confirm.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::unlock`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn unlock(self) -> Result<()> {
        let LockGuard { inner, rt } = self;
        block(&rt, inner.unlock())
    }

    /// Keeps the hold for at least `lease` from now and waits for Redis to
    /// confirm.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::extend`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn extend(&self, lease: Duration) -> Result<()> {
        block(&self.rt, self.inner.extend(lease))
    }

    /// The fencing token of this hold.
    pub fn token(&self) -> u64 {
        self.inner.token()
    }

    /// The reentry depth of this level (1 for the outermost).
    pub fn depth(&self) -> u64 {
        self.inner.depth()
    }

    /// How long the hold stays valid as far as Redis confirmed.
    pub fn validity(&self) -> Duration {
        self.inner.validity()
    }

    /// Whether the lock was lost.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Why the lock was lost, if it was.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.inner.loss_reason()
    }

    /// Whether the hold is at risk (see [`crate::LockGuard::is_at_risk`]).
    pub fn is_at_risk(&self) -> bool {
        self.inner.is_at_risk()
    }

    /// Blocks until the lock is lost or `timeout` passes; the reason, if lost.
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        block(&self.rt, async {
            tokio::time::timeout(timeout, self.inner.lost()).await.ok()
        })
    }
}

/// A blocking read-write lock: many readers or one writer (see
/// [`crate::RwLock`]). Each side is a blocking [`Lock`] whose owner is the
/// calling thread.
#[derive(Clone, Debug)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl RwLock {
    /// The read side: shared with other readers.
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The write side: exclusive.
    pub fn write(&self) -> &Lock {
        &self.write
    }
}

/// A blocking semaphore with expiring permits (see [`crate::Semaphore`]).
#[derive(Clone)]
pub struct Semaphore {
    inner: crate::semaphore::Semaphore,
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Semaphore").field(&self.inner).finish()
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Takes one permit, waiting as long as it takes, with the watchdog
    /// lease.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::acquire`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn acquire(&self) -> Result<Permit> {
        self.permit(block(&self.rt, self.inner.acquire()))
    }

    /// Takes `n` permits if they come free within `wait` (zero: one
    /// attempt), with `lease`; `None` when they did not.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::try_acquire_many`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn try_acquire_many(&self, n: u32, wait: Duration, lease: impl Into<Lease>) -> Result<Option<Permit>> {
        match block(&self.rt, self.inner.try_acquire_many(n, wait, lease)) {
            Ok(Some(p)) => self.permit(Ok(p)).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Takes one permit if one comes free within `wait`, with `lease`.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::try_acquire`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn try_acquire(&self, wait: Duration, lease: impl Into<Lease>) -> Result<Option<Permit>> {
        self.try_acquire_many(1, wait, lease)
    }

    /// The permits free now.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::available_permits`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn available_permits(&self) -> Result<u64> {
        block(&self.rt, self.inner.available_permits())
    }

    /// Gives back the permits of the acquisition `id`, whoever holds them.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::release_by_id`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn release_by_id(&self, id: &str) -> Result<()> {
        block(&self.rt, self.inner.release_by_id(id))
    }

    /// The async semaphore underneath.
    pub fn as_async(&self) -> &crate::semaphore::Semaphore {
        &self.inner
    }

    fn permit(&self, r: Result<crate::semaphore::Permit>) -> Result<Permit> {
        r.map(|inner| Permit {
            inner,
            rt: self.rt.clone(),
        })
    }
}

/// Permits held, from the blocking API. Dropping it without
/// [`Permit::release`] gives them back at once in the background, on the
/// client's runtime (it never blocks); `release` reports errors.
#[must_use = "dropping the permit gives it back at once; keep it for the whole critical section"]
pub struct Permit {
    inner: crate::semaphore::Permit,
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Permit").field(&self.inner).finish()
    }
}

impl Permit {
    /// Gives the permits back and waits for Redis to confirm.
    ///
    /// # Errors
    ///
    /// As [`crate::Permit::release`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn release(self) -> Result<()> {
        let Permit { inner, rt } = self;
        block(&rt, inner.release())
    }

    /// How many permits this acquisition holds.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    /// This acquisition's id (see [`crate::Permit::id`]).
    pub fn id(&self) -> String {
        self.inner.id()
    }

    /// Whether the permits were lost.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// How long the permits stay valid as far as Redis confirmed.
    pub fn validity(&self) -> Duration {
        self.inner.validity()
    }
}

/// A blocking count-down latch (see [`crate::CountDownLatch`]).
#[derive(Clone)]
pub struct CountDownLatch {
    inner: crate::latch::CountDownLatch,
    rt: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::CountDownLatch").field(&self.inner).finish()
    }
}

impl CountDownLatch {
    /// The latch's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Sets the count, only when the latch is at zero or absent.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::try_set_count`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        block(&self.rt, self.inner.try_set_count(count))
    }

    /// Counts down by one; the count left.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::count_down`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn count_down(&self) -> Result<u64> {
        block(&self.rt, self.inner.count_down())
    }

    /// The count now (`None`: no latch).
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::count`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn count(&self) -> Result<Option<u64>> {
        block(&self.rt, self.inner.count())
    }

    /// Blocks until the count reaches zero or `timeout` passes; whether it
    /// reached zero.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::wait_for`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime (see the [module docs](self)).
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        block(&self.rt, self.inner.wait_for(timeout))
    }
}
