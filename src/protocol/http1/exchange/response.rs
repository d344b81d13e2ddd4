//! The response side: emit what is due to the client in order, the proxy's
//! own answers and the upstream's responses (parsed only to find where each
//! ends, take its status, and rewrite its head for the forward proxy).

use super::checks;
use super::record::Decision;
use super::Verdict;
use super::{too_many_lines, Due, End, Exchange, Interim, Mode, Phase, Progress, Req, Resp};
use super::{UpstreamAction, VIA};
use crate::protocol::http::{error_response, HeadError, MAX_HEADERS};
use crate::protocol::http1::{self, Body, BodyKind, HeadEdit, ResponseHead};

/// The interim answer the proxy owes a client waiting to send its body.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

impl Exchange {
    /// The front of the upstream's unconsumed input, and the room in the
    /// client output: what to send the client next. Call it every round,
    /// with empty input too: the proxy's own answers come out here.
    pub fn on_upstream(&mut self, input: &[u8], room: usize) -> UpstreamAction {
        match self.phase {
            Phase::Open => {}
            Phase::Upgraded => return UpstreamAction::Upgrade,
            Phase::Closed { .. } => return UpstreamAction::Close,
        }
        self.upstream_pending = !input.is_empty();
        let action = match self.resp {
            Resp::Head => self.response_head(input, room),
            Resp::Body(_) => self.response_body(input, room),
        };
        let reached = match &action {
            UpstreamAction::Wait => false,
            // A dropped interim answer: consumed, and nothing sent.
            UpstreamAction::Send { bytes, .. } => !bytes.is_empty(),
            _ => true,
        };
        if reached {
            // Something reached the client: any wait for a response starts anew.
            self.wait_id += 1;
        }
        self.settle();
        match (&action, &self.phase) {
            // Nothing left to do: say so at once.
            (UpstreamAction::Wait, Phase::Closed { .. }) => UpstreamAction::Close,
            _ => action,
        }
    }

    /// Between responses: the answer due next, or the next response head.
    fn response_head(&mut self, input: &[u8], room: usize) -> UpstreamAction {
        let progress = match self.due.front_mut() {
            None if input.is_empty() => {
                // A failure the client should hear waits for its request.
                let told = self.upstream_failure.is_some()
                    && matches!(self.req, Req::Head)
                    && !self.client_eof;
                if self.upstream_eof && !told && !self.partial_head {
                    // The upstream closed between exchanges: nothing more
                    // can be forwarded, and nothing is owed. (A head begun
                    // is the client side's to end: the start the head gate
                    // held back may be malformed, and owed a 400.)
                    self.close(End::Done, None);
                }
                return UpstreamAction::Wait;
            }
            None => {
                // An answer would pass for the reply to the client's next request.
                let why = "the upstream sent a response to no request".to_owned();
                self.close(End::BadUpstream(why), None);
                return UpstreamAction::Close;
            }
            Some(Due::Local(local)) => {
                let answer = local.render();
                if answer.len() > room {
                    return UpstreamAction::Wait;
                }
                let Some(Due::Local(mut local)) = self.due.pop_front() else {
                    unreachable!("the front is a local answer");
                };
                self.answer_bytes -= local.cost();
                if let Some(mut record) = local.record.take() {
                    record.status = Some(local.status);
                    self.push_record(record);
                }
                if local.close {
                    self.close(End::Done, None);
                }
                return UpstreamAction::Answer(answer);
            }
            Some(Due::Upstream(f)) if f.interim == Interim::ContinueOwed => {
                // The `100` the proxy owes a client that may be waiting for
                // it (the upstream never saw its `Expect`), before anything
                // of the upstream's answer.
                if CONTINUE.len() > room {
                    return UpstreamAction::Wait;
                }
                f.interim = Interim::ContinueSent;
                return UpstreamAction::Answer(CONTINUE.to_vec());
            }
            Some(Due::Upstream(f)) => f.progress.clone(),
        };
        let parsed = if input.is_empty() {
            Ok(None)
        } else {
            let max = self.config.max_head_bytes;
            // After the upstream's EOF, always: a malformed start is a bad
            // upstream, not one that merely closed.
            if self.response_gate.due(input, max, self.upstream_eof) {
                let parsed = http1::parse_response_head(input, max);
                self.response_gate.parsed(&parsed);
                parsed
            } else {
                Ok(None)
            }
        };
        match parsed {
            // As for requests (`request.rs`): the parser takes a bare LF as
            // a line end, a client may not, and would then frame this
            // response (and take the rest as the next one) otherwise.
            Ok(Some((_, n))) if checks::has_bare_lf(&input[..n]) => self
                .bad_upstream("malformed response: bare LF in the head (lines end in CRLF)".into()),
            Ok(Some((head, n))) => self.response(head, n, room),
            Ok(None) if self.upstream_eof => {
                if let Some((cause, why)) = self.failure_answer() {
                    // The request went out under its rule and the upstream
                    // failed it (its TLS, mid-exchange): an error, not a
                    // refusal.
                    self.fail_front(&why);
                    let answer = error_response(502, &cause, &why, &[]);
                    self.close(End::BadUpstream(why), Some((502, answer)));
                    return UpstreamAction::Close;
                }
                let why = "the upstream closed the connection before answering";
                let answer = error_response(502, "upstream-closed", why, &[]);
                self.close(End::UpstreamClosed, Some((502, answer)));
                UpstreamAction::Close
            }
            Ok(None) => match progress {
                // The request cannot complete: the client is told, now.
                Progress::Broken(why) if input.is_empty() => {
                    let answer = error_response(400, "bad-request", &why, &[]);
                    self.close(End::BadRequest(why), Some((400, answer)));
                    UpstreamAction::Close
                }
                _ => {
                    // A head not whole yet is no answer: the response
                    // clock runs on (an upstream that trickles a head, or
                    // stops inside one, gets its 504 in time).
                    self.upstream_pending = false;
                    UpstreamAction::Wait
                }
            },
            Err(HeadError::TooLarge) => self.bad_upstream("response head too large".into()),
            Err(HeadError::Malformed(why)) => {
                self.bad_upstream(format!("malformed response: {why}"))
            }
        }
    }

