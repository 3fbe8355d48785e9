//! A resumable session carried by the splice below TCP (docs/kernel-splice.md, *Resumable
//! sessions*): what its commands there did is read from the compute instead of followed
//! ([`crate::session_state::evidence`]), before the splice and when it is taken back.
//!
//! At the end of a response the pump took for the splice, the relay reads the evidence on
//! the compute's leg (the client waits for that response's last chunk meanwhile), splices,
//! and carries the session until it is taken back for parking. Still counted as spliced, so
//! no pause freezes the compute under it, the relay reads the evidence again and the whole
//! state by value: the session is then between commands as a pumped one whose state was
//! just read (pinned for what the evidence showed), and goes back to the kernel at the end
//! of the response to its next command.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use super::detached::Resumable;
use super::state_read;
use crate::packet_io::PacketStream;
use crate::passthrough::{PumpEnd, PumpReport};
use crate::runtime::InstanceRuntime;
use crate::session_state::evidence::{self, Evidence};
use crate::splice::below_tcp::TcpSplice;
use crate::splice::sockhash::{Carried, TakeBack};
use crate::watch::CommandWatch;

/// The largest packet of an evidence read: one row of a name and a number.
const EVIDENCE_MAX_PACKET: usize = 1024;

/// Where the session is after [`carry`].
pub(super) enum Next {
    /// On the pump again: not spliced (the chunk written), or taken back.
    Pumped,
    /// It ended, or cannot go on (the report says how).
    Ended,
}

