//! The one wait loop of every lock kind, and the small policy trait through
//! which a kind shapes it.
//!
//! A wait makes a first attempt without subscribing (the uncontended path is
//! a single script call), then listens on its channel and alternates
//! attempts with sleeps. A sleep ends at the first wake message or when the
//! holder's remaining lease runs out, whichever comes first, so a lost
//! message only delays. Retryable failures pause with a backoff (see
//! [`Retries`]); a split between contenders pauses at random. A kind adds
//! what it needs through [`Policy`]: the reentrant lock takes every default,
//! the fair lock (`crate::fair`) keeps its place in a queue and takes direct
//! grants.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::Str;
use crate::owner::OwnerPin;
use crate::protocol::LockKeys;
use crate::protocol::Waiting;
use crate::pubsub::Interest;
pub(crate) use crate::quorum::Refusal;
use crate::quorum::{Ask, Attempt, Grant};
use crate::runtime::{Backoff, DropGuard, Undo};
use crate::settings::Lease;

/// The lock a wait is for: the client's core and the lock's keys.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) core: &'a Arc<Core>,
    pub(crate) keys: &'a Arc<LockKeys>,
}

impl<'a> Target<'a> {
    pub(crate) fn labels(&self) -> crate::observe::Labels<'a> {
        crate::observe::Labels::of(
            self.keys.kind.label(),
            &self.keys.name,
            self.core.settings.metric_lock_names,
        )
    }
}

/// What a kind adds to each acquire request of a wait.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// The wait goes on if this attempt is refused: join (or refresh a
    /// place in) the lock's queue, or have the unlock publish.
    pub(crate) waiting: Waiting,
    /// Ask for direct grants: the wait's request id, and its wake id.
    pub(crate) grant_to: Option<(&'a str, &'a str)>,
    /// The id whose wake channel the wait listens on, when an unlock
    /// wakes one client by it (the reentrant lock: the client's).
    pub(crate) wake: Option<&'a str>,
    /// A reentrant lock's wait asks for direct grants (`grant_to` names its
    /// request): their first lease.
    pub(crate) grant_lease: Option<Duration>,
    /// The request id was sent by an earlier attempt of this wait.
    pub(crate) sent_before: bool,
}

/// What a wait does about a wake message ([`Policy::on_wake`]).
pub(crate) enum Wake {
    /// The message handed this wait the lock.
    Granted(LockGuard),
    /// It tries again at once.
    Attempt,
    /// Nothing for this wait (a message meant for an earlier wait on the
    /// same channel): it sleeps on until the time it was going to wake at,
    /// without an attempt.
    Stale,
}

/// Where a wait listens ([`Policy::channel`]).
pub(crate) enum Channel {
    /// A subscription still open (from an earlier wait): the wait listens
    /// from before its first attempt.
    Open(Interest),
    /// The channel to subscribe to after the first refusal.
    Named(Str),
}

/// A wake message as [`Policy::on_wake`] sees it.
pub(crate) struct Message<'a> {
    pub(crate) pin: &'a OwnerPin,
    pub(crate) lease: Lease,
    /// The latest message that said more than "wake up", as the subscriber
    /// kept it.
    pub(crate) payload: Option<String>,
    /// When the wait's last attempt was sent.
    pub(crate) sent_at: Instant,
    /// That attempt's number (see `protocol::Acquire::attempt`): a grant
    /// message naming another attempt is not the lock by itself.
    pub(crate) attempt: u64,
}

/// How an attempt, or the wait, ended ([`Policy::on_outcome`]).
pub(crate) enum Outcome<'a> {
    /// Granted; its guard is made next.
    Granted(&'a Grant),
    /// The attempt failed (retried, or returned).
    Failed(&'a Error),
    /// Masters split between contenders (each gave its part back); the
    /// wait pauses at random before its next attempt.
    Split,
    /// The wait ends without the lock (its deadline passed).
    GaveUp,
}

/// The six hooks through which a lock kind shapes [`wait`]. Every default
/// is the behaviour of a plain wait on the lock's channel.
pub(crate) trait Policy: Send {
    /// Where the wait listens, asked once before its first attempt: by
    /// default the lock's channel, which every unlock publishes on,
    /// subscribed after the first refusal.
    fn channel(&mut self, t: Target<'_>) -> Channel {
        Channel::Named(t.keys.channel.clone())
    }

    /// Each turn of the loop starts here, before its attempt; the wait
    /// listens on `interest`. `first`: on the first turn, whether the wait
    /// has listened since before the first attempt. Answers whether the
    /// last answer still stands, so the turn makes no attempt.
    fn turn(
        &mut self,
        _t: Target<'_>,
        _interest: &Interest,
        _first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        async { Ok(false) }
    }

    /// What the next attempt adds to its request.
    fn request(&self) -> Request<'_> {
        Request::default()
    }

    /// How long to sleep after `refusal` (not after a split); `bound` is
    /// the default, the holders' remaining lease.
    fn pause(&mut self, _refusal: &Refusal, bound: Duration) -> Duration {
        bound
    }

    /// A wake message arrived: what the wait does about it.
    fn on_wake(&mut self, _message: Message<'_>) -> Wake {
        Wake::Attempt
    }

    /// How an attempt, or the wait, ended: what the kind settles then
    /// (its queue place, its mark, a wake-up it owes).
    fn on_outcome(&mut self, _t: Target<'_>, _outcome: Outcome<'_>) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The reentrant lock's policy: every default, but that the attempts made
/// while listening on the lock's channel say so, so that the unlock
/// publishes (an unlock publishes only when a listening waiter was
/// refused; the first attempt, made before subscribing, is not one).
#[derive(Default)]
pub(crate) struct Reentrant {
    listening: bool,
    shared: bool,
}

impl Policy for Reentrant {
    fn request(&self) -> Request<'_> {
        let waiting = match (self.listening, self.shared) {
            (false, _) => Waiting::No,
            (true, false) => Waiting::Listening,
            (true, true) => Waiting::WithOthers,
        };
        Request {
            waiting,
            ..Request::default()
        }
    }

    fn turn(
        &mut self,
        _t: Target<'_>,
        interest: &Interest,
        _first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.listen(interest);
        async { Ok(false) }
    }
}

