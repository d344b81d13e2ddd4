//! Fronting around inspection (issue 20, item 2). `good.test` is inspected
//! (`/admin/**` denied) and `other.test` is allowed raw at another address
//! of the same front, an origin serving every name on every address as CDN
//! edges do. Before the fix, `CONNECT other.test` carrying SNI (or `Host`)
//! `good.test` got `200` and the denied page; through the inspecting rule
//! the same path gets `403`.
//!
//! Fixed in `session/vetting.rs`: a raw tunnel to a port an inspecting rule
//! covers has its first flight read first; a name in it with a stricter
//! treatment closes the tunnel (a TLS alert or an HTTP `403`), logged
//! `fronting sni=good.test target=other.test:PORT`.
//!
//! These run in a network namespace with public addresses on `lo` (see
//! support/netns.rs): `good.test` at 45.45.45.45, `other.test` at
//! 45.45.45.46, and the front listening on both.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection, StreamOwned};
use support::*;

const GOOD_ADDR: &str = "45.45.45.45";
const OTHER_ADDR: &str = "45.45.45.46";

/// The request lines the front served.
type Seen = Arc<Mutex<Vec<String>>>;

/// Reads one request on `s` (reached at `at`), records its request line
/// and Host, and gives the body that names them; `None` at EOF.
fn take_request(s: &mut impl Read, at: &str, seen: &Seen) -> Option<String> {
    let head = read_until_blank_line(s).ok()?;
    let text = String::from_utf8_lossy(&head).into_owned();
    let line = text.lines().next().unwrap_or_default().to_owned();
    let host = text
        .lines()
        .find_map(|l| l.strip_prefix("Host: "))
        .unwrap_or("-")
        .to_owned();
    seen.lock()
        .unwrap()
        .push(format!("{line} host={host} at={at}"));
    Some(format!("the page at {line} for {host}\n"))
}

/// Answers one request per connection on `s` (reached at `at`) with its
/// request line and Host.
fn answer(s: &mut (impl Read + Write), at: &str, seen: &Seen) {
    let Some(body) = take_request(s, at, seen) else {
        return;
    };
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes());
    let _ = s.flush();
}

/// A front on both addresses (one port): TLS with a certificate for both
/// names (and the other address) from `ca` when `tls`, else plaintext.
fn front(ca: Option<&TestCa>) -> (Vec<Server>, u16, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let config = ca.map(|ca| {
        let (chain, key) = ca.leaf(&["good.test", "other.test", OTHER_ADDR], false);
        Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
        )
    });
    let mut servers = Vec::new();
    let mut port = 0;
    for ip in [GOOD_ADDR, OTHER_ADDR] {
        let (config, seen) = (config.clone(), seen.clone());
        let server =
            Server::start_on(
                format!("{ip}:{port}").parse().unwrap(),
                move |tcp| match &config {
                    Some(c) => {
                        let Ok(conn) = ServerConnection::new(c.clone()) else {
                            return;
                        };
                        let mut tls = StreamOwned::new(conn, tcp);
                        answer(&mut tls, ip, &seen);
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                    }
                    None => answer(&mut { tcp }, ip, &seen),
                },
            );
        port = server.port();
        servers.push(server);
    }
    (servers, port, seen)
}

/// The proxy, resolving both names through its own /etc/hosts, with
/// `config` (TOML).
fn proxy(tag: &str, config: &str) -> (TempDir, ChildProxy) {
    let dir = TempDir::new(tag);
    let hosts = dir.0.join("hosts");
    std::fs::write(
        &hosts,
        format!("127.0.0.1 localhost\n{GOOD_ADDR} good.test\n{OTHER_ADDR} other.test\n"),
    )
    .unwrap();
    let cfg = dir.0.join("portcullis.toml");
    std::fs::write(&cfg, config).unwrap();
    let proxy = ChildProxy::with_hosts(&hosts, &["--config", cfg.to_str().unwrap()]);
    (dir, proxy)
}

