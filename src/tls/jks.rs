//! A Java KeyStore (JKS) of trusted certificates, for `JAVA_TOOL_OPTIONS`.
//!
//! JVMs read none of the PEM variables, and setting
//! `javax.net.ssl.trustStore` replaces their own roots: the store holds the
//! proxy's CA plus the system's roots. JDK 17 cannot read a PEM trust store
//! (no `PEM` keystore type), and a PKCS#12 store needs Java's own
//! trusted-certificate attribute that only keytool writes; JKS, which every
//! JDK reads, is a few lines (its layout is `sun.security.provider.JavaKeyStore`'s).

use rustls::pki_types::CertificateDer;

/// The store's password (the JDK's customary default): only for the
/// integrity digest; the store holds no secrets.
pub const PASSWORD: &str = "changeit";

/// The JKS bytes holding `certs` as trusted-certificate entries named
/// `alias-N`, stamped `now_ms`.
pub fn trust_store(certs: &[CertificateDer<'_>], alias: &str, now_ms: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xFEED_FEEDu32.to_be_bytes());
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(certs.len() as u32).to_be_bytes());
    let utf = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as u16).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    for (i, cert) in certs.iter().enumerate() {
        out.extend_from_slice(&2u32.to_be_bytes()); // a trusted certificate
        utf(&mut out, &format!("{alias}-{i}"));
        out.extend_from_slice(&now_ms.to_be_bytes());
        utf(&mut out, "X.509");
        out.extend_from_slice(&(cert.len() as u32).to_be_bytes());
        out.extend_from_slice(cert);
    }
    // SHA-1 over the password (UTF-16BE), a fixed phrase, then the store.
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    for unit in PASSWORD.encode_utf16() {
        ctx.update(&unit.to_be_bytes());
    }
    ctx.update(b"Mighty Aphrodite");
    ctx.update(&out);
    out.extend_from_slice(ctx.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let a = CertificateDer::from(vec![1u8, 2, 3]);
        let store = trust_store(&[a], "ca", 7);
        assert_eq!(
            &store[..12],
            &[0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2, 0, 0, 0, 1]
        );
        assert_eq!(&store[12..16], &[0, 0, 0, 2]);
        assert_eq!(&store[16..22], b"\0\x04ca-0");
        assert_eq!(&store[22..30], &7u64.to_be_bytes());
        assert_eq!(&store[30..37], b"\0\x05X.509");
        assert_eq!(&store[37..44], &[0, 0, 0, 3, 1, 2, 3]);
        assert_eq!(store.len(), 44 + 20);
    }
}
