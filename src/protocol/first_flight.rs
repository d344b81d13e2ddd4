//! What a raw tunnel's first bytes name: the SNI of a TLS ClientHello, or
//! the `Host` (and absolute-form authority) of a plaintext HTTP request.
//! Sans-IO: [`parse`] is called on everything read so far and says whether
//! it needs more; a [`FlightGate`] says when that is worth doing again, so
//! that a flight trickled a byte (or a one-byte record) at a time costs
//! work linear in its size. Bounded: a ClientHello larger than
//! [`MAX_CLIENT_HELLO`] or a request head larger than [`MAX_HEAD`] is
//! [`FirstFlight::TooLarge`].
//!
//! Anything a server could read differently from us is
//! [`FirstFlight::Malformed`], never guessed at: two SNI names, two
//! `server_name` or other duplicate extensions, two `Host` headers, bytes
//! left over inside the ClientHello, a record other than a handshake
//! before the ClientHello is complete, a PROXY protocol header before
//! either.

use crate::tls::{sniff, Sniff};

/// Largest ClientHello message accepted (its body, across records).
pub const MAX_CLIENT_HELLO: usize = 16 * 1024;
/// Largest plaintext request head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest TLS record fragment (TLSPlaintext.length, RFC 8446 5.1).
const MAX_FRAGMENT: usize = 16 * 1024;
/// Extension types that hide the real server name: encrypted_client_hello
/// (0xfe0d, RFC 9849) and its drafts (0xfe08..=0xfe0c), and the older
/// encrypted_server_name (0xffce).
fn hides_name(ext: u16) -> bool {
    matches!(ext, 0xfe08..=0xfe0d | 0xffce)
}

/// What the first flight says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstFlight {
    /// Not enough bytes yet.
    NeedMore,
    /// A complete ClientHello: its SNI host name (if any), and whether it
    /// carries an encrypted ClientHello (or ESNI) extension.
    Tls {
        /// The `server_name` extension's host name.
        sni: Option<String>,
        /// An ECH (or ESNI) extension is present: the real name is hidden.
        ech: bool,
    },
    /// A complete plaintext HTTP request head: every host it names (the
    /// `Host` header, and the authority of an absolute-form target).
    Http {
        /// The hosts named, as sent (possibly with a port).
        hosts: Vec<String>,
    },
    /// Neither TLS nor HTTP: names nothing.
    Other,
    /// TLS or HTTP that does not parse cleanly (the reason).
    Malformed(&'static str),
    /// Over the bound before it was complete.
    TooLarge,
}

/// The most of a first flight ever buffered: a ClientHello at its bound
/// split into many small records takes more than its own size.
pub const MAX_FIRST_FLIGHT: usize = 2 * MAX_CLIENT_HELLO;

/// A flight starting with this byte is read as TLS records: it is a TLS
/// record's content type (change_cipher_spec, alert, handshake,
/// application_data), which no text protocol starts with.
pub fn starts_tls(first: u8) -> bool {
    matches!(first, 0x14..=0x17)
}

/// Parses the first flight read so far. Past [`MAX_FIRST_FLIGHT`] bytes,
/// what still needs more is [`FirstFlight::TooLarge`].
pub fn parse(buf: &[u8]) -> FirstFlight {
    match parse_prefix(buf) {
        FirstFlight::NeedMore if buf.len() >= MAX_FIRST_FLIGHT => FirstFlight::TooLarge,
        flight => flight,
    }
}

/// Says when a first flight still arriving is worth parsing again.
///
/// [`parse`] looks at everything read so far, so parsing again on every
/// arrival costs time quadratic in a flight sent a byte (or a one-byte
/// TLS record) at a time. The gate looks at each byte once and lets a
/// parse through only when its answer may have changed, which is exactly
/// when the parse could stop needing more:
///
/// - TLS (the flight starts as a TLS record does: [`starts_tls`]): a record
///   header no handshake record can have (another type or major version,
///   length 0 or over 16 KiB);
///   a record that completes the message's 4-byte header when that header
///   is no ClientHello's or claims over [`MAX_CLIENT_HELLO`], or that
///   completes the message. Records are walked as they arrive (where the
///   next header starts, how much message is in), so every answer comes
///   at the very read it would come at without the gate.
/// - anything else: the first byte after the empty lines that is no
///   method character (a word and a blank, or neither TLS nor HTTP), the
///   end of the first line (a request line or [`FirstFlight::Other`]), an
///   empty line after it (the end of a head), each byte of a PROXY
///   protocol v2 signature, and the size bounds: again at the very read.
///   A request head `httparse` refuses before its end is the one answer
///   that may come later: a bad request line at its line's
///   end, a bad header line or a 101st header when the bytes doubled since
///   the last parse, at the head's end or the bound, or at the client's
///   EOF or the deadline (where the caller parses whatever the gate says).
///
/// And, whatever the flight, when the bytes doubled since the last parse
/// and at [`MAX_FIRST_FLIGHT`]. A flight trickled a byte at a time is thus
/// parsed about log2 of its size times, plus a few.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FlightGate {
    /// Bytes already scanned.
    scanned: usize,
    /// Bytes there were at the last parse let through.
    parsed: usize,
    /// What the scan found.
    scan: Scan,
}

/// What the scan of a flight found so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Scan {
    /// Nothing scanned yet.
    #[default]
    Empty,
    /// A flight starting as a TLS record does.
    Tls(Records),
    /// Anything else.
    Text(Lines),
}

/// The record layer of a flight that starts as TLS does.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Records {
    /// Where the next record header starts.
    next: usize,
    /// Handshake bytes in the records complete so far.
    msg: usize,
    /// The handshake message's 4-byte header, as far as it is in.
    head: [u8; 4],
    /// A record header no record can have: nothing past it is walked.
    broken: bool,
}

/// The lines of a flight that does not start as TLS does.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Lines {
    /// Where the first line starts (the empty lines before it skipped),
    /// once a byte other than CR or LF came.
    start: Option<usize>,
    /// The first line's first token has ended.
    token_ended: bool,
    /// The first line has ended.
    line_ended: bool,
}

impl FlightGate {
    /// Whether `buf`, the first flight read so far (the bytes of the last
    /// call and more), should be parsed now.
    pub fn due(&mut self, buf: &[u8]) -> bool {
        let len = buf.len();
        if len < self.scanned {
            // Not the bytes it watched: start over.
            *self = FlightGate::default();
        }
        let from = self.scanned;
        if matches!(self.scan, Scan::Empty) && len > 0 {
            self.scan = if starts_tls(buf[0]) {
                Scan::Tls(Records::default())
            } else {
                Scan::Text(Lines::default())
            };
        }
        let parsed = self.parsed;
        // A bound the bytes reached since the last parse.
        let crossed = |at: usize| parsed < at && at <= len;
        let changed = match &mut self.scan {
            Scan::Empty => false,
            // Nothing is decided before a record header is whole.
            Scan::Tls(records) => records.walk(buf),
            Scan::Text(lines) => {
                let ended = lines.scan(buf, from);
                // A PROXY v2 signature is decided byte by byte (12 at most).
                ended
                    || (len > from && proxy_v2_so_far(&buf[..from]))
                    || crossed(MAX_HEAD + 1)
                    || lines
                        .start
                        .is_some_and(|s| crossed(s + MAX_HEAD) || crossed(s + MAX_HEAD + 1))
            }
        };
        self.scanned = len;
        let due = changed || crossed(MAX_FIRST_FLIGHT) || len >= 2 * parsed;
        if due {
            self.parsed = len;
        }
        due
    }

