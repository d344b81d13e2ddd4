//! parse_absolute_target.

use crate::protocol::http1::{parse_absolute_target, AbsoluteTarget};

fn ok(target: &str) -> AbsoluteTarget {
    parse_absolute_target(target)
        .unwrap_or_else(|e| panic!("{target}: {e}"))
        .unwrap_or_else(|| panic!("{target}: not absolute-form"))
}

fn target(host: &str, port: u16, path_and_query: &str) -> AbsoluteTarget {
    AbsoluteTarget {
        tls: false,
        host: host.to_owned(),
        port,
        path_and_query: path_and_query.to_owned(),
    }
}

#[test]
fn absolute_forms() {
    assert_eq!(ok("http://example.com/x"), target("example.com", 80, "/x"));
    assert_eq!(ok("http://example.com"), target("example.com", 80, "/"));
    assert_eq!(
        ok("HTTP://Example.COM:8080"),
        target("Example.COM", 8080, "/")
    );
    assert_eq!(
        ok("http://example.com/a/b?q=1&r=http://x"),
        target("example.com", 80, "/a/b?q=1&r=http://x")
    );
    assert_eq!(ok("http://example.com?q"), target("example.com", 80, "/?q"));
    assert_eq!(ok("http://example.com:/"), target("example.com", 80, "/"));
    assert_eq!(ok("http://[::1]:8080/x"), target("[::1]", 8080, "/x"));
    assert_eq!(ok("http://[2001:db8::1]"), target("[2001:db8::1]", 80, "/"));
    assert_eq!(ok("http://10.0.0.1:65535/"), target("10.0.0.1", 65535, "/"));
}

#[test]
fn not_absolute_form() {
    for t in [
        "/",
        "/x?y=http://z",
        "*",
        "example.com:443",
        "[::1]:443",
        "",
    ] {
        assert_eq!(parse_absolute_target(t), Ok(None), "{t}");
    }
}

#[test]
fn https_defaults_to_443_and_says_tls() {
    let t = parse_absolute_target("https://Example.com/a?b")
        .unwrap()
        .unwrap();
    assert!(t.tls);
    assert_eq!(
        (t.host.as_str(), t.port, t.path_and_query.as_str()),
        ("Example.com", 443, "/a?b")
    );
    let t = parse_absolute_target("HTTPS://example.com:8443")
        .unwrap()
        .unwrap();
    assert!(t.tls);
    assert_eq!((t.port, t.path_and_query.as_str()), (8443, "/"));
    assert!(
        !parse_absolute_target("http://example.com/")
            .unwrap()
            .unwrap()
            .tls
    );
}

#[test]
fn refused() {
    let err = |t: &str| parse_absolute_target(t).expect_err(t);
    assert!(err("ftp://example.com/").contains("ftp"));
    assert!(err("http://user@example.com/").contains("userinfo"));
    assert!(err("http://user:pw@example.com/").contains("userinfo"));
    assert!(err("http:///x").contains("empty host"));
    assert!(err("http://").contains("empty host"));
    assert!(err("http://:80/").contains("empty host"));
    for bad_port in [
        "http://a:0/",
        "http://a:65536/",
        "http://a:8a/",
        "http://a:+80/",
        "http://a:1:2/",
    ] {
        assert!(err(bad_port).contains("bad port"), "{bad_port}");
    }
    assert!(err("http://[::1/").contains("IPv6"));
    assert!(err("http://[zz]/").contains("IPv6"));
    assert!(err("http://[::1]x/").contains("IPv6"));
    assert!(err("http://ex%61mple.com/").contains("invalid host"));
    assert!(err("http://a/#frag").contains("fragment"));
}
