//! TLS test support: a test CA written to a temporary directory (and the
//! pair of them an inspecting proxy uses), a client trusting one, and a
//! local HTTPS origin on 127.0.0.1:0 (rustls over blocking std sockets, a
//! thread per connection) with a certificate for `localhost` and
//! `127.0.0.1`, or a bad one for the 502 tests.
//!
//! The origin answers each HTTP/1.1 request (keep-alive) with a body
//! `METHOD PATH\n`, and the headers `X-Origin-Sni` (the SNI it received, or
//! `-`) and `X-Origin-Alpn` (the negotiated protocol, or `-`). A request with
//! `Upgrade: websocket` switches to a WebSocket echo (every message sent
//! back) until the client closes.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection, StreamOwned,
};

use super::{read_until_blank_line, ws_config, Server, TempDir};

/// A CA for tests, with its PEM files in a temporary directory.
pub struct TestCa {
    pub dir: TempDir,
    /// `ca.pem`: give it to clients (`curl --cacert`) or as `upstream_ca`.
    pub cert_path: PathBuf,
    /// `ca-key.pem` (PKCS#8): usable as the proxy's `ca_key`.
    pub key_path: PathBuf,
    pub cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// Which certificate an origin presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginCert {
    /// For `localhost` and `127.0.0.1`, signed by the test CA, valid now.
    Good,
    /// As `Good`, but expired yesterday.
    Expired,
    /// Signed by the test CA, for `wrong.invalid` only.
    WrongName,
    /// Self-signed for `localhost` and `127.0.0.1`: unknown issuer.
    SelfSigned,
}

fn key() -> KeyPair {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
}

fn private_key(k: &KeyPair) -> PrivateKeyDer<'static> {
    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(k.serialize_der()))
}

fn leaf_params(names: &[&str], expired: bool) -> CertificateParams {
    let mut p =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, names[0]);
    p.distinguished_name = dn;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = time::OffsetDateTime::now_utc();
    if expired {
        p.not_before = now - time::Duration::days(30);
        p.not_after = now - time::Duration::days(1);
    } else {
        p.not_before = now - time::Duration::hours(1);
        p.not_after = now + time::Duration::days(7);
    }
    p
}

impl TestCa {
    /// A fresh CA ("portcullis test CA"), written as `ca.pem` + `ca-key.pem`.
    pub fn new() -> TestCa {
        TestCa::named("portcullis test CA", None)
    }

    /// A fresh CA with subject `CN=cn` (and `O=org`): a private root, as a
    /// corporate egress box's.
    pub fn named(cn: &str, org: Option<&str>) -> TestCa {
        let dir = TempDir::new("tls-ca");
        let k = key();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        if let Some(org) = org {
            dn.push(DnType::OrganizationName, org);
        }
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(365);
        let cert = p.self_signed(&k).unwrap();
        let cert_path = dir.0.join("ca.pem");
        let key_path = dir.0.join("ca-key.pem");
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, k.serialize_pem()).unwrap();
        TestCa {
            dir,
            cert_path,
            key_path,
            cert_der: cert.der().clone(),
            issuer: Issuer::new(p, k),
        }
    }

    /// A chain (leaf, CA) and key for `names` (DNS names or IP addresses).
    pub fn leaf(
        &self,
        names: &[&str],
        expired: bool,
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let k = key();
        let cert = leaf_params(names, expired)
            .signed_by(&k, &self.issuer)
            .unwrap();
        (
            vec![cert.der().clone(), self.cert_der.clone()],
            private_key(&k),
        )
    }

    /// Roots holding just this CA.
    pub fn roots(&self) -> RootCertStore {
        let mut r = RootCertStore::empty();
        r.add(self.cert_der.clone()).unwrap();
        r
    }

    /// A client config trusting just this CA, offering ALPN `alpn`.
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        client_config(self.roots(), alpn)
    }
}

/// A proxy CA (signs the leaves clients see) and an upstream CA (signs the
/// origin's certificate; the proxy trusts it through `upstream_ca`).
pub struct Cas {
    pub proxy: TestCa,
    pub upstream: TestCa,
}

impl Cas {
    pub fn new() -> Cas {
        Cas {
            proxy: TestCa::new(),
            upstream: TestCa::new(),
        }
    }

    /// The config's `[tls]` table: `ca_cert` and `ca_key` the proxy CA's,
    /// `upstream_ca` the upstream CA (more keys may follow it). The roots
    /// beside it are webpki's, not this machine's store (whose
    /// /etc/ssl/certs may hold a snakeoil `CN=localhost`): the same
    /// everywhere. `upstream_roots = "platform"` has its own test.
    pub fn tls_table(&self) -> String {
        format!(
            "[tls]\nca_cert = \"{}\"\nca_key = \"{}\"\nupstream_ca = [\"{}\"]\nupstream_roots = \"webpki\"\n",
            self.proxy.cert_path.display(),
            self.proxy.key_path.display(),
            self.upstream.cert_path.display(),
        )
    }

    /// A config: [`Cas::tls_table`], then [`terminate_rule`].
    pub fn terminate_config(&self, port: u16, rest: &str) -> String {
        format!("{}\n{}", self.tls_table(), terminate_rule(port, rest))
    }
}

