//! HTTPS inspection end to end: the binary terminates TLS with a leaf its
//! CA minted, applies request rules inside, verifies the upstream, refuses
//! domain fronting and protocol mismatches, and relays a WebSocket inside
//! TLS byte-exact after the upgrade. Real clients: curl, rustls, python.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use support::tls::{https_origin, https_origin_with, OriginCert, TestCa};
use support::*;

/// A config file: `[tls]` with both CAs and one terminating rule for
/// `localhost` on `port` (denying `/admin/**`), plus `extra` TOML.
fn config(cas: &Cas, port: u16, extra: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new("tls-config");
    let path = dir.0.join("portcullis.toml");
    let rest = format!(
        r#"inspect = "http"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", path = "/admin/**" }},
]
{extra}"#
    );
    let text = cas.terminate_config(port, &rest);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn start(path: &std::path::Path) -> ChildProxy {
    ChildProxy::start(&["--config", path.to_str().unwrap()])
}

fn curl_https(proxy: &ChildProxy, via: &str, ca: &TestCa, url: &str) -> std::process::Output {
    let proxy_url = format!("{via}://{}", proxy.addr);
    curl(&[
        "-sS",
        "-i",
        "--cacert",
        ca.cert_path.to_str().unwrap(),
        "-p",
        "-x",
        &proxy_url,
        url,
    ])
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn curl_through_a_terminated_tunnel_connect_and_socks5() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    for via in ["http", "socks5h"] {
        let url = format!("https://localhost:{}/v1/hello?x=1", origin.port());
        let o = curl_https(&proxy, via, &cas.proxy, &url);
        let out = text(&o);
        assert!(o.status.success(), "{via}: {out}");
        assert!(out.contains("HTTP/1.1 200"), "{via}: {out}");
        assert!(out.contains("GET /v1/hello?x=1"), "{via}: {out}");
        // The proxy's own TLS to the origin sent the target's name as SNI.
        assert!(out.contains("X-Origin-Sni: localhost"), "{via}: {out}");
        assert!(out.contains("X-Origin-Alpn: http/1.1"), "{via}: {out}");
    }
    // Inside the TLS the request rules apply: a denied path gets a 403 the
    // client can read.
    let url = format!("https://localhost:{}/admin/users", origin.port());
    let o = curl_https(&proxy, "http", &cas.proxy, &url);
    let out = text(&o);
    assert!(out.contains("HTTP/1.1 403"), "{out}");
    assert!(out.contains("X-Proxy-Error: denied; rule=api"), "{out}");
    // Counted once the call that wrote the 403 returns: the client may have
    // read it (and SIGUSR1's stats line been printed) a moment before.
    let mut st = proxy.stats();
    wait_for("the denied request counted", PROMPTLY, || {
        st = proxy.stats();
        stat(&st, "requests_denied") >= 1
    });
    assert_eq!(stat(&st, "requests_denied"), 1, "{st:?}");
    assert!(stat(&st, "requests_allowed") >= 2, "{st:?}");
    let log = proxy.log().join("\n");
    assert!(
        log.lines().any(|l| l.contains("event=request")
            && l.contains("decision=deny")
            && l.contains("path=/admin/users")),
        "{log}"
    );
}

/// A client that does not trust the proxy's CA (the user skipped
/// `portcullis ca`): curl fails with its (60), and the access line says why
/// and where the fix is, not a bare client-gone.
#[test]
fn a_client_that_rejects_the_proxy_ca_is_logged_with_the_fix() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let url = format!("https://localhost:{}/v1/hello", origin.port());
    // Trusting the origin's CA, not the proxy's.
    let o = curl_https(&proxy, "http", &cas.upstream, &url);
    assert!(!o.status.success(), "{}", text(&o));
    wait_for("the access line with the reason", PROMPTLY, || {
        proxy.log().iter().any(|l| {
            l.contains("event=session")
                && l.contains("close=client-gone")
                && l.contains("client TLS: peer rejected our certificate")
                && l.contains("portcullis ca")
        })
    });
}

#[test]
fn a_bad_upstream_certificate_is_a_502_with_the_reason() {
    for (which, reason) in [
        (OriginCert::Expired, "certificate has expired"),
        (OriginCert::WrongName, "name mismatch"),
        (OriginCert::SelfSigned, "unknown issuer"),
    ] {
        let cas = Cas::new();
        let origin = https_origin_with(&cas.upstream, which);
        let (_dir, cfg) = config(&cas, origin.port(), "");
        let proxy = start(&cfg);
        let url = format!("https://localhost:{}/x", origin.port());
        let o = curl_https(&proxy, "http", &cas.proxy, &url);
        let out = text(&o);
        assert!(out.contains("HTTP/1.1 502"), "{which:?}: {out}");
        assert!(
            out.contains("X-Proxy-Error: upstream-tls;") && out.contains(reason),
            "{which:?}: {out}"
        );
    }
}

/// CONNECT to `target` through `proxy`; returns the tunnel after its 200.
fn tunnel(proxy: &ChildProxy, target: &str) -> TcpStream {
    connect_via_http(proxy.addr, target)
}

/// Sends a request for `host` on `c`, whose handshake must fail: the error.
#[track_caller]
fn handshake_error(
    c: &mut StreamOwned<ClientConnection, TcpStream>,
    host: &str,
    what: &str,
) -> std::io::Error {
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
    c.write_all(request.as_bytes())
        .and_then(|_| c.flush())
        .and_then(|_| c.read(&mut [0u8; 64]).map(|_| ()))
        .expect_err(what)
}

/// Waits for the access line refusing the SNI `fronted.example`.
fn wait_for_fronted_refusal(proxy: &ChildProxy) {
    wait_for("the refusal in the access line", PROMPTLY, || {
        proxy.log().iter().any(|l| {
            l.contains("event=session")
                && l.contains("close=denied")
                && l.contains("fronted.example")
        })
    });
}

#[test]
fn an_sni_that_does_not_match_the_target_is_refused() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let tcp = tunnel(&proxy, &format!("localhost:{}", origin.port()));
    let mut c = tls_client(&cas.proxy, tcp, "fronted.example");
    let err = handshake_error(&mut c, "fronted.example", "the handshake must fail");
    assert!(err.to_string().to_lowercase().contains("alert"), "{err}");
    // The TCP connect happens before the hello (the origin's accept thread
    // may count it a moment later).
    wait_for("the origin's accept", PROMPTLY, || origin.accepted() == 1);
    drop(c);
    wait_for_fronted_refusal(&proxy);
}

#[test]
fn plaintext_http_on_a_terminating_rule_is_refused_clearly() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let mut s = tunnel(&proxy, &format!("localhost:{}", origin.port()));
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let head = read_response_head(&mut s).expect("an HTTP answer");
    assert_eq!(head.status, 400, "{}", head.raw);
    assert_eq!(
        head.header("X-Proxy-Error"),
        Some("tls-required"),
        "{}",
        head.raw
    );
    assert!(head.raw.contains("Content-Length"), "{}", head.raw);
}

