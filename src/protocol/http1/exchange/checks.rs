//! Pure checks on a request head: does it name the tunnel's target, which
//! protocols does it ask to upgrade to, does it wait for `100 Continue`.

use std::net::IpAddr;

use crate::protocol::http::RequestHead;
use crate::protocol::http1::framing::trim_ows;
use crate::protocol::http1::BodyKind;
use crate::target::{Host, Target};

/// The values of every `Host` header.
pub(super) fn host_values(head: &RequestHead) -> Vec<&[u8]> {
    head.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.as_slice())
        .collect()
}

/// A host a request names, canonical, and whether it gave a port.
#[derive(Debug)]
pub(super) struct Named {
    pub(super) target: Target,
    pub(super) explicit_port: bool,
    /// From an `https://` URI.
    pub(super) tls: bool,
}

/// Parses a `Host` value (`host`, `host:port`, `[v6]:port`); a missing port
/// is `default_port`.
pub(super) fn parse_host(value: &[u8], default_port: u16) -> Result<Named, String> {
    // A Host is ASCII (RFC 9110 `uri-host`). IDNA would map `ｌｏｃａｌｈｏｓｔ`
    // or a soft hyphen onto the target's name, but origins route on the raw
    // bytes: such a request would reach another (the default) site.
    let text = std::str::from_utf8(trim_ows(value))
        .ok()
        .filter(|t| t.is_ascii())
        .ok_or("Host is not ASCII (an international name goes as its xn-- form)")?;
    if text.is_empty() {
        return Err("empty Host".into());
    }
    let explicit_port = match text.strip_prefix('[') {
        Some(rest) => rest.contains("]:"),
        None => text.contains(':'),
    };
    let target = if explicit_port {
        Target::parse_authority(text)
    } else {
        Target::new(text, default_port)
    };
    target
        .map(|target| Named {
            target,
            explicit_port,
            tls: false,
        })
        .map_err(|e| format!("invalid Host: {}", e.0))
}

/// Whether an absolute-form target (`http://host:port/...`) spells out a
/// port (`http://host:/` does not).
pub(super) fn absolute_has_port(target: &str) -> bool {
    let Some((_, rest)) = target.split_once("://") else {
        return false;
    };
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, after)| after),
        None => authority.find(':').map_or("", |i| &authority[i..]),
    };
    after_host.len() > 1
}

/// `None` when `named` is the tunnel's `target` (a port left out is the
/// scheme's default, already filled in: it must be the target's too); else
/// why not, naming both.
pub(super) fn mismatch(what: &str, named: &Named, target: &Target) -> Option<String> {
    if named.target.host == target.host && named.target.port == target.port {
        return None;
    }
    let shown = if named.explicit_port {
        named.target.to_string()
    } else {
        format!(
            "{} (port {} by default)",
            host_text(&named.target),
            named.target.port
        )
    };
    Some(format!(
        "{what} names {shown} but this connection goes to {target}"
    ))
}

/// Whether a head holds an LF not preceded by CR (RFC 9112 2.2 lets a
/// recipient take it as a line end, so the parser does, but not every
/// origin does).
pub(super) fn has_bare_lf(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'))
}

/// The protocols an upgrade request offers, lower-cased, in order
/// (`websocket`, `h2c`, `foo/2`), over every `Upgrade` header.
pub(super) fn upgrade_tokens(head: &RequestHead) -> Vec<String> {
    head.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(trim_ows)
        .filter(|t| !t.is_empty())
        .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
        .collect()
}

/// Whether an upgrade request looks like one, before an upstream's `101`
/// may turn the connection raw: HTTP/1.1 (RFC 9110 7.8: an HTTP/1.0
/// `Upgrade` is ignored), and for a WebSocket the opening handshake of
/// RFC 6455 4.1: a `GET` with one `Sec-WebSocket-Key` and no body (bytes
/// after it would be taken for the new protocol's).
pub(super) fn upgrade_shape(head: &RequestHead, kind: BodyKind) -> Result<(), &'static str> {
    if head.version != 1 {
        return Err("Upgrade on HTTP/1.0 (only HTTP/1.1 switches protocols)");
    }
    let websocket = upgrade_tokens(head)
        .iter()
        .any(|t| t.split_once('/').map_or(t.as_str(), |(n, _)| n) == "websocket");
    if !websocket {
        return Ok(());
    }
    if head.method != "GET" {
        return Err("a WebSocket upgrade must be a GET");
    }
    let keys: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-key"))
        .map(|(_, v)| trim_ows(v))
        .collect();
    match keys.as_slice() {
        [key] if !key.is_empty() => {}
        [] | [_] => return Err("a WebSocket upgrade without Sec-WebSocket-Key"),
        _ => return Err("a WebSocket upgrade with several Sec-WebSocket-Key headers"),
    }
    if kind != BodyKind::Empty {
        return Err("a WebSocket upgrade with a request body");
    }
    Ok(())
}

/// Whether `token` (lower-case, maybe `name/version`) is one of `allowed`
/// (lower-case): equal, or its name is.
pub(super) fn upgrade_allowed(token: &str, allowed: &[String]) -> bool {
    let name = token.split_once('/').map_or(token, |(n, _)| n);
    allowed.iter().any(|a| a == token || a == name)
}

/// The request has an `Expect`, however spelt: its client may wait for
/// `100 Continue` before sending its body, and an upstream that saw it
/// might answer from the head alone and leave the body unread (upstreams
/// read it loosely: Node.js joins repeated headers and finds
/// `100-continue` anywhere in the value, Go's `net/http` takes it as any
/// token). So it never goes up with a body, and the proxy answers the
/// `100` itself (`request.rs`).
pub(super) fn expects_continue(head: &RequestHead) -> bool {
    head.header("Expect").is_some()
}

/// The host part of a target as it goes in a `Host` header.
pub(super) fn host_text(target: &Target) -> String {
    match &target.host {
        Host::Domain(d) => d.clone(),
        Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
        Host::Ip(a) => a.to_string(),
    }
}

/// A `Host` header value for `target` (the port left out when it is 80).
pub(super) fn host_header(target: &Target, tls: bool) -> String {
    match (target.port, tls) {
        (80, false) | (443, true) => host_text(target),
        (port, _) => format!("{}:{port}", host_text(target)),
    }
}
