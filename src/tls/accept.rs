//! The first bytes of a tunnel: is it TLS at all ([`sniff`]), and the
//! ClientHello read before a certificate is chosen (`TlsAccept`), so the
//! SNI can be checked against the CONNECT/SOCKS5 target first.

use std::fmt;
use std::io;
use std::sync::Arc;

use rustls::server::{Accepted, Acceptor};
use rustls::{AlertDescription, ServerConfig};

use super::failure::{FailureKind, TlsFailure};
use super::layer::{LayerLimits, TlsLayer};
use super::wire::{Fill, Rx, Wire};
use super::ALPN_HTTP11;
use crate::target::{Host, Target};

/// What the first bytes of a stream look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// Not enough bytes to tell.
    NeedMore,
    /// A TLS handshake record (`0x16 0x03 0x00..=0x04`): a ClientHello.
    Tls,
    /// An HTTP/1.x request line starts (upper-case method letters).
    Http,
    /// Neither.
    Other,
}

impl Sniff {
    /// The refusal reason when `self` arrives on a rule expecting the other
    /// kind (`terminate`: TLS expected), or `None` if it fits.
    pub fn mismatch(self, tls_expected: bool) -> Option<&'static str> {
        match (self, tls_expected) {
            (Sniff::Http, true) => {
                Some("plaintext HTTP on a TLS-terminating rule (use https:// through the tunnel)")
            }
            (Sniff::Other, true) => Some("not a TLS ClientHello on a TLS-terminating rule"),
            (Sniff::Tls, false) => Some(
                "TLS on a plaintext HTTP inspection rule (to inspect HTTPS: tls = \"terminate\", or --terminate instead of --inspect)",
            ),
            _ => None,
        }
    }
}

/// Classifies the first bytes of a stream (any prefix, even one byte).
pub fn sniff(first: &[u8]) -> Sniff {
    match first {
        [] => Sniff::NeedMore,
        [0x16] | [0x16, 0x03] => Sniff::NeedMore,
        [0x16, 0x03, v, ..] if *v <= 0x04 => Sniff::Tls,
        [0x16, ..] => Sniff::Other,
        _ => {
            // A method token then a space: `GET `, `OPTIONS `, `M-SEARCH `.
            let token = first
                .iter()
                .take_while(|b| b.is_ascii_uppercase() || **b == b'-' || **b == b'_')
                .count();
            match first.get(token) {
                _ if token == 0 || token > 20 => Sniff::Other,
                None => Sniff::NeedMore,
                Some(b' ') => Sniff::Http,
                Some(_) => Sniff::Other,
            }
        }
    }
}

/// What the ClientHello asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHelloInfo {
    /// The SNI, as sent (rustls has checked it is a DNS name).
    pub server_name: Option<String>,
    /// The ALPN protocols offered, in order; `None` if no ALPN extension.
    pub alpn: Option<Vec<Vec<u8>>>,
}

/// Why a ClientHello is refused before a certificate is minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloRefusal {
    /// The SNI names another host than the tunnel's target: domain fronting.
    Fronting {
        /// The SNI sent.
        sni: String,
        /// The CONNECT/SOCKS5 target.
        target: Host,
    },
    /// The client offers ALPN without `http/1.1` (an HTTP/2-only client).
    NoHttp11 {
        /// What it offered.
        offered: Vec<String>,
    },
}

impl HelloRefusal {
    /// The alert to send the client.
    pub fn alert(&self) -> AlertDescription {
        match self {
            HelloRefusal::Fronting { .. } => AlertDescription::AccessDenied,
            HelloRefusal::NoHttp11 { .. } => AlertDescription::NoApplicationProtocol,
        }
    }
}

impl fmt::Display for HelloRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HelloRefusal::Fronting { sni, target } => write!(
                f,
                "TLS SNI {sni:?} does not match the tunnel's target {} (domain fronting)",
                super::host_text(target)
            ),
            HelloRefusal::NoHttp11 { offered } => write!(
                f,
                "client offers ALPN {} but not http/1.1",
                offered.join(", ")
            ),
        }
    }
}

impl ClientHelloInfo {
    /// Checks the hello against the tunnel's `target` and returns the name
    /// to mint the leaf for: the target itself (an SNI must name it, compared
    /// canonically: case, trailing dot, IDNA; no SNI means the target).
    pub fn leaf_name(&self, target: &Host) -> Result<Host, HelloRefusal> {
        if let Some(alpn) = &self.alpn {
            if !alpn.is_empty() && !alpn.iter().any(|p| p == ALPN_HTTP11) {
                return Err(HelloRefusal::NoHttp11 {
                    offered: alpn
                        .iter()
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .collect(),
                });
            }
        }
        if let Some(sni) = &self.server_name {
            // Any port: only the host is canonicalised and compared.
            let same = Target::new(sni, 443).is_ok_and(|t| &t.host == target);
            if !same {
                return Err(HelloRefusal::Fronting {
                    sni: sni.clone(),
                    target: target.clone(),
                });
            }
        }
        Ok(target.clone())
    }
}

