//! A resumable session across its compute's stop (docs/parking.md, *Sessions across a stop*):
//! detached while its compute is stopped (pings and learnt keepalive queries answered here),
//! reattached to the next compute with its ticket at its next command, or by force
//! (`force_reattach_every`), its state restored from values.

use std::time::Instant;

use authplugin::Scramble;
use authplugin::packet::ErrPacket;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use super::{dual_auth, outcome, reattach, resumable_splice};
use crate::compute_conn::{ComputeConnector, TcpConnector};
use crate::metrics::{self, Counter};
use crate::runtime::InstanceRuntime;
use crate::tls::{ClientStream, ComputeStream};
use crate::watch::CommandWatch;

/// What reattaching a resumable session needs: its ticket and login, and how to connect to
/// its compute; and what splicing it needs. One box, kept only by sessions that have a ticket.
pub(super) struct Resumable {
    pub(super) resumption: reattach::Resumption,
    pub(super) connector: TcpConnector,
    /// The session may be spliced below TCP: on loopback, its compute says what it holds
    /// (`resumable_splice`).
    pub(super) splices: bool,
    /// Its compute's counters as last read (`resumable_splice::Baseline`).
    pub(super) baseline: Option<resumable_splice::Baseline>,
}

/// `force_reattach_every`: the session's new compute leg on a new login, or `None` once the
/// reattach failed (logged) and the session was ended with ERR 1927.
pub(super) async fn reattach_by_force(
    rt: &InstanceRuntime,
    resumable: &mut Resumable,
    client_stream: &mut ClientStream<TcpStream>,
    commands: &mut CommandWatch<'_>,
    deprecate_eof: bool,
    addr: std::net::SocketAddr,
) -> Option<(ComputeStream<TcpStream>, Vec<u8>)> {
    let name = &rt.instance.config.name;
    let reattached = reattach_session(
        rt,
        &resumable.connector,
        &mut resumable.resumption,
        commands,
        deprecate_eof,
    )
    .await;
    match reattached {
        Ok((leg, _)) => {
            tracing::info!(instance = %name, client = %addr, "session reattached by force");
            Some(leg)
        }
        Err(e) => {
            tracing::warn!(instance = %name, client = %addr, error = %e, "forced reattach failed; closing the session");
            connection_killed(client_stream, "the session could not be resumed").await;
            None
        }
    }
}

/// A session detached from its stopped compute: waits for its next command (pings answered
/// here), then reattaches it to a new compute. Returns the new compute leg and the command,
/// or `None` once the session has ended (the client quit or hung up, or got ERR 1927: past
/// its ticket's lifetime, detached beyond the instance's cap, or not resumable).
pub(super) async fn resume_detached(
    rt: &InstanceRuntime,
    resumable: &mut Resumable,
    client_stream: &mut ClientStream<TcpStream>,
    commands: &mut CommandWatch<'_>,
    deprecate_eof: bool,
    addr: std::net::SocketAddr,
) -> Option<((ComputeStream<TcpStream>, Vec<u8>), Vec<u8>)> {
    let name = &rt.instance.config.name;
    commands.set_detached(true);
    let slot = rt.instance.detach_session();
    let first = Box::pin(next_command(client_stream, commands)).await?;
    // Past its ticket's lifetime, or detached beyond the instance's cap: the session ends
    // here, and its command wakes nothing.
    let expired = resumable.resumption.expired();
    if expired || !slot.kept() {
        let (why, outcome) = if expired {
            (
                "the session waited detached longer than its ticket allows",
                metrics::outcome::DETACHED_EXPIRED,
            )
        } else {
            (
                "more sessions were detached than max_detached_sessions allows",
                metrics::outcome::DETACHED_OVER_CAP,
            )
        };
        rt.metrics.inc(Counter::Connections, name, outcome);
        tracing::info!(instance = %name, client = %addr, why, "detached session not resumed; ended with 1927, nothing woken");
        connection_killed(client_stream, why).await;
        return None;
    }
    drop(slot);
    let t = Instant::now();
    // Boxed: a detached session waits above for hours, and should not keep room for this.
    let reattached = Box::pin(reattach_session(
        rt,
        &resumable.connector,
        &mut resumable.resumption,
        commands,
        deprecate_eof,
    ))
    .await;
    match reattached {
        Ok((leg, (wake_ms, prepared))) => {
            commands.set_detached(false);
            rt.metrics
                .inc(Counter::Connections, name, metrics::outcome::REATTACHED);
            tracing::info!(
                instance = %name, client = %addr, prepared,
                wake_ms, total_ms = t.elapsed().as_millis(), "session reattached"
            );
            Some((leg, first))
        }
        Err(e) => {
            tracing::warn!(instance = %name, client = %addr, error = %e, "session could not be reattached; closing it");
            connection_killed(client_stream, "the session could not be resumed").await;
            None
        }
    }
}

