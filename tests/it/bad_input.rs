//! Hostile and broken handshakes get the right answer and never disturb a
//! tunnel relaying concurrently on the same proxy (checked after each case).

use crate::support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use portcullis::{CloseReason, ListenAddr, ListenerProtocol, ProxyBuilder, SpawnedProxy};
use support::*;

const USER: &str = "alice";
const PASS: &str = "s3cret";

struct Fixture {
    proxy: SpawnedProxy,
    echo: Server,
    bg: BackgroundTunnel,
}

impl Fixture {
    fn addr(&self) -> SocketAddr {
        proxy_addr(&self.proxy)
    }
}

/// A proxy allowing an echo server, with a background tunnel pumping through it.
fn fixture(customise: impl FnOnce(ProxyBuilder) -> ProxyBuilder, auth: bool) -> Fixture {
    let echo = echo_server();
    let proxy = spawn(customise(proxy_builder(allow_ports(&[echo.port()]))));
    let p = proxy_addr(&proxy);
    let s = if auth {
        let cred = basic_auth(USER, PASS);
        let (s, head) =
            http_connect(p, &echo.target(), &[("Proxy-Authorization", &cred)]).expect("CONNECT");
        assert_eq!(head.status, 200, "{}", head.raw);
        s
    } else {
        connect_via_http(p, &echo.target())
    };
    let bg = BackgroundTunnel::start(s, 0xb6);
    bg.check("setup");
    Fixture { proxy, echo, bg }
}

fn plain() -> Fixture {
    fixture(|b| b, false)
}

fn raw(p: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(p).expect("connect to proxy");
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s
}

/// Sends `request` and expects an HTTP error `status` with X-Proxy-Error, then a close.
#[track_caller]
fn expect_http_error(p: SocketAddr, request: &[u8], status: u16) -> ResponseHead {
    let mut s = raw(p);
    s.write_all(request).expect("send request");
    let head = read_response_head(&mut s)
        .unwrap_or_else(|e| panic!("no answer to {:?}: {e}", String::from_utf8_lossy(request)));
    assert_eq!(
        head.status,
        status,
        "answer to {:?}: {}",
        String::from_utf8_lossy(request),
        head.raw
    );
    assert!(
        head.header("X-Proxy-Error").is_some_and(|v| !v.is_empty()),
        "{status} without X-Proxy-Error: {}",
        head.raw
    );
    expect_closed(&mut s, "after an error answer");
    head
}

/// Greets with no-auth and expects method 0x00.
fn socks_greet(s: &mut TcpStream) {
    use std::io::Read;
    s.write_all(&[5, 1, 0]).unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).expect("method selection");
    assert_eq!(sel, [5, 0]);
}

#[test]
fn malformed_connect_lines_get_400() {
    let f = plain();
    let p = f.addr();
    let port = f.echo.port();
    let cases: Vec<Vec<u8>> = vec![
        b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n".to_vec(),
        b"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n".to_vec(),
        b"CONNECT :443 HTTP/1.1\r\n\r\n".to_vec(),
        b"NOT A REQUEST LINE AT ALL\r\n\r\n".to_vec(),
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nBroken header line\r\n\r\n").into_bytes(),
    ];
    for (i, c) in cases.iter().enumerate() {
        expect_http_error(p, c, 400);
        f.bg.check(&format!("malformed case {i}"));
    }
    wait_for("all bad requests closed", PROMPTLY, || {
        f.proxy.stats().closed.get(CloseReason::BadRequest) == cases.len() as u64
    });
    assert_eq!(f.proxy.stats().allowed, 1, "only the background tunnel");
    assert!(f.bg.finish() > 0);
}

#[test]
fn oversized_head_gets_431() {
    let f = plain();
    let mut s = raw(f.addr());
    let mut req = format!("CONNECT {} HTTP/1.1\r\nX-Big: ", f.echo.target()).into_bytes();
    req.extend_from_slice(&vec![b'a'; 64 * 1024]);
    req.extend_from_slice(b"\r\n\r\n");
    // Write from a thread: the proxy may answer (and stop reading) before all of it is sent.
    let mut w = s.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let _ = w.write_all(&req);
    });
    let head = read_response_head(&mut s).expect("an answer to the oversized head");
    assert_eq!(head.status, 431, "{}", head.raw);
    assert!(head.header("X-Proxy-Error").is_some(), "{}", head.raw);
    expect_closed(&mut s, "after 431");
    writer.join().unwrap();
    f.bg.check("431");
    assert_eq!(
        f.echo.accepted(),
        1,
        "only the background tunnel reached upstream"
    );
    assert!(f.bg.finish() > 0);
}

