//! Request rules inside inspected connections: every request on a keep-alive
//! connection is checked on its own (method + normalised path); refused ones
//! get 403 naming the verdict, their bodies are skipped, and the connection
//! carries on. Run through an inspected CONNECT tunnel and through the
//! forward proxy, against a keep-alive origin that records what reached it.

use crate::support;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use portcullis::{Policy, SpawnedProxy};
use support::*;

/// `allow GET /v1/**`, `deny * /v1/admin/**`, named `api`, inspecting.
fn api_policy(port: u16) -> Policy {
    Policy::parse_toml(&format!(
        r#"
[[rules]]
name = "api"
action = "allow"
host = "127.0.0.1"
ports = [{port}]
inspect = "http"
requests = [
  {{ action = "allow", method = "GET", path = "/v1/**" }},
  {{ action = "deny",  method = "*",   path = "/v1/admin/**" }},
]
"#
    ))
    .expect("policy compiles")
}

const DENY_RULE: &str = "denied; rule=api requests[1]";
const NO_MATCH: &str = "denied; rule=api: no request rule matched";

#[derive(Clone, Copy, Debug)]
enum Via {
    Connect,
    Forward,
}

struct Fixture {
    origin: Origin,
    proxy: SpawnedProxy,
    via: Via,
    /// `/v1/slow` is answered once this is set.
    slow_may_answer: Arc<AtomicBool>,
}

impl Fixture {
    fn new(via: Via) -> Fixture {
        // `/v1/slow` answers when the test says, so refusals queue behind it.
        let slow_may_answer = Arc::new(AtomicBool::new(false));
        let may = slow_may_answer.clone();
        let origin = Origin::start(move |r| {
            if r.target.ends_with("/slow") {
                wait_for("the test to let /v1/slow answer", PROMPTLY, || {
                    may.load(Ordering::SeqCst)
                });
            }
            ok(&format!("{} {}", r.method, r.target))
        });
        let proxy = start_proxy(api_policy(origin.port()));
        Fixture {
            origin,
            proxy,
            via,
            slow_may_answer,
        }
    }

    /// A client connection: a CONNECT tunnel, or a plain connection to the proxy.
    fn conn(&self) -> HttpConn {
        let p = proxy_addr(&self.proxy);
        HttpConn::new(match self.via {
            Via::Connect => connect_via_http(p, &self.origin.target()),
            Via::Forward => TcpStream::connect(p).expect("connect to proxy"),
        })
    }

    /// The request target for `path`: origin-form in a tunnel, absolute to the proxy.
    fn t(&self, path: &str) -> String {
        match self.via {
            Via::Connect => path.to_string(),
            Via::Forward => format!("http://{}{path}", self.origin.target()),
        }
    }

    fn req(&self, method: &str, path: &str, extra: &str) -> String {
        format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\n{extra}\r\n",
            self.t(path),
            self.origin.target()
        )
    }
}

#[track_caller]
fn expect_ok(c: &mut HttpConn, method: &str, path: &str) {
    let r = c.response(method);
    assert_eq!(r.status, 200, "{method} {path}: {}", r.raw_head);
    assert_eq!(r.text(), format!("{method} {path}"), "{method} {path}");
}

#[track_caller]
fn expect_denied(c: &mut HttpConn, what: &str, error: &str) -> Response {
    let r = c.response("GET");
    assert_eq!(r.status, 403, "{what}: {}", r.raw_head);
    assert_eq!(
        r.header("X-Proxy-Error"),
        Some(error),
        "{what}: X-Proxy-Error in {}",
        r.raw_head
    );
    r
}

