//! The quorum's model: the reentrant lock over three independent masters
//! (each [`super::server::Server`], the same scripts as one master's), and
//! clients that ask every master, count the grants of the masters that
//! count toward a majority, hold on a majority with their validity dated
//! from the first send, give back what they got when there is none, renew
//! on every master (a hold that no longer has a majority is lost) and
//! release everywhere. A master restarts empty (no persistence) and then
//! stays out of the majority for the rejoin delay, as `member.rs` keeps it
//! out (the client learns of the restart from its broken connection and
//! the master's uptime). Each request to a master runs and is answered,
//! runs with its reply lost, or is lost; late requests and re-sends are
//! the single master's model's. A force-unlock (`lockwarden unlock
//! --force` over the masters: one `force_unlock.lua` per master, any of
//! which may be lost) deletes a master's hold whoever holds it.

use stateright::{Model, Property};

use super::server::{AcquireReply, Owner, ReleaseCall, Req, Server};
use super::{KEEP, LEASE};

pub const MASTERS: usize = 3;

/// How long a restarted master stays out of the majority, in ticks: as
/// long as the longest lease, so every hold it lost has ended elsewhere
/// too (or been renewed on a majority that still has it).
pub const REJOIN: i32 = LEASE;

/// The majority of [`MASTERS`].
pub const MAJORITY: usize = MASTERS / 2 + 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// A restarted master counts at once.
    NoRejoinDelay,
    /// The validity is dated from the decision, not from the first send.
    ValidityFromDecision,
    /// A part whose answer was lost is counted as granted.
    CountsUnanswered,
    /// One grant is taken for a majority.
    MajorityOfOne,
    /// The quorum's token (the highest of its grants) is not written back
    /// to the masters that granted lower (`raise_token.lua`).
    NoRaise,
    /// A new hold keeps the token of a level it re-entered, left from the
    /// client's own lost hold.
    StaleTokenKept,
}

/// One master of a quorum: its keys (`S`: one master's model of a kind's
/// scripts), and the tick it counts toward a majority again after a
/// restart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Master<S = Server> {
    pub server: S,
    pub back_at: Option<i32>,
}

/// What the quorum models ask of one master's keys: its clock moving on,
/// its times made relative to a later now, and its data lost.
pub trait Keys {
    fn advance(&mut self, ticks: i32);
    fn rebase(&mut self, n: i32);
    fn flush(&mut self);
}

macro_rules! keys_of {
    ($($server:ty),*) => {$(
        impl Keys for $server {
            fn advance(&mut self, ticks: i32) {
                <$server>::advance(self, ticks);
            }
            fn rebase(&mut self, n: i32) {
                <$server>::rebase(self, n);
            }
            fn flush(&mut self) {
                <$server>::flush(self);
            }
        }
    )*};
}

keys_of!(Server, super::fair::Server, super::shared_hash::Server);

impl<S: Keys> Master<S> {
    /// The quorum's masters, each with `keys` fresh.
    pub fn all(keys: impl Fn() -> S) -> Vec<Master<S>> {
        (0..MASTERS)
            .map(|_| Master {
                server: keys(),
                back_at: None,
            })
            .collect()
    }

    /// Whether it counts toward a majority at `now`.
    pub fn counts(&self, now: i32) -> bool {
        self.back_at.is_none_or(|t| now >= t)
    }

    /// A restart without persistence at `now`: its data gone, out of the
    /// majority for the rejoin delay.
    pub fn restart(&mut self, now: i32) {
        self.server.flush();
        self.back_at = Some(now + REJOIN);
    }

    /// Every master's clock one tick on.
    pub fn tick(masters: &mut [Master<S>]) {
        for m in masters {
            m.server.advance(1);
        }
    }

    /// Times `n` ticks earlier (see each model's `shift`).
    pub fn rebase(&mut self, n: i32) {
        self.server.rebase(n);
        self.back_at = self.back_at.map(|t| t - n).filter(|&t| t > 0);
    }
}

