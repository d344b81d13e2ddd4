//! Secrets: a placeholder in a request header is replaced by the value for
//! the secret's hosts and refused (403 `secret-not-allowed`) elsewhere, in
//! a tunnel and on the forward proxy; split at every byte both ways.

use std::sync::Arc;

use super::exchange_sim::*;
use crate::policy::secret::{placeholder, SecretConfig, Secrets};
use crate::protocol::http1::{Decision, ExchangeConfig, Mode};
use crate::target::Target;

const KEY: [u8; 32] = [7; 32];
const VALUE: &str = "sk-the-real-value";

fn ph() -> String {
    placeholder(&KEY, "TOKEN")
}

/// A secret for `hosts` (and `headers`), allowed over plaintext HTTP: the
/// simulated exchanges here are plaintext.
fn secrets(hosts: &[&str], headers: Option<&[&str]>) -> Arc<Secrets> {
    secrets_tls_only(hosts, headers, true)
}

fn secrets_tls_only(hosts: &[&str], headers: Option<&[&str]>, plaintext: bool) -> Arc<Secrets> {
    let c = SecretConfig {
        name: "TOKEN".into(),
        env: Some("UNUSED".into()),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        headers: headers.map(|hs| hs.iter().map(|h| h.to_string()).collect()),
        plaintext,
        ..SecretConfig::default()
    };
    Arc::new(Secrets::with_values(&[(c, VALUE)], &KEY))
}

/// Without `plaintext = true` the value goes only inside TLS: a plaintext
/// tunnel and the forward proxy's `http://` are refused (anyone on the
/// path would read it, and nothing authenticated the host), the forward
/// proxy's `https://` gets it.
#[test]
fn plaintext_http_is_refused_unless_the_secret_allows_it() {
    let ph = ph();
    let s = secrets_tls_only(&["origin.test"], None, false);
    let plain_tunnel =
        format!("GET /a HTTP/1.1\r\nHost: origin.test\r\nAuthorization: Bearer {ph}\r\n\r\n");
    let plain_forward = format!(
        "GET http://origin.test/a HTTP/1.1\r\nHost: origin.test\r\nAuthorization: Bearer {ph}\r\n\r\n"
    );
    for (c, sent) in [(tunnel(), plain_tunnel), (forward(), plain_forward)] {
        let out = run_split(&with(c, s.clone()), &Script::new(&sent, vec![]));
        assert_eq!(out.upstream_text(), "", "{sent}");
        let r = responses(&out.to_client, &["GET"]);
        assert_eq!(r[0].status, 403, "{sent}");
        assert_eq!(
            r[0].header("X-Proxy-Error").unwrap(),
            "secret-not-allowed; secret=TOKEN"
        );
        assert!(
            r[0].text().contains("only sent inside TLS") && !r[0].text().contains(VALUE),
            "{}",
            r[0].text()
        );
    }
    let mut c = with(forward(), s);
    c.mode = Mode::Forward {
        upstream: Target::new("origin.test", 443).unwrap(),
        tls: true,
    };
    let sent = format!(
        "GET https://origin.test/a HTTP/1.1\r\nHost: origin.test\r\nAuthorization: Bearer {ph}\r\n\r\n"
    );
    let out = run_split(&c, &Script::new(&sent, vec![Reply::on("GET /a", ok("ok"))]));
    let up = out.upstream_text();
    assert!(
        up.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
        "{up}"
    );
}

fn with(mut c: ExchangeConfig, s: Arc<Secrets>) -> ExchangeConfig {
    c.secrets = crate::core::verdicts::secrets(Some(s));
    c
}

#[test]
fn a_placeholder_inside_a_header_value_is_replaced_for_its_host() {
    let ph = ph();
    let sent = format!(
        "POST /v1 HTTP/1.1\r\nHost: origin.test\r\nAuthorization: Bearer {ph}\r\n\
         X-Both: {ph},{ph}\r\nContent-Length: 5\r\n\r\nhello"
    );
    let want = format!(
        "POST /v1 HTTP/1.1\r\nHost: origin.test\r\nAuthorization: Bearer {VALUE}\r\n\
         X-Both: {VALUE},{VALUE}\r\nContent-Length: 5\r\n\r\nhello"
    );
    let script = Script::new(&sent, vec![Reply::on("hello", ok("fine"))]);
    let out = run_split(&with(tunnel(), secrets(&["origin.test"], None)), &script);
    assert_eq!(
        out.upstream_text(),
        want,
        "the head rewritten, the body untouched"
    );
    let r = responses(&out.to_client, &["POST"]);
    assert_eq!((r[0].status, r[0].text()), (200, "fine".into()));
    assert!(!out.client_text().contains(VALUE));
}

