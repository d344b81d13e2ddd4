//! A Unix listener's socket file: made with its mode from the start, never
//! over a live socket, and removed at exit only while it is still ours.
//!
//! What guards a Unix socket on Linux is its file: `connect` needs write
//! permission on it (and search permission on the directories above). So:
//!
//! - **No wider window.** On Linux the new file takes its mode from the
//!   socket's own inode, masked by the umask, so the socket is `fchmod`ed
//!   to the mode before `bind`: the file never exists with more bits than
//!   asked. If the umask took bits the mode wants, they are added back (and
//!   the group set) before `listen`; until `listen` every connect is refused
//!   whatever the mode, so nobody gets in under a wider mode at any moment.
//! - **A live socket is not replaced.** Before binding, an existing socket
//!   file is probed with a non-blocking connect: accepted (or pending)
//!   means another process serves it, and starting fails; refused means it
//!   is stale and is removed. Anything else at the path is an error.
//! - **Removed only if ours.** The file's device and inode are recorded
//!   after binding; at exit the path is removed only if it still names that
//!   inode, so a later instance's socket survives an earlier one's exit.
//!
//! A directory others may write to lets them replace the path at any time;
//! choose one only the proxy's user (or group) can write, as for any socket.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::config::UnixAccess;

/// A socket file this process created, identified by device and inode.
/// Drop it before the socket: while the socket is open its file's inode
/// stays allocated, so no other file can have the same number.
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Whether `path` still names the file we created.
    fn is_ours(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && m.dev() == self.dev && m.ino() == self.ino)
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        // A small window remains between the check and the unlink; no
        // system call unlinks "only if it is this inode".
        if self.is_ours() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Makes a Unix stream socket bound at `path` with `access`, not yet
/// listening, and the record that removes its file at exit.
pub(crate) fn bind(path: &Path, access: &UnixAccess) -> io::Result<(socket2::Socket, SocketFile)> {
    let gid = match &access.group {
        Some(g) => Some(
            g.gid()
                .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))?,
        ),
        None => None,
    };
    clear_stale(path)?;
    let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use nix::sys::stat::{fchmod, Mode};
        fchmod(&s, Mode::from_bits_truncate(access.mode as _))?;
    }
    s.bind(&socket2::SockAddr::unix(path)?).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            io::Error::new(
                e.kind(),
                format!(
                    "{} appeared while starting: another process took the path",
                    path.display()
                ),
            )
        } else {
            e
        }
    })?;
    let m = std::fs::symlink_metadata(path)?;
    let file = SocketFile {
        path: path.to_path_buf(),
        dev: m.dev(),
        ino: m.ino(),
    };
    if !m.file_type().is_socket() {
        return Err(swapped(path));
    }
    if m.mode() & 0o7777 != access.mode {
        set_mode(path, access.mode)?;
    }
    if let Some(gid) = gid {
        use nix::fcntl::{AtFlags, AT_FDCWD};
        use nix::unistd::{fchownat, Gid};
        let gid = Gid::from_raw(gid);
        fchownat(
            AT_FDCWD,
            path,
            None,
            Some(gid),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot give {} to group {gid}: {e}", path.display()),
            )
        })?;
    }
    // Still our file, with the mode asked, before anyone may connect.
    let m = std::fs::symlink_metadata(path)?;
    if !file.is_ours() || m.mode() & 0o7777 != access.mode {
        return Err(swapped(path));
    }
    Ok((s, file))
}

fn swapped(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{} changed while being set up: another process is using the path",
        path.display()
    ))
}

/// chmod without following a symlink (one swapped in would point us
/// elsewhere); where the C library cannot, a plain chmod, the file having
/// just been checked to be our socket.
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use nix::errno::Errno;
    use nix::sys::stat::{fchmodat, FchmodatFlags, Mode};
    let bits = Mode::from_bits_truncate(mode as _);
    match fchmodat(
        nix::fcntl::AT_FDCWD,
        path,
        bits,
        FchmodatFlags::NoFollowSymlink,
    ) {
        Ok(()) => Ok(()),
        Err(Errno::ENOTSUP | Errno::ENOSYS) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        }
        Err(e) => Err(e.into()),
    }
}

