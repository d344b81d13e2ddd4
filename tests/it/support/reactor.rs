//! Whether a proxy's reactor is asleep, from /proc (the test process's own
//! for an in-process proxy, the binary's for a child): a thread blocked in
//! `epoll_wait` on an epoll instance that watches one of its sockets. A
//! reactor asleep there has handled every event that reached that socket
//! (a ready event wakes it at once): what wakes it after that is something
//! new.
//!
//! Asleep with no timeout (no timer armed), it is parked for good: nothing
//! but a new event wakes it. That is how the tests show an idle proxy
//! costs no wakeups, at once rather than by watching it for a while.

use std::net::SocketAddr;
use std::time::Duration;

use super::tcp_table::{tcp_row, tcp_rows, TCP_LISTEN};
use super::wait::{wait_until, PROMPTLY};

/// The numbers of `epoll_wait` and `epoll_pwait` on x86_64: their 4th
/// argument is the timeout in milliseconds, an int.
#[cfg(target_arch = "x86_64")]
const EPOLL_WAIT_MS: &[u64] = &[232, 281];
/// `epoll_pwait` in the generic numbering (aarch64, riscv64, loongarch64:
/// no `epoll_wait`).
#[cfg(not(target_arch = "x86_64"))]
const EPOLL_WAIT_MS: &[u64] = &[22];
/// `epoll_pwait2` (every arch): its 4th argument points to a timespec,
/// NULL for no timeout.
const EPOLL_PWAIT2: u64 = 441;

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

/// The epoll fds the process's threads are asleep in.
fn asleep_in_epoll_wait(proc: &str) -> Vec<u64> {
    sleepers(proc).into_iter().map(|s| s.epfd).collect()
}

/// How a thread asleep in `epoll_wait` wakes if no event comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpollTimeout {
    /// Never: no timeout (a negative one, or `epoll_pwait2`'s NULL).
    Never,
    /// This many milliseconds after it went to sleep.
    Ms(u32),
    /// `epoll_pwait2`'s timespec (not read): some time.
    Timespec,
}

/// A thread asleep in `epoll_wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sleeper {
    tid: u64,
    /// The epoll fd it sleeps on.
    epfd: u64,
    timeout: EpollTimeout,
    /// Its `voluntary_ctxt_switches`: one more each time it goes to
    /// sleep, so the same count means the same sleep.
    switches: u64,
}

/// The process's threads asleep in `epoll_wait` (state S, in one of the
/// calls), each read between two equal switch counts: one sleep, seen whole.
fn sleepers(proc: &str) -> Vec<Sleeper> {
    std::fs::read_dir(format!("{proc}/task"))
        .expect("/proc/PID/task")
        .filter_map(|t| {
            let t = t.ok()?;
            let tid = t.file_name().to_str()?.parse().ok()?;
            let t = t.path();
            let switches = || voluntary_switches(&std::fs::read_to_string(t.join("status")).ok()?);
            let before = switches()?;
            let stat = std::fs::read_to_string(t.join("stat")).ok()?;
            let syscall = std::fs::read_to_string(t.join("syscall")).ok()?;
            let (epfd, timeout) = epoll_wait_args(&stat, &syscall)?;
            (switches()? == before).then_some(Sleeper {
                tid,
                epfd,
                timeout,
                switches: before,
            })
        })
        .collect()
}

/// The epoll fd a thread sleeps on and its timeout, from its `stat` and
/// `syscall` files (`NR arg1 ... arg6 sp pc`, in hex but NR).
fn epoll_wait_args(stat: &str, syscall: &str) -> Option<(u64, EpollTimeout)> {
    let state = stat.rsplit(')').next()?.split_whitespace().next()?;
    let mut f = syscall.split_whitespace();
    let nr: u64 = f.next()?.parse().ok()?;
    let mut arg = || u64::from_str_radix(f.next()?.strip_prefix("0x")?, 16).ok();
    let fd = arg()?;
    let timeout = arg().and(arg()).and(arg())?;
    let timeout = if EPOLL_WAIT_MS.contains(&nr) {
        // An int: -1 reads 0xffffffff or 0xffffffffffffffff (sign-extended).
        match timeout as u32 as i32 {
            ms if ms < 0 => EpollTimeout::Never,
            ms => EpollTimeout::Ms(ms as u32),
        }
    } else if nr == EPOLL_PWAIT2 {
        match timeout {
            0 => EpollTimeout::Never,
            _ => EpollTimeout::Timespec,
        }
    } else {
        return None;
    };
    (state == "S").then_some((fd, timeout))
}

/// The `voluntary_ctxt_switches` of a task's `status` file.
fn voluntary_switches(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// What a reactor's sleep must be for it to count as parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sleep {
    /// No timeout: only a new event wakes it.
    Forever,
    /// A timeout of at least this, for a timer the test armed far ahead.
    AtLeast(Duration),
}