    /// Bytes were scanned and not parsed: a parse now may say more than
    /// the last one did.
    pub fn held(&self) -> bool {
        self.parsed < self.scanned
    }
}

impl Records {
    /// Walks the records `buf` completes: whether one ends the message or
    /// the walk (an answer other than more).
    fn walk(&mut self, buf: &[u8]) -> bool {
        let mut ended = false;
        while !self.broken && buf.len() >= self.next + 5 {
            let header = &buf[self.next..self.next + 5];
            let len = be16(&header[3..5]);
            if header[0] != 0x16 || header[1] != 0x03 || len == 0 || len > MAX_FRAGMENT {
                self.broken = true;
                return true;
            }
            let body = self.next + 5;
            if buf.len() < body + len {
                break;
            }
            let had = self.msg;
            for (i, b) in buf[body..body + len.min(4)].iter().enumerate() {
                if had + i < 4 {
                    self.head[had + i] = *b;
                }
            }
            self.msg += len;
            self.next = body + len;
            if self.msg >= 4 {
                let claimed = be24(&self.head[1..4]);
                // (Over the bound, the message is over its claim too.)
                ended |= self.head[0] != 1 || claimed > MAX_CLIENT_HELLO || self.msg >= 4 + claimed;
            }
        }
        ended
    }
}

impl Lines {
    /// Scans `buf[from..]`: whether the first line's token or the line
    /// ended, or an empty line came after it.
    fn scan(&mut self, buf: &[u8], from: usize) -> bool {
        let mut ended = false;
        for (i, &b) in buf.iter().enumerate().skip(from) {
            let Some(start) = self.start else {
                if matches!(b, b'\r' | b'\n') {
                    continue;
                }
                self.start = Some(i);
                if !is_word(b) {
                    self.token_ended = true;
                    ended = true;
                }
                continue;
            };
            if !self.token_ended && !is_word(b) {
                self.token_ended = true;
                ended = true;
            }
            if b != b'\n' {
                continue;
            }
            if !self.line_ended {
                self.line_ended = true;
                ended = true;
            }
            // An empty line: `\n\n` or `\n\r\n`, after the first line's
            // first byte.
            let after = |at: usize| at > start && buf[at] == b'\n';
            ended |= (i >= 1 && after(i - 1)) || (i >= 2 && buf[i - 1] == b'\r' && after(i - 2));
        }
        ended
    }
}

/// The signature a PROXY protocol v2 header starts with (HAProxy's
/// proxy-protocol.txt, 2.2): empty lines, then a NUL.
const PROXY_V2: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// `buf` is the PROXY v2 signature's first bytes, its NUL in: more decides.
fn proxy_v2_so_far(buf: &[u8]) -> bool {
    (5..PROXY_V2.len()).contains(&buf.len()) && PROXY_V2.starts_with(buf)
}

fn parse_prefix(buf: &[u8]) -> FirstFlight {
    // A PROXY protocol v2 header: nginx (`proxy_protocol`) and HAProxy
    // (`accept-proxy`) take one from any client, then read the request or
    // ClientHello behind it and route by its name. Not relayed raw as
    // naming nothing (its empty lines then a NUL would be).
    if buf.starts_with(PROXY_V2) {
        return FirstFlight::Malformed("a PROXY protocol header");
    }
    if proxy_v2_so_far(buf) {
        return FirstFlight::NeedMore;
    }
    // A server ignores empty lines before a request line (RFC 9112 2.2).
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    if start > 0 && buf.first() != Some(&0x16) {
        if start == buf.len() {
            return if start > MAX_HEAD {
                FirstFlight::TooLarge
            } else {
                FirstFlight::NeedMore
            };
        }
        // A byte no method starts with is no request, however the client
        // splits what follows: `"\r\n\x16"` waits for no more TLS bytes.
        return match sniff(&buf[start..]) {
            Sniff::Http => http(buf, start),
            Sniff::NeedMore if is_tchar(buf[start]) => http(buf, start),
            _ => other_or_http(buf, start),
        };
    }
    if buf.first().is_some_and(|b| starts_tls(*b)) {
        // A TLS record: read as TLS whatever its record version says (a
        // server ignores it, RFC 8446 5.1: rustls and OpenSSL check only
        // its major byte, Go only that it is under 0x1000), so a name in a
        // ClientHello with an odd version is vetted, not relayed raw as
        // neither TLS nor HTTP; a major byte other than 3 is malformed. So
        // is any record before the ClientHello: Go and rustls servers drop
        // a warning alert sent first and read the ClientHello behind it.
        return tls(buf);
    }
    match sniff(buf) {
        Sniff::NeedMore => FirstFlight::NeedMore,
        Sniff::Tls => tls(buf),
        Sniff::Http => http(buf, 0),
        Sniff::Other => other_or_http(buf, 0),
    }
}

/// What the sniffer took for neither TLS nor HTTP (it knows methods as
/// upper-case tokens): still a request if its first line is one, whatever
/// the method's case or characters (`get /admin HTTP/1.1`: Go's server,
/// among others, takes any token as a method and routes by `Host`), or
/// an HTTP/0.9 `GET` split by tabs, else [`FirstFlight::Other`]. A first
/// token and a blank with no line end yet waits for the line (the client
/// decides where segments end).
fn other_or_http(buf: &[u8], start: usize) -> FirstFlight {
    let rest = &buf[start..];
    // The first word: not only a token. Apache httpd with
    // `HttpProtocolOptions Unsafe` takes any visible or non-ASCII bytes
    // as a method (`GET"`, `{`, `é`) and routes by `Host`.
    let token = rest.iter().take_while(|b| is_word(**b)).count();
    if token == 0 || !rest.get(token).is_some_and(|b| is_blank(*b)) {
        return match (token, rest.get(token)) {
            // Only token bytes so far: the space may come.
            (1.., None) if rest.len() < MAX_HEAD => FirstFlight::NeedMore,
            _ => FirstFlight::Other,
        };
    }
    let Some(end) = rest.iter().position(|b| *b == b'\n') else {
        return if rest.len() > MAX_HEAD {
            FirstFlight::TooLarge
        } else {
            FirstFlight::NeedMore
        };
    };
    // A lenient server splits a request line on any run of whitespace
    // (RFC 9112 3: HAProxy takes tabs, nginx runs of spaces) and routes
    // by its `Host`: a first word, blanks, then anything naming an HTTP
    // version is a request, refused as malformed where `httparse` (single
    // spaces) does not take it.
    let request_line = rest[token..end]
        .windows(5)
        .any(|w| w.eq_ignore_ascii_case(b"HTTP/"));
    // So is HTTP/0.9 (`GET`, a target, no version) split by tabs as by a
    // space: HAProxy with `option accept-invalid-http-request` takes it
    // as HTTP/1.0 and sends it on, its absolute-form target naming where.
    // And so is HTTP/0.9 with any method and an absolute-form target
    // (httpd's `Unsafe` takes `get http://host/`, and picks that host).
    let simple = &rest[..token] == b"GET" || simple_absolute(&rest[token..end]);
    if request_line || simple {
        http(buf, start)
    } else {
        FirstFlight::Other
    }
}

