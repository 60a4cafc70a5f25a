//! A model of leader election (`src/election.rs`, `lua/elect_proclaim.lua`,
//! `lua/elect_read.lua`) on one master, for the model checker
//! (`model-check/tests/model_check.rs`).
//!
//! The election is the reentrant lock (modelled in `server.rs` with its
//! records and levels): here only what the election adds is kept. The
//! server: the election's lock as one hold (its owner, its token, its
//! expiry) with the proclaimed value in its hash, the fencing counter, and
//! the log of proclaimed values. The clients campaign under an owner of
//! their own per campaign: an acquire attempt goes over the network of
//! every model ([`super::net`]), and one given up on may still reach the
//! server later and take the lock under the campaign's owner (a background
//! re-send of the attempt does the same); the campaign's next attempt goes
//! on under the same owner. A leader proclaims values (over the network:
//! a proclaim may reach the server after the hold lapsed and a late attempt
//! took the lock anew), renews (its confirmation heard after its validity
//! ended revives nothing, as `watchdog::Renewal::settle`), stalls, and
//! resigns. Faults: FLUSHALL.
//!
//! Properties: a value in the election's hash was proclaimed under the
//! term that holds it (never a value of an earlier hold of the same owner);
//! terms only grow (across a FLUSHALL too); never two leaders with
//! validity left (but after data loss); a leadership lost or past its
//! validity proclaims nothing.
#![allow(dead_code)]

use stateright::{Model, Property};

use super::net::{Line, Net};
use super::server::{Counter, Req};
use super::LEASE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// `elect_proclaim.lua` before it named the term: any hold of the
    /// owner takes the value.
    ProclaimIgnoresTerm,
    /// `Leadership::proclaim` before it looked at the leadership first: a
    /// lost or expired leadership still sends its proclaim.
    ProclaimWhenLost,
    /// A lost counter starts again at 1.
    CounterRestartsAtOne,
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub clients: usize,
    /// Campaigns each client may start.
    pub campaigns: u8,
    /// Proclaims each leadership may send (after the campaign's own).
    pub proclaims: u8,
    /// Calls (attempts and proclaims) each client may send in all.
    pub calls: u8,
    pub faults: u8,
    pub depth: Option<usize>,
}