#[test]
fn tls_on_a_plaintext_inspect_rule_is_refused_clearly() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let proxy = ChildProxy::start(&["--inspect", &format!("127.0.0.1:{}", origin.port())]);
    let tcp = tunnel(&proxy, &format!("127.0.0.1:{}", origin.port()));
    let mut c = tls_client(&cas.upstream, tcp, "localhost");
    let err = handshake_error(&mut c, "localhost", "the handshake must fail");
    assert!(err.to_string().to_lowercase().contains("alert"), "{err}");
    drop(c);
    wait_for("the reason in the access line", PROMPTLY, || {
        proxy.log().iter().any(|l| {
            l.contains("event=session")
                && l.contains("TLS on a plaintext HTTP inspection rule")
                && l.contains("--terminate instead of --inspect")
        })
    });
}

/// `--terminate NAME:PORT` where NAME resolves to loopback: the refusal's
/// fix keeps the rule's kind, as a flag and as the file's keys (a file rule
/// without inspect and tls would relay the tunnel blind).
#[test]
fn a_terminate_rule_into_a_special_range_is_refused_with_its_file_form() {
    let proxy = ChildProxy::start(&["--terminate", "localhost:9"]);
    let (s, head) = http_connect(proxy.addr, "localhost:9", &[]).expect("CONNECT");
    drop(s); // the access line is written at close
    assert_eq!(head.status, 403, "{}", head.raw);
    assert!(
        head.raw.contains("fix=--terminate localhost:9@"),
        "{}",
        head.raw
    );
    wait_for("the refusal in the access line", PROMPTLY, || {
        proxy.log().iter().any(|l| {
            l.contains("close=denied")
                && l.contains(
                    r#"match = \"both\", ports = [9], inspect = \"http\", tls = \"terminate\")"#,
                )
        })
    });
}

/// A user who never runs `--check` hears at start-up that `--inspect HOST:443`
/// will refuse every HTTPS client, and which flag to use instead.
#[test]
fn a_plaintext_inspect_rule_on_443_is_warned_about_at_start() {
    let proxy = ChildProxy::start(&["--inspect", "pypi.test:443"]);
    wait_for("the warning at start-up", PROMPTLY, || {
        proxy.log().iter().any(|l| {
            l.contains("level=warn")
                && l.contains("--inspect pypi.test:443")
                && l.contains("inspects plaintext HTTP on port 443")
                && l.contains("(--terminate)")
        })
    });
}

#[test]
fn portcullis_ca_generates_once_and_says_how_to_trust_it() {
    let dir = TempDir::new("ca-state");
    let cfg = dir.0.join("portcullis.toml");
    std::fs::write(
        &cfg,
        format!(
            "[tls]\nstate_dir = \"{}\"\n\n[[rules]]\naction = \"allow\"\nhost = \"example.com\"\nport = 443\ntls = \"terminate\"\ninspect = \"http\"\n",
            dir.0.join("state").display()
        ),
    )
    .unwrap();
    let run = || {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["ca", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let first = run();
    for var in [
        "curl --cacert",
        "SSL_CERT_FILE",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
    ] {
        assert!(first.contains(var), "{var} missing: {first}");
    }
    let key = std::fs::read_dir(dir.0.join("state"))
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().contains("key"))
        .expect("a key file");
    use std::os::unix::fs::PermissionsExt;
    let mode = key.metadata().unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{:?}", key.path());
    let pem = |out: &str| {
        let path = out
            .lines()
            .find_map(|l| l.strip_prefix("portcullis CA certificate: "))
            .expect("the certificate path")
            .to_owned();
        std::fs::read_to_string(path).unwrap()
    };
    assert_eq!(
        pem(&first),
        pem(&run()),
        "the CA is reused, not regenerated"
    );
}

/// A WebSocket inside terminated TLS: 1 GiB each way after the 101,
/// byte-exact, with the client stalling its reads at times (backpressure
/// across both TLS layers).
#[test]
fn websocket_inside_terminated_tls_moves_a_gib_each_way() {
    use tungstenite::{Message, WebSocket};
    const TOTAL: usize = 1 << 30;
    const MSG: usize = 4 << 20;
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let target = format!("localhost:{}", origin.port());
    let tcp = tunnel(&proxy, &target);
    tcp.set_read_timeout(Some(BULK)).unwrap();
    let tls = tls_client(&cas.proxy, tcp, "localhost");
    let url = format!("wss://{target}/ws");
    let (mut ws, resp): (WebSocket<_>, _) =
        tungstenite::client::client_with_config(url.as_str(), tls, Some(ws_config()))
            .expect("the WebSocket handshake through the proxy");
    assert_eq!(resp.status(), 101);
    let mut gen = DataGen::new(0x5eed_cafe);
    let mut sent = Verifier::new(0x5eed_cafe);
    let mut back = 0usize;
    let mut i = 0;
    while back < TOTAL {
        let chunk = gen.bytes(MSG);
        ws.send(Message::Binary(chunk.into())).expect("send");
        if i % 16 == 7 {
            // The reader stalls: the origin's echo must wait, not pile up.
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let msg = ws.read().expect("echo");
        let data = msg.into_data();
        sent.check(&data);
        back += data.len();
        i += 1;
    }
    assert_eq!(back, TOTAL);
    let _ = ws.close(None);
    let st = proxy.stats();
    assert_eq!(stat(&st, "upgrades"), 1, "{st:?}");
    assert!(stat(&st, "bytes_up") >= TOTAL as u64, "{st:?}");
    assert!(stat(&st, "bytes_down") >= TOTAL as u64, "{st:?}");
}

/// python3 `requests` (importing `modules`) GETs `url` through `proxy_url`
/// trusting `ca`: its output and what it printed, once it succeeded.
/// `None` (with a NOTE naming `package`) where those modules are missing,
/// unless in CI, which installs them.
fn python_get(
    url: &str,
    proxy_url: &str,
    ca: &TestCa,
    modules: &str,
    package: &str,
) -> Option<(std::process::Output, String)> {
    let script = format!(
        r#"
import sys
try:
    import {modules}
except ImportError:
    print("NO-REQUESTS"); sys.exit(0)
r = requests.get(sys.argv[1], proxies={{"https": sys.argv[2]}}, verify=sys.argv[3], timeout=20)
print(r.status_code, r.text.strip())
"#
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script, url, proxy_url])
        .arg(&ca.cert_path)
        .output()
        .expect("python3");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    if out.contains("NO-REQUESTS") && !strict() {
        eprintln!(
            "NOTE: python3 {package} is not installed here; scripts/test-deps.sh installs it"
        );
        return None;
    }
    assert!(o.status.success(), "{o:?}");
    Some((o, out))
}

#[test]
fn python_requests_with_the_ca_bundle_goes_through() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let url = format!("https://localhost:{}/py", origin.port());
    let proxy_url = format!("http://{}", proxy.addr);
    let Some((o, out)) = python_get(&url, &proxy_url, &cas.proxy, "requests", "requests") else {
        return;
    };
    assert_eq!(out.trim(), "200 GET /py", "{o:?}");
}

