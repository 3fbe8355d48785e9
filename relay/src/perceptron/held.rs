//! A held session: one that woke the instance (or was resumed after a stop) and stays on the relay,
//! forwarded until it ends (docs/kernel-splice.md; docs/parking.md, *Sessions across a stop*). Its
//! bytes go through the userspace pump at first; after a few commands, at the end of a response,
//! the session moves to a kernel splice (below TCP where it can follow the session, else the
//! sockhash) and comes back to the pump when parking needs to see its commands. A resumable
//! session is detached at a stop and reattached to the next compute (`detached.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use authplugin::packet::OkPacket;
use authplugin::packet::capabilities::CLIENT_DEPRECATE_EOF;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use super::detached::{Resumable, reattach_by_force, resume_detached};
use super::{Established, SessionCapabilities};
use crate::compute_conn::TcpConnector;
use crate::control::ConnectionGuard;
use crate::logsafe::Escaped;
use crate::metrics::{self, Counter};
use crate::packet_io::PacketStream;
use crate::passthrough::PumpEnd;
use crate::runtime::InstanceRuntime;
use crate::splice::below_tcp::{TcpSplice, TcpSpliced};
use crate::splice::sockhash::Spliced;
use crate::tls::{ClientStream, ComputeStream};
use crate::watch::CommandWatch;

