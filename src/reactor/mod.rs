//! The event loop: one thread, one `mio::Poll`, sessions in a slab. A
//! proxy runs one such reactor per worker (`workers`, built and run by
//! [`Workers`]); each owns its sessions, and they share only the
//! admission counts, the counters and the resolver pool.
//!
//! Each iteration: poll (sleeping until the next timer deadline, or forever
//! when none is armed), dispatch readiness events, run sessions that used up
//! their per-call budget, fire due timers, and reap ended sessions. The reap
//! is the only place a slab slot is freed, so no event or timer in the same
//! iteration can reach a slot's next tenant; timers and resolver answers
//! also carry the session id and are dropped when it does not match.
//!
//! Sessions never touch the reactor: each call gets a [`Ctx`] (the registry,
//! the buffer pool, settings, policy, stats) and returns [`Effects`], which
//! `Reactor::call` applies. Only
//! this module touches the run queue, the timer wheel, tokens, admission
//! counts and the resolver.

mod admin;
pub(crate) mod admission;
mod control;
pub(crate) mod listener;
mod pins;
mod remote;
pub(crate) mod resolver;
mod shed;
mod socket_file;
pub mod timer;
pub(crate) mod token;
mod verifier;
mod workers;

use std::io;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry};
use slab::Slab;

use crate::buffer::BufPool;
use crate::client::{ClientKey, Identify, Peer};
use crate::config::ListenerProtocol;
use crate::events::EventSink;
use crate::fd_budget;
use crate::io::{classify_accept, AcceptError, Stream};
use crate::lifecycle::CloseReason;
use crate::policy::Policy;
use crate::session::{Ctx, Effects, Session, Settings, TlsEnv, Tokens};
use admin::Admin;
use admission::{Admission, Admit};
use listener::Listener;
use pins::Pins;
pub(crate) use remote::{Control, Remote};
use resolver::{Answer, Asker, Job, Resolver};
use timer::{TimerId, TimerWheel};
use token::Owner;
use verifier::Verifier;
pub(crate) use workers::Workers;

/// What a timer in the wheel is for.
#[derive(Debug, Clone, Copy)]
enum Timer {
    /// A session's deadline; `id` tells a slot's tenants apart.
    Session { key: usize, id: u64 },
    /// Try accepting again after running out of file descriptors.
    ResumeAccept,
    /// The graceful-shutdown drain timeout.
    Drain,
    /// An admin connection's deadline; `gen` tells a slot's tenants apart.
    Admin { slot: usize, gen: u64 },
}

/// What an embedder adds beyond the [`Config`]: the event callback and the
/// control fd.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    pub(crate) events: EventSink,
    /// A connected stream speaking control lines (`--control-fd`).
    pub(crate) control: Option<Stream>,
    /// Where UDP relay sockets are bound, when not here.
    pub(crate) relay_bind: Option<crate::session::RelayBind>,
}

/// Timer wheel resolution and size: 10 ms ticks, ~41 s per rotation.
const TICK: Duration = Duration::from_millis(10);
const SLOTS: usize = 4096;
/// How long accepting pauses when the process runs out of file descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(250);
/// The size of a splice pipe. How many may exist (two fds each) comes from
/// the fd budget; bulk tunnels beyond it use buffers.
#[cfg(target_os = "linux")]
const PIPE_SIZE: usize = 256 * 1024;
/// Sessions an EMFILE on accept sheds: room for one tunnel's two fds.
const SHED_PER_EMFILE: usize = 2;
/// Shedding rounds in one accept burst before pausing instead.
const MAX_SHED_ROUNDS: usize = 8;
/// Spare relay buffers kept for reuse.
const POOL_IDLE: usize = 256;

enum Accepting {
    Open,
    /// Out of fds: listeners are ignored until the timer fires or a session ends.
    Paused(TimerId),
}

