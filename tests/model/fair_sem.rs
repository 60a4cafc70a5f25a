//! The fair semaphore's model: one master's keys for one fair semaphore
//! (its hash of permit holds, each with its permits, its own deadline and
//! the request whose attempt holds it; the waiter queue with each
//! waiter's deadline and grant ask; the request records) with
//! `lua/fsem_acquire.lua`, `lua/fsem_release.lua` (its direct grants
//! included), `lua/fsem_leave.lua`, the renewal and `lua/force_unlock.lua`
//! as atomic steps; and clients that each take a number of the permits
//! (one acquisition, with its own permit id, at a time), queue, refresh
//! their place with each attempt, are handed their permits by a release
//! (told by a message that can be lost, or held up for any number of
//! steps) or find the grant in their record at their next attempt, leave
//! the queue or drop their wait without a word, renew and release.
//! Requests and replies are lost, re-sent and given up on as in
//! [`super::LockModel`]; with `Bounds::resends`, an attempt given up on is
//! re-sent in the background and what it got given back (its release
//! naming the request), while the wait goes on under a fresh request, as
//! the library does. The server loses its data, its clock jumps, a
//! force-unlock deletes the hash. Built as [`super::fair`] is: the client
//! side is the fair lock's wait with permits in place of the lock.
//!
//! A lost hold's release is not checked here, as it is in the reentrant
//! and fair models: a permit id is one acquisition's alone and leaves the
//! queue when its permits are granted, so no step can make a hold of it
//! again once it is lost (no defect found that could; the release of a
//! lost hold answers `NotHeld` by the hold's absence).
//!
//! A hold whose deadline passed stays in the hash until a script looks:
//! the acquire and the release remove such holds first (`snapshot`,
//! `lua/shared_rw.lua`), the renewal removes its own, and the leave gives
//! back its wait's grant dead or alive. The hash's TTL is never below its
//! latest hold's deadline, so the hash is gone once no hold is live.

use stateright::{Model, Property};

use super::fair::{RECORD, WAITER};
use super::net::{self, Line, Net};
use super::server::{recorded, set_record, Owner, Record, Recorded, Req};
use super::LEASE;

/// The semaphore's number of permits.
pub const TOTAL: u8 = 2;

/// A permit id: one acquisition's, `client * 16 + n` (its n-th).
pub type Id = Owner;

fn client_of(id: Id) -> usize {
    usize::from(id / 16)
}

/// One acquisition's hold: its field (permits), `:<id>` (its deadline)
/// and `:q:<id>` (the request whose attempt holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub id: Id,
    pub permits: u8,
    pub deadline: i32,
    pub req: Req,
}

/// A waiter in the queue (its place is its index): its deadline and its
/// ask (permits, the wait's request, the number of the attempt that
/// wrote it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Queued {
    pub id: Id,
    pub deadline: i32,
    pub take: u8,
    pub req: Req,
    pub attempt: u8,
}

/// A message on a client's wake channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    /// `0`: try again.
    Wake,
    /// `g 0 <ms> <request> <attempt>`.
    Grant { ms: i32, req: Req, attempt: u8 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    /// `{1, 0, 1}`.
    Held,
    /// `{0, ms}`: not enough free; ticks to the first holder's deadline.
    Refused { hint: i32 },
    /// `{0, -3}`: enough free, others ahead in the queue.
    Behind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    /// `0`.
    Released,
    /// `-1`.
    NotHeld,
}

/// A defect the model can be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// The waiter claims any grant message to its wait, whichever attempt
    /// it answered.
    ClaimIgnoresAttempt,
    /// A grant in the request record is the reply even when its hold is
    /// gone.
    RecordIgnoresHold,
    /// Free permits are taken by whoever asks, queue or not.
    Barging,
    /// A release hands the head its permits whether they fit or not.
    GrantsPastFit,
    /// A grant's first lease is the asked lease, not cut to the waiter's
    /// queue deadline.
    GrantIgnoresDeadline,
    /// A refused attempt moves the holders' deadlines (the semaphore's
    /// version of a waiter's PEXPIRE on the lock).
    RefusalExtends,
    /// A refresh adds the waiter timeout to the deadline it had.
    DeadlineAddsUp,
    /// The give-back of an attempt whose outcome was unknown releases its
    /// permit id whichever request holds it now (the release names no
    /// request).
    GiveBackById,
    /// A renewal confirmed after the client's validity ended revives it
    /// (the watchdog as it was): it may have found a hold of the same
    /// permit id that a background re-send took anew.
    RenewalRevives,
    /// An attempt does not evict waiters whose deadline passed before it
    /// looks for the head.
    NoEviction,
}

