//! The request side: parse each head, judge it (framing, target, rules,
//! upgrade), forward it or queue the proxy's answer, and stream or drop its
//! body by its framing.

use super::checks::{self, Named};
use super::record::{clip, Record};
use super::too_many_lines;
use super::{
    After, ClientAction, Decision, Due, Exchange, Forwarded, Interim, Local, Mode, Phase, Progress,
    Req, Resp, MAX_ANSWER_BYTES, MAX_DUE, VIA,
};

use super::Verdict;
use crate::protocol::http::{parse_request_head, HeadError, RequestHead, MAX_HEADERS};
use crate::protocol::http1::{self, Body, BodyKind, HeadEdit};
use crate::target::{normalize_path, Target};

/// The most of a client's text the proxy echoes in an answer.
const MAX_ECHO: usize = 512;

/// A well-formed request head, as the policy and the framing see it.
struct Judged {
    method: String,
    /// The normalised path.
    path: String,
    /// Where the request goes (for the record).
    authority: String,
    /// A tunnel's request: its `Host`, parsed.
    host: Option<Named>,
    kind: BodyKind,
    /// The connection ends after this exchange.
    close: bool,
    upgrade: bool,
    expects_continue: bool,
}

impl Judged {
    fn record(&self, decision: Decision) -> Record {
        let authority = Some(self.authority.clone());
        Record::new(Some(&self.method), Some(&self.path), authority, decision)
    }
}

/// Why the policy refuses a well-formed request.
struct Refusal {
    status: u16,
    /// `X-Proxy-Error`.
    cause: String,
    why: String,
    decision: Decision,
}

impl Refusal {
    /// Refused by the proxy's own checks; `cause` goes in the record,
    /// `header` in `X-Proxy-Error`.
    fn proxy(status: u16, cause: &str, why: String, header: String) -> Refusal {
        Refusal {
            status,
            cause: header,
            decision: Decision::Refused {
                status,
                cause: cause.to_owned(),
                reason: why.clone(),
            },
            why,
        }
    }
}

impl Exchange {
    /// The front of the client's unconsumed input, and the room in the
    /// upstream output: what to do next. See [`ClientAction`].
    pub fn on_client(&mut self, input: &[u8], room: usize) -> ClientAction {
        if !matches!(self.phase, Phase::Open) {
            return ClientAction::Stopped;
        }
        let action = match self.req {
            Req::Stopped => ClientAction::Stopped,
            Req::AwaitUpgrade => ClientAction::Wait,
            Req::Body { .. } => self.client_body(input, room),
            Req::Head => self.client_head(input, room),
        };
        self.settle();
        action
    }

    /// In a body: forward (or drop) as much of it as is here and fits.
    fn client_body(&mut self, input: &[u8], room: usize) -> ClientAction {
        let Req::Body {
            body,
            forward,
            next,
        } = &mut self.req
        else {
            unreachable!("client_body outside a body");
        };
        let forward = *forward;
        let avail = if forward {
            input.len().min(room)
        } else {
            input.len()
        };
        if avail == 0 {
            if input.is_empty() && self.client_eof {
                self.break_request(forward, "the client closed inside the request body");
                return ClientAction::Stopped;
            }
            return ClientAction::Wait;
        }
        let n = match body.advance(&input[..avail]) {
            Ok(n) => n,
            Err(e) => {
                self.break_request(forward, &format!("request body broke its framing: {e}"));
                return ClientAction::Stopped;
            }
        };
        if body.is_done() {
            let next = *next;
            self.req = next.req();
            if forward {
                self.request_sent();
            }
        }
        debug_assert!(n > 0, "a body in progress takes at least a byte");
        if forward {
            ClientAction::Forward(n)
        } else {
            ClientAction::Discard(n)
        }
    }

    /// The body being read cannot be followed further: no more requests. A
    /// forwarded one can never complete; a refused one's answer now closes.
    fn break_request(&mut self, forward: bool, why: &str) {
        self.req = Req::Stopped;
        // While a body streams no other request is parsed: the newest
        // exchange, if still due, is this request's.
        match self.due.back_mut() {
            Some(Due::Upstream(f)) if forward => {
                f.progress = Progress::Broken(why.to_owned());
                f.close = true;
                self.wait_id += 1;
            }
            Some(Due::Local(l)) if !forward => l.close = true,
            _ => {}
        }
    }

