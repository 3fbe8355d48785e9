//! The process driver, the embedded default: the compute is a child process of the relay.
//! Started with the configured command, ready when its address greets, stopped by SIGTERM and
//! then SIGKILL after the grace period. Its stdout and stderr become relay log lines tagged
//! with the instance. Every line the child prints during a start also triggers a readiness
//! probe at once (servers announce "ready" right after they listen), so the wake does not
//! wait out a polling interval; the probe schedule remains for servers that say nothing.
//!
//! The child's identity is kept in `state_dir/pids/<instance>.pid` while it runs: its pid, its
//! start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) and its executable
//! (`/proc/<pid>/exe`). A relay that restarts (after a crash, or with `on_relay_exit =
//! "leave"`) adopts a compute only if a live process has that pid, that start time, that
//! executable and the configured command line, and its address greets; it is then watched and
//! stopped by pid. A pid the kernel has recycled for another process (even one with the same
//! command line) has another start time, so it is never adopted nor signalled. A pid file
//! without a start time (written by an older relay) is not trusted.
//!
//! With `[instance.capacity]` or `stop_after`, the child is moved into a cgroup of its own
//! right after it is spawned (before it can listen), which gives the instance live CPU and
//! memory limits, the autoscaler's CPU readings and the freezer ([`super::cgroup`]).
//! With parking alone (`park`), it is moved there at its first freeze instead, off the
//! wake's path; a compute that cannot be placed then is not parked.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::{Notify, watch};

use super::cgroup::Cgroup;
use super::{CapacityError, Driver, RunningCompute, WakeError};
use crate::capacity::Ccu;
use crate::control::readiness;
use crate::future::BoxFuture;
use crate::sys::listener_owner;

/// How often an adopted (non-child) compute is checked for exit.
const ADOPTED_POLL: Duration = Duration::from_millis(200);

/// How often a previous relay's compute being stopped is checked for exit.
const LEFTOVER_POLL: Duration = Duration::from_millis(20);

/// The variables of the relay's environment a compute inherits (with the locale's `LC_*`):
/// what a program needs to find its files, speak the locale and log. Anything else it needs is
/// the instance driver's `env`.
pub const INHERITED_ENV: [&str; 10] = [
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "RUST_LOG",
    "RUST_BACKTRACE",
];

/// `PATH` for a compute when the relay has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Starts the compute as a child process.
#[derive(Debug, Clone)]
pub struct ProcessDriver {
    /// The instance, for log lines.
    pub instance: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Working directory of the child.
    pub cwd: PathBuf,
    /// `env`: what the child gets beyond [`INHERITED_ENV`].
    pub env: Vec<(String, String)>,
    /// `user` and `group`: whom the child runs as (`None`: the relay's user).
    pub run_as: Option<crate::config::RunAs>,
    /// Where the compute listens.
    pub compute: crate::compute_conn::ComputeTarget,
    /// SIGTERM → SIGKILL grace.
    pub stop_grace: Duration,
    /// Where the pid file lives.
    pub pid_file: PathBuf,
    /// The compute's cgroup, when the instance scales or freezes.
    pub cgroup: Option<CgroupPlan>,
}

/// Where a compute's cgroup goes and what it starts with.
#[derive(Debug, Clone)]
pub struct CgroupPlan {
    /// The cgroup mount (normally [`super::cgroup::ROOT`]).
    pub root: PathBuf,
    /// The cgroup's name ([`super::cgroup::name_for`]).
    pub name: String,
    /// The capacity a wake starts with and the ceiling, when the instance has
    /// `[instance.capacity]`; without it the cgroup only freezes.
    pub limits: Option<(Ccu, Ccu)>,
    /// Whether the compute may not run without it (`[instance.capacity]`, `stop_after`);
    /// parking alone does without, and the instance then keeps running while connections
    /// are open, as it always did.
    pub required: bool,
}

