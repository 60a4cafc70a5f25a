//! Waking waiters without polling: one shared subscription per lock channel.
//!
//! Waiters register interest in a channel before the attempt that precedes
//! their sleep; the first interest subscribes, and the last one to leave
//! unsubscribes after a short linger ([`LINGER`]), so a waiter that comes
//! straight back finds it subscribed. Each message wakes one waiter of its
//! channel through a [`Notify`] per channel; a message that finds no
//! waiter of a channel with a [`Relay`] (the reentrant lock's wake
//! channels) is passed on by it. A lagging message stream or a
//! reconnect wakes every waiter so it re-checks, and waiters always bound
//! their sleep by the holder's lease, so a lost message only delays them.
//!
//! On a cluster the subscriptions are sharded (SSUBSCRIBE on the node that
//! owns the channel's slot, where the scripts SPUBLISH), and
//! [`watch_slots`] follows slots that move to another node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use fred::clients::SubscriberClient;
use fred::prelude::{ClientLike, ClusterInterface, EventInterface, PubsubInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::runtime::Spawner;

pub(crate) struct Channel {
    notify: Notify,
    /// SUBSCRIBE confirmed by the server: waiters may rely on it.
    confirmed: AtomicBool,
    /// SUBSCRIBE may have reached the server (set before sending it, so a
    /// subscribe cancelled mid-way is still undone).
    on_server: AtomicBool,
    /// The latest message that carried more than a wake-up (anything but
    /// the plain unlock message), until its waiter takes it: a lock kind
    /// may say more to its waiters (the fair lock's direct grants).
    payload: Mutex<Option<String>>,
    /// A message wakes every wait of this client, not one: the lock can
    /// admit several at once, or a wait may be refused for a reason no
    /// release will clear (a read-write lock, a semaphore).
    wake_every_wait: AtomicBool,
    /// What to do with a message that comes while no wait of this client
    /// listens (a reentrant lock's wake channel: the message was that
    /// unlock's only wake-up, so it is passed on), given the index of the
    /// master it came from.
    relay: Mutex<Option<Relay>>,
}

/// See `Channel::relay`: passes a wake-up on at the master of the index
/// given.
pub(crate) type Relay = Arc<dyn Fn(usize) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// How long the relay of an unsubscribed channel is kept for a message
/// that was on its way (sent before the server took the UNSUBSCRIBE, read
/// after the channel left the map).
const DEPARTED: std::time::Duration = std::time::Duration::from_secs(2);

struct Entry {
    refs: usize,
    /// When the last interest left (the subscription lingers [`LINGER`]).
    left_at: std::time::Instant,
    /// A cleanup task is waiting out the linger.
    sweeping: bool,
    chan: Arc<Channel>,
}

pub(crate) struct PubSub {
    /// One subscriber connection per master; a message from any wakes.
    subs: Vec<SubscriberClient>,
    channels: Mutex<HashMap<String, Entry>>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE so the server sees them in the order
    /// the reference counts changed.
    serial: tokio::sync::Mutex<()>,
    spawner: Spawner,
    timeout: std::time::Duration,
    /// The relays of channels unsubscribed in the last [`DEPARTED`], with
    /// when each left.
    departed: Mutex<Vec<(String, std::time::Instant, Relay)>>,
}

impl PubSub {
    pub(crate) fn new(subs: Vec<SubscriberClient>, spawner: Spawner, timeout: std::time::Duration) -> Arc<PubSub> {
        let ps = Arc::new(PubSub {
            subs,
            channels: Mutex::new(HashMap::new()),
            serial: tokio::sync::Mutex::new(()),
            spawner,
            timeout,
            departed: Mutex::new(Vec::new()),
        });
        for i in 0..ps.subs.len() {
            let weak = Arc::downgrade(&ps);
            let messages = ps.subs[i].message_rx();
            let reconnects = ps.subs[i].reconnect_rx();
            ps.spawner
                .client_runtime()
                .spawn(listen(weak.clone(), i, messages, reconnects));
            if ps.subs[i].is_clustered() {
                ps.spawner.client_runtime().spawn(watch_slots(weak, i));
            }
        }
        ps
    }

    /// The node that owns each subscribed channel's slot, as the
    /// subscriber's routing table says.
    fn owners(&self, i: usize, names: &[String]) -> Vec<Option<fred::types::config::Server>> {
        let state = self.subs[i].cached_cluster_state();
        names
            .iter()
            .map(|n| {
                let slot = fred::util::redis_keyslot(n.as_bytes());
                state.as_ref().and_then(|s| s.get_server(slot).cloned())
            })
            .collect()
    }

    /// Registers interest in `channel`. Subscribing happens in
    /// [`Interest::ready`].
    pub(crate) fn interest(self: &Arc<Self>, channel: &str) -> Interest {
        let mut map = self.channels.lock();
        let entry = map.entry(channel.to_string()).or_insert_with(|| Entry {
            refs: 0,
            left_at: std::time::Instant::now(),
            sweeping: false,
            chan: Arc::new(Channel {
                notify: Notify::new(),
                confirmed: AtomicBool::new(false),
                on_server: AtomicBool::new(false),
                payload: Mutex::new(None),
                wake_every_wait: AtomicBool::new(false),
                relay: Mutex::new(None),
            }),
        });
        self.enter(channel, entry)
    }

    /// One more interest in `entry`, the map entry of `channel` (under the
    /// map lock).
    fn enter(self: &Arc<Self>, channel: &str, entry: &mut Entry) -> Interest {
        entry.refs += 1;
        Interest {
            ps: self.clone(),
            name: channel.to_string(),
            chan: entry.chan.clone(),
        }
    }

    /// Registers interest in `channel` only if it is subscribed already
    /// (confirmed by the server), as a channel is for a moment after its
    /// last waiter left. Its waiter can rely on it before its first attempt.
    pub(crate) fn interest_if_subscribed(self: &Arc<Self>, channel: &str) -> Option<Interest> {
        let mut map = self.channels.lock();
        let entry = map.get_mut(channel)?;
        // Checked under the map lock, where a cleanup clears the flag: a
        // cleanup that saw no interest has cleared it already.
        if !entry.chan.confirmed.load(Ordering::Acquire) {
            return None;
        }
        Some(self.enter(channel, entry))
    }

    /// How many channels have waiters (for tests and metrics).
    pub(crate) fn active_channels(&self) -> usize {
        self.channels.lock().values().filter(|e| e.refs > 0).count()
    }

    /// How many waits of this client listen on `channel`.
    pub(crate) fn listeners(&self, channel: &str) -> usize {
        self.channels.lock().get(channel).map_or(0, |e| e.refs)
    }

    fn wake_all(&self) {
        for e in self.channels.lock().values() {
            e.chan.notify.notify_waiters();
        }
    }

    async fn subscribe(self: &Arc<Self>, name: &str, chan: &Channel) -> Result<()> {
        use futures::StreamExt;
        if chan.confirmed.load(Ordering::Acquire) {
            return Ok(());
        }
        let _serial = self.serial.lock().await;
        if chan.confirmed.load(Ordering::Acquire) {
            return Ok(());
        }
        chan.on_server.store(true, Ordering::Release);
        let n = self.subs.len();
        let need = crate::fanout::majority(n);
        // The first poll hands every SUBSCRIBE to its connection, so a later
        // UNSUBSCRIBE queues behind it; only the confirmations are awaited.
        let mut confirms = crate::fanout::Unordered::new((0..n).map(|i| {
            let (ps, name) = (self.clone(), name.to_string());
            async move { ps.subscribe_one(&ps.subs[i], &name).await }
        }));
        let (mut confirmed, mut errors) = (0, Vec::new());
        // Waking needs one master's message and the lease bound covers the
        // rest; a majority keeps quorum waiters from relying on the bound.
        // A stopped master does not hold the waiter up: its confirmation
        // goes on in the background.
        while confirmed < need && errors.len() <= n - need {
            match confirms.next().await {
                Some(Ok(())) => confirmed += 1,
                Some(Err(e)) => errors.push(e),
                None => break,
            }
        }
        confirms.finish_in_background(&self.spawner);
        if confirmed < need {
            return Err(crate::fanout::quorum_error("subscribe", n, confirmed, errors));
        }
        chan.confirmed.store(true, Ordering::Release);
        Ok(())
    }

    async fn subscribe_one(&self, sub: &SubscriberClient, name: &str) -> Result<()> {
        let map_err = |e| Error::from_redis("subscribe", name, self.timeout, e);
        let confirm = async {
            // On a cluster the scripts publish on the lock's shard
            // (SPUBLISH), so waiters subscribe there: the connection to the
            // node that owns the channel's slot.
            let route = if sub.is_clustered() {
                sub.ssubscribe(name).await.map_err(map_err)?;
                ClusterHash::Custom(fred::util::redis_keyslot(name.as_bytes()))
            } else {
                sub.subscribe(name).await.map_err(map_err)?;
                ClusterHash::Random
            };
            // fred does not wait for the server to confirm SUBSCRIBE. A PING on
            // the same connection is answered after it, so once it returns,
            // every later unlock message reaches us.
            let ping = CustomCommand::new_static("PING", route, false);
            let _: Value = sub.custom(ping, Vec::<Value>::new()).await.map_err(map_err)?;
            Ok(())
        };
        tokio::time::timeout(self.timeout, confirm)
            .await
            .map_err(|_| Error::Timeout {
                server: String::new(),
                op: "subscribe",
                timeout: self.timeout,
            })?
    }

    /// Unsubscribes `name` once nobody registered interest for [`LINGER`]
    /// after the last interest left.
    async fn cleanup(self: Arc<Self>, name: String) {
        loop {
            let until = {
                let mut map = self.channels.lock();
                let Some(e) = map.get_mut(&name) else { return };
                if e.refs > 0 {
                    // Back in use; its next last interest sweeps again.
                    e.sweeping = false;
                    return;
                }
                let until = e.left_at + LINGER;
                if std::time::Instant::now() >= until {
                    e.sweeping = false;
                    break;
                }
                until
            };
            tokio::time::sleep_until(until.into()).await;
        }
        let _serial = self.serial.lock().await;
        let was_subscribed = {
            let map = self.channels.lock();
            match map.get(&name) {
                // Cleared under the map lock, so a newcomer re-subscribes
                // (after us, thanks to `serial`) instead of trusting the flag.
                Some(e) if e.refs == 0 => {
                    e.chan.confirmed.store(false, Ordering::Release);
                    e.chan.on_server.swap(false, Ordering::AcqRel)
                }
                _ => return,
            }
        };
        if was_subscribed {
            let name = name.as_str();
            futures::future::join_all(self.subs.iter().map(|sub| async move {
                let done = if sub.is_clustered() {
                    sub.sunsubscribe(name).await
                } else {
                    sub.unsubscribe(name).await
                };
                if let Err(e) = done {
                    tracing::debug!(channel = %name, error = %e, "unsubscribe failed");
                }
            }))
            .await;
        }
        let mut map = self.channels.lock();
        if map.get(&name).is_some_and(|e| e.refs == 0) {
            let entry = map.remove(&name).expect("checked above");
            let relay = entry.chan.relay.lock().take();
            if let Some(relay) = relay {
                let now = std::time::Instant::now();
                let mut departed = self.departed.lock();
                departed.retain(|(n, at, _)| *n != name && now.duration_since(*at) < DEPARTED);
                departed.push((name, now, relay));
            }
        }
    }

    /// The relay for a message on `channel` that no wait of this client
    /// will take: the channel lingers without waits, or left a moment ago.
    fn relay_for(&self, channel: &str) -> Option<Relay> {
        let now = std::time::Instant::now();
        self.departed
            .lock()
            .iter()
            .find(|(n, at, _)| n == channel && now.duration_since(*at) < DEPARTED)
            .map(|(_, _, r)| r.clone())
    }

    /// Closes the subscriber connections, then passes on, at every master,
    /// any wake-up that may have come to a channel with a relay in the
    /// meantime (the client is going away: none of its waits will take
    /// one).
    pub(crate) async fn quit_passing_on(&self) {
        let mut relays: Vec<Relay> = self
            .channels
            .lock()
            .values()
            .filter_map(|e| e.chan.relay.lock().clone())
            .collect();
        relays.extend(self.departed.lock().drain(..).map(|(_, _, r)| r));
        self.quit().await;
        let passes = relays.iter().flat_map(|r| (0..self.subs.len()).map(move |i| r(i)));
        futures::future::join_all(passes).await;
    }

    async fn resubscribe(&self, i: usize) {
        let _serial = self.serial.lock().await;
        let names: Vec<String> = self
            .channels
            .lock()
            .iter()
            .filter(|(_, e)| e.chan.on_server.load(Ordering::Acquire))
            .map(|(n, _)| n.clone())
            .collect();
        // Never an empty SUBSCRIBE: the server's error would be matched to an
        // unrelated command.
        if names.is_empty() {
            return;
        }
        let sub = &self.subs[i];
        let done = if sub.is_clustered() {
            // One SSUBSCRIBE per channel: channels of different locks may
            // live in different slots. Repeating one is harmless.
            let mut done = Ok(());
            for name in names {
                if let Err(e) = sub.ssubscribe(name).await {
                    done = Err(e);
                }
            }
            done
        } else {
            sub.subscribe(names).await
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, "resubscribing after a reconnect failed; waiters fall back to lease timeouts");
        }
    }

    pub(crate) async fn quit(&self) {
        for sub in &self.subs {
            let _ = sub.quit().await;
        }
    }
}

