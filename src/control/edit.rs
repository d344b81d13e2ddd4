//! Policy edits for `add-rule` and `remove-rule`: each builds a new policy
//! from the one in force, or says why not (and then nothing changes).

use crate::policy::{Policy, RuleConfig};

/// The policy in force plus `rule`, appended. The rule must be named (so
/// `remove-rule` can find it) and its name unused.
pub(crate) fn add_rule(current: &Policy, rule: &RuleConfig) -> Result<Policy, String> {
    let Some(name) = rule.name.as_deref() else {
        return Err("add-rule needs a rule with a name (remove-rule finds rules by name)".into());
    };
    if current.rule_names().iter().any(|n| &**n == name) {
        return Err(format!(
            "a rule named {name:?} exists already: remove it first, or replace the policy"
        ));
    }
    let added = Policy::from_rules(std::slice::from_ref(rule)).map_err(|e| e.to_string())?;
    let mut next = current.clone();
    next.extend(added);
    Ok(next)
}

/// The policy in force without the rules named `name` (all of them, should
/// a file have named several alike).
pub(crate) fn remove_rule(current: &Policy, name: &str) -> Result<Policy, String> {
    let mut next = current.clone();
    if next.remove_rule(name) {
        Ok(next)
    } else {
        Err(format!("no rule named {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{parse_cli_rule, Action, Target, Verdict};

    fn names(p: &Policy) -> Vec<String> {
        p.rule_names().iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn add_then_remove() {
        let base =
            Policy::from_rules(&[parse_cli_rule(Action::Allow, "a.test:443").unwrap()]).unwrap();
        let mut rule = parse_cli_rule(Action::Deny, "b.test").unwrap();
        rule.name = Some("no-b".into());
        let added = add_rule(&base, &rule).unwrap();
        assert_eq!(names(&added), ["--allow a.test:443", "no-b"]);
        assert_eq!(
            names(&base),
            ["--allow a.test:443"],
            "the old policy is untouched"
        );
        let t = Target::new("b.test", 443).unwrap();
        let ip = "192.0.2.1".parse().unwrap();
        assert!(matches!(added.check_resolved(&t, &[ip]), Verdict::Deny(_)));

        let again = add_rule(&added, &rule).unwrap_err();
        assert!(again.contains("exists already"), "{again}");
        let removed = remove_rule(&added, "no-b").unwrap();
        assert_eq!(names(&removed), ["--allow a.test:443"]);
        assert!(remove_rule(&removed, "no-b")
            .unwrap_err()
            .contains("no rule named"));
    }

    #[test]
    fn a_rule_must_be_named_and_compile() {
        let base = Policy::default();
        let mut rule = parse_cli_rule(Action::Allow, "a.test").unwrap();
        rule.name = None;
        assert!(add_rule(&base, &rule)
            .unwrap_err()
            .contains("needs a rule with a name"));
        rule.name = Some("bad".into());
        rule.ports = vec![crate::policy::PortSpec::Text("9-1".into())];
        let e = add_rule(&base, &rule).unwrap_err();
        assert!(e.contains("bad") && e.contains("9 > 1"), "{e}");
    }
}
