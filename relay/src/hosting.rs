//! Hosting an instance in the running relay: starting it (its runtime, listener, compute
//! adoption and background tasks) and removing it (no new logins, its connections drained or
//! cut, its compute stopped). The relay's start uses it for the configuration file's
//! instances, and `instance_dir` for instances added and removed while the relay runs
//! (docs/instances.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use authplugin::ReplayGuard;
use authplugin::key_file::LiveKeyRing;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budgets::Budgets;
use crate::config::{InstanceConfig, RouteMode};
use crate::control::{self, Instance};
use crate::fleet::FleetStore;
use crate::ledger::Ledger;
use crate::lifecycle::Phase;
use crate::limits::{self, Admission};
use crate::listener;
use crate::metrics::Metrics;
use crate::preflight::TokenFileError;
use crate::profile::{self, ComputeProfile};
use crate::registry::{Origin, Registered, Registry};
use crate::router::kernel::{NftRoute, NftTable};
use crate::router::nft::Dnat;
use crate::router::{KernelRoute, KernelRouteError};
use crate::runtime::InstanceRuntime;
use crate::splice::below_tcp::TcpSplice;
use crate::splice::sockhash::KernelSplice;

/// The kernel splices the relay could load: through sockets, and below TCP.
type Splices = (Option<Arc<KernelSplice>>, Option<Arc<TcpSplice>>);
use crate::tls::{ServerTls, TlsLoadError};

/// Why the relay could not start.
#[derive(Debug)]
pub enum StartError {
    /// A listener could not be bound.
    Bind {
        /// The instance.
        instance: String,
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The state directory could not be created, or its ledger opened for writing (a
    /// read-only or inaccessible directory).
    StateDir(std::path::PathBuf, std::io::Error),
    /// The admin token file is unusable.
    AdminToken(TokenFileError),
    /// The kernel route (`route = "nftables"`) cannot be set up.
    KernelRoute {
        /// The first instance that asks for it.
        instance: String,
        /// The relay's table.
        table: String,
        /// What is missing or what `nft` answered.
        source: KernelRouteError,
    },
    /// `[relay.store]` names a fleet this relay cannot join.
    Fleet(crate::fleet::JoinError),
    /// `[relay.store] definitions_key_file` cannot be used.
    DefinitionsKey(authplugin::key_file::KeyFileError),
    /// An instance's `[instance.tls]` cannot be loaded (changed since the configuration was
    /// checked).
    Tls {
        /// The instance.
        instance: String,
        /// Which file and why.
        source: TlsLoadError,
    },
    /// An instance's `compute_ca` cannot be loaded (changed since the configuration was
    /// checked).
    ComputeTls {
        /// The instance.
        instance: String,
        /// What is wrong.
        source: crate::tls::ComputeTlsError,
    },
    /// Another relay holds the state directory's lock.
    Locked(crate::preflight::LockError),
    /// An instance of that name is live, or still draining after its removal.
    Exists(String),
    /// Its offloaded data directory overlaps another instance's, the state directory or a
    /// `file://` store ([`crate::config::data_dirs`]).
    DataDir {
        /// The instance.
        instance: String,
        /// Which overlap.
        message: String,
    },
    /// `[instance.offload]`'s store cannot be opened.
    Offload {
        /// The instance.
        instance: String,
        /// What is wrong.
        error: Box<crate::control::driver::offloading::MoverError>,
    },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bind {
                instance,
                addr,
                source,
            } => {
                write!(
                    f,
                    "instance '{instance}': cannot listen on {addr}: {source}"
                )
            }
            // The path is what an operator has to fix; the OS error alone ("Read-only file
            // system") does not say which of the relay's paths it is about.
            Self::StateDir(dir, e) => write!(
                f,
                "state directory {}: cannot create it or write its usage ledger: {e}",
                dir.display()
            ),
            Self::AdminToken(e) => write!(f, "relay.admin_token_file: {e}"),
            Self::KernelRoute {
                instance,
                table,
                source,
            } => write!(
                f,
                "instance '{instance}': route = \"nftables\" {source} (nftables table inet \
                 {table}; or set route = \"pump\")"
            ),
            Self::Fleet(e) => write!(f, "relay.store: cannot join the fleet: {e}"),
            Self::DefinitionsKey(e) => write!(f, "relay.store.definitions_key_file: {e}"),
            Self::ComputeTls { instance, source } => {
                write!(f, "instance '{instance}': {}: {source}", source.key())
            }
            Self::Tls { instance, source } => {
                write!(
                    f,
                    "instance '{instance}': tls.{}: {source}",
                    source.file.key()
                )
            }
            Self::Locked(e) => write!(f, "relay.state_dir: {e}"),
            Self::DataDir { instance, message } => {
                write!(f, "instance '{instance}': offload.data_dir: {message}")
            }
            Self::Exists(instance) => write!(
                f,
                "instance '{instance}' exists (or its previous definition is still draining)"
            ),
            Self::Offload { instance, error } => {
                write!(f, "instance '{instance}': offload.store: {error}")
            }
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Bind { source, .. } | Self::StateDir(_, source) => Some(source),
            Self::AdminToken(e) => Some(e),
            Self::KernelRoute { source, .. } => Some(source),
            Self::Fleet(e) => Some(e),
            Self::DefinitionsKey(e) => Some(e),
            Self::Tls { source, .. } => Some(source),
            Self::ComputeTls { source, .. } => Some(source),
            Self::Locked(e) => Some(e),
            Self::Offload { .. } | Self::Exists(_) | Self::DataDir { .. } => None,
        }
    }
}

