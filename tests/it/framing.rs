//! HTTP/1.1 message framing inside an inspected tunnel: chunked bodies of
//! awkward sizes and chunkings both ways (with trailers), bodiless responses,
//! 100-continue, pipelining, close-delimited responses, smuggling attempts
//! from either side, and the response timeout.

use crate::support;

use std::io::ErrorKind;
use std::time::Duration;

use portcullis::policy::parse_cli_inspect;
use portcullis::{CloseReason, Policy, SpawnedProxy};
use support::*;

const BOUNDARIES: [usize; 16] = [
    1, 2, 15, 16, 17, 255, 256, 4095, 4096, 4097, 16383, 16384, 16385, 65535, 65536, 65537,
];

fn inspect_policy(origin: &Origin) -> Policy {
    Policy::from_rules(&[parse_cli_inspect(&origin.target()).expect("rule")]).expect("policy")
}

/// Chunk sizes for variant `v`: 0 one chunk of everything, 1 the boundary set, 2 single bytes then big.
fn chunking(v: u32, len: u64) -> Vec<usize> {
    match v {
        0 => vec![len.max(1) as usize],
        1 => BOUNDARIES.to_vec(),
        _ => vec![1, 1, 3, 8192, 7, 100_000],
    }
}

/// The origin: `/chunked/LEN/SEED/V` answers a chunked body of LEN bytes of
/// stream SEED with chunking V and a trailer; other paths by name.
fn origin() -> Origin {
    Origin::start(|r| {
        let parts: Vec<&str> = r.target.split('/').collect();
        match parts.get(1).copied() {
            Some("chunked") => {
                let len: u64 = parts[2].parse().unwrap();
                let seed: u64 = parts[3].parse().unwrap();
                let v: u32 = parts[4].parse().unwrap();
                Reply::Stream {
                    head: "HTTP/1.1 200 OK\r\nTrailer: X-Resp-Trailer\r\n".into(),
                    seed,
                    len,
                    chunked: Some((
                        chunking(v, len),
                        vec![("X-Resp-Trailer".into(), format!("n={len}"))],
                    )),
                }
            }
            Some("head") => Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n".to_vec()),
            Some("204") => Reply::Bytes(b"HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n".to_vec()),
            Some("304") => Reply::Bytes(
                b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 10\r\n\r\n".to_vec(),
            ),
            Some("until-close") => {
                let mut b = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n"
                    .to_vec();
                b.extend(DataGen::new(77).bytes(300_000));
                Reply::Close(b)
            }
            Some("cl-te") => Reply::Bytes(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                    .to_vec(),
            ),
            Some("two-cl") => Reply::Bytes(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(),
            ),
            Some("garbage") => Reply::Bytes(b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec()),
            Some("hang") => Reply::Hang,
            Some("drop") => Reply::Drop,
            Some("extra") => {
                Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloX".to_vec())
            }
            _ => ok(&format!("{} {} {}", r.method, r.target, r.body.len)),
        }
    })
}

fn setup() -> (Origin, SpawnedProxy, HttpConn) {
    let origin = origin();
    let proxy = start_proxy(inspect_policy(&origin));
    let c = HttpConn::new(connect_via_http(proxy_addr(&proxy), &origin.target()));
    (origin, proxy, c)
}

fn post_chunked_head(path: &str, host: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nTrailer: X-Req-Trailer\r\n\r\n"
    )
}

/// One chunked exchange of `len` bytes each way with chunking `v` on `c`.
#[track_caller]
fn chunked_exchange(c: &mut HttpConn, origin: &Origin, len: u64, v: u32, nth: usize) {
    let (up_seed, down_seed) = (len ^ 0xa5a5 ^ v as u64, len ^ 0x5a5a ^ v as u64);
    let path = format!("/chunked/{len}/{down_seed}/{v}");
    c.send(post_chunked_head(&path, &origin.target()));
    write_chunked(
        &mut c.w,
        up_seed,
        len,
        &chunking(v, len),
        &[("X-Req-Trailer", &format!("n={len}"))],
    )
    .expect("send chunked request body");
    let r = c.response("POST");
    let what = format!("len {len} chunking {v}");
    assert_eq!(r.status, 200, "{what}: {}", r.raw_head);
    assert_eq!(
        r.header("Transfer-Encoding"),
        Some("chunked"),
        "{what}: {}",
        r.raw_head
    );
    assert_eq!(r.body.len, len, "{what}: response body length");
    assert_eq!(
        hex(&r.body.hash),
        hex(&expected_hash(down_seed, len)),
        "{what}: response body corrupted"
    );
    assert_eq!(
        r.body.trailers,
        vec![("X-Resp-Trailer".to_string(), format!("n={len}"))],
        "{what}: response trailers"
    );
    let reqs = origin.requests();
    let got = &reqs[nth];
    assert_eq!(got.target, path);
    assert_eq!(
        got.body.len, len,
        "{what}: request body length at the origin"
    );
    assert_eq!(
        hex(&got.body.hash),
        hex(&expected_hash(up_seed, len)),
        "{what}: request body corrupted"
    );
    assert_eq!(
        got.body.trailers,
        vec![("X-Req-Trailer".to_string(), format!("n={len}"))],
        "{what}: request trailers"
    );
}

