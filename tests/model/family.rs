//! The model of the kinds whose holds carry their own leases in one hash:
//! the read-write lock and the semaphore ([`super::shared_hash`] is the
//! server), with clients of either kind on one name. Clients take (read or
//! write, or permits), wait when refused (a writer's attempt then leaves
//! its mark) and try again or stop waiting (a writer's leave call, or
//! nothing: a dropped wait), re-enter, release, and renew through their
//! watchdog; requests and replies are lost, re-sent and given up on as in
//! [`super::LockModel`]; the server loses its data or one key, another
//! program writes the name, and the semaphore's stored number is lowered
//! to none and raised back.
//!
//! With [`Bounds::wakes`], the read-write lock's waits listen as the
//! library's do (`wait::Shared` for readers on the lock's channel,
//! `rw::WriteWait` for writers on the writers' channel): each wait
//! subscribes before its first listening attempt, a message that comes
//! wakes it for its next attempt (one that comes while an attempt is on
//! its way too: the wait registered before sending it), and the channels
//! each release and leave tells ([`Sides`]) carry a message to every
//! client listening there, held up for any number of steps or lost. The
//! property this adds: no wake-up is lost (see
//! [`FamilyModel::someone_told`]).

use stateright::{Model, Property};

use super::net::{self, Line, Net};
use super::server::{Owner, Req};
use super::shared_hash::{
    AcquireReply, Defect, Field, Holding, Kind, Mode, Name, ReleaseReply, RwAcquire, RwRelease, SemAcquire, Server,
    Sides, Told,
};
use super::{KEEP, LEASE};

/// How long a waiting writer's mark lasts, in ticks: longer than a lease,
/// so a mark that moved a lease would show.
pub const MARK: i32 = 3;

/// A semaphore's number of permits, as every handle has it.
pub const PERMITS: u32 = 2;

/// What a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A task of the read-write lock, taking either side.
    Rw,
    /// Acquisitions of `take` of the semaphore's [`PERMITS`].
    Semaphore { take: u32 },
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub roles: &'static [Role],
    pub acquires: u8,
    pub calls: u8,
    pub faults: u8,
    pub foreign: bool,
    /// Changes of the semaphore's stored number (to none, and back).
    pub numbers: u8,
    /// Semaphore waits ask for direct grants and listen for them: one
    /// request id per wait, its attempts numbered, a release's grant or
    /// wake-up message delivered (or lost) as a step, a stopped wait's
    /// leave (sem_leave.lua) run later or never.
    pub grants: bool,
    /// Read-write waits listen on their side's channel and are woken by
    /// the messages releases and leaves publish there (see the module's
    /// documentation); with three tasks or more the model starts from two
    /// states its own steps reach (see [`FamilyModel::init_states`]).
    pub wakes: bool,
    /// A read-write task holding the write side also takes the read side
    /// (and gives either back first: a downgrade when the write goes
    /// first).
    pub downgrades: bool,
    /// Force-unlocks through a plain handle (`lockwarden unlock --force`).
    pub forces: u8,
    /// Read-write writers' waits ask for direct grants, as the library's
    /// do on one master (`rw::WriteWait`): one request id per wait (a
    /// fresh one after an attempt given up on), its attempts numbered,
    /// the release that frees the lock hands it to a waiting writer and
    /// says so on the writers' channel (a message delivered, late, or
    /// lost), the writer takes it from the message or finds it with its
    /// next attempt, and a wait that stops without the lock leaves naming
    /// every request its asks named (a late leave too, or none).
    pub writer_grants: bool,
    /// Jumps of the server's clock, one tick ahead or back, in all.
    pub jumps: u8,
    /// With grants: start (only) where client 1's wait (for more permits
    /// than client 0's hold leaves free) was just handed its permits by
    /// client 0's release, the grant's message on its way, so that the
    /// bound reaches further past a grant (the late grant message). With
    /// writer grants instead: where client 1's write wait was just handed
    /// the lock by client 0's read release.
    pub handed: bool,
    /// With grants and three semaphore clients: start (only) where client
    /// 2 holds both permits and clients 0 and 1 wait for one each, listed
    /// with their asks (a release then frees permits for two clients).
    pub crowded: bool,
    /// A semaphore attempt given up on is re-sent in the background as a
    /// try and what it got given back (its release naming the request),
    /// while the wait goes on (under a fresh request, with grants), as the
    /// library does; start (only) where client 0's first attempt took its
    /// permits and was given up on. Without, the wait ends. The number is
    /// how many of a client's attempts the background may hold at once (at
    /// most [`PENDING`]).
    pub resends: u8,
    pub depth: Option<usize>,
}

/// What the background does with a semaphore attempt whose outcome is
/// unknown (`quorum::Pending`): re-sends it as a try until answered, and
/// gives back what it got; either step may come late, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pending {
    Resend {
        permit: Owner,
        req: Req,
    },
    GiveBack {
        permit: Owner,
        req: Req,
    },
    /// A read-write side's attempt: re-sent as a try, then what it got
    /// given back, naming the write hold's token, or the read hold's
    /// request when the re-send made it (a level entered names none).
    ResendRw {
        field: Field,
        req: Req,
    },
    GiveBackRw {
        field: Field,
        token: u64,
        take: Option<Req>,
    },
}

/// The most attempts of one client in the background at once.
pub const PENDING: usize = 2;

/// A free place for one more attempt of client `cl` in the background,
/// among the first `resends`.
fn free_slot(cl: &ClientState, resends: u8) -> Option<usize> {
    cl.pending[..usize::from(resends)].iter().position(Option::is_none)
}

/// The request id of a client's give-back of a read-write attempt.
const GIVE_BACK: Req = 63;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Refused while waiting: its next attempt is of the same field.
    Waiting {
        field: Field,
    },
    /// `take`: the request that made the hold, which names a read hold to
    /// its release (`None`: not known).
    Held {
        field: Field,
        token: u64,
        take: Option<Req>,
        count: u32,
        valid_until: i32,
    },
    Lost {
        field: Field,
        token: u64,
        take: Option<Req>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// An acquire attempt; a semaphore wait's number for it (from 1), 0
    /// otherwise.
    Acquire(Field, u8),
    Release {
        field: Field,
        token: u64,
        take: Option<Req>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Acquire(AcquireReply),
    Release(ReleaseReply),
}

pub type Call = net::Call<Op, Reply>;

/// A writing task's read hold (with [`Bounds::downgrades`]), as its
/// client knows it: it becomes the client's hold when the write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reads {
    pub field: Field,
    pub token: u64,
    pub take: Option<Req>,
    pub count: u32,
    pub valid_until: i32,
}

/// A read-write wait listening (with [`Bounds::wakes`]): on the writers'
/// channel or the lock's, and whether a message woke it since it sent its
/// latest attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Listen {
    pub writers: bool,
    pub woken: bool,
}

/// A writer's wait that asks for direct grants (with
/// [`Bounds::writer_grants`]): its request id, whether an attempt carried
/// it already (the next one is a re-send), its latest attempt's number and
/// when that attempt was sent, and every request its asks named.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WriterWait {
    pub req: Req,
    pub sent_before: bool,
    pub attempt: u8,
    pub sent: i32,
    pub asked: Vec<Req>,
}

/// The bit of a writer's attempt number ([`Op::Acquire`]) that says the
/// attempt is the first to carry its wait's request.
const FIRST_OF_REQ: u8 = 0x80;

