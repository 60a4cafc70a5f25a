//! Leader election (`Client::election`): one leader at a time, terms that
//! only grow, observers that see every change in order, and leaders that
//! die, pause or are flushed away, on real servers.
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lockwarden::{Client, Error, Leader};

use common::*;

const BOUND: Duration = Duration::from_secs(60);

/// Collects `n` leaders from an observer, or fails after `limit`.
async fn collect(
    stream: &mut futures::stream::BoxStream<'static, lockwarden::Result<Leader>>,
    n: usize,
    limit: Duration,
) -> Vec<Leader> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    while out.len() < n {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(l))) => out.push(l),
            Ok(Some(Err(e))) => panic!("observer failed: {e}"),
            Ok(None) => panic!("observer ended"),
            Err(_) => panic!("observer saw {} of {n} changes: {out:?}", out.len()),
        }
    }
    out
}

/// Four clients campaign five times each, every leader proclaiming two
/// values: never two leaders at once, terms strictly increase from one
/// leader to the next, and an observer started before sees every value in
/// the order it was proclaimed, nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_leader_at_a_time_and_observers_see_every_change_in_order() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let watcher = client(&server.url(), Duration::from_secs(5)).await;
        let mut observer = watcher.election("jobs").unwrap().observe();
        // The observer subscribes on its first poll: poll it once (nobody
        // leads yet, so it waits) before the campaigns start.
        assert!(tokio::time::timeout(Duration::from_millis(300), observer.next())
            .await
            .is_err());
        let leading = Arc::new(AtomicBool::new(false));
        let said = Arc::new(parking_lot::Mutex::new(Vec::<Leader>::new()));
        let mut tasks = Vec::new();
        for c in 0..4 {
            let url = server.url();
            let (leading, said) = (leading.clone(), said.clone());
            tasks.push(tokio::spawn(async move {
                let client = client(&url, Duration::from_secs(5)).await;
                let election = client.election("jobs").unwrap();
                for n in 0..5 {
                    let l = election.campaign(format!("c{c}-{n}")).await.unwrap();
                    assert!(!leading.swap(true, Ordering::SeqCst), "two leaders at once");
                    {
                        let mut s = said.lock();
                        if let Some(prev) = s.last() {
                            assert!(l.term() > prev.term, "term {} after {}", l.term(), prev.term);
                        }
                        s.push(election_leader(&l));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    l.proclaim(format!("c{c}-{n}-b")).await.unwrap();
                    said.lock().push(election_leader(&l));
                    assert_eq!(l.value(), format!("c{c}-{n}-b"));
                    leading.store(false, Ordering::SeqCst);
                    l.resign().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let said = said.lock().clone();
        assert_eq!(said.len(), 40);
        let seen = collect(&mut observer, 40, Duration::from_secs(20)).await;
        assert_eq!(seen, said, "the observer's changes are the proclaimed ones, in order");
        // Nothing more: the last leader resigned.
        assert!(tokio::time::timeout(Duration::from_millis(300), observer.next())
            .await
            .is_err());
        assert_eq!(watcher.election("jobs").unwrap().leader().await.unwrap(), None);
    })
    .await;
}

fn election_leader(l: &lockwarden::Leadership) -> Leader {
    make_leader(&l.value(), l.term())
}

fn make_leader(value: &str, term: u64) -> Leader {
    Leader::new(value, term)
}

/// A FLUSHALL takes the leadership away: its holder is told, nobody leads,
/// its proclaim answers `NotHeld` and writes nothing, the next leader's
/// term is above the flushed one's, and an observer sees the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_ends_a_leadership_and_the_next_term_is_higher() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let lease = Duration::from_millis(1500);
        let a = client(&server.url(), lease).await;
        let b = client(&server.url(), lease).await;
        let ea = a.election("flushed").unwrap();
        let mut observer = b.election("flushed").unwrap().observe();
        let first = ea.campaign("a").await.unwrap();
        let seen = collect(&mut observer, 1, Duration::from_secs(5)).await;
        assert_eq!(seen, vec![make_leader("a", first.term())]);
        assert_eq!(ea.leader().await.unwrap(), Some(make_leader("a", first.term())));
        server.flushall();
        // The watchdog's next renewal (a third of the lease) finds it gone.
        let why = tokio::time::timeout(lease, first.lost())
            .await
            .expect("the holder is told");
        assert_eq!(why, lockwarden::LossReason::Gone);
        assert_eq!(ea.leader().await.unwrap(), None);
        assert!(matches!(first.proclaim("late").await, Err(Error::NotHeld { .. })));
        assert!(
            server
                .keys("*")
                .iter()
                .all(|k| !k.ends_with(":leaders") && k != "flushed"),
            "{:?}",
            server.keys("*")
        );
        let second = b.election("flushed").unwrap().campaign("b").await.unwrap();
        assert!(second.term() > first.term(), "{} after {}", second.term(), first.term());
        let seen = collect(&mut observer, 1, Duration::from_secs(10)).await;
        assert_eq!(seen, vec![make_leader("b", second.term())]);
        assert!(matches!(first.resign().await, Err(Error::NotHeld { .. })));
        second.resign().await.unwrap();
    })
    .await;
}

