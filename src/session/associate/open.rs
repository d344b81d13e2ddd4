//! Opening an association: the relay socket on the client-facing
//! address, the reply that names it, and the outbound socket (opened with
//! the first allowed datagram).

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::super::closing::answer;
use super::super::conn::Conn;
use super::super::ctx::Ctx;
use super::super::endpoint::Endpoint;
use super::super::state::State;
use super::verdicts::Verdicts;
use super::{Associate, DEFAULT_IDLE};
use crate::events::Protocol;
use crate::io::dgram::Dgram;
use crate::lifecycle::CloseReason;
use crate::protocol::socks5::{self, Reply};

/// Answers a UDP ASSOCIATE: binds the relay, owes the reply, and relays.
/// `port`: the client's source port as the request gave it (0: unknown).
pub(crate) fn start(client: Endpoint, port: u16, conn: &mut Conn, ctx: &mut Ctx) -> State {
    conn.log.protocol = Some(Protocol::Socks5Udp);
    let peer = match conn.log.peer.addr {
        crate::client::PeerAddr::Tcp(addr) => addr,
        crate::client::PeerAddr::Unix { .. } => {
            return fail(
                client,
                "UDP ASSOCIATE needs a TCP client (its datagrams are told apart by IP address); connect to a TCP listener (--listen ADDR:PORT)".into(),
                conn,
                ctx,
            );
        }
    };
    let Some(local) = client.local_addr() else {
        return fail(
            client,
            "UDP ASSOCIATE: the control connection's address is unknown".into(),
            conn,
            ctx,
        );
    };
    let local_ip = local.ip().to_canonical();
    let relay = match relay_socket(local_ip, ctx.settings.relay_bind.as_ref())
        .and_then(|(s, here)| Ok((Dgram::register(s, ctx.tokens.relay, ctx.registry)?, here)))
    {
        Ok(r) => r,
        Err(e) => {
            let why = format!("UDP ASSOCIATE: cannot bind a relay socket on {local_ip}: {e}");
            return fail(client, why, conn, ctx);
        }
    };
    let (relay, here) = relay;
    // Whose socket may fix a port-0 association's port: the control
    // connection's owner, asked now if the accept did not (access lines
    // off), where the kernel can tell (a loopback client in our network
    // namespace: under `run` the relay lives in CMD's, where our lookups
    // would find the host's sockets).
    let owner = match conn.log.peer.uid {
        Some(uid) => Some(uid),
        None if port == 0 && here && crate::client::is_loopback(peer.ip()) => {
            crate::client::tcp_owner_uid(peer, local)
        }
        None => None,
    };
    let relay_addr = match relay.local_addr() {
        Ok(a) => a,
        Err(e) => {
            return fail(
                client,
                format!("UDP ASSOCIATE: relay address: {e}"),
                conn,
                ctx,
            )
        }
    };
    // The relay (and the outbound socket to come) take one fd more than a
    // tunnel's two: counted, or the fd reserve would be overrun.
    ctx.third_fd();
    // No association may aim datagrams at this relay.
    ctx.settings.own.udp_bound(relay_addr.port());
    let mut owed = Vec::with_capacity(22);
    socks5::encode_reply(Reply::Succeeded, Some(relay_addr), &mut owed);
    ctx.stats.udp_associated();
    let client_ip = peer.ip().to_canonical();
    log::info!(
        "conn={} udp associate: relay {relay_addr} for client {client_ip}{}",
        conn.id,
        match port {
            0 => String::new(),
            p => format!(":{p}"),
        }
    );
    let idle = ctx.settings.timeouts.idle.unwrap_or(DEFAULT_IDLE);
    conn.deadline = Some(ctx.now + idle);
    State::Associate(Box::new(Associate {
        control: client,
        relay,
        out: None,
        out_v6: false,
        client_ip,
        client_port: (port != 0).then_some(port),
        owner,
        foreign: None,
        relay_addr,
        owed,
        up_pending: None,
        down_pending: None,
        contacted: HashSet::new(),
        verdicts: Verdicts::default(),
        resolving: None,
        waiting: VecDeque::new(),
        waiting_bytes: super::budget::Held::new(std::sync::Arc::clone(&ctx.settings.udp_waiting)),
        idle,
        last_active: ctx.now,
        dgrams_up: 0,
        dgrams_down: 0,
        dropped: 0,
        up_bytes: 0,
        down_bytes: 0,
        own: ctx.settings.own.clone(),
        ports: vec![relay_addr.port()],
        refusals_logged: 0,
        out_failure_warned: false,
    }))
}

/// Refuses the association with a general failure (the reason logged).
fn fail(client: Endpoint, why: String, conn: &mut Conn, ctx: &mut Ctx) -> State {
    log::warn!("conn={} {why}", conn.id);
    let mut bytes = Vec::with_capacity(10);
    socks5::encode_reply(Reply::GeneralFailure, None, &mut bytes);
    answer(&bytes, CloseReason::BadRequest, why, client, conn, ctx)
}

/// The relay: bound here, or by the embedder's binder where the listeners
/// live in another network namespace. A socket from the binder must be UDP
/// at `ip` (it could hand over any descriptor). With it: whether it lives
/// in our network namespace.
fn relay_socket(
    ip: IpAddr,
    binder: Option<&crate::session::RelayBind>,
) -> std::io::Result<(mio::net::UdpSocket, bool)> {
    let Some(binder) = binder else {
        return Ok((bind(SocketAddr::new(ip, 0))?, true));
    };
    let socket = (binder.0)(ip)?;
    let kind = socket2::SockRef::from(&socket).r#type()?;
    let at = socket.local_addr()?;
    if kind != socket2::Type::DGRAM || at.ip().to_canonical() != ip {
        return Err(std::io::Error::other(format!(
            "the relay binder returned a socket at {at} ({kind:?}), not a UDP socket at {ip}"
        )));
    }
    socket.set_nonblocking(true)?;
    let here = crate::client::in_our_netns(std::os::fd::AsFd::as_fd(&socket));
    Ok((mio::net::UdpSocket::from_std(socket), here))
}

/// A non-blocking UDP socket bound to `addr`.
fn bind(addr: SocketAddr) -> std::io::Result<mio::net::UdpSocket> {
    mio::net::UdpSocket::bind(addr)
}

/// The outbound socket: dual-stack `[::]:0` where IPv6 works, else `0.0.0.0:0`.
pub(super) fn bind_out() -> std::io::Result<mio::net::UdpSocket> {
    use socket2::{Domain, Protocol as P, Socket, Type};
    let dual = (|| {
        let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(P::UDP))?;
        s.set_only_v6(false)?;
        s.set_nonblocking(true)?;
        s.bind(&SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0).into())?;
        Ok::<_, std::io::Error>(std::net::UdpSocket::from(s))
    })();
    match dual {
        Ok(s) => Ok(mio::net::UdpSocket::from_std(s)),
        Err(_) => bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0)),
    }
}