/// A majority of the masters (`of_one`: one grant taken for a majority, a
/// defect).
pub fn majority(of_one: bool) -> usize {
    if of_one {
        1
    } else {
        MAJORITY
    }
}

/// One master's part of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Sent, not yet answered.
    Asked,
    /// Granted: the token, and whether it was a re-entry (a level of the
    /// owner's that was there before: `quorum::granted`'s stale level).
    Granted(u64, bool),
    Refused,
    /// No answer (the request or the reply was lost): it may hold.
    Unanswered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    Acquiring(Attempt),
    /// Held on a majority: each master's token (`None`: no part there).
    Held {
        tokens: [Option<u64>; MASTERS],
        valid_until: i32,
    },
}

/// How one master's part of an attempt goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Heard,
    ReplyLost,
    RequestLost,
}

/// A client's steps: each master's part of its attempt (the first starts
/// the attempt, the last decides it: held, or given back), its watchdog's
/// renewal, its release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Ask(usize, usize, Answer),
    Renew(usize),
    Release(usize),
    Tick,
    Restart(usize),
    /// A master's clock jumps one tick ahead of the others'.
    JumpAhead(usize),
    /// `force_unlock.lua` on a master: its hold deleted, whoever holds.
    Force(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    pub acquires_left: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: i32,
    pub masters: Vec<Master>,
    pub clients: Vec<Client>,
    pub restarts_left: u8,
    pub have_held: u8,
    /// Ghost: a client held across a master's restart.
    pub held_through_restart: bool,
    /// Ghosts: per client, the highest quorum token it was granted; and
    /// whether a grant's token was not above every earlier one.
    pub max_tokens: Vec<u64>,
    pub token_went_back: bool,
    pub jumps_left: u8,
    pub forces_left: u8,
    /// Ghost: per master, the clients (bit per client) whose part there a
    /// force-unlock deleted while they held or asked.
    pub forced: [u8; MASTERS],
    /// Ghost: per master, the clients (bit per client) whose part there
    /// a jump of its clock cut short, until their lease there is set
    /// again or they hold nothing.
    pub cut: [u8; MASTERS],
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub clients: usize,
    pub acquires: u8,
    pub restarts: u8,
    pub depth: Option<usize>,
    /// Also start where the masters' counters differ: client 0 held on
    /// masters 1 and 2 (its request to master 0 lost) and released.
    pub counters_apart: bool,
    /// Also start where client 0 was told its hold was lost (its renewal
    /// found it on master 1 alone), the part there left.
    pub stale_part: bool,
    /// Jumps of a master's clock, one tick ahead, in all.
    pub jumps: u8,
    /// Force-unlocks of one master's hold, in all.
    pub forces: u8,
}

#[derive(Clone, Debug)]
pub struct QuorumModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

