//! How to reach a parent (upstream) proxy: the configuration as data, for
//! the rules that name one and the session that dials it. Talking to it is
//! [`crate::protocol::parent`]'s job.

use std::fmt;
use std::net::SocketAddr;

/// How to reach a parent proxy: `http://[user:pass@]host:port` or
/// `socks5://[user:pass@]host:port` (`socks5h` is accepted as `socks5`:
/// portcullis always asks for the address it vetted).
#[derive(Clone, PartialEq, Eq)]
pub struct ParentProxy {
    /// What it speaks.
    pub kind: ParentKind,
    /// Where it listens (resolved once, when the configuration is read).
    pub addr: SocketAddr,
    /// Credentials to present, if any.
    pub credentials: Option<(String, String)>,
    /// The URL as written, without the password, for logs.
    pub display: String,
}

/// The protocol a parent proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentKind {
    /// HTTP `CONNECT`.
    Http,
    /// SOCKS5 `CONNECT`.
    Socks5,
}

impl fmt::Debug for ParentProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Display for ParentProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl ParentProxy {
    /// Parses `http://[user:pass@]host:port` or `socks5://...` (the default
    /// ports are 3128 and 1080). A host name is resolved here, once
    /// (blocking: call it when reading configuration, never on the reactor).
    pub fn parse(url: &str) -> Result<ParentProxy, String> {
        // Errors quote the URL without its password: they reach logs and
        // `--check` output.
        let shown = redacted(url);
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("{shown:?}: expected http://HOST:PORT or socks5://HOST:PORT"))?;
        let (kind, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "http" => (ParentKind::Http, 3128),
            "socks5" | "socks5h" => (ParentKind::Socks5, 1080),
            other => {
                return Err(format!(
                    "{shown:?}: unsupported scheme {other:?} (http or socks5)"
                ))
            }
        };
        let rest = rest.trim_end_matches('/');
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let credentials = match userinfo {
            None => None,
            Some(u) => {
                let (user, pass) = u.split_once(':').unwrap_or((u, ""));
                Some((percent_decode(user)?, percent_decode(pass)?))
            }
        };
        if let Some((user, pass)) = &credentials {
            if user.is_empty() || user.len() > 255 || pass.len() > 255 {
                return Err(format!(
                    "{shown:?}: user and password must be 1 to 255 bytes"
                ));
            }
        }
        let with_port = if hostport.contains(':') && !hostport.ends_with(']') {
            hostport.to_owned()
        } else {
            format!("{hostport}:{default_port}")
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&with_port)
            .map_err(|e| format!("{shown:?}: cannot resolve the parent proxy: {e}"))?
            .next()
            .ok_or_else(|| format!("{shown:?}: the parent proxy's name has no address"))?;
        let display = match &credentials {
            Some((user, _)) => format!("{scheme}://{user}:***@{hostport}"),
            None => format!("{scheme}://{hostport}"),
        };
        Ok(ParentProxy {
            kind,
            addr,
            credentials,
            display,
        })
    }
}

/// `url` with the password of its userinfo (if any) replaced by `***`.
fn redacted(url: &str) -> String {
    // Without a scheme (`user:pass@host:port`, a common slip) the part
    // before the last '@' is still userinfo.
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, hostport)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}{user}:***@{hostport}")
        }
        None => url.to_owned(),
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a bad %-escape in the parent proxy's credentials")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "credentials that are not UTF-8".to_string())
}
