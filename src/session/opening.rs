//! Opening (the session states `Handshake`, `Resolving`, `Connecting`,
//! `Securing` and `Vetting`, and `Closing` for a refused client): the shell
//! around the sans-IO [`OpeningCore`], which reads the client's request,
//! checks its login, establishes its target, then reads a terminated
//! tunnel's ClientHello or vets a raw tunnel's first flight where some
//! rule inspects the port, or answers a refusal and closes.
//!
//! The shell owns the client's socket and the upstream connect in flight,
//! lends them to the core with the reactor's clock, and carries out what it
//! asks: a login to the verifier pool, a name to the resolver, a wait for
//! the inspected names, a connect (registered with the reactor), and the
//! records (who the client is, what it asked for, which rule allowed or
//! refused it; a refused client's answer and close are the core's). It
//! builds the state each end names (`connect.rs`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use rustls::{ClientConfig, ServerConfig};

use super::associate;
use super::conn::{Conn, Decision};
use super::connect::{self, PolicyEnv};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::state::State;
use crate::config::ListenerProtocol;
use crate::core::clock::Deadline;
use crate::core::establish;
use crate::core::opening::{Action, Input, Next, OpeningCore, Request};
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::Allowed;
use crate::target::{Host, Target};

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
    /// authenticated (a forward proxy's next host on the connection).
    pub(crate) fn establish(
        client: Endpoint,
        target: Target,
        request: Request,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let user = conn.log.user.clone();
        let env = PolicyEnv { conn, ctx };
        let (core, next) = OpeningCore::establish(ctx.now, target, user, request, &env);
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

    pub(crate) fn phase(&self) -> crate::lifecycle::Phase {
        self.core.phase()
    }

    /// The policy allowed the target and an address is being dialled.
    pub(crate) fn dialling(&self) -> bool {
        self.core.dialling()
    }

    /// A raw tunnel, open, its first flight being read.
    pub(crate) fn vetting(&self) -> bool {
        self.core.vetting()
    }

    /// A terminated tunnel, open, its ClientHello being read.
    pub(crate) fn securing(&self) -> bool {
        self.core.securing()
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
        let next = self.core.pump(ctx.now, &mut self.client, upstream, &env);
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
        let env = PolicyEnv { conn, ctx };
        let next = self.core.handle_timeout(ctx.now, &mut self.client, &env);
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
                    conn.log.protocol = Some(spoke.into());
                    conn.log.user = user;
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
                Action::Establish(establish::Action::Resolve(name)) => ctx.resolve(name),
                Action::Establish(establish::Action::AwaitPins) => {
                    if let Some(target) = &conn.log.target {
                        log::debug!(
                            "conn={} {target}: waiting for the inspected names' addresses",
                            conn.id
                        );
                    }
                    ctx.await_pins();
                }
                Action::Establish(establish::Action::Admitted {
                    rule,
                    audit_reasons,
                }) => {
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
                Action::Switched { why } => {
                    log::info!("conn={} {why}", conn.id);
                    // The first upstream closes here, before the next dial.
                    self.upstream = None;
                }
                Action::Note(note) => log::info!("conn={} {note}", conn.id),
                Action::Refusing(refusing) => {
                    // The core answers the client; the upstream closes now.
                    self.upstream = None;
                    connect::refusing(refusing, conn, ctx);
                }
                Action::Certify(name) => {
                    let configs = certify(&name, conn, ctx);
                    let env = PolicyEnv { conn, ctx };
                    next = self.core.handle(ctx.now, Input::Certified(configs), &env);
                }
                Action::Establish(establish::Action::Dial(addr, ip)) => {
                    // A failed connect's socket closes before the next one.
                    self.upstream = None;
                    match self.dial(addr, conn, ctx) {
                        Ok(upstream) => {
                            self.upstream = Some(Box::new(upstream));
                            conn.log.dialled = Some(ip);
                        }
                        Err(e) => {
                            log::debug!("conn={} connect {addr}: {e}", conn.id);
                            let env = PolicyEnv { conn, ctx };
                            next = self.core.handle(ctx.now, Input::ConnectFailed(e), &env);
                        }
                    }
                }
            }
        }
        let client = self.client;
        match next {
            Next::Working => State::Opening(Opening { client, ..self }),
            Next::Again => {
                ctx.again();
                State::Opening(Opening { client, ..self })
            }
            Next::Closed(reason) => State::Done(reason),
            Next::Reset(reason) => {
                client.abort_on_close();
                State::Done(reason)
            }
            Next::Associate { port } => associate::start(client, port, conn, ctx),
            Next::Secured(secured) => match self.upstream {
                Some(upstream) => connect::secured(*secured, client, *upstream, conn, ctx),
                None => {
                    debug_assert!(false, "secured without an upstream");
                    State::Done(CloseReason::ConnectFailed)
                }
            },
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

    /// Starts a non-blocking connect to `addr`, registered with the reactor
    /// under the upstream token the session's last upstream socket did not
    /// use (the one it replaces may have raised an event in this poll
    /// batch, still to be dispatched: a reset must not read as this connect
    /// failing, nor a FIN as this upstream finishing).
    fn dial(&self, addr: SocketAddr, conn: &mut Conn, ctx: &mut Ctx) -> io::Result<Endpoint> {
        let stream = mio::net::TcpStream::connect(addr)?;
        let mut upstream = conn.register_upstream(&ctx.tokens, |token| {
            Endpoint::dialled(Stream::Tcp(stream), token, ctx.registry)
        })?;
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

/// The configs a terminated tunnel needs once its ClientHello named `name`:
/// the leaf for it (minted, or from the cache) and the upstream's trust.
fn certify(
    name: &Host,
    conn: &Conn,
    ctx: &mut Ctx,
) -> Result<(Arc<ServerConfig>, Arc<ClientConfig>), String> {
    let server = ctx.tls.server_config(name).map_err(|e| {
        let target = conn.log.target.as_ref().map(ToString::to_string);
        let why = format!(
            "could not mint a certificate for {}: {e}",
            target.as_deref().unwrap_or("the target")
        );
        log::warn!("conn={} {why}", conn.id);
        why
    })?;
    let client = ctx
        .tls
        .client_config()
        .map_err(|e| format!("TLS to the upstream: {e}"))?;
    Ok((server, client))
}
