//! The relay process: one listener per instance, the accept loops, and graceful shutdown
//! (CONTRIBUTING.md, *Graceful shutdown*: stop accepting, drain with a deadline, then stop the computes).

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use authplugin::key_file::LiveKeyRing;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{self, AdminState};
use crate::budgets::Budgets;
use crate::config::{Config, InstanceConfig, OnRelayExit, RouteMode};
use crate::control::{self, Instance};
use crate::endpoint::{self, Endpoint};
use crate::ledger::Ledger;
use crate::limits::{self, Admission, PendingCaps};
use crate::listener;
use crate::metrics::Metrics;
use crate::perceptron;
use crate::preflight::{TokenFileError, read_token};
use crate::profile::{self, ComputeProfile};
use crate::router::kernel::{NftRoute, NftTable};
use crate::router::nft::{self, Dnat};
use crate::router::{KernelRoute, KernelRouteError};
use crate::runtime::InstanceRuntime;
use crate::tls::{ServerTls, TlsLoadError};

/// How long open connections may take to finish after a shutdown signal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// `[instance.offload]`'s store cannot be opened.
    Offload {
        /// The instance.
        instance: String,
        /// What is wrong.
        message: String,
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
            Self::Offload { instance, message } => {
                write!(f, "instance '{instance}': offload.store: {message}")
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
            Self::Tls { source, .. } => Some(source),
            Self::ComputeTls { source, .. } => Some(source),
            Self::Locked(e) => Some(e),
            Self::Offload { .. } => None,
        }
    }
}

/// Runs the relay until `shutdown` fires, then drains (until the open connections close,
/// [`DRAIN_TIMEOUT`] passes or `cut` fires) and stops the computes. With an instance on the
/// kernel route, the relay's nftables table is cleared and created first and deleted last,
/// whatever happens between.
///
/// # Errors
/// [`StartError`] if a listener cannot be bound or the kernel route cannot be set up; nothing
/// is left running in that case.
pub async fn run(
    config: Config,
    ring: LiveKeyRing,
    shutdown: CancellationToken,
    cut: CancellationToken,
) -> Result<(), StartError> {
    let state_dir_error = |e| StartError::StateDir(config.relay.state_dir.clone(), e);
    std::fs::create_dir_all(&config.relay.state_dir).map_err(state_dir_error)?;
    // Before anything in the directory is touched: two relays would both write its ledger
    // and pid files.
    let _lock =
        crate::preflight::lock_state_dir(&config.relay.state_dir).map_err(StartError::Locked)?;
    let table = prepare_kernel_route(&config).await?;
    let result = serve(config, ring, shutdown, cut, table.as_ref()).await;
    if let Some(table) = table {
        match table.delete().await {
            Ok(()) => tracing::info!(table = table.name(), "nftables table deleted"),
            Err(e) => {
                tracing::error!(table = table.name(), error = %e, "cannot delete the nftables table");
            }
        }
    }
    result
}

/// The kernel route's table, cleared and created afresh, when an instance uses it.
async fn prepare_kernel_route(config: &Config) -> Result<Option<Arc<NftTable>>, StartError> {
    let routed: Vec<&InstanceConfig> = config
        .instances
        .iter()
        .filter(|i| i.route == RouteMode::Nftables)
        .collect();
    let Some(first) = routed.first() else {
        return Ok(None);
    };
    let name = config.relay.nftables_table.clone().unwrap_or_else(|| {
        // Canonical, so `state` and `./state` name the same table.
        let dir = std::fs::canonicalize(&config.relay.state_dir)
            .unwrap_or_else(|_| config.relay.state_dir.clone());
        nft::default_table_name(&dir)
    });
    let dnats: Vec<Dnat> = routed.iter().filter_map(|i| dnat_of(i)).collect();
    let table =
        NftTable::prepare(&name, &dnats)
            .await
            .map_err(|source| StartError::KernelRoute {
                instance: first.name.clone(),
                table: name.clone(),
                source,
            })?;
    tracing::info!(table = %name, instances = routed.len(), "nftables table ready (stale rules cleared)");
    for inst in &routed {
        warn_about_sysctls(inst);
    }
    Ok(Some(table))
}

