//! The admin endpoint's sockets: its listener and its connections, the
//! control fd among them. Each connection is a tiny session of its own:
//! registered once (edge-triggered, its readiness in the same
//! [`Readiness`] a session's sockets keep), driven by the
//! reactor on its events, bounded by a deadline in the reactor's timer
//! wheel (none for the control fd, the embedding host's lifeline). What the
//! bytes mean is `crate::admin` (sans IO); control lines are executed by the
//! reactor, through the `exec` callback given to [`Admin::drive`].
//!
//! Bounded: at most [`MAX_CONNS`] admin connections (more are answered 503
//! and closed at once), an HTTP head of at most 8 KiB, one request per
//! connection, and output is produced only while less than [`OUT_HIGH`]
//! bytes wait for a slow reader. With no admin connection open, the admin
//! endpoint holds no timer: an idle proxy still sleeps.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Event;
use mio::{Interest, Registry};
use slab::Slab;

use super::listener::Listener;
use super::timer::TimerId;
use super::{token, Remote};
use crate::admin::http::{self, Route};
use crate::admin::proto::{Input, Proto};
use crate::admin::{metrics, report};
use crate::io::readiness::{Readiness, Ready};
use crate::io::{classify_accept, AcceptError, Io, Stream};

/// Admin connections open at once, at most (the control fd aside).
pub(crate) const MAX_CONNS: usize = 8;
/// Time an admin connection has to send its request (or its first control
/// line) before it is closed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A control connection on the admin socket is closed after this long
/// without a command.
const CONTROL_IDLE: Duration = Duration::from_secs(300);
/// Time to let the client read an answer and hang up before closing.
const LINGER: Duration = Duration::from_secs(2);
/// No more input is taken while this much output is unsent.
pub(crate) const OUT_HIGH: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Accepted on the admin listener.
    Admin,
    /// The inherited control fd (no deadline; its end closes nothing else).
    ControlFd,
    /// Accepted on the admin listener from inside `run`'s sandbox: every
    /// request is answered 403, no control line is taken.
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Reading input and answering it.
    Open,
    /// Everything answered and flushed, FIN sent: reading to EOF, so the
    /// close does not reset the answer away.
    Linger,
}

/// One admin connection.
pub(crate) struct AdminConn {
    stream: Stream,
    /// Tells a slot's tenants apart (for stale timers).
    pub(crate) gen: u64,
    kind: Kind,
    proto: Proto,
    out: Vec<u8>,
    /// What the kernel reported and what the connection wants now.
    ready: Readiness,
    peer_eof: bool,
    stage: Stage,
    /// When it is closed unless it moves on.
    pub(crate) deadline: Option<Instant>,
    /// The timer armed for `deadline`, as the reactor last set it.
    pub(crate) timer: Option<(TimerId, Instant)>,
}

/// The admin listener (if configured) and every admin connection.
pub(crate) struct Admin {
    listener: Option<Listener>,
    /// `[admin] control = true`: control lines on the admin socket.
    control: bool,
    /// Connections from inside this sandbox are refused (`run`: CMD's;
    /// see [`from_sandbox`]).
    refuse_netns: Option<Sandbox>,
    conns: Slab<AdminConn>,
    next_gen: u64,
    remote: Arc<Remote>,
}

impl Admin {
    /// The admin endpoint on `listener` (bound and registered by the
    /// reactor), if any; `control`: control lines accepted on it.
    pub(crate) fn new(
        listener: Option<Listener>,
        control: bool,
        refuse_netns: Option<Sandbox>,
        remote: Arc<Remote>,
    ) -> Admin {
        Admin {
            listener,
            control,
            refuse_netns,
            conns: Slab::new(),
            next_gen: 1,
            remote,
        }
    }

    /// Whether any connection is open (each may hold a timer).
    pub(crate) fn has_conns(&self) -> bool {
        !self.conns.is_empty()
    }

