//! A WebSocket session through the proxy carrying 256 MiB each way at once
//! over one connection, hashed on both ends.

use crate::support;

use std::net::TcpStream;
use std::thread;

use portcullis::{CloseReason, SpawnedProxy};
use support::*;
use tungstenite::protocol::{Role, WebSocket};

const LEN: u64 = 256 << 20;
const MSG: usize = 1 << 20;
const UP_SEED: u64 = 0x5001;
const DOWN_SEED: u64 = 0xd0f1;

/// Runs the bulk exchange over an established tunnel `stream` to `server`.
fn exchange(
    stream: TcpStream,
    server: &Server,
    rx: std::sync::mpsc::Receiver<Result<WsReport, String>>,
) {
    let writer_stream = stream.try_clone().unwrap();
    let url = format!("ws://{}/bulk", server.target());
    let (mut reader, resp) =
        tungstenite::client::client_with_config(url, stream, Some(ws_config()))
            .unwrap_or_else(|e| panic!("websocket handshake through the proxy: {e}"));
    assert_eq!(resp.status().as_u16(), 101);
    // The handshake instance reads (it may hold buffered frames); a second
    // instance on a clone of the socket writes, so both directions run at once.
    let mut writer = WebSocket::from_raw_socket(writer_stream, Role::Client, Some(ws_config()));
    let up = thread::spawn(move || ws_push(&mut writer, UP_SEED, LEN, MSG));
    let down = ws_receive(&mut reader).expect("client receive");
    up.join()
        .expect("client writer thread")
        .expect("client send");

    // Writer finished: close on the reading instance, then drain to the end.
    let _ = reader.close(None);
    while reader.read().is_ok() {}

    let expected_down = expected_hash(DOWN_SEED, LEN);
    assert_eq!(down.received, LEN, "client received a wrong byte count");
    assert_eq!(down.messages, LEN / MSG as u64);
    assert_eq!(
        hex(&down.received_hash),
        hex(&expected_down),
        "server->client data corrupted"
    );

    let report = rx
        .recv_timeout(PROMPTLY)
        .expect("server report")
        .expect("server side");
    assert_eq!(report.received, LEN, "server received a wrong byte count");
    assert_eq!(report.messages, LEN / MSG as u64);
    assert_eq!(
        hex(&report.received_hash),
        hex(&expected_hash(UP_SEED, LEN)),
        "client->server data corrupted"
    );
}

fn check_stats(proxy: &SpawnedProxy) {
    wait_no_open_sessions(proxy);
    let s = proxy.stats();
    assert_eq!(s.allowed, 1);
    assert_eq!(s.closed.total(), 1);
    // Framing adds a little; the payload alone is LEN each way.
    assert!(s.bytes_up > LEN, "bytes_up {}", s.bytes_up);
    assert!(s.bytes_down > LEN, "bytes_down {}", s.bytes_down);
    assert_eq!(s.closed.get(CloseReason::Denied), 0);
}

#[test]
fn websocket_256mib_each_way_through_connect() {
    let (server, rx) = ws_server(DOWN_SEED, LEN, MSG);
    let proxy = start_proxy(allow_ports(&[server.port()]));
    let stream = connect_via_http(proxy_addr(&proxy), &server.target());
    exchange(stream, &server, rx);
    check_stats(&proxy);
}

#[test]
fn websocket_256mib_each_way_through_socks5() {
    let (server, rx) = ws_server(DOWN_SEED, LEN, MSG);
    let proxy = start_proxy(allow_ports(&[server.port()]));
    let stream = connect_via_socks5(proxy_addr(&proxy), "127.0.0.1", server.port())
        .unwrap_or_else(|r| panic!("SOCKS5 reply {r:#04x}"));
    exchange(stream, &server, rx);
    check_stats(&proxy);
}
