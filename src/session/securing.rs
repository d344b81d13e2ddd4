//! Securing: the start of a TLS-terminated tunnel. The core
//! ([`SecuringCore`]) writes the proxy's success reply and reads the
//! client's ClientHello, whose SNI must name the tunnel's target; this
//! shell mints a leaf for that name (or takes it from the cache), and the
//! handshake completes on both sides inside Inspect, which runs the HTTP
//! exchange between the two plaintexts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::Channel;
use super::closing::answer;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::inspect::Inspect;
use super::state::State;
use crate::core::clock::Deadline;
use crate::core::securing::{Next, SecuringCore};
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Allowed, RequestRules, Target};
use crate::tls::layer::{LayerLimits, TlsLayer};

/// The shell: both sockets (nothing is read from the upstream until both
/// handshakes run), and the core that reads the client's hello.
pub(crate) struct Securing {
    client: Endpoint,
    upstream: Endpoint,
    core: SecuringCore,
    rules: Option<Arc<RequestRules>>,
    idle: Option<Duration>,
}

impl Securing {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Endpoint,
        upstream: Endpoint,
        reply: Vec<u8>,
        early: Vec<u8>,
        target: Target,
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
        deadline: Deadline,
    ) -> Box<Securing> {
        Box::new(Securing {
            client,
            upstream,
            core: SecuringCore::new(reply, early, target, deadline),
            rules,
            idle,
        })
    }

    /// When the client runs out of time for its ClientHello.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    /// The session's timer fired.
    pub(crate) fn on_timeout(self: Box<Self>, ctx: &Ctx) -> State {
        match self.core.handle_timeout(ctx.now) {
            Some(reason) => State::Done(reason),
            None => State::Securing(self),
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
        self.core.stage()
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.upstream.want(false, false);
        match self.core.pump(&mut self.client) {
            Next::Wait => State::Securing(self),
            Next::ClientGone => State::Done(CloseReason::ClientGone),
            Next::Refused {
                answer: bytes,
                reason,
                why,
                notable,
            } => {
                if notable {
                    log::info!("conn={} {}: {why}", conn.id, self.core.target());
                }
                answer(&bytes, reason, why, self.client, conn, ctx)
            }
            Next::Hello { name } => (*self).hello(name, conn, ctx),
        }
    }

    /// The ClientHello named the target: mint the leaf, and go on to both
    /// handshakes.
    fn hello(self, name: crate::target::Host, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let Securing {
            client,
            upstream,
            core,
            rules,
            idle,
        } = self;
        let target = core.target().clone();
        let server = match ctx.tls.server_config(&name) {
            Ok(c) => c,
            Err(e) => {
                let why = format!("could not mint a certificate for {target}: {e}");
                log::warn!("conn={} {why}", conn.id);
                return answer(&[], CloseReason::TlsFailed, why, client, conn, ctx);
            }
        };
        let client_layer = match core.complete(server) {
            Ok(layer) => layer,
            Err((alert, why)) => {
                return answer(&alert, CloseReason::TlsFailed, why, client, conn, ctx)
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