/// The kernel route's rule for `cfg`: none without a listen address of its own (checked at
/// load: `route = "nftables"` needs one).
fn dnat_of(cfg: &InstanceConfig) -> Option<Dnat> {
    Some(Dnat {
        listen: cfg.listen?,
        compute: cfg.compute,
    })
}

/// Warns about kernel settings a kernel route to or from another host needs: forwarding for
/// a compute elsewhere, `route_localnet` for clients elsewhere reaching a loopback compute.
fn warn_about_sysctls(cfg: &InstanceConfig) {
    let on = |path: &str| std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "1");
    let Some(dnat) = dnat_of(cfg) else {
        return;
    };
    if dnat.compute_is_remote() {
        let forwarding = if cfg.compute.is_ipv4() {
            "/proc/sys/net/ipv4/ip_forward"
        } else {
            "/proc/sys/net/ipv6/conf/all/forwarding"
        };
        if !on(forwarding) {
            tracing::warn!(instance = %cfg.name, compute = %cfg.compute, "the kernel route forwards clients on other hosts to a compute on another host only with forwarding on ({forwarding} = 1)");
        }
    }
    if cfg.compute.ip().is_loopback()
        && !dnat.listen.ip().is_loopback()
        && dnat.listen.is_ipv4()
        && !on("/proc/sys/net/ipv4/conf/all/route_localnet")
    {
        tracing::warn!(instance = %cfg.name, listen = %dnat.listen, compute = %cfg.compute, "clients on other hosts reach a loopback compute through the kernel route only with net.ipv4.conf.all.route_localnet = 1; bind the compute to a routable address, or they are refused while the instance runs");
    }
}

