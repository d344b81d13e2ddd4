//! Control: over an inherited socket (`--control-fd`) of the real binary,
//! and through the library's `ProxyHandle`. A replaced policy takes effect
//! for new connections, a live session is listed and closed, bad input
//! gets an error and changes nothing; the event callback sees sessions.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Mutex};

use portcullis::events::{Decision, EventKind};
use portcullis::policy::{Policy, RuleConfig};
use portcullis::{CloseReason, ControlError, Event};
use serde_json::Value;
use support::*;

/// The host's end of the control socket.
struct Control {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Control {
    fn new(s: UnixStream) -> Control {
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        Control {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
        }
    }

    /// Sends one line, returns the answer line, parsed.
    fn ask(&mut self, line: &str) -> Value {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        self.reader.read_line(&mut answer).unwrap();
        assert!(answer.ends_with('\n'), "one whole line: {answer:?}");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    }
}

/// The binary, given the other end of a socket pair as fd 3.
fn binary_with_control_fd(args: &[&str]) -> (ChildProxy, Control) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["--listen", "127.0.0.1:0", "--control-fd", "3"])
        .args(args);
    // SAFETY: dup2 is async-signal-safe; it runs in the child between fork
    // and exec. Fd 3 is only a number to dup2 onto (ManuallyDrop: never
    // closed here), and the copy it makes is not close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            let from = std::os::fd::BorrowedFd::borrow_raw(fd);
            let mut three = std::mem::ManuallyDrop::new(OwnedFd::from_raw_fd(3));
            nix::unistd::dup2(from, &mut three).map_err(std::io::Error::from)
        });
    }
    let proxy = ChildProxy::start_command(cmd);
    drop(theirs);
    (proxy, Control::new(ours))
}

fn connect_status(proxy: SocketAddr, target: &str) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let head = read_response_head(&mut s).unwrap();
    (head.status, s)
}

