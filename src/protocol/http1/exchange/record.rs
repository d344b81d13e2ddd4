//! Per-request records for the access log and the counters.

use std::sync::Arc;

/// The longest path a record keeps (longer ones are clipped, marked `...`).
const MAX_PATH: usize = 512;

/// What happened to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The method; `None` when the head did not parse.
    pub method: Option<String>,
    /// The normalised path (query dropped, clipped); `None` when the head
    /// did not parse or its target did not normalise.
    pub path: Option<String>,
    /// Where the request went (`host:port`, canonical), when known: the
    /// absolute URI's authority, else `Host`, else the tunnel's target.
    pub authority: Option<String>,
    /// Allowed, denied, or refused before the rules.
    pub decision: Decision,
    /// The final status the client got (the upstream's for a forwarded
    /// request, `101` for an upgrade); `None` when the connection ended
    /// before the request was answered.
    pub status: Option<u16>,
}

/// How the proxy judged a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Forwarded; names the allowing request rule (the inspecting rule when
    /// it has no request rules), `None` when no rules apply.
    Allowed(Option<Arc<str>>),
    /// Refused 403 by the named request rule (or "no request rule matched").
    Denied(Arc<str>),
    /// Forwarded, though the named audit-mode rule would have denied it.
    WouldDeny(Arc<str>),
    /// Allowed, but the upstream failed before answering (its TLS, a
    /// certificate it presented): answered 502. `rule` as for `Allowed`.
    Failed {
        /// The allowing request rule, if one was applied.
        rule: Option<Arc<str>>,
        /// The `X-Proxy-Error` cause, e.g. `upstream-tls`.
        cause: String,
        /// The human reason, as in the answer's body.
        reason: String,
    },
    /// Refused by the proxy itself: malformed, too large, `CONNECT`, a
    /// `Host` naming another target, an upgrade that is not allowed.
    Refused {
        /// The status answered (400, 403, 405, 421, 431).
        status: u16,
        /// The `X-Proxy-Error` cause, e.g. `host-mismatch`.
        cause: String,
        /// The human reason, as in the answer's body.
        reason: String,
    },
}

impl Record {
    /// A record of a request; the status comes later.
    pub(super) fn new(
        method: Option<&str>,
        path: Option<&str>,
        authority: Option<String>,
        decision: Decision,
    ) -> Record {
        Record {
            method: method.map(|m| clip(m, 64)),
            path: path.map(|p| clip(p, MAX_PATH)),
            authority,
            decision,
            status: None,
        }
    }
}

/// The method and normalised path (no query) of a forward-proxy request
/// head (`GET http://host/path?q HTTP/1.1`), clipped as records are: for a
/// request the proxy refused before any exchange saw it. `None` for what
/// does not parse.
pub(crate) fn forward_fields(head: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(Some((head, _))) = crate::protocol::http::parse_request_head(head, head.len()) else {
        return (None, None);
    };
    let path = crate::protocol::http1::parse_absolute_target(&head.target)
        .ok()
        .flatten()
        .and_then(|t| crate::target::normalize_path(&t.path_and_query).ok());
    (
        Some(clip(&head.method, 64)),
        path.map(|p| clip(&p, MAX_PATH)),
    )
}

/// `text` cut to at most `max` bytes (on a character boundary), with `...`
/// when cut: text from a client that the proxy stores or echoes stays small.
pub(super) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
