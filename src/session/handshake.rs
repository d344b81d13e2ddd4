//! Handshake: read the client's request (HTTP CONNECT or SOCKS5), answer
//! what must be answered before a target is known, and hand the target on.

use super::closing::refuse;
use super::connect;
use super::refusal::{Dialect, Refusal};
use super::state::State;
use super::Conn;
use crate::config::ListenerProtocol;
use crate::io::Io;
use crate::policy::Target;
use crate::protocol::http::{self, HeadError};
use crate::protocol::http1;
use crate::protocol::sniff::{sniff, Sniffed};
use crate::protocol::socks5::{self, Parse};
use crate::reactor::Core;
use crate::stats::CloseReason;

/// How much to read per syscall while the request is incomplete.
const READ_CHUNK: usize = 4096;

pub(crate) struct Handshake {
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Sniff,
    Http,
    SocksGreeting,
    SocksAuth,
    SocksRequest,
}

impl Stage {
    fn dialect(self) -> Dialect {
        match self {
            Stage::Sniff | Stage::Http => Dialect::Http,
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
    /// Leave the handshake.
    Leave(State),
}

impl Handshake {
    pub(crate) fn new(protocol: ListenerProtocol, refusing: Option<&'static str>) -> Self {
        Handshake {
            protocol,
            refusing,
            stage: Stage::Sniff,
            buf: Vec::new(),
            owed: Vec::new(),
        }
    }

    pub(crate) fn is_refusing(&self) -> bool {
        self.refusing.is_some()
    }

    pub(crate) fn drive(mut self, conn: &mut Conn, core: &mut Core) -> State {
        if conn.client.failed {
            return State::Done(CloseReason::ClientGone);
        }
        loop {
            if !self.owed.is_empty() {
                if !conn.client.writable {
                    return State::Handshake(self);
                }
                match conn.client.stream.write_from(&self.owed) {
                    Io::Progress(n) => {
                        self.owed.drain(..n);
                        continue;
                    }
                    Io::WouldBlock => {
                        conn.client.writable = false;
                        return State::Handshake(self);
                    }
                    Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
                }
            }
            match self.parse(conn, core) {
                Parsed::Again => continue,
                Parsed::Leave(next) => return next,
                Parsed::More => {}
            }
            if !conn.client.readable {
                return State::Handshake(self);
            }
            let limit = core.settings.limits.max_head_bytes;
            let len = self.buf.len();
            if len >= limit {
                return refuse(Refusal::HeadTooLarge, self.stage.dialect(), conn, core);
            }
            self.buf.resize(len + READ_CHUNK.min(limit - len), 0);
            let io = conn.client.stream.read_into(&mut self.buf[len..]);
            self.buf
                .truncate(len + if let Io::Progress(n) = io { n } else { 0 });
            match io {
                Io::Progress(_) => {}
                Io::WouldBlock => {
                    conn.client.readable = false;
                    return State::Handshake(self);
                }
                // The client left before finishing its request.
                Io::Eof | Io::PeerGone(_) => return State::Done(CloseReason::ClientGone),
            }
        }
    }

    fn parse(&mut self, conn: &mut Conn, core: &mut Core) -> Parsed {
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
                Parsed::Leave(refuse(Refusal::Limit(limit), Dialect::Http, conn, core))
            }
            Stage::SocksGreeting if self.refusing.is_some() => {
                match socks5::parse_greeting(&self.buf) {
                    Parse::Incomplete => Parsed::More,
                    Parse::Invalid(_) | Parse::Done(..) => {
                        let limit = self.refusing.unwrap_or_default();
                        Parsed::Leave(refuse(Refusal::Limit(limit), Dialect::Socks5, conn, core))
                    }
                }
            }
            Stage::Http => self.parse_http(conn, core),
            Stage::SocksGreeting => self.parse_greeting(conn, core),
            Stage::SocksAuth => self.parse_auth(conn, core),
            Stage::SocksRequest => self.parse_request(conn, core),
        }
    }

    fn parse_http(&mut self, conn: &mut Conn, core: &mut Core) -> Parsed {
        let refuse_http = |r, conn: &mut Conn, core: &mut Core| {
            Parsed::Leave(refuse(r, Dialect::Http, conn, core))
        };
        let (head, n) =
            match http::parse_request_head(&self.buf, core.settings.limits.max_head_bytes) {
                Ok(None) => return Parsed::More,
                Ok(Some(parsed)) => parsed,
                Err(HeadError::TooLarge) => return refuse_http(Refusal::HeadTooLarge, conn, core),
                Err(HeadError::Malformed(why)) => {
                    return refuse_http(Refusal::Malformed(why), conn, core)
                }
            };
        if let Some(creds) = &core.settings.auth {
            let ok = head
                .header("Proxy-Authorization")
                .is_some_and(|v| http::basic_auth_matches(v, &creds.username, &creds.password));
            if !ok {
                return refuse_http(Refusal::AuthRequired, conn, core);
            }
        }
        if head.method != "CONNECT" {
            return self.forward(head, conn, core);
        }
        let target = match Target::parse_authority(&head.target) {
            Ok(t) => t,
            Err(e) => return refuse_http(Refusal::BadHost(e.0), conn, core),
        };
        // Whatever followed the head (a pipelined TLS ClientHello) is the
        // client's first payload: it goes upstream, never dropped.
        let early = self.buf.split_off(n);
        Parsed::Leave(connect::start(target, Dialect::Http, early, conn, core))
    }

