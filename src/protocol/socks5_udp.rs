//! The SOCKS5 UDP request header (RFC 1928 section 7), sans-IO.
//!
//! Every datagram between a client and its UDP relay starts with
//! `RSV(2) FRAG(1) ATYP(1) DST.ADDR DST.PORT(2)`, then the payload. A
//! datagram arrives whole, so there is no `Incomplete`: a header cut short
//! is [`UdpError::Truncated`], whatever byte it stops at.

use std::net::{IpAddr, SocketAddr};

use super::socks5::{Address, ATYP_DOMAIN, ATYP_IPV4, ATYP_IPV6};

/// A parsed header: where the payload goes, and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpHeader {
    /// The fragment number; anything but 0 is a fragment (we drop those).
    pub frag: u8,
    /// Destination host.
    pub address: Address,
    /// Destination port.
    pub port: u16,
    /// The payload's offset in the datagram (the header's length).
    pub payload: usize,
}

/// Why a datagram's header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpError {
    /// Shorter than its own header says.
    Truncated,
    /// RSV was not `0x0000`.
    Reserved,
    /// Unknown address type byte.
    BadAddressType(u8),
    /// Domain name empty, not UTF-8, or with control characters or spaces.
    BadDomain,
    /// Destination port 0 (nothing can be sent there).
    ZeroPort,
}

impl UdpError {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            UdpError::Truncated => "truncated header",
            UdpError::Reserved => "non-zero RSV",
            UdpError::BadAddressType(_) => "unknown address type",
            UdpError::BadDomain => "bad domain name",
            UdpError::ZeroPort => "destination port 0",
        }
    }
}

/// Parses the header at the front of a whole datagram.
pub fn parse_udp_header(dgram: &[u8]) -> Result<UdpHeader, UdpError> {
    let (Some(rsv), Some(&frag), Some(&atyp)) = (dgram.get(..2), dgram.get(2), dgram.get(3)) else {
        return Err(UdpError::Truncated);
    };
    if rsv != [0, 0] {
        return Err(UdpError::Reserved);
    }
    let (len, off) = match atyp {
        ATYP_IPV4 => (4, 0),
        ATYP_IPV6 => (16, 0),
        ATYP_DOMAIN => (usize::from(*dgram.get(4).ok_or(UdpError::Truncated)?), 1),
        other => return Err(UdpError::BadAddressType(other)),
    };
    let start = 4 + off;
    let port_at = start + len;
    let end = port_at + 2;
    let raw = dgram.get(start..port_at).ok_or(UdpError::Truncated)?;
    let port = dgram.get(port_at..end).ok_or(UdpError::Truncated)?;
    let port = u16::from_be_bytes([port[0], port[1]]);
    let address = match atyp {
        ATYP_IPV4 => Address::Ip(IpAddr::from(
            <[u8; 4]>::try_from(raw).expect("length checked"),
        )),
        ATYP_IPV6 => Address::Ip(IpAddr::from(
            <[u8; 16]>::try_from(raw).expect("length checked"),
        )),
        _ => {
            let name = std::str::from_utf8(raw).map_err(|_| UdpError::BadDomain)?;
            let bad = |c: char| c.is_control() || c == ' ';
            if name.is_empty() || name.contains(bad) {
                return Err(UdpError::BadDomain);
            }
            Address::Domain(name.to_owned())
        }
    };
    if port == 0 {
        return Err(UdpError::ZeroPort);
    }
    Ok(UdpHeader {
        frag,
        address,
        port,
        payload: end,
    })
}

/// Appends the header a reply from `from` is relayed to the client with
/// (FRAG 0, the source as an address literal): 10 bytes for IPv4, 22 for IPv6.
pub fn encode_udp_header(from: SocketAddr, out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0, 0]);
    match from.ip() {
        IpAddr::V4(ip) => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => {
                out.push(ATYP_IPV4);
                out.extend_from_slice(&v4.octets());
            }
            None => {
                out.push(ATYP_IPV6);
                out.extend_from_slice(&ip.octets());
            }
        },
    }
    out.extend_from_slice(&from.port().to_be_bytes());
}

