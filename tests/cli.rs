//! The `lockwarden` command, run as a process against servers the tests start.
mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_lockwarden");

fn cli(server: &RedisServer) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LOCKWARDEN_REDIS").args(["--redis", &server.url()]);
    c
}

/// Waits for `child` at most `limit`; kills it and panics past that.
fn wait(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("lockwarden did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(mut cmd: Command, limit: Duration) -> Output {
    wait(
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
        limit,
    )
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

/// Stdout as one JSON object per line.
fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lockwarden-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const T: Duration = Duration::from_secs(20);

/// A shared run carries the last write token in `$LOCKWARDEN_TOKEN`, and
/// after the counter is lost (evicted alone here; a FLUSHALL or a restart
/// does the same) a value not below it: the read starts the counter at the
/// server's clock, and the next exclusive run's token is above the read's.
#[test]
fn a_shared_run_after_a_lost_counter_carries_no_lower_token() {
    let server = RedisServer::start();
    let token_of = |side: &str| {
        let mut c = cli(&server);
        c.args(["run", "tok", side, "--", "sh", "-c", "echo $LOCKWARDEN_TOKEN"]);
        let o = run(c, T);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().unwrap()
    };
    let written = token_of("--exclusive");
    assert_eq!(token_of("--shared"), written, "a read carries the last write token");
    assert_eq!(server.cmd(&["DEL", "lockwarden:{tok}:token"]).as_int(), Some(1));
    let read = token_of("--shared");
    assert!(read >= written, "read token {read} below the last write's {written}");
    let next = token_of("--exclusive");
    assert!(next > read, "write token {next} not above the read's {read}");
}

#[test]
fn exit_codes() {
    let server = RedisServer::start();
    // The command's own status, and its environment.
    let mut c = cli(&server);
    c.args([
        "run",
        "codes",
        "--",
        "sh",
        "-c",
        "test \"$LOCKWARDEN_LOCK\" = codes && test \"$LOCKWARDEN_TOKEN\" -ge 1 && exit 7",
    ]);
    assert_eq!(code(&run(c, T)), 7);
    // Killed by a signal: 128 + signal.
    let mut c = cli(&server);
    c.args(["run", "codes", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&run(c, T)), 137);
    // Not acquired within --wait: 75, one line.
    let holder = Command::new(BIN)
        .args(["--redis", &server.url(), "run", "codes", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    assert!(eventually_sync(T, || server.cmd(&["EXISTS", "codes"]).as_int() == Some(1)));
    let mut c = cli(&server);
    c.args(["run", "codes", "--wait", "200ms", "--", "true"]);
    let o = run(c, T);
    assert_eq!(code(&o), 75, "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let _ = wait(holder, T);
    // Redis unreachable: 69, one line naming it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = Command::new(BIN);
    c.args([
        "--redis",
        &format!("redis://127.0.0.1:{closed}"),
        "run",
        "x",
        "--",
        "true",
    ]);
    let o = run(c, T);
    assert_eq!(code(&o), 69);
    assert!(
        stderr(&o).contains(&closed.to_string()) && stderr(&o).lines().count() == 1,
        "{}",
        stderr(&o)
    );
    // Usage errors: 64.
    for args in [
        vec!["run", "x"],
        vec!["run", "x", "--wait", "soon", "--", "true"],
        vec!["run", "x", "--lease", "1s", "--watchdog-lease", "1s", "--", "true"],
        vec!["run", "", "--", "true"],
        vec!["unlock", "x"],
        vec!["bench", "--workload", "W9"],
        vec!["frobnicate"],
    ] {
        let mut c = cli(&server);
        c.args(&args);
        assert_eq!(code(&run(c, T)), 64, "{args:?}");
    }
    let mut c = cli(&server);
    c.args(["--redis", &server.url(), "status", "x"]);
    assert_eq!(code(&run(c, T)), 64, "two masters (an even number) is a usage error");
}

fn quorum_cli(servers: &[RedisServer]) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LOCKWARDEN_REDIS");
    for s in servers {
        c.args(["--redis", &s.url()]);
    }
    c
}

#[test]
fn run_status_and_unlock_over_a_quorum() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // What a quorum promises is a majority: a master that answers after the
    // others (a loaded machine) is given back, and is not written to.
    let on_majority = |value: &str| {
        servers
            .iter()
            .filter(|s| s.cmd(&["GET", "lockwarden:{q}:token"]).as_str() == Some(value))
            .count()
            >= 2
    };
    let mut c = quorum_cli(&servers);
    c.args(["run", "q", "--", "sh", "-c", "echo $LOCKWARDEN_TOKEN"]);
    let o = run(c, T);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(token.parse::<u64>().is_ok_and(|t| t > 0), "{token:?}");
    // Written back to a majority (each master's counter starts from its own
    // clock, so without the write-back only one would have it).
    assert!(on_majority(&token), "token {token} not on a majority");
    // The same quorum from $LOCKWARDEN_REDIS, comma-separated.
    let mut c = Command::new(BIN);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    c.env("LOCKWARDEN_REDIS", urls.join(","))
        .args(["run", "q", "--", "sh", "-c", "echo $LOCKWARDEN_TOKEN"]);
    let o = run(c, T);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let second = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(second.parse::<u64>().unwrap() > token.parse::<u64>().unwrap());
    assert!(on_majority(&second), "token {second} not on a majority");
    // A holder on the quorum shows in status; force unlock frees it everywhere.
    let mut c = quorum_cli(&servers);
    c.args(["run", "q", "--", "sh", "-c", "echo $LOCKWARDEN_TOKEN; exec sleep 30"]);
    let mut holder = c.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let out = holder.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        let _ = tx.send(line);
    });
    let held: u64 = rx.recv_timeout(T).expect("the holder started").trim().parse().unwrap();
    assert!(held > second.parse::<u64>().unwrap());
    let holding: Vec<&RedisServer> = servers.iter().filter(|s| !s.keys("q").is_empty()).collect();
    assert!(holding.len() >= 2, "held on {} of 3 masters", holding.len());
    let mut c = quorum_cli(&servers);
    c.args(["status", "q", "--json"]);
    let o = run(c, T);
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["held"], true, "{status}");
    assert!(status["last_token"].as_u64().is_some_and(|t| t >= held), "{status}");
    let mut c = quorum_cli(&servers);
    c.args(["unlock", "--force", "q"]);
    assert_eq!(code(&run(c, T)), 0);
    assert!(holding.iter().all(|s| s.keys("q").is_empty()));
    // A late master's grant is given back by the holder in the background.
    assert!(eventually_sync(T, || servers.iter().all(|s| s.keys("q").is_empty())));
    // The holder learns at its next renewal; end it either way.
    unsafe { libc::kill(holder.id() as i32, libc::SIGKILL) };
    let _ = wait(holder, T);
    // Two of three masters unreachable: 69, one line.
    let closed: Vec<u16> = (0..2)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let mut c = Command::new(BIN);
    c.env_remove("LOCKWARDEN_REDIS").args(["--redis", &servers[0].url()]);
    for p in &closed {
        c.args(["--redis", &format!("redis://127.0.0.1:{p}")]);
    }
    c.args(["run", "q", "--", "true"]);
    let o = run(c, T);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("majority"), "{}", stderr(&o));
}

