//! Lifecycle tests with a scripted driver: no processes, no sockets.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::driver::{Driver, RunningCompute};
use super::*;
use crate::config::{AuthMode, DriverConfig, InstanceConfig};
use crate::future::BoxFuture;
use crate::router::{KernelRoute, KernelRouteError};

/// What the scripted driver does on each start, in order.
#[derive(Debug, Clone)]
enum Step {
    /// Becomes ready after the delay.
    Ready(Duration),
    /// Fails after the delay.
    Exit(Duration),
    /// Never becomes ready.
    Hang,
}

struct ScriptedDriver {
    script: Mutex<VecDeque<Step>>,
    /// What happened, in order (shared with the computes and a scripted kernel route).
    log: Log,
    starts: Arc<AtomicUsize>,
    /// Sending `true` makes the current compute "exit".
    exit: watch::Sender<bool>,
    freezer: Freezer,
    /// Whether `adopt` finds a compute running.
    adoptable: bool,
}

/// What every compute of a scripted driver did to its freezer, and its stops.
#[derive(Clone, Default)]
struct Freezer {
    freezes: Arc<AtomicUsize>,
    thaws: Arc<AtomicUsize>,
    stops: Arc<AtomicUsize>,
    /// How long a freeze takes.
    freeze_takes: Arc<Mutex<Duration>>,
    /// Freezes fail (as one the kernel does not report done in time).
    freeze_fails: Arc<AtomicBool>,
}

/// Events of a test, in order: `start`, `stop`, `install`, `remove`.
type Log = Arc<Mutex<Vec<&'static str>>>;

struct ScriptedCompute {
    log: Log,
    exit: watch::Receiver<bool>,
    stopped: Arc<AtomicUsize>,
    freezer: Freezer,
}

impl Driver for ScriptedDriver {
    fn start(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>> {
        Box::pin(async move {
            self.starts.fetch_add(1, Ordering::SeqCst);
            self.log.lock().unwrap().push("start");
            let step = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .expect("script exhausted");
            self.exit.send_replace(false);
            let run = async {
                match step {
                    Step::Ready(d) => {
                        tokio::time::sleep(d).await;
                        Ok(Box::new(ScriptedCompute {
                            log: Arc::clone(&self.log),
                            exit: self.exit.subscribe(),
                            stopped: Arc::clone(&self.freezer.stops),
                            freezer: self.freezer.clone(),
                        }) as Box<dyn RunningCompute>)
                    }
                    Step::Exit(d) => {
                        tokio::time::sleep(d).await;
                        Err(WakeError::Exited("exit status: 1".into()))
                    }
                    Step::Hang => std::future::pending().await,
                }
            };
            tokio::time::timeout(timeout, run)
                .await
                .unwrap_or(Err(WakeError::Timeout(timeout)))
        })
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        if !self.adoptable {
            return self.adopt_none();
        }
        Box::pin(async move {
            Some(Box::new(ScriptedCompute {
                log: Arc::clone(&self.log),
                exit: self.exit.subscribe(),
                stopped: Arc::clone(&self.freezer.stops),
                freezer: self.freezer.clone(),
            }) as Box<dyn RunningCompute>)
        })
    }
}

impl ScriptedDriver {
    fn adopt_none(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async { None })
    }
}

impl RunningCompute for ScriptedCompute {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let mut rx = self.exit.clone();
            let _ = rx.wait_for(|e| *e).await;
            "exited".into()
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.log.lock().unwrap().push("stop");
            // Stopping takes a while, so races with a pause in progress are real.
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.stopped.fetch_add(1, Ordering::SeqCst);
        })
    }

    fn freeze(&self) -> BoxFuture<'_, Result<(), super::driver::CapacityError>> {
        Box::pin(async move {
            let takes = *self.freezer.freeze_takes.lock().unwrap();
            tokio::time::sleep(takes).await;
            if self.freezer.freeze_fails.load(Ordering::SeqCst) {
                self.log.lock().unwrap().push("freeze failed");
                return Err(super::driver::CapacityError::Cgroup(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the kernel did not report the cgroup frozen",
                )));
            }
            self.freezer.freezes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    fn thaw(&self) -> BoxFuture<'_, Result<(), super::driver::CapacityError>> {
        Box::pin(async move {
            self.log.lock().unwrap().push("thaw");
            self.freezer.thaws.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

fn instance(script: Vec<Step>) -> (Arc<Instance>, Arc<AtomicUsize>, watch::Sender<bool>) {
    let (inst, starts, exit, _) = build(script, None, None, Log::default());
    (inst, starts, exit)
}

/// An instance whose pauses freeze (`stop_after`), with its computes' freezer counts.
fn instance_with(
    script: Vec<Step>,
    stop_after: Option<Duration>,
) -> (
    Arc<Instance>,
    Arc<AtomicUsize>,
    watch::Sender<bool>,
    Freezer,
) {
    build(script, stop_after, None, Log::default())
}

/// A kernel route that logs installs and removals and reports scripted connection counts.
struct ScriptedRoute {
    log: Log,
    /// Counts `open_connections` returns, in order; the last one repeats.
    counts: Arc<Mutex<VecDeque<usize>>>,
}

impl KernelRoute for ScriptedRoute {
    fn install(&self) -> BoxFuture<'_, Result<(), KernelRouteError>> {
        self.log.lock().unwrap().push("install");
        Box::pin(async { Ok(()) })
    }

    fn remove(&self) -> BoxFuture<'_, Result<(), KernelRouteError>> {
        self.log.lock().unwrap().push("remove");
        Box::pin(async { Ok(()) })
    }

    fn open_connections(
        &self,
    ) -> BoxFuture<'_, Result<crate::router::conntrack::RoutedCount, KernelRouteError>> {
        let mut counts = self.counts.lock().unwrap();
        let n = if counts.len() > 1 {
            counts.pop_front().unwrap()
        } else {
            *counts.front().unwrap_or(&0)
        };
        // Every scripted connection has spoken.
        let count = crate::router::conntrack::RoutedCount {
            open: n,
            spoke: n,
            ..Default::default()
        };
        Box::pin(async move { Ok(count) })
    }
}

