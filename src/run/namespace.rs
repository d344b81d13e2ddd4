//! The namespace child of `portcullis run` (Linux).
//!
//! ```text
//! portcullis (host namespaces: proxy + signal thread)
//!   │ clone(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID), before any thread exists
//!   └─ init (pid 1 of the new PID namespace; new user and network namespaces)
//!        └─ CMD (exec'd with the proxy variables)
//! ```
//!
//! The steps, over a `SOCK_SEQPACKET` socket pair:
//! 1. the parent clones the child, writes its uid/gid maps (identity: CMD
//!    keeps its uid; `setgroups deny` first when unprivileged), sends `M`;
//! 2. the child forks the helper that binds UDP relay sockets inside the
//!    namespace on request ([`super::relay`]), brings `lo` up
//!    (`SIOCSIFFLAGS`), binds the listeners inside the new network
//!    namespace and sends them back with the helper's socket (`SCM_RIGHTS`),
//!    or sends `err:` and a reason;
//! 3. the parent builds the proxy on those sockets (it accepts on them
//!    directly: no bridge) and sends `G`; the child spawns CMD and becomes
//!    its init: it forwards signals to CMD, reaps orphans and exits with
//!    CMD's status. As pid 1 of the PID namespace its exit makes the kernel
//!    kill every process left in it, and the parent's `waitpid` returns only
//!    once they are all gone.
//!
//! Why `clone` without exec: the parent is still single-threaded here (it is
//! checked), so the child is an ordinary copy of a one-thread process and may
//! allocate, log and spawn freely; there is no lock another thread could have
//! held at the fork. Only after the child exists does the parent start any
//! thread (resolvers, reactor, signals). The child dies with the parent
//! (`PR_SET_PDEATHSIG`, tied to the parent's main thread, which runs the
//! reactor until the process exits).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::libc;
use nix::sched::CloneFlags;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getegid, geteuid, Pid};
use portcullis::{Credentials, ListenAddr, ListenerConfig, ListenerProtocol, StdListener};

use super::fdpass;
use super::supervise::{exit_code, wait_signal};
use crate::proxy_env::Var;

/// Stack for the child until it spawns CMD (it runs shallow code; the pages
/// are only touched as used).
const CHILD_STACK: usize = 1 << 20;

/// Listen backlog, as the proxy's own listeners.
const BACKLOG: i32 = 1024;

/// What the child needs: a copy of it lives in the child's memory.
pub struct Plan<'a> {
    /// Listeners to bind inside the namespace.
    pub listeners: &'a [ListenerConfig],
    /// Proxy credentials, for the variables' URLs.
    pub auth: Option<&'a Credentials>,
    /// Extra variables (the TLS hook).
    pub extra_env: &'a [Var],
    /// CMD and its arguments.
    pub cmd: &'a [OsString],
    /// The signals the child waits for (blocked, inherited from the parent).
    pub signals: SigSet,
}

/// How CMD is isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// New user, network and PID namespaces: needs no privilege.
    UserNamespace,
    /// New network and PID namespaces only, as root, where user namespaces
    /// are unavailable.
    RootNetworkNamespace,
}

/// The child, its listeners handed over, waiting for [`Spawned::start`].
pub struct Spawned {
    /// The child's pid (in the host's PID namespace).
    pub pid: Pid,
    /// Which namespaces it has.
    pub isolation: Isolation,
    /// The listeners it bound, with their protocols, in configuration order.
    pub listeners: Vec<(StdListener, ListenerProtocol)>,
    /// UDP sockets and TCP listeners bound at the resolvers' addresses
    /// inside the namespace (port 53), for [`super::trap`] to answer.
    pub dns: Vec<OwnedFd>,
    /// What could not be set up for DNS (one note each), for a log line.
    pub dns_notes: Vec<String>,
    control: OwnedFd,
    /// The socket to the helper that binds UDP relays in the namespace.
    relay: Option<OwnedFd>,
}

impl Spawned {
    /// Lets the child start CMD: the proxy is ready to accept.
    pub fn start(&self) -> io::Result<()> {
        fdpass::send(&self.control, b"G", &[])
    }

