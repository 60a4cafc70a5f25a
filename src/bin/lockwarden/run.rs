//! `lockwarden run`: a command under a lock.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use lockwarden::{Lease, LockGuard, LossReason};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::keeper::{monotonic_ms, Keeper, Note};
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

/// What a run holds: one lock, a semaphore's permit, or several locks.
enum Held {
    One(LockGuard),
    Permit(lockwarden::Permit),
    Many(lockwarden::MultiGuard),
    /// An election's leadership (`lockwarden elect`).
    Leader(lockwarden::Leadership),
}

impl Held {
    /// The fencing token for LOCKWARDEN_TOKEN: the lock's; for several
    /// locks `name=token` pairs separated by spaces; none for a permit.
    fn token(&self) -> String {
        match self {
            Held::One(g) => g.token().to_string(),
            Held::Leader(l) => l.term().to_string(),
            Held::Permit(_) => String::new(),
            Held::Many(g) => g
                .tokens()
                .iter()
                .map(|(n, t)| format!("{n}={t}"))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    fn validity(&self) -> Duration {
        match self {
            Held::One(g) => g.validity(),
            Held::Leader(l) => l.validity(),
            Held::Permit(p) => p.validity(),
            Held::Many(g) => g.validity(),
        }
    }

    /// Whether the hold runs on a direct grant's short first lease (the
    /// reentrant and fair locks', the fair semaphore's), healthy,
    /// with its own lease still to be set (see
    /// `LockGuard::is_extension_pending`): a validity below the time
    /// needed to stop the command is expected then, not a sign of trouble.
    fn awaits_own_lease(&self) -> bool {
        match self {
            Held::One(g) => g.is_extension_pending() && !g.is_at_risk(),
            Held::Permit(p) => p.is_extension_pending() && !p.is_at_risk(),
            Held::Many(g) => g.is_extension_pending() && !g.is_at_risk(),
            Held::Leader(l) => l.is_extension_pending() && !l.is_at_risk(),
        }
    }

    fn loss_reason(&self) -> Option<LossReason> {
        match self {
            Held::One(g) => g.loss_reason(),
            Held::Leader(l) => l.loss_reason(),
            Held::Permit(p) => p.loss_reason(),
            Held::Many(g) => g.loss_reason(),
        }
    }

    async fn lost(&self) -> LossReason {
        match self {
            Held::One(g) => g.lost().await,
            Held::Leader(l) => l.lost().await,
            Held::Permit(p) => p.lost().await,
            Held::Many(g) => g.lost().await,
        }
    }

    async fn unlock(self) -> lockwarden::Result<()> {
        match self {
            Held::One(g) => g.unlock().await,
            Held::Leader(l) => l.resign().await,
            Held::Permit(p) => p.release().await,
            Held::Many(g) => g.unlock().await,
        }
    }
}

enum Outcome {
    Exited(ExitStatus),
    Lost(LossReason),
    /// Renewals stopped getting through and the validity left reached the
    /// time needed to stop the command; what was left then.
    AtRisk(Duration),
}

/// How long before the end of the hold's validity termination must start:
/// the grace between SIGTERM and SIGKILL, plus a margin (a tenth of the
/// lease, at most 1 s) so that SIGKILL lands while the lock is still held.
fn stop_before(lease: Duration, kill_grace: Duration) -> Duration {
    kill_grace + (lease / 10).min(Duration::from_secs(1))
}

/// Refuses a `--kill-grace` that cannot fit: the command would not be
/// stopped before the lock can run out. With the watchdog the validity
/// normally stays above two thirds of the lease, and a renewal that fails
/// takes it below half; termination may start only after that.
/// Returns (how long before the validity ends termination starts, the
/// grace). Without `--kill-grace`, the grace is 10 s, or half the room when
/// 10 s do not fit.
fn check_grace(args: &RunArgs) -> Result<(Duration, Duration), String> {
    if args.command.is_empty() {
        let names = args.names.join(" ");
        return Err(format!(
            "no command to run: put it after `--`, as in `lockwarden run {} -- CMD [ARGS...]` \
             (without `--`, every word was taken for a lock name: {names})",
            args.names.first().map_or("NAME", String::as_str),
        ));
    }
    // The leases first: a message about --kill-grace would name a flag the
    // user may not have given.
    let bounds = [
        ("--lease", args.lease, lockwarden::MIN_LEASE),
        (
            "--watchdog-lease",
            Some(args.watchdog_lease),
            lockwarden::MIN_WATCHDOG_LEASE,
        ),
    ];
    for (flag, value, min) in bounds {
        if let Some(v) = value.filter(|v| *v < min || *v > lockwarden::MAX_DURATION) {
            return Err(format!(
                "{flag} {}: must be at least {} and at most 30 days",
                humantime::format_duration(v),
                humantime::format_duration(min),
            ));
        }
    }
    let (lease, room, what) = match args.lease {
        Some(l) => (l, l, "the lease"),
        None => (args.watchdog_lease, args.watchdog_lease / 2, "half the watchdog lease"),
    };
    let grace = match args.kill_grace {
        Some(g) => g,
        None if stop_before(lease, DEFAULT_KILL_GRACE) < room => DEFAULT_KILL_GRACE,
        None => room / 2,
    };
    let stop = stop_before(lease, grace);
    if stop >= room {
        return Err(format!(
            "--kill-grace {} plus a {} margin does not fit in {what} ({}): the command could not be \
             stopped before the lock runs out; shorten --kill-grace or lengthen the lease",
            humantime::format_duration(grace),
            humantime::format_duration(stop - grace),
            humantime::format_duration(room),
        ));
    }
    Ok((stop, grace))
}

/// `--kill-grace` when not given (and when it fits).
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// CMD's process group (CMD leads it): signals go to every process in it.
#[derive(Clone, Copy)]
struct Group(libc::pid_t);

impl Group {
    fn signal(self, sig: i32) {
        // SAFETY: kill(2) on a process group we created, a valid signal.
        unsafe { libc::kill(-self.0, sig) };
    }

    /// Whether any process of the group is left, reaping those re-parented
    /// to us (we are a subreaper). Only after CMD itself was waited for:
    /// reaping it here would take its status from tokio.
    fn alive_after_leader(self) -> bool {
        // SAFETY: waitpid(2) on our own group's processes, no status wanted.
        while unsafe { libc::waitpid(-self.0, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        // SAFETY: kill(2) with signal 0 only checks for existence.
        unsafe { libc::kill(-self.0, 0) == 0 }
    }

    /// Waits until no process of the group is left, or `until`.
    async fn gone_by(self, until: tokio::time::Instant) -> bool {
        loop {
            if !self.alive_after_leader() {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Stops CMD and everything in its group: SIGTERM, then SIGKILL once
/// `grace` has passed, whatever is left. Returns once the group is gone
/// (or, with processes that cannot be reaped, a second after SIGKILL).
async fn stop_group(child: &mut tokio::process::Child, group: Group, grace: Duration) {
    let kill_at = tokio::time::Instant::now() + grace;
    group.signal(libc::SIGTERM);
    let leader = tokio::time::timeout_at(kill_at, child.wait()).await.is_ok();
    if leader && group.gone_by(kill_at).await {
        return;
    }
    group.signal(libc::SIGKILL);
    let _ = child.wait().await;
    group
        .gone_by(tokio::time::Instant::now() + Duration::from_secs(1))
        .await;
}

/// `lockwarden run`, or with `campaign` (the value to proclaim)
/// `lockwarden elect`: the same run under the election's leadership.
pub async fn run(ctx: &Ctx, args: RunArgs, campaign: Option<String>) -> i32 {
    let (stop_before, kill_grace) = match check_grace(&args) {
        Ok(d) => d,
        Err(why) => {
            eprintln!("lockwarden: {why}");
            return crate::EX_USAGE;
        }
    };
    // Orphans of CMD (a backgrounded job whose parent exited) become our
    // children, so they can be waited for and nothing of CMD survives
    // unseen.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER and an integer flag.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lockwarden: cannot handle signals: {e}");
            return EX_SOFTWARE;
        }
    };
    // Connecting counts against --wait: a server restarting or loading is
    // waited for as a held lock is (without --wait, as long as a wait
    // without a deadline retries: the library's default).
    let started = std::time::Instant::now();
    let retry = args.wait.unwrap_or(lockwarden::DEFAULT_RETRY_TRANSIENT_FOR);
    let client = match ctx.connect_within(args.watchdog_lease, retry).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut args = args;
    args.wait = args.wait.map(|w| w.saturating_sub(started.elapsed()));
    let one_kind = args.fair || args.shared || args.exclusive || args.permits.is_some();
    if one_kind && args.names.len() > 1 {
        eprintln!("lockwarden: --fair, --shared, --exclusive and --permits take one NAME");
        return crate::EX_USAGE;
    }
    let joined = args.names.join(" ");
    let name = &joined;
    let what = match campaign {
        Some(_) => format!("leadership of {name:?}"),
        None => format!("lock {name:?}"),
    };
    let lease = args.lease.map_or(Lease::Watchdog, Lease::Fixed);
    let acquire = async {
        let first = &args.names[0];
        if let Some(value) = campaign {
            let election = client.election(first)?;
            return match args.wait {
                None => election.campaign(value).await.map(|l| Some(Held::Leader(l))),
                Some(wait) => election.try_campaign(value, wait).await.map(|l| l.map(Held::Leader)),
            };
        }
        if args.names.len() > 1 {
            let multi = client.multi_lock(&args.names)?;
            return match args.wait {
                None => multi.lock().await.map(|g| Some(Held::Many(g))),
                Some(wait) => multi.try_lock(wait, lease).await.map(|g| g.map(Held::Many)),
            };
        }
        if let Some(n) = args.permits {
            let sem = if args.fair {
                client.fair_semaphore(first, n)?
            } else {
                client.semaphore(first, n)?
            };
            return match args.wait {
                None => sem
                    .try_acquire(lockwarden::MAX_DURATION, lease)
                    .await
                    .map(|p| p.map(Held::Permit)),
                Some(wait) => sem.try_acquire(wait, lease).await.map(|p| p.map(Held::Permit)),
            };
        }
        let lock = if args.fair {
            client.fair_lock(first)?
        } else if args.shared {
            client.rw_lock(first)?.read()
        } else if args.exclusive {
            client.rw_lock(first)?.write()
        } else {
            client.lock(first)?
        };
        match args.wait {
            None => lock.lock_with_lease(lease).await.map(|g| Some(Held::One(g))),
            Some(wait) => lock.try_lock(wait, lease).await.map(|g| g.map(Held::One)),
        }
    };
    // A signal while waiting ends the wait (the acquire is cancel safe).
    let guard: Held = tokio::select! {
        r = acquire => match r {
            Ok(Some(g)) => g,
            Ok(None) => {
                let waited = args.wait.map(humantime::format_duration).map(|d| d.to_string()).unwrap_or_default();
                eprintln!("lockwarden: {what} not acquired within {waited}");
                return EX_TEMPFAIL;
            }
            Err(e @ (lockwarden::Error::InvalidName { .. } | lockwarden::Error::Config(_))) => {
                return fail(&what, &e)
            }
            Err(e) => return fail(&format!("acquiring {what}"), &e),
        },
        sig = signals.recv() => return 128 + sig,
    };
    tracing::debug!(lock = %name, token = %guard.token(), "acquired; starting the command");

    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LOCKWARDEN_LOCK", name)
        .env("LOCKWARDEN_TOKEN", guard.token());
    if let Held::Permit(p) = &guard {
        command.env("LOCKWARDEN_PERMIT", p.id());
    }
    // CMD is killed when lockwarden dies (SIGKILL, a crash): nothing else
    // would stop it before the lock runs out and another holder starts.
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: between fork and exec the closure makes only
        // async-signal-safe calls (prctl, getppid, _exit).
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                // lockwarden died before the line above took effect.
                if libc::getppid() as u32 != parent {
                    libc::_exit(EX_SOFTWARE);
                }
                Ok(())
            });
        }
    }
    let mut child = match command
        // Its own process group: everything it starts can be stopped with it.
        .process_group(0)
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
    let group = Group(child.id().map_or(0, |p| p as libc::pid_t));
    // Stops CMD's group in time should this process stop running (paused)
    // or die; told the time to do it at every look at the validity.
    let mut keeper = Keeper::start(group.0, kill_grace);
    let mut notes = tokio::time::interval((args.watchdog_lease / 10).min(Duration::from_secs(1)));
    notes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let outcome = loop {
        // Termination must start this long before the validity ends; the
        // watchdog moves the validity forward while renewals get through.
        let left = guard.validity();
        if let Some(k) = keeper.as_mut() {
            // A short first lease awaiting its own: the keeper stops the
            // group at its end, the parent checks sooner (below).
            // Half the margin after this process would start (it is the
            // fallback, not a rival): SIGKILL still lands half the margin
            // before the validity ends.
            let room = if guard.awaits_own_lease() && left <= stop_before {
                left
            } else {
                left.saturating_sub(stop_before - (stop_before - kill_grace) / 2)
            };
            k.note(Note::StopAt(monotonic_ms() + room.as_millis() as u64));
        }
        // A direct grant starts on a short lease that its own
        // replaces a third of the way in: look again soon rather than stop
        // a command whose lock is healthy (a failed extension puts the
        // hold at risk, and it is stopped then).
        let check = if guard.awaits_own_lease() && left <= stop_before {
            tokio::time::sleep(PENDING_CHECK)
        } else {
            tokio::time::sleep(left.saturating_sub(stop_before))
        };
        tokio::select! {
            status = child.wait() => match status {
                Ok(s) => break Outcome::Exited(s),
                Err(e) => {
                    eprintln!("lockwarden: waiting for the command failed: {e}");
                    break Outcome::Exited(ExitStatus::from_raw(EX_SOFTWARE << 8));
                }
            },
            reason = guard.lost() => break Outcome::Lost(reason),
            _ = check => {
                // A lost hold has no validity left: say it was lost.
                if let Some(reason) = guard.loss_reason() {
                    break Outcome::Lost(reason);
                }
                let left = guard.validity();
                if left <= stop_before && !guard.awaits_own_lease() {
                    break Outcome::AtRisk(left);
                }
            }
            sig = signals.recv() => group.signal(sig),
            // The keeper hears of the validity again (at the loop's top).
            _ = notes.tick() => {}
        }
    };
    match outcome {
        Outcome::Exited(status) => {
            // Whatever CMD left running in its group must not outlive the lock.
            if group.alive_after_leader() {
                tracing::debug!(lock = %name, "the command left processes in its group; stopping them");
                let grace = kill_grace.min(guard.validity().saturating_sub(stop_before - kill_grace));
                let mut done = child;
                stop_group(&mut done, group, grace).await;
            }
            // A loss known by now, or one the release finds (the hold was
            // force-unlocked or flushed since the last renewal), means the
            // command may have run unprotected: a script must be able to
            // tell, whatever the command returned.
            if let Some(k) = keeper.take() {
                k.finish().await;
            }
            let known = guard.loss_reason();
            let released = guard.unlock().await;
            match (known, released) {
                (Some(reason), _) => {
                    eprintln!("lockwarden: {what} lost while the command ran ({reason})");
                    EX_SOFTWARE
                }
                (None, Err(lockwarden::Error::NotHeld { .. })) => {
                    eprintln!(
                        "lockwarden: {what} lost while the command ran (the release found it no longer \
                         held: force-unlocked, flushed or expired)"
                    );
                    EX_SOFTWARE
                }
                (None, Err(e)) => {
                    eprintln!("lockwarden: releasing {what}: {e}");
                    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
                }
                (None, Ok(())) => status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            }
        }
        Outcome::Lost(reason) => {
            eprintln!("lockwarden: {what} lost while the command ran ({reason}); stopped the command");
            stop_group(&mut child, group, kill_grace).await;
            if let Some(k) = keeper.take() {
                k.finish().await;
            }
            // Release whatever is left of the hold (normally gone); Redis
            // may not be answering, and the lease ends it anyway.
            let _ = tokio::time::timeout(Duration::from_secs(1), guard.unlock()).await;
            EX_SOFTWARE
        }
        Outcome::AtRisk(left) => {
            eprintln!(
                "lockwarden: {what} at risk (renewals not confirmed, {} of validity left); stopped the \
                 command before the lock could run out",
                humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
            );
            // SIGKILL lands while the lock is still held, even when less
            // than the grace was left (a failed extension of a short first
            // lease).
            let grace = kill_grace.min(left.saturating_sub(stop_before - kill_grace));
            stop_group(&mut child, group, grace).await;
            if let Some(k) = keeper.take() {
                k.finish().await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), guard.unlock()).await;
            EX_SOFTWARE
        }
    }
}

/// How often a run whose fair lock awaits its own lease looks at it.
const PENDING_CHECK: Duration = Duration::from_millis(100);
