//! SOCKS5 greetings: no panic, consumed within the buffer, and a Done result
//! is the same on any longer buffer and Incomplete on every strict prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::socks5::{parse_greeting, Parse};

fuzz_target!(|data: &[u8]| {
    if let Parse::Done(greeting, n) = parse_greeting(data) {
        assert!(n <= data.len());
        assert_eq!(n, 2 + greeting.methods.len());
        assert!(!greeting.methods.is_empty());
        assert_eq!(parse_greeting(&data[..n]), Parse::Done(greeting, n));
        for cut in 0..n {
            assert_eq!(parse_greeting(&data[..cut]), Parse::Incomplete);
        }
    }
});
