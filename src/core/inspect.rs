//! The inspected session's core: HTTP/1.1 relayed message by message
//! between two links (plaintext, or TLS the proxy terminates), with every
//! clock the conversation keeps.
//!
//! The HTTP logic is the sans-IO [`Exchange`]; this machine pumps bytes
//! between the two sides' [`Link`]s and the exchange's four queues, keeps
//! the response, head, handshake, idle and half-close clocks, and says how
//! the conversation ends ([`Stop`]). It is driven the same way by the shell
//! (sockets, the reactor's clock), the simulator (memory, virtual time) and
//! the fuzz target:
//!
//! ```text
//! loop {
//!     core.pump(now, client, upstream)?           // move what can move
//!     take_records(), take_relayed()              // count and log
//!     sleep until readiness or core.poll_timeout()
//!     if the deadline passed: core.handle_timeout(now, client, upstream)?
//! }
//! ```
//!
//! A [`Stop`] ends the core: the shell takes its parts ([`InspectCore::into_parts`])
//! to build what comes next (a raw tunnel after a 101, a flush of what
//! the client is owed, a new upstream for the forward proxy).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::Link;
use super::port::Port;
use super::verdicts;
use crate::buffer::{BufPool, ByteBuf};
use crate::config::Timeouts;
use crate::io::Io;
use crate::lifecycle::CloseReason;
use crate::policy::secret::Secrets;
use crate::policy::RequestRules;
use crate::protocol::http1::exchange::{
    ClientAction, End, Exchange, ExchangeConfig, Mode, Record, SameLogin, Status, UpstreamAction,
    MAX_ANSWER_LEN, MAX_RECORDS,
};
use crate::target::Target;

/// IO rounds per call before yielding to other sessions.
const ROUNDS_PER_CALL: usize = 32;

/// What an inspected session is, before it starts.
pub(crate) struct Setup {
    /// The session's id, for log lines.
    pub(crate) id: u64,
    /// The exchange's mode, head limit, and the policy's answers
    /// ([`verdicts::judge`], [`verdicts::secrets`]).
    pub(crate) exchange: ExchangeConfig,
    /// The session's timeouts.
    pub(crate) timeouts: Timeouts,
    /// Idleness that closes the session (the rule's, or the proxy's).
    pub(crate) idle: Option<Duration>,
    /// Each queue's size (at least a head plus 1024).
    pub(crate) buffer: usize,
}

/// Why the core stopped; after any of these only [`InspectCore::into_parts`]
/// is left to call.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The client is gone; why, when its TLS failed (it rejected our leaf,
    /// say), since "client-gone" alone would hide an untrusted CA.
    ClientGone(Option<String>),
    /// A 101 went out: raw passthrough from here on.
    Upgraded,
    /// The conversation is over: `owed` to the client (its last bytes and
    /// any answer of the proxy's own), then a FIN, or a reset when `abort`
    /// (a response cut short must not look complete).
    Closed {
        /// How the exchange ended.
        end: End,
        reason: CloseReason,
        error: Option<String>,
        abort: bool,
    },
    /// The forward proxy needs another upstream (over TLS or not) for the
    /// request at the front of the client's input.
    Switch(Target, bool),
    /// The client does not speak what this rule inspects: these bytes (a
    /// TLS alert), then close, for this reason.
    WrongProtocol(Vec<u8>, &'static str),
    /// Closed at once, nothing owed (a timeout with nothing to say).
    Done(CloseReason),
}

