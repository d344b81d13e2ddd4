//! `portcullis run [proxy options] -- CMD ARGS...`: CMD behind the proxy.
//!
//! On Linux, CMD runs in new user, network and PID namespaces whose only
//! network is a loopback where the proxy's listener lives (see
//! [`namespace`]); the proxy itself stays in the host namespaces and accepts
//! on that listener directly. `--no-isolate` (and platforms without
//! isolation) run CMD on the host with only the proxy variables set. On
//! macOS CMD runs under `sandbox-exec` (see [`sandbox`]).
//!
//! Either way: the policy is the one the proxy flags describe, CMD's exit
//! status is `run`'s, SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to CMD, and
//! the proxy stops when CMD exits.

#[cfg(any(target_os = "linux", test))]
mod dns;
#[cfg(target_os = "linux")]
mod fdpass;
#[cfg(target_os = "linux")]
mod namespace;
#[cfg(target_os = "linux")]
mod netlink;
#[cfg(target_os = "linux")]
mod relay;
mod sandbox;
mod supervise;
mod tally;
#[cfg(target_os = "linux")]
mod trap;

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use log::info;
use nix::sys::signal::SigSet;
use nix::unistd::Pid;
use portcullis::config::ConfigFile;
use portcullis::events::{Decision, EventKind};
use portcullis::{
    Config, Credentials, ListenAddr, ListenerConfig, ListenerProtocol, LogFormat, Proxy,
    ProxyBuilder,
};

use crate::args::Args;
use crate::proxy_env::{secret_scrub, secret_vars, tls_ca_vars, Endpoint, ProxyEnv, Var};

const RUN_AFTER_HELP: &str = "\
CMD runs in new user, network and PID namespaces (a plain network and PID
namespace when user namespaces are unavailable and portcullis runs as root).
Its only network is a loopback where the proxy listens (127.0.0.1:3128, or
--listen); HTTP_PROXY, HTTPS_PROXY, ALL_PROXY (socks5h), NO_PROXY
(localhost,127.0.0.1,::1) and GRPC_PROXY are set in both cases, and
NODE_USE_ENV_PROXY=1. Any other connection fails: there is no route.
The policy is the proxy's: the built-in default allows the public internet
on ports 80 and 443 only.

The proxy's log goes to --log-file FILE (appended; created mode 0600).
Without it only warnings and errors reach stderr (RUST_LOG changes that).
At exit, if anything was refused, one line on stderr says what:
  portcullis: refused 3 connections: pypi.org:443 x2 (...), ...; log: FILE
DNS queries CMD sends itself (to the resolvers in /etc/resolv.conf) are
answered REFUSED at once, logged with the name and counted there too.

The exit status is CMD's (128+N if a signal N killed it). SIGINT, SIGTERM,
SIGHUP and SIGQUIT are forwarded to CMD. When CMD exits, every process it
left in the namespace is killed and the proxy stops.

Examples:
  portcullis run -- cargo build
  portcullis run --allow github.com:443 -- git clone https://github.com/o/r
  portcullis run --log-file run.log -- pip install requests
  portcullis run --no-isolate -- npm install";

/// `portcullis run [proxy options] -- CMD ARGS...`
#[derive(Debug, clap::Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// The proxy's flags.
    #[command(flatten)]
    pub proxy: Args,

    /// No namespace: only set the proxy variables and run CMD (on the host
    /// network, so CMD can still connect directly). The listener defaults to
    /// an ephemeral port on 127.0.0.1.
    #[arg(long)]
    pub no_isolate: bool,

    /// Append the proxy's log to FILE (created mode 0600) instead of
    /// stderr, at info level. Without it, only warnings and errors go to
    /// stderr, so CMD's stderr stays its own.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,

    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