/// A semaphore wait that asks for direct grants: its request id, its
/// latest attempt's number and when that attempt was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wait {
    pub req: Req,
    pub attempt: u8,
    pub sent: i32,
    pub permit: Owner,
    /// A message woke it since it sent its latest attempt.
    pub woken: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientState {
    pub phase: Phase,
    pub line: Line<Op, Reply>,
    pub acquires_left: u8,
    pub calls_left: u8,
    pub levels_unknown: bool,
    pub lost_release_not_refused: bool,
    pub levels_disagree: bool,
    /// With grants: the wait in progress (its client listens meanwhile),
    /// the messages on their way to it, and the leave of a wait that
    /// stopped without the permits (its request and permit id).
    pub wait: Option<Wait>,
    pub inbox: Vec<Told>,
    pub leave: Option<(Req, Owner)>,
    /// With grants: a wake-up that found no wait (it came after the wait
    /// got its permits) is passed on (sem_leave.lua without a stopped
    /// wait), later or never.
    pub pass_on: bool,
    /// With wakes: the read-write wait in progress listens.
    pub listen: Option<Listen>,
    /// With downgrades: the read hold taken while writing.
    pub reads: Option<Reads>,
    /// With resends: attempts given up on, in the background
    /// (`Bounds::resends` at once).
    pub pending: [Option<Pending>; PENDING],
    /// With writer grants: the writer's wait in progress, and the leave of
    /// one that stopped without the lock (the requests it names), run
    /// later or never.
    pub writing: Option<WriterWait>,
    pub rw_leave: Option<Vec<Req>>,
    /// A read wait's attempt may have left the reader's mark (or a write
    /// release made it a pass): the reader's owner, until the wait holds
    /// or takes it back (`rw::SideWait`, armed before each attempt); and
    /// the leave of one that stopped without the lock, run later or never.
    pub reading: Option<Owner>,
    pub read_leave: Option<Owner>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<ClientState>,
    pub faults_left: u8,
    pub numbers_left: u8,
    pub have_held: u8,
    pub data_lost: bool,
    /// A waiter took a release's grant message for its permits.
    pub handed: bool,
    /// A wait was woken by a message (with wakes or grants); a wake-up
    /// may have gone unheard (a message lost, a writer's wait gone
    /// without its leave, a hold or a mark or the hash lapsing while
    /// waiters listened): the waits then wake at their pause's bound.
    pub woke: bool,
    pub unwoken: bool,
    /// A task kept its read side after giving back its write side.
    pub downgraded: bool,
    /// A waiting writer took a release's grant from its message.
    pub writer_handed: bool,
    /// With resends: a background give-back freed what its re-send took.
    pub gave_back: bool,
    pub forces_left: u8,
    /// A force-unlock freed holds their clients still count on: exclusion
    /// is no longer promised (the holders learn it at their next renewal).
    pub forced: bool,
    pub jumps_left: u8,
    /// Ghosts, as the reentrant model's: the clients whose holds a jump
    /// ahead may have cut short on the server (every client that believed
    /// it held one, waited, or had a call on its way), until a renewal sets them in full again or they hold
    /// nothing; the ticks the clock was set back; whether a jump ahead cut
    /// replay records short.
    pub cut: u8,
    pub set_back: i32,
    pub records_cut: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start(usize, Op),
    Net(usize, Net),
    Renew(usize),
    RenewUnheard(usize),
    /// A waiting writer stops waiting and says so (rw_leave.lua).
    Leave(usize),
    /// A waiter stops waiting without a word (its wait dropped, the leave
    /// call lost).
    Abandon(usize),
    Tick,
    Flush,
    EvictLock,
    EvictCounter,
    WriteForeign,
    /// The semaphore's stored number set to 0, or to [`PERMITS`].
    SetNumber(u32),
    /// The first message on its way to a client arrives, or is lost.
    Deliver(usize),
    LoseMessage(usize),
    /// A stopped wait's leave reaches the server, or is lost.
    RunLeave(usize),
    LoseLeave(usize),
    /// force_unlock.lua through a plain lock handle.
    ForceUnlock,
    /// force_unlock.lua through a read-write side's handle (read: the read
    /// side's), on a read-write lock.
    ForceSide(bool),
    /// The background's next step for client `c`'s given-up attempt (its
    /// re-send, or its give-back), or its loss.
    PendingRuns(usize, usize),
    PendingLost(usize, usize),
    /// The server's clock jumps one tick ahead, or is set one tick back.
    JumpAhead,
    JumpBack,
}

#[derive(Clone, Debug)]
pub struct FamilyModel {
    pub bounds: Bounds,
    pub defect: Option<Defect>,
}

/// The owner id of client `c`'s read-write task, or of its `n`-th
/// acquisition's permit id.
fn owner_of(c: usize, n: u8) -> Owner {
    (c as Owner) * 16 + n
}

impl FamilyModel {
    /// The state nothing happened in yet.
    fn empty(&self) -> State {
        State {
            server: Server::new(),
            clients: self
                .bounds
                .roles
                .iter()
                .map(|_| ClientState {
                    phase: Phase::Idle,
                    line: Line::default(),
                    acquires_left: self.bounds.acquires,
                    calls_left: self.bounds.calls,
                    levels_unknown: false,
                    lost_release_not_refused: false,
                    levels_disagree: false,
                    wait: None,
                    inbox: Vec::new(),
                    leave: None,
                    pass_on: false,
                    listen: None,
                    reads: None,
                    pending: [None; PENDING],
                    writing: None,
                    rw_leave: None,
                    reading: None,
                    read_leave: None,
                })
                .collect(),
            faults_left: self.bounds.faults,
            numbers_left: self.bounds.numbers,
            have_held: 0,
            data_lost: false,
            handed: false,
            woke: false,
            unwoken: false,
            downgraded: false,
            writer_handed: false,
            gave_back: false,
            forces_left: self.bounds.forces,
            forced: false,
            jumps_left: self.bounds.jumps,
            cut: 0,
            set_back: 0,
            records_cut: false,
        }
    }

    pub fn new(bounds: Bounds) -> FamilyModel {
        FamilyModel { bounds, defect: None }
    }

    pub fn with_defect(bounds: Bounds, defect: Defect) -> FamilyModel {
        FamilyModel {
            bounds,
            defect: Some(defect),
        }
    }

    /// The holds clients believe they have with validity left (a client
    /// releasing has left its critical section): (client, field, count).
    pub fn valid_holds(s: &State) -> Vec<(usize, Field, u32)> {
        let now = s.server.now;
        let mut holds = Vec::new();
        for (i, c) in s.clients.iter().enumerate() {
            let releasing = |f: Field| {
                c.line
                    .calls(|op| matches!(op, Op::Release { field, .. } if *field == f))
            };
            if let Phase::Held {
                field,
                count,
                valid_until,
                ..
            } = c.phase
            {
                if now < valid_until && !releasing(field) {
                    holds.push((i, field, count));
                }
            }
            if let Some(r) = c.reads {
                if now < r.valid_until && !releasing(r.field) {
                    holds.push((i, r.field, r.count));
                }
            }
        }
        holds
    }

    /// Whether the valid holds may stand together: many readers or one
    /// writer (of one client: the writer's own reads are readers like any
    /// other), permits within the number, and never both kinds.
    pub fn holders_agree(&self, s: &State) -> bool {
        let holds = Self::valid_holds(s);
        let writers: Vec<usize> = holds
            .iter()
            .filter(|h| matches!(h.1, Field::Writer(_)))
            .map(|h| h.0)
            .collect();
        let rw = holds.iter().any(|h| !matches!(h.1, Field::Permit(_)));
        let permits: u32 = holds
            .iter()
            .filter(|h| matches!(h.1, Field::Permit(_)))
            .map(|h| self.take_of(h.0))
            .sum();
        let lone_writer = writers.is_empty() || holds.iter().all(|h| h.0 == writers[0]);
        lone_writer && permits <= PERMITS && (!rw || permits == 0)
    }

    fn take_of(&self, c: usize) -> u32 {
        match self.bounds.roles[c] {
            Role::Semaphore { take } => take,
            Role::Rw => 0,
        }
    }

    fn execute(&self, s: &mut State, c: usize, call: Call, first: bool) -> Reply {
        match call.op {
            Op::Acquire(Field::Permit(p), attempt) => {
                let take = self.take_of(c);
                let a = SemAcquire {
                    permit: p,
                    take,
                    total: PERMITS,
                    lease: LEASE,
                    mode: Mode::Listening,
                    req: call.req,
                    ask: self.bounds.grants.then_some((LEASE, u32::from(attempt))),
                    claim: Some(MARK),
                };
                let reply = s.server.sem_acquire(a, self.defect);
                Self::post(s);
                Reply::Acquire(reply)
            }
            Op::Acquire(field, n) => {
                // A writer's wait's attempt (with writer grants): its ask,
                // and a re-send unless it is the first to carry the
                // wait's request.
                let asks = self.bounds.writer_grants && n != 0;
                Reply::Acquire(s.server.rw_acquire(
                    RwAcquire {
                        field,
                        req: call.req,
                        lease: LEASE,
                        keep: KEEP,
                        first: first && (!asks || n & FIRST_OF_REQ != 0),
                        waits: true,
                        mark: MARK,
                        ask: asks.then_some((LEASE, u32::from(n & !FIRST_OF_REQ))),
                    },
                    self.defect,
                ))
            }
            Op::Release {
                field: Field::Permit(p),
                take,
                ..
            } => {
                // The request that took the permits, when the client knows
                // it (`Release::take`: a fresh take's, or the wait's request
                // for a grant claimed from its message).
                let reply = s.server.sem_release(p, take, PERMITS, self.defect);
                Self::post(s);
                Reply::Release(reply)
            }
            Op::Release { field, token, take } => {
                let (reply, sides) = s.server.rw_release_telling(
                    RwRelease {
                        field,
                        req: call.req,
                        token: Some(token),
                        take,
                        relet: 0,
                        keep: KEEP,
                        first,
                        grants: self.bounds.writer_grants,
                    },
                    self.defect,
                );
                Self::tell(s, sides);
                Reply::Release(reply)
            }
        }
    }