/// What every instance of the relay shares, and what starts and removes one.
pub struct InstanceHost {
    /// The live and draining instances.
    pub registry: Arc<Registry>,
    state_dir: PathBuf,
    ring: Arc<LiveKeyRing>,
    greetings: Arc<Mutex<ReplayGuard>>,
    metrics: Arc<Metrics>,
    ledger: Arc<Ledger>,
    fleet: Option<Arc<dyn FleetStore>>,
    budgets: Arc<Budgets>,
    admission: Arc<Admission>,
    /// Loaded when the first instance whose held connections may be spliced starts.
    kernel_splice: OnceLock<Option<Arc<KernelSplice>>>,
    /// The splice below TCP, loaded only once an instance wants it: attached, the program
    /// looks up every loopback segment.
    tcp_splice: OnceLock<Option<Arc<TcpSplice>>>,
    /// The kernel route's table, when the configuration file's instances use it.
    table: Option<Arc<NftTable>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// The relay-wide parts an [`InstanceHost`] hands to each instance.
pub struct Shared {
    /// The relay's state directory.
    pub state_dir: PathBuf,
    /// The key ring.
    pub ring: Arc<LiveKeyRing>,
    /// Compute greetings whose proof of the key was accepted.
    pub greetings: Arc<Mutex<ReplayGuard>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The usage ledger.
    pub ledger: Arc<Ledger>,
    /// The fleet's store, when the relay is one of a fleet.
    pub fleet: Option<Arc<dyn FleetStore>>,
    /// The wake-cost budgets.
    pub budgets: Arc<Budgets>,
    /// The pre-login admission.
    pub admission: Arc<Admission>,
    /// The kernel route's table.
    pub table: Option<Arc<NftTable>>,
    /// The relay's shutdown.
    pub shutdown: CancellationToken,
    /// Every task of the relay (drained at shutdown).
    pub tracker: TaskTracker,
}

/// Why an instance could not be removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoveError {
    /// No instance has that name.
    NotFound(String),
    /// It is an `[[instance]]` of the configuration file.
    ConfigFile(String),
    /// The file that defines it cannot be removed (the instance runs on).
    File(String),
}