/// What the shell gets back once the core has stopped.
pub(crate) struct Parts {
    pub(crate) client: Link,
    pub(crate) upstream: Link,
    /// Client bytes not handed on, and bytes for the upstream.
    pub(crate) cin: ByteBuf,
    pub(crate) uout: ByteBuf,
    /// Upstream bytes not handed on, and bytes for the client (with any
    /// answer the proxy owes appended, whole).
    pub(crate) uin: ByteBuf,
    pub(crate) cout: ByteBuf,
    /// Each side's EOF was read (an EOF raises no new edge: a raw tunnel
    /// after a 101 must know of it).
    pub(crate) eof: (bool, bool),
    /// The login later requests are held to (for the next upstream).
    pub(crate) login: Option<SameLogin>,
    /// The session's idle timeout (a raw tunnel after a 101 keeps it).
    pub(crate) idle: Option<Duration>,
    /// Leading bytes of `cout` that are the proxy's own success reply, not
    /// yet written: whoever writes them next does not count them as payload.
    pub(crate) own: usize,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Parts(to client {} + {}, to upstream {} + {}, eof {:?})",
            self.cout.len(),
            self.uin.len(),
            self.uout.len(),
            self.cin.len(),
            self.eof
        )
    }
}

/// The clocks of one inspected session, each for what it waits on.
#[derive(Debug)]
struct Clocks {
    timeouts: Timeouts,
    idle: Option<Duration>,
    /// When bytes last moved.
    last_active: Instant,
    /// The response clock: the exchange's wait id and when that wait began.
    waiting: Option<(u64, Instant)>,
    /// The head clock: the exchange's partial head and when it was first
    /// seen (a head must be whole within the handshake timeout).
    head_wait: Option<(u64, Instant)>,
    /// The head clock fired: the conversation ends with a `408`.
    head_timed_out: bool,
    /// The upstream's TLS handshake must finish by then (the connect
    /// timeout: it is part of reaching the upstream).
    upstream_tls_until: Option<Instant>,
    /// A terminated client must finish its TLS handshake by then: one that
    /// stops after its ClientHello is not held for ever.
    handshake_until: Option<Instant>,
}

/// How far the upstream's stream has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpstreamEnd {
    /// Read and written.
    Open,
    /// Its end was read; what is owed to it is still written.
    Ended,
    /// It reset or failed: nothing more is read from or written to it.
    Gone,
}

/// The inspected session's machine; see the module docs.
pub(crate) struct InspectCore {
    client: Link,
    upstream: Link,
    ex: Exchange,
    cin: ByteBuf,
    uout: ByteBuf,
    uin: ByteBuf,
    cout: ByteBuf,
    client_eof: bool,
    upstream_end: UpstreamEnd,
    clocks: Clocks,
    /// The client's first bytes are still to be looked at (a plaintext
    /// tunnel: a TLS ClientHello there means the rule should terminate).
    first_bytes: bool,
    client_tls: Option<String>,
    /// Leading bytes of `cout` that are the proxy's own success reply, not
    /// relayed payload: written like it, never counted as it.
    own: usize,
    /// Payload bytes written (client to upstream, upstream to client)
    /// since the shell last took them.
    relayed: (usize, usize),
    /// The last call stopped at its round limit, with more to move.
    yielded: bool,
    buffer: usize,
    /// For log lines.
    id: u64,
}

impl InspectCore {
    /// A session over `client` and `upstream`, started at `now`; `early`
    /// holds the client's bytes already read, `to_client` the proxy's own
    /// success reply still to send.
    pub(crate) fn new(
        setup: Setup,
        client: Link,
        upstream: Link,
        early: &[u8],
        to_client: &[u8],
        pool: &mut BufPool,
        now: Instant,
    ) -> InspectCore {
        let Setup {
            id,
            exchange,
            timeouts,
            idle,
            buffer,
        } = setup;
        let tunnel = matches!(exchange.mode, Mode::Tunnel { .. });
        let mut take = || pool.take_at_least(buffer);
        let mut cin = take();
        cin.extend(early);
        let mut cout = take();
        cout.extend(to_client);
        let clocks = Clocks {
            upstream_tls_until: (!upstream.is_plain()).then(|| now + timeouts.connect),
            handshake_until: (!client.is_plain()).then(|| now + timeouts.handshake),
            timeouts,
            idle,
            last_active: now,
            waiting: None,
            head_wait: None,
            head_timed_out: false,
        };
        InspectCore {
            first_bytes: tunnel && client.is_plain(),
            client,
            upstream,
            ex: Exchange::new(exchange),
            cin,
            uout: take(),
            uin: take(),
            cout,
            client_eof: false,
            upstream_end: UpstreamEnd::Open,
            clocks,
            client_tls: None,
            own: to_client.len(),
            relayed: (0, 0),
            yielded: false,
            buffer,
            id,
        }
    }

