//! HTTP response heads: no panic, consumed within the buffer and the limit,
//! a Done result is the same when the input arrives in two parts, framing
//! is decided without panic and its body tracker stays within the bytes
//! given, a head written back out parses to the same head, and an edited
//! one (what the forward proxy sends on, when its lines are within our own
//! limit) parses, with as many header lines as the writer said.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::http::{HeadError, MAX_HEADERS};
use portcullis::protocol::http1::{
    parse_response_head, response_body_kind, write_response_head, Body, HeadEdit,
};

const MAXES: [usize; 4] = [16, 512, 8 * 1024, 64 * 1024];

fuzz_target!(|input: (u16, &[u8])| {
    let (split, data) = input;
    for max in MAXES {
        let whole = parse_response_head(data, max);
        if let Err(HeadError::Malformed(cause)) = &whole {
            assert!(!cause.is_empty());
        }
        let Ok(Some((head, n))) = whole else {
            continue;
        };
        assert!(n <= data.len());
        assert!(n <= max);
        assert!(matches!(head.version, 0 | 1));
        assert!(head.status <= 999);
        // Re-fed as it would arrive from a socket: first part, then all of it.
        let cut = usize::from(split) % (data.len() + 1);
        match parse_response_head(&data[..cut], max) {
            Ok(None) => assert!(cut < n, "incomplete at {cut} but done at {n}"),
            Ok(Some(first)) => assert_eq!(first, (head.clone(), n)),
            Err(e) => panic!("prefix of {cut} bytes failed ({e:?}) but the whole parsed"),
        }
        assert_eq!(
            parse_response_head(&data[..n], max),
            Ok(Some((head.clone(), n)))
        );

        // Framing, and the body tracker on what follows the head.
        for method in ["GET", "HEAD"] {
            if let Ok(kind) = response_body_kind(method, &head) {
                let rest = &data[n..];
                let mut body = Body::new(kind);
                if let Ok(used) = body.advance(rest) {
                    assert!(used <= rest.len());
                    if used < rest.len() {
                        assert!(body.is_done());
                    }
                }
            }
        }

        // Written back unedited, it parses to the same head.
        let mut out = Vec::new();
        let lines = write_response_head(&head, &HeadEdit::default(), &mut out);
        assert_eq!(lines, head.headers.len());
        let (again, len) = parse_response_head(&out, usize::MAX)
            .expect("written head parses")
            .expect("written head is complete");
        assert_eq!(len, out.len());
        assert_eq!(again, head);

        // Stripped of hop-by-hop fields, it still parses, without them.
        let edit = HeadEdit {
            strip_hop_by_hop: true,
            close: split % 2 == 0,
            via: Some("1.1 portcullis".to_owned()),
            ..HeadEdit::default()
        };
        let mut out = Vec::new();
        let lines = write_response_head(&head, &edit, &mut out);
        if lines > MAX_HEADERS {
            // The proxy answers 502 rather than send it on.
            continue;
        }
        let (stripped, _) = parse_response_head(&out, usize::MAX)
            .expect("edited head parses")
            .expect("edited head is complete");
        assert_eq!(stripped.headers.len(), lines);
        for (name, _) in &stripped.headers {
            assert!(!name.eq_ignore_ascii_case("keep-alive"));
            assert!(!name.eq_ignore_ascii_case("proxy-authenticate"));
            assert!(!name.eq_ignore_ascii_case("upgrade"));
        }
    }
});