    /// Marks the request due next, if it went upstream, as failed there.
    fn fail_front(&mut self, why: &str) {
        let cause = self.upstream_failure.as_ref().map(|(c, _)| c.clone());
        let Some(Due::Upstream(f)) = self.due.front_mut() else {
            return;
        };
        let Some(r) = &mut f.record else { return };
        let rule = match &r.decision {
            Decision::Allowed(rule) => rule.clone(),
            Decision::WouldDeny(rule) => Some(rule.clone()),
            _ => None,
        };
        r.decision = Decision::Failed {
            rule,
            cause: cause.unwrap_or_default(),
            reason: why.to_owned(),
        };
    }

    /// The upstream broke HTTP before any of this response went out: 502.
    /// A clock of the session's ran out (idle, half-close) while a
    /// response head was arriving: what the head gate held back is looked
    /// at first. A malformed or oversized start ends the conversation as a
    /// bad upstream (`502`), as a parse on arrival would have, and this
    /// returns true; a head merely incomplete changes nothing (the caller
    /// times the session out). `input`: the upstream's bytes not yet
    /// taken.
    pub fn response_stalled(&mut self, input: &[u8]) -> bool {
        let head_due = matches!(self.phase, Phase::Open)
            && matches!(self.resp, Resp::Head)
            && matches!(self.due.front(), Some(Due::Upstream(_)));
        if !head_due || input.is_empty() {
            return false;
        }
        // Only an error is taken here: a whole head always passes the gate.
        match http1::parse_response_head(input, self.config.max_head_bytes) {
            Err(HeadError::TooLarge) => self.bad_upstream("response head too large".into()),
            Err(HeadError::Malformed(why)) => {
                self.bad_upstream(format!("malformed response: {why}"))
            }
            Ok(_) => return false,
        };
        true
    }

    fn bad_upstream(&mut self, why: String) -> UpstreamAction {
        let answer = error_response(502, "bad-upstream-response", &why, &[]);
        self.close(End::BadUpstream(why), Some((502, answer)));
        UpstreamAction::Close
    }

