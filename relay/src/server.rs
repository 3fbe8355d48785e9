//! The relay process: one listener per instance, the accept loops, and graceful shutdown
//! (CONTRIBUTING.md, *Graceful shutdown*: stop accepting, drain with a deadline, then stop the computes).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use authplugin::key_file::LiveKeyRing;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{self, AdminState};
use crate::budgets::Budgets;
use crate::config::{Config, InstanceConfig, OnRelayExit, RouteMode, StoreSettings};
use crate::endpoint::{self, Endpoint};
use crate::hosting::{InstanceHost, Shared, dnat_of};
use crate::instance_dir::{InstanceDir, Place};
use crate::ledger::Ledger;
use crate::limits::{self, Admission, PendingCaps};
use crate::listener;
use crate::metrics::Metrics;
use crate::preflight::read_token;
use crate::registry::Origin;
use crate::router::kernel::NftTable;
use crate::router::nft::{self, Dnat};
use crate::tls::ServerTls;

/// How long open connections may take to finish after a shutdown signal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::hosting::StartError;

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
        // Each instance opens its own slot when it starts.
        Vec::new(),
    );
    let host = InstanceHost::new(Shared {
        state_dir: config.relay.state_dir.clone(),
        ring: Arc::clone(&ring),
        greetings,
        metrics: Arc::clone(&metrics),
        ledger: Arc::clone(&ledger),
        fleet: fleet.clone(),
        budgets: Arc::clone(&budgets),
        admission: Arc::clone(&admission),
        table: table.cloned(),
        shutdown: shutdown.clone(),
        tracker: tracker.clone(),
    });
    // Every listener is bound before any instance serves: a client that reached an instance
    // finds the admin API and the endpoints there too (their connections wait in the backlog
    // until served).
    let admin = match config.relay.admin_listen {
        Some(addr) => {
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
            Some((listener, addr, token))
        }
        None => None,
    };
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
        endpoints.push((
            listener,
            Arc::new(Endpoint::new(
                ep.clone(),
                Arc::clone(&host.registry),
                tls,
                Arc::clone(&budgets),
                Arc::clone(&metrics),
            )),
        ));
    }
    for cfg in &config.instances {
        let last = last_states
            .iter()
            .rev()
            .find(|e| e.instance == cfg.name)
            .map(|e| e.state);
        host.start(cfg.clone(), Origin::ConfigFile, Some(last))
            .await?;
    }
    drop(last_states);
    let registry = Arc::clone(&host.registry);
    // Instances defined while the relay runs: in its directory, or in a fleet's store (which
    // every relay of the fleet follows).
    let place = match (&config.relay.instances_dir, &fleet, &config.relay.store) {
        (Some(dir), _, _) => Some(Place::Directory(dir.clone())),
        (None, Some(store), StoreSettings::Etcd(etcd)) => Some(Place::Store {
            store: Arc::clone(store),
            seal_keys: match &etcd.definitions_key_file {
                Some(path) => {
                    let keys =
                        Arc::new(LiveKeyRing::open(path).map_err(StartError::DefinitionsKey)?);
                    tracker.spawn(crate::keys::follow(
                        Arc::clone(&keys),
                        Arc::clone(&metrics),
                        shutdown.clone(),
                    ));
                    Some(keys)
                }
                // `relay run` has logged why (preflight::warnings).
                None => None,
            },
            at: PathBuf::from(format!("{}/definitions", etcd.prefix.trim_end_matches('/'))),
            base: config
                .path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."))
                .to_owned(),
        }),
        _ => None,
    };
    let instance_dir =
        place.map(|place| InstanceDir::new(place, Arc::new(config.clone()), Arc::clone(&host)));
    if let Some(files) = &instance_dir {
        files.scan().await;
        tracker.spawn(Arc::clone(files).watch(shutdown.clone()));
    }
    if let Some((listener, addr, token)) = admin {
        tracing::info!(listen = %addr, token = token.is_some(), "admin API listening");
        let state = Arc::new(AdminState {
            registry: Arc::clone(&registry),
            instance_dir: instance_dir.clone(),
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
    // Every certificate the relay serves, followed (file changes, SIGHUP). An instance added
    // later has its certificate read when it starts, and again at each change of its file.
    let certificates: Vec<(String, Arc<ServerTls>)> = registry
        .live()
        .iter()
        .filter_map(|r| Some((r.name().to_owned(), Arc::clone(r.rt.tls.as_ref()?))))
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
    for (listener, endpoint) in endpoints {
        tracing::info!(listen = %endpoint.config.listen, route_by = ?endpoint.config.route_by, tls = endpoint.tls.is_some(), instances = registry.len(), "endpoint listening");
        // The relay-wide cap: an endpoint's connections are counted against their instance
        // only once routed.
        let admit = Admit {
            admission: Arc::clone(&admission),
            slot: admission.open_slot(config.relay.max_pending_connections),
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
    tracing::info!(signing_key = %ring.current().signing_key().id(), "relay ready");
    shutdown.cancelled().await;
    let open = || -> usize {
        registry
            .all()
            .iter()
            .map(|r| {
                let s = r.rt.instance.status();
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
    for rt in registry.live().iter().map(|r| &r.rt) {
        match rt.instance.config.on_relay_exit {
            OnRelayExit::Pause => rt.instance.shut_down().await,
            OnRelayExit::Leave => {
                tracing::info!(instance = %rt.instance.config.name, state = rt.instance.state_name(), "leaving the compute as it is (on_relay_exit = \"leave\")");
            }
        }
    }
    // A removed instance still draining is stopped whatever its `on_relay_exit`: no
    // definition is left to adopt its compute after a restart, which would then run (and be
    // billed) with nobody to pause it.
    for rt in registry.removed().iter().map(|r| &r.rt) {
        rt.instance.shut_down().await;
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

/// An endpoint's place in the relay's pre-login admission.
struct Admit {
    admission: Arc<Admission>,
    /// Its slot.
    slot: usize,
}

/// The accept loop of an endpoint: the admission of an instance's own (`hosting`), then every connection goes to
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
        if let Some(refusal) = budgets.source_refusal(peer.ip(), None, std::time::Instant::now()) {
            metrics.budget_refused(&label, refusal.label());
            let _ = stream.try_write(&refusal.pre_greeting(&peer.ip().to_string()));
            tracing::debug!(endpoint = %label, client = %peer, reason = refusal.label(), "source blocked; refused");
            return;
        }
        let pending = match admit.admission.try_admit(admit.slot, peer.ip()) {
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
        let attach = pending.attacher();
        let endpoint = Arc::clone(&endpoint);
        attach.attach(tracker.spawn(Box::pin(endpoint::handle(endpoint, stream, peer, pending))).abort_handle());
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
