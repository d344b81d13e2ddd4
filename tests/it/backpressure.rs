//! Backpressure: one tunnel, both directions at once, writers pushing
//! random-sized chunks while readers stall and burst on a fixed schedule,
//! through small relay buffers. Every byte is checked against the generator.

use crate::support;

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use portcullis::{CloseReason, SpawnedProxy};
use support::*;

const UP_SEED: u64 = 0xb0b0;
const DOWN_SEED: u64 = 0xcafe;
/// Reader schedule: read this much, then pause.
const BURST: usize = 300 * 1024;
const PAUSE: Duration = Duration::from_millis(2);
const MAX_CHUNK: usize = 256 * 1024;

/// What the upstream saw: its reader's verifier and stall cycles.
type UpReport = (Verifier, u64);

/// An upstream that, per connection, writes `len` bytes of DOWN_SEED in random
/// chunks (then shuts down its write side) while reading with the stall schedule
/// and verifying UP_SEED until EOF.
fn stalling_upstream(len: u64) -> (Server, mpsc::Receiver<Result<UpReport, String>>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let server = Server::start(move |s| {
        let mut w = s.try_clone().unwrap();
        let writer = thread::spawn(move || {
            let r = write_stream(&mut w, DOWN_SEED, len, 1, MAX_CHUNK);
            let _ = w.shutdown(Shutdown::Write);
            r
        });
        let mut rd = s;
        let mut v = Verifier::new(UP_SEED);
        let read = read_stalling(&mut rd, &mut v, BURST, PAUSE);
        let wrote = writer.join().unwrap();
        let r = match (read, wrote) {
            (Ok(cycles), Ok(())) => Ok((v, cycles)),
            (r, w) => Err(format!("upstream: read {r:?}, write {w:?}")),
        };
        let _ = tx.lock().unwrap().send(r);
    });
    (server, rx)
}

/// Pushes `len` bytes each way through `tunnel` and checks both directions.
fn run(
    proxy: &SpawnedProxy,
    tunnel: TcpStream,
    rx: mpsc::Receiver<Result<UpReport, String>>,
    len: u64,
) {
    let mut w = tunnel.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let r = write_stream(&mut w, UP_SEED, len, 1, MAX_CHUNK);
        let _ = w.shutdown(Shutdown::Write);
        r
    });
    let mut rd = tunnel;
    let mut v = Verifier::new(DOWN_SEED);
    let cycles = read_stalling(&mut rd, &mut v, BURST, PAUSE).expect("client read");
    writer.join().unwrap().expect("client write");
    v.assert_complete("upstream -> client", len);

    let (up_v, up_cycles) = rx
        .recv_timeout(BULK)
        .expect("upstream report")
        .expect("upstream side");
    up_v.assert_complete("client -> upstream", len);
    // Each reader really went through many stall/burst cycles.
    let min_cycles = len / BURST as u64 - 1;
    assert!(cycles >= min_cycles, "client stalled only {cycles} times");
    assert!(
        up_cycles >= min_cycles,
        "upstream stalled only {up_cycles} times"
    );

    wait_no_open_sessions(proxy);
    let s = proxy.stats();
    assert_eq!(s.bytes_up, len, "{s}");
    assert_eq!(s.bytes_down, len, "{s}");
    assert_eq!(s.closed.get(CloseReason::Done), 1, "{s}");
    assert_eq!(s.closed.total(), 1, "{s}");
}

fn addr(p: &SpawnedProxy) -> SocketAddr {
    proxy_addr(p)
}

#[test]
fn both_directions_stall_and_burst_small_buffers_connect() {
    const LEN: u64 = 64 << 20;
    let (up, rx) = stalling_upstream(LEN);
    let proxy = spawn(proxy_builder(allow_ports(&[up.port()])).limits(limits_with_buffer(4096)));
    let tunnel = connect_via_http(addr(&proxy), &up.target());
    run(&proxy, tunnel, rx, LEN);
}

#[test]
fn both_directions_stall_and_burst_default_buffers_socks5() {
    const LEN: u64 = 32 << 20;
    let (up, rx) = stalling_upstream(LEN);
    let proxy = start_proxy(allow_ports(&[up.port()]));
    let tunnel = connect_via_socks5(addr(&proxy), "127.0.0.1", up.port())
        .unwrap_or_else(|r| panic!("SOCKS5 reply {r:#04x}"));
    run(&proxy, tunnel, rx, LEN);
}