    /// The newest forwarded request is wholly upstream: the response clock
    /// may start.
    fn request_sent(&mut self) {
        if let Some(Due::Upstream(f)) = self.due.back_mut() {
            if f.progress == Progress::Sending {
                f.progress = Progress::Sent;
                self.wait_id += 1;
            }
        }
    }

    /// The head timer fired ([`Exchange::awaiting_head`]): a head still
    /// incomplete is answered `408` in order, and no more requests are read
    /// (the conversation ends once what is due is answered). Returns whether
    /// it was; otherwise (a stale timer) nothing changes. `input`: the
    /// client's bytes not yet taken, the head's start.
    pub fn head_timeout(&mut self, input: &[u8]) -> bool {
        if self.awaiting_head().is_none() {
            return false;
        }
        // Bytes the head gate held back are looked at first: a malformed
        // start is refused for what it is (400, 431), not timed out. Only
        // an error is taken here: a whole head always passes the gate.
        if parse_request_head(input, self.config.max_head_bytes).is_err() {
            self.request_gate.restart();
            let _ = self.client_head(input, 0);
            self.settle();
            return true;
        }
        self.partial_head = false;
        let why = "the request head did not arrive in time".to_owned();
        self.refuse_fatal(None, 408, "request-timeout", why);
        self.settle();
        true
    }

    /// The request head at the front of `input`, parsed when the gate lets
    /// it through (`Ok(None)` otherwise: not whole yet), and always after
    /// the client's EOF (a malformed start is refused, not dropped as cut
    /// short).
    fn parse_head(&mut self, input: &[u8]) -> Result<Option<(RequestHead, usize)>, HeadError> {
        let max = self.config.max_head_bytes;
        if !self.request_gate.due(input, max, self.client_eof) {
            return Ok(None);
        }
        let parsed = parse_request_head(input, max);
        self.request_gate.parsed(&parsed);
        parsed
    }

    /// At a message boundary: parse and act on the next request head.
    fn client_head(&mut self, input: &[u8], room: usize) -> ClientAction {
        self.partial_head = false;
        if self.upstream_eof {
            if let Some((cause, why)) = self.failure_answer() {
                // The upstream failed before this request: it is told why.
                if self.due.is_empty() {
                    return match self.parse_head(input) {
                        Ok(None) if !self.client_eof => {
                            self.partial_head = !input.is_empty();
                            ClientAction::Wait
                        }
                        Ok(Some((head, _))) => self.upstream_failed_before(&head, &cause, why),
                        _ => self.refuse_fatal(None, 502, &cause, why),
                    };
                }
            }
            // Nothing more can be forwarded; finish what is due. A start
            // the head gate held back is looked at first: malformed, it is
            // refused for what it is (400, 431), as a parse on arrival
            // would have, not dropped with the connection. Only an error
            // is taken: a whole head always passes the gate.
            if let Err(e) = parse_request_head(input, self.config.max_head_bytes) {
                self.request_gate.restart();
                return self.refuse_head(e);
            }
            self.req = Req::Stopped;
            return ClientAction::Stopped;
        }
        if self.due.len() >= MAX_DUE || self.answer_bytes >= MAX_ANSWER_BYTES {
            return ClientAction::Wait;
        }
        match self.parse_head(input) {
            Ok(None) if self.client_eof => {
                self.req = Req::Stopped;
                ClientAction::Stopped
            }
            Ok(None) => {
                self.partial_head = !input.is_empty();
                ClientAction::Wait
            }
            Ok(Some((head, n))) if checks::has_bare_lf(&input[..n]) => {
                // The parser takes a bare LF as a line end; an origin that
                // does not would frame the message (and what follows it)
                // otherwise: never forward such a head.
                let why = "malformed request: bare LF in the head (lines end in CRLF)".to_owned();
                self.refuse_fatal(Some(&head), 400, "bad-request", why)
            }
            Ok(Some((head, n))) => self.request(head, n, input, room),
            Err(e) => self.refuse_head(e),
        }
    }

