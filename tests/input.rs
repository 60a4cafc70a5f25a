//! Bad input and unreachable servers: clear typed errors, nothing changed.
mod common;

use std::time::{Duration, Instant};

use common::*;
use lockwarden::{Client, Error, Lease, RedisErrorKind};

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_rejected_before_anything_is_sent() {
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    for bad in ["", "a{}b", "x}", "{open", "new\nline"] {
        let e = c.lock(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{bad:?}: {e}");
        assert!(!e.is_retryable());
    }
    let long = "n".repeat(lockwarden::MAX_NAME_LEN + 1);
    assert!(matches!(c.lock(&long), Err(Error::InvalidName { .. })));
    assert!(c.lock(&"n".repeat(lockwarden::MAX_NAME_LEN)).is_ok());
    assert!(server.keys("*").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_durations_are_rejected_and_change_nothing() {
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    let lock = c.lock("durations").unwrap();
    let year = Duration::from_secs(365 * 24 * 3600);
    for lease in [Duration::ZERO, year, Duration::MAX] {
        let e = lock.try_lock(Duration::ZERO, lease).await.unwrap_err();
        assert!(matches!(e, Error::InvalidDuration { what: "lease", .. }), "{e}");
        assert!(matches!(
            lock.lock_with_lease(lease).await,
            Err(Error::InvalidDuration { .. })
        ));
    }
    for wait in [year, Duration::MAX] {
        let e = lock.try_lock(wait, Lease::Watchdog).await.unwrap_err();
        assert!(matches!(e, Error::InvalidDuration { what: "wait", .. }), "{e}");
    }
    assert!(server.keys("*").is_empty(), "nothing written");
    for (lease, ok) in [
        (Duration::ZERO, false),
        (Duration::from_millis(50), false),
        (year, false),
        (Duration::from_millis(100), true),
    ] {
        let r = Client::builder(&server.url()).watchdog_lease(lease).build().await;
        assert_eq!(r.is_ok(), ok, "watchdog lease {lease:?}: {r:?}");
    }
    let r = Client::builder(&server.url())
        .command_timeout(Duration::ZERO)
        .build()
        .await;
    assert!(matches!(
        r,
        Err(Error::InvalidDuration {
            what: "command timeout",
            ..
        })
    ));
    for (patience, ok) in [(Duration::ZERO, false), (year, false), (Duration::from_millis(1), true)] {
        let r = Client::builder(&server.url()).wake_patience(patience).build().await;
        assert_eq!(r.is_ok(), ok, "wake patience {patience:?}: {r:?}");
        if let Err(e) = r {
            assert!(
                matches!(
                    e,
                    Error::InvalidDuration {
                        what: "wake patience",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_are_config_errors() {
    for url in ["not a url", "http://127.0.0.1:6379", "redis-sentinel://127.0.0.1:1"] {
        let r = Client::connect(url).await;
        assert!(matches!(r, Err(Error::Config(_))), "{url}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_an_error_and_left_untouched() {
    let server = RedisServer::start();
    let c = client(&server.url(), LONG).await;
    server.cmd(&["SET", "occupied", "precious"]);
    server.cmd(&["LPUSH", "lockwarden:{tokenless}:token", "x"]);
    let lock = c.lock("occupied").unwrap();
    let e = lock.lock().await.unwrap_err();
    assert!(matches!(&e, Error::WrongType { key, .. } if key == "occupied"), "{e}");
    assert!(matches!(
        lock.try_lock(Duration::from_millis(100), LONG).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(lock.force_unlock().await, Err(Error::WrongType { .. })));
    assert!(matches!(
        lock.unlock().await,
        Err(Error::NotHeld { .. } | Error::WrongType { .. })
    ));
    assert!(matches!(lock.is_locked().await, Err(Error::WrongType { .. })));
    assert_eq!(server.cmd(&["GET", "occupied"]).as_str(), Some("precious"));
    assert_eq!(server.cmd(&["PTTL", "occupied"]).as_int(), Some(-1));
    let e = c.lock("tokenless").unwrap().lock().await.unwrap_err();
    assert!(matches!(e, Error::WrongType { .. }), "{e}");
    assert_eq!(
        server.cmd(&["EXISTS", "tokenless"]).as_int(),
        Some(0),
        "no half-made lock"
    );
    assert_eq!(server.cmd(&["LLEN", "lockwarden:{tokenless}:token"]).as_int(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_within_the_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    // Without retries: at once.
    let t = Instant::now();
    let r = Client::builder(&url).retry_transient_for(Duration::ZERO).build().await;
    assert!(matches!(r, Err(Error::Connection { .. })), "{r:?}");
    let e = r.unwrap_err();
    assert!(e.is_retryable());
    assert!(
        e.to_string().contains(&format!("127.0.0.1:{port}")),
        "names the server: {e}"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    // With retries: the error once they are over (not before: the server
    // may be restarting), within that time and one connect timeout.
    let t = Instant::now();
    let r = Client::builder(&url)
        .retry_transient_for(Duration::from_secs(1))
        .build()
        .await;
    assert!(matches!(r, Err(Error::Connection { .. })), "{r:?}");
    assert!(t.elapsed() >= Duration::from_millis(900), "{:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_or_hangs_mid_run_is_an_error_within_the_timeout() {
    bounded(Duration::from_secs(30), async {
        let mut server = RedisServer::start();
        let timeout = Duration::from_millis(500);
        // Without retries: the first failure ends `lock()`.
        let c = Client::builder(&server.url())
            .command_timeout(timeout)
            .retry_transient_for(Duration::ZERO)
            .build()
            .await
            .unwrap();
        let lock = c.lock("fragile").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();

        server.pause();
        let t = Instant::now();
        let e = lock.try_lock(Duration::ZERO, LONG).await.unwrap_err();
        assert!(e.is_outcome_unknown(), "{e}");
        assert!(
            t.elapsed() < timeout + Duration::from_millis(300),
            "hung for {:?}",
            t.elapsed()
        );
        // A wait retries until it is over, then says why.
        let t = Instant::now();
        let e = lock.try_lock(Duration::from_secs(2), LONG).await.unwrap_err();
        assert!(e.is_outcome_unknown(), "{e}");
        assert!(
            t.elapsed() < Duration::from_secs(2) + timeout + Duration::from_millis(300),
            "hung for {:?}",
            t.elapsed()
        );
        server.resume();

        server.stop();
        let t = Instant::now();
        let e = lock.lock().await.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(
            t.elapsed() < timeout + Duration::from_millis(300),
            "hung for {:?}",
            t.elapsed()
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_permissions_are_a_typed_error() {
    let server = RedisServer::start();
    let r = server.cmd(&[
        "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
    ]);
    assert_eq!(r.as_str(), Some("OK"));
    let c = Client::connect(&format!("redis://limited:pw@127.0.0.1:{}", server.port))
        .await
        .unwrap();
    let e = c.lock("acl").unwrap().lock().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Redis {
                kind: RedisErrorKind::NoPermission,
                ..
            }
        ),
        "{e}"
    );
    assert!(!e.is_retryable());
    let bad = Client::connect(&format!("redis://limited:wrong@127.0.0.1:{}", server.port))
        .await
        .unwrap_err();
    assert!(
        matches!(
            bad,
            Error::Redis {
                kind: RedisErrorKind::Auth,
                ..
            }
        ),
        "{bad}"
    );
}
