//! Leaf certificates minted per name, and a bounded cache of them.
//!
//! A leaf names exactly one host (a DNS name or an IP address, as its only
//! SAN), is ECDSA P-256, valid from an hour ago for [`LEAF_VALIDITY`], has a
//! random serial and EKU serverAuth, and is served with the CA after it.
//!
//! [`Minter`] is `Send + Sync` so minting can move to a worker thread;
//! [`LeafCache`] is plain single-threaded state for the reactor.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::string::Ia5String;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, SigningKey};

use super::ca::{random_serial, CertAuthority, BACKDATE};
use super::host_text;
use crate::target::Host;

/// How long a leaf is valid.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default number of leaves the cache keeps.
pub const DEFAULT_CACHE_SIZE: usize = 1024;

/// Which key a leaf gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafKeys {
    /// One key, generated when the minter is made, for every leaf: a mint
    /// is then one signature. The key never leaves the process, like the
    /// CA key that could mint any leaf anyway.
    Shared,
    /// A fresh key per leaf (a key generation more per mint).
    PerLeaf,
}

/// A leaf could not be minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafError(pub String);

impl fmt::Display for LeafError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot mint a certificate: {}", self.0)
    }
}

impl std::error::Error for LeafError {}

fn err(e: impl fmt::Display) -> LeafError {
    LeafError(e.to_string())
}

/// A minted leaf: the chain and key rustls serves, and when to renew it.
#[derive(Clone)]
pub struct Leaf {
    /// Leaf + CA, with the leaf's signing key.
    pub key: Arc<CertifiedKey>,
    /// After this the cache mints a new one (half the validity).
    pub renew_after: SystemTime,
}

impl fmt::Debug for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leaf")
            .field("renew_after", &self.renew_after)
            .finish_non_exhaustive()
    }
}

/// Signs leaves with the CA.
pub struct Minter {
    ca: Arc<CertAuthority>,
    shared: Option<(KeyPair, Arc<dyn SigningKey>)>,
}

impl fmt::Debug for Minter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Minter")
            .field("ca", &self.ca)
            .field("shared_key", &self.shared.is_some())
            .finish()
    }
}

fn new_key() -> Result<(KeyPair, Arc<dyn SigningKey>), LeafError> {
    let pair = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.serialize_der()));
    let signer = rustls::crypto::ring::sign::any_ecdsa_type(&der).map_err(err)?;
    Ok((pair, signer))
}

impl Minter {
    /// A minter signing with `ca`.
    pub fn new(ca: Arc<CertAuthority>, keys: LeafKeys) -> Result<Minter, LeafError> {
        let shared = match keys {
            LeafKeys::Shared => Some(new_key()?),
            LeafKeys::PerLeaf => None,
        };
        Ok(Minter { ca, shared })
    }

    /// The CA leaves are signed with.
    pub fn ca(&self) -> &Arc<CertAuthority> {
        &self.ca
    }

    /// Mints a leaf for `name` (canonical), valid from an hour ago.
    pub fn mint(&self, name: &Host) -> Result<Leaf, LeafError> {
        let now = SystemTime::now();
        let mut params = CertificateParams::default();
        let text = host_text(name);
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, text.clone());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match name {
            Host::Ip(ip) => SanType::IpAddress(*ip),
            Host::Domain(d) => SanType::DnsName(Ia5String::try_from(d.as_str()).map_err(err)?),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let t = time::OffsetDateTime::from(now);
        params.not_before = t - BACKDATE;
        params.not_after = t + LEAF_VALIDITY;
        params.serial_number = Some(random_serial());
        params.use_authority_key_identifier_extension = self.ca.has_key_id();

        let fresh;
        let (pair, signer) = match &self.shared {
            Some((pair, signer)) => (pair, signer.clone()),
            None => {
                fresh = new_key()?;
                (&fresh.0, fresh.1.clone())
            }
        };
        let cert = params.signed_by(pair, self.ca.issuer()).map_err(err)?;
        let chain = vec![cert.der().clone(), self.ca.cert_der().clone()];
        Ok(Leaf {
            key: Arc::new(CertifiedKey::new(chain, signer)),
            renew_after: now + LEAF_VALIDITY / 2,
        })
    }
}

/// One cache slot.
struct Slot {
    name: Host,
    leaf: Leaf,
    /// Used since the clock hand last passed (second chance).
    referenced: bool,
}

/// A bounded cache of leaves by canonical name, evicting with the clock
/// algorithm (an approximation of LRU with O(1) hits and no list to keep).
pub struct LeafCache {
    slots: Vec<Slot>,
    index: HashMap<Host, usize>,
    hand: usize,
    capacity: usize,
}

impl fmt::Debug for LeafCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafCache")
            .field("len", &self.slots.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl LeafCache {
    /// A cache of at most `capacity` leaves (at least one).
    pub fn new(capacity: usize) -> LeafCache {
        LeafCache {
            slots: Vec::new(),
            index: HashMap::new(),
            hand: 0,
            capacity: capacity.max(1),
        }
    }

    /// Leaves held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No leaves held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The cached leaf for `name`, unless it is due for renewal at `now`.
    pub fn get(&mut self, name: &Host, now: SystemTime) -> Option<Arc<CertifiedKey>> {
        let &i = self.index.get(name)?;
        let slot = &mut self.slots[i];
        if now >= slot.leaf.renew_after {
            return None;
        }
        slot.referenced = true;
        Some(slot.leaf.key.clone())
    }

    /// Keeps `leaf` for `name`, replacing an older one or evicting a leaf
    /// not used since the clock hand last passed.
    pub fn insert(&mut self, name: Host, leaf: Leaf) {
        if let Some(&i) = self.index.get(&name) {
            self.slots[i].leaf = leaf;
            self.slots[i].referenced = true;
            return;
        }
        if self.slots.len() < self.capacity {
            self.index.insert(name.clone(), self.slots.len());
            self.slots.push(Slot {
                name,
                leaf,
                referenced: false,
            });
            return;
        }
        loop {
            let slot = &mut self.slots[self.hand];
            if slot.referenced {
                slot.referenced = false;
                self.hand = (self.hand + 1) % self.capacity;
                continue;
            }
            self.index.remove(&slot.name);
            self.index.insert(name.clone(), self.hand);
            *slot = Slot {
                name,
                leaf,
                referenced: false,
            };
            self.hand = (self.hand + 1) % self.capacity;
            return;
        }
    }

    /// The leaf for `name`, minted with `minter` on a miss.
    pub fn get_or_mint(
        &mut self,
        minter: &Minter,
        name: &Host,
    ) -> Result<Arc<CertifiedKey>, LeafError> {
        if let Some(k) = self.get(name, SystemTime::now()) {
            return Ok(k);
        }
        let leaf = minter.mint(name)?;
        let key = leaf.key.clone();
        self.insert(name.clone(), leaf);
        Ok(key)
    }
}
