//! A session: one client connection, its upstream, and the state machine that
//! relays between them.
//!
//! The reactor owns sessions in a slab and calls [`Session::on_event`],
//! [`Session::on_timer`], [`Session::on_resolved`], [`Session::on_verified`],
//! [`Session::on_pins`], [`Session::on_reload`], [`Session::abort`] and
//! [`Session::run`], lending a [`Ctx`]; each returns the [`Effects`]
//! the call asks of the reactor (`#[must_use]`: the reactor applies them). Each
//! handler runs the current state, which consumes itself and returns the
//! next; [`Session::step`] is the one place a state changes, so every
//! transition (a sub-stage change included) is logged there, the phase gauges move
//! there, and the session's timer is armed there on the new state's
//! deadline (a stage's core keeps its own: `State::poll_timeout`).
//!
//! Each state owns what it uses, sockets included: Machine owns the
//! client and the upstream (pending, then open, then let go when its core
//! says), Passthrough owns both ends, Closing owns the survivor. A socket
//! closes when the state that owns it lets it go.

mod associate;
mod channel;
mod closing;
mod conn;
mod connect;
mod ctx;
mod endpoint;
pub(crate) mod handshake_rate;
mod machine;
mod passthrough;
mod state;
#[cfg(test)]
mod tests;
mod tls_env;

// Refusals are the core's vocabulary (a core decides them); the states
// here name them as `super::refusal::...`.
use crate::core::refusal;

use std::io;
use std::net::IpAddr;

use mio::event::Event;

pub(crate) use associate::{WaitBudget, WAITING_BYTES_TOTAL};
pub(crate) use connect::OwnAddrs;
pub(crate) use ctx::{Ctx, Effects, RelayBind, Settings, Tokens};
#[cfg(target_os = "linux")]
pub(crate) use passthrough::pipe::PipeBudget;
pub(crate) use tls_env::{TlsEnv, UpstreamTrust};

use conn::{Conn, Decision};
use endpoint::Endpoint;
use state::State;

use crate::client::Peer;
use crate::config::ListenerProtocol;
use crate::core::clock::Deadline;
use crate::core::opening::Input;
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Phase, Side};
use crate::policy::Recheck;

/// One client connection and everything it leads to.
pub(crate) struct Session {
    conn: Conn,
    state: State,
}

impl Session {
    /// Registers an accepted client and starts its handshake. `refusing`
    /// names the limit the client is past, if any: it is answered and closed.
    /// Returns the session and the effects of its first run.
    pub(crate) fn accept(
        id: u64,
        stream: Stream,
        peer: Peer,
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        ctx: &mut Ctx,
    ) -> io::Result<(Session, Effects)> {
        let client = Endpoint::accepted(stream, ctx.tokens.client, ctx.registry)?;
        let mut conn = Conn::new(id, peer, ctx.now);
        let deadline = Deadline::after(ctx.now, ctx.settings.timeouts.handshake);
        let state = State::Machine(machine::Machine::accept(
            client, protocol, refusing, deadline,
        ));
        conn.deadline = state.poll_timeout();
        ctx.stats.phase(None, state.phase());
        log::debug!("conn={id} accepted: {state}");
        let mut session = Session { conn, state };
        // The request is usually queued already: read it now, not a wakeup later.
        let effects = session.run(ctx);
        Ok((session, effects))
    }

    pub(crate) fn id(&self) -> u64 {
        self.conn.id
    }

    /// What `list-sessions` shows of it.
    pub(crate) fn info(&self, now: std::time::Instant) -> crate::lifecycle::SessionInfo {
        self.conn.info(self.state.to_string(), now)
    }

