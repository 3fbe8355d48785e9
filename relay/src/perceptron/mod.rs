//! The perceptron route (architecture.md §2, P0–P8): a connection to a paused instance is greeted by
//! the relay, classified, held while the instance wakes, and logged in to the compute on the
//! client's behalf. One function per phase, each generic over its streams:
//!
//! | phase | function |
//! |---|---|
//! | P1, P2, classification | [`login::greet_and_read_login`] |
//! | health checks | [`answer_health_check`] (no wake) |
//! | budgets | [`crate::budgets::Budgets::admit_login`] (refused: no wake) |
//! | P3 | [`wake`] (single-flight, in [`crate::control`]) |
//! | P4 | [`compute_leg::connect`], through a [`ComputeConnector`] |
//! | P5 | [`compute_leg::read_greeting`], then the profile is learnt once |
//! | P6, P7 (dual) | [`dual_auth::log_in`] |
//! | P8 (dual) | [`forward_verdict`] |
//! | P6–P8 (switch) | [`switch_auth::relay_login`] |
//!
//! [`establish`] runs them in order and writes the one ERR a failure calls for; [`handle`] is
//! the connection task around it (metrics, the one log line, then the byte pump).

mod compute_leg;
mod dual_auth;
pub mod login;
pub mod outcome;
mod reattach;
mod switch_auth;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use authplugin::Scramble;
use authplugin::packet::capabilities::{
    CLIENT_DEPRECATE_EOF, CLIENT_SSL, SERVER_STATUS_AUTOCOMMIT,
};
use authplugin::packet::err::codes;
use authplugin::packet::{ErrPacket, OkPacket};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::compute_conn::{ComputeConnector, ComputeTarget, OnBehalfOf, TcpConnector};
use crate::config::AuthMode;
use crate::control::{ConnectionGuard, Phase, Route, WakeReport};
use crate::kernel_splice::Spliced;
use crate::limits::PendingPermit;
use crate::logsafe::Escaped;
use crate::metrics::Counter;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::profile::ComputeProfile;
use crate::registry::Session;
use crate::runtime::InstanceRuntime;
use crate::tcp_splice::{TcpSplice, TcpSpliced};
use crate::tls::{ClientStream, ComputeStream};
use dual_auth::Verdict;
use outcome::{Classification, PerceptronError};

/// A login the compute has answered (P8 done): the client has its OK or ERR.
#[derive(Debug)]
pub struct Established<S> {
    /// The user the client logged in as.
    pub user: Vec<u8>,
    /// The compute connection, ready for the byte pump if the login succeeded.
    pub compute: PacketStream<S>,
    /// The compute's OK or ERR.
    pub verdict: Verdict,
    /// The capabilities the compute's session was opened with (what its responses' format
    /// depends on).
    pub capabilities: SessionCapabilities,
    /// Holds the instance running while the connection lives.
    pub held: ConnectionGuard,
    /// How long the phases took.
    pub timings: Timings,
    /// What reattaching the session after a stop needs, when the compute issued a ticket.
    /// Boxed: a held session's task keeps it for the session's life, and most have none.
    pub resumption: Option<Box<reattach::Resumption>>,
}

/// What a relayed session was opened with, on both legs: its packets' format depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCapabilities {
    /// The capability flags.
    pub flags: u32,
    /// MariaDB's extended capabilities (0 for MySQL; [`crate::profile::RELAYED_MARIADB_CAPABILITIES`]).
    pub mariadb: u32,
}

/// How long a relayed login's phases took, for the connection's log line.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// P1–P2.
    pub login_ms: u128,
    /// P3.
    pub wake_ms: u128,
    /// P4–P8.
    pub compute_login_ms: u128,
    /// Whether the instance was already running at P3.
    pub was_running: bool,
}

/// How long a login waits for its connect to a frozen compute made during the thaw; past
/// it, it connects again once the compute runs.
const EARLY_CONNECT: std::time::Duration = std::time::Duration::from_millis(10);

/// Handles one client connection on the perceptron route, from greeting to the end of the
/// byte pump. Logs exactly one line when it ends and counts the outcome. `pending` holds the
/// connection's pre-login slot until its login has been admitted by the budgets.
///
/// Not an `async fn`, nor is [`serve`]: an `async fn` keeps its arguments in its state for
/// its whole life, and a held session's task should keep only what forwarding needs.
pub fn handle(
    rt: Arc<InstanceRuntime>,
    client: TcpStream,
    client_addr: SocketAddr,
    pending: PendingPermit,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let _ = client.set_nodelay(true);
    let local = client
        .local_addr()
        .unwrap_or(crate::compute_conn::UNKNOWN_LOCAL);
    let client = PacketStream::new(ClientStream::Plain(client), MAX_LOGIN_PACKET_LEN)
        .with_write_timeout(rt.instance.config.handshake_timeout);
    serve(rt, client, client_addr, local, pending, None)
}

/// [`handle`] from the login on for a connection an endpoint greeted and routed here
/// (`greeted`: its scramble and login, the user name without its routing part), or from the
/// greeting on (`None`). `local` is the address the client connected to.
///
/// The login runs in a future of its own, freed once it is done; what the task keeps for a
/// held session's life (parked, or detached for hours) is the forwarding's state alone.
pub fn serve(
    rt: Arc<InstanceRuntime>,
    client: PacketStream<ClientStream<TcpStream>>,
    client_addr: SocketAddr,
    local: SocketAddr,
    pending: PendingPermit,
    greeted: Option<Greeted>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let login = Box::pin(log_in(rt, client, client_addr, local, pending, greeted));
    async move {
        if let Some(forwarding) = login.await {
            forwarding.await;
        }
    }
}

