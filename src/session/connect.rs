//! Resolving and Connecting: policy on the name, DNS off the loop, policy on
//! every resolved address, then a non-blocking connect to each vetted address
//! in turn, all within one connect deadline.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::closing::refuse;
use super::conn::{Conn, Decision};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::inspect::Inspect;
use super::passthrough::{Passthrough, Preload};
use super::refusal::{Dialect, Refusal};
use super::state::State;
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Denial, Host, NameVerdict, RequestRules, Target, Verdict};
use crate::protocol::{http, socks5};

/// What the handshake hands on: where to, how to answer, and the client's
/// first payload bytes.
pub(crate) struct Request {
    target: Target,
    dialect: Dialect,
    early: Vec<u8>,
}

/// Leaves the handshake for `target`: refused by name, resolving, or (for an
/// address literal) decided at once.
pub(crate) fn start(
    client: Endpoint,
    target: Target,
    dialect: Dialect,
    early: Vec<u8>,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    conn.log.target = Some(target.clone());
    let request = Request {
        target,
        dialect,
        early,
    };
    match request.target.host.clone() {
        Host::Ip(ip) => decide(client, request, &[ip], conn, ctx),
        Host::Domain(name) => match ctx.policy.check_name(&request.target) {
            NameVerdict::Deny(denial) => deny(client, denial, request, conn, ctx),
            NameVerdict::Resolve => {
                ctx.resolve(name);
                State::Resolving(Resolving { client, request })
            }
        },
    }
}

fn decide(
    client: Endpoint,
    request: Request,
    addrs: &[IpAddr],
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    match ctx.policy.check_resolved(&request.target, addrs) {
        Verdict::Deny(denial) => deny(client, denial, request, conn, ctx),
        Verdict::Allow(allowed) => {
            ctx.stats.allowed();
            log::debug!(
                "conn={} allow {} by rule {}",
                conn.id,
                request.target,
                allowed.rule
            );
            // Audit mode let through what enforcement would refuse: say so.
            let decision = match &allowed.audit {
                Some(denial) => Decision::would_deny(Arc::clone(&allowed.rule), denial),
                None => Decision::Allowed(Arc::clone(&allowed.rule)),
            };
            conn.decide(decision, ctx);
            let plan = Plan {
                request,
                addrs: allowed.addrs,
                next: 0,
                last_error: None,
                idle: allowed.idle_timeout,
                inspect: allowed.inspect,
            };
            plan.attempt(client, conn, ctx)
        }
    }
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
    refuse(Refusal::Denied(denial), request.dialect, client, conn, ctx)
}

/// Waiting for the resolver; owns the client.
pub(crate) struct Resolving {
    client: Endpoint,
    request: Request,
}

impl Resolving {
    pub(crate) fn client(&mut self) -> &mut Endpoint {
        &mut self.client
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
        self,
        result: io::Result<Vec<IpAddr>>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        match result {
            Ok(addrs) => decide(self.client, self.request, &addrs, conn, ctx),
            Err(e) => refuse(
                Refusal::Resolve(e),
                self.request.dialect,
                self.client,
                conn,
                ctx,
            ),
        }
    }

    pub(crate) fn on_timeout(self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let dialect = self.request.dialect;
        refuse(Refusal::Timeout, dialect, self.client, conn, ctx)
    }
}

/// What a connect needs across attempts: the request, the vetted addresses
/// and what the allowing rule said.
struct Plan {
    request: Request,
    /// The addresses policy vetted; we dial exactly these.
    addrs: Vec<IpAddr>,
    next: usize,
    last_error: Option<io::Error>,
    /// The allowing rule's idle timeout, if it sets one.
    idle: Option<Duration>,
    /// The allowing rule's request rules, when it inspects HTTP.
    inspect: Option<Arc<RequestRules>>,
}

/// A connect in flight; owns the client and the pending upstream.
pub(crate) struct Connecting {
    client: Endpoint,
    upstream: Endpoint,
    plan: Plan,
}

impl Plan {
    /// Starts a connect to the next vetted address, or refuses when none is left.
    fn attempt(mut self, client: Endpoint, conn: &mut Conn, ctx: &mut Ctx) -> State {
        while let Some(&ip) = self.addrs.get(self.next) {
            self.next += 1;
            let addr = SocketAddr::new(ip, self.request.target.port);
            let upstream = mio::net::TcpStream::connect(addr)
                .and_then(|s| Endpoint::dialled(Stream::Tcp(s), ctx.tokens.upstream, ctx.registry));
            match upstream {
                Ok(mut upstream) => {
                    // A connect completes (or fails) with a writable edge.
                    upstream.want(false, true);
                    conn.log.dialled = Some(ip);
                    return State::Connecting(Connecting {
                        client,
                        upstream,
                        plan: self,
                    });
                }
                Err(e) => {
                    log::debug!("conn={} connect {addr}: {e}", conn.id);
                    self.last_error = Some(e);
                }
            }
        }
        let e = self
            .last_error
            .take()
            .unwrap_or_else(|| io::Error::other("no address to connect to"));
        refuse(Refusal::Connect(e), self.request.dialect, client, conn, ctx)
    }
}

impl Connecting {
    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Upstream => &mut self.upstream,
        }
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.client.want(false, false);
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        // epoll reports a finished connect as writable, a failed one as an
        // error (with hang-up): no syscall is needed to tell them apart, and
        // SO_ERROR is read only to say why it failed.
        if self.upstream.failed() {
            let e = self
                .upstream
                .connect_error()
                .unwrap_or_else(|| io::ErrorKind::ConnectionRefused.into());
            log::debug!("conn={} connect {:?}: {e}", conn.id, conn.log.dialled);
            self.plan.last_error = Some(e);
            // The failed socket closes here, before the next attempt.
            let Connecting { client, plan, .. } = self;
            return plan.attempt(client, conn, ctx);
        }
        if !self.upstream.can_write() {
            return State::Connecting(self);
        }
        self.established(ctx)
    }

    fn established(self, ctx: &mut Ctx) -> State {
        let Connecting {
            client,
            upstream,
            plan,
        } = self;
        let idle = plan.idle.or(ctx.settings.timeouts.idle);
        let Request {
            target,
            dialect,
            early,
        } = plan.request;
        let reply = match dialect {
            Dialect::Http => http::CONNECT_ESTABLISHED.to_vec(),
            Dialect::Socks5 => {
                let mut out = Vec::with_capacity(22);
                socks5::encode_reply(socks5::Reply::Succeeded, upstream.local_addr(), &mut out);
                out
            }
            // The forward proxy's client gets the upstream's own answer.
            Dialect::Forward => {
                return State::Inspect(Box::new(Inspect::forward(
                    client,
                    upstream,
                    target,
                    &early,
                    plan.inspect,
                    idle,
                    ctx,
                )))
            }
        };
        match plan.inspect {
            Some(rules) => State::Inspect(Box::new(Inspect::tunnel(
                client,
                upstream,
                &reply,
                &early,
                Some(rules),
                idle,
                ctx,
            ))),
            None => State::Passthrough(Passthrough::new(
                client,
                upstream,
                Preload::reply(&reply, &early, ctx),
                idle,
                ctx,
            )),
        }
    }

    pub(crate) fn on_timeout(self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let dialect = self.plan.request.dialect;
        refuse(Refusal::Timeout, dialect, self.client, conn, ctx)
    }
}
