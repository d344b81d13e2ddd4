//! A SOCKS5 client (RFC 1928, with RFC 1929 username/password auth).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};

use super::wait::{BULK, PROMPTLY};

/// How a SOCKS5 handshake failed.
#[derive(Debug)]
pub enum SocksError {
    Io(io::Error),
    /// The server picked a method other than the one we offered (0xff: none acceptable).
    Method(u8),
    /// RFC 1929 status was not success.
    Auth(u8),
    /// The request was answered with this non-zero reply code.
    Reply(u8),
    /// The server answered something that is not SOCKS5.
    Protocol(String),
}

impl From<io::Error> for SocksError {
    fn from(e: io::Error) -> Self {
        SocksError::Io(e)
    }
}

/// Encodes a SOCKS5 address: IPv4/IPv6 literal (ATYP 1/4) or domain (ATYP 3).
pub fn socks_addr(host: &str, port: u16) -> Vec<u8> {
    let mut v = Vec::new();
    match host
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<IpAddr>()
    {
        Ok(IpAddr::V4(a)) => {
            v.push(0x01);
            v.extend_from_slice(&a.octets());
        }
        Ok(IpAddr::V6(a)) => {
            v.push(0x04);
            v.extend_from_slice(&a.octets());
        }
        Err(_) => {
            assert!(host.len() < 256, "domain too long for SOCKS5");
            v.push(0x03);
            v.push(host.len() as u8);
            v.extend_from_slice(host.as_bytes());
        }
    }
    v.extend_from_slice(&port.to_be_bytes());
    v
}

/// Reads a whole SOCKS5 reply; returns (REP, bound address bytes incl. port).
pub fn read_socks_reply(s: &mut impl Read) -> io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    if h[0] != 0x05 {
        return Err(io::Error::other(format!("reply version {:#04x}", h[0])));
    }
    let len = match h[3] {
        0x01 => 4 + 2,
        0x04 => 16 + 2,
        0x03 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l)?;
            l[0] as usize + 2
        }
        t => return Err(io::Error::other(format!("reply ATYP {t:#04x}"))),
    };
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest)?;
    Ok((h[1], rest))
}

/// Runs a SOCKS5 CONNECT handshake on `s` (no auth, or user/pass when `auth` is set).
pub fn socks5_handshake<S: Read + Write>(
    s: &mut S,
    host: &str,
    port: u16,
    auth: Option<(&str, &str)>,
) -> Result<(), SocksError> {
    let method = if auth.is_some() { 0x02 } else { 0x00 };
    s.write_all(&[0x05, 0x01, method])?;
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel)?;
    if sel[0] != 0x05 {
        return Err(SocksError::Protocol(format!("method selection {sel:?}")));
    }
    if sel[1] != method {
        return Err(SocksError::Method(sel[1]));
    }
    if let Some((user, pass)) = auth {
        let mut m = vec![0x01, user.len() as u8];
        m.extend_from_slice(user.as_bytes());
        m.push(pass.len() as u8);
        m.extend_from_slice(pass.as_bytes());
        s.write_all(&m)?;
        let mut st = [0u8; 2];
        s.read_exact(&mut st)?;
        if st[0] != 0x01 {
            return Err(SocksError::Protocol(format!("auth status {st:?}")));
        }
        if st[1] != 0 {
            return Err(SocksError::Auth(st[1]));
        }
    }
    let mut req = vec![0x05, 0x01, 0x00];
    req.extend(socks_addr(host, port));
    s.write_all(&req)?;
    let (rep, _) = read_socks_reply(s)?;
    if rep != 0 {
        return Err(SocksError::Reply(rep));
    }
    Ok(())
}

/// Connects to the proxy and runs a SOCKS5 CONNECT to `host:port`.
pub fn socks5_connect(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    auth: Option<(&str, &str)>,
) -> Result<TcpStream, SocksError> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(PROMPTLY))?;
    s.set_write_timeout(Some(BULK))?;
    socks5_handshake(&mut s, host, port, auth)?;
    s.set_read_timeout(Some(BULK))?;
    Ok(s)
}