/// [`serve`]'s login: the accepted session's forwarding, or `None` once a refusal is
/// answered and logged.
async fn log_in(
    rt: Arc<InstanceRuntime>,
    mut client: PacketStream<ClientStream<TcpStream>>,
    client_addr: SocketAddr,
    local: SocketAddr,
    pending: PendingPermit,
    greeted: Option<Greeted>,
) -> Option<Session> {
    let cfg = &rt.instance.config;
    let name = cfg.name.clone();
    let addr = client_addr.to_string();
    let started = Instant::now();
    let connector = TcpConnector {
        target: ComputeTarget::of(cfg),
        on_behalf_of: OnBehalfOf::Client {
            client: client_addr,
            listen: local,
        },
        tls: rt.compute_tls.clone(),
        handover: rt.instance.handover(),
    };
    // Boxed: the login's state (buffers, the TLS handshake) is freed once it is done, and a
    // refusal's is not kept beside it.
    let established = Box::pin(establish(
        &rt,
        &mut client,
        client_addr,
        &connector,
        Some(pending),
        greeted,
    ))
    .await;
    Box::pin(refused_or_forward(
        rt,
        connector,
        client,
        established,
        name,
        addr,
        started,
    ))
    .await
}

/// The connection's login outcome: an accepted session's forwarding (to be awaited), or the
/// refusal's lines and metrics (and, for a compute that failed the login, the check of that
/// compute), then `None`.
async fn refused_or_forward(
    rt: Arc<InstanceRuntime>,
    connector: TcpConnector,
    client: PacketStream<ClientStream<TcpStream>>,
    established: Result<Established<ComputeStream<TcpStream>>, PerceptronError>,
    name: String,
    addr: String,
    started: Instant,
) -> Option<Session> {
    let name = name.as_str();
    match established {
        Ok(session) if session.verdict.accepted() => {
            return Some(Box::pin(forward(
                rt, connector, client, session, addr, started,
            )));
        }
        Ok(session) => {
            rt.metrics.inc(Counter::Connections, name, "denied");
            tracing::info!(
                instance = %name, client = %addr, user = %Escaped(&session.user),
                total_ms = started.elapsed().as_millis(), "compute denied the login"
            );
        }
        Err(e) => {
            let label = e.label();
            rt.metrics.inc(Counter::Connections, name, label);
            match &e {
                PerceptronError::NotALogin(c) => {
                    rt.metrics.inc(Counter::Classifications, name, c.label());
                }
                PerceptronError::HealthCheck => rt.metrics.health_check(name),
                PerceptronError::Budget { .. } => rt.metrics.budget_refused(name, label),
                _ => {}
            }
            match e {
                PerceptronError::NotALogin(_) | PerceptronError::ClientGone => {
                    tracing::info!(instance = %name, client = %addr, outcome = label, "connection closed without a relayed login");
                }
                PerceptronError::HealthCheck => {
                    tracing::debug!(instance = %name, client = %addr, "health check answered without a wake");
                }
                PerceptronError::Budget { ref user, .. } => {
                    tracing::warn!(instance = %name, client = %addr, user = %Escaped(user), outcome = label, error = %e, "login refused");
                }
                _ => {
                    tracing::warn!(instance = %name, client = %addr, outcome = label, retryable = e.retryable(), error = %e, "relayed login failed");
                }
            }
            // A compute that the wake found ready but that then would not connect, greet or
            // answer may be hung (it accepts and says nothing): left running, it would hold
            // every later client, which takes the direct route to it, until the idle pause.
            // A fresh probe, as patient as the login was, decides; one that fails stops it
            // and marks the instance failed, so the next login wakes a new one.
            if let PerceptronError::Compute(c) = &e {
                if c.unproven() {
                    // Whatever greets on the compute address offered a session (or a proof)
                    // that does not prove the key: it is trusted with nothing more.
                    drop(client);
                    // Boxed, as below: rare, and large for a connection's whole task.
                    Box::pin(rt.instance.report_unproven(label)).await;
                } else if c.may_be_unresponsive() {
                    // The client has its ERR; it need not wait for the probe.
                    drop(client);
                    Box::pin(rt.instance.report_unresponsive(label)).await;
                }
            }
        }
    }
    None
}

