//! Short messages and file descriptors over a `SOCK_SEQPACKET` socket pair
//! (`SCM_RIGHTS`): how the namespace child hands its listeners to the proxy.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// The most listeners one message carries (the UDP relay helper's socket
/// and the resolver sockets come beside them).
pub const MAX_FDS: usize = 16;

/// The most resolver sockets `run` passes beside them: a UDP socket and a
/// TCP listener for each of three nameservers (as many as glibc reads).
pub const MAX_RESOLVERS: usize = 6;

/// Sends `msg` with `fds` attached (none: a plain message).
pub fn send(sock: &OwnedFd, msg: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(msg)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) if n == msg.len() => return Ok(()),
            Ok(_) => return Err(io::Error::other("short write on a SOCK_SEQPACKET socket")),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message into `buf` and the descriptors attached to it
/// (close-on-exec). `Ok((0, []))` is end of file: the other side is gone.
pub fn recv(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; 1 + MAX_FDS + MAX_RESOLVERS]);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(space.as_mut_slice()),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS installed these descriptors in this process just now;
                // nothing else owns them.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        if msg
            .flags
            .intersects(MsgFlags::MSG_CTRUNC | MsgFlags::MSG_TRUNC)
        {
            return Err(io::Error::other(
                "a message or its descriptors were truncated",
            ));
        }
        return Ok((msg.bytes, fds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    #[test]
    fn messages_and_descriptors_cross() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        send(&a, b"ok", &[l.as_raw_fd()]).unwrap();
        drop(l);
        let mut buf = [0u8; 16];
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"ok");
        assert_eq!(fds.len(), 1);
        let got = std::net::TcpListener::from(fds.into_iter().next().unwrap());
        assert_eq!(got.local_addr().unwrap(), addr);

        send(&b, b"G", &[]).unwrap();
        let (n, fds) = recv(&a, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"G"[..], 0));
        drop(b);
        assert_eq!(recv(&a, &mut buf).unwrap().0, 0, "end of file");
    }
}