/// The rest of an HTTP/0.9 line after its method (blanks, a target,
/// blanks, the line end) whose target is absolute-form: it names a host.
fn simple_absolute(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|b| is_blank(*b)).filter(|part| !part.is_empty());
    let (Some(target), None) = (parts.next(), parts.next()) else {
        return false;
    };
    std::str::from_utf8(target)
        .ok()
        .and_then(absolute_authority)
        .is_some()
}

/// Whitespace a lenient server splits a request line on (RFC 9112 3;
/// a bare CR aside).
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0b | 0x0c)
}

/// A byte of a lenient server's method: visible ASCII or not ASCII
/// (httpd's `Unsafe`: `ap_scan_vchar_obstext`), a superset of `tchar`.
fn is_word(b: u8) -> bool {
    matches!(b, 0x21..=0x7e | 0x80..=0xff)
}

/// A `tchar` of RFC 9110 5.6.2 (what a method token is made of).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn http(buf: &[u8], start: usize) -> FirstFlight {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&buf[start..]) {
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => FirstFlight::TooLarge,
        Ok(httparse::Status::Partial) => FirstFlight::NeedMore,
        Ok(httparse::Status::Complete(n)) if start + n > MAX_HEAD => FirstFlight::TooLarge,
        Ok(httparse::Status::Complete(_)) => {
            let mut hosts = Vec::new();
            if let Some(authority) = req.path.and_then(absolute_authority) {
                hosts.push(authority.to_owned());
            }
            let mut host_headers = req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("host"));
            if let Some(h) = host_headers.next() {
                let Ok(v) = std::str::from_utf8(h.value) else {
                    return FirstFlight::Malformed("a Host header that is not text");
                };
                hosts.push(v.trim().to_owned());
            }
            if host_headers.next().is_some() {
                return FirstFlight::Malformed("two Host headers");
            }
            FirstFlight::Http { hosts }
        }
        Err(httparse::Error::TooManyHeaders) => FirstFlight::TooLarge,
        Err(_) => FirstFlight::Malformed("a request head that does not parse"),
    }
}

/// The authority of an absolute-form request target (`http://host:80/x`).
fn absolute_authority(path: &str) -> Option<&str> {
    let (scheme, rest) = path.split_once("://")?;
    if !scheme
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // Userinfo is not part of the host.
    Some(authority.rsplit_once('@').map_or(authority, |(_, h)| h))
}

/// Reassembles the ClientHello from handshake records and reads it.
fn tls(buf: &[u8]) -> FirstFlight {
    let mut msg: Vec<u8> = Vec::new();
    let mut rest = buf;
    loop {
        // The message is complete once its 4-byte header and body are in.
        if msg.len() >= 4 {
            if msg[0] != 1 {
                return FirstFlight::Malformed("the first handshake message is not a ClientHello");
            }
            let len = be24(&msg[1..4]);
            if len > MAX_CLIENT_HELLO {
                return FirstFlight::TooLarge;
            }
            if msg.len() >= 4 + len {
                if msg.len() > 4 + len {
                    return FirstFlight::Malformed("bytes after the ClientHello in its record");
                }
                return client_hello(&msg[4..]);
            }
        }
        if rest.len() < 5 {
            return FirstFlight::NeedMore;
        }
        let (kind, major, len) = (rest[0], rest[1], be16(&rest[3..5]));
        if kind != 0x16 || major != 0x03 {
            return FirstFlight::Malformed(
                "a record other than a handshake before the ClientHello",
            );
        }
        if len == 0 || len > MAX_FRAGMENT {
            return FirstFlight::Malformed("a handshake record of impossible length");
        }
        if rest.len() < 5 + len {
            return FirstFlight::NeedMore;
        }
        msg.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if msg.len() > 4 + MAX_CLIENT_HELLO {
            return FirstFlight::TooLarge;
        }
    }
}

/// A cursor that refuses to read past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(be16)
    }
    /// A vector with a `width`-byte length prefix.
    fn vec(&mut self, width: usize) -> Option<&'a [u8]> {
        let len = match width {
            1 => self.u8()?,
            _ => self.u16()?,
        };
        self.take(len)
    }
}

fn client_hello(body: &[u8]) -> FirstFlight {
    const BAD: FirstFlight = FirstFlight::Malformed("a ClientHello that does not parse");
    let mut r = Reader(body);
    let fixed = (|| {
        r.take(2 + 32)?; // legacy_version, random
        let session = r.vec(1)?;
        let suites = r.vec(2)?;
        let compression = r.vec(1)?;
        Some(
            session.len() <= 32
                && suites.len() >= 2
                && suites.len() % 2 == 0
                && !compression.is_empty(),
        )
    })();
    if fixed != Some(true) {
        return BAD;
    }
    if r.0.is_empty() {
        // No extensions at all (SSL 3.0 style): no name.
        return FirstFlight::Tls {
            sni: None,
            ech: false,
        };
    }
    let Some(exts) = r.vec(2) else { return BAD };
    if !r.0.is_empty() {
        return FirstFlight::Malformed("bytes after the ClientHello's extensions");
    }
    let mut exts = Reader(exts);
    let mut seen: Vec<u16> = Vec::new();
    let (mut sni, mut ech) = (None, false);
    while !exts.0.is_empty() {
        let (Some(kind), Some(data)) = (exts.u16(), exts.vec(2)) else {
            return BAD;
        };
        let kind = kind as u16;
        if seen.contains(&kind) {
            return FirstFlight::Malformed("a ClientHello extension sent twice");
        }
        seen.push(kind);
        ech |= hides_name(kind);
        if kind == 0 {
            match server_name(data) {
                Ok(name) => sni = name,
                Err(why) => return FirstFlight::Malformed(why),
            }
        }
    }
    FirstFlight::Tls { sni, ech }
}

