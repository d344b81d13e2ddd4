//! Kernel TLS (kTLS), the sans-IO half: what a terminated session hands the
//! kernel once its handshakes are done, and what it makes of the records
//! the kernel cannot handle itself.
//!
//! After the hand-off the socket carries plaintext for us and the kernel
//! encrypts and decrypts the records, so bytes move with plain reads and
//! writes (and splice) and never pass through rustls. Three things stay
//! ours:
//! - **The keys and sequence numbers** at the hand-off, as the kernel's
//!   `tls12_crypto_info_*` structs ([`Offload`]); rustls gives them
//!   (`dangerous_extract_secrets`) only when nothing is buffered either way.
//! - **Where the hand-off may happen**: the kernel must see the next record
//!   from its first byte, so the bytes given to rustls must end on a record
//!   boundary ([`RecordCursor`]).
//! - **Control records** that arrive afterwards ([`Control`]): a
//!   close_notify is the peer's EOF; session tickets are dropped (we do not
//!   resume through the kernel); a KeyUpdate ends the session, since this
//!   kernel generation cannot take new keys, and the error says how to turn
//!   the offload off.
//!
//! The syscalls (the ULP, the keys, `recvmsg` with the record type) are the
//! shell's (`crate::io::ktls`).

use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};

/// TLS record content types.
pub(crate) const CHANGE_CIPHER_SPEC: u8 = 20;
pub(crate) const ALERT: u8 = 21;
pub(crate) const HANDSHAKE: u8 = 22;
pub(crate) const APPLICATION_DATA: u8 = 23;

/// `linux/tls.h`: versions and cipher types of `struct tls_crypto_info`.
const TLS_1_2_VERSION: u16 = 0x0303;
const TLS_1_3_VERSION: u16 = 0x0304;
pub(crate) const TLS_CIPHER_AES_GCM_128: u16 = 51;
pub(crate) const TLS_CIPHER_AES_GCM_256: u16 = 52;
pub(crate) const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

/// The ciphers the kernel takes, probed once at start. [`Support::NONE`]
/// (the default) means the offload is off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Support {
    bits: u8,
}

impl Support {
    /// No offload.
    pub const NONE: Support = Support { bits: 0 };

    const fn bit(cipher: u16) -> u8 {
        match cipher {
            TLS_CIPHER_AES_GCM_128 => 1,
            TLS_CIPHER_AES_GCM_256 => 2,
            TLS_CIPHER_CHACHA20_POLY1305 => 4,
            _ => 0,
        }
    }

    /// Adds a cipher type (`TLS_CIPHER_*`) the kernel took (Linux's probe).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn with(self, cipher: u16) -> Support {
        Support {
            bits: self.bits | Support::bit(cipher),
        }
    }

    /// Whether any cipher may be offloaded.
    pub fn any(self) -> bool {
        self.bits != 0
    }

    /// Whether a session that negotiated `suite` may be offloaded.
    pub(crate) fn allows(self, suite: rustls::CipherSuite) -> bool {
        match cipher_of(suite) {
            Some(c) => self.bits & Support::bit(c) != 0,
            None => false,
        }
    }

    /// The names of the ciphers, for the start-up line.
    pub fn names(self) -> Vec<&'static str> {
        [
            (TLS_CIPHER_AES_GCM_128, "AES-128-GCM"),
            (TLS_CIPHER_AES_GCM_256, "AES-256-GCM"),
            (TLS_CIPHER_CHACHA20_POLY1305, "ChaCha20-Poly1305"),
        ]
        .into_iter()
        .filter(|(c, _)| self.bits & Support::bit(*c) != 0)
        .map(|(_, n)| n)
        .collect()
    }
}

/// The kernel cipher type of a rustls suite, for the suites kTLS knows.
fn cipher_of(suite: rustls::CipherSuite) -> Option<u16> {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(TLS_CIPHER_AES_GCM_128),
        S::TLS13_AES_256_GCM_SHA384
        | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Some(TLS_CIPHER_AES_GCM_256),
        S::TLS13_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(TLS_CIPHER_CHACHA20_POLY1305),
        _ => None,
    }
}

/// One direction's keys as the kernel's `struct tls12_crypto_info_*`
/// (`setsockopt(SOL_TLS, TLS_TX or TLS_RX)`): the two-u16 header, then
/// iv, key, salt and record sequence as byte arrays (no padding). Zeroed
/// when dropped.
pub(crate) struct CryptoInfo(Vec<u8>);

