//! The server side of the model for the kinds whose holds each carry a
//! lease of their own in one hash: the read-write lock
//! (`lua/shared_rw.lua`, `lua/rw_acquire.lua`, `lua/rw_release.lua`,
//! `lua/rw_leave.lua`) and the semaphore (`lua/sem_acquire.lua`,
//! `lua/sem_release.lua`, `lua/sem_leave.lua`, with its waiters list, its
//! grant asks and the messages to its clients' wake channels:
//! `lua/shared_listen.lua`, `lua/shared_wake.lua`,
//! `lua/shared_permits.lua`), with the watchdog's renewal
//! (`lua/renew.lua`) of such a hold. One name, one master; both kinds' clients may meet on
//! it. Each script is one atomic step making the Lua's decisions in the
//! Lua's order, pruning included (a script that looks removes the holds
//! and waiting writers' marks whose deadline passed).
//!
//! Times are ticks, as in [`super::server`]; `tests/differential.rs`
//! holds these functions to the real scripts.

use super::server::{recorded, set_record, Counter, Owner, Record, Recorded, Req};

/// Which kind's hash the name is (its `:kind` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Rw,
    Semaphore,
}

/// An owner field of the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `"<client>:<owner>"`: the read-write lock's write hold.
    Writer(Owner),
    /// `"<client>:<owner>:r"`: one reader.
    Reader(Owner),
    /// `"<client>:p<n>:r"`: one acquisition of a semaphore's permits (a
    /// "reader" to the shared snapshot, as its name ends in `:r`).
    Permit(Owner),
}

impl Field {
    pub fn is_reader(self) -> bool {
        !matches!(self, Field::Writer(_))
    }

    /// The client the field's owner belongs to (owners and permit ids are
    /// made per client: `client * 16 + n`).
    pub fn client(self) -> Owner {
        match self {
            Field::Writer(o) | Field::Reader(o) | Field::Permit(o) => o / 16,
        }
    }
}

/// One hold: its field's count (levels, or a semaphore's permits), its
/// `:<field>` deadline, and a semaphore's `:q:<field>` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holding {
    pub field: Field,
    pub count: u32,
    pub deadline: i32,
    pub req: Option<Req>,
}

/// The lock hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hash {
    pub kind: Kind,
    /// Sorted by field.
    pub holds: Vec<Holding>,
    /// `:token`: the write hold's (left behind when a renewal prunes a dead
    /// writer: no script reads it then).
    pub token: Option<u64>,
    /// `:ww:<writer>`: waiting writers' marks, until their deadlines.
    pub marks: Vec<(Owner, i32)>,
    /// The writers whose marks stand, in the order each was last set
    /// (oldest first): marks set in one tick have one deadline here, and
    /// the later one's is the later on the server, in ms.
    pub renewed: Vec<Owner>,
    /// `:wa:<writer>`: the asks for a direct grant beside some of those
    /// marks (sorted; each goes with its mark).
    pub asks: Vec<(Owner, WriterAsk)>,
    /// `:wr:<reader>` (`pass` false) and `:rp:<reader>` (true): waiting
    /// readers' marks and passes, until their deadlines (sorted).
    pub readers_waiting: Vec<ReaderMark>,
    /// `:take`: the request a release handed the write hold to (left
    /// behind, as `token`, when a renewal prunes a dead writer; a fresh
    /// write take clears it).
    pub take: Option<Req>,
    /// `:wait`: a listening waiter was refused.
    pub wait: bool,
    /// A semaphore's `:claim` (left in the hash when it lapses, as the
    /// script leaves it).
    pub claim: Option<Claim>,
    /// The key's TTL, as the tick it expires at.
    pub expires: i32,
}

/// A semaphore's claim: the permits a waiting client at the front of the
/// list asks for, kept for it until `till` (sem_acquire.lua).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    pub client: Owner,
    pub need: u32,
    pub till: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Name {
    Absent,
    Hash(Hash),
    /// A string some other program wrote.
    Foreign,
    /// A hash of a `:wait` field alone, without kind or TTL (what an HSET
    /// on an absent key makes): a hash no script recognises.
    Stray,
}

/// What an acquire answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    /// `{1, token, count}` (a semaphore's grant is `{1, 0, 1}`).
    Granted { token: u64, count: u32 },
    /// `{0, hint}`: ticks until it may be worth looking again; `{0, hint,
    /// place}` for a listed semaphore waiter: its client's place in the
    /// waiters list.
    Refused { hint: i32, place: Option<u32> },
    /// `DEADLOCK`: the write side asked by a reader.
    Deadlock,
    /// `WRONGKIND <kind>`.
    WrongKind(Kind),
    /// `WRONGTYPE string 1`.
    WrongType,
    /// `WRONGTYPE foreign-hash 1`.
    ForeignHash,
}

/// What a release answers: `0`, `n > 0` levels left, `-1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    Left(u32),
    NotHeld,
    WrongType,
    /// "WRONGKIND <kind>": the name is another kind's (a side's
    /// force-unlock of a semaphore's hash).
    WrongKind,
}

/// A waiting reader's mark, or its pass (a write release turned the mark
/// into one: the reader goes in before the next writer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReaderMark {
    pub owner: Owner,
    pub deadline: i32,
    pub pass: bool,
}

/// A waiting writer's ask for a direct grant (`:wa:<field>` = "<ms>
/// <attempt> <record key>").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriterAsk {
    pub ms: i32,
    pub attempt: u32,
    pub req: Req,
}

/// A release's (or a leave's) direct grant to a waiting writer, published
/// on the writers' channel: "g <token> <ms> <record key> <attempt>".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handed {
    pub token: u64,
    pub ms: i32,
    pub req: Req,
    pub attempt: u32,
}

/// What a write release names.
#[derive(Clone, Copy, Debug)]
pub struct RwRelease {
    pub field: Field,
    pub req: Req,
    /// The write hold's token (`None`: "").
    pub token: Option<u64>,
    /// A read hold's identity: the request that made it (`None`: "").
    pub take: Option<Req>,
    pub relet: i32,
    pub keep: i32,
    pub first: bool,
    /// The counter's key is given (KEYS[5]): a release that frees the
    /// lock may hand it to a waiting writer.
    pub grants: bool,
}

/// An acquire's arguments.
#[derive(Clone, Copy, Debug)]
pub struct RwAcquire {
    pub field: Field,
    pub req: Req,
    pub lease: i32,
    pub keep: i32,
    pub first: bool,
    /// The caller waits (listens) when refused: ARGV[5] = "1".
    pub waits: bool,
    /// How long a waiting writer's mark holds readers back.
    pub mark: i32,
    /// A waiting writer asks for a direct grant (ARGV[9], ARGV[10]): its
    /// first lease, and this attempt's number.
    pub ask: Option<(i32, u32)>,
}

/// A semaphore acquire's arguments: permit id `permit` (of client
/// `permit / 16`) takes `take` of `total` (the handle's number) for
/// `lease`, as request `req`.
#[derive(Clone, Copy, Debug)]
pub struct SemAcquire {
    pub permit: Owner,
    pub take: u32,
    pub total: u32,
    pub lease: i32,
    pub mode: Mode,
    pub req: Req,
    /// The wait asks for direct grants: their first lease, and this
    /// attempt's number.
    pub ask: Option<(i32, u32)>,
    /// The length of the claim the wait makes at the front of the list
    /// (ARGV[10]; a listening attempt's); `None`, it makes none.
    pub claim: Option<i32>,
}