#[test]
fn non_connect_method_gets_405() {
    let f = plain();
    expect_http_error(
        f.addr(),
        format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", f.echo.target()).as_bytes(),
        405,
    );
    f.bg.check("405");
    assert_eq!(f.echo.accepted(), 1);
    assert!(f.bg.finish() > 0);
}

#[test]
fn socks5_wrong_version_in_request_is_closed() {
    let f = plain();
    let mut s = raw(f.addr());
    socks_greet(&mut s);
    let mut req = vec![4, 1, 0];
    req.extend(socks_addr("127.0.0.1", f.echo.port()));
    s.write_all(&req).unwrap();
    let got = expect_closed(&mut s, "SOCKS request with version 4");
    if got.len() >= 2 {
        assert_eq!(got[0], 5, "answer {got:?}");
        assert_ne!(
            got[1], 0,
            "a bad request was answered with success: {got:?}"
        );
    }
    f.bg.check("bad SOCKS version");
    assert_eq!(f.echo.accepted(), 1);
    assert!(f.bg.finish() > 0);
}

#[test]
fn socks4_greeting_on_socks5_listener_is_closed() {
    let f = fixture(
        |b| {
            b.listen(
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenerProtocol::Socks5,
            )
        },
        false,
    );
    let socks_only = match &f.proxy.local_addrs()[1] {
        ListenAddr::Tcp(a) => *a,
        other => panic!("second listener is {other}"),
    };
    assert_ne!(socks_only, f.addr());
    let mut s = raw(socks_only);
    let port = f.echo.port().to_be_bytes();
    s.write_all(&[4, 1, port[0], port[1], 127, 0, 0, 1, b'u', 0])
        .unwrap();
    let got = expect_closed(&mut s, "SOCKS4 greeting on a socks5 listener");
    assert!(
        !(got.len() >= 2 && (got[1] == 0x5a || got[..2] == [5, 0])),
        "a SOCKS4 request was granted: {got:?}"
    );
    f.bg.check("SOCKS4 greeting");
    assert_eq!(f.echo.accepted(), 1);
    assert!(f.bg.finish() > 0);
}

#[test]
fn socks5_bind_gets_07() {
    let f = plain();
    let mut s = raw(f.addr());
    socks_greet(&mut s);
    let mut req = vec![5, 2, 0];
    req.extend(socks_addr("127.0.0.1", f.echo.port()));
    s.write_all(&req).unwrap();
    let got = expect_closed(&mut s, "SOCKS BIND");
    assert_eq!(got.len(), 10, "want one full 10-byte reply, got {got:?}");
    assert_eq!(got[..4], [5, 0x07, 0, 1], "reply {got:?}");
    f.bg.check("BIND");
    assert_eq!(f.echo.accepted(), 1);
    assert!(f.bg.finish() > 0);
}

#[test]
fn socks5_unknown_address_type_gets_08() {
    let f = plain();
    let mut s = raw(f.addr());
    socks_greet(&mut s);
    let port = f.echo.port().to_be_bytes();
    s.write_all(&[5, 1, 0, 0x09, 127, 0, 0, 1, port[0], port[1]])
        .unwrap();
    let got = expect_closed(&mut s, "SOCKS unknown ATYP");
    assert_eq!(got.len(), 10, "want one full 10-byte reply, got {got:?}");
    assert_eq!(got[..4], [5, 0x08, 0, 1], "reply {got:?}");
    f.bg.check("unknown ATYP");
    assert_eq!(f.echo.accepted(), 1);
    assert!(f.bg.finish() > 0);
}

#[test]
fn stalled_handshake_is_closed_by_the_handshake_timer() {
    let f = fixture(
        |b| {
            b.timeouts(timeouts(|t| {
                t.handshake = Duration::from_secs(1);
            }))
        },
        false,
    );
    let mut s = raw(f.addr());
    s.write_all(format!("CONNECT {} HTTP/1.1\r\n", f.echo.target()).as_bytes())
        .unwrap();
    // Bounded wait for the close; whatever the proxy says first (e.g. 408) is fine.
    expect_closed(&mut s, "a half-sent handshake");
    wait_for("the handshake-timeout tally", PROMPTLY, || {
        f.proxy.stats().closed.get(CloseReason::HandshakeTimeout) == 1
    });
    // The established background tunnel is not subject to the handshake timer.
    f.bg.check("handshake timeout");
    let st = f.proxy.stats();
    assert_eq!(st.open.established, 1, "{st}");
    assert_eq!(st.closed.total(), 1, "{st}");
    assert!(f.bg.finish() > 0);
}