    /// Takes on the control fd: control lines only, no deadline.
    pub(crate) fn adopt_control(
        &mut self,
        stream: Stream,
        registry: &Registry,
    ) -> io::Result<usize> {
        self.insert(stream, Kind::ControlFd, registry, None)
    }

    /// Accepts until WouldBlock; returns the new connections' slots.
    pub(crate) fn accept(&mut self, registry: &Registry, now: Instant) -> Vec<usize> {
        let mut new = Vec::new();
        loop {
            let Some(listener) = &self.listener else {
                return new;
            };
            // Admin clients are not counted per client: no identity lookups.
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    let refused = self.refuse_netns.and_then(|ns| from_sandbox(&stream, ns));
                    if let Some(pid) = refused {
                        log::warn!(
                            "admin: refused a connection from pid {pid}, inside run's sandbox: \
                             CMD may not use the admin endpoint"
                        );
                    }
                    let busy = self
                        .conns
                        .iter()
                        .filter(|(_, c)| c.kind != Kind::ControlFd)
                        .count();
                    if busy >= MAX_CONNS {
                        // One try at a short answer; the socket closes either way.
                        log::debug!("admin: {peer} refused, {busy} admin connections open");
                        let _ = stream.write_from(&http::error(503, "too many admin connections"));
                        continue;
                    }
                    let deadline = Some(now + REQUEST_TIMEOUT);
                    let kind = if refused.is_some() {
                        Kind::Refused
                    } else {
                        Kind::Admin
                    };
                    match self.insert(stream, kind, registry, deadline) {
                        Ok(slot) => new.push(slot),
                        Err(e) => log::warn!("admin: cannot register a connection: {e}"),
                    }
                }
                Err(e) => match classify_accept(&e) {
                    AcceptError::Drained => return new,
                    // EINTR, or one connection gone from the backlog: the
                    // ones queued behind it are still owed an accept (the
                    // listener is edge-triggered: no new edge would come).
                    AcceptError::Retry | AcceptError::Skip => {}
                    // Out of fds or the like: the next connection raises a
                    // new edge and retries; nothing to spin on meanwhile.
                    AcceptError::OutOfFds | AcceptError::Fatal => {
                        log::debug!("admin: accept failed: {e}");
                        return new;
                    }
                },
            }
        }
    }

    fn insert(
        &mut self,
        mut stream: Stream,
        kind: Kind,
        registry: &Registry,
        deadline: Option<Instant>,
    ) -> io::Result<usize> {
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        if slot >= token::ADMIN_SLOTS {
            return Err(io::Error::other("no admin token left"));
        }
        registry.register(
            &mut stream,
            token::admin(slot),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let gen = self.next_gen;
        self.next_gen += 1;
        entry.insert(AdminConn {
            stream,
            gen,
            kind,
            proto: match kind {
                Kind::Admin => Proto::admin(self.control),
                Kind::Refused => Proto::admin(false),
                Kind::ControlFd => Proto::control_only(),
            },
            out: Vec::new(),
            // A fresh socket: try it at once (its request is usually queued).
            ready: Readiness {
                event: Ready::READABLE | Ready::WRITABLE,
                interest: Ready::EMPTY,
            },
            peer_eof: false,
            stage: Stage::Open,
            deadline,
            timer: None,
        });
        Ok(slot)
    }

    pub(crate) fn conn_mut(&mut self, slot: usize) -> Option<&mut AdminConn> {
        self.conns.get_mut(slot)
    }

    /// Folds a readiness event into the connection's readiness.
    pub(crate) fn absorb(&mut self, slot: usize, ev: &Event) {
        if let Some(c) = self.conns.get_mut(slot) {
            c.ready.absorb(ev);
            // No separate error path here: an error makes both a read and
            // a write worth trying, and the syscall reports it.
            if ev.is_error() {
                c.ready.event.insert(Ready::READABLE | Ready::WRITABLE);
            }
        }
    }

    /// Moves the connection on as far as it goes: reads, answers (control
    /// lines through `exec`, which returns one answer line), writes.
    /// Returns true when it is finished (then call [`Admin::close`]).
    pub(crate) fn drive(
        &mut self,
        slot: usize,
        now: Instant,
        exec: &mut dyn FnMut(&str) -> String,
    ) -> bool {
        let remote = Arc::clone(&self.remote);
        let Some(c) = self.conns.get_mut(slot) else {
            return false;
        };
        c.drive(now, &remote, exec)
    }

    /// Deregisters and closes the connection in `slot`.
    pub(crate) fn close(&mut self, slot: usize, registry: &Registry) -> Option<AdminConn> {
        let mut c = self.conns.try_remove(slot)?;
        let _ = registry.deregister(&mut c.stream);
        if c.kind == Kind::ControlFd {
            log::info!("control fd closed");
        }
        Some(c)
    }
}