/// An owner: a client's campaign, `client * 8 + campaign`.
pub type Owner = u8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub owner: Owner,
    pub token: u64,
    /// The tick its lease ends at (relative to now, which stays 0).
    pub expires: i32,
    /// The value in the hash, and (ghost) the term its proclaim named.
    pub value: Option<(Owner, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A campaign's acquire attempt.
    Acquire { owner: Owner },
    /// A leader's proclaim of its value under its term.
    Proclaim { owner: Owner, term: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Taken (or found taken by the same owner): the token.
    Acquired(u64),
    Refused,
    /// The term proclaimed under, or `None` (-1).
    Proclaimed(Option<u64>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub lock: Option<Hold>,
    pub counter: Counter,
    /// Ghost: a proclaim wrote a value under a term other than its own.
    pub value_under_other_term: bool,
}

impl Server {
    /// The reentrant lock's acquire for a campaign's owner (its own hold
    /// is found again: a re-sent or next attempt of the campaign).
    pub fn acquire(&mut self, owner: Owner, defect: Option<Defect>) -> Reply {
        match self.lock.as_mut() {
            // Entered again: the lease is set anew, as a re-entry does.
            Some(h) if h.owner == owner => {
                h.expires = LEASE;
                Reply::Acquired(h.token)
            }
            Some(_) => Reply::Refused,
            None => {
                let token = self.counter.next(defect == Some(Defect::CounterRestartsAtOne));
                self.lock = Some(Hold {
                    owner,
                    token,
                    expires: LEASE,
                    value: None,
                });
                Reply::Acquired(token)
            }
        }
    }

    /// `elect_proclaim.lua`: the owner's hold, under the term given.
    pub fn proclaim(&mut self, owner: Owner, term: u64, defect: Option<Defect>) -> Reply {
        match self.lock.as_mut() {
            Some(h) if h.owner == owner && (h.token == term || defect == Some(Defect::ProclaimIgnoresTerm)) => {
                if h.token != term {
                    self.value_under_other_term = true;
                }
                h.value = Some((owner, term));
                Reply::Proclaimed(Some(h.token))
            }
            _ => Reply::Proclaimed(None),
        }
    }

    /// `renew.lua`: the owner's field found, the lease set anew.
    fn renew(&mut self, owner: Owner) -> bool {
        match self.lock.as_mut() {
            Some(h) if h.owner == owner => {
                h.expires = LEASE;
                true
            }
            _ => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    Campaigning {
        owner: Owner,
    },
    /// Leading under `term` until `valid_until` (relative to now).
    Leading {
        owner: Owner,
        term: u64,
        valid_until: i32,
    },
    /// Told the leadership is lost.
    Lost {
        owner: Owner,
        term: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientState {
    pub phase: Phase,
    pub line: Line<Op, Reply>,
    pub campaigns_left: u8,
    pub proclaims_left: u8,
    /// Requests made so far (a request id per client and call).
    pub calls: u8,
    /// Ghost: a proclaim sent while the leadership was lost or past its
    /// validity.
    pub proclaimed_when_lost: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
    /// Ghost: the server lost its data.
    pub data_lost: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Campaign(usize),
    Proclaim(usize),
    Renew(usize),
    Resign(usize),
    Net(usize, Net),
    Tick,
    Flush,
}

pub struct ElectionModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

impl ElectionModel {
    pub fn new(bounds: Bounds) -> ElectionModel {
        ElectionModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> ElectionModel {
        ElectionModel {
            bounds,
            defect: Some(defect),
        }
    }

    fn owner_of(c: usize, campaign: u8) -> Owner {
        (c as u8) * 8 + campaign
    }

    fn send(cl: &mut ClientState, c: usize, op: Op) {
        let req = (c as Req) * 64 + Req::from(cl.calls);
        cl.calls += 1;
        cl.line.call = Some(super::net::Call::new(op, req, 0));
    }

    fn run(&self, s: &mut State, op: Op) -> Reply {
        match op {
            Op::Acquire { owner } => s.server.acquire(owner, self.defect),
            Op::Proclaim { owner, term } => s.server.proclaim(owner, term, self.defect),
        }
    }
}

impl Model for ElectionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            server: Server {
                lock: None,
                counter: Counter::default(),
                value_under_other_term: false,
            },
            clients: (0..self.bounds.clients)
                .map(|_| ClientState {
                    phase: Phase::Idle,
                    line: Line::default(),
                    campaigns_left: self.bounds.campaigns,
                    proclaims_left: 0,
                    calls: 0,
                    proclaimed_when_lost: false,
                })
                .collect(),
            faults_left: self.bounds.faults,
            data_lost: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, cl) in s.clients.iter().enumerate() {
            let free = cl.line.call.is_none() && cl.calls < self.bounds.calls;
            match cl.phase {
                Phase::Idle | Phase::Lost { .. } if free && cl.campaigns_left > 0 => actions.push(Action::Campaign(c)),
                // The campaign's next attempt, after a refusal or a give-up.
                Phase::Campaigning { .. } if free => actions.push(Action::Campaign(c)),
                Phase::Leading { valid_until, .. } => {
                    if free
                        && cl.proclaims_left > 0
                        && (valid_until > 0 || self.defect == Some(Defect::ProclaimWhenLost))
                    {
                        actions.push(Action::Proclaim(c));
                    }
                    if free {
                        actions.push(Action::Resign(c));
                    }
                    actions.push(Action::Renew(c));
                }
                _ => {}
            }
            let mut net = Vec::new();
            cl.line.offer(0, &mut net);
            actions.extend(net.into_iter().map(|n| Action::Net(c, n)));
        }
        actions.push(Action::Tick);
        if s.faults_left > 0 {
            actions.push(Action::Flush);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Campaign(c) => {
                let cl = &mut s.clients[c];
                let owner = match cl.phase {
                    Phase::Campaigning { owner } => owner,
                    _ => {
                        let owner = Self::owner_of(c, self.bounds.campaigns - cl.campaigns_left);
                        cl.campaigns_left -= 1;
                        cl.phase = Phase::Campaigning { owner };
                        owner
                    }
                };
                Self::send(cl, c, Op::Acquire { owner });
            }
            Action::Proclaim(c) => {
                let cl = &mut s.clients[c];
                let Phase::Leading {
                    owner,
                    term,
                    valid_until,
                } = cl.phase
                else {
                    return None;
                };
                if valid_until <= 0 {
                    cl.proclaimed_when_lost = true;
                }
                cl.proclaims_left -= 1;
                Self::send(cl, c, Op::Proclaim { owner, term });
            }
            Action::Renew(c) => {
                let Phase::Leading {
                    owner,
                    term,
                    valid_until,
                } = s.clients[c].phase
                else {
                    return None;
                };
                let ok = s.server.renew(owner);
                s.clients[c].phase = match (ok, valid_until > 0) {
                    (true, true) => Phase::Leading {
                        owner,
                        term,
                        valid_until: LEASE,
                    },
                    // Confirmed after the validity ended, or gone: lost.
                    _ => Phase::Lost { owner, term },
                };
            }
            Action::Resign(c) => {
                let Phase::Leading { owner, term, .. } = s.clients[c].phase else {
                    return None;
                };
                // The release names the token.
                if s.server.lock.is_some_and(|h| h.owner == owner && h.token == term) {
                    s.server.lock = None;
                }
                s.clients[c].phase = Phase::Idle;
            }
            Action::Net(c, step) => match step {
                Net::Run => {
                    let (call, _) = s.clients[c].line.sent()?;
                    let reply = self.run(&mut s, call.op);
                    s.clients[c].line.reply(reply);
                }
                Net::RunLate => {
                    let (call, _) = s.clients[c].line.take_late()?;
                    self.run(&mut s, call.op);
                }
                Net::Hear => {
                    let (call, reply) = s.clients[c].line.heard()?;
                    let cl = &mut s.clients[c];
                    match (cl.phase, reply) {
                        (Phase::Campaigning { owner }, Reply::Acquired(term))
                            if matches!(call.op, Op::Acquire { .. }) =>
                        {
                            // Validity counted from the attempt's send.
                            cl.phase = Phase::Leading {
                                owner,
                                term,
                                valid_until: call.since + LEASE,
                            };
                            cl.proclaims_left = self.bounds.proclaims;
                        }
                        (Phase::Leading { owner, term, .. }, Reply::Proclaimed(None)) => {
                            cl.phase = Phase::Lost { owner, term };
                        }
                        _ => {}
                    }
                }
                // A campaign's attempt given up on: the campaign goes on
                // under the same owner (its late request may still take the
                // lock); a proclaim given up on may still come late.
                Net::GiveUp => {
                    s.clients[c].line.give_up()?;
                }
                other => s.clients[c].line.carry(other),
            },
            Action::Tick => {
                if let Some(h) = s.server.lock.as_mut() {
                    h.expires -= 1;
                    if h.expires <= 0 {
                        s.server.lock = None;
                    }
                }
                for cl in &mut s.clients {
                    cl.line.shift(1);
                    if let Phase::Leading { valid_until, .. } = &mut cl.phase {
                        *valid_until = (*valid_until - 1).max(0);
                    }
                }
            }
            Action::Flush => {
                s.faults_left -= 1;
                s.server.lock = None;
                s.server.counter.value = None;
                s.data_lost = true;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("a value stands only under the term that proclaimed it", |_, s| {
                !s.server.value_under_other_term
            }),
            Property::<Self>::always("terms only grow", |_, s| !s.server.counter.went_back),
            Property::<Self>::always("never two leaders with validity left", |_, s| {
                s.data_lost
                    || s.clients
                        .iter()
                        .filter(|c| matches!(c.phase, Phase::Leading { valid_until, .. } if valid_until > 0))
                        .count()
                        <= 1
            }),
            Property::<Self>::always("a lost or expired leadership proclaims nothing", |_, s| {
                s.clients.iter().all(|c| !c.proclaimed_when_lost)
            }),
            Property::<Self>::sometimes("a leader's value stands", |_, s| {
                s.server.lock.is_some_and(|h| h.value.is_some())
            }),
            Property::<Self>::sometimes("a late attempt takes the lock under a campaign's owner anew", |_, s| {
                s.clients.iter().any(|c| match c.phase {
                    Phase::Leading { owner, term, .. } | Phase::Lost { owner, term } => {
                        s.server.lock.is_some_and(|h| h.owner == owner && h.token != term)
                    }
                    _ => false,
                })
            }),
        ]
    }
}
