//! The reentrant lock's waits: one master's keys for one lock name (the
//! lock hash with its `:wait` mark, the waiters list of clients, their
//! grant asks, the fencing counter, the replay records) with
//! `lua/acquire_free.lua` + `lua/acquire.lua` for a waiter's attempts,
//! `lua/release_last.lua` + `lua/release.lua` (the unlock that wakes one
//! client, or hands it the lock: `wake_next` of `lua/shared_wake.lua`),
//! `lua/wake_next.lua` (a stopped wait's leave, and a wake-up passed on)
//! and the renewal as atomic steps; and clients with one wait each, as
//! `wait::WakeOne` runs it on one master: a first attempt before
//! listening, then attempts that list the client and leave an ask under
//! the wait's one request id (re-sent after the first), a wake message or
//! a grant on the client's own channel (held up for any number of steps,
//! or lost), a grant claimed only when it names the latest attempt, a
//! message that finds no wait passed on, a stopped wait's leave (late, or
//! never), the subscription dropped after the wait. Requests and replies
//! are lost, re-sent and given up on as in [`super::LockModel`]; the
//! server loses its data or its counter.
//!
//! Not here: several waits of one client (`"2"` and `"4"` of acquire.lua,
//! each client waking one of its waits), the wake patience (a listed
//! waiter's own look: any attempt at any step is in the model anyway).

use stateright::{Model, Property};

use super::net::{self, Line, Net};
use super::server::{recorded, set_record, Counter, Owner, Record, Recorded, Req};
use super::{KEEP, LEASE};

/// A direct grant's first lease (the waiter's grant lease: its own lease
/// cut to the waiter timeout).
pub const GRANT: i32 = LEASE;

/// A hold: its owner's count, `:token`, `:take` (the record of the request
/// whose take made it, or the wait's that was handed it), `:wait` (a
/// listening waiter was refused while it stood) and the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub owner: Owner,
    pub count: u32,
    pub token: u64,
    pub take: Req,
    pub wait: bool,
    pub expires: i32,
}

/// A client's grant ask: the grant's first lease, the wait's request and
/// the number of the attempt that left it (the owner field is the
/// client's own: one task per client here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Asked {
    pub client: Owner,
    pub ms: i32,
    pub req: Req,
    pub attempt: u8,
}

/// A message on a client's wake channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    /// `0`: try again.
    Wake,
    /// `g <token> <ms> <record key> <attempt>`.
    Grant { token: u64, ms: i32, req: Req, attempt: u8 },
}

/// How an attempt waits (acquire.lua's ARGV[5]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `"0"`: only tries (a wait's first attempt, before it listens).
    Try,
    /// `"1"`: listens, and asks for a grant.
    Listening,
    /// `"3"`: as `"1"`, for a waiter a message woke: refused, its client
    /// goes back to the front of the list.
    Woken,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    /// The bare token: a first send that found the lock free.
    Fresh(u64),
    /// `{1, token, count}`.
    Held { token: u64, count: u32 },
    /// `{0, pttl}`, or `{0, pttl, place}` for a listening caller listed.
    Refused { pttl: i32, place: Option<usize> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    Left(u32),
    NotHeld,
}

/// A defect the model can be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// The waiter takes any grant message to its wait's request for the
    /// lock, whichever attempt's ask it answered.
    ClaimIgnoresAttempt,
    /// A stopped wait's leave gives back its owner's hold whatever request
    /// made it (not only a grant to the wait).
    LeaveIgnoresTake,
    /// A listening waiter's refusal leaves no `:wait` mark: the unlock
    /// wakes nobody.
    RefusalForgetsMark,
    /// The unlock reads the ask's record key and owner field in each
    /// other's place (a layout change half made): the grant is a hold
    /// nobody owns, made by no request.
    GrantMisreadsAsk,
    /// A refused attempt sets the lock's lease.
    RefusalExtends,
    /// The release does not compare the hold's token.
    ReleaseIgnoresToken,
    /// A lost counter starts again at 1.
    CounterRestartsAtOne,
    /// A re-entry records no reply.
    ReentryUnrecorded,
    /// A force-unlock deletes the lock and tells none of its listed
    /// clients.
    ForceTellsNobody,
}

