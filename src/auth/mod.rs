//! Proxy users: who may use the proxy, and how a login is checked.
//!
//! A user has a plaintext password (`[auth] username/password`, `--auth`,
//! `--auth-env`: compared inline, in constant time) or an argon2 hash
//! (`[[auth.users]]`, `--auth-file`: verified on the verifier pool, off the
//! reactor thread, then remembered in a login cache). The check is
//! sans-IO: it answers at once or hands back a verify job for the pool.

pub mod basic;
pub(crate) mod cache;
mod file;
mod phc;

use basic::constant_time_eq;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub use file::parse_auth_file;
pub use phc::{hash_password, hash_password_with, PhcHash, MAX_M_COST_KIB, MAX_P_COST, MAX_T_COST};

/// Proxy credentials: HTTP `Proxy-Authorization: Basic` and SOCKS5 user/pass.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl Credentials {
    /// `username` with `password`.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Threads that verify hashed passwords (argon2 is CPU-bound; the reactor
/// keeps a core of its own).
pub const VERIFIER_THREADS: usize = 2;
use cache::{Digest, LoginCache};

/// A user whose password is kept as an argon2 PHC hash.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HashedUser {
    /// User name: 1 to 255 bytes, no `:`.
    pub name: String,
    /// The password's hash.
    pub hash: PhcHash,
}

impl HashedUser {
    /// `name` with `hash`.
    pub fn new(name: impl Into<String>, hash: PhcHash) -> HashedUser {
        HashedUser {
            name: name.into(),
            hash,
        }
    }
}

/// Checks a user name: 1 to 255 bytes (SOCKS5 carries it in one length
/// byte), no `:` (HTTP Basic credentials are `USER:PASS`), no control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 255 {
        return Err("must be 1 to 255 bytes long".into());
    }
    if name.contains(':') {
        return Err("must not contain ':' (HTTP Basic credentials are USER:PASS)".into());
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

/// How a user's password is checked.
#[derive(Clone)]
enum Secret {
    Plain(Box<[u8]>),
    Hash(PhcHash),
}

struct Entry {
    name: Arc<str>,
    secret: Secret,
}

/// Every user the proxy knows, compiled for lookups.
pub(crate) struct Users {
    by_name: HashMap<Box<[u8]>, Entry>,
    /// A hash to verify unknown names against, so that a wrong name costs
    /// what a wrong password does (and timing does not tell them apart).
    decoy: Option<PhcHash>,
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.by_name.values().map(|e| &*e.name).collect();
        names.sort_unstable();
        f.debug_struct("Users").field("names", &names).finish()
    }
}

/// What [`Users::check`] says about one login.
#[derive(Debug)]
pub(crate) enum Check {
    /// The password is right: this user.
    Accepted(Arc<str>),
    /// Wrong, said at once (a plaintext password, or no hashed user at all).
    Rejected,
    /// Needs an argon2 verification: hand this to the verifier pool.
    Verify(Verify),
}

/// How a verification handed to the pool came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The password is right: this user.
    Accepted(Arc<str>),
    /// Wrong password (or unknown name).
    Rejected,
    /// The verifier's queue was full: refused without verifying.
    Busy,
}

/// One argon2 verification for the pool.
pub(crate) struct Verify {
    /// The user, if the name is known (else this verifies a decoy and fails).
    pub(crate) user: Option<Arc<str>>,
    pub(crate) password: Vec<u8>,
    pub(crate) hash: PhcHash,
    /// The login's cache key: a success is remembered under it, and
    /// logins with the same digest in flight share one verification.
    pub(crate) digest: Digest,
}

impl fmt::Debug for Verify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verify").field("user", &self.user).finish()
    }
}

impl Verify {
    /// Runs the verification (milliseconds: never on the reactor thread).
    /// `Some(user)` when the password is right.
    pub(crate) fn run(&self) -> Option<Arc<str>> {
        let ok = self.hash.verify(&self.password);
        match &self.user {
            Some(u) if ok => Some(Arc::clone(u)),
            _ => None,
        }
    }
}

impl Drop for Verify {
    fn drop(&mut self) {
        // Best effort: do not leave the password in freed memory
        // (`black_box` keeps the wipe from being optimised away).
        self.password.fill(0);
        std::hint::black_box(&self.password);
    }
}

impl Users {
    /// The users of `plain` (one plaintext user) and `hashed`; `None` when
    /// there are none (auth off). Names are unique (validated with the config).
    pub(crate) fn new(plain: Option<&Credentials>, hashed: &[HashedUser]) -> Option<Users> {
        if plain.is_none() && hashed.is_empty() {
            return None;
        }
        let mut by_name = HashMap::new();
        for u in hashed {
            by_name.insert(
                u.name.as_bytes().into(),
                Entry {
                    name: u.name.as_str().into(),
                    secret: Secret::Hash(u.hash.clone()),
                },
            );
        }
        if let Some(c) = plain {
            by_name.insert(
                c.username.as_bytes().into(),
                Entry {
                    name: c.username.as_str().into(),
                    secret: Secret::Plain(c.password.as_bytes().into()),
                },
            );
        }
        Some(Users {
            by_name,
            decoy: hashed.first().map(|u| u.hash.clone()),
        })
    }

