//! The event loop: one thread, one `mio::Poll`, sessions in a slab.
//!
//! Each iteration: poll (sleeping until the next timer deadline, or forever
//! when none is armed), dispatch readiness events, drive sessions that used
//! up their per-call budget, fire due timers, and reap ended sessions. The
//! reap is the only place a slab slot is freed, so no event or timer in the
//! same iteration can reach a slot's next tenant; timers and resolver answers
//! also carry the session id and are dropped when it does not match.

pub(crate) mod admission;
pub(crate) mod listener;
pub(crate) mod resolver;
pub mod timer;
pub(crate) mod token;

use std::io;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Waker};
use slab::Slab;

use crate::api::Shared;
use crate::buffer::BufPool;
use crate::config::{Config, Credentials, Limits, ListenerProtocol, Timeouts};
use crate::policy::Policy;
use crate::session::Session;
use crate::stats::{CloseReason, Stats};
use admission::Admit;
use listener::Listener;
use resolver::{Answer, Resolver};
use timer::{TimerId, TimerWheel};
use token::Owner;

/// Messages from handles to the reactor thread (delivered through the Waker).
pub(crate) enum Control {
    Reload(Policy),
    /// Stop accepting; `graceful`: let open sessions finish within the drain
    /// timeout, else close them at once.
    Shutdown {
        graceful: bool,
    },
}

/// What a timer in the wheel is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Timer {
    /// A session's deadline; `id` tells a slot's tenants apart.
    Session { key: usize, id: u64 },
    /// Try accepting again after running out of file descriptors.
    ResumeAccept,
    /// The graceful-shutdown drain timeout.
    Drain,
}

/// Settings sessions read.
pub(crate) struct Settings {
    pub(crate) timeouts: Timeouts,
    pub(crate) limits: Limits,
    pub(crate) auth: Option<Credentials>,
}

/// The reactor's state that sessions use: passed down as `&mut Core`, never global.
pub(crate) struct Core {
    pub(crate) registry: Registry,
    pub(crate) timers: TimerWheel<Timer>,
    pub(crate) policy: Policy,
    pub(crate) resolver: Resolver,
    pub(crate) settings: Settings,
    pub(crate) pool: BufPool,
    pub(crate) admission: admission::Admission,
    /// Pipes for splicing bulk tunnels (Linux).
    #[cfg(target_os = "linux")]
    pub(crate) pipes: crate::session::PipeBudget,
    /// Sessions that stopped at their per-call budget with work left.
    pub(crate) requeue: Vec<usize>,
    /// The time of this iteration's wakeup.
    pub(crate) now: Instant,
    shared: Arc<Shared>,
}

impl Core {
    pub(crate) fn stats(&self) -> &Stats {
        &self.shared.stats
    }
}

/// Timer wheel resolution and size: 10 ms ticks, ~41 s per rotation.
const TICK: Duration = Duration::from_millis(10);
const SLOTS: usize = 4096;
/// How long accepting pauses when the process runs out of file descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(250);
/// Pipes for splice at most (two fds each), and their size: bulk tunnels
/// beyond the budget use buffers.
#[cfg(target_os = "linux")]
const MAX_PIPES: usize = 512;
#[cfg(target_os = "linux")]
const PIPE_SIZE: usize = 256 * 1024;
/// Spare relay buffers kept for reuse.
const POOL_IDLE: usize = 256;

enum Accepting {
    Open,
    /// Out of fds: listeners are ignored until the timer fires or a session ends.
    Paused(TimerId),
}

pub(crate) struct Reactor {
    poll: Poll,
    events: Events,
    /// Indexed by listener token; `None` once closed for shutdown.
    listeners: Vec<Option<Listener>>,
    sessions: Slab<Session>,
    core: Core,
    control: Receiver<Control>,
    answers: Receiver<Answer>,
    next_id: u64,
    reap: Vec<usize>,
    expired: Vec<Timer>,
    accepting: Accepting,
    /// An fd-exhaustion episode is in progress (logged once, cleared by the next accept).
    exhausted: bool,
    /// Shutting down gracefully: listeners are closed, sessions draining.
    draining: bool,
}

