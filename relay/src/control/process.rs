//! The process driver, the embedded default: the compute is a child process of the relay.
//! Started with the configured command, ready when its address greets, stopped by SIGTERM and
//! then SIGKILL after the grace period. Its stdout and stderr become relay log lines tagged
//! with the instance.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use super::WakeError;
use super::driver::{BoxFuture, Driver, RunningCompute};
use super::readiness;

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
    pub compute: SocketAddr,
    /// SIGTERM → SIGKILL grace.
    pub stop_grace: Duration,
}

/// A running child.
#[derive(Debug)]
struct ChildCompute {
    pid: u32,
    /// `Some(description)` once the child has exited.
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
            let child = self.spawn()?;
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
                // Wait for the next probe, but wake at once if the child exits.
                let _ = tokio::time::timeout_at(
                    deadline.min(tokio::time::Instant::now() + readiness::backoff(attempt)),
                    exited.changed(),
                )
                .await;
                attempt += 1;
            }
        })
    }
}

impl ProcessDriver {
    fn spawn(&self) -> Result<ChildCompute, WakeError> {
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
        if let Some(out) = child.stdout.take() {
            tokio::spawn(forward_lines(self.instance.clone(), pid, out));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(forward_lines(self.instance.clone(), pid, err));
        }
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(status) => status.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            let _ = tx.send(Some(how));
        });
        Ok(ChildCompute {
            pid,
            exited: rx,
            grace: self.stop_grace,
            instance: self.instance.clone(),
        })
    }
}

impl ChildCompute {
    fn signal(&self, sig: Signal) {
        // Only signal a child we have not yet seen exit, so a recycled pid is never hit.
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

impl RunningCompute for ChildCompute {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let mut rx = self.exited.clone();
            match rx.wait_for(Option::is_some).await {
                Ok(v) => v.clone().unwrap_or_default(),
                Err(_) => "unknown".into(),
            }
        })
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

async fn forward_lines(instance: String, pid: u32, stream: impl AsyncRead + Unpin) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "compute", instance = %instance, pid, "{line}");
    }
}

/// Builds the driver for an instance's configuration.
#[must_use]
pub fn from_config(cfg: &crate::config::InstanceConfig) -> Box<dyn Driver> {
    let crate::config::DriverConfig::Process {
        command,
        cwd,
        stop_grace,
    } = &cfg.driver;
    Box::new(ProcessDriver {
        instance: cfg.name.clone(),
        command: command.clone(),
        cwd: cwd.clone(),
        compute: cfg.compute,
        stop_grace: *stop_grace,
    })
}