/// The lock's keys on one master, and what is on its way to each client's
/// wake channel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: i32,
    pub lock: Option<Hold>,
    /// The waiters list (client ids, the front first) and its TTL: it
    /// lives to the tick after `waiters_expires` (the real one a second
    /// past a lease, see [`Server::listen`]).
    pub waiters: Vec<Owner>,
    pub waiters_expires: i32,
    /// The asks hash and its TTL (as the list's).
    pub asks: Vec<Asked>,
    pub asks_expires: i32,
    pub counter: Counter,
    pub records: Vec<Record>,
    /// Per client: its wake channel is subscribed (PUBLISH counts it).
    pub subscribed: Vec<bool>,
    /// Per client: the message its subscriber holds for it (the latest
    /// that said more than "wake up").
    pub mail: Vec<Option<Msg>>,
    /// What the last script published, in order (for the differential
    /// test; the checker empties it after each step).
    pub sent: Vec<(Owner, Msg)>,
    /// Ghosts: a release or a leave changed a hold that was not the
    /// caller's to change; a refused caller moved the holder's lease; the
    /// tokens of the grants made, per request.
    pub freed_another: bool,
    pub waiter_moved_lease: bool,
    pub grants: Vec<(Req, u64)>,
}

/// A waiter's attempt, or a re-entry (`Mode::Try`).
#[derive(Clone, Copy, Debug)]
pub struct Acquire {
    pub owner: Owner,
    pub req: Req,
    pub attempt: u8,
    pub mode: Mode,
    /// Never sent before (ARGV[4] = "1").
    pub first: bool,
}

impl Server {
    pub fn new(clients: usize) -> Server {
        Server {
            now: 0,
            lock: None,
            waiters: Vec::new(),
            waiters_expires: 0,
            asks: Vec::new(),
            asks_expires: 0,
            counter: Counter::default(),
            records: Vec::new(),
            subscribed: vec![false; clients],
            mail: vec![None; clients],
            sent: Vec::new(),
            freed_another: false,
            waiter_moved_lease: false,
            grants: Vec::new(),
        }
    }

    /// The clock moves on; returns whether a hold marked as waited for
    /// expired, or the list did with clients in it (their waits then wake
    /// at their own lease bound, not by a message).
    pub fn advance(&mut self, ticks: i32) -> bool {
        self.now += ticks;
        let now = self.now;
        let mut unwoken = false;
        if let Some(h) = self.lock.filter(|h| h.expires <= now) {
            unwoken |= h.wait;
            self.lock = None;
        }
        if self.waiters_expires < now && !self.waiters.is_empty() {
            unwoken = true;
            self.waiters.clear();
        }
        if self.asks_expires < now {
            self.asks.clear();
        }
        self.records.retain(|r| r.expires > now);
        unwoken
    }

    /// The server's clock jumps `ticks` ahead (set back when negative),
    /// the clients' clocks running on: the lock's, the list's, the asks'
    /// and the records' TTLs come that much sooner, or later. True when a
    /// wake-up may then go unheard (as [`Server::advance`]).
    pub fn jump(&mut self, ticks: i32) -> bool {
        if let Some(h) = self.lock.as_mut() {
            h.expires -= ticks;
        }
        if !self.waiters.is_empty() {
            self.waiters_expires -= ticks;
        }
        if !self.asks.is_empty() {
            self.asks_expires -= ticks;
        }
        for r in &mut self.records {
            r.expires -= ticks;
        }
        self.advance(0)
    }

    pub fn flush(&mut self) {
        self.lock = None;
        self.waiters.clear();
        self.asks.clear();
        self.counter.value = None;
        self.records.clear();
    }

    fn next_token(&mut self, defect: Option<Defect>) -> u64 {
        self.counter.next(defect == Some(Defect::CounterRestartsAtOne))
    }

    /// PUBLISH on client `o`'s wake channel: whether it was counted.
    fn publish(&mut self, o: Owner, msg: Msg) -> bool {
        self.sent.push((o, msg));
        if !self.subscribed[o as usize] {
            return false;
        }
        let slot = &mut self.mail[o as usize];
        if !(msg == Msg::Wake && matches!(slot, Some(Msg::Grant { .. }))) {
            *slot = Some(msg);
        }
        true
    }