#[test]
fn bench_w4_runs_on_five_masters() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let mut c = quorum_cli(&servers);
    c.args(["bench", "--workload", "W4", "--duration", "1s", "--json"]);
    let o = run(c, Duration::from_secs(60));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines = json_lines(&o);
    let w4 = lines.iter().find(|l| l["workload"] == "W4").expect("a W4 line");
    assert_eq!(w4["servers"], 5);
    assert!(w4["ops_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(w4["errors"], 0);
    assert!(w4["w1_p50_us"].as_f64().unwrap() > 0.0);
    assert!(w4["p50_vs_w1"].as_f64().unwrap() > 0.0);
    // Server cost summed over the five masters: each lock + unlock runs 8
    // commands on every master (40), not only on a majority (24).
    let cmds = w4["redis_cmds_per_op"].as_f64().unwrap();
    assert!((36.0..=48.0).contains(&cmds), "redis_cmds_per_op = {cmds}");
    assert!(w4["redis_cpu_us_per_op"].as_f64().unwrap() > 0.0);
    assert!(w4["cores"].as_u64().unwrap() >= 1);
    assert!(w4["client_cpu_us_per_op"].as_f64().unwrap() > 0.0);
    // Fewer masters: W4 is refused.
    let mut c = quorum_cli(&servers[..3]);
    c.args(["bench", "--workload", "W4", "--duration", "1s"]);
    assert_eq!(code(&run(c, T)), 64);
}

fn eventually_sync(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn eight_concurrent_runs_never_overlap() {
    let server = RedisServer::start();
    let dir = tempdir("overlap");
    let script = format!(
        "if [ -e {d}/inside ]; then echo overlap >> {d}/bad; fi; touch {d}/inside; sleep 0.05; rm {d}/inside; echo x >> {d}/count",
        d = dir.display()
    );
    let children: Vec<Child> = (0..8)
        .map(|_| {
            let mut c = cli(&server);
            c.args(["run", "shared", "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = wait(child, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    assert!(!dir.join("bad").exists(), "two commands ran at once");
    assert_eq!(std::fs::read_to_string(dir.join("count")).unwrap().lines().count(), 8);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_command_that_outlives_its_lock_is_terminated_and_run_exits_70() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    // The command ignores SIGTERM: SIGKILL follows after the grace.
    c.args([
        "run",
        "lost",
        "--watchdog-lease",
        "1500ms",
        "--kill-grace",
        "500ms",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while :; do sleep 0.1; done",
    ]);
    let child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(eventually_sync(T, || server.cmd(&["EXISTS", "lost"]).as_int() == Some(1)));
    std::thread::sleep(Duration::from_millis(200));
    server.flushall();
    let flushed = Instant::now();
    let o = wait(child, T);
    let took = flushed.elapsed();
    assert_eq!(code(&o), 70, "{}", stderr(&o));
    assert!(stderr(&o).contains("lost"), "{}", stderr(&o));
    // One renewal period (500 ms) + the grace (500 ms) + slack.
    assert!(took < Duration::from_millis(500 + 500 + 700), "took {took:?}");
    assert_eq!(server.cmd(&["EXISTS", "lost"]).as_int(), Some(0), "not re-created");
}

#[test]
fn a_killed_run_leaves_a_lock_another_run_gets_within_the_watchdog_lease() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    // The default --kill-grace (10 s) shrinks to fit a short lease.
    c.args(["run", "crash", "--watchdog-lease", "2s", "--", "sleep", "5"]);
    let victim = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    assert!(eventually_sync(T, || server.cmd(&["EXISTS", "crash"]).as_int() == Some(1)));
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    let killed = Instant::now();
    let _ = wait(victim, T);
    let mut c = cli(&server);
    c.args(["run", "crash", "--wait", "10s", "--", "true"]);
    let o = run(c, T);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        killed.elapsed() < Duration::from_millis(2000 + 700),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
fn signals_are_forwarded_to_the_command() {
    let server = RedisServer::start();
    let dir = tempdir("signals");
    for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGINT, "INT"), (libc::SIGHUP, "HUP")] {
        let marker = dir.join(name);
        let script = format!(
            "trap 'echo got > {}; exit 3' {name}; while :; do sleep 0.05; done",
            marker.display()
        );
        let mut c = cli(&server);
        c.args(["run", "signals", "--", "sh", "-c", &script]);
        let child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        assert!(eventually_sync(T, || server.cmd(&["EXISTS", "signals"]).as_int() == Some(1)));
        std::thread::sleep(Duration::from_millis(300)); // the shell installs its trap
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = wait(child, T);
        assert_eq!(code(&o), 3, "{name}: {}", stderr(&o));
        assert!(marker.exists(), "{name} reached the command");
        assert!(
            eventually_sync(T, || server.cmd(&["EXISTS", "signals"]).as_int() == Some(0)),
            "released"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_report_holders_counts_queue_ttl_and_leaks() {
    let server = RedisServer::start();
    let c = lockwarden::Client::builder(&server.url())
        .fair_waiter_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let lock = c.fair_lock("job:report").unwrap();
    let g1 = lock.lock().await.unwrap();
    let g2 = lock.lock().await.unwrap();
    let waiter = c.fair_lock("job:report").unwrap();
    let w = tokio::spawn(async move { waiter.lock().await.map(drop) });
    assert!(
        eventually(T, || server.cmd(&["LLEN", "lockwarden:{job:report}:queue"]).as_int()
            == Some(1))
        .await
    );
    // A lock key without TTL: leaked.
    let leaked = c.lock("job:leaked").unwrap().lock().await.unwrap();
    server.cmd(&["PERSIST", "job:leaked"]);
    c.lock("other").unwrap().lock().await.unwrap().unlock().await.unwrap();

    let s = tokio::task::spawn_blocking({
        let mut cmd = cli(&server);
        cmd.args(["status", "job:report", "--json"]);
        move || run(cmd, T)
    })
    .await
    .unwrap();
    assert_eq!(code(&s), 0, "{}", stderr(&s));
    let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(v["held"], true);
    assert_eq!(v["holders"][0]["owner"], g1.owner().field());
    assert_eq!(v["holders"][0]["count"], 2);
    let ms = v["remaining_lease_ms"].as_u64().unwrap();
    assert!(ms > 25_000 && ms <= 30_000, "{ms}");
    assert_eq!(v["last_token"], g1.token());
    assert_eq!(v["queue"].as_array().unwrap().len(), 1);
    assert_eq!(v["leaked"], false);

    let l = tokio::task::spawn_blocking({
        let mut cmd = cli(&server);
        cmd.args(["list", "--match", "job:*", "--json"]);
        move || run(cmd, T)
    })
    .await
    .unwrap();
    assert_eq!(code(&l), 0, "{}", stderr(&l));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&l.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["job:leaked", "job:report"], "only the matching locks");
    assert_eq!(rows[0]["leaked"], true);
    assert_eq!(rows[0]["remaining_lease_ms"], serde_json::Value::Null);
    assert_eq!(rows[1]["holders"][0]["count"], 2);
    assert_eq!(rows[1]["queue"].as_array().unwrap().len(), 1);

    // unlock --force removes it and says what it removed.
    let u = tokio::task::spawn_blocking({
        let mut cmd = cli(&server);
        cmd.args(["unlock", "--force", "job:leaked"]);
        move || run(cmd, T)
    })
    .await
    .unwrap();
    assert_eq!(code(&u), 0);
    assert!(String::from_utf8_lossy(&u.stdout).contains(leaked.owner().field()));
    assert_eq!(server.cmd(&["EXISTS", "job:leaked"]).as_int(), Some(0));
    drop(leaked);
    g2.unlock().await.unwrap();
    g1.unlock().await.unwrap();
    w.await.unwrap().unwrap();
}

/// `unlock --force` of a read-write lock tells its waiting writer, which
/// listens on the writers' channel, and of a semaphore every waiting
/// client: each gets in at once, not at its next look on its own (a
/// third of a 90 s waiter timeout, an hour's wake patience).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_force_tells_a_waiting_writer_and_every_semaphore_waiter() {
    let server = RedisServer::start();
    let slow = || async {
        lockwarden::Client::builder(&server.url())
            .watchdog_lease(Duration::from_secs(30))
            .fair_waiter_timeout(Duration::from_secs(90))
            .wake_patience(NO_PATIENCE)
            .build()
            .await
            .unwrap()
    };
    let force = |name: &'static str| {
        let mut cmd = cli(&server);
        cmd.args(["unlock", "--force", name]);
        async move {
            let o = tokio::task::spawn_blocking(move || run(cmd, T)).await.unwrap();
            assert_eq!(code(&o), 0, "{}", stderr(&o));
        }
    };

    let reader = slow().await;
    let _reading = reader.rw_lock("doc").unwrap().read().lock().await.unwrap();
    let c = slow().await;
    let w = c.rw_lock("doc").unwrap().write();
    let writer = tokio::spawn(async move { w.lock().await });
    let marked = || {
        server
            .cmd(&["HKEYS", "doc"])
            .strings()
            .iter()
            .any(|f| f.starts_with(":ww:"))
    };
    assert!(eventually(Duration::from_secs(5), marked).await, "the writer waits");
    force("doc").await;
    let g = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer is told")
        .unwrap()
        .unwrap();
    g.unlock().await.unwrap();

    let _both = reader.semaphore("pool", 2).unwrap().acquire_many(2).await.unwrap();
    let mut waits = Vec::new();
    for i in 0..2 {
        let c = slow().await;
        waits.push(tokio::spawn(async move {
            let p = c.semaphore("pool", 2).unwrap().acquire().await.unwrap();
            (p, c)
        }));
        let listed = || server.cmd(&["LLEN", "lockwarden:{pool}:waiters"]).as_int() == Some(i + 1);
        assert!(eventually(Duration::from_secs(5), listed).await, "waiter {i} listed");
    }
    force("pool").await;
    let both = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(waits))
        .await
        .expect("every waiting client is told");
    assert_eq!(both.len(), 2);
}

#[test]
fn bench_w1_prints_valid_json() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    c.args(["bench", "--workload", "W1", "--duration", "1s", "--json"]);
    let o = run(c, Duration::from_secs(60));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines = json_lines(&o);
    let w1 = lines.iter().find(|l| l["workload"] == "W1").expect("a W1 line");
    assert!(w1["ops_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(w1["violations"], 0);
    assert!(w1["p50_us"].as_f64().unwrap() > 0.0);
    // Exactly two scripts per lock + unlock, 8 commands with their insides:
    // acquire PTTL, INCR, HSET, PEXPIRE; release HMGET, DEL. A request sent
    // for the first time reads no record, a take writes its record into
    // the hold, and nobody waited, so the unlock publishes nothing.
    assert_eq!(w1["redis_cmds_per_op"], 8.0);
    assert!(w1["client_cpu_us_per_op"].as_f64().unwrap() > 0.0);
    assert!(
        lines.iter().any(|l| l["limit"] == "ping_c1"),
        "the limit measured in the same run"
    );
    assert!(stderr(&o).contains("W1"), "progress on stderr");
}

#[test]
fn verbose_flags_log_to_stderr() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    c.args(["-v", "run", "chatty", "--", "true"]);
    let o = run(c, T);
    assert_eq!(code(&o), 0);
    let err = stderr(&o);
    assert!(
        err.contains("acquired") && err.contains("lockwarden.acquire"),
        "debug events in the span: {err}"
    );
    assert!(!err.contains("attempt"), "trace events only with -vv");
    assert!(
        !err.contains('\u{1b}'),
        "no colour codes when stderr is not a terminal: {err:?}"
    );
    let mut c = cli(&server);
    c.args(["-vv", "run", "chatty", "--", "true"]);
    let err = stderr(&run(c, T));
    assert!(err.contains("attempt"), "trace events with -vv: {err}");
    let mut c = cli(&server);
    c.args(["run", "chatty", "--", "true"]);
    assert!(stderr(&run(c, T)).is_empty(), "quiet by default");
}

/// Processes of process group `pgid` that are still running (not zombies).
fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        if fields[0] != "Z" && fields[2].parse::<i32>() == Ok(pgid) {
            out.push(pid);
        }
    }
    out
}

/// A command tree: the shell (which leads its group) and two background
/// jobs, one of them a subshell with a child of its own. Its group id (the
/// shell's pid) is written to `file` once everything started.
fn tree_script(file: &std::path::Path) -> String {
    format!(
        "sleep 300 & (sleep 300; true) & sleep 0.1; echo $$ > {}; wait",
        file.display()
    )
}

fn read_pgid(file: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

#[test]
fn renewals_failing_stop_the_whole_command_tree_before_the_lease_ends() {
    let server = RedisServer::start();
    let dir = tempdir("tree");
    let file = dir.join("pgid");
    let mut c = cli(&server);
    c.args([
        "run",
        "tree",
        "--watchdog-lease",
        "1500ms",
        "--kill-grace",
        "300ms",
        "--",
    ]);
    c.args(["sh", "-c", &tree_script(&file)]);
    let child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(eventually_sync(T, || read_pgid(&file).is_some()));
    let pgid = read_pgid(&file).unwrap();
    assert!(group_members(pgid).len() >= 4, "{:?}", group_members(pgid));
    server.pause();
    let paused = Instant::now();
    assert!(eventually_sync(T, || group_members(pgid).is_empty()));
    let took = paused.elapsed();
    // The lease was renewed last before the pause: the lock cannot run out
    // before `paused + 1.5 s`. Everything was stopped before that.
    assert!(
        took < Duration::from_millis(1500),
        "the tree ran {took:?} after the pause"
    );
    let o = wait(child, T);
    assert_eq!(code(&o), 70, "{}", stderr(&o));
    assert!(stderr(&o).contains("at risk"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    server.resume();
    let mut c = cli(&server);
    c.args(["run", "tree", "--wait", "5s", "--", "true"]);
    assert_eq!(code(&run(c, T)), 0);
}

#[test]
fn a_fixed_lease_stops_the_whole_command_tree_before_it_runs_out() {
    let server = RedisServer::start();
    let dir = tempdir("fixed-tree");
    let file = dir.join("pgid");
    let mut c = cli(&server);
    c.args(["run", "fixed", "--lease", "1500ms", "--kill-grace", "300ms", "--"]);
    c.args(["sh", "-c", &format!("trap '' TERM; {}", tree_script(&file))]);
    let started = Instant::now();
    let child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(eventually_sync(T, || read_pgid(&file).is_some()));
    let pgid = read_pgid(&file).unwrap();
    let o = wait(child, T);
    let took = started.elapsed();
    assert_eq!(code(&o), 70, "{}", stderr(&o));
    assert!(took < Duration::from_millis(1500), "took {took:?}: past the lease");
    assert!(
        group_members(pgid).is_empty(),
        "left running: {:?}",
        group_members(pgid)
    );
    assert_eq!(server.cmd(&["EXISTS", "fixed"]).as_int(), Some(0));
}

#[test]
fn what_the_command_leaves_running_is_stopped_before_the_release() {
    let server = RedisServer::start();
    let dir = tempdir("leftover");
    let file = dir.join("pgid");
    let mut c = cli(&server);
    c.args(["run", "leftover", "--kill-grace", "300ms", "--"]);
    c.args([
        "sh",
        "-c",
        &format!("sleep 300 >/dev/null 2>&1 & echo $! > {}", file.display()),
    ]);
    let o = run(c, T);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let job = read_pgid(&file).unwrap();
    let running = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
    };
    assert!(!running(job), "the background job {job} outlived the lock");
    assert_eq!(server.cmd(&["EXISTS", "leftover"]).as_int(), Some(0));
}

#[test]
fn a_kill_grace_that_cannot_fit_in_the_lease_is_a_usage_error() {
    let server = RedisServer::start();
    for args in [
        vec!["--kill-grace", "15s"],
        vec!["--watchdog-lease", "2s", "--kill-grace", "1s"],
        vec!["--lease", "1s", "--kill-grace", "1s"],
    ] {
        let mut c = cli(&server);
        c.args(["run", "x"]).args(&args).args(["--", "true"]);
        let o = run(c, T);
        assert_eq!(code(&o), 64, "{args:?}");
        assert!(stderr(&o).contains("does not fit"), "{}", stderr(&o));
    }
    assert!(server.keys("*").is_empty(), "nothing was taken");
}

#[test]
fn completions_and_the_man_page_come_from_the_same_definitions() {
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(BIN).args(["completions", shell]).output().unwrap();
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("lockwarden") && text.contains("kill-grace"), "{shell}");
    }
    let o = Command::new(BIN).arg("man").output().unwrap();
    assert_eq!(code(&o), 0);
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(page.contains(".TH lockwarden 1"), "{page}");
    assert!(page.contains("bench"), "subcommands listed");
    let o = Command::new(BIN).args(["completions", "cmd.exe"]).output().unwrap();
    assert_eq!(code(&o), 64);
}

#[test]
fn bench_without_json_prints_an_aligned_table() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    c.args(["bench", "--workload", "W1", "--duration", "1s"]);
    let o = run(c, Duration::from_secs(60));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // The table, then (after a blank line) what its columns mean.
    let lines: Vec<&str> = out.lines().take_while(|l| !l.is_empty()).collect();
    assert!(out.contains("2 inside: times a worker found"), "{out}");
    assert!(lines[0].starts_with("workload") && lines[0].contains("ops/s"), "{out}");
    let w1 = lines.iter().find(|l| l.starts_with("W1 ")).expect("a W1 row");
    assert!(lines.iter().any(|l| l.starts_with("limit ping_c1")), "{out}");
    // Every row has the header's width: the columns line up.
    let width = lines[0].chars().count();
    assert!(lines.iter().all(|l| l.chars().count() == width), "{out}");
    assert!(
        w1.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() > 0.0,
        "{w1}"
    );
    assert!(stderr(&o).contains("W1"), "progress on stderr");
}

