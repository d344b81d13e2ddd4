//! SOCKS5 (RFC 1928) and username/password auth (RFC 1929), sans-IO.
//!
//! STUB: the protocol helper replaces the bodies; the signatures are the contract.

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
    /// UDP ASSOCIATE (0x03): not supported, answered 0x07.
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
        todo!()
    }
}

/// Parses a greeting from the front of `buf`.
pub fn parse_greeting(buf: &[u8]) -> Parse<Greeting, GreetingError> {
    let _ = buf;
    todo!()
}

/// Parses an RFC 1929 username/password message from the front of `buf`.
pub fn parse_user_pass(buf: &[u8]) -> Parse<UserPass, AuthError> {
    let _ = buf;
    todo!()
}

/// Parses a request from the front of `buf`.
pub fn parse_request(buf: &[u8]) -> Parse<Request, RequestError> {
    let _ = buf;
    todo!()
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
    let _ = (reply, bound, out);
    todo!()
}
