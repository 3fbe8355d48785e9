//! The direct route (architecture.md §2, "after the resume"): while an instance runs, a new connection
//! is forwarded as raw bytes from its first byte; the compute greets and authenticates the
//! client itself and the relay parses nothing. This keeps the perceptron off the hot path.
//! If the compute does not accept, the connection falls back to the perceptron route, which
//! wakes the instance.
//!
//! The connection is counted from its accept, in the same step (and under the same lock) that
//! chose this route and that decides an idle pause, a freeze or a stop: none of them can cut a
//! connection the compute has greeted and whose client has not answered yet. Until the client
//! sends its first byte the connection is pre-login: it also holds a pending slot (see
//! [`crate::limits`]) and is closed after `handshake_timeout`, so a bare TCP connection that
//! never speaks holds off a pause at most that long and never restarts the idle clock. The
//! compute's greeting is copied to the client meanwhile (the client cannot speak before it
//! has it).
//!
//! The login that follows is copied unchanged but watched ([`crate::login_watch`]): a user
//! whose failed-login budget is spent is refused (ERR 1226) before its login reaches the
//! compute, and a login the compute refuses with 1045 is charged to the source's and the
//! user's budgets, as on the perceptron route, so password guessing is throttled on running
//! instances too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use authplugin::packet::err::codes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::budgets::LoginCharge;
use crate::compute_conn::{self, ComputeTarget, OnBehalfOf};
use crate::limits::PendingPermit;
use crate::login_watch::{Accepted, Event, LoginWatch, Verdict};
use crate::metrics::DirectOutcome;
use crate::perceptron;
use crate::runtime::InstanceRuntime;
use crate::watch::CommandWatch;

/// Forwards one connection to the running compute, or hands it to the perceptron; `guard`
/// counts it ([`crate::control::Instance::hold_direct`]).
pub async fn handle(
    rt: Arc<InstanceRuntime>,
    mut client: TcpStream,
    peer: SocketAddr,
    pending: PendingPermit,
    mut guard: crate::control::ConnectionGuard,
) {
    let name = rt.instance.config.name.clone();
    let started = Instant::now();
    let who = OnBehalfOf::Client {
        client: peer,
        listen: client.local_addr().unwrap_or(compute_conn::UNKNOWN_LOCAL),
    };
    let connect = tokio::time::timeout(
        rt.instance.config.compute_timeout,
        compute_conn::connect(ComputeTarget::of(&rt.instance.config), who),
    )
    .await;
    let mut compute = match connect {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            drop(guard);
            return Box::pin(fall_back(rt, client, peer, pending, &e.to_string())).await;
        }
        Err(_) => {
            drop(guard);
            return Box::pin(fall_back(rt, client, peer, pending, "connect timed out")).await;
        }
    };
    let _ = client.set_nodelay(true);
    let mut greeting = Vec::new();
    let first = until_client_speaks(
        &mut client,
        &mut compute,
        rt.instance.config.handshake_timeout,
        &mut greeting,
    )
    .await;
    let outcome = match first {
        FirstBytes::Spoke => None,
        FirstBytes::ClientClosed => Some(DirectOutcome::closed_silently),
        FirstBytes::ComputeClosed => Some(DirectOutcome::compute_closed),
        FirstBytes::TimedOut => Some(DirectOutcome::handshake_timeout),
    };
    if let Some(outcome) = outcome {
        // Never a session: the guard's drop leaves the idle clock alone.
        rt.metrics.direct(&name, outcome);
        tracing::debug!(instance = %name, client = %peer, outcome = ?outcome, "direct connection closed before the client spoke");
        return;
    }
    guard.client_spoke();
    guard.set_client(peer);
    rt.metrics.direct(&name, DirectOutcome::forwarded);
    // Boxed: the login's watch is the largest state of this future (5.3 KB, its buffers and
    // the budgets' admission), which a connection's task would otherwise keep for hours,
    // idle behind a pool, after the login is long over (bench/memory).
    let watched = Box::pin(watch_login(&rt, &mut client, &mut compute, peer)).await;
    let (up, down, accepted) = match watched {
        LoginPhase::Watched {
            up,
            down,
            refused,
            accepted,
        } => {
            // A login the compute refused does not count as activity when it closes.
            if !refused {
                guard.mark_session();
            }
            (up, down, accepted)
        }
        LoginPhase::Refused(reason) => {
            tracing::info!(instance = %name, client = %peer, reason, "direct login refused by the budgets");
            return;
        }
        LoginPhase::Closed => return,
    };
    // Pending until the login's verdict (or the watch's end), not its first byte: a client
    // that sends one byte and stalls still counts against its source's pre-login cap.
    drop(pending);
    let thaw = rt.instance.thaw_on_upload();
    // A login followed to its OK: its commands are followed too (parking). One that was not
    // (TLS, a watch that gave up) stays busy for its whole life, as every connection was.
    let session = accepted.and_then(|a| session_capabilities(&greeting, a));
    let mut commands =
        session.map(|(caps, mariadb, status)| CommandWatch::new(&mut guard, caps, mariadb, status));
    let observer = commands
        .as_mut()
        .map(|c| c as &mut (dyn crate::passthrough::Observer + Send));
    let mut bytes =
        crate::passthrough::pump(client, Vec::new(), compute, Vec::new(), thaw, observer).await;
    drop(commands);
    bytes.client_to_compute += up;
    bytes.compute_to_client += down;
    rt.count_pumped(&bytes);
    drop(guard);
    tracing::debug!(
        instance = %name, client = %peer, up = bytes.client_to_compute, down = bytes.compute_to_client,
        ended_by = bytes.ended_by.label(), duration_ms = started.elapsed().as_millis(), "direct connection closed"
    );
}

