//! Errors: unknown keys by name, one line each, with the file, key, line
//! and column.

use super::*;

#[test]
fn unknown_keys_are_rejected_by_name() {
    let e = err("[limits]\nbuffer_size = 8192\nbogus_limit = 1\n");
    assert!(e.contains("bogus_limit"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    let e = err("colour = \"blue\"\n");
    assert!(e.contains("colour"), "{e}");
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\nproto = \"http\"\n");
    assert!(e.contains("proto"), "{e}");
    let e = err("[[rules]]\naction = \"allow\"\nhostz = [\"a\"]\n");
    assert!(e.contains("hostz"), "{e}");
    let e = err("[auth]\nusername = \"a\"\npassword = \"b\"\ntoken = \"c\"\n");
    assert!(e.contains("token"), "{e}");
}

#[test]
fn errors_are_one_line() {
    let e = err("[limits\n");
    assert!(!e.contains('\n'), "{e:?}");
    let e = err("[limits]\nbogus = 1\n");
    assert!(!e.contains('\n'), "{e:?}");
}

#[test]
fn bad_durations_name_their_key() {
    let e = err("[timeouts]\nconnect = \"ten seconds\"\n");
    assert!(e.starts_with("timeouts.connect: "), "{e}");
    let e = err("[timeouts]\nidle = \"5y\"\n");
    assert!(e.starts_with("timeouts.idle: "), "{e}");
    let e = err("[timeouts]\nhandshake = \"off\"\n");
    assert!(e.starts_with("timeouts.handshake: "), "{e}");
    let e = err("[timeouts]\nclose = 0\n");
    assert!(e.starts_with("timeouts.close: "), "{e}");
    // idle may be off, by word or by zero.
    assert_eq!(
        ConfigFile::parse("[timeouts]\nidle = 0\n")
            .unwrap()
            .timeouts
            .idle,
        None
    );
    assert_eq!(
        ConfigFile::parse("[timeouts]\nidle = \"2h\"\n")
            .unwrap()
            .timeouts
            .idle,
        Some(Duration::from_secs(7200))
    );
}

#[test]
fn bad_listeners_name_their_key() {
    let e = err("[[listen]]\naddress = \"localhost\"\n");
    assert!(e.starts_with("listen[0].address: "), "{e}");
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\n[[listen]]\naddress = \"unix:\"\n");
    assert!(e.starts_with("listen[1].address: "), "{e}");
    let e = err("[[listen]]\naddress = \"127.0.0.1:1\"\nprotocol = \"socks4\"\n");
    assert!(e.starts_with("listen[0].protocol: "), "{e}");
}

#[test]
fn error_display_has_file_and_key() {
    let e = ConfigError::key("limits.buffer_size", "too big").in_file("/etc/p.toml");
    assert_eq!(e.to_string(), "/etc/p.toml: limits.buffer_size: too big");
    assert_eq!(e.path(), Some(Path::new("/etc/p.toml")));
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("portcullis-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[limits]\nbuffer_size = \"big\"\n").unwrap();
    let e = ConfigFile::load(&path).unwrap_err();
    assert_eq!(e.path(), Some(path.as_path()));
    assert!(
        e.to_string().starts_with(&format!("{}: ", path.display())),
        "{e}"
    );

    let e = ConfigFile::load(dir.join("missing.toml")).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");

    std::fs::write(&path, "[limits]\nbuffer_size = 8192\n").unwrap();
    let f = ConfigFile::load(&path).unwrap();
    assert_eq!(f.path.as_deref(), Some(path.as_path()));
    std::fs::remove_dir_all(&dir).unwrap();
}
