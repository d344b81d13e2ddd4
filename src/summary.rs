//! `--check`: every effective setting, one item a line, then warnings, then `OK`.

use std::fmt::Write;
use std::path::PathBuf;

use portcullis::config::format_duration;
use portcullis::ListenerProtocol;

use crate::args::{Args, Setup};

/// A loaded configuration, checked further for what start would refuse
/// beyond the file itself: a Unix listener's `group` must exist here.
pub fn startable(setup: Setup, args: &Args) -> Result<Setup, portcullis::config::ConfigError> {
    for (i, l) in setup.config.listeners.iter().enumerate() {
        if let Some(Err(e)) = l.unix.group.as_ref().map(|g| g.gid()) {
            let e = portcullis::config::ConfigError::key(format!("listen[{i}].group"), e);
            return Err(match &args.config {
                Some(p) => e.in_file(p),
                None => e,
            });
        }
    }
    Ok(setup)
}

/// What a start loads for TLS termination, checked without writing
/// anything, when a rule terminates (a start fails where this fails: the
/// CA files, a CA already in the state directory, `upstream_ca`). `Ok`
/// holds warnings for the summary.
pub fn check_tls(setup: &Setup) -> Result<Vec<String>, String> {
    use portcullis::tls::{CertAuthority, ClientConfigs};
    let tls = &setup.config.tls;
    let upstream = ClientConfigs::new(&tls.upstream_ca).map(drop);
    if !setup.config.policy.terminates_any() {
        // Only `https://` forward requests would use it.
        return Ok(upstream
            .err()
            .map(|e| format!("tls.upstream_ca: {e} (`GET https://` requests would fail)"))
            .into_iter()
            .collect());
    }
    upstream.map_err(|e| format!("TLS termination: {e}"))?;
    let state_dir = tls.state_dir.as_deref().ok_or(
        "TLS termination: no state directory for the generated CA: set [tls] state_dir, \
         or ca_cert and ca_key",
    )?;
    CertAuthority::check_config(tls.ca_cert.as_deref(), tls.ca_key.as_deref(), state_dir)
        .map(|notes| notes.into_iter().map(|n| format!("tls: {n}")).collect())
        .map_err(|e| format!("TLS termination: {e}"))
}

