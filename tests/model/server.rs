//! The server side of the model: one master's keys for one reentrant lock
//! name, and each script of the reentrant lock as one atomic step making
//! the decisions `lua/acquire_free.lua` + `lua/acquire.lua`,
//! `lua/release_last.lua` + `lua/release.lua` and `lua/renew.lua` make
//! for a caller that only tries (no waiters list, no grant asks).
//!
//! Time is a whole number of ticks that only moves forward
//! ([`Server::advance`]); a key whose deadline is reached is gone, as
//! Redis's expiry makes it. `tests/differential.rs` holds these functions
//! to the real scripts on a real server, reply by reply and key by key.

/// Where every fencing counter the server starts lies: the counter's
/// `n`-th start (after a loss) is at `n * EPOCH`. The real counter starts
/// at the server's clock in microseconds; the README's assumption (the
/// clock moves forward faster than tokens are handed out) is what makes
/// each start above every token before it, and this is that assumption.
pub const EPOCH: u64 = 1_000_000;

/// An owner: the client and its task, `"<client-uuid>:<owner-id>"` in
/// Redis.
pub type Owner = u8;

/// A request id: names the request's replay record.
pub type Req = u32;

/// The lock's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Absent,
    /// A lock hash: one owner's field and the hold's own fields.
    Hold(Hold),
    /// A string some other program wrote at the lock's name.
    Foreign,
}

/// A reentrant hold: the hash's owner field (`count`), `:token`, `:take`
/// (the record key of the request whose take made it) and the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub owner: Owner,
    pub count: u32,
    pub token: u64,
    pub take: Req,
    /// The tick the key expires at.
    pub expires: i32,
}

/// What a replay record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recorded {
    /// A re-entry's reply, `"<token>:<count>"`.
    Entered { token: u64, count: u32 },
    /// A release's reply: the levels left.
    Left(u32),
    /// A fair lock's direct grant to the request, `"<token>:1:g"`.
    Granted { token: u64 },
    /// A grant its waiter gave back when it left the queue, `"left"`.
    GaveBack,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub req: Req,
    pub value: Recorded,
    pub expires: i32,
}

/// A lock's fencing counter (a string key without TTL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counter {
    /// `None` when lost (or never made).
    pub value: Option<u64>,
    /// How many times it has started (the clock's reading in [`EPOCH`]s at
    /// its next start).
    pub starts: u64,
    /// Ghosts: the highest token handed out, and whether one was not above
    /// it.
    pub max_token: u64,
    pub went_back: bool,
}

impl Counter {
    /// `next_token` of shared.lua: INCR, and a counter that did not exist
    /// starts at the clock (`at_one`: the defect of starting at 1).
    pub fn next(&mut self, at_one: bool) -> u64 {
        let token = match self.value {
            Some(t) => t + 1,
            None => {
                self.starts += 1;
                if at_one {
                    1
                } else {
                    self.starts * EPOCH
                }
            }
        };
        self.value = Some(token);
        if token <= self.max_token {
            self.went_back = true;
        }
        self.max_token = self.max_token.max(token);
        token
    }
}

/// The reply recorded for request `req`, if its record lives.
pub fn recorded(records: &[Record], req: Req) -> Option<Recorded> {
    records.iter().find(|r| r.req == req).map(|r| r.value)
}

/// Records `value` for `req` until the tick `expires` (a SET ... PX).
pub fn set_record(records: &mut Vec<Record>, req: Req, value: Recorded, expires: i32) {
    records.retain(|r| r.req != req);
    records.push(Record { req, value, expires });
    records.sort_by_key(|r| r.req);
}

/// What the acquire script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    /// The bare token (acquire_free.lua's reply: a first send that found
    /// the lock free).
    Fresh(u64),
    /// `{1, token, count}`.
    Held { token: u64, count: u32 },
    /// `{0, pttl}`: another owner's, `pttl` ticks left.
    Refused { pttl: i32 },
    /// `WRONGTYPE string 1`.
    WrongType,
}

/// A release call's arguments.
#[derive(Clone, Copy, Debug)]
pub struct ReleaseCall {
    pub owner: Owner,
    pub req: Req,
    /// The hold's token (`None`: unknown, ARGV[4] = "").
    pub token: Option<u64>,
    /// The lease re-applied while levels remain (0: none).
    pub relet: i32,
    /// The replay record's lifetime.
    pub keep: i32,
    /// Never sent before (ARGV[5] = "1").
    pub first: bool,
}

