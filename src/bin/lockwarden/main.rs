//! `lockwarden`: run a command under a distributed lock, inspect locks, and
//! benchmark a deployment. See `lockwarden --help` and the README.

mod bench;
mod inspect;
mod keeper;
mod run;

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use lockwarden::{Client, Error};

/// Exit codes (sysexits.h), part of the command's interface.
pub const EX_USAGE: i32 = 64;
pub const EX_UNAVAILABLE: i32 = 69;
pub const EX_SOFTWARE: i32 = 70;
pub const EX_TEMPFAIL: i32 = 75;

#[derive(Parser, Debug)]
#[command(name = "lockwarden", version, about = "Distributed locks over Redis, from the shell")]
struct Cli {
    #[command(flatten)]
    conn: Conn,
    /// Log to stderr: -v debug, -vv trace.
    #[arg(short, long, action = ArgAction::Count, global = true, help_heading = "Output options")]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Where Redis is and how to talk to it: accepted before the command
/// (`lockwarden --redis URL run ...`) and after it, by the commands that
/// connect; not by `man` and `completions`.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Connection options")]
struct Conn {
    /// Redis URL; repeat it for a quorum of independent masters (an odd
    /// number, majority wins). Default: $LOCKWARDEN_REDIS (comma-separated),
    /// else redis://127.0.0.1:6379.
    #[arg(long = "redis", value_name = "URL")]
    redis: Vec<String>,
    /// Prefix put before every lock name to form its key (default: none).
    #[arg(long, value_name = "P")]
    prefix: Option<String>,
    /// Count an acquisition or a renewal only once N replicas acknowledged
    /// it (WAIT), so a failover cannot hand the lock to a second holder.
    #[arg(long, value_name = "N")]
    min_replicas: Option<u32>,
    /// Count an acquisition or a renewal only once the master's own
    /// append-only file has it on disk (WAITAOF; Redis 7.2 or later, with
    /// appendonly yes), so a restart cannot lose it.
    #[arg(long)]
    aof_local: bool,
    /// Count an acquisition or a renewal only once N replicas have it in
    /// their append-only files on disk (WAITAOF; Redis 7.2 or later).
    #[arg(long, value_name = "N")]
    aof_replicas: Option<u32>,
    /// How long --min-replicas, --aof-local and --aof-replicas wait for
    /// their confirmations (default: 500ms).
    #[arg(long, value_name = "D", value_parser = duration)]
    replica_timeout: Option<Duration>,
    /// Take locks, fair locks, read-write locks and semaphores in
    /// Redisson's layout, shared with Java services using Redisson's RLock,
    /// RFairLock, RReadWriteLock, RSemaphore or RPermitExpirableSemaphore on
    /// the same names (one server, Sentinel or a cluster).
    #[arg(long)]
    redisson_compatible: bool,
    #[command(flatten)]
    tls: Tls,
}

#[derive(Args, Debug, Default)]
#[command(next_help_heading = "TLS options")]
struct Tls {
    /// Trust the CA certificates in FILE (PEM) instead of the system's
    /// roots (rediss:// URLs); a self-signed server certificate given here
    /// is accepted as the server's own.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// Present the client certificate in FILE (PEM, leaf first), for
    /// servers that require one; needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

impl Conn {
    /// These options given after the command, completed by those given
    /// before it.
    fn or(self, before: Conn) -> Conn {
        Conn {
            redis: if self.redis.is_empty() {
                before.redis
            } else {
                self.redis
            },
            prefix: self.prefix.or(before.prefix),
            min_replicas: self.min_replicas.or(before.min_replicas),
            aof_local: self.aof_local || before.aof_local,
            aof_replicas: self.aof_replicas.or(before.aof_replicas),
            replica_timeout: self.replica_timeout.or(before.replica_timeout),
            redisson_compatible: self.redisson_compatible || before.redisson_compatible,
            tls: Tls {
                tls_ca: self.tls.tls_ca.or(before.tls.tls_ca),
                tls_cert: self.tls.tls_cert.or(before.tls.tls_cert),
                tls_key: self.tls.tls_key.or(before.tls.tls_key),
            },
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Acquire NAME, run CMD while holding it, release it when CMD exits.
    Run {
        #[command(flatten)]
        args: RunArgs,
        #[command(flatten)]
        conn: Conn,
    },
    /// Campaign for the election NAME; run CMD only while leading it.
    Elect {
        #[command(flatten)]
        args: ElectArgs,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print the leader of the election NAME (exit 75 when nobody leads).
    Leader {
        /// The election's name (without the key prefix).
        name: String,
        /// One JSON object (name, value, term) instead of the value alone.
        #[arg(long)]
        json: bool,
        /// Print every leader as it comes, one line each, until interrupted
        /// (the current one first, if any).
        #[arg(long)]
        watch: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Set, count down, read or wait for the count-down latch NAME.
    ///
    /// With no action, prints the count (exit 75 when there is no latch).
    Latch {
        /// The latch's name (without the key prefix).
        name: String,
        /// Set the count to N, only when the latch is at zero or absent
        /// (exit 75 while it still counts).
        #[arg(long, value_name = "N", conflicts_with_all = ["count_down", "wait"])]
        set: Option<u64>,
        /// Count down by one; prints what is left.
        #[arg(long, conflicts_with = "wait")]
        count_down: bool,
        /// Wait until the count reaches zero (exit 75 after --timeout; 70
        /// when the latch is deleted or lost while counting: a lost count
        /// is never taken for zero).
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this long.
        #[arg(long, value_name = "D", value_parser = duration, requires = "wait")]
        timeout: Option<Duration>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show one lock: holders, reentry counts, remaining lease, last token, queue.
    Status {
        /// The lock's name (without the key prefix).
        name: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show every lock under the prefix.
    List {
        /// Only names matching this glob (`*`, `?`).
        #[arg(long = "match", value_name = "GLOB", default_value = "*")]
        pattern: String,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete a lock whoever holds it, and wake its waiters.
    ///
    /// With --permit ID: give back that one acquisition of the semaphore
    /// NAME (the LOCKWARDEN_PERMIT of a `run --permits` command); its
    /// holder finds it lost. Exit 75 when no acquisition of that id holds
    /// permits.
    Unlock {
        /// Required without --permit: this breaks the lock for its holder.
        #[arg(long, required_unless_present = "permit")]
        force: bool,
        /// Give back this permit id of the semaphore NAME, instead of
        /// breaking the whole lock.
        #[arg(long, value_name = "ID", conflicts_with = "force")]
        permit: Option<String>,
        /// The lock's name (without the key prefix).
        name: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Measure lock and unlock rates and latencies on this deployment.
    ///
    /// Workloads: W1 one task locking and unlocking one key; W2 32 tasks on
    /// distinct keys; W3 8 clients handing one key around (non-fair); W4 W1
    /// over 5 masters (give --redis five times); W5 W3 with the fair lock;
    /// W6 the watchdog holding 10,000 locks. The limits (PING, a bare
    /// script) are measured first, in the same run.
    Bench {
        #[command(flatten)]
        args: bench::BenchArgs,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish,
    /// powershell), e.g. `lockwarden completions bash > /etc/bash_completion.d/lockwarden`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `lockwarden man > lockwarden.1`.
    Man,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The lock's name; several names take all those locks together (plain
    /// reentrant locks, all or none).
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// Give up after waiting this long (exit 75). Default: wait until acquired.
    #[arg(long, help_heading = "Lock options", value_name = "D", value_parser = duration)]
    pub wait: Option<Duration>,
    /// A fixed lease, never renewed; the command is stopped when it runs out.
    #[arg(long, help_heading = "Lock options", value_name = "D", value_parser = duration, conflicts_with = "watchdog_lease")]
    pub lease: Option<Duration>,
    /// The watchdog lease, renewed every third of it while CMD runs.
    #[arg(long, help_heading = "Lock options", value_name = "D", value_parser = duration, default_value = "30s")]
    pub watchdog_lease: Duration,
    /// Use the fair (FIFO) lock; with --permits, the fair semaphore
    /// (permits in request order).
    #[arg(long, help_heading = "Lock options", conflicts_with_all = ["shared", "exclusive"])]
    pub fair: bool,
    /// Take the read side of the read-write lock NAME: any number of
    /// `--shared` runs at once, none while an `--exclusive` one runs.
    #[arg(long, help_heading = "Lock options", conflicts_with = "exclusive")]
    pub shared: bool,
    /// Take the write side of the read-write lock NAME: alone, with no
    /// `--shared` run. A waiting `--exclusive` run holds new `--shared` runs
    /// back.
    #[arg(long, help_heading = "Lock options", conflicts_with = "permits")]
    pub exclusive: bool,
    /// Take one permit of the semaphore NAME of N permits: at most N such
    /// runs at once. The command sees its permit id in LOCKWARDEN_PERMIT.
    #[arg(long, help_heading = "Lock options", value_name = "N", conflicts_with_all = ["shared"])]
    pub permits: Option<u32>,
    /// Time between SIGTERM and SIGKILL to CMD's process group when the lock
    /// is lost or at risk. Termination starts this long (plus a margin of a
    /// tenth of the lease, at most 1 s) before the lock's validity ends, so
    /// it must fit in half the watchdog lease, or in the fixed lease.
    /// Default: 10 s, or half of what fits for a shorter lease.
    #[arg(long, value_name = "D", value_parser = duration, help_heading = "Run options")]
    pub kill_grace: Option<Duration>,
    /// The command and its arguments (after `--`).
    // Not `required` for clap: a missing command gets our own message,
    // which says where it goes (`--`) and what was taken for names.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The election's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// What this leader proclaims (what `lockwarden leader` prints).
    /// Default: the host name and the process id, as `host:pid`.
    #[arg(long, help_heading = "Lock options", value_name = "V")]
    pub value: Option<String>,
    /// Give up after campaigning this long (exit 75). Default: campaign
    /// until leading.
    #[arg(long, help_heading = "Lock options", value_name = "D", value_parser = duration)]
    pub wait: Option<Duration>,
    /// The watchdog lease of the leadership, renewed every third of it
    /// while CMD runs: a leader that dies is replaced this long after.
    #[arg(long, help_heading = "Lock options", value_name = "D", value_parser = duration, default_value = "30s")]
    pub watchdog_lease: Duration,
    /// As for `run`: time between SIGTERM and SIGKILL to CMD's process
    /// group when the leadership is lost or at risk.
    #[arg(long, value_name = "D", value_parser = duration, help_heading = "Run options")]
    pub kill_grace: Option<Duration>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl ElectArgs {
    /// The run it makes: the election's lock, with the watchdog, and the
    /// value to proclaim.
    fn into_run(self) -> (RunArgs, String) {
        let value = self.value.unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "localhost".to_string());
            format!("{host}:{}", std::process::id())
        });
        let run = RunArgs {
            names: vec![self.name],
            wait: self.wait,
            lease: None,
            watchdog_lease: self.watchdog_lease,
            fair: false,
            shared: false,
            exclusive: false,
            permits: None,
            kill_grace: self.kill_grace,
            command: self.command,
        };
        (run, value)
    }
}

/// The whole man page, one page: the commands are sections of it (no
/// `lockwarden-run(1)` pages to look for), then the exit codes and the
/// environment.
fn man_page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut root = <Cli as clap::CommandFactory>::command();
    root.build();
    let man = clap_mangen::Man::new(root.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    writeln!(out, ".SH COMMANDS")?;
    for sub in root.get_subcommands().filter(|s| s.get_name() != "help") {
        writeln!(out, ".SS \"lockwarden {}\"", sub.get_name())?;
        let man = clap_mangen::Man::new(sub.clone());
        // Each part is rendered as a section of its own; here they are
        // paragraphs of the command's subsection.
        let mut part = Vec::new();
        man.render_synopsis_section(&mut part)?;
        man.render_description_section(&mut part)?;
        man.render_options_section(&mut part)?;
        // The connection, TLS and output options are those above.
        let mut skipping = false;
        for line in String::from_utf8_lossy(&part).lines() {
            let Some(heading) = line.strip_prefix(".SH ").map(|h| h.trim_matches('"')) else {
                if !skipping {
                    writeln!(out, "{line}")?;
                }
                continue;
            };
            skipping = ["CONNECTION OPTIONS", "TLS OPTIONS", "OUTPUT OPTIONS"].contains(&heading);
            match heading {
                "SYNOPSIS" | "DESCRIPTION" => writeln!(out, ".PP")?,
                _ if skipping => {}
                _ => writeln!(out, ".PP\n\\fB{heading}\\fR")?,
            }
        }
    }
    out.write_all(EXIT_STATUS_AND_ENVIRONMENT.as_bytes())?;
    man.render_version_section(out)
}

/// The man page's EXIT STATUS and ENVIRONMENT sections (roff).
const EXIT_STATUS_AND_ENVIRONMENT: &str = r#".SH "EXIT STATUS"
.TP
\fBCMD's status\fR
\fBrun\fR, \fBelect\fR: CMD ran and exited (128 + N when killed by signal N; 127 when CMD was not found).
.TP
\fB0\fR
The other commands: done.
.TP
\fB64\fR
Usage error: bad arguments, a bad lock name or duration, a key that is not a lockwarden lock or is held as another kind.
.TP
\fB69\fR
Redis unreachable or refusing (or replicas and disks not confirming) for the whole \fB--wait\fR; one line on stderr names the failure.
.TP
\fB70\fR
\fBrun\fR: the lock was lost, or at risk, while CMD ran (CMD was stopped), or was found lost when CMD ended.
.TP
\fB75\fR
\fBrun\fR, \fBelect\fR: not acquired within \fB--wait\fR, or the name is held by a Redisson client; \fBleader\fR: nobody leads; \fBlatch\fR: no latch, still counting (\fB--set\fR), or not at zero within \fB--timeout\fR.
.TP
\fB128 + N\fR
\fBrun\fR: lockwarden got signal N while still waiting for the lock.
.SH ENVIRONMENT
.TP
\fBLOCKWARDEN_REDIS\fR
The Redis URLs (comma-separated) when no \fB--redis\fR is given.
.TP
\fBLOCKWARDEN_LOCK\fR, \fBLOCKWARDEN_TOKEN\fR, \fBLOCKWARDEN_PERMIT\fR
Set by \fBrun\fR for CMD: the lock's name (several names: the first), its fencing token, a semaphore permit's id; by \fBelect\fR: the election's name and the leadership's term.
"#;

/// Parses `500ms`, `10s`, `2m`, `1h 30m`.
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write durations like 500ms, 10s, 2m)"))
}

fn main() {
    // Not a command for users: the keeper `run` starts beside CMD.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__keep") {
        std::process::exit(keeper::main(&args[2..]));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap would suggest `unlock` (which breaks a lock) for `lock`:
            // say what holds a lock instead.
            if e.kind() == clap::error::ErrorKind::InvalidSubcommand {
                if let Some(clap::error::ContextValue::String(word)) =
                    e.get(clap::error::ContextKind::InvalidSubcommand)
                {
                    if ["lock", "acquire", "exec", "with", "hold"].contains(&word.as_str()) {
                        eprintln!(
                            "lockwarden: there is no `{word}` command; to hold a lock while a command runs: \
                             lockwarden run NAME -- CMD [ARGS...]"
                        );
                        std::process::exit(EX_USAGE);
                    }
                }
            }
            let code = if e.use_stderr() { EX_USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    // Generated from the definitions above; no Redis needed.
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "lockwarden", &mut std::io::stdout());
            return;
        }
        Command::Man => {
            let code = match man_page(&mut std::io::stdout()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("lockwarden: cannot write the man page: {e}");
                    EX_SOFTWARE
                }
            };
            std::process::exit(code);
        }
        _ => {}
    }
    if cli.verbose > 0 {
        let level = if cli.verbose == 1 {
            "lockwarden=debug"
        } else {
            "lockwarden=trace,fred=debug"
        };
        // Colour only on a terminal: escape codes in a log file or a CI
        // capture are noise.
        use std::io::IsTerminal;
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(level))
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockwarden: cannot start the runtime: {e}");
            std::process::exit(EX_SOFTWARE);
        }
    };
    let code = runtime.block_on(dispatch(cli));
    runtime.shutdown_timeout(Duration::from_millis(500));
    std::process::exit(code);
}

async fn dispatch(cli: Cli) -> i32 {
    let before = cli.conn;
    let (command, conn) = match cli.command {
        Command::Run { args, conn } => (Cmd::Run(args, None), conn.or(before)),
        Command::Elect { args, conn } => {
            let (args, value) = args.into_run();
            (Cmd::Run(args, Some(value)), conn.or(before))
        }
        Command::Leader {
            name,
            json,
            watch,
            conn,
        } => (Cmd::Leader(name, json, watch), conn.or(before)),
        Command::Latch {
            name,
            set,
            count_down,
            wait,
            timeout,
            conn,
        } => {
            let action = match (set, count_down, wait) {
                (Some(n), _, _) => inspect::LatchAction::Set(n),
                (_, true, _) => inspect::LatchAction::CountDown,
                (_, _, true) => inspect::LatchAction::Wait(timeout),
                _ => inspect::LatchAction::Count,
            };
            (Cmd::Latch(name, action), conn.or(before))
        }
        Command::Status { name, json, conn } => (Cmd::Status(name, json), conn.or(before)),
        Command::List { pattern, json, conn } => (Cmd::List(pattern, json), conn.or(before)),
        Command::Unlock { name, permit, conn, .. } => match permit {
            Some(id) => (Cmd::ReleasePermit(name, id), conn.or(before)),
            None => (Cmd::Unlock(name), conn.or(before)),
        },
        Command::Bench { args, conn } => (Cmd::Bench(args), conn.or(before)),
        Command::Completions { .. } | Command::Man => return 0,
    };
    let ctx = match Ctx::from_conn(conn) {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    match command {
        Cmd::Run(args, campaign) => run::run(&ctx, args, campaign).await,
        Cmd::Leader(name, json, watch) => inspect::leader(&ctx, &name, json, watch).await,
        Cmd::Latch(name, action) => inspect::latch(&ctx, &name, action).await,
        Cmd::Status(name, json) => inspect::status(&ctx, &name, json).await,
        Cmd::List(pattern, json) => inspect::list(&ctx, &pattern, json).await,
        Cmd::Unlock(name) => inspect::force_unlock(&ctx, &name).await,
        Cmd::ReleasePermit(name, id) => inspect::release_permit(&ctx, &name, &id).await,
        Cmd::Bench(args) => bench::bench(&ctx, args).await,
    }
}

/// A command that connects, its connection options taken apart.
enum Cmd {
    /// A run, or with a value to proclaim, an election's.
    Run(RunArgs, Option<String>),
    Leader(String, bool, bool),
    Latch(String, inspect::LatchAction),
    Status(String, bool),
    List(String, bool),
    Unlock(String),
    ReleasePermit(String, String),
    Bench(bench::BenchArgs),
}

impl Ctx {
    /// The connection options read (files included), or the exit code.
    fn from_conn(cli: Conn) -> Result<Ctx, i32> {
        let urls = if cli.redis.is_empty() {
            std::env::var("LOCKWARDEN_REDIS")
                .ok()
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default()
        } else {
            cli.redis.clone()
        };
        let urls = if urls.is_empty() {
            vec!["redis://127.0.0.1:6379".to_string()]
        } else {
            urls
        };
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| {
                eprintln!("lockwarden: cannot read {}: {e}", path.display());
                EX_USAGE
            })
        };
        let tls_ca = cli.tls.tls_ca.as_deref().map(read).transpose()?;
        let tls_client = match (&cli.tls.tls_cert, &cli.tls.tls_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            _ => None,
        };
        let replica_timeout = cli.replica_timeout.unwrap_or(Duration::from_millis(500));
        Ok(Ctx {
            url: urls[0].clone(),
            urls,
            prefix: cli.prefix.unwrap_or_default(),
            tls_ca,
            tls_client,
            min_replicas: cli.min_replicas.map(|n| (n, replica_timeout)),
            min_aof: (cli.aof_local || cli.aof_replicas.is_some())
                .then(|| (cli.aof_local, cli.aof_replicas.unwrap_or(0), replica_timeout)),
            redisson_compatible: cli.redisson_compatible,
        })
    }
}

/// What every command needs to connect.
#[derive(Clone)]
pub struct Ctx {
    /// The first master (the only one without a quorum).
    pub url: String,
    /// Every master given; several form a quorum.
    pub urls: Vec<String>,
    pub prefix: String,
    /// PEM of --tls-ca.
    pub tls_ca: Option<Vec<u8>>,
    /// PEM of --tls-cert and --tls-key.
    pub tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// --min-replicas and --replica-timeout.
    pub min_replicas: Option<(u32, Duration)>,
    /// --aof-local, --aof-replicas and --replica-timeout.
    pub min_aof: Option<(bool, u32, Duration)>,
    /// --redisson-compatible.
    pub redisson_compatible: bool,
}

impl Ctx {
    /// Connects to the master or the quorum, or says why not and returns
    /// the exit code.
    pub async fn connect(&self, watchdog_lease: Duration) -> Result<Client, i32> {
        self.connect_within(watchdog_lease, Duration::ZERO).await
    }

