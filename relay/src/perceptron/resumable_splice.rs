//! A resumable session carried by the splice below TCP (docs/kernel-splice.md, *Resumable
//! sessions*): what its commands there did is read from the compute instead of followed
//! ([`crate::session_state::evidence`]).
//!
//! The compute's counters are read where no client can see the read's side effects on its
//! per-statement values (right after the login, after a reattach's restore, and where the
//! relay reads the session's state anyway: between commands for a while, and when a spliced
//! session is taken back, at the end of a response),
//! and the session is spliced at the end of a response only while every command since was
//! one that leaves them as they were. Taken back for parking, still counted as spliced (no
//! pause freezes the compute under the reads), the session is read again: its counters
//! against that reading, then its whole state by value, then the counters once more for its
//! next splice. It is then between commands as a pumped session whose state was just read
//! (pinned for what the evidence showed), and goes back to the kernel at the end of the
//! response to its next command.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::outcome::{ComputeError, ComputeProtocolError};
use super::reattach::Resumption;
use super::state_read;
use crate::packet_io::PacketStream;
use crate::passthrough::{PumpEnd, PumpReport};
use crate::runtime::InstanceRuntime;
use crate::session_state::Unreadable;
use crate::session_state::evidence::{self, Evidence, Mark};
use crate::splice::below_tcp::TcpSplice;
use crate::splice::sockhash::{Carried, TakeBack};
use crate::tls::{ClientStream, ComputeStream};
use crate::watch::CommandWatch;

/// The largest packet of an evidence read: one row of a name and a number.
const EVIDENCE_MAX_PACKET: usize = 1024;

/// The compute's counters as last read, and the bytes sent to it since (the reading's own
/// query not included).
#[derive(Debug, Clone, Copy)]
pub(super) struct Baseline {
    mark: Mark,
    sent: u64,
}

impl Baseline {
    /// `bytes` more were sent to the compute (the pump's, or the kernel's).
    pub(super) const fn sent(&mut self, bytes: u64) {
        self.sent = self.sent.saturating_add(bytes);
    }
}

/// Where the session is after [`carry`].
pub(super) enum Next {
    /// On the pump again: not spliced (the chunk written), or taken back (`spliced`).
    Pumped { spliced: bool },
    /// It ended, or cannot go on (the report says how).
    Ended,
}

/// Reads the compute's counters on the session's quiet compute leg, for its next splice:
/// `None` when the compute does not say (it refuses the query or answers otherwise:
/// server-shim, or MariaDB without `metadata_lock_info`).
///
/// # Errors
/// [`ComputeError`]: the connection failed, timed out, or sent more than the answer.
pub(super) async fn baseline<S>(
    compute: &mut S,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Option<Baseline>, ComputeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let read = read_evidence(compute, deprecate_eof, timeout).await?;
    Ok(read.map(|read| Baseline {
        mark: read.mark(),
        sent: 0,
    }))
}

/// [`baseline`] right after the login, with the compute's leg taken for the relay
/// ([`CommandWatch::step_aside`]: no pause freezes the compute under the read). The client's
/// first command waits for it; what the read leaves in the session's per-statement values
/// (`FOUND_ROWS()`) is what a new session's first statement would find anyway but for that
/// count. `None` when the compute is not running (no read), `Some(None)` when it does not
/// say.
///
/// # Errors
/// As [`baseline`].
pub(super) async fn first_baseline<S>(
    compute: &mut S,
    commands: &mut CommandWatch<'_>,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Option<Option<Baseline>>, ComputeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !commands.step_aside() {
        commands.counters_read(false);
        return Ok(None);
    }
    let read = baseline(compute, deprecate_eof, timeout).await;
    commands.step_back();
    commands.counters_read(matches!(read, Ok(Some(_))));
    read.map(Some)
}

/// At the end of a response taken for the splice (`chunk` its last bytes, `status_flags`
/// the session's after it): splices a resumable session below TCP and carries it until it
/// is taken back, or writes the chunk and leaves it on the pump (not spliced below TCP after
/// all). `baseline` is its counters' last reading, replaced by the one made when it is taken back.
/// Returns where the session is, and the bytes carried (`ended_by` set when it ended).
pub(super) async fn carry(
    rt: &InstanceRuntime,
    (client, compute): (&mut ClientStream<TcpStream>, &mut ComputeStream<TcpStream>),
    commands: &mut CommandWatch<'_>,
    (resumption, baseline): (&Resumption, &mut Option<Baseline>),
    (chunk, status_flags): (Box<[u8]>, u16),
    (deprecate_eof, addr): (bool, SocketAddr),
) -> (Next, PumpReport) {
    let mut report = PumpReport::default();
    let below = rt.below_tcp(client, compute);
    let (Some(below), ClientStream::Plain(client), ComputeStream::Plain(compute)) =
        (below, &mut *client, compute)
    else {
        // Not spliced below TCP after all: the chunk goes on, and so does the pump.
        let next = write_chunk(client, &chunk, &mut report).await;
        return (next, report);
    };
    let next = carry_below_tcp(
        rt,
        &below,
        (client, compute),
        commands,
        (resumption, baseline),
        (chunk, status_flags),
        (deprecate_eof, addr),
        &mut report,
    )
    .await;
    (next, report)
}