#[test]
fn control_fd_steers_a_running_binary() {
    let echo = echo_server();
    let (proxy, mut ctl) = binary_with_control_fd(&["--allow", &echo.target()]);

    // A live session, listed, then closed.
    let (status, mut live) = connect_status(proxy.addr, &echo.target());
    assert_eq!(status, 200);
    assert_echo(&mut live, b"ping");
    let v = ctl.ask(r#"{"cmd":"list-sessions"}"#);
    assert_eq!(v["ok"], true, "{v}");
    let list = v["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    let s = &list[0];
    assert_eq!(s["target"], echo.target());
    assert_eq!(s["protocol"], "connect");
    assert_eq!(s["rule"], format!("--allow {}", echo.target()));
    assert_eq!(s["bytes_up"], 4);
    assert!(
        s["state"].as_str().unwrap().starts_with("Passthrough"),
        "{s}"
    );
    let id = s["id"].as_u64().unwrap();
    let v = ctl.ask(&format!(r#"{{"cmd":"close-session","id":{id}}}"#));
    assert_eq!(
        v,
        serde_json::json!({"ok": true, "cmd": "close-session", "id": id})
    );
    let rest = expect_closed(&mut live, "a session closed over control");
    assert!(rest.is_empty());
    let v = ctl.ask(&format!(r#"{{"cmd":"close-session","id":{id}}}"#));
    assert_eq!(v["ok"], false);
    assert_eq!(
        ctl.ask(r#"{"cmd":"list-sessions"}"#)["sessions"],
        serde_json::json!([])
    );

    // Bad input: an error line each, and nothing changes.
    for bad in [
        "not json",
        r#"{"cmd":"replace-policy","policy":"[[rules"}"#,
        r#"{"cmd":"replace-policy","policy":"[[rule]]\naction = \"allow\"\nhost = \"*\"\n"}"#,
        r#"{"cmd":"add-rule","rule":{"action":"allow","host":"*"}}"#,
        r#"{"cmd":"remove-rule","name":"nope"}"#,
        r#"{"cmd":"shutdown"}"#,
    ] {
        let v = ctl.ask(bad);
        assert_eq!(v["ok"], false, "{bad}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    assert_eq!(
        connect_status(proxy.addr, &echo.target()).0,
        200,
        "unchanged"
    );

    // Replaced: allowed before, 403 after.
    let v = ctl.ask(
        r#"{"cmd":"replace-policy","policy":"[[rules]]\nname = \"elsewhere\"\naction = \"allow\"\nhost = \"example.com\"\nport = 443\n"}"#,
    );
    assert_eq!(
        v,
        serde_json::json!({"ok": true, "cmd": "replace-policy", "rules": ["elsewhere"]})
    );
    assert_eq!(connect_status(proxy.addr, &echo.target()).0, 403);

    // A rule added as JSON lets it through again; removed, it does not.
    let add = format!(
        r#"{{"cmd":"add-rule","rule":{{"name":"echo","action":"allow","cidr":"127.0.0.1/32","port":{}}}}}"#,
        echo.port()
    );
    assert_eq!(
        ctl.ask(&add)["rules"],
        serde_json::json!(["elsewhere", "echo"])
    );
    assert_eq!(connect_status(proxy.addr, &echo.target()).0, 200);
    assert_eq!(ctl.ask(&add)["ok"], false, "a second rule named echo");
    let v = ctl.ask(r#"{"cmd":"remove-rule","name":"echo"}"#);
    assert_eq!(v["rules"], serde_json::json!(["elsewhere"]));
    assert_eq!(connect_status(proxy.addr, &echo.target()).0, 403);

    let v = ctl.ask(r#"{"cmd":"stats"}"#);
    assert_eq!(v["stats"]["closed"]["closed-by-control"], 1, "{v}");
    assert_eq!(v["stats"]["rules"]["echo"]["allowed"], 1, "{v}");
    assert_eq!(v["stats"]["rules"]["-"]["denied"], 2, "{v}");
    proxy.wait_for_line("with close=closed-by-control", |l| {
        l.contains("close=closed-by-control")
    });
}

#[test]
fn a_control_fd_that_is_not_a_socket_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--listen", "127.0.0.1:0", "--control-fd", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--control-fd"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--listen", "127.0.0.1:0", "--control-fd", "57"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not open"));
}

#[test]
fn the_handle_steers_the_reactor_and_the_callback_sees_events() {
    let echo = echo_server();
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let seen = Arc::clone(&events);
    let proxy = spawn(
        proxy_builder(allow_ports(&[echo.port()]))
            .on_event(move |e| seen.lock().unwrap().push(e.clone())),
    );
    let p = proxy_addr(&proxy);

    let (status, mut live) = connect_status(p, &echo.target());
    assert_eq!(status, 200);
    assert_echo(&mut live, b"abc");
    let list = proxy.sessions().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].target.as_deref(), Some(echo.target().as_str()));
    assert_eq!(list[0].bytes_down, 3);
    proxy.close_session(list[0].id).unwrap();
    expect_closed(&mut live, "closed through the handle");
    assert!(matches!(
        proxy.close_session(list[0].id),
        Err(ControlError::Refused(_))
    ));

    // Replace, add, remove.
    proxy.replace_policy(Policy::default()).unwrap();
    assert_eq!(connect_status(p, &echo.target()).0, 403);
    let rule = RuleConfig::allow("127.0.0.1")
        .name("echo")
        .port(echo.port());
    proxy.add_rule(rule.clone()).unwrap();
    assert_eq!(connect_status(p, &echo.target()).0, 200);
    // That tunnel must end by the client's close, not by the removal below
    // (a reload closes a tunnel it denies, and its event then says deny).
    wait_no_open_sessions(&proxy);
    assert!(matches!(proxy.add_rule(rule), Err(ControlError::Refused(e)) if e.contains("exists")));
    let unnamed = RuleConfig::allow("x.test").build();
    assert!(proxy.add_rule(unnamed).is_err());
    proxy.remove_rule("echo").unwrap();
    assert!(proxy.remove_rule("echo").is_err());
    assert_eq!(connect_status(p, &echo.target()).0, 403);
    wait_no_open_sessions(&proxy);

    // The callback saw every session: the closed one, the refusals.
    wait_for("four session events", PROMPTLY, || {
        events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind == EventKind::Session)
            .count()
            == 4
    });
    let events = events.lock().unwrap();
    let closed = events
        .iter()
        .find(|e| e.close == Some(CloseReason::ClosedByControl))
        .expect("the closed session");
    assert_eq!(closed.decision, Some(Decision::Allow));
    assert_eq!((closed.bytes_up, closed.bytes_down), (Some(3), Some(3)));
    let denials = events
        .iter()
        .filter(|e| e.decision == Some(Decision::Deny))
        .count();
    assert_eq!(denials, 2);

    proxy.shutdown_now();
    let handle = proxy.handle();
    proxy.join().unwrap();
    assert_eq!(handle.sessions(), Err(ControlError::NotRunning));
}