impl Reactor {
    /// Binds `config`'s listeners, then registers the `adopted` (already bound) ones after them.
    pub(crate) fn new(
        config: Config,
        adopted: Vec<Listener>,
    ) -> io::Result<(Reactor, Arc<Shared>)> {
        if config.listeners.is_empty() && adopted.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no listeners configured",
            ));
        }
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), token::WAKER)?);
        let mut listeners = Vec::with_capacity(config.listeners.len());
        for (i, lc) in config.listeners.iter().enumerate() {
            let mut l = Listener::bind(lc).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot listen on {}: {e}", lc.addr))
            })?;
            l.register(poll.registry(), token::listener(i))?;
            listeners.push(l);
        }
        for mut l in adopted {
            l.register(poll.registry(), token::listener(listeners.len()))?;
            listeners.push(l);
        }
        let local_addrs = listeners.iter().map(|l| l.local.clone()).collect();
        let listeners = listeners.into_iter().map(Some).collect();
        let (control_tx, control) = mpsc::channel();
        let (answers_tx, answers) = mpsc::channel();
        let shared = Arc::new(Shared::new(local_addrs, control_tx, Arc::clone(&waker)));
        let resolver = Resolver::new(config.limits.resolver_threads, answers_tx, waker)?;
        let now = Instant::now();
        let core = Core {
            registry: poll.registry().try_clone()?,
            timers: TimerWheel::new(TICK, SLOTS, now),
            policy: config.policy,
            resolver,
            settings: Settings {
                timeouts: config.timeouts,
                limits: config.limits,
                auth: config.auth,
            },
            pool: BufPool::new(config.limits.buffer_size, POOL_IDLE),
            admission: admission::Admission::default(),
            #[cfg(target_os = "linux")]
            pipes: crate::session::PipeBudget::new(MAX_PIPES, PIPE_SIZE),
            requeue: Vec::new(),
            now,
            shared: Arc::clone(&shared),
        };
        let reactor = Reactor {
            poll,
            events: Events::with_capacity(1024),
            listeners,
            sessions: Slab::new(),
            core,
            control,
            answers,
            next_id: 1,
            reap: Vec::new(),
            expired: Vec::new(),
            accepting: Accepting::Open,
            exhausted: false,
            draining: false,
        };
        Ok((reactor, shared))
    }

    pub(crate) fn run(mut self) -> io::Result<()> {
        for l in self.listeners.iter().flatten() {
            log::debug!("listening on {} ({})", l.local, protocol_name(l.protocol));
        }
        loop {
            let timeout = if self.core.requeue.is_empty() {
                self.core.timers.next_timeout(Instant::now())
            } else {
                Some(Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut self.events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            self.core.now = Instant::now();
            self.core.stats().wakeup(self.events.iter().count());
            if self.dispatch() {
                break;
            }
            self.drive_requeued();
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

    /// Handles this iteration's events. Returns true when asked to shut down.
    fn dispatch(&mut self) -> bool {
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        let mut stop = false;
        for ev in events.iter() {
            match token::owner(ev.token(), self.listeners.len()) {
                Owner::Waker => stop |= self.on_wake(),
                Owner::Listener(i) => self.accept(i),
                Owner::Session(key, side) => {
                    if let Some(s) = self.sessions.get_mut(key) {
                        s.on_ready(side, ev, &mut self.core);
                        if s.is_done() {
                            self.reap.push(key);
                        }
                    }
                }
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
                Control::Reload(policy) => {
                    self.core.policy = policy;
                    log::info!(
                        "policy reloaded; re-checking {} open sessions",
                        self.sessions.len()
                    );
                    for (key, s) in self.sessions.iter_mut() {
                        s.on_reload(&mut self.core);
                        if s.is_done() {
                            self.reap.push(key);
                        }
                    }
                }
            }
        }
        while let Ok(answer) = self.answers.try_recv() {
            if let Some(s) = self
                .sessions
                .get_mut(answer.key)
                .filter(|s| s.id() == answer.id)
            {
                s.on_resolved(answer.result, &mut self.core);
                if s.is_done() {
                    self.reap.push(answer.key);
                }
            }
        }
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
                l.deregister(&self.core.registry);
            }
        }
        if let Accepting::Paused(id) = std::mem::replace(&mut self.accepting, Accepting::Open) {
            self.core.timers.cancel(id);
        }
        let drain = self.core.settings.timeouts.drain;
        log::info!(
            "shutting down: listeners closed, {} sessions have {drain:?} to finish",
            self.sessions.len()
        );
        self.core.timers.insert(self.core.now + drain, Timer::Drain);
    }

    /// Accepts until WouldBlock (readiness is edge-triggered).
    fn accept(&mut self, index: usize) {
        if !matches!(self.accepting, Accepting::Open) {
            return;
        }
        loop {
            let Some(listener) = self.listeners.get(index).and_then(Option::as_ref) else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.exhausted = false;
                    self.core.stats().accepted();
                    let protocol = listener.protocol;
                    self.admit(stream, peer, protocol);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The connection died in the backlog: nothing to serve, carry on.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                    ) => {}
                // EMFILE, ENFILE, ENOBUFS, ENOMEM: retrying now would fail the
                // same way, so pause behind a timer instead of spinning.
                Err(e) => {
                    self.pause_accepting(&e);
                    return;
                }
            }
        }
    }

    /// Starts a session for an accepted connection, or refuses it at a limit.
    fn admit(
        &mut self,
        stream: crate::io::Stream,
        peer: listener::Peer,
        protocol: ListenerProtocol,
    ) {
        let client = peer.key();
        let refusing = match self
            .core
            .admission
            .admit(client, &self.core.settings.limits)
        {
            Admit::Yes => None,
            Admit::Refuse(limit) => {
                log::warn!("{peer}: refused, at the {limit} limit");
                Some(limit)
            }
            // Past even the cap on refusals: the socket closes unanswered.
            Admit::Drop => {
                self.core.stats().closed(CloseReason::Limit);
                return;
            }
        };
        let entry = self.sessions.vacant_entry();
        let (key, id) = (entry.key(), self.next_id);
        self.next_id += 1;
        match Session::accept(key, id, stream, peer, protocol, refusing, &mut self.core) {
            Ok(session) => {
                entry.insert(session);
            }
            Err(e) => {
                log::warn!("could not register an accepted connection: {e}");
                if refusing.is_none() {
                    self.core.admission.left_handshake(client);
                }
                self.core.admission.ended(client, refusing.is_none());
            }
        }
    }

    fn pause_accepting(&mut self, e: &io::Error) {
        if !self.exhausted {
            log::warn!("accept failed ({e}); pausing accepts, open sessions carry on");
            self.exhausted = true;
        }
        self.core.stats().accept_paused();
        let id = self
            .core
            .timers
            .insert(self.core.now + ACCEPT_PAUSE, Timer::ResumeAccept);
        self.accepting = Accepting::Paused(id);
    }

    fn resume_accepting(&mut self) {
        if let Accepting::Paused(id) = std::mem::replace(&mut self.accepting, Accepting::Open) {
            self.core.timers.cancel(id);
            // Connections that queued while paused raised no new edge.
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
    }

    fn drive_requeued(&mut self) {
        let keys = std::mem::take(&mut self.core.requeue);
        for key in keys {
            if let Some(s) = self.sessions.get_mut(key) {
                s.drive(&mut self.core);
                if s.is_done() {
                    self.reap.push(key);
                }
            }
        }
    }

    /// Fires due timers. Returns true when the drain timeout ended a shutdown.
    fn fire_timers(&mut self) -> bool {
        self.core.timers.expire(self.core.now, &mut self.expired);
        let mut stop = false;
        let mut expired = std::mem::take(&mut self.expired);
        for timer in expired.drain(..) {
            match timer {
                Timer::Session { key, id } => {
                    if let Some(s) = self.sessions.get_mut(key).filter(|s| s.id() == id) {
                        s.on_timer(&mut self.core);
                        if s.is_done() {
                            self.reap.push(key);
                        }
                    }
                }
                Timer::ResumeAccept => {
                    // Cancelling the timer that just fired is a harmless no-op.
                    self.resume_accepting();
                }
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

    /// Frees the slots of ended sessions; their client fds close here.
    fn reap(&mut self) {
        let mut freed = false;
        for key in self.reap.drain(..) {
            if self.sessions.get(key).is_some_and(Session::is_done) {
                self.sessions.remove(key);
                freed = true;
            }
        }
        if freed {
            // A session can requeue itself and then end in the same
            // iteration (its close timer fired): no zero-timeout poll for it.
            let sessions = &self.sessions;
            self.core.requeue.retain(|&k| sessions.contains(k));
            self.resume_accepting();
        }
        // Every armed timer has an owner: with no session and accepting open,
        // none may be left (an idle proxy must be able to sleep forever).
        debug_assert!(
            !self.sessions.is_empty()
                || !matches!(self.accepting, Accepting::Open)
                || self.draining
                || self.core.timers.is_empty(),
            "{} timers armed with no session",
            self.core.timers.len()
        );
    }

    /// Closes every session still open (reason `shutdown`) and the listeners.
    fn close_all(&mut self) {
        if !self.sessions.is_empty() {
            log::info!("shutting down: closing {} sessions", self.sessions.len());
        }
        for (_, s) in self.sessions.iter_mut() {
            s.abort(CloseReason::Shutdown, &mut self.core);
        }
        self.sessions.clear();
        self.listeners.clear();
    }
}

fn protocol_name(p: crate::config::ListenerProtocol) -> &'static str {
    match p {
        crate::config::ListenerProtocol::Auto => "http+socks5",
        crate::config::ListenerProtocol::Http => "http",
        crate::config::ListenerProtocol::Socks5 => "socks5",
    }
}
