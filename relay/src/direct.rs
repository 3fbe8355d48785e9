//! The direct route (DESIGN §2, "after the resume"): while an instance runs, a new connection
//! is forwarded as raw bytes from its first byte; the compute greets and authenticates the
//! client itself and the relay parses nothing. This keeps the perceptron off the hot path.
//! If the compute does not accept, the connection falls back to the perceptron route, which
//! wakes the instance.
//!
//! Until the client sends its first byte the connection is pre-login: it holds a pending slot
//! (see [`crate::limits`]) and is not counted as open, so a bare TCP connection that never
//! speaks neither holds the instance awake nor restarts its idle clock, and it is closed after
//! `handshake_timeout`. The compute's greeting is copied to the client meanwhile (the client
//! cannot speak before it has it). Once the client speaks, the connection is counted, under
//! the same lock that decides an idle pause.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::compute_conn::{self, ComputeTarget, OnBehalfOf};
use crate::limits::PendingPermit;
use crate::metrics::DirectOutcome;
use crate::perceptron;
use crate::runtime::InstanceRuntime;

/// Forwards one connection to the running compute, or hands it to the perceptron.
pub async fn handle(
    rt: Arc<InstanceRuntime>,
    mut client: TcpStream,
    peer: SocketAddr,
    pending: PendingPermit,
) {
    let name = rt.instance.config.name.clone();
    let started = Instant::now();
    let who = OnBehalfOf::Client {
        client: peer,
        listen: client.local_addr().unwrap_or(rt.instance.config.listen),
    };
    let connect = tokio::time::timeout(
        rt.instance.config.compute_timeout,
        compute_conn::connect(ComputeTarget::of(&rt.instance.config), who),
    )
    .await;
    let mut compute = match connect {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return Box::pin(fall_back(rt, client, peer, pending, &e.to_string())).await;
        }
        Err(_) => {
            return Box::pin(fall_back(rt, client, peer, pending, "connect timed out")).await;
        }
    };
    let _ = client.set_nodelay(true);
    let first = until_client_speaks(
        &mut client,
        &mut compute,
        rt.instance.config.handshake_timeout,
    )
    .await;
    drop(pending);
    let guard = match first {
        FirstBytes::Spoke => rt.instance.hold_if_running(),
        _ => None,
    };
    let Some(guard) = guard else {
        let outcome = match first {
            FirstBytes::Spoke => DirectOutcome::paused_before_login,
            FirstBytes::ClientClosed => DirectOutcome::closed_silently,
            FirstBytes::ComputeClosed => DirectOutcome::compute_closed,
            FirstBytes::TimedOut => DirectOutcome::handshake_timeout,
        };
        rt.metrics.direct(&name, outcome);
        tracing::debug!(instance = %name, client = %peer, outcome = ?outcome, "direct connection closed before the client spoke");
        return;
    };
    rt.metrics.direct(&name, DirectOutcome::forwarded);
    let bytes = crate::passthrough::pump(client, Vec::new(), compute, Vec::new()).await;
    rt.count_pumped(&bytes);
    drop(guard);
    tracing::debug!(
        instance = %name, client = %peer, up = bytes.client_to_compute, down = bytes.compute_to_client,
        ended_by = bytes.ended_by, duration_ms = started.elapsed().as_millis(), "direct connection closed"
    );
}

/// How a direct connection's pre-login phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstBytes {
    /// The client sent its first byte (left unread, for the pump).
    Spoke,
    /// The client closed without a byte.
    ClientClosed,
    /// The compute closed (or failed) first; what it sent has reached the client.
    ComputeClosed,
    /// The client sent nothing within the handshake timeout.
    TimedOut,
}

/// Copies the compute's greeting to the client until the client sends its first byte (which
/// stays in the socket for the pump), within `timeout`.
async fn until_client_speaks(
    client: &mut TcpStream,
    compute: &mut TcpStream,
    timeout: std::time::Duration,
) -> FirstBytes {
    // Greetings are about 100 bytes; a larger one takes a few turns of the loop.
    let mut buf = [0u8; 512];
    let mut probe = [0u8; 1];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return FirstBytes::TimedOut,
            peeked = client.peek(&mut probe) => {
                return match peeked {
                    Ok(n) if n > 0 => FirstBytes::Spoke,
                    _ => FirstBytes::ClientClosed,
                };
            }
            read = compute.read(&mut buf) => {
                let Some(chunk) = read.ok().filter(|n| *n > 0).and_then(|n| buf.get(..n)) else {
                    return FirstBytes::ComputeClosed;
                };
                match tokio::time::timeout_at(deadline, client.write_all(chunk)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return FirstBytes::ClientClosed,
                    Err(_) => return FirstBytes::TimedOut,
                }
            }
        }
    }
}

async fn fall_back(
    rt: Arc<InstanceRuntime>,
    client: TcpStream,
    peer: SocketAddr,
    pending: PendingPermit,
    why: &str,
) {
    rt.metrics
        .direct(&rt.instance.config.name, DirectOutcome::fell_back);
    tracing::warn!(instance = %rt.instance.config.name, client = %peer, why, "direct connect failed; using the perceptron route");
    rt.instance.report_unreachable(why).await;
    // Boxed: the perceptron's future is large, and inlined it would make every direct
    // connection's task as big as a held one.
    Box::pin(perceptron::handle(rt, client, peer, pending)).await;
}
