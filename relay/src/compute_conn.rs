//! Opening a connection to a compute: connect, then, when the instance uses the PROXY
//! protocol, announce who the connection is for before any MySQL byte.
//!
//! The perceptron reaches the compute through [`ComputeConnector`], so its phases can be
//! driven in tests by a scripted compute on an in-memory stream; [`TcpConnector`] is the real
//! one. A failed connect says whether trying again can help ([`ConnectError::retryable`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::config::InstanceConfig;
use crate::proxy_protocol;
use crate::tls::{ComputeStream, ComputeTls};

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

/// A connect to the compute that failed.
#[derive(Debug)]
pub struct ConnectError(pub io::Error);

impl ConnectError {
    /// Whether the same connect can succeed a moment later: the compute is still starting
    /// (nothing listens yet, its accept queue is not ready, its host does not answer ARP
    /// yet), or the relay is short of something a moment frees (ephemeral ports,
    /// descriptors in a connect storm). Anything else (no route, no permission, a bad
    /// address) will fail the same way again.
    #[must_use]
    pub fn retryable(&self) -> bool {
        use nix::errno::Errno;
        matches!(
            self.0.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::HostUnreachable
                | io::ErrorKind::AddrNotAvailable
                | io::ErrorKind::Interrupted
        ) || self
            .0
            .raw_os_error()
            // Out of descriptors, per process or system-wide.
            .is_some_and(|code| matches!(Errno::from_raw(code), Errno::EMFILE | Errno::ENFILE))
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot connect to the compute: {}", self.0)
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Opens connections to one compute (the seam the perceptron's P4 goes through).
pub trait ComputeConnector: Send + Sync {
    /// The connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// One connect attempt, PROXY header included. Callers bound it with a deadline.
    ///
    /// # Errors
    /// [`ConnectError`], which says whether a retry can help.
    fn connect(&self) -> impl Future<Output = Result<Self::Stream, ConnectError>> + Send;

    /// `compute_tls`: whether TLS is to be started after the compute's greeting.
    fn wants_tls(&self) -> bool {
        false
    }

    /// Starts TLS on a connection whose SSLRequest has been sent. Callers bound it with a
    /// deadline.
    ///
    /// # Errors
    /// The handshake's error; `Unsupported` for a connector without TLS.
    fn start_tls(
        &self,
        stream: Self::Stream,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send {
        drop(stream);
        std::future::ready(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this connector has no TLS",
        )))
    }
}

/// Connects over TCP on behalf of one client (or the relay).
#[derive(Debug, Clone)]
pub struct TcpConnector {
    /// The compute.
    pub target: ComputeTarget,
    /// Who the connection is for (the PROXY header, when enabled).
    pub on_behalf_of: OnBehalfOf,
    /// `compute_tls`: TLS after the compute's greeting.
    pub tls: Option<ComputeTls>,
}

impl ComputeConnector for TcpConnector {
    type Stream = ComputeStream<TcpStream>;

    async fn connect(&self) -> Result<Self::Stream, ConnectError> {
        connect(self.target, self.on_behalf_of)
            .await
            .map(ComputeStream::Plain)
            .map_err(ConnectError)
    }

    fn wants_tls(&self) -> bool {
        self.tls.is_some()
    }

    async fn start_tls(&self, stream: Self::Stream) -> io::Result<Self::Stream> {
        match &self.tls {
            Some(tls) => stream.start_tls(tls).await,
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "compute_tls is off",
            )),
        }
    }
}

/// Connects and writes the PROXY header if the target wants one.
///
/// # Errors
/// The connect or write error.
pub async fn connect(target: ComputeTarget, who: OnBehalfOf) -> io::Result<TcpStream> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_only_what_a_moment_can_fix() {
        let retry = |kind| ConnectError(io::Error::from(kind)).retryable();
        assert!(retry(io::ErrorKind::ConnectionRefused));
        assert!(retry(io::ErrorKind::ConnectionReset));
        assert!(retry(io::ErrorKind::AddrNotAvailable));
        assert!(
            ConnectError(io::Error::from_raw_os_error(
                nix::errno::Errno::EMFILE as i32
            ))
            .retryable(),
            "EMFILE"
        );
        assert!(!retry(io::ErrorKind::PermissionDenied));
        assert!(!retry(io::ErrorKind::NetworkUnreachable));
        assert!(!retry(io::ErrorKind::InvalidInput));
    }
}
