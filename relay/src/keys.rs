//! Key rotation without a restart (architecture.md §3, "Keys"): the relay's key ring follows
//! `relay.key_file`. The file is looked at every second and read again when it changed
//! (another inode, size, modification or change time), and at once on SIGHUP; a valid file
//! replaces the ring in use (the newest key signs from the next login on), an invalid one is
//! refused with one log line and the ring in use stays.

use std::sync::Arc;

use authplugin::key_file::{LiveKeyRing, Reload};
use tokio_util::sync::CancellationToken;

use crate::metrics::{KeyReload, Metrics};

/// Looks at the key file every second and on SIGHUP, until `shutdown`.
pub async fn follow(keys: Arc<LiveKeyRing>, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    perceptron_io::follow_key_file(shutdown, |force| check(&keys, &metrics, force)).await;
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
