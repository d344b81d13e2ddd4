//! What a raw tunnel's first bytes name: the SNI of a TLS ClientHello, or
//! the `Host` (and absolute-form authority) of a plaintext HTTP request.
//! Sans-IO: [`parse`] is called on everything read so far and says whether
//! it needs more. Bounded: a ClientHello larger than [`MAX_CLIENT_HELLO`]
//! or a request head larger than [`MAX_HEAD`] is [`FirstFlight::TooLarge`].
//!
//! Anything a server could read differently from us is
//! [`FirstFlight::Malformed`], never guessed at: two SNI names, two
//! `server_name` or other duplicate extensions, two `Host` headers, bytes
//! left over inside the ClientHello, a record other than a handshake
//! before the ClientHello is complete.

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

/// Parses the first flight read so far. Past [`MAX_FIRST_FLIGHT`] bytes,
/// what still needs more is [`FirstFlight::TooLarge`].
pub fn parse(buf: &[u8]) -> FirstFlight {
    match parse_prefix(buf) {
        FirstFlight::NeedMore if buf.len() >= MAX_FIRST_FLIGHT => FirstFlight::TooLarge,
        flight => flight,
    }
}

fn parse_prefix(buf: &[u8]) -> FirstFlight {
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
        return match sniff(&buf[start..]) {
            Sniff::Http | Sniff::NeedMore => http(buf, start),
            _ => other_or_http(buf, start),
        };
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
/// among others, takes any token as a method and routes by `Host`), else
/// [`FirstFlight::Other`]. A first token and a space with no line end yet
/// waits for the line (the client decides where segments end).
fn other_or_http(buf: &[u8], start: usize) -> FirstFlight {
    let rest = &buf[start..];
    let token = rest.iter().take_while(|b| is_tchar(**b)).count();
    if token == 0 || rest.get(token) != Some(&b' ') {
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
    let line = rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
    let mut words = line.split(|b| *b == b' ');
    let request_line = words.next().is_some()
        && words.next().is_some_and(|t| !t.is_empty())
        && words
            .next()
            .is_some_and(|v| v.len() >= 5 && v[..5].eq_ignore_ascii_case(b"HTTP/"))
        && words.next().is_none();
    if request_line {
        http(buf, start)
    } else {
        FirstFlight::Other
    }
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
        // An alert record where the hello should be.
        let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28];
        assert_eq!(parse(&alert), FirstFlight::Other);
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
