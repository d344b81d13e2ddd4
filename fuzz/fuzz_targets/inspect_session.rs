//! A whole inspected session, through the core production runs: the
//! client and the upstream send arbitrary bytes in arbitrary pieces, half-
//! close or reset at arbitrary times, read at arbitrary speeds, while
//! virtual time passes and the rules are reloaded. The core never panics,
//! keeps the pump's contract and its bounds, and never leaves a deadline
//! due after it fired. The script format is `portcullis::fuzzing::inspect_session`'s.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    portcullis::fuzzing::inspect_session(data);
});
