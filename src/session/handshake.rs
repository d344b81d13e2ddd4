//! Handshake: read the client's request (HTTP CONNECT or SOCKS5), answer
//! what must be answered before a target is known, and hand the target on.
//!
//! With users configured, the client's credentials are checked here: a
//! plaintext user or a remembered login at once, an argon2 hash on the
//! verifier pool, while the handshake waits in its `authenticating`
//! sub-stage (the handshake deadline still running).

use std::sync::Arc;

use super::associate;
use super::closing::{answer, refuse};
use super::conn::Conn;
use super::connect;
use super::ctx::Ctx;
use super::endpoint::Endpoint;
use super::refusal::{Dialect, Refusal};
use super::state::State;
use crate::auth::{Check, Verdict};
use crate::config::ListenerProtocol;
use crate::io::Io;
use crate::lifecycle::CloseReason;
use crate::policy::Target;
use crate::protocol::http::{self, HeadError};
use crate::protocol::http1::{self, SameLogin};
use crate::protocol::sniff::{sniff, Sniffed};
use crate::protocol::socks5::{self, Parse};

/// How much to read per syscall while the request is incomplete.
const READ_CHUNK: usize = 4096;

/// The limit named when the verifier pool's queue is full.
const BUSY: &str = "login verification queue";

pub(crate) struct Handshake {
    client: Endpoint,
    protocol: ListenerProtocol,
    /// Past this limit: answer the client in its dialect as soon as it is
    /// known, then close.
    refusing: Option<&'static str>,
    stage: Stage,
    /// Bytes read and not yet parsed.
    buf: Vec<u8>,
    /// Bytes owed to the client (SOCKS5 method and auth replies), flushed
    /// before anything else is parsed.
    owed: Vec<u8>,
    /// The user the client authenticated as.
    user: Option<Arc<str>>,
    /// The HTTP credentials given, for the forward proxy to hold later
    /// requests on the connection to.
    login: Option<SameLogin>,
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
    /// Parsed one message and stay in the handshake (a SOCKS5 stage ended).
    Again,
    /// Leave the handshake: for a target, or refused.
    Leave(Leave),
}

