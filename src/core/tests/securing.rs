//! The start of a terminated tunnel in the simulator: the success reply
//! before anything is read, the ClientHello however it is split, its SNI
//! against the target, and every way a client can fail to start TLS.

use std::io::Write;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use crate::core::link::Link;
use crate::core::mem::MemPort;
use crate::core::securing::{Next, SecuringCore};
use crate::lifecycle::CloseReason;
use crate::target::Target;
use crate::tls::tests::Fixture;
use crate::tls::ServerConfigs;

const REPLY: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

fn target() -> Target {
    Target::new("origin.test", 443).unwrap()
}

/// A rustls client's first flight: its ClientHello for `sni`.
fn hello_with(config: Arc<ClientConfig>, sni: &str) -> (ClientConnection, Vec<u8>) {
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let mut conn = ClientConnection::new(config, name).unwrap();
    let mut wire = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut wire).unwrap();
    }
    (conn, wire)
}

fn hello(f: &Fixture, sni: &str) -> (ClientConnection, Vec<u8>) {
    hello_with(f.clients().config(), sni)
}

/// Pumps until the core asks for more than readiness, with at most `n`
/// calls (a sub-stage change returns `Wait` once).
fn pump(core: &mut SecuringCore, port: &mut MemPort) -> Next {
    let mut last = Next::Wait;
    for _ in 0..8 {
        let stage = core.stage();
        last = core.pump(port);
        if !matches!(last, Next::Wait) || core.stage() == stage {
            return last;
        }
    }
    last
}

#[test]
fn the_reply_goes_out_first_and_nothing_is_read_before_it() {
    let f = Fixture::new();
    let (_, first) = hello(&f, "origin.test");
    let mut core = SecuringCore::new(REPLY.to_vec(), Vec::new(), target(), super::deadline(10));
    let mut port = MemPort::default();
    port.room = 10;
    port.deliver(&first);
    assert!(matches!(pump(&mut core, &mut port), Next::Wait));
    assert_eq!(core.stage(), "reply");
    assert_eq!(port.read_total, 0, "no read while the reply is owed");
    let mut got = port.take();
    while core.stage() == "reply" {
        port.room = 10;
        let _ = pump(&mut core, &mut port);
        got.extend(port.take());
    }
    assert_eq!(got, REPLY);
    assert!(matches!(pump(&mut core, &mut port), Next::Hello { .. }));
}

#[test]
fn a_client_hello_split_anywhere_names_the_target() {
    let f = Fixture::new();
    let (_, first) = hello(&f, "origin.test");
    // Part of it may have come behind the CONNECT, the rest byte by byte.
    for early in [0, 1, 4, 5, 6, first.len() / 2, first.len()] {
        let mut core = SecuringCore::new(
            Vec::new(),
            first[..early].to_vec(),
            target(),
            super::deadline(10),
        );
        let mut port = MemPort::roomy();
        let mut next = pump(&mut core, &mut port);
        for b in &first[early..] {
            assert!(matches!(next, Next::Wait), "early {early}: {next:?}");
            port.deliver(&[*b]);
            next = pump(&mut core, &mut port);
        }
        match next {
            Next::Hello { name } => assert_eq!(name, target().host),
            other => panic!("early {early}: {other:?}"),
        }
        assert_eq!(core.stage(), "client-hello");
    }
}

