//! A session: one client connection, its upstream, and the state machine that
//! relays between them.
//!
//! The reactor owns sessions in a slab and calls [`Session::on_ready`],
//! [`Session::on_timer`], [`Session::on_resolved`] and [`Session::on_reload`].
//! Each handler runs the current state, which consumes itself and returns the
//! next; [`Session::advance`] is the one place a state changes, so every
//! transition is logged, counted, and given its deadline there.

mod carrier;
mod closing;
mod connect;
mod endpoint;
mod handshake;
mod inspect;
mod refusal;
mod state;
mod tunnel;

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Event;

#[cfg(target_os = "linux")]
pub(crate) use carrier::pipe::PipeBudget;
use endpoint::Endpoint;
pub(crate) use endpoint::Side;
use state::State;

use crate::config::ListenerProtocol;
use crate::io::Stream;
use crate::policy::Target;
use crate::reactor::admission::ClientKey;
use crate::reactor::timer::TimerId;
use crate::reactor::{listener::Peer, Core, Timer};
use crate::stats::{CloseReason, Phase};

/// Everything about a session except its state: its sockets, its deadline,
/// and what its access line will say.
pub(crate) struct Conn {
    key: usize,
    id: u64,
    /// Whom the admission limits count this session against.
    client_key: ClientKey,
    /// Counted by admission (false: past a limit, being refused).
    admitted: bool,
    client: Endpoint,
    upstream: Option<Endpoint>,
    timer: Option<TimerId>,
    log: AccessLog,
}

/// What the access line at close reports.
struct AccessLog {
    peer: Peer,
    started: Instant,
    target: Option<Target>,
    /// The upstream address the tunnel was made to.
    upstream_ip: Option<IpAddr>,
    decision: Decision,
    /// Why the session was refused, if it was.
    error: Option<String>,
    /// Inspected HTTP requests this session carried.
    requests: u32,
    /// An inspected session switched to raw passthrough after a 101.
    upgraded: bool,
    up: u64,
    down: u64,
}

enum Decision {
    Undecided,
    Allowed(Arc<str>),
    Denied(String),
}

impl Conn {
    /// Arms the session's one deadline, replacing any other.
    fn arm(&mut self, core: &mut Core, after: Duration) {
        self.disarm(core);
        let timer = Timer::Session {
            key: self.key,
            id: self.id,
        };
        self.timer = Some(core.timers.insert(core.now + after, timer));
    }

    fn disarm(&mut self, core: &mut Core) {
        if let Some(t) = self.timer.take() {
            core.timers.cancel(t);
        }
    }

    fn upstream_token(&self) -> mio::Token {
        crate::reactor::token::session(self.key, Side::Upstream)
    }

    /// Drops one side's socket: deregistered first, then closed.
    fn drop_side(&mut self, side: Side, core: &Core) {
        match side {
            Side::Client => {
                // The client's fd closes when the reactor reaps the slot; it
                // is deregistered now so no event for it fires again.
                let _ = core.registry.deregister(&mut self.client.stream);
                self.client.readable = false;
                self.client.writable = false;
            }
            Side::Upstream => {
                if let Some(ep) = self.upstream.take() {
                    ep.close(&core.registry);
                }
            }
        }
    }

    fn side(&mut self, side: Side) -> Option<&mut Endpoint> {
        match side {
            Side::Client => Some(&mut self.client),
            Side::Upstream => self.upstream.as_mut(),
        }
    }
}

/// One client connection and everything it leads to.
pub(crate) struct Session {
    conn: Conn,
    state: State,
}

impl Session {
    /// Registers an accepted client and starts its handshake. `refusing`
    /// names the limit the client is past, if any: it is answered and closed.
    pub(crate) fn accept(
        key: usize,
        id: u64,
        stream: Stream,
        peer: Peer,
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        core: &mut Core,
    ) -> io::Result<Session> {
        let token = crate::reactor::token::session(key, Side::Client);
        let client = Endpoint::register(stream, token, &core.registry)?;
        let peer_key = peer.key();
        let log = AccessLog {
            peer,
            started: core.now,
            target: None,
            upstream_ip: None,
            decision: Decision::Undecided,
            error: None,
            requests: 0,
            upgraded: false,
            up: 0,
            down: 0,
        };
        let mut conn = Conn {
            key,
            id,
            client_key: peer_key,
            admitted: refusing.is_none(),
            client,
            upstream: None,
            timer: None,
            log,
        };
        conn.arm(core, core.settings.timeouts.handshake);
        let state = State::Handshake(handshake::Handshake::new(protocol, refusing));
        core.stats().phase(None, state.phase());
        Ok(Session { conn, state })
    }

    pub(crate) fn id(&self) -> u64 {
        self.conn.id
    }