/// The host name of a `server_name` extension (RFC 6066 3).
fn server_name(data: &[u8]) -> Result<Option<String>, &'static str> {
    const BAD: &str = "a server_name extension that does not parse";
    let mut r = Reader(data);
    let list = r.vec(2).ok_or(BAD)?;
    if !r.0.is_empty() {
        return Err(BAD);
    }
    let mut list = Reader(list);
    let mut name = None;
    while !list.0.is_empty() {
        let kind = list.u8().ok_or(BAD)?;
        let value = list.vec(2).ok_or(BAD)?;
        if kind != 0 {
            continue; // no other name type is defined; a server ignores it
        }
        if name.is_some() {
            return Err("two host names in server_name");
        }
        if value.is_empty() || !value.iter().all(|b| b.is_ascii_graphic()) {
            return Err("a server_name host name that is not a name");
        }
        name = Some(String::from_utf8_lossy(value).into_owned());
    }
    Ok(name)
}

fn be16(b: &[u8]) -> usize {
    usize::from(b[0]) << 8 | usize::from(b[1])
}

fn be24(b: &[u8]) -> usize {
    usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello from rustls, for `name`.
    fn rustls_hello(name: &str) -> Vec<u8> {
        use std::sync::Arc;
        let roots = rustls::RootCertStore::empty();
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
        let mut c = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    /// A hand-built ClientHello with these extensions, in one record.
    fn hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0x00, 0x02, 0x13, 0x01]); // one suite
        body.extend([0x01, 0x00]); // null compression
        let mut e = Vec::new();
        for (kind, data) in exts {
            e.extend(kind.to_be_bytes());
            e.extend((data.len() as u16).to_be_bytes());
            e.extend(data);
        }
        body.extend((e.len() as u16).to_be_bytes());
        body.extend(e);
        records(&body, usize::MAX)
    }

    /// The message around `body`, split into records of at most `chunk`.
    fn records(body: &[u8], chunk: usize) -> Vec<u8> {
        let mut msg = vec![1];
        msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend(body);
        let mut out = Vec::new();
        for part in msg.chunks(chunk.min(MAX_FRAGMENT)) {
            out.extend([0x16, 0x03, 0x01]);
            out.extend((part.len() as u16).to_be_bytes());
            out.extend(part);
        }
        out
    }

    fn sni_ext(names: &[&str]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(0);
            list.extend((n.len() as u16).to_be_bytes());
            list.extend(n.as_bytes());
        }
        let mut out = (list.len() as u16).to_be_bytes().to_vec();
        out.extend(list);
        out
    }

    /// Every strict prefix needs more; the whole gives `want`.
    fn split_everywhere(bytes: &[u8], want: FirstFlight) {
        for cut in 0..bytes.len() {
            assert_eq!(parse(&bytes[..cut]), FirstFlight::NeedMore, "cut at {cut}");
        }
        assert_eq!(parse(bytes), want);
    }

    /// The verdict the vetting acts on (the first that needs no more
    /// bytes) is the same wherever the client splits `bytes`.
    fn settles_as_the_whole(bytes: &[u8]) -> FirstFlight {
        let whole = parse(bytes);
        for cut in 1..=bytes.len() {
            match parse(&bytes[..cut]) {
                FirstFlight::NeedMore => {}
                first => {
                    assert_eq!(first, whole, "{:?} cut at {cut}", &bytes[..cut]);
                    break;
                }
            }
        }
        whole
    }

    /// Each of `malformed` settles as a malformed request and each of
    /// `other` as no request, at every split.
    fn settle_as(malformed: &[&[u8]], other: &[&[u8]]) {
        for req in malformed {
            assert!(
                matches!(settles_as_the_whole(req), FirstFlight::Malformed(_)),
                "{req:?}"
            );
        }
        for other in other {
            assert_eq!(settles_as_the_whole(other), FirstFlight::Other, "{other:?}");
        }
    }

    /// Empty lines, then a byte no method starts with: not a request, and
    /// not TLS either (no TLS server reads a record behind a CR), whether
    /// that byte comes alone or with more. (A PROXY protocol v2 signature,
    /// which starts so, is refused: its own test, below.)
    #[test]
    fn empty_lines_then_no_method_byte_is_other_at_every_split() {
        for lead in ["\r\n", "\n", "\r\n\r\n"] {
            for rest in [rustls_hello("good.test"), vec![0x80, 1, 2], vec![0, b'G']] {
                let mut bytes = lead.as_bytes().to_vec();
                bytes.extend(&rest);
                assert_eq!(
                    settles_as_the_whole(&bytes),
                    FirstFlight::Other,
                    "{bytes:?}"
                );
            }
        }
        // A method's first bytes still wait for the rest of the line.
        assert_eq!(parse(b"\r\nGE"), FirstFlight::NeedMore);
        assert!(matches!(
            settles_as_the_whole(b"\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            FirstFlight::Http { .. }
        ));
    }

    /// A PROXY protocol v2 header (HAProxy's proxy-protocol.txt 2.2),
    /// client-made, before a request or a ClientHello: nginx
    /// (`listen ... proxy_protocol`) and HAProxy (`bind ... accept-proxy`)
    /// take it from anyone and route by the `Host` or SNI behind it. Its
    /// signature starts with empty lines then a NUL, which alone would be
    /// relayed raw as naming nothing: refused, at every split.
    #[test]
    fn a_proxy_protocol_v2_header_is_refused_at_every_split() {
        let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        // PROXY TCP4 10.0.0.1:1111 -> 10.0.0.2:80.
        header.extend([
            0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0x57, 0, 80,
        ]);
        let request = b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n".to_vec();
        for behind in [request, rustls_hello("evil.test")] {
            let bytes = [header.clone(), behind].concat();
            assert_eq!(
                settles_as_the_whole(&bytes),
                FirstFlight::Malformed("a PROXY protocol header"),
                "{bytes:?}"
            );
        }
        // Empty lines then a NUL that goes on otherwise is still no request.
        for other in [
            &b"\r\n\r\n\0\r\nQUIZ\n"[..],
            b"\r\n\r\n\0G",
            b"\r\n\0\r\nQUIT\n",
        ] {
            assert_eq!(settles_as_the_whole(other), FirstFlight::Other, "{other:?}");
        }
    }

    #[test]
    fn a_real_client_hello_names_its_server_at_every_split() {
        let bytes = rustls_hello("good.test");
        let want = FirstFlight::Tls {
            sni: Some("good.test".into()),
            ech: false,
        };
        split_everywhere(&bytes, want.clone());
        // Bytes behind it (early data, the next record) change nothing.
        let mut more = bytes.clone();
        more.extend([0x17, 0x03, 0x03, 0x00, 0x01, 0xff]);
        assert_eq!(parse(&more), want);
    }

    #[test]
    fn a_hello_split_across_records_is_reassembled() {
        let one = hello(&[(0, sni_ext(&["good.test"]))]);
        let body = &one[9..];
        for chunk in [1, 2, 3, 7, 50] {
            let bytes = records(body, chunk);
            let want = FirstFlight::Tls {
                sni: Some("good.test".into()),
                ech: false,
            };
            split_everywhere(&bytes, want);
        }
    }

    #[test]
    fn no_sni_and_ech_are_reported() {
        assert_eq!(
            parse(&hello(&[])),
            FirstFlight::Tls {
                sni: None,
                ech: false
            }
        );
        let ech = hello(&[(0, sni_ext(&["public.test"])), (0xfe0d, vec![0; 40])]);
        assert_eq!(
            parse(&ech),
            FirstFlight::Tls {
                sni: Some("public.test".into()),
                ech: true
            }
        );
        let esni = hello(&[(0xffce, vec![1, 2, 3])]);
        assert!(matches!(parse(&esni), FirstFlight::Tls { ech: true, .. }));
    }

    #[test]
    fn ambiguous_hellos_are_malformed() {
        let two_names = hello(&[(0, sni_ext(&["other.test", "good.test"]))]);
        assert!(matches!(parse(&two_names), FirstFlight::Malformed(_)));
        let two_exts = hello(&[(0, sni_ext(&["other.test"])), (0, sni_ext(&["good.test"]))]);
        assert!(matches!(parse(&two_exts), FirstFlight::Malformed(_)));
        let bad_name = hello(&[(0, sni_ext(&["good test"]))]);
        assert!(matches!(parse(&bad_name), FirstFlight::Malformed(_)));
        // An alert record where the hello should be: a server may drop a
        // warning and read a ClientHello behind it, so it is no "other".
        let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28];
        assert!(matches!(parse(&alert), FirstFlight::Malformed(_)));
        let mut cut_then_alert = hello(&[(0, sni_ext(&["good.test"]))]);
        let len = cut_then_alert.len();
        cut_then_alert[3..5].copy_from_slice(&((len - 5 - 10) as u16).to_be_bytes());
        cut_then_alert.truncate(len - 10);
        cut_then_alert.extend([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
        assert!(matches!(parse(&cut_then_alert), FirstFlight::Malformed(_)));
    }

    #[test]
    fn oversized_hellos_are_bounded() {
        // A header claiming more than the bound.
        let mut claim = vec![0x16, 0x03, 0x01, 0x00, 0x04, 0x01];
        claim.extend(&((MAX_CLIENT_HELLO + 1) as u32).to_be_bytes()[1..]);
        assert_eq!(parse(&claim), FirstFlight::TooLarge);
        // A record longer than TLS allows.
        assert!(matches!(
            parse(&[0x16, 0x03, 0x01, 0x40, 0x01]),
            FirstFlight::Malformed(_)
        ));
        // A zero-length handshake record (endless empty records).
        assert!(matches!(
            parse(&[0x16, 0x03, 0x01, 0x00, 0x00]),
            FirstFlight::Malformed(_)
        ));
    }

    #[test]
    fn hostile_bytes_never_panic() {
        // Every truncation and every single-byte corruption of real hellos.
        let real = rustls_hello("good.test");
        let hand = hello(&[(0, sni_ext(&["good.test"])), (0xfe0d, vec![1; 9])]);
        for bytes in [real, hand] {
            for i in 0..bytes.len() {
                for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[i] = v;
                    let _ = parse(&b);
                    let _ = parse(&b[..i]);
                }
            }
        }
        // Many one-byte records stop at the bound.
        let mut tiny = Vec::new();
        while tiny.len() < MAX_FIRST_FLIGHT {
            tiny.extend([0x16, 0x03, 0x01, 0x00, 0x01, 0x01]);
        }
        assert_eq!(parse(&tiny), FirstFlight::TooLarge);
        // Pseudo-random bytes behind a handshake record header.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            let mut b = vec![0x16, 0x03, 0x01];
            for _ in 0..64 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                b.push(x as u8);
            }
            let _ = parse(&b);
        }
    }

    #[test]
    fn plaintext_requests_name_their_hosts_at_every_split() {
        let req = b"GET /admin/x HTTP/1.1\r\nHost: good.test\r\nAccept: */*\r\n\r\n";
        split_everywhere(
            req,
            FirstFlight::Http {
                hosts: vec!["good.test".into()],
            },
        );
        let abs = b"GET http://good.test:80/admin HTTP/1.1\r\nHost: other.test\r\n\r\n";
        assert_eq!(
            parse(abs),
            FirstFlight::Http {
                hosts: vec!["good.test:80".into(), "other.test".into()]
            }
        );
        // Leading empty lines are skipped, as servers do.
        let lead = b"\r\n\r\nGET / HTTP/1.1\r\nHost: good.test\r\n\r\n";
        assert_eq!(
            parse(lead),
            FirstFlight::Http {
                hosts: vec!["good.test".into()]
            }
        );
        let none = b"GET / HTTP/1.0\r\n\r\n";
        assert_eq!(parse(none), FirstFlight::Http { hosts: vec![] });
    }

    /// Methods the sniffer does not know as such (lower case, digits,
    /// long) still make a request whose `Host` is read, at every split: a
    /// server such as Go's takes any token as a method.
    #[test]
    fn requests_with_unusual_methods_name_their_hosts() {
        for req in [
            &b"get /admin/x HTTP/1.1\r\nHost: good.test\r\n\r\n"[..],
            b"Get /admin/x HTTP/1.1\r\nHost: good.test\r\n\r\n",
            b"X2 /admin/x HTTP/1.1\r\nHost: good.test\r\n\r\n",
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZ /admin HTTP/1.1\r\nHost: good.test\r\n\r\n",
            b"\r\nget /admin/x HTTP/1.1\r\nHost: good.test\r\n\r\n",
        ] {
            split_everywhere(
                req,
                FirstFlight::Http {
                    hosts: vec!["good.test".into()],
                },
            );
        }
        // A lower-case version is no HTTP/1.1 a server takes: refused.
        let v = b"get / http/1.1\r\nHost: good.test\r\n\r\n";
        assert!(
            matches!(parse(v), FirstFlight::Malformed(_)),
            "{:?}",
            parse(v)
        );
    }

    /// HTTP/0.9 split by tabs (`GET\thttp://evil.test/`): HAProxy with
    /// `option accept-invalid-http-request` takes it and sends it on by
    /// its absolute-form target. Malformed, as with a space, at every
    /// split; other words and blanks with no version are still no request.
    #[test]
    fn http_0_9_split_by_tabs_is_refused_at_every_split() {
        settle_as(
            &[
                b"GET\thttp://evil.test/\r\n",
                b"GET\t\thttp://evil.test/\t\r\n\r\n",
                b"\r\nGET\t/\n",
                b"GET http://evil.test/\r\n",
            ],
            &[b"get\t/\r\n", b"GETS\t/\r\n", b"hello world\r\n"],
        );
    }

    /// Apache httpd with `HttpProtocolOptions Unsafe` takes a method of
    /// any visible or non-ASCII bytes, and HTTP/0.9 with any method: with
    /// an HTTP version or an absolute-form target, such a line is a
    /// request (malformed), at every split. Without either it names
    /// nothing.
    #[test]
    fn odd_methods_are_requests_at_every_split() {
        settle_as(
            &[
                b"GET\" / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
                b"{ / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
                b"\r\n\xc3\xa9 / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
                b"get http://evil.test/\r\n",
                b"Get\t http://evil.test/x \r\n",
                b"\r\nPOST\" http://evil.test/\n",
            ],
            &[
                b"get /x\r\n",
                b"hello world\r\n",
                b"get http://evil.test/ x\r\n",
                b"{\"a\":1}\n",
                b"\x80\x01",
            ],
        );
    }

    #[test]
    fn ambiguous_or_huge_requests_are_refused() {
        let two = b"GET / HTTP/1.1\r\nHost: other.test\r\nHost: good.test\r\n\r\n";
        assert!(matches!(parse(two), FirstFlight::Malformed(_)));
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(vec![b'a'; MAX_HEAD]);
        assert_eq!(parse(&big), FirstFlight::TooLarge);
        let lines = vec![b'\n'; MAX_HEAD + 1];
        assert_eq!(parse(&lines), FirstFlight::TooLarge);
        assert_eq!(parse(b"SSH-2.0-x\r\n"), FirstFlight::Other);
        let ssh = b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n";
        assert_eq!(parse(ssh), FirstFlight::Other);
        assert_eq!(parse(&[0x05, 0x01, 0x00]), FirstFlight::Other);
    }
}