/// Ends a session with ERR 1927 ("Connection was killed: `why`"), numbered as the reply to a
/// command (sequence id 1): the detached session's command just read, or, after a forced
/// reattach failed between commands, the one its client sends next.
async fn connection_killed(client: &mut ClientStream<TcpStream>, why: &str) {
    let (code, state) = authplugin::packet::err::codes::ER_CONNECTION_KILLED;
    let err = ErrPacket::new(code, state, &format!("Connection was killed: {why}"));
    let mut packet = Vec::new();
    authplugin::packet::write_packet(&mut packet, 1, &err.to_bytes());
    let _ = client.write_all(&packet).await;
}

/// Wakes the instance if it must, then reattaches the session to its compute with its ticket:
/// its state restored from values, its statements prepared again (their ids translated from
/// then on where they differ). Returns the new compute leg, how long the wake took and how
/// many statements were prepared.
async fn reattach_session(
    rt: &InstanceRuntime,
    connector: &TcpConnector,
    resumption: &mut reattach::Resumption,
    commands: &mut CommandWatch<'_>,
    deprecate_eof: bool,
) -> Result<((ComputeStream<TcpStream>, Vec<u8>), (u128, usize)), ResumeError> {
    let statements = commands.statements();
    let prepared = statements.len();
    let state = reattach::SessionState {
        state: commands.state(),
        set_option: commands.set_option(),
        statements: &statements,
        deprecate_eof,
    };
    let (reattached, wake_ms) = resume_session(rt, connector, resumption, &state).await?;
    drop(statements);
    commands.reattached(&reattached.statement_ids, reattached.compute_id);
    Ok((reattached.stream.into_parts(), (wake_ms, prepared)))
}

/// While a session is detached: reads the client's bytes, answering pings and learnt
/// keepalive queries itself, until a command for the compute arrives (returned) or the
/// client quits or hangs up (`None`).
async fn next_command(
    client: &mut ClientStream<TcpStream>,
    commands: &mut CommandWatch<'_>,
) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        // A detached session may wait for hours: no buffer is held until the client speaks.
        std::future::poll_fn(|cx| crate::passthrough::PumpIo::poll_read_ready(&*client, cx))
            .await
            .ok()?;
        let mut buf = vec![0; 16 * 1024];
        let n = client.read(&mut buf).await.ok()?;
        let bytes = buf.get(..n).filter(|b| !b.is_empty())?;
        if let Some(reply) = commands.answer_detached(bytes) {
            client.write_all(&reply).await.ok()?;
            continue;
        }
        // COM_QUIT: nothing to reattach for.
        if bytes == [1, 0, 0, 0, 0x01] {
            return None;
        }
        return Some(bytes.to_vec());
    }
}

/// Why a detached session could not be resumed.
#[derive(Debug)]
enum ResumeError {
    /// The instance did not wake.
    Wake(crate::control::WakeError),
    /// The compute refused the reattach, or it failed.
    Reattach(outcome::ComputeError),
}

impl std::fmt::Display for ResumeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Wake(e) => write!(f, "the wake failed: {e}"),
            Self::Reattach(e) => write!(f, "{e}"),
        }
    }
}

/// Wakes the instance (one wake for every detached session: concurrent callers share it) and
/// reattaches the session; also returns how long the wake took.
async fn resume_session<C: ComputeConnector>(
    rt: &InstanceRuntime,
    connector: &C,
    resumption: &mut reattach::Resumption,
    state: &reattach::SessionState<'_>,
) -> Result<(reattach::Reattached<C::Stream>, u128), ResumeError> {
    let t = Instant::now();
    rt.instance
        .ensure_running()
        .await
        .map_err(ResumeError::Wake)?;
    let wake_ms = t.elapsed().as_millis();
    let ring = rt.ring.current();
    // A reattach carries no client answer: scramble A is not used.
    let unused = Scramble::from_bytes([0; authplugin::SCRAMBLE_LEN]);
    let signer = dual_auth::Signer {
        ring: &ring,
        scramble_a: &unused,
        client_addr: "",
        now_ms: crate::clock::now_ms(),
        greetings: &rt.greetings,
        wants_ticket: true,
    };
    let result = reattach::reattach(
        connector,
        resumption,
        &signer,
        state,
        rt.instance.config.compute_timeout,
    )
    .await;
    let reattached = result.map_err(ResumeError::Reattach)?;
    // The reattach proved the new compute holds the key, as a relayed login does.
    rt.instance.mark_proven(reattached.proven_in_greeting).await;
    Ok((reattached, wake_ms))
}
