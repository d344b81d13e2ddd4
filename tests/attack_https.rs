//! Attacks on HTTPS inspection, the HTTP/1.1 exchange and the policy, each
//! a hole found by attacking the landed code with real clients. Every test
//! here failed on the code it was written against and passes on the fix
//! named in its comment.

mod support;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use support::tls::{https_origin, TestCa};
use support::*;

/// A proxy CA (signs the leaves clients see) and an upstream CA (signs the
/// origin's certificate; the proxy trusts it through `upstream_ca`).
struct Cas {
    proxy: TestCa,
    upstream: TestCa,
}

impl Cas {
    fn new() -> Cas {
        Cas {
            proxy: TestCa::new(),
            upstream: TestCa::new(),
        }
    }
}

/// `[tls]` with both CAs and one rule terminating TLS for `localhost` on
/// `port`, with `requests` (TOML, may be empty).
fn terminate_config(cas: &Cas, port: u16, requests: &str) -> String {
    format!(
        r#"
[tls]
ca_cert = "{}"
ca_key = "{}"
upstream_ca = ["{}"]

[[rules]]
name = "api"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
ports = [{port}]
tls = "terminate"
{requests}
"#,
        cas.proxy.cert_path.display(),
        cas.proxy.key_path.display(),
        cas.upstream.cert_path.display(),
    )
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

fn tls_client(ca: &TestCa, tcp: TcpStream, sni: &str) -> StreamOwned<ClientConnection, TcpStream> {
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let conn = ClientConnection::new(ca.client_config(&[b"http/1.1"]), name).unwrap();
    StreamOwned::new(conn, tcp)
}

/// Reads one response head and its `Content-Length` body.
fn response(s: &mut impl Read) -> (ResponseHead, String) {
    let head = read_response_head(s).expect("a response");
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("the body");
    (head, String::from_utf8_lossy(&body).into_owned())
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
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_for("the reload", PROMPTLY, || {
        proxy.log().iter().any(|l| l.contains("policy reloaded:"))
    });

    // A new tunnel follows the new rules...
    let mut fresh = tls_client(
        &cas.proxy,
        connect_via_http(proxy.addr, &target),
        "localhost",
    );
    fresh
        .write_all(format!("GET /admin/secret HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .unwrap();
    assert_eq!(response(&mut fresh).0.status, 403);

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
#[test]
fn a_tunnel_connecting_during_a_reload_takes_the_reloaded_treatment() {
    use socket2::{Domain, Socket, Type};
    // An upstream that accepts nothing yet, its accept queue already full.
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
    std::thread::sleep(Duration::from_millis(100));

    let dir = TempDir::new("attack-reload-connecting");
    let raw = format!(
        "[[rules]]\nname = \"api\"\naction = \"allow\"\ncidrs = [\"127.0.0.1/32\"]\nports = [{}]\n",
        addr.port()
    );
    let cfg = write_config(&dir, &raw);
    let proxy = start(&cfg, &["--connect-timeout", "30s"]);
    let mut client = TcpStream::connect(proxy.addr).unwrap();
    client.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(client, "CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    wait_for("the tunnel to be connecting", PROMPTLY, || {
        stat(&proxy.stats(), "connecting") == 1
    });

    write_config(&dir, &inspect_config(addr.port()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_for("the reload", PROMPTLY, || {
        proxy.log().iter().any(|l| l.contains("policy reloaded:"))
    });
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
        let (head, body) = response(&mut tunnel);
        assert_eq!(head.status, 403, "tunnel {path}: {}{body}", head.raw);
    }
    // A double slash the origin reads as a plain path still goes through.
    write!(tunnel, "GET //public HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let (head, body) = response(&mut tunnel);
    assert_eq!((head.status, body.as_str()), (200, "GET //public"));

    let mut fwd = TcpStream::connect(proxy.addr).unwrap();
    fwd.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(
        fwd,
        "GET http://{target}//x/admin/secret HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )
    .unwrap();
    let (head, body) = response(&mut fwd);
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
        let (head, body) = response(&mut s);
        assert_eq!(head.status, 400, "Host {host:?}: {}{body}", head.raw);
    }
    assert!(
        origin.requests().is_empty(),
        "the origin got {:?}",
        origin.requests()
    );
}
