//! Opening a connection to a compute: connect, then, when the instance uses the PROXY
//! protocol, announce who the connection is for before any MySQL byte.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::config::InstanceConfig;
use crate::proxy_protocol;

/// Where a compute listens and how to connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeTarget {
    /// The compute's address.
    pub addr: SocketAddr,
    /// Whether each connection starts with a PROXY protocol v2 header.
    pub proxy_protocol: bool,
}

impl ComputeTarget {
    /// How to reach `instance`'s compute.
    #[must_use]
    pub const fn of(instance: &InstanceConfig) -> Self {
        Self {
            addr: instance.compute,
            proxy_protocol: instance.proxy_protocol,
        }
    }
}

/// On whose behalf a compute connection is made.
#[derive(Debug, Clone, Copy)]
pub enum OnBehalfOf {
    /// The relay itself (readiness probes): a `LOCAL` header.
    Relay,
    /// A client that connected from `client` to the relay's `listen` address.
    Client {
        /// The client's address.
        client: SocketAddr,
        /// The address the client connected to.
        listen: SocketAddr,
    },
}

/// Connects and writes the PROXY header if the target wants one.
///
/// # Errors
/// The connect or write error.
pub async fn connect(target: ComputeTarget, who: OnBehalfOf) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(target.addr).await?;
    let _ = s.set_nodelay(true);
    if target.proxy_protocol {
        let header = match who {
            OnBehalfOf::Relay => proxy_protocol::local_header(),
            OnBehalfOf::Client { client, listen } => proxy_protocol::proxy_header(client, listen),
        };
        s.write_all(&header).await?;
    }
    Ok(s)
}