impl QuorumModel {
    pub fn new(bounds: Bounds) -> QuorumModel {
        QuorumModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> QuorumModel {
        QuorumModel {
            bounds,
            defect: Some(defect),
        }
    }

    fn counts(&self, s: &State, m: usize) -> bool {
        self.defect == Some(Defect::NoRejoinDelay) || s.masters[m].counts(s.now)
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

    /// Whether a client holds with validity left while a part of its hold
    /// was cut short by a master's clock jumping ahead (the hazard the
    /// README's "Hazards" names).
    pub fn holds_cut_short(s: &State) -> bool {
        s.clients.iter().enumerate().any(|(c, cl)| {
            s.cut.iter().any(|bits| bits & (1 << c) != 0)
                && matches!(cl.phase, Phase::Held { valid_until, .. } if s.now < valid_until)
        })
    }

    /// Whether a client holds with validity left while a force-unlock
    /// deleted a part of its hold (which it does by design: the holder is
    /// not asked).
    pub fn holds_forced(s: &State) -> bool {
        s.clients.iter().enumerate().any(|(c, cl)| {
            s.forced.iter().any(|bits| bits & (1 << c) != 0)
                && matches!(cl.phase, Phase::Held { valid_until, .. } if s.now < valid_until)
        })
    }

    /// Forgets the cuts that no longer shorten anything: a part whose
    /// lease was set again in full (a re-entry, a renewal), and every
    /// part of a client that holds and asks for nothing; and the forced
    /// parts of a client that no longer holds or asks.
    fn heal(s: &mut State) {
        for bits in s.forced.iter_mut() {
            for (c, cl) in s.clients.iter().enumerate() {
                if cl.phase == Phase::Idle {
                    *bits &= !(1 << c);
                }
            }
        }
        for (m, bits) in s.cut.iter_mut().enumerate() {
            for (c, cl) in s.clients.iter().enumerate() {
                let full = matches!(s.masters[m].server.lock,
                    super::server::Key::Hold(h) if h.owner == c as Owner && h.expires >= s.now + LEASE);
                if full || cl.phase == Phase::Idle {
                    *bits &= !(1 << c);
                }
            }
        }
    }

    /// The client's attempt is decided: held on a majority of counting
    /// masters, else every part given back (a part without an answer by
    /// its re-send, which finds the hold its request made).
    fn decide(&self, s: &mut State, c: usize) {
        let Phase::Acquiring(Attempt { req, since, parts }) = s.clients[c].phase else {
            return;
        };
        let counted = parts.map(|p| match p {
            Part::Unanswered if self.defect == Some(Defect::CountsUnanswered) => Part::Granted(0, false),
            p => p,
        });
        let (mut tokens, granted, stale) = tally(&counted, |m| self.counts(s, m));
        let token = (granted >= self.majority())
            .then(|| self.write_back(s, c, &mut tokens))
            .flatten()
            .filter(|&t| self.defect == Some(Defect::StaleTokenKept) || stale.is_none_or(|old| old < t));
        let from = if self.defect == Some(Defect::ValidityFromDecision) {
            s.now
        } else {
            since
        };
        // Granted too late (no validity left), the attempt is undone as
        // one without a majority (`quorum::granted`).
        if let Some(token) = token.filter(|_| from + LEASE > s.now) {
            // While a part cut short by a clock's jump, or deleted by a
            // force-unlock, counts toward a hold, two holds can overlap,
            // and whichever is decided last may carry the lower token (the
            // fencing tokens then refuse its writes after the other's): not
            // counted as going back.
            let overlapping = s.cut.iter().chain(&s.forced).any(|&bits| bits != 0);
            if s.max_tokens.iter().any(|&t| token <= t) && !overlapping {
                s.token_went_back = true;
            }
            s.max_tokens[c] = s.max_tokens[c].max(token);
            s.clients[c].phase = Phase::Held {
                tokens,
                valid_until: from + LEASE,
            };
            s.have_held |= 1 << c;
            return;
        }
        for (m, part) in parts.iter().enumerate() {
            let server = &mut s.masters[m].server;
            match (*part, tokens[m]) {
                // Given back under the token written back there, if it was.
                (Part::Granted(..), Some(t)) => {
                    server.release(release_of(c, req, Some(t)), None);
                }
                (Part::Unanswered, _) => {
                    if let super::server::Key::Hold(h) = server.lock {
                        if h.owner == c as Owner && h.take == req {
                            server.release(release_of(c, req, Some(h.token)), None);
                        }
                    }
                }
                _ => {}
            }
        }
        s.clients[c].phase = Phase::Idle;
    }

    /// `quorum::write_back`: the hold's token is the highest of its grants,
    /// written back (`raise_token.lua`) to the masters that granted lower,
    /// their holds' `:token` with it; the token when a majority then has
    /// it.
    fn write_back(&self, s: &mut State, c: usize, tokens: &mut [Option<u64>; MASTERS]) -> Option<u64> {
        let no_raise = self.defect == Some(Defect::NoRaise);
        write_back(tokens, self.majority(), no_raise, |m, held, token| {
            let server = &mut s.masters[m].server;
            if raise_counter(&mut server.counter, token) {
                if let super::server::Key::Hold(h) = &mut server.lock {
                    if h.owner == c as Owner && h.token == held {
                        h.token = token;
                    }
                }
            }
        })
    }
}

/// A client's attempt on every master, as the quorum models run it: its
/// request (a fresh one per attempt), the tick it started (its validity
/// is dated from it) and each master's part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attempt {
    pub req: Req,
    pub since: i32,
    pub parts: [Part; MASTERS],
}

impl Attempt {
    pub fn new(req: Req, now: i32) -> Attempt {
        Attempt {
            req,
            since: now,
            parts: [Part::Asked; MASTERS],
        }
    }