/// The leader of [`a_paused_leader_is_replaced_after_its_lease`], in a
/// child process: leads, says so in a file, then waits for its loss and
/// writes what its proclaim answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_entry_point() {
    let Ok(url) = std::env::var("LOCKWARDEN_TEST_CHILD_URL") else {
        return;
    };
    let out = std::path::PathBuf::from(std::env::var("ELECTION_OUT").unwrap());
    let c = Client::builder(&url)
        .watchdog_lease(Duration::from_millis(1500))
        .build()
        .await
        .unwrap();
    let l = c.election("paused").unwrap().campaign("child").await.unwrap();
    std::fs::write(out.join("term"), l.term().to_string()).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(60), l.lost()).await;
    let answer = match l.proclaim("after").await {
        Err(Error::NotHeld { .. }) => "NotHeld".to_string(),
        other => format!("{other:?}"),
    };
    std::fs::write(out.join("answer.tmp"), answer).unwrap();
    std::fs::rename(out.join("answer.tmp"), out.join("answer")).unwrap();
}

/// A leader in a process that is stopped (SIGSTOP: paused, hung) is
/// replaced once its lease ends, not before; resumed, it is told it lost
/// the leadership and its proclaim answers `NotHeld`; an observer sees
/// the old leader, then the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_after_its_lease() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let out = std::env::temp_dir().join(format!("lockwarden-election-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["paused_leader_entry_point", "--exact", "--nocapture"])
            .env("LOCKWARDEN_TEST_CHILD_URL", server.url())
            .env("ELECTION_OUT", &out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            eventually(Duration::from_secs(20), || out.join("term").exists()).await,
            "the child did not lead"
        );
        let old: u64 = std::fs::read_to_string(out.join("term")).unwrap().parse().unwrap();
        let rival = client(&server.url(), Duration::from_secs(30)).await;
        let election = rival.election("paused").unwrap();
        let mut observer = election.observe();
        assert_eq!(
            collect(&mut observer, 1, Duration::from_secs(5)).await,
            vec![make_leader("child", old)]
        );
        // SAFETY: kill(2) on our own child with a valid signal.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGSTOP) };
        let stopped = Instant::now();
        let new = election.try_campaign("rival", Duration::from_secs(10)).await;
        let waited = stopped.elapsed();
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
        let new = new.unwrap().expect("a paused leader kept the election past its lease");
        assert!(
            waited >= Duration::from_millis(1400),
            "replaced after {waited:?}, inside the lease"
        );
        assert!(new.term() > old);
        assert_eq!(
            collect(&mut observer, 1, Duration::from_secs(5)).await,
            vec![make_leader("rival", new.term())]
        );
        assert!(
            eventually(Duration::from_secs(10), || out.join("answer").exists()).await,
            "the resumed leader never learned of its loss"
        );
        assert_eq!(std::fs::read_to_string(out.join("answer")).unwrap(), "NotHeld");
        assert!(!new.is_lost());
        assert_eq!(election.leader().await.unwrap(), Some(make_leader("rival", new.term())));
        new.resign().await.unwrap();
        let _ = child.kill();
        let _ = child.wait();
    })
    .await;
}

