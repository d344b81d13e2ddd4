//! Unit tests for the flags: parsing, and how they fold into a configuration.

use super::*;
use clap::CommandFactory;

fn parse(args: &[&str]) -> Result<Args, clap::Error> {
    Args::try_parse_from(std::iter::once("portcullis").chain(args.iter().copied()))
}

#[test]
fn help_is_consistent() {
    Args::command().debug_assert();
}

#[test]
fn no_arguments_means_builtin_policy() {
    let a = parse(&[]).unwrap();
    assert!(a.uses_builtin_policy());
    assert!(!a.check);
}

#[test]
fn flags_parse() {
    let a = parse(&[
        "--listen",
        "127.0.0.1:0",
        "-l",
        "unix:/tmp/p.sock",
        "--protocol",
        "socks5",
        "--auth",
        "user:pa:ss",
        "--handshake-timeout",
        "3s",
        "--connect-timeout",
        "250ms",
        "--idle-timeout",
        "off",
        "--close-timeout",
        "1m",
        "--check",
    ])
    .unwrap();
    assert_eq!(a.listen.len(), 2);
    assert_eq!(a.listen[1], ListenAddr::Unix("/tmp/p.sock".into()));
    assert_eq!(a.protocol, Some(ProtocolArg::Socks5));
    let auth = a.auth.clone().unwrap();
    assert_eq!(
        (auth.username.as_str(), auth.password.as_str()),
        ("user", "pa:ss")
    );
    assert_eq!(a.handshake_timeout, Some(Duration::from_secs(3)));
    assert_eq!(a.connect_timeout, Some(Duration::from_millis(250)));
    assert_eq!(a.idle_timeout, Some(IdleTimeout(None)));
    assert_eq!(a.close_timeout, Some(Duration::from_secs(60)));
    assert!(a.check);
    assert!(a.uses_builtin_policy());
}

#[test]
fn bad_flags_are_rejected_on_one_line() {
    for bad in [
        &["--listen", "nowhere"][..],
        &["--protocol", "http"],
        &["--listen", "127.0.0.1:1", "--protocol", "socks4"],
        &["--auth", "nopassword"],
        &["--connect-timeout", "off"],
        &["--idle-timeout", "soon"],
        &["--inspect", ""],
        &["--inspect", "example.com:0"],
        &["--bogus"],
    ] {
        let e = parse(bad).expect_err("should fail");
        let line = one_line(&e);
        assert!(
            !line.contains('\n') && !line.is_empty(),
            "{bad:?}: {line:?}"
        );
        assert!(!line.starts_with("error:"), "{line}");
        assert_eq!(e.exit_code(), 2, "{bad:?}");
    }
}

#[test]
fn a_misspelt_flag_keeps_clap_s_suggestion() {
    let line = one_line(&parse(&["--alow", "x"]).expect_err("should fail"));
    assert!(
        line.starts_with("unexpected argument '--alow' found"),
        "{line}"
    );
    assert!(
        line.contains("tip: a similar argument exists: '--allow'"),
        "{line}"
    );
    assert!(!line.contains('\n'), "{line}");
}

#[test]
fn flags_override_the_file_timeouts_listeners_and_auth() {
    let a = parse(&[
        "--listen",
        "127.0.0.1:0",
        "--protocol",
        "http",
        "--idle-timeout",
        "30s",
        "--auth",
        "a:b",
    ])
    .unwrap();
    // The built-in policy path: needs Policy::builtin_default (policy branch).
    let s = a.load().unwrap();
    assert!(s.rules.is_none());
    assert_eq!(
        s.config.listeners,
        vec![ListenerConfig::new(
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenerProtocol::Http,
        )]
    );
    assert_eq!(s.config.timeouts.idle, Some(Duration::from_secs(30)));
    assert_eq!(s.config.auth.unwrap().username, "a");
}

#[test]
fn rule_flags_replace_the_builtin_policy() {
    // Needs parse_cli_rule and Policy::from_rules (policy branch).
    let a = parse(&["--allow", "example.com:443", "--deny", "10.0.0.0/8"]).unwrap();
    assert!(!a.uses_builtin_policy());
    let s = a.load().unwrap();
    assert_eq!(s.rules.map(|r| r.len()), Some(2));
}

