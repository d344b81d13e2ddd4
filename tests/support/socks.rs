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