/// How a semaphore attempt waits (its ARGV[5]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// "0": only trying.
    Try,
    /// "1": listening, the client's only wait.
    Listening,
    /// "2": listening with other waits of the client.
    WithOthers,
    /// "3" and "4": as "1" and "2", woken by a release.
    Woken,
    WokenWithOthers,
}

impl Mode {
    pub fn arg(self) -> &'static str {
        match self {
            Mode::Try => "0",
            Mode::Listening => "1",
            Mode::WithOthers => "2",
            Mode::Woken => "3",
            Mode::WokenWithOthers => "4",
        }
    }

    fn woken(self) -> bool {
        matches!(self, Mode::Woken | Mode::WokenWithOthers)
    }

    fn alone(self) -> bool {
        matches!(self, Mode::Listening | Mode::Woken)
    }
}

/// A semaphore waiter's ask (client id -> "<ms> <request> <attempt>
/// <permits> <permit id>").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ask {
    pub client: Owner,
    pub ms: i32,
    pub req: Req,
    pub attempt: u32,
    pub take: u32,
    pub permit: Owner,
}

/// Which of a read-write lock's two channels a call published on
/// (`tell_sides` of shared_rw.lua).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sides {
    /// The lock's channel, where its readers listen.
    pub readers: bool,
    /// The writers' channel.
    pub writers: bool,
    /// A direct grant to a waiting writer, on the writers' channel.
    pub handed: Option<Handed>,
}

impl Sides {
    /// A wake-up of a lock where a waiter listens: the writers when the
    /// lock is `free` and no reader has a pass, the readers unless a
    /// writer's mark (the latest deadline `ww`) holds new readers back at
    /// `now` and no reader has a pass.
    /// A direct grant to a waiting writer, and no other message.
    fn handed(handed: Handed) -> Sides {
        Sides {
            handed: Some(handed),
            ..Sides::default()
        }
    }

    fn told(free: bool, ww: i32, now: i32, passes: bool) -> Sides {
        Sides {
            readers: ww <= now || passes,
            writers: free && !passes,
            handed: None,
        }
    }
}

/// A message published on a client's wake channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Told {
    /// "0".
    Wake,
    /// "g 0 <ms> <record key> <attempt>".
    Grant { ms: i32, req: Req, attempt: u32 },
    /// A direct grant to a waiting writer, on the writers' channel.
    Handed(Handed),
}

/// The semaphore's waiting clients: its waiters list and grant asks with
/// their TTLs (each lives to `slack` past the time a refusal gave), which
/// clients listen on their wake channel, and what the last call told them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Waiting {
    pub list: Vec<Owner>,
    pub list_expires: i32,
    pub asks: Vec<Ask>,
    pub asks_expires: i32,
    /// Sorted.
    pub subscribed: Vec<Owner>,
    pub told: Vec<(Owner, Told)>,
}

/// Defects the model can be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// A waiting writer's mark moves the write holder's lease (as when the
    /// lease was the hash's TTL and the mark did `PEXPIRE ... GT`).
    MarkMovesLease,
    /// A semaphore counts only the permits of the caller's own client.
    CountsOwnClient,
    /// A reader does not look for a write holder.
    ReadIgnoresWriter,
    /// The semaphore's acquire does not look at the hash's kind.
    SemaphoreIgnoresKind,
    /// The write release does not compare the hold's token.
    ReleaseIgnoresToken,
    /// A lost counter starts again at 1.
    CounterRestartsAtOne,
    /// A reader's release does not compare the hold's identity (how it was
    /// before read holds had one): a late release frees the same task's
    /// newer read hold. Found by this model, and fixed.
    ReadReleaseIgnoresTake,
    /// An acquire does not prune holds whose lease passed: a dead holder
    /// keeps the name until the hash's TTL ends.
    NoPruning,
    /// A refused waiting semaphore acquire marks `:wait` on a hash that is
    /// not there (the number lowered below its take): a stray hash without
    /// kind or TTL. Found by this model in the real script, and fixed.
    MarksAbsentHash,
    /// A release hands a listed client the permits its ask asks for
    /// whether or not they fit in those free.
    GrantIgnoresFit,
    /// A semaphore acquire grants permits whether or not another client's
    /// standing claim still fits beside them.
    ClaimIgnored,
    /// A release that frees the read-write lock with writers' marks
    /// standing writes the marks back without `:wait` (as the first version
    /// of `keep_marks` did): the readers held back, told by nobody then,
    /// are not told by the next release either.
    FreeForgetsWait,
    /// A waiting writer's leave tells nobody, even when it lifts the last
    /// mark holding readers back.
    LeaveTellsNobody,
    /// A waiting writer listens on the lock's channel (the readers'), not
    /// on the writers' one (a client's defect).
    WriterListensOnReaders,
    /// A semaphore's listening refusal does not list its client: no
    /// release tells it.
    RefusalUnlisted,
    /// A write release that leaves the lock to readers (the writer's own
    /// read hold, or the waiting readers' passes) tells nobody.
    WriteReleaseTellsNoReaders,
    /// A release tells one listed client, whatever number of permits it
    /// frees (the reentrant lock's wake-one carried over to permits
    /// unchanged).
    HandsOutOne,
    /// A waiting semaphore client claims any grant message to its wait,
    /// whichever attempt it names (a client's defect: how the reentrant
    /// and fair locks' waits once took a late grant message).
    ClaimIgnoresAttempt,
    /// A force-unlock tells the writers' channel only when asked through a
    /// read-write side's handle (as it did before), not through a plain
    /// one (`lockwarden unlock --force`).
    ForceTellsReadersOnly,
    /// The give-back of a semaphore attempt whose outcome was unknown
    /// releases its permit id whichever request holds it now.
    GiveBackById,
    /// A release hands a waiting writer the lock with the lease its ask
    /// asked for, not cut to its mark's end: the grant may outlive the
    /// hash's TTL (and a writer that stopped holds the name longer than
    /// its mark would have held readers back).
    GrantOutlivesMark,
    /// A write release leaves the waiting readers' marks as they are (no
    /// passes: how it was before them): two writers taking turns keep a
    /// reader out for good.
    NoPasses,
    /// A reader with a pass is still held back by a writer's mark.
    PassIgnored,
    /// A writer takes the lock (or is handed it) while a reader's pass
    /// stands.
    WriterPassesReaders,
}

/// The hash as a script's snapshot saw it (after pruning).
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    /// The write holder's owner and ticks left.
    writer: Option<(Owner, i32)>,
    readers: u32,
    soonest: Option<i32>,
    /// The latest waiting writer's deadline (0: none).
    ww: i32,
    /// Live readers' passes.
    passes: u32,
    /// The latest deadline of any mark or pass (0: none).
    marks_end: i32,
    /// Whether there were holders (cover: the TTL only grows then).
    held: bool,
}

/// One master's keys for the name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: i32,
    pub name: Name,
    pub counter: Counter,
    pub records: Vec<Record>,
    /// The semaphore's number stored with it (`None`: the handle's).
    pub number: Option<u32>,
    /// Ghosts: a script wrote a key that is not a lockwarden hold (the
    /// foreign string, or a hash without kind or TTL); a waiter's call moved
    /// a live holder's deadline; a release changed a live hold that was not
    /// the caller's.
    pub foreign_written: bool,
    pub waiter_moved_lease: bool,
    pub freed_another: bool,
    /// The readers whose mark stood when the last write hold was released
    /// (they go in before the next writer), until each takes the read
    /// side or its mark or pass goes; and whether a write hold began while
    /// one of them still waited with its mark or pass standing. And
    /// whether a reader went in on a pass.
    pub owed: Vec<Owner>,
    pub passed_over: bool,
    pub passed: bool,
    /// Ghost: permits went to a client while another's claim stood and no
    /// longer fitted beside them.
    pub claim_overtaken: bool,
    pub waiting: Waiting,
    /// How long past the time a refusal gave the waiters list and the
    /// asks live (the scripts' second, in the model's unit).
    pub slack: i32,
}