    /// A read-write call published on `sides`: a message on its way to
    /// every client listening there (one is enough: a second waiting
    /// behind it wakes nothing the first does not).
    fn tell(s: &mut State, sides: Sides) {
        for cl in &mut s.clients {
            let Some(l) = cl.listen else { continue };
            let told = if l.writers { sides.writers } else { sides.readers };
            if told && !cl.inbox.contains(&Told::Wake) {
                cl.inbox.push(Told::Wake);
            }
            // A grant goes to every writer listening (it names its wait).
            if let (Some(h), true) = (sides.handed, l.writers) {
                cl.inbox.push(Told::Handed(h));
            }
        }
    }

    fn hear(&self, s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        let Some((call, reply)) = cl.line.heard() else { return };
        if Self::hear_reads(cl, &call, reply) {
            return;
        }
        match (call.op, reply) {
            (Op::Acquire(field, _), Reply::Acquire(AcquireReply::Granted { token, count })) => match cl.phase {
                Phase::Held {
                    count: was,
                    token: t,
                    take,
                    valid_until,
                    ..
                } if count > 1 => {
                    if count != was + 1 && !cl.levels_unknown {
                        cl.levels_disagree = true;
                    }
                    cl.phase = Phase::Held {
                        field,
                        token: t,
                        take,
                        count,
                        valid_until,
                    };
                }
                _ => {
                    // A fresh hold (a re-entry whose hold was gone takes a
                    // new one: count 1), or a first acquisition that
                    // entered the same task's hold a take it gave up on
                    // made (that hold's identity is not this request, and
                    // the library then names none: `Grant::take`). The
                    // client counts its own guards, not the server's
                    // levels (`Holds::leave`): one here; a level it entered
                    // is the give-back's or the lease's to end.
                    if count > 1 {
                        cl.levels_unknown = true;
                    }
                    cl.phase = Phase::Held {
                        field,
                        token,
                        take: (count == 1).then_some(call.req),
                        count: 1,
                        valid_until: call.since + LEASE,
                    };
                    s.have_held |= 1 << c;
                }
            },
            (Op::Acquire(field, _), Reply::Acquire(AcquireReply::Refused { .. })) => {
                if matches!(cl.phase, Phase::Idle | Phase::Waiting { .. }) {
                    cl.phase = Phase::Waiting { field };
                }
            }
            (Op::Acquire(..), Reply::Acquire(_)) => {
                if matches!(cl.phase, Phase::Waiting { .. }) {
                    cl.phase = Phase::Idle;
                }
            }
            (Op::Release { .. }, Reply::Release(r)) => match cl.phase {
                Phase::Lost { .. } => {
                    // A take the client gave up on that reached the server
                    // after the loss made a hold of this task, which this
                    // release then frees and answers released: when the
                    // client entered that orphan hold by a later
                    // acquisition, it does not know the hold's identity,
                    // and a hold is any release's of its owner then. The
                    // late requests' cost the README states; never another
                    // task's hold.
                    if matches!(r, ReleaseReply::Left(_)) && !cl.levels_unknown {
                        cl.lost_release_not_refused = true;
                    }
                    cl.phase = Phase::Idle;
                    cl.levels_unknown = false;
                }
                Phase::Held {
                    field,
                    token,
                    take,
                    count,
                    valid_until,
                } => match r {
                    // Guards left: the client still holds.
                    ReleaseReply::Left(n) if count > 1 => {
                        if n + 1 != count && !cl.levels_unknown {
                            cl.levels_disagree = true;
                        }
                        cl.phase = Phase::Held {
                            field,
                            token,
                            take,
                            count: count - 1,
                            valid_until,
                        };
                    }
                    // Its last guard: levels the server still counts are
                    // not the client's (unless its count went wrong).
                    ReleaseReply::Left(n) => {
                        if n != 0 && !cl.levels_unknown {
                            cl.levels_disagree = true;
                        }
                        cl.phase = Phase::Idle;
                        cl.levels_unknown = false;
                    }
                    _ => {
                        cl.phase = Phase::Idle;
                        cl.levels_unknown = false;
                    }
                },
                _ => {}
            },
            _ => {}
        }
    }

    /// A writing task's call on its read side: its answer kept in
    /// [`ClientState::reads`]. False for any other call.
    fn hear_reads(cl: &mut ClientState, call: &Call, reply: Reply) -> bool {
        let writing = matches!(
            cl.phase,
            Phase::Held {
                field: Field::Writer(_),
                ..
            } | Phase::Lost {
                field: Field::Writer(_),
                ..
            }
        );
        match (call.op, reply) {
            (Op::Acquire(field @ Field::Reader(_), _), Reply::Acquire(r)) if writing => {
                if let AcquireReply::Granted { token, count } = r {
                    if count != 1 {
                        // It entered a read hold a take given up on made.
                        cl.levels_unknown = true;
                    }
                    cl.reads = Some(Reads {
                        field,
                        token,
                        take: (count == 1).then_some(call.req),
                        count,
                        valid_until: call.since + LEASE,
                    });
                }
                true
            }
            (Op::Release { field, .. }, Reply::Release(r)) if writing && field.is_reader() => {
                cl.reads = match (r, cl.reads) {
                    (ReleaseReply::Left(n), Some(x)) if n > 0 => Some(Reads { count: n, ..x }),
                    _ => None,
                };
                true
            }
            _ => false,
        }
    }

    /// What the last script told the clients' wake channels goes on its
    /// way to them (the server tells only the clients that listen).
    fn post(s: &mut State) {
        for (o, told) in std::mem::take(&mut s.server.waiting.told) {
            if let Some(cl) = s.clients.get_mut(usize::from(o)) {
                cl.inbox.push(told);
            }
        }
    }

    /// A semaphore wait's first attempt (`wait` none: the wait gets the
    /// request `fresh`) or a later one, for `permit`: the wait's request
    /// and the attempt's number; its client listens.
    fn attempt(s: &mut State, c: usize, fresh: Req, permit: Owner) -> (Req, u8) {
        let now = s.server.now;
        let w = s.clients[c].wait.get_or_insert(Wait {
            req: fresh,
            attempt: 0,
            sent: now,
            permit,
            woken: false,
        });
        w.attempt += 1;
        w.sent = now;
        w.woken = false;
        let (req, attempt) = (w.req, w.attempt);
        let listening = &mut s.server.waiting.subscribed;
        if !listening.contains(&(c as Owner)) {
            listening.push(c as Owner);
            listening.sort();
        }
        (req, attempt)
    }