    /// A request head that does not parse: `431` or `400`, and the
    /// conversation ends.
    fn refuse_head(&mut self, e: HeadError) -> ClientAction {
        match e {
            HeadError::TooLarge => {
                let why = "request head too large".to_owned();
                self.refuse_fatal(None, 431, "head-too-large", why)
            }
            HeadError::Malformed(why) => self.refuse_fatal(
                None,
                400,
                "bad-request",
                format!("malformed request: {why}"),
            ),
        }
    }

    /// Acts on one parsed head of `n` bytes at the front of `input`.
    fn request(&mut self, head: RequestHead, n: usize, input: &[u8], room: usize) -> ClientAction {
        self.heads += 1;
        if head.method == "CONNECT" {
            let why = "CONNECT is not allowed inside an inspected connection".to_owned();
            return self.refuse_fatal(Some(&head), 405, "method-not-allowed", why);
        }
        if let (Mode::Forward { .. }, Some(login)) = (&self.config.mode, &self.config.login) {
            let other = head
                .header("Proxy-Authorization")
                .is_some_and(|v| !login.matches(v));
            if other {
                let why = "other credentials than this connection logged in with: \
                           reconnect to log in again"
                    .to_owned();
                return self.refuse_fatal(Some(&head), 407, "auth-required", why);
            }
        }
        let (target, uri) = match self.target(&head) {
            Ok(t) => t,
            Err(why) => return self.refuse_fatal(Some(&head), 400, "bad-request", why),
        };
        if let (Mode::Forward { upstream, tls }, Some(named)) = (&self.config.mode, &uri) {
            if named.target != *upstream || named.tls != *tls {
                // Another origin: its own upstream, once everything due is answered.
                let answered = self.due.is_empty() && matches!(self.resp, Resp::Head);
                return match answered {
                    true => ClientAction::Switch {
                        target: named.target.clone(),
                        tls: named.tls,
                    },
                    false => ClientAction::Wait,
                };
            }
        }
        let judged = match self.judge(&head, &target, uri.as_ref()) {
            Ok(j) => j,
            Err(why) => return self.refuse_fatal(Some(&head), 400, "bad-request", why),
        };
        let decision = match self.policy(&head, &judged, uri.as_ref()) {
            Ok(decision) => decision,
            Err(refusal) => return self.refuse(n, &judged, refusal),
        };

        // Placeholders of secrets: replaced for their hosts, refused elsewhere.
        let mut head = head;
        let injected = match self.inject(&head, uri.as_ref()) {
            Ok(Some(headers)) => {
                head.headers = headers;
                true
            }
            Ok(None) => false,
            Err(r) => {
                let cause = format!("secret-not-allowed; secret={}", r.secret);
                let refusal = Refusal::proxy(403, "secret-not-allowed", r.why, cause);
                return self.refuse(n, &judged, refusal);
            }
        };

        // An upload that may wait for `100 Continue` goes up without its
        // `Expect`, and the proxy sends the `100` itself (as Envoy does): an
        // upstream told to expect a body only on its say-so may answer from
        // the head alone, keep the connection and read the body, sent
        // without waiting, as its next request, one the proxy never judged
        // (the 0.CL desync). Without `Expect`, the body is the body.
        let strip_expect = judged.expects_continue && judged.kind != BodyKind::Empty;
        if strip_expect {
            head.headers
                .retain(|(name, _)| !name.eq_ignore_ascii_case("expect"));
        }

        // Allowed: forward the head, verbatim in a tunnel (but for injected
        // secrets or a stripped `Expect`), rewritten for the forward proxy.
        let out = match (&self.config.mode, &uri) {
            (Mode::Forward { .. }, Some(named)) => {
                let mut out = Vec::with_capacity(n + 128);
                let lines = rewrite_request(&head, &target, named, &judged, &mut out);
                if lines > MAX_HEADERS {
                    // What goes on is what the proxy would parse itself
                    // (and an origin with the same limit, or a portcullis
                    // further on): the lines it adds count. (A tunnel's
                    // rewrite only ever drops lines.)
                    let why = too_many_lines("request", lines);
                    let refusal =
                        Refusal::proxy(431, "head-too-large", why, "head-too-large".into());
                    return self.refuse(n, &judged, refusal);
                }
                Some(out)
            }
            _ if injected || strip_expect => {
                let mut out = Vec::with_capacity(n + 128);
                http1::write_request_head(&head, &head.target, &HeadEdit::default(), &mut out);
                Some(out)
            }
            _ => None,
        };
        if out.as_ref().map_or(n, Vec::len) > room {
            return ClientAction::Wait;
        }
        let progress = match judged.kind {
            BodyKind::Empty => Progress::Sent,
            _ => Progress::Sending,
        };
        self.due.push_back(Due::Upstream(Forwarded {
            method: judged.method.clone(),
            upgrade: judged.upgrade,
            close: judged.close,
            progress,
            // An HTTP/1.0 client never waits for a `100` (RFC 9110 10.1.1).
            interim: match (head.version, strip_expect) {
                (0, _) => Interim::Never,
                (_, true) => Interim::ContinueOwed,
                (_, false) => Interim::Relayed,
            },
            record: Some(judged.record(decision)),
        }));
        self.wait_id += 1;
        let next = match (judged.upgrade, judged.close) {
            (true, _) => After::AwaitUpgrade,
            (false, true) => After::Stopped,
            (false, false) => After::Head,
        };
        self.req = match judged.kind {
            BodyKind::Empty => next.req(),
            kind => Req::Body {
                body: Body::new(kind),
                forward: true,
                next,
            },
        };
        match out {
            Some(bytes) => ClientAction::Send { consumed: n, bytes },
            None => {
                debug_assert!(n <= input.len());
                ClientAction::Forward(n)
            }
        }
    }

