//! The client: connections, scripts, the subscriber and the watchdog.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, EventInterface, ReconnectPolicy, TcpConfig};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::Lock;
use crate::node::Node;
use crate::owner::{Owner, Owners};
use crate::pubsub::PubSub;
use crate::quorum::Member;
use crate::settings::{
    check_duration, Settings, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAIR_WAITER_TIMEOUT,
    DEFAULT_NODE_TIMEOUT, DEFAULT_RETRY_TRANSIENT_FOR, DEFAULT_WAKE_PATIENCE, DEFAULT_WATCHDOG_LEASE,
    MIN_WATCHDOG_LEASE,
};
use crate::tls::TlsSettings;
use crate::watchdog::Holds;

/// Builds a [`Client`]; see [`Client::builder`].
///
/// Its `Debug` output shows each master's URL without credentials (see
/// [`redact_url`]) and whether TLS material was given, never the material.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build().await` is called"]
pub struct ClientBuilder {
    /// Each master's URL (without its password) and its parsed configuration.
    configs: Vec<(String, std::result::Result<Config, String>)>,
    tls: TlsSettings,
    prefix: String,
    watchdog_lease: Duration,
    command_timeout: Option<Duration>,
    rejoin_delay: Option<Duration>,
    connect_timeout: Duration,
    fair_waiter_timeout: Duration,
    metric_lock_names: bool,
    retry_transient_for: Duration,
    wake_patience: Duration,
    min_replicas: Option<(u32, Duration)>,
    min_aof: Option<crate::node::AofConfirm>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masters: Vec<&str> = self.configs.iter().map(|(url, _)| url.as_str()).collect();
        f.debug_struct("ClientBuilder")
            .field("masters", &masters)
            .field("prefix", &self.prefix)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_ca", &self.tls.ca_pem.is_some())
            .field("tls_client_cert", &self.tls.client_pem.is_some())
            .field("min_replicas_acked", &self.min_replicas)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Prefix put before every lock name to form its key. Defaults to `""`
    /// (the key is the lock name, as in Redisson).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Lease of locks taken without an explicit lease, renewed every lease/3
    /// while held. Defaults to 30 s; must be within 100 ms ..= 30 days.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// Time allowed to each Redis call on each master (one script run,
    /// including its retries after a broken connection). Defaults to 3 s
    /// with one master and to [`DEFAULT_NODE_TIMEOUT`] (250 ms) with a quorum,
    /// where it is the per-node timeout: keep it well below the leases.
    /// Must be within 1 ms ..= 30 days. A call to an unreachable server
    /// fails after it.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = Some(timeout);
        self
    }

    /// Time allowed to open a connection. Defaults to 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long [`Lock::lock`](crate::Lock::lock) (a wait without a
    /// deadline) keeps retrying while every attempt fails with a retryable
    /// error ([`Error::is_retryable`]: Redis unreachable or slow, a majority
    /// not reached, a failover under way): it returns the last error once
    /// failures have lasted this long without a single answer in between.
    /// [`Lock::try_lock`](crate::Lock::try_lock) retries until its own wait
    /// ends instead. [`ClientBuilder::build`] (and [`Client::connect`])
    /// retries connecting as long (a server restarting, still loading its
    /// data, a failover). Retries back off from 50 ms to 1 s. Defaults to
    /// [`DEFAULT_RETRY_TRANSIENT_FOR`] (10 s); zero returns the first error.
    /// Must be at most 30 days.
    pub fn retry_transient_for(mut self, limit: Duration) -> Self {
        self.retry_transient_for = limit;
        self
    }

    /// TLS: trust the CA certificates in `pem` (one or more, PEM-encoded)
    /// instead of the system's roots when verifying the servers. Needs TLS
    /// URLs (`rediss://`, `rediss-cluster://`, `rediss-sentinel://`): with
    /// another URL, [`ClientBuilder::build`] returns [`Error::Config`].
    /// Without it, a TLS URL is verified against the system's roots.
    /// A server whose certificate is not signed by these CAs, or does not
    /// name the host of the URL, is refused. A server presenting exactly
    /// one of these certificates, self-signed (as `openssl req -x509` makes
    /// them, marked as a CA), is accepted: the certificate is pinned, its
    /// name, validity dates and signature still checked.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// TLS: present this client certificate (`chain_pem`, leaf first) and
    /// its private key (`key_pem`, PKCS#8, PKCS#1 or SEC1), for servers
    /// started with `tls-auth-clients yes`. Needs TLS URLs, as
    /// [`ClientBuilder::tls_ca_pem`].
    pub fn tls_client_cert_pem(mut self, chain_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls.client_pem = Some((chain_pem.into(), key_pem.into()));
        self
    }

    /// Grants confirmed by replicas: after each acquisition and each
    /// renewal, `WAIT n timeout` on the same connection asks that at least
    /// `n` replicas of the lock's master acknowledged it. With fewer, an
    /// acquisition gave nothing (it is released again and the wait goes on,
    /// within its time) and a renewal does not count (the hold goes at
    /// risk, and is lost if it stays so). This protects against a failover
    /// (Sentinel, Cluster) promoting a replica that never received the
    /// lock; it costs a round trip per acquisition and per renewal batch,
    /// and up to `timeout` while replicas lag. It does not make the write
    /// durable on disk, and a replica can still lose it in a restart: see
    /// [`min_aof_fsynced`](Self::min_aof_fsynced).
    /// `timeout` must be below the command timeout and a third of the
    /// watchdog lease. Off by default. Direct grants of the fair lock (an
    /// unlock handing the lock to the next waiter) are not used with it: the
    /// waiter takes the lock itself and waits for its acknowledgement.
    pub fn min_replicas_acked(mut self, n: u32, timeout: Duration) -> Self {
        self.min_replicas = Some((n, timeout));
        self
    }

    /// Grants confirmed on disk: after each acquisition and each renewal,
    /// `WAITAOF local replicas timeout` on the same connection asks that the
    /// write is in the master's own append-only file (`local`) and in those
    /// of at least `replicas` replicas, fsynced. With fewer, the attempt is
    /// treated as with [`min_replicas_acked`](Self::min_replicas_acked): an
    /// acquisition gave nothing (a retryable
    /// [`RedisErrorKind::NotPersisted`](crate::RedisErrorKind::NotPersisted),
    /// and the wait goes on), a renewal does not count.
    ///
    /// This protects against a restart losing the lock: a master (or a
    /// promoted replica) that restarts from its append-only file still has
    /// it, so no second holder can take it meanwhile. `WAIT` alone only
    /// says replicas have the write in memory. Both may be set; each costs
    /// a round trip per acquisition and per renewal batch, and `WAITAOF`
    /// also the fsync itself (up to a second with `appendfsync everysec`;
    /// with `appendfsync no` the master's own copy is never confirmed).
    ///
    /// Needs Redis 7.2 or later (or Valkey) and, with `local`, `appendonly
    /// yes` on the masters: [`build`](Self::build) checks both and returns
    /// [`Error::Config`] saying which is missing. `timeout` must be below
    /// the command timeout and a third of the watchdog lease, and at least
    /// one of `local` and `replicas` must be asked for. Off by default; the
    /// fair lock's direct grants are not used with it.
    pub fn min_aof_fsynced(mut self, local: bool, replicas: u32, timeout: Duration) -> Self {
        self.min_aof = Some(crate::node::AofConfirm {
            local,
            replicas,
            timeout,
        });
        self
    }

    /// Fair locks: how long a queued waiter may go without refreshing its
    /// place before it is evicted (a waiter whose process died). Live
    /// waiters refresh every third of it, whatever the holder does. Defaults
    /// to 5 s; must be within 100 ms ..= 30 days. Read-write locks: how long
    /// a waiting writer's mark holds new readers back after its last
    /// attempt (it makes one every third of it).
    pub fn fair_waiter_timeout(mut self, timeout: Duration) -> Self {
        self.fair_waiter_timeout = timeout;
        self
    }

    /// How long a waiting client first in line for a reentrant lock sleeps
    /// at most before it tries the lock again on its own; each place
    /// further back in line adds as much. An unlock wakes only the first
    /// client in line (not every client with a wait), and that client may
    /// be unable to act on it while the server still counts it as
    /// listening: its process stopped, its runtime blocked, its network
    /// cut. The clients behind it then take over within a few patiences,
    /// not at the end of the lease they last saw (up to the watchdog
    /// lease). The cost: while a lock stays held, its n waiting clients
    /// make about ln(n) + 1 extra attempts per patience between them.
    /// Defaults to [`DEFAULT_WAKE_PATIENCE`] (1 s); at least 1 ms, at most
    /// 30 days. Only the reentrant lock wakes one client per unlock: the
    /// fair lock and a waiting writer of the read-write lock look again
    /// every third of [`fair_waiter_timeout`](Self::fair_waiter_timeout),
    /// and waiting readers and semaphore waiters are woken in every client.
    pub fn wake_patience(mut self, patience: Duration) -> Self {
        self.wake_patience = patience;
        self
    }

    /// Delayed rejoin: a master whose uptime is below `delay` does not count
    /// toward the majority until it reaches it. Set it to at least the
    /// longest lease in use when masters run without persistence: a master
    /// that restarts empty and counts at once can hand a lock still held
    /// on the others to a second client. Uptime is checked when the client
    /// connects and whenever a master's connection breaks or is re-opened.
    /// Off by default.
    pub fn rejoin_delay(mut self, delay: Duration) -> Self {
        self.rejoin_delay = Some(delay);
        self
    }

    /// Label metrics with the lock's name (`lock="..."`). Defaults to off:
    /// one time series per lock name can be too many for a metrics backend,
    /// and names may be sensitive.
    pub fn metric_lock_names(mut self, on: bool) -> Self {
        self.metric_lock_names = on;
        self
    }

    /// Connects and returns the client.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an unparsable URL, [`Error::InvalidDuration`]
    /// for a setting out of range, [`Error::Tls`] for a failed TLS
    /// handshake, [`Error::Redis`] when the server refuses us
    /// (authentication, permissions). A retryable failure
    /// ([`Error::is_retryable`]: [`Error::Connection`], [`Error::Timeout`],
    /// a server still loading its data, a majority not reached) is retried,
    /// with a backoff from 50 ms to 1 s, while failures last less than
    /// [`retry_transient_for`](Self::retry_transient_for) (10 s by default;
    /// zero: one attempt); the last one is returned then.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the half-built client and its connections.
    pub async fn build(self) -> Result<Client> {
        // An out-of-range setting is refused by the first attempt.
        let start = std::time::Instant::now();
        let give_up = start.checked_add(self.retry_transient_for).unwrap_or(start);
        let mut backoff = crate::runtime::Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            match self.clone().build_once().await {
                Err(e) if e.is_retryable() => {
                    let now = std::time::Instant::now();
                    if now >= give_up {
                        return Err(e);
                    }
                    let pause = backoff.next_jittered().min(give_up - now);
                    tracing::debug!(error = %e, retry_in_ms = pause.as_millis() as u64, "connecting failed; retrying");
                    tokio::time::sleep(pause).await;
                }
                done => return done,
            }
        }
    }

    async fn build_once(self) -> Result<Client> {
        let mut configs = Vec::with_capacity(self.configs.len());
        let mut shown = Vec::with_capacity(self.configs.len());
        for (url, config) in self.configs {
            let mut config = config.map_err(Error::Config)?;
            self.tls.apply(&mut config, &url)?;
            configs.push(config);
            shown.push(url);
        }
        let n = configs.len();
        if n == 0 {
            return Err(Error::Config("no Redis master given".into()));
        }
        if n % 2 == 0 {
            return Err(Error::Config(format!(
                "{n} masters: use an odd number (an even one tolerates no more failures than one master less)"
            )));
        }
        let command_timeout = self.command_timeout.unwrap_or(if n == 1 {
            DEFAULT_COMMAND_TIMEOUT
        } else {
            DEFAULT_NODE_TIMEOUT
        });
        check_duration("watchdog lease", self.watchdog_lease, MIN_WATCHDOG_LEASE)?;
        check_duration("command timeout", command_timeout, Duration::from_millis(1))?;
        if let Some(d) = self.rejoin_delay {
            check_duration("rejoin delay", d, Duration::from_millis(1))?;
        }
        check_duration("connect timeout", self.connect_timeout, Duration::from_millis(1))?;
        check_duration("retry time", self.retry_transient_for, Duration::ZERO)?;
        check_duration("wake patience", self.wake_patience, Duration::from_millis(1))?;
        let confirm_timeout = |what: &str, name: &'static str, timeout: Duration| {
            check_duration(name, timeout, Duration::from_millis(1))?;
            if timeout >= command_timeout || timeout >= self.watchdog_lease / 3 {
                return Err(Error::Config(format!(
                    "{what}: the timeout ({timeout:?}) must be below the command timeout \
                     ({command_timeout:?}) and a third of the watchdog lease ({:?})",
                    self.watchdog_lease / 3
                )));
            }
            Ok(())
        };
        if let Some((n, timeout)) = self.min_replicas {
            if n == 0 {
                return Err(Error::Config("min_replicas_acked: ask for at least one replica".into()));
            }
            confirm_timeout("min_replicas_acked", "replica timeout", timeout)?;
        }
        if let Some(aof) = self.min_aof {
            if !aof.local && aof.replicas == 0 {
                return Err(Error::Config(
                    "min_aof_fsynced: ask for the master's own file, at least one replica, or both".into(),
                ));
            }
            confirm_timeout("min_aof_fsynced", "aof timeout", aof.timeout)?;
        }
        check_duration(
            "fair waiter timeout",
            self.fair_waiter_timeout,
            Duration::from_millis(100),
        )?;
        if self.prefix.len() > crate::keys::MAX_NAME_LEN / 2 {
            return Err(Error::Config("the key prefix is longer than 256 bytes".into()));
        }
        if self.prefix.starts_with(crate::keys::RESERVED) {
            return Err(Error::Config(format!(
                "the key prefix {:?} starts with {:?}, which is reserved for lockwarden's own keys",
                self.prefix,
                crate::keys::RESERVED
            )));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Config("a client must be built inside a tokio runtime".into()))?;
        let spawner = crate::runtime::Spawner::new(runtime.clone());

        let connect_timeout = self.connect_timeout;
        let quorum = n > 1;
        let sentinel_configs: Vec<Config> = configs.clone();
        let mut clients = Vec::with_capacity(n);
        let mut subscribers = Vec::with_capacity(n);
        for config in configs {
            let (client, sub) = master_clients(config, connect_timeout, command_timeout, quorum)?;
            clients.push(client);
            subscribers.push(sub);
        }
        // In a quorum the client is usable once a majority is up: masters
        // still connecting (stopped, or slow) join in the background.
        let connecting = clients
            .iter()
            .zip(&subscribers)
            .map(|(client, sub)| bring_up(client.clone(), sub.clone(), connect_timeout, quorum))
            .collect();
        let connected = crate::quorum::majority_then_grace(connecting, Result::is_ok, command_timeout, &spawner).await;
        let mut errors = Vec::new();
        let mut up = 0;
        for (r, url) in connected.into_iter().zip(&shown) {
            match r {
                Some(Ok(())) => up += 1,
                // The message names the server (its URL without credentials).
                Some(Err(Error::Connection { op, message })) => errors.push(Error::Connection {
                    op,
                    message: format!("{url}: {message}{}", plain_on_tls_hint(url, &message)),
                }),
                Some(Err(Error::Tls { op, message })) => errors.push(Error::Tls {
                    op,
                    message: format!("{url}: {message}"),
                }),
                // A TLS client waits for the server's half of the handshake,
                // which a plain port never sends.
                Some(Err(Error::Timeout { .. })) | None if uses_tls(url) => errors.push(Error::Connection {
                    op: "connect",
                    message: format!(
                        "{url}: no answer to the TLS handshake within {connect_timeout:?}; if that port is a plain \
                         one (not TLS), use redis://"
                    ),
                }),
                Some(Err(Error::Redis { op, kind, message })) => errors.push(Error::Redis {
                    op,
                    kind,
                    message: format!("{url}: {message}"),
                }),
                Some(Err(Error::Timeout { .. })) | None => errors.push(Error::Connection {
                    op: "connect",
                    message: format!(
                        "{url}: no answer within {connect_timeout:?}; check that the server is up and the address \
                         right"
                    ),
                }),
                Some(Err(e)) => errors.push(e),
            }
        }
        if up < crate::quorum::majority(n) {
            return Err(crate::quorum::quorum_error("connect", n, up, errors));
        }
        let sentinel_watchers: Vec<_> = sentinel_configs
            .iter()
            .zip(clients.iter().zip(&subscribers))
            .flat_map(|(config, (client, sub))| crate::sentinel::watch(config, client, sub, &runtime))
            .collect();

        let record_ttl = (command_timeout * 4).max(Duration::from_secs(1));
        let members: Vec<Arc<Member>> = clients
            .into_iter()
            .enumerate()
            .map(|(i, client)| {
                let node = Node {
                    client,
                    command_timeout,
                    // Long enough to outlive every retry of the call that wrote it
                    // (bounded by the command timeout), with a wide margin.
                    record_ttl,
                    waiter_timeout: self.fair_waiter_timeout,
                    confirm: crate::node::Confirm {
                        replicas: self.min_replicas,
                        aof: self.min_aof,
                    },
                    batch: Default::default(),
                };
                Arc::new(Member::new(node, i, self.rejoin_delay, quorum, spawner.clone()))
            })
            .collect();
        let (masters_checked, channels_checked) = futures::future::join(
            async {
                if quorum || self.rejoin_delay.is_some() {
                    check_masters(&members).await
                } else {
                    Ok(())
                }
            },
            check_channel_rights(&members, &self.prefix),
        )
        .await;
        masters_checked?;
        channels_checked?;
        check_aof_support(&members).await?;
        // Loading is an optimisation (a call falls back to EVAL on
        // NOSCRIPT): masters slow to answer finish it in the background.
        let loads = members
            .iter()
            .map(|m| {
                let m = m.clone();
                async move { m.node.load_scripts().await }
            })
            .collect();
        crate::quorum::majority_then_grace(loads, |_| true, command_timeout, &spawner).await;
        for m in members.iter().filter(|_| self.rejoin_delay.is_some()) {
            // A re-opened connection may lead to a restarted, empty master.
            let mut reconnects = m.node.client.reconnect_rx();
            let weak = Arc::downgrade(m);
            runtime.spawn(async move {
                while let Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) = reconnects.recv().await {
                    match weak.upgrade() {
                        Some(m) => m.suspect(),
                        None => return,
                    }
                }
            });
        }
        let uuid = uuid::Uuid::new_v4().to_string();
        let inner = Core {
            owners: Arc::new(Owners::new(uuid.clone())),
            holds: Holds::new(&uuid),
            waiting_gauge: crate::observe::ClientGauge::waiting(&uuid),
            uuid,
            members,
            pubsub: PubSub::new(subscribers, spawner.clone(), command_timeout),
            settings: Settings {
                prefix: self.prefix,
                watchdog_lease: self.watchdog_lease,
                command_timeout,
                metric_lock_names: self.metric_lock_names,
                retry_transient_for: self.retry_transient_for,
                wake_patience: self.wake_patience,
            },
            spawner,
            sentinel_watchers,
            wake_ids: Default::default(),
            extensions: Default::default(),
        }
        .start();
        tracing::debug!(client = %inner.uuid, "lockwarden client connected");
        Ok(Client { inner })
    }
}

