//! The `portcullis` binary: a thin command line over the library.

/// Reports an error the binary exits on (or stops doing something over):
/// see [`report`].
macro_rules! fatal {
    ($($arg:tt)*) => {
        $crate::report(log::Level::Error, format_args!($($arg)*))
    };
}

mod args;
mod cli;
mod proxy_env;
mod run;
mod summary;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use log::{error, info, warn};
use nix::sys::signal::{SigSet, Signal};
use portcullis::config::ConfigFile;
use portcullis::{Config, ListenAddr, ListenerProtocol, LogFormat, Proxy, ProxyHandle};

use args::Args;

fn main() -> ExitCode {
    // Before parsing, so that a usage error is a JSON line too.
    if json_requested(std::env::args_os().skip(1)) {
        JSON_REPORTS.store(true, Ordering::Relaxed);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            fatal!("{} (see --help)", args::one_line(&e));
            return ExitCode::from(2);
        }
    };
    let proxy_args = match &cli.command {
        Some(cli::Command::Run(run)) => &run.proxy,
        Some(cli::Command::Env(env)) => &env.proxy,
        Some(cli::Command::Ca(ca)) => &ca.proxy,
        Some(
            cli::Command::HashPassword(_)
            | cli::Command::Completions(_)
            | cli::Command::Man(_)
            | cli::Command::Suggest(_),
        )
        | None => &cli.args,
    };
    let format = log_format(proxy_args);
    JSON_REPORTS.store(format == LogFormat::Json, Ordering::Relaxed);
    if proxy_args.control_fd.is_some() && cli.command.is_some() {
        fatal!("--control-fd is for the proxy itself, not for run or env");
        return ExitCode::from(2);
    }
    let logging = match &cli.command {
        Some(cli::Command::Run(run)) => run::init_logging(run, format),
        _ => portcullis::logging::init(format).map_err(|e| e.to_string()),
    };
    if let Err(e) = logging {
        fatal!("cannot set up logging: {e}");
        if matches!(&cli.command, Some(cli::Command::Run(r)) if r.log_file.is_some()) {
            return ExitCode::from(2);
        }
    }
    let args = match cli.command {
        Some(command) => return cli::main(command),
        None => cli.args,
    };

    if args.check {
        // As a real start would, so that limits sized to it show as they would run.
        raise_nofile_limit(false);
        return match args.load().and_then(|s| summary::startable(s, &args)) {
            // As a start would: the TLS files a terminating rule needs.
            Ok(setup) => match summary::check_tls(&setup) {
                Ok(warnings) => {
                    print!("{}", summary::render(&setup, &args, &warnings));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    fatal!("cannot start: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                fatal!("{e}");
                ExitCode::from(2)
            }
        };
    }

    // Before any thread exists (the proxy starts resolver threads), so that
    // every thread inherits the mask and only the signal thread sees these.
    let signals = handled_signals();
    if let Err(e) = signals.thread_block() {
        fatal!("cannot block signals: {e}");
        return ExitCode::FAILURE;
    }
    raise_nofile_limit(true);

    let setup = match args.load() {
        Ok(s) => s,
        Err(e) => {
            fatal!("{e}");
            return ExitCode::from(2);
        }
    };
    let control = match args.control_fd.map(control_stream) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            fatal!("--control-fd: {e}");
            return ExitCode::from(2);
        }
    };
    let running = setup.config.clone();
    let mut builder = Proxy::builder().config(setup.config);
    if let Some(stream) = control {
        builder = builder.control(stream);
    }
    let proxy = match builder.build() {
        Ok(p) => p,
        Err(e) => {
            fatal!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (addr, l) in proxy.local_addrs().iter().zip(&running.listeners) {
        log_listener(addr, l.protocol, running.auth_required());
    }
    log_policy(&args, setup.rules.as_deref(), &running.policy);
    if let Some(addr) = proxy.handle().admin_addr() {
        let control = if running.admin.as_ref().is_some_and(|a| a.control) {
            ", control lines"
        } else {
            ""
        };
        info!("admin endpoint on {addr}: GET /metrics, GET /stats{control}");
    }
    if args.control_fd.is_some() {
        info!(
            "taking control commands on fd {}",
            args.control_fd.unwrap_or_default()
        );
    }

    let handle = proxy.handle();
    let spawned = std::thread::Builder::new()
        .name("portcullis-signals".into())
        .spawn(move || signal_loop(signals, args, running, handle));
    if let Err(e) = spawned {
        fatal!("cannot start the signal thread: {e}");
        return ExitCode::FAILURE;
    }

    match proxy.run() {
        Ok(()) => {
            info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!("proxy failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGTERM,
        Signal::SIGINT,
    ] {
        set.add(s);
    }
    set
}

/// Waits for signals forever (the process exits when `run` returns).
fn signal_loop(signals: SigSet, args: Args, running: Config, handle: ProxyHandle) {
    let mut stopping = false;
    loop {
        let sig = match signals.wait() {
            Ok(s) => s,
            Err(e) => {
                error!("waiting for signals failed, signals are now ignored: {e}");
                return;
            }
        };
        match sig {
            Signal::SIGHUP => reload(&args, &running, &handle),
            Signal::SIGUSR1 => info!("stats: {}", handle.stats()),
            Signal::SIGTERM | Signal::SIGINT if stopping => {
                warn!("{sig} again: exiting without waiting for sessions to close");
                std::process::exit(1);
            }
            Signal::SIGTERM | Signal::SIGINT => {
                info!("{sig}: shutting down");
                stopping = true;
                handle.shutdown();
            }
            _ => {}
        }
    }
}

/// SIGHUP: re-read the trust roots and the file, add the flags' rules,
/// swap the policy in.
fn reload(args: &Args, running: &Config, handle: &ProxyHandle) {
    // The system's roots may have changed (a root added to the store or to
    // SSL_CERT_FILE): read them again, here, off the reactors.
    if let Err(e) = handle.reload_upstream_trust() {
        error!("reloading the upstream trust roots failed, keeping the current ones: {e}");
    }
    if args.config.is_none() {
        info!("SIGHUP: no --config file, nothing to reload");
        return;
    }
    let setup = match args.load() {
        Ok(s) => s,
        Err(e) => {
            error!("reload failed, keeping the current policy: {e}");
            return;
        }
    };
    let new = &setup.config;
    if new.listeners != running.listeners
        || new.timeouts != running.timeouts
        || new.limits != running.limits
        || new.auth != running.auth
        || new.users != running.users
        || new.tls != running.tls
        || new.admin != running.admin
    {
        warn!("reload applies the policy only; listener, auth (users), timeout, limit, tls and admin changes need a restart");
    }
    let n = setup.rules.as_ref().map_or(0, Vec::len);
    handle.reload(setup.config.policy);
    info!("policy reloaded: {n} {}", plural(n, "rule"));
}

/// The log format: `--log-format`, else the file's `log_format` (read here
/// once, before logging starts; its errors are reported when it is loaded
/// for real, in the format it asks for if its TOML parses), else text.
fn log_format(args: &args::Args) -> LogFormat {
    args.log_format
        .or_else(|| {
            let path = args.config.as_ref()?;
            match ConfigFile::load(path) {
                Ok(f) => Some(f.log_format),
                Err(_) => {
                    let text = std::fs::read_to_string(path).ok()?;
                    let table = toml::from_str::<toml::Table>(&text).ok()?;
                    table.get("log_format")?.as_str()?.parse().ok()
                }
            }
        })
        .unwrap_or_default()
}

/// Whether [`report`] writes JSON: `--log-format json`, or the file's `log_format`.
static JSON_REPORTS: AtomicBool = AtomicBool::new(false);

/// Writes one of the binary's own messages to stderr: the start-up and
/// usage errors it exits on, and notes. `portcullis: MSG` with text logs;
/// with JSON logs an `event: log` object at `level`, as the logger writes
/// (every stderr line is then JSON). Never filtered by `RUST_LOG`: these
/// lines explain an exit.
fn report(level: log::Level, msg: std::fmt::Arguments) {
    use std::io::Write;
    let line = if JSON_REPORTS.load(Ordering::Relaxed) {
        let record = log::Record::builder()
            .level(level)
            .target("portcullis")
            .args(msg)
            .build();
        portcullis::logging::render(LogFormat::Json, &now_rfc3339(), &record)
    } else {
        format!("portcullis: {msg}")
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The time now as the logger stamps it: RFC 3339, UTC, milliseconds.
fn now_rfc3339() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Whether the command line asks for JSON logs (`--log-format json` or
/// `--log-format=json`), read before clap parses it; CMD's arguments
/// (after `--`) do not count.
fn json_requested(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut previous_was_flag = false;
    for arg in args {
        if arg == "--" {
            break;
        }
        if arg == "--log-format=json" || (previous_was_flag && arg == "json") {
            return true;
        }
        previous_was_flag = arg == "--log-format";
    }
    false
}

/// Takes the inherited descriptor `fd` as the control stream: it must be
/// an open stream socket (one end of a socketpair). It is made
/// close-on-exec at once, so no program the proxy starts inherits it.
fn control_stream(fd: i32) -> Result<std::os::unix::net::UnixStream, String> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    use nix::sys::socket::{getsockopt, sockopt::SockType, SockType as Kind};
    use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
    if fd < 3 {
        return Err(format!(
            "{fd} is stdin, stdout or stderr: pass the socket on fd 3 or above"
        ));
    }
    // SAFETY: borrowed only for the checks below; fcntl first tells whether it is open.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    fcntl(borrowed, FcntlArg::F_GETFD).map_err(|e| format!("fd {fd} is not open: {e}"))?;
    match getsockopt(&borrowed, SockType) {
        Ok(Kind::Stream) => {}
        Ok(other) => {
            return Err(format!(
                "fd {fd} is a {other:?} socket, not a stream socket"
            ))
        }
        Err(e) => return Err(format!("fd {fd} is not a socket: {e}")),
    }
    fcntl(borrowed, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("fd {fd}: cannot set close-on-exec: {e}"))?;
    // SAFETY: the descriptor is open (checked above), was handed to this
    // process for this purpose, and nothing else in it owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(std::os::unix::net::UnixStream::from(owned))
}

/// Raises the soft open-file limit to the hard limit: every tunnel holds
/// two. Logs the outcome when `log` is set (not for `--check`).
fn raise_nofile_limit(log: bool) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let show = |n| match n {
        RLIM_INFINITY => "unlimited".to_string(),
        n => n.to_string(),
    };
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) if log => info!(
                "open file limit raised from {} to {}",
                show(soft),
                show(hard)
            ),
            Err(e) if log => warn!(
                "open file limit stays {}: raising it to {} failed: {e}",
                show(soft),
                show(hard)
            ),
            _ => {}
        },
        Ok((soft, _)) if log => info!("open file limit: {}", show(soft)),
        Err(e) if log => warn!("cannot read the open file limit: {e}"),
        _ => {}
    }
}

fn log_listener(addr: &ListenAddr, protocol: ListenerProtocol, auth: bool) {
    let speaks = match protocol {
        ListenerProtocol::Auto => "http+socks5",
        ListenerProtocol::Http => "http",
        ListenerProtocol::Socks5 => "socks5",
    };
    let (http, socks) = match addr {
        ListenAddr::Tcp(a) => {
            if !a.ip().is_loopback() && !auth {
                warn!("{a} is not a loopback address and no credentials are required: anyone who can reach it can use the proxy");
            }
            let a = reachable(*a);
            (
                Some(format!("curl -p -x http://{a} https://example.com")),
                format!("ALL_PROXY=socks5h://{a}"),
            )
        }
        ListenAddr::Unix(p) => (
            None,
            format!(
                "curl -x socks5h://localhost{} https://example.com",
                p.display()
            ),
        ),
    };
    let hint = match (protocol, http) {
        (ListenerProtocol::Auto, Some(h)) => format!("{h}  or  {socks}"),
        (ListenerProtocol::Http, Some(h)) => h,
        (ListenerProtocol::Http, None) => {
            "an HTTP client that can speak CONNECT over a Unix socket".into()
        }
        _ => socks,
    };
    info!("listening on {addr} ({speaks}); try: {hint}");
}

/// The address a local client would use: the unspecified address becomes loopback.
fn reachable(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, a.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, a.port()).into(),
        _ => a,
    }
}

/// `1 rule`, `2 rules`: the word for a count.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}

/// The policy in force, and at `warn` the mistakes `--check` would warn
/// about (a plaintext inspect rule on 443, audit mode): a user who never runs
/// `--check` still hears of them before the first refusal.
fn log_policy(args: &Args, rules: Option<&[String]>, policy: &portcullis::Policy) {
    for w in policy.warnings() {
        warn!("{w}");
    }
    match rules {
        None => info!("policy: built-in default (host names on ports 80 and 443; address literals and private ranges refused)"),
        Some([]) => warn!("policy: no rules, so every destination is denied"),
        Some(names) => {
            let from = if args.config.is_some() { "file and flags" } else { "flags" };
            let n = names.len();
            info!("policy: {n} {} from {from}: {}", plural(n, "rule"), names.join(", "));
        }
    }
}
