//! The driver seam (architecture.md §4, §6): how a compute is started, watched and stopped. The
//! process driver is the embedded default; exec, http and Kubernetes drivers plug in here.

pub mod cgroup;
pub mod exec;
pub mod http;
mod mover;
pub mod offloading;
pub mod process;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::capacity::Ccu;
use crate::compute_conn::ComputeTarget;
use crate::control::readiness;

/// Why an instance could not be woken.
#[derive(Debug, Clone)]
pub enum WakeError {
    /// The driver could not start the compute (e.g. the program does not exist).
    Driver(String),
    /// The compute exited before it became ready.
    Exited(String),
    /// The compute was not ready within `resume_timeout`.
    Timeout(Duration),
    /// The relay is shutting down.
    ShuttingDown,
    /// The fleet's state store is unreachable: waking without it could start a second compute
    /// or race a pause, so the relay refuses (the client may retry).
    StoreUnavailable(String),
}

impl WakeError {
    /// Metric label.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Driver(_) => "wake_driver_failed",
            Self::Exited(_) => "wake_compute_exited",
            Self::Timeout(_) => "wake_timeout",
            Self::ShuttingDown => "shutting_down",
            Self::StoreUnavailable(_) => "wake_store_unavailable",
        }
    }

    /// The part of the reason a client may see (no paths, no addresses).
    #[must_use]
    pub fn user_facing(&self) -> String {
        match self {
            Self::Driver(_) => "the compute could not be started".into(),
            Self::Exited(_) => "the compute stopped during start-up".into(),
            Self::Timeout(d) => format!("the compute was not ready within {}s", d.as_secs_f64()),
            Self::ShuttingDown => "the relay is shutting down".into(),
            Self::StoreUnavailable(_) => {
                "the relay cannot reach the fleet's state store; try again".into()
            }
        }
    }
}

impl std::fmt::Display for WakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Driver(e) => write!(f, "driver failed: {e}"),
            Self::Exited(e) => write!(f, "compute exited before it was ready: {e}"),
            Self::Timeout(d) => write!(f, "compute not ready within {d:?}"),
            Self::ShuttingDown => f.write_str("relay shutting down"),
            Self::StoreUnavailable(e) => write!(f, "fleet state store unavailable: {e}"),
        }
    }
}

impl std::error::Error for WakeError {}

/// Why a running compute's capacity could not be changed (a resize, a freeze or a thaw).
#[derive(Debug)]
pub enum CapacityError {
    /// This driver has no control of that kind (the name of the operation).
    Unsupported(&'static str),
    /// The compute runs outside a cgroup of the relay's (adopted without one).
    NoCgroup,
    /// The cgroup refused.
    Cgroup(std::io::Error),
    /// The exec driver has no `scale` command configured.
    NoScaleCommand,
    /// The external control (exec command, HTTP control plane) failed or refused.
    External(Box<dyn std::error::Error + Send + Sync>),
}

impl std::fmt::Display for CapacityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsupported(what) => write!(f, "this driver cannot {what} a compute"),
            Self::NoCgroup => {
                f.write_str("the compute has no cgroup (an adopted compute without one)")
            }
            Self::Cgroup(e) => write!(f, "cgroup: {e}"),
            Self::NoScaleCommand => f.write_str("no scale command is configured"),
            Self::External(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CapacityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Cgroup(e) => Some(e),
            Self::External(e) => Some(e.as_ref()),
            Self::Unsupported(_) | Self::NoCgroup | Self::NoScaleCommand => None,
        }
    }
}

use crate::future::BoxFuture;

/// Starts computes.
pub trait Driver: Send + Sync {
    /// Starts the compute and resolves once it is ready (it greets on its address), or fails
    /// after `timeout`. A compute that is not ready by then is stopped by the driver itself.
    fn start(
        &self,
        timeout: std::time::Duration,
    ) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>>;

    /// Finds a compute this driver started before the relay restarted and that still runs
    /// and greets, so a relay restart never restarts (or double-bills) it.
    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>>;

    /// Finds a compute this driver froze before the relay restarted and that is still
    /// frozen (it cannot greet until thawed). Drivers that cannot freeze find none.
    fn adopt_frozen(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async { None })
    }

    /// At relay start, no compute was found to adopt: none exists until the next start.
    fn idle(&self) {}

    /// Where the instance's data is, with `[instance.offload]`.
    fn storage(&self) -> Option<offloading::Storage> {
        None
    }

    /// Offloads the data now rather than `after` the last compute's end.
    ///
    /// # Errors
    /// Without `[instance.offload]`, or while a compute exists.
    fn offload_now(&self) -> Result<offloading::OffloadNow, offloading::OffloadNowError> {
        Err(offloading::OffloadNowError::NotConfigured)
    }
}

/// A compute that was started and became ready.
pub trait RunningCompute: Send + Sync {
    /// Resolves when the compute has gone, with a description of how it ended.
    fn wait_exit(&self) -> BoxFuture<'_, String>;
    /// Stops the compute: politely, then by force after the driver's grace period.
    fn stop(&self) -> BoxFuture<'_, ()>;

