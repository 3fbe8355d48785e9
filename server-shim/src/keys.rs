//! Key rotation without a restart: the shim's key ring follows `--key-file` (architecture.md §3,
//! "Keys"). The file is looked at every second and read again when it changed, at once on
//! SIGHUP, and when a relayed login names a key id the ring lacks; a valid file replaces the
//! ring in use, an invalid one is refused with one log line and the ring in use stays.

use std::sync::Arc;

use authplugin::KeyRing;
use authplugin::key_file::{LiveKeyRing, Reload};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// Looks at the key file every second and on SIGHUP, until `shutdown`.
pub async fn follow(keys: Arc<LiveKeyRing>, shutdown: CancellationToken) {
    perceptron_io::follow_key_file(shutdown, |force| {
        let _ = check(&keys, force);
    })
    .await;
}

/// Looks at the key file once (`force`: read it even if unchanged), logs what changed, and
/// returns the new ring when one was loaded.
pub fn check(keys: &LiveKeyRing, force: bool) -> Option<Arc<KeyRing>> {
    match keys.check(force) {
        Reload::Unchanged => None,
        Reload::Reloaded { previous, ring } => {
            let ids: Vec<&str> = ring.ids().map(authplugin::KeyId::as_str).collect();
            info!(
                key_file = %keys.path().map(|p| p.display().to_string()).unwrap_or_default(),
                signing_key = %ring.signing_key().id(),
                previous_signing_key = %previous,
                keys = %ids.join(","),
                "key ring reloaded"
            );
            Some(ring)
        }
        Reload::Refused(e) => {
            error!(
                error = %e,
                signing_key = %keys.current().signing_key().id(),
                "refused the changed key file; the key ring in use stays"
            );
            None
        }
    }
}
