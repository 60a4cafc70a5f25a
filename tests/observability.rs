//! Metrics and tracing events, recorded against a real server.
mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::*;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use parking_lot::Mutex;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

const LONG: Duration = Duration::from_secs(30);

/// Events at INFO or above from lockwarden: (level, message).
type Events = Arc<Mutex<Vec<(tracing::Level, String)>>>;

struct Capture(Events);

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() <= tracing::Level::INFO && meta.target().starts_with("lockwarden") {
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().push((*meta.level(), m.0));
        }
    }
}

/// A recording metrics backend that keeps values (metrics-util's debugging
/// recorder resets every value, gauges included, on each snapshot).
struct TestRecorder(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0.get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0.get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0.get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

struct Recorded {
    metrics: Arc<Registry<Key, AtomicStorage>>,
    events: Events,
}

/// The process-wide recorder and subscriber, installed once; tests take
/// `SERIAL` so their deltas do not mix.
fn recorded() -> &'static Recorded {
    static R: OnceLock<Recorded> = OnceLock::new();
    R.get_or_init(|| {
        let metrics = Arc::new(Registry::atomic());
        metrics::set_global_recorder(TestRecorder(metrics.clone())).expect("install the recorder");
        let events: Events = Arc::default();
        let subscriber = tracing_subscriber::registry().with(Capture(events.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("install the subscriber");
        Recorded { metrics, events }
    })
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A recorded value.
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// One recorded metric: name, labels, value.
type Entry = (String, Vec<(String, String)>, Value);

/// The recorded values now. Reading changes nothing.
struct Snap(Vec<Entry>);

fn snap() -> Snap {
    let r = &recorded().metrics;
    let labels = |k: &Key| {
        k.labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    for (k, c) in r.get_counter_handles() {
        out.push((
            k.name().to_string(),
            labels(&k),
            Value::Counter(c.load(std::sync::atomic::Ordering::SeqCst)),
        ));
    }
    for (k, g) in r.get_gauge_handles() {
        out.push((
            k.name().to_string(),
            labels(&k),
            Value::Gauge(f64::from_bits(g.load(std::sync::atomic::Ordering::SeqCst))),
        ));
    }
    for (k, h) in r.get_histogram_handles() {
        out.push((k.name().to_string(), labels(&k), Value::Histogram(h.data())));
    }
    Snap(out)
}

impl Snap {
    fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a Value> + 'a {
        self.0
            .iter()
            .filter(move |(n, ls, _)| {
                n == name && labels.iter().all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|v| if let Value::Counter(c) = v { *c } else { 0 })
            .sum()
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels)
            .map(|v| if let Value::Gauge(g) = v { *g } else { 0.0 })
            .sum()
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .flat_map(|v| if let Value::Histogram(h) = v { h.clone() } else { vec![] })
            .collect()
    }

    /// Samples of a histogram recorded since `before`.
    fn new_samples(&self, before: &Snap, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let mut old = before.histogram(name, labels);
        let mut new = Vec::new();
        for x in self.histogram(name, labels) {
            match old.iter().position(|o| *o == x) {
                Some(i) => {
                    old.swap_remove(i);
                }
                None => new.push(x),
            }
        }
        new
    }
}

fn events_since(mark: usize) -> Vec<(tracing::Level, String)> {
    recorded().events.lock()[mark..].to_vec()
}

fn event_mark() -> usize {
    recorded().events.lock().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_lock_and_unlock_records_one_acquisition_and_one_release() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    let lock = c.lock("observed").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap(); // scripts warm, metrics registered
    let (before, mark) = (snap(), event_mark());
    lock.lock().await.unwrap().unlock().await.unwrap();
    let after = snap();
    let k = [("kind", "reentrant")];
    assert_eq!(
        after.counter("lockwarden_acquisitions_total", &k) - before.counter("lockwarden_acquisitions_total", &k),
        1
    );
    assert_eq!(
        after.counter("lockwarden_releases_total", &k) - before.counter("lockwarden_releases_total", &k),
        1
    );
    assert_eq!(
        after
            .new_samples(&before, "lockwarden_acquire_wait_seconds", &[("outcome", "acquired")])
            .len(),
        1
    );
    assert_eq!(after.new_samples(&before, "lockwarden_hold_seconds", &k).len(), 1);
    assert!(
        events_since(mark).is_empty(),
        "nothing at info or above on the hot path: {:?}",
        events_since(mark)
    );
    // Names are labels only when asked for.
    assert!(after.0.iter().all(|(_, ls, _)| ls.iter().all(|(k, _)| k != "lock")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_try_lock_records_a_timed_out_wait_of_its_budget() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    let _held = c.lock("budget").unwrap().lock().await.unwrap();
    let lock = c.lock("budget").unwrap();
    let before = snap();
    let r = tokio::spawn(async move { lock.try_lock(Duration::from_millis(300), LONG).await.unwrap().is_none() });
    assert!(r.await.unwrap());
    let after = snap();
    let waits = after.new_samples(&before, "lockwarden_acquire_wait_seconds", &[("outcome", "timed_out")]);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(waits[0] >= 0.3 && waits[0] < 0.45, "waited {}", waits[0]);
    let f = [("reason", "timeout")];
    assert_eq!(
        after.counter("lockwarden_acquire_failures_total", &f)
            - before.counter("lockwarden_acquire_failures_total", &f),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_woken_by_unlock_counts_as_a_pubsub_wakeup() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    let holder = c.lock("woken").unwrap().lock().await.unwrap();
    let before = snap();
    let lock = c.lock("woken").unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() });
    assert!(eventually(Duration::from_secs(5), || !server.pubsub_channels().is_empty()).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.unlock().await.unwrap();
    waiter.await.unwrap();
    let after = snap();
    let p = [("source", "pubsub")];
    let t = [("source", "lease_timeout")];
    assert!(
        after.counter("lockwarden_wakeups_total", &p) > before.counter("lockwarden_wakeups_total", &p),
        "pub/sub wake-up counted"
    );
    assert_eq!(
        after.counter("lockwarden_wakeups_total", &t),
        before.counter("lockwarden_wakeups_total", &t),
        "not a timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_while_held_records_one_lost_lock_and_one_warning() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    // Renewals every second: the one after the FLUSHALL finds the hold
    // gone, long before its 3 s validity could end first on a loaded
    // machine (a loss then recorded as "expired"; seen once with 600 ms).
    let c = client(&server.url(), Duration::from_secs(3)).await;
    let guard = c.lock("flushed").unwrap().lock().await.unwrap();
    let (before, mark) = (snap(), event_mark());
    server.flushall();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost");
    let _ = guard.unlock().await; // NotHeld: no second loss, no second warning
    let after = snap();
    let g = [("reason", "gone")];
    assert_eq!(
        after.counter("lockwarden_locks_lost_total", &g) - before.counter("lockwarden_locks_lost_total", &g),
        1
    );
    assert_eq!(
        after.counter("lockwarden_locks_lost_total", &[]) - before.counter("lockwarden_locks_lost_total", &[]),
        1
    );
    let warns: Vec<_> = events_since(mark)
        .into_iter()
        .filter(|(l, _)| *l == tracing::Level::WARN)
        .collect();
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(warns[0].1.contains("lost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_and_waiting_gauges_return_to_zero() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    let id = [("client", c.id())];
    let holder = c.lock("gauged").unwrap().lock().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let lock = c.lock("gauged").unwrap();
        tasks.push(tokio::spawn(async move {
            lock.lock().await.unwrap().unlock().await.unwrap()
        }));
    }
    assert!(
        eventually(Duration::from_secs(5), || snap().gauge("lockwarden_waiting_tasks", &id)
            == 3.0)
        .await,
        "three waiting"
    );
    assert_eq!(snap().gauge("lockwarden_locks_held", &id), 1.0);
    holder.unlock().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let s = snap();
    assert_eq!(s.gauge("lockwarden_waiting_tasks", &id), 0.0);
    assert_eq!(s.gauge("lockwarden_locks_held", &id), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_name_labels_are_opt_in() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let c = lockwarden::Client::builder(&server.url())
        .metric_lock_names(true)
        .build()
        .await
        .unwrap();
    let before = snap();
    c.lock("named").unwrap().lock().await.unwrap().unlock().await.unwrap();
    let after = snap();
    let l = [("lock", "named")];
    assert_eq!(
        after.counter("lockwarden_acquisitions_total", &l) - before.counter("lockwarden_acquisitions_total", &l),
        1
    );
    assert_eq!(
        after.counter("lockwarden_releases_total", &l) - before.counter("lockwarden_releases_total", &l),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_during_a_wait_are_counted_and_warned_once_per_run_of_failures() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let c = lockwarden::Client::builder(&server.url())
        .command_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let lock = c.lock("retried").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    let (before, mark) = (snap(), event_mark());
    server.pause();
    let pid = server.pid();
    let resumer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(600));
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
    });
    let g = lock.try_lock(Duration::from_secs(5), LONG).await.unwrap().unwrap();
    resumer.join().unwrap();
    g.unlock().await.unwrap();
    let after = snap();
    let retries = after.counter("lockwarden_acquire_retries_total", &[])
        - before.counter("lockwarden_acquire_retries_total", &[]);
    assert!(retries >= 2, "{retries} retries counted");
    let warns: Vec<_> = events_since(mark)
        .into_iter()
        .filter(|(l, m)| *l == tracing::Level::WARN && m.contains("retrying"))
        .collect();
    assert_eq!(warns.len(), 1, "one warning for the run of failures: {warns:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_at_risk_is_counted_and_warned_once() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let c = lockwarden::Client::builder(&server.url())
        .watchdog_lease(lease)
        .command_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let guard = c.lock("risky").unwrap().lock().await.unwrap();
    let (before, mark) = (snap(), event_mark());
    server.pause();
    tokio::time::timeout(lease, guard.at_risk()).await.expect("at risk");
    // Observed by the guard and by the watchdog's next tick: still one.
    tokio::time::sleep(lease / 3).await;
    server.resume();
    // That tick's renewal failed, and the next one comes after the
    // validity ended: whatever it confirms, the hold is lost (a
    // confirmation heard after the validity ended revives nothing; the
    // server's key may have lapsed by then too).
    let why = tokio::time::timeout(lease, guard.lost()).await.expect("lost");
    assert!(
        matches!(
            why,
            lockwarden::LossReason::RenewalFailed | lockwarden::LossReason::Gone
        ),
        "{why:?}"
    );
    let after = snap();
    assert_eq!(
        after.counter("lockwarden_holds_at_risk_total", &[]) - before.counter("lockwarden_holds_at_risk_total", &[]),
        1
    );
    let warns: Vec<_> = events_since(mark)
        .into_iter()
        .filter(|(l, m)| *l == tracing::Level::WARN && m.contains("at risk"))
        .collect();
    assert_eq!(warns.len(), 1, "{warns:?}");
    // Its release still frees what the late renewal kept on the server.
    let _ = guard.unlock().await;
    assert!(eventually(lease, || server.keys("risky").is_empty()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_looking_again_at_its_wake_patience_counts_as_a_recheck() {
    let _serial = SERIAL.lock().await;
    recorded();
    let server = RedisServer::start();
    let holder = client(&server.url(), LONG).await;
    let held = holder.lock("patient").unwrap().lock().await.unwrap();
    let c = lockwarden::Client::builder(&server.url())
        .wake_patience(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let before = snap();
    let r = [("source", "recheck")];
    let t = [("source", "lease_timeout")];
    let lock = c.lock("patient").unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() });
    // First in line, the waiter looks again every 50 ms while the lock
    // stays held for 30 s.
    assert!(
        eventually(Duration::from_secs(5), || snap()
            .counter("lockwarden_wakeups_total", &r)
            >= before.counter("lockwarden_wakeups_total", &r) + 3)
        .await,
        "re-checks counted"
    );
    assert_eq!(
        snap().counter("lockwarden_wakeups_total", &t),
        before.counter("lockwarden_wakeups_total", &t),
        "not the lease bound"
    );
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
}
