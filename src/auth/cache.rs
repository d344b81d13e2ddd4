//! Logins already verified: a client that opens many tunnels with the same
//! credentials pays argon2 once.
//!
//! Keyed by HMAC-SHA256 of the user and password under a random key, drawn
//! at start where logins are configured (lazily otherwise), so the cache
//! holds no password and nothing an attacker could test guesses against
//! offline. Only successes go in (a failure is never
//! remembered as anything); the oldest entry leaves when it is full.

use std::cell::OnceCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::basic::{basic_auth_credentials, SameLogin};

/// A keyed digest of one user name and password.
pub(crate) type Digest = [u8; 32];

/// Verified logins, bounded. Lives on the reactor thread.
pub(crate) struct LoginCache {
    /// Drawn by [`with_key`](Self::with_key) at start where logins are
    /// configured; otherwise at first use, so a proxy without users never
    /// runs (or maps) the HMAC and RNG code.
    key: OnceCell<hmac::Key>,
    /// Digest to the user name it verified.
    map: HashMap<Digest, Arc<str>>,
    /// Insertion order, for eviction.
    order: VecDeque<Digest>,
    capacity: usize,
}

/// The HMAC of `user` (length-prefixed) and `password` under `key`.
fn digest(key: &hmac::Key, user: &[u8], password: &[u8]) -> Digest {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(&(user.len() as u64).to_be_bytes());
    ctx.update(user);
    ctx.update(password);
    let tag = ctx.sign();
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Default number of logins remembered.
pub(crate) const CAPACITY: usize = 4096;

impl LoginCache {
    /// An empty cache holding at most `capacity` logins; its random key is
    /// drawn when first needed.
    pub(crate) fn new(capacity: usize) -> LoginCache {
        LoginCache {
            key: OnceCell::new(),
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// The cache with its key drawn now: at start, the system RNG cannot
    /// be short of file descriptors as it might be under load (where
    /// `getrandom(2)` is filtered and `/dev/urandom` must be opened).
    pub(crate) fn with_key(self) -> LoginCache {
        let _ = self.key();
        self
    }

    /// The cache's key, drawn from the system RNG on first use.
    fn key(&self) -> &hmac::Key {
        self.key.get_or_init(|| {
            let mut seed = [0u8; 32];
            // The system RNG failing leaves a zero key: digests stay unique per
            // login, they are only guessable offline, which needs a memory dump.
            if SystemRandom::new().fill(&mut seed).is_err() {
                log::warn!("no system randomness for the login cache key");
            }
            hmac::Key::new(hmac::HMAC_SHA256, &seed)
        })
    }

    /// The digest of `user` with `password` (length-prefixed, so no two
    /// pairs share an encoding).
    pub(crate) fn digest(&self, user: &[u8], password: &[u8]) -> Digest {
        digest(self.key(), user, password)
    }

    /// A check that a `Proxy-Authorization` value carries exactly `user`
    /// and `password` (by digest: no password is kept).
    pub(crate) fn same_login(&self, user: &[u8], password: &[u8]) -> SameLogin {
        let key = self.key().clone();
        let want = digest(&key, user, password);
        SameLogin::new(move |value| {
            basic_auth_credentials(value).is_some_and(|(u, p)| digest(&key, &u, &p) == want)
        })
    }

    /// The user a verified login with this digest is, if remembered.
    pub(crate) fn get(&self, digest: &Digest) -> Option<Arc<str>> {
        self.map.get(digest).cloned()
    }

    /// Remembers a verified login.
    pub(crate) fn insert(&mut self, digest: Digest, user: Arc<str>) {
        if self.map.insert(digest, user).is_some() {
            return;
        }
        self.order.push_back(digest);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    /// How many logins are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_successes_by_digest() {
        let mut c = LoginCache::new(8);
        let d = c.digest(b"alice", b"pw");
        assert_eq!(c.get(&d), None);
        c.insert(d, "alice".into());
        assert_eq!(c.get(&d).as_deref(), Some("alice"));
        // Another password, another user, or a shifted boundary: other digests.
        assert_ne!(c.digest(b"alice", b"pw2"), d);
        assert_ne!(c.digest(b"bob", b"pw"), d);
        assert_ne!(c.digest(b"alic", b"epw"), d);
        assert_eq!(c.get(&c.digest(b"alice", b"pw2")), None);
    }

    #[test]
    fn keys_differ_per_cache() {
        let a = LoginCache::new(1);
        let b = LoginCache::new(1);
        assert_ne!(a.digest(b"u", b"p"), b.digest(b"u", b"p"));
    }

    #[test]
    fn bounded_oldest_leaves_first() {
        let mut c = LoginCache::new(3);
        let ds: Vec<Digest> = (0..5u8).map(|i| c.digest(b"u", &[i])).collect();
        for d in &ds {
            c.insert(*d, "u".into());
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&ds[0]), None);
        assert_eq!(c.get(&ds[1]), None);
        assert!(c.get(&ds[4]).is_some());
        // Re-inserting does not grow it.
        c.insert(ds[4], "u".into());
        assert_eq!(c.len(), 3);
    }
}
