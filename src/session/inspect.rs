//! Inspect: HTTP/1.1 relayed message by message, for a tunnel whose rule
//! inspects and for the forward proxy (`GET http://...`).
//!
//! The HTTP logic is the sans-IO [`Exchange`] machine; this state only pumps
//! bytes between the two channels (plain sockets, or TLS over them) and the
//! machine's four queues, keeps the response and idle timers, and turns the
//! machine's verdicts into session states: a 101 hands every buffered byte
//! to a raw [`Passthrough`], a request for another host (forward proxy)
//! reconnects, and an ended conversation flushes what the client is owed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::Channel;
use super::closing::Closing;
use super::conn::Conn;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::passthrough::{Carrier, Passthrough, Preload};
use super::refusal::Dialect;
use super::state::State;
use crate::buffer::ByteBuf;
use crate::io::Io;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{RequestRules, Target};
use crate::protocol::http1::exchange::{
    ClientAction, Decision, End, Exchange, ExchangeConfig, Mode, SameLogin, Status, UpstreamAction,
};

/// IO rounds per call before yielding to other sessions.
const ROUNDS_PER_CALL: usize = 32;

pub(crate) struct Inspect {
    client: Channel,
    upstream: Channel,
    ex: Exchange,
    /// Client bytes not yet handed on, and bytes for the upstream.
    cin: ByteBuf,
    uout: ByteBuf,
    /// Upstream bytes not yet handed on, and bytes for the client.
    uin: ByteBuf,
    cout: ByteBuf,
    client_eof: bool,
    upstream_eof: bool,
    /// The upstream reset or failed: nothing more is read from or written to it.
    upstream_gone: bool,
    idle: Option<Duration>,
    last_active: Instant,
    /// The response clock: the machine's wait id and when that wait began.
    waiting: Option<(u64, Instant)>,
    /// The head clock: the machine's partial head and when it was first
    /// seen (a head must be whole within the handshake timeout).
    head_wait: Option<(u64, Instant)>,
    /// The head clock fired: the conversation ends with a `408`.
    head_timed_out: bool,
    /// The upstream's TLS handshake must finish by then (the connect
    /// timeout: it is part of reaching the upstream).
    upstream_tls_until: Option<Instant>,
    /// What the session's deadline is set for now, and whether it counts
    /// the half-close timeout.
    armed: (Option<Wait>, bool),
    /// A terminated client must finish its TLS handshake by then: one that
    /// stops after its ClientHello is not held for ever.
    handshake_until: Option<Instant>,
    /// The client's first bytes are still to be looked at (a plaintext
    /// tunnel: a TLS ClientHello there means the rule should terminate).
    first_bytes: bool,
    /// Why the client's TLS failed (it rejected our leaf, say): the access
    /// line's reason, where "client-gone" alone would hide an untrusted CA.
    client_tls: Option<String>,
    /// Leading bytes of `cout` that are the proxy's own success reply, not
    /// relayed payload: written like it, never counted as it.
    own: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    ClientHandshake,
    UpstreamHandshake,
    Response(u64),
    Head(u64),
    Idle,
}

/// Why the pump stopped short of another round.
enum Stop {
    /// The client is gone.
    ClientGone,
    /// A 101 went out: raw passthrough from here on.
    Upgraded,
    /// The conversation is over.
    Closed(Option<Vec<u8>>, End),
    /// The forward proxy needs another upstream (over TLS or not) for the
    /// request at the front.
    Switch(Target, bool),
    /// The client does not speak what this rule inspects: these bytes (a
    /// TLS alert), then close, for this reason.
    WrongProtocol(Vec<u8>, &'static str),
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
        ctx: &mut Ctx,
    ) -> Inspect {
        let plain = client.is_plain();
        let mut s = Inspect::new(
            client,
            upstream,
            Mode::Tunnel {
                target,
                tls: !plain,
            },
            rules,
            early,
            idle,
            ctx,
        );
        s.cout.extend(to_client);
        s.own = to_client.len();
        s.first_bytes = plain;
        if !plain {
            s.handshake_until = Some(ctx.now + ctx.settings.timeouts.handshake);
        }
        s
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
        ctx: &mut Ctx,
    ) -> Inspect {
        let tls = !upstream.is_plain();
        let mode = Mode::Forward {
            upstream: target,
            tls,
        };
        let client = Channel::Plain(client);
        let mut s = Inspect::new(client, upstream, mode, rules, early, idle, ctx);
        s.ex.set_login(login);
        s
    }