impl Server {
    pub fn new() -> Server {
        Server {
            now: 0,
            name: Name::Absent,
            counter: Counter::default(),
            records: Vec::new(),
            number: None,
            foreign_written: false,
            waiter_moved_lease: false,
            freed_another: false,
            owed: Vec::new(),
            passed_over: false,
            passed: false,
            claim_overtaken: false,
            waiting: Waiting::default(),
            slack: 1,
        }
    }

    /// The clock moves on; a key whose TTL came is gone.
    pub fn advance(&mut self, ticks: i32) {
        self.now += ticks;
        if let Name::Hash(h) = &self.name {
            if h.expires <= self.now {
                self.name = Name::Absent;
            }
        }
        let now = self.now;
        self.records.retain(|r| r.expires > now);
        let w = &mut self.waiting;
        if w.list_expires <= now {
            w.list.clear();
        }
        if w.asks_expires <= now {
            w.asks.clear();
        }
    }

    /// The server's clock jumps `ticks` ahead (set back when negative),
    /// the clients' clocks running on: the hash's TTL, each hold's and
    /// mark's deadline (read against the server's clock), the records',
    /// the list's and the asks' TTLs come that much sooner, or later. A
    /// deadline already passed stays passed (the model keeps no record of
    /// how long ago it passed).
    pub fn jump(&mut self, ticks: i32) {
        let now = self.now;
        let moved = |d: i32| if d > now { (d - ticks).max(now) } else { d };
        if let Name::Hash(h) = &mut self.name {
            h.expires -= ticks;
            for x in &mut h.holds {
                x.deadline = moved(x.deadline);
            }
            for m in &mut h.marks {
                m.1 = moved(m.1);
            }
            for m in &mut h.readers_waiting {
                m.deadline = moved(m.deadline);
            }
        }
        for r in &mut self.records {
            r.expires -= ticks;
        }
        let w = &mut self.waiting;
        if !w.list.is_empty() {
            w.list_expires -= ticks;
        }
        if !w.asks.is_empty() {
            w.asks_expires -= ticks;
        }
        self.advance(0);
    }

    /// Its times `n` ticks earlier, a deadline passed kept at most `n`
    /// ticks ago (the checker's times are relative to now, so states that
    /// differ only in when they happen are one).
    pub fn rebase(&mut self, n: i32) {
        let back = |t: i32| (t - n).max(self.now - n);
        if let Name::Hash(h) = &mut self.name {
            h.expires -= n;
            for x in &mut h.holds {
                x.deadline = back(x.deadline);
            }
            for m in &mut h.marks {
                m.1 = back(m.1);
            }
            for m in &mut h.readers_waiting {
                m.deadline = back(m.deadline);
            }
        }
        for r in &mut self.records {
            r.expires -= n;
        }
        let w = &mut self.waiting;
        w.list_expires = if w.list.is_empty() { 0 } else { w.list_expires - n };
        w.asks_expires = if w.asks.is_empty() { 0 } else { w.asks_expires - n };
        self.now -= n;
    }

    pub fn flush(&mut self) {
        self.name = Name::Absent;
        self.counter.value = None;
        self.records.clear();
        self.number = None;
        self.waiting.list.clear();
        self.waiting.asks.clear();
    }

    /// The live holds (deadline not passed), as `(field, count, deadline)`.
    pub fn live(&self) -> Vec<Holding> {
        match &self.name {
            Name::Hash(h) => h.holds.iter().filter(|x| x.deadline > self.now).copied().collect(),
            _ => Vec::new(),
        }
    }

    /// The semaphore's claim while it stands (`claim_of`, shared_claim.lua).
    pub fn claim(&self) -> Option<Claim> {
        match &self.name {
            Name::Hash(h) => h.claim.filter(|c| c.till > self.now),
            _ => None,
        }
    }

    /// The permits the live holds hold.
    fn used(&self) -> u32 {
        self.live()
            .iter()
            .filter(|x| x.field.is_reader())
            .map(|x| x.count)
            .sum()
    }

    /// After `client` was given permits while holders held `before`:
    /// whether a claim of another client stood that no longer fits (the
    /// ghost `claim_overtaken`; with no holder before, nobody's release was
    /// to serve the claim, and the grant may go to anyone). `claim`: the
    /// claim before the grant.
    fn check_claim(&mut self, claim: Option<Claim>, client: Owner, total: u32, before: u32) {
        if let Some(c) = claim.filter(|c| c.client != client) {
            if before > 0 && self.used() + c.need > total {
                self.claim_overtaken = true;
            }
        }
    }

    fn hash(&mut self) -> Option<&mut Hash> {
        match &mut self.name {
            Name::Hash(h) => Some(h),
            _ => None,
        }
    }

    /// `snapshot` of shared_rw.lua: prunes, then reads. `Err`: the reply
    /// for another kind's hash, or a key of another type.
    fn snapshot(&mut self, kind: Kind, check_kind: bool) -> Result<Snapshot, AcquireReply> {
        self.snapshot_pruning(kind, check_kind, true)
    }

    /// [`Server::snapshot`], pruning the passed holds when `prune`.
    fn snapshot_pruning(&mut self, kind: Kind, check_kind: bool, prune: bool) -> Result<Snapshot, AcquireReply> {
        let now = self.now;
        let h = match &mut self.name {
            Name::Absent => return Ok(Snapshot::default()),
            Name::Foreign => return Err(AcquireReply::WrongType),
            Name::Stray => return Err(AcquireReply::ForeignHash),
            Name::Hash(h) => h,
        };
        if check_kind && h.kind != kind {
            return Err(AcquireReply::WrongKind(h.kind));
        }
        let mut s = Snapshot::default();
        h.marks.retain(|&(_, d)| d > now);
        let marks = h.marks.clone();
        h.renewed.retain(|o| marks.iter().any(|m| m.0 == *o));
        h.asks.retain(|(o, _)| marks.iter().any(|m| m.0 == *o));
        s.ww = h.marks.iter().map(|&(_, d)| d).max().unwrap_or(0);
        h.readers_waiting.retain(|m| m.deadline > now);
        // A reader owed its turn whose pass lapsed is owed nothing more (a
        // later wait of the same owner leaves a new mark).
        let still: Vec<Owner> = h.readers_waiting.iter().map(|m| m.owner).collect();
        self.owed.retain(|o| still.contains(o));
        s.passes = h.readers_waiting.iter().filter(|m| m.pass).count() as u32;
        s.marks_end = h.readers_waiting.iter().map(|m| m.deadline).fold(s.ww, i32::max);
        if h.holds.iter().any(|x| x.deadline <= now && !x.field.is_reader()) {
            h.token = None;
            h.take = None;
        }
        if prune {
            h.holds.retain(|x| x.deadline > now);
        }
        for x in &h.holds {
            s.held = true;
            match x.field {
                Field::Writer(o) => s.writer = Some((o, x.deadline - now)),
                _ => {
                    s.readers += 1;
                    let left = x.deadline - now;
                    s.soonest = Some(s.soonest.map_or(left, |m: i32| m.min(left)));
                }
            }
        }
        Ok(s)
    }

    fn holding(&self, field: Field) -> Option<Holding> {
        match &self.name {
            Name::Hash(h) => h.holds.iter().find(|x| x.field == field).copied(),
            _ => None,
        }
    }

