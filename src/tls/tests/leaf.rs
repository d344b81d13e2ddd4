//! Minted leaves and the cache; the `portcullis ca` text.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{domain, Fixture};
use crate::policy::Host;
use crate::tls::der::parse_cert;
use crate::tls::instructions::{ca_env, ca_instructions, CA_ENV_VARS};
use crate::tls::leaf::{LeafCache, LEAF_VALIDITY};
use crate::tls::{LeafKeys, Minter};

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
    let bundle = Path::new("/home/me/.local/state/portcullis/trust bundle.pem");
    let text = ca_instructions(ca, Some(bundle));
    assert!(text.contains("curl --cacert /home/me/.local/state/portcullis/ca.pem"));
    for (var, _) in CA_ENV_VARS {
        assert!(text.contains(&format!("export {var}=")), "{var}\n{text}");
    }
    assert!(text.contains("export NODE_EXTRA_CA_CERTS=/home/me/.local/state/portcullis/ca.pem"));
    assert!(
        text.contains("export SSL_CERT_FILE='/home/me/.local/state/portcullis/trust bundle.pem'")
    );
    let env = ca_env(ca, None);
    assert!(env.iter().all(|(_, p)| p == ca));
    assert!(ca_instructions(ca, None).contains("replace the tool's trusted roots"));
}
