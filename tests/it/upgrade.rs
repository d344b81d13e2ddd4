//! Upgrades inside inspected connections: after `101 Switching Protocols`
//! the session is a raw relay both ways. The client is a raw socket that
//! writes the upgrade request itself and reads the 101 byte by byte, so
//! nothing past the head is consumed by an HTTP library; then the server
//! speaks first (unprompted), the client answers, and 256 MiB go each way
//! at once, hashed. Through an inspected CONNECT tunnel, an inspected SOCKS5
//! connection and the forward proxy. And an upgrade the server declines
//! leaves the connection HTTP.

use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::thread;

use portcullis::policy::parse_cli_inspect;
use portcullis::{Policy, SpawnedProxy};
use support::*;
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::{Role, WebSocket};
use tungstenite::Message;

const LEN: u64 = 256 << 20;
const MSG: usize = 1 << 20;
const UP_SEED: u64 = 0x0b5e;
const DOWN_SEED: u64 = 0xd0e5;
const SERVER_HELLO: &str = "hello from server";
const CLIENT_HELLO: &str = "hello from client";

/// What the WebSocket server saw of the upgrade request.
#[derive(Debug, Clone)]
struct Seen {
    uri: String,
    via: Option<String>,
    host: Option<String>,
}

type Outcome = Result<(Seen, WsReport), String>;

/// A WebSocket server: on each connection it records the request, pushes
/// SERVER_HELLO unprompted, echoes the client's first message, then pushes
/// `len` bytes while hashing what the client sends (until "done" both ways).
fn upgrade_server(len: u64) -> (Server, Receiver<Outcome>) {
    upgrade_server_with(len, false)
}

/// Like [`upgrade_server`], saying its hello only once the proxy has read
/// the 101, so the hello cannot ride in the same read as the 101.
fn upgrade_server_speaking_late(len: u64) -> (Server, Receiver<Outcome>) {
    upgrade_server_with(len, true)
}

fn upgrade_server_with(len: u64, late: bool) -> (Server, Receiver<Outcome>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = Server::start(move |stream| {
        let r = serve(stream, len, late);
        let _ = tx.lock().unwrap().send(r);
    });
    (server, rx)
}

fn serve(stream: TcpStream, len: u64, late: bool) -> Outcome {
    let writer_stream = stream.try_clone().map_err(|e| e.to_string())?;
    let (mine, proxys) = (
        stream.local_addr().map_err(|e| e.to_string())?,
        stream.peer_addr().map_err(|e| e.to_string())?,
    );
    let (seen_tx, seen_rx) = mpsc::channel();
    // The Err type is tungstenite's, not ours to shrink.
    #[allow(clippy::result_large_err)]
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let h = |n: &str| {
            req.headers()
                .get(n)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let _ = seen_tx.send(Seen {
            uri: req.uri().to_string(),
            via: h("via"),
            host: h("host"),
        });
        Ok(resp)
    };
    let mut ws = tungstenite::accept_hdr_with_config(stream, callback, Some(ws_config()))
        .map_err(|e| format!("ws accept: {e}"))?;
    let seen = seen_rx.recv().map_err(|e| e.to_string())?;
    // Late: every byte of the 101 acked by the proxy's kernel and read by
    // the proxy (the client sends nothing meanwhile).
    let read_by_the_proxy = || {
        tcp_row(mine, proxys).is_some_and(|r| r.tx_queue == 0)
            && tcp_row(proxys, mine).is_some_and(|r| r.rx_queue == 0)
    };
    if late && !wait_until(PROMPTLY, read_by_the_proxy) {
        return Err("the proxy did not read the 101".into());
    }
    // Speak first: the client has sent nothing since its request.
    ws.send(Message::text(SERVER_HELLO))
        .map_err(|e| format!("server hello: {e}"))?;
    match ws.read().map_err(|e| format!("read client hello: {e}"))? {
        Message::Text(t) if t.as_str() == CLIENT_HELLO => {}
        other => return Err(format!("unexpected first client message {other:?}")),
    }
    ws.send(Message::text(format!("echo: {CLIENT_HELLO}")))
        .map_err(|e| format!("server echo: {e}"))?;
    let mut writer = WebSocket::from_raw_socket(writer_stream, Role::Server, Some(ws_config()));
    let pusher = thread::spawn(move || ws_push(&mut writer, DOWN_SEED, len, MSG));
    let report = ws_receive(&mut ws);
    pusher
        .join()
        .map_err(|_| "ws pusher panicked".to_string())??;
    let report = report?;
    while ws.read().is_ok() {}
    Ok((seen, report))
}