    /// The socket to the UDP relay helper ([`super::relay`]); once.
    pub fn take_relay(&mut self) -> OwnedFd {
        self.relay
            .take()
            .expect("the relay helper's socket, taken once")
    }
}

/// Creates the namespaces and their init, and takes its listeners. Must run
/// before the process starts any thread.
pub fn spawn(plan: &Plan) -> Result<Spawned, String> {
    ensure_single_threaded()?;
    let (parent_end, child_end) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| format!("socketpair: {e}"))?;
    let (parent_raw, child_raw) = (parent_end.as_raw_fd(), child_end.as_raw_fd());
    let mut stack = vec![0u8; CHILD_STACK];
    let mut clone = |flags: CloneFlags| {
        let cb = Box::new(|| child_main(plan, parent_raw, child_raw) as isize);
        // SAFETY: no CLONE_VM: the child runs on its own copy of `stack` and of
        // this single-threaded process (checked above), so it may allocate.
        unsafe { nix::sched::clone(cb, &mut stack, flags, Some(libc::SIGCHLD)) }
    };
    let net = CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWPID;
    let (pid, isolation) = match clone(CloneFlags::CLONE_NEWUSER | net) {
        Ok(pid) => (pid, Isolation::UserNamespace),
        Err(user_err) if geteuid().is_root() => match clone(net) {
            Ok(pid) => {
                log::warn!(
                    "user namespaces unavailable ({user_err}): CMD runs as root in a plain \
                     network namespace, from which a root process could leave (setns)"
                );
                (pid, Isolation::RootNetworkNamespace)
            }
            Err(e) => return Err(unavailable(user_err, Some(e))),
        },
        Err(e) => return Err(unavailable(e, None)),
    };
    drop(child_end);
    let fail = |msg: String| {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
        msg
    };
    if isolation == Isolation::UserNamespace {
        write_id_maps(pid).map_err(|e| {
            fail(format!(
                "the user namespace was created but writing its uid/gid maps failed: {e}{}",
                restriction_hint()
            ))
        })?;
    }
    fdpass::send(&parent_end, b"M", &[])
        .map_err(|e| fail(format!("cannot reach the namespace child: {e}")))?;

    let mut buf = [0u8; 4096];
    let (n, fds) = fdpass::recv(&parent_end, &mut buf)
        .map_err(|e| fail(format!("reading from the namespace child: {e}")))?;
    let msg = &buf[..n];
    if let Some(reason) = msg.strip_prefix(b"err:") {
        return Err(fail(String::from_utf8_lossy(reason).into_owned()));
    }
    let Some(notes) = msg.strip_prefix(b"ok") else {
        let status = child_status(pid);
        return Err(fail(format!(
            "the namespace child failed to set up the network ({status})"
        )));
    };
    let dns_notes: Vec<String> = String::from_utf8_lossy(notes)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let mut fds = fds;
    if fds.len() < 1 + plan.listeners.len() {
        let status = child_status(pid);
        return Err(fail(format!(
            "the namespace child failed to set up the network ({status})"
        )));
    }
    let relay = fds.remove(0);
    let dns = fds.split_off(plan.listeners.len());
    let listeners = fds
        .into_iter()
        .zip(plan.listeners)
        .map(|(fd, l)| {
            let socket = match l.addr {
                ListenAddr::Tcp(_) => StdListener::Tcp(fd.into()),
                ListenAddr::Unix(_) => StdListener::Unix(fd.into()),
            };
            (socket, l.protocol)
        })
        .collect();
    Ok(Spawned {
        pid,
        isolation,
        listeners,
        dns,
        dns_notes,
        control: parent_end,
        relay: Some(relay),
    })
}

/// The child's state after it stopped talking: for an error message.
fn child_status(pid: Pid) -> String {
    match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => "it is still running".into(),
        Ok(s) => format!("it exited: {s:?}"),
        Err(e) => format!("waitpid: {e}"),
    }
}