type Counts = Arc<Mutex<VecDeque<usize>>>;

/// An instance on a scripted kernel route whose conntrack counts are `counts`; the driver and
/// the route write one log.
fn routed_instance(
    script: Vec<Step>,
    counts: &[usize],
) -> (Arc<Instance>, Log, Counts, watch::Sender<bool>) {
    let log = Log::default();
    let counts: Counts = Arc::new(Mutex::new(counts.iter().copied().collect()));
    let route = ScriptedRoute {
        log: Arc::clone(&log),
        counts: Arc::clone(&counts),
    };
    let (inst, _starts, exit, _) = build(script, None, Some(Arc::new(route)), Arc::clone(&log));
    (inst, log, counts, exit)
}

fn build(
    script: Vec<Step>,
    stop_after: Option<Duration>,
    kernel: Option<Arc<dyn KernelRoute>>,
    log: Log,
) -> (
    Arc<Instance>,
    Arc<AtomicUsize>,
    watch::Sender<bool>,
    Freezer,
) {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    build_at(script, stop_after, kernel, log, addr, false, None)
}

/// [`build`] with the compute at `compute`; `adoptable`: the driver finds a compute running;
/// `park_after`: idle pauses park open connections after this long (`idle_pause_after` is 60 s).
fn build_at(
    script: Vec<Step>,
    stop_after: Option<Duration>,
    kernel: Option<Arc<dyn KernelRoute>>,
    log: Log,
    compute: SocketAddr,
    adoptable: bool,
    park_after: Option<Duration>,
) -> (
    Arc<Instance>,
    Arc<AtomicUsize>,
    watch::Sender<bool>,
    Freezer,
) {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let config = InstanceConfig {
        name: "t".into(),
        listen: Some(addr),
        compute,
        auth: AuthMode::Dual,
        proxy_protocol: false,
        resume_timeout: Duration::from_secs(2),
        handshake_timeout: Duration::from_secs(1),
        compute_timeout: Duration::from_secs(1),
        idle_pause_after: Duration::from_secs(60),
        failed_wake_pause_after: Duration::from_secs(10),
        on_relay_exit: crate::config::OnRelayExit::Pause,
        max_pending_connections: 16,
        health_check_users: Vec::new(),
        capacity: None,
        offload: None,
        stop_after,
        park: park_after.is_some(),
        park_after: park_after.unwrap_or(Duration::from_secs(60)),
        keepalive_queries: vec!["SELECT 1".into()],
        resumable_sessions: false,
        max_detached_sessions: 1024,
        force_reattach_every: None,
        kernel_splice: false,
        splice_below_tcp: false,
        route: crate::config::RouteMode::Pump,
        tls: None,
        require_secure_transport: false,
        compute_tls: crate::config::ComputeTlsMode::Off,
        compute_ca: None,
        compute_tls_name: None,
        compute_proof: crate::config::ComputeProofMode::Greeting,
        driver: DriverConfig::Process {
            command: vec!["x".into()],
            cwd: ".".into(),
            stop_grace: Duration::from_secs(1),
            env: Vec::new(),
            run_as: None,
        },
    };
    let starts = Arc::new(AtomicUsize::new(0));
    let (exit, _) = watch::channel(false);
    let freezer = Freezer::default();
    let driver = ScriptedDriver {
        script: Mutex::new(script.into()),
        log,
        starts: Arc::clone(&starts),
        exit: exit.clone(),
        freezer: freezer.clone(),
        adoptable,
    };
    let metrics = Arc::new(Metrics::default());
    (
        Instance::new(config, Box::new(driver), kernel, metrics, None),
        starts,
        exit,
        freezer,
    )
}

/// With `stop_after`, a pause freezes the compute; a wake thaws the same compute (no new
/// start); once frozen for `stop_after` it is stopped and the instance paused.
#[tokio::test(start_paused = true)]
async fn a_pause_freezes_a_wake_thaws_and_stop_after_stops() {
    let (inst, starts, _exit, freezer) = instance_with(
        vec![Step::Ready(Duration::ZERO), Step::Ready(Duration::ZERO)],
        Some(Duration::from_secs(10)),
    );
    inst.ensure_running().await.unwrap();
    inst.pause(false, "test").await.unwrap();
    assert_eq!(inst.phase(), Phase::Frozen);
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 1);
    assert_eq!(freezer.stops.load(Ordering::SeqCst), 0);

    let report = inst.ensure_running().await.unwrap();
    assert!(!report.was_running);
    assert_eq!(inst.phase(), Phase::Running);
    assert_eq!(freezer.thaws.load(Ordering::SeqCst), 1);
    assert_eq!(
        starts.load(Ordering::SeqCst),
        1,
        "thawed, not started again"
    );
    assert_eq!(inst.status().wakes, 2);

    inst.pause(false, "test").await.unwrap();
    assert_eq!(inst.phase(), Phase::Frozen);
    let stop = tokio_util::sync::CancellationToken::new();
    let idle = tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(inst.phase(), Phase::Frozen, "not before stop_after");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    stop.cancel();
    idle.await.unwrap();
    assert_eq!(freezer.stops.load(Ordering::SeqCst), 1);
    // The next wake starts a new compute.
    inst.ensure_running().await.unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 2);
}

