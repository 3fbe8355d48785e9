//! The compute's proof of the key, for the control plane (README, "Security model").
//!
//! A greeting on the compute address proves that something speaks MySQL there, not that it is
//! the compute: a process squatting on the address greets as well. In dual mode the relay
//! therefore trusts a compute (routes new connections straight to it on the direct or kernel
//! route, learns its greeting profile) only once the compute has proven that it holds the
//! perceptron key (`authplugin::compute_proof`), whichever driver started it:
//!
//! - a compute starts *unproven*: every connection takes the perceptron route, whose relayed
//!   login checks the proof before it sends anything of the client's (server-shim proves the
//!   key in the auth switch that answers the login's Hello, older ones in their greeting;
//!   MariaDB with `perceptron_dual` in a challenge round, answering a Hello). The first proven
//!   relayed login makes the compute proven; so does a probe of the woken compute that
//!   proves the key ([`probe_proof`]; [`Instance::check_woken`]: beside the
//!   waking client's login, so the cold start does not wait for it, or before the kernel
//!   route goes in). With `compute_proof = "login"` (MariaDB) a greeting is trusted for the
//!   direct route: the relay cannot ask for more without a login;
//! - at adoption (relay start), where no login follows, a probe reads a greeting and checks
//!   its proof, asking for it with a Hello when the greeting has none (`compute_proof =
//!   "greeting"`, server-shim): a proof that fails is not adopted (the driver's compute is
//!   stopped); a compute that gives none is adopted unproven;
//! - a compute that fails the proof in a relayed login (it offered a session without proving
//!   the key, or its proof did not verify) is stopped and the instance marked failed;
//! - while it runs, a compute proven where a probe can ask again (greeting or auth switch) is
//!   probed again every [`PROOF_RECHECK`]: one without a valid proof makes it unproven again
//!   (the direct and kernel routes close) until a relayed login proves it.
//!
//! In switch mode no compute can prove anything (a stock server has no key): nothing here
//! applies, and `compute_tls = "verify"` is what authenticates the compute.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use authplugin::compute_proof::{self, Hello, ProofError};
use authplugin::key_file::LiveKeyRing;
use authplugin::packet::capabilities::{
    CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
};
use authplugin::packet::{AuthSwitchRequest, HandshakeResponse41};
use authplugin::{AuthPlugin, ReplayGuard};

use super::driver::RunningCompute;
use super::readiness::{self, ProbeError};
use super::{Instance, State};
use crate::compute_conn::ComputeTarget;
use crate::config::ComputeProofMode;

/// How often a compute proven by its greeting is probed again while it runs.
pub const PROOF_RECHECK: Duration = Duration::from_secs(10);

/// How long each step of a proof probe may take: the connect, the greeting, and (asked with a
/// Hello) the auth switch that carries the proof.
const PROOF_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a wake's proof probe waits for the waking client's login to prove the compute
/// instead ([`Instance::check_woken`]).
const LOGIN_PROOF_GRACE: Duration = Duration::from_millis(100);

/// What the relay checks a compute's proof of the key with: its key ring and the relay-wide
/// guard over proven greetings (a greeting replayed onto another connection is refused).
#[derive(Debug, Clone)]
pub struct ProofCheck {
    /// The relay's key ring, following its key file.
    pub ring: Arc<LiveKeyRing>,
    /// Greetings whose proof was accepted (`compute_proof::greeting_guard`).
    pub greetings: Arc<Mutex<ReplayGuard>>,
}

/// What a probe of the compute address found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Greeted {
    /// A greeting whose proof of the key verifies.
    Proven,
    /// A greeting without a proof: a compute that proves the key only in a login (MariaDB),
    /// or a squatter. Trusted with nothing until a relayed login proves it.
    WithoutProof,
}

/// Why a probe did not find a compute the relay can trust.
#[derive(Debug)]
pub enum TrustError {
    /// No greeting (nothing listens, or it did not greet in time).
    Probe(ProbeError),
    /// A greeting whose proof of the key does not verify.
    Refused(ProofError),
}