impl Reentrant {
    /// The attempts from now on are made while listening on `interest`.
    fn listen(&mut self, interest: &Interest) {
        self.listening = true;
        self.shared = interest.shared();
    }
}

/// The reentrant lock's policy, and the semaphore's: [`Reentrant`]'s, on a
/// wake channel of the client's own, so that an unlock wakes one client
/// rather than every client with a wait (`lua/shared_wake.lua`; a
/// semaphore's release wakes one per permit it frees,
/// `lua/shared_permits.lua`). The unlock's one wake-up
/// must not be lost on the way: a client that gets it with no wait left to
/// take it passes it on (the channel's relay), and so does a client whose
/// last wait is dropped or fails after listening, since that wait may have
/// taken it without an attempt after it.
///
/// On one master (and without replica or disk confirmations, which only
/// the waiter's own write could wait for) a wait that is its client's
/// only one on the lock also asks to be handed the lock: the unlock that
/// would wake its client makes the hold the wait's attempt would have
/// made and says so in the message, which saves the attempt's round trip
/// (`lua/shared_wake.lua`). The wait keeps one request id for its attempts
/// (each after the first sent as a re-send), so a grant whose message is
/// lost is found by its next attempt; stopping without the lock, it takes
/// its ask back and gives back a grant it never learned of.
pub(crate) struct WakeOne {
    inner: Reentrant,
    core: Arc<Core>,
    keys: Arc<LockKeys>,
    channel: Str,
    /// Armed while the wait has listened and not taken the lock: when it
    /// stops, the wake-up it may have taken is passed on (and, when it
    /// asked for grants, its ask and any grant taken back).
    pass_on: LeaveOnExit,
    /// The wait may ask for direct grants; its request id once it listens
    /// (made then: an uncontended lock never needs one), and the grants'
    /// first lease.
    grants: bool,
    request: Option<String>,
    grant_lease: Duration,
    /// An attempt carried `request` (an ask, or a grant to it, may exist).
    asked: std::sync::atomic::AtomicBool,
    /// The last attempt failed (it used no wake-up).
    failed: bool,
    /// A wake-up came since the last attempt; `woken_now`: the next
    /// attempt was made for one.
    woken: bool,
    woken_now: bool,
    /// A semaphore's wait: at the front of the line it holds a claim,
    /// which its attempts keep alive.
    claims: bool,
}

impl WakeOne {
    /// The wait of `owner` (its client's own owners only ask for grants);
    /// `will_wait`: more than one attempt, with `lease`.
    pub(crate) fn new(t: Target<'_>, channel: &Str, owner: &Str, will_wait: bool, lease: Lease) -> WakeOne {
        let core = t.core;
        let grant_lease = grant_lease(t, owner, will_wait, lease);
        let grants = grant_lease.is_some();
        let anyone = Str::from_static("");
        let pass_on = LeaveOnExit::leave(t, if grants { owner } else { &anyone }, false);
        WakeOne {
            inner: Reentrant::default(),
            core: core.clone(),
            keys: t.keys.clone(),
            channel: channel.clone(),
            pass_on,
            grants,
            request: None,
            grant_lease: grant_lease.unwrap_or_default(),
            asked: std::sync::atomic::AtomicBool::new(false),
            failed: false,
            woken: false,
            woken_now: false,
            claims: false,
        }
    }

    /// A semaphore's wait (see [`WakeOne::pause`]).
    pub(crate) fn renewing_claims(mut self) -> WakeOne {
        self.claims = true;
        self
    }