impl Sleep {
    fn allows(self, t: EpollTimeout) -> bool {
        match (self, t) {
            (_, EpollTimeout::Never) => true,
            (Sleep::AtLeast(d), EpollTimeout::Ms(ms)) => u128::from(ms) >= d.as_millis(),
            _ => false,
        }
    }
}

/// The reactors of a proxy, seen asleep: see [`wait_reactors_parked`].
#[must_use = "check that they are still asleep"]
#[derive(Debug)]
pub struct Parked {
    proc: String,
    sleepers: Vec<Sleeper>,
}

impl Parked {
    /// Asserts that every reactor is still in the sleep it was seen in: the
    /// same call and timeout, and not one more sleep since (a wakeup in
    /// between would have been followed by one).
    #[track_caller]
    pub fn assert_still_asleep(&self) {
        let now = sleepers(&self.proc);
        for s in &self.sleepers {
            assert!(
                now.contains(s),
                "a reactor of {} woke up: it was {s:?}, now {:?}",
                self.proc,
                now.iter().find(|n| n.tid == s.tid)
            );
        }
    }
}

/// Waits until each of the `workers` reactors of process `pid` (a number,
/// or `self`) that serve the TCP listener `listener` is asleep in
/// `epoll_wait` as `sleep` says; panics after [`PROMPTLY`]. Each reactor
/// is one thread on its own epoll instance, which watches the listener's
/// socket (shared by the workers, or one per worker with `SO_REUSEPORT`).
#[track_caller]
pub fn wait_reactors_parked(
    pid: &str,
    listener: SocketAddr,
    workers: usize,
    sleep: Sleep,
) -> Parked {
    let proc = format!("/proc/{pid}");
    let unconnected: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let mut seen = String::new();
    let mut parked = Vec::new();
    let ok = wait_until(PROMPTLY, || {
        let epolls: Vec<u64> = tcp_rows(listener, unconnected)
            .into_iter()
            .filter(|r| r.state == TCP_LISTEN)
            .flat_map(|r| fds_on(&proc, &format!("socket:[{}]", r.inode)))
            .flat_map(|fd| epolls_watching(&proc, fd))
            .collect();
        let on_them: Vec<Sleeper> = sleepers(&proc)
            .into_iter()
            .filter(|s| epolls.contains(&s.epfd))
            .collect();
        assert!(
            on_them.len() <= workers,
            "{} threads asleep on the epolls of {workers} reactors: {on_them:?}",
            on_them.len()
        );
        seen = format!("epolls {epolls:?}, asleep on them: {on_them:?}");
        parked = on_them;
        parked.len() == workers && parked.iter().all(|s| sleep.allows(s.timeout))
    });
    assert!(
        ok,
        "the {workers} reactor(s) of {proc} serving {listener} not all asleep in epoll_wait \
         with a timeout of {sleep:?} within {PROMPTLY:?}; last seen: {seen}"
    );
    Parked {
        proc,
        sleepers: parked,
    }
}

/// Waits until the reactor of this process's one-worker proxy listening
/// on `listener` is asleep for good: in `epoll_wait` with no timeout.
#[track_caller]
pub fn wait_reactor_parked_for_good(listener: SocketAddr) -> Parked {
    wait_reactors_parked("self", listener, 1, Sleep::Forever)
}

