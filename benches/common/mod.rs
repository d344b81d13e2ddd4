//! Client side of the benchmarks, shared by `benches/tunnel.rs` and
//! `examples/loadgen.rs`: open a TCP stream to a target directly, through a
//! plain TCP relay, or through an HTTP CONNECT or SOCKS5 proxy.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};

/// How a client reaches its target.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    /// Straight to the target (the baseline).
    Direct,
    /// A plain TCP relay that forwards every connection to the target (no handshake).
    Relay(SocketAddr),
    /// An HTTP proxy: `CONNECT target`.
    Connect(SocketAddr),
    /// An HTTP proxy, with the tunnel's first bytes sent in the same write
    /// as the `CONNECT` (see [`open_sending`]): one client flight, as a
    /// plain relay's client has. Without first bytes, the same as `Connect`.
    ConnectEarly(SocketAddr),
    /// A SOCKS5 proxy: no-auth greeting, then `CONNECT` to an IPv4/IPv6 address.
    Socks5(SocketAddr),
}

/// Opens a stream that carries bytes to `target`, handshake done, Nagle off.
pub fn open(via: Via, target: SocketAddr) -> io::Result<TcpStream> {
    let mut s = match via {
        Via::Direct => TcpStream::connect(target)?,
        Via::Relay(relay) => TcpStream::connect(relay)?,
        Via::Connect(proxy) | Via::ConnectEarly(proxy) => TcpStream::connect(proxy)?,
        Via::Socks5(proxy) => TcpStream::connect(proxy)?,
    };
    s.set_nodelay(true)?;
    match via {
        Via::Direct | Via::Relay(_) => {}
        Via::Connect(_) | Via::ConnectEarly(_) => http_connect(&mut s, target)?,
        Via::Socks5(_) => socks5_connect(&mut s, target)?,
    }
    Ok(s)
}

/// Like [`open`], and sends `first` through the tunnel. With
/// [`Via::ConnectEarly`] `first` goes in the `CONNECT`'s own write (the
/// proxy holds it until the tunnel is up), so bytes of the answer can come
/// with the proxy's reply: they are returned.
pub fn open_sending(
    via: Via,
    target: SocketAddr,
    first: &[u8],
) -> io::Result<(TcpStream, Vec<u8>)> {
    let Via::ConnectEarly(proxy) = via else {
        let mut s = open(via, target)?;
        s.write_all(first)?;
        return Ok((s, Vec::new()));
    };
    let mut s = TcpStream::connect(proxy)?;
    s.set_nodelay(true)?;
    let mut req = connect_request(target).into_bytes();
    req.extend_from_slice(first);
    s.write_all(&req)?;
    let rest = read_connect_reply(&mut s)?;
    Ok((s, rest))
}

fn connect_request(target: SocketAddr) -> String {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")
}

/// `CONNECT target HTTP/1.1`, expecting a 2xx. The servers behind the
/// benchmarks never speak first, so any byte after the head is an error.
pub fn http_connect(s: &mut TcpStream, target: SocketAddr) -> io::Result<()> {
    s.write_all(connect_request(target).as_bytes())?;
    if !read_connect_reply(s)?.is_empty() {
        return Err(io::Error::other("bytes after the CONNECT response head"));
    }
    Ok(())
}

/// Reads a `CONNECT` reply head, expecting a 2xx; returns what came after it.
fn read_connect_reply(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    let end = loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "proxy closed during CONNECT",
            ));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 16 * 1024 {
            return Err(io::Error::other("CONNECT response head too large"));
        }
    };
    let status = head.split(|&b| b == b' ').nth(1).unwrap_or_default();
    if !status.starts_with(b"2") {
        let line = String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or_default());
        return Err(io::Error::other(format!("CONNECT refused: {line}")));
    }
    Ok(head.split_off(end))
}

/// SOCKS5 (RFC 1928), no authentication, `CONNECT` to an address.
pub fn socks5_connect(s: &mut TcpStream, target: SocketAddr) -> io::Result<()> {
    s.write_all(&[5, 1, 0])?;
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel)?;
    if sel != [5, 0] {
        return Err(io::Error::other(format!("SOCKS5 method refused: {sel:?}")));
    }
    let mut req = vec![5, 1, 0];
    match target.ip() {
        IpAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.octets());
        }
    }
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req)?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head)?;
    if head[1] != 0 {
        return Err(io::Error::other(format!(
            "SOCKS5 CONNECT refused: reply {:#04x}",
            head[1]
        )));
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut len = [0u8; 1];
            s.read_exact(&mut len)?;
            usize::from(len[0]) + 2
        }
        other => return Err(io::Error::other(format!("SOCKS5 bad ATYP {other}"))),
    };
    let mut bound = vec![0u8; rest];
    s.read_exact(&mut bound)
}