async fn listen(
    ps: Weak<PubSub>,
    index: usize,
    mut messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
    mut reconnects: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
) {
    loop {
        tokio::select! {
            m = messages.recv() => {
                let Some(ps) = ps.upgrade() else { return };
                match m {
                    Ok(msg) => {
                        // One unlock frees the lock for one taker: wake one local
                        // waiter, not all of them (if it is dropped before it
                        // tries, tokio hands the wake-up to another waiter).
                        // Kinds that admit several at once wake them all.
                        let found = ps.channels.lock().get(&*msg.channel).map(|e| {
                            if e.refs == 0 {
                                // Nobody here to take it (the channel lingers).
                                return e.chan.relay.lock().clone();
                            }
                            if let Some(text) = msg.value.as_str().filter(|t| t != crate::protocol::UNLOCK_MESSAGE) {
                                *e.chan.payload.lock() = Some(text.into_owned());
                            }
                            if e.chan.wake_every_wait.load(Ordering::Relaxed) {
                                e.chan.notify.notify_waiters();
                            } else {
                                e.chan.notify.notify_one();
                            }
                            None
                        });
                        // A channel no longer in the map may have left a moment ago.
                        if let Some(relay) = found.unwrap_or_else(|| ps.relay_for(&msg.channel)) {
                            tracing::debug!(channel = %msg.channel, "a wake-up came with no wait to take it; passing it on");
                            ps.spawner.spawn(relay(index));
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        tracing::debug!(missed = n, "unlock messages lagged; waking every waiter");
                        ps.wake_all();
                    }
                    Err(RecvError::Closed) => return,
                }
            }
            r = reconnects.recv() => {
                let Some(ps) = ps.upgrade() else { return };
                match r {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        ps.resubscribe(index).await;
                        // Messages may have been missed while disconnected.
                        ps.wake_all();
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }
    }
}

/// How long a channel stays subscribed after its last waiter left: a waiter
/// that comes back soon (a client's fair waiters re-use their wake ids)
/// then skips SUBSCRIBE and its confirmation, and the server its churn.
const LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// How often a cluster subscriber re-reads the slot owners while it has
/// waiters.
const SLOT_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps sharded subscriptions on the nodes that own their slots. A primary
/// that loses a slot (failover, resharding) drops the slot's sharded
/// subscriptions without closing the connection, and fred learns of the new
/// owner only when its routing table is refreshed. While
/// channels are subscribed, this refreshes it every [`SLOT_CHECK`]; when a
/// channel's owner changed, every channel is subscribed again (on its
/// owner) and every waiter re-checks, as after a reconnect.
async fn watch_slots(ps: Weak<PubSub>, index: usize) {
    loop {
        tokio::time::sleep(SLOT_CHECK).await;
        let Some(ps) = ps.upgrade() else { return };
        let names: Vec<String> = ps.channels.lock().keys().cloned().collect();
        if names.is_empty() {
            continue;
        }
        let before = ps.owners(index, &names);
        if let Err(e) = ps.subs[index].sync_cluster().await {
            tracing::debug!(error = %e, "refreshing the cluster's slot owners failed");
            continue;
        }
        if ps.owners(index, &names) != before {
            tracing::debug!("a subscribed channel's slot moved; subscribing again on its new owner");
            ps.resubscribe(index).await;
            ps.wake_all();
        }
    }
}

/// One waiter's registration on a channel; dropping it leaves.
pub(crate) struct Interest {
    ps: Arc<PubSub>,
    name: String,
    chan: Arc<Channel>,
}

impl Interest {
    /// Subscribes the channel if it is not yet (confirmed by the server).
    pub(crate) async fn ready(&self) -> Result<()> {
        self.ps.subscribe(&self.name, &self.chan).await
    }

    /// Takes the latest message of this channel that carried more than a
    /// wake-up, if one came (the waiter's kind reads it).
    pub(crate) fn take_payload(&self) -> Option<String> {
        self.chan.payload.lock().take()
    }

    /// From now on a message on this channel wakes every wait of this
    /// client on it (see `Channel::wake_every_wait`).
    pub(crate) fn wake_every_wait(&self) {
        self.chan.wake_every_wait.store(true, Ordering::Relaxed);
    }

    /// Whether a message on this channel wakes every wait of this client.
    pub(crate) fn wakes_every_wait(&self) -> bool {
        self.chan.wake_every_wait.load(Ordering::Relaxed)
    }

    /// Whether other waits of this client listen on the channel too.
    pub(crate) fn shared(&self) -> bool {
        self.ps.listeners(&self.name) > 1
    }

    /// Sets what a message that comes while no wait of this client listens
    /// does (see `Channel::relay`), unless it is set already.
    pub(crate) fn relay_with(&self, make: impl FnOnce() -> Relay) {
        let mut relay = self.chan.relay.lock();
        if relay.is_none() {
            *relay = Some(make());
        }
    }

    /// A wake-up for the next message; call `enable()` on it before the
    /// attempt it guards.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.chan.notify.notified()
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let last = {
            let mut map = self.ps.channels.lock();
            match map.get_mut(&self.name) {
                Some(e) => {
                    e.refs -= 1;
                    if e.refs == 0 {
                        e.left_at = std::time::Instant::now();
                    }
                    // One cleanup at a time waits out the linger.
                    e.refs == 0 && !std::mem::replace(&mut e.sweeping, true)
                }
                None => false,
            }
        };
        if last {
            let ps = self.ps.clone();
            let name = std::mem::take(&mut self.name);
            // Spawning never blocks; with the runtime gone the connection is
            // gone too, and so is the subscription.
            self.ps.spawner.spawn(ps.cleanup(name));
        }
    }
}
