//! Special address ranges: destinations a sandbox must not reach unless a rule
//! names them (the host itself, the LAN, cloud metadata, ...).
//!
//! Besides the ranges the issue lists, we refuse by default:
//! - documentation (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32)
//!   and benchmarking (198.18/15) ranges: never legitimate internet hosts,
//!   and 198.18/15 is used by fake-IP DNS setups to point at local services;
//! - 192.0.0/24 (IETF protocol assignments), 240/4 (reserved), 100::/64
//!   (discard-only), fec0::/10 (deprecated site-local, treated as private);
//! - IPv4 addresses embedded in IPv6: IPv4-mapped and IPv4-compatible (::/96,
//!   all of which is deprecated and refused), NAT64 (64:ff9b::/96) and 6to4
//!   (2002::/16) forms of special IPv4 addresses take the IPv4 range's name.
//!   Teredo (2001::/32) is not decoded.
//! - cloud metadata endpoints outside link-local, each a single address
//!   named `metadata` (so a rule for the wider range they sit in does not
//!   open them): Azure's wireserver 168.63.129.16, Alibaba's
//!   100.100.100.200, Oracle's 192.0.0.192, AWS's IPv6 IMDS fd00:ec2::254;
//!   GCP and the others answer on 169.254.169.254 (link-local already);
//! - this host's own interface addresses (`this-host`, see [`super::this_host`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cidr::Cidr;

/// A special range an address falls in: its name (for [`super::Denial`]) and
/// the block, whose prefix a rule must match or beat to name the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Special {
    /// `"loopback"`, `"private"`, ...
    pub(crate) name: &'static str,
    /// The range, in the address's own family.
    pub(crate) range: Cidr,
}

/// IPv4 special ranges, most specific first (broadcast before 240/4).
const V4: &[([u8; 4], u8, &str)] = &[
    ([255, 255, 255, 255], 32, "broadcast"),
    ([168, 63, 129, 16], 32, "metadata"),
    ([100, 100, 100, 200], 32, "metadata"),
    ([192, 0, 0, 192], 32, "metadata"),
    ([0, 0, 0, 0], 8, "unspecified"),
    ([10, 0, 0, 0], 8, "private"),
    ([100, 64, 0, 0], 10, "cgnat"),
    ([127, 0, 0, 0], 8, "loopback"),
    ([169, 254, 0, 0], 16, "link-local"),
    ([172, 16, 0, 0], 12, "private"),
    ([192, 0, 0, 0], 24, "reserved"),
    ([192, 0, 2, 0], 24, "documentation"),
    ([192, 168, 0, 0], 16, "private"),
    ([198, 18, 0, 0], 15, "benchmark"),
    ([198, 51, 100, 0], 24, "documentation"),
    ([203, 0, 113, 0], 24, "documentation"),
    ([224, 0, 0, 0], 4, "multicast"),
    ([240, 0, 0, 0], 4, "reserved"),
];

/// IPv6 special ranges that do not embed IPv4.
const V6: &[(u128, u8, &str)] = &[
    (0, 128, "unspecified"),
    (1, 128, "loopback"),
    (0xfd00_0ec2_u128 << 96 | 0x254, 128, "metadata"),
    (0x0100_u128 << 112, 64, "discard"),
    (0x2001_0db8_u128 << 96, 32, "documentation"),
    (0xfc00_u128 << 112, 7, "private"),
    (0xfe80_u128 << 112, 10, "link-local"),
    (0xfec0_u128 << 112, 10, "private"),
    (0xff00_u128 << 112, 8, "multicast"),
];

fn v4_special(a: Ipv4Addr) -> Option<(&'static str, u8)> {
    V4.iter().find_map(|&(net, prefix, name)| {
        let c = Cidr::new(IpAddr::V4(net.into()), prefix)?;
        c.contains(IpAddr::V4(a)).then_some((name, prefix))
    })
}

/// Classifies an embedded IPv4 address at bit `offset` of `a`: the range is
/// the IPv6 block covering the embedding prefix plus the IPv4 range.
fn embedded(a: Ipv6Addr, offset: u8) -> Option<Special> {
    let bits = u128::from(a);
    let v4 = Ipv4Addr::from((bits >> (96 - u32::from(offset))) as u32);
    let (name, prefix) = v4_special(v4)?;
    let range = Cidr::new(IpAddr::V6(a), offset + prefix)?;
    Some(Special { name, range })
}