/// `portcullis run`.
pub fn main(run: RunArgs) -> ExitCode {
    if run.proxy.check {
        fatal!("--check does not apply to run");
        return ExitCode::from(2);
    }
    let setup = match run.proxy.load() {
        Ok(s) => s,
        Err(e) => {
            fatal!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(reason) = admin_reachable(&setup.config, run.no_isolate) {
        fatal!("{reason}");
        return ExitCode::from(2);
    }
    if let Some(reason) = secret_file_readable(&setup.config) {
        fatal!("{reason}");
        return ExitCode::from(2);
    }
    // Before any thread exists: every thread, the namespace child and its
    // init inherit the mask, and only sigwait takes these signals.
    let signals = supervise::signals();
    if let Err(e) = signals.thread_block() {
        fatal!("cannot block signals: {e}");
        return ExitCode::FAILURE;
    }
    if setup.config.policy.secrets().is_some() {
        // Before the namespace child forks: it and the proxy both hold the
        // values (and the environment they came from), CMD only placeholders.
        portcullis::policy::secret::protect_process();
        let _ = SCRUB.set(secret_scrub(&setup.config));
    }
    crate::raise_nofile_limit(true);
    crate::log_policy(&run.proxy, setup.rules.as_deref(), &setup.config.policy);
    let tally = Arc::new(Mutex::new(tally::Tally::default()));
    let status = if run.no_isolate {
        let given = listeners_given(&run.proxy);
        on_host(setup.config, given, &run.cmd, signals, &tally, |_| {
            Vec::new()
        })
    } else {
        isolated(setup.config, &run.proxy, &run.cmd, signals, &tally)
    };
    let summary = tally
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .summary(run.log_file.as_deref());
    if let Some(summary) = summary {
        if run.log_file.is_some() {
            info!("summary: {summary}");
        }
        crate::report(log::Level::Warn, format_args!("{summary}"));
    }
    status
}

/// Installs the logger for `run`: to `--log-file` (info by default), else
/// to stderr with only warnings and errors by default; `RUST_LOG` decides
/// when set. Errors name the flag.
pub fn init_logging(run: &RunArgs, format: LogFormat) -> Result<(), String> {
    let Some(path) = &run.log_file else {
        return portcullis::logging::init_with(format, "warn", None).map_err(|e| e.to_string());
    };
    let file = open_log(path).map_err(|e| {
        format!(
            "--log-file {}: cannot open it for appending: {e}",
            path.display()
        )
    })?;
    portcullis::logging::init_with(format, "info", Some(Box::new(file))).map_err(|e| e.to_string())
}

/// Opens the log file for appending, creating it readable by its owner only
/// (the log names every destination CMD tried).
fn open_log(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// The proxy's builder for `config`, counting refusals into `tally`.
fn counting(config: Config, tally: &Arc<Mutex<tally::Tally>>) -> ProxyBuilder {
    let tally = Arc::clone(tally);
    Proxy::builder().config(config).on_event(move |e| {
        if e.kind != EventKind::Session {
            return;
        }
        let audit = match e.decision {
            Some(Decision::Deny) => false,
            Some(Decision::WouldDeny) => true,
            _ => return,
        };
        if let Some(target) = &e.target {
            tally.lock().unwrap_or_else(|p| p.into_inner()).refused(
                target,
                e.reason.as_deref(),
                audit,
            );
        }
    })
}

#[cfg(target_os = "linux")]
fn isolated(
    config: Config,
    _: &Args,
    cmd: &[OsString],
    signals: SigSet,
    tally: &Arc<Mutex<tally::Tally>>,
) -> ExitCode {
    if config.listeners.len() > fdpass::MAX_FDS {
        fatal!("run takes at most {} listeners", fdpass::MAX_FDS);
        return ExitCode::from(2);
    }
    let mut extra_env = tls_ca_vars(&config);
    extra_env.extend(secret_vars(&config));
    let plan = namespace::Plan {
        listeners: &config.listeners,
        auth: config.auth.as_ref(),
        extra_env: &extra_env,
        cmd,
        signals,
    };
    let mut child = match namespace::spawn(&plan) {
        Ok(c) => c,
        Err(e) => {
            fatal!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // Threads may start from here on: the child exists.
    let mut proxy_config = config.clone();
    proxy_config.listeners.clear();
    if let Some(admin) = &mut proxy_config.admin {
        // Second line behind `admin_reachable`: the admin endpoint refuses
        // CMD (a metrics-only Unix socket is reachable through the files).
        match netns_of(child.pid) {
            Ok(ns) => {
                admin.refuse_netns = Some(ns);
                // CMD may leave its network namespace (unshare -Urn) but
                // not its ancestry.
                admin.refuse_descendants_of = Some(child.pid.as_raw());
            }
            Err(e) => {
                fatal!("cannot read CMD's network namespace: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut builder = counting(proxy_config, tally);
    for (l, protocol) in std::mem::take(&mut child.listeners) {
        builder = builder.listener(l, protocol);
    }
    // UDP ASSOCIATE relays must be bound where CMD can send to them.
    match relay::Binder::new(child.take_relay()) {
        Ok(binder) => builder = builder.udp_relay_bind(move |ip| binder.bind(ip)),
        Err(e) => {
            fatal!("cannot reach the namespace's UDP helper: {e}");
            return ExitCode::FAILURE;
        }
    }
    // On an early return the child sees its socket close and exits; CMD never starts.
    let proxy = match builder.build() {
        Ok(p) => p,
        Err(e) => {
            fatal!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let how = match child.isolation {
        namespace::Isolation::UserNamespace => "new user, network and PID namespaces",
        namespace::Isolation::RootNetworkNamespace => "new network and PID namespaces (as root)",
    };
    for addr in proxy.local_addrs() {
        info!("listening on {addr} inside CMD's network namespace");
    }
    info!("running {} in {how}", show(cmd));
    for note in &child.dns_notes {
        log::warn!("{note}; CMD's direct DNS queries fail with no route instead");
    }
    trap::start(std::mem::take(&mut child.dns), tally);
    if let Err(e) = child.start() {
        fatal!("cannot start CMD: {e}");
        return ExitCode::FAILURE;
    }
    let status = supervise::run(proxy, child.pid, signals);
    // The child bound the Unix sockets, so the proxy leaves their files: remove them.
    for l in &config.listeners {
        if let ListenAddr::Unix(path) = &l.addr {
            let _ = std::fs::remove_file(path);
        }
    }
    status
}

#[cfg(target_os = "macos")]
fn isolated(
    config: Config,
    args: &Args,
    cmd: &[OsString],
    signals: SigSet,
    tally: &Arc<Mutex<tally::Tally>>,
) -> ExitCode {
    on_host(
        config,
        listeners_given(args),
        cmd,
        signals,
        tally,
        sandbox::wrapper,
    )
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn isolated(
    _: Config,
    _: &Args,
    _: &[OsString],
    _: SigSet,
    _: &Arc<Mutex<tally::Tally>>,
) -> ExitCode {
    fatal!(
        "run cannot isolate CMD on this platform (network namespaces are \
         Linux-only, sandbox-exec macOS-only); use --no-isolate to only set the proxy variables"
    );
    ExitCode::FAILURE
}

/// The network namespace of `pid`: the device and inode of `/proc/PID/ns/net`.
#[cfg(target_os = "linux")]
fn netns_of(pid: Pid) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/ns/net"))?;
    Ok((m.dev(), m.ino()))
}

/// Why the admin endpoint would let CMD steer the proxy, if it would: CMD
/// runs as this uid with these files, so it can connect to any Unix socket
/// the proxy binds (mode 0600 does not keep out the same uid), and under
/// `--no-isolate` to any TCP one too. A TCP admin endpoint is safe under
/// isolation: CMD's network namespace has no route to it.
fn admin_reachable(config: &Config, no_isolate: bool) -> Option<String> {
    let admin = config.admin.as_ref().filter(|a| a.control)?;
    if no_isolate {
        return Some(format!(
            "run --no-isolate with admin control (--admin-control, or [admin] control = true) is refused: \
             CMD shares this host's network and files, so it could reach {} and change the policy; \
             drop --admin-control (metrics only), or run without --no-isolate and use --admin 127.0.0.1:PORT --admin-control",
            admin.listen
        ));
    }
    if let ListenAddr::Unix(path) = &admin.listen {
        return Some(format!(
            "run with admin control on a Unix socket (--admin unix:{} with --admin-control, or [admin] control = true) is refused: \
             CMD runs as your uid with your files, so it could connect to the socket and change the policy; \
             use --admin 127.0.0.1:PORT --admin-control (a TCP port on the host, which CMD's network namespace cannot reach), \
             or drop --admin-control to serve metrics only",
            path.display()
        ));
    }
    None
}

/// Why `run` refuses the configuration's secrets, if it does: a value read
/// from a file is readable by CMD, which runs with this uid and sees these
/// files (`run` isolates the network only), so CMD would not need the
/// placeholder at all. A value from the proxy's environment is taken out
/// of CMD's, and the proxy is non-dumpable, so that form is safe.
fn secret_file_readable(config: &Config) -> Option<String> {
    let secrets = config.policy.secrets()?;
    let (i, secret, path) = secrets
        .iter()
        .enumerate()
        .find_map(|(i, s)| s.file_source().map(|p| (i, s, p)))?;
    Some(format!(
        "run with secret {name} read from a file (secrets[{i}].file = {path}) is refused: \
         CMD runs as your uid and sees your files, so it could read the value there; \
         give it in the proxy's environment instead (env = \"VAR\": run takes VAR out of CMD's environment), \
         or keep the file where CMD cannot read it and run the proxy apart from the sandbox (portcullis env)",
        name = secret.name(),
        path = path.display(),
    ))
}

/// CMD on the host's network, with the proxy variables set (and, on macOS,
/// `wrap`ped in a sandbox). The listener defaults to an ephemeral loopback port.
fn on_host(
    mut config: Config,
    listeners_given: bool,
    cmd: &[OsString],
    signals: SigSet,
    tally: &Arc<Mutex<tally::Tally>>,
    wrap: impl FnOnce(&ListenAddr) -> Vec<OsString>,
) -> ExitCode {
    if !listeners_given {
        config.listeners = vec![ListenerConfig::new(
            ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 0))),
            ListenerProtocol::Auto,
        )];
    }
    let mut extra_env = tls_ca_vars(&config);
    extra_env.extend(secret_vars(&config));
    let auth = config.auth.clone();
    let protocols: Vec<ListenerProtocol> = config.listeners.iter().map(|l| l.protocol).collect();
    let proxy = match counting(config, tally).build() {
        Ok(p) => p,
        Err(e) => {
            fatal!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addrs: Vec<(ListenAddr, ListenerProtocol)> =
        proxy.local_addrs().iter().cloned().zip(protocols).collect();
    for (addr, _) in &addrs {
        info!("listening on {addr}");
    }
    let Some((primary, _)) = primary(&addrs) else {
        fatal!("no listener");
        return ExitCode::FAILURE;
    };
    let argv: Vec<OsString> = wrap(primary)
        .into_iter()
        .chain(cmd.iter().cloned())
        .collect();
    info!(
        "running {} with the proxy variables set; it is not isolated and can still connect directly",
        show(cmd)
    );
    let env = proxy_env(&addrs, auth.as_ref(), &extra_env);
    let child = match cmd_command(&argv, true).envs(env.vars).spawn() {
        Ok(c) => c,
        Err(e) => {
            fatal!("cannot run {}: {e}", argv[0].to_string_lossy());
            return ExitCode::from(spawn_failure_code(&e));
        }
    };
    supervise::run(proxy, Pid::from_raw(child.id() as i32), signals)
}

/// The command that starts CMD (`argv`): as a program expects to start,
/// whatever this process did to its own signals. `run` blocks the signals
/// it takes with `sigwait` (and spawn keeps the mask across exec) and Rust
/// ignores SIGPIPE, so CMD gets an empty mask and SIGPIPE at its default;
/// other dispositions are as `run` inherited them (exec resets handlers).
/// With `die_with_run` (CMD on the host, where no PID namespace takes it
/// down), CMD also gets SIGKILL when `run` dies, even by SIGKILL.
fn cmd_command(argv: &[OsString], die_with_run: bool) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    for name in SCRUB.get().into_iter().flatten() {
        cmd.env_remove(name);
    }
    #[cfg(target_os = "linux")]
    let run_pid = nix::unistd::getpid();
    #[cfg(not(target_os = "linux"))]
    let _ = die_with_run;
    // SAFETY: between fork and exec the closure only makes async-signal-safe
    // calls (sigemptyset, sigprocmask, signal, prctl, getppid) and allocates
    // nothing (an io::Error from an errno does not allocate).
    unsafe {
        cmd.pre_exec(move || {
            use nix::libc;
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR {
                return Err(io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            if die_with_run {
                // Tied to the thread that forks: the main thread, which runs
                // the proxy until the process exits.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // `run` may have died before the prctl: then nobody would kill CMD.
                if libc::getppid() != run_pid.as_raw() {
                    libc::_exit(128 + libc::SIGKILL);
                }
            }
            Ok(())
        });
    }
    cmd
}

/// Variables of `run`'s environment CMD must not inherit (the sources of
/// secrets' values), set once in [`main`] before anything forks.
static SCRUB: std::sync::OnceLock<Vec<OsString>> = std::sync::OnceLock::new();

/// The listener the variables point at: the first TCP one, else the first.
fn primary(
    listeners: &[(ListenAddr, ListenerProtocol)],
) -> Option<&(ListenAddr, ListenerProtocol)> {
    listeners
        .iter()
        .find(|(a, _)| matches!(a, ListenAddr::Tcp(_)))
        .or_else(|| listeners.first())
}

/// CMD's proxy variables for the bound listeners.
fn proxy_env(
    listeners: &[(ListenAddr, ListenerProtocol)],
    auth: Option<&Credentials>,
    extra: &[Var],
) -> ProxyEnv {
    match primary(listeners) {
        Some((addr, protocol)) => {
            ProxyEnv::new(&Endpoint::of(addr), *protocol, auth).with_extra(extra.iter().cloned())
        }
        None => ProxyEnv::default(),
    }
}

/// The shell's convention when CMD cannot be started: 127 not found, 126 otherwise.
fn spawn_failure_code(e: &io::Error) -> u8 {
    match e.kind() {
        io::ErrorKind::NotFound => 127,
        _ => 126,
    }
}

/// Whether the user chose the listeners (`--listen`, or `[[listen]]` in the file).
fn listeners_given(args: &Args) -> bool {
    !args.listen.is_empty()
        || args
            .config
            .as_ref()
            .is_some_and(|p| ConfigFile::load(p).is_ok_and(|f| f.listeners.is_some()))
}

/// CMD for a log line.
fn show(cmd: &[OsString]) -> String {
    cmd.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}
