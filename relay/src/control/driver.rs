//! The driver seam (DESIGN §4, §6): how a compute is started, watched and stopped. The
//! process driver is the embedded default; exec, http and Kubernetes drivers plug in here.

use std::future::Future;
use std::pin::Pin;

use super::WakeError;

/// A boxed future, so drivers can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
}

/// A compute that was started and became ready.
pub trait RunningCompute: Send + Sync {
    /// Resolves when the compute has gone, with a description of how it ended.
    fn wait_exit(&self) -> BoxFuture<'_, String>;
    /// Stops the compute: politely, then by force after the driver's grace period.
    fn stop(&self) -> BoxFuture<'_, ()>;
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

/// Watches a compute the relay did not start as a child: every `interval`, asks
/// `is_running`; after `failures_to_exit` "no" answers in a row, reports `reason` on the
/// returned channel. Setting the returned flag (a deliberate stop) ends the watch quietly.
pub fn watch_running<F, Fut>(
    interval: std::time::Duration,
    failures_to_exit: u32,
    reason: &'static str,
    is_running: F,
) -> (
    tokio::sync::watch::Receiver<Option<String>>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    let (tx, rx) = tokio::sync::watch::channel(None);
    let stopping = std::sync::Arc::new(AtomicBool::new(false));
    let stop_flag = std::sync::Arc::clone(&stopping);
    tokio::spawn(async move {
        let mut failures = 0;
        loop {
            tokio::time::sleep(interval).await;
            if stop_flag.load(Ordering::Acquire) {
                return;
            }
            if is_running().await {
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
    (rx, stopping)
}
