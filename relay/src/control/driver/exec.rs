//! The exec driver: the compute is managed by user commands (systemd, a container runtime, a
//! cloud CLI). `start` must return once the compute is starting (or started); the relay then
//! waits for its greeting. `stop` stops it. The optional `status` command (exit 0 = running)
//! is polled to notice a compute that went away; without one, the relay probes the address.
//! Every command has a timeout; output goes to the relay's log. With `[instance.capacity]`,
//! the optional `scale` command resizes the compute (`{CCU}` becomes the capacity) and the
//! optional `cpu_usage` command prints the CPU seconds it has used, which the autoscaler reads.
//! Without `cpu_usage` the instance keeps its `resume_ccu`.
//!
//! A command is done when its process exits, not when its output pipes close: a `start` that
//! backgrounds a daemon leaves the daemon holding the pipes. A `start` the relay gives up on
//! (it timed out and was killed, it failed, or it outlived `resume_timeout`) is followed by
//! `stop`, so whatever it began is not left running unbilled.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::process::Command;

/// How long output is still collected after a command exited (a daemon it started may hold
/// the pipes open for ever).
const OUTPUT_GRACE: Duration = Duration::from_millis(100);

use super::{CapacityError, ExternalControl, RunningCompute, Watched};
use crate::config::ExecSpec;
use crate::control::readiness;

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
        self.run_capturing(what, argv, &[]).await.map(|_| ())
    }

    /// Runs one configured command under the command timeout, with `env` added to its
    /// environment (the offload commands: `PERCEPTRON_INSTANCE`, ...).
    ///
    /// # Errors
    /// [`CommandError`]: it could not run, timed out, or exited unsuccessfully.
    pub async fn run_with_env(
        &self,
        what: &'static str,
        argv: &[String],
        env: &[(&'static str, String)],
    ) -> Result<(), CommandError> {
        self.run_capturing(what, argv, env).await.map(|_| ())
    }

    /// Runs one configured command under the command timeout; its standard output.
    async fn run_capturing(
        &self,
        what: &'static str,
        argv: &[String],
        env: &[(&'static str, String)],
    ) -> Result<Vec<u8>, CommandError> {
        let (program, args) = argv.split_first().ok_or(CommandError::Empty { what })?;
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .current_dir(&self.spec.cwd)
            // Its own process group, as the process driver's computes: a terminal's Ctrl-C
            // must not reach a `start` command or the daemon it leaves running.
            .process_group(0)
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
        let collect = |pipe: Option<tokio::process::ChildStdout>| {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = (&mut p).take(64 * 1024).read_to_end(&mut buf).await;
                }
                buf
            })
        };
        let stdout = collect(child.stdout.take());
        let stderr = tokio::spawn({
            let pipe = child.stderr.take();
            async move {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = (&mut p).take(64 * 1024).read_to_end(&mut buf).await;
                }
                buf
            }
        });
        let status = match tokio::time::timeout(self.spec.command_timeout, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(source)) => return Err(CommandError::Wait { what, source }),
            Err(_) => {
                let _ = child.kill().await;
                stdout.abort();
                stderr.abort();
                return Err(CommandError::TimedOut {
                    what,
                    after: self.spec.command_timeout,
                });
            }
        };
        let mut output = Vec::new();
        for task in [stdout, stderr] {
            let abort = task.abort_handle();
            // One entry per stream, empty if it did not close in time: stdout stays first.
            match tokio::time::timeout(OUTPUT_GRACE, task).await {
                Ok(Ok(bytes)) => output.push(bytes),
                _ => {
                    abort.abort();
                    output.push(Vec::new());
                }
            }
        }
        for line in output.iter().flat_map(|bytes| {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        }) {
            // The compute's output may echo client input (user names): escaped, one line each.
            tracing::info!(target: "compute", instance = %self.instance, command = what, "{}", crate::logsafe::Escaped(line.as_bytes()));
        }
        if status.success() {
            Ok(output.into_iter().next().unwrap_or_default())
        } else {
            Err(CommandError::Failed { what, status })
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
        // A start that times out, fails, or outlives `resume_timeout` is followed by stop in
        // `Driver::start`, whichever way it ended.
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

    async fn request_scale(&self, ccu: crate::capacity::Ccu) -> Result<(), CapacityError> {
        let argv = self
            .spec
            .scale
            .as_ref()
            .ok_or(CapacityError::NoScaleCommand)?;
        let argv: Vec<String> = argv
            .iter()
            .map(|a| a.replace("{CCU}", &ccu.to_string()))
            .collect();
        self.run("scale", &argv)
            .await
            .map_err(|e| CapacityError::External(Box::new(e)))
    }

    async fn cpu_used(&self) -> Option<Duration> {
        let argv = self.spec.cpu_usage.as_ref()?;
        let out = self.run_capturing("cpu_usage", argv, &[]).await.ok()?;
        let seconds: f64 = String::from_utf8_lossy(&out).trim().parse().ok()?;
        Duration::try_from_secs_f64(seconds).ok()
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

#[cfg(test)]
mod tests {
    use super::super::Driver;
    use super::*;

    fn driver(dir: &std::path::Path, start: &str, stop: &str, timeout: Duration) -> ExecDriver {
        let sh = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
        ExecDriver {
            instance: "t".into(),
            compute: crate::compute_conn::ComputeTarget {
                addr: "127.0.0.1:1".parse().unwrap(),
                proxy_protocol: false,
            },
            spec: ExecSpec {
                start: sh(start),
                stop: sh(stop),
                status: None,
                cwd: dir.to_owned(),
                command_timeout: timeout,
                poll_interval: Duration::from_secs(1),
                scale: Some(vec!["sh".into(), "-c".into(), "echo {CCU} > scaled".into()]),
                cpu_usage: Some(vec!["echo".into(), "12.5".into()]),
                offload: None,
                restore: None,
            },
        }
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("exec-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Before: the driver waited for the pipes to close, which the backgrounded daemon kept
    /// open, so a start that had succeeded timed out.
    #[tokio::test]
    async fn a_start_that_backgrounds_a_daemon_finishes_when_it_exits() {
        let dir = tmp("daemon");
        let d = driver(
            &dir,
            "sleep 30 & echo $! > daemon.pid; echo started",
            "kill $(cat daemon.pid)",
            Duration::from_secs(5),
        );
        let t0 = std::time::Instant::now();
        d.request_start().await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        d.request_stop().await.unwrap();
    }

    /// Before: a start that timed out was left (with whatever it started) and stop never ran.
    #[tokio::test]
    async fn a_start_that_times_out_is_followed_by_stop() {
        let dir = tmp("timeout");
        let d = driver(
            &dir,
            "sleep 30",
            "touch stopped",
            Duration::from_millis(300),
        );
        let e = Driver::start(&d, Duration::from_secs(10))
            .await
            .err()
            .unwrap();
        assert!(matches!(e, super::super::WakeError::Driver(_)), "{e}");
        assert!(dir.join("stopped").exists(), "stop ran");
    }

    /// Before: a start still running when `resume_timeout` passed was dropped (its command
    /// killed), the daemon it had forked ran on, and stop never ran.
    #[tokio::test]
    async fn a_start_that_outlives_the_resume_timeout_is_followed_by_stop() {
        let dir = tmp("outlived");
        let d = driver(
            &dir,
            "sleep 30 & echo $! > daemon.pid; sleep 30",
            "kill $(cat daemon.pid) && touch stopped",
            Duration::from_secs(10),
        );
        let e = Driver::start(&d, Duration::from_millis(300))
            .await
            .err()
            .unwrap();
        assert!(matches!(e, super::super::WakeError::Timeout(_)), "{e}");
        assert!(
            dir.join("stopped").exists(),
            "stop ran and killed the daemon"
        );
    }

    /// A start that fails may have begun something: stop follows it too.
    #[tokio::test]
    async fn a_start_that_fails_is_followed_by_stop() {
        let dir = tmp("failed");
        let d = driver(&dir, "exit 3", "touch stopped", Duration::from_secs(5));
        let e = Driver::start(&d, Duration::from_secs(5))
            .await
            .err()
            .unwrap();
        assert!(matches!(e, super::super::WakeError::Driver(_)), "{e}");
        assert!(dir.join("stopped").exists(), "stop ran");
    }

    #[tokio::test]
    async fn scale_and_cpu_usage_run_their_commands() {
        let dir = tmp("scale");
        let d = driver(&dir, "true", "true", Duration::from_secs(5));
        d.request_scale(crate::capacity::Ccu::parse(1.5).unwrap())
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("scaled")).unwrap(),
            "1.5\n"
        );
        assert_eq!(d.cpu_used().await, Some(Duration::from_millis(12_500)));
    }
}