/// Makes one master's command and subscriber clients (not connected yet).
fn master_clients(
    config: Config,
    connect_timeout: Duration,
    command_timeout: Duration,
    quorum: bool,
) -> Result<(fred::clients::Client, fred::clients::SubscriberClient)> {
    let mut config = config;
    // In a quorum a master that is down at start-up joins when it comes up.
    config.fail_fast = !quorum;
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|c| {
            c.connection_timeout = connect_timeout;
            c.internal_command_timeout = connect_timeout;
            // fred replays written commands after a reconnect by default; a
            // replayed script could apply twice. Our own retries carry
            // request ids instead.
            c.max_command_attempts = 1;
            // The system's default (Nagle's algorithm on), not TCP_NODELAY:
            // fred flushes every script call by itself, and with NODELAY each
            // is a packet and a read of its own on the server. Coalescing
            // them while earlier ones are unacknowledged costs one round
            // trip at most and no latency measured here, and it took 32
            // tasks on one client from 31 to 22 µs of Redis CPU per lock +
            // unlock, 1.5x the pairs per second (README, Performance).
            c.tcp = TcpConfig::default();
        })
        .with_performance_config(|p| {
            // Without a default timeout fred waits forever on a dead server.
            p.default_command_timeout = command_timeout;
            p.broadcast_channel_capacity = 4096;
        })
        // Without a policy a dropped connection is never re-opened.
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
    let fred_err = |e: fred::error::Error| Error::from_redis("connect", "", connect_timeout, e);
    let client = builder.build().map_err(fred_err)?;
    let sub = builder.build_subscriber_client().map_err(fred_err)?;
    Ok((client, sub))
}

