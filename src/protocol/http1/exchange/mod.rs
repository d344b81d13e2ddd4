//! The HTTP/1.1 exchange as a sans-IO machine: one client connection
//! relayed message by message to one upstream, for an `inspect = "http"`
//! tunnel and for the forward proxy.
//!
//! The machine owns no I/O buffers. Its pump holds four queues (client input
//! `cin`, to-upstream `uout`, upstream input `uin`, to-client `cout`) and asks
//! what to do with the front of an input, given the room in the matching
//! output. Request heads are parsed and checked (request rules on the
//! normalised path, the tunnel's target against `Host`, upgrade tokens),
//! then forwarded (rewritten for the forward proxy) or answered by the proxy
//! in order with the responses still due; bodies stream through by their
//! framing and are never held. Responses are parsed only to find where each
//! ends and to take their status.
//!
//! # The pump
//!
//! The one implementation is the session core's, `core::inspect::InspectCore::pump`
//! (production, the simulator and the fuzz target all run it); in outline:
//!
//! ```text
//! loop {
//!     read the client into cin; at its EOF: ex.client_eof()
//!     loop match ex.on_client(cin.data(), uout.room()) {
//!         Forward(n)             => move n bytes from cin to uout,
//!         Send { consumed, bytes } => cin.consume(consumed); uout.extend(bytes),
//!         Discard(n)             => cin.consume(n),
//!         Switch(target)         => if uout and cout are empty: reconnect to target,
//!                                   cin untouched (its front is the new host's request);
//!                                   else break, flush, and ask again,
//!         Wait | Stopped         => break,
//!     }
//!     flush uout
//!     read the upstream into uin; at its EOF: ex.upstream_eof()
//!     loop match ex.on_upstream(uin.data(), cout.room()) {   // also with uin empty:
//!         Forward(n)             => move n bytes from uin to cout,   // proxy answers come out here
//!         Send { consumed, bytes } => uin.consume(consumed); cout.extend(bytes),
//!         Answer(bytes)          => cout.extend(bytes),
//!         Upgrade                => raw relay from here: cout then uin to the client,
//!                                   uout then cin to the upstream,
//!         Wait | Close           => break,
//!     }
//!     flush cout
//!     for r in ex.take_records() { count and log r }
//!     match ex.status() {
//!         Open => {}
//!         Upgraded => raw relay (as above),
//!         Closed { answer, end } => append answer (if any) to cout, growing it:
//!                                   it must go whole; flush cout; close,
//!     }
//!     if nothing moved: break (wait for readiness)
//! }
//! ```
//!
//! Rules the pump must keep (the core checks the action sizes in debug builds):
//! - All four queues hold at least `max_head_bytes + 1024` bytes: a head is
//!   parsed (or found too large) only once it fits in an input, it goes out
//!   whole (rewritten ones grow a little), and so does an answer (at most
//!   [`MAX_ANSWER_LEN`] bytes).
//! - Execute each action before calling again, and before looking at
//!   [`Exchange::status`]: the last bytes of a conversation come as an
//!   action returned together with the change of status.
//! - Call `on_client` after `client_eof` and `on_upstream` every round, also
//!   with no upstream input and after an EOF: answers due, and what an EOF
//!   means, come out there. Every action but `Wait`, `Stopped`, `Switch`,
//!   `Close` and `Upgrade` moves at least one byte, so the loops end.
//! - `Stopped` from `on_client` only means no more requests are read; the
//!   connection ends when the status says so.
//! - An upstream that resets is best reported as [`Exchange::upstream_eof`]
//!   (after relaying what it sent): the client then gets its 502 when
//!   nothing of the response had gone out. A client that resets is gone:
//!   call [`Exchange::abandon`] (each request still due is recorded, so
//!   none goes up unlogged), take the records, drop the machine; the same
//!   when a clock ends the connection with nothing to answer.
//! - `Switch` is acted on only once `uout` and `cout` are flushed; take the
//!   records before dropping the machine.
//! - [`ClientAction::Wait`] may mean backpressure on the client: the machine
//!   holds at most [`MAX_DUE`] exchanges and [`MAX_ANSWER_BYTES`] of owed
//!   answers. Stop reading the client while `cin` is full; it drains as
//!   answers go out.
//! - The response timer: arm it while [`Exchange::awaiting_response`] is
//!   `Some(id)`, from the moment the id was first seen (a new id is a new
//!   wait: restart the clock); disarm on `None`. When it fires, call
//!   [`Exchange::response_timeout`] and consult the status.
//! - The head timer, the same way on [`Exchange::awaiting_head`]: when it
//!   fires, call [`Exchange::head_timeout`] and pump (a `408` is due).
//! - Take the records every round ([`Exchange::take_records`]); at most
//!   [`MAX_RECORDS`] wait, past that the oldest are dropped and counted.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::protocol::http::{HeadGate, MAX_HEADERS};
use crate::protocol::http1::Body;
use crate::target::Target;