/// The relay proper: listeners, instances, admin API; returns after the drain and the
/// computes' stop.
async fn serve(
    config: Config,
    ring: LiveKeyRing,
    shutdown: CancellationToken,
    cut: CancellationToken,
    table: Option<&Arc<NftTable>>,
) -> Result<(), StartError> {
    raise_descriptor_limit(config.relay.max_pending_connections);
    let state_dir_error = |e| StartError::StateDir(config.relay.state_dir.clone(), e);
    let ring = Arc::new(ring);
    let greetings = Arc::new(Mutex::new(authplugin::compute_proof::greeting_guard()));
    let metrics = Arc::new(Metrics::default());
    let ledger = Arc::new(Ledger::open(&config.relay.state_dir).map_err(state_dir_error)?);
    let (last_states, torn) = ledger.read().map_err(state_dir_error)?;
    if torn > 0 {
        tracing::warn!(lines = torn, ledger = %ledger.path().display(), "skipped torn or garbled ledger lines (earlier records kept)");
    }
    let fleet = crate::fleet::join(&config.relay.store)
        .await
        .map_err(StartError::Fleet)?;
    let tracker = TaskTracker::new();
    tracker.spawn(crate::keys::follow(
        Arc::clone(&ring),
        Arc::clone(&metrics),
        shutdown.clone(),
    ));
    if let Some(store) = &fleet {
        tracker.spawn(report_fleet_store(
            Arc::clone(store),
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
    }
    let budgets = Arc::new(Budgets::new(config.relay.budgets));
    let admission = Admission::new(
        PendingCaps {
            per_relay: config.relay.max_pending_connections,
            per_source: config.relay.max_pending_per_source,
        },
        // Each instance's cap, then each endpoint's (the relay-wide one: an endpoint's
        // connections are counted against their instance only once routed).
        config
            .instances
            .iter()
            .map(|i| i.max_pending_connections)
            .chain(
                config
                    .endpoints
                    .iter()
                    .map(|_| config.relay.max_pending_connections),
            )
            .collect(),
    );
    let mut listeners = Vec::new();
    // Loaded once, only when some instance's held connections may be spliced.
    let kernel_splice = config
        .instances
        .iter()
        .any(crate::perceptron::may_splice)
        .then(|| match crate::kernel_splice::KernelSplice::load() {
            Ok(splice) => {
                tracing::info!("held connections are spliced in the kernel (eBPF sockhash)");
                Some(splice)
            }
            Err(why) => {
                tracing::warn!(reason = %why, "held connections stay on the relay's pump: the kernel splice is not available");
                None
            }
        })
        .flatten();
    for cfg in &config.instances {
        let tls = cfg
            .tls
            .clone()
            .map(|settings| {
                let tls = ServerTls::new(settings).map_err(|source| StartError::Tls {
                    instance: cfg.name.clone(),
                    source,
                })?;
                metrics.set_tls_expiry(&cfg.name, tls.current().not_after);
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
        let learnt = profile::load(&config.relay.state_dir, &cfg.name);
        let kernel = match (table, cfg.route, dnat_of(cfg)) {
            (Some(table), RouteMode::Nftables, Some(dnat)) => {
                Some(Arc::new(NftRoute::new(Arc::clone(table), dnat)) as Arc<dyn KernelRoute>)
            }
            _ => None,
        };
        let driver =
            control::driver::driver_for(cfg, &config.relay.state_dir, Some(Arc::clone(&ledger)))
                .map_err(|message| StartError::Offload {
                    instance: cfg.name.clone(),
                    message,
                })?;
        let instance = Instance::new(
            cfg.clone(),
            driver,
            kernel,
            Arc::clone(&metrics),
            // A fleet's ledger is in its store, each transition written once.
            fleet.is_none().then(|| Arc::clone(&ledger)),
        );
        if cfg.auth == crate::config::AuthMode::Dual {
            // Before adoption: a compute found running is trusted only as far as it proves
            // the key.
            instance.check_proofs_with(control::trust::ProofCheck {
                ring: Arc::clone(&ring),
                greetings: Arc::clone(&greetings),
            });
        }
        if let Some(store) = &fleet {
            // The fleet's state decides; following it adopts a running compute.
            instance.join_fleet(Arc::clone(store));
            tracker.spawn(Arc::clone(&instance).take_part_in_fleet(shutdown.clone()));
        } else {
            let last = last_states
                .iter()
                .rev()
                .find(|e| e.instance == cfg.name)
                .map(|e| e.state);
            instance.adopt_or_reconcile(last).await;
        }
        tracing::info!(instance = %cfg.name, state = instance.state_name(), "instance registered");
        tracker.spawn(Arc::clone(&instance).pause_when_idle(shutdown.clone()));
        tracker.spawn(Arc::clone(&instance).scale_with_load(shutdown.clone()));
        let rt = Arc::new(InstanceRuntime {
            instance,
            profile: RwLock::new(learnt.unwrap_or_else(ComputeProfile::server_shim_default)),
            state_dir: config.relay.state_dir.clone(),
            ring: Arc::clone(&ring),
            greetings: Arc::clone(&greetings),
            metrics: Arc::clone(&metrics),
            connection_ids: AtomicU32::new(crate::runtime::first_connection_id()),
            shutdown: shutdown.clone(),
            budgets: Arc::clone(&budgets),
            tls,
            compute_tls,
            kernel_splice: kernel_splice
                .clone()
                .filter(|_| crate::perceptron::may_splice(cfg)),
        });
        match cfg.listen {
            Some(listen) => {
                tracing::info!(instance = %cfg.name, %listen, compute = %cfg.compute, route = cfg.route.as_str(), "listening")
            }
            None => {
                tracing::debug!(instance = %cfg.name, compute = %cfg.compute, "reached through endpoints only")
            }
        }
        listeners.push((listener, rt));
    }
    let runtimes: Vec<_> = listeners.iter().map(|(_, rt)| Arc::clone(rt)).collect();
    if let Some(addr) = config.relay.admin_listen {
        let token = match &config.relay.admin_token_file {
            Some(path) => Some(read_token(path).map_err(StartError::AdminToken)?),
            None => None,
        };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind {
                instance: "(admin API)".into(),
                addr,
                source,
            })?;
        tracing::info!(listen = %addr, token = token.is_some(), "admin API listening");
        let state = Arc::new(AdminState {
            runtimes: runtimes.clone(),
            metrics: Arc::clone(&metrics),
            ledger: Arc::clone(&ledger),
            token,
            admission: Arc::clone(&admission),
            budgets: Arc::clone(&budgets),
            fleet: fleet.clone(),
            keys: Arc::clone(&ring),
        });
        tracker.spawn(admin::serve(
            listener,
            state,
            shutdown.clone(),
            tracker.clone(),
        ));
    }
    let mut endpoints = Vec::with_capacity(config.endpoints.len());
    for ep in &config.endpoints {
        let listener = listener::listen(ep.listen).map_err(|source| StartError::Bind {
            instance: format!("(endpoint {})", ep.listen),
            addr: ep.listen,
            source,
        })?;
        let label = format!("endpoint {}", ep.listen);
        let tls = ep
            .tls
            .clone()
            .map(|settings| {
                let tls = ServerTls::new(settings).map_err(|source| StartError::Tls {
                    instance: label.clone(),
                    source,
                })?;
                metrics.set_tls_expiry(&label, tls.current().not_after);
                Ok(Arc::new(tls))
            })
            .transpose()?;
        tracing::info!(listen = %ep.listen, route_by = ?ep.route_by, tls = tls.is_some(), instances = runtimes.len(), "endpoint listening");
        endpoints.push((
            listener,
            Arc::new(Endpoint::new(
                ep.clone(),
                &runtimes,
                tls,
                Arc::clone(&metrics),
            )),
        ));
    }
    // Every certificate the relay serves, followed (file changes, SIGHUP).
    let certificates: Vec<(String, Arc<ServerTls>)> = runtimes
        .iter()
        .filter_map(|rt| {
            Some((
                rt.instance.config.name.clone(),
                Arc::clone(rt.tls.as_ref()?),
            ))
        })
        .chain(
            endpoints
                .iter()
                .filter_map(|(_, ep)| Some((ep.label().to_owned(), Arc::clone(ep.tls.as_ref()?)))),
        )
        .collect();
    if !certificates.is_empty() {
        tracker.spawn(reload_certificates(
            certificates,
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
    }
    let instance_count = listeners.len();
    for (i, (listener, endpoint)) in endpoints.into_iter().enumerate() {
        let admit = Admit {
            admission: Arc::clone(&admission),
            index: instance_count + i,
        };
        tracker.spawn(endpoint_accept_loop(
            listener,
            endpoint,
            Arc::clone(&budgets),
            Arc::clone(&metrics),
            admit,
            shutdown.clone(),
            tracker.clone(),
        ));
    }
    for (index, (listener, rt)) in listeners.into_iter().enumerate() {
        let Some(listener) = listener else {
            continue;
        };
        let admit = Admit {
            admission: Arc::clone(&admission),
            index,
        };
        tracker.spawn(accept_loop(
            listener,
            rt,
            admit,
            shutdown.clone(),
            tracker.clone(),
        ));
    }
    tracing::info!(signing_key = %ring.current().signing_key().id(), "relay ready");
    shutdown.cancelled().await;
    let open = || -> usize {
        runtimes
            .iter()
            .map(|rt| {
                let s = rt.instance.status();
                s.direct_connections + s.perceptron_connections
            })
            .sum()
    };
    match open() {
        0 => tracing::info!("shutting down: no new connections, none open"),
        n => tracing::info!(
            open = n,
            "shutting down: no new connections; waiting up to {}s for the open ones to close \
             (a second Ctrl-C or SIGTERM closes them now)",
            DRAIN_TIMEOUT.as_secs()
        ),
    }
    tracker.close();
    tokio::select! {
        () = tracker.wait() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!(open = open(), "drain deadline passed; closing the remaining connections");
        }
        () = cut.cancelled() => {
            tracing::warn!(open = open(), "second signal; closing the remaining connections now");
        }
    }
    for rt in runtimes {
        match rt.instance.config.on_relay_exit {
            OnRelayExit::Pause => rt.instance.shut_down().await,
            OnRelayExit::Leave => {
                tracing::info!(instance = %rt.instance.config.name, state = rt.instance.state_name(), "leaving the compute as it is (on_relay_exit = \"leave\")");
            }
        }
    }
    if let Some(store) = &fleet {
        store.leave().await;
    }
    tracing::info!("relay stopped");
    Ok(())
}

/// How often certificate files are checked for a change.
const CERT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Reloads every instance's `[instance.tls]` on SIGHUP, and when one of its files changes
/// (size or modification time, checked every [`CERT_POLL_INTERVAL`]). A reload that fails
/// keeps the previous certificate and is logged and counted; handshakes in flight and
/// connections already in TLS are not touched.
async fn reload_certificates(
    certificates: Vec<(String, Arc<ServerTls>)>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot install the SIGHUP handler; certificates reload on file changes only");
            None
        }
    };
    let mut seen: Vec<_> = certificates
        .iter()
        .map(|(_, tls)| file_stamps(&tls.settings))
        .collect();
    let mut poll = tokio::time::interval(CERT_POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            () = shutdown.cancelled() => return,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
            _ = poll.tick() => false,
        };
        for ((name, tls), last) in certificates.iter().zip(seen.iter_mut()) {
            let now = file_stamps(&tls.settings);
            if !forced && now == *last {
                continue;
            }
            *last = now;
            match tls.reload() {
                Ok(loaded) => {
                    metrics.set_tls_expiry(name, loaded.not_after);
                    metrics.tls_reload(name, "ok");
                    tracing::info!(instance = %name, not_after = loaded.not_after, "TLS certificate reloaded");
                }
                Err(e) => {
                    metrics.tls_reload(name, "failed");
                    tracing::error!(instance = %name, key = %format!("tls.{}", e.file.key()), error = %e, "TLS certificate reload failed; still serving the previous one");
                }
            }
        }
    }
}

/// Size and modification time of each file of `settings` (`None` for one that cannot be
/// read): a change of any of them calls for a reload.
fn file_stamps(settings: &crate::config::TlsSettings) -> Vec<Option<(u64, std::time::SystemTime)>> {
    [
        Some(&settings.cert),
        Some(&settings.key),
        settings.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| {
        std::fs::metadata(p)
            .and_then(|m| Ok((m.len(), m.modified()?)))
            .ok()
    })
    .collect()
}

/// Descriptors the relay keeps for what is not a pre-login connection: sessions' compute
/// sides, the admin API, the ledger, drivers.
const DESCRIPTOR_RESERVE: u64 = 1024;

/// Raises the soft descriptor limit to the hard one (systemd's default soft limit, 1024, is
/// less than the default pre-login cap), and warns when it still cannot hold `max_pending`
/// pre-login connections plus a reserve: accepts would then fail with EMFILE (they back off,
/// but real logins wait behind them).
fn raise_descriptor_limit(max_pending: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let mut limit = soft;
    if hard > soft {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                tracing::info!(from = soft, to = hard, "raised the descriptor limit");
                limit = hard;
            }
            Err(e) => tracing::warn!(error = %e, "cannot raise the descriptor limit"),
        }
    }
    let wanted = u64::try_from(max_pending)
        .unwrap_or(u64::MAX)
        .saturating_add(DESCRIPTOR_RESERVE);
    if limit < wanted {
        tracing::warn!(
            limit,
            wanted,
            "the descriptor limit is below relay.max_pending_connections plus a reserve; \
             raise it (LimitNOFILE=) or lower the cap"
        );
    }
}

