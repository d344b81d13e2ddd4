//! Inspect: HTTP/1.1 relayed message by message, for a tunnel whose rule
//! says `inspect = "http"` and for the forward proxy (`GET http://...`).
//!
//! Client bytes are parsed into request heads, checked against the rule's
//! request rules, and forwarded (a refused request is answered 403 here, in
//! order with the responses still due); bodies stream through by their
//! framing and never sit whole in memory. Responses are parsed only to find
//! where each ends. A request that asks to upgrade stops the parsing of
//! client bytes until its response: a `101` hands every buffered byte, both
//! ways, to a raw [`Tunnel`] and nothing is parsed again; anything else and
//! parsing resumes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::carrier::Carrier;
use super::closing::Closing;
use super::endpoint::{Endpoint, Side};
use super::refusal::Dialect;
use super::state::State;
use super::tunnel::Tunnel;
use super::Conn;
use crate::buffer::ByteBuf;
use crate::io::Io;
use crate::policy::{RequestRules, Target};
use crate::protocol::http;
use crate::protocol::http1::{Body, BodyKind};
use crate::reactor::Core;
use crate::stats::CloseReason;

mod request;
mod response;

/// What the proxy says it is in `Via`.
const VIA: &str = "1.1 portcullis";
/// IO rounds per call before yielding to other sessions.
const ROUNDS_PER_CALL: usize = 32;

/// Whose HTTP this is.
pub(crate) enum Mode {
    /// Inside a CONNECT or SOCKS5 tunnel: heads are forwarded as they came.
    Tunnel,
    /// The forward proxy, connected to `upstream`: requests are rewritten to
    /// origin-form, hop-by-hop headers dropped, `Via` added both ways.
    Forward { upstream: Target },
}

pub(crate) struct Inspect {
    mode: Mode,
    /// The allowing rule's request rules; `None`: every request allowed.
    rules: Option<Arc<RequestRules>>,
    /// Client bytes not yet parsed or forwarded.
    cin: ByteBuf,
    /// Bytes for the upstream.
    uout: ByteBuf,
    /// Upstream bytes not yet parsed or forwarded.
    uin: ByteBuf,
    /// Bytes for the client.
    cout: ByteBuf,
    req: Req,
    resp: Resp,
    /// Exchanges whose answers are still due to the client, in order.
    due: VecDeque<Exchange>,
    client_eof: bool,
    upstream_eof: bool,
    /// Close once everything due has been answered and flushed.
    close_after: bool,
    idle: Option<Duration>,
    last_active: Instant,
    /// A forwarded request is waiting for its response head since then.
    waiting_since: Option<Instant>,
    armed: Option<Wait>,
    /// Requests parsed so far (for the access line).
    requests: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Response,
    Idle,
}

/// The request side.
enum Req {
    /// At a message boundary: the next bytes are a request head.
    Head,
    /// In a request body; `forward`: to the upstream, else discarded (the
    /// request was refused). Then `next`.
    Body {
        body: Body,
        forward: bool,
        next: After,
    },
    /// An upgrade was requested: client bytes wait for its response.
    AwaitUpgrade,
    /// No more requests are read (after `Connection: close` or an error).
    Stopped,
}

#[derive(Debug, Clone, Copy)]
enum After {
    Head,
    AwaitUpgrade,
    Stopped,
}

impl After {
    fn req(self) -> Req {
        match self {
            After::Head => Req::Head,
            After::AwaitUpgrade => Req::AwaitUpgrade,
            After::Stopped => Req::Stopped,
        }
    }
}

/// The response side.
enum Resp {
    Head,
    Body(Body),
}

enum Exchange {
    /// Forwarded: the upstream answers.
    Upstream {
        method: String,
        upgrade: bool,
        close: bool,
        /// The whole request, body included, has been handed to the upstream:
        /// from then on (and once earlier answers are done) the response
        /// timeout runs.
        sent: bool,
    },
    /// Answered by the proxy itself.
    Local { answer: Vec<u8>, close: bool },
}

/// Why the message loop stopped.
enum Stop {
    /// One side is gone.
    Gone(Side),
    /// A 101 answered an upgrade: raw passthrough from here on.
    Upgrade,
    /// The forward proxy needs another upstream for this request.
    Switch(Target),
    /// The upstream broke HTTP before any of the response reached the client.
    BadUpstream(String),
}

fn why_answer(status: u16, cause: &str, reason: &str) -> Vec<u8> {
    http::error_response(status, cause, reason, &[])
}

