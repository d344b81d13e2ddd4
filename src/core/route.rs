//! Routing a request, as the core decides it: the name checked before
//! DNS, the wait for the resolver (or for the policy's inspected names),
//! the verdict on the resolved addresses turned into an admission (refused,
//! waiting, or a [`DialCore`] with what the allowing rule said), and, once
//! the upstream is open, which state the session goes on in and what the
//! client is answered.
//!
//! The establishing machine (`establish.rs`) composes these; the shell
//! (`session/opening.rs`, `session/connect.rs`) owns the sockets and the context: it
//! asks the policy (the answers come in as data or closures), starts the
//! resolver, counts and logs each decision, records it for the access log,
//! and builds the state each answer names:
//!
//! ```text
//! start(host, name check)  -> Decide(ip) | Deny | Resolve(name): ResolvingCore::dns(deadline)
//! ResolvingCore::handle(Resolved(r) | PinsSettled) -> Stay | Decide(addrs) | Refuse
//! admit(verdict, ...)      -> Deny | AwaitPins | OwnAddress | HandshakeRate | Dial
//! after_connect(...)       -> Err(refusal) | Ok(Forward | ForwardTls | Securing
//!                             | Inspect | Vetting | Passthrough)
//! ```

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::Deadline;
use super::dial::{DialCore, Unreachable};
use super::refusal::{Dialect, Refusal};
use crate::client::ClientKey;
use crate::policy::{Allowed, Denial, NameVerdict, RequestRules, Route, Verdict};
use crate::protocol::parent::ParentProxy;
use crate::protocol::{http, socks5};
use crate::target::{Host, Target};

/// Where a request for a host goes first.
#[derive(Debug)]
pub(crate) enum Start {
    /// An address literal: no name to check or resolve; decide on it.
    Decide(IpAddr),
    /// Refused on the name alone, before any DNS.
    Deny(Denial),
    /// Resolve this name, then decide ([`ResolvingCore::dns`] waits for it).
    Resolve(String),
}

/// The first step for `host`. `check_name` is the policy's answer on the
/// name, asked only for a name (never for an address literal).
pub(crate) fn start(host: &Host, check_name: impl FnOnce() -> NameVerdict) -> Start {
    match host {
        Host::Ip(ip) => Start::Decide(*ip),
        Host::Domain(name) => match check_name() {
            NameVerdict::Deny(denial) => Start::Deny(denial),
            NameVerdict::Resolve => Start::Resolve(name.clone()),
        },
    }
}

/// What the resolving stage is told.
#[derive(Debug)]
pub(crate) enum Input {
    /// The resolver's answer for the target's name.
    Resolved(io::Result<Vec<IpAddr>>),
    /// The policy's inspected names are resolved (see `reactor/pins.rs`).
    PinsSettled,
}

/// What the resolving stage does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Keep waiting (within the connect deadline).
    Stay,
    /// Decide on these addresses ([`admit`]). From [`Input::Resolved`], the
    /// shell first has the policy remember them.
    Decide(Vec<IpAddr>),
    /// Refuse the request.
    Refuse(Refusal),
}

/// Waiting for the resolver, or for the policy's inspected names with the
/// target's addresses in hand. After [`Next::Decide`] or [`Next::Refuse`]
/// the core is spent.
#[derive(Debug)]
pub(crate) struct ResolvingCore {
    /// The target's addresses, when what is awaited is the policy's
    /// inspected names (see `reactor/pins.rs`), not the target's own DNS.
    resolved: Option<Vec<IpAddr>>,
    /// The connect deadline: the resolve and the connect share it.
    deadline: Deadline,
}

impl ResolvingCore {
    /// Waiting for the target's own DNS, until `deadline`.
    pub(crate) fn dns(deadline: Deadline) -> ResolvingCore {
        ResolvingCore {
            resolved: None,
            deadline,
        }
    }

