//! A model of lockwarden's reentrant lock on one master, for the
//! `stateright` model checker (`model-check/tests/model_check.rs`) and for the
//! differential test that holds it to the real scripts
//! (`tests/differential.rs`).
//!
//! [`server`] is the server: the lock's keys and each script as one atomic
//! step. This file adds the clients and the network: each client takes,
//! re-enters and releases the lock (one call at a time) while its watchdog
//! renews it; requests and replies can be lost, a client re-sends a
//! request whose reply it lost (within its command timeout, which the
//! replay records outlive) and gives up after it; a client can crash or
//! stall (stop acting while the clock runs); the server can lose its data
//! (FLUSHALL, a restart without persistence) or one key (eviction), and
//! another program can write the lock's name. Every interleaving of these,
//! up to the bounds of [`Bounds`], is explored.
//!
//! To add a kind: its keys in [`server::Server`], its scripts as methods
//! there (the same decisions, in the same order, as the Lua), its client
//! calls in [`Op`], its holds in [`Phase`], and the pairs of kinds that may
//! hold one name together in [`LockModel::holders_agree`]; then the
//! differential test's operations for its scripts.
#![allow(dead_code)]

pub mod election;
pub mod fair;
pub mod fair_quorum;
pub mod fair_sem;
pub mod family;
pub mod latch;
pub mod net;
pub mod quorum;
pub mod rw_quorum;
pub mod server;
pub mod shared_hash;
pub mod wake;

use net::{Line, Net};
use server::{AcquireReply, Defect, Key, Owner, ReleaseCall, ReleaseReply, Req, Server};
use stateright::{Model, Property};

/// The bounds of an exploration.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub clients: usize,
    /// Acquisitions each client may start.
    pub acquires: u8,
    /// Calls (takes, re-entries, releases) each client may start.
    pub calls: u8,
    /// Data losses (FLUSHALL, restart, eviction), in all.
    pub faults: u8,
    /// Whether another program may write the lock's name.
    pub foreign: bool,
    /// Jumps of the server's clock, one tick ahead or back, in all.
    pub jumps: u8,
    /// Steps explored from the start (`None`: until no new state).
    pub depth: Option<usize>,
}

/// Lengths of time, in ticks.
pub const LEASE: i32 = 2;
/// A client re-sends a request only this long after its first send (its
/// command timeout), then gives up.
pub const TIMEOUT: i32 = 1;
/// A replay record's lifetime: longer than any re-send comes
/// (`record_ttl` is 4 command timeouts).
pub const KEEP: i32 = 2;

/// What a client's hold is, as the client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Held: the token, the levels, and the tick its validity ends at.
    Held {
        token: u64,
        count: u32,
        valid_until: i32,
    },
    /// Told the hold was lost; its release is still to come.
    Lost {
        token: u64,
    },
}

/// A client's call to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Acquire,
    Release { token: u64 },
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
    /// Its call, and a request it gave up on while it was still on its
    /// way (which may still reach the server, its reply unheard).
    pub line: Line<Op, Reply>,
    pub acquires_left: u8,
    pub calls_left: u8,
    /// Its levels are unknown: a re-entry it gave up on may have counted.
    pub levels_unknown: bool,
    /// Ghosts: a release of a hold this client was told was lost answered
    /// something other than `NotHeld`; the levels it believes and the
    /// server's disagree (a replayed call counted twice).
    pub lost_release_not_refused: bool,
    pub levels_disagree: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
    /// Ghost: which clients have held the name (bit per client).
    pub have_held: u8,
    /// Ghost: a hold was lost with the server's data: mutual exclusion
    /// then rests on the fencing tokens until the holder hears of it.
    pub data_lost: bool,
    pub jumps_left: u8,
    /// Ghosts: the clients (bit per client) whose hold on the server a
    /// jump of its clock ahead cut short (the server ends it before the
    /// client's validity does, until a renewal or a new take sets it
    /// again); how many ticks the server's clock was set back (a hold
    /// then outlives its lease by as much).
    pub cut: u8,
    pub set_back: i32,
    /// Ghost: a jump ahead cut replay records short: a re-send may then
    /// come after its record is gone, and count again (a jump longer than
    /// the records' margin over the re-sends, half their lifetime).
    pub records_cut: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client `c` starts a call: a take or re-entry, or a release.
    Start(usize, Op),
    /// The network's step for client `c`'s calls.
    Net(usize, Net),
    /// Client `c`'s watchdog renews (sent, run and its reply heard), or
    /// renews and the reply is lost.
    Renew(usize),
    RenewUnheard(usize),
    Tick,
    Flush,
    EvictLock,
    EvictCounter,
    WriteForeign,
    /// The server's clock jumps one tick ahead, or is set one tick back.
    JumpAhead,
    JumpBack,
}

