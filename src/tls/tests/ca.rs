//! The CA: generate then reuse, concurrent first starts, load errors.

use std::path::Path;
use std::sync::Arc;

use super::pair::pair;
use super::{domain, TempDir};
use crate::tls::ca::{file_mode, CertAuthority, CERT_FILE, KEY_FILE};
use crate::tls::layer::{LayerLimits, TlsLayer};
use crate::tls::{ClientConfigs, LeafKeys, Minter};

#[test]
fn generated_once_then_reused() {
    let tmp = TempDir::new();
    let dir = tmp.path().join("state/portcullis");
    let a = CertAuthority::load_or_generate(&dir).unwrap();
    assert_eq!(file_mode(&dir.join(KEY_FILE)).unwrap(), 0o600);
    assert_eq!(file_mode(&dir).unwrap(), 0o700);
    assert_eq!(a.cert_path(), dir.join(CERT_FILE));
    assert!(a.cert_pem().starts_with("-----BEGIN CERTIFICATE-----\n"));
    let on_disk = std::fs::read_to_string(dir.join(CERT_FILE)).unwrap();
    assert_eq!(a.cert_pem(), on_disk, "our PEM encoder matches rcgen's");

    let b = CertAuthority::load_or_generate(&dir).unwrap();
    assert_eq!(a.cert_der(), b.cert_der(), "the second start reuses the CA");
    let ten_years = 10 * 365 * 86_400;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((a.not_after() - now - ten_years).abs() < 86_400);

    let facts = crate::tls::der::parse_cert(a.cert_der()).unwrap();
    assert!(facts.is_ca);
    assert_eq!(facts.key_cert_sign, Some(true));
    let cn = &facts.subject[0][0];
    assert_eq!(cn.oid, vec![2, 5, 4, 3]);
    assert!(std::str::from_utf8(cn.value)
        .unwrap()
        .starts_with("portcullis local CA"));
}

/// Whoever may write the state directory may swap the CA the proxy reuses:
/// such a directory is refused, to generate in and to reuse from, and a
/// key there that others may read is made private (audit-8, H4).
#[test]
fn a_state_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let tmp = TempDir::new();
    let dir = tmp.path().join("shared");
    for mode in [0o777, 0o775, 0o1777] {
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, mode);
        let e = CertAuthority::load_or_generate(&dir).unwrap_err();
        assert_eq!(e.path, dir);
        assert!(e.message.contains("writable by"), "{e}");
        assert!(e.message.contains("chmod 700"), "{e}");
        assert!(!dir.join(CERT_FILE).exists(), "nothing generated there");
        let e = CertAuthority::check_config(None, None, &dir).unwrap_err();
        assert!(e.message.contains("writable by"), "{e}");
    }
    // Made private, the CA is generated; opened up again, it is not reused.
    chmod(&dir, 0o700);
    let first = CertAuthority::load_or_generate(&dir).unwrap();
    chmod(&dir, 0o757);
    let e = CertAuthority::load_or_generate(&dir).unwrap_err();
    assert!(e.message.contains("writable by others (mode 0757)"), "{e}");
    chmod(&dir, 0o755);
    // A key others may read: reused, and tightened to 0600.
    chmod(&dir.join(KEY_FILE), 0o644);
    let warnings = CertAuthority::check_config(None, None, &dir).unwrap();
    assert!(
        warnings[0].contains("readable by group or others"),
        "{warnings:?}"
    );
    assert_eq!(
        file_mode(&dir.join(KEY_FILE)).unwrap(),
        0o644,
        "--check writes nothing"
    );
    let again = CertAuthority::load_or_generate(&dir).unwrap();
    assert_eq!(first.cert_der(), again.cert_der());
    assert_eq!(file_mode(&dir.join(KEY_FILE)).unwrap(), 0o600);
    assert!(CertAuthority::check_config(None, None, &dir)
        .unwrap()
        .is_empty());
}

/// A state directory, or a CA file in it, that another user owns is
/// refused: its owner could swap the CA, whatever the modes say. (The
/// tests run as root, who may hand files to `nobody`.)
#[test]
fn a_state_directory_another_user_owns_is_refused() {
    use std::os::unix::fs::chown;
    const NOBODY: u32 = 65534;
    let tmp = TempDir::new();
    let dir = tmp.path().join("theirs");
    std::fs::create_dir_all(&dir).unwrap();
    chown(&dir, Some(NOBODY), None).expect("chown (the tests run as root)");
    let e = CertAuthority::load_or_generate(&dir).unwrap_err();
    assert!(e.message.contains("belongs to uid 65534"), "{e}");
    assert!(!dir.join(CERT_FILE).exists(), "nothing generated there");
    let e = CertAuthority::check_config(None, None, &dir).unwrap_err();
    assert!(e.message.contains("belongs to uid 65534"), "{e}");
    // Ours again, a CA is made; a key handed to another user is refused.
    chown(&dir, Some(0), None).unwrap();
    let first = CertAuthority::load_or_generate(&dir).unwrap();
    chown(dir.join(KEY_FILE), Some(NOBODY), None).unwrap();
    let e = CertAuthority::load_or_generate(&dir).unwrap_err();
    assert_eq!(e.path, dir.join(KEY_FILE));
    assert!(e.message.contains("belongs to uid 65534"), "{e}");
    chown(dir.join(KEY_FILE), Some(0), None).unwrap();
    let again = CertAuthority::load_or_generate(&dir).unwrap();
    assert_eq!(first.cert_der(), again.cert_der());
}

