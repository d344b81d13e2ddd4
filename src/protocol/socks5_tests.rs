use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Every strict prefix of `msg` must be Incomplete, and the whole `msg`
/// (also with trailing bytes) must give `expected` with `msg.len()` consumed.
fn check_splits<T, E>(parse: fn(&[u8]) -> Parse<T, E>, msg: &[u8], expected: T)
where
    T: std::fmt::Debug + PartialEq + Clone,
    E: std::fmt::Debug + PartialEq,
{
    for cut in 0..msg.len() {
        assert_eq!(
            parse(&msg[..cut]),
            Parse::Incomplete,
            "prefix of {cut} bytes"
        );
    }
    assert_eq!(parse(msg), Parse::Done(expected.clone(), msg.len()));
    let mut longer = msg.to_vec();
    longer.extend_from_slice(b"\x05trailing");
    assert_eq!(parse(&longer), Parse::Done(expected, msg.len()));
}

fn connect(address: Address, port: u16) -> Request {
    Request {
        command: Command::Connect,
        address,
        port,
    }
}

#[test]
fn greeting_splits() {
    check_splits(parse_greeting, &[5, 1, 0], Greeting { methods: vec![0] });
    check_splits(
        parse_greeting,
        &[5, 3, 0, 2, 0x80],
        Greeting {
            methods: vec![0, 2, 0x80],
        },
    );
    let mut all = vec![5, 255];
    all.extend(0..=254u8);
    check_splits(
        parse_greeting,
        &all,
        Greeting {
            methods: (0..=254).collect(),
        },
    );
}

#[test]
fn greeting_errors() {
    assert_eq!(
        parse_greeting(&[4, 1, 0]),
        Parse::Invalid(GreetingError::BadVersion(4))
    );
    assert_eq!(
        parse_greeting(b"C"),
        Parse::Invalid(GreetingError::BadVersion(b'C'))
    );
    assert_eq!(
        parse_greeting(&[5, 0]),
        Parse::Invalid(GreetingError::NoMethods)
    );
    assert_eq!(
        parse_greeting(&[5, 0, 0, 0]),
        Parse::Invalid(GreetingError::NoMethods)
    );
}

#[test]
fn user_pass_splits() {
    check_splits(
        parse_user_pass,
        b"\x01\x05alice\x06s3cret",
        UserPass {
            username: b"alice".to_vec(),
            password: b"s3cret".to_vec(),
        },
    );
    check_splits(
        parse_user_pass,
        &[1, 0, 0],
        UserPass {
            username: vec![],
            password: vec![],
        },
    );
    let mut long = vec![1, 255];
    long.extend([b'u'; 255]);
    long.push(255);
    long.extend([0xff; 255]);
    check_splits(
        parse_user_pass,
        &long,
        UserPass {
            username: vec![b'u'; 255],
            password: vec![0xff; 255],
        },
    );
}

#[test]
fn user_pass_bad_version() {
    assert_eq!(
        parse_user_pass(&[5, 1, b'a', 1, b'b']),
        Parse::Invalid(AuthError::BadVersion(5))
    );
}

#[test]
fn request_ipv4_splits() {
    check_splits(
        parse_request,
        &[5, 1, 0, 1, 127, 0, 0, 1, 0x01, 0xbb],
        connect(Address::Ip(Ipv4Addr::LOCALHOST.into()), 443),
    );
}

#[test]
fn request_ipv6_splits() {
    let mut msg = vec![5, 1, 0, 4];
    msg.extend(Ipv6Addr::LOCALHOST.octets());
    msg.extend(8080u16.to_be_bytes());
    check_splits(
        parse_request,
        &msg,
        connect(Address::Ip(Ipv6Addr::LOCALHOST.into()), 8080),
    );
    // IPv4-mapped addresses are left as IPv6.
    let mapped = Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped();
    let mut msg = vec![5, 1, 0, 4];
    msg.extend(mapped.octets());
    msg.extend([0, 80]);
    check_splits(parse_request, &msg, connect(Address::Ip(mapped.into()), 80));
}

#[test]
fn request_domain_splits() {
    let mut msg = vec![5, 1, 0, 3, 11];
    msg.extend(b"example.com");
    msg.extend([0, 80]);
    check_splits(
        parse_request,
        &msg,
        connect(Address::Domain("example.com".into()), 80),
    );
    // Non-ASCII UTF-8 is accepted here; canonicalisation happens later.
    let name = "bücher.example";
    let mut msg = vec![5, 1, 0, 3, name.len() as u8];
    msg.extend(name.as_bytes());
    msg.extend([0x1f, 0x90]);
    check_splits(
        parse_request,
        &msg,
        connect(Address::Domain(name.into()), 8080),
    );
}

#[test]
fn request_bind_and_udp_parse() {
    check_splits(
        parse_request,
        &[5, 2, 0, 1, 0, 0, 0, 0, 0, 0],
        Request {
            command: Command::Bind,
            address: Address::Ip(Ipv4Addr::UNSPECIFIED.into()),
            port: 0,
        },
    );
    check_splits(
        parse_request,
        &[5, 3, 0, 1, 1, 2, 3, 4, 0, 53],
        Request {
            command: Command::UdpAssociate,
            address: Address::Ip(Ipv4Addr::new(1, 2, 3, 4).into()),
            port: 53,
        },
    );
}

