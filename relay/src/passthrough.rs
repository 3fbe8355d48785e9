//! The byte pump: after a relayed login the relay only copies bytes (DESIGN §2, P8), in both
//! directions, with half-close: when one side finishes sending, the other side's write half is
//! shut down and the opposite direction carries on until it finishes too.

use tokio::io::{AsyncWriteExt as _, copy_bidirectional};
use tokio::net::TcpStream;

/// Bytes copied, and which side ended the session.
#[derive(Debug, Clone, Copy, Default)]
pub struct PumpReport {
    /// Client → compute bytes.
    pub client_to_compute: u64,
    /// Compute → client bytes.
    pub compute_to_client: u64,
    /// `"eof"` for a clean close; `"socket_error"` when a socket failed mid-session;
    /// `"client_error"` / `"compute_error"` when delivering early bytes failed.
    pub ended_by: &'static str,
}

/// Copies until both directions are done. Bytes either side sent before the pump started
/// (read along with the last login packet) are delivered first.
pub async fn pump(
    mut client: TcpStream,
    client_rest: Vec<u8>,
    mut compute: TcpStream,
    compute_rest: Vec<u8>,
) -> PumpReport {
    let mut report = PumpReport {
        ended_by: "eof",
        ..PumpReport::default()
    };
    if !client_rest.is_empty() {
        if compute.write_all(&client_rest).await.is_err() {
            report.ended_by = "compute_error";
            return report;
        }
        report.client_to_compute += client_rest.len() as u64;
    }
    if !compute_rest.is_empty() {
        if client.write_all(&compute_rest).await.is_err() {
            report.ended_by = "client_error";
            return report;
        }
        report.compute_to_client += compute_rest.len() as u64;
    }
    match copy_bidirectional(&mut client, &mut compute).await {
        Ok((up, down)) => {
            report.client_to_compute += up;
            report.compute_to_client += down;
        }
        Err(e) => {
            // copy_bidirectional does not say which side failed; the error kind usually does
            // (a reset from the client is the common case when a client is killed).
            tracing::debug!(error = %e, "byte pump ended with an error");
            report.ended_by = "socket_error";
        }
    }
    report
}