#[test]
fn chunked_bodies_and_trailers_both_ways() {
    let (origin, proxy, mut c) = setup();
    let mut nth = 0;
    for len in [0u64, 1, 4095, 4096, 4097, 65536, 200_003] {
        for v in 0..3 {
            chunked_exchange(&mut c, &origin, len, v, nth);
            nth += 1;
        }
    }
    assert_eq!(origin.accepted(), 1, "all on one upstream connection");
    drop(c);
    wait_no_open_sessions(&proxy);
    let s = proxy.stats();
    assert_eq!(s.requests, nth as u64);
    assert_eq!(s.requests_allowed, nth as u64);
}

#[test]
fn chunked_64mib_each_way_streamed() {
    let (origin, proxy, mut c) = setup();
    chunked_exchange(&mut c, &origin, 64 << 20, 1, 0);
    // And the connection is still good for a small one.
    chunked_exchange(&mut c, &origin, 10, 2, 1);
    drop(c);
    wait_no_open_sessions(&proxy);
    let s = proxy.stats();
    assert!(s.bytes_up > 64 << 20, "bytes_up {}", s.bytes_up);
    assert!(s.bytes_down > 64 << 20, "bytes_down {}", s.bytes_down);
}

#[test]
fn bodiless_responses_head_204_304() {
    let (origin, _proxy, mut c) = setup();
    let host = origin.target();
    c.send(format!("HEAD /head HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    let r = c.response("HEAD");
    assert_eq!(r.status, 200, "{}", r.raw_head);
    assert_eq!(r.header("Content-Length"), Some("1234"));
    assert_eq!(r.body.len, 0);
    // The next response parses: no body bytes were expected after the HEAD answer.
    let r = c.get(&host, "/after-head");
    assert_eq!(r.text(), "GET /after-head 0");

    let r = c.get(&host, "/204");
    assert_eq!(r.status, 204, "{}", r.raw_head);
    let r = c.get(&host, "/after-204");
    assert_eq!(r.text(), "GET /after-204 0");

    let r = c.get(&host, "/304");
    assert_eq!(r.status, 304, "{}", r.raw_head);
    let r = c.get(&host, "/after-304");
    assert_eq!(r.text(), "GET /after-304 0");

    // HEAD, 204 and 304 pipelined, then a GET.
    c.send(format!(
        "HEAD /head HTTP/1.1\r\nHost: {host}\r\n\r\nGET /204 HTTP/1.1\r\nHost: {host}\r\n\r\n\
         GET /304 HTTP/1.1\r\nHost: {host}\r\n\r\nGET /last HTTP/1.1\r\nHost: {host}\r\n\r\n"
    ));
    assert_eq!(c.response("HEAD").status, 200);
    assert_eq!(c.response("GET").status, 204);
    assert_eq!(c.response("GET").status, 304);
    assert_eq!(c.response("GET").text(), "GET /last 0");
}

#[test]
fn expect_100_continue_then_final() {
    let (origin, _proxy, mut c) = setup();
    let host = origin.target();
    c.send(format!("POST /continue HTTP/1.1\r\nHost: {host}\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    // The body is sent only once the interim answer came through: the
    // proxy's, since the origin never sees the `Expect` (it would answer
    // one with its own `100`, which would make two).
    let interim = c.response("POST");
    assert_eq!(interim.status, 100, "{}", interim.raw_head);
    c.send("hello");
    let r = c.response("POST");
    assert_eq!(r.status, 200, "{}", r.raw_head);
    assert_eq!(r.text(), "POST /continue 5");
    assert_eq!(origin.requests()[0].body.bytes, b"hello");
    assert_eq!(origin.requests()[0].header("expect"), None);
    let r = c.get(&host, "/next");
    assert_eq!(r.text(), "GET /next 0");
}

#[test]
fn three_pipelined_requests_in_one_write() {
    let (origin, _proxy, mut c) = setup();
    let host = origin.target();
    c.send(format!("GET /one HTTP/1.1\r\nHost: {host}\r\n\r\n\
         POST /two HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\n\r\nabc\
         POST /three HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"));
    assert_eq!(c.response("GET").text(), "GET /one 0");
    assert_eq!(c.response("POST").text(), "POST /two 3");
    assert_eq!(c.response("POST").text(), "POST /three 2");
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[1].body.bytes, b"abc");
    assert_eq!(reqs[2].body.bytes, b"xy");
}

#[test]
fn close_delimited_response_ends_at_upstream_eof() {
    let (origin, proxy, mut c) = setup();
    let host = origin.target();
    let r = c.get(&host, "/until-close");
    assert_eq!(r.status, 200, "{}", r.raw_head);
    assert_eq!(r.body.len, 300_000, "the whole close-delimited body");
    assert_eq!(hex(&r.body.hash), hex(&expected_hash(77, 300_000)));
    // read_response read to EOF: the proxy closed the client connection.
    c.expect_eof("after a close-delimited response");
    wait_no_open_sessions(&proxy);
}

/// A smuggling attempt from the client: 400, nothing reaches the origin, the connection closes.
#[track_caller]
fn client_smuggling(request: &str) {
    let (origin, _proxy, mut c) = setup();
    let host = origin.target();
    let request = request.replace("Host: 127.0.0.1\r\n", &format!("Host: {host}\r\n"));
    c.send(&request);
    let r = c.response("POST");
    assert_eq!(r.status, 400, "{request:?}: {}", r.raw_head);
    assert!(r.header("X-Proxy-Error").is_some(), "{}", r.raw_head);
    c.expect_eof("after a smuggling attempt");
    assert!(
        origin.requests().is_empty(),
        "{request:?} reached the origin: {:?}",
        origin.requests()
    );
}

#[test]
fn request_with_content_length_and_chunked_is_400() {
    client_smuggling(
        "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n\
         0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    );
}

#[test]
fn request_with_two_content_lengths_is_400() {
    client_smuggling(
        "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 30\r\n\r\nhello",
    );
}

/// A response the proxy cannot frame: 502 before any of it reached the client, then close.
#[track_caller]
fn upstream_breaks(path: &str) {
    let (origin, proxy, mut c) = setup();
    let host = origin.target();
    // A good exchange first: the connection was working.
    assert_eq!(c.get(&host, "/fine").text(), "GET /fine 0");
    let r = c.get(&host, path);
    assert_eq!(r.status, 502, "{path}: {}", r.raw_head);
    assert!(r.header("X-Proxy-Error").is_some(), "{}", r.raw_head);
    c.expect_eof("after a 502");
    wait_no_open_sessions(&proxy);
}

#[test]
fn response_with_content_length_and_chunked_is_502() {
    upstream_breaks("/cl-te");
}

#[test]
fn response_with_two_content_lengths_is_502() {
    upstream_breaks("/two-cl");
}

#[test]
fn garbage_response_is_502() {
    upstream_breaks("/garbage");
}

#[test]
fn upstream_closing_before_answering_is_502() {
    upstream_breaks("/drop");
}

#[test]
fn no_response_head_in_time_is_504() {
    let origin = origin();
    let proxy = spawn(
        proxy_builder(inspect_policy(&origin)).timeouts(timeouts(|t| {
            t.response = Duration::from_millis(500);
        })),
    );
    let mut c = HttpConn::new(connect_via_http(proxy_addr(&proxy), &origin.target()));
    let host = origin.target();
    assert_eq!(c.get(&host, "/fine").text(), "GET /fine 0");
    let r = c.get(&host, "/hang");
    assert_eq!(r.status, 504, "{}", r.raw_head);
    assert!(r.header("X-Proxy-Error").is_some(), "{}", r.raw_head);
    c.expect_eof("after a 504");
    assert_eq!(origin.requests().len(), 2, "the origin did get the request");
    wait_no_open_sessions(&proxy);
    let s = proxy.stats();
    assert_eq!(s.closed.get(CloseReason::ResponseTimeout), 1, "{s:?}");
    assert_eq!(s.closed.total(), 1);
}

#[test]
fn oversized_request_head_is_431() {
    let (origin, _proxy, mut c) = setup();
    let host = origin.target();
    assert_eq!(c.get(&host, "/fine").text(), "GET /fine 0");
    let big = "a".repeat(40 * 1024);
    c.send(format!(
        "GET /big HTTP/1.1\r\nHost: {host}\r\nX-Big: {big}\r\n\r\n"
    ));
    let r = c.response("GET");
    assert_eq!(r.status, 431, "{}", r.raw_head);
    c.expect_eof("after 431");
    assert_eq!(origin.requests().len(), 1);
}

#[test]
fn connect_inside_an_inspected_tunnel_is_405() {
    let (origin, _proxy, mut c) = setup();
    c.send("CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n");
    let r = c.response("CONNECT");
    assert_eq!(r.status, 405, "{}", r.raw_head);
    c.expect_eof("after 405");
    assert!(origin.requests().is_empty());
}

#[test]
fn malformed_request_is_400() {
    let (origin, _proxy, mut c) = setup();
    c.send("GET /a b c\r\n\r\n");
    let r = c.response("GET");
    assert_eq!(r.status, 400, "{}", r.raw_head);
    c.expect_eof("after 400");
    assert!(origin.requests().is_empty());
}

/// The response timeout runs from when the request is wholly sent: an upload
/// that takes longer than it is not cut off with a 504.
#[test]
fn slow_upload_is_not_a_response_timeout() {
    let origin = origin();
    let proxy = spawn(
        proxy_builder(inspect_policy(&origin)).timeouts(timeouts(|t| {
            t.response = Duration::from_millis(300);
        })),
    );
    let mut c = HttpConn::new(connect_via_http(proxy_addr(&proxy), &origin.target()));
    let host = origin.target();
    c.send(format!(
        "POST /fine HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3000\r\n\r\n"
    ));
    // The upload's gaps are reads that find nothing: no answer (no 504)
    // before the request is wholly sent.
    c.w.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    for _ in 0..10 {
        match std::io::BufRead::fill_buf(&mut c.r) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("an answer in the middle of the upload: {other:?}"),
        }
        c.send([b'x'; 300]);
    }
    c.w.set_read_timeout(Some(BULK)).unwrap();
    let r = c.response("POST");
    assert_eq!(
        r.status, 200,
        "a 1 s upload under a 300 ms response timeout: {}",
        r.raw_head
    );
    assert_eq!(r.text(), "POST /fine 3000");
    assert_eq!(proxy.stats().closed.get(CloseReason::ResponseTimeout), 0);
}

/// A close-delimited response is the last thing on its connection: no answer
/// to a request pipelined behind it may be appended to its body.
#[test]
fn nothing_follows_a_close_delimited_response() {
    let (origin, proxy, mut c) = setup();
    let host = origin.target();
    c.send(format!("GET /until-close HTTP/1.1\r\nHost: {host}\r\n\r\nGET /fine HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    let r = c.response("GET");
    assert_eq!(r.status, 200, "{}", r.raw_head);
    assert_eq!(r.body.len, 300_000, "the body is exactly the upstream's");
    assert_eq!(hex(&r.body.hash), hex(&expected_hash(77, 300_000)));
    c.expect_eof("after a close-delimited response");
    wait_no_open_sessions(&proxy);
}

/// A client waiting for `100 Continue` gets the proxy's own, and once its
/// body is up, an upstream that never answers gets it a 504 in time, not
/// a session held for ever.
#[test]
fn expect_continue_to_a_silent_upstream_is_504() {
    // An upstream that reads and never writes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = silent.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = silent.accept() {
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        }
    });
    let policy = Policy::from_rules(&[parse_cli_inspect(&target).expect("rule")]).expect("policy");
    let proxy = spawn(proxy_builder(policy).timeouts(timeouts(|t| {
        t.response = Duration::from_millis(500);
    })));
    let mut c = HttpConn::new(connect_via_http(proxy_addr(&proxy), &target));
    let host = target.clone();
    c.send(format!(
        "PUT /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n"
    ));
    let interim = c.response("PUT");
    assert_eq!(interim.status, 100, "{}", interim.raw_head);
    c.send("0123456789");
    let r = c.response("PUT");
    assert_eq!(r.status, 504, "{}", r.raw_head);
    c.expect_eof("after a 504");
    drop(c);
    wait_no_open_sessions(&proxy);
    assert_eq!(proxy.stats().closed.get(CloseReason::ResponseTimeout), 1);
}

/// Bytes from the upstream that answer no request close the connection
/// without an answer: a 502 would pass for the reply to the client's next
/// request.
#[test]
fn unsolicited_upstream_bytes_close_without_an_answer() {
    let (origin, proxy, mut c) = setup();
    let host = origin.target();
    let r = c.get(&host, "/extra");
    assert_eq!(
        (r.status, r.text()),
        (200, "hello".to_string()),
        "{}",
        r.raw_head
    );
    c.expect_eof("after bytes that answer nothing");
    wait_no_open_sessions(&proxy);
}