/// A freeze that fails (the kernel did not report the cgroup frozen in time) may have frozen
/// the compute all the same: it is thawed before the stop that replaces it.
#[tokio::test(start_paused = true)]
async fn a_failed_freeze_thaws_the_compute_before_stopping_it() {
    let log = Log::default();
    let (inst, _starts, _exit, freezer) = build(
        vec![Step::Ready(Duration::ZERO)],
        Some(Duration::from_secs(600)),
        None,
        Arc::clone(&log),
    );
    freezer.freeze_fails.store(true, Ordering::SeqCst);
    inst.ensure_running().await.unwrap();
    inst.pause(false, "test").await.unwrap();
    assert_eq!(inst.phase(), Phase::Paused);
    assert_eq!(
        *log.lock().unwrap(),
        ["start", "freeze failed", "thaw", "stop"]
    );
}

/// A failed freeze under parked sessions: the compute is thawed before the instance is
/// running again and new connections route to it.
#[tokio::test(start_paused = true)]
async fn a_failed_freeze_under_parked_sessions_thaws_before_routing_to_the_compute() {
    let (inst, freezer) = parking_instance(true);
    freezer.freeze_fails.store(true, Ordering::SeqCst);
    inst.ensure_running().await.unwrap();
    let mut quiet = inst.hold(Route::Perceptron);
    quiet.mark_session();
    let _quiet = crate::watch::CommandWatch::new(&mut quiet, 0, 0, 2);
    assert!(matches!(
        inst.pause(false, "test").await,
        Err(PauseError::Busy(1))
    ));
    assert_eq!(inst.phase(), Phase::Running);
    assert!(inst.routes_direct());
    assert_eq!(freezer.thaws.load(Ordering::SeqCst), 1);
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 0);
}

/// The relay's shutdown stops a frozen compute too.
#[tokio::test(start_paused = true)]
async fn shutdown_stops_a_frozen_compute() {
    let (inst, _starts, _exit, freezer) = instance_with(
        vec![Step::Ready(Duration::ZERO)],
        Some(Duration::from_secs(600)),
    );
    inst.ensure_running().await.unwrap();
    inst.pause(false, "test").await.unwrap();
    assert_eq!(inst.phase(), Phase::Frozen);
    inst.shut_down().await;
    assert_eq!(inst.phase(), Phase::Paused);
    assert_eq!(freezer.stops.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn many_waiters_cause_one_start() {
    let (inst, starts, _exit) = instance(vec![Step::Ready(Duration::from_millis(300))]);
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let inst = Arc::clone(&inst);
            tokio::spawn(async move { inst.ensure_running().await })
        })
        .collect();
    for w in waiters {
        assert!(!w.await.unwrap().unwrap().was_running);
    }
    assert_eq!(starts.load(Ordering::SeqCst), 1);
    assert_eq!(inst.state_name(), "running");
    assert!(inst.ensure_running().await.unwrap().was_running);
    assert_eq!(starts.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn failure_reaches_every_waiter_and_next_call_retries() {
    let (inst, starts, _exit) = instance(vec![
        Step::Exit(Duration::from_millis(100)),
        Step::Ready(Duration::from_millis(10)),
    ]);
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let inst = Arc::clone(&inst);
            tokio::spawn(async move { inst.ensure_running().await })
        })
        .collect();
    for w in waiters {
        assert!(matches!(w.await.unwrap(), Err(WakeError::Exited(_))));
    }
    assert_eq!(starts.load(Ordering::SeqCst), 1);
    assert_eq!(inst.state_name(), "failed");
    inst.ensure_running().await.unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn hanging_compute_times_out_within_resume_timeout() {
    let (inst, _starts, _exit) = instance(vec![Step::Hang, Step::Ready(Duration::ZERO)]);
    let t0 = tokio::time::Instant::now();
    let err = inst.ensure_running().await.unwrap_err();
    assert!(
        matches!(err, WakeError::Timeout(d) if d == Duration::from_secs(2)),
        "{err:?}"
    );
    assert!(t0.elapsed() <= Duration::from_millis(2_100));
    // The wake task has cleaned up by the time the waiter gives up, or just after.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Failed);
    assert!(inst.status().failure.unwrap().contains("not ready"));
    inst.ensure_running().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn compute_exit_fails_the_instance_and_next_call_wakes_it() {
    let (inst, starts, exit) = instance(vec![
        Step::Ready(Duration::ZERO),
        Step::Ready(Duration::ZERO),
    ]);
    inst.ensure_running().await.unwrap();
    exit.send_replace(true);
    for _ in 0..100 {
        if inst.phase() == Phase::Failed {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(inst.state_name(), "failed");
    inst.ensure_running().await.unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn pause_is_refused_while_connections_are_open_unless_forced() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    inst.ensure_running().await.unwrap();
    assert!(inst.routes_direct());
    let guard = inst.hold_direct().expect("running: direct route");
    assert_eq!(inst.pause(false, "test").await, Err(PauseError::Busy(1)));
    assert_eq!(inst.phase(), Phase::Running);
    inst.pause(true, "test").await.unwrap();
    assert_eq!(inst.phase(), Phase::Paused);
    drop(guard);
    assert!(!inst.routes_direct(), "paused: perceptron route");
    assert!(inst.hold_direct().is_none());
}

/// A direct connection counts from its accept (routing and counting are one step): an idle
/// pause that falls due while its client has not yet answered the compute's greeting waits
/// for it; closed without a session, it leaves the idle clock where it was.
#[tokio::test(start_paused = true)]
async fn a_direct_connection_holds_off_an_idle_pause_from_its_accept() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let not_yet_spoken = inst.hold_direct().expect("running: direct route");
    // Twice `idle_pause_after` (60 s).
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "no pause under a connection not yet logged in"
    );
    drop(not_yet_spoken);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        inst.phase(),
        Phase::Paused,
        "the idle clock was not restarted"
    );
    stop.cancel();
}

/// Silent sockets one after another cannot hold off a due idle pause: once it is due, it
/// waits only for the connections already greeted, and new ones go to the perceptron.
#[tokio::test(start_paused = true)]
async fn a_due_idle_pause_waits_for_greeted_connections_and_routes_new_ones_elsewhere() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let first = inst.hold_direct().expect("running: direct route");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(inst.phase(), Phase::Running);
    assert!(
        inst.hold_direct().is_none(),
        "the due pause sends new connections elsewhere"
    );
    drop(first);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    stop.cancel();
}

