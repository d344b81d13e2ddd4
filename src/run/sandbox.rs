//! macOS: `sandbox-exec` with a profile that allows network only to the
//! proxy's loopback port. Untested here (the project builds and tests on
//! Linux); `sandbox-exec` is deprecated by Apple but still shipped.

#![cfg_attr(not(target_os = "macos"), allow(dead_code))]

use std::ffi::OsString;

use portcullis::ListenAddr;

/// The Seatbelt profile: everything allowed but the network, which is
/// limited to the proxy's port on localhost (and to Unix-domain sockets,
/// which macOS programs need for system services; a Unix-socket listener of
/// the proxy is reached that way too).
pub fn profile(proxy: &ListenAddr) -> String {
    let mut p = String::from("(version 1)\n(allow default)\n(deny network*)\n");
    p.push_str("(allow network-outbound (remote unix-socket))\n");
    if let ListenAddr::Tcp(a) = proxy {
        p.push_str(&format!(
            "(allow network-outbound (remote ip \"localhost:{}\"))\n",
            a.port()
        ));
    }
    p
}

/// The words to put before CMD.
pub fn wrapper(proxy: &ListenAddr) -> Vec<OsString> {
    vec![
        "/usr/bin/sandbox-exec".into(),
        "-p".into(),
        profile(proxy).into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_allows_only_the_proxy_port() {
        let p = profile(&ListenAddr::Tcp("127.0.0.1:43210".parse().unwrap()));
        assert!(p.contains("(deny network*)"));
        assert!(p.contains("(remote ip \"localhost:43210\")"));
        assert_eq!(p.matches("(allow network").count(), 2, "{p}");
    }
}
