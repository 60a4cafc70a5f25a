//! `lockwarden status`, `list` and `unlock --force`.

use std::time::Duration;

use lockwarden::{LockKind, LockStatus};
use serde_json::json;

use crate::{fail, Ctx};

/// What a holder field says it is: a semaphore's permit
/// (`<client-uuid>:p<n>:r`), a read-write lock's reader (`<owner>:r`), or an
/// exclusive holder.
enum Holder<'a> {
    Permit,
    Reader(&'a str),
    Exclusive,
}

fn holder(field: &str) -> Holder<'_> {
    match field.strip_suffix(":r") {
        Some(base) => {
            let last = base.rsplit(':').next().unwrap_or("");
            let permit = last.len() > 1 && last.starts_with('p') && last[1..].bytes().all(|b| b.is_ascii_digit());
            if permit {
                Holder::Permit
            } else {
                Holder::Reader(base)
            }
        }
        None => Holder::Exclusive,
    }
}

fn to_json(s: &LockStatus) -> serde_json::Value {
    json!({
        "name": s.name,
        "key": s.key,
        "held": s.is_held(),
        "holders": s.holders.iter().map(|(owner, count)| {
            match holder(owner) {
                Holder::Permit => json!({"permit": owner, "permits": count, "side": "permit"}),
                Holder::Reader(reader) => json!({"owner": reader, "count": count, "side": "read"}),
                Holder::Exclusive => json!({"owner": owner, "count": count, "side": "exclusive"}),
            }
        }).collect::<Vec<_>>(),
        "remaining_lease_ms": s.remaining_lease.map(|d| d.as_millis() as u64),
        "leaked": s.leaked,
        "last_token": s.last_token,
        "queue": s.queue,
        "kind": s.kind.map(|k| k.name()),
    })
}

fn describe(s: &LockStatus) -> String {
    let kind = s.kind.map_or("lock", LockKind::name);
    let mut out = format!("{kind} {:?} (key {:?})\n", s.name, s.key);
    if s.is_held() {
        for (owner, count) in &s.holders {
            match holder(owner) {
                // The id exactly as `run --permits` exports it in
                // LOCKWARDEN_PERMIT.
                Holder::Permit => {
                    let permits = if *count == 1 { "permit" } else { "permits" };
                    out += &format!("  permit {owner} ({count} {permits})\n")
                }
                Holder::Reader(reader) => out += &format!("  read by {reader} (reentry count {count})\n"),
                Holder::Exclusive => out += &format!("  held by {owner} (reentry count {count})\n"),
            }
        }
        match s.remaining_lease {
            Some(d) => out += &format!("  remaining lease {} ms\n", d.as_millis()),
            None => out += "  no TTL: leaked, nothing will free it (lockwarden unlock --force)\n",
        }
    } else {
        out += "  free\n";
    }
    match s.last_token {
        Some(t) => out += &format!("  last fencing token {t}\n"),
        None => out += "  no fencing token handed out yet\n",
    }
    if !s.queue.is_empty() {
        out += &format!("  {} waiting (fair queue, next first):\n", s.queue.len());
        for w in &s.queue {
            out += &format!("    {w}\n");
        }
    }
    out
}

const INSPECT_LEASE: Duration = lockwarden::DEFAULT_WATCHDOG_LEASE;

/// Connects and opens the lock `name`, or says why not (the exit code).
async fn open(ctx: &Ctx, name: &str) -> Result<lockwarden::Lock, i32> {
    let client = ctx.connect(INSPECT_LEASE).await?;
    client.lock(name).map_err(|e| fail("bad lock name", &e))
}

pub async fn status(ctx: &Ctx, name: &str, as_json: bool) -> i32 {
    let lock = match open(ctx, name).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    match lock.status().await {
        Ok(s) if as_json => println!("{}", to_json(&s)),
        Ok(s) => print!("{}", describe(&s)),
        Err(e) => return fail(&format!("reading lock {name:?}"), &e),
    }
    0
}

pub async fn list(ctx: &Ctx, pattern: &str, as_json: bool) -> i32 {
    let client = match ctx.connect(INSPECT_LEASE).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let locks = match client.locks(pattern).await {
        Ok(l) => l,
        Err(e) => return fail("listing locks", &e),
    };
    if as_json {
        for s in &locks {
            println!("{}", to_json(s));
        }
        return 0;
    }
    println!(
        "{:<32} {:>5} {:>8} {:>12} {:>20} {:>7} {:>6}",
        "NAME", "HELD", "HOLDERS", "LEASE_MS", "TOKEN", "QUEUED", "LEAKED"
    );
    for s in &locks {
        println!(
            "{:<32} {:>5} {:>8} {:>12} {:>20} {:>7} {:>6}",
            s.name,
            if s.is_held() { "yes" } else { "no" },
            s.holders.len(),
            s.remaining_lease.map_or("-".to_string(), |d| d.as_millis().to_string()),
            s.last_token.map_or("-".to_string(), |t| t.to_string()),
            s.queue.len(),
            if s.leaked { "yes" } else { "no" }
        );
    }
    0
}