    /// Whether `name` is a user.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name.as_bytes())
    }

    /// Checks a login: a plaintext user at once (constant time), a hashed
    /// one from the cache or by a [`Verify`] job.
    pub(crate) fn check(&self, user: &[u8], password: &[u8], cache: &LoginCache) -> Check {
        match self.by_name.get(user) {
            Some(Entry {
                name,
                secret: Secret::Plain(expected),
            }) => {
                if constant_time_eq(password, expected) {
                    Check::Accepted(Arc::clone(name))
                } else {
                    Check::Rejected
                }
            }
            Some(Entry {
                name,
                secret: Secret::Hash(hash),
            }) => {
                let digest = cache.digest(user, password);
                match cache.get(&digest) {
                    Some(name) => Check::Accepted(name),
                    None => Check::Verify(Verify {
                        user: Some(Arc::clone(name)),
                        password: password.to_vec(),
                        hash: hash.clone(),
                        digest,
                    }),
                }
            }
            None => match &self.decoy {
                Some(hash) => Check::Verify(Verify {
                    user: None,
                    password: password.to_vec(),
                    hash: hash.clone(),
                    digest: cache.digest(user, password),
                }),
                None => Check::Rejected,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashed(name: &str, pw: &str) -> HashedUser {
        let h = hash_password_with(pw.as_bytes(), 64, 1, 1).unwrap();
        HashedUser::new(name, PhcHash::parse(&h).unwrap())
    }

    #[test]
    fn plaintext_user_is_checked_inline() {
        let plain = Credentials::new("agent", "s3cret");
        let users = Users::new(Some(&plain), &[]).unwrap();
        let cache = LoginCache::new(4);
        assert!(
            matches!(users.check(b"agent", b"s3cret", &cache), Check::Accepted(n) if &*n == "agent")
        );
        assert!(matches!(
            users.check(b"agent", b"s3cre", &cache),
            Check::Rejected
        ));
        // No hashed user: an unknown name is refused at once.
        assert!(matches!(
            users.check(b"bob", b"s3cret", &cache),
            Check::Rejected
        ));
    }

    #[test]
    fn hashed_user_verifies_off_line_then_from_the_cache() {
        let users = Users::new(None, &[hashed("alice", "pw-a"), hashed("bob", "pw-b")]).unwrap();
        let mut cache = LoginCache::new(4);
        let Check::Verify(job) = users.check(b"alice", b"pw-a", &cache) else {
            panic!("needs a verification")
        };
        assert_eq!(job.run().as_deref(), Some("alice"));
        cache.insert(job.digest, "alice".into());
        assert!(
            matches!(users.check(b"alice", b"pw-a", &cache), Check::Accepted(n) if &*n == "alice")
        );
        // A wrong password is never answered from the cache.
        let Check::Verify(job) = users.check(b"alice", b"pw-b", &cache) else {
            panic!("needs a verification")
        };
        assert_eq!(job.run(), None);
        // bob's password for alice, alice's name with bob's password: no.
        let Check::Verify(job) = users.check(b"bob", b"pw-a", &cache) else {
            panic!()
        };
        assert_eq!(job.run(), None);
    }

    #[test]
    fn unknown_names_cost_a_verification_and_fail() {
        let users = Users::new(None, &[hashed("alice", "pw")]).unwrap();
        let cache = LoginCache::new(4);
        // Even with alice's password: the decoy is alice's hash, the name is not hers.
        let Check::Verify(job) = users.check(b"mallory", b"pw", &cache) else {
            panic!("decoy verification")
        };
        assert!(job.user.is_none());
        assert_eq!(job.run(), None);
        assert!(format!("{job:?}").contains("None"));
        assert!(!format!("{job:?}").contains("pw"));
    }

    #[test]
    fn no_users_is_auth_off_and_names_are_checked() {
        assert!(Users::new(None, &[]).is_none());
        let users = Users::new(Some(&Credentials::new("a", "b")), &[hashed("c", "d")]).unwrap();
        assert!(users.contains("a") && users.contains("c") && !users.contains("b"));
        assert_eq!(format!("{users:?}"), "Users { names: [\"a\", \"c\"] }");
        assert!(check_name("alice").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a:b").is_err());
        assert!(check_name("a\nb").is_err());
        assert!(check_name(&"x".repeat(256)).is_err());
    }
}