impl Inspect {
    /// An inspected tunnel: `to_client` is the proxy's success reply,
    /// `early` the bytes the client sent behind its request.
    pub(crate) fn tunnel(
        to_client: &[u8],
        early: &[u8],
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
        core: &mut Core,
    ) -> Inspect {
        let mut s = Inspect::new(Mode::Tunnel, rules, early, idle, core);
        s.cout.extend(to_client);
        s
    }

    /// The forward proxy, connected to `upstream`; `early` starts with the
    /// request head that led here.
    pub(crate) fn forward(
        upstream: Target,
        early: &[u8],
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
        core: &mut Core,
    ) -> Inspect {
        Inspect::new(Mode::Forward { upstream }, rules, early, idle, core)
    }

    fn new(
        mode: Mode,
        rules: Option<Arc<RequestRules>>,
        early: &[u8],
        idle: Option<Duration>,
        core: &mut Core,
    ) -> Inspect {
        let size = buffer_size(core);
        let mut take = || core.pool.take_at_least(size);
        let mut cin = take();
        cin.extend(early);
        Inspect {
            mode,
            rules,
            cin,
            uout: take(),
            uin: take(),
            cout: take(),
            req: Req::Head,
            resp: Resp::Head,
            due: VecDeque::new(),
            client_eof: false,
            upstream_eof: false,
            close_after: false,
            idle,
            last_active: core.now,
            waiting_since: None,
            armed: None,
            requests: 0,
        }
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, core: &mut Core) -> State {
        let result = self.pump(conn, core);
        // Counted per call, so a forward-proxy session that moves to another
        // upstream (a new Inspect) keeps its total.
        conn.log.requests += std::mem::take(&mut self.requests);
        match result {
            Ok(()) => {}
            Err(Stop::Gone(Side::Client)) => return State::Done(CloseReason::ClientGone),
            Err(Stop::Gone(Side::Upstream)) => {
                conn.drop_side(Side::Upstream, core);
                return self.close(CloseReason::UpstreamGone);
            }
            Err(Stop::BadUpstream(why)) => {
                log::info!("conn={} upstream broke HTTP: {why}", conn.id);
                conn.log.error = Some(why.clone());
                conn.drop_side(Side::Upstream, core);
                // A 502 answers the request awaiting its response; with none
                // due, an answer would pass for the reply to the next one.
                if matches!(self.due.front(), Some(Exchange::Upstream { .. })) {
                    self.owe(&why_answer(502, "bad-upstream-response", &why), core);
                }
                return self.close(CloseReason::UpstreamGone);
            }
            Err(Stop::Upgrade) => return self.upgrade(conn, core),
            Err(Stop::Switch(target)) => {
                conn.drop_side(Side::Upstream, core);
                let early = self.cin.data().to_vec();
                return super::connect::start(target, Dialect::Forward, early, conn, core);
            }
        }
        self.update_wait(core);
        if let Some(reason) = self.finished(conn, core) {
            return self.close(reason);
        }
        self.rearm(conn, core);
        self.park(core);
        State::Inspect(self)
    }

    /// Moves bytes and messages both ways until nothing more can move.
    fn pump(&mut self, conn: &mut Conn, core: &mut Core) -> Result<(), Stop> {
        self.unpark(core);
        let Conn {
            client,
            upstream,
            log,
            key,
            id,
            ..
        } = conn;
        let Some(upstream) = upstream.as_mut() else {
            return Err(Stop::Gone(Side::Upstream));
        };
        // As in a tunnel, an error event ends a side only once nothing more
        // moves: what it sent before failing is read and relayed first.
        let mut active = false;
        for round in 0.. {
            if round == ROUNDS_PER_CALL {
                core.requeue.push(*key);
                break;
            }
            let mut moved = false;
            if !self.client_eof {
                moved |= fill(client, &mut self.cin, &mut self.client_eof, Side::Client)?;
            }
            moved |= self.requests(*id, core)?;
            moved |= flush(upstream, &mut self.uout, Side::Upstream, &mut log.up, |n| {
                core.stats().bytes_up(n)
            })?;
            if !self.upstream_eof {
                moved |= fill(
                    upstream,
                    &mut self.uin,
                    &mut self.upstream_eof,
                    Side::Upstream,
                )?;
            }
            moved |= self.responses(core)?;
            moved |= flush(client, &mut self.cout, Side::Client, &mut log.down, |n| {
                core.stats().bytes_down(n)
            })?;
            if !moved {
                break;
            }
            active = true;
            self.last_active = core.now;
        }
        if !active {
            if client.failed {
                return Err(Stop::Gone(Side::Client));
            }
            if upstream.failed {
                return Err(Stop::Gone(Side::Upstream));
            }
        }
        Ok(())
    }

