//! Resolving and Connecting: policy on the name, DNS off the loop, policy on
//! every resolved address, then a non-blocking connect to each vetted address
//! in turn, all within one connect deadline.
//!
//! The decisions are the sans-IO core's: [`route`] says where a request
//! goes first, what the resolver's answer (or the policy's inspected names)
//! leads to, what the verdict on the addresses admits, and which state
//! follows an open upstream; [`DialCore`] decides what to dial next, asks a
//! parent proxy for the tunnel, and says which refusal a failure earns.
//! This shell asks the policy, starts the resolver and the connects (and
//! registers them), lends the upstream socket to the dial core, counts,
//! logs and records each decision, and builds the state each answer names.

use std::io;
use std::net::{IpAddr, SocketAddr};
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
use crate::core::dial::{self, Action, DialCore, Outcome, Unreachable};
use crate::core::route::{self, Admission, Admitted, After, ResolvingCore, Start, Treatment};
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Allowed, Denial, Target};
use crate::protocol::http1::SameLogin;

/// What the handshake hands on: where to, how to answer, the client's
/// first payload bytes, and the login later forward-proxy requests are held
/// to.
pub(crate) struct Request {
    target: Target,
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
        target,
        dialect,
        early,
        login,
        replied: false,
    };
    begin(client, request, conn, ctx)
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
        target,
        dialect,
        early: first,
        login: None,
        replied: true,
    };
    begin(client, request, conn, ctx)
}

fn begin(client: Endpoint, request: Request, conn: &mut Conn, ctx: &mut Ctx) -> State {
    conn.log.target = Some(request.target.clone());
    let user = conn.log.user.as_deref();
    let check_name = || ctx.policy.check_name_as(&request.target, user);
    // The resolve and the connect share one deadline.
    let deadline = Deadline::after(ctx.now, ctx.settings.timeouts.connect);
    match route::start(&request.target.host, check_name) {
        Start::Decide(ip) => decide(client, request, &[ip], deadline, conn, ctx),
        Start::Deny(denial) => deny(client, denial, request, conn, ctx),
        Start::Resolve(name) => {
            ctx.resolve(name);
            State::Resolving(Resolving {
                client,
                request,
                core: ResolvingCore::dns(deadline),
            })
        }
    }
}

