//! Connection semantics and head writing.

use super::request;
use crate::protocol::http1::{
    connection_tokens, is_upgrade_request, parse_response_head, wants_close, write_request_head,
    write_response_head, HeadEdit,
};

fn headers(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect()
}

#[test]
fn tokens_from_all_connection_headers() {
    let h = headers(&[
        ("Connection", " Keep-Alive , X-Foo,,"),
        ("Host", "a"),
        ("connection", "UPGRADE"),
    ]);
    assert_eq!(connection_tokens(&h), ["keep-alive", "x-foo", "upgrade"]);
    assert!(connection_tokens(&headers(&[("Host", "a")])).is_empty());
}

#[test]
fn upgrade_requests() {
    assert!(is_upgrade_request(&request(
        "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    )));
    assert!(is_upgrade_request(&request(
        "GET /ws HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"
    )));
    assert!(is_upgrade_request(&request(
        "GET /ws HTTP/1.1\r\nConnection: keep-alive\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n"
    )));
    // Upgrade without the Connection token, or the token without Upgrade.
    assert!(!is_upgrade_request(&request(
        "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"
    )));
    assert!(!is_upgrade_request(&request(
        "GET /ws HTTP/1.1\r\nConnection: upgrade\r\n\r\n"
    )));
    assert!(!is_upgrade_request(&request(
        "GET /ws HTTP/1.1\r\nConnection: upgraded\r\nUpgrade: websocket\r\n\r\n"
    )));
}

#[test]
fn close_semantics() {
    assert!(!wants_close(1, &headers(&[])));
    assert!(wants_close(1, &headers(&[("Connection", "close")])));
    assert!(wants_close(
        1,
        &headers(&[("Connection", "keep-alive, Close")])
    ));
    assert!(wants_close(0, &headers(&[])));
    assert!(!wants_close(0, &headers(&[("Connection", "Keep-Alive")])));
    assert!(wants_close(
        0,
        &headers(&[("Connection", "keep-alive, close")])
    ));
    assert!(!wants_close(1, &headers(&[("X-Connection", "close")])));
}

const REQUEST: &str = "GET http://example.com/a?b HTTP/1.1\r\n\
    Host: example.com\r\n\
    Connection: keep-alive, X-Secret\r\n\
    Keep-Alive: timeout=5\r\n\
    Proxy-Authorization: Basic YTpi\r\n\
    Proxy-Connection: keep-alive\r\n\
    TE: trailers\r\n\
    Trailer: X-Sum\r\n\
    X-Secret: hop\r\n\
    Transfer-Encoding: chunked\r\n\
    Accept: */*\r\n\r\n";

fn written(edit: &HeadEdit) -> String {
    let mut out = Vec::new();
    write_request_head(&request(REQUEST), "/a?b", edit, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn unedited_head_is_as_received_with_the_new_target() {
    assert_eq!(
        written(&HeadEdit::default()),
        REQUEST.replace("http://example.com/a?b", "/a?b")
    );
}

#[test]
fn hop_by_hop_stripped() {
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        ..HeadEdit::default()
    };
    assert_eq!(
        written(&edit),
        "GET /a?b HTTP/1.1\r\n\
         Host: example.com\r\n\
         Transfer-Encoding: chunked\r\n\
         Accept: */*\r\n\r\n"
    );
}

#[test]
fn framing_and_host_survive_connection_tokens() {
    let head = request(
        "POST / HTTP/1.1\r\nHost: a\r\nConnection: Transfer-Encoding, content-length, host, Accept\r\n\
         Transfer-Encoding: chunked\r\nAccept: x\r\n\r\n",
    );
    let mut out = Vec::new();
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        ..HeadEdit::default()
    };
    write_request_head(&head, "/", &edit, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
}

#[test]
fn via_appended_and_close_emitted() {
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        close: true,
        via: Some("1.1 portcullis".to_owned()),
        ..HeadEdit::default()
    };
    assert_eq!(
        written(&edit),
        "GET /a?b HTTP/1.1\r\n\
         Host: example.com\r\n\
         Transfer-Encoding: chunked\r\n\
         Accept: */*\r\n\
         Connection: close\r\n\
         Via: 1.1 portcullis\r\n\r\n"
    );
}

#[test]
fn close_without_stripping_replaces_connection() {
    let head = request("GET / HTTP/1.1\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\n");
    let mut out = Vec::new();
    let edit = HeadEdit {
        close: true,
        ..HeadEdit::default()
    };
    write_request_head(&head, "/", &edit, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET / HTTP/1.1\r\nKeep-Alive: 5\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn upgrade_kept_when_upgrading() {
    let head = request(
        "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
    );
    let mut out = Vec::new();
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        upgrading: true,
        via: Some("1.1 portcullis".to_owned()),
        ..HeadEdit::default()
    };
    write_request_head(&head, "/ws", &edit, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\
         Connection: upgrade\r\nVia: 1.1 portcullis\r\n\r\n"
    );
    // Without `upgrading` the Upgrade header goes.
    let mut out = Vec::new();
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        ..HeadEdit::default()
    };
    write_request_head(&head, "/ws", &edit, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /ws HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Key: k\r\n\r\n"
    );
}

#[test]
fn response_head_written() {
    let text = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                Proxy-Authenticate: Basic\r\nSec-WebSocket-Accept: x\r\n\r\n";
    let (head, _) = parse_response_head(text.as_bytes(), 1 << 16)
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    assert_eq!(
        write_response_head(&head, &HeadEdit::default(), &mut out),
        4
    );
    assert_eq!(String::from_utf8(out).unwrap(), text);

    // The lines it says it wrote: two kept, two dropped, two added.
    let mut out = Vec::new();
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        upgrading: true,
        close: false,
        via: Some("1.1 portcullis".to_owned()),
    };
    assert_eq!(write_response_head(&head, &edit, &mut out), 4);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\
         Connection: upgrade\r\nVia: 1.1 portcullis\r\n\r\n"
    );

    let (head, _) = parse_response_head(b"HTTP/1.0 200 \r\nKeep-Alive: 1\r\n\r\n", 1 << 16)
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    let edit = HeadEdit {
        strip_hop_by_hop: true,
        close: true,
        ..HeadEdit::default()
    };
    assert_eq!(write_response_head(&head, &edit, &mut out), 1);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.0 200 \r\nConnection: close\r\n\r\n"
    );
}
