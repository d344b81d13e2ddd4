//! Who owns the other end of a loopback TCP connection, from the kernel's
//! socket diagnostics (`NETLINK_SOCK_DIAG`, `SOCK_DIAG_BY_FAMILY`).
//!
//! Any local process can bind 127.0.0.2, .3, ... as its source address, so
//! a loopback client's IP says nothing about who it is. The kernel knows:
//! an exact-tuple `inet_diag_req_v2` (src = the client's address and port,
//! dst = ours) is answered with the client socket's `idiag_uid` and
//! `idiag_inode`. The kernel handles the request inside `send`, so the answer
//! is queued before `send` returns: one `sendto` and one `recvfrom` per
//! lookup, never a wait (the socket is non-blocking all the same).
//!
//! The encoding and decoding are sans-IO (tested on byte strings captured
//! from Linux 6.18); [`SockDiag`] is the socket. The pid is not looked up:
//! only a scan of every process's fds in `/proc` maps an inode to a pid,
//! far too slow for the accept path.

use std::net::{IpAddr, SocketAddr};

/// `SOCK_DIAG_BY_FAMILY`: the request and answer message type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_HDRLEN: usize = 16;
/// `inet_diag_req_v2`: family, protocol, ext, pad, states, then the socket id.
const REQ_LEN: usize = 8 + SOCKID_LEN;
/// `inet_diag_sockid`: ports, two 16-byte addresses, interface, cookie.
const SOCKID_LEN: usize = 4 + 16 + 16 + 4 + 8;
/// The request as sent.
pub(crate) const REQUEST_LEN: usize = NLMSG_HDRLEN + REQ_LEN;
/// `inet_diag_msg` up to and including `idiag_inode`.
const DIAG_MSG_LEN: usize = 4 + SOCKID_LEN + 5 * 4;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// A TIME_WAIT answer is a `tw_sock` with uid and inode 0, not the owner.
const TCP_TIME_WAIT: u8 = 6;
const TCP_NEW_SYN_RECV: u8 = 12;

/// The owner of a socket, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The uid that created the socket (in the netlink socket's user namespace).
    pub(crate) uid: u32,
    /// The socket's inode (0 once the owner closed it).
    pub(crate) inode: u32,
}

/// What one answer message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The socket and its owner.
    Found(Owner),
    /// The kernel knows no such socket (`ENOENT`), or only its TIME_WAIT
    /// remains, which has no owner.
    NotFound,
    /// The kernel refused the request with this errno.
    Error(i32),
}

/// An answer that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

/// The address family and 16-byte address field of `ip` as the kernel wants
/// them: an IPv4-mapped IPv6 address is the IPv4 socket it stands for.
fn family_and_addr(ip: IpAddr) -> (u8, [u8; 16]) {
    let mut a = [0u8; 16];
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            a[..4].copy_from_slice(&v4.octets());
            (AF_INET, a)
        }
        IpAddr::V6(v6) => (AF_INET6, v6.octets()),
    }
}

/// The exact-tuple request for the TCP socket whose local address is
/// `client` and whose peer is `server` (the client's end of a connection we
/// accepted). `None` when the two are of different families.
pub(crate) fn encode_request(
    seq: u32,
    client: SocketAddr,
    server: SocketAddr,
) -> Option<[u8; REQUEST_LEN]> {
    encode(seq, IPPROTO_TCP, client, server)
}

/// The request for the UDP socket that receives datagrams at `socket` from
/// `peer` (bound there, or to the wildcard address at its port): the one a
/// datagram from `socket` to `peer` came from, unless it has closed since.
/// The kernel's UDP lookup reads the id's source as the peer and its
/// destination as the socket (swapped from TCP's, for historical reasons).
pub(crate) fn encode_udp_request(
    seq: u32,
    socket: SocketAddr,
    peer: SocketAddr,
) -> Option<[u8; REQUEST_LEN]> {
    encode(seq, IPPROTO_UDP, peer, socket)
}

