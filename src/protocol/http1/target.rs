//! Absolute-form request targets (RFC 9112 section 3.2.2), as sent to a
//! forward proxy: `GET http://host/path HTTP/1.1`.

use std::net::Ipv6Addr;

/// An absolute-form request target: `http[s]://host[:port]/path?query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbsoluteTarget {
    /// `https`: the proxy itself speaks TLS to the origin (clients that do
    /// not tunnel, such as undici's `ProxyAgent` with `proxyTunnel: false`).
    pub tls: bool,
    /// The host as written (not lower-cased), IPv6 still bracketed: `[::1]`.
    pub host: String,
    /// The port; absent (or empty, as in `http://host:/`) it is the scheme's:
    /// 80, or 443 for `https`.
    pub port: u16,
    /// The path and query, `"/"` when empty (a bare `?q` becomes `/?q`).
    pub path_and_query: String,
}

/// Ok(None) when `target` is not absolute-form (origin-form "/x", authority-form, "*").
/// Err(reason) for absolute-form with a scheme other than http or https, userinfo (`user@host`), empty host, bad port.
///
/// Absolute-form is a scheme (letter, then letters, digits, `+ - .`)
/// followed by `://`; anything else is `Ok(None)`. The scheme is
/// case-insensitive. Also refused: a fragment (`#`), a host with anything
/// but ASCII letters, digits, `-`, `.` and `_` (no percent-encoding, so the
/// policy sees the name the connection goes to), an IPv6 literal that does
/// not parse (zone ids included), and port 0.
pub fn parse_absolute_target(target: &str) -> Result<Option<AbsoluteTarget>, String> {
    let Some((scheme, rest)) = target.split_once("://") else {
        return Ok(None);
    };
    if !is_scheme(scheme) {
        return Ok(None);
    }
    let tls = scheme.eq_ignore_ascii_case("https");
    if !tls && !scheme.eq_ignore_ascii_case("http") {
        return Err(format!("unsupported scheme {scheme}: only http and https"));
    }
    if rest.contains('#') {
        return Err("fragment in request target".to_owned());
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err("userinfo in request target".to_owned());
    }
    let (host, port) = split_host_port(authority)?;
    let port = match port {
        None | Some("") if tls => 443,
        None | Some("") => 80,
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u16>() {
            Ok(n) if n != 0 => n,
            _ => return Err(format!("bad port {p}")),
        },
        Some(p) => return Err(format!("bad port {p}")),
    };
    let path_and_query = match path.as_bytes().first() {
        None => "/".to_owned(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_owned(),
    };
    Ok(Some(AbsoluteTarget {
        tls,
        host: host.to_owned(),
        port,
        path_and_query,
    }))
}

/// Splits `host[:port]` or `[v6][:port]`, checking the host.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.is_empty() {
        return Err("empty host".to_owned());
    }
    if let Some(inner) = authority.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return Err("unclosed IPv6 literal".to_owned());
        };
        if inner[..close].parse::<Ipv6Addr>().is_err() {
            return Err("invalid IPv6 literal".to_owned());
        }
        let host = &authority[..close + 2];
        return match &inner[close + 1..] {
            "" => Ok((host, None)),
            after => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err("junk after IPv6 literal".to_owned()),
            },
        };
    }
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if host.is_empty() {
        return Err("empty host".to_owned());
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err("invalid host".to_owned());
    }
    Ok((host, port))
}

/// An RFC 3986 scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}
