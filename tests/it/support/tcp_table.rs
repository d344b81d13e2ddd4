//! The kernel's table of this network namespace's IPv4 TCP sockets
//! (/proc/net/tcp): what a socket's state and queues are, to wait on what
//! the kernel did (a FIN or a reset landed, an accept queue filled) rather
//! than for a while.

use std::net::SocketAddr;

/// `st` values in /proc/net/tcp (include/net/tcp_states.h).
pub const TCP_ESTABLISHED: u8 = 0x01;
pub const TCP_FIN_WAIT2: u8 = 0x05;
pub const TCP_CLOSE_WAIT: u8 = 0x08;
pub const TCP_LISTEN: u8 = 0x0A;

/// One socket's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRow {
    /// Its state, one of the `TCP_*` values.
    pub state: u8,
    /// Bytes sent and not acknowledged.
    pub tx_queue: usize,
    /// Bytes that arrived and are not read yet; for a listener, the
    /// connections waiting in its accept queue.
    pub rx_queue: usize,
    /// Its socket's inode (`socket:[inode]` in /proc/PID/fd), 0 for a
    /// timewait socket.
    pub inode: u64,
}

/// `a.b.c.d:port` as /proc/net/tcp writes it (`0100007F:1F90`).
pub fn proc_net_addr(a: SocketAddr) -> String {
    let SocketAddr::V4(v4) = a else {
        panic!("IPv4 only: {a}");
    };
    format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    )
}

/// The row of the TCP socket `local` -> `remote` in this network namespace
/// (a listener's remote is `0.0.0.0:0`), if the kernel lists one: a socket
/// that was reset or closed for good is not listed.
pub fn tcp_row(local: SocketAddr, remote: SocketAddr) -> Option<TcpRow> {
    tcp_rows(local, remote).into_iter().next()
}

/// Every row of `local` -> `remote`: one per listener bound with
/// `SO_REUSEPORT` on the same address (one per worker).
pub fn tcp_rows(local: SocketAddr, remote: SocketAddr) -> Vec<TcpRow> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    find_rows(&table, local, remote)
}

fn find_row(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<TcpRow> {
    find_rows(table, local, remote).into_iter().next()
}

fn find_rows(table: &str, local: SocketAddr, remote: SocketAddr) -> Vec<TcpRow> {
    let (l, r) = (proc_net_addr(local), proc_net_addr(remote));
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(1) != Some(&l.as_str()) || f.get(2) != Some(&r.as_str()) {
                return None;
            }
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(TcpRow {
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                tx_queue: usize::from_str_radix(tx, 16).ok()?,
                rx_queue: usize::from_str_radix(rx, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000001 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0200007F:D431 08 00000000:00010000 00:00000000 00000000  1000        0 4243 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4244 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn addresses_are_written_as_the_kernel_does() {
        assert_eq!(
            proc_net_addr("127.0.0.1:8080".parse().unwrap()),
            "0100007F:1F90"
        );
        assert_eq!(proc_net_addr("0.0.0.0:0".parse().unwrap()), "00000000:0000");
    }

    #[test]
    fn rows_are_found_by_both_ends() {
        let l: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let listener = find_row(TABLE, l, "0.0.0.0:0".parse().unwrap());
        assert_eq!(
            listener,
            Some(TcpRow {
                state: TCP_LISTEN,
                tx_queue: 0,
                rx_queue: 1,
                inode: 4242
            })
        );
        let conn = find_row(TABLE, l, "127.0.0.2:54321".parse().unwrap());
        assert_eq!(
            conn,
            Some(TcpRow {
                state: TCP_CLOSE_WAIT,
                tx_queue: 0,
                rx_queue: 0x10000,
                inode: 4243
            })
        );
        assert_eq!(find_row(TABLE, l, "127.0.0.3:54321".parse().unwrap()), None);
        // Two listeners on one address (SO_REUSEPORT): both are found.
        let inodes: Vec<u64> = find_rows(TABLE, l, "0.0.0.0:0".parse().unwrap())
            .iter()
            .map(|r| r.inode)
            .collect();
        assert_eq!(inodes, [4242, 4244]);
    }
}