/// Opens one master's connections. With one master a failure is the build's
/// error; in a quorum the connections keep retrying in the background and
/// the result says whether they are up yet.
async fn bring_up(
    client: fred::clients::Client,
    sub: fred::clients::SubscriberClient,
    connect_timeout: Duration,
    quorum: bool,
) -> Result<()> {
    let fred_err = |e: fred::error::Error| Error::from_redis("connect", "", connect_timeout, e);
    if !quorum {
        client.init().await.map_err(fred_err)?;
        sub.init().await.map_err(fred_err)?;
        return Ok(());
    }
    // fred retries a failed connection in the background and only reports
    // it as an event: a failed TLS handshake (which no retry mends) ends
    // the wait with that error instead of the timeout.
    let mut errors = client.error_rx();
    let tls_failure = async move {
        loop {
            match errors.recv().await {
                Ok((e, _)) => {
                    if let err @ Error::Tls { .. } = fred_err(e) {
                        return err;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    };
    // The connection tasks run until the client quits.
    drop(client.connect());
    drop(sub.connect());
    let up = async {
        tokio::select! {
            r = async {
                client.wait_for_connect().await.map_err(fred_err)?;
                sub.wait_for_connect().await.map_err(fred_err)
            } => r,
            e = tls_failure => Err(e),
        }
    };
    match tokio::time::timeout(connect_timeout, up).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            op: "connect",
            timeout: connect_timeout,
        }),
    }
}

/// Refuses a server listed twice (it would count twice toward the
/// majority) and starts the delayed rejoin of masters that started recently.
/// Masters that do not answer now are told apart when they come up, and do
/// not count until then.
async fn check_masters(members: &[Arc<Member>]) -> Result<()> {
    let ids = ask_masters(members, |m| async move { m.node.identity().await }).await;
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut later = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let (run_id, uptime) = match id {
            Some(Ok(id)) => id,
            // Not answering yet: checked when it does.
            None => {
                later.push(i);
                continue;
            }
            // Down or unreachable: checked when it comes up.
            Some(Err(e)) if e.is_outcome_unknown() => {
                later.push(i);
                continue;
            }
            // It answered, but not INFO (an ACL, say): it cannot be checked.
            Some(Err(_)) => continue,
        };
        members[i].observe_uptime(uptime);
        if run_id.is_empty() {
            continue;
        }
        if let Some(j) = seen.insert(run_id.clone(), i) {
            return Err(Error::Config(format!(
                "masters {j} and {i} are the same server (run_id {run_id}); it would count twice toward the majority"
            )));
        }
    }
    if members.len() > 1 {
        let seen = Arc::new(parking_lot::Mutex::new(seen));
        for i in later {
            members[i].identify_later(seen.clone());
        }
    }
    Ok(())
}

