//! The client's handshake, as the core runs it: tell HTTP from SOCKS5,
//! parse the request (an HTTP `CONNECT` or forward-proxy head; the SOCKS5
//! greeting, RFC 1929 login and request), write the SOCKS5 replies owed
//! before a target is known, check the client's credentials, and say how
//! the handshake ends.
//!
//! It is the first stage of [`super::opening::OpeningCore`], which lends
//! it the client's port, turns its answers into the machine's, and goes on
//! to establish the target its [`Exit`] names:
//!
//! ```text
//! on readiness:  next = core.pump(client, env)
//! on a verdict:  next = core.handle_verdict(verdict)
//! at core.poll_timeout():  next = core.handle_timeout(now, env)
//! next: Stay (wait; or a new sub-stage, logged, then pumped again)
//!       Verify(job) (to the verifier pool; the verdict comes back)
//!       Gone (the client left) | TimedOut (the deadline passed)
//!       Leave(Exit) (to a target, an association, a refusal, an answer)
//! ```
//!
//! With users configured, a plaintext user or a remembered login is
//! decided at once; an argon2 hash becomes a [`Next::Verify`], and the
//! core waits, `authenticating`, reading nothing, until the verdict.
//!
//! The action is returned, not kept for a `poll_action()`: a pending
//! verification is larger than the rest of the handshake, and a session's
//! slot is sized by its largest state.

use std::sync::Arc;
use std::time::Instant;

use super::clock::Deadline;
use super::port::{send_owed, Port, Sent};
use super::refusal::{Dialect, Refusal};
use crate::auth::basic::{basic_auth_credentials, SameLogin};
use crate::auth::cache::LoginCache;
use crate::auth::{Check, Users, Verdict, Verify};
use crate::config::ListenerProtocol;
use crate::io::Io;
use crate::lifecycle::CloseReason;
use crate::protocol::http::{self, HeadError, HeadGate};
use crate::protocol::http1;
use crate::protocol::sniff::{sniff, Sniffed};
use crate::protocol::socks5::{self, Parse};
use crate::target::Target;

/// How much to read per call while the request is incomplete.
const READ_CHUNK: usize = 4096;

/// The limit named when the verifier pool's queue is full.
const BUSY: &str = "login verification queue";

/// What the handshake needs from the proxy's settings, lent per call.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    /// `limits.max_head_bytes`: the most a request may take.
    pub(crate) max_head_bytes: usize,
    /// The users, when clients must authenticate.
    pub(crate) users: Option<&'a Users>,
    /// Logins verified already.
    pub(crate) logins: &'a LoginCache,
}

/// Where the handshake stands after a call.
#[derive(Debug)]
pub(crate) enum Next {
    /// Still in the handshake: waiting for the client's readiness or a
    /// verdict, or in a new sub-stage, which the shell logs and pumps again.
    Stay,
    /// Verify this login on the verifier pool and hand the verdict to
    /// [`HandshakeCore::handle_verdict`]; meanwhile the core waits in its
    /// `authenticating` sub-stage (a new one: pumped again, it reads nothing).
    Verify(Verify),
    /// The client left, or its socket failed, before its request was whole.
    Gone,
    /// The deadline passed first (from [`HandshakeCore::handle_timeout`]).
    TimedOut,
    /// The handshake is over.
    Leave(Exit),
}

/// How the handshake ended, and what the access record learns of it.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) leave: Leave,
    /// How the client spoke, for the events (a request refused for its size
    /// before it was parsed: as far as the sniffing got).
    pub(crate) spoke: Dialect,
    /// The user the client authenticated as.
    pub(crate) user: Option<Arc<str>>,
    /// A login was rejected (the shell counts it).
    pub(crate) rejected: bool,
}

/// Where the client goes from the handshake.
#[derive(Debug)]
pub(crate) enum Leave {
    /// The request named a target: on to policy and the connect.
    To {
        target: Target,
        dialect: Dialect,
        /// Bytes the client sent behind its request (a pipelined TLS
        /// ClientHello; the whole head, for the forward proxy to parse):
        /// they go upstream, never dropped.
        early: Vec<u8>,
        /// The HTTP credentials the user logged in with, for the forward
        /// proxy to hold later requests on the connection to.
        login: Option<SameLogin>,
    },
    /// SOCKS5 UDP ASSOCIATE: a relay for the client's datagrams, from
    /// this source port (0: as its first datagram says).
    Associate { port: u16 },
    /// Refused: answered in the client's dialect, then closed.
    Refuse(Refusal, Dialect),
    /// Answered with these bytes (a SOCKS5 method or auth failure), then closed.
    Answer {
        bytes: Vec<u8>,
        reason: CloseReason,
        why: String,
    },
}

