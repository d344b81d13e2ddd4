//! A raw tunnel's first flight (TLS ClientHello SNI and ECH, an HTTP
//! request's hosts): no panic, and a verdict reached on a prefix never
//! changes as more bytes arrive, so how the kernel splits the reads cannot
//! change what the proxy decides (the size bound aside).
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::first_flight::{parse, FirstFlight};

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    let mut first_decided = None;
    for cut in 0..data.len() {
        let verdict = parse(&data[..cut]);
        if verdict != FirstFlight::NeedMore {
            first_decided = Some((cut, verdict));
            break;
        }
    }
    // TooLarge is the bound on what is buffered, not a reading of it.
    if let Some((cut, verdict)) = first_decided.filter(|(_, v)| *v != FirstFlight::TooLarge) {
        assert_eq!(verdict, whole, "decided at {cut}, changed by later bytes");
    }
});