#[cfg(test)]
mod gate_tests {
    use super::*;

    /// Pseudo-random numbers (xorshift) from a fixed seed, so a failure
    /// reproduces.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len())]
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.below(256) as u8).collect()
        }
        /// Fewer than `most` random bytes.
        fn some(&mut self, most: usize) -> Vec<u8> {
            let n = self.below(most);
            self.bytes(n)
        }
    }

    /// A ClientHello message (its 4-byte header and body) with random
    /// extensions: names, duplicates, ECH, padding.
    fn hello_message(rng: &mut Rng) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend(rng.bytes(32));
        let session = rng.pick(&[0, 0, 32, 33]);
        body.push(session as u8);
        body.extend(rng.bytes(session));
        body.extend([0x00, 0x04, 0x13, 0x01, 0x13, 0x02]);
        body.extend([0x01, 0x00]);
        if rng.below(8) != 0 {
            let mut exts = Vec::new();
            for _ in 0..rng.below(6) {
                let (kind, data): (u16, Vec<u8>) = match rng.below(6) {
                    0 | 1 => {
                        let names: &[&str] =
                            rng.pick(&[&["good.test"][..], &["a.test", "b.test"], &["bad name"]]);
                        let mut list = Vec::new();
                        for n in names {
                            list.push(0);
                            list.extend((n.len() as u16).to_be_bytes());
                            list.extend(n.as_bytes());
                        }
                        let mut data = (list.len() as u16).to_be_bytes().to_vec();
                        data.extend(list);
                        (0, data)
                    }
                    2 => (0xfe0d, rng.some(40)),
                    3 => (21, vec![0; rng.pick(&[1, 100, 3000])]),
                    _ => (rng.below(50) as u16 + 10, rng.some(20)),
                };
                exts.extend(kind.to_be_bytes());
                exts.extend((data.len() as u16).to_be_bytes());
                exts.extend(data);
            }
            body.extend((exts.len() as u16).to_be_bytes());
            body.extend(exts);
        }
        let mut msg = vec![1];
        msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend(body);
        msg
    }

    /// `msg` in handshake records of random sizes (down to a byte).
    fn in_records(rng: &mut Rng, msg: &[u8]) -> Vec<u8> {
        let most = rng.pick(&[1, 2, 5, 60, 700, MAX_FRAGMENT]);
        let mut out = Vec::new();
        let mut rest = msg;
        while !rest.is_empty() {
            let n = (1 + rng.below(most)).min(rest.len());
            out.extend([0x16, 0x03, rng.pick(&[0x01, 0x03])]);
            out.extend((n as u16).to_be_bytes());
            out.extend(&rest[..n]);
            rest = &rest[n..];
        }
        out
    }

    /// A random TLS first flight: whole, or broken in one of the ways a
    /// parse refuses (or cut short).
    fn tls_flight(rng: &mut Rng) -> Vec<u8> {
        if rng.below(20) == 0 {
            // An odd record version, or no record header at all.
            let start: &[u8] = rng.pick(&[&[0x16, 0x00][..], &[0x16, 0x03, 0x05], &[0x16, 0x16]]);
            return [start, b"\x01\x00"].concat();
        }
        if rng.below(20) == 0 {
            // Another record first (a warning alert, a change_cipher_spec).
            let first: &[u8] = rng.pick(&[
                &[0x15, 0x03, 0x01, 0x00, 0x02, 0x01, 0x5a][..],
                &[0x14, 0x03, 0x03, 0x00, 0x01, 0x01],
            ]);
            let msg = hello_message(rng);
            return [first, &in_records(rng, &msg)].concat();
        }
        let mut msg = hello_message(rng);
        match rng.below(10) {
            // Another message type, a length over the bound, bytes after.
            0 => msg[0] = rng.pick(&[0, 2, 0x16]),
            1 => msg[1..4]
                .copy_from_slice(&((MAX_CLIENT_HELLO + rng.below(3)) as u32).to_be_bytes()[1..]),
            2 => msg.extend(rng.some(3).into_iter().chain([0])),
            _ => {}
        }
        let mut flight = in_records(rng, &msg);
        match rng.below(8) {
            // A record header no record has, somewhere.
            0 => {
                let at = rng.below(flight.len());
                let bad: &[u8] = rng.pick(&[
                    &[0x16, 0x03, 0x01, 0x00, 0x00][..],
                    &[0x16, 0x03, 0x01, 0x40, 0x01],
                    &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28],
                    &[0x17, 0x03, 0x03, 0x00, 0x01, 0xff],
                    &[0x16, 0x02, 0x01, 0x00, 0x01, 0x01],
                ]);
                flight.splice(at..at, bad.iter().copied());
            }
            // A byte changed.
            1 => {
                let at = rng.below(flight.len());
                let any = rng.below(256) as u8;
                flight[at] = rng.pick(&[0, 1, 0x16, 0x40, 0xff, any]);
            }
            // Cut short, or more behind it.
            2 if rng.below(2) == 0 => flight.truncate(rng.below(flight.len())),
            3 => flight.extend([0x17, 0x03, 0x03, 0x00, 0x01, 0xff]),
            _ => {}
        }
        flight
    }

    /// A random plaintext first flight: a request head (odd methods, bare
    /// LFs, empty lines first, long lines, a byte changed), empty lines
    /// alone, or words that are no request.
    fn text_flight(rng: &mut Rng) -> Vec<u8> {
        let mut out = Vec::new();
        let lead = rng.pick(&[0, 0, 0, 1, 2, 7, MAX_HEAD - 3, MAX_HEAD + 2]);
        for _ in 0..lead {
            out.extend(rng.pick(&[&b"\r\n"[..], b"\n", b"\r"]));
        }
        out.truncate(lead.min(MAX_HEAD + 3));
        match rng.below(6) {
            0..=2 => {
                let method = rng.pick(&[
                    &b"GET"[..],
                    b"get",
                    b"CONNECT",
                    b"X2",
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                    b"G-T",
                    b"GET\"",
                    b"{",
                    b"\xc3\xa9",
                ]);
                out.extend(method);
                out.extend(rng.pick(&[&b" "[..], b" ", b" ", b" ", b" ", b"\t", b"/"]));
                out.extend(rng.pick(&[&b"/"[..], b"/admin/x", b"http://good.test:80/a", b"*"]));
                out.extend(rng.pick(&[
                    &b" HTTP/1.1"[..],
                    b" HTTP/1.1",
                    b" HTTP/1.1",
                    b" HTTP/1.0",
                    b" http/1.1",
                    b" HTTP/2",
                    b"",
                ]));
                let eol: &[u8] = rng.pick(&[&b"\r\n"[..], b"\r\n", b"\n"]);
                out.extend(eol);
                let lines = if rng.below(20) == 0 {
                    120
                } else {
                    rng.below(8)
                };
                for _ in 0..lines {
                    let line: Vec<u8> = match rng.below(20) {
                        0..=4 => rng
                            .pick(&[&b"Host: good.test"[..], b"host: other.test:80"])
                            .to_vec(),
                        5..=7 => {
                            [&b"X-Long: "[..], &vec![b'v'; rng.pick(&[10, 500, 5000])]].concat()
                        }
                        8 => b"Bad Header: x".to_vec(),
                        9 => b"X: \x01".to_vec(),
                        _ => b"Accept: */*".to_vec(),
                    };
                    out.extend(line);
                    out.extend(eol);
                }
                if rng.below(6) != 0 {
                    out.extend(eol);
                }
                if rng.below(6) == 0 && !out.is_empty() {
                    let at = rng.below(out.len());
                    out[at] = rng.pick(&[b'\r', b'\n', b' ', b':', 0, 0x16, b'x']);
                }
            }
            3 => {}
            4 => {
                let words: &[u8] = rng.pick(&[
                    &b"SSH-2.0-OpenSSH_9.6\r\n"[..],
                    b"hello",
                    b"hello world",
                    b"\x05\x01\x00",
                    b"\x16\x03\x01",
                    b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x00GET / HTTP/1.1\r\n\r\n",
                ]);
                out.extend(words);
            }
            // A word of any length, ended by a byte no method has.
            5 if rng.below(2) == 0 => {
                let n = 1 + rng.below(100);
                out.extend(std::iter::repeat_n(rng.pick(b"wW"), n));
                out.extend([rng.pick(&[b'\r', b'\t', b'/', 0, b':', b'\n'])]);
                out.extend(b"\r\n");
            }
            // A word or a line that goes on.
            _ => {
                let n = rng.pick(&[30, 3000, MAX_HEAD + 5]);
                if rng.below(2) == 0 {
                    out.extend(b"word ");
                }
                out.extend(std::iter::repeat_n(b'w', n));
            }
        }
        out
    }

    /// Read boundaries for `len` bytes: random pieces down to a byte, and
    /// every byte around the bounds a parse decides at.
    fn cuts(rng: &mut Rng, len: usize) -> Vec<usize> {
        let most = if len > 4000 {
            rng.pick(&[100, 1000, 5000])
        } else {
            rng.pick(&[1, 1, 3, 20, 500])
        };
        let mut cuts = vec![];
        let mut at = 0;
        while at < len {
            at = (at + 1 + rng.below(most)).min(len);
            cuts.push(at);
        }
        for bound in [MAX_HEAD, MAX_FIRST_FLIGHT] {
            for near in bound.saturating_sub(30)..bound + 30 {
                if near <= len {
                    cuts.push(near);
                }
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    /// Whether `want`, the answer to `prefix`, is a request head refused
    /// by `httparse` before its end (a bad byte, a 101st header): the
    /// answer the gate may give later.
    fn head_refused(prefix: &[u8], want: &FirstFlight) -> bool {
        let start = prefix
            .iter()
            .position(|b| *b != b'\r' && *b != b'\n')
            .unwrap_or(prefix.len());
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let parsed = httparse::Request::new(&mut headers).parse(&prefix[start..]);
        match (parsed, want) {
            (Err(httparse::Error::TooManyHeaders), FirstFlight::TooLarge) => true,
            (Err(httparse::Error::TooManyHeaders), _) => false,
            (Err(_), FirstFlight::Malformed(why)) => *why == "a request head that does not parse",
            _ => false,
        }
    }

    /// The first answer other than more, and the read it came at: parsing
    /// at every read, and as the gate lets through (and its parse count).
    fn both_ways(bytes: &[u8], cuts: &[usize]) -> [(Option<(usize, FirstFlight)>, usize); 2] {
        let ungated = cuts
            .iter()
            .map(|&n| (n, parse(&bytes[..n])))
            .find(|(_, f)| *f != FirstFlight::NeedMore);
        let mut gate = FlightGate::default();
        let mut parses = 0;
        let mut gated = None;
        for &n in cuts {
            if gate.due(&bytes[..n]) {
                parses += 1;
                let flight = parse(&bytes[..n]);
                if flight != FirstFlight::NeedMore {
                    gated = Some((n, flight));
                    break;
                }
            }
        }
        [(ungated, cuts.len()), (gated, parses)]
    }

    #[test]
    fn the_gate_agrees_with_the_ungated_parse_on_random_flights() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for case in 0..4000 {
            let bytes = match rng.below(3) {
                0 => tls_flight(&mut rng),
                _ => text_flight(&mut rng),
            };
            let cuts = cuts(&mut rng, bytes.len());
            let [(ungated, _), (gated, parses)] = both_ways(&bytes, &cuts);
            let what = || {
                let shown = &bytes[..bytes.len().min(300)];
                format!("case {case} ({} bytes): {shown:?}", bytes.len())
            };
            match (&ungated, &gated) {
                (None, None) => {}
                (Some((n, want)), Some((m, got))) if n == m => assert_eq!(want, got, "{}", what()),
                // A head refused before its end: the same answer by the
                // first read past twice as many bytes, else at the end
                // (the deadline's, or the EOF's, parse).
                (Some((n, want)), got)
                    if !starts_tls(bytes[0]) && head_refused(&bytes[..*n], want) =>
                {
                    let bound = cuts.iter().copied().find(|&c| c >= 2 * n);
                    match (got, bound) {
                        (Some((m, got)), _) => {
                            assert_eq!(want, got, "{}", what());
                            assert!(
                                m > n && bound.is_none_or(|b| *m <= b),
                                "{m} {n}: {}",
                                what()
                            );
                        }
                        (None, None) => assert_eq!(&parse(&bytes), want, "{}", what()),
                        (None, Some(b)) => panic!("not refused by {b}: {}", what()),
                    }
                }
                _ => panic!("ungated {ungated:?}, gated {gated:?}: {}", what()),
            }
            let most = 12 + bytes.len().max(1).ilog2() as usize;
            assert!(parses <= most, "{parses} parses: {}", what());
        }
    }

    /// The PROXY v2 signature, whole or diverging anywhere after its NUL:
    /// the gate lets each byte through, so every answer comes at the read
    /// it would come at ungated.
    #[test]
    fn the_gate_agrees_on_a_proxy_protocol_signature_at_every_split() {
        let sig = b"\r\n\r\n\0\r\nQUIT\n";
        let mut flights = vec![[&sig[..], b"\x21\x11\0\0GET / HTTP/1.1\r\n\r\n"].concat()];
        for at in 5..sig.len() {
            for b in [b'x', b'\r', b'\n', 0, 0x16] {
                if sig[at] != b {
                    flights.push([&sig[..at], &[b], b"GET / HTTP/1.1\r\n\r\n"].concat());
                }
            }
        }
        for bytes in flights {
            let cuts: Vec<usize> = (1..=bytes.len()).collect();
            let [(ungated, _), (gated, _)] = both_ways(&bytes, &cuts);
            assert!(ungated.is_some(), "{bytes:?}");
            assert_eq!(ungated, gated, "{bytes:?}");
        }
    }

    /// `bytes` a byte per read until a parse answers: the answer, how many
    /// bytes it took, and how many parses the gate let through.
    fn trickled(bytes: &[u8]) -> (FirstFlight, usize, usize) {
        let mut gate = FlightGate::default();
        let mut parses = 0;
        for n in 0..=bytes.len() {
            if gate.due(&bytes[..n]) {
                parses += 1;
                match parse(&bytes[..n]) {
                    FirstFlight::NeedMore => {}
                    flight => return (flight, n, parses),
                }
            }
        }
        (FirstFlight::NeedMore, bytes.len(), parses)
    }

    /// A ClientHello of about `size` bytes (a padding extension) for
    /// good.test, in records of `chunk` bytes.
    fn padded_hello(size: usize, chunk: usize) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.extend([0, 0x00, 0x02, 0x13, 0x01, 0x01, 0x00]);
        let name = b"good.test";
        let mut sni = ((name.len() + 3) as u16).to_be_bytes().to_vec();
        sni.push(0);
        sni.extend((name.len() as u16).to_be_bytes());
        sni.extend(name);
        let pad = size - body.len() - 2 - (4 + sni.len()) - 4 - 4;
        let mut exts = vec![0, 0];
        exts.extend((sni.len() as u16).to_be_bytes());
        exts.extend(sni);
        exts.extend([0, 21]);
        exts.extend((pad as u16).to_be_bytes());
        exts.extend(vec![0; pad]);
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut msg = vec![1];
        msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend(body);
        assert_eq!(msg.len(), size);
        let mut out = Vec::new();
        for part in msg.chunks(chunk) {
            out.extend([0x16, 0x03, 0x01]);
            out.extend((part.len() as u16).to_be_bytes());
            out.extend(part);
        }
        out
    }

    /// Flights sent a byte at a time (a ClientHello in one-byte records
    /// besides) are parsed a few times each, not once a byte (16 Ki
    /// times, each over all that came before), and still answered at the
    /// byte that decides them.
    #[test]
    fn a_flight_trickled_a_byte_at_a_time_is_parsed_a_few_times() {
        let good = FirstFlight::Tls {
            sni: Some("good.test".into()),
            ech: false,
        };
        // A 5 KiB hello in one-byte records: 30 KiB, whole at its last byte.
        let small = padded_hello(5 * 1024, 1);
        let (flight, at, parses) = trickled(&small);
        assert_eq!((flight, at), (good.clone(), small.len()));
        assert!(parses <= 30, "{parses} parses");
        // A 16 KiB one in one-byte records: over the bound.
        let big = padded_hello(MAX_CLIENT_HELLO, 1);
        let (flight, at, parses) = trickled(&big);
        assert_eq!((flight, at), (FirstFlight::TooLarge, MAX_FIRST_FLIGHT));
        assert!(parses <= 30, "{parses} parses");
        // And in one record.
        let whole = padded_hello(MAX_CLIENT_HELLO, MAX_FRAGMENT);
        let (flight, at, parses) = trickled(&whole);
        assert_eq!((flight, at), (good, whole.len()));
        assert!(parses <= 30, "{parses} parses");

        // A 16 KiB request head, whole at its last byte.
        let mut head = b"GET / HTTP/1.1\r\nHost: good.test\r\n".to_vec();
        while head.len() + 320 < MAX_HEAD {
            head.extend(b"X-Pad: ");
            head.extend([b'p'; 300]);
            head.extend(b"\r\n");
        }
        head.extend(b"\r\n");
        let (flight, at, parses) = trickled(&head);
        let hosts = vec!["good.test".to_owned()];
        assert_eq!((flight, at), (FirstFlight::Http { hosts }, head.len()));
        assert!(parses <= 30, "{parses} parses");
        // One that never ends: over the bound.
        let mut endless = b"GET / HTTP/1.1\r\nHost: good.test\r\nX-Pad: ".to_vec();
        endless.extend(vec![b'p'; MAX_HEAD]);
        let (flight, at, parses) = trickled(&endless);
        assert_eq!((flight, at), (FirstFlight::TooLarge, MAX_HEAD + 1));
        assert!(parses <= 30, "{parses} parses");

        // 16 KiB of empty lines: over the bound.
        let lines = b"\r\n".repeat(MAX_HEAD);
        let (flight, at, parses) = trickled(&lines);
        assert_eq!((flight, at), (FirstFlight::TooLarge, MAX_HEAD + 1));
        assert!(parses <= 30, "{parses} parses");
        // A word that never ends, after empty lines: no request.
        let mut word = b"\r\n".repeat(100);
        word.extend(vec![b'w'; MAX_HEAD]);
        let (flight, at, parses) = trickled(&word);
        assert_eq!((flight, at), (FirstFlight::Other, word.len()));
        assert!(parses <= 30, "{parses} parses");
    }
}
