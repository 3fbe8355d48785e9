//! What every connection of one instance shares: its lifecycle handle, the greeting profile
//! the perceptron imitates, the key ring, metrics and the shutdown signal. The accept loop,
//! both routes and the admin API all read it, so it sits below all of them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use authplugin::ReplayGuard;
use authplugin::key_file::LiveKeyRing;
use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::CLIENT_SSL;
use tokio_util::sync::CancellationToken;

use crate::budgets::Budgets;
use crate::control::Instance;
use crate::metrics::Metrics;
use crate::passthrough::PumpReport;
use crate::profile::{self, ComputeProfile};
use crate::tls::{ComputeTls, ServerTls};

/// What every connection of one instance shares.
#[derive(Debug)]
pub struct InstanceRuntime {
    /// Lifecycle and wake.
    pub instance: Arc<Instance>,
    /// The greeting profile in use (learnt from the compute).
    pub profile: RwLock<ComputeProfile>,
    /// Where learnt profiles are kept.
    pub state_dir: PathBuf,
    /// The relay's key ring, following its key file: take [`LiveKeyRing::current`] once per
    /// login.
    pub ring: Arc<LiveKeyRing>,
    /// Compute greetings whose proof of the key was accepted, relay-wide
    /// (`authplugin::compute_proof::greeting_guard`).
    pub greetings: Arc<Mutex<ReplayGuard>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Connection ids for greetings.
    pub connection_ids: AtomicU32,
    /// Fired when the relay shuts down.
    pub shutdown: CancellationToken,
    /// The relay's wake-cost budgets (shared by every instance).
    pub budgets: Arc<Budgets>,
    /// `[instance.tls]`: the certificate the perceptron route serves; `None` offers no TLS.
    pub tls: Option<Arc<ServerTls>>,
    /// `compute_tls`: TLS on the compute leg of relayed logins; `None` for plaintext.
    pub compute_tls: Option<ComputeTls>,
    /// The kernel splice, when this instance's held connections may use it
    /// ([`crate::config::InstanceConfig::splices_held`]) and the relay could load it.
    pub kernel_splice: Option<Arc<crate::splice::sockhash::KernelSplice>>,
    /// The splice below TCP, for held sessions (`None`: not available).
    pub tcp_splice: Option<Arc<crate::splice::below_tcp::TcpSplice>>,
    /// The compute refused the query that says what a resumable session holds
    /// (`session_state::evidence`: server-shim, MariaDB without `metadata_lock_info`): its
    /// resumable sessions stay on the pump, and later logins do not ask again.
    pub evidence_refused: std::sync::atomic::AtomicBool,
}
impl InstanceRuntime {
    /// The splice below TCP for a session whose legs are these, when this relay has it and
    /// the session's legs may be spliced so ([`crate::splice::below_tcp::TcpSplice::applies`]).
    #[must_use]
    pub fn below_tcp(
        &self,
        client: &crate::tls::ClientStream<tokio::net::TcpStream>,
        compute: &crate::tls::ComputeStream<tokio::net::TcpStream>,
    ) -> Option<Arc<crate::splice::below_tcp::TcpSplice>> {
        let below = self.tcp_splice.as_ref()?;
        crate::splice::below_tcp::TcpSplice::applies(client.tcp()?, compute.tcp()?)
            .then(|| Arc::clone(below))
    }

