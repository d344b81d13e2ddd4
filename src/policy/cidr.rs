//! A tiny CIDR block: enough for rule matching and special ranges.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::target::host::canonical_ip;

/// An address block `net/prefix`; host bits of `net` are always zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    net: IpAddr,
    prefix: u8,
}

fn mask4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl Cidr {
    /// The block of `prefix` bits around `addr` (host bits cleared); `None`
    /// if the prefix is too long for the family.
    pub(crate) fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let net = match addr {
            IpAddr::V4(a) if prefix <= 32 => IpAddr::V4((u32::from(a) & mask4(prefix)).into()),
            IpAddr::V6(a) if prefix <= 128 => IpAddr::V6((u128::from(a) & mask6(prefix)).into()),
            _ => return None,
        };
        Some(Cidr { net, prefix })
    }

    /// A single address (/32 or /128), as an address-literal host pattern is.
    pub(crate) fn host(addr: IpAddr) -> Cidr {
        let addr = canonical_ip(addr);
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Cidr { net: addr, prefix }
    }

    /// The network address (host bits zero).
    pub(crate) fn net(&self) -> IpAddr {
        self.net
    }

    /// Prefix length in bits.
    pub(crate) fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `addr` (already canonical) is inside; families never mix.
    pub(crate) fn contains(&self, addr: IpAddr) -> bool {
        match (self.net, addr) {
            (IpAddr::V4(n), IpAddr::V4(a)) => u32::from(a) & mask4(self.prefix) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => u128::from(a) & mask6(self.prefix) == u128::from(n),
            _ => false,
        }
    }

    /// Parses `ADDR/LEN` (or a bare address as a single-address block). Host
    /// bits set are an error that suggests the block meant (`10.0.0.1/8`:
    /// "use 10.0.0.0/8"), since the writer may have meant one address; an
    /// IPv4-mapped block of /96 or longer becomes IPv4 so it matches canonical
    /// (mapped-to-IPv4) addresses.
    pub(crate) fn parse(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr = addr
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr);
        let addr: IpAddr = if addr.contains(':') {
            IpAddr::V6(
                addr.parse::<Ipv6Addr>()
                    .map_err(|_| format!("invalid address {addr:?}"))?,
            )
        } else {
            IpAddr::V4(
                addr.parse::<Ipv4Addr>()
                    .map_err(|_| format!("invalid address {addr:?}"))?,
            )
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) if !l.is_empty() && l.len() <= 3 && l.bytes().all(|b| b.is_ascii_digit()) => l
                .parse::<u8>()
                .map_err(|_| format!("invalid prefix length {l:?}"))?,
            Some(l) => return Err(format!("invalid prefix length {l:?}")),
        };
        if prefix > max {
            return Err(format!(
                "prefix length /{prefix} too long (at most /{max} for {addr})"
            ));
        }
        let block = Cidr::new(addr, prefix).expect("prefix checked");
        if block.net != addr {
            return Err(format!(
                "{s} has host bits set: use {block} for the range, or {addr}/{max} for the one address"
            ));
        }
        if let IpAddr::V6(v6) = addr {
            if let (Some(v4), true) = (v6.to_ipv4_mapped(), prefix >= 96) {
                return Ok(Cidr::new(IpAddr::V4(v4), prefix - 96).expect("prefix <= 32"));
            }
        }
        Ok(block)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}
