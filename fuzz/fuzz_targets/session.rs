//! A client session from its first byte, through the session machine
//! production runs (the opening, the exchange where a rule inspects, the
//! closes it owns, a raw tunnel's hand-off): arbitrary bytes in arbitrary pieces on an HTTP,
//! SOCKS5 or sniffing listener, with or without users (a plaintext one, or
//! a hashed one the verifier answers for), ends and resets at arbitrary
//! times, a socket that takes writes at arbitrary speeds; then a real
//! policy, the resolver's answers (private, loopback and link-local
//! addresses among them), connects that complete or fail, a parent proxy,
//! time passing, and reports nobody asked for. The machine never panics,
//! settles after each call, keeps its actions in order, and dials only
//! addresses the resolver gave and a rule names. The script format is
//! `portcullis::fuzzing::session`'s.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = portcullis::fuzzing::session(data);
});
