use super::*;

const MAX: usize = 32 * 1024;

fn parse_ok(buf: &[u8]) -> (RequestHead, usize) {
    parse_request_head(buf, MAX)
        .expect("parses")
        .expect("complete")
}

/// Every strict prefix of a complete head is incomplete; the whole gives the
/// same head and length whether or not bytes follow it.
fn check_splits(head: &[u8]) -> RequestHead {
    for cut in 0..head.len() {
        assert_eq!(
            parse_request_head(&head[..cut], MAX),
            Ok(None),
            "prefix of {cut} bytes"
        );
    }
    let (parsed, n) = parse_ok(head);
    assert_eq!(n, head.len());
    let mut more = head.to_vec();
    more.extend_from_slice(b"\x16\x03\x01 pipelined");
    assert_eq!(parse_ok(&more), (parsed.clone(), head.len()));
    parsed
}

#[test]
fn connect_authority_form() {
    let head = check_splits(
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic YTpi\r\n\r\n",
    );
    assert_eq!(head.method, "CONNECT");
    assert_eq!(head.target, "example.com:443");
    assert_eq!(head.version, 1);
    assert_eq!(head.headers.len(), 2);
    assert_eq!(
        head.headers[0],
        ("Host".to_owned(), b"example.com:443".to_vec())
    );
    assert_eq!(head.header("proxy-authorization"), Some(&b"Basic YTpi"[..]));
    assert_eq!(head.header("X-Missing"), None);
}

#[test]
fn connect_ipv6_http10_no_headers() {
    let head = check_splits(b"CONNECT [::1]:443 HTTP/1.0\r\n\r\n");
    assert_eq!(head.target, "[::1]:443");
    assert_eq!(head.version, 0);
    assert!(head.headers.is_empty());
}

#[test]
fn pipelined_bytes_are_not_consumed() {
    let buf = b"CONNECT a:1 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    let (head, n) = parse_ok(buf);
    assert_eq!(head.target, "a:1");
    assert_eq!(&buf[n..], b"GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn header_names_as_sent_values_raw() {
    let (head, _) =
        parse_ok(b"CONNECT a:1 HTTP/1.1\r\nX-CuStOm:  v\xe9l\xffue \r\nx-custom: second\r\n\r\n");
    assert_eq!(head.headers[0].0, "X-CuStOm");
    assert_eq!(head.header("x-custom"), Some(&b"v\xe9l\xffue"[..]));
    assert_eq!(head.headers[1].1, b"second");
}

#[test]
fn leading_empty_lines_are_skipped_and_counted() {
    let buf = b"\r\n\r\nCONNECT a:1 HTTP/1.1\r\n\r\n";
    let head = check_splits(buf);
    assert_eq!(head.method, "CONNECT");
}

#[test]
fn bare_lf_line_endings() {
    let head = check_splits(b"CONNECT a:1 HTTP/1.1\nHost: a\n\n");
    assert_eq!(head.header("host"), Some(&b"a"[..]));
}

#[test]
fn huge_header_is_too_large() {
    let mut buf = b"CONNECT a:1 HTTP/1.1\r\nX-Big: ".to_vec();
    buf.extend(vec![b'x'; 64 * 1024]);
    // Still incomplete, but over the limit.
    assert_eq!(parse_request_head(&buf, MAX), Err(HeadError::TooLarge));
    // Complete, but over the limit.
    buf.extend_from_slice(b"\r\n\r\n");
    assert_eq!(parse_request_head(&buf, MAX), Err(HeadError::TooLarge));
    // Under the limit, incomplete: wait.
    assert_eq!(parse_request_head(&buf[..MAX - 1], MAX), Ok(None));
}

#[test]
fn limit_is_inclusive() {
    let head = b"CONNECT a:1 HTTP/1.1\r\n\r\n";
    assert!(matches!(parse_request_head(head, head.len()), Ok(Some((_, n))) if n == head.len()));
    assert_eq!(
        parse_request_head(head, head.len() - 1),
        Err(HeadError::TooLarge)
    );
    assert_eq!(parse_request_head(b"", 0), Err(HeadError::TooLarge));
}

#[test]
fn too_many_headers_is_too_large() {
    let mut buf = b"CONNECT a:1 HTTP/1.1\r\n".to_vec();
    for i in 0..MAX_HEADERS {
        buf.extend(format!("X-H{i}: v\r\n").bytes());
    }
    let mut exact = buf.clone();
    exact.extend_from_slice(b"\r\n");
    assert_eq!(parse_ok(&exact).0.headers.len(), MAX_HEADERS);
    buf.extend_from_slice(b"X-One-Too-Many: v\r\n\r\n");
    assert_eq!(parse_request_head(&buf, MAX), Err(HeadError::TooLarge));
}

fn malformed(buf: &[u8]) -> String {
    match parse_request_head(buf, MAX) {
        Err(HeadError::Malformed(cause)) => cause,
        other => panic!("{buf:?}: expected Malformed, got {other:?}"),
    }
}

#[test]
fn garbage_is_malformed() {
    assert_eq!(malformed(b"\x16\x03\x01\x02\x00"), "invalid request line");
    assert_eq!(
        malformed(b"hello there friend\r\n\r\n"),
        "invalid or unsupported HTTP version"
    );
    assert_eq!(
        malformed(b"CONNECT  a:1 HTTP/1.1\r\n\r\n"),
        "invalid request line"
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nBad Name: v\r\n\r\n"),
        "invalid header name"
    );
    assert_eq!(
        malformed(b"CONNECT a:1 HTTP/1.1\r\nX: a\x00b\r\n\r\n"),
        "invalid header value"
    );
    assert_eq!(malformed(b"CONNECT a:1 HTTP/1.1\rX"), "invalid line ending");
}

#[test]
fn http2_preface_and_http09_are_malformed() {
    malformed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    malformed(b"CONNECT a:1 HTTP/2.0\r\n\r\n");
    malformed(b"CONNECT a:1 HTTP/1.2\r\n\r\n");
    malformed(b"GET /\r\n");
}

fn b64(user_pass: &str) -> String {
    // A tiny independent encoder, for the tests only.
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in user_pass.as_bytes().chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        out.push_str(&"=="[..3 - chunk.len()]);
    }
    out
}