/// Refuses an ACL user that may not publish on lockwarden's channels (Redis
/// 7 gives new users no channel at all): every unlock would delete the
/// lock and then fail to wake its waiters, who would sleep out the
/// holder's whole lease. One PUBLISH per master on a channel of the
/// namespace that no lock uses; masters that do not answer are not judged.
async fn check_channel_rights(members: &[Arc<Member>], prefix: &str) -> Result<()> {
    let probe = LockKeys::new(prefix, "lockwarden-connect-check")?.channel;
    let answers = ask_masters(members, |m| {
        let probe = probe.clone();
        async move { m.node.may_publish(&probe).await }
    })
    .await;
    if answers.iter().any(|a| matches!(a, Some(Ok(false)))) {
        return Err(Error::Redis {
            op: "connect",
            kind: crate::error::RedisErrorKind::NoPermission,
            message: format!(
                "the ACL user may not publish on lockwarden's channels (tried {probe:?}): waiters could not be \
                 woken; grant them with `ACL SETUSER <user> &lockwarden:*`"
            ),
        });
    }
    first_fatal(answers)
}

/// With [`ClientBuilder::min_aof_fsynced`]: the masters that answer can
/// confirm writes on disk (one node per master; a cluster's others are
/// checked by their first acquisition).
async fn check_aof_support(members: &[Arc<Member>]) -> Result<()> {
    if members[0].node.confirm.aof.is_none() {
        return Ok(());
    }
    let answers = ask_masters(members, |m| async move { m.node.check_aof_support().await }).await;
    first_fatal(answers)
}

