//! The certificate authority that signs the leaves.
//!
//! Either loaded from `ca_cert` + `ca_key` PEM files (checked: a CA, allowed
//! to sign certificates, not expired, and the key matches), or, when both
//! are absent, generated on first start into a state directory and reused
//! after. Generation is serialised by an advisory lock on `ca.lock`, files
//! are written under temporary names and renamed into place (key first: a
//! certificate on disk means its key is there), and the key file is created
//! with mode 0600.
//!
//! Whoever can write the state directory can swap the CA the proxy reuses:
//! one writable by group or others is refused (one the proxy creates is
//! 0700), and a key file there readable by group or others is tightened to
//! 0600 with a warning.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::string::{BmpString, Ia5String, PrintableString, TeletexString, UniversalString};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue, IsCa, Issuer,
    KeyIdMethod, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::der::{parse_cert, CertFacts, NameAttr};

/// The CA certificate's file name in the state directory.
pub const CERT_FILE: &str = "ca.pem";
/// The CA key's file name in the state directory (mode 0600).
pub const KEY_FILE: &str = "ca-key.pem";
const LOCK_FILE: &str = "ca.lock";

/// Validity of a generated CA.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Backdating of every certificate we sign, for clocks a little behind ours.
pub(crate) const BACKDATE: Duration = Duration::from_secs(3600);

