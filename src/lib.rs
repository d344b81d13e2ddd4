//! portcullis: a sandbox egress proxy.
#![warn(missing_docs)]

pub mod api;
pub(crate) mod buffer;
pub mod config;
pub mod duration;
pub(crate) mod io;
pub mod policy;
pub mod protocol;
pub(crate) mod reactor;
pub(crate) mod session;
pub mod stats;

pub use api::{Proxy, ProxyBuilder, ProxyHandle, SpawnedProxy};
pub use config::{
    Config, Credentials, Limits, ListenAddr, ListenerConfig, ListenerProtocol, Timeouts,
};
pub use policy::Policy;
pub use stats::{CloseReason, StatsSnapshot};