#[test]
fn a_rule_flag_given_twice_is_one_rule() {
    let a = parse(&["--allow", "example.com:443", "--allow", "example.com:443"]).unwrap();
    let s = a.load().unwrap();
    assert_eq!(s.rules, Some(vec!["--allow example.com:443".to_string()]));
    // Two flags that differ stay two rules.
    let a = parse(&["--allow", "example.com:443", "--inspect", "example.com:443"]).unwrap();
    assert_eq!(a.load().unwrap().rules.map(|r| r.len()), Some(2));
}

#[test]
fn inspect_flags_are_rule_flags() {
    let a = parse(&["--inspect", "api.example.com:8080", "--inspect", "10.1.2.3"]).unwrap();
    assert!(!a.uses_builtin_policy());
    assert_eq!(a.inspect.len(), 2);
    let r = &a.inspect[0];
    assert_eq!(r.name.as_deref(), Some("--inspect api.example.com:8080"));
    assert_eq!(r.action, Action::Allow);
    assert_eq!(r.inspect.as_deref(), Some("http"));
    assert!(r.requests.is_empty());
    let s = a.load().unwrap();
    assert_eq!(
        s.rules,
        Some(vec![
            "--inspect api.example.com:8080".to_string(),
            "--inspect 10.1.2.3".to_string()
        ])
    );
}

#[test]
fn inspect_rules_follow_allow_and_deny() {
    let a = parse(&[
        "--inspect",
        "a.example:80",
        "--deny",
        "b.example",
        "--allow",
        "c.example",
    ])
    .unwrap();
    let names = a.load().unwrap().rules.unwrap();
    assert_eq!(
        names,
        [
            "--allow c.example",
            "--deny b.example",
            "--inspect a.example:80"
        ]
    );
}

#[test]
fn default_adds_the_builtin_rule_to_the_given_ones() {
    let a = parse(&["--default", "--deny", "*.tracker.test"]).unwrap();
    assert!(!a.uses_builtin_policy());
    let s = a.load().unwrap();
    assert_eq!(
        s.rules,
        Some(vec![
            "--deny *.tracker.test".to_string(),
            "default-public-web".to_string()
        ])
    );
    assert_eq!(s.config.policy.len(), 2);
    // Alone, it is the built-in default.
    let a = parse(&["--default"]).unwrap();
    assert!(a.uses_builtin_policy());
    assert_eq!(a.load().unwrap().rules, None);
    // Without it, rule flags replace the default.
    let s = parse(&["--deny", "*.tracker.test"])
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(s.config.policy.len(), 1);
}

#[test]
fn audit_flag_sets_the_policy_mode() {
    for args in [&["--audit"][..], &["--audit", "--allow", "a.test"]] {
        let s = parse(args).unwrap().load().unwrap();
        assert!(s.config.policy.is_audit(), "{args:?}");
    }
    assert!(!parse(&[]).unwrap().load().unwrap().config.policy.is_audit());
}

#[test]
fn terminate_and_tls_flags() {
    let a = parse(&[
        "--terminate",
        "api.test:443",
        "--ca-cert",
        "ca.pem",
        "--ca-key",
        "ca.key",
        "--upstream-ca",
        "a.pem",
        "--upstream-ca",
        "b.pem",
        "--ktls",
    ])
    .unwrap();
    assert!(!a.uses_builtin_policy());
    assert_eq!(
        a.terminate[0].name.as_deref(),
        Some("--terminate api.test:443")
    );
    let s = a.load().unwrap();
    assert_eq!(s.config.policy.inspected_names(), ["api.test"]);
    let tls = &s.config.tls;
    assert_eq!(tls.ca_cert.as_deref(), Some(std::path::Path::new("ca.pem")));
    assert_eq!(tls.ca_key.as_deref(), Some(std::path::Path::new("ca.key")));
    assert_eq!(tls.upstream_ca.len(), 2);
    assert!(tls.ktls);
    assert!(!parse(&[]).unwrap().load().unwrap().config.tls.ktls);
    // Both or neither.
    let e = parse(&["--ca-cert", "ca.pem"])
        .unwrap()
        .load()
        .err()
        .expect("invalid");
    assert_eq!(e.key_name(), Some("tls.ca_cert"));
}