/// Asks every master with `ask` and returns their answers, `None` for those
/// still pending once a majority answered and a grace as long again (up to
/// the node timeout) has passed (see `quorum::majority_then_grace`).
async fn ask_masters<T, F, Fut>(members: &[Arc<Member>], ask: F) -> Vec<Option<Result<T>>>
where
    F: Fn(Arc<Member>) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let asks = members.iter().map(|m| ask(m.clone())).collect();
    let grace = members[0].node.command_timeout;
    crate::quorum::majority_then_grace(
        asks,
        Result::is_ok,
        grace,
        crate::quorum::NodeOps::spawner(&*members[0]),
    )
    .await
}

/// The first refusal among `answers` that a retry cannot fix (a missing
/// password, say): every lock call would meet it, so it is the build's.
fn first_fatal<T>(answers: Vec<Option<Result<T>>>) -> Result<()> {
    match answers
        .into_iter()
        .flatten()
        .find_map(|a| a.err().filter(|e| !e.is_retryable()))
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// URL schemes fred understands; it silently accepts others (`http://`).
const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "rediss-sentinel",
    "valkey",
    "valkeys",
    "valkey-cluster",
    "valkeys-cluster",
    "valkey-sentinel",
    "valkeys-sentinel",
];

/// `url` with its credentials replaced by `***`, fit for messages and logs:
/// the user and password before the host (`redis://user:secret@host` gives
/// `redis://***@host`) and the value of every query parameter that names a
/// user or a password (`sentinelUsername`, `sentinelPassword`, ...). Every
/// message, log line and `Debug` output of lockwarden shows URLs this way.
///
/// A password written without percent-encoding may hold `/`, `?` or `@`;
/// the URL is then cut at its last `@` and everything before it is hidden,
/// so nothing of the password shows.
///
/// ```
/// assert_eq!(
///     lockwarden::redact_url("redis://app:s3cret@10.0.0.5:6379/0"),
///     "redis://***@10.0.0.5:6379/0"
/// );
/// assert_eq!(
///     lockwarden::redact_url("redis-sentinel://h:26379/0?sentinelServiceName=m&sentinelPassword=pw"),
///     "redis-sentinel://h:26379/0?sentinelServiceName=m&sentinelPassword=***"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL: nothing can be told apart from a secret.
        return if url.contains('@') || url.contains('=') {
            "***".to_string()
        } else {
            url.to_string()
        };
    };
    let query_at = rest.find('?').unwrap_or(rest.len());
    let (before_query, query) = rest.split_at(query_at);
    // An '@' after the first '?' means the '?' was part of the password,
    // or a query value holds an '@': hide everything up to the last '@'.
    let (authority_and_path, query) = if query.contains('@') {
        let at = rest.rfind('@').unwrap_or(0);
        let tail = &rest[at..];
        let q = tail.find('?').unwrap_or(tail.len());
        return format!("{scheme}://***{}{}", &tail[..q], redact_query(&tail[q..]));
    } else {
        (before_query, query)
    };
    let shown = match authority_and_path.rfind('@') {
        Some(at) => format!("***{}", &authority_and_path[at..]),
        None => authority_and_path.to_string(),
    };
    format!("{scheme}://{shown}{}", redact_query(query))
}