/// The longest header: a 255-byte domain name.
pub const MAX_HEADER: usize = 4 + 1 + 255 + 2;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4() -> Vec<u8> {
        let mut d = vec![0, 0, 0, ATYP_IPV4, 10, 0, 0, 1, 0x00, 0x35];
        d.extend_from_slice(b"query");
        d
    }

    fn domain() -> Vec<u8> {
        let mut d = vec![0, 0, 0, ATYP_DOMAIN, 11];
        d.extend_from_slice(b"example.org");
        d.extend_from_slice(&[0x01, 0xbb]);
        d.extend_from_slice(b"x");
        d
    }

    fn v6() -> Vec<u8> {
        let mut d = vec![0, 0, 0, ATYP_IPV6];
        d.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        d.extend_from_slice(&[0x00, 0x7b]);
        d
    }

    #[test]
    fn parses_each_address_type() {
        let h = parse_udp_header(&v4()).unwrap();
        assert_eq!(h.address, Address::Ip(Ipv4Addr::new(10, 0, 0, 1).into()));
        assert_eq!((h.port, h.frag, h.payload), (53, 0, 10));
        assert_eq!(&v4()[h.payload..], b"query");
        let h = parse_udp_header(&domain()).unwrap();
        assert_eq!(h.address, Address::Domain("example.org".into()));
        assert_eq!((h.port, h.payload), (443, 18));
        let h = parse_udp_header(&v6()).unwrap();
        assert_eq!(h.address, Address::Ip(Ipv6Addr::LOCALHOST.into()));
        assert_eq!((h.port, h.payload), (123, 22));
        assert_eq!(h.payload, v6().len(), "an empty payload is a datagram too");
    }

    /// Every strict prefix of a header is refused as truncated (or, once the
    /// address type byte is in and unknown, for that), never parsed.
    #[test]
    fn every_prefix_is_truncated() {
        for whole in [v4(), domain(), v6()] {
            let header = parse_udp_header(&whole).unwrap().payload;
            for cut in 0..header {
                assert_eq!(
                    parse_udp_header(&whole[..cut]),
                    Err(UdpError::Truncated),
                    "cut at {cut} of {whole:?}"
                );
            }
        }
    }

    #[test]
    fn fragments_are_reported() {
        let mut d = v4();
        d[2] = 1;
        assert_eq!(parse_udp_header(&d).unwrap().frag, 1);
        d[2] = 0x81;
        assert_eq!(parse_udp_header(&d).unwrap().frag, 0x81);
    }

    #[test]
    fn malformed_headers() {
        let mut d = v4();
        d[0] = 1;
        assert_eq!(parse_udp_header(&d), Err(UdpError::Reserved));
        let mut d = v4();
        d[1] = 0xff;
        assert_eq!(parse_udp_header(&d), Err(UdpError::Reserved));
        for atyp in [0u8, 2, 5, 0xff] {
            let mut d = v4();
            d[3] = atyp;
            assert_eq!(parse_udp_header(&d), Err(UdpError::BadAddressType(atyp)));
        }
        // Empty name, a control character, a space, invalid UTF-8.
        assert_eq!(
            parse_udp_header(&[0, 0, 0, ATYP_DOMAIN, 0, 0, 53]),
            Err(UdpError::BadDomain)
        );
        for bad in [&b"a\nb"[..], b"a b", b"\xff\xfe\xfd"] {
            let mut d = vec![0, 0, 0, ATYP_DOMAIN, bad.len() as u8];
            d.extend_from_slice(bad);
            d.extend_from_slice(&[0, 53]);
            assert_eq!(parse_udp_header(&d), Err(UdpError::BadDomain), "{bad:?}");
        }
        let mut d = v4();
        d[8..10].copy_from_slice(&[0, 0]);
        assert_eq!(parse_udp_header(&d), Err(UdpError::ZeroPort));
    }

    #[test]
    fn longest_domain() {
        let name = "a".repeat(255);
        let mut d = vec![0, 0, 0, ATYP_DOMAIN, 255];
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&[0, 53]);
        let h = parse_udp_header(&d).unwrap();
        assert_eq!(h.payload, MAX_HEADER);
        assert_eq!(h.address, Address::Domain(name));
    }

    #[test]
    fn encoded_headers_parse_back() {
        for from in [
            "192.0.2.7:53".parse::<SocketAddr>().unwrap(),
            "[2001:db8::1]:4433".parse().unwrap(),
        ] {
            let mut out = Vec::new();
            encode_udp_header(from, &mut out);
            let h = parse_udp_header(&out).unwrap();
            assert_eq!((h.address, h.port), (Address::Ip(from.ip()), from.port()));
            assert_eq!(h.payload, out.len());
        }
        // A v4-mapped source (a dual-stack socket) is told as IPv4.
        let mut out = Vec::new();
        encode_udp_header("[::ffff:192.0.2.7]:53".parse().unwrap(), &mut out);
        assert_eq!(out, [0, 0, 0, ATYP_IPV4, 192, 0, 2, 7, 0, 53]);
    }
}