/// A compute this relay started (a child) or adopted (by pid).
#[derive(Debug)]
struct ProcessCompute {
    pid: u32,
    /// `Some(description)` once the process has exited.
    exited: watch::Receiver<Option<String>>,
    grace: Duration,
    instance: String,
    /// Its cgroup and the instance's ceiling, once it is in one (shared with the task that
    /// removes the cgroup when the process exits).
    cgroup: Arc<OnceLock<(Cgroup, Ccu)>>,
    /// Where it goes at its first freeze, when that can wait (parking alone). Moving a process
    /// into a cgroup costs milliseconds on cgroup v1 (7 ms measured, the cpu hierarchy's
    /// migration), which would double a cold start if paid on the wake's path.
    lazy: Option<CgroupPlan>,
    /// The readiness probe's connection, for the first login ([`RunningCompute::take_opened`]).
    opened: std::sync::Mutex<Option<crate::compute_conn::OpenedConnection>>,
}

impl Driver for ProcessDriver {
    fn start(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let spoke = Arc::new(Notify::new());
            let child = self.spawn(&spoke)?;
            let mut exited = child.exited.clone();
            let mut attempt = 0;
            let mut refused = false;
            loop {
                if let Some(reason) = exited.borrow().clone() {
                    return Err(WakeError::Exited(reason));
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(instance = %self.instance, pid = child.pid, "compute not ready in time; killing it");
                    child.kill_now().await;
                    return Err(WakeError::Timeout(timeout));
                }
                match tokio::time::timeout_at(deadline, self.probe(child.pid)).await {
                    Ok(Ok((opened, Some(false)))) => {
                        drop(opened);
                        // Someone else greets on the compute's address: never hand it a login.
                        tracing::warn!(instance = %self.instance, pid = child.pid, addr = %self.compute.addr, "another process listens on the compute address; waiting for the compute's own listener");
                    }
                    Ok(Ok((opened, owner))) => {
                        if owner.is_none() {
                            // Not in this network namespace's socket table, or /proc cannot
                            // say: whoever greets is taken for the compute, and the log says so.
                            tracing::warn!(instance = %self.instance, pid = child.pid, addr = %self.compute.addr, "cannot tell whether the listener on the compute address is the compute's own (another network namespace or host?); taking the greeting as the compute's");
                        }
                        tracing::info!(instance = %self.instance, pid = child.pid, "compute ready");
                        if !self.compute.proxy_protocol {
                            *child.opened.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(opened);
                        }
                        return Ok(Box::new(child) as Box<dyn RunningCompute>);
                    }
                    Ok(Err(why @ readiness::ProbeError::Refused(_))) if !refused => {
                        // Not "not ready yet": a compute that refuses the relay's host refuses
                        // it until someone changes its accounts. Said once per wake.
                        refused = true;
                        tracing::warn!(instance = %self.instance, pid = child.pid, %why, "the compute answers the relay's connections with an error in place of its greeting (MariaDB: 1130, no account for the relay's host; 1040, too many connections; 1129, the host blocked); still probing until the resume timeout");
                    }
                    Ok(Err(why)) => {
                        tracing::trace!(instance = %self.instance, %why, "compute not ready yet");
                    }
                    Err(_) => continue,
                }
                // Wait for the next probe, but probe at once when the child prints a line
                // (a permit is kept if it printed during the probe) and stop if it exits.
                let next = tokio::time::Instant::now() + readiness::backoff(attempt);
                tokio::select! {
                    () = tokio::time::sleep_until(deadline.min(next)) => {}
                    () = spoke.notified() => {}
                    _ = exited.changed() => {}
                }
                attempt += 1;
            }
        })
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async move {
            let recorded = read_identity(&self.pid_file)?;
            let pid = recorded.pid;
            if !recorded.is_running(&self.command) {
                if recorded.is_alive() {
                    // The very process a previous relay started (same pid, same start time),
                    // now running another executable or command line: a wrapper that exec'd
                    // the server after the pid file was written. It cannot be adopted, and
                    // left alone it would run unaccounted for, holding the compute's address.
                    tracing::warn!(instance = %self.instance, pid, "the compute a previous relay started still runs but now runs another program; stopping it instead of adopting it");
                    self.stop_leftover(&recorded).await;
                } else {
                    tracing::info!(instance = %self.instance, pid, "stale pid file (no such process, or another one under its pid); not adopting");
                }
                let _ = std::fs::remove_file(&self.pid_file);
                return None;
            }
            if let Err(why) = readiness::probe(self.compute).await {
                // A previous relay died during its wake (the compute is still starting) or
                // the compute hangs. Stopped, not left to run unaccounted for: the next login
                // starts a fresh one.
                tracing::warn!(instance = %self.instance, pid, %why, "compute process runs but does not greet; stopping it instead of adopting it");
                self.stop_leftover(&recorded).await;
                let _ = std::fs::remove_file(&self.pid_file);
                return None;
            }
            if listener_owner::owned_by(pid, self.compute.addr) == Some(false) {
                tracing::warn!(instance = %self.instance, pid, addr = %self.compute.addr, "another process listens on the compute address; not adopting");
                return None;
            }
            tracing::info!(instance = %self.instance, pid, "adopted a running compute");
            Some(self.adopted(pid))
        })
    }

    fn adopt_frozen(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async move {
            let recorded = read_identity(&self.pid_file)?;
            let pid = recorded.pid;
            let plan = self.cgroup.as_ref()?;
            let cgroup = Cgroup::existing(&plan.root, &plan.name)?;
            // Frozen, it cannot greet: its identity and its place in its frozen cgroup are
            // what prove it is the compute this relay froze.
            if !recorded.is_running(&self.command)
                || !cgroup.holds(pid)
                || !cgroup.is_frozen().unwrap_or(false)
            {
                return None;
            }
            tracing::info!(instance = %self.instance, pid, "adopted a frozen compute");
            Some(self.adopted(pid))
        })
    }
}