    /// A raw tunnel's vetted first request named `host`: every request
    /// must name it ([`ExchangeConfig::vetted_host`]).
    pub(crate) fn set_vetted_host(&mut self, host: Target) {
        self.ex.set_vetted_host(Some(host));
    }

    /// Holds later requests to the login the connection used.
    pub(crate) fn set_login(&mut self, login: Option<SameLogin>) {
        self.ex.set_login(login);
    }

    /// The client's EOF was read before this exchange began: the requests
    /// already read are served, and the client is not read again.
    pub(crate) fn set_client_eof(&mut self) {
        self.client_eof = true;
        self.ex.client_eof();
    }

    /// New request rules after a policy reload (`None`: every request allowed).
    pub(crate) fn set_rules(&mut self, rules: Option<Arc<RequestRules>>) {
        self.ex.set_rules(verdicts::judge(rules));
    }

    /// The secrets of a reloaded policy.
    pub(crate) fn set_secrets(&mut self, secrets: Option<Arc<Secrets>>) {
        self.ex.set_secrets(verdicts::secrets(secrets));
    }

    /// What the session waits for: a response (its clock runs), the
    /// client's TLS handshake, or the client's next request.
    pub(crate) fn stage(&self) -> &'static str {
        match (
            self.clocks.waiting,
            self.client.is_plain(),
            self.upstream.is_plain(),
        ) {
            (Some(_), ..) => "awaiting-response",
            (None, true, true) => "http",
            (None, ..) if self.client.is_handshaking() => "tls-handshake",
            (None, ..) => "https",
        }
    }

    /// Finished requests, for counting and logging.
    pub(crate) fn take_records(&mut self) -> impl Iterator<Item = Record> + '_ {
        self.ex.take_records()
    }

    /// Payload bytes written since the last call: (client to upstream,
    /// upstream to client).
    pub(crate) fn take_relayed(&mut self) -> (usize, usize) {
        std::mem::take(&mut self.relayed)
    }

    /// The last call stopped at its round limit: call again soon, after
    /// other sessions had their turn.
    pub(crate) fn yielded(&self) -> bool {
        self.yielded
    }

    /// Moves bytes and messages both ways until nothing more can move (or
    /// the round limit: see [`InspectCore::yielded`]).
    pub(crate) fn pump(
        &mut self,
        now: Instant,
        client: &mut impl Port,
        upstream: &mut impl Port,
    ) -> Result<(), Stop> {
        let result = self.pump_rounds(now, client, upstream);
        self.ended(result)
    }

    /// A stop that drops the conversation where it stands (the client
    /// gone, a clock with nothing to answer) still records each request
    /// due: the shell takes the records before it acts on the stop.
    fn ended(&mut self, result: Result<(), Stop>) -> Result<(), Stop> {
        if let Err(Stop::ClientGone(_) | Stop::Done(_)) = &result {
            self.ex.abandon();
        }
        result
    }

    fn pump_rounds(
        &mut self,
        now: Instant,
        client: &mut impl Port,
        upstream: &mut impl Port,
    ) -> Result<(), Stop> {
        let mut active = false;
        self.yielded = false;
        for round in 0.. {
            if round == ROUNDS_PER_CALL {
                self.yielded = true;
                break;
            }
            let mut moved = false;
            // TLS handshakes and records owed below the plaintext.
            moved |= self
                .client
                .progress(client)
                .map_err(|e| self.client_lost(&e))?;
            if self.upstream_end != UpstreamEnd::Gone {
                match self.upstream.progress(upstream) {
                    Ok(m) => moved |= m,
                    Err(e) => moved |= self.upstream_lost(&e, false),
                }
            }
            moved |= self.requests(client)?;
            moved |= self.send_upstream(upstream);
            moved |= self.read_upstream(upstream);
            moved |= self.responses()?;
            // Records wait: the shell takes them before more requests are
            // answered (a flood of refused requests must not drop access
            // lines), once this round is done.
            let full = self.records_full();
            moved |= self.relay_out(client)?;
            self.check_status()?;
            self.yielded = full;
            if !moved {
                break;
            }
            // What filled the records moved too: the session is not idle.
            active = true;
            self.clocks.last_active = now;
            if full {
                break;
            }
        }
        // As in a tunnel, an error event ends a side only once nothing more
        // moves: what it sent before failing is read and relayed first.
        if !active && client.failed() {
            return Err(Stop::ClientGone(self.client_tls.take()));
        }
        if !active && upstream.failed() && self.upstream_end != UpstreamEnd::Gone {
            if self.upstream_end == UpstreamEnd::Open {
                // An error (a reset) before any clean end: cut short.
                self.ex.upstream_cut();
            }
            self.upstream_end = UpstreamEnd::Gone;
            // The client side first: a request start the head gate held
            // back is looked at now that nothing more can be forwarded
            // (malformed, its 400), and the conversation ends.
            self.requests(client)?;
            self.responses()?;
            self.check_status()?;
        }
        self.note_wait(now);
        Ok(())
    }

    /// Writes what the client is owed; whether anything went.
    fn relay_out(&mut self, client: &mut impl Port) -> Result<bool, Stop> {
        let (written, payload) = flush(&mut self.client, client, &mut self.cout, &mut self.own)
            .map_err(|_| Stop::ClientGone(None))?;
        self.relayed.1 += payload;
        Ok(written > 0)
    }

    /// Records wait to be taken: the exchange is given nothing more until
    /// they are (past [`MAX_RECORDS`] it would drop the oldest).
    fn records_full(&self) -> bool {
        self.ex.queued().records >= MAX_RECORDS / 2
    }

    /// The exchange's status as a stop, if it ended.
    fn check_status(&mut self) -> Result<(), Stop> {
        match self.ex.status() {
            Status::Open => Ok(()),
            Status::Upgraded => Err(Stop::Upgraded),
            Status::Closed { answer, end } => Err(self.close(answer, end, None)),
        }
    }

    /// Reads the client and hands its bytes to the machine.
    fn requests(&mut self, port: &mut impl Port) -> Result<bool, Stop> {
        let mut moved = false;
        if !self.client_eof {
            match fill(&mut self.client, port, &mut self.cin) {
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
            if self.records_full() {
                return Ok(moved);
            }
            let (len, room) = (self.cin.len(), self.uout.room());
            let action = self.ex.on_client(self.cin.data(), room);
            debug_assert!(
                client_contract(&action, len, room),
                "{action:?} of {len}, room {room}"
            );
            match action {
                ClientAction::Forward(n) => forward(&mut self.cin, &mut self.uout, n),
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
    fn send_upstream(&mut self, port: &mut impl Port) -> bool {
        if self.upstream_end == UpstreamEnd::Gone {
            return false;
        }
        match flush(&mut self.upstream, port, &mut self.uout, &mut 0) {
            Ok((written, payload)) => {
                self.relayed.0 += payload;
                written > 0
            }
            Err(e) => self.upstream_lost(&e, false),
        }
    }

    /// Reads the upstream.
    fn read_upstream(&mut self, port: &mut impl Port) -> bool {
        if self.upstream_end != UpstreamEnd::Open {
            return false;
        }
        match fill(&mut self.upstream, port, &mut self.uin) {
            Io::Progress(_) => true,
            Io::Eof => {
                self.upstream_end = UpstreamEnd::Ended;
                if self.upstream.truncated() {
                    self.ex.upstream_cut();
                } else {
                    self.ex.upstream_eof();
                }
                true
            }
            Io::WouldBlock => false,
            Io::PeerGone(e) => self.upstream_lost(&e, true),
        }
    }

    /// The client reset or failed its TLS.
    fn client_lost(&mut self, e: &std::io::Error) -> Stop {
        if let Some(f) = crate::tls::TlsFailure::of(e) {
            self.client_tls = Some(format!("client TLS: {}", f.reason()));
        }
        Stop::ClientGone(self.client_tls.take())
    }

    /// The upstream reset, failed its TLS, or broke: what it sent was
    /// relayed already; the machine hears it as an EOF, so a request still
    /// waiting gets its 502.
    /// `reading`: the loss came from reading it (a reset), so a body that
    /// runs to the end of the connection is cut short; a write that fails
    /// may follow a clean end the reads have not reached yet.
    fn upstream_lost(&mut self, e: &std::io::Error, reading: bool) -> bool {
        log::debug!("conn={} upstream lost: {e}", self.id);
        let was_open = self.upstream_end == UpstreamEnd::Open;
        self.upstream_end = UpstreamEnd::Gone;
        if was_open {
            match crate::tls::TlsFailure::of(e) {
                Some(f) => self.ex.upstream_failed("upstream-tls", f.reason()),
                None if reading => self.ex.upstream_cut(),
                None => self.ex.upstream_eof(),
            }
        }
        true
    }

    /// Hands upstream bytes (and the proxy's own answers) to the machine.
    fn responses(&mut self) -> Result<bool, Stop> {
        let mut moved = false;
        loop {
            if self.records_full() {
                return Ok(moved);
            }
            let (len, room) = (self.uin.len(), self.cout.room());
            let action = self.ex.on_upstream(self.uin.data(), room);
            debug_assert!(
                upstream_contract(&action, len, room),
                "{action:?} of {len}, room {room}"
            );
            match action {
                UpstreamAction::Forward(n) => forward(&mut self.uin, &mut self.cout, n),
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

    /// The conversation is over: what the client is owed, and why it ends
    /// (`reason`, or the one `end` implies).
    fn close(&mut self, answer: Option<Vec<u8>>, end: End, reason: Option<CloseReason>) -> Stop {
        let reason = reason.unwrap_or(match &end {
            End::Done if self.clocks.head_timed_out => CloseReason::HandshakeTimeout,
            End::Done => CloseReason::Done,
            End::UpstreamClosed | End::BadUpstream(_) => CloseReason::UpstreamGone,
            End::BadRequest(_) => CloseReason::BadRequest,
            End::ResponseTimeout => CloseReason::ResponseTimeout,
        });
        // A response cut short must not look complete to the client: after
        // what it is owed, it gets a reset, not a FIN.
        let abort = matches!(end, End::UpstreamClosed) && answer.is_none();
        if let Some(answer) = answer {
            owe(&mut self.cout, &answer);
        }
        let error = match &end {
            End::BadUpstream(why) | End::BadRequest(why) => {
                log::info!("conn={} {why}", self.id);
                Some(why.clone())
            }
            End::UpstreamClosed => {
                Some("the upstream closed before its response was complete".into())
            }
            End::ResponseTimeout => Some("the upstream did not answer in time".into()),
            End::Done if self.clocks.head_timed_out && reason == CloseReason::HandshakeTimeout => {
                Some("the client did not send a whole request head in time".into())
            }
            End::Done => None,
        };
        Stop::Closed {
            end,
            reason,
            error,
            abort,
        }
    }

    /// Follows the machine's response and head clocks: a new wait restarts
    /// its clock.
    fn note_wait(&mut self, now: Instant) {
        let follow = |id: Option<u64>, clock: Option<(u64, Instant)>| match (id, clock) {
            (Some(id), Some((w, since))) if w == id => Some((w, since)),
            (Some(id), _) => Some((id, now)),
            (None, _) => None,
        };
        self.clocks.waiting = follow(self.ex.awaiting_response(), self.clocks.waiting);
        self.clocks.head_wait = follow(self.ex.awaiting_head(), self.clocks.head_wait);
        if !self.client.is_handshaking() {
            self.clocks.handshake_until = None;
        }
        if self.upstream_end == UpstreamEnd::Gone || !self.upstream.is_handshaking() {
            self.clocks.upstream_tls_until = None;
        }
    }

    /// The client has finished sending: its EOF was read, or its FIN was
    /// reported with bytes ahead of it still unread. As in a tunnel, the
    /// session may then sit silent for no longer than the half-close timeout.
    fn half_close_due(&self, client: &impl Port) -> Option<Instant> {
        (self.client_eof || client.peer_finished())
            .then(|| self.clocks.last_active + self.clocks.timeouts.half_close)
    }

    /// When the core next needs [`InspectCore::handle_timeout`]: the
    /// earliest of the client's TLS handshake, the upstream's (the connect
    /// timeout), a response head (504 when it does not come), the rest of a
    /// request head (408), or, if set and no response is awaited,
    /// idleness; once the client has finished, no later than the
    /// half-close timeout.
    pub(crate) fn poll_timeout(&self, client: &impl Port) -> Option<Instant> {
        let c = &self.clocks;
        let t = &c.timeouts;
        let idle = match (c.waiting, c.idle) {
            (None, Some(idle)) => Some(c.last_active + idle),
            _ => None,
        };
        [
            c.handshake_until,
            c.upstream_tls_until,
            c.waiting.map(|(_, since)| since + t.response),
            c.head_wait.map(|(_, since)| since + t.handshake),
            idle,
            self.half_close_due(client),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Acts on every clock that ran out by `now`. The shell pumps after.
    pub(crate) fn handle_timeout(&mut self, now: Instant, client: &impl Port) -> Result<(), Stop> {
        let result = self.clocks_ran_out(now, client);
        self.ended(result)
    }

    fn clocks_ran_out(&mut self, now: Instant, client: &impl Port) -> Result<(), Stop> {
        if let Some(until) = self.clocks.handshake_until {
            if now >= until && self.client.is_handshaking() {
                log::info!(
                    "conn={} the client did not complete its TLS handshake in time",
                    self.id
                );
                return Err(Stop::Done(CloseReason::HandshakeTimeout));
            }
        }
        if let Some(until) = self.clocks.upstream_tls_until {
            if now >= until
                && self.upstream.is_handshaking()
                && self.upstream_end != UpstreamEnd::Gone
            {
                // The connect timeout: a server that accepts and never
                // answers the ClientHello (a plaintext one, a wrong port).
                // A request due gets its 502; with none due, the next one.
                self.clocks.upstream_tls_until = None;
                self.upstream_tls_timed_out()?;
            }
        }
        if let Some((_, since)) = self.clocks.head_wait {
            if now >= since + self.clocks.timeouts.handshake
                && self.ex.head_timeout(self.cin.data())
            {
                log::info!(
                    "conn={} the client did not send a whole request head in time",
                    self.id
                );
                self.clocks.head_wait = None;
                self.clocks.head_timed_out = true;
                // The 408 is owed, not idleness: the idle and half-close
                // clocks below must not end the session before it goes.
                self.clocks.last_active = now;
                // The 408 goes out in order (the pump), then the
                // conversation ends. The clocks below are looked at too:
                // each that ran out by now is acted on in this one call,
                // or the timer would be due again at once (a response
                // awaited ahead of the 408 still gets its 504).
            }
        }
        if self.half_close_due(client).is_some_and(|due| now >= due) {
            self.response_stalled()?;
            log::info!(
                "conn={} the client finished and nothing moved for the half-close timeout",
                self.id
            );
            // A response still awaited is answered (504) before the close.
            if self.ex.response_timeout() {
                if let Status::Closed { answer, end } = self.ex.status() {
                    return Err(self.close(answer, end, Some(CloseReason::HalfCloseTimeout)));
                }
            }
            return Err(Stop::Done(CloseReason::HalfCloseTimeout));
        }
        if let Some((_, since)) = self.clocks.waiting {
            let due = now >= since + self.clocks.timeouts.response;
            if due && self.upstream.is_handshaking() {
                // Not a slow answer: the upstream never finished its TLS
                // handshake (a plaintext server, a wrong port).
                self.upstream_tls_timed_out()?;
            }
            if due {
                // A head the gate held back that is already malformed is
                // a 502, not a 504.
                self.response_stalled()?;
            }
            if due && self.ex.response_timeout() {
                log::info!("conn={} the upstream did not answer in time", self.id);
                self.check_status()?;
            }
        } else if let Some(idle) = self.clocks.idle {
            if now >= self.clocks.last_active + idle {
                self.response_stalled()?;
                return Err(Stop::Done(CloseReason::IdleTimeout));
            }
        }
        Ok(())
    }

    /// A clock is about to end the session while a response head is
    /// arriving: one the head gate held back that is already malformed is
    /// refused for what it is (a 502 to the client), not timed out.
    fn response_stalled(&mut self) -> Result<(), Stop> {
        if self.ex.response_stalled(self.uin.data()) {
            log::info!(
                "conn={} the upstream's response head, stalled, does not parse",
                self.id
            );
            self.check_status()?;
        }
        Ok(())
    }

    /// The upstream's TLS handshake ran out of time: the upstream is gone,
    /// the request it owes an answer gets a `502`.
    fn upstream_tls_timed_out(&mut self) -> Result<(), Stop> {
        let why = "the TLS handshake with the upstream did not complete in time";
        log::info!("conn={} {why}", self.id);
        self.upstream_end = UpstreamEnd::Gone;
        self.ex.upstream_failed("upstream-tls", why);
        let _ = self.responses();
        self.check_status()
    }

    /// The core's links and queues, once it has stopped (or to carry a
    /// session on elsewhere).
    pub(crate) fn into_parts(self) -> Parts {
        Parts {
            login: self.ex.login().cloned(),
            idle: self.clocks.idle,
            client: self.client,
            upstream: self.upstream,
            cin: self.cin,
            uout: self.uout,
            uin: self.uin,
            cout: self.cout,
            eof: (self.client_eof, self.upstream_end != UpstreamEnd::Open),
            own: self.own,
        }
    }

    /// What the exchange holds now (for bounds checks).
    pub(crate) fn queued(&self) -> crate::protocol::http1::exchange::Queued {
        self.ex.queued()
    }

    /// Fires the exchange's head timer on the client's bytes not yet
    /// taken, as the head clock does.
    #[cfg(test)]
    pub(crate) fn head_timeout(&mut self) -> bool {
        self.ex.head_timeout(self.cin.data())
    }

    /// The exchange, for tests that look inside or reconfigure it.
    #[cfg(test)]
    pub(crate) fn exchange_mut(&mut self) -> &mut Exchange {
        &mut self.ex
    }

    /// Gives the client's output queue another capacity (0: no room for
    /// anything), keeping what it holds.
    #[cfg(test)]
    pub(crate) fn resize_cout(&mut self, cap: usize) {
        let mut buf = ByteBuf::with_capacity(cap.max(self.cout.len()));
        buf.extend(self.cout.data());
        self.cout = buf;
    }

    /// Gives empty buffers back to the pool between calls, so an idle
    /// keep-alive session holds none (an empty `ByteBuf` allocates nothing).
    pub(crate) fn park(&mut self, pool: &mut BufPool) {
        for buf in [&mut self.cin, &mut self.uout, &mut self.uin, &mut self.cout] {
            if buf.is_empty() && buf.capacity() > 0 {
                // Pool-sized buffers go back to the pool; others (a head
                // limit above the buffer size, an answer's grown queue)
                // are freed: an idle session holds no queue at all.
                let spare = std::mem::replace(buf, ByteBuf::with_capacity(0));
                if spare.capacity() == pool.size() {
                    pool.give(spare);
                }
            }
        }
    }

    /// Bytes of queue the session holds now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        [&self.cin, &self.uout, &self.uin, &self.cout]
            .iter()
            .map(|b| b.capacity())
            .sum()
    }

    /// Takes buffers again for the parked slots.
    pub(crate) fn unpark(&mut self, pool: &mut BufPool) {
        for buf in [&mut self.cin, &mut self.uout, &mut self.uin, &mut self.cout] {
            if buf.capacity() == 0 {
                *buf = pool.take_at_least(self.buffer);
            }
        }
    }
}

/// The pump's contract with the exchange, for a client action on `len`
/// input bytes with `room` in the output: every action but the stopping
/// ones moves at least one byte, and none more than there is, or fits.
fn client_contract(action: &ClientAction, len: usize, room: usize) -> bool {
    match action {
        ClientAction::Forward(n) => *n > 0 && *n <= len && *n <= room,
        ClientAction::Send { consumed, bytes } => {
            *consumed > 0 && *consumed <= len && bytes.len() <= room
        }
        ClientAction::Discard(n) => *n > 0 && *n <= len,
        ClientAction::Switch { .. } | ClientAction::Wait | ClientAction::Stopped => true,
    }
}

/// [`client_contract`], for the upstream's side; an answer of the proxy's
/// own is never empty nor longer than [`MAX_ANSWER_LEN`].
fn upstream_contract(action: &UpstreamAction, len: usize, room: usize) -> bool {
    match action {
        UpstreamAction::Forward(n) => *n > 0 && *n <= len && *n <= room,
        UpstreamAction::Send { consumed, bytes } => {
            *consumed > 0 && *consumed <= len && bytes.len() <= room
        }
        UpstreamAction::Answer(bytes) => {
            !bytes.is_empty() && bytes.len() <= room && bytes.len() <= MAX_ANSWER_LEN
        }
        UpstreamAction::Upgrade | UpstreamAction::Wait | UpstreamAction::Close => true,
    }
}

/// Moves the first `n` bytes of `from` to `to`. A body usually fills the
/// whole input while the output is empty: then the buffers trade places
/// and no byte is copied.
fn forward(from: &mut ByteBuf, to: &mut ByteBuf, n: usize) {
    if to.is_empty() && n == from.len() && from.capacity() == to.capacity() {
        std::mem::swap(from, to);
    } else {
        to.extend(&from.data()[..n]);
        from.consume(n);
    }
}

/// Queues a whole answer for the client, growing the buffer if it must:
/// half an answer would corrupt the stream.
fn owe(cout: &mut ByteBuf, answer: &[u8]) {
    if cout.room() < answer.len() {
        let mut bigger = ByteBuf::with_capacity(cout.len() + answer.len());
        bigger.extend(cout.data());
        *cout = bigger;
    }
    cout.extend(answer);
}

/// Reads `link` into `buf` until it is full or the side would block.
fn fill(link: &mut Link, port: &mut impl Port, buf: &mut ByteBuf) -> Io {
    let mut got = 0;
    link.want_read(port, buf.room() > 0);
    while link.can_read(port) && buf.room() > 0 {
        match link.read(port, buf.space()) {
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

/// Writes `buf` to `link` until it is empty or the side would block.
/// Returns the bytes written, and how many of them are payload: the first
/// `own` bytes are the proxy's own and do not count.
fn flush(
    link: &mut Link,
    port: &mut impl Port,
    buf: &mut ByteBuf,
    own: &mut usize,
) -> Result<(usize, usize), std::io::Error> {
    let (mut written, mut payload) = (0, 0);
    link.want_write(port, !buf.is_empty());
    while port.can_write() && !buf.is_empty() {
        match link.write(port, buf.data()) {
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