/// Forwards an accepted session until it ends: the byte pump, and for a resumable session
/// each detach and reattach. Logs the session's lines.
///
/// Not an `async fn`: its arguments are captured once, where an `async fn` would keep them
/// twice (as arguments and as locals) for the session's whole life, and what only the first
/// log line needs is used before the task's state is made.
fn forward(
    rt: Arc<InstanceRuntime>,
    connector: TcpConnector,
    mut client: PacketStream<ClientStream<TcpStream>>,
    session: Established<ComputeStream<TcpStream>>,
    addr: String,
    started: Instant,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // What only the first line needs is used here, before the task's state is made: the
    // task keeps what it captures for the session's whole life.
    let Established {
        user,
        compute,
        verdict,
        capabilities,
        mut held,
        timings: t,
        resumption,
    } = session;
    let name = &rt.instance.config.name;
    held.mark_session();
    held.set_client(addr.clone());
    rt.metrics.inc(Counter::Connections, name, "relayed");
    let tls = matches!(client.stream_mut(), ClientStream::Tls(_));
    tracing::info!(
        instance = %name, client = %addr, user = %Escaped(&user), tls,
        login_ms = t.login_ms, wake_ms = t.wake_ms,
        compute_login_ms = t.compute_login_ms, was_running = t.was_running,
        total_ms = started.elapsed().as_millis(),
        "relayed login accepted; forwarding"
    );
    drop(user);
    // The session's commands are followed from here (parking): its status flags are the
    // compute's OK's.
    let status_flags = OkPacket::decode(&verdict.reply.payload, capabilities.flags)
        .map_or(0, |ok| ok.status_flags);
    drop(verdict);
    async move {
        let (rt, connector, addr) = (&*rt, &connector, addr.as_str());
        let name = &rt.instance.config.name;
        let (mut client_stream, mut client_rest) = client.into_parts();
        // None while detached: the stopped compute's socket is closed then, not kept (with
        // its descriptor) until the session's next command.
        let mut compute_leg = Some(compute.into_parts());
        let mut commands =
            held.watch_commands(capabilities.flags, capabilities.mariadb, status_flags);
        let mut resumption = resumption;
        let deprecate_eof = capabilities.flags & CLIENT_DEPRECATE_EOF != 0;
        if resumption.is_some() {
            commands.ticketed();
        } else if rt.kernel_splice.is_some()
            && may_splice(&rt.instance.config)
            && client_stream.tcp().is_some()
            && compute_leg.as_ref().is_some_and(|(c, _)| c.tcp().is_some())
        {
            commands.splice_after(SPLICE_AFTER_COMMANDS);
        }
        let mut pumped = crate::passthrough::PumpReport::default();
        let to_kernel = loop {
            let Some((compute_stream, compute_rest)) = compute_leg.as_mut() else {
                break None;
            };
            // Boxed: a detached session waits for hours outside the pump, and should not
            // keep the pump's state in its task meanwhile.
            // Only the total is kept past this block: a detached session's task holds what
            // lives across its waits for hours.
            let ended_by = {
                let bytes = Box::pin(crate::passthrough::pump(
                    &mut client_stream,
                    std::mem::take(&mut client_rest),
                    &mut *compute_stream,
                    std::mem::take(compute_rest),
                    rt.instance.thaw_on_upload(),
                    Some(&mut commands),
                ))
                .await;
                rt.count_pumped(&bytes);
                pumped = pumped.then(&bytes);
                bytes.ended_by
            };
            if let Some((chunk, status_flags)) = commands.take_chunk() {
                // The pump stopped at the end of a response for the kernel splice.
                let mut chunk: &[u8] = &chunk;
                // Below TCP on loopback; through the sockets otherwise, or where the splice
                // below TCP will not take this session (not when it only must wait).
                let full = chunk.len() as u64;
                let mut through_sockets = true;
                if let Some(below) = below_tcp(rt, &client_stream, compute_stream) {
                    match splice_below_tcp(rt, &below, &client_stream, compute_stream, chunk) {
                        Ok(spliced) => {
                            break Some(ToKernel::BelowTcp(below, spliced, status_flags));
                        }
                        Err((written, retry)) => {
                            chunk = chunk.get(written..).unwrap_or_default();
                            if retry {
                                commands.splice_after(0);
                            }
                            through_sockets = !retry && written == 0;
                        }
                    }
                }
                if through_sockets {
                    match splice_at_rest(rt, &client_stream, compute_stream) {
                        Ok(spliced) => {
                            break Some(ToKernel::Sockets(spliced, chunk.into(), status_flags));
                        }
                        // The client sent ahead: the end of a later response, then.
                        Err(Retry::Later) => commands.splice_after(0),
                        Err(Retry::Never) => {}
                    }
                }
                // Not now: the chunk goes on, and so does the pump.
                if client_stream.write_all(chunk).await.is_err() {
                    pumped.ended_by = "client_error";
                    break None;
                }
                pumped.compute_to_client += full;
                continue;
            }
            let Some(resumption) = resumption.as_mut().filter(|_| ended_by == "detached") else {
                break None;
            };
            // The compute was stopped under this session: it waits for its next command
            // (pings answered here), then is reattached to a new compute.
            compute_leg = None;
            commands.set_detached(true);
            let Some(first) = next_command(&mut client_stream, &mut commands).await else {
                break None;
            };
            let t = Instant::now();
            let statements = commands.statements();
            let state = reattach::SessionState {
                commands: commands.replay(),
                statements: &statements,
                deprecate_eof,
            };
            let resumed = Box::pin(resume_session(rt, connector, resumption, &state)).await;
            let (replayed, prepared) = (state.commands.len(), statements.len());
            drop(statements);
            match resumed {
                Ok((reattached, wake_ms)) => {
                    commands.set_detached(false);
                    commands.reattached(&reattached.statement_ids);
                    rt.metrics.inc(Counter::Connections, name, "reattached");
                    tracing::info!(
                        instance = %name, client = %addr, replayed, prepared,
                        wake_ms, total_ms = t.elapsed().as_millis(), "session reattached"
                    );
                    client_rest = first;
                    compute_leg = Some(reattached.stream.into_parts());
                }
                Err(e) => {
                    tracing::warn!(instance = %name, client = %addr, error = %e, "session could not be reattached; closing it");
                    // The reply to the command (sequence id 1).
                    let (code, state) = authplugin::packet::err::codes::ER_CONNECTION_KILLED;
                    let err = ErrPacket::new(
                        code,
                        state,
                        "Connection was killed: the session could not be resumed",
                    );
                    let mut packet = Vec::new();
                    authplugin::packet::write_packet(&mut packet, 1, &err.to_bytes());
                    let _ = client_stream.write_all(&packet).await;
                    break None;
                }
            }
        };
        drop(commands);
        let Some(to_kernel) = to_kernel else {
            drop(held);
            tracing::info!(
                instance = %name, client = %addr, up = pumped.client_to_compute,
                down = pumped.compute_to_client, ended_by = pumped.ended_by, spliced = false,
                duration_ms = started.elapsed().as_millis(), "session closed"
            );
            return;
        };
        let (ClientStream::Plain(client), Some((ComputeStream::Plain(compute), _))) =
            (&mut client_stream, compute_leg.as_mut())
        else {
            // splice_at_rest takes plain sockets only.
            return;
        };
        tracing::debug!(instance = %name, client = %addr, "session spliced in the kernel");
        // Boxed, so a pumped or detached session's task does not carry its state.
        let below_tcp = matches!(to_kernel, ToKernel::BelowTcp(..));
        let (carried, taken_back) = match to_kernel {
            ToKernel::Sockets(spliced, chunk, status_flags) => {
                Box::pin(carry_spliced(
                    rt,
                    (client, compute),
                    spliced,
                    chunk,
                    status_flags,
                    &mut held,
                    capabilities,
                ))
                .await
            }
            ToKernel::BelowTcp(below, spliced, status_flags) => {
                Box::pin(carry_below_tcp(
                    rt,
                    (client, compute),
                    (&below, spliced),
                    status_flags,
                    &mut held,
                    capabilities,
                ))
                .await
            }
        };
        rt.count_pumped(&carried);
        drop(held);
        let bytes = pumped.then(&carried);
        tracing::info!(
            instance = %name, client = %addr, up = bytes.client_to_compute,
            down = bytes.compute_to_client, ended_by = bytes.ended_by, spliced = true,
            below_tcp, taken_back, duration_ms = started.elapsed().as_millis(), "session closed"
        );
    }
}