#[test]
fn basic_auth_good() {
    assert!(basic_auth_matches(
        b"Basic YWxpY2U6czNjcmV0",
        "alice",
        "s3cret"
    ));
    assert!(basic_auth_matches(
        b"basic   YWxpY2U6czNjcmV0  ",
        "alice",
        "s3cret"
    ));
    assert!(basic_auth_matches(b"BASIC YTpi", "a", "b"));
    // Padded and unpadded, all three tail lengths.
    for (user, pass) in [
        ("a", "b"),
        ("ab", "c"),
        ("abc", "de"),
        ("", ""),
        ("u", "p:w ü"),
    ] {
        let padded = format!("Basic {}", b64(&format!("{user}:{pass}")));
        assert!(
            basic_auth_matches(padded.as_bytes(), user, pass),
            "{padded}"
        );
        let unpadded = padded.trim_end_matches('=');
        assert!(
            basic_auth_matches(unpadded.as_bytes(), user, pass),
            "{unpadded}"
        );
    }
}

#[test]
fn basic_auth_bad() {
    let good = format!("Basic {}", b64("alice:s3cret"));
    assert!(!basic_auth_matches(good.as_bytes(), "alice", "s3cre"));
    assert!(!basic_auth_matches(good.as_bytes(), "alice", "s3cret!"));
    assert!(!basic_auth_matches(good.as_bytes(), "bob", "s3cret"));
    assert!(!basic_auth_matches(good.as_bytes(), "alice:s3cret", ""));
}

#[test]
fn basic_auth_malformed() {
    for value in [
        &b""[..],
        b"Basic",
        b"Basic ",
        b"BasicYTpi",
        b"Basic\tYTpi",
        b"Bearer YTpi",
        b"Digest YTpi",
        b"Basic YTpi=",
        b"Basic YTp",
        b"Basic YTpiY",
        b"Basic YT=pi",
        b"Basic YTpj",
        b"Basic YT!i",
        b"Basic YTpi YTpi",
        b"Basic YTpi\r\n",
        b"Basic ===",
        b"Basic \xff",
    ] {
        assert!(!basic_auth_matches(value, "a", "b"), "{value:?}");
    }
}