mod checks;
mod judge;
mod record;
mod request;
mod response;

pub use judge::{HeaderSecrets, Headers, RequestJudge, SecretRefusal, Verdict};
pub(crate) use record::forward_fields;
pub use record::{Decision, Record};

/// Exchanges (requests whose answer is still due) held at once; past it the
/// client is not read ([`ClientAction::Wait`]).
pub const MAX_DUE: usize = 32;
/// Bytes of proxy answers owed at once (roughly); past it the client is not read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Records waiting for [`Exchange::take_records`]; past it the oldest go.
pub const MAX_RECORDS: usize = 64;
/// The longest answer the machine writes itself (the text it echoes from a
/// request is clipped), rule names of sane length assumed.
pub const MAX_ANSWER_LEN: usize = 2048;
/// What the proxy says it is in `Via` (forward mode).
const VIA: &str = "1.1 portcullis";

/// Why a `kind` head (`request`, `response`) is not sent on: with the
/// lines the forward proxy adds, `lines` in all, it has more than
/// [`MAX_HEADERS`].
fn too_many_lines(kind: &str, lines: usize) -> String {
    format!(
        "{kind} head too large: {lines} header lines once the proxy's own \
         are added, at most {MAX_HEADERS}"
    )
}

/// Whose HTTP this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Inside a CONNECT or SOCKS5 tunnel to `target`: heads are forwarded as
    /// they came, and every request must name `target` (`Host`, absolute URI).
    Tunnel {
        /// Where the tunnel goes.
        target: Target,
        /// The proxy terminated the client's TLS: a `Host` without a port
        /// means 443, not 80 (an absolute URI's scheme says for itself).
        tls: bool,
    },
    /// The forward proxy, connected to `upstream`: requests are absolute-form,
    /// rewritten to origin-form with `Host` from the URI, hop-by-hop headers
    /// dropped, `Via` added both ways. A request for another host is
    /// [`ClientAction::Switch`].
    Forward {
        /// The host this connection goes to.
        upstream: Target,
        /// The proxy speaks TLS to it (`https://` requests).
        tls: bool,
    },
}

pub use crate::auth::basic::SameLogin;

/// How an [`Exchange`] judges requests.
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    /// Tunnel or forward proxy.
    pub mode: Mode,
    /// The allowing rule's request rules; `None`: every request allowed.
    pub rules: Option<Arc<dyn RequestJudge>>,
    /// The largest request or response head (431 / 502 beyond).
    pub max_head_bytes: usize,
    /// `Upgrade` protocols that may switch the connection to raw bytes
    /// (case-insensitive; `websocket` matches `websocket/13` too).
    pub upgrades: Vec<String>,
    /// Forward proxy with users: each request's `Proxy-Authorization` must
    /// be this login (RFC 9110 11.7.2: credentials are per request); other
    /// credentials get `407` and the connection closes (the client
    /// reconnects to log in as someone else). A request without the header
    /// stays the connection's user, as inside a tunnel.
    pub login: Option<SameLogin>,
    /// `[[secrets]]`: placeholders in request headers are replaced by the
    /// value when the request goes to one of the secret's hosts, and the
    /// request is refused (`403 secret-not-allowed`) otherwise.
    pub secrets: Option<Arc<dyn HeaderSecrets>>,
    /// A raw tunnel on a port an inspecting rule covers: the host its first
    /// request named, which the fronting check cleared. Every request must
    /// name this host (`421` otherwise) instead of the tunnel's target (an
    /// address, say), so a later request cannot front for another.
    pub vetted_host: Option<Target>,
}

