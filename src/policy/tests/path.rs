//! The encoded-character hole (issue 8): every spelling an origin would read
//! as matching a rule is judged as matching it, rule by rule; what cannot be
//! judged safely is refused (400).

use super::*;

fn rules_of(name: &str, reqs: &[(Action, &str, &str)]) -> RequestRules {
    let reqs: Vec<RequestRuleConfig> = reqs
        .iter()
        .map(|&(action, method, path)| RequestRuleConfig {
            action,
            method: Some(method.into()),
            path: Some(path.into()),
        })
        .collect();
    RequestRules::new(name.into(), &reqs).unwrap()
}

/// What the session does: normalise (400 on failure), then check.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Refused400,
    Allowed,
    Denied,
}

fn judge(r: &RequestRules, method: &str, raw: &str) -> Seen {
    match normalize_path(raw) {
        Err(_) => Seen::Refused400,
        Ok(p) => match r.check(method, &p) {
            RequestVerdict::Allow(_) => Seen::Allowed,
            _ => Seen::Denied,
        },
    }
}

fn expect(r: &RequestRules, method: &str, cases: &[(&str, Seen)]) {
    for (raw, want) in cases {
        assert_eq!(&judge(r, method, raw), want, "{method} {raw}");
        // Checking the raw spelling directly is never looser.
        if *want == Seen::Denied {
            assert!(
                !matches!(r.check(method, raw), RequestVerdict::Allow(_)),
                "{raw}"
            );
        }
    }
}

#[test]
fn deny_at_internal_by_every_spelling() {
    use Seen::*;
    let r = rules_of(
        "api",
        &[
            (Action::Allow, "*", "/v1/**"),
            (Action::Deny, "*", "/v1/@internal/**"),
        ],
    );
    expect(
        &r,
        "GET",
        &[
            ("/v1/@internal/x", Denied),
            ("/v1/%40internal/x", Denied),
            ("/v1/%40INTERNAL/x", Denied),
            ("/v1/%40%69nternal/x", Denied),
            ("/v1/@internal", Denied),
            ("/v1/@internal/", Denied),
            ("/v1//%40internal//x", Denied),
            ("/v1/./%40internal/x", Denied),
            ("/v1/x/../%40internal/y", Denied),
            ("/v1/x/%2e%2E/%40internal/y", Denied),
            ("/v1/%40internal;a=b/x", Denied),
            ("/v1/%40internal%3Bv=1/x", Denied),
            ("/V1/@Internal/x", Denied),
            ("/v1/%40internal/x?y=1", Denied),
            // Cannot be judged safely: refused, never guessed.
            ("/v1/%2540internal/x", Refused400),
            ("/v1%2F%40internal/x", Refused400),
            ("/v1/%40internal%00/x", Refused400),
            ("/v1\\%40internal/x", Refused400),
            ("/v1/%5C%40internal/x", Refused400),
            ("/v1/x/..;/%40internal/x", Refused400),
            // Not the denied path.
            ("/v1/@internals/x", Allowed),
            ("/v1/internal/x", Allowed),
            ("/v1/x/@internal", Allowed),
            ("/v1/%2540", Refused400),
        ],
    );
}

#[test]
fn deny_users_delete_by_every_spelling() {
    use Seen::*;
    let r = rules_of(
        "api",
        &[
            (Action::Allow, "*", "/v1/**"),
            (Action::Deny, "POST", "/v1/users:delete"),
        ],
    );
    expect(
        &r,
        "POST",
        &[
            ("/v1/users:delete", Denied),
            ("/v1/users%3Adelete", Denied),
            ("/v1/users%3adelete", Denied),
            ("/v1/users%3aDELETE", Denied),
            ("/v1/%75sers%3Adelete", Denied),
            ("/v1/users:delete/", Denied),
            ("/v1/users:delete;x=1", Denied),
            ("/v1/users%3Adelete?force=1", Denied),
            ("/v1/a/../users%3Adelete", Denied),
            ("/v1/users%3Adelete%2F", Refused400),
            ("/v1/users%3Adelete%0a", Refused400),
            ("/v1/users%253Adelete", Refused400),
            ("/v1/users:deleted", Allowed),
            ("/v1/users:delete/x", Allowed),
        ],
    );
    // Deny methods match case-insensitively; allow methods exactly.
    assert_eq!(judge(&r, "post", "/v1/users:delete"), Seen::Denied);
    assert_eq!(judge(&r, "GET", "/v1/users:delete"), Seen::Allowed);
}