/// What sessions may use: lent to each call as a [`Ctx`].
struct Env {
    registry: Registry,
    pool: BufPool,
    #[cfg(target_os = "linux")]
    pipes: crate::session::PipeBudget,
    settings: Settings,
    policy: Policy,
    remote: Arc<Remote>,
    /// What TLS needs (the CA and leaves once a rule terminates).
    tls: TlsEnv,
    events: EventSink,
    /// Logins the verifier pool accepted.
    logins: crate::auth::cache::LoginCache,
    /// The policy's inspected names have been resolved ([`pins`]).
    pins_settled: bool,
}

impl Env {
    /// Loads the CA and TLS configs if the policy terminates TLS and they
    /// are not loaded yet.
    fn prepare_tls(&mut self) -> io::Result<()> {
        if self.policy.terminates_any() {
            self.tls
                .prepare_termination()
                .map_err(|e| io::Error::other(format!("TLS termination: {e}")))?;
        }
        Ok(())
    }
}

impl Env {
    fn ctx(&mut self, key: usize, now: Instant) -> Ctx<'_> {
        Ctx {
            registry: &self.registry,
            tokens: Tokens {
                client: token::client(key),
                upstream: [token::upstream(key, 0), token::upstream(key, 1)],
                relay: token::relay(key),
            },
            pool: &mut self.pool,
            #[cfg(target_os = "linux")]
            pipes: &self.pipes,
            settings: &self.settings,
            tls: &mut self.tls,
            policy: &self.policy,
            logins: &self.logins,
            stats: &self.remote.stats,
            handshake_rates: &self.remote.handshake_rates,
            events: &self.events,
            pins_settled: self.pins_settled,
            now,
            effects: Default::default(),
        }
    }
}

/// A session and the reactor's bookkeeping for it.
struct Slot {
    session: Session,
    /// Whom admission counts it against.
    client: ClientKey,
    /// It counts in the unidentified loopback pool: its uid is asked (by
    /// the client socket's tuple, from the session) only when admission
    /// needs the pool's owners.
    pooled: bool,
    /// Counted by admission (false: past a limit, being refused).
    admitted: bool,
    /// Still counted as a pending handshake.
    handshaking: bool,
    /// Counted by admission as holding a third fd.
    third_fd: bool,
    /// The armed deadline, as the session last asked (the wheel knows when).
    timer: Option<TimerId>,
    /// In the run queue already.
    queued: bool,
}

pub(crate) struct Reactor {
    /// This reactor's index among the workers (0 coordinates; see `workers`).
    worker: usize,
    poll: Poll,
    events: Events,
    /// Indexed by listener token; `None` once closed for shutdown.
    listeners: Vec<Option<Listener>>,
    /// The admin endpoint and the control fd, when configured.
    admin: Option<Admin>,
    sessions: Slab<Slot>,
    env: Env,
    timers: TimerWheel<Timer>,
    resolver: Resolver,
    /// Shared by every worker, so that limits hold for the whole proxy;
    /// locked at accept, handshake end and close only.
    admission: Arc<Mutex<Admission>>,
    /// Verifies hashed passwords off this thread.
    verifier: Verifier,
    /// Who owns loopback clients' sockets.
    identify: Identify,
    control: Receiver<Control>,
    answers: Receiver<Answer>,
    /// The next session id. Worker `w` of `n` hands out `w + 1`, `w + 1 + n`,
    /// ...: ids are unique across workers and name their worker.
    next_id: u64,
    /// The number of workers.
    id_step: u64,
    /// Sessions that stopped at their per-call budget with work left.
    requeue: Vec<usize>,
    reap: Vec<usize>,
    expired: Vec<Timer>,
    accepting: Accepting,
    /// An fd-exhaustion episode is in progress (logged once, cleared by the next accept).
    exhausted: bool,
    /// Shutting down gracefully: listeners are closed, sessions draining.
    draining: bool,
    /// The time of this iteration's wakeup.
    now: Instant,
    /// When the inspected names were last re-resolved.
    pins_resolved: Option<Instant>,
    /// The memory's generation the open sessions were last checked
    /// against (see [`crate::policy::InspectedMemory::generation`]).
    checked_memory: u64,
    /// The admission's pool epoch when this worker last identified its
    /// pooled sessions ([`Admission::identify_pool`]).
    pool_epoch: u64,
    /// Polls so far: tells a listener whose queue outlasted one poll.
    iteration: u64,
    /// Rounds of resolving the inspected names.
    pins: Pins,
    /// Sessions waiting for the current policy's first round (by key, id).
    awaiting_pins: pins::Waiting,
}