/// An instance's place in the relay's pre-login admission.
struct Admit {
    admission: Arc<Admission>,
    /// The instance's index in the admission.
    index: usize,
}

/// Admits each accepted connection (or refuses it with ERR 1040 and closes it, without a
/// task, a greeting or a wake; or with ERR 1129 when its source is blocked for failed logins),
/// then routes it: the direct route while the instance runs (unless its logins must meet the
/// relay's TLS), else the perceptron.
async fn accept_loop(
    listener: TcpListener,
    rt: Arc<InstanceRuntime>,
    admit: Admit,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let name = rt.instance.config.name.clone();
    let metrics = Arc::clone(&rt.metrics);
    listener::accept_until(listener, shutdown, &name, &metrics, |stream, peer| {
        if let Some(refusal) = rt.budgets.source_refusal(peer.ip(), std::time::Instant::now()) {
            rt.metrics.budget_refused(&name, refusal.label());
            // As for ERR 1040: a fresh socket takes the ERR without waiting, and a close says
            // the same if it does not.
            let _ = stream.try_write(&refusal.pre_greeting(&peer.ip().to_string()));
            tracing::debug!(instance = %name, client = %peer, reason = refusal.label(), "source blocked; refused");
            return;
        }
        let pending = match admit.admission.try_admit(admit.index, peer.ip()) {
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
        // Cancelled only while the connection is pending (before its login): the handler is
        // dropped there, which closes the socket, and holds nothing else yet.
        let evicted = pending.eviction();
        // An instance whose logins must meet the relay's TLS (require_secure_transport,
        // client_ca) keeps every login on the perceptron route, which enforces them; the
        // direct route hands the connection to the compute, which would not.
        // Boxed: `run_until_cancelled_owned` keeps its future twice over in its own state,
        // and a connection's task lives for hours (bench/memory: 18.7 KB per idle direct
        // connection unboxed, 7.2 KB boxed).
        if !rt.instance.config.relay_terminates_every_login() && rt.instance.routes_direct() {
            tracker.spawn(evicted.run_until_cancelled_owned(Box::pin(crate::direct::handle(rt, stream, peer, pending))));
        } else {
            tracker.spawn(evicted.run_until_cancelled_owned(Box::pin(perceptron::handle(rt, stream, peer, pending))));
        }
    })
    .await;
}

/// [`accept_loop`] for an endpoint: the same admission, then every connection goes to
/// [`endpoint::handle`], which greets it and routes its login.
async fn endpoint_accept_loop(
    listener: TcpListener,
    endpoint: Arc<Endpoint>,
    budgets: Arc<Budgets>,
    metrics: Arc<Metrics>,
    admit: Admit,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let label = endpoint.label().to_owned();
    listener::accept_until(listener, shutdown, &label, &Arc::clone(&metrics), |stream, peer| {
        if let Some(refusal) = budgets.source_refusal(peer.ip(), std::time::Instant::now()) {
            metrics.budget_refused(&label, refusal.label());
            let _ = stream.try_write(&refusal.pre_greeting(&peer.ip().to_string()));
            tracing::debug!(endpoint = %label, client = %peer, reason = refusal.label(), "source blocked; refused");
            return;
        }
        let pending = match admit.admission.try_admit(admit.index, peer.ip()) {
            Ok(p) => p,
            Err(refusal) => {
                metrics.refused(&label, refusal.label());
                let _ = stream.try_write(&limits::too_many_connections());
                tracing::debug!(endpoint = %label, client = %peer, reason = refusal.label(), "too many pending connections; refused");
                return;
            }
        };
        if pending.made_room() {
            metrics.refused(&label, "evicted");
        }
        let evicted = pending.eviction();
        let endpoint = Arc::clone(&endpoint);
        tracker.spawn(evicted.run_until_cancelled_owned(Box::pin(endpoint::handle(endpoint, stream, peer, pending))));
    })
    .await;
}

/// Keeps `relay_fleet_store_available` current, until `stop`.
async fn report_fleet_store(
    store: Arc<dyn crate::fleet::FleetStore>,
    metrics: Arc<Metrics>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        metrics.fleet_store_available(store.relay_id(), store.available());
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            () = stop.cancelled() => return,
        }
    }
}