    /// Gives the compute `ccu` of capacity, live; a driver without capacity control refuses.
    fn resize(&self, ccu: Ccu) -> BoxFuture<'_, Result<(), CapacityError>> {
        let _ = ccu;
        Box::pin(async { Err(CapacityError::Unsupported("resize")) })
    }

    /// The CPU time the compute has used in all, if the driver can tell (the autoscaler's
    /// input).
    fn cpu_usage(&self) -> BoxFuture<'_, Option<Duration>> {
        Box::pin(async { None })
    }

    /// Freezes the compute's processes, keeping their memory and sockets; resolves once the
    /// kernel reports them frozen.
    fn freeze(&self) -> BoxFuture<'_, Result<(), CapacityError>> {
        Box::pin(async { Err(CapacityError::Unsupported("freeze")) })
    }

    /// Thaws a frozen compute; resolves once it runs again.
    fn thaw(&self) -> BoxFuture<'_, Result<(), CapacityError>> {
        Box::pin(async { Err(CapacityError::Unsupported("thaw")) })
    }

    /// The compute's process, if the driver started it on this host (parking routed
    /// sessions watches its sockets).
    fn pid(&self) -> Option<u32> {
        None
    }

    /// The connection the start's readiness probe opened and read the greeting from, once,
    /// for the first login ([`crate::compute_conn::Handover`]).
    fn take_opened(&self) -> Option<crate::compute_conn::OpenedConnection> {
        None
    }
}

/// Resolves with the exit description once `exited` holds one (`if_closed` when the watcher is
/// gone without saying).
pub async fn exit_reason(
    mut exited: tokio::sync::watch::Receiver<Option<String>>,
    if_closed: &str,
) -> String {
    match exited.wait_for(Option::is_some).await {
        Ok(v) => v.clone().unwrap_or_default(),
        Err(_) => if_closed.to_owned(),
    }
}

/// A driver whose compute runs outside the relay (exec, http): something else starts and
/// stops it on request and says whether it runs. Every such driver is a [`Driver`]: start =
/// request a start, then wait for the greeting (stopping what the start began if none comes);
/// adopt = a compute that runs and greets.
pub trait ExternalControl: Clone + Send + Sync + 'static {
    /// Why a request to the external control failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The instance, for log lines.
    fn instance(&self) -> &str;
    /// Where the compute greets once it runs.
    fn compute(&self) -> ComputeTarget;
    /// Asks for the compute to start; returns once it is starting.
    fn request_start(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Asks for the compute to stop.
    fn request_stop(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Whether the compute runs now.
    fn is_running(&self) -> impl Future<Output = bool> + Send;
    /// The running compute, watched the way this driver can tell it has gone.
    fn watched(&self) -> Box<dyn RunningCompute>;
    /// Asks for the compute's capacity to become `ccu` (Kubernetes: an in-place pod resize).
    fn request_scale(&self, ccu: Ccu) -> impl Future<Output = Result<(), CapacityError>> + Send;
    /// The CPU time the compute has used in all, if the external control reports it.
    fn cpu_used(&self) -> impl Future<Output = Option<Duration>> + Send;
}

impl<D: ExternalControl> Driver for D {
    fn start(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let gave_up = match tokio::time::timeout_at(deadline, self.request_start()).await {
                // The start outlived `timeout` and is dropped here (the exec driver kills its
                // command); whatever it had begun (a daemon it forked, a container the
                // control plane is creating) runs on unless stop follows.
                Err(_) => WakeError::Timeout(timeout),
                // A start that failed may have begun something too before it failed.
                Ok(Err(e)) => WakeError::Driver(e.to_string()),
                Ok(Ok(())) => {
                    if readiness::wait_ready(self.compute(), deadline).await {
                        return Ok(self.watched());
                    }
                    WakeError::Timeout(timeout)
                }
            };
            // Every start this driver gives up on is followed by stop, so nothing it began is
            // left running unwatched and unbilled.
            tracing::warn!(instance = %self.instance(), error = %gave_up, "start given up; running stop");
            if let Err(e) = self.request_stop().await {
                tracing::warn!(instance = %self.instance(), error = %e, "stop after a failed start failed");
            }
            Err(gave_up)
        })
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async move {
            if self.is_running().await && readiness::probe(self.compute()).await.is_ok() {
                tracing::info!(instance = %self.instance(), "adopted a running compute");
                Some(self.watched())
            } else {
                None
            }
        })
    }
}

/// A compute the relay did not start as a child, watched by polling: after `failures_to_exit`
/// "not running" answers in a row it counts as gone. A deliberate stop ends the watch quietly.
pub struct Watched<D> {
    driver: D,
    exited: tokio::sync::watch::Receiver<Option<String>>,
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl<D: ExternalControl> Watched<D> {
    /// Starts watching `driver`'s compute every `interval`; `reason` is the exit description.
    pub fn start(
        driver: &D,
        interval: Duration,
        failures_to_exit: u32,
        reason: &'static str,
    ) -> Box<dyn RunningCompute> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (tx, exited) = tokio::sync::watch::channel(None);
        let stopping = std::sync::Arc::new(AtomicBool::new(false));
        let stop_flag = std::sync::Arc::clone(&stopping);
        let watcher = driver.clone();
        tokio::spawn(async move {
            let mut failures = 0;
            loop {
                tokio::time::sleep(interval).await;
                if stop_flag.load(Ordering::Acquire) {
                    return;
                }
                if watcher.is_running().await {
                    failures = 0;
                    continue;
                }
                failures += 1;
                if failures >= failures_to_exit {
                    let _ = tx.send(Some(reason.to_owned()));
                    return;
                }
            }
        });
        Box::new(Self {
            driver: driver.clone(),
            exited,
            stopping,
        })
    }
}

