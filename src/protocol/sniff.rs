//! Telling SOCKS5 from HTTP on an `auto` listener by the first byte.

/// What the first byte of a connection says it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    /// 0x05: a SOCKS5 greeting.
    Socks5,
    /// Anything else: an HTTP request line.
    Http,
}

/// Classifies a connection by its first byte.
pub fn sniff(first: u8) -> Sniffed {
    if first == crate::protocol::socks5::VERSION {
        Sniffed::Socks5
    } else {
        Sniffed::Http
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socks_version_byte_is_socks() {
        assert_eq!(sniff(0x05), Sniffed::Socks5);
        assert_eq!(sniff(b'C'), Sniffed::Http);
        assert_eq!(sniff(0x04), Sniffed::Http);
    }
}
