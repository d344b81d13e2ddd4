//! Handshake, the shell: it owns the client's socket and lends it to
//! [`HandshakeCore`], which reads the request (HTTP CONNECT or SOCKS5),
//! answers what must be answered before a target is known, and checks the
//! client's credentials. The shell hands a login the core cannot decide at
//! once to the verifier pool (the handshake waits in its `authenticating`
//! sub-stage, the handshake deadline still running), and turns the core's
//! exit into the next state.

use std::time::Instant;

use super::associate;
use super::closing::{answer, refuse};
use super::conn::Conn;
use super::connect;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::state::State;
use crate::auth::Verdict;
use crate::config::ListenerProtocol;
use crate::core::clock::Deadline;
use crate::core::handshake::{Env, Exit, HandshakeCore, Leave, Next};
use crate::lifecycle::CloseReason;

pub(crate) struct Handshake {
    client: Endpoint,
    core: HandshakeCore,
}

impl Handshake {
    pub(crate) fn new(
        client: Endpoint,
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        deadline: Deadline,
    ) -> Self {
        Handshake {
            client,
            core: HandshakeCore::new(protocol, refusing, deadline),
        }
    }

    /// When the handshake runs out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    pub(crate) fn is_refusing(&self) -> bool {
        self.core.is_refusing()
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    pub(crate) fn client(&mut self) -> &mut Endpoint {
        &mut self.client
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let next = self.core.pump(&mut self.client, env(ctx));
        self.carry_out(next, conn, ctx)
    }

    /// The session's timer fired: the core says whether the handshake ran
    /// out of time (closed, unless what arrived is refused for what it is).
    pub(crate) fn on_timeout(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self.core.handle_timeout(ctx.now, env(ctx)) {
            Some(next) => self.carry_out(next, conn, ctx),
            None => State::Handshake(self),
        }
    }

    /// The verifier pool's verdict on the credentials given.
    pub(crate) fn on_verified(mut self, verdict: Verdict, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let next = self.core.handle_verdict(verdict);
        self.carry_out(next, conn, ctx)
    }

    /// Does what the core asked for, and moves on as it says.
    fn carry_out(self, next: Next, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match next {
            // Waiting, or a new sub-stage: through the transition point (it
            // is logged), then driven again at once.
            Next::Stay => State::Handshake(self),
            Next::Verify(job) => {
                ctx.verify(job);
                State::Handshake(self)
            }
            Next::Gone => State::Done(CloseReason::ClientGone),
            Next::TimedOut => State::Done(CloseReason::HandshakeTimeout),
            Next::Leave(exit) => self.leave(exit, conn, ctx),
        }
    }

    /// Leaves the handshake, handing the client socket on.
    fn leave(self, exit: Exit, conn: &mut Conn, ctx: &mut Ctx) -> State {
        if exit.rejected {
            ctx.stats.login_rejected();
        }
        if let Some(dialect) = exit.spoke {
            conn.log.protocol = Some(dialect.into());
            conn.log.user = exit.user.as_deref().map(Box::from);
        }
        match exit.leave {
            Leave::To {
                target,
                dialect,
                early,
                login,
            } => connect::start(self.client, target, dialect, early, login, conn, ctx),
            Leave::Refuse(refusal, dialect) => refuse(refusal, dialect, self.client, conn, ctx),
            Leave::Associate { port } => associate::start(self.client, port, conn, ctx),
            Leave::Answer { bytes, reason, why } => {
                answer(&bytes, reason, why, self.client, conn, ctx)
            }
        }
    }
}

/// What the handshake core is lent from the settings.
fn env<'a>(ctx: &Ctx<'a>) -> Env<'a> {
    Env {
        max_head_bytes: ctx.settings.limits.max_head_bytes,
        users: ctx.settings.auth.as_deref(),
        logins: ctx.logins,
    }
}
