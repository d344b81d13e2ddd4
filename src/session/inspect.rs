//! Inspect: HTTP/1.1 relayed message by message, for a tunnel whose rule
//! inspects and for the forward proxy (`GET http://...`).
//!
//! This state is the shell around the sans-IO [`InspectCore`]: it owns the
//! two sockets, lends them to the core on each call with the reactor's
//! clock, keeps the session's one deadline on the core's next timeout, and
//! turns the core's [`Stop`]s into session states: a 101 hands every
//! buffered byte to a raw [`Passthrough`], a request for another host
//! (forward proxy) reconnects, and an ended conversation flushes what the
//! client is owed.

use std::sync::Arc;
use std::time::Duration;

use super::channel::Channel;
use super::closing::Closing;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::opening::Opening;
use super::passthrough::{Carrier, Passthrough, Preload};
use super::refusal::Dialect;
use super::state::State;
use crate::buffer::ByteBuf;
use crate::core::inspect::{InspectCore, Parts, Setup, Stop};
use crate::core::opening::Request;
use crate::core::verdicts;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{RequestRules, Target};
use crate::protocol::http1::exchange::{Decision, ExchangeConfig, Mode, SameLogin};

pub(crate) struct Inspect {
    client: Endpoint,
    upstream: Endpoint,
    core: InspectCore,
    /// The session's deadline was set from the core since the timer last
    /// fired: a later due time can wait for the early wakeup.
    armed: bool,
}

impl Inspect {
    /// An inspected tunnel: `to_client` is the proxy's success reply,
    /// `early` the bytes the client sent behind its request.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tunnel(
        client: Channel,
        upstream: Channel,
        target: Target,
        to_client: &[u8],
        early: &[u8],
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
        conn: &Conn,
        ctx: &mut Ctx,
    ) -> Inspect {
        let tls = !client.is_plain();
        let mode = Mode::Tunnel { target, tls };
        Inspect::new(
            client, upstream, mode, rules, early, to_client, idle, conn, ctx,
        )
    }

    /// The forward proxy, connected to `target`; `early` starts with the
    /// request head that led here; `login` holds later requests to the
    /// credentials the connection logged in with.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        client: Endpoint,
        upstream: Channel,
        target: Target,
        early: &[u8],
        rules: Option<Arc<RequestRules>>,
        login: Option<SameLogin>,
        idle: Option<Duration>,
        conn: &Conn,
        ctx: &mut Ctx,
    ) -> Inspect {
        let tls = !upstream.is_plain();
        let mode = Mode::Forward {
            upstream: target,
            tls,
        };
        let client = Channel::plain(client);
        let mut s = Inspect::new(client, upstream, mode, rules, early, &[], idle, conn, ctx);
        s.core.set_login(login);
        s
    }

    /// A raw tunnel's vetted first request named `host`: every request
    /// must name it ([`crate::protocol::http1::exchange::ExchangeConfig::vetted_host`]).
    pub(crate) fn vetted_host(mut self, host: Target) -> Inspect {
        self.core.set_vetted_host(host);
        self
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        client: Channel,
        upstream: Channel,
        mode: Mode,
        rules: Option<Arc<RequestRules>>,
        early: &[u8],
        to_client: &[u8],
        idle: Option<Duration>,
        conn: &Conn,
        ctx: &mut Ctx,
    ) -> Inspect {
        let setup = Setup {
            id: conn.id,
            exchange: ExchangeConfig {
                rules: verdicts::judge(rules),
                secrets: verdicts::secrets(ctx.policy.secrets().cloned()),
                max_head_bytes: ctx.settings.limits.max_head_bytes,
                ..ExchangeConfig::new(mode)
            },
            timeouts: ctx.settings.timeouts,
            idle,
            buffer: buffer_size(ctx),
        };
        let (client, client_link) = client.into_parts();
        let (upstream, upstream_link) = upstream.into_parts();
        let core = InspectCore::new(
            setup,
            client_link,
            upstream_link,
            early,
            to_client,
            ctx.pool,
            ctx.now,
        );
        Inspect {
            client,
            upstream,
            core,
            armed: false,
        }
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Upstream => &mut self.upstream,
        }
    }

    /// What the session waits for: a response (its clock runs) or the
    /// client's next request.
    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    /// New request rules after a policy reload (`None`: every request allowed).
    pub(crate) fn set_rules(&mut self, rules: Option<Arc<RequestRules>>) {
        self.core.set_rules(rules);
    }

    /// The secrets of a reloaded policy.
    pub(crate) fn set_secrets(&mut self, secrets: Option<Arc<crate::policy::secret::Secrets>>) {
        self.core.set_secrets(secrets);
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.core.unpark(ctx.pool);
        let stop = self
            .core
            .pump(ctx.now, &mut self.client, &mut self.upstream);
        self.after_call(stop, conn, ctx)
    }

    pub(crate) fn on_timer(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.core.unpark(ctx.pool);
        self.armed = false;
        let stop = match self.core.handle_timeout(ctx.now, &self.client) {
            Ok(()) => self
                .core
                .pump(ctx.now, &mut self.client, &mut self.upstream),
            Err(stop) => Err(stop),
        };
        self.after_call(stop, conn, ctx)
    }

    /// Accounts for what a core call did, then carries on, or acts on the
    /// core's stop.
    fn after_call(
        mut self: Box<Self>,
        stop: Result<(), Stop>,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let (up, down) = self.core.take_relayed();
        conn.count(Side::Client, up, ctx);
        conn.count(Side::Upstream, down, ctx);
        self.records(conn, ctx);
        let stop = match stop {
            Ok(()) => {
                if self.core.yielded() {
                    ctx.again();
                }
                self.rearm(conn);
                self.core.park(ctx.pool);
                return State::Inspect(self);
            }
            Err(stop) => stop,
        };
        let this = *self;
        let parts = this.core.into_parts();
        match stop {
            Stop::ClientGone(why) => {
                if let Some(why) = why {
                    conn.log.error.get_or_insert(why.into());
                }
                State::Done(CloseReason::ClientGone)
            }
            Stop::Done(reason) => State::Done(reason),
            Stop::Upgraded => upgrade(this.client, this.upstream, parts, conn, ctx),
            Stop::Closed {
                end,
                reason,
                error,
                abort,
            } => {
                log::debug!("conn={} the exchange ended: {end:?}", conn.id);
                if let Some(error) = error {
                    conn.log.error = Some(error.into());
                }
                let owed = (!parts.cout.is_empty()).then_some(Carrier::Buf(parts.cout));
                // The upstream's socket closes here; the client's goes on to Closing.
                let client = Channel::from_parts(this.client, parts.client);
                if abort {
                    State::Closing(Closing::abort(
                        client,
                        Side::Client,
                        owed,
                        reason,
                        parts.own,
                        ctx,
                    ))
                } else {
                    State::Closing(Closing::to_client(client, owed, reason, parts.own, ctx))
                }
            }
            Stop::WrongProtocol(bytes, why) => {
                log::info!("conn={} {why}", conn.id);
                // Only a plaintext client is sniffed.
                debug_assert!(parts.client.is_plain(), "a TLS client sniffed for TLS");
                let reason = CloseReason::BadRequest;
                super::closing::answer(&bytes, reason, why.into(), this.client, conn, ctx)
            }
            Stop::Switch(target, tls) => {
                // The old upstream closes here; the client goes on to the new one.
                // The forward proxy's client is plaintext.
                debug_assert!(parts.client.is_plain(), "a TLS client switching upstreams");
                let early = parts.cin.data().to_vec();
                let dialect = if tls {
                    Dialect::ForwardTls
                } else {
                    Dialect::Forward
                };
                // Later requests are held to the same login on the new upstream.
                let request = Request {
                    dialect,
                    early,
                    login: parts.login,
                    replied: false,
                };
                Opening::establish(this.client, target, request, conn, ctx)
            }
        }
    }

    /// Keeps the session's one deadline on the core's next timeout. A due
    /// time that moved later (new traffic) keeps the earlier deadline: the
    /// timer fires early, and `on_timer` sets it again for what is left,
    /// which saves moving the timer on every byte.
    fn rearm(&mut self, conn: &mut Conn) {
        let due = self.core.poll_timeout(&self.client);
        let keep =
            self.armed && matches!((conn.deadline, due), (Some(set), Some(due)) if set <= due);
        if !keep {
            conn.deadline = due;
        }
        self.armed = true;
    }

    /// Counts and logs each finished request.
    fn records(&mut self, conn: &mut Conn, ctx: &Ctx) {
        for record in self.core.take_records() {
            if let Decision::Refused { cause, reason, .. } = &record.decision {
                if cause == "secret-not-allowed" {
                    // The reason names the secret and where it was bound,
                    // never its value.
                    log::warn!(
                        "conn={} secret exfiltration attempt refused: {reason}",
                        conn.id
                    );
                }
            }
            conn.log.requests += 1;
            conn.request(&record, ctx);
            ctx.stats.request(matches!(
                record.decision,
                Decision::Allowed(_) | Decision::WouldDeny(_) | Decision::Failed { .. }
            ));
        }
    }
}

