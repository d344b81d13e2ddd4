//! What the session machine is lent and leads to: the policy as this
//! client sees it and the settings ([`PolicyEnv`]), the refusals it makes
//! (counted, logged, recorded; the core answers them), and a raw tunnel
//! relayed as it opens ([`relay`]). And the proxy's own addresses, which
//! no session may dial.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::channel::Channel;
use super::conn::{Conn, Decision, Reasoned};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::handshake_rate::Budget;
use super::passthrough::{Passthrough, Preload};
use super::refusal::{Dialect, Refusal};
use super::state::State;
use crate::config::{ListenAddr, Timeouts};
use crate::core::opening::{Opened, Refused, Refusing};
use crate::core::route::{self, After};
use crate::core::{establish, handshake, opening, session};
use crate::policy::secret::Secrets;
use crate::policy::{Fronting, NameVerdict, Target, Verdict};
use crate::protocol::parent::ParentProxy;
use crate::target::Host;

/// What the opening core is lent: the policy, the proxy's own facts, and
/// the settings the handshake reads.
pub(crate) struct PolicyEnv<'a, 'c> {
    pub(crate) conn: &'a Conn,
    pub(crate) ctx: &'a Ctx<'c>,
}

impl opening::Env for PolicyEnv<'_, '_> {
    fn handshake(&self) -> handshake::Env<'_> {
        handshake::Env {
            max_head_bytes: self.ctx.settings.limits.max_head_bytes,
            users: self.ctx.settings.auth.as_deref(),
            logins: self.ctx.logins,
        }
    }

    fn connect_timeout(&self) -> Duration {
        self.ctx.settings.timeouts.connect
    }

    fn handshake_timeout(&self) -> Duration {
        self.ctx.settings.timeouts.handshake
    }

    fn close_timeout(&self) -> Duration {
        self.ctx.settings.timeouts.close
    }

    fn fronting(&self, target: &Target, user: Option<&str>, named: &Target) -> Option<Fronting> {
        self.ctx.policy.fronting(target, user, named, self.ctx.now)
    }
}

impl session::Env for PolicyEnv<'_, '_> {
    fn id(&self) -> u64 {
        self.conn.id
    }

    fn timeouts(&self) -> Timeouts {
        self.ctx.settings.timeouts
    }

    fn secrets(&self) -> Option<Arc<Secrets>> {
        self.ctx.policy.secrets().cloned()
    }

    /// A whole head must fit, with room for what the forward proxy adds
    /// when it rewrites one (`Via`, `Host`, `Connection`).
    fn inspect_buffer(&self) -> usize {
        let limits = &self.ctx.settings.limits;
        limits.buffer_size.max(limits.max_head_bytes + 1024)
    }

    fn ktls(&self) -> crate::tls::ktls::Support {
        self.ctx.settings.ktls
    }
}

impl establish::Env for PolicyEnv<'_, '_> {
    fn check_name(&self, target: &Target, user: Option<&str>) -> NameVerdict {
        self.ctx.policy.check_name_as(target, user)
    }

    fn check_resolved(&self, target: &Target, user: Option<&str>, addrs: &[IpAddr]) -> Verdict {
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

/// A forward-proxy request's `request` event, for a refusal.
fn forward_refused(refusal: &Refusal, dialect: Dialect, early: &[u8], conn: &mut Conn, ctx: &Ctx) {
    if matches!(dialect, Dialect::Forward | Dialect::ForwardTls) {
        conn.forward_refused(early, refusal.status(), refusal.describe(), ctx);
    }
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

/// The opening machine refuses the client (it writes the answer itself):
/// counted, logged and recorded as the refusal's kind says.
pub(crate) fn refusing(refusing: Refusing, conn: &mut Conn, ctx: &mut Ctx) {
    let why = match refusing {
        Refusing::Answered { why } => why,
        Refusing::Target(refused) => target_refused(*refused, conn, ctx),
        Refusing::Revoked(refused) => {
            // Counted when admitted; the access line's decision is the
            // reload's (set by the caller). The client hears why, and a
            // forward request has its `request` event as any refused one.
            let Refused {
                refusal, request, ..
            } = *refused;
            forward_refused(&refusal, request.dialect, &request.early, conn, ctx);
            format!("closed by policy reload: {}", refusal.describe())
        }
        Refusing::Fronting { why, rule } => {
            log::info!("conn={} {why}", conn.id);
            ctx.stats.denied();
            // Counted against the refusing rule too, as every denial is.
            conn.decide(Decision::Denied(Reasoned::new(rule, why.clone())), ctx);
            why
        }
    };
    conn.log.error = Some(why.into());
}

/// Refused once the target was known: counted and logged as its kind
/// says; a forward-proxy request gets its `request` event. Returns why.
fn target_refused(refused: Refused, conn: &mut Conn, ctx: &mut Ctx) -> String {
    let Refused {
        refusal,
        target,
        request,
    } = refused;
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
    let why = refusal.describe();
    if request.replied {
        // A switched tunnel's client heard its success reply already: it
        // is only closed, never answered a second time inside the tunnel.
        log::info!("conn={} {target}: {why}", conn.id);
    } else {
        forward_refused(&refusal, request.dialect, &request.early, conn, ctx);
    }
    why
}

/// A raw tunnel is open: relayed both ways, the reply and what the
/// destination sent already to the client first, and the client's early
/// bytes to the upstream.
pub(crate) fn relay(opened: Opened, client: Endpoint, upstream: Endpoint, ctx: &mut Ctx) -> State {
    let Opened {
        after,
        treatment,
        request,
        ..
    } = opened;
    let idle = treatment.idle.or(ctx.settings.timeouts.idle);
    let (to_client, own) = match after {
        After::Passthrough { to_client, own } => (to_client, own),
        _ => {
            debug_assert!(false, "only a raw tunnel is relayed as it opens");
            (Vec::new(), 0)
        }
    };
    let mut preload = Preload::reply(&to_client, &request.early, ctx);
    preload.own = own;
    State::Passthrough(Passthrough::new(
        Channel::plain(client),
        Channel::plain(upstream),
        preload,
        idle,
        ctx,
    ))
}