    fn asked(&self) -> bool {
        self.asked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether this wait is (or was, if it left already) its client's last
    /// on the channel.
    fn last(&self) -> bool {
        self.core.pubsub.listeners(&self.channel) <= 1
    }

    /// Listens from now on: a message that finds no wait of the client is
    /// passed on, on the master it came from.
    fn listen(&mut self, interest: &Interest) {
        self.inner.listen(interest);
        self.pass_on.arm();
        if self.grants && self.request.is_none() {
            self.request = Some(crate::keys::fresh_request_id());
            self.pass_on.request = self.request.clone();
        }
        interest.relay_with(|| {
            // The masters, not the core: the relay outlives the core while
            // the client closes (`PubSub::quit_passing_on`).
            let members = self.core.members.clone();
            let keys = self.keys.clone();
            Arc::new(move |master: usize| {
                let (member, keys) = (members.get(master).cloned(), keys.clone());
                Box::pin(async move {
                    let Some(member) = member else { return };
                    if let Err(e) = member.node.leave(&keys, &Str::from_static(""), None, &[]).await {
                        tracing::debug!(lock = %keys.name, error = %e, "passing a wake-up on failed; the waiters wake at their lease bound");
                    }
                })
            })
        });
    }
}

impl Policy for WakeOne {
    /// The client's channel may still be subscribed (another wait, or a
    /// recent one): the first attempt then listens, and its refusal puts
    /// the client in the waiters list at once.
    fn channel(&mut self, t: Target<'_>) -> Channel {
        match t.core.pubsub.interest_if_subscribed(&self.channel) {
            Some(interest) => {
                self.listen(&interest);
                Channel::Open(interest)
            }
            None => Channel::Named(self.channel.clone()),
        }
    }

    /// A first attempt made while listening was refused with the client
    /// put in the waiters list: the unlock wakes it.
    fn turn(
        &mut self,
        _t: Target<'_>,
        interest: &Interest,
        first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.listen(interest);
        self.failed = false;
        self.woken_now = std::mem::take(&mut self.woken);
        async move { Ok(first == Some(true)) }
    }

    fn request(&self) -> Request<'_> {
        let mut request = Request {
            wake: Some(&self.core.uuid),
            ..self.inner.request()
        };
        if self.woken_now {
            let others = request.waiting == Waiting::WithOthers;
            request.waiting = Waiting::Woken { others };
        }
        if let (Some(id), true) = (&self.request, request.waiting.waits()) {
            request.grant_to = Some((id, &self.core.uuid));
            request.grant_lease = Some(self.grant_lease);
            request.sent_before = self.asked.swap(true, std::sync::atomic::Ordering::Relaxed);
        }
        request
    }

    /// A listed client also looks again on its own, the client's wake
    /// patience per place from the front of the line (see
    /// `ClientBuilder::wake_patience`): an unlock wakes one client, which
    /// may be unable to act on it. A semaphore's waiter at the front looks
    /// at least every third of the waiter timeout: it holds a claim of that
    /// length there, which its attempts renew (`lua/sem_acquire.lua`).
    fn pause(&mut self, refusal: &Refusal, bound: Duration) -> Duration {
        match refusal.place {
            Some(0) if self.claims => bound
                .min(patience_at(self.core.settings.wake_patience, 0))
                .min(self.core.settings.waiter_timeout / 3),
            Some(place) => bound.min(patience_at(self.core.settings.wake_patience, place)),
            None => bound,
        }
    }

    /// A grant to this wait's request is its lock; a grant to another
    /// request (another wait of the client, which takes it from its next
    /// attempt) wakes this one as any message.
    fn on_wake(&mut self, m: Message<'_>) -> Wake {
        let grant = m.payload.as_deref().and_then(parse_grant);
        if let (Some((token, ms, rec, n)), Some(id)) = (grant, &self.request) {
            if self.asked() && rec == &*crate::protocol::record(&self.keys, id) {
                let t = Target {
                    core: &self.core,
                    keys: &self.keys,
                };
                if let Some(guard) = claim_grant(t, &m, id, token, ms, n) {
                    self.pass_on.disarm();
                    return Wake::Granted(guard);
                }
            }
        }
        self.woken = true;
        Wake::Attempt
    }

