//! Rule composition over real sockets (issue: "a broad allow switches off a
//! narrower rule's inspection", "a CIDR allow beats a name rule's
//! inspection"): an inspecting rule for a name keeps its request rules
//! however the client spells the destination, and audit mode lets through
//! what it would deny, saying so.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;

use support::*;

/// The origin answers every request with its method and path.
fn origin() -> Server {
    Server::start(|mut s| loop {
        let Ok(head) = read_until_blank_line(&mut s) else {
            return;
        };
        if head.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&head);
        let first = line.lines().next().unwrap_or_default().to_owned();
        let body = format!("{first}\n");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(resp.as_bytes()).is_err() {
            return;
        }
    })
}

/// `api`: the name `localhost` on the origin's port, inspected, with
/// `/v1/admin/**` denied; plus a plain allow for all of loopback on that port.
fn config(port: u16) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("composition");
    let path = dir.0.join("portcullis.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[rules]]
name = "api"
action = "allow"
host = "localhost"
port = {port}
inspect = "http"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", path = "/v1/admin/**" }},
]

[[rules]]
name = "loopback-web"
action = "allow"
cidr = "127.0.0.0/8"
port = {port}
"#
        ),
    )
    .unwrap();
    (dir, path)
}

/// One request on an open tunnel; the status line of the answer.
fn get(s: &mut TcpStream, host: &str, path: &str) -> String {
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let head = read_response_head(s).expect("an answer");
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    head.raw.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn every_spelling_of_an_inspected_name_is_inspected() {
    let up = origin();
    let port = up.port();
    let (_dir, cfg) = config(port);
    let proxy = ChildProxy::start(&["--config", cfg.to_str().unwrap()]);
    // The name itself: inspected although the CIDR allow matches too.
    let mut s = connect_via_http(proxy.addr, &format!("localhost:{port}"));
    let host = format!("localhost:{port}");
    assert!(get(&mut s, &host, "/v1/users").contains("200"));
    assert!(get(&mut s, &host, "/v1/admin/secret").contains("403"));
    // Its address, in every spelling, by CONNECT: still inspected under `api`
    // (the proxy resolved `localhost` at start and remembers its address).
    for literal in ["127.0.0.1", "[::ffff:127.0.0.1]", "0x7f000001", "127.1"] {
        let mut s = connect_via_http(proxy.addr, &format!("{literal}:{port}"));
        let host = if literal.starts_with('[') {
            format!("{literal}:{port}")
        } else {
            format!("127.0.0.1:{port}")
        };
        let status = get(&mut s, &host, "/v1/admin/secret");
        assert!(status.contains("403"), "{literal}: {status}");
    }
    // SOCKS5 by address (ATYP 1).
    let mut s = connect_via_socks5(proxy.addr, "127.0.0.1", port).expect("SOCKS5");
    assert!(get(&mut s, &format!("127.0.0.1:{port}"), "/v1/admin/secret").contains("403"));
    // The forward proxy by address.
    let mut s = TcpStream::connect(proxy.addr).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(
        s,
        "GET http://127.0.0.1:{port}/v1/admin/secret HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .unwrap();
    let head = read_response_head(&mut s).expect("an answer");
    assert_eq!(head.status, 403, "{}", head.raw);
    assert!(
        head.header("X-Proxy-Error")
            .is_some_and(|v| v.contains("api")),
        "{}",
        head.raw
    );
    let log = proxy.log().join("\n");
    assert!(!log.contains("GET /v1/admin/secret allowed"), "{log}");
}

#[test]
fn audit_mode_lets_through_and_says_would_deny() {
    let up = origin();
    let port = up.port();
    let (_dir, cfg) = config(port);
    let proxy = ChildProxy::start(&["--config", cfg.to_str().unwrap(), "--audit"]);
    // A request the rules deny goes through, logged would-deny.
    let mut s = connect_via_http(proxy.addr, &format!("localhost:{port}"));
    assert!(get(&mut s, &format!("localhost:{port}"), "/v1/admin/secret").contains("200"));
    // A connection no rule allows goes through, logged would-deny.
    let other = origin();
    let mut t = connect_via_http(proxy.addr, &other.target());
    assert!(get(&mut t, &other.target(), "/x").contains("200"));
    drop((s, t));
    wait_for("would-deny lines", PROMPTLY, || {
        let log = proxy.log().join("\n");
        log.lines().any(|l| {
            l.contains("event=request")
                && l.contains("decision=would-deny")
                && l.contains("path=/v1/admin/secret")
        }) && log
            .lines()
            .any(|l| l.contains("event=session") && l.contains("decision=would-deny"))
    });
}