impl ProcessDriver {
    /// One readiness probe of the child `pid`: its greeting, and whether the socket listening
    /// on the compute address is the child's ([`listener_owner`]; `None`: `/proc` cannot
    /// tell). The owner is looked up while the greeting is on its way: the connect succeeded,
    /// so the listener exists, and the look (0.2 ms of `/proc`) no longer adds to the wake.
    async fn probe(
        &self,
        pid: u32,
    ) -> Result<(crate::compute_conn::OpenedConnection, Option<bool>), readiness::ProbeError> {
        let timeout = readiness::PROBE_READ_TIMEOUT;
        let stream = readiness::connect(self.compute, timeout).await?;
        let greeting = readiness::read_greeting(stream, timeout);
        let owner = async { listener_owner::owned_by(pid, self.compute.addr) };
        // The greeting is polled first, so its read is armed before `/proc` is read.
        let (greeted, owner) = tokio::join!(greeting, owner);
        greeted.map(|(_, opened)| (opened, owner))
    }

    /// A compute of a previous relay, watched by polling its pid; its cgroup is reattached.
    fn adopted(&self, pid: u32) -> Box<dyn RunningCompute> {
        let cell = Arc::new(OnceLock::new());
        if let Some(plan) = &self.cgroup {
            if let Some(cgroup) = Cgroup::existing(&plan.root, &plan.name).filter(|c| c.holds(pid))
            {
                let _ = cell.set((cgroup, ceiling_of(plan)));
            }
        }
        let lazy = self.cgroup.clone().filter(|plan| !plan.required);
        let (tx, rx) = watch::channel(None);
        let pid_file = self.pid_file.clone();
        let leftover = Arc::clone(&cell);
        tokio::spawn(async move {
            while pid_alive(pid) {
                tokio::time::sleep(ADOPTED_POLL).await;
            }
            let _ = std::fs::remove_file(&pid_file);
            if let Some((c, _)) = leftover.get() {
                c.remove();
            }
            let _ = tx.send(Some("adopted process exited".into()));
        });
        Box::new(ProcessCompute {
            pid,
            exited: rx,
            grace: self.stop_grace,
            instance: self.instance.clone(),
            cgroup: cell,
            lazy,
            opened: std::sync::Mutex::new(None),
        })
    }