    fn put(&mut self, kind: Kind, hold: Holding) {
        if self.name == Name::Absent {
            self.name = Name::Hash(Hash {
                kind,
                holds: Vec::new(),
                token: None,
                marks: Vec::new(),
                renewed: Vec::new(),
                asks: Vec::new(),
                readers_waiting: Vec::new(),
                take: None,
                wait: false,
                claim: None,
                expires: i32::MAX,
            });
        }
        if let Some(h) = self.hash() {
            h.holds.retain(|x| x.field != hold.field);
            h.holds.push(hold);
            h.holds.sort_by_key(|x| x.field);
            h.kind = kind;
        }
    }

    /// `cover` of shared_rw.lua: the TTL covers a new hold of `ms`.
    fn cover(&mut self, s: &Snapshot, ms: i32) {
        let now = self.now;
        if let Some(h) = self.hash() {
            if s.held {
                h.expires = h.expires.max(now + ms);
            } else {
                h.expires = now + ms;
            }
        }
    }

    /// A PEXPIRE ... GT of `ms`.
    fn extend(&mut self, ms: i32) {
        let now = self.now;
        if let Some(h) = self.hash() {
            h.expires = h.expires.max(now + ms);
        }
    }

    /// A refusal: a waiting caller sets `:wait` on the hash, when there is
    /// one (with the defect, also when there is none: an HSET then makes a
    /// hash of that field alone, without kind or TTL).
    fn refuse(&mut self, waits: bool, hint: i32, defect: Option<Defect>) -> AcquireReply {
        if waits {
            match &mut self.name {
                Name::Hash(h) => h.wait = true,
                Name::Absent if defect == Some(Defect::MarksAbsentHash) => {
                    self.name = Name::Stray;
                    self.foreign_written = true;
                }
                _ => {}
            }
        }
        AcquireReply::Refused { hint, place: None }
    }

    /// `refuse` of sem_acquire.lua: a listening caller's client is listed
    /// (at the front when woken) and leaves its ask or takes it back.
    fn sem_refuse(&mut self, a: &SemAcquire, hint: i32, defect: Option<Defect>) -> AcquireReply {
        if defect == Some(Defect::MarksAbsentHash) && a.mode != Mode::Try && self.name == Name::Absent {
            self.name = Name::Stray;
            self.foreign_written = true;
        }
        if a.mode == Mode::Try {
            return AcquireReply::Refused { hint, place: None };
        }
        let client = a.permit / 16;
        let place = if defect == Some(Defect::RefusalUnlisted) {
            0
        } else {
            self.listen(client, hint, a.mode.woken())
        };
        let (now, slack) = (self.now, self.slack);
        let w = &mut self.waiting;
        // The hash is there while any ask is, the client's own included
        // (its new ask overwrites that one).
        let existed = !w.asks.is_empty();
        // The asks are looked at only by a caller that gives them (KEYS[4]).
        if a.ask.is_some() {
            w.asks.retain(|k| k.client != client);
        }
        if let (Some(ms), true, 0) = (a.claim, a.mode.alone(), place) {
            let other = self.claim().is_some_and(|c| c.client != client);
            let (now, take) = (self.now, a.take);
            if let (Name::Hash(h), false) = (&mut self.name, other) {
                if h.holds.iter().any(|x| x.deadline > now) {
                    h.claim = Some(Claim {
                        client,
                        need: take,
                        till: now + ms,
                    });
                }
            }
        }
        let w = &mut self.waiting;
        match a.ask {
            Some((ms, attempt)) if a.mode.alone() => {
                // Never shortened while the hash stands (an empty hash is
                // no key: a new one gets the TTL as given).
                let end = now + hint + slack;
                w.asks_expires = if !existed { end } else { w.asks_expires.max(end) };
                w.asks.push(Ask {
                    client,
                    ms,
                    req: a.req,
                    attempt,
                    take: a.take,
                    permit: a.permit,
                });
                w.asks.sort();
            }
            _ => {}
        }
        AcquireReply::Refused {
            hint,
            place: Some(place),
        }
    }

    /// `listen` of shared_listen.lua: `client` in the waiters list (at the
    /// front with `front`), the list kept `ttl` and the slack at least;
    /// its place.
    fn listen(&mut self, client: Owner, ttl: i32, front: bool) -> u32 {
        let end = self.now + ttl + self.slack;
        let w = &mut self.waiting;
        let at = match w.list.iter().position(|&c| c == client) {
            Some(at) => at,
            None => {
                if front {
                    w.list.insert(0, client);
                } else {
                    w.list.push(client);
                }
                if w.list.len() == 1 {
                    // A new list: its TTL as given.
                    w.list_expires = end;
                    return 0;
                }
                if front {
                    0
                } else {
                    w.list.len() - 1
                }
            }
        };
        w.list_expires = w.list_expires.max(end);
        at as u32
    }

    /// `hand_out` of shared_permits.lua: one listed client woken per
    /// permit free, or handed the permits its ask asks for when they fit.
    fn hand_out(&mut self, total: u32, claim: Option<Claim>, defect: Option<Defect>) {
        let live = self.live();
        let mut holders = live.len() as u32;
        let mut free = i64::from(total) - live.iter().map(|x| i64::from(x.count)).sum::<i64>();
        // A standing claim keeps its permits for its client.
        let mut claim = claim;
        for _ in 0..16 {
            if free <= 0 || free < claim.map_or(0, |c| i64::from(c.need)) {
                break;
            }
            let before = free;
            if !self.wake_next(&mut free, &mut holders, &mut claim, total, defect)
                || defect == Some(Defect::HandsOutOne)
            {
                break;
            }
            if free == before {
                free -= 1;
            }
        }
    }

    /// `wake_next` of shared_wake.lua with the semaphore's grants.
    fn wake_next(
        &mut self,
        free: &mut i64,
        holders: &mut u32,
        claim: &mut Option<Claim>,
        total: u32,
        defect: Option<Defect>,
    ) -> bool {
        for _ in 0..16 {
            if self.waiting.list.is_empty() {
                return false;
            }
            let client = self.waiting.list.remove(0);
            let heard = self.waiting.subscribed.contains(&client);
            let ask = self.waiting.asks.iter().position(|k| k.client == client);
            let ask = ask.map(|i| self.waiting.asks.remove(i));
            let kept = claim.filter(|c| c.client != client).map_or(0, |c| i64::from(c.need));
            let fits = ask.filter(|k| {
                let fits = i64::from(k.take) <= *free - kept || defect == Some(Defect::GrantIgnoresFit);
                fits && self.holding(Field::Permit(k.permit)).is_none()
            });
            let Some(k) = fits else {
                if heard {
                    self.waiting.told.push((client, Told::Wake));
                    return true;
                }
                continue;
            };
            let now = self.now;
            let (standing, used) = (*claim, self.used());
            if claim.is_some_and(|c| c.client == client) {
                // Served: the claim ends, heard or not.
                *claim = None;
                if let Some(h) = self.hash() {
                    h.claim = None;
                }
            }
            let hold = Holding {
                field: Field::Permit(k.permit),
                count: k.take,
                deadline: now + k.ms,
                req: Some(k.req),
            };
            self.put(Kind::Semaphore, hold);
            if let Some(h) = self.hash() {
                h.expires = if *holders == 0 {
                    now + k.ms
                } else {
                    h.expires.max(now + k.ms)
                };
            }
            if heard {
                *holders += 1;
                *free -= i64::from(k.take);
                self.check_claim(standing, client, total, used);
                let told = Told::Grant {
                    ms: k.ms,
                    req: k.req,
                    attempt: k.attempt,
                };
                self.waiting.told.push((client, told));
                return true;
            }
            // Nobody heard it: undone at once.
            if *holders == 0 {
                self.name = Name::Absent;
            } else if let Some(h) = self.hash() {
                h.holds.retain(|x| x.field != hold.field);
            }
        }
        false
    }

