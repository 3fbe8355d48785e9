//! The process driver, the embedded default: the compute is a child process of the relay.
//! Started with the configured command, ready when its address greets, stopped by SIGTERM and
//! then SIGKILL after the grace period. Its stdout and stderr become relay log lines tagged
//! with the instance. Every line the child prints during a start also triggers a readiness
//! probe at once (servers announce "ready" right after they listen), so the wake does not
//! wait out a polling interval; the probe schedule remains for servers that say nothing.
//!
//! The child's pid is kept in `state_dir/pids/<instance>.pid` while it runs. A relay that
//! restarts (after a crash, or with `on_relay_exit = "leave"`) adopts a compute whose pid file
//! names a live process running the configured command that still greets; it is then watched
//! and stopped by pid.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::{Notify, watch};

use super::driver::{BoxFuture, Driver, RunningCompute, WakeError};
use super::readiness;

/// How often an adopted (non-child) compute is checked for exit.
const ADOPTED_POLL: Duration = Duration::from_millis(200);

/// Starts the compute as a child process.
#[derive(Debug, Clone)]
pub struct ProcessDriver {
    /// The instance, for log lines.
    pub instance: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Working directory of the child.
    pub cwd: PathBuf,
    /// Where the compute listens.
    pub compute: crate::compute_conn::ComputeTarget,
    /// SIGTERM → SIGKILL grace.
    pub stop_grace: Duration,
    /// Where the pid file lives.
    pub pid_file: PathBuf,
}

/// A compute this relay started (a child) or adopted (by pid).
#[derive(Debug)]
struct ProcessCompute {
    pid: u32,
    /// `Some(description)` once the process has exited.
    exited: watch::Receiver<Option<String>>,
    grace: Duration,
    instance: String,
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
            loop {
                if let Some(reason) = exited.borrow().clone() {
                    return Err(WakeError::Exited(reason));
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(instance = %self.instance, pid = child.pid, "compute not ready in time; killing it");
                    child.kill_now().await;
                    return Err(WakeError::Timeout(timeout));
                }
                match tokio::time::timeout_at(deadline, readiness::probe(self.compute)).await {
                    Ok(Ok(_greeting)) => {
                        tracing::info!(instance = %self.instance, pid = child.pid, "compute ready");
                        return Ok(Box::new(child) as Box<dyn RunningCompute>);
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
            let pid = read_pid(&self.pid_file)?;
            if !process_runs_command(pid, &self.command) {
                tracing::info!(instance = %self.instance, pid, "stale pid file; not adopting");
                let _ = std::fs::remove_file(&self.pid_file);
                return None;
            }
            if let Err(why) = readiness::probe(self.compute).await {
                tracing::warn!(instance = %self.instance, pid, %why, "compute process runs but does not greet; not adopting");
                return None;
            }
            let (tx, rx) = watch::channel(None);
            let pid_file = self.pid_file.clone();
            tokio::spawn(async move {
                while pid_alive(pid) {
                    tokio::time::sleep(ADOPTED_POLL).await;
                }
                let _ = std::fs::remove_file(&pid_file);
                let _ = tx.send(Some("adopted process exited".into()));
            });
            tracing::info!(instance = %self.instance, pid, "adopted a running compute");
            Some(Box::new(ProcessCompute {
                pid,
                exited: rx,
                grace: self.stop_grace,
                instance: self.instance.clone(),
            }) as Box<dyn RunningCompute>)
        })
    }
}

impl ProcessDriver {
    /// Spawns the command; `spoke` is notified for every line the child prints.
    fn spawn(&self, spoke: &Arc<Notify>) -> Result<ProcessCompute, WakeError> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| WakeError::Driver("empty command".into()))?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| WakeError::Driver(format!("cannot start {program}: {e}")))?;
        let pid = child.id().unwrap_or_default();
        tracing::info!(instance = %self.instance, pid, program = %program, "compute spawned");
        if let Err(e) = write_pid(&self.pid_file, pid) {
            tracing::warn!(instance = %self.instance, error = %e, "cannot write the pid file; a relay restart will not adopt this compute");
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
        tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(status) => status.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            if read_pid(&pid_file) == Some(pid) {
                let _ = std::fs::remove_file(&pid_file);
            }
            let _ = tx.send(Some(how));
        });
        Ok(ProcessCompute {
            pid,
            exited: rx,
            grace: self.stop_grace,
            instance: self.instance.clone(),
        })
    }
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
        self.signal(Signal::SIGKILL);
        let _ = self.wait_gone(Duration::from_secs(5)).await;
    }
}

impl RunningCompute for ProcessCompute {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(super::driver::exit_reason(self.exited.clone(), "unknown"))
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.signal(Signal::SIGTERM);
            if !self.wait_gone(self.grace).await {
                tracing::warn!(instance = %self.instance, pid = self.pid, "compute ignored SIGTERM; killing it");
                self.kill_now().await;
            }
        })
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

fn write_pid(path: &Path, pid: u32) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("pid.tmp");
    std::fs::write(&tmp, format!("{pid}\n"))?;
    std::fs::rename(&tmp, path)
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
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
        write_pid(&path, 4242).unwrap();
        assert_eq!(read_pid(&path), Some(4242));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
