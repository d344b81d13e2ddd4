//! Request rules (method, path glob, deny over allow), path normalisation,
//! and how inspecting rules compile and reach `Allowed.inspect`.

use super::*;

fn req(action: Action, method: Option<&str>, path: Option<&str>) -> RequestRuleConfig {
    RequestRuleConfig {
        action,
        method: method.map(str::to_owned),
        path: path.map(str::to_owned),
    }
}

fn allow(method: &str, path: &str) -> RequestRuleConfig {
    req(Action::Allow, Some(method), Some(path))
}

fn deny(method: &str, path: &str) -> RequestRuleConfig {
    req(Action::Deny, Some(method), Some(path))
}

fn rules(reqs: &[RequestRuleConfig]) -> RequestRules {
    RequestRules::new("api".into(), reqs).unwrap()
}

fn ok(r: &RequestRules, method: &str, path: &str) -> bool {
    matches!(r.check(method, path), RequestVerdict::Allow(_))
}

fn compile_err(reqs: &[RequestRuleConfig]) -> String {
    RequestRules::new("api".into(), reqs)
        .unwrap_err()
        .to_string()
}

fn norm(p: &str) -> String {
    normalize_path(p).unwrap()
}

#[test]
fn no_request_rules_allow_everything_under_the_rule_name() {
    let r = rules(&[]);
    assert!(r.allows_all());
    assert_eq!(r.check("DELETE", "/x"), RequestVerdict::Allow("api".into()));
    assert_eq!(r.check("GET", "/"), RequestVerdict::Allow("api".into()));
    let d = RequestRules::default();
    assert!(matches!(d.check("GET", "/"), RequestVerdict::Allow(_)));
}

#[test]
fn deny_wins_and_no_match_is_denied() {
    let r = rules(&[allow("GET", "/v1/**"), deny("*", "/v1/admin/**")]);
    assert_eq!(
        r.check("GET", "/v1/users"),
        RequestVerdict::Allow("api requests[0]".into())
    );
    assert_eq!(
        r.check("GET", "/v1/admin/x"),
        RequestVerdict::Deny("api requests[1]".into())
    );
    assert_eq!(
        r.check("GET", "/v1/admin"),
        RequestVerdict::Deny("api requests[1]".into())
    );
    assert_eq!(
        r.check("POST", "/v1/users"),
        RequestVerdict::Deny("api: no request rule matched".into())
    );
    assert_eq!(
        r.check("GET", "/v2"),
        RequestVerdict::Deny("api: no request rule matched".into())
    );
    // Order does not matter: a deny listed after an allow still wins, and
    // the first matching rule of the winning action is named.
    let r = rules(&[
        deny("DELETE", "/**"),
        allow("*", "/**"),
        allow("GET", "/**"),
    ]);
    assert_eq!(
        r.check("GET", "/a"),
        RequestVerdict::Allow("api requests[1]".into())
    );
    assert_eq!(
        r.check("DELETE", "/a"),
        RequestVerdict::Deny("api requests[0]".into())
    );
}

