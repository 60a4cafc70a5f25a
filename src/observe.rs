//! Metrics, through the `metrics` facade (feature `metrics`, on by default).
//!
//! Every metric lockwarden records is named here; the README has the table.
//! Without the feature these functions compile to nothing. With it and no
//! exporter installed, the facade's no-op recorder takes them.

use std::time::Duration;

/// Labels shared by a lock's metrics.
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Labels<'a> {
    pub kind: &'static str,
    /// The lock's name, only when the client enables per-lock labels.
    pub lock: Option<&'a str>,
}

impl<'a> Labels<'a> {
    /// The labels of a lock of kind `kind` named `name`: its kind, and its
    /// name when the client asks for it. `with_name`: the client's
    /// `metric_lock_names` setting.
    pub(crate) fn of(kind: &'static str, name: &'a str, with_name: bool) -> Labels<'a> {
        Labels {
            kind,
            lock: with_name.then_some(name),
        }
    }
}

#[cfg(feature = "metrics")]
mod imp {
    use super::*;
    use metrics::{counter, histogram};

    macro_rules! with_lock {
        ($macro:ident, $name:expr, $l:expr $(, $k:literal => $v:expr)*) => {
            match $l.lock {
                Some(lock) => $macro!($name, "kind" => $l.kind $(, $k => $v)*, "lock" => lock.to_string()),
                None => $macro!($name, "kind" => $l.kind $(, $k => $v)*),
            }
        };
    }

    /// `with_lock!` for the metrics of every acquire and release, whose
    /// labels are all literals: without the lock's name, each kind's key
    /// is a static one (the facade builds the others, label list and all,
    /// on every call).
    macro_rules! each_kind {
        ($macro:ident, $name:literal, $l:expr $(, $k:literal => $v:literal)*) => {
            match ($l.lock, $l.kind) {
                (None, "reentrant") => $macro!($name, "kind" => "reentrant" $(, $k => $v)*),
                (None, "fair") => $macro!($name, "kind" => "fair" $(, $k => $v)*),
                (None, "read") => $macro!($name, "kind" => "read" $(, $k => $v)*),
                (None, "write") => $macro!($name, "kind" => "write" $(, $k => $v)*),
                (None, "semaphore") => $macro!($name, "kind" => "semaphore" $(, $k => $v)*),
                (None, "redisson") => $macro!($name, "kind" => "redisson" $(, $k => $v)*),
                _ => with_lock!($macro, $name, $l $(, $k => $v)*),
            }
        };
    }

    pub(crate) fn acquired(l: Labels<'_>, waited: Duration) {
        each_kind!(counter, "lockwarden_acquisitions_total", l).increment(1);
        each_kind!(histogram, "lockwarden_acquire_wait_seconds", l, "outcome" => "acquired").record(waited);
    }

    pub(crate) fn not_acquired(l: Labels<'_>, waited: Duration, reason: &'static str) {
        let outcome = if reason == "timeout" { "timed_out" } else { "error" };
        with_lock!(counter, "lockwarden_acquire_failures_total", l, "reason" => reason).increment(1);
        with_lock!(histogram, "lockwarden_acquire_wait_seconds", l, "outcome" => outcome).record(waited);
    }

    pub(crate) fn released(l: Labels<'_>, held: Duration) {
        each_kind!(counter, "lockwarden_releases_total", l).increment(1);
        each_kind!(histogram, "lockwarden_hold_seconds", l).record(held);
    }

    pub(crate) fn wakeup(l: Labels<'_>, source: &'static str) {
        with_lock!(counter, "lockwarden_wakeups_total", l, "source" => source).increment(1);
    }

    pub(crate) fn acquire_retry(l: Labels<'_>, reason: &'static str) {
        with_lock!(counter, "lockwarden_acquire_retries_total", l, "reason" => reason).increment(1);
    }

    pub(crate) fn renewals(ok: u64, failed: u64) {
        if ok > 0 {
            counter!("lockwarden_renewals_total", "result" => "ok").increment(ok);
        }
        if failed > 0 {
            counter!("lockwarden_renewals_total", "result" => "failed").increment(failed);
        }
    }

    pub(crate) fn at_risk() {
        counter!("lockwarden_holds_at_risk_total").increment(1);
    }

