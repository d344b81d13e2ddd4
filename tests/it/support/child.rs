//! Child processes: the portcullis binary ([`ChildProxy`], its log and its
//! SIGUSR1 stats line), python3 helpers, the proxy environment variables,
//! and /proc metrics of a process.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use super::wait::{wait_for, wait_until, PROMPTLY};

/// Whether a missing client fails its test instead of skipping it: under
/// scripts/test.sh (which installs every client, PORTCULLIS_TEST_STRICT=1)
/// and in CI.
pub fn strict() -> bool {
    std::env::var_os("PORTCULLIS_TEST_STRICT").is_some() || std::env::var_os("CI").is_some()
}

/// Open file descriptors of a process, from /proc/PID/fd.
pub fn count_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/PID/fd")
        .count()
}

/// The lowest fd number a process does not have open, from /proc/PID/fd:
/// with its soft limit set to it, its next open fails with EMFILE.
pub fn first_free_fd(pid: u32) -> u64 {
    let open: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !open.contains(n)).unwrap()
}

/// utime + stime of a process in clock ticks, from /proc/PID/stat.
pub fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    parse_cpu_ticks(&stat)
}

/// utime + stime from the text of /proc/PID/stat.
pub fn parse_cpu_ticks(stat: &str) -> u64 {
    // Fields after the parenthesised command name (which may itself hold
    // spaces and parentheses, hence the last `)`); utime and stime are
    // fields 14 and 15.
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A child process that is SIGKILLed and reaped when dropped, so a failing
/// test never leaves it running (holding our stderr open, streaming forever).
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every python helper exits by itself after this long, whatever happens to us.
const PY_PROLOGUE: &str = "import threading as _t, os as _os\n_w = _t.Timer(120, lambda: _os._exit(9))\n_w.daemon = True\n_w.start()\n";

/// Spawns `python3 -u -c script args...` with piped stdout. Panics (fails the
/// test, never skips) when python3 is missing: CI installs it.
pub fn spawn_python(script: &str, args: &[String]) -> ChildGuard {
    match Command::new("python3")
        .arg("-u")
        .arg("-c")
        .arg(format!("{PY_PROLOGUE}{script}"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => ChildGuard(c),
        Err(e) => panic!("cannot run python3 ({e}); this test needs it (CI installs it)"),
    }
}

/// Runs `python3 -c script` with `input` on its stdin; what it printed.
/// Panics with `missing` when python3 cannot be started (CI installs it),
/// and with `failed` when the script exits unsuccessfully.
#[track_caller]
pub fn python_filter(script: &str, input: &str, missing: &str, failed: &str) -> String {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect(missing);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{failed}");
    out
}

/// The proxy variables `portcullis env` and `portcullis run` set: a test
/// clears them all from a child's environment before setting its own.
pub const PROXY_VARS: [&str; 11] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "GRPC_PROXY",
    "grpc_proxy",
    "NODE_USE_ENV_PROXY",
];

/// Reads one line from a child's stdout, bounded by [`PROMPTLY`].
pub fn child_line(child: &mut Child, what: &str) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        // Keep draining so the child never blocks on a full pipe.
        let mut sink = String::new();
        while matches!(r.read_line(&mut sink), Ok(n) if n > 0) {
            sink.clear();
        }
    });
    match rx.recv_timeout(PROMPTLY) {
        Ok(l) if !l.is_empty() => l.trim().to_string(),
        Ok(_) => panic!("{what}: child closed stdout without a line"),
        Err(_) => panic!("{what}: no line from the child within {PROMPTLY:?}"),
    }
}

/// The proxy binary running as a child process, its stderr collected.
pub struct ChildProxy {
    pub child: Child,
    pub addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ChildProxy {
    /// Starts the binary with `--listen 127.0.0.1:0` plus `args`, RUST_LOG=info,
    /// and waits for its `listening on ADDR` line.
    pub fn start(args: &[&str]) -> ChildProxy {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
        cmd.arg("--listen").arg("127.0.0.1:0").args(args);
        ChildProxy::start_command(cmd)
    }

    /// Like [`ChildProxy::start`], but runs `cmd` as prepared by the caller
    /// (extra arguments, `pre_exec`, a wrapper, a `RUST_LOG` of its own);
    /// it must log `listening on ADDR`.
    pub fn start_command(mut cmd: Command) -> ChildProxy {
        if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd
            .env("RUST_LOG_STYLE", "never")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn portcullis binary");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let reader = thread::spawn(move || {
            let r = BufReader::new(stderr);
            for line in r.lines() {
                let Ok(line) = line else { break };
                eprintln!("[portcullis] {line}");
                l.lock().unwrap().push(line);
            }
        });
        let mut cp = ChildProxy {
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            lines,
        };
        let mut addr = None;
        let found = wait_until(PROMPTLY, || {
            if let Ok(Some(status)) = cp.child.try_wait() {
                // The stderr reader has the last words once it reads EOF.
                wait_until(PROMPTLY, || reader.is_finished());
                panic!(
                    "the binary exited ({status}) before listening; stderr: {:?}",
                    cp.lines.lock().unwrap()
                );
            }
            addr = cp
                .lines
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| parse_listening_addr(l));
            addr.is_some()
        });
        assert!(
            found,
            "the binary logged no `listening on ADDR` line; stderr: {:?}",
            cp.lines.lock().unwrap()
        );
        cp.addr = addr.unwrap();
        cp
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn fds(&self) -> usize {
        count_fds(self.pid())
    }

    /// Sends SIGUSR1 and parses the next `stats:` line into key=value numbers
    /// (`open`, `wakeups`, `handshake`, ..., and `closed:` reasons like `client-gone`).
    pub fn stats(&self) -> HashMap<String, u64> {
        let is_stats = |l: &String| l.contains("stats: ");
        let before = self
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| is_stats(l))
            .count();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .expect("SIGUSR1");
        let mut line = None;
        wait_for("a `stats:` line after SIGUSR1", PROMPTLY, || {
            let lines = self.lines.lock().unwrap();
            line = lines.iter().filter(|l| is_stats(l)).nth(before).cloned();
            line.is_some()
        });
        parse_stats_line(&line.unwrap())
    }

    /// Everything the binary logged so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for a logged line that `is_it` accepts and returns it. A line
    /// the binary wrote reaches [`log`](Self::log) through a reader thread, so
    /// a check made over another channel (the control socket, a client's
    /// socket) must wait for it rather than look once.
    #[track_caller]
    pub fn wait_for_line(&self, what: &str, is_it: impl Fn(&str) -> bool) -> String {
        let mut found = None;
        let ok = wait_until(PROMPTLY, || {
            found = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| is_it(l))
                .cloned();
            found.is_some()
        });
        assert!(
            ok,
            "no log line {what} within {PROMPTLY:?}: {:#?}",
            self.log()
        );
        found.unwrap()
    }
}

