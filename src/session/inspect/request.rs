//! The request side of an inspected session: parse each request head,
//! check it against the request rules, forward it (rewritten for the
//! forward proxy) or answer it here, and stream its body by its framing.

use super::{why_answer, After, Exchange, Inspect, Mode, Req, Resp, Stop, VIA};
use crate::policy::{normalize_path, RequestVerdict, Target};
use crate::protocol::http::{self, parse_request_head, HeadError, RequestHead};
use crate::protocol::http1::exchange::{Decision, Record};
use crate::protocol::http1::{self, Body, BodyKind, HeadEdit};
use crate::session::ctx::Ctx;

impl Inspect {
    /// Parses and forwards (or refuses) requests from `cin`.
    pub(super) fn requests(&mut self, id: u64, ctx: &mut Ctx) -> Result<bool, Stop> {
        let mut moved = false;
        loop {
            match &mut self.req {
                Req::AwaitUpgrade | Req::Stopped => return Ok(moved),
                Req::Head => {
                    if self.cin.is_empty() {
                        return Ok(moved);
                    }
                    let max = ctx.settings.limits.max_head_bytes;
                    match parse_request_head(self.cin.data(), max) {
                        Ok(None) => return Ok(moved),
                        Ok(Some((head, n))) => {
                            if !self.request(head, n, id, ctx)? {
                                return Ok(moved);
                            }
                        }
                        Err(HeadError::TooLarge) => {
                            ctx.stats.request(false);
                            let why = "request head too large".into();
                            self.refuse(431, "head-too-large", why, true);
                        }
                        Err(HeadError::Malformed(why)) => {
                            ctx.stats.request(false);
                            let why = format!("malformed request: {why}");
                            self.refuse(400, "bad-request", why, true);
                        }
                    }
                    self.requests += 1;
                    moved = true;
                }
                Req::Body {
                    body,
                    forward,
                    next,
                } => {
                    let room = if *forward {
                        self.uout.room()
                    } else {
                        usize::MAX
                    };
                    let avail = self.cin.len().min(room);
                    if avail == 0 && !body.is_done() {
                        return Ok(moved);
                    }
                    let n = match body.advance(&self.cin.data()[..avail]) {
                        Ok(n) => n,
                        Err(e) => {
                            // The head is already upstream: all we can do is stop.
                            log::info!("conn={id} request body broke its framing: {e}");
                            self.req = Req::Stopped;
                            self.close_after = true;
                            return Ok(true);
                        }
                    };
                    if *forward {
                        self.uout.extend(&self.cin.data()[..n]);
                    }
                    self.cin.consume(n);
                    if body.is_done() {
                        // While a body streams no other request is parsed: the
                        // newest exchange is this request's.
                        if *forward {
                            if let Some(Exchange::Upstream { sent, .. }) = self.due.back_mut() {
                                *sent = true;
                            }
                        }
                        self.req = next.req();
                    } else if n == 0 {
                        return Ok(moved);
                    }
                    moved = true;
                }
            }
        }
    }