#[test]
fn concurrent_first_starts_agree() {
    let tmp = TempDir::new();
    let dir = Arc::new(tmp.path().join("state"));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let dir = dir.clone();
            std::thread::spawn(move || CertAuthority::load_or_generate(&dir).unwrap())
        })
        .collect();
    let cas: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for ca in &cas[1..] {
        assert_eq!(ca.cert_der(), cas[0].cert_der());
    }
    let leftovers: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn err(cert: &Path, key: &Path) -> String {
    CertAuthority::load(cert, key).unwrap_err().to_string()
}

#[test]
fn load_errors_name_the_file() {
    let tmp = TempDir::new();
    let d = tmp.path();
    let good = CertAuthority::load_or_generate(&d.join("good")).unwrap();
    let cert = d.join("good").join(CERT_FILE);
    let key = d.join("good").join(KEY_FILE);
    assert!(CertAuthority::load(&cert, &key).is_ok());

    let missing = d.join("missing.pem");
    let e = err(&missing, &key);
    assert!(
        e.starts_with(&missing.display().to_string()) && e.contains("cannot read"),
        "{e}"
    );

    let junk = write(d, "junk.pem", "hello\n");
    let e = err(&junk, &key);
    assert!(
        e.contains("junk.pem") && e.contains("no CERTIFICATE"),
        "{e}"
    );
    let e = err(&cert, &junk);
    assert!(
        e.contains("junk.pem") && e.contains("no PRIVATE KEY"),
        "{e}"
    );

    // A leaf is not a CA.
    let leaf = rcgen::generate_simple_self_signed(vec!["a.test".into()]).unwrap();
    let leaf_cert = write(d, "leaf.pem", &leaf.cert.pem());
    let leaf_key = write(d, "leaf-key.pem", &leaf.signing_key.serialize_pem());
    let e = err(&leaf_cert, &leaf_key);
    assert!(e.contains("leaf.pem") && e.contains("not a CA"), "{e}");

    // The key of another CA.
    let e = err(&cert, &leaf_key);
    assert!(
        e.contains("leaf-key.pem") && e.contains("does not match"),
        "{e}"
    );

    // SEC1 ("EC PRIVATE KEY"): told how to convert.
    let sec1 = write(
        d,
        "sec1.pem",
        "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
    );
    let e = err(&cert, &sec1);
    assert!(e.contains("PKCS#8") && e.contains("openssl pkcs8"), "{e}");

    let enc = write(
        d,
        "enc.pem",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    assert!(err(&cert, &enc).contains("encrypted"));

    // One of the pair without the other.
    let e = CertAuthority::from_config(Some(&cert), None, d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ca_key is not"), "{e}");
    let e = CertAuthority::from_config(None, Some(&key), d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ca_cert is not"), "{e}");
    drop(good);
}

/// A CA made elsewhere (PrintableString names, several attributes, its own
/// key identifier): leaves chain to it and verify.
#[test]
fn external_ca_signs_verifiable_leaves() {
    let tmp = TempDir::new();
    let d = tmp.path();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(
        rcgen::DnType::CountryName,
        rcgen::DnValue::PrintableString("SE".try_into().unwrap()),
    );
    dn.push(rcgen::DnType::OrganizationName, "Example Corp");
    dn.push(
        rcgen::DnType::CommonName,
        rcgen::DnValue::PrintableString("Example Root".try_into().unwrap()),
    );
    params.distinguished_name = dn;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(vec![7; 20]);
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(100);
    let cert = params.self_signed(&key).unwrap();
    let cert_path = write(d, "ext.pem", &cert.pem());
    let key_path = write(d, "ext-key.pem", &key.serialize_pem());

    let ca = Arc::new(CertAuthority::load(&cert_path, &key_path).unwrap());
    let minter = Minter::new(ca.clone(), LeafKeys::PerLeaf).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der().clone()).unwrap();
    let clients = ClientConfigs::with_roots(roots);

    let name = domain("example.test");
    let (mut cw, mut sw) = pair(8192);
    let mut c = TlsLayer::client(clients.config(), &name, LayerLimits::default()).unwrap();
    let mut accept = crate::tls::accept::TlsAccept::new(&[], LayerLimits::default());
    c.flush(&mut cw);
    assert!(matches!(
        accept.poll(&mut sw),
        crate::tls::accept::HelloPoll::Ready(_)
    ));
    let mut s = accept
        .complete(crate::tls::ServerConfigs::new().for_leaf(minter.mint(&name).unwrap().key))
        .map_err(|(f, _)| f)
        .unwrap();
    for _ in 0..100 {
        s.flush(&mut sw);
        c.flush(&mut cw);
    }
    assert!(!c.is_handshaking() && !s.is_handshaking(), "{c:?} {s:?}");
    // The leaf's authorityKeyIdentifier is the CA's own identifier.
    let leaf = minter.mint(&name).unwrap();
    let der = leaf.key.end_entity_cert().unwrap();
    assert!(der.windows(20).any(|w| w == [7; 20]));
}

#[test]
fn expired_ca_is_refused() {
    let tmp = TempDir::new();
    let d = tmp.path();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    let c = write(d, "old.pem", &cert.pem());
    let k = write(d, "old-key.pem", &key.serialize_pem());
    let e = err(&c, &k);
    assert!(e.contains("expired on 2001-01-01"), "{e}");
}
