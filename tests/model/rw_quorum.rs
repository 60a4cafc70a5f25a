//! The read-write lock over a quorum of three masters. Each master holds
//! the read-write lock's hash ([`super::shared_hash::Server`], the same
//! scripts as one master's) for waits that ask for no direct grant: a
//! waiting writer leaves its mark, which holds new readers back there, and
//! is woken, not handed the lock. A client, a reader or a writer, asks
//! every master (its writer's mark left where refused); it holds on a
//! majority of the masters that count, its validity dated from the
//! attempt's start, its token the highest of the grants, written back
//! (`raise_token.lua`: the counter, and the hash's `:token` while it is
//! still the one the hold got); a writer's re-entered level left from a
//! hold it lost is undone. Held, a writer leaves the marks of the masters
//! that did not grant it in the background (late, or never). Refused, or
//! split (some granted, not a majority: what it got given back, its marks
//! kept), it tries again at any step. It renews and releases on every
//! master (a reader's release names the request whose take made its read
//! hold). A master restarts empty and stays out of the majority for the
//! rejoin delay. Each request to a master runs and is answered, runs with
//! its reply lost, or is lost; a part without an answer is re-sent in the
//! background (late, or never), and what that got given back. Messages are not modelled: a waiting client tries again at any
//! step.

use stateright::{Model, Property};

use super::family::MARK;
use super::quorum::{majority, raise_counter, tally, write_back, Answer, Attempt, Budget, Master, Part, MASTERS};
use super::server::{Owner, Req};
use super::shared_hash::{AcquireReply, Field, Name, RwAcquire, RwRelease, Server};
use super::{KEEP, LEASE};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// One grant is taken for a majority.
    MajorityOfOne,
    /// The quorum's token is not written back to the masters that granted
    /// lower.
    NoRaise,
    /// A defect of one master's scripts.
    Server(super::shared_hash::Defect),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// An attempt: each master's part.
    Asking(Attempt),
    /// Refused, or split: tries again when woken, refreshing or after its
    /// pause.
    Waiting,
    /// Held on a majority: each master's token (`None`: no part there),
    /// and a read hold's request (the take that made it on every master).
    Held {
        tokens: [Option<u64>; MASTERS],
        take: Option<Req>,
        valid_until: i32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub field: Field,
    pub phase: Phase,
    pub budget: Budget,
    /// Bit per master: a leave of its writer's mark there on its way.
    pub leaves: u8,
    /// Per master: the request of a part without an answer, re-sent in
    /// the background (late, or never) and what it got given back.
    pub resends: [Option<Req>; MASTERS],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: i32,
    pub masters: Vec<Master<Server>>,
    pub clients: Vec<Client>,
    pub restarts_left: u8,
    pub have_held: u8,
    /// Ghosts: the highest token a write hold was granted, and whether a
    /// write hold's token was not above every earlier hold's, or a read
    /// hold's below an earlier write hold's.
    pub max_write: u64,
    pub max_token: u64,
    pub token_went_back: bool,
    /// Ghost: a reader and a writer held at once, or two writers, with
    /// validity left.
    pub readers_together: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Each client's side (`true`: a writer).
    pub writers: [bool; 3],
    pub clients: usize,
    pub acquires: u8,
    /// Attempts each client may make, in all.
    pub tries: u8,
    pub restarts: u8,
    pub depth: Option<usize>,
    /// Also start where the masters' counters differ: client 0 (a
    /// writer) held on masters 1 and 2 (its request to master 0 lost, and
    /// not re-sent yet) and released.
    pub counters_apart: bool,
}

#[derive(Clone, Debug)]
pub struct RwQuorumModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client's part of its attempt on a master (the first part starts the
    /// attempt, the last decides it).
    Ask(usize, usize, Answer),
    /// A leave of a writer's mark, sent in the background, reaches a master.
    Leave(usize, usize),
    /// A part's re-send, and the give-back of what it got, reach a master.
    Resend(usize, usize),
    Renew(usize),
    Release(usize),
    Tick,
    Restart(usize),
}

/// The request id of a release or a give-back (each is sent once).
const RELEASE: Req = 1000;