/// A CA that could not be loaded or generated; names the file at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaError {
    /// The file (or directory) concerned.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl CaError {
    fn new(path: &Path, message: impl Into<String>) -> CaError {
        CaError {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for CaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for CaError {}

/// The CA: its certificate (path, PEM, DER) and what signs leaves with its key.
pub struct CertAuthority {
    cert_path: PathBuf,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    /// The CA has a subjectKeyIdentifier, so leaves carry the matching
    /// authorityKeyIdentifier (OpenSSL matches the two when building chains).
    has_key_id: bool,
    not_after: i64,
}

impl fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertAuthority")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

impl CertAuthority {
    /// What the configuration says: both files given, loads them; neither,
    /// loads or generates the CA in `state_dir`; one without the other is an
    /// error.
    pub fn from_config(
        ca_cert: Option<&Path>,
        ca_key: Option<&Path>,
        state_dir: &Path,
    ) -> Result<CertAuthority, CaError> {
        match (ca_cert, ca_key) {
            (Some(c), Some(k)) => {
                if let Some(warning) = loose_key_warning(k) {
                    log::warn!("{warning}");
                }
                CertAuthority::load(c, k)
            }
            (None, None) => CertAuthority::load_or_generate(state_dir),
            (Some(c), None) => Err(CaError::new(c, "ca_cert is set but ca_key is not")),
            (None, Some(k)) => Err(CaError::new(k, "ca_key is set but ca_cert is not")),
        }
    }

    /// Loads a CA from PEM files and checks it can sign our leaves.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<CertAuthority, CaError> {
        let cert_bytes = read(cert_path)?;
        let cert_der = CertificateDer::pem_slice_iter(&cert_bytes)
            .next()
            .ok_or_else(|| CaError::new(cert_path, "no CERTIFICATE in this PEM file"))?
            .map_err(|e| CaError::new(cert_path, format!("bad PEM: {e}")))?;
        let key = load_key(key_path)?;

        let facts = parse_cert(&cert_der)
            .map_err(|e| CaError::new(cert_path, format!("cannot read certificate: {e}")))?;
        if !facts.is_ca {
            return Err(CaError::new(
                cert_path,
                "not a CA certificate (basicConstraints CA:TRUE is missing)",
            ));
        }
        if facts.key_cert_sign == Some(false) {
            return Err(CaError::new(
                cert_path,
                "its keyUsage does not allow signing certificates (keyCertSign)",
            ));
        }
        let now = unix_now();
        if facts.not_before > now + 86_400 {
            return Err(CaError::new(
                cert_path,
                format!(
                    "the CA certificate is not valid before {}",
                    date(facts.not_before)
                ),
            ));
        }
        if facts.not_after < now {
            return Err(CaError::new(
                cert_path,
                format!("the CA certificate expired on {}", date(facts.not_after)),
            ));
        }
        if facts.public_key != key.public_key_raw() {
            return Err(CaError::new(
                key_path,
                format!(
                    "this key does not match the certificate {}",
                    cert_path.display()
                ),
            ));
        }

        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(&facts)
            .ok_or_else(|| CaError::new(cert_path, unsupported_subject()))?;
        params.key_identifier_method = match facts.subject_key_id {
            Some(id) => KeyIdMethod::PreSpecified(id.to_vec()),
            None => KeyIdMethod::Sha256,
        };
        let ca = CertAuthority {
            cert_path: cert_path.to_owned(),
            cert_pem: pem_of(&cert_der),
            has_key_id: facts.subject_key_id.is_some(),
            not_after: facts.not_after,
            cert_der: cert_der.into_owned(),
            issuer: Issuer::new(params, key),
        };
        ca.check_reproduces_subject()?;
        Ok(ca)
    }

    /// What [`CertAuthority::from_config`] would load, without writing
    /// anything (`--check`): the same checks, failing where it would fail
    /// (a CA still to be generated is fine if its directory is). Returns
    /// warnings: a key file readable by group or others.
    pub fn check_config(
        ca_cert: Option<&Path>,
        ca_key: Option<&Path>,
        state_dir: &Path,
    ) -> Result<Vec<String>, CaError> {
        let mut notes = Vec::new();
        match (ca_cert, ca_key) {
            (Some(c), Some(k)) => {
                notes.extend(loose_key_warning(k));
                CertAuthority::load(c, k)?;
            }
            (None, None) => {
                let cert = state_dir.join(CERT_FILE);
                let key = state_dir.join(KEY_FILE);
                if state_dir.is_dir() {
                    check_state_dir(state_dir)?;
                }
                if cert.exists() {
                    if let Some(w) = loose_key_warning(&key) {
                        notes.push(format!("{w} (a start tightens it to 0600)"));
                    }
                    CertAuthority::load(&cert, &key)?;
                }
            }
            (Some(c), None) => return Err(CaError::new(c, "ca_cert is set but ca_key is not")),
            (None, Some(k)) => return Err(CaError::new(k, "ca_key is set but ca_cert is not")),
        }
        Ok(notes)
    }

    /// Loads the CA kept in `dir`, generating it there first if there is none.
    /// Safe against concurrent first starts: one generates, the others wait
    /// for it and load the same CA. A directory writable by group or others
    /// is refused (one made here is 0700); a key file readable by them is
    /// tightened to 0600, with a warning.
    pub fn load_or_generate(dir: &Path) -> Result<CertAuthority, CaError> {
        let cert = dir.join(CERT_FILE);
        let key = dir.join(KEY_FILE);
        if !dir.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    CaError::new(dir, format!("cannot create the state directory: {e}"))
                })?;
        }
        check_state_dir(dir)?;
        if cert.exists() {
            tighten_key(&key)?;
            return CertAuthority::load(&cert, &key);
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| CaError::new(&lock_path, format!("cannot open: {e}")))?;
        let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| CaError::new(&lock_path, format!("cannot lock: {e}")))?;
        // Whoever held the lock before us may have generated it.
        if !cert.exists() {
            generate_into(&cert, &key)?;
            log::info!("generated a CA in {}", dir.display());
        }
        CertAuthority::load(&cert, &key)
    }

    /// The CA certificate's path (what clients must trust).
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER (the second certificate of every leaf chain).
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// When the CA certificate expires, seconds since the Unix epoch.
    pub fn not_after(&self) -> i64 {
        self.not_after
    }

    pub(crate) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }

    pub(crate) fn has_key_id(&self) -> bool {
        self.has_key_id
    }

    /// Signs a throwaway leaf and checks its issuer field is the CA's subject
    /// byte for byte, as chain building requires.
    fn check_reproduces_subject(&self) -> Result<(), CaError> {
        let probe_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| CaError::new(&self.cert_path, format!("cannot sign: {e}")))?;
        let probe = CertificateParams::new(vec!["probe.invalid".to_string()])
            .and_then(|p| p.signed_by(&probe_key, &self.issuer))
            .map_err(|e| CaError::new(&self.cert_path, format!("cannot sign with this CA: {e}")))?;
        let facts = parse_cert(probe.der()).map_err(|e| CaError::new(&self.cert_path, e.0))?;
        let ca = parse_cert(&self.cert_der).map_err(|e| CaError::new(&self.cert_path, e.0))?;
        if facts.issuer_raw != ca.subject_raw {
            return Err(CaError::new(&self.cert_path, unsupported_subject()));
        }
        Ok(())
    }
}