impl CryptoInfo {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The cipher type, from the header.
    pub(crate) fn cipher(&self) -> u16 {
        u16::from_ne_bytes([self.0[2], self.0[3]])
    }
}

impl Drop for CryptoInfo {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference; a
            // volatile write keeps the compiler from eliding the wipe.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

impl std::fmt::Debug for CryptoInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CryptoInfo(cipher {}, {} bytes)",
            self.cipher(),
            self.0.len()
        )
    }
}

/// Both directions' keys for one socket.
#[derive(Debug)]
pub(crate) struct Offload {
    pub(crate) tx: CryptoInfo,
    pub(crate) rx: CryptoInfo,
}

/// The kernel structs for a session rustls finished, from its secrets.
pub(crate) fn offload(
    version: ProtocolVersion,
    secrets: ExtractedSecrets,
) -> Result<Offload, String> {
    let version = match version {
        ProtocolVersion::TLSv1_2 => TLS_1_2_VERSION,
        ProtocolVersion::TLSv1_3 => TLS_1_3_VERSION,
        v => return Err(format!("kTLS does not take {v:?}")),
    };
    let (tx_seq, tx) = &secrets.tx;
    let (rx_seq, rx) = &secrets.rx;
    Ok(Offload {
        tx: crypto_info(version, *tx_seq, tx)?,
        rx: crypto_info(version, *rx_seq, rx)?,
    })
}

/// `iv` is rustls's 12-byte nonce base: for AES-GCM the kernel wants its
/// first 4 bytes as the salt and the other 8 as the iv (TLS 1.2 and 1.3
/// alike, as rustls builds the TLS 1.2 explicit nonce the 1.3 way); for
/// ChaCha20 all 12 as the iv and no salt.
fn crypto_info(version: u16, seq: u64, s: &ConnectionTrafficSecrets) -> Result<CryptoInfo, String> {
    let (cipher, key, iv) = match s {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (TLS_CIPHER_AES_GCM_128, key, iv),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (TLS_CIPHER_AES_GCM_256, key, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (TLS_CIPHER_CHACHA20_POLY1305, key, iv)
        }
        _ => return Err("kTLS does not take this cipher".into()),
    };
    raw_crypto_info(version, seq, cipher, key.as_ref(), iv.as_ref())
}

fn raw_crypto_info(
    version: u16,
    seq: u64,
    cipher: u16,
    key: &[u8],
    iv: &[u8],
) -> Result<CryptoInfo, String> {
    let want_key = match cipher {
        TLS_CIPHER_AES_GCM_128 => 16,
        _ => 32,
    };
    if key.len() != want_key || iv.len() != 12 {
        return Err(format!(
            "unexpected key material: {} byte key, {} byte iv",
            key.len(),
            iv.len()
        ));
    }
    let mut b = Vec::with_capacity(56);
    b.extend_from_slice(&version.to_ne_bytes());
    b.extend_from_slice(&cipher.to_ne_bytes());
    if cipher == TLS_CIPHER_CHACHA20_POLY1305 {
        b.extend_from_slice(iv);
        b.extend_from_slice(key);
    } else {
        b.extend_from_slice(&iv[4..]);
        b.extend_from_slice(key);
        b.extend_from_slice(&iv[..4]);
    }
    b.extend_from_slice(&seq.to_be_bytes());
    Ok(CryptoInfo(b))
}

/// Made-up TLS 1.3 keys of the right shape for `cipher`, for probing
/// which ciphers the kernel takes (Linux's probe).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn probe_crypto_info(cipher: u16) -> CryptoInfo {
    let key_len = if cipher == TLS_CIPHER_AES_GCM_128 {
        16
    } else {
        32
    };
    raw_crypto_info(TLS_1_3_VERSION, 0, cipher, &[7; 32][..key_len], &[1; 12])
        .expect("well-formed probe keys")
}

/// A walk over a stream of length-prefixed units: an `H`-byte header
/// whose bytes from `LEN_AT` on are the body's length (big-endian), then
/// the body. TLS records are `Framing<5, 3>`, handshake messages
/// `Framing<4, 1>`; either may be cut anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Framing<const H: usize, const LEN_AT: usize> {
    header: [u8; H],
    /// Header bytes seen of the unit being started.
    have: usize,
    /// Body bytes still to come of the current unit.
    left: usize,
}

impl<const H: usize, const LEN_AT: usize> Framing<H, LEN_AT> {
    const fn new() -> Self {
        Framing {
            header: [0; H],
            have: 0,
            left: 0,
        }
    }