/// Forwards an accepted session until it ends: the byte pump, and for a resumable session
/// each detach and reattach. Logs the session's lines.
///
/// Not an `async fn`: its arguments are captured once, where an `async fn` would keep them
/// twice (as arguments and as locals) for the session's whole life, and what only the first
/// log line needs is used before the task's state is made.
pub(super) fn forward(
    rt: Arc<InstanceRuntime>,
    connector: TcpConnector,
    mut client: PacketStream<ClientStream<TcpStream>>,
    session: Established<ComputeStream<TcpStream>>,
    addr: SocketAddr,
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
    held.set_client(addr);
    rt.metrics
        .inc(Counter::Connections, name, metrics::outcome::RELAYED);
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
    // Taken apart here, not in the task: what the task captures keeps its room in the task's
    // state for the session's whole life, beside the locals made from it.
    let (mut client_stream, mut client_rest) = client.into_parts();
    // None while detached: the stopped compute's socket is closed then, not kept (with
    // its descriptor) until the session's next command.
    let mut compute_leg = Some(compute.into_parts());
    // Only a resumable session connects again; the connector goes with its ticket.
    let mut resumable = resumption.map(|resumption| {
        Box::new(Resumable {
            resumption: *resumption,
            connector,
            splices: false,
            baseline: None,
        })
    });
    async move {
        let rt = &*rt;
        let name = &rt.instance.config.name;
        let mut commands = CommandWatch::new(
            &mut held,
            capabilities.flags,
            capabilities.mariadb,
            status_flags,
        );
        let deprecate_eof = capabilities.flags & CLIENT_DEPRECATE_EOF != 0;
        let mut pumped = crate::passthrough::PumpReport::default();
        if let Some(resumable) = resumable.as_deref_mut() {
            commands.ticketed();
            // Below TCP only: across hosts the sockhash is no faster than the pump.
            if let Some((compute, _)) = compute_leg.as_mut().filter(|(compute, _)| {
                rt.instance.config.splices_held()
                    && rt.instance.config.force_reattach_every.is_none()
                    && !rt
                        .evidence_refused
                        .load(std::sync::atomic::Ordering::Relaxed)
                    && rt.below_tcp(&client_stream, compute).is_some()
            }) {
                let timeout = rt.instance.config.compute_timeout;
                let read = Box::pin(super::resumable_splice::first_baseline(
                    compute,
                    &mut commands,
                    deprecate_eof,
                    timeout,
                ))
                .await;
                match read {
                    Ok(baseline) => {
                        resumable.splices = baseline.is_some_and(|read| read.is_some());
                        resumable.baseline = baseline.flatten();
                        if baseline.is_some_and(|read| read.is_none()) {
                            rt.evidence_refused
                                .store(true, std::sync::atomic::Ordering::Relaxed);
                            tracing::info!(instance = %name, "the compute does not say what a session holds (information_schema.METADATA_LOCK_INFO: MariaDB's metadata_lock_info plugin): its resumable sessions stay on the relay's pump");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(instance = %name, client = %addr, error = %e, "reading a new session's counters failed; closing it");
                        pumped.ended_by = PumpEnd::ComputeError;
                        compute_leg = None;
                    }
                }
                if resumable.splices {
                    commands.splice_after(SPLICE_AFTER_COMMANDS);
                }
            }
        } else if rt.kernel_splice.is_some()
            && rt.instance.config.splices_held()
            && client_stream.tcp().is_some()
            && compute_leg.as_ref().is_some_and(|(c, _)| c.tcp().is_some())
        {
            commands.splice_after(SPLICE_AFTER_COMMANDS);
        }
        // A resumable session spliced below TCP at least once (`resumable_splice`).
        let mut spliced_resumable = false;
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
                if let Some(baseline) = resumable.as_deref_mut().and_then(|r| r.baseline.as_mut()) {
                    baseline.sent(bytes.client_to_compute);
                }
                bytes.ended_by
            };
            if ended_by == PumpEnd::Aside {
                let Some(resumable) = resumable.as_deref_mut() else {
                    continue;
                };
                let forced = commands.take_forced_reattach();
                // Between commands for a while after a change: the session's state is read
                // from its compute, by value, before any pause could freeze it.
                if commands.state_unread() && commands.begin_state_read() {
                    // In a box of its own: the task keeps only what lives across its waits.
                    let read = Box::pin(super::resumable_splice::read_between_commands(
                        (&mut *compute_stream, compute_rest),
                        (
                            &resumable.resumption,
                            resumable.splices,
                            &mut resumable.baseline,
                        ),
                        &mut commands,
                        deprecate_eof,
                        rt.instance.config.compute_timeout,
                    ))
                    .await;
                    match read {
                        Ok(None) => {}
                        Ok(Some(why)) => {
                            tracing::info!(instance = %name, client = %addr, why = why.as_str(), "the session's state cannot be carried; it keeps its compute");
                        }
                        Err(e) => {
                            tracing::warn!(instance = %name, client = %addr, error = %e, "reading the session's state failed; closing it");
                            pumped.ended_by = PumpEnd::ComputeError;
                            break None;
                        }
                    }
                }
                if !forced {
                    continue;
                }
                // force_reattach_every: the session is carried to a new login on the running
                // compute, as after a stop (its old connection closed first).
                if let Err(why) = commands.carriable() {
                    tracing::info!(instance = %name, client = %addr, why = why.as_str(), "forced reattach skipped: the session is pinned");
                    continue;
                }
                if resumable.resumption.expired() {
                    tracing::info!(instance = %name, client = %addr, why = "the ticket has expired", "forced reattach skipped: the session is pinned");
                    continue;
                }
                if !commands.step_aside() {
                    continue;
                }
                // The old session says goodbye, so the compute ends it now (not counted as
                // aborted, and not held against the account's connection limit).
                let _ = compute_stream.write_all(QUIT).await;
                drop(compute_leg.take());
                compute_leg = Box::pin(reattach_by_force(
                    rt,
                    resumable,
                    &mut client_stream,
                    &mut commands,
                    deprecate_eof,
                    addr,
                ))
                .await;
                commands.step_back();
                if compute_leg.is_none() {
                    pumped.ended_by = PumpEnd::ComputeError;
                    break None;
                }
                continue;
            }
            if let Some((chunk, status_flags)) = commands.take_chunk() {
                // The pump stopped at the end of a response for the kernel splice.
                if let Some(resumable) = resumable.as_deref_mut() {
                    // Boxed: what the splice needs lives in its own future, not the task's.
                    let (next, carried) = Box::pin(super::resumable_splice::carry(
                        rt,
                        (&mut client_stream, compute_stream),
                        &mut commands,
                        (&resumable.resumption, &mut resumable.baseline),
                        (chunk, status_flags),
                        (deprecate_eof, addr),
                    ))
                    .await;
                    rt.count_pumped(&carried);
                    pumped = pumped.then(&carried);
                    match next {
                        super::resumable_splice::Next::Pumped { spliced } => {
                            spliced_resumable |= spliced;
                            continue;
                        }
                        super::resumable_splice::Next::Ended => break None,
                    }
                }
                let mut chunk: &[u8] = &chunk;
                // Below TCP where the session's routes allow; through the sockets otherwise, or
                // where the splice below TCP will not take this session (not when it only must
                // wait).
                let full = chunk.len() as u64;
                let mut through_sockets = true;
                if let Some(below) = rt.below_tcp(&client_stream, compute_stream) {
                    match splice_below_tcp(rt, &below, &client_stream, compute_stream, chunk) {
                        Ok(spliced) => {
                            break Some(Box::new(ToKernel::BelowTcp(below, spliced, status_flags)));
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
                            break Some(Box::new(ToKernel::Sockets(
                                spliced,
                                chunk.into(),
                                status_flags,
                            )));
                        }
                        // The client sent ahead: the end of a later response, then.
                        Err(Retry::Later) => commands.splice_after(0),
                        Err(Retry::Never) => {}
                    }
                }
                // Not now: the chunk goes on, and so does the pump.
                if client_stream.write_all(chunk).await.is_err() {
                    pumped.ended_by = PumpEnd::ClientError;
                    break None;
                }
                pumped.compute_to_client += full;
                continue;
            }
            let Some(resumable) = resumable
                .as_deref_mut()
                .filter(|_| ended_by == PumpEnd::Detached)
            else {
                break None;
            };
            // The compute was stopped under this session: it waits for its next command
            // (pings answered here), then is reattached to a new compute.
            compute_leg = None;
            let resumed = Box::pin(resume_detached(
                rt,
                resumable,
                &mut client_stream,
                &mut commands,
                deprecate_eof,
                addr,
            ))
            .await;
            let Some((leg, first)) = resumed else {
                break None;
            };
            client_rest = first;
            let (compute, compute_rest) = compute_leg.insert(leg);
            // The new session's counters, read where the restore already ran statements.
            if resumable.splices && compute_rest.is_empty() {
                let read = Box::pin(super::resumable_splice::first_baseline(
                    compute,
                    &mut commands,
                    deprecate_eof,
                    rt.instance.config.compute_timeout,
                ))
                .await;
                let Ok(baseline) = read else {
                    tracing::warn!(instance = %name, client = %addr, "reading a reattached session's counters failed; closing it");
                    pumped.ended_by = PumpEnd::ComputeError;
                    break None;
                };
                resumable.baseline = baseline.flatten();
            }
        };
        drop(commands);
        let Some(to_kernel) = to_kernel else {
            drop(held);
            tracing::info!(
                instance = %name, client = %addr, up = pumped.client_to_compute,
                down = pumped.compute_to_client, ended_by = pumped.ended_by.label(), spliced = spliced_resumable,
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
        let below_tcp = matches!(*to_kernel, ToKernel::BelowTcp(..));
        let (carried, taken_back) = match *to_kernel {
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
            down = bytes.compute_to_client, ended_by = bytes.ended_by.label(), spliced = true,
            below_tcp, taken_back, duration_ms = started.elapsed().as_millis(), "session closed"
        );
    }
}

/// A whole `COM_QUIT` packet.
const QUIT: &[u8] = &[1, 0, 0, 0, authplugin::packet::command::COM_QUIT];

/// How a held session went to the kernel: through its sockets (with the chunk that ends the
/// response, still to write) or below TCP (the chunk written). Boxed where it is made: the
/// task's state has room for every local that lives across a wait, for the session's life.
enum ToKernel {
    Sockets(Spliced, Box<[u8]>, u16),
    BelowTcp(Arc<TcpSplice>, TcpSpliced, u16),
}

/// A session spliced below TCP until it ends ([`crate::splice::below_tcp::carry`]). On an instance
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
        let take_back = crate::splice::sockhash::TakeBack {
            quiet: rt.instance.take_back_pace(),
            compute_idle: &compute_idle,
            look_now: counted.look_now(),
            status_flags,
        };
        let carried = crate::splice::below_tcp::carry(
            &mut *client,
            &mut *compute,
            &spliced,
            Some(&take_back),
        )
        .await;
        let (quiet_for, flags) = match carried {
            crate::splice::sockhash::Carried::Ended(report) => {
                total = total.then(&report);
                break 'session;
            }
            crate::splice::sockhash::Carried::TakenBack {
                quiet_for,
                status_flags,
            } => (quiet_for, status_flags),
        };
        total = total.then(&spliced.report(PumpEnd::Kernel));
        let again = !spliced.was_bypassed();
        drop(spliced);
        taken_back += 1;
        held.used_ago(quiet_for);
        tracing::debug!(instance = %config.name, quiet_ms = quiet_for.as_millis(), status_flags = ?flags, "session taken back from the splice below TCP between commands");
        let mut commands = CommandWatch::new(
            held,
            capabilities.flags,
            capabilities.mariadb,
            flags.unwrap_or(0),
        );
        commands.taken_back_below_tcp(flags.is_some());
        if !again {
            commands.stay_on_pump();
        }
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
                        total.ended_by = PumpEnd::ClientError;
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

/// A spliced session until both sides have closed ([`crate::splice::sockhash::carry`]), from
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
    let mut relayed = crate::splice::sockhash::Relayed::default();
    if client.write_all(&chunk).await.is_err() {
        return (spliced.report(&relayed, PumpEnd::ClientError), 0);
    }
    relayed.written[0] = chunk.len() as u64;
    drop(chunk);
    let compute_idle = || rt.instance.compute_idle();
    let counted = rt.instance.spliced_session();
    // Taken back when quiet on an instance that parks, and before any freeze.
    let take_back = crate::splice::sockhash::TakeBack {
        quiet: rt.instance.take_back_pace(),
        compute_idle: &compute_idle,
        look_now: counted.look_now(),
        status_flags,
    };
    let mut taken_back = 0;
    let report = loop {
        let carried = crate::splice::sockhash::carry(
            &mut *client,
            &mut *compute,
            &spliced,
            &mut relayed,
            Some(&take_back),
        )
        .await;
        let (quiet_for, status_flags) = match carried {
            crate::splice::sockhash::Carried::Ended(report) => break report,
            crate::splice::sockhash::Carried::TakenBack {
                quiet_for,
                status_flags,
            } => (quiet_for, status_flags),
        };
        taken_back += 1;
        held.used_ago(quiet_for);
        tracing::debug!(instance = %config.name, quiet_ms = quiet_for.as_millis(), ?status_flags, "spliced session taken back between commands");
        let mut commands = CommandWatch::new(
            held,
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
        if pumped.ended_by != PumpEnd::Kernel {
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