/// At the end of a response taken for the splice (`chunk` its last bytes, `status_flags`
/// the session's after it): splices a resumable session below TCP and carries it until it
/// is taken back, or writes the chunk and leaves it on the pump. The bytes carried go into
/// `report` (its `ended_by` set when the session ended).
#[expect(
    clippy::too_many_arguments,
    reason = "the session's parts, each borrowed once"
)]
pub(super) async fn carry(
    rt: &InstanceRuntime,
    below: &Arc<TcpSplice>,
    (client, compute): (&mut TcpStream, &mut TcpStream),
    commands: &mut CommandWatch<'_>,
    resumable: &Resumable,
    (chunk, status_flags): (Box<[u8]>, u16),
    (deprecate_eof, addr): (bool, SocketAddr),
    report: &mut PumpReport,
) -> Next {
    let config = &rt.instance.config;
    let name = &config.name;
    let timeout = config.compute_timeout;
    // The read takes the compute's leg for the relay: no pause freezes the compute under it.
    if !commands.step_aside() {
        commands.splice_after(0);
        return write_chunk(client, &chunk, report).await;
    }
    let before = read_evidence(&mut *compute, deprecate_eof, timeout).await;
    // Counted as spliced before it counts as between commands again: no pause slips between.
    let counted = rt.instance.spliced_session();
    commands.step_back();
    let before = match before {
        Ok(Some(before)) => before,
        Ok(None) => {
            drop(counted);
            tracing::debug!(instance = %name, client = %addr, "a resumable session stays on the pump: its compute does not say what it holds");
            return write_chunk(client, &chunk, report).await;
        }
        Err(e) => {
            drop(counted);
            tracing::warn!(instance = %name, client = %addr, error = %e, "reading a session's evidence before the splice failed; closing it");
            report.ended_by = PumpEnd::ComputeError;
            return Next::Ended;
        }
    };
    let spliced = match below.splice(client, compute, &chunk) {
        Ok(spliced) => spliced,
        Err(unspliced) => {
            drop(counted);
            let rest = chunk.get(unspliced.written..).unwrap_or_default();
            if unspliced.error.kind() == std::io::ErrorKind::WouldBlock {
                commands.splice_after(0);
            } else {
                tracing::info!(instance = %name, client = %addr, error = %unspliced.error, "a resumable session is not spliced below TCP; it stays on the pump");
            }
            report.compute_to_client += (chunk.len() - rest.len()) as u64;
            return write_chunk(client, rest, report).await;
        }
    };
    tracing::debug!(instance = %name, client = %addr, "resumable session spliced below TCP");
    let compute_idle = || rt.instance.compute_idle();
    let take_back = TakeBack {
        quiet: rt.instance.take_back_pace(),
        compute_idle: &compute_idle,
        look_now: counted.look_now(),
        status_flags,
    };
    let carried =
        crate::splice::below_tcp::carry(&mut *client, &mut *compute, &spliced, Some(&take_back))
            .await;
    let (quiet_for, flags) = match carried {
        Carried::Ended(ended) => {
            *report = report.then(&ended);
            return Next::Ended;
        }
        Carried::TakenBack {
            quiet_for,
            status_flags,
        } => (quiet_for, status_flags),
    };
    *report = report.then(&spliced.report(PumpEnd::Kernel));
    drop(spliced);
    // Still counted as spliced: no pause freezes the compute under these reads.
    let after = match read_evidence(&mut *compute, deprecate_eof, timeout).await {
        Ok(after) => after,
        Err(e) => {
            tracing::warn!(instance = %name, client = %addr, error = %e, "reading a session's evidence after the splice failed; closing it");
            report.ended_by = PumpEnd::ComputeError;
            return Next::Ended;
        }
    };
    let pinned = after.as_ref().map_or(
        Some("the compute stopped saying what the session holds"),
        |after| after.left_since(&before).or_else(|| after.holds()),
    );
    if let Some(why) = pinned {
        tracing::info!(instance = %name, client = %addr, why, "a session taken back from the splice is pinned to its compute");
    }
    // A compute that stopped answering is taken at its worst: pinned, a transaction open.
    let in_transaction = after.as_ref().is_none_or(Evidence::in_transaction);
    commands.taken_back_resumable((flags, quiet_for), (in_transaction, pinned));
    let mut leg =
        PacketStream::new(&mut *compute, state_read::MAX_PACKET).with_write_timeout(timeout);
    let read = state_read::read(
        &mut leg,
        deprecate_eof,
        &resumable.resumption.login(),
        timeout,
    )
    .await;
    let unread = leg.take_buffered();
    match read {
        Ok(read) if unread.is_empty() => {
            if let Err(why) = &read {
                tracing::info!(instance = %name, client = %addr, why = why.as_str(), "the session's state cannot be carried; it keeps its compute");
            }
            commands.state_read(read);
        }
        Ok(_) => {
            tracing::warn!(instance = %name, client = %addr, "the compute sent more than the state read asked for; closing the session");
            report.ended_by = PumpEnd::ComputeError;
            return Next::Ended;
        }
        Err(e) => {
            tracing::warn!(instance = %name, client = %addr, error = %e, "reading the session's state failed; closing it");
            report.ended_by = PumpEnd::ComputeError;
            return Next::Ended;
        }
    }
    tracing::debug!(instance = %name, client = %addr, quiet_ms = quiet_for.as_millis(), status_flags = ?flags, "resumable session taken back from the splice below TCP");
    drop(counted);
    Next::Pumped
}

/// Writes what is left of the response's last chunk: the session goes on on the pump.
async fn write_chunk(client: &mut TcpStream, chunk: &[u8], report: &mut PumpReport) -> Next {
    if client.write_all(chunk).await.is_err() {
        report.ended_by = PumpEnd::ClientError;
        return Next::Ended;
    }
    report.compute_to_client += chunk.len() as u64;
    Next::Pumped
}

/// Reads the session's evidence on its quiet compute leg: `None` when the compute refuses
/// the query or answers otherwise (it does not say; server-shim, or MariaDB without
/// `metadata_lock_info`).
async fn read_evidence(
    compute: &mut TcpStream,
    deprecate_eof: bool,
    timeout: std::time::Duration,
) -> Result<Option<Evidence>, super::outcome::ComputeError> {
    let mut leg = PacketStream::new(compute, EVIDENCE_MAX_PACKET).with_write_timeout(timeout);
    let rows = state_read::query(&mut leg, evidence::query(), deprecate_eof, timeout).await?;
    if !leg.take_buffered().is_empty() {
        return Err(super::outcome::ComputeProtocolError::Unexpected(0).into());
    }
    Ok(rows.ok().and_then(|rows| Evidence::read(&rows).ok()))
}
