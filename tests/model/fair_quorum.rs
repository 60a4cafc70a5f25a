//! The fair lock over a quorum of three masters. Each master holds the fair
//! lock's keys ([`super::fair::Server`], the same scripts as one master's)
//! for waiters that leave no grant ask: an unlock wakes the head of that
//! master's queue, which takes the lock with its next attempt. A client's
//! attempt asks every master, joining the queue of each that refuses it;
//! it holds on a majority of the masters that count (its validity dated
//! from the attempt's start, its token the highest of the grants, written
//! back to the masters that granted lower), and leaves the queues of the
//! masters that did not grant it in the background, where a leave may come
//! late or never. When the masters split (some granted, not a majority) it
//! gives back what it got, leaves every queue and tries again after a
//! pause; refused everywhere, it stays queued and tries again when woken
//! or when its refresh is due (at any step here). It renews and releases on
//! every master. A master restarts empty and stays out of the majority
//! for the rejoin delay. Each request to a master runs and is answered,
//! runs with its reply lost, or is lost.
//!
//! Simplified against the library, each a step the library takes later or
//! in the background done at once: what a request whose reply was lost
//! got is given back when its attempt is decided (the library re-sends it
//! in the background and gives back what it got), and a split's leave of
//! every queue is one step with the decision (the library awaits it before
//! its pause; one that fails is retried in the background, as the late
//! leaves of a granted wait are here). The wake-up messages are not
//! modelled: a queued client may try again at any step, so every message,
//! lost or not, is covered.

use stateright::{Model, Property};

use super::fair::{Acquire, AcquireReply, Server};
use super::quorum::{majority, raise_counter, tally, write_back, Answer, Attempt, Budget, Master, Part, MASTERS};
use super::server::{Owner, Req};
use super::LEASE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// A client the masters split over keeps its places in the queues.
    SplitKeepsPlaces,
    /// One grant is taken for a majority.
    MajorityOfOne,
    /// The quorum's token is not written back to the masters that granted
    /// lower (`raise_token.lua`).
    NoRaise,
    /// A defect of one master's scripts.
    Server(super::fair::Defect),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// An attempt: each master's part.
    Asking(Attempt),
    /// No master granted: queued where refused, trying again when woken
    /// or when its refresh is due.
    Queued,
    /// The masters split: what it got given back and every queue left, it
    /// tries again after a random pause.
    Paused,
    /// Held on a majority: each master's token (`None`: no part there).
    Held {
        tokens: [Option<u64>; MASTERS],
        valid_until: i32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    pub budget: Budget,
    /// Bit per master: a leave of its queue there on its way (sent in the
    /// background once held).
    pub leaves: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: i32,
    pub masters: Vec<Master<Server>>,
    pub clients: Vec<Client>,
    pub restarts_left: u8,
    pub have_held: u8,
    /// Ghosts: per client, the highest quorum token it was granted; whether
    /// a grant's token was not above every earlier one; whether the masters
    /// split between contenders.
    pub max_tokens: Vec<u64>,
    pub token_went_back: bool,
    pub split: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub clients: usize,
    pub acquires: u8,
    /// Attempts each client may make, in all.
    pub tries: u8,
    pub restarts: u8,
    pub depth: Option<usize>,
    /// Also start where the masters' counters differ: client 0 held on
    /// masters 1 and 2 (its request to master 0 lost) and released.
    pub counters_apart: bool,
}

#[derive(Clone, Debug)]
pub struct FairQuorumModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client's part of its attempt on a master (the first part starts the
    /// attempt, the last decides it).
    Ask(usize, usize, Answer),
    /// A leave the client sent in the background reaches a master.
    Leave(usize, usize),
    Renew(usize),
    Release(usize),
    Tick,
    Restart(usize),
}

/// The request id of a release or a give-back (one master's records are
/// never read for them: each is sent once).
const RELEASE: Req = 1000;

