//! Establishing (the session states `Resolving` and `Connecting`): policy
//! on the name, DNS off the loop, policy on every resolved address, then a
//! non-blocking connect to each vetted address in turn, all within one
//! connect deadline.
//!
//! The decisions are the sans-IO [`EstablishCore`]'s, which asks the
//! policy through [`establish::Env`] and, once the upstream is open, says
//! which state follows ([`crate::core::route::After`]). This shell starts the resolver and the
//! connects (and registers them), lends the upstream socket to the core,
//! counts, logs and records each decision, and builds the state each
//! answer names.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::channel::Channel;
use super::closing::{answer, refuse};
use super::conn::{Conn, Decision, Reasoned};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::handshake_rate::Budget;
use super::inspect::Inspect;
use super::passthrough::{Passthrough, Preload};
use super::refusal::{Dialect, Refusal};
use super::securing::Securing;
use super::state::State;
use super::vetting::Vetting;
use crate::config::ListenAddr;
use crate::core::clock::Deadline;
use crate::core::establish::{self, Action, EstablishCore, Input, Next};
use crate::core::route::{self, After};
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Allowed, NameVerdict, Target, Verdict};
use crate::protocol::http1::SameLogin;
use crate::protocol::parent::ParentProxy;
use crate::target::Host;

/// What the handshake hands on besides the target: how to answer, the
/// client's first payload bytes, and the login later forward-proxy
/// requests are held to.
pub(crate) struct Request {
    dialect: Dialect,
    early: Vec<u8>,
    login: Option<SameLogin>,
    /// The client was answered already (a tunnel switched by Vetting to the
    /// name its first flight carried): no reply is sent, and a refusal is
    /// a close.
    replied: bool,
}

/// Leaves the handshake (or a forward proxy's upstream) for `target`:
/// refused by name, resolving, or (for an address literal) decided at once.
pub(crate) fn start(
    client: Endpoint,
    target: Target,
    dialect: Dialect,
    early: Vec<u8>,
    login: Option<SameLogin>,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    let request = Request {
        dialect,
        early,
        login,
        replied: false,
    };
    begin(client, target, request, conn, ctx)
}

/// A raw tunnel already answered (`200` or the SOCKS5 reply) whose first
/// flight, `first`, names `target`, which the policy treats more strictly:
/// the session goes on as if the client had asked for `target`, under
/// `target`'s own rule and dialled to its own addresses.
pub(crate) fn switch(
    client: Endpoint,
    target: Target,
    dialect: Dialect,
    first: Vec<u8>,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    let request = Request {
        dialect,
        early: first,
        login: None,
        replied: true,
    };
    begin(client, target, request, conn, ctx)
}

fn begin(
    client: Endpoint,
    target: Target,
    request: Request,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    conn.log.target = Some(target.clone());
    // The resolve and the connect share one deadline.
    let deadline = Deadline::after(ctx.now, ctx.settings.timeouts.connect);
    let mut this = Box::new(Establishing {
        client,
        upstream: None,
        core: EstablishCore::new(target, request.dialect, request.replied, deadline),
        request,
    });
    let next = this.core.begin(&PolicyEnv { conn, ctx });
    this.carry_out(next, conn, ctx)
}

/// What the establishing core is lent: the policy, as this client sees it,
/// and the proxy's own facts.
struct PolicyEnv<'a, 'c> {
    conn: &'a Conn,
    ctx: &'a Ctx<'c>,
}

impl establish::Env for PolicyEnv<'_, '_> {
    fn check_name(&self, target: &Target) -> NameVerdict {
        let user = self.conn.log.user.as_deref();
        self.ctx.policy.check_name_as(target, user)
    }

    fn check_resolved(&self, target: &Target, addrs: &[IpAddr]) -> Verdict {
        let user = self.conn.log.user.as_deref();
        self.ctx
            .policy
            .check_resolved_as(target, user, addrs, self.ctx.now)
    }

    fn remember(&self, host: &Host, addrs: &[IpAddr]) {
        self.ctx.policy.remember(host, addrs, self.ctx.now);
    }

    fn pins_settled(&self) -> bool {
        self.ctx.pins_settled
    }

    fn is_own(&self, addr: SocketAddr) -> bool {
        self.ctx.settings.own.contains(addr)
    }

    fn take_handshake(&self) -> Result<(), String> {
        match take_handshake(self.conn, self.ctx) {
            true => Ok(()),
            false => Err(route::describe_client(self.conn.log.peer.key())),
        }
    }

    fn default_parent(&self) -> Option<&Arc<ParentProxy>> {
        self.ctx.settings.upstream_proxy.as_ref()
    }

    fn vets_port(&self, port: u16) -> bool {
        self.ctx.policy.vets_port(port)
    }
}