/// How the handshake ends.
enum Leave {
    /// The request named a target: on to policy and the connect.
    To {
        target: Target,
        dialect: Dialect,
        early: Vec<u8>,
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

impl Handshake {
    pub(crate) fn new(
        client: Endpoint,
        protocol: ListenerProtocol,
        refusing: Option<&'static str>,
    ) -> Self {
        Handshake {
            client,
            protocol,
            refusing,
            stage: Stage::Sniff,
            buf: Vec::new(),
            owed: Vec::new(),
            user: None,
            login: None,
        }
    }

    pub(crate) fn is_refusing(&self) -> bool {
        self.refusing.is_some()
    }

    pub(crate) fn stage(&self) -> &'static str {
        self.stage.name()
    }

    pub(crate) fn client(&mut self) -> &mut Endpoint {
        &mut self.client
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, ctx: &mut Ctx) -> State {
        if self.client.failed() {
            return State::Done(CloseReason::ClientGone);
        }
        if let Stage::Authenticating(_) = self.stage {
            // Nothing is read until the verdict: pipelined bytes wait in the kernel.
            self.client.want(false, false);
            return State::Handshake(self);
        }
        loop {
            self.client
                .want(self.owed.is_empty(), !self.owed.is_empty());
            if !self.owed.is_empty() {
                if !self.client.can_write() {
                    return State::Handshake(self);
                }
                match self.client.write(&self.owed) {
                    Io::Progress(n) => {
                        self.owed.drain(..n);
                        continue;
                    }
                    Io::WouldBlock => return State::Handshake(self),
                    Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
                }
            }
            match self.parse(ctx) {
                // A new stage: through the transition point (it is logged),
                // then driven again at once.
                Parsed::Again => return State::Handshake(self),
                Parsed::Leave(leave) => return self.leave(leave, conn, ctx),
                Parsed::More => {}
            }
            if !self.client.can_read() {
                return State::Handshake(self);
            }
            let limit = ctx.settings.limits.max_head_bytes;
            let len = self.buf.len();
            if len >= limit {
                let dialect = self.stage.dialect();
                return refuse(Refusal::HeadTooLarge, dialect, self.client, conn, ctx);
            }
            self.buf.resize(len + READ_CHUNK.min(limit - len), 0);
            let io = self.client.read(&mut self.buf[len..]);
            self.buf
                .truncate(len + if let Io::Progress(n) = io { n } else { 0 });
            match io {
                Io::Progress(_) => {}
                Io::WouldBlock => return State::Handshake(self),
                // The client left before finishing its request.
                Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
            }
        }
    }

    /// Leaves the handshake, handing the client socket on.
    fn leave(mut self, leave: Leave, conn: &mut Conn, ctx: &mut Ctx) -> State {
        // For the events: how the client spoke, and (past auth) as whom.
        let dialect = match &leave {
            Leave::To { dialect, .. } | Leave::Refuse(_, dialect) => *dialect,
            Leave::Answer { .. } | Leave::Associate { .. } => self.stage.dialect(),
        };
        conn.log.protocol = Some(dialect.into());
        conn.log.user = self.user.as_deref().map(Box::from);
        let login = self.login.take().filter(|_| self.user.is_some());
        match leave {
            Leave::To {
                target,
                dialect,
                early,
            } => connect::start(self.client, target, dialect, early, login, conn, ctx),
            Leave::Refuse(refusal, dialect) => refuse(refusal, dialect, self.client, conn, ctx),
            Leave::Associate { port } => associate::start(self.client, port, conn, ctx),
            Leave::Answer { bytes, reason, why } => {
                answer(&bytes, reason, why, self.client, conn, ctx)
            }
        }
    }

    /// The verifier pool's verdict on the credentials given.
    pub(crate) fn on_verified(mut self, verdict: Verdict, conn: &mut Conn, ctx: &mut Ctx) -> State {
        let Stage::Authenticating(via) = self.stage else {
            return State::Handshake(self);
        };
        let parsed = self.verdict(verdict, via, ctx);
        match parsed {
            Parsed::Leave(leave) => self.leave(leave, conn, ctx),
            Parsed::More | Parsed::Again => State::Handshake(self),
        }
    }

    /// Checks a login: accepted or refused at once, or handed to the
    /// verifier pool (the handshake then waits, authenticating).
    fn login(&mut self, user: &[u8], password: &[u8], via: Via, ctx: &mut Ctx) -> Parsed {
        let Some(users) = &ctx.settings.auth else {
            return Parsed::Again;
        };
        match users.check(user, password, ctx.logins) {
            Check::Accepted(name) => self.verdict(Verdict::Accepted(name), via, ctx),
            Check::Rejected => self.verdict(Verdict::Rejected, via, ctx),
            Check::Verify(job) => {
                ctx.verify(job);
                self.stage = Stage::Authenticating(via);
                Parsed::Again
            }
        }
    }

    /// Acts on a login's verdict.
    fn verdict(&mut self, verdict: Verdict, via: Via, ctx: &mut Ctx) -> Parsed {
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
                ctx.stats.login_rejected();
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

    fn parse(&mut self, ctx: &mut Ctx) -> Parsed {
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
            Stage::Http => self.parse_http(ctx),
            Stage::SocksGreeting => self.parse_greeting(ctx),
            Stage::SocksAuth => self.parse_auth(ctx),
            Stage::Authenticating(_) => Parsed::More,
            Stage::SocksRequest => self.parse_request(),
        }
    }

    fn parse_http(&mut self, ctx: &mut Ctx) -> Parsed {
        let refuse_http = |r| Parsed::Leave(Leave::Refuse(r, Dialect::Http));
        let (head, n) =
            match http::parse_request_head(&self.buf, ctx.settings.limits.max_head_bytes) {
                Ok(None) => return Parsed::More,
                Ok(Some(parsed)) => parsed,
                Err(HeadError::TooLarge) => return refuse_http(Refusal::HeadTooLarge),
                Err(HeadError::Malformed(why)) => return refuse_http(Refusal::Malformed(why)),
            };
        if ctx.settings.auth.is_some() && self.user.is_none() {
            let given = head
                .header("Proxy-Authorization")
                .and_then(http::basic_auth_credentials);
            let Some((user, password)) = given else {
                return refuse_http(Refusal::AuthRequired);
            };
            self.login = Some(ctx.logins.same_login(&user, &password));
            match self.login(&user, &password, Via::Http, ctx) {
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
        })
    }

    fn parse_greeting(&mut self, ctx: &mut Ctx) -> Parsed {
        match socks5::parse_greeting(&self.buf) {
            Parse::Incomplete => Parsed::More,
            Parse::Invalid(e) => Parsed::Leave(Leave::Refuse(
                Refusal::Malformed(format!("SOCKS5 greeting: {e:?}")),
                Dialect::Socks5,
            )),
            Parse::Done(greeting, n) => {
                self.buf.drain(..n);
                let (method, next) = match ctx.settings.auth {
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

    fn parse_auth(&mut self, ctx: &mut Ctx) -> Parsed {
        match socks5::parse_user_pass(&self.buf) {
            Parse::Incomplete => Parsed::More,
            Parse::Invalid(_) => self.verdict(Verdict::Rejected, Via::Socks, ctx),
            Parse::Done(up, n) => {
                self.buf.drain(..n);
                self.login(&up.username, &up.password, Via::Socks, ctx)
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
        })
    }
}