impl<D: ExternalControl> RunningCompute for Watched<D> {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(exit_reason(self.exited.clone(), "stopped"))
    }

    fn resize(&self, ccu: Ccu) -> BoxFuture<'_, Result<(), CapacityError>> {
        Box::pin(self.driver.request_scale(ccu))
    }

    fn cpu_usage(&self) -> BoxFuture<'_, Option<Duration>> {
        Box::pin(self.driver.cpu_used())
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.stopping
                .store(true, std::sync::atomic::Ordering::Release);
            if let Err(e) = self.driver.request_stop().await {
                tracing::error!(instance = %self.driver.instance(), error = %e, "stop failed; the compute may still run");
            }
        })
    }
}

/// Builds the driver for an instance's configuration, wrapped for `[instance.offload]`.
///
/// # Errors
/// [`offloading::MoverError`]: the offload store cannot be opened.
pub fn driver_for(
    cfg: &crate::config::InstanceConfig,
    state_dir: &Path,
    ledger: Option<Arc<crate::ledger::Ledger>>,
) -> Result<Box<dyn Driver>, offloading::MoverError> {
    let driver = base_driver_for(cfg, state_dir);
    let Some(offload) = &cfg.offload else {
        return Ok(driver);
    };
    let mover = match (&offload.mover, &cfg.driver) {
        (crate::config::OffloadMover::Relay(archive), _) => {
            offloading::Mover::archive(&cfg.name, archive, state_dir)?
        }
        (
            crate::config::OffloadMover::Commands { store },
            crate::config::DriverConfig::Exec(spec),
        ) => offloading::Mover::Commands {
            exec: Box::new(exec::ExecDriver {
                instance: cfg.name.clone(),
                compute: ComputeTarget::of(cfg),
                spec: spec.clone(),
            }),
            // Checked at load: the exec driver with [instance.offload] has both.
            offload: spec.offload.clone().unwrap_or_default(),
            restore: spec.restore.clone().unwrap_or_default(),
            store: store.clone(),
            marker: state_dir.join("offloaded").join(&cfg.name),
        },
        (crate::config::OffloadMover::Commands { .. }, _) => {
            return Err(offloading::MoverError::CommandsWithoutExec);
        }
    };
    Ok(Box::new(offloading::OffloadingDriver {
        inner: driver,
        plan: offloading::OffloadPlan::new(
            &cfg.name,
            offload.after,
            mover,
            matches!(cfg.driver, crate::config::DriverConfig::Process { .. })
                .then(|| process_pid_file(cfg, state_dir)),
            ledger,
        ),
    }))
}

/// Where the process driver records its compute.
fn process_pid_file(cfg: &crate::config::InstanceConfig, state_dir: &Path) -> std::path::PathBuf {
    state_dir.join("pids").join(format!("{}.pid", cfg.name))
}

fn base_driver_for(cfg: &crate::config::InstanceConfig, state_dir: &Path) -> Box<dyn Driver> {
    match &cfg.driver {
        crate::config::DriverConfig::Process {
            command,
            cwd,
            stop_grace,
            env,
            run_as,
        } => Box::new(process::ProcessDriver {
            instance: cfg.name.clone(),
            command: command.clone(),
            cwd: cwd.clone(),
            env: env.clone(),
            run_as: *run_as,
            compute: ComputeTarget::of(cfg),
            stop_grace: *stop_grace,
            pid_file: process_pid_file(cfg, state_dir),
            cgroup: (cfg.capacity.is_some() || cfg.stop_after.is_some() || cfg.park).then(|| {
                process::CgroupPlan {
                    root: cgroup::ROOT.into(),
                    name: cgroup::name_for(&cfg.name, state_dir),
                    limits: cfg.capacity.map(|c| (c.resume, c.max)),
                    // CPU limits hold from the start; freezing alone (stop_after, parking)
                    // places the compute at its first freeze, off the wake's path (moving a
                    // process into a cgroup costs milliseconds on cgroup v1).
                    required: cfg.capacity.is_some(),
                }
            }),
        }),
        crate::config::DriverConfig::Exec(exec) => Box::new(exec::ExecDriver {
            instance: cfg.name.clone(),
            compute: ComputeTarget::of(cfg),
            spec: exec.clone(),
        }),
        crate::config::DriverConfig::Http(http) => Box::new(http::HttpDriver {
            instance: cfg.name.clone(),
            compute: ComputeTarget::of(cfg),
            spec: http.clone(),
        }),
    }
}