/// The model: its bounds and, to show a property can fail, a defect.
#[derive(Clone, Debug)]
pub struct LockModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

impl LockModel {
    pub fn new(bounds: Bounds) -> LockModel {
        LockModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> LockModel {
        LockModel {
            bounds,
            defect: Some(defect),
        }
    }

    /// How many clients believe they hold the name with validity left
    /// (a client releasing has left its critical section).
    pub fn valid_holders(state: &State) -> usize {
        state
            .clients
            .iter()
            .filter(|c| {
                let releasing = c.line.calls(|op| matches!(op, Op::Release { .. }));
                !releasing && matches!(c.phase, Phase::Held { valid_until, .. } if state.server.now < valid_until)
            })
            .count()
    }

    /// Whether the holders may hold together: the reentrant lock admits one.
    pub fn holders_agree(state: &State) -> bool {
        Self::valid_holders(state) <= 1
    }

    /// Whether a client believes it holds with validity left while its
    /// hold on the server was cut short by the server's clock jumping
    /// ahead: the hazard every lease lock has (README, "Not guaranteed").
    pub fn holds_cut_short(state: &State) -> bool {
        state.clients.iter().enumerate().any(|(c, cl)| {
            state.cut & (1 << c) != 0
                && matches!(cl.phase, Phase::Held { valid_until, .. } if state.server.now < valid_until)
        })
    }

    fn run(&self, s: &mut State, c: usize) {
        let Some((call, first)) = s.clients[c].line.sent() else {
            return;
        };
        let reply = self.execute(s, c, call, first);
        Self::heal(s, c);
        s.clients[c].line.reply(reply);
    }

    /// Client `c`'s hold on the server has a full lease again (a take,
    /// re-entry or renewal after the jump set it): it outlasts any
    /// validity the client was told, so the jump no longer cuts it.
    fn heal(s: &mut State, c: usize) {
        if matches!(s.server.lock, Key::Hold(h) if h.owner == c as Owner && h.expires >= s.server.now + LEASE) {
            s.cut &= !(1 << c);
        }
    }

    /// Runs client `c`'s request on the server.
    fn execute(&self, s: &mut State, c: usize, call: Call, first: bool) -> Reply {
        let owner = c as Owner;
        match call.op {
            Op::Acquire => Reply::Acquire(s.server.acquire(owner, call.req, LEASE, KEEP, first, self.defect)),
            Op::Release { token } => {
                let release = ReleaseCall {
                    owner,
                    req: call.req,
                    token: Some(token),
                    relet: 0,
                    keep: KEEP,
                    first,
                };
                Reply::Release(s.server.release(release, self.defect))
            }
        }
    }

    fn hear(&self, s: &mut State, c: usize) {
        let now = s.server.now;
        let cl = &mut s.clients[c];
        let Some((call, reply)) = cl.line.heard() else { return };
        let dated = if self.defect == Some(Defect::ValidityFromReply) {
            now
        } else {
            call.since
        };
        match (call.op, reply) {
            (Op::Acquire, Reply::Acquire(AcquireReply::Fresh(token) | AcquireReply::Held { token, count: 1 }))
                if cl.phase == Phase::Idle =>
            {
                cl.phase = Phase::Held {
                    token,
                    count: 1,
                    valid_until: dated + LEASE,
                };
                s.have_held |= 1 << c;
            }
            (
                Op::Acquire,
                Reply::Acquire(AcquireReply::Fresh(fresh) | AcquireReply::Held { token: fresh, count: 1 }),
            ) if matches!(cl.phase, Phase::Held { token, .. } if token != fresh) => {
                // The hold was gone and the re-entry took a new one.
                cl.phase = Phase::Held {
                    token: fresh,
                    count: 1,
                    valid_until: dated + LEASE,
                };
            }
            (Op::Acquire, Reply::Acquire(AcquireReply::Held { count, .. })) => {
                if let Phase::Held {
                    token,
                    count: was,
                    valid_until,
                } = cl.phase
                {
                    if count != was + 1 && !cl.levels_unknown {
                        cl.levels_disagree = true;
                    }
                    cl.phase = Phase::Held {
                        token,
                        count,
                        valid_until,
                    };
                }
            }
            (Op::Acquire, _) => {}
            (Op::Release { .. }, Reply::Release(r)) => {
                match cl.phase {
                    Phase::Lost { .. } => {
                        if matches!(r, ReleaseReply::Left(_)) {
                            cl.lost_release_not_refused = true;
                        }
                        cl.phase = Phase::Idle;
                    }
                    Phase::Held {
                        token,
                        count,
                        valid_until,
                    } => match r {
                        ReleaseReply::Left(0) => {
                            if count != 1 && !cl.levels_unknown {
                                cl.levels_disagree = true;
                            }
                            cl.phase = Phase::Idle;
                            cl.levels_unknown = false;
                        }
                        ReleaseReply::Left(n) => {
                            if n + 1 != count && !cl.levels_unknown {
                                cl.levels_disagree = true;
                            }
                            cl.phase = Phase::Held {
                                token,
                                count: n,
                                valid_until,
                            };
                        }
                        // Not held any more (lost meanwhile): the guard
                        // is done with.
                        _ => {
                            cl.phase = Phase::Idle;
                            cl.levels_unknown = false;
                        }
                    },
                    _ => {}
                }
            }
            (Op::Release { .. }, _) => {}
        }
    }

    fn hear_renewal(&self, s: &mut State, c: usize, sent: i32, ok: bool) {
        let cl = &mut s.clients[c];
        if let Phase::Held {
            token,
            count,
            valid_until,
        } = cl.phase
        {
            // A renewal confirmed after the validity ended does not revive
            // it (`watchdog::tick` marks such a hold lost; its release may
            // still find it).
            cl.phase = if ok && sent >= valid_until {
                cl.phase
            } else if ok {
                Phase::Held {
                    token,
                    count,
                    valid_until: valid_until.max(sent + LEASE),
                }
            } else {
                Phase::Lost { token }
            };
        }
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            server: Server::new(),
            clients: (0..self.bounds.clients)
                .map(|_| ClientState {
                    phase: Phase::Idle,
                    line: Line::default(),
                    acquires_left: self.bounds.acquires,
                    calls_left: self.bounds.calls,
                    levels_unknown: false,
                    lost_release_not_refused: false,
                    levels_disagree: false,
                })
                .collect(),
            faults_left: self.bounds.faults,
            have_held: 0,
            data_lost: false,
            jumps_left: self.bounds.jumps,
            cut: 0,
            set_back: 0,
            records_cut: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let now = s.server.now;
        for (c, cl) in s.clients.iter().enumerate() {
            if cl.calls_left > 0 {
                match (cl.line.call, cl.phase) {
                    (None, Phase::Idle) if cl.acquires_left > 0 => actions.push(Action::Start(c, Op::Acquire)),
                    (None, Phase::Held { token, count, .. }) => {
                        if count < 2 {
                            actions.push(Action::Start(c, Op::Acquire));
                        }
                        actions.push(Action::Start(c, Op::Release { token }));
                    }
                    (None, Phase::Lost { token }) => actions.push(Action::Start(c, Op::Release { token })),
                    _ => {}
                }
            }
            // The watchdog renews a hold until its release begins.
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
            if matches!(s.server.lock, Key::Hold(_)) {
                actions.push(Action::EvictLock);
            }
            if s.server.counter.value.is_some() {
                actions.push(Action::EvictCounter);
            }
        }
        if self.bounds.foreign && s.server.lock == Key::Absent {
            actions.push(Action::WriteForeign);
        }
        // A jump moves deadlines: without one on the server it changes
        // nothing.
        if s.jumps_left > 0 && (matches!(s.server.lock, Key::Hold(_)) || !s.server.records.is_empty()) {
            actions.push(Action::JumpAhead);
            actions.push(Action::JumpBack);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = s.server.now;
        match action {
            Action::Start(c, op) => {
                // Request ids are the client's own (as a client's
                // uuid makes them): the same calls in another order are
                // the same state.
                let req = (c as Req) * 64 + Req::from(self.bounds.calls - s.clients[c].calls_left);
                if op == Op::Acquire && s.clients[c].phase == Phase::Idle {
                    s.clients[c].acquires_left -= 1;
                }
                s.clients[c].calls_left -= 1;
                s.clients[c].line.call = Some(Call::new(op, req, now));
            }
            Action::Net(c, Net::Run) => self.run(&mut s, c),
            Action::Net(c, Net::RunLate) => {
                if let Some((call, first)) = s.clients[c].line.take_late() {
                    // A late take or re-entry the client never hears of:
                    // an orphan hold until its lease ends, or a level more
                    // on the owner's own hold, which then outlives its
                    // last release by up to a lease (a liveness cost the
                    // README states; never a second holder).
                    let was = s.server.lock;
                    self.execute(&mut s, c, call, first);
                    Self::heal(&mut s, c);
                    if s.server.lock != was {
                        s.clients[c].levels_unknown = true;
                    }
                }
            }
            Action::Net(c, Net::Hear) => self.hear(&mut s, c),
            Action::Net(c, Net::GiveUp) => {
                let cl = &mut s.clients[c];
                let call = cl.line.give_up()?;
                match (call.op, cl.phase) {
                    // An acquire whose outcome is unknown is an error: the
                    // client holds nothing (a take the server made
                    // expires with its lease).
                    (Op::Acquire, Phase::Idle) => {}
                    // A re-entry's: its levels are unknown (the hold
                    // stands).
                    (Op::Acquire, _) => cl.levels_unknown = true,
                    // A release's: the guard is spent.
                    (Op::Release { .. }, _) => cl.phase = Phase::Idle,
                }
            }
            Action::Net(c, step) => s.clients[c].line.carry(step),
            Action::Renew(c) => {
                // Sent, run and heard in one step: the tightest case (a
                // renewal heard later was sent earlier, and its sender
                // counts from the send).
                let ok = s.server.renew(c as Owner, LEASE, self.defect);
                self.hear_renewal(&mut s, c, now, ok);
                Self::heal(&mut s, c);
            }
            Action::RenewUnheard(c) => {
                s.server.renew(c as Owner, LEASE, self.defect);
                Self::heal(&mut s, c);
            }
            Action::Tick => {
                s.server.advance(1);
                shift(&mut s);
            }
            Action::Flush => {
                s.faults_left -= 1;
                s.data_lost = true;
                s.server.flush();
            }
            Action::EvictLock => {
                s.faults_left -= 1;
                s.data_lost = true;
                s.server.lock = Key::Absent;
            }
            Action::EvictCounter => {
                s.faults_left -= 1;
                s.server.counter.value = None;
            }
            Action::WriteForeign => s.server.lock = Key::Foreign,
            Action::JumpAhead => {
                s.jumps_left -= 1;
                if let Key::Hold(h) = s.server.lock {
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
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("never two holders with validity left", |_, s| {
                s.data_lost || LockModel::holders_agree(s) || LockModel::holds_cut_short(s)
            }),
            Property::<Self>::always("tokens only grow", |_, s| !s.server.counter.went_back),
            Property::<Self>::always("a lost hold's release is NotHeld", |_, s| {
                s.clients.iter().all(|c| !c.lost_release_not_refused)
            }),
            Property::<Self>::always("a release never frees another's hold", |_, s| !s.server.freed_another),
            Property::<Self>::always("no script writes a key that is not a hold", |_, s| {
                !s.server.foreign_written
            }),
            Property::<Self>::always("no refused caller moves the holder's lease", |_, s| {
                !s.server.refusal_moved_lease
            }),
            Property::<Self>::always("a replayed call is counted once", |_, s| {
                s.records_cut || s.clients.iter().all(|c| !c.levels_disagree)
            }),
            Property::<Self>::always("a held name frees by its lease's end", |_, s| match s.server.lock {
                Key::Hold(h) => h.expires > s.server.now && h.expires <= s.server.now + LEASE + s.set_back,
                _ => true,
            }),
            Property::<Self>::sometimes("every client holds the name in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.clients) - 1
            }),
            // The hazard is real in the model (so the excuse above is not
            // hiding something else), and a clock set back does keep a
            // hold longer.
            Property::<Self>::sometimes("a clock jumping ahead lets a second holder in", |m, s| {
                m.bounds.jumps == 0 || (!s.data_lost && !LockModel::holders_agree(s))
            }),
            Property::<Self>::sometimes(
                "a clock jumping ahead past a record's margin counts a re-send twice",
                |m, s| m.bounds.jumps == 0 || s.clients.iter().any(|c| c.levels_disagree),
            ),
            Property::<Self>::sometimes("a clock set back keeps a hold past its lease", |m, s| {
                m.bounds.jumps == 0 || matches!(s.server.lock, Key::Hold(h) if h.expires > s.server.now + LEASE)
            }),
        ]
    }
}

/// Times made relative to now (now becomes 0), and times so far back that
/// they no longer change a decision clamped: the same situation at two
/// ticks is one state, so the exploration needs no clock bound.
fn shift(s: &mut State) {
    let n = s.server.now;
    let back = |t: i32, floor: i32| (t - n).max(floor);
    s.server.rebase(n);
    for cl in &mut s.clients {
        cl.line.shift(n);
        if let Phase::Held { valid_until, .. } = &mut cl.phase {
            *valid_until = back(*valid_until, 0);
        }
    }
}