    /// After pumping: does the session end, or move on?
    fn finished(&mut self, conn: &mut Conn, core: &mut Core) -> Option<CloseReason> {
        // A close-delimited body ends with the upstream's EOF, and so does
        // the connection: nothing may follow it (the client reads to EOF, so
        // an answer to a pipelined request would become part of this body).
        if self.upstream_eof && self.uin.is_empty() {
            if let Resp::Body(body) = &self.resp {
                if body.kind() == BodyKind::UntilClose {
                    self.exchange_done();
                    conn.drop_side(Side::Upstream, core);
                    return Some(CloseReason::Done);
                }
            }
        }
        let answered = self.due.is_empty() && matches!(self.resp, Resp::Head);
        // Nothing more comes from the upstream. Once what it sent is through
        // (or is a head that can never complete), finish what is owed.
        let drained =
            self.uin.is_empty() || matches!(self.resp, Resp::Head) && self.cout.is_empty();
        if self.upstream_eof && drained {
            if matches!(self.due.front(), Some(Exchange::Upstream { .. })) {
                let why = "the upstream closed the connection before answering";
                conn.log.error = Some(why.into());
                if matches!(self.resp, Resp::Head) {
                    self.owe(&why_answer(502, "upstream-closed", why), core);
                }
            }
            conn.drop_side(Side::Upstream, core);
            return Some(CloseReason::Done);
        }
        if answered && self.cout.is_empty() && (self.close_after || self.client_eof) {
            conn.drop_side(Side::Upstream, core);
            return Some(CloseReason::Done);
        }
        None
    }

    /// Flushes what is owed to the client, then closes.
    fn close(self: Box<Self>, reason: CloseReason) -> State {
        let this = *self;
        let owed = (!this.cout.is_empty()).then_some(Carrier::Buf(this.cout));
        State::Closing(Closing::to_client(owed, reason))
    }

    /// The 101 is out: every buffered byte goes on raw, both ways.
    fn upgrade(self: Box<Self>, conn: &mut Conn, core: &mut Core) -> State {
        let this = *self;
        core.stats().upgraded();
        conn.log.upgraded = true;
        log::debug!("conn={} upgraded: raw passthrough from here", conn.id);
        let to_client = join(this.cout, this.uin, core);
        let to_upstream = join(this.uout, this.cin, core);
        // An EOF already read raises no new edge: the tunnel must know of it.
        let eof = (this.client_eof, this.upstream_eof);
        State::Established(Tunnel::resume(to_upstream, to_client, eof, this.idle, core))
    }

    /// Keeps the one session timer on what the session waits for: a
    /// response head (504 when it does not come) or, if set, idleness.
    fn rearm(&mut self, conn: &mut Conn, core: &mut Core) {
        let want = if self.waiting_since.is_some() {
            Some(Wait::Response)
        } else {
            self.idle.map(|_| Wait::Idle)
        };
        if want == self.armed {
            return;
        }
        self.armed = want;
        // Armed for the time left: a deadline that moved later since (new
        // traffic, a new wait) only makes the timer fire early, and
        // `on_timer` then re-arms for what is left.
        let due = match want {
            Some(Wait::Response) => self
                .waiting_since
                .map(|t| t + core.settings.timeouts.response),
            Some(Wait::Idle) => self.idle.map(|idle| self.last_active + idle),
            None => None,
        };
        match due {
            Some(due) => conn.arm(core, due.saturating_duration_since(core.now)),
            None => conn.disarm(core),
        }
    }

    /// The response timeout runs while the answer due next is the upstream's,
    /// its request is wholly sent (or waits for `100 Continue`), and nothing
    /// of a response has arrived: not while the client is still uploading,
    /// nor while an earlier response streams or waits for a slow client.
    fn update_wait(&mut self, core: &Core) {
        let waiting = matches!(self.resp, Resp::Head)
            && self.uin.is_empty()
            && matches!(
                self.due.front(),
                Some(Exchange::Upstream { sent: true, .. })
            );
        match (waiting, self.waiting_since) {
            (true, None) => self.waiting_since = Some(core.now),
            (false, Some(_)) => self.waiting_since = None,
            _ => {}
        }
    }

