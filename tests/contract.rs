//! The contract matrix: the promises every kind keeps, checked for every
//! kind (reentrant, fair, read side, write side, a semaphore's permit, a
//! multi-lock) with the watchdog and with a fixed lease, on one server and
//! the deployments each kind supports, and where kinds meet on one name.
//!
//! Each row is one promise; a kind that refuses a combination by design
//! has the refusal checked instead.
mod common;

use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, ClientBuilder, Error, Lease, LockGuard, LossReason, MultiGuard, Permit};

const BOUND: Duration = Duration::from_secs(60);

/// A kind of hold, as users take them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum K {
    Reentrant,
    Fair,
    Read,
    Write,
    Permit,
    /// A permit of a fair semaphore (`Client::fair_semaphore`).
    FairPermit,
    Multi,
    /// The plain lock in Redisson's layout (`Client::redisson_lock`).
    Redisson,
    /// A permit of a semaphore in Redisson's layout
    /// (`Client::redisson_semaphore`).
    RedissonPermit,
    /// The sides of a read-write lock in Redisson's layout
    /// (`Client::redisson_rw_lock`).
    RedissonRead,
    RedissonWrite,
    /// The fair lock in Redisson's layout (`Client::redisson_fair_lock`).
    RedissonFair,
}

const KINDS: [K; 12] = [
    K::Reentrant,
    K::Fair,
    K::Read,
    K::Write,
    K::Permit,
    K::FairPermit,
    K::Multi,
    K::Redisson,
    K::RedissonPermit,
    K::RedissonRead,
    K::RedissonWrite,
    K::RedissonFair,
];

impl K {
    /// The kind that has to wait while this one holds the name: the write
    /// side for a reader (readers share), the same kind otherwise (the
    /// semaphore has one permit).
    fn rival(self) -> K {
        match self {
            K::Read => K::Write,
            K::RedissonRead => K::RedissonWrite,
            k => k,
        }
    }

    /// Whether its holds carry a fresh fencing token (a reader carries the
    /// last writer's; a permit none).
    fn fenced(self) -> bool {
        !matches!(
            self,
            K::Read | K::Permit | K::FairPermit | K::RedissonPermit | K::RedissonRead
        )
    }

    /// The name of the kind in `Error::WrongKind`.
    fn found(self) -> &'static str {
        match self {
            K::Reentrant | K::Multi => "reentrant lock",
            K::Fair => "fair lock",
            K::Read | K::Write => "read-write lock",
            K::Permit => "semaphore",
            K::FairPermit => "fair semaphore",
            K::Redisson | K::RedissonFair => "Redisson lock",
            K::RedissonPermit => "Redisson semaphore",
            K::RedissonRead | K::RedissonWrite => "Redisson read-write lock",
        }
    }

    /// Whether the deployment refuses the kind by design: a semaphore over
    /// a quorum (a majority does not bound a count), a Redisson-compatible
    /// lock over a quorum or (for now) a cluster. Checked refusing.
    fn refused_on(self, dep: Dep) -> bool {
        match self {
            K::Permit | K::FairPermit => dep == Dep::Quorum,
            K::Redisson | K::RedissonFair | K::RedissonPermit | K::RedissonRead | K::RedissonWrite => {
                dep == Dep::Quorum
            }
            _ => false,
        }
    }
}

/// A hold of any kind.
#[derive(Debug)]
enum Held {
    G(LockGuard),
    P(Permit),
    M(MultiGuard),
}

impl Held {
    fn is_at_risk(&self) -> bool {
        match self {
            Held::G(g) => g.is_at_risk(),
            Held::P(p) => p.is_at_risk(),
            Held::M(m) => m.is_at_risk(),
        }
    }

    fn validity(&self) -> Duration {
        match self {
            Held::G(g) => g.validity(),
            Held::P(p) => p.validity(),
            Held::M(m) => m.validity(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::G(g) => g.is_lost(),
            Held::P(p) => p.is_lost(),
            Held::M(m) => m.is_lost(),
        }
    }

    async fn lost(&self) -> LossReason {
        match self {
            Held::G(g) => g.lost().await,
            Held::P(p) => p.lost().await,
            Held::M(m) => m.lost().await,
        }
    }

    async fn extend(&self, lease: Duration) -> lockwarden::Result<()> {
        match self {
            Held::G(g) => g.extend(lease).await,
            Held::P(p) => p.extend(lease).await,
            Held::M(m) => m.extend(lease).await,
        }
    }

    fn token(&self) -> u64 {
        match self {
            Held::G(g) => g.token(),
            Held::P(_) => 0,
            Held::M(m) => m.tokens().iter().map(|(_, t)| *t).min().unwrap_or(0),
        }
    }

    async fn release(self) -> lockwarden::Result<()> {
        match self {
            Held::G(g) => g.unlock().await,
            Held::P(p) => p.release().await,
            Held::M(m) => m.unlock().await,
        }
    }
}

/// The second name a multi-lock takes with `name`.
fn second(name: &str) -> String {
    format!("{name}-2")
}

/// Takes `k` on `name` (a multi-lock: `name` and [`second`]`(name)`).
async fn take(c: &Client, k: K, name: &str, wait: Duration, lease: Lease) -> lockwarden::Result<Option<Held>> {
    Ok(match k {
        K::Reentrant => c.lock(name)?.try_lock(wait, lease).await?.map(Held::G),
        K::Fair => c.fair_lock(name)?.try_lock(wait, lease).await?.map(Held::G),
        K::Read => c.rw_lock(name)?.read().try_lock(wait, lease).await?.map(Held::G),
        K::Write => c.rw_lock(name)?.write().try_lock(wait, lease).await?.map(Held::G),
        K::Permit => c.semaphore(name, 1)?.try_acquire(wait, lease).await?.map(Held::P),
        K::FairPermit => c.fair_semaphore(name, 1)?.try_acquire(wait, lease).await?.map(Held::P),
        K::Redisson => c.redisson_lock(name)?.try_lock(wait, lease).await?.map(Held::G),
        K::RedissonPermit => c
            .redisson_semaphore(name, 1)?
            .try_acquire(wait, lease)
            .await?
            .map(Held::P),
        K::RedissonFair => c.redisson_fair_lock(name)?.try_lock(wait, lease).await?.map(Held::G),
        K::RedissonRead => c
            .redisson_rw_lock(name)?
            .read()
            .try_lock(wait, lease)
            .await?
            .map(Held::G),
        K::RedissonWrite => c
            .redisson_rw_lock(name)?
            .write()
            .try_lock(wait, lease)
            .await?
            .map(Held::G),
        K::Multi => c
            .multi_lock(&[name.to_string(), second(name)])?
            .try_lock(wait, lease)
            .await?
            .map(Held::M),
    })
}

/// Where the matrix runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dep {
    /// One server.
    Single,
    /// One master with a replica, every grant and renewal confirmed by it
    /// (`min_replicas_acked`).
    Replicated,
    /// A master found through Sentinel.
    Sentinel,
    /// A cluster of three primaries.
    Cluster,
    /// A quorum of three independent masters.
    Quorum,
}

const DEPLOYMENTS: [Dep; 5] = [Dep::Single, Dep::Replicated, Dep::Sentinel, Dep::Cluster, Dep::Quorum];

/// A deployment's servers, running until dropped.
struct Setup {
    dep: Dep,
    /// The servers whose keys and channels a check reads (not replicas).
    masters: Vec<RedisServer>,
    _replica: Option<RedisServer>,
    _sentinel: Option<RedisSentinel>,
    cluster: Option<RedisCluster>,
}

impl Setup {
    fn start(dep: Dep) -> Setup {
        let mut s = Setup {
            dep,
            masters: Vec::new(),
            _replica: None,
            _sentinel: None,
            cluster: None,
        };
        match dep {
            Dep::Single => s.masters.push(RedisServer::start()),
            Dep::Replicated | Dep::Sentinel => {
                let (master, replica) = RedisServer::start_master_with_replica(None, &[]);
                if dep == Dep::Sentinel {
                    s._sentinel = Some(RedisSentinel::start(&master));
                }
                s.masters.push(master);
                s._replica = Some(replica);
            }
            Dep::Cluster => s.cluster = Some(RedisCluster::start(3)),
            Dep::Quorum => s.masters = (0..3).map(|_| RedisServer::start()).collect(),
        }
        s
    }