    /// A wait that is over (its client holds, or stopped waiting): the
    /// client stops listening, the messages on their way find no wait, and
    /// a wait that stopped without the permits leaves (later, or never).
    fn settle(s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        if let (Phase::Idle, Some(r), None) = (cl.phase, cl.reads, cl.line.call) {
            // The write went first: the task holds its read side.
            cl.phase = Phase::Held {
                field: r.field,
                token: r.token,
                take: r.take,
                count: r.count,
                valid_until: r.valid_until,
            };
            cl.reads = None;
            s.downgraded = true;
        }
        let cl = &mut s.clients[c];
        // A read-write wait is over once the client holds, or stopped
        // without an attempt on its way.
        let acquiring = cl.line.calls(|op| matches!(op, Op::Acquire(..)));
        let over = match cl.phase {
            Phase::Waiting { .. } => false,
            Phase::Idle => !acquiring,
            Phase::Held { .. } | Phase::Lost { .. } => true,
        };
        if cl.listen.is_some() && over {
            cl.listen = None;
            cl.inbox.clear();
        }
        if let (true, Some(o)) = (over, cl.reading) {
            if cl.phase == Phase::Idle {
                // Stopped without the lock: its leave goes in the
                // background. (Holding, its take removed the mark.)
                cl.read_leave = Some(o);
            }
            cl.reading = None;
        }
        if let Some(w) = &cl.writing {
            if over {
                if cl.phase == Phase::Idle {
                    // Stopped without the lock (dropped, or failed): its
                    // leave goes in the background, naming every request
                    // its asks named.
                    let mut asked = cl.rw_leave.take().unwrap_or_default();
                    asked.extend(w.asked.iter().copied());
                    cl.rw_leave = Some(asked);
                }
                cl.writing = None;
            }
        }
        let Some(w) = cl.wait else { return };
        let acquiring = cl.line.calls(|op| matches!(op, Op::Acquire(..)));
        match cl.phase {
            Phase::Waiting { .. } => return,
            Phase::Idle if acquiring => return,
            Phase::Held { .. } => cl.pass_on |= !cl.inbox.is_empty(),
            _ => cl.leave = Some((w.req, w.permit)),
        }
        cl.wait = None;
        cl.inbox.clear();
        s.server.waiting.subscribed.retain(|&o| usize::from(o) != c);
    }

    /// The first message on its way to client `c` arrives: a grant that
    /// names its wait's latest attempt, with half its lease left as
    /// counted from that attempt's send, is its permits.
    fn deliver(&self, s: &mut State, c: usize) {
        let now = s.server.now;
        let cl = &mut s.clients[c];
        if cl.inbox.is_empty() {
            return;
        }
        if let Some(l) = cl.listen.as_mut() {
            let told = cl.inbox.remove(0);
            if let (Told::Handed(h), Some(w), Phase::Waiting { field }) = (told, &cl.writing, cl.phase) {
                // As `wait::claim_grant`: a grant to the wait's request
                // that names its latest attempt, with half its lease left
                // as counted from that attempt's send (the client claims
                // only with two thirds left: the model's claims include
                // every one it makes).
                let named = u32::from(w.attempt) == h.attempt || self.defect == Some(Defect::ClaimIgnoresAttempt);
                if w.req == h.req && named && cl.line.call.is_none() && now < w.sent + h.ms / 2 {
                    cl.phase = Phase::Held {
                        field,
                        token: h.token,
                        take: Some(h.req),
                        count: 1,
                        valid_until: w.sent + h.ms,
                    };
                    s.have_held |= 1 << c;
                    s.writer_handed = true;
                    return;
                }
            }
            l.woken = true;
            s.woke = true;
            return;
        }
        let told = cl.inbox.remove(0);
        // Any message wakes the wait for an attempt, but a grant it takes
        // (one that comes while an attempt is on its way is kept for it).
        if let Some(w) = cl.wait.as_mut() {
            w.woken = true;
        }
        let (Some(w), Phase::Waiting { field }) = (cl.wait, cl.phase) else {
            return;
        };
        let Told::Grant { ms, req, attempt } = told else {
            s.woke = true;
            return;
        };
        let named = u32::from(w.attempt) == attempt || self.defect == Some(Defect::ClaimIgnoresAttempt);
        if w.req == req && named && cl.line.call.is_none() && now < w.sent + ms / 2 {
            cl.phase = Phase::Held {
                field,
                token: 0,
                // As `wait::claim_grant`'s guard: the wait's request,
                // which the grant's hold names (its release names it).
                take: Some(req),
                count: 1,
                valid_until: w.sent + ms,
            };
            s.have_held |= 1 << c;
            s.handed = true;
        }
    }

    /// Client 0 holds a permit, client 1's wait for two is refused and
    /// listed with its ask, and client 0's release hands client 1 both
    /// permits: the grant stands on the server and its message is on its
    /// way to client 1.
    fn handed(&self, empty: &State) -> State {
        let permit = |c: usize| Field::Permit(owner_of(c, 0));
        let s = self.released_to(empty, permit(0), permit(1));
        assert!(
            matches!(s.clients[1].inbox.first(), Some(Told::Grant { .. })),
            "client 1 is handed its permits: {:?}",
            s.clients[1]
        );
        s
    }

    /// Client 0 reads, client 1's write wait is refused behind it (its
    /// mark and ask left), and client 0's release hands client 1 the lock:
    /// the grant stands on the server and its message is on its way.
    fn writer_handed(&self, empty: &State) -> State {
        let s = self.released_to(empty, Field::Reader(owner_of(0, 0)), Field::Writer(owner_of(1, 0)));
        assert!(
            matches!(s.clients[1].inbox.first(), Some(Told::Handed(_))),
            "client 1 is handed the lock: {:?}",
            s.clients[1]
        );
        s
    }

    /// Client 0 writes, client 1's read wait is refused behind it (its
    /// mark left), and client 0's release turns the mark into a pass.
    fn reader_passed(&self, empty: &State) -> State {
        let s = self.released_to(empty, Field::Writer(owner_of(0, 0)), Field::Reader(owner_of(1, 0)));
        let passed = match &s.server.name {
            Name::Hash(h) => h.readers_waiting.iter().any(|m| m.pass),
            _ => false,
        };
        assert!(passed || self.defect.is_some(), "client 1 has a pass: {:?}", s.server);
        s
    }

    /// Client 0 takes `held`, client 1's attempt at `waits` is refused
    /// behind it, and client 0 releases.
    fn released_to(&self, empty: &State, held: Field, waits: Field) -> State {
        let mut s = [
            Action::Start(0, Op::Acquire(held, 0)),
            Action::Net(0, Net::Run),
            Action::Net(0, Net::Hear),
            Action::Start(1, Op::Acquire(waits, 0)),
            Action::Net(1, Net::Run),
            Action::Net(1, Net::Hear),
        ]
        .iter()
        .try_fold(empty.clone(), |t, &a| self.next_state(&t, a))
        .expect("a start the model reaches");
        let Phase::Held { field, token, take, .. } = s.clients[0].phase else {
            panic!("client 0 holds: {:?}", s.clients[0].phase);
        };
        for a in [
            Action::Start(0, Op::Release { field, token, take }),
            Action::Net(0, Net::Run),
            Action::Net(0, Net::Hear),
        ] {
            s = self.next_state(&s, a).expect("a start the model reaches");
        }
        s
    }

    /// Client 2 holds both permits; clients 0 and 1, one permit each,
    /// were refused and wait, listed with their asks.
    fn crowded(&self, empty: &State) -> State {
        let mut steps = Vec::new();
        for c in [2, 0, 1] {
            steps.extend([
                Action::Start(c, Op::Acquire(Field::Permit(owner_of(c, 0)), 0)),
                Action::Net(c, Net::Run),
                Action::Net(c, Net::Hear),
            ]);
        }
        let s = steps
            .iter()
            .try_fold(empty.clone(), |t, &a| self.next_state(&t, a))
            .expect("a start the model reaches");
        assert!(matches!(s.clients[2].phase, Phase::Held { .. }), "{:?}", s.clients[2]);
        assert_eq!(s.server.waiting.list.len(), 2, "{:?}", s.server.waiting);
        s
    }

    fn renew(&self, s: &mut State, c: usize, heard: bool) {
        let now = s.server.now;
        let Phase::Held {
            field,
            token,
            take,
            count,
            valid_until,
        } = s.clients[c].phase
        else {
            return;
        };
        let ok = s.server.renew(field, LEASE);
        let mut whole = ok;
        // The watchdog renews every hold of the client in one call: a
        // writing task's read hold with its write hold.
        if let Some(r) = s.clients[c].reads {
            let read_ok = s.server.renew(r.field, LEASE);
            whole &= read_ok;
            if read_ok && heard && now < r.valid_until {
                s.clients[c].reads = Some(Reads {
                    valid_until: r.valid_until.max(now + LEASE),
                    ..r
                });
            }
        }
        if heard {
            // Confirmed after the validity ended: the validity stays ended
            // (`watchdog::tick` marks such a hold lost; its release may
            // still find it).
            s.clients[c].phase = if ok && now >= valid_until {
                s.clients[c].phase
            } else if ok {
                Phase::Held {
                    field,
                    token,
                    take,
                    count,
                    valid_until: valid_until.max(now + LEASE),
                }
            } else {
                Phase::Lost { field, token, take }
            };
        }
        // Each hold it believes in now outlasts the validity it was told.
        if whole {
            s.cut &= !(1 << c);
        }
    }

