//! Smoke test of the TLS test support: the HTTPS origin answers real TLS
//! clients (by name and by address, keep-alive, WebSocket), and its bad
//! certificates fail verification with the reasons portcullis reports.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;

use portcullis::tls::TlsFailure;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use support::tls::{https_origin, https_origin_with, OriginCert, TestCa};
use support::{read_response_head, PROMPTLY};

type Client = StreamOwned<ClientConnection, TcpStream>;

fn connect(ca: &TestCa, port: u16, name: &str) -> Client {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let conn = ClientConnection::new(ca.client_config(&[b"h2", b"http/1.1"]), name).unwrap();
    StreamOwned::new(conn, tcp)
}

fn get(c: &mut Client, path: &str) -> (support::ResponseHead, String) {
    write!(c, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let head = read_response_head(c).unwrap();
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn origin_answers_over_tls() {
    let ca = TestCa::new();
    let origin = https_origin(&ca);
    let mut c = connect(&ca, origin.port(), "localhost");
    let (head, body) = get(&mut c, "/hello?x=1");
    assert_eq!(head.status, 200);
    assert_eq!(body, "GET /hello?x=1\n");
    assert_eq!(head.header("x-origin-sni"), Some("localhost"));
    assert_eq!(head.header("x-origin-alpn"), Some("http/1.1"));
    // Keep-alive: a second request on the same connection.
    let (_, body) = get(&mut c, "/again");
    assert_eq!(body, "GET /again\n");

    // By address: no SNI, verified against the IP SAN.
    let mut c = connect(&ca, origin.port(), "127.0.0.1");
    let (head, _) = get(&mut c, "/");
    assert_eq!(head.header("x-origin-sni"), Some("-"));
}

#[test]
fn origin_upgrades_to_a_websocket_echo() {
    let ca = TestCa::new();
    let origin = https_origin(&ca);
    let c = connect(&ca, origin.port(), "localhost");
    let url = format!("wss://localhost:{}/ws", origin.port());
    let (mut ws, resp) =
        tungstenite::client::client_with_config(url, c, Some(support::ws_config())).unwrap();
    assert_eq!(resp.status(), 101);
    let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    ws.send(tungstenite::Message::binary(payload.clone()))
        .unwrap();
    match ws.read().unwrap() {
        tungstenite::Message::Binary(b) => assert_eq!(&b[..], &payload[..]),
        other => panic!("{other:?}"),
    }
    ws.close(None).unwrap();
}

fn failure(ca: &TestCa, which: OriginCert) -> String {
    let origin = https_origin_with(ca, which);
    let mut c = connect(ca, origin.port(), "localhost");
    let e = c
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .and_then(|()| c.flush())
        .and_then(|()| c.read(&mut [0u8; 1]).map(|_| ()))
        .expect_err("verification must fail");
    let inner = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .unwrap_or_else(|| panic!("not a rustls error: {e}"));
    TlsFailure::from_rustls(inner).reason().to_owned()
}

#[test]
fn bad_certificates_fail_with_short_reasons() {
    let ca = TestCa::new();
    assert_eq!(failure(&ca, OriginCert::Expired), "certificate has expired");
    assert_eq!(
        failure(&ca, OriginCert::WrongName),
        "name mismatch: cert is for wrong.invalid"
    );
    assert_eq!(
        failure(&ca, OriginCert::SelfSigned),
        "unknown issuer; if you trust it, add its root CA with --upstream-ca FILE or [tls] upstream_ca"
    );
}
