//! The control plane (architecture.md §4): each instance's lifecycle and the single-flight wake.
//!
//! Transitions are serialised per instance by one mutex over [`State`]. A wake runs in its own
//! task, so it finishes (and is cleaned up) even when the client that triggered it leaves;
//! every connection that arrives while it runs waits on the same outcome. That is how any
//! number of clients cause exactly one spawn (P3).
//!
//! The seams architecture.md §6 asks for: drivers are behind [`driver::Driver`], and the state lives
//! behind this module's small API so a shared store can replace the in-process map.

mod billing;
pub mod driver;
mod fleet;
mod frozen;
mod kernel_route;
mod parking;
pub mod readiness;
pub mod routed_parking;
pub mod scaler;
mod scaling;
pub mod trust;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::capacity::Ccu;
use crate::compute_conn::ComputeTarget;
use crate::config::InstanceConfig;
use crate::ledger::Ledger;
pub use crate::lifecycle::Phase;
use crate::metrics::{Counter, Metrics, outcome};
pub use crate::route::Route;
use crate::router::KernelRoute;
pub use driver::WakeError;
use driver::{Driver, RunningCompute};
pub use parking::{NotResumable, SessionLook};

type WakeOutcome = Option<Result<(), WakeError>>;

/// Why an instance failed: its `failure` in the admin API until the next wake.
#[derive(Debug, Clone)]
enum Failure {
    /// The wake did not bring a compute up.
    Wake(WakeError),
    /// The running compute exited on its own (how).
    Exited(String),
    /// The running compute stopped answering (why it was judged so).
    Unreachable(String),
    /// The compute did not prove it holds the key (how it failed to).
    Unproven(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Wake(e) => write!(f, "{e}"),
            Self::Exited(how) => write!(f, "compute exited: {how}"),
            Self::Unreachable(why) => write!(f, "compute unreachable: {why}"),
            Self::Unproven(why) => write!(f, "the compute did not prove it holds the key: {why}"),
        }
    }
}

/// Where an instance is in its lifecycle, with what each phase needs.
enum State {
    Paused,
    Failed(Failure),
    /// The wake's outcome arrives on the channel.
    Resuming(watch::Receiver<WakeOutcome>),
    Running(Arc<dyn RunningCompute>),
    /// `true` arrives when the compute is gone (or frozen).
    Pausing(watch::Receiver<bool>),
    /// The compute's processes are frozen; a wake thaws them.
    Frozen(Arc<dyn RunningCompute>),
}

impl State {
    const fn phase(&self) -> Phase {
        match self {
            Self::Paused => Phase::Paused,
            Self::Failed(_) => Phase::Failed,
            Self::Resuming(_) => Phase::Resuming,
            Self::Running(_) => Phase::Running,
            Self::Pausing(_) => Phase::Pausing,
            Self::Frozen(_) => Phase::Frozen,
        }
    }
}

/// Open connections of an instance, by route.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct OpenConnections {
    direct: usize,
    perceptron: usize,
}

impl OpenConnections {
    const fn of(&mut self, route: Route) -> &mut usize {
        match route {
            Route::Direct => &mut self.direct,
            Route::Perceptron => &mut self.perceptron,
        }
    }

    const fn total(self) -> usize {
        self.direct + self.perceptron
    }
}

struct Inner {
    state: State,
    /// When the current state was entered (Unix ms).
    since_ms: u64,
    /// The same moment on the runtime's clock, for timers.
    since: tokio::time::Instant,
    /// Open connections by route.
    active: OpenConnections,
    /// Of those, the connections between commands ([`ConnectionGuard::report`]); when they
    /// are all, the instance may park.
    idle_conns: usize,
    /// Of those, the relayed sessions the compute issued a ticket for whose state the relay
    /// can carry to a new compute ([`ConnectionGuard::report`]): when every open connection is
    /// one, a frozen compute may be stopped under them (`resumable_sessions`).
    resumable_conns: usize,
    /// With `resumable_sessions`: the open connections between commands that could not be
    /// carried to a new compute, so keep it frozen (not stopped), by connection: its client
    /// and why ([`ConnectionGuard::report`]).
    held_frozen: std::collections::BTreeMap<u64, (String, NotResumable)>,
    /// Relayed sessions by the id the relay's greeting gave them: the compute's id for each,
    /// from its login or latest reattach (they differ on MariaDB), so a `KILL` by the first
    /// reaches the second (`crate::kill_ids`).
    compute_ids: std::collections::HashMap<u32, u32>,
    /// Of the open connections, those routed direct whose client has not yet spoken
    /// ([`Instance::hold_direct`]): counted so no pause cuts them, but never a session.
    pre_login: usize,
    /// An idle pause is due and waits only for [`Inner::pre_login`] connections: new ones take
    /// the perceptron's route meanwhile (which counts them from their login), so a stream of
    /// silent sockets cannot hold the pause off for longer than one `handshake_timeout`.
    pause_waits_for_pre_login: bool,
    /// The running compute could not be frozen to park its connections: not tried again
    /// until the next wake.
    cannot_park: bool,
    /// When the instance was last used: the last connection closed, a command that counts
    /// was sent or answered ([`ConnectionGuard::report`]), or the compute became ready.
    idle_since: tokio::time::Instant,
    /// Since the compute last started: whether a login was accepted (or a connection of
    /// unknown outcome used it), and whether one was refused. Refused logins alone shorten
    /// the idle pause to `failed_wake_pause_after`.
    logins_since_wake: LoginsSinceWake,
    wakes: u64,
    last_resume: Option<Duration>,
    /// The running compute's capacity, with `[instance.capacity]`.
    ccu: Option<Ccu>,
    /// Open connections the kernel route sent to the compute whose client has spoken, at the
    /// last conntrack count.
    kernel_open: usize,
    /// Of those, the ones that hold the instance running: a command outstanding, or a
    /// session parking cannot follow (all of them without `park`; see [`routed_parking`]).
    kernel_busy: usize,
    /// While frozen: routed sessions parked on the compute, and the cancel of the task that
    /// thaws it at their first byte (cancelled when the instance leaves `Frozen`).
    kernel_parked: usize,
    routed_watch: Option<tokio_util::sync::CancellationToken>,
    /// The running compute's CPU time at the last look at its routed sessions, and whether
    /// it was working then (`kernel_route`).
    cpu_sample: Option<((std::time::Instant, Duration), bool)>,
    /// Whether the kernel route is installed now.
    kernel_installed: bool,
    /// How far the running compute has proven it holds the key ([`trust`]).
    trust: trust::Trust,
}