/// A direct connection whose client has spoken is an open connection like any other.
#[tokio::test(start_paused = true)]
async fn a_direct_connection_whose_client_spoke_keeps_the_instance_running() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut spoke = inst.hold_direct().expect("running: direct route");
    spoke.client_spoke();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(inst.phase(), Phase::Running);
    assert!(
        inst.hold_direct().is_some(),
        "no pause waits: new connections go direct"
    );
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn pause_while_resuming_is_refused() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::from_millis(500))]);
    let waker = {
        let inst = Arc::clone(&inst);
        tokio::spawn(async move { inst.ensure_running().await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        inst.pause(true, "test").await,
        Err(PauseError::NotRunning(Phase::Resuming))
    );
    waker.await.unwrap().unwrap();
    assert_eq!(inst.phase(), Phase::Running);
}

#[tokio::test(start_paused = true)]
async fn connection_arriving_while_pausing_waits_then_wakes_again() {
    let (inst, starts, _exit) = instance(vec![
        Step::Ready(Duration::ZERO),
        Step::Ready(Duration::ZERO),
    ]);
    inst.ensure_running().await.unwrap();
    let pauser = {
        let inst = Arc::clone(&inst);
        tokio::spawn(async move { inst.pause(false, "test").await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Pausing);
    assert!(!inst.routes_direct(), "pausing: no direct route");
    assert!(inst.hold_direct().is_none());
    let report = inst.ensure_running().await.unwrap();
    assert!(!report.was_running);
    pauser.await.unwrap().unwrap();
    assert_eq!(inst.phase(), Phase::Running);
    assert_eq!(starts.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn pauses_when_idle_but_not_while_a_session_is_open() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "a long idle session keeps it running"
    );
    drop(session);
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "not idle for the whole period yet"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_refused_login_does_not_restart_the_idle_clock() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    tokio::time::sleep(Duration::from_secs(50)).await;
    // A login held while the compute checks it, then refused (never `mark_session`).
    let refused = inst.hold(Route::Perceptron);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(inst.phase(), Phase::Running, "held while it is checked");
    drop(refused);
    // Idle since the wake 70 s ago: the pause comes at the next check, not 60 s later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    stop.cancel();
}

/// A wake that served only refused logins pauses after `failed_wake_pause_after` (10 s here),
/// not `idle_pause_after` (60 s); one accepted login since the wake restores the full period,
/// and the next wake starts afresh.
#[tokio::test(start_paused = true)]
async fn a_wake_for_refused_logins_only_pauses_after_the_short_grace() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO); 2]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let guess = inst.hold(Route::Perceptron);
    inst.note_refused_login();
    drop(guess);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(inst.phase(), Phase::Running, "within the grace");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(inst.phase(), Phase::Paused, "10 s after the refused login");

    inst.ensure_running().await.unwrap();
    let guess = inst.hold(Route::Perceptron);
    inst.note_refused_login();
    drop(guess);
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    drop(session);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "an accepted login: the full period"
    );
    tokio::time::sleep(Duration::from_secs(32)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn shut_down_refuses_new_wakes() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    inst.ensure_running().await.unwrap();
    inst.shut_down().await;
    assert_eq!(inst.phase(), Phase::Paused);
    assert!(matches!(
        inst.ensure_running().await,
        Err(WakeError::ShuttingDown)
    ));
}

#[tokio::test(start_paused = true)]
async fn kernel_route_goes_in_before_running_and_out_before_the_compute_stops() {
    let (inst, log, _counts, _exit) = routed_instance(vec![Step::Ready(Duration::ZERO)], &[0]);
    assert_eq!(inst.status().kernel_route_installed, Some(false));
    inst.ensure_running().await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["start", "install"]);
    assert_eq!(inst.status().kernel_route_installed, Some(true));
    inst.pause(false, "test").await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["start", "install", "remove", "stop"]);
    assert_eq!(inst.status().kernel_route_installed, Some(false));
    assert_eq!(inst.phase(), Phase::Paused);
}

#[tokio::test(start_paused = true)]
async fn pause_is_abandoned_when_a_connection_slipped_in_before_the_route_went() {
    // Idle at the first count; one routed connection at the count after the removal.
    let (inst, log, _counts, _exit) = routed_instance(vec![Step::Ready(Duration::ZERO)], &[0, 1]);
    inst.ensure_running().await.unwrap();
    assert_eq!(inst.pause(false, "test").await, Err(PauseError::Busy(1)));
    assert_eq!(inst.phase(), Phase::Running);
    assert_eq!(
        *log.lock().unwrap(),
        ["start", "install", "remove", "install"],
        "the route is back and the compute never stopped"
    );
    assert_eq!(inst.status().direct_connections, 1);
    assert_eq!(inst.status().kernel_connections, 1);
}

