//! The fair lock's model: one master's keys for one fair lock name (the
//! lock hash, the waiter queue with each waiter's deadline and grant ask,
//! the fencing counter, the request records) with `lua/fair_acquire.lua`,
//! `lua/fair_release.lua` (its direct grant included), `lua/fair_leave.lua`
//! and the renewal as atomic steps; and clients that queue, refresh their
//! place with each attempt, are handed the lock by an unlock (told by a
//! message that can be lost, or held up for any number of steps) or find
//! the grant in their record at their next attempt, leave the queue or
//! drop their wait without a word, re-enter, release and renew. Requests
//! and replies are lost, re-sent and given up on as in
//! [`super::LockModel`]; the server loses its data or its counter.

use stateright::{Model, Property};

use super::net::{self, Line, Net};
use super::server::{recorded, set_record, Counter, Owner, Record, Recorded, Req};
use super::{KEEP, LEASE};

/// A queued waiter's life without a refresh (the waiter timeout), in
/// ticks. A grant's first lease is the waiter's lease cut to what is left
/// of it.
pub const WAITER: i32 = 3;

/// A grant's record lifetime (the ask's record ms: the client's replay
/// record lifetime), one tick longer than a lease: a record can outlive
/// its grant's hold.
pub const RECORD: i32 = LEASE + 1;

/// A hold of the fair lock: its owner's count, `:token`, `:take` (the
/// request whose own take made it; a grant has none) and the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub owner: Owner,
    pub count: u32,
    pub token: u64,
    pub take: Option<Req>,
    pub expires: i32,
}

/// A waiter in the queue: its place is its index; its deadline (its score
/// in the deadlines set) and its ask (the wait's request, and the number
/// of the attempt that wrote it). A waiter without an ask (`asks` false:
/// a quorum's, which an unlock wakes on its owner field's channel and
/// never hands the lock) has only the deadline; its `req` and `attempt`
/// mean nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Queued {
    pub owner: Owner,
    pub deadline: i32,
    pub req: Req,
    pub attempt: u8,
    pub asks: bool,
}

/// A message on a waiter's wake channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    /// `0`: try again.
    Wake,
    /// `g <token> <ms> <request> <attempt>`.
    Grant { token: u64, ms: i32, req: Req, attempt: u8 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    /// `{1, token, count}`.
    Held { token: u64, count: u32 },
    /// `{0, pttl}`: held by another.
    Refused { pttl: i32 },
    /// `{0, -3}`: free, others ahead in the queue.
    Behind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    Left(u32),
    NotHeld,
}

/// A defect the model can be given back, each once a real defect of a
/// fair lock (here or elsewhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// The waiter claims any grant message to its wait, whichever attempt
    /// it answered (its lease counted from the latest attempt).
    ClaimIgnoresAttempt,
    /// A grant in the request record is the reply even when its hold is
    /// gone.
    RecordIgnoresHold,
    /// A free lock is taken by whoever asks, queue or not.
    Barging,
    /// A grant's first lease is the asked lease, not cut to the waiter's
    /// queue deadline.
    GrantIgnoresDeadline,
    /// The release does not compare the hold's token.
    ReleaseIgnoresToken,
    /// A lost counter starts again at 1.
    CounterRestartsAtOne,
    /// A refused attempt sets the lock's lease (PEXPIRE ... GT).
    RefusalExtends,
    /// A re-entry records no reply.
    ReentryUnrecorded,
    /// Leaving gives back the waiter's grant without checking that it is
    /// still the latest hold (the counter).
    LeaveIgnoresCounter,
    /// A refresh adds the waiter timeout to the deadline it had (a score
    /// incremented, not set).
    DeadlineAddsUp,
    /// An attempt on a free lock does not evict waiters whose deadline
    /// passed before it looks for the head.
    NoEviction,
    /// A renewal confirmed after the client's validity ended revives it
    /// (the watchdog as it was): it may have found a hold of the same
    /// owner that a background re-send took anew.
    RenewalRevives,
    /// `fair_leave.lua` before it named the wait's requests: a leave takes
    /// the owner's place whatever wait it is for.
    LeaveTakesAnyPlace,
}

/// The fair lock's keys on one master, and the messages on their way to
/// each client's wake channel (the latest that said more than "wake up").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: i32,
    pub lock: Option<Hold>,
    pub queue: Vec<Queued>,
    /// The queue keys' TTL (they live past the last refresh).
    pub queue_expires: i32,
    pub counter: Counter,
    pub records: Vec<Record>,
    pub mail: Vec<Option<Msg>>,
    /// The messages the last script published, in order, each with
    /// whether it went to the waiter's wake id (its ask names one) rather
    /// than its owner field (for the differential test; the checker
    /// empties it after each step).
    pub sent: Vec<(Owner, Msg, bool)>,
    /// Ghosts: a release changed a hold that was not the caller's; a
    /// caller that does not hold moved the lease; a free lock went to one
    /// that was not the queue's live head; a grant's lease outlived its
    /// waiter's deadline; a leave took the place of another wait than
    /// its own (a later one of the same owner).
    pub freed_another: bool,
    pub waiter_moved_lease: bool,
    pub barged: bool,
    pub grant_past_deadline: bool,
    pub took_another_place: bool,
}