#[test]
fn shared_runs_overlap_and_exclusive_runs_are_alone() {
    let server = RedisServer::start();
    let dir = tempdir("rw");
    let d = dir.display();
    let reader = format!(
        "touch {d}/r.$$; if [ -e {d}/w ]; then echo overlap >> {d}/bad; fi; sleep 1; ls {d} | grep -c '^r\\.' >> {d}/seen; rm {d}/r.$$"
    );
    let writer = format!(
        "if ls {d}/r.* >/dev/null 2>&1 || [ -e {d}/w ]; then echo overlap >> {d}/bad; fi; touch {d}/w; sleep 0.2; rm {d}/w; echo x >> {d}/wrote"
    );
    let spawn = |flag: &str, script: &str| {
        let mut c = cli(&server);
        c.args(["run", "doc", flag, "--", "sh", "-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut children: Vec<Child> = (0..4).map(|_| spawn("--shared", &reader)).collect();
    let readers_in = || {
        std::fs::read_dir(&dir)
            .map(|e| {
                e.filter(|f| {
                    f.as_ref()
                        .is_ok_and(|f| f.file_name().to_string_lossy().starts_with("r."))
                })
                .count()
            })
            .unwrap_or(0)
    };
    assert!(
        eventually_sync(Duration::from_secs(20), || readers_in() >= 2),
        "two shared runs at once"
    );
    // While they read, `status` names them as readers.
    let mut c = cli(&server);
    c.args(["status", "doc"]);
    let o = run(c, Duration::from_secs(30));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("read by"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    children.extend((0..2).map(|_| spawn("--exclusive", &writer)));
    for child in children {
        let o = wait(child, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    assert!(!dir.join("bad").exists(), "a writer overlapped another run");
    assert_eq!(std::fs::read_to_string(dir.join("wrote")).unwrap().lines().count(), 2);
    let most = std::fs::read_to_string(dir.join("seen"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .max()
        .unwrap();
    assert!(most >= 2, "shared runs overlapped ({most} at once)");
    // The flags exclude each other.
    let mut c = cli(&server);
    c.args(["run", "doc", "--shared", "--exclusive", "--", "true"]);
    assert_eq!(code(&run(c, Duration::from_secs(30))), 64);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn permit_runs_are_at_most_n_at_once_and_multi_name_runs_take_all() {
    let server = RedisServer::start();
    let dir = tempdir("permits");
    let d = dir.display();
    let script = format!(
        "touch {d}/in.$$; sleep 0.4; ls {d} | grep -c '^in\\.' >> {d}/seen; [ -n \"$LOCKWARDEN_PERMIT\" ] || echo none >> {d}/bad; rm {d}/in.$$"
    );
    let children: Vec<Child> = (0..5)
        .map(|_| {
            let mut c = cli(&server);
            c.args(["run", "pool", "--permits", "2", "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = wait(child, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let seen: Vec<u32> = std::fs::read_to_string(dir.join("seen"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(seen.len(), 5);
    // While a permit run and a shared run hold, `status` calls the first a
    // semaphore and shows its permit id exactly as the command got it in
    // LOCKWARDEN_PERMIT, and `list` shows both (neither takes a token).
    let id_file = dir.join("permit-id");
    let mut holder = cli(&server);
    let holder = holder
        .args(["run", "pool", "--permits", "2", "--", "sh", "-c"])
        .arg(format!("echo \"$LOCKWARDEN_PERMIT\" > {}; sleep 3", id_file.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = cli(&server);
    let reader = reader
        .args(["run", "docs2", "--shared", "--", "sleep", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually_sync(Duration::from_secs(10), || std::fs::read_to_string(
        &id_file
    )
    .is_ok_and(|s| s.ends_with('\n'))
        && server.cmd(&["EXISTS", "docs2"]).as_int() == Some(1)));
    let id = std::fs::read_to_string(&id_file).unwrap().trim().to_string();
    let mut c = cli(&server);
    c.args(["status", "pool"]);
    let o = run(c, Duration::from_secs(30));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("semaphore \"pool\""), "{out}");
    assert!(out.contains(&format!("permit {id} (1 permit)")), "{id}: {out}");
    let mut c = cli(&server);
    c.args(["list", "--json"]);
    let o = run(c, Duration::from_secs(30));
    let listed = json_lines(&o);
    let kind_of = |name: &str| {
        listed
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed:?}"))["kind"]
            .clone()
    };
    assert_eq!(kind_of("pool"), "semaphore");
    assert_eq!(kind_of("docs2"), "read-write lock");
    assert_eq!(code(&wait(holder, Duration::from_secs(30))), 0);
    assert_eq!(code(&wait(reader, Duration::from_secs(30))), 0);
    assert_eq!(seen.iter().max(), Some(&2), "two at once, never three: {seen:?}");
    assert!(!dir.join("bad").exists(), "LOCKWARDEN_PERMIT set");

    // Several names: all held together, a token each; opposite orders run
    // one after the other.
    let multi = format!(
        "if [ -e {d}/m ]; then echo overlap >> {d}/bad; fi; touch {d}/m; echo \"$LOCKWARDEN_TOKEN\" >> {d}/tokens; sleep 0.1; rm {d}/m"
    );
    let children: Vec<Child> = [["ma", "mb"], ["mb", "ma"], ["ma", "mb"], ["mb", "ma"]]
        .iter()
        .map(|names| {
            let mut c = cli(&server);
            c.args(["run", names[0], names[1], "--", "sh", "-c", &multi])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = wait(child, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    assert!(!dir.join("bad").exists(), "two multi-name runs overlapped");
    let tokens = std::fs::read_to_string(dir.join("tokens")).unwrap();
    assert_eq!(tokens.lines().count(), 4);
    assert!(
        tokens.lines().all(|l| l.starts_with("ma=") && l.contains(" mb=")),
        "{tokens}"
    );
    // One kind per run: several names with --permits is a usage error.
    let mut c = cli(&server);
    c.args(["run", "x", "y", "--permits", "2", "--", "true"]);
    assert_eq!(code(&run(c, Duration::from_secs(30))), 64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --fair` with ten waiters queued behind a holder runs every
/// waiter's command, in the order they queued: a lock handed straight to
/// the next waiter (on a first lease cut to its queue deadline, 5 s by
/// default) is healthy, not at risk, and its command is not stopped.
#[test]
fn fair_runs_with_ten_waiters_run_every_command_in_order() {
    runs_in_queue_order(&["--fair"], 10, "fair-order");
}

/// `run --fair --permits 1`: the fair semaphore serves its runs in the
/// order they queued, as the fair lock does.
#[test]
fn fair_permit_runs_run_in_queue_order() {
    runs_in_queue_order(&["--fair", "--permits", "1"], 5, "fair-permits-order");
}

/// A holder, then `n` waiting runs with `flags` queued one by one: every
/// command runs, in queue order.
fn runs_in_queue_order(flags: &[&str], n: i64, tag: &str) {
    let server = RedisServer::start();
    let dir = tempdir(tag);
    let order = dir.join("order");
    let mut holder = cli(&server);
    holder.args(["run", "job"]).args(flags).args(["--", "sleep", "1"]);
    let holder = holder.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(eventually_sync(Duration::from_secs(10), || server
        .cmd(&["EXISTS", "job"])
        .as_int()
        == Some(1)));
    let mut waiters = Vec::new();
    for i in 0..n {
        let mut c = cli(&server);
        let script = format!("echo {i} >> {}; sleep 0.3", order.display());
        c.args(["run", "job"])
            .args(flags)
            .args(["--wait", "60s", "--", "sh", "-c", &script]);
        waiters.push(c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
        // Queued before the next one starts: the order is known.
        assert!(
            eventually_sync(Duration::from_secs(10), || {
                server.cmd(&["LLEN", "lockwarden:{job}:queue"]).as_int() == Some(i + 1)
            }),
            "waiter {i} did not queue"
        );
    }
    let o = wait(holder, Duration::from_secs(30));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for (i, child) in waiters.into_iter().enumerate() {
        let o = wait(child, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "waiter {i}: {}", stderr(&o));
    }
    let ran: Vec<String> = std::fs::read_to_string(&order)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let want: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    assert_eq!(ran, want, "every command ran, in queue order");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The contract matrix through the command: with each mode of `run` (a
/// plain lock, `--fair`, `--shared` behind `--exclusive`, `--exclusive`,
/// `--permits 1`, several names), a holder and three waiters: every
/// waiter's command runs, once, alone, and every run exits 0.
#[test]
fn run_in_every_mode_runs_every_waiters_command() {
    let server = RedisServer::start();
    let modes: [(&str, &[&str], &[&str]); 6] = [
        ("plain", &["m-plain"], &[]),
        ("fair", &["m-fair"], &["--fair"]),
        ("shared", &["m-rw"], &["--shared"]),
        ("exclusive", &["m-rw2"], &["--exclusive"]),
        ("permits", &["m-sem"], &["--permits", "1"]),
        ("names", &["m-a", "m-b"], &[]),
    ];
    for (mode, names, flags) in modes {
        let dir = tempdir(&format!("mode-{mode}"));
        let d = dir.display();
        let script = format!(
            "if [ -e {d}/in ]; then echo overlap >> {d}/bad; fi; touch {d}/in; sleep 0.2; rm {d}/in; echo x >> {d}/ran"
        );
        let spawn = |holder_flags: &[&str], wait: bool| {
            let mut c = cli(&server);
            c.arg("run").args(names).args(holder_flags);
            if wait {
                c.args(["--wait", "30s"]);
            }
            c.args(["--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        // Readers share: the holder of the shared mode is a writer, so the
        // waiting readers wait for it (and then run together).
        let holder_flags: &[&str] = if mode == "shared" { &["--exclusive"] } else { flags };
        let holder = spawn(holder_flags, false);
        assert!(
            eventually_sync(Duration::from_secs(10), || dir.join("in").exists()
                || dir.join("ran").exists()),
            "{mode}: the holder's command did not start"
        );
        let waiters: Vec<Child> = (0..3).map(|_| spawn(flags, true)).collect();
        let o = wait(holder, Duration::from_secs(30));
        assert_eq!(code(&o), 0, "{mode} holder: {}", stderr(&o));
        for (i, w) in waiters.into_iter().enumerate() {
            let o = wait(w, Duration::from_secs(60));
            assert_eq!(code(&o), 0, "{mode} waiter {i}: {}", stderr(&o));
        }
        let ran = std::fs::read_to_string(dir.join("ran")).unwrap().lines().count();
        assert_eq!(ran, 4, "{mode}: every command ran once");
        if mode != "shared" {
            assert!(!dir.join("bad").exists(), "{mode}: two commands ran at once");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A run whose lock was taken from it while the command ran (here
/// force-unlocked, which no renewal notices before the command ends) exits
/// 70 with a "lost" line, whatever the command returned: a script can tell
/// it ran unprotected.
#[test]
fn a_run_whose_lock_was_lost_exits_70_even_when_the_command_succeeded() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    let child = c
        .args(["run", "held1", "--", "sleep", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually_sync(Duration::from_secs(10), || server
        .cmd(&["EXISTS", "held1"])
        .as_int()
        == Some(1)));
    let mut unlock = cli(&server);
    unlock.args(["unlock", "held1", "--force"]);
    assert_eq!(code(&run(unlock, T)), 0);
    let o = wait(child, T);
    assert_eq!(code(&o), 70, "{}", stderr(&o));
    assert!(stderr(&o).contains("lost"), "{}", stderr(&o));
}

/// The command never prints a password given in `--redis`, in its error
/// lines or its logs (`-vv`).
#[test]
fn passwords_are_never_printed() {
    let server = RedisServer::start_with(&["--requirepass", "right-one"]);
    for args in [
        vec!["run", "p", "--", "true"],
        vec!["-vv", "run", "p", "--", "true"],
        vec!["status", "p"],
        vec!["list"],
    ] {
        let mut c = Command::new(BIN);
        c.env_remove("LOCKWARDEN_REDIS")
            .args(["--redis", &format!("redis://app:s3cretPW@127.0.0.1:{}", server.port)])
            .args(&args);
        let o = run(c, T);
        assert_eq!(code(&o), 69, "{args:?}: {}", stderr(&o));
        let all = format!("{}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
        assert!(!all.contains("s3cretPW"), "{args:?}: {all}");
        assert!(all.contains("***@127.0.0.1"), "{args:?} names the server: {all}");
    }
    let mut c = Command::new(BIN);
    c.env(
        "LOCKWARDEN_REDIS",
        "redis://:s3cretPW@127.0.0.1:1,redis://:s3cretPW@127.0.0.1:2,redis://:s3cretPW@127.0.0.1:3",
    )
    // A short wait: `run` retries connecting within it (10 s without one).
    .args(["run", "--wait", "3s", "p", "--", "true"]);
    let o = run(c, T);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    assert!(!stderr(&o).contains("s3cretPW"), "{}", stderr(&o));
    assert!(stderr(&o).contains("***@127.0.0.1:1"), "{}", stderr(&o));
}

/// `run --wait` waits for a server that is not up yet (restarting) as it
/// waits for a held lock: the first connection is retried within the wait.
#[test]
fn run_waits_for_a_server_that_comes_up_within_its_wait() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempdir("late-server");
    let mut c = Command::new(BIN);
    c.env_remove("LOCKWARDEN_REDIS")
        .args(["--redis", &format!("redis://127.0.0.1:{port}")])
        .args(["run", "late", "--wait", "20s", "--", "true"]);
    let child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let bin = std::env::var("LOCKWARDEN_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let mut server = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .args(["--dir", &dir.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let o = wait(child, Duration::from_secs(30));
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// A lease out of range is refused naming the flag given and its bounds,
/// not a flag the user did not give.
#[test]
fn a_lease_out_of_range_names_its_flag_and_bound() {
    let server = RedisServer::start();
    for (flag, value, bound) in [("--lease", "0s", "10ms"), ("--watchdog-lease", "1ms", "100ms")] {
        let mut c = cli(&server);
        c.args(["run", "x", flag, value, "--", "true"]);
        let o = run(c, T);
        assert_eq!(code(&o), 64, "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(flag) && err.contains(bound), "{err}");
        assert!(!err.contains("--kill-grace"), "{err}");
    }
}

/// A command given without `--` is a usage error that says where the
/// command goes and what was taken for lock names.
#[test]
fn a_command_without_the_double_dash_is_explained() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    c.args(["run", "job", "echo", "hi"]);
    let o = run(c, T);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("after `--`") && err.contains("job echo hi"), "{err}");
    assert_eq!(server.cmd(&["EXISTS", "job"]).as_int(), Some(0), "nothing was locked");
}

#[test]
fn help_groups_the_options_and_the_man_page_is_one_whole_page() {
    let help = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let run = help(&["run", "--help"]);
    let at = |text: &str, what: &str| text.find(what).unwrap_or_else(|| panic!("{what} in {text}"));
    let (lock, run_opts, conn, tls) = (
        at(&run, "Lock options:"),
        at(&run, "Run options:"),
        at(&run, "Connection options:"),
        at(&run, "TLS options:"),
    );
    for (flag, from, to) in [
        ("--wait", lock, run_opts),
        ("--permits", lock, run_opts),
        ("--kill-grace", run_opts, conn),
        ("--redis", conn, tls),
        ("--tls-ca", tls, run.len()),
    ] {
        let i = at(&run, flag);
        assert!(from < i && i < to, "{flag} under its heading: {run}");
    }
    for cmd in [&["man", "--help"][..], &["completions", "--help"][..]] {
        let text = help(cmd);
        assert!(
            !text.contains("--redis") && !text.contains("--tls-ca"),
            "{cmd:?}: {text}"
        );
    }
    let top = help(&["--help"]);
    let bench = top.lines().find(|l| l.trim_start().starts_with("bench")).unwrap();
    assert!(bench.len() < 100, "{bench}");

    let page = help(&["man"]);
    assert!(!page.contains("lockwarden-"), "no page of its own is referred to");
    assert!(page.contains(".SH \"EXIT STATUS\""), "{page}");
    for code in ["64", "69", "70", "75", "128 + N"] {
        assert!(page.contains(&format!("\\fB{code}\\fR")), "exit code {code}");
    }
    for sub in ["run", "status", "list", "unlock", "bench"] {
        assert!(page.contains(&format!(".SS \"lockwarden {sub}\"")), "{sub}");
    }

    // `lock` is not a command, and `unlock` (which breaks a lock) is not
    // what was meant.
    let o = Command::new(BIN).args(["lock", "foo"]).output().unwrap();
    assert_eq!(code(&o), 64);
    assert!(
        !stderr(&o).contains("unlock") && stderr(&o).contains("lockwarden run NAME -- CMD"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn connection_options_go_before_or_after_the_command() {
    let server = RedisServer::start();
    let url = server.url();
    let o = Command::new(BIN)
        .env_remove("LOCKWARDEN_REDIS")
        .args(["run", "after", "--redis", &url, "--prefix", "p:", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Given both ways, the one after the command counts.
    let o = Command::new(BIN)
        .env_remove("LOCKWARDEN_REDIS")
        .args([
            "--redis",
            "redis://127.0.0.1:1",
            "--prefix",
            "q:",
            "run",
            "both",
            "--redis",
            &url,
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let keys = server.keys("*");
    assert!(
        keys.iter().any(|k| k.contains("{p:after}")) && keys.iter().any(|k| k.contains("{q:both}")),
        "{keys:?}"
    );
}

#[test]
fn bench_shows_w6_per_tick_and_w4_without_five_masters_is_refused_at_once() {
    let server = RedisServer::start();
    let mut c = cli(&server);
    c.args(["bench", "--workload", "W6"]);
    let o = run(c, Duration::from_secs(120));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let w6 = out
        .lines()
        .find(|l| l.starts_with("W6:"))
        .unwrap_or_else(|| panic!("{out}"));
    let per_tick: f64 = w6
        .split(" locks: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{w6}"));
    assert!(per_tick > 0.0 && w6.contains("0 lost"), "{w6}");

    let mut c = cli(&server);
    c.args(["bench", "--workload", "W4"]);
    let o = run(c, Duration::from_secs(30));
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("needs 5 masters") && o.stdout.is_empty(),
        "{}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains("limits"),
        "refused before measuring anything: {}",
        stderr(&o)
    );
}

/// The command beside Redisson: `status` and `list` name a Redisson
/// holder as such, and `run` on its name exits 75 with a message naming
/// Redisson, without writing into its hash.
#[test]
fn the_command_names_a_redisson_holder_and_does_not_take_its_name() {
    let server = RedisServer::start();
    let holder = "5f0c1f9e-1d7a-4c2b-9a51-0d6e2b7c3a10:1";
    server.cmd(&["HSET", "java-job", holder, "1"]);
    server.cmd(&["PEXPIRE", "java-job", "30000"]);
    server.cmd(&["HSET", "java-rw", "mode", "write", &format!("{holder}:write"), "1"]);
    server.cmd(&["PEXPIRE", "java-rw", "30000"]);

    let mut c = cli(&server);
    c.args(["status", "java-job", "--json"]);
    let o = run(c, Duration::from_secs(20));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let s = &json_lines(&o)[0];
    assert_eq!(s["kind"], "Redisson lock", "{s}");
    assert_eq!(s["holders"][0]["owner"], holder, "{s}");

    let mut c = cli(&server);
    c.args(["list", "--match", "java-*", "--json"]);
    let o = run(c, Duration::from_secs(20));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut kinds: Vec<String> = json_lines(&o).iter().map(|s| s["kind"].to_string()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["\"Redisson lock\"", "\"Redisson read-write lock\""],
        "{kinds:?}"
    );

    for (name, args) in [("java-job", vec![]), ("java-rw", vec!["--shared"])] {
        let before = server.cmd(&["HGETALL", name]).strings();
        let mut c = cli(&server);
        c.args(["run", name, "--wait", "1s"]).args(&args).args(["--", "true"]);
        let o = run(c, Duration::from_secs(20));
        assert_eq!(code(&o), 75, "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains("held by a Redisson client"), "{}", stderr(&o));
        assert_eq!(server.cmd(&["HGETALL", name]).strings(), before, "{name}");
    }
}

/// `lockwarden elect` runs its command only while leading and `leader`
/// prints who leads: a second campaign waits; when the leading
/// `lockwarden` is killed (SIGKILL), its command dies with it, so it is
/// gone before the next leader's command starts (after the lease); a
/// watcher prints each leader in turn; with nobody leading, `leader`
/// exits 75.
#[test]
fn elect_runs_the_command_of_one_leader_at_a_time_and_leader_prints_it() {
    let server = RedisServer::start();
    let dir = tempdir("elect");
    let d = dir.display();
    let mut a = cli(&server);
    a.args(["elect", "e", "--watchdog-lease", "2s", "--value", "A", "--"])
        .args([
            "sh",
            "-c",
            &format!("echo $$ > {d}/a.tmp; mv {d}/a.tmp {d}/a; exec sleep 60"),
        ]);
    let mut a = a.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    assert!(
        eventually_sync(T, || dir.join("a").exists()),
        "the first leader's command did not start"
    );
    let mut l = cli(&server);
    l.args(["leader", "e"]);
    let o = run(l, T);
    assert_eq!(
        (code(&o), String::from_utf8_lossy(&o.stdout).trim()),
        (0, "A"),
        "{}",
        stderr(&o)
    );
    let mut l = cli(&server);
    l.args(["leader", "e", "--json"]);
    let first = json_lines(&run(l, T)).remove(0);
    assert_eq!(first["value"], "A");
    let term_a = first["term"].as_u64().unwrap();
    let mut w = cli(&server);
    w.args(["leader", "e", "--watch"]);
    let watcher = w.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    // The next leader's command: is the first one's still alive (a zombie
    // counts as gone)?
    let check = format!(
        "s=$(cut -d' ' -f3 /proc/$(cat {d}/a)/stat 2>/dev/null); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo alive > {d}/overlap; fi; echo $LOCKWARDEN_TOKEN > {d}/b"
    );
    let mut b = cli(&server);
    b.args(["elect", "e", "--value", "B", "--wait", "20s", "--", "sh", "-c", &check]);
    let b = b.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !dir.join("b").exists(),
        "a second leader's command ran while the first led"
    );
    unsafe { libc::kill(a.id() as i32, libc::SIGKILL) };
    let _ = a.wait();
    let o = wait(b, T);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!dir.join("overlap").exists(), "the killed leader's command outlived it");
    let term_b: u64 = std::fs::read_to_string(dir.join("b")).unwrap().trim().parse().unwrap();
    assert!(term_b > term_a, "{term_b} after {term_a}");
    unsafe { libc::kill(watcher.id() as i32, libc::SIGINT) };
    let o = wait(watcher, T);
    let lines: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect();
    assert_eq!(lines, ["A", "B"], "the watcher's lines");
    let mut l = cli(&server);
    l.args(["leader", "e"]);
    let o = run(l, T);
    assert_eq!(code(&o), 75, "no leader: {}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A leading `lockwarden elect` that is paused (SIGSTOP) cannot stop its
/// command itself; its keeper does, before the lease ends: the next
/// leader's command starts only after the paused one's is gone. Resumed,
/// the paused run finds its leadership lost and exits 70.
#[test]
fn a_paused_leaders_command_is_stopped_before_the_next_leaders_starts() {
    let server = RedisServer::start();
    let dir = tempdir("elect-paused");
    let d = dir.display();
    let mut a = cli(&server);
    a.args([
        "elect",
        "p",
        "--watchdog-lease",
        "2s",
        "--kill-grace",
        "300ms",
        "--value",
        "A",
        "--",
    ])
    .args([
        "sh",
        "-c",
        &format!("echo $$ > {d}/a.tmp; mv {d}/a.tmp {d}/a; exec sleep 60"),
    ]);
    let a = a.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(
        eventually_sync(T, || dir.join("a").exists()),
        "the first leader's command did not start"
    );
    // SAFETY: kill(2) on our own child with a valid signal.
    unsafe { libc::kill(a.id() as i32, libc::SIGSTOP) };
    let check = format!(
        "s=$(cut -d' ' -f3 /proc/$(cat {d}/a)/stat 2>/dev/null); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo alive > {d}/overlap; fi; touch {d}/b"
    );
    let mut b = cli(&server);
    b.args(["elect", "p", "--value", "B", "--wait", "20s", "--", "sh", "-c", &check]);
    let o = run(b, T);
    // SAFETY: as above.
    unsafe { libc::kill(a.id() as i32, libc::SIGCONT) };
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(dir.join("b").exists());
    assert!(
        !dir.join("overlap").exists(),
        "the paused leader's command still ran when the next one started"
    );
    let o = wait(a, T);
    assert_eq!(code(&o), 70, "the resumed leader: {}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `lockwarden latch`: set once, counted down from other processes, a
/// waiter let through at zero, a lost latch never taken for zero (exit
/// 70); `unlock NAME --permit ID` gives back one permit of a running
/// command, which then finds its permit lost (exit 70).
#[test]
fn latch_and_permit_commands() {
    let server = RedisServer::start();
    let latch = |args: &[&str]| {
        let mut c = cli(&server);
        c.args(["latch"]).args(args);
        run(c, T)
    };
    assert_eq!(code(&latch(&["l"])), 75, "no latch yet");
    assert_eq!(code(&latch(&["l", "--set", "2"])), 0);
    assert_eq!(code(&latch(&["l", "--set", "3"])), 75, "still counting");
    let mut w = cli(&server);
    w.args(["latch", "l", "--wait"]);
    let waiter = w.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let o = latch(&["l", "--count-down"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1");
    assert_eq!(code(&latch(&["l", "--wait", "--timeout", "200ms"])), 75, "not at zero");
    let o = latch(&["l", "--count-down"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0");
    let o = wait(waiter, T);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&latch(&["l"]).stdout).trim(), "0");
    assert_eq!(code(&latch(&["m", "--set", "1"])), 0);
    let mut w = cli(&server);
    w.args(["latch", "m", "--wait"]);
    let waiter = w.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server.flushall();
    let o = wait(waiter, T);
    assert_eq!(code(&o), 70, "a lost latch: {}", stderr(&o));

    let dir = tempdir("permit-by-id");
    let mut r = cli(&server);
    r.args(["run", "s", "--permits", "2", "--watchdog-lease", "2s", "--"])
        .args([
            "sh",
            "-c",
            &format!("echo $LOCKWARDEN_PERMIT > {}/id; sleep 30", dir.display()),
        ]);
    let running = r.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    assert!(eventually_sync(T, || std::fs::read_to_string(dir.join("id"))
        .is_ok_and(|s| s.ends_with('\n'))));
    let id = std::fs::read_to_string(dir.join("id")).unwrap().trim().to_string();
    let mut u = cli(&server);
    u.args(["unlock", "s", "--permit", &id]);
    assert_eq!(code(&run(u, T)), 0);
    let o = wait(running, T);
    assert_eq!(code(&o), 70, "{}", stderr(&o));
    let mut u = cli(&server);
    u.args(["unlock", "s", "--permit", &id]);
    assert_eq!(code(&run(u, T)), 75, "given back already");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through the command too, a shared run that waited for an exclusive run
/// goes in before the exclusive run that waited behind it (the reader's
/// pass), and that one after it: the order is A, the shared run, B.
#[test]
fn a_shared_run_that_waited_goes_before_the_next_exclusive_run() {
    let server = RedisServer::start();
    let dir = tempdir("phase");
    let d = dir.display();
    let spawn = |flag: &str, script: String| {
        let mut c = cli(&server);
        c.args(["run", "phase", flag, "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let fields = |prefix: &str| {
        server
            .cmd(&["HKEYS", "phase"])
            .strings()
            .iter()
            .filter(|f| f.starts_with(prefix))
            .count()
    };
    let a = spawn(
        "--exclusive",
        format!("echo A >> {d}/order; while [ ! -e {d}/go ]; do sleep 0.05; done"),
    );
    assert!(eventually_sync(Duration::from_secs(20), || dir.join("order").exists()));
    let r = spawn("--shared", format!("echo R >> {d}/order; sleep 0.3"));
    assert!(
        eventually_sync(Duration::from_secs(20), || fields(":wait") == 1),
        "the shared run waits, listening"
    );
    let b = spawn("--exclusive", format!("echo B >> {d}/order"));
    assert!(
        eventually_sync(Duration::from_secs(20), || fields(":ww:") == 1),
        "the second exclusive run waits, its mark left"
    );
    std::fs::write(dir.join("go"), "").unwrap();
    for child in [a, r, b] {
        let o = wait(child, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let order = std::fs::read_to_string(dir.join("order")).unwrap();
    assert_eq!(order.split_whitespace().collect::<Vec<_>>(), ["A", "R", "B"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run naming several locks gets in while other processes take each
/// name on its own in a loop (two tasks per name, 5 ms holds): before
/// 2026-11-28 the multi-lock under it was refused for as long as they went
/// on, and such a run timed out (exit 75).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_naming_several_locks_gets_in_among_others_taking_turns() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    let server = RedisServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(AtomicU32::new(0));
    let mut loops = Vec::new();
    for name in ["acct:a", "acct:a", "acct:b", "acct:b"] {
        let c = lockwarden::Client::connect(&server.url()).await.unwrap();
        let (stop, turns) = (stop.clone(), turns.clone());
        loops.push(tokio::spawn(async move {
            let l = c.lock(name).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let g = l.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.unlock().await.unwrap();
                turns.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    assert!(eventually(Duration::from_secs(10), || turns.load(Ordering::Relaxed) >= 40).await);
    for _ in 0..3 {
        let mut c = cli(&server);
        c.args(["run", "acct:a", "acct:b", "--wait", "5s", "--", "true"]);
        let o = tokio::task::spawn_blocking(move || run(c, Duration::from_secs(30)))
            .await
            .unwrap();
        assert_eq!(code(&o), 0, "the run gets both names: {}", stderr(&o));
    }
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.unwrap();
    }
}
