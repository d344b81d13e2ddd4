//! Half-close: one side shuts down its write half and the other direction
//! still carries everything, both via CONNECT and via SOCKS5.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;

use portcullis::{CloseReason, SpawnedProxy};
use support::*;

const REQUEST_SEED: u64 = 0x1234;
const REQUEST_LEN: u64 = 10_000;
const RESPONSE_SEED: u64 = 0x4321;
const RESPONSE_LEN: u64 = 4 << 20;

#[derive(Clone, Copy)]
enum Via {
    Http,
    Socks5,
}

fn tunnel(proxy: &SpawnedProxy, via: Via, up: &Server) -> TcpStream {
    let p = proxy_addr(proxy);
    match via {
        Via::Http => connect_via_http(p, &up.target()),
        Via::Socks5 => connect_via_socks5(p, "127.0.0.1", up.port())
            .unwrap_or_else(|r| panic!("SOCKS5 reply {r:#04x}")),
    }
}

/// Client: request, shutdown(Write). Upstream: reads to EOF, then answers
/// RESPONSE_LEN bytes and closes. The client gets all of it, then EOF.
fn client_closes_first(via: Via) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let up = Server::start(move |mut s| {
        let req = hash_to_eof(&mut s);
        let wrote = write_stream(&mut s, RESPONSE_SEED, RESPONSE_LEN, 1, 128 * 1024);
        let _ = s.shutdown(Shutdown::Write);
        let _ = tx
            .lock()
            .unwrap()
            .send((req.map_err(|e| e.to_string()), wrote.is_ok()));
    });
    let proxy = start_proxy(allow_ports(&[up.port()]));
    let mut s = tunnel(&proxy, via, &up);

    s.write_all(&DataGen::new(REQUEST_SEED).bytes(REQUEST_LEN as usize))
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();

    let mut v = Verifier::new(RESPONSE_SEED);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf).expect("client read");
        if n == 0 {
            break;
        }
        v.check(&buf[..n]);
    }
    v.assert_complete("response after the client's half-close", RESPONSE_LEN);

    let (req, wrote) = rx.recv_timeout(PROMPTLY).expect("upstream report");
    let (n, h) = req.expect("upstream read");
    assert_eq!(n, REQUEST_LEN, "upstream got a truncated request");
    assert_eq!(hex(&h), hex(&expected_hash(REQUEST_SEED, REQUEST_LEN)));
    assert!(wrote, "upstream could not write its response");

    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::Done), 1, "{st}");
    assert_eq!(st.bytes_up, REQUEST_LEN);
    assert_eq!(st.bytes_down, RESPONSE_LEN);
}

/// Upstream: a short greeting, shutdown(Write) first, then reads to EOF.
/// The client reads the greeting to EOF, then sends RESPONSE_LEN bytes; the
/// upstream receives all of them.
fn upstream_closes_first(via: Via) {
    const GREETING: &[u8] = b"hello, then nothing more from me\n";
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let up = Server::start(move |mut s| {
        let _ = s.write_all(GREETING);
        let _ = s.shutdown(Shutdown::Write);
        let _ = tx
            .lock()
            .unwrap()
            .send(hash_to_eof(&mut s).map_err(|e| e.to_string()));
    });
    let proxy = start_proxy(allow_ports(&[up.port()]));
    let mut s = tunnel(&proxy, via, &up);

    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("client read to EOF");
    assert_eq!(got, GREETING);

    write_stream(&mut s, RESPONSE_SEED, RESPONSE_LEN, 1, 128 * 1024)
        .expect("client writes after the upstream's half-close");
    s.shutdown(Shutdown::Write).unwrap();

    let (n, h) = rx
        .recv_timeout(BULK)
        .expect("upstream report")
        .expect("upstream read");
    assert_eq!(n, RESPONSE_LEN, "upstream got a truncated stream");
    assert_eq!(hex(&h), hex(&expected_hash(RESPONSE_SEED, RESPONSE_LEN)));

    // Both halves are closed now: the client sees EOF (already) and the session ends.
    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::Done), 1, "{st}");
    assert_eq!(st.bytes_up, RESPONSE_LEN);
    assert_eq!(st.bytes_down, GREETING.len() as u64);
}

#[test]
fn client_half_close_then_large_response_connect() {
    client_closes_first(Via::Http);
}

#[test]
fn client_half_close_then_large_response_socks5() {
    client_closes_first(Via::Socks5);
}

#[test]
fn upstream_half_close_then_client_keeps_sending_connect() {
    upstream_closes_first(Via::Http);
}

#[test]
fn upstream_half_close_then_client_keeps_sending_socks5() {
    upstream_closes_first(Via::Socks5);
}

/// The client finishes and the upstream never does (it neither answers nor
/// closes): the half-closed tunnel ends after the half-close timeout, even
/// with the idle timeout off, and holds nothing after.
fn silent_peer_after_half_close(via: Via) {
    let (hold_tx, hold_rx) = mpsc::channel::<TcpStream>();
    let hold_tx = std::sync::Mutex::new(hold_tx);
    // The upstream keeps its socket open and silent for the whole test.
    let up = Server::start(move |s| {
        let _ = hold_tx.lock().unwrap().send(s);
    });
    let timeouts = timeouts(|t| {
        t.half_close = std::time::Duration::from_millis(300);
    });
    assert_eq!(
        timeouts.idle, None,
        "idle timeout off: only half-close applies"
    );
    let proxy = spawn(proxy_builder(allow_ports(&[up.port()])).timeouts(timeouts));
    let mut s = tunnel(&proxy, via, &up);
    let _upstream = hold_rx.recv_timeout(PROMPTLY).expect("upstream accepted");
    s.shutdown(Shutdown::Write).unwrap();
    // Nothing comes back; the proxy gives up on the silent peer.
    let rest = expect_closed(&mut s, "half-closed tunnel to a silent upstream");
    assert!(rest.is_empty(), "{rest:?}");
    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::HalfCloseTimeout), 1, "{st}");
}

#[test]
fn half_closed_tunnel_to_a_silent_upstream_times_out_connect() {
    silent_peer_after_half_close(Via::Http);
}

#[test]
fn half_closed_tunnel_to_a_silent_upstream_times_out_socks5() {
    silent_peer_after_half_close(Via::Socks5);
}