/// The upgrade request, with `target` as its request target.
fn upgrade_request(target: &str, host: &str) -> String {
    format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// A masked client text frame (payload < 126 bytes).
fn client_text_frame(text: &str) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut f = vec![0x81, 0x80 | text.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Upgrades `stream` (already connected to the server, directly or via the
/// proxy), runs the hello exchange and `len` bytes each way; returns the
/// 101 head and the server's outcome. With `early`, the client's hello is
/// written in the same write as the upgrade request.
fn session(
    mut stream: TcpStream,
    target: &str,
    host: &str,
    len: u64,
    early: bool,
    rx: &Receiver<Outcome>,
) -> (ResponseHead, Seen) {
    let mut req = upgrade_request(target, host).into_bytes();
    if early {
        req.extend(client_text_frame(CLIENT_HELLO));
    }
    stream.set_read_timeout(Some(PROMPTLY)).unwrap();
    stream.write_all(&req).expect("send the upgrade request");
    let head = read_response_head(&mut stream).expect("read the 101");
    assert_eq!(head.status, 101, "{}", head.raw);

    let writer_stream = stream.try_clone().unwrap();
    let mut reader = WebSocket::from_raw_socket(stream, Role::Client, Some(ws_config()));
    // The server speaks first, unprompted: it must arrive without the client
    // sending anything.
    match reader.read() {
        Ok(Message::Text(t)) => assert_eq!(t.as_str(), SERVER_HELLO),
        Ok(other) => panic!("unexpected first server message {other:?}"),
        Err(e) => panic!("the server's unprompted message did not arrive: {e}"),
    }
    if !early {
        reader
            .send(Message::text(CLIENT_HELLO))
            .expect("send client hello");
    }
    match reader.read() {
        Ok(Message::Text(t)) => assert_eq!(t.as_str(), format!("echo: {CLIENT_HELLO}")),
        Ok(other) => panic!("unexpected echo {other:?}"),
        Err(e) => panic!("the echo of the client's message did not arrive: {e}"),
    }

    reader.get_ref().set_read_timeout(Some(BULK)).unwrap();
    let mut writer = WebSocket::from_raw_socket(writer_stream, Role::Client, Some(ws_config()));
    let up = thread::spawn(move || ws_push(&mut writer, UP_SEED, len, MSG));
    let down = ws_receive(&mut reader).expect("client receive");
    up.join().expect("client writer").expect("client send");
    let _ = reader.close(None);
    while reader.read().is_ok() {}

    assert_eq!(down.received, len, "client received a wrong byte count");
    assert_eq!(
        hex(&down.received_hash),
        hex(&expected_hash(DOWN_SEED, len)),
        "server->client data corrupted"
    );
    let (seen, report) = rx
        .recv_timeout(PROMPTLY)
        .expect("server outcome")
        .expect("server side");
    assert_eq!(report.received, len, "server received a wrong byte count");
    assert_eq!(
        hex(&report.received_hash),
        hex(&expected_hash(UP_SEED, len)),
        "client->server data corrupted"
    );
    (head, seen)
}

fn inspect(server: &Server) -> Policy {
    Policy::from_rules(&[parse_cli_inspect(&server.target()).expect("rule")]).expect("policy")
}

#[track_caller]
fn check_one_upgrade(proxy: &SpawnedProxy, len: u64) {
    wait_no_open_sessions(proxy);
    let s = proxy.stats();
    assert_eq!(s.upgrades, 1, "{s:?}");
    assert_eq!(s.requests, 1, "{s:?}");
    assert_eq!(s.requests_allowed, 1, "{s:?}");
    assert_eq!(s.closed.total(), 1, "{s:?}");
    assert!(s.bytes_up > len && s.bytes_down > len, "{s:?}");
}

#[test]
fn upgrade_through_inspected_connect_256mib_each_way() {
    let (server, rx) = upgrade_server(LEN);
    let proxy = start_proxy(inspect(&server));
    let stream = connect_via_http(proxy_addr(&proxy), &server.target());
    let (_, seen) = session(stream, "/chat", &server.target(), LEN, false, &rx);
    assert_eq!(seen.uri, "/chat");
    assert_eq!(seen.via, None, "a tunnel forwards heads verbatim");
    check_one_upgrade(&proxy, LEN);
}

#[test]
fn upgrade_through_inspected_socks5_256mib_each_way() {
    let (server, rx) = upgrade_server(LEN);
    let proxy = start_proxy(inspect(&server));
    let stream = connect_via_socks5(proxy_addr(&proxy), "127.0.0.1", server.port())
        .unwrap_or_else(|r| panic!("SOCKS5 reply {r:#04x}"));
    let (_, seen) = session(stream, "/chat", &server.target(), LEN, false, &rx);
    assert_eq!(seen.uri, "/chat");
    check_one_upgrade(&proxy, LEN);
}

#[test]
fn upgrade_through_forward_proxy_256mib_each_way() {
    let (server, rx) = upgrade_server(LEN);
    let proxy = start_proxy(allow_ports(&[server.port()]));
    let stream = TcpStream::connect(proxy_addr(&proxy)).unwrap();
    let url = format!("http://{}/", server.target());
    let (head, seen) = session(stream, &url, "ignored.example", LEN, false, &rx);
    assert_eq!(seen.uri, "/", "the server sees origin-form");
    assert_eq!(seen.via.as_deref(), Some("1.1 portcullis"), "{seen:?}");
    assert_eq!(seen.host.as_deref(), Some(server.target().as_str()));
    assert_eq!(head.header("Via"), Some("1.1 portcullis"), "{}", head.raw);
    assert!(
        head.header("Upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket")),
        "{}",
        head.raw
    );
    check_one_upgrade(&proxy, LEN);
}

/// Client bytes sent right behind the upgrade request wait for the 101 and
/// then go on raw (they are not parsed as HTTP).
#[test]
fn bytes_behind_the_upgrade_request_go_on_after_101() {
    for socks in [false, true] {
        let (server, rx) = upgrade_server(64 * 1024);
        let proxy = start_proxy(inspect(&server));
        let p = proxy_addr(&proxy);
        let stream = if socks {
            connect_via_socks5(p, "127.0.0.1", server.port()).expect("SOCKS5")
        } else {
            connect_via_http(p, &server.target())
        };
        session(stream, "/early", &server.target(), 64 * 1024, true, &rx);
        check_one_upgrade(&proxy, 64 * 1024);
    }
}

/// An upgrade answered with 200: no switch, the connection stays HTTP,
/// including a request pipelined behind the upgrade request.
#[test]
fn declined_upgrade_keeps_http() {
    let origin = Origin::start(|r| match r.header("Upgrade") {
        Some(_) => ok("no upgrade for you"),
        None => ok(&format!("{} {}", r.method, r.target)),
    });
    let proxy =
        start_proxy(Policy::from_rules(&[parse_cli_inspect(&origin.target()).unwrap()]).unwrap());
    let mut c = HttpConn::new(connect_via_http(proxy_addr(&proxy), &origin.target()));
    let host = origin.target();

    c.send(upgrade_request("/ws", &host));
    let r = c.response("GET");
    assert_eq!(r.status, 200, "{}", r.raw_head);
    assert_eq!(r.text(), "no upgrade for you");
    assert_eq!(c.get(&host, "/second").text(), "GET /second");

    // Pipelined behind a declined upgrade: held until the answer, then parsed.
    c.send(
        upgrade_request("/ws2", &host) + &format!("GET /third HTTP/1.1\r\nHost: {host}\r\n\r\n"),
    );
    assert_eq!(c.response("GET").text(), "no upgrade for you");
    assert_eq!(c.response("GET").text(), "GET /third");

    let targets: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["/ws", "/second", "/ws2", "/third"]);
    drop(c);
    wait_no_open_sessions(&proxy);
    let s = proxy.stats();
    assert_eq!(s.upgrades, 0, "{s:?}");
    assert_eq!(s.requests, 4, "{s:?}");
}

/// The server speaks first once the proxy has read the 101 (a separate read
/// for the proxy): the frame must still reach a client that sends nothing.
#[test]
fn server_speaks_first_after_a_pause() {
    for how in ["connect", "socks5", "forward"] {
        let (server, rx) = upgrade_server_speaking_late(64 * 1024);
        let proxy = start_proxy(inspect(&server));
        let p = proxy_addr(&proxy);
        let (stream, target) = match how {
            "connect" => (connect_via_http(p, &server.target()), "/late".to_string()),
            "socks5" => (
                connect_via_socks5(p, "127.0.0.1", server.port()).expect("SOCKS5"),
                "/late".to_string(),
            ),
            _ => (
                TcpStream::connect(p).unwrap(),
                format!("http://{}/late", server.target()),
            ),
        };
        let (_, seen) = session(stream, &target, &server.target(), 64 * 1024, false, &rx);
        assert_eq!(seen.uri, "/late", "{how}");
        check_one_upgrade(&proxy, 64 * 1024);
    }
}

/// The binary's access line and SIGUSR1 counters report the upgrade.
#[test]
fn access_line_and_counters_report_the_upgrade() {
    let (server, rx) = upgrade_server(64 * 1024);
    let proxy = ChildProxy::start(&["--inspect", &server.target()]);
    let stream = connect_via_http(proxy.addr, &server.target());
    session(stream, "/chat", &server.target(), 64 * 1024, false, &rx);
    wait_for("the access line", PROMPTLY, || {
        proxy.log().iter().any(|l| l.contains("event=session"))
    });
    let line = proxy
        .log()
        .into_iter()
        .find(|l| l.contains("event=session"))
        .unwrap();
    assert!(
        line.contains(" requests=1 upgraded=true"),
        "access line: {line}"
    );
    let stats = proxy.stats();
    assert_eq!(stat(&stats, "upgrades"), 1, "{stats:?}");
    assert_eq!(stat(&stats, "requests"), 1, "{stats:?}");
}