#[test]
fn bytes_pipelined_behind_the_connect_head_reach_upstream() {
    let f = plain();
    let mut s = raw(f.addr());
    let payload = DataGen::new(77).bytes(48 * 1024);
    let mut first =
        format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", f.echo.target()).into_bytes();
    first.extend_from_slice(&payload);
    s.write_all(&first).unwrap();
    let head = read_response_head(&mut s).expect("CONNECT answer");
    assert_eq!(head.status, 200, "{}", head.raw);
    let mut back = vec![0u8; payload.len()];
    std::io::Read::read_exact(&mut s, &mut back).expect("pipelined bytes echoed");
    assert!(back == payload, "pipelined bytes were altered");
    assert_echo(&mut s, b"and the tunnel carries on");
    f.bg.check("pipelining");
    assert!(f.bg.finish() > 0);
}

#[test]
fn http_proxy_authorization() {
    let f = fixture(|b| b.auth(USER, PASS), true);
    let p = f.addr();
    let target = f.echo.target();

    // None: 407 with a Basic challenge.
    let (mut s, head) = http_connect(p, &target, &[]).unwrap();
    assert_eq!(head.status, 407, "{}", head.raw);
    let challenge = head.header("Proxy-Authenticate").unwrap_or_default();
    assert!(
        challenge.starts_with("Basic realm="),
        "challenge {challenge:?}: {}",
        head.raw
    );
    assert!(head.header("X-Proxy-Error").is_some(), "{}", head.raw);
    expect_closed(&mut s, "after 407");
    f.bg.check("no credentials");

    // Wrong: 407.
    for cred in [
        basic_auth(USER, "wrong"),
        basic_auth("bob", PASS),
        "Basic !!!".into(),
    ] {
        let (mut s, head) =
            http_connect(p, &target, &[("Proxy-Authorization", cred.as_str())]).unwrap();
        assert_eq!(head.status, 407, "{cred}: {}", head.raw);
        expect_closed(&mut s, "after 407");
        f.bg.check("wrong credentials");
    }

    // Right: 200 and a working tunnel.
    let cred = basic_auth(USER, PASS);
    let (mut s, head) = http_connect(p, &target, &[("Proxy-Authorization", &cred)]).unwrap();
    assert_eq!(head.status, 200, "{}", head.raw);
    assert_echo(&mut s, b"authorised");
    f.bg.check("right credentials");

    wait_for("refused sessions tallied", PROMPTLY, || {
        f.proxy.stats().closed.get(CloseReason::AuthFailed) == 4
    });
    assert_eq!(f.echo.accepted(), 2, "refused clients reached upstream");
    assert!(f.bg.finish() > 0);
}

#[test]
fn socks5_username_password() {
    let f = fixture(|b| b.auth(USER, PASS), true);
    let p = f.addr();
    let port = f.echo.port();

    // Right.
    let mut s = socks5_connect(p, "127.0.0.1", port, Some((USER, PASS))).expect("SOCKS5 auth");
    assert_echo(&mut s, b"authorised over socks");
    f.bg.check("right SOCKS credentials");

    // Wrong password: failure status, then closed.
    match socks5_connect(p, "127.0.0.1", port, Some((USER, "nope"))) {
        Err(SocksError::Auth(st)) => assert_ne!(st, 0),
        other => panic!("wrong password: {other:?}"),
    }
    f.bg.check("wrong SOCKS password");

    // Offering only no-auth when auth is required: no acceptable method.
    match socks5_connect(p, "127.0.0.1", port, None) {
        Err(SocksError::Method(m)) => assert_eq!(m, 0xff),
        other => panic!("no-auth on an auth proxy: {other:?}"),
    }
    f.bg.check("no SOCKS credentials");

    wait_for("refused SOCKS sessions closed", PROMPTLY, || {
        f.proxy.stats().closed.get(CloseReason::AuthFailed) == 2
    });
    assert_eq!(f.echo.accepted(), 2, "refused clients reached upstream");
    assert!(f.bg.finish() > 0);
}