/// Whether `addr` reaches one of the addresses `own` says are this host's:
/// the address itself, or an IPv4 one of them spelled as IPv6 (mapped,
/// NAT64 `64:ff9b::/96`, 6to4 `2002::/16`), which a translator or relay
/// delivers to that same IPv4 address.
fn names_this_host(addr: IpAddr, own: impl Fn(IpAddr) -> bool) -> bool {
    let canonical = addr.to_canonical();
    own(addr) || own(canonical) || embedded_v4(canonical).is_some_and(|v4| own(IpAddr::V4(v4)))
}

/// The special range `addr` belongs to, if any.
pub(crate) fn special(addr: IpAddr) -> Option<Special> {
    if names_this_host(addr, super::this_host::contains) {
        return Some(Special {
            name: "this-host",
            range: Cidr::new(addr, if addr.is_ipv4() { 32 } else { 128 })?,
        });
    }
    match addr {
        IpAddr::V4(a) => {
            let (name, prefix) = v4_special(a)?;
            let range = Cidr::new(addr, prefix)?;
            Some(Special { name, range })
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            for &(net, prefix, name) in V6 {
                let c = Cidr::new(IpAddr::V6(net.into()), prefix)?;
                if c.contains(addr) {
                    return Some(Special { name, range: c });
                }
            }
            if bits >> 32 == 0xffff {
                // IPv4-mapped: callers canonicalise first, but stay safe.
                return embedded(a, 96);
            }
            if bits >> 32 == 0 {
                // IPv4-compatible (deprecated): refused whatever it embeds.
                return embedded(a, 96).or(Some(Special {
                    name: "reserved",
                    range: Cidr::new(addr, 96)?,
                }));
            }
            if bits >> 32 == 0x0064_ff9b_u128 << 64 {
                return embedded(a, 96);
            }
            if bits >> 112 == 0x2002 {
                return embedded(a, 16);
            }
            None
        }
    }
}

/// The IPv4 address a translator reaches for `addr`: the NAT64 well-known
/// prefix (64:ff9b::/96) and 6to4 (2002::/16) embed one; `None` otherwise.
pub(crate) fn embedded_v4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(a) = addr else { return None };
    let bits = u128::from(a);
    if bits >> 32 == 0x0064_ff9b_u128 << 64 {
        return Some(Ipv4Addr::from(bits as u32));
    }
    if bits >> 112 == 0x2002 {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    None
}

/// The first special range strictly inside `block` (longer prefix), named:
/// a rule with `block` cannot name its addresses.
pub(crate) fn ranges_inside(block: Cidr) -> Option<(Cidr, &'static str)> {
    let v4 = V4.iter().filter_map(|&(net, prefix, name)| {
        Some((Cidr::new(IpAddr::V4(net.into()), prefix)?, name))
    });
    let v6 = V6.iter().filter_map(|&(net, prefix, name)| {
        Some((Cidr::new(IpAddr::V6(net.into()), prefix)?, name))
    });
    v4.chain(v6)
        .find(|(c, _)| c.prefix() > block.prefix() && block.contains(c.net()))
}

#[cfg(test)]
mod metadata_tests {
    use super::*;

    #[test]
    fn this_hosts_ipv4_address_is_recognised_in_its_ipv6_spellings() {
        let own = |a: IpAddr| a == IpAddr::V4(Ipv4Addr::new(81, 2, 69, 142));
        for (a, want) in [
            ("81.2.69.142", true),
            ("::ffff:81.2.69.142", true),
            ("64:ff9b::81.2.69.142", true),
            ("64:ff9b::5102:458e", true),
            ("2002:5102:458e::1", true),
            ("2002:5102:458e:ffff::", true),
            ("81.2.69.143", false),
            ("64:ff9b::81.2.69.143", false),
            ("2002:5102:458f::", false),
            ("2001:db8::81.2.69.142", false),
        ] {
            let addr: IpAddr = a.parse().unwrap();
            assert_eq!(names_this_host(addr, own), want, "{a}");
        }
    }

    #[test]
    fn metadata_endpoints_outside_link_local_are_single_named_addresses() {
        for a in [
            "168.63.129.16",
            "100.100.100.200",
            "192.0.0.192",
            "fd00:ec2::254",
        ] {
            let addr: IpAddr = a.parse().unwrap();
            let sp = special(addr).unwrap();
            assert_eq!(sp.name, "metadata", "{a}");
            assert_eq!(sp.range, Cidr::new(addr, sp.range.prefix()).unwrap());
            assert_eq!(sp.range.prefix(), if addr.is_ipv4() { 32 } else { 128 });
        }
        // Their neighbours keep their ranges.
        assert_eq!(special("168.63.129.17".parse().unwrap()), None);
        assert_eq!(
            special("100.100.100.201".parse().unwrap()).unwrap().name,
            "cgnat"
        );
        assert_eq!(
            special("fd00:ec2::253".parse().unwrap()).unwrap().name,
            "private"
        );
    }
}