    /// A builder for a client of this deployment.
    fn builder(&self) -> ClientBuilder {
        match self.dep {
            Dep::Single => Client::builder(&self.masters[0].url()),
            Dep::Replicated => {
                Client::builder(&self.masters[0].url()).min_replicas_acked(1, Duration::from_millis(200))
            }
            Dep::Sentinel => Client::builder(&self._sentinel.as_ref().unwrap().url()),
            Dep::Cluster => Client::builder(&self.cluster.as_ref().unwrap().url()),
            Dep::Quorum => Client::builder_for_masters(self.masters.iter().map(|m| m.url())),
        }
    }

    fn keys(&self, pattern: &str) -> Vec<String> {
        match &self.cluster {
            Some(c) => c.keys(pattern),
            None => self.masters.iter().flat_map(|m| m.keys(pattern)).collect(),
        }
    }

    /// Every master (every primary of a cluster) loses its data.
    fn flushall(&self) {
        match &self.cluster {
            Some(c) => c.primaries().iter().for_each(RedisServer::flushall),
            None => self.masters.iter().for_each(RedisServer::flushall),
        }
    }

    /// Every master (every primary of a cluster) restarts without
    /// persistence: empty.
    fn restart_all(&mut self) {
        match &mut self.cluster {
            Some(c) => {
                let primaries = c.primaries().len();
                c.nodes[..primaries].iter_mut().for_each(RedisServer::restart);
                // Back in the cluster (its slots served) before the test
                // goes on: calls made while it settles time out.
                let until = Instant::now() + Duration::from_secs(30);
                for n in c.primaries() {
                    while !matches!(n.cmd(&["CLUSTER", "INFO"]), Reply::Str(ref i) if i.contains("cluster_state:ok")) {
                        assert!(Instant::now() < until, "the cluster did not settle after the restart");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            None => self.masters.iter_mut().for_each(RedisServer::restart),
        }
    }

    /// lockwarden's channels with subscribers (Sentinel's own are left out).
    fn channels(&self) -> Vec<String> {
        let mut all = match &self.cluster {
            Some(c) => c.channels(),
            None => self.masters.iter().flat_map(|m| m.pubsub_channels()).collect(),
        };
        all.retain(|c| {
            c.starts_with(lockwarden::NAMESPACE)
                || c.starts_with("redisson_lock__channel:")
                || c.starts_with("redisson_sc:")
                || c.starts_with("redisson_rwlock:")
        });
        all
    }
}

/// A client of `setup` whose waiters wake only for a message or at the
/// holder's lease bound (see [`quiet_client`]).
async fn quiet_client_of(setup: &Setup, watchdog: Duration) -> Client {
    quiet(setup.builder(), watchdog).await
}

async fn quiet(builder: ClientBuilder, watchdog: Duration) -> Client {
    builder
        .watchdog_lease(watchdog)
        .wake_patience(NO_PATIENCE)
        .fair_waiter_timeout(Duration::from_secs(12))
        .build()
        .await
        .expect("connect")
}

/// A client whose waiters wake only for a message or at the holder's lease
/// bound: reentrant waiters never look on their own (`NO_PATIENCE`), fair
/// waiters refresh their place only every 4 s. A wait that ends well
/// before both was woken by the unlock. The fair queue's deadline (12 s)
/// is below half the 30 s lease the matrix asks for, so a fair lock's
/// direct grant starts on a lease cut short (`is_extension_pending`).
async fn quiet_client(url: &str, watchdog: Duration) -> Client {
    quiet(Client::builder(url), watchdog).await
}

/// The lease modes of the matrix: the watchdog's, and a fixed lease of the
/// same length.
fn leases(watchdog: Duration) -> [Lease; 2] {
    [Lease::Watchdog, Lease::Fixed(watchdog)]
}

/// Waits until some waiter listens (a channel is subscribed).
async fn until_someone_listens(setup: &Setup) {
    assert!(
        eventually(Duration::from_secs(5), || !setup.channels().is_empty()).await,
        "{:?}: the waiter never subscribed",
        setup.dep
    );
}

/// The holders of `k` on `name` at `server`: a lock hash's owner fields,
/// or the members of a Redisson semaphore's `{name}:timeout` set.
fn holders(server: &RedisServer, k: K, name: &str) -> Vec<String> {
    match k {
        K::RedissonPermit => server
            .cmd(&["ZRANGE", &format!("{{{name}}}:timeout"), "0", "-1"])
            .strings(),
        _ => server.owners(name).into_iter().map(|(f, _)| f).collect(),
    }
}

/// Nothing is left on the deployment but fencing counters, replay
/// records, which expire by themselves (within seconds), and a Redisson
/// semaphore's counter of free permits (Redisson's, kept for good): back
/// at its one permit.
async fn assert_nothing_left(setup: &Setup, what: &str) {
    let left = || {
        let mut keys = setup.keys("*");
        keys.retain(|k| !k.ends_with(":token") && !k.contains(":req:") && !k.starts_with("redisson_lock_token:"));
        keys.retain(|k| {
            let servers: Vec<&RedisServer> = match &setup.cluster {
                Some(c) => vec![c.node_for(k)],
                None => setup.masters.iter().collect(),
            };
            let counter = servers.iter().any(|m| m.cmd(&["TYPE", k]).as_str() == Some("string"));
            if counter {
                let at = servers.iter().find_map(|m| m.cmd(&["GET", k]).as_int());
                assert_eq!(
                    at,
                    Some(1),
                    "{what}: the Redisson semaphore {k} is not back at its one permit"
                );
            }
            !counter
        });
        keys
    };
    if !eventually(Duration::from_secs(5), || left().is_empty()).await {
        let dump: Vec<String> = setup
            .masters
            .iter()
            .flat_map(|m| {
                left()
                    .into_iter()
                    .map(|k| {
                        format!(
                            "{}: {k} = {:?} pttl {:?}",
                            m.port,
                            m.cmd(&["HGETALL", &k]),
                            m.cmd(&["PTTL", &k])
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        panic!("{what}: keys left behind: {dump:#?}");
    }
    assert!(
        eventually(Duration::from_secs(10), || setup.channels().is_empty()).await,
        "{what}: subscriptions left: {:?}",
        setup.channels()
    );
}

/// On every deployment: a healthy hold is not at risk, however it was
/// granted; an unlock hands the name to a waiting rival through pub/sub
/// (well before the lease bound), whose new hold is healthy too; nothing is
/// left behind. A kind a deployment refuses by design is checked refusing.
async fn healthy_hold_and_handoff(k: K) {
    for dep in DEPLOYMENTS {
        bounded(BOUND, healthy_hold_and_handoff_on(k, dep)).await;
    }
}

async fn healthy_hold_and_handoff_on(k: K, dep: Dep) {
    let setup = Setup::start(dep);
    let lease = Duration::from_secs(30);
    let a = quiet_client_of(&setup, lease).await;
    let b = quiet_client_of(&setup, lease).await;
    if k.refused_on(dep) {
        assert!(matches!(
            take(&a, k, "contract", Duration::ZERO, Lease::Watchdog).await,
            Err(Error::Config(_))
        ));
        return;
    }
    for mode in leases(lease) {
        let what = format!("{k:?} on {dep:?}, {mode:?}");
        let name = "contract";
        let held = take(&a, k, name, Duration::ZERO, mode).await.unwrap().expect("free");
        assert!(!held.is_at_risk(), "{what}: a fresh hold is not at risk");
        assert!(held.validity() > lease / 2, "{what}: validity {:?}", held.validity());
        let rival = k.rival();
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            let got = take(&b2, rival, name, Duration::from_secs(10), mode).await;
            (got, Instant::now())
        });
        until_someone_listens(&setup).await;
        let released = Instant::now();
        held.release().await.unwrap();
        let (got, at) = waiter.await.unwrap();
        let got = got
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: the waiter was not handed the name"));
        assert!(
            at - released < Duration::from_secs(3),
            "{what}: woken {:?} after the unlock (the lease bound is 30 s, a fair refresh 4 s)",
            at - released
        );
        assert!(
            !got.is_at_risk(),
            "{what}: a hold handed over is not at risk (validity {:?})",
            got.validity()
        );
        got.release().await.unwrap();
        assert_nothing_left(&setup, &what).await;
    }
}

/// A holder that stops answering (a crash, a pause, a partition: here its
/// connections are stalled) keeps the name no longer than its lease while
/// a rival waits; it is then told the hold was lost, and its release
/// answers `NotHeld` without touching the rival's hold. On one server and
/// over a quorum of three (every master's connection stalled).
async fn stalled_holder_frees_the_name_at_its_lease_end(k: K) {
    for dep in [Dep::Single, Dep::Quorum] {
        if k.refused_on(dep) {
            continue; // refused there by design (see healthy_hold_and_handoff)
        }
        bounded(BOUND, stalled_holder_on(k, dep)).await;
    }
}

async fn stalled_holder_on(k: K, dep: Dep) {
    let setup = Setup::start(dep);
    let lease = Duration::from_millis(1500);
    for mode in leases(lease) {
        let what = format!("{k:?} on {dep:?}, {mode:?}");
        let name = "contract";
        let mut proxies = Vec::new();
        for m in &setup.masters {
            proxies.push(Proxy::start(m.port).await);
        }
        let holder_client = Client::builder_for_masters(proxies.iter().map(Proxy::url))
            .watchdog_lease(lease)
            .command_timeout(Duration::from_millis(300))
            .build()
            .await
            .unwrap();
        let rival_client = quiet_client_of(&setup, Duration::from_secs(30)).await;
        let held = take(&holder_client, k, name, Duration::ZERO, mode)
            .await
            .unwrap()
            .expect("free");
        let stalled = Instant::now();
        for p in &proxies {
            p.stall();
        }
        let got = take(&rival_client, k.rival(), name, Duration::from_secs(10), Lease::Watchdog)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: a stalled holder kept the name past its lease"));
        let waited = stalled.elapsed();
        assert!(
            waited >= lease - Duration::from_millis(100),
            "{what}: the rival got in after {waited:?}, inside the holder's lease"
        );
        assert!(
            waited < lease + Duration::from_secs(4),
            "{what}: the rival waited {waited:?} for a {lease:?} lease"
        );
        // The holder learns it lost the hold: at the end of its validity,
        // which ended before the rival got in.
        assert!(held.is_lost(), "{what}: the stalled holder is told its hold is lost");
        tokio::time::timeout(Duration::from_secs(1), held.lost())
            .await
            .expect("lost() resolves");
        for p in &proxies {
            p.resume();
        }
        match held.release().await {
            Err(Error::NotHeld { .. }) => {}
            other => panic!("{what}: a lost hold's release answered {other:?}, not NotHeld"),
        }
        assert!(!got.is_lost(), "{what}: the rival's hold is untouched");
        let holding = setup.masters.iter().filter(|m| !holders(m, k, name).is_empty()).count();
        assert!(
            holding * 2 > setup.masters.len(),
            "{what}: the rival's hold is still on a majority ({holding})"
        );
        got.release().await.unwrap();
        drop(holder_client);
        drop(proxies);
        assert_nothing_left(&setup, &what).await;
        setup.flushall();
    }
}

/// A holder in a child process, stopped with SIGSTOP (a paused or hung
/// process; killed, it would be a crash), on the deployments the test proxy
/// cannot stand in front of (a replicated master confirmed by its replica,
/// Sentinel, Cluster): the name frees at its lease's end while a rival
/// waits; once resumed, the holder is told the hold was lost and its
/// release answers `NotHeld`.
async fn stopped_holder_process_frees_the_name(k: K) {
    for dep in [Dep::Replicated, Dep::Sentinel, Dep::Cluster] {
        if k.refused_on(dep) {
            continue; // refused there by design (see healthy_hold_and_handoff)
        }
        bounded(BOUND, stopped_holder_on(k, dep)).await;
    }
}

/// The holder of [`stopped_holder_process_frees_the_name`], in a child
/// process: takes the hold its parent names in the environment, says so in
/// a file, then waits for the loss and writes what its release answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_holder_entry_point() {
    let Ok(url) = std::env::var("LOCKWARDEN_TEST_CHILD_URL") else {
        return;
    };
    let var = |n: &str| std::env::var(n).unwrap();
    let k = KINDS
        .into_iter()
        .find(|k| format!("{k:?}") == var("CONTRACT_KIND"))
        .unwrap();
    let lease = Duration::from_millis(1500);
    let mode = if var("CONTRACT_MODE") == "fixed" {
        Lease::Fixed(lease)
    } else {
        Lease::Watchdog
    };
    let mut b = Client::builder(&url)
        .watchdog_lease(lease)
        .command_timeout(Duration::from_millis(400));
    if var("CONTRACT_DEP") == "Replicated" {
        b = b.min_replicas_acked(1, Duration::from_millis(200));
    }
    let c = b.build().await.unwrap();
    let held = take(&c, k, "contract", Duration::ZERO, mode)
        .await
        .unwrap()
        .expect("free");
    let out = std::path::PathBuf::from(var("CONTRACT_OUT"));
    std::fs::write(out.join("held"), "").unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(60), held.lost()).await;
    let answer = match held.release().await {
        Err(Error::NotHeld { .. }) => "NotHeld".to_string(),
        other => format!("{other:?}"),
    };
    std::fs::write(out.join("released.tmp"), answer).unwrap();
    std::fs::rename(out.join("released.tmp"), out.join("released")).unwrap();
}

async fn stopped_holder_on(k: K, dep: Dep) {
    let setup = Setup::start(dep);
    let url = match dep {
        Dep::Sentinel => setup._sentinel.as_ref().unwrap().url(),
        Dep::Cluster => setup.cluster.as_ref().unwrap().url(),
        _ => setup.masters[0].url(),
    };
    let lease = Duration::from_millis(1500);
    for mode in ["watchdog", "fixed"] {
        let what = format!("{k:?} on {dep:?}, {mode}");
        let out = std::env::temp_dir().join(format!(
            "lockwarden-contract-{}-{k:?}-{dep:?}-{mode}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        // Connected before the child takes the hold, so the stop follows
        // the grant within a poll of `eventually`: the lease the rival must
        // wait out runs from the grant (a cluster client takes a while to
        // connect, which the stop would otherwise come after).
        let rival = quiet_client_of(&setup, Duration::from_secs(30)).await;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["stopped_holder_entry_point", "--exact", "--nocapture"])
            .env("LOCKWARDEN_TEST_CHILD_URL", &url)
            .env("CONTRACT_KIND", format!("{k:?}"))
            .env("CONTRACT_MODE", mode)
            .env("CONTRACT_DEP", format!("{dep:?}"))
            .env("CONTRACT_OUT", &out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            eventually(Duration::from_secs(20), || out.join("held").exists()).await,
            "{what}: the child did not take the hold"
        );
        // SAFETY: kill(2) on our own child with a valid signal.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGSTOP) };
        let stopped = Instant::now();
        let got = take(&rival, k.rival(), "contract", Duration::from_secs(10), Lease::Watchdog).await;
        let waited = stopped.elapsed();
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
        let got = got
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: a stopped holder kept the name past its lease"));
        assert!(
            waited >= lease - Duration::from_millis(100),
            "{what}: the rival got in after {waited:?}, inside the holder's lease"
        );
        assert!(
            eventually(Duration::from_secs(10), || out.join("released").exists()).await,
            "{what}: the resumed holder never learned of its loss"
        );
        let answer = std::fs::read_to_string(out.join("released")).unwrap();
        assert_eq!(answer, "NotHeld", "{what}: the lost hold's release");
        assert!(!got.is_lost(), "{what}: the rival's hold is untouched");
        got.release().await.unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&out);
        setup.flushall();
    }
}

/// The servers lose their data while a hold stands (FLUSHALL on every
/// deployment; a restart without persistence on all but Sentinel): the
/// holder is told (its next renewal finds it gone) and its release is
/// `NotHeld`; the next hold's token is above every token handed out
/// before.
async fn lost_data_tells_the_holder_and_tokens_never_go_back(k: K) {
    for dep in DEPLOYMENTS {
        if k.refused_on(dep) {
            continue; // refused there by design (see healthy_hold_and_handoff)
        }
        bounded(BOUND, lost_data_on(k, dep)).await;
    }
}

async fn lost_data_on(k: K, dep: Dep) {
    let mut setup = Setup::start(dep);
    let lease = Duration::from_millis(1500);
    let c = quiet(setup.builder().command_timeout(Duration::from_millis(400)), lease).await;
    let name = "contract";
    // Not restarted behind Sentinel: a restart there either lets Sentinel
    // promote the replica, which has the hold (a failover: the hold
    // survives, tests/sentinel.rs), or is the replicated master's restart.
    let faults: &[&str] = if dep == Dep::Sentinel {
        &["flushall"]
    } else {
        &["flushall", "restart"]
    };
    for &fault in faults {
        let what = format!("{k:?} on {dep:?}, {fault}");
        // A reader carries the last write token: one is handed out first,
        // so the read after the loss has something not to go below.
        if k == K::Read {
            let w = take(&c, K::Write, name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            w.release().await.unwrap();
        }
        let first = take(&c, k, name, Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .expect("free");
        let before = first.token();
        match fault {
            "flushall" => setup.flushall(),
            _ => setup.restart_all(),
        }
        tokio::time::timeout(Duration::from_secs(5), first.lost())
            .await
            .unwrap_or_else(|_| panic!("{what}: the hold is reported lost within its lease"));
        // The client reaches every server again (after a restart it
        // reconnects; a cluster's client also relearns the slots).
        let until = Instant::now() + Duration::from_secs(20);
        for n in [name.to_string(), second(name)] {
            while c.lock(&n).unwrap().is_locked().await.is_err() {
                assert!(Instant::now() < until, "{what}: the client did not reconnect");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        match first.release().await {
            Err(Error::NotHeld { .. }) => {}
            other => panic!("{what}: the lost hold's release answered {other:?}"),
        }
        let next = take(&c, k, name, Duration::from_secs(5), Lease::Watchdog)
            .await
            .unwrap()
            .expect("free again");
        if k.fenced() {
            assert!(next.token() > before, "{what}: token {} after {before}", next.token());
        }
        if k == K::Read {
            assert!(
                next.token() >= before,
                "{what}: read token {} after {before}",
                next.token()
            );
        }
        next.release().await.unwrap();
    }
}

/// Connections killed while a hold stands: the client reconnects, the
/// watchdog's renewals keep the hold (never reported lost while renewals
/// get through), a rival stays out, and the release works.
async fn killed_connections_keep_the_hold(k: K) {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let lease = Duration::from_millis(1500);
        let c = quiet_client(&server.url(), lease).await;
        let rival = quiet_client(&server.url(), lease).await;
        let name = "contract";
        let held = take(&c, k, name, Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .expect("free");
        let until = Instant::now() + lease * 2;
        while Instant::now() < until {
            server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
            server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
            // Longer than a renewal period apart: renewals get through
            // between the kills.
            tokio::time::sleep(lease / 2).await;
        }
        assert!(!held.is_lost(), "{k:?}: a hold whose renewals get through is not lost");
        assert!(
            take(&rival, k.rival(), name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .is_none(),
            "{k:?}: a rival got in past a hold that was kept"
        );
        held.release().await.unwrap();
        assert!(
            take(&rival, k.rival(), name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .is_some(),
            "{k:?}: free after the release"
        );
    })
    .await
}

/// A fixed lease extended on demand (`extend`) keeps the hold past its
/// first lease: a rival stays out, the hold is neither lost nor at risk,
/// and its validity follows the new lease; a lost hold's extension is
/// `NotHeld` and re-creates nothing. On one server and a quorum (a
/// cluster's extension is a renewal call routed as the watchdog's).
async fn a_fixed_lease_is_extended_on_demand(k: K) {
    for dep in [Dep::Single, Dep::Quorum] {
        if k.refused_on(dep) {
            continue; // refused there by design (see healthy_hold_and_handoff)
        }
        bounded(BOUND, extended_on(k, dep)).await;
    }
}

async fn extended_on(k: K, dep: Dep) {
    let setup = Setup::start(dep);
    let what = format!("{k:?} on {dep:?}");
    let first = Duration::from_millis(1500);
    let a = quiet_client_of(&setup, Duration::from_secs(30)).await;
    let b = quiet_client_of(&setup, Duration::from_secs(30)).await;
    let name = "contract";
    let held = take(&a, k, name, Duration::ZERO, Lease::Fixed(first))
        .await
        .unwrap()
        .expect("free");
    held.extend(Duration::from_secs(6)).await.unwrap();
    assert!(
        held.validity() > Duration::from_secs(5),
        "{what}: {:?}",
        held.validity()
    );
    tokio::time::sleep(first + Duration::from_millis(700)).await;
    assert!(!held.is_lost(), "{what}: lost past its first lease");
    assert!(!held.is_at_risk(), "{what}: at risk past its first lease");
    assert!(
        take(&b, k.rival(), name, Duration::ZERO, Lease::Watchdog)
            .await
            .unwrap()
            .is_none(),
        "{what}: a rival got in past the first lease of an extended hold"
    );
    held.release().await.unwrap();

    let held = take(&a, k, name, Duration::ZERO, Lease::Fixed(first))
        .await
        .unwrap()
        .expect("free again");
    setup.flushall();
    assert!(
        matches!(held.extend(Duration::from_secs(6)).await, Err(Error::NotHeld { .. })),
        "{what}: a lost hold's extension"
    );
    assert!(held.is_lost(), "{what}: a hold found gone by its extension is lost");
    assert!(setup.keys(name).is_empty(), "{what}: the extension re-created the lock");
}

/// A watchdog hold extended past the watchdog lease keeps the longer
/// lease: renewals never move a hold's own deadline back (the read-write
/// lock's and the semaphore's holds, whose deadline is a field of theirs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_never_shorten_an_extended_hold() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = quiet_client(&server.url(), Duration::from_millis(1500)).await;
        for k in [K::Read, K::Write, K::Permit, K::FairPermit] {
            let name = format!("ext-{k:?}");
            let held = take(&c, k, &name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let field = match &held {
                Held::G(g) => g.owner().field().to_string(),
                Held::P(p) => p.id(),
                Held::M(_) => unreachable!(),
            };
            held.extend(Duration::from_secs(20)).await.unwrap();
            let deadline = || {
                server
                    .cmd(&["HGET", &name, &format!(":{field}")])
                    .as_int()
                    .unwrap_or_else(|| panic!("{k:?}: no deadline field"))
            };
            let extended = deadline();
            // Three renewals (every 500 ms) later.
            tokio::time::sleep(Duration::from_millis(1700)).await;
            assert!(deadline() >= extended, "{k:?}: a renewal moved the deadline back");
            assert!(
                held.validity() > Duration::from_secs(15),
                "{k:?}: {:?}",
                held.validity()
            );
            held.release().await.unwrap();
        }
        // Redisson's layouts keep a hold's lease as a TTL (a read-write
        // lock's level key) or a score (a semaphore's member).
        for k in [K::RedissonRead, K::RedissonWrite, K::RedissonPermit] {
            let name = format!("ext-{k:?}");
            let held = take(&c, k, &name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let left_ms = || match &held {
                Held::G(g) => {
                    let key = format!("{{{name}}}:{}:rwlock_timeout:1", g.owner().field());
                    server.cmd(&["PTTL", &key]).as_int().unwrap()
                }
                Held::P(p) => {
                    let at = server
                        .cmd(&["ZSCORE", &format!("{{{name}}}:timeout"), &p.id()])
                        .as_int()
                        .unwrap();
                    let t = server.cmd(&["TIME"]).strings();
                    at - (t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000)
                }
                Held::M(_) => unreachable!(),
            };
            held.extend(Duration::from_secs(20)).await.unwrap();
            assert!(left_ms() > 18_000, "{k:?}: extended to {}", left_ms());
            tokio::time::sleep(Duration::from_millis(1700)).await;
            assert!(
                left_ms() > 15_000,
                "{k:?}: a renewal moved the lease back to {}",
                left_ms()
            );
            assert!(
                held.validity() > Duration::from_secs(15),
                "{k:?}: {:?}",
                held.validity()
            );
            held.release().await.unwrap();
        }
    })
    .await
}

/// Tasks taking turns on names in a loop, each with its own client of a
/// deployment, until [`Turns::finish`]; each counts its turns.
struct Turns {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    counts: Vec<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Turns {
    /// `n` tasks; task `i` takes a turn with `turn(its client, i)`.
    async fn start<F, Fut>(setup: &Setup, lease: Duration, n: usize, turn: F) -> Turns
    where
        F: Fn(Client, usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        use std::sync::Arc;
        let turn = Arc::new(turn);
        let stop = Arc::new(AtomicBool::new(false));
        let (mut counts, mut tasks) = (Vec::new(), Vec::new());
        for i in 0..n {
            let c = quiet_client_of(setup, lease).await;
            let (stop, turn, count) = (stop.clone(), turn.clone(), Arc::new(AtomicU32::new(0)));
            counts.push(count.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    turn(c.clone(), i).await;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Turns { stop, counts, tasks }
    }

    /// The turns taken so far, by all the tasks.
    fn total(&self) -> u32 {
        self.counts
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Whether the tasks take `more` turns within 10 s.
    async fn go_on(&self, more: u32) -> bool {
        let until = self.total() + more;
        eventually(Duration::from_secs(10), || self.total() >= until).await
    }

    /// Stops the tasks; the turns each took.
    async fn finish(self) -> Vec<u32> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.counts
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }
}

/// One turn: `k` on `name` (waiting up to 20 s), held 5 ms, released.
async fn one_turn(c: &Client, k: K, name: &str, lease: Lease) {
    let held = take(c, k, name, Duration::from_secs(20), lease).await.unwrap();
    let held = held.unwrap_or_else(|| panic!("{k:?} taking turns gets in"));
    tokio::time::sleep(Duration::from_millis(5)).await;
    held.release().await.unwrap();
}

/// No waiter of any kind is kept out by others taking turns: two tasks
/// (each with its own client) take the name in a loop, 5 ms holds, asking
/// again as soon as they let go, while a third asks three times (5 s
/// each) and gets in every time; the others keep their turns. The tasks
/// take the side that excludes the waiter (writers for a reader), and for
/// a multi-lock each of its names on its own (two tasks per name).
async fn a_waiter_is_never_kept_out_by_others_taking_turns(k: K) {
    for dep in DEPLOYMENTS {
        if !k.refused_on(dep) {
            bounded(BOUND, waiter_among_turns_on(k, dep)).await;
        }
    }
}

async fn waiter_among_turns_on(k: K, dep: Dep) {
    let setup = Setup::start(dep);
    let lease = Duration::from_secs(30);
    let name = "turns";
    // Who takes turns, and on which name.
    let loops: Vec<(K, String)> = match k {
        K::Multi => [name.to_string(), name.to_string(), second(name), second(name)]
            .into_iter()
            .map(|n| (K::Reentrant, n))
            .collect(),
        _ => vec![(k.rival(), name.to_string()); 2],
    };
    for mode in leases(lease) {
        let what = format!("{k:?} on {dep:?}, {mode:?}");
        let others = loops.clone();
        let turns = Turns::start(&setup, lease, loops.len(), move |c, i| {
            let (kind, n) = others[i].clone();
            async move { one_turn(&c, kind, &n, mode).await }
        })
        .await;
        assert!(turns.go_on(20).await, "{what}: the others take turns");
        let waiter = quiet_client_of(&setup, lease).await;
        for _ in 0..3 {
            let held = take(&waiter, k, name, Duration::from_secs(5), mode).await.unwrap();
            let held = held.unwrap_or_else(|| panic!("{what}: the waiter is kept out by the others' turns"));
            held.release().await.unwrap();
        }
        assert!(turns.go_on(10).await, "{what}: the others go on taking turns");
        turns.finish().await;
    }
}

/// The module `$check` with one test per kind listed, each running
/// `$check` for it.
macro_rules! kinds {
    ($check:ident: $($test:ident => $k:ident),* $(,)?) => {
        mod $check {
            use super::K;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() { super::$check(K::$k).await }
            )*
        }
    };
}

/// The rows for every kind.
macro_rules! every_kind {
    ($($check:ident),* $(,)?) => {$(
        kinds!($check:
            reentrant => Reentrant, fair => Fair, read => Read, write => Write,
            permit => Permit, fair_permit => FairPermit, multi => Multi,
            redisson => Redisson, redisson_permit => RedissonPermit,
            redisson_read => RedissonRead, redisson_write => RedissonWrite,
            redisson_fair => RedissonFair);
    )*};
}

every_kind!(
    healthy_hold_and_handoff,
    a_fixed_lease_is_extended_on_demand,
    stalled_holder_frees_the_name_at_its_lease_end,
    stopped_holder_process_frees_the_name,
    lost_data_tells_the_holder_and_tokens_never_go_back,
    killed_connections_keep_the_hold,
);

/// An acquisition of several permits is not kept out by acquisitions of
/// one taking turns (three tasks, 5 ms holds, one permit each of three),
/// on every deployment the semaphore runs on and with either lease: it
/// asks for two, then three, and gets them each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_permits_are_not_kept_out_by_single_ones_everywhere() {
    for dep in DEPLOYMENTS {
        if !K::Permit.refused_on(dep) {
            bounded(BOUND, several_permits_on(dep)).await;
        }
    }
}

async fn several_permits_on(dep: Dep) {
    let setup = Setup::start(dep);
    let lease = Duration::from_secs(30);
    for mode in leases(lease) {
        let what = format!("{dep:?}, {mode:?}");
        let turns = Turns::start(&setup, lease, 3, move |c, _| async move {
            let p = c
                .semaphore("several", 3)
                .unwrap()
                .try_acquire(Duration::from_secs(20), mode)
                .await;
            let p = p.unwrap().expect("a task taking turns gets a permit");
            tokio::time::sleep(Duration::from_millis(5)).await;
            p.release().await.unwrap();
        })
        .await;
        assert!(turns.go_on(20).await, "{what}: the others take turns");
        let waiter = quiet_client_of(&setup, lease).await;
        let s = waiter.semaphore("several", 3).unwrap();
        for n in [2, 3] {
            let p = s.try_acquire_many(n, Duration::from_secs(5), mode).await.unwrap();
            let p = p.unwrap_or_else(|| panic!("{what}: {n} permits kept out by the single ones"));
            p.release().await.unwrap();
        }
        turns.finish().await;
    }
}

/// The rows for lockwarden's own kinds only. Redisson's layouts keep
/// Redisson's rules: an unlock wakes waiters, who then try, so a waiter
/// can be kept out by others taking turns (README, "Redisson's layouts").
macro_rules! own_kinds {
    ($($check:ident),* $(,)?) => {$(
        kinds!($check:
            reentrant => Reentrant, fair => Fair, read => Read, write => Write,
            permit => Permit, fair_permit => FairPermit, multi => Multi);
    )*};
}

own_kinds!(a_waiter_is_never_kept_out_by_others_taking_turns);

/// One name is one kind: while one kind holds a name, every other kind's
/// attempt is a typed error that names the kind found, and changes nothing
/// of the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_name_is_one_kind_in_every_direction() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let b = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let name = "kinds";
        let kinds = [K::Reentrant, K::Fair, K::Read, K::Write, K::Permit, K::FairPermit];
        for first in kinds {
            let held = take(&a, first, name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let before = server.cmd(&["HGETALL", name]).strings();
            for other in kinds {
                let same_lock = matches!((first, other), (K::Read | K::Write, K::Read | K::Write));
                if other == first || same_lock {
                    continue;
                }
                for wait in [Duration::ZERO, Duration::from_millis(300)] {
                    match take(&b, other, name, wait, Lease::Watchdog).await {
                        Err(Error::WrongKind { key, found }) => {
                            assert_eq!(key, name);
                            assert_eq!(found, first.found(), "{other:?} over {first:?}");
                        }
                        Ok(Some(_)) => panic!("{other:?} was granted over a held {first:?}"),
                        other_reply => panic!("{other:?} over {first:?}: {other_reply:?}"),
                    }
                }
                // The release by owner of a kind that does not hold the
                // name is not held, and changes nothing.
                if matches!(other, K::Reentrant | K::Fair) {
                    let lock = if other == K::Fair {
                        b.fair_lock(name).unwrap()
                    } else {
                        b.lock(name).unwrap()
                    };
                    assert!(lock.unlock().await.is_err(), "{other:?} unlock over {first:?}");
                }
                assert_eq!(
                    server.cmd(&["HGETALL", name]).strings(),
                    before,
                    "{other:?} changed {first:?}'s hash"
                );
            }
            assert!(!held.is_lost());
            held.release().await.unwrap();
            assert_eq!(server.cmd(&["EXISTS", name]).as_int(), Some(0), "{first:?} released");
        }
    })
    .await
}

/// A semaphore in Redisson's layout (a counter at the name) and every
/// other kind never share a name, in either direction: an error that names
/// what holds the name, and nothing of the holder's changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redisson_semaphore_and_the_other_kinds_never_share_a_name() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let b = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let name = "rsem";
        let others = [
            K::Reentrant,
            K::Fair,
            K::Read,
            K::Write,
            K::Permit,
            K::FairPermit,
            K::Multi,
            K::Redisson,
            K::RedissonFair,
            K::RedissonRead,
            K::RedissonWrite,
        ];
        for k in others {
            let held = take(&a, k, name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let before = contents(&server, name);
            for wait in [Duration::ZERO, Duration::from_millis(300)] {
                match take(&b, K::RedissonPermit, name, wait, Lease::Watchdog).await {
                    Err(Error::WrongKind { found, .. }) => assert_eq!(found, k.found(), "over {k:?}"),
                    Err(Error::HeldByRedisson { .. })
                        if matches!(k, K::Redisson | K::RedissonFair | K::RedissonRead | K::RedissonWrite) => {}
                    other => panic!("a Redisson semaphore over {k:?}: {other:?}"),
                }
            }
            assert_eq!(
                contents(&server, name),
                before,
                "the Redisson semaphore changed {k:?}'s hash"
            );
            assert_eq!(server.cmd(&["EXISTS", "{rsem}:timeout"]).as_int(), Some(0));
            held.release().await.unwrap();

            let permit = take(&a, K::RedissonPermit, name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let members = server.cmd(&["ZRANGE", "{rsem}:timeout", "0", "-1"]).strings();
            for wait in [Duration::ZERO, Duration::from_millis(300)] {
                match take(&b, k, name, wait, Lease::Watchdog).await {
                    Err(Error::WrongType { found, .. }) => assert_eq!(found, "string", "{k:?}"),
                    other => panic!("{k:?} over a Redisson semaphore: {other:?}"),
                }
            }
            assert_eq!(
                server.cmd(&["GET", name]).as_int(),
                Some(0),
                "{k:?} changed the counter"
            );
            assert_eq!(server.cmd(&["ZRANGE", "{rsem}:timeout", "0", "-1"]).strings(), members);
            permit.release().await.unwrap();
            server.cmd(&["DEL", name]);
        }
    })
    .await
}

/// The primitives beside the lock kinds: a count-down latch and every
/// lock kind never share a name, in either direction, and nothing of the
/// one holding it changes; an election (its leader holds the name's
/// reentrant lock) refuses a name another kind holds; a latch refuses a
/// hash some other program wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latches_elections_and_lock_kinds_never_share_a_name() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let a = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let b = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let name = "prim";
        let latch = b.count_down_latch(name).unwrap();
        for k in [K::Reentrant, K::Fair, K::Read, K::Write, K::Permit, K::FairPermit] {
            let held = take(&a, k, name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let before = server.cmd(&["HGETALL", name]).strings();
            let kind_of = |r: lockwarden::Result<_>| match r {
                Err(Error::WrongKind { found, .. }) => found,
                Err(e) => format!("{e:?}"),
                Ok(_) => "accepted".to_string(),
            };
            assert_eq!(
                kind_of(latch.try_set_count(2).await.map(|_| ())),
                k.found(),
                "latch over {k:?}"
            );
            assert_eq!(
                kind_of(latch.count_down().await.map(|_| ())),
                k.found(),
                "count-down over {k:?}"
            );
            assert_eq!(
                kind_of(latch.delete().await.map(|_| ())),
                k.found(),
                "delete over {k:?}"
            );
            if k != K::Reentrant {
                let e = b.election(name).unwrap();
                assert_eq!(
                    kind_of(e.try_campaign("v", Duration::ZERO).await.map(|_| ())),
                    k.found(),
                    "campaign over {k:?}"
                );
                assert_eq!(e.leader().await.unwrap(), None);
            }
            assert_eq!(server.cmd(&["HGETALL", name]).strings(), before, "{k:?}'s hash changed");
            assert!(!held.is_lost());
            held.release().await.unwrap();
            // The other way: a latch holds the name.
            assert!(latch.try_set_count(2).await.unwrap());
            let before = server.cmd(&["HGETALL", name]).strings();
            for wait in [Duration::ZERO, Duration::from_millis(300)] {
                match take(&a, k, name, wait, Lease::Watchdog).await {
                    Err(Error::WrongKind { found, .. }) => assert_eq!(found, "count-down latch", "{k:?}"),
                    other => panic!("{k:?} over a latch: {other:?}"),
                }
            }
            // A force-unlock (a plain handle's, as `lockwarden unlock
            // --force` makes, or a read-write side's) frees locks only.
            let rw = a.rw_lock(name).unwrap();
            for (lock, side) in [
                (a.lock(name).unwrap(), "plain"),
                (rw.read(), "read"),
                (rw.write(), "write"),
            ] {
                match lock.force_unlock().await {
                    Err(Error::WrongKind { found, .. }) => assert_eq!(found, "count-down latch", "{side}"),
                    other => panic!("a {side} force-unlock over a latch: {other:?}"),
                }
            }
            assert_eq!(
                server.cmd(&["HGETALL", name]).strings(),
                before,
                "{k:?} changed the latch"
            );
            assert_eq!(latch.count().await.unwrap(), Some(2));
            assert!(latch.delete().await.unwrap());
        }
        server.cmd(&["HSET", "foreign", "owner", "someone"]);
        assert!(matches!(
            b.count_down_latch("foreign").unwrap().try_set_count(1).await,
            Err(Error::WrongType { .. })
        ));
        assert_eq!(server.cmd(&["HGETALL", "foreign"]).strings(), ["owner", "someone"]);
    })
    .await;
}

/// A hash under a lock's name that some other program wrote is never
/// written by any kind: each reports it as a wrong type, a waiting attempt
/// included, and `force_unlock` leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_that_is_not_a_lock_is_never_written() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let name = "h";
        server.cmd(&["HSET", name, "owner", "someone", "count", "1"]);
        let before = server.cmd(&["HGETALL", name]).strings();
        for k in KINDS {
            for wait in [Duration::ZERO, Duration::from_millis(300)] {
                match take(&c, k, name, wait, Lease::Watchdog).await {
                    Err(Error::WrongType { key, found }) => {
                        assert_eq!(key, name, "{k:?}");
                        assert!(found.contains("did not write"), "{k:?}: {found}");
                    }
                    other => panic!("{k:?} on a foreign hash: {other:?}"),
                }
            }
            assert_eq!(server.cmd(&["HGETALL", name]).strings(), before, "{k:?} wrote into it");
        }
        assert!(matches!(
            c.lock(name).unwrap().force_unlock().await,
            Err(Error::WrongType { .. })
        ));
        assert_eq!(server.cmd(&["HGETALL", name]).strings(), before, "force_unlock");
        assert_eq!(server.cmd(&["TTL", name]).as_int(), Some(-1), "no TTL was set");
    })
    .await
}

/// One hold's time, as its holder was told: from the grant to the start of
/// its release, cut at the end of the validity it was given.
#[derive(Clone, Copy, Debug)]
struct Span {
    write: bool,
    from: Instant,
    to: Instant,
}

/// Several readers and writers (or permit holders) take and give back one
/// name for a few seconds while the server's connections are killed and
/// the server is paused now and then. Returns every hold's span.
async fn contend_under_faults(server: &RedisServer, kinds: &[K], permits: u32) -> Vec<Span> {
    let spans = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let stop = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for (i, &k) in kinds.iter().enumerate() {
        let c = Client::builder(&server.url())
            .watchdog_lease(Duration::from_millis(1500))
            .command_timeout(Duration::from_millis(300))
            .build()
            .await
            .unwrap();
        let spans = spans.clone();
        tasks.push(tokio::spawn(async move {
            let lease = if i % 2 == 0 {
                Lease::Watchdog
            } else {
                Lease::Fixed(Duration::from_millis(800))
            };
            while Instant::now() < stop {
                let got = match k {
                    K::Permit => c
                        .semaphore("faults", permits)
                        .unwrap()
                        .try_acquire(Duration::from_millis(500), lease)
                        .await
                        .map(|p| p.map(Held::P)),
                    k => take(&c, k, "faults", Duration::from_millis(500), lease).await,
                };
                let Ok(Some(held)) = got else { continue };
                let from = Instant::now();
                let valid_until = from + held.validity();
                tokio::time::sleep(Duration::from_millis(20)).await;
                let to = Instant::now().min(valid_until);
                spans.lock().push(Span {
                    write: k == K::Write,
                    from,
                    to,
                });
                let _ = held.release().await;
                if k == K::Write {
                    // Writers are preferred: with no pause between their
                    // turns, waiting writers would keep readers out.
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
            }
        }));
    }
    let mut n = 0;
    while Instant::now() < stop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        n += 1;
        if n % 3 == 0 {
            server.pause();
            tokio::time::sleep(Duration::from_millis(400)).await;
            server.resume();
        } else {
            server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let spans = spans.lock().clone();
    spans
}

/// The read-write lock under faults (killed connections, a paused
/// server): never two writers, never a writer with a reader, within the
/// validity each holder was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_and_writers_never_overlap_under_faults() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let kinds = [K::Write, K::Write, K::Write, K::Read, K::Read, K::Read];
        let spans = contend_under_faults(&server, &kinds, 0).await;
        let writes = spans.iter().filter(|s| s.write).count();
        assert!(
            writes > 3 && spans.len() > writes,
            "too few holds to mean anything: {spans:?}"
        );
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                let overlap = a.from < b.to && b.from < a.to;
                assert!(!(overlap && (a.write || b.write)), "overlapping holds: {a:?} and {b:?}");
            }
        }
    })
    .await
}