#[test]
fn a_hello_for_another_name_is_refused_as_fronting() {
    let f = Fixture::new();
    let (_, first) = hello(&f, "elsewhere.test");
    let mut core = SecuringCore::new(Vec::new(), first, target(), super::deadline(10));
    match pump(&mut core, &mut MemPort::roomy()) {
        Next::Refused {
            answer,
            reason,
            why,
            notable,
        } => {
            assert_eq!(reason, CloseReason::Denied);
            assert!(why.contains("domain fronting"), "{why}");
            assert!(why.contains("elsewhere.test"), "{why}");
            assert_eq!(answer[0], 0x15, "an alert record");
            assert_eq!(answer.len(), 7);
            assert!(notable);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_sni_is_compared_canonically() {
    let f = Fixture::new();
    let (_, first) = hello(&f, "ORIGIN.Test");
    let mut core = SecuringCore::new(Vec::new(), first, target(), super::deadline(10));
    assert!(matches!(
        pump(&mut core, &mut MemPort::roomy()),
        Next::Hello { .. }
    ));
}

#[test]
fn a_hello_without_http11_in_its_alpn_is_refused() {
    let f = Fixture::new();
    let mut config = (*f.clients().config()).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let (_, first) = hello_with(Arc::new(config), "origin.test");
    let mut core = SecuringCore::new(Vec::new(), first, target(), super::deadline(10));
    match pump(&mut core, &mut MemPort::roomy()) {
        Next::Refused { reason, why, .. } => {
            assert_eq!(reason, CloseReason::Denied);
            assert!(why.contains("not http/1.1"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn plaintext_http_hears_a_400_that_says_tls_is_required() {
    let mut core = SecuringCore::new(
        Vec::new(),
        b"GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n".to_vec(),
        target(),
        super::deadline(10),
    );
    match pump(&mut core, &mut MemPort::roomy()) {
        Next::Refused {
            answer,
            reason,
            notable,
            ..
        } => {
            assert_eq!(reason, CloseReason::BadRequest);
            let text = String::from_utf8(answer).unwrap();
            assert!(text.starts_with("HTTP/1.1 400"), "{text}");
            assert!(text.contains("tls-required"), "{text}");
            assert!(notable);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn anything_else_hears_only_the_close() {
    for first in [&b"SSH-2.0-OpenSSH_9.6\r\n"[..], &[0u8; 16][..]] {
        let mut core = SecuringCore::new(Vec::new(), Vec::new(), target(), super::deadline(10));
        let mut port = MemPort::roomy();
        port.deliver(first);
        match pump(&mut core, &mut port) {
            Next::Refused { answer, reason, .. } => {
                assert_eq!(reason, CloseReason::BadRequest);
                assert!(answer.is_empty(), "{answer:?}");
            }
            other => panic!("{first:?}: {other:?}"),
        }
    }
}

#[test]
fn a_broken_hello_gets_an_alert() {
    // A handshake record whose body is no ClientHello.
    let mut first = vec![0x16, 0x03, 0x01, 0x00, 0x08];
    first.extend([0x01, 0x00, 0x00, 0x04, 0xff, 0xff, 0xff, 0xff]);
    let mut core = SecuringCore::new(Vec::new(), first, target(), super::deadline(10));
    match pump(&mut core, &mut MemPort::roomy()) {
        Next::Refused {
            answer,
            reason,
            why,
            notable,
        } => {
            assert_eq!(reason, CloseReason::TlsFailed);
            assert!(why.starts_with("TLS from the client"), "{why}");
            assert_eq!(answer[0], 0x15, "an alert record: {answer:?}");
            assert!(!notable, "a broken client, not a policy refusal");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_client_that_leaves_before_its_hello_is_whole_is_gone() {
    let f = Fixture::new();
    let (_, first) = hello(&f, "origin.test");
    for (cut, reset) in [(0, false), (3, false), (first.len() - 1, false), (7, true)] {
        let mut core = SecuringCore::new(Vec::new(), Vec::new(), target(), super::deadline(10));
        let mut port = MemPort::roomy();
        port.deliver(&first[..cut]);
        let _ = pump(&mut core, &mut port);
        if reset {
            port.reset = true;
        } else {
            port.fin = true;
        }
        assert!(
            matches!(pump(&mut core, &mut port), Next::ClientGone),
            "cut at {cut}, reset {reset}"
        );
    }
}

#[test]
fn a_client_gone_while_the_reply_is_owed_is_gone() {
    let mut core = SecuringCore::new(REPLY.to_vec(), Vec::new(), target(), super::deadline(10));
    let mut port = MemPort::default();
    port.reset = true;
    assert!(matches!(pump(&mut core, &mut port), Next::ClientGone));
}

#[test]
fn the_completed_layer_finishes_the_handshake_with_the_client() {
    let f = Fixture::new();
    let (mut client, first) = hello(&f, "origin.test");
    let mut core = SecuringCore::new(Vec::new(), first, target(), super::deadline(10));
    let mut port = MemPort::roomy();
    let Next::Hello { name } = pump(&mut core, &mut port) else {
        panic!("no hello");
    };
    let leaf = f.minter.mint(&name).unwrap().key;
    let layer = core.complete(ServerConfigs::new().for_leaf(leaf)).unwrap();
    let mut link = Link::tls(layer);
    for _ in 0..20 {
        link.want_read(&mut port, true);
        let _ = link.progress(&mut port);
        let out = port.take();
        if !out.is_empty() {
            client.read_tls(&mut &out[..]).unwrap();
            client.process_new_packets().unwrap();
        }
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
        port.deliver(&wire);
    }
    assert!(
        !client.is_handshaking(),
        "the client trusts the minted leaf"
    );
    client.writer().write_all(b"ping").unwrap();
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).unwrap();
    }
    port.deliver(&wire);
    let mut buf = [0u8; 16];
    match link.read(&mut port, &mut buf) {
        crate::io::Io::Progress(n) => assert_eq!(&buf[..n], b"ping"),
        other => panic!("{other:?}"),
    }
}

/// A client that starts its TLS too slowly: half a ClientHello, then
/// silence. Not a moment before the deadline; at it, a handshake timeout.
#[test]
fn a_client_hello_not_whole_by_the_deadline_is_a_handshake_timeout() {
    let f = Fixture::new();
    let (_, first) = hello(&f, "origin.test");
    let mut core = SecuringCore::new(REPLY.to_vec(), Vec::new(), target(), super::deadline(10));
    let mut port = MemPort::roomy();
    port.deliver(&first[..first.len() / 2]);
    assert!(matches!(pump(&mut core, &mut port), Next::Wait));
    assert_eq!(core.stage(), "client-hello");
    assert_eq!(core.poll_timeout(), super::at(10, 0));
    assert_eq!(core.handle_timeout(super::at(9, 999)), None, "not yet");
    assert_eq!(
        core.handle_timeout(super::at(10, 0)),
        Some(CloseReason::HandshakeTimeout)
    );
}
