//! Connecting: URLs (parsed, and shown without credentials), each master's
//! connections opened, and the checks made once at build time (a server
//! given twice, channel rights, WAITAOF support); then the scripts loaded.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::{Builder, ClientLike, Config, EventInterface, ReconnectPolicy, TcpConfig};

use crate::error::{Error, Result};
use crate::keys::Names;
use crate::member::Member;
use crate::node::Node;
use crate::runtime::Spawner;
use crate::settings::{Options, Settings};

/// The masters, connected and checked.
pub(crate) struct Opened {
    pub(crate) members: Vec<Arc<Member>>,
    /// Each master's subscriber, for the client's pub/sub.
    pub(crate) subscribers: Vec<SubscriberClient>,
    /// The connections following Sentinel's master switches.
    pub(crate) sentinel_watchers: Vec<SubscriberClient>,
}

/// Opens every master (`shown`: their URLs without credentials, for
/// messages) and checks them: the client is usable once a majority is up;
/// masters still connecting join in the background.
pub(crate) async fn open(
    configs: Vec<Config>,
    shown: Vec<String>,
    options: &Options,
    settings: &Settings,
    runtime: &tokio::runtime::Handle,
    spawner: &Spawner,
) -> Result<Opened> {
    let command_timeout = settings.command_timeout;
    let n = configs.len();
    let quorum = n > 1;
    let mut clients = Vec::with_capacity(n);
    let mut subscribers = Vec::with_capacity(n);
    for config in &configs {
        let (client, sub) = master_clients(config.clone(), options.connect_timeout, command_timeout, quorum)?;
        clients.push(client);
        subscribers.push(sub);
    }
    let connecting = clients
        .iter()
        .zip(&subscribers)
        .map(|(client, sub)| bring_up(client.clone(), sub.clone(), options.connect_timeout, quorum))
        .collect();
    let connected = crate::fanout::majority_then_grace(connecting, Result::is_ok, command_timeout, spawner).await;
    let up = connected.iter().filter(|r| matches!(r, Some(Ok(())))).count();
    if up < crate::fanout::majority(n) {
        let errors = connected
            .into_iter()
            .zip(&shown)
            .filter_map(|(r, url)| match r {
                Some(Ok(())) => None,
                failed => Some(named(url, failed.and_then(Result::err), options.connect_timeout)),
            })
            .collect();
        return Err(crate::fanout::quorum_error("connect", n, up, errors));
    }
    let sentinel_watchers = configs
        .iter()
        .zip(clients.iter().zip(&subscribers))
        .flat_map(|(config, (client, sub))| crate::sentinel::watch(config, client, sub, runtime))
        .collect();
    let members = members(clients, &shown, options, settings, spawner);
    check(&members, options, quorum).await?;
    // Loading is an optimisation (a call falls back to EVAL on
    // NOSCRIPT): masters slow to answer finish it in the background.
    let loads = members
        .iter()
        .map(|m| {
            let m = m.clone();
            async move { m.node.load_scripts().await }
        })
        .collect();
    crate::fanout::majority_then_grace(loads, |_| true, command_timeout, spawner).await;
    if options.rejoin_delay.is_some() {
        suspect_on_reconnect(&members, runtime);
    }
    Ok(Opened {
        members,
        subscribers,
        sentinel_watchers,
    })
}

/// The failure to connect to the master at `url` (`None`: no answer in
/// time), in a message that names it (without credentials) and, where a
/// wrong scheme is likely, says which to use.
fn named(url: &str, failure: Option<Error>, connect_timeout: Duration) -> Error {
    match failure {
        Some(Error::Connection { op, message }) => Error::Connection {
            op,
            message: format!("{url}: {message}{}", plain_on_tls_hint(url, &message)),
        },
        Some(Error::Tls { op, message }) => Error::Tls {
            op,
            message: format!("{url}: {message}"),
        },
        Some(Error::Redis { op, kind, message }) => Error::Redis {
            op,
            kind,
            message: format!("{url}: {message}"),
        },
        // A TLS client waits for the server's half of the handshake, which
        // a plain port never sends.
        Some(Error::Timeout { .. }) | None if uses_tls(url) => Error::Connection {
            op: "connect",
            message: format!(
                "{url}: no answer to the TLS handshake within {connect_timeout:?}; if that port is a plain one \
                 (not TLS), use redis://"
            ),
        },
        Some(Error::Timeout { .. }) | None => Error::Connection {
            op: "connect",
            message: format!(
                "{url}: no answer within {connect_timeout:?}; check that the server is up and the address right"
            ),
        },
        Some(e) => e,
    }
}

/// One [`Member`] per master's client, with the settings of its node.
fn members(
    clients: Vec<fred::clients::Client>,
    shown: &[String],
    options: &Options,
    settings: &Settings,
    spawner: &Spawner,
) -> Vec<Arc<Member>> {
    let quorum = clients.len() > 1;
    clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let node = Node {
                client,
                command_timeout: settings.command_timeout,
                record_ttl: settings.record_ttl,
                waiter_timeout: settings.waiter_timeout,
                confirm: crate::node::Confirm {
                    replicas: options.min_replicas,
                    aof: options.min_aof,
                },
                batch: Default::default(),
                server: shown[i].as_str().into(),
            };
            Arc::new(Member::new(node, i, options.rejoin_delay, quorum, spawner.clone()))
        })
        .collect()
}

/// The checks made once at build time.
async fn check(members: &[Arc<Member>], options: &Options, quorum: bool) -> Result<()> {
    let (masters_checked, channels_checked) = futures::future::join(
        async {
            if quorum || options.rejoin_delay.is_some() {
                check_masters(members).await
            } else {
                Ok(())
            }
        },
        check_channel_rights(members, &options.prefix),
    )
    .await;
    masters_checked?;
    channels_checked?;
    check_aof_support(members).await
}

/// A re-opened connection may lead to a restarted, empty master: it is
/// suspected (kept out of the majority until its uptime is checked).
fn suspect_on_reconnect(members: &[Arc<Member>], runtime: &tokio::runtime::Handle) {
    for m in members {
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
            server: String::new(),
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
    let probe = Names::new(prefix, "lockwarden-connect-check")?.channel;
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
/// the node timeout) has passed (see `fanout::majority_then_grace`).
async fn ask_masters<T, F, Fut>(members: &[Arc<Member>], ask: F) -> Vec<Option<Result<T>>>
where
    F: Fn(Arc<Member>) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let asks = members.iter().map(|m| ask(m.clone())).collect();
    let grace = members[0].node.command_timeout;
    crate::fanout::majority_then_grace(
        asks,
        Result::is_ok,
        grace,
        crate::member::NodeOps::spawner(&*members[0]),
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

pub(crate) fn parse_url(url: &str) -> std::result::Result<Config, String> {
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
