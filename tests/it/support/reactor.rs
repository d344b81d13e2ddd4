//! Whether a proxy's reactor is asleep, from /proc (the test process's own
//! for an in-process proxy, the binary's for a child): a thread blocked in
//! `epoll_wait` on an epoll instance that watches one of its sockets. A
//! reactor asleep there has handled every event that reached that socket
//! (a ready event wakes it at once): what wakes it after that is something
//! new.

use std::net::SocketAddr;

use super::tcp_table::tcp_row;

/// The numbers of `epoll_wait`, `epoll_pwait` and `epoll_pwait2` on x86_64.
#[cfg(target_arch = "x86_64")]
const EPOLL_WAITS: &[u64] = &[232, 281, 441];
/// `epoll_pwait` and `epoll_pwait2` in the generic numbering (aarch64,
/// riscv64, loongarch64: no `epoll_wait`).
#[cfg(not(target_arch = "x86_64"))]
const EPOLL_WAITS: &[u64] = &[22, 441];

/// Whether a thread of this process is asleep in an epoll instance that
/// watches the socket listening on `listener`: the reactor of a proxy of
/// one worker. (Its registry holds a dup of the epoll fd: an instance may
/// have several fds, and only one is slept on.)
pub fn reactor_in_epoll_wait(listener: SocketAddr) -> bool {
    let unconnected: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let row = tcp_row(listener, unconnected)
        .unwrap_or_else(|| panic!("no socket listening on {listener}"));
    in_epoll_wait_watching("self", row.inode)
}

/// Whether a thread of process `pid` (a number, or `self`) is asleep in
/// an epoll instance that watches the socket of inode `inode` (see
/// [`tcp_row`]): the reactor that serves that socket, whatever the number
/// of workers. Panics if no epoll of `pid` watches it.
pub fn in_epoll_wait_watching(pid: &str, inode: u64) -> bool {
    let proc = format!("/proc/{pid}");
    let epolls: Vec<u64> = fds_on(&proc, &format!("socket:[{inode}]"))
        .into_iter()
        .flat_map(|fd| epolls_watching(&proc, fd))
        .collect();
    assert!(
        !epolls.is_empty(),
        "no epoll of {proc} watches socket {inode}"
    );
    let asleep = asleep_in_epoll_wait(&proc);
    epolls.iter().any(|e| asleep.contains(e))
}

/// The process's fds whose link reads `target`.
fn fds_on(proc: &str, target: &str) -> Vec<u64> {
    std::fs::read_dir(format!("{proc}/fd"))
        .expect("/proc/PID/fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let link = std::fs::read_link(e.path()).ok()?;
            (link.to_str()? == target).then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// The process's epoll fds that watch `fd`.
fn epolls_watching(proc: &str, fd: u64) -> Vec<u64> {
    std::fs::read_dir(format!("{proc}/fdinfo"))
        .expect("/proc/PID/fdinfo")
        .filter_map(|e| {
            let e = e.ok()?;
            let info = std::fs::read_to_string(e.path()).ok()?;
            watched(&info)
                .contains(&fd)
                .then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// The fds an epoll instance's fdinfo lists (`tfd: N ...` lines).
fn watched(fdinfo: &str) -> Vec<u64> {
    fdinfo
        .lines()
        .filter_map(|l| {
            l.strip_prefix("tfd:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The epoll fds the process's threads are asleep in (state S, blocked
/// in an `epoll_wait` whose first argument is the fd).
fn asleep_in_epoll_wait(proc: &str) -> Vec<u64> {
    std::fs::read_dir(format!("{proc}/task"))
        .expect("/proc/PID/task")
        .filter_map(|t| {
            let t = t.ok()?.path();
            let stat = std::fs::read_to_string(t.join("stat")).ok()?;
            let syscall = std::fs::read_to_string(t.join("syscall")).ok()?;
            epoll_wait_fd(&stat, &syscall)
        })
        .collect()
}

/// The epoll fd a thread sleeps on, from its `stat` and `syscall` files.
fn epoll_wait_fd(stat: &str, syscall: &str) -> Option<u64> {
    let state = stat.rsplit(')').next()?.split_whitespace().next()?;
    let mut f = syscall.split_whitespace();
    let nr: u64 = f.next()?.parse().ok()?;
    let fd = u64::from_str_radix(f.next()?.strip_prefix("0x")?, 16).ok()?;
    (state == "S" && EPOLL_WAITS.contains(&nr)).then_some(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoll_fdinfo_lists_the_watched_fds() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        7 events:       19 data:                7  pos:0 ino:4242 sdev:8\n\
                    tfd:       12 events:8000201d data:                c  pos:0 ino:4243 sdev:8\n";
        assert_eq!(watched(info), [7, 12]);
        assert_eq!(watched("pos:\t0\nflags:\t02\n"), Vec::<u64>::new());
    }

    #[test]
    fn only_a_sleeping_epoll_wait_counts() {
        let stat = "4900 (portcullis-rea) S 1 2 3";
        let nr = EPOLL_WAITS[EPOLL_WAITS.len() - 1];
        let waiting = format!("{nr} 0x5 0x7f44e4000ba0 0x400 0xffffffff 0x0 0x0 0x7f 0x7f");
        assert_eq!(epoll_wait_fd(stat, &waiting), Some(5));
        let running = "4900 (portcullis-rea) R 1 2 3";
        assert_eq!(epoll_wait_fd(running, &waiting), None);
        assert_eq!(epoll_wait_fd(stat, "running"), None);
        assert_eq!(
            epoll_wait_fd(stat, "0 0x4 0x55b5 0x2000 0x0 0x0 0x0 0x7f 0x7f"),
            None
        );
    }
}