impl RwQuorumModel {
    pub fn new(bounds: Bounds) -> RwQuorumModel {
        RwQuorumModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> RwQuorumModel {
        RwQuorumModel {
            bounds,
            defect: Some(defect),
        }
    }

    fn server_defect(&self) -> Option<super::shared_hash::Defect> {
        match self.defect {
            Some(Defect::Server(d)) => Some(d),
            _ => None,
        }
    }

    fn counts(s: &State, m: usize) -> bool {
        s.masters[m].counts(s.now)
    }

    fn majority(&self) -> usize {
        majority(self.defect == Some(Defect::MajorityOfOne))
    }

    /// The clients that hold with validity left: (writers, readers).
    pub fn valid_holders(s: &State) -> (usize, usize) {
        let valid = |c: &&Client| matches!(c.phase, Phase::Held { valid_until, .. } if s.now < valid_until);
        let writers = s.clients.iter().filter(valid).filter(|c| !c.field.is_reader()).count();
        let readers = s.clients.iter().filter(valid).filter(|c| c.field.is_reader()).count();
        (writers, readers)
    }

    /// The attempt's request on master `m`: runs (its reply heard or lost)
    /// or is lost.
    fn ask(&self, s: &mut State, c: usize, m: usize, req: Req, answer: Answer) -> Part {
        if answer == Answer::RequestLost {
            return Part::Unanswered;
        }
        let a = RwAcquire {
            field: s.clients[c].field,
            req,
            lease: LEASE,
            keep: KEEP,
            first: true,
            waits: true,
            mark: MARK,
            ask: None,
        };
        let reply = s.masters[m].server.rw_acquire(a, self.server_defect());
        match (answer, reply) {
            (Answer::ReplyLost, _) => Part::Unanswered,
            (_, AcquireReply::Granted { token, count }) => Part::Granted(token, count > 1),
            _ => Part::Refused,
        }
    }

    /// One level of client `c`'s hold on master `m` given back (a
    /// writer's by its token, a reader's by the request that took it).
    fn release(&self, s: &mut State, c: usize, m: usize, token: u64, take: Option<Req>) {
        let field = s.clients[c].field;
        let reader = field.is_reader();
        let r = RwRelease {
            field,
            req: RELEASE,
            token: (!reader).then_some(token),
            take: if reader { take } else { None },
            relet: 0,
            keep: KEEP,
            first: true,
            grants: false,
        };
        s.masters[m].server.rw_release(r, self.server_defect());
    }

    /// The client's attempt is decided (as in the quorum's model): held on
    /// a majority of counting masters, else every part given back.
    fn decide(&self, s: &mut State, c: usize) {
        let Phase::Asking(Attempt { req, since, parts }) = s.clients[c].phase else {
            return;
        };
        let field = s.clients[c].field;
        let (mut tokens, granted, stale) = tally(&parts, |m| Self::counts(s, m));
        // A reader's token is the counter's value, shared by every reader:
        // a level it re-entered says nothing of a lost hold.
        let stale = stale.filter(|_| !field.is_reader());
        let token = (granted >= self.majority())
            .then(|| self.write_back(s, c, &mut tokens))
            .flatten()
            .filter(|&t| stale.is_none_or(|old| old < t));
        // Whether the granted parts were fresh takes (a read hold's
        // identity is the request that took it).
        let fresh = parts.iter().any(|p| matches!(p, Part::Granted(_, false)));
        for (m, part) in parts.iter().enumerate() {
            if *part == Part::Unanswered {
                s.clients[c].resends[m] = Some(req);
            }
        }
        if let Some(token) = token.filter(|_| since + LEASE > s.now) {
            let (writers, readers) = Self::valid_holders(s);
            if field.is_reader() {
                if token < s.max_write {
                    s.token_went_back = true;
                }
            } else if token <= s.max_token {
                s.token_went_back = true;
            }
            if !field.is_reader() {
                s.max_write = s.max_write.max(token);
            }
            s.max_token = s.max_token.max(token);
            if field.is_reader() && readers > 0 && writers == 0 {
                s.readers_together = true;
            }
            s.clients[c].phase = Phase::Held {
                tokens,
                take: (field.is_reader() && fresh).then_some(req),
                valid_until: since + LEASE,
            };
            s.have_held |= 1 << c;
            if !field.is_reader() {
                for (m, t) in tokens.iter().enumerate() {
                    if t.is_none() {
                        s.clients[c].leaves |= 1 << m;
                    }
                }
            }
            return;
        }
        for (m, t) in tokens.iter().enumerate() {
            if let (Some(t), Part::Granted(_, reentered)) = (*t, parts[m]) {
                self.release(s, c, m, t, (!reentered).then_some(req));
            }
        }
        s.clients[c].phase = Phase::Waiting;
    }

    /// A part without an answer: its request re-sent as a try, and what
    /// that got given back, naming it (as `quorum::Pending` does in the
    /// background).
    fn resend_and_give_back(&self, s: &mut State, c: usize, m: usize, req: Req) {
        let a = RwAcquire {
            field: s.clients[c].field,
            req,
            lease: LEASE,
            keep: KEEP,
            first: false,
            waits: false,
            mark: MARK,
            ask: None,
        };
        if let AcquireReply::Granted { token, count } = s.masters[m].server.rw_acquire(a, self.server_defect()) {
            self.release(s, c, m, token, (count == 1).then_some(req));
        }
    }

    /// `quorum::write_back` on the read-write lock's masters: the counter,
    /// and `:token` when it is still the one the hold got there.
    fn write_back(&self, s: &mut State, c: usize, tokens: &mut [Option<u64>; MASTERS]) -> Option<u64> {
        let no_raise = self.defect == Some(Defect::NoRaise);
        let field = s.clients[c].field;
        write_back(tokens, self.majority(), no_raise, |m, held, token| {
            let server = &mut s.masters[m].server;
            if raise_counter(&mut server.counter, token) {
                if let Name::Hash(h) = &mut server.name {
                    if h.token == Some(held) && h.holds.iter().any(|x| x.field == field) {
                        h.token = Some(token);
                    }
                }
            }
        })
    }
}

impl Model for RwQuorumModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            masters: Master::all(Server::new),
            clients: (0..self.bounds.clients)
                .map(|c| {
                    let owner = (c as Owner) * 16;
                    Client {
                        field: if self.bounds.writers[c] {
                            Field::Writer(owner)
                        } else {
                            Field::Reader(owner)
                        },
                        phase: Phase::Idle,
                        budget: Budget {
                            acquires_left: self.bounds.acquires,
                            tries_left: self.bounds.tries,
                        },
                        leaves: 0,
                        resends: [None; MASTERS],
                    }
                })
                .collect(),
            restarts_left: self.bounds.restarts,
            have_held: 0,
            max_write: 0,
            max_token: 0,
            token_went_back: false,
            readers_together: false,
        };
        let mut starts = vec![empty.clone()];
        if self.bounds.counters_apart && self.bounds.writers[0] && self.bounds.acquires > 0 {
            let steps = [
                Action::Ask(0, 1, Answer::Heard),
                Action::Ask(0, 2, Answer::Heard),
                Action::Ask(0, 0, Answer::RequestLost),
                Action::Release(0),
            ];
            let mut start = steps
                .iter()
                .try_fold(empty, |s, &a| self.next_state(&s, a))
                .expect("a start the model reaches");
            // The start's attempt is not counted against the bound.
            start.clients[0].budget.tries_left = self.bounds.tries;
            starts.push(start);
        }
        starts
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, cl) in s.clients.iter().enumerate() {
            match cl.phase {
                Phase::Idle | Phase::Waiting => {
                    if cl.budget.may(cl.phase == Phase::Idle) {
                        actions.extend(Attempt::steps(None, |m, a| Action::Ask(c, m, a)));
                    }
                }
                Phase::Asking(attempt) => {
                    actions.extend(Attempt::steps(Some(&attempt), |m, a| Action::Ask(c, m, a)));
                }
                Phase::Held { .. } => {
                    actions.push(Action::Renew(c));
                    actions.push(Action::Release(c));
                }
            }
            for m in 0..MASTERS {
                if cl.leaves & (1 << m) != 0 {
                    actions.push(Action::Leave(c, m));
                }
                if cl.resends[m].is_some() {
                    actions.push(Action::Resend(c, m));
                }
            }
        }
        actions.push(Action::Tick);
        if s.restarts_left > 0 {
            for m in 0..MASTERS {
                actions.push(Action::Restart(m));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Ask(c, m, answer) => {
                let mut attempt = match s.clients[c].phase {
                    Phase::Asking(attempt) => attempt,
                    phase => {
                        let n = s.clients[c].budget.spend(phase == Phase::Idle, self.bounds.tries)?;
                        // A fresh request per attempt.
                        Attempt::new((c as Req) * 64 + Req::from(n), s.now)
                    }
                };
                let part = self.ask(&mut s, c, m, attempt.req, answer);
                let decided = attempt.answer(m, part)?;
                s.clients[c].phase = Phase::Asking(attempt);
                if decided {
                    self.decide(&mut s, c);
                }
            }
            Action::Leave(c, m) => {
                if s.clients[c].leaves & (1 << m) == 0 {
                    return None;
                }
                s.clients[c].leaves &= !(1 << m);
                let owner = (c as Owner) * 16;
                let _ = s.masters[m]
                    .server
                    .rw_leave_telling(owner, &[], false, self.server_defect());
            }
            Action::Resend(c, m) => {
                let req = s.clients[c].resends[m].take()?;
                self.resend_and_give_back(&mut s, c, m, req);
            }
            Action::Renew(c) => {
                let Phase::Held {
                    tokens,
                    take,
                    valid_until,
                } = s.clients[c].phase
                else {
                    return None;
                };
                let field = s.clients[c].field;
                let mut renewed = 0;
                for m in 0..MASTERS {
                    if s.masters[m].server.renew(field, LEASE) && Self::counts(&s, m) {
                        renewed += 1;
                    }
                }
                s.clients[c].phase = if renewed >= self.majority() && s.now < valid_until {
                    Phase::Held {
                        tokens,
                        take,
                        valid_until: valid_until.max(s.now + LEASE),
                    }
                } else {
                    Phase::Idle
                };
            }
            Action::Release(c) => {
                let Phase::Held { tokens, take, .. } = s.clients[c].phase else {
                    return None;
                };
                for (m, t) in tokens.iter().enumerate() {
                    if let Some(t) = *t {
                        self.release(&mut s, c, m, t, take);
                    }
                }
                s.clients[c].phase = Phase::Idle;
            }
            Action::Tick => {
                s.now += 1;
                Master::tick(&mut s.masters);
                shift(&mut s);
            }
            Action::Restart(m) => {
                s.restarts_left = s.restarts_left.checked_sub(1)?;
                s.masters[m].restart(s.now);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(
                "a writer never holds beside another holder with validity left",
                |_, s| {
                    let (writers, readers) = RwQuorumModel::valid_holders(s);
                    writers == 0 || writers + readers <= 1
                },
            ),
            Property::<Self>::always(
                "a write hold's token is above every earlier hold's, a read hold's at least every earlier write's",
                |_, s| !s.token_went_back,
            ),
            Property::<Self>::always("a release never frees another's hold", |_, s| {
                s.masters.iter().all(|m| !m.server.freed_another)
            }),
            Property::<Self>::always("no waiter's call moves a holder's lease", |_, s| {
                s.masters.iter().all(|m| !m.server.waiter_moved_lease)
            }),
            // Within the bounds the test command runs: two clients.
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                m.bounds.clients > 2 || u32::from(s.have_held) == (1 << m.bounds.clients) - 1
            }),
            Property::<Self>::sometimes("two readers hold together", |m, s| {
                m.bounds.writers[..m.bounds.clients].iter().filter(|w| !**w).count() < 2 || s.readers_together
            }),
        ]
    }
}

/// Times relative to now.
fn shift(s: &mut State) {
    let n = s.now;
    s.now = 0;
    for m in &mut s.masters {
        m.rebase(n);
    }
    for c in &mut s.clients {
        match &mut c.phase {
            Phase::Asking(attempt) => attempt.shift(n),
            Phase::Held { valid_until, .. } => *valid_until = (*valid_until - n).max(0),
            Phase::Idle | Phase::Waiting => {}
        }
    }
}