    /// Stops a process a previous relay started (not a child of this one): SIGTERM, then
    /// SIGKILL after the grace period. Each signal goes only to the recorded process (pid and
    /// start time), never to a process that took over its pid.
    async fn stop_leftover(&self, id: &ProcessIdentity) {
        let Ok(raw) = i32::try_from(id.pid) else {
            return;
        };
        // A frozen process does not act on signals: thaw it first.
        if let Some(cgroup) = self
            .cgroup
            .as_ref()
            .and_then(|plan| Cgroup::existing(&plan.root, &plan.name))
            .filter(|c| c.holds(id.pid) && c.is_frozen().unwrap_or(false))
        {
            let _ = cgroup.thaw().await;
        }
        for (signal, within) in [
            (Signal::SIGTERM, self.stop_grace),
            (Signal::SIGKILL, Duration::from_secs(5)),
        ] {
            if !id.is_alive() {
                return;
            }
            let _ = kill(Pid::from_raw(raw), signal);
            let deadline = tokio::time::Instant::now() + within;
            while id.is_alive() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(LEFTOVER_POLL).await;
            }
        }
        if id.is_alive() {
            tracing::error!(instance = %self.instance, pid = id.pid, "a previous relay's compute survived SIGKILL");
        }
    }

    /// The child's environment: [`INHERITED_ENV`] (and the locale's `LC_*`) from the relay's,
    /// then the instance's `env`.
    fn child_env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                INHERITED_ENV.contains(&name.as_ref()) || name.starts_with("LC_")
            })
            .collect();
        if !env.iter().any(|(name, _)| name == "PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        env.extend(self.env.iter().map(|(k, v)| (k.into(), v.into())));
        env
    }

    /// Spawns the command; `spoke` is notified for every line the child prints.
    fn spawn(&self, spoke: &Arc<Notify>) -> Result<ProcessCompute, WakeError> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| WakeError::Driver("empty command".into()))?;
        let mut command = Command::new(program);
        if let Some(run_as) = self.run_as {
            // Its own user and group (the relay's supplementary groups are dropped with
            // them): a compute runs tenants' SQL and must not read the relay's keys, its
            // credentials or other instances' data.
            command.uid(run_as.uid).gid(run_as.gid);
        }
        let mut child = command
            .args(args)
            .current_dir(&self.cwd)
            // Nothing of the relay's environment but the few variables a program needs to
            // run: the relay's may hold its store's credentials (AWS_SECRET_ACCESS_KEY), and a
            // compute runs tenants' SQL (LOAD_FILE('/proc/self/environ') on MariaDB).
            .env_clear()
            .envs(self.child_env())
            // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground
            // group) reaches the relay only, which then stops the compute itself, after the
            // drain. In the relay's group the compute used to exit first, cutting the sessions
            // the drain was waiting for.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| WakeError::Driver(format!("cannot start {program}: {e}")))?;
        let pid = child.id().unwrap_or_default();
        tracing::info!(instance = %self.instance, pid, program = %program, "compute spawned");
        let cell = Arc::new(OnceLock::new());
        let placed = match &self.cgroup {
            Some(plan) if plan.required => place(plan, pid).map(|c| {
                let _ = cell.set(c);
            }),
            _ => Ok(()),
        };
        match placed {
            Ok(()) => {}
            Err(e) => {
                // Limits and freezing are part of the instance's contract: no compute without
                // them.
                let _ = child.start_kill();
                return Err(WakeError::Driver(format!(
                    "cannot place the compute in its cgroup (the relay needs root and cgroup \
                     support for [instance.capacity] and stop_after): {e}"
                )));
            }
        };
        // `spawn` returns once the exec has succeeded, so /proc shows the compute's own
        // executable, not the relay's.
        match ProcessIdentity::of(pid)
            .ok_or_else(|| std::io::Error::other("cannot read /proc for it"))
            .and_then(|id| write_identity(&self.pid_file, &id))
        {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(instance = %self.instance, error = %e, "cannot write the pid file; a relay restart will not adopt this compute");
            }
        }
        if let Some(out) = child.stdout.take() {
            tokio::spawn(forward_lines(
                self.instance.clone(),
                pid,
                out,
                spoke.clone(),
            ));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(forward_lines(
                self.instance.clone(),
                pid,
                err,
                spoke.clone(),
            ));
        }
        let (tx, rx) = watch::channel(None);
        let pid_file = self.pid_file.clone();
        let leftover = Arc::clone(&cell);
        tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(status) => status.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            if read_identity(&pid_file).is_some_and(|id| id.pid == pid) {
                let _ = std::fs::remove_file(&pid_file);
            }
            if let Some((c, _)) = leftover.get() {
                c.remove();
            }
            let _ = tx.send(Some(how));
        });
        Ok(ProcessCompute {
            pid,
            exited: rx,
            grace: self.stop_grace,
            instance: self.instance.clone(),
            cgroup: cell,
            lazy: self.cgroup.clone().filter(|plan| !plan.required),
            opened: std::sync::Mutex::new(None),
        })
    }
}