/// How a watched login ended.
enum LoginPhase {
    /// The login went through (or could not be followed); the pump takes over. Bytes copied.
    Watched {
        /// Client → compute.
        up: u64,
        /// Compute → client.
        down: u64,
        /// The compute refused the login (an ERR verdict): not a session.
        refused: bool,
        /// The compute accepted it, and what that says of the session.
        accepted: Option<Accepted>,
    },
    /// Refused by the budgets (the reason's metric label); the client has its ERR.
    Refused(&'static str),
    /// A side closed or failed during the login.
    Closed,
}

/// Copies the login both ways while a [`LoginWatch`] follows it, within `handshake_timeout`
/// (after which the pump simply takes over): holds the client's login packet until its user
/// is admitted, and charges a 1045 from the compute to the budgets.
async fn watch_login(
    rt: &InstanceRuntime,
    client: &mut TcpStream,
    compute: &mut TcpStream,
    peer: SocketAddr,
) -> LoginPhase {
    let name = &rt.instance.config.name;
    let deadline = tokio::time::Instant::now() + rt.instance.config.handshake_timeout;
    let mut watch = LoginWatch::new();
    let (mut up, mut down) = (0u64, 0u64);
    // The client's login packet, held until its user is admitted.
    let mut held: Vec<u8> = Vec::new();
    // The login's place in its budgets, until the verdict.
    let mut charge: Option<LoginCharge> = None;
    let mut refused = false;
    let mut from_client = [0u8; 2048];
    let mut from_compute = [0u8; 2048];
    while !watch.done() {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => break,
            read = client.read(&mut from_client) => {
                let Some(chunk) = read.ok().filter(|n| *n > 0).and_then(|n| from_client.get(..n)) else {
                    return LoginPhase::Closed;
                };
                if !watch.awaiting_login() {
                    if compute.write_all(chunk).await.is_err() {
                        return LoginPhase::Closed;
                    }
                    up += chunk.len() as u64;
                    continue;
                }
                held.extend_from_slice(chunk);
                match watch.client_bytes(chunk) {
                    Some(Event::Login { user: login_user }) => {
                        // Pending against its source and user until the verdict; waits while
                        // their remaining failures are all in flight.
                        let admitted = rt.budgets.admit_login(peer.ip(), name, &login_user, false, deadline).await;
                        match admitted {
                            Ok(c) => charge = Some(c),
                            Err(refusal) => {
                                rt.metrics.budget_refused(name, refusal.label());
                                let err = refusal.client_error(&peer.ip().to_string(), &login_user).to_bytes();
                                let mut framed = Vec::new();
                                authplugin::packet::write_packet(&mut framed, 2, &err);
                                let _ = client.write_all(&framed).await;
                                return LoginPhase::Refused(refusal.label());
                            }
                        }
                    }
                    Some(Event::TlsUpgrade) => {
                        // An instance without [instance.tls] whose compute offers its own (the
                        // profile's warning says so once): the login is ciphertext from here.
                        tracing::debug!(instance = %name, client = %peer, "direct-route login inside the compute's TLS: not charged to the budgets");
                    }
                    Some(_) => {}
                    None => continue,
                }
                if compute.write_all(&held).await.is_err() {
                    return LoginPhase::Closed;
                }
                up += held.len() as u64;
                held = Vec::new();
            }
            read = compute.read(&mut from_compute) => {
                let Some(chunk) = read.ok().filter(|n| *n > 0).and_then(|n| from_compute.get(..n)) else {
                    return LoginPhase::Closed;
                };
                // Counted before the client sees the refusal, so its next attempt already
                // meets the budget.
                match watch.compute_bytes(chunk) {
                    Some(Event::Verdict(Verdict::Refused(code))) => {
                        refused = true;
                        if let Some(charge) = charge.take()
                            && code == codes::ER_ACCESS_DENIED_ERROR.0
                        {
                            charge.refused(std::time::Instant::now());
                            rt.instance.note_refused_login();
                        }
                    }
                    Some(Event::Verdict(Verdict::Accepted)) => {
                        if let Some(charge) = charge.take() {
                            charge.accepted();
                        }
                    }
                    Some(Event::GaveUp) => charge = None,
                    _ => {}
                }
                if client.write_all(chunk).await.is_err() {
                    return LoginPhase::Closed;
                }
                down += chunk.len() as u64;
            }
        }
    }
    // Out of time mid-login: what was held goes on, unwatched.
    if !held.is_empty() {
        if compute.write_all(&held).await.is_err() {
            return LoginPhase::Closed;
        }
        up += held.len() as u64;
    }
    LoginPhase::Watched {
        up,
        down,
        refused,
        accepted: watch.accepted(),
    }
}

