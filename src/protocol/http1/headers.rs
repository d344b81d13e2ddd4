//! Connection semantics (RFC 9110 section 7.6.1, RFC 9112 section 9) and
//! writing heads back out, with hop-by-hop fields handled.

use super::framing::trim_ows;
use super::response::ResponseHead;
use crate::protocol::http::RequestHead;

/// Header fields that only concern one hop, removed by
/// [`HeadEdit::strip_hop_by_hop`] (lower-case).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Fields kept even when a `Connection` token names them: they frame the
/// body we forward verbatim, or name the host it goes to. Dropping them on a
/// client's say-so would let the next hop read the message differently.
const NEVER_STRIPPED: [&str; 3] = ["transfer-encoding", "content-length", "host"];

/// `Connection` tokens (all Connection headers, comma-separated, case-insensitive, trimmed).
///
/// Lower-cased, in order, empty list elements dropped.
pub fn connection_tokens(headers: &[(String, Vec<u8>)]) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(trim_ows)
        .filter(|t| !t.is_empty())
        .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
        .collect()
}

/// The request asks to upgrade: a `Connection` header with the token `upgrade` and an `Upgrade` header.
///
/// The `Upgrade` header must have a non-blank value.
pub fn is_upgrade_request(head: &RequestHead) -> bool {
    connection_tokens(&head.headers)
        .iter()
        .any(|t| t == "upgrade")
        && head
            .headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("upgrade") && !trim_ows(v).is_empty())
}

/// After this message the connection must close: `Connection: close`, or HTTP/1.0 without `keep-alive`.
///
/// `version` is the minor version (0 or 1).
pub fn wants_close(version: u8, headers: &[(String, Vec<u8>)]) -> bool {
    let tokens = connection_tokens(headers);
    tokens.iter().any(|t| t == "close")
        || (version == 0 && !tokens.iter().any(|t| t == "keep-alive"))
}

/// How to rewrite a head when forwarding it.
#[derive(Debug, Clone, Default)]
pub struct HeadEdit {
    /// Remove hop-by-hop headers: Connection, Keep-Alive, Proxy-Authorization, Proxy-Authenticate,
    /// Proxy-Connection, TE, Trailer, Upgrade, and every header named by a Connection token.
    /// Transfer-Encoding is kept (we never re-frame bodies).
    ///
    /// So are Content-Length and Host, even when a Connection token names them.
    pub strip_hop_by_hop: bool,
    /// Keep `Upgrade` and emit `Connection: upgrade` (an upgrade in progress).
    pub upgrading: bool,
    /// Emit `Connection: close` (we will close after this message).
    pub close: bool,
    /// Append a `Via` header with this value, e.g. "1.1 portcullis".
    pub via: Option<String>,
}

/// Serialises a request head with `target` as the request target (e.g. origin-form after rewriting):
/// `METHOD SP target SP HTTP/1.x CRLF`, headers (names as received), edits applied, CRLF.
///
/// When `upgrading` or `close` is set, received `Connection` headers are
/// replaced by the one emitted (`Connection: upgrade`, `close`, or
/// `upgrade, close`), which comes after the kept headers, followed by `Via`.
///
/// Returns the number of header lines written: with what the edit adds,
/// it may be more than the head had, and more than
/// [`crate::protocol::http::MAX_HEADERS`] (which a head must not exceed to
/// be sent on: the proxy would not parse it itself).
pub fn write_request_head(
    head: &RequestHead,
    target: &str,
    edit: &HeadEdit,
    out: &mut Vec<u8>,
) -> usize {
    out.extend_from_slice(head.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(format!(" HTTP/1.{}\r\n", head.version).as_bytes());
    write_fields(&head.headers, edit, out)
}

/// Serialises a response head (status line with the received reason), edits applied.
///
/// Header handling, and the header lines returned, as in
/// [`write_request_head`].
pub fn write_response_head(head: &ResponseHead, edit: &HeadEdit, out: &mut Vec<u8>) -> usize {
    // A parsed reason has no control characters but HTAB; keep it so.
    let reason: String = head
        .reason
        .chars()
        .filter(|&c| c == '\t' || !c.is_control())
        .collect();
    out.extend_from_slice(
        format!("HTTP/1.{} {:03} {reason}\r\n", head.version, head.status).as_bytes(),
    );
    write_fields(&head.headers, edit, out)
}

/// The header lines with `edit` applied, then the empty line; returns how
/// many header lines.
fn write_fields(headers: &[(String, Vec<u8>)], edit: &HeadEdit, out: &mut Vec<u8>) -> usize {
    let named = if edit.strip_hop_by_hop {
        connection_tokens(headers)
    } else {
        Vec::new()
    };
    let emit_connection = edit.upgrading || edit.close;
    let mut lines = 0;
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let keep = if lower == "connection" {
            !edit.strip_hop_by_hop && !emit_connection
        } else {
            (lower == "upgrade" && edit.upgrading)
                || NEVER_STRIPPED.contains(&lower.as_str())
                || !edit.strip_hop_by_hop
                || !(HOP_BY_HOP.contains(&lower.as_str()) || named.contains(&lower))
        };
        if keep {
            write_field(name, value, out);
            lines += 1;
        }
    }
    if emit_connection {
        let value: &[u8] = match (edit.upgrading, edit.close) {
            (true, true) => b"upgrade, close",
            (true, false) => b"upgrade",
            _ => b"close",
        };
        write_field("Connection", value, out);
        lines += 1;
    }
    if let Some(via) = &edit.via {
        let via: String = via.chars().filter(|c| !c.is_control()).collect();
        write_field("Via", via.as_bytes(), out);
        lines += 1;
    }
    out.extend_from_slice(b"\r\n");
    lines
}

/// `name: value` CRLF.
fn write_field(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
