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
//! head (or, at the deadline, refuses what arrived as it stands). What it
//! names is checked by [`crate::policy::Policy::fronting`]:
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
//!   client had asked for that name ([`super::opening::Opening::establish`]: its rule,
//!   its addresses, the first flight as the pipelined bytes).
//!
//! The reading and the judging are [`VettingCore`]'s (sans-IO); this shell
//! owns the sockets and carries the verdict out. Each is logged `fronting sni=NAME target=HOST:PORT: ...` (`host=` for a
//! `Host`). Nothing of the first flight reaches the first upstream before
//! the verdict. ECH, malformed and oversized first flights are refused; no
//! SNI, neither TLS nor HTTP, and an upstream that speaks first (not a TLS
//! or HTTP front) are relayed under the tunnel's own rule.

use std::time::{Duration, Instant};

use super::channel::Channel;
use super::closing::answer;
use super::conn::{Conn, Decision, Reasoned};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::inspect::Inspect;
use super::opening::Opening;
use super::passthrough::{Passthrough, Preload};
use super::refusal::Dialect;
use super::state::State;
use crate::core::clock::Deadline;
use crate::core::opening::Request;
use crate::core::vetting::{Next, TimedOut, Verdict, VettingCore};
use crate::lifecycle::{CloseReason, Side};
use crate::policy::Target;
use crate::protocol::first_flight::FirstFlight;

/// The shell: both sockets and what the tunnel goes on with; the core
/// reads and judges the first flight.
pub(crate) struct Vetting {
    client: Endpoint,
    upstream: Endpoint,
    core: VettingCore,
    /// What the destination sent behind a parent proxy's answer.
    from_upstream: Vec<u8>,
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
        deadline: Deadline,
    ) -> Vetting {
        Vetting {
            client,
            upstream,
            core: VettingCore::new(reply, early, target, deadline),
            from_upstream,
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
        self.core.stage()
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self.core.pump(&mut self.client, &mut self.upstream) {
            Next::Wait => State::Vetting(self),
            Next::ClientGone => State::Done(CloseReason::ClientGone),
            Next::Relay => (*self).relay(ctx),
            Next::Flight(flight) => (*self).judge(flight, conn, ctx),
        }
    }

    /// The handshake timeout passed before the first flight was whole:
    /// closed, unless what arrived is whole or refused as it stands (its
    /// verdict, as it would have been given on arrival).
    pub(crate) fn on_timeout(self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match self.core.handle_timeout(ctx.now) {
            None => State::Vetting(self),
            Some(TimedOut::Judge(flight)) => (*self).judge(flight, conn, ctx),
            Some(TimedOut::Close { note }) => {
                if let Some(note) = note {
                    log::info!("conn={} {note}", conn.id);
                }
                State::Done(CloseReason::HandshakeTimeout)
            }
        }
    }

    /// When the client runs out of time for its first flight.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.core.poll_timeout()
    }

    /// Judges `flight` against the policy and carries the verdict out.
    fn judge(self, flight: FirstFlight, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let user = conn.log.user.clone();
        let policy = ctx.policy;
        let now = ctx.now;
        let target = self.core.target();
        let verdict = self
            .core
            .judge(flight, !self.from_upstream.is_empty(), |named| {
                policy.fronting(target, user.as_deref(), named, now)
            });
        self.carry_out(verdict, conn, ctx)
    }

    fn carry_out(self, verdict: Verdict, conn: &mut Conn, ctx: &mut Ctx) -> State {
        match verdict {
            Verdict::Relay => self.relay(ctx),
            Verdict::Refuse {
                answer: bytes,
                why,
                rule,
            } => {
                log::info!("conn={} {why}", conn.id);
                ctx.stats.denied();
                conn.log.decision = Decision::Denied(Reasoned::new(rule, why.clone()));
                answer(&bytes, CloseReason::Denied, why, self.client, conn, ctx)
            }
            Verdict::Switch { to, why } => {
                log::info!("conn={} {why}", conn.id);
                let Vetting {
                    client,
                    core,
                    dialect,
                    ..
                } = self;
                let request = Request {
                    dialect,
                    early: core.into_first(),
                    login: None,
                    replied: true,
                };
                Opening::establish(client, to, request, conn, ctx)
            }
            Verdict::HoldToHost(host) => {
                let Vetting {
                    client,
                    upstream,
                    core,
                    idle,
                    ..
                } = self;
                let (first, target) = core.into_parts();
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
                State::Inspect(Box::new(inspect.vetted_host(host)))
            }
        }
    }

    /// Nothing stricter: relay, the first flight first.
    fn relay(self, ctx: &mut Ctx) -> State {
        let first = self.core.into_first();
        let mut preload = Preload::reply(&self.from_upstream, &first, ctx);
        preload.own = 0;
        State::Passthrough(Passthrough::new(
            Channel::plain(self.client),
            Channel::plain(self.upstream),
            preload,
            self.idle,
            ctx,
        ))
    }
}
