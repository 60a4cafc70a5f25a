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
    tls_server_presenting(files, &cert, &key, &ca.pem(), require_client)
}

/// A server whose TLS port presents `cert` (PEM, with its `key`) and asks
/// clients, if `require_client`, for a certificate signed by `client_ca`.
fn tls_server_presenting(
    files: &Files,
    cert: &str,
    key: &str,
    client_ca: &str,
    require_client: bool,
) -> (RedisServer, u16) {
    let n = free_port();
    let cert_file = files.write(&format!("server-{n}.pem"), cert);
    let key_file = files.write(&format!("server-{n}.key"), key);
    let ca_file = files.write(&format!("ca-{n}.pem"), client_ca);
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
            matches!(&e, Error::Tls { message, .. } if message.contains("the server requires a client certificate: give one")),
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

/// A self-signed certificate for 127.0.0.1 made the way people make one
/// (`openssl req -x509`, which marks it CA:TRUE), and its key, PEM.
fn openssl_self_signed(files: &Files, tag: &str) -> (String, String) {
    let cert = files.dir.join(format!("{tag}.pem"));
    let key = files.dir.join(format!("{tag}.key"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args([
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .output()
        .expect("openssl runs (apt-get install openssl)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (
        std::fs::read_to_string(cert).unwrap(),
        std::fs::read_to_string(key).unwrap(),
    )
}

/// `pem` with the last byte of its signature changed, through `openssl x509`
/// (which does not check signatures when converting).
fn tampered(files: &Files, pem: &str) -> String {
    let (pem_file, der_file) = (files.write("to-tamper.pem", pem), files.dir.join("tampered.der"));
    let convert = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("openssl").arg("x509").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    convert(&[
        "-in".as_ref(),
        pem_file.as_ref(),
        "-outform".as_ref(),
        "DER".as_ref(),
        "-out".as_ref(),
        der_file.as_os_str(),
    ]);
    let mut der = std::fs::read(&der_file).unwrap();
    *der.last_mut().unwrap() ^= 0x5a;
    std::fs::write(&der_file, der).unwrap();
    let out_file = files.dir.join("tampered.pem");
    convert(&[
        "-inform".as_ref(),
        "DER".as_ref(),
        "-in".as_ref(),
        der_file.as_os_str(),
        "-out".as_ref(),
        out_file.as_os_str(),
    ]);
    std::fs::read_to_string(out_file).unwrap()
}

async fn connect_err(url: &str, ca: Option<&str>) -> Error {
    let mut b = Client::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .retry_transient_for(Duration::ZERO);
    if let Some(ca) = ca {
        b = b.tls_ca_pem(ca.to_string());
    }
    b.build().await.expect_err("refused")
}

/// `redis-cli --tls --cacert cert.pem` accepts a server presenting exactly
/// cert.pem, a self-signed CA:TRUE certificate; so does lockwarden (the
/// certificate is pinned), keeping the checks of its name, its dates and
/// its signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_made_by_openssl_is_pinned() {
    bounded(Duration::from_secs(60), async {
        let files = Files::new();
        let (cert, key) = openssl_self_signed(&files, "self");
        let (_server, port) = tls_server_presenting(&files, &cert, &key, &cert, false);
        let c = Client::builder(&format!("rediss://127.0.0.1:{port}"))
            .tls_ca_pem(cert.clone())
            .build()
            .await
            .unwrap();
        lock_and_unlock(&c).await;

        // The name is still checked: the certificate names 127.0.0.1 only.
        let e = connect_err(&format!("rediss://localhost:{port}"), Some(&cert)).await;
        assert!(
            matches!(&e, Error::Tls { message, .. } if message.contains("does not name localhost (it names 127.0.0.1)")),
            "{e}"
        );
        // Not given: refused, saying how to pin it.
        let e = connect_err(&format!("rediss://127.0.0.1:{port}"), None).await;
        assert!(
            matches!(&e, Error::Tls { message, .. } if message.contains("give exactly that certificate")),
            "{e}"
        );
        // Its signature is still checked: a server presenting a copy whose
        // signature was altered is refused, given that very copy.
        let bad = tampered(&files, &cert);
        let (_tampered, tampered_port) = tls_server_presenting(&files, &bad, &key, &cert, false);
        let e = connect_err(&format!("rediss://127.0.0.1:{tampered_port}"), Some(&bad)).await;
        assert!(
            matches!(&e, Error::Tls { message, .. } if message.contains("signature that does not verify")),
            "{e}"
        );
        // Its dates are still checked: an expired self-signed CA
        // certificate, given, is refused.
        let expired_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 6, 1);
        let expired = params.self_signed(&expired_key).unwrap().pem();
        let (_old, old_port) =
            tls_server_presenting(&files, &expired, &expired_key.serialize_pem(), &expired, false);
        let e = connect_err(&format!("rediss://127.0.0.1:{old_port}"), Some(&expired)).await;
        assert!(
            matches!(&e, Error::Tls { message, .. } if message.contains("has expired")),
            "{e}"
        );
    })
    .await
}

/// The same through the command: `--tls-ca cert.pem` with the openssl-made
/// certificate works; a wrong host name is one line naming the fix.
#[test]
fn the_command_pins_a_self_signed_certificate() {
    let files = Files::new();
    let (cert, key) = openssl_self_signed(&files, "cli-self");
    let (_server, port) = tls_server_presenting(&files, &cert, &key, &cert, false);
    let ca_file = files.write("cli-self-ca.pem", &cert);
    let run = |host: &str| {
        Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .env_remove("LOCKWARDEN_REDIS")
            .args(["--redis", &format!("rediss://{host}:{port}"), "--tls-ca", &ca_file])
            .args(["run", "tls-self", "--wait", "5s", "--", "true"])
            .output()
            .unwrap()
    };
    let ok = run("127.0.0.1");
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let wrong = run("localhost");
    assert_eq!(wrong.status.code(), Some(69));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("does not name localhost"), "{stderr}");
}

/// Each way a TLS connection goes wrong reads as one line that names the
/// server and says what was wrong and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tls_failure_is_one_line_with_its_fix() {
    bounded(Duration::from_secs(60), async {
        let files = Files::new();
        let ca = Ca::new("lockwarden test CA");
        let stranger = Ca::new("nobody trusts this CA");
        let (_a, untrusted) = tls_server(&files, &stranger, &["127.0.0.1"], false);
        let (_b, elsewhere) = tls_server(&files, &ca, &["other.example"], false);
        let (plain, _) = tls_server(&files, &ca, &["127.0.0.1"], false);
        let (_c, tls_port) = tls_server(&files, &ca, &["127.0.0.1"], false);
        let (self_cert, self_key) = openssl_self_signed(&files, "unpinned");
        let (_d, self_port) = tls_server_presenting(&files, &self_cert, &self_key, &self_cert, false);
        let cases = [
            (
                format!("rediss://127.0.0.1:{untrusted}"),
                Some(ca.pem()),
                "is not signed by a CA the client trusts: give the CA",
            ),
            (
                format!("rediss://127.0.0.1:{elsewhere}"),
                Some(ca.pem()),
                "does not name 127.0.0.1 (it names other.example)",
            ),
            (
                format!("rediss://127.0.0.1:{self_port}"),
                Some(ca.pem()),
                "a CA certificate as its own",
            ),
            (
                format!("redis://127.0.0.1:{tls_port}"),
                None,
                "if that port serves TLS, use rediss://",
            ),
            (
                plain.url().replace("redis://", "rediss://"),
                Some(ca.pem()),
                "if that port is a plain one (not TLS), use redis://",
            ),
        ];
        for (url, ca, want) in cases {
            let e = connect_err(&url, ca.as_deref()).await;
            let text = e.to_string();
            assert!(text.contains(want), "{url}: {text}");
            assert!(
                text.contains(url.trim_start_matches("rediss://").trim_start_matches("redis://")),
                "{text}"
            );
            assert!(
                !text.contains('\n') && !text.contains("Custom {") && !text.contains("kind:"),
                "{text}"
            );
        }
    })
    .await
}
