//! A parent (upstream) proxy: tunnels go through a second portcullis, over
//! HTTP CONNECT and over SOCKS5, with credentials; a refusal by the parent
//! is a 502 naming it; a rule can route `direct` around it.

use crate::support;

use std::io::Write;

use support::*;

/// The parent: a second portcullis allowing the origin, with credentials.
fn parent(origin: &Server) -> ChildProxy {
    ChildProxy::start(&["--allow", &origin.target(), "--auth", "up:p@ss:w0rd"])
}

#[test]
fn tunnels_go_through_an_http_and_a_socks5_parent() {
    let origin = echo_server();
    let parent = parent(&origin);
    for scheme in ["http", "socks5"] {
        let url = format!("{scheme}://up:p%40ss%3Aw0rd@{}", parent.addr);
        let front = ChildProxy::start(&["--allow", &origin.target(), "--upstream-proxy", &url]);
        let mut s = connect_via_http(front.addr, &origin.target());
        assert_echo(&mut s, format!("through a {scheme} parent").as_bytes());
        let mut s = connect_via_socks5(front.addr, "127.0.0.1", origin.port()).expect("SOCKS5");
        assert_echo(&mut s, b"SOCKS5 client, same parent");
    }
    // The parent saw the tunnels (2 per scheme), by address.
    wait_for("the parent's access lines", PROMPTLY, || {
        parent
            .log()
            .iter()
            .filter(|l| l.contains("event=session") && l.contains("decision=allow"))
            .count()
            >= 4
    });
}

#[test]
fn a_parent_password_stays_off_the_command_line() {
    let origin = echo_server();
    let parent = parent(&origin);
    let url = format!("http://up:p%40ss%3Aw0rd@{}", parent.addr);

    // On argv it works, with a warning naming the forms that keep it off.
    let front = ChildProxy::start(&["--allow", &origin.target(), "--upstream-proxy", &url]);
    front.wait_for_line("the argv warning", |l| {
        l.contains("level=warn") && l.contains("--upstream-proxy-env VAR")
    });

    // From the environment: no warning, and the tunnel goes through.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["--listen", "127.0.0.1:0", "--allow", &origin.target()])
        .args(["--upstream-proxy-env", "PARENT_URL"])
        .env("PARENT_URL", &url);
    let front = ChildProxy::start_command(cmd);
    let mut s = connect_via_http(front.addr, &origin.target());
    assert_echo(&mut s, b"parent URL from the environment");

    // From a file: the same.
    let dir = TempDir::new("parent-url");
    let file = dir.0.join("parent.url");
    std::fs::write(&file, format!("{url}\n")).unwrap();
    let front = ChildProxy::start(&[
        "--allow",
        &origin.target(),
        "--upstream-proxy-file",
        file.to_str().unwrap(),
    ]);
    let mut s = connect_via_http(front.addr, &origin.target());
    assert_echo(&mut s, b"parent URL from a file");
    for l in front.log().iter() {
        assert!(
            !l.contains("w0rd") && !l.contains("--upstream-proxy-env VAR"),
            "{l}"
        );
    }

    // A bad URL in the variable is refused at start without quoting the password.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["--check", "--upstream-proxy-env", "PARENT_URL"])
        .env("PARENT_URL", "gopher://up:s3cret@127.0.0.1:1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--upstream-proxy-env") && !err.contains("s3cret"),
        "{err}"
    );
}

#[test]
fn a_parent_refusal_is_a_502_that_says_so() {
    let origin = echo_server();
    let elsewhere = echo_server();
    // The parent allows only `elsewhere`; the front allows `origin`.
    let parent = ChildProxy::start(&["--allow", &elsewhere.target()]);
    let url = format!("http://{}", parent.addr);
    let front = ChildProxy::start(&["--allow", &origin.target(), "--upstream-proxy", &url]);
    let (mut s, head) = http_connect(front.addr, &origin.target(), &[]).expect("an answer");
    assert_eq!(head.status, 502, "{}", head.raw);
    assert_eq!(
        head.header("X-Proxy-Error"),
        Some("parent-proxy"),
        "{}",
        head.raw
    );
    let body = expect_closed(&mut s, "refused tunnel");
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("403") && body.contains("parent proxy"),
        "{body}"
    );
    // SOCKS5 clients get a general failure.
    assert_eq!(
        connect_via_socks5(front.addr, "127.0.0.1", origin.port()).err(),
        Some(0x01)
    );
    assert_eq!(origin.accepted(), 0);
}

#[test]
fn a_rule_can_route_direct_around_the_parent() {
    let origin = echo_server();
    // A parent that refuses everything.
    let parent = ChildProxy::start(&["--allow", "192.0.2.1:9"]);
    let dir = TempDir::new("direct-rule");
    let cfg = dir.0.join("portcullis.toml");
    let mut f = std::fs::File::create(&cfg).unwrap();
    write!(
        f,
        "upstream_proxy = \"http://{}\"\n\n[[rules]]\naction = \"allow\"\ncidr = \"127.0.0.1/32\"\nport = {}\nupstream_proxy = \"direct\"\n",
        parent.addr,
        origin.port()
    )
    .unwrap();
    drop(f);
    let front = ChildProxy::start(&["--config", cfg.to_str().unwrap()]);
    let mut s = connect_via_http(front.addr, &origin.target());
    assert_echo(&mut s, b"straight to the origin");
}

#[test]
fn an_unreachable_parent_is_the_parents_fault() {
    let origin = must_not_accept();
    // A port nothing listens on.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for scheme in ["http", "socks5"] {
        let url = format!("{scheme}://{nobody}");
        let front = ChildProxy::start(&["--allow", &origin.target(), "--upstream-proxy", &url]);
        let (mut s, head) = http_connect(front.addr, &origin.target(), &[]).expect("an answer");
        assert_eq!(head.status, 502, "{scheme}: {}", head.raw);
        assert_eq!(
            head.header("X-Proxy-Error"),
            Some("parent-proxy"),
            "{scheme}: {}",
            head.raw
        );
        let body = expect_closed(&mut s, "refused tunnel");
        let body = String::from_utf8_lossy(&body);
        assert!(
            body.contains("parent proxy") && body.contains(&url),
            "{scheme}: the reason names the parent: {body}"
        );
        // SOCKS5 clients get a general failure, not "connection refused".
        assert_eq!(
            connect_via_socks5(front.addr, "127.0.0.1", origin.port()).err(),
            Some(0x01),
            "{scheme}"
        );
    }
    assert_eq!(origin.accepted(), 0);
}