#[tokio::test(start_paused = true)]
async fn routed_connections_keep_the_instance_awake_until_they_close() {
    let (inst, log, counts, _exit) = routed_instance(vec![Step::Ready(Duration::ZERO)], &[2]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "two routed connections are open"
    );
    assert_eq!(inst.status().kernel_connections, 2);
    *counts.lock().unwrap() = [0].into();
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "idle clock starts when they close"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    assert_eq!(*log.lock().unwrap(), ["start", "install", "remove", "stop"]);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_forced_pause_cuts_routed_connections() {
    let (inst, log, _counts, _exit) = routed_instance(vec![Step::Ready(Duration::ZERO)], &[3]);
    inst.ensure_running().await.unwrap();
    assert_eq!(inst.pause(false, "test").await, Err(PauseError::Busy(3)));
    inst.pause(true, "test").await.unwrap();
    assert_eq!(inst.phase(), Phase::Paused);
    assert_eq!(*log.lock().unwrap(), ["start", "install", "remove", "stop"]);
}

#[tokio::test(start_paused = true)]
async fn a_compute_that_exits_loses_its_route() {
    let (inst, log, _counts, exit) = routed_instance(vec![Step::Ready(Duration::ZERO)], &[0]);
    inst.ensure_running().await.unwrap();
    exit.send_replace(true);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Failed);
    assert_eq!(*log.lock().unwrap(), ["start", "install", "remove"]);
    assert_eq!(inst.status().kernel_route_installed, Some(false));
}

/// A proof check over a fresh one-key ring, and the ring.
fn proof_check() -> (trust::ProofCheck, authplugin::KeyRing) {
    let key = authplugin::PerceptronKey::generate(
        authplugin::KeyId::new("k1").unwrap(),
        &mut rand::rngs::OsRng,
    );
    let ring = authplugin::KeyRing::new(vec![key]).unwrap();
    let check = trust::ProofCheck {
        ring: Arc::new(authplugin::key_file::LiveKeyRing::fixed(ring.clone())),
        greetings: Arc::new(Mutex::new(authplugin::compute_proof::greeting_guard())),
    };
    (check, ring)
}

/// A compute address that greets every connection, proving `ring` in the greeting as
/// server-shim does, or (`None`) without a proof.
async fn greeting_server(ring: Option<authplugin::KeyRing>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let b = authplugin::Scramble::generate_timed(
                &mut rand::rngs::OsRng,
                crate::clock::now_ms(),
            );
            let mut g = crate::profile::ComputeProfile::server_shim_default().greeting(7, &b);
            if let Some(ring) = &ring {
                let base = String::from_utf8(g.server_version).unwrap();
                g.server_version =
                    authplugin::compute_proof::greeting_version(&base, ring, &b).into_bytes();
            }
            let mut ps = crate::packet_io::PacketStream::new(s, 1 << 20);
            let _ = ps.write_packet(0, &g.to_bytes()).await;
        }
    });
    addr
}

/// Where proofs are checked, a woken compute takes no direct and no kernel route until a
/// relayed login proves the key; one that fails the proof in a login is stopped and the
/// instance failed, its route removed.
#[tokio::test]
async fn an_unproven_compute_is_routed_only_through_the_perceptron() {
    let (inst, log, _counts, _exit) = routed_instance(vec![Step::Ready(Duration::ZERO)], &[0]);
    inst.check_proofs_with(proof_check().0);
    inst.ensure_running().await.unwrap();
    assert_eq!(inst.phase(), Phase::Running);
    assert!(!inst.routes_direct(), "no direct route before a proof");
    assert!(!log.lock().unwrap().contains(&"install"), "{log:?}");

    inst.mark_proven(true).await;
    assert!(inst.routes_direct());
    assert!(log.lock().unwrap().contains(&"install"), "{log:?}");
    // Proven once: a second proof installs nothing more.
    inst.mark_proven(false).await;

    inst.report_unproven("test").await;
    assert_eq!(inst.phase(), Phase::Failed);
    assert!(!inst.routes_direct());
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["start", "install", "remove", "stop"]);
}

/// Without a proof check (switch mode) a woken compute is routed to directly at once.
#[tokio::test]
async fn without_a_proof_check_a_woken_compute_is_routed_directly() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    inst.ensure_running().await.unwrap();
    assert!(inst.routes_direct());
}