/// A client that pipelines requests which are refused and never reads the
/// answers: the proxy stops reading it instead of queueing answers, so its
/// memory stays flat (through a tunnel and through the forward proxy).
#[test]
fn pipelined_denied_requests_do_not_grow_the_proxy() {
    let up = echo_server();
    let dir = TempDir::new("deny-all");
    let cfg = dir.0.join("portcullis.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[rules]]\nname = \"deny-admin\"\naction = \"allow\"\ncidr = \"127.0.0.1/32\"\nport = {}\ninspect = \"http\"\nrequests = [ {{ action = \"allow\", path = \"/ok\" }} ]\n",
            up.port()
        ),
    )
    .unwrap();
    let proxy = ChildProxy::start(&["--config", cfg.to_str().unwrap()]);
    let base = rss_kib(proxy.pid());
    let target = up.target();
    for forward in [false, true] {
        let (mut s, one) = if forward {
            let s = TcpStream::connect(proxy.addr).unwrap();
            let one = format!("GET http://{target}/admin/x HTTP/1.1\r\nHost: {target}\r\n\r\n");
            (s, one)
        } else {
            let one = format!("GET /admin/x HTTP/1.1\r\nHost: {target}\r\n\r\n");
            (tunnel(&proxy, &target), one)
        };
        let batch = one.repeat(1000);
        s.set_write_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut written = 0;
        while written < 10_000_000 {
            match s.write(batch.as_bytes()) {
                Ok(n) => written += n,
                // The proxy stopped reading: backpressure, as it should.
                Err(_) => break,
            }
        }
        assert_stopped_reading(&proxy, base, written, &format!("forward={forward}: "));
        // The answers are all there, in order, for a client that reads.
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).expect("answers");
        assert!(buf[..n].starts_with(b"HTTP/1.1 403"), "forward={forward}");
    }
}

/// After a client wrote `written` bytes of denied requests, reading none of
/// the answers, until a write timed out (the proxy took nothing for its
/// 2 s: that is the quiet interval its memory is judged after): the
/// proxy's RSS grew less than 8 MiB from `base` (KiB), and it stopped
/// reading before 10 MB. `label` starts the failure messages.
#[track_caller]
fn assert_stopped_reading(proxy: &ChildProxy, base: u64, written: usize, label: &str) {
    let grown = rss_kib(proxy.pid()).saturating_sub(base);
    assert!(
        grown < 8 * 1024,
        "{label}RSS grew {grown} KiB after {written} bytes of requests"
    );
    assert!(
        written < 10_000_000,
        "{label}the proxy read all {written} bytes without answering"
    );
}

/// The proxy's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// `GET https://host/path` sent to the proxy as a plain HTTP request (clients
/// that do not tunnel): the proxy speaks TLS to the origin itself, verifies
/// it, and applies the same rules; a bad certificate is a 502 with the reason.
#[test]
fn absolute_form_https_is_originated_by_the_proxy() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let bad = https_origin_with(&cas.upstream, OriginCert::Expired);
    let dir = TempDir::new("forward-https");
    let cfg = dir.0.join("portcullis.toml");
    std::fs::write(
        &cfg,
        format!(
            "[tls]\nupstream_ca = [\"{}\"]\n\n[[rules]]\nname = \"local\"\naction = \"allow\"\ncidr = \"127.0.0.1/32\"\nports = [{}, {}]\ninspect = \"http\"\nrequests = [ {{ action = \"allow\", path = \"/**\" }}, {{ action = \"deny\", path = \"/admin/**\" }} ]\n",
            cas.upstream.cert_path.display(),
            origin.port(),
            bad.port()
        ),
    )
    .unwrap();
    let proxy = ChildProxy::start(&["--config", cfg.to_str().unwrap()]);
    let ask = |port: u16, path: &str| {
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        write!(
            s,
            "GET https://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )
        .unwrap();
        read_response(&mut s)
    };
    let (head, body) = ask(origin.port(), "/fwd?q=1");
    assert_eq!(head.status, 200, "{}", head.raw);
    assert_eq!(body, "GET /fwd?q=1\n");
    // An address target: no SNI, verified against the certificate's IP SAN.
    assert_eq!(head.header("X-Origin-Sni"), Some("-"), "{}", head.raw);
    assert!(head.header("Via").is_some_and(|v| v.contains("portcullis")));
    let (head, _) = ask(origin.port(), "/admin/x");
    assert_eq!(head.status, 403, "{}", head.raw);
    let (head, _) = ask(bad.port(), "/x");
    assert_eq!(head.status, 502, "{}", head.raw);
    assert!(
        head.header("X-Proxy-Error")
            .is_some_and(|v| v.contains("upstream-tls") && v.contains("expired")),
        "{}",
        head.raw
    );
}

// ---------------------------------------------------------------------------
// audit-8 GAPS: what the issue's test list names, proven with real clients.
// ---------------------------------------------------------------------------

/// The h2c upgrade request curl and browsers send.
fn h2c_request(host: &str) -> String {
    format!(
        "GET /h2c HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
    )
}

