//! A kernel's TLS, in memory: what `setsockopt(SOL_TLS)` gives a socket,
//! for the simulator's transports. It takes the very key structs the core
//! hands a real kernel and seals and opens TLS 1.3 records with them (ring's
//! AEADs), so a hand-off at the wrong byte, a wrong key layout or a wrong
//! sequence number shows as a record that does not open.

use std::collections::VecDeque;

use ring::aead::{
    Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
};

use crate::tls::ktls::{
    Offload, ALERT, APPLICATION_DATA, TLS_CIPHER_AES_GCM_128, TLS_CIPHER_AES_GCM_256,
};

/// One direction's state.
struct Direction {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Direction {
    /// Reads a `tls12_crypto_info_*` struct as the kernel does.
    fn from_info(info: &[u8]) -> Direction {
        let version = u16::from_ne_bytes([info[0], info[1]]);
        assert_eq!(version, 0x0304, "the emulation speaks TLS 1.3 only");
        let cipher = u16::from_ne_bytes([info[2], info[3]]);
        let (alg, key, iv, seq) = match cipher {
            TLS_CIPHER_AES_GCM_128 | TLS_CIPHER_AES_GCM_256 => {
                let k = if cipher == TLS_CIPHER_AES_GCM_128 {
                    16
                } else {
                    32
                };
                let alg = if k == 16 { &AES_128_GCM } else { &AES_256_GCM };
                let key = &info[12..12 + k];
                let salt = &info[12 + k..16 + k];
                let mut iv = [0u8; 12];
                iv[..4].copy_from_slice(salt);
                iv[4..].copy_from_slice(&info[4..12]);
                (alg, key, iv, &info[16 + k..24 + k])
            }
            _ => {
                let mut iv = [0u8; 12];
                iv.copy_from_slice(&info[4..16]);
                (&CHACHA20_POLY1305, &info[16..48], iv, &info[48..56])
            }
        };
        assert_eq!(info.len(), 4 + 12 + key.len() + 8, "the struct's size");
        Direction {
            key: LessSafeKey::new(UnboundKey::new(alg, key).unwrap()),
            iv,
            seq: u64::from_be_bytes(seq.try_into().unwrap()),
        }
    }

    fn nonce(&mut self) -> Nonce {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(n)
    }

    fn seal(&mut self, kind: u8, data: &[u8]) -> Vec<u8> {
        let mut inner = data.to_vec();
        inner.push(kind);
        let len = (inner.len() + 16) as u16;
        let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        let nonce = self.nonce();
        self.key
            .seal_in_place_append_tag(nonce, Aad::from(header), &mut inner)
            .unwrap();
        let mut record = header.to_vec();
        record.extend(inner);
        record
    }

    /// Opens one whole record: its inner type and plaintext.
    fn open(&mut self, record: &[u8]) -> (u8, Vec<u8>) {
        let (header, body) = record.split_at(5);
        let mut body = body.to_vec();
        let nonce = self.nonce();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(<[u8; 5]>::try_from(header).unwrap()), &mut body)
            .expect("a record the handed-off keys open (hand-off at a record boundary, right keys and sequence)");
        let end = plain.iter().rposition(|&b| b != 0).expect("an inner type");
        (plain[end], plain[..end].to_vec())
    }
}

/// A socket's TLS in the kernel: raw records in, plaintext out, and the
/// other way.
pub(crate) struct KernelTls {
    tx: Direction,
    rx: Direction,
    /// Raw bytes not yet a whole record.
    staged: Vec<u8>,
    /// Opened records not yet read (a control record is read alone).
    opened: VecDeque<(u8, Vec<u8>)>,
}

impl std::fmt::Debug for KernelTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KernelTls(tx seq {}, rx seq {})",
            self.tx.seq, self.rx.seq
        )
    }
}

impl KernelTls {
    pub(crate) fn new(o: &Offload) -> KernelTls {
        KernelTls {
            tx: Direction::from_info(o.tx.bytes()),
            rx: Direction::from_info(o.rx.bytes()),
            staged: Vec::new(),
            opened: VecDeque::new(),
        }
    }

    /// Takes raw bytes the peer sent and opens every whole record.
    pub(crate) fn receive(&mut self, raw: impl IntoIterator<Item = u8>) {
        self.staged.extend(raw);
        while self.staged.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([self.staged[3], self.staged[4]]));
            if self.staged.len() < 5 + len {
                break;
            }
            let record: Vec<u8> = self.staged.drain(..5 + len).collect();
            let opened = self.rx.open(&record);
            self.opened.push_back(opened);
        }
    }

    /// Something to read (a record, or part of one).
    pub(crate) fn readable(&self) -> bool {
        !self.opened.is_empty()
    }

    /// Bytes of a record not yet whole.
    pub(crate) fn partial(&self) -> bool {
        !self.staged.is_empty()
    }

    /// Reads as `recvmsg` would: from one record type at a time, a control
    /// record alone.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Option<(usize, u8)> {
        let mut n = 0;
        let mut kind = None;
        while n < buf.len() {
            let Some((k, data)) = self.opened.front_mut() else {
                break;
            };
            match kind {
                None => kind = Some(*k),
                Some(first) if first != *k || first != APPLICATION_DATA => break,
                Some(_) => {}
            }
            let take = data.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&data[..take]);
            data.drain(..take);
            n += take;
            if data.is_empty() {
                self.opened.pop_front();
            }
            if kind != Some(APPLICATION_DATA) {
                break;
            }
        }
        kind.map(|k| (n, k))
    }

    /// Seals plaintext into records of at most 16 KiB.
    pub(crate) fn send(&mut self, data: &[u8]) -> Vec<u8> {
        data.chunks(16 * 1024)
            .flat_map(|c| self.tx.seal(APPLICATION_DATA, c))
            .collect()
    }

    pub(crate) fn close_notify(&mut self) -> Vec<u8> {
        self.tx.seal(ALERT, &[1, 0])
    }
}