    /// Acts on one parsed response head of `n` bytes.
    fn response(&mut self, head: ResponseHead, n: usize, room: usize) -> UpstreamAction {
        let Some(Due::Upstream(f)) = self.due.front() else {
            unreachable!("a response head is parsed only for a forwarded request");
        };
        let (upgrade, close, method) = (f.upgrade, f.close, f.method.clone());
        let switching = head.status == 101;
        let interim = (100..200).contains(&head.status) && !switching;
        let dropped = match f.interim {
            Interim::Never => interim,
            Interim::ContinueOwed | Interim::ContinueSent => head.status == 100,
            Interim::Relayed => false,
        };
        if dropped {
            // (Nothing reached the client: the response clock runs on.)
            return UpstreamAction::Send {
                consumed: n,
                bytes: Vec::new(),
            };
        }
        if switching {
            if !upgrade {
                return self
                    .bad_upstream("101 Switching Protocols without an upgrade request".into());
            }
            // Only to a protocol the request offered and we allow: never to
            // one whose bytes would escape the request rules.
            let chosen = first_token(&head);
            match chosen {
                Some(t) if !matches!(self.upgrade_verdict(&t), Verdict::Deny(_)) => {}
                other => {
                    let t = other.unwrap_or_else(|| "nothing".into());
                    let t = super::record::clip(&t, 64);
                    return self.bad_upstream(format!("101 Switching Protocols to {t}"));
                }
            }
        }
        let kind = if switching {
            BodyKind::Empty
        } else {
            match http1::response_body_kind(&method, &head) {
                Ok(kind) => kind,
                Err(e) => return self.bad_upstream(format!("bad response framing: {e}")),
            }
        };
        let closing = !interim && (close || http1::wants_close(head.version, &head.headers));
        let out = match self.config.mode {
            Mode::Tunnel { .. } => None,
            Mode::Forward { .. } => {
                let edit = HeadEdit {
                    strip_hop_by_hop: true,
                    upgrading: switching,
                    close: closing && !switching,
                    via: Some(VIA.into()),
                };
                let mut out = Vec::with_capacity(n + 64);
                let lines = http1::write_response_head(&head, &edit, &mut out);
                if lines > MAX_HEADERS {
                    // What goes on is what the proxy would parse itself
                    // (and a client with the same limit, or a portcullis
                    // further on): the lines it adds count.
                    return self.bad_upstream(too_many_lines("response", lines));
                }
                Some(out)
            }
        };
        if out.as_ref().map_or(n, Vec::len) > room {
            return UpstreamAction::Wait;
        }
        let Some(Due::Upstream(f)) = self.due.front_mut() else {
            unreachable!("checked above");
        };
        if !interim {
            f.close |= closing;
            if let Some(mut record) = f.record.take() {
                record.status = Some(head.status);
                self.push_record(record);
            }
            if switching {
                self.due.pop_front();
                self.phase = Phase::Upgraded;
            } else {
                match kind {
                    BodyKind::Empty | BodyKind::Length(0) => self.exchange_done(),
                    kind => self.resp = Resp::Body(Body::new(kind)),
                }
            }
        }
        match out {
            Some(bytes) => UpstreamAction::Send { consumed: n, bytes },
            None => UpstreamAction::Forward(n),
        }
    }

    /// In a response body: forward as much as is here and fits.
    fn response_body(&mut self, input: &[u8], room: usize) -> UpstreamAction {
        let Resp::Body(body) = &mut self.resp else {
            unreachable!("response_body outside a body");
        };
        if input.is_empty() {
            if !self.upstream_eof {
                return UpstreamAction::Wait;
            }
            if body.kind() == BodyKind::UntilClose && !self.upstream_cut {
                // The body ends with the upstream's EOF, and so does the
                // connection: nothing may follow it (the client reads to
                // EOF, so an answer to a pipelined request would become
                // part of this body).
                self.exchange_done();
                if matches!(self.phase, Phase::Open) {
                    self.close(End::Done, None);
                }
            } else {
                // Cut short (by its length, or by an end that was not
                // clean): the client must not take it for complete.
                self.close(End::UpstreamClosed, None);
            }
            return UpstreamAction::Close;
        }
        let avail = input.len().min(room);
        if avail == 0 {
            return UpstreamAction::Wait;
        }
        match body.advance(&input[..avail]) {
            Ok(n) => {
                if body.is_done() {
                    self.exchange_done();
                }
                debug_assert!(n > 0, "a body in progress takes at least a byte");
                UpstreamAction::Forward(n)
            }
            Err(e) => {
                // Part of the response is already out: the only honest
                // answer left is to close.
                self.close(
                    End::BadUpstream(format!("response body broke its framing: {e}")),
                    None,
                );
                UpstreamAction::Close
            }
        }
    }

    /// The response at the front of `due` is complete.
    fn exchange_done(&mut self) {
        self.resp = Resp::Head;
        if let Some(Due::Upstream(f)) = self.due.pop_front() {
            if f.close {
                // What was still due behind it is not answered: after a
                // response that closes, the client retries the rest.
                self.close(End::Done, None);
            } else if f.upgrade && matches!(self.req, Req::AwaitUpgrade) {
                // The upgrade was declined: the client's bytes are HTTP again.
                self.req = Req::Head;
            }
        }
    }
}

/// The first protocol a 101's `Upgrade` header names, lower-cased.
fn first_token(head: &ResponseHead) -> Option<String> {
    let value = head.header("Upgrade")?;
    let first = value.split(|&b| b == b',').next()?;
    let token = String::from_utf8_lossy(first).trim().to_ascii_lowercase();
    (!token.is_empty()).then_some(token)
}
