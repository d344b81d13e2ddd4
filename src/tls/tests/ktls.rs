//! The kernel hand-off's sans-IO half: where records end, what control
//! records mean, and the key structs' layout, split at every byte.

use crate::tls::ktls::{
    offload, probe_crypto_info, Control, Record, RecordCursor, Support, ALERT, APPLICATION_DATA,
    CHANGE_CIPHER_SPEC, HANDSHAKE, TLS_CIPHER_AES_GCM_128, TLS_CIPHER_AES_GCM_256,
    TLS_CIPHER_CHACHA20_POLY1305,
};
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};

/// Two records (a 3-byte body, an empty one) and the start of a third.
fn stream() -> Vec<u8> {
    let mut s = vec![23, 3, 3, 0, 3, 1, 2, 3];
    s.extend([21, 3, 3, 0, 0]);
    s.extend([23, 3, 3, 0, 2, 9]);
    s
}

#[test]
fn the_cursor_knows_a_boundary_whatever_the_split() {
    let s = stream();
    // Boundaries after byte 8 (first record) and 13 (the empty one), and
    // at the start.
    let boundaries = [0, 8, 13];
    for split in 0..=s.len() {
        let mut c = RecordCursor::default();
        c.advance(&s[..split]);
        assert_eq!(
            c.at_boundary(),
            boundaries.contains(&split),
            "after {split}"
        );
        // The rest one byte at a time, checking each step.
        for (i, b) in s[split..].iter().enumerate() {
            c.advance(std::slice::from_ref(b));
            let at = split + i + 1;
            assert_eq!(
                c.at_boundary(),
                boundaries.contains(&at),
                "split {split}, at {at}"
            );
        }
    }
}

#[test]
fn a_record_of_the_largest_length_is_followed_to_its_end() {
    let mut c = RecordCursor::default();
    c.advance(&[23, 3, 3, 0xff, 0xff]);
    c.advance(&vec![0; 0xfffe]);
    assert!(!c.at_boundary());
    c.advance(&[0]);
    assert!(c.at_boundary());
}

/// Two NewSessionTickets in one record, then one split across records at
/// every byte: all skipped.
#[test]
fn session_tickets_are_skipped_however_they_are_cut() {
    let ticket = |len: usize| {
        let mut m = vec![4, 0, (len >> 8) as u8, len as u8];
        m.extend(std::iter::repeat_n(0xab, len));
        m
    };
    let mut c = Control::default();
    let mut two = ticket(10);
    two.extend(ticket(300));
    assert_eq!(c.on_record(HANDSHAKE, &two), Record::Skip);
    let one = ticket(40);
    for split in 0..=one.len() {
        let mut c = Control::default();
        assert_eq!(
            c.on_record(HANDSHAKE, &one[..split]),
            Record::Skip,
            "{split}"
        );
        assert_eq!(
            c.on_record(HANDSHAKE, &one[split..]),
            Record::Skip,
            "{split}"
        );
        // Whatever follows starts a new message: a KeyUpdate is seen.
        assert!(matches!(
            c.on_record(HANDSHAKE, &[24, 0, 0, 1, 0]),
            Record::Fail(_)
        ));
    }
}