    /// The target resolved to `addrs`; waiting for the inspected names,
    /// until `deadline` (still the one the resolve began with).
    pub(crate) fn pins(addrs: Vec<IpAddr>, deadline: Deadline) -> ResolvingCore {
        ResolvingCore {
            resolved: Some(addrs),
            deadline,
        }
    }

    /// `dns` (the target's name) or `pins` (the policy's inspected names).
    pub(crate) fn stage(&self) -> &'static str {
        match self.resolved {
            None => "dns",
            Some(_) => "pins",
        }
    }

    pub(crate) fn handle(&mut self, input: Input) -> Next {
        match input {
            // Waiting for the pins, the target's addresses are in hand (its
            // own answer, or a literal): another answer is stray.
            Input::Resolved(_) if self.resolved.is_some() => Next::Stay,
            // (getaddrinfo says so with an error; a resolver may not.)
            Input::Resolved(Ok(addrs)) if addrs.is_empty() => Next::Refuse(Refusal::Resolve(
                io::Error::new(io::ErrorKind::NotFound, "the name has no address"),
            )),
            Input::Resolved(Ok(addrs)) => Next::Decide(addrs),
            Input::Resolved(Err(e)) => Next::Refuse(Refusal::Resolve(e)),
            // The policy's inspected names are resolved: decide again.
            Input::PinsSettled => match self.resolved.take() {
                Some(addrs) => Next::Decide(addrs),
                // Still waiting for the target's own DNS.
                None => Next::Stay,
            },
        }
    }

    /// The time is `now`: once the connect deadline has passed while
    /// waiting (for either), the refusal.
    pub(crate) fn handle_timeout(&self, now: Instant) -> Option<Refusal> {
        self.deadline.passed(now).then_some(Refusal::Timeout)
    }
}

/// What the allowing rule said about the session, kept until the upstream
/// is open (the addresses and the parent are the [`DialCore`]'s).
#[derive(Debug, Clone)]
pub(crate) struct Treatment {
    /// The allowing rule's idle timeout, if it sets one.
    pub(crate) idle: Option<Duration>,
    /// The allowing rule's request rules, when it inspects HTTP.
    pub(crate) inspect: Option<Arc<RequestRules>>,
    /// TLS is terminated and inspected inside.
    pub(crate) terminate: bool,
}

impl Treatment {
    /// A reloaded policy still allows the target: the treatment takes its
    /// request rules and idle timeout. Returns false (and changes nothing)
    /// when the new policy inspects (or terminates) a tunnel this treatment
    /// would relay raw (or without terminating): the session must close
    /// instead.
    pub(crate) fn reload(&mut self, allowed: &Allowed, dialect: Dialect) -> bool {
        let stricter = (allowed.is_inspected() && self.inspect.is_none())
            || (allowed.terminates_tls() && !self.terminate);
        if is_tunnel(dialect) && stricter {
            return false;
        }
        self.inspect = allowed.inspect.clone();
        self.idle = allowed.idle_timeout;
        true
    }
}

/// Whether the client asked for a tunnel (HTTP or SOCKS5 CONNECT), not a
/// forward-proxied request.
fn is_tunnel(dialect: Dialect) -> bool {
    matches!(dialect, Dialect::Http | Dialect::Socks5)
}

/// What the verdict on the resolved addresses comes to.
#[derive(Debug)]
pub(crate) enum Admission {
    /// The policy refuses ([`Refusal::Denied`]).
    Deny(Denial),
    /// Allowed, but the policy does not know its inspected names' addresses
    /// yet: wait for them ([`ResolvingCore::pins`]), then decide again.
    AwaitPins,
    /// Every allowed address is the proxy's own; this is the first of them
    /// ([`Refusal::OwnAddress`], counted and logged as a denial).
    OwnAddress(SocketAddr),
    /// A terminated tunnel, and the client's handshake budget is spent
    /// ([`Refusal::HandshakeRate`], naming it as [`describe_client`] does).
    HandshakeRate,
    /// Allowed: dial.
    Dial(Box<Admitted>),
}

