//! Resolving and Connecting: policy on the name, DNS off the loop, policy on
//! every resolved address, then a non-blocking connect to each vetted address
//! in turn, all within one connect deadline.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::closing::refuse;
use super::endpoint::{Endpoint, Side};
use super::inspect::Inspect;
use super::refusal::{Dialect, Refusal};
use super::state::State;
use super::tunnel::Tunnel;
use super::{Conn, Decision};
use crate::io::Stream;
use crate::policy::{Denial, Host, NameVerdict, RequestRules, Target, Verdict};
use crate::protocol::{http, socks5};
use crate::reactor::resolver::Job;
use crate::reactor::Core;
use crate::stats::CloseReason;

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
    target: Target,
    dialect: Dialect,
    early: Vec<u8>,
    conn: &mut Conn,
    core: &mut Core,
) -> State {
    conn.log.target = Some(target.clone());
    let request = Request {
        target,
        dialect,
        early,
    };
    match request.target.host.clone() {
        Host::Ip(ip) => decide(request, &[ip], conn, core),
        Host::Domain(name) => match core.policy.check_name(&request.target) {
            NameVerdict::Deny(denial) => deny(denial, request, conn, core),
            NameVerdict::Resolve => {
                core.resolver.resolve(Job {
                    key: conn.key,
                    id: conn.id,
                    host: name,
                });
                State::Resolving(Resolving { request })
            }
        },
    }
}

fn decide(request: Request, addrs: &[IpAddr], conn: &mut Conn, core: &mut Core) -> State {
    match core.policy.check_resolved(&request.target, addrs) {
        Verdict::Deny(denial) => deny(denial, request, conn, core),
        Verdict::Allow(allowed) => {
            core.stats().allowed();
            log::debug!(
                "conn={} allow {} by rule {}",
                conn.id,
                request.target,
                allowed.rule
            );
            conn.log.decision = Decision::Allowed(allowed.rule);
            let connecting = Connecting {
                request,
                addrs: allowed.addrs,
                next: 0,
                last_error: None,
                idle: allowed.idle_timeout,
                inspect: allowed.inspect,
            };
            connecting.attempt(conn, core)
        }
    }
}

fn deny(denial: Denial, request: Request, conn: &mut Conn, core: &mut Core) -> State {
    core.stats().denied();
    log::debug!("conn={} deny {}: {denial}", conn.id, request.target);
    conn.log.decision = Decision::Denied(denial.to_string());
    refuse(Refusal::Denied(denial), request.dialect, conn, core)
}

pub(crate) struct Resolving {
    request: Request,
}

impl Resolving {
    pub(crate) fn drive(self, conn: &mut Conn, _core: &mut Core) -> State {
        if conn.client.failed {
            return State::Done(CloseReason::ClientGone);
        }
        State::Resolving(self)
    }

    pub(crate) fn on_resolved(
        self,
        result: io::Result<Vec<IpAddr>>,
        conn: &mut Conn,
        core: &mut Core,
    ) -> State {
        match result {
            Ok(addrs) => decide(self.request, &addrs, conn, core),
            Err(e) => refuse(Refusal::Resolve(e), self.request.dialect, conn, core),
        }
    }

    pub(crate) fn on_timeout(self, conn: &mut Conn, core: &mut Core) -> State {
        refuse(Refusal::Timeout, self.request.dialect, conn, core)
    }
}

pub(crate) struct Connecting {
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

impl Connecting {
    /// Starts a connect to the next vetted address, or refuses when none is left.
    fn attempt(mut self, conn: &mut Conn, core: &mut Core) -> State {
        while let Some(&ip) = self.addrs.get(self.next) {
            self.next += 1;
            let addr = SocketAddr::new(ip, self.request.target.port);
            let endpoint = mio::net::TcpStream::connect(addr).and_then(|s| {
                Endpoint::register(Stream::Tcp(s), conn.upstream_token(), &core.registry)
            });
            match endpoint {
                Ok(ep) => {
                    conn.upstream = Some(ep);
                    conn.log.upstream_ip = Some(ip);
                    return State::Connecting(self);
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
        refuse(Refusal::Connect(e), self.request.dialect, conn, core)
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, core: &mut Core) -> State {
        if conn.client.failed {
            return State::Done(CloseReason::ClientGone);
        }
        let Some(up) = conn.upstream.as_mut() else {
            return self.attempt(conn, core);
        };
        if !(up.writable || up.readable || up.failed) {
            return State::Connecting(self);
        }
        let Stream::Tcp(tcp) = &up.stream else {
            unreachable!("upstreams are TCP")
        };
        let outcome = match up.stream.take_error() {
            Some(e) => Err(e),
            None => tcp.peer_addr().map(|_| tcp.local_addr().ok()),
        };
        match outcome {
            Ok(local) => self.established(local, conn, core),
            // A readiness edge before the handshake finished: wait for the next.
            Err(e) if e.kind() == io::ErrorKind::NotConnected && !up.failed => {
                up.readable = false;
                up.writable = false;
                State::Connecting(self)
            }
            Err(e) => {
                log::debug!("conn={} connect {:?}: {e}", conn.id, conn.log.upstream_ip);
                self.last_error = Some(e);
                conn.drop_side(Side::Upstream, core);
                self.attempt(conn, core)
            }
        }
    }

    fn established(self, local: Option<SocketAddr>, _conn: &mut Conn, core: &mut Core) -> State {
        let idle = self.idle.or(core.settings.timeouts.idle);
        let Request {
            target,
            dialect,
            early,
        } = self.request;
        let reply = match dialect {
            Dialect::Http => http::CONNECT_ESTABLISHED.to_vec(),
            Dialect::Socks5 => {
                let mut out = Vec::with_capacity(22);
                socks5::encode_reply(socks5::Reply::Succeeded, local, &mut out);
                out
            }
            // The forward proxy's client gets the upstream's own answer.
            Dialect::Forward => {
                return State::Inspect(Box::new(Inspect::forward(
                    target,
                    &early,
                    self.inspect,
                    idle,
                    core,
                )))
            }
        };
        match self.inspect {
            Some(rules) => State::Inspect(Box::new(Inspect::tunnel(
                &reply,
                &early,
                Some(rules),
                idle,
                core,
            ))),
            None => State::Established(Tunnel::new(&reply, &early, idle, core)),
        }
    }

    pub(crate) fn on_timeout(self, conn: &mut Conn, core: &mut Core) -> State {
        conn.drop_side(Side::Upstream, core);
        refuse(Refusal::Timeout, self.request.dialect, conn, core)
    }
}