fn response_text(status: u16, cause: &str, reason: &str, extra: &[(&str, &str)]) -> String {
    String::from_utf8(error_response(status, cause, reason, extra)).unwrap()
}

#[test]
fn error_response_layout() {
    let text = response_text(
        407,
        "auth required",
        "proxy authentication required",
        &[("Proxy-Authenticate", "Basic realm=\"portcullis\"")],
    );
    assert_eq!(
        text,
        "HTTP/1.1 407 Proxy Authentication Required\r\n\
         X-Proxy-Error: auth required\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: 30\r\n\
         Connection: close\r\n\
         Proxy-Authenticate: Basic realm=\"portcullis\"\r\n\
         \r\n\
         proxy authentication required\n"
    );
}

#[test]
fn error_response_phrases_and_length() {
    for (status, phrase) in [
        (200, "OK"),
        (400, "Bad Request"),
        (403, "Forbidden"),
        (405, "Method Not Allowed"),
        (408, "Request Timeout"),
        (413, "Content Too Large"),
        (431, "Request Header Fields Too Large"),
        (500, "Internal Server Error"),
        (502, "Bad Gateway"),
        (503, "Service Unavailable"),
        (504, "Gateway Timeout"),
        (599, "Error"),
    ] {
        let text = response_text(status, "c", "dénié", &[]);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} {phrase}\r\n")),
            "{text}"
        );
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "dénié\n");
        assert!(head.contains(&format!("\r\nContent-Length: {}\r", body.len())));
    }
}

#[test]
fn error_response_cannot_be_injected() {
    let hostile = "evil.com\r\nSet-Cookie: a=b\r\n\r\nHTTP/1.1 200 OK\n\0\x7f\u{85}";
    let bytes = error_response(
        403,
        &format!("denied: {hostile}"),
        &format!("connection to {hostile} refused"),
        &[("X-Target\r\nX-Evil", hostile)],
    );
    // The response must re-parse with exactly our headers, in the same shape.
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut resp = httparse::Response::new(&mut headers);
    let n = match resp.parse(&bytes).unwrap() {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => panic!("incomplete"),
    };
    assert_eq!(resp.code, Some(403));
    let names: Vec<&str> = resp.headers.iter().map(|h| h.name).collect();
    assert_eq!(
        names,
        [
            "X-Proxy-Error",
            "Content-Type",
            "Content-Length",
            "Connection",
            "X-TargetX-Evil"
        ]
    );
    let body = &bytes[n..];
    let len: usize = std::str::from_utf8(resp.headers[2].value)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(body.len(), len);
    assert_eq!(body.iter().filter(|&&b| b == b'\n').count(), 1);
    assert!(body.ends_with(b"\n"));
    assert!(!bytes.iter().any(|&b| b == 0 || b == 0x7f));
}

#[test]
fn basic_auth_credentials_split_at_the_first_colon() {
    let v = format!("Basic {}", b64("alice:pa:ss w"));
    assert_eq!(
        basic_auth_credentials(v.as_bytes()),
        Some((b"alice".to_vec(), b"pa:ss w".to_vec()))
    );
    let v = format!("basic  {}", b64(":"));
    assert_eq!(
        basic_auth_credentials(v.as_bytes()),
        Some((Vec::new(), Vec::new()))
    );
    let v = format!("Basic {}", b64("nocolon"));
    assert_eq!(basic_auth_credentials(v.as_bytes()), None);
    assert_eq!(basic_auth_credentials(b"Bearer YTpi"), None);
    assert_eq!(basic_auth_credentials(b"Basic YT!i"), None);
}

// ---- HeadGate ----

type Parsed = Result<Option<(RequestHead, usize)>, HeadError>;