    /// The head's headers with the placeholders of secrets replaced
    /// (`None`: none in it), or why it may not go: see
    /// [`HeaderSecrets::inject`](super::HeaderSecrets::inject). The
    /// destination is the tunnel's (`Host` was checked against it) or the
    /// absolute URI's.
    fn inject(
        &self,
        head: &RequestHead,
        uri: Option<&Named>,
    ) -> Result<Option<super::Headers>, super::SecretRefusal> {
        let Some(secrets) = &self.config.secrets else {
            return Ok(None);
        };
        // Inside TLS to the destination: a terminated tunnel (the proxy
        // speaks TLS on to the origin), or the forward proxy's `https://`.
        let (dest, tls) = match (&self.config.mode, uri) {
            (Mode::Forward { .. }, Some(named)) => (&named.target, named.tls),
            (Mode::Forward { upstream, tls }, None) => (upstream, *tls),
            (Mode::Tunnel { target, tls }, _) => (target, *tls),
        };
        secrets.inject(&head.target, &head.headers, dest, tls)
    }

    /// The request's path-and-query, and the authority of an absolute URI
    /// (tunnel: any; forward: required).
    fn target(&self, head: &RequestHead) -> Result<(String, Option<Named>), String> {
        let abs = match http1::parse_absolute_target(&head.target) {
            Ok(abs) => abs,
            Err(why) => return Err(format!("bad request target: {}", clip(&why, MAX_ECHO))),
        };
        let Some(abs) = abs else {
            return match self.config.mode {
                Mode::Tunnel { .. } => Ok((head.target.clone(), None)),
                Mode::Forward { .. } => {
                    Err("a forward proxy request needs an absolute URI (http://host/path)".into())
                }
            };
        };
        let target = Target::new(&abs.host, abs.port)
            .map_err(|e| format!("invalid host: {}", clip(&e.0, MAX_ECHO)))?;
        let named = Named {
            target,
            explicit_port: checks::absolute_has_port(&head.target),
            tls: abs.tls,
        };
        Ok((abs.path_and_query, Some(named)))
    }

