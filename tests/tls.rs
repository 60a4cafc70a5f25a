//! TLS (`rediss://`) against real `redis-server --tls-port` processes, with
//! certificates this test makes: a CA, a server certificate for 127.0.0.1,
//! a client certificate; and a second CA nobody trusts.
#![cfg(feature = "tls")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use lockwarden::{Client, Error};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

const LONG: Duration = Duration::from_secs(30);

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses) and its key, PEM.
    fn issue(&self, names: &[&str], client: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("client"));
        if client {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Files a TLS server reads, in a temp dir removed on drop.
struct Files {
    dir: std::path::PathBuf,
}

impl Files {
    fn new() -> Files {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lockwarden-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Files { dir }
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server with a plain port (for the harness) and a TLS port, whose
/// certificate `ca` issued for `names`; `require_client` asks clients for a
/// certificate signed by `ca`.
fn tls_server(files: &Files, ca: &Ca, names: &[&str], require_client: bool) -> (RedisServer, u16) {
    let (cert, key) = ca.issue(names, false);
    let n = free_port();
    let cert_file = files.write(&format!("server-{n}.pem"), &cert);
    let key_file = files.write(&format!("server-{n}.key"), &key);
    let ca_file = files.write(&format!("ca-{n}.pem"), &ca.pem());
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert_file,
        "--tls-key-file",
        &key_file,
        "--tls-ca-cert-file",
        &ca_file,
        "--tls-auth-clients",
        if require_client { "yes" } else { "no" },
    ]);
    (server, tls_port.parse().unwrap())
}

async fn lock_and_unlock(c: &Client) {
    let lock = c.lock("tls").unwrap();
    let g = lock.lock().await.unwrap();
    assert!(g.token() > 0);
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_over_tls_works_with_the_servers_ca() {
    bounded(Duration::from_secs(30), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let (server, port) = tls_server(&files, &ca, &["127.0.0.1", "localhost"], false);
        let c = Client::builder(&format!("rediss://127.0.0.1:{port}"))
            .tls_ca_pem(ca.pem())
            .build()
            .await
            .unwrap();
        lock_and_unlock(&c).await;
        // Waiting (pub/sub over TLS too): a second client is woken by the unlock.
        let other = Client::builder(&format!("rediss://localhost:{port}"))
            .tls_ca_pem(ca.pem())
            .build()
            .await
            .unwrap();
        let g = c.lock("shared").unwrap().lock().await.unwrap();
        let waiter = {
            let lock = other.lock("shared").unwrap();
            tokio::spawn(async move { lock.try_lock(Duration::from_secs(10), LONG).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        g.unlock().await.unwrap();
        let got = waiter.await.unwrap().unwrap().expect("woken over TLS");
        got.unlock().await.unwrap();
        // The plain port saw the same data: it is one server.
        assert!(server.keys("lockwarden:*:token").len() >= 2);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_client_cannot_verify_is_refused() {
    bounded(Duration::from_secs(30), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let stranger = Ca::new("nobody trusts this CA");
        // Signed by a CA the client does not trust.
        let (_a, untrusted) = tls_server(&files, &stranger, &["127.0.0.1"], false);
        let e = Client::builder(&format!("rediss://127.0.0.1:{untrusted}"))
            .tls_ca_pem(ca.pem())
            .connect_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Tls { .. }), "{e:?}");
        assert!(!e.is_retryable(), "{e}");
        // Trusted CA, but issued for another name.
        let (_b, elsewhere) = tls_server(&files, &ca, &["other.example"], false);
        let e = Client::builder(&format!("rediss://127.0.0.1:{elsewhere}"))
            .tls_ca_pem(ca.pem())
            .connect_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Tls { .. }), "{e:?}");
        // The system roots do not know the test CA either.
        let (_c, port) = tls_server(&files, &ca, &["127.0.0.1"], false);
        let e = Client::builder(&format!("rediss://127.0.0.1:{port}"))
            .connect_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Tls { .. }), "{e:?}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_client_certificates_refuses_a_client_without_one() {
    bounded(Duration::from_secs(30), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let (_server, port) = tls_server(&files, &ca, &["127.0.0.1"], true);
        let url = format!("rediss://127.0.0.1:{port}");
        let r = Client::builder(&url)
            .tls_ca_pem(ca.pem())
            .connect_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_secs(1))
            .build()
            .await;
        let e = r.expect_err("refused without a client certificate");
        assert!(
            matches!(&e, Error::Tls { message, .. } if message.contains("CertificateRequired")),
            "{e:?}"
        );
        assert!(!e.is_retryable());
        let (cert, key) = ca.issue(&["lockwarden-client"], true);
        let c = Client::builder(&url)
            .tls_ca_pem(ca.pem())
            .tls_client_cert_pem(cert, key)
            .build()
            .await
            .unwrap();
        lock_and_unlock(&c).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_tls_masters() {
    bounded(Duration::from_secs(30), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let servers: Vec<(RedisServer, u16)> = (0..3).map(|_| tls_server(&files, &ca, &["127.0.0.1"], false)).collect();
        let c = Client::builder_for_masters(servers.iter().map(|(_, p)| format!("rediss://127.0.0.1:{p}")))
            .tls_ca_pem(ca.pem())
            .build()
            .await
            .unwrap();
        lock_and_unlock(&c).await;
        for (s, _) in &servers {
            assert_eq!(s.keys("lockwarden:{tls}:token").len(), 1);
        }
        // Without the CA no master can be verified: the build says so.
        let e = Client::builder_for_masters(servers.iter().map(|(_, p)| format!("rediss://127.0.0.1:{p}")))
            .connect_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("TLS handshake failed"), "{e}");
        assert!(!e.is_retryable(), "{e}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_with_a_plain_url_are_a_config_error() {
    let e = Client::builder("redis://127.0.0.1:1")
        .tls_ca_pem("-----BEGIN CERTIFICATE-----\n")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(&e, Error::Config(m) if m.contains("rediss://")), "{e}");
    let e = Client::builder("rediss://127.0.0.1:1")
        .tls_ca_pem("not a certificate")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

#[test]
fn the_command_takes_a_ca_and_a_client_certificate() {
    let files = Files::new();
    let ca = Ca::new("lockwarden test CA");
    let (_server, port) = tls_server(&files, &ca, &["127.0.0.1"], true);
    let (cert, key) = ca.issue(&["lockwarden-client"], true);
    let (ca_file, cert_file, key_file) = (
        files.write("cli-ca.pem", &ca.pem()),
        files.write("cli-client.pem", &cert),
        files.write("cli-client.key", &key),
    );
    let url = format!("rediss://127.0.0.1:{port}");
    let run = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockwarden"));
        c.env_remove("LOCKWARDEN_REDIS").args(["--redis", &url]).args(extra);
        c.args(["run", "tls-cli", "--wait", "5s", "--", "true"]);
        c.output().unwrap()
    };
    let ok = run(&["--tls-ca", &ca_file, "--tls-cert", &cert_file, "--tls-key", &key_file]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let refused = run(&[]);
    assert_eq!(
        refused.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let usage = run(&["--tls-cert", &cert_file]);
    assert_eq!(usage.status.code(), Some(64), "--tls-cert without --tls-key");
}

/// Three TLS primaries with a TLS cluster bus: CLUSTER SLOTS then names
/// their TLS ports, which the client follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_over_tls() {
    bounded(Duration::from_secs(60), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let (cert, key) = ca.issue(&["127.0.0.1"], false);
        let (cert_file, key_file, ca_file) = (
            files.write("node.pem", &cert),
            files.write("node.key", &key),
            files.write("ca.pem", &ca.pem()),
        );
        let nodes: Vec<(RedisServer, u16)> = (0..3)
            .map(|_| {
                let tls_port = free_port();
                let s = RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--tls-port",
                    &tls_port.to_string(),
                    "--tls-cluster",
                    "yes",
                    "--tls-cert-file",
                    &cert_file,
                    "--tls-key-file",
                    &key_file,
                    "--tls-ca-cert-file",
                    &ca_file,
                    "--tls-auth-clients",
                    "no",
                ]);
                (s, tls_port)
            })
            .collect();
        for (i, (node, _)) in nodes.iter().enumerate() {
            let (lo, hi) = (16384 * i / 3, 16384 * (i + 1) / 3 - 1);
            assert_eq!(
                node.cmd(&["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()])
                    .as_str(),
                Some("OK")
            );
            if i > 0 {
                // The bus listens next to the TLS port when the bus is TLS.
                let r = node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &nodes[0].1.to_string()]);
                assert_eq!(r.as_str(), Some("OK"), "{r:?}");
            }
        }
        let formed = || {
            nodes.iter().all(|(n, _)| {
                n.cmd(&["CLUSTER", "INFO"])
                    .as_str()
                    .unwrap_or("")
                    .contains("cluster_state:ok")
            })
        };
        assert!(eventually(Duration::from_secs(30), formed).await, "the cluster formed");
        let seeds: Vec<String> = nodes[1..].iter().map(|(_, p)| format!("node=127.0.0.1:{p}")).collect();
        let url = format!("rediss-cluster://127.0.0.1:{}?{}", nodes[0].1, seeds.join("&"));
        let c = Client::builder(&url).tls_ca_pem(ca.pem()).build().await.unwrap();
        // Names in every slot range, so every node is used.
        for name in ["a", "b", "c", "d", "e", "f"] {
            let g = c.lock(name).unwrap().lock().await.unwrap();
            g.unlock().await.unwrap();
        }
        let used = nodes
            .iter()
            .filter(|(n, _)| !n.keys("lockwarden:*:token").is_empty())
            .count();
        assert!(used >= 2, "locks on {used} nodes");
    })
    .await
}

/// A master and a sentinel, both speaking TLS: the client asks the
/// sentinel over TLS and locks on the master it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls() {
    bounded(Duration::from_secs(60), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let (master, master_tls) = tls_server(&files, &ca, &["127.0.0.1"], false);
        let (cert, key) = ca.issue(&["127.0.0.1"], false);
        let sentinel_tls = free_port();
        let extra = format!(
            "tls-port {sentinel_tls}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-auth-clients no\ntls-replication yes\n",
            files.write("sentinel.pem", &cert),
            files.write("sentinel.key", &key),
            files.write("sentinel-ca.pem", &ca.pem()),
        );
        let sentinel = RedisSentinel::start_with(master_tls, &extra);
        assert!(
            eventually(Duration::from_secs(10), || sentinel.master_port() == Some(master_tls)).await,
            "the sentinel knows the master"
        );
        let url = format!("rediss-sentinel://127.0.0.1:{sentinel_tls}/0?sentinelServiceName=mymaster");
        let c = Client::builder(&url).tls_ca_pem(ca.pem()).build().await.unwrap();
        lock_and_unlock(&c).await;
        assert_eq!(master.keys("lockwarden:{tls}:token").len(), 1);
    })
    .await
}
