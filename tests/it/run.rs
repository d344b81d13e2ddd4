//! `portcullis run`: CMD in a network namespace whose only way out is the
//! proxy. Real processes: the binary, sh, curl, a loopback origin.
//!
//! Namespaces must work on this machine and in CI (unprivileged user
//! namespaces, or root). A platform without them sets
//! `PORTCULLIS_TEST_NO_NAMESPACES=1`; then these tests check instead that
//! `run` refuses with its clear error. Without that variable a missing
//! namespace fails the test.

use crate::support;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use support::*;

const BODY: &str = "hello from the host's loopback\n";
/// Bound for one `run` (each finishes in well under a second).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The binary with a clean proxy environment and info logs.
fn portcullis() -> Command {
    command(env!("CARGO_BIN_EXE_portcullis"))
}

/// `program` with a clean proxy environment, info logs, no stdin and its
/// output piped.
fn command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    for v in PROXY_VARS {
        cmd.env_remove(v);
    }
    cmd.env("RUST_LOG", "info")
        .env("RUST_LOG_STYLE", "never")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A running `portcullis run`, its output collected line by line.
struct Running {
    child: ChildGuard,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let mut child = ChildGuard(cmd.spawn().expect("spawn portcullis"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), stdout.clone(), ""),
            collect(child.stderr.take().unwrap(), stderr.clone(), "[run] "),
        ];
        Running {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn wait_stdout(&self, line: &str) {
        wait_for(&format!("`{line}` on CMD's stdout"), PROMPTLY, || {
            self.stdout.lock().unwrap().iter().any(|l| l == line)
        });
    }

    /// Waits for exit (bounded), then for both streams to close.
    fn finish(mut self) -> Output {
        let mut status = None;
        wait_for("portcullis run to exit", RUN_LIMIT, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        let status = status.unwrap();
        for r in self.readers.drain(..) {
            r.join().unwrap();
        }
        let stdout = self.stdout.lock().unwrap().join("\n");
        let stderr = self.stderr.lock().unwrap().join("\n");
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

fn collect(
    r: impl Read + Send + 'static,
    into: Arc<Mutex<Vec<String>>>,
    echo: &'static str,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            eprintln!("{echo}{line}");
            into.lock().unwrap().push(line);
        }
    })
}

struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Output {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
    fn access_lines(&self, target: &str) -> usize {
        self.stderr
            .lines()
            .filter(|l| l.contains("event=session") && l.contains(&format!("target={target} ")))
            .count()
    }
}

/// `portcullis run ARGS -- sh -c SCRIPT`, to completion.
fn run_sh(args: &[&str], script: &str) -> Output {
    let mut cmd = portcullis();
    cmd.arg("run").args(args).args(["--", "sh", "-c", script]);
    Running::start(cmd).finish()
}

/// False when the platform is declared to lack namespaces.
fn namespaces_expected() -> bool {
    if std::env::var_os("PORTCULLIS_TEST_NO_NAMESPACES").is_some() {
        eprintln!("PORTCULLIS_TEST_NO_NAMESPACES is set: checking that run refuses clearly");
        let out = run_sh(&[], "exit 0");
        assert_eq!(out.code(), Some(1), "{}", out.stderr);
        assert!(out.stderr.contains("cannot isolate CMD"), "{}", out.stderr);
        assert!(out.stderr.contains("--no-isolate"), "{}", out.stderr);
        return false;
    }
    true
}

/// Fails loudly when `run` could not isolate: this machine must support it.
#[track_caller]
fn assert_isolated(out: &Output) {
    assert!(
        !out.stderr.contains("cannot isolate CMD"),
        "namespaces are unavailable here, but this platform must support them (set \
         PORTCULLIS_TEST_NO_NAMESPACES=1 only where it cannot): {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("inside CMD's network namespace"),
        "{}",
        out.stderr
    );
}

/// The host's own non-loopback address (a route lookup; no packet is sent),
/// so a direct connection to a reachable non-loopback address can be tried
/// without leaving the machine.
fn host_address() -> Option<std::net::IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn cmd_reaches_an_allowed_origin_only_through_the_proxy() {
    if !namespaces_expected() {
        return;
    }
    let origin = http_server(BODY);
    // The same origin on the host's own address: reachable from the host,
    // not from inside the namespace (no route).
    let host_ip = host_address().expect("this machine has a non-loopback address");
    let host_origin = http_server_on(SocketAddr::new(host_ip, 0), BODY);
    drop(std::net::TcpStream::connect(host_origin.addr).expect("reachable from the host"));
    wait_for("the host-side probe accepted", PROMPTLY, || {
        host_origin.accepted() == 1
    });

    let port = origin.port();
    let script = format!(
        r#"
        echo "proxy=$HTTP_PROXY https=$https_proxy all=$ALL_PROXY no=$NO_PROXY"
        body=$(curl -sS --max-time 20 --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:{port}/) && echo "proxied=$body"
        curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{port}/ >/dev/null 2>&1; echo "direct-loopback=$?"
        err=$(curl -v --max-time 5 --noproxy '*' http://{host}/ 2>&1 >/dev/null); echo "direct-host=$?"
        echo "$err" | grep -q -i -E 'network is unreachable|no route to host' && echo "no-route=yes"
        exit 7
        "#,
        host = host_origin.addr,
    );
    let out = run_sh(&["--allow", &format!("127.0.0.1:{port}")], &script);
    assert_isolated(&out);
    assert_eq!(out.code(), Some(7), "CMD's exit status: {}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.contains(
            &"proxy=http://127.0.0.1:3128 https=http://127.0.0.1:3128 all=socks5h://127.0.0.1:3128 no=localhost,127.0.0.1,::1"
        ),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!("proxied={}", BODY.trim_end()).as_str()),
        "through the proxy: {lines:?}"
    );
    assert!(
        lines.contains(&"direct-loopback=7"),
        "the host's loopback must not be reachable directly: {lines:?}"
    );
    assert!(
        lines.contains(&"direct-host=7") && lines.contains(&"no-route=yes"),
        "a non-loopback address must have no route: {lines:?}"
    );
    assert_eq!(origin.accepted(), 1, "only the proxied request arrives");
    assert_eq!(
        host_origin.accepted(),
        1,
        "nothing from inside the namespace"
    );
    assert_eq!(
        out.access_lines(&format!("127.0.0.1:{port}")),
        1,
        "one access line for the proxied request: {}",
        out.stderr
    );
}