#[test]
fn request_reserved_byte_ignored() {
    assert_eq!(
        parse_request(&[5, 1, 0xaa, 1, 1, 1, 1, 1, 0, 1]),
        Parse::Done(
            connect(Address::Ip(Ipv4Addr::new(1, 1, 1, 1).into()), 1),
            10
        )
    );
}

#[test]
fn request_bad_version() {
    assert_eq!(
        parse_request(&[4]),
        Parse::Invalid(RequestError::BadVersion(4))
    );
}

#[test]
fn request_bad_command_waits_for_whole_message() {
    let msg = [5, 9, 0, 1, 1, 2, 3, 4, 0, 80];
    for cut in 0..msg.len() {
        assert_eq!(parse_request(&msg[..cut]), Parse::Incomplete, "cut {cut}");
    }
    assert_eq!(
        parse_request(&msg),
        Parse::Invalid(RequestError::BadCommand(9))
    );
    let mut msg = vec![5, 0, 0, 3, 3];
    msg.extend(b"a.b");
    msg.extend([0, 80]);
    for cut in 0..msg.len() {
        assert_eq!(parse_request(&msg[..cut]), Parse::Incomplete, "cut {cut}");
    }
    assert_eq!(
        parse_request(&msg),
        Parse::Invalid(RequestError::BadCommand(0))
    );
}

#[test]
fn request_bad_address_type_is_immediate() {
    assert_eq!(
        parse_request(&[5, 1, 0, 2]),
        Parse::Invalid(RequestError::BadAddressType(2))
    );
    assert_eq!(
        parse_request(&[5, 1, 0, 0]),
        Parse::Invalid(RequestError::BadAddressType(0))
    );
    // A bad command with a bad address type: the length is unknowable.
    assert_eq!(
        parse_request(&[5, 7, 0, 9]),
        Parse::Invalid(RequestError::BadAddressType(9))
    );
}

fn domain_request(name: &[u8]) -> Vec<u8> {
    let mut msg = vec![5, 1, 0, 3, name.len() as u8];
    msg.extend(name);
    msg.extend([1, 187]);
    msg
}

#[test]
fn request_bad_domains() {
    for name in [
        &b""[..],
        b"exa mple.com",
        b"evil.com\r\nX: y",
        b"nul\0byte",
        b"tab\there",
        b"del\x7f",
        b"\xff\xfe",
        b"\xc3",
        "c1\u{85}control".as_bytes(),
    ] {
        let msg = domain_request(name);
        for cut in 0..msg.len() {
            assert_eq!(
                parse_request(&msg[..cut]),
                Parse::Incomplete,
                "{name:?} cut {cut}"
            );
        }
        assert_eq!(
            parse_request(&msg),
            Parse::Invalid(RequestError::BadDomain),
            "{name:?}"
        );
    }
}

#[test]
fn request_longest_domain() {
    let name = vec![b'a'; 255];
    let msg = domain_request(&name);
    assert_eq!(msg.len(), 4 + 1 + 255 + 2);
    check_splits(
        parse_request,
        &msg,
        connect(Address::Domain("a".repeat(255)), 443),
    );
}

#[test]
fn error_replies() {
    assert_eq!(RequestError::BadVersion(4).reply(), Reply::GeneralFailure);
    assert_eq!(
        RequestError::BadCommand(9).reply(),
        Reply::CommandNotSupported
    );
    assert_eq!(
        RequestError::BadAddressType(2).reply(),
        Reply::AddressTypeNotSupported
    );
    assert_eq!(RequestError::BadDomain.reply(), Reply::NotAllowed);
    assert_eq!(Reply::CommandNotSupported as u8, 0x07);
    assert_eq!(Reply::AddressTypeNotSupported as u8, 0x08);
}

#[test]
fn encode_replies() {
    let mut out = Vec::new();
    encode_reply(Reply::CommandNotSupported, None, &mut out);
    assert_eq!(out, [5, 7, 0, 1, 0, 0, 0, 0, 0, 0]);

    let mut out = vec![0xee];
    encode_reply(
        Reply::Succeeded,
        Some("192.0.2.7:40000".parse().unwrap()),
        &mut out,
    );
    assert_eq!(out, [0xee, 5, 0, 0, 1, 192, 0, 2, 7, 0x9c, 0x40]);

    let mut out = Vec::new();
    encode_reply(
        Reply::Succeeded,
        Some("[::1]:443".parse().unwrap()),
        &mut out,
    );
    assert_eq!(out.len(), 22);
    assert_eq!(&out[..4], &[5, 0, 0, 4]);
    assert_eq!(&out[4..20], &Ipv6Addr::LOCALHOST.octets());
    assert_eq!(&out[20..], &[1, 187]);
}

#[test]
fn small_messages() {
    assert_eq!(method_selection(METHOD_USER_PASS), [5, 2]);
    assert_eq!(method_selection(METHOD_NONE_ACCEPTABLE), [5, 0xff]);
    assert_eq!(auth_status(true), [1, 0]);
    assert_eq!(auth_status(false), [1, 1]);
}