/// `Upgrade: h2c` would turn an inspected connection into unchecked
/// HTTP/2: refused with 403 in a plaintext inspected tunnel (curl's own
/// `--http2` upgrade included) and inside terminated TLS, and the
/// connection goes on as HTTP/1.1.
#[test]
fn upgrade_h2c_is_refused_in_plaintext_and_inside_tls() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let plain = Origin::echo_target();
    let (_dir, cfg) = config(
        &cas,
        origin.port(),
        &format!(
            "[[rules]]\nname = \"plain\"\naction = \"allow\"\nhosts = [\"localhost\"]\ncidrs = [\"127.0.0.1/32\"]\nports = [{}]\ninspect = \"http\"\n",
            plain.port()
        ),
    );
    let proxy = start(&cfg);
    // curl asks for h2c itself with --http2 on an http:// URL.
    let url = format!("http://localhost:{}/curl", plain.port());
    let proxy_url = format!("http://{}", proxy.addr);
    let o = curl(&["-sS", "-i", "--http2", "-p", "-x", &proxy_url, &url]);
    let out = text(&o);
    assert!(out.contains("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains("X-Proxy-Error: upgrade-not-allowed; token=h2c"),
        "{out}"
    );

    let host = format!("localhost:{}", plain.port());
    let mut s = tunnel(&proxy, &host);
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    s.write_all(h2c_request(&host).as_bytes()).unwrap();
    let (head, _) = read_response(&mut s);
    assert_eq!(head.status, 403, "{}", head.raw);
    write!(s, "GET /after HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut s);
    assert_eq!((head.status, body.as_str()), (200, "GET /after"));
    let seen: Vec<String> = plain.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(seen, ["/after"], "no h2c request reached the origin");

    let host = format!("localhost:{}", origin.port());
    let mut c = tls_client(&cas.proxy, tunnel(&proxy, &host), "localhost");
    c.write_all(h2c_request(&host).as_bytes()).unwrap();
    let (head, _) = read_response(&mut c);
    assert_eq!(head.status, 403, "{}", head.raw);
    assert_eq!(
        head.header("X-Proxy-Error"),
        Some("upgrade-not-allowed; token=h2c"),
        "{}",
        head.raw
    );
    write!(c, "GET /after HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut c);
    assert_eq!((head.status, body.as_str()), (200, "GET /after\n"));
}

/// The pipelined-denied memory case inside terminated TLS: a client that
/// pipelines denied requests and never reads the answers is not read any
/// more once its answers back up (through both TLS layers), so the proxy's
/// memory stays flat.
#[test]
fn pipelined_denied_requests_inside_tls_do_not_grow_the_proxy() {
    use rustls::ClientConnection;
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let base = rss_kib(proxy.pid());
    let target = format!("localhost:{}", origin.port());
    let mut tcp = tunnel(&proxy, &target);
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(cas.proxy.client_config(&[b"http/1.1"]), name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("the handshake");
    }
    // Driven by hand: rustls buffers what the socket does not take, and the
    // write side must not wait on the read side.
    let batch = format!("GET /admin/x HTTP/1.1\r\nHost: {target}\r\n\r\n").repeat(1000);
    tcp.set_write_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let mut written = 0usize;
    let mut offset = 0usize;
    while written < 10_000_000 {
        if !conn.wants_write() {
            let n = conn.writer().write(&batch.as_bytes()[offset..]).unwrap();
            written += n;
            offset = (offset + n) % batch.len();
        }
        match conn.write_tls(&mut tcp) {
            Ok(_) => {}
            // The proxy stopped reading: backpressure, as it should.
            Err(_) => break,
        }
    }
    assert_stopped_reading(&proxy, base, written, "");
    // The answers are there, in order, for a client that reads.
    tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut plain = Vec::new();
    while plain.len() < 12 {
        conn.read_tls(&mut tcp).expect("answers");
        conn.process_new_packets().expect("TLS");
        let mut buf = [0u8; 4096];
        match conn.reader().read(&mut buf) {
            Ok(n) => plain.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        plain.starts_with(b"HTTP/1.1 403"),
        "{:?}",
        String::from_utf8_lossy(&plain)
    );
}

/// Through SOCKS5 (`socks5h`) too: an SNI naming another host than the
/// SOCKS5 target is refused, and python `requests` goes through.
#[test]
fn socks5h_refuses_a_fronted_sni_and_carries_python_requests() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let tcp = connect_via_socks5(proxy.addr, "localhost", origin.port()).expect("SOCKS5 CONNECT");
    tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut c = tls_client(&cas.proxy, tcp, "fronted.example");
    let err = handshake_error(&mut c, "fronted.example", "the handshake must fail");
    assert!(err.to_string().to_lowercase().contains("alert"), "{err}");
    drop(c);
    wait_for_fronted_refusal(&proxy);

    let url = format!("https://localhost:{}/py-socks", origin.port());
    let proxy_url = format!("socks5h://{}", proxy.addr);
    let Some((o, out)) = python_get(
        &url,
        &proxy_url,
        &cas.proxy,
        "requests, socks",
        "requests[socks]",
    ) else {
        return;
    };
    assert_eq!(out.trim(), "200 GET /py-socks", "{o:?}");
}

/// Client-side TLS as clients offer it: a client offering only `h2` is
/// refused (ALPN is `http/1.1` only); a client sending no SNI gets a leaf
/// for the CONNECT name (or address); a TLS 1.2-only client works.
#[test]
fn client_side_tls_alpn_no_sni_and_tls12() {
    use rustls::pki_types::IpAddr;
    use std::sync::Arc;
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (_dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let port = origin.port();
    let builder = || {
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
    };
    let get = |config: Arc<rustls::ClientConfig>, target: &str, name: ServerName<'static>| {
        let tcp = tunnel(&proxy, target);
        tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
        let conn = ClientConnection::new(config, name).unwrap();
        let mut c = StreamOwned::new(conn, tcp);
        write!(c, "GET /tls HTTP/1.1\r\nHost: {target}\r\n\r\n")?;
        c.flush()?;
        let (head, body) = read_response(&mut c);
        Ok::<_, std::io::Error>((c.conn.protocol_version(), head.status, body))
    };

    // Only h2: no protocol both speak.
    let h2 = cas.proxy.client_config(&[b"h2"]);
    let name = ServerName::try_from("localhost").unwrap();
    let tcp = tunnel(&proxy, &format!("localhost:{port}"));
    tcp.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut c = StreamOwned::new(ClientConnection::new(h2, name.clone()).unwrap(), tcp);
    let err = handshake_error(&mut c, "localhost", "an h2-only client is refused");
    assert!(err.to_string().contains("NoApplicationProtocol"), "{err}");
    // h2 and http/1.1 offered: http/1.1.
    let both = cas.proxy.client_config(&[b"h2", b"http/1.1"]);
    let (_, status, _) = get(both, &format!("localhost:{port}"), name.clone()).unwrap();
    assert_eq!(status, 200);

    // No SNI: the leaf is for the CONNECT name, or address, and verifies as it.
    let mut no_sni = builder()
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(cas.proxy.roots())
        .with_no_client_auth();
    no_sni.enable_sni = false;
    no_sni.alpn_protocols = vec![b"http/1.1".to_vec()];
    let no_sni = Arc::new(no_sni);
    let (_, status, body) =
        get(no_sni.clone(), &format!("localhost:{port}"), name.clone()).unwrap();
    assert_eq!((status, body.as_str()), (200, "GET /tls\n"));
    let ip = ServerName::IpAddress(IpAddr::from(std::net::IpAddr::from([127, 0, 0, 1])));
    let (_, status, _) = get(no_sni, &format!("127.0.0.1:{port}"), ip).unwrap();
    assert_eq!(status, 200);

    // TLS 1.2 only.
    let tls12 = builder()
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(cas.proxy.roots())
        .with_no_client_auth();
    let (version, status, _) = get(Arc::new(tls12), &format!("localhost:{port}"), name).unwrap();
    assert_eq!(version, Some(rustls::ProtocolVersion::TLSv1_2));
    assert_eq!(status, 200);
}

/// The command-line flags alone, no config file: `--terminate`,
/// `--ca-cert`, `--ca-key`, `--upstream-ca` (repeatable), with curl.
#[test]
fn terminate_from_the_command_line_flags() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let spare = TestCa::new();
    // An address: a name would resolve to loopback, which only a rule
    // naming the address reaches.
    let rule = format!("127.0.0.1:{}", origin.port());
    let path = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let (ca_cert, ca_key, up, spare_cert) = (
        path(&cas.proxy.cert_path),
        path(&cas.proxy.key_path),
        path(&cas.upstream.cert_path),
        path(&spare.cert_path),
    );
    let flags = [
        "--terminate",
        rule.as_str(),
        "--ca-cert",
        &ca_cert,
        "--ca-key",
        &ca_key,
        "--upstream-ca",
        &spare_cert,
        "--upstream-ca",
        &up,
    ];
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(flags)
        .arg("--check")
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{o:?}");
    assert!(
        summary.contains(&format!(
            "tls: ca_cert {ca_cert}, ca_key {ca_key}, upstream_ca [{spare_cert}, {up}]"
        )),
        "{summary}"
    );
    assert!(summary.contains("inspect http, tls terminate"), "{summary}");

    let proxy = ChildProxy::start(&flags);
    let url = format!("https://127.0.0.1:{}/flags", origin.port());
    for via in ["http", "socks5h"] {
        let o = curl_https(&proxy, via, &cas.proxy, &url);
        let out = text(&o);
        assert!(out.contains("HTTP/1.1 200"), "{via}: {out}");
        assert!(out.contains("GET /flags"), "{via}: {out}");
    }
}

/// `--check` warns when a plaintext inspect rule covers port 443: inside a
/// TLS tunnel there is nothing to parse.
#[test]
fn check_warns_for_a_plaintext_inspect_rule_on_443() {
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(args)
            .arg("--check")
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = run(&["--inspect", "api.test:443"]);
    assert!(
        out.lines().any(|l| l.starts_with(
            "warning: rule \"--inspect api.test:443\" inspects plaintext HTTP on port 443"
        )),
        "{out}"
    );
    assert!(out.ends_with("OK\n"), "{out}");
    let out = run(&["--inspect", "api.test:8080"]);
    assert!(!out.contains("warning:"), "{out}");
}

/// A terminating config trusting upstreams by `roots` alone (no
/// `upstream_ca`): `[tls]` with the proxy CA, `extra` in it, rule `api`.
fn platform_config(dir: &TempDir, proxy_ca: &TestCa, port: u16, extra: &str) -> PathBuf {
    let path = dir.0.join(format!("portcullis-{}.toml", extra.len()));
    let text = format!(
        "[tls]\nca_cert = \"{}\"\nca_key = \"{}\"\n{extra}\n\n{}",
        proxy_ca.cert_path.display(),
        proxy_ca.key_path.display(),
        support::tls::terminate_rule(port, "inspect = \"http\"")
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The binary with `--config cfg`, the platform store named only by `env`
/// (SSL_CERT_FILE / SSL_CERT_DIR, as OpenSSL reads them).
fn start_with_store(cfg: &std::path::Path, env: &[(&str, &std::path::Path)]) -> ChildProxy {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()]);
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    ChildProxy::start_command(cmd)
}

/// Upstream certificates are verified against the platform's store by
/// default (SSL_CERT_FILE, SSL_CERT_DIR plain or hashed): a private root
/// there is trusted; a root it lacks is named in the 502 with the fix, and
/// the request is logged `decision=error` with its method, path and rule;
/// `upstream_roots = "webpki"` ignores the store; SIGHUP reads it again.
#[test]
fn upstream_trust_comes_from_the_platform_store() {
    let proxy_ca = TestCa::new();
    let corp = TestCa::named("Corp Root CA", Some("Example"));
    let unrelated = TestCa::named("Unrelated Root", None);
    let origin = https_origin(&corp);
    let dir = TempDir::new("platform-trust");
    let pem = |ca: &TestCa| std::fs::read_to_string(&ca.cert_path).unwrap();
    let bundle = dir.0.join("bundle.pem");
    std::fs::write(&bundle, format!("{}{}", pem(&unrelated), pem(&corp))).unwrap();
    let lone = dir.0.join("unrelated.pem");
    std::fs::write(&lone, pem(&unrelated)).unwrap();
    let url = format!("https://localhost:{}/v1/x?q=1", origin.port());
    let get = |proxy: &ChildProxy| text(&curl_https(proxy, "http", &proxy_ca, &url));
    let default = platform_config(&dir, &proxy_ca, origin.port(), "");
    let trusted = |proxy: &ChildProxy, label: &str| {
        let out = get(proxy);
        assert!(out.contains("HTTP/1.1 200"), "{label}: {out}");
        assert!(out.contains("GET /v1/x?q=1"), "{label}: {out}");
    };

    // SSL_CERT_FILE holding the root: trusted, and the count is logged.
    let proxy = start_with_store(&default, &[("SSL_CERT_FILE", &bundle)]);
    let line = proxy.wait_for_line("upstream trust", |l| l.contains("upstream trust:"));
    assert!(
        line.contains(&format!("2 from SSL_CERT_FILE={}", bundle.display())),
        "{line}"
    );
    trusted(&proxy, "SSL_CERT_FILE");
    drop(proxy);

    // Without it: a 502 naming the issuer and the fix; logged as an error.
    let proxy = start_with_store(&default, &[("SSL_CERT_FILE", &lone)]);
    let out = get(&proxy);
    assert!(out.contains("HTTP/1.1 502"), "{out}");
    assert!(
        out.contains("X-Proxy-Error: upstream-tls; unknown issuer: CN=Corp Root CA, O=Example; ")
            && out.contains("--upstream-ca FILE or [tls] upstream_ca"),
        "{out}"
    );
    let line = proxy.wait_for_line("the request's error", |l| l.contains("event=request"));
    for part in [
        "decision=error",
        "rule=api",
        "method=GET",
        "path=/v1/x",
        "status=502",
        "Corp Root CA",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
    // SIGHUP reads the store again: the root added to the file is trusted.
    std::fs::write(&lone, format!("{}{}", pem(&unrelated), pem(&corp))).unwrap();
    let reloads = || {
        proxy
            .log()
            .iter()
            .filter(|l| l.contains("upstream trust:"))
            .count()
    };
    assert_eq!(reloads(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(
        wait_until(PROMPTLY, || reloads() == 2),
        "{:#?}",
        proxy.log()
    );
    trusted(&proxy, "after SIGHUP");
    drop(proxy);

    // upstream_roots = "webpki": SSL_CERT_FILE is not read.
    let webpki = platform_config(
        &dir,
        &proxy_ca,
        origin.port(),
        "upstream_roots = \"webpki\"",
    );
    let proxy = start_with_store(&webpki, &[("SSL_CERT_FILE", &bundle)]);
    let out = get(&proxy);
    assert!(
        out.contains("HTTP/1.1 502") && out.contains("unknown issuer: CN=Corp Root CA"),
        "{out}"
    );
    let line = proxy.wait_for_line("upstream trust", |l| l.contains("upstream trust:"));
    assert!(line.contains("from webpki-roots"), "{line}");
    drop(proxy);

    // SSL_CERT_DIR, a plain directory of PEM files.
    let plain = dir.0.join("certs");
    std::fs::create_dir(&plain).unwrap();
    std::fs::copy(&corp.cert_path, plain.join("corp.pem")).unwrap();
    let proxy = start_with_store(&default, &[("SSL_CERT_DIR", &plain)]);
    trusted(&proxy, "SSL_CERT_DIR");
    drop(proxy);

    // SSL_CERT_DIR as OpenSSL lays it out: `openssl rehash` links.
    let hashed = dir.0.join("hashed");
    std::fs::create_dir(&hashed).unwrap();
    std::fs::copy(&corp.cert_path, hashed.join("corp.pem")).unwrap();
    match std::process::Command::new("openssl")
        .arg("rehash")
        .arg(&hashed)
        .status()
    {
        Ok(s) if s.success() => {
            // corp.pem and its `HASH.0` link, as in /etc/ssl/certs.
            let names: Vec<_> = std::fs::read_dir(&hashed)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert!(names.iter().any(|n| n.ends_with(".0")), "{names:?}");
            let proxy = start_with_store(&default, &[("SSL_CERT_DIR", &hashed)]);
            trusted(&proxy, "hashed SSL_CERT_DIR");
            drop(proxy);
        }
        _ if !strict() => {
            eprintln!("NOTE: openssl rehash is not available here; CI runs it");
        }
        other => panic!("openssl rehash: {other:?}"),
    }

    // An empty store: a warning naming the fixes, and webpki's roots.
    let empty = dir.0.join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let proxy = start_with_store(&default, &[("SSL_CERT_FILE", &empty)]);
    let out = get(&proxy);
    assert!(out.contains("HTTP/1.1 502"), "{out}");
    let warn = proxy.wait_for_line("the empty-store warning", |l| {
        l.contains("level=warn") && l.contains("platform store")
    });
    for part in [
        "using webpki-roots",
        "--upstream-ca FILE",
        "upstream_roots = ",
    ] {
        assert!(warn.contains(part), "{part}: {warn}");
    }
}

/// Whether `tool` runs here; when it does not, a note, and outside CI the
/// caller skips (CI installs every client: .ci/run).
fn have(tool: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(!strict(), "{tool} is not installed (CI must install it)");
        eprintln!("NOTE: {tool} is not installed here; CI runs this part");
    }
    found
}

/// Runs `script` in bash with `env` set and the proxy variables cleared;
/// returns its stdout and stderr.
fn bash(script: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", script]);
    for var in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
        "JAVA_TOOL_OPTIONS",
        "NPM_CONFIG_CAFILE",
        "NODE_EXTRA_CA_CERTS",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    (o.status.success(), text(&o))
}

/// `eval "$(portcullis ca --shell sh)"`, then real clients reach a
/// terminated origin through the proxy trusting nothing else: curl, python
/// requests, node (keeping the root NODE_EXTRA_CA_CERTS named before), npm.
#[test]
fn eval_ca_then_curl_python_node_npm_pip_git_trust_the_proxy() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let (dir, cfg) = config(&cas, origin.port(), "");
    let proxy = start(&cfg);
    let bin = env!("CARGO_BIN_EXE_portcullis");
    let state = dir.0.join("state-home");
    let proxy_url = format!("http://{}", proxy.addr);
    let url = format!("https://localhost:{}/hello", origin.port());
    // A root the environment trusted for Node before: a private origin
    // that Node reaches directly must stay trusted.
    let corp = TestCa::named("Corp Node Root", None);
    let corp_origin = https_origin(&corp);
    let base: Vec<(&str, &str)> = vec![
        ("XDG_STATE_HOME", state.to_str().unwrap()),
        ("NODE_EXTRA_CA_CERTS", corp.cert_path.to_str().unwrap()),
        ("P", &proxy_url),
        ("U", &url),
    ];
    let eval = format!(
        "set -e; eval \"$('{bin}' ca --config '{}' --shell sh)\"; ",
        cfg.display()
    );

    // Only `export` lines: nothing else for eval to trip on.
    // (Its stderr may carry a warning about the test CA's key mode.)
    let (ok, out) = bash(
        &format!(
            "'{bin}' ca --config '{}' --shell sh 2>/dev/null",
            cfg.display()
        ),
        &base,
    );
    assert!(ok, "{out}");
    for line in out.lines() {
        assert!(line.starts_with("export ") && line.contains("='"), "{line}");
    }
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "NPM_CONFIG_CAFILE",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
        "PIP_CERT",
        "DENO_CERT",
    ] {
        assert!(out.contains(&format!("export {var}=")), "{var}: {out}");
    }

    for (shell, prefix) in [("fish", "set -gx "), ("json", "{\"SSL_CERT_FILE\": \"")] {
        let (ok, out) = bash(
            &format!(
                "'{bin}' ca --config '{}' --shell {shell} 2>/dev/null",
                cfg.display()
            ),
            &base,
        );
        assert!(ok, "{out}");
        assert!(out.lines().all(|l| l.starts_with(prefix)), "{shell}: {out}");
        assert!(out.contains("NPM_CONFIG_CAFILE"), "{shell}: {out}");
    }

    if have("curl") {
        let (ok, out) = bash(&format!("{eval} curl -sS -i -x \"$P\" \"$U\""), &base);
        assert!(
            ok && out.contains("HTTP/1.1 200") && out.contains("GET /hello"),
            "{out}"
        );
    }
    if have("python3") {
        let script = "import os, requests; r = requests.get(os.environ['U'], proxies={'https': os.environ['P']}); print(r.status_code, r.text.strip())";
        let (ok, out) = bash(&format!("{eval} python3 -c \"{script}\""), &base);
        assert!(ok && out.contains("200 GET /hello"), "{out}");
    }
    if have("node") {
        // Through the proxy by CONNECT, then straight to the origin whose
        // root only the inherited NODE_EXTRA_CA_CERTS named.
        let script = r#"
const http = require('http'), tls = require('tls'), https = require('https');
const p = new URL(process.env.P), u = new URL(process.env.U);
const req = http.request({host: p.hostname, port: p.port, method: 'CONNECT', path: `${u.hostname}:${u.port}`});
req.on('connect', (res, socket) => {
  const s = tls.connect({socket, servername: u.hostname}, () => s.write(`GET /via HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n\r\n`));
  let d = ''; s.on('data', c => d += c);
  s.on('error', e => { console.log('proxied: ' + e.message); process.exit(1); });
  s.on('end', () => {
    console.log('proxied: ' + d.split('\r\n')[0]);
    https.get(process.env.DIRECT, r => { console.log('direct: ' + r.statusCode); r.resume(); })
      .on('error', e => { console.log('direct: ' + e.message); process.exit(1); });
  });
});
req.end();
"#;
        let js = dir.0.join("get.js");
        std::fs::write(&js, script).unwrap();
        let direct = format!("https://localhost:{}/direct", corp_origin.port());
        let mut env = base.clone();
        env.push(("DIRECT", &direct));
        let (ok, out) = bash(&format!("{eval} node '{}'", js.display()), &env);
        assert!(ok, "{out}");
        assert!(out.contains("proxied: HTTP/1.1 200"), "{out}");
        assert!(out.contains("direct: 200"), "{out}");
    }
    if have("npm") {
        let registry = format!("https://localhost:{}/", origin.port());
        let mut env = base.clone();
        env.push(("R", &registry));
        let npmrc = dir.0.join("npmrc");
        std::fs::write(&npmrc, "").unwrap();
        env.push(("NPM_CONFIG_USERCONFIG", npmrc.to_str().unwrap()));
        let (ok, out) = bash(
            &format!("{eval} npm ping --registry \"$R\" --https-proxy \"$P\" --proxy \"$P\" --fetch-retries 0"),
            &env,
        );
        assert!(ok && out.contains("PONG"), "{out}");
    }
    // pip and git reach the terminated origin with PIP_CERT and
    // GIT_SSL_CAINFO: the echo origin is no package index or repository, so
    // each fails after the request, never on the certificate; the proxy
    // log shows the request each sent through the terminated tunnel.
    if have("python3") {
        let (_, out) = bash(
            &format!(
                "{eval} python3 -m pip download --no-deps --no-cache-dir -d \"$(mktemp -d)\" \
                 --retries 0 --timeout 20 --proxy \"$P\" --index-url \"${{U%/hello}}/simple/\" portcullis-probe"
            ),
            &base,
        );
        for bad in ["CERTIFICATE_VERIFY_FAILED", "SSLError", "ProxyError"] {
            assert!(!out.contains(bad), "pip: {bad}: {out}");
        }
        proxy.wait_for_line("pip's request", |l| {
            l.contains("path=/simple/portcullis-probe/")
        });
    }
    if have("git") {
        let (_, out) = bash(
            &format!("{eval} git -c http.proxy=\"$P\" ls-remote \"${{U%/hello}}/repo.git\""),
            &base,
        );
        assert!(!out.contains("SSL certificate problem"), "git: {out}");
        proxy.wait_for_line("git's request", |l| l.contains("path=/repo.git/info/refs"));
    }
    let log = proxy.log().join("\n");
    assert!(log.contains("path=/hello"), "{log}");
}

/// A JVM through `env`'s JAVA_TOOL_OPTIONS alone: proxy properties (it
/// reads no *_PROXY) and a trust store holding the CA (it reads no PEM
/// variable) reach a plain-HTTP and a terminated HTTPS origin via the proxy.
#[test]
fn java_through_env_java_tool_options() {
    if !have("java") {
        return;
    }
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let plain = Origin::echo_target();
    let extra = format!(
        "\n[[rules]]\nname = \"plain\"\naction = \"allow\"\nhosts = [\"localhost\"]\ncidrs = [\"127.0.0.1/32\"]\nports = [{}]\n",
        plain.port()
    );
    let (dir, cfg) = config(&cas, origin.port(), &extra);
    let proxy = start(&cfg);
    let bin = env!("CARGO_BIN_EXE_portcullis");
    let state = dir.0.join("state-home");
    let java = dir.0.join("Get.java");
    // The JDK never proxies localhost or 127.0.0.1, whatever
    // http.nonProxyHosts says, and the test's origins live there: Get
    // shows what the default selector does for a public name, then uses
    // the same properties for the loopback origins itself.
    std::fs::write(
        &java,
        r#"
import java.net.*;
import java.io.*;
public class Get {
    public static void main(String[] args) throws Exception {
        System.out.println("selector: " + ProxySelector.getDefault().select(URI.create("https://example.com/")));
        for (String u : args) {
            URL url = new URL(u);
            String s = url.getProtocol();
            Proxy p = new Proxy(Proxy.Type.HTTP, new InetSocketAddress(
                System.getProperty(s + ".proxyHost"), Integer.getInteger(s + ".proxyPort")));
            HttpURLConnection c = (HttpURLConnection) url.openConnection(p);
            try (InputStream in = c.getInputStream()) {
                System.out.println(c.getResponseCode() + " " + new String(in.readAllBytes()).trim());
            }
        }
    }
}
"#,
    )
    .unwrap();
    let plain_url = format!("http://localhost:{}/plain", plain.port());
    let tls_url = format!("https://localhost:{}/secure", origin.port());
    let script = format!(
        "set -e; eval \"$('{bin}' env --config '{}' --listen {} 2>/dev/null)\"; \
         echo \"JTO=$JAVA_TOOL_OPTIONS\"; java '{}' '{plain_url}' '{tls_url}'",
        cfg.display(),
        proxy.addr,
        java.display()
    );
    let (ok, out) = bash(
        &script,
        &[
            ("XDG_STATE_HOME", state.to_str().unwrap()),
            // An inherited value is kept, ahead of ours.
            ("JAVA_TOOL_OPTIONS", "-Dinherited.option=1"),
        ],
    );
    let port = proxy.addr.port();
    for part in [
        format!("JTO=-Dinherited.option=1 -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort={port}"),
        format!("-Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort={port}"),
        "-Dhttp.nonProxyHosts=localhost|127.0.0.1|::1".to_string(),
        "-Djavax.net.ssl.trustStoreType=JKS".to_string(),
        format!("selector: [HTTP @ 127.0.0.1/<unresolved>:{port}]"),
        "200 GET /plain".to_string(),
        "200 GET /secure".to_string(),
    ] {
        assert!(out.contains(&part), "{part}: {out}");
    }
    assert!(ok, "{out}");
    // Both went through the proxy.
    let log = proxy.log().join("\n");
    assert!(
        log.contains(&format!("target=localhost:{}", plain.port())),
        "{log}"
    );
    assert!(log.contains("path=/secure"), "{log}");
}

#[test]
fn env_prints_the_proxys_placeholders_and_a_reload_rereads_the_value() {
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let port = origin.port();
    let dir = TempDir::new("tls-secrets");
    let key = dir.0.join("token");
    std::fs::write(&key, "first-v4lue\n").unwrap();
    let cfg = dir.0.join("portcullis.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}state_dir = \"{}\"\n\n{}\n[[secrets]]\nname = \"TOKEN\"\nfile = \"token\"\nhosts = [\"localhost\"]\n",
            cas.tls_table(),
            dir.0.join("state").display(),
            terminate_rule(port, ""),
        ),
    )
    .unwrap();
    // `portcullis env` and the proxy draw the same placeholder (the key
    // file in the state directory), never the value.
    let env = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["env", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&env.stdout).into_owned();
    assert!(!env.contains("v4lue"), "{env}");
    let placeholder = env
        .lines()
        .find_map(|l| l.strip_prefix("export TOKEN="))
        .unwrap_or_else(|| panic!("no TOKEN in env's output: {env}"))
        .trim_matches('\'')
        .to_string();
    assert!(
        placeholder.starts_with("portcullis-secret-TOKEN-"),
        "{placeholder}"
    );

    let proxy = start(&cfg);
    let authorized = |proxy: &ChildProxy, via: &str| {
        let proxy_url = format!("{via}://{}", proxy.addr);
        let out = curl(&[
            "-sS",
            "--cacert",
            cas.proxy.cert_path.to_str().unwrap(),
            "-p",
            "-x",
            &proxy_url,
            "-H",
            &format!("Authorization: Bearer {placeholder}"),
            &format!("https://localhost:{port}/echo-headers/x"),
        ]);
        text(&out)
    };
    // CONNECT and SOCKS5 alike.
    for via in ["http", "socks5h"] {
        let first = authorized(&proxy, via);
        assert!(
            first.contains("Authorization: Bearer first-v4lue"),
            "{via}: {first}"
        );
    }

    std::fs::write(&key, "second-v4lue").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    proxy.wait_for_line("the reload", |l| l.contains("policy reloaded"));
    let second = authorized(&proxy, "http");
    assert!(
        second.contains("Authorization: Bearer second-v4lue"),
        "{second}"
    );
    let log = proxy.log().join("\n");
    assert!(!log.contains("v4lue"), "a value in the log: {log}");
}