    /// Re-entry of `field`'s hold: one more level, its deadline never
    /// shortened, the TTL never shortened.
    fn reenter(&mut self, field: Field, lease: i32) -> u32 {
        let now = self.now;
        let mut count = 0;
        if let Some(h) = self.hash() {
            if let Some(x) = h.holds.iter_mut().find(|x| x.field == field) {
                x.count += 1;
                x.deadline = x.deadline.max(now + lease);
                count = x.count;
            }
        }
        self.extend(lease);
        count
    }

    fn grant(&mut self, a: &RwAcquire, token: u64, count: u32) -> AcquireReply {
        set_record(
            &mut self.records,
            a.req,
            Recorded::Entered { token, count },
            self.now + a.keep,
        );
        AcquireReply::Granted { token, count }
    }

    /// rw_acquire.lua.
    pub fn rw_acquire(&mut self, a: RwAcquire, defect: Option<Defect>) -> AcquireReply {
        if !a.first {
            if let Some(Recorded::Entered { token, count }) = recorded(&self.records, a.req) {
                return AcquireReply::Granted { token, count };
            }
        }
        let before = self.live();
        let s = match self.snapshot_pruning(Kind::Rw, true, defect != Some(Defect::NoPruning)) {
            Ok(s) => s,
            Err(reply) => return reply,
        };
        let now = self.now;
        let reply = match a.field {
            Field::Reader(o) => {
                if self.holding(a.field).is_some() {
                    let token = self.read_token(defect);
                    let count = self.reenter(a.field, a.lease);
                    return self.grant(&a, token, count);
                }
                let pass = self
                    .hash()
                    .is_some_and(|h| h.readers_waiting.iter().any(|m| m.owner == o && m.pass));
                match s.writer {
                    Some((w, left)) if w != o && defect != Some(Defect::ReadIgnoresWriter) => {
                        self.refuse_reader(&a, o, pass, left, defect)
                    }
                    None if s.ww > now && (!pass || defect == Some(Defect::PassIgnored)) => {
                        self.refuse_reader(&a, o, pass, s.ww - now, defect)
                    }
                    _ => {
                        let token = self.read_token(defect);
                        if let Some(h) = self.hash() {
                            h.readers_waiting.retain(|m| m.owner != o);
                        }
                        self.owed.retain(|&r| r != o);
                        self.passed |= pass && s.ww > now;
                        self.put(
                            Kind::Rw,
                            Holding {
                                field: a.field,
                                count: 1,
                                deadline: now + a.lease,
                                // The hold's identity, `:q:<field>`.
                                req: Some(a.req),
                            },
                        );
                        self.cover(&s, a.lease);
                        return self.grant(&a, token, 1);
                    }
                }
            }
            Field::Writer(o) => {
                let take = self.hash().and_then(|h| h.take);
                if s.writer.is_some_and(|(w, _)| w == o) && !a.first && take == Some(a.req) {
                    // A release handed this waiting request the write
                    // hold: its lease now, no level added, no record.
                    if let Some(h) = self.hash() {
                        if let Some(x) = h.holds.iter_mut().find(|x| x.field == a.field) {
                            x.deadline = x.deadline.max(now + a.lease);
                        }
                    }
                    self.extend(a.lease);
                    let token = self.hash().and_then(|h| h.token).unwrap_or(0);
                    return AcquireReply::Granted { token, count: 1 };
                }
                if s.writer.is_some_and(|(w, _)| w == o) {
                    let count = self.reenter(a.field, a.lease);
                    let token = self.hash().and_then(|h| h.token).unwrap_or(0);
                    return self.grant(&a, token, count);
                }
                if self.holding(Field::Reader(o)).is_some() {
                    return AcquireReply::Deadlock;
                }
                let passes = s.passes > 0 && defect != Some(Defect::WriterPassesReaders);
                if s.writer.is_some() || s.readers > 0 || passes {
                    if a.waits {
                        let mark = now + a.mark;
                        if let Some(h) = self.hash() {
                            h.marks.retain(|&(w, _)| w != o);
                            h.marks.push((o, mark));
                            h.renewed.retain(|&w| w != o);
                            h.renewed.push(o);
                            h.marks.sort();
                            h.asks.retain(|&(w, _)| w != o);
                            if let Some((ms, attempt)) = a.ask {
                                h.asks.push((
                                    o,
                                    WriterAsk {
                                        ms,
                                        attempt,
                                        req: a.req,
                                    },
                                ));
                                h.asks.sort();
                            }
                            if defect == Some(Defect::MarkMovesLease) {
                                for x in h.holds.iter_mut().filter(|x| !x.field.is_reader()) {
                                    x.deadline = x.deadline.max(mark);
                                }
                            }
                        }
                        self.extend(a.mark);
                    }
                    let hint = match (s.writer, s.soonest) {
                        (Some((_, left)), _) => left,
                        (None, Some(soonest)) => soonest,
                        (None, None) => s.marks_end - now,
                    };
                    self.refuse(a.waits, hint, defect)
                } else {
                    self.note_writer_in();
                    let token = self.counter.next(defect == Some(Defect::CounterRestartsAtOne));
                    self.put(
                        Kind::Rw,
                        Holding {
                            field: a.field,
                            count: 1,
                            deadline: now + a.lease,
                            req: None,
                        },
                    );
                    if let Some(h) = self.hash() {
                        h.token = Some(token);
                        h.take = None;
                        h.marks.retain(|&(w, _)| w != o);
                        h.renewed.retain(|&w| w != o);
                        h.asks.retain(|&(w, _)| w != o);
                    }
                    self.cover(&s, a.lease);
                    return self.grant(&a, token, 1);
                }
            }
            Field::Permit(_) => unreachable!("a permit is the semaphore's"),
        };
        self.check_waiter(&before);
        reply
    }

    /// `refuse_reader` of rw_acquire.lua: a waiting reader `o` leaves its
    /// mark (a pass stays a pass), the hash's TTL covering it.
    fn refuse_reader(
        &mut self,
        a: &RwAcquire,
        o: Owner,
        pass: bool,
        hint: i32,
        defect: Option<Defect>,
    ) -> AcquireReply {
        if a.waits {
            let deadline = self.now + a.mark;
            if let Some(h) = self.hash() {
                if !pass {
                    h.readers_waiting.retain(|m| m.owner != o);
                    h.readers_waiting.push(ReaderMark {
                        owner: o,
                        deadline,
                        pass: false,
                    });
                    h.readers_waiting.sort();
                }
            }
            self.extend(a.mark);
        }
        self.refuse(a.waits, hint, defect)
    }

    /// A write hold begins: was a reader owed its turn still waiting, its
    /// mark or pass standing? (Called after the caller's snapshot pruned.)
    fn note_writer_in(&mut self) {
        let waiting: Vec<Owner> = match &self.name {
            Name::Hash(h) => h.readers_waiting.iter().map(|m| m.owner).collect(),
            _ => Vec::new(),
        };
        self.owed.retain(|o| waiting.contains(o));
        self.passed_over |= !self.owed.is_empty();
        self.owed.clear();
    }

    /// A waiter's call changed no live holder's deadline.
    fn check_waiter(&mut self, before: &[Holding]) {
        let after = self.live();
        for b in before {
            if let Some(x) = after.iter().find(|x| x.field == b.field) {
                if x.deadline != b.deadline {
                    self.waiter_moved_lease = true;
                }
            }
        }
    }