/// The client's handshake; see the module docs.
pub(crate) struct HandshakeCore {
    protocol: ListenerProtocol,
    /// Past this limit: answer the client in its dialect as soon as it is
    /// known, then close.
    refusing: Option<&'static str>,
    stage: Stage,
    /// Bytes read and not yet parsed.
    buf: Vec<u8>,
    /// When the HTTP head in `buf` is worth parsing again.
    gate: HeadGate,
    /// Bytes owed to the client (SOCKS5 method and auth replies), flushed
    /// before anything else is parsed.
    owed: Vec<u8>,
    /// The user the client authenticated as.
    user: Option<Arc<str>>,
    /// The HTTP credentials given, for the forward proxy to hold later
    /// requests on the connection to.
    login: Option<SameLogin>,
    /// A login was rejected on the way to the exit.
    rejected: bool,
    /// The whole handshake's deadline: sub-stages do not extend it.
    deadline: Deadline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Sniff,
    Http,
    SocksGreeting,
    SocksAuth,
    /// Waiting for the verifier pool's verdict on the credentials given
    /// in this protocol; nothing is read meanwhile.
    Authenticating(Via),
    SocksRequest,
}

/// Which protocol's credentials are being verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `Proxy-Authorization: Basic`: the head is still buffered, and is
    /// parsed again once the user is known.
    Http,
    /// RFC 1929: the auth status is owed once the verdict is in.
    Socks,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Sniff => "sniff",
            Stage::Http => "http",
            Stage::SocksGreeting => "socks5-greeting",
            Stage::SocksAuth => "socks5-auth",
            Stage::Authenticating(_) => "authenticating",
            Stage::SocksRequest => "socks5-request",
        }
    }

    fn dialect(self) -> Dialect {
        match self {
            Stage::Sniff | Stage::Http | Stage::Authenticating(Via::Http) => Dialect::Http,
            _ => Dialect::Socks5,
        }
    }
}

/// What parsing the buffered bytes led to.
enum Parsed {
    /// Need more bytes.
    More,
    /// Parsed one message and stay in the handshake (a sub-stage ended).
    Again,
    /// Hand this login to the verifier pool (now authenticating).
    Verify(Verify),
    /// Leave the handshake: for a target, or refused.
    Leave(Leave),
}

impl HandshakeCore {
    /// A handshake on a listener speaking `protocol`; `refusing` names the
    /// limit the proxy is past, when the client is only to be told so. It
    /// must be over by `deadline`.
    pub(crate) fn new(
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
        deadline: Deadline,
    ) -> Self {
        HandshakeCore {
            protocol,
            refusing,
            stage: Stage::Sniff,
            buf: Vec::new(),
            gate: HeadGate::default(),
            owed: Vec::new(),
            user: None,
            login: None,
            rejected: false,
            deadline,
        }
    }

    pub(crate) fn is_refusing(&self) -> bool {
        self.refusing.is_some()
    }

