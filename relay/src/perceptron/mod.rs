//! The perceptron route (DESIGN §2, P0–P8), one phase per module:
//! [`login`] (P1 greeting, P2 login, classification), the wake (P3, [`crate::control`]),
//! [`relayed_auth`] (P4–P8), then [`crate::passthrough`].

pub mod login;
pub mod relayed_auth;
pub mod switch_auth;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use authplugin::Scramble;
use tokio::net::TcpStream;

use crate::compute_conn::{ComputeTarget, OnBehalfOf};
use crate::config::AuthMode;
use crate::control::{ConnectionGuard, Route};
use crate::metrics::Counter;
use crate::outcome::PerceptronError;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::runtime::InstanceRuntime;
use relayed_auth::RelayedLoginContext;

/// How a relayed session went, for the connection's log line.
#[derive(Debug)]
struct Timings {
    login_ms: u128,
    wake_ms: u128,
    compute_login_ms: u128,
    was_running: bool,
}

/// Handles one client connection on the perceptron route, from greeting to the end of the
/// byte pump. Logs exactly one line when it ends and counts the outcome.
pub async fn handle(rt: Arc<InstanceRuntime>, client: TcpStream, client_addr: SocketAddr) {
    // Counted as an open connection of the instance from its login on (see `run`), so
    // scanners and health checks never hold an instance awake.
    let mut held = None;
    let name = rt.instance.config.name.clone();
    let addr = client_addr.to_string();
    let started = Instant::now();
    let _ = client.set_nodelay(true);
    let mut client = PacketStream::new(client, MAX_LOGIN_PACKET_LEN)
        .with_write_timeout(rt.instance.config.handshake_timeout);
    let mut err_seq = 1;
    let result = run(&rt, &mut client, client_addr, &mut err_seq, &mut held).await;
    match result {
        Ok((user, verdict, timings)) => {
            if verdict.accepted() {
                rt.metrics.inc(Counter::Connections, &name, "relayed");
                tracing::info!(
                    instance = %name, client = %addr, user = %String::from_utf8_lossy(&user),
                    login_ms = timings.login_ms, wake_ms = timings.wake_ms,
                    compute_login_ms = timings.compute_login_ms, was_running = timings.was_running,
                    total_ms = started.elapsed().as_millis(),
                    "relayed login accepted; forwarding"
                );
                let (client_stream, client_rest) = client.into_parts();
                let (compute_stream, compute_rest) = verdict.compute.into_parts();
                let bytes = crate::passthrough::pump(
                    client_stream,
                    client_rest,
                    compute_stream,
                    compute_rest,
                )
                .await;
                rt.metrics
                    .add_pumped(&name, bytes.client_to_compute, bytes.compute_to_client);
                tracing::info!(
                    instance = %name, client = %addr, up = bytes.client_to_compute,
                    down = bytes.compute_to_client, ended_by = bytes.ended_by,
                    duration_ms = started.elapsed().as_millis(), "session closed"
                );
            } else {
                rt.metrics.inc(Counter::Connections, &name, "denied");
                tracing::info!(
                    instance = %name, client = %addr, user = %String::from_utf8_lossy(&user),
                    total_ms = started.elapsed().as_millis(), "compute denied the login"
                );
            }
        }
        Err(e) => {
            let label = e.label();
            rt.metrics.inc(Counter::Connections, &name, label);
            if let PerceptronError::NotALogin(c) = &e {
                rt.metrics.inc(Counter::Classifications, &name, c.label());
            }
            if let Some(err) = e.client_error(&name, &addr) {
                // Best effort: the client may already be gone.
                let _ = client.write_packet(err_seq, &err.to_bytes()).await;
            }
            match e {
                PerceptronError::NotALogin(_) | PerceptronError::ClientGone => {
                    tracing::info!(instance = %name, client = %addr, outcome = label, "connection closed without a relayed login");
                }
                _ => {
                    tracing::warn!(instance = %name, client = %addr, outcome = label, error = %e, "relayed login failed");
                }
            }
        }
    }
}