#[test]
fn workers_flag_overrides_the_file() {
    assert_eq!(parse(&[]).unwrap().load().unwrap().config.limits.workers, 1);
    let s = parse(&["--workers", "2"]).unwrap().load().unwrap();
    assert_eq!(s.config.limits.workers, 2);
    let s = parse(&["--workers", "auto"]).unwrap().load().unwrap();
    assert_eq!(
        s.config.limits.workers,
        portcullis::config::available_workers()
    );
    for bad in ["0", "x", "-2"] {
        assert!(parse(&["--workers", bad]).is_err(), "{bad}");
    }
}

#[test]
fn admin_log_format_and_control_flags() {
    let a = parse(&[
        "--admin",
        "127.0.0.1:0",
        "--admin-control",
        "--log-format",
        "json",
        "--control-fd",
        "3",
    ])
    .unwrap();
    assert_eq!(a.log_format, Some(LogFormat::Json));
    assert_eq!(a.control_fd, Some(3));
    let s = a.load().unwrap();
    let admin = s.config.admin.unwrap();
    assert_eq!(
        admin.listen,
        ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())
    );
    assert!(admin.control);
    assert_eq!(s.config.log_format, LogFormat::Json);
    let e = parse(&["--admin-control"])
        .unwrap()
        .load()
        .err()
        .expect("needs --admin");
    assert_eq!(e.key_name(), Some("admin.control"));
    assert!(parse(&["--log-format", "xml"]).is_err());
    assert!(parse(&["--admin", "nowhere"]).is_err());
    assert_eq!(parse(&[]).unwrap().load().unwrap().config.admin, None);
}

#[test]
fn auth_env_and_auth_file_replace_the_files_auth() {
    std::env::set_var("PORTCULLIS_ARGS_TEST_AUTH", "agent:pa:ss");
    let s = parse(&["--auth-env", "PORTCULLIS_ARGS_TEST_AUTH"])
        .unwrap()
        .load()
        .unwrap();
    let auth = s.config.auth.unwrap();
    assert_eq!(
        (auth.username.as_str(), auth.password.as_str()),
        ("agent", "pa:ss")
    );
    assert!(parse(&["--auth", "a:b", "--auth-env", "X"]).is_err());
    let e = parse(&["--auth-env", "PORTCULLIS_ARGS_TEST_UNSET"])
        .unwrap()
        .load()
        .err()
        .expect("unset");
    assert!(e.to_string().contains("PORTCULLIS_ARGS_TEST_UNSET"), "{e}");

    let dir = std::env::temp_dir().join(format!("portcullis-args-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("users.txt");
    let hash = portcullis::auth::hash_password_with(b"pw", 64, 1, 1).unwrap();
    std::fs::write(&file, format!("# users\nalice:{hash}\n")).unwrap();
    let s = parse(&["--auth-file", file.to_str().unwrap(), "--auth", "agent:x"])
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(s.config.user_names(), ["agent", "alice"]);
    std::fs::write(&file, "alice:plaintext\n").unwrap();
    let e = parse(&["--auth-file", file.to_str().unwrap()])
        .unwrap()
        .load()
        .err()
        .expect("not a hash");
    assert!(
        e.to_string()
            .contains("line 1: user \"alice\": not an argon2"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rule_flag_mistakes_read_plainly() {
    for (args, want) in [
        (
            &["--allow", "https://github.com"][..],
            "rule \"--allow https://github.com\": a rule takes a host, not a URL: use github.com:443",
        ),
        (
            &["--inspect", "http://api.test/v1"],
            "a rule takes a host, not a URL: use api.test:80",
        ),
        (&["--deny", "example.com:70000"], "port 70000 is out of range (1-65535)"),
        (&["--allow", "10.0.0.1/8"], "use 10.0.0.0/8"),
        (&["--terminate", "[::1]:99999"], "port 99999 is out of range (1-65535)"),
    ] {
        let line = one_line(&parse(args).expect_err("should fail"));
        assert!(line.contains(want), "{args:?}: {line}");
        assert!(!line.contains('\n'), "{line}");
    }
}