impl AdminConn {
    fn drive(
        &mut self,
        now: Instant,
        remote: &Remote,
        exec: &mut dyn FnMut(&str) -> String,
    ) -> bool {
        loop {
            let mut moved = false;
            // Answer what has arrived, while the output has room.
            while self.out.len() < OUT_HIGH {
                let Some(input) = self.proto.next() else {
                    break;
                };
                moved = true;
                match input {
                    Input::Http(_) if self.kind == Kind::Refused => self.out.extend(http::error(
                        403,
                        "the admin endpoint is not for processes inside run's sandbox",
                    )),
                    Input::Http(route) => self.out.extend(answer(route, remote)),
                    Input::Line(line) => {
                        self.out.extend(exec(&line).into_bytes());
                        self.out.push(b'\n');
                        if self.kind != Kind::ControlFd {
                            self.deadline = Some(now + CONTROL_IDLE);
                        }
                    }
                    Input::Fail(bytes) => self.out.extend(bytes),
                }
            }
            // Flush.
            loop {
                self.ready
                    .interest
                    .set(Ready::WRITABLE, !self.out.is_empty());
                if !self.ready.ready().contains(Ready::WRITABLE) {
                    break;
                }
                match self.stream.write_from(&self.out) {
                    Io::Progress(n) => {
                        self.out.drain(..n);
                        moved = true;
                    }
                    Io::WouldBlock => self.ready.event.remove(Ready::WRITABLE),
                    Io::Eof | Io::PeerGone(_) => return true,
                }
            }
            if self.out.is_empty() && self.proto.is_done() && self.stage == Stage::Open {
                if self.peer_eof {
                    return true;
                }
                self.stream.shutdown_write();
                self.stage = Stage::Linger;
                let linger = now + LINGER;
                self.deadline = Some(self.deadline.map_or(linger, |d| d.min(linger)));
            }
            // Read, while there is use for it.
            let room = match self.stage {
                Stage::Linger => READ_CHUNK,
                Stage::Open if self.out.len() < OUT_HIGH => self.proto.room().min(READ_CHUNK),
                Stage::Open => 0,
            };
            self.ready
                .interest
                .set(Ready::READABLE, room > 0 && !self.peer_eof);
            if self.ready.ready().contains(Ready::READABLE) {
                let mut buf = vec![0u8; room];
                match self.stream.read_into(&mut buf) {
                    Io::Progress(n) => {
                        if self.stage == Stage::Open {
                            self.proto.feed(&buf[..n]);
                        }
                        moved = true;
                    }
                    Io::WouldBlock => self.ready.event.remove(Ready::READABLE),
                    Io::Eof => {
                        self.peer_eof = true;
                        if self.stage == Stage::Linger {
                            return true;
                        }
                        if let Some(answer) = self.proto.eof() {
                            self.out.extend(answer);
                        }
                        moved = true;
                    }
                    Io::PeerGone(_) => return true,
                }
            }
            if !moved {
                return false;
            }
        }
    }
}