/// The semaphore under faults: never more permits held than its number,
/// within the validity each holder was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_never_grants_more_than_its_permits_under_faults() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let spans = contend_under_faults(&server, &[K::Permit; 6], 2).await;
        assert!(spans.len() > 6, "too few holds to mean anything: {spans:?}");
        for s in &spans {
            let at_once = spans.iter().filter(|o| o.from <= s.from && s.from < o.to).count();
            assert!(at_once <= 2, "{at_once} permits of 2 held at {s:?}");
        }
    })
    .await
}

/// `Client::locks` lists a held name of every kind, with its kind, and
/// never a hash lockwarden did not write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kind_is_listed_with_its_kind_while_held() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = quiet_client(&server.url(), Duration::from_secs(30)).await;
        server.cmd(&["HSET", "listed-foreign", "owner", "x"]);
        let want = [
            (K::Reentrant, lockwarden::LockKind::Reentrant),
            (K::Fair, lockwarden::LockKind::Fair),
            (K::Read, lockwarden::LockKind::ReadWrite),
            (K::Permit, lockwarden::LockKind::Semaphore),
            (K::FairPermit, lockwarden::LockKind::FairSemaphore),
        ];
        let mut held = Vec::new();
        for (k, _) in want {
            let name = format!("listed-{k:?}");
            held.push(
                take(&c, k, &name, Duration::ZERO, Lease::Watchdog)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        let listed = c.locks("listed-*").await.unwrap();
        for (k, kind) in want {
            let name = format!("listed-{k:?}");
            let s = listed
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name} not listed: {listed:?}"));
            assert_eq!(s.kind, Some(kind), "{name}");
            assert!(s.is_held(), "{name}");
        }
        assert!(listed.iter().all(|s| s.name != "listed-foreign"), "{listed:?}");
        for h in held {
            h.release().await.unwrap();
        }
    })
    .await
}