    /// A raw tunnel's vetted first request named `host`: every request
    /// must name it ([`crate::protocol::http1::exchange::ExchangeConfig::vetted_host`]).
    pub(crate) fn vetted_host(mut self, host: Target) -> Inspect {
        self.ex.set_vetted_host(Some(host));
        self
    }

    fn new(
        client: Channel,
        upstream: Channel,
        mode: Mode,
        rules: Option<Arc<RequestRules>>,
        early: &[u8],
        idle: Option<Duration>,
        ctx: &mut Ctx,
    ) -> Inspect {
        let size = buffer_size(ctx);
        let mut take = || ctx.pool.take_at_least(size);
        let mut cin = take();
        cin.extend(early);
        let config = ExchangeConfig {
            rules,
            secrets: ctx.policy.secrets().cloned(),
            max_head_bytes: ctx.settings.limits.max_head_bytes,
            ..ExchangeConfig::new(mode)
        };
        let upstream_tls_until =
            (!upstream.is_plain()).then(|| ctx.now + ctx.settings.timeouts.connect);
        Inspect {
            client,
            upstream,
            ex: Exchange::new(config),
            cin,
            uout: take(),
            uin: take(),
            cout: take(),
            client_eof: false,
            upstream_eof: false,
            upstream_gone: false,
            idle,
            last_active: ctx.now,
            waiting: None,
            head_wait: None,
            head_timed_out: false,
            upstream_tls_until,
            armed: (None, false),
            handshake_until: None,
            first_bytes: false,
            client_tls: None,
            own: 0,
        }
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => self.client.endpoint(),
            Side::Upstream => self.upstream.endpoint(),
        }
    }

    /// What the session waits for: a response (its clock runs) or the
    /// client's next request.
    pub(crate) fn stage(&self) -> &'static str {
        match (
            self.waiting,
            self.client.is_plain(),
            self.upstream.is_plain(),
        ) {
            (Some(_), ..) => "awaiting-response",
            (None, true, true) => "http",
            (None, ..) if self.client.is_handshaking() => "tls-handshake",
            (None, ..) => "https",
        }
    }

    /// New request rules after a policy reload (`None`: every request allowed).
    pub(crate) fn set_rules(&mut self, rules: Option<Arc<RequestRules>>) {
        self.ex.set_rules(rules);
    }

    /// The secrets of a reloaded policy.
    pub(crate) fn set_secrets(&mut self, secrets: Option<Arc<crate::policy::secret::Secrets>>) {
        self.ex.set_secrets(secrets);
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.unpark(ctx);
        let stop = self.pump(conn, ctx);
        self.records(conn, ctx);
        match stop {
            Ok(()) => {}
            Err(Stop::ClientGone) => {
                if let Some(why) = self.client_tls.take() {
                    conn.log.error.get_or_insert(why.into());
                }
                return State::Done(CloseReason::ClientGone);
            }
            Err(Stop::Upgraded) => return self.upgrade(conn, ctx),
            Err(Stop::Closed(answer, end)) => return self.close(answer, end, conn, ctx),
            Err(Stop::WrongProtocol(bytes, why)) => {
                log::info!("conn={} {why}", conn.id);
                let reason = CloseReason::BadRequest;
                let Ok(client) = self.client.into_plain() else {
                    // Only a plaintext client is sniffed.
                    debug_assert!(false, "a TLS client sniffed for TLS");
                    return State::Done(reason);
                };
                return super::closing::answer(&bytes, reason, why.into(), client, conn, ctx);
            }
            Err(Stop::Switch(target, tls)) => {
                // The old upstream closes here; the client goes on to the new one.
                let this = *self;
                let early = this.cin.data().to_vec();
                let Ok(client) = this.client.into_plain() else {
                    // The forward proxy's client is plaintext.
                    debug_assert!(false, "a TLS client switching upstreams");
                    return State::Done(CloseReason::BadRequest);
                };
                let dialect = if tls {
                    Dialect::ForwardTls
                } else {
                    Dialect::Forward
                };
                // Later requests are held to the same login on the new upstream.
                let login = this.ex.login().cloned();
                return super::connect::start(client, target, dialect, early, login, conn, ctx);
            }
        }
        self.rearm(conn, ctx);
        self.park(ctx);
        State::Inspect(self)
    }

    /// Moves bytes and messages both ways until nothing more can move.
    fn pump(&mut self, conn: &mut Conn, ctx: &mut Ctx) -> Result<(), Stop> {
        let mut active = false;
        for round in 0.. {
            if round == ROUNDS_PER_CALL {
                ctx.again();
                break;
            }
            let mut moved = false;
            // TLS handshakes and records owed below the plaintext.
            moved |= self.client.progress().map_err(|e| self.client_lost(&e))?;
            if !self.upstream_gone {
                match self.upstream.progress() {
                    Ok(m) => moved |= m,
                    Err(e) => moved |= self.upstream_lost(&e),
                }
            }
            moved |= self.requests()?;
            moved |= self.send_upstream(conn, ctx);
            moved |= self.read_upstream();
            moved |= self.responses()?;
            let (written, payload) = flush(&mut self.client, &mut self.cout, &mut self.own)
                .map_err(|_| Stop::ClientGone)?;
            conn.count(Side::Upstream, payload, ctx);
            moved |= written > 0;
            match self.ex.status() {
                Status::Open => {}
                Status::Upgraded => return Err(Stop::Upgraded),
                Status::Closed { answer, end } => return Err(Stop::Closed(answer, end)),
            }
            if !moved {
                break;
            }
            active = true;
            self.last_active = ctx.now;
        }
        // As in a tunnel, an error event ends a side only once nothing more
        // moves: what it sent before failing is read and relayed first.
        if !active && self.client.failed() {
            return Err(Stop::ClientGone);
        }
        if !active && self.upstream.failed() && !self.upstream_gone {
            self.upstream_gone = true;
            self.upstream_eof = true;
            self.ex.upstream_eof();
            if let Status::Closed { answer, end } = self.drain_responses()? {
                return Err(Stop::Closed(answer, end));
            }
        }
        self.note_wait(ctx.now);
        Ok(())
    }

    /// Reads the client and hands its bytes to the machine.
    fn requests(&mut self) -> Result<bool, Stop> {
        let mut moved = false;
        if !self.client_eof {
            match fill(&mut self.client, &mut self.cin) {
                Io::Progress(_) => moved = true,
                Io::Eof => {
                    self.client_eof = true;
                    self.ex.client_eof();
                    moved = true;
                }
                Io::WouldBlock => {}
                Io::PeerGone(e) => return Err(self.client_lost(&e)),
            }
        }
        if self.first_bytes && !self.cin.is_empty() {
            self.first_bytes = false;
            // No HTTP request starts with 0x16; a TLS handshake record does.
            if self.cin.data()[0] == 0x16 {
                let why = crate::tls::Sniff::Tls
                    .mismatch(false)
                    .unwrap_or("TLS on a plaintext HTTP rule");
                let alert = crate::tls::alert_record(rustls::AlertDescription::HandshakeFailure);
                return Err(Stop::WrongProtocol(alert.to_vec(), why));
            }
        }
        loop {
            match self.ex.on_client(self.cin.data(), self.uout.room()) {
                ClientAction::Forward(n) => {
                    self.uout.extend(&self.cin.data()[..n]);
                    self.cin.consume(n);
                }
                ClientAction::Send { consumed, bytes } => {
                    self.cin.consume(consumed);
                    self.uout.extend(&bytes);
                }
                ClientAction::Discard(n) => self.cin.consume(n),
                ClientAction::Switch { target, tls } => {
                    if self.uout.is_empty() && self.cout.is_empty() {
                        return Err(Stop::Switch(target, tls));
                    }
                    return Ok(moved);
                }
                ClientAction::Wait | ClientAction::Stopped => return Ok(moved),
            }
            moved = true;
        }
    }

    /// Writes what the machine sent the upstream's way.
    fn send_upstream(&mut self, conn: &mut Conn, ctx: &Ctx) -> bool {
        if self.upstream_gone {
            return false;
        }
        match flush(&mut self.upstream, &mut self.uout, &mut 0) {
            Ok((written, payload)) => {
                conn.count(Side::Client, payload, ctx);
                written > 0
            }
            Err(e) => self.upstream_lost(&e),
        }
    }

    /// Reads the upstream.
    fn read_upstream(&mut self) -> bool {
        if self.upstream_eof {
            return false;
        }
        match fill(&mut self.upstream, &mut self.uin) {
            Io::Progress(_) => true,
            Io::Eof => {
                self.upstream_eof = true;
                self.ex.upstream_eof();
                true
            }
            Io::WouldBlock => false,
            Io::PeerGone(e) => self.upstream_lost(&e),
        }
    }

    /// The client reset or failed its TLS: remembers a TLS failure's reason.
    fn client_lost(&mut self, e: &std::io::Error) -> Stop {
        if let Some(f) = crate::tls::TlsFailure::of(e) {
            self.client_tls = Some(format!("client TLS: {}", f.reason()));
        }
        Stop::ClientGone
    }

    /// The upstream reset, failed its TLS, or broke: what it sent was
    /// relayed already; the machine hears it as an EOF, so a request still
    /// waiting gets its 502.
    fn upstream_lost(&mut self, e: &std::io::Error) -> bool {
        log::debug!("upstream lost: {e}");
        self.upstream_gone = true;
        if !self.upstream_eof {
            self.upstream_eof = true;
            match crate::tls::TlsFailure::of(e) {
                Some(f) => self.ex.upstream_failed("upstream-tls", f.reason()),
                None => self.ex.upstream_eof(),
            }
        }
        true
    }

    /// Hands upstream bytes (and the proxy's own answers) to the machine.
    fn responses(&mut self) -> Result<bool, Stop> {
        let mut moved = false;
        loop {
            match self.ex.on_upstream(self.uin.data(), self.cout.room()) {
                UpstreamAction::Forward(n) => {
                    self.cout.extend(&self.uin.data()[..n]);
                    self.uin.consume(n);
                }
                UpstreamAction::Send { consumed, bytes } => {
                    self.uin.consume(consumed);
                    self.cout.extend(&bytes);
                }
                UpstreamAction::Answer(bytes) => {
                    self.cout.extend(&bytes);
                }
                UpstreamAction::Upgrade => return Err(Stop::Upgraded),
                UpstreamAction::Wait | UpstreamAction::Close => return Ok(moved),
            }
            moved = true;
        }
    }

    /// After an upstream loss: let the machine say what the client is owed.
    fn drain_responses(&mut self) -> Result<Status, Stop> {
        self.responses()?;
        Ok(self.ex.status())
    }

    /// Counts and logs each finished request.
    fn records(&mut self, conn: &mut Conn, ctx: &Ctx) {
        for record in self.ex.take_records() {
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

    /// The conversation is over: flush what the client is owed, then close.
    fn close(
        self: Box<Self>,
        answer: Option<Vec<u8>>,
        end: End,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        let reason = match &end {
            End::Done if self.head_timed_out => {
                conn.log.error =
                    Some("the client did not send a whole request head in time".into());
                CloseReason::HandshakeTimeout
            }
            End::Done => CloseReason::Done,
            End::UpstreamClosed | End::BadUpstream(_) => CloseReason::UpstreamGone,
            End::BadRequest(_) => CloseReason::BadRequest,
            End::ResponseTimeout => CloseReason::ResponseTimeout,
        };
        self.close_as(answer, end, reason, conn, ctx)
    }

    /// [`Inspect::close`], for `reason`.
    fn close_as(
        mut self: Box<Self>,
        answer: Option<Vec<u8>>,
        end: End,
        reason: CloseReason,
        conn: &mut Conn,
        ctx: &mut Ctx,
    ) -> State {
        if let Some(answer) = answer {
            self.owe(&answer, ctx);
        }
        match &end {
            End::BadUpstream(why) | End::BadRequest(why) => {
                log::info!("conn={} {why}", conn.id);
                conn.log.error = Some(why.as_str().into());
            }
            End::UpstreamClosed => {
                conn.log.error =
                    Some("the upstream closed before its response was complete".into());
            }
            End::ResponseTimeout => {
                conn.log.error = Some("the upstream did not answer in time".into());
            }
            End::Done => {}
        }
        // A response cut short must not look complete to the client: after
        // what it is owed, it gets a reset, not a FIN.
        let cut_short = matches!(end, End::UpstreamClosed) && !self.cout_is_answer();
        let this = *self;
        let owed = (!this.cout.is_empty()).then_some(Carrier::Buf(this.cout));
        // The upstream's socket closes here; the client's goes on to Closing.
        if cut_short {
            State::Closing(Closing::abort(this.client, Side::Client, owed, reason))
        } else {
            State::Closing(Closing::to_client(this.client, owed, reason))
        }
    }

    /// Whether the conversation ended with an answer of the proxy's own (a
    /// 502 queued whole), rather than a response cut off midway.
    fn cout_is_answer(&self) -> bool {
        matches!(
            self.ex.status(),
            Status::Closed {
                answer: Some(_),
                ..
            }
        )
    }

    /// The 101 is out: every buffered byte goes on raw, both ways.
    fn upgrade(self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let this = *self;
        ctx.stats.upgraded();
        conn.log.upgraded = true;
        log::debug!("conn={} upgraded: raw passthrough from here", conn.id);
        let to_client = join(this.cout, this.uin, ctx);
        let to_upstream = join(this.uout, this.cin, ctx);
        let preload = Preload {
            to_client,
            own: 0,
            to_upstream,
            // An EOF already read raises no new edge: the tunnel must know of it.
            eof: (this.client_eof, this.upstream_eof),
        };
        State::Passthrough(Passthrough::new(
            this.client,
            this.upstream,
            preload,
            this.idle,
            ctx,
        ))
    }

    /// Follows the machine's response and head clocks: a new wait restarts
    /// its clock.
    fn note_wait(&mut self, now: Instant) {
        let follow = |id: Option<u64>, clock: Option<(u64, Instant)>| match (id, clock) {
            (Some(id), Some((w, since))) if w == id => Some((w, since)),
            (Some(id), _) => Some((id, now)),
            (None, _) => None,
        };
        self.waiting = follow(self.ex.awaiting_response(), self.waiting);
        self.head_wait = follow(self.ex.awaiting_head(), self.head_wait);
    }

    /// The client has finished sending: its EOF was read, or its FIN was
    /// reported with bytes ahead of it still unread. As in a tunnel, the
    /// session may then sit silent for no longer than the half-close timeout.
    fn half_closed(&self) -> bool {
        self.client_eof || self.client.peer_finished()
    }

    /// When a half-closed session that stays silent is closed.
    fn half_close_due(&self, ctx: &Ctx) -> Option<Instant> {
        self.half_closed()
            .then(|| self.last_active + ctx.settings.timeouts.half_close)
    }

    /// Keeps the one session deadline on the earliest of what the session
    /// waits for: the client's TLS handshake, the upstream's (the connect
    /// timeout), a response head (504 when it does not come), the rest of
    /// a request head (408), or, if set and no response is awaited,
    /// idleness; once the client has finished, no later than the
    /// half-close timeout.
    fn rearm(&mut self, conn: &mut Conn, ctx: &Ctx) {
        if !self.client.is_handshaking() {
            self.handshake_until = None;
        }
        if self.upstream_gone || !self.upstream.is_handshaking() {
            self.upstream_tls_until = None;
        }
        let t = &ctx.settings.timeouts;
        let idle = match (self.waiting, self.idle) {
            (None, Some(idle)) => Some((Wait::Idle, self.last_active + idle)),
            _ => None,
        };
        let want = [
            self.handshake_until.map(|d| (Wait::ClientHandshake, d)),
            self.upstream_tls_until
                .map(|d| (Wait::UpstreamHandshake, d)),
            self.waiting
                .map(|(id, since)| (Wait::Response(id), since + t.response)),
            self.head_wait
                .map(|(id, since)| (Wait::Head(id), since + t.handshake)),
            idle,
        ]
        .into_iter()
        .flatten()
        .min_by_key(|&(_, deadline)| deadline);
        let armed = (want.map(|(w, _)| w), self.half_closed());
        if armed == self.armed {
            return;
        }
        self.armed = armed;
        // Set for the time left: a deadline that moved later since (new
        // traffic) only makes the timer fire early, and `on_timer` then sets
        // it again for what is left.
        let due = want.map(|(_, deadline)| deadline);
        conn.deadline = match (due, self.half_close_due(ctx)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    pub(crate) fn on_timer(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.unpark(ctx);
        self.armed = (None, false);
        if let Some(until) = self.handshake_until {
            if ctx.now >= until && self.client.is_handshaking() {
                log::info!(
                    "conn={} the client did not complete its TLS handshake in time",
                    conn.id
                );
                return State::Done(CloseReason::HandshakeTimeout);
            }
        }
        if let Some(until) = self.upstream_tls_until {
            if ctx.now >= until && self.upstream.is_handshaking() && !self.upstream_gone {
                // The connect timeout: a server that accepts and never
                // answers the ClientHello (a plaintext one, a wrong port).
                self.upstream_tls_until = None;
                if let Some((answer, end)) = self.upstream_tls_timed_out(conn, ctx) {
                    return self.close(answer, end, conn, ctx);
                }
                // No request is due yet: the next one is answered 502.
                return self.drive(conn, ctx);
            }
        }
        if let Some((_, since)) = self.head_wait {
            if ctx.now >= since + ctx.settings.timeouts.handshake && self.ex.head_timeout() {
                log::info!(
                    "conn={} the client did not send a whole request head in time",
                    conn.id
                );
                self.head_wait = None;
                self.head_timed_out = true;
                // The 408 goes out in order, then the conversation ends.
                return self.drive(conn, ctx);
            }
        }
        if self.half_close_due(ctx).is_some_and(|due| ctx.now >= due) {
            log::info!(
                "conn={} the client finished and nothing moved for the half-close timeout",
                conn.id
            );
            // A response still awaited is answered (504) before the close.
            if self.ex.response_timeout() {
                self.records(conn, ctx);
                if let Status::Closed { answer, end } = self.ex.status() {
                    let reason = CloseReason::HalfCloseTimeout;
                    return self.close_as(answer, end, reason, conn, ctx);
                }
            }
            return State::Done(CloseReason::HalfCloseTimeout);
        }
        if let Some((_, since)) = self.waiting {
            let due = ctx.now >= since + ctx.settings.timeouts.response;
            if due && self.upstream.is_handshaking() {
                // Not a slow answer: the upstream never finished its TLS
                // handshake (a plaintext server, a wrong port).
                if let Some((answer, end)) = self.upstream_tls_timed_out(conn, ctx) {
                    return self.close(answer, end, conn, ctx);
                }
            }
            if due && self.ex.response_timeout() {
                log::info!("conn={} the upstream did not answer in time", conn.id);
                self.records(conn, ctx);
                if let Status::Closed { answer, end } = self.ex.status() {
                    return self.close(answer, end, conn, ctx);
                }
            }
        } else if let Some(idle) = self.idle {
            if ctx.now >= self.last_active + idle {
                return State::Done(CloseReason::IdleTimeout);
            }
        }
        self.rearm(conn, ctx);
        self.park(ctx);
        State::Inspect(self)
    }

    /// The upstream's TLS handshake ran out of time: the upstream is gone,
    /// the request it owes an answer gets a `502`; what the client is owed
    /// if that ends the conversation.
    fn upstream_tls_timed_out(
        &mut self,
        conn: &mut Conn,
        ctx: &Ctx,
    ) -> Option<(Option<Vec<u8>>, End)> {
        let why = "the TLS handshake with the upstream did not complete in time";
        log::info!("conn={} {why}", conn.id);
        self.upstream_gone = true;
        self.upstream_eof = true;
        self.ex.upstream_failed("upstream-tls", why);
        let _ = self.responses();
        self.records(conn, ctx);
        match self.ex.status() {
            Status::Closed { answer, end } => Some((answer, end)),
            _ => None,
        }
    }

    /// Queues a whole answer for the client, growing the buffer if it must:
    /// half an answer would corrupt the stream.
    fn owe(&mut self, answer: &[u8], ctx: &mut Ctx) {
        if self.cout.room() < answer.len() {
            let mut bigger = ctx.pool.take_at_least(self.cout.len() + answer.len());
            bigger.extend(self.cout.data());
            self.cout = bigger;
        }
        self.cout.extend(answer);
    }

    /// Gives empty buffers back to the pool between calls, so an idle
    /// keep-alive session holds none (an empty `ByteBuf` allocates nothing).
    fn park(&mut self, ctx: &mut Ctx) {
        for buf in [&mut self.cin, &mut self.uout, &mut self.uin, &mut self.cout] {
            // Only pool-sized buffers: others would be freed and allocated
            // again on every call.
            if buf.is_empty() && buf.capacity() == ctx.pool.size() {
                ctx.pool
                    .give(std::mem::replace(buf, ByteBuf::with_capacity(0)));
            }
        }
    }

    /// Takes buffers again for the parked slots.
    fn unpark(&mut self, ctx: &mut Ctx) {
        let size = buffer_size(ctx);
        for buf in [&mut self.cin, &mut self.uout, &mut self.uin, &mut self.cout] {
            if buf.capacity() == 0 {
                *buf = ctx.pool.take_at_least(size);
            }
        }
    }
}

/// Reads `ch` into `buf` until it is full or the channel would block.
fn fill(ch: &mut Channel, buf: &mut ByteBuf) -> Io {
    let mut got = 0;
    ch.want_read(buf.room() > 0);
    while ch.can_read() && buf.room() > 0 {
        match ch.read(buf.space()) {
            Io::Progress(n) => {
                buf.commit(n);
                got += n;
            }
            Io::WouldBlock => break,
            other => return other,
        }
    }
    if got > 0 {
        Io::Progress(got)
    } else {
        Io::WouldBlock
    }
}

/// Writes `buf` to `ch` until it is empty or the channel would block.
/// Returns the bytes written, and how many of them are payload: the first
/// `own` bytes are the proxy's own and do not count.
fn flush(
    ch: &mut Channel,
    buf: &mut ByteBuf,
    own: &mut usize,
) -> Result<(usize, usize), std::io::Error> {
    let (mut written, mut payload) = (0, 0);
    ch.want_write(!buf.is_empty());
    while ch.can_write() && !buf.is_empty() {
        match ch.write(buf.data()) {
            Io::Progress(n) => {
                buf.consume(n);
                let ours = n.min(*own);
                *own -= ours;
                written += n;
                payload += n - ours;
            }
            Io::WouldBlock => break,
            Io::Eof => return Err(std::io::ErrorKind::BrokenPipe.into()),
            Io::PeerGone(e) => return Err(e),
        }
    }
    Ok((written, payload))
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