/// Opens `n` CONNECTs to `target` one after another, reads each answer's
/// head, closes it, and prints one JSON line: the statuses, the
/// `X-Proxy-Error` values, and one refusal's body.
const CONNECTS: &str = r#"
import socket, sys, json, collections
host, port, target, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
statuses, errors, body = collections.Counter(), collections.Counter(), ""
for i in range(n):
    s = socket.create_connection((host, port))
    s.settimeout(20)
    s.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\r\nHost: " + target.encode() + b"\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head = data.split(b"\r\n\r\n")[0].decode()
    lines = head.split("\r\n")
    statuses[lines[0]] += 1
    for l in lines[1:]:
        if l.lower().startswith("x-proxy-error:"):
            errors[l.split(":", 1)[1].strip()] += 1
    if b" 429 " in data.split(b"\r\n")[0] and not body:
        s.settimeout(5)
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        body = data.split(b"\r\n\r\n", 1)[1].decode(errors="replace")
    s.close()
print(json.dumps({"statuses": statuses, "errors": errors, "body": body}), flush=True)
"#;

/// The per-client handshake-rate budget: `nobody` opening terminated
/// tunnels faster than `handshakes_per_client_per_sec` allows is refused
/// at CONNECT (429, naming the key to raise) once its burst is spent,
/// while root, at the same moment, is still served end to end; the
/// refusals are counted.
#[test]
fn a_client_over_its_handshake_rate_is_refused_and_another_is_served() {
    const BURST: u64 = 3;
    const ATTEMPTS: u64 = 12;
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let limits = format!(
        "\n[limits]\nhandshakes_per_client_per_sec = 1\nhandshake_burst_per_client = {BURST}\n"
    );
    let (_dir, cfg) = config(&cas, origin.port(), &limits);
    let proxy = start(&cfg);
    let target = format!("localhost:{}", origin.port());
    let mut flood = crate::load::spawn_python_as(
        crate::load::NOBODY,
        CONNECTS,
        &[
            proxy.addr.ip().to_string(),
            proxy.addr.port().to_string(),
            target,
            ATTEMPTS.to_string(),
        ],
    );
    let lines = crate::load::Lines::of(&mut flood);
    let summary = lines.next("nobody's summary", std::time::Duration::from_secs(60));
    eprintln!("nobody: {summary}");
    let v: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let count = |k: &str, key: &str| v[k][key].as_u64().unwrap_or(0);
    let served = count("statuses", "HTTP/1.1 200 Connection established");
    let refused = count("statuses", "HTTP/1.1 429 Too Many Requests");
    assert_eq!(served + refused, ATTEMPTS, "{summary}");
    // The burst, then (at 1/s) at most one more per second the loop took.
    assert!(served >= BURST, "{summary}");
    assert!(refused >= 1, "{summary}");
    assert_eq!(
        count(
            "errors",
            "limit; handshake-rate; fix=limits.handshakes_per_client_per_sec"
        ),
        refused,
        "{summary}"
    );
    let body = v["body"].as_str().unwrap();
    assert!(body.contains("client uid 65534"), "{body}");
    assert!(
        body.contains("limits.handshakes_per_client_per_sec"),
        "{body}"
    );

    // Root has a bucket of its own: served through the terminated tunnel.
    let url = format!("https://localhost:{}/v1/hello", origin.port());
    let o = curl_https(&proxy, "http", &cas.proxy, &url);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("GET /v1/hello"), "{out}");

    let st = proxy.stats();
    assert_eq!(stat(&st, "handshake_rate_refused"), refused, "{st:?}");
    assert_eq!(stat(&st, "closed.limit"), refused, "{st:?}");
}