/// `clone` of the child must happen while this process has one thread.
fn ensure_single_threaded() -> Result<(), String> {
    match std::fs::read_dir("/proc/self/task").map(Iterator::count) {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!(
            "internal error: the namespace child must be created before any thread starts \
             ({n} threads exist)"
        )),
        // Without /proc (unusual) the check cannot be made; the call order in run/ stands.
        Err(_) => Ok(()),
    }
}

/// Identity maps for the child's user namespace, written from the parent
/// (which holds the capabilities over it). Root maps every id, so CMD keeps
/// its reach over every file; anyone else maps their own uid and gid, after
/// `setgroups deny` as the kernel requires of an unprivileged writer.
fn write_id_maps(pid: Pid) -> io::Result<()> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
    const ALL: &str = "0 0 4294967295\n";
    let uid_done = uid == 0 && write_once(&dir.join("uid_map"), ALL).is_ok();
    if !uid_done {
        write_once(&dir.join("uid_map"), &format!("{uid} {uid} 1\n"))?;
    }
    if uid_done && write_once(&dir.join("gid_map"), ALL).is_ok() {
        return Ok(());
    }
    write_once(&dir.join("setgroups"), "deny")?;
    write_once(&dir.join("gid_map"), &format!("{gid} {gid} 1\n"))
}

/// One `write(2)`: the map files take their whole content in one call.
fn write_once(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    match f.write(text.as_bytes())? {
        n if n == text.len() => Ok(()),
        _ => Err(io::Error::other(format!(
            "short write to {}",
            path.display()
        ))),
    }
}

/// Why namespaces could not be created, and what to look at.
fn unavailable(user: Errno, root_net: Option<Errno>) -> String {
    let mut s = format!(
        "cannot isolate CMD: creating a user namespace (clone with CLONE_NEWUSER) failed: \
         {user}"
    );
    if let Some(e) = root_net {
        s += &format!("; a plain network namespace as root failed too: {e}");
    }
    s += ".";
    let cause = match user {
        Errno::ENOSPC => " The limit user.max_user_namespaces is 0 or reached.",
        Errno::EINVAL => " The kernel may lack user namespaces (CONFIG_USER_NS).",
        Errno::EPERM if unmapped_self() => {
            " This process's own uid has no mapping in its user namespace (it runs inside \
             a namespace without a uid_map), so no nested one can be made."
        }
        Errno::EPERM => {
            " Unprivileged user namespaces look disabled, or a seccomp filter (such as a \
             container runtime's default profile) forbids them."
        }
        _ => "",
    };
    s += cause;
    s += &format!(" Check: {}.", sysctls());
    s += " To only set the proxy variables (CMD can then still connect directly), \
          use: portcullis run --no-isolate ...";
    s
}

/// The sysctls that govern unprivileged user namespaces, with their values here.
fn sysctls() -> String {
    [
        ("user.max_user_namespaces", "must be > 0"),
        ("kernel.unprivileged_userns_clone", "Debian, must be 1"),
        (
            "kernel.apparmor_restrict_unprivileged_userns",
            "Ubuntu, must be 0",
        ),
    ]
    .iter()
    .map(|(name, want)| {
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        match std::fs::read_to_string(path) {
            Ok(v) => format!("{name} = {} ({want})", v.trim()),
            Err(_) => format!("{name} (absent here)"),
        }
    })
    .collect::<Vec<_>>()
    .join(", ")
}

/// Whether this process's uid is unmapped in its own user namespace.
fn unmapped_self() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| m.trim().is_empty())
}

/// For failures after the namespace exists (AppArmor may strip its capabilities).
fn restriction_hint() -> String {
    format!(
        " (a security module may deny capabilities in unprivileged user namespaces; check: \
         {}; or use portcullis run --no-isolate)",
        sysctls()
    )
}

// ---------------------------------------------------------------------------
// The child
// ---------------------------------------------------------------------------

