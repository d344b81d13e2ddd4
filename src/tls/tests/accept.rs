//! Sniffing, the ClientHello, and the SNI/ALPN checks.

use super::pair::pair;
use super::{domain, Fixture};
use crate::target::Host;
use crate::tls::accept::{
    alert_record, sniff, ClientHelloInfo, HelloPoll, HelloRefusal, Sniff, TlsAccept,
};
use crate::tls::layer::{LayerLimits, TlsLayer};

/// The bytes of a real ClientHello for `host`.
fn client_hello(f: &Fixture, host: &Host, alpn: &[&[u8]]) -> Vec<u8> {
    let (mut cw, mut sw) = pair(1 << 16);
    let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(f.roots())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let mut c =
        TlsLayer::client(std::sync::Arc::new(config), host, LayerLimits::default()).unwrap();
    c.flush(&mut cw);
    sw.take_inbound()
}

#[test]
fn sniff_every_prefix() {
    let f = Fixture::new();
    let hello = client_hello(&f, &domain("example.test"), &[b"http/1.1"]);
    for cut in 0..hello.len() {
        let want = if cut < 3 { Sniff::NeedMore } else { Sniff::Tls };
        assert_eq!(sniff(&hello[..cut]), want, "cut {cut}");
    }
    let get = b"GET / HTTP/1.1\r\n";
    for cut in 0..get.len() {
        let want = if cut < 4 {
            Sniff::NeedMore
        } else {
            Sniff::Http
        };
        assert_eq!(sniff(&get[..cut]), want, "cut {cut}");
    }
    assert_eq!(sniff(b"M-SEARCH * HTTP/1.1"), Sniff::Http);
    assert_eq!(sniff(b"\x05\x01\x00"), Sniff::Other);
    assert_eq!(sniff(b"\x16\x02\x01"), Sniff::Other);
    assert_eq!(sniff(b"get / HTTP/1.1"), Sniff::Other);
    assert_eq!(sniff(b"SSH-2.0-OpenSSH"), Sniff::Other);

    assert!(Sniff::Http
        .mismatch(true)
        .unwrap()
        .contains("plaintext HTTP"));
    assert!(Sniff::Tls
        .mismatch(false)
        .unwrap()
        .contains("TLS on a plaintext"));
    assert_eq!(Sniff::Tls.mismatch(true), None);
    assert_eq!(Sniff::Http.mismatch(false), None);
}

#[test]
fn hello_gives_sni_and_alpn_fed_a_byte_at_a_time() {
    let f = Fixture::new();
    let hello = client_hello(&f, &domain("example.test"), &[b"h2", b"http/1.1"]);
    let (mut a, mut b) = pair(1 << 16);
    b.max_io = 1;
    let mut accept = TlsAccept::new(&[], LayerLimits::default());
    for &byte in &hello[..hello.len() - 1] {
        a.inject(&[byte]);
        assert!(matches!(accept.poll(&mut b), HelloPoll::WouldBlock));
    }
    a.inject(&hello[hello.len() - 1..]);
    let HelloPoll::Ready(ready) = accept.poll(&mut b) else {
        panic!("the ClientHello is in");
    };
    let info = accept.hello().unwrap().clone();
    assert_eq!(ready, info, "Ready carries the ClientHello");
    assert!(
        matches!(accept.poll(&mut b), HelloPoll::Ready(again) if again == ready),
        "and keeps saying so"
    );
    assert_eq!(info.server_name.as_deref(), Some("example.test"));
    assert_eq!(info.alpn, Some(vec![b"h2".to_vec(), b"http/1.1".to_vec()]));
}

/// Bytes the session already read (pipelined behind CONNECT) go first.
#[test]
fn hello_from_a_prefix() {
    let f = Fixture::new();
    let hello = client_hello(&f, &domain("example.test"), &[b"http/1.1"]);
    let (_a, mut b) = pair(16);
    let mut accept = TlsAccept::new(&hello[..10], LayerLimits::default());
    assert!(matches!(accept.poll(&mut b), HelloPoll::WouldBlock));
    let mut accept = TlsAccept::new(&hello, LayerLimits::default());
    assert!(matches!(accept.poll(&mut b), HelloPoll::Ready(_)));
}

#[test]
fn garbage_is_refused_with_an_alert() {
    let (mut a, mut b) = pair(1 << 16);
    a.inject(b"\x16\x03\x01\x00\x05hello");
    let mut accept = TlsAccept::new(&[], LayerLimits::default());
    match accept.poll(&mut b) {
        HelloPoll::Failed { failure, alert } => {
            assert!(!failure.reason().is_empty());
            assert_eq!(alert.first(), Some(&0x15), "an alert record: {alert:?}");
        }
        other => panic!("{other:?}"),
    }
    let (mut a, mut b) = pair(16);
    a.close();
    let mut accept = TlsAccept::new(&[], LayerLimits::default());
    assert!(matches!(accept.poll(&mut b), HelloPoll::Gone(_)));
}

fn info(sni: Option<&str>, alpn: Option<&[&str]>) -> ClientHelloInfo {
    ClientHelloInfo {
        server_name: sni.map(str::to_owned),
        alpn: alpn.map(|a| a.iter().map(|p| p.as_bytes().to_vec()).collect()),
    }
}

#[test]
fn sni_must_name_the_target_canonically() {
    let target = domain("api.example.com");
    for sni in ["api.example.com", "API.Example.COM", "api.example.com."] {
        assert_eq!(
            info(Some(sni), None).leaf_name(&target),
            Ok(target.clone()),
            "{sni}"
        );
    }
    assert_eq!(info(None, None).leaf_name(&target), Ok(target.clone()));
    let refused = info(Some("evil.example.net"), None).leaf_name(&target);
    let Err(r @ HelloRefusal::Fronting { .. }) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(r.alert(), rustls::AlertDescription::AccessDenied);
    assert!(r.to_string().contains("domain fronting"), "{r}");
    assert!(r.to_string().contains("api.example.com"), "{r}");
    // An IP target with a name in SNI is fronting too.
    let ip = Host::Ip("192.0.2.1".parse().unwrap());
    assert!(info(Some("example.com"), None).leaf_name(&ip).is_err());
}

#[test]
fn alpn_without_http11_is_refused() {
    let t = domain("a.test");
    assert!(info(None, Some(&["h2", "http/1.1"])).leaf_name(&t).is_ok());
    assert!(info(None, Some(&[])).leaf_name(&t).is_ok());
    let r = info(None, Some(&["h2"])).leaf_name(&t).unwrap_err();
    assert_eq!(r.alert(), rustls::AlertDescription::NoApplicationProtocol);
    assert_eq!(r.to_string(), "client offers ALPN h2 but not http/1.1");
}

#[test]
fn alert_record_bytes() {
    assert_eq!(
        alert_record(rustls::AlertDescription::AccessDenied),
        [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49]
    );
}