/// A Redisson client's id, as it writes it in its holders' fields.
const REDISSON_ID: &str = "5f0c1f9e-1d7a-4c2b-9a51-0d6e2b7c3a10";

/// A Redisson holder's layout at a name, written here from Redisson's
/// documented data layout (no Redisson code): the keys it writes.
#[derive(Clone, Copy, Debug)]
enum Redisson {
    /// RLock: a hash at the name, `<uuid>:<thread id>` -> reentry count.
    Lock,
    /// A port's lock (node-redisson): the holder is `<uuid>:<uuid>`.
    PortLock,
    /// RFencedLock: the lock and its token counter.
    FencedLock,
    /// RFairLock: the lock, its waiters' queue and their timeouts.
    FairLock,
    /// RReadWriteLock held by a writer: `mode` = write.
    WriteLock,
    /// RReadWriteLock held by a reader: `mode` = read, and the reader's
    /// lease as a string key of its own.
    ReadLock,
    /// RSemaphore: a counter at the name.
    Semaphore,
    /// RPermitExpirableSemaphore: the counter and its permits' timeouts.
    ExpirableSemaphore,
}

const REDISSON_LAYOUTS: [Redisson; 8] = [
    Redisson::Lock,
    Redisson::PortLock,
    Redisson::FencedLock,
    Redisson::FairLock,
    Redisson::WriteLock,
    Redisson::ReadLock,
    Redisson::Semaphore,
    Redisson::ExpirableSemaphore,
];

