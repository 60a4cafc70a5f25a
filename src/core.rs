//! The shared core of a client: its masters, subscriber, owners, holds and
//! settings, below the public types (`Lock`, `LockGuard`, `Client`) that
//! share it. It starts the background tasks (renewals, lease extensions) and
//! closes the connections when the last user is gone.

use std::sync::Arc;

use fred::prelude::ClientLike;

use crate::member::Member;
use crate::node::Node;
use crate::owner::Owners;
use crate::pubsub::PubSub;
use crate::runtime::Spawner;
use crate::settings::Settings;
use crate::watchdog::{Holds, Renewing};

/// What a client's handles share (see the module docs).
pub(crate) struct Core {
    pub(crate) uuid: String,
    /// The masters: one, or an odd number forming a quorum.
    pub(crate) members: Vec<Arc<Member>>,
    pub(crate) pubsub: Arc<PubSub>,
    pub(crate) owners: Arc<Owners>,
    pub(crate) holds: Holds,
    /// The client's `lockwarden_waiting_tasks`.
    pub(crate) waiting_gauge: crate::observe::ClientGauge,
    pub(crate) settings: Settings,
    pub(crate) spawner: Spawner,
    /// Connections to the sentinels of masters reached through Sentinel.
    pub(crate) sentinel_watchers: Vec<fred::clients::SubscriberClient>,
    /// Direct grants: the wake numbers of grant-asking waiters and the
    /// lease extensions of directly granted holds (see [`crate::extend`]).
    pub(crate) grants: crate::extend::DirectGrants,
}

impl Core {
    /// The first master (the only one without a quorum).
    pub(crate) fn first(&self) -> &Node {
        &self.members[0].node
    }

    /// Where background work (release after drop or cancel) is spawned:
    /// the current runtime, else the one the client was built on.
    pub(crate) fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    /// What the renewal tasks (and a guard's extension) need of the core.
    pub(crate) fn renewing(&self) -> Renewing<'_> {
        Renewing {
            holds: &self.holds,
            members: &self.members,
            settings: &self.settings,
        }
    }

    /// Shares the core and starts its background tasks on the client's
    /// runtime: the watchdog (a tick every lease/3) and the lease extensions
    /// of direct grants. Both end when the last user of the core is gone.
    pub(crate) fn start(self) -> Arc<Core> {
        let core = Arc::new(self);
        let runtime = core.spawner.client_runtime();
        let period = core.settings.watchdog_lease / 3;
        runtime.spawn(crate::watchdog::run(Arc::downgrade(&core), period, Core::renewing));
        runtime.spawn(crate::extend::run(
            Arc::downgrade(&core),
            core.grants.extensions.clone(),
            Core::renewing,
            core.spawner.clone(),
        ));
        core
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        let clients: Vec<_> = self.members.iter().map(|m| m.node.client.clone()).collect();
        let pubsub = self.pubsub.clone();
        let watchers = std::mem::take(&mut self.sentinel_watchers);
        // Closing is async; never block in drop.
        self.spawner().spawn(async move {
            crate::sentinel::quit(&watchers).await;
            // Subscribers first, and wake-ups they may have got passed on
            // while the command connections are still open.
            pubsub.quit_passing_on().await;
            for client in clients {
                let _ = client.quit().await;
            }
        });
    }
}
