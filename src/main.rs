//! The `portcullis` binary: a thin command line over the library.

mod args;
mod cli;
mod proxy_env;
mod run;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;

use clap::Parser;
use log::{error, info, warn};
use nix::sys::signal::{SigSet, Signal};
use portcullis::{Config, ListenAddr, ListenerProtocol, Proxy, ProxyHandle};

use args::Args;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            eprintln!("portcullis: {} (see --help)", args::one_line(&e));
            return ExitCode::from(2);
        }
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = match cli.command {
        Some(command) => return cli::main(command),
        None => cli.args,
    };

    if args.check {
        // As a real start would, so that limits sized to it show as they would run.
        raise_nofile_limit(false);
        return match args.load() {
            Ok(setup) => {
                print!("{}", setup.summary(&args));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("portcullis: {e}");
                ExitCode::from(2)
            }
        };
    }

    // Before any thread exists (the proxy starts resolver threads), so that
    // every thread inherits the mask and only the signal thread sees these.
    let signals = handled_signals();
    if let Err(e) = signals.thread_block() {
        eprintln!("portcullis: cannot block signals: {e}");
        return ExitCode::FAILURE;
    }
    raise_nofile_limit(true);

    let setup = match args.load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("portcullis: {e}");
            return ExitCode::from(2);
        }
    };
    let running = setup.config.clone();
    let proxy = match Proxy::new(setup.config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("portcullis: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (addr, l) in proxy.local_addrs().iter().zip(&running.listeners) {
        log_listener(addr, l.protocol, running.auth.is_some());
    }
    log_policy(&args, setup.rules.as_deref());

    let handle = proxy.handle();
    let spawned = std::thread::Builder::new()
        .name("portcullis-signals".into())
        .spawn(move || signal_loop(signals, args, running, handle));
    if let Err(e) = spawned {
        eprintln!("portcullis: cannot start the signal thread: {e}");
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

/// SIGHUP: re-read the file, add the flags' rules, swap the policy in.
fn reload(args: &Args, running: &Config, handle: &ProxyHandle) {
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
    {
        warn!("reload applies the policy only; listener, auth, timeout and limit changes need a restart");
    }
    let n = setup.rules.as_ref().map_or(0, Vec::len);
    handle.reload(setup.config.policy);
    info!("policy reloaded: {n} rules");
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

fn log_policy(args: &Args, rules: Option<&[String]>) {
    match rules {
        None => info!("policy: built-in default (public internet on ports 80 and 443; private ranges refused)"),
        Some([]) => warn!("policy: no rules, so every destination is denied"),
        Some(names) => {
            let from = if args.config.is_some() { "file and flags" } else { "flags" };
            info!("policy: {} rules from {from}: {}", names.len(), names.join(", "));
        }
    }
}
