//! The sock_diag encoding checked against byte strings captured from Linux
//! 6.18 (x86_64, so host byte order is little-endian), and the live lookup.

use super::*;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Client 127.0.0.2:45553 connected to 127.0.0.1:40841, seq 7.
const REQ_V4: &str = "4800000014000100070000000000000002060000ffffffffb1f19f897f0000020000000000000000000000007f00000100000000000000000000000000000000ffffffffffffffff";
/// The kernel's answer: uid 0, inode 404382, then attributes.
const ANS_V4: &str = "7c00000014000000070000000569000002010000b1f19f897f0000020000000000000000000000007f000001000000000000000000000000000000000500000000000000000000000000000000000000000000009e2b0600050008000000000008000f00000000000c00150001000000000000000600160052000000";
/// No socket 127.0.0.9:1 -> 127.0.0.1:40841 (seq 8): NLMSG_ERROR -ENOENT.
const ANS_ENOENT: &str = "5c000000020000000800000005690000feffffff4800000014000100080000000000000002060000ffffffff00019f897f0000090000000000000000000000007f00000100000000000000000000000000000000ffffffffffffffff";
/// Client [::1]:55686 (a socket created under fsuid 65534) to [::1]:53167, seq 9.
const REQ_V6: &str = "480000001400010009000000000000000a060000ffffffffd986cfaf000000000000000000000000000000010000000000000000000000000000000100000000ffffffffffffffff";
const ANS_V6: &str = "7c0000001400000009000000be6900000a010000d986cfaf0000000000000000000000000000000100000000000000000000000000000001000000000510000000000000000000000000000000000000feff00007c2d0600050008000000000008000f00000000000c00150001000000000000000600160012000000";

#[cfg(target_endian = "little")]
#[test]
fn requests_match_the_captured_bytes() {
    let v4 = encode_request(7, sa("127.0.0.2:45553"), sa("127.0.0.1:40841")).unwrap();
    assert_eq!(v4.to_vec(), unhex(REQ_V4));
    let v6 = encode_request(9, sa("[::1]:55686"), sa("[::1]:53167")).unwrap();
    assert_eq!(v6.to_vec(), unhex(REQ_V6));
    // An IPv4 client seen on a dual-stack listener is an AF_INET socket.
    let mapped = encode_request(
        7,
        sa("[::ffff:127.0.0.2]:45553"),
        sa("[::ffff:127.0.0.1]:40841"),
    )
    .unwrap();
    assert_eq!(mapped, v4);
}

#[test]
fn mixed_families_are_not_asked() {
    assert!(encode_request(1, sa("127.0.0.1:1"), sa("[::1]:2")).is_none());
}

#[cfg(target_endian = "little")]
#[test]
fn answers_decode() {
    assert_eq!(
        decode_answer(&unhex(ANS_V4), 7),
        Ok(Some(Answer::Found(Owner {
            uid: 0,
            inode: 404_382
        })))
    );
    assert_eq!(
        decode_answer(&unhex(ANS_V6), 9),
        Ok(Some(Answer::Found(Owner {
            uid: 65_534,
            inode: 404_860
        })))
    );
    assert_eq!(
        decode_answer(&unhex(ANS_ENOENT), 8),
        Ok(Some(Answer::NotFound))
    );
}

#[cfg(target_endian = "little")]
#[test]
fn other_errors_and_time_wait() {
    let mut einval = unhex(ANS_ENOENT);
    einval[16..20].copy_from_slice(&(-nix::libc::EINVAL).to_ne_bytes());
    assert_eq!(
        decode_answer(&einval, 8),
        Ok(Some(Answer::Error(nix::libc::EINVAL)))
    );
    let mut ack = unhex(ANS_ENOENT);
    ack[16..20].copy_from_slice(&0i32.to_ne_bytes());
    assert!(decode_answer(&ack, 8).is_err());
    // A TIME_WAIT socket reports uid 0: that is nobody's, not root's.
    let mut tw = unhex(ANS_V4);
    tw[16 + 1] = 6;
    assert_eq!(decode_answer(&tw, 7), Ok(Some(Answer::NotFound)));
}

#[cfg(target_endian = "little")]
#[test]
fn stale_answers_are_skipped() {
    // An answer to seq 7 is not the answer to seq 8 ...
    assert_eq!(decode_answer(&unhex(ANS_V4), 8), Ok(None));
    // ... and a datagram with a stale one first still yields the right one.
    let mut two = unhex(ANS_V4);
    two.extend(unhex(ANS_ENOENT));
    assert_eq!(decode_answer(&two, 8), Ok(Some(Answer::NotFound)));
    assert_eq!(decode_answer(&[], 8), Ok(None));
}