/// How often a spliced session looks whether it can be taken back for parking: a few times
/// per `park_after`, as the instance looks whether it may park; `None` where it does not park.
fn take_back_pace(config: &crate::config::InstanceConfig) -> Option<Duration> {
    config
        .park
        .then(|| (config.park_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)))
}

/// How a held session went to the kernel: through its sockets (with the chunk that ends the
/// response, still to write) or below TCP (the chunk written).
enum ToKernel {
    Sockets(Spliced, Box<[u8]>, u16),
    BelowTcp(Arc<TcpSplice>, TcpSpliced, u16),
}

/// A session spliced below TCP until it ends ([`crate::tcp_splice::carry`]). On an instance
/// that parks, it is taken back onto new sockets whenever it is quiet between commands,
/// followed on the pump as any session (idle, parked, pings answered), and spliced again at
/// the end of the response to its next command that counts as use. Returns the bytes
/// carried and how many times it was taken back.
async fn carry_below_tcp(
    rt: &InstanceRuntime,
    (client, compute): (&mut TcpStream, &mut TcpStream),
    (below, spliced): (&Arc<TcpSplice>, TcpSpliced),
    status_flags: u16,
    held: &mut ConnectionGuard,
    capabilities: SessionCapabilities,
) -> (crate::passthrough::PumpReport, u32) {
    use tokio::io::AsyncWriteExt as _;
    let config = &rt.instance.config;
    let compute_idle = || rt.instance.compute_idle();
    let counted = rt.instance.spliced_session();
    let (mut spliced, mut status_flags) = (spliced, status_flags);
    let mut total = crate::passthrough::PumpReport::default();
    let mut taken_back = 0;
    'session: loop {
        let take_back = crate::kernel_splice::TakeBack {
            quiet: take_back_pace(config),
            compute_idle: &compute_idle,
            look_now: counted.look_now(),
            status_flags,
        };
        let carried =
            crate::tcp_splice::carry(&mut *client, &mut *compute, &spliced, Some(&take_back)).await;
        let (quiet_for, flags) = match carried {
            crate::kernel_splice::Carried::Ended(report) => {
                total = total.then(&report);
                break 'session;
            }
            crate::kernel_splice::Carried::TakenBack {
                quiet_for,
                status_flags,
            } => (quiet_for, status_flags),
        };
        total = total.then(&spliced.report("kernel"));
        drop(spliced);
        taken_back += 1;
        held.used_ago(quiet_for);
        tracing::debug!(instance = %config.name, quiet_ms = quiet_for.as_millis(), status_flags = ?flags, "session taken back from the splice below TCP between commands");
        let mut commands =
            held.watch_commands(capabilities.flags, capabilities.mariadb, flags.unwrap_or(0));
        commands.taken_back_below_tcp(flags.is_some());
        counted.set_in_kernel(false);
        spliced = loop {
            let pumped = crate::passthrough::pump(
                &mut *client,
                Vec::new(),
                &mut *compute,
                Vec::new(),
                rt.instance.thaw_on_upload(),
                Some(&mut commands),
            )
            .await;
            total = total.then(&pumped);
            let Some((chunk, flags)) = commands.take_chunk() else {
                break 'session;
            };
            match below.splice(client, compute, &chunk) {
                Ok(spliced) => {
                    status_flags = flags;
                    break spliced;
                }
                Err(unspliced) => {
                    let rest = chunk.get(unspliced.written..).unwrap_or_default();
                    if client.write_all(rest).await.is_err() {
                        total.ended_by = "client_error";
                        break 'session;
                    }
                    total.compute_to_client += chunk.len() as u64;
                    if unspliced.error.kind() == std::io::ErrorKind::WouldBlock {
                        commands.splice_after(0);
                    }
                }
            }
        };
        counted.set_in_kernel(true);
    }
    (total, taken_back)
}

