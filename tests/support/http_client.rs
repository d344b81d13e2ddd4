//! HTTP clients: response heads read byte by byte (never past the head),
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
