//! Kernel TLS, the syscalls: probing the kernel, installing a socket's
//! keys, reading a record with its type, and sending close_notify. What
//! the keys and records mean is `crate::tls::ktls`'s.
//!
//! Linux only; elsewhere every call says `Unsupported` and the probe finds
//! nothing, so the offload stays off.

use std::io;
use std::os::fd::RawFd;

#[cfg(target_os = "linux")]
use crate::tls::ktls::CryptoInfo;
use crate::tls::ktls::{Offload, Support};

#[cfg(target_os = "linux")]
mod sys {
    /// `linux/tcp.h`, `linux/tls.h`, `linux/socket.h`: not all in libc.
    pub(super) const TCP_ULP: nix::libc::c_int = 31;
    pub(super) const SOL_TLS: nix::libc::c_int = 282;
    pub(super) const TLS_TX: nix::libc::c_int = 1;
    pub(super) const TLS_RX: nix::libc::c_int = 2;
    pub(super) const TLS_SET_RECORD_TYPE: nix::libc::c_int = 1;
    pub(super) const TLS_GET_RECORD_TYPE: nix::libc::c_int = 2;
}

#[cfg(target_os = "linux")]
fn setsockopt(fd: RawFd, level: i32, name: i32, value: &[u8]) -> io::Result<()> {
    // SAFETY: `value` is valid for its length for the call; `fd` is a socket.
    let r = unsafe {
        nix::libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as nix::libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hands `fd`'s records to the kernel: the TLS ULP, then both directions'
/// keys. A connected TCP socket whose TLS ends exactly where the kernel
/// takes over; after it, the socket carries plaintext for us. (The probe's;
/// sessions attach first and install the keys once the layer gives them.)
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn install(fd: RawFd, offload: &Offload) -> io::Result<()> {
    attach(fd)?;
    install_keys(fd, offload)
}

/// The TLS ULP alone: until keys are installed the socket still carries
/// the raw stream, so a refusal here leaves TLS where it was. The kernel
/// takes the ULP only on an established socket (ENOTCONN once the peer's
/// FIN came in).
#[cfg(target_os = "linux")]
pub(crate) fn attach(fd: RawFd) -> io::Result<()> {
    setsockopt(fd, nix::libc::IPPROTO_TCP, sys::TCP_ULP, b"tls")
}

/// Both directions' keys, after [`attach`].
#[cfg(target_os = "linux")]
pub(crate) fn install_keys(fd: RawFd, offload: &Offload) -> io::Result<()> {
    setsockopt(fd, sys::SOL_TLS, sys::TLS_TX, offload.tx.bytes())?;
    setsockopt(fd, sys::SOL_TLS, sys::TLS_RX, offload.rx.bytes())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn attach(_fd: RawFd) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn install_keys(_fd: RawFd, _offload: &Offload) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// One `recvmsg` on a kTLS socket: `(bytes, record type)`. A control
/// record comes alone (the kernel never joins records of two types); with
/// no room for its type the kernel would fail the read (EIO), so the
/// control buffer is always given.
#[cfg(target_os = "linux")]
pub(crate) fn recv_record(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, u8)> {
    use nix::libc;
    // Room for one cmsg carrying one byte, aligned for cmsghdr.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes `buf` and `control`, both writable for the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut kind = crate::tls::ktls::APPLICATION_DATA;
    // SAFETY: the kernel filled `msg`'s control area; CMSG_* walk within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == sys::SOL_TLS && (*c).cmsg_type == sys::TLS_GET_RECORD_TYPE {
                kind = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, kind))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn recv_record(_fd: RawFd, _buf: &mut [u8]) -> io::Result<(usize, u8)> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Sends a close_notify alert record (the kernel encrypts it).
#[cfg(target_os = "linux")]
pub(crate) fn send_close_notify(fd: RawFd) -> io::Result<usize> {
    use nix::libc;
    let alert = [1u8, 0];
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: alert.as_ptr() as *mut _,
        iov_len: alert.len(),
    };
    // SAFETY: as in `recv_record`; the control area holds one cmsg.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = sys::SOL_TLS;
        (*c).cmsg_type = sys::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = crate::tls::ktls::ALERT;
        libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn send_close_notify(_fd: RawFd) -> io::Result<usize> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Which ciphers this kernel offloads: a loopback TCP pair takes the ULP
/// and, per cipher, made-up keys for both directions. Nothing is sent.
/// `Err` says why there is no offload at all (no TLS ULP: `modprobe tls`).
#[cfg(target_os = "linux")]
pub(crate) fn probe() -> io::Result<Support> {
    use crate::tls::ktls::{
        TLS_CIPHER_AES_GCM_128, TLS_CIPHER_AES_GCM_256, TLS_CIPHER_CHACHA20_POLY1305,
    };
    use std::os::fd::AsRawFd;
    let mut support = Support::NONE;
    let mut first_err = None;
    for cipher in [
        TLS_CIPHER_AES_GCM_128,
        TLS_CIPHER_AES_GCM_256,
        TLS_CIPHER_CHACHA20_POLY1305,
    ] {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let a = std::net::TcpStream::connect(listener.local_addr()?)?;
        let (_b, _) = listener.accept()?;
        let fd = a.as_raw_fd();
        let offload = Offload {
            tx: probe_info(cipher),
            rx: probe_info(cipher),
        };
        match install(fd, &offload) {
            Ok(()) => support = support.with(cipher),
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
        }
    }
    match (support.any(), first_err) {
        (false, Some(e)) => Err(e),
        _ => Ok(support),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn probe() -> io::Result<Support> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Keys of the right shape for `cipher`, for the probe only.
#[cfg(target_os = "linux")]
fn probe_info(cipher: u16) -> CryptoInfo {
    crate::tls::ktls::probe_crypto_info(cipher)
}