    /// Every way each part still to be asked can go (every part, for an
    /// attempt not started: `None`).
    pub fn steps<A>(attempt: Option<&Attempt>, mut step: impl FnMut(usize, Answer) -> A) -> Vec<A> {
        let answers = [Answer::Heard, Answer::ReplyLost, Answer::RequestLost];
        (0..MASTERS)
            .filter(|&m| attempt.is_none_or(|a| a.parts[m] == Part::Asked))
            .flat_map(|m| answers.map(|a| (m, a)))
            .map(|(m, a)| step(m, a))
            .collect()
    }

    /// Master `m`'s part answered `part`: `None` when it was answered
    /// already, else whether the attempt is now decided.
    pub fn answer(&mut self, m: usize, part: Part) -> Option<bool> {
        if self.parts[m] != Part::Asked {
            return None;
        }
        self.parts[m] = part;
        Some(!self.parts.contains(&Part::Asked))
    }

    /// Times relative to a clock `n` ticks on (its start kept no further
    /// back than a lease: older, it can grant nothing).
    pub fn shift(&mut self, n: i32) {
        self.since = (self.since - n).max(-LEASE);
    }
}

/// What a client of the quorum models may still start: waits, and
/// attempts in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    pub acquires_left: u8,
    pub tries_left: u8,
}

impl Budget {
    /// Whether it may start an attempt (`new_wait`: one that begins a
    /// wait).
    pub fn may(&self, new_wait: bool) -> bool {
        self.tries_left > 0 && (!new_wait || self.acquires_left > 0)
    }

    /// Spends an attempt (and a wait with `new_wait`) of `tries`: the
    /// attempt's number from 1, `None` when spent.
    pub fn spend(&mut self, new_wait: bool, tries: u8) -> Option<u8> {
        if !self.may(new_wait) {
            return None;
        }
        if new_wait {
            self.acquires_left -= 1;
        }
        self.tries_left -= 1;
        Some(tries - self.tries_left)
    }
}

/// An attempt's granted parts: each master's token, how many of the
/// masters that granted count (`counts`), and the highest token of a level
/// it re-entered (left from a hold of the client's it lost: a new hold
/// whose token would be that one's is undone).
pub fn tally(parts: &[Part; MASTERS], counts: impl Fn(usize) -> bool) -> ([Option<u64>; MASTERS], usize, Option<u64>) {
    let mut tokens = [None; MASTERS];
    let mut granted = 0;
    let mut stale = None;
    for (m, part) in parts.iter().enumerate() {
        if let Part::Granted(t, reentered) = *part {
            tokens[m] = Some(t);
            if counts(m) {
                granted += 1;
            }
            if reentered {
                stale = stale.max(Some(t));
            }
        }
    }
    (tokens, granted, stale)
}

