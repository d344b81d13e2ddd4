//! A client layer and a server layer against each other in memory.

use std::sync::Arc;

use super::pair::{pair, End};
use super::{domain, Fixture};
use crate::io::Io;
use crate::target::Host;
use crate::tls::accept::{HelloPoll, TlsAccept};
use crate::tls::failure::{FailureKind, TlsFailure};
use crate::tls::layer::{LayerLimits, PeerClose, TlsLayer};
use crate::tls::leaf::Leaf;
use crate::tls::{ClientConfigs, ServerConfigs, ALPN_HTTP11};

const SMALL: LayerLimits = LayerLimits {
    tls_out: 8 * 1024,
    rx_chunk: 2048,
};

/// Flushes both sides until neither is handshaking nor owes the wire.
fn handshake(c: &mut TlsLayer, cw: &mut End, s: &mut TlsLayer, sw: &mut End) {
    for _ in 0..1_000_000 {
        for (l, w) in [(&mut *c, &mut *cw), (&mut *s, &mut *sw)] {
            if let Io::PeerGone(e) = l.flush(w) {
                panic!("handshake failed: {e}");
            }
        }
        if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() && !s.wants_write() {
            return;
        }
    }
    panic!("handshake did not finish: {c:?} {s:?}");
}

/// A client and a server layer for `example.test` over a fresh pair of
/// `wire`-byte ends, handshaken: (client, its end, server, its end).
fn connected(f: &Fixture, wire: usize) -> (TlsLayer, End, TlsLayer, End) {
    connected_with(f, wire, f.clients().config())
}

/// [`connected`], the client with `config`.
fn connected_with(
    f: &Fixture,
    wire: usize,
    config: Arc<rustls::ClientConfig>,
) -> (TlsLayer, End, TlsLayer, End) {
    let (mut cw, mut sw) = pair(wire);
    let name = domain("example.test");
    let c = TlsLayer::client(config, &name, SMALL).unwrap();
    let (mut c, mut s) = f.accept_with(c, &name, SMALL, &mut cw, &mut sw);
    handshake(&mut c, &mut cw, &mut s, &mut sw);
    (c, cw, s, sw)
}

/// Moves `data` from `w` to `r`, reading into `chunk`-byte buffers, and
/// returns what `r` read.
fn transfer(
    w: &mut TlsLayer,
    ww: &mut End,
    r: &mut TlsLayer,
    rw: &mut End,
    data: &[u8],
    chunk: usize,
) -> Vec<u8> {
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; chunk];
    for _ in 0..10_000_000 {
        if sent < data.len() {
            match w.write(ww, &data[sent..]) {
                Io::Progress(n) => sent += n,
                Io::WouldBlock => {
                    w.flush(ww);
                }
                other => panic!("write: {other:?}"),
            }
        } else if w.wants_write() {
            w.flush(ww);
        }
        match r.read(rw, &mut buf) {
            Io::Progress(n) => got.extend_from_slice(&buf[..n]),
            Io::WouldBlock => {}
            other => panic!("read: {other:?}"),
        }
        if got.len() == data.len() && sent == data.len() {
            return got;
        }
    }
    panic!("transfer stuck: sent {sent}, got {}", got.len());
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn handshake_then_data_both_ways() {
    let f = Fixture::new();
    let (mut c, mut cw, mut s, mut sw) = connected(&f, 4096);
    assert_eq!(c.alpn(), Some(ALPN_HTTP11));
    assert_eq!(s.alpn(), Some(ALPN_HTTP11));
    assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));

    let up = pattern(200_000);
    assert_eq!(transfer(&mut c, &mut cw, &mut s, &mut sw, &up, 1000), up);
    let down = pattern(300_001);
    assert_eq!(
        transfer(&mut s, &mut sw, &mut c, &mut cw, &down, 70_000),
        down
    );
}