/// A spliced session until both sides have closed ([`crate::kernel_splice::carry`]), from
/// the moment the relay holds the `chunk` that ends a response (the session's status
/// `status_flags` after it), which it writes first. On an instance that parks, the session
/// is taken back into userspace whenever it is quiet between commands, followed there as a
/// pumped session is (it counts as idle, may be parked, pings answered), and handed to the
/// kernel again at its next command that counts as use (docs/kernel-splice.md). Returns the
/// bytes carried and how many times it was taken back.
async fn carry_spliced(
    rt: &InstanceRuntime,
    (client, compute): (&mut TcpStream, &mut TcpStream),
    spliced: Spliced,
    chunk: Box<[u8]>,
    status_flags: u16,
    held: &mut ConnectionGuard,
    capabilities: SessionCapabilities,
) -> (crate::passthrough::PumpReport, u32) {
    let config = &rt.instance.config;
    let mut relayed = crate::kernel_splice::Relayed::default();
    if client.write_all(&chunk).await.is_err() {
        return (spliced.report(&relayed, "client_error"), 0);
    }
    relayed.written[0] = chunk.len() as u64;
    drop(chunk);
    let compute_idle = || rt.instance.compute_idle();
    let counted = rt.instance.spliced_session();
    // Taken back when quiet on an instance that parks, and before any freeze.
    let take_back = crate::kernel_splice::TakeBack {
        quiet: take_back_pace(config),
        compute_idle: &compute_idle,
        look_now: counted.look_now(),
        status_flags,
    };
    let mut taken_back = 0;
    let report = loop {
        let carried = crate::kernel_splice::carry(
            &mut *client,
            &mut *compute,
            &spliced,
            &mut relayed,
            Some(&take_back),
        )
        .await;
        let (quiet_for, status_flags) = match carried {
            crate::kernel_splice::Carried::Ended(report) => break report,
            crate::kernel_splice::Carried::TakenBack {
                quiet_for,
                status_flags,
            } => (quiet_for, status_flags),
        };
        taken_back += 1;
        held.used_ago(quiet_for);
        tracing::debug!(instance = %config.name, quiet_ms = quiet_for.as_millis(), ?status_flags, "spliced session taken back between commands");
        let mut commands = held.watch_commands(
            capabilities.flags,
            capabilities.mariadb,
            status_flags.unwrap_or(0),
        );
        commands.taken_back_from_kernel(status_flags.is_some());
        // Counted idle before it stops counting as spliced: a pause waiting for that sees
        // it between commands.
        counted.set_in_kernel(false);
        let pumped = crate::passthrough::pump(
            &mut *client,
            Vec::new(),
            &mut *compute,
            Vec::new(),
            rt.instance.thaw_on_upload(),
            Some(&mut commands),
        )
        .await;
        drop(commands);
        relayed.add(&pumped);
        if pumped.ended_by != "kernel" {
            break spliced.report(&relayed, pumped.ended_by);
        }
        counted.set_in_kernel(true);
        if let Err(e) = spliced.set(&relayed, true) {
            // The verdict keeps passing this session's bytes; the relay carries them.
            tracing::warn!(instance = %config.name, error = %e, "cannot splice a session again; the relay carries it");
        }
    };
    (report, taken_back)
}

/// While a session is detached: reads the client's bytes, answering pings and learnt
/// keepalive queries itself, until a command for the compute arrives (returned) or the
/// client quits or hangs up (`None`).
async fn next_command(
    client: &mut ClientStream<TcpStream>,
    commands: &mut crate::control::CommandWatch<'_>,
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

/// Runs P1–P8 for one client. On failure the client has been sent the one ERR packet the
/// failure calls for (if the protocol allows one), and the error is returned for the log line
/// and metrics. `pending` (the connection's pre-login slot) is released once the login has
/// been admitted by the budgets, or when the connection ends before that. `greeted` is
/// P1–P2 when an endpoint did them (the login's user name without its routing part).
///
/// # Errors
/// [`PerceptronError`]: how the connection ended instead.
pub async fn establish<S, C>(
    rt: &InstanceRuntime,
    client: &mut PacketStream<ClientStream<S>>,
    client_addr: SocketAddr,
    connector: &C,
    pending: Option<PendingPermit>,
    greeted: Option<Greeted>,
) -> Result<Established<C::Stream>, PerceptronError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: ComputeConnector,
{
    let greeted = match greeted {
        Some(g) => Ok(g),
        None => {
            let cfg = &rt.instance.config;
            // TLS is offered exactly when this instance has a certificate to serve.
            let tls = rt.tls.as_ref().map(|t| Arc::clone(&t.current().config));
            let answers = match cfg.auth {
                AuthMode::Dual => login::Answers::CheckableAgainstA,
                AuthMode::Switch => login::Answers::Discarded,
            };
            let id = rt.next_connection_id();
            greet(
                client,
                &rt.profile(),
                id,
                tls,
                cfg.handshake_timeout,
                answers,
            )
            .await
        }
    };
    let result = match greeted {
        Ok(greeted) => run(rt, client, client_addr, connector, pending, greeted).await,
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        if let Some(err) = e.client_error(&rt.instance.config.name, &client_addr.to_string()) {
            // Best effort: the client may already be gone.
            let seq = client.next_sequence_id();
            let _ = client.write_packet(seq, &err.to_bytes()).await;
        }
    }
    result
}

/// P1 and P2: the greeting the client got, and its login.
#[derive(Debug)]
pub struct Greeted {
    /// The scramble the greeting carried, which the client answered.
    pub scramble_a: Scramble,
    /// The client's login.
    pub login: login::ClientLogin,
    /// How long the client took (greeting to login).
    pub login_ms: u128,
}

/// P1, P2: greets the client with `profile`'s greeting (connection `id`, a fresh timed
/// scramble A, TLS offered with `tls`) and reads its login within `timeout`.
///
/// # Errors
/// [`PerceptronError::NotALogin`] with what the peer did instead.
pub async fn greet<S>(
    client: &mut PacketStream<ClientStream<S>>,
    profile: &ComputeProfile,
    id: u32,
    tls: Option<Arc<rustls::ServerConfig>>,
    timeout: std::time::Duration,
    answers: login::Answers,
) -> Result<Greeted, PerceptronError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Timed (payload v2): the compute refuses the pair once it is older than a login can be held.
    let scramble_a = Scramble::generate_timed(&mut rand::rngs::OsRng, crate::clock::now_ms());
    let mut greeting = profile.greeting(id, &scramble_a);
    if tls.is_some() {
        greeting.capability_flags |= CLIENT_SSL;
    }
    let t0 = Instant::now();
    let login = login::greet_and_read_login(client, &greeting, &scramble_a, timeout, answers, tls)
        .await
        .map_err(PerceptronError::NotALogin)?;
    Ok(Greeted {
        scramble_a,
        login,
        login_ms: t0.elapsed().as_millis(),
    })
}