/// An allowed request, ready to dial.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The vetted addresses (the proxy's own dropped), and the route.
    pub(crate) core: DialCore,
    pub(crate) treatment: Treatment,
    /// The allowing rule (`-` when audit mode let it through with none).
    pub(crate) rule: Arc<str>,
    /// Audit mode: every reason enforcement would have refused it for;
    /// empty when allowed outright.
    pub(crate) audit_reasons: Vec<Denial>,
}

/// Turns the policy's `verdict` on a request for `port` in `dialect` into
/// an admission. `pins_settled`: the policy knows its inspected names'
/// addresses; `own`: whether an address is the proxy's own;
/// `take_handshake` charges the client's terminated-handshake budget
/// (`false` when spent), and is called only for a terminated tunnel with
/// an address left to dial; `default_parent`: the global parent proxy,
/// for a rule that names no route; `deadline`: the connect's (the
/// resolve's, when there was one).
#[allow(clippy::too_many_arguments)]
pub(crate) fn admit(
    verdict: Verdict,
    pins_settled: bool,
    dialect: Dialect,
    port: u16,
    mut own: impl FnMut(SocketAddr) -> bool,
    take_handshake: impl FnOnce() -> bool,
    default_parent: Option<&Arc<ParentProxy>>,
    deadline: Deadline,
) -> Admission {
    let mut allowed = match verdict {
        Verdict::Deny(denial) => return Admission::Deny(denial),
        // While the policy does not know its inspected names' addresses
        // yet: one of them may be this one. Raw, it would have to be
        // inspected; inspected (under a broader rule), that name's rule
        // would join in with its request rules. Wait for them (within the
        // connect deadline), then decide again.
        Verdict::Allow(_) if !pins_settled => return Admission::AwaitPins,
        Verdict::Allow(allowed) => allowed,
    };
    // Never the proxy itself, whatever the policy (audit mode too).
    let mut ours = None;
    allowed.addrs.retain(|ip| {
        let addr = SocketAddr::new(*ip, port);
        let is_own = own(addr);
        if is_own {
            ours.get_or_insert(addr);
        }
        !is_own
    });
    if let (Some(addr), true) = (ours, allowed.addrs.is_empty()) {
        return Admission::OwnAddress(addr);
    }
    let terminate = allowed.terminates_tls();
    // A terminated handshake costs the loop about half a millisecond:
    // charge the client's budget before dialing, so a client over it costs
    // a refusal, not a handshake. (Forward requests never have the proxy as
    // their TLS server.)
    if terminate && is_tunnel(dialect) && !take_handshake() {
        return Admission::HandshakeRate;
    }
    let parent = match &allowed.route {
        Some(Route::Direct) => None,
        Some(Route::Parent(p)) => Some(Arc::clone(p)),
        None => default_parent.cloned(),
    };
    Admission::Dial(Box::new(Admitted {
        core: DialCore::new(allowed.addrs, port, parent, deadline),
        treatment: Treatment {
            idle: allowed.idle_timeout,
            inspect: allowed.inspect,
            terminate,
        },
        rule: allowed.rule,
        audit_reasons: allowed.audit_reasons,
    }))
}

/// A client key as a refusal names it.
pub(crate) fn describe_client(key: ClientKey) -> String {
    match key {
        ClientKey::Uid(uid) => format!("uid {uid}"),
        ClientKey::Ip(ip) => ip.to_string(),
        ClientKey::Unix => "unix-socket peer".into(),
        ClientKey::Loopback => "loopback".into(),
    }
}

/// No upstream: the refusal the dial core's reason earns.
impl From<Unreachable> for Refusal {
    fn from(why: Unreachable) -> Refusal {
        match why {
            Unreachable::Connect(e) => Refusal::Connect(e),
            Unreachable::Parent(why) => Refusal::Parent(why),
            Unreachable::Timeout => Refusal::Timeout,
        }
    }
}