/// A query string (from its `?`) with the values of parameters that name a
/// user or a password replaced by `***`.
fn redact_query(query: &str) -> String {
    let Some(params) = query.strip_prefix('?') else {
        return query.to_string();
    };
    let params: Vec<String> = params
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if is_credential(k) => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("?{}", params.join("&"))
}

/// Whether `url` asks for TLS (`rediss://`, `valkeys://` and their cluster
/// and sentinel forms).
fn uses_tls(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| scheme.starts_with("rediss") || scheme.starts_with("valkeys"))
}

/// A plain client on a TLS port sees its connection closed at once: say so.
fn plain_on_tls_hint(url: &str, message: &str) -> &'static str {
    let closed = [
        "reset by peer",
        "Connection closed",
        "end of file",
        "early eof",
        "Broken pipe",
    ];
    if !uses_tls(url) && closed.iter().any(|c| message.contains(c)) {
        " (if that port serves TLS, use rediss://)"
    } else {
        ""
    }
}

fn is_credential(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("pass") || k.contains("user") || k.contains("token") || k.contains("secret")
}

fn parse_url(url: &str) -> std::result::Result<Config, String> {
    let scheme = url.split_once("://").map(|(s, _)| s);
    if !scheme.is_some_and(|s| SCHEMES.contains(&s)) {
        return Err(format!(
            "redis url {:?}: the scheme must be one of {}",
            redact_url(url),
            SCHEMES.join(", ")
        ));
    }
    let shown = redact_url(url);
    Config::from_url(url).map_err(|e| format!("redis url {shown:?}: {}", e.details()))
}