#[test]
fn methods_are_exact_and_case_sensitive() {
    let r = rules(&[allow("GET", "/**")]);
    assert!(ok(&r, "GET", "/"));
    assert!(!ok(&r, "get", "/"));
    assert!(!ok(&r, "GETX", "/"));
    assert!(!ok(&r, "HEAD", "/"));
    let any = rules(&[req(Action::Allow, None, Some("/**"))]);
    assert!(ok(&any, "PROPFIND", "/"));
    let star = rules(&[allow("*", "/**")]);
    assert!(ok(&star, "M-SEARCH", "/"));
    for bad in ["", "G ET", "GET\r", "GE/T", "(GET)", "ÄTSCH"] {
        let e = compile_err(&[allow(bad, "/")]);
        assert!(
            e.contains("requests[0]") && e.contains("method"),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn absent_path_is_everything() {
    let r = rules(&[req(Action::Allow, Some("GET"), None)]);
    for p in ["/", "/a", "/a/b/c/", "/x.json"] {
        assert!(ok(&r, "GET", p), "{p}");
    }
}

#[test]
fn single_star_stays_within_a_segment() {
    let r = rules(&[allow("GET", "/v1/*")]);
    assert!(ok(&r, "GET", "/v1/users"));
    assert!(ok(&r, "GET", "/v1/"));
    assert!(!ok(&r, "GET", "/v1/a/b"));
    assert!(!ok(&r, "GET", "/v1"));
    assert!(!ok(&r, "GET", "/v2/users"));

    let r = rules(&[allow("GET", "/files/*.json")]);
    assert!(ok(&r, "GET", "/files/a.json"));
    assert!(ok(&r, "GET", "/files/.json"));
    assert!(ok(&r, "GET", "/files/a.b.json"));
    assert!(!ok(&r, "GET", "/files/a.json/x"));
    assert!(!ok(&r, "GET", "/files/a.jsonx"));
    assert!(!ok(&r, "GET", "/files/sub/a.json"));

    let r = rules(&[allow("GET", "/a*b*c/x")]);
    assert!(ok(&r, "GET", "/abc/x"));
    assert!(ok(&r, "GET", "/a-b-b-c/x"));
    assert!(!ok(&r, "GET", "/a-b-cd/x"));
}

#[test]
fn double_star_spans_zero_or_more_segments() {
    let r = rules(&[allow("GET", "/v1/**")]);
    for p in ["/v1", "/v1/", "/v1/a", "/v1/a/b/c"] {
        assert!(ok(&r, "GET", p), "{p}");
    }
    for p in ["/", "/v1x", "/v2/v1/a"] {
        assert!(!ok(&r, "GET", p), "{p}");
    }

    let r = rules(&[allow("GET", "/**/*.json")]);
    assert!(ok(&r, "GET", "/a.json"));
    assert!(ok(&r, "GET", "/a/b/c.json"));
    assert!(!ok(&r, "GET", "/a/b/c.json/d"));

    let r = rules(&[allow("GET", "/a/**/b/**/c")]);
    assert!(ok(&r, "GET", "/a/b/c"));
    assert!(ok(&r, "GET", "/a/x/y/b/z/c"));
    assert!(ok(&r, "GET", "/a/b/b/c/c"));
    assert!(!ok(&r, "GET", "/a/c/b"));

    // `**/**` is `**`.
    let r = rules(&[allow("GET", "/**/**/x")]);
    assert!(ok(&r, "GET", "/x"));
    assert!(ok(&r, "GET", "/a/b/x"));

    let root = rules(&[allow("GET", "/")]);
    assert!(ok(&root, "GET", "/"));
    assert!(!ok(&root, "GET", "/a"));
}

#[test]
fn matching_is_linear_on_hostile_paths() {
    use crate::policy::request::MATCH_STEPS;
    // The matchers' steps on one check, against a bound of a few steps per
    // (pattern element, path byte) pair; backtracking that went exponential
    // or restarted from every `*` would take orders of magnitude more.
    let steps = |pattern: &str, path: &str| {
        let r = rules(&[allow("GET", pattern)]);
        MATCH_STEPS.with(|c| c.set(0));
        assert!(!ok(&r, "GET", path), "{pattern} must not match");
        MATCH_STEPS.with(|c| c.get())
    };
    let segments = 10_000;
    let path = "/a".repeat(segments);
    // 8 segments in the pattern: at most 2 per pair of segments, plus the
    // one-byte segment globs.
    let n = steps("/**/a/**/a/**/a/**/b", &path);
    assert!(
        n <= 2 * 8 * segments as u64 + 4 * segments as u64,
        "{n} steps"
    );
    assert!(n >= segments as u64, "{n} steps: the path was not walked");
    let path = format!("/{}", "a".repeat(20_000));
    let n = steps("/*a*a*a*a*b", &path);
    assert!(n <= 2 * 10 * 20_000, "{n} steps");
    assert!(n >= 20_000, "{n} steps: the segment was not walked");
}

#[test]
fn check_ignores_a_query_defensively() {
    let r = rules(&[allow("GET", "/v1/*"), deny("GET", "/v1/secret")]);
    assert!(ok(&r, "GET", "/v1/x?/a/b"));
    assert!(!ok(&r, "GET", "/v1/secret?x=1"));
}

#[test]
fn patterns_are_normalised_like_paths() {
    let r = rules(&[allow("GET", "/%7euser/./files//*")]);
    assert!(ok(&r, "GET", &norm("/~user/files/a")));
    assert!(ok(&r, "GET", &norm("/%7Euser/files/a")));
    let r = rules(&[allow("GET", "/caf%c3%a9")]);
    assert!(ok(&r, "GET", &norm("/caf%C3%A9")));
    assert!(ok(&r, "GET", &norm("/café")));
}

#[test]
fn bad_patterns_are_compile_errors() {
    for bad in [
        "v1/**",
        "",
        "/v1/../admin",
        "/v1/%2e%2E/admin",
        "/a%2Fb",
        "/a\\b",
        "/a%00",
        "/a%zz",
        "/a**",
        "/**x/y",
        "/a?b=1",
        "/a b",
        "/a#b",
    ] {
        let e = compile_err(&[allow("GET", "/**"), allow("GET", bad)]);
        assert!(
            e.contains("rule \"api\"") && e.contains("requests[1]") && e.contains("path"),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn normalize_drops_the_query_and_canonicalises_escapes() {
    assert_eq!(norm("/a/b?x=1&y=/../z"), "/a/b");
    assert_eq!(norm("/"), "/");
    assert_eq!(norm("/?"), "/");
    assert_eq!(norm("/%41%62%63%2d%2E%5f%7E"), "/Abc-._~");
    // Every escape is decoded; only what a path cannot carry raw is re-encoded.
    assert_eq!(norm("/a%3fb%3Ac%25"), "/a%3Fb:c%25");
    assert_eq!(norm("/caf%c3%a9"), "/caf%C3%A9");
    assert_eq!(norm("/café"), "/caf%C3%A9");
    assert_eq!(norm("/a\"b<c>"), "/a%22b%3Cc%3E");
    assert_eq!(norm("/a:b@c!$&'()*+,;="), "/a:b@c!$&'()*+,;=");
}

#[test]
fn normalize_removes_dot_segments_and_empty_segments() {
    for (raw, want) in [
        ("/v1/../admin", "/admin"),
        ("/v1/./x", "/v1/x"),
        ("/../../etc/passwd", "/etc/passwd"),
        ("/..", "/"),
        ("/.", "/"),
        ("/a/b/..", "/a/"),
        ("/a/b/.", "/a/b/"),
        ("/a/b/", "/a/b/"),
        ("/a/.b/..c/...", "/a/.b/..c/..."),
        ("//a///b//", "//a/b/"),
        ("//..//admin", "//admin"),
        ("/v1/%2e%2e/admin", "/admin"),
        ("/v1/%2E/x", "/v1/x"),
        ("/v1/.%2e/.%2E/admin", "/admin"),
    ] {
        assert_eq!(norm(raw), want, "{raw}");
    }
}

#[test]
fn normalize_refuses_ambiguous_or_hostile_paths() {
    for bad in [
        "",
        "a/b",
        "*",
        "http://example.com/",
        "/a%2Fb",
        "/a%2fb",
        "/a%5Cb",
        "/a\\b",
        "/a%00b",
        "/a\0b",
        "/a%0d%0a",
        "/a\tb",
        "/a%7f",
        "/a\x7f",
        "/a%",
        "/a%4",
        "/a%G1",
        "/a%%41",
        "/a b",
        "/a#frag",
    ] {
        assert!(normalize_path(bad).is_err(), "{bad:?}");
    }
    // Only the path is judged: the query may hold anything.
    assert_eq!(norm("/a?b=%2F&c=\\"), "/a");
}

#[test]
fn normalised_spellings_meet_the_same_rules() {
    let r = rules(&[allow("GET", "/v1/**"), deny("*", "/v1/admin/**")]);
    for raw in [
        "/v1/admin/x",
        "/v1//admin/x",
        "/v1/./admin/x",
        "/v1/x/../admin/x",
        "/v1/%61dmin/x",
        "/v1/%2e/admin",
    ] {
        assert!(!ok(&r, "GET", &norm(raw)), "{raw}");
    }
    assert!(!ok(&r, "GET", &norm("/v1/../admin")));
    // Deny rules match case-insensitively (lenient origins route /Admin to /admin).
    assert!(!ok(&r, "GET", &norm("/v1/%41dmin/x")));
    assert!(ok(&r, "GET", &norm("/v1/%41dmins/x")));
}

fn inspecting(name: &str, host: &str, reqs: Vec<RequestRuleConfig>) -> RuleConfig {
    RuleConfig {
        name: Some(name.into()),
        host: Some(host.into()),
        inspect: Some("http".into()),
        requests: reqs,
        ..cfg(Action::Allow)
    }
}

fn inspect_of(v: &Verdict) -> Option<Arc<RequestRules>> {
    match v {
        Verdict::Allow(a) => a.inspect.clone(),
        Verdict::Deny(d) => panic!("denied: {d}"),
    }
}

#[test]
fn rule_errors_name_the_rule_and_the_field() {
    let plain = RuleConfig {
        host: Some("a.example".into()),
        requests: vec![allow("GET", "/")],
        ..cfg(Action::Allow)
    };
    let e = Policy::from_rules(&[plain]).unwrap_err().to_string();
    assert!(
        e.contains("rules[0]") && e.contains("requests") && e.contains("inspect"),
        "{e}"
    );

    let https = RuleConfig {
        inspect: Some("https".into()),
        ..inspecting("x", "a.example", vec![])
    };
    let e = Policy::from_rules(&[https]).unwrap_err().to_string();
    assert!(e.contains("\"x\"") && e.contains("inspect"), "{e}");

    let upper = RuleConfig {
        inspect: Some("HTTP".into()),
        ..inspecting("x", "a.example", vec![])
    };
    assert!(Policy::from_rules(&[upper]).is_err());

    let deny_inspect = RuleConfig {
        action: Action::Deny,
        ..inspecting("d", "a.example", vec![])
    };
    let e = Policy::from_rules(&[deny_inspect]).unwrap_err().to_string();
    assert!(e.contains("\"d\"") && e.contains("inspect"), "{e}");

    let bad = inspecting(
        "api",
        "a.example",
        vec![allow("GET", "/"), allow("GET", "nope")],
    );
    let e = Policy::from_rules(&[bad]).unwrap_err().to_string();
    assert!(e.contains("\"api\"") && e.contains("requests[1]"), "{e}");
}

#[test]
fn toml_request_rules_compile() {
    let p = Policy::parse_toml(
        r#"
[[rules]]
name = "api"
action = "allow"
host = "api.example.com"
ports = [443, 8080]
inspect = "http"
requests = [
  { action = "allow", method = "GET",  path = "/v1/**" },
  { action = "deny",  method = "*",    path = "/v1/admin/**" },
]
"#,
    )
    .unwrap();
    let r = inspect_of(&verdict(&p, "api.example.com", 8080, &["93.184.216.34"])).unwrap();
    assert_eq!(r.rule_name().as_ref(), "api");
    assert_eq!(
        r.check("GET", "/v1/admin/users"),
        RequestVerdict::Deny("api requests[1]".into())
    );
    assert!(ok(&r, "GET", "/v1/users"));
    assert!(Policy::parse_toml(
        "[[rules]]\naction = \"allow\"\nhost = \"a\"\ninspect = \"http\"\nrequests = [{ action = \"allow\", verb = \"GET\" }]\n"
    )
    .is_err());
}

#[test]
fn allowed_carries_the_allowing_rules_request_rules() {
    let p = Policy::from_rules(&[
        inspecting("api", "api.example.com", vec![allow("GET", "/**")]),
        parse_cli_rule(Action::Allow, "other.example.com").unwrap(),
    ])
    .unwrap();
    let r = inspect_of(&verdict(&p, "api.example.com", 80, &["93.184.216.34"])).unwrap();
    assert!(ok(&r, "GET", "/x") && !ok(&r, "POST", "/x"));
    assert!(inspect_of(&verdict(&p, "other.example.com", 80, &["93.184.216.34"])).is_none());
    // The builtin default and plain CLI rules never inspect.
    let d = Policy::builtin_default();
    assert!(inspect_of(&verdict(&d, "example.com", 443, &["93.184.216.34"])).is_none());
}

#[test]
fn an_inspecting_rule_beats_a_plain_allow_for_the_same_address() {
    let plain_first = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, "*:80").unwrap(),
        inspecting("api", "api.example.com", vec![deny("*", "/admin/**")]),
    ])
    .unwrap();
    let v = verdict(&plain_first, "api.example.com", 80, &["93.184.216.34"]);
    let Verdict::Allow(a) = &v else {
        panic!("{v:?}")
    };
    assert_eq!(a.rule.as_ref(), "api");
    assert!(!ok(a.inspect.as_ref().unwrap(), "GET", "/admin/x"));
    // Other hosts keep the plain rule.
    let v = verdict(&plain_first, "www.example.com", 80, &["93.184.216.34"]);
    let Verdict::Allow(a) = &v else {
        panic!("{v:?}")
    };
    assert_eq!(a.rule.as_ref(), "--allow *:80");
    assert!(a.inspect.is_none());
}

#[test]
fn every_address_is_dialled_under_the_strictest_treatment() {
    // 93.184.216.34 is allowed plainly (by address); 93.184.216.35 by the
    // inspecting rule: whatever the order, every vetted address is dialled
    // inspected, since the connection may land on either.
    let mut inspect_by_cidr = inspecting("api", "api.example.com", vec![]);
    inspect_by_cidr.host = None;
    inspect_by_cidr.cidr = Some("93.184.216.35/32".into());
    let p = Policy::from_rules(&[
        parse_cli_rule(Action::Allow, "93.184.216.34").unwrap(),
        inspect_by_cidr,
    ])
    .unwrap();
    for addrs in [
        ["93.184.216.34", "93.184.216.35"],
        ["93.184.216.35", "93.184.216.34"],
    ] {
        let v = verdict(&p, "api.example.com", 80, &addrs);
        let Verdict::Allow(a) = &v else {
            panic!("{v:?}")
        };
        assert!(a.inspect.is_some(), "{addrs:?}");
        assert_eq!(a.addrs, addrs.map(ip).to_vec());
    }
    // The plain address alone stays raw.
    let v = verdict(&p, "api.example.com", 80, &["93.184.216.34"]);
    assert!(inspect_of(&v).is_none());
}

#[test]
fn special_addresses_still_need_naming_when_inspecting() {
    let p = Policy::from_rules(&[inspecting("all", "*", vec![])]).unwrap();
    assert!(matches!(
        unfixed(verdict(&p, "evil.example", 80, &["10.0.0.1"])),
        Verdict::Deny(Denial::SpecialAddress(..))
    ));
    let mut lan = inspecting("lan", "*", vec![]);
    lan.host = None;
    lan.cidr = Some("10.0.0.0/8".into());
    let p = Policy::from_rules(&[inspecting("all", "*", vec![]), lan]).unwrap();
    let v = literal(&p, "10.1.2.3", 80);
    let Verdict::Allow(a) = &v else {
        panic!("{v:?}")
    };
    assert_eq!(a.rule.as_ref(), "lan");
}

#[test]
fn cli_inspect_allows_and_inspects_every_request() {
    let r = parse_cli_inspect("api.example.com:8080").unwrap();
    assert_eq!(r.name.as_deref(), Some("--inspect api.example.com:8080"));
    assert_eq!(r.action, Action::Allow);
    assert_eq!(r.inspect.as_deref(), Some("http"));
    assert!(r.requests.is_empty());
    let p = Policy::from_rules(&[r]).unwrap();
    let rr = inspect_of(&verdict(&p, "api.example.com", 8080, &["93.184.216.34"])).unwrap();
    assert_eq!(
        rr.check("DELETE", "/anything"),
        RequestVerdict::Allow("--inspect api.example.com:8080".into())
    );
    assert!(matches!(
        verdict(&p, "api.example.com", 80, &["93.184.216.34"]),
        Verdict::Deny(_)
    ));
    let c = parse_cli_inspect("[fd00::/8]:1-1024").unwrap();
    assert_eq!(c.cidr.as_deref(), Some("fd00::/8"));
    for bad in ["", ":80", "a.example:0", "a.example:99999", "*.*.example"] {
        let e = parse_cli_inspect(bad).unwrap_err().to_string();
        assert!(e.contains("--inspect"), "{bad:?}: {e}");
    }
}

#[test]
fn readme_inspection_example_compiles() {
    let readme = include_str!("../../../docs/https.md");
    let section = readme
        .find("## HTTP inspection and the forward proxy")
        .expect("docs/https.md has the section");
    let start = section + readme[section..].find("```toml\n").expect("a TOML example") + 8;
    let end = start + readme[start..].find("```").expect("closed");
    let p = Policy::parse_toml(&readme[start..end]).expect("the documented example compiles");
    let r = inspect_of(&verdict(&p, "api.example.com", 80, &["93.184.216.34"])).unwrap();
    assert!(ok(&r, "GET", "/v1/users"));
    assert!(!ok(&r, "GET", "/v1/admin/users"));
    assert!(!ok(&r, "POST", "/v1/users"));
}