impl Redisson {
    /// Writes the layout at `name` (held, with a 30 s lease); its keys.
    fn write(self, server: &RedisServer, name: &str) -> Vec<String> {
        let holder = format!("{REDISSON_ID}:1");
        let later = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 300_000)
            .to_string();
        let lock = |server: &RedisServer| {
            server.cmd(&["HSET", name, &holder, "1"]);
            server.cmd(&["PEXPIRE", name, "30000"]);
        };
        match self {
            Redisson::Lock => lock(server),
            Redisson::PortLock => {
                server.cmd(&[
                    "HSET",
                    name,
                    &format!("{REDISSON_ID}:0d9e4c2a-7b1f-4e3a-8c5d-6f2a1b3c4d5e"),
                    "1",
                ]);
                server.cmd(&["PEXPIRE", name, "30000"]);
            }
            Redisson::FencedLock => {
                lock(server);
                server.cmd(&["SET", &format!("redisson_lock_token:{{{name}}}"), "7"]);
            }
            Redisson::FairLock => {
                lock(server);
                let waiter = format!("{REDISSON_ID}:2");
                server.cmd(&["RPUSH", &format!("redisson_lock_queue:{{{name}}}"), &waiter]);
                server.cmd(&["ZADD", &format!("redisson_lock_timeout:{{{name}}}"), &later, &waiter]);
            }
            Redisson::WriteLock => {
                server.cmd(&["HSET", name, "mode", "write", &format!("{holder}:write"), "1"]);
                server.cmd(&["PEXPIRE", name, "30000"]);
            }
            Redisson::ReadLock => {
                server.cmd(&["HSET", name, "mode", "read", &holder, "1"]);
                server.cmd(&["PEXPIRE", name, "30000"]);
                let lease = format!("{{{name}}}:{holder}:rwlock_timeout:1");
                server.cmd(&["SET", &lease, "1", "PX", "30000"]);
            }
            Redisson::Semaphore => {
                server.cmd(&["SET", name, "3"]);
            }
            Redisson::ExpirableSemaphore => {
                server.cmd(&["SET", name, "3"]);
                server.cmd(&[
                    "ZADD",
                    &format!("{{{name}}}:timeout"),
                    &later,
                    "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
                ]);
            }
        }
        let mut keys = server.keys("*");
        keys.retain(|k| !k.starts_with("lockwarden:"));
        keys
    }

    /// What lockwarden reports when it finds this layout.
    fn found(self) -> Option<&'static str> {
        match self {
            Redisson::Lock | Redisson::PortLock | Redisson::FencedLock | Redisson::FairLock => Some("a Redisson lock"),
            Redisson::WriteLock | Redisson::ReadLock => Some("a Redisson read-write lock"),
            Redisson::Semaphore | Redisson::ExpirableSemaphore => None,
        }
    }
}

