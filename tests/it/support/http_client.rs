//! HTTP clients: response heads read byte by byte (never past the head),
//! responses with their `Content-Length` body,
//! CONNECT through the proxy, Basic credentials, and curl as a real client.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use super::wait::{BULK, PROMPTLY};

/// A parsed HTTP response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub raw: String,
}

impl ResponseHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads byte by byte up to and including the first blank line.
pub fn read_until_blank_line(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match r.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "EOF after {} bytes of head: {:?}",
                        head.len(),
                        String::from_utf8_lossy(&head)
                    ),
                ))
            }
            Ok(_) => head.push(b[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if head.len() > 64 * 1024 {
            return Err(io::Error::other("response head too long"));
        }
    }
    Ok(head)
}

/// Reads a response head byte by byte (never past it) and parses it.
pub fn read_response_head(r: &mut impl Read) -> io::Result<ResponseHead> {
    let raw = read_until_blank_line(r)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let mut lines = raw.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(io::Error::other(format!("bad status line {status_line:?}")));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line {status_line:?}")))?;
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    Ok(ResponseHead {
        status,
        headers,
        raw,
    })
}

/// Reads one response head and its `Content-Length` body (none without
/// the header): the head and the body as text.
pub fn read_response(r: &mut impl Read) -> (ResponseHead, String) {
    let head = read_response_head(r).expect("a response");
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).expect("the body");
    (head, String::from_utf8_lossy(&body).into_owned())
}

/// `GET path` with `Host: host` on an open connection; the status line of
/// the answer (its body read past).
pub fn get_status_line(s: &mut (impl Read + Write), host: &str, path: &str) -> String {
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let (head, _) = read_response(s);
    head.raw.lines().next().unwrap_or_default().to_owned()
}

/// Sends `CONNECT target` (with `extra` header lines) on `s` and reads the answer head.
pub fn http_connect_on<S: Read + Write>(
    s: &mut S,
    target: &str,
    extra: &[(&str, &str)],
) -> io::Result<ResponseHead> {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    read_response_head(s)
}

/// Connects to the proxy and sends a CONNECT; returns the stream (positioned
/// right after the response head) and the head, whatever its status.
pub fn http_connect(
    proxy: SocketAddr,
    target: &str,
    extra: &[(&str, &str)],
) -> io::Result<(TcpStream, ResponseHead)> {
    let mut s = TcpStream::connect(proxy)?;
    // The answer should come promptly; the tunnel afterwards may idle longer.
    s.set_read_timeout(Some(PROMPTLY))?;
    s.set_write_timeout(Some(BULK))?;
    let head = http_connect_on(&mut s, target, extra)?;
    s.set_read_timeout(Some(BULK))?;
    Ok((s, head))
}

/// A tunnel through CONNECT; panics unless the proxy answers 200.
#[track_caller]
pub fn connect_via_http(proxy: SocketAddr, target: &str) -> TcpStream {
    let (s, head) = http_connect(proxy, target, &[]).expect("CONNECT");
    assert_eq!(head.status, 200, "CONNECT {target}: {}", head.raw);
    s
}

/// `Proxy-Authorization` value for Basic credentials.
pub fn basic_auth(user: &str, pass: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()))
}

pub fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Runs curl with a bounded runtime and no proxy settings from the
/// environment. Panics when curl is missing: the tests need it (CI installs it).
pub fn curl(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("curl");
    for var in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ] {
        cmd.env_remove(var);
    }
    match cmd.args(["--max-time", "30"]).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run curl ({e}); this test needs it (CI installs it)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::scripted::{Scripted, Step};

    const HEAD: &[u8] = b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nX-Proxy-Error:  auth \r\nno colon here\r\nX-Proxy-Error: second\r\n\r\n";

    #[test]
    fn base64_known_answers() {
        // RFC 4648, section 10.
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), enc, "{plain:?}");
        }
        assert_eq!(base64(&[0xfb, 0xff, 0xbf]), "+/+/");
        assert_eq!(base64(&[0, 0, 0]), "AAAA");
        // RFC 7617's example.
        assert_eq!(
            basic_auth("Aladdin", "open sesame"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }

    #[test]
    fn blank_line_ends_the_head_at_every_split() {
        let mut wire = HEAD.to_vec();
        wire.extend_from_slice(b"TUNNEL");
        for piece in [1, 2, 3, 7, wire.len()] {
            let mut r = Scripted::pieces(&wire, piece);
            assert_eq!(
                read_until_blank_line(&mut r).unwrap(),
                HEAD,
                "piece {piece}"
            );
            assert_eq!(r.unread(), b"TUNNEL", "never reads past the head");
        }
    }

    #[test]
    fn blank_line_reader_retries_interrupts_and_reports_eof_and_overflow() {
        let mut r = Scripted::new(vec![
            Step::Data(b"HTTP/1.1 200 OK\r\n".to_vec()),
            Step::Err(io::ErrorKind::Interrupted),
            Step::Data(b"\r\n".to_vec()),
        ]);
        assert_eq!(
            read_until_blank_line(&mut r).unwrap(),
            b"HTTP/1.1 200 OK\r\n\r\n"
        );

        // Bare LFs do not end a head: EOF comes first.
        let mut r = Scripted::data(b"HTTP/1.1 200 OK\n\n");
        let e = read_until_blank_line(&mut r).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("17 bytes"), "{e}");

        let mut r = Scripted::new(vec![Step::Err(io::ErrorKind::TimedOut)]);
        let e = read_until_blank_line(&mut r).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);

        let mut r = Scripted::data(&vec![b'a'; 70 * 1024]);
        let e = read_until_blank_line(&mut r).unwrap_err();
        assert!(e.to_string().contains("too long"), "{e}");
    }

    #[test]
    fn response_head_parses_status_and_headers() {
        let mut r = Scripted::pieces(HEAD, 5);
        let head = read_response_head(&mut r).unwrap();
        assert_eq!(head.status, 407);
        assert_eq!(head.raw.as_bytes(), HEAD);
        assert_eq!(head.header("proxy-authenticate"), Some("Basic realm=\"x\""));
        assert_eq!(head.header("X-PROXY-ERROR"), Some("auth"), "first, trimmed");
        assert_eq!(head.header("no colon here"), None);
        assert_eq!(head.headers.len(), 3);

        let mut r = Scripted::data(b"HTTP/1.0 200\r\n\r\n");
        let head = read_response_head(&mut r).unwrap();
        assert_eq!(head.status, 200);
        assert!(head.headers.is_empty());
    }

    #[test]
    fn response_head_refuses_what_is_not_http() {
        for bad in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/2 200\r\n\r\n",
            b"HTTP/1.1 OK\r\n\r\n",
            b"HTTP/1.1\r\n\r\n",
        ] {
            let mut r = Scripted::data(bad);
            let e = read_response_head(&mut r).unwrap_err();
            assert!(e.to_string().contains("bad status line"), "{e}");
        }
    }

    #[test]
    fn connect_request_is_well_formed() {
        let mut s = Scripted::data(b"HTTP/1.1 200 Connection established\r\n\r\nTUNNEL");
        let head = http_connect_on(
            &mut s,
            "example.com:443",
            &[("Proxy-Authorization", "Basic eDp5")],
        )
        .unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(
            String::from_utf8(s.written.clone()).unwrap(),
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic eDp5\r\n\r\n"
        );
        assert_eq!(s.unread(), b"TUNNEL");
    }
}