/// An attempt (`wait`: a waiter's, which queues when refused) or a
/// re-entry; `ask`: a waiter's attempt leaves its grant ask (one master),
/// or none (a quorum's).
#[derive(Clone, Copy, Debug)]
pub struct Acquire {
    pub owner: Owner,
    pub req: Req,
    pub attempt: u8,
    pub wait: bool,
    pub ask: bool,
}

impl Server {
    pub fn new(clients: usize) -> Server {
        Server {
            now: 0,
            lock: None,
            queue: Vec::new(),
            queue_expires: 0,
            counter: Counter::default(),
            records: Vec::new(),
            mail: vec![None; clients],
            sent: Vec::new(),
            freed_another: false,
            waiter_moved_lease: false,
            barged: false,
            took_another_place: false,
            grant_past_deadline: false,
        }
    }

    pub fn advance(&mut self, ticks: i32) {
        self.now += ticks;
        let now = self.now;
        if self.lock.is_some_and(|h| h.expires <= now) {
            self.lock = None;
        }
        if self.queue_expires <= now {
            self.queue.clear();
        }
        self.records.retain(|r| r.expires > now);
    }

    /// force_unlock.lua on a fair lock: the hash deleted whoever holds it,
    /// the queue and the counter kept (fair order stays), and the queue's
    /// head, as it stands (live or not), told with a plain wake-up.
    pub fn force_unlock(&mut self) {
        self.lock = None;
        if let Some(&head) = self.queue.first() {
            self.send(head, Msg::Wake);
        }
    }

