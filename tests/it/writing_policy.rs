//! Writing policy (issue problem 7), with the binary: configuration
//! mistakes in a file are reported plainly with the line and column of the
//! offending value; `--default` and `default = true` add the built-in
//! default rule; `--check` prints every effective setting; `match = "both"`
//! opens a range only for the names listed; `mode = "audit"` on one rule
//! reports what that rule would refuse and lets it through.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.0.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `portcullis ARGS` (no proxy is started by `--check`).
fn binary(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .output()
        .expect("run portcullis")
}

/// `--check` of `config`: (exit code, stdout, stderr).
fn check(config: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec!["--check", "--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = binary(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const RULE: &str = "[[rules]]\nname = \"r\"\naction = \"allow\"\n";

#[test]
fn config_mistakes_read_plainly_with_line_and_column() {
    let dir = TempDir::new("policy-errors");
    for (body, want) in [
        (
            "cidr = \"10.20.0.0/33\"",
            "rules[0].cidr: line 4, column 8: \"10.20.0.0/33\": prefix length /33 too long",
        ),
        (
            "cidr = \"10.0.0.1/8\"",
            "rules[0].cidr: line 4, column 8: \"10.0.0.1/8\": 10.0.0.1/8 has host bits set: use 10.0.0.0/8",
        ),
        (
            "cidrs = [\"10.0.0.0/8\", \"fd00::1/8\"]",
            "rules[0].cidrs[1]: line 4, column 24: \"fd00::1/8\": fd00::1/8 has host bits set: use fd00::/8",
        ),
        (
            "host = \"https://github.com/owner/repo\"",
            "rules[0].host: line 4, column 8: \"https://github.com/owner/repo\": a rule takes a host, not a URL: give \"github.com\", and the port as port = 443 (or in ports)",
        ),
        (
            "host = \"github.com:443\"",
            "rules[0].host: line 4, column 8: \"github.com:443\": a host has no port: give \"github.com\", and the port as port = 443 (or in ports)",
        ),
        (
            "host = \"x.test\"\nport = 70000",
            "line 5, column 8: port 70000 is out of range (1-65535)",
        ),
        (
            "host = \"x.test\"\nport = \"abc\"",
            "rules[0].port: line 5, column 8: invalid port \"abc\"",
        ),
        (
            "host = \"x.test\"\nports = [443, \"10-5\"]",
            "rules[0].ports[1]: line 5, column 15: invalid port range \"10-5\": 10 > 5",
        ),
        (
            "host = \"x.test\"\n\n[[rules]]\nname = \"r\"\naction = \"deny\"\nhost = \"y.test\"",
            "rules[1].name: line 7, column 8: \"r\" names an earlier rule too: rule names must be unique",
        ),
    ] {
        let cfg = write(&dir, "bad.toml", &format!("{RULE}{body}\n"));
        let (code, out, err) = check(&cfg, &[]);
        assert_eq!(code, Some(2), "{body}: {out}{err}");
        let err = err.trim();
        assert!(
            err.starts_with(&format!("portcullis: {}: ", cfg.display())) && err.contains(want),
            "{body}:\n  got  {err}\n  want {want}"
        );
        for noise in ["untagged", "invalid IPv6", "did not match"] {
            assert!(!err.contains(noise), "{body}: {err}");
        }
    }
    // A Unix listener's group that does not exist: start would fail, so
    // --check does.
    let cfg = write(
        &dir,
        "group.toml",
        "[[listen]]\naddress = \"unix:/tmp/portcullis-test-no.sock\"\ngroup = \"no-such-group-9\"\n",
    );
    let (code, _, err) = check(&cfg, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("listen[0].group: no group named \"no-such-group-9\""),
        "{err}"
    );
    // The same mistakes as flags.
    for (flag, want) in [
        ("https://github.com", "a rule takes a host, not a URL: use github.com:443"),
        ("10.0.0.1/8:443", "10.0.0.1/8 has host bits set: use 10.0.0.0/8"),
        (
            "::1:443",
            "\"::1:443\" is ambiguous: write [::1]:443 for port 443 of ::1, or [::1:443] for that address on every port",
        ),
    ] {
        let out = binary(&["--check", "--allow", flag]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains(want), "{flag}: {err}");
    }
}

#[test]
fn default_adds_the_builtin_rule_after_the_given_ones() {
    let dir = TempDir::new("policy-default");
    let rules = format!("{RULE}host = \"x.test\"\n");
    let plain = write(&dir, "plain.toml", &rules);
    let with = write(&dir, "default.toml", &format!("default = true\n{rules}"));
    let rule_lines = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("rule "))
            .map(|l| l.split(':').next().unwrap().to_owned())
            .collect()
    };
    let (code, out, err) = check(&plain, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rule_lines(&out), ["rule \"r\""], "{out}");
    for (cfg, extra) in [(&plain, &["--default"][..]), (&with, &[][..])] {
        let (code, out, err) = check(cfg, extra);
        assert_eq!(code, Some(0), "{err}");
        assert!(
            out.contains("policy: 2 rules (from file and flags)"),
            "{out}"
        );
        assert_eq!(
            rule_lines(&out),
            ["rule \"r\"", "rule \"default-public-web\""],
            "{out}"
        );
        assert!(
            out.contains(
                "rule \"default-public-web\": allow, hosts [*], cidrs [], ports [80, 443]"
            ),
            "{out}"
        );
    }
    // Flags alone, with and without --default.
    let out = binary(&["--check", "--allow", "x.test:443"]);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("policy: 1 rule (from flags)"), "{out}");
    let out = binary(&["--check", "--allow", "x.test:443", "--default"]);
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("policy: 2 rules (from flags)"), "{out}");
}

