//! The keeper: a small process beside CMD that stops CMD's process group
//! when `lockwarden` itself cannot, because it is paused (SIGSTOP, a
//! frozen VM) or dead.
//!
//! `run` starts it as `lockwarden __keep <pgid> <grace ms>`, in a process
//! group of its own, and writes to its stdin, one line each, the time at
//! which CMD's group must be stopped (on `CLOCK_MONOTONIC`, which every
//! process of the machine shares, in ms): the moment `run` itself would
//! stop it if the hold's validity did not move on. `run` moves it on at
//! every look at the validity. When that time comes without a newer one,
//! the keeper sends SIGTERM to the group, and SIGKILL after the grace: the
//! group is gone before the lock can run out, paused `lockwarden` or not.
//! When its stdin ends without `done` (`lockwarden` died), the group is
//! killed at once. `done` (CMD's group was dealt with) ends it quietly.

use std::time::Duration;

/// What `run` writes to the keeper.
pub enum Note {
    /// Stop CMD's group at this monotonic time (ms).
    StopAt(u64),
    /// Nothing left to keep.
    Done,
}

/// The shared monotonic clock, in ms.
pub fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The keeper of `run`: started by [`Keeper::start`], told by [`Keeper::note`].
pub struct Keeper {
    child: std::process::Child,
}

impl Keeper {
    /// Starts the keeper of the process group `group`, which stops it
    /// with `grace` between SIGTERM and SIGKILL. `None` when it cannot be
    /// started (`run` goes on without it, as before keepers).
    pub fn start(group: libc::pid_t, grace: Duration) -> Option<Keeper> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe().ok()?;
        let child = std::process::Command::new(exe)
            .args(["__keep", &group.to_string(), &grace.as_millis().to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            // A group of its own: signals meant for lockwarden's group
            // (a terminal's ^Z, a `kill -STOP -PGID`) do not stop it.
            .process_group(0)
            .spawn()
            .map_err(|e| tracing::warn!(error = %e, "cannot start the keeper of the command's group"))
            .ok()?;
        Some(Keeper { child })
    }

    /// Tells the keeper (a failure means it is gone: nothing to do).
    pub fn note(&mut self, note: Note) {
        use std::io::Write;
        let line = match note {
            Note::StopAt(at) => format!("{at}\n"),
            Note::Done => "done\n".to_string(),
        };
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = stdin.write_all(line.as_bytes());
        }
    }

    /// Says `done` and waits for the keeper to leave (briefly).
    pub async fn finish(mut self) {
        self.note(Note::Done);
        drop(self.child.stdin.take());
        for _ in 0..100 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(group: libc::pid_t, sig: i32) -> bool {
    // SAFETY: kill(2) on a process group, with a valid signal.
    unsafe { libc::kill(-group, sig) == 0 }
}

/// SIGTERM, then SIGKILL after `grace` unless the group is gone.
fn stop(group: libc::pid_t, grace: Duration) {
    if !signal(group, libc::SIGTERM) {
        return;
    }
    let until = std::time::Instant::now() + grace;
    while std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
        if !signal(group, 0) {
            return;
        }
    }
    signal(group, libc::SIGKILL);
}

/// The keeper's process: `lockwarden __keep <pgid> <grace ms>`. Returns
/// its exit code.
pub fn main(args: &[String]) -> i32 {
    let (Some(group), Some(grace)) = (
        args.first()
            .and_then(|g| g.parse::<libc::pid_t>().ok())
            .filter(|g| *g > 1),
        args.get(1).and_then(|g| g.parse::<u64>().ok()),
    ) else {
        eprintln!("lockwarden: __keep is started by `lockwarden run`, not by hand");
        return crate::EX_USAGE;
    };
    let grace = Duration::from_millis(grace);
    let fd = libc::STDIN_FILENO;
    let mut stop_at: Option<u64> = None;
    let mut pending = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let timeout = match stop_at {
            Some(at) => at.saturating_sub(monotonic_ms()).min(i32::MAX as u64) as i32,
            None => -1,
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd we own.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if ready == 0 {
            // The time came and `run` did not move it: it is paused.
            stop(group, grace);
            return 0;
        }
        if ready < 0 {
            continue; // EINTR
        }
        // Unbuffered: what poll(2) reports is what was read.
        // SAFETY: read(2) into a buffer we own, at most its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        let n = n.max(0) as usize;
        if n == 0 {
            // lockwarden is gone without a word: nobody keeps the lock for
            // CMD any more.
            signal(group, libc::SIGKILL);
            return 0;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            if line == "done" {
                return 0;
            }
            if let Ok(at) = line.parse::<u64>() {
                stop_at = Some(at);
            }
        }
    }
}
