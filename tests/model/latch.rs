//! A model of the count-down latch (`lua/latch.lua`, `src/latch.rs`) on
//! one master, for the model checker (`model-check/tests/model_check.rs`) and the
//! differential test that holds it to the real script
//! (`tests/differential_latch.rs`).
//!
//! The server: the latch hash (`:count`, `:gen`, `:zeroed`), the name's
//! token counter (each setting's generation is a fencing token of it) and
//! the replay records of the calls that change the count; `latch.lua`'s
//! set, count-down and read as atomic steps with its decisions. The
//! clients: a setter that sets the count (to the number of counters) and
//! may set it again; counters that count down once each; waiters that read
//! the latch as `CountDownLatch::wait` does (any time: a read is what a
//! message or the 2 s recheck leads to, and safety does not rest on the
//! message). Each setting and count-down goes over the network of every
//! model ([`super::net`]): its request or reply lost, re-sent within the
//! command timeout, given up on and still coming late. Faults: FLUSHALL
//! (or a restart without persistence) and the eviction of the latch's key.
//!
//! Properties: a count-down is counted once however often it is sent; a
//! waiter is let through only by its generation reaching zero by
//! count-downs (never by a lost key, never by a setting over a count);
//! generations only grow, across a FLUSHALL too; a latch counting is never
//! set again; a setting that stored its number says so (while it is
//! stored), also to its own re-send.
#![allow(dead_code)]

use stateright::{Model, Property};

use super::net::{Line, Net};
use super::server::{Counter, Req};
use super::KEEP;

/// A defect given back to the model, for the properties to catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// No replay record: a re-sent call is applied again, so a count-down
    /// whose reply was lost counts twice (the script before the records).
    NoRecord,
    /// A waiter takes a missing latch for zero (Redisson's reading, whose
    /// latch is deleted at zero).
    GoneIsZero,
    /// A setting resets a latch that is still counting.
    SetWhileCounting,
    /// A lost counter starts again at 1: generations go back.
    CounterRestartsAtOne,
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Clients that count down once each; the setter sets this count.
    pub counters: usize,
    /// Waiting clients.
    pub waiters: usize,
    /// Settings the setter may make (the first, and again after zero).
    pub sets: u8,
    /// Data losses (FLUSHALL, the latch's key evicted), in all.
    pub faults: u8,
    pub depth: Option<usize>,
}

/// The latch hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Latch {
    pub count: u8,
    pub gen: u64,
    /// The generation that reached zero before this one was set from it
    /// (0: none).
    pub zeroed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Set the count to `n` if at zero or absent.
    Set(u8),
    Down,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// `{1, gen}` set, `{0, gen}` refused (still counting).
    Set { ok: bool, gen: u64 },
    /// `{left, gen}`; `{-1}` (`left` None) when there is no latch.
    Down { left: Option<u8>, gen: u64 },
}

/// What a read finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Read {
    Absent,
    Counting(Latch),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: i32,
    pub latch: Option<Latch>,
    pub counter: Counter,
    /// Replay records: request, reply, the tick they expire at.
    pub records: Vec<(Req, Reply, i32)>,
    /// Ghosts: each count-down applied (its generation and request); one
    /// request applied twice to one generation; the generations that
    /// reached zero by count-downs; the requests whose setting is stored
    /// (a lost key takes them along); whether a setting replaced a latch still counting. (A
    /// FLUSHALL loses the records with the latch: a count-down re-sent
    /// after it may count down a generation set after it, once.)
    pub applied: Vec<(u64, Req)>,
    pub counted_twice: bool,
    pub reached_zero: Vec<u64>,
    pub sets_applied: Vec<Req>,
    pub reset_counting: bool,
}

impl Server {
    pub fn new() -> Server {
        Server {
            now: 0,
            latch: None,
            counter: Counter::default(),
            records: Vec::new(),
            applied: Vec::new(),
            counted_twice: false,
            reached_zero: Vec::new(),
            sets_applied: Vec::new(),
            reset_counting: false,
        }
    }