    /// The read side's token (rw_acquire.lua's `read_token`): the
    /// counter's value, the counter started at the clock when it is not
    /// there.
    fn read_token(&mut self, defect: Option<Defect>) -> u64 {
        match self.counter.value {
            Some(t) => t,
            None => self.counter.next(defect == Some(Defect::CounterRestartsAtOne)),
        }
    }

    /// rw_release.lua.
    pub fn rw_release(&mut self, r: RwRelease, defect: Option<Defect>) -> ReleaseReply {
        self.rw_release_telling(r, defect).0
    }

    /// rw_release.lua, with the channels it published on.
    pub fn rw_release_telling(&mut self, r: RwRelease, defect: Option<Defect>) -> (ReleaseReply, Sides) {
        let before = self.live();
        let token = match &self.name {
            Name::Hash(h) => h.token,
            _ => None,
        };
        let (reply, told) = self.rw_leave_level(r, defect);
        let stale_write = r.token.is_some() && r.token != token;
        self.check_release(&before, r.field, |b| {
            if b.field.is_reader() {
                r.take.is_some() && b.req.is_some() && b.req != r.take
            } else {
                stale_write
            }
        });
        (reply, told)
    }

    /// A release changed no live hold but the caller's own (`stale`: the
    /// release named another hold of the same field, by its token or its
    /// take, so that one is not its).
    fn check_release(&mut self, before: &[Holding], field: Field, stale: impl Fn(&Holding) -> bool) {
        let after = self.live();
        for b in before {
            let theirs = b.field != field || stale(b);
            if theirs && !after.contains(b) {
                self.freed_another = true;
            }
        }
    }

    fn rw_leave_level(&mut self, r: RwRelease, defect: Option<Defect>) -> (ReleaseReply, Sides) {
        let none = Sides::default();
        if !r.first {
            if let Some(Recorded::Left(n)) = recorded(&self.records, r.req) {
                return (ReleaseReply::Left(n), none);
            }
        }
        let s = match self.snapshot(Kind::Rw, true) {
            Ok(s) => s,
            Err(e) => return (Self::release_refusal(e), none),
        };
        let Some(mine) = self.holding(r.field) else {
            return (ReleaseReply::NotHeld, none);
        };
        let listened = self.hash().is_some_and(|h| h.wait);
        let read = r.field.is_reader();
        let hash_token = self.hash().and_then(|h| h.token);
        if !read && defect != Some(Defect::ReleaseIgnoresToken) {
            if let Some(t) = r.token {
                if hash_token.unwrap_or(0) != t {
                    return (ReleaseReply::NotHeld, none);
                }
            }
        }
        // A read hold without an identity is any release's of its owner.
        if read
            && defect != Some(Defect::ReadReleaseIgnoresTake)
            && r.take.is_some()
            && mine.req.is_some()
            && mine.req != r.take
        {
            return (ReleaseReply::NotHeld, none);
        }
        let now = self.now;
        if mine.count > 1 {
            let count = mine.count - 1;
            if let Some(h) = self.hash() {
                if let Some(x) = h.holds.iter_mut().find(|x| x.field == r.field) {
                    x.count = count;
                    if r.relet > 0 {
                        x.deadline = x.deadline.max(now + r.relet);
                    }
                }
            }
            if r.relet > 0 {
                self.extend(r.relet);
            }
            set_record(&mut self.records, r.req, Recorded::Left(count), now + r.keep);
            return (ReleaseReply::Left(count), none);
        }
        let (mut writer, mut readers) = (s.writer.is_some(), s.readers);
        // A writer that leaves readers behind wakes readers who may join.
        let mut wake = !read && readers > 0 && defect != Some(Defect::WriteReleaseTellsNoReaders);
        if let Some(h) = self.hash() {
            h.holds.retain(|x| x.field != r.field);
            if read {
                readers -= 1;
            } else {
                h.token = None;
                h.take = None;
                writer = false;
                // give_passes: the readers waiting for this writer go in
                // before the next one.
                let waiting: Vec<Owner> = h.readers_waiting.iter().map(|m| m.owner).collect();
                self.owed = waiting;
                let h = self.hash().expect("the hash being released");
                if defect != Some(Defect::NoPasses) {
                    for m in &mut h.readers_waiting {
                        m.pass = true;
                    }
                }
            }
        }
        let passes = self.hash().is_some_and(|h| h.readers_waiting.iter().any(|m| m.pass));
        if !read && passes && defect != Some(Defect::WriteReleaseTellsNoReaders) {
            wake = true;
        }
        let free = !writer && readers == 0;
        if free {
            wake = true;
            // DEL, then keep_marks: the live marks written back with the
            // kind, the TTL to the latest.
            let marks = self.hash().map(|h| h.marks.clone()).unwrap_or_default();
            let renewed = self.hash().map(|h| h.renewed.clone()).unwrap_or_default();
            let asks = self.hash().map(|h| h.asks.clone()).unwrap_or_default();
            let readers_waiting = self.hash().map(|h| h.readers_waiting.clone()).unwrap_or_default();
            self.name = if marks.is_empty() && readers_waiting.is_empty() {
                Name::Absent
            } else {
                // ':wait' is kept with them: the readers they hold
                // back are not told, and the next release must tell them.
                Name::Hash(Hash {
                    kind: Kind::Rw,
                    holds: Vec::new(),
                    token: None,
                    marks,
                    renewed,
                    asks,
                    readers_waiting,
                    take: None,
                    wait: listened && defect != Some(Defect::FreeForgetsWait),
                    claim: None,
                    expires: s.marks_end,
                })
            };
        }
        if read || r.token.is_none() {
            set_record(&mut self.records, r.req, Recorded::Left(0), now + r.keep);
        }
        if free && r.grants {
            if let Some(handed) = self.hand_to_writer(defect) {
                let told = Sides::handed(handed);
                return (ReleaseReply::Left(0), told);
            }
        }
        let told = if wake && listened {
            Sides::told(free, s.ww, now, passes)
        } else {
            none
        };
        (ReleaseReply::Left(0), told)
    }

    /// `hand_to_writer` of shared_rw.lua, on a free lock: the write hold
    /// to the first waiting writer (by field) whose live mark has an ask,
    /// as its attempt would have taken it, with a lease of the ask's cut
    /// to the mark's end; `None` when no writer asked.
    fn hand_to_writer(&mut self, defect: Option<Defect>) -> Option<Handed> {
        let now = self.now;
        let h = self.hash()?;
        if h.readers_waiting.iter().any(|m| m.pass) && defect != Some(Defect::WriterPassesReaders) {
            return None;
        }
        // The asking writer whose mark was renewed longest ago (the one
        // waiting longest): by deadline, then (one tick) by when it was set.
        let (_, _, o, ask) = h
            .asks
            .iter()
            .filter_map(|&(o, ask)| {
                let mark = h.marks.iter().find(|m| m.0 == o && m.1 > now)?.1;
                let order = h.renewed.iter().position(|&w| w == o).unwrap_or(0);
                Some((mark, order, o, ask))
            })
            .min_by_key(|&(mark, order, o, _)| (mark, order, o))?;
        let mark = h.marks.iter().find(|m| m.0 == o).map(|m| m.1)?;
        let ms = if defect == Some(Defect::GrantOutlivesMark) {
            ask.ms
        } else {
            ask.ms.min(mark - now)
        };
        self.note_writer_in();
        let token = self.counter.next(defect == Some(Defect::CounterRestartsAtOne));
        let h = self.hash()?;
        h.marks.retain(|m| m.0 != o);
        h.renewed.retain(|&w| w != o);
        h.asks.retain(|k| k.0 != o);
        h.holds.push(Holding {
            field: Field::Writer(o),
            count: 1,
            deadline: now + ms,
            req: None,
        });
        h.holds.sort_by_key(|x| x.field);
        h.token = Some(token);
        h.take = Some(ask.req);
        Some(Handed {
            token,
            ms,
            req: ask.req,
            attempt: ask.attempt,
        })
    }