/// [`carry`] below TCP.
#[expect(
    clippy::too_many_arguments,
    reason = "the session's parts, each borrowed once"
)]
async fn carry_below_tcp(
    rt: &InstanceRuntime,
    below: &Arc<TcpSplice>,
    (client, compute): (&mut TcpStream, &mut TcpStream),
    commands: &mut CommandWatch<'_>,
    (resumption, baseline): (&Resumption, &mut Option<Baseline>),
    (chunk, status_flags): (Box<[u8]>, u16),
    (deprecate_eof, addr): (bool, SocketAddr),
    report: &mut PumpReport,
) -> Next {
    let config = &rt.instance.config;
    let name = &config.name;
    let timeout = config.compute_timeout;
    let Some(before) = baseline.take() else {
        return write_chunk(client, &chunk, report).await;
    };
    let counted = rt.instance.spliced_session();
    let spliced = match below.splice(client, compute, &chunk) {
        Ok(spliced) => spliced,
        Err(unspliced) => {
            drop(counted);
            *baseline = Some(before);
            let rest = chunk.get(unspliced.written..).unwrap_or_default();
            if unspliced.error.kind() == std::io::ErrorKind::WouldBlock {
                commands.splice_after(0);
            } else {
                // Not on this path again: no more readings for a splice.
                commands.counters_read(false);
                *baseline = None;
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
    let in_kernel = spliced.report(PumpEnd::Kernel);
    *report = report.then(&in_kernel);
    let again = !spliced.was_bypassed();
    drop(spliced);
    let mut since = before;
    since.sent(in_kernel.client_to_compute);
    let Some(flags) = flags else {
        // The compute's last packet not read: the session may be mid-response (a client
        // reading slowly). No read now; the pump follows it, and what it did while spliced
        // is checked before its next state read, between commands (`check`). Until then a
        // transaction counts as open.
        *baseline = Some(since);
        commands.counters_read(false);
        commands.taken_back_resumable((None, quiet_for), (true, None));
        if !again {
            commands.stay_on_pump();
        }
        tracing::debug!(instance = %name, client = %addr, quiet_ms = quiet_for.as_millis(), "resumable session taken back from the splice below TCP, to be checked");
        drop(counted);
        return Next::Pumped { spliced: true };
    };
    // Still counted as spliced: no pause freezes the compute under these reads.
    let ended = |e: ComputeError, report: &mut PumpReport| {
        tracing::warn!(instance = %name, client = %addr, error = %e, "reading a session taken back from the splice failed; closing it");
        report.ended_by = PumpEnd::ComputeError;
        Next::Ended
    };
    // Anything but the answer asked for may be a response the client is still owed (a
    // command it pipelined while spliced): the session cannot be followed, and ends.
    let after = match read_evidence(&mut *compute, deprecate_eof, timeout).await {
        Ok(Some(after)) => after,
        Ok(None) => return ended(ComputeProtocolError::Unexpected(0).into(), report),
        Err(e) => return ended(e, report),
    };
    // What the compute received since the reading: the pump's, the kernel's, this query.
    since.sent(query_packet_len());
    let pinned = after
        .left_since(since.mark, since.sent)
        .or_else(|| after.holds());
    if let Some(why) = pinned {
        tracing::info!(instance = %name, client = %addr, why, "a session taken back from the splice is pinned to its compute");
    }
    commands.taken_back_resumable((Some(flags), quiet_for), (after.in_transaction(), pinned));
    if !again {
        commands.stay_on_pump();
    }
    let mut leg =
        PacketStream::new(&mut *compute, state_read::MAX_PACKET).with_write_timeout(timeout);
    let read = match state_read::read(&mut leg, deprecate_eof, &resumption.login(), timeout).await {
        Ok(read) if leg.take_buffered().is_empty() => read,
        Ok(_) => return ended(ComputeProtocolError::Unexpected(0).into(), report),
        Err(e) => return ended(e, report),
    };
    if let Err(why) = &read {
        tracing::info!(instance = %name, client = %addr, why = why.as_str(), "the session's state cannot be carried; it keeps its compute");
    }
    *baseline = match self::baseline(&mut *compute, deprecate_eof, timeout).await {
        Ok(next) => next,
        Err(e) => return ended(e, report),
    };
    commands.state_read(read);
    commands.counters_read(baseline.is_some());
    tracing::debug!(instance = %name, client = %addr, quiet_ms = quiet_for.as_millis(), status_flags = ?flags, "resumable session taken back from the splice below TCP");
    drop(counted);
    Next::Pumped { spliced: true }
}

/// The state read of a resumable session that has been between commands for a while
/// (docs/parking.md, *Sessions across a stop*), on its compute's leg (`rest`: what was read
/// from it and not yet forwarded, kept so): first, for a session taken back from the splice
/// unchecked, what it did there, and for one whose every command since the last reading
/// left the counters as they were, that they did ([`check`]); then its state by value; then,
/// for a session that splices, its counters. Returns why the state cannot be carried, if it cannot.
///
/// # Errors
/// As [`baseline`]; the session cannot go on.
pub(super) async fn read_between_commands<S>(
    (compute, rest): (&mut S, &mut Vec<u8>),
    (resumption, splices, kept): (&Resumption, bool, &mut Option<Baseline>),
    commands: &mut CommandWatch<'_>,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Option<Unreadable>, ComputeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if commands.to_check() && kept.is_some() && rest.is_empty() {
        check(&mut *compute, kept, commands, deprecate_eof, timeout).await?;
    }
    let mut leg =
        PacketStream::new(&mut *compute, state_read::MAX_PACKET).with_write_timeout(timeout);
    let read = state_read::read(&mut leg, deprecate_eof, &resumption.login(), timeout).await?;
    *rest = leg.take_buffered();
    let next = if splices && rest.is_empty() {
        baseline(compute, deprecate_eof, timeout).await?
    } else {
        None
    };
    let why = read.as_ref().err().copied();
    commands.state_read(read);
    commands.counters_read(next.is_some());
    *kept = next;
    Ok(why)
}

/// Before the state read of a session whose counters are to be checked
/// ([`CommandWatch::to_check`]), between commands now: reads its evidence against `baseline`
/// (with the bytes sent since), and tells `commands` what pins it. The caller reads the state
/// and the next baseline after it.
///
/// # Errors
/// As [`baseline`].
async fn check<S>(
    compute: &mut S,
    baseline: &mut Option<Baseline>,
    commands: &mut CommandWatch<'_>,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<(), ComputeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let after = read_evidence(compute, deprecate_eof, timeout).await?;
    let checked = match (baseline.take(), after) {
        (Some(mut since), Some(after)) => {
            since.sent(query_packet_len());
            let pinned = after
                .left_since(since.mark, since.sent)
                .or_else(|| after.holds());
            (after.in_transaction(), pinned)
        }
        _ => (
            true,
            Some("what the session did while spliced could not be read"),
        ),
    };
    commands.checked_by_compute(checked);
    Ok(())
}

/// Writes what is left of the response's last chunk: the session goes on on the pump.
async fn write_chunk<W>(client: &mut W, chunk: &[u8], report: &mut PumpReport) -> Next
where
    W: AsyncWrite + Unpin,
{
    if client.write_all(chunk).await.is_err() {
        report.ended_by = PumpEnd::ClientError;
        return Next::Ended;
    }
    report.compute_to_client += chunk.len() as u64;
    Next::Pumped { spliced: false }
}

/// The bytes of the evidence query's packet (its header included), as the compute counts
/// what it receives.
fn query_packet_len() -> u64 {
    (4 + 1 + evidence::QUERY.len()) as u64
}

/// Reads the session's evidence on its quiet compute leg: `None` when the compute refuses
/// the query or answers otherwise.
async fn read_evidence<S>(
    compute: &mut S,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Option<Evidence>, ComputeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut leg = PacketStream::new(compute, EVIDENCE_MAX_PACKET).with_write_timeout(timeout);
    let rows =
        state_read::query(&mut leg, evidence::QUERY.as_str(), deprecate_eof, timeout).await?;
    if !leg.take_buffered().is_empty() {
        return Err(ComputeProtocolError::Unexpected(0).into());
    }
    Ok(rows.ok().and_then(|rows| Evidence::read(&rows).ok()))
}
