//! `ProxyBuilder::listener`: a proxy on listeners the caller bound itself
//! (as `portcullis run` does with a listener made in another namespace).

use crate::support;

use std::io::{ErrorKind, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use portcullis::{ListenAddr, ListenerProtocol, Proxy};
use support::*;

#[test]
fn tunnels_through_an_adopted_tcp_listener() {
    let echo = echo_server();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let proxy = spawn(
        Proxy::builder()
            .listener(std_listener, ListenerProtocol::Auto)
            .policy(allow_ports(&[echo.port()]))
            .timeouts(test_timeouts()),
    );
    // The adopted listener replaces the default one.
    assert_eq!(proxy.local_addrs(), vec![ListenAddr::Tcp(addr)]);

    let mut s = connect_via_http(addr, &echo.target());
    assert_echo(&mut s, &DataGen::new(11).bytes(128 * 1024));
    drop(s);
    let mut s = connect_via_socks5(addr, "127.0.0.1", echo.port()).expect("SOCKS5");
    assert_echo(&mut s, b"socks over an adopted listener");
    drop(s);

    wait_no_open_sessions(&proxy);
    let st = proxy.stats();
    assert_eq!((st.accepted, st.allowed, st.denied), (2, 2, 0));
}

#[test]
fn adopted_listeners_come_after_bound_ones_and_keep_their_protocol() {
    let echo = echo_server();
    let http_only = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http_addr = http_only.local_addr().unwrap();
    let proxy = spawn(
        Proxy::builder()
            .listen(
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenerProtocol::Socks5,
            )
            .listener(http_only, ListenerProtocol::Http)
            .policy(allow_ports(&[echo.port()]))
            .timeouts(test_timeouts()),
    );
    let addrs = proxy.local_addrs();
    assert_eq!(addrs.len(), 2);
    assert_eq!(addrs[1], ListenAddr::Tcp(http_addr));

    let mut s = connect_via_http(http_addr, &echo.target());
    assert_echo(&mut s, b"http on the adopted one");
    // A SOCKS5 greeting on the HTTP-only listener gets an HTTP refusal.
    let mut s = std::net::TcpStream::connect(http_addr).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let answer = read_until_closed(&mut s).unwrap_or_default();
    assert!(
        answer.starts_with(b"HTTP/1.1 4"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn tunnels_through_an_adopted_unix_listener_and_leaves_its_file() {
    let echo = echo_server();
    let dir = TempDir::new("adopted-unix");
    let path = dir.path().join("p.sock");
    let std_listener = UnixListener::bind(&path).unwrap();
    let proxy = spawn(
        Proxy::builder()
            .listener(std_listener, ListenerProtocol::Auto)
            .policy(allow_ports(&[echo.port()]))
            .timeouts(test_timeouts()),
    );
    assert_eq!(proxy.local_addrs(), vec![ListenAddr::Unix(path.clone())]);

    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let head = http_connect_on(&mut s, &echo.target(), &[]).expect("CONNECT");
    assert_eq!(head.status, 200, "{}", head.raw);
    assert_echo(&mut s, b"over a unix socket the caller bound");
    drop(s);

    proxy.shutdown_now();
    proxy.join().unwrap();
    // The caller bound the file, so the caller removes it.
    assert!(path.exists(), "the adopted socket's file was removed");
}

#[test]
fn a_socket_that_is_not_listening_is_refused() {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    let not_listening = std::net::TcpListener::from(std::os::fd::OwnedFd::from(s));
    let err = Proxy::builder()
        .listener(not_listening, ListenerProtocol::Auto)
        .build()
        .err()
        .expect("a bound but not listening socket must be refused");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

#[test]
fn a_cloned_builder_shares_the_socket() {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let builder = Proxy::builder().listener(std_listener, ListenerProtocol::Auto);
    let first = builder.clone().build().unwrap();
    let second = builder.build().unwrap();
    assert_eq!(first.local_addrs(), second.local_addrs());
    assert_eq!(first.local_addrs(), &[ListenAddr::Tcp(addr)]);
}