/// `run`'s sandbox, as the admin endpoint recognises its processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sandbox {
    /// CMD's network namespace (device, inode of `/proc/PID/ns/net`).
    pub(crate) netns: (u64, u64),
    /// CMD's namespace child: it and its descendants are inside, whatever
    /// network namespace they moved to.
    pub(crate) root: Option<i32>,
}

/// Whether `pid` is `root` or descends from it, by the parent links in
/// `/proc/PID/stat`; `None` when a link cannot be read (the process or
/// an ancestor exited meanwhile).
#[cfg(target_os = "linux")]
fn descends_from(pid: i32, root: i32) -> Option<bool> {
    let mut at = pid;
    // Bounded: a pid chain is never this deep, and a loop must not spin.
    for _ in 0..4096 {
        if at == root {
            return Some(true);
        }
        if at <= 1 {
            return Some(false);
        }
        let stat = std::fs::read_to_string(format!("/proc/{at}/stat")).ok()?;
        // `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        at = after.split_whitespace().nth(1)?.parse().ok()?;
    }
    None
}

/// The peer's pid when `stream` comes from a process that may be inside
/// `sandbox`: a Unix-socket peer (by `SO_PEERCRED`) with this process's
/// uid whose `/proc/PID/ns/net` is CMD's, or that descends from CMD's
/// namespace child (CMD may move to a network namespace of its own), or
/// that cannot be read (fail closed: CMD keeps the uid, so a peer of
/// another uid is not CMD). A TCP peer is never inside: the sandbox's network has
/// no route to any of this process's TCP sockets.
#[cfg(target_os = "linux")]
fn from_sandbox(stream: &Stream, sandbox: Sandbox) -> Option<i32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let ns = sandbox.netns;
    use std::os::unix::fs::MetadataExt;
    let Stream::Unix(s) = stream else {
        return None;
    };
    let Ok(cred) = getsockopt(s, PeerCredentials) else {
        return Some(0);
    };
    if cred.uid() != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let pid = cred.pid();
    match std::fs::metadata(format!("/proc/{pid}/ns/net")) {
        Ok(m) if (m.dev(), m.ino()) != ns => match sandbox.root.map(|r| descends_from(pid, r)) {
            None | Some(Some(false)) => None,
            // CMD's, from a namespace of its own; or unknown: closed.
            Some(Some(true)) | Some(None) => Some(pid),
        },
        _ => Some(pid),
    }
}

#[cfg(not(target_os = "linux"))]
fn from_sandbox(_: &Stream, _: Sandbox) -> Option<i32> {
    None
}

/// The bytes answering an HTTP route.
fn answer(route: Route, remote: &Remote) -> Vec<u8> {
    match route {
        Route::Metrics => {
            let text = metrics::render(
                &remote.stats.snapshot(),
                &remote.stats.rules(),
                &remote.stats.workers(),
                report::open_fds(),
            );
            http::response(200, metrics::CONTENT_TYPE, text.as_bytes())
        }
        Route::Stats => {
            let mut body = crate::stats::json::stats_value(
                &remote.stats.snapshot(),
                &remote.stats.rules(),
                &remote.stats.workers(),
                report::open_fds(),
            )
            .to_string();
            body.push('\n');
            http::response(200, "application/json", body.as_bytes())
        }
        Route::NotFound => http::error(404, "not found: try GET /metrics or GET /stats"),
        Route::MethodNotAllowed => http::error(405, "method not allowed: use GET"),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::descends_from;

    #[test]
    fn descent_follows_parent_links_both_ways() {
        let me = std::process::id() as i32;
        let parent = nix::unistd::getppid().as_raw();
        assert_eq!(descends_from(me, me), Some(true));
        assert_eq!(descends_from(me, parent), Some(true));
        assert_eq!(descends_from(parent, me), Some(false));
        assert_eq!(descends_from(1, me), Some(false));
    }
}