    /// Any method but CONNECT: with an absolute URI (`GET http://host/path`)
    /// the forward proxy takes it; the head stays buffered for it to parse.
    fn forward(&mut self, head: http::RequestHead, conn: &mut Conn, core: &mut Core) -> Parsed {
        let refuse_http = |r, conn: &mut Conn, core: &mut Core| {
            Parsed::Leave(refuse(r, Dialect::Http, conn, core))
        };
        let abs = match http1::parse_absolute_target(&head.target) {
            Ok(Some(abs)) => abs,
            Ok(None) => return refuse_http(Refusal::Method(head.method), conn, core),
            Err(why) => return refuse_http(Refusal::Malformed(why), conn, core),
        };
        let target = match Target::new(&abs.host, abs.port) {
            Ok(t) => t,
            Err(e) => return refuse_http(Refusal::BadHost(e.0), conn, core),
        };
        let early = std::mem::take(&mut self.buf);
        Parsed::Leave(connect::start(target, Dialect::Forward, early, conn, core))
    }

    fn parse_greeting(&mut self, conn: &mut Conn, core: &mut Core) -> Parsed {
        match socks5::parse_greeting(&self.buf) {
            Parse::Incomplete => Parsed::More,
            Parse::Invalid(e) => Parsed::Leave(refuse(
                Refusal::Malformed(format!("SOCKS5 greeting: {e:?}")),
                Dialect::Socks5,
                conn,
                core,
            )),
            Parse::Done(greeting, n) => {
                self.buf.drain(..n);
                let (method, next) = match core.settings.auth {
                    Some(_) => (socks5::METHOD_USER_PASS, Stage::SocksAuth),
                    None => (socks5::METHOD_NO_AUTH, Stage::SocksRequest),
                };
                if !greeting.methods.contains(&method) {
                    let none = socks5::method_selection(socks5::METHOD_NONE_ACCEPTABLE);
                    let why = "no acceptable SOCKS5 authentication method".to_string();
                    return Parsed::Leave(super::closing::answer(
                        &none,
                        CloseReason::AuthFailed,
                        why,
                        conn,
                        core,
                    ));
                }
                self.owed
                    .extend_from_slice(&socks5::method_selection(method));
                self.stage = next;
                Parsed::Again
            }
        }
    }

    fn parse_auth(&mut self, conn: &mut Conn, core: &mut Core) -> Parsed {
        let ok = match socks5::parse_user_pass(&self.buf) {
            Parse::Incomplete => return Parsed::More,
            Parse::Invalid(_) => false,
            Parse::Done(up, n) => {
                self.buf.drain(..n);
                core.settings.auth.as_ref().is_some_and(|c| {
                    up.username == c.username.as_bytes() && up.password == c.password.as_bytes()
                })
            }
        };
        if !ok {
            let why = "SOCKS5 credentials rejected".to_string();
            return Parsed::Leave(super::closing::answer(
                &socks5::auth_status(false),
                CloseReason::AuthFailed,
                why,
                conn,
                core,
            ));
        }
        self.owed.extend_from_slice(&socks5::auth_status(true));
        self.stage = Stage::SocksRequest;
        Parsed::Again
    }

    fn parse_request(&mut self, conn: &mut Conn, core: &mut Core) -> Parsed {
        let refuse_socks = |r, conn: &mut Conn, core: &mut Core| {
            Parsed::Leave(refuse(r, Dialect::Socks5, conn, core))
        };
        let (request, n) = match socks5::parse_request(&self.buf) {
            Parse::Incomplete => return Parsed::More,
            Parse::Invalid(e) => return refuse_socks(Refusal::Socks(e), conn, core),
            Parse::Done(request, n) => (request, n),
        };
        if request.command != socks5::Command::Connect {
            return refuse_socks(Refusal::SocksCommand, conn, core);
        }
        let host = match &request.address {
            socks5::Address::Ip(ip) => ip.to_string(),
            socks5::Address::Domain(name) => name.clone(),
        };
        let target = match Target::new(&host, request.port) {
            Ok(t) => t,
            Err(e) => return refuse_socks(Refusal::BadHost(e.0), conn, core),
        };
        let early = self.buf.split_off(n);
        Parsed::Leave(connect::start(target, Dialect::Socks5, early, conn, core))
    }
}
