//! SOCKS5 (RFC 1928) and username/password auth (RFC 1929), sans-IO.
//!
//! Every parser looks at the front of a buffer and answers [`Parse::Done`]
//! with the number of bytes the message took, [`Parse::Incomplete`] while a
//! strict prefix of a valid message is all there is, or [`Parse::Invalid`]
//! as soon as the bytes can never become a valid message.

use std::net::{IpAddr, SocketAddr};

/// The protocol version byte.
pub const VERSION: u8 = 0x05;
/// Method: no authentication.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method: username/password (RFC 1929).
pub const METHOD_USER_PASS: u8 = 0x02;
/// Method: none acceptable.
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xff;

/// The outcome of parsing a message from the front of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse<T, E> {
    /// A whole message, and how many bytes it took.
    Done(T, usize),
    /// Need more bytes.
    Incomplete,
    /// The bytes can never become a valid message.
    Invalid(E),
}

/// The client's greeting: the methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// Offered method bytes.
    pub methods: Vec<u8>,
}

/// A malformed greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GreetingError {
    /// Version byte was not 5.
    BadVersion(u8),
    /// NMETHODS was zero.
    NoMethods,
}

/// RFC 1929 credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPass {
    /// User name bytes as sent.
    pub username: Vec<u8>,
    /// Password bytes as sent.
    pub password: Vec<u8>,
}

/// A malformed RFC 1929 sub-negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// Sub-negotiation version was not 1.
    BadVersion(u8),
}

/// The command of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// CONNECT (0x01).
    Connect,
    /// BIND (0x02): not supported, answered 0x07.
    Bind,
    /// UDP ASSOCIATE (0x03): a UDP relay (see [`super::socks5_udp`]).
    UdpAssociate,
}

/// The destination of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// ATYP 0x01 or 0x04.
    Ip(IpAddr),
    /// ATYP 0x03: validated (non-empty, UTF-8, no control characters), not yet canonical.
    Domain(String),
}

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What the client asks for.
    pub command: Command,
    /// Where to.
    pub address: Address,
    /// Destination port.
    pub port: u16,
}

/// A malformed or unsupported request; [`RequestError::reply`] says what to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Version byte was not 5.
    BadVersion(u8),
    /// Unknown command byte.
    BadCommand(u8),
    /// Unknown address type byte.
    BadAddressType(u8),
    /// Domain name empty, not UTF-8, or with control characters.
    BadDomain,
}

/// Reply codes (RFC 1928 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reply {
    /// 0x00
    Succeeded = 0x00,
    /// 0x01
    GeneralFailure = 0x01,
    /// 0x02
    NotAllowed = 0x02,
    /// 0x03
    NetworkUnreachable = 0x03,
    /// 0x04
    HostUnreachable = 0x04,
    /// 0x05
    ConnectionRefused = 0x05,
    /// 0x06
    TtlExpired = 0x06,
    /// 0x07
    CommandNotSupported = 0x07,
    /// 0x08
    AddressTypeNotSupported = 0x08,
}

impl RequestError {
    /// The reply code this error is answered with.
    pub fn reply(self) -> Reply {
        match self {
            RequestError::BadVersion(_) => Reply::GeneralFailure,
            RequestError::BadCommand(_) => Reply::CommandNotSupported,
            RequestError::BadAddressType(_) => Reply::AddressTypeNotSupported,
            RequestError::BadDomain => Reply::NotAllowed,
        }
    }
}

/// Parses a greeting from the front of `buf`.
pub fn parse_greeting(buf: &[u8]) -> Parse<Greeting, GreetingError> {
    let Some(&version) = buf.first() else {
        return Parse::Incomplete;
    };
    if version != VERSION {
        return Parse::Invalid(GreetingError::BadVersion(version));
    }
    let Some(&n) = buf.get(1) else {
        return Parse::Incomplete;
    };
    if n == 0 {
        return Parse::Invalid(GreetingError::NoMethods);
    }
    let end = 2 + usize::from(n);
    match buf.get(2..end) {
        Some(methods) => Parse::Done(
            Greeting {
                methods: methods.to_vec(),
            },
            end,
        ),
        None => Parse::Incomplete,
    }
}

/// Parses an RFC 1929 username/password message from the front of `buf`.
pub fn parse_user_pass(buf: &[u8]) -> Parse<UserPass, AuthError> {
    let Some(&version) = buf.first() else {
        return Parse::Incomplete;
    };
    if version != USER_PASS_VERSION {
        return Parse::Invalid(AuthError::BadVersion(version));
    }
    let Some((username, rest)) = length_prefixed(&buf[1..]) else {
        return Parse::Incomplete;
    };
    let Some((password, _)) = length_prefixed(rest) else {
        return Parse::Incomplete;
    };
    let consumed = 3 + username.len() + password.len();
    Parse::Done(
        UserPass {
            username: username.to_vec(),
            password: password.to_vec(),
        },
        consumed,
    )
}

