//! Attacks on HTTPS inspection, the HTTP/1.1 exchange and the policy, each
//! a hole found by attacking the landed code with real clients. Every test
//! here failed on the code it was written against and passes on the fix
//! named in its comment.

use crate::support;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use support::tls::https_origin;
use support::*;

/// `[tls]` with both CAs and one rule terminating TLS for `localhost` on
/// `port`, with `requests` (TOML, may be empty).
fn terminate_config(cas: &Cas, port: u16, requests: &str) -> String {
    cas.terminate_config(port, requests)
}

/// A plaintext inspect rule for `localhost` (and its address) on `port`:
/// every path allowed but `/admin/**`.
fn inspect_config(port: u16) -> String {
    format!(
        r#"
[[rules]]
name = "api"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
ports = [{port}]
inspect = "http"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", path = "/admin/**" }},
]
"#
    )
}

fn write_config(dir: &TempDir, text: &str) -> PathBuf {
    let path = dir.0.join("portcullis.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(config: &Path, extra: &[&str]) -> ChildProxy {
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    ChildProxy::start(&args)
}

/// SIGHUP to the proxy; waits until it says it reloaded its policy.
fn reload(proxy: &ChildProxy) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_for("the reload", PROMPTLY, || {
        proxy.log().iter().any(|l| l.contains("policy reloaded:"))
    });
}

/// Slowloris inside TLS. `Securing` has the handshake timeout only until
/// the ClientHello is in; the rest of the TLS handshake runs inside
/// `Inspect`, which has no deadline but the response and idle timers (the
/// idle timeout is off by default). A client that sends its ClientHello and
/// then nothing holds two descriptors and an upstream connection for ever,
/// and it no longer counts as a pending handshake, so
/// `max_pending_handshakes_per_client` does not stop it either (the session
/// is counted `established`).
///
/// Fixed in session/inspect.rs: a terminated tunnel arms `timeouts.handshake`
/// (from entering Inspect) while the client's TLS handshake is unfinished
/// and closes with `handshake-timeout` when it fires. (The session still
/// counts as established, not a pending handshake: the timeout and the
/// per-client session limit bound what one client holds this way.)
#[test]
fn a_client_stalled_mid_tls_handshake_is_closed_by_the_handshake_timeout() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let dir = TempDir::new("attack-tls-stall");
    let cfg = write_config(&dir, &terminate_config(&cas, origin.port(), ""));
    let proxy = start(&cfg, &["--handshake-timeout", "1s"]);
    let mut s = connect_via_http(proxy.addr, &format!("localhost:{}", origin.port()));
    // A real ClientHello, then silence: never the client's Finished.
    let mut hello = Vec::new();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = ClientConnection::new(cas.proxy.client_config(&[b"http/1.1"]), name).unwrap();
    tls.write_tls(&mut hello).unwrap();
    s.write_all(&hello).unwrap();
    // The proxy answers with its flight, then must give up on us within the
    // handshake timeout (1 s); ten times that is the bound before failing.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the proxy still holds a client that stopped mid-handshake 10 s after \
                 a 1 s handshake timeout ({e}); stats: {:?}",
                proxy.stats()
            ),
        }
    }
    wait_for("the session to be gone", PROMPTLY, || {
        stat(&proxy.stats(), "open") == 0
    });
}

/// A reload does not reach a tunnel parked before its ClientHello.
/// `Session::on_reload` re-checks only `Connecting`, `Passthrough` and
/// `Inspect`; a terminating tunnel whose client has had its `200` but has
/// not sent its ClientHello is in `Securing`, which carries the request
/// rules it was allowed under into `Inspect` and keeps them for the
/// connection's life. A client can keep such a tunnel parked (up to the
/// handshake timeout, and start a new one as it expires) so that whenever
/// the policy tightens it still holds a connection under the old rules:
/// here `/admin/secret`, denied by the new policy, is served.
/// (`Connecting` has the same gap: on `Recheck::Keep` its plan keeps the
/// old inspection and termination, so a tunnel connecting during a reload
/// that now requires inspection still becomes a raw `Passthrough`.)
///
/// Fixed in session/: a reload re-checks `Securing` too and hands it the
/// new request rules (`Securing::reload`).
#[test]
fn a_tunnel_parked_before_its_client_hello_takes_the_reloaded_rules() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let dir = TempDir::new("attack-reload-securing");
    let cfg = write_config(&dir, &terminate_config(&cas, origin.port(), ""));
    let proxy = start(&cfg, &[]);
    let target = format!("localhost:{}", origin.port());
    // The 200 is in; the ClientHello waits.
    let parked = connect_via_http(proxy.addr, &target);

    let tighter = r#"requests = [
  { action = "allow", path = "/**" },
  { action = "deny", path = "/admin/**" },
]"#;
    write_config(&dir, &terminate_config(&cas, origin.port(), tighter));
    reload(&proxy);

    // A new tunnel follows the new rules...
    let mut fresh = tls_client(
        &cas.proxy,
        connect_via_http(proxy.addr, &target),
        "localhost",
    );
    fresh
        .write_all(format!("GET /admin/secret HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut fresh).0.status, 403);

    // ...and so must the parked one: refused (403), or closed by the reload.
    let mut c = tls_client(&cas.proxy, parked, "localhost");
    let sent =
        c.write_all(format!("GET /admin/secret HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes());
    let got = sent.and_then(|_| read_response_head(&mut c));
    if let Ok(head) = got {
        assert_ne!(
            head.status, 200,
            "a denied path was served on a tunnel opened before the reload: {}",
            head.raw
        );
    }
}

/// The same gap one state earlier, with no TLS: a tunnel still
/// `Connecting` when a reload makes its target inspected is re-checked
/// (`Recheck::Keep`, as it is not a raw tunnel yet) but nothing is changed,
/// so its plan, made under the old policy, becomes a raw `Passthrough` and
/// the newly denied `/admin/secret` is served. The upstream here leaves the
/// proxy's SYN unanswered for a moment (its accept queue is full), which is
/// all it takes to be connecting while the policy changes.
///
/// Fixed in session/: on `Keep`, `Connecting::reload` compares the new
/// treatment with the plan: inspection or termination added closes the
/// tunnel with `policy-reload`; otherwise the plan takes the new rules.
/// An upstream that accepts nothing yet, its accept queue already full:
/// a connect to it stays in flight (the listener, the connections that
/// fill its queue, and its address).
fn unanswering_upstream() -> (socket2::Socket, Vec<socket2::Socket>, std::net::SocketAddr) {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&addr.into()).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let mut queued = Vec::new();
    for _ in 0..3 {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&addr.into());
        queued.push(s);
    }
    // Backlog 0 holds one: once it waits there, the others' SYNs, and the
    // proxy's, go unanswered.
    let unconnected: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    wait_for("the upstream's accept queue to fill", PROMPTLY, || {
        tcp_row(addr, unconnected).is_some_and(|r| r.rx_queue >= 1)
    });
    (listener, queued, addr)
}

/// A proxy whose rule `api` allows `addr` raw, and a client's CONNECT to
/// it, connecting (see [`unanswering_upstream`]): the config's directory,
/// its text, the proxy and the client.
fn connecting_to(
    addr: std::net::SocketAddr,
    name: &str,
) -> (TempDir, String, ChildProxy, TcpStream) {
    let dir = TempDir::new(name);
    let allow = format!(
        "[[rules]]\nname = \"api\"\naction = \"allow\"\ncidrs = [\"127.0.0.1/32\"]\nports = [{}]\n",
        addr.port()
    );
    let cfg = write_config(&dir, &allow);
    let proxy = start(&cfg, &["--connect-timeout", "30s"]);
    let mut client = TcpStream::connect(proxy.addr).unwrap();
    client.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(client, "CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    wait_for("the tunnel to be connecting", PROMPTLY, || {
        stat(&proxy.stats(), "connecting") == 1
    });
    (dir, allow, proxy, client)
}

#[test]
fn a_tunnel_connecting_during_a_reload_takes_the_reloaded_treatment() {
    let (listener, _queued, addr) = unanswering_upstream();
    let (dir, _, proxy, mut client) = connecting_to(addr, "attack-reload-connecting");

    write_config(&dir, &inspect_config(addr.port()));
    reload(&proxy);
    // The plan was made under the old policy (raw); the new one inspects:
    // the tunnel closes with policy-reload before it relays a byte.
    wait_for("the connecting tunnel to close", PROMPTLY, || {
        stat(&proxy.stats(), "connecting") == 0
    });
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.contains("closed by policy reload") && l.contains("inspects it")),
        "{:#?}",
        proxy.log()
    );
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.contains("close=policy-reload")),
        "{:#?}",
        proxy.log()
    );
    // The client never got a 200 for a raw tunnel: just the close.
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    assert!(
        !String::from_utf8_lossy(&rest).contains(" 200 "),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    drop(listener);
}

/// A reload that refuses a tunnel still connecting tells its client why
/// (`403` with the reason), rather than closing a connection it has not
/// answered yet.
#[test]
fn a_tunnel_connecting_when_a_reload_refuses_it_hears_why() {
    let (listener, _queued, addr) = unanswering_upstream();
    let (dir, allow, proxy, mut client) = connecting_to(addr, "attack-reload-refuses-connecting");

    let deny = allow.replace("\"allow\"", "\"deny\"") + "reason = \"closed for maintenance\"\n";
    write_config(&dir, &deny);
    reload(&proxy);
    let mut answer = Vec::new();
    let _ = client.read_to_end(&mut answer);
    // The proxy lingers for the client's close after its answer.
    drop(client);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("closed for maintenance"), "{answer}");
    let closed = wait_until(PROMPTLY, || {
        proxy
            .log()
            .iter()
            .any(|l| l.contains("close=policy-reload") && l.contains("decision=deny"))
    });
    assert!(closed, "{:#?}", proxy.log());
    drop(listener);
}

/// `GET //x/admin/secret`: the policy collapsed the leading `//` and judged
/// `/x/admin/secret`, which the deny rule for `/admin/**` does not match,
/// and forwarded the request. But URL parsers read a target starting with
/// `//` as a network-path reference, `//host/path`: Node's
/// `new URL(req.url, base)` (what Node's own docs use to read a request's
/// path) gives the pathname `/admin/secret`, as does Python's
/// `urljoin`/`urlsplit`. An origin built that way serves its admin path.
/// Through a tunnel and through the forward proxy (which rewrites
/// `GET http://host//x/admin/secret` to that origin-form).
///
/// Fixed in `policy/path.rs`: a path starting with `//` is also judged as
/// the network-path reading (the authority dropped); a deny rule matching
/// either reading refuses, and allow rules must allow both.
#[test]
fn a_leading_double_slash_does_not_hide_a_denied_path() {
    let origin = Origin::echo_target();
    let dir = TempDir::new("attack-double-slash");
    let cfg = write_config(&dir, &inspect_config(origin.port()));
    let proxy = start(&cfg, &[]);
    let target = origin.target();

    let mut tunnel = connect_via_http(proxy.addr, &target);
    for path in [
        "//x/admin/secret",
        "//user@x/admin/",
        "//x/y/../admin/secret?q",
    ] {
        write!(tunnel, "GET {path} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut tunnel);
        assert_eq!(head.status, 403, "tunnel {path}: {}{body}", head.raw);
    }
    // A double slash the origin reads as a plain path still goes through.
    write!(tunnel, "GET //public HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut tunnel);
    assert_eq!((head.status, body.as_str()), (200, "GET //public"));

    let mut fwd = TcpStream::connect(proxy.addr).unwrap();
    fwd.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(
        fwd,
        "GET http://{target}//x/admin/secret HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )
    .unwrap();
    let (head, body) = read_response(&mut fwd);
    assert_eq!(head.status, 403, "forward proxy: {}{body}", head.raw);

    let leaked: Vec<String> = origin
        .requests()
        .into_iter()
        .map(|r| r.target)
        .filter(|t| t.contains("admin"))
        .collect();
    assert!(leaked.is_empty(), "the origin served {leaked:?}");
}

/// `Host: ｌｏｃａｌｈｏｓｔ` (fullwidth letters) or `Host: loc\u{AD}alhost`
/// (a soft hyphen): the Host check canonicalised the value with IDNA, which
/// maps both to `localhost`, so the request passed as naming the tunnel's
/// target, and went to the upstream with the raw bytes. No origin reads
/// them as `localhost` (a Host is ASCII, RFC 9110: international names go
/// as `xn--` A-labels): a virtual-host server routes the request to its
/// default site, another host than the one the policy checked.
///
/// Fixed in `protocol/http1/exchange/checks.rs`: a non-ASCII Host is 400.
#[test]
fn a_non_ascii_host_cannot_pass_for_the_target() {
    let origin = Origin::echo_target();
    let dir = TempDir::new("attack-host-idna");
    let cfg = write_config(&dir, &inspect_config(origin.port()));
    let proxy = start(&cfg, &[]);
    let target = format!("localhost:{}", origin.port());
    for host in ["ｌｏｃａｌｈｏｓｔ", "loc\u{AD}alhost"] {
        let mut s = connect_via_http(proxy.addr, &target);
        write!(s, "GET /x HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 400, "Host {host:?}: {}{body}", head.raw);
    }
    assert!(
        origin.requests().is_empty(),
        "the origin got {:?}",
        origin.requests()
    );
}

// ---------------------------------------------------------------------------
// audit-8: HTTPS inspection attacked on the binary. Each test below failed on
// the code the audit attacked (main at 59975f1) and names its fix.
// ---------------------------------------------------------------------------

/// A terminating rule for `localhost` on `port` denying `/admin/**`,
/// `/v1/@internal/**` and `/v1/users:delete`, plus `extra` TOML.
fn deny_config(cas: &Cas, port: u16, extra: &str) -> String {
    let requests = r#"inspect = "http"
requests = [
  { action = "allow", path = "/**" },
  { action = "deny", path = "/admin/**" },
  { action = "deny", path = "/v1/@internal/**" },
  { action = "deny", path = "/v1/users:delete" },
]"#;
    terminate_config(cas, port, requests) + extra
}

/// A TLS client to `localhost` through a CONNECT tunnel to `localhost:port`.
fn tls_tunnel(
    proxy: &ChildProxy,
    cas: &Cas,
    port: u16,
) -> StreamOwned<ClientConnection, TcpStream> {
    let tcp = connect_via_http(proxy.addr, &format!("localhost:{port}"));
    tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
    tls_client(&cas.proxy, tcp, "localhost")
}

/// Audit-8 H1: inside a tunnel to `localhost:P`, `Host: localhost` or
/// `GET https://localhost/x` passed as naming the target, since a port left
/// out matched any. An origin reads them as port 443 (or 80 for `http://`),
/// and obeys the URI's authority over `Host` (RFC 9112 3.2.2).
///
/// Fixed in `protocol/http1/exchange`: a port left out is the scheme's
/// default (443 inside terminated TLS or for `https://`, else 80): 421.
#[test]
fn a_name_without_a_port_is_the_default_port_not_the_tunnels() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let port = origin.port();
    let dir = TempDir::new("attack8-host-port");
    let cfg = write_config(&dir, &deny_config(&cas, port, ""));
    let proxy = start(&cfg, &[]);
    let mut c = tls_tunnel(&proxy, &cas, port);
    let own = format!("localhost:{port}");
    for (target, host, status) in [
        ("/ok".to_string(), "localhost", 421),
        ("/ok".to_string(), "localhost:443", 421),
        ("https://localhost/ok".to_string(), &own, 421),
        ("http://localhost/ok".to_string(), &own, 421),
        ("https://localhost:443/ok".to_string(), &own, 421),
        ("/ok".to_string(), &format!("other.test:{port}"), 421),
        (format!("https://other.test:{port}/ok"), &own, 421),
        // The tunnel's own target, any spelling: served, on the same connection.
        ("/ok".to_string(), &own, 200),
        (format!("https://LOCALHOST:{port}/ok"), &own, 200),
    ] {
        write!(c, "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut c);
        assert_eq!(
            head.status, status,
            "{target} Host {host}: {}{body}",
            head.raw
        );
        if status == 421 {
            assert_eq!(
                head.header("X-Proxy-Error"),
                Some("host-mismatch"),
                "{}",
                head.raw
            );
            assert!(body.contains(&format!("localhost:{port}")), "{body}");
        }
    }
    // A plaintext tunnel likewise: no port is port 80.
    let plain = Origin::echo_target();
    let dir = TempDir::new("attack8-host-port-plain");
    let cfg = write_config(&dir, &inspect_config(plain.port()));
    let proxy = start(&cfg, &[]);
    let mut s = connect_via_http(proxy.addr, &format!("localhost:{}", plain.port()));
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let own = format!("localhost:{}", plain.port());
    for (target, host, status) in [
        ("/ok", "localhost", 421),
        ("http://localhost/ok", &own, 421),
        ("/ok", &own, 200),
    ] {
        write!(s, "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(
            head.status, status,
            "plaintext {target} Host {host}: {}{body}",
            head.raw
        );
    }
    assert_eq!(
        plain.requests().len(),
        1,
        "only the request naming the target"
    );
    // The forward proxy has no tunnel: its URI is the target, a port left
    // out the scheme's (an `http://` URI without one goes to port 80).
    let mut f = TcpStream::connect(proxy.addr).unwrap();
    f.set_read_timeout(Some(PROMPTLY)).unwrap();
    let t = format!("localhost:{}", plain.port());
    write!(
        f,
        "GET http://{t}/fwd HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n"
    )
    .unwrap();
    let (head, body) = read_response(&mut f);
    assert_eq!(
        (head.status, body.as_str()),
        (200, "GET /fwd"),
        "{}",
        head.raw
    );
    assert_eq!(plain.requests()[1].header("host"), Some(t.as_str()));
}

/// Audit-8 H2 and the `%40` / `%3A` gap: deny rules inside terminated TLS
/// against every spelling an origin may read as the denied path: percent
/// escapes, and what IIS, .NET `OrdinalIgnoreCase` and best-fit mapping
/// fold (`ı`, `İ`, `ſ`, fullwidth `/`, trailing dots and spaces), which
/// reached the origin before.
///
/// Fixed in `policy/path.rs` (`folded`) and `policy/request.rs`: deny rules
/// also judge the folded reading.
#[test]
fn deny_rules_inside_tls_catch_encoded_and_folded_spellings() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let port = origin.port();
    let dir = TempDir::new("attack8-fold");
    let cfg = write_config(&dir, &deny_config(&cas, port, ""));
    let proxy = start(&cfg, &[]);
    let mut c = tls_tunnel(&proxy, &cas, port);
    let host = format!("localhost:{port}");
    for path in [
        "/v1/%40internal/x",
        "/v1/%40INTERNAL/x",
        "/v1/users%3Adelete",
        "/v1/users%3adelete",
        "/adm%C4%B1n/x",
        "/ADM%C4%B0N/x",
        "/v1/u%C5%BFers:delete",
        "/admin./x",
        "/admin%2e/x",
        "/admin%20/x",
        "/ADMIN%2E%2E/",
        "/admin%ef%bc%8fx",
    ] {
        write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut c);
        assert_eq!(head.status, 403, "{path}: {}{body}", head.raw);
        assert!(
            head.header("X-Proxy-Error")
                .is_some_and(|v| v.starts_with("denied; rule=api")),
            "{path}: {}",
            head.raw
        );
    }
    // Allowed paths still pass, on the same connection.
    for path in ["/v1/users:deleted", "/administrator/x", "/v1/%40public/x"] {
        write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut c);
        assert_eq!(head.status, 200, "{path}: {}{body}", head.raw);
    }
    let st = proxy.stats();
    assert_eq!(stat(&st, "requests_denied"), 12, "{st:?}");
}

/// Audit-8 H3: a bare LF was a line end to the proxy, which forwarded the
/// head byte for byte: `X: a\nContent-Length: 39` framed a body the proxy
/// skipped, and an origin that keeps a bare LF inside a value reads that
/// body as a request the proxy never judged.
///
/// Fixed in `protocol/http1/exchange/request.rs`: a head with a bare LF is
/// `400 malformed request`, and nothing is forwarded.
#[test]
fn a_bare_lf_in_a_request_head_is_refused() {
    let origin = Origin::echo_target();
    let dir = TempDir::new("attack8-bare-lf");
    let cfg = write_config(&dir, &inspect_config(origin.port()));
    let proxy = start(&cfg, &[]);
    let target = format!("localhost:{}", origin.port());
    let smuggled = format!("GET /admin/x HTTP/1.1\r\nHost: {target}\r\n\r\n");
    for head in [
        format!("GET /ok HTTP/1.1\r\nHost: {target}\nX: y\r\n\r\n"),
        format!(
            "POST /ok HTTP/1.1\r\nHost: {target}\r\nX: a\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        format!("GET /ok HTTP/1.1\nHost: {target}\n\n"),
    ] {
        let mut s = connect_via_http(proxy.addr, &target);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let (resp, body) = read_response(&mut s);
        assert_eq!(resp.status, 400, "{head:?}: {}{body}", resp.raw);
        assert!(body.contains("malformed request: bare LF"), "{body}");
        expect_closed(&mut s, "after the 400");
    }
    assert!(
        origin.requests().is_empty(),
        "forwarded: {:?}",
        origin.requests()
    );
}

/// The same on the way back: a bare LF in a response head was a line end to
/// the proxy, which forwarded the head byte for byte. A client that keeps
/// it inside a value does not see the `Content-Length` behind it and frames
/// this response, and the responses after it, otherwise.
///
/// Fixed in `protocol/http1/exchange/response.rs`: such a response is
/// `502`, and none of it reaches the client.
#[test]
fn a_bare_lf_in_a_response_head_is_502() {
    let origin = Origin::start(|r| match r.target.as_str() {
        "/lf" => Reply::Bytes(b"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 6\r\n\r\nsecret".to_vec()),
        _ => ok("fine"),
    });
    let dir = TempDir::new("attack-bare-lf-response");
    let cfg = write_config(&dir, &inspect_config(origin.port()));
    let proxy = start(&cfg, &[]);
    let target = format!("localhost:{}", origin.port());
    let mut s = connect_via_http(proxy.addr, &target);
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s.write_all(format!("GET /fine HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .unwrap();
    let (resp, body) = read_response(&mut s);
    assert_eq!((resp.status, body.as_str()), (200, "fine"), "{}", resp.raw);
    s.write_all(format!("GET /lf HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .unwrap();
    let (resp, body) = read_response(&mut s);
    assert_eq!(resp.status, 502, "{}{body}", resp.raw);
    assert!(body.contains("malformed response: bare LF"), "{body}");
    assert!(
        !resp.raw.contains("X: a") && !body.contains("secret"),
        "{}{body}",
        resp.raw
    );
    expect_closed(&mut s, "after the 502");
    assert_eq!(origin.requests().len(), 2);
}

/// Audit-8 H4: `mkdir -m 777` then `portcullis ca`: the CA was generated
/// into the world-writable directory and reused from it (anyone could have
/// swapped it), and a key file made 0644 was reused silently.
///
/// Fixed in `tls/ca.rs`: such a directory is refused; a key others may
/// read is tightened to 0600 with a warning.
#[test]
fn a_state_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("attack8-state");
    let state = dir.0.join("st2");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg = write_config(
        &dir,
        &format!(
            "[tls]\nstate_dir = \"{}\"\n\n[[rules]]\naction = \"allow\"\nhost = \"example.com\"\nport = 443\ntls = \"terminate\"\ninspect = \"http\"\n",
            state.display()
        ),
    );
    let ca = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["ca", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let o = ca();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{o:?}");
    assert!(
        err.contains("writable by others (mode 0777)") && err.contains("chmod 700"),
        "{err}"
    );
    assert!(!state.join("ca.pem").exists(), "nothing generated there");
    // `--check` and a start refuse it the same way.
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--config", cfg.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    assert!(
        String::from_utf8_lossy(&check.stderr).contains("writable by others"),
        "{check:?}"
    );

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = ca();
    assert!(o.status.success(), "{o:?}");
    let key = state.join("ca-key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = ca();
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("readable by group or others (mode 0644); tightened to 0600"),
        "{err}"
    );
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// PEM text of a DER item (`CERTIFICATE`, `PRIVATE KEY`).
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(line).unwrap());
        s.push('\n');
    }
    s + &format!("-----END {label}-----\n")
}

/// Audit-8 H5: `--check` said OK to CA files a start then refused (a key
/// that does not match the certificate; a certificate that is not a CA).
///
/// Fixed in `summary.rs` (`check_tls`) and `tls/ca.rs` (`check_config`):
/// `--check` loads the TLS files as a start would, and fails where it does.
#[test]
fn check_fails_where_a_start_would_on_tls_files() {
    let cas = Cas::new();
    let dir = TempDir::new("attack8-check");
    let (chain, key) = cas.upstream.leaf(&["localhost"], false);
    let leaf_cert = dir.0.join("leaf.pem");
    let leaf_key = dir.0.join("leaf-key.pem");
    std::fs::write(&leaf_cert, pem("CERTIFICATE", &chain[0])).unwrap();
    std::fs::write(&leaf_key, pem("PRIVATE KEY", key.secret_der())).unwrap();
    // A start that wrongly succeeds is stopped after a few seconds.
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
        cmd.args(["--terminate", "localhost:9441"]).args(args);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        wait_until(Duration::from_secs(10), || {
            child.try_wait().unwrap().is_some()
        });
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        child.wait_with_output().unwrap()
    };
    let p = |p: &Path| p.to_str().unwrap().to_owned();
    let (ca_cert, ca_key, other_key) = (
        p(&cas.proxy.cert_path),
        p(&cas.proxy.key_path),
        p(&cas.upstream.key_path),
    );
    let (leaf_cert, leaf_key) = (p(&leaf_cert), p(&leaf_key));
    for (args, why) in [
        (
            vec!["--ca-cert", &ca_cert, "--ca-key", &other_key],
            "does not match",
        ),
        (
            vec!["--ca-cert", &leaf_cert, "--ca-key", &leaf_key],
            "not a CA certificate",
        ),
        (
            vec!["--ca-cert", &ca_cert, "--ca-key", "/nonexistent/key.pem"],
            "cannot read",
        ),
        (
            vec![
                "--ca-cert",
                &ca_cert,
                "--ca-key",
                &ca_key,
                "--upstream-ca",
                "/nonexistent/up.pem",
            ],
            "/nonexistent/up.pem",
        ),
    ] {
        let mut check = args.clone();
        check.push("--check");
        let o = run(&check);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "--check {args:?}: {o:?}");
        assert!(err.contains(why), "--check {args:?}: {err}");
        // A start fails the same way.
        let mut start = args.clone();
        start.extend(["--listen", "127.0.0.1:0"]);
        let o = run(&start);
        assert!(!o.status.success(), "start {args:?}: {o:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(why),
            "start {args:?}: {o:?}"
        );
    }
    let o = run(&["--ca-cert", &ca_cert, "--ca-key", &ca_key, "--check"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).ends_with("OK\n"),
        "{o:?}"
    );
}

/// An upstream that accepts and never says a word.
fn silent_server() -> support::Server {
    support::Server::start(|mut s| {
        let _ = io::copy(&mut s, &mut io::sink());
    })
}

/// Audit-8 H6: the TLS handshake with an upstream that accepts and never
/// answers was bounded by the response timeout (60 s), as if it were a
/// slow answer, in a terminated tunnel and for a forward `GET https://`.
///
/// Fixed in `session/inspect.rs`: it is bounded by the connect timeout
/// (part of reaching the upstream); the answer stays `502 upstream-tls`.
#[test]
fn a_silent_upstream_tls_handshake_is_bounded_by_the_connect_timeout() {
    let cas = Cas::new();
    let silent = silent_server();
    let port = silent.port();
    let dir = TempDir::new("attack8-upstream-tls");
    let cfg = write_config(
        &dir,
        &format!(
            "[timeouts]\nconnect = \"1s\"\nresponse = \"60s\"\n{}",
            deny_config(&cas, port, "")
        ),
    );
    let proxy = start(&cfg, &[]);
    let started = std::time::Instant::now();
    let mut c = tls_tunnel(&proxy, &cas, port);
    c.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(c, "GET /x HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut c);
    let took = started.elapsed();
    assert_eq!(head.status, 502, "{}{body}", head.raw);
    assert!(
        head.header("X-Proxy-Error")
            .is_some_and(|v| v.contains("upstream-tls") && v.contains("did not complete in time")),
        "{}",
        head.raw
    );
    assert!(
        took < Duration::from_secs(8),
        "took {took:?} (connect timeout 1 s)"
    );
    // The forward proxy's own `GET https://` likewise.
    let started = std::time::Instant::now();
    let mut f = TcpStream::connect(proxy.addr).unwrap();
    f.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        f,
        "GET https://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .unwrap();
    let (head, body) = read_response(&mut f);
    let took = started.elapsed();
    assert_eq!(head.status, 502, "{}{body}", head.raw);
    assert!(head
        .header("X-Proxy-Error")
        .is_some_and(|v| v.contains("upstream-tls")));
    assert!(took < Duration::from_secs(8), "forward: took {took:?}");
}

/// Sends `start`, then `line` every `gap`, reading what comes back until
/// the connection closes or `deadline` passes; returns what came and how
/// long it took.
fn dribble(
    s: &mut (impl Read + Write),
    start: &str,
    line: &str,
    gap: Duration,
    deadline: Duration,
) -> (String, Duration) {
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut next = start;
    let mut writing = true;
    while started.elapsed() < deadline {
        // Once the proxy answers (or stops taking bytes), only read.
        if writing && got.is_empty() {
            writing = s
                .write_all(next.as_bytes())
                .and_then(|()| s.flush())
                .is_ok();
            next = line;
        }
        std::thread::sleep(gap);
        // What the proxy sent by now, without blocking for long.
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

/// Audit-8 H7: a request head sent a header line every 2 s inside an
/// inspected tunnel (plaintext, or inside TLS) was never timed out: the
/// handshake timeout covered only CONNECT and the TLS handshake, and idle
/// is off by default.
///
/// Fixed in `protocol/http1/exchange` (the head clock) and
/// `session/inspect.rs`: a head still incomplete `timeouts.handshake` after
/// its first byte gets `408` and the connection closes. Between requests
/// the idle rules apply unchanged: a keep-alive connection may sit idle.
#[test]
fn a_slow_request_head_inside_a_tunnel_gets_408() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let port = origin.port();
    let plain = Origin::echo_target();
    let dir = TempDir::new("attack8-slow-head");
    let mut text = deny_config(&cas, port, "");
    text += &inspect_config(plain.port()).replace("name = \"api\"", "name = \"plain\"");
    let cfg = write_config(&dir, &text);
    let proxy = start(&cfg, &["--handshake-timeout", "1s"]);
    let gap = Duration::from_millis(300);
    let check = |what: &str, got: &str, took: Duration| {
        assert!(
            got.starts_with("HTTP/1.1 408 "),
            "{what}: {got:?} after {took:?}"
        );
        assert!(
            got.contains("X-Proxy-Error: request-timeout"),
            "{what}: {got}"
        );
        assert!(
            took < Duration::from_secs(6),
            "{what}: held {took:?} (1 s timeout)"
        );
    };

    // Plaintext inspection.
    let host = format!("localhost:{}", plain.port());
    let mut s = connect_via_http(proxy.addr, &host);
    // A request first: the slow head is the connection's second. (That an
    // idle pause between requests is not a slow head is the simulator's
    // `an_idle_keep_alive_session_has_no_deadline_and_is_served_later`.)
    write!(s, "GET /first HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    assert_eq!(read_response(&mut s).0.status, 200);
    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let slow = format!("GET /slow HTTP/1.1\r\nHost: {host}\r\n");
    let (got, took) = dribble(&mut s, &slow, "X-A: b\r\n", gap, Duration::from_secs(15));
    check("plaintext", &got, took);

    // Inside terminated TLS.
    let mut c = tls_tunnel(&proxy, &cas, port);
    write!(c, "GET /first HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut c).0.status, 200);
    c.get_ref()
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let slow = format!("GET /slow HTTP/1.1\r\nHost: localhost:{port}\r\n");
    let (got, took) = dribble(&mut c, &slow, "X-A: b\r\n", gap, Duration::from_secs(15));
    check("inside TLS", &got, took);
    wait_for("the sessions to close", PROMPTLY, || {
        stat(&proxy.stats(), "open") == 0
    });
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.contains("event=session") && l.contains("close=handshake-timeout")),
        "{:?}",
        proxy.log()
    );
}

/// Audit-8 H8: the upstream's 101 switched any `Upgrade: websocket` request
/// to raw bytes: a POST with a body, HTTP/1.0, no `Sec-WebSocket-Key`.
/// After it, pipelined requests (`GET /admin/x`) went raw to the origin,
/// never judged.
///
/// Fixed in `protocol/http1/exchange/checks.rs` (`upgrade_shape`): such a
/// request is `400`, the connection closed, nothing forwarded.
#[test]
fn an_upgrade_that_is_not_a_websocket_handshake_is_refused() {
    let origin = Origin::start(|r| {
        if r.header("upgrade").is_some() {
            Reply::Bytes(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                    .to_vec(),
            )
        } else {
            ok(&format!("{} {}", r.method, r.target))
        }
    });
    let dir = TempDir::new("attack8-ws-shape");
    let cfg = write_config(&dir, &inspect_config(origin.port()));
    let proxy = start(&cfg, &[]);
    let host = format!("localhost:{}", origin.port());
    let ws = "Upgrade: websocket\r\nConnection: Upgrade\r\n";
    let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let behind = format!("GET /admin/x HTTP/1.1\r\nHost: {host}\r\n\r\n");
    for (request, why) in [
        (
            format!("POST /ws HTTP/1.1\r\nHost: {host}\r\n{ws}{key}Content-Length: 3\r\n\r\nabc"),
            "must be a GET",
        ),
        (
            format!("GET /ws HTTP/1.0\r\nHost: {host}\r\n{ws}{key}\r\n"),
            "HTTP/1.0",
        ),
        (
            format!("GET /ws HTTP/1.1\r\nHost: {host}\r\n{ws}\r\n"),
            "Sec-WebSocket-Key",
        ),
    ] {
        let mut s = connect_via_http(proxy.addr, &host);
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        s.write_all((request.clone() + &behind).as_bytes()).unwrap();
        let (head, body) = read_response(&mut s);
        assert_eq!(head.status, 400, "{request:?}: {}{body}", head.raw);
        assert!(body.contains(why), "{request:?}: {body}");
        expect_closed(&mut s, "after the 400");
    }
    assert!(
        origin.requests().is_empty(),
        "forwarded: {:?}",
        origin.requests()
    );
    // A real handshake still upgrades.
    let mut s = connect_via_http(proxy.addr, &host);
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(s, "GET /ws HTTP/1.1\r\nHost: {host}\r\n{ws}{key}\r\n").unwrap();
    assert_eq!(read_response_head(&mut s).unwrap().status, 101);
}

#[test]
fn a_state_directory_another_user_owns_is_refused_at_start() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot chown a directory to another user; skipped");
        return;
    }
    let dir = TempDir::new("state-owner");
    let state = dir.0.join("st");
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let cfg = write_config(
        &dir,
        &format!(
            "[tls]\nstate_dir = \"{}\"\n\n[[rules]]\naction = \"allow\"\nhost = \"example.com\"\nport = 443\ntls = \"terminate\"\ninspect = \"http\"\n",
            state.display()
        ),
    );
    // A start, not just `ca`: the proxy refuses before listening.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{o:?}");
    assert!(
        err.contains("belongs to uid 65534") && err.contains("state_dir"),
        "the reason and the fix: {err}"
    );
    assert!(!state.join("ca.pem").exists(), "nothing generated there");
}
