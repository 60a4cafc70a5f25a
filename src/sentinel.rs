//! Following a Sentinel failover at once.
//!
//! fred asks a sentinel for the master's address only when it (re)connects,
//! and it does not listen for `+switch-master` (fred 10.1). After a failover
//! it keeps writing to the demoted master until that one drops its clients,
//! about 10 s in the test, and locks taken there in the meantime are lost
//! when it turns into a replica. So for a master reached through Sentinel,
//! lockwarden subscribes to `+switch-master` on every sentinel, and when one
//! names this master's service it reconnects the master's command and
//! subscriber connections. On reconnecting, fred asks a sentinel again and
//! finds the new master; the subscriber subscribes every waiting channel
//! again and wakes its waiters.

use fred::clients::{Client as FredClient, SubscriberClient};
use fred::prelude::{Builder, ClientLike, Config, EventInterface, PubsubInterface, ReconnectPolicy, ServerConfig};
use tokio::sync::broadcast::error::RecvError;

/// The channel on which sentinels announce a new master.
const SWITCH_MASTER: &str = "+switch-master";

/// Starts one watcher per sentinel of `config`, if it is a Sentinel
/// configuration; returns their connections, to be closed with the client.
/// A sentinel that is down now is retried in the background; it never fails
/// the caller.
pub(crate) fn watch(
    config: &Config,
    master: &FredClient,
    subscriber: &SubscriberClient,
    runtime: &tokio::runtime::Handle,
) -> Vec<SubscriberClient> {
    let ServerConfig::Sentinel {
        hosts, service_name, ..
    } = &config.server
    else {
        return Vec::new();
    };
    let mut watchers = Vec::with_capacity(hosts.len());
    for host in hosts {
        let config = Config {
            server: ServerConfig::Centralized { server: host.clone() },
            // A TLS deployment's sentinels speak TLS too.
            #[cfg(feature = "tls")]
            tls: config.tls.clone(),
            ..Default::default()
        };
        let watcher = match Builder::from_config(config)
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2))
            .build_subscriber_client()
        {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(sentinel = %host, error = %e, "cannot watch this sentinel for failovers");
                continue;
            }
        };
        // The reconnect event also fires on the first connection.
        let (messages, reconnects) = (watcher.message_rx(), watcher.reconnect_rx());
        drop(watcher.connect());
        runtime.spawn(follow(
            watcher.clone(),
            messages,
            reconnects,
            service_name.clone(),
            master.clone(),
            subscriber.clone(),
        ));
        watchers.push(watcher);
    }
    watchers
}

/// Closes the watchers' connections; their tasks end with them.
pub(crate) async fn quit(watchers: &[SubscriberClient]) {
    for w in watchers {
        let _ = w.quit().await;
    }
}

async fn follow(
    watcher: SubscriberClient,
    mut messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
    mut reconnects: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
    service: String,
    master: FredClient,
    subscriber: SubscriberClient,
) {
    let mine = format!("{service} ");
    loop {
        tokio::select! {
            r = reconnects.recv() => match r {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if let Err(e) = watcher.subscribe(SWITCH_MASTER).await {
                        tracing::debug!(error = %e, "subscribing to a sentinel's failover announcements failed");
                    }
                }
                Err(RecvError::Closed) => return,
            },
            m = messages.recv() => {
                let switched = match m {
                    Ok(msg) => {
                        &*msg.channel == SWITCH_MASTER
                            && msg.value.as_str().is_some_and(|v| v.starts_with(&mine))
                    }
                    // Announcements may have been missed: reconnecting is harmless.
                    Err(RecvError::Lagged(_)) => true,
                    Err(RecvError::Closed) => return,
                };
                if switched {
                    tracing::info!(service = %service, "sentinel announced a new master; reconnecting to it");
                    let (a, b) = futures::join!(master.force_reconnection(), subscriber.force_reconnection());
                    if let Err(e) = a.and(b) {
                        tracing::warn!(error = %e, "reconnecting after a sentinel failover failed; fred keeps retrying");
                    }
                }
            }
        }
    }
}