#[cfg(target_endian = "little")]
#[test]
fn every_truncation_is_malformed_never_a_panic() {
    for ans in [ANS_V4, ANS_V6, ANS_ENOENT] {
        let full = unhex(ans);
        for n in 1..full.len() {
            let cut = &full[..n];
            assert!(
                decode_answer(cut, 7).is_err()
                    && decode_answer(cut, 8).is_err()
                    && decode_answer(cut, 9).is_err(),
                "{n} bytes of {ans}"
            );
        }
        // Garbage lengths are refused too.
        let mut bad = full.clone();
        bad[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert!(decode_answer(&bad, 7).is_err());
        bad[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(decode_answer(&bad, 7).is_err());
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod live {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    fn connect_from(src: &str, to: SocketAddr) -> TcpStream {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(to),
            socket2::Type::STREAM,
            None,
        )
        .unwrap();
        s.bind(&sa(src).into()).unwrap();
        s.connect(&to.into()).unwrap();
        s.into()
    }

    fn inode(s: &TcpStream) -> u32 {
        nix::sys::stat::fstat(s).unwrap().st_ino as u32
    }

    #[test]
    fn finds_the_owner_of_a_loopback_client() {
        let mut diag = SockDiag::open().expect("NETLINK_SOCK_DIAG");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let c = connect_from("127.0.0.3:0", server);
        let (_accepted, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let owner = diag.owner(peer, server).unwrap().expect("found");
        assert_eq!(owner.uid, nix::unistd::geteuid().as_raw());
        assert_eq!(owner.inode, inode(&c));
        // Asked again (the socket is reused): same answer.
        assert_eq!(diag.owner(peer, server).unwrap(), Some(owner));
        // A tuple nobody holds.
        let nobody = SocketAddr::new(peer.ip(), 1);
        assert_eq!(diag.owner(nobody, server).unwrap(), None);
    }

    #[test]
    fn finds_ipv6_and_mapped_clients() {
        let mut diag = SockDiag::open().unwrap();
        if let Ok(l) = TcpListener::bind("[::1]:0") {
            let server = l.local_addr().unwrap();
            let c = TcpStream::connect(server).unwrap();
            let (_a, peer) = l.accept().unwrap();
            let owner = diag.owner(peer, server).unwrap().expect("found");
            assert_eq!(owner.inode, inode(&c));
        }
        // A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.4.
        let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
        if s.set_only_v6(false).is_ok() && s.bind(&sa("[::]:0").into()).is_ok() {
            s.listen(8).unwrap();
            let l: TcpListener = s.into();
            let port = l.local_addr().unwrap().port();
            let c = connect_from("127.0.0.4:0", sa(&format!("127.0.0.1:{port}")));
            let (a, peer) = l.accept().unwrap();
            assert!(matches!(peer.ip(), IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some()));
            let local = a.local_addr().unwrap();
            let owner = diag.owner(peer, local).unwrap().expect("found");
            assert_eq!(owner.inode, inode(&c));
        }
    }

    #[test]
    fn reports_another_uid() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let mut diag = SockDiag::open().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        // A socket is owned by the fsuid of the thread that creates it.
        let c = std::thread::spawn(move || {
            let nobody = nix::unistd::Uid::from_raw(65_534);
            nix::unistd::setfsuid(nobody);
            connect_from("127.0.0.5:0", server)
        })
        .join()
        .unwrap();
        let (_a, peer) = l.accept().unwrap();
        let owner = diag.owner(peer, server).unwrap().expect("found");
        assert_eq!((owner.uid, owner.inode), (65_534, inode(&c)));
    }

    /// Attack: a client that closed before the lookup leaves a FIN_WAIT2
    /// timewait socket (loopback acks its FIN at once), which the kernel
    /// reports with state FIN_WAIT2 (the tw substate), uid 0 and inode 0:
    /// nobody's, not root's.
    #[test]
    fn atk_a_client_gone_before_the_lookup_is_not_root() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let mut diag = SockDiag::open().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let c = std::thread::spawn(move || {
            nix::unistd::setfsuid(nix::unistd::Uid::from_raw(65_534));
            connect_from("127.0.0.6:0", server)
        })
        .join()
        .unwrap();
        let peer = c.local_addr().unwrap();
        drop(c);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (_a, _) = l.accept().unwrap();
        assert_eq!(diag.owner(peer, server).unwrap(), None);
    }

    /// UDP: the socket a datagram came from, bound to its address or to
    /// the wildcard at its port, owned by whoever created it.
    #[test]
    fn finds_the_owner_of_a_udp_sender() {
        use std::net::UdpSocket;
        let mut diag = SockDiag::open().unwrap();
        let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = relay.local_addr().unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"x", to).unwrap();
        let mut buf = [0u8; 4];
        let (_, from) = relay.recv_from(&mut buf).unwrap();
        let owner = diag.udp_owner(from, to).unwrap().expect("found");
        assert_eq!(owner.uid, nix::unistd::geteuid().as_raw());
        assert_eq!(
            owner.inode,
            nix::sys::stat::fstat(&sender).unwrap().st_ino as u32
        );
        // Bound to the wildcard: the datagram's source is 127.0.0.1:port.
        let wild = UdpSocket::bind("0.0.0.0:0").unwrap();
        wild.send_to(b"x", to).unwrap();
        let (_, from) = relay.recv_from(&mut buf).unwrap();
        let owner = diag.udp_owner(from, to).unwrap().expect("found");
        assert_eq!(
            owner.inode,
            nix::sys::stat::fstat(&wild).unwrap().st_ino as u32
        );
        // Closed since: nobody.
        drop(sender);
        drop(wild);
        assert_eq!(diag.udp_owner(from, to).unwrap(), None);
        if nix::unistd::geteuid().is_root() {
            let other = std::thread::spawn(|| {
                nix::unistd::setfsuid(nix::unistd::Uid::from_raw(65_534));
                UdpSocket::bind("127.0.0.1:0").unwrap()
            })
            .join()
            .unwrap();
            other.send_to(b"x", to).unwrap();
            let (_, from) = relay.recv_from(&mut buf).unwrap();
            let owner = diag.udp_owner(from, to).unwrap().expect("found");
            assert_eq!(owner.uid, 65_534);
        }
    }

    /// The cost of one lookup: `cargo test --release --lib sockdiag -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn lookup_cost() {
        let mut diag = SockDiag::open().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let _c = connect_from("127.0.0.6:0", server);
        let (_a, peer) = l.accept().unwrap();
        const N: u32 = 100_000;
        let t = std::time::Instant::now();
        for _ in 0..N {
            assert!(diag.owner(peer, server).unwrap().is_some());
        }
        let per = t.elapsed() / N;
        eprintln!("sock_diag lookup: {per:?} per lookup (sendto + recvfrom), {N} lookups");
    }
}
