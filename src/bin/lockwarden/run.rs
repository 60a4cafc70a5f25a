//! `lockwarden run`: a command under a lock.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use lockwarden::{Lease, LockGuard, LossReason};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::{fail, Ctx, RunArgs, EX_SOFTWARE, EX_TEMPFAIL};

struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of INT, TERM, HUP received.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

enum Outcome {
    Exited(ExitStatus),
    Lost(LossReason),
}

pub async fn run(ctx: &Ctx, args: RunArgs) -> i32 {
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lockwarden: cannot handle signals: {e}");
            return EX_SOFTWARE;
        }
    };
    let client = match ctx.connect(args.watchdog_lease).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let name = &args.name;
    let lock = match if args.fair {
        client.fair_lock(name)
    } else {
        client.lock(name)
    } {
        Ok(l) => l,
        Err(e) => return fail("bad lock name", &e),
    };
    let lease = args.lease.map_or(Lease::Watchdog, Lease::Fixed);
    let acquire = async {
        match args.wait {
            None => lock.lock_with_lease(lease).await.map(Some),
            Some(wait) => lock.try_lock(wait, lease).await,
        }
    };
    // A signal while waiting ends the wait (the acquire is cancel safe).
    let guard: LockGuard = tokio::select! {
        r = acquire => match r {
            Ok(Some(g)) => g,
            Ok(None) => {
                let waited = args.wait.map(humantime::format_duration).map(|d| d.to_string()).unwrap_or_default();
                eprintln!("lockwarden: lock {name:?} not acquired within {waited}");
                return EX_TEMPFAIL;
            }
            Err(e) => return fail(&format!("acquiring lock {name:?}"), &e),
        },
        sig = signals.recv() => return 128 + sig,
    };
    tracing::debug!(lock = %name, token = guard.token(), "acquired; starting the command");

    let mut child = match tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("LOCKWARDEN_LOCK", name)
        .env("LOCKWARDEN_TOKEN", guard.token().to_string())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lockwarden: cannot run {:?}: {e}", args.command[0]);
            let _ = guard.unlock().await;
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let pid = child.id().map(|p| p as libc::pid_t);
    let send = |sig: i32| {
        if let Some(pid) = pid {
            // SAFETY: kill(2) with a pid we spawned and a valid signal number.
            unsafe { libc::kill(pid, sig) };
        }
    };

    let outcome = loop {
        tokio::select! {
            status = child.wait() => match status {
                Ok(s) => break Outcome::Exited(s),
                Err(e) => {
                    eprintln!("lockwarden: waiting for the command failed: {e}");
                    break Outcome::Exited(ExitStatus::from_raw(EX_SOFTWARE << 8));
                }
            },
            reason = guard.lost() => break Outcome::Lost(reason),
            sig = signals.recv() => send(sig),
        }
    };
    match outcome {
        Outcome::Exited(status) => {
            if let Err(e) = guard.unlock().await {
                eprintln!("lockwarden: releasing lock {name:?}: {e}");
            }
            status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
        }
        Outcome::Lost(reason) => {
            eprintln!("lockwarden: lock {name:?} lost while the command ran ({reason}); stopping it");
            send(libc::SIGTERM);
            if tokio::time::timeout(args.kill_grace, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            // Release whatever is left of the hold; it is normally gone.
            let _ = guard.unlock().await;
            EX_SOFTWARE
        }
    }
}
