//! One Redis deployment: its command connection, and the lock calls on it.
//!
//! This is the raw lock on one node: it runs each kind's calls
//! (`crate::protocol`) with EVALSHA, replays and deadlines, and the
//! confirmations asked for (`WAIT`, `WAITAOF`), with no local bookkeeping.
//! The quorum, the holds and the guard types are built on it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::{Client as FredClient, ClientLike, HashesInterface, KeysInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};

use crate::error::{Error, Result};
use crate::keys::Str;

pub(crate) use crate::protocol::{ms, AcquireReply, ReleaseReply};
use crate::protocol::{Acquire, Call, Env, LockKeys, Release, Script, BATCH, RAISE_TOKEN, RENEW, STATUS};

#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) client: FredClient,
    pub(crate) command_timeout: Duration,
    /// How long a request's replay record lives on the server.
    pub(crate) record_ttl: Duration,
    /// Fair locks: how long a queued waiter may go without refreshing its
    /// deadline before it is evicted.
    pub(crate) waiter_timeout: Duration,
    /// What must confirm an acquisition or a renewal before it counts.
    pub(crate) confirm: Confirm,
    /// Calls waiting to go out together (shared by the node's clones).
    pub(crate) batch: Arc<Batch>,
    /// The deployment's URL without credentials, for messages.
    pub(crate) server: Arc<str>,
}

/// The most calls one [`BATCH`] call carries.
const MAX_BATCH: usize = 64;

/// A node's calls of the batchable scripts that go out together.
///
/// Many tasks of one client that lock and unlock at once would each send
/// a script call, and each call costs a write and a flush on the client
/// and a read, a parse and a script start on the server. Instead, a call
/// made while others of the node are under way is queued, and the first
/// one queued starts a task that lets the tasks ready at that moment queue
/// theirs, then sends them all in one `lua/batch.lua` call. A call made
/// while none is under way goes out at once: a lone caller waits for
/// nobody. Replays are unchanged: a re-sent batch clears every call's
/// first-send flag, and each call's script finds its own record.
#[derive(Default)]
pub(crate) struct Batch {
    /// Calls of the batchable scripts made and not answered yet.
    in_flight: AtomicUsize,
    queue: parking_lot::Mutex<Vec<Queued>>,
    /// Held by a flush from taking the queue until its batches are handed
    /// to the connection: flushes run in tasks of their own, and a later
    /// one must not write its calls before an earlier one's.
    order: parking_lot::Mutex<()>,
}

/// Counts a batchable call as under way until dropped: a direct call's
/// until its caller is done with it, a queued call's until its reply is
/// handed over. So while a queued call waits, every later call of the node
/// queues behind it and goes out after it, in the same batch or a later
/// one, even when the caller of the queued call has gone (a give-back
/// release after a dropped acquire must reach the server after the
/// acquire).
struct UnderWay(Arc<Batch>);

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A call waiting in a [`Batch`].
struct Queued {
    script: &'static Script,
    /// The script's place among the batchable ones.
    index: usize,
    keys: Vec<Str>,
    args: Vec<Value>,
    first_send: Option<usize>,
    reply: tokio::sync::oneshot::Sender<Result<(Value, bool)>>,
    _under_way: UnderWay,
}

impl Queued {
    /// The error of this call, from the server's.
    fn error(&self, e: fred::error::Error, timeout: Duration) -> Error {
        let keys: Vec<&Str> = self.keys.iter().collect();
        Error::from_script(self.script.op, &keys, timeout, e)
    }
}

/// Why [`Node::send`] got no reply.
enum Failed {
    /// The call's time ran out.
    Timeout,
    /// The server's or the connection's error.
    Redis(fred::error::Error),
}

/// The confirmations asked for after each acquisition and renewal: replicas
/// that received the write (`WAIT`), and copies of it fsynced to an
/// append-only file (`WAITAOF`, Redis 7.2 and later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Confirm {
    /// `WAIT n timeout`: at least `n` replicas acknowledged.
    pub(crate) replicas: Option<(u32, Duration)>,
    /// `WAITAOF local replicas timeout`.
    pub(crate) aof: Option<AofConfirm>,
}

pub(crate) use crate::settings::AofConfirm;

