//! Vetting: a raw tunnel to a port some inspecting (or TLS-terminating)
//! rule covers reads the client's first flight before relaying it, so that
//! a name allowed raw cannot front for one the policy inspects or refuses
//! (`CONNECT other.test:443` carrying SNI `good.test`, as CDN edges serve
//! every name on every address).
//!
//! The success reply goes first, once the upstream is connected, as for
//! every tunnel (the client sends nothing before it); then up to
//! [`first_flight::MAX_FIRST_FLIGHT`] bytes are read, within the handshake
//! timeout, until [`first_flight::parse`] has a ClientHello or a request
//! head. What it names is checked by [`crate::policy::Policy::fronting`]:
//!
//! - nothing stricter: the buffered bytes go first into a Passthrough, or,
//!   for plaintext HTTP, into an [`super::inspect::Inspect`] with no request
//!   rules, so that no later request on the connection names another host
//!   than the first one did (`421`: a keep-alive or pipelined request could
//!   front too);
//! - a name a rule refuses: the session closes (a TLS `access_denied`
//!   alert, or an HTTP `403` `X-Proxy-Error: fronting`);
//! - a name a rule inspects or terminates: the strictest treatment, that
//!   name's own: the upstream is dropped and the session goes on as if the
//!   client had asked for that name ([`super::connect::switch`]: its rule,
//!   its addresses, the first flight as the pipelined bytes).
//!
//! Each is logged `fronting sni=NAME target=HOST:PORT: ...` (`host=` for a
//! `Host`). Nothing of the first flight reaches the first upstream before
//! the verdict. ECH, malformed and oversized first flights are refused; no
//! SNI, neither TLS nor HTTP, and an upstream that speaks first (not a TLS
//! or HTTP front) are relayed under the tunnel's own rule.

use std::time::Duration;

use super::channel::Channel;
use super::closing::answer;
use super::conn::{Conn, Decision, Reasoned};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::inspect::Inspect;
use super::passthrough::{Passthrough, Preload};
use super::refusal::Dialect;
use super::state::State;
use crate::io::Io;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Fronting, Target};
use crate::protocol::first_flight::{self, FirstFlight};
use crate::protocol::http;
use crate::tls::alert_record;

/// Bytes read per call into the first flight.
const CHUNK: usize = 4096;

pub(crate) struct Vetting {
    client: Endpoint,
    upstream: Endpoint,
    /// The proxy's success reply, still owed to the client.
    reply: Vec<u8>,
    /// What the destination sent behind a parent proxy's answer.
    from_upstream: Vec<u8>,
    /// The client's first flight so far (what it pipelined included).
    first: Vec<u8>,
    target: Target,
    dialect: Dialect,
    idle: Option<Duration>,
}