    /// `latch.lua` for a set or a count-down; `first`: ARGV[6] = "1".
    pub fn call(&mut self, op: Op, req: Req, first: bool, defect: Option<Defect>) -> Reply {
        if !first && defect != Some(Defect::NoRecord) {
            if let Some(&(_, reply, _)) = self.records.iter().find(|r| r.0 == req) {
                return reply;
            }
        }
        let reply = match op {
            Op::Down => match self.latch.as_mut() {
                None => Reply::Down { left: None, gen: 0 },
                Some(l) if l.count == 0 => Reply::Down {
                    left: Some(0),
                    gen: l.gen,
                },
                Some(l) => {
                    l.count -= 1;
                    if self.applied.contains(&(l.gen, req)) {
                        self.counted_twice = true;
                    }
                    self.applied.push((l.gen, req));
                    if l.count == 0 {
                        self.reached_zero.push(l.gen);
                    }
                    Reply::Down {
                        left: Some(l.count),
                        gen: l.gen,
                    }
                }
            },
            Op::Set(n) => match self.latch {
                Some(l) if l.count > 0 && defect != Some(Defect::SetWhileCounting) => {
                    Reply::Set { ok: false, gen: l.gen }
                }
                old => {
                    let gen = self.counter.next(defect == Some(Defect::CounterRestartsAtOne));
                    if old.is_some_and(|l| l.count > 0) {
                        self.reset_counting = true;
                    }
                    self.latch = Some(Latch {
                        count: n,
                        gen,
                        zeroed: old.map_or(0, |l| l.gen),
                    });
                    self.sets_applied.push(req);
                    Reply::Set { ok: true, gen }
                }
            },
        };
        self.records.retain(|r| r.0 != req);
        self.records.push((req, reply, self.now + KEEP));
        self.records.sort_by_key(|r| r.0);
        reply
    }

    /// `latch.lua`'s read.
    pub fn read(&self) -> Read {
        match self.latch {
            None => Read::Absent,
            Some(l) => Read::Counting(l),
        }
    }

    /// One tick: times are kept relative to now (which stays 0), so
    /// states that differ only in when they happen are one.
    pub fn tick(&mut self) {
        for r in &mut self.records {
            r.2 -= 1;
        }
        let now = self.now;
        self.records.retain(|r| r.2 > now);
    }

    /// FLUSHALL, or a restart without persistence.
    pub fn flush(&mut self) {
        self.evict();
        self.counter.value = None;
        self.records.clear();
    }

    /// The latch's key lost (evicted, or with the rest): the settings it
    /// stored are no longer stored, and a re-sent one may say so.
    pub fn evict(&mut self) {
        self.latch = None;
        self.sets_applied.clear();
    }
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Setter,
    Counter,
    Waiter,
}

/// A waiter's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Waiting,
    /// Let through, by the generation it names.
    Through(u64),
    /// `Error::LatchGone`.
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientState {
    pub role: Role,
    pub line: Line<Op, Reply>,
    pub calls_left: u8,
    /// A waiter's: the generation it saw counting, and its end.
    pub seen: Option<u64>,
    pub outcome: Outcome,
    /// Ghost: a setting that was applied answered "not set".
    pub misinformed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start(usize),
    Net(usize, Net),
    Read(usize),
    Tick,
    Flush,
    Evict,
}

pub struct LatchModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

