//! UDP relay sockets inside CMD's network namespace (Linux).
//!
//! A SOCKS5 UDP association's relay must be bound where the client can
//! send to it: under `run` that is CMD's network namespace, not the
//! proxy's, and a socket belongs to the namespace of the process that
//! creates it (the proxy cannot enter CMD's: `setns` needs
//! `CAP_SYS_ADMIN` in both). So a helper forked inside the namespace binds
//! them on request: the proxy sends an address over a `SOCK_SEQPACKET`
//! pair and gets back a UDP socket bound at `(address, port 0)`
//! (`SCM_RIGHTS`), or `err:` and a reason. The helper holds nothing else
//! of its own (only what the namespace child inherited), is not dumpable
//! (CMD cannot ptrace it nor take its socket), and exits when the proxy's
//! end closes or the namespace's init dies.

use std::io;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use nix::libc;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::ForkResult;

use super::fdpass;

/// How long the proxy waits for the helper (it answers in microseconds;
/// this bounds a helper that was stopped or killed).
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// Forks the helper; returns the proxy's end of its socket pair. Runs in
/// the namespace child while it is single-threaded, before it opens any
/// descriptor the helper should not hold; `others` are descriptors the
/// helper closes at once.
pub fn spawn_helper(others: &[&OwnedFd]) -> io::Result<OwnedFd> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    // SAFETY: the calling process has one thread (the namespace child, a
    // clone of the single-threaded parent), so the fork copies no lock held
    // by another thread.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { .. } => Ok(ours),
        ForkResult::Child => {
            // SAFETY: plain prctls with integer arguments: die with init,
            // and be out of CMD's reach but for signals. CMD has this uid
            // (and, when `run` was started as root, every capability in
            // the user namespace): were the helper dumpable, CMD could
            // ptrace it or take its socket (`pidfd_getfd`) and hand the
            // proxy relays it shares, whose `O_NONBLOCK` it could clear to
            // block a reactor thread for good. Not dumpable, ptrace needs
            // CAP_SYS_PTRACE in the initial user namespace.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::prctl(libc::PR_SET_DUMPABLE, 0) != 0 {
                    libc::_exit(1);
                }
            }
            for fd in others {
                // SAFETY: the helper's copies; nothing in it uses them.
                unsafe { libc::close(fd.as_raw_fd()) };
            }
            drop(ours);
            serve(&theirs);
            // SAFETY: leave without running the parent's exit handlers.
            unsafe { libc::_exit(0) }
        }
    }
}

/// The helper's loop: one request, one answer, until the proxy hangs up.
fn serve(sock: &OwnedFd) {
    let mut buf = [0u8; 64];
    loop {
        let n = match fdpass::recv(sock, &mut buf) {
            Ok((0, _)) | Err(_) => return,
            Ok((n, _)) => n,
        };
        let answer = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|t| t.parse::<IpAddr>().ok())
            .ok_or_else(|| "not an address".to_string())
            .and_then(|ip| UdpSocket::bind((ip, 0)).map_err(|e| format!("bind {ip}: {e}")));
        let sent = match answer {
            Ok(s) => fdpass::send(sock, b"ok", &[s.as_raw_fd()]),
            Err(why) => fdpass::send(sock, format!("err:{why}").as_bytes(), &[]),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The proxy's side: asks the helper for a relay socket at an address.
pub struct Binder {
    /// The helper's socket, or why it is no longer asked: once it failed
    /// to answer, a late answer would be taken for the next request's.
    sock: Mutex<Result<OwnedFd, String>>,
}

impl Binder {
    pub fn new(sock: OwnedFd) -> io::Result<Binder> {
        socket2::SockRef::from(&sock).set_read_timeout(Some(ANSWER_WITHIN))?;
        Ok(Binder {
            sock: Mutex::new(Ok(sock)),
        })
    }

    /// A UDP socket bound at `(ip, port 0)` inside CMD's network namespace.
    pub fn bind(&self, ip: IpAddr) -> io::Result<UdpSocket> {
        let mut guard = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let sock = match guard.as_ref() {
            Ok(s) => s,
            Err(why) => return Err(io::Error::other(why.clone())),
        };
        let mut buf = [0u8; 256];
        let answer = fdpass::send(sock, ip.to_string().as_bytes(), &[])
            .and_then(|()| fdpass::recv(sock, &mut buf));
        let (n, mut fds) = match answer {
            Ok((n, fds)) if n > 0 => (n, fds),
            Ok(_) => return Err(broken(&mut guard, gone())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let why = format!(
                    "the namespace's UDP helper did not answer within {}s (stopped?); \
                     UDP associations need a new `portcullis run`",
                    ANSWER_WITHIN.as_secs()
                );
                return Err(broken(&mut guard, why));
            }
            Err(e) => return Err(broken(&mut guard, format!("{} ({e})", gone()))),
        };
        match (&buf[..n], fds.pop()) {
            (b"ok", Some(fd)) if fds.is_empty() => Ok(UdpSocket::from(fd)),
            (msg, _) => Err(io::Error::other(format!(
                "inside CMD's network namespace: {}",
                String::from_utf8_lossy(msg.strip_prefix(b"err:").unwrap_or(msg))
            ))),
        }
    }
}

fn gone() -> String {
    "the namespace's UDP helper is gone (killed from inside CMD?); \
     UDP associations need a new `portcullis run`"
        .into()
}

/// Stops asking the helper (closing its socket ends it); the error to return.
fn broken(guard: &mut Result<OwnedFd, String>, why: String) -> io::Error {
    *guard = Err(why.clone());
    io::Error::other(why)
}
