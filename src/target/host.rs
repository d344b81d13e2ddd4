//! Host canonicalisation: every spelling of a host becomes one [`Host`], so a
//! rule written one way cannot be dodged by writing the target another way.
//!
//! The rules follow the WHATWG URL host parser (what browsers and most HTTP
//! stacks do): IDNA to punycode, lower case, and the legacy `inet_aton`
//! spellings of IPv4 (`127.1`, `0x7f.1`, `017700000001`, ...) become addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Host, Target, TargetError};

/// Longest DNS name in presentation form, without the trailing dot.
const MAX_NAME: usize = 253;
/// Longest DNS label.
const MAX_LABEL: usize = 63;

fn err(msg: impl Into<String>) -> TargetError {
    TargetError(msg.into())
}

/// Reduces an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) to IPv4: the kernel
/// dials it as IPv4, so the policy must judge it as IPv4.
pub(crate) fn canonical_ip(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => a,
        },
        v4 => v4,
    }
}

/// Parses an IPv6 literal without brackets; zone ids are refused because a
/// scope (`%eth0`) is not something a sandbox should pick.
fn parse_v6(s: &str) -> Result<IpAddr, TargetError> {
    if s.contains('%') {
        return Err(err(format!("IPv6 zone ids are not allowed: {s:?}")));
    }
    s.parse::<Ipv6Addr>()
        .map(|a| canonical_ip(IpAddr::V6(a)))
        .map_err(|_| err(format!("invalid IPv6 address {s:?}")))
}

/// Canonicalises a host: a name or an address literal (IPv6 with or without
/// brackets).
pub(crate) fn canonical_host(s: &str) -> Result<Host, TargetError> {
    if s.is_empty() {
        return Err(err("empty host"));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let inner = rest
            .strip_suffix(']')
            .ok_or_else(|| err(format!("unterminated '[' in host {s:?}")))?;
        return parse_v6(inner).map(Host::Ip);
    }
    if s.contains(':') {
        return parse_v6(s).map(Host::Ip);
    }
    if let Some(c) = s.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(err(format!("invalid character {c:?} in host {s:?}")));
    }
    let ascii = if maps_to_itself(s) {
        std::borrow::Cow::Borrowed(s)
    } else {
        let a = idna::domain_to_ascii(s)
            .map_err(|_| err(format!("invalid international name {s:?}")))?;
        std::borrow::Cow::Owned(a)
    };
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() {
        return Err(err(format!("empty host {s:?}")));
    }
    if ends_in_number(name) {
        return parse_ipv4(name)
            .map(|a| Host::Ip(IpAddr::V4(a)))
            .ok_or_else(|| err(format!("invalid IPv4 address {s:?}")));
    }
    check_name(name, s)?;
    Ok(Host::Domain(name.to_owned()))
}

/// Whether IDNA would hand `s` back unchanged: lowercase ASCII letters,
/// digits, hyphens and dots are valid and unmapped in UTS 46, and a label
/// that is not `xn--` has no punycode to decode and check. Most names (and
/// every dotted-quad) are so, and skip the mapping's cost on each accept.
fn maps_to_itself(s: &str) -> bool {
    s.bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.'))
        && !s.split('.').any(|label| label.starts_with("xn--"))
}

/// Checks DNS length limits and the hostname alphabet on an IDNA-mapped name.
fn check_name(name: &str, orig: &str) -> Result<(), TargetError> {
    if name.len() > MAX_NAME {
        return Err(err(format!(
            "host name longer than {MAX_NAME} bytes: {orig:?}"
        )));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(err(format!("empty label in host {orig:?}")));
        }
        if label.len() > MAX_LABEL {
            return Err(err(format!(
                "label longer than {MAX_LABEL} bytes in host {orig:?}"
            )));
        }
        if let Some(c) = label
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(err(format!("invalid character {c:?} in host {orig:?}")));
        }
    }
    Ok(())
}

/// WHATWG "ends in a number": a name whose last label is numeric or parses as
/// an IPv4 number must be an IPv4 address (or is invalid), never a domain.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or("");
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    parse_ipv4_number(last).is_some()
}