/// Refuses a state directory group or others may write, or that another
/// user owns (or whose CA files another user owns): they could replace the
/// CA (certificate and key) the proxy reuses. Root's are trusted, as ssh
/// trusts them.
fn check_state_dir(dir: &Path) -> Result<(), CaError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir)
        .map_err(|e| CaError::new(dir, format!("cannot read the state directory: {e}")))?;
    let me = nix::unistd::geteuid().as_raw();
    let foreign = |m: &fs::Metadata| m.uid() != me && m.uid() != 0;
    if foreign(&meta) {
        return Err(CaError::new(
            dir,
            format!(
                "the CA's state directory belongs to uid {} (the proxy runs as {me}): its \
                 owner could replace the CA; use a directory of our own or set another \
                 [tls] state_dir",
                meta.uid()
            ),
        ));
    }
    for name in [CERT_FILE, KEY_FILE] {
        let path = dir.join(name);
        // symlink_metadata: a link's own owner is who could point it elsewhere.
        if let Ok(m) = fs::symlink_metadata(&path) {
            if foreign(&m) {
                return Err(CaError::new(
                    &path,
                    format!(
                        "belongs to uid {} (the proxy runs as {me}): its owner could \
                         replace the CA; remove it to have a CA generated here",
                        m.uid()
                    ),
                ));
            }
        }
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(CaError::new(
            dir,
            format!(
                "the CA's state directory is writable by {} (mode {:04o}): another user \
                 could replace the CA; make it private (chmod 700 {}) or set another \
                 [tls] state_dir",
                if mode & 0o002 != 0 {
                    "others"
                } else {
                    "its group"
                },
                mode & 0o7777,
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// A warning when the key file at `path` may be read by group or others.
fn loose_key_warning(path: &Path) -> Option<String> {
    let mode = fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "{}: the CA key is readable by group or others (mode {mode:04o})",
            path.display()
        )
    })
}

/// Tightens the state directory's key file to 0600 (through the open file,
/// so what is checked is what is changed), warning when it was wider.
fn tighten_key(path: &Path) -> Result<(), CaError> {
    let Ok(file) = File::open(path) else {
        // Missing or unreadable: loading says so.
        return Ok(());
    };
    let mode = file
        .metadata()
        .map_err(|e| CaError::new(path, format!("cannot read: {e}")))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| {
                CaError::new(
                    path,
                    format!("the CA key is readable by group or others (mode {mode:04o}) and cannot be made private: {e}"),
                )
            })?;
        log::warn!(
            "{}: the CA key was readable by group or others (mode {mode:04o}); tightened to 0600",
            path.display()
        );
    }
    Ok(())
}

fn unsupported_subject() -> &'static str {
    "the CA's subject name cannot be reproduced exactly (multi-valued or repeated \
     attributes, or an unusual string type): leaves would not chain to it"
}

fn read(path: &Path) -> Result<Vec<u8>, CaError> {
    fs::read(path).map_err(|e| CaError::new(path, format!("cannot read: {e}")))
}

/// Loads a PKCS#8 private key (what ring signs with), explaining the others.
fn load_key(path: &Path) -> Result<KeyPair, CaError> {
    let bytes = read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(CaError::new(path, "encrypted keys are not supported"));
    }
    let key = PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|_| CaError::new(path, "no PRIVATE KEY in this PEM file"))?;
    match &key {
        PrivateKeyDer::Pkcs8(_) => {}
        PrivateKeyDer::Sec1(_) | PrivateKeyDer::Pkcs1(_) => {
            return Err(CaError::new(
                path,
                format!(
                    "the key must be PKCS#8 (\"BEGIN PRIVATE KEY\"); convert it with: \
                     openssl pkcs8 -topk8 -nocrypt -in {0} -out {0}.pk8",
                    path.display()
                ),
            ))
        }
        _ => return Err(CaError::new(path, "unsupported private key format")),
    }
    KeyPair::try_from(&key).map_err(|e| {
        CaError::new(
            path,
            format!("unsupported key (ECDSA P-256/P-384, Ed25519 or RSA expected): {e}"),
        )
    })
}