async fn run(
    rt: &Arc<InstanceRuntime>,
    client: &mut PacketStream<TcpStream>,
    peer: SocketAddr,
    err_seq: &mut u8,
    held: &mut Option<ConnectionGuard>,
) -> Result<(Vec<u8>, relayed_auth::ComputeVerdict, Timings), PerceptronError> {
    let cfg = &rt.instance.config;
    let scramble_a = Scramble::generate(&mut rand::rngs::OsRng);
    let profile = rt
        .profile
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let greeting = profile.greeting(
        rt.connection_ids.fetch_add(1, Ordering::Relaxed),
        &scramble_a,
    );
    let t0 = Instant::now();
    let answers = match cfg.auth {
        AuthMode::Dual => login::Answers::CheckableAgainstA,
        AuthMode::Switch => login::Answers::Discarded,
    };
    let login = login::greet_and_read_login(
        client,
        &greeting,
        &scramble_a,
        cfg.handshake_timeout,
        answers,
    )
    .await
    .map_err(|n| {
        *err_seq = n.next_sequence_id;
        PerceptronError::NotALogin(n.class)
    })?;
    let login_ms = t0.elapsed().as_millis();
    let user = login.response.username.clone();
    let last_seq = login.last_sequence_id;
    *err_seq = last_seq.wrapping_add(1);
    *held = Some(rt.instance.hold(Route::Perceptron));

    let report = tokio::select! {
        r = rt.instance.ensure_running() => r.map_err(PerceptronError::Wake)?,
        () = rt.shutdown.cancelled() => return Err(PerceptronError::ShuttingDown),
    };
    let t1 = Instant::now();
    let client_addr = peer.to_string();
    let on_behalf_of = OnBehalfOf::Client {
        client: peer,
        listen: client.get_ref().local_addr().unwrap_or(cfg.listen),
    };
    // Switch mode forwards every packet of the exchange itself, the final OK or ERR
    // included; dual mode hands the compute's verdict back to be forwarded here (P8).
    let (result, forwarded) = match cfg.auth {
        AuthMode::Dual => {
            let ctx = RelayedLoginContext {
                compute: ComputeTarget::of(cfg),
                on_behalf_of,
                timeout: cfg.compute_timeout,
                ring: &rt.ring,
                scramble_a: &scramble_a,
                client_addr: &client_addr,
            };
            let r = relayed_auth::relay_login(login, &ctx)
                .await
                .map_err(|(e, p)| (PerceptronError::Compute(e), p));
            (r, false)
        }
        AuthMode::Switch => {
            let ctx = switch_auth::SwitchContext {
                compute: ComputeTarget::of(cfg),
                on_behalf_of,
                compute_timeout: cfg.compute_timeout,
                client_timeout: cfg.handshake_timeout,
            };
            let r = switch_auth::relay_switch_login(login, client, &ctx)
                .await
                .map_err(|(e, p)| match e {
                    switch_auth::SwitchError::Compute(e) => (PerceptronError::Compute(e), p),
                    switch_auth::SwitchError::ClientGone => (PerceptronError::ClientGone, p),
                });
            (r, true)
        }
    };
    let learnt = match &result {
        Ok((_, learnt)) => Some(learnt.clone()),
        Err((_, learnt)) => learnt.clone(),
    };
    if let Some(learnt) = learnt {
        if relayed_auth::remember_profile(&rt.state_dir, &cfg.name, &profile, &learnt) {
            tracing::info!(instance = %cfg.name, "learnt a new compute profile");
            *rt.profile.write().unwrap_or_else(PoisonError::into_inner) = learnt;
        }
    }
    let (verdict, _) = result.map_err(|(e, _)| e)?;
    let compute_login_ms = t1.elapsed().as_millis();
    if !forwarded {
        // P8: the compute's OK or ERR, renumbered for the client's side of the conversation.
        client
            .write_packet(last_seq.wrapping_add(1), &verdict.reply.payload)
            .await
            .map_err(|_| PerceptronError::ClientGone)?;
    }
    Ok((
        user,
        verdict,
        Timings {
            login_ms,
            wake_ms: report.waited.as_millis(),
            compute_login_ms,
            was_running: report.was_running,
        },
    ))
}