/// The fair semaphore's keys on one master, and the latest message on its
/// way to each client's wake channel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: i32,
    /// Sorted by id.
    pub holds: Vec<Hold>,
    pub queue: Vec<Queued>,
    /// The queue keys' TTL (they live past the last refresh).
    pub queue_expires: i32,
    pub records: Vec<Record>,
    pub mail: Vec<Option<Msg>>,
    /// The messages the last script published, in order (for the
    /// differential test; the checker empties it after each step).
    pub sent: Vec<(usize, Msg)>,
    /// Ghosts: a caller moved a deadline that was not its own hold's; a
    /// hold was made for another than the queue's live head while the head
    /// stayed queued; a grant's lease outlived its waiter's deadline.
    pub waiter_moved_lease: bool,
    pub overtaken: bool,
    pub grant_past_deadline: bool,
}

/// An attempt: a waiter's (`wait`: it queues, or refreshes its place,
/// when refused, with an ask for direct grants), or a single try.
#[derive(Clone, Copy, Debug)]
pub struct Acquire {
    pub id: Id,
    pub take: u8,
    pub req: Req,
    pub attempt: u8,
    pub wait: bool,
}

impl Server {
    pub fn new(clients: usize) -> Server {
        Server {
            now: 0,
            holds: Vec::new(),
            queue: Vec::new(),
            queue_expires: 0,
            records: Vec::new(),
            mail: vec![None; clients],
            sent: Vec::new(),
            waiter_moved_lease: false,
            overtaken: false,
            grant_past_deadline: false,
        }
    }

    pub fn advance(&mut self, ticks: i32) {
        self.now += ticks;
        let now = self.now;
        // The hash's TTL: it ends with its last live hold.
        if self.holds.iter().all(|h| h.deadline <= now) {
            self.holds.clear();
        }
        if self.queue_expires <= now {
            self.queue.clear();
        }
        self.records.retain(|r| r.expires > now);
    }

    /// The server's clock jumps `ticks` ahead (set back when negative):
    /// every deadline it keeps comes that much sooner by the clients'
    /// clocks, or later.
    pub fn jump(&mut self, ticks: i32) {
        for h in &mut self.holds {
            h.deadline -= ticks;
        }
        for q in &mut self.queue {
            q.deadline -= ticks;
        }
        if !self.queue.is_empty() {
            self.queue_expires -= ticks;
        }
        for r in &mut self.records {
            r.expires -= ticks;
        }
        self.advance(0);
    }

    pub fn flush(&mut self) {
        self.holds.clear();
        self.queue.clear();
        self.records.clear();
    }

    /// force_unlock.lua on a fair semaphore: the hash deleted (every
    /// permit), the queue kept, its head told with a plain wake-up.
    pub fn force_unlock(&mut self) {
        self.holds.clear();
        if let Some(q) = self.queue.first() {
            let id = q.id;
            self.send(id, Msg::Wake);
        }
    }

    /// The holds whose deadline has not passed.
    pub fn live(&self) -> impl Iterator<Item = &Hold> {
        let now = self.now;
        self.holds.iter().filter(move |h| h.deadline > now)
    }

    /// `snapshot`'s pruning: the holds whose deadline passed removed.
    fn prune(&mut self) {
        let now = self.now;
        self.holds.retain(|h| h.deadline > now);
    }

    pub fn used(&self) -> u8 {
        self.live().map(|h| h.permits).sum()
    }

    /// The first waiter in the queue whose deadline has not passed.
    pub fn live_head(&self) -> Option<Queued> {
        self.queue.iter().find(|q| q.deadline > self.now).copied()
    }

    fn soonest(&self) -> i32 {
        self.live().map(|h| h.deadline - self.now).min().unwrap_or(1)
    }

    fn send(&mut self, id: Id, msg: Msg) {
        let c = client_of(id);
        self.sent.push((c, msg));
        let slot = &mut self.mail[c];
        // A plain wake-up does not replace a grant the client has yet to
        // read.
        if !(msg == Msg::Wake && matches!(slot, Some(Msg::Grant { .. }))) {
            *slot = Some(msg);
        }
    }

    fn hold(&mut self, h: Hold) {
        self.holds.push(h);
        self.holds.sort_by_key(|h| h.id);
    }

    /// Runs `step` and checks what it did to the holds: a deadline moved
    /// that was not `caller`'s own hold's, a new hold for another than the
    /// live head while the head stays queued.
    fn watched<R>(&mut self, caller: Option<Id>, step: impl FnOnce(&mut Server) -> R) -> R {
        let before = self.holds.clone();
        let head = self.live_head();
        let reply = step(self);
        for h in &self.holds {
            match before.iter().find(|b| b.id == h.id) {
                Some(b) => {
                    if Some(h.id) != caller && b.deadline != h.deadline {
                        self.waiter_moved_lease = true;
                    }
                }
                None => {
                    if let Some(q) = head {
                        if q.id != h.id && self.queue.iter().any(|w| w.id == q.id) {
                            self.overtaken = true;
                        }
                    }
                }
            }
        }
        reply
    }

    /// fsem_acquire.lua (every wait asks for grants, as on one master).
    pub fn acquire(&mut self, a: Acquire, defect: Option<Defect>) -> AcquireReply {
        self.watched(Some(a.id), |s| s.acquire_steps(a, defect))
    }