/// Feeds `bytes` one at a time through a gate, as a session trickled a
/// byte per read would: returns the parses let through, and the first
/// result other than "more" with the length it came at.
fn trickle(bytes: &[u8], max: usize) -> (usize, Option<(usize, Parsed)>) {
    let mut gate = HeadGate::default();
    let mut parses = 0;
    for len in 0..=bytes.len() {
        if !gate.due(&bytes[..len], max, false) {
            continue;
        }
        parses += 1;
        let parsed = parse_request_head(&bytes[..len], max);
        gate.parsed(&parsed);
        if parsed != Ok(None) {
            return (parses, Some((len, parsed)));
        }
    }
    (parses, None)
}

/// `head`, trickled a byte at a time, completes exactly when its empty
/// line arrives, after at most 20 parses.
fn completes_in_few_parses(head: &[u8]) {
    let (parses, outcome) = trickle(head, MAX);
    let (at, parsed) = outcome.expect("the head completes");
    assert_eq!(
        at,
        head.len(),
        "complete exactly when its empty line arrives"
    );
    assert_eq!(parsed.unwrap().unwrap().1, head.len());
    assert!(parses <= 20, "{parses} parses for {} bytes", head.len());
}

#[test]
fn a_head_trickled_a_byte_at_a_time_is_parsed_a_few_times_not_once_a_byte() {
    let mut head = b"CONNECT example.test:443 HTTP/1.1\r\n".to_vec();
    // Thirty long headers (a hundred is the most a head may have).
    for _ in 0..30 {
        head.extend_from_slice(b"X-Filler: ");
        head.extend_from_slice(&[b'f'; 1000]);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    // Doubling from 1 byte to 30 KiB, plus the empty line: ~17, not 30,000.
    completes_in_few_parses(&head);
    // At the limit, the same trickle is refused as too large, once.
    let (_, outcome) = trickle(&head[..head.len() - 2], 16 * 1024);
    assert_eq!(
        outcome.map(|(n, r)| (n, r.err())),
        Some((16 * 1024, Some(HeadError::TooLarge)))
    );
}

#[test]
fn the_gate_lets_through_a_head_ending_however_it_is_split() {
    // Every line ending httparse takes, the empty line split at every byte:
    // the gated parse completes at the same length as an ungated one.
    for head in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/1.1\nHost: a\n\n",
        b"GET / HTTP/1.1\r\nHost: a\n\r\n",
        b"GET / HTTP/1.1\nHost: a\r\n\n",
        b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        let ungated = (0..=head.len())
            .find(|&n| parse_request_head(&head[..n], MAX) != Ok(None))
            .unwrap();
        let (_, outcome) = trickle(head, MAX);
        assert_eq!(outcome.map(|(n, _)| n), Some(ungated), "{head:?}");
        // Two pieces, cut anywhere.
        for cut in 0..head.len() {
            let mut gate = HeadGate::default();
            let first = gate.due(&head[..cut], MAX, false);
            if first {
                let parsed = parse_request_head(&head[..cut], MAX);
                gate.parsed(&parsed);
            }
            assert!(gate.due(head, MAX, false), "{head:?} cut at {cut}");
            assert!(matches!(parse_request_head(head, MAX), Ok(Some(_))));
        }
    }
}

#[test]
fn a_malformed_start_is_still_refused_before_the_bytes_double_twice() {
    let mut bad = b"GET / HTTP/1.1\r\nBad Header: x\r\n".to_vec();
    bad.resize(4096, b'a');
    let (_, outcome) = trickle(&bad, MAX);
    let (at, parsed) = outcome.expect("refused before the end");
    assert!(matches!(parsed, Err(HeadError::Malformed(_))));
    // Ungated it is refused at byte 20 ("Bad " then a space); gated, by
    // twice that at most.
    assert!(at <= 2 * 21, "refused only at {at}");
}

#[test]
fn a_gate_watching_other_bytes_starts_over() {
    let mut gate = HeadGate::default();
    let long = b"GET /a-long-path HTTP/1.1\r\nHost: a";
    assert!(gate.due(&long[..1], MAX, false));
    for n in 2..long.len() {
        let _ = gate.due(&long[..n], MAX, false);
    }
    // Shorter than what it searched: a new head, parsed at once.
    assert!(gate.due(b"G", MAX, false));
    // After a whole head, the next bytes are parsed at once too.
    let whole = b"GET / HTTP/1.1\r\n\r\n";
    assert!(gate.due(whole, MAX, false));
    gate.parsed(&parse_request_head(whole, MAX));
    assert!(
        gate.due(whole, MAX, false),
        "a whole head parsed again after restart"
    );
}