/// What the logins since the compute started were, for the idle pause.
#[derive(Debug, Clone, Copy, Default)]
struct LoginsSinceWake {
    accepted: bool,
    refused: bool,
}

impl LoginsSinceWake {
    /// Used only by logins the compute refused: the idle pause comes early.
    const fn only_refused(self) -> bool {
        self.refused && !self.accepted
    }
}

/// One instance: its configuration, its driver, its state and its open connections.
pub struct Instance {
    /// The instance's configuration.
    pub config: InstanceConfig,
    driver: Box<dyn Driver>,
    /// The kernel route (`route = "nftables"`); none for the pump.
    kernel: Option<Arc<dyn KernelRoute>>,
    inner: Mutex<Inner>,
    shutting_down: std::sync::atomic::AtomicBool,
    /// The frozen compute is being (or was) stopped under resumable sessions: their pumps
    /// keep the client when the compute goes ([`crate::passthrough::Observer::detached`]).
    /// Cleared when a compute runs again.
    detaching: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
    ledger: Option<Arc<Ledger>>,
    /// The fleet's store, when this relay is one of a fleet.
    fleet: std::sync::OnceLock<Arc<dyn crate::fleet::FleetStore>>,
    /// Woken when the open connections change (the fleet publisher's cue).
    connections_changed: tokio::sync::Notify,
    /// The next [`ConnectionGuard`]'s id.
    next_guard_id: std::sync::atomic::AtomicU64,
    /// How a compute's proof of the key is checked (dual mode); none trusts every greeting.
    proof: std::sync::OnceLock<trust::ProofCheck>,
    /// The connection the last wake opened, for the first login after it.
    handover: Arc<crate::compute_conn::Handover>,
    /// Woken when a relayed login proves the running compute ([`trust`]).
    proven: tokio::sync::Notify,
    /// Sessions the kernel splice carries now ([`parking::SplicedSession`]).
    spliced: tokio::sync::watch::Sender<usize>,
    /// Asks every spliced session to look at once whether it can be taken back (a pause).
    look_now: tokio::sync::Notify,
    /// Woken on every change of state, for [`Instance::pause_when_idle`], which waits on it
    /// while there is no compute (so a paused instance costs no timer).
    state_changed: tokio::sync::Notify,
    /// Sessions detached from a stopped compute now ([`DetachedSlot`]).
    detached: std::sync::atomic::AtomicUsize,
}

/// A session detached from its stopped compute, counted among the instance's while it waits
/// (at most `max_detached_sessions` are kept for a reattach).
#[derive(Debug)]
pub struct DetachedSlot {
    instance: Arc<Instance>,
    kept: bool,
}

impl DetachedSlot {
    /// Whether the session is within `max_detached_sessions` (the first ones detached are).
    #[must_use]
    pub const fn kept(&self) -> bool {
        self.kept
    }
}

impl Drop for DetachedSlot {
    fn drop(&mut self) {
        self.instance
            .detached
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Instance {
    /// Counts a session detached from its stopped compute until the slot drops (it is
    /// reattached, or ends).
    #[must_use]
    pub fn detach_session(self: &Arc<Self>) -> DetachedSlot {
        let before = self
            .detached
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        DetachedSlot {
            instance: Arc::clone(self),
            kept: before < self.config.max_detached_sessions,
        }
    }
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// What a wake waited for, for the connection's log line.
#[derive(Debug, Clone, Copy)]
pub struct WakeReport {
    /// Whether this caller found the compute already running.
    pub was_running: bool,
    /// How long the caller waited.
    pub waited: Duration,
}

/// A snapshot for the admin API.
#[derive(Debug, Clone)]
pub struct InstanceStatus {
    /// The instance.
    pub name: String,
    /// Its phase.
    pub phase: Phase,
    /// When the phase was entered (Unix ms).
    pub since_ms: u64,
    /// Open connections on the direct route (the pump's and the kernel route's).
    pub direct_connections: usize,
    /// Of those, the connections the kernel route sent to the compute (last conntrack count).
    pub kernel_connections: usize,
    /// Whether the kernel route is installed; none when the instance uses the pump.
    pub kernel_route_installed: Option<bool>,
    /// Open connections held by the perceptron.
    pub perceptron_connections: usize,
    /// Open connections kept on a frozen compute (docs/parking.md); 0 unless frozen.
    pub parked_connections: usize,
    /// Wakes since the relay started.
    pub wakes: u64,
    /// How long the last successful wake took.
    pub last_resume: Option<Duration>,
    /// Why the instance is failed, if it is.
    pub failure: Option<String>,
    /// The compute's capacity now, with `[instance.capacity]` (while it runs).
    pub ccu: Option<Ccu>,
    /// With `resumable_sessions`: the connections between commands that keep the compute
    /// frozen rather than stopped, with why (their client, the reason).
    pub held_frozen_by: Vec<(String, NotResumable)>,
    /// With `[instance.offload]`: where the data is (`local`, `offloading`, `offloaded`,
    /// `restoring`).
    pub storage: Option<&'static str>,
}

/// Why a pause was not carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseError {
    /// Connections are open and the pause was not forced.
    Busy(usize),
    /// Nothing runs.
    NotRunning(Phase),
    /// The kernel route could not be removed (or its connections counted), so the compute
    /// keeps running rather than leave new connections a dead port.
    Route(String),
    /// The fleet did not agree (its store is unreachable, another relay is waking or pausing
    /// the instance, or a connection opened elsewhere); the compute keeps running.
    Fleet(String),
}

impl std::fmt::Display for PauseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Busy(n) => write!(f, "{n} connection(s) open; pause with force to cut them"),
            Self::NotRunning(p) => write!(f, "instance is {}", p.as_str()),
            Self::Route(e) => write!(f, "kernel route: {e}; the compute keeps running"),
            Self::Fleet(e) => write!(f, "fleet: {e}; the compute keeps running"),
        }
    }
}