impl LatchModel {
    pub fn new(bounds: Bounds) -> LatchModel {
        LatchModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> LatchModel {
        LatchModel {
            bounds,
            defect: Some(defect),
        }
    }

    /// `CountDownLatch::wait`'s decision on what a read found (`None`: it
    /// goes on waiting).
    pub fn wait_step(seen: &mut Option<u64>, read: Read, defect: Option<Defect>) -> Option<Outcome> {
        match (*seen, read) {
            (None, Read::Absent) => None,
            (Some(g), Read::Absent) if defect == Some(Defect::GoneIsZero) => Some(Outcome::Through(g)),
            (Some(_), Read::Absent) => Some(Outcome::Gone),
            (None, Read::Counting(l)) if l.count == 0 => Some(Outcome::Through(l.gen)),
            (None, Read::Counting(l)) => {
                *seen = Some(l.gen);
                None
            }
            (Some(g), Read::Counting(l)) if l.gen == g => (l.count == 0).then_some(Outcome::Through(g)),
            (Some(g), Read::Counting(l)) => Some(if l.gen > g && l.zeroed == g {
                Outcome::Through(g)
            } else {
                Outcome::Gone
            }),
        }
    }
}

impl Model for LatchModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut clients = vec![ClientState {
            role: Role::Setter,
            line: Line::default(),
            calls_left: self.bounds.sets,
            seen: None,
            outcome: Outcome::Waiting,
            misinformed: false,
        }];
        for _ in 0..self.bounds.counters {
            clients.push(ClientState {
                role: Role::Counter,
                calls_left: 1,
                ..clients[0].clone()
            });
        }
        for _ in 0..self.bounds.waiters {
            clients.push(ClientState {
                role: Role::Waiter,
                calls_left: 0,
                ..clients[0].clone()
            });
        }
        vec![State {
            server: Server::new(),
            clients,
            faults_left: self.bounds.faults,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let now = s.server.now;
        let mut pending = false;
        for (c, cl) in s.clients.iter().enumerate() {
            match cl.role {
                Role::Waiter => {
                    if cl.outcome == Outcome::Waiting {
                        actions.push(Action::Read(c));
                    }
                }
                _ => {
                    if cl.line.call.is_none() && cl.calls_left > 0 {
                        actions.push(Action::Start(c));
                    }
                    let mut net = Vec::new();
                    cl.line.offer(now, &mut net);
                    pending |= !net.is_empty();
                    actions.extend(net.into_iter().map(|n| Action::Net(c, n)));
                }
            }
        }
        // The clock moves while something is still to come.
        if pending || s.clients.iter().any(|c| c.calls_left > 0) {
            actions.push(Action::Tick);
        }
        if s.faults_left > 0 {
            actions.push(Action::Flush);
            if s.server.latch.is_some() {
                actions.push(Action::Evict);
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Start(c) => {
                let op = match s.clients[c].role {
                    Role::Setter => Op::Set(self.bounds.counters as u8),
                    _ => Op::Down,
                };
                // A request id per client and call (ids say nothing else).
                let cl = &mut s.clients[c];
                let req = (c as Req) * 8 + Req::from(self.bounds.sets - cl.calls_left);
                cl.calls_left -= 1;
                cl.line.call = Some(super::net::Call::new(op, req, s.server.now));
            }
            Action::Net(c, step) => match step {
                Net::Run => {
                    let (call, first) = s.clients[c].line.sent()?;
                    let reply = s.server.call(call.op, call.req, first, self.defect);
                    s.clients[c].line.reply(reply);
                }
                Net::RunLate => {
                    let (call, first) = s.clients[c].line.take_late()?;
                    s.server.call(call.op, call.req, first, self.defect);
                }
                Net::Hear => {
                    let (call, reply) = s.clients[c].line.heard()?;
                    if let Reply::Set { ok: false, .. } = reply {
                        if s.server.sets_applied.contains(&call.req) {
                            s.clients[c].misinformed = true;
                        }
                    }
                }
                Net::GiveUp => {
                    s.clients[c].line.give_up()?;
                }
                other => s.clients[c].line.carry(other),
            },
            Action::Read(c) => {
                let read = s.server.read();
                let cl = &mut s.clients[c];
                if let Some(end) = LatchModel::wait_step(&mut cl.seen, read, self.defect) {
                    cl.outcome = end;
                }
            }
            Action::Tick => {
                s.server.tick();
                for cl in &mut s.clients {
                    cl.line.shift(1);
                }
            }
            Action::Flush => {
                s.faults_left -= 1;
                s.server.flush();
            }
            Action::Evict => {
                s.faults_left -= 1;
                s.server.evict();
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("a count-down is counted once", |_, s| !s.server.counted_twice),
            Property::<Self>::always("a waiter is let through only by its generation's zero", |_, s| {
                s.clients.iter().all(|c| match c.outcome {
                    Outcome::Through(g) => s.server.reached_zero.contains(&g),
                    _ => true,
                })
            }),
            Property::<Self>::always("generations only grow", |_, s| !s.server.counter.went_back),
            Property::<Self>::always("a latch counting is never set again", |_, s| !s.server.reset_counting),
            Property::<Self>::always("a setting that is stored says so", |_, s| {
                s.clients.iter().all(|c| !c.misinformed)
            }),
            Property::<Self>::sometimes("a waiter is let through", |_, s| {
                s.clients.iter().any(|c| matches!(c.outcome, Outcome::Through(_)))
            }),
            Property::<Self>::sometimes("a waiter is told the latch is gone", |_, s| {
                s.clients.iter().any(|c| c.outcome == Outcome::Gone)
            }),
            // Through the zero of its generation that it did not read: the
            // setting after it keeps it (`:zeroed`).
            Property::<Self>::sometimes("a waiter is let through after the latch was set again", |_, s| {
                s.clients
                    .iter()
                    .any(|c| matches!(c.outcome, Outcome::Through(g) if s.server.latch.is_some_and(|l| l.gen > g)))
            }),
        ]
    }
}
