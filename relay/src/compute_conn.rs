//! Opening a connection to a compute: connect, then, when the instance uses the PROXY
//! protocol, announce who the connection is for before any MySQL byte.
//!
//! The perceptron reaches the compute through [`ComputeConnector`], so its phases can be
//! driven in tests by a scripted compute on an in-memory stream; [`TcpConnector`] is the real
//! one. A failed connect says whether trying again can help ([`ConnectError::retryable`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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

/// The local address a connection reports when its socket cannot say (an open TCP socket
/// always can): the PROXY header's destination is then the unspecified address.
pub const UNKNOWN_LOCAL: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

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

    /// A connection the compute's wake already opened ([`Handover`]), with the bytes already
    /// read from it; the caller takes it instead of connecting. None by default.
    fn take_opened(&self) -> Option<(Self::Stream, Vec<u8>)> {
        None
    }

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
    /// Where the instance's wake leaves the connection it opened; none when connections
    /// carry a PROXY header (the wake's says it is the relay's own).
    pub handover: Option<Arc<Handover>>,
}

impl ComputeConnector for TcpConnector {
    type Stream = ComputeStream<TcpStream>;

    async fn connect(&self) -> Result<Self::Stream, ConnectError> {
        connect(self.target, self.on_behalf_of)
            .await
            .map(ComputeStream::Plain)
            .map_err(ConnectError)
    }

    fn take_opened(&self) -> Option<(Self::Stream, Vec<u8>)> {
        let opened = self.handover.as_ref()?.take()?;
        Some((ComputeStream::Plain(opened.stream), opened.read_ahead))
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

/// A connection to the compute and the bytes already read from it (its greeting, if it came).
#[derive(Debug)]
pub struct OpenedConnection {
    /// The connection (no PROXY header).
    pub stream: TcpStream,
    /// What was read from it, in order: the next reader starts with these.
    pub read_ahead: Vec<u8>,
}

/// How long a wake's connection waits for a login to take it. The compute's own deadline for a
/// login on a connection it greeted is longer (MariaDB's `connect_timeout` is 10 s, the
/// shim's `--handshake-timeout` 10 s by default).
pub const HANDOVER_TTL: Duration = Duration::from_secs(1);

/// A connection to the compute that its wake opened anyway, handed to the first login after
/// the wake instead of a connect of its own.
///
/// The process driver's readiness probe connects and reads the compute's greeting. Kept, that
/// connection saves the first login a connect and the compute's first greeting round (the
/// slowest of its life, its code not yet paged in): 0.1–0.2 ms of a 4 ms cold start, measured
/// (BENCHMARKS.md). It is what the login's own connect would have been: the same address, the
/// greeting still unanswered, its proof of the key (dual mode) checked by the login as usual.
/// Held for [`HANDOVER_TTL`] at most and dropped when the compute leaves its running phases.
/// (A thaw needs none: the login connects during the thaw itself, see `perceptron::run`.)
#[derive(Debug, Default)]
pub struct Handover {
    slot: Mutex<Option<(OpenedConnection, tokio::time::Instant)>>,
}

impl Handover {
    /// Leaves `opened` for the next login, in place of any earlier one; dropped if no login
    /// takes it within [`HANDOVER_TTL`].
    pub fn offer(self: &Arc<Self>, opened: OpenedConnection) {
        let at = tokio::time::Instant::now();
        *self.lock() = Some((opened, at));
        let handover = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at + HANDOVER_TTL).await;
            let mut slot = handover.lock();
            if slot.as_ref().is_some_and(|(_, offered)| *offered == at) {
                *slot = None;
            }
        });
    }

    /// The connection left by the last wake, if it is still fresh.
    pub fn take(&self) -> Option<OpenedConnection> {
        let (opened, at) = self.lock().take()?;
        (at.elapsed() < HANDOVER_TTL).then_some(opened)
    }

    /// Drops any connection left (the compute is pausing, frozen or gone).
    pub fn clear(&self) {
        self.lock().take();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(OpenedConnection, tokio::time::Instant)>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn opened() -> OpenedConnection {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        OpenedConnection {
            stream,
            read_ahead: b"greeting".to_vec(),
        }
    }

    /// A wake's connection goes to one login, with what was read from it; not to a second
    /// one, not after [`HANDOVER_TTL`], not after the compute left its running phases.
    #[tokio::test(start_paused = true)]
    async fn a_wakes_connection_goes_to_one_login_while_fresh() {
        let handover = Arc::new(Handover::default());
        assert!(handover.take().is_none(), "nothing offered");

        handover.offer(opened().await);
        let taken = handover.take().expect("the offered connection");
        assert_eq!(taken.read_ahead, b"greeting");
        assert!(handover.take().is_none(), "taken once");

        handover.offer(opened().await);
        tokio::time::sleep(HANDOVER_TTL).await;
        assert!(handover.take().is_none(), "stale after the TTL");

        // The expiry drops what nobody took, but not a newer offer.
        handover.offer(opened().await);
        tokio::time::sleep(HANDOVER_TTL / 2).await;
        handover.offer(opened().await);
        tokio::time::sleep(HANDOVER_TTL / 2 + Duration::from_millis(1)).await;
        assert!(
            handover.lock().is_some(),
            "the newer offer outlives the older's expiry"
        );
        handover.clear();
        assert!(handover.take().is_none(), "cleared");
    }

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