/// One `inet_aton` part: `0x`/`0X` hex (empty digits = 0), leading `0` octal,
/// else decimal. `None` if not a number at all; `Some(None)` if a well-formed
/// number too large for IPv4 (it still makes the name an address: invalid).
fn parse_ipv4_number(s: &str) -> Option<Option<u64>> {
    if s.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    let mut n: Option<u64> = Some(0);
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        n = n
            .and_then(|n| n.checked_mul(u64::from(radix))?.checked_add(u64::from(d)))
            .filter(|&n| n <= u64::from(u32::MAX));
    }
    Some(n)
}

/// The WHATWG IPv4 parser (1 to 4 parts; all but the last at most 255; the
/// last fills the remaining bytes).
pub(crate) fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut parts = [0u64; 4];
    let mut n = 0;
    for p in s.split('.') {
        if n == 4 {
            return None;
        }
        parts[n] = parse_ipv4_number(p)??;
        n += 1;
    }
    let (last, init) = (parts[n - 1], &parts[..n - 1]);
    if init.iter().any(|&p| p > 255) {
        return None;
    }
    let last_bits = 8 * (5 - n as u32);
    if last >= 1u64 << last_bits {
        return None;
    }
    let mut v = last;
    for (i, &p) in init.iter().enumerate() {
        v += p << (8 * (3 - i as u32));
    }
    u32::try_from(v).ok().map(Ipv4Addr::from)
}

/// Parses a port: digits only (no sign, no spaces), 1 to 65535.
pub(crate) fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u16>().ok().filter(|&p| p != 0)
}

/// Builds a [`Target`]; port 0 is refused (nothing listens there).
pub(crate) fn target(host: &str, port: u16) -> Result<Target, TargetError> {
    if port == 0 {
        return Err(err("port 0 is not a valid destination"));
    }
    Ok(Target {
        host: canonical_host(host)?,
        port,
    })
}

/// Parses `host:port` or `[v6]:port`.
pub(crate) fn parse_authority(s: &str) -> Result<Target, TargetError> {
    let (host, port) = if s.starts_with('[') {
        let end = s
            .find(']')
            .ok_or_else(|| err(format!("unterminated '[' in {s:?}")))?;
        let port = s[end + 1..]
            .strip_prefix(':')
            .ok_or_else(|| err(format!("missing port in {s:?}")))?;
        (&s[..=end], port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| err(format!("missing port in {s:?}")))?;
        if host.contains(':') {
            return Err(err(format!("IPv6 address must be in brackets: {s:?}")));
        }
        (host, port)
    };
    let port = parse_port(port).ok_or_else(|| err(format!("invalid port in {s:?}")))?;
    target(host, port)
}

#[cfg(test)]
mod idna_shortcut {
    use super::maps_to_itself;

    /// Every string the shortcut takes, up to six characters over the
    /// letters that matter (x and n for `xn--`), is one IDNA hands back as
    /// it is: the shortcut changes no answer.
    #[test]
    fn the_shortcut_agrees_with_idna() {
        const ALPHABET: &[u8] = b"axn09-.";
        let mut taken = 0;
        let mut s = Vec::new();
        fn walk(s: &mut Vec<u8>, depth: usize, taken: &mut usize) {
            if !s.is_empty() {
                let text = std::str::from_utf8(s).unwrap();
                if maps_to_itself(text) {
                    *taken += 1;
                    assert_eq!(
                        idna::domain_to_ascii(text).ok().as_deref(),
                        Some(text),
                        "{text:?}"
                    );
                }
            }
            if depth == 0 {
                return;
            }
            for &c in ALPHABET {
                s.push(c);
                walk(s, depth - 1, taken);
                s.pop();
            }
        }
        walk(&mut s, 6, &mut taken);
        assert!(taken > 100_000, "{taken}");
        for long in [
            "a".repeat(63),
            format!("{}.{}", "b".repeat(64), "c".repeat(300)),
            "-a-.-".into(),
            "1.2.3.4".into(),
        ] {
            assert!(maps_to_itself(&long));
            assert_eq!(
                idna::domain_to_ascii(&long).ok().as_deref(),
                Some(long.as_str())
            );
        }
        for not in ["A.b", "xn--a.b", "a.xn--", "a_b", "é.fr", "a b"] {
            assert!(!maps_to_itself(not), "{not:?}");
        }
    }
}