/// What `--check` prints for a configuration that loaded, with `warnings`
/// (from [`check_tls`]) after the policy's.
pub fn render(setup: &Setup, args: &Args, warnings: &[String]) -> String {
    let c = &setup.config;
    let mut s = String::new();
    let _ = match &args.config {
        Some(p) => writeln!(s, "config: {}", p.display()),
        None => writeln!(s, "config: none (flags and built-in defaults)"),
    };
    for l in &c.listeners {
        let protocol = match l.protocol {
            ListenerProtocol::Auto => "auto",
            ListenerProtocol::Http => "http",
            ListenerProtocol::Socks5 => "socks5",
        };
        let _ = writeln!(s, "listen: {} (protocol {protocol})", l.addr);
        if matches!(l.addr, portcullis::ListenAddr::Unix(_)) {
            let group = match &l.unix.group {
                None => "the process's".to_string(),
                Some(g) => match g.gid() {
                    Ok(gid) => format!("{g} (gid {gid})"),
                    // Refused by `startable` before this is printed.
                    Err(e) => format!("{g} ({e})"),
                },
            };
            let _ = writeln!(s, "  socket file: mode {:04o}, group {group}", l.unix.mode);
        }
    }
    // Names only: neither a password nor a hash is ever printed.
    let _ = match (&c.auth, c.users.len()) {
        (None, 0) => writeln!(s, "auth: off"),
        (Some(a), 0) => writeln!(s, "auth: on (user {:?}; password not shown)", a.username),
        (plain, _) => {
            let names: Vec<String> = c.user_names().iter().map(|n| format!("{n:?}")).collect();
            let plain = match plain {
                Some(a) => format!(", {:?} with a plaintext password", a.username),
                None => String::new(),
            };
            writeln!(
                s,
                "auth: on (users {}{plain}; argon2 hashes not shown, verified on {} threads)",
                names.join(", "),
                portcullis::auth::VERIFIER_THREADS
            )
        }
    };
    let _ = match &c.admin {
        Some(a) => writeln!(
            s,
            "admin: {} (GET /metrics, GET /stats; control {})",
            a.listen,
            if a.control { "on" } else { "off" }
        ),
        None => writeln!(s, "admin: off"),
    };
    let _ = writeln!(s, "log_format: {}", c.log_format);
    let _ = match &c.upstream_proxy {
        // As written, the password left out.
        Some(p) => writeln!(s, "upstream_proxy: {p} (rules may say direct)"),
        None => writeln!(s, "upstream_proxy: none (every tunnel is dialled directly)"),
    };
    // Names, sources and hosts: never a value.
    for secret in c.policy.secrets().iter().flat_map(|s| s.iter()) {
        let source = match secret.env_source() {
            Some(var) => format!("env {var}"),
            None => "file".into(),
        };
        let _ = writeln!(
            s,
            "secret: {} ({source}; value not shown) to {}; CMD gets {}",
            secret.name(),
            secret.hosts().join(", "),
            secret.placeholder(),
        );
    }
    let t = &c.timeouts;
    let idle = t.idle.map_or_else(|| "off".into(), format_duration);
    let _ = writeln!(
        s,
        "timeouts: handshake {}, connect {}, idle {idle}, half_close {}, close {}, drain {}, response {}",
        format_duration(t.handshake),
        format_duration(t.connect),
        format_duration(t.half_close),
        format_duration(t.close),
        format_duration(t.drain),
        format_duration(t.response),
    );
    let l = &c.limits;
    let _ = writeln!(
        s,
        "limits: max_head_bytes {}, buffer_size {}, resolver_threads {}, workers {}, splice {}",
        l.max_head_bytes,
        l.buffer_size,
        l.resolver_threads,
        l.workers,
        if l.splice { "on" } else { "off" },
    );
    let _ = writeln!(s, "{}", session_limits(l));
    let tls = &c.tls;
    let state_dir = tls.state_dir.as_ref().map_or_else(
        || "none (neither XDG_STATE_HOME nor HOME is set)".into(),
        |p| p.display().to_string(),
    );
    let ca = match (&tls.ca_cert, &tls.ca_key) {
        (Some(cert), Some(key)) => format!("ca_cert {}, ca_key {}", cert.display(), key.display()),
        _ => "ca_cert/ca_key none (a CA is generated in the state_dir on first start)".into(),
    };
    let upstream = if tls.upstream_ca.is_empty() {
        "none".to_string()
    } else {
        paths(&tls.upstream_ca)
    };
    let _ = writeln!(
        s,
        "tls: {ca}, upstream_ca {upstream}, state_dir {state_dir}, upstream_roots {}, ktls {}",
        tls.upstream_roots,
        if tls.ktls { "on" } else { "off" }
    );
    let policy = &c.policy;
    let from = match (&setup.rules, &args.config) {
        (None, _) => "built-in default",
        (Some(_), Some(_)) => "file and flags",
        (Some(_), None) => "flags",
    };
    let mode = if policy.is_audit() {
        "audit"
    } else {
        "enforce"
    };
    let _ = match policy.len() {
        0 => writeln!(
            s,
            "policy: no rules, every destination is denied (from {from}), mode {mode}"
        ),
        1 => writeln!(s, "policy: 1 rule (from {from}), mode {mode}"),
        n => writeln!(s, "policy: {n} rules (from {from}), mode {mode}"),
    };
    for rule in policy.describe() {
        let _ = writeln!(s, "{rule}");
    }
    for w in policy
        .warnings()
        .iter()
        .chain(warnings)
        .chain(&setup.warnings)
    {
        let _ = writeln!(s, "warning: {w}");
    }
    s.push_str("OK\n");
    s
}

