//! Opening (the session states `Handshake`, `Resolving` and `Connecting`):
//! the shell around the sans-IO [`OpeningCore`], which reads the client's
//! request, checks its login, and establishes its target.
//!
//! The shell owns the client's socket and the upstream connect in flight,
//! lends them to the core with the reactor's clock, and carries out what it
//! asks: a login to the verifier pool, a name to the resolver, a wait for
//! the inspected names, a connect (registered with the reactor), and the
//! records (who the client is, what it asked for, which rule allowed it).
//! It tells the core how a connect went, from the socket's readiness, and
//! builds the state each end names (`connect.rs`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::associate;
use super::closing::{answer, refuse};
use super::conn::{Conn, Decision};
use super::connect::{self, PolicyEnv};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::state::State;
use crate::config::ListenerProtocol;
use crate::core::clock::Deadline;
use crate::core::handshake::Leave;
use crate::core::opening::{Action, Input, Next, OpeningCore, Request};
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::Allowed;
use crate::target::Target;

pub(crate) struct Opening {
    client: Endpoint,
    /// The connect in flight (to the destination or its parent), or open.
    /// Boxed: the slot is sized by its largest state.
    upstream: Option<Box<Endpoint>>,
    core: OpeningCore,
}

impl Opening {
    /// An accepted client's handshake; see [`OpeningCore::handshake`].
    pub(crate) fn accept(
        client: Endpoint,
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        deadline: Deadline,
    ) -> Opening {
        Opening {
            client,
            upstream: None,
            core: OpeningCore::handshake(protocol, refusing, deadline),
        }
    }