impl ExchangeConfig {
    /// Every request allowed, 32 KiB heads, only `websocket` upgrades.
    pub fn new(mode: Mode) -> ExchangeConfig {
        ExchangeConfig {
            mode,
            rules: None,
            max_head_bytes: 32 * 1024,
            upgrades: vec!["websocket".into()],
            login: None,
            secrets: None,
            vetted_host: None,
        }
    }
}

/// What to do with the front of the client's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAction {
    /// The next `n` input bytes go upstream verbatim (`0 < n <= room`).
    Forward(usize),
    /// Consume `consumed` input bytes and send `bytes` upstream instead (a
    /// rewritten head; `bytes.len() <= room`).
    Send {
        /// Input bytes used up.
        consumed: usize,
        /// What goes upstream in their place.
        bytes: Vec<u8>,
    },
    /// Drop `n` input bytes (a refused request, or its body).
    Discard(usize),
    /// Forward proxy: the request at the front of the input is for another
    /// origin (host, port, or scheme), and everything due is answered. Flush
    /// `uout` and `cout` first (ask again if they are not empty), then
    /// connect there (with TLS when `tls`) with the input untouched. Nothing
    /// is consumed; asking again gives the same answer.
    Switch {
        /// Where the request goes.
        target: Target,
        /// Over TLS (`https://`).
        tls: bool,
    },
    /// Nothing to do until more input, more room, or answers drained.
    Wait,
    /// No more requests are read on this connection; what is left in the
    /// input is never looked at (after [`Status::Upgraded`]: raw payload).
    Stopped,
}

/// What to send the client next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAction {
    /// The next `n` upstream bytes go to the client verbatim (`0 < n <= room`).
    Forward(usize),
    /// Consume `consumed` upstream bytes and send `bytes` to the client
    /// instead (a rewritten response head, or nothing for an interim
    /// answer the client is not to get; `bytes.len() <= room`).
    Send {
        /// Input bytes used up.
        consumed: usize,
        /// What goes to the client in their place.
        bytes: Vec<u8>,
    },
    /// A proxy answer due next to the client, whole (`len() <= room`).
    Answer(Vec<u8>),
    /// A 101 went out: raw both ways from here. What is left in both inputs
    /// (after what both outputs hold) is payload of the new protocol.
    Upgrade,
    /// Nothing to do until more input or more room.
    Wait,
    /// The conversation is over: [`Exchange::status`] says how.
    Close,
}

/// Where the conversation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Keep pumping.
    Open,
    /// A 101 went out: relay raw bytes both ways, inputs included.
    Upgraded,
    /// Over. Append `answer` (if any) after what `cout` holds, flush, close.
    Closed {
        /// What the client is still owed (a 400, 502 or 504), whole.
        answer: Option<Vec<u8>>,
        /// Why it is over.
        end: End,
    },
}

/// Why a conversation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Cleanly: everything due was answered and the connection ends by
    /// `Connection: close`, the client's EOF, a close-delimited response, or
    /// the upstream closing between exchanges (what was still due after a
    /// response that closed is not answered: the client retries it).
    Done,
    /// The upstream closed before its response was complete. With an answer
    /// (502 `upstream-closed`) nothing of the response had reached the
    /// client; without one, a response was cut short (reset the client).
    UpstreamClosed,
    /// The upstream broke HTTP (says how). With an answer (502
    /// `bad-upstream-response`) nothing of that response had reached the
    /// client; without one, part of it had (or it answered no request).
    BadUpstream(String),
    /// The client broke a request after its head went upstream (bad body
    /// framing, or EOF inside the body); answered 400 when nothing of its
    /// response had reached the client.
    BadRequest(String),
    /// [`Exchange::response_timeout`]: answered 504.
    ResponseTimeout,
}

/// How much the machine holds (for tests and the fuzzer: all bounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    /// Exchanges whose answer is due ([`MAX_DUE`] at most).
    pub exchanges: usize,
    /// Bytes counted against [`MAX_ANSWER_BYTES`] (under it plus one answer).
    pub answer_bytes: usize,
    /// Records waiting to be taken ([`MAX_RECORDS`] at most).
    pub records: usize,
}