#[test]
fn check_prints_every_effective_setting() {
    let dir = TempDir::new("policy-check-all");
    let sock = dir.0.join("p.sock");
    let text = format!(
        r#"
log_format = "json"
upstream_proxy = "http://parent:hunter2@127.0.0.1:3128"

[[listen]]
address = "127.0.0.1:3999"
protocol = "http"

[[listen]]
address = "unix:{}"
mode = "0660"
group = "root"

[admin]
listen = "127.0.0.1:3998"

[timeouts]
handshake = "3s"
connect = "4s"
idle = "5m"
half_close = "20s"
close = "2s"
drain = "6s"
response = "45s"

[limits]
max_head_bytes = 16384
buffer_size = 32768
max_sessions = 500
max_sessions_per_client = 100
max_pending_handshakes = 50
max_pending_handshakes_per_client = 10

[[rules]]
name = "mirror"
action = "allow"
hosts = ["mirror.test"]
cidrs = ["10.20.0.0/16"]
match = "both"
ports = [443, "8000-8100"]
idle_timeout = "90s"
upstream_proxy = "direct"

[[rules]]
name = "api"
action = "allow"
host = "api.test"
port = 80
inspect = "http"
mode = "audit"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", method = "DELETE", path = "/v1/**" }},
]

[[rules]]
name = "trackers"
action = "deny"
host = "*.tracker.test"
mode = "audit"
"#,
        sock.display()
    );
    let cfg = write(&dir, "all.toml", &text);
    let (code, out, err) = check(&cfg, &[]);
    assert_eq!(code, Some(0), "{err}");
    for line in [
        format!("config: {}", cfg.display()),
        "listen: 127.0.0.1:3999 (protocol http)".into(),
        format!("listen: unix:{} (protocol auto)", sock.display()),
        "  socket file: mode 0660, group root (gid 0)".into(),
        "auth: off".into(),
        "admin: 127.0.0.1:3998 (GET /metrics, GET /stats; control off)".into(),
        "log_format: json".into(),
        "upstream_proxy: http://parent:***@127.0.0.1:3128 (rules may say direct)".into(),
        "timeouts: handshake 3s, connect 4s, idle 5m, half_close 20s, close 2s, drain 6s, response 45s".into(),
        "sessions: max_sessions 500, max_sessions_per_client 100, max_pending_handshakes 50, max_pending_handshakes_per_client 10".into(),
        "policy: 3 rules (from file and flags), mode enforce".into(),
        "rule \"mirror\": allow, hosts [mirror.test], cidrs [10.20.0.0/16], ports [443, 8000-8100], match both, mode enforce, inspect none (raw tunnel), tls passthrough, idle_timeout 90s, upstream_proxy direct".into(),
        "rule \"api\": allow, hosts [api.test], cidrs [], ports [80], match either, mode audit, inspect http, tls passthrough, upgrades [websocket], idle_timeout default".into(),
        "  requests[0]: allow * /**".into(),
        "  requests[1]: deny DELETE /v1/**".into(),
        "rule \"trackers\": deny, hosts [*.tracker.test], cidrs [], ports any, match either, mode audit".into(),
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(line.as_str())),
            "missing {line:?} in\n{out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("limits: max_head_bytes 16384, buffer_size 32768, ")),
        "{out}"
    );
    assert!(out.contains("\ntls: ca_cert/ca_key none"), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.ends_with("\nOK\n"), "{out}");
    assert!(!sock.exists(), "--check binds nothing");
}

/// An origin on `addr` that answers each request with its request line.
fn origin_on(addr: &str) -> Server {
    request_line_server_on(addr.parse().unwrap())
}

/// CONNECT `target`: the status.
fn connect_status(proxy: std::net::SocketAddr, target: &str) -> u16 {
    http_connect(proxy, target, &[]).expect("CONNECT").1.status
}

/// `match = "both"`: `mirror.test` is reached only because it resolves
/// into the listed (private) range; the range's address as a literal, by
/// CONNECT or SOCKS5, another name resolving into it, and a listed name
/// resolving outside it are refused. At private addresses in a network
/// namespace, the names from the proxy's own /etc/hosts (support/netns.rs).
#[test]
fn match_both_opens_the_range_only_for_the_names_listed() {
    in_netns(&["10.99.0.1", "10.99.0.2", "10.98.0.1"], || {
        let mirror = origin_on("10.99.0.1:0");
        let port = mirror.port();
        let _other = origin_on(&format!("10.99.0.2:{port}"));
        let _outside = origin_on(&format!("10.98.0.1:{port}"));
        let dir = TempDir::new("policy-match-both");
        let hosts = write(
            &dir,
            "hosts",
            "127.0.0.1 localhost\n10.99.0.1 mirror.test\n10.99.0.2 other.test\n10.98.0.1 evil.test\n",
        );
        let cfg = write(
            &dir,
            "both.toml",
            &format!(
                "[[rules]]\nname = \"mirror\"\naction = \"allow\"\nhosts = [\"mirror.test\", \"evil.test\"]\n\
                 cidrs = [\"10.99.0.0/16\"]\nmatch = \"both\"\nport = {port}\n"
            ),
        );
        let proxy = ChildProxy::with_hosts(&hosts, &["--config", cfg.to_str().unwrap()]);
        let p = proxy.addr;
        for name in ["mirror.test", "MIRROR.test."] {
            let mut s = connect_via_http(p, &format!("{name}:{port}"));
            write!(s, "GET /x HTTP/1.1\r\nHost: mirror.test\r\n\r\n").unwrap();
            let head = read_response_head(&mut s).expect("the origin's answer");
            assert_eq!(head.status, 200, "{name}: {}", head.raw);
        }
        let mut s = connect_via_socks5(p, "mirror.test", port).expect("SOCKS5 by name");
        assert_echo_http(&mut s);
        for target in ["10.99.0.1", "other.test", "10.99.0.2", "evil.test"] {
            let status = connect_status(p, &format!("{target}:{port}"));
            assert_eq!(status, 403, "{target}");
        }
        assert_eq!(
            connect_via_socks5(p, "10.99.0.1", port).err(),
            Some(0x02),
            "SOCKS5 ATYP 1"
        );
        assert_eq!(mirror.accepted(), 3, "only the listed name reached it");
    });
}

/// One request on `s`, answered 200 by the origin.
fn assert_echo_http(s: &mut TcpStream) {
    write!(s, "GET /y HTTP/1.1\r\nHost: mirror.test\r\n\r\n").unwrap();
    let head = read_response_head(s).expect("the origin's answer");
    assert_eq!(head.status, 200, "{}", head.raw);
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
}

/// `mode = "audit"` on single rules, the rest of the policy enforcing: an
/// audit deny rule lets through what an allow rule allows and says
/// would-deny; an audit inspecting rule lets a request it would refuse
/// through, saying so, while an enforcing inspecting rule still refuses;
/// an audit deny with no allow beside it does not open anything.
#[test]
fn audit_mode_on_one_rule_reports_and_lets_through_only_its_own_decisions() {
    let audited = origin_on("127.0.0.1:0");
    let enforced = origin_on("127.0.0.1:0");
    let nothing = origin_on("127.0.0.1:0");
    let (a, e, n) = (audited.port(), enforced.port(), nothing.port());
    let dir = TempDir::new("policy-audit-rule");
    let cfg = write(
        &dir,
        "audit.toml",
        &format!(
            r#"
[[rules]]
name = "audited-api"
action = "allow"
cidr = "127.0.0.1/32"
port = {a}
inspect = "http"
mode = "audit"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", path = "/admin/**" }},
]

[[rules]]
name = "enforced-api"
action = "allow"
cidr = "127.0.0.1/32"
port = {e}
inspect = "http"
requests = [
  {{ action = "allow", path = "/**" }},
  {{ action = "deny", path = "/admin/**" }},
]

[[rules]]
name = "no-enforced"
action = "deny"
cidr = "127.0.0.1/32"
port = {e}
mode = "audit"

[[rules]]
name = "no-nothing"
action = "deny"
cidr = "127.0.0.1/32"
port = {n}
mode = "audit"
"#
        ),
    );
    let proxy = ChildProxy::start(&["--config", cfg.to_str().unwrap()]);
    let p = proxy.addr;
    let admin = |port: u16| {
        let mut s = connect_via_http(p, &format!("127.0.0.1:{port}"));
        write!(s, "GET /admin/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
        read_response_head(&mut s).expect("an answer").status
    };
    // Audited request rules: through, with a would-deny request line.
    assert_eq!(admin(a), 200);
    // Enforced request rules still refuse; the audit deny on that port
    // lets the connection through (an allow rule allows it).
    assert_eq!(admin(e), 403);
    // An audit deny with no allow: still refused (deny by default).
    assert_eq!(connect_status(p, &format!("127.0.0.1:{n}")), 403);
    assert_eq!(nothing.accepted(), 0);
    wait_for("the would-deny lines", PROMPTLY, || {
        let log = proxy.log();
        let request = log.iter().any(|l| {
            l.contains("event=request")
                && l.contains("decision=would-deny")
                && l.contains("/admin/x")
                && l.contains(&format!("127.0.0.1:{a}"))
        });
        let session = log.iter().any(|l| {
            l.contains("event=session")
                && l.contains("decision=would-deny")
                && l.contains("no-enforced")
        });
        request && session
    });
    let log = proxy.log();
    assert!(
        !log.iter().any(|l| l.contains("event=request")
            && l.contains("decision=allow")
            && l.contains("/admin/x")),
        "an admin request logged as allowed: {log:#?}"
    );
}

/// The starter policies in `examples/policies/` are real: each passes
/// `--check` (no error, no warning), and they say what they claim to allow.
#[test]
fn example_policies_pass_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/policies")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in ["agent", "cargo", "npm", "pip"] {
        assert!(
            names.iter().any(|n| n == want),
            "{want}.toml missing: {names:?}"
        );
    }
    // A terminating rule makes --check load the CA as a start would: from a
    // state directory of the test's own, never the user's.
    let state = TempDir::new("example-policies");
    for file in &files {
        let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["--check", "--config", file.to_str().unwrap()])
            .env("XDG_STATE_HOME", state.path())
            .output()
            .expect("run portcullis");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {stderr}{stdout}",
            file.display()
        );
        assert!(stdout.ends_with("OK\n"), "{}: {stdout}", file.display());
        assert!(!stdout.contains("warning:"), "{}: {stdout}", file.display());
        let stem = file.file_stem().unwrap().to_string_lossy();
        let expect: &[&str] = match &*stem {
            "pip" => &["pypi.org", "files.pythonhosted.org", "ports [443]"],
            "npm" => &["registry.npmjs.org"],
            "cargo" => &["crates.io", "index.crates.io", "static.crates.io"],
            "agent" => &[
                "hosts [api.anthropic.com]",
                "hosts [api.openai.com]",
                "tls terminate",
                "github.com",
            ],
            _ => &[],
        };
        for want in expect {
            assert!(stdout.contains(want), "{stem}: no {want:?} in {stdout}");
        }
        if stem == "agent" {
            // Both API hosts terminated, with request rules.
            assert_eq!(stdout.matches("tls terminate").count(), 2, "{stdout}");
            assert!(
                stdout.contains("requests[0]: allow POST /v1/messages"),
                "{stdout}"
            );
        }
    }
}

/// A misspelt flag gets clap's suggestion on the one error line.
#[test]
fn a_misspelt_flag_suggests_the_right_one() {
    let out = binary(&["--alow", "github.com:443"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("a similar argument exists: '--allow'"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// `portcullis completions SHELL` prints a script the shell accepts, naming
/// the flags; `portcullis man` a roff page that renders.
#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let out = binary(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["portcullis", "allow", "terminate", "hash-password"] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
        // Checked by the shell itself where it is installed (bash always is here).
        let syntax = match shell {
            "bash" => Some(("bash", "-n")),
            "zsh" => Some(("zsh", "-n")),
            "fish" => Some(("fish", "--no-execute")),
            _ => None,
        };
        let Some((sh, flag)) = syntax else { continue };
        let mut child = match Command::new(sh)
            .arg(flag)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if shell != "bash" && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{sh}: {e}"),
        };
        child.stdin.take().unwrap().write_all(&out.stdout).unwrap();
        let done = child.wait_with_output().unwrap();
        assert!(
            done.status.success(),
            "{sh} {flag}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    assert_ne!(binary(&["completions", "csh"]).status.code(), Some(0));

    let out = binary(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH portcullis 1"), "{page}");
    for word in [
        "\\-\\-allow",
        "\\-\\-terminate",
        "hash\\-password",
        "completions",
    ] {
        assert!(page.contains(word), "no {word} in the man page");
    }
    // A subcommand's own page, with its own flags; an unknown one is named.
    let out = binary(&["man", "run"]);
    assert_eq!(out.status.code(), Some(0));
    let run = String::from_utf8_lossy(&out.stdout);
    assert!(run.contains(".TH portcullis-run 1"), "{run}");
    assert!(run.contains("\\-\\-no\\-isolate"), "{run}");
    let out = binary(&["man", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("portcullis man run|env"));
    // Rendered by man(1) where it is installed: the same page, as text.
    let dir = TempDir::new("man-page");
    let file = write(&dir, "portcullis.1", &page);
    if let Ok(rendered) = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
    {
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(rendered.status.success(), "{text}");
        assert!(text.contains("NAME"), "{text}");
        assert!(text.contains("sandbox egress proxy"), "{text}");
    }
}

/// Every relative link in the project's Markdown (README, the pages under
/// docs/, ARCHITECTURE, CONTRIBUTING, BENCHMARKS) names a file that exists
/// and, with a `#fragment`, a heading in it (GitHub's anchor spelling).
#[test]
fn docs_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "BENCHMARKS.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text =
            std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for link in markdown_links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if anchor.is_empty() || target.is_dir() {
                continue;
            }
            let body = std::fs::read_to_string(&target).unwrap_or_default();
            if !markdown_anchors(&body).iter().any(|a| a == anchor) {
                broken.push(format!("{}: {link}: no such heading", page.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} relative links found: is the scan broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // The README stays a front page, and keeps the commands CI and users run.
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines: move detail to docs/"
    );
    for command in [
        "cargo run --release\n",
        "scripts/test.sh\n",
        "cargo install --locked --path .",
    ] {
        assert!(readme.contains(command), "README.md lost {command:?}");
    }
}

/// The `](target)` of every inline link outside code (fenced blocks and
/// backtick spans).
fn markdown_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans: `[x](y)` inside backticks is not a link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            links.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    links
}

/// GitHub's anchors for a page's headings: lower case, punctuation other
/// than `-` and `_` dropped, spaces as `-`; a repeated heading gets `-1`...
fn markdown_anchors(text: &str) -> Vec<String> {
    let mut anchors: Vec<String> = Vec::new();
    let mut slugs: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let seen = slugs.iter().filter(|s| **s == slug).count();
        anchors.push(match seen {
            0 => slug.clone(),
            n => format!("{slug}-{n}"),
        });
        slugs.push(slug);
    }
    anchors
}

/// `curl -x PROXY http://TARGET/` (forward proxy): the status curl saw
/// (`000` when it got none).
fn curl_status(proxy: std::net::SocketAddr, target: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .args(["--noproxy", "", "-x", &format!("http://{proxy}")])
        .arg(format!("http://{target}/"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Learn mode: the proxy in audit mode with JSON logs sees four
/// destinations (a name at a private address, one at a documentation
/// address, one at a public address, and a public address literal);
/// `portcullis suggest` turns its log into a policy that `--check`
/// accepts, under which the same four requests pass and a fifth (another
/// name) is refused. At addresses in a network namespace, the names from
/// the proxy's own /etc/hosts (support/netns.rs).
#[test]
fn suggest_turns_an_audit_log_into_a_policy_that_allows_exactly_what_it_saw() {
    in_netns(
        &["10.99.0.1", "203.0.113.80", "45.45.45.45", "45.45.45.46"],
        || {
            let mirror = origin_on("10.99.0.1:0");
            let port = mirror.port();
            let pypi = origin_on(&format!("203.0.113.80:{port}"));
            let public = origin_on(&format!("45.45.45.45:{port}"));
            let other = origin_on(&format!("45.45.45.46:{port}"));
            let dir = TempDir::new("suggest");
            let hosts = write(
                &dir,
                "hosts",
                "127.0.0.1 localhost\n10.99.0.1 mirror.test\n203.0.113.80 pypi.test\n\
                 45.45.45.45 public.test\n45.45.45.46 other.test\n",
            );
            let seen = [
                format!("mirror.test:{port}"),
                format!("pypi.test:{port}"),
                format!("public.test:{port}"),
                format!("45.45.45.45:{port}"),
            ];

            let audit = ChildProxy::with_hosts(&hosts, &["--audit", "--log-format", "json"]);
            for target in &seen {
                assert_eq!(curl_status(audit.addr, target), "200", "audit: {target}");
            }
            let sessions = |p: &ChildProxy| {
                p.log()
                    .into_iter()
                    .filter(|l| l.contains(r#""event":"session""#))
                    .count()
            };
            wait_for("four session events", PROMPTLY, || sessions(&audit) == 4);
            let log = dir.0.join("audit.log");
            let mut text = audit.log().join("\n");
            text.push_str("\nnot a JSON line\n");
            std::fs::write(&log, &text).unwrap();
            drop(audit);

            let out = binary(&["suggest", log.to_str().unwrap()]);
            let policy = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert_eq!(stderr.trim(), "portcullis: ignored 1 line that is not JSON");
            assert!(
                policy.contains("# 4 session events (0 allowed, 0 denied, 4 would-deny), 4 destinations, 3 names, 1 address literals."),
                "{policy}"
            );
            for want in [
                "hosts = [\"mirror.test\"]\ncidrs = [\"10.99.0.1/32\"]".to_string(),
                "hosts = [\"pypi.test\"]\ncidrs = [\"203.0.113.80/32\"]".to_string(),
                format!("hosts = [\"public.test\"]\nports = [{port}]"),
                format!("cidrs = [\"45.45.45.45/32\"]\nports = [{port}]"),
            ] {
                assert!(policy.contains(&want), "{want}: {policy}");
            }
            assert_eq!(policy.matches("match = \"both\"").count(), 2, "{policy}");

            // Standard input reads the same.
            let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
                .arg("suggest")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let piped = child.wait_with_output().unwrap();
            let piped = String::from_utf8_lossy(&piped.stdout);
            assert_eq!(
                piped.split_once("\n\n").unwrap().1,
                policy.split_once("\n\n").unwrap().1
            );

            let cfg = write(&dir, "suggested.toml", &policy);
            let (code, stdout, stderr) = check(&cfg, &[]);
            assert_eq!(code, Some(0), "--check: {stdout}{stderr}");
            assert!(stdout.trim_end().ends_with("OK"), "{stdout}");

            let enforce = ChildProxy::with_hosts(&hosts, &["--config", cfg.to_str().unwrap()]);
            for target in &seen {
                assert_eq!(
                    curl_status(enforce.addr, target),
                    "200",
                    "enforced: {target}"
                );
            }
            assert_eq!(
                curl_status(enforce.addr, &format!("other.test:{port}")),
                "403"
            );
            assert_eq!(
                curl_status(enforce.addr, &format!("10.99.0.1:{port}")),
                "403",
                "the private address stays closed to its literal"
            );
            assert_eq!(mirror.accepted(), 2);
            assert_eq!(pypi.accepted(), 2);
            assert_eq!(public.accepted(), 4, "public.test and the literal, twice");
            assert_eq!(other.accepted(), 0);
        },
    );
}

#[test]
fn suggest_refuses_what_is_not_a_json_log() {
    let dir = TempDir::new("suggest-garbage");
    let text = write(
        &dir,
        "text.log",
        "time=x level=info event=log message=hi\n\u{1}\u{2}\n",
    );
    let out = binary(&["suggest", text.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no JSON log lines: run the proxy with --log-format json"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    let out = binary(&["suggest", "/nonexistent/x.log"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/x.log"));
}

/// `--allow HOST:PORT@CIDR` (issue 18 item 1), with the binary: a name at a
/// documentation address is refused by `--allow NAME:PORT` with the flag
/// that fixes it (in `X-Proxy-Error`, the body and the log line, which
/// names the rule); that flag lets the name through and nothing else: not
/// another name at the same address, not the literal. A wrong port names
/// the rule and its ports; SOCKS5 gets "not allowed" and the log line.
#[test]
fn scoped_allowance_from_the_command_line() {
    in_netns(&["203.0.113.80"], || {
        let origin = origin_on("203.0.113.80:0");
        let port = origin.port();
        let dir = TempDir::new("policy-scoped");
        let hosts = write(
            &dir,
            "hosts",
            "127.0.0.1 localhost\n203.0.113.80 pypi.test\n203.0.113.80 npm.test\n",
        );
        let plain = format!("pypi.test:{port}");
        let proxy = ChildProxy::with_hosts(&hosts, &["--allow", &plain]);
        let (_, head) = http_connect(proxy.addr, &plain, &[]).expect("CONNECT");
        let fix = format!("--allow pypi.test:{port}@203.0.113.80/32");
        assert_eq!(head.status, 403, "{}", head.raw);
        let cause = head.header("x-proxy-error").unwrap_or_default();
        assert_eq!(
            cause,
            format!("denied; documentation-address=203.0.113.80; rule=--allow {plain}; fix={fix}")
        );
        let line = proxy.wait_for_line("the refusal", |l| {
            l.contains("event=session") && l.contains("decision=deny")
        });
        assert!(
            line.contains(&format!("rule=\"--allow {plain}\"")),
            "{line}"
        );
        assert!(line.contains(&fix), "{line}");
        assert_eq!(
            connect_via_socks5(proxy.addr, "pypi.test", port).err(),
            Some(0x02),
            "SOCKS5: not allowed by ruleset"
        );
        proxy.wait_for_line("the SOCKS5 refusal", |l| {
            l.contains("event=session") && l.contains("protocol=socks5") && l.contains(&fix)
        });
        drop(proxy);

        let scoped = format!("{plain}@203.0.113.80/32");
        let proxy = ChildProxy::with_hosts(&hosts, &["--allow", &scoped]);
        let mut s = connect_via_http(proxy.addr, &plain);
        assert_echo_http(&mut s);
        let mut s = connect_via_socks5(proxy.addr, "pypi.test", port).expect("SOCKS5 by name");
        assert_echo_http(&mut s);
        for other in ["npm.test", "203.0.113.80"] {
            let status = connect_status(proxy.addr, &format!("{other}:{port}"));
            assert_eq!(status, 403, "{other} gains nothing");
        }
        let wrong = port.wrapping_add(1).max(1);
        let (_, head) = http_connect(proxy.addr, &format!("pypi.test:{wrong}"), &[]).unwrap();
        assert_eq!(
            head.header("x-proxy-error").unwrap_or_default(),
            format!("denied; port-not-in-rule=--allow {scoped}; ports={port}; fix=--allow pypi.test:{wrong}@203.0.113.80/32")
        );
        assert_eq!(origin.accepted(), 2, "only pypi.test reached it");
        drop(proxy);

        // Audit mode: one line carries every reason it would be refused for.
        let deny = format!("{plain}@203.0.113.0/24");
        let proxy =
            ChildProxy::with_hosts(&hosts, &["--audit", "--allow", &plain, "--deny", &deny]);
        let mut s = connect_via_http(proxy.addr, &plain);
        assert_echo_http(&mut s);
        drop(s); // the session line comes at close
        let line = proxy.wait_for_line("the would-deny", |l| {
            l.contains("event=session") && l.contains("decision=would-deny")
        });
        assert!(
            line.contains(&format!(
                "denied by rule --deny {deny} | 203.0.113.80 is a documentation address"
            )),
            "{line}"
        );
        assert!(line.contains(&fix), "{line}");
    });
}

/// `--srt-settings` (issue 18 item 6), with curl: a name in srt's
/// allowedDomains resolving to a documentation address passes (as in srt),
/// one resolving to loopback is refused, and a deniedDomainReasons text
/// reaches curl in the 403's `X-Proxy-Error` and body; a key that cannot be
/// honoured is named in a warning at start; `--check` lists the rules.
#[test]
fn srt_settings_drop_in_with_curl() {
    in_netns(&[], || {
        let origin = across_veth("198.51.100.1/24", "198.51.100.80/24", || {
            origin_on("198.51.100.80:0")
        });
        let port = origin.port();
        let local = origin_on(&format!("127.0.0.1:{port}"));
        let dir = TempDir::new("policy-srt");
        let hosts = write(
            &dir,
            "hosts",
            "127.0.0.1 localhost\n198.51.100.80 pypi.test\n198.51.100.80 bad.test\n\
             127.0.0.1 loop.test\n198.51.100.80 other.test\n",
        );
        let settings = write(
            &dir,
            "srt-settings.json",
            r#"{"network": {
                "allowedDomains": ["pypi.test", "loop.test", "bad.test"],
                "deniedDomains": ["bad.test"],
                "deniedDomainReasons": {"bad.test": "bad.test is blocked here: use pypi.test"},
                "allowLocalBinding": true
            }}"#,
        );
        let s = settings.to_str().unwrap();
        let out = binary(&["--check", "--srt-settings", s]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("rule \"srt deniedDomains bad.test\": deny, hosts [bad.test]"),
            "{text}"
        );
        assert!(
            text.contains("reason \"bad.test is blocked here: use pypi.test\""),
            "{text}"
        );
        assert!(
            text.contains("warning: ")
                && text.contains("network.allowLocalBinding is not honoured"),
            "{text}"
        );

        // The file's srt_settings, relative to the file, is the same.
        let cfg = write(&dir, "p.toml", "srt_settings = \"srt-settings.json\"\n");
        let (code, from_file, err) = check(&cfg, &[]);
        assert_eq!(code, Some(0), "{err}");
        let rules = |t: &str| t.lines().filter(|l| l.starts_with("rule ")).count();
        assert_eq!(rules(&from_file), rules(&text), "{from_file}");
        assert!(
            from_file.contains("rule \"srt deniedDomains bad.test\""),
            "{from_file}"
        );
        // A setting srt itself refuses is an error naming the entry.
        let bad = write(
            &dir,
            "bad.json",
            r#"{"network": {"allowedDomains": ["*"]}}"#,
        );
        let out = binary(&["--check", "--srt-settings", bad.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("allowedDomains[0]: \"*\": '*' is too broad"),
            "{err}"
        );

        let proxy = ChildProxy::with_hosts(&hosts, &["--srt-settings", s]);
        proxy.wait_for_line("the warning", |l| {
            l.contains("level=warn") && l.contains("network.allowLocalBinding is not honoured")
        });
        let via = format!("http://{}", proxy.addr);
        let get = |host: &str| {
            let out = curl(&["-sS", "-i", "-x", &via, &format!("http://{host}:{port}/x")]);
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let ok = get("pypi.test");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        let refused = get("loop.test");
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        assert!(refused.contains("loopback-address=127.0.0.1"), "{refused}");
        let denied = get("bad.test");
        assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
        assert!(
            denied.contains("X-Proxy-Error: denied; rule=srt deniedDomains bad.test; reason=bad.test is blocked here: use pypi.test"),
            "{denied}"
        );
        assert!(denied.ends_with("denied by rule srt deniedDomains bad.test: bad.test is blocked here: use pypi.test\n"), "{denied}");
        assert_eq!(
            get("other.test").lines().next(),
            Some("HTTP/1.1 403 Forbidden")
        );
        assert_eq!(origin.accepted(), 1, "pypi.test alone reached the origin");
        assert_eq!(local.accepted(), 0, "nothing reached loopback");
    });
}

#[test]
fn check_warns_about_secrets_no_rule_inspects_and_never_prints_a_value() {
    let dir = TempDir::new("policy-secrets");
    std::fs::write(dir.path().join("key"), "s3cr3t-v4lue-in-a-file\n").unwrap();
    let text = format!(
        "[tls]\nstate_dir = \"{}\"\n\n\
         [[rules]]\nname = \"api\"\naction = \"allow\"\nhost = \"api.test\"\nport = 443\ntls = \"terminate\"\n\n\
         [[rules]]\nname = \"raw\"\naction = \"allow\"\nhost = \"raw.test\"\nport = 443\n\n\
         [[secrets]]\nname = \"KEY\"\nfile = \"key\"\nhosts = [\"api.test\", \"raw.test\"]\n\n\
         [[secrets]]\nname = \"FINE\"\nfile = \"key\"\nhosts = [\"api.test\"]\n\n\
         [[rules]]\nname = \"plain\"\naction = \"allow\"\nhost = \"plain.test\"\nport = 80\ninspect = \"http\"\n\n\
         [[secrets]]\nname = \"PLAIN\"\nfile = \"key\"\nhosts = [\"plain.test\"]\n\n\
         [[secrets]]\nname = \"PLAIN_OK\"\nfile = \"key\"\nhosts = [\"plain.test\"]\nplaintext = true\n",
        dir.path().join("state").display()
    );
    let cfg = write(&dir, "secrets.toml", &text);
    let (code, out, err) = check(&cfg, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("secret \"KEY\": no rule inspects or terminates TLS for raw.test:")
            && all.contains("tls = \"terminate\""),
        "{all}"
    );
    assert!(
        !all.contains("\"FINE\""),
        "FINE's hosts are all terminated: {all}"
    );
    // Inspected plaintext only: never sent there without plaintext = true.
    assert!(
        all.contains("secret \"PLAIN\": no rule inspects or terminates TLS for plain.test:")
            && !all.contains("\"PLAIN_OK\""),
        "{all}"
    );
    assert!(
        out.contains("secret: KEY (file; value not shown) to api.test, raw.test; CMD gets portcullis-secret-KEY-"),
        "{out}"
    );
    assert!(
        !all.contains("s3cr3t"),
        "a value in --check's output: {all}"
    );

    // Mistakes name their key, and never quote the value.
    for (table, want) in [
        (
            "name = \"KEY\"\nfile = \"missing\"\nhosts = [\"api.test\"]",
            ("secrets[0].file:", "cannot read"),
        ),
        (
            "name = \"KEY\"\nenv = \"PORTCULLIS_TEST_UNSET_VAR\"\nhosts = [\"api.test\"]",
            ("secrets[0].env:", "PORTCULLIS_TEST_UNSET_VAR is not set"),
        ),
        (
            "name = \"KEY\"\nfile = \"key\"\nhosts = [\"https://api.test\"]",
            ("secrets[0].hosts[0]", "a rule takes a host, not a URL"),
        ),
        (
            "name = \"KEY-1\"\nfile = \"key\"\nhosts = [\"api.test\"]",
            ("secrets[0].name", "letters, digits and '_'"),
        ),
    ] {
        let cfg = write(&dir, "bad.toml", &format!("[[secrets]]\n{table}\n"));
        let (code, out, err) = check(&cfg, &[]);
        assert_eq!(code, Some(2), "{table}: {out}{err}");
        assert!(
            err.contains(want.0) && err.contains(want.1),
            "{table}: {err}"
        );
        assert!(!err.contains("s3cr3t"), "{err}");
    }
}