    /// Queues a whole answer for the client, growing the buffer if it must:
    /// half an answer would corrupt the stream.
    fn owe(&mut self, answer: &[u8], core: &mut Core) {
        if self.cout.room() < answer.len() {
            let mut bigger = core.pool.take_at_least(self.cout.len() + answer.len());
            bigger.extend(self.cout.data());
            self.cout = bigger;
        }
        self.cout.extend(answer);
    }

    /// Gives empty buffers back to the pool between calls, so an idle
    /// keep-alive session holds none (an empty `ByteBuf` allocates nothing).
    fn park(&mut self, core: &mut Core) {
        for buf in [&mut self.cin, &mut self.uout, &mut self.uin, &mut self.cout] {
            // Only pool-sized buffers: others would be freed and allocated
            // again on every call.
            if buf.is_empty() && buf.capacity() == core.pool.size() {
                core.pool
                    .give(std::mem::replace(buf, ByteBuf::with_capacity(0)));
            }
        }
    }

    /// Takes buffers again for the parked slots.
    fn unpark(&mut self, core: &mut Core) {
        let size = buffer_size(core);
        for buf in [&mut self.cin, &mut self.uout, &mut self.uin, &mut self.cout] {
            if buf.capacity() == 0 {
                *buf = core.pool.take_at_least(size);
            }
        }
    }

    /// New request rules after a policy reload (`None`: every request allowed).
    pub(crate) fn set_rules(&mut self, rules: Option<Arc<RequestRules>>) {
        self.rules = rules;
    }

    pub(crate) fn on_timer(mut self: Box<Self>, conn: &mut Conn, core: &mut Core) -> State {
        self.unpark(core);
        self.armed = None;
        if let Some(since) = self.waiting_since {
            if core.now >= since + core.settings.timeouts.response {
                let why = "the upstream did not answer in time";
                log::info!("conn={} {why}", conn.id);
                conn.log.error = Some(why.into());
                conn.drop_side(Side::Upstream, core);
                if matches!(self.resp, Resp::Head) {
                    self.owe(&why_answer(504, "response-timeout", why), core);
                }
                return self.close(CloseReason::ResponseTimeout);
            }
        } else if let Some(idle) = self.idle {
            if core.now >= self.last_active + idle {
                return State::Done(CloseReason::IdleTimeout);
            }
        }
        self.rearm(conn, core);
        self.park(core);
        State::Inspect(self)
    }
}

/// Reads into `buf` until it is full or the socket would block.
fn fill(ep: &mut Endpoint, buf: &mut ByteBuf, eof: &mut bool, side: Side) -> Result<bool, Stop> {
    let mut moved = false;
    while ep.readable && buf.room() > 0 {
        match ep.stream.read_into(buf.space()) {
            Io::Progress(n) => {
                buf.commit(n);
                moved = true;
            }
            Io::WouldBlock => ep.readable = false,
            Io::Eof => {
                ep.readable = false;
                *eof = true;
                return Ok(true);
            }
            Io::PeerGone(_) => return Err(Stop::Gone(side)),
        }
    }
    Ok(moved)
}

/// Writes `buf` until it is empty or the socket would block.
fn flush(
    ep: &mut Endpoint,
    buf: &mut ByteBuf,
    side: Side,
    counter: &mut u64,
    count: impl Fn(usize),
) -> Result<bool, Stop> {
    let mut moved = false;
    while ep.writable && !buf.is_empty() {
        match ep.stream.write_from(buf.data()) {
            Io::Progress(n) => {
                buf.consume(n);
                *counter += n as u64;
                count(n);
                moved = true;
            }
            Io::WouldBlock => ep.writable = false,
            Io::Eof | Io::PeerGone(_) => return Err(Stop::Gone(side)),
        }
    }
    Ok(moved)
}

/// Inspect's buffer size: a whole head must fit, with room for what the
/// forward proxy adds when it rewrites one (`Via`, `Host`, `Connection`).
fn buffer_size(core: &Core) -> usize {
    let limits = &core.settings.limits;
    limits.buffer_size.max(limits.max_head_bytes + 1024)
}

/// `a` then `b` in one buffer (`None` when both are empty).
fn join(mut a: ByteBuf, b: ByteBuf, core: &mut Core) -> Option<ByteBuf> {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => None,
        (false, true) => Some(a),
        (true, false) => Some(b),
        (false, false) if a.room() >= b.len() => {
            a.extend(b.data());
            Some(a)
        }
        (false, false) => {
            let mut joined = core.pool.take_at_least(a.len() + b.len());
            joined.extend(a.data());
            joined.extend(b.data());
            Some(joined)
        }
    }
}