impl Reactor {
    pub(crate) fn run(mut self) -> io::Result<()> {
        self.env.remote.running_on(std::thread::current().id());
        for l in self.listeners.iter().flatten() {
            log::debug!("listening on {} ({})", l.local, protocol_name(l.protocol));
        }
        self.now = Instant::now();
        self.refresh_pins(true);
        loop {
            let timeout = if self.requeue.is_empty() {
                self.timers.next_timeout(Instant::now())
            } else {
                Some(Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut self.events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            self.now = Instant::now();
            self.iteration += 1;
            self.env
                .remote
                .stats
                .wakeup(self.worker, self.events.iter().count());
            if self.dispatch() {
                break;
            }
            self.run_requeued();
            if self.fire_timers() {
                break;
            }
            self.reap();
            if self.draining && self.sessions.is_empty() {
                log::info!("drained: every session finished");
                break;
            }
        }
        self.close_all();
        Ok(())
    }

    /// Calls `f` on a live session with a fresh context, then applies the
    /// effects it returns.
    fn call(&mut self, key: usize, f: impl FnOnce(&mut Session, &mut Ctx) -> Effects) {
        let Some(slot) = self.sessions.get_mut(key) else {
            return;
        };
        if slot.session.is_done() {
            return;
        }
        let mut ctx = self.env.ctx(key, self.now);
        let effects = f(&mut slot.session, &mut ctx);
        self.apply(key, effects);
    }

    /// Carries out what a session asked for.
    fn apply(&mut self, key: usize, effects: Effects) {
        let sessions = &self.sessions;
        if let (true, Some(slot)) = (effects.await_pins, sessions.get(key)) {
            let live = |k: usize, i: u64| {
                sessions
                    .get(k)
                    .is_some_and(|s| s.session.id() == i && !s.session.is_done())
            };
            let id = slot.session.id();
            self.awaiting_pins.push(key, id, sessions.len(), live);
        }
        let Some(slot) = self.sessions.get_mut(key) else {
            return;
        };
        if effects.left_handshake && slot.handshaking {
            slot.handshaking = false;
            if slot.admitted {
                lock(&self.admission).left_handshake(slot.client);
            }
        }
        if effects.third_fd && slot.admitted && !slot.third_fd {
            slot.third_fd = true;
            lock(&self.admission).took_third_fd();
        }
        if let Some(host) = effects.resolve {
            self.resolver.resolve(Job {
                asker: Asker::Session {
                    key,
                    id: slot.session.id(),
                },
                host,
            });
        }
        let verify = effects
            .verify
            .map(|job| (slot.session.id(), slot.client, job));
        if slot.timer.and_then(|id| self.timers.deadline(id)) != effects.deadline {
            if let Some(id) = slot.timer.take() {
                self.timers.cancel(id);
            }
            if let Some(at) = effects.deadline {
                let timer = Timer::Session {
                    key,
                    id: slot.session.id(),
                };
                slot.timer = Some(self.timers.insert(at, timer));
            }
        }
        if effects.closed.is_some() {
            let mut admission = lock(&self.admission);
            if slot.handshaking && slot.admitted {
                admission.left_handshake(slot.client);
            }
            slot.handshaking = false;
            admission.ended(slot.client, slot.admitted);
            if std::mem::take(&mut slot.third_fd) {
                admission.dropped_third_fd();
            }
            // Its counts are released: no longer the pool's to hand over
            // (the slot waits for the reap, and `identify_pool` may run first).
            slot.pooled = false;
            drop(admission);
            self.reap.push(key);
        } else if effects.again && !slot.queued {
            slot.queued = true;
            self.requeue.push(key);
        }
        if let Some((id, client, job)) = verify {
            self.verify_login(key, id, client, job);
        }
    }

    /// Handles this iteration's events. Returns true when asked to shut down.
    fn dispatch(&mut self) -> bool {
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        let mut stop = false;
        for ev in events.iter() {
            match token::owner(ev.token(), self.listeners.len()) {
                Owner::Waker => stop |= self.on_wake(),
                Owner::AdminListener => self.admin_accept(),
                Owner::Admin(slot) => self.admin_event(slot, ev),
                Owner::Listener(i) => self.accept(i),
                Owner::Session(key, side) => self.call(key, |s, ctx| s.on_event(side, ev, ctx)),
                Owner::Relay(key) => self.call(key, |s, ctx| s.on_relay_event(ev, ctx)),
            }
        }
        self.events = events;
        stop
    }

    /// Drains control messages and resolver answers. Returns true to stop now.
    fn on_wake(&mut self) -> bool {
        let mut stop = false;
        while let Ok(msg) = self.control.try_recv() {
            match msg {
                Control::Shutdown { graceful: false } => stop = true,
                Control::Shutdown { graceful: true } => self.start_draining(),
                Control::Reload(policy) => match self.check_users(&policy) {
                    Ok(()) => {
                        self.forward_reload(&policy);
                        self.apply_policy(policy, "reloaded");
                    }
                    Err(e) => log::error!("reload refused, keeping the current policy: {e}"),
                },
                Control::Command { cmd, reply } => {
                    let answer = self.execute(cmd);
                    // The asker may have given up; nothing to do then.
                    let _ = reply.send(answer);
                }
            }
        }
        while let Ok(answer) = self.answers.try_recv() {
            match answer.asker {
                Asker::Session { key, id } => {
                    let current = self.sessions.get(key).is_some_and(|s| s.session.id() == id);
                    if current {
                        let result = answer.result;
                        self.call(key, |s, ctx| s.on_resolved(result, ctx));
                    }
                }
                Asker::Pin { round } => {
                    match answer.result {
                        Ok(addrs) => {
                            self.env.policy.pin(&answer.host, &addrs, self.now);
                        }
                        Err(e) => log::debug!("resolving inspected name {}: {e}", answer.host),
                    }
                    // New to this worker's sessions, not only to the memory:
                    // another worker's answer (or a client's lookup) may
                    // have taught the shared memory first.
                    let learned = self.env.policy.memory().generation() != self.checked_memory;
                    if let Some(settled) = self.pins.answered(round, learned) {
                        self.pins_settled(settled);
                    }
                }
            }
        }
        self.deliver_logins();
        stop
    }

    /// Graceful shutdown: close the listeners (new connects are refused by
    /// the kernel) and give open sessions the drain timeout to finish.
    fn start_draining(&mut self) {
        if self.draining {
            return;
        }
        self.draining = true;
        for l in self.listeners.iter_mut() {
            if let Some(mut l) = l.take() {
                l.deregister(&self.env.registry);
            }
        }
        if let Accepting::Paused(id) = std::mem::replace(&mut self.accepting, Accepting::Open) {
            self.timers.cancel(id);
        }
        let drain = self.env.settings.timeouts.drain;
        log::info!(
            "shutting down: listeners closed, {} sessions have {drain:?} to finish",
            self.sessions.len()
        );
        self.timers.insert(self.now + drain, Timer::Drain);
    }

    /// Accepts a level-triggered listener's batch, or an edge-triggered
    /// one's queue until WouldBlock.
    fn accept(&mut self, index: usize) {
        if !matches!(self.accepting, Accepting::Open) {
            return;
        }
        let Some(listener) = self.listeners.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        let budget = listener.accept_budget(self.iteration);
        let mut accepted = 0;
        let emptied = self.accept_up_to(index, budget, &mut accepted);
        if let Some(l) = self.listeners.get_mut(index).and_then(Option::as_mut) {
            l.batch.end(self.iteration, accepted, emptied);
        }
    }

    /// Accepts until `budget` connections, WouldBlock or a pause. Returns
    /// whether the queue was found empty.
    fn accept_up_to(&mut self, index: usize, budget: u32, accepted: &mut u32) -> bool {
        let mut sheds = 0;
        loop {
            if *accepted >= budget {
                return false;
            }
            let Some(listener) = self.listeners.get(index).and_then(Option::as_ref) else {
                return true;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    *accepted += 1;
                    let protocol = listener.protocol;
                    if sheds == 0 {
                        self.exhausted = false;
                    }
                    let stale = self
                        .pins_resolved
                        .is_none_or(|t| self.now.duration_since(t) >= crate::policy::REFRESH_EVERY);
                    if stale {
                        self.refresh_pins(false);
                    }
                    self.env.remote.stats.accepted(self.worker);
                    self.admit(index, stream, peer, protocol);
                }
                Err(e) => match classify_accept(&e) {
                    AcceptError::Drained => return true,
                    // The connection died in the backlog: nothing to serve, carry on.
                    AcceptError::Retry | AcceptError::Skip => {}
                    // Out of fds with nobody waiting (accept takes an fd
                    // before it looks at the queue): nothing to make room
                    // for; the next client raises a new edge.
                    AcceptError::OutOfFds if !listener.has_pending() => return true,
                    // Out of fds: make room by shedding, then accept again.
                    AcceptError::OutOfFds if sheds < MAX_SHED_ROUNDS && self.shed(&e) => {
                        sheds += 1;
                    }
                    // EMFILE, ENFILE, ENOBUFS, ENOMEM: retrying now would
                    // fail the same way, so pause behind a timer instead of
                    // spinning.
                    AcceptError::OutOfFds | AcceptError::Fatal => {
                        self.pause_accepting(&e);
                        return true;
                    }
                },
            }
        }
    }

    /// Starts a session for an accepted connection, or refuses it at a limit.
    fn admit(
        &mut self,
        listener: usize,
        stream: Stream,
        mut peer: Peer,
        protocol: ListenerProtocol,
    ) {
        let identifiable = self.identify.available()
            && self
                .listener(listener)
                .is_some_and(|l| l.identifiable(&peer));
        // The tuple the kernel knows the client's socket by (a `getsockname`
        // when the listener is on every address).
        let tuple = |reactor: &Self, peer: &Peer| {
            reactor
                .listener(listener)
                .and_then(|l| l.tuple(&stream, peer))
        };
        // A loopback client's uid costs two netlink calls; it is asked at once
        // when something will read it (an access line or event, a login's
        // per-client share, a handshake budget), else only when admission
        // needs it.
        // The handshake-rate budget keys a terminating rule's clients by
        // uid too (else every local client would share one bucket).
        let eager = self.env.events.wants()
            || self.env.settings.auth.is_some()
            || (self.env.settings.limits.handshakes_per_client_per_sec > 0
                && self.env.policy.terminates_any());
        let mut pooled = false;
        let mut client = if identifiable && eager {
            if let Some((client, ours)) = tuple(self, &peer) {
                peer.uid = self.identify.loopback_uid(client, || Some(ours));
            }
            peer.key()
        } else if identifiable {
            pooled = true;
            ClientKey::Loopback
        } else {
            peer.key()
        };
        let mut admission = lock(&self.admission);
        if admission.under_pressure() {
            // The limit may have been raised (or lowered) meanwhile.
            admission.set_fd_limit(fd_budget::nofile_limit());
            // The fd reserve weighs clients: the pool's sessions must be
            // their owners' first, in every worker.
            admission.identify_pool();
        }
        if admission.pool_epoch() != self.pool_epoch {
            drop(admission);
            self.identify_pool();
            admission = lock(&self.admission);
        }
        let mut admit = admission.admit(client, &self.env.settings.limits);
        if admit == Admit::Identify {
            drop(admission);
            if std::mem::take(&mut pooled) {
                if let Some((client, ours)) = tuple(self, &peer) {
                    peer.uid = self.identify.loopback_uid(client, || Some(ours));
                }
            }
            client = peer.key();
            admission = lock(&self.admission);
            admit = admission.admit(client, &self.env.settings.limits);
        }
        drop(admission);
        pooled &= client == ClientKey::Loopback;
        let refusing = match admit {
            Admit::Yes => None,
            Admit::Refuse(limit) => {
                log::warn!("{peer}{}: refused, at the {limit} limit", peer.ids());
                Some(limit)
            }
            // Past even the cap on refusals: the socket closes unanswered.
            // (`Identify` cannot come back for an identified key.)
            Admit::Drop | Admit::Identify => {
                self.env.remote.stats.closed(CloseReason::Limit);
                return;
            }
        };
        let admitted = refusing.is_none();
        let key = self.sessions.vacant_key();
        let id = self.next_id;
        self.next_id += self.id_step;
        let mut ctx = self.env.ctx(key, self.now);
        match Session::accept(id, stream, peer, protocol, refusing, &mut ctx) {
            Ok((session, effects)) => {
                self.sessions.insert(Slot {
                    session,
                    client,
                    pooled,
                    admitted,
                    handshaking: true,
                    third_fd: false,
                    timer: None,
                    queued: false,
                });
                self.apply(key, effects);
            }
            Err(e) => {
                log::warn!("could not register an accepted connection: {e}");
                let mut admission = lock(&self.admission);
                if admitted {
                    admission.left_handshake(client);
                }
                admission.ended(client, admitted);
            }
        }
    }

    fn listener(&self, index: usize) -> Option<&Listener> {
        self.listeners.get(index).and_then(Option::as_ref)
    }

    /// Asks the owner of each of this worker's sessions in the unidentified
    /// loopback pool, and counts it under its uid from now on (fd pressure
    /// and shedding weigh clients; the pool names none).
    fn identify_pool(&mut self) {
        let mut moved = Vec::new();
        for (_, slot) in self.sessions.iter_mut() {
            // An ended session gave its counts back already (its slot waits
            // for the reap): it is no one's to hand over.
            if slot.session.is_done() {
                continue;
            }
            if !std::mem::take(&mut slot.pooled) {
                continue;
            }
            // Without the client's socket (a Closing that kept only the
            // upstream) no uid can be asked: it counts as 127.0.0.1.
            let tuple = slot.session.client_tuple();
            let uid =
                tuple.and_then(|(client, ours)| self.identify.loopback_uid(client, || Some(ours)));
            let key = match tuple {
                Some((client, _)) => Peer::tcp(client, uid).key(),
                None => ClientKey::UNNAMED_LOOPBACK,
            };
            if slot.admitted {
                moved.push((key, slot.handshaking));
            }
            slot.client = key;
        }
        let mut admission = lock(&self.admission);
        self.pool_epoch = admission.pool_epoch();
        for (key, handshaking) in moved {
            admission.leave_pool(key, handshaking);
        }
    }

    /// Resolves the exact names of inspecting rules, so their addresses are
    /// known (and reached only under inspection) before any client resolves
    /// them itself. Runs at start, after a reload, and on accepts at most
    /// every `REFRESH_EVERY`: driven by traffic, never by a timer, so an idle
    /// proxy stays asleep (pinned addresses outlive a long idle; see
    /// `policy::memory`).
    /// Starts a round of resolving the policy's inspected names;
    /// `new_policy`: it just took effect, so raw connections wait for the
    /// round ([`pins`]).
    fn refresh_pins(&mut self, new_policy: bool) {
        self.pins_resolved = Some(self.now);
        if !new_policy && self.pins.in_flight() {
            // The last round is still being answered (slow DNS): piling
            // another on would only queue the same names again.
            return;
        }
        let names = self.env.policy.inspected_names();
        let (round, settled) = self.pins.start(names.len(), new_policy);
        self.env.pins_settled = self.pins.settled();
        for host in names {
            self.resolver.resolve(Job {
                asker: Asker::Pin { round },
                host,
            });
        }
        if let Some(settled) = settled {
            self.pins_settled(settled);
        }
    }

    /// A round of resolving the inspected names ended: sessions check what
    /// the memory learned, and those waiting for the round go on.
    fn pins_settled(&mut self, settled: pins::Settled) {
        self.env.pins_settled = self.pins.settled();
        if settled.recheck {
            self.checked_memory = self.env.policy.memory().generation();
            log::debug!(
                "inspected names resolved to new addresses; re-checking {} open sessions",
                self.sessions.len()
            );
            let keys: Vec<usize> = self.sessions.iter().map(|(k, _)| k).collect();
            for key in keys {
                self.call(key, Session::on_reload);
            }
        }
        if !self.pins.settled() {
            return;
        }
        for (key, id) in self.awaiting_pins.take() {
            if self.sessions.get(key).is_some_and(|s| s.session.id() == id) {
                self.call(key, Session::on_pins);
            }
        }
    }

    /// Accept ran out of fds: reads the limit again (it may have been
    /// lowered) and closes sessions in the shedding order. Returns whether
    /// any was closed.
    fn shed(&mut self, e: &io::Error) -> bool {
        // Shedding goes by owner: the pool's sessions are told theirs first
        // (here now, in the other workers at their next accept).
        lock(&self.admission).identify_pool();
        self.identify_pool();
        let heaviest = {
            let mut admission = lock(&self.admission);
            admission.set_fd_limit(fd_budget::nofile_limit());
            admission.heaviest()
        };
        let candidates = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.session.is_done())
            .map(|(key, s)| shed::Candidate {
                key,
                id: s.session.id(),
                client: s.client,
                admitted: s.admitted,
                handshaking: s.handshaking,
            });
        let victims = shed::victims(candidates, heaviest, SHED_PER_EMFILE);
        if !victims.is_empty() && !self.exhausted {
            log::warn!(
                "accept failed ({e}); closing pending handshakes of the heaviest client ({heaviest:?}) to make room"
            );
            self.exhausted = true;
        }
        for &key in &victims {
            self.call(key, |s, ctx| s.abort(CloseReason::Shed, ctx));
        }
        !victims.is_empty()
    }