/// Counts one open connection for its instance while alive; dropping it (on every exit path)
/// updates the count and, if the connection was a real session, starts the idle clock when the
/// last one closes. A login the compute refused never restarts the clock, so a bot guessing
/// passwords does not hold the instance awake.
pub struct ConnectionGuard {
    instance: Arc<Instance>,
    route: Route,
    /// Whether closing it counts as activity (restarts the idle clock).
    session: bool,
    /// Whether it is counted among the instance's connections between commands.
    idle: bool,
    /// Whether it is counted among the instance's resumable sessions.
    resumable: bool,
    /// This connection's id among the instance's, for [`Inner::held_frozen`].
    id: u64,
    /// The client's address, for status output.
    client: Option<std::net::SocketAddr>,
    /// Why it keeps the compute frozen, when it is listed in [`Inner::held_frozen`].
    holding: Option<NotResumable>,
    /// Whether it is counted in [`Inner::pre_login`].
    pre_login: bool,
    /// The id its client knows it by, when listed in [`Inner::compute_ids`] (0: not listed;
    /// the relay's ids are never 0).
    greeted_as: u32,
}

impl std::fmt::Debug for ConnectionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionGuard")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut inner = self.instance.lock();
        let slot = inner.active.of(self.route);
        *slot = slot.saturating_sub(1);
        if self.idle {
            inner.idle_conns = inner.idle_conns.saturating_sub(1);
        }
        if self.resumable {
            inner.resumable_conns = inner.resumable_conns.saturating_sub(1);
        }
        if self.holding.is_some() {
            inner.held_frozen.remove(&self.id);
        }
        if self.pre_login {
            inner.pre_login = inner.pre_login.saturating_sub(1);
        }
        if self.greeted_as != 0 {
            inner.compute_ids.remove(&self.greeted_as);
        }
        // The last session closed: connections whose clients have not spoken do not count.
        if self.session && inner.active.total() == inner.pre_login {
            inner.idle_since = tokio::time::Instant::now();
        }
        drop(inner);
        self.instance.connections_changed.notify_one();
    }
}

impl ConnectionGuard {
    /// The session is known to its client as `greeted_as` (the relay's greeting) and to the
    /// compute as `compute_id` (the compute's greeting at its login).
    pub fn name_session(&mut self, greeted_as: u32, compute_id: u32) {
        let mut inner = self.instance.lock();
        if self.greeted_as != 0 {
            inner.compute_ids.remove(&self.greeted_as);
        }
        self.greeted_as = greeted_as;
        inner.compute_ids.insert(greeted_as, compute_id);
    }

    /// The session was reattached, and the new compute knows it as `compute_id`; none: by
    /// the relay's id, or it is detached from a stopped compute (no id of the old one is
    /// kept, which a new compute gives to other sessions).
    pub fn session_moved(&mut self, compute_id: Option<u32>) {
        if self.greeted_as == 0 {
            return;
        }
        let mut inner = self.instance.lock();
        match compute_id {
            Some(id) => inner.compute_ids.insert(self.greeted_as, id),
            None => inner.compute_ids.remove(&self.greeted_as),
        };
    }

    /// The compute's id of the instance's relayed session its client knows as `greeted_as`.
    #[must_use]
    pub fn compute_id_of(&self, greeted_as: u32) -> Option<u32> {
        self.instance.lock().compute_ids.get(&greeted_as).copied()
    }

    /// Names the connection's client, for status output.
    pub const fn set_client(&mut self, client: std::net::SocketAddr) {
        self.client = Some(client);
    }

    /// The client of a direct connection has spoken: it is no longer pre-login
    /// ([`Instance::hold_direct`]), so a pause waits for it as for any open connection.
    pub fn client_spoke(&mut self) {
        if std::mem::take(&mut self.pre_login) {
            let mut inner = self.instance.lock();
            inner.pre_login = inner.pre_login.saturating_sub(1);
        }
    }

    /// Marks the connection as a real session (its login was accepted): the login is use,
    /// so it restarts the idle clock (a session is not parked before `park_after` has passed
    /// since its login), and so does its close.
    pub fn mark_session(&mut self) {
        self.session = true;
        let mut inner = self.instance.lock();
        inner.logins_since_wake.accepted = true;
        inner.idle_since = tokio::time::Instant::now();
    }

    /// The connection was last used `ago` (its commands were not followed then: the kernel
    /// splice carried them). The instance's idle clock runs from then at the earliest.
    pub fn used_ago(&self, ago: std::time::Duration) {
        let now = tokio::time::Instant::now();
        let used = now.checked_sub(ago).unwrap_or(now);
        let mut inner = self.instance.lock();
        inner.idle_since = inner.idle_since.max(used);
    }
}

