//! The session machine's shell: the session state `Machine`, named
//! `Handshake`, `Resolving`, `Connecting`, `Securing`, `Vetting`,
//! `Inspect` or `Closing` as the sans-IO [`SessionCore`] stands. The core
//! reads the client's request, checks its login, establishes its target,
//! reads a terminated tunnel's ClientHello or vets a raw tunnel's first
//! flight, relays HTTP message by message where a rule inspects (the
//! forward proxy's next host included), and answers and closes the client
//! at every end; what leaves it is a raw tunnel, which this turns into
//! [`Passthrough`] (the zero-copy relay).
//!
//! The shell owns the client's socket and the upstream's (a connect in
//! flight, or open), lends them to the core with the reactor's clock, and
//! carries out what it asks: a login to the verifier pool, a name to the
//! resolver, a wait for the inspected names, a connect (registered with
//! the reactor), a leaf or the upstream trust from the TLS environment,
//! the upstream closed, and the records (who the client is, what it asked
//! for, which rule allowed or refused it, each request). It keeps the
//! session's one deadline on the core's.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use rustls::{ClientConfig, ServerConfig};

use super::associate;
use super::channel::Channel;
use super::conn::{Conn, Decision};
use super::connect::{self, PolicyEnv};
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::passthrough::{Passthrough, Preload};
use super::state::State;
use crate::buffer::ByteBuf;
use crate::config::ListenerProtocol;
use crate::core::clock::Deadline;
use crate::core::establish;
use crate::core::inspect::Parts;
use crate::core::opening::{Action, Input};
use crate::core::session::{Next, SessionCore};
use crate::io::Stream;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{Allowed, Denial};
use crate::protocol::http1::exchange::{Decision as Verdict, Record};
use crate::target::Host;

pub(crate) struct Machine {
    client: Endpoint,
    /// The connect in flight (to the destination or its parent), or open.
    /// Boxed: the slot is sized by its largest state.
    upstream: Option<Box<Endpoint>>,
    core: SessionCore,
    /// The session's deadline was set from an inspected core since the
    /// timer last fired: a later due time can wait for the early wakeup.
    armed: bool,
}

impl Machine {
    /// An accepted client's handshake; see [`SessionCore::accept`].
    pub(crate) fn accept(
        client: Endpoint,
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        deadline: Deadline,
    ) -> Machine {
        Machine {
            client,
            upstream: None,
            core: SessionCore::accept(protocol, refusing, deadline),
            armed: false,
        }
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> Option<&mut Endpoint> {
        match side {
            Side::Client => Some(&mut self.client),
            Side::Upstream => self.upstream.as_deref_mut(),
        }
    }

    /// `Handshake`, `Resolving`, `Inspect`, ..., as the session's state
    /// names it.
    pub(crate) fn name(&self) -> &'static str {
        self.core.name()
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.core.stage()
    }

    pub(crate) fn phase(&self) -> crate::lifecycle::Phase {
        self.core.phase()
    }

    /// The policy admitted what this session does: an address is being
    /// dialled, a tunnel vetted or secured, or HTTP relayed; a reload must
    /// look again.
    pub(crate) fn admitted(&self) -> bool {
        self.core.dialling()
            || self.core.vetting()
            || self.core.securing()
            || self.core.inspecting()
    }

    /// A raw tunnel, open, its first flight being read.
    pub(crate) fn vetting(&self) -> bool {
        self.core.vetting()
    }