    /// Whether a client holds with validity left while a jump of the
    /// server's clock ahead may have cut its holds short there.
    fn holds_cut_short(s: &State) -> bool {
        Self::valid_holds(s).iter().any(|h| s.cut & (1 << h.0) != 0)
    }

    /// What every step ends with: waits that are over settled, cuts that
    /// shorten nothing forgotten.
    fn finish(&self, mut s: State) -> State {
        for c in 0..s.clients.len() {
            Self::settle(&mut s, c);
            let cl = &s.clients[c];
            // Nothing held or waited for, and no reply on its way that
            // could say otherwise.
            let idle = matches!(cl.phase, Phase::Idle | Phase::Lost { .. });
            if idle && cl.reads.is_none() && cl.line.call.is_none() {
                s.cut &= !(1 << c);
            }
        }
        s
    }

    /// With resends, client `c`'s semaphore attempt `req` for permit id
    /// `permit` was given up on: it goes to the background, and the wait
    /// goes on (with grants, under a fresh request, while the client has
    /// calls left). Returns whether the wait goes on.
    fn resend(&self, s: &mut State, c: usize, permit: Owner, req: Req) -> bool {
        let calls = self.bounds.calls;
        let cl = &mut s.clients[c];
        let Some(i) = free_slot(cl, self.bounds.resends) else {
            return false;
        };
        if !matches!(cl.phase, Phase::Idle | Phase::Waiting { .. }) {
            return false;
        }
        cl.pending[i] = Some(Pending::Resend { permit, req });
        if let Some(w) = cl.wait.as_mut() {
            if cl.calls_left == 0 {
                return false;
            }
            w.req = (c as Req) * 64 + Req::from(calls - cl.calls_left);
            cl.calls_left -= 1;
            // A failed attempt is retried after a pause of its own
            // (`wait::Retries`), not when a message comes.
            w.woken = true;
        }
        cl.phase = Phase::Waiting {
            field: Field::Permit(permit),
        };
        true
    }

    /// With resends, client `c`'s read-write attempt `req` for `field`
    /// was given up on: it goes to the background, and the wait goes on
    /// (its next attempt a new request, as every read-write attempt is).
    fn resend_rw(&self, s: &mut State, c: usize, field: Field, req: Req) -> bool {
        let cl = &mut s.clients[c];
        let Some(i) = free_slot(cl, self.bounds.resends) else {
            return false;
        };
        if !matches!(cl.phase, Phase::Idle | Phase::Waiting { .. }) {
            return false;
        }
        cl.pending[i] = Some(Pending::ResendRw { field, req });
        if let Some(w) = cl.writing.as_mut() {
            // The wait goes on under a fresh request (`WriteWait`): the
            // given-up one's ask, or a grant to it, may stand.
            if cl.calls_left == 0 {
                return false;
            }
            w.req = (c as Req) * 64 + Req::from(self.bounds.calls - cl.calls_left);
            w.sent_before = false;
            cl.calls_left -= 1;
        }
        cl.phase = Phase::Waiting { field };
        // A failed attempt is retried after a pause of its own
        // (`wait::Retries`), not when a message comes.
        if let Some(l) = cl.listen.as_mut() {
            l.woken = true;
        }
        true
    }

    /// The levels the server counts for `field` now.
    fn levels(s: &State, field: Field) -> u32 {
        match &s.server.name {
            Name::Hash(h) => h.holds.iter().find(|x| x.field == field).map_or(0, |x| x.count),
            _ => 0,
        }
    }

    /// The background's step for client `c`'s given-up attempt: its
    /// re-send (a try), then the give-back of what it got, naming the
    /// request.
    fn background(&self, s: &mut State, c: usize, i: usize) {
        if let Some(Pending::ResendRw { field, .. } | Pending::GiveBackRw { field, .. }) = s.clients[c].pending[i] {
            let was = Self::levels(s, field);
            match s.clients[c].pending[i].take() {
                Some(Pending::ResendRw { field, req }) => {
                    let a = RwAcquire {
                        field,
                        req,
                        lease: LEASE,
                        keep: KEEP,
                        first: false,
                        waits: false,
                        mark: MARK,
                        ask: None,
                    };
                    if let AcquireReply::Granted { token, count } = s.server.rw_acquire(a, self.defect) {
                        s.clients[c].pending[i] = Some(Pending::GiveBackRw {
                            field,
                            token,
                            take: (count == 1).then_some(req),
                        });
                    }
                }
                Some(Pending::GiveBackRw { field, token, take }) => {
                    let reader = matches!(field, Field::Reader(_));
                    let r = RwRelease {
                        field,
                        req: (c as Req) * 64 + GIVE_BACK,
                        token: (!reader).then_some(token),
                        take: if reader { take } else { None },
                        relet: 0,
                        keep: KEEP,
                        first: true,
                        grants: self.bounds.writer_grants,
                    };
                    if let (ReleaseReply::Left(_), sides) = s.server.rw_release_telling(r, self.defect) {
                        s.gave_back = true;
                        Self::tell(s, sides);
                    }
                }
                _ => {}
            }
            if Self::levels(s, field) != was {
                // Behind the client's back: a hold of its own it counts.
                s.clients[c].levels_unknown = true;
            }
            Self::post(s);
            return;
        }
        match s.clients[c].pending[i].take() {
            Some(Pending::Resend { permit, req }) => {
                let a = SemAcquire {
                    permit,
                    take: self.take_of(c),
                    total: PERMITS,
                    lease: LEASE,
                    mode: Mode::Try,
                    req,
                    ask: None,
                    claim: None,
                };
                if let AcquireReply::Granted { .. } = s.server.sem_acquire(a, self.defect) {
                    s.clients[c].pending[i] = Some(Pending::GiveBack { permit, req });
                }
            }
            Some(Pending::GiveBack { permit, req }) => {
                let named = (self.defect != Some(Defect::GiveBackById)).then_some(req);
                if let ReleaseReply::Left(_) = s.server.sem_release(permit, named, PERMITS, self.defect) {
                    s.gave_back = true;
                }
            }
            _ => {}
        }
        Self::post(s);
    }

    /// Client 0 took `field` (its permits, or a side) with its first
    /// attempt, its reply lost and given up on: the wait goes on, the
    /// attempt re-sent behind it.
    fn given_up(&self, empty: &State, field: Field) -> State {
        let op = Op::Acquire(field, 0);
        [
            Action::Start(0, op),
            Action::Net(0, Net::Run),
            Action::Net(0, Net::Lose),
            Action::Tick,
            Action::Net(0, Net::GiveUp),
        ]
        .iter()
        .try_fold(empty.clone(), |t, &a| self.next_state(&t, a))
        .expect("a start the model reaches")
    }
}

impl Model for FamilyModel {
    type State = State;
    type Action = Action;

