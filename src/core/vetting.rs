//! Vetting, as the core runs it: a raw tunnel to a port some inspecting
//! (or TLS-terminating) rule covers reads the client's first flight before
//! relaying it, so that a name allowed raw cannot front for one the policy
//! inspects or refuses (`CONNECT other.test:443` carrying SNI `good.test`,
//! as CDN edges serve every name on every address).
//!
//! The success reply goes first, once the upstream is connected, as for
//! every tunnel (the client sends nothing before it); then up to
//! [`first_flight::MAX_FIRST_FLIGHT`] bytes are read, within the handshake
//! timeout, until it is a whole ClientHello or request head (parsed again
//! when the [`FlightGate`] says the answer may have changed; what it held
//! back is parsed at the client's end and at the deadline). What it names
//! is checked by [`crate::policy::Policy::fronting`]:
//!
//! - nothing stricter: the buffered bytes go first into a Passthrough, or,
//!   for plaintext HTTP, into an `Inspect` with no request rules, so that
//!   no later request on the connection names another host than the first
//!   one did (`421`: a keep-alive or pipelined request could front too);
//! - a name a rule refuses: the session closes (a TLS `access_denied`
//!   alert, or an HTTP `403` `X-Proxy-Error: fronting`);
//! - a name a rule inspects or terminates: the strictest treatment, that
//!   name's own: the upstream is dropped and the session goes on as if the
//!   client had asked for that name (its rule, its addresses, the first
//!   flight as the pipelined bytes).
//!
//! Each is logged `fronting sni=NAME target=HOST:PORT: ...` (`host=` for
//! a `Host`). Nothing of the first flight reaches the first upstream
//! before the verdict. ECH, malformed and oversized first flights are
//! refused; no SNI, neither TLS nor HTTP, and an upstream that speaks first
//! (not a TLS or HTTP front) are relayed under the tunnel's own rule.
//!
//! This is the last stage of [`super::opening::OpeningCore`], which
//! carries the verdict out (a switch is a transition back to its
//! establishing stage); the shell (`session/opening.rs`) owns the sockets.

use std::sync::Arc;
use std::time::Instant;

use super::clock::Deadline;
use super::port::{send_owed, Port, Sent};
use crate::io::Io;
use crate::policy::{Denial, Fronting};
use crate::protocol::first_flight::{self, FirstFlight, FlightGate};
use crate::protocol::http;
use crate::target::{Host, Target};
use crate::tls::alert_record;

/// Bytes read per call into the first flight.
const CHUNK: usize = 4096;

/// A vetted tunnel's client side, until its first flight is judged.
pub(crate) struct VettingCore {
    /// The proxy's success reply, still owed to the client.
    reply: Vec<u8>,
    /// The client's first flight so far (what it pipelined included).
    first: Vec<u8>,
    /// Says when `first` is worth parsing again.
    gate: FlightGate,
    target: Target,
    /// The client has until this to send its first flight whole.
    deadline: Deadline,
}

/// What the deadline passing comes to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TimedOut {
    /// The first flight as read so far is whole or refused as it stands
    /// (the gate held back the verdict a parse on arrival gave): [`judge`]
    /// it.
    ///
    /// [`judge`]: VettingCore::judge
    Judge(FirstFlight),
    /// It still needs more (or the reply was still owed): the session
    /// closes as timed out, the note (what to fix) logged if there is one.
    Close { note: Option<String> },
}

/// What a call left the shell to do.
#[derive(Debug)]
pub(crate) enum Next {
    /// Wait for readiness (or the handshake deadline).
    Wait,
    /// The client closed or failed before its first flight was whole.
    ClientGone,
    /// The destination spoke first: not a TLS or HTTP front, so relay
    /// under the tunnel's own rule.
    Relay,
    /// The first flight is whole (or refused as it stands): [`judge`] it.
    ///
    /// [`judge`]: VettingCore::judge
    Flight(FirstFlight),
}

/// What the first flight earns.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Nothing stricter: relay, the first flight first.
    Relay,
    /// Refused: `answer` (a TLS alert, or an HTTP 403) then the close; the
    /// refusing rule, if a rule refused.
    Refuse {
        answer: Vec<u8>,
        why: String,
        rule: Option<Arc<str>>,
    },
    /// A name a rule inspects: the session goes on as if the client had
    /// asked for `to` (that name's rule, its addresses).
    Switch { to: Target, why: String },
    /// Plaintext HTTP naming `host` first: relayed through the exchange
    /// with no request rules, each later request held to that host.
    HoldToHost(Target),
}