/// One HTTP/1.1 connection's exchanges. See the module docs for the pump.
#[derive(Debug)]
pub struct Exchange {
    config: ExchangeConfig,
    req: Req,
    resp: Resp,
    /// Requests whose answer is still due to the client, in order.
    due: VecDeque<Due>,
    /// Sum of [`Local::cost`] over `due`.
    answer_bytes: usize,
    /// Finished records, oldest first.
    records: VecDeque<Record>,
    records_dropped: u64,
    client_eof: bool,
    upstream_eof: bool,
    /// The upstream's stream ended without a clean end (a reset, an error,
    /// a TLS EOF without close_notify): a body that ends with the
    /// connection is cut short, not whole.
    upstream_cut: bool,
    /// The upstream failed for a reason the client should hear (cause, why):
    /// the request due, or the next one, is answered 502 with it.
    upstream_failure: Option<(String, String)>,
    /// The last `on_upstream` saw unconsumed bytes that are more than a
    /// response head still arriving: the upstream has answered (the
    /// response clock stops). A head trickled and never finished is no
    /// answer: its clock keeps running.
    upstream_pending: bool,
    /// Changes whenever a wait for a response may have begun anew.
    wait_id: u64,
    /// The last `on_client` at a message boundary saw the start of a head
    /// but not its end.
    partial_head: bool,
    /// Heads parsed so far: which head a partial one is (see
    /// [`Exchange::awaiting_head`]).
    heads: u64,
    /// When the request head, and the response head, still arriving are
    /// worth parsing again (a head trickled a byte at a time is parsed a
    /// few times, not once a byte).
    request_gate: HeadGate,
    response_gate: HeadGate,
    phase: Phase,
}

/// The request side.
#[derive(Debug)]
enum Req {
    /// At a message boundary: the next bytes are a request head.
    Head,
    /// In a request body; `forward`: to the upstream, else dropped (the
    /// request was refused). Then `next`.
    Body {
        body: Body,
        forward: bool,
        next: After,
    },
    /// An upgrade request is out: client bytes wait for its response.
    AwaitUpgrade,
    /// No more requests are read.
    Stopped,
}

/// Where the request side goes after a body.
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
#[derive(Debug)]
enum Resp {
    /// The next upstream bytes are a response head (or a proxy answer is due).
    Head,
    /// In the body of the response at the front of `due`.
    Body(Body),
}

/// A request whose answer is due.
#[derive(Debug)]
enum Due {
    /// Forwarded: the upstream answers.
    Upstream(Forwarded),
    /// Answered by the proxy.
    Local(Local),
}

#[derive(Debug)]
struct Forwarded {
    method: String,
    upgrade: bool,
    /// The connection ends after this exchange (either side said so).
    close: bool,
    progress: Progress,
    interim: Interim,
    /// Taken when the final response head goes out.
    record: Option<Record>,
}

/// Which interim (`1xx`) answers the client of a forwarded request gets
/// (a `101` is no interim answer: it ends HTTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interim {
    /// The upstream's, as they come.
    Relayed,
    /// An upload whose `Expect` the proxy took off the head that went up
    /// (see `request.rs`): the proxy owes the client its own `100`, sent
    /// once this request is due next, before anything of the upstream's
    /// answer.
    ContinueOwed,
    /// That `100` went out. A `100` of the upstream's (never asked for)
    /// would be a second: it is dropped; other interim answers pass.
    ContinueSent,
    /// None: the client speaks HTTP/1.0, which has no interim answers
    /// (RFC 9110 15.2), and would take one for its final answer and the
    /// real one for that answer's body.
    Never,
}

/// How much of a forwarded request went upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Progress {
    /// Its body is still streaming.
    Sending,
    /// All of it.
    Sent,
    /// It broke after its head went (why): it cannot be completed.
    Broken(String),
}

#[derive(Debug)]
struct Local {
    status: u16,
    cause: String,
    why: String,
    close: bool,
    record: Option<Record>,
}

impl Local {
    /// What it counts against [`MAX_ANSWER_BYTES`]: about its size.
    fn cost(&self) -> usize {
        160 + self.cause.len() + self.why.len()
    }

    fn render(&self) -> Vec<u8> {
        let extra: &[(&str, &str)] = match self.status {
            407 => &[("Proxy-Authenticate", "Basic realm=\"portcullis\"")],
            _ => &[],
        };
        crate::protocol::http::answer(self.status, &self.cause, &self.why, extra, self.close)
    }
}

#[derive(Debug)]
enum Phase {
    Open,
    Upgraded,
    Closed { answer: Option<Vec<u8>>, end: End },
}