impl std::fmt::Display for TrustError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Probe(e) => e.fmt(f),
            Self::Refused(e) => write!(
                f,
                "the compute's greeting does not prove it holds the key: {e} [{}]",
                e.kind()
            ),
        }
    }
}

impl std::error::Error for TrustError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Probe(e) => Some(e),
            Self::Refused(e) => Some(e),
        }
    }
}

/// Reads one greeting on `target` and checks its proof of the key; with `ask`, a greeting
/// without one is answered with a login that asks for it (a Hello), whose auth switch must
/// carry it (server-shim; docs/protocol.md). The login goes no further: the probe closes.
///
/// # Errors
/// [`TrustError`]: no greeting, or one whose proof fails.
pub async fn probe_proof(
    target: ComputeTarget,
    check: &ProofCheck,
    timeout: Duration,
    ask: bool,
) -> Result<Greeted, TrustError> {
    let stream = readiness::connect(target, timeout)
        .await
        .map_err(TrustError::Probe)?;
    let mut ps =
        crate::packet_io::PacketStream::new(stream, crate::packet_io::MAX_LOGIN_PACKET_LEN);
    let (packet, greeting) = readiness::greeting_packet(&mut ps, timeout)
        .await
        .map_err(TrustError::Probe)?;
    let Some(scramble_b) = greeting.scramble() else {
        return Ok(Greeted::WithoutProof);
    };
    let ring = check.ring.current();
    let in_greeting = {
        let mut guard = check
            .greetings
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        compute_proof::verify_greeting(
            &greeting.server_version,
            &scramble_b,
            &ring,
            crate::clock::now_ms(),
            &mut guard,
        )
    };
    match in_greeting {
        Ok(_) => return Ok(Greeted::Proven),
        Err(ProofError::Missing) if ask => {}
        Err(ProofError::Missing) => return Ok(Greeted::WithoutProof),
        Err(e) => return Err(TrustError::Refused(e)),
    }
    let hello = Hello::generate(ring.signing_key().id().clone(), &mut rand::rngs::OsRng);
    let login = HandshakeResponse41 {
        client_flag: CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH,
        max_packet_size: 1 << 24,
        character_set: greeting.character_set,
        reserved: [0; 23],
        username: PROBE_USER.as_bytes().to_vec(),
        auth_response: zeroize::Zeroizing::new(hello.encode()),
        database: None,
        client_plugin_name: Some(authplugin::payload::PLUGIN_NAME.as_bytes().to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    // A compute that greets but does not answer the Hello with a proof (a squatter, or one
    // that left) proves nothing.
    if ps
        .write_packet(packet.sequence_id.wrapping_add(1), &login.to_bytes())
        .await
        .is_err()
    {
        return Ok(Greeted::WithoutProof);
    }
    let Ok(reply) = ps.read_packet_within(timeout).await else {
        return Ok(Greeted::WithoutProof);
    };
    let Some((scramble, proof)) = AuthSwitchRequest::decode(&reply.payload)
        .ok()
        .filter(|s| s.plugin_name == AuthPlugin::MysqlNativePassword.name().as_bytes())
        .and_then(|s| compute_proof::switch_proof(&s.plugin_data).map(|(b, p)| (b, p.to_vec())))
    else {
        return Ok(Greeted::WithoutProof);
    };
    hello
        .verify_proof(&proof, &scramble, &ring)
        .map(|_| Greeted::Proven)
        .map_err(TrustError::Refused)
}

/// The user a proof probe's login names (it never gets as far as a password check).
const PROBE_USER: &str = "perceptron_proof_probe";

/// How far the running compute has proven it holds the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Trust {
    /// Not proven (or no compute): only the perceptron route reaches it.
    #[default]
    Unproven,
    /// Proven where a probe can ask again (a greeting, or the auth switch answering a
    /// Hello: server-shim): re-checked every [`PROOF_RECHECK`].
    ByGreeting,
    /// Proven in a relayed login's challenge round (MariaDB), which a probe cannot repeat.
    ByLogin,
}

impl Instance {
    /// Makes this instance (dual mode) trust a compute only once it proves the key with
    /// `check`. Called once, before any connection; without it every compute that greets is
    /// trusted (switch mode, where no compute can prove anything).
    pub fn check_proofs_with(&self, check: ProofCheck) {
        let _ = self.proof.set(check);
    }

    /// Whether the running compute is trusted with connections the relay cannot check: it
    /// proved the key, or proofs are not checked, or (`compute_proof = "login"`) it can prove
    /// the key only in a login, which the direct route cannot ask for.
    pub(super) fn trusted(&self, trust: Trust) -> bool {
        self.proof.get().is_none()
            || self.config.compute_proof == ComputeProofMode::Login
            || trust != Trust::Unproven
    }

    /// Probes the compute's address once and records how far it is trusted: a greeting that
    /// proves the key makes it trusted (never less trusted than it was). `Err` for a greeting
    /// whose proof fails, or for no greeting.
    pub(super) async fn establish_trust(&self) -> Result<Greeted, TrustError> {
        let Some(check) = self.proof.get() else {
            return Ok(Greeted::Proven);
        };
        let target = ComputeTarget::of(&self.config);
        let ask = self.config.compute_proof == ComputeProofMode::Greeting;
        let greeted = probe_proof(target, check, PROOF_PROBE_TIMEOUT, ask).await?;
        if greeted == Greeted::Proven {
            let mut inner = self.lock();
            if inner.trust == Trust::Unproven {
                inner.trust = Trust::ByGreeting;
            }
        } else if !self.trusted(Trust::Unproven) {
            tracing::warn!(
                instance = %self.config.name,
                "the compute greets without a proof of the key: new connections take the \
                 perceptron route until a relayed login proves it (compute_proof = \"login\" \
                 for a compute that proves it only there, such as MariaDB)"
            );
        }
        Ok(greeted)
    }

    /// The proof check of a wake, before the instance counts as running. With a kernel route
    /// it is awaited, since the route goes in only for a trusted compute and before the
    /// instance counts as running. Without one, the waking client's relayed login checks the
    /// proof anyway, within a millisecond or two: the probe waits [`LOGIN_PROOF_GRACE`] for
    /// that login and runs only if none proved the compute (a wake with no login waiting).
    /// Run beside the login, it made the login 0.25 ms slower on a 2-core machine (measured).
    pub(super) async fn check_woken(self: &Arc<Self>) {
        if self.proof.get().is_none() {
            return;
        }
        if self.kernel.is_some() {
            if let Err(e) = self.establish_trust().await {
                tracing::warn!(instance = %self.config.name, error = %e, "the woken compute is not trusted: new connections take the perceptron route");
            }
            return;
        }
        let instance = Arc::clone(self);
        tokio::spawn(async move {
            let by_login = tokio::time::timeout(LOGIN_PROOF_GRACE, instance.proven()).await;
            if by_login.is_ok() {
                return;
            }
            match instance.establish_trust().await {
                Ok(_) => {}
                Err(TrustError::Probe(e)) => {
                    tracing::debug!(instance = %instance.config.name, error = %e, "no greeting for the proof check of a woken compute");
                }
                Err(e @ TrustError::Refused(_)) => {
                    instance.report_unproven(&e.to_string()).await;
                }
            }
        });
    }

    /// A compute the driver found running at relay start: adopted, trusted as far as its
    /// greeting proves the key ([`Instance::establish_trust`]). One whose greeting fails the
    /// proof, or that no longer greets, is stopped and not adopted.
    pub(super) async fn adopt_if_not_refused(
        &self,
        running: Box<dyn RunningCompute>,
    ) -> Option<Box<dyn RunningCompute>> {
        self.lock().trust = Trust::Unproven;
        match self.establish_trust().await {
            Ok(_) => Some(running),
            Err(e) => {
                tracing::warn!(instance = %self.config.name, error = %e, "not adopting the compute found running; stopping it");
                running.stop().await;
                None
            }
        }
    }

    /// Resolves once the running compute is trusted (proven by a greeting or a login).
    async fn proven(&self) {
        loop {
            let notified = self.proven.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().trust != Trust::Unproven {
                return;
            }
            notified.await;
        }
    }

    /// A relayed login's compute proved the key (`repeatable`: where a probe can ask again,
    /// its greeting or auth switch; else a challenge round): the running compute is trusted
    /// from now on, and the kernel route, if any, goes in (before the login's client gets
    /// its OK, as a wake installs it before the instance counts as running).
    pub async fn mark_proven(self: &Arc<Self>, repeatable: bool) {
        {
            let mut inner = self.lock();
            if !matches!(inner.state, State::Running(_)) || inner.trust != Trust::Unproven {
                return;
            }
            inner.trust = if repeatable {
                Trust::ByGreeting
            } else {
                Trust::ByLogin
            };
        }
        self.proven.notify_waiters();
        if self.proof.get().is_some() && !self.trusted_without_proof() {
            tracing::info!(instance = %self.config.name, "the compute proved it holds the key; new connections go straight to it");
            self.install_route().await;
        }
    }

    /// Whether an unproven compute is trusted anyway (no proofs checked, or
    /// `compute_proof = "login"`): its route went in at the wake.
    fn trusted_without_proof(&self) -> bool {
        self.trusted(Trust::Unproven)
    }

    /// A relayed login's compute did not prove the key where it had to (a session offered
    /// without a proof, or a proof that failed): whatever listens there is not trusted with
    /// anything more. The running compute is stopped and the instance marked failed, so the
    /// next login wakes (and checks) a fresh one.
    pub async fn report_unproven(self: &Arc<Self>, why: &str) {
        let (running, tx) = {
            let mut inner = self.lock();
            let State::Running(r) = &inner.state else {
                return;
            };
            let r = Arc::clone(r);
            inner.trust = Trust::Unproven;
            let (tx, rx) = tokio::sync::watch::channel(false);
            self.transition(&mut inner, State::Pausing(rx));
            (r, tx)
        };
        tracing::warn!(instance = %self.config.name, why, "the compute did not prove it holds the key; stopping it");
        let _ = self.remove_route().await;
        running.stop().await;
        {
            let mut inner = self.lock();
            self.transition(
                &mut inner,
                State::Failed(super::Failure::Unproven(why.to_string())),
            );
        }
        let _ = tx.send(true);
    }

    /// While `running` runs and was proven by its greeting, probes it every
    /// [`PROOF_RECHECK`]: a greeting without a valid proof makes it unproven again (the
    /// direct and kernel routes close). A probe that finds nothing is left to the exit
    /// watch and the unreachable check.
    pub(super) async fn recheck_proof(self: Arc<Self>, running: Arc<dyn RunningCompute>) {
        let Some(check) = self.proof.get().cloned() else {
            return;
        };
        let target = ComputeTarget::of(&self.config);
        loop {
            tokio::time::sleep(PROOF_RECHECK).await;
            {
                let inner = self.lock();
                match &inner.state {
                    State::Running(r) if Arc::ptr_eq(r, &running) => {}
                    State::Frozen(r) if Arc::ptr_eq(r, &running) => continue,
                    _ => return,
                }
                if inner.trust != Trust::ByGreeting {
                    continue;
                }
            }
            let why = match probe_proof(target, &check, PROOF_PROBE_TIMEOUT, true).await {
                Ok(Greeted::Proven) | Err(TrustError::Probe(_)) => continue,
                Ok(Greeted::WithoutProof) => "a greeting without a proof of the key".to_owned(),
                Err(e @ TrustError::Refused(_)) => e.to_string(),
            };
            let demoted = {
                let mut inner = self.lock();
                let current = matches!(&inner.state, State::Running(r) if Arc::ptr_eq(r, &running));
                if current {
                    inner.trust = Trust::Unproven;
                }
                current
            };
            if demoted {
                tracing::warn!(instance = %self.config.name, why, "the compute address no longer proves the key: new connections take the perceptron route until a relayed login proves it");
                let _ = self.remove_route().await;
            }
        }
    }
}