/// Origins that fold characters before routing (IIS and Windows file names
/// drop trailing dots and spaces, .NET `OrdinalIgnoreCase` upper-cases `ı`
/// and `ſ` to `I` and `S`, best-fit code pages map fullwidth ASCII onto
/// ASCII) read these as the denied paths: deny rules judge the folded
/// reading too. Allow rules never do, so folding cannot widen an allow.
#[test]
fn deny_rules_judge_what_folding_origins_read() {
    use Seen::*;
    let r = rules_of(
        "api",
        &[
            (Action::Allow, "*", "/**"),
            (Action::Deny, "*", "/admin/**"),
            (Action::Deny, "*", "/v1/users:delete"),
            (Action::Deny, "*", "/keys/**"),
        ],
    );
    expect(
        &r,
        "POST",
        &[
            ("/adm%C4%B1n/x", Denied),
            ("/ADM%C4%B0N/x", Denied),
            ("/v1/u%C5%BFers:delete", Denied),
            ("/v1/U%C5%BFERS%3ADELETE", Denied),
            ("/%E2%84%AAeys/x", Denied),
            // Fullwidth ASCII: letters, `:`, `/` (a segment boundary), `.`.
            ("/%EF%BD%81dmin/x", Denied),
            ("/%EF%BC%A1DMIN/x", Denied),
            ("/v1/users%EF%BC%9Adelete", Denied),
            ("/admin%EF%BC%8Fx", Denied),
            ("/v1%EF%BC%8Fusers:delete", Denied),
            ("/x%EF%BC%8F%EF%BC%8E%EF%BC%8E%EF%BC%8Fadmin/y", Denied),
            // Trailing dots and spaces.
            ("/admin./x", Denied),
            ("/admin%2e/x", Denied),
            ("/admin%20/x", Denied),
            ("/admin%20", Denied),
            ("/ADMIN%2E%2E/", Denied),
            ("/admin.%20./x", Denied),
            ("/v1/users:delete.", Denied),
            ("/v1/users:delete%20%20", Denied),
            ("/.../admin/x", Denied),
            // Folding makes nothing else match.
            ("/administrator/x", Allowed),
            ("/adm%C4%B1nistrator/x", Allowed),
            ("/ad.min/x", Allowed),
            ("/.admin/x", Allowed),
            ("/%20admin/x", Allowed),
            ("/v1/users:deletes", Allowed),
            ("/caf%C3%A9/x", Allowed),
        ],
    );
    // An allow rule is matched on the path as sent, never folded: these
    // are not `/admin/...` to it.
    let only = rules_of("api", &[(Action::Allow, "*", "/admin/**")]);
    expect(
        &only,
        "GET",
        &[
            ("/admin/x", Allowed),
            ("/adm%C4%B1n/x", Denied),
            ("/admin./x", Denied),
            ("/admin%EF%BC%8Fx", Denied),
            ("/%EF%BD%81dmin/x", Denied),
        ],
    );
}

#[test]
fn allow_rules_must_allow_every_reading() {
    use Seen::*;
    let r = rules_of("api", &[(Action::Allow, "GET", "/v1/items/*")]);
    expect(
        &r,
        "GET",
        &[
            ("/v1/items/x", Allowed),
            ("/v1/items/x;v=2", Allowed),
            ("/v1/items/%78", Allowed),
            ("/v1/items/x/", Denied),
            ("/V1/items/x", Denied),
            ("/v1/items/x/y", Denied),
        ],
    );
    assert_eq!(judge(&r, "get", "/v1/items/x"), Denied);
    // `;` cuts a segment for the second reading: "/admin;x" is also "/admin".
    let r = rules_of(
        "api",
        &[(Action::Allow, "*", "/**"), (Action::Deny, "*", "/admin")],
    );
    expect(
        &r,
        "GET",
        &[
            ("/admin;x", Denied),
            ("/admin%3bx", Denied),
            ("/admins;x", Allowed),
        ],
    );
    // An allow pattern with ';' could never allow: a compile error.
    let bad = RequestRuleConfig {
        action: Action::Allow,
        method: None,
        path: Some("/items;v=2".into()),
    };
    let e = RequestRules::new("api".into(), &[bad]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("requests[0].path"));
    assert!(e.message.contains("';'"), "{e}");
}