    /// Granted, nothing is owed. Nothing either when the wait gives up
    /// right after an answered attempt, which used any wake-up it had
    /// (refused, it put its client back in the list), unless it asked for
    /// grants; after a failed one the drop passes it on. When an attempt's
    /// outcome is unknown, the quorum layer re-sends it in the background
    /// and gives back whatever it got, a grant to it included: the wait
    /// goes on under a fresh id.
    fn on_outcome(&mut self, _t: Target<'_>, outcome: Outcome<'_>) -> impl Future<Output = ()> + Send {
        match outcome {
            Outcome::Granted(_) => self.pass_on.disarm(),
            Outcome::Failed(e) => {
                self.failed = true;
                if self.request.is_some() && e.is_outcome_unknown() {
                    self.request = Some(crate::keys::fresh_request_id());
                    self.pass_on.request = self.request.clone();
                    self.asked.store(false, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Outcome::GaveUp if !self.failed && !self.asked() => self.pass_on.disarm(),
            Outcome::GaveUp | Outcome::Split => {}
        }
        async {}
    }
}

impl Drop for WakeOne {
    /// Another wait of the client on the channel uses the wake-up: nothing
    /// to pass on (the guard's drop, after this, passes it on otherwise),
    /// unless this wait asked for grants.
    fn drop(&mut self) {
        if !self.last() && !self.asked() {
            self.pass_on.disarm();
        }
    }
}

/// Whether a wait of `owner` with `lease` may ask to be handed the lock by
/// an unlock (`will_wait`: it makes more than one attempt), and if so the
/// grant's first lease. A grant is written by the unlock, so only on one
/// master and without replica or disk confirmations (only the waiter's own
/// write could be waited for), and only for the client's own owners. The
/// first lease is the waiter timeout at most: a grantee that stopped holds
/// the lock no longer than a stopped fair waiter stays at the head of its
/// queue (or a writer's mark holds readers back).
pub(crate) fn grant_lease(t: Target<'_>, owner: &Str, will_wait: bool, lease: Lease) -> Option<Duration> {
    let core = t.core;
    let own = owner
        .strip_prefix(&*core.uuid)
        .is_some_and(|rest| rest.starts_with(':'));
    let grants = will_wait && own && core.members.len() == 1 && !core.settings.confirmed_writes;
    let lease = match lease {
        Lease::Watchdog => core.settings.watchdog_lease,
        Lease::Fixed(d) => d,
    };
    grants.then(|| lease.min(core.settings.waiter_timeout))
}

/// The policy of the read-write lock's readers (and of Redisson's layouts,
/// whose unlocks publish on the lock's channel): the reentrant lock's, but
/// a message wakes every wait of the client on the lock, not one. Several may get in
/// together, and a wait refused for a reason no release will clear (a
/// reader behind a writer's mark) must not take the only wake-up from a
/// wait that could go in.
pub(crate) struct Shared {
    inner: Reentrant,
    /// More than one attempt: the first may listen.
    will_wait: bool,
}

impl Shared {
    /// `will_wait`: the wait makes more than one attempt.
    pub(crate) fn new(will_wait: bool) -> Shared {
        Shared {
            inner: Reentrant::default(),
            will_wait,
        }
    }

    /// `name`, open when this client has it subscribed still (another wait
    /// listens, or one just ended): the first attempt then listens, so its
    /// refusal marks the hold it finds and stands (one attempt, where a
    /// wait that subscribes after its first attempt makes two). Only for
    /// a wait: a single try is made without listening.
    fn open(&mut self, t: Target<'_>, name: &Str) -> Channel {
        if self.will_wait {
            if let Some(interest) = t.core.pubsub.interest_if_subscribed(name) {
                interest.wake_every_wait();
                self.inner.listen(&interest);
                return Channel::Open(interest);
            }
        }
        Channel::Named(name.clone())
    }
}

impl Policy for Shared {
    fn channel(&mut self, t: Target<'_>) -> Channel {
        self.open(t, &t.keys.channel)
    }

    fn request(&self) -> Request<'_> {
        self.inner.request()
    }

    /// A first attempt made while listening was refused with the hold
    /// marked: the release tells this client.
    fn turn(
        &mut self,
        _t: Target<'_>,
        interest: &Interest,
        first: Option<bool>,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.inner.listen(interest);
        interest.wake_every_wait();
        async move { Ok(first == Some(true)) }
    }
}

/// The wait's first attempt, made before it subscribes (the uncontended
/// path is one call): the guard, or the refusal with, when the attempt
/// was answered, whether it stands for the loop's first turn (made
/// listening on `channel`, and not told since). A failure pauses first;
/// nothing is known of the lock then, and the first turn makes a full
/// attempt.
async fn first_attempt<P: Policy>(
    t: Target<'_>,
    pin: &OwnerPin,
    lease: Lease,
    policy: &mut P,
    channel: &Channel,
    retries: &mut Retries<'_>,
) -> Result<std::result::Result<LockGuard, (Refusal, Option<bool>)>> {
    // A message that wakes every wait of the client (`Shared`) is not kept
    // for a wait that was not registered when it came: one that comes
    // between this attempt and the loop's registration is seen here. (A
    // wake-one channel keeps its message for the next registration.)
    let mut early = match channel {
        Channel::Open(interest) if interest.wakes_every_wait() => Some(Box::pin(interest.notified())),
        _ => None,
    };
    if let Some(n) = early.as_mut() {
        n.as_mut().enable();
    }
    match attempt(t, pin, lease, policy, 1).await {
        Ok(Ok(guard)) => Ok(Ok(guard)),
        Ok(Err(refusal)) => {
            let told = early.is_some_and(|n| n.now_or_never().is_some());
            let stands = matches!(channel, Channel::Open(_)) && !told;
            Ok(Err((refusal, Some(stands))))
        }
        Err(e) => {
            policy.on_outcome(t, Outcome::Failed(&e)).await;
            tokio::time::sleep(retries.after(e)?).await;
            Ok(Err((Refusal::default(), None)))
        }
    }
}

/// Waits for the lock until `deadline` (`None`: without end), shaped by
/// `policy`. Returns the guard, `None` when the deadline passed with the
/// lock held by others, or the error that ended the wait.
///
/// Cancel safe: an attempt's levels are given back if it is dropped (see
/// `quorum::acquire`), and the policy's drop undoes what it joined.
pub(crate) async fn wait<P: Policy>(
    t: Target<'_>,
    pin: &OwnerPin,
    lease: Lease,
    deadline: Option<Instant>,
    mut policy: P,
) -> Result<Option<LockGuard>> {
    // A waiter whose channel is still subscribed keeps it from before its
    // first attempt: any grant after that attempt then reaches it.
    let channel = policy.channel(t);
    let first_sent = Instant::now();
    let mut retries = Retries::new(t, deadline);
    let mut attempts = 1;
    let (first_refusal, mut first) = match first_attempt(t, pin, lease, &mut policy, &channel, &mut retries).await? {
        Ok(guard) => return Ok(Some(guard)),
        Err(refused) => refused,
    };
    if deadline.is_some_and(|d| Instant::now() >= d) {
        policy.on_outcome(t, Outcome::GaveUp).await;
        return retries.at_deadline();
    }
    // Named only now: the uncontended path never needs the channel.
    let interest = match channel {
        Channel::Open(interest) => interest,
        Channel::Named(name) => t.core.pubsub.interest(&name),
    };
    if !subscribe(&interest, &mut retries, deadline).await? {
        policy.on_outcome(t, Outcome::GaveUp).await;
        return retries.at_deadline();
    }
    let mut split_backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
    let _waiting = crate::observe::Waiting::enter(&t.core.waiting_gauge);
    let mut sent_at = first_sent;
    loop {
        // Registered before the attempt: an unlock landing between the
        // attempt and the sleep still wakes us. (The first attempt above
        // ran before the subscription existed, so it is not enough.)
        let notified = interest.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let unchanged = policy.turn(t, &interest, first.take()).await;
        let outcome = match unchanged {
            Ok(true) => Ok(Err(first_refusal)),
            Ok(false) => {
                sent_at = Instant::now();
                attempts += 1;
                attempt(t, pin, lease, &mut policy, attempts).await
            }
            Err(e) => Err(e),
        };
        // A retryable failure pauses (backing off) and tries again, until
        // the deadline or the client's retry limit: a blip must not end a
        // wait that has time left.
        let (refusal, failed) = match outcome {
            Ok(Ok(guard)) => return Ok(Some(guard)),
            Ok(Err(refusal)) => {
                retries.answered();
                (refusal, None)
            }
            Err(e) => {
                policy.on_outcome(t, Outcome::Failed(&e)).await;
                (Refusal::default(), Some(retries.after(e)?))
            }
        };
        let Some(turn) = plan(t, &mut policy, &refusal, failed, &mut split_backoff, deadline).await else {
            policy.on_outcome(t, Outcome::GaveUp).await;
            return retries.at_deadline();
        };
        if turn.deaf {
            // Not woken by messages: after a split, the unlock message of
            // our own give-back (and every other contender's) would end the
            // pause at once, and the attempts would spin; after a failure, a
            // message says nothing about when Redis will answer again. An
            // unlock during the pause waits for its end.
            tokio::time::sleep(turn.sleep).await;
            continue;
        }
        let woke = Woke {
            t,
            pin,
            lease,
            interest: &interest,
            sent_at,
            attempt: attempts,
        };
        if let Some(guard) = woke.sleep(&mut policy, notified, &turn).await {
            return Ok(Some(guard));
        }
    }
}

/// Subscribes `interest`, retrying failures like an attempt; `false` when
/// the deadline passed first.
async fn subscribe(interest: &Interest, retries: &mut Retries<'_>, deadline: Option<Instant>) -> Result<bool> {
    let subscribed = async {
        loop {
            match interest.ready().await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let pause = retries.after(e)?;
                    tokio::time::sleep(pause).await;
                }
            }
        }
    };
    match deadline {
        Some(d) => match tokio::time::timeout_at(d.into(), subscribed).await {
            Ok(r) => r.map(|()| true),
            Err(_) => Ok(false),
        },
        None => subscribed.await.map(|()| true),
    }
}