/// The same for the binary, a child process of pid `pid` listening on
/// `listener` (one worker).
#[track_caller]
pub fn wait_child_parked_for_good(pid: u32, listener: SocketAddr) -> Parked {
    wait_reactors_parked(&pid.to_string(), listener, 1, Sleep::Forever)
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

    const ASLEEP: &str = "4900 (portcullis-rea) S 1 2 3";

    /// A `syscall` line of call `nr` on epoll fd 5 with 4th argument `arg4`.
    fn line(nr: u64, arg4: &str) -> String {
        format!("{nr} 0x5 0x7f44e4000ba0 0x400 {arg4} 0x0 0x0 0x7ffda2e29f30 0x7f0f847a9f36")
    }

    #[test]
    fn only_a_sleeping_epoll_wait_counts() {
        let waiting = line(EPOLL_WAIT_MS[0], "0xffffffff");
        assert_eq!(
            epoll_wait_args(ASLEEP, &waiting),
            Some((5, EpollTimeout::Never))
        );
        let running = "4900 (portcullis-rea) R 1 2 3";
        assert_eq!(epoll_wait_args(running, &waiting), None);
        assert_eq!(epoll_wait_args(ASLEEP, "running"), None);
        assert_eq!(
            epoll_wait_args(ASLEEP, "0 0x4 0x55b5 0x2000 0x0 0x0 0x0 0x7f 0x7f"),
            None
        );
        // A name with a space and a parenthesis: the state follows the last `)`.
        let odd = "4900 (a) b (c) S 1 2 3";
        assert_eq!(
            epoll_wait_args(odd, &waiting),
            Some((5, EpollTimeout::Never))
        );
    }

    #[test]
    fn an_int_timeout_of_minus_one_is_none_however_it_is_written() {
        for nr in EPOLL_WAIT_MS {
            for minus_one in ["0xffffffff", "0xffffffffffffffff"] {
                assert_eq!(
                    epoll_wait_args(ASLEEP, &line(*nr, minus_one)),
                    Some((5, EpollTimeout::Never)),
                    "{nr} {minus_one}"
                );
            }
            // Any negative int is no timeout, to the kernel too.
            assert_eq!(
                epoll_wait_args(ASLEEP, &line(*nr, "0xfffffffe")),
                Some((5, EpollTimeout::Never))
            );
            assert_eq!(
                epoll_wait_args(ASLEEP, &line(*nr, "0x1f4")),
                Some((5, EpollTimeout::Ms(500)))
            );
            assert_eq!(
                epoll_wait_args(ASLEEP, &line(*nr, "0x0")),
                Some((5, EpollTimeout::Ms(0)))
            );
            // The upper half of a register holding an int is not its value.
            assert_eq!(
                epoll_wait_args(ASLEEP, &line(*nr, "0x7f00000000000064")),
                Some((5, EpollTimeout::Ms(100)))
            );
        }
    }

    #[test]
    fn pwait2_has_no_timeout_when_its_pointer_is_null() {
        assert_eq!(
            epoll_wait_args(ASLEEP, &line(EPOLL_PWAIT2, "0x0")),
            Some((5, EpollTimeout::Never))
        );
        assert_eq!(
            epoll_wait_args(ASLEEP, &line(EPOLL_PWAIT2, "0x7ffda2e29e80")),
            Some((5, EpollTimeout::Timespec))
        );
    }

    #[test]
    fn a_line_cut_short_is_not_a_sleep() {
        assert_eq!(
            epoll_wait_args(ASLEEP, &format!("{} 0x5 0x7f44 0x400", EPOLL_WAIT_MS[0])),
            None
        );
    }

    #[test]
    fn the_sleep_needed_bounds_the_timeout() {
        let minute = Sleep::AtLeast(Duration::from_secs(60));
        assert!(Sleep::Forever.allows(EpollTimeout::Never));
        assert!(!Sleep::Forever.allows(EpollTimeout::Ms(u32::MAX >> 1)));
        assert!(!Sleep::Forever.allows(EpollTimeout::Timespec));
        assert!(minute.allows(EpollTimeout::Never));
        assert!(minute.allows(EpollTimeout::Ms(60_000)));
        assert!(!minute.allows(EpollTimeout::Ms(59_999)));
        assert!(!minute.allows(EpollTimeout::Timespec));
    }

    #[test]
    fn status_gives_the_voluntary_switches() {
        let status = "Name:\tportcullis\nState:\tS (sleeping)\n\
                      voluntary_ctxt_switches:\t1207\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(voluntary_switches(status), Some(1207));
        assert_eq!(voluntary_switches("Name:\tx\n"), None);
    }

    #[test]
    fn a_mio_poll_without_timeout_is_seen_asleep_until_woken() {
        // What the reactor does: mio's poll, no timeout, woken by an event.
        let mut poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u64).unwrap();
            let mut events = mio::Events::with_capacity(4);
            poll.poll(&mut events, None).unwrap();
        });
        let tid = rx.recv().unwrap();
        let asleep = |tid: u64| sleepers("/proc/self").into_iter().find(|s| s.tid == tid);
        let mut seen = None;
        assert!(wait_until(PROMPTLY, || {
            seen = asleep(tid);
            seen.is_some()
        }));
        let seen = seen.unwrap();
        assert_eq!(seen.timeout, EpollTimeout::Never, "{seen:?}");
        // Still the same sleep when looked at again.
        assert_eq!(asleep(tid), Some(seen));
        waker.wake().unwrap();
        sleeper.join().unwrap();
        assert_eq!(asleep(tid), None, "it has woken and exited");
        let me = nix::unistd::gettid().as_raw() as u64;
        assert_eq!(asleep(me), None, "this thread is running");
    }

    #[test]
    fn a_sleep_after_a_wakeup_is_another_sleep() {
        let mut poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u64).unwrap();
            let mut events = mio::Events::with_capacity(4);
            poll.poll(&mut events, None).unwrap();
            poll.poll(&mut events, None).unwrap();
        });
        let tid = rx.recv().unwrap();
        let sleep = || {
            let mut seen = None;
            assert!(wait_until(PROMPTLY, || {
                seen = sleepers("/proc/self").into_iter().find(|s| s.tid == tid);
                seen.is_some()
            }));
            seen.unwrap()
        };
        let first = Parked {
            proc: "/proc/self".into(),
            sleepers: vec![sleep()],
        };
        first.assert_still_asleep();
        waker.wake().unwrap();
        // Asleep again, the same call on the same epoll: a later sleep.
        assert!(wait_until(PROMPTLY, || sleep().switches > first.sleepers[0].switches));
        let woke = std::panic::catch_unwind(|| first.assert_still_asleep());
        assert!(woke.is_err(), "a wakeup in between goes unseen");
        waker.wake().unwrap();
        sleeper.join().unwrap();
    }
}