fn encode(
    seq: u32,
    protocol: u8,
    src_addr: SocketAddr,
    dst_addr: SocketAddr,
) -> Option<[u8; REQUEST_LEN]> {
    let (family, src) = family_and_addr(src_addr.ip());
    let (dst_family, dst) = family_and_addr(dst_addr.ip());
    if family != dst_family {
        return None;
    }
    let mut m = [0u8; REQUEST_LEN];
    // nlmsghdr, host byte order.
    m[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: the kernel fills in ours.
    let r = &mut m[NLMSG_HDRLEN..];
    r[0] = family;
    r[1] = protocol;
    // idiag_ext 0: no extensions; states: any (an exact lookup ignores them).
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = &mut r[8..];
    // Ports and addresses in network byte order.
    id[0..2].copy_from_slice(&src_addr.port().to_be_bytes());
    id[2..4].copy_from_slice(&dst_addr.port().to_be_bytes());
    id[4..20].copy_from_slice(&src);
    id[20..36].copy_from_slice(&dst);
    // idiag_if 0 (any); cookie INET_DIAG_NOCOOKIE (~0, ~0): no cookie check.
    id[40..48].copy_from_slice(&[0xff; 8]);
    Some(m)
}

/// Reads the answer to request `seq` from one datagram: `Ok(None)` when the
/// datagram holds nothing for `seq` (a stale answer to an older request).
pub(crate) fn decode_answer(buf: &[u8], seq: u32) -> Result<Option<Answer>, Malformed> {
    let mut rest = buf;
    while !rest.is_empty() {
        if rest.len() < NLMSG_HDRLEN {
            return Err(Malformed("truncated netlink header"));
        }
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(Malformed("bad netlink message length"));
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let msg_seq = u32_at(rest, 8);
        let body = &rest[NLMSG_HDRLEN..len];
        if msg_seq == seq {
            match kind {
                SOCK_DIAG_BY_FAMILY => return decode_diag_msg(body).map(Some),
                NLMSG_ERROR => {
                    if body.len() < 4 {
                        return Err(Malformed("truncated netlink error"));
                    }
                    return match -(u32_at(body, 0) as i32) {
                        0 => Err(Malformed("an acknowledgement, not an answer")),
                        e if e == nix::libc::ENOENT => Ok(Some(Answer::NotFound)),
                        e => Ok(Some(Answer::Error(e))),
                    };
                }
                NLMSG_DONE => return Ok(Some(Answer::NotFound)),
                _ => {}
            }
        }
        // Messages are padded to 4 bytes.
        let next = (len + 3) & !3;
        rest = rest.get(next..).unwrap_or_default();
    }
    Ok(None)
}

fn decode_diag_msg(body: &[u8]) -> Result<Answer, Malformed> {
    if body.len() < DIAG_MSG_LEN {
        return Err(Malformed("truncated inet_diag_msg"));
    }
    let state = body[1];
    if state == TCP_TIME_WAIT || state == TCP_NEW_SYN_RECV {
        return Ok(Answer::NotFound);
    }
    // family, state, timer, retrans, id, expires, rqueue, wqueue, then these.
    let at = 4 + SOCKID_LEN + 3 * 4;
    let owner = Owner {
        uid: u32_at(body, at),
        inode: u32_at(body, at + 4),
    };
    // No inode: the owner closed it. A FIN_WAIT2 `tw_sock` (what a client
    // that closed first becomes at once on loopback) reports its substate,
    // not TIME_WAIT, with uid 0: nobody's, not root's.
    if owner.inode == 0 {
        return Ok(Answer::NotFound);
    }
    Ok(Answer::Found(owner))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use linux::SockDiag;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use std::io;
    use std::net::SocketAddr;
    use std::os::fd::{AsRawFd, OwnedFd};

    use nix::sys::socket::{
        connect, recv, send, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };

    use super::{decode_answer, encode_request, encode_udp_request, Answer, Owner, REQUEST_LEN};

    /// A `NETLINK_SOCK_DIAG` socket, opened once and kept for the reactor's life.
    #[derive(Debug)]
    pub(crate) struct SockDiag {
        fd: OwnedFd,
        seq: u32,
        /// Zeroed by calloc: its pages are mapped when a lookup first
        /// answers, not at start.
        buf: Box<[u8]>,
    }

    impl SockDiag {
        /// Opens the socket (non-blocking, close-on-exec) in this network namespace.
        pub(crate) fn open() -> io::Result<SockDiag> {
            let fd = socket(
                AddressFamily::Netlink,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                SockProtocol::NetlinkSockDiag,
            )?;
            // To the kernel (pid 0): plain send and recv from then on.
            connect(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
            Ok(SockDiag {
                fd,
                seq: 0,
                buf: vec![0; 8192].into_boxed_slice(),
            })
        }

        /// The owner of the TCP socket at `client` connected to `server`:
        /// `Ok(None)` when the kernel knows no live socket by that tuple (it
        /// closed, or lives in another network namespace).
        pub(crate) fn owner(
            &mut self,
            client: SocketAddr,
            server: SocketAddr,
        ) -> io::Result<Option<Owner>> {
            self.seq = self.seq.wrapping_add(1);
            let req = encode_request(self.seq, client, server);
            self.ask(req)
        }

        /// The owner of the UDP socket receiving at `socket` from `peer`
        /// (see [`encode_udp_request`]); `Ok(None)` when there is none.
        pub(crate) fn udp_owner(
            &mut self,
            socket: SocketAddr,
            peer: SocketAddr,
        ) -> io::Result<Option<Owner>> {
            self.seq = self.seq.wrapping_add(1);
            let req = encode_udp_request(self.seq, socket, peer);
            self.ask(req)
        }

        fn ask(&mut self, req: Option<[u8; REQUEST_LEN]>) -> io::Result<Option<Owner>> {
            let seq = self.seq;
            let Some(req) = req else {
                return Ok(None);
            };
            let fd = self.fd.as_raw_fd();
            loop {
                match send(fd, &req, MsgFlags::empty()) {
                    Ok(_) => break,
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // The answer was queued during send; skip any stale ones first.
            loop {
                let n = match recv(fd, &mut self.buf[..], MsgFlags::empty()) {
                    Ok(n) => n,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                };
                match decode_answer(&self.buf[..n], seq) {
                    Ok(None) => continue,
                    Ok(Some(Answer::Found(o))) => return Ok(Some(o)),
                    Ok(Some(Answer::NotFound)) => return Ok(None),
                    Ok(Some(Answer::Error(e))) => return Err(nix::errno::Errno::from_raw(e).into()),
                    Err(m) => return Err(io::Error::new(io::ErrorKind::InvalidData, m.0)),
                }
            }
        }
    }
}

/// Elsewhere there is no socket diagnostics interface: loopback clients
/// are keyed by their address.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[derive(Debug)]
pub(crate) struct SockDiag;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
impl SockDiag {
    pub(crate) fn open() -> std::io::Result<SockDiag> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    pub(crate) fn owner(&mut self, _: SocketAddr, _: SocketAddr) -> std::io::Result<Option<Owner>> {
        Ok(None)
    }
    pub(crate) fn udp_owner(
        &mut self,
        _: SocketAddr,
        _: SocketAddr,
    ) -> std::io::Result<Option<Owner>> {
        Ok(None)
    }
}

#[cfg(test)]
#[path = "sockdiag_tests.rs"]
mod tests;
