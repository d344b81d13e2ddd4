//! Rules built in code rather than read from a file: [`RuleConfig::allow`],
//! [`RuleConfig::deny`] and [`RuleConfig::builder`] start a [`RuleBuilder`];
//! [`RequestRuleConfig::allow`] and [`RequestRuleConfig::deny`] make request
//! rules. What they build is exactly a `[[rules]]` table, checked when the
//! policy is compiled ([`super::Policy::from_rules`]).
//!
//! ```
//! use portcullis::policy::{Policy, RequestRuleConfig, RuleConfig};
//!
//! let api = RuleConfig::allow("api.example.com")
//!     .name("api")
//!     .port(443)
//!     .terminate_tls()
//!     .request(RequestRuleConfig::allow("GET", "/v1/**"))
//!     .request(RequestRuleConfig::deny("*", "/v1/admin/**"))
//!     .build();
//! let pypi = RuleConfig::allow("pypi.org").host("files.pythonhosted.org").port(443).build();
//! let policy = Policy::from_rules(&[api, pypi]).unwrap();
//! assert_eq!(policy.len(), 2);
//! ```

use std::time::Duration;

use super::spec::{Action, MatchMode, PortSpec, RequestRuleConfig, RuleConfig, RuleMode, TlsMode};

impl Default for RuleConfig {
    /// An unnamed deny rule matching nothing yet (a rule needs a host or a
    /// CIDR to compile): deny, so that a rule left half-filled refuses.
    fn default() -> RuleConfig {
        RuleConfig::new(Action::Deny)
    }
}

impl RuleConfig {
    /// Starts an allow rule for the host pattern `host` (`example.com`,
    /// `*.example.com`, `*`, or an address literal).
    pub fn allow(host: impl Into<String>) -> RuleBuilder {
        RuleConfig::builder(Action::Allow).host(host)
    }

    /// Starts a deny rule for the host pattern `host`.
    pub fn deny(host: impl Into<String>) -> RuleBuilder {
        RuleConfig::builder(Action::Deny).host(host)
    }

    /// Starts a rule of `action` with no host yet (add hosts or CIDRs).
    pub fn builder(action: Action) -> RuleBuilder {
        RuleBuilder {
            rule: RuleConfig::new(action),
        }
    }
}

/// Builds a [`RuleConfig`] step by step; each method sets the file key of
/// the same name.
#[derive(Debug, Clone)]
#[must_use]
pub struct RuleBuilder {
    rule: RuleConfig,
}

impl RuleBuilder {
    /// `name`: shown in logs, metrics and `X-Proxy-Error`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.rule.name = Some(name.into());
        self
    }

    /// Adds a host pattern (`hosts`).
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.rule.hosts.push(host.into());
        self
    }

    /// Adds a CIDR (`cidrs`), e.g. `10.20.0.0/16`.
    pub fn cidr(mut self, cidr: impl Into<String>) -> Self {
        self.rule.cidrs.push(cidr.into());
        self
    }

    /// Adds a port (`ports`); no port means every port.
    pub fn port(mut self, port: u16) -> Self {
        self.rule.ports.push(PortSpec::Number(port));
        self
    }

    /// Adds a port range `lo`-`hi`, inclusive (`ports`).
    pub fn port_range(mut self, lo: u16, hi: u16) -> Self {
        self.rule.ports.push(PortSpec::Text(format!("{lo}-{hi}")));
        self
    }

    /// `match = "both"`: a listed name, only when it resolves into a listed CIDR.
    pub fn match_both(mut self) -> Self {
        self.rule.match_mode = Some(MatchMode::Both);
        self
    }

    /// `mode = "audit"`: this rule's denials are logged as would-deny and let through.
    pub fn audit(mut self) -> Self {
        self.rule.mode = Some(RuleMode::Audit);
        self
    }

    /// `idle_timeout`: for tunnels this rule allows; `None` is `"off"`.
    pub fn idle_timeout(mut self, idle: Option<Duration>) -> Self {
        self.rule.idle_timeout = Some(match idle {
            // At least a millisecond: "0ms" would read as "off".
            Some(d) => super::describe_duration(d.max(Duration::from_millis(1))),
            None => "off".into(),
        });
        self
    }

    /// `inspect = "http"`: check every HTTP/1.1 request (allow rules only).
    pub fn inspect(mut self) -> Self {
        self.rule.inspect = Some("http".into());
        self
    }

    /// `tls = "terminate"`: terminate TLS with the local CA and inspect the
    /// HTTP/1.1 inside (implies [`inspect`](Self::inspect)).
    pub fn terminate_tls(mut self) -> Self {
        self.rule.tls = Some(TlsMode::Terminate);
        self
    }

    /// `upgrades`: the `Upgrade` tokens an inspected connection may switch
    /// to raw bytes for (default `["websocket"]`; none: no upgrades).
    pub fn upgrades<I, S>(mut self, tokens: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rule.upgrades = Some(tokens.into_iter().map(Into::into).collect());
        self
    }

    /// Adds a request rule (`requests`); needs inspection. With any request
    /// rule, a request no allow request rule matches is denied.
    pub fn request(mut self, request: RequestRuleConfig) -> Self {
        self.rule.requests.push(request);
        self
    }

    /// The rule.
    pub fn build(self) -> RuleConfig {
        self.rule
    }
}