#[test]
fn a_request_without_placeholders_goes_verbatim() {
    let sent = get("/plain");
    let script = Script::new(&sent, vec![Reply::on("GET /plain", ok("x"))]);
    let out = run_split(&with(tunnel(), secrets(&["origin.test"], None)), &script);
    assert_eq!(out.upstream_text(), sent);
}

#[test]
fn elsewhere_in_another_header_or_in_the_path_it_is_refused_and_the_connection_carries_on() {
    let ph = ph();
    let cases = [
        // Another host than the secret's.
        (
            secrets(&["api.test"], None),
            format!("GET /a HTTP/1.1\r\nHost: origin.test\r\nAuthorization: Bearer {ph}\r\n\r\n"),
            "may not be sent to origin.test:80",
        ),
        // A header the secret may not travel in.
        (
            secrets(&["origin.test"], Some(&["X-Api-Key"])),
            format!("GET /a HTTP/1.1\r\nHost: origin.test\r\nCookie: k={ph}\r\n\r\n"),
            "may not be sent in the Cookie header",
        ),
        // The request line.
        (
            secrets(&["origin.test"], None),
            format!("GET /a?k={ph} HTTP/1.1\r\nHost: origin.test\r\n\r\n"),
            "in the request line",
        ),
    ];
    for (s, refused, why) in cases {
        let client = refused + &get("/after");
        let script = Script::new(&client, vec![Reply::on("GET /after", ok("after"))]);
        let out = run_split(&with(tunnel(), s), &script);
        assert_eq!(
            out.upstream_text(),
            get("/after"),
            "{why}: nothing of it went"
        );
        let r = responses(&out.to_client, &["GET", "GET"]);
        assert_eq!(r[0].status, 403, "{why}");
        assert_eq!(
            r[0].header("X-Proxy-Error").unwrap(),
            "secret-not-allowed; secret=TOKEN"
        );
        assert!(r[0].text().contains(why), "{why}: {}", r[0].text());
        assert_eq!((r[1].status, r[1].text()), (200, "after".into()));
        match &out.records[0].decision {
            Decision::Refused { cause, reason, .. } => {
                assert_eq!(cause, "secret-not-allowed");
                assert!(reason.contains("secret TOKEN") && !reason.contains(VALUE));
            }
            d => panic!("{why}: {d:?}"),
        }
    }
}

#[test]
fn the_forward_proxy_injects_by_the_uris_host() {
    let ph = ph();
    let sent = format!(
        "GET http://origin.test/x HTTP/1.1\r\nHost: origin.test\r\nX-Api-Key: {ph}\r\n\r\n"
    );
    let script = Script::new(&sent, vec![Reply::on("GET /x", ok("ok"))]);
    let s = secrets(&["*.test"], Some(&["x-api-key"]));
    let out = run_split(&with(forward(), s.clone()), &script);
    let up = out.upstream_text();
    assert!(up.starts_with("GET /x HTTP/1.1\r\n"), "{up}");
    assert!(up.contains(&format!("X-Api-Key: {VALUE}\r\n")), "{up}");
    assert!(!up.contains(&ph));
    // Bound for a host outside `*.test` (the switch to it is the pump's),
    // the same header is refused.
    let mut c = with(forward(), s);
    c.mode = Mode::Forward {
        upstream: Target::new("origin.example", 80).unwrap(),
        tls: false,
    };
    let sent = format!(
        "GET http://origin.example/x HTTP/1.1\r\nHost: origin.example\r\nX-Api-Key: {ph}\r\n\r\n"
    );
    let out = run_split(&c, &Script::new(&sent, vec![]));
    assert_eq!(out.upstream_text(), "");
    let r = responses(&out.to_client, &["GET"]);
    assert_eq!(r[0].status, 403);
}