impl Exchange {
    /// A machine at the start of a connection (the pump's `cin` may already
    /// hold bytes: the forward proxy's first request, or bytes a client sent
    /// behind its CONNECT).
    pub fn new(mut config: ExchangeConfig) -> Exchange {
        for u in &mut config.upgrades {
            u.make_ascii_lowercase();
        }
        Exchange {
            config,
            req: Req::Head,
            resp: Resp::Head,
            due: VecDeque::new(),
            answer_bytes: 0,
            records: VecDeque::new(),
            records_dropped: 0,
            client_eof: false,
            upstream_eof: false,
            upstream_cut: false,
            upstream_failure: None,
            upstream_pending: false,
            wait_id: 0,
            partial_head: false,
            heads: 0,
            request_gate: HeadGate::default(),
            response_gate: HeadGate::default(),
            phase: Phase::Open,
        }
    }

    /// May the connection switch to raw bytes for Upgrade `token`
    /// (`name` or `name/version`, any case)? The inspecting rules decide
    /// (every one must list it; an audit-mode rule only would-deny), and
    /// without rules the configured tokens (by default `websocket`).
    pub(crate) fn upgrade_verdict(&self, token: &str) -> Verdict {
        let name = token.split_once('/').map_or(token, |(n, _)| n);
        match &self.config.rules {
            Some(rules) => rules.upgrade(name),
            None if checks::upgrade_allowed(&token.to_ascii_lowercase(), &self.config.upgrades) => {
                Verdict::Allow(format!("upgrade {name:?}").into())
            }
            None => Verdict::Deny(format!("upgrade {name:?} is not allowed").into()),
        }
    }

    /// The client finished sending (EOF, possibly a half-close). Requests
    /// already in `cin` are still served.
    pub fn client_eof(&mut self) {
        self.client_eof = true;
    }

    /// The upstream finished sending. What it sent is still relayed; then a
    /// response still due gets 502 (nothing of it sent yet) or the
    /// connection ends.
    pub fn upstream_eof(&mut self) {
        self.upstream_eof = true;
    }

    /// The upstream's stream ended without a clean end: a reset, an
    /// error, or over TLS a TCP EOF with no close_notify (a forged FIN, a
    /// crashed server). Like [`Exchange::upstream_eof`], except that a
    /// response whose body runs to the end of the connection is cut short
    /// ([`End::UpstreamClosed`], no answer: the client is reset), not
    /// complete: only a clean end vouches for such a body.
    pub fn upstream_cut(&mut self) {
        self.upstream_eof = true;
        self.upstream_cut = true;
    }

    /// The upstream failed for a reason the client should hear (a TLS
    /// certificate it would not accept, say): like [`Exchange::upstream_cut`],
    /// but the 502 carries `X-Proxy-Error: <cause>; <why>`, and if no
    /// request is due yet, the client's next request is answered with it.
    pub fn upstream_failed(&mut self, cause: &str, why: &str) {
        self.upstream_eof = true;
        self.upstream_cut = true;
        self.upstream_failure = Some((cause.to_owned(), why.to_owned()));
    }

    /// The 502 for a failed upstream: `(cause, why)` as answered.
    fn failure_answer(&self) -> Option<(String, String)> {
        self.upstream_failure
            .as_ref()
            .map(|(cause, why)| (format!("{cause}; {why}"), why.clone()))
    }

    /// Where the conversation stands, after the pump moved what it could.
    pub fn status(&self) -> Status {
        match &self.phase {
            Phase::Open => Status::Open,
            Phase::Upgraded => Status::Upgraded,
            Phase::Closed { answer, end } => Status::Closed {
                answer: answer.clone(),
                end: end.clone(),
            },
        }
    }

    /// `Some(id)` while the response timer should run: the answer due next
    /// is the upstream's, its request is wholly sent (or broke and goes
    /// no further), and its response head has not arrived whole. A new
    /// `id` is a new wait: restart the clock.
    pub fn awaiting_response(&self) -> Option<u64> {
        if !matches!(self.phase, Phase::Open)
            || !matches!(self.resp, Resp::Head)
            || self.upstream_pending
        {
            return None;
        }
        match self.due.front() {
            // (Broken, with no head begun, is answered at once.)
            Some(Due::Upstream(f))
                if matches!(f.progress, Progress::Sent | Progress::Broken(_)) =>
            {
                Some(self.wait_id)
            }
            _ => None,
        }
    }

