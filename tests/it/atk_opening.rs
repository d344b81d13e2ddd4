//! Attacks on the opening machine (commit e009e1e: the handshake and the
//! establishing stage as one `OpeningCore`), through the real proxy on
//! loopback: what the records say once a session goes back to the opening
//! stage for a second target on the same connection.

use crate::support;

use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use portcullis::events::{Decision, Event, EventKind};
use portcullis::{Config, Proxy};
use support::*;

/// A forward-proxy connection: a first request to an allowed origin on
/// 127.0.0.1, then one to 127.0.0.3, which a rule denies before any dial.
/// The second request's `request` event and the session's access line
/// name the second target: they must not name the first one's address as
/// the one dialled for it (nothing was dialled for 127.0.0.3), as a first
/// request refused the same way does not.
#[test]
fn a_second_hosts_refusal_names_no_address_it_never_dialled() {
    let origin = Origin::echo_target();
    let port = origin.port();
    let text = format!(
        r#"
[[listen]]
address = "127.0.0.1:0"

[[rules]]
name = "three"
action = "deny"
cidr = "127.0.0.3/32"

[[rules]]
name = "origin"
action = "allow"
cidr = "127.0.0.1/32"
port = {port}
"#
    );
    let config = Config::from_toml_str(&text).expect("config");
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let seen = Arc::clone(&events);
    let proxy = spawn(
        Proxy::builder()
            .config(config)
            .on_event(move |e| seen.lock().unwrap().push(e.clone())),
    );
    let p = proxy_addr(&proxy);
    let get = |host: &str, path: &str| {
        format!("GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n")
    };
    let second = format!("127.0.0.3:{port}");

    // The same refusal as a connection's first request: no address.
    let mut c = HttpConn::new(TcpStream::connect(p).unwrap());
    c.send(get(&second, "/alone"));
    assert_eq!(c.response("GET").status, 403);
    drop(c);
    wait_no_open_sessions(&proxy);

    // As the second request on a connection whose first was dialled.
    let mut c = HttpConn::new(TcpStream::connect(p).unwrap());
    c.send(get(&origin.target(), "/first"));
    assert_eq!(c.response("GET").status, 200);
    c.send(get(&second, "/second"));
    let r = c.response("GET");
    assert_eq!(r.status, 403, "{}", r.raw_head);
    drop(c);
    wait_no_open_sessions(&proxy);
    assert_eq!(origin.requests().len(), 1, "only /first reached the origin");

    let events = events.lock().unwrap();
    for path in ["/alone", "/second"] {
        let request = events
            .iter()
            .find(|e| e.kind == EventKind::Request && e.path.as_deref() == Some(path))
            .unwrap_or_else(|| panic!("no request event for {path}: {events:#?}"));
        assert_eq!(request.target.as_deref(), Some(second.as_str()));
        assert_eq!(request.decision, Some(Decision::Deny), "{request:?}");
        assert_eq!(request.rule.as_deref(), Some("three"), "{request:?}");
        assert_eq!(
            request.dialled, None,
            "{path}: the request event names an address never dialled for {second}: {request:?}"
        );
    }
    let sessions: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind == EventKind::Session)
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:#?}");
    for s in sessions {
        assert_eq!(s.target.as_deref(), Some(second.as_str()), "{s:?}");
        assert_eq!(s.decision, Some(Decision::Deny), "{s:?}");
        assert_eq!(
            s.dialled, None,
            "the access line pairs {second} with an address dialled for another target: {s:?}"
        );
    }
}