    /// A TCP client's address and ours, while the session still holds the
    /// client's socket (ours costs one `getsockname`): what the kernel knows
    /// the client's socket by.
    pub(crate) fn client_tuple(&mut self) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
        let crate::client::PeerAddr::Tcp(client) = self.conn.log.peer.addr else {
            return None;
        };
        let ours = self.state.endpoint(Side::Client)?.local_addr()?;
        Some((client, ours))
    }

    /// Ended and waiting to be reaped.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done(_))
    }

    /// A readiness event on one of the session's sockets.
    pub(crate) fn on_event(&mut self, side: Side, ev: &Event, ctx: &mut Ctx) -> Effects {
        // An event for a socket the state no longer owns (dropped earlier in
        // this same poll batch) is ignored: an upstream socket's is told by
        // its token, since the one that replaced it took the other.
        let current = match side {
            Side::Client => true,
            Side::Upstream => self.conn.is_current_upstream(ev.token(), &ctx.tokens),
        };
        if current && self.state.absorb(side, ev) {
            self.run(ctx)
        } else {
            self.report(ctx)
        }
    }

    /// Runs the current state until it stops changing: a new state acts at
    /// once on readiness already seen, because edges do not repeat.
    pub(crate) fn run(&mut self, ctx: &mut Ctx) -> Effects {
        while self.step(ctx, State::drive) {}
        self.report(ctx)
    }

    /// A readiness event on the session's UDP relay socket (an association's).
    pub(crate) fn on_relay_event(&mut self, ev: &Event, ctx: &mut Ctx) -> Effects {
        match &mut self.state {
            State::Associate(a) => {
                a.absorb_relay(ev);
                self.run(ctx)
            }
            _ => self.report(ctx),
        }
    }

    /// The session's deadline passed.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx) -> Effects {
        if self.conn.deadline.is_some_and(|d| d > ctx.now) {
            // Moved later since the reactor armed it: nothing due yet.
            return self.report(ctx);
        }
        self.conn.deadline = None;
        if self.step(ctx, State::on_timer) {
            return self.run(ctx);
        }
        if self.conn.deadline.is_none() {
            // A stage whose core says its deadline has not come yet keeps
            // it: no session is left without a timer.
            self.conn.deadline = self.state.poll_timeout();
        }
        self.report(ctx)
    }

    /// The resolver answered.
    pub(crate) fn on_resolved(
        &mut self,
        result: io::Result<Vec<IpAddr>>,
        ctx: &mut Ctx,
    ) -> Effects {
        let changed = self.step(ctx, |state, conn, ctx| match state {
            State::Machine(m) => m.on_input(Input::Resolved(result), conn, ctx),
            State::Associate(a) => a.on_resolved(result, conn, ctx),
            other => other,
        });
        if changed {
            self.run(ctx)
        } else {
            self.report(ctx)
        }
    }

    /// The policy's inspected names are resolved (it asked to wait for them).
    pub(crate) fn on_pins(&mut self, ctx: &mut Ctx) -> Effects {
        let changed = self.step(ctx, |state, conn, ctx| match state {
            State::Machine(m) => m.on_input(Input::PinsSettled, conn, ctx),
            other => other,
        });
        if changed {
            self.run(ctx)
        } else {
            self.report(ctx)
        }
    }

    /// The verifier pool answered this session's login.
    pub(crate) fn on_verified(&mut self, verdict: crate::auth::Verdict, ctx: &mut Ctx) -> Effects {
        let changed = self.step(ctx, |state, conn, ctx| match state {
            State::Machine(m) => m.on_input(Input::Verdict(verdict), conn, ctx),
            other => other,
        });
        if changed {
            self.run(ctx)
        } else {
            self.report(ctx)
        }
    }

    /// A new policy is in force: a tunnel it no longer allows is closed; an
    /// inspected session takes the new request rules.
    pub(crate) fn on_reload(&mut self, ctx: &mut Ctx) -> Effects {
        if let State::Associate(a) = &mut self.state {
            // Each datagram is judged again under the new policy.
            a.on_reload();
            return self.report(ctx);
        }
        // Only what the policy admitted already is looked at again (a
        // session still resolving is decided under the new policy anyway).
        let admitted = match &self.state {
            State::Machine(m) => m.admitted(),
            State::Passthrough(_) => true,
            _ => false,
        };
        if !admitted {
            return self.report(ctx);
        }
        let (Some(target), Some(ip)) = (&self.conn.log.target, self.conn.log.dialled) else {
            return self.report(ctx);
        };
        let raw = matches!(&self.state, State::Machine(m) if m.vetting())
            || (matches!(self.state, State::Passthrough(_)) && !self.conn.log.upgraded);
        let user = self.conn.log.user.as_deref();
        match ctx.policy.recheck_as(target, user, ip, raw, ctx.now) {
            Recheck::Deny(d) => {
                log::info!(
                    "conn={} {target}: closed by policy reload: {d}",
                    self.conn.id
                );
                self.conn.log.decision = Decision::denied(&d);
                // A client still waiting for its answer hears why.
                let answered = self.step(ctx, |state, conn, ctx| match state {
                    State::Machine(m) => m.on_revoke(d, conn, ctx),
                    _ => State::Done(CloseReason::PolicyReload),
                });
                if answered {
                    return self.run(ctx);
                }
            }
            // Allowed now only under inspection: a raw tunnel cannot be
            // inspected after the fact, so it closes.
            Recheck::NeedsInspection(allowed) => {
                log::info!(
                    "conn={} {target}: closed by policy reload: rule {} now inspects it",
                    self.conn.id,
                    allowed.rule
                );
                self.conn.log.decision = Decision::Allowed(allowed.rule);
                self.conn.log.error = Some("policy now requires inspection".into());
                self.step(ctx, |_, _, _| State::Done(CloseReason::PolicyReload));
            }
            Recheck::Keep(allowed) => {
                let kept = match &mut self.state {
                    State::Machine(m) => {
                        let (policy, now) = (&ctx.policy, ctx.now);
                        let secrets = policy.secrets().cloned();
                        m.reload(&allowed, secrets, |a| {
                            match policy.recheck_as(target, user, a, false, now) {
                                Recheck::Keep(b) => {
                                    b.is_inspected() == allowed.is_inspected()
                                        && b.terminates_tls() == allowed.terminates_tls()
                                }
                                _ => false,
                            }
                        })
                    }
                    _ => true,
                };
                if !kept {
                    // Not yet relaying: closing costs the client one retry,
                    // while going on would relay it raw where the policy
                    // now inspects.
                    log::info!(
                        "conn={} {target}: closed by policy reload: rule {} now {}",
                        self.conn.id,
                        allowed.rule,
                        if allowed.terminates_tls() {
                            "terminates its TLS"
                        } else {
                            "inspects it"
                        }
                    );
                    self.conn.log.decision = Decision::Allowed(allowed.rule);
                    self.conn.log.error = Some("policy now requires inspection".into());
                    self.step(ctx, |_, _, _| State::Done(CloseReason::PolicyReload));
                }
            }
        }
        self.report(ctx)
    }

    /// Ends the session now, whatever it was doing (shutdown).
    pub(crate) fn abort(&mut self, reason: CloseReason, ctx: &mut Ctx) -> Effects {
        if !self.is_done() {
            self.step(ctx, |_, _, _| State::Done(reason));
        }
        self.report(ctx)
    }

    /// Ends a call: the effects it asked for, with what the reactor needs
    /// to know after any call (the deadline, and whether it ended).
    fn report(&self, ctx: &mut Ctx) -> Effects {
        let closed = match self.state {
            State::Done(reason) => Some(reason),
            _ => None,
        };
        let deadline = if closed.is_some() {
            None
        } else {
            self.conn.deadline
        };
        ctx.finish(deadline, closed)
    }

    /// Runs `f` on the current state and enters the state it returns. This is
    /// the one place a state changes: the change is logged (sub-stages too),
    /// the phase gauges move, the timer is armed on the new state's
    /// deadline, and an ended session is accounted for. Returns whether the
    /// state changed.
    fn step(&mut self, ctx: &mut Ctx, f: impl FnOnce(State, &mut Conn, &mut Ctx) -> State) -> bool {
        let state = std::mem::replace(&mut self.state, State::Done(CloseReason::Done));
        let from_kind = std::mem::discriminant(&state);
        let (from, from_phase) = (state.label(), state.phase());
        let next = f(state, &mut self.conn, ctx);
        if std::mem::discriminant(&next) == from_kind {
            // Same state; a new sub-stage is a change too (logged, and the
            // caller drives again), which only progress can cause.
            let moved = next.label() != from;
            if moved {
                log::debug!("conn={} {from}=>{next}", self.conn.id);
            }
            // Opening moves from the handshake to resolving to connecting
            // within itself: the phase moves with it, and a core that keeps
            // the deadline may have a new one (the connect's, once the
            // handshake is over).
            let phase = next.phase();
            if phase != from_phase {
                if from_phase == Some(Phase::Handshake) {
                    ctx.left_handshake();
                }
                ctx.stats.phase(from_phase, phase);
            }
            if let Some(due) = next.poll_timeout() {
                self.conn.deadline = Some(due);
            }
            self.state = next;
            return moved;
        }
        log::debug!("conn={} {from}=>{next}", self.conn.id);
        if from_phase == Some(Phase::Handshake) {
            ctx.left_handshake();
        }
        let timeouts = &ctx.settings.timeouts;
        match &next {
            // Their cores keep their deadlines (the resolve's and the
            // connect's is one; an inspected session's clocks are set as
            // it goes).
            State::Machine(_) | State::Closing(_) => self.conn.deadline = next.poll_timeout(),
            State::Passthrough(p) => {
                self.conn.deadline = p
                    .idle_timeout(timeouts.half_close)
                    .map(|idle| ctx.now + idle);
            }
            // Its idle deadline was set as it started.
            State::Associate(_) => {}
            State::Done(reason) => {
                self.conn.deadline = None;
                ctx.stats.closed(*reason);
                self.conn.access_line(*reason, ctx);
            }
        }
        // After the close is counted: a reader that sees the session gone
        // from the gauges also sees it closed.
        ctx.stats.phase(from_phase, next.phase());
        self.state = next;
        true
    }
}

