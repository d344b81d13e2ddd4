//! Argon2 password hashes as PHC strings (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`):
//! checked when a configuration loads, verified on the verifier pool, made
//! by `portcullis hash-password`.

use std::fmt;
use std::sync::Arc;

use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Argon2, Params};

/// The most memory one verification may take (1 GiB, in KiB as argon2's
/// `m` counts it): a hash asking for more would let each login attempt
/// take that much on the verifier threads.
pub const MAX_M_COST_KIB: u32 = 1024 * 1024;
/// The most passes one verification may take.
pub const MAX_T_COST: u32 = 64;
/// The most lanes one verification may take.
pub const MAX_P_COST: u32 = 16;

/// A checked argon2 PHC string. Its `Debug` and `Display` never show it:
/// a hash is an offline-guessing target, kept out of logs and `--check`.
#[derive(Clone, PartialEq, Eq)]
pub struct PhcHash(Arc<str>);

impl PhcHash {
    /// Parses and checks a PHC string: an argon2 variant (`argon2id`,
    /// `argon2i`, `argon2d`) with a salt, a hash and parameters within
    /// [`MAX_M_COST_KIB`], [`MAX_T_COST`] and [`MAX_P_COST`].
    pub fn parse(s: &str) -> Result<PhcHash, String> {
        let s = s.trim();
        if !s.starts_with("$argon2") {
            return Err(
                "not an argon2 PHC string (expected $argon2id$v=19$m=...; make one with `portcullis hash-password`)"
                    .into(),
            );
        }
        let parsed = PasswordHash::new(s).map_err(|e| format!("malformed PHC string: {e}"))?;
        let alg = parsed.algorithm.as_str();
        if !matches!(alg, "argon2id" | "argon2i" | "argon2d") {
            return Err(format!("unsupported algorithm {alg:?}: use argon2id"));
        }
        if parsed.salt.is_none() || parsed.hash.is_none() {
            return Err("PHC string has no salt or no hash".into());
        }
        let params =
            Params::try_from(&parsed).map_err(|e| format!("bad argon2 parameters: {e}"))?;
        if params.m_cost() > MAX_M_COST_KIB {
            return Err(format!(
                "m={} KiB is more memory than one login may take (at most {MAX_M_COST_KIB})",
                params.m_cost()
            ));
        }
        if params.t_cost() > MAX_T_COST || params.p_cost() > MAX_P_COST {
            return Err(format!(
                "t={}, p={}: at most t={MAX_T_COST}, p={MAX_P_COST}",
                params.t_cost(),
                params.p_cost()
            ));
        }
        Ok(PhcHash(s.into()))
    }

    /// The PHC string itself (for writing it back to a file, never to a log).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `password` matches. Costs what the hash's parameters say
    /// (milliseconds): run it off the reactor thread.
    pub fn verify(&self, password: &[u8]) -> bool {
        match PasswordHash::new(&self.0) {
            Ok(h) => Argon2::default().verify_password(password, &h).is_ok(),
            Err(_) => false,
        }
    }
}

impl fmt::Debug for PhcHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PhcHash(<redacted>)")
    }
}

/// Hashes `password` with argon2id, the crate's default parameters
/// (19 MiB, 2 passes, 1 lane) and a random salt: a PHC string for
/// `[[auth.users]] password_hash` or an `--auth-file` line.
pub fn hash_password(password: &[u8]) -> Result<String, String> {
    Argon2::default()
        .hash_password(password)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Like [`hash_password`] with explicit costs (tests use cheap ones).
pub fn hash_password_with(password: &[u8], m_kib: u32, t: u32, p: u32) -> Result<String, String> {
    let params = Params::new(m_kib, t, p, None).map_err(|e| format!("bad parameters: {e}"))?;
    Argon2::from(params)
        .hash_password(password)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cheap(pw: &str) -> String {
        hash_password_with(pw.as_bytes(), 64, 1, 1).unwrap()
    }

    #[test]
    fn round_trip() {
        let s = cheap("s3cret");
        assert!(s.starts_with("$argon2id$v=19$m=64,t=1,p=1$"), "{s}");
        let h = PhcHash::parse(&s).unwrap();
        assert!(h.verify(b"s3cret"));
        assert!(!h.verify(b"s3cret "));
        assert!(!h.verify(b""));
    }

    #[test]
    fn default_hash_verifies() {
        let s = hash_password(b"pw").unwrap();
        assert!(s.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{s}");
        assert!(PhcHash::parse(&s).unwrap().verify(b"pw"));
    }

    #[test]
    fn bad_strings_are_refused_plainly() {
        for (bad, want) in [
            ("hunter2", "not an argon2 PHC string"),
            ("$2b$12$abcdefghijklmnopqrstuv", "not an argon2 PHC string"),
            ("$argon2id$v=19$m=64,t=1,p=1", "no salt or no hash"),
            ("$argon2id$v=19$m=64,t=1,p=1$!!!$xyz", "malformed"),
            (
                "$argon2x$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo",
                "argon2",
            ),
        ] {
            let e = PhcHash::parse(bad).expect_err(bad);
            assert!(e.contains(want), "{bad}: {e}");
        }
        let greedy = cheap("x").replace("m=64", "m=4194304");
        let e = PhcHash::parse(&greedy).expect_err("too much memory");
        assert!(e.contains("more memory"), "{e}");
    }

    #[test]
    fn debug_never_shows_the_hash() {
        let h = PhcHash::parse(&cheap("x")).unwrap();
        assert_eq!(format!("{h:?}"), "PhcHash(<redacted>)");
    }
}
