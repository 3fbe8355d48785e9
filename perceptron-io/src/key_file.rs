//! The key-file follow loop: when to look at a key file again.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often a key file is looked at.
pub const KEY_FILE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Calls `check(false)` every [`KEY_FILE_POLL_INTERVAL`] and `check(true)` (read the file even
/// if it looks unchanged) on SIGHUP, until `shutdown`. Without a SIGHUP handler (it cannot be
/// installed) the file is still polled.
pub async fn follow_key_file(shutdown: CancellationToken, mut check: impl FnMut(bool)) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot install a SIGHUP handler; the key file is still polled");
            None
        }
    };
    let mut tick = tokio::time::interval(KEY_FILE_POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let force = tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::info!("SIGHUP received: reading the key file");
                true
            }
        };
        check(force);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn looks_every_interval_until_shutdown() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(follow_key_file(shutdown.clone(), {
            let seen = Arc::clone(&seen);
            move |force| seen.lock().unwrap().push(force)
        }));
        // The first tick is immediate, then one per interval.
        tokio::time::sleep(KEY_FILE_POLL_INTERVAL * 3 + Duration::from_millis(1)).await;
        shutdown.cancel();
        task.await.unwrap();
        assert_eq!(*seen.lock().unwrap(), [false; 4]);
    }
}
