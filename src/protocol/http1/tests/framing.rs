//! Framing decisions: request_body_kind and response_body_kind.

use super::request;
use crate::protocol::http1::{
    parse_response_head, request_body_kind, response_body_kind, BodyKind, FramingError,
    ResponseHead,
};

fn req_kind(headers: &str) -> Result<BodyKind, FramingError> {
    request_body_kind(&request(&format!(
        "POST /upload HTTP/1.1\r\nHost: a\r\n{headers}\r\n"
    )))
}

fn response(text: &str) -> ResponseHead {
    parse_response_head(text.as_bytes(), 64 * 1024)
        .expect("parses")
        .expect("complete")
        .0
}

fn res_kind(method: &str, status_line: &str, headers: &str) -> Result<BodyKind, FramingError> {
    response_body_kind(
        method,
        &response(&format!("{status_line}\r\n{headers}\r\n")),
    )
}

#[test]
fn request_without_framing_headers_is_empty() {
    assert_eq!(req_kind(""), Ok(BodyKind::Empty));
    assert_eq!(
        request_body_kind(&request("GET / HTTP/1.0\r\n\r\n")),
        Ok(BodyKind::Empty)
    );
}

#[test]
fn request_content_length() {
    assert_eq!(req_kind("Content-Length: 0\r\n"), Ok(BodyKind::Length(0)));
    assert_eq!(req_kind("content-length: 42\r\n"), Ok(BodyKind::Length(42)));
    assert_eq!(req_kind("Content-Length:  7 \r\n"), Ok(BodyKind::Length(7)));
    assert_eq!(
        req_kind("Content-Length: 18446744073709551615\r\n"),
        Ok(BodyKind::Length(u64::MAX))
    );
    assert_eq!(req_kind("Content-Length: 007\r\n"), Ok(BodyKind::Length(7)));
}

#[test]
fn request_invalid_content_length() {
    for value in [
        "+5",
        "-5",
        "5a",
        "0x5",
        "5 5",
        "1e3",
        "18446744073709551616",
        "99999999999999999999999",
    ] {
        assert_eq!(
            req_kind(&format!("Content-Length: {value}\r\n")),
            Err(FramingError::InvalidContentLength),
            "{value}"
        );
    }
    assert_eq!(
        req_kind("Content-Length:\r\n"),
        Err(FramingError::InvalidContentLength)
    );
}

#[test]
fn request_several_content_lengths() {
    for headers in [
        "Content-Length: 5\r\nContent-Length: 5\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 5, 5\r\n",
        "Content-Length: 5,6\r\n",
        "Content-Length: ,5\r\n",
    ] {
        assert_eq!(
            req_kind(headers),
            Err(FramingError::SeveralContentLengths),
            "{headers:?}"
        );
    }
}

#[test]
fn request_chunked() {
    assert_eq!(
        req_kind("Transfer-Encoding: chunked\r\n"),
        Ok(BodyKind::Chunked)
    );
    assert_eq!(
        req_kind("transfer-encoding: CHUNKED\r\n"),
        Ok(BodyKind::Chunked)
    );
    assert_eq!(
        req_kind("Transfer-Encoding: gzip, chunked\r\n"),
        Ok(BodyKind::Chunked)
    );
    assert_eq!(
        req_kind("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"),
        Ok(BodyKind::Chunked)
    );
}