    /// `Some(id)` while the head timer should run: the client has sent the
    /// start of a request head and not its end (between requests, and
    /// while the machine holds the client back, it is `None`). A new `id`
    /// is a new head: restart the clock. When it fires, call
    /// [`Exchange::head_timeout`].
    pub fn awaiting_head(&self) -> Option<u64> {
        let at_head = matches!(self.phase, Phase::Open) && matches!(self.req, Req::Head);
        (at_head && self.partial_head).then_some(self.heads)
    }

    /// The response timer fired. If a response is still awaited, the
    /// conversation ends with a 504 (see [`Exchange::status`]) and this
    /// returns true; otherwise (a stale timer) nothing changes.
    pub fn response_timeout(&mut self) -> bool {
        if self.awaiting_response().is_none() {
            return false;
        }
        let why = "the upstream did not answer in time";
        let answer = crate::protocol::http::error_response(504, "response-timeout", why, &[]);
        self.close(End::ResponseTimeout, Some((504, answer)));
        true
    }

    /// The connection ended under the machine (the client went, a clock
    /// ran out with nothing to answer): every request still due is
    /// recorded, unanswered, as when the conversation ends by itself.
    pub fn abandon(&mut self) {
        if matches!(self.phase, Phase::Open) {
            self.close(End::Done, None);
        }
    }

    /// The host every request must name, when not the tunnel's target: see
    /// [`ExchangeConfig::vetted_host`].
    pub fn set_vetted_host(&mut self, host: Option<Target>) {
        self.config.vetted_host = host;
    }

    /// New request rules after a policy reload (`None`: every request
    /// allowed); they judge the next request parsed.
    pub fn set_rules(&mut self, rules: Option<Arc<dyn RequestJudge>>) {
        self.config.rules = rules;
    }

    /// New secrets after a reload; they apply from the next request parsed.
    pub fn set_secrets(&mut self, secrets: Option<Arc<dyn HeaderSecrets>>) {
        self.config.secrets = secrets;
    }

    /// Holds later requests to this login (see [`ExchangeConfig::login`]).
    pub fn set_login(&mut self, login: Option<SameLogin>) {
        self.config.login = login;
    }

    /// The login later requests are held to, if any.
    pub fn login(&self) -> Option<&SameLogin> {
        self.config.login.as_ref()
    }

    /// The finished per-request records, oldest first: one per request
    /// parsed (or refused unparsed), once the client got its status, or
    /// once the conversation ended without answering it.
    pub fn take_records(&mut self) -> std::collections::vec_deque::Drain<'_, Record> {
        self.records.drain(..)
    }

    /// Records dropped because nobody took them in time.
    pub fn records_dropped(&self) -> u64 {
        self.records_dropped
    }

    /// How much the machine holds.
    pub fn queued(&self) -> Queued {
        Queued {
            exchanges: self.due.len(),
            answer_bytes: self.answer_bytes,
            records: self.records.len(),
        }
    }

    fn push_record(&mut self, record: Record) {
        if self.records.len() >= MAX_RECORDS {
            self.records.pop_front();
            self.records_dropped += 1;
        }
        self.records.push_back(record);
    }

    /// Ends the conversation; `answer` (status, bytes) answers the exchange
    /// at the front. Every record still pending is finished.
    fn close(&mut self, end: End, answer: Option<(u16, Vec<u8>)>) {
        let mut status = answer.as_ref().map(|(s, _)| *s);
        while let Some(due) = self.due.pop_front() {
            let record = match due {
                Due::Upstream(f) => f.record,
                Due::Local(l) => {
                    self.answer_bytes -= l.cost();
                    l.record
                }
            };
            if let Some(mut r) = record {
                r.status = status;
                self.push_record(r);
            }
            status = None;
        }
        self.req = Req::Stopped;
        self.phase = Phase::Closed {
            answer: answer.map(|(_, a)| a),
            end,
        };
    }

    /// After each call: a connection whose requests are over and all
    /// answered is done.
    fn settle(&mut self) {
        if matches!(self.phase, Phase::Open)
            && matches!(self.req, Req::Stopped)
            && matches!(self.resp, Resp::Head)
            && self.due.is_empty()
        {
            self.close(End::Done, None);
        }
    }
}
