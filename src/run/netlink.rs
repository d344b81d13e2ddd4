//! One rtnetlink request: `ip addr add ADDR dev lo`, inside the namespace,
//! so that CMD's queries to the resolvers in /etc/resolv.conf arrive at a
//! local socket (see [`super::dns`]) instead of failing with no route.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::libc;

/// Adds `ip` (a /32 or /128, host scope) to the interface `ifindex`. An
/// address already there is success.
pub fn add_address(ifindex: u32, ip: IpAddr) -> io::Result<()> {
    // SAFETY: a plain socket call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let msg = new_addr_request(ifindex, ip);
    // SAFETY: the buffer is valid for its length; a zeroed sockaddr_nl
    // addresses the kernel.
    let sent = unsafe {
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as _;
        libc::sendto(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as _,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 1024];
    loop {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return match ack_errno(&buf[..n as usize]) {
            Some(0) => Ok(()),
            Some(e) if e == -libc::EEXIST => Ok(()),
            Some(e) => Err(io::Error::from_raw_os_error(-e)),
            None => Err(io::Error::other("unexpected rtnetlink answer")),
        };
    }
}

/// The RTM_NEWADDR message: nlmsghdr, ifaddrmsg, IFA_LOCAL and IFA_ADDRESS.
fn new_addr_request(ifindex: u32, ip: IpAddr) -> Vec<u8> {
    let (family, prefix, bytes): (u8, u8, Vec<u8>) = match ip {
        IpAddr::V4(a) => (libc::AF_INET as u8, 32, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, 128, a.octets().to_vec()),
    };
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&[0; 4]); // length, below
    m.extend_from_slice(&libc::RTM_NEWADDR.to_ne_bytes());
    let flags = libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL;
    m.extend_from_slice(&(flags as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
                                              // ifaddrmsg: family, prefixlen, flags, scope (host), index.
    m.extend_from_slice(&[family, prefix, 0, libc::RT_SCOPE_HOST]);
    m.extend_from_slice(&ifindex.to_ne_bytes());
    for kind in [libc::IFA_LOCAL, libc::IFA_ADDRESS] {
        let len = 4 + bytes.len(); // a multiple of 4 already
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&bytes);
    }
    let len = m.len() as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
    m
}

/// The error field of an NLMSG_ERROR answer (0 is an acknowledgement).
fn ack_errno(answer: &[u8]) -> Option<i32> {
    let kind = u16::from_ne_bytes(answer.get(4..6)?.try_into().ok()?);
    if kind != libc::NLMSG_ERROR as u16 {
        return None;
    }
    Some(i32::from_ne_bytes(answer.get(16..20)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_laid_out_as_the_kernel_reads_it() {
        let m = new_addr_request(1, "10.255.255.53".parse().unwrap());
        assert_eq!(m.len(), 16 + 8 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(m[..4].try_into().unwrap()), 40);
        assert_eq!(
            &m[16..20],
            &[libc::AF_INET as u8, 32, 0, libc::RT_SCOPE_HOST]
        );
        assert_eq!(&m[28..32], &[10, 255, 255, 53]);
        let v6 = new_addr_request(1, "fd00::53".parse().unwrap());
        assert_eq!(v6.len(), 16 + 8 + 20 + 20);
        assert_eq!(v6[17], 128);
    }

    #[test]
    fn acks_and_errors_are_read() {
        let mut ack = vec![0u8; 36];
        ack[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        assert_eq!(ack_errno(&ack), Some(0));
        ack[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(ack_errno(&ack), Some(-libc::EPERM));
        assert_eq!(ack_errno(&ack[..10]), None);
        ack[4] ^= 0xff;
        assert_eq!(ack_errno(&ack), None);
    }
}