/// Charges the client's terminated-handshake budget: `false` when spent.
fn take_handshake(conn: &Conn, ctx: &Ctx) -> bool {
    let limits = &ctx.settings.limits;
    let budget = Budget {
        per_sec: limits.handshakes_per_client_per_sec,
        burst: limits.handshake_burst_per_client,
    };
    let mut rates = ctx
        .handshake_rates
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    rates.take(conn.log.peer.key(), budget, ctx.now)
}

/// Refuses `request` before an upstream answered it. A forward-proxy
/// request gets its `request` event here: no exchange ever saw it.
fn refuse_request(
    refusal: Refusal,
    request: &Request,
    target: &Target,
    client: Endpoint,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    if request.replied {
        return close_replied(refusal, target, client, conn, ctx);
    }
    refuse_early(refusal, request.dialect, &request.early, client, conn, ctx)
}

/// Refuses a request whose client heard its success reply already (a
/// switched tunnel): only a close is left, never a second answer inside the
/// tunnel.
fn close_replied(
    refusal: Refusal,
    target: &Target,
    client: Endpoint,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    let why = refusal.describe();
    log::info!("conn={} {target}: {why}", conn.id);
    answer(&[], refusal.close_reason(), why, client, conn, ctx)
}

/// [`refuse_request`], for a request taken apart: `early` holds a forward
/// request's head.
fn refuse_early(
    refusal: Refusal,
    dialect: Dialect,
    early: &[u8],
    client: Endpoint,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    if matches!(dialect, Dialect::Forward | Dialect::ForwardTls) {
        conn.forward_refused(early, refusal.status(), refusal.describe(), ctx);
    }
    refuse(refusal, dialect, client, conn, ctx)
}

/// The proxy's own TCP addresses (its listeners and its admin endpoint),
/// which no session may dial: a rule allowing loopback must not let a
/// client reach the admin socket (and its control commands) or loop back
/// into the proxy.
///
/// And the ports of its UDP sockets (every association's relay and
/// outbound socket, shared by the workers): a datagram aimed at another
/// association's relay would arrive from the proxy, on that client's IP,
/// and could take over its association.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnAddrs {
    addrs: Vec<SocketAddr>,
    udp: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u16, usize>>>,
}