/// Everything a key holds, and whether its TTL is at most `ttl_before`.
fn contents(server: &RedisServer, key: &str) -> Vec<String> {
    let kind = server.cmd(&["TYPE", key]).as_str().unwrap_or("").to_string();
    let mut out = vec![kind.clone()];
    out.extend(match kind.as_str() {
        "hash" => {
            let mut pairs: Vec<String> = server
                .cmd(&["HGETALL", key])
                .strings()
                .chunks(2)
                .map(|p| p.join("="))
                .collect();
            pairs.sort();
            pairs
        }
        "string" => vec![server.cmd(&["GET", key]).as_str().unwrap_or("").to_string()],
        "list" => server.cmd(&["LRANGE", key, "0", "-1"]).strings(),
        "zset" => server.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]).strings(),
        _ => Vec::new(),
    });
    out
}

/// Without any setting, no kind is ever granted over a Redisson holder of
/// the same name, waiting or not, and none writes into Redisson's keys (nor
/// extends their TTL): each hash layout is refused as
/// `Error::HeldByRedisson`, a semaphore's counter as a wrong type.
/// `force_unlock` leaves them alone; `status` and `locks` name them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redisson_holder_is_never_granted_over() {
    bounded(Duration::from_secs(120), async {
        let server = RedisServer::start();
        let c = quiet_client(&server.url(), Duration::from_secs(30)).await;
        for layout in REDISSON_LAYOUTS {
            let name = format!("r-{layout:?}");
            let keys = layout.write(&server, &name);
            let before: Vec<Vec<String>> = keys.iter().map(|k| contents(&server, k)).collect();
            let ttls: Vec<i64> = keys
                .iter()
                .map(|k| server.cmd(&["PTTL", k]).as_int().unwrap())
                .collect();
            for k in KINDS {
                // A Redisson-compatible kind shares its own layout with
                // Redisson by design (tests/redisson_*.rs): readers with
                // readers, one count of permits.
                let shared = matches!(
                    (k, layout),
                    (K::RedissonRead, Redisson::ReadLock)
                        | (K::RedissonFair, Redisson::FairLock)
                        | (K::RedissonPermit, Redisson::Semaphore | Redisson::ExpirableSemaphore)
                );
                if shared {
                    continue;
                }
                for wait in [Duration::ZERO, Duration::from_millis(300)] {
                    let own_layout = match k {
                        K::Redisson | K::RedissonFair => layout.found().is_some(),
                        K::RedissonRead | K::RedissonWrite => layout.found() == Some("a Redisson read-write lock"),
                        _ => false,
                    };
                    match (take(&c, k, &name, wait, Lease::Watchdog).await, layout.found()) {
                        (Ok(Some(_)), _) => panic!("{k:?} was granted over a Redisson {layout:?}"),
                        // Redisson's layout is its own: held by another owner.
                        (Ok(None), Some(_)) if own_layout => {}
                        (Err(Error::HeldByRedisson { key, found }), Some(want)) => {
                            assert_eq!(key, name, "{k:?} over {layout:?}");
                            assert_eq!(found, want, "{k:?} over {layout:?}");
                            let message = Error::HeldByRedisson { key, found }.to_string();
                            assert!(message.contains("Redisson"), "{message}");
                        }
                        (Err(Error::WrongType { key, found }), None) => {
                            assert_eq!((key.as_str(), found.as_str()), (name.as_str(), "string"), "{k:?}");
                        }
                        (other, _) => panic!("{k:?} over a Redisson {layout:?}: {other:?}"),
                    }
                }
                for (i, key) in keys.iter().enumerate() {
                    assert_eq!(contents(&server, key), before[i], "{k:?} changed {key} of {layout:?}");
                    let ttl = server.cmd(&["PTTL", key]).as_int().unwrap();
                    assert!(
                        ttl <= ttls[i],
                        "{k:?} extended {key} of {layout:?}: {} -> {ttl}",
                        ttls[i]
                    );
                }
            }
            let lock = c.lock(&name).unwrap();
            match (lock.force_unlock().await, layout.found()) {
                (Err(Error::HeldByRedisson { .. }), Some(_)) | (Err(Error::WrongType { .. }), None) => {}
                (other, _) => panic!("force_unlock of a Redisson {layout:?}: {other:?}"),
            }
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(
                    contents(&server, key),
                    before[i],
                    "force_unlock changed {key} of {layout:?}"
                );
            }
            if layout.found().is_some() {
                let want = if matches!(layout, Redisson::WriteLock | Redisson::ReadLock) {
                    lockwarden::LockKind::RedissonReadWrite
                } else {
                    lockwarden::LockKind::Redisson
                };
                let status = lock.status().await.unwrap();
                assert_eq!(status.kind, Some(want), "{layout:?}");
                assert!(status.is_held(), "{layout:?}: {status:?}");
                let listed = c.locks(&name).await.unwrap();
                assert_eq!(listed.len(), 1, "{layout:?} listed: {listed:?}");
                assert_eq!(listed[0].kind, Some(want), "{layout:?}");
            }
        }
    })
    .await
}