fn paths(list: &[PathBuf]) -> String {
    let v: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// The session limits in force, and the open-file limit the defaults are
/// sized to (an explicit value in the file wins over its default).
fn session_limits(l: &portcullis::Limits) -> String {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let nofile = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((RLIM_INFINITY, _)) => "unlimited".to_string(),
        Ok((soft, _)) => soft.to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    format!(
        "sessions: max_sessions {}, max_sessions_per_client {}, max_pending_handshakes {}, \
         max_pending_handshakes_per_client {} (defaults sized to an open file limit of {nofile})",
        l.max_sessions,
        l.max_sessions_per_client,
        l.max_pending_handshakes,
        l.max_pending_handshakes_per_client
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn check(args: &[&str]) -> String {
        let a = Args::try_parse_from(std::iter::once("portcullis").chain(args.iter().copied()))
            .unwrap();
        render(&a.load().unwrap(), &a, &[])
    }

    #[test]
    fn builtin_defaults_in_full() {
        let out = check(&[]);
        let want_lines = [
            "config: none (flags and built-in defaults)",
            "listen: 127.0.0.1:3128 (protocol auto)",
            "auth: off",
            "admin: off",
            "log_format: text",
            "timeouts: handshake 10s, connect 10s, idle off, half_close 30s, close 5s, drain 30s, response 1m",
            &format!(
                "limits: max_head_bytes 32768, buffer_size 65536, resolver_threads 2, workers 1, splice {}",
                // On by default with the feature, unless PORTCULLIS_SPLICE=off
                // (CI's second run).
                if portcullis::Limits::default().splice { "on" } else { "off" }
            ),
            "policy: 1 rule (from built-in default), mode enforce",
            "rule \"default-public-web\": allow, hosts [*], cidrs [], ports [80, 443], match either, \
             mode enforce, inspect none (raw tunnel), tls passthrough, idle_timeout default",
        ];
        for line in want_lines {
            assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
        }
        // The session limits are sized to this machine's open-file limit
        // (config/tests/validation.rs checks the sizing); here only that they are shown.
        assert!(
            out.lines().any(|l| l.starts_with("sessions: max_sessions ")
                && l.contains("(defaults sized to an open file limit of ")),
            "{out}"
        );
        assert!(out.contains("\ntls: ca_cert/ca_key none"), "{out}");
        assert!(out.ends_with("\nOK\n"), "{out}");
        assert!(!out.contains("warning:"), "{out}");
    }

    #[test]
    fn flags_show_up_and_secrets_do_not() {
        let out = check(&[
            "--listen",
            "127.0.0.1:0",
            "--protocol",
            "socks5",
            "--auth",
            "agent:hunter2",
            "--idle-timeout",
            "90s",
            "--default",
            "--audit",
            "--inspect",
            "api.test:443",
            "--terminate",
            "secure.test:443",
            "--ca-cert",
            "/etc/ca.pem",
            "--ca-key",
            "/etc/ca.key",
            "--upstream-ca",
            "/etc/up1.pem",
            "--upstream-ca",
            "/etc/up2.pem",
        ]);
        assert!(
            out.contains("listen: 127.0.0.1:0 (protocol socks5)\n"),
            "{out}"
        );
        assert!(
            out.contains("auth: on (user \"agent\"; password not shown)\n"),
            "{out}"
        );
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains(", idle 90s,"), "{out}");
        assert!(
            out.contains("tls: ca_cert /etc/ca.pem, ca_key /etc/ca.key, upstream_ca [/etc/up1.pem, /etc/up2.pem], state_dir "),
            "{out}"
        );
        assert!(
            out.contains("policy: 3 rules (from flags), mode audit\n"),
            "{out}"
        );
        assert!(out.contains("rule \"--terminate secure.test:443\": allow, hosts [secure.test], cidrs [], ports [443], match either, mode enforce, inspect http, tls terminate, upgrades [websocket] (requests audited: policy in audit mode), idle_timeout default\n  requests: none (every request allowed)\n"), "{out}");
        assert!(out.contains("rule \"default-public-web\""), "{out}");
        assert!(
            out.contains("\nwarning: the policy is in audit mode"),
            "{out}"
        );
        assert!(
            out.contains(
                "\nwarning: rule \"--inspect api.test:443\" inspects plaintext HTTP on port 443"
            ),
            "{out}"
        );
        assert!(out.ends_with("\nOK\n"), "{out}");
    }
}