/// The instance's ceiling under `plan` (the largest capacity without `[instance.capacity]`).
fn ceiling_of(plan: &CgroupPlan) -> Ccu {
    plan.limits.map_or(crate::capacity::MAX, |(_, max)| max)
}

/// Moves process `pid` into the cgroup of `plan` (created if missing) and sets its starting
/// capacity.
fn place(plan: &CgroupPlan, pid: u32) -> std::io::Result<(Cgroup, Ccu)> {
    let cgroup = Cgroup::create(&plan.root, &plan.name)?;
    if let Some((start, max)) = plan.limits {
        cgroup.resize(start, max)?;
    }
    cgroup.add(pid)?;
    Ok((cgroup, ceiling_of(plan)))
}

impl ProcessCompute {
    fn signal(&self, sig: Signal) {
        // Only signal a process we have not yet seen exit, so a recycled pid is never hit.
        if self.exited.borrow().is_none() {
            if let Ok(pid) = i32::try_from(self.pid) {
                let _ = kill(Pid::from_raw(pid), sig);
            }
        }
    }

    async fn wait_gone(&self, within: Duration) -> bool {
        let mut rx = self.exited.clone();
        tokio::time::timeout(within, rx.wait_for(Option::is_some))
            .await
            .is_ok()
    }

    async fn kill_now(&self) {
        self.thaw_for_signals().await;
        self.signal(Signal::SIGKILL);
        let _ = self.wait_gone(Duration::from_secs(5)).await;
    }

    /// A frozen process does not act on signals (v1 freezer): thaw it first.
    async fn thaw_for_signals(&self) {
        if let Some((cgroup, _)) = self.cgroup.get() {
            if cgroup.is_frozen().unwrap_or(false) {
                if let Err(e) = cgroup.thaw().await {
                    tracing::warn!(instance = %self.instance, pid = self.pid, error = %e, "cannot thaw the compute to stop it");
                }
            }
        }
    }

    fn cgroup(&self) -> Result<&(Cgroup, Ccu), CapacityError> {
        self.cgroup.get().ok_or(CapacityError::NoCgroup)
    }
}