#[test]
fn request_smuggling_attempts_refused() {
    let cases: [(&str, FramingError); 9] = [
        (
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            FramingError::ContentLengthAndTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
            FramingError::ContentLengthAndTransferEncoding,
        ),
        (
            "Transfer-Encoding: gzip\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked, gzip\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked, chunked\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
        (
            "Transfer-Encoding: xchunked\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked;x=1\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
        (
            "Transfer-Encoding:\r\n",
            FramingError::UnsupportedTransferEncoding,
        ),
    ];
    for (headers, expected) in cases {
        assert_eq!(req_kind(headers), Err(expected), "{headers:?}");
    }
}

#[test]
fn request_http10_with_transfer_encoding_refused() {
    let head = request("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(
        request_body_kind(&head),
        Err(FramingError::TransferEncodingInHttp10)
    );
    let head = request("POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\n");
    assert_eq!(request_body_kind(&head), Ok(BodyKind::Length(3)));
}

#[test]
fn response_without_body_whatever_headers_say() {
    let framed = "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n";
    assert_eq!(
        res_kind("HEAD", "HTTP/1.1 200 OK", framed),
        Ok(BodyKind::Empty)
    );
    assert_eq!(
        res_kind("HEAD", "HTTP/1.1 200 OK", "Content-Length: 10\r\n"),
        Ok(BodyKind::Empty)
    );
    for status in [
        "100 Continue",
        "101 Switching Protocols",
        "103 Early Hints",
        "204 No Content",
        "304 Not Modified",
    ] {
        assert_eq!(
            res_kind("GET", &format!("HTTP/1.1 {status}"), framed),
            Ok(BodyKind::Empty),
            "{status}"
        );
    }
    // 205 and 200 are not special.
    assert_eq!(
        res_kind("GET", "HTTP/1.1 205 Reset Content", "Content-Length: 0\r\n"),
        Ok(BodyKind::Length(0))
    );
}

#[test]
fn response_framing() {
    assert_eq!(
        res_kind("GET", "HTTP/1.1 200 OK", "Content-Length: 12\r\n"),
        Ok(BodyKind::Length(12))
    );
    assert_eq!(
        res_kind("GET", "HTTP/1.1 200 OK", "Transfer-Encoding: chunked\r\n"),
        Ok(BodyKind::Chunked)
    );
    assert_eq!(
        res_kind(
            "POST",
            "HTTP/1.1 200 OK",
            "Transfer-Encoding: gzip, chunked\r\n"
        ),
        Ok(BodyKind::Chunked)
    );
    assert_eq!(
        res_kind("GET", "HTTP/1.1 200 OK", "Transfer-Encoding: gzip\r\n"),
        Ok(BodyKind::UntilClose)
    );
    assert_eq!(
        res_kind(
            "GET",
            "HTTP/1.1 200 OK",
            "Transfer-Encoding: chunked, gzip\r\n"
        ),
        Ok(BodyKind::UntilClose)
    );
    assert_eq!(
        res_kind("GET", "HTTP/1.1 200 OK", ""),
        Ok(BodyKind::UntilClose)
    );
    assert_eq!(
        res_kind("GET", "HTTP/1.0 200 OK", ""),
        Ok(BodyKind::UntilClose)
    );
}

#[test]
fn response_bad_framing_refused() {
    assert_eq!(
        res_kind(
            "GET",
            "HTTP/1.1 200 OK",
            "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"
        ),
        Err(FramingError::ContentLengthAndTransferEncoding)
    );
    assert_eq!(
        res_kind(
            "GET",
            "HTTP/1.1 200 OK",
            "Content-Length: 3\r\nContent-Length: 3\r\n"
        ),
        Err(FramingError::SeveralContentLengths)
    );
    assert_eq!(
        res_kind("GET", "HTTP/1.1 200 OK", "Content-Length: 3, 4\r\n"),
        Err(FramingError::SeveralContentLengths)
    );
    assert_eq!(
        res_kind("GET", "HTTP/1.1 200 OK", "Content-Length: -1\r\n"),
        Err(FramingError::InvalidContentLength)
    );
}

#[test]
fn errors_have_a_human_cause() {
    assert_eq!(
        FramingError::ContentLengthAndTransferEncoding.to_string(),
        "Content-Length and Transfer-Encoding together"
    );
    assert_eq!(
        FramingError::SeveralContentLengths.to_string(),
        "several Content-Length values"
    );
    assert_eq!(
        FramingError::InvalidChunkSize.to_string(),
        "invalid chunk size"
    );
    let boxed: Box<dyn std::error::Error> = Box::new(FramingError::BadLineEnding);
    assert!(!boxed.to_string().is_empty());
}