impl std::fmt::Display for RemoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(name) => write!(f, "no instance named '{name}'"),
            Self::ConfigFile(name) => write!(
                f,
                "instance '{name}' is an [[instance]] of the configuration file: remove it \
                 there and restart the relay"
            ),
            Self::File(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for RemoveError {}

/// What a removal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removal {
    /// Connections still open when it began (drained, or cut when forced).
    pub open: usize,
    /// Whether they are cut rather than waited for.
    pub forced: bool,
}

impl InstanceHost {
    /// A host with nothing started yet.
    #[must_use]
    pub fn new(shared: Shared) -> Arc<Self> {
        Arc::new(Self {
            registry: Arc::new(Registry::default()),
            state_dir: shared.state_dir,
            ring: shared.ring,
            greetings: shared.greetings,
            metrics: shared.metrics,
            ledger: shared.ledger,
            fleet: shared.fleet,
            budgets: shared.budgets,
            admission: shared.admission,
            kernel_splice: OnceLock::new(),
            tcp_splice: OnceLock::new(),
            table: shared.table,
            shutdown: shared.shutdown,
            tracker: shared.tracker,
        })
    }

    /// The kernel splices: through sockets, loaded at the first call, and below TCP, loaded
    /// at the first call that wants it (`None` where the kernel or the
    /// relay's capabilities do not allow one, said once in the log).
    fn kernel_splice(&self, below_tcp_wanted: bool) -> Splices {
        let sockets = self
            .kernel_splice
            .get_or_init(|| {
                KernelSplice::load()
                    .inspect(|_| tracing::info!("held connections are spliced in the kernel through their sockets (eBPF sockhash)"))
                    .inspect_err(|why| tracing::warn!(reason = %why, "held connections stay on the relay's pump: the kernel splice is not available"))
                    .ok()
            })
            .clone();
        let below_tcp = if below_tcp_wanted && sockets.is_some() {
            self.tcp_splice
                .get_or_init(|| {
                    TcpSplice::load()
                        .inspect(|_| tracing::info!("held connections may be spliced in the kernel below TCP (TC), attached to an interface at its first session"))
                        .inspect_err(|why| tracing::warn!(reason = %why, "held connections are spliced through their sockets: the splice below TCP is not available"))
                        .ok()
                })
                .clone()
        } else {
            None
        };
        (sockets, below_tcp)
    }