/// What the release script answers: `0` released, `n > 0` levels left,
/// `-1` not this hold, or `WRONGTYPE string 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    Left(u32),
    NotHeld,
    WrongType,
}

/// A defect the model can be given back, to show that the checker finds
/// what each property is there to find (each was a real defect of this
/// kind of lock, here or in other libraries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// A lost counter starts again at 1 (not at the clock): tokens go back
    /// after FLUSHALL.
    CounterRestartsAtOne,
    /// The renewal writes the owner's field back when it is gone, so a
    /// lost hold comes back over the next holder's.
    RenewRecreates,
    /// A refused acquire sets the lock's lease (a waiter's mark that
    /// extended the holder's lease).
    RefusalExtends,
    /// The release does not compare the hold's token: a stale release
    /// frees a newer hold of the same owner.
    ReleaseIgnoresToken,
    /// A re-entry records no reply: its re-send enters once more.
    ReentryUnrecorded,
    /// The acquire takes over a key it does not recognise.
    OverwritesForeign,
    /// The client dates its validity from the reply, not from the send.
    ValidityFromReply,
}

/// One master's keys for the lock's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: i32,
    pub lock: Key,
    pub counter: Counter,
    pub records: Vec<Record>,
    /// Ghosts (what the properties read; never read by a script):
    /// A script wrote the foreign key.
    pub foreign_written: bool,
    /// A refused acquire moved the holder's lease.
    pub refusal_moved_lease: bool,
    /// A release changed a hold that was not the caller's.
    pub freed_another: bool,
}

impl Server {
    pub fn new() -> Server {
        Server {
            now: 0,
            lock: Key::Absent,
            counter: Counter::default(),
            records: Vec::new(),
            foreign_written: false,
            refusal_moved_lease: false,
            freed_another: false,
        }
    }

    /// The clock moves on by `ticks`; keys whose deadline came are gone.
    pub fn advance(&mut self, ticks: i32) {
        self.now += ticks;
        if let Key::Hold(h) = self.lock {
            if h.expires <= self.now {
                self.lock = Key::Absent;
            }
        }
        let now = self.now;
        self.records.retain(|r| r.expires > now);
    }