/// Before: whatever greeted on the compute address at relay start was adopted and routed to
/// directly. Now a greeting that proves the key is trusted, one without a proof is adopted
/// but not routed to directly, and one whose proof fails is not adopted (and stopped).
#[tokio::test]
async fn adoption_trusts_a_compute_only_as_far_as_its_greeting_proves_the_key() {
    let (check, ring) = proof_check();
    let (_, other_ring) = proof_check();
    for (greets_with, phase, direct) in [
        (Some(ring.clone()), Phase::Running, true),
        (None, Phase::Running, false),
        (Some(other_ring), Phase::Paused, false),
    ] {
        let proves = greets_with.is_some();
        let addr = greeting_server(greets_with).await;
        let log = Log::default();
        let (inst, _starts, _exit, freezer) =
            build_at(Vec::new(), None, None, Arc::clone(&log), addr, true, None);
        inst.check_proofs_with(check.clone());
        inst.adopt_or_reconcile(None).await;
        assert_eq!(inst.phase(), phase, "proof: {proves}");
        assert_eq!(inst.routes_direct(), direct, "proof: {proves}");
        let stopped = phase == Phase::Paused;
        assert_eq!(freezer.stops.load(Ordering::SeqCst), usize::from(stopped));
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_direct_login_does_not_restart_the_idle_clock() {
    let (inst, _starts, _exit) = instance(vec![Step::Ready(Duration::ZERO)]);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    tokio::time::sleep(Duration::from_secs(50)).await;
    // A direct connection whose login the compute refuses (never `mark_session`).
    let refused = inst.hold_direct().expect("running: direct route");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(inst.phase(), Phase::Running, "held while it logs in");
    drop(refused);
    // Idle since the wake 70 s ago: the pause comes at the next check, not 60 s later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(inst.phase(), Phase::Paused);
    stop.cancel();
}

/// An instance that parks (`park = true`, no `stop_after`) after 60 s, as long as its
/// `idle_pause_after`, with its freezer counts.
fn parking_instance(park: bool) -> (Arc<Instance>, Freezer) {
    parking_instance_after(park.then_some(Duration::from_secs(60)))
}

/// An instance that parks after `park_after`, if any (its `idle_pause_after` is 60 s).
fn parking_instance_after(park_after: Option<Duration>) -> (Arc<Instance>, Freezer) {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let (inst, _starts, _exit, freezer) = build_at(
        vec![Step::Ready(Duration::ZERO)],
        None,
        None,
        Log::default(),
        addr,
        false,
        park_after,
    );
    (inst, freezer)
}

const QUERY: &[u8] = b"\x09\0\0\0\x03SELECT 2";
/// The instance's keepalive query.
const KEEPALIVE: &[u8] = b"\x09\0\0\0\x03SELECT 1";
const PING: &[u8] = b"\x01\0\0\0\x0e";
const OK: &[u8] = b"\x07\0\0\x01\0\0\0\x02\0\0\0";

/// A session the kernel splice carries was between commands when it was spliced, and the
/// relay sees none of its commands since: it keeps the compute running (a statement may be in
/// progress there) until it is taken back, as a quiet one is.
#[tokio::test(start_paused = true)]
async fn a_session_still_in_the_kernel_splice_is_never_parked() {
    let (inst, freezer) = parking_instance(true);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut held = inst.hold(Route::Perceptron);
    held.mark_session();
    let commands = crate::watch::CommandWatch::new(&mut held, 0, 0, 2);
    drop(commands);
    let spliced = inst.spliced_session();
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        inst.phase(),
        Phase::Running,
        "busy, as far as the relay knows"
    );
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 0);
    // Taken back between commands: parked at the next look.
    spliced.set_in_kernel(false);
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(inst.phase(), Phase::Frozen);
    drop(held);
    stop.cancel();
}

/// Open sessions between commands are parked on a frozen compute after `idle_pause_after`
/// (60 s here); a command on one thaws the same compute; a command in progress keeps it
/// running however long it takes; pings do not restart the idle clock.
#[tokio::test(start_paused = true)]
async fn sessions_between_commands_are_parked_and_a_command_thaws_them() {
    let (inst, freezer) = parking_instance(true);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut quiet = inst.hold(Route::Perceptron);
    quiet.mark_session();
    let _quiet = crate::watch::CommandWatch::new(&mut quiet, 0, 0, 2);
    let mut used = inst.hold(Route::Direct);
    used.mark_session();
    let mut used = crate::watch::CommandWatch::new(&mut used, 0, 0, 2);

    assert_eq!(up(&mut used, QUERY, true), None);
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(inst.phase(), Phase::Running, "a query in progress");
    down(&mut used, OK);
    tokio::time::sleep(Duration::from_secs(40)).await;
    // A ping 40 s in is answered, and is not use.
    assert_eq!(up(&mut used, PING, true), None, "not parked: forwarded");
    down(&mut used, OK);
    tokio::time::sleep(Duration::from_secs(22)).await;
    assert_eq!(inst.phase(), Phase::Frozen, "parked 60 s after the query");
    assert_eq!(inst.status().parked_connections, 2);
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 1);
    assert_eq!(freezer.stops.load(Ordering::SeqCst), 0);

    // A ping is answered by the relay with the session's status flags: still frozen.
    for _ in 0..3 {
        assert_eq!(
            up(&mut used, PING, true).as_deref(),
            Some(OK),
            "answered while parked"
        );
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Frozen);
    assert_eq!(freezer.thaws.load(Ordering::SeqCst), 0);

    // A command thaws the same compute.
    assert_eq!(up(&mut used, QUERY, true), None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Running);
    assert_eq!(freezer.thaws.load(Ordering::SeqCst), 1);
    assert_eq!(inst.status().parked_connections, 0);
    down(&mut used, OK);
    tokio::time::sleep(Duration::from_secs(62)).await;
    assert_eq!(inst.phase(), Phase::Frozen, "parked again");
    stop.cancel();
}

/// `park_after` shorter than `idle_pause_after`: a quiet pool is parked after `park_after`
/// (10 s here) counted from its last command, while an instance with no connection at all
/// still pauses only after `idle_pause_after` (60 s).
#[tokio::test(start_paused = true)]
async fn a_quiet_pool_is_parked_after_park_after_and_no_pool_waits_idle_pause_after() {
    let (inst, freezer) = parking_instance_after(Some(Duration::from_secs(10)));
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut held = inst.hold(Route::Perceptron);
    held.mark_session();
    let mut pool = crate::watch::CommandWatch::new(&mut held, 0, 0, 2);
    assert_eq!(up(&mut pool, QUERY, true), None);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(inst.phase(), Phase::Running, "a query in progress");
    down(&mut pool, OK);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(inst.phase(), Phase::Running, "8 s after the query");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(inst.phase(), Phase::Frozen, "13 s after the query");
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 1);

    // The pool's command thaws it; the pool closes: no connection now, so the instance
    // waits the full idle period before it pauses.
    assert_eq!(up(&mut pool, QUERY, true), None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Running);
    down(&mut pool, OK);
    drop(pool);
    drop(held);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(inst.phase(), Phase::Running, "no connection, 30 s");
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert_ne!(inst.phase(), Phase::Running, "no connection, 65 s");
    stop.cancel();
}

