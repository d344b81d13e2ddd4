//! Half-close: one side shuts down its write half and the other direction
//! still carries everything, both via CONNECT and via SOCKS5.

use crate::support;

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

/// Bytes the kernel holds unacknowledged or unsent on `s` (TIOCOUTQ).
fn unsent(s: &TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: nix::libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int through the pointer.
    let rc = unsafe { nix::libc::ioctl(s.as_raw_fd(), nix::libc::TIOCOUTQ, &mut n) };
    assert_eq!(rc, 0, "TIOCOUTQ: {}", std::io::Error::last_os_error());
    n as usize
}

/// Sends on `s` until the proxy stops reading it (every byte sent is in
/// the proxy's receive queue and stays there: its reactor sleeps with
/// them unread): the tunnel toward an upstream that never reads is full.
/// Stops short of a full receive window, so the FIN of the close that
/// follows reaches the proxy (a FIN behind unsent bytes and a zero window
/// never would: no proxy could see it).
fn fill_until_the_proxy_stops_reading(s: &mut TcpStream, proxy: &ChildProxy) {
    const CHUNK: usize = 32 << 10;
    const QUEUED: usize = 64 << 10;
    let me = s.local_addr().unwrap();
    let chunk = vec![0x5a; CHUNK];
    for _ in 0..(1 << 14) {
        s.write_all(&chunk).expect("write into the tunnel");
        wait_for("the proxy's kernel to take every byte", PROMPTLY, || {
            unsent(s) == 0
        });
        let row = || tcp_row(proxy.addr, me).expect("the proxy's socket in /proc/net/tcp");
        if row().rx_queue >= QUEUED {
            // Every byte reached the proxy's socket, each a readiness event
            // for its reactor: asleep, it is done reading what it will.
            let pid = proxy.pid().to_string();
            wait_for("the proxy's reactor asleep", PROMPTLY, || {
                in_epoll_wait_watching(&pid, row().inode)
            });
            if row().rx_queue >= QUEUED {
                return;
            }
        }
    }
    panic!("the proxy kept reading 512 MiB toward an upstream that never reads");
}

/// Audit H3: the upstream accepts and never reads; each client fills its
/// tunnel until the proxy stops reading it (its buffer toward the upstream
/// is full), then closes. The proxy never reads the FIN (it is queued
/// behind bytes it has no room for), but the kernel reports it (RDHUP): the
/// tunnel is half-closed and silent, so it closes after the half-close
/// timeout and the proxy is back to its baseline fds.
#[test]
fn a_client_that_fills_a_tunnel_to_a_non_reading_upstream_then_closes_is_released() {
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = held.clone();
    let up = Server::start(move |s| h.lock().unwrap().push(s));
    let proxy = ChildProxy::start(&["--allow", &up.target(), "--half-close-timeout", "1s"]);
    let baseline = proxy.fds();
    const EACH: usize = 3;
    for i in 0..2 * EACH {
        let mut s = if i < EACH {
            connect_via_http(proxy.addr, &up.target())
        } else {
            connect_via_socks5(proxy.addr, "127.0.0.1", up.port())
                .unwrap_or_else(|r| panic!("SOCKS5 reply {r:#04x}"))
        };
        fill_until_the_proxy_stops_reading(&mut s, &proxy);
        drop(s);
    }
    wait_for("the upstream to hold every tunnel", PROMPTLY, || {
        held.lock().unwrap().len() == 2 * EACH
    });
    let mut last = (0, 0);
    let released = wait_until(PROMPTLY, || {
        last = (stat(&proxy.stats(), "open"), proxy.fds());
        last == (0, baseline)
    });
    let log: Vec<String> = proxy
        .log()
        .into_iter()
        .filter(|l| !l.contains("stats: "))
        .collect();
    assert!(
        released,
        "(open sessions, fds) = {last:?}, baseline fds {baseline}; log: {log:#?}"
    );
    let st = proxy.stats();
    assert_eq!(
        stat(&st, "closed.half-close-timeout"),
        2 * EACH as u64,
        "{st:?}"
    );
}