/// The child: network setup, then CMD's init. Returns its exit status.
fn child_main(plan: &Plan, parent_raw: RawFd, child_raw: RawFd) -> i32 {
    // SAFETY: these are the child's copies of the pair; nothing else in the
    // child owns them (the parent's OwnedFds here are never dropped: the child
    // exits from this function).
    drop(unsafe { OwnedFd::from_raw_fd(parent_raw) });
    let sock = unsafe { OwnedFd::from_raw_fd(child_raw) };
    // Die with portcullis: CMD must never outlive its proxy.
    // SAFETY: a plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };

    let mut byte = [0u8; 1];
    if !matches!(fdpass::recv(&sock, &mut byte), Ok((1, _)) if byte == *b"M") {
        return 1; // the parent gave up
    }
    // First, while the child holds no other descriptor the helper would keep.
    let relay = match super::relay::spawn_helper(&[&sock]) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("err:cannot start the namespace's UDP helper: {e}");
            let _ = fdpass::send(&sock, why.as_bytes(), &[]);
            return 1;
        }
    };
    let bound = match setup_network(plan.listeners) {
        Ok(b) => b,
        Err(e) => {
            let _ = fdpass::send(&sock, format!("err:{e}").as_bytes(), &[]);
            return 1;
        }
    };
    let (dns, notes) = resolver_sockets();
    let fds: Vec<RawFd> = std::iter::once(relay.as_raw_fd())
        .chain(bound.iter().map(|(fd, _)| fd.as_raw_fd()))
        .chain(dns.iter().map(AsRawFd::as_raw_fd))
        .collect();
    let mut msg = b"ok".to_vec();
    for note in &notes {
        msg.push(b'\n');
        msg.extend_from_slice(note.as_bytes());
    }
    msg.truncate(4000); // the parent reads 4096 bytes
    if fdpass::send(&sock, &msg, &fds).is_err() {
        return 1;
    }
    drop(dns);
    drop(relay);
    let addrs: Vec<(ListenAddr, ListenerProtocol)> = bound
        .iter()
        .zip(plan.listeners)
        .map(|((_, a), l)| (a.clone(), l.protocol))
        .collect();
    drop(bound); // the parent holds them now
    if !matches!(fdpass::recv(&sock, &mut byte), Ok((1, _)) if byte == *b"G") {
        return 1;
    }
    drop(sock);

    let env = super::proxy_env(&addrs, plan.auth, plan.extra_env);
    // No PDEATHSIG for CMD: when this init dies the kernel kills the whole PID namespace.
    let cmd = match super::cmd_command(plan.cmd, false).envs(env.vars).spawn() {
        Ok(c) => Pid::from_raw(c.id() as i32),
        Err(e) => {
            fatal!("cannot run {}: {e}", plan.cmd[0].to_string_lossy());
            return super::spawn_failure_code(&e).into();
        }
    };
    init(cmd, &plan.signals)
}

/// Pid 1's loop: forward signals to CMD, reap every child, and return CMD's
/// status once it exits (the kernel then kills whatever is left).
fn init(cmd: Pid, signals: &SigSet) -> i32 {
    loop {
        let (sig, from_terminal) = match wait_signal(signals) {
            Ok(s) => s,
            Err(_) => return 1,
        };
        match sig {
            Signal::SIGCHLD => loop {
                match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(status) if status.pid() == Some(cmd) => {
                        if let Some(code) = exit_code(status) {
                            return code.into();
                        }
                    }
                    Ok(_) => {} // an orphan, reaped
                    Err(Errno::EINTR) => {}
                    Err(_) => return 1, // ECHILD: CMD was reaped already (cannot happen)
                }
            },
            Signal::SIGUSR1 => {}
            // A terminal signals its foreground process group, CMD included.
            _ if from_terminal => {}
            sig => {
                let _ = kill(cmd, sig);
            }
        }
    }
}