async fn run<S, C>(
    rt: &InstanceRuntime,
    client: &mut PacketStream<ClientStream<S>>,
    client_addr: SocketAddr,
    connector: &C,
    pending: Option<PendingPermit>,
    greeted: Greeted,
) -> Result<Established<C::Stream>, PerceptronError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: ComputeConnector,
{
    let cfg = &rt.instance.config;
    let Greeted {
        scramble_a,
        login,
        login_ms,
    } = greeted;
    let user = login.response.username.clone();
    let last_seq = login.last_sequence_id;
    if is_health_check(&cfg.health_check_users, &login) {
        answer_health_check(client, &login, cfg.handshake_timeout).await;
        return Err(PerceptronError::HealthCheck);
    }
    // MySQL's require_secure_transport, before anything costs money. (Health checks, answered
    // by the relay alone with no password, are exempt: load balancers check in plaintext.)
    if cfg.require_secure_transport && !login.tls {
        return Err(PerceptronError::NotALogin(
            Classification::InsecureTransport,
        ));
    }
    // Budgets before anything costs money: a blocked source or user, or one that has woken
    // the instance too often, is refused here, without a wake.
    let wakes = matches!(
        rt.instance.phase(),
        Phase::Paused | Phase::Failed | Phase::Pausing
    );
    // Charged at admission: pending against its source and user until the verdict below, so
    // logins held during a wake cannot outrun the failed-login budget. One that finds its
    // budget's remaining failures all in flight waits for their verdicts (a wake and a login).
    let wait_until = tokio::time::Instant::now() + cfg.resume_timeout + cfg.compute_timeout;
    let charge = rt
        .budgets
        .admit_login(client_addr.ip(), &cfg.name, &user, wakes, wait_until)
        .await
        .map_err(|refusal| PerceptronError::Budget {
            refusal,
            user: user.clone(),
        })?;
    // Admitted: no longer a pre-login connection. (A login waiting above still counts against
    // the pre-login caps, so waiting cannot be used to hold descriptors past them.)
    drop(pending);
    // Counted as an open connection of the instance from its login on, so scanners and
    // health checks never hold an instance awake.
    let held = rt.instance.hold(Route::Perceptron);

    // A frozen compute's kernel completes a connect while the compute is still frozen: the
    // login's connection is opened during the thaw, and the greeting is there once it runs.
    let (report, early) = if rt.instance.phase() == Phase::Frozen {
        let connect = compute_leg::connect_once(connector, EARLY_CONNECT, cfg.compute_timeout);
        let (report, early) = tokio::join!(wake(rt), connect);
        (report?, early)
    } else {
        (wake(rt).await?, None)
    };

    let t1 = Instant::now();
    let (stream, opened_by) = match early {
        Some(stream) => (stream, compute_leg::OpenedBy::Login),
        None => compute_leg::connect(connector, cfg.compute_timeout).await?,
    };
    rt.metrics
        .inc(Counter::ComputeConnections, &cfg.name, opened_by.label());
    let mut compute = compute_leg::read_greeting(stream, cfg.compute_timeout).await?;
    // In dual mode the profile is learnt only from a compute that proved it holds the key: a
    // squatter's greeting must not become what every later client is greeted with.
    let dual = cfg.auth == AuthMode::Dual;
    if !dual {
        rt.learn_profile(&compute.greeting);
    }
    if let Err(e) = compute_leg::check_capabilities(&login, &compute.greeting) {
        // A stale profile: relearnt from a compute that proves the key (in this greeting, or
        // earlier); from one that has not, only the capabilities it lacks are forgotten, so
        // the next client's login gets through to where the compute can prove it.
        if dual {
            if rt.instance.compute_trusted() || greeting_proves_key(rt, &compute) {
                rt.learn_profile(&compute.greeting);
            } else if let outcome::ComputeError::CapabilityMismatch { flags, mariadb } = &e {
                rt.forget_capabilities(*flags, *mariadb);
            }
        }
        return Err(e.into());
    }
    if connector.wants_tls() {
        compute = compute_leg::start_tls(connector, compute, &login, cfg.compute_timeout).await?;
    }

    let capabilities = SessionCapabilities {
        flags: compute_leg::client_flag(&login, &compute.greeting),
        mariadb: compute_leg::mariadb_capabilities(&login, &compute.greeting),
    };
    let mut resumption = None;
    let verdict = match cfg.auth {
        AuthMode::Dual => {
            let client_addr = client_addr.to_string();
            let template = cfg
                .resumable_sessions
                .then(|| reattach::Resumption::template(&login, &client_addr));
            // One ring for the whole login, even if the key file is reloaded meanwhile.
            let ring = rt.ring.current();
            let signer = dual_auth::Signer {
                ring: &ring,
                scramble_a: &scramble_a,
                client_addr: &client_addr,
                now_ms: crate::clock::now_ms(),
                greetings: &rt.greetings,
                wants_ticket: cfg.resumable_sessions,
            };
            let mut verdict =
                dual_auth::log_in(&mut compute, login, &signer, cfg.compute_timeout).await?;
            resumption = template
                .zip(verdict.ticket.take())
                .map(|(template, ticket)| Box::new(reattach::Resumption::new(template, ticket)));
            if let Some(proven_in) = verdict.proven_in {
                rt.learn_profile(&compute.greeting);
                rt.instance.mark_proven(proven_in.repeatable()).await;
            }
            if access_denied(&verdict.reply.payload) {
                // Counted before the client sees it, so its next attempt meets the budget.
                charge.refused(Instant::now());
                rt.instance.note_refused_login();
            } else if verdict.accepted() {
                charge.accepted();
            }
            forward_verdict(client, last_seq, &verdict).await?;
            verdict
        }
        AuthMode::Switch => {
            let timeouts = switch_auth::Timeouts {
                compute: cfg.compute_timeout,
                client: cfg.handshake_timeout,
            };
            let verdict = switch_auth::relay_login(client, &mut compute, &login, timeouts).await?;
            // The compute's verdict, learnt on the way through: what a password guesser
            // spends.
            if access_denied(&verdict.reply.payload) {
                charge.refused(Instant::now());
                rt.instance.note_refused_login();
            } else if verdict.accepted() {
                charge.accepted();
            }
            verdict
        }
    };
    Ok(Established {
        user,
        compute: compute.stream,
        verdict,
        capabilities,
        held,
        resumption,
        timings: Timings {
            login_ms,
            wake_ms: report.waited.as_millis(),
            compute_login_ms: t1.elapsed().as_millis(),
            was_running: report.was_running,
        },
    })
}