impl RunningCompute for ProcessCompute {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(super::exit_reason(self.exited.clone(), "unknown"))
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.thaw_for_signals().await;
            self.signal(Signal::SIGTERM);
            if !self.wait_gone(self.grace).await {
                tracing::warn!(instance = %self.instance, pid = self.pid, "compute ignored SIGTERM; killing it");
                self.kill_now().await;
            }
        })
    }

    fn resize(&self, ccu: Ccu) -> BoxFuture<'_, Result<(), CapacityError>> {
        Box::pin(async move {
            let (cgroup, ceiling) = self.cgroup()?;
            cgroup
                .resize(ccu.min(*ceiling), *ceiling)
                .map_err(CapacityError::Cgroup)
        })
    }

    fn cpu_usage(&self) -> BoxFuture<'_, Option<Duration>> {
        let used = self.cgroup.get().and_then(|(c, _)| c.cpu_usage().ok());
        Box::pin(async move { used })
    }

    fn freeze(&self) -> BoxFuture<'_, Result<(), CapacityError>> {
        Box::pin(async move {
            if let (None, Some(plan)) = (self.cgroup.get(), &self.lazy) {
                let placed = place(plan, self.pid).map_err(CapacityError::Cgroup)?;
                let _ = self.cgroup.set(placed);
            }
            self.cgroup()?
                .0
                .freeze()
                .await
                .map_err(CapacityError::Cgroup)
        })
    }

    fn thaw(&self) -> BoxFuture<'_, Result<(), CapacityError>> {
        Box::pin(async move { self.cgroup()?.0.thaw().await.map_err(CapacityError::Cgroup) })
    }

    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn take_opened(&self) -> Option<crate::compute_conn::OpenedConnection> {
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

async fn forward_lines(
    instance: String,
    pid: u32,
    stream: impl AsyncRead + Unpin,
    spoke: Arc<Notify>,
) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        // The compute's output may echo client input (user names): escaped, one line each.
        tracing::info!(target: "compute", instance = %instance, pid, "{}", crate::logsafe::Escaped(line.as_bytes()));
        spoke.notify_one();
    }
}

/// What identifies one process for as long as the machine runs: a pid is reused, a pid with
/// its start time is not.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcessIdentity {
    pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks from boot to the process's start.
    start_time: u64,
    /// `/proc/<pid>/exe`.
    exe: PathBuf,
}

impl ProcessIdentity {
    /// The identity of the live process `pid`, from `/proc`.
    fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(Self {
            pid,
            start_time: start_time_from_stat(&stat)?,
            exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok()?,
        })
    }

    /// Whether this very process (this pid, started at this time) is alive, whatever it
    /// runs now.
    fn is_alive(&self) -> bool {
        pid_alive(self.pid)
            && std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                .ok()
                .and_then(|stat| start_time_from_stat(&stat))
                == Some(self.start_time)
    }

    /// Whether this very process still runs, with `command` as its command line.
    fn is_running(&self, command: &[String]) -> bool {
        Self::of(self.pid).is_some_and(|now| now == *self)
            && process_runs_command(self.pid, command)
    }
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The second field, the command name in
/// parentheses, may itself hold spaces and parentheses, so fields are counted from the last
/// `)`: the state is field 3.
fn start_time_from_stat(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Writes the pid file atomically: `pid`, `start_time` and `exe`, one `key value` per line.
fn write_identity(path: &Path, id: &ProcessIdentity) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let exe = id
        .exe
        .to_str()
        .ok_or_else(|| std::io::Error::other("executable path is not UTF-8"))?;
    let tmp = path.with_extension("pid.tmp");
    std::fs::write(
        &tmp,
        format!("pid {}\nstart_time {}\nexe {exe}\n", id.pid, id.start_time),
    )?;
    std::fs::rename(&tmp, path)
}

/// Reads a pid file; `None` when missing or incomplete (an older relay's bare pid included).
/// Whether the compute process recorded in `pid_file` (this pid, started at that time) is
/// alive: one a relay failed to stop, or one adoption left alone.
pub(super) fn recorded_compute_alive(pid_file: &Path) -> bool {
    read_identity(pid_file).is_some_and(|recorded| recorded.is_alive())
}

