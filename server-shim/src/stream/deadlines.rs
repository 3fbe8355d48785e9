//! Deadlines opensrv-mysql 0.7 lacks: it waits on the socket for as long as the client
//! likes, so a client that never finishes its login, never sends its next command or never
//! reads its replies would hold a connection task forever (see CONTRIBUTING.md,
//! *Every wait has a deadline*).
//!
//! - [`ReadDeadline`]: from accept, the whole login must arrive within
//!   [`Timeouts::handshake`]; once logged in, every client byte restarts
//!   [`Timeouts::idle`] (MySQL's `wait_timeout`).
//! - [`WriteStall`]: a write that makes no progress within [`Timeouts::write_stall`] fails
//!   (MySQL's `net_write_timeout`).
//!
//! Both end in an `io::ErrorKind::TimedOut` error, which ends opensrv's connection loop.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// Deadlines applied by the adapter.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From accept until the login is complete.
    pub handshake: Duration,
    /// Longest wait for a client's next command (MySQL's `wait_timeout`).
    pub idle: Duration,
    /// Longest time a write may make no progress (MySQL's `net_write_timeout`).
    pub write_stall: Duration,
}

/// The read half's deadline: the handshake one until the login is done, then the idle one.
pub(super) struct ReadDeadline {
    timeouts: Timeouts,
    sleep: Pin<Box<Sleep>>,
    /// Whether the deadline is already the idle one.
    command_phase: bool,
}

impl ReadDeadline {
    /// The handshake deadline, starting now.
    pub(super) fn new(timeouts: Timeouts) -> Self {
        Self {
            timeouts,
            sleep: Box::pin(tokio::time::sleep(timeouts.handshake)),
            command_phase: false,
        }
    }

    /// Whether the login is done (the idle deadline applies).
    pub(super) const fn command_phase(&self) -> bool {
        self.command_phase
    }

    /// Switches to the idle deadline, once, when the login is done.
    pub(super) fn enter_command_phase(&mut self) {
        if !self.command_phase {
            self.command_phase = true;
            self.restart_idle();
        }
    }

    /// The idle deadline becomes `idle` (a session's `wait_timeout`), starting now.
    pub(super) fn set_idle(&mut self, idle: Duration) {
        self.timeouts.idle = idle;
        if self.command_phase {
            self.restart_idle();
        }
    }

    /// The client sent something: the idle deadline starts again.
    pub(super) fn restart_idle(&mut self) {
        self.sleep
            .as_mut()
            .reset(Instant::now() + self.timeouts.idle);
    }

    /// The timeout error, once the deadline has passed (registers `cx` otherwise).
    pub(super) fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.sleep.as_mut().poll(cx).is_pending() {
            return None;
        }
        let what = if self.command_phase {
            "client idle for longer than the idle timeout"
        } else {
            "login not completed within the handshake timeout"
        };
        Some(io::Error::new(io::ErrorKind::TimedOut, what))
    }
}

/// The write half's deadline: runs only while the client makes the writer wait.
pub(super) struct WriteStall {
    timeout: Duration,
    /// Running while the inner writer makes no progress.
    stall: Option<Pin<Box<Sleep>>>,
}

impl WriteStall {
    pub(super) const fn new(timeouts: Timeouts) -> Self {
        Self {
            timeout: timeouts.write_stall,
            stall: None,
        }
    }

    /// The inner writer made progress: the stall is over.
    pub(super) fn progress(&mut self) {
        self.stall = None;
    }

    /// Passes on `poll`, the inner writer's answer: `Ready` ends a stall, `Pending` runs the
    /// stall deadline (see [`WriteStall::pending_or_timeout`]).
    pub(super) fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(r) => {
                self.progress();
                Poll::Ready(r)
            }
            Poll::Pending => self.pending_or_timeout(cx),
        }
    }

    /// Turns a `Pending` from the inner writer into a timeout error once it lasted too long.
    pub(super) fn pending_or_timeout<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stall.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not read within the write timeout",
            )));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::stream::test_support::T;
    use crate::stream::{AuthReader, AuthWriter, ConnShared};

    #[tokio::test(start_paused = true)]
    async fn times_out_when_login_does_not_arrive() {
        let (_client, server) = tokio::io::duplex(64);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared, T, CancellationToken::new());
        let mut b = [0u8; 1];
        let err = reader.read(&mut b).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn times_out_when_client_stops_reading() {
        let (server, _client) = tokio::io::duplex(8);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server, shared, T);
        // The first packet (the greeting) is collected whole before it is sent: the stall
        // shows at the latest when it is flushed.
        let written = async {
            writer.write_all(&[0u8; 64]).await?;
            writer.flush().await
        };
        let err = written.await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