    /// The server's clock jumps `ticks` ahead (set back when negative)
    /// while the clients' clocks run on: every deadline it keeps (a key's
    /// TTL, a record's) comes that much sooner by the clients' clocks, or
    /// later; keys whose deadline then came are gone. The fencing
    /// counter's next start is not moved: a jump back smaller than the
    /// time since the counter started keeps it above every token (the
    /// README's clock assumption).
    pub fn jump(&mut self, ticks: i32) {
        if let Key::Hold(h) = &mut self.lock {
            h.expires -= ticks;
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
        if let Key::Hold(h) = &mut self.lock {
            h.expires -= n;
        }
        for r in &mut self.records {
            r.expires -= n;
        }
    }

    /// FLUSHALL, or a restart without persistence.
    pub fn flush(&mut self) {
        self.lock = Key::Absent;
        self.counter.value = None;
        self.records.clear();
    }

    fn record(&self, req: Req) -> Option<Recorded> {
        recorded(&self.records, req)
    }

    fn set_record(&mut self, req: Req, value: Recorded, keep: i32) {
        set_record(&mut self.records, req, value, self.now + keep);
    }

    fn next_token(&mut self, defect: Option<Defect>) -> u64 {
        self.counter.next(defect == Some(Defect::CounterRestartsAtOne))
    }

    /// acquire_free.lua + acquire.lua, for a caller that only tries.
    /// `first`: the request was never sent before (ARGV[4] = "1").
    pub fn acquire(
        &mut self,
        owner: Owner,
        req: Req,
        lease: i32,
        keep: i32,
        first: bool,
        defect: Option<Defect>,
    ) -> AcquireReply {
        let before = self.lock;
        if let (Key::Absent, true) = (self.lock, first) {
            let token = self.take(owner, req, lease, defect);
            return AcquireReply::Fresh(token);
        }
        if !first {
            if let Some(Recorded::Entered { token, count }) = self.record(req) {
                return AcquireReply::Held { token, count };
            }
            if let Key::Hold(h) = self.lock {
                if h.take == req {
                    return AcquireReply::Held {
                        token: h.token,
                        count: 1,
                    };
                }
            }
        }
        match self.lock {
            Key::Absent => {
                let token = self.take(owner, req, lease, defect);
                AcquireReply::Held { token, count: 1 }
            }
            Key::Foreign if defect == Some(Defect::OverwritesForeign) => {
                self.foreign_written = true;
                let token = self.take(owner, req, lease, defect);
                AcquireReply::Held { token, count: 1 }
            }
            Key::Foreign => AcquireReply::WrongType,
            Key::Hold(mut h) if h.owner == owner => {
                h.count += 1;
                h.expires = h.expires.max(self.now + lease);
                self.lock = Key::Hold(h);
                if defect != Some(Defect::ReentryUnrecorded) {
                    self.set_record(
                        req,
                        Recorded::Entered {
                            token: h.token,
                            count: h.count,
                        },
                        keep,
                    );
                }
                AcquireReply::Held {
                    token: h.token,
                    count: h.count,
                }
            }
            Key::Hold(mut h) => {
                if defect == Some(Defect::RefusalExtends) {
                    h.expires = h.expires.max(self.now + lease);
                    self.lock = Key::Hold(h);
                }
                if self.lock != before {
                    self.refusal_moved_lease = true;
                }
                AcquireReply::Refused {
                    pttl: h.expires - self.now,
                }
            }
        }
    }

    fn take(&mut self, owner: Owner, req: Req, lease: i32, defect: Option<Defect>) -> u64 {
        let token = self.next_token(defect);
        self.lock = Key::Hold(Hold {
            owner,
            count: 1,
            token,
            take: req,
            expires: self.now + lease,
        });
        token
    }

    /// release_last.lua + release.lua: one level of a hold left.
    pub fn release(&mut self, call: ReleaseCall, defect: Option<Defect>) -> ReleaseReply {
        let before = self.lock;
        let reply = self.leave_level(call, defect);
        if let Key::Hold(h) = before {
            let theirs = h.owner != call.owner || call.token.is_some_and(|t| t != h.token);
            if theirs && self.lock != before {
                self.freed_another = true;
            }
        }
        reply
    }

    fn leave_level(&mut self, call: ReleaseCall, defect: Option<Defect>) -> ReleaseReply {
        let ReleaseCall {
            owner,
            req,
            token,
            relet,
            keep,
            first,
        } = call;
        if !first {
            if let Some(Recorded::Left(n)) = self.record(req) {
                return ReleaseReply::Left(n);
            }
        }
        let mut h = match self.lock {
            Key::Foreign => return ReleaseReply::WrongType,
            Key::Hold(h) if h.owner == owner => h,
            _ => return ReleaseReply::NotHeld,
        };
        if let Some(t) = token {
            if t != h.token && defect != Some(Defect::ReleaseIgnoresToken) {
                return ReleaseReply::NotHeld;
            }
        }
        if h.count > 1 {
            h.count -= 1;
            if relet > 0 {
                h.expires = h.expires.max(self.now + relet);
            }
            self.lock = Key::Hold(h);
            self.set_record(req, Recorded::Left(h.count), keep);
            return ReleaseReply::Left(h.count);
        }
        self.lock = Key::Absent;
        if token.is_none() {
            self.set_record(req, Recorded::Left(0), keep);
        }
        ReleaseReply::Left(0)
    }

    /// renew.lua for one reentrant hold: true when the owner's field is
    /// there (its lease is then set, never shortened).
    pub fn renew(&mut self, owner: Owner, lease: i32, defect: Option<Defect>) -> bool {
        match self.lock {
            Key::Hold(mut h) if h.owner == owner => {
                h.expires = h.expires.max(self.now + lease);
                self.lock = Key::Hold(h);
                true
            }
            Key::Hold(mut h) if defect == Some(Defect::RenewRecreates) => {
                // The defect: the field is written back over the hash,
                // which another owner now holds.
                h.owner = owner;
                h.expires = h.expires.max(self.now + lease);
                self.lock = Key::Hold(h);
                true
            }
            _ => false,
        }
    }
}

impl Default for Server {
    fn default() -> Server {
        Server::new()
    }
}