/// A fatal alert record as sent before any keys exist (plaintext), for
/// refusing a client after its ClientHello.
pub fn alert_record(desc: AlertDescription) -> [u8; 7] {
    // ContentType alert (21), legacy version TLS 1.2, length 2, fatal (2), desc.
    [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, u8::from(desc)]
}

/// The alert rustls queued, or a decode_error of our own when it queued
/// none: the client always hears why.
fn alert_bytes(mut alert: rustls::server::AcceptedAlert) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = alert.write_all(&mut bytes);
    if bytes.is_empty() {
        bytes = alert_record(AlertDescription::DecodeError).to_vec();
    }
    bytes
}

/// What polling for the ClientHello did.
#[derive(Debug)]
pub(crate) enum HelloPoll {
    /// The ClientHello is in: what it asked for (also [`TlsAccept::hello`]).
    Ready(ClientHelloInfo),
    /// More bytes are needed and the wire has none now.
    WouldBlock,
    /// The wire failed or closed before a ClientHello.
    Gone(io::Error),
    /// Not a valid ClientHello: `alert` holds the bytes owed to the client.
    Failed {
        /// Why.
        failure: TlsFailure,
        /// A TLS alert to send before closing (may be empty).
        alert: Vec<u8>,
    },
}

/// Reads a ClientHello with rustls' `Acceptor`, then completes the
/// handshake with a config carrying the chosen leaf.
pub(crate) struct TlsAccept {
    acceptor: Acceptor,
    accepted: Option<(Accepted, ClientHelloInfo)>,
    rx: Rx,
    limits: LayerLimits,
}

impl TlsAccept {
    /// Starts with `prefix`: bytes already read from the client (pipelined
    /// behind the CONNECT or SOCKS5 request), possibly empty.
    pub(crate) fn new(prefix: &[u8], limits: LayerLimits) -> TlsAccept {
        TlsAccept {
            acceptor: Acceptor::default(),
            accepted: None,
            rx: Rx::with_prefix(limits.rx_chunk, prefix),
            limits,
        }
    }

    /// Reads until the ClientHello is complete. Call on readable edges
    /// until `Ready`, then decide and [`complete`](Self::complete).
    pub(crate) fn poll(&mut self, wire: &mut (impl Wire + ?Sized)) -> HelloPoll {
        if let Some((_, info)) = &self.accepted {
            return HelloPoll::Ready(info.clone());
        }
        loop {
            match self.rx.fill(wire) {
                Fill::Ready => {}
                Fill::WouldBlock => return HelloPoll::WouldBlock,
                Fill::Eof => {
                    return HelloPoll::Gone(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed before a complete TLS ClientHello",
                    ))
                }
                Fill::Gone(e) => return HelloPoll::Gone(e),
            }
            let acceptor = &mut self.acceptor;
            if let Err(e) = self.rx.feed(|r| acceptor.read_tls(r)) {
                return HelloPoll::Failed {
                    failure: TlsFailure::new(
                        FailureKind::Protocol,
                        format!("bad ClientHello: {e}"),
                    ),
                    alert: alert_record(AlertDescription::DecodeError).to_vec(),
                };
            }
            match self.acceptor.accept() {
                Ok(None) => continue,
                Ok(Some(accepted)) => {
                    let ch = accepted.client_hello();
                    let info = ClientHelloInfo {
                        server_name: ch.server_name().map(str::to_owned),
                        alpn: ch.alpn().map(|a| a.map(<[u8]>::to_vec).collect()),
                    };
                    self.accepted = Some((accepted, info.clone()));
                    return HelloPoll::Ready(info);
                }
                Err((e, alert)) => {
                    return HelloPoll::Failed {
                        failure: TlsFailure::from_rustls(&e),
                        alert: alert_bytes(alert),
                    };
                }
            }
        }
    }

    /// The ClientHello, once `poll` said `Ready`.
    pub(crate) fn hello(&self) -> Option<&ClientHelloInfo> {
        self.accepted.as_ref().map(|(_, info)| info)
    }

    /// Completes with `config` (from `ServerConfigs::for_leaf`). The layer
    /// then owes the wire its ServerHello flight: `flush` it. On failure,
    /// the bytes owed to the client (an alert) come back with the reason.
    pub(crate) fn complete(
        self,
        config: Arc<ServerConfig>,
    ) -> Result<TlsLayer, (TlsFailure, Vec<u8>)> {
        let Some((accepted, _)) = self.accepted else {
            return Err((
                TlsFailure::new(FailureKind::Protocol, "no ClientHello yet"),
                Vec::new(),
            ));
        };
        match accepted.into_connection(config) {
            Ok(conn) => Ok(TlsLayer::server(conn, self.rx, self.limits)),
            Err((e, alert)) => Err((TlsFailure::from_rustls(&e), alert_bytes(alert))),
        }
    }
}