/// A secret goes only inside TLS unless it says `plaintext = true`: a
/// plaintext inspected request (the forward proxy's `http://`, a CONNECT
/// tunnel with `inspect = "http"`) carrying the placeholder to one of its
/// hosts is refused, where anyone on the path could read the value and
/// nothing authenticated the host. With `plaintext = true` (after a
/// reload), the origin gets it.
#[test]
fn a_secret_is_not_sent_over_plaintext_http_unless_it_says_so() {
    let origin = Origin::start(|r| ok(r.header("Authorization").unwrap_or("-")));
    let port = origin.port();
    let dir = TempDir::new("plain-secrets");
    std::fs::write(dir.0.join("token"), "plain-v4lue\n").unwrap();
    let cfg = dir.0.join("portcullis.toml");
    let write = |more: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[tls]\nstate_dir = \"{}\"\n\n[[rules]]\nname = \"plain\"\naction = \"allow\"\n\
                 host = \"127.0.0.1\"\nports = [{port}]\ninspect = \"http\"\n\n\
                 [[secrets]]\nname = \"TOKEN\"\nfile = \"token\"\nhosts = [\"127.0.0.1\"]\n{more}",
                dir.0.join("state").display()
            ),
        )
        .unwrap()
    };
    write("");
    let env = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["env", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&env.stdout).into_owned();
    let placeholder = env
        .lines()
        .find_map(|l| l.strip_prefix("export TOKEN="))
        .unwrap_or_else(|| panic!("no TOKEN in env's output: {env}"))
        .trim_matches('\'')
        .to_string();
    let proxy = start(&cfg);
    let get = |tunnel: bool| {
        let proxy_url = format!("http://{}", proxy.addr);
        let mut args = vec!["-sS", "-i", "-x", &proxy_url];
        if tunnel {
            args.push("-p");
        }
        let auth = format!("Authorization: Bearer {placeholder}");
        let url = format!("http://127.0.0.1:{port}/x");
        args.extend(["-H", &auth, &url]);
        text(&curl(&args))
    };
    for tunnel in [false, true] {
        let out = get(tunnel);
        assert!(
            out.contains("HTTP/1.1 403")
                && out.contains("X-Proxy-Error: secret-not-allowed; secret=TOKEN")
                && out.contains("only sent inside TLS")
                && out.contains("plaintext = true"),
            "tunnel={tunnel}: {out}"
        );
    }
    assert!(origin.requests().is_empty(), "nothing reached the origin");

    write("plaintext = true\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    proxy.wait_for_line("the reload", |l| l.contains("policy reloaded"));
    for tunnel in [false, true] {
        let out = get(tunnel);
        assert!(
            out.contains("HTTP/1.1 200") && out.contains("Bearer plain-v4lue"),
            "tunnel={tunnel}: {out}"
        );
    }
    let log = proxy.log().join("\n");
    assert!(!log.contains("v4lue"), "a value in the log: {log}");
}
