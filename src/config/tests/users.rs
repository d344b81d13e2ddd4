//! Unit tests for users in the configuration: `[[auth.users]]`, their
//! hashes and password files, and rules that name users.

use super::*;
use crate::auth::hash_password_with;

fn cheap(pw: &str) -> String {
    hash_password_with(pw.as_bytes(), 64, 1, 1).unwrap()
}

fn err(text: &str) -> ConfigError {
    Config::from_toml_str(text).expect_err("should be invalid")
}

#[test]
fn hashed_users_and_the_plaintext_user() {
    let (a, b) = (cheap("pw-a"), cheap("pw-b"));
    let text = format!(
        r#"
[auth]
username = "agent"
password = "quick"

[[auth.users]]
name = "alice"
password_hash = "{a}"

[[auth.users]]
name = "bob"
password_hash = "{b}"

[[rules]]
name = "alice-only"
action = "allow"
host = "a.test"
users = ["alice", "agent"]
"#
    );
    let c = Config::from_toml_str(&text).unwrap();
    assert_eq!(c.auth.as_ref().unwrap().username, "agent");
    assert_eq!(c.users.len(), 2);
    assert_eq!(c.users[0].name, "alice");
    assert!(c.users[0].hash.verify(b"pw-a"));
    assert!(c.users[1].hash.verify(b"pw-b"));
    assert!(c.auth_required());
    assert_eq!(c.user_names(), ["agent", "alice", "bob"]);
    // Debug never shows a hash or the password.
    let debug = format!("{c:?}");
    assert!(
        !debug.contains("$argon2") && !debug.contains("quick"),
        "{debug}"
    );
    assert_eq!(c.policy.rule_users()[0].2.len(), 2);
}

#[test]
fn users_alone_turn_auth_on() {
    let text = format!(
        "[[auth.users]]\nname = \"alice\"\npassword_hash = \"{}\"\n",
        cheap("x")
    );
    let c = Config::from_toml_str(&text).unwrap();
    assert!(c.auth.is_none());
    assert!(c.auth_required());
    assert!(!Config::default().auth_required());
}

#[test]
fn password_files_are_read_relative_to_the_config() {
    let dir = std::env::temp_dir().join(format!("portcullis-users-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    std::fs::write(dir.join("secrets/alice.phc"), format!("{}\n", cheap("pw"))).unwrap();
    std::fs::write(dir.join("secrets/bad.phc"), "plaintext\n").unwrap();
    let path = dir.join("portcullis.toml");
    std::fs::write(
        &path,
        "[[auth.users]]\nname = \"alice\"\npassword_file = \"secrets/alice.phc\"\n",
    )
    .unwrap();
    let c = Config::load(&path).unwrap();
    assert!(c.users[0].hash.verify(b"pw"));

    std::fs::write(
        &path,
        "[[auth.users]]\nname = \"alice\"\npassword_file = \"secrets/missing.phc\"\n",
    )
    .unwrap();
    let e = Config::load(&path).unwrap_err();
    assert_eq!(e.key_name(), Some("auth.users[0].password_file"));
    assert_eq!(e.location(), Some((3, 17)));
    assert!(e.message().contains("missing.phc"), "{e}");

    std::fs::write(
        &path,
        "[[auth.users]]\nname = \"alice\"\npassword_file = \"secrets/bad.phc\"\n",
    )
    .unwrap();
    let e = Config::load(&path).unwrap_err();
    assert!(e.message().contains("not an argon2 PHC string"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn user_errors_name_the_key_and_its_place() {
    let e = err("[[auth.users]]\nname = \"alice\"\npassword_hash = \"hunter2\"\n");
    assert_eq!(e.key_name(), Some("auth.users[0].password_hash"));
    assert_eq!(e.location(), Some((3, 17)));
    assert!(e.message().contains("not an argon2"), "{e}");

    let h = cheap("x");
    let e = err(&format!(
        "[[auth.users]]\nname = \"alice\"\npassword_hash = \"{h}\"\npassword_file = \"f\"\n"
    ));
    assert!(e.message().contains("not both"), "{e}");
    assert!(!e.to_string().contains("$argon2"), "{e}");

    let e = err("[[auth.users]]\nname = \"alice\"\n");
    assert_eq!(e.key_name(), Some("auth.users[0].name"));
    assert!(e.message().contains("hash-password"), "{e}");

    let e = err(&format!(
        "[auth]\nusername = \"alice\"\npassword = \"p\"\n[[auth.users]]\nname = \"alice\"\npassword_hash = \"{h}\"\n"
    ));
    assert_eq!(e.key_name(), Some("auth.users[0].name"));
    assert_eq!(e.location(), Some((5, 8)));
    assert!(e.message().contains("defined twice"), "{e}");

    let e = err(&format!(
        "[[auth.users]]\nname = \"a:b\"\npassword_hash = \"{h}\"\n"
    ));
    assert!(e.message().contains("':'"), "{e}");

    let e = err("[auth]\nusername = \"alice\"\n");
    assert_eq!(e.key_name(), Some("auth.username"));
    let e = err("[auth]\n");
    assert_eq!(e.key_name(), Some("auth"));
}

#[test]
fn rules_naming_users_need_auth_and_known_users() {
    let rule =
        "[[rules]]\nname = \"x\"\naction = \"allow\"\nhost = \"a.test\"\nusers = [\"alice\"]\n";
    let e = err(rule);
    assert_eq!(e.key_name(), Some("rules[0].users"));
    assert_eq!(e.location(), Some((5, 9)));
    assert!(
        e.message()
            .contains("rule \"x\" names users but auth is off"),
        "{e}"
    );

    let text = format!(
        "[[auth.users]]\nname = \"alice\"\npassword_hash = \"{}\"\n\n{rule}\n[[rules]]\naction = \"allow\"\nhost = \"b.test\"\nusers = [\"alice\", \"carol\"]\n",
        cheap("x")
    );
    let e = err(&text);
    assert_eq!(e.key_name(), Some("rules[1].users[1]"));
    assert_eq!(e.location(), Some((14, 19)));
    assert!(
        e.message()
            .contains("names user \"carol\", who is not defined (users: alice)"),
        "{e}"
    );

    let e = err("[[rules]]\naction = \"allow\"\nhost = \"a.test\"\nusers = []\n");
    assert_eq!(e.key_name(), Some("rules[0].users"));
    assert!(e.message().contains("names no user"), "{e}");
}
