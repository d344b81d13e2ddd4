//! The `[tls]` table: CA paths, relative paths, the state directory.

use super::*;

#[test]
fn tls_table() {
    let f = ConfigFile::parse(
        "[tls]\nca_cert = \"ca.pem\"\nca_key = \"/abs/ca.key\"\nupstream_ca = [\"a.pem\", \"b.pem\"]\nstate_dir = \"state\"\n",
    )
    .unwrap();
    assert_eq!(f.tls.ca_cert.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(
        f.tls.upstream_ca,
        [PathBuf::from("a.pem"), PathBuf::from("b.pem")]
    );
    assert_eq!(f.tls.state_dir.as_deref(), Some(Path::new("state")));
    let c = f.compile().unwrap();
    assert_eq!(c.tls.ca_key.as_deref(), Some(Path::new("/abs/ca.key")));
    // Absent: nothing, and the default state directory.
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(c.tls.ca_cert, None);
    assert!(c.tls.upstream_ca.is_empty());
    assert_eq!(c.tls.state_dir, default_state_dir());
    // Both or neither.
    let e = compile_err("[tls]\nca_cert = \"ca.pem\"\n");
    assert!(
        e.starts_with("tls.ca_cert: line 2, column 11: needs tls.ca_key too"),
        "{e}"
    );
    let e = compile_err("\n[tls]\nca_key = \"ca.key\"\n");
    assert!(
        e.starts_with("tls.ca_key: line 3, column 10: needs tls.ca_cert too"),
        "{e}"
    );
    let e = err("[tls]\nca_cert = \"\"\nca_key = \"k\"\n");
    assert!(
        e.starts_with("tls.ca_cert: line 2, column 11: must not be empty"),
        "{e}"
    );
    let e = err("[tls]\nca_certificate = \"x\"\n");
    assert!(e.contains("ca_certificate"), "{e}");
}

#[test]
fn tls_paths_are_relative_to_the_file() {
    let dir = std::env::temp_dir().join(format!("portcullis-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.toml");
    std::fs::write(
        &path,
        "[tls]\nca_cert = \"ca.pem\"\nca_key = \"/abs/ca.key\"\nupstream_ca = [\"up/a.pem\"]\n",
    )
    .unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(c.tls.ca_cert, Some(dir.join("ca.pem")));
    assert_eq!(c.tls.ca_key.as_deref(), Some(Path::new("/abs/ca.key")));
    assert_eq!(c.tls.upstream_ca, [dir.join("up/a.pem")]);
    // A file error names the file and the position.
    std::fs::write(&path, "[tls]\nca_key = \"k\"\n").unwrap();
    let e = Config::load(&path).unwrap_err();
    assert_eq!(e.path(), Some(path.as_path()));
    assert!(e.to_string().ends_with("tls.ca_key: line 2, column 10: needs tls.ca_cert too: give both (the CA's certificate and key) or neither (a CA is generated)"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn state_dir_default_follows_xdg_then_home() {
    // Pure on the environment it is given: checked through the same rules.
    let d = default_state_dir();
    match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
        (Some(x), _) if Path::new(&x).is_absolute() => {
            assert_eq!(d, Some(PathBuf::from(x).join("portcullis")))
        }
        (_, Some(h)) if Path::new(&h).is_absolute() => {
            assert_eq!(d, Some(PathBuf::from(h).join(".local/state/portcullis")))
        }
        _ => assert_eq!(d, None),
    }
    assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    assert_eq!(format_duration(Duration::from_secs(300)), "5m");
    assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(format_duration(Duration::from_secs(86400)), "1d");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
}

#[test]
fn upstream_roots_platform_by_default_webpki_on_request() {
    use crate::tls::UpstreamRoots;
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(c.tls.upstream_roots, UpstreamRoots::Platform);
    let c = Config::from_toml_str("[tls]\nupstream_roots = \"webpki\"\n").unwrap();
    assert_eq!(c.tls.upstream_roots, UpstreamRoots::Webpki);
    let e = compile_err("[tls]\nupstream_roots = \"system\"\n");
    assert!(
        e.starts_with("tls.upstream_roots:")
            && e.contains("\"platform\"")
            && e.contains("\"webpki\""),
        "{e}"
    );
}

#[test]
fn ktls_is_off_unless_the_file_or_the_flag_turns_it_on() {
    let c = Config::from_toml_str("").unwrap();
    assert!(!c.tls.ktls);
    let c = Config::from_toml_str("[tls]\nktls = true\n").unwrap();
    assert!(c.tls.ktls);
    let e = Config::from_toml_str("[tls]\nktls = \"yes\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ktls") || e.contains("bool"), "{e}");
}