/// Whether the compute's greeting proves it holds the key (server-shim's form; MariaDB proves
/// it only in a challenge round). The greeting is recorded as proven: its connection is not
/// used for a login.
fn greeting_proves_key<S>(rt: &InstanceRuntime, compute: &compute_leg::GreetedCompute<S>) -> bool {
    let ring = rt.ring.current();
    let mut greetings = rt
        .greetings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    authplugin::compute_proof::verify_greeting(
        &compute.greeting.server_version,
        &compute.scramble_b,
        &ring,
        crate::clock::now_ms(),
        &mut greetings,
    )
    .is_ok()
}

/// Whether a reply is the compute's ERR 1045 (`ER_ACCESS_DENIED_ERROR`): a wrong password or
/// an unknown user. Other refusals (an unknown database, a locked account) are not guesses.
fn access_denied(reply: &[u8]) -> bool {
    reply.first() == Some(&0xFF)
        && ErrPacket::decode(reply).is_ok_and(|e| e.error_code == codes::ER_ACCESS_DENIED_ERROR.0)
}

/// Whether a login is a load balancer's health check: a configured health-check user with an
/// empty password (HAProxy's `option mysql-check user <name>` sends exactly that, then
/// COM_QUIT).
fn is_health_check(users: &[String], login: &login::ClientLogin) -> bool {
    login.answer.is_empty()
        && login.response.auth_response.is_empty()
        && users
            .iter()
            .any(|u| u.as_bytes() == login.response.username.as_slice())
}

/// Answers a health check as a server would answer a passwordless login (OK), then reads
/// what the checker sends next (HAProxy pipelines a COM_QUIT) within `timeout`, so the close
/// is clean (unread bytes would make the kernel send a reset) and the connection ends
/// without any command having run. Nothing of the compute is involved.
pub async fn answer_health_check<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketStream<S>,
    login: &login::ClientLogin,
    timeout: std::time::Duration,
) {
    let ok = OkPacket {
        status_flags: SERVER_STATUS_AUTOCOMMIT,
        ..OkPacket::default()
    };
    let mut payload = Vec::with_capacity(16);
    ok.encode(&mut payload, login.effective_flag);
    if client
        .write_packet(login.last_sequence_id.wrapping_add(1), &payload)
        .await
        .is_err()
    {
        return;
    }
    // COM_QUIT, anything else, or a close: the connection ends either way.
    let _ = client.read_packet_within(timeout).await;
}

/// P3: wakes the instance (or joins the wake in flight), unless the relay shuts down first.
///
/// # Errors
/// [`PerceptronError::Wake`] or [`PerceptronError::ShuttingDown`].
pub async fn wake(rt: &InstanceRuntime) -> Result<WakeReport, PerceptronError> {
    tokio::select! {
        // A relay that is shutting down wakes nothing, even when the wake would be instant.
        biased;
        () = rt.shutdown.cancelled() => Err(PerceptronError::ShuttingDown),
        r = rt.instance.ensure_running() => r.map_err(PerceptronError::Wake),
    }
}

/// Whether `cfg`'s held connections may be spliced in the kernel: not with resumable
/// sessions, which need every command that sets session state seen (parking takes a spliced
/// session back between commands; docs/kernel-splice.md).
#[must_use]
pub fn may_splice(cfg: &crate::config::InstanceConfig) -> bool {
    cfg.kernel_splice && !cfg.resumable_sessions
}

/// How many commands a held session sends on the pump before it goes to the kernel splice,
/// at the end of a response. Splicing costs a session about 50 µs of the relay's time, to
/// set up and to take down (map updates, `sock_diag` lookups, the kernel's socket state),
/// and forwarding one command on the pump 15–25 µs (BENCHMARKS.md §17): a session that ends
/// after a login and a few statements, as a storm of short connections does, is cheaper
/// on the pump, and one that goes on is spliced before it has cost much there.
const SPLICE_AFTER_COMMANDS: u8 = 8;

