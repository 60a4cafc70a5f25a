//! Fan-outs over a client's masters, for whoever needs a majority: the
//! quorum's rules, the client's build, pub/sub. Knows nothing of locks.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::stream::{Stream, StreamExt};

use crate::error::Error;
use crate::runtime::Spawner;

/// Masters needed out of `n`.
pub(crate) const fn majority(n: usize) -> usize {
    n / 2 + 1
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

    /// The futures still running.
    pub(crate) fn len(&self) -> usize {
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