#[test]
fn deny_patterns_ignore_a_trailing_slash_and_case() {
    use Seen::*;
    let r = rules_of(
        "api",
        &[(Action::Allow, "*", "/**"), (Action::Deny, "*", "/Admin/")],
    );
    expect(
        &r,
        "GET",
        &[
            ("/admin", Denied),
            ("/ADMIN/", Denied),
            ("/admin/x", Allowed),
        ],
    );
    let root = rules_of(
        "api",
        &[(Action::Allow, "*", "/**"), (Action::Deny, "*", "/")],
    );
    expect(
        &root,
        "GET",
        &[("/", Denied), ("//", Denied), ("/x", Allowed)],
    );
}

#[test]
fn what_the_matcher_sees_per_character() {
    for (raw, want) in [
        ("/%40", "/@"),
        ("/%3a%3A", "/::"),
        ("/%2e%2E", "/"),
        ("/a/%2e", "/a/"),
        ("/%7e%7E", "/~~"),
        ("/%41%62", "/Ab"),
        ("/%21%24%26%27%28%29%2A%2B%2C%3B%3D", "/!$&'()*+,;="),
        ("/a%20b", "/a%20b"),
        ("/a%3Fb%23c", "/a%3Fb%23c"),
        ("/100%25", "/100%25"),
        ("/100%25x", "/100%25x"),
        ("/caf%c3%a9", "/caf%C3%A9"),
        ("/café", "/caf%C3%A9"),
        ("/a\"b<c>{d}|e^f`g", "/a%22b%3Cc%3E%7Bd%7D%7Ce%5Ef%60g"),
        ("/a;b=c/d", "/a;b=c/d"),
        ("/a%3Bb", "/a;b"),
        ("/;x/..", "/"),
    ] {
        assert_eq!(normalize_path(raw).as_deref(), Ok(want), "{raw}");
    }
    for bad in [
        "/%2F",
        "/%2f",
        "/a%5c",
        "/a%00",
        "/a%1F",
        "/a%7F",
        "/%FF",
        "/%C0%AF",
        "/%C3",
        "/%ED%A0%80",
        "/%25%34%31",
        "/%252f",
        "/%252F",
        "/..;/x",
        "/.;x/y",
        "/a/..%3B/b",
        "/a%",
        "/a%2",
        "/a%zz",
        "/a b",
        "/a\tb",
        "/a#b",
        "a",
        "",
    ] {
        assert!(normalize_path(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn normalising_twice_changes_nothing() {
    for raw in [
        "/v1/%40internal/x",
        "/a/b/../c/./d//e/",
        "/caf%c3%a9/100%25/x;y=z",
        "/%7E%21%3F%23%20",
        "/",
        "/a/x;b",
    ] {
        let once = normalize_path(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
        assert_eq!(normalize_path(&once).as_deref(), Ok(once.as_str()), "{raw}");
    }
}

#[test]
fn unjudgeable_paths_are_denied_by_check_itself() {
    let r = rules_of("api", &[(Action::Allow, "*", "/**")]);
    let v = r.check("GET", "/a%2Fb");
    assert!(
        matches!(&v, RequestVerdict::Deny(l) if l.contains("path not judged")),
        "{v:?}"
    );
}

#[test]
fn patterns_decode_like_paths() {
    let r = rules_of(
        "api",
        &[
            (Action::Allow, "*", "/**"),
            (Action::Deny, "*", "/v1/%40internal/**"),
        ],
    );
    assert_eq!(judge(&r, "GET", "/v1/@internal/x"), Seen::Denied);
    for bad in ["/v1/%2e%2E/x", "/v1/.%2e", "/a%2Fb", "/a/..;/b", "/a%00"] {
        let reqs = [RequestRuleConfig {
            action: Action::Deny,
            method: None,
            path: Some(bad.into()),
        }];
        assert!(RequestRules::new("api".into(), &reqs).is_err(), "{bad}");
    }
}

#[test]
fn upgrades() {
    let plain = RequestRules::new("api".into(), &[]).unwrap();
    assert!(matches!(
        plain.check_upgrade("websocket"),
        RequestVerdict::Allow(_)
    ));
    assert!(matches!(
        plain.check_upgrade("WebSocket"),
        RequestVerdict::Allow(_)
    ));
    assert_eq!(
        plain.check_upgrade("h2c"),
        RequestVerdict::Deny("api: upgrade \"h2c\" is not allowed".into())
    );
    // No inspecting rule (the forward proxy under a plain allow): the default.
    let none = RequestRules::default();
    assert!(matches!(
        none.check_upgrade("websocket"),
        RequestVerdict::Allow(_)
    ));
    assert!(matches!(none.check_upgrade("h2c"), RequestVerdict::Deny(_)));
    // Listed tokens, intersected across inspecting rules.
    let rule = |name: &str, host: &str, ups: &[&str]| RuleConfig {
        name: Some(name.into()),
        host: Some(host.into()),
        inspect: Some("http".into()),
        upgrades: Some(ups.iter().map(|u| u.to_string()).collect()),
        ..cfg(Action::Allow)
    };
    let p = Policy::from_rules(&[
        rule("a", "api.test", &["websocket", "Custom-Proto"]),
        rule("b", "*.test", &["custom-proto"]),
    ])
    .unwrap();
    let Verdict::Allow(al) = verdict(&p, "api.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    let r = al.inspect.unwrap();
    assert!(matches!(
        r.check_upgrade("custom-proto"),
        RequestVerdict::Allow(_)
    ));
    assert_eq!(
        r.check_upgrade("websocket"),
        RequestVerdict::Deny("b: upgrade \"websocket\" is not allowed".into())
    );
    // None at all, and bad tokens.
    let p = Policy::from_rules(&[rule("c", "c.test", &[])]).unwrap();
    let Verdict::Allow(al) = verdict(&p, "c.test", 80, &["45.45.45.45"]) else {
        panic!()
    };
    assert!(matches!(
        al.inspect.unwrap().check_upgrade("websocket"),
        RequestVerdict::Deny(_)
    ));
    let e = Policy::from_rules(&[rule("d", "d.test", &["web socket"])]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("upgrades[0]"));
    let e = Policy::from_rules(&[RuleConfig {
        upgrades: Some(vec!["websocket".into()]),
        host: Some("e.test".into()),
        ..cfg(Action::Allow)
    }])
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("upgrades"));
}

/// `//x/admin` is the path `/admin` to URL parsers (a network-path
/// reference: Node's `new URL(req.url, base)`, Python's `urljoin`), and
/// `/x/admin` to origins that collapse slashes: both readings are judged.
#[test]
fn a_leading_double_slash_is_also_read_as_a_host_then_a_path() {
    use Seen::*;
    let r = rules_of(
        "api",
        &[
            (Action::Allow, "*", "/**"),
            (Action::Deny, "*", "/admin/**"),
        ],
    );
    expect(
        &r,
        "GET",
        &[
            ("//x/admin/secret", Denied),
            ("//user@x:8080/admin/", Denied),
            ("//x/y/../admin/secret?q=1", Denied),
            ("//x/%61dmin", Denied),
            ("//x;a=b/admin", Denied),
            ("///admin", Denied),
            ("//admin", Denied),
            ("//x/public", Allowed),
            ("//public", Allowed),
            ("/x//admin", Allowed),
        ],
    );
    // Allow rules must allow both readings.
    let allow = rules_of("api", &[(Action::Allow, "*", "/public/**")]);
    expect(
        &allow,
        "GET",
        &[
            ("//public/x", Denied),
            ("//x/public/y", Denied),
            ("/public//x", Allowed),
        ],
    );
}

/// The canonical spelling keeps the leading `//`, and judging it covers
/// every reading of the original (the session judges the canonical path).
#[test]
fn the_canonical_spelling_keeps_the_network_path_reading() {
    for (raw, want) in [
        ("//x/admin", "//x/admin"),
        ("//x/../admin", "//admin"),
        ("//./admin", "//admin"),
        ("///a//b/", "//a/b/"),
        ("//", "//"),
        ("//x?q=1", "//x"),
    ] {
        assert_eq!(normalize_path(raw).as_deref(), Ok(want), "{raw}");
        assert_eq!(normalize_path(want).as_deref(), Ok(want), "{raw} twice");
    }
    for raw in [
        "//x/admin",
        "//x/../admin",
        "//x/a/../../b/admin",
        "//./admin",
        "//../admin",
        "///admin",
        "//x;p/a;q/admin",
    ] {
        let orig = crate::target::path::parse(raw).unwrap();
        let canon = crate::target::path::parse(&normalize_path(raw).unwrap()).unwrap();
        let theirs = canon.readings();
        for reading in orig.readings() {
            assert!(
                theirs.contains(&reading),
                "{raw}: reading {reading:?} lost in {theirs:?}"
            );
        }
    }
}