/// Whether a session that could not be spliced is tried again.
enum Retry {
    /// At the end of a later response: the client had sent its next bytes already.
    Later,
    /// No: the kernel refused (logged), or the session cannot be spliced.
    Never,
}

/// The splice below TCP, when this relay has it and the session is on loopback.
fn below_tcp(
    rt: &InstanceRuntime,
    client: &ClientStream<TcpStream>,
    compute: &ComputeStream<TcpStream>,
) -> Option<Arc<TcpSplice>> {
    let below = rt.tcp_splice.as_ref()?;
    TcpSplice::applies(client.tcp()?, compute.tcp()?).then(|| Arc::clone(below))
}

/// Splices a held session below TCP at the end of a response, writing `chunk` (the
/// response's end) once the rewriting is on. Otherwise: how much of the chunk was written,
/// and whether to try again at a later response.
fn splice_below_tcp(
    rt: &InstanceRuntime,
    below: &Arc<TcpSplice>,
    client: &ClientStream<TcpStream>,
    compute: &ComputeStream<TcpStream>,
    chunk: &[u8],
) -> Result<TcpSpliced, (usize, bool)> {
    let (Some(client), Some(compute)) = (client.tcp(), compute.tcp()) else {
        return Err((0, false));
    };
    below.splice(client, compute, chunk).map_err(|unspliced| {
        let later = unspliced.error.kind() == std::io::ErrorKind::WouldBlock;
        if later {
            tracing::debug!(instance = %rt.instance.config.name, error = %unspliced.error, "not spliced below TCP at this response; tried again at a later one");
        } else {
            tracing::info!(instance = %rt.instance.config.name, error = %unspliced.error, "a held connection is not spliced below TCP; through its sockets instead");
        }
        (unspliced.written, later)
    })
}

/// Puts a held session's two sockets into the kernel splice, at the end of a response the
/// pump took for it (`CommandWatch::splice_after`); otherwise the session stays on the pump.
fn splice_at_rest(
    rt: &InstanceRuntime,
    client: &ClientStream<TcpStream>,
    compute: &ComputeStream<TcpStream>,
) -> Result<Spliced, Retry> {
    let (Some(splice), Some(client), Some(compute)) =
        (rt.kernel_splice.as_ref(), client.tcp(), compute.tcp())
    else {
        return Err(Retry::Never);
    };
    splice.splice(client, compute).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            tracing::debug!(instance = %rt.instance.config.name, error = %e, "not spliced at this response; tried again at a later one");
            Retry::Later
        } else {
            tracing::warn!(instance = %rt.instance.config.name, error = %e, "the kernel would not splice a held connection; it stays on the pump");
            Retry::Never
        }
    })
}

/// P8 (dual mode): the compute's OK or ERR, renumbered for the client's side of the
/// conversation.
///
/// # Errors
/// [`PerceptronError::ClientGone`].
pub async fn forward_verdict<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketStream<S>,
    last_client_seq: u8,
    verdict: &Verdict,
) -> Result<(), PerceptronError> {
    client
        .write_packet(last_client_seq.wrapping_add(1), &verdict.reply.payload)
        .await
        .map_err(|_| PerceptronError::ClientGone)
}

/// The switch-mode exchange (P6–P8, [`switch_auth::relay_login`]) on its own, for the
/// `switch_auth` fuzz target: a fixed client login (user `app`, a native answer, its login
/// inside the relay's TLS), a compute greeted with `greeting_scramble` whose leg is TLS or
/// not, and the two streams the exchange reads and writes. Returns the verdict's first byte
/// when the exchange ended with the compute's OK or ERR.
#[cfg(feature = "fuzzing")]
pub(crate) async fn fuzz_switch_exchange<C, S>(
    client: C,
    compute: S,
    compute_tls: bool,
    timeout: std::time::Duration,
) -> Option<u8>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    use authplugin::AuthPlugin;
    use authplugin::packet::capabilities::{
        CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    };
    use authplugin::packet::{HandshakeResponse41, HandshakeV10};
    use zeroize::Zeroizing;

    let flags = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    let scramble_b = Scramble::from_bytes([0x42; 20]);
    let answer = Zeroizing::new(vec![0x5a; 20]);
    let login = login::ClientLogin {
        response: HandshakeResponse41 {
            client_flag: flags,
            max_packet_size: 1 << 24,
            character_set: 45,
            reserved: [0; 23],
            username: b"app".to_vec(),
            auth_response: answer.clone(),
            database: None,
            client_plugin_name: Some(b"mysql_native_password".to_vec()),
            connect_attrs: None,
            zstd_compression_level: None,
        },
        plugin: AuthPlugin::MysqlNativePassword,
        answer,
        last_sequence_id: 1,
        effective_flag: flags,
        tls: true,
        connection_id: 7,
    };
    let mut greeted = compute_leg::GreetedCompute {
        stream: PacketStream::new(compute, MAX_LOGIN_PACKET_LEN),
        greeting: HandshakeV10::new(
            b"8.0.40".to_vec(),
            7,
            &scramble_b,
            flags,
            45,
            SERVER_STATUS_AUTOCOMMIT,
            "caching_sha2_password",
        ),
        scramble_b,
        tls: compute_tls,
    };
    let mut client = PacketStream::new(client, MAX_LOGIN_PACKET_LEN);
    let timeouts = switch_auth::Timeouts {
        compute: timeout,
        client: timeout,
    };
    let verdict = switch_auth::relay_login(&mut client, &mut greeted, &login, timeouts).await;
    verdict.ok().and_then(|v| v.reply.payload.first().copied())
}

#[cfg(test)]
mod tests;
