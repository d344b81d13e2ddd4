//! Log lines of a real run of the binary, in both formats: CONNECT allowed
//! and denied, SOCKS5, the forward proxy, inspected requests allowed,
//! denied and refused, and hostile input (quotes, `=`, escapes, a bad
//! host). JSON: every line parses with python's `json` module and carries
//! the fields. Text: every line parses with a strict logfmt parser.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::*;

/// The traffic both runs send, against an echo server and an origin.
struct Traffic {
    echo: Server,
    origin: Origin,
    dir: TempDir,
}

impl Traffic {
    fn new() -> Traffic {
        Traffic {
            echo: echo_server(),
            origin: Origin::echo_target(),
            dir: TempDir::new("logs"),
        }
    }

    /// A config file: the echo server allowed raw, the origin inspected
    /// (`GET /ok/**` allowed, `/no/**` denied).
    fn config(&self, extra: &str) -> String {
        let path = self.dir.path().join("p.toml");
        let text = format!(
            r#"{extra}
[[rules]]
name = "echo"
action = "allow"
cidr = "127.0.0.1/32"
port = {echo}

[[rules]]
name = "api"
action = "allow"
host = "127.0.0.1"
port = {origin}
inspect = "http"
requests = [
  {{ action = "allow", method = "GET", path = "/ok/**" }},
  {{ action = "deny", path = "/no/**" }},
]
"#,
            echo = self.echo.port(),
            origin = self.origin.port()
        );
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Sends everything; returns how many sessions it made.
    fn send(&self, proxy: &ChildProxy) -> usize {
        // CONNECT, allowed: one echo.
        let mut s = connect_via_http(proxy.addr, &self.echo.target());
        assert_echo(&mut s, b"hello");
        drop(s);
        // CONNECT, denied (no rule for port 1).
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        s.write_all(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
            .unwrap();
        let head = read_response_head(&mut s).unwrap();
        assert_eq!(head.status, 403);
        drop(s);
        // A hostile target: quotes, `=`, a space, a backslash.
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        s.write_all(b"CONNECT ev\"il\\x=1:443 HTTP/1.1\r\n\r\n")
            .unwrap();
        let head = read_response_head(&mut s).unwrap();
        assert_eq!(head.status, 400);
        drop(s);
        // SOCKS5 to the echo server.
        let mut s = connect_via_socks5(proxy.addr, "127.0.0.1", self.echo.port()).unwrap();
        assert_echo(&mut s, b"socks");
        drop(s);
        // The forward proxy: one allowed request.
        let mut c = HttpConn::new(TcpStream::connect(proxy.addr).unwrap());
        c.send(format!(
            "GET http://{}/ok/fwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            self.origin.target()
        ));
        assert_eq!(c.response("GET").status, 200);
        drop(c);
        // An inspected tunnel: allowed and denied on one connection.
        let mut c = HttpConn::new(connect_via_http(proxy.addr, &self.origin.target()));
        let host = self.origin.target();
        assert_eq!(c.get(&host, "/ok/a").status, 200);
        assert_eq!(c.get(&host, "/no/b").status, 403);
        drop(c);
        // Hostile paths, each in a tunnel of its own (a refusal ends one).
        for path in ["/ok/q\"u=o%5Ct%0A", "/ok/%E2%80%A8\"x=1"] {
            let mut c = HttpConn::new(connect_via_http(proxy.addr, &self.origin.target()));
            c.send(format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            ));
            let _ = c.read_response("GET");
        }
        8
    }
}

/// Waits until `n` session lines are logged; returns every line.
fn lines_after(proxy: &ChildProxy, n: usize) -> Vec<String> {
    wait_for(&format!("{n} session lines"), PROMPTLY, || {
        proxy
            .log()
            .iter()
            .filter(|l| l.contains("\"event\":\"session\"") || l.contains(" event=session "))
            .count()
            >= n
    });
    proxy.log()
}

/// Checks every line with python's json module; returns the objects.
fn python_checks(lines: &[String]) -> Vec<Value> {
    let script = r#"
import json, re, sys
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
need = {
    "session": ["conn", "protocol", "client", "decision", "bytes_up", "bytes_down", "duration_ms", "close"],
    "request": ["conn", "protocol", "client", "target", "decision"],
    "log": ["level", "message"],
}
out = []
for n, line in enumerate(sys.stdin, 1):
    obj = json.loads(line)
    assert isinstance(obj, dict), (n, line)
    assert TIME.match(obj["time"]), (n, obj)
    assert obj["level"] in ("error", "warn", "info", "debug", "trace"), (n, obj)
    ev = obj["event"]
    keys = need[ev] if ev != "session" or "decision" in obj else [k for k in need[ev] if k not in ("decision", "protocol")]
    for k in keys:
        assert k in obj, (n, k, obj)
    out.append(obj)
print(json.dumps(out))
"#;
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = python_filter(
        script,
        &input,
        "python3 (CI installs it)",
        "python rejected a line",
    );
    serde_json::from_str(&out).unwrap()
}

fn events<'a>(objs: &'a [Value], event: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["event"] == event).collect()
}

