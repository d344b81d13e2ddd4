//! HTTP request heads: no panic, consumed within the buffer and the limit,
//! and a Done result is the same when the input arrives in two parts (the
//! first part alone is incomplete, or already the same Done).
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::http::{parse_request_head, HeadError};

const MAXES: [usize; 4] = [16, 512, 8 * 1024, 64 * 1024];

fuzz_target!(|input: (u16, &[u8])| {
    let (split, data) = input;
    for max in MAXES {
        let whole = parse_request_head(data, max);
        if let Err(HeadError::Malformed(cause)) = &whole {
            assert!(!cause.is_empty());
        }
        let Ok(Some((head, n))) = whole else {
            continue;
        };
        assert!(n <= data.len());
        assert!(n <= max);
        assert!(matches!(head.version, 0 | 1));
        // Re-fed as it would arrive from a socket: first part, then all of it.
        let cut = usize::from(split) % (data.len() + 1);
        match parse_request_head(&data[..cut], max) {
            Ok(None) => assert!(cut < n, "incomplete at {cut} but done at {n}"),
            Ok(Some(first)) => assert_eq!(first, (head.clone(), n)),
            Err(e) => panic!("prefix of {cut} bytes failed ({e:?}) but the whole parsed"),
        }
        // The head alone parses the same.
        assert_eq!(parse_request_head(&data[..n], max), Ok(Some((head, n))));
    }
});
