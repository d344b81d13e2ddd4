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

use super::closing::Closing;
use super::conn::Conn;
use super::endpoint::Endpoint;
use super::passthrough::{Carrier, Passthrough, Preload};
use super::refusal::Dialect;
use super::state::State;
use crate::buffer::ByteBuf;
use crate::io::Io;
use crate::lifecycle::{CloseReason, Side};
use crate::policy::{RequestRules, Target};
use crate::protocol::http;
use crate::protocol::http1::{Body, BodyKind};
use crate::session::ctx::Ctx;

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
    client: Endpoint,
    upstream: Endpoint,
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
    /// Requests judged since the last call, for their events (ops bridge:
    /// the exchange machine's `take_records` replaces this).
    records: Vec<crate::protocol::http1::exchange::Record>,
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
        client: Endpoint,
        upstream: Endpoint,
        to_client: &[u8],
        early: &[u8],
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
        ctx: &mut Ctx,
    ) -> Inspect {
        let mut s = Inspect::new(client, upstream, Mode::Tunnel, rules, early, idle, ctx);
        s.cout.extend(to_client);
        s
    }

    /// The forward proxy, connected to `upstream`; `early` starts with the
    /// request head that led here.
    pub(crate) fn forward(
        client: Endpoint,
        upstream: Endpoint,
        target: Target,
        early: &[u8],
        rules: Option<Arc<RequestRules>>,
        idle: Option<Duration>,
        ctx: &mut Ctx,
    ) -> Inspect {
        let mode = Mode::Forward { upstream: target };
        Inspect::new(client, upstream, mode, rules, early, idle, ctx)
    }

    fn new(
        client: Endpoint,
        upstream: Endpoint,
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
        Inspect {
            client,
            upstream,
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
            last_active: ctx.now,
            waiting_since: None,
            armed: None,
            requests: 0,
            records: Vec::new(),
        }
    }

    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Upstream => &mut self.upstream,
        }
    }

    /// Where the request side is: reading heads, streaming a body, waiting
    /// for an upgrade's answer, or stopped.
    pub(crate) fn stage(&self) -> &'static str {
        match self.req {
            Req::Head => "head",
            Req::Body { forward: true, .. } => "body",
            Req::Body { forward: false, .. } => "refused-body",
            Req::AwaitUpgrade => "await-upgrade",
            Req::Stopped => "stopped",
        }
    }

    pub(crate) fn drive(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let result = self.pump(conn, ctx);
        // Counted per call, so a forward-proxy session that moves to another
        // upstream (a new Inspect) keeps its total.
        conn.log.requests += std::mem::take(&mut self.requests);
        for record in self.records.drain(..) {
            conn.request(&record, ctx);
        }
        match result {
            Ok(()) => {}
            Err(Stop::Gone(Side::Client)) => return State::Done(CloseReason::ClientGone),
            Err(Stop::Gone(Side::Upstream)) => {
                return self.close(CloseReason::UpstreamGone);
            }
            Err(Stop::BadUpstream(why)) => {
                log::info!("conn={} upstream broke HTTP: {why}", conn.id);
                conn.log.error = Some(why.clone());
                // A 502 answers the request awaiting its response; with none
                // due, an answer would pass for the reply to the next one.
                if matches!(self.due.front(), Some(Exchange::Upstream { .. })) {
                    self.owe(&why_answer(502, "bad-upstream-response", &why), ctx);
                }
                return self.close(CloseReason::UpstreamGone);
            }
            Err(Stop::Upgrade) => return self.upgrade(conn, ctx),
            Err(Stop::Switch(target)) => {
                // The old upstream closes here; the client goes on to the new one.
                let this = *self;
                let early = this.cin.data().to_vec();
                ctx.pool.give(this.cin);
                return super::connect::start(
                    this.client,
                    target,
                    Dialect::Forward,
                    early,
                    conn,
                    ctx,
                );
            }
        }
        self.update_wait(ctx);
        if let Some(reason) = self.finished(conn, ctx) {
            return self.close(reason);
        }
        self.rearm(conn, ctx);
        self.park(ctx);
        State::Inspect(self)
    }

    /// Moves bytes and messages both ways until nothing more can move.
    fn pump(&mut self, conn: &mut Conn, ctx: &mut Ctx) -> Result<(), Stop> {
        self.unpark(ctx);
        let id = conn.id;
        // As in a tunnel, an error event ends a side only once nothing more
        // moves: what it sent before failing is read and relayed first.
        let mut active = false;
        for round in 0.. {
            if round == ROUNDS_PER_CALL {
                ctx.again();
                break;
            }
            let mut moved = false;
            if !self.client_eof {
                moved |= fill(
                    &mut self.client,
                    &mut self.cin,
                    &mut self.client_eof,
                    Side::Client,
                )?;
            }
            moved |= self.requests(id, ctx)?;
            moved |= flush(&mut self.upstream, &mut self.uout, Side::Client, conn, ctx)?;
            if !self.upstream_eof {
                moved |= fill(
                    &mut self.upstream,
                    &mut self.uin,
                    &mut self.upstream_eof,
                    Side::Upstream,
                )?;
            }
            moved |= self.responses(ctx)?;
            moved |= flush(&mut self.client, &mut self.cout, Side::Upstream, conn, ctx)?;
            if !moved {
                break;
            }
            active = true;
            self.last_active = ctx.now;
        }
        if !active {
            if self.client.failed() {
                return Err(Stop::Gone(Side::Client));
            }
            if self.upstream.failed() {
                return Err(Stop::Gone(Side::Upstream));
            }
        }
        Ok(())
    }

    /// After pumping: does the session end, or move on?
    fn finished(&mut self, conn: &mut Conn, ctx: &mut Ctx) -> Option<CloseReason> {
        // A close-delimited body ends with the upstream's EOF, and so does
        // the connection: nothing may follow it (the client reads to EOF, so
        // an answer to a pipelined request would become part of this body).
        if self.upstream_eof && self.uin.is_empty() {
            if let Resp::Body(body) = &self.resp {
                if body.kind() == BodyKind::UntilClose {
                    self.exchange_done();
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
                    self.owe(&why_answer(502, "upstream-closed", why), ctx);
                }
            }
            return Some(CloseReason::Done);
        }
        if answered && self.cout.is_empty() && (self.close_after || self.client_eof) {
            return Some(CloseReason::Done);
        }
        None
    }

    /// Flushes what is owed to the client, then closes.
    fn close(self: Box<Self>, reason: CloseReason) -> State {
        // The upstream's socket closes here; the client's goes on to Closing.
        let this = *self;
        let owed = (!this.cout.is_empty()).then_some(Carrier::Buf(this.cout));
        State::Closing(Closing::to_client(this.client, owed, reason))
    }

    /// The 101 is out: every buffered byte goes on raw, both ways.
    fn upgrade(self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let this = *self;
        ctx.stats.upgraded();
        conn.log.upgraded = true;
        log::debug!("conn={} upgraded: raw passthrough from here", conn.id);
        let to_client = join(this.cout, this.uin, ctx);
        let to_upstream = join(this.uout, this.cin, ctx);
        // An EOF already read raises no new edge: the tunnel must know of it.
        let preload = Preload {
            to_client,
            own: 0,
            to_upstream,
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

    /// Keeps the one session timer on what the session waits for: a
    /// response head (504 when it does not come) or, if set, idleness.
    fn rearm(&mut self, conn: &mut Conn, ctx: &mut Ctx) {
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
                .map(|t| t + ctx.settings.timeouts.response),
            Some(Wait::Idle) => self.idle.map(|idle| self.last_active + idle),
            None => None,
        };
        conn.deadline = due;
    }

    /// The response timeout runs while the answer due next is the upstream's,
    /// its request is wholly sent (or waits for `100 Continue`), and nothing
    /// of a response has arrived: not while the client is still uploading,
    /// nor while an earlier response streams or waits for a slow client.
    fn update_wait(&mut self, ctx: &Ctx) {
        let waiting = matches!(self.resp, Resp::Head)
            && self.uin.is_empty()
            && matches!(
                self.due.front(),
                Some(Exchange::Upstream { sent: true, .. })
            );
        match (waiting, self.waiting_since) {
            (true, None) => self.waiting_since = Some(ctx.now),
            (false, Some(_)) => self.waiting_since = None,
            _ => {}
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

    /// New request rules after a policy reload (`None`: every request allowed).
    pub(crate) fn set_rules(&mut self, rules: Option<Arc<RequestRules>>) {
        self.rules = rules;
    }

    pub(crate) fn on_timer(mut self: Box<Self>, conn: &mut Conn, ctx: &mut Ctx) -> State {
        self.unpark(ctx);
        self.armed = None;
        if let Some(since) = self.waiting_since {
            if ctx.now >= since + ctx.settings.timeouts.response {
                let why = "the upstream did not answer in time";
                log::info!("conn={} {why}", conn.id);
                conn.log.error = Some(why.into());
                if matches!(self.resp, Resp::Head) {
                    self.owe(&why_answer(504, "response-timeout", why), ctx);
                }
                return self.close(CloseReason::ResponseTimeout);
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
}

/// Reads into `buf` until it is full or the socket would block.
fn fill(ep: &mut Endpoint, buf: &mut ByteBuf, eof: &mut bool, side: Side) -> Result<bool, Stop> {
    let mut moved = false;
    ep.want_read(buf.room() > 0);
    while ep.can_read() && buf.room() > 0 {
        match ep.read(buf.space()) {
            Io::Progress(n) => {
                buf.commit(n);
                moved = true;
            }
            Io::WouldBlock => {}
            Io::Eof => {
                *eof = true;
                return Ok(true);
            }
            Io::PeerGone(_) => return Err(Stop::Gone(side)),
        }
    }
    Ok(moved)
}

/// Writes `buf` to `ep` until it is empty or the socket would block; the
/// bytes came `from` the other side and are counted as relayed.
fn flush(
    ep: &mut Endpoint,
    buf: &mut ByteBuf,
    from: Side,
    conn: &mut Conn,
    ctx: &Ctx,
) -> Result<bool, Stop> {
    let mut moved = false;
    ep.want_write(!buf.is_empty());
    while ep.can_write() && !buf.is_empty() {
        match ep.write(buf.data()) {
            Io::Progress(n) => {
                buf.consume(n);
                conn.count(from, n, ctx);
                moved = true;
            }
            Io::WouldBlock => {}
            Io::Eof | Io::PeerGone(_) => return Err(Stop::Gone(from.other())),
        }
    }
    Ok(moved)
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