    /// Starts `cfg`: binds its listener, builds its runtime, adopts or reconciles its compute
    /// with `last`, the state the ledger last recorded for it (read from the ledger when
    /// `None` is given for an instance added while the relay runs: pass
    /// `Some(None)` for "nothing recorded"), and serves it. Its name must not be live or
    /// draining.
    ///
    /// # Errors
    /// [`StartError`]: nothing of the instance is left running then.
    pub async fn start(
        &self,
        cfg: InstanceConfig,
        origin: Origin,
        last: Option<Option<Phase>>,
    ) -> Result<Arc<Registered>, StartError> {
        if self.registry.get(&cfg.name).is_some() || self.registry.draining(&cfg.name).is_some() {
            return Err(StartError::Exists(cfg.name));
        }
        let others: Vec<Arc<Registered>> = self.registry.live();
        let others: Vec<&InstanceConfig> = others.iter().map(|r| &r.rt.instance.config).collect();
        let state = [("relay.state_dir", self.state_dir.as_path())];
        if let Some(message) = crate::config::data_dirs::overlap(&cfg, &others, &state) {
            return Err(StartError::DataDir {
                instance: cfg.name,
                message,
            });
        }
        let tls = cfg
            .tls
            .clone()
            .map(|settings| {
                let tls = ServerTls::new(settings).map_err(|source| StartError::Tls {
                    instance: cfg.name.clone(),
                    source,
                })?;
                self.metrics
                    .set_tls_expiry(&cfg.name, tls.current().not_after);
                Ok(Arc::new(tls))
            })
            .transpose()?;
        let compute_tls = crate::tls::compute_client(
            cfg.compute_tls,
            cfg.compute_ca.as_deref(),
            &cfg.compute_tls_name
                .clone()
                .unwrap_or_else(|| cfg.compute.ip().to_string()),
        )
        .map_err(|source| StartError::ComputeTls {
            instance: cfg.name.clone(),
            source,
        })?;
        let listener = cfg
            .listen
            .map(|addr| {
                listener::listen(addr).map_err(|source| StartError::Bind {
                    instance: cfg.name.clone(),
                    addr,
                    source,
                })
            })
            .transpose()?;
        let driver =
            control::driver::driver_for(&cfg, &self.state_dir, Some(Arc::clone(&self.ledger)))
                .map_err(|error| StartError::Offload {
                    instance: cfg.name.clone(),
                    error: Box::new(error),
                })?;
        let kernel = match (&self.table, cfg.route, dnat_of(&cfg)) {
            (Some(table), RouteMode::Nftables, Some(dnat)) => {
                Some(Arc::new(NftRoute::new(Arc::clone(table), dnat)) as Arc<dyn KernelRoute>)
            }
            _ => None,
        };
        let learnt = profile::load(&self.state_dir, &cfg.name);
        let instance = Instance::new(
            cfg.clone(),
            driver,
            kernel,
            Arc::clone(&self.metrics),
            // A fleet's ledger is in its store, each transition written once.
            self.fleet.is_none().then(|| Arc::clone(&self.ledger)),
        );
        if cfg.auth == crate::config::AuthMode::Dual {
            // Before adoption: a compute found running is trusted only as far as it proves
            // the key.
            instance.check_proofs_with(control::trust::ProofCheck {
                ring: Arc::clone(&self.ring),
                greetings: Arc::clone(&self.greetings),
            });
        }
        let tasks = self.shutdown.child_token();
        if let Some(store) = &self.fleet {
            // The fleet's state decides; following it adopts a running compute.
            instance.join_fleet(Arc::clone(store));
            self.tracker
                .spawn(Arc::clone(&instance).take_part_in_fleet(tasks.clone()));
        } else {
            let last = match last {
                Some(last) => last,
                None => self.last_recorded(&cfg.name),
            };
            instance.adopt_or_reconcile(last).await;
        }
        tracing::info!(instance = %cfg.name, state = instance.state_name(), origin = %origin.describe(), "instance registered");
        self.tracker
            .spawn(Arc::clone(&instance).pause_when_idle(tasks.clone()));
        self.tracker
            .spawn(Arc::clone(&instance).scale_with_load(tasks.clone()));
        let (kernel_splice, tcp_splice) = if cfg.splices_held() {
            self.kernel_splice(cfg.splice_below_tcp)
        } else {
            (None, None)
        };
        let rt = Arc::new(InstanceRuntime {
            instance,
            profile: RwLock::new(learnt.unwrap_or_else(ComputeProfile::server_shim_default)),
            state_dir: self.state_dir.clone(),
            ring: Arc::clone(&self.ring),
            greetings: Arc::clone(&self.greetings),
            metrics: Arc::clone(&self.metrics),
            connection_ids: AtomicU32::new(crate::runtime::first_connection_id()),
            // Its own: a removal ends its accept loop and refuses its wakes in flight.
            shutdown: self.shutdown.child_token(),
            budgets: Arc::clone(&self.budgets),
            tls,
            compute_tls,
            kernel_splice,
            tcp_splice,
            evidence_refused: false.into(),
        });
        let slot = self.admission.open_slot(cfg.max_pending_connections);
        let registered = Arc::new(Registered::new(rt, origin, slot, tasks));
        if let Err(ours) = self.registry.insert(Arc::clone(&registered)) {
            // Started twice at once under one name: the second goes as it came. Its compute is
            // not stopped: it may be the one the first definition adopted.
            self.admission.close_slot(ours.slot);
            ours.tasks.cancel();
            return Err(StartError::Exists(cfg.name));
        }
        match (listener, cfg.listen) {
            (Some(listener), Some(listen)) => {
                tracing::info!(instance = %cfg.name, %listen, compute = %cfg.compute, route = cfg.route.as_str(), "listening");
                self.tracker.spawn(accept_loop(
                    listener,
                    Arc::clone(&registered),
                    Arc::clone(&self.admission),
                    self.tracker.clone(),
                ));
            }
            _ => {
                tracing::debug!(instance = %cfg.name, compute = %cfg.compute, "reached through endpoints only");
            }
        }
        Ok(registered)
    }

