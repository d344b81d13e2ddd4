//! The policy's answers to the exchange's questions: request rules as a
//! [`RequestJudge`], secrets as [`HeaderSecrets`]. The core hands these to
//! the exchange, so protocol code never imports the policy.

use std::sync::Arc;

use crate::policy::secret::Secrets;
use crate::policy::{RequestRules, RequestVerdict};
use crate::protocol::http1::exchange::{
    HeaderSecrets, Headers, RequestJudge, SecretRefusal, Verdict,
};
use crate::target::Target;

/// A rule's request rules, judging the exchange's requests.
#[derive(Debug)]
pub(crate) struct Rules(pub(crate) Arc<RequestRules>);

/// The policy's secrets, filling the exchange's headers.
#[derive(Debug)]
pub(crate) struct PolicySecrets(pub(crate) Arc<Secrets>);

/// Request rules for an exchange (`None`: every request allowed).
pub(crate) fn judge(rules: Option<Arc<RequestRules>>) -> Option<Arc<dyn RequestJudge>> {
    rules.map(|r| Arc::new(Rules(r)) as Arc<dyn RequestJudge>)
}

/// Secrets for an exchange (`None`: no secrets configured).
pub(crate) fn secrets(secrets: Option<Arc<Secrets>>) -> Option<Arc<dyn HeaderSecrets>> {
    secrets.map(|s| Arc::new(PolicySecrets(s)) as Arc<dyn HeaderSecrets>)
}

fn verdict(v: RequestVerdict) -> Verdict {
    match v {
        RequestVerdict::Allow(rule) => Verdict::Allow(rule),
        RequestVerdict::Deny(rule) => Verdict::Deny(rule),
        RequestVerdict::WouldDeny(rule) => Verdict::WouldDeny(rule),
    }
}

impl RequestJudge for Rules {
    fn request(&self, method: &str, path: &str) -> Verdict {
        verdict(self.0.check(method, path))
    }
    fn upgrade(&self, name: &str) -> Verdict {
        verdict(self.0.check_upgrade(name))
    }
}

impl HeaderSecrets for PolicySecrets {
    fn inject(
        &self,
        target: &str,
        headers: &[(String, Vec<u8>)],
        dest: &Target,
        tls: bool,
    ) -> Result<Option<Headers>, SecretRefusal> {
        self.0
            .inject(target, headers, dest, tls)
            .map_err(|r| SecretRefusal {
                secret: r.secret,
                why: r.why,
            })
    }
}