/// The RFC 1929 sub-negotiation version byte.
pub const USER_PASS_VERSION: u8 = 0x01;

/// Splits `[LEN, BYTES...]` off the front of `buf`, if it is all there.
fn length_prefixed(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = buf.split_first()?;
    let len = usize::from(len);
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Parses a request from the front of `buf`.
///
/// A bad version byte or address type is reported as soon as it is seen; a
/// bad command only once the whole message is in (so the reply is sent after
/// the client finished writing); a bad domain once the name is in.
pub fn parse_request(buf: &[u8]) -> Parse<Request, RequestError> {
    let Some(&version) = buf.first() else {
        return Parse::Incomplete;
    };
    if version != VERSION {
        return Parse::Invalid(RequestError::BadVersion(version));
    }
    // VER CMD RSV ATYP; RSV is ignored whatever its value.
    let (Some(&cmd), Some(&atyp)) = (buf.get(1), buf.get(3)) else {
        return Parse::Incomplete;
    };
    let addr_start = 4;
    let (addr_len, addr_off) = match atyp {
        ATYP_IPV4 => (4, 0),
        ATYP_IPV6 => (16, 0),
        ATYP_DOMAIN => match buf.get(addr_start) {
            Some(&len) => (usize::from(len), 1),
            None => return Parse::Incomplete,
        },
        other => return Parse::Invalid(RequestError::BadAddressType(other)),
    };
    let name_start = addr_start + addr_off;
    let port_start = name_start + addr_len;
    let end = port_start + 2;
    if buf.len() < end {
        return Parse::Incomplete;
    }
    let command = match cmd {
        0x01 => Command::Connect,
        0x02 => Command::Bind,
        0x03 => Command::UdpAssociate,
        other => return Parse::Invalid(RequestError::BadCommand(other)),
    };
    let raw = &buf[name_start..port_start];
    let address = match atyp {
        ATYP_IPV4 => {
            let octets: [u8; 4] = raw.try_into().expect("length checked");
            Address::Ip(IpAddr::from(octets))
        }
        ATYP_IPV6 => {
            let octets: [u8; 16] = raw.try_into().expect("length checked");
            Address::Ip(IpAddr::from(octets))
        }
        _ => match validate_domain(raw) {
            Some(name) => Address::Domain(name.to_owned()),
            None => return Parse::Invalid(RequestError::BadDomain),
        },
    };
    let port = u16::from_be_bytes([buf[port_start], buf[port_start + 1]]);
    Parse::Done(
        Request {
            command,
            address,
            port,
        },
        end,
    )
}

/// Address type: IPv4 (4 bytes).
pub const ATYP_IPV4: u8 = 0x01;
/// Address type: domain name (length byte, then the name).
pub const ATYP_DOMAIN: u8 = 0x03;
/// Address type: IPv6 (16 bytes).
pub const ATYP_IPV6: u8 = 0x04;

/// A domain name as sent, if non-empty UTF-8 without control characters or spaces.
fn validate_domain(raw: &[u8]) -> Option<&str> {
    let name = std::str::from_utf8(raw).ok()?;
    let bad = |c: char| c.is_control() || c == ' ';
    (!name.is_empty() && !name.contains(bad)).then_some(name)
}

/// The method-selection message: `[5, method]`.
pub fn method_selection(method: u8) -> [u8; 2] {
    [VERSION, method]
}

/// The RFC 1929 status message: `[1, 0]` on success, `[1, 1]` on failure.
pub fn auth_status(ok: bool) -> [u8; 2] {
    [0x01, if ok { 0x00 } else { 0x01 }]
}

/// Appends a complete reply to `out`: 10 bytes for IPv4 or no address
/// (0.0.0.0:0), 22 for IPv6. `bound` is the proxy's local address on success.
pub fn encode_reply(reply: Reply, bound: Option<SocketAddr>, out: &mut Vec<u8>) {
    out.extend_from_slice(&[VERSION, reply as u8, 0x00]);
    let port = bound.map_or(0, |a| a.port());
    match bound.map(|a| a.ip()) {
        Some(IpAddr::V6(ip)) => {
            out.push(ATYP_IPV6);
            out.extend_from_slice(&ip.octets());
        }
        Some(IpAddr::V4(ip)) => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&ip.octets());
        }
        None => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&[0; 4]);
        }
    }
    out.extend_from_slice(&port.to_be_bytes());
}

#[cfg(test)]
#[path = "socks5_tests.rs"]
mod tests;