/// The 101 is out: every buffered byte goes on raw, both ways.
fn upgrade(
    client: Endpoint,
    upstream: Endpoint,
    parts: Parts,
    conn: &mut Conn,
    ctx: &mut Ctx,
) -> State {
    ctx.stats.upgraded();
    conn.log.upgraded = true;
    log::debug!("conn={} upgraded: raw passthrough from here", conn.id);
    let Parts {
        client: client_link,
        upstream: upstream_link,
        cin,
        uout,
        uin,
        cout,
        eof,
        idle,
        own,
        ..
    } = parts;
    let preload = Preload {
        to_client: join(cout, uin, ctx),
        own,
        to_upstream: join(uout, cin, ctx),
        // An EOF already read raises no new edge: the tunnel must know of it.
        eof,
    };
    State::Passthrough(Passthrough::new(
        Channel::from_parts(client, client_link),
        Channel::from_parts(upstream, upstream_link),
        preload,
        idle,
        ctx,
    ))
}

/// Inspect's buffer size: a whole head must fit, with room for what the
/// forward proxy adds when it rewrites one (`Via`, `Host`, `Connection`).
fn buffer_size(ctx: &Ctx) -> usize {
    let limits = &ctx.settings.limits;
    limits.buffer_size.max(limits.max_head_bytes + 1024)
}

/// `a` then `b` in one buffer (`None` when both are empty).
fn join(mut a: ByteBuf, b: ByteBuf, ctx: &mut Ctx) -> Option<ByteBuf> {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => None,
        (false, true) => Some(a),
        (true, false) => Some(b),
        (false, false) if a.room() >= b.len() => {
            a.extend(b.data());
            Some(a)
        }
        (false, false) => {
            let mut joined = ctx.pool.take_at_least(a.len() + b.len());
            joined.extend(a.data());
            joined.extend(b.data());
            Some(joined)
        }
    }
}
