//! `lockwarden`: run a command under a distributed lock, inspect locks, and
//! benchmark a deployment. See `lockwarden --help` and the README.

mod bench;
mod inspect;
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
    /// Redis URL; repeat it for a quorum of independent masters (an odd
    /// number, majority wins). Default: $LOCKWARDEN_REDIS (comma-separated),
    /// else redis://127.0.0.1:6379.
    #[arg(long = "redis", value_name = "URL", global = true)]
    redis: Vec<String>,
    /// Prefix put before every lock name to form its key.
    #[arg(long, value_name = "P", default_value = "", global = true)]
    prefix: String,
    /// TLS (rediss:// URLs): trust the CA certificates in FILE (PEM)
    /// instead of the system's roots; a self-signed server certificate
    /// given here is accepted as the server's own.
    #[arg(long, value_name = "FILE", global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// TLS: present the client certificate in FILE (PEM, leaf first), for
    /// servers that require one; needs --tls-key.
    #[arg(long, value_name = "FILE", global = true, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// TLS: the private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", global = true, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Count an acquisition or a renewal only once N replicas acknowledged
    /// it (WAIT), so a failover cannot hand the lock to a second holder.
    #[arg(long, value_name = "N", global = true)]
    min_replicas: Option<u32>,
    /// Count an acquisition or a renewal only once the master's own
    /// append-only file has it on disk (WAITAOF; Redis 7.2 or later, with
    /// appendonly yes), so a restart cannot lose it.
    #[arg(long, global = true)]
    aof_local: bool,
    /// Count an acquisition or a renewal only once N replicas have it in
    /// their append-only files on disk (WAITAOF; Redis 7.2 or later).
    #[arg(long, value_name = "N", global = true)]
    aof_replicas: Option<u32>,
    /// How long --min-replicas, --aof-local and --aof-replicas wait for
    /// their confirmations.
    #[arg(long, value_name = "D", value_parser = duration, default_value = "500ms", global = true)]
    replica_timeout: Duration,
    /// Log to stderr: -v debug, -vv trace.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Acquire NAME, run CMD while holding it, release it when CMD exits.
    Run(RunArgs),
    /// Show one lock: holders, reentry counts, remaining lease, last token, queue.
    Status {
        name: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show every lock under the prefix.
    List {
        /// Only names matching this glob (`*`, `?`).
        #[arg(long = "match", value_name = "GLOB", default_value = "*")]
        pattern: String,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a lock whoever holds it, and wake its waiters.
    Unlock {
        /// Required: this breaks the lock for its holder.
        #[arg(long, required = true)]
        force: bool,
        /// The lock's name (without the key prefix).
        name: String,
    },
    /// Run the benchmark workloads against the given server: W1 one task
    /// locking and unlocking one key; W2 32 tasks on distinct keys; W3 8
    /// clients handing one key around (non-fair); W4 W1 over 5 masters (give
    /// --redis five times); W5 W3 with the fair lock; W6 the watchdog holding
    /// 10,000 locks. The limits (PING, a bare script) are measured first, in
    /// the same run.
    Bench(bench::BenchArgs),
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
    #[arg(long, value_name = "D", value_parser = duration)]
    pub wait: Option<Duration>,
    /// A fixed lease, never renewed; the command is stopped when it runs out.
    #[arg(long, value_name = "D", value_parser = duration, conflicts_with = "watchdog_lease")]
    pub lease: Option<Duration>,
    /// The watchdog lease, renewed every third of it while CMD runs.
    #[arg(long, value_name = "D", value_parser = duration, default_value = "30s")]
    pub watchdog_lease: Duration,
    /// Use the fair (FIFO) lock.
    #[arg(long, conflicts_with_all = ["shared", "exclusive"])]
    pub fair: bool,
    /// Take the read side of the read-write lock NAME: any number of
    /// `--shared` runs at once, none while an `--exclusive` one runs.
    #[arg(long, conflicts_with = "exclusive")]
    pub shared: bool,
    /// Take the write side of the read-write lock NAME: alone, with no
    /// `--shared` run. A waiting `--exclusive` run holds new `--shared` runs
    /// back.
    #[arg(long, conflicts_with = "permits")]
    pub exclusive: bool,
    /// Take one permit of the semaphore NAME of N permits: at most N such
    /// runs at once. The command sees its permit id in LOCKWARDEN_PERMIT.
    #[arg(long, value_name = "N", conflicts_with_all = ["fair", "shared"])]
    pub permits: Option<u32>,
    /// Time between SIGTERM and SIGKILL to CMD's process group when the lock
    /// is lost or at risk. Termination starts this long (plus a margin of a
    /// tenth of the lease, at most 1 s) before the lock's validity ends, so
    /// it must fit in half the watchdog lease, or in the fixed lease.
    /// Default: 10 s, or half of what fits for a shorter lease.
    #[arg(long, value_name = "D", value_parser = duration)]
    pub kill_grace: Option<Duration>,
    /// The command and its arguments (after `--`).
    // Not `required` for clap: a missing command gets our own message,
    // which says where it goes (`--`) and what was taken for names.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Parses `500ms`, `10s`, `2m`, `1h 30m`.
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write durations like 500ms, 10s, 2m)"))
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
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
            let cmd = <Cli as clap::CommandFactory>::command();
            let code = match clap_mangen::Man::new(cmd).render(&mut std::io::stdout()) {
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
    let tls_ca = match cli.tls_ca.as_deref().map(read).transpose() {
        Ok(pem) => pem,
        Err(code) => return code,
    };
    let tls_client = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => match (read(cert), read(key)) {
            (Ok(cert), Ok(key)) => Some((cert, key)),
            (Err(code), _) | (_, Err(code)) => return code,
        },
        _ => None,
    };
    let ctx = Ctx {
        url: urls[0].clone(),
        urls,
        prefix: cli.prefix.clone(),
        tls_ca,
        tls_client,
        min_replicas: cli.min_replicas.map(|n| (n, cli.replica_timeout)),
        min_aof: (cli.aof_local || cli.aof_replicas.is_some())
            .then(|| (cli.aof_local, cli.aof_replicas.unwrap_or(0), cli.replica_timeout)),
    };
    match cli.command {
        Command::Run(args) => run::run(&ctx, args).await,
        Command::Status { name, json } => inspect::status(&ctx, &name, json).await,
        Command::List { pattern, json } => inspect::list(&ctx, &pattern, json).await,
        Command::Unlock { name, .. } => inspect::force_unlock(&ctx, &name).await,
        Command::Bench(args) => bench::bench(&ctx, args).await,
        Command::Completions { .. } | Command::Man => 0,
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
        b
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
        _ => EX_UNAVAILABLE,
    }
}