/// Brings up `lo` and binds the listeners, inside the new network namespace.
fn setup_network(listeners: &[ListenerConfig]) -> Result<Vec<(OwnedFd, ListenAddr)>, String> {
    loopback_up().map_err(|e| {
        format!(
            "cannot bring up the loopback interface in the new network namespace: {e}{}",
            restriction_hint()
        )
    })?;
    listeners
        .iter()
        .map(|l| {
            bind(&l.addr).map_err(|e| {
                format!(
                    "cannot listen on {} inside CMD's network namespace (it has only a \
                     loopback interface): {e}",
                    l.addr
                )
            })
        })
        .collect()
}

/// A UDP socket and a TCP listener on port 53 at each resolver of
/// /etc/resolv.conf, the address added to `lo` first unless it is a
/// loopback one already; and a note for each that failed. Never fatal: CMD runs without them, its
/// direct queries then failing with no route (quickly, but unexplained).
fn resolver_sockets() -> (Vec<OwnedFd>, Vec<String>) {
    let text = match std::fs::read_to_string("/etc/resolv.conf") {
        Ok(t) => t,
        Err(e) => {
            return (
                Vec::new(),
                vec![format!("cannot read /etc/resolv.conf: {e}")],
            )
        }
    };
    // SAFETY: a NUL-terminated name.
    let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    let mut socks = Vec::new();
    let mut notes = Vec::new();
    for ip in super::dns::nameservers(&text) {
        let bound = (|| {
            if !ip.is_loopback() {
                super::netlink::add_address(lo, ip)?;
            }
            let addr = std::net::SocketAddr::new(ip, 53);
            let socket = |kind| {
                let s = socket2::Socket::new(socket2::Domain::for_address(addr), kind, None)?;
                if ip.is_ipv6() {
                    s.set_only_v6(true)?;
                }
                s.bind(&addr.into())?;
                io::Result::Ok(s)
            };
            let udp = socket(socket2::Type::DGRAM)?;
            let tcp = socket(socket2::Type::STREAM)?;
            tcp.listen(16)?;
            io::Result::Ok([OwnedFd::from(udp), OwnedFd::from(tcp)])
        })();
        match bound {
            Ok(fds) => socks.extend(fds),
            Err(e) => notes.push(format!(
                "cannot answer DNS queries to the resolver {ip} inside the namespace: {e}"
            )),
        }
    }
    (socks, notes)
}

/// `ip link set lo up`, by ioctl.
fn loopback_up() -> io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    // SAFETY: ifreq is plain data, valid zeroed.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write `req`, a valid
    // ifreq naming "lo", for the duration of each call.
    unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS as _, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A listening socket (close-on-exec), and the address it got.
fn bind(addr: &ListenAddr) -> io::Result<(OwnedFd, ListenAddr)> {
    use socket2::{Domain, SockAddr, Socket, Type};
    match addr {
        ListenAddr::Tcp(a) => {
            let s = Socket::new(Domain::for_address(*a), Type::STREAM, None)?;
            s.set_reuse_address(true)?;
            s.bind(&(*a).into())?;
            s.listen(BACKLOG)?;
            let local = s
                .local_addr()?
                .as_socket()
                .ok_or_else(|| io::Error::other("not an IP socket"))?;
            Ok((s.into(), ListenAddr::Tcp(local)))
        }
        ListenAddr::Unix(path) => {
            remove_stale_socket(path)?;
            let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
            s.bind(&SockAddr::unix(path)?)?;
            s.listen(BACKLOG)?;
            Ok((s.into(), ListenAddr::Unix(path.clone())))
        }
    }
}

/// Replaces a socket file left by an earlier run, but never a regular file.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_names_the_cause_the_sysctls_and_the_way_out() {
        let msg = unavailable(Errno::EPERM, None);
        assert!(msg.contains("EPERM"), "{msg}");
        assert!(msg.contains("user.max_user_namespaces"), "{msg}");
        assert!(msg.contains("kernel.unprivileged_userns_clone"), "{msg}");
        assert!(msg.contains("--no-isolate"), "{msg}");
        let msg = unavailable(Errno::ENOSPC, Some(Errno::EPERM));
        assert!(msg.contains("max_user_namespaces is 0"), "{msg}");
        assert!(
            msg.contains("plain network namespace as root failed"),
            "{msg}"
        );
    }
}