#[test]
fn the_default_policy_refuses_the_hosts_loopback() {
    if !namespaces_expected() {
        return;
    }
    let origin = must_not_accept();
    let script = format!(
        "curl -sS --max-time 20 -p -x \"$HTTP_PROXY\" --noproxy '' http://127.0.0.1:{}/; echo \"curl=$?\"",
        origin.port()
    );
    let out = run_sh(&[], &script);
    assert_isolated(&out);
    assert_eq!(out.code(), Some(0));
    let curl = out.stdout.lines().find_map(|l| l.strip_prefix("curl="));
    assert!(
        matches!(curl, Some(c) if c != "0"),
        "curl through a refused CONNECT must fail: {}",
        out.stdout
    );
    assert_eq!(origin.accepted(), 0);
    assert!(out.stderr.contains("decision=deny"), "{}", out.stderr);
}

#[test]
fn signals_reach_cmd_and_nothing_is_left_running() {
    if !namespaces_expected() {
        return;
    }
    // A unique argument to find leftovers by (background sleep, the namespace's init).
    let marker = format!("3{}.25", std::process::id());
    let script = format!(
        r#"sleep {marker} &
        trap 'echo got-term; exit 42' TERM
        echo ready
        while :; do sleep 0.05; done"#
    );
    let mut cmd = portcullis();
    cmd.args(["run", "--", "sh", "-c", &script]);
    let running = Running::start(cmd);
    running.wait_stdout("ready");
    assert!(
        !leftovers(&marker).is_empty(),
        "the marker should find CMD's background sleep"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = running.finish();
    assert_isolated(&out);
    assert_eq!(out.code(), Some(42), "the trap's status: {}", out.stderr);
    assert!(out.stdout.contains("got-term"));
    // run has exited, and its namespace with it: the background sleep and
    // the namespace's init are gone.
    let left = leftovers(&marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// Processes whose command line mentions `marker`.
fn leftovers(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[test]
fn exit_statuses_pass_through() {
    if !namespaces_expected() {
        return;
    }
    let out = run_sh(&[], "kill -KILL $$");
    assert_isolated(&out);
    assert_eq!(out.code(), Some(128 + 9), "a signal death is 128+N");
    let out = run_sh(&[], "exit 0");
    assert_eq!(out.code(), Some(0));

    let mut cmd = portcullis();
    cmd.args(["run", "--", "/nonexistent/portcullis-test-command"]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(127), "{}", out.stderr);
    assert!(out.stderr.contains("cannot run"), "{}", out.stderr);
}

#[test]
fn an_unprivileged_user_keeps_their_uid_in_a_user_namespace() {
    if !namespaces_expected() {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        // Every other test here already runs unprivileged.
        return;
    }
    // As root, drop to nobody to take the unprivileged path (setgroups deny,
    // a one-id map written by the parent).
    let origin = http_server(BODY);
    let port = origin.port();
    // A copy nobody can execute, wherever the checkout lives (/root is 0700).
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("run-nobody");
    let exe = dir.path().join("portcullis");
    std::fs::copy(env!("CARGO_BIN_EXE_portcullis"), &exe).unwrap();
    for p in [dir.path(), exe.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = command("setpriv");
    cmd.current_dir("/").args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        exe.to_str().unwrap(),
        "run",
        "--allow",
        &format!("127.0.0.1:{port}"),
        "--",
        "sh",
        "-c",
        &format!(
            "echo uid=$(id -u); curl -sS --max-time 20 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{port}/"
        ),
    ]);
    let out = Running::start(cmd).finish();
    assert_isolated(&out);
    assert!(
        out.stderr.contains("new user, network and PID namespaces"),
        "{}",
        out.stderr
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("uid=65534"), "{}", out.stdout);
    assert!(out.stdout.contains(BODY.trim_end()), "{}", out.stdout);
    assert_eq!(origin.accepted(), 1);
}

#[test]
fn without_namespaces_the_error_is_clear_and_no_isolate_still_runs() {
    // Inside `unshare -U` (a user namespace with no uid map) no nested user
    // namespace can be made: the same failure as where they are disabled.
    let mut cmd = Command::new("unshare");
    for v in PROXY_VARS {
        cmd.env_remove(v);
    }
    cmd.args(["-U", env!("CARGO_BIN_EXE_portcullis"), "run", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = Running::start(cmd).finish();
    if out.stderr.contains("unshare: unshare failed") {
        assert!(
            !namespaces_expected(),
            "unshare -U failed here: {}",
            out.stderr
        );
        return;
    }
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    for needle in [
        "cannot isolate CMD",
        "EPERM",
        "user.max_user_namespaces",
        "kernel.unprivileged_userns_clone",
        "portcullis run --no-isolate",
    ] {
        assert!(
            out.stderr.contains(needle),
            "no {needle:?} in: {}",
            out.stderr
        );
    }

    let mut cmd = Command::new("unshare");
    for v in PROXY_VARS {
        cmd.env_remove(v);
    }
    cmd.args([
        "-U",
        env!("CARGO_BIN_EXE_portcullis"),
        "run",
        "--no-isolate",
        "--",
        "sh",
        "-c",
        "echo \"proxy=$HTTP_PROXY\"; exit 3",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(3), "{}", out.stderr);
    assert!(
        out.stdout.contains("proxy=http://127.0.0.1:"),
        "{}",
        out.stdout
    );
}

#[test]
fn no_isolate_sets_the_environment_only() {
    let origin = http_server(BODY);
    let port = origin.port();
    let script = format!(
        r#"echo "proxy=$HTTP_PROXY"
        echo "node=$NODE_USE_ENV_PROXY grpc=$grpc_proxy"
        body=$(curl -sS --max-time 20 --noproxy '' -x "$http_proxy" http://127.0.0.1:{port}/) && echo "proxied=$body"
        body=$(curl -sS --max-time 20 --noproxy '*' http://127.0.0.1:{port}/) && echo "direct=$body"
        exit 5"#
    );
    let out = run_sh(
        &["--no-isolate", "--allow", &format!("127.0.0.1:{port}")],
        &script,
    );
    assert_eq!(out.code(), Some(5), "{}", out.stderr);
    let proxy_line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("proxy="))
        .expect("proxy line");
    let addr: SocketAddr = proxy_line
        .trim_start_matches("proxy=http://")
        .parse()
        .expect("an address");
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 3128, "an ephemeral port by default");
    assert!(out.stdout.contains("node=1 grpc=http://127.0.0.1:"));
    assert!(out.stdout.contains(&format!("proxied={}", BODY.trim_end())));
    // Not isolated: the direct request works too.
    assert!(out.stdout.contains(&format!("direct={}", BODY.trim_end())));
    assert_eq!(origin.accepted(), 2);
    assert_eq!(out.access_lines(&format!("127.0.0.1:{port}")), 1);
}

#[test]
fn as_root_without_user_namespaces_a_plain_network_namespace_is_used() {
    if !namespaces_expected() {
        return;
    }
    // `unshare -Ur` makes us root of a user namespace where no further user
    // namespace may be created (limit 0): run falls back to plain network and
    // PID namespaces, which root may create.
    let origin = http_server(BODY);
    let port = origin.port();
    let exe = env!("CARGO_BIN_EXE_portcullis");
    let inner = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces || exit 90
        exec '{exe}' run --allow 127.0.0.1:{port} -- sh -c '
            curl -sS --max-time 20 --noproxy \"\" -x \"$HTTP_PROXY\" http://127.0.0.1:{port}/
            curl -sS --max-time 5 --noproxy \"*\" http://127.0.0.1:{port}/ >/dev/null 2>&1; echo direct=$?
            exit 6'"
    );
    let mut cmd = command("unshare");
    cmd.args(["-Ur", "sh", "-c", &inner]);
    let out = Running::start(cmd).finish();
    assert_isolated(&out);
    assert!(
        out.stderr
            .contains("new network and PID namespaces (as root)"),
        "{}",
        out.stderr
    );
    assert_eq!(out.code(), Some(6), "{}", out.stderr);
    assert!(out.stdout.contains(BODY.trim_end()), "{}", out.stdout);
    assert!(out.stdout.contains("direct=7"), "{}", out.stdout);
    assert_eq!(origin.accepted(), 1);
}

/// Pids of the processes running `sleep ARG` (not run itself, whose own
/// command line mentions ARG too).
fn sleeping(arg: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if argv.len() >= 2 && argv[0].ends_with(b"sleep") && argv[1] == arg.as_bytes() {
            found.push(pid);
        }
    }
    found
}

/// Waits for `child` to exit, at most [`PROMPTLY`] (a signal that does not
/// reach CMD would leave it waiting forever).
fn exit_promptly(mut running: Running, what: &str) -> Output {
    let exited = wait_until(PROMPTLY, || running.child.try_wait().unwrap().is_some());
    assert!(exited, "{what}: run has not exited");
    running.finish()
}

/// A unique `sleep` argument (bounded: leftovers of a failing run end by themselves).
fn sleep_arg(tag: u32) -> String {
    format!("60.{}{tag}", std::process::id())
}

#[test]
fn sigterm_to_run_ends_a_cmd_that_installs_no_handler() {
    let isolate = namespaces_expected();
    for (i, flags) in [&[][..], &["--no-isolate"][..]].into_iter().enumerate() {
        if flags.is_empty() && !isolate {
            continue;
        }
        let arg = sleep_arg(i as u32);
        let mut cmd = portcullis();
        cmd.arg("run").args(flags).args(["--", "sleep", &arg]);
        let running = Running::start(cmd);
        wait_for("CMD's sleep", PROMPTLY, || !sleeping(&arg).is_empty());
        let status = std::fs::read_to_string(format!("/proc/{}/status", sleeping(&arg)[0]))
            .unwrap_or_default();
        let mask = status.lines().find(|l| l.starts_with("SigBlk:"));
        assert_eq!(
            mask.map(|l| l.split_whitespace().nth(1)),
            Some(Some("0000000000000000")),
            "{flags:?}: CMD must start with no signal blocked: {status}"
        );
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(running.pid()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let out = exit_promptly(running, &format!("{flags:?} after SIGTERM"));
        assert_eq!(out.code(), Some(128 + 15), "{flags:?}: {}", out.stderr);
        wait_for("no sleep left", PROMPTLY, || sleeping(&arg).is_empty());
    }
}

#[test]
fn a_cmd_that_signals_itself_dies_by_the_signal() {
    let isolate = namespaces_expected();
    let script = "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('survived')";
    for flags in [&[][..], &["--no-isolate"][..]] {
        if flags.is_empty() && !isolate {
            continue;
        }
        let mut cmd = portcullis();
        cmd.arg("run")
            .args(flags)
            .args(["--", "python3", "-c", script]);
        let out = exit_promptly(Running::start(cmd), &format!("{flags:?}"));
        assert_eq!(out.code(), Some(128 + 15), "{flags:?}: {}", out.stderr);
        assert!(
            !out.stdout.contains("survived"),
            "{flags:?}: {}",
            out.stdout
        );
    }
}

#[test]
fn sigkill_of_run_no_isolate_leaves_no_cmd() {
    let arg = sleep_arg(7);
    let mut cmd = portcullis();
    cmd.args(["run", "--no-isolate", "--", "sleep", &arg]);
    let mut running = Running::start(cmd);
    wait_for("CMD's sleep", PROMPTLY, || !sleeping(&arg).is_empty());
    running.child.kill().unwrap();
    let _ = running.child.wait();
    let gone = wait_until(PROMPTLY, || sleeping(&arg).is_empty());
    let left = sleeping(&arg);
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(gone, "CMD outlived a SIGKILLed run: {left:?}");
}

#[test]
fn terminated_tls_is_trusted_whatever_ca_variables_cmd_inherits() {
    use support::tls::{https_origin, terminate_rule, Cas};
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let port = origin.port();
    let dir = TempDir::new("run-terminate");
    let cfg = dir.path().join("portcullis.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}state_dir = \"{}\"\n\n{}",
            cas.tls_table(),
            dir.path().join("state").display(),
            terminate_rule(port, ""),
        ),
    )
    .unwrap();
    // CMD inherits CA variables pointing elsewhere (a bundle without the
    // proxy's CA); curl prefers CURL_CA_BUNDLE to SSL_CERT_FILE.
    let elsewhere = cas.upstream.cert_path.display().to_string();
    let script = format!(
        r#"echo "vars $SSL_CERT_FILE $CURL_CA_BUNDLE $PIP_CERT $AWS_CA_BUNDLE"
        echo "java $JAVA_TOOL_OPTIONS"
        curl -sS --max-time 20 --noproxy '' -i https://localhost:{port}/through"#
    );
    let isolate = namespaces_expected();
    for flags in [&[][..], &["--no-isolate"][..]] {
        if flags.is_empty() && !isolate {
            continue;
        }
        let mut cmd = portcullis();
        for var in [
            "CURL_CA_BUNDLE",
            "PIP_CERT",
            "AWS_CA_BUNDLE",
            "SSL_CERT_FILE",
        ] {
            cmd.env(var, &elsewhere);
        }
        cmd.arg("run")
            .args(flags)
            .args(["--config", cfg.to_str().unwrap()])
            .args(["--", "sh", "-c", &script]);
        let out = Running::start(cmd).finish();
        assert_eq!(out.code(), Some(0), "{flags:?}: {}", out.stderr);
        let vars: Vec<&str> = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("vars "))
            .expect("the vars line")
            .split(' ')
            .collect();
        assert_eq!(vars.len(), 4, "{flags:?}: {vars:?}");
        assert!(
            vars.iter().all(|v| *v == vars[0] && *v != elsewhere),
            "{flags:?}: every CA variable points at the proxy's bundle: {vars:?}"
        );
        // That bundle keeps the root the variables named before, then the CA.
        let bundle = std::fs::read_to_string(vars[0]).unwrap();
        let pem = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
        assert!(
            bundle.starts_with(&pem(&cas.upstream.cert_path)),
            "{bundle}"
        );
        assert!(bundle.ends_with(&pem(&cas.proxy.cert_path)), "{bundle}");
        // JVMs: the proxy's properties and a trust store.
        let java = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("java "))
            .expect("the java line");
        assert!(
            java.contains("-Dhttps.proxyHost=") && java.contains("-Djavax.net.ssl.trustStore="),
            "{flags:?}: {java}"
        );
        assert!(
            out.stdout.contains("GET /through"),
            "{flags:?}: curl trusted the terminated TLS: {}",
            out.stdout
        );
    }
}

/// CMD for the DNS tests: a raw query (id 0x5a17, `portcullis-probe.test`
/// A) to the first resolver of /etc/resolv.conf over UDP, then over TCP,
/// printing each answer's id and RCODE; then `getaddrinfo`, printing its
/// error.
const DNS_PROBE: &str = r#"
import socket, struct, sys
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.split()[:1] == ["nameserver"]][0]
q = struct.pack(">HHHHHH", 0x5a17, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p for p in [b"portcullis-probe", b"test"]) + b"\0" + struct.pack(">HH", 1, 1)
fam = socket.AF_INET6 if ":" in ns else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.settimeout(20)
s.sendto(q, (ns, 53))
r = s.recv(512)
print("raw id=%04x rcode=%d question=%s" % (struct.unpack(">H", r[:2])[0], r[3] & 15, r[12:] == q[12:]))
t = socket.create_connection((ns, 53), timeout=20)
t.sendall(struct.pack(">H", len(q)) + q)
def read(n):
    b = b""
    while len(b) < n:
        c = t.recv(n - len(b))
        if not c:
            break
        b += c
    return b
r = read(struct.unpack(">H", read(2))[0])
print("tcp id=%04x rcode=%d question=%s" % (struct.unpack(">H", r[:2])[0], r[3] & 15, r[12:] == q[12:]))
try:
    socket.getaddrinfo("ignores-the-proxy.example", 443)
    print("gai=resolved")
except socket.gaierror as e:
    print("gai=%d" % e.errno)
print("to stderr from CMD", file=sys.stderr)
"#;

/// Whether /etc/resolv.conf names a resolver (the DNS trap's precondition).
fn has_resolver() -> bool {
    std::fs::read_to_string("/etc/resolv.conf").is_ok_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().next() == Some("nameserver"))
    })
}