/// The subject as rcgen will write it, or `None` if it cannot be written
/// identically (rcgen writes one attribute per RDN and each type once).
fn distinguished_name(facts: &CertFacts<'_>) -> Option<DistinguishedName> {
    let mut dn = DistinguishedName::new();
    for rdn in &facts.subject {
        let [NameAttr { oid, tag, value }] = rdn.as_slice() else {
            return None;
        };
        let ty = DnType::from_oid(oid);
        if dn.get(&ty).is_some() {
            return None;
        }
        let text = || std::str::from_utf8(value).ok();
        let v = match *tag {
            0x0c => DnValue::Utf8String(text()?.to_owned()),
            0x13 => DnValue::PrintableString(PrintableString::try_from(text()?).ok()?),
            0x16 => DnValue::Ia5String(Ia5String::try_from(text()?).ok()?),
            0x14 => DnValue::TeletexString(TeletexString::try_from(text()?).ok()?),
            0x1e => DnValue::BmpString(BmpString::from_utf16be(value.to_vec()).ok()?),
            0x1c => DnValue::UniversalString(UniversalString::from_utf32be(value.to_vec()).ok()?),
            _ => return None,
        };
        dn.push(ty, v);
    }
    Some(dn)
}

/// Generates a CA into `cert` and `key` (the caller holds the lock).
fn generate_into(cert: &Path, key: &Path) -> Result<(), CaError> {
    let key_pair = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CaError::new(key, format!("cannot generate a key: {e}")))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, ca_common_name());
    dn.push(DnType::OrganizationName, "portcullis");
    // Two generated CAs never share a subject: a client trusting another
    // install's CA then hears "unknown issuer", not "bad signature".
    dn.push(
        DnType::OrganizationalUnitName,
        format!("ca-{}", random_hex(4)),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + CA_VALIDITY;
    params.serial_number = Some(random_serial());
    let ca = params
        .self_signed(&key_pair)
        .map_err(|e| CaError::new(cert, format!("cannot sign the CA certificate: {e}")))?;

    write_new(key, key_pair.serialize_pem().as_bytes(), 0o600)?;
    write_new(cert, ca.pem().as_bytes(), 0o644)?;
    Ok(())
}

/// "portcullis local CA (host)", within the 64 characters a CN may have.
fn ca_common_name() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let base = "portcullis local CA";
    if host.is_empty() {
        return base.to_owned();
    }
    let room = 64 - base.len() - 3;
    let host: String = host.chars().take(room).collect();
    format!("{base} ({host})")
}

/// Writes `path` atomically: a temporary file created with `mode` (so the
/// bytes are never readable more widely), synced, then renamed into place.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    // A leftover from a crashed start of a process with our pid.
    let _ = fs::remove_file(&tmp);
    let err = |e: std::io::Error| CaError::new(path, format!("cannot write: {e}"));
    let mut f: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

/// `n` random bytes as hex.
fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .expect("system random number generator failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random positive 128-bit serial number.
pub(crate) fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    // ring's system RNG; a failure here means no entropy at all.
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .expect("system random number generator failed");
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // keep it 16 bytes long and positive
    SerialNumber::from_slice(&bytes)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn date(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .map(|t| t.date().to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// PEM text of a certificate (rcgen writes PEM only for certificates it
/// signed itself), with LF line ends as OpenSSL writes them.
pub(crate) fn pem_of(der: &[u8]) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new("CERTIFICATE", der), config)
}

/// Where a generated CA lives when the configuration names no directory:
/// `$XDG_STATE_HOME/portcullis`, else `~/.local/state/portcullis`.
pub fn default_state_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("portcullis"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".local/state/portcullis"))
}

/// The permission bits of a file, for warnings and tests.
pub fn file_mode(path: &Path) -> std::io::Result<u32> {
    Ok(fs::metadata(path)?.permissions().mode() & 0o7777)
}
