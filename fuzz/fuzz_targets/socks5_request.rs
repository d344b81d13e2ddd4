//! SOCKS5 requests and RFC 1929 sub-negotiations: no panic, consumed within
//! the buffer, Done results stable on the exact message and Incomplete on
//! every strict prefix, and every reply encodes to a full-size message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis::protocol::socks5::{
    encode_reply, parse_request, parse_user_pass, Address, Parse, Reply,
};
use std::net::SocketAddr;

fn check<T: PartialEq + std::fmt::Debug, E: PartialEq + std::fmt::Debug>(
    parse: fn(&[u8]) -> Parse<T, E>,
    data: &[u8],
) -> Option<(T, usize)> {
    match parse(data) {
        Parse::Done(value, n) => {
            assert!(n <= data.len());
            for cut in 0..n {
                assert_eq!(parse(&data[..cut]), Parse::Incomplete, "cut {cut}");
            }
            let again = parse(&data[..n]);
            assert_eq!(again, Parse::Done(value, n));
            match again {
                Parse::Done(value, n) => Some((value, n)),
                _ => unreachable!(),
            }
        }
        Parse::Invalid(_) | Parse::Incomplete => None,
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some((req, _)) = check(parse_request, data) {
        if let Address::Domain(name) = &req.address {
            assert!(!name.is_empty());
            assert!(!name.contains(|c: char| c.is_control() || c == ' '));
        }
        // Echo the destination back as a bound address: the reply is complete.
        let bound = match req.address {
            Address::Ip(ip) => Some(SocketAddr::new(ip, req.port)),
            Address::Domain(_) => None,
        };
        let mut out = Vec::new();
        encode_reply(Reply::Succeeded, bound, &mut out);
        let expected = if matches!(bound, Some(SocketAddr::V6(_))) {
            22
        } else {
            10
        };
        assert_eq!(out.len(), expected);
    }
    if let Some((up, n)) = check(parse_user_pass, data) {
        assert_eq!(n, 3 + up.username.len() + up.password.len());
    }
});