/// Without `park`, an open session keeps the instance running, as it always did; and a
/// connection whose commands nobody follows is never parked.
#[tokio::test(start_paused = true)]
async fn without_park_or_a_watch_open_sessions_keep_the_instance_running() {
    let (inst, _) = parking_instance(false);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    let watch = crate::watch::CommandWatch::new(&mut session, 0, 0, 2);
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(inst.phase(), Phase::Running);
    drop(watch);
    stop.cancel();

    let (inst, freezer) = parking_instance(true);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut unwatched = inst.hold(Route::Direct);
    unwatched.mark_session();
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(inst.phase(), Phase::Running);
    assert_eq!(inst.pause(false, "test").await, Err(PauseError::Busy(1)));
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 0);
    stop.cancel();
}

/// A command sent while the freeze is under way (the pause decided on an idle connection, the
/// freezer not done yet) is answered: the compute is thawed as soon as the freeze completes.
#[tokio::test(start_paused = true)]
async fn a_command_sent_during_the_freeze_thaws_the_compute_right_after() {
    let (inst, freezer) = parking_instance(true);
    *freezer.freeze_takes.lock().unwrap() = Duration::from_secs(1);
    inst.ensure_running().await.unwrap();
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    let mut session = crate::watch::CommandWatch::new(&mut session, 0, 0, 2);
    let pause = tokio::spawn({
        let inst = Arc::clone(&inst);
        async move { inst.pause(false, "test").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(inst.phase(), Phase::Pausing, "the freeze is under way");
    assert_eq!(up(&mut session, QUERY, true), None, "forwarded");
    pause.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Running, "thawed for the command");
    assert_eq!(freezer.freezes.load(Ordering::SeqCst), 1);
    assert_eq!(freezer.thaws.load(Ordering::SeqCst), 1);
    down(&mut session, OK);
}

/// A keepalive query is not use, and once the compute has answered it on a connection, the
/// relay answers it there while parked with that same answer (the session's flags unchanged).
#[tokio::test(start_paused = true)]
async fn a_keepalive_query_is_not_use_and_is_answered_while_parked() {
    let (inst, freezer) = parking_instance(true);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&inst).pause_when_idle(stop.clone()));
    inst.ensure_running().await.unwrap();
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    let mut session = crate::watch::CommandWatch::new(&mut session, 0, 0, 2);
    assert_eq!(up(&mut session, QUERY, true), None);
    down(&mut session, OK);
    tokio::time::sleep(Duration::from_secs(40)).await;
    // Forwarded while running, and learnt; it does not restart the idle clock.
    assert_eq!(up(&mut session, KEEPALIVE, true), None);
    down(&mut session, OK);
    tokio::time::sleep(Duration::from_secs(22)).await;
    assert_eq!(inst.phase(), Phase::Frozen);
    // Parked: answered with the compute's own answer, the compute left frozen.
    assert_eq!(up(&mut session, KEEPALIVE, true).as_deref(), Some(OK));
    // Not when something is on its way to the client: then it goes to the compute.
    assert_eq!(up(&mut session, KEEPALIVE, false), None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inst.phase(), Phase::Running, "a forwarded keepalive thaws");
    down(&mut session, OK);
    assert_eq!(freezer.thaws.load(Ordering::SeqCst), 1);
    stop.cancel();
}

/// A session meant for the kernel splice after two commands: the compute's chunk that ends
/// the second command's response is taken (not while the client's bytes wait to be written),
/// with the status flags it leaves, and only once; pings do not count.
#[tokio::test(start_paused = true)]
async fn the_response_that_ends_the_chosen_command_is_taken_for_the_kernel() {
    use crate::passthrough::{Observer as _, Reaction};
    let (inst, _freezer) = parking_instance(true);
    inst.ensure_running().await.unwrap();
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    let mut session = crate::watch::CommandWatch::new(&mut session, 0, 0, 2);
    session.splice_after(2);
    assert_eq!(up(&mut session, QUERY, true), None);
    down(&mut session, OK);
    assert_eq!(up(&mut session, PING, true), None);
    assert_eq!(
        session.server_bytes(&mut OK.to_vec(), true),
        Reaction::Forward
    );
    assert_eq!(up(&mut session, QUERY, true), None);
    // The response's first part is forwarded; its end, offered, is taken.
    let in_trans = [7, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0];
    let (head, tail) = in_trans.split_at(5);
    assert_eq!(
        session.server_bytes(&mut head.to_vec(), true),
        Reaction::Forward
    );
    assert_eq!(session.take_chunk(), None);
    assert_eq!(
        session.server_bytes(&mut tail.to_vec(), false),
        Reaction::Forward
    );
    assert_eq!(up(&mut session, QUERY, true), None);
    assert_eq!(
        session.server_bytes(&mut in_trans.to_vec(), true),
        Reaction::Take
    );
    let (chunk, flags) = session.take_chunk().unwrap();
    assert_eq!((&chunk[..], flags), (&in_trans[..], 3));
    // Once.
    assert_eq!(up(&mut session, QUERY, true), None);
    assert_eq!(
        session.server_bytes(&mut OK.to_vec(), true),
        Reaction::Forward
    );
}

