//! This host's own interface addresses: refused by default like the other
//! special ranges (a service bound to `0.0.0.0` here answers on every one
//! of them), under the name `this-host`, each as a single address a rule
//! must name. Read with `getifaddrs` at start and on every policy change
//! (reload, control), so a new interface address is covered from the next
//! reload on.
//!
//! Addresses on loopback interfaces are left out: 127/8 and ::1 are refused
//! as `loopback` already, and other addresses put on `lo` are how a network
//! namespace fakes public hosts (our tests do). Interfaces are not watched
//! between reloads (no netlink socket in the reactor).

use std::net::IpAddr;
use std::sync::RwLock;

/// The set in force; empty until [`refresh`] runs (so unit tests see none).
static ADDRS: RwLock<Vec<IpAddr>> = RwLock::new(Vec::new());

/// Whether `addr` (canonical) is one of this host's non-loopback
/// interface addresses.
pub(crate) fn contains(addr: IpAddr) -> bool {
    ADDRS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&addr)
}

/// Re-reads the interface addresses. On error the previous set stays (and
/// the error is logged): a failed refresh never empties it.
pub fn refresh() {
    match read() {
        Ok(addrs) => {
            let mut set = ADDRS.write().unwrap_or_else(|p| p.into_inner());
            if *set != addrs {
                log::info!(
                    "this host's addresses, refused unless a rule names them: {}",
                    if addrs.is_empty() {
                        "none".to_string()
                    } else {
                        addrs
                            .iter()
                            .map(IpAddr::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                );
                *set = addrs;
            }
        }
        Err(e) => log::warn!("cannot read this host's interface addresses (getifaddrs): {e}"),
    }
}

fn read() -> nix::Result<Vec<IpAddr>> {
    use nix::net::if_::InterfaceFlags;
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        if ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK) {
            continue;
        }
        let Some(a) = ifa.address else { continue };
        let ip = if let Some(v4) = a.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = a.as_sockaddr_in6() {
            crate::target::host::canonical_ip(IpAddr::V6(v6.ip()))
        } else {
            continue;
        };
        if !ip.is_loopback() && !ip.is_unspecified() && !out.contains(&ip) {
            out.push(ip);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reading_the_interfaces_works_and_leaves_out_loopback() {
        let addrs = super::read().expect("getifaddrs");
        assert!(addrs.iter().all(|a| !a.is_loopback()), "{addrs:?}");
    }
}