impl OwnAddrs {
    /// The TCP addresses among `listening` (as bound: real ports).
    pub(crate) fn new<'a>(listening: impl IntoIterator<Item = &'a ListenAddr>) -> OwnAddrs {
        let addrs = listening
            .into_iter()
            .filter_map(|a| match a {
                ListenAddr::Tcp(a) => Some(*a),
                ListenAddr::Unix(_) => None,
            })
            .collect();
        OwnAddrs {
            addrs,
            udp: Default::default(),
        }
    }

    fn udp_ports(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u16, usize>> {
        self.udp.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A UDP socket of the proxy's is bound to `port` (until [`OwnAddrs::udp_closed`]).
    pub(crate) fn udp_bound(&self, port: u16) {
        *self.udp_ports().entry(port).or_default() += 1;
    }

    /// A UDP socket [`OwnAddrs::udp_bound`] to `port` closed.
    pub(crate) fn udp_closed(&self, port: u16) {
        let mut ports = self.udp_ports();
        if let Some(n) = ports.get_mut(&port) {
            *n -= 1;
            if *n == 0 {
                ports.remove(&port);
            }
        }
    }

    /// Whether a datagram to `to` could reach one of the proxy's UDP
    /// sockets: its port is one of theirs and its address this host's (the
    /// outbound sockets listen on every address).
    pub(crate) fn contains_udp(&self, to: SocketAddr) -> bool {
        if !self.udp_ports().contains_key(&to.port()) {
            return false;
        }
        let ip = to.ip().to_canonical();
        ip.is_loopback() || ip.is_unspecified() || is_local(ip)
    }

    /// Whether dialling `to` could reach the proxy: its port is one of ours
    /// and it is a loopback or unspecified address (whatever address that
    /// listener has: the safe side), the listener's own address, or, for a
    /// listener on `0.0.0.0` or `::`, any address of this host. An IPv4
    /// address in an IPv6 spelling a translator or relay delivers to it
    /// (mapped, NAT64, 6to4) counts as that address, as the policy's
    /// `this-host` does.
    pub(crate) fn contains(&self, to: SocketAddr) -> bool {
        let ip = to.ip().to_canonical();
        let embedded = crate::policy::embedded_v4(ip).map(IpAddr::V4);
        std::iter::once(ip).chain(embedded).any(|ip| {
            self.addrs.iter().any(|own| {
                own.port() == to.port()
                    && (ip.is_loopback()
                        || ip.is_unspecified()
                        || own.ip().to_canonical() == ip
                        || (own.ip().is_unspecified() && is_local(ip)))
            })
        })
    }
}

/// Whether `ip` is an address of this host, as the kernel says now: a
/// socket can bind it. Only asked for a port we listen on everywhere.
fn is_local(ip: IpAddr) -> bool {
    use socket2::{Domain, Socket, Type};
    let probe = Socket::new(
        Domain::for_address(SocketAddr::new(ip, 0)),
        Type::DGRAM,
        None,
    )
    .and_then(|s| s.bind(&SocketAddr::new(ip, 0).into()));
    match probe {
        Ok(()) => true,
        Err(e) => e.raw_os_error() != Some(nix::libc::EADDRNOTAVAIL),
    }
}

/// Resolving and connecting: owns the client and, once one is started,
/// the connect in flight; carries out what the [`EstablishCore`] asks.
pub(crate) struct Establishing {
    client: Endpoint,
    /// The connect in flight (to the destination or its parent), or open.
    upstream: Option<Endpoint>,
    request: Request,
    core: EstablishCore,
}

impl Establishing {
    pub(crate) fn endpoint(&mut self, side: Side) -> Option<&mut Endpoint> {
        match side {
            Side::Client => Some(&mut self.client),
            Side::Upstream => self.upstream.as_mut(),
        }
    }

    /// `Resolving` or `Connecting`, as the session's state names it.
    pub(crate) fn name(&self) -> &'static str {
        self.core.name()
    }

    /// `dns` or `pins`; `tcp` or `parent-proxy`.
    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    /// The policy allowed the target and an address is being dialled.
    pub(crate) fn dialling(&self) -> bool {
        self.core.dialling()
    }

    /// When the resolve and connect run out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    /// A reloaded policy still allows the target: see
    /// [`EstablishCore::reload`]. Returns false when the session must close.
    pub(crate) fn reload(
        &mut self,
        allowed: &Allowed,
        same_treatment: impl Fn(IpAddr) -> bool,
    ) -> bool {
        self.core.reload(allowed, same_treatment)
    }

    /// The resolver answered.
    pub(crate) fn on_resolved(
        mut self: Box<Self>,
        result: io::Result<Vec<IpAddr>>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let next = self
            .core
            .handle(Input::Resolved(result), &PolicyEnv { conn, ctx });
        self.carry_out(next, conn, ctx)
    }

    /// The policy's inspected names are resolved: decide again, unless the
    /// target's own DNS is still awaited.
    pub(crate) fn on_pins(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let next = self
            .core
            .handle(Input::PinsSettled, &PolicyEnv { conn, ctx });
        self.carry_out(next, conn, ctx)
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        // Nothing is read from the client meanwhile (pipelined bytes stay
        // queued in the kernel); only an error on it ends the wait early.
        self.client.want(false, false);
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        let Some(upstream) = self.upstream.as_mut() else {
            // Resolving: the resolver's answer is awaited.
            return State::Establishing(self);
        };
        let next = if self.core.connecting() {
            // epoll reports a finished connect as writable, a failed one as
            // an error (with hang-up): no syscall is needed to tell them
            // apart, and SO_ERROR is read only to say why it failed.
            if upstream.failed() {
                let e = upstream
                    .connect_error()
                    .unwrap_or_else(|| io::ErrorKind::ConnectionRefused.into());
                log::debug!("conn={} connect {:?}: {e}", conn.id, conn.log.dialled);
                // The failed socket closes here, before the next attempt.
                self.upstream = None;
                self.core
                    .handle(Input::ConnectFailed(e), &PolicyEnv { conn, ctx })
            } else if !upstream.can_write() {
                return State::Establishing(self);
            } else {
                // Through a parent, the core goes on to ask it: through the
                // transition point, where the sub-stage is logged.
                self.core.handle(Input::Connected, &PolicyEnv { conn, ctx })
            }
        } else {
            self.core.pump(upstream, &PolicyEnv { conn, ctx })
        };
        self.carry_out(next, conn, ctx)
    }

    pub(crate) fn on_timeout(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self.core.handle_timeout(ctx.now) {
            Some(refusal) => self.refused(refusal, conn, ctx),
            None => State::Establishing(self),
        }
    }

    /// Carries out what the core asks, in order, then moves on as `next`
    /// says.
    fn carry_out(mut self: Box<Self>, mut next: Next, conn: &mut Conn, ctx: &mut Ctx) -> State {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Resolve(name) => ctx.resolve(name),
                Action::AwaitPins => {
                    log::debug!(
                        "conn={} {}: waiting for the inspected names' addresses",
                        conn.id,
                        self.core.target()
                    );
                    ctx.await_pins();
                }
                Action::Admitted {
                    rule,
                    audit_reasons,
                } => {
                    ctx.stats.allowed();
                    let target = self.core.target();
                    log::debug!("conn={} allow {target} by rule {rule}", conn.id);
                    // Audit mode let through what enforcement would refuse: say so.
                    let decision = match audit_reasons.is_empty() {
                        false => Decision::would_deny(rule, &audit_reasons),
                        true => Decision::Allowed(rule),
                    };
                    conn.decide(decision, ctx);
                }
                Action::Dial(addr, ip) => match self.dial(addr, conn, ctx) {
                    Ok(upstream) => {
                        self.upstream = Some(upstream);
                        conn.log.dialled = Some(ip);
                    }
                    Err(e) => {
                        log::debug!("conn={} connect {addr}: {e}", conn.id);
                        next = self
                            .core
                            .handle(Input::ConnectFailed(e), &PolicyEnv { conn, ctx });
                    }
                },
            }
        }
        match next {
            Next::Working => State::Establishing(self),
            Next::Refused(refusal) => self.refused(refusal, conn, ctx),
            Next::Open { after, leftover } => self.established(after, leftover, conn, ctx),
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

    /// Refused before an upstream opened: counted, logged and recorded as
    /// its kind says, then answered.
    fn refused(self: Box<Self>, refusal: Refusal, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let Establishing {
            client,
            request,
            core,
            ..
        } = *self;
        let (target, _) = core.into_parts();
        match &refusal {
            Refusal::Denied(denial) => {
                ctx.stats.denied();
                log::debug!("conn={} deny {target}: {denial}", conn.id);
                conn.decide(Decision::denied(denial), ctx);
            }
            Refusal::OwnAddress(_) => {
                ctx.stats.denied();
                log::debug!("conn={} deny {target}: {}", conn.id, refusal.describe());
                conn.decide(
                    Decision::Denied(Reasoned::new(None, refusal.describe())),
                    ctx,
                );
            }
            Refusal::HandshakeRate(who) => {
                ctx.stats.handshake_rate_refused();
                log::debug!(
                    "conn={} refuse {target}: client {who} over its handshake rate",
                    conn.id
                );
            }
            Refusal::Parent(why) => log::info!("conn={} {why}", conn.id),
            _ => {}
        }
        refuse_request(refusal, &request, &target, client, conn, ctx)
    }

    /// The upstream is open, and the session goes on as `after` says.
    /// `from_upstream`: bytes the destination sent already (behind a parent
    /// proxy's answer), the client's first.
    fn established(
        self: Box<Self>,
        after: After,
        from_upstream: Vec<u8>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let Establishing {
            client,
            upstream,
            request,
            core,
        } = *self;
        let (target, treatment) = core.into_parts();
        let (Some(upstream), Some(treatment)) = (upstream, treatment) else {
            // Only a connect that completed (and its parent's answer) opens.
            debug_assert!(false, "open without an upstream");
            return State::Done(CloseReason::ConnectFailed);
        };
        let idle = treatment.idle.or(ctx.settings.timeouts.idle);
        let Request {
            dialect,
            early,
            login,
            ..
        } = request;
        match after {
            after @ (After::Forward | After::ForwardTls) => {
                // `GET https://...`: the proxy speaks TLS to the upstream
                // (and verifies it) on the client's behalf.
                let upstream = if matches!(after, After::ForwardTls) {
                    match super::securing::upstream_layer(&target, ctx) {
                        Ok(layer) => Channel::tls(upstream, layer),
                        Err(why) => {
                            let refusal = Refusal::Connect(std::io::Error::other(why));
                            return refuse_early(refusal, dialect, &early, client, conn, ctx);
                        }
                    }
                } else {
                    Channel::plain(upstream)
                };
                State::Inspect(Box::new(Inspect::forward(
                    client,
                    upstream,
                    target,
                    &early,
                    treatment.inspect,
                    login,
                    idle,
                    conn,
                    ctx,
                )))
            }
            After::Securing { reply } => State::Securing(Securing::new(
                client,
                upstream,
                reply,
                early,
                target,
                treatment.inspect,
                idle,
                Deadline::after(ctx.now, ctx.settings.timeouts.handshake),
            )),
            After::Inspect { reply } => State::Inspect(Box::new(Inspect::tunnel(
                Channel::plain(client),
                Channel::plain(upstream),
                target,
                &reply,
                &early,
                treatment.inspect,
                idle,
                conn,
                ctx,
            ))),
            After::Vetting { reply } => State::Vetting(Box::new(Vetting::new(
                client,
                upstream,
                reply,
                early,
                from_upstream,
                target,
                dialect,
                idle,
                Deadline::after(ctx.now, ctx.settings.timeouts.handshake),
            ))),
            After::Passthrough { to_client, own } => {
                let mut preload = Preload::reply(&to_client, &early, ctx);
                preload.own = own;
                State::Passthrough(Passthrough::new(
                    Channel::plain(client),
                    Channel::plain(upstream),
                    preload,
                    idle,
                    ctx,
                ))
            }
        }
    }
}