/// Audit minor: an inspected tunnel (and the forward proxy) whose client
/// sends a whole request and then half-closes, to an upstream that never
/// answers: the session ends after the half-close timeout, not the longer
/// response timeout, and the client still gets its 504.
fn inspected_half_close_to_a_silent_upstream(forward: bool) {
    let (hold_tx, hold_rx) = mpsc::channel::<TcpStream>();
    let hold_tx = std::sync::Mutex::new(hold_tx);
    let up = Server::start(move |s| {
        let _ = hold_tx.lock().unwrap().send(s);
    });
    let rule = portcullis::policy::parse_cli_inspect(&up.target()).unwrap();
    let timeouts = timeouts(|t| {
        t.half_close = std::time::Duration::from_millis(300);
        t.response = std::time::Duration::from_secs(60);
    });
    let proxy =
        spawn(proxy_builder(portcullis::Policy::from_rules(&[rule]).unwrap()).timeouts(timeouts));
    let target = up.target();
    let mut s = if forward {
        let mut s = TcpStream::connect(proxy_addr(&proxy)).unwrap();
        write!(
            s,
            "GET http://{target}/slow HTTP/1.1\r\nHost: {target}\r\n\r\n"
        )
        .unwrap();
        s
    } else {
        let mut s = connect_via_http(proxy_addr(&proxy), &target);
        write!(s, "GET /slow HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        s
    };
    let _upstream = hold_rx.recv_timeout(PROMPTLY).expect("upstream accepted");
    s.shutdown(Shutdown::Write).unwrap();
    let started = std::time::Instant::now();
    let rest = expect_closed(&mut s, "half-closed inspected session to a silent upstream");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let text = String::from_utf8_lossy(&rest);
    assert!(text.starts_with("HTTP/1.1 504 "), "{text}");
    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.closed.get(CloseReason::HalfCloseTimeout), 1, "{st}");
}

#[test]
fn half_closed_inspected_tunnel_to_a_silent_upstream_times_out() {
    inspected_half_close_to_a_silent_upstream(false);
}

#[test]
fn half_closed_forward_request_to_a_silent_upstream_times_out() {
    inspected_half_close_to_a_silent_upstream(true);
}

/// `ss` lines of this machine's established TCP sockets matching `filter`
/// (an `ss` expression), with their timers.
fn ss(filter: &str) -> Vec<String> {
    let out = std::process::Command::new("ss")
        .args(["-tnoH", "state", "established"])
        .arg(filter)
        .output()
        .expect("ss (iproute2)");
    assert!(out.status.success(), "ss: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The keepalive timers on the proxy's two sockets of one tunnel: the
/// accepted one (local port = the proxy's) and the dialled one (remote
/// port = the origin's, local port not the origin's).
fn tunnel_keepalive(args: &[&str]) -> (Vec<String>, Vec<String>) {
    let up = echo_server();
    let mut all = vec!["--allow", "127.0.0.1/32"];
    all.extend_from_slice(args);
    let proxy = ChildProxy::start(&all);
    let mut s = connect_via_http(proxy.addr, &up.target());
    assert_echo(&mut s, b"ping");
    // Once the echo is acknowledged (no retransmission timer), each socket
    // shows its keepalive timer, or none.
    let quiet = |lines: &Vec<String>| lines.len() == 1 && !lines[0].contains("timer:(on,");
    let (mut client_side, mut upstream_side) = (Vec::new(), Vec::new());
    wait_for("both tunnel sockets quiet", PROMPTLY, || {
        client_side = ss(&format!("( sport = :{} )", proxy.addr.port()));
        upstream_side = ss(&format!("( dport = :{} )", up.port()));
        quiet(&client_side) && quiet(&upstream_side)
    });
    drop(s);
    (client_side, upstream_side)
}

#[test]
fn tunnels_have_tcp_keepalive_on_both_sockets_unless_turned_off() {
    let (client, upstream) = tunnel_keepalive(&["--keepalive", "45s"]);
    for (side, lines) in [("client", &client), ("upstream", &upstream)] {
        assert_eq!(lines.len(), 1, "{side}: {lines:?}");
        assert!(
            lines[0].contains("timer:(keepalive,"),
            "{side} socket keepalive: {lines:?}"
        );
    }
    // The default is on too.
    let (client, upstream) = tunnel_keepalive(&[]);
    assert!(client[0].contains("timer:(keepalive,"), "{client:?}");
    assert!(upstream[0].contains("timer:(keepalive,"), "{upstream:?}");
    // Off: no keepalive timer on either.
    let (client, upstream) = tunnel_keepalive(&["--keepalive", "off"]);
    assert_eq!(
        (client.len(), upstream.len()),
        (1, 1),
        "{client:?} {upstream:?}"
    );
    assert!(
        !client[0].contains("keepalive") && !upstream[0].contains("keepalive"),
        "{client:?} {upstream:?}"
    );
}
