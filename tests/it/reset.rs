//! A peer that sends and then resets: what it sent before the reset is still
//! relayed, as a direct connection would deliver it. The proxy (the binary)
//! is paused while the peer sends and resets, so both are queued before the
//! proxy reads: the error event must not make it drop the queued bytes. The
//! survivor then sees the reset too, not a FIN that would make a cut-off
//! stream look complete.

use crate::support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::*;

const LEN: usize = 1000;

/// Sends `LEN` bytes on `s`, then closes it with a reset (SO_LINGER 0).
fn send_then_reset(mut s: TcpStream) {
    s.write_all(&[b'r'; LEN]).expect("send before the reset");
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(s);
}

/// How a stream ended.
#[derive(Debug, PartialEq)]
enum End {
    Fin,
    Reset,
}

/// Reads until EOF or an error: how many bytes arrived, and how it ended.
fn read_all(mut s: TcpStream) -> (usize, End) {
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut n = 0;
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (n, End::Fin),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (n, End::Reset),
            Err(e) => panic!("after {n} bytes: {e}"),
        }
    }
}

/// Pauses the proxy while `s` sends `LEN` bytes and resets, then lets it
/// go once both are in the proxy's end of the connection.
fn send_then_reset_while_paused(proxy: &ChildProxy, s: TcpStream) {
    let (proxy_end, peer_end) = (s.peer_addr().unwrap(), s.local_addr().unwrap());
    assert_eq!(
        tcp_row(proxy_end, peer_end).map(|r| r.state),
        Some(TCP_ESTABLISHED),
        "the proxy's end in /proc/net/tcp"
    );
    let pid = Pid::from_raw(proxy.pid() as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    send_then_reset(s);
    // A reset socket leaves the table, and the kernel takes a reset only
    // in sequence: behind every byte sent before it.
    wait_for(
        "the bytes and the reset in the proxy's socket",
        PROMPTLY,
        || tcp_row(proxy_end, peer_end).is_none(),
    );
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
}

#[test]
fn upstream_bytes_before_its_reset_reach_the_client() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap().to_string();
    let proxy = ChildProxy::start(&["--allow", &target]);
    let client = connect_via_http(proxy.addr, &target);
    let (upstream, _) = l.accept().unwrap();
    send_then_reset_while_paused(&proxy, upstream);
    assert_eq!(
        read_all(client),
        (LEN, End::Reset),
        "the bytes the upstream sent before resetting, then its reset (a FIN would pass a cut-off stream for a whole one)"
    );
    // Counted like any relayed bytes.
    let counted = wait_until(PROMPTLY, || {
        proxy.stats().get("bytes_down") == Some(&(LEN as u64))
    });
    assert!(counted, "bytes_down after the reset: {:?}", proxy.stats());
}

#[test]
fn client_bytes_before_its_reset_reach_the_upstream() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap().to_string();
    let proxy = ChildProxy::start(&["--allow", &target]);
    let client = connect_via_http(proxy.addr, &target);
    let (upstream, _) = l.accept().unwrap();
    send_then_reset_while_paused(&proxy, client);
    assert_eq!(
        read_all(upstream),
        (LEN, End::Reset),
        "the bytes the client sent before resetting, then its reset"
    );
}
