//! Background work and pauses: one spawn policy, jittered backoff.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Where a client's background work runs (a release after a drop or a
/// cancel, a re-sent request, a renewal): the runtime current at the
/// spawn, else the one the client was built on. So a guard dropped on a
/// thread without a runtime (the blocking API, a drop after the caller's
/// runtime shut down) is still released.
#[derive(Clone, Debug)]
pub(crate) struct Spawner(Handle);

impl Spawner {
    /// Falls back to `client_runtime` when no runtime is current.
    pub(crate) fn new(client_runtime: Handle) -> Spawner {
        Spawner(client_runtime)
    }

    pub(crate) fn spawn<F>(&self, f: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle().spawn(f)
    }

    /// The runtime [`Spawner::spawn`] would use now.
    pub(crate) fn handle(&self) -> Handle {
        Handle::try_current().unwrap_or_else(|_| self.0.clone())
    }

    /// The client's own runtime.
    pub(crate) fn client_runtime(&self) -> &Handle {
        &self.0
    }
}

/// A random pause in `[max/2, max]`.
pub(crate) fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    let frac = (h.finish() % 1000) as u32;
    max / 2 + max / 2 * frac / 1000
}

/// The pauses between re-sends of a request whose outcome is unknown.
pub(crate) const RESEND: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// A pause that doubles after each use, from `first` up to `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            next: first,
            max,
        }
    }

    /// The pause [`Backoff::next`] would return.
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The current pause; the next one is twice as long (up to the maximum).
    pub(crate) fn next(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// The current pause, jittered to `[d/2, d]`; doubles the next.
    pub(crate) fn next_jittered(&mut self) -> Duration {
        jitter(self.next())
    }

    /// Back to the first pause.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// What a drop must undo (nobody awaits a drop: it starts the work in the
/// background).
pub(crate) trait Undo {
    /// Starts undoing, in the background.
    fn undo_in_background(&mut self);
}

/// Holds `T` and, dropped while armed, undoes it in the background: the
/// one shape of every "give back what a cancelled or failed future left
/// behind" in the library (a waiter's queue place or mark, a wake-up it
/// may hold, levels granted to an attempt nobody will own, a request whose
/// reply was lost). Disarmed once the matter is settled: taken over by a
/// guard, or undone and awaited.
pub(crate) struct DropGuard<T: Undo> {
    inner: T,
    armed: bool,
}

impl<T: Undo> DropGuard<T> {
    pub(crate) fn new(inner: T, armed: bool) -> DropGuard<T> {
        DropGuard { inner, armed }
    }

    pub(crate) fn arm(&mut self) {
        self.armed = true;
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    pub(crate) fn is_armed(&self) -> bool {
        self.armed
    }
}

impl<T: Undo> std::ops::Deref for DropGuard<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: Undo> std::ops::DerefMut for DropGuard<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: Undo> Drop for DropGuard<T> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.undo_in_background();
        }
    }
}