/// `quorum::write_back` for any kind: the hold's token is the highest of
/// its grants, written back (`raise`: `raise_token.lua` on master m, given
/// the token the hold got there and the one to write) to the masters that
/// granted lower (none with `no_raise`, a defect); the token when
/// `majority` of them then have it.
pub fn write_back(
    tokens: &mut [Option<u64>; MASTERS],
    majority: usize,
    no_raise: bool,
    mut raise: impl FnMut(usize, u64, u64),
) -> Option<u64> {
    let token = tokens.iter().flatten().copied().max()?;
    if !no_raise {
        for (m, t) in tokens.iter_mut().enumerate() {
            let Some(held) = *t else { continue };
            if held < token {
                raise(m, held, token);
                *t = Some(token);
            }
        }
    }
    let at_token = tokens.iter().filter(|t| **t == Some(token)).count();
    (at_token >= majority || no_raise).then_some(token)
}

/// `raise_token.lua`'s counter: set to `token` when below it (or lost);
/// whether it was (the hold's own token is then raised too, when it is
/// still the one the attempt got).
pub fn raise_counter(counter: &mut super::server::Counter, token: u64) -> bool {
    if counter.value.is_some_and(|v| v >= token) {
        return false;
    }
    counter.value = Some(token);
    counter.max_token = counter.max_token.max(token);
    true
}

fn release_of(c: usize, req: Req, token: Option<u64>) -> ReleaseCall {
    ReleaseCall {
        owner: c as Owner,
        req: req + 1000,
        token,
        relet: 0,
        keep: KEEP,
        first: true,
    }
}