fn decide(
    client: Endpoint,
    request: Request,
    addrs: &[IpAddr],
    deadline: Deadline,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    let user = conn.log.user.as_deref();
    let verdict = ctx
        .policy
        .check_resolved_as(&request.target, user, addrs, ctx.now);
    let admission = route::admit(
        verdict,
        ctx.pins_settled,
        request.dialect,
        request.target.port,
        |addr| ctx.settings.own.contains(addr),
        || take_handshake(conn, ctx),
        ctx.settings.upstream_proxy.as_ref(),
        deadline,
    );
    match admission {
        Admission::Deny(denial) => deny(client, denial, request, conn, ctx),
        Admission::AwaitPins => {
            log::debug!(
                "conn={} {}: waiting for the inspected names' addresses",
                conn.id,
                request.target
            );
            ctx.await_pins();
            State::Resolving(Resolving {
                client,
                request,
                core: ResolvingCore::pins(addrs.to_vec(), deadline),
            })
        }
        Admission::OwnAddress(addr) => {
            ctx.stats.denied();
            let refusal = Refusal::OwnAddress(addr);
            log::debug!(
                "conn={} deny {}: {}",
                conn.id,
                request.target,
                refusal.describe()
            );
            conn.decide(
                Decision::Denied(Reasoned::new(None, refusal.describe())),
                ctx,
            );
            refuse_request(refusal, &request, client, conn, ctx)
        }
        Admission::HandshakeRate => {
            let who = route::describe_client(conn.log.peer.key());
            ctx.stats.handshake_rate_refused();
            log::debug!(
                "conn={} refuse {}: client {who} over its handshake rate",
                conn.id,
                request.target
            );
            let refusal = Refusal::HandshakeRate(who);
            refuse_request(refusal, &request, client, conn, ctx)
        }
        Admission::Dial(admitted) => {
            let Admitted {
                core,
                treatment,
                rule,
                audit_reasons,
            } = *admitted;
            ctx.stats.allowed();
            log::debug!("conn={} allow {} by rule {}", conn.id, request.target, rule);
            // Audit mode let through what enforcement would refuse: say so.
            let decision = match audit_reasons.is_empty() {
                false => Decision::would_deny(rule, &audit_reasons),
                true => Decision::Allowed(rule),
            };
            conn.decide(decision, ctx);
            let plan = Plan { request, treatment };
            plan.dial(core, client, conn, ctx)
        }
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

fn deny(
    client: Endpoint,
    denial: Denial,
    request: Request,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    ctx.stats.denied();
    log::debug!("conn={} deny {}: {denial}", conn.id, request.target);
    conn.decide(Decision::denied(&denial), ctx);
    refuse_request(Refusal::Denied(denial), &request, client, conn, ctx)
}

/// Refuses `request` before an upstream answered it. A forward-proxy
/// request gets its `request` event here: no exchange ever saw it.
fn refuse_request(
    refusal: Refusal,
    request: &Request,
    client: Endpoint,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    if request.replied {
        return close_replied(refusal, &request.target, client, conn, ctx);
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

/// Waiting for the resolver (or the policy's inspected names); owns the
/// client, and carries out what the [`ResolvingCore`] decides.
pub(crate) struct Resolving {
    client: Endpoint,
    request: Request,
    core: ResolvingCore,
}

impl Resolving {
    pub(crate) fn client(&mut self) -> &mut Endpoint {
        &mut self.client
    }

    /// `dns` (the target's name) or `pins` (the policy's inspected names).
    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    /// The policy's inspected names are resolved: decide again, unless the
    /// target's own DNS is still awaited.
    pub(crate) fn on_pins(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let next = self.core.handle(route::Input::PinsSettled);
        self.follow(next, conn, ctx)
    }

    pub(crate) fn drive(mut self, _conn: &mut Conn, _ctx: &mut Ctx) -> State {
        // Nothing is read while resolving (pipelined bytes stay queued in the
        // kernel); only an error on the client ends the wait early.
        self.client.want(false, false);
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        State::Resolving(self)
    }

    pub(crate) fn on_resolved(
        mut self,
        result: io::Result<Vec<IpAddr>>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let next = self.core.handle(route::Input::Resolved(result));
        if let route::Next::Decide(addrs) = &next {
            // The addresses of a name an inspecting rule covers are
            // remembered: reaching them by another spelling (a literal,
            // another name) is then inspected too.
            ctx.policy
                .remember(&self.request.target.host, addrs, ctx.now);
        }
        self.follow(next, conn, ctx)
    }

    /// When the wait runs out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    pub(crate) fn on_timeout(self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self.core.handle_timeout(ctx.now) {
            Some(refusal) => refuse_request(refusal, &self.request, self.client, conn, ctx),
            None => State::Resolving(self),
        }
    }

    /// Carries out what the core said.
    fn follow(self, next: route::Next, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match next {
            route::Next::Stay => State::Resolving(self),
            route::Next::Decide(addrs) => {
                let deadline = self.core.deadline();
                decide(self.client, self.request, &addrs, deadline, conn, ctx)
            }
            route::Next::Refuse(refusal) => {
                refuse_request(refusal, &self.request, self.client, conn, ctx)
            }
        }
    }
}

/// What the session goes on with once connected: the request and how the
/// allowing rule treats it. (The addresses and the parent are the
/// [`DialCore`]'s.)
struct Plan {
    request: Request,
    treatment: Treatment,
}

/// A connect in flight; owns the client and the pending upstream, and
/// carries out what the [`DialCore`] decides.
pub(crate) struct Connecting {
    client: Endpoint,
    upstream: Endpoint,
    plan: Plan,
    core: DialCore,
}

impl Connecting {
    /// A reloaded policy still allows the target: the plan takes its request
    /// rules and idle timeout ([`Treatment::reload`]). Returns false when
    /// the new policy inspects (or terminates) a tunnel this plan would
    /// relay raw (or without terminating): the session must close instead.
    /// The addresses still to try were vetted under the old policy: only
    /// those `same_treatment` accepts (allowed now, treated as `allowed`
    /// says) stay.
    pub(crate) fn reload(
        &mut self,
        allowed: &Allowed,
        same_treatment: impl Fn(IpAddr) -> bool,
    ) -> bool {
        if !self
            .plan
            .treatment
            .reload(allowed, self.plan.request.dialect)
        {
            return false;
        }
        self.core.retain_untried(same_treatment);
        true
    }
}

impl Plan {
    /// Starts the connects the core asks for until one is in flight, or
    /// refuses when none can start.
    fn dial(self, mut core: DialCore, client: Endpoint, conn: &mut Conn, ctx: &mut Ctx) -> State {
        while let Some(Action::Dial(addr, ip)) = core.poll_action() {
            let upstream = mio::net::TcpStream::connect(addr)
                .and_then(|s| Endpoint::dialled(Stream::Tcp(s), ctx.tokens.upstream, ctx.registry));
            match upstream {
                Ok(mut upstream) => {
                    // Both sockets of the coming tunnel: a peer that
                    // vanished without a FIN is found.
                    let keepalive = ctx.settings.timeouts.keepalive;
                    upstream.set_keepalive(keepalive);
                    client.set_keepalive(keepalive);
                    // A connect completes (or fails) with a writable edge.
                    upstream.want(false, true);
                    conn.log.dialled = Some(ip);
                    return State::Connecting(Box::new(Connecting {
                        client,
                        upstream,
                        plan: self,
                        core,
                    }));
                }
                Err(e) => {
                    log::debug!("conn={} connect {addr}: {e}", conn.id);
                    if let Outcome::Unreachable(why) = core.handle(dial::Input::Failed(e)) {
                        return self.unreachable(why, client, conn, ctx);
                    }
                }
            }
        }
        // Not one address to dial.
        let why = core.give_up();
        self.unreachable(why, client, conn, ctx)
    }

    /// No upstream: the refusal the core chose.
    fn unreachable(
        self,
        why: Unreachable,
        client: Endpoint,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        if let Unreachable::Parent(why) = &why {
            log::info!("conn={} {why}", conn.id);
        }
        refuse_request(Refusal::from(why), &self.request, client, conn, ctx)
    }
}

impl Connecting {
    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Upstream => &mut self.upstream,
        }
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.client.want(false, false);
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        let outcome = if self.core.connecting() {
            // epoll reports a finished connect as writable, a failed one as
            // an error (with hang-up): no syscall is needed to tell them
            // apart, and SO_ERROR is read only to say why it failed.
            if self.upstream.failed() {
                let e = self
                    .upstream
                    .connect_error()
                    .unwrap_or_else(|| io::ErrorKind::ConnectionRefused.into());
                log::debug!("conn={} connect {:?}: {e}", conn.id, conn.log.dialled);
                // The failed socket closes here, before the next attempt.
                let Connecting {
                    client,
                    plan,
                    mut core,
                    ..
                } = *self;
                return match core.handle(dial::Input::Failed(e)) {
                    Outcome::Unreachable(why) => plan.unreachable(why, client, conn, ctx),
                    _ => plan.dial(core, client, conn, ctx),
                };
            }
            if !self.upstream.can_write() {
                return State::Connecting(self);
            }
            // Through a parent, the core goes on to ask it: through the
            // transition point, where the sub-stage is logged.
            self.core.handle(dial::Input::Connected)
        } else {
            self.core.pump(&mut self.upstream)
        };
        match outcome {
            Outcome::Working => State::Connecting(self),
            Outcome::Open { leftover } => self.established(leftover, conn, ctx),
            Outcome::Unreachable(why) => {
                let Connecting { client, plan, .. } = *self;
                plan.unreachable(why, client, conn, ctx)
            }
        }
    }

    /// `from_upstream`: bytes the destination sent already (behind a parent
    /// proxy's answer), the client's first.
    fn established(
        self: Box<Self>,
        from_upstream: Vec<u8>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let Connecting {
            client,
            upstream,
            plan: Plan { request, treatment },
            ..
        } = *self;
        let idle = treatment.idle.or(ctx.settings.timeouts.idle);
        let Request {
            target,
            dialect,
            early,
            login,
            replied,
        } = request;
        let vets_port = || ctx.policy.vets_port(target.port);
        match route::after_connect(dialect, replied, &from_upstream, &treatment, vets_port) {
            After::Refuse(refusal) if replied => close_replied(refusal, &target, client, conn, ctx),
            After::Refuse(refusal) => refuse_early(refusal, dialect, &early, client, conn, ctx),
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

    /// When the connect runs out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    pub(crate) fn on_timeout(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let Some(why) = self.core.handle_timeout(ctx.now) else {
            return State::Connecting(self);
        };
        let Connecting { client, plan, .. } = *self;
        plan.unreachable(why, client, conn, ctx)
    }
}