/// The capabilities, MariaDB extended capabilities and status flags a directly routed session
/// runs with: what both the compute's greeting (the first packet of `greeting`, the bytes
/// copied to the client before it spoke) and the client's login have.
fn session_capabilities(greeting: &[u8], accepted: Accepted) -> Option<(u32, u32, u16)> {
    let (packet, _) = authplugin::packet::parse_packet(greeting, MAX_GREETING_LEN)
        .ok()
        .flatten()?;
    let server = authplugin::packet::HandshakeV10::decode(&packet.payload).ok()?;
    let caps = server.capability_flags & accepted.client_capabilities;
    let mariadb = server
        .mariadb_extended_capabilities()
        .map_or(0, |ext| ext & accepted.client_mariadb_capabilities);
    Some((caps, mariadb, accepted.status_flags))
}

/// Clears `MARIADB_CLIENT_CACHE_METADATA` from the MariaDB extended capabilities of the
/// greeting framed at the start of `bytes`, when the whole fixed part is there: a client that
/// negotiates it gets result sets of prepared statements without their column definitions,
/// which [`crate::conversation`] cannot follow, and such a connection could never be parked.
/// Nothing is signed in a greeting; the client simply does not negotiate the optimisation.
fn without_cached_metadata(bytes: &mut [u8]) {
    use authplugin::packet::capabilities::CLIENT_MYSQL_MARIADB;
    // Header (4), protocol version (1), the server version up to its NUL.
    let Some(nul) = bytes.get(5..).and_then(|v| v.iter().position(|&b| b == 0)) else {
        return;
    };
    // Connection id (4), scramble part 1 (8), filler (1), then the capabilities' low half.
    let caps_low = 5 + nul + 1 + 4 + 8 + 1;
    let Some(&[low0, ..]) = bytes.get(caps_low..caps_low + 2) else {
        return;
    };
    if u32::from(low0) & CLIENT_MYSQL_MARIADB != 0 {
        return; // MySQL, or a MariaDB that does not send extended capabilities
    }
    // Character set (1), status (2), capabilities' high half (2), scramble length (1),
    // 6 reserved bytes, then the four bytes of extended capabilities.
    let ext = caps_low + 2 + 1 + 2 + 2 + 1 + 6;
    // The flag lives in the first (least significant) byte.
    let [flag, ..] = authplugin::packet::capabilities::MARIADB_CLIENT_CACHE_METADATA.to_le_bytes();
    if let Some(byte) = bytes.get_mut(ext) {
        *byte &= !flag;
    }
}