    fn pause_accepting(&mut self, e: &io::Error) {
        if !self.exhausted {
            log::warn!("accept failed ({e}); pausing accepts, open sessions carry on");
            self.exhausted = true;
        }
        self.env.remote.stats.accept_paused();
        let id = self
            .timers
            .insert(self.now + ACCEPT_PAUSE, Timer::ResumeAccept);
        self.accepting = Accepting::Paused(id);
        for l in self.listeners.iter_mut().flatten() {
            l.pause(&self.env.registry);
        }
    }

    fn resume_accepting(&mut self) {
        if let Accepting::Paused(id) = std::mem::replace(&mut self.accepting, Accepting::Open) {
            self.timers.cancel(id);
            for (i, l) in self.listeners.iter_mut().enumerate() {
                if let Some(l) = l {
                    if let Err(e) = l.resume(&self.env.registry, token::listener(i)) {
                        log::error!("listener {}: cannot watch it again: {e}", l.local);
                    }
                }
            }
            // Connections that queued while paused raised no new edge.
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
    }

    fn run_requeued(&mut self) {
        let keys = std::mem::take(&mut self.requeue);
        for key in keys {
            if let Some(slot) = self.sessions.get_mut(key) {
                slot.queued = false;
            }
            self.call(key, Session::run);
        }
    }

    /// Fires due timers. Returns true when the drain timeout ended a shutdown.
    fn fire_timers(&mut self) -> bool {
        self.timers.expire(self.now, &mut self.expired);
        let mut stop = false;
        let mut expired = std::mem::take(&mut self.expired);
        for timer in expired.drain(..) {
            match timer {
                Timer::Session { key, id } => {
                    let Some(slot) = self.sessions.get_mut(key).filter(|s| s.session.id() == id)
                    else {
                        continue;
                    };
                    slot.timer = None;
                    self.call(key, Session::on_timer);
                }
                Timer::ResumeAccept => {
                    // Cancelling the timer that just fired is a harmless no-op.
                    self.resume_accepting();
                }
                Timer::Admin { slot, gen } => self.admin_timer(slot, gen),
                Timer::Drain => {
                    log::info!(
                        "drain timeout: closing {} sessions still open",
                        self.sessions.len()
                    );
                    stop = true;
                }
            }
        }
        self.expired = expired;
        stop
    }

    /// Frees the slots of ended sessions (their sockets closed when their
    /// state let them go).
    fn reap(&mut self) {
        let mut freed = false;
        for key in self.reap.drain(..) {
            if self.sessions.get(key).is_some_and(|s| s.session.is_done()) {
                self.sessions.remove(key);
                freed = true;
            }
        }
        if freed {
            // A session can requeue itself and then end in the same
            // iteration (its close timer fired): no zero-timeout poll for it.
            let sessions = &self.sessions;
            self.requeue.retain(|&k| sessions.contains(k));
            self.resume_accepting();
        }
        // Every armed timer has an owner: with no session and accepting open,
        // none may be left (an idle proxy must be able to sleep forever).
        debug_assert!(
            !self.sessions.is_empty()
                || !matches!(self.accepting, Accepting::Open)
                || self.draining
                || self.admin.as_ref().is_some_and(Admin::has_conns)
                || self.timers.is_empty(),
            "{} timers armed with no session",
            self.timers.len()
        );
    }

    /// Closes every session still open (reason `shutdown`) and the listeners.
    fn close_all(&mut self) {
        if !self.sessions.is_empty() {
            log::info!("shutting down: closing {} sessions", self.sessions.len());
        }
        let keys: Vec<usize> = self.sessions.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.call(key, |s, ctx| s.abort(CloseReason::Shutdown, ctx));
        }
        self.sessions.clear();
        self.listeners.clear();
    }
}