    /// Acts on one parsed request head of `n` bytes. Returns false to wait
    /// (for room upstream, or for the due answers before a switch).
    fn request(
        &mut self,
        head: RequestHead,
        n: usize,
        id: u64,
        ctx: &mut Ctx,
    ) -> Result<bool, Stop> {
        if head.method == "CONNECT" {
            ctx.stats.request(false);
            let why = "CONNECT is not allowed inside an inspected connection".to_string();
            self.refuse(405, "method-not-allowed", why, true);
            return Ok(true);
        }
        let (path_and_query, authority) = match &self.mode {
            Mode::Tunnel => match http1::parse_absolute_target(&head.target) {
                Ok(Some(abs)) => (abs.path_and_query, None),
                _ => (head.target.clone(), None),
            },
            Mode::Forward { .. } => match http1::parse_absolute_target(&head.target) {
                Ok(Some(abs)) => match Target::new(&abs.host, abs.port) {
                    Ok(t) => (abs.path_and_query, Some(t)),
                    Err(e) => {
                        ctx.stats.request(false);
                        self.refuse(400, "bad-request", format!("invalid host: {}", e.0), true);
                        return Ok(true);
                    }
                },
                Ok(None) => {
                    ctx.stats.request(false);
                    let why =
                        "a forward proxy request needs an absolute URI (http://host/path)".into();
                    self.refuse(400, "bad-request", why, true);
                    return Ok(true);
                }
                Err(why) => {
                    ctx.stats.request(false);
                    self.refuse(400, "bad-request", why, true);
                    return Ok(true);
                }
            },
        };
        if let (Some(target), Mode::Forward { upstream }) = (&authority, &self.mode) {
            if target != upstream {
                // Another host: its own upstream, once everything due is answered.
                let idle = self.due.is_empty()
                    && matches!(self.resp, Resp::Head)
                    && self.uout.is_empty()
                    && self.cout.is_empty();
                return if idle {
                    Err(Stop::Switch(target.clone()))
                } else {
                    Ok(false)
                };
            }
        }
        let path = match normalize_path(&path_and_query) {
            Ok(p) => p,
            Err(why) => {
                ctx.stats.request(false);
                self.refuse(400, "bad-request", format!("invalid path: {why}"), true);
                return Ok(true);
            }
        };
        let kind = match http1::request_body_kind(&head) {
            Ok(k) => k,
            Err(e) => {
                ctx.stats.request(false);
                self.refuse(
                    400,
                    "bad-request",
                    format!("bad request framing: {e}"),
                    true,
                );
                return Ok(true);
            }
        };
        let close = http1::wants_close(head.version, &head.headers);
        let upgrade = http1::is_upgrade_request(&head);
        let verdict = match &self.rules {
            Some(rules) => rules.check(&head.method, &path),
            None => RequestVerdict::Allow("-".into()),
        };
        if let RequestVerdict::Deny(rule) = verdict {
            ctx.stats.request(false);
            self.record(
                &head.method,
                &path,
                Decision::Denied(rule.clone()),
                Some(403),
            );
            log::info!("conn={id} request denied: {} {path} by {rule}", head.method);
            let why = format!("{} {path} is denied by {rule}", head.method);
            let cause = format!("denied; rule={rule}");
            let answer = http::answer(403, &cause, &why, &[], close);
            self.due.push_back(Exchange::Local { answer, close });
            self.cin.consume(n);
            // The refused request's body is read and dropped, so the next
            // request on this connection parses cleanly.
            let next = if close { After::Stopped } else { After::Head };
            self.req = match kind {
                BodyKind::Empty => next.req(),
                kind => Req::Body {
                    body: Body::new(kind),
                    forward: false,
                    next,
                },
            };
            return Ok(true);
        }
        let mut out = Vec::with_capacity(n + 64);
        match (&self.mode, &authority) {
            (Mode::Forward { .. }, Some(target)) => {
                // RFC 9112 3.2.2: the absolute URI's authority replaces Host.
                let mut head = head.clone();
                head.headers
                    .retain(|(name, _)| !name.eq_ignore_ascii_case("host"));
                let host = match target.port {
                    80 => host_of(target),
                    port => format!("{}:{port}", host_of(target)),
                };
                head.headers.push(("Host".into(), host.into_bytes()));
                let edit = HeadEdit {
                    strip_hop_by_hop: true,
                    upgrading: upgrade,
                    close,
                    via: Some(VIA.into()),
                };
                http1::write_request_head(&head, &path_and_query, &edit, &mut out);
            }
            _ => out.extend_from_slice(&self.cin.data()[..n]),
        }
        if self.uout.room() < out.len() {
            return Ok(false);
        }
        ctx.stats.request(true);
        log::debug!("conn={id} request {} {path}", head.method);
        let decision = match verdict {
            RequestVerdict::WouldDeny(rule) => Decision::WouldDeny(rule),
            RequestVerdict::Allow(rule) if &*rule != "-" => Decision::Allowed(Some(rule)),
            _ => Decision::Allowed(None),
        };
        self.record(&head.method, &path, decision, None);
        self.uout.extend(&out);
        self.cin.consume(n);
        let sent = kind == BodyKind::Empty || expects_continue(&head);
        self.due.push_back(Exchange::Upstream {
            method: head.method,
            upgrade,
            close,
            // A client that waits for `100 Continue` is waiting on the
            // upstream from the head on.
            sent,
        });
        let next = match (upgrade, close) {
            (true, _) => After::AwaitUpgrade,
            (false, true) => After::Stopped,
            (false, false) => After::Head,
        };
        self.req = match kind {
            BodyKind::Empty => next.req(),
            kind => Req::Body {
                body: Body::new(kind),
                forward: true,
                next,
            },
        };
        Ok(true)
    }

    /// Answers a request here (4xx); `fatal`: the request stream cannot be
    /// followed past it, so no more requests are read.
    fn refuse(&mut self, status: u16, cause: &str, why: String, fatal: bool) {
        log::info!("inspect: {status} {why}");
        self.records.push(Record {
            method: None,
            path: None,
            authority: None,
            decision: Decision::Refused {
                status,
                cause: cause.to_string(),
                reason: why.clone(),
            },
            status: Some(status),
        });
        let answer = why_answer(status, cause, &why);
        self.due.push_back(Exchange::Local {
            answer,
            close: fatal,
        });
        if fatal {
            self.req = Req::Stopped;
        }
    }
}

impl Inspect {
    /// Keeps a judged request for its event (ops bridge, see `records`).
    fn record(&mut self, method: &str, path: &str, decision: Decision, status: Option<u16>) {
        self.records.push(Record {
            method: Some(method.to_string()),
            path: Some(path.to_string()),
            authority: None,
            decision,
            status,
        });
    }
}

/// The host part of a target as it goes in a Host header.
fn host_of(target: &Target) -> String {
    match &target.host {
        crate::policy::Host::Domain(d) => d.clone(),
        crate::policy::Host::Ip(std::net::IpAddr::V6(a)) => format!("[{a}]"),
        crate::policy::Host::Ip(a) => a.to_string(),
    }
}

/// The request waits for `100 Continue` before sending its body.
fn expects_continue(head: &RequestHead) -> bool {
    head.header("Expect")
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"))
}