impl Instance {
    /// A paused instance; while it runs, new connections reach the compute through `kernel`
    /// (none: through the relay's pump). State changes are appended to `ledger` when there is
    /// one.
    #[must_use]
    pub fn new(
        config: InstanceConfig,
        driver: Box<dyn Driver>,
        kernel: Option<Arc<dyn KernelRoute>>,
        metrics: Arc<Metrics>,
        ledger: Option<Arc<Ledger>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            config,
            driver,
            kernel,
            inner: Mutex::new(Inner {
                state: State::Paused,
                since_ms: crate::clock::now_ms(),
                since: tokio::time::Instant::now(),
                active: OpenConnections::default(),
                idle_conns: 0,
                resumable_conns: 0,
                held_frozen: std::collections::BTreeMap::new(),
                compute_ids: std::collections::HashMap::new(),
                pre_login: 0,
                pause_waits_for_pre_login: false,
                cannot_park: false,
                idle_since: tokio::time::Instant::now(),
                logins_since_wake: LoginsSinceWake::default(),
                wakes: 0,
                last_resume: None,
                ccu: None,
                kernel_open: 0,
                kernel_busy: 0,
                kernel_parked: 0,
                routed_watch: None,
                cpu_sample: None,
                kernel_installed: false,
                trust: trust::Trust::Unproven,
            }),
            shutting_down: false.into(),
            detaching: false.into(),
            metrics,
            ledger,
            fleet: std::sync::OnceLock::new(),
            connections_changed: tokio::sync::Notify::new(),
            next_guard_id: 0.into(),
            proof: std::sync::OnceLock::new(),
            handover: Arc::default(),
            proven: tokio::sync::Notify::new(),
            spliced: tokio::sync::watch::Sender::new(0),
            look_now: tokio::sync::Notify::new(),
            state_changed: tokio::sync::Notify::new(),
            detached: 0.into(),
        })
    }

    /// Where a wake leaves the connection it opened to the compute, for the perceptron's
    /// first login after it; none when compute connections carry a PROXY header (the
    /// wake's says it is the relay's own, a login's must name its client).
    #[must_use]
    pub fn handover(&self) -> Option<Arc<crate::compute_conn::Handover>> {
        (!self.config.proxy_protocol).then(|| Arc::clone(&self.handover))
    }

    /// The current phase.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.lock().state.phase()
    }

    /// The phase's name, for logs.
    #[must_use]
    pub fn state_name(&self) -> &'static str {
        self.phase().as_str()
    }

    fn next_guard_id(&self) -> u64 {
        self.next_guard_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// A snapshot for status output.
    #[must_use]
    pub fn status(&self) -> InstanceStatus {
        let inner = self.lock();
        InstanceStatus {
            name: self.config.name.clone(),
            phase: inner.state.phase(),
            since_ms: inner.since_ms,
            direct_connections: inner.active.direct + inner.kernel_open,
            kernel_connections: inner.kernel_open,
            kernel_route_installed: self.kernel.as_ref().map(|_| inner.kernel_installed),
            perceptron_connections: inner.active.perceptron,
            parked_connections: if matches!(inner.state, State::Frozen(_)) {
                inner.active.total() + inner.kernel_parked
            } else {
                0
            },
            wakes: inner.wakes,
            last_resume: inner.last_resume,
            failure: match &inner.state {
                State::Failed(why) => Some(why.to_string()),
                _ => None,
            },
            ccu: inner.ccu,
            held_frozen_by: if matches!(inner.state, State::Frozen(_)) {
                inner.held_frozen.values().cloned().collect()
            } else {
                Vec::new()
            },
            storage: self
                .driver
                .storage()
                .map(driver::offloading::Storage::as_str),
        }
    }

    /// Moves a paused instance's data to the store now, rather than `after` its compute
    /// stopped (docs/offload.md).
    ///
    /// # Errors
    /// Without `[instance.offload]`, or while a compute runs or is frozen.
    pub fn offload_now(
        &self,
    ) -> Result<driver::offloading::OffloadNow, driver::offloading::OffloadNowError> {
        let now = self.driver.offload_now();
        if let Ok(what) = now {
            tracing::info!(instance = %self.config.name, outcome = what.as_str(), "offload requested by an admin request");
        }
        now
    }

    /// Whether a new connection would take the direct route: the instance runs, and its
    /// compute has proven it holds the key where the instance checks proofs ([`trust`]).
    /// [`Instance::hold_direct`] decides it for a connection and counts it in one step.
    #[must_use]
    pub fn routes_direct(&self) -> bool {
        let inner = self.lock();
        matches!(inner.state, State::Running(_)) && self.trusted(inner.trust)
    }

    /// Whether a compute runs that the instance trusts (see [`Instance::routes_direct`]).
    #[must_use]
    pub fn compute_trusted(&self) -> bool {
        self.routes_direct()
    }

    /// Routes a new connection: `Some` (counted) if it takes the direct route (see
    /// [`Instance::routes_direct`]), `None` for the perceptron's. The decision and the count
    /// are one step under the lock an idle pause, a freeze and a stop decide under, so none of
    /// them can stop the compute under a connection it has accepted and not yet refused: the
    /// connection counts from its accept, before its client has spoken (the compute greets
    /// first), as pre-login until [`ConnectionGuard::client_spoke`]. An idle pause that is due
    /// waits for pre-login connections (at most `compute_timeout` + `handshake_timeout`: then
    /// they are closed) and sends new ones to the perceptron meanwhile, so silent sockets, one
    /// after another, never hold it off for longer. They never restart the idle clock: like
    /// [`Instance::hold`], a close does so only once [`ConnectionGuard::mark_session`] says a
    /// login was not refused.
    #[must_use]
    pub fn hold_direct(self: &Arc<Self>) -> Option<ConnectionGuard> {
        let mut inner = self.lock();
        let direct = matches!(inner.state, State::Running(_))
            && self.trusted(inner.trust)
            && !inner.pause_waits_for_pre_login;
        direct.then(|| {
            inner.active.direct += 1;
            inner.pre_login += 1;
            self.connections_changed.notify_one();
            ConnectionGuard {
                instance: Arc::clone(self),
                route: Route::Direct,
                session: false,
                idle: false,
                resumable: false,
                id: self.next_guard_id(),
                client: None,
                holding: None,
                pre_login: true,
                greeted_as: 0,
            }
        })
    }

    /// Counts a connection the perceptron holds (from its login on), whatever the phase. Its
    /// close restarts the idle clock only once [`ConnectionGuard::mark_session`] says the
    /// login was accepted.
    #[must_use]
    pub fn hold(self: &Arc<Self>, route: Route) -> ConnectionGuard {
        *self.lock().active.of(route) += 1;
        self.connections_changed.notify_one();
        ConnectionGuard {
            instance: Arc::clone(self),
            route,
            session: false,
            idle: false,
            resumable: false,
            id: self.next_guard_id(),
            client: None,
            holding: None,
            pre_login: false,
            greeted_as: 0,
        }
    }

    /// The compute refused a login (ERR 1045). A compute that served only refused logins
    /// since it started pauses after `failed_wake_pause_after` rather than
    /// `idle_pause_after`: a password guess must not buy minutes of running time.
    pub fn note_refused_login(&self) {
        self.lock().logins_since_wake.refused = true;
    }

    /// Makes sure the compute runs, starting it if needed, and waits at most
    /// `resume_timeout` (P3). Concurrent callers share one wake. A caller that finds the
    /// instance pausing waits for the pause to finish, then wakes it.
    ///
    /// # Errors
    /// [`WakeError`] when the wake fails or takes too long; the next call tries again.
    pub async fn ensure_running(self: &Arc<Self>) -> Result<WakeReport, WakeError> {
        let started = Instant::now();
        let timeout = self.config.resume_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            enum Wait {
                Wake(watch::Receiver<WakeOutcome>),
                Pause(watch::Receiver<bool>),
            }
            let wait = {
                let mut inner = self.lock();
                if self
                    .shutting_down
                    .load(std::sync::atomic::Ordering::Acquire)
                {
                    return Err(WakeError::ShuttingDown);
                }
                match &inner.state {
                    State::Running(_) => {
                        return Ok(WakeReport {
                            was_running: true,
                            waited: started.elapsed(),
                        });
                    }
                    State::Resuming(rx) => Wait::Wake(rx.clone()),
                    State::Pausing(done) => Wait::Pause(done.clone()),
                    State::Frozen(frozen) => {
                        let frozen = Arc::clone(frozen);
                        let (tx, rx) = watch::channel(None);
                        self.transition(&mut inner, State::Resuming(rx.clone()));
                        inner.wakes += 1;
                        tokio::spawn(Arc::clone(self).thaw(frozen, tx));
                        Wait::Wake(rx)
                    }
                    State::Paused | State::Failed(_) => {
                        let (tx, rx) = watch::channel(None);
                        self.transition(&mut inner, State::Resuming(rx.clone()));
                        inner.wakes += 1;
                        match self.fleet.get() {
                            Some(store) => {
                                tokio::spawn(Arc::clone(self).fleet_resume(Arc::clone(store), tx))
                            }
                            None => tokio::spawn(Arc::clone(self).resume(tx)),
                        };
                        Wait::Wake(rx)
                    }
                }
            };
            let mut rx = match wait {
                Wait::Wake(rx) => rx,
                Wait::Pause(mut done) => {
                    // A connection that arrives while the instance pauses waits for the
                    // compute to be gone, then wakes a fresh one.
                    tokio::time::timeout_at(deadline, done.wait_for(|d| *d))
                        .await
                        .map_err(|_| WakeError::Timeout(timeout))?
                        .map_err(|_| WakeError::Timeout(timeout))?;
                    continue;
                }
            };
            let outcome = tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await;
            return match outcome {
                Ok(Ok(done)) => match &*done {
                    Some(Ok(())) => Ok(WakeReport {
                        was_running: false,
                        waited: started.elapsed(),
                    }),
                    Some(Err(e)) => Err(e.clone()),
                    None => Err(WakeError::Timeout(timeout)),
                },
                // The wake task always sends before it ends; our own deadline passing first
                // is the only real case here.
                Ok(Err(_)) | Err(_) => Err(WakeError::Timeout(timeout)),
            };
        }
    }

    /// The wake itself, in its own task.
    async fn resume(self: Arc<Self>, tx: watch::Sender<WakeOutcome>) {
        let name = self.config.name.clone();
        tracing::info!(instance = %name, "resuming");
        let started = Instant::now();
        let result = self.driver.start(self.config.resume_timeout).await;
        if let Ok(running) = &result {
            if let Some(opened) = running.take_opened() {
                self.handover.offer(opened);
            }
        }
        if result.is_ok() {
            // Not trusted where proofs are checked (`trust`) until a greeting or a relayed
            // login proves the key.
            self.lock().trust = trust::Trust::Unproven;
            self.check_woken().await;
            // Before the instance counts as running: from here on new connections go
            // straight to the (trusted) compute.
            self.install_route().await;
        }
        let outcome = self.settle_wake(result.map(|r| (r, false)), started);
        // Nobody waiting is fine: the state is already updated.
        let _ = tx.send(Some(outcome));
    }

    /// Records a wake's result: running (watched from now on) or failed. `adopted`: the
    /// compute was started by another relay of the fleet.
    fn settle_wake(
        self: &Arc<Self>,
        result: Result<(Box<dyn RunningCompute>, bool), WakeError>,
        started: Instant,
    ) -> Result<(), WakeError> {
        let name = &self.config.name;
        let mut inner = self.lock();
        match result {
            Ok((running, adopted)) => {
                let running: Arc<dyn RunningCompute> = Arc::from(running);
                inner.ccu = self.config.capacity.map(|c| c.resume);
                self.transition(&mut inner, State::Running(Arc::clone(&running)));
                inner.last_resume = Some(started.elapsed());
                inner.idle_since = tokio::time::Instant::now();
                inner.logins_since_wake = LoginsSinceWake::default();
                tokio::spawn(Arc::clone(self).watch_exit(Arc::clone(&running)));
                tokio::spawn(Arc::clone(self).recheck_proof(running));
                let resume_ms = started.elapsed().as_millis() as u64;
                if adopted {
                    self.metrics
                        .inc(Counter::Wakes, name, outcome::FLEET_RUNNING);
                    tracing::info!(instance = %name, resume_ms, "running (woken by another relay of the fleet)");
                } else {
                    self.metrics.inc(Counter::Wakes, name, outcome::WOKE);
                    self.metrics.observe_resume(name, started.elapsed());
                    tracing::info!(instance = %name, resume_ms, "running");
                }
                Ok(())
            }
            Err(e) => {
                self.transition(&mut inner, State::Failed(Failure::Wake(e.clone())));
                self.metrics.inc(Counter::Wakes, name, e.label());
                tracing::warn!(instance = %name, error = %e, "resume failed");
                Err(e)
            }
        }
    }

    /// Marks the instance failed when its compute exits on its own (running or frozen).
    async fn watch_exit(self: Arc<Self>, running: Arc<dyn RunningCompute>) {
        let reason = running.wait_exit().await;
        let still_current =
            matches!(&self.lock().state, State::Running(current) if Arc::ptr_eq(current, &running));
        if still_current {
            // New connections must reach the relay (which wakes a fresh compute), not the
            // dead port. Removed before the state changes, so it cannot remove the route of
            // a compute started after this one.
            let _ = self.remove_route().await;
        }
        let mut inner = self.lock();
        if let State::Running(current) | State::Frozen(current) = &inner.state {
            if Arc::ptr_eq(current, &running) {
                tracing::warn!(instance = %self.config.name, %reason, "compute exited on its own");
                self.transition(
                    &mut inner,
                    State::Failed(Failure::Exited(reason.to_string())),
                );
            }
        }
    }

    /// Pauses a running instance: refused while connections are open unless `force` (which
    /// cuts them when the compute stops; forced, a frozen compute is stopped too, cutting its
    /// parked sessions). Resolves when the compute is gone.
    ///
    /// # Errors
    /// [`PauseError`] when nothing runs or connections are open.
    pub async fn pause(self: &Arc<Self>, force: bool, reason: &str) -> Result<(), PauseError> {
        if force && self.phase() == Phase::Frozen {
            // Parked sessions are cut as open ones are: the frozen compute stops under them.
            self.stop_frozen(reason).await;
            return Ok(());
        }
        if !force && self.phase() == Phase::Running {
            // A fresh count of the connections the relay does not see.
            self.count_kernel_connections().await;
        }
        if self.phase() == Phase::Running && (self.config.park || self.config.stop_after.is_some())
        {
            // The compute may be frozen under the sessions: those the kernel splices are
            // taken back if they are between commands, so the relay sees their next command
            // (one it cannot take back is busy, as on the pump).
            self.take_back_spliced().await;
        }
        let (running, tx, mut park) = {
            let mut inner = self.lock();
            let open = inner.active.total() + inner.kernel_open;
            let running = match &inner.state {
                State::Running(r) => Arc::clone(r),
                other => return Err(PauseError::NotRunning(other.phase())),
            };
            // Open connections all between commands are parked: the compute is frozen under
            // them (decided under the lock a command takes to say it is busy, so a command
            // is either seen here or sees the pause).
            let park = !force && self.parkable(&inner);
            if open > 0 && !force && !park {
                return Err(PauseError::Busy(open));
            }
            let (tx, rx) = watch::channel(false);
            self.transition(&mut inner, State::Pausing(rx));
            (running, tx, park)
        };
        if let Some(store) = self.fleet.get() {
            if let Err(e) = self.fleet_begin_pause(store.as_ref(), force).await {
                {
                    let mut inner = self.lock();
                    self.transition(&mut inner, State::Running(running));
                }
                let _ = tx.send(true);
                tracing::info!(instance = %self.config.name, reason = %e, "pause abandoned; running");
                return Err(e);
            }
        }
        tracing::info!(instance = %self.config.name, reason, force, park, "pausing");
        let closed = self
            .close_route(force, park.then(|| running.pid()).flatten())
            .await;
        let routed_watch = match closed {
            Ok(watch) => watch,
            Err(e) => {
                // Back to running: the route is in place again (or was never removed).
                {
                    let mut inner = self.lock();
                    self.transition(&mut inner, State::Running(running));
                }
                let _ = tx.send(true);
                tracing::info!(instance = %self.config.name, reason = %e, "pause abandoned; running");
                return Err(e);
            }
        };
        let freeze = (park || self.config.stop_after.is_some())
            && !self
                .shutting_down
                .load(std::sync::atomic::Ordering::Acquire);
        if freeze {
            let mut frozen = running.freeze().await;
            if let Err(
                e @ (driver::CapacityError::Cgroup(_) | driver::CapacityError::External(_)),
            ) = &frozen
            {
                // A freeze that failed half-way (the kernel did not report the cgroup frozen
                // in time, a control plane that timed out) may have frozen some of the compute,
                // or all of it a moment later: it is thawed before anything routes to it
                // again, and before a stop (a frozen process does not act on SIGTERM). A
                // compute that cannot be thawed is stopped, never routed to.
                tracing::warn!(instance = %self.config.name, error = %e, "the freeze failed; thawing the compute");
                if let Err(thaw) = running.thaw().await {
                    tracing::error!(instance = %self.config.name, error = %thaw, "cannot thaw the compute after a failed freeze; stopping it");
                    frozen = Err(thaw);
                    park = false;
                }
            }
            match frozen {
                Ok(()) => {
                    let parked = {
                        let mut inner = self.lock();
                        self.transition(&mut inner, State::Frozen(running));
                        inner.active.total()
                    };
                    let _ = tx.send(true);
                    let routed = routed_watch.map_or(0, |w| self.watch_routed_sessions(w));
                    tracing::info!(instance = %self.config.name, parked, routed, "frozen");
                    parking::thaw_if_commanded(self);
                    return Ok(());
                }
                Err(e) if park => {
                    // Parked sessions must not be cut: the instance keeps running while
                    // connections are open, as without parking, until its next wake.
                    tracing::warn!(instance = %self.config.name, error = %e, "cannot freeze the compute to park its idle connections; it keeps running while they are open");
                    self.install_route().await;
                    {
                        let mut inner = self.lock();
                        self.transition(&mut inner, State::Running(running));
                        inner.cannot_park = true;
                    }
                    let _ = tx.send(true);
                    return Err(PauseError::Busy(self.lock().active.total()));
                }
                Err(e) => {
                    tracing::warn!(instance = %self.config.name, error = %e, "cannot freeze the compute; stopping it instead");
                }
            }
        }
        self.stop_compute(running, tx).await;
        if let Some(store) = self.fleet.get() {
            self.fleet_finish(store.as_ref(), Phase::Paused, 0).await;
        }
        Ok(())
    }

    /// Stops `compute` (the instance is pausing) and records the instance paused.
    async fn stop_compute(&self, compute: Arc<dyn RunningCompute>, tx: watch::Sender<bool>) {
        compute.stop().await;
        {
            let mut inner = self.lock();
            self.transition(&mut inner, State::Paused);
        }
        let _ = tx.send(true);
        tracing::info!(instance = %self.config.name, "paused");
    }

    /// Pauses the instance after `idle_pause_after` without any connection, or parks its
    /// connections after `park_after` with every one between commands, until `stop` fires.
    /// Checks a few times per shortest period, so a pause comes at most a quarter period
    /// (capped at 1 s) late; while paused (or failed) it waits for a change of state instead.
    pub async fn pause_when_idle(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let idle_pause_after = self.config.idle_pause_after;
        let failed_wake_pause_after = self.config.failed_wake_pause_after.min(idle_pause_after);
        // At most `idle_pause_after`, as the configuration reads it.
        let park_after = self.config.park_after;
        let shortest = if self.config.park {
            failed_wake_pause_after.min(park_after)
        } else {
            failed_wake_pause_after
        };
        let tick = (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            // Without a compute there is nothing to watch: wait for the next change of state
            // (a permit is kept for a change made before this waits) rather than tick.
            if matches!(self.phase(), Phase::Paused | Phase::Failed) {
                tokio::select! {
                    () = self.state_changed.notified() => {}
                    () = stop.cancelled() => return,
                }
            }
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = stop.cancelled() => return,
            }
            if self.kernel.is_some() && self.phase() == Phase::Running {
                self.count_kernel_connections().await;
            }
            let due = {
                let mut inner = self.lock();
                // Direct connections whose clients have not spoken are not use; the pause
                // waits for them (below).
                let pre_login = inner.pre_login;
                // In a fleet other relays' logins are not known here: the full period.
                let unused = inner.active.total() == pre_login && inner.kernel_open == 0;
                let idle_after = if unused
                    && inner.logins_since_wake.only_refused()
                    && self.fleet.get().is_none()
                {
                    Some(failed_wake_pause_after)
                } else if unused {
                    Some(idle_pause_after)
                } else if self.parkable_but_for_pre_login(&inner) {
                    Some(park_after)
                } else {
                    None
                };
                let due = matches!(inner.state, State::Running(_))
                    && idle_after.is_some_and(|after| inner.idle_since.elapsed() >= after);
                // Due, but a client was greeted and may still answer: no pause cuts it, and no
                // new connection joins it on the direct route until the pause has been decided.
                inner.pause_waits_for_pre_login = due && pre_login > 0;
                due && !inner.pause_waits_for_pre_login
            };
            let due = due && self.fleet_idle().await;
            if due {
                // A connection may have arrived since the check; `pause` re-checks under the
                // lock and refuses (Busy) if so.
                let _ = self.pause(false, "idle").await;
            }
            // Parked sessions keep a compute frozen, not stopped: stopping would cut them.
            // Without `stop_after` a compute is frozen only for them, and stops once they
            // have all closed.
            let (frozen_long_enough, resumable) = {
                let inner = self.lock();
                let long_enough = matches!(inner.state, State::Frozen(_))
                    && inner.kernel_parked == 0
                    && self
                        .config
                        .stop_after
                        .is_none_or(|after| inner.since.elapsed() >= after);
                let open = inner.active.total();
                (
                    long_enough && open == 0,
                    long_enough
                        && open > 0
                        && self.config.stop_after.is_some()
                        && open == inner.resumable_conns,
                )
            };
            if frozen_long_enough {
                self.stop_frozen("frozen for stop_after").await;
            } else if resumable {
                self.stop_frozen_under_resumable_sessions().await;
            }
        }
    }

    /// At relay start: adopts a compute the driver finds still running (or still frozen, if
    /// the ledger says frozen) left by a previous relay, and reconciles the ledger. `last` is
    /// the ledger's last state for this instance: if it already was the adopted phase,
    /// adoption records nothing (billing simply continues); if it was billed but nothing runs
    /// now, the instance is recorded paused.
    pub async fn adopt_or_reconcile(self: &Arc<Self>, last: Option<Phase>) {
        let mut adopted = None;
        if last == Some(Phase::Frozen) {
            adopted = self.driver.adopt_frozen().await.map(|c| (c, Phase::Frozen));
        }
        if adopted.is_none() {
            adopted = match self.driver.adopt().await {
                // Adopted only if what greets there does not fail the proof of the key.
                Some(c) => self
                    .adopt_if_not_refused(c)
                    .await
                    .map(|c| (c, Phase::Running)),
                None => None,
            };
        }
        let billed_before = last.is_some_and(|p| p.billable() || p == Phase::Frozen);
        match adopted {
            Some((compute, phase)) => {
                let compute: Arc<dyn RunningCompute> = Arc::from(compute);
                if phase == Phase::Running {
                    self.install_route().await;
                    self.adopt_capacity(&compute).await;
                }
                let mut inner = self.lock();
                let state = if phase == Phase::Frozen {
                    State::Frozen(Arc::clone(&compute))
                } else {
                    State::Running(Arc::clone(&compute))
                };
                let continues = last == Some(phase)
                    || (phase == Phase::Running && last == Some(Phase::Resuming));
                if continues && self.config.capacity.is_none() {
                    inner.state = state;
                    self.state_changed.notify_one();
                    self.metrics.set_phase(&self.config.name, phase);
                } else {
                    // A new phase, or a capacity the ledger must know: one record.
                    self.transition(&mut inner, state);
                }
                inner.idle_since = tokio::time::Instant::now();
                // Whatever used it before this relay did, it was not only refused logins.
                inner.logins_since_wake.accepted = true;
                drop(inner);
                tokio::spawn(Arc::clone(self).watch_exit(Arc::clone(&compute)));
                tokio::spawn(Arc::clone(self).recheck_proof(compute));
            }
            None => {
                let mut inner = self.lock();
                if billed_before {
                    tracing::warn!(instance = %self.config.name, "the ledger says the compute runs but none was found; recording it paused now");
                    self.transition(&mut inner, State::Paused);
                } else {
                    self.metrics.set_phase(&self.config.name, Phase::Paused);
                }
                drop(inner);
                // Nothing runs until the next wake (the offload's cue).
                self.driver.idle();
            }
        }
    }

    /// Called when a running compute did not accept a connection. If it also fails a
    /// readiness probe it is treated as dead: stopped (so a hung process cannot hold the
    /// port) and the instance marked failed, so the next wake starts a fresh one.
    pub async fn report_unreachable(self: &Arc<Self>, why: &str) {
        self.stop_unless_it_greets(why, None).await;
    }

    /// Called when a running compute accepted a connection but then did not greet or answer
    /// it within `compute_timeout`, or dropped it. A busy compute (a storm of logins) may be
    /// slow rather than dead, so it gets a whole `compute_timeout` to greet a fresh probe;
    /// one that cannot is treated as [`Instance::report_unreachable`] treats a dead one.
    pub async fn report_unresponsive(self: &Arc<Self>, why: &str) {
        self.stop_unless_it_greets(why, Some(self.config.compute_timeout))
            .await;
    }

    /// Probes the running compute (within `patience`, else the readiness probe's own bound)
    /// and stops it if it does not greet. Only the compute that was probed is stopped: one
    /// started by a new wake while the probe waited is left alone.
    async fn stop_unless_it_greets(self: &Arc<Self>, why: &str, patience: Option<Duration>) {
        let probed = match &self.lock().state {
            State::Running(r) => Arc::clone(r),
            _ => return,
        };
        let target = ComputeTarget::of(&self.config);
        let greeted = match patience {
            Some(t) => readiness::probe_within(target, t).await.is_ok(),
            None => readiness::probe(target).await.is_ok(),
        };
        if greeted {
            return;
        }
        let (running, tx) = {
            let mut inner = self.lock();
            let State::Running(r) = &inner.state else {
                return;
            };
            if !Arc::ptr_eq(r, &probed) {
                return;
            }
            let r = Arc::clone(r);
            let (tx, rx) = watch::channel(false);
            self.transition(&mut inner, State::Pausing(rx));
            (r, tx)
        };
        tracing::warn!(instance = %self.config.name, why, "running compute is unreachable; stopping it");
        let _ = self.remove_route().await;
        running.stop().await;
        {
            let mut inner = self.lock();
            self.transition(
                &mut inner,
                State::Failed(Failure::Unreachable(why.to_string())),
            );
        }
        let _ = tx.send(true);
    }

    /// Stops the compute (relay shutdown): refuses new wakes, lets a wake in flight finish,
    /// then stops whatever runs.
    pub async fn shut_down(self: &Arc<Self>) {
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::Release);
        if self.fleet.get().is_some() {
            // Other relays may hold sessions on it; the fleet pauses it when all are idle.
            tracing::info!(instance = %self.config.name, state = self.state_name(), "leaving the compute to the fleet");
            return;
        }
        let pending = match &self.lock().state {
            State::Resuming(rx) => Some(rx.clone()),
            _ => None,
        };
        if let Some(mut rx) = pending {
            let _ = rx.wait_for(Option::is_some).await;
        }
        if self.pause(true, "relay shutdown").await.is_ok() {
            tracing::info!(instance = %self.config.name, "compute stopped for relay shutdown");
        }
        self.stop_frozen("relay shutdown").await;
    }

    fn transition(&self, inner: &mut Inner, to: State) {
        let phase = to.phase();
        if phase != Phase::Running {
            inner.cpu_sample = None;
        }
        // A pause that waited for pre-login connections has been decided, one way or another.
        inner.pause_waits_for_pre_login = false;
        if phase != Phase::Frozen {
            // Parked routed sessions are the compute's again: stop watching their sockets.
            if let Some(watch) = inner.routed_watch.take() {
                watch.cancel();
            }
            inner.kernel_parked = 0;
        }
        inner.state = to;
        self.state_changed.notify_one();
        if phase == Phase::Running {
            self.detaching
                .store(false, std::sync::atomic::Ordering::Release);
        }
        if !matches!(phase, Phase::Running | Phase::Resuming) {
            self.handover.clear();
        }
        if matches!(phase, Phase::Paused | Phase::Failed) {
            inner.ccu = None;
            inner.trust = trust::Trust::Unproven;
            inner.cannot_park = false;
        }
        inner.since_ms = crate::clock::now_ms();
        inner.since = tokio::time::Instant::now();
        self.metrics.set_phase(&self.config.name, phase);
        if self.config.capacity.is_some() {
            let running = matches!(phase, Phase::Running | Phase::Resuming);
            let ccu = inner.ccu.filter(|_| running).map_or(0.0, Ccu::as_f64);
            self.metrics.set_ccu(&self.config.name, ccu);
        }
        self.record(inner, phase);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every write under this lock is a whole assignment, so a poisoned lock (a panic
        // elsewhere while holding it) still guards a consistent value.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