pub async fn force_unlock(ctx: &Ctx, name: &str) -> i32 {
    let lock = match open(ctx, name).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let before = match lock.status().await {
        Ok(s) => s,
        Err(e) => return fail(&format!("reading lock {name:?}"), &e),
    };
    match lock.force_unlock().await {
        Ok(true) => {
            let holders: Vec<String> = before.holders.iter().map(|(o, c)| format!("{o} (count {c})")).collect();
            println!(
                "removed lock {name:?} held by {}",
                if holders.is_empty() {
                    "nobody".into()
                } else {
                    holders.join(", ")
                }
            );
            0
        }
        Ok(false) => {
            println!("no lock {name:?} to remove");
            0
        }
        Err(e) => fail(&format!("removing lock {name:?}"), &e),
    }
}

/// `lockwarden unlock NAME --permit ID`: one acquisition of a semaphore
/// (plain or fair) given back.
pub async fn release_permit(ctx: &Ctx, name: &str, id: &str) -> i32 {
    let client = match ctx.connect(INSPECT_LEASE).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let what = format!("semaphore {name:?}");
    // The two kinds have their own scripts; a name is one or the other.
    for fair in [false, true] {
        let sem = match if fair {
            client.fair_semaphore(name, 1)
        } else {
            client.semaphore(name, 1)
        } {
            Ok(s) => s,
            Err(e) => return fail(&what, &e),
        };
        match sem.release_by_id(id).await {
            Ok(()) => {
                println!("gave back permit {id} of {what}");
                return 0;
            }
            Err(lockwarden::Error::NotHeld { .. }) => {}
            Err(e) => return fail(&what, &e),
        }
    }
    eprintln!("lockwarden: no acquisition {id:?} holds permits of {what}");
    crate::EX_TEMPFAIL
}

/// `lockwarden leader NAME [--json] [--watch]`.
pub async fn leader(ctx: &Ctx, name: &str, as_json: bool, watch: bool) -> i32 {
    let client = match ctx.connect(INSPECT_LEASE).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let election = match client.election(name) {
        Ok(e) => e,
        Err(e) => return fail(&format!("election {name:?}"), &e),
    };
    let show = |l: &lockwarden::Leader| {
        if as_json {
            println!("{}", json!({"name": name, "value": l.value, "term": l.term}));
        } else {
            println!("{}", l.value);
        }
    };
    if !watch {
        return match election.leader().await {
            Ok(Some(l)) => {
                show(&l);
                0
            }
            Ok(None) => {
                eprintln!("lockwarden: election {name:?} has no leader");
                crate::EX_TEMPFAIL
            }
            Err(e) => fail(&format!("election {name:?}"), &e),
        };
    }
    use futures::StreamExt;
    let mut leaders = election.observe();
    loop {
        tokio::select! {
            item = leaders.next() => match item {
                Some(Ok(l)) => show(&l),
                // The stream goes on after a failure (a second later).
                Some(Err(e)) => eprintln!("lockwarden: election {name:?}: {e}"),
                None => return 0,
            },
            _ = tokio::signal::ctrl_c() => return 0,
        }
    }
}

/// What `lockwarden latch` does.
#[derive(Debug)]
pub enum LatchAction {
    Count,
    Set(u64),
    CountDown,
    Wait(Option<Duration>),
}

/// `lockwarden latch NAME [--set N | --count-down | --wait [--timeout D]]`.
pub async fn latch(ctx: &Ctx, name: &str, action: LatchAction) -> i32 {
    let client = match ctx.connect(INSPECT_LEASE).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let latch = match client.count_down_latch(name) {
        Ok(l) => l,
        Err(e) => return fail(&format!("latch {name:?}"), &e),
    };
    let what = format!("latch {name:?}");
    match action {
        LatchAction::Count => match latch.count().await {
            Ok(Some(n)) => {
                println!("{n}");
                0
            }
            Ok(None) => {
                eprintln!("lockwarden: {what} does not exist (never set, deleted, or lost)");
                crate::EX_TEMPFAIL
            }
            Err(e) => fail(&what, &e),
        },
        LatchAction::Set(n) => match latch.try_set_count(n).await {
            Ok(true) => 0,
            Ok(false) => {
                eprintln!("lockwarden: {what} is still counting; not set");
                crate::EX_TEMPFAIL
            }
            Err(e) => fail(&what, &e),
        },
        LatchAction::CountDown => match latch.count_down().await {
            Ok(n) => {
                println!("{n}");
                0
            }
            Err(e) => fail(&what, &e),
        },
        LatchAction::Wait(timeout) => {
            let r = match timeout {
                Some(t) => latch.wait_for(t).await,
                None => latch.wait().await.map(|()| true),
            };
            match r {
                Ok(true) => 0,
                Ok(false) => {
                    eprintln!("lockwarden: {what} not at zero within the timeout");
                    crate::EX_TEMPFAIL
                }
                Err(e) => fail(&what, &e),
            }
        }
    }
}