    /// Everything that makes a head malformed whatever the policy (answered
    /// 400 and the connection closed): `Host` missing, repeated or invalid,
    /// framing, a target that does not normalise.
    fn judge(
        &self,
        head: &RequestHead,
        target: &str,
        uri: Option<&Named>,
    ) -> Result<Judged, String> {
        let hosts = checks::host_values(head);
        if hosts.len() > 1 {
            return Err("several Host headers".into());
        }
        if hosts.is_empty() && head.version == 1 {
            return Err("an HTTP/1.1 request without Host".into());
        }
        // The forward proxy replaces `Host`; a tunnel checks it. A `Host`
        // without a port names the scheme's default port (RFC 9110 7.2):
        // 443 inside TLS, else 80.
        let host = match (&self.config.mode, hosts.first()) {
            (Mode::Tunnel { tls, .. }, Some(value)) => {
                let default_port = if *tls { 443 } else { 80 };
                Some(checks::parse_host(value, default_port).map_err(|why| clip(&why, MAX_ECHO))?)
            }
            _ => None,
        };
        let kind = match http1::request_body_kind(head) {
            // No body either way: the next request starts right after the head.
            Ok(BodyKind::Length(0)) => BodyKind::Empty,
            Ok(kind) => kind,
            Err(e) => return Err(format!("bad request framing: {e}")),
        };
        let upgrade = http1::is_upgrade_request(head);
        if upgrade {
            checks::upgrade_shape(head, kind)
                .map_err(|why| format!("bad upgrade request: {why}"))?;
        }
        let path = normalize_path(target)
            .map_err(|why| format!("invalid path: {}", clip(&why, MAX_ECHO)))?;
        let authority = match (uri, &host, &self.config.mode) {
            (Some(named), _, _) | (None, Some(named), _) => named.target.to_string(),
            (None, None, Mode::Tunnel { target, .. }) => target.to_string(),
            (None, None, Mode::Forward { upstream, .. }) => upstream.to_string(),
        };
        Ok(Judged {
            method: head.method.clone(),
            path,
            authority,
            host,
            kind,
            close: http1::wants_close(head.version, &head.headers),
            upgrade,
            expects_continue: checks::expects_continue(head),
        })
    }

    /// The policy on a well-formed request: `Ok(decision)` to forward it
    /// (allowed, or only would-be denied by an audit-mode rule), or why not.
    fn policy(
        &self,
        head: &RequestHead,
        judged: &Judged,
        uri: Option<&Named>,
    ) -> Result<Decision, Refusal> {
        if let Mode::Tunnel { target, .. } = &self.config.mode {
            let target = self.config.vetted_host.as_ref().unwrap_or(target);
            let mismatch = uri
                .and_then(|n| checks::mismatch("the URI", n, target))
                .or_else(|| {
                    judged
                        .host
                        .as_ref()
                        .and_then(|n| checks::mismatch("Host", n, target))
                });
            if let Some(why) = mismatch {
                let why = clip(&why, MAX_ECHO);
                return Err(Refusal::proxy(
                    421,
                    "host-mismatch",
                    why,
                    "host-mismatch".into(),
                ));
            }
        }
        let mut decision = match &self.config.rules {
            None => Decision::Allowed(None),
            Some(rules) => match rules.request(&judged.method, &judged.path) {
                Verdict::Allow(rule) => Decision::Allowed(Some(rule)),
                Verdict::WouldDeny(rule) => Decision::WouldDeny(rule),
                Verdict::Deny(rule) => {
                    let path = clip(&judged.path, MAX_ECHO);
                    return Err(Refusal {
                        status: 403,
                        cause: clip(&format!("denied; rule={rule}"), 256),
                        why: format!("{} {path} is denied by {rule}", judged.method),
                        decision: Decision::Denied(rule),
                    });
                }
            },
        };
        if judged.upgrade {
            for token in checks::upgrade_tokens(head) {
                match self.upgrade_verdict(&token) {
                    Verdict::Allow(_) => {}
                    Verdict::WouldDeny(rule) => {
                        if matches!(decision, Decision::Allowed(_)) {
                            decision = Decision::WouldDeny(rule);
                        }
                    }
                    Verdict::Deny(_) => {
                        let token = clip(&token, 64);
                        let why = format!("upgrading to {token} is not allowed here");
                        let cause = format!("upgrade-not-allowed; token={token}");
                        return Err(Refusal::proxy(403, "upgrade-not-allowed", why, cause));
                    }
                }
            }
        }
        Ok(decision)
    }