impl FairQuorumModel {
    pub fn new(bounds: Bounds) -> FairQuorumModel {
        FairQuorumModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> FairQuorumModel {
        FairQuorumModel {
            bounds,
            defect: Some(defect),
        }
    }

    fn server_defect(&self) -> Option<super::fair::Defect> {
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

    pub fn valid_holders(s: &State) -> usize {
        s.clients
            .iter()
            .filter(|c| matches!(c.phase, Phase::Held { valid_until, .. } if s.now < valid_until))
            .count()
    }

    /// Whether the first client to try again after a split, alone (every
    /// other client idle or paused, no leave on its way, no master
    /// holding), holds with that attempt: each split contender left every
    /// queue, so nobody is ahead of it anywhere.
    fn first_back_after_a_split_holds(&self, s: &State) -> bool {
        let quiet = s
            .clients
            .iter()
            .all(|c| matches!(c.phase, Phase::Idle | Phase::Paused) && c.leaves == 0)
            && s.masters.iter().all(|m| m.server.lock.is_none());
        if !quiet {
            return true;
        }
        s.clients.iter().enumerate().all(|(c, cl)| {
            if cl.phase != Phase::Paused || !cl.budget.may(false) {
                return true;
            }
            (0..MASTERS)
                .map(|m| Action::Ask(c, m, Answer::Heard))
                .try_fold(s.clone(), |t, a| self.next_state(&t, a))
                .is_some_and(|t| matches!(t.clients[c].phase, Phase::Held { .. }))
        })
    }

    /// The attempt's request on master `m`: runs (its reply heard or lost)
    /// or is lost.
    fn ask(&self, s: &mut State, c: usize, m: usize, req: Req, answer: Answer) -> Part {
        if answer == Answer::RequestLost {
            return Part::Unanswered;
        }
        let a = Acquire {
            owner: c as Owner,
            req,
            attempt: 0,
            wait: true,
            ask: false,
        };
        let reply = s.masters[m].server.acquire(a, self.server_defect());
        match (answer, reply) {
            (Answer::ReplyLost, _) => Part::Unanswered,
            (_, AcquireReply::Held { token, count }) => Part::Granted(token, count > 1),
            _ => Part::Refused,
        }
    }

    /// The client's attempt is decided (as in the quorum's model): held on
    /// a majority of counting masters, else every part given back, and a
    /// split's places left.
    fn decide(&self, s: &mut State, c: usize) {
        let Phase::Asking(Attempt { req, since, parts }) = s.clients[c].phase else {
            return;
        };
        let (mut tokens, granted, stale) = tally(&parts, |m| Self::counts(s, m));
        let token = (granted >= self.majority())
            .then(|| self.write_back(s, c, &mut tokens))
            .flatten()
            .filter(|&t| stale.is_none_or(|old| old < t));
        self.give_back_unanswered(s, c, req, &parts);
        if let Some(token) = token.filter(|_| since + LEASE > s.now) {
            if s.max_tokens.iter().any(|&t| token <= t) {
                s.token_went_back = true;
            }
            s.max_tokens[c] = s.max_tokens[c].max(token);
            s.clients[c].phase = Phase::Held {
                tokens,
                valid_until: since + LEASE,
            };
            s.have_held |= 1 << c;
            // The queues of the masters that did not grant it, left in the
            // background.
            for (m, t) in tokens.iter().enumerate() {
                if t.is_none() {
                    s.clients[c].leaves |= 1 << m;
                }
            }
            return;
        }
        for (m, t) in tokens.iter().enumerate() {
            if let Some(t) = *t {
                s.masters[m]
                    .server
                    .release(c as Owner, RELEASE, t, true, self.server_defect());
            }
        }
        if tokens.iter().all(Option::is_none) {
            s.clients[c].phase = Phase::Queued;
            return;
        }
        s.split = true;
        if self.defect != Some(Defect::SplitKeepsPlaces) {
            for m in &mut s.masters {
                m.server.leave(c as Owner, None, self.server_defect());
            }
        }
        s.clients[c].phase = Phase::Paused;
    }

    /// What a request whose reply was lost took is given back (its re-send
    /// finds the hold its own take made).
    fn give_back_unanswered(&self, s: &mut State, c: usize, req: Req, parts: &[Part; MASTERS]) {
        for (m, part) in parts.iter().enumerate() {
            if *part != Part::Unanswered {
                continue;
            }
            let server = &mut s.masters[m].server;
            if let Some(h) = server.lock.filter(|h| h.owner == c as Owner && h.take == Some(req)) {
                server.release(c as Owner, RELEASE, h.token, true, self.server_defect());
            }
        }
    }

    /// `quorum::write_back` on the fair lock's masters.
    fn write_back(&self, s: &mut State, c: usize, tokens: &mut [Option<u64>; MASTERS]) -> Option<u64> {
        let no_raise = self.defect == Some(Defect::NoRaise);
        write_back(tokens, self.majority(), no_raise, |m, held, token| {
            let server = &mut s.masters[m].server;
            if raise_counter(&mut server.counter, token) {
                if let Some(h) = server
                    .lock
                    .as_mut()
                    .filter(|h| h.owner == c as Owner && h.token == held)
                {
                    h.token = token;
                }
            }
        })
    }

    /// What every step ends with: the messages are not modelled (see the
    /// module's note).
    fn settle(mut s: State) -> State {
        for m in &mut s.masters {
            m.server.sent.clear();
            m.server.mail.iter_mut().for_each(|slot| *slot = None);
        }
        s
    }
}

impl Model for FairQuorumModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            masters: Master::all(|| Server::new(self.bounds.clients)),
            clients: (0..self.bounds.clients)
                .map(|_| Client {
                    phase: Phase::Idle,
                    budget: Budget {
                        acquires_left: self.bounds.acquires,
                        tries_left: self.bounds.tries,
                    },
                    leaves: 0,
                })
                .collect(),
            restarts_left: self.bounds.restarts,
            have_held: 0,
            max_tokens: vec![0; self.bounds.clients],
            token_went_back: false,
            split: false,
        };
        let mut starts = vec![empty.clone()];
        if self.bounds.counters_apart && self.bounds.acquires > 0 {
            let steps = [
                Action::Ask(0, 1, Answer::Heard),
                Action::Ask(0, 2, Answer::Heard),
                Action::Ask(0, 0, Answer::RequestLost),
                Action::Release(0),
            ];
            let start = steps
                .iter()
                .try_fold(empty, |s, &a| self.next_state(&s, a))
                .expect("a start the model reaches");
            starts.push(start);
        }
        starts
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, cl) in s.clients.iter().enumerate() {
            match cl.phase {
                Phase::Idle | Phase::Queued | Phase::Paused => {
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
                s.masters[m].server.leave(c as Owner, None, self.server_defect());
            }
            Action::Renew(c) => {
                let Phase::Held { tokens, valid_until } = s.clients[c].phase else {
                    return None;
                };
                let mut renewed = 0;
                for m in 0..MASTERS {
                    if s.masters[m].server.renew(c as Owner) && Self::counts(&s, m) {
                        renewed += 1;
                    }
                }
                s.clients[c].phase = if renewed >= self.majority() && s.now < valid_until {
                    Phase::Held {
                        tokens,
                        valid_until: valid_until.max(s.now + LEASE),
                    }
                } else {
                    Phase::Idle
                };
            }
            Action::Release(c) => {
                let Phase::Held { tokens, .. } = s.clients[c].phase else {
                    return None;
                };
                for (m, t) in tokens.iter().enumerate() {
                    if let Some(t) = *t {
                        s.masters[m]
                            .server
                            .release(c as Owner, RELEASE, t, true, self.server_defect());
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
        Some(Self::settle(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("never two holders with validity left", |_, s| {
                FairQuorumModel::valid_holders(s) <= 1
            }),
            Property::<Self>::always("quorum tokens only grow, across restarts", |_, s| !s.token_went_back),
            Property::<Self>::always("a release never frees another's hold", |_, s| {
                s.masters.iter().all(|m| !m.server.freed_another)
            }),
            Property::<Self>::always("no waiter's call moves a holder's lease", |_, s| {
                s.masters.iter().all(|m| !m.server.waiter_moved_lease)
            }),
            Property::<Self>::always("a free lock goes to the head of the queue", |_, s| {
                s.masters.iter().all(|m| !m.server.barged)
            }),
            Property::<Self>::always("after a split, the first to try again alone holds", |m, s| {
                m.first_back_after_a_split_holds(s)
            }),
            Property::<Self>::sometimes("the masters split between contenders", |_, s| s.split),
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.clients) - 1
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
            Phase::Idle | Phase::Queued | Phase::Paused => {}
        }
    }
}
