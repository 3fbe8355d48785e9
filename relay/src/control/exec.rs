//! The exec driver: the compute is managed by user commands (systemd, a container runtime, a
//! cloud CLI). `start` must return once the compute is starting (or started); the relay then
//! waits for its greeting. `stop` stops it. The optional `status` command (exit 0 = running)
//! is polled to notice a compute that went away; without one, the relay probes the address.
//! Every command has a timeout; output goes to the relay's log.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::driver::{ExternalControl, RunningCompute, Watched};
use super::readiness;
use crate::config::ExecSpec;

/// Consecutive failed probes before a compute without a status command counts as gone.
const PROBE_FAILURES_TO_EXIT: u32 = 3;

/// Runs user commands to start and stop the compute.
#[derive(Debug, Clone)]
pub struct ExecDriver {
    /// The instance, for log lines.
    pub instance: String,
    /// Where the compute listens.
    pub compute: crate::compute_conn::ComputeTarget,
    /// The commands.
    pub spec: ExecSpec,
}

/// Why a configured command did not succeed. `what` names the command (`start`, `stop`,
/// `status`).
#[derive(Debug)]
pub enum CommandError {
    /// The command line is empty.
    Empty { what: &'static str },
    /// The program could not be started.
    Spawn {
        what: &'static str,
        program: String,
        source: std::io::Error,
    },
    /// Waiting for it failed.
    Wait {
        what: &'static str,
        source: std::io::Error,
    },
    /// It ran longer than `command_timeout` (and was killed).
    TimedOut { what: &'static str, after: Duration },
    /// It exited unsuccessfully.
    Failed {
        what: &'static str,
        status: std::process::ExitStatus,
    },
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty { what } => write!(f, "{what} command is empty"),
            Self::Spawn {
                what,
                program,
                source,
            } => write!(f, "cannot run the {what} command {program}: {source}"),
            Self::Wait { what, source } => write!(f, "{what} command failed: {source}"),
            Self::TimedOut { what, after } => {
                write!(f, "{what} command did not finish within {after:?}")
            }
            Self::Failed { what, status } => write!(f, "{what} command exited with {status}"),
        }
    }
}

impl std::error::Error for CommandError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Spawn { source, .. } | Self::Wait { source, .. } => Some(source),
            Self::Empty { .. } | Self::TimedOut { .. } | Self::Failed { .. } => None,
        }
    }
}

impl ExecDriver {
    /// Runs one configured command under the command timeout.
    async fn run(&self, what: &'static str, argv: &[String]) -> Result<(), CommandError> {
        let (program, args) = argv.split_first().ok_or(CommandError::Empty { what })?;
        let child = Command::new(program)
            .args(args)
            .current_dir(&self.spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| CommandError::Spawn {
                what,
                program: program.clone(),
                source,
            })?;
        let out = tokio::time::timeout(self.spec.command_timeout, child.wait_with_output())
            .await
            .map_err(|_| CommandError::TimedOut {
                what,
                after: self.spec.command_timeout,
            })?
            .map_err(|source| CommandError::Wait { what, source })?;
        for line in String::from_utf8_lossy(&out.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&out.stderr).lines())
        {
            // The compute's output may echo client input (user names): escaped, one line each.
            tracing::info!(target: "compute", instance = %self.instance, command = what, "{}", crate::logsafe::Escaped(line.as_bytes()));
        }
        if out.status.success() {
            Ok(())
        } else {
            Err(CommandError::Failed {
                what,
                status: out.status,
            })
        }
    }
}

impl ExternalControl for ExecDriver {
    type Error = CommandError;

    fn instance(&self) -> &str {
        &self.instance
    }

    fn compute(&self) -> crate::compute_conn::ComputeTarget {
        self.compute
    }

    async fn request_start(&self) -> Result<(), CommandError> {
        self.run("start", &self.spec.start).await
    }

    async fn request_stop(&self) -> Result<(), CommandError> {
        self.run("stop", &self.spec.stop).await
    }

    async fn is_running(&self) -> bool {
        match &self.spec.status {
            Some(status) => self.run("status", status).await.is_ok(),
            None => readiness::probe(self.compute).await.is_ok(),
        }
    }

    fn watched(&self) -> Box<dyn RunningCompute> {
        // A status command is authoritative; without one, a few failed probes in a row.
        let failures_to_exit = if self.spec.status.is_some() {
            1
        } else {
            PROBE_FAILURES_TO_EXIT
        };
        Watched::start(
            self,
            self.spec.poll_interval,
            failures_to_exit,
            "the compute is no longer running",
        )
    }
}