    /// The state the ledger last recorded for `instance` (none when it cannot be read: the
    /// compute is then reconciled as if new).
    fn last_recorded(&self, instance: &str) -> Option<Phase> {
        match self.ledger.read() {
            Ok((events, _)) => events
                .iter()
                .rev()
                .find(|e| e.instance == instance)
                .map(|e| e.state),
            Err(e) => {
                tracing::warn!(instance, error = %e, "cannot read the usage ledger; the instance's compute is reconciled as if new");
                None
            }
        }
    }

    /// Removes instance `name`: no login reaches it from now on; its open connections end
    /// on their own (or at once when `force`); then its compute is stopped (its last ledger
    /// line written) and it is forgotten. Returns at once; the drain goes on in the
    /// background. A draining instance can be removed again with `force` to cut what is
    /// left.
    ///
    /// # Errors
    /// [`RemoveError`]: no such instance, or one only a restart removes.
    pub fn remove(self: &Arc<Self>, name: &str, force: bool) -> Result<Removal, RemoveError> {
        if let Some(draining) = self.registry.draining(name) {
            let open = draining.open_connections();
            if force {
                tracing::warn!(
                    instance = name,
                    open,
                    "removal forced: cutting its connections"
                );
                draining.cut.cancel();
            }
            return Ok(Removal {
                open,
                forced: force,
            });
        }
        let Some(live) = self.registry.get(name) else {
            return Err(RemoveError::NotFound(name.to_owned()));
        };
        if live.origin == Origin::ConfigFile {
            return Err(RemoveError::ConfigFile(name.to_owned()));
        }
        let Some(removed) = self.registry.start_draining(name) else {
            return Err(RemoveError::NotFound(name.to_owned()));
        };
        removed.rt.shutdown.cancel();
        self.admission.close_slot(removed.slot);
        let open = removed.open_connections();
        if force {
            removed.cut.cancel();
        }
        tracing::info!(
            instance = name,
            open,
            forced = force,
            "instance removed; draining its connections"
        );
        removed.connections.close();
        let host = Arc::clone(self);
        self.tracker.spawn(async move {
            tokio::select! {
                () = removed.connections.wait() => {}
                // The relay's own shutdown stops every compute, this one included.
                () = host.shutdown.cancelled() => return,
            }
            if host.fleet.is_some() {
                host.pause_in_fleet(&removed).await;
            } else {
                removed.rt.instance.shut_down().await;
            }
            removed.tasks.cancel();
            // Before `drained`: a new definition under the name may start right after it and
            // set gauges of its own.
            host.metrics.forget_instance(
                removed.name(),
                &crate::control::driver::offloading::Storage::NAMES,
            );
            host.registry.drained(removed.name());
            tracing::info!(
                instance = removed.name(),
                state = removed.rt.instance.state_name(),
                "instance drained and gone"
            );
        });
        Ok(Removal {
            open,
            forced: force,
        })
    }
}