impl VettingCore {
    /// `reply` goes to the client first; `early` is the start of its first
    /// flight (what it sent behind its request). All of it by `deadline`.
    pub(crate) fn new(
        reply: Vec<u8>,
        early: Vec<u8>,
        target: Target,
        deadline: Deadline,
    ) -> VettingCore {
        VettingCore {
            reply,
            first: early,
            gate: FlightGate::default(),
            target,
            deadline,
        }
    }

    /// When the client runs out of time for its first flight.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline.at()
    }

    pub(crate) fn stage(&self) -> &'static str {
        if self.reply.is_empty() {
            "first-flight"
        } else {
            "reply"
        }
    }

    /// The tunnel's own target.
    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The first flight as read so far (the tests look at it).
    #[cfg(test)]
    pub(crate) fn into_first(self) -> Vec<u8> {
        self.first
    }

    /// The first flight and the tunnel's target, for the exchange.
    pub(crate) fn into_parts(self) -> (Vec<u8>, Target) {
        (self.first, self.target)
    }

    /// Moves what readiness allows: the reply out, then the first flight
    /// in. The upstream is only watched, never read: a word from it before
    /// the client's first means no front.
    pub(crate) fn pump(&mut self, client: &mut impl Port, upstream: &mut impl Port) -> Next {
        if client.failed() {
            return self.client_gone();
        }
        if !self.reply.is_empty() {
            upstream.want_read(false);
            upstream.want_write(false);
        }
        match send_owed(client, &mut self.reply) {
            Sent::All => {}
            Sent::Wait => return Next::Wait,
            Sent::Gone => return Next::ClientGone,
        }
        upstream.want_read(true);
        upstream.want_write(false);
        client.want_read(true);
        client.want_write(false);
        loop {
            if self.gate.due(&self.first) {
                match first_flight::parse(&self.first) {
                    FirstFlight::NeedMore => {}
                    flight => return Next::Flight(flight),
                }
            }
            if self.first.is_empty() && (upstream.can_read() || upstream.failed()) {
                return Next::Relay;
            }
            if !client.can_read() {
                return Next::Wait;
            }
            let len = self.first.len();
            self.first.resize(len + CHUNK, 0);
            let io = client.read(&mut self.first[len..]);
            self.first
                .truncate(len + if let Io::Progress(n) = io { n } else { 0 });
            match io {
                Io::Progress(_) => {}
                Io::WouldBlock => return Next::Wait,
                Io::Eof | Io::PeerGone(_) => return self.client_gone(),
            }
        }
    }

    /// Judges a whole first flight. `fronting` is the policy's answer for
    /// a name on the tunnel's port (none: nothing stricter than the
    /// tunnel's own rule). `upstream_spoke`: the destination already sent
    /// bytes (behind a parent proxy's answer), so it cannot be an HTTP
    /// front whose requests the exchange would read.
    pub(crate) fn judge(
        &self,
        flight: FirstFlight,
        upstream_spoke: bool,
        mut fronting: impl FnMut(&Target) -> Option<Fronting>,
    ) -> Verdict {
        let port = self.target.port;
        let target = &self.target;
        let starts_tls = self
            .first
            .first()
            .is_some_and(|b| first_flight::starts_tls(*b));
        let (kind, names, tls): (&str, Vec<String>, bool) = match flight {
            FirstFlight::NeedMore | FirstFlight::Other => return Verdict::Relay,
            FirstFlight::Tls { ech: true, sni } => {
                let why = format!(
                    "fronting ech sni={} target={target}: the ClientHello hides its server name \
                     (encrypted_client_hello) on port {port}, which an inspecting rule covers; \
                     turn ECH off in the client, or inspect this destination",
                    sni.as_deref().unwrap_or("-"),
                );
                return refuse(why, None, true);
            }
            FirstFlight::Tls { sni: None, .. } => return Verdict::Relay,
            FirstFlight::Tls { sni: Some(n), .. } => ("sni", vec![n], true),
            FirstFlight::Http { hosts } => ("host", hosts, false),
            FirstFlight::Malformed(what) => {
                // A protocol that only looks like TLS or HTTP (its first
                // byte a TLS record type, its first line naming HTTP/)
                // lands here too: say where it belongs.
                let why = format!(
                    "fronting target={target}: {what} on port {port}, which an inspecting rule \
                     covers; a protocol other than TLS or HTTP belongs on another port"
                );
                return refuse(why, None, starts_tls);
            }
            FirstFlight::TooLarge => {
                let why = format!(
                    "fronting target={target}: the first flight is over {} bytes on port \
                     {port}, which an inspecting rule covers",
                    first_flight::MAX_FIRST_FLIGHT
                );
                return refuse(why, None, starts_tls);
            }
        };
        let mut switch_to: Option<(Target, String)> = None;
        let mut first_named: Option<Target> = None;
        for name in names {
            let Some(named) = named_target(&name, port) else {
                let why = format!(
                    "fronting {kind}={name:?} target={target}: not a host name, on port {port}, \
                     which an inspecting rule covers"
                );
                return refuse(why, None, tls);
            };
            let host = named_host(&named);
            first_named.get_or_insert_with(|| named.clone());
            match fronting(&named) {
                None => {}
                Some(Fronting::Denied(d)) => {
                    let rule = match &d {
                        Denial::Rule(r) => Some(r.name.clone()),
                        _ => None,
                    };
                    let why =
                        format!("fronting {kind}={host} target={target}: {host} is refused: {d}");
                    return refuse(why, rule, tls);
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
                        "fronting {kind}={host} target={target}: rule {rule} {how} {host}; \
                             treated as a tunnel to {host}:{port}"
                    );
                    switch_to = Some((named, why));
                }
                Some(Fronting::Inspected { .. }) => {}
            }
        }
        match (switch_to, first_named) {
            // The strictest treatment: that name's own rule, dialled to
            // that name's own addresses. The upstream never heard a byte.
            (Some((to, why)), _) => Verdict::Switch { to, why },
            // Plaintext HTTP: every later request on the connection could
            // name another host, so the exchange reads them all, with no
            // request rules: each must name the host the first one did
            // (421 otherwise). A first request naming no host (HTTP/1.0,
            // or no `Host`) is held to the tunnel's own: relayed raw, a
            // keep-alive request behind it could name any host.
            (None, named) if !tls && !upstream_spoke => {
                Verdict::HoldToHost(named.unwrap_or_else(|| target.clone()))
            }
            (None, _) => Verdict::Relay,
        }
    }

    /// The client closed or failed: gone, unless the gate held back a
    /// verdict on what it sent before, which is given as it would have
    /// been on arrival (before the end was seen).
    fn client_gone(&self) -> Next {
        match self.gate.held().then(|| self.held_back()).flatten() {
            Some(flight) => Next::Flight(flight),
            None => Next::ClientGone,
        }
    }

    /// What the first flight read so far says, parsed whatever the gate
    /// would wait for: a verdict the gate held back (a request head that
    /// went wrong before its end), or `None` while it needs more.
    fn held_back(&self) -> Option<FirstFlight> {
        match first_flight::parse(&self.first) {
            FirstFlight::NeedMore => None,
            flight => Some(flight),
        }
    }

    /// The time is `now`: `None` before the deadline. Past it, the first
    /// flight as read so far is judged if it is whole or refused as it
    /// stands; otherwise the session times out.
    pub(crate) fn handle_timeout(&self, now: Instant) -> Option<TimedOut> {
        if !self.deadline.passed(now) {
            return None;
        }
        if !self.reply.is_empty() {
            // The client was never asked yet.
            return Some(TimedOut::Close { note: None });
        }
        if let Some(flight) = self.held_back() {
            return Some(TimedOut::Judge(flight));
        }
        // A client-first protocol whose first bytes could still be a
        // request line waits here: say what to fix.
        let note = format!(
            "fronting target={}: the first {} bytes are neither a TLS ClientHello \
             nor a whole request line, and no more came within timeouts.handshake; \
             port {} is vetted because a rule inspects it: send this protocol to \
             another port, or inspect or terminate it",
            self.target,
            self.first.len(),
            self.target.port
        );
        Some(TimedOut::Close { note: Some(note) })
    }
}

/// Refused: a TLS alert to a TLS client, a `403` to an HTTP one.
fn refuse(why: String, rule: Option<Arc<str>>, tls: bool) -> Verdict {
    let answer = refusal_answer(&why, tls);
    Verdict::Refuse { answer, why, rule }
}

/// What a refused first flight is answered with: an `access_denied` alert
/// when it started TLS, else a `403` (`X-Proxy-Error: fronting`) saying
/// `why`.
pub(crate) fn refusal_answer(why: &str, tls: bool) -> Vec<u8> {
    if tls {
        alert_record(rustls::AlertDescription::AccessDenied).to_vec()
    } else {
        http::error_response(403, "fronting", why, &[])
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
        Host::Domain(d) => d.clone(),
        Host::Ip(ip) => ip.to_string(),
    }
}