fn rules_on_one_connection(via: Via) {
    let f = Fixture::new(via);
    let mut c = f.conn();

    c.send(f.req("GET", "/v1/x", ""));
    expect_ok(&mut c, "GET", "/v1/x");

    c.send(f.req("POST", "/v1/x", "Content-Length: 0\r\n"));
    expect_denied(&mut c, "POST /v1/x", NO_MATCH);

    c.send(f.req("GET", "/v1/admin/users", ""));
    let r = expect_denied(&mut c, "GET /v1/admin/users", DENY_RULE);
    assert!(r.text().contains("/v1/admin/users"), "{}", r.text());

    // The same connection carries on.
    c.send(f.req("GET", "/v1/y", ""));
    expect_ok(&mut c, "GET", "/v1/y");

    // A refused request's body is skipped, whatever its framing.
    c.send(f.req("POST", "/v1/x", "Content-Length: 11\r\n") + "hello world");
    expect_denied(&mut c, "POST with Content-Length body", NO_MATCH);
    c.send(f.req("GET", "/v1/after-cl", ""));
    expect_ok(&mut c, "GET", "/v1/after-cl");

    c.send(
        f.req("POST", "/v1/admin/x", "Transfer-Encoding: chunked\r\n")
            + "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
    );
    expect_denied(&mut c, "chunked POST", DENY_RULE);
    c.send(f.req("GET", "/v1/after-chunked", ""));
    expect_ok(&mut c, "GET", "/v1/after-chunked");

    // No spelling of a path slips past the deny rule.
    c.send(f.req("GET", "/v1/../v1/admin/x", ""));
    expect_denied(&mut c, "dot segments", DENY_RULE);
    c.send(f.req("GET", "/v1/%61dmin/x", ""));
    expect_denied(&mut c, "escaped unreserved", DENY_RULE);
    c.send(f.req("GET", "//v1//admin//x?q=1", ""));
    expect_denied(&mut c, "double slashes", DENY_RULE);
    c.send(f.req("GET", "/v1/ok", ""));
    expect_ok(&mut c, "GET", "/v1/ok");

    // An encoded slash is refused outright, and the connection ends.
    c.send(f.req("GET", "/v1/a%2Fb", ""));
    let r = c.response("GET");
    assert_eq!(r.status, 400, "{}", r.raw_head);
    assert!(r.header("X-Proxy-Error").is_some(), "{}", r.raw_head);
    c.expect_eof("after the 400");

    // Only the allowed requests reached the origin, as sent, on one connection.
    let seen: Vec<(String, String)> = f
        .origin
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.target.clone()))
        .collect();
    let want: Vec<(String, String)> = [
        "/v1/x",
        "/v1/y",
        "/v1/after-cl",
        "/v1/after-chunked",
        "/v1/ok",
    ]
    .iter()
    .map(|p| ("GET".to_string(), p.to_string()))
    .collect();
    assert_eq!(seen, want);
    assert_eq!(f.origin.accepted(), 1);

    wait_no_open_sessions(&f.proxy);
    let s = f.proxy.stats();
    assert_eq!(s.requests_allowed, 5, "{s:?}");
    assert_eq!(s.requests_denied, 8, "{s:?}");
    assert_eq!(s.requests, 13, "{s:?}");
    assert_eq!(s.upgrades, 0);
}

#[test]
fn request_rules_through_connect() {
    rules_on_one_connection(Via::Connect);
}

#[test]
fn request_rules_through_forward_proxy() {
    rules_on_one_connection(Via::Forward);
}

/// Refusals answer in order: behind a response still due, never ahead of it.
fn pipelined_refusal_in_order(via: Via) {
    let f = Fixture::new(via);
    let mut c = f.conn();
    let batch = f.req("GET", "/v1/slow", "")
        + &f.req("DELETE", "/v1/admin/x", "Content-Length: 3\r\n")
        + "abc"
        + &f.req("GET", "/v1/fast", "");
    c.send(batch);
    // The proxy holds the whole batch, the DELETE too, while /v1/slow is
    // still due: the 403 could go out now, and must wait.
    let (mine, proxys) = (c.w.local_addr().unwrap(), c.w.peer_addr().unwrap());
    wait_for("the proxy to read the whole batch", PROMPTLY, || {
        tcp_row(mine, proxys).is_some_and(|r| r.tx_queue == 0)
            && tcp_row(proxys, mine).is_some_and(|r| r.rx_queue == 0)
    });
    f.slow_may_answer.store(true, Ordering::SeqCst);
    expect_ok(&mut c, "GET", "/v1/slow");
    expect_denied(&mut c, "pipelined DELETE", DENY_RULE);
    expect_ok(&mut c, "GET", "/v1/fast");
    let targets: Vec<String> = f.origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["/v1/slow", "/v1/fast"]);
}

#[test]
fn pipelined_refusal_keeps_order_through_connect() {
    pipelined_refusal_in_order(Via::Connect);
}

#[test]
fn pipelined_refusal_keeps_order_through_forward_proxy() {
    pipelined_refusal_in_order(Via::Forward);
}

/// A refused request that says `Connection: close` ends the connection after its 403.
#[test]
fn denied_request_with_connection_close_closes() {
    let f = Fixture::new(Via::Connect);
    let mut c = f.conn();
    c.send(f.req("GET", "/v1/admin/x", "Connection: close\r\n"));
    expect_denied(&mut c, "GET /v1/admin/x, Connection: close", DENY_RULE);
    c.expect_eof("after a refused request that asked to close");
    assert!(f.origin.requests().is_empty());
}

/// The 403 of a refused request on a connection that stays open must not
/// say `Connection: close` (RFC 9112 9.6: the sender of `close` closes).
/// A client that believes it (curl, any HTTP library) drops a usable
/// connection; one that ignores it is told something untrue.
#[test]
fn denied_answer_on_kept_connection_does_not_say_close() {
    for via in [Via::Connect, Via::Forward] {
        let f = Fixture::new(via);
        let mut c = f.conn();
        c.send(f.req("GET", "/v1/admin/x", ""));
        let r = expect_denied(&mut c, "GET /v1/admin/x", DENY_RULE);
        // The connection is in fact kept...
        c.send(f.req("GET", "/v1/next", ""));
        expect_ok(&mut c, "GET", "/v1/next");
        // ...so the 403 must not have announced a close.
        let conn = r.header("Connection").unwrap_or("").to_ascii_lowercase();
        assert!(
            !conn.contains("close"),
            "{via:?}: the 403 says `Connection: {conn}` but the proxy keeps the connection open: {}",
            r.raw_head
        );
    }
}