/// How a waiting turn sleeps after a refusal.
struct Turn {
    sleep: Duration,
    /// The kind wakes the wait before the lease bound to look again on its
    /// own (a fair waiter's refresh, a writer's mark, the wake patience).
    recheck: bool,
    /// Deaf to messages (after a split or a failure).
    deaf: bool,
}

/// The sleep after `refusal` (or, with `failed`, after a retryable failure
/// and its pause); `None` when the deadline has passed.
async fn plan<P: Policy>(
    t: Target<'_>,
    policy: &mut P,
    refusal: &Refusal,
    failed: Option<Duration>,
    split_backoff: &mut Backoff,
    deadline: Option<Instant>,
) -> Option<Turn> {
    let mut turn = Turn {
        sleep: Duration::ZERO,
        recheck: false,
        deaf: refusal.split || failed.is_some(),
    };
    if refusal.split {
        // Masters granted to different contenders and each gave its part
        // back: retry after a random pause so they do not collide again
        // (and again).
        policy.on_outcome(t, Outcome::Split).await;
        turn.sleep = split_backoff.next_jittered();
    } else {
        split_backoff.reset();
        let bound = lease_bound(refusal.pttl);
        turn.sleep = policy.pause(refusal, bound);
        turn.recheck = turn.sleep < bound;
    }
    if let Some(pause) = failed {
        turn.sleep = pause;
    }
    if let Some(d) = deadline {
        let now = Instant::now();
        if now >= d {
            return None;
        }
        turn.sleep = turn.sleep.min(d - now);
    }
    Some(turn)
}

