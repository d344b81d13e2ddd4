//! A client's handshake, through the core production runs: arbitrary bytes
//! in arbitrary pieces on an HTTP, SOCKS5 or sniffing listener, with or
//! without users (a plaintext one, or a hashed one the verifier answers
//! for), ends and resets at arbitrary times, a socket that takes writes at
//! arbitrary speeds. The core never panics, settles after each call, and
//! never waits while its transport could move what it wants (nor for
//! nothing). The script format is `portcullis::fuzzing::handshake`'s.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    portcullis::fuzzing::handshake(data);
});
