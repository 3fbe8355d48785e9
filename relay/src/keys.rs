//! Key rotation without a restart (architecture.md §3, "Keys"): the relay's key ring follows
//! `relay.key_file`. The file is looked at every second and read again when it changed
//! (another inode, size, modification or change time), and at once on SIGHUP; a valid file
//! replaces the ring in use (the newest key signs from the next login on), an invalid one is
//! refused with one log line and the ring in use stays.

use std::sync::Arc;
use std::time::Duration;

use authplugin::key_file::{LiveKeyRing, Reload};
use tokio_util::sync::CancellationToken;

use crate::metrics::{KeyReload, Metrics};

/// How often the key file is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Looks at the key file every [`POLL_INTERVAL`] and on SIGHUP, until `shutdown`.
pub async fn follow(keys: Arc<LiveKeyRing>, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot install a SIGHUP handler; the key file is still polled");
            None
        }
    };
    let mut tick = tokio::time::interval(POLL_INTERVAL);
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
        check(&keys, &metrics, force);
    }
}

/// Looks at the key file once (`force`: read it even if unchanged) and logs what changed.
pub fn check(keys: &LiveKeyRing, metrics: &Metrics, force: bool) {
    let file = keys
        .path()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    match keys.check(force) {
        Reload::Unchanged => {}
        Reload::Reloaded { previous, ring } => {
            metrics.key_reload(KeyReload::reloaded);
            let ids: Vec<&str> = ring.ids().map(authplugin::KeyId::as_str).collect();
            tracing::info!(
                key_file = %file,
                signing_key = %ring.signing_key().id(),
                previous_signing_key = %previous,
                keys = %ids.join(","),
                "key ring reloaded"
            );
        }
        Reload::Refused(e) => {
            metrics.key_reload(KeyReload::refused);
            tracing::error!(
                error = %e,
                signing_key = %keys.current().signing_key().id(),
                "refused the changed key file; the key ring in use stays"
            );
        }
    }
}
