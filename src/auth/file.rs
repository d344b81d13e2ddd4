//! `--auth-file FILE`: one user a line, `NAME:PHC-HASH`, `#` comments and
//! blank lines ignored. Only hashes: a plaintext password in a file is
//! what `[auth] username/password` is for.

use super::{check_name, HashedUser, PhcHash};

/// Parses the text of an auth file. Errors say which line and why (never
/// quoting the hash).
pub fn parse_auth_file(text: &str) -> Result<Vec<HashedUser>, String> {
    let mut users: Vec<HashedUser> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, hash)) = line.split_once(':') else {
            return Err(format!("line {n}: expected NAME:HASH"));
        };
        let name = name.trim();
        check_name(name).map_err(|e| format!("line {n}: user {name:?}: {e}"))?;
        let hash = PhcHash::parse(hash).map_err(|e| format!("line {n}: user {name:?}: {e}"))?;
        if users.iter().any(|u| u.name == name) {
            return Err(format!("line {n}: user {name:?} appears twice"));
        }
        users.push(HashedUser::new(name, hash));
    }
    if users.is_empty() {
        return Err("no users in it (lines are NAME:HASH)".into());
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::hash_password_with;

    #[test]
    fn lines_comments_and_errors() {
        let a = hash_password_with(b"a", 64, 1, 1).unwrap();
        let b = hash_password_with(b"b", 64, 1, 1).unwrap();
        let text = format!("# users\n\nalice:{a}\n  bob : {b}  \n");
        let users = parse_auth_file(&text).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[1].name, "bob");
        assert!(users[0].hash.verify(b"a"));
        assert!(users[1].hash.verify(b"b"));

        for (text, want) in [
            (format!("alice {a}"), "line 1: expected NAME:HASH"),
            (
                "alice:plaintext".to_string(),
                "line 1: user \"alice\": not an argon2",
            ),
            (
                format!("# c\n:{a}"),
                "line 2: user \"\": must be 1 to 255 bytes",
            ),
            (
                format!("alice:{a}\nalice:{b}"),
                "line 2: user \"alice\" appears twice",
            ),
            ("# nothing\n".to_string(), "no users"),
        ] {
            let e = parse_auth_file(&text).expect_err(&text);
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains(&a) && !e.contains(&b), "{e}");
        }
    }
}