/// A tunnel through SOCKS5 (no auth). `Err(code)` when the request is answered
/// with a non-zero reply; panics on anything else that goes wrong.
#[track_caller]
pub fn connect_via_socks5(proxy: SocketAddr, host: &str, port: u16) -> Result<TcpStream, u8> {
    match socks5_connect(proxy, host, port, None) {
        Ok(s) => Ok(s),
        Err(SocksError::Reply(r)) => Err(r),
        Err(e) => panic!("SOCKS5 to {host}:{port}: {e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::scripted::Scripted;

    /// A success reply bound to 0.0.0.0:0.
    const OK_V4: [u8; 10] = [5, 0, 0, 1, 0, 0, 0, 0, 0, 0];

    #[test]
    fn addresses_are_encoded_by_type() {
        assert_eq!(socks_addr("127.0.0.1", 80), [1, 127, 0, 0, 1, 0, 80]);
        assert_eq!(socks_addr("a.b", 443), [3, 3, b'a', b'.', b'b', 1, 187]);
        let mut v6 = vec![4];
        v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6.extend_from_slice(&[0; 11]);
        v6.extend_from_slice(&[1, 0xff, 0xff]);
        assert_eq!(socks_addr("[2001:db8::1]", 65535), v6);
        assert_eq!(socks_addr("2001:db8::1", 65535), v6, "brackets optional");
        let long = "x".repeat(255);
        let enc = socks_addr(&long, 1);
        assert_eq!((enc[0], enc[1], enc.len()), (3, 255, 2 + 255 + 2));
    }

    #[test]
    #[should_panic(expected = "domain too long")]
    fn domains_longer_than_255_bytes_are_refused() {
        socks_addr(&"x".repeat(256), 1);
    }

    #[test]
    fn replies_are_read_whole_and_no_further() {
        let mut v4 = OK_V4.to_vec();
        v4.extend_from_slice(b"DATA");
        let mut r = Scripted::pieces(&v4, 1);
        assert_eq!(read_socks_reply(&mut r).unwrap(), (0, vec![0; 6]));
        assert_eq!(r.unread(), b"DATA");

        let mut v6 = vec![5, 2, 0, 4];
        v6.extend_from_slice(&[9; 18]);
        v6.push(b'!');
        let mut r = Scripted::data(&v6);
        assert_eq!(read_socks_reply(&mut r).unwrap(), (2, vec![9; 18]));
        assert_eq!(r.unread(), b"!");

        let mut r = Scripted::data(&[5, 0, 0, 3, 3, b'a', b'.', b'b', 0, 80, b'!']);
        let (rep, bound) = read_socks_reply(&mut r).unwrap();
        assert_eq!((rep, &bound[..]), (0, &b"a.b\0\x50"[..]));
        assert_eq!(r.unread(), b"!");
    }

    #[test]
    fn malformed_replies_are_errors() {
        let e = read_socks_reply(&mut Scripted::data(b"HTTP/1.1 400")).unwrap_err();
        assert!(e.to_string().contains("reply version"), "{e}");
        let e = read_socks_reply(&mut Scripted::data(&[5, 0, 0, 9, 0, 0])).unwrap_err();
        assert!(e.to_string().contains("reply ATYP"), "{e}");
        let e = read_socks_reply(&mut Scripted::data(&[5, 0, 0, 1, 0])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn handshake_without_auth() {
        let mut answer = vec![5, 0];
        answer.extend_from_slice(&OK_V4);
        answer.extend_from_slice(b"TUNNEL");
        let mut s = Scripted::data(&answer);
        socks5_handshake(&mut s, "127.0.0.1", 80, None).unwrap();
        assert_eq!(s.written, [5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
        assert_eq!(s.unread(), b"TUNNEL");
    }

    #[test]
    fn handshake_with_username_and_password() {
        let mut answer = vec![5, 2, 1, 0];
        answer.extend_from_slice(&OK_V4);
        let mut s = Scripted::data(&answer);
        socks5_handshake(&mut s, "a.b", 443, Some(("u", "pw"))).unwrap();
        let mut want = vec![5, 1, 2, 1, 1, b'u', 2, b'p', b'w'];
        want.extend_from_slice(&[5, 1, 0, 3, 3, b'a', b'.', b'b', 1, 187]);
        assert_eq!(s.written, want);
    }

    #[test]
    fn handshake_failures_are_told_apart() {
        let run = |answer: &[u8], auth| {
            socks5_handshake(&mut Scripted::data(answer), "a.b", 1, auth).unwrap_err()
        };
        assert!(matches!(run(&[5, 0xff], None), SocksError::Method(0xff)));
        assert!(matches!(
            run(&[5, 2, 1, 1], Some(("u", "p"))),
            SocksError::Auth(1)
        ));
        assert!(matches!(
            run(&[5, 2, 0, 0], Some(("u", "p"))),
            SocksError::Protocol(_)
        ));
        let mut refused = OK_V4;
        refused[1] = 2;
        let mut answer = vec![5, 0];
        answer.extend_from_slice(&refused);
        assert!(matches!(run(&answer, None), SocksError::Reply(2)));
        assert!(matches!(run(b"HTTP/1.1", None), SocksError::Protocol(_)));
        assert!(matches!(run(&[5], None), SocksError::Io(_)));
    }
}
