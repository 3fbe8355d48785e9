//! What every connection of one instance shares: its lifecycle handle, the greeting profile
//! the perceptron imitates, the key ring, metrics and the shutdown signal. The accept loop,
//! both routes and the admin API all read it, so it sits below all of them.

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, RwLock};

use authplugin::KeyRing;
use tokio_util::sync::CancellationToken;

use crate::control::Instance;
use crate::metrics::Metrics;
use crate::profile::ComputeProfile;

/// What every connection of one instance shares.
#[derive(Debug)]
pub struct InstanceRuntime {
    /// Lifecycle and wake.
    pub instance: Arc<Instance>,
    /// The greeting profile in use (learnt from the compute).
    pub profile: RwLock<ComputeProfile>,
    /// Where learnt profiles are kept.
    pub state_dir: PathBuf,
    /// The relay's key ring.
    pub ring: Arc<KeyRing>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Connection ids for greetings.
    pub connection_ids: AtomicU32,
    /// Fired when the relay shuts down.
    pub shutdown: CancellationToken,
}