#[test]
fn tls12_works_too() {
    let f = Fixture::new();
    let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(f.roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    let (mut c, mut cw, mut s, mut sw) = connected_with(&f, 4096, Arc::new(config));
    assert_eq!(s.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    let data = pattern(50_000);
    assert_eq!(transfer(&mut c, &mut cw, &mut s, &mut sw, &data, 512), data);
    assert_eq!(transfer(&mut s, &mut sw, &mut c, &mut cw, &data, 512), data);
}

/// A client that lists AES-256 first (as OpenSSL and most clients do)
/// still gets AES-128-GCM: the cheaper suite on a hop that encrypts every
/// byte; both our legs offer it first.
#[test]
fn aes_128_gcm_is_chosen_whatever_the_client_prefers() {
    use rustls::CipherSuite as S;
    let first = crate::tls::provider().cipher_suites[0].suite();
    assert_eq!(first, S::TLS13_AES_128_GCM_SHA256);
    assert_eq!(
        crate::tls::provider().cipher_suites.len(),
        rustls::crypto::ring::default_provider().cipher_suites.len(),
        "every suite stays available"
    );
    let f = Fixture::new();
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != S::TLS13_AES_256_GCM_SHA384);
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(f.roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    let (c, _cw, s, _sw) = connected_with(&f, 4096, Arc::new(config));
    assert_eq!(s.cipher_suite(), Some(S::TLS13_AES_128_GCM_SHA256));
    assert_eq!(c.cipher_suite(), Some(S::TLS13_AES_128_GCM_SHA256));
}

/// Every flight fed one byte per wire call, in both directions: the
/// handshake and the data split at every byte boundary.
#[test]
fn one_byte_at_a_time() {
    let f = Fixture::new();
    let (mut cw, mut sw) = pair(4096);
    cw.max_io = 1;
    sw.max_io = 1;
    let name = domain("example.test");
    let (mut c, mut s) = f.pair_for(&name, &name, SMALL, &mut cw, &mut sw);
    handshake(&mut c, &mut cw, &mut s, &mut sw);
    let data = pattern(20_000);
    assert_eq!(transfer(&mut c, &mut cw, &mut s, &mut sw, &data, 3), data);
    assert_eq!(transfer(&mut s, &mut sw, &mut c, &mut cw, &data, 1), data);
}

/// The client writes its request before the handshake is done (as the
/// session will): it is held, bounded, and sent once keys exist; and a
/// request arriving with the client's Finished is readable without an edge.
#[test]
fn plaintext_written_during_the_handshake() {
    let f = Fixture::new();
    let (mut cw, mut sw) = pair(64 * 1024);
    let name = domain("example.test");
    let (mut c, mut s) = f.pair_for(&name, &name, SMALL, &mut cw, &mut sw);
    let req = b"GET / HTTP/1.1\r\nHost: example.test\r\n\r\n";
    assert!(matches!(c.write(&mut cw, req), Io::Progress(n) if n == req.len()));
    // The allowance before the handshake is bounded.
    let big = pattern(100_000);
    let mut early = 0;
    while let Io::Progress(n) = c.write(&mut cw, &big[early..]) {
        early += n;
    }
    assert!(
        early <= SMALL.tls_out,
        "accepted {early} bytes before the handshake"
    );

    s.flush(&mut sw); // ServerHello .. Finished
    let mut buf = [0u8; 64];
    // Client: reads the server flight, sends Finished + the request.
    assert!(matches!(c.read(&mut cw, &mut buf), Io::WouldBlock));
    assert!(!c.is_handshaking());
    // Server: one flush reads Finished and decrypts the request behind it.
    s.flush(&mut sw);
    assert!(!s.is_handshaking());
    assert!(s.has_plaintext(), "request decrypted behind the Finished");
    match s.read(&mut sw, &mut buf) {
        Io::Progress(n) => assert_eq!(&buf[..n], &req[..n]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn close_notify_each_way() {
    let f = Fixture::new();
    let (mut c, mut cw, mut s, mut sw) = connected(&f, 4096);
    let data = pattern(10_000);
    assert_eq!(
        transfer(&mut c, &mut cw, &mut s, &mut sw, &data, 4096),
        data
    );

    // Client closes its direction.
    c.shutdown(&mut cw);
    assert!(!c.wants_write());
    assert!(matches!(c.write(&mut cw, b"x"), Io::PeerGone(_)));
    let mut buf = [0u8; 100];
    assert!(matches!(s.read(&mut sw, &mut buf), Io::Eof));
    assert_eq!(s.peer_close(), Some(PeerClose::CloseNotify));
    assert!(matches!(s.read(&mut sw, &mut buf), Io::Eof), "Eof again");

    // The server may still answer (half-close), then closes too.
    assert_eq!(transfer(&mut s, &mut sw, &mut c, &mut cw, &data, 999), data);
    s.shutdown(&mut sw);
    assert!(matches!(c.read(&mut cw, &mut buf), Io::Eof));
    assert_eq!(c.peer_close(), Some(PeerClose::CloseNotify));
}

#[test]
fn tcp_eof_after_the_handshake_is_eof_during_it_is_a_failure() {
    let f = Fixture::new();
    let (mut c, mut cw, mut s, mut sw) = connected(&f, 4096);
    let name = domain("example.test");
    let data = pattern(5000);
    assert_eq!(
        transfer(&mut s, &mut sw, &mut c, &mut cw, &data, 4096),
        data
    );
    sw.close();
    let mut buf = [0u8; 100];
    assert!(matches!(c.read(&mut cw, &mut buf), Io::Eof));
    assert_eq!(c.peer_close(), Some(PeerClose::Truncated));

    // The server closes on the ClientHello, before its flight.
    let (mut cw, mut sw) = pair(4096);
    let mut c = TlsLayer::client(f.clients().config(), &name, SMALL).unwrap();
    c.flush(&mut cw);
    sw.close();
    assert!(c.is_handshaking());
    match c.read(&mut cw, &mut buf) {
        Io::PeerGone(e) => {
            let t = TlsFailure::of(&e).expect("a TLS failure");
            assert_eq!(t.kind(), FailureKind::HandshakeEof);
        }
        other => panic!("{other:?}"),
    }
    // And it stays failed.
    assert!(matches!(c.read(&mut cw, &mut buf), Io::PeerGone(_)));
    assert!(matches!(c.write(&mut cw, b"x"), Io::PeerGone(_)));
}

/// A reader that stops reading: the writer gets WouldBlock once the wire
/// and its bounded TLS buffer are full, and nothing grows however long it
/// keeps trying. Then the reader drains everything, in order.
#[test]
fn stalled_reader_bounds_the_writer() {
    let f = Fixture::new();
    const WIRE: usize = 4096;
    let (mut c, mut cw, mut s, mut sw) = connected(&f, WIRE);

    let data = pattern(1 << 20);
    let mut accepted = 0;
    let mut blocked = 0;
    for _ in 0..10_000 {
        match s.write(&mut sw, &data[accepted..]) {
            Io::Progress(n) => accepted += n,
            Io::WouldBlock => blocked += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(blocked > 9000, "the writer must block");
    // In flight: the wire, plus rustls' outgoing TLS bound, plus one record.
    let bound = WIRE + SMALL.tls_out + 16 * 1024 + 512;
    assert!(
        accepted <= bound,
        "accepted {accepted} > {bound} with a stalled reader"
    );
    assert!(s.wants_write());
    assert_eq!(cw.inbound_len(), WIRE, "the wire is full");

    // The reader reads a little at a time; its own buffers stay bounded.
    let mut got = Vec::new();
    let mut buf = [0u8; 100];
    let mut sent = accepted;
    for _ in 0..10_000_000 {
        match c.read(&mut cw, &mut buf) {
            Io::Progress(n) => got.extend_from_slice(&buf[..n]),
            Io::WouldBlock => {
                s.flush(&mut sw);
                if sent < data.len() {
                    if let Io::Progress(n) = s.write(&mut sw, &data[sent..]) {
                        sent += n;
                    }
                }
            }
            other => panic!("{other:?}"),
        }
        let (staged, cap) = c.staged();
        assert!(staged <= SMALL.rx_chunk && cap <= SMALL.rx_chunk);
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
}

/// The reader's side: while decrypted plaintext waits, the wire is not
/// read, so a fast sender cannot make the reader's memory grow.
#[test]
fn reader_does_not_read_the_wire_while_plaintext_waits() {
    let f = Fixture::new();
    let (mut c, mut cw, mut s, mut sw) = connected(&f, 1 << 20);
    // Fill the wire toward the client with far more than one chunk.
    let data = pattern(500_000);
    let mut sent = 0;
    while sent < data.len() {
        match s.write(&mut sw, &data[sent..]) {
            Io::Progress(n) => sent += n,
            _ => break,
        }
    }
    let queued = cw.inbound_len();
    assert!(queued > 100_000);
    let mut buf = [0u8; 10];
    assert!(matches!(c.read(&mut cw, &mut buf), Io::Progress(10)));
    // Plaintext comes a whole record at a time: at most one record (16 KiB
    // plus overhead) and one staging chunk leave the wire.
    let bound = 16 * 1024 + 256 + SMALL.rx_chunk;
    let taken = queued - cw.inbound_len();
    assert!(
        taken <= bound,
        "took {taken} bytes off the wire for a 10-byte read"
    );
    for _ in 0..100 {
        assert!(matches!(c.read(&mut cw, &mut buf), Io::Progress(_)));
        assert!(c.has_plaintext());
    }
    assert_eq!(
        queued - cw.inbound_len(),
        taken,
        "no more wire reads while plaintext waits"
    );
}

/// Bytes read off the wire and not yet decrypted are pending even with no
/// plaintext waiting: after a short read the socket gives no new edge for
/// them, so the session must come back on its own (a terminated download
/// stalled at 13 MB/s on this once the staging chunk grew to 64 KiB).
#[test]
fn staged_bytes_are_pending_without_plaintext() {
    let f = Fixture::new();
    let (mut cw, mut sw) = pair(1 << 20);
    let name = domain("example.test");
    let big = LayerLimits {
        tls_out: 256 * 1024,
        rx_chunk: 64 * 1024,
    };
    let (mut c, mut s) = f.pair_for(&name, &name, big, &mut cw, &mut sw);
    handshake(&mut c, &mut cw, &mut s, &mut sw);
    let data = pattern(200_000);
    let mut sent = 0;
    while sent < data.len() {
        match s.write(&mut sw, &data[sent..]) {
            Io::Progress(n) => sent += n,
            other => panic!("write: {other:?}"),
        }
    }
    // One read of a whole record, then whatever plaintext is left of it.
    let mut buf = vec![0u8; 16 * 1024];
    let mut got = Vec::new();
    loop {
        match c.read(&mut cw, &mut buf) {
            Io::Progress(n) => got.extend_from_slice(&buf[..n]),
            other => panic!("read: {other:?}"),
        }
        if !c.has_plaintext() {
            break;
        }
    }
    let (staged, _) = c.staged();
    assert!(staged > 0, "one wire read stages several records");
    assert!(c.has_pending(), "staged bytes are pending");
    // The wire holds nothing more: only the staging can deliver the rest of it.
    cw.take_inbound();
    let mut reads = 0;
    while c.has_pending() {
        match c.read(&mut cw, &mut buf) {
            Io::Progress(n) => got.extend_from_slice(&buf[..n]),
            Io::WouldBlock => break,
            other => panic!("read: {other:?}"),
        }
        reads += 1;
        assert!(reads < 1000, "pending never ends");
    }
    assert!(!c.has_pending());
    assert_eq!(got, data[..got.len()], "staged bytes come out in order");
    // The first record, then at least one more from the staging alone.
    assert!(
        got.len() >= 2 * 16 * 1024,
        "the staging was delivered: {} bytes ({staged} staged)",
        got.len()
    );
}

/// The peer resets while plaintext it sent is already decrypted: that
/// plaintext is still read, then `PeerGone`.
#[test]
fn plaintext_sent_before_a_reset_is_still_read() {
    let f = Fixture::new();
    let (mut c, mut cw, mut s, mut sw) = connected(&f, 1 << 20);
    let data = pattern(1000);
    assert!(matches!(s.write(&mut sw, &data), Io::Progress(1000)));
    let mut buf = [0u8; 10];
    assert!(matches!(c.read(&mut cw, &mut buf), Io::Progress(10)));
    cw.reset_outbound();
    // The write side fails (now or on the next call)...
    let mut failed = false;
    for _ in 0..3 {
        if let Io::PeerGone(_) = c.write(&mut cw, b"x") {
            failed = true;
            break;
        }
    }
    assert!(failed);
    // ...and the rest of what the peer sent is still delivered.
    let mut got = buf.to_vec();
    loop {
        match c.read(&mut cw, &mut buf) {
            Io::Progress(n) => got.extend_from_slice(&buf[..n]),
            Io::PeerGone(_) => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, data);
}

#[test]
fn wire_failure_is_peer_gone() {
    let f = Fixture::new();
    let (mut c, mut cw, _s, _sw) = connected(&f, 4096);
    cw.reset_outbound();
    match c.write(&mut cw, b"hello") {
        // Accepted, then the wire failed: reported by the next call.
        Io::Progress(5) => assert!(matches!(c.write(&mut cw, b"x"), Io::PeerGone(_))),
        Io::PeerGone(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        other => panic!("{other:?}"),
    }
    assert!(TlsFailure::of(&match c.flush(&mut cw) {
        Io::PeerGone(e) => e,
        other => panic!("{other:?}"),
    })
    .is_none());
}

/// A client layer to `host` and a server layer serving `leaf`, before the
/// ClientHello leaves.
fn serving(
    host: &Host,
    leaf: Leaf,
    clients: &ClientConfigs,
    cw: &mut End,
    sw: &mut End,
) -> (TlsLayer, TlsLayer) {
    let mut c = TlsLayer::client(clients.config(), host, SMALL).unwrap();
    let mut accept = TlsAccept::new(&[], SMALL);
    c.flush(cw);
    assert!(matches!(accept.poll(sw), HelloPoll::Ready(_)));
    let s = accept
        .complete(ServerConfigs::new().for_leaf(leaf.key))
        .map_err(|(f, _)| f)
        .unwrap();
    (c, s)
}

/// Drives a handshake expected to fail on the client; returns the client's
/// failure and what the server saw.
fn failed_handshake(
    host: &Host,
    leaf: Leaf,
    clients: &ClientConfigs,
) -> (TlsFailure, Option<TlsFailure>) {
    let (mut cw, mut sw) = pair(8192);
    let (mut c, mut s) = serving(host, leaf, clients, &mut cw, &mut sw);
    let mut client_failure = None;
    let mut server_failure = None;
    let mut buf = [0u8; 100];
    for _ in 0..1000 {
        if let Io::PeerGone(e) = s.read(&mut sw, &mut buf) {
            server_failure = TlsFailure::of(&e).cloned();
        }
        if let Io::PeerGone(e) = c.read(&mut cw, &mut buf) {
            client_failure = TlsFailure::of(&e).cloned();
        }
        if client_failure.is_some() && server_failure.is_some() {
            break;
        }
    }
    (
        client_failure.expect("the client must fail"),
        server_failure,
    )
}

#[test]
fn verify_failures_have_short_reasons() {
    let f = Fixture::new();
    let name = domain("example.test");

    // Another name: "name mismatch: cert is for other.test".
    let leaf = f.minter.mint(&domain("other.test")).unwrap();
    let (cf, sf) = failed_handshake(&name, leaf, &f.clients());
    assert_eq!(cf.kind(), FailureKind::Certificate);
    assert_eq!(cf.reason(), "name mismatch: cert is for other.test");
    let sf = sf.expect("the server hears the alert");
    assert_eq!(sf.kind(), FailureKind::PeerAlert);

    // A CA the client does not trust: "unknown issuer"; the server side
    // explains the client's alert.
    let other = Fixture::new();
    let leaf = other.minter.mint(&name).unwrap();
    let (cf, sf) = failed_handshake(&name, leaf, &f.clients());
    // Named from the chain presented, with the fix.
    assert!(
        cf.reason().starts_with("unknown issuer: ")
            && cf.reason().contains("CN=portcullis")
            && cf.reason().contains("--upstream-ca FILE"),
        "{}",
        cf.reason()
    );
    assert!(sf.unwrap().reason().contains("unknown CA"));

    // Expired.
    let leaf = expired_leaf(&f, &name);
    let (cf, _) = failed_handshake(&name, leaf, &f.clients());
    assert_eq!(cf.reason(), "certificate has expired");
}

fn expired_leaf(f: &Fixture, name: &Host) -> Leaf {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![crate::tls::host_text(name)]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(30);
    params.not_after = now - time::Duration::days(1);
    let cert = params.signed_by(&key, f.ca.issuer()).unwrap();
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signer = rustls::crypto::ring::sign::any_ecdsa_type(&der).unwrap();
    Leaf {
        key: Arc::new(rustls::sign::CertifiedKey::new(
            vec![cert.der().clone(), f.ca.cert_der().clone()],
            signer,
        )),
        renew_after: std::time::SystemTime::now(),
    }
}

/// An IP target: no SNI is sent, and the leaf's IP SAN is verified.
#[test]
fn ip_target_sends_no_sni_and_verifies_the_ip() {
    let f = Fixture::new();
    let (mut cw, mut sw) = pair(4096);
    let ip: Host = Host::Ip("127.0.0.1".parse().unwrap());
    let mut c = TlsLayer::client(f.clients().config(), &ip, SMALL).unwrap();
    let mut accept = TlsAccept::new(&[], SMALL);
    c.flush(&mut cw);
    assert!(matches!(accept.poll(&mut sw), HelloPoll::Ready(_)));
    let hello = accept.hello().unwrap().clone();
    assert_eq!(hello.server_name, None);
    assert_eq!(hello.leaf_name(&ip), Ok(ip.clone()));
    let leaf = f.minter.mint(&ip).unwrap();
    let mut s = accept
        .complete(ServerConfigs::new().for_leaf(leaf.key))
        .map_err(|(f, _)| f)
        .unwrap();
    handshake(&mut c, &mut cw, &mut s, &mut sw);
    let data = pattern(1000);
    assert_eq!(transfer(&mut c, &mut cw, &mut s, &mut sw, &data, 100), data);

    // A leaf for another address fails with the address in the reason.
    let other = f
        .minter
        .mint(&Host::Ip("127.0.0.2".parse().unwrap()))
        .unwrap();
    let (cf, _) = failed_handshake(&ip, other, &f.clients());
    assert_eq!(cf.reason(), "name mismatch: cert is for 127.0.0.2");
}

/// A client offering h2 and http/1.1 gets http/1.1.
#[test]
fn alpn_falls_back_to_http11() {
    let f = Fixture::new();
    let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(f.roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let (c, _cw, s, _sw) = connected_with(&f, 4096, Arc::new(config));
    assert_eq!(c.alpn(), Some(ALPN_HTTP11));
    assert_eq!(s.alpn(), Some(ALPN_HTTP11));
}
