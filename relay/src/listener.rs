//! Listening sockets and the accept loop every listener shares (the instances' "VIPs" and the
//! admin API): a deep backlog, and accept errors that back off instead of spinning.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The accept queue the relay asks for (the kernel caps it at `net.core.somaxconn`). The
/// standard library's 128 overflows in a connect storm: a thousand clients of a paused
/// instance arrive within milliseconds, and dropped SYNs cost them a one-second retry.
pub const LISTEN_BACKLOG: u32 = 4096;

/// How long the accept loop waits after a failed accept (EMFILE and friends) before trying
/// again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Binds a listener with [`LISTEN_BACKLOG`].
///
/// # Errors
/// The bind or listen error.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Accepts on `listener` until `shutdown` fires, handing each connection to `on_accept`.
/// Accept errors (EMFILE, ENFILE, ENOBUFS...) are counted in
/// `relay_accept_errors_total{listener=what}` and back off instead of spinning: the pending
/// connection stays in the kernel's queue until a descriptor is free. The listener stays open.
pub async fn accept_until(
    listener: TcpListener,
    shutdown: CancellationToken,
    what: &str,
    metrics: &Metrics,
    mut on_accept: impl FnMut(TcpStream, SocketAddr),
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = shutdown.cancelled() => return,
        };
        match accepted {
            Ok((stream, peer)) => on_accept(stream, peer),
            Err(e) => {
                metrics.accept_error(what);
                tracing::warn!(listener = what, error = %e, "accept failed; backing off");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}