/// Rule `good` (`good.test:port`, `/admin/**` denied, `more` its TLS key)
/// and rule `cdn` (`other.test:port`, raw).
fn rules(port: u16, more: &str) -> String {
    format!(
        r#"
[[rules]]
name = "good"
action = "allow"
host = "good.test"
port = {port}
{more}
inspect = "http"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", path = "/admin/**" }},
]

[[rules]]
name = "cdn"
action = "allow"
host = "other.test"
port = {port}

[[rules]]
name = "evil"
action = "deny"
host = "evil.test"
"#
    )
}

/// `GET /admin/page` with `Host: host` over TLS with SNI `sni` (an address
/// sends none) on `tcp`, trusting `ca`: the status line, or the TLS error.
fn admin_over_tls(tcp: TcpStream, ca: &TestCa, sni: &str, host: &str) -> String {
    get_over_tls(tcp, ca, sni, host, "/admin/page")
}

/// `GET path` likewise.
fn get_over_tls(tcp: TcpStream, ca: &TestCa, sni: &str, host: &str, path: &str) -> String {
    tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let conn = ClientConnection::new(ca.client_config(&[]), name).unwrap();
    let mut tls = StreamOwned::new(conn, tcp);
    let sent =
        write!(tls, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").and_then(|()| tls.flush());
    if let Err(e) = sent {
        return format!("TLS error: {e}");
    }
    match read_response_head(&mut tls) {
        Ok(head) => head.raw.lines().next().unwrap_or_default().to_owned(),
        Err(e) => format!("TLS error: {e}"),
    }
}

#[test]
fn an_sni_naming_a_terminated_host_cannot_ride_a_raw_tunnel() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let cas = Cas::new();
        let (_front, port, seen) = front(Some(&cas.upstream));
        let config = format!(
            "{}\n{}",
            cas.tls_table(),
            rules(port, r#"tls = "terminate""#)
        );
        let (_dir, proxy) = proxy("fronting-sni", &config);
        let p = proxy.addr;
        let good = format!("good.test:{port}");
        let other = format!("other.test:{port}");

        // Through the terminating rule: 403.
        let status = admin_over_tls(connect_via_http(p, &good), &cas.proxy, "good.test", &good);
        assert!(status.starts_with("HTTP/1.1 403"), "{status}");

        // The tunnel's own name, raw: served (vetting relays it).
        let status = admin_over_tls(
            connect_via_http(p, &other),
            &cas.upstream,
            "other.test",
            &other,
        );
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        // No SNI (an address as the server name): the tunnel's own rule.
        let status = admin_over_tls(
            connect_via_http(p, &other),
            &cas.upstream,
            OTHER_ADDR,
            &other,
        );
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");

        // Fronting: CONNECT other.test, SNI and Host good.test. The
        // session is switched to good.test's own treatment: terminated
        // (the client sees the proxy's certificate), inspected, and
        // dialled to good.test's own address.
        let status = admin_over_tls(connect_via_http(p, &other), &cas.proxy, "good.test", &good);
        assert!(status.starts_with("HTTP/1.1 403"), "fronted: {status}");
        proxy.wait_for_line("the fronting switch", |l| {
            l.contains(&format!("fronting sni=good.test target=other.test:{port}"))
                && l.contains(&format!("rule good terminates and inspects good.test; treated as a tunnel to good.test:{port}"))
        });
        let ok = get_over_tls(
            connect_via_http(p, &other),
            &cas.proxy,
            "good.test",
            &good,
            "/ok",
        );
        assert!(ok.starts_with("HTTP/1.1 200"), "fronted /ok: {ok}");
        // And through SOCKS5.
        let s = connect_via_socks5(p, "other.test", port).expect("SOCKS5 CONNECT");
        let status = admin_over_tls(s, &cas.proxy, "good.test", &good);
        assert!(
            status.starts_with("HTTP/1.1 403"),
            "fronted by SOCKS5: {status}"
        );
        // A name a deny rule refuses: an access_denied alert.
        let status = admin_over_tls(
            connect_via_http(p, &other),
            &cas.upstream,
            "evil.test",
            &other,
        );
        assert!(status.contains("AccessDenied"), "{status}");
        proxy.wait_for_line("the fronting refusal", |l| {
            l.contains(&format!("fronting sni=evil.test target=other.test:{port}: evil.test is refused: denied by rule evil"))
        });

        let served = seen.lock().unwrap().clone();
        assert!(
            served
                .iter()
                .all(|l| !l.contains("/admin") || !l.contains("host=good.test")),
            "the front served good.test's admin page around the inspection: {served:?}"
        );
        // other.test's own two, at its address; the fronted /ok at good.test's.
        assert_eq!(served.len(), 3, "{served:?}");
        assert!(
            served.contains(&format!("GET /ok HTTP/1.1 host={good} at={GOOD_ADDR}")),
            "{served:?}"
        );
        assert!(
            served
                .iter()
                .all(|l| l.contains("/ok") || l.contains(&format!("at={OTHER_ADDR}"))),
            "{served:?}"
        );
    });
}

#[test]
fn a_host_naming_an_inspected_host_cannot_ride_a_raw_plaintext_tunnel() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let (_front, port, seen) = front(None);
        let (_dir, proxy) = proxy("fronting-host", &rules(port, ""));
        let p = proxy.addr;
        let other = format!("other.test:{port}");
        let good = format!("good.test:{port}");

        let mut s = connect_via_http(p, &good);
        let status = get_status_line(&mut s, &good, "/admin/page");
        assert!(status.starts_with("HTTP/1.1 403"), "{status}");

        let mut s = connect_via_http(p, &other);
        let status = get_status_line(&mut s, &other, "/admin/page");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");

        // Switched to good.test's inspection: the denied path is refused
        // (403, or 421 for a Host that does not name good.test:PORT).
        // A method the sniffer does not know (lower case: Go's server takes
        // any token) is read all the same.
        for (method, target, host) in [
            ("GET", "/admin/page".to_string(), good.clone()),
            ("GET", "/admin/page".to_string(), "GOOD.TEST.".to_string()),
            ("GET", format!("http://{good}/admin/page"), other.clone()),
            ("get", "/admin/page".to_string(), good.clone()),
        ] {
            let mut s = connect_via_http(p, &other);
            s.set_read_timeout(Some(PROMPTLY)).unwrap();
            write!(s, "{method} {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
            let (head, body) = read_response(&mut s);
            assert!(
                head.status == 403 || head.status == 421,
                "{target} Host {host}: {}{body}",
                head.raw
            );
        }
        proxy.wait_for_line("the fronting switch", |l| {
            l.contains(&format!(
                "fronting host=good.test target=other.test:{port}: rule good inspects good.test"
            ))
        });
        let mut s = connect_via_http(p, &other);
        let status = get_status_line(&mut s, &good, "/ok");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        // A name a deny rule refuses: 403, X-Proxy-Error: fronting.
        let mut s = connect_via_http(p, &other);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        write!(s, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 403, "{}{body}", head.raw);
        assert_eq!(
            head.header("X-Proxy-Error"),
            Some("fronting"),
            "{}",
            head.raw
        );
        assert!(
            body.contains("evil.test is refused: denied by rule evil"),
            "{body}"
        );

        let served = seen.lock().unwrap().clone();
        assert_eq!(served.len(), 2, "{served:?}");
        assert!(
            served[0].contains(&format!("host={other} at={OTHER_ADDR}")),
            "{served:?}"
        );
        assert_eq!(
            served[1],
            format!("GET /ok HTTP/1.1 host={good} at={GOOD_ADDR}")
        );
    });
}

/// A plaintext front that keeps each connection open, answering every
/// request on it (as origins do) with its request line and Host.
fn keep_alive_front() -> (Vec<Server>, u16, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let mut servers = Vec::new();
    let mut port = 0;
    for ip in [GOOD_ADDR, OTHER_ADDR] {
        let seen = seen.clone();
        let server = Server::start_on(format!("{ip}:{port}").parse().unwrap(), move |mut tcp| {
            while let Some(body) = take_request(&mut tcp, ip, &seen) {
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if tcp.write_all(resp.as_bytes()).is_err() {
                    return;
                }
            }
        });
        port = server.port();
        servers.push(server);
    }
    (servers, port, seen)
}

/// Not only the first request: a keep-alive or pipelined request on a raw
/// plaintext tunnel that names an inspected host is refused (421), and
/// never reaches the front; requests naming the first request's host go on.
#[test]
fn a_later_request_on_a_raw_plaintext_tunnel_cannot_front_either() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let (_front, port, seen) = keep_alive_front();
        let (_dir, proxy) = proxy("fronting-later", &rules(port, ""));
        let other = format!("other.test:{port}");
        let good = format!("good.test:{port}");

        // Keep-alive: the second request names good.test.
        let mut s = connect_via_http(proxy.addr, &other);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        write!(s, "GET /first HTTP/1.1\r\nHost: {other}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 200, "{}{body}", head.raw);
        write!(s, "GET /same HTTP/1.1\r\nHost: {other}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 200, "{}{body}", head.raw);
        write!(s, "GET /admin/page HTTP/1.1\r\nHost: {good}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 421, "{}{body}", head.raw);
        assert!(body.contains("good.test"), "{body}");

        // Pipelined, in one write: the same.
        let mut s = connect_via_http(proxy.addr, &other);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        write!(
            s,
            "GET /pipelined HTTP/1.1\r\nHost: {other}\r\n\r\n\
             GET /admin/page HTTP/1.1\r\nHost: {good}\r\n\r\n"
        )
        .unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 200, "{}{body}", head.raw);
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 421, "{}{body}", head.raw);

        let served = seen.lock().unwrap().clone();
        assert!(
            served.iter().all(|l| !l.contains("/admin/")),
            "the denied page reached the front: {served:?}"
        );
        assert_eq!(served.len(), 3, "{served:?}");
    });
}

/// A port no inspecting rule covers is not vetted: a name there that an
/// inspecting rule covers on another port is relayed, as before.
#[test]
fn ports_no_inspecting_rule_covers_are_not_vetted() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let (_front, port, seen) = front(None);
        let config = format!(
            r#"
[[rules]]
name = "elsewhere"
action = "allow"
host = "good.test"
port = 1
inspect = "http"

[[rules]]
name = "cdn"
action = "allow"
host = "other.test"
port = {port}
"#
        );
        let (_dir, proxy) = proxy("fronting-other-port", &config);
        let mut s = connect_via_http(proxy.addr, &format!("other.test:{port}"));
        let status = get_status_line(&mut s, "good.test", "/admin/page");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert!(proxy.log().iter().all(|l| !l.contains("fronting")));
    });
}

/// A ClientHello record for SNI `sni`, with an `encrypted_client_hello`
/// extension (type 0xfe0d) when `ech`.
fn client_hello(sni: &str, ech: bool) -> Vec<u8> {
    let mut exts = Vec::new();
    let mut name = vec![0];
    name.extend((sni.len() as u16).to_be_bytes());
    name.extend(sni.as_bytes());
    let mut list = (name.len() as u16).to_be_bytes().to_vec();
    list.extend(name);
    exts.extend([0, 0]);
    exts.extend((list.len() as u16).to_be_bytes());
    exts.extend(list);
    if ech {
        exts.extend([0xfe, 0x0d, 0x00, 0x04, 0, 1, 2, 3]);
    }
    let mut body = vec![0x03, 0x03];
    body.extend([7u8; 32]);
    body.extend([0, 0x00, 0x02, 0x13, 0x01, 0x01, 0x00]);
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut msg = vec![1];
    msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend(body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend((msg.len() as u16).to_be_bytes());
    rec.extend(msg);
    rec
}

/// The stated rule for ECH: on a port an inspecting rule covers, a
/// ClientHello hiding its name (even behind the tunnel's own SNI) is
/// refused with an `access_denied` alert; the front hears nothing.
#[test]
fn an_encrypted_client_hello_on_a_vetted_port_is_refused() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let (_front, port, seen) = front(None);
        let (_dir, proxy) = proxy("fronting-ech", &rules(port, ""));
        let other = format!("other.test:{port}");
        let mut s = connect_via_http(proxy.addr, &other);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        s.write_all(&client_hello("other.test", true)).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert_eq!(
            got,
            [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49],
            "an access_denied alert"
        );
        proxy.wait_for_line("the ECH refusal", |l| {
            l.contains(&format!("fronting ech sni=other.test target={other}"))
                && l.contains("turn ECH off in the client")
        });
        // The same hello without ECH is relayed: the (plaintext) front
        // reads it as far as a blank line and answers.
        let mut s = connect_via_http(proxy.addr, &other);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let mut hello = client_hello("other.test", false);
        hello.extend(b"\r\n\r\n");
        s.write_all(&hello).unwrap();
        let head = read_response_head(&mut s).expect("the front's answer");
        assert_eq!(head.status, 200, "{}", head.raw);
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert!(proxy
            .log()
            .iter()
            .all(|l| !l.contains("fronting sni=other.test")));
    });
}

/// A lone word on a vetted port could still become a request line, so it
/// is waited for; when nothing more comes the session ends at the
/// handshake timeout with a line that says why and names the way out.
#[test]
fn a_lone_word_on_a_vetted_port_ends_at_the_handshake_timeout_saying_why() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let (_front, port, seen) = keep_alive_front();
        let config = format!("[timeouts]\nhandshake = \"1s\"\n{}", rules(port, ""));
        let (_dir, proxy) = proxy("fronting-word", &config);
        let mut s = connect_via_http(proxy.addr, &format!("other.test:{port}"));
        s.write_all(b"hello").unwrap();
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
        proxy.wait_for_line("the vetting timeout", |l| {
            l.contains("the first 5 bytes are neither a TLS ClientHello nor a whole request line")
                && l.contains("send this protocol to another port, or inspect or terminate it")
        });
        assert!(seen.lock().unwrap().is_empty(), "nothing reached the front");
    });
}

/// A PROXY protocol v2 header the client writes before its request (its
/// signature starts with empty lines then a NUL): a front that takes one
/// (nginx `proxy_protocol`, HAProxy `accept-proxy`) routes by the `Host`
/// behind it, so the tunnel is refused, and the front hears nothing.
#[test]
fn a_proxy_protocol_header_cannot_hide_a_host_on_a_raw_tunnel() {
    in_netns(&[GOOD_ADDR, OTHER_ADDR], || {
        let (_front, port, seen) = front(None);
        let (_dir, proxy) = proxy("fronting-proxy-v2", &rules(port, ""));
        let other = format!("other.test:{port}");
        let mut s = connect_via_http(proxy.addr, &other);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let mut flight = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        flight.extend([
            0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0x57, 0, 80,
        ]);
        flight
            .extend(format!("GET /admin/page HTTP/1.1\r\nHost: good.test:{port}\r\n\r\n").bytes());
        s.write_all(&flight).unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 403, "{}{body}", head.raw);
        assert_eq!(
            head.header("X-Proxy-Error"),
            Some("fronting"),
            "{}",
            head.raw
        );
        assert!(body.contains("a PROXY protocol header"), "{body}");
        assert!(seen.lock().unwrap().is_empty());
    });
}