/// A ticketed session's prepared statements are kept with the ids the client was given; after
/// a reattach that gave them other ids, the client's commands reach the compute's statements
/// and a new statement never takes an id the client holds.
#[tokio::test(start_paused = true)]
async fn prepared_statements_are_kept_and_translated_after_a_reattach() {
    use crate::passthrough::{Observer as _, Reaction};
    fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        authplugin::packet::write_packet(&mut p, seq, payload);
        p
    }
    // COM_STMT_PREPARE_OK for `id`, 0 columns, 0 parameters (no definitions follow).
    fn prepare_ok(id: u32) -> Vec<u8> {
        let mut p = vec![0x00];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
        framed(1, &p)
    }
    fn execute(id: u32) -> Vec<u8> {
        let mut p = vec![0x17];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&[0, 1, 0, 0, 0]);
        framed(0, &p)
    }
    let (inst, _) = parking_instance(true);
    inst.ensure_running().await.unwrap();
    let mut session = inst.hold(Route::Perceptron);
    session.mark_session();
    let mut session = crate::watch::CommandWatch::new(&mut session, 0, 0, 2);
    session.ticketed();
    let prepare = framed(0, b"\x16DELETE FROM t");
    for id in [4, 5] {
        assert_eq!(up(&mut session, &prepare, true), None);
        down(&mut session, &prepare_ok(id));
    }
    let ids: Vec<u32> = session.statements().iter().map(|s| s.id).collect();
    assert_eq!(ids, [4, 5]);
    assert_eq!(session.statements()[0].payload, b"\x16DELETE FROM t");
    // A close gets no reply: the prepare right behind it in the same read is still followed.
    let mut close_then_prepare = framed(0, &[0x19, 4, 0, 0, 0]);
    close_then_prepare.extend_from_slice(&prepare);
    assert_eq!(up(&mut session, &close_then_prepare, true), None);
    down(&mut session, &prepare_ok(3));
    let ids: Vec<u32> = session.statements().iter().map(|s| s.id).collect();
    assert_eq!(ids, [3, 5]);
    // The client prepares 4 again, as its driver would after closing it.
    assert_eq!(up(&mut session, &prepare, true), None);
    down(&mut session, &prepare_ok(4));
    // Before any reattach the bytes go on as they are.
    let mut bytes = execute(5);
    assert_eq!(session.client_bytes(&mut bytes, true), Reaction::Forward);
    assert_eq!(bytes, execute(5));
    down(&mut session, &framed(1, &[0, 0, 0, 2, 0, 0, 0]));
    // The new compute prepared them as 1, 2 and 3.
    session.reattached(&[(3, 3), (4, 1), (5, 2)], Some(7));
    let mut bytes = execute(5);
    assert_eq!(session.client_bytes(&mut bytes, true), Reaction::Forward);
    assert_eq!(bytes, execute(2));
    down(&mut session, &framed(1, &[0, 0, 0, 2, 0, 0, 0]));
    // The compute numbers the next one 4; 4 is the client's, so the client gets 6.
    assert_eq!(up(&mut session, &prepare, true), None);
    let mut reply = prepare_ok(4);
    assert_eq!(session.server_bytes(&mut reply, false), Reaction::Forward);
    assert_eq!(reply, prepare_ok(6));
    let ids: Vec<u32> = session.statements().iter().map(|s| s.id).collect();
    assert_eq!(ids, [3, 4, 5, 6], "kept under the client's id");
    let mut bytes = execute(6);
    assert_eq!(session.client_bytes(&mut bytes, true), Reaction::Forward);
    assert_eq!(bytes, execute(4));
    down(&mut session, &framed(1, &[0, 0, 0, 2, 0, 0, 0]));
    // An id cut by the end of a read is held back (the pump presents it again, first, with
    // the next read) and translated whole.
    let whole = execute(5);
    let mut first = whole[..7].to_vec();
    assert_eq!(session.client_bytes(&mut first, true), Reaction::Hold(3));
    let mut next = whole[4..].to_vec();
    assert_eq!(session.client_bytes(&mut next, true), Reaction::Forward);
    assert_eq!([&first[..4], &next[..]].concat(), execute(2));
    down(&mut session, &framed(1, &[0, 0, 0, 2, 0, 0, 0]));
    // The same for a COM_STMT_PREPARE_OK whose header ends a read.
    assert_eq!(up(&mut session, &prepare, true), None);
    let reply = prepare_ok(5);
    let mut head = reply[..4].to_vec();
    assert_eq!(session.server_bytes(&mut head, false), Reaction::Hold(0));
    let mut rest = reply[4..].to_vec();
    assert_eq!(session.server_bytes(&mut rest, false), Reaction::Forward);
    assert_eq!([&head[..], &rest[..]].concat(), prepare_ok(7));
    let ids: Vec<u32> = session.statements().iter().map(|s| s.id).collect();
    assert_eq!(ids, [3, 4, 5, 6, 7]);
    // A reply to COM_STMT_PREPARE that is neither OK nor ERR cannot be followed.
    assert_eq!(up(&mut session, &prepare, true), None);
    let mut odd = framed(1, &[0xFE, 0, 0, 0, 0]);
    assert_eq!(session.server_bytes(&mut odd, false), Reaction::End);
}

/// What the pump would do with the client's `bytes`: `Some(reply)` when the watch answers.
fn up(
    watch: &mut crate::watch::CommandWatch<'_>,
    bytes: &[u8],
    may_answer: bool,
) -> Option<Vec<u8>> {
    use crate::passthrough::{Observer as _, Reaction};
    match watch.client_bytes(&mut bytes.to_vec(), may_answer) {
        Reaction::Answer(reply) => Some(reply),
        Reaction::Forward => None,
        Reaction::End | Reaction::Hold(_) | Reaction::Take => {
            panic!("the watch ended, held or took the chunk")
        }
    }
}

/// Feeds the compute's `bytes`.
fn down(watch: &mut crate::watch::CommandWatch<'_>, bytes: &[u8]) {
    use crate::passthrough::{Observer as _, Reaction};
    assert_eq!(
        watch.server_bytes(&mut bytes.to_vec(), false),
        Reaction::Forward
    );
}