    /// A release's reply when the snapshot refused: a key of another type
    /// is an error; another kind's hash (or no kind's) is not this hold.
    fn release_refusal(e: AcquireReply) -> ReleaseReply {
        match e {
            AcquireReply::WrongType => ReleaseReply::WrongType,
            _ => ReleaseReply::NotHeld,
        }
    }

    /// rw_leave.lua: the waiting writer `o` stops waiting. `asked`: the
    /// requests its asks named (empty: a wait without asks, as a
    /// quorum's, and the old rule: its mark goes whatever ask is beside
    /// it); with `grants` the counter's key is given (KEYS[4]). True when
    /// its mark was there (or a grant to one of `asked` was given back);
    /// and the channels it published on.
    pub fn rw_leave_telling(
        &mut self,
        o: Owner,
        asked: &[Req],
        grants: bool,
        defect: Option<Defect>,
    ) -> Result<(bool, Sides), ReleaseReply> {
        let none = Sides::default();
        let Some(s) = self.leave_snapshot()? else {
            return Ok((false, none));
        };
        let now = self.now;
        let Some(h) = self.hash() else { return Ok((false, none)) };
        let listened = h.wait;
        // A write hold a release handed to one of the wait's requests,
        // never learned of: one level given back (a level above it is a
        // later wait's of the same owner, which re-entered it).
        let mut writer = s.writer.map(|w| w.0);
        let mut gave = false;
        if writer == Some(o) && h.take.is_some_and(|t| asked.contains(&t)) {
            if let Some(i) = h.holds.iter().position(|x| x.field == Field::Writer(o)) {
                if h.holds[i].count == 1 {
                    h.holds.remove(i);
                    h.token = None;
                    h.take = None;
                    writer = None;
                } else {
                    h.holds[i].count -= 1;
                }
                gave = true;
            }
        }
        let ask = h.asks.iter().find(|k| k.0 == o).map(|k| k.1.req);
        let marked = h.marks.iter().any(|&(w, _)| w == o);
        if marked && (asked.is_empty() || ask.is_none_or(|q| asked.contains(&q))) {
            h.marks.retain(|&(w, _)| w != o);
            h.renewed.retain(|&w| w != o);
            h.asks.retain(|&(w, _)| w != o);
        } else if !gave {
            return Ok((false, none));
        }
        let others = !h.marks.is_empty();
        let readers_wait = !h.readers_waiting.is_empty();
        let ww = h.marks.iter().map(|m| m.1).max().unwrap_or(0);
        if writer.is_some() || (others && !gave) {
            return Ok((true, none));
        }
        if s.readers == 0 && others && grants {
            if let Some(handed) = self.hand_to_writer(defect) {
                return Ok((true, Sides::handed(handed)));
            }
        }
        if s.readers == 0 && !others && !readers_wait {
            self.name = Name::Absent;
        }
        let told = if listened && defect != Some(Defect::LeaveTellsNobody) {
            Sides::told(s.readers == 0, ww, now, s.passes > 0)
        } else {
            none
        };
        Ok((true, told))
    }

    /// The snapshot a leave takes: `Err` for a key of another type,
    /// `None` for another kind's hash (or no kind's), which it leaves.
    fn leave_snapshot(&mut self) -> Result<Option<Snapshot>, ReleaseReply> {
        match self.snapshot(Kind::Rw, true) {
            Ok(s) => Ok(Some(s)),
            Err(AcquireReply::WrongType) => Err(ReleaseReply::WrongType),
            Err(_) => Ok(None),
        }
    }

    /// rw_leave.lua for a reader: the waiting reader `o` stops waiting,
    /// its mark or pass goes. True when one was there; and the channels it
    /// published on (the last pass gone from a lock nobody holds: a
    /// waiting writer's ask is handed the lock, with `grants`, or the
    /// writers are told).
    pub fn rw_leave_reader(
        &mut self,
        o: Owner,
        grants: bool,
        defect: Option<Defect>,
    ) -> Result<(bool, Sides), ReleaseReply> {
        let none = Sides::default();
        let Some(s) = self.leave_snapshot()? else {
            return Ok((false, none));
        };
        let now = self.now;
        let Some(h) = self.hash() else { return Ok((false, none)) };
        let listened = h.wait;
        let Some(at) = h.readers_waiting.iter().position(|m| m.owner == o) else {
            return Ok((false, none));
        };
        let pass = h.readers_waiting.remove(at).pass;
        let passes = h.readers_waiting.iter().any(|m| m.pass);
        self.owed.retain(|&r| r != o);
        let Some(h) = self.hash() else { return Ok((true, none)) };
        if s.writer.is_some() || s.readers > 0 {
            return Ok((true, none));
        }
        if h.marks.is_empty() && h.readers_waiting.is_empty() {
            self.name = Name::Absent;
            return Ok((true, none));
        }
        if pass && !passes {
            if grants {
                if let Some(handed) = self.hand_to_writer(defect) {
                    return Ok((true, Sides::handed(handed)));
                }
            }
            if listened {
                return Ok((true, Sides::told(true, s.ww, now, false)));
            }
        }
        Ok((true, none))
    }

    /// force_unlock.lua through a plain lock handle (`lockwarden unlock
    /// --force`): a hash with a kind is deleted, the lock's channel told,
    /// and the writers' one for a read-write lock; a semaphore's every
    /// listening client is told (its permits are all free). True when a
    /// hash was deleted; the channels told.
    pub fn force_unlock(&mut self, defect: Option<Defect>) -> (bool, Sides) {
        self.waiting.told.clear();
        let Name::Hash(h) = &self.name else {
            return (false, Sides::default());
        };
        let kind = h.kind;
        self.name = Name::Absent;
        let sides = Sides {
            readers: true,
            writers: kind == Kind::Rw && defect != Some(Defect::ForceTellsReadersOnly),
            handed: None,
        };
        if kind == Kind::Semaphore {
            for client in std::mem::take(&mut self.waiting.list) {
                if self.waiting.subscribed.contains(&client) {
                    self.waiting.told.push((client, Told::Wake));
                }
            }
        } else {
            // wake_next once, as for a reentrant lock: the name's waiters
            // list (one another kind left on the name) has its first
            // client still listening told.
            while !self.waiting.list.is_empty() {
                let client = self.waiting.list.remove(0);
                if self.waiting.subscribed.contains(&client) {
                    self.waiting.told.push((client, Told::Wake));
                    break;
                }
            }
        }
        (true, sides)
    }