#[test]
fn json_lines_parse_and_carry_the_fields() {
    let t = Traffic::new();
    let config = t.config("log_format = \"json\"");
    let proxy = ChildProxy::start(&["--config", &config]);
    let n = t.send(&proxy);
    let lines = lines_after(&proxy, n);
    let objs = python_checks(&lines);
    assert_eq!(objs.len(), lines.len());
    assert!(
        objs.iter()
            .any(|o| o["event"] == "log"
                && o["message"].as_str().unwrap().starts_with("listening on ")),
        "plain lines are JSON too"
    );

    let sessions = events(&objs, "session");
    assert_eq!(sessions.len(), n, "{sessions:#?}");
    let by = |protocol: &str, decision: &str| {
        sessions
            .iter()
            .filter(|s| s["protocol"] == protocol && s["decision"] == decision)
            .count()
    };
    // CONNECT to echo + three inspected tunnels; forward; SOCKS5; the denial.
    assert_eq!(by("connect", "allow"), 4, "{sessions:#?}");
    assert_eq!(by("forward", "allow"), 1, "{sessions:#?}");
    assert_eq!(by("socks5", "allow"), 1, "{sessions:#?}");
    let denied: Vec<_> = sessions
        .iter()
        .filter(|s| s["decision"] == "deny")
        .collect();
    assert_eq!(denied.len(), 1);
    // Echo's host on another port: the refusal names the rule and the fix.
    let echo_port = t.echo.port();
    assert_eq!(
        denied[0]["reason"],
        format!(
            "port 1 is not among the ports of rule \"echo\" ({echo_port}), which matches \
             127.0.0.1: use --allow 127.0.0.1:1, or add 1 to that rule's ports"
        )
    );
    assert_eq!(denied[0]["rule"], "echo");
    assert_eq!(denied[0]["close"], "denied");
    assert_eq!(denied[0]["target"], "127.0.0.1:1");
    let echo = sessions.iter().find(|s| s["protocol"] == "socks5").unwrap();
    assert_eq!(echo["rule"], "echo");
    assert_eq!(echo["dialled"], "127.0.0.1");
    assert_eq!(
        (echo["bytes_up"].as_u64(), echo["bytes_down"].as_u64()),
        (Some(5), Some(5))
    );
    let bad = sessions
        .iter()
        .find(|s| s.get("decision").is_none())
        .expect("the bad host");
    assert_eq!(bad["close"], "bad-request");
    assert!(
        bad["reason"]
            .as_str()
            .unwrap()
            .contains("invalid target host"),
        "{bad}"
    );

    let requests = events(&objs, "request");
    let summary: Vec<(String, String, String)> = requests
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap().to_string(),
                r["path"].as_str().unwrap_or("-").to_string(),
                r["rule"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    let expect = |d: &str, path: &str, rule: &str| {
        assert!(
            summary.contains(&(d.into(), path.into(), rule.into())),
            "no {d} {path} {rule} in {summary:#?}"
        )
    };
    expect("allow", "/ok/fwd", "api requests[0]");
    expect("allow", "/ok/a", "api requests[0]");
    expect("deny", "/no/b", "api requests[1]");
    let denied = requests.iter().find(|r| r["path"] == "/no/b").unwrap();
    assert_eq!(denied["status"], 403);
    assert_eq!(denied["method"], "GET");
    assert!(denied["reason"]
        .as_str()
        .unwrap()
        .contains("denied by api requests[1]"));
    let refused: Vec<_> = requests.iter().filter(|r| r["status"] == 400).collect();
    assert!(
        !refused.is_empty(),
        "the hostile path is refused: {summary:#?}"
    );
    assert!(refused
        .iter()
        .all(|r| r["decision"] == "deny" && r["reason"].is_string()));
    let forward = requests.iter().find(|r| r["path"] == "/ok/fwd").unwrap();
    assert_eq!(forward["protocol"], "forward");
    assert_eq!(forward["target"], t.origin.target());
}

/// A strict logfmt parser: `key=value` pairs separated by one space; a key
/// is `[A-Za-z0-9_.:-]+`; a value is bare (printable ASCII, no space, `=`,
/// `"` or `\`) or quoted with `\"`, `\\`, `\n`, `\r`, `\t` and `\uXXXX`
/// escapes. Duplicate keys are errors.
fn logfmt(line: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            if !(c.is_ascii_alphanumeric() || "_.:-".contains(c)) {
                return Err(format!("bad key character {c:?} in {line:?}"));
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() || chars.next() != Some('=') {
            return Err(format!("expected key= in {line:?}"));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quote in {line:?}")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('"') => value.push('"'),
                        Some('\\') => value.push('\\'),
                        Some('n') => value.push('\n'),
                        Some('r') => value.push('\r'),
                        Some('t') => value.push('\t'),
                        Some('u') => {
                            let hex: String = (0..4).filter_map(|_| chars.next()).collect();
                            let n = u32::from_str_radix(&hex, 16)
                                .map_err(|_| format!("bad \\u{hex} in {line:?}"))?;
                            value.push(char::from_u32(n).ok_or("bad code point")?);
                        }
                        other => return Err(format!("bad escape {other:?} in {line:?}")),
                    },
                    Some(c) if c.is_control() => {
                        return Err(format!("raw control {c:?} in {line:?}"))
                    }
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                if !c.is_ascii_graphic() || c == '=' || c == '"' || c == '\\' {
                    return Err(format!("bad bare value character {c:?} in {line:?}"));
                }
                value.push(c);
                chars.next();
            }
            if value.is_empty() {
                return Err(format!("empty bare value for {key} in {line:?}"));
            }
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(format!("duplicate key {key} in {line:?}"));
        }
        match chars.next() {
            None => return Ok(out),
            Some(' ') => {}
            Some(c) => return Err(format!("expected a space, got {c:?} in {line:?}")),
        }
    }
}

