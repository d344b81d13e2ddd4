//! Wire protocols, sans-IO: bytes in, a parse result out. Nothing here
//! imports mio or touches a socket, so it is unit-tested and fuzzed directly.

pub mod first_flight;
pub mod http;
pub mod http1;
pub mod parent;
pub mod sniff;
pub mod socks5;
pub mod socks5_udp;
