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
//! [`handle`] is the connection's task: the greeting (P1, P2) in a future of its own, then the
//! rest in order, with the one ERR a failure calls for, then the metrics, the one log line
//! and the byte pump. (`establish`, for tests and fuzzing, runs the same steps.)

mod compute_leg;
mod detached;
mod dual_auth;
mod held;
pub mod login;
pub mod outcome;
mod reattach;
mod resumable_splice;
mod state_read;
mod switch_auth;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use authplugin::Scramble;
use authplugin::packet::capabilities::{CLIENT_SSL, SERVER_STATUS_AUTOCOMMIT};
use authplugin::packet::err::codes;
use authplugin::packet::{ErrPacket, OkPacket};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::compute_conn::{ComputeConnector, ComputeTarget, OnBehalfOf, TcpConnector};
use crate::config::AuthMode;
use crate::control::{ConnectionGuard, Phase, Route, WakeReport};
use crate::future::Session;
use crate::limits::PendingPermit;
use crate::logsafe::Escaped;
use crate::metrics::Counter;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::profile::ComputeProfile;
use crate::runtime::InstanceRuntime;
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
///
/// Not an `async fn`, which would keep a second copy of each argument: what a connection
/// waiting for its login holds is its memory (BENCHMARKS.md §3).
fn log_in(
    rt: Arc<InstanceRuntime>,
    mut client: PacketStream<ClientStream<TcpStream>>,
    client_addr: SocketAddr,
    local: SocketAddr,
    pending: PendingPermit,
    greeted: Option<Greeted>,
) -> impl std::future::Future<Output = Option<Session>> + Send + 'static {
    let started = Instant::now();
    let via_endpoint = greeted.is_some();
    async move {
        // Each step boxed: a connection that has not answered its greeting yet holds the
        // greeting's state alone, and the login's (buffers, the TLS handshake) is freed once
        // it is done; a refusal's is not kept beside it.
        let greeted = match greeted {
            Some(g) => Ok(g),
            None => Box::pin(greet_client(&rt, &mut client)).await,
        };
        let cfg = &rt.instance.config;
        let name = cfg.name.clone();
        let connector = TcpConnector {
            target: ComputeTarget::of(cfg),
            on_behalf_of: OnBehalfOf::Client {
                client: client_addr,
                listen: local,
            },
            tls: rt.compute_tls.clone(),
            handover: rt.instance.handover(),
        };
        let established = Box::pin(establish_greeted(
            &rt,
            &mut client,
            client_addr,
            &connector,
            Some(pending),
            greeted,
            via_endpoint,
        ))
        .await;
        Box::pin(refused_or_forward(
            rt,
            connector,
            client,
            established,
            name,
            client_addr,
            started,
        ))
        .await
    }
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
    addr: SocketAddr,
    started: Instant,
) -> Option<Session> {
    let name = name.as_str();
    match established {
        Ok(session) if session.verdict.accepted() => {
            return Some(Box::pin(held::forward(
                rt, connector, client, session, addr, started,
            )));
        }
        Ok(session) => {
            rt.metrics
                .inc(Counter::Connections, name, crate::metrics::outcome::DENIED);
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

/// Runs P1–P8 for one client. On failure the client has been sent the one ERR packet the
/// failure calls for (if the protocol allows one), and the error is returned for the log line
/// and metrics. `pending` (the connection's pre-login slot) is released once the login has
/// been admitted by the budgets, or when the connection ends before that. `greeted` is
/// P1–P2 when an endpoint did them (the login's user name without its routing part).
///
/// The connection's task runs these steps itself ([`serve`]), each in a future of its own.
///
/// # Errors
/// [`PerceptronError`]: how the connection ended instead.
#[cfg(any(test, feature = "fuzzing"))]
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
    let via_endpoint = greeted.is_some();
    let greeted = match greeted {
        Some(g) => Ok(g),
        None => Box::pin(greet_client(rt, client)).await,
    };
    Box::pin(establish_greeted(
        rt,
        client,
        client_addr,
        connector,
        pending,
        greeted,
        via_endpoint,
    ))
    .await
}

/// P1 and P2 on the instance's own listener: greets the client as the instance's compute
/// would (a fresh connection id, TLS offered where the instance has a certificate) and reads
/// its login. (Its own future: a connection that has not answered its greeting yet holds
/// only this, so nothing more is passed in.)
///
/// # Errors
/// [`PerceptronError::NotALogin`] with what the peer did instead.
async fn greet_client<S>(
    rt: &InstanceRuntime,
    client: &mut PacketStream<ClientStream<S>>,
) -> Result<Greeted, PerceptronError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
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

/// [`establish`] from P2 on: `greeted` is the greeting's outcome, by this listener or by an
/// endpoint (`via_endpoint`: it does not answer health checks of the instance, nor charge
/// wakes, since a name that is no instance could not tell them; docs/endpoints.md).
async fn establish_greeted<S, C>(
    rt: &InstanceRuntime,
    client: &mut PacketStream<ClientStream<S>>,
    client_addr: SocketAddr,
    connector: &C,
    pending: Option<PendingPermit>,
    greeted: Result<Greeted, PerceptronError>,
    via_endpoint: bool,
) -> Result<Established<C::Stream>, PerceptronError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: ComputeConnector,
{
    let result = match greeted {
        // Boxed: its state is freed before the ERR's write, across which the error alone
        // lives. (Measured: inline, an idle held session cost the relay 309 B more, the
        // login's larger block freed among the session's; BENCHMARKS.md §3.)
        Ok(greeted) => {
            Box::pin(run(
                rt,
                client,
                client_addr,
                connector,
                pending,
                greeted,
                via_endpoint,
            ))
            .await
        }
        Err(e) => Err(e),
    };
    let e = match result {
        Ok(session) => return Ok(session),
        Err(e) => e,
    };
    if let Some(err) = e.client_error(&rt.instance.config.name, &client_addr.to_string()) {
        // Best effort: the client may already be gone.
        let seq = client.next_sequence_id();
        let _ = client.write_packet(seq, &err.to_bytes()).await;
    }
    Err(e)
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
    via_endpoint: bool,
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
    if !via_endpoint && is_health_check(&cfg.health_check_users, &login) {
        answer_health_check(client, &login, cfg.handshake_timeout).await;
        return Err(PerceptronError::HealthCheck);
    }
    // MySQL's require_secure_transport, and `client_ca` (a client certificate on every
    // login), before anything costs money. (Health checks, answered by the relay alone with
    // no password, are exempt: load balancers check in plaintext.)
    if cfg.relay_terminates_every_login() && !login.tls {
        return Err(PerceptronError::NotALogin(
            Classification::InsecureTransport,
        ));
    }
    // Budgets before anything costs money: a blocked source or user, or one that has woken
    // the instance too often, is refused here, without a wake.
    let wakes = !via_endpoint
        && matches!(
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
    let mut held = rt.instance.hold(Route::Perceptron);

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
    let greeted_as = login.connection_id;
    let verdict = match cfg.auth {
        AuthMode::Dual => {
            let client_ip = client_addr.ip();
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
            let with_password = !login.answer.is_empty();
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
                // In the relay's words, as for a login an endpoint cannot route: the compute's
                // would name the relay's address.
                let user = String::from_utf8_lossy(&user);
                verdict.reply.payload =
                    outcome::wrong_password(&user, client_ip, with_password).to_bytes();
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
    // Where the compute did not take the relay's id as the session's, a KILL by it is given
    // the compute's own. Not for an endpoint's logins: their ids come from the endpoint's
    // counter, and two sessions of the instance could share one.
    if verdict.accepted()
        && !via_endpoint
        && !verdict
            .proven_in
            .is_some_and(dual_auth::ProvenIn::takes_the_relays_id)
    {
        held.name_session(greeted_as, compute.greeting.connection_id);
    }
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
pub(crate) fn is_health_check(users: &[String], login: &login::ClientLogin) -> bool {
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