    /// Nothing held; with wakes and three tasks or more, instead, two
    /// starts the model reaches by its own steps from there (nine each),
    /// given so that the bound reaches further past them: client 0 reading
    /// with client 1's write wait and client 2's read wait behind it (the
    /// writer's mark holds the reader back), both refused and listening;
    /// and client 0 writing with two read waits behind it.
    fn init_states(&self) -> Vec<State> {
        let empty = self.empty();
        if self.bounds.resends > 0 {
            let o = owner_of(0, 0);
            return match self.bounds.roles[0] {
                Role::Rw => vec![
                    self.given_up(&empty, Field::Writer(o)),
                    self.given_up(&empty, Field::Reader(o)),
                ],
                Role::Semaphore { .. } => vec![self.given_up(&empty, Field::Permit(o))],
            };
        }
        if self.bounds.grants && self.bounds.handed {
            return vec![self.handed(&empty)];
        }
        if self.bounds.writer_grants && self.bounds.handed {
            return vec![self.writer_handed(&empty), self.reader_passed(&empty)];
        }
        if self.bounds.grants && self.bounds.crowded {
            return vec![self.crowded(&empty)];
        }
        if !self.bounds.wakes || self.bounds.roles.len() < 3 {
            return vec![empty];
        }
        let start = |sides: [bool; 3]| {
            let mut actions = Vec::new();
            for (c, writes) in sides.into_iter().enumerate() {
                let o = owner_of(c, 0);
                let field = if writes { Field::Writer(o) } else { Field::Reader(o) };
                actions.extend([
                    Action::Start(c, Op::Acquire(field, 0)),
                    Action::Net(c, Net::Run),
                    Action::Net(c, Net::Hear),
                ]);
            }
            actions
                .iter()
                .try_fold(empty.clone(), |t, &a| self.next_state(&t, a))
                .expect("a start the model reaches")
        };
        let marked = start([false, true, false]);
        let written = start([true, false, false]);
        vec![marked, written]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let now = s.server.now;
        for (c, cl) in s.clients.iter().enumerate() {
            if cl.calls_left > 0 && cl.line.call.is_none() {
                match cl.phase {
                    Phase::Idle if cl.acquires_left > 0 => {
                        // Permit ids are per acquisition.
                        let n = self.bounds.acquires - cl.acquires_left;
                        match self.bounds.roles[c] {
                            Role::Rw => {
                                actions.push(Action::Start(c, Op::Acquire(Field::Reader(owner_of(c, 0)), 0)));
                                actions.push(Action::Start(c, Op::Acquire(Field::Writer(owner_of(c, 0)), 0)));
                            }
                            Role::Semaphore { .. } => {
                                actions.push(Action::Start(c, Op::Acquire(Field::Permit(owner_of(c, n)), 0)))
                            }
                        }
                    }
                    Phase::Waiting { field } => actions.push(Action::Start(c, Op::Acquire(field, 0))),
                    Phase::Held {
                        field,
                        token,
                        take,
                        count,
                        ..
                    } => {
                        if count < 2 && !matches!(field, Field::Permit(_)) {
                            actions.push(Action::Start(c, Op::Acquire(field, 0)));
                        }
                        if let (Field::Writer(o), true) = (field, self.bounds.downgrades) {
                            actions.push(Action::Start(
                                c,
                                match cl.reads {
                                    None => Op::Acquire(Field::Reader(o), 0),
                                    Some(r) => Op::Release {
                                        field: r.field,
                                        token: r.token,
                                        take: r.take,
                                    },
                                },
                            ));
                        }
                        actions.push(Action::Start(c, Op::Release { field, token, take }));
                    }
                    Phase::Lost { field, token, take } => {
                        actions.push(Action::Start(c, Op::Release { field, token, take }))
                    }
                    _ => {}
                }
            }
            if cl.line.call.is_none() {
                if let Phase::Waiting { .. } = cl.phase {
                    actions.push(Action::Leave(c));
                    actions.push(Action::Abandon(c));
                }
            }
            let releasing = cl.line.calls(|op| matches!(op, Op::Release { .. }));
            if matches!(cl.phase, Phase::Held { .. }) && !releasing {
                actions.push(Action::Renew(c));
                actions.push(Action::RenewUnheard(c));
            }
            if !cl.inbox.is_empty() {
                actions.push(Action::Deliver(c));
                actions.push(Action::LoseMessage(c));
            }
            if cl.leave.is_some() || cl.pass_on || cl.rw_leave.is_some() || cl.read_leave.is_some() {
                actions.push(Action::RunLeave(c));
                actions.push(Action::LoseLeave(c));
            }
            for (i, p) in cl.pending.iter().enumerate() {
                if p.is_some() {
                    actions.push(Action::PendingRuns(c, i));
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
            if matches!(s.server.name, Name::Hash(_)) {
                actions.push(Action::EvictLock);
            }
            if s.server.counter.value.is_some() {
                actions.push(Action::EvictCounter);
            }
        }
        if self.bounds.foreign && s.server.name == Name::Absent {
            actions.push(Action::WriteForeign);
        }
        if s.forces_left > 0 && matches!(s.server.name, Name::Hash(_)) {
            actions.push(Action::ForceUnlock);
            if matches!(&s.server.name, Name::Hash(h) if h.kind == Kind::Rw) {
                actions.push(Action::ForceSide(true));
                actions.push(Action::ForceSide(false));
            }
        }
        let dated = matches!(s.server.name, Name::Hash(_)) || !s.server.records.is_empty();
        if s.jumps_left > 0 && dated {
            actions.push(Action::JumpAhead);
            actions.push(Action::JumpBack);
        }
        if s.numbers_left > 0 {
            actions.push(Action::SetNumber(if s.server.number == Some(0) { PERMITS } else { 0 }));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = s.server.now;
        match action {
            Action::Start(c, op) => {
                let cl = &mut s.clients[c];
                let mut req = (c as Req) * 64 + Req::from(self.bounds.calls - cl.calls_left);
                if matches!(op, Op::Acquire(..)) && cl.phase == Phase::Idle {
                    cl.acquires_left -= 1;
                }
                if let (Op::Acquire(field, _), Phase::Idle | Phase::Waiting { .. }) = (op, cl.phase) {
                    if self.bounds.wakes && !matches!(field, Field::Permit(_)) {
                        // Subscribed before this attempt, registered anew.
                        let writer = matches!(field, Field::Writer(_));
                        cl.listen = Some(Listen {
                            writers: writer && self.defect != Some(Defect::WriterListensOnReaders),
                            woken: false,
                        });
                    }
                }
                if let (Op::Acquire(Field::Reader(o), _), Phase::Idle | Phase::Waiting { .. }) = (op, cl.phase) {
                    cl.reading = Some(o);
                }
                cl.calls_left -= 1;
                let mut op = op;
                if let (Op::Acquire(Field::Permit(p), _), true) = (op, self.bounds.grants) {
                    let (wait, n) = Self::attempt(&mut s, c, req, p);
                    req = wait;
                    op = Op::Acquire(Field::Permit(p), n);
                }
                let cl = &mut s.clients[c];
                let waiting = matches!(cl.phase, Phase::Idle | Phase::Waiting { .. });
                if let (Op::Acquire(field @ Field::Writer(_), _), true, true) = (op, self.bounds.writer_grants, waiting)
                {
                    let w = cl.writing.get_or_insert(WriterWait {
                        req,
                        sent_before: false,
                        attempt: 0,
                        sent: now,
                        asked: Vec::new(),
                    });
                    w.attempt += 1;
                    w.sent = now;
                    let first_of_req = !w.sent_before;
                    if first_of_req {
                        w.asked.push(w.req);
                    }
                    w.sent_before = true;
                    req = w.req;
                    op = Op::Acquire(field, w.attempt | if first_of_req { FIRST_OF_REQ } else { 0 });
                }
                s.clients[c].line.call = Some(Call::new(op, req, now));
            }
            Action::Net(c, Net::Run) => {
                let (call, first) = s.clients[c].line.sent()?;
                let reply = self.execute(&mut s, c, call, first);
                s.clients[c].line.reply(reply);
            }
            Action::Net(c, Net::RunLate) => {
                if let Some((call, first)) = s.clients[c].line.take_late() {
                    let was = s.server.live();
                    self.execute(&mut s, c, call, first);
                    if s.server.live() != was {
                        s.clients[c].levels_unknown = true;
                    }
                }
            }
            Action::Net(c, Net::Hear) => self.hear(&mut s, c),
            Action::Net(c, Net::GiveUp) => {
                let cl = &mut s.clients[c];
                let call = cl.line.give_up()?;
                if let (Op::Acquire(Field::Writer(_), _), Some(_)) = (call.op, cl.listen) {
                    // The wait ends; its mark may stand (or come with the
                    // request, late) and its leave be lost.
                    s.unwoken = true;
                }
                if let (Op::Acquire(Field::Permit(p), _), true) = (call.op, self.bounds.resends > 0) {
                    if self.resend(&mut s, c, p, call.req) {
                        return Some(self.finish(s));
                    }
                }
                if let (Op::Acquire(field, _), true) = (call.op, self.bounds.resends > 0) {
                    if !matches!(field, Field::Permit(_)) && self.resend_rw(&mut s, c, field, call.req) {
                        return Some(self.finish(s));
                    }
                }
                let cl = &mut s.clients[c];
                match (call.op, cl.phase) {
                    (Op::Acquire(..), Phase::Idle | Phase::Waiting { .. }) => cl.phase = Phase::Idle,
                    (Op::Acquire(..), _) => cl.levels_unknown = true,
                    (Op::Release { .. }, _) => cl.phase = Phase::Idle,
                }
            }
            Action::Net(c, step) => s.clients[c].line.carry(step),
            Action::Renew(c) => self.renew(&mut s, c, true),
            Action::RenewUnheard(c) => self.renew(&mut s, c, false),
            Action::Leave(c) => {
                if let Phase::Waiting {
                    field: Field::Writer(o),
                } = s.clients[c].phase
                {
                    let asked = s.clients[c].writing.take().map(|w| w.asked).unwrap_or_default();
                    let grants = self.bounds.writer_grants;
                    if let Ok((_, sides)) = s.server.rw_leave_telling(o, &asked, grants, self.defect) {
                        Self::tell(&mut s, sides);
                    }
                }
                if let Phase::Waiting {
                    field: Field::Reader(o),
                } = s.clients[c].phase
                {
                    s.clients[c].reading = None;
                    let grants = self.bounds.writer_grants;
                    if let Ok((_, sides)) = s.server.rw_leave_reader(o, grants, self.defect) {
                        Self::tell(&mut s, sides);
                    }
                }
                s.clients[c].phase = Phase::Idle;
            }
            Action::Abandon(c) => {
                let cl = &mut s.clients[c];
                if let (Phase::Waiting { field }, Some(_)) = (cl.phase, cl.listen) {
                    // A writer's mark holds readers back to its deadline, a
                    // reader's pass writers.
                    s.unwoken |= matches!(field, Field::Writer(_) | Field::Reader(_));
                }
                cl.phase = Phase::Idle;
            }
            Action::JumpAhead => {
                s.jumps_left -= 1;
                for (c, cl) in s.clients.iter().enumerate() {
                    // What it holds, a take whose reply is on its way, or a
                    // wait a release may have handed permits to already.
                    let waits = matches!(cl.phase, Phase::Held { .. } | Phase::Waiting { .. });
                    if waits || cl.reads.is_some() || cl.line.call.is_some() {
                        s.cut |= 1 << c;
                    }
                }
                s.records_cut |= !s.server.records.is_empty();
                // What a tick would end, a tick ahead ends now.
                s.unwoken |= (self.bounds.wakes || self.bounds.grants) && lapses(&s.server);
                s.server.jump(1);
            }
            Action::JumpBack => {
                s.jumps_left -= 1;
                s.set_back += 1;
                s.server.jump(-1);
            }
            Action::Tick => {
                s.unwoken |= (self.bounds.wakes || self.bounds.grants) && lapses(&s.server);
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
                s.server.name = Name::Absent;
            }
            Action::EvictCounter => {
                s.faults_left -= 1;
                s.server.counter.value = None;
            }
            Action::WriteForeign => s.server.name = Name::Foreign,
            Action::ForceUnlock => {
                s.forces_left -= 1;
                let (deleted, sides) = s.server.force_unlock(self.defect);
                s.forced |= deleted;
                Self::tell(&mut s, sides);
                Self::post(&mut s);
            }
            Action::ForceSide(read) => {
                s.forces_left -= 1;
                if let Ok((deleted, sides)) = s.server.force_unlock_side(read, self.defect) {
                    s.forced |= deleted;
                    Self::tell(&mut s, sides);
                }
                Self::post(&mut s);
            }
            Action::SetNumber(n) => {
                s.numbers_left -= 1;
                s.server.set_number(n);
            }
            Action::Deliver(c) => self.deliver(&mut s, c),
            Action::LoseMessage(c) => {
                let cl = &mut s.clients[c];
                cl.inbox.remove(0);
                s.unwoken |= cl.listen.is_some() || cl.wait.is_some();
            }
            Action::RunLeave(c) if s.clients[c].read_leave.is_some() => {
                let o = s.clients[c].read_leave.take().unwrap_or_default();
                let grants = self.bounds.writer_grants;
                if let Ok((_, sides)) = s.server.rw_leave_reader(o, grants, self.defect) {
                    Self::tell(&mut s, sides);
                }
            }
            Action::RunLeave(c) if s.clients[c].rw_leave.is_some() => {
                let asked = s.clients[c].rw_leave.take().unwrap_or_default();
                if let Ok((_, sides)) = s.server.rw_leave_telling(owner_of(c, 0), &asked, true, self.defect) {
                    Self::tell(&mut s, sides);
                }
            }
            Action::RunLeave(c) => {
                let cl = &mut s.clients[c];
                let stopped = cl.leave.take();
                cl.pass_on &= stopped.is_some();
                s.server.sem_leave(c as Owner, stopped, PERMITS);
                Self::post(&mut s);
            }
            Action::LoseLeave(c) => {
                let cl = &mut s.clients[c];
                if cl.read_leave.take().is_none() && cl.rw_leave.take().is_none() && cl.leave.take().is_none() {
                    cl.pass_on = false;
                }
                s.unwoken = true;
            }
            Action::PendingRuns(c, i) => self.background(&mut s, c, i),
            Action::PendingLost(c, i) => s.clients[c].pending[i] = None,
        }
        Some(self.finish(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(
                "never a writer with another holder, nor permits over the number, nor two kinds",
                |m, s| s.data_lost || s.forced || m.holders_agree(s) || Self::holds_cut_short(s),
            ),
            Property::<Self>::always("the number's permits bound the server's holds", |_, s| {
                let live = s.server.live();
                let permits: u32 = live
                    .iter()
                    .filter(|h| matches!(h.field, Field::Permit(_)))
                    .map(|h| h.count)
                    .sum();
                permits <= PERMITS
            }),
            Property::<Self>::always("write tokens only grow", |_, s| !s.server.counter.went_back),
            Property::<Self>::always("a lost hold's release is NotHeld", |_, s| {
                s.clients.iter().all(|c| !c.lost_release_not_refused)
            }),
            Property::<Self>::always("a release never frees another's hold", |_, s| !s.server.freed_another),
            Property::<Self>::always("a claim's permits go to no other client", |_, s| {
                !s.server.claim_overtaken
            }),
            Property::<Self>::always("no script writes a key that is not a hold", |_, s| {
                !s.server.foreign_written
            }),
            Property::<Self>::always("no waiter's call moves a holder's lease", |_, s| {
                !s.server.waiter_moved_lease
            }),
            Property::<Self>::always("a replayed call is counted once", |_, s| {
                s.records_cut || s.clients.iter().all(|c| !c.levels_disagree)
            }),
            Property::<Self>::always("every hold ends by its lease, within the hash's TTL", |_, s| {
                match &s.server.name {
                    Name::Hash(h) => {
                        h.holds.iter().filter(|x| x.deadline > s.server.now).all(|x: &Holding| {
                            x.deadline <= s.server.now + LEASE + s.set_back && x.deadline <= h.expires
                        })
                    }
                    _ => true,
                }
            }),
            Property::<Self>::always(
                "a waiter nothing stands against gets the name by its next attempt",
                |m, s| m.unopposed_waiters_get_in(s),
            ),
            Property::<Self>::sometimes("a waiter is handed its permits by a release", |m, s| {
                !m.bounds.grants || s.handed
            }),
            Property::<Self>::sometimes("a waiting writer takes a release's grant from its message", |m, s| {
                // (Only a listening wait hears it: with wakes.)
                !(m.bounds.writer_grants && m.bounds.wakes) || s.writer_handed
            }),
            Property::<Self>::always("no wake-up is lost", |m, s| m.someone_told(s)),
            Property::<Self>::always(
                "no writer goes in before the readers that waited for the last writer",
                |_, s| s.data_lost || s.forced || !s.server.passed_over,
            ),
            Property::<Self>::sometimes("a reader goes in past a writer's mark on its pass", |m, s| {
                // (From the start where a reader has a pass.)
                !(m.bounds.writer_grants && m.bounds.handed) || s.server.passed
            }),
            Property::<Self>::sometimes("a writing task keeps its read side after its write side", |m, s| {
                !m.bounds.downgrades || s.downgraded
            }),
            Property::<Self>::sometimes("a background give-back frees what its re-send took", |m, s| {
                m.bounds.resends == 0 || s.gave_back
            }),
            Property::<Self>::sometimes("two attempts of one client in the background at once", |m, s| {
                m.bounds.resends < 2 || s.clients.iter().any(|c| c.pending.iter().all(Option::is_some))
            }),
            Property::<Self>::sometimes("a waiter is woken by a message", |m, s| {
                !(m.bounds.wakes || m.bounds.grants) || s.woke
            }),
            Property::<Self>::sometimes("every client holds in turn", |m, s| {
                u32::from(s.have_held) == (1 << m.bounds.roles.len()) - 1
            }),
            Property::<Self>::sometimes("a clock jumping ahead lets another holder in", |m, s| {
                m.bounds.jumps == 0 || (!s.data_lost && !s.forced && !m.holders_agree(s))
            }),
            Property::<Self>::sometimes("a clock set back keeps a hold past its lease", |m, s| {
                m.bounds.jumps == 0
                    || matches!(&s.server.name, Name::Hash(h)
                        if h.holds.iter().any(|x| x.deadline > s.server.now + LEASE))
            }),
        ]
    }
}

impl FamilyModel {
    /// No wake-up is lost: while a read-write wait sleeps (listening, not
    /// woken, no attempt on its way) and nothing on the server stands
    /// against it (a writer: no live hold; a reader: no live write hold
    /// and no live writer's mark), or while a semaphore wait sleeps with
    /// its take within the permits free (see [`Self::first_sleeps_fitting`]),
    /// someone was told: a message on its way, a woken wait, a call on its
    /// way (whose outcome is then checked in turn), a leave or a wake-up
    /// passed on; unless a wake-up may have gone unheard
    /// ([`State::unwoken`]) or the data was lost, when the waits wake at
    /// their pause's bound (the holders' lease, the mark's deadline, a
    /// semaphore waiter's patience). A semaphore client behind a first
    /// one whose take does not fit sleeps until its patience by design.
    fn someone_told(&self, s: &State) -> bool {
        if s.unwoken || s.data_lost {
            return true;
        }
        let sleeping = s.clients.iter().any(|cl| match (cl.phase, cl.listen) {
            (Phase::Waiting { field }, Some(l)) => {
                !l.woken && cl.line.call.is_none() && Self::open_to(&s.server, field)
            }
            _ => false,
        });
        let sleeping = sleeping || (self.bounds.grants && self.first_sleeps_fitting(s));
        !sleeping
            || s.clients.iter().any(|cl| {
                !cl.inbox.is_empty()
                    || cl.line.call.is_some()
                    || cl.listen.is_some_and(|l| l.woken)
                    || cl.wait.is_some_and(|w| w.woken)
                    || cl.leave.is_some()
                    || cl.pass_on
            })
    }

    /// Whether a semaphore wait sleeps (not woken, no attempt on its way)
    /// with its take within the permits free, its client either the first
    /// listed one that listens, or not listed at all (no release would
    /// tell it).
    fn first_sleeps_fitting(&self, s: &State) -> bool {
        let w = &s.server.waiting;
        let first = w.list.iter().find(|o| w.subscribed.contains(o));
        let used: u32 = match &s.server.name {
            Name::Absent => 0,
            Name::Hash(h) if h.kind == Kind::Semaphore => s.server.live().iter().map(|x| x.count).sum(),
            _ => return false,
        };
        s.clients.iter().enumerate().any(|(c, cl)| {
            let o = c as Owner;
            // A wait whose permit id another attempt of its acquisition
            // holds (given up on, its give-back to come) is refused as by
            // any holder: that hold's give-back tells the listed clients,
            // and its lapse, like any hold's, tells nobody.
            let own_held = cl.wait.is_some_and(|w| {
                let other = |h: &Holding| h.field == Field::Permit(w.permit) && h.req != Some(w.req);
                s.server.live().iter().any(other)
            });
            let sleeps = matches!(cl.phase, Phase::Waiting { .. })
                && cl.wait.is_some_and(|w| !w.woken)
                && cl.line.call.is_none()
                && !own_held;
            let due = first == Some(&o) || !w.list.contains(&o);
            sleeps && due && used + self.take_of(c) <= s.server.number.unwrap_or(PERMITS)
        })
    }

    /// Whether nothing on the server stands against `field`'s attempt.
    fn open_to(server: &Server, field: Field) -> bool {
        let now = server.now;
        match &server.name {
            Name::Absent => true,
            Name::Hash(h) if h.kind == Kind::Rw => {
                let live = |x: &&Holding| x.deadline > now;
                // A reader's live pass stands against writers; a writer's
                // live mark against readers without a pass.
                let pass = |o: Option<Owner>| {
                    h.readers_waiting
                        .iter()
                        .any(|m| m.pass && m.deadline > now && o.is_none_or(|o| m.owner == o))
                };
                match field {
                    Field::Writer(_) => !h.holds.iter().any(|x| live(&x)) && !pass(None),
                    Field::Reader(o) => {
                        !h.holds.iter().any(|x| live(&x) && !x.field.is_reader())
                            && (h.marks.iter().all(|&(_, d)| d <= now) || pass(Some(o)))
                    }
                    Field::Permit(_) => {
                        !h.holds.iter().any(|x| live(&x) && !x.field.is_reader())
                            && h.marks.iter().all(|&(_, d)| d <= now)
                    }
                }
            }
            _ => false,
        }
    }

    /// Whether every waiting client whose acquisition nothing on the
    /// server stands against (no live hold, no other waiting writer's mark, the
    /// name of its kind or absent, and for a semaphore a take within the
    /// number) gets it by its own next attempt, nobody else acting: a dead
    /// holder or a stale mark keeps no waiter out past its deadline.
    fn unopposed_waiters_get_in(&self, s: &State) -> bool {
        s.clients.iter().enumerate().all(|(c, cl)| {
            let Phase::Waiting { field } = cl.phase else {
                return true;
            };
            if cl.line.call.is_some() || cl.calls_left == 0 {
                return true;
            }
            let now = s.server.now;
            let free = match &s.server.name {
                Name::Absent => true,
                Name::Hash(h) => {
                    let kind = match field {
                        Field::Permit(_) => Kind::Semaphore,
                        _ => Kind::Rw,
                    };
                    // Nor a reader's live pass (against a writer); a
                    // reader's own pass lets it past the writers' marks.
                    let passes = h.readers_waiting.iter().any(|m| m.pass && m.deadline > now);
                    let pass_of = |f: Field| {
                        h.readers_waiting
                            .iter()
                            .any(|m| m.pass && m.deadline > now && f == Field::Reader(m.owner))
                    };
                    h.kind == kind
                        && h.holds.iter().all(|x| x.deadline <= now)
                        && (h.marks.iter().all(|&(o, d)| d <= now || field == Field::Writer(o)) || pass_of(field))
                        && !(passes && matches!(field, Field::Writer(_)))
                }
                _ => false,
            };
            let fits = match self.bounds.roles[c] {
                Role::Semaphore { take } => take <= s.server.number.unwrap_or(PERMITS),
                Role::Rw => true,
            };
            if !free || !fits {
                return true;
            }
            [
                Action::Start(c, Op::Acquire(field, 0)),
                Action::Net(c, Net::Run),
                Action::Net(c, Net::Hear),
            ]
            .iter()
            .try_fold(s.clone(), |t, &a| self.next_state(&t, a))
            .is_some_and(|t| matches!(t.clients[c].phase, Phase::Held { .. }))
        })
    }
}

/// Whether the next tick ends a hold, a writer's mark or the hash itself
/// while a waiter was refused listening (`:wait`; any of a semaphore's),
/// or ends the semaphore's waiters list: nobody is told then.
fn lapses(server: &Server) -> bool {
    let (now, next) = (server.now, server.now + 1);
    let ends = |d: i32| d > now && d <= next;
    let listed = !server.waiting.list.is_empty();
    let hash = match &server.name {
        Name::Hash(h) if h.wait || h.kind == Kind::Semaphore => {
            h.holds.iter().any(|x| ends(x.deadline))
                || h.marks.iter().any(|&(_, d)| ends(d))
                || h.readers_waiting.iter().any(|m| ends(m.deadline))
                || h.expires <= next
        }
        _ => false,
    };
    hash || (listed && server.waiting.list_expires <= next)
}

/// Times relative to now (see the reentrant model's `shift`).
fn shift(s: &mut State) {
    let n = s.server.now;
    let back = |t: i32, floor: i32| (t - n).max(floor);
    s.server.rebase(n);
    for cl in &mut s.clients {
        cl.line.shift(n);
        if let Some(w) = cl.wait.as_mut() {
            w.sent = back(w.sent, -LEASE);
        }
        if let Some(w) = cl.writing.as_mut() {
            w.sent = back(w.sent, -LEASE);
        }
        if let Phase::Held { valid_until, .. } = &mut cl.phase {
            *valid_until = back(*valid_until, 0);
        }
        if let Some(r) = cl.reads.as_mut() {
            r.valid_until = back(r.valid_until, 0);
        }
    }
}
