//! Minted leaves and the cache; the `portcullis ca` text.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{domain, Fixture};
use crate::target::Host;
use crate::tls::der::parse_cert;
use crate::tls::instructions::{ca_bundles, ca_instructions, CA_ENV_VARS};
use crate::tls::leaf::{LeafCache, LEAF_VALIDITY};
use crate::tls::{LeafKeys, Minter};
use std::path::PathBuf;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn leaf_is_short_lived_and_chained() {
    let f = Fixture::new();
    let leaf = f.minter.mint(&domain("example.test")).unwrap();
    assert_eq!(leaf.key.cert.len(), 2, "leaf + CA");
    assert_eq!(&leaf.key.cert[1], f.ca.cert_der());
    let facts = parse_cert(&leaf.key.cert[0]).unwrap();
    assert!(!facts.is_ca);
    assert!((facts.not_before - (now() - 3600)).abs() < 60);
    let week = LEAF_VALIDITY.as_secs() as i64;
    assert!((facts.not_after - (now() + week)).abs() < 60);
    let ca = parse_cert(f.ca.cert_der()).unwrap();
    assert_eq!(facts.issuer_raw, ca.subject_raw);

    // Random serials: two mints of one name differ.
    let again = f.minter.mint(&domain("example.test")).unwrap();
    assert_ne!(leaf.key.cert[0], again.key.cert[0]);
    // Shared key: same public key; per-leaf keys: different ones.
    assert_eq!(
        facts.public_key,
        parse_cert(&again.key.cert[0]).unwrap().public_key
    );
    let per = Minter::new(f.ca.clone(), LeafKeys::PerLeaf).unwrap();
    let a = per.mint(&domain("a.test")).unwrap();
    let b = per.mint(&domain("a.test")).unwrap();
    assert_ne!(
        parse_cert(&a.key.cert[0]).unwrap().public_key,
        parse_cert(&b.key.cert[0]).unwrap().public_key
    );
}

#[test]
fn cache_is_bounded_and_keeps_what_is_used() {
    let f = Fixture::new();
    let mut cache = LeafCache::new(3);
    let names: Vec<Host> = (0..3).map(|i| domain(&format!("h{i}.test"))).collect();
    for n in &names {
        cache.get_or_mint(&f.minter, n).unwrap();
    }
    assert_eq!(cache.len(), 3);
    let t = SystemTime::now();
    let k0 = cache.get(&names[0], t).unwrap();
    cache.get(&names[2], t).unwrap();
    // h1 was not used since insertion: it goes first.
    cache.get_or_mint(&f.minter, &domain("h3.test")).unwrap();
    assert_eq!(cache.len(), 3);
    assert!(cache.get(&names[1], t).is_none());
    assert!(std::sync::Arc::ptr_eq(
        &k0,
        &cache.get(&names[0], t).unwrap()
    ));
    for i in 4..100 {
        cache
            .get_or_mint(&f.minter, &domain(&format!("h{i}.test")))
            .unwrap();
        assert!(cache.len() <= 3);
    }
    // A leaf due for renewal is a miss, and is replaced in place.
    let late = SystemTime::now() + LEAF_VALIDITY / 2 + Duration::from_secs(1);
    let name = domain("h99.test");
    assert!(cache.get(&name, SystemTime::now()).is_some());
    assert!(cache.get(&name, late).is_none());
}

#[test]
fn ca_text_has_every_line() {
    let ca = Path::new("/home/me/.local/state/portcullis/ca.pem");
    let bundle = PathBuf::from("/home/me/.local/state/portcullis/trust bundle.pem");
    let vars: Vec<_> = CA_ENV_VARS
        .iter()
        .map(|(v, _)| (*v, bundle.clone()))
        .collect();
    let text = ca_instructions(ca, &vars);
    assert!(text.contains("curl --cacert /home/me/.local/state/portcullis/ca.pem"));
    assert!(text.contains("eval \"$(portcullis ca --shell sh)\""));
    for (var, _) in CA_ENV_VARS {
        assert!(
            text.contains(&format!(
                "export {var}='/home/me/.local/state/portcullis/trust bundle.pem'"
            )),
            "{var}\n{text}"
        );
    }
}

/// Each variable's bundle: the CA plus what it named before, else the
/// system's roots (Node: the CA alone); by content hash, shared.
#[test]
fn bundles_keep_what_each_variable_held() {
    let dir = std::env::temp_dir().join(format!("portcullis-bundles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = rcgen::generate_simple_self_signed(vec!["ca.test".into()]).unwrap();
    let corp = rcgen::generate_simple_self_signed(vec!["corp.test".into()]).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.cert.pem()).unwrap();
    let corp_path = dir.join("corp.pem");
    std::fs::write(&corp_path, corp.cert.pem()).unwrap();
    let inherited = |var: &str| match var {
        "NODE_EXTRA_CA_CERTS" | "NPM_CONFIG_CAFILE" => Some(corp_path.clone().into()),
        "GIT_SSL_CAINFO" => Some("/nonexistent/bundle.pem".into()),
        "PIP_CERT" => Some(ca_path.clone().into()),
        _ => None,
    };
    let vars = ca_bundles(&ca_path, &ca.cert.pem(), &dir, inherited).unwrap();
    assert_eq!(vars.len(), CA_ENV_VARS.len());
    let get = |v: &str| vars.iter().find(|(n, _)| *n == v).unwrap().1.clone();
    let read = |v: &str| std::fs::read_to_string(get(v)).unwrap();
    // Node and npm: the corporate root, then the CA.
    for v in ["NODE_EXTRA_CA_CERTS", "NPM_CONFIG_CAFILE"] {
        let text = read(v);
        assert!(text.starts_with(&corp.cert.pem()), "{v}");
        assert!(text.ends_with(&ca.cert.pem()), "{v}");
        assert!(get(v)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("trust-"));
    }
    assert_eq!(get("NODE_EXTRA_CA_CERTS"), get("NPM_CONFIG_CAFILE"));
    // A value that holds the CA already is kept as it is.
    assert_eq!(get("PIP_CERT"), ca_path);
    // The rest (and an unreadable value): the system's roots plus the CA.
    let system = crate::tls::instructions::system_bundle();
    for v in ["SSL_CERT_FILE", "GIT_SSL_CAINFO", "DENO_CERT"] {
        let text = read(v);
        assert!(text.ends_with(&ca.cert.pem()), "{v}");
        if let Some(s) = &system {
            assert!(
                text.starts_with(&std::fs::read_to_string(s).unwrap()),
                "{v}"
            );
        }
    }
    assert_eq!(get("SSL_CERT_FILE"), get("DENO_CERT"));
    // The same content again: the same file.
    let again = ca_bundles(&ca_path, &ca.cert.pem(), &dir, |_| None).unwrap();
    assert_eq!(again[0].1, get("SSL_CERT_FILE"));
    std::fs::remove_dir_all(&dir).unwrap();
}
