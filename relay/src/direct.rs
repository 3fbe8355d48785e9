//! The direct route (DESIGN §2, "after the resume"): while an instance runs, a new connection
//! is forwarded as raw bytes from its first byte; the compute greets and authenticates the
//! client itself and the relay parses nothing. This keeps the perceptron off the hot path.
//! If the compute does not accept, the connection falls back to the perceptron route, which
//! wakes the instance.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::compute_conn::{self, ComputeTarget, OnBehalfOf};
use crate::control::ConnectionGuard;
use crate::metrics::DirectOutcome;
use crate::perceptron;
use crate::runtime::InstanceRuntime;

/// Forwards one connection to the running compute, or hands it to the perceptron.
pub async fn handle(
    rt: Arc<InstanceRuntime>,
    client: TcpStream,
    peer: SocketAddr,
    guard: ConnectionGuard,
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
    let compute = match connect {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Box::pin(fall_back(rt, client, peer, guard, &e.to_string())).await,
        Err(_) => return Box::pin(fall_back(rt, client, peer, guard, "connect timed out")).await,
    };
    let _ = client.set_nodelay(true);
    rt.metrics.direct(&name, DirectOutcome::forwarded);
    let bytes = crate::passthrough::pump(client, Vec::new(), compute, Vec::new()).await;
    rt.count_pumped(&bytes);
    drop(guard);
    tracing::debug!(
        instance = %name, client = %peer, up = bytes.client_to_compute, down = bytes.compute_to_client,
        ended_by = bytes.ended_by, duration_ms = started.elapsed().as_millis(), "direct connection closed"
    );
}

async fn fall_back(
    rt: Arc<InstanceRuntime>,
    client: TcpStream,
    peer: SocketAddr,
    guard: ConnectionGuard,
    why: &str,
) {
    rt.metrics
        .direct(&rt.instance.config.name, DirectOutcome::fell_back);
    drop(guard);
    tracing::warn!(instance = %rt.instance.config.name, client = %peer, why, "direct connect failed; using the perceptron route");
    rt.instance.report_unreachable(why).await;
    // Boxed: the perceptron's future is large, and inlined it would make every direct
    // connection's task as big as a held one.
    Box::pin(perceptron::handle(rt, client, peer)).await;
}