    fn acquire_steps(&mut self, a: Acquire, defect: Option<Defect>) -> AcquireReply {
        let now = self.now;
        match recorded(&self.records, a.req) {
            Some(Recorded::GaveBack) => return AcquireReply::Behind,
            Some(Recorded::Granted { .. }) => {
                let mine = |h: &Hold| h.id == a.id && h.req == a.req && h.deadline > now;
                if let Some(h) = self.holds.iter_mut().find(|h| mine(h)) {
                    h.deadline = h.deadline.max(now + LEASE);
                    return AcquireReply::Held;
                }
                if defect == Some(Defect::RecordIgnoresHold) {
                    return AcquireReply::Held;
                }
            }
            _ => {}
        }
        self.prune();
        if let Some(h) = self.holds.iter().find(|h| h.id == a.id) {
            if h.req == a.req {
                return AcquireReply::Held;
            }
            return AcquireReply::Refused { hint: self.soonest() };
        }
        let used = self.used();
        if defect != Some(Defect::NoEviction) {
            self.queue.retain(|q| q.deadline > now);
        }
        let mut head = self.queue.first().map(|q| q.id);
        let first = head.is_none() || head == Some(a.id) || defect == Some(Defect::Barging);
        if first && used + a.take <= TOTAL {
            self.hold(Hold {
                id: a.id,
                permits: a.take,
                deadline: now + LEASE,
                req: a.req,
            });
            if self.queue.iter().any(|q| q.id == a.id) {
                self.queue.retain(|q| q.id != a.id);
                // Permits left over go to the next in line.
                if let Some(next) = self.queue.first().map(|q| q.id) {
                    if used + a.take < TOTAL {
                        self.send(next, Msg::Wake);
                    }
                }
            }
            return AcquireReply::Held;
        }
        if a.wait {
            head = self.queue_up(a, defect).or(head);
        }
        if defect == Some(Defect::RefusalExtends) {
            for h in &mut self.holds {
                h.deadline = h.deadline.max(now + LEASE);
            }
        }
        if used + a.take <= TOTAL {
            if let Some(h) = head.filter(|&h| h != a.id) {
                self.send(h, Msg::Wake);
            }
            return AcquireReply::Behind;
        }
        AcquireReply::Refused { hint: self.soonest() }
    }

    /// A refused waiter joins the queue or refreshes its place and its
    /// ask; returns its id when it joined an empty queue (the head now).
    fn queue_up(&mut self, a: Acquire, defect: Option<Defect>) -> Option<Id> {
        let now = self.now;
        let deadline = now + WAITER;
        let mut head = None;
        match self.queue.iter_mut().find(|q| q.id == a.id) {
            Some(q) => {
                q.deadline = if defect == Some(Defect::DeadlineAddsUp) {
                    q.deadline + WAITER
                } else {
                    deadline
                };
                q.take = a.take;
                q.req = a.req;
                q.attempt = a.attempt;
            }
            None => {
                self.queue.push(Queued {
                    id: a.id,
                    deadline,
                    take: a.take,
                    req: a.req,
                    attempt: a.attempt,
                });
                if self.queue.len() == 1 {
                    head = Some(a.id);
                }
            }
        }
        self.queue_expires = now + 2 * WAITER;
        head
    }

    /// fsem_release.lua; `req`: the request whose hold it must be (a
    /// give-back's), `None` for whichever.
    pub fn release(&mut self, id: Id, req: Option<Req>, defect: Option<Defect>) -> ReleaseReply {
        self.watched(None, |s| {
            s.prune();
            let Some(i) = s.holds.iter().position(|h| h.id == id) else {
                return ReleaseReply::NotHeld;
            };
            if req.is_some_and(|r| r != s.holds[i].req) {
                return ReleaseReply::NotHeld;
            }
            s.holds.remove(i);
            s.grant_heads(defect);
            ReleaseReply::Released
        })
    }

    /// The release's hand-over: while the live head's permits fit in what
    /// is free, they are its; heads whose deadline passed are evicted on
    /// the way; a head that does not fit stays the head.
    fn grant_heads(&mut self, defect: Option<Defect>) {
        let now = self.now;
        let mut used = self.used();
        while used < TOTAL && !self.queue.is_empty() {
            let q = self.queue.remove(0);
            if q.deadline <= now {
                continue;
            }
            if used + q.take > TOTAL && defect != Some(Defect::GrantsPastFit) {
                self.queue.insert(0, q);
                break;
            }
            let ms = if defect == Some(Defect::GrantIgnoresDeadline) {
                LEASE
            } else {
                LEASE.min(q.deadline - now)
            };
            if now + ms > q.deadline {
                self.grant_past_deadline = true;
            }
            self.hold(Hold {
                id: q.id,
                permits: q.take,
                deadline: now + ms,
                req: q.req,
            });
            used += q.take;
            set_record(
                &mut self.records,
                q.req,
                Recorded::Granted { token: 0 },
                now + RECORD.max(ms),
            );
            self.send(
                q.id,
                Msg::Grant {
                    ms,
                    req: q.req,
                    attempt: q.attempt,
                },
            );
        }
    }