    /// force_unlock.lua through a read-write side's handle (ARGV[4] "read"
    /// or "write"): the hash is deleted (as `force_unlock`) only while
    /// that side holds it: a writer's field for the write side, readers'
    /// fields and no writer's for the read side (any owner field still in
    /// the hash counts, its deadline passed or not: the script does not
    /// prune). `Err` for another kind's hash (WRONGKIND, nothing changes)
    /// or a foreign key (WRONGTYPE).
    pub fn force_unlock_side(&mut self, read: bool, defect: Option<Defect>) -> Result<(bool, Sides), ReleaseReply> {
        let h = match &self.name {
            Name::Absent => return Ok((false, Sides::default())),
            Name::Foreign | Name::Stray => return Err(ReleaseReply::WrongType),
            Name::Hash(h) => h,
        };
        if h.kind != Kind::Rw {
            return Err(ReleaseReply::WrongKind);
        }
        let writer = h.holds.iter().any(|x| matches!(x.field, Field::Writer(_)));
        let readers = h.holds.iter().any(|x| matches!(x.field, Field::Reader(_)));
        let held = if read { readers && !writer } else { writer };
        if !held {
            self.waiting.told.clear();
            return Ok((false, Sides::default()));
        }
        Ok(self.force_unlock(defect))
    }

    /// The number of permits in force: the stored one, else the handle's.
    fn total(&self, handle: u32) -> u32 {
        self.number.unwrap_or(handle)
    }

    /// sem_acquire.lua.
    pub fn sem_acquire(&mut self, a: SemAcquire, defect: Option<Defect>) -> AcquireReply {
        self.waiting.told.clear();
        let total = self.total(a.total);
        let before = self.live();
        let check_kind = defect != Some(Defect::SemaphoreIgnoresKind);
        let s = match self.snapshot(Kind::Semaphore, check_kind) {
            Ok(s) => s,
            Err(reply) => return reply,
        };
        let field = Field::Permit(a.permit);
        let client = a.permit / 16;
        let now = self.now;
        let reply = if let Some(x) = self.holding(field) {
            if x.req == Some(a.req) {
                if a.ask.is_some() {
                    // A direct grant to this wait: its lease.
                    if let Some(h) = self.hash() {
                        if let Some(y) = h.holds.iter_mut().find(|y| y.field == field) {
                            y.deadline = y.deadline.max(now + a.lease);
                        }
                    }
                    self.extend(a.lease);
                    self.waiting.asks.retain(|k| k.client != client);
                }
                return AcquireReply::Granted { token: 0, count: 1 };
            }
            self.sem_refuse(&a, s.soonest.unwrap_or(1), defect)
        } else {
            let used: u32 = self
                .live()
                .iter()
                .filter(|x| x.field.is_reader())
                .filter(|x| defect != Some(Defect::CountsOwnClient) || x.field.client() == field.client())
                .map(|x| x.count)
                .sum();
            // Only a listening attempt names its client (ARGV[7]): a try
            // is another client's to a claim.
            let named = (a.mode != Mode::Try).then_some(client);
            let claim = self.claim().filter(|c| Some(c.client) != named);
            if used + a.take > total {
                self.sem_refuse(&a, s.soonest.unwrap_or(1), defect)
            } else if let Some(c) =
                claim.filter(|c| used > 0 && used + a.take + c.need > total && defect != Some(Defect::ClaimIgnored))
            {
                // Another client's claim does not fit beside this take.
                self.sem_refuse(&a, s.soonest.unwrap_or(1).min(c.till - now), defect)
            } else {
                let own = self.claim().is_some_and(|c| Some(c.client) == named);
                self.put(
                    Kind::Semaphore,
                    Holding {
                        field,
                        count: a.take,
                        deadline: now + a.lease,
                        req: Some(a.req),
                    },
                );
                if own {
                    if let Some(h) = self.hash() {
                        h.claim = None;
                    }
                }
                self.check_claim(claim, named.unwrap_or(Owner::MAX), total, used);
                self.cover(&s, a.lease);
                if matches!(a.mode, Mode::WithOthers | Mode::WokenWithOthers) {
                    self.listen(client, a.lease, false);
                }
                if a.ask.is_some() {
                    self.waiting.asks.retain(|k| k.client != client);
                }
                return AcquireReply::Granted { token: 0, count: 1 };
            }
        };
        self.check_waiter(&before);
        reply
    }

    /// sem_release.lua of permit id `p`, for a handle of `total`: the
    /// permits it frees go to the listed clients.
    /// sem_release.lua; `req`: the request whose hold it must be (ARGV[7]),
    /// `None` for whichever.
    pub fn sem_release(&mut self, p: Owner, req: Option<Req>, total: u32, defect: Option<Defect>) -> ReleaseReply {
        self.waiting.told.clear();
        let before = self.live();
        // The claim as the script read it, before the hash may go.
        let claim = self.claim();
        let reply = self.sem_give_back(p, req);
        if reply == ReleaseReply::Left(0) {
            let total = self.total(total);
            self.hand_out(total, claim, defect);
        }
        self.check_release(&before, Field::Permit(p), |_| false);
        reply
    }

    fn sem_give_back(&mut self, p: Owner, req: Option<Req>) -> ReleaseReply {
        let s = match self.snapshot(Kind::Semaphore, true) {
            Ok(s) => s,
            Err(e) => return Self::release_refusal(e),
        };
        let field = Field::Permit(p);
        let Some(held) = self.holding(field) else {
            return ReleaseReply::NotHeld;
        };
        if req.is_some() && held.req != req {
            return ReleaseReply::NotHeld;
        }
        if s.readers <= 1 {
            self.name = Name::Absent;
        } else if let Some(h) = self.hash() {
            h.holds.retain(|x| x.field != field);
        }
        ReleaseReply::Left(0)
    }

    /// sem_leave.lua: a client passes a wake-up on; with `stopped`, the
    /// request and permit id of its wait that stops, which takes its ask
    /// back and gives back a grant it never learned of.
    pub fn sem_leave(&mut self, client: Owner, stopped: Option<(Req, Owner)>, total: u32) {
        self.waiting.told.clear();
        let before = self.live();
        let s = match self.snapshot(Kind::Semaphore, true) {
            Ok(s) => s,
            Err(_) => return,
        };
        let mut claim = self.claim();
        if let Some((req, p)) = stopped {
            self.waiting.asks.retain(|k| k.client != client || k.req != req);
            let field = Field::Permit(p);
            let gone_claim = claim.is_some_and(|c| c.client == client);
            if gone_claim {
                claim = None;
            }
            if self.holding(field).is_some_and(|x| x.req == Some(req)) {
                if s.readers <= 1 {
                    self.name = Name::Absent;
                } else if let Some(h) = self.hash() {
                    h.holds.retain(|x| x.field != field);
                }
            }
            if gone_claim {
                if let Some(h) = self.hash() {
                    h.claim = None;
                }
            }
        }
        let total = self.total(total);
        self.hand_out(total, claim, None);
        let field = Field::Permit(stopped.map_or(Owner::MAX, |x| x.1));
        self.check_release(&before, field, |b| stopped.is_none_or(|(req, _)| b.req != Some(req)));
    }

    /// renew.lua for one hold with a deadline of its own: true when the
    /// field is there with its lease not passed (its deadline then moved
    /// to now + lease when later, the TTL never shortened); a field whose
    /// deadline passed is removed.
    pub fn renew(&mut self, field: Field, lease: i32) -> bool {
        let now = self.now;
        let Some(h) = self.hash() else { return false };
        let Some(i) = h.holds.iter().position(|x| x.field == field) else {
            return false;
        };
        if h.holds[i].deadline <= now {
            h.holds.remove(i);
            return false;
        }
        h.holds[i].deadline = h.holds[i].deadline.max(now + lease);
        h.expires = h.expires.max(now + lease);
        true
    }

    /// `add_permits` / `try_set_permits` (sem_permits.lua) reduced to what
    /// the model needs: the stored number becomes `n`.
    pub fn set_number(&mut self, n: u32) {
        self.number = Some(n);
    }
}

impl Default for Server {
    fn default() -> Server {
        Server::new()
    }
}