#[test]
fn direct_dns_is_refused_at_once_and_the_log_file_keeps_cmds_stderr_clean() {
    if !namespaces_expected() {
        return;
    }
    assert!(
        has_resolver(),
        "this test needs a nameserver line in /etc/resolv.conf"
    );
    let origin = must_not_accept();
    let dir = TempDir::new("run-log-file");
    let log = dir.path().join("proxy.log");
    let script = format!(
        "python3 -c '{}'; curl -sS --max-time 20 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{}/ >/dev/null 2>&1; \
         curl -sS --max-time 20 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{}/ >/dev/null 2>&1; exit 3",
        DNS_PROBE.replace('\'', "'\\''"),
        origin.port(),
        origin.port()
    );
    let mut cmd = portcullis();
    cmd.args(["run", "--log-file"])
        .arg(&log)
        .args(["--", "sh", "-c", &script]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(3), "CMD's status: {}", out.stderr);
    let text = std::fs::read_to_string(&log).expect("the log file");
    assert!(
        text.contains("inside CMD's network namespace"),
        "the proxy's log is in the file: {text}"
    );
    // The raw query is answered REFUSED with its id and question; glibc
    // then fails with EAI_AGAIN (-3) on the REFUSED answers, and never
    // gets an address.
    assert!(
        out.stdout.contains("raw id=5a17 rcode=5 question=True")
            && out.stdout.contains("tcp id=5a17 rcode=5 question=True"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("gai=-3"), "{}", out.stdout);
    assert!(
        text.contains("dns query refused name=portcullis-probe.test type=A")
            && text.contains("dns query refused name=ignores-the-proxy.example")
            && text.contains("hint: CMD resolves names itself")
            && text.contains(":53 (UDP) with REFUSED")
            && text.contains(":53 (TCP) with REFUSED"),
        "{text}"
    );
    // CMD's stderr: its own line, then the summary, and no proxy line.
    let stderr: Vec<&str> = out.stderr.lines().collect();
    assert!(stderr.contains(&"to stderr from CMD"), "{stderr:?}");
    assert!(
        !stderr.iter().any(|l| l.contains("level=")),
        "no proxy log line on CMD's stderr: {stderr:?}"
    );
    let summary: Vec<&&str> = stderr
        .iter()
        .filter(|l| l.starts_with("portcullis: "))
        .collect();
    assert_eq!(summary.len(), 1, "{stderr:?}");
    let target = format!("127.0.0.1:{} x2 (", origin.port());
    assert!(
        summary[0].starts_with("portcullis: refused 2 connections: ")
            && summary[0].contains(&target)
            && summary[0].contains("portcullis-probe.test x2")
            && summary[0].contains("ignores-the-proxy.example x")
            && summary[0].ends_with(&format!("; log: {}", log.display())),
        "{}",
        summary[0]
    );
    assert_eq!(origin.accepted(), 0);
    assert!(text.contains("summary: refused 2 connections"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the log is its owner's only");

    // Appended, not truncated, by the next run; nothing refused, no summary.
    let mut cmd = portcullis();
    cmd.args(["run", "--log-file"])
        .arg(&log)
        .args(["--", "sh", "-c", "exit 0"]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(0));
    assert_eq!(out.stderr, "", "nothing refused, nothing said");
    let again = std::fs::read_to_string(&log).unwrap();
    assert!(again.starts_with(&text) && again.len() > text.len());
}

#[test]
fn without_a_log_file_only_warnings_and_the_summary_reach_stderr() {
    if !namespaces_expected() {
        return;
    }
    let origin = must_not_accept();
    let script = format!(
        "curl -sS --max-time 20 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{}/ >/dev/null 2>&1; echo cmd-says >&2",
        origin.port()
    );
    let mut cmd = portcullis();
    cmd.env_remove("RUST_LOG")
        .args(["run", "--", "sh", "-c", &script]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert_eq!(
        out.stderr,
        format!(
            "cmd-says\nportcullis: refused 1 connection: 127.0.0.1:{0} x1 (no rule allows this \
             destination: use --default --allow 127.0.0.1:{0}); details: rerun with --log-file FILE",
            origin.port()
        )
    );
    // The same on the host (--no-isolate): the summary counts there too.
    let mut cmd = portcullis();
    cmd.env_remove("RUST_LOG")
        .args(["run", "--no-isolate", "--", "sh", "-c", &script]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("cmd-says\nportcullis: refused 1 connection: 127.0.0.1:"),
        "{}",
        out.stderr
    );
    assert_eq!(origin.accepted(), 0);
    // A log file that cannot be opened is a usage error naming the flag.
    let mut cmd = portcullis();
    cmd.args(["run", "--log-file", "/nonexistent/dir/x.log", "--", "true"]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("--log-file /nonexistent/dir/x.log: cannot open it"),
        "{}",
        out.stderr
    );
}

/// CMD talks to the admin socket at `sock` (python3: one line or one GET),
/// then fetches `http://127.0.0.1:PORT/` through the proxy.
fn steer_script(sock: &std::path::Path, send: &str, port: u16) -> String {
    format!(
        r#"
        python3 - <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({sock:?})
    try:
        s.sendall({send:?}.encode())
    except OSError:
        pass  # answered and closed before the request was read: read the answer

    s.settimeout(10)
    got = b""
    while not got.endswith(b"\n") or got.startswith(b"HTTP"):
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    print("admin=" + got.decode(errors="replace").splitlines()[0] if got else "admin=closed")
except OSError as e:
    print("admin-error=" + str(e))
PY
        body=$(curl -sS --max-time 20 --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:{port}/) && echo "proxied=$body"
        exit 0
        "#,
        sock = sock.display().to_string(),
    )
}

#[test]
fn a_unix_admin_socket_with_control_is_refused_under_run() {
    if !namespaces_expected() {
        return;
    }
    let origin = must_not_accept();
    let dir = TempDir::new("run-admin-control");
    let sock = dir.path().join("admin.sock");
    let line = r#"{"cmd":"add-rule","rule":{"name":"escape","action":"allow","cidr":"127.0.0.1/32"}}
"#;
    let script = steer_script(&sock, line, origin.port());
    let admin = format!("unix:{}", sock.display());
    let out = run_sh(&["--admin", &admin, "--admin-control"], &script);
    assert_eq!(
        origin.accepted(),
        0,
        "CMD steered the proxy: {}",
        out.stdout
    );
    assert_eq!(out.code(), Some(2), "refused at start: {}", out.stderr);
    assert!(
        !out.stdout.contains("admin="),
        "CMD never ran: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("--admin-control") && out.stderr.contains("--admin 127.0.0.1:"),
        "the reason names the safe forms: {}",
        out.stderr
    );
}

#[test]
fn cmd_is_refused_on_a_metrics_only_unix_admin_socket() {
    if !namespaces_expected() {
        return;
    }
    let origin = http_server(BODY);
    let dir = TempDir::new("run-admin-peer");
    let sock = dir.path().join("admin.sock");
    let script = steer_script(
        &sock,
        "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n",
        origin.port(),
    );
    let admin = format!("unix:{}", sock.display());
    let port = origin.port().to_string();
    let out = run_sh(
        &["--admin", &admin, "--allow", &format!("127.0.0.1:{port}")],
        &script,
    );
    assert_isolated(&out);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.contains(&"admin=HTTP/1.1 403 Forbidden"),
        "CMD's admin request must be refused: {lines:?}"
    );
    assert!(
        out.stderr.contains("inside run's sandbox"),
        "the refusal is logged: {}",
        out.stderr
    );
    assert!(
        lines.contains(&format!("proxied={}", BODY.trim_end()).as_str()),
        "the proxy still serves CMD: {lines:?}"
    );
}

/// CMD leaves its network namespace for a new one of its own (`unshare
/// -Urn`: a user namespace nested in the sandbox's) and connects to the
/// metrics-only admin socket from there: the peer's network namespace is
/// no longer CMD's, but it is still CMD's process (a descendant of the
/// sandbox), and refused.
#[test]
fn cmd_in_a_nested_namespace_is_refused_on_a_unix_admin_socket() {
    if !namespaces_expected() {
        return;
    }
    let nested = Command::new("unshare")
        .args(["-Urn", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !nested {
        eprintln!("unshare -Urn unavailable: nothing to nest");
        return;
    }
    let origin = http_server(BODY);
    let dir = TempDir::new("run-admin-nested");
    let sock = dir.path().join("admin.sock");
    let script = steer_script(
        &sock,
        "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n",
        origin.port(),
    )
    .replacen("python3 - <<'PY'", "unshare -Urn python3 - <<'PY'", 1);
    let admin = format!("unix:{}", sock.display());
    let port = origin.port().to_string();
    let out = run_sh(
        &["--admin", &admin, "--allow", &format!("127.0.0.1:{port}")],
        &script,
    );
    assert_isolated(&out);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.contains(&"admin=HTTP/1.1 403 Forbidden"),
        "CMD's admin request from a nested namespace must be refused: {lines:?} {}",
        out.stderr
    );
}

#[test]
fn a_tcp_admin_on_the_hosts_loopback_is_out_of_cmds_reach() {
    if !namespaces_expected() {
        return;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let script = format!(
        r#"
        curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{port}/stats >/dev/null 2>&1; echo "direct=$?"
        code=$(curl -sS --max-time 20 --noproxy '' -x "$HTTP_PROXY" -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/stats); echo "proxied=$code"
        exit 0
        "#
    );
    let admin = format!("127.0.0.1:{port}");
    // Even a rule naming the admin port does not open it to CMD.
    let out = run_sh(
        &["--admin", &admin, "--admin-control", "--allow", &admin],
        &script,
    );
    assert_isolated(&out);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.contains(&"direct=7"), "no route to it: {lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("proxied=4")),
        "the proxy refuses its own admin endpoint: {lines:?}"
    );
    assert!(
        !out.stderr.contains("control:"),
        "no control line ran: {}",
        out.stderr
    );
}

/// CMD's node client: CONNECT through the proxy by hand (node 20 ignores
/// the proxy variables), then HTTPS over the tunnel, trusting the CA
/// bundle `run` points NODE_EXTRA_CA_CERTS at.
const NODE_SECRET_CLIENT: &str = r#"
const http = require("http"), https = require("https"), tls = require("tls");
const proxy = new URL(process.env.HTTPS_PROXY), port = Number(process.argv[1]);
const req = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT", path: `localhost:${port}` });
req.on("connect", (res, socket) => {
  if (res.statusCode !== 200) { console.log("node connect " + res.statusCode); process.exit(1); }
  https.get({ host: "localhost", port, path: "/echo-headers/node", agent: false, socket,
      servername: "localhost", headers: { Authorization: "Bearer " + process.env.API_TOKEN } }, (r) => {
    let body = ""; r.on("data", (d) => body += d); r.on("end", () => { console.log(body); process.exit(0); });
  });
});
req.end();
"#;

/// Reads one admin page (`/stats`, `/metrics`) whole.
fn admin_page(addr: SocketAddr, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    assert!(all.starts_with("HTTP/1.1 200"), "{path}: {all}");
    all
}

#[test]
fn secrets_reach_their_hosts_only_and_cmd_holds_placeholders() {
    use support::tls::{https_origin, terminate_rule, Cas};
    let cas = Cas::new();
    let origin = https_origin(&cas.upstream);
    let port = origin.port();
    let dir = TempDir::new("run-secrets");
    // Values no test input could contain by chance.
    let value = format!("sk-live-{:x}{:x}", std::process::id(), port as u64 * 7919);
    // A second secret, limited to one header. (Not `file = ...`: `run`
    // refuses that, since CMD could read the file.)
    let file_value = format!("filekey-{value}");
    let cfg = dir.path().join("portcullis.toml");
    // `rules.hosts` covers localhost and 127.0.0.1; the secrets go to
    // localhost only, so 127.0.0.1 is the allowed host they may not reach.
    std::fs::write(
        &cfg,
        format!(
            "{}state_dir = \"{}\"\n\n{}\n\
             [[secrets]]\nname = \"API_TOKEN\"\nenv = \"PORTCULLIS_TEST_SECRET\"\nhosts = [\"localhost\"]\n\n\
             [[secrets]]\nname = \"FILE_TOKEN\"\nenv = \"PORTCULLIS_TEST_SECRET_2\"\nhosts = [\"localhost\"]\nheaders = [\"X-Api-Key\"]\n",
            cas.tls_table(),
            dir.path().join("state").display(),
            terminate_rule(port, ""),
        ),
    )
    .unwrap();
    let marker = dir.path().join("go-on");
    let curl = "curl -sS --max-time 20 --noproxy ''";
    let script = format!(
        r#"env > {env_dump}
        echo "token=$API_TOKEN"
        {curl} -H "Authorization: Bearer $API_TOKEN" -H "X-Api-Key: $FILE_TOKEN" https://localhost:{port}/echo-headers/curl
        {curl} -i -H "Authorization: Bearer $API_TOKEN" https://127.0.0.1:{port}/echo-headers/elsewhere
        {curl} -i -H "Authorization: $FILE_TOKEN" https://localhost:{port}/echo-headers/wrong-header
        {curl} -i "https://localhost:{port}/echo-headers/in-path?key=$API_TOKEN"
        python3 -c '
import os, requests
s = requests.Session()
s.trust_env = False
r = s.get("https://localhost:{port}/echo-headers/python", headers={{"Authorization": "Bearer " + os.environ["API_TOKEN"]}},
          proxies={{"https": os.environ["HTTPS_PROXY"]}}, verify=os.environ["REQUESTS_CA_BUNDLE"], timeout=20)
print(r.status_code, r.text)'
        node -e '{node}' {port}
        echo done
        while [ ! -e {marker} ]; do sleep 0.05; done"#,
        env_dump = dir.path().join("cmd-env").display(),
        node = NODE_SECRET_CLIENT.replace('\'', "'\\''"),
        marker = marker.display(),
    );
    let isolate = namespaces_expected();
    for flags in [&[][..], &["--no-isolate"][..]] {
        if flags.is_empty() && !isolate {
            continue;
        }
        let _ = std::fs::remove_file(&marker);
        // `run` does not log the admin address: a port free a moment ago.
        let admin = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut cmd = portcullis();
        cmd.env("PORTCULLIS_TEST_SECRET", &value)
            .env("PORTCULLIS_TEST_SECRET_2", &file_value)
            // An inherited variable holding the value is scrubbed too.
            .env("PORTCULLIS_TEST_COPY", format!("x{value}x"))
            .arg("run")
            .args(flags)
            .args(["--config", cfg.to_str().unwrap()])
            .args(["--admin", &admin.to_string()])
            .args(["--", "sh", "-c", &script]);
        let running = Running::start(cmd);
        // Three clients start up first: bounded like a whole run.
        wait_for("`done` on CMD's stdout", RUN_LIMIT, || {
            running.stdout.lock().unwrap().iter().any(|l| l == "done")
        });
        let pages = admin_page(admin, "/stats") + &admin_page(admin, "/metrics");
        std::fs::write(&marker, "").unwrap();
        let out = running.finish();
        assert_eq!(out.code(), Some(0), "{flags:?}: {}", out.stderr);
        let so = &out.stdout;

        let token = so
            .lines()
            .find_map(|l| l.strip_prefix("token="))
            .expect("the token line");
        assert!(
            token.starts_with("portcullis-secret-API_TOKEN-") && token.len() == 28 + 32,
            "{flags:?}: CMD holds a placeholder: {token:?}"
        );
        let env_dump = std::fs::read_to_string(dir.path().join("cmd-env")).unwrap();
        assert!(
            env_dump.contains(&format!("API_TOKEN={token}")),
            "{env_dump}"
        );
        assert!(env_dump.contains("FILE_TOKEN=portcullis-secret-FILE_TOKEN-"));
        assert!(
            !env_dump.contains(&value) && !env_dump.contains("PORTCULLIS_TEST_SECRET"),
            "{flags:?}: the value or its source reached CMD: {env_dump}"
        );

        // The origin saw the values, for every client.
        for client in ["curl", "python", "node"] {
            let echoed = so
                .split(&format!("GET /echo-headers/{client}\n"))
                .nth(1)
                .unwrap_or_else(|| panic!("{flags:?}: {client} got no echo: {so}"));
            let head = &echoed[..echoed.find("\n\n").expect("the echoed head")];
            assert!(
                head.contains(&format!("Bearer {value}")) && !head.contains(token),
                "{flags:?}: {client}: the origin got the value: {head}"
            );
            if client == "curl" {
                assert!(head.contains(&format!("X-Api-Key: {file_value}")), "{head}");
            }
        }
        // Refused: another host, a header not listed, the request line.
        for (what, why) in [
            ("elsewhere", "may not be sent to 127.0.0.1"),
            (
                "wrong-header",
                "may not be sent in the Authorization header",
            ),
            ("in-path", "in the request line"),
        ] {
            let answer = so
                .split("HTTP/1.1 403")
                .find(|a| a.contains(why))
                .unwrap_or_else(|| panic!("{flags:?}: {what}: no 403 saying {why:?}: {so}"));
            assert!(
                answer.contains("X-Proxy-Error: secret-not-allowed"),
                "{flags:?}: {what}: {answer}"
            );
        }
        assert!(!so.contains("GET /echo-headers/elsewhere"), "{so}");
        assert!(
            out.stderr.contains("secret exfiltration attempt refused")
                && out
                    .stderr
                    .contains("secret API_TOKEN may not be sent to 127.0.0.1"),
            "{flags:?}: logged, naming the secret: {}",
            out.stderr
        );
        // Nothing the proxy said holds a value.
        for (what, text) in [("log", &out.stderr), ("admin", &pages)] {
            assert!(
                !text.contains(&value) && !text.contains("filekey-"),
                "{flags:?}: a secret value in the {what}: {text}"
            );
        }
    }
}

/// A secret read from a file under `run`: CMD runs as the same uid with the
/// same files, so it could simply read the value (`cat key.txt`) and never
/// need the placeholder. Refused at start, with and without isolation,
/// naming the safe form; CMD never runs.
#[test]
fn a_secret_read_from_a_file_is_refused_under_run() {
    let dir = TempDir::new("run-secret-file");
    let value = format!("filekey-{:x}", std::process::id() as u64 * 7919);
    let key = dir.path().join("key.txt");
    std::fs::write(&key, format!("{value}\n")).unwrap();
    let cfg = dir.path().join("portcullis.toml");
    std::fs::write(
        &cfg,
        "[[rules]]\nname = \"api\"\naction = \"allow\"\nhosts = [\"localhost\"]\n\n\
         [[secrets]]\nname = \"API_TOKEN\"\nfile = \"key.txt\"\nhosts = [\"localhost\"]\n",
    )
    .unwrap();
    let script = format!("echo \"read=$(cat {})\"", key.display());
    for flags in [&[][..], &["--no-isolate"][..]] {
        if flags.is_empty() && !namespaces_expected() {
            continue;
        }
        let out = portcullis()
            .arg("run")
            .args(flags)
            .args(["--config", cfg.to_str().unwrap()])
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!so.contains(&value), "{flags:?}: CMD read the value: {so}");
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {so}{se}");
        assert!(
            se.contains("secret API_TOKEN read from a file (secrets[0].file")
                && se.contains("env = \"VAR\"")
                && !se.contains(&value),
            "{flags:?}: the reason names the key and the fix: {se}"
        );
    }
}

/// CMD's SOCKS5 UDP client: `ALL_PROXY`'s listener, one DNS query for
/// svc.test to the host's 127.0.0.1:PORT through the association; prints
/// the relay's address and the answer.
const UDP_CLIENT: &str = r#"
import os, socket, struct, sys, urllib.parse
import socks
proxy = urllib.parse.urlparse(os.environ["ALL_PROXY"])
s = socks.socksocket(socket.AF_INET, socket.SOCK_DGRAM)
s.set_proxy(socks.SOCKS5, proxy.hostname, proxy.port)
s.settimeout(10)
q = struct.pack(">HHHHHH", 0x7777, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l for l in [b"svc", b"test"]) + b"\0" + struct.pack(">HH", 1, 1)
s.sendto(q, ("127.0.0.1", int(sys.argv[1])))
print("relay", *socket.socket.getpeername(s), flush=True)
data, src = s.recvfrom(4096)
print("answer", socket.inet_ntoa(data[-4:]), flush=True)
"#;

/// UDP ASSOCIATE under `run`: the relay is bound inside CMD's network
/// namespace (where CMD can reach it), datagrams leave from the host's.
#[test]
fn a_socks5_udp_client_under_run_reaches_an_allowed_server() {
    if !namespaces_expected() || crate::udp::python_with_socks().is_none() {
        return;
    }
    let dns = crate::udp::Dns::start();
    let dir = TempDir::new("run-udp");
    let (out, text) = run_logged(
        &dir,
        &["--allow", &format!("127.0.0.1:{}", dns.port)],
        &["python3", "-c", UDP_CLIENT, &dns.port.to_string()],
    );
    assert!(text.contains("inside CMD's network namespace"), "{text}");
    assert!(
        out.stdout.lines().any(|l| l == "answer 192.0.2.53"),
        "{}",
        out.stdout
    );
    // The server saw the query from the proxy's outbound socket on the
    // host's loopback.
    assert_eq!(dns.seen.lock().unwrap().len(), 1);
    let relay = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("relay "))
        .expect("the relay line");
    assert!(relay.starts_with("127.0.0.1 "), "{relay}");
    assert!(
        text.contains(&format!("udp associate: relay {}", relay.replace(' ', ":"))),
        "{text}"
    );
}

/// CMD can SIGKILL the relay helper (pid 2 of its PID namespace, same
/// user): associations are then refused with a reason naming it, and the
/// proxy carries on (CMD's TCP through it still works).
#[test]
fn a_killed_udp_helper_refuses_associations_with_the_reason() {
    if !namespaces_expected() || crate::udp::python_with_socks().is_none() {
        return;
    }
    let dns = crate::udp::Dns::start();
    let origin = http_server(BODY);
    let dir = TempDir::new("run-udp-killed");
    let client = dir.path().join("client.py");
    std::fs::write(&client, UDP_CLIENT).unwrap();
    let script = format!(
        "kill -9 2 && echo killed; python3 {} {} 2>&1 | tail -1; \
         curl -sS --max-time 20 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{}/",
        client.display(),
        dns.port,
        origin.port()
    );
    let (out, text) = run_logged(
        &dir,
        &[
            "--allow",
            &format!("127.0.0.1:{}", dns.port),
            "--allow",
            &format!("127.0.0.1:{}", origin.port()),
        ],
        &["sh", "-c", &script],
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"killed"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("0x01: General SOCKS server failure")),
        "{lines:?}"
    );
    assert!(
        lines.contains(&BODY.trim_end()),
        "TCP still works: {lines:?}"
    );
    assert!(
        text.contains(
            "cannot bind a relay socket on 127.0.0.1: the namespace's UDP helper is gone"
        ),
        "{text}"
    );
    assert!(dns.seen.lock().unwrap().is_empty());
}

/// CMD's attack on the UDP helper (pid 2 of its PID namespace): stop it,
/// take its end of the socket pair with `pidfd_getfd` (or ptrace), answer
/// the proxy's next request itself with a UDP socket it keeps a copy of,
/// then clear `O_NONBLOCK` on that shared file: the proxy's reactor would
/// block in `recvfrom` on the relay for good, and `run` never exit.
const TAKE_THE_HELPER: &str = r#"
import ctypes, os, signal, socket, sys, time, urllib.parse
libc = ctypes.CDLL(None, use_errno=True)
os.kill(2, signal.SIGSTOP)
pidfd = os.pidfd_open(2)
h = None
for fd in range(3, 64):
    r = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
    if r < 0:
        if ctypes.get_errno() == 9:
            continue
        print("refused:", os.strerror(ctypes.get_errno()), flush=True)
        sys.exit(0)
    s = socket.socket(fileno=r)
    if s.family == socket.AF_UNIX and s.type == socket.SOCK_SEQPACKET:
        h = s
        break
    s.detach()
if h is None:
    print("no helper socket", flush=True)
    sys.exit(0)
print("took the helper's socket", flush=True)
p = urllib.parse.urlparse(os.environ["ALL_PROXY"])
c = socket.create_connection((p.hostname, p.port))
c.sendall(b"\x05\x01\x00")
c.recv(2)
c.sendall(b"\x05\x03\x00\x01" + bytes(6))
ip = h.recv(64).decode()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((ip, 0))
socket.send_fds(h, [b"ok"], [u.fileno()])
rep = c.recv(10)
relay = (socket.inet_ntoa(rep[4:8]), int.from_bytes(rep[8:10], "big"))
os.set_blocking(u.fileno(), True)
cl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
cl.sendto(b"\0\0\0\x01\x7f\0\0\x01\x00\x35hi", relay)
time.sleep(0.5)
print("CMD exits", flush=True)
"#;

/// Attack: CMD (root in its user namespace when `run` is started as root,
/// so holding every capability there) must not be able to take the UDP
/// helper's socket and hand the proxy a relay it shares: the helper is not
/// dumpable, so neither `pidfd_getfd` nor ptrace reach it; `run` exits.
#[test]
fn cmd_cannot_take_the_udp_helpers_socket() {
    if !namespaces_expected() {
        return;
    }
    let mut cmd = portcullis();
    cmd.args(["run", "--", "python3", "-c", TAKE_THE_HELPER]);
    let out = Running::start(cmd).finish();
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with("refused: "),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
}

/// `portcullis run --log-file DIR/proxy.log ARGS -- CMD` to completion,
/// which must exit 0; its output and the proxy's log.
fn run_logged(dir: &TempDir, args: &[&str], cmd: &[&str]) -> (Output, String) {
    let log = dir.path().join("proxy.log");
    let mut run = portcullis();
    run.args(["run", "--log-file"])
        .arg(&log)
        .args(args)
        .arg("--")
        .args(cmd);
    let out = Running::start(run).finish();
    let text = std::fs::read_to_string(&log).expect("the log file");
    assert_eq!(
        out.code(),
        Some(0),
        "{}\n{}\n{text}",
        out.stdout,
        out.stderr
    );
    (out, text)
}
