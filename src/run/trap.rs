//! The DNS trap: answers CMD's direct queries to the resolvers in
//! /etc/resolv.conf (a UDP socket and a TCP listener each, bound inside
//! the namespace by `namespace::resolver_sockets`) with `REFUSED`, logs
//! the name and counts it.
//!
//! A thread per socket (at most six), blocked in `recvfrom` or `accept`,
//! rather than the reactor: the reactor lives in the library and serves
//! the proxy's listeners, and this is `run`'s own business with CMD alone;
//! a blocked thread makes no syscall while idle either, and each query
//! costs the same few syscalls. The threads end with the process.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use log::{debug, info, warn};

use super::dns::{answer, Outcome};
use super::tally::Tally;

/// How long a TCP client may take over one query before it is dropped.
/// Bounds what a connection that sends nothing can hold the thread for.
const TCP_IDLE: Duration = Duration::from_secs(5);
/// Queries answered on one TCP connection before it is closed.
const TCP_QUERIES: usize = 16;

/// Starts answering on each socket (UDP sockets and TCP listeners, told
/// apart by their type).
pub fn start(sockets: Vec<OwnedFd>, tally: &Arc<Mutex<Tally>>) {
    for fd in sockets {
        let kind = socket2::SockRef::from(&fd).r#type();
        let tally = Arc::clone(tally);
        let serve: Box<dyn FnOnce() + Send> = match kind {
            Ok(socket2::Type::DGRAM) => {
                let sock = UdpSocket::from(fd);
                announce(sock.local_addr(), "UDP");
                Box::new(move || serve_udp(&sock, &tally))
            }
            Ok(socket2::Type::STREAM) => {
                let sock = TcpListener::from(fd);
                announce(sock.local_addr(), "TCP");
                Box::new(move || serve_tcp(&sock, &tally))
            }
            _ => continue,
        };
        let spawned = std::thread::Builder::new()
            .name("portcullis-dns".into())
            .spawn(serve);
        if let Err(e) = spawned {
            warn!("cannot start the DNS trap thread: {e}; CMD's direct DNS queries go unanswered");
        }
    }
}

fn announce(addr: io::Result<SocketAddr>, proto: &str) {
    if let Ok(a) = addr {
        info!("answering CMD's direct DNS queries to {a} ({proto}) with REFUSED");
    }
}

/// The reply to `msg` from `peer`, logged and counted; `None`: no reply.
fn reply(msg: &[u8], peer: SocketAddr, resolver: &str, tally: &Mutex<Tally>) -> Option<Vec<u8>> {
    match answer(msg) {
        Outcome::Refused { question, reply } => {
            let name = question.name();
            info!(
                "dns query refused name={name} type={} resolver={resolver} client={peer}; \
                 hint: CMD resolves names itself instead of using the proxy; its only way \
                 out is the proxy run set in HTTPS_PROXY, HTTP_PROXY and ALL_PROXY \
                 (socks5h), so configure the program to use them",
                question.type_name()
            );
            tally
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .dns_query(&name);
            Some(reply)
        }
        Outcome::Rejected { why, reply } => {
            debug!("DNS trap at {resolver}: a malformed query from {peer}: {why}");
            Some(reply)
        }
        Outcome::Dropped(why) => {
            debug!("DNS trap at {resolver}: dropped a message from {peer}: {why}");
            None
        }
    }
}

fn resolver_of(addr: io::Result<SocketAddr>) -> String {
    addr.map_or_else(|_| "?".into(), |a| a.ip().to_string())
}

fn serve_udp(sock: &UdpSocket, tally: &Mutex<Tally>) {
    let resolver = resolver_of(sock.local_addr());
    // Over UDP a query is at most 512 bytes, or the EDNS size the client
    // offers (a few KiB); a longer datagram is cut and answered FORMERR.
    let mut buf = [0u8; 4096];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // ICMP errors from an earlier answer's peer surface here on Linux.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                warn!("DNS trap at {resolver}: {e}; CMD's direct DNS queries go unanswered");
                return;
            }
        };
        if let Some(r) = reply(&buf[..n], peer, &resolver, tally) {
            if let Err(e) = sock.send_to(&r, peer) {
                // The client may be gone (its socket closed): nothing to do.
                debug!("DNS trap at {resolver}: answering {peer}: {e}");
            }
        }
    }
}

fn serve_tcp(listener: &TcpListener, tally: &Mutex<Tally>) {
    let resolver = resolver_of(listener.local_addr());
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(e) => {
                // EMFILE and the like: CMD's other queries may still work later.
                warn!("DNS trap at {resolver} (TCP): {e}; its TCP queries go unanswered");
                return;
            }
        };
        if let Err(e) = serve_tcp_conn(stream, peer, &resolver, tally) {
            debug!("DNS trap at {resolver}: TCP client {peer}: {e}");
        }
    }
}

/// Answers the length-prefixed queries of one connection (RFC 1035 4.2.2)
/// until it closes, stalls past [`TCP_IDLE`], or sent [`TCP_QUERIES`].
fn serve_tcp_conn(
    mut s: TcpStream,
    peer: SocketAddr,
    resolver: &str,
    tally: &Mutex<Tally>,
) -> io::Result<()> {
    s.set_read_timeout(Some(TCP_IDLE))?;
    s.set_write_timeout(Some(TCP_IDLE))?;
    let mut msg = vec![0u8; usize::from(u16::MAX)];
    for _ in 0..TCP_QUERIES {
        let mut len = [0u8; 2];
        match s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let msg = &mut msg[..usize::from(u16::from_be_bytes(len))];
        s.read_exact(msg)?;
        let Some(r) = reply(msg, peer, resolver, tally) else {
            return Ok(());
        };
        let mut framed = Vec::with_capacity(2 + r.len());
        framed.extend_from_slice(&(r.len() as u16).to_be_bytes());
        framed.extend_from_slice(&r);
        s.write_all(&framed)?;
    }
    Ok(())
}