/// What the session goes on with once the upstream is open.
#[derive(Debug)]
pub(crate) enum After {
    /// A forward-proxied request: the exchange, plaintext upstream. The
    /// client gets the upstream's own answer.
    Forward,
    /// `GET https://...`: the exchange, the proxy speaking TLS to the
    /// upstream (and verifying it) on the client's behalf.
    ForwardTls,
    /// A terminated tunnel: `reply`, then the client's TLS handshake.
    Securing { reply: Vec<u8> },
    /// An inspected plaintext tunnel: `reply`, then the exchange under the
    /// rule's request rules.
    Inspect { reply: Vec<u8> },
    /// A raw tunnel to a port where some rule inspects: `reply`, then its
    /// first flight is checked for a name it would front for.
    Vetting { reply: Vec<u8> },
    /// A raw tunnel: `to_client` (the reply, then what the destination
    /// sent already) goes first; its first `own` bytes are the proxy's own
    /// reply, not relayed payload.
    Passthrough { to_client: Vec<u8>, own: usize },
    /// A vetted tunnel whose first flight is plaintext HTTP naming `host`
    /// (never from [`after_connect`]: the opening machine's vetting says
    /// so): the exchange with no request rules, each later request held to
    /// that host, the first flight first.
    HoldToHost { host: Target },
}

/// The next state once the upstream is open, or the refusal after all
/// (answered in the client's dialect, or, when a success reply went out
/// already, a close). `replied`: the client was answered already (a
/// switched tunnel), so no reply is owed;
/// `from_upstream`: bytes the destination sent already (behind a parent
/// proxy's answer), the client's first; `vets_port`: whether the policy
/// vets raw tunnels to this port, asked only for a raw tunnel.
pub(crate) fn after_connect(
    dialect: Dialect,
    replied: bool,
    from_upstream: &[u8],
    treatment: &Treatment,
    vets_port: impl FnOnce() -> bool,
) -> Result<After, Refusal> {
    let raw = treatment.inspect.is_none() && is_tunnel(dialect);
    if !from_upstream.is_empty() && !raw {
        // HTTP and TLS destinations never speak first: only a raw tunnel
        // can carry what came behind the parent's answer.
        let why = "the destination spoke before any request (through the parent proxy)";
        return Err(Refusal::Parent(why.into()));
    }
    let reply = match dialect {
        Dialect::Http => http::CONNECT_ESTABLISHED.to_vec(),
        Dialect::Socks5 => {
            // BND.ADDR and BND.PORT are 0.0.0.0:0, as OpenSSH and Tor
            // send: a CONNECT client has no use for them, they would tell
            // the sandbox the proxy's own outbound address, and asking
            // the kernel (getsockname) would cost a syscall per tunnel.
            let mut out = Vec::with_capacity(10);
            socks5::encode_reply(socks5::Reply::Succeeded, None, &mut out);
            out
        }
        // The forward proxy's client gets the upstream's own answer.
        Dialect::Forward => return Ok(After::Forward),
        // `GET https://...`: the proxy speaks TLS to the upstream (and
        // verifies it) on the client's behalf.
        Dialect::ForwardTls => return Ok(After::ForwardTls),
    };
    let reply = if replied { Vec::new() } else { reply };
    if treatment.terminate {
        return Ok(After::Securing { reply });
    }
    if treatment.inspect.is_some() {
        return Ok(After::Inspect { reply });
    }
    // A raw tunnel to a port where some rule inspects: its first flight
    // is checked for a name it would front for, first.
    if vets_port() {
        return Ok(After::Vetting { reply });
    }
    let mut to_client = reply;
    let own = to_client.len();
    to_client.extend_from_slice(from_upstream);
    Ok(After::Passthrough { to_client, own })
}