    /// Straight to establishing `target` for the client the session
    /// authenticated (a forward proxy's next host; a tunnel switched to the
    /// name its first flight carried, `request.replied`).
    pub(crate) fn establish(
        client: Endpoint,
        target: Target,
        request: Request,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let deadline = Deadline::after(ctx.now, ctx.settings.timeouts.connect);
        let user = conn.log.user.clone();
        let env = PolicyEnv { conn, ctx };
        let (core, next) = OpeningCore::establish(target, user, request, deadline, &env);
        let this = Opening {
            client,
            upstream: None,
            core,
        };
        this.carry_out(next, conn, ctx)
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> Option<&mut Endpoint> {
        match side {
            Side::Client => Some(&mut self.client),
            Side::Upstream => self.upstream.as_deref_mut(),
        }
    }

    /// `Handshake`, `Resolving` or `Connecting`, as the session's state
    /// names it.
    pub(crate) fn name(&self) -> &'static str {
        self.core.name()
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    pub(crate) fn handshaking(&self) -> bool {
        self.core.handshaking()
    }

    pub(crate) fn is_refusing(&self) -> bool {
        self.core.is_refusing()
    }

    /// The policy allowed the target and an address is being dialled.
    pub(crate) fn dialling(&self) -> bool {
        self.core.dialling()
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    /// A reloaded policy still allows the target: see
    /// [`OpeningCore::reload`]. Returns false when the session must close.
    pub(crate) fn reload(
        &mut self,
        allowed: &Allowed,
        same_treatment: impl FnMut(IpAddr) -> bool,
    ) -> bool {
        self.core.reload(allowed, same_treatment)
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let env = PolicyEnv { conn, ctx };
        let upstream = self.upstream.as_deref_mut();
        let mut next = self.core.pump(ctx.now, &mut self.client, upstream, &env);
        if let (Next::Working, Some(upstream)) = (&next, self.upstream.as_deref()) {
            if self.core.connecting() {
                // epoll reports a finished connect as writable, a failed one
                // as an error (with hang-up): no syscall is needed to tell
                // them apart, and SO_ERROR is read only to say why it failed.
                if upstream.failed() {
                    let e = upstream
                        .connect_error()
                        .unwrap_or_else(|| io::ErrorKind::ConnectionRefused.into());
                    log::debug!("conn={} connect {:?}: {e}", conn.id, conn.log.dialled);
                    // The failed socket closes here, before the next attempt.
                    self.upstream = None;
                    next = self.core.handle(ctx.now, Input::ConnectFailed(e), &env);
                } else if upstream.can_write() {
                    // Through a parent, the core goes on to ask it: through
                    // the transition point, where the sub-stage is logged.
                    next = self.core.handle(ctx.now, Input::Connected, &env);
                }
            }
        }
        self.carry_out(next, conn, ctx)
    }

    /// A report for the core: a login's verdict, the resolver's answer,
    /// the inspected names resolved.
    pub(crate) fn on_input(mut self, input: Input, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let next = self.core.handle(ctx.now, input, &PolicyEnv { conn, ctx });
        self.carry_out(next, conn, ctx)
    }

    /// The session's timer fired: the core says whether its deadline passed.
    pub(crate) fn on_timeout(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let next = self.core.handle_timeout(ctx.now, &PolicyEnv { conn, ctx });
        self.carry_out(next, conn, ctx)
    }

    /// Carries out what the core asks, in order, then moves on as `next`
    /// says.
    fn carry_out(mut self, mut next: Next, conn: &mut Conn, ctx: &mut Ctx) -> State {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Identified {
                    spoke,
                    user,
                    rejected,
                } => {
                    if rejected {
                        ctx.stats.login_rejected();
                    }
                    if let Some(dialect) = spoke {
                        conn.log.protocol = Some(dialect.into());
                        conn.log.user = user;
                    }
                }
                Action::Target(target) => {
                    // A new target (a forward proxy's next host, a switched
                    // tunnel's name): what was recorded for the last one
                    // (its address, its rule) is not this one's.
                    conn.log.target = Some(target);
                    conn.log.dialled = None;
                    conn.log.decision = Decision::Undecided;
                }
                Action::Verify(job) => ctx.verify(*job),
                Action::Resolve(name) => ctx.resolve(name),
                Action::AwaitPins => {
                    if let Some(target) = &conn.log.target {
                        log::debug!(
                            "conn={} {target}: waiting for the inspected names' addresses",
                            conn.id
                        );
                    }
                    ctx.await_pins();
                }
                Action::Admitted {
                    rule,
                    audit_reasons,
                } => {
                    ctx.stats.allowed();
                    if let Some(target) = &conn.log.target {
                        log::debug!("conn={} allow {target} by rule {rule}", conn.id);
                    }
                    // Audit mode let through what enforcement would refuse: say so.
                    let decision = match audit_reasons.is_empty() {
                        false => Decision::would_deny(rule, &audit_reasons),
                        true => Decision::Allowed(rule),
                    };
                    conn.decide(decision, ctx);
                }
                Action::Dial(addr, ip) => match self.dial(addr, ctx) {
                    Ok(upstream) => {
                        self.upstream = Some(Box::new(upstream));
                        conn.log.dialled = Some(ip);
                    }
                    Err(e) => {
                        log::debug!("conn={} connect {addr}: {e}", conn.id);
                        let env = PolicyEnv { conn, ctx };
                        next = self.core.handle(ctx.now, Input::ConnectFailed(e), &env);
                    }
                },
            }
        }
        let client = self.client;
        match next {
            Next::Working => State::Opening(Opening { client, ..self }),
            Next::Closed(reason) => State::Done(reason),
            Next::Left(Leave::Refuse(refusal, dialect)) => {
                refuse(refusal, dialect, client, conn, ctx)
            }
            Next::Left(Leave::Answer { bytes, reason, why }) => {
                answer(&bytes, reason, why, client, conn, ctx)
            }
            Next::Left(Leave::Associate { port }) => associate::start(client, port, conn, ctx),
            Next::Left(Leave::To { .. }) => {
                // The core establishes a target itself; it never leaves to one.
                debug_assert!(false, "the opening core left to a target");
                State::Done(CloseReason::ClientGone)
            }
            Next::Refused(refused) => connect::refused(*refused, client, conn, ctx),
            Next::Open(opened) => match self.upstream {
                Some(upstream) => connect::established(*opened, client, *upstream, conn, ctx),
                None => {
                    // Only a connect that completed (and its parent's answer) opens.
                    debug_assert!(false, "open without an upstream");
                    State::Done(CloseReason::ConnectFailed)
                }
            },
        }
    }

    /// Starts a non-blocking connect to `addr`, registered with the reactor.
    fn dial(&self, addr: SocketAddr, ctx: &mut Ctx) -> io::Result<Endpoint> {
        let stream = mio::net::TcpStream::connect(addr)?;
        let mut upstream =
            Endpoint::dialled(Stream::Tcp(stream), ctx.tokens.upstream, ctx.registry)?;
        // Both sockets of the coming tunnel: a peer that vanished without
        // a FIN is found.
        let keepalive = ctx.settings.timeouts.keepalive;
        upstream.set_keepalive(keepalive);
        self.client.set_keepalive(keepalive);
        // A connect completes (or fails) with a writable edge.
        upstream.want(false, true);
        Ok(upstream)
    }
}