#[test]
fn leading_empty_lines_trickled_are_not_parsed_once_a_line() {
    // Empty lines before the request line are skipped (and counted in the
    // head), so each one is an empty line that ends nothing: a client
    // trickling thousands of them must not buy a parse apiece.
    for blank in [&b"\r\n"[..], b"\n"] {
        let mut head = blank.repeat(8 * 1024 / blank.len());
        head.extend_from_slice(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n");
        completes_in_few_parses(&head);
    }
    // Only the limit ends a head of nothing but empty lines, once.
    let (parses, outcome) = trickle(&b"\r\n".repeat(8 * 1024), 16 * 1024);
    assert_eq!(
        outcome.map(|(n, r)| (n, r.err())),
        Some((16 * 1024, Some(HeadError::TooLarge)))
    );
    assert!(parses <= 20, "{parses} parses");
}

/// Random heads built from the pieces a head is made of (line ends of
/// every spelling, empty lines, bad bytes), delivered in random pieces:
/// the gated parse completes at exactly the piece the ungated one does,
/// and refuses what it refuses, with the same error, no later than the
/// piece where the bytes doubled since the ungated refusal, or at the end.
#[test]
fn the_gate_agrees_with_the_ungated_parse_on_random_heads() {
    const PIECES: &[&[u8]] = &[
        b"GET",
        b"CONNECT",
        b" ",
        b"/",
        b"a.test:443",
        b"HTTP/1.1",
        b"HTTP/1.0",
        b"\r\n",
        b"\r\n",
        b"\n",
        b"\r",
        b"Host",
        b": ",
        b"X-Long: vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv",
        b"\0",
        b"\t",
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for case in 0..20_000 {
        let mut bytes = Vec::new();
        // A well-formed start now and then, so that many heads complete.
        if next(2) == 0 {
            bytes.extend_from_slice(&b"\r\n".repeat(next(4)));
            bytes.extend_from_slice(b"GET / HTTP/1.1\r\n");
        }
        for _ in 0..next(40) {
            bytes.extend_from_slice(PIECES[next(PIECES.len())]);
        }
        let max = [32, 64, 200, MAX][next(4)];
        // Cut points, ascending, the whole length last.
        let mut cuts: Vec<usize> = (0..next(12)).map(|_| next(bytes.len() + 1)).collect();
        cuts.push(bytes.len());
        cuts.sort_unstable();
        cuts.dedup();
        if next(3) == 0 {
            cuts = (0..=bytes.len()).collect();
        }
        let ungated = cuts
            .iter()
            .map(|&n| (n, parse_request_head(&bytes[..n], max)))
            .find(|(_, r)| *r != Ok(None));
        let mut gate = HeadGate::default();
        let mut gated = None;
        for (i, &n) in cuts.iter().enumerate() {
            let end = i + 1 == cuts.len();
            if !gate.due(&bytes[..n], max, end) {
                continue;
            }
            let r = parse_request_head(&bytes[..n], max);
            gate.parsed(&r);
            if r != Ok(None) {
                gated = Some((n, r));
                break;
            }
        }
        let what = format!(
            "case {case}: {:?} max {max} cuts {cuts:?}",
            String::from_utf8_lossy(&bytes)
        );
        match (&ungated, &gated) {
            (None, None) => {}
            (Some((n, Ok(Some(h)))), Some((m, Ok(Some(g))))) => {
                assert_eq!((n, h), (m, g), "{what}");
            }
            (Some((n, Err(e))), Some((m, Err(f)))) => {
                assert_eq!(e, f, "{what}");
                assert!(m >= n, "{what}");
                // The first cut at or past twice the ungated refusal's
                // length (or the end) at the latest.
                let bound = cuts
                    .iter()
                    .copied()
                    .find(|&c| c >= 2 * n)
                    .unwrap_or(bytes.len());
                assert!(*m <= bound, "refused at {m}, not by {bound}: {what}");
            }
            _ => panic!("ungated {ungated:?}, gated {gated:?}: {what}"),
        }
    }
}