    pub(crate) fn lost(reason: &'static str) {
        counter!("lockwarden_locks_lost_total", "reason" => reason).increment(1);
    }

    pub(crate) fn quorum_attempt(outcome: &'static str, validity: Option<Duration>) {
        counter!("lockwarden_quorum_attempts_total", "outcome" => outcome).increment(1);
        if let Some(v) = validity {
            histogram!("lockwarden_acquire_validity_seconds").record(v);
        }
    }

    pub(crate) fn node_failure(node: usize) {
        counter!("lockwarden_node_failures_total", "node" => node.to_string()).increment(1);
    }

    pub(crate) fn noscript() {
        counter!("lockwarden_noscript_reloads_total").increment(1);
    }

    /// A gauge of one client (labelled with its id), its key made once.
    pub(crate) struct ClientGauge(metrics::Key);

    static GAUGE_METADATA: metrics::Metadata<'static> =
        metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

    impl ClientGauge {
        fn new(name: &'static str, client: &str) -> ClientGauge {
            ClientGauge(metrics::Key::from_parts(
                name,
                vec![metrics::Label::new("client", client.to_string())],
            ))
        }

        /// `lockwarden_locks_held` of `client`.
        pub(crate) fn held(client: &str) -> ClientGauge {
            ClientGauge::new("lockwarden_locks_held", client)
        }

        /// `lockwarden_waiting_tasks` of `client`.
        pub(crate) fn waiting(client: &str) -> ClientGauge {
            ClientGauge::new("lockwarden_waiting_tasks", client)
        }

        fn gauge(&self) -> metrics::Gauge {
            metrics::with_recorder(|r| r.register_gauge(&self.0, &GAUGE_METADATA))
        }
    }

    pub(crate) fn held(g: &ClientGauge, n: usize) {
        g.gauge().set(n as f64);
    }

    pub(crate) fn waiting(g: &ClientGauge, delta: f64) {
        g.gauge().increment(delta);
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use super::*;
    pub(crate) fn acquired(_: Labels<'_>, _: Duration) {}
    pub(crate) fn not_acquired(_: Labels<'_>, _: Duration, _: &'static str) {}
    pub(crate) fn released(_: Labels<'_>, _: Duration) {}
    pub(crate) fn wakeup(_: Labels<'_>, _: &'static str) {}
    pub(crate) fn acquire_retry(_: Labels<'_>, _: &'static str) {}
    pub(crate) fn renewals(_: u64, _: u64) {}
    pub(crate) fn lost(_: &'static str) {}
    pub(crate) fn at_risk() {}
    pub(crate) fn noscript() {}
    pub(crate) fn quorum_attempt(_: &'static str, _: Option<Duration>) {}
    pub(crate) fn node_failure(_: usize) {}
    pub(crate) struct ClientGauge;
    impl ClientGauge {
        pub(crate) fn held(_: &str) -> ClientGauge {
            ClientGauge
        }
        pub(crate) fn waiting(_: &str) -> ClientGauge {
            ClientGauge
        }
    }
    pub(crate) fn held(_: &ClientGauge, _: usize) {}
    pub(crate) fn waiting(_: &ClientGauge, _: f64) {}
}

pub(crate) use imp::*;

/// Counts a task as waiting for as long as it lives.
pub(crate) struct Waiting<'a>(pub &'a ClientGauge);

impl<'a> Waiting<'a> {
    pub(crate) fn enter(gauge: &'a ClientGauge) -> Waiting<'a> {
        waiting(gauge, 1.0);
        Waiting(gauge)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        waiting(self.0, -1.0);
    }
}

/// The failure class of an error, as a metric label.
pub(crate) fn reason(e: &crate::error::Error) -> &'static str {
    use crate::error::Error as E;
    match e {
        E::Connection { .. } => "connection",
        E::Timeout { .. } => "redis_timeout",
        E::WrongType { .. } => "wrong_type",
        E::WrongKind { .. } => "wrong_kind",
        E::HeldByRedisson { .. } => "redisson",
        E::InvalidName { .. } | E::InvalidDuration { .. } | E::Config(_) => "invalid_input",
        E::NotHeld { .. } => "not_held",
        E::QuorumNotReached { .. } => "quorum",
        _ => "redis",
    }
}
