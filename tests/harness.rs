//! Self-tests of the shared helpers, with no proxy in the path: the
//! generator, hashing, the servers and the clients' parsers. If these fail,
//! the scenario tests' failures say nothing about the proxy.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;

use support::*;
use tungstenite::protocol::{Role, WebSocket};

#[test]
fn generator_is_chunking_invariant() {
    let whole = DataGen::new(42).bytes(100_003);
    let mut g = DataGen::new(42);
    let mut sizes = DataGen::new(7);
    let mut pieces = Vec::new();
    while pieces.len() < whole.len() {
        let n = sizes.range(0, 37).min(whole.len() - pieces.len());
        pieces.extend(g.bytes(n));
    }
    assert_eq!(pieces, whole);
    assert_ne!(DataGen::new(1).bytes(64), DataGen::new(2).bytes(64));
    assert_eq!(hex(&expected_hash(42, 100_003)), hex(&sha256(&whole)));

    let mut v = Verifier::new(42);
    v.check(&whole[..10]);
    v.check(&whole[10..]);
    v.assert_complete("self", whole.len() as u64);
    let mut bad = whole.clone();
    bad[5000] ^= 1;
    let mut v = Verifier::new(42);
    v.check(&bad);
    assert_eq!(v.first_mismatch, Some(5000));
}

#[test]
fn sha256_and_base64_known_answers() {
    assert_eq!(
        hex(&sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(
        basic_auth("Aladdin", "open sesame"),
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    );
}

#[test]
fn stats_line_parses() {
    let m = parse_stats_line(
        "[2026-01-01T00:00:00Z INFO  portcullis] stats: accepted=3 allowed=2 denied=1 open=1 (handshake=0 resolving=0 connecting=0 established=1 closing=0) bytes_up=10 bytes_down=20 wakeups=17 events=30 accept_pauses=0 closed: client-gone=1 denied=1",
    );
    assert_eq!(stat(&m, "open"), 1);
    assert_eq!(stat(&m, "established"), 1);
    assert_eq!(stat(&m, "wakeups"), 17);
    assert_eq!(stat(&m, "closed.client-gone"), 1);
    assert_eq!(stat(&m, "closed.denied"), 1);
    assert_eq!(stat(&m, "denied"), 1);
    assert_eq!(stat(&m, "accepted"), 3);
    assert_eq!(stat(&m, "handshake"), 0);
}

#[test]
fn socks_address_encoding() {
    assert_eq!(socks_addr("127.0.0.1", 80), [1, 127, 0, 0, 1, 0, 80]);
    assert_eq!(socks_addr("a.b", 443), [3, 3, b'a', b'.', b'b', 1, 187]);
    let v6 = socks_addr("[::1]", 1);
    assert_eq!(v6.len(), 1 + 16 + 2);
    assert_eq!(v6[0], 4);
    assert_eq!(v6[16], 1);
}

#[test]
fn response_head_is_read_without_over_reading() {
    let mut data: &[u8] =
        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nX-Proxy-Error: auth\r\n\r\nTUNNEL";
    let head = read_response_head(&mut data).unwrap();
    assert_eq!(head.status, 407);
    assert_eq!(head.header("proxy-authenticate"), Some("Basic realm=\"x\""));
    assert_eq!(head.header("x-proxy-error"), Some("auth"));
    assert_eq!(data, b"TUNNEL");
}

#[test]
fn echo_sink_source_and_http_servers() {
    let echo = echo_server();
    let mut s = TcpStream::connect(echo.addr).unwrap();
    assert_echo(&mut s, &DataGen::new(3).bytes(300_000));
    assert_eq!(echo.accepted(), 1);

    let (sink, rx) = sink_server();
    let mut s = TcpStream::connect(sink.addr).unwrap();
    write_stream(&mut s, 9, 1_000_000, 1, 70_000).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let (n, h) = rx.recv_timeout(PROMPTLY).unwrap().unwrap();
    assert_eq!(n, 1_000_000);
    assert_eq!(hex(&h), hex(&expected_hash(9, 1_000_000)));

    let source = source_server(11, 500_000);
    let mut s = TcpStream::connect(source.addr).unwrap();
    let mut v = Verifier::new(11);
    read_stalling(&mut s, &mut v, 100_000, std::time::Duration::from_millis(1)).unwrap();
    v.assert_complete("source", 500_000);

    let web = http_server("body\n");
    let mut s = TcpStream::connect(web.addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let head = read_response_head(&mut s).unwrap();
    assert_eq!(head.status, 200);
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert_eq!(body, "body\n");

    let none = must_not_accept();
    assert_eq!(none.accepted(), 0);
}

#[test]
fn websocket_server_direct() {
    const LEN: u64 = 8 << 20;
    let (server, rx) = ws_server(21, LEN, 1 << 20);
    let stream = TcpStream::connect(server.addr).unwrap();
    let writer_stream = stream.try_clone().unwrap();
    let (mut reader, _) = tungstenite::client::client_with_config(
        format!("ws://{}/", server.target()),
        stream,
        Some(ws_config()),
    )
    .unwrap();
    let mut writer = WebSocket::from_raw_socket(writer_stream, Role::Client, Some(ws_config()));
    let up = thread::spawn(move || ws_push(&mut writer, 22, LEN, 1 << 20));
    let down = ws_receive(&mut reader).unwrap();
    up.join().unwrap().unwrap();
    let _ = reader.close(None);
    while reader.read().is_ok() {}
    assert_eq!(down.received, LEN);
    assert_eq!(hex(&down.received_hash), hex(&expected_hash(21, LEN)));
    let report = rx.recv_timeout(PROMPTLY).unwrap().unwrap();
    assert_eq!(report.received, LEN);
    assert_eq!(hex(&report.received_hash), hex(&expected_hash(22, LEN)));
}

#[test]
fn python3_is_available() {
    let mut c = spawn_python("print('ok')", &[]);
    assert_eq!(child_line(&mut c, "python3"), "ok");
    assert!(c.wait().unwrap().success());
}

#[test]
fn proc_helpers_see_this_process() {
    let me = std::process::id();
    let before = count_fds(me);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(count_fds(me) > before);
    drop(l);
    let _ = proc_cpu_ticks(me);
}
