//! Self-tests of the shared helpers, with no proxy in the path: the
//! servers, the WebSocket helpers, python3 and /proc over real sockets and
//! processes. If these fail, the scenario tests' failures say nothing about
//! the proxy. The helpers' pure logic (generator, hashes, parsers,
//! encoders) is unit-tested inside each `support` module.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;

use support::*;
use tungstenite::protocol::{Role, WebSocket};

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
