//! The client: connections, scripts, the subscriber and the watchdog.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Config;

use crate::connect::{parse_url, redact_url};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::Names;
use crate::lock::{Kind, Lock};
use crate::owner::{Owner, Owners};
use crate::pubsub::PubSub;
use crate::settings::Options;
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
    /// Every other setting, checked by [`Options::check`].
    options: Options,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masters: Vec<&str> = self.configs.iter().map(|(url, _)| url.as_str()).collect();
        f.debug_struct("ClientBuilder")
            .field("masters", &masters)
            .field("prefix", &self.options.prefix)
            .field("watchdog_lease", &self.options.watchdog_lease)
            .field("command_timeout", &self.options.command_timeout)
            .field("connect_timeout", &self.options.connect_timeout)
            .field("tls_ca", &self.tls.ca_pem.is_some())
            .field("tls_client_cert", &self.tls.client_pem.is_some())
            .field("min_replicas_acked", &self.options.min_replicas)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Prefix put before every lock name to form its key. Defaults to `""`
    /// (the key is the lock name, as in Redisson).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// Lease of locks taken without an explicit lease, renewed every lease/3
    /// while held. Defaults to 30 s; must be within 100 ms ..= 30 days.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.options.watchdog_lease = lease;
        self
    }

    /// Time allowed to each Redis call on each master (one script run,
    /// including its retries after a broken connection). Defaults to 3 s
    /// with one master and to [`DEFAULT_NODE_TIMEOUT`](crate::DEFAULT_NODE_TIMEOUT) (250 ms) with a quorum,
    /// where it is the per-node timeout: keep it well below the leases.
    /// Must be within 1 ms ..= 30 days. A call to an unreachable server
    /// fails after it.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.options.command_timeout = Some(timeout);
        self
    }

    /// Time allowed to open a connection. Defaults to 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
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
    /// [`DEFAULT_RETRY_TRANSIENT_FOR`](crate::DEFAULT_RETRY_TRANSIENT_FOR) (10 s); zero returns the first error.
    /// Must be at most 30 days.
    pub fn retry_transient_for(mut self, limit: Duration) -> Self {
        self.options.retry_transient_for = limit;
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
    /// watchdog lease. Off by default. Direct grants of the fair and
    /// reentrant locks (an unlock handing the lock to the next waiter) are
    /// not used with it: the waiter takes the lock itself and waits for its
    /// acknowledgement.
    pub fn min_replicas_acked(mut self, n: u32, timeout: Duration) -> Self {
        self.options.min_replicas = Some((n, timeout));
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
    /// fair and reentrant locks' direct grants are not used with it.
    pub fn min_aof_fsynced(mut self, local: bool, replicas: u32, timeout: Duration) -> Self {
        self.options.min_aof = Some(crate::node::AofConfirm {
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
    /// attempt, and a waiting reader's mark (made a pass by a write
    /// release) holds the next writer back (each makes an attempt every
    /// third of it). Reentrant locks: the
    /// longest first lease of a direct grant to this client's waits (an
    /// unlock hands the lock to a waiting client with one wait on the lock,
    /// on one master), so a waiter stopped at that moment blocks the lock
    /// no longer than this; a live one sets its own lease a third of the
    /// way in.
    pub fn fair_waiter_timeout(mut self, timeout: Duration) -> Self {
        self.options.fair_waiter_timeout = timeout;
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
    /// Defaults to [`DEFAULT_WAKE_PATIENCE`](crate::DEFAULT_WAKE_PATIENCE) (1 s); at least 1 ms, at most
    /// 30 days. Only the reentrant lock and the semaphore wake one client
    /// per unlock (the semaphore one per permit freed): the fair lock and
    /// the read-write lock's waits look again every third of
    /// [`fair_waiter_timeout`](Self::fair_waiter_timeout), and waiting
    /// readers are woken in every client.
    pub fn wake_patience(mut self, patience: Duration) -> Self {
        self.options.wake_patience = patience;
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
        self.options.rejoin_delay = Some(delay);
        self
    }

    /// Label metrics with the lock's name (`lock="..."`). Defaults to off:
    /// one time series per lock name can be too many for a metrics backend,
    /// and names may be sensitive.
    pub fn metric_lock_names(mut self, on: bool) -> Self {
        self.options.metric_lock_names = on;
        self
    }

    /// Takes the locks of [`Client::lock`] (and of multi-locks),
    /// [`Client::fair_lock`], [`Client::rw_lock`] and the semaphores of
    /// [`Client::semaphore`] in Redisson's layout, so that Java services
    /// using Redisson's `RLock` (or `RFencedLock`), `RFairLock`,
    /// `RReadWriteLock`, `RSemaphore` or `RPermitExpirableSemaphore` and
    /// this client share
    /// names: they exclude each other (or count one set of permits), each
    /// wakes the other's waiters when it releases (on Redisson's channels),
    /// and fencing tokens come from Redisson's counter
    /// (`redisson_lock_token:{name}`). Off by default. The fair semaphore
    /// (Redisson has none) keeps lockwarden's layout, which a Redisson
    /// client never takes while held; the
    /// README's "Beside Redisson" has the table. One deployment (a server,
    /// Sentinel or a cluster): `build()` refuses it over a quorum. On a
    /// cluster the wake-ups go by sharded pub/sub (`SPUBLISH`), as
    /// Redisson's do there by default on Redis 7 (its
    /// `shardedSubscriptionMode` `AUTO`).
    pub fn redisson_compatible(mut self, on: bool) -> Self {
        self.options.redisson_compatible = on;
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
        let give_up = start.checked_add(self.options.retry_transient_for).unwrap_or(start);
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
        let settings = self.options.check(n)?;
        let command_timeout = settings.command_timeout;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Config("a client must be built inside a tokio runtime".into()))?;
        let spawner = crate::runtime::Spawner::new(runtime.clone());

        let opened = crate::connect::open(configs, shown, &self.options, &settings, &runtime, &spawner).await?;
        let uuid = uuid::Uuid::new_v4().to_string();
        let inner = Core {
            owners: Arc::new(Owners::new(uuid.clone())),
            holds: Holds::new(&uuid),
            waiting_gauge: crate::observe::ClientGauge::waiting(&uuid),
            uuid,
            members: opened.members,
            pubsub: PubSub::new(opened.subscribers, spawner.clone(), command_timeout),
            settings,
            spawner,
            sentinel_watchers: opened.sentinel_watchers,
            grants: Default::default(),
        }
        .start();
        tracing::debug!(client = %inner.uuid, "lockwarden client connected");
        Ok(Client { inner })
    }
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
            options: Options::default(),
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
    ///
    /// With [`ClientBuilder::redisson_compatible`], the lock is
    /// [`Client::redisson_lock`]'s.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        if self.inner.settings.redisson_compatible {
            return self.redisson_lock(name);
        }
        let names = Names::new(&self.inner.settings.prefix, name)?;
        Ok(Lock::new(self.inner.clone(), names, Kind::Reentrant))
    }

    /// A handle on the lock `name` in Redisson's layout, shared with Java
    /// services using Redisson's `RLock` or `RFencedLock` (and its ports)
    /// on the same name: they exclude each other, each side's unlock wakes
    /// the other's waiters, each keeps its own reentry count, and fencing
    /// tokens come from one counter (README, "Beside Redisson"). Same API
    /// and guarantees as [`Client::lock`]; the waiters of a name all wake
    /// on an unlock and one gets it. Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`]; [`Error::Config`] over a quorum of masters
    /// (Redisson's lock lives on one deployment).
    pub fn redisson_lock(&self, name: &str) -> Result<Lock> {
        let names = self.redisson_names("lock", name)?;
        Ok(Lock::new(self.inner.clone(), names, Kind::Redisson))
    }

    /// The names of `name` for a kind in Redisson's layout, after the
    /// checks every such kind shares: one deployment (a server, Sentinel
    /// or a cluster), not a quorum.
    fn redisson_names(&self, kind: &str, name: &str) -> Result<Names> {
        if self.inner.members.len() > 1 {
            return Err(Error::Config(format!(
                "Redisson-compatible {kind} {name:?}: Redisson's {kind} lives on one deployment; a quorum of \
                 independent masters has no Redisson layout to share (use one server, Sentinel or a cluster)"
            )));
        }
        Names::new(&self.inner.settings.prefix, name)
    }

    /// A handle on the fair lock `name`: waiters get it in the order they
    /// asked for it, and an unlock wakes only the next one. Same API and
    /// guarantees as [`Client::lock`]; use one kind per name (a non-fair
    /// acquire ignores the queue). Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`].
    ///
    /// With [`ClientBuilder::redisson_compatible`], the lock is
    /// [`Client::redisson_fair_lock`]'s.
    pub fn fair_lock(&self, name: &str) -> Result<Lock> {
        if self.inner.settings.redisson_compatible {
            return self.redisson_fair_lock(name);
        }
        let names = Names::new(&self.inner.settings.prefix, name)?;
        Ok(Lock::new(self.inner.clone(), names, Kind::Fair))
    }

    /// A handle on the fair lock `name` in Redisson's layout, shared with
    /// Java services using Redisson's `RFairLock` on the same name: one
    /// queue, served in order across both libraries; an unlock wakes only
    /// the head, on its own channel (`redisson_lock__channel:{name}:<owner>`).
    /// Same API and guarantees as [`Client::fair_lock`] but for Redisson's
    /// queue rules: a waiter that stops waiting without leaving (a process
    /// killed) keeps its place until Redisson's thread wait time (5
    /// minutes past the waiter before it) passes, and a free lock is
    /// handed over by message, not by a direct grant (README, "Beside
    /// Redisson"). Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::redisson_lock`].
    pub fn redisson_fair_lock(&self, name: &str) -> Result<Lock> {
        let names = self.redisson_names("fair lock", name)?;
        Ok(Lock::new(self.inner.clone(), names, Kind::RedissonFair))
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
    ///
    /// With [`ClientBuilder::redisson_compatible`], the lock is
    /// [`Client::redisson_rw_lock`]'s.
    pub fn rw_lock(&self, name: &str) -> Result<crate::rw_lock::RwLock> {
        if self.inner.settings.redisson_compatible {
            return self.redisson_rw_lock(name);
        }
        let names = Names::new(&self.inner.settings.prefix, name)?;
        Ok(crate::rw_lock::RwLock::new(self.inner.clone(), names))
    }

    /// A handle on the read-write lock `name` in Redisson's layout, shared
    /// with Java services using Redisson's `RReadWriteLock` on the same
    /// name: many readers or one writer across both libraries, each side's
    /// release wakes the other's waiters (Redisson's
    /// `redisson_rwlock:{name}`), each keeps its own reentry counts. Same
    /// API and guarantees as [`Client::rw_lock`] but for two of Redisson's
    /// rules: no writer preference (a stream of readers can keep a writer
    /// waiting, as in Redisson) and every waiter of the name wakes on a
    /// release (README, "Beside Redisson"). Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::redisson_lock`].
    pub fn redisson_rw_lock(&self, name: &str) -> Result<crate::rw_lock::RwLock> {
        let names = self.redisson_names("read-write lock", name)?;
        Ok(crate::rw_lock::RwLock::redisson(self.inner.clone(), names))
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
    ///
    /// With [`ClientBuilder::redisson_compatible`], the semaphore is
    /// [`Client::redisson_semaphore`]'s.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<crate::semaphore::Semaphore> {
        if self.inner.settings.redisson_compatible {
            return self.redisson_semaphore(name, permits);
        }
        self.semaphore_of(name, permits, false)
    }

    /// A handle on the semaphore `name` in Redisson's layout, shared with
    /// Java services using Redisson's `RSemaphore` or
    /// `RPermitExpirableSemaphore` on the same name: one count of free
    /// permits (Redisson's counter at the name), which every side takes
    /// from and gives back to; each side's release wakes the other's
    /// waiters (Redisson's `redisson_sc:{name}`). Each acquisition here is
    /// recorded as Redisson's expiring permits are (its id scored with its
    /// deadline in `{name}:timeout`), so a dead holder's permits come back
    /// when its lease ends, whichever library takes next. With no counter
    /// yet, the first acquisition sets it to `permits` (as Redisson's
    /// `trySetPermits` would). Same verbs as [`Client::semaphore`]; the
    /// README's "Beside Redisson" says what differs (deadlines on the
    /// server's clock here, the client's in Redisson). Creating it talks to
    /// no server.
    ///
    /// # Errors
    ///
    /// As [`Client::semaphore`].
    pub fn redisson_semaphore(&self, name: &str, permits: u32) -> Result<crate::semaphore::Semaphore> {
        let names = self.semaphore_names(name, permits)?;
        self.redisson_names("semaphore", name)?;
        Ok(crate::semaphore::Semaphore::redisson(
            self.inner.clone(),
            names,
            permits,
        ))
    }

    /// A semaphore handle, plain or fair, after the checks both share.
    fn semaphore_of(&self, name: &str, permits: u32, fair: bool) -> Result<crate::semaphore::Semaphore> {
        let keys = self.semaphore_names(name, permits)?;
        Ok(crate::semaphore::Semaphore::new(
            self.inner.clone(),
            keys,
            permits,
            fair,
        ))
    }

    /// The names of the semaphore `name`, after the checks every
    /// semaphore's handle shares.
    fn semaphore_names(&self, name: &str, permits: u32) -> Result<Names> {
        if permits == 0 {
            return Err(Error::Config(format!("semaphore {name:?} needs at least one permit")));
        }
        if self.inner.members.len() > 1 {
            return Err(Error::Config(format!(
                "semaphore {name:?}: a counting semaphore is not safe over a quorum of independent masters \
                 (a majority does not bound a count); use one server, Sentinel or Cluster"
            )));
        }
        Names::new(&self.inner.settings.prefix, name)
    }

    /// A handle on the fair semaphore `name` with `permits` permits: a
    /// [`Semaphore`](crate::Semaphore) (same verbs, same expiring permits)
    /// whose permits go to waiters in the order they asked, none barging
    /// ahead: waiters queue as the fair lock's do, a release hands the
    /// permits straight to the head of the queue (one message, no further
    /// round trip), and a waiter that dies leaves the queue at its waiter
    /// timeout. One name is one kind: a fair semaphore and a semaphore
    /// never share a name. Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::semaphore`].
    pub fn fair_semaphore(&self, name: &str, permits: u32) -> Result<crate::semaphore::Semaphore> {
        self.semaphore_of(name, permits, true)
    }

    /// A handle on the election `name`: campaign to lead it, ask who
    /// leads, follow the leaders as they change (see
    /// [`Election`](crate::Election)). Its leader holds the reentrant lock
    /// `name` (its key, its token counter), so use the name for the
    /// election only. Creating it talks to no server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`]; [`Error::Config`] on a client over a quorum of
    /// independent masters: the leader's value and the log its observers
    /// follow live on one master.
    pub fn election(&self, name: &str) -> Result<crate::election::Election> {
        if self.inner.members.len() > 1 {
            return Err(Error::Config(format!(
                "election {name:?}: not available over a quorum of independent masters (the leader's value and \
                 its log live on one master); use one server, Sentinel or Cluster"
            )));
        }
        let names = Names::new(&self.inner.settings.prefix, name)?;
        Ok(crate::election::Election::new(self.inner.clone(), names))
    }

    /// A handle on the count-down latch `name` (see
    /// [`CountDownLatch`](crate::CountDownLatch)). Creating it talks to no
    /// server.
    ///
    /// # Errors
    ///
    /// As [`Client::lock`]; [`Error::Config`] on a client over a quorum of
    /// independent masters (a count has no majority rule there).
    pub fn count_down_latch(&self, name: &str) -> Result<crate::latch::CountDownLatch> {
        if self.inner.members.len() > 1 {
            return Err(Error::Config(format!(
                "count-down latch {name:?}: not available over a quorum of independent masters (a count has no \
                 majority rule); use one server, Sentinel or Cluster"
            )));
        }
        let names = Names::new(&self.inner.settings.prefix, name)?;
        Ok(crate::latch::CountDownLatch::new(self.inner.clone(), names))
    }

    /// Snapshots of every lock under this client's key prefix whose name
    /// matches the Redis-style glob `pattern` (`*`, `?`), of every kind:
    /// found through their fencing-token keys (every lock whose write side
    /// was ever taken has one) and through the lock hashes held now (read
    /// holds and semaphores, which take no token, and a Redisson
    /// semaphore's set of expiring permits). `SCAN` runs on the
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
            let mut held = m.node.scan(&hashes, Some("hash")).await?;
            // Redisson semaphores, through their sets of expiring permits.
            let sets = m.node.scan("*:timeout", Some("zset")).await?;
            held.extend(sets.iter().filter_map(|k| crate::keys::name_of_redisson_timeouts(k)));
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
        if n - errors.len() < crate::fanout::majority(n) {
            return Err(crate::fanout::quorum_error("list", n, n - errors.len(), errors));
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
            .filter_map(|l| {
                l.strip_prefix("    pub fn ")
                    .or_else(|| l.strip_prefix("    pub async fn "))
            })
            .filter_map(|l| l.split('(').next())
            .collect();
        assert_eq!(
            methods[..4],
            ["key_prefix", "watchdog_lease", "command_timeout", "connect_timeout"]
        );
    }
}
