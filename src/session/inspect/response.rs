//! The response side of an inspected session: emit the answers due to the
//! client in order (the proxy's own, and the upstream's responses parsed
//! only to find where each ends).

use super::{Exchange, Inspect, Mode, Req, Resp, Stop, VIA};
use crate::lifecycle::Side;
use crate::protocol::http::HeadError;
use crate::protocol::http1::{self, Body, BodyKind, HeadEdit, ResponseHead};
use crate::session::ctx::Ctx;

impl Inspect {
    /// Emits answers due to the client: local ones, and upstream responses
    /// parsed from `uin` and streamed into `cout`.
    pub(super) fn responses(&mut self, ctx: &mut Ctx) -> Result<bool, Stop> {
        let mut moved = false;
        loop {
            match &mut self.resp {
                Resp::Head => {
                    match self.due.front() {
                        Some(Exchange::Local { answer, close }) => {
                            if self.cout.room() < answer.len() {
                                return Ok(moved);
                            }
                            self.cout.extend(answer);
                            self.close_after |= *close;
                            self.due.pop_front();
                            moved = true;
                            continue;
                        }
                        Some(Exchange::Upstream { .. }) => {}
                        None if self.uin.is_empty() => return Ok(moved),
                        None => {
                            return Err(Stop::BadUpstream(
                                "the upstream sent a response to no request".into(),
                            ))
                        }
                    }
                    if self.uin.is_empty() {
                        return Ok(moved);
                    }
                    let max = ctx.settings.limits.max_head_bytes;
                    let (head, n) = match http1::parse_response_head(self.uin.data(), max) {
                        Ok(None) => return Ok(moved),
                        Ok(Some(parsed)) => parsed,
                        Err(HeadError::TooLarge) => {
                            return Err(Stop::BadUpstream("response head too large".into()))
                        }
                        Err(HeadError::Malformed(why)) => {
                            return Err(Stop::BadUpstream(format!("malformed response: {why}")))
                        }
                    };
                    if !self.response(head, n)? {
                        return Ok(moved);
                    }
                    moved = true;
                }
                Resp::Body(body) => {
                    let avail = self.uin.len().min(self.cout.room());
                    if avail == 0 && !body.is_done() {
                        return Ok(moved);
                    }
                    let n = match body.advance(&self.uin.data()[..avail]) {
                        Ok(n) => n,
                        Err(e) => {
                            // Part of the response is already out: the only
                            // honest answer left is to close.
                            log::info!("inspect: response body broke its framing: {e}");
                            return Err(Stop::Gone(Side::Upstream));
                        }
                    };
                    self.cout.extend(&self.uin.data()[..n]);
                    self.uin.consume(n);
                    if body.is_done() {
                        self.exchange_done();
                    } else if n == 0 {
                        return Ok(moved);
                    }
                    moved = true;
                }
            }
        }
    }

    /// Acts on one parsed response head of `n` bytes. Returns false to wait
    /// for room toward the client.
    fn response(&mut self, head: ResponseHead, n: usize) -> Result<bool, Stop> {
        let Some(Exchange::Upstream {
            method,
            upgrade,
            close,
            ..
        }) = self.due.front()
        else {
            return Err(Stop::BadUpstream(
                "the upstream sent a response to no request".into(),
            ));
        };
        let switching = head.status == 101;
        if switching && !upgrade {
            return Err(Stop::BadUpstream(
                "101 Switching Protocols without an upgrade request".into(),
            ));
        }
        let kind = match http1::response_body_kind(method, &head) {
            Ok(k) => k,
            Err(e) => return Err(Stop::BadUpstream(format!("bad response framing: {e}"))),
        };
        let closing = *close || http1::wants_close(head.version, &head.headers);
        let mut out = Vec::with_capacity(n + 64);
        match &self.mode {
            Mode::Tunnel => out.extend_from_slice(&self.uin.data()[..n]),
            Mode::Forward { .. } => {
                let edit = HeadEdit {
                    strip_hop_by_hop: true,
                    upgrading: switching,
                    close: closing && !switching,
                    via: Some(VIA.into()),
                };
                http1::write_response_head(&head, &edit, &mut out);
            }
        }
        if self.cout.room() < out.len() {
            return Ok(false);
        }
        self.cout.extend(&out);
        self.uin.consume(n);
        // The upstream answered: the response clock stops (an interim 100
        // Continue restarts it, see `update_wait`).
        self.waiting_since = None;
        if switching {
            return Err(Stop::Upgrade);
        }
        if (100..200).contains(&head.status) {
            // Interim (100 Continue): the final response follows once the
            // request is wholly sent; until then the clock waits on the client.
            let body_pending =
                self.due.len() == 1 && matches!(self.req, Req::Body { forward: true, .. });
            if let Some(Exchange::Upstream { sent, .. }) = self.due.front_mut() {
                *sent = !body_pending;
            }
            return Ok(true);
        }
        self.close_after |= closing;
        match kind {
            BodyKind::Empty => self.exchange_done(),
            kind => self.resp = Resp::Body(Body::new(kind)),
        }
        Ok(true)
    }

    /// The response at the front of `due` is complete.
    pub(super) fn exchange_done(&mut self) {
        self.resp = Resp::Head;
        if let Some(Exchange::Upstream { upgrade: true, .. }) = self.due.pop_front() {
            // The upgrade was declined: the client's bytes are HTTP again.
            if matches!(self.req, Req::AwaitUpgrade) {
                self.req = Req::Head;
            }
        }
    }
}