#[test]
fn logfmt_parser_is_strict() {
    let ok = logfmt(r#"a=1 b="x \"y\" z\n" c=-"#).unwrap();
    assert_eq!(ok["b"], "x \"y\" z\n");
    for bad in [
        "a=1  b=2",
        "a=1 b",
        "a=\"open",
        "a=x\"y",
        "a= b=1",
        "a=1 a=2",
        "k y=1",
        "a=\"\\q\"",
    ] {
        assert!(logfmt(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn text_lines_parse_as_logfmt_with_the_same_fields() {
    let t = Traffic::new();
    // The flag beats the file's log_format.
    let config = t.config("log_format = \"json\"");
    let proxy = ChildProxy::start(&["--config", &config, "--log-format", "text"]);
    let n = t.send(&proxy);
    let lines = lines_after(&proxy, n);
    let parsed: Vec<_> = lines
        .iter()
        .map(|l| logfmt(l).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for p in &parsed {
        assert!(p["time"].ends_with('Z') && p["time"].len() == 24, "{p:?}");
        assert!(p.contains_key("level") && p.contains_key("event"), "{p:?}");
    }
    let sessions: Vec<_> = parsed.iter().filter(|p| p["event"] == "session").collect();
    assert_eq!(sessions.len(), n);
    for s in &sessions {
        for key in [
            "conn",
            "client",
            "bytes_up",
            "bytes_down",
            "duration_ms",
            "close",
        ] {
            assert!(s.contains_key(key), "{key} missing: {s:?}");
        }
    }
    let bad = sessions
        .iter()
        .find(|s| s["close"] == "bad-request")
        .unwrap();
    assert!(bad["reason"].contains("invalid target host"), "{bad:?}");
    let requests: Vec<_> = parsed.iter().filter(|p| p["event"] == "request").collect();
    assert!(requests
        .iter()
        .any(|r| r["decision"] == "deny" && r["path"] == "/no/b"));
    assert!(requests
        .iter()
        .any(|r| r["decision"] == "allow" && r["path"] == "/ok/a"));
    assert!(requests
        .iter()
        .any(|r| r.get("status").map(String::as_str) == Some("400")));
}

/// Start-up and usage errors under JSON logs (the flag or the file's
/// `log_format`): the run exits non-zero, every stderr line is a JSON `log`
/// object, and one at level `error` says what failed.
#[test]
fn error_exits_under_json_print_only_json() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let dir = TempDir::new("json-errors");
    let json_file = dir.path().join("json.toml");
    std::fs::write(&json_file, "log_format = \"json\"\n").unwrap();
    let bad_file = dir.path().join("bad.toml");
    std::fs::write(&bad_file, "log_format = \"json\"\nbogus_key = 1\n").unwrap();
    let (json_file, bad_file) = (
        json_file.display().to_string(),
        bad_file.display().to_string(),
    );
    let unset = "PORTCULLIS_TEST_UNSET_VARIABLE";
    let no_namespaces = std::env::var_os("PORTCULLIS_TEST_NO_NAMESPACES").is_some();
    let isolated_missing = if no_namespaces {
        "cannot isolate CMD"
    } else {
        "cannot run /nonexistent/cmd"
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--log-format", "json", "--auth-env", unset],
            "--auth-env",
        ),
        (
            vec!["--config", &json_file, "--auth-env", unset],
            "--auth-env",
        ),
        (
            vec!["--log-format", "json", "--listen", &busy],
            "cannot start",
        ),
        (
            vec!["--config", &json_file, "--listen", &busy],
            "cannot start",
        ),
        (vec!["--config", &bad_file], "bogus_key"),
        (
            vec!["--log-format", "json", "--bogus"],
            "unexpected argument",
        ),
        (vec!["--log-format=json", "--bogus"], "unexpected argument"),
        (vec!["run", "--log-format", "json"], "required"),
        (
            vec!["run", "--log-format", "json", "--", "/nonexistent/cmd"],
            isolated_missing,
        ),
        (
            vec![
                "run",
                "--no-isolate",
                "--config",
                &json_file,
                "--",
                "/nonexistent/cmd",
            ],
            "cannot run /nonexistent/cmd",
        ),
    ];
    let exe = env!("CARGO_BIN_EXE_portcullis");
    for (args, needle) in &cases {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        check_json_error_exit(cmd, &format!("{args:?}"), needle);
    }
    // Where no user namespace can be made (inside `unshare -U`).
    let probe = Command::new("unshare").args(["-U", "true"]).status();
    if probe.is_ok_and(|s| s.success()) {
        let mut cmd = Command::new("unshare");
        cmd.args(["-U", exe, "run", "--log-format", "json", "--", "true"]);
        check_json_error_exit(cmd, "unshare -U run", "cannot isolate CMD");
    }
}

/// Runs `cmd` (its stdin closed, RUST_LOG=info): it must fail, print only
/// JSON `log` lines on stderr, and one error line mentioning `needle`.
#[track_caller]
fn check_json_error_exit(mut cmd: Command, what: &str, needle: &str) {
    let out = cmd
        .env("RUST_LOG", "info")
        .env("RUST_LOG_STYLE", "never")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{what}:\n{stderr}");
    assert!(!out.status.success(), "{what}: should fail");
    let mut errors = Vec::new();
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"));
        assert!(v.is_object(), "{what}: not an object: {line}");
        assert!(v["time"].is_string(), "{what}: no time: {line}");
        if v["level"] == "error" {
            assert_eq!(v["event"], "log", "{what}: {line}");
            errors.push(v["message"].as_str().unwrap_or_default().to_string());
        }
    }
    assert!(
        errors.iter().any(|m| m.contains(needle)),
        "{what}: no error line mentioning {needle:?}: {errors:?}"
    );
}

/// The JSON objects the proxy logged so far, once `done` holds for them.
fn json_events(proxy: &ChildProxy, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let parse = || -> Vec<Value> {
        proxy
            .log()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    wait_for(what, PROMPTLY, || done(&parse()));
    parse()
}

#[test]
fn forward_requests_refused_or_plainly_allowed_have_request_events() {
    let origin = Origin::echo_target();
    let proxy = ChildProxy::start(&["--log-format", "json", "--allow", &origin.target()]);
    // Allowed under a rule that has no request rules.
    let mut c = HttpConn::new(TcpStream::connect(proxy.addr).unwrap());
    c.send(format!(
        "GET http://{}/plain/x?q=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        origin.target()
    ));
    assert_eq!(c.response("GET").status, 200);
    drop(c);
    // Refused by the policy before any upstream.
    let mut c = HttpConn::new(TcpStream::connect(proxy.addr).unwrap());
    c.send("GET http://10.1.2.3/denied/path?q=1 HTTP/1.1\r\nHost: 10.1.2.3\r\n\r\n");
    assert_eq!(c.response("GET").status, 403);
    drop(c);
    let objs = json_events(&proxy, "two request events", |o| {
        events(o, "request").len() >= 2 && events(o, "session").len() >= 2
    });
    let requests = events(&objs, "request");
    let allowed = requests
        .iter()
        .find(|r| r["path"] == "/plain/x")
        .expect("the allowed request's event");
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    assert_eq!(allowed["method"], "GET", "{allowed}");
    let session_rule = events(&objs, "session")
        .iter()
        .find(|s| s["decision"] == "allow")
        .map(|s| s["rule"].clone())
        .expect("the allowed session");
    assert!(session_rule.is_string(), "{session_rule}");
    assert_eq!(allowed["rule"], session_rule, "{allowed}");
    let denied = requests
        .iter()
        .find(|r| r["path"] == "/denied/path")
        .expect("the refused request's event");
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert_eq!(denied["method"], "GET", "{denied}");
    assert_eq!(denied["status"], 403, "{denied}");
    assert_eq!(denied["protocol"], "forward", "{denied}");
    assert_eq!(denied["target"], "10.1.2.3:80", "{denied}");
    assert!(denied["reason"].is_string(), "{denied}");
}

#[test]
fn auth_failed_sessions_are_denied() {
    let proxy = ChildProxy::start(&["--log-format", "json", "--auth", "u:right"]);
    // No credentials, then wrong ones.
    for extra in [
        &[][..],
        &[("Proxy-Authorization", "Basic dTp3cm9uZw==")][..],
    ] {
        let (_s, head) = http_connect(proxy.addr, "example.com:443", extra).expect("an answer");
        assert_eq!(head.status, 407, "{}", head.raw);
    }
    let objs = json_events(&proxy, "two auth-failed sessions", |o| {
        events(o, "session")
            .iter()
            .filter(|s| s["close"] == "auth-failed")
            .count()
            >= 2
    });
    for s in events(&objs, "session") {
        assert_eq!(s["decision"], "deny", "{s}");
    }
}
