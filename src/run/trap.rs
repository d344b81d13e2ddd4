//! The DNS trap: answers CMD's direct queries to the resolvers in
//! /etc/resolv.conf (sockets bound inside the namespace, see
//! `namespace::resolver_sockets`) with `REFUSED`, logs the name and counts it.
//!
//! A thread per socket (at most three), blocked in `recv_from`, rather than
//! the reactor: the reactor lives in the library and serves the proxy's TCP
//! listeners, and this is `run`'s own business on a UDP socket; a thread
//! blocked in `recvfrom` makes no syscall while idle either, and each query
//! costs one `recvfrom` and one `sendto` either way. The threads end with
//! the process.

use std::io;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};

use log::{debug, info, warn};

use super::dns::{answer, Outcome};
use super::tally::Tally;

/// Starts answering on each socket.
pub fn start(sockets: Vec<UdpSocket>, tally: &Arc<Mutex<Tally>>) {
    for sock in sockets {
        let tally = Arc::clone(tally);
        let spawned = std::thread::Builder::new()
            .name("portcullis-dns".into())
            .spawn(move || serve(&sock, &tally));
        if let Err(e) = spawned {
            warn!("cannot start the DNS trap thread: {e}; CMD's direct DNS queries go unanswered");
        }
    }
}

fn serve(sock: &UdpSocket, tally: &Mutex<Tally>) {
    let resolver = sock
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.ip().to_string());
    // Over UDP a query is at most 512 bytes, or the EDNS size the client
    // offers (a few KiB); a longer datagram is cut and answered FORMERR.
    let mut buf = [0u8; 4096];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // ICMP errors from an earlier answer's peer surface here on Linux.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                warn!("DNS trap at {resolver}: {e}; CMD's direct DNS queries go unanswered");
                return;
            }
        };
        let reply = match answer(&buf[..n]) {
            Outcome::Refused { question, reply } => {
                let name = question.name();
                info!(
                    "dns query refused name={name} type={} resolver={resolver} client={peer}; \
                     hint: CMD resolves names itself instead of using the proxy; its only way \
                     out is the proxy run set in HTTPS_PROXY, HTTP_PROXY and ALL_PROXY \
                     (socks5h), so configure the program to use them",
                    question.type_name()
                );
                tally
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .dns_query(&name);
                reply
            }
            Outcome::Rejected { why, reply } => {
                debug!("DNS trap at {resolver}: a malformed query from {peer}: {why}");
                reply
            }
            Outcome::Dropped(why) => {
                debug!("DNS trap at {resolver}: dropped a datagram from {peer}: {why}");
                continue;
            }
        };
        if let Err(e) = sock.send_to(&reply, peer) {
            // The client may be gone (its socket closed): nothing to do.
            debug!("DNS trap at {resolver}: answering {peer}: {e}");
        }
    }
}