    /// acquire_free.lua + acquire.lua.
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
        let listening = a.mode != Mode::Try;
        if self.lock.is_none() && a.first {
            // acquire_free.lua.
            let token = self.take(a, listening && !self.waiters.is_empty(), defect);
            if listening {
                self.asks.retain(|k| k.client != a.owner);
            }
            return AcquireReply::Fresh(token);
        }
        if !a.first {
            if let Some(Recorded::Entered { token, count }) = recorded(&self.records, a.req) {
                return AcquireReply::Held { token, count };
            }
            if let Some(mut h) = self.lock.filter(|h| h.take == a.req) {
                if listening {
                    // A grant to this wait (or its own take, re-sent): its
                    // lease.
                    h.expires = h.expires.max(now + LEASE);
                    self.lock = Some(h);
                }
                return AcquireReply::Held {
                    token: h.token,
                    count: 1,
                };
            }
        }
        let Some(mut h) = self.lock else {
            let waited = listening && !self.waiters.is_empty();
            let token = self.take(a, waited, defect);
            if listening {
                self.asks.retain(|k| k.client != a.owner);
            }
            return AcquireReply::Held { token, count: 1 };
        };
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
        let pttl = h.expires - now;
        if defect == Some(Defect::RefusalExtends) {
            h.expires = h.expires.max(now + LEASE);
        }
        let mut place = None;
        if listening {
            place = Some(self.listen(a.owner, pttl, a.mode == Mode::Woken));
            self.asks.retain(|k| k.client != a.owner);
            self.asks.push(Asked {
                client: a.owner,
                ms: GRANT,
                req: a.req,
                attempt: a.attempt,
            });
            self.asks.sort_by_key(|k| k.client);
            self.asks_expires = now + pttl;
            h.wait |= defect != Some(Defect::RefusalForgetsMark);
        }
        self.lock = Some(h);
        AcquireReply::Refused { pttl, place }
    }

    /// acquire.lua's `listen`: the client in the list (at the front with
    /// `front`), the list kept a lease `ttl` and a second; its place.
    fn listen(&mut self, o: Owner, ttl: i32, front: bool) -> usize {
        let end = self.now + ttl;
        match self.waiters.iter().position(|&w| w == o) {
            Some(at) => {
                self.waiters_expires = self.waiters_expires.max(end);
                at
            }
            None => {
                if front {
                    self.waiters.insert(0, o);
                } else {
                    self.waiters.push(o);
                }
                if self.waiters.len() == 1 {
                    self.waiters_expires = end;
                } else {
                    self.waiters_expires = self.waiters_expires.max(end);
                }
                if front {
                    0
                } else {
                    self.waiters.len() - 1
                }
            }
        }
    }

    fn take(&mut self, a: Acquire, waited: bool, defect: Option<Defect>) -> u64 {
        let token = self.next_token(defect);
        self.lock = Some(Hold {
            owner: a.owner,
            count: 1,
            token,
            take: a.req,
            wait: waited,
            expires: self.now + LEASE,
        });
        token
    }

    /// release_last.lua + release.lua, for a caller that knows its token.
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
        if h.wait {
            self.wake_next(defect);
        }
        ReleaseReply::Left(0)
    }

    /// shared_wake.lua's `wake_next` with direct grants: the first listed
    /// client still subscribed is told (handed the lock when it left an
    /// ask); a grant nobody heard is undone and the next client tried.
    fn wake_next(&mut self, defect: Option<Defect>) -> bool {
        while !self.waiters.is_empty() {
            let id = self.waiters.remove(0);
            let ask = self
                .asks
                .iter()
                .position(|k| k.client == id)
                .map(|i| self.asks.remove(i));
            match ask {
                Some(k) => {
                    let token = self.next_token(defect);
                    let misread = defect == Some(Defect::GrantMisreadsAsk);
                    self.lock = Some(Hold {
                        owner: if misread { Owner::MAX } else { k.client },
                        count: 1,
                        token,
                        take: if misread { Req::MAX } else { k.req },
                        wait: !self.waiters.is_empty(),
                        expires: self.now + k.ms,
                    });
                    self.grants.push((k.req, token));
                    let msg = Msg::Grant {
                        token,
                        ms: k.ms,
                        req: k.req,
                        attempt: k.attempt,
                    };
                    if self.publish(id, msg) {
                        return true;
                    }
                    self.lock = None;
                }
                None => {
                    if self.publish(id, Msg::Wake) {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// force_unlock.lua on a reentrant lock: the hash deleted whoever holds
    /// it (the counter and the list kept), and the first listed client
    /// still subscribed told with a plain wake-up (`wake_next` without
    /// grants: its ask stays until its TTL or its next attempt).
    pub fn force_unlock(&mut self, defect: Option<Defect>) {
        self.lock = None;
        if defect == Some(Defect::ForceTellsNobody) {
            return;
        }
        while !self.waiters.is_empty() {
            let id = self.waiters.remove(0);
            if self.publish(id, Msg::Wake) {
                return;
            }
        }
    }

    /// wake_next.lua: with `stopped` (a wait of `owner` that asked for
    /// grants under that request, and stops without the lock), its ask
    /// taken back and a grant made to it given back (one level); then one
    /// client woken when the lock is free, or the hold marked when clients
    /// sleep.
    pub fn leave(&mut self, owner: Owner, stopped: Option<Req>, defect: Option<Defect>) {
        if let Some(req) = stopped {
            self.asks.retain(|k| !(k.client == owner && k.req == req));
            let mine = |h: &Hold| h.owner == owner && (h.take == req || defect == Some(Defect::LeaveIgnoresTake));
            if let Some(mut h) = self.lock.filter(mine) {
                if !self.grants.contains(&(req, h.token)) {
                    self.freed_another = true;
                }
                if h.count == 1 {
                    self.lock = None;
                } else {
                    h.count -= 1;
                    self.lock = Some(h);
                }
            }
        }
        match self.lock.as_mut() {
            None => {
                self.wake_next(defect);
            }
            Some(h) => {
                if !self.waiters.is_empty() {
                    h.wait = true;
                }
            }
        }
    }

    /// renew.lua for one reentrant hold.
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
    /// on under a fresh request (`WakeOne::failed`); with none, the
    /// attempt is left to its late request and the lease.
    pub resends: u8,
    pub depth: Option<usize>,
}

/// What the background still has to do for a client's given-up attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pending {
    /// Re-send the attempt's request (as a try).
    Resend { req: Req },
    /// Give back the hold the re-send got.
    GiveBack { token: u64 },
}

/// The most attempts of one client in the background at once.
pub const PENDING: usize = 2;

/// The request id of a client's give-back.
const GIVE_BACK: Req = 63;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// A wait: its request once it asked (an attempt carried it), its
    /// latest attempt's number and send, whether it listens (subscribed
    /// after its first refusal), and whether a message woke it since.
    Waiting {
        req: Option<Req>,
        attempt: u8,
        sent: i32,
        listens: bool,
        woken: bool,
    },
    /// Held: `count` guards, the server's levels as its last reply said.
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
    /// A wait's attempt under `req`.
    Attempt {
        req: Req,
        attempt: u8,
        mode: Mode,
        /// An earlier attempt of the wait sent `req` (ARGV[4] not "1").
        resend: bool,
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
    /// Its wake_next.lua calls on their way (a stopped wait's, with its
    /// request; a wake-up passed on, without): each runs later, or never.
    pub leaving: Vec<Option<Req>>,
    /// The background's work for its given-up attempt (`Bounds::resends`).
    pub pending: [Option<Pending>; PENDING],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
    pub have_held: u8,
    /// Ghosts: a waiter took a grant's message for the lock; a wake-up
    /// may have gone unheard (a message lost, a waiter gone without a
    /// word, a marked hold or the list expired, the data lost): waits may
    /// then sleep to their lease bound.
    pub granted_by_message: bool,
    pub unwoken: bool,
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
    /// count on it (until they learn, or hold a new one): exclusion is not
    /// promised to them (they learn at their next renewal).
    pub forced: u8,
    /// Ghost: a background give-back freed a level its re-send had taken.
    pub gave_back: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start(usize, Op),
    Net(usize, Net),
    /// The message for client `c` reaches it, or is lost.
    Deliver(usize),
    LoseMessage(usize),
    /// A wait stops (its leave on its way), or stops without a word.
    Leave(usize),
    Abandon(usize),
    /// Client `c`'s oldest wake_next.lua call reaches the server, or is
    /// lost.
    LeaveRuns(usize),
    LeaveLost(usize),
    /// Client `c`'s subscription lingered out (no wait).
    Unsubscribe(usize),
    /// The server's clock jumps one tick ahead, or is set one tick back.
    JumpAhead,
    JumpBack,
    /// force_unlock.lua on the lock.
    ForceUnlock,
    /// The background's next step for client `c`'s given-up attempt, or
    /// the background's work lost (its client closed).
    Background(usize, usize),
    PendingLost(usize, usize),
    Renew(usize),
    RenewUnheard(usize),
    Tick,
    Flush,
    EvictCounter,
}

#[derive(Clone, Debug)]
pub struct WakeModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

/// The request id of client `c`'s call when it has `left` calls left.
fn req_of(c: usize, calls: u8, left: u8) -> Req {
    (c as Req) * 64 + Req::from(calls - left)
}

impl WakeModel {
    pub fn new(bounds: Bounds) -> WakeModel {
        WakeModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> WakeModel {
        WakeModel {
            bounds,
            defect: Some(defect),
        }
    }

    pub fn valid_holders(s: &State) -> usize {
        s.clients
            .iter()
            .filter(|c| !c.line.calls(|op| matches!(op, Op::Release { .. })))
            .filter(|c| matches!(c.phase, Phase::Held { valid_until, .. } if s.server.now < valid_until))
            .count()
    }

    /// Whether a client holds with validity left while a jump of the
    /// server's clock ahead cut its hold short there, or a force-unlock
    /// deleted it.
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
            Op::Attempt {
                req,
                attempt,
                mode,
                resend,
            } => Reply::Acquire(s.server.acquire(
                Acquire {
                    owner,
                    req,
                    attempt,
                    mode,
                    first: first && !resend,
                },
                self.defect,
            )),
            Op::Reenter => Reply::Acquire(s.server.acquire(
                Acquire {
                    owner,
                    req: call.req,
                    attempt: 0,
                    mode: Mode::Try,
                    first,
                },
                self.defect,
            )),
            Op::Release { token } => Reply::Release(s.server.release(owner, call.req, token, first, self.defect)),
        }
    }

    fn hear(&self, s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        let Some((call, reply)) = cl.line.heard() else { return };
        match (call.op, reply, cl.phase) {
            (Op::Attempt { .. }, Reply::Acquire(r), Phase::Waiting { sent, listens, .. }) => match r {
                AcquireReply::Fresh(token) | AcquireReply::Held { token, .. } => {
                    let levels = match r {
                        AcquireReply::Held { count, .. } => count,
                        _ => 1,
                    };
                    cl.phase = Phase::Held {
                        token,
                        count: 1,
                        levels,
                        valid_until: sent + LEASE,
                    };
                    s.have_held |= 1 << c;
                }
                AcquireReply::Refused { .. } => {
                    if !listens {
                        // The wait subscribes after its first refusal.
                        s.server.subscribed[c] = true;
                        if let Phase::Waiting { listens, .. } = &mut cl.phase {
                            *listens = true;
                        }
                    }
                }
            },
            (
                Op::Reenter,
                Reply::Acquire(AcquireReply::Fresh(t) | AcquireReply::Held { token: t, .. }),
                Phase::Held { token, .. },
            ) if t != token => {
                // The hold was gone and the re-entry took a new one.
                cl.phase = Phase::Held {
                    token: t,
                    count: 1,
                    levels: 1,
                    valid_until: call.since + LEASE,
                };
            }
            (
                Op::Reenter,
                Reply::Acquire(AcquireReply::Held { count: n, .. }),
                Phase::Held {
                    token,
                    count,
                    levels,
                    valid_until,
                },
            ) => {
                if n != levels + 1 && !cl.levels_unknown {
                    cl.levels_disagree = true;
                }
                cl.phase = Phase::Held {
                    token,
                    count: count + 1,
                    levels: n,
                    valid_until,
                };
            }
            (Op::Release { .. }, Reply::Release(r), Phase::Lost { .. }) => {
                if matches!(r, ReleaseReply::Left(_)) {
                    cl.lost_release_not_refused = true;
                }
                cl.phase = Phase::Idle;
            }
            (
                Op::Release { .. },
                Reply::Release(r),
                Phase::Held {
                    token,
                    count,
                    levels,
                    valid_until,
                },
            ) => match r {
                ReleaseReply::Left(n) if count > 1 => {
                    if n + 1 != levels && !cl.levels_unknown {
                        cl.levels_disagree = true;
                    }
                    cl.phase = Phase::Held {
                        token,
                        count: count - 1,
                        levels: n,
                        valid_until,
                    };
                }
                ReleaseReply::Left(n) => {
                    if n + 1 != levels && !cl.levels_unknown {
                        cl.levels_disagree = true;
                    }
                    cl.phase = Phase::Idle;
                    cl.levels_unknown = false;
                }
                ReleaseReply::NotHeld => {
                    cl.phase = Phase::Idle;
                    cl.levels_unknown = false;
                }
            },
            _ => {}
        }
    }

    /// The message reaches client `c`: a sleeping wait takes a grant to
    /// its request naming its latest attempt, with half its lease left
    /// counted from that attempt's send (`wait::claim_grant`); any other
    /// message wakes it for an attempt. With no wait, it is passed on.
    fn deliver(&self, s: &mut State, c: usize) {
        let now = s.server.now;
        let Some(msg) = s.server.mail[c].take() else { return };
        let Phase::Waiting {
            req: Some(req),
            attempt,
            sent,
            listens,
            ..
        } = s.clients[c].phase
        else {
            if matches!(s.clients[c].phase, Phase::Waiting { .. }) {
                // Listening, no attempt asked yet: woken.
                if let Phase::Waiting { woken, .. } = &mut s.clients[c].phase {
                    *woken = true;
                }
            } else {
                s.clients[c].leaving.push(None);
            }
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
                return;
            }
        }
        s.clients[c].phase = Phase::Waiting {
            req: Some(req),
            attempt,
            sent,
            listens,
            woken: true,
        };
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
            s.clients[c].phase = if ok && now >= valid_until {
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

    /// The next attempt of client `c`'s wait (a new wait's first, when
    /// it may start one).
    fn next_attempt(&self, s: &State, c: usize) -> Option<Op> {
        let cl = &s.clients[c];
        let own = req_of(c, self.bounds.calls, cl.calls_left);
        match cl.phase {
            // A wait whose client still listens (an earlier wait's
            // subscription) listens from its first attempt.
            Phase::Idle if cl.acquires_left > 0 => Some(Op::Attempt {
                req: own,
                attempt: 1,
                mode: if s.server.subscribed[c] {
                    Mode::Listening
                } else {
                    Mode::Try
                },
                resend: false,
            }),
            Phase::Waiting {
                req, attempt, woken, ..
            } => Some(Op::Attempt {
                req: req.unwrap_or(own),
                attempt: attempt + 1,
                mode: if woken { Mode::Woken } else { Mode::Listening },
                resend: req.is_some(),
            }),
            _ => None,
        }
    }

    /// A waiter handed the lock (a grant to its wait's request stands)
    /// gets it by its own next attempt, nobody else acting.
    fn owed_lock_by_next_attempt(&self, s: &State) -> bool {
        s.clients.iter().enumerate().all(|(c, cl)| {
            let Phase::Waiting { req: Some(req), .. } = cl.phase else {
                return true;
            };
            if cl.line.call.is_some() || cl.calls_left == 0 {
                return true;
            }
            if !s.server.lock.is_some_and(|h| s.server.grants.contains(&(req, h.token))) {
                return true;
            }
            let Some(next) = self.next_attempt(s, c) else {
                return true;
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

    /// No wake-up is lost: while the lock is free and a listed client's
    /// wait sleeps, someone was told (a message on its way, a wake_next
    /// call on its way, a woken wait or an attempt on its way), unless a
    /// wake-up may have gone unheard (see [`State::unwoken`]).
    fn someone_told(s: &State) -> bool {
        if s.unwoken || s.data_lost || s.server.lock.is_some() {
            return true;
        }
        let sleeping = s.clients.iter().enumerate().any(|(c, cl)| {
            matches!(cl.phase, Phase::Waiting { woken: false, .. })
                && cl.line.call.is_none()
                && s.server.waiters.contains(&(c as Owner))
        });
        !sleeping
            || s.server.mail.iter().any(Option::is_some)
            || s.clients.iter().any(|cl| {
                !cl.leaving.is_empty()
                    || cl.line.call.is_some()
                    || matches!(cl.phase, Phase::Waiting { woken: true, .. })
            })
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
            leaving: Vec::new(),
            pending: [None; PENDING],
        }
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
                    mode: Mode::Try,
                    first: false,
                };
                match s.server.acquire(a, self.defect) {
                    AcquireReply::Held { token, .. } | AcquireReply::Fresh(token) => {
                        s.clients[c].pending[i] = Some(Pending::GiveBack { token });
                    }
                    AcquireReply::Refused { .. } => {}
                }
            }
            Some(Pending::GiveBack { token }) => {
                let req = (c as Req) * 64 + GIVE_BACK;
                if let ReleaseReply::Left(_) = s.server.release(owner, req, token, true, self.defect) {
                    s.gave_back = true;
                }
            }
            None => {}
        }
        if s.server.lock.map(|h| h.count) != was.map(|h| h.count) {
            s.clients[c].levels_unknown = true;
        }
    }
}

impl Model for WakeModel {
    type State = State;
    type Action = Action;

    /// Three starts: nothing held; client 0 holding with client 1's wait
    /// listed and asking behind it; and the lock just handed to client 1
    /// by client 0's unlock, its message on the way. The later two are
    /// reached from the first by the model's own steps (nine, then three
    /// more), and given as starts so that the bound reaches further past
    /// them.
    fn init_states(&self) -> Vec<State> {
        let n = self.bounds.clients;
        let empty = State {
            server: Server::new(n),
            clients: (0..n).map(|_| self.client()).collect(),
            faults_left: self.bounds.faults,
            have_held: 0,
            granted_by_message: false,
            unwoken: false,
            data_lost: false,
            jumps_left: self.bounds.jumps,
            forces_left: self.bounds.forces,
            forced: 0,
            gave_back: false,
            cut: 0,
            set_back: 0,
            records_cut: false,
        };
        let mut states = vec![empty.clone()];
        if n < 2 || self.bounds.acquires == 0 || self.bounds.calls < 2 {
            return states;
        }
        let step = |s: State, c: usize| -> Option<State> {
            let op = self.next_attempt(&s, c)?;
            [
                Action::Start(c, op),
                Action::Net(c, Net::Run),
                Action::Net(c, Net::Hear),
            ]
            .iter()
            .try_fold(s, |s, &a| self.next_state(&s, a))
        };
        let busy = step(empty, 0)
            .and_then(|s| step(s, 1))
            .and_then(|s| step(s, 1))
            .expect("a start the model reaches");
        let Phase::Held { token, .. } = busy.clients[0].phase else {
            return states;
        };
        let handed = [
            Action::Start(0, Op::Release { token }),
            Action::Net(0, Net::Run),
            Action::Net(0, Net::Hear),
        ]
        .iter()
        .try_fold(busy.clone(), |s, &a| self.next_state(&s, a))
        .expect("a start the model reaches");
        states.push(busy);
        states.push(handed);
        states
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let now = s.server.now;
        for (c, cl) in s.clients.iter().enumerate() {
            let idle_line = cl.line.call.is_none();
            let waiting = matches!(cl.phase, Phase::Waiting { .. });
            if cl.calls_left > 0 && idle_line {
                match cl.phase {
                    Phase::Held { token, count, .. } => {
                        if count < 2 {
                            actions.push(Action::Start(c, Op::Reenter));
                        }
                        actions.push(Action::Start(c, Op::Release { token }));
                    }
                    Phase::Lost { token } => actions.push(Action::Start(c, Op::Release { token })),
                    _ => actions.extend(self.next_attempt(s, c).map(|op| Action::Start(c, op))),
                }
            }
            if idle_line && waiting {
                actions.push(Action::Leave(c));
                actions.push(Action::Abandon(c));
            }
            if !cl.leaving.is_empty() {
                actions.push(Action::LeaveRuns(c));
                actions.push(Action::LeaveLost(c));
            }
            if s.server.mail[c].is_some() {
                if idle_line || !waiting {
                    actions.push(Action::Deliver(c));
                }
                actions.push(Action::LoseMessage(c));
            }
            if s.server.subscribed[c] && !waiting {
                actions.push(Action::Unsubscribe(c));
            }
            let releasing = cl.line.calls(|op| matches!(op, Op::Release { .. }));
            if matches!(cl.phase, Phase::Held { .. }) && !releasing {
                actions.push(Action::Renew(c));
                actions.push(Action::RenewUnheard(c));
            }
            for (i, p) in cl.pending.iter().enumerate() {
                if p.is_some() {
                    actions.push(Action::Background(c, i));
                    actions.push(Action::PendingLost(c, i));
                }
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
        let sv = &s.server;
        let dated = sv.lock.is_some() || !sv.waiters.is_empty() || !sv.asks.is_empty() || !sv.records.is_empty();
        if s.jumps_left > 0 && dated {
            actions.push(Action::JumpAhead);
            actions.push(Action::JumpBack);
        }
        if s.forces_left > 0 && sv.lock.is_some() {
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
                let req = req_of(c, calls, cl.calls_left);
                cl.calls_left -= 1;
                if let Op::Attempt {
                    req: r, attempt, mode, ..
                } = op
                {
                    if attempt == 1 {
                        cl.acquires_left -= 1;
                    }
                    let (listens, asked) = match cl.phase {
                        Phase::Waiting { listens, .. } => (listens, mode != Mode::Try),
                        _ => (mode != Mode::Try, mode != Mode::Try),
                    };
                    cl.phase = Phase::Waiting {
                        req: asked.then_some(r),
                        attempt,
                        sent: now,
                        listens,
                        woken: false,
                    };
                }
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
                    // Outcome unknown: the wait goes on, listening, under a
                    // fresh request; with `resends` the background re-sends
                    // the old one and gives back what it got, else that is
                    // left to the late request and the lease.
                    Op::Attempt { req, .. } => {
                        let slot = cl.pending[..usize::from(self.bounds.resends)]
                            .iter()
                            .position(Option::is_none);
                        if let Some(i) = slot {
                            cl.pending[i] = Some(Pending::Resend { req });
                        }
                        if let Phase::Waiting { attempt, sent, .. } = cl.phase {
                            cl.phase = Phase::Waiting {
                                req: None,
                                attempt,
                                sent,
                                listens: true,
                                woken: false,
                            };
                            s.server.subscribed[c] = true;
                        }
                    }
                    Op::Reenter => cl.levels_unknown = true,
                    Op::Release { .. } => cl.phase = Phase::Idle,
                }
            }
            Action::Net(c, step) => s.clients[c].line.carry(step),
            Action::Deliver(c) => self.deliver(&mut s, c),
            Action::LoseMessage(c) => {
                s.server.mail[c] = None;
                s.unwoken = true;
            }
            Action::Leave(c) => {
                if let Phase::Waiting { req, listens, .. } = s.clients[c].phase {
                    if req.is_some() || listens {
                        s.clients[c].leaving.push(req);
                    }
                }
                s.clients[c].phase = Phase::Idle;
            }
            Action::Abandon(c) => s.clients[c].phase = Phase::Idle,
            Action::LeaveRuns(c) => {
                let stopped = s.clients[c].leaving.remove(0);
                let was = s.server.lock;
                s.server.leave(c as Owner, stopped, self.defect);
                // A stopped wait's grant that a later acquisition of the
                // same owner entered is given back: the client counts its
                // guards, not the server's levels.
                if s.server.lock.map(|h| (h.owner, h.count)) != was.map(|h| (h.owner, h.count)) {
                    s.clients[c].levels_unknown = true;
                }
            }
            Action::LeaveLost(c) => {
                s.clients[c].leaving.remove(0);
                s.unwoken = true;
            }
            Action::Unsubscribe(c) => s.server.subscribed[c] = false,
            Action::Renew(c) => self.renew(&mut s, c, true),
            Action::RenewUnheard(c) => self.renew(&mut s, c, false),
            Action::Tick => {
                s.unwoken |= s.server.advance(1);
                shift(&mut s);
            }
            Action::JumpAhead => {
                s.jumps_left -= 1;
                if let Some(h) = s.server.lock {
                    s.cut |= 1 << h.owner;
                }
                s.records_cut |= !s.server.records.is_empty();
                s.unwoken |= s.server.jump(1);
            }
            Action::JumpBack => {
                s.jumps_left -= 1;
                s.set_back += 1;
                s.unwoken |= s.server.jump(-1);
            }
            Action::ForceUnlock => {
                s.forces_left -= 1;
                if let Some(h) = s.server.lock {
                    s.forced |= 1 << h.owner;
                }
                s.server.force_unlock(self.defect);
            }
            Action::Flush => {
                s.faults_left -= 1;
                s.data_lost = true;
                s.server.flush();
            }
            Action::Background(c, i) => self.background(&mut s, c, i),
            Action::PendingLost(c, i) => s.clients[c].pending[i] = None,
            Action::EvictCounter => {
                s.faults_left -= 1;
                s.server.counter.value = None;
            }
        }
        s.server.sent.clear();
        Self::heal(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("never two holders with validity left", |_, s| {
                s.data_lost || WakeModel::valid_holders(s) <= 1 || WakeModel::holds_cut_short(s)
            }),
            Property::<Self>::always("tokens only grow", |_, s| !s.server.counter.went_back),
            Property::<Self>::always("a release or a leave never frees another's hold", |_, s| {
                !s.server.freed_another
            }),
            Property::<Self>::always("no waiter's call moves a holder's lease", |_, s| {
                !s.server.waiter_moved_lease
            }),
            Property::<Self>::always("the lock frees by its lease's end", |_, s| {
                s.server
                    .lock
                    .is_none_or(|h| h.expires <= s.server.now + LEASE + s.set_back)
            }),
            Property::<Self>::always("no wake-up is lost", |_, s| WakeModel::someone_told(s)),
            Property::<Self>::always("a waiter handed the lock gets it by its next attempt", |m, s| {
                m.owed_lock_by_next_attempt(s)
            }),
            Property::<Self>::always("a replayed call is counted once", |_, s| {
                s.records_cut || s.clients.iter().all(|c| !c.levels_disagree)
            }),
            Property::<Self>::always("a lost hold's release is NotHeld", |_, s| {
                s.clients.iter().all(|c| !c.lost_release_not_refused)
            }),
            Property::<Self>::sometimes("a waiter is handed the lock by a message", |_, s| s.granted_by_message),
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.clients) - 1
            }),
            Property::<Self>::sometimes("a clock jumping ahead lets a second holder in", |m, s| {
                m.bounds.jumps == 0 || (!s.data_lost && WakeModel::valid_holders(s) > 1)
            }),
            Property::<Self>::sometimes("a clock set back keeps a hold past its lease", |m, s| {
                m.bounds.jumps == 0 || s.server.lock.is_some_and(|h| h.expires > s.server.now + LEASE)
            }),
            // A force-unlock frees the name whoever holds it (bounds with
            // forces have no jumps, so only the force-unlock reaches this).
            Property::<Self>::sometimes("a force-unlock lets a second holder in", |m, s| {
                m.bounds.forces == 0 || (!s.data_lost && WakeModel::valid_holders(s) > 1)
            }),
            // With `resends`: the background's give-back frees what its
            // re-send took, and a wait holds anew while its given-up
            // attempt is still to be re-sent or given back.
            Property::<Self>::sometimes("a background give-back frees what its re-send took", |m, s| {
                m.bounds.resends == 0 || s.gave_back
            }),
            Property::<Self>::sometimes("a wait holds anew with its given-up attempt behind it", |m, s| {
                m.bounds.resends == 0
                    || s.clients
                        .iter()
                        .any(|c| matches!(c.phase, Phase::Held { .. }) && c.pending.iter().any(Option::is_some))
            }),
            Property::<Self>::sometimes("two attempts of one client in the background at once", |m, s| {
                m.bounds.resends < 2 || s.clients.iter().any(|c| c.pending.iter().all(Option::is_some))
            }),
        ]
    }
}

/// Times relative to now (see the reentrant model's `shift`); the TTLs of
/// keys that are gone are forgotten.
fn shift(s: &mut State) {
    let n = s.server.now;
    let sv = &mut s.server;
    sv.now = 0;
    if let Some(h) = sv.lock.as_mut() {
        h.expires -= n;
    }
    sv.waiters_expires = if sv.waiters.is_empty() {
        0
    } else {
        sv.waiters_expires - n
    };
    sv.asks_expires = if sv.asks.is_empty() { 0 } else { sv.asks_expires - n };
    for r in &mut sv.records {
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
