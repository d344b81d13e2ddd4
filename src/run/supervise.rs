//! The host side of `run` once CMD is started: the proxy runs on this
//! thread, a signal thread forwards signals to CMD (or to the namespace's
//! init, which forwards them on) and, when CMD is gone, records its exit
//! status and stops the proxy.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use log::{debug, error, info, warn};
use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use portcullis::{Proxy, ProxyHandle};

/// Signals forwarded to CMD.
pub const FORWARDED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// Every signal `run` handles: the forwarded ones, SIGCHLD (CMD or the
/// namespace child exited) and SIGUSR1 (log the proxy's counters). They are
/// blocked in every thread and taken with `sigwait`, never by a handler.
pub fn signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set.add(Signal::SIGUSR1);
    set
}

/// Runs `proxy` on this thread until `child` exits; returns the child's exit
/// status as a shell would (`128 + N` after signal N).
pub fn run(proxy: Proxy, child: Pid, signals: SigSet) -> ExitCode {
    let handle = proxy.handle();
    let status = Arc::new(OnceLock::new());
    let recorded = Arc::clone(&status);
    let spawned = std::thread::Builder::new()
        .name("portcullis-signals".into())
        .spawn(move || signal_loop(signals, child, handle, recorded));
    if let Err(e) = spawned {
        fatal!("cannot start the signal thread: {e}");
        let _ = kill(child, Signal::SIGKILL);
        return ExitCode::FAILURE;
    }
    let result = proxy.run();
    if let Some(code) = status.get() {
        debug!("CMD exited with status {code}; proxy stopped");
        return ExitCode::from(*code);
    }
    match result {
        Ok(()) => error!("the proxy stopped before CMD exited; killing CMD"),
        Err(e) => error!("proxy failed: {e}; killing CMD"),
    }
    let _ = kill(child, Signal::SIGKILL);
    ExitCode::FAILURE
}

fn signal_loop(signals: SigSet, child: Pid, handle: ProxyHandle, status: Arc<OnceLock<u8>>) {
    loop {
        let (sig, from_terminal) = match wait_signal(&signals) {
            Ok(s) => s,
            Err(e) => {
                error!("waiting for signals failed, signals are no longer forwarded: {e}");
                return;
            }
        };
        match sig {
            Signal::SIGCHLD => {
                if let Some(code) = reap(child) {
                    let _ = status.set(code);
                    handle.shutdown_now();
                    return;
                }
            }
            Signal::SIGUSR1 => info!("stats: {}", handle.stats()),
            // The terminal signals its whole foreground process group, CMD
            // included: forwarding would deliver it twice.
            _ if from_terminal => debug!("{sig} from the terminal: CMD has it too"),
            _ => {
                debug!("forwarding {sig} to CMD");
                if let Err(e) = kill(child, sig) {
                    warn!("cannot forward {sig}: {e}");
                }
            }
        }
    }
}

/// Reaps `child` if it has exited: its status as an exit code.
fn reap(child: Pid) -> Option<u8> {
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(status) => return exit_code(status),
            Err(Errno::EINTR) => continue,
            Err(e) => {
                error!("waitpid({child}) failed: {e}");
                return Some(1);
            }
        }
    }
}

/// A wait status as a shell's exit code; `None` while the process lives.
pub fn exit_code(status: WaitStatus) -> Option<u8> {
    match status {
        WaitStatus::Exited(_, code) => Some(code as u8),
        WaitStatus::Signaled(_, sig, _) => Some(128u8.saturating_add(sig as i32 as u8)),
        _ => None,
    }
}

/// Waits for one of `set` (blocked in this thread); also tells whether the
/// kernel sent it for a terminal (`SI_KERNEL`: Ctrl-C, hangup), which
/// reaches the whole foreground process group at once.
#[cfg(target_os = "linux")]
pub fn wait_signal(set: &SigSet) -> nix::Result<(Signal, bool)> {
    use nix::libc;
    loop {
        // SAFETY: siginfo_t is plain data, valid zeroed; sigwaitinfo fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call.
        let n = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if n < 0 {
            match Errno::last() {
                Errno::EINTR => continue,
                e => return Err(e),
            }
        }
        return Ok((Signal::try_from(n)?, info.si_code == libc::SI_KERNEL));
    }
}

/// Waits for one of `set` (blocked in this thread). Without `sigwaitinfo`
/// the sender is unknown: everything is forwarded.
#[cfg(not(target_os = "linux"))]
pub fn wait_signal(set: &SigSet) -> nix::Result<(Signal, bool)> {
    set.wait().map(|s| (s, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        let pid = Pid::from_raw(1);
        assert_eq!(exit_code(WaitStatus::Exited(pid, 7)), Some(7));
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
            Some(137)
        );
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGTERM, true)),
            Some(143)
        );
        assert_eq!(exit_code(WaitStatus::StillAlive), None);
    }
}
