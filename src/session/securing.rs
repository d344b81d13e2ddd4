//! Securing: the start of a TLS-terminated tunnel. The client hears the
//! proxy's success reply in plaintext, then its first bytes must be a TLS
//! ClientHello; its SNI must name the tunnel's target (no domain fronting);
//! a leaf for that name is minted (or taken from the cache) and the
//! handshake completes on both sides inside Inspect, which runs the HTTP
//! exchange between the two plaintexts.

use std::sync::Arc;
use std::time::Duration;

use super::channel::Channel;
use super::closing::answer;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::inspect::Inspect;
use super::state::State;
use crate::io::Io;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Allowed, RequestRules, Target};
use crate::protocol::http;
use crate::tls::accept::{HelloPoll, TlsAccept};
use crate::tls::layer::{LayerLimits, TlsLayer};
use crate::tls::{alert_record, sniff, ClientHelloInfo, Sniff};

/// Bytes read while looking for the start of a ClientHello.
const SNIFF_CHUNK: usize = 512;

pub(crate) struct Securing {
    client: Endpoint,
    upstream: Endpoint,
    /// The proxy's success reply, still owed to the client in plaintext.
    reply: Vec<u8>,
    stage: Stage,
    target: Target,
    rules: Option<Arc<RequestRules>>,
    idle: Option<Duration>,
}

enum Stage {
    /// Reading the client's first bytes (what it sent behind its request
    /// included) to tell TLS from anything else.
    Sniff(Vec<u8>),
    /// Reading the ClientHello.
    Hello(Box<TlsAccept>),
}

impl Securing {
    pub(crate) fn new(
        client: Endpoint,
        upstream: Endpoint,
        reply: Vec<u8>,
        early: Vec<u8>,
        target: Target,
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
    ) -> Securing {
        Securing {
            client,
            upstream,
            reply,
            stage: Stage::Sniff(early),
            target,
            rules,
            idle,
        }
    }