#[test]
fn a_key_update_fails_the_side_and_names_the_fix() {
    // Behind a ticket in the same record, and split inside its header.
    let mut c = Control::default();
    let mut r = vec![4, 0, 0, 2, 1, 1];
    r.extend([24, 0]);
    assert_eq!(c.on_record(HANDSHAKE, &r), Record::Skip);
    match c.on_record(HANDSHAKE, &[0, 1, 0]) {
        Record::Fail(why) => {
            assert!(why.contains("updated its TLS keys"), "{why}");
            assert!(why.contains("ktls = false"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_handshake_messages_after_the_handshake_fail() {
    for kind in [0u8, 1, 2, 11, 20] {
        let mut c = Control::default();
        assert!(
            matches!(c.on_record(HANDSHAKE, &[kind, 0, 0, 0]), Record::Fail(_)),
            "{kind}"
        );
    }
}

#[test]
fn alerts_close_notify_warning_and_fatal() {
    let mut c = Control::default();
    assert_eq!(c.on_record(ALERT, &[1, 0]), Record::CloseNotify);
    assert_eq!(c.on_record(ALERT, &[2, 0]), Record::CloseNotify);
    assert_eq!(c.on_record(ALERT, &[1, 90]), Record::Skip);
    assert!(matches!(c.on_record(ALERT, &[2, 40]), Record::Fail(w) if w.contains("alert 40")));
    assert!(matches!(c.on_record(ALERT, &[1]), Record::Fail(_)));
    assert!(matches!(c.on_record(ALERT, &[1, 0, 0]), Record::Fail(_)));
    assert_eq!(c.on_record(APPLICATION_DATA, b"x"), Record::Data);
    assert!(matches!(
        c.on_record(CHANGE_CIPHER_SPEC, &[1]),
        Record::Fail(_)
    ));
    assert!(matches!(c.on_record(99, &[1]), Record::Fail(_)));
}

/// The kernel's `tls12_crypto_info_aes_gcm_128`: version, cipher, then
/// iv (the nonce's last 8), key, salt (its first 4), the sequence number
/// big-endian.
#[test]
fn aes_gcm_keys_are_laid_out_as_the_kernel_reads_them() {
    let iv: [u8; 12] = std::array::from_fn(|i| 100 + i as u8);
    let mut key32 = [0u8; 32];
    key32.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let secrets = ExtractedSecrets {
        tx: (
            7,
            ConnectionTrafficSecrets::Aes256Gcm {
                key: key32.into(),
                iv: rustls::crypto::cipher::Iv::new(iv),
            },
        ),
        rx: (
            0x0102_0304_0506_0708,
            ConnectionTrafficSecrets::Chacha20Poly1305 {
                key: key32.into(),
                iv: rustls::crypto::cipher::Iv::new(iv),
            },
        ),
    };
    let o = offload(ProtocolVersion::TLSv1_3, secrets).unwrap();
    let tx = o.tx.bytes();
    assert_eq!(tx.len(), 4 + 8 + 32 + 4 + 8);
    assert_eq!(&tx[..2], &0x0304u16.to_ne_bytes());
    assert_eq!(o.tx.cipher(), TLS_CIPHER_AES_GCM_256);
    assert_eq!(&tx[4..12], &iv[4..]);
    assert_eq!(&tx[12..44], &key32);
    assert_eq!(&tx[44..48], &iv[..4]);
    assert_eq!(&tx[48..], &7u64.to_be_bytes());
    // ChaCha20: the whole nonce as the iv, no salt.
    let rx = o.rx.bytes();
    assert_eq!(rx.len(), 4 + 12 + 32 + 8);
    assert_eq!(o.rx.cipher(), TLS_CIPHER_CHACHA20_POLY1305);
    assert_eq!(&rx[4..16], &iv);
    assert_eq!(&rx[16..48], &key32);
    assert_eq!(&rx[48..], &[1, 2, 3, 4, 5, 6, 7, 8]);
    // TLS 1.2 has its own version number; 1.0 is refused.
    let secrets = |v| {
        offload(
            v,
            ExtractedSecrets {
                tx: (
                    0,
                    ConnectionTrafficSecrets::Aes256Gcm {
                        key: key32.into(),
                        iv: rustls::crypto::cipher::Iv::new(iv),
                    },
                ),
                rx: (
                    0,
                    ConnectionTrafficSecrets::Aes256Gcm {
                        key: key32.into(),
                        iv: rustls::crypto::cipher::Iv::new(iv),
                    },
                ),
            },
        )
    };
    assert_eq!(
        &secrets(ProtocolVersion::TLSv1_2).unwrap().tx.bytes()[..2],
        &0x0303u16.to_ne_bytes()
    );
    assert!(secrets(ProtocolVersion::TLSv1_0).is_err());
    let probe = probe_crypto_info(TLS_CIPHER_AES_GCM_128);
    assert_eq!(probe.bytes().len(), 4 + 8 + 16 + 4 + 8);
}

#[test]
fn support_allows_only_the_probed_ciphers() {
    use rustls::CipherSuite as S;
    let s = Support::NONE.with(TLS_CIPHER_AES_GCM_128);
    assert!(s.any());
    assert!(s.allows(S::TLS13_AES_128_GCM_SHA256));
    assert!(s.allows(S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256));
    assert!(!s.allows(S::TLS13_AES_256_GCM_SHA384));
    assert!(!s.allows(S::TLS13_CHACHA20_POLY1305_SHA256));
    assert!(!Support::NONE.any());
    assert!(!Support::NONE.allows(S::TLS13_AES_128_GCM_SHA256));
    assert_eq!(s.names(), ["AES-128-GCM"]);
}

/// A peer streaming tickets (or warnings) is cut off after MAX_SKIPPED
/// records rather than keeping a read loop busy for as long as it sends.
#[test]
fn endless_control_records_fail_the_side() {
    use crate::tls::ktls::MAX_SKIPPED;
    let mut c = Control::default();
    for i in 0..MAX_SKIPPED {
        let r = if i % 2 == 0 {
            c.on_record(HANDSHAKE, &[4, 0, 0, 1, 0])
        } else {
            c.on_record(ALERT, &[1, 90])
        };
        assert_eq!(r, Record::Skip, "{i}");
    }
    assert!(matches!(
        c.on_record(HANDSHAKE, &[4, 0, 0, 1, 0]),
        Record::Fail(w) if w.contains("control records")
    ));
}
