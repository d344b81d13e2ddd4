//! parse_response_head.

use crate::protocol::http::HeadError;
use crate::protocol::http1::{parse_response_head, ResponseHead};

const MAX: usize = 32 * 1024;

#[test]
fn simple_response() {
    let text = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello";
    let (head, n) = parse_response_head(text, MAX).unwrap().unwrap();
    assert_eq!(n, text.len() - 5);
    assert_eq!(
        head,
        ResponseHead {
            version: 1,
            status: 200,
            reason: "OK".to_owned(),
            headers: vec![
                ("Content-Length".to_owned(), b"5".to_vec()),
                ("X-A".to_owned(), b"b".to_vec()),
            ],
        }
    );
    assert_eq!(head.header("content-length"), Some(&b"5"[..]));
    assert_eq!(head.header("x-missing"), None);
}

#[test]
fn switching_protocols_with_bytes_after_the_head() {
    let head_text: &[u8] =
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    let mut text = head_text.to_vec();
    text.extend_from_slice(b"\x81\x05hello");
    let (head, n) = parse_response_head(&text, MAX).unwrap().unwrap();
    assert_eq!(n, head_text.len());
    assert_eq!(head.status, 101);
    assert_eq!(head.reason, "Switching Protocols");
    assert_eq!(head.header("upgrade"), Some(&b"websocket"[..]));
    assert_eq!(&text[n..], b"\x81\x05hello");
}

#[test]
fn every_prefix_is_incomplete() {
    let text = b"HTTP/1.0 404 Not Found\r\nServer: x\r\n\r\n";
    for cut in 0..text.len() {
        assert_eq!(parse_response_head(&text[..cut], MAX), Ok(None), "{cut}");
    }
    let (head, n) = parse_response_head(text, MAX).unwrap().unwrap();
    assert_eq!((head.version, head.status, n), (0, 404, text.len()));
}

#[test]
fn empty_reason() {
    let (head, _) = parse_response_head(b"HTTP/1.1 204 \r\n\r\n", MAX)
        .unwrap()
        .unwrap();
    assert_eq!((head.status, head.reason.as_str()), (204, ""));
}

#[test]
fn too_large_at_max() {
    let text = b"HTTP/1.1 200 OK\r\nX-Long: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    assert_eq!(
        parse_response_head(&text[..30], 30),
        Err(HeadError::TooLarge)
    );
    assert_eq!(parse_response_head(text, 30), Err(HeadError::TooLarge));
    assert_eq!(parse_response_head(&text[..29], 30), Ok(None));
    assert!(parse_response_head(text, text.len()).unwrap().is_some());

    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..101 {
        many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(parse_response_head(&many, MAX), Err(HeadError::TooLarge));
}

#[test]
fn malformed() {
    for text in [
        &b"HTTP/2 200 OK\r\n\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
    ] {
        match parse_response_head(text, MAX) {
            Err(HeadError::Malformed(cause)) => assert!(!cause.is_empty()),
            other => panic!("{}: {other:?}", String::from_utf8_lossy(text)),
        }
    }
}