impl From<RuleBuilder> for RuleConfig {
    fn from(b: RuleBuilder) -> RuleConfig {
        b.build()
    }
}

impl RequestRuleConfig {
    /// A request rule of `action` for any method and path (`/**`).
    pub fn new(action: Action) -> RequestRuleConfig {
        RequestRuleConfig {
            action,
            method: None,
            path: None,
        }
    }

    /// Allows `method` (exact, or `*`) on paths matching the glob `path`.
    pub fn allow(method: impl Into<String>, path: impl Into<String>) -> RequestRuleConfig {
        RequestRuleConfig::new(Action::Allow)
            .method(method)
            .path(path)
    }

    /// Denies `method` (case-insensitive, or `*`) on paths matching the glob `path`.
    pub fn deny(method: impl Into<String>, path: impl Into<String>) -> RequestRuleConfig {
        RequestRuleConfig::new(Action::Deny)
            .method(method)
            .path(path)
    }

    /// Sets the method.
    pub fn method(mut self, method: impl Into<String>) -> RequestRuleConfig {
        self.method = Some(method.into());
        self
    }

    /// Sets the path glob.
    pub fn path(mut self, path: impl Into<String>) -> RequestRuleConfig {
        self.path = Some(path.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Host, Policy, RequestVerdict, Target, Verdict};

    #[test]
    fn builds_what_a_file_would_say() {
        let built = RuleConfig::allow("api.test")
            .name("api")
            .port(80)
            .port_range(8000, 8100)
            .idle_timeout(Some(Duration::from_secs(300)))
            .inspect()
            .request(RequestRuleConfig::allow("GET", "/v1/**"))
            .build();
        let file: RuleConfig = toml::from_str(
            r#"
name = "api"
action = "allow"
hosts = ["api.test"]
ports = [80, "8000-8100"]
idle_timeout = "5m"
inspect = "http"
requests = [{ action = "allow", method = "GET", path = "/v1/**" }]
"#,
        )
        .unwrap();
        assert_eq!(built, file);
        let p = Policy::from_rules(&[built]).unwrap();
        let t = Target::new("api.test", 8050).unwrap();
        let Verdict::Allow(a) = p.check_resolved(&t, &["93.184.216.34".parse().unwrap()]) else {
            panic!("allowed")
        };
        let rules = a.inspect.expect("inspected");
        assert!(matches!(
            rules.check("GET", "/v1/x"),
            RequestVerdict::Allow(_)
        ));
        assert!(matches!(
            rules.check("POST", "/v1/x"),
            RequestVerdict::Deny(_)
        ));
        assert_eq!(t.host, Host::Domain("api.test".into()));
    }

    #[test]
    fn defaults_refuse() {
        let d = RuleConfig::default();
        assert_eq!(d.action, Action::Deny);
        assert!(
            Policy::from_rules(&[d]).is_err(),
            "matches nothing: not a rule yet"
        );
        let r = RuleConfig::builder(Action::Allow)
            .cidr("10.0.0.0/8")
            .build();
        assert!(Policy::from_rules(&[r]).is_ok());
        assert_eq!(
            RuleConfig::deny("x.test")
                .idle_timeout(None)
                .build()
                .idle_timeout
                .as_deref(),
            Some("off")
        );
    }
}