/// The shared admission, locked. A poisoned lock means another worker
/// panicked, which stops the proxy anyway: the counts are still usable.
fn lock(admission: &Mutex<Admission>) -> MutexGuard<'_, Admission> {
    admission.lock().unwrap_or_else(|e| e.into_inner())
}

fn protocol_name(p: ListenerProtocol) -> &'static str {
    match p {
        ListenerProtocol::Auto => "http+socks5",
        ListenerProtocol::Http => "http",
        ListenerProtocol::Socks5 => "socks5",
    }
}

#[cfg(test)]
mod sizes {
    /// Every idle tunnel holds a slot: it is what a tunnel costs in memory
    /// (BENCHMARKS.md's bytes per idle tunnel). Sizes with debug assertions
    /// are larger (mio's sockets carry a selector id), so a debug build
    /// (what CI tests) has its own bound; `cargo test --release --lib
    /// sizes` checks the optimised one.
    #[test]
    fn a_slot_stays_small() {
        let slot = std::mem::size_of::<super::Slot>();
        let session = std::mem::size_of::<crate::session::Session>();
        assert!(slot <= session + 40, "slot {slot} B, session {session} B");
        // 400 before UDP associations (see `session::sizes`).
        #[cfg(target_pointer_width = "64")]
        {
            let most = if cfg!(debug_assertions) { 448 } else { 408 };
            assert!(slot <= most, "slot {slot} B");
        }
    }
}