impl Vetting {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Endpoint,
        upstream: Endpoint,
        reply: Vec<u8>,
        early: Vec<u8>,
        from_upstream: Vec<u8>,
        target: Target,
        dialect: Dialect,
        idle: Option<Duration>,
    ) -> Vetting {
        Vetting {
            client,
            upstream,
            reply,
            from_upstream,
            first: early,
            target,
            dialect,
            idle,
        }
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Upstream => &mut self.upstream,
        }
    }

    pub(crate) fn stage(&self) -> &'static str {
        if self.reply.is_empty() {
            "first-flight"
        } else {
            "reply"
        }
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        while !self.reply.is_empty() {
            self.upstream.want(false, false);
            self.client.want(false, true);
            if !self.client.can_write() {
                return State::Vetting(self);
            }
            match self.client.write(&self.reply) {
                Io::Progress(n) => {
                    self.reply.drain(..n);
                }
                Io::WouldBlock => return State::Vetting(self),
                Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
            }
        }
        // Only a first word from the upstream is watched for, never read.
        self.upstream.want(true, false);
        self.client.want(true, false);
        loop {
            match first_flight::parse(&self.first) {
                FirstFlight::NeedMore => {}
                flight => return (*self).judge(flight, conn, ctx),
            }
            if self.first.is_empty() && (self.upstream.can_read() || self.upstream.failed()) {
                // The destination speaks first: not a TLS or HTTP front.
                return (*self).relay(ctx);
            }
            if !self.client.can_read() {
                return State::Vetting(self);
            }
            let len = self.first.len();
            self.first.resize(len + CHUNK, 0);
            let io = self.client.read(&mut self.first[len..]);
            self.first
                .truncate(len + if let Io::Progress(n) = io { n } else { 0 });
            match io {
                Io::Progress(_) => {}
                Io::WouldBlock => return State::Vetting(self),
                Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
            }
        }
    }

    /// The handshake timeout passed before the first flight was whole.
    pub(crate) fn on_timeout(&self, conn: &Conn) -> State {
        if self.reply.is_empty() {
            // Said once, with the fix: a client-first protocol whose first
            // bytes could still be a request line waits here.
            log::info!(
                "conn={} fronting target={}: the first {} bytes are neither a TLS ClientHello \
                 nor a whole request line, and no more came within timeouts.handshake; \
                 port {} is vetted because a rule inspects it: send this protocol to \
                 another port, or inspect or terminate it",
                conn.id,
                self.target,
                self.first.len(),
                self.target.port
            );
        }
        State::Done(CloseReason::HandshakeTimeout)
    }

    /// The first flight is complete (or refused as it stands).
    fn judge(self, flight: FirstFlight, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let port = self.target.port;
        let (kind, names, tls): (&str, Vec<String>, bool) = match flight {
            FirstFlight::NeedMore | FirstFlight::Other => return self.relay(ctx),
            FirstFlight::Tls { ech: true, sni } => {
                let why = format!(
                    "fronting ech sni={} target={}: the ClientHello hides its server name \
                     (encrypted_client_hello) on port {port}, which an inspecting rule covers; \
                     turn ECH off in the client, or inspect this destination",
                    sni.as_deref().unwrap_or("-"),
                    self.target
                );
                return self.refuse(why, None, true, conn, ctx);
            }
            FirstFlight::Tls { sni: None, .. } => return self.relay(ctx),
            FirstFlight::Tls { sni: Some(n), .. } => ("sni", vec![n], true),
            FirstFlight::Http { hosts } => ("host", hosts, false),
            FirstFlight::Malformed(what) => {
                let why = format!(
                    "fronting target={}: {what} on port {port}, which an inspecting rule covers",
                    self.target
                );
                let tls = self.first.first() == Some(&0x16);
                return self.refuse(why, None, tls, conn, ctx);
            }
            FirstFlight::TooLarge => {
                let why = format!(
                    "fronting target={}: the first flight is over {} bytes on port {port}, \
                     which an inspecting rule covers",
                    self.target,
                    first_flight::MAX_FIRST_FLIGHT
                );
                let tls = self.first.first() == Some(&0x16);
                return self.refuse(why, None, tls, conn, ctx);
            }
        };
        let user = conn.log.user.clone();
        let mut switch_to: Option<(Target, String)> = None;
        let mut first_named: Option<Target> = None;
        for name in names {
            let named = match named_target(&name, port) {
                Some(t) => t,
                None => {
                    let why = format!(
                        "fronting {kind}={name:?} target={}: not a host name, on port {port}, \
                         which an inspecting rule covers",
                        self.target
                    );
                    return self.refuse(why, None, tls, conn, ctx);
                }
            };
            let host = named_host(&named);
            first_named.get_or_insert_with(|| named.clone());
            match ctx
                .policy
                .fronting(&self.target, user.as_deref(), &named, ctx.now)
            {
                None => {}
                Some(Fronting::Denied(d)) => {
                    let rule = match &d {
                        crate::policy::Denial::Rule(r) => Some(r.name.clone()),
                        _ => None,
                    };
                    let why = format!(
                        "fronting {kind}={host} target={}: {host} is refused: {d}",
                        self.target
                    );
                    return self.refuse(why, rule, tls, conn, ctx);
                }
                // The first inspected name is the one switched to (a later
                // one may still be refused).
                Some(Fronting::Inspected { rule, terminates }) if switch_to.is_none() => {
                    let how = if terminates {
                        "terminates and inspects"
                    } else {
                        "inspects"
                    };
                    let why = format!(
                        "fronting {kind}={host} target={}: rule {rule} {how} {host}; \
                             treated as a tunnel to {host}:{port}",
                        self.target
                    );
                    switch_to = Some((named, why));
                }
                Some(Fronting::Inspected { .. }) => {}
            }
        }
        match switch_to {
            // The strictest treatment: that name's own rule, dialled to
            // that name's own addresses. The upstream never heard a byte.
            Some((named, why)) => {
                log::info!("conn={} {why}", conn.id);
                let Vetting {
                    client,
                    first,
                    dialect,
                    ..
                } = self;
                super::connect::switch(client, named, dialect, first, conn, ctx)
            }
            // Plaintext HTTP: every later request on the connection could
            // name another host, so the exchange reads them all, with no
            // request rules: each must name the host the first one did
            // (421 otherwise).
            None if !tls && self.from_upstream.is_empty() && first_named.is_some() => {
                let Vetting {
                    client,
                    upstream,
                    first,
                    target,
                    idle,
                    ..
                } = self;
                let inspect = Inspect::tunnel(
                    Channel::plain(client),
                    Channel::plain(upstream),
                    target,
                    &[],
                    &first,
                    None,
                    idle,
                    conn,
                    ctx,
                );
                let host = first_named.expect("checked above");
                State::Inspect(Box::new(inspect.vetted_host(host)))
            }
            None => self.relay(ctx),
        }
    }

    /// Nothing stricter: relay, the first flight first.
    fn relay(self, ctx: &mut Ctx) -> State {
        let this = self;
        let mut preload = Preload::reply(&this.from_upstream, &this.first, ctx);
        preload.own = 0;
        State::Passthrough(Passthrough::new(
            Channel::plain(this.client),
            Channel::plain(this.upstream),
            preload,
            this.idle,
            ctx,
        ))
    }

    /// Closes the tunnel (the upstream never heard a byte): a TLS alert to
    /// a TLS client, a `403` to an HTTP one.
    fn refuse(
        self,
        why: String,
        rule: Option<std::sync::Arc<str>>,
        tls: bool,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        log::info!("conn={} {why}", conn.id);
        ctx.stats.denied();
        conn.log.decision = Decision::Denied(Reasoned::new(rule, why.clone()));
        let bytes = if tls {
            alert_record(rustls::AlertDescription::AccessDenied).to_vec()
        } else {
            http::error_response(403, "fronting", &why, &[])
        };
        let Vetting { client, .. } = self;
        answer(&bytes, CloseReason::Denied, why, client, conn, ctx)
    }
}

/// The target a first-flight name stands for on `port`: a `Host` may carry
/// its own port (the name is what a front routes by).
fn named_target(name: &str, port: u16) -> Option<Target> {
    if let Ok(t) = Target::new(name, port) {
        return Some(t);
    }
    Target::parse_authority(name)
        .ok()
        .and_then(|t| Target::new(&named_host(&t), port).ok())
}

/// A target's host alone, as a name or address.
fn named_host(t: &Target) -> String {
    match &t.host {
        crate::policy::Host::Domain(d) => d.clone(),
        crate::policy::Host::Ip(ip) => ip.to_string(),
    }
}