impl Conn {
    /// Counts relayed payload bytes, `n` of them, moving from `from`.
    pub(crate) fn count(&mut self, from: Side, n: usize, ctx: &Ctx) {
        match from {
            Side::Client => {
                self.log.up += n as u64;
                ctx.stats.bytes_up(n);
            }
            Side::Upstream => {
                self.log.down += n as u64;
                ctx.stats.bytes_down(n);
            }
        }
    }
}

#[cfg(test)]
mod sizes {
    use std::mem::size_of;

    /// The states a session passes through on its way in are boxed or kept
    /// small, so that the slot is sized by the states a tunnel lives in.
    #[test]
    fn no_state_is_larger_than_an_idle_tunnel() {
        let state = size_of::<super::State>();
        let passthrough = size_of::<super::passthrough::Passthrough>();
        assert!(
            state <= passthrough + 8,
            "State {state} B, Passthrough {passthrough} B"
        );
        // mio's sockets carry a selector id with debug assertions on (16 B
        // each), so a debug build (what CI tests) has its own bound.
        #[cfg(target_pointer_width = "64")]
        {
            let most = if cfg!(debug_assertions) { 176 } else { 144 };
            assert!(passthrough <= most, "Passthrough {passthrough} B");
            assert!(
                // 216 before UDP associations: every access record now
                // says whether it carried datagrams (their counts boxed).
                size_of::<super::Conn>() <= 224,
                "Conn {} B",
                size_of::<super::Conn>()
            );
        }
    }
}