    /// The server's clock jumps `ticks` ahead (set back when negative),
    /// the clients' clocks running on: the lock's TTL, the waiters'
    /// deadlines (their scores, read against the server's clock), the
    /// queue's TTL and the records' come that much sooner, or later.
    pub fn jump(&mut self, ticks: i32) {
        if let Some(h) = self.lock.as_mut() {
            h.expires -= ticks;
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

    /// Its times `n` ticks earlier (the checker's times are relative to
    /// now, so states that differ only in when they happen are one).
    pub fn rebase(&mut self, n: i32) {
        self.now -= n;
        if let Some(h) = self.lock.as_mut() {
            h.expires -= n;
        }
        for q in &mut self.queue {
            q.deadline -= n;
        }
        self.queue_expires = (self.queue_expires - n).max(self.now);
        for r in &mut self.records {
            r.expires -= n;
        }
    }

    pub fn flush(&mut self) {
        self.lock = None;
        self.queue.clear();
        self.counter.value = None;
        self.records.clear();
    }

    /// Publishes `msg` to the waiter of place `to` (on its wake id when it
    /// asked, else on its owner field).
    fn send(&mut self, to: Queued, msg: Msg) {
        let owner = to.owner;
        self.sent.push((owner, msg, to.asks));
        let slot = &mut self.mail[owner as usize];
        // A plain wake-up does not replace a grant the waiter has yet to
        // read (the subscriber keeps the latest message that said more).
        if !(msg == Msg::Wake && matches!(slot, Some(Msg::Grant { .. }))) {
            *slot = Some(msg);
        }
    }

    fn next_token(&mut self, defect: Option<Defect>) -> u64 {
        self.counter.next(defect == Some(Defect::CounterRestartsAtOne))
    }

    /// fair_acquire.lua.
    pub fn acquire(&mut self, a: Acquire, defect: Option<Defect>) -> AcquireReply {
        let before = self.lock;
        let reply = self.acquire_steps(a, defect);
        if let (Some(b), Some(h)) = (before, self.lock) {
            if b.owner != a.owner && b.token == h.token && b.expires != h.expires {
                self.waiter_moved_lease = true;
            }
        }
        reply
    }

    fn acquire_steps(&mut self, a: Acquire, defect: Option<Defect>) -> AcquireReply {
        let now = self.now;
        match recorded(&self.records, a.req) {
            Some(Recorded::GaveBack) => return AcquireReply::Behind,
            Some(Recorded::Entered { token, count }) => return AcquireReply::Held { token, count },
            Some(Recorded::Granted { token }) => {
                if let Some(mut h) = self.lock.filter(|h| h.owner == a.owner && h.token == token) {
                    h.expires = h.expires.max(now + LEASE);
                    self.lock = Some(h);
                    return AcquireReply::Held { token, count: 1 };
                }
                if defect == Some(Defect::RecordIgnoresHold) {
                    return AcquireReply::Held { token, count: 1 };
                }
                self.records.retain(|r| r.req != a.req);
            }
            _ => {}
        }
        match self.lock {
            Some(mut h) => {
                if h.take == Some(a.req) {
                    return AcquireReply::Held {
                        token: h.token,
                        count: 1,
                    };
                }
                if h.owner == a.owner {
                    h.count += 1;
                    h.expires = h.expires.max(now + LEASE);
                    self.lock = Some(h);
                    if defect != Some(Defect::ReentryUnrecorded) {
                        let value = Recorded::Entered {
                            token: h.token,
                            count: h.count,
                        };
                        set_record(&mut self.records, a.req, value, now + KEEP);
                    }
                    return AcquireReply::Held {
                        token: h.token,
                        count: h.count,
                    };
                }
                if defect == Some(Defect::RefusalExtends) {
                    h.expires = h.expires.max(now + LEASE);
                    self.lock = Some(h);
                }
            }
            None => {
                if defect != Some(Defect::NoEviction) {
                    self.queue.retain(|q| q.deadline > now);
                }
                let head = self.queue.first().map(|q| q.owner);
                if head.is_none() || head == Some(a.owner) || defect == Some(Defect::Barging) {
                    if head.is_some_and(|o| o != a.owner) {
                        self.barged = true;
                    }
                    let token = self.next_token(defect);
                    self.lock = Some(Hold {
                        owner: a.owner,
                        count: 1,
                        token,
                        take: Some(a.req),
                        expires: now + LEASE,
                    });
                    self.queue.retain(|q| q.owner != a.owner);
                    return AcquireReply::Held { token, count: 1 };
                }
            }
        }
        if a.wait {
            let deadline = now + WAITER;
            match self.queue.iter_mut().find(|q| q.owner == a.owner) {
                Some(q) => {
                    q.deadline = if defect == Some(Defect::DeadlineAddsUp) {
                        q.deadline + WAITER
                    } else {
                        deadline
                    };
                    // A waiter without an ask writes none (one asked
                    // before stays).
                    if a.ask {
                        q.req = a.req;
                        q.attempt = a.attempt;
                        q.asks = true;
                    }
                }
                None => {
                    self.queue.push(Queued {
                        owner: a.owner,
                        deadline,
                        req: a.req,
                        attempt: a.attempt,
                        asks: a.ask,
                    });
                }
            }
            self.queue_expires = now + 2 * WAITER;
        }
        if let Some(h) = self.lock {
            return AcquireReply::Refused { pttl: h.expires - now };
        }
        if let Some(q) = self.queue.first().copied().filter(|q| q.owner != a.owner) {
            self.send(q, Msg::Wake);
        }
        AcquireReply::Behind
    }

    /// fair_release.lua for a caller that knows its token.
    pub fn release(&mut self, owner: Owner, req: Req, token: u64, first: bool, defect: Option<Defect>) -> ReleaseReply {
        let before = self.lock;
        let reply = self.release_steps(owner, req, token, first, defect);
        if let Some(b) = before {
            if (b.owner != owner || b.token != token) && self.lock != before {
                self.freed_another = true;
            }
        }
        reply
    }

    fn release_steps(
        &mut self,
        owner: Owner,
        req: Req,
        token: u64,
        first: bool,
        defect: Option<Defect>,
    ) -> ReleaseReply {
        if !first {
            if let Some(Recorded::Left(n)) = recorded(&self.records, req) {
                return ReleaseReply::Left(n);
            }
        }
        let Some(mut h) = self.lock.filter(|h| h.owner == owner) else {
            return ReleaseReply::NotHeld;
        };
        if h.token != token && defect != Some(Defect::ReleaseIgnoresToken) {
            return ReleaseReply::NotHeld;
        }
        if h.count > 1 {
            h.count -= 1;
            self.lock = Some(h);
            set_record(&mut self.records, req, Recorded::Left(h.count), self.now + KEEP);
            return ReleaseReply::Left(h.count);
        }
        self.lock = None;
        self.grant_head(defect);
        ReleaseReply::Left(0)
    }

    /// The unlock's hand-over: the live head gets the lock when it asked
    /// (one master), or is woken and stays the head (a quorum's waiter).
    fn grant_head(&mut self, defect: Option<Defect>) {
        let now = self.now;
        while self.queue.first().is_some_and(|q| q.deadline <= now) {
            self.queue.remove(0);
        }
        let Some(q) = self.queue.first().copied() else { return };
        if !q.asks {
            self.send(q, Msg::Wake);
            return;
        }
        let token = self.next_token(defect);
        let ms = if defect == Some(Defect::GrantIgnoresDeadline) {
            LEASE
        } else {
            LEASE.min(q.deadline - now)
        };
        self.queue.remove(0);
        self.lock = Some(Hold {
            owner: q.owner,
            count: 1,
            token,
            take: None,
            expires: now + ms,
        });
        if now + ms > q.deadline {
            self.grant_past_deadline = true;
        }
        set_record(
            &mut self.records,
            q.req,
            Recorded::Granted { token },
            now + RECORD.max(ms),
        );
        self.send(
            q,
            Msg::Grant {
                token,
                ms,
                req: q.req,
                attempt: q.attempt,
            },
        );
    }

    /// fair_leave.lua, with the wait's request and every request its asks
    /// named (`wait`: the request, and the asked ones from the wait's
    /// first to its latest): out of the queue when the place's ask names
    /// one of them, or it has no ask (else the place is a later wait's of
    /// the same owner, and a late leave leaves it), and a grant it never
    /// learned of given back while it is the latest hold. A quorum's leave
    /// names nothing (`wait` `None`): it takes the owner's place, whichever
    /// wait's.
    pub fn leave(&mut self, owner: Owner, wait: Option<(Req, std::ops::RangeInclusive<Req>)>, defect: Option<Defect>) {
        let named = |q: &Queued| wait.as_ref().is_none_or(|(_, asked)| !q.asks || asked.contains(&q.req));
        let mine = |q: &Queued| q.owner == owner && (named(q) || defect == Some(Defect::LeaveTakesAnyPlace));
        let was_head = self.queue.first().is_some_and(mine);
        if self.queue.iter().any(|q| mine(q) && !named(q)) {
            self.took_another_place = true;
        }
        self.queue.retain(|q| !mine(q));
        let mut freed = false;
        let granted = wait.as_ref().and_then(|(req, _)| match recorded(&self.records, *req) {
            Some(Recorded::Granted { token }) => Some((*req, token)),
            _ => None,
        });
        if let Some((req, token)) = granted {
            let latest = self.counter.value == Some(token) || defect == Some(Defect::LeaveIgnoresCounter);
            if let Some(mut h) = self.lock.filter(|h| h.owner == owner && latest) {
                if h.token != token {
                    self.freed_another = true;
                }
                let expires = self
                    .records
                    .iter()
                    .find(|r| r.req == req)
                    .map_or(self.now, |r| r.expires);
                set_record(&mut self.records, req, Recorded::GaveBack, expires);
                if h.count > 1 {
                    h.count -= 1;
                    self.lock = Some(h);
                } else {
                    self.lock = None;
                    freed = true;
                }
            }
        }
        if (freed || was_head) && self.lock.is_none() {
            if let Some(q) = self.queue.first().copied() {
                self.send(q, Msg::Wake);
            }
        }
    }

    /// renew.lua for a fair hold.
    pub fn renew(&mut self, owner: Owner) -> bool {
        match self.lock {
            Some(mut h) if h.owner == owner => {
                h.expires = h.expires.max(self.now + LEASE);
                self.lock = Some(h);
                true
            }
            _ => false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub clients: usize,
    pub acquires: u8,
    pub calls: u8,
    pub faults: u8,
    /// Jumps of the server's clock, one tick ahead or back, in all.
    pub jumps: u8,
    /// Force-unlocks (`force_unlock.lua`, `lockwarden unlock --force`).
    pub forces: u8,
    /// How many attempts given up on a client may have in the background
    /// at once (at most [`PENDING`]): each is re-sent as a try and what it
    /// got given back (its release naming the token), while the wait goes
    /// on under a fresh request (`FairWait::failed`); with none, the wait
    /// ends (its late request may still run).
    pub resends: u8,
    pub depth: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Its wait's latest attempt was refused: the wait's request, that
    /// attempt's number and the tick it was sent at; `first`: the wait's
    /// first request (its asks named those from `first` to `req`).
    Waiting {
        req: Req,
        attempt: u8,
        sent: i32,
        first: Req,
    },
    /// Held: `count` guards (its own acquisitions), the server's levels
    /// as its last reply said them.
    Held {
        token: u64,
        count: u32,
        levels: u32,
        valid_until: i32,
    },
    Lost {
        token: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// An attempt of the wait whose request is `req`.
    Attempt {
        req: Req,
        attempt: u8,
    },
    Reenter,
    Release {
        token: u64,
    },
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
    pub levels_unknown: bool,
    pub lost_release_not_refused: bool,
    pub levels_disagree: bool,
    /// The leave of a wait it stopped (the wait's first and latest
    /// requests), on its way: it runs later, or never.
    pub leaving: Option<(Req, Req)>,
    /// Attempts given up on, in the background (`Bounds::resends` at once).
    pub pending: [Option<Pending>; PENDING],
}

/// What the background does with an attempt whose outcome is unknown
/// (`quorum::Pending`): re-sends it as a try until it is answered, and
/// gives back the level it got (`quorum::undo_one`, naming the token);
/// either step may come late, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pending {
    Resend { req: Req },
    GiveBack { token: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
    pub have_held: u8,
    /// Ghost: a waiter took a grant's message for the lock.
    pub granted_by_message: bool,
    pub data_lost: bool,
    pub jumps_left: u8,
    /// Ghosts, as the reentrant model's: the clients whose hold (or grant)
    /// a jump ahead cut short on the server, until it outlasts the
    /// validity they were told or they hold nothing; the ticks the clock
    /// was set back; whether a jump ahead cut replay records short.
    pub cut: u8,
    pub set_back: i32,
    pub records_cut: bool,
    pub forces_left: u8,
    /// Ghost: the clients whose hold a force-unlock deleted while they
    /// count on it (until they learn, or hold a new one).
    pub forced: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start(usize, Op),
    Net(usize, Net),
    /// The message on client `c`'s wake channel reaches its sleeping wait,
    /// or is lost.
    Deliver(usize),
    LoseMessage(usize),
    /// A waiter stops waiting and sends its leave (fair_leave.lua), which
    /// reaches the server later ([`Action::LeaveRuns`]).
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
    EvictCounter,
    /// The server's clock jumps one tick ahead, or is set one tick back.
    JumpAhead,
    JumpBack,
    /// force_unlock.lua on the lock.
    ForceUnlock,
}

#[derive(Clone, Debug)]
pub struct FairModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

impl FairModel {
    pub fn new(bounds: Bounds) -> FairModel {
        FairModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> FairModel {
        FairModel {
            bounds,
            defect: Some(defect),
        }
    }

    /// Clients that believe they hold with validity left (a client
    /// releasing has left its critical section).
    pub fn valid_holders(s: &State) -> usize {
        s.clients
            .iter()
            .filter(|c| !c.line.calls(|op| matches!(op, Op::Release { .. })))
            .filter(|c| matches!(c.phase, Phase::Held { valid_until, .. } if s.server.now < valid_until))
            .count()
    }

    /// Whether a client holds with validity left while a jump of the
    /// server's clock ahead cut its hold short there (the hazard of every
    /// lease lock).
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
                // Nothing held, and no reply on its way that could say so.
                Phase::Idle => cl.line.call.is_none(),
                // Its hold outlasts the validity it was told, and no reply
                // on its way can tell it of more.
                Phase::Held { valid_until, .. } => {
                    cl.line.call.is_none()
                        && s.server
                            .lock
                            .is_some_and(|h| h.owner == c as Owner && h.expires >= valid_until)
                }
                _ => false,
            };
            if whole {
                s.cut &= !(1 << c);
                s.forced &= !(1 << c);
            }
        }
    }

    fn execute(&self, s: &mut State, c: usize, call: Call, first: bool) -> Reply {
        let owner = c as Owner;
        match call.op {
            Op::Attempt { req, attempt } => Reply::Acquire(s.server.acquire(
                Acquire {
                    owner,
                    req,
                    attempt,
                    wait: true,
                    ask: true,
                },
                self.defect,
            )),
            Op::Reenter => Reply::Acquire(s.server.acquire(
                Acquire {
                    owner,
                    req: call.req,
                    attempt: 0,
                    wait: false,
                    ask: false,
                },
                self.defect,
            )),
            Op::Release { token } => Reply::Release(s.server.release(owner, call.req, token, first, self.defect)),
        }
    }

    fn hear(&self, s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        let Some((call, reply)) = cl.line.heard() else { return };
        match (call.op, reply) {
            (Op::Attempt { .. }, Reply::Acquire(AcquireReply::Held { token, count })) => {
                if matches!(cl.phase, Phase::Idle | Phase::Waiting { .. }) {
                    // One guard, whatever the levels: a count above 1 is a
                    // grant of its own earlier wait, unheard, that this
                    // attempt entered (that wait's leave gives its level
                    // back).
                    cl.phase = Phase::Held {
                        token,
                        count: 1,
                        levels: count,
                        valid_until: call.since + LEASE,
                    };
                    s.have_held |= 1 << c;
                }
            }
            (Op::Attempt { req, attempt }, Reply::Acquire(_)) => {
                let first = match cl.phase {
                    Phase::Waiting { first, .. } => Some(first),
                    Phase::Idle => Some(req),
                    _ => None,
                };
                if let Some(first) = first {
                    cl.phase = Phase::Waiting {
                        req,
                        attempt,
                        sent: call.since,
                        first,
                    };
                }
            }
            (Op::Reenter, Reply::Acquire(AcquireReply::Held { token, count: levels })) => match cl.phase {
                Phase::Held {
                    token: t,
                    count,
                    levels: was,
                    valid_until,
                } if t == token => {
                    if levels != was + 1 && !cl.levels_unknown {
                        cl.levels_disagree = true;
                    }
                    cl.phase = Phase::Held {
                        token,
                        count: count + 1,
                        levels,
                        valid_until,
                    };
                }
                _ => {
                    cl.phase = Phase::Held {
                        token,
                        count: 1,
                        levels,
                        valid_until: call.since + LEASE,
                    };
                }
            },
            (Op::Reenter, Reply::Acquire(_)) => {
                if let Phase::Held { token, .. } = cl.phase {
                    cl.phase = Phase::Lost { token };
                }
            }
            (Op::Release { .. }, Reply::Release(r)) => match cl.phase {
                Phase::Lost { .. } => {
                    if matches!(r, ReleaseReply::Left(_)) && !cl.levels_unknown {
                        cl.lost_release_not_refused = true;
                    }
                    cl.phase = Phase::Idle;
                    cl.levels_unknown = false;
                }
                // The client counts its guards (`Holds::leave`): its last
                // one's release ends its hold, whatever levels the server
                // still counts.
                Phase::Held {
                    token,
                    count,
                    levels,
                    valid_until,
                } => match r {
                    ReleaseReply::Left(n) => {
                        if n + 1 != levels && !cl.levels_unknown {
                            cl.levels_disagree = true;
                        }
                        cl.phase = if count > 1 && n > 0 {
                            Phase::Held {
                                token,
                                count: count - 1,
                                levels: n,
                                valid_until,
                            }
                        } else if count > 1 {
                            Phase::Lost { token }
                        } else {
                            cl.levels_unknown = false;
                            Phase::Idle
                        };
                    }
                    ReleaseReply::NotHeld => {
                        cl.phase = Phase::Idle;
                        cl.levels_unknown = false;
                    }
                },
                _ => {}
            },
            _ => {}
        }
    }

    /// The message on client `c`'s channel reaches its wait: a grant to
    /// its request naming its latest attempt, with more than half of its
    /// lease left when counted from that attempt's send, is the lock
    /// (`wait::claim_grant`); anything else only wakes it.
    fn deliver(&self, s: &mut State, c: usize) {
        let now = s.server.now;
        let Some(msg) = s.server.mail[c].take() else { return };
        let Phase::Waiting { req, attempt, sent, .. } = s.clients[c].phase else {
            return;
        };
        if let Msg::Grant {
            token,
            ms,
            req: r,
            attempt: n,
        } = msg
        {
            let named = n == attempt || self.defect == Some(Defect::ClaimIgnoresAttempt);
            if r == req && named && 2 * (now - sent) < ms {
                s.clients[c].phase = Phase::Held {
                    token,
                    count: 1,
                    levels: 1,
                    valid_until: sent + ms,
                };
                s.have_held |= 1 << c;
                s.granted_by_message = true;
            }
        }
    }

    fn renew(&self, s: &mut State, c: usize, heard: bool) {
        let now = s.server.now;
        let Phase::Held {
            token,
            count,
            levels,
            valid_until,
        } = s.clients[c].phase
        else {
            return;
        };
        let ok = s.server.renew(c as Owner);
        if heard {
            // Confirmed after the validity ended: the validity stays ended
            // (`watchdog::tick` marks such a hold lost; its release may
            // still find it).
            let revives = self.defect == Some(Defect::RenewalRevives);
            let lapsed = now >= valid_until && !revives;
            s.clients[c].phase = if ok && lapsed {
                s.clients[c].phase
            } else if ok {
                Phase::Held {
                    token,
                    count,
                    levels,
                    valid_until: valid_until.max(now + LEASE),
                }
            } else {
                Phase::Lost { token }
            };
        }
    }

    /// Whether every waiter that is owed the lock gets it by its own next
    /// attempt (three steps of its own, nobody else acting): a waiter at
    /// the head of the live queue of a free lock, and one an unlock handed
    /// the lock to (its message lost, or yet to come). With the waiters'
    /// refresh (an attempt every third of the waiter timeout), this bounds
    /// how long a free lock with a live waiter stays free, and how long a
    /// lost message delays.
    fn owed_lock_by_next_attempt(&self, s: &State) -> bool {
        let now = s.server.now;
        let head = s.server.queue.iter().find(|q| q.deadline > now).map(|q| q.owner);
        s.clients.iter().enumerate().all(|(c, cl)| {
            let Phase::Waiting { req, attempt, .. } = cl.phase else {
                return true;
            };
            if cl.line.call.is_some() || cl.calls_left == 0 {
                return true;
            }
            let free_head = s.server.lock.is_none() && head == Some(c as Owner);
            let granted = s.server.lock.is_some_and(|h| {
                h.owner == c as Owner && recorded(&s.server.records, req) == Some(Recorded::Granted { token: h.token })
            });
            if !free_head && !granted {
                return true;
            }
            let next = Op::Attempt {
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

    /// The background's step for client `c`'s given-up attempt: its
    /// re-send (a try), then the give-back of what it got, under a request
    /// of its own (`GIVE_BACK`). Either changes the levels the server
    /// counts for the client, behind its back.
    fn background(&self, s: &mut State, c: usize, i: usize) {
        let owner = c as Owner;
        let was = s.server.lock;
        match s.clients[c].pending[i].take() {
            Some(Pending::Resend { req }) => {
                let a = Acquire {
                    owner,
                    req,
                    attempt: 0,
                    wait: false,
                    ask: false,
                };
                if let AcquireReply::Held { token, .. } = s.server.acquire(a, self.defect) {
                    s.clients[c].pending[i] = Some(Pending::GiveBack { token });
                }
            }
            Some(Pending::GiveBack { token }) => {
                let req = (c as Req) * 64 + GIVE_BACK;
                s.server.release(owner, req, token, true, self.defect);
            }
            None => {}
        }
        if s.server.lock.map(|h| h.count) != was.map(|h| h.count) {
            s.clients[c].levels_unknown = true;
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
            levels_unknown: false,
            lost_release_not_refused: false,
            levels_disagree: false,
            leaving: None,
            pending: [None; PENDING],
        }
    }
}

/// The most attempts of one client in the background at once.
pub const PENDING: usize = 2;

/// The request id (past every call's) of a client's give-back.
const GIVE_BACK: Req = 63;

/// The request id of client `c`'s call when it has `left` calls left.
fn req_of(c: usize, calls: u8, left: u8) -> Req {
    (c as Req) * 64 + Req::from(calls - left)
}

impl Model for FairModel {
    type State = State;
    type Action = Action;

    /// Three starts: nothing held; client 0 holding with client 1 queued
    /// behind it; and the lock just handed to client 1 by client 0's
    /// unlock, its message on the way. The two later ones are reached
    /// from the first by the model's own steps (six, then three more), and
    /// given as starts so that the bound reaches further past them.
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
            forces_left: self.bounds.forces,
            forced: 0,
            cut: 0,
            set_back: 0,
            records_cut: false,
        };
        let calls = self.bounds.calls;
        let mut states = vec![empty.clone()];
        if n < 2 || self.bounds.acquires == 0 || calls < 2 {
            return states;
        }
        let run = |s: &State, steps: &[Action]| {
            steps
                .iter()
                .try_fold(s.clone(), |s, &a| self.next_state(&s, a))
                .expect("a start the model reaches")
        };
        let attempt = |c: usize| Op::Attempt {
            req: req_of(c, calls, calls),
            attempt: 1,
        };
        let busy = run(
            &empty,
            &[
                Action::Start(0, attempt(0)),
                Action::Net(0, Net::Run),
                Action::Net(0, Net::Hear),
                Action::Start(1, attempt(1)),
                Action::Net(1, Net::Run),
                Action::Net(1, Net::Hear),
            ],
        );
        let Phase::Held { token, .. } = busy.clients[0].phase else {
            return states;
        };
        let handed = run(
            &busy,
            &[
                Action::Start(0, Op::Release { token }),
                Action::Net(0, Net::Run),
                Action::Net(0, Net::Hear),
            ],
        );
        states.push(busy);
        states.push(handed);
        if self.bounds.resends > 0 {
            // Client 0's first attempt took the lock, its reply lost and
            // given up on: the wait goes on, the attempt re-sent behind it.
            let given_up = run(
                &empty,
                &[
                    Action::Start(0, attempt(0)),
                    Action::Net(0, Net::Run),
                    Action::Net(0, Net::Lose),
                    Action::Tick,
                    Action::Net(0, Net::GiveUp),
                ],
            );
            // And where the wait, going on, took the lock anew once the
            // first attempt's hold lapsed, that attempt's re-send still to
            // come.
            if let Phase::Waiting { req, attempt, .. } = given_up.clients[0].phase {
                let next = Op::Attempt {
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
        let calls = self.bounds.calls;
        for (c, cl) in s.clients.iter().enumerate() {
            let idle_line = cl.line.call.is_none();
            if cl.calls_left > 0 && idle_line {
                match cl.phase {
                    Phase::Idle if cl.acquires_left > 0 => actions.push(Action::Start(
                        c,
                        Op::Attempt {
                            req: req_of(c, calls, cl.calls_left),
                            attempt: 1,
                        },
                    )),
                    Phase::Waiting { req, attempt, .. } => actions.push(Action::Start(
                        c,
                        Op::Attempt {
                            req,
                            attempt: attempt + 1,
                        },
                    )),
                    Phase::Held { token, count, .. } => {
                        if count < 2 {
                            actions.push(Action::Start(c, Op::Reenter));
                        }
                        actions.push(Action::Start(c, Op::Release { token }));
                    }
                    Phase::Lost { token } => actions.push(Action::Start(c, Op::Release { token })),
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
            if s.server.counter.value.is_some() {
                actions.push(Action::EvictCounter);
            }
        }
        let dated = s.server.lock.is_some() || !s.server.queue.is_empty() || !s.server.records.is_empty();
        if s.jumps_left > 0 && dated {
            actions.push(Action::JumpAhead);
            actions.push(Action::JumpBack);
        }
        if s.forces_left > 0 && s.server.lock.is_some() {
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
                let (call, first) = s.clients[c].line.sent()?;
                let reply = self.execute(&mut s, c, call, first);
                s.clients[c].line.reply(reply);
            }
            Action::Net(c, Net::RunLate) => {
                if let Some((call, first)) = s.clients[c].line.take_late() {
                    let was = s.server.lock;
                    self.execute(&mut s, c, call, first);
                    if s.server.lock.map(|h| h.count) != was.map(|h| h.count) {
                        s.clients[c].levels_unknown = true;
                    }
                }
            }
            Action::Net(c, Net::Hear) => self.hear(&mut s, c),
            Action::Net(c, Net::GiveUp) => {
                let cl = &mut s.clients[c];
                let call = cl.line.give_up()?;
                match call.op {
                    // With `resends`, the attempt goes to the background and
                    // the wait on under a fresh request while it has calls
                    // left; else the wait ends with the error (its late
                    // attempt may still queue it, or take the lock, for
                    // nobody).
                    Op::Attempt { req, attempt } => {
                        let waiting = matches!(cl.phase, Phase::Idle | Phase::Waiting { .. });
                        let slot = cl.pending[..usize::from(self.bounds.resends)]
                            .iter()
                            .position(Option::is_none);
                        if let Some(i) = slot {
                            cl.pending[i] = Some(Pending::Resend { req });
                            if waiting && cl.calls_left > 0 {
                                let fresh = req_of(c, self.bounds.calls, cl.calls_left);
                                cl.calls_left -= 1;
                                let first = match cl.phase {
                                    Phase::Waiting { first, .. } => first,
                                    _ => req,
                                };
                                cl.phase = Phase::Waiting {
                                    req: fresh,
                                    attempt,
                                    sent: call.since,
                                    first,
                                };
                                return Some(self.settle(s));
                            }
                        }
                        if matches!(cl.phase, Phase::Waiting { .. }) {
                            cl.phase = Phase::Idle;
                        }
                    }
                    Op::Reenter => cl.levels_unknown = true,
                    Op::Release { .. } => cl.phase = Phase::Idle,
                }
            }
            Action::Net(c, step) => s.clients[c].line.carry(step),
            Action::Deliver(c) => self.deliver(&mut s, c),
            Action::LoseMessage(c) => s.server.mail[c] = None,
            Action::Leave(c) => {
                if let Phase::Waiting { req, first, .. } = s.clients[c].phase {
                    s.clients[c].leaving = Some((first, req));
                }
                s.clients[c].phase = Phase::Idle;
            }
            Action::LeaveRuns(c) => {
                let (first, req) = s.clients[c].leaving.take()?;
                let was = s.server.lock;
                s.server.leave(c as Owner, Some((req, first..=req)), self.defect);
                // The stopped wait's grant, which a later acquisition of
                // the same owner entered (its reply counted that level
                // too), is given back: the client counts its own guards,
                // not the server's levels (`Holds::leave`).
                if s.server.lock != was {
                    s.clients[c].levels_unknown = true;
                }
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
                if let Some(h) = s.server.lock {
                    s.cut |= 1 << h.owner;
                }
                s.records_cut |= !s.server.records.is_empty();
                s.server.jump(1);
            }
            Action::JumpBack => {
                s.jumps_left -= 1;
                s.set_back += 1;
                s.server.jump(-1);
            }
            Action::ForceUnlock => {
                s.forces_left -= 1;
                if let Some(h) = s.server.lock {
                    s.forced |= 1 << h.owner;
                }
                s.server.force_unlock();
            }
            Action::Flush => {
                s.faults_left -= 1;
                s.data_lost = true;
                s.server.flush();
            }
            Action::EvictCounter => {
                s.faults_left -= 1;
                s.server.counter.value = None;
            }
        }
        Some(self.settle(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("never two holders with validity left", |_, s| {
                s.data_lost || FairModel::valid_holders(s) <= 1 || FairModel::holds_cut_short(s)
            }),
            Property::<Self>::always("tokens only grow", |_, s| !s.server.counter.went_back),
            Property::<Self>::always("a release never frees another's hold", |_, s| !s.server.freed_another),
            Property::<Self>::always("no waiter's call moves a holder's lease", |_, s| {
                !s.server.waiter_moved_lease
            }),
            Property::<Self>::always("a free lock goes to the head of the queue", |_, s| !s.server.barged),
            Property::<Self>::always("a leave takes back only its own wait's place", |_, s| {
                !s.server.took_another_place
            }),
            Property::<Self>::always("a grant ends by its waiter's queue deadline", |_, s| {
                !s.server.grant_past_deadline
            }),
            Property::<Self>::always(
                "the lock frees by its lease's end, a waiter's place by its deadline",
                |_, s| {
                    let now = s.server.now;
                    let back = s.set_back;
                    s.server.lock.is_none_or(|h| h.expires <= now + LEASE + back)
                        && s.server.queue.iter().all(|q| q.deadline <= now + WAITER + back)
                },
            ),
            Property::<Self>::always("a waiter owed the lock gets it by its next attempt", |m, s| {
                m.owed_lock_by_next_attempt(s)
            }),
            Property::<Self>::always("a replayed call is counted once", |_, s| {
                s.records_cut || s.clients.iter().all(|c| !c.levels_disagree)
            }),
            Property::<Self>::always("a lost hold's release is NotHeld", |_, s| {
                s.clients.iter().all(|c| !c.lost_release_not_refused)
            }),
            Property::<Self>::sometimes("a waiter is handed the lock by a message", |_, s| s.granted_by_message),
            Property::<Self>::sometimes("two attempts of one client in the background at once", |m, s| {
                m.bounds.resends < 2 || s.clients.iter().any(|c| c.pending.iter().all(Option::is_some))
            }),
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.clients) - 1
            }),
            Property::<Self>::sometimes("a clock jumping ahead lets a second holder in", |m, s| {
                m.bounds.jumps == 0 || (!s.data_lost && FairModel::valid_holders(s) > 1)
            }),
            Property::<Self>::sometimes("a clock set back keeps a hold past its lease", |m, s| {
                m.bounds.jumps == 0 || s.server.lock.is_some_and(|h| h.expires > s.server.now + LEASE)
            }),
            // Bounds with force-unlocks have no jumps: only the
            // force-unlock reaches this.
            Property::<Self>::sometimes("a force-unlock lets a second holder in", |m, s| {
                m.bounds.forces == 0 || (!s.data_lost && FairModel::valid_holders(s) > 1)
            }),
        ]
    }
}

/// Times relative to now (see the reentrant model's `shift`).
fn shift(s: &mut State) {
    let n = s.server.now;
    s.server.rebase(n);
    for cl in &mut s.clients {
        cl.line.shift(n);
        match &mut cl.phase {
            Phase::Held { valid_until, .. } => *valid_until = (*valid_until - n).max(0),
            Phase::Waiting { sent, .. } => *sent = (*sent - n).max(-LEASE),
            _ => {}
        }
    }
}