impl InstanceHost {
    /// Pauses a removed instance of a fleet whose connections on this relay have ended. Its
    /// compute is the fleet's: it is paused at once if no other relay holds a connection to
    /// it, else the pause is tried again (after 1 s, then less often, up to every 30 s; the
    /// idle pause goes on too, with the fleet's protocol) until the last relay's connections
    /// have ended: a pause the fleet refused because a record changed meanwhile (another
    /// relay's last connection closing) is not left to an idle pause that may be hours away.
    /// Returns once it is paused, or at shutdown.
    async fn pause_in_fleet(&self, removed: &Registered) {
        let instance = &removed.rt.instance;
        let mut wait = Duration::from_secs(1);
        let mut said = false;
        while !matches!(instance.phase(), Phase::Paused | Phase::Failed) {
            if let Err(e) = instance.pause(false, "instance removed").await {
                if !std::mem::replace(&mut said, true) {
                    tracing::info!(instance = removed.name(), reason = %e, "removed instance not paused yet; tried again until no relay of the fleet holds a connection to it");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.shutdown.cancelled() => return,
            }
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }
}

/// The kernel route's rule for `cfg`: none without a listen address of its own (checked at
/// load: `route = "nftables"` needs one).
pub fn dnat_of(cfg: &InstanceConfig) -> Option<Dnat> {
    Some(Dnat {
        listen: cfg.listen?,
        compute: cfg.compute,
    })
}

/// Admits each accepted connection (or refuses it with ERR 1040 and closes it, without a
/// task, a greeting or a wake; or with ERR 1129 when its source is blocked for failed logins),
/// then routes it: the direct route while the instance runs (unless its logins must meet the
/// relay's TLS), else the perceptron. Ends when the relay shuts down or the instance is
/// removed.
async fn accept_loop(
    listener: TcpListener,
    instance: Arc<Registered>,
    admission: Arc<Admission>,
    tracker: TaskTracker,
) {
    let rt = Arc::clone(&instance.rt);
    let name = rt.instance.config.name.clone();
    let metrics = Arc::clone(&rt.metrics);
    listener::accept_until(listener, rt.shutdown.clone(), &name, &metrics, |stream, peer| {
        if let Some(refusal) = rt.budgets.source_refusal(peer.ip(), Some(&name), std::time::Instant::now()) {
            rt.metrics.budget_refused(&name, refusal.label());
            // As for ERR 1040: a fresh socket takes the ERR without waiting, and a close says
            // the same if it does not.
            let _ = stream.try_write(&refusal.pre_greeting(&peer.ip().to_string()));
            tracing::debug!(instance = %name, client = %peer, reason = refusal.label(), "source blocked; refused");
            return;
        }
        let pending = match admission.try_admit(instance.slot, peer.ip()) {
            Ok(p) => p,
            Err(refusal) => {
                rt.metrics.refused(&name, refusal.label());
                // Fresh socket, empty send buffer: the ERR fits without waiting. If it does not,
                // the close alone says the same.
                let _ = stream.try_write(&limits::too_many_connections());
                tracing::debug!(instance = %name, client = %peer, reason = refusal.label(), "too many pending connections; refused");
                return;
            }
        };
        if pending.made_room() {
            rt.metrics.refused(&name, "evicted");
            tracing::debug!(instance = %name, client = %peer, "pre-login cap full; the largest holder's oldest pending connection closed for this one");
        }
        let rt = Arc::clone(&rt);
        // Aborted if evicted while pending (before its login): the handler is dropped there,
        // which closes the socket and releases its count (a direct route's).
        let attach = pending.attacher();
        // An instance whose logins must meet the relay's TLS (require_secure_transport,
        // client_ca) keeps every login on the perceptron route, which enforces them (the
        // direct route hands the connection to the compute, which would not); so does one
        // with resumable sessions, whose every connection needs the relay's login and ticket.
        // Boxed: a connection's task lives for hours, and its future is large
        // (bench/memory: 18.7 KB per idle direct connection unboxed, 7.2 KB boxed).
        // The direct route's connection counts from here, decided under the lock an idle
        // pause takes: no pause can stop the compute under it before its client speaks.
        let direct = if rt.instance.config.relays_every_login() {
            None
        } else {
            rt.instance.hold_direct()
        };
        let session: crate::future::Session = match direct {
            Some(guard) => Box::pin(crate::direct::handle(rt, stream, peer, pending, guard)),
            None => Box::pin(crate::perceptron::handle(rt, stream, peer, pending)),
        };
        attach.attach(tracker.spawn(instance.serve(session)).abort_handle());
    })
    .await;
}
