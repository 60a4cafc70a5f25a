//! The network between a client and the server, as every model has it: a
//! client's one call at a time, whose request or reply can be lost, which
//! the client re-sends within its command timeout and gives up on after
//! it; a request given up on while still on its way may reach the server
//! later (its reply unheard), or never.

use super::server::Req;
use super::{KEEP, LEASE, TIMEOUT};

/// Where a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire<R> {
    /// The request is on its way (`first`: never sent before).
    Sent { first: bool },
    /// The script ran; the reply (`R`) is on its way.
    Replied(R),
    /// The request or the reply was lost: the client hears nothing.
    Gone,
}

/// A client's call (`O`: what it asks) to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Call<O, R> {
    pub op: O,
    pub req: Req,
    /// The tick of its first send.
    pub since: i32,
    pub wire: Wire<R>,
}

impl<O, R> Call<O, R> {
    /// A call sent now for the first time.
    pub fn new(op: O, req: Req, now: i32) -> Self {
        Call {
            op,
            req,
            since: now,
            wire: Wire::Sent { first: true },
        }
    }
}

/// A client's calls on the wire: the current one, and a request it gave up
/// on while it was still on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Line<O, R> {
    pub call: Option<Call<O, R>>,
    pub late: Option<Call<O, R>>,
}

impl<O, R> Default for Line<O, R> {
    fn default() -> Self {
        Line { call: None, late: None }
    }
}

/// What the network lets happen next to one client's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Net {
    /// The server runs the request.
    Run,
    /// The client hears the reply.
    Hear,
    /// The request or the reply is lost.
    Lose,
    /// The client sends its unanswered request again.
    Resend,
    /// The client gives up on its call (its command timeout).
    GiveUp,
    /// The request given up on reaches the server, or is lost.
    RunLate,
    LoseLate,
}

impl<O: Copy, R: Copy> Line<O, R> {
    /// The steps the network may take now.
    pub fn offer(&self, now: i32, out: &mut Vec<Net>) {
        if let Some(call) = self.call {
            match call.wire {
                Wire::Replied(_) => out.push(Net::Hear),
                Wire::Gone if now < call.since + TIMEOUT => out.push(Net::Resend),
                // Its command timeout: given up on, answered or not (a
                // request still on its way may come late).
                _ if now >= call.since + TIMEOUT && self.late.is_none() => out.push(Net::GiveUp),
                _ => {}
            }
        }
        // Requests reach the server, late or not; a re-sent one within its
        // replay record's lifetime (the assumption the records are made
        // for).
        if let Some(late) = self.late {
            if matches!(late.wire, Wire::Sent { first: true }) || now < late.since + KEEP {
                out.push(Net::RunLate);
            }
            out.push(Net::LoseLate);
        }
        if let Some(call) = self.call {
            match call.wire {
                Wire::Sent { first } => {
                    if first || now < call.since + KEEP {
                        out.push(Net::Run);
                    }
                    out.push(Net::Lose);
                }
                Wire::Replied(_) => out.push(Net::Lose),
                Wire::Gone => {}
            }
        }
    }

    /// The steps that change only the wire: a loss, a re-send, a late
    /// request lost. The others are the model's (they run scripts, or tell
    /// the client).
    pub fn carry(&mut self, step: Net) {
        match step {
            Net::Lose => {
                if let Some(call) = self.call.as_mut() {
                    call.wire = Wire::Gone;
                }
            }
            Net::Resend => {
                if let Some(call) = self.call.as_mut() {
                    call.wire = Wire::Sent { first: false };
                }
            }
            Net::LoseLate => self.late = None,
            _ => {}
        }
    }

    /// The call given up on: returned, and kept as late while its request
    /// is still on its way.
    pub fn give_up(&mut self) -> Option<Call<O, R>> {
        let call = self.call.take()?;
        if let Wire::Sent { .. } = call.wire {
            self.late = Some(call);
        }
        Some(call)
    }

    /// The late request, taken to run: the request and whether it was
    /// never sent before (`None` if it is not a request on its way).
    pub fn take_late(&mut self) -> Option<(Call<O, R>, bool)> {
        let call = self.late.take()?;
        match call.wire {
            Wire::Sent { first } => Some((call, first)),
            _ => None,
        }
    }

    /// The current request on its way, to run (`first`: never sent before).
    pub fn sent(&self) -> Option<(Call<O, R>, bool)> {
        let call = self.call?;
        match call.wire {
            Wire::Sent { first } => Some((call, first)),
            _ => None,
        }
    }

    /// The reply the server gave, on its way back.
    pub fn reply(&mut self, reply: R) {
        if let Some(call) = self.call.as_mut() {
            call.wire = Wire::Replied(reply);
        }
    }

    /// The reply heard: the call is over.
    pub fn heard(&mut self) -> Option<(Call<O, R>, R)> {
        let call = self.call?;
        let Wire::Replied(reply) = call.wire else { return None };
        self.call = None;
        Some((call, reply))
    }

    /// Times made relative to `n` (see the models' `shift`): a send time
    /// so far back that it no longer changes what may happen is clamped.
    pub fn shift(&mut self, n: i32) {
        if let Some(call) = self.call.as_mut() {
            call.since = (call.since - n).max(-LEASE);
        }
        if let Some(call) = self.late.as_mut() {
            call.since = (call.since - n).max(-KEEP);
        }
    }

    /// Whether the current call is `op`-like, by a test on its op.
    pub fn calls(&self, is: impl Fn(&O) -> bool) -> bool {
        self.call.as_ref().is_some_and(|c| is(&c.op))
    }
}