/// A connection to one Redis deployment, shared by all its locks.
///
/// Cheap to clone (an `Arc`); clones share the connections, the client UUID
/// that prefixes every owner id, the subscriber and the watchdog. The
/// watchdog and the connections stop when the last clone and the last guard
/// are dropped.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Core>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("uuid", &self.inner.uuid)
            .field("masters", &self.inner.members.len())
            .field("prefix", &self.inner.settings.prefix)
            .field("watchdog_lease", &self.inner.settings.watchdog_lease)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder for a client of the server at `url` (`redis://host:port/db`,
    /// `rediss://`, `redis-sentinel://...`; see fred's `Config::from_url`).
    /// The URL is checked by [`ClientBuilder::build`].
    pub fn builder(url: &str) -> ClientBuilder {
        Self::builder_from_configs(vec![(redact_url(url), parse_url(url))])
    }

    /// A builder for a client of a quorum of independent masters (no
    /// replication between them): every lock lives on each of them and is
    /// held when a majority grants it, so it survives the loss of any
    /// minority. Give an odd number of URLs; one URL is the same as
    /// [`Client::builder`]. The same server listed twice is refused when
    /// the client connects (it would count twice toward the majority).
    ///
    /// See the README's "A quorum of independent masters" section for what
    /// this does and does not guarantee.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo() -> lockwarden::Result<()> {
    /// let client = lockwarden::Client::builder_for_masters([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .command_timeout(Duration::from_millis(100)) // per master
    /// .rejoin_delay(Duration::from_secs(60)) // >= the longest lease in use
    /// .build()
    /// .await?;
    /// let guard = client.lock("invoices")?.lock().await?;
    /// println!("token {}, valid for {:?}", guard.token(), guard.validity());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_for_masters<I, S>(urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder_from_configs(
            urls.into_iter()
                .map(|u| (redact_url(u.as_ref()), parse_url(u.as_ref())))
                .collect(),
        )
    }

    /// A builder from a fred [`Config`], for settings a URL cannot express
    /// (TLS connectors, credentials providers). lockwarden still overrides
    /// the command timeout, reconnect policy and replay settings.
    pub fn builder_from_config(config: Config) -> ClientBuilder {
        Self::builder_from_configs(vec![("the fred configuration given".into(), Ok(config))])
    }

    fn builder_from_configs(configs: Vec<(String, std::result::Result<Config, String>)>) -> ClientBuilder {
        ClientBuilder {
            configs,
            tls: TlsSettings::default(),
            prefix: String::new(),
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            command_timeout: None,
            rejoin_delay: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            fair_waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
            metric_lock_names: false,
            retry_transient_for: DEFAULT_RETRY_TRANSIENT_FOR,
            wake_patience: DEFAULT_WAKE_PATIENCE,
            min_replicas: None,
            min_aof: None,
        }
    }

    /// Connects to `url` with the default settings.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the half-built client.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::builder(url).build().await
    }

    /// A handle on the lock `name` (the key is the client's prefix + `name`).
    /// Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name, one longer than 512 bytes
    /// with the prefix, one with control characters, or braces that do not
    /// form one non-empty `{hash tag}`.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        let keys = LockKeys::new(&self.inner.settings.prefix, name)?;
        Ok(Lock::new(self.inner.clone(), Arc::new(keys)))
    }

    /// A handle on the fair lock `name`: waiters get it in the order they
    /// asked for it, and an unlock wakes only the next one. Same API and
    /// guarantees as [`Client::lock`]; use one kind per name (a non-fair
    /// acquire ignores the queue). Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    pub fn fair_lock(&self, name: &str) -> Result<Lock> {
        let mut keys = LockKeys::new(&self.inner.settings.prefix, name)?;
        keys.kind = crate::keys::Kind::Fair;
        Ok(Lock::new(self.inner.clone(), Arc::new(keys)))
    }

    /// A handle on the read-write lock `name`: many readers or one writer
    /// (see [`RwLock`](crate::RwLock) for the rules). Its
    /// [`read`](crate::RwLock::read) and [`write`](crate::RwLock::write)
    /// sides are [`Lock`] handles with the usual verbs and guards. Use one
    /// kind per name: a plain lock and a read-write lock of one name do not
    /// exclude each other reliably. Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    pub fn rw_lock(&self, name: &str) -> Result<crate::rw_lock::RwLock> {
        let keys = LockKeys::new(&self.inner.settings.prefix, name)?;
        Ok(crate::rw_lock::RwLock::new(self.inner.clone(), keys))
    }

    /// A handle on the locks `names` taken together, all of them or none
    /// (see [`MultiLock`](crate::MultiLock)): each is the reentrant lock of
    /// that name, as [`Client::lock`] gives it. Creating it talks to no
    /// server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`] for each name; [`Error::InvalidName`] for no
    /// name at all.
    pub fn multi_lock<S: AsRef<str>>(&self, names: &[S]) -> Result<crate::multi_lock::MultiLock> {
        if names.is_empty() {
            return Err(Error::InvalidName {
                name: String::new(),
                reason: "a multi-lock needs at least one name",
            });
        }
        let locks = names
            .iter()
            .map(|n| self.lock(n.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(crate::multi_lock::MultiLock::new(locks))
    }

    /// A handle on the semaphore `name` with `permits` permits, whose holds
    /// expire (see [`Semaphore`](crate::Semaphore)). Creating it talks to no
    /// server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`]; [`Error::Config`] for 0 permits, or on a client
    /// over a quorum of independent masters: a majority of masters does not
    /// bound a count (with 5 masters and 2 permits, three holders can each
    /// be granted by a different majority), so the semaphore is not safe
    /// there.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<crate::semaphore::Semaphore> {
        if permits == 0 {
            return Err(Error::Config(format!("semaphore {name:?} needs at least one permit")));
        }
        if self.inner.members.len() > 1 {
            return Err(Error::Config(format!(
                "semaphore {name:?}: a counting semaphore is not safe over a quorum of independent masters \
                 (a majority does not bound a count); use one server, Sentinel or Cluster"
            )));
        }
        let keys = LockKeys::new(&self.inner.settings.prefix, name)?;
        Ok(crate::semaphore::Semaphore::new(self.inner.clone(), keys, permits))
    }

    /// Snapshots of every lock under this client's key prefix whose name
    /// matches the Redis-style glob `pattern` (`*`, `?`), of every kind:
    /// found through their fencing-token keys (every lock whose write side
    /// was ever taken has one) and through the lock hashes held now (read
    /// holds and semaphores, which take no token). `SCAN` runs on the
    /// server (Standalone, Sentinel's master), on every primary of a
    /// cluster, and on every master of a quorum (a majority must answer;
    /// each lock's status is then the quorum's view, as
    /// [`Lock::status`](crate::Lock::status)). Each status is read with its
    /// own call after the scan: a lock taken or freed meanwhile may or may
    /// not be listed. Locks whose key now holds another type are skipped.
    ///
    /// # Errors
    ///
    /// Redis errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn locks(&self, pattern: &str) -> Result<Vec<crate::status::LockStatus>> {
        let prefix = &self.inner.settings.prefix;
        let token_keys = format!("{}:*:token", crate::keys::NAMESPACE);
        // The prefix's own glob characters are escaped: only the name is a
        // pattern.
        let mut hashes = String::new();
        for c in prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                hashes.push('\\');
            }
            hashes.push(c);
        }
        hashes.push('*');
        let scans = futures::future::join_all(self.inner.members.iter().map(|m| async {
            let tokens = m.node.scan(&token_keys, None).await?;
            let held = m.node.scan(&hashes, Some("hash")).await?;
            Ok::<_, Error>((tokens, held))
        }))
        .await;
        let n = scans.len();
        let (mut tokens, mut held) = (Vec::new(), Vec::new());
        let mut errors = Vec::new();
        for r in scans {
            match r {
                Ok((t, h)) => {
                    tokens.extend(t);
                    held.extend(h);
                }
                Err(e) => errors.push(e),
            }
        }
        if n - errors.len() < crate::quorum::majority(n) {
            return Err(crate::quorum::quorum_error("list", n, n - errors.len(), errors));
        }
        let of_prefix = |key: &str| key.strip_prefix(prefix.as_str()).map(str::to_string);
        let matching = |name: &String| crate::status::glob_match(pattern, name);
        let mut names: Vec<(String, bool)> = tokens
            .iter()
            .filter_map(|k| crate::keys::lock_key_of_token(k))
            .filter_map(|key| of_prefix(&key))
            .filter(matching)
            .map(|name| (name, true))
            .collect();
        // A hash is listed only when it is a lockwarden lock's (`:kind`).
        names.extend(
            held.iter()
                .filter_map(|key| of_prefix(key))
                .filter(matching)
                .map(|name| (name, false)),
        );
        names.sort();
        names.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 |= b.1;
            }
            same
        });
        let mut out = Vec::with_capacity(names.len());
        for (name, ever_taken) in names {
            match self.lock(&name) {
                Ok(lock) => match lock.status().await {
                    Ok(s) if ever_taken || s.kind.is_some() => out.push(s),
                    Ok(_) | Err(Error::WrongType { .. }) => {}
                    Err(e) => return Err(e),
                },
                Err(_) => continue,
            }
        }
        Ok(out)
    }

    /// A new owner, distinct from every task's, to share one hold between
    /// several tasks (see [`Lock::with_owner`]).
    pub fn new_owner(&self) -> Owner {
        self.inner.owners.fresh()
    }

    /// This client's UUID, the first part of every owner field it writes.
    pub fn id(&self) -> &str {
        &self.inner.uuid
    }

    /// The watchdog lease of this client.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.settings.watchdog_lease
    }

    /// The underlying fred client of the first master, for commands
    /// lockwarden does not wrap.
    pub fn redis(&self) -> &fred::clients::Client {
        &self.inner.first().client
    }

    /// The fred clients of every master, in the order given.
    pub fn masters(&self) -> Vec<&fred::clients::Client> {
        self.inner.members.iter().map(|m| &m.node.client).collect()
    }

    /// How many locks this client holds right now (distinct lock and owner
    /// pairs, whatever their reentry depth).
    pub fn held_locks(&self) -> usize {
        self.inner.holds.len()
    }

    /// How many lock channels this client is subscribed to or subscribing to
    /// for its waiters right now.
    pub fn waiting_channels(&self) -> usize {
        self.inner.pubsub.active_channels()
    }
}

#[cfg(test)]
mod tests {
    /// rustdoc lists the builder's methods in source order: the settings
    /// most users need come first (the page a newcomer reads top down).
    #[test]
    fn the_builder_page_starts_with_the_common_settings() {
        let source = include_str!("client.rs");
        let body = source.split("impl ClientBuilder {").nth(1).expect("the builder's impl");
        let methods: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("    pub fn ").or_else(|| l.strip_prefix("    pub async fn ")))
            .filter_map(|l| l.split('(').next())
            .collect();
        assert_eq!(methods[..4], ["key_prefix", "watchdog_lease", "command_timeout", "connect_timeout"]);
    }
}