    /// A reloaded policy still allows the target: its request rules apply
    /// from the first request (nothing can be stricter than the termination
    /// already planned).
    pub(crate) fn reload(&mut self, allowed: &Allowed) {
        self.rules = allowed.inspect.clone();
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Upstream => &mut self.upstream,
        }
    }

    pub(crate) fn stage(&self) -> &'static str {
        match (&self.stage, self.reply.is_empty()) {
            (_, false) => "reply",
            (Stage::Sniff(_), true) => "sniff",
            (Stage::Hello(_), true) => "client-hello",
        }
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        // Nothing is read from the upstream until both handshakes run.
        self.upstream.want(false, false);
        while !self.reply.is_empty() {
            self.client.want(false, true);
            if !self.client.can_write() {
                return State::Securing(self);
            }
            match self.client.write(&self.reply) {
                Io::Progress(n) => {
                    self.reply.drain(..n);
                }
                Io::WouldBlock => return State::Securing(self),
                Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
            }
        }
        self.client.want(true, false);
        // The stage is lent to its handler, which puts it back whenever the
        // state goes on waiting.
        match std::mem::replace(&mut self.stage, Stage::Sniff(Vec::new())) {
            Stage::Sniff(first) => self.sniff(first, conn, ctx),
            Stage::Hello(accept) => self.poll_hello(accept, conn, ctx),
        }
    }

    /// Reads the client's first bytes until they tell TLS from anything else.
    fn sniff(mut self, mut first: Vec<u8>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        loop {
            match sniff(&first) {
                Sniff::Tls => {
                    let accept = TlsAccept::new(&first, LayerLimits::default());
                    self.stage = Stage::Hello(Box::new(accept));
                    // Through the transition point: the sub-stage is logged.
                    return State::Securing(self);
                }
                Sniff::NeedMore => {
                    if !self.client.can_read() {
                        self.stage = Stage::Sniff(first);
                        return State::Securing(self);
                    }
                    let len = first.len();
                    first.resize(len + SNIFF_CHUNK, 0);
                    let io = self.client.read(&mut first[len..]);
                    first.truncate(len + if let Io::Progress(n) = io { n } else { 0 });
                    match io {
                        Io::Progress(_) => {}
                        Io::WouldBlock => {
                            self.stage = Stage::Sniff(first);
                            return State::Securing(self);
                        }
                        Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
                    }
                }
                other => return self.not_tls(other, conn, ctx),
            }
        }
    }

    /// Reads the ClientHello.
    fn poll_hello(mut self, mut accept: Box<TlsAccept>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match accept.poll(&mut self.client) {
            HelloPoll::Ready(info) => self.hello(accept, info, conn, ctx),
            HelloPoll::WouldBlock => {
                self.stage = Stage::Hello(accept);
                State::Securing(self)
            }
            HelloPoll::Gone(_) => State::Done(CloseReason::ClientGone),
            HelloPoll::Failed { failure, alert } => {
                let why = format!("TLS from the client: {}", failure.reason());
                answer(&alert, CloseReason::TlsFailed, why, self.client, conn, ctx)
            }
        }
    }

    /// The client spoke something other than TLS on a rule that terminates it.
    fn not_tls(self, seen: Sniff, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let why = seen
            .mismatch(true)
            .unwrap_or("the client did not start TLS")
            .to_string();
        log::info!("conn={} {}: {why}", conn.id, self.target);
        // A plaintext HTTP client can read an HTTP answer; anything else just
        // hears the close.
        let bytes = match seen {
            Sniff::Http => http::error_response(400, "tls-required", &why, &[]),
            _ => Vec::new(),
        };
        answer(&bytes, CloseReason::BadRequest, why, self.client, conn, ctx)
    }

    /// The ClientHello is in: check its SNI, mint the leaf, and go on to
    /// both handshakes.
    fn hello(
        self,
        accept: Box<TlsAccept>,
        info: ClientHelloInfo,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let Securing {
            client,
            upstream,
            target,
            rules,
            idle,
            ..
        } = self;
        let name = match info.leaf_name(&target.host) {
            Ok(name) => name,
            Err(refusal) => {
                let why = refusal.to_string();
                log::info!("conn={} {target}: {why}", conn.id);
                let alert = alert_record(refusal.alert());
                return answer(&alert, CloseReason::Denied, why, client, conn, ctx);
            }
        };
        let server = match ctx.tls.server_config(&name) {
            Ok(c) => c,
            Err(e) => {
                let why = format!("could not mint a certificate for {target}: {e}");
                log::warn!("conn={} {why}", conn.id);
                return answer(&[], CloseReason::TlsFailed, why, client, conn, ctx);
            }
        };
        let client_layer = match accept.complete(server) {
            Ok(layer) => layer,
            Err((failure, alert)) => {
                let why = format!("TLS from the client: {}", failure.reason());
                return answer(&alert, CloseReason::TlsFailed, why, client, conn, ctx);
            }
        };
        let upstream_layer = match upstream_layer(&target, ctx) {
            Ok(layer) => layer,
            Err(why) => return answer(&[], CloseReason::TlsFailed, why, client, conn, ctx),
        };
        State::Inspect(Box::new(Inspect::tunnel(
            Channel::tls(client, client_layer),
            Channel::tls(upstream, upstream_layer),
            target,
            &[],
            &[],
            rules,
            idle,
            conn,
            ctx,
        )))
    }
}

/// A TLS client layer to `target` (SNI its name; an address is checked
/// against the certificate's IP SAN).
pub(crate) fn upstream_layer(target: &Target, ctx: &mut Ctx) -> Result<TlsLayer, String> {
    let config = ctx
        .tls
        .client_config()
        .map_err(|e| format!("TLS to the upstream: {e}"))?;
    TlsLayer::client(config, &target.host, LayerLimits::default())
        .map_err(|f| format!("TLS to the upstream: {}", f.reason()))
}