/// Redisson's acquire decisions, as its documented layouts make them
/// (written here as small scripts of our own, no Redisson code): each
/// returns nil when it would grant (and writes its hold), else the PTTL.
const REDISSON_TAKES: [(&str, &str); 4] = [
    (
        "lock",
        "if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then \
           redis.call('HINCRBY', KEYS[1], ARGV[1], 1) redis.call('PEXPIRE', KEYS[1], 30000) return nil end \
         return redis.call('PTTL', KEYS[1])",
    ),
    (
        "write lock",
        "local mode = redis.call('HGET', KEYS[1], 'mode') \
         if not mode then redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[1] .. ':write', 1) \
           redis.call('PEXPIRE', KEYS[1], 30000) return nil end \
         if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':write') == 1 then \
           redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':write', 1) return nil end \
         return redis.call('PTTL', KEYS[1])",
    ),
    (
        "read lock",
        "local mode = redis.call('HGET', KEYS[1], 'mode') \
         if not mode then redis.call('HSET', KEYS[1], 'mode', 'read', ARGV[1], 1) \
           redis.call('PEXPIRE', KEYS[1], 30000) return nil end \
         if mode == 'read' or (mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':write') == 1) then \
           redis.call('HINCRBY', KEYS[1], ARGV[1], 1) return nil end \
         return redis.call('PTTL', KEYS[1])",
    ),
    (
        "semaphore",
        "local v = redis.call('GET', KEYS[1]) \
         if v and tonumber(v) >= 1 then redis.call('DECRBY', KEYS[1], 1) return nil end \
         return -1",
    ),
];