/// Rule `api`, terminating TLS for `localhost` (and its address) on
/// `port`, its other keys `rest`.
pub fn terminate_rule(port: u16, rest: &str) -> String {
    format!(
        r#"[[rules]]
name = "api"
action = "allow"
hosts = ["localhost"]
cidrs = ["127.0.0.1/32"]
ports = [{port}]
tls = "terminate"
{rest}
"#
    )
}

/// A TLS client over `tcp` sending SNI `sni` (an address sends none),
/// trusting just `ca`, offering ALPN `http/1.1`.
pub fn tls_client(
    ca: &TestCa,
    tcp: TcpStream,
    sni: &str,
) -> StreamOwned<ClientConnection, TcpStream> {
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let conn = ClientConnection::new(ca.client_config(&[b"http/1.1"]), name).unwrap();
    StreamOwned::new(conn, tcp)
}

/// A rustls client config with `roots` (ring provider) offering `alpn`.
pub fn client_config(roots: RootCertStore, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut c =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

/// The server config of an origin presenting `which`.
pub fn origin_config(ca: &TestCa, which: OriginCert) -> Arc<ServerConfig> {
    let both = ["localhost", "127.0.0.1"];
    let (chain, key) = match which {
        OriginCert::Good => ca.leaf(&both, false),
        OriginCert::Expired => ca.leaf(&both, true),
        OriginCert::WrongName => ca.leaf(&["wrong.invalid"], false),
        OriginCert::SelfSigned => {
            let k = key();
            let cert = leaf_params(&both, false).self_signed(&k).unwrap();
            (vec![cert.der().clone()], private_key(&k))
        }
    };
    let mut c =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// An HTTPS origin with a good certificate.
pub fn https_origin(ca: &TestCa) -> Server {
    https_origin_with(ca, OriginCert::Good)
}

/// An HTTPS origin presenting `which`.
pub fn https_origin_with(ca: &TestCa, which: OriginCert) -> Server {
    https_origin_from(origin_config(ca, which))
}

/// An HTTPS origin with this server config.
pub fn https_origin_from(config: Arc<ServerConfig>) -> Server {
    Server::start(move |tcp| {
        let conn = match ServerConnection::new(config.clone()) {
            Ok(c) => c,
            Err(_) => return,
        };
        let mut tls = StreamOwned::new(conn, tcp);
        let _ = serve(&mut tls);
        tls.conn.send_close_notify();
        let _ = tls.flush();
    })
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

/// Answers requests until the client closes or upgrades.
fn serve(tls: &mut Tls) -> io::Result<()> {
    loop {
        let head = match read_until_blank_line(tls) {
            Ok(h) => h,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if !matches!(req.parse(&head), Ok(httparse::Status::Complete(_))) {
            tls.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            return Ok(());
        }
        let method = req.method.unwrap_or("").to_owned();
        let path = req.path.unwrap_or("").to_owned();
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let length: u64 = header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let ws_key = header("sec-websocket-key");
        let upgrade = header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        io::copy(&mut (&mut *tls).take(length), &mut io::sink())?;

        if upgrade {
            if let Some(key) = ws_key {
                let accept = tungstenite::handshake::derive_accept_key(key.trim().as_bytes());
                write!(
                    tls,
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                     Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                )?;
                tls.flush()?;
                return ws_echo(tls);
            }
        }

        // `/bytes/N`: N bytes of the seed-1 payload (a download to check).
        if let Some(n) = path
            .strip_prefix("/bytes/")
            .and_then(|n| n.parse::<u64>().ok())
        {
            write!(tls, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")?;
            let mut gen = super::payload::DataGen::new(1);
            let mut chunk = vec![0u8; 256 * 1024];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len() as u64) as usize;
                gen.fill(&mut chunk[..k]);
                tls.write_all(&chunk[..k])?;
                left -= k as u64;
            }
            tls.flush()?;
            continue;
        }
        let sni = tls.conn.server_name().unwrap_or("-").to_owned();
        let alpn = tls
            .conn
            .alpn_protocol()
            .map_or("-".to_owned(), |p| String::from_utf8_lossy(p).into_owned());
        // npm's registry endpoints (`npm ping`: /-/ping) answer JSON;
        // `/echo-headers...`: the head as received follows (what a proxy
        // injected into it shows there).
        let (kind, body) = if path.starts_with("/-/") {
            ("application/json", "{}\n".to_owned())
        } else if path.starts_with("/echo-headers") {
            (
                "text/plain",
                format!("{method} {path}\n{}", String::from_utf8_lossy(&head)),
            )
        } else {
            ("text/plain", format!("{method} {path}\n"))
        };
        write!(
            tls,
            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
             X-Origin-Sni: {sni}\r\nX-Origin-Alpn: {alpn}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        )?;
        tls.flush()?;
        if close {
            return Ok(());
        }
    }
}

/// Sends every message back until the client closes.
fn ws_echo(tls: &mut Tls) -> io::Result<()> {
    use tungstenite::protocol::{Role, WebSocket};
    let mut ws = WebSocket::from_raw_socket(tls, Role::Server, Some(ws_config()));
    loop {
        match ws.read() {
            Ok(m) if m.is_binary() || m.is_text() => {
                if ws.send(m).is_err() {
                    return Ok(());
                }
            }
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
}