/// What a turn's sleep needs to turn a message into a grant.
struct Woke<'a, 'b> {
    t: Target<'a>,
    pin: &'b OwnerPin,
    lease: Lease,
    interest: &'b Interest,
    /// When the last attempt was sent, and its number.
    sent_at: Instant,
    attempt: u64,
}

impl<'b> Woke<'_, 'b> {
    /// Sleeps until a message or the end of the turn: the guard when the
    /// message was a grant, else `None` (look again). A message for an
    /// earlier wait does not move the time this turn wakes at.
    async fn sleep<P: Policy>(
        &self,
        policy: &mut P,
        mut notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'b>>,
        turn: &Turn,
    ) -> Option<LockGuard> {
        let t = self.t;
        let wake_at = tokio::time::Instant::now() + turn.sleep;
        loop {
            tokio::select! {
                _ = notified.as_mut() => {
                    crate::observe::wakeup(t.labels(), "pubsub");
                    let message = Message {
                        pin: self.pin,
                        lease: self.lease,
                        payload: self.interest.take_payload(),
                        sent_at: self.sent_at,
                        attempt: self.attempt,
                    };
                    match policy.on_wake(message) {
                        Wake::Granted(guard) => {
                            tracing::trace!("granted the lock by an unlock");
                            return Some(guard);
                        }
                        Wake::Stale => {
                            tracing::trace!("woken by a message for an earlier wait; sleeping on");
                            notified.set(self.interest.notified());
                            notified.as_mut().enable();
                            continue;
                        }
                        Wake::Attempt => tracing::trace!("woken by an unlock message"),
                    }
                }
                _ = tokio::time::sleep_until(wake_at) => {
                    let source = if turn.recheck { "recheck" } else { "lease_timeout" };
                    crate::observe::wakeup(t.labels(), source);
                    tracing::trace!(slept_ms = turn.sleep.as_millis() as u64, source, "woken without a message");
                }
            }
            return None;
        }
    }
}

/// One acquire attempt on every master, with what `policy` adds to the
/// request; `n`: its number within the wait. Returns the guard, or the
/// refusal.
///
/// Cancel safe: levels granted anywhere are released in the background if
/// this future is dropped, and requests whose reply was lost are settled
/// the same way (see `quorum::acquire`).
async fn attempt<P: Policy>(
    t: Target<'_>,
    pin: &OwnerPin,
    lease: Lease,
    policy: &mut P,
    n: u64,
) -> Result<std::result::Result<LockGuard, Refusal>> {
    let lease_d = match lease {
        Lease::Watchdog => t.core.settings.watchdog_lease,
        Lease::Fixed(d) => d,
    };
    let reply = {
        let req = policy.request();
        let request = req
            .grant_to
            .map_or_else(crate::keys::fresh_request_id, |(r, _)| r.to_owned());
        let known = t
            .core
            .holds
            .find(&t.keys.lock, &pin.owner.field)
            .filter(|h| h.lost_reason().is_none())
            .map(|h| (h.token, h.node_tokens.clone()));
        let ask = Ask {
            keys: t.keys,
            owner: &pin.owner.field,
            lease: lease_d,
            request: &request,
            waiting: req.waiting,
            grant: req.grant_to.map(|(_, w)| w).or(req.wake),
            grant_lease: req.grant_lease,
            sent_before: req.sent_before,
            attempt: n,
            known,
        };
        let reply = crate::quorum::acquire(&t.core.members, &ask).await;
        tracing::trace!(waiting = ?req.waiting, reply = ?reply, "attempt");
        reply
    };
    Ok(match reply? {
        Attempt::Granted(grant) => {
            policy.on_outcome(t, Outcome::Granted(&grant)).await;
            Ok(LockGuard::new(
                t.core.clone(),
                t.keys.clone(),
                pin.duplicate(),
                &grant,
                lease,
            ))
        }
        Attempt::Denied(refusal) => Err(refusal),
    })
}