/// The other way round: while lockwarden holds a name, a Redisson client
/// of the same kind never takes it. Its lock is kept out by the hash
/// existing; its read-write lock by the `mode` field every lockwarden
/// read-write lock writes (Redisson takes a hash without one as free);
/// its semaphore by the hash not being its counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redisson_client_never_takes_a_name_lockwarden_holds() {
    bounded(BOUND, async {
        let server = RedisServer::start();
        let c = quiet_client(&server.url(), Duration::from_secs(30)).await;
        let holder = format!("{REDISSON_ID}:1");
        let pairs = [
            (K::Reentrant, "lock"),
            (K::Fair, "lock"),
            (K::Read, "write lock"),
            (K::Write, "write lock"),
            (K::Read, "read lock"),
            (K::Write, "read lock"),
            (K::Permit, "semaphore"),
            (K::Multi, "lock"),
        ];
        for (k, redisson) in pairs {
            let name = format!("lw-{k:?}-{}", redisson.replace(' ', "-"));
            let held = take(&c, k, &name, Duration::ZERO, Lease::Watchdog)
                .await
                .unwrap()
                .expect("free");
            let before = contents(&server, &name);
            let script = REDISSON_TAKES.iter().find(|(n, _)| *n == redisson).unwrap().1;
            let reply = server.cmd(&["EVAL", script, "1", &name, &holder]);
            assert!(
                !matches!(reply, Reply::Nil),
                "Redisson's {redisson} was granted over lockwarden's {k:?}"
            );
            assert_eq!(
                contents(&server, &name),
                before,
                "Redisson's {redisson} wrote into {k:?}"
            );
            held.release().await.unwrap();
        }
    })
    .await
}

/// Neither side of the read-write lock keeps the other out, nor two
/// writers a third, on every deployment and with either lease: three
/// writers take turns in a loop while a reader asks three times (it gets
/// in each time), and every writer gets turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_and_writers_take_turns_everywhere() {
    for dep in DEPLOYMENTS {
        bounded(BOUND, take_turns_on(dep)).await;
    }
}

async fn take_turns_on(dep: Dep) {
    let setup = Setup::start(dep);
    let lease = Duration::from_secs(30);
    for mode in leases(lease) {
        let what = format!("{dep:?}, {mode:?}");
        let name = "turns";
        let writers = Turns::start(&setup, lease, 3, move |c, _| async move {
            one_turn(&c, K::Write, name, mode).await;
        })
        .await;
        let reader = quiet_client_of(&setup, lease).await;
        for _ in 0..3 {
            let held = take(&reader, K::Read, name, Duration::from_secs(5), mode)
                .await
                .unwrap();
            let held = held.unwrap_or_else(|| panic!("{what}: the reader is kept out by the writers"));
            held.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let turns = writers.finish().await;
        assert!(
            turns.iter().all(|&t| t >= 5),
            "{what}: every writer gets turns: {turns:?}"
        );
    }
}
