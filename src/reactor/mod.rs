//! The event loop: one thread, one `mio::Poll`, sessions in a slab.
//!
//! Each iteration: poll (sleeping until the next timer deadline, or forever
//! when none is armed), dispatch readiness events, drive sessions that used
//! up their per-call budget, fire due timers, and reap ended sessions. The
//! reap is the only place a slab slot is freed, so no event or timer in the
//! same iteration can reach a slot's next tenant; timers and resolver answers
//! also carry the session id and are dropped when it does not match.

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
use crate::config::{Config, Credentials, Limits, Timeouts};
use crate::policy::Policy;
use crate::session::Session;
use crate::stats::{CloseReason, Stats};
use listener::Listener;
use resolver::{Answer, Resolver};
use timer::{TimerId, TimerWheel};
use token::Owner;

/// Messages from handles to the reactor thread (delivered through the Waker).
pub(crate) enum Control {
    Reload(Policy),
    Shutdown,
}

/// What a timer in the wheel is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Timer {
    /// A session's deadline; `id` tells a slot's tenants apart.
    Session { key: usize, id: u64 },
    /// Try accepting again after running out of file descriptors.
    ResumeAccept,
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
    listeners: Vec<Listener>,
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
}

impl Reactor {
    pub(crate) fn new(config: Config) -> io::Result<(Reactor, Arc<Shared>)> {
        if config.listeners.is_empty() {
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
        let local_addrs = listeners.iter().map(|l| l.local.clone()).collect();
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
        };
        Ok((reactor, shared))
    }

    pub(crate) fn run(mut self) -> io::Result<()> {
        for l in &self.listeners {
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
            self.fire_timers();
            self.reap();
        }
        self.shutdown();
        Ok(())
    }

    /// Handles this iteration's events. Returns true when asked to shut down.
    fn dispatch(&mut self) -> bool {
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        let mut stop = false;
        for ev in events.iter() {
            match token::owner(ev.token(), self.listeners.len()) {
                Owner::Waker => stop |= self.on_wake(),
                Owner::Listener(i) => {
                    if matches!(self.accepting, Accepting::Open) {
                        self.accept(i);
                    }
                }
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

    /// Drains control messages and resolver answers.
    fn on_wake(&mut self) -> bool {
        let mut stop = false;
        while let Ok(msg) = self.control.try_recv() {
            match msg {
                Control::Shutdown => stop = true,
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

    /// Accepts until WouldBlock (readiness is edge-triggered).
    fn accept(&mut self, index: usize) {
        loop {
            let listener = &self.listeners[index];
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.exhausted = false;
                    self.core.stats().accepted();
                    let entry = self.sessions.vacant_entry();
                    let (key, id) = (entry.key(), self.next_id);
                    self.next_id += 1;
                    match Session::accept(key, id, stream, peer, listener.protocol, &mut self.core)
                    {
                        Ok(session) => {
                            entry.insert(session);
                        }
                        Err(e) => log::warn!("could not register an accepted connection: {e}"),
                    }
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
                if matches!(self.accepting, Accepting::Open) {
                    self.accept(i);
                }
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

    fn fire_timers(&mut self) {
        self.core.timers.expire(self.core.now, &mut self.expired);
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
            }
        }
        self.expired = expired;
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
            self.resume_accepting();
        }
        // Every armed timer has an owner: with no session and accepting open,
        // none may be left (an idle proxy must be able to sleep forever).
        debug_assert!(
            !self.sessions.is_empty()
                || !matches!(self.accepting, Accepting::Open)
                || self.core.timers.is_empty(),
            "{} timers armed with no session",
            self.core.timers.len()
        );
    }

    fn shutdown(&mut self) {
        log::info!("shutting down: closing {} sessions", self.sessions.len());
        for (_, s) in self.sessions.iter_mut() {
            s.abort(CloseReason::Shutdown, &mut self.core);
        }
        self.sessions.clear();
    }
}

fn protocol_name(p: crate::config::ListenerProtocol) -> &'static str {
    match p {
        crate::config::ListenerProtocol::Auto => "http+socks5",
        crate::config::ListenerProtocol::Http => "http",
        crate::config::ListenerProtocol::Socks5 => "socks5",
    }
}