/// A grant message, `g <token> <lease ms> <request id> <attempt>`: its
/// parts. The attempt is the number of the waiter's attempt whose ask the
/// grant answered (`None` from scripts older than that number).
pub(crate) fn parse_grant(msg: &str) -> Option<(u64, u64, &str, Option<u64>)> {
    let mut parts = msg.split(' ');
    let (Some("g"), Some(token), Some(ms), Some(id), n, None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let n = match n {
        Some(n) => Some(n.parse().ok()?),
        None => None,
    };
    Some((token.parse().ok()?, ms.parse().ok()?, id, n))
}

/// The guard for a direct grant of `token` with a lease of `ms` to a
/// wait's request (see `parse_grant`; the reentrant lock's grants too),
/// when the message names (`n`) the wait's latest attempt, `m.attempt`,
/// sent at `m.sent_at`. The grant answered that attempt's ask, so it was
/// made after the attempt ran, and its lease is counted from the send.
/// `None` for a message naming an earlier attempt (or none: an older
/// script's): it may have been on its way while a later attempt found the
/// grant's hold already gone, and the waiter's next attempt finds a grant
/// still standing in its record. `None` also when a third of it
/// would be gone by that count (see below). A grant's first lease is short (a fair
/// waiter's queue deadline, a reentrant waiter's grant lease), so a
/// grantee that stopped blocks the lock no longer than that; a third of
/// the way into it, a hold still held gets its own lease (as a renewal
/// would, see `crate::extend`).
/// Short holds never need that call.
pub(crate) fn claim_grant(
    t: Target<'_>,
    m: &Message<'_>,
    request: &str,
    token: u64,
    ms: u64,
    n: Option<u64>,
) -> Option<LockGuard> {
    if n != Some(m.attempt) {
        return None;
    }
    let (pin, lease, sent_at) = (m.pin, m.lease, m.sent_at);
    let granted = Duration::from_millis(ms);
    if Instant::now() >= sent_at + granted / 3 {
        // The waiter slept long since its last attempt (or the lease is
        // short): counted from then, too little of the grant would be
        // left. Until its extension lands (due a third of the way in, so
        // at once now) the hold counts as at risk below half the grant's
        // lease; claimed later than a third in, the extension's round trip
        // would have less than a sixth of it, and past half none at all
        // (`lockwarden run` stopped such a handed command as at risk on a
        // loaded machine). Its next attempt returns the grant from the
        // record, with its own lease counted from now.
        return None;
    }
    let grant = Grant {
        token,
        depth: 1,
        node_tokens: vec![Some(token)],
        // The grant's hold is the waiting request's, as a take by it would
        // be: a permit's release names it, so a lost such hold's release
        // leaves alone a hold of the same permit id that another request
        // made (the locks' releases go by token and owner).
        take: Some(request.to_string()),
        sent_at,
        valid_until: sent_at + granted.saturating_sub(crate::quorum::drift(granted)),
    };
    let core = t.core;
    let guard = LockGuard::new(core.clone(), t.keys.clone(), pin.duplicate(), &grant, lease);
    // Where the hold's own lease ends: the watchdog's runs from the
    // extension, a fixed one from the acquisition.
    let end = match lease {
        Lease::Watchdog if core.settings.watchdog_lease > granted => None,
        Lease::Fixed(d) if d > granted => Some(sent_at + d),
        _ => return Some(guard),
    };
    core.grants
        .extensions
        .schedule(guard.hold(), sent_at + granted / 3, end, granted);
    Some(guard)
}

/// The retryable failures of one wait. They are retried with a backoff
/// (50 ms doubling to 1 s, jittered) until the wait's deadline, or for a wait
/// without one, until they have lasted the client's `retry_transient_for`
/// with no answer in between; the last error is returned then.
struct Retries<'a> {
    t: Target<'a>,
    deadline: Option<Instant>,
    /// When the current run of failures began, and its last error.
    failing: Option<(Instant, Error)>,
    backoff: Backoff,
}

impl<'a> Retries<'a> {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);

    fn new(t: Target<'a>, deadline: Option<Instant>) -> Retries<'a> {
        Retries {
            t,
            deadline,
            failing: None,
            backoff: Backoff::new(Self::FIRST, Self::MAX),
        }
    }

    /// After a failed call: the pause before trying again, or the error
    /// when it is not retryable or no time is left.
    fn after(&mut self, e: Error) -> Result<Duration> {
        if !e.is_retryable() {
            return Err(e);
        }
        let now = Instant::now();
        let since = self.failing.as_ref().map_or(now, |(t, _)| *t);
        let end = self
            .deadline
            .unwrap_or_else(|| since + self.t.core.settings.retry_transient_for);
        if now >= end {
            return Err(e);
        }
        let pause = self.backoff.next_jittered().min(end - now);
        crate::observe::acquire_retry(self.t.labels(), crate::observe::reason(&e));
        if self.failing.is_none() {
            tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "acquire attempt failed; retrying");
        } else {
            tracing::debug!(error = %e, retry_in_ms = pause.as_millis() as u64, "acquire attempt failed again; retrying");
        }
        self.failing = Some((since, e));
        Ok(pause)
    }

    /// An attempt was answered: the run of failures is over.
    fn answered(&mut self) {
        if self.failing.take().is_some() {
            tracing::info!("acquire attempts answered again");
        }
        self.backoff.reset();
    }

    /// The outcome of a wait whose deadline passed: the last error while
    /// failures were still going on, otherwise "not acquired".
    fn at_deadline(&mut self) -> Result<Option<LockGuard>> {
        match self.failing.take() {
            Some((_, e)) => Err(e),
            None => Ok(None),
        }
    }
}