impl Node {
    /// A broken connection's or a timeout's error, with the server it was
    /// to.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::Connection { op, message } if !self.server.is_empty() => Error::Connection {
                op,
                message: format!("{}: {message}", self.server),
            },
            Error::Timeout { op, server, timeout } if server.is_empty() => Error::Timeout {
                op,
                server: self.server.to_string(),
                timeout,
            },
            e => e,
        }
    }

    /// `WAIT n timeout` after a write on `key`: the replicas that have
    /// every write this client sent to the key's node before it.
    async fn acknowledged(&self, key: &str, n: u32, timeout: Duration) -> Result<u32> {
        // Boxed, as in `send`: every acquire's future holds this one.
        let acks: i64 = Box::pin(self.client.custom(
            CustomCommand::new_static("WAIT", key_route(key), true),
            vec![Value::from(n as i64), Value::from(ms(timeout))],
        ))
        .await
        .map_err(|e| Error::from_redis("wait", key, self.command_timeout, e))?;
        Ok(acks.max(0) as u32)
    }

    /// `WAITAOF` after a write on `key`: whether the master's own
    /// append-only file (0 or 1) and how many replicas' have every write
    /// this client sent to the key's node, on disk.
    async fn fsynced(&self, key: &str, aof: AofConfirm) -> Result<(u32, u32)> {
        // Boxed, as in `send`: every acquire's future holds this one.
        let reply: Vec<i64> = Box::pin(self.client.custom(
            CustomCommand::new_static("WAITAOF", key_route(key), true),
            vec![
                Value::from(aof.local as i64),
                Value::from(aof.replicas as i64),
                Value::from(ms(aof.timeout)),
            ],
        ))
        .await
        .map_err(|e| Error::from_redis("waitaof", key, self.command_timeout, e))?;
        match reply.as_slice() {
            [local, replicas] => Ok(((*local).max(0) as u32, (*replicas).max(0) as u32)),
            _ => Err(crate::protocol::unexpected("waitaof", &reply)),
        }
    }

    /// Whether the write just made on `key` has every confirmation asked
    /// for; the error to return when not.
    async fn check_confirmed(&self, op: &'static str, key: &str) -> Result<()> {
        if let Some((n, timeout)) = self.confirm.replicas {
            let got = self.acknowledged(key, n, timeout).await?;
            if got < n {
                return Err(Error::Redis {
                    op,
                    kind: crate::error::RedisErrorKind::NotReplicated,
                    message: format!(
                        "{got} of {n} replicas acknowledged the write within {timeout:?} (WAIT); a failover could lose it"
                    ),
                });
            }
        }
        if let Some(aof) = self.confirm.aof {
            let (local, replicas) = self.fsynced(key, aof).await?;
            if local < aof.local as u32 || replicas < aof.replicas {
                let mut missing = Vec::new();
                if local < aof.local as u32 {
                    missing.push("the master's append-only file".to_string());
                }
                if replicas < aof.replicas {
                    missing.push(format!("{replicas} of {} replicas' append-only files", aof.replicas));
                }
                return Err(Error::Redis {
                    op,
                    kind: crate::error::RedisErrorKind::NotPersisted,
                    message: format!(
                        "not on disk within {:?} (WAITAOF): {}; a restart could lose it",
                        aof.timeout,
                        missing.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }

    /// With a `WAITAOF` confirmation asked for: whether this server can
    /// give it (Redis 7.2 or later, and an append-only file when the
    /// master's own copy is asked for). A `Config` error says why not.
    pub(crate) async fn check_aof_support(&self) -> Result<()> {
        let Some(aof) = self.confirm.aof else {
            return Ok(());
        };
        // Nothing written yet on this connection: answers at once.
        let probe = AofConfirm {
            replicas: 0,
            timeout: Duration::from_millis(1),
            ..aof
        };
        match self.fsynced("", probe).await {
            Ok(_) => Ok(()),
            Err(Error::Redis { message, .. }) => {
                let why = if message.to_ascii_lowercase().contains("unknown command") {
                    "needs WAITAOF, which Redis has from 7.2 on"
                } else if message.contains("appendonly") {
                    "asks for the master's own append-only file, and the server has appendonly off"
                } else {
                    "cannot be confirmed by this server"
                };
                Err(Error::Config(format!(
                    "min_aof_fsynced {why} (the server says: {message})"
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Loads every script into the server's cache (SCRIPT LOAD, on every
    /// primary of a cluster). Failures are not fatal: calls fall back to
    /// EVAL on NOSCRIPT.
    pub(crate) async fn load_scripts(&self) {
        use fred::prelude::LuaInterface;
        // All at once: one round trip, not one per script.
        futures::future::join_all(crate::protocol::all_scripts().into_iter().map(|script| async move {
            let r: std::result::Result<(), fred::error::Error> = if self.client.is_clustered() {
                self.client.script_load_cluster::<(), _>(script.src).await
            } else {
                self.client.script_load::<String, _>(script.src).await.map(|_| ())
            };
            if let Err(e) = r {
                tracing::debug!(op = script.op, error = %e, "SCRIPT LOAD failed; the first call will send the script");
            }
        }))
        .await;
    }

    /// What this node adds to its calls' arguments.
    fn env(&self) -> Env {
        Env {
            record_ttl: self.record_ttl,
            waiter_timeout: self.waiter_timeout,
            publish: self.publish(),
        }
    }

    /// Runs a kind's call (see [`Node::run`]).
    async fn call<R: FromValue>(&self, call: Call<'_>, timeout: Duration) -> Result<R> {
        self.call_counted(call, timeout).await.map(|(r, _)| r)
    }

    /// Runs a kind's call (see [`Node::run_counted`]). A call of a
    /// batchable script (`crate::protocol::batch_index`) made while other
    /// such calls of this node are under way goes out with the calls ready
    /// at the same time, in one [`BATCH`] call (see [`Batch`]); alone, it
    /// goes out at once.
    async fn call_counted<R: FromValue>(&self, call: Call<'_>, timeout: Duration) -> Result<(R, bool)> {
        let index = match crate::protocol::batch_index(call.script) {
            // A cluster's calls go to the node of their own slot; a call
            // with a shorter time than the client's keeps its own timer.
            // A call's shape must fit its one argument (`batch_shape`).
            Some(i)
                if timeout == self.command_timeout
                    && !self.client.is_clustered()
                    && call.keys.len() < 256
                    && call.args.len() < 256 =>
            {
                i
            }
            _ => {
                return self
                    .run_counted(call.script, &call.keys, call.args, call.first_send, timeout)
                    .await
            }
        };
        let company = self.batch.in_flight.fetch_add(1, Ordering::AcqRel) > 0;
        let under_way = UnderWay(self.batch.clone());
        let runtime = tokio::runtime::Handle::try_current();
        let (true, Ok(runtime)) = (company, runtime) else {
            return self
                .run_counted(call.script, &call.keys, call.args, call.first_send, timeout)
                .await;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let first = {
            let mut queue = self.batch.queue.lock();
            queue.push(Queued {
                script: call.script,
                index,
                keys: call.keys.iter().map(|k| (*k).clone()).collect(),
                args: call.args,
                first_send: call.first_send,
                reply: tx,
                _under_way: under_way,
            });
            queue.len() == 1
        };
        if first {
            let node = self.clone();
            runtime.spawn(async move { node.flush().await });
        }
        let (value, resent) = rx.await.map_err(|_| Error::Connection {
            op: call.script.op,
            message: "the batch carrying the call was dropped".to_string(),
        })??;
        let reply = R::from_value(value).map_err(|e| Error::from_script(call.script.op, &call.keys, timeout, e))?;
        Ok((reply, resent))
    }

    /// Sends the queued calls: the ones ready now go together, up to
    /// [`MAX_BATCH`] per call.
    async fn flush(&self) {
        // Lets the tasks that are ready now queue their calls first.
        tokio::task::yield_now().await;
        let mut sends = {
            // The queue is taken and its batches handed to the connection
            // (a call's first poll writes it to fred's queue, in order) in
            // one go, under `order`: a call queued after one of these (a
            // dropped acquire's re-send, marked as sent before, queues
            // behind the first send still under way) goes out after it,
            // even from a flush that started meanwhile in another task.
            let _order = self.batch.order.lock();
            let mut queued = std::mem::take(&mut *self.batch.queue.lock());
            let mut batches = Vec::new();
            while queued.len() > MAX_BATCH {
                let rest = queued.split_off(MAX_BATCH);
                batches.push(std::mem::replace(&mut queued, rest));
            }
            batches.push(queued);
            let mut sends: Vec<_> = batches.into_iter().map(|b| Box::pin(self.send_batch(b))).collect();
            let waker = futures::task::noop_waker();
            let mut cx = std::task::Context::from_waker(&waker);
            sends.retain_mut(|f| std::future::Future::poll(f.as_mut(), &mut cx).is_pending());
            sends
        };
        futures::future::join_all(sends.iter_mut()).await;
    }

    /// One call for `calls`, and each its own reply: what its script
    /// returned, or its error (a refusal of one call is that call's alone;
    /// a broken connection or a timeout is every call's).
    async fn send_batch(&self, mut calls: Vec<Queued>) {
        let timeout = self.command_timeout;
        if calls.len() == 1 {
            let c = calls.pop().expect("one call");
            let keys: Vec<&Str> = c.keys.iter().collect();
            let reply = self
                .run_counted::<Value>(c.script, &keys, c.args, c.first_send, timeout)
                .await;
            let _ = c.reply.send(reply);
            return;
        }
        let n = calls.len();
        let mut keys: Vec<&Str> = Vec::new();
        let mut args: Vec<Value> = Vec::with_capacity(1 + n + calls.iter().map(|c| c.args.len()).sum::<usize>());
        args.push((n as i64).into());
        for c in &calls {
            args.push(batch_shape(c.index, c.keys.len(), c.args.len()).into());
        }
        let mut first_send = Vec::new();
        for c in calls.iter_mut() {
            if let Some(i) = c.first_send {
                first_send.push(args.len() + i);
            }
            args.append(&mut c.args);
        }
        for c in &calls {
            keys.extend(c.keys.iter());
        }
        let sent = self.send(&BATCH, &keys, args, &first_send, timeout).await;
        let replies: Vec<Result<(Value, bool)>> = match sent {
            Ok((Value::Array(items), resent)) if items.len() == n => calls
                .iter()
                .zip(items)
                .map(|(c, item)| match item {
                    Value::String(text) => Err(c.error(
                        fred::error::Error::new(fred::error::ErrorKind::Unknown, text.to_string()),
                        timeout,
                    )),
                    Value::Bytes(text) => Err(c.error(
                        fred::error::Error::new(
                            fred::error::ErrorKind::Unknown,
                            String::from_utf8_lossy(&text).into_owned(),
                        ),
                        timeout,
                    )),
                    value => Ok((value, resent)),
                })
                .collect(),
            Ok((other, _)) => calls
                .iter()
                .map(|c| {
                    Err(Error::Redis {
                        op: c.script.op,
                        kind: crate::error::RedisErrorKind::Other,
                        message: format!("unexpected batch reply {other:?}"),
                    })
                })
                .collect(),
            Err(Failed::Timeout) => calls
                .iter()
                .map(|c| {
                    Err(Error::Timeout {
                        op: c.script.op,
                        server: self.server.to_string(),
                        timeout,
                    })
                })
                .collect(),
            Err(Failed::Redis(e)) => calls
                .iter()
                .map(|c| Err(self.named(c.error(e.clone(), timeout))))
                .collect(),
        };
        for (c, reply) in calls.into_iter().zip(replies) {
            let _ = c.reply.send(reply);
        }
    }

    /// How scripts publish unlock messages: sharded pub/sub on a cluster
    /// (the channel shares the lock's slot), classic otherwise.
    fn publish(&self) -> &'static str {
        if self.client.is_clustered() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// Runs a script with EVALSHA, falling back to EVAL on NOSCRIPT (which
    /// means the script did not run, and caches it again).
    ///
    /// Every attempt carries `max_attempts = 1`, so fred never writes it twice
    /// by itself. Attempts are repeated after a broken connection only while
    /// `deadline` allows: callers pass scripts whose replays are harmless
    /// (request records, or idempotent effects).
    async fn run<R: FromValue>(
        &self,
        script: &Script,
        keys: &[&Str],
        args: Vec<Value>,
        timeout: Duration,
    ) -> Result<R> {
        self.run_counted(script, keys, args, None, timeout)
            .await
            .map(|(r, _)| r)
    }

    /// [`Node::run`], also saying whether the request was written more than
    /// once (its first reply was lost). `first_send`: the index in `args` of
    /// the script's first-send flag, cleared when the request goes again.
    async fn run_counted<R: FromValue>(
        &self,
        script: &Script,
        keys: &[&Str],
        args: Vec<Value>,
        first_send: Option<usize>,
        timeout: Duration,
    ) -> Result<(R, bool)> {
        let first_send: &[usize] = match &first_send {
            Some(i) => std::slice::from_ref(i),
            None => &[],
        };
        match self.send(script, keys, args, first_send, timeout).await {
            Ok((value, resent)) => R::from_value(value)
                .map(|r| (r, resent))
                .map_err(|e| Error::from_script(script.op, keys, timeout, e)),
            Err(Failed::Timeout) => Err(Error::Timeout {
                op: script.op,
                server: self.server.to_string(),
                timeout,
            }),
            Err(Failed::Redis(e)) => Err(self.named(Error::from_script(script.op, keys, timeout, e))),
        }
    }

    /// The sending of [`Node::run_counted`]: the reply, and whether the
    /// request was written more than once. `first_send`: the indexes in
    /// `args` of first-send flags, cleared when the request goes again.
    async fn send(
        &self,
        script: &Script,
        keys: &[&Str],
        args: Vec<Value>,
        first_send: &[usize],
        timeout: Duration,
    ) -> std::result::Result<(Value, bool), Failed> {
        let deadline = Instant::now() + timeout;
        let mut argv: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        argv.push(Value::from_static_str(script.sha));
        argv.push((keys.len() as i64).into());
        argv.extend(keys.iter().map(|k| crate::protocol::name(k)));
        argv.extend(args);
        // In a cluster the call goes to the node of the keys' slot. fred
        // ignores a custom command's `ClusterHash::Offset` and hashes the
        // first string argument (the SHA) instead, so the slot is given.
        let route = match keys.first() {
            Some(k) if self.client.is_clustered() => ClusterHash::Custom(fred::util::redis_keyslot(k.as_bytes())),
            _ => ClusterHash::Random,
        };
        let mut backoff = crate::runtime::Backoff::new(Duration::from_millis(10), Duration::from_millis(200));
        let mut use_eval = false;
        let mut attempt = 0u32;
        let mut resent = false;
        loop {
            // (The first attempt has the whole timeout: no clock read.)
            let left = if attempt == 0 {
                timeout
            } else {
                deadline.saturating_duration_since(Instant::now())
            };
            if left.is_zero() {
                return Err(Failed::Timeout);
            }
            let cmd = if use_eval {
                argv[0] = script.src.into();
                CustomCommand::new_static("EVAL", route.clone(), false)
            } else {
                CustomCommand::new_static("EVALSHA", route.clone(), false)
            };
            // The client's defaults are one attempt and `command_timeout`; per-call
            // options (a timer per call) only when the call needs less time.
            // fred's call futures are about 7 KB: boxed, they stay out of
            // every future that awaits this one (up to the caller's
            // `lock()`), which is then cheap to move.
            let reply = if attempt == 0 && timeout == self.command_timeout {
                Box::pin(self.client.custom::<Value, Value>(cmd, argv.clone())).await
            } else {
                let opts = Options {
                    max_attempts: Some(1),
                    timeout: Some(left),
                    ..Default::default()
                };
                let client = self.client.with_options(&opts);
                Box::pin(client.custom::<Value, Value>(cmd, argv.clone())).await
            };
            attempt += 1;
            match reply {
                Ok(r) => return Ok((r, resent)),
                Err(e) if !use_eval && e.details().starts_with("NOSCRIPT") => {
                    tracing::debug!(op = script.op, "script cache empty (NOSCRIPT), sending the script");
                    crate::observe::noscript();
                    use_eval = true;
                }
                Err(e) => {
                    let broken = matches!(
                        Error::from_redis(script.op, "", timeout, e.clone()),
                        Error::Connection { .. }
                    );
                    let left = deadline.saturating_duration_since(Instant::now());
                    if !broken || left <= backoff.peek() {
                        return Err(Failed::Redis(e));
                    }
                    // On a cluster this is also a MOVED that fred followed
                    // once and then gave up on (one attempt): the same
                    // request goes again, now to the slot's new owner.
                    tracing::debug!(op = script.op, error = %e, "connection broke mid-call, trying the same request again");
                    resent = true;
                    for i in first_send {
                        argv[2 + keys.len() + i] = crate::protocol::lit("0");
                    }
                    tokio::time::sleep(backoff.next()).await;
                }
            }
        }
    }

    /// One acquire attempt in the protocol of the lock's kind (see
    /// [`crate::protocol::Acquire`]): a replay of its request acquires
    /// nothing more. A level granted without the confirmations asked for
    /// is given back, and the attempt is an error.
    pub(crate) async fn acquire(&self, keys: &LockKeys, a: &Acquire<'_>) -> Result<AcquireReply> {
        let rec = crate::protocol::record(keys, a.request);
        let call = keys.kind.acquire(keys, &rec, a, &self.env());
        let reply: Vec<i64> = self.call(call, self.command_timeout).await?;
        let reply = crate::protocol::acquire_reply(&reply)?;
        if let AcquireReply::Acquired { token, .. } = reply {
            if let Err(e) = self.check_confirmed("acquire", &keys.lock).await {
                // Not enough replicas (or disks) have it: a failover or a
                // restart could lose it, so the attempt gave nothing. The
                // level is given back here, and the error says the outcome
                // is known (not replayed and undone a second time).
                if matches!(e, Error::Redis { .. }) {
                    let undo = crate::keys::fresh_request_id();
                    let give_back = Release {
                        owner: a.owner,
                        token: Some(token),
                        relet: Duration::ZERO,
                        request: &undo,
                        resent: false,
                        take: Some(a.request),
                    };
                    if let Err(u) = self.release(keys, &give_back).await {
                        tracing::warn!(lock = %keys.name, error = %u, "giving back an unreplicated level failed; its lease bounds it");
                    }
                }
                return Err(e);
            }
        }
        Ok(reply)
    }

    /// A fair waiter leaves the queue (idempotent). `request` is the wait's
    /// request id when it asked for direct grants: a grant made to it that
    /// it never learned of is given back. `asked`: every request id the
    /// wait's asks named (the current one and earlier ones).
    pub(crate) async fn leave(
        &self,
        keys: &LockKeys,
        owner: &Str,
        request: Option<&str>,
        asked: &[String],
    ) -> Result<()> {
        let rec = request.map(|r| crate::protocol::record(keys, r));
        let Some(call) = keys.kind.leave(keys, owner, rec.as_ref(), asked, &self.env()) else {
            return Ok(());
        };
        let _: i64 = self.call(call, self.command_timeout).await?;
        Ok(())
    }

    /// Leaves one level of a hold (see [`crate::protocol::Release`]);
    /// `r.resent` says the request was sent before with its outcome
    /// unknown.
    pub(crate) async fn release(&self, keys: &LockKeys, r: &Release<'_>) -> Result<ReleaseReply> {
        let rec = crate::protocol::record(keys, r.request);
        let call = keys.kind.release(keys, &rec, r, &self.env());
        let (reply, written_twice): (i64, bool) = self.call_counted(call, self.command_timeout).await?;
        Ok(crate::protocol::release_reply(reply, r.resent || written_twice))
    }

    /// Extends the lease of each `(lock key, owner)` whose owner field still
    /// exists. All keys must be in one cluster slot. One flag per pair.
    pub(crate) async fn renew(&self, pairs: &[(&Str, &Str)], lease: Duration, timeout: Duration) -> Result<Vec<bool>> {
        let keys: Vec<&Str> = pairs.iter().map(|p| p.0).collect();
        let mut args: Vec<Value> = Vec::with_capacity(pairs.len() + 1);
        args.push(ms(lease).into());
        args.extend(pairs.iter().map(|p| crate::protocol::name(p.1)));
        let reply: Vec<i64> = self.run(&RENEW, &keys, args, timeout).await?;
        if reply.len() != pairs.len() {
            return Err(crate::protocol::unexpected("renew", &reply));
        }
        // A renewal the replicas (or the disks) did not get is not confirmed: the hold's
        // validity is not extended (it goes at risk, then lost).
        if let Some(key) = keys.first() {
            self.check_confirmed("renew", key).await?;
        }
        Ok(reply.into_iter().map(|r| r == 1).collect())
    }

    /// Raises the lock's fencing counter to `token` if it is lower (the
    /// quorum's write-back), and the token of `owner`'s hold with to it
    /// when that hold, which got `held` here, is still the lock's. Returns
    /// the counter afterwards.
    pub(crate) async fn raise_token(&self, keys: &LockKeys, owner: &Str, held: u64, token: u64) -> Result<u64> {
        let reply: i64 = self
            .run(
                &RAISE_TOKEN,
                &[&keys.token, &keys.lock],
                vec![
                    (token as i64).into(),
                    crate::protocol::name(owner),
                    (held as i64).into(),
                ],
                self.command_timeout,
            )
            .await?;
        Ok(reply.max(0) as u64)
    }

    /// Runs a call of a primitive that is not a lock (an election's, a
    /// latch's, a semaphore's number), made with this node's environment.
    /// It is sent again when the connection breaks before its reply: such
    /// calls are read-only, harmless when replayed, or carry a replay
    /// record (see their scripts).
    pub(crate) async fn run_call<'a, R: FromValue>(&self, make: impl FnOnce(&Env) -> Call<'a>) -> Result<R> {
        let call = make(&self.env());
        self.call(call, self.command_timeout).await
    }

    /// [`Node::run_call`], and whether the call was written more than
    /// once (its connection broke before a reply): a release that then
    /// finds nothing to free may have freed it with its first sending.
    pub(crate) async fn run_call_counted<'a, R: FromValue>(
        &self,
        make: impl FnOnce(&Env) -> Call<'a>,
    ) -> Result<(R, bool)> {
        let call = make(&self.env());
        self.call_counted(call, self.command_timeout).await
    }

    /// Whether this connection's ACL user may publish on `channel`: one
    /// PUBLISH that nobody hears (no lock has the channel's name). `Ok(false)`
    /// only for a NOPERM refusal; other failures are errors.
    pub(crate) async fn may_publish(&self, channel: &str) -> Result<bool> {
        let r: std::result::Result<i64, _> = self
            .client
            .custom(
                CustomCommand::new_static("PUBLISH", ClusterHash::Random, false),
                vec![channel, ""],
            )
            .await;
        match r.map_err(|e| Error::from_redis("connect", "", self.command_timeout, e)) {
            Ok(_) => Ok(true),
            Err(Error::Redis {
                kind: crate::error::RedisErrorKind::NoPermission,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The server's `run_id` and uptime (INFO server).
    pub(crate) async fn identity(&self) -> Result<(String, Duration)> {
        let info: String = self
            .client
            .custom(
                CustomCommand::new_static("INFO", ClusterHash::Random, false),
                vec!["server"],
            )
            .await
            .map_err(|e| Error::from_redis("info", "", self.command_timeout, e))?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':')))
                .map(|v| v.trim().to_string())
        };
        let run_id = field("run_id").unwrap_or_default();
        let uptime = field("uptime_in_seconds")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        Ok((run_id, Duration::from_secs(uptime)))
    }

    /// Deletes the lock whoever holds it; whether there was one. The call
    /// carries a replay record (a re-send deletes nothing more).
    pub(crate) async fn force_unlock(&self, keys: &LockKeys) -> Result<bool> {
        let rec = crate::protocol::record(keys, &crate::keys::fresh_request_id());
        let reply: i64 = self
            .call(keys.kind.force_unlock(keys, &rec, &self.env()), self.command_timeout)
            .await?;
        Ok(reply == 1)
    }

    /// The raw snapshot of the status script.
    pub(crate) async fn status(&self, keys: &LockKeys) -> Result<Value> {
        let redisson = keys.redisson_timeouts();
        self.run(
            &STATUS,
            &[&keys.lock, &keys.token, &keys.queue, &redisson],
            vec![],
            self.command_timeout,
        )
        .await
    }

    /// The keys matching `pattern` (SCAN; in a cluster, on every primary).
    /// The keys matching `pattern` (and of type `of`, when given).
    pub(crate) async fn scan(&self, pattern: &str, of: Option<&'static str>) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if self.client.is_clustered() {
            // One connection per primary; a node's SCAN covers its slots only.
            for server in self.client.active_connections() {
                self.scan_on(&self.client.with_cluster_node(server), pattern, of, &mut out)
                    .await?;
            }
        } else {
            self.scan_on(&self.client, pattern, of, &mut out).await?;
        }
        Ok(out)
    }

    async fn scan_on(
        &self,
        on: &impl ClientLike,
        pattern: &str,
        of: Option<&'static str>,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let mut cursor = "0".to_string();
        loop {
            let cmd = CustomCommand::new_static("SCAN", ClusterHash::Random, false);
            let mut args: Vec<Value> = vec![
                cursor.as_str().into(),
                "MATCH".into(),
                pattern.into(),
                "COUNT".into(),
                1000.into(),
            ];
            if let Some(of) = of {
                args.push("TYPE".into());
                args.push(of.into());
            }
            let reply: (String, Vec<String>) = on
                .custom(cmd, args)
                .await
                .map_err(|e| Error::from_redis("scan", pattern, self.command_timeout, e))?;
            out.extend(reply.1);
            if reply.0 == "0" {
                return Ok(());
            }
            cursor = reply.0;
        }
    }

    /// Whether a queued fair waiter that asked for direct grants has
    /// something to re-check since its last attempt: the lock is free, or
    /// its request record exists (an unlock granted it the lock). One
    /// EXISTS over both keys (one slot); 1 means held by another and not
    /// granted. (A record whose grant's lease ran out also reads 1: the
    /// waiter's sleep bound covers that.)
    pub(crate) async fn worth_an_attempt(&self, keys: &LockKeys, request: &str) -> Result<bool> {
        let rec = crate::protocol::record(keys, request);
        // Boxed: this future sits in the fair lock's wait (see `send`).
        let n: i64 = Box::pin(
            self.client
                .exists(crate::protocol::worth_an_attempt(keys, &rec).to_vec()),
        )
        .await
        .map_err(|e| Error::from_redis("acquire", &keys.lock, self.command_timeout, e))?;
        Ok(n != 1)
    }

    pub(crate) async fn hold_count(&self, keys: &LockKeys, owner: &str) -> Result<u64> {
        let n: Option<u64> = self
            .client
            .hget(&keys.lock, owner)
            .await
            .map_err(|e| Error::from_redis("hold_count", &keys.lock, self.command_timeout, e))?;
        Ok(n.unwrap_or(0))
    }

    pub(crate) async fn is_locked(&self, keys: &LockKeys) -> Result<bool> {
        let kind: String = self
            .client
            .custom(
                CustomCommand::new_static("TYPE", ClusterHash::FirstKey, false),
                vec![crate::protocol::name(&keys.lock)],
            )
            .await
            .map_err(|e| Error::from_redis("is_locked", &keys.lock, self.command_timeout, e))?;
        match kind.as_str() {
            "none" => Ok(false),
            // A kind whose owner fields say whether it is locked (a side of
            // a read-write lock, whose hash may also hold waiting writers'
            // marks only); for the others the hash's being there does.
            "hash" => match keys.kind.locked_by() {
                None => Ok(true),
                Some(locked_by) => {
                    let fields: Vec<String> = self
                        .client
                        .hkeys(&keys.lock)
                        .await
                        .map_err(|e| Error::from_redis("is_locked", &keys.lock, self.command_timeout, e))?;
                    Ok(fields.iter().any(|f| crate::keys::is_owner_field(f) && locked_by(f)))
                }
            },
            other => Err(Error::WrongType {
                key: keys.lock.to_string(),
                found: other.to_string(),
            }),
        }
    }

    /// The lock's remaining lease in ms as PTTL reports it (-2 absent, -1 no TTL).
    pub(crate) async fn pttl(&self, keys: &LockKeys) -> Result<i64> {
        self.client
            .pttl(&keys.lock)
            .await
            .map_err(|e| Error::from_redis("remaining_lease", &keys.lock, self.command_timeout, e))
    }
}

/// A batched call's shape as `lua/batch.lua` reads it: the script's index
/// among the batchable ones, its number of keys and of arguments (each
/// under 256, which the caller checks), in one number.
fn batch_shape(index: usize, keys: usize, args: usize) -> i64 {
    debug_assert!(keys < 256 && args < 256);
    ((index << 16) | (keys << 8) | args) as i64
}

/// Routes a command to the node that serves `key`'s slot (any node for "").
fn key_route(key: &str) -> ClusterHash {
    ClusterHash::Custom(fred::util::redis_keyslot(key.as_bytes()))
}