/// Clears the way for a new socket at `path`: nothing there, or a stale
/// socket (removed). A live socket or any other file is an error.
fn clear_stale(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if !m.file_type().is_socket() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Ok(_) => match probe(path) {
            Probe::Live => Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{} is in use: another process is listening on it (another portcullis?)",
                    path.display()
                ),
            )),
            Probe::Stale => match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
            Probe::Gone => Ok(()),
            Probe::Unknown(e) => Err(io::Error::new(
                e.kind(),
                format!("cannot tell whether {} is in use: {e}", path.display()),
            )),
        },
    }
}

/// What a connect to an existing socket file says.
#[derive(Debug)]
enum Probe {
    /// Accepted, or queued: someone listens.
    Live,
    /// Refused: the file outlived its listener.
    Stale,
    /// Removed meanwhile.
    Gone,
    /// Could not tell (for example no permission to connect).
    Unknown(io::Error),
}

/// Connects without blocking: a listener with a full backlog would
/// otherwise hold a blocking connect.
fn probe(path: &Path) -> Probe {
    let s = match socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None) {
        Ok(s) => s,
        Err(e) => return Probe::Unknown(e),
    };
    if let Err(e) = s.set_nonblocking(true) {
        return Probe::Unknown(e);
    }
    let addr = match socket2::SockAddr::unix(path) {
        Ok(a) => a,
        Err(e) => return Probe::Unknown(e),
    };
    match s.connect(&addr) {
        Ok(()) => Probe::Live,
        Err(e) => match e.raw_os_error().map(nix::errno::Errno::from_raw) {
            Some(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINPROGRESS) => Probe::Live,
            Some(nix::errno::Errno::ECONNREFUSED) => Probe::Stale,
            Some(nix::errno::Errno::ENOENT) => Probe::Gone,
            _ => Probe::Unknown(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UnixGroup;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("portcullis-sf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn listening(s: socket2::Socket) -> UnixListener {
        s.listen(8).unwrap();
        s.into()
    }

    #[test]
    fn mode_group_and_removal() {
        let d = dir("mode");
        let p = d.join("s.sock");
        let gid = nix::unistd::getegid().as_raw();
        let access = UnixAccess {
            mode: 0o660,
            group: Some(UnixGroup::Gid(gid)),
        };
        let (s, file) = bind(&p, &access).unwrap();
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!((m.mode() & 0o7777, m.gid()), (0o660, gid));
        let l = listening(s);
        UnixStream::connect(&p).expect("connect");
        drop(file);
        assert!(!p.exists(), "ours: removed");
        drop(l);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn live_stale_and_foreign_paths() {
        let d = dir("live");
        let p = d.join("s.sock");
        let (s, first) = bind(&p, &UnixAccess::default()).unwrap();
        let l = listening(s);
        // Live: refused, and the first socket keeps its file.
        let e = bind(&p, &UnixAccess::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert!(e.to_string().contains("in use"), "{e}");
        UnixStream::connect(&p).expect("the first is still reachable");
        drop(first);
        drop(l);
        assert!(!p.exists());
        // A file whose listener is gone (std leaves it behind): stale, replaced.
        drop(UnixListener::bind(&p).unwrap());
        assert!(p.exists());
        let (s, second) = bind(&p, &UnixAccess::default()).unwrap();
        drop(second);
        drop(s);
        assert!(!p.exists());
        // Not a socket: an error, and the file stays.
        std::fs::write(&p, "x").unwrap();
        let e = bind(&p, &UnixAccess::default()).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert!(p.exists());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_replaced_file_is_not_removed() {
        let d = dir("replaced");
        let p = d.join("s.sock");
        let (_s, ours) = bind(&p, &UnixAccess::default()).unwrap();
        std::fs::remove_file(&p).unwrap();
        let theirs = UnixListener::bind(&p).unwrap();
        // Ours is dropped while our socket still holds its inode, as the
        // listener does.
        drop(ours);
        UnixStream::connect(&p).expect("theirs is untouched");
        drop(theirs);
        std::fs::remove_dir_all(d).unwrap();
    }
}