/// How long a client at `place` in line (0: woken next) waits for its
/// wake-up before it looks on its own: `patience` per place, the first
/// included. The waits behind a stuck client look in turn, the nearest
/// first, and n waiting clients look about ln(n) + 1 times per patience
/// between them.
fn patience_at(patience: Duration, place: u64) -> Duration {
    let turns = u32::try_from(place).unwrap_or(u32::MAX).saturating_add(1);
    patience.saturating_mul(turns)
}

/// How long to sleep when the holders have `pttl` ms of lease left.
fn lease_bound(pttl: i64) -> Duration {
    match pttl {
        // A key without expiry (leaked by a tool or a bug): re-check now and then.
        -1 => Duration::from_secs(1),
        p if p <= 0 => Duration::from_millis(1),
        p => Duration::from_millis(p as u64 + 1),
    }
}

/// Takes back on every master what a waiter's attempts left (see
/// `Protocol::leave`); fine when a majority confirmed. `request`: a fair
/// wait's id, when it asked for direct grants; `asked`: every id its asks
/// named.
pub(crate) async fn leave_all(
    core: &Core,
    keys: &LockKeys,
    owner: &Str,
    request: Option<&str>,
    asked: &[String],
) -> Result<()> {
    crate::member::on_each(&core.members, "leave", |node| node.leave(keys, owner, request, asked))
        .await
        .map(|_| ())
}

/// [`leave_all`] in the background (a wait dropped while it had left
/// something behind), re-sent until the server answers; it gives up once
/// the waiter timeout has passed, when the server has dropped what the wait
/// left anyway.
pub(crate) fn leave_in_background(
    core: &Arc<Core>,
    keys: &Arc<LockKeys>,
    owner: &Str,
    request: Option<String>,
    asked: Vec<String>,
) {
    let (core, keys, owner) = (core.clone(), keys.clone(), owner.clone());
    let spawner = core.spawner().clone();
    spawner.spawn(async move {
        let give_up = Instant::now() + core.settings.waiter_timeout;
        let mut pause = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        while let Err(e) = leave_all(&core, &keys, &owner, request.as_deref(), &asked).await {
            if Instant::now() + pause.peek() >= give_up {
                tracing::debug!(lock = %keys.name, error = %e, "leaving a wait failed; the waiter timeout clears what it left");
                break;
            }
            tokio::time::sleep(pause.next()).await;
        }
    });
}

/// What a waiter leaves behind on a lock and [`leave_all`] takes back: its
/// fair-queue place, a writer's mark, a wake-up its client may hold (the
/// owner `""`), a direct grant made to `request` it never learned of.
pub(crate) struct Leave {
    pub(crate) core: Arc<Core>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Str,
    /// The wait's current request id, when it asks for direct grants.
    pub(crate) request: Option<String>,
    /// Every request id a fair wait's asks named: its leave takes back
    /// only a place whose ask names one of them.
    pub(crate) asked: Vec<String>,
}

impl Undo for Leave {
    fn undo_in_background(&mut self) {
        let asked = std::mem::take(&mut self.asked);
        leave_in_background(&self.core, &self.keys, &self.owner, self.request.take(), asked);
    }
}

/// A wait's leave-on-exit guard: armed while something may be left behind.
pub(crate) type LeaveOnExit = DropGuard<Leave>;

impl DropGuard<Leave> {
    /// A guard for `owner`'s waits on `t`'s lock, armed as told.
    pub(crate) fn leave(t: Target<'_>, owner: &Str, armed: bool) -> LeaveOnExit {
        DropGuard::new(
            Leave {
                core: t.core.clone(),
                keys: t.keys.clone(),
                owner: owner.clone(),
                request: None,
                asked: Vec::new(),
            },
            armed,
        )
    }

    /// Leaves now and waits for it, if armed; on failure the drop retries
    /// in the background.
    pub(crate) async fn leave_now(&mut self) {
        if self.is_armed()
            && leave_all(
                &self.core,
                &self.keys,
                &self.owner,
                self.request.as_deref(),
                &self.asked,
            )
            .await
            .is_ok()
        {
            self.disarm();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_further_back_in_line_looks_less_often() {
        let p = Duration::from_millis(500);
        assert_eq!(patience_at(p, 0), p);
        assert_eq!(patience_at(p, 1), 2 * p);
        assert_eq!(patience_at(p, 9), 10 * p);
        // No overflow: longer than any lease, which bounds it.
        assert!(patience_at(p, u64::MAX) > crate::settings::MAX_DURATION);
        // Ten clients in line look 2.9 times per patience between them.
        let per_patience: f64 = (0..10)
            .map(|place| p.as_secs_f64() / patience_at(p, place).as_secs_f64())
            .sum();
        assert!((per_patience - 2.93).abs() < 0.01, "{per_patience}");
    }
}