impl Drop for ChildProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address in a `... listening on ADDR ...` log line, if it is one.
pub fn parse_listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// Parses `... stats: accepted=1 ... open=0 (handshake=0 ...) ... wakeups=7 ... closed: client-gone=1`.
/// Close reasons after `closed:` are keyed `closed.REASON` (e.g. `closed.client-gone`),
/// so `closed.denied` does not clash with the top-level `denied`.
pub fn parse_stats_line(line: &str) -> HashMap<String, u64> {
    let rest = &line[line.find("stats: ").expect("stats line") + "stats: ".len()..];
    let mut prefix = "";
    let mut m = HashMap::new();
    for tok in rest.split_whitespace() {
        if tok == "closed:" {
            prefix = "closed.";
            continue;
        }
        // A logfmt line quotes the message: the last token ends in `"`.
        let tok = tok.trim_matches(|c| c == '(' || c == ')' || c == ',' || c == '"');
        let Some((k, v)) = tok.split_once('=') else {
            continue;
        };
        if let Ok(v) = v.parse() {
            m.insert(format!("{prefix}{k}"), v);
        }
    }
    m
}

/// Reads a stats key, panicking with the whole map when it is missing.
#[track_caller]
pub fn stat(m: &HashMap<String, u64>, key: &str) -> u64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("stats line has no `{key}=`: {m:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = "[2026-01-01T00:00:00Z INFO  portcullis] stats: accepted=3 allowed=2 denied=1 open=1 (handshake=0 resolving=0 connecting=0 established=1 closing=0) bytes_up=10 bytes_down=20 wakeups=17 events=30 accept_pauses=0 closed: client-gone=1 denied=1";

    #[test]
    fn stats_line_parses() {
        let m = parse_stats_line(STATS);
        assert_eq!(stat(&m, "open"), 1);
        assert_eq!(stat(&m, "handshake"), 0, "inside the parentheses");
        assert_eq!(stat(&m, "closing"), 0, "before the closing parenthesis");
        assert_eq!(stat(&m, "established"), 1);
        assert_eq!(stat(&m, "wakeups"), 17);
        assert_eq!(stat(&m, "accepted"), 3);
        assert_eq!(stat(&m, "denied"), 1);
        assert_eq!(stat(&m, "closed.client-gone"), 1);
        assert_eq!(stat(&m, "closed.denied"), 1);
        assert!(!m.contains_key("client-gone"), "reasons are prefixed");
        assert!(!m.contains_key("INFO"), "the log prefix is skipped");
        assert_eq!(m.len(), 16);
    }

    #[test]
    fn stats_line_skips_what_is_not_a_number() {
        let m = parse_stats_line("stats: a=1 b=x c= d (e=5,)");
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!((stat(&m, "a"), stat(&m, "e")), (1, 5));
    }

    #[test]
    #[should_panic(expected = "stats line")]
    fn a_line_without_stats_is_refused() {
        parse_stats_line("listening on 127.0.0.1:1");
    }

    #[test]
    #[should_panic(expected = "no `missing=`")]
    fn a_missing_stat_panics_with_its_name() {
        stat(&parse_stats_line(STATS), "missing");
    }

    #[test]
    fn listening_line_gives_the_address() {
        let line = "[2026-01-01T00:00:00Z INFO  portcullis] listening on 127.0.0.1:41234 (http+socks5); try: curl -p -x http://127.0.0.1:41234 https://example.com";
        assert_eq!(
            parse_listening_addr(line),
            Some("127.0.0.1:41234".parse().unwrap())
        );
        assert_eq!(
            parse_listening_addr("listening on [::1]:3128 (socks5)"),
            Some("[::1]:3128".parse().unwrap())
        );
        assert_eq!(parse_listening_addr("listening on unix:/tmp/p.sock"), None);
        assert_eq!(parse_listening_addr("stats: open=0"), None);
    }

    #[test]
    fn cpu_ticks_are_utime_plus_stime() {
        // A command name with spaces and parentheses, as /proc shows it.
        let stat =
            "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 111 222 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_cpu_ticks(stat), 333);
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        parse_cpu_ticks(&me);
    }
}