    /// The sub-stage, as the session's state names it.
    pub(crate) fn stage(&self) -> &'static str {
        self.stage.name()
    }

    /// Moves what the client's readiness allows: flushes what is owed,
    /// parses, reads. Returns at a sub-stage's end, so the shell can log it.
    pub(crate) fn pump<P: Port>(&mut self, port: &mut P, env: Env<'_>) -> Next {
        if port.failed() {
            return Next::Gone;
        }
        if let Stage::Authenticating(_) = self.stage {
            // Nothing is read until the verdict: pipelined bytes wait in the kernel.
            port.want_read(false);
            port.want_write(false);
            return Next::Stay;
        }
        loop {
            match send_owed(port, &mut self.owed) {
                Sent::All => {}
                Sent::Wait => return Next::Stay,
                Sent::Gone => return Next::Gone,
            }
            port.want_read(true);
            port.want_write(false);
            match self.parse(env) {
                // A new sub-stage: the shell logs it, then pumps again at once.
                Parsed::Again => return Next::Stay,
                Parsed::Verify(job) => return Next::Verify(job),
                Parsed::Leave(leave) => return Next::Leave(self.exit(leave)),
                Parsed::More => {}
            }
            if !port.can_read() {
                return Next::Stay;
            }
            let limit = env.max_head_bytes;
            let len = self.buf.len();
            if len >= limit {
                // Refused unparsed, but the access line still says how the
                // client spoke and, past a SOCKS5 login, as whom.
                let refuse = Leave::Refuse(Refusal::HeadTooLarge, self.stage.dialect());
                return Next::Leave(self.exit(refuse));
            }
            self.buf.resize(len + READ_CHUNK.min(limit - len), 0);
            let io = port.read(&mut self.buf[len..]);
            self.buf
                .truncate(len + if let Io::Progress(n) = io { n } else { 0 });
            match io {
                Io::Progress(_) => {}
                Io::WouldBlock => return Next::Stay,
                // The client left before finishing its request. A head
                // the gate held back is looked at once more: a malformed
                // start is refused, as it would have been on arrival.
                Io::Eof | Io::PeerGone(_) => {
                    let end = matches!(self.stage, Stage::Http) && self.refusing.is_none();
                    return match end.then(|| self.parse_http(env, true)) {
                        Some(Parsed::Leave(leave)) => Next::Leave(self.exit(leave)),
                        Some(Parsed::Verify(job)) => Next::Verify(job),
                        _ => Next::Gone,
                    };
                }
            }
        }
    }

    /// When the handshake runs out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline.at()
    }

    /// The time is `now`: `None` while the deadline has not passed. Past
    /// it, an HTTP head the gate held back is looked at first: a malformed
    /// start is refused for what it is (a 400), as it would have been on
    /// arrival ([`Next::Leave`]), not closed as timed out
    /// ([`Next::TimedOut`]).
    pub(crate) fn handle_timeout(&mut self, now: Instant, env: Env<'_>) -> Option<Next> {
        if !self.deadline.passed(now) {
            return None;
        }
        if self.stage != Stage::Http || self.refusing.is_some() {
            return Some(Next::TimedOut);
        }
        Some(match self.parse_http(env, true) {
            Parsed::Leave(leave @ Leave::Refuse(..)) => Next::Leave(self.exit(leave)),
            _ => Next::TimedOut,
        })
    }

    /// The verifier pool's verdict on the login of [`Next::Verify`]
    /// (ignored unless one is awaited).
    pub(crate) fn handle_verdict(&mut self, verdict: Verdict) -> Next {
        let Stage::Authenticating(via) = self.stage else {
            return Next::Stay;
        };
        match self.verdict(verdict, via) {
            Parsed::Leave(leave) => Next::Leave(self.exit(leave)),
            Parsed::More | Parsed::Again | Parsed::Verify(_) => Next::Stay,
        }
    }

    /// The exit through `leave`, with what the access record learns.
    fn exit(&mut self, mut leave: Leave) -> Exit {
        // For the events: how the client spoke, and (past auth) as whom.
        let spoke = match &leave {
            Leave::To { dialect, .. } | Leave::Refuse(_, dialect) => *dialect,
            Leave::Answer { .. } | Leave::Associate { .. } => self.stage.dialect(),
        };
        if let Leave::To { login, .. } = &mut leave {
            *login = self.login.take().filter(|_| self.user.is_some());
        }
        Exit {
            leave,
            spoke,
            user: self.user.take(),
            rejected: self.rejected,
        }
    }

    /// Checks a login: accepted or refused at once, or handed to the
    /// verifier pool (the handshake then waits, authenticating).
    fn login(&mut self, user: &[u8], password: &[u8], via: Via, env: Env<'_>) -> Parsed {
        let Some(users) = env.users else {
            return Parsed::Again;
        };
        match users.check(user, password, env.logins) {
            Check::Accepted(name) => self.verdict(Verdict::Accepted(name), via),
            Check::Rejected => self.verdict(Verdict::Rejected, via),
            Check::Verify(job) => {
                self.stage = Stage::Authenticating(via);
                Parsed::Verify(job)
            }
        }
    }

    /// Acts on a login's verdict.
    fn verdict(&mut self, verdict: Verdict, via: Via) -> Parsed {
        match (verdict, via) {
            (Verdict::Accepted(name), Via::Http) => {
                self.user = Some(name);
                self.stage = Stage::Http;
                Parsed::Again
            }
            (Verdict::Accepted(name), Via::Socks) => {
                self.user = Some(name);
                self.owed.extend_from_slice(&socks5::auth_status(true));
                self.stage = Stage::SocksRequest;
                Parsed::Again
            }
            (Verdict::Rejected, via) => {
                self.rejected = true;
                match via {
                    Via::Http => Parsed::Leave(Leave::Refuse(Refusal::AuthRequired, Dialect::Http)),
                    Via::Socks => Parsed::Leave(Leave::Answer {
                        bytes: socks5::auth_status(false).to_vec(),
                        reason: CloseReason::AuthFailed,
                        why: "SOCKS5 credentials rejected".into(),
                    }),
                }
            }
            (Verdict::Busy, Via::Http) => {
                Parsed::Leave(Leave::Refuse(Refusal::Limit(BUSY), Dialect::Http))
            }
            (Verdict::Busy, Via::Socks) => Parsed::Leave(Leave::Answer {
                bytes: socks5::auth_status(false).to_vec(),
                reason: CloseReason::Limit,
                why: format!("the proxy is at its {BUSY} limit; try again later"),
            }),
        }
    }

    fn parse(&mut self, env: Env<'_>) -> Parsed {
        match self.stage {
            Stage::Sniff => {
                let Some(&first) = self.buf.first() else {
                    return Parsed::More;
                };
                self.stage = match (self.protocol, sniff(first)) {
                    (ListenerProtocol::Socks5, _) | (ListenerProtocol::Auto, Sniffed::Socks5) => {
                        Stage::SocksGreeting
                    }
                    (ListenerProtocol::Http, _) | (ListenerProtocol::Auto, Sniffed::Http) => {
                        Stage::Http
                    }
                };
                Parsed::Again
            }
            // A client past a limit is told as soon as its dialect is known
            // (for SOCKS5, once its greeting is whole).
            Stage::Http if self.refusing.is_some() => {
                let limit = self.refusing.unwrap_or_default();
                Parsed::Leave(Leave::Refuse(Refusal::Limit(limit), Dialect::Http))
            }
            Stage::SocksGreeting if self.refusing.is_some() => {
                match socks5::parse_greeting(&self.buf) {
                    Parse::Incomplete => Parsed::More,
                    Parse::Invalid(_) | Parse::Done(..) => {
                        let limit = self.refusing.unwrap_or_default();
                        Parsed::Leave(Leave::Refuse(Refusal::Limit(limit), Dialect::Socks5))
                    }
                }
            }
            Stage::Http => self.parse_http(env, false),
            Stage::SocksGreeting => self.parse_greeting(env),
            Stage::SocksAuth => self.parse_auth(env),
            Stage::Authenticating(_) => Parsed::More,
            Stage::SocksRequest => self.parse_request(),
        }
    }

    /// The HTTP head in `buf`, when the gate lets it through; always at
    /// `end` (the client's EOF: nothing more will come).
    fn parse_http(&mut self, env: Env<'_>, end: bool) -> Parsed {
        let refuse_http = |r| Parsed::Leave(Leave::Refuse(r, Dialect::Http));
        if !self.gate.due(&self.buf, env.max_head_bytes, end) {
            return Parsed::More;
        }
        let parsed = http::parse_request_head(&self.buf, env.max_head_bytes);
        self.gate.parsed(&parsed);
        let (head, n) = match parsed {
            Ok(None) => return Parsed::More,
            Ok(Some(parsed)) => parsed,
            Err(HeadError::TooLarge) => return refuse_http(Refusal::HeadTooLarge),
            Err(HeadError::Malformed(why)) => return refuse_http(Refusal::Malformed(why)),
        };
        if env.users.is_some() && self.user.is_none() {
            let given = head
                .header("Proxy-Authorization")
                .and_then(basic_auth_credentials);
            let Some((user, password)) = given else {
                return refuse_http(Refusal::AuthRequired);
            };
            self.login = Some(env.logins.same_login(&user, &password));
            match self.login(&user, &password, Via::Http, env) {
                // Accepted at once: on with this head, as the user.
                Parsed::Again if self.user.is_some() => {}
                other => return other,
            }
        }
        if head.method != "CONNECT" {
            return self.forward(head);
        }
        let target = match Target::parse_authority(&head.target) {
            Ok(t) => t,
            Err(e) => return refuse_http(Refusal::BadHost(e.0)),
        };
        // Whatever followed the head (a pipelined TLS ClientHello) is the
        // client's first payload: it goes upstream, never dropped.
        let early = self.buf.split_off(n);
        Parsed::Leave(Leave::To {
            target,
            dialect: Dialect::Http,
            early,
            login: None,
        })
    }

    /// Any method but CONNECT: with an absolute URI (`GET http://host/path`)
    /// the forward proxy takes it; the head stays buffered for it to parse.
    fn forward(&mut self, head: http::RequestHead) -> Parsed {
        let refuse_http = |r| Parsed::Leave(Leave::Refuse(r, Dialect::Http));
        let abs = match http1::parse_absolute_target(&head.target) {
            Ok(Some(abs)) => abs,
            Ok(None) => return refuse_http(Refusal::Method(head.method)),
            Err(why) => return refuse_http(Refusal::Malformed(why)),
        };
        let target = match Target::new(&abs.host, abs.port) {
            Ok(t) => t,
            Err(e) => return refuse_http(Refusal::BadHost(e.0)),
        };
        let dialect = if abs.tls {
            Dialect::ForwardTls
        } else {
            Dialect::Forward
        };
        Parsed::Leave(Leave::To {
            target,
            dialect,
            early: std::mem::take(&mut self.buf),
            login: None,
        })
    }

    fn parse_greeting(&mut self, env: Env<'_>) -> Parsed {
        match socks5::parse_greeting(&self.buf) {
            Parse::Incomplete => Parsed::More,
            Parse::Invalid(e) => Parsed::Leave(Leave::Refuse(
                Refusal::Malformed(format!("SOCKS5 greeting: {e:?}")),
                Dialect::Socks5,
            )),
            Parse::Done(greeting, n) => {
                self.buf.drain(..n);
                let (method, next) = match env.users {
                    Some(_) => (socks5::METHOD_USER_PASS, Stage::SocksAuth),
                    None => (socks5::METHOD_NO_AUTH, Stage::SocksRequest),
                };
                if !greeting.methods.contains(&method) {
                    return Parsed::Leave(Leave::Answer {
                        bytes: socks5::method_selection(socks5::METHOD_NONE_ACCEPTABLE).to_vec(),
                        reason: CloseReason::AuthFailed,
                        why: "no acceptable SOCKS5 authentication method".into(),
                    });
                }
                self.owed
                    .extend_from_slice(&socks5::method_selection(method));
                self.stage = next;
                Parsed::Again
            }
        }
    }

    fn parse_auth(&mut self, env: Env<'_>) -> Parsed {
        match socks5::parse_user_pass(&self.buf) {
            Parse::Incomplete => Parsed::More,
            Parse::Invalid(_) => self.verdict(Verdict::Rejected, Via::Socks),
            Parse::Done(up, n) => {
                self.buf.drain(..n);
                self.login(&up.username, &up.password, Via::Socks, env)
            }
        }
    }

    fn parse_request(&mut self) -> Parsed {
        let refuse_socks = |r| Parsed::Leave(Leave::Refuse(r, Dialect::Socks5));
        let (request, n) = match socks5::parse_request(&self.buf) {
            Parse::Incomplete => return Parsed::More,
            Parse::Invalid(e) => return refuse_socks(Refusal::Socks(e)),
            Parse::Done(request, n) => (request, n),
        };
        if request.command == socks5::Command::UdpAssociate {
            // Nothing may follow the request on the control connection.
            self.buf.drain(..n);
            return Parsed::Leave(Leave::Associate { port: request.port });
        }
        if request.command != socks5::Command::Connect {
            return refuse_socks(Refusal::SocksCommand);
        }
        let host = match &request.address {
            socks5::Address::Ip(ip) => ip.to_string(),
            socks5::Address::Domain(name) => name.clone(),
        };
        let target = match Target::new(&host, request.port) {
            Ok(t) => t,
            Err(e) => return refuse_socks(Refusal::BadHost(e.0)),
        };
        Parsed::Leave(Leave::To {
            target,
            dialect: Dialect::Socks5,
            early: self.buf.split_off(n),
            login: None,
        })
    }
}
