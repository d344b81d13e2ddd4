//! The start of a TLS-terminated tunnel, as the core runs it: the proxy's
//! success reply out in plaintext, then the client's first bytes, which
//! must be a TLS ClientHello whose SNI names the tunnel's target (no domain
//! fronting). It is a stage of [`super::opening::OpeningCore`], which asks
//! the shell for the leaf of the name this gives it (a certificate cache is
//! the shell's: `Action::Certify`) and hands the config to
//! [`SecuringCore::complete`].

use std::sync::Arc;
use std::time::Instant;

use rustls::ServerConfig;

use super::clock::Deadline;
use super::port::{send_owed, Port, Sent};
use crate::io::Io;
use crate::lifecycle::CloseReason;
use crate::protocol::http;
use crate::target::{Host, Target};
use crate::tls::accept::{HelloPoll, TlsAccept};
use crate::tls::layer::{LayerLimits, TlsLayer};
use crate::tls::{alert_record, sniff, Sniff};

/// Bytes read while looking for the start of a ClientHello.
const SNIFF_CHUNK: usize = 512;

/// The client's side of a terminated tunnel, until its ClientHello is in.
pub(crate) struct SecuringCore {
    /// The proxy's success reply, still owed to the client in plaintext.
    reply: Vec<u8>,
    stage: Stage,
    target: Target,
    /// The client has until this to send its ClientHello.
    deadline: Deadline,
}

enum Stage {
    /// Reading the client's first bytes (what it sent behind its request
    /// included) to tell TLS from anything else.
    Sniff(Vec<u8>),
    /// Reading the ClientHello.
    Hello(Box<TlsAccept>),
}

/// What a call left the shell to do.
#[derive(Debug)]
pub(crate) enum Next {
    /// Wait for the client's readiness (or the handshake deadline).
    Wait,
    /// The client closed or failed before its ClientHello was whole.
    ClientGone,
    /// The client is refused: send `answer` (possibly empty), then close
    /// for `reason`; `why` goes in the access line. `notable`: worth an
    /// info line of its own (a policy refusal, not a broken client).
    Refused {
        answer: Vec<u8>,
        reason: CloseReason,
        why: String,
        notable: bool,
    },
    /// The ClientHello is in and names the target: mint the leaf for
    /// `name` and [`complete`](SecuringCore::complete).
    Hello { name: Host },
}

impl SecuringCore {
    /// `reply` is owed to the client first; `early` is what it sent behind
    /// its request, the start of its first flight. All of it by `deadline`.
    pub(crate) fn new(
        reply: Vec<u8>,
        early: Vec<u8>,
        target: Target,
        deadline: Deadline,
    ) -> SecuringCore {
        SecuringCore {
            reply,
            stage: Stage::Sniff(early),
            target,
            deadline,
        }
    }

    /// When the client runs out of time.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline.at()
    }

    /// The time is `now`: once the deadline has passed with no whole
    /// ClientHello, how the session closes.
    pub(crate) fn handle_timeout(&self, now: Instant) -> Option<CloseReason> {
        self.deadline
            .passed(now)
            .then_some(CloseReason::HandshakeTimeout)
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    pub(crate) fn stage(&self) -> &'static str {
        match (&self.stage, self.reply.is_empty()) {
            (_, false) => "reply",
            (Stage::Sniff(_), true) => "sniff",
            (Stage::Hello(_), true) => "client-hello",
        }
    }

    /// Moves what the client's readiness allows. After a sub-stage change
    /// (sniffed TLS, now reading its hello) it returns `Wait` so that the
    /// shell logs the change and calls again.
    pub(crate) fn pump(&mut self, client: &mut impl Port) -> Next {
        if client.failed() {
            return Next::ClientGone;
        }
        match send_owed(client, &mut self.reply) {
            Sent::All => {}
            Sent::Wait => return Next::Wait,
            Sent::Gone => return Next::ClientGone,
        }
        client.want_read(true);
        client.want_write(false);
        match &mut self.stage {
            Stage::Sniff(first) => loop {
                match sniff(first) {
                    Sniff::Tls => {
                        let accept = TlsAccept::new(first, LayerLimits::default());
                        self.stage = Stage::Hello(Box::new(accept));
                        return Next::Wait;
                    }
                    Sniff::NeedMore => {
                        if !client.can_read() {
                            return Next::Wait;
                        }
                        let len = first.len();
                        first.resize(len + SNIFF_CHUNK, 0);
                        let io = client.read(&mut first[len..]);
                        first.truncate(len + if let Io::Progress(n) = io { n } else { 0 });
                        match io {
                            Io::Progress(_) => {}
                            Io::WouldBlock => return Next::Wait,
                            Io::Eof | Io::PeerGone(_) => return Next::ClientGone,
                        }
                    }
                    other => return not_tls(other),
                }
            },
            Stage::Hello(accept) => match accept.poll(client) {
                HelloPoll::Ready(info) => match info.leaf_name(&self.target.host) {
                    Ok(name) => Next::Hello { name },
                    Err(refusal) => Next::Refused {
                        answer: alert_record(refusal.alert()).to_vec(),
                        reason: CloseReason::Denied,
                        why: refusal.to_string(),
                        notable: true,
                    },
                },
                HelloPoll::WouldBlock => Next::Wait,
                HelloPoll::Gone(_) => Next::ClientGone,
                HelloPoll::Failed { failure, alert } => Next::Refused {
                    answer: alert,
                    reason: CloseReason::TlsFailed,
                    why: format!("TLS from the client: {}", failure.reason()),
                    notable: false,
                },
            },
        }
    }

    /// Completes the client's handshake with the leaf's `config`: the
    /// layer owes the client its ServerHello flight. On failure, the alert
    /// owed to the client and why.
    pub(crate) fn complete(self, config: Arc<ServerConfig>) -> Result<TlsLayer, (Vec<u8>, String)> {
        let Stage::Hello(accept) = self.stage else {
            return Err((Vec::new(), "TLS from the client: no ClientHello yet".into()));
        };
        accept.complete(config).map_err(|(failure, alert)| {
            (alert, format!("TLS from the client: {}", failure.reason()))
        })
    }
}

/// The client spoke something other than TLS on a rule that terminates it.
/// A plaintext HTTP client can read an HTTP answer; anything else just
/// hears the close.
fn not_tls(seen: Sniff) -> Next {
    let why = seen
        .mismatch(true)
        .unwrap_or("the client did not start TLS")
        .to_string();
    let answer = match seen {
        Sniff::Http => http::error_response(400, "tls-required", &why, &[]),
        _ => Vec::new(),
    };
    Next::Refused {
        answer,
        reason: CloseReason::BadRequest,
        why,
        notable: true,
    }
}
