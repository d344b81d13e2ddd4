//! A Unix-domain socket listener: CONNECT and SOCKS5 over it reach a TCP upstream.

mod support;

use std::os::unix::net::UnixStream;

use portcullis::{ListenAddr, ListenerProtocol, Proxy};
use support::*;

fn unix_proxy(dir: &TempDir, allow: u16) -> (portcullis::SpawnedProxy, std::path::PathBuf) {
    let path = dir.path().join("proxy.sock");
    let proxy = spawn(
        Proxy::builder()
            .listen(ListenAddr::Unix(path.clone()), ListenerProtocol::Auto)
            .policy(allow_ports(&[allow]))
            .timeouts(test_timeouts()),
    );
    assert_eq!(proxy.local_addrs(), vec![ListenAddr::Unix(path.clone())]);
    assert_eq!(proxy.tcp_addr(), None);
    (proxy, path)
}

#[test]
fn connect_over_unix_socket() {
    let echo = echo_server();
    let dir = TempDir::new("unix");
    let (proxy, path) = unix_proxy(&dir, echo.port());

    let mut s = UnixStream::connect(&path).expect("connect to the unix listener");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_on(&mut s, &echo.target(), &[]).expect("CONNECT");
    assert_eq!(head.status, 200, "{}", head.raw);
    let data = DataGen::new(5).bytes(256 * 1024);
    assert_echo(&mut s, &data);
    assert_echo(&mut s, b"again");
    drop(s);

    // Denied targets are refused here too.
    let denied = must_not_accept();
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_on(&mut s, &denied.target(), &[]).expect("CONNECT");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert_eq!(denied.accepted(), 0);

    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!(st.accepted, 2);
    assert_eq!(st.allowed, 1);
    assert_eq!(st.denied, 1);
    assert_eq!(st.bytes_up, 256 * 1024 + 5);
}

#[test]
fn socks5_over_unix_socket() {
    let echo = echo_server();
    let dir = TempDir::new("unix-socks");
    let (proxy, path) = unix_proxy(&dir, echo.port());

    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    socks5_handshake(&mut s, "127.0.0.1", echo.port(), None).expect("SOCKS5 over unix");
    assert_echo(&mut s, b"socks over a unix socket");
    drop(s);
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().allowed, 1);
}