    /// Ended and waiting to be reaped.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done(_))
    }

    /// A readiness event on one of the session's sockets.
    pub(crate) fn on_ready(&mut self, side: Side, ev: &Event, core: &mut Core) {
        if self.is_done() {
            return;
        }
        match self.conn.side(side) {
            Some(ep) => ep.absorb(ev),
            // An event for a side already dropped in this same poll batch.
            None => return,
        }
        self.drive(core);
    }

    /// Runs the current state until it stops changing: a new state acts at
    /// once on readiness already seen, because edges do not repeat.
    pub(crate) fn drive(&mut self, core: &mut Core) {
        while self.step(core, State::drive) {}
    }

    /// The session's deadline passed.
    pub(crate) fn on_timer(&mut self, core: &mut Core) {
        self.conn.timer = None;
        if self.step(core, State::on_timer) {
            self.drive(core);
        }
    }

    /// The resolver answered.
    pub(crate) fn on_resolved(&mut self, result: io::Result<Vec<IpAddr>>, core: &mut Core) {
        let changed = self.step(core, |state, conn, core| match state {
            State::Resolving(r) => r.on_resolved(result, conn, core),
            other => other,
        });
        if changed {
            self.drive(core);
        }
    }

    /// A new policy is in force: a tunnel it no longer allows is closed.
    pub(crate) fn on_reload(&mut self, core: &mut Core) {
        if !matches!(
            self.state,
            State::Connecting(_) | State::Established(_) | State::Inspect(_)
        ) {
            return;
        }
        let (Some(target), Some(ip)) = (&self.conn.log.target, self.conn.log.upstream_ip) else {
            return;
        };
        match core.policy.check_resolved(target, &[ip]) {
            crate::policy::Verdict::Deny(d) => {
                log::info!(
                    "conn={} {target}: closed by policy reload: {d}",
                    self.conn.id
                );
                self.conn.log.decision = Decision::Denied(d.to_string());
                self.step(core, |_, _, _| State::Done(CloseReason::PolicyReload));
            }
            // Still allowed: an inspected session checks its next requests
            // against the new request rules.
            crate::policy::Verdict::Allow(allowed) => {
                if let State::Inspect(inspect) = &mut self.state {
                    inspect.set_rules(allowed.inspect);
                }
            }
        }
    }

    /// Ends the session now, whatever it was doing (shutdown).
    pub(crate) fn abort(&mut self, reason: CloseReason, core: &mut Core) {
        if !self.is_done() {
            self.step(core, |_, _, _| State::Done(reason));
        }
    }

    /// Runs `f` on the current state and enters the state it returns. This is
    /// the one place a state changes: the change is logged, the phase gauges
    /// move, the new state gets its deadline, and an ended session is torn
    /// down. Returns whether the state changed.
    fn step(
        &mut self,
        core: &mut Core,
        f: impl FnOnce(State, &mut Conn, &mut Core) -> State,
    ) -> bool {
        let state = std::mem::replace(&mut self.state, State::Done(CloseReason::Done));
        let (from, from_kind, from_phase) =
            (state.name(), std::mem::discriminant(&state), state.phase());
        let was_resolving = matches!(state, State::Resolving(_));
        let next = f(state, &mut self.conn, core);
        if std::mem::discriminant(&next) == from_kind {
            self.state = next;
            return false;
        }
        log::debug!("conn={} {from}=>{}", self.conn.id, next.name());
        if from_phase == Some(Phase::Handshake) && self.conn.admitted {
            core.admission.left_handshake(self.conn.client_key);
        }
        match &next {
            State::Handshake(_) => {}
            State::Resolving(_) => self.conn.arm(core, core.settings.timeouts.connect),
            // Resolve and connect share one deadline.
            State::Connecting(_) if was_resolving => {}
            State::Connecting(_) => self.conn.arm(core, core.settings.timeouts.connect),
            State::Established(t) => match t.idle_timeout() {
                Some(idle) => self.conn.arm(core, idle),
                None => self.conn.disarm(core),
            },
            // Inspect keeps its own deadline (response, idle) as it goes.
            State::Inspect(_) => self.conn.disarm(core),
            State::Closing(_) => self.conn.arm(core, core.settings.timeouts.close),
            State::Done(reason) => self.conn.finish(*reason, core),
        }
        // After `finish` counted the close: a reader that sees the session
        // gone from the gauges also sees it closed.
        core.stats().phase(from_phase, next.phase());
        self.state = next;
        true
    }
}

impl Conn {
    /// Tears the session down: deadline cancelled, both sockets deregistered
    /// (the client fd closes when the reactor reaps the slot), the reason
    /// counted and the access line written.
    fn finish(&mut self, reason: CloseReason, core: &mut Core) {
        self.disarm(core);
        self.drop_side(Side::Upstream, core);
        self.drop_side(Side::Client, core);
        core.stats().closed(reason);
        core.admission.ended(self.client_key, self.admitted);
        let log = &self.log;
        let target = log
            .target
            .as_ref()
            .map_or_else(|| "-".to_string(), |t| t.to_string());
        let decision = match &log.decision {
            Decision::Undecided => "-".to_string(),
            Decision::Allowed(rule) => format!("allow rule={rule}"),
            Decision::Denied(why) => format!("deny ({why})"),
        };
        let error = log
            .error
            .as_ref()
            .map_or_else(String::new, |e| format!(" error={e:?}"));
        let http = if log.requests > 0 || log.upgraded {
            format!(" requests={} upgraded={}", log.requests, log.upgraded)
        } else {
            String::new()
        };
        log::info!(
            "access conn={} client={} target={target} decision={decision} up={} down={} duration={:.3}s close={reason}{http}{error}",
            self.id,
            log.peer,
            log.up,
            log.down,
            core.now.saturating_duration_since(log.started).as_secs_f64(),
        );
    }
}