    /// The core's deadline, where the session arms its timer on it as it
    /// changes stage; `None` while HTTP is relayed (its clocks move with
    /// every byte, and the shell keeps the timer on them as it goes).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.core.inspecting() {
            true => None,
            false => self.core.poll_timeout(&self.client),
        }
    }

    /// A reloaded policy still allows the target: see
    /// [`SessionCore::reload`]. Returns false when the session must close.
    pub(crate) fn reload(
        &mut self,
        allowed: &Allowed,
        secrets: Option<Arc<crate::policy::secret::Secrets>>,
        same_treatment: impl FnMut(IpAddr) -> bool,
    ) -> bool {
        self.core.reload(allowed, secrets, same_treatment)
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.core.unpark(ctx.pool);
        let env = PolicyEnv { conn, ctx };
        let upstream = self.upstream.as_deref_mut();
        let next = self.core.pump(ctx.now, &mut self.client, upstream, &env);
        self.carry_out(next, conn, ctx)
    }

    /// A report for the core: a login's verdict, the resolver's answer,
    /// the inspected names resolved.
    pub(crate) fn on_input(mut self, input: Input, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.core.unpark(ctx.pool);
        let next = self.core.handle(ctx.now, input, &PolicyEnv { conn, ctx });
        self.carry_out(next, conn, ctx)
    }

    /// A reload refused the target being dialled: the client hears why
    /// when it has not been answered yet, else the session closes.
    pub(crate) fn on_revoke(mut self, denial: Denial, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.core.unpark(ctx.pool);
        let next = self.core.revoke(ctx.now, denial, &PolicyEnv { conn, ctx });
        match next {
            Some(next) => self.carry_out(next, conn, ctx),
            None => {
                self.core.park(ctx.pool);
                State::Done(CloseReason::PolicyReload)
            }
        }
    }

    /// The session's timer fired: the core says what ran out.
    pub(crate) fn on_timeout(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.core.unpark(ctx.pool);
        self.armed = false;
        let env = PolicyEnv { conn, ctx };
        let upstream = self.upstream.as_deref_mut();
        let next = self
            .core
            .handle_timeout(ctx.now, &mut self.client, upstream, &env);
        self.carry_out(next, conn, ctx)
    }

    /// Carries out what the core asks, in order, accounts for what the
    /// call moved, then moves on as `next` says.
    fn carry_out(mut self, mut next: Next, conn: &mut Conn, ctx: &mut Ctx) -> State {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Identified {
                    spoke,
                    user,
                    rejected,
                } => {
                    if rejected {
                        ctx.stats.login_rejected();
                    }
                    conn.log.protocol = Some(spoke.into());
                    conn.log.user = user;
                }
                Action::Target(target) => {
                    // A new target (a forward proxy's next host, a switched
                    // tunnel's name): what was recorded for the last one
                    // (its address, its rule) is not this one's.
                    conn.log.target = Some(target);
                    conn.log.dialled = None;
                    conn.log.decision = Decision::Undecided;
                }
                Action::Verify(job) => ctx.verify(*job),
                Action::Establish(establish::Action::Resolve(name)) => ctx.resolve(name),
                Action::Establish(establish::Action::AwaitPins) => {
                    if let Some(target) = &conn.log.target {
                        log::debug!(
                            "conn={} {target}: waiting for the inspected names' addresses",
                            conn.id
                        );
                    }
                    ctx.await_pins();
                }
                Action::Establish(establish::Action::Admitted {
                    rule,
                    audit_reasons,
                }) => {
                    ctx.stats.allowed();
                    if let Some(target) = &conn.log.target {
                        log::debug!("conn={} allow {target} by rule {rule}", conn.id);
                    }
                    // Audit mode let through what enforcement would refuse: say so.
                    let decision = match audit_reasons.is_empty() {
                        false => Decision::would_deny(rule, &audit_reasons),
                        true => Decision::Allowed(rule),
                    };
                    conn.decide(decision, ctx);
                }
                Action::Switched { why } => {
                    log::info!("conn={} {why}", conn.id);
                    // The first upstream closes here, before the next dial.
                    self.upstream = None;
                }
                Action::Note(note) => log::info!("conn={} {note}", conn.id),
                Action::Refusing(refusing) => {
                    // The core answers the client; the upstream closes now.
                    self.upstream = None;
                    connect::refusing(refusing, conn, ctx);
                }
                Action::CloseUpstream => self.upstream = None,
                Action::Relayed { up, down } => {
                    conn.count(Side::Client, up, ctx);
                    conn.count(Side::Upstream, down, ctx);
                }
                Action::Request(record) => request(*record, conn, ctx),
                Action::Failed { why, first } => match first {
                    true => {
                        conn.log.error.get_or_insert(why.into());
                    }
                    false => conn.log.error = Some(why.into()),
                },
                Action::Certify(name) => {
                    let configs = certify(&name, conn, ctx);
                    let env = PolicyEnv { conn, ctx };
                    next = self.core.handle(ctx.now, Input::Certified(configs), &env);
                }
                Action::Trust => {
                    let trust = ctx
                        .tls
                        .client_config()
                        .map_err(|e| format!("TLS to the upstream: {e}"));
                    let env = PolicyEnv { conn, ctx };
                    next = self.core.handle(ctx.now, Input::Trusted(trust), &env);
                }
                Action::Establish(establish::Action::Dial(addr, ip)) => {
                    // A failed connect's socket closes before the next one.
                    self.upstream = None;
                    match self.dial(addr, conn, ctx) {
                        Ok(upstream) => {
                            self.upstream = Some(Box::new(upstream));
                            conn.log.dialled = Some(ip);
                        }
                        Err(e) => {
                            log::debug!("conn={} connect {addr}: {e}", conn.id);
                            let env = PolicyEnv { conn, ctx };
                            next = self.core.handle(ctx.now, Input::ConnectFailed(e), &env);
                        }
                    }
                }
            }
        }
        for ep in std::iter::once(&mut self.client).chain(self.upstream.as_deref_mut()) {
            if ep.take_offloaded() {
                ctx.stats.tls_offloaded();
            }
        }
        let (up, down) = self.core.take_relayed();
        conn.count(Side::Client, up, ctx);
        conn.count(Side::Upstream, down, ctx);
        records(&mut self.core, conn, ctx);
        if self.core.inspecting() && matches!(next, Next::Working | Next::Again) {
            // Armed on the buffers as the call left them, before they park.
            self.rearm(conn);
        }
        // The pool goes back to the shell after every call, whatever next.
        self.core.park(ctx.pool);
        match next {
            Next::Working | Next::Again => {
                if matches!(next, Next::Again) {
                    ctx.again();
                }
                if !self.core.inspecting() {
                    self.armed = false;
                }
                State::Machine(self)
            }
            Next::Closed(reason) => State::Done(reason),
            Next::Reset(reason) => {
                self.client.abort_on_close();
                State::Done(reason)
            }
            Next::Associate { port } => associate::start(self.client, port, conn, ctx),
            Next::Relay(opened) => match self.upstream {
                Some(upstream) => connect::relay(*opened, self.client, *upstream, ctx),
                None => {
                    // Only a connect that completed (and its parent's answer) opens.
                    debug_assert!(false, "open without an upstream");
                    State::Done(CloseReason::ConnectFailed)
                }
            },
            Next::Upgraded(parts) => match self.upstream {
                Some(upstream) => upgrade(self.client, *upstream, *parts, conn, ctx),
                None => {
                    debug_assert!(false, "upgraded without an upstream");
                    State::Done(CloseReason::UpstreamGone)
                }
            },
        }
    }

    /// Keeps the session's one deadline on an inspected core's next
    /// timeout. A due time that moved later (new traffic) keeps the earlier
    /// deadline: the timer fires early, and `on_timeout` sets it again for
    /// what is left, which saves moving the timer on every byte.
    fn rearm(&mut self, conn: &mut Conn) {
        let due = self.core.poll_timeout(&self.client);
        let keep =
            self.armed && matches!((conn.deadline, due), (Some(set), Some(due)) if set <= due);
        if !keep {
            conn.deadline = due;
        }
        self.armed = true;
    }

    /// Starts a non-blocking connect to `addr`, registered with the reactor
    /// under the upstream token the session's last upstream socket did not
    /// use (the one it replaces may have raised an event in this poll
    /// batch, still to be dispatched: a reset must not read as this connect
    /// failing, nor a FIN as this upstream finishing).
    fn dial(&self, addr: SocketAddr, conn: &mut Conn, ctx: &mut Ctx) -> io::Result<Endpoint> {
        let stream = mio::net::TcpStream::connect(addr)?;
        let mut upstream = conn.register_upstream(&ctx.tokens, |token| {
            Endpoint::dialled(Stream::Tcp(stream), token, ctx.registry)
        })?;
        // Both sockets of the coming tunnel: a peer that vanished without
        // a FIN is found.
        let keepalive = ctx.settings.timeouts.keepalive;
        upstream.set_keepalive(keepalive);
        self.client.set_keepalive(keepalive);
        // A connect completes (or fails) with a writable edge.
        upstream.want(false, true);
        Ok(upstream)
    }
}