    /// The greeting profile the perceptron imitates now.
    #[must_use]
    pub fn profile(&self) -> ComputeProfile {
        self.profile
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A connection id for the next greeting: in the upper half of the id space, which
    /// server-shim leaves to relays (its own connections count in the lower half), so the
    /// compute can take it as the session's id without meeting one of its own
    /// (`compute_leg::CONNECTION_ID_ATTR`). The counter starts at a random point
    /// ([`first_connection_id`]), so a restarted relay or another relay of a fleet rarely
    /// hands out an id a compute still has.
    pub fn next_connection_id(&self) -> u32 {
        RELAY_CONNECTION_IDS | self.connection_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Learns the compute's profile from its greeting: when it differs from the one in use,
    /// later clients are greeted with it and it is kept in `state_dir` for the next start.
    pub fn learn_profile(&self, greeting: &HandshakeV10) {
        let learnt = ComputeProfile::from_greeting(greeting);
        if self.profile() == learnt {
            return;
        }
        // Saved before taking the lock, so greetings never wait on the disk. Two connections
        // learning the same change at once both save it, which is harmless.
        let name = &self.instance.config.name;
        if let Err(e) = profile::save(&self.state_dir, name, &learnt) {
            tracing::warn!(instance = %name, error = %e, "cannot save the compute profile");
        }
        tracing::info!(instance = %name, "learnt a new compute profile");
        // Both routes should make the same TLS offer: a client that requires TLS would be
        // refused on the route that lacks it.
        let compute_tls = learnt.capability_flags & CLIENT_SSL != 0;
        if compute_tls && self.tls.is_none() {
            tracing::warn!(
                instance = %name, compute_offers_tls = true, relay_offers_tls = false,
                "the compute offers TLS and the relay does not: clients see TLS on the direct \
                 route only, and a login inside the compute's TLS is not charged to the \
                 failed-login budgets, which cannot read it (give the instance [instance.tls]: \
                 the relay then terminates every login's TLS)"
            );
        } else if !compute_tls && self.tls.is_some() {
            tracing::warn!(
                instance = %name, compute_offers_tls = false, relay_offers_tls = true,
                "the relay offers TLS and the compute does not: the relay terminates every \
                 login's TLS, and the compute leg is TLS only with compute_tls"
            );
        }
        *self.profile.write().unwrap_or_else(PoisonError::into_inner) = learnt;
        PROFILE_CHANGES.fetch_add(1, Ordering::Release);
    }

    /// Stops offering `missing`, capabilities a compute that has not proven the key says it
    /// lacks: all such a compute can teach (a squatter can only make the relay offer less,
    /// until a proven compute's greeting is learnt), and enough for the next client's login
    /// to reach the compute's proof.
    pub fn forget_capabilities(&self, missing: u32, missing_mariadb: u32) {
        let mut learnt = self.profile();
        if learnt.capability_flags & missing == 0
            && learnt.mariadb_capabilities() & missing_mariadb == 0
        {
            return;
        }
        learnt.capability_flags &= !missing;
        learnt.forget_mariadb_capabilities(missing_mariadb);
        let name = &self.instance.config.name;
        if let Err(e) = profile::save(&self.state_dir, name, &learnt) {
            tracing::warn!(instance = %name, error = %e, "cannot save the compute profile");
        }
        tracing::info!(instance = %name, missing = format_args!("{missing:#x}"), "no longer offering capabilities the (not yet proven) compute lacks");
        *self.profile.write().unwrap_or_else(PoisonError::into_inner) = learnt;
        PROFILE_CHANGES.fetch_add(1, Ordering::Release);
    }

    /// Counts the bytes a byte pump copied for this instance.
    pub fn count_pumped(&self, report: &PumpReport) {
        self.metrics.add_pumped(
            &self.instance.config.name,
            report.client_to_compute,
            report.compute_to_client,
        );
    }
}

/// Bumped (after the new profile is stored) whenever any instance's greeting profile
/// changes, which is rare: an endpoint's greeting, made from every instance's, is made again
/// only then. Process-wide, so another relay in the same process (tests) only costs a remake.
static PROFILE_CHANGES: AtomicU64 = AtomicU64::new(0);

/// How many times any instance's greeting profile has changed ([`PROFILE_CHANGES`]).
#[must_use]
pub fn profile_changes() -> u64 {
    PROFILE_CHANGES.load(Ordering::Acquire)
}

/// The bit set in every connection id a relay greets with ([`InstanceRuntime::next_connection_id`]).
pub const RELAY_CONNECTION_IDS: u32 = 0x8000_0000;

/// Where an instance's greeting ids start: anywhere in the relay's half.
#[must_use]
pub fn first_connection_id() -> u32 {
    rand::random::<u32>() & !RELAY_CONNECTION_IDS
}