fn read_identity(path: &Path) -> Option<ProcessIdentity> {
    let text = std::fs::read_to_string(path).ok()?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
    };
    Some(ProcessIdentity {
        pid: field("pid")?.trim().parse().ok()?,
        start_time: field("start_time")?.trim().parse().ok()?,
        exe: PathBuf::from(field("exe")?),
    })
}

fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|p| kill(Pid::from_raw(p), None).is_ok())
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
}

/// Whether `pid` is alive and runs exactly `command` (guards against a recycled pid).
fn process_runs_command(pid: u32, command: &[String]) -> bool {
    if !pid_alive(pid) {
        return false;
    }
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv: Vec<&[u8]> = raw.split(|&b| b == 0).filter(|a| !a.is_empty()).collect();
    let Some((program, args)) = command.split_first() else {
        return false;
    };
    let program_matches = argv.first().is_some_and(|a0| {
        let a0 = Path::new(std::str::from_utf8(a0).unwrap_or_default());
        a0 == Path::new(program) || a0.file_name() == Path::new(program).file_name()
    });
    program_matches
        && argv.len() == command.len()
        && argv
            .iter()
            .skip(1)
            .zip(args)
            .all(|(a, b)| *a == b.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_its_own_command_line_and_refuses_others() {
        let me = std::process::id();
        let argv: Vec<String> = std::env::args().collect();
        assert!(process_runs_command(me, &argv));
        let mut other = argv.clone();
        other.push("--extra".into());
        assert!(!process_runs_command(me, &other));
        assert!(!process_runs_command(u32::MAX - 1, &argv));
    }

    #[test]
    fn pid_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("pidfile-{}", std::process::id()));
        let path = dir.join("pids").join("x.pid");
        let id = ProcessIdentity::of(std::process::id()).unwrap();
        write_identity(&path, &id).unwrap();
        assert_eq!(read_identity(&path), Some(id));
        // An older relay's pid file (a bare pid) is not trusted.
        std::fs::write(&path, "4242\n").unwrap();
        assert_eq!(read_identity(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_the_start_time_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 10 18446744073709551615";
        assert_eq!(start_time_from_stat(stat), Some(987_654));
        assert_eq!(start_time_from_stat("1 (x) S 1"), None);
    }

    /// A process with the configured command line under a recorded pid is adopted only if it
    /// is the process that was recorded: before, a pid and argv[0]'s basename were enough, so
    /// a recycled pid running the same command was adopted (and later sent SIGTERM).
    #[test]
    fn adopts_only_the_recorded_process_not_one_with_its_pid_and_command() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let command = vec!["sleep".to_owned(), "30".to_owned()];
        // Right after the spawn, /proc may briefly show an empty command line (seen under
        // parallel tests); wait until the kernel shows the new one.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !process_runs_command(child.id(), &command) {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep never showed its argv"
            );
            std::thread::yield_now();
        }
        let recorded = ProcessIdentity::of(child.id()).unwrap();
        assert!(recorded.exe.ends_with("sleep"), "{:?}", recorded.exe);
        assert!(
            recorded.is_running(&command),
            "{recorded:?} now {:?}, cmdline {:?}",
            ProcessIdentity::of(child.id()),
            std::fs::read(format!("/proc/{}/cmdline", child.id()))
        );
        // The same pid and command, started at another time: another process.
        let reused = ProcessIdentity {
            start_time: recorded.start_time + 1,
            ..recorded.clone()
        };
        assert!(!reused.is_running(&command));
        // The same pid and start time, another executable.
        let other_exe = ProcessIdentity {
            exe: PathBuf::from("/usr/bin/other"),
            ..recorded.clone()
        };
        assert!(!other_exe.is_running(&command));
        // The right process, another command line.
        assert!(!recorded.is_running(&["sleep".to_owned(), "31".to_owned()]));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!recorded.is_running(&command));
    }
}