/// The configs a terminated tunnel needs once its ClientHello named `name`:
/// the leaf for it (minted, or from the cache) and the upstream's trust.
fn certify(
    name: &Host,
    conn: &Conn,
    ctx: &mut Ctx,
) -> Result<(Arc<ServerConfig>, Arc<ClientConfig>), String> {
    let server = ctx.tls.server_config(name).map_err(|e| {
        let target = conn.log.target.as_ref().map(ToString::to_string);
        let why = format!(
            "could not mint a certificate for {}: {e}",
            target.as_deref().unwrap_or("the target")
        );
        log::warn!("conn={} {why}", conn.id);
        why
    })?;
    let client = ctx
        .tls
        .client_config()
        .map_err(|e| format!("TLS to the upstream: {e}"))?;
    Ok((server, client))
}

/// Counts and logs each finished request.
fn records(core: &mut SessionCore, conn: &mut Conn, ctx: &Ctx) {
    for record in core.take_records() {
        request(record, conn, ctx);
    }
}

/// Counts and logs a finished request.
fn request(record: Record, conn: &mut Conn, ctx: &Ctx) {
    if let Verdict::Refused { cause, reason, .. } = &record.decision {
        if cause == "secret-not-allowed" {
            // The reason names the secret and where it was bound, never
            // its value.
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
        Verdict::Allowed(_) | Verdict::WouldDeny(_) | Verdict::Failed { .. }
    ));
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