    /// As [`Ctx::connect`], retrying a connection that fails for a
    /// passing reason (a server restarting or loading) for `retry`.
    pub async fn connect_within(&self, watchdog_lease: Duration, retry: Duration) -> Result<Client, i32> {
        self.builder()
            .watchdog_lease(watchdog_lease)
            .retry_transient_for(retry)
            .build()
            .await
            .map_err(|e| {
                // With one server the library's message names it already.
                let what = match self.urls.len() {
                    1 => "cannot use redis".to_string(),
                    _ => format!("cannot use redis at {}", self.shown_urls()),
                };
                fail(&what, &e)
            })
    }
}

impl Ctx {
    /// The masters' URLs for messages: without credentials.
    pub fn shown_urls(&self) -> String {
        self.urls
            .iter()
            .map(|u| lockwarden::redact_url(u))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A builder for the masters given, with the prefix and TLS settings.
    pub fn builder(&self) -> lockwarden::ClientBuilder {
        let mut b = Client::builder_for_masters(&self.urls).key_prefix(self.prefix.clone());
        if let Some(ca) = &self.tls_ca {
            b = b.tls_ca_pem(ca.clone());
        }
        if let Some((cert, key)) = &self.tls_client {
            b = b.tls_client_cert_pem(cert.clone(), key.clone());
        }
        if let Some((n, timeout)) = self.min_replicas {
            b = b.min_replicas_acked(n, timeout);
        }
        if let Some((local, replicas, timeout)) = self.min_aof {
            b = b.min_aof_fsynced(local, replicas, timeout);
        }
        b.redisson_compatible(self.redisson_compatible)
    }
}

/// Prints one line for `e` and returns the exit code it maps to.
pub fn fail(what: &str, e: &Error) -> i32 {
    eprintln!("lockwarden: {what}: {e}");
    exit_code(e)
}

/// Bad input is a usage error; everything about reaching Redis is 69.
pub fn exit_code(e: &Error) -> i32 {
    match e {
        Error::InvalidName { .. }
        | Error::InvalidDuration { .. }
        | Error::Config(_)
        | Error::WrongType { .. }
        | Error::WrongKind { .. } => EX_USAGE,
        Error::HeldByRedisson { .. } => EX_TEMPFAIL,
        Error::LatchGone { .. } => EX_SOFTWARE,
        _ => EX_UNAVAILABLE,
    }
}
