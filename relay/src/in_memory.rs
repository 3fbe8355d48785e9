//! An instance runtime whose driver is ready at once, for running the perceptron route in
//! memory: the phase tests (`perceptron/tests.rs`) and the `perceptron_login` fuzz target
//! ([`crate::fuzzing`]) share it.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use authplugin::KeyRing;
use tokio_util::sync::CancellationToken;

use crate::budgets::Budgets;
use crate::config::{
    AuthMode, BudgetSettings, DriverConfig, InstanceConfig, OnRelayExit, RouteMode,
};
use crate::control::Instance;
use crate::control::driver::{Driver, RunningCompute, WakeError};
use crate::future::BoxFuture;
use crate::metrics::Metrics;
use crate::profile::ComputeProfile;
use crate::runtime::InstanceRuntime;

/// A driver whose compute is ready at once: what runs in memory starts after P3.
struct ReadyDriver;

/// A compute that never exits and stops at once.
struct Forever;

impl Driver for ReadyDriver {
    fn start(&self, _: Duration) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>> {
        Box::pin(async { Ok(Box::new(Forever) as Box<dyn RunningCompute>) })
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async { None })
    }
}

impl RunningCompute for Forever {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(std::future::pending())
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Instance `t` in `auth` mode, signing with `ring`, every timeout `timeout`, default budgets,
/// the server-shim greeting profile, and a state directory that is never created (a learnt
/// profile that cannot be saved is only logged).
pub fn runtime(auth: AuthMode, ring: KeyRing, timeout: Duration) -> InstanceRuntime {
    runtime_with(auth, ring, timeout, |_| {})
}

/// [`runtime`] with its configuration changed by `edit` first; `[instance.tls]` is loaded.
pub fn runtime_with(
    auth: AuthMode,
    ring: KeyRing,
    timeout: Duration,
    edit: impl FnOnce(&mut InstanceConfig),
) -> InstanceRuntime {
    let addr = SocketAddr::from(([127, 0, 0, 1], 1));
    let config = InstanceConfig {
        name: "t".into(),
        listen: Some(addr),
        compute: addr,
        auth,
        proxy_protocol: false,
        resume_timeout: timeout,
        handshake_timeout: timeout,
        compute_timeout: timeout,
        idle_pause_after: Duration::from_secs(60),
        failed_wake_pause_after: Duration::from_secs(10),
        on_relay_exit: OnRelayExit::Pause,
        max_pending_connections: 16,
        health_check_users: vec!["haproxy".into()],
        capacity: None,
        offload: None,
        stop_after: None,
        park: false,
        park_after: Duration::from_secs(60),
        keepalive_queries: Vec::new(),
        resumable_sessions: false,
        max_detached_sessions: 1024,
        force_reattach_every: None,
        kernel_splice: false,
        splice_below_tcp: false,
        route: RouteMode::Pump,
        tls: None,
        require_secure_transport: false,
        compute_tls: crate::config::ComputeTlsMode::Off,
        compute_ca: None,
        compute_tls_name: None,
        compute_proof: crate::config::ComputeProofMode::Greeting,
        driver: DriverConfig::Process {
            command: vec!["unused".into()],
            cwd: ".".into(),
            stop_grace: Duration::from_secs(1),
            env: Vec::new(),
            run_as: None,
        },
    };
    let mut config = config;
    edit(&mut config);
    let tls = config
        .tls
        .clone()
        .and_then(|t| crate::tls::ServerTls::new(t).ok())
        .map(Arc::new);
    let metrics = Arc::new(Metrics::default());
    let ring = Arc::new(authplugin::key_file::LiveKeyRing::fixed(ring));
    let greetings = Arc::new(Mutex::new(authplugin::compute_proof::greeting_guard()));
    let dual = config.auth == AuthMode::Dual;
    let instance = Instance::new(
        config,
        Box::new(ReadyDriver),
        None,
        Arc::clone(&metrics),
        None,
    );
    if dual {
        // As the relay does: a compute is trusted only once it proves the key.
        instance.check_proofs_with(crate::control::trust::ProofCheck {
            ring: Arc::clone(&ring),
            greetings: Arc::clone(&greetings),
        });
    }
    InstanceRuntime {
        instance,
        profile: RwLock::new(ComputeProfile::server_shim_default()),
        state_dir: "/nonexistent/perceptron-in-memory".into(),
        ring,
        greetings,
        metrics,
        connection_ids: AtomicU32::new(1),
        shutdown: CancellationToken::new(),
        budgets: Arc::new(Budgets::new(BudgetSettings::default())),
        tls,
        compute_tls: None,
        kernel_splice: None,
        tcp_splice: None,
        evidence_refused: false.into(),
    }
}