    /// fsem_leave.lua, with the wait's request: out of the queue, and a
    /// grant it never learned of given back (the hold of its id made by
    /// that request, its deadline passed or not; its record saying
    /// "left").
    /// Returns whether it was queued or gave a grant back.
    pub fn leave(&mut self, id: Id, req: Req) -> bool {
        let was_head = self.queue.first().is_some_and(|q| q.id == id);
        let queued = self.queue.iter().any(|q| q.id == id);
        self.queue.retain(|q| q.id != id);
        let mut freed = false;
        if recorded(&self.records, req) == Some(Recorded::Granted { token: 0 }) {
            if let Some(i) = self.holds.iter().position(|h| h.id == id && h.req == req) {
                self.holds.remove(i);
                let expires = self
                    .records
                    .iter()
                    .find(|r| r.req == req)
                    .map_or(self.now, |r| r.expires);
                set_record(&mut self.records, req, Recorded::GaveBack, expires);
                freed = true;
            }
        }
        if freed || was_head {
            if let Some(next) = self.queue.first().map(|q| q.id) {
                self.send(next, Msg::Wake);
            }
        }
        queued || freed
    }

    /// renew.lua for a permit hold: its deadline moved to now + lease,
    /// never shortened; one whose deadline passed is removed.
    pub fn renew(&mut self, id: Id) -> bool {
        let now = self.now;
        let Some(i) = self.holds.iter().position(|h| h.id == id) else {
            return false;
        };
        if self.holds[i].deadline <= now {
            self.holds.remove(i);
            return false;
        }
        let h = &mut self.holds[i];
        h.deadline = h.deadline.max(now + LEASE);
        true
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub clients: usize,
    /// The permits each client's acquisitions take.
    pub takes: [u8; 3],
    pub acquires: u8,
    pub calls: u8,
    /// FLUSHALL (the server's data lost), in all.
    pub faults: u8,
    /// Jumps of the server's clock, one tick ahead or back, in all.
    pub jumps: u8,
    /// Force-unlocks, in all.
    pub forces: u8,
    /// An attempt given up on is re-sent in the background and what it got
    /// given back, while the wait goes on under a fresh request (as the
    /// library does); without, the wait ends (its late request may still
    /// run). The number is how many of a client's attempts the background
    /// may hold at once (at most [`PENDING`]).
    pub resends: u8,
    pub depth: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Its wait's latest attempt was refused: the acquisition's permit id,
    /// the wait's request, that attempt's number and the tick it was sent
    /// at.
    Waiting {
        id: Id,
        req: Req,
        attempt: u8,
        sent: i32,
    },
    Held {
        id: Id,
        valid_until: i32,
    },
    /// Told its renewal found the hold gone; its release is still to come.
    Lost {
        id: Id,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Attempt { id: Id, req: Req, attempt: u8 },
    Release { id: Id },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Acquire(AcquireReply),
    Release(ReleaseReply),
}

pub type Call = net::Call<Op, Reply>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientState {
    pub phase: Phase,
    pub line: Line<Op, Reply>,
    pub acquires_left: u8,
    pub calls_left: u8,
    /// The leave of a wait it stopped (its permit id and request), on its
    /// way: it runs later, or never.
    pub leaving: Option<(Id, Req)>,
    /// Attempts given up on (their outcome unknown), re-sent in the
    /// background (`Bounds::resends` at once).
    pub pending: [Option<Pending>; PENDING],
}

/// What the background does with an attempt whose outcome is unknown
/// (`quorum::Pending`): re-sends it as a try until it is answered, and
/// gives back what it got; either step may come late, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pending {
    Resend {
        id: Id,
        req: Req,
    },
    /// The re-send got the hold: its release, naming the request.
    GiveBack {
        id: Id,
        req: Req,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
    pub have_held: u8,
    /// Ghost: a waiter took a grant's message for its permits.
    pub granted_by_message: bool,
    pub data_lost: bool,
    pub jumps_left: u8,
    /// Ghosts, as the fair lock's: the clients whose hold a jump ahead cut
    /// short, or a force-unlock deleted, while they count on it; the ticks
    /// the clock was set back.
    pub cut: u8,
    pub forced: u8,
    pub set_back: i32,
    pub forces_left: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start(usize, Op),
    Net(usize, Net),
    /// The message on client `c`'s wake channel reaches its sleeping wait.
    Deliver(usize),
    LoseMessage(usize),
    /// A waiter stops waiting and sends its leave, which reaches the
    /// server later ([`Action::LeaveRuns`]).
    Leave(usize),
    LeaveRuns(usize),
    /// A waiter stops waiting without a word (its leave lost).
    Abandon(usize),
    /// The background's next step for client `c`'s given-up attempt (its
    /// re-send, or its give-back), or its loss.
    PendingRuns(usize, usize),
    PendingLost(usize, usize),
    Renew(usize),
    RenewUnheard(usize),
    Tick,
    Flush,
    JumpAhead,
    JumpBack,
    ForceUnlock,
}

#[derive(Clone, Debug)]
pub struct FairSemModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

impl FairSemModel {
    pub fn new(bounds: Bounds) -> FairSemModel {
        FairSemModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> FairSemModel {
        FairSemModel {
            bounds,
            defect: Some(defect),
        }
    }

    fn take(&self, c: usize) -> u8 {
        self.bounds.takes[c]
    }

    /// The permits of the clients that believe they hold them with
    /// validity left (a client releasing has left its critical section).
    pub fn valid_permits(&self, s: &State) -> u8 {
        s.clients
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.line.calls(|op| matches!(op, Op::Release { .. })))
            .filter(|(_, c)| matches!(c.phase, Phase::Held { valid_until, .. } if s.server.now < valid_until))
            .map(|(i, _)| self.take(i))
            .sum()
    }

    /// Whether a client holds with validity left while a jump ahead cut
    /// its hold short, or a force-unlock deleted it.
    pub fn holds_cut_short(s: &State) -> bool {
        s.clients.iter().enumerate().any(|(c, cl)| {
            (s.cut | s.forced) & (1 << c) != 0
                && matches!(cl.phase, Phase::Held { valid_until, .. } if s.server.now < valid_until)
        })
    }

    /// Forgets the cuts that shorten nothing any more.
    fn heal(s: &mut State) {
        for (c, cl) in s.clients.iter().enumerate() {
            let whole = match cl.phase {
                Phase::Idle => cl.line.call.is_none(),
                Phase::Held { id, valid_until } => {
                    cl.line.call.is_none() && s.server.live().any(|h| h.id == id && h.deadline >= valid_until)
                }
                _ => false,
            };
            if whole {
                s.cut &= !(1 << c);
                s.forced &= !(1 << c);
            }
        }
    }

    fn execute(&self, s: &mut State, c: usize, call: Call) -> Reply {
        match call.op {
            Op::Attempt { id, req, attempt } => Reply::Acquire(s.server.acquire(
                Acquire {
                    id,
                    take: self.take(c),
                    req,
                    attempt,
                    wait: true,
                },
                self.defect,
            )),
            Op::Release { id } => Reply::Release(s.server.release(id, None, self.defect)),
        }
    }

    fn hear(&self, s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        let Some((call, reply)) = cl.line.heard() else { return };
        match (call.op, reply) {
            (Op::Attempt { id, .. }, Reply::Acquire(AcquireReply::Held)) => {
                if matches!(cl.phase, Phase::Idle | Phase::Waiting { .. }) {
                    cl.phase = Phase::Held {
                        id,
                        valid_until: call.since + LEASE,
                    };
                    s.have_held |= 1 << c;
                }
            }
            (Op::Attempt { id, req, attempt }, Reply::Acquire(_)) => {
                if matches!(cl.phase, Phase::Idle | Phase::Waiting { .. }) {
                    cl.phase = Phase::Waiting {
                        id,
                        req,
                        attempt,
                        sent: call.since,
                    };
                }
            }
            (Op::Release { .. }, Reply::Release(_)) => cl.phase = Phase::Idle,
            _ => {}
        }
    }

    /// The message on client `c`'s channel reaches its wait: a grant to
    /// its request naming its latest attempt, with more than half of its
    /// lease left counted from that attempt's send, is its permits
    /// (`wait::claim_grant`); anything else only wakes it.
    fn deliver(&self, s: &mut State, c: usize) {
        let now = s.server.now;
        let Some(msg) = s.server.mail[c].take() else { return };
        let Phase::Waiting { id, req, attempt, sent } = s.clients[c].phase else {
            return;
        };
        if let Msg::Grant { ms, req: r, attempt: n } = msg {
            let named = n == attempt || self.defect == Some(Defect::ClaimIgnoresAttempt);
            if r == req && named && 2 * (now - sent) < ms {
                s.clients[c].phase = Phase::Held {
                    id,
                    valid_until: sent + ms,
                };
                s.have_held |= 1 << c;
                s.granted_by_message = true;
            }
        }
    }

    fn renew(&self, s: &mut State, c: usize, heard: bool) {
        let now = s.server.now;
        let Phase::Held { id, valid_until } = s.clients[c].phase else {
            return;
        };
        let ok = s.server.renew(id);
        if heard {
            // Confirmed after the validity ended: the validity stays ended
            // (`watchdog::tick` marks such a hold lost; its release may
            // still find it); else a hold of the same permit id that a
            // background re-send took anew would pass for the client's.
            let revives = self.defect == Some(Defect::RenewalRevives);
            let lapsed = now >= valid_until && !revives;
            s.clients[c].phase = if ok && lapsed {
                s.clients[c].phase
            } else if ok {
                Phase::Held {
                    id,
                    valid_until: valid_until.max(now + LEASE),
                }
            } else {
                Phase::Lost { id }
            };
        }
    }

    /// Whether every waiter owed its permits gets them by its own next
    /// attempt (three steps of its own, nobody else acting): the live head
    /// whose permits fit in what is free, and one a release handed them to
    /// (its message lost, or yet to come).
    fn owed_permits_by_next_attempt(&self, s: &State) -> bool {
        let head = s.server.live_head().map(|q| q.id);
        let used = s.server.used();
        s.clients.iter().enumerate().all(|(c, cl)| {
            let Phase::Waiting { id, req, attempt, .. } = cl.phase else {
                return true;
            };
            if cl.line.call.is_some() || cl.calls_left == 0 {
                return true;
            }
            let free_head = head == Some(id) && used + self.take(c) <= TOTAL;
            let granted = s.server.live().any(|h| h.id == id && h.req == req)
                && recorded(&s.server.records, req) == Some(Recorded::Granted { token: 0 });
            if !free_head && !granted {
                return true;
            }
            let next = Op::Attempt {
                id,
                req,
                attempt: attempt + 1,
            };
            [
                Action::Start(c, next),
                Action::Net(c, Net::Run),
                Action::Net(c, Net::Hear),
            ]
            .iter()
            .try_fold(s.clone(), |t, &a| self.next_state(&t, a))
            .is_some_and(|t| matches!(t.clients[c].phase, Phase::Held { .. }))
        })
    }

    /// The background's step for client `c`'s given-up attempt.
    fn background(&self, s: &mut State, c: usize, i: usize) {
        match s.clients[c].pending[i].take() {
            Some(Pending::Resend { id, req }) => {
                let a = Acquire {
                    id,
                    take: self.take(c),
                    req,
                    attempt: 0,
                    wait: false,
                };
                if s.server.acquire(a, self.defect) == AcquireReply::Held {
                    s.clients[c].pending[i] = Some(Pending::GiveBack { id, req });
                }
            }
            Some(Pending::GiveBack { id, req }) => {
                let named = (self.defect != Some(Defect::GiveBackById)).then_some(req);
                s.server.release(id, named, self.defect);
            }
            None => {}
        }
    }

    /// What every step ends with.
    fn settle(&self, mut s: State) -> State {
        s.server.sent.clear();
        Self::heal(&mut s);
        s
    }

    fn client(&self) -> ClientState {
        ClientState {
            phase: Phase::Idle,
            line: Line::default(),
            acquires_left: self.bounds.acquires,
            calls_left: self.bounds.calls,
            leaving: None,
            pending: [None; PENDING],
        }
    }

    /// Client `c`'s next acquisition's first attempt.
    fn first_attempt(&self, c: usize, cl: &ClientState) -> Op {
        Op::Attempt {
            id: (c as Id) * 16 + (self.bounds.acquires - cl.acquires_left),
            req: req_of(c, self.bounds.calls, cl.calls_left),
            attempt: 1,
        }
    }
}

/// The most attempts of one client in the background at once.
pub const PENDING: usize = 2;

/// The request id of client `c`'s call when it has `left` calls left.
fn req_of(c: usize, calls: u8, left: u8) -> Req {
    (c as Req) * 64 + Req::from(calls - left)
}

impl Model for FairSemModel {
    type State = State;
    type Action = Action;

    /// Three starts, five with `resends`: nothing held; every client but the last holding its
    /// permits, the last queued (its permits do not fit beside theirs);
    /// client 0's release just made, which hands the last client its
    /// permits when they fit then (with two clients), its message on the
    /// way; client 0's first attempt given up on after it took its
    /// permits, the wait going on under a fresh request; and that wait
    /// holding anew after the first hold lapsed. The later ones are
    /// reached from the first by the model's own steps.
    fn init_states(&self) -> Vec<State> {
        let n = self.bounds.clients;
        let empty = State {
            server: Server::new(n),
            clients: (0..n).map(|_| self.client()).collect(),
            faults_left: self.bounds.faults,
            have_held: 0,
            granted_by_message: false,
            data_lost: false,
            jumps_left: self.bounds.jumps,
            cut: 0,
            forced: 0,
            set_back: 0,
            forces_left: self.bounds.forces,
        };
        let mut states = vec![empty.clone()];
        let last = n - 1;
        let before: u8 = (0..last).map(|c| self.take(c)).sum();
        if n < 2 || self.bounds.acquires == 0 || self.bounds.calls < 2 || before > TOTAL {
            return states;
        }
        if before + self.take(last) <= TOTAL {
            return states;
        }
        let run = |s: &State, steps: &[Action]| {
            steps
                .iter()
                .try_fold(s.clone(), |s, &a| self.next_state(&s, a))
                .expect("a start the model reaches")
        };
        let busy = (0..n).fold(empty.clone(), |s, c| {
            let first = self.first_attempt(c, &s.clients[c]);
            run(
                &s,
                &[
                    Action::Start(c, first),
                    Action::Net(c, Net::Run),
                    Action::Net(c, Net::Hear),
                ],
            )
        });
        let Phase::Held { id, .. } = busy.clients[0].phase else {
            return states;
        };
        let released = run(
            &busy,
            &[
                Action::Start(0, Op::Release { id }),
                Action::Net(0, Net::Run),
                Action::Net(0, Net::Hear),
            ],
        );
        // Client 0's first attempt took its permits, its reply lost and
        // given up on: the wait goes on, the attempt re-sent behind it.
        let first = self.first_attempt(0, &empty.clients[0]);
        let given_up = run(
            &empty,
            &[
                Action::Start(0, first),
                Action::Net(0, Net::Run),
                Action::Net(0, Net::Lose),
                Action::Tick,
                Action::Net(0, Net::GiveUp),
            ],
        );
        states.push(busy);
        states.push(released);
        if self.bounds.resends > 0 {
            // And where the wait, going on, took the permits anew once the
            // first attempt's hold lapsed, that attempt's re-send still to
            // come.
            if let Phase::Waiting { id, req, attempt, .. } = given_up.clients[0].phase {
                let next = Op::Attempt {
                    id,
                    req,
                    attempt: attempt + 1,
                };
                let retaken = run(
                    &given_up,
                    &[
                        Action::Start(0, next),
                        Action::Tick,
                        Action::Net(0, Net::Run),
                        Action::Net(0, Net::Hear),
                    ],
                );
                states.push(retaken);
            }
            states.push(given_up);
        }
        states
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let now = s.server.now;
        for (c, cl) in s.clients.iter().enumerate() {
            let idle_line = cl.line.call.is_none();
            if cl.calls_left > 0 && idle_line {
                match cl.phase {
                    Phase::Idle if cl.acquires_left > 0 => actions.push(Action::Start(c, self.first_attempt(c, cl))),
                    Phase::Waiting { id, req, attempt, .. } => actions.push(Action::Start(
                        c,
                        Op::Attempt {
                            id,
                            req,
                            attempt: attempt + 1,
                        },
                    )),
                    Phase::Held { id, .. } | Phase::Lost { id } => actions.push(Action::Start(c, Op::Release { id })),
                    _ => {}
                }
            }
            if idle_line && matches!(cl.phase, Phase::Waiting { .. }) {
                if cl.leaving.is_none() {
                    actions.push(Action::Leave(c));
                }
                actions.push(Action::Abandon(c));
            }
            if cl.leaving.is_some() {
                actions.push(Action::LeaveRuns(c));
            }
            for (i, p) in cl.pending.iter().enumerate() {
                if p.is_some() {
                    actions.push(Action::PendingRuns(c, i));
                    actions.push(Action::PendingLost(c, i));
                }
            }
            if s.server.mail[c].is_some() {
                if idle_line {
                    actions.push(Action::Deliver(c));
                }
                actions.push(Action::LoseMessage(c));
            }
            let releasing = cl.line.calls(|op| matches!(op, Op::Release { .. }));
            if matches!(cl.phase, Phase::Held { .. }) && !releasing {
                actions.push(Action::Renew(c));
                actions.push(Action::RenewUnheard(c));
            }
            let mut net = Vec::new();
            cl.line.offer(now, &mut net);
            actions.extend(net.into_iter().map(|n| Action::Net(c, n)));
        }
        actions.push(Action::Tick);
        if s.faults_left > 0 {
            actions.push(Action::Flush);
        }
        let dated = !s.server.holds.is_empty() || !s.server.queue.is_empty() || !s.server.records.is_empty();
        if s.jumps_left > 0 && dated {
            actions.push(Action::JumpAhead);
            actions.push(Action::JumpBack);
        }
        if s.forces_left > 0 && !s.server.holds.is_empty() {
            actions.push(Action::ForceUnlock);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = s.server.now;
        match action {
            Action::Start(c, op) => {
                let calls = self.bounds.calls;
                let cl = &mut s.clients[c];
                if matches!(op, Op::Attempt { attempt: 1, .. }) {
                    cl.acquires_left -= 1;
                }
                let req = req_of(c, calls, cl.calls_left);
                cl.calls_left -= 1;
                cl.line.call = Some(Call::new(op, req, now));
            }
            Action::Net(c, Net::Run) => {
                let (call, _) = s.clients[c].line.sent()?;
                let reply = self.execute(&mut s, c, call);
                s.clients[c].line.reply(reply);
            }
            Action::Net(c, Net::RunLate) => {
                if let Some((call, _)) = s.clients[c].line.take_late() {
                    self.execute(&mut s, c, call);
                }
            }
            Action::Net(c, Net::Hear) => self.hear(&mut s, c),
            Action::Net(c, Net::GiveUp) => {
                let cl = &mut s.clients[c];
                let call = cl.line.give_up()?;
                match call.op {
                    // The attempt is re-sent in the background and what it
                    // got given back; the wait goes on under a fresh
                    // request (`FairWait::failed`), while it has calls
                    // left and the background has room, else it ends.
                    Op::Attempt { id, req, attempt } => {
                        let waiting = matches!(cl.phase, Phase::Idle | Phase::Waiting { .. });
                        let slot = cl.pending[..usize::from(self.bounds.resends)]
                            .iter()
                            .position(Option::is_none);
                        if let Some(i) = slot {
                            cl.pending[i] = Some(Pending::Resend { id, req });
                            if waiting && cl.calls_left > 0 {
                                let fresh = req_of(c, self.bounds.calls, cl.calls_left);
                                cl.calls_left -= 1;
                                cl.phase = Phase::Waiting {
                                    id,
                                    req: fresh,
                                    attempt,
                                    sent: call.since,
                                };
                                return Some(self.settle(s));
                            }
                        }
                        if matches!(cl.phase, Phase::Waiting { .. }) {
                            cl.phase = Phase::Idle;
                        }
                    }
                    Op::Release { .. } => cl.phase = Phase::Idle,
                }
            }
            Action::Net(c, step) => s.clients[c].line.carry(step),
            Action::Deliver(c) => self.deliver(&mut s, c),
            Action::LoseMessage(c) => s.server.mail[c] = None,
            Action::Leave(c) => {
                if let Phase::Waiting { id, req, .. } = s.clients[c].phase {
                    s.clients[c].leaving = Some((id, req));
                }
                s.clients[c].phase = Phase::Idle;
            }
            Action::LeaveRuns(c) => {
                let (id, req) = s.clients[c].leaving.take()?;
                s.server.leave(id, req);
            }
            Action::Abandon(c) => s.clients[c].phase = Phase::Idle,
            Action::PendingRuns(c, i) => self.background(&mut s, c, i),
            Action::PendingLost(c, i) => s.clients[c].pending[i] = None,
            Action::Renew(c) => self.renew(&mut s, c, true),
            Action::RenewUnheard(c) => self.renew(&mut s, c, false),
            Action::Tick => {
                s.server.advance(1);
                shift(&mut s);
            }
            Action::JumpAhead => {
                s.jumps_left -= 1;
                for h in s.server.live() {
                    s.cut |= 1 << client_of(h.id);
                }
                s.server.jump(1);
            }
            Action::JumpBack => {
                s.jumps_left -= 1;
                s.set_back += 1;
                s.server.jump(-1);
            }
            Action::ForceUnlock => {
                s.forces_left -= 1;
                for h in &s.server.holds {
                    s.forced |= 1 << client_of(h.id);
                }
                s.server.force_unlock();
            }
            Action::Flush => {
                s.faults_left -= 1;
                s.data_lost = true;
                s.server.flush();
            }
        }
        Some(self.settle(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("never more permits held with validity left than there are", |m, s| {
                s.data_lost || m.valid_permits(s) <= TOTAL || FairSemModel::holds_cut_short(s)
            }),
            Property::<Self>::always("no waiter's call moves a holder's lease", |_, s| {
                !s.server.waiter_moved_lease
            }),
            Property::<Self>::always("permits go to the head of the queue first", |_, s| !s.server.overtaken),
            Property::<Self>::always("a grant ends by its waiter's queue deadline", |_, s| {
                !s.server.grant_past_deadline
            }),
            Property::<Self>::always(
                "permits free by their lease's end, a waiter's place by its deadline",
                |_, s| {
                    let now = s.server.now;
                    let back = s.set_back;
                    s.server.holds.iter().all(|h| h.deadline <= now + LEASE + back)
                        && s.server.queue.iter().all(|q| q.deadline <= now + WAITER + back)
                },
            ),
            Property::<Self>::always("a waiter owed its permits gets them by its next attempt", |m, s| {
                m.owed_permits_by_next_attempt(s)
            }),
            Property::<Self>::sometimes("two attempts of one client in the background at once", |m, s| {
                m.bounds.resends < 2 || s.clients.iter().any(|c| c.pending.iter().all(Option::is_some))
            }),
            Property::<Self>::sometimes("a waiter is handed its permits by a message", |_, s| {
                s.granted_by_message
            }),
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.clients) - 1
            }),
            Property::<Self>::sometimes("a clock jumping ahead lets too many permits in", |m, s| {
                m.bounds.jumps == 0 || (!s.data_lost && m.valid_permits(s) > TOTAL)
            }),
            Property::<Self>::sometimes("a force-unlock lets too many permits in", |m, s| {
                m.bounds.forces == 0 || (!s.data_lost && m.valid_permits(s) > TOTAL)
            }),
        ]
    }
}

/// Times relative to now (see the reentrant model's `shift`).
fn shift(s: &mut State) {
    let n = s.server.now;
    s.server.now = 0;
    for h in &mut s.server.holds {
        // A deadline passed more than a tick ago is as good as any older.
        h.deadline = (h.deadline - n).max(-1);
    }
    for q in &mut s.server.queue {
        q.deadline -= n;
    }
    s.server.queue_expires = (s.server.queue_expires - n).max(0);
    for r in &mut s.server.records {
        r.expires -= n;
    }
    for cl in &mut s.clients {
        cl.line.shift(n);
        match &mut cl.phase {
            Phase::Held { valid_until, .. } => *valid_until = (*valid_until - n).max(0),
            Phase::Waiting { sent, .. } => *sent = (*sent - n).max(-LEASE),
            _ => {}
        }
    }
}