/// Bad neighbours: a log key of another type is refused by name with
/// nothing written, and a quorum client refuses to make an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_another_type_and_a_quorum_are_refused() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), Duration::from_secs(5)).await;
        server.cmd(&["SET", "lockwarden:{taken}:leaders", "x"]);
        let e = c.election("taken").unwrap();
        match e.try_campaign("v", Duration::ZERO).await {
            Err(Error::WrongType { key, .. }) => assert_eq!(key, "lockwarden:{taken}:leaders"),
            other => panic!("expected WrongType, got {other:?}"),
        }
        // The lock taken for the campaign was given back; the string stays.
        assert!(
            eventually(Duration::from_secs(5), || server.cmd(&["EXISTS", "taken"]).as_int()
                == Some(0))
            .await,
            "the campaign's lock was left behind"
        );
        assert_eq!(server.cmd(&["GET", "lockwarden:{taken}:leaders"]).as_str(), Some("x"));
        assert!(matches!(e.leader().await, Ok(None)));
        server.cmd(&["SET", "other", "x"]);
        assert!(matches!(
            c.election("other").unwrap().leader().await,
            Err(Error::WrongType { .. })
        ));
        let (s2, s3) = (RedisServer::start(), RedisServer::start());
        let q = Client::builder_for_masters([server.url(), s2.url(), s3.url()])
            .build()
            .await
            .unwrap();
        assert!(matches!(q.election("q"), Err(Error::Config(_))));
    })
    .await;
}

/// On a cluster and through Sentinel: a leader, an observer woken by the
/// (sharded) channel, a handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_run_on_a_cluster_and_through_sentinel() {
    let cluster = RedisCluster::start(3);
    let master = RedisServer::start();
    let sentinel = RedisSentinel::start(&master);
    bounded(BOUND, async {
        for url in [cluster.url(), sentinel.url()] {
            let a = app_client(&url, Duration::from_secs(5)).await;
            let b = app_client(&url, Duration::from_secs(5)).await;
            let mut observer = b.election("deploy{x}").unwrap().observe();
            let first = a.election("deploy{x}").unwrap().campaign("a").await.unwrap();
            assert_eq!(
                collect(&mut observer, 1, Duration::from_secs(5)).await,
                vec![make_leader("a", first.term())]
            );
            let eb = b.election("deploy{x}").unwrap();
            let waiting = tokio::spawn(async move { eb.campaign("b").await });
            tokio::time::sleep(Duration::from_millis(200)).await;
            first.proclaim("a2").await.unwrap();
            let t = first.term();
            first.resign().await.unwrap();
            let second = tokio::time::timeout(Duration::from_secs(3), waiting)
                .await
                .expect("the waiting campaign was woken by the resignation")
                .unwrap()
                .unwrap();
            assert!(second.term() > t);
            assert_eq!(
                collect(&mut observer, 2, Duration::from_secs(5)).await,
                vec![make_leader("a2", t), make_leader("b", second.term())],
                "{url}"
            );
            second.resign().await.unwrap();
        }
    })
    .await;
}

/// A proclaim names its term: a hold of the election's lock under the
/// leadership's owner but with another token (a later take of the same
/// owner, such as a background re-send of one of the campaign's attempts
/// taking the lock anew after this hold lapsed) is not this leadership's,
/// and the proclaim writes nothing there. Played by rewriting the hold's
/// token on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_writes_only_under_its_own_term() {
    let server = RedisServer::start();
    bounded(BOUND, async {
        let c = client(&server.url(), Duration::from_secs(30)).await;
        let election = c.election("termed").unwrap();
        let leadership = election.campaign("first").await.unwrap();
        let term = leadership.term();
        assert_eq!(election.leader().await.unwrap(), Some(make_leader("first", term)));
        server.cmd(&["HSET", "termed", ":token", &(term + 1).to_string()]);
        let r = leadership.proclaim("second").await;
        assert!(matches!(r, Err(Error::NotHeld { .. })), "{r:?}");
        assert_eq!(
            server.cmd(&["HGET", "termed", ":value"]).as_str(),
            Some("first"),
            "nothing written under another term"
        );
        assert!(leadership.is_lost(), "the leadership is marked lost");
        assert!(
            matches!(leadership.proclaim("third").await, Err(Error::NotHeld { .. })),
            "a lost leadership proclaims nothing"
        );
    })
    .await;
}