    /// Refuses a well-formed request: its answer is queued in order, its
    /// head and then body dropped, and the connection carries on (unless it
    /// asked to close, or waits for `100 Continue`: it may never send the
    /// body, so what follows cannot be told from it).
    fn refuse(&mut self, n: usize, judged: &Judged, refusal: Refusal) -> ClientAction {
        let close = judged.close || (judged.expects_continue && judged.kind != BodyKind::Empty);
        let record = judged.record(refusal.decision);
        self.queue_answer(refusal.status, refusal.cause, refusal.why, close, record);
        let next = if close { After::Stopped } else { After::Head };
        self.req = match judged.kind {
            BodyKind::Empty => next.req(),
            kind => Req::Body {
                body: Body::new(kind),
                forward: false,
                next,
            },
        };
        ClientAction::Discard(n)
    }

    /// Refuses a request the stream cannot be followed past: answered in
    /// order, then the connection closes; nothing more is read.
    fn refuse_fatal(
        &mut self,
        head: Option<&RequestHead>,
        status: u16,
        cause: &str,
        why: String,
    ) -> ClientAction {
        let why = clip(&why, MAX_ECHO);
        let decision = Decision::Refused {
            status,
            cause: cause.to_owned(),
            reason: why.clone(),
        };
        let record = Record::new(head.map(|h| h.method.as_str()), None, None, decision);
        self.queue_answer(status, cause.to_owned(), why, true, record);
        self.req = Req::Stopped;
        ClientAction::Stopped
    }

    /// A request that arrived after the upstream failed: the 502 saying
    /// why, recorded as an error (not a refusal) with its method and path.
    fn upstream_failed_before(
        &mut self,
        head: &RequestHead,
        cause: &str,
        why: String,
    ) -> ClientAction {
        let why = clip(&why, MAX_ECHO);
        let path = self
            .target(head)
            .ok()
            .and_then(|(target, _)| normalize_path(&target).ok());
        let authority = match &self.config.mode {
            Mode::Tunnel { target, .. } => Some(target.to_string()),
            Mode::Forward { .. } => None,
        };
        // `cause` is the header's text (`upstream-tls; WHY`); the record
        // keeps the bare cause, as for refusals.
        let bare = self
            .upstream_failure
            .as_ref()
            .map_or_else(|| cause.to_owned(), |(c, _)| c.clone());
        let decision = Decision::Failed {
            rule: None,
            cause: bare,
            reason: why.clone(),
        };
        let record = Record::new(Some(&head.method), path.as_deref(), authority, decision);
        self.queue_answer(502, cause.to_owned(), why, true, record);
        self.req = Req::Stopped;
        ClientAction::Stopped
    }

    fn queue_answer(&mut self, status: u16, cause: String, why: String, close: bool, r: Record) {
        let local = Local {
            status,
            cause,
            why,
            close,
            record: Some(r),
        };
        self.answer_bytes += local.cost();
        self.due.push_back(Due::Local(local));
    }
}

/// The forward proxy's request head: origin-form, `Host` from the URI
/// (RFC 9112 3.2.2), hop-by-hop headers dropped, `Via` added. Returns the
/// number of header lines written.
fn rewrite_request(
    head: &RequestHead,
    path_and_query: &str,
    named: &Named,
    judged: &Judged,
    out: &mut Vec<u8>,
) -> usize {
    let mut head = head.clone();
    head.headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case("host"));
    let host = checks::host_header(&named.target, named.tls);
    head.headers.push(("Host".into(), host.into_bytes()));
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        upgrading: judged.upgrade,
        close: judged.close,
        via: Some(VIA.into()),
    };
    http1::write_request_head(&head, path_and_query, &edit, out)
}