impl Model for QuorumModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            masters: Master::all(Server::new),
            clients: (0..self.bounds.clients)
                .map(|_| Client {
                    phase: Phase::Idle,
                    acquires_left: self.bounds.acquires,
                })
                .collect(),
            restarts_left: self.bounds.restarts,
            have_held: 0,
            held_through_restart: false,
            max_tokens: vec![0; self.bounds.clients],
            token_went_back: false,
            jumps_left: self.bounds.jumps,
            cut: [0; MASTERS],
            forces_left: self.bounds.forces,
            forced: [0; MASTERS],
        };
        let reach = |steps: &[Action]| {
            steps
                .iter()
                .try_fold(empty.clone(), |s, &a| self.next_state(&s, a))
                .expect("a start the model reaches")
        };
        let mut starts = vec![empty.clone()];
        if self.bounds.acquires == 0 {
            return starts;
        }
        if self.bounds.counters_apart {
            starts.push(reach(&[
                Action::Ask(0, 1, Answer::Heard),
                Action::Ask(0, 2, Answer::Heard),
                Action::Ask(0, 0, Answer::RequestLost),
                Action::Release(0),
            ]));
        }
        if self.bounds.stale_part {
            starts.push(reach(&[
                Action::Ask(0, 0, Answer::Heard),
                Action::Ask(0, 2, Answer::RequestLost),
                Action::Tick,
                Action::Ask(0, 1, Answer::Heard),
                Action::Tick,
                Action::Renew(0),
            ]));
        }
        starts
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, cl) in s.clients.iter().enumerate() {
            match cl.phase {
                Phase::Idle if cl.acquires_left > 0 => {
                    actions.extend(Attempt::steps(None, |m, a| Action::Ask(c, m, a)));
                }
                Phase::Acquiring(attempt) => {
                    actions.extend(Attempt::steps(Some(&attempt), |m, a| Action::Ask(c, m, a)));
                }
                Phase::Held { .. } => {
                    actions.push(Action::Renew(c));
                    actions.push(Action::Release(c));
                }
                _ => {}
            }
        }
        actions.push(Action::Tick);
        if s.restarts_left > 0 {
            for m in 0..MASTERS {
                actions.push(Action::Restart(m));
            }
        }
        if s.jumps_left > 0 {
            for m in 0..MASTERS {
                if matches!(s.masters[m].server.lock, super::server::Key::Hold(_)) {
                    actions.push(Action::JumpAhead(m));
                }
            }
        }
        if s.forces_left > 0 {
            for m in 0..MASTERS {
                if matches!(s.masters[m].server.lock, super::server::Key::Hold(_)) {
                    actions.push(Action::Force(m));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Ask(c, m, answer) => {
                let cl = &mut s.clients[c];
                let mut attempt = match cl.phase {
                    Phase::Acquiring(attempt) => attempt,
                    _ => {
                        cl.acquires_left = cl.acquires_left.checked_sub(1)?;
                        let n = self.bounds.acquires - cl.acquires_left;
                        Attempt::new((c as Req) * 64 + Req::from(n), s.now)
                    }
                };
                let part = if answer == Answer::RequestLost {
                    Part::Unanswered
                } else {
                    let reply = s.masters[m]
                        .server
                        .acquire(c as Owner, attempt.req, LEASE, KEEP, true, None);
                    match (answer, reply) {
                        (Answer::ReplyLost, _) => Part::Unanswered,
                        (_, AcquireReply::Fresh(t)) => Part::Granted(t, false),
                        (_, AcquireReply::Held { token: t, count }) => Part::Granted(t, count > 1),
                        _ => Part::Refused,
                    }
                };
                let decided = attempt.answer(m, part)?;
                s.clients[c].phase = Phase::Acquiring(attempt);
                if decided {
                    self.decide(&mut s, c);
                }
            }
            Action::Renew(c) => {
                let Phase::Held { tokens, valid_until } = s.clients[c].phase else {
                    return None;
                };
                let mut renewed = 0;
                for m in 0..MASTERS {
                    if s.masters[m].server.renew(c as Owner, LEASE, None) && self.counts(&s, m) {
                        renewed += 1;
                    }
                }
                // A renewal confirmed after the validity ended does not
                // revive it (`watchdog::tick`).
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
                    if let Some(t) = t {
                        s.masters[m].server.release(release_of(c, 0, Some(*t)), None);
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
                s.restarts_left -= 1;
                s.masters[m].restart(s.now);
                if Self::valid_holders(&s) > 0 {
                    s.held_through_restart = true;
                }
            }
            Action::JumpAhead(m) => {
                s.jumps_left -= 1;
                if let super::server::Key::Hold(h) = s.masters[m].server.lock {
                    s.cut[m] |= 1 << h.owner;
                }
                s.masters[m].server.jump(1);
            }
            Action::Force(m) => {
                s.forces_left -= 1;
                if let super::server::Key::Hold(h) = s.masters[m].server.lock {
                    s.forced[m] |= 1 << h.owner;
                }
                s.masters[m].server.lock = super::server::Key::Absent;
            }
        }
        Self::heal(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("never two holders with validity left", |_, s| {
                QuorumModel::valid_holders(s) <= 1 || QuorumModel::holds_cut_short(s) || QuorumModel::holds_forced(s)
            }),
            Property::<Self>::always("a release never frees another's hold", |_, s| {
                s.masters.iter().all(|m| !m.server.freed_another)
            }),
            Property::<Self>::always("quorum tokens only grow, across restarts", |_, s| !s.token_went_back),
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.clients) - 1
            }),
            Property::<Self>::sometimes("a client holds across a master's restart", |m, s| {
                m.bounds.restarts == 0 || s.held_through_restart
            }),
            // The hazard is real in the model: one master's clock ahead
            // lets a second client in beside a hold on a bare majority.
            Property::<Self>::sometimes("a master's clock jumping ahead lets a second holder in", |m, s| {
                m.bounds.jumps == 0 || QuorumModel::valid_holders(s) > 1
            }),
            // Bounds with force-unlocks have no jumps: only the force
            // reaches this (a hold on a bare majority, one part forced).
            Property::<Self>::sometimes("a force-unlock lets a second holder in", |m, s| {
                m.bounds.forces == 0 || QuorumModel::valid_holders(s) > 1
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
            Phase::Acquiring(attempt) => attempt.shift(n),
            Phase::Held { valid_until, .. } => *valid_until = (*valid_until - n).max(0),
            Phase::Idle => {}
        }
    }
}