/// The most of the compute's greeting kept for [`session_capabilities`].
const MAX_GREETING_LEN: usize = 1024;

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
    greeting: &mut Vec<u8>,
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
                let Some(n) = read.ok().filter(|n| *n > 0) else {
                    return FirstBytes::ComputeClosed;
                };
                if greeting.is_empty() {
                    // The greeting's first chunk: commands of sessions that cache result-set
                    // metadata cannot be followed, so that is not offered (parking).
                    without_cached_metadata(buf.get_mut(..n).unwrap_or_default());
                }
                let chunk = buf.get(..n).unwrap_or_default();
                let room = MAX_GREETING_LEN.saturating_sub(greeting.len());
                greeting.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
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

#[cfg(test)]
mod tests {
    use super::*;
    use authplugin::Scramble;
    use authplugin::packet::HandshakeV10;
    use authplugin::packet::capabilities::{CLIENT_MYSQL_MARIADB, CLIENT_PROTOCOL_41};

    fn greeting(capabilities: u32, extended: u32) -> Vec<u8> {
        let mut g = HandshakeV10::new(
            b"10.11.6-MariaDB".to_vec(),
            7,
            &Scramble::from_bytes(*b"abcdefghijklmnopqrst"),
            capabilities,
            45,
            2,
            "mysql_native_password",
        );
        g.reserved[6..].copy_from_slice(&extended.to_le_bytes());
        let mut framed = Vec::new();
        authplugin::packet::write_packet(&mut framed, 0, &g.to_bytes());
        framed
    }

    #[test]
    fn cached_metadata_is_not_offered_and_nothing_else_changes() {
        let mariadb = greeting(CLIENT_PROTOCOL_41, 0x1d);
        let mut edited = mariadb.clone();
        without_cached_metadata(&mut edited);
        let (packet, _) = authplugin::packet::parse_packet(&edited, 1024)
            .unwrap()
            .unwrap();
        let g = HandshakeV10::decode(&packet.payload).unwrap();
        assert_eq!(g.mariadb_extended_capabilities(), Some(0x0d));
        let changed = edited.iter().zip(&mariadb).filter(|(a, b)| a != b).count();
        assert_eq!(changed, 1);

        // MySQL's greeting (bit 0 set: no extended capabilities) and cut-off greetings stay.
        let mysql = greeting(CLIENT_PROTOCOL_41 | CLIENT_MYSQL_MARIADB, 0x1d);
        let mut same = mysql.clone();
        without_cached_metadata(&mut same);
        assert_eq!(same, mysql);
        for cut in 0..mariadb.len() {
            let mut part = mariadb[..cut].to_vec();
            without_cached_metadata(&mut part);
        }
    }
}