    /// Follows `bytes`, the next of the stream, showing `on_header` each
    /// header as it completes; stops early with what it returns.
    fn advance<T>(
        &mut self,
        mut bytes: &[u8],
        mut on_header: impl FnMut(&[u8; H]) -> Option<T>,
    ) -> Option<T> {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                self.left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (H - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            self.have += n;
            if self.have < H {
                continue;
            }
            self.have = 0;
            self.left = self.header[LEN_AT..]
                .iter()
                .fold(0, |len, &b| len << 8 | usize::from(b));
            if let Some(stop) = on_header(&self.header) {
                return Some(stop);
            }
        }
        None
    }

    /// The stream so far ends exactly where a unit ends.
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.left == 0
    }
}

/// Where a byte stream of TLS records stands: inside a header, inside a
/// record's body, or exactly between records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordCursor(Framing<5, 3>);

impl Default for RecordCursor {
    fn default() -> Self {
        RecordCursor(Framing::new())
    }
}

impl RecordCursor {
    /// Follows `bytes`, the next of the stream.
    pub(crate) fn advance(&mut self, bytes: &[u8]) {
        self.0.advance(bytes, |_| None::<()>);
    }

    /// The stream so far ends exactly where a record ends.
    pub(crate) fn at_boundary(&self) -> bool {
        self.0.at_boundary()
    }
}

/// What a record read from a kTLS socket means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// Application data: the bytes are the peer's.
    Data,
    /// A control record handled here (a session ticket, a warning):
    /// nothing for the caller; read on.
    Skip,
    /// close_notify: the peer's clean end.
    CloseNotify,
    /// The session cannot go on (a fatal alert, a KeyUpdate, junk).
    Fail(String),
}

/// The control records after a hand-off, one socket's: a handshake message
/// may span records, so its remaining length is kept between them; and how
/// many were skipped, since a peer streaming tickets or warnings would
/// otherwise keep a read loop (and the reactor) busy for as long as it
/// sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Control {
    messages: Framing<4, 1>,
    skipped: u32,
}

/// Control records a side may send after the hand-off before it is taken
/// for an attack: servers send a few session tickets (rustls 2 to 4,
/// OpenSSL 2), warnings are rarer still.
pub(crate) const MAX_SKIPPED: u32 = 1024;

impl Default for Control {
    fn default() -> Self {
        Control {
            messages: Framing::new(),
            skipped: 0,
        }
    }
}

/// TLS handshake message types that may follow a finished handshake.
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
const HELLO_REQUEST: u8 = 0;

/// How to turn the offload off, for every error that a kernel hand-off
/// causes.
pub(crate) const FIX: &str = "set ktls = false in [tls] (or drop --ktls)";

impl Control {
    /// Classifies one record of type `kind` whose payload is `payload`.
    pub(crate) fn on_record(&mut self, kind: u8, payload: &[u8]) -> Record {
        let record = self.classify(kind, payload);
        if record == Record::Skip {
            self.skipped += 1;
            if self.skipped > MAX_SKIPPED {
                return Record::Fail(format!(
                    "the peer sent more than {MAX_SKIPPED} control records after the handshake"
                ));
            }
        }
        record
    }

    fn classify(&mut self, kind: u8, payload: &[u8]) -> Record {
        match kind {
            APPLICATION_DATA => Record::Data,
            ALERT => match payload {
                [_, 0] => Record::CloseNotify,
                // user_canceled: a warning that a close_notify follows.
                [1, 90] => Record::Skip,
                [level, desc] => {
                    Record::Fail(format!("TLS alert {desc} (level {level}) from the peer"))
                }
                _ => Record::Fail(format!("a malformed TLS alert ({} bytes)", payload.len())),
            },
            HANDSHAKE => self.handshake(payload),
            CHANGE_CIPHER_SPEC => {
                Record::Fail("a ChangeCipherSpec record after the handshake".into())
            }
            other => Record::Fail(format!("a TLS record of unknown type {other}")),
        }
    }

    fn handshake(&mut self, bytes: &[u8]) -> Record {
        let stop = self.messages.advance(bytes, |&[kind, ..]| match kind {
            NEW_SESSION_TICKET => None,
            KEY_UPDATE => Some(format!(
                "the peer updated its TLS keys, which kernel TLS cannot follow: {FIX}"
            )),
            HELLO_REQUEST => Some("the peer asked to renegotiate (not supported)".into()),
            other => Some(format!(
                "a TLS handshake message of type {other} after the handshake"
            )),
        });
        stop.map_or(Record::Skip, Record::Fail)
    }
}
