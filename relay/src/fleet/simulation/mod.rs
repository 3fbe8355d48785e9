//! `relay fleet-simulation`: what a fleet costs its etcd. Simulated relays, each a real
//! [`FleetStore`] client with its own lease, drive simulated instances through wake/pause
//! churn by running the relay's own transition protocol ([`super::protocol`], which
//! `control::fleet` runs too), so they make the store requests the relay makes:
//! - every relay follows every instance (a read, then a watch from that read's revision);
//! - every relay publishes its connection record for every instance, and again on change;
//! - every relay without a connection to a running instance reads the fleet's connections
//!   once per idle tick, and pauses the instance once the fleet has been idle long enough
//!   (lock + compare-and-swap on the connection records);
//! - a wake is attempted by several relays at once (clients of one instance arriving on
//!   different relays); the lock lets one of them start it.
//!
//! No compute runs: the driver's start is instantaneous, so the latencies are the store's
//! share of a wake or a pause. It writes only under its own prefix (refusing one that is in
//! use) and deletes it at the end.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use super::protocol::{self, UnderLock};
use super::{FleetStore, StoreError};
use crate::config::EtcdSettings;

mod counted;

use crate::future::BoxFuture;
use crate::lifecycle::Phase;
use counted::{Counted, Requests};

/// What a simulated compute is billed while it starts or runs (one CCU).
const RATE_MILLI: u64 = 1_000;

/// How long a simulated wake may take.
const WAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// The simulation's parameters (`relay fleet-simulation --help`).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// etcd client URLs.
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// Simulated relays (each one etcd client with its own lease).
    #[arg(long, default_value_t = 3)]
    pub relays: usize,
    /// Simulated instances.
    #[arg(long, default_value_t = 1000)]
    pub instances: usize,
    /// How long the churn runs, after every relay has joined and published.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Mean time an instance stays paused before its next wake (exponentially distributed).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub paused_for: Duration,
    /// How long a woken instance keeps a connection open.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub busy_for: Duration,
    /// The instances' `idle_pause_after` (the idle tick is a quarter of it, at most 1 s).
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    pub idle_pause_after: Duration,
    /// How many relays try each wake at the same moment.
    #[arg(long, default_value_t = 2)]
    pub wakers: usize,
    /// TLS to etcd: the CA of its server certificate (endpoints then https://).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate for etcd's --client-cert-auth (with --key-file).
    #[arg(long, value_name = "FILE", requires = "key_file")]
    pub cert_file: Option<std::path::PathBuf>,
    /// The client certificate's key (mode 0600).
    #[arg(long, value_name = "FILE", requires = "cert_file")]
    pub key_file: Option<std::path::PathBuf>,
    /// Key prefix; must be empty in the store (it is deleted at the end).
    #[arg(long, default_value = "/perceptron-simulation")]
    pub prefix: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a simulated wake runs under the lock: no compute, a start that takes no time.
struct Simulated<'a> {
    world: &'a World,
    instance: String,
}

impl UnderLock for Simulated<'_> {
    type Compute = ();
    type StartError = std::convert::Infallible;

    fn instance(&self) -> &str {
        &self.instance
    }

    fn shutting_down(&self) -> bool {
        self.world.stop.is_cancelled()
    }

    fn adopt(&self) -> BoxFuture<'_, Option<()>> {
        Box::pin(std::future::ready(Some(())))
    }

    fn start(&self, _left: Duration) -> BoxFuture<'_, Result<(), Self::StartError>> {
        self.world.wakes_started.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(Ok(())))
    }

    fn rate_milli(&self, phase: Phase) -> u64 {
        if phase.billable() { RATE_MILLI } else { 0 }
    }
}

/// Latencies of one kind, in microseconds.
#[derive(Debug, Default)]
struct Latencies(Mutex<Vec<u64>>);

impl Latencies {
    fn record(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        if let Ok(mut v) = self.0.lock() {
            v.push(micros);
        }
    }

    /// (count, p50 ms, p99 ms, max ms).
    fn summary(&self) -> (usize, f64, f64, f64) {
        let mut v = self.0.lock().map(|v| v.clone()).unwrap_or_default();
        v.sort_unstable();
        let at = |q: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "an index into a vector no longer than memory"
            )]
            let i = ((v.len() - 1) as f64 * q).round() as usize;
            #[expect(clippy::cast_precision_loss, reason = "microseconds, for display")]
            v.get(i).map_or(0.0, |&m| m as f64 / 1000.0)
        };
        (v.len(), at(0.5), at(0.99), at(1.0))
    }
}

/// What every simulated relay and instance share.
#[derive(Debug)]
struct World {
    args: Args,
    relays: Vec<Counted>,
    /// Per instance, per relay: the phase that relay last saw, and since when.
    views: Vec<Mutex<Vec<(Phase, Instant)>>>,
    /// Per instance: 1 + the relay holding its connection, or 0.
    holder: Vec<AtomicUsize>,
    wakes_started: AtomicU64,
    wake_cycles: AtomicU64,
    wakes_attempted: AtomicU64,
    pauses: AtomicU64,
    wake: Latencies,
    pause: Latencies,
    propagation: Latencies,
    stop: CancellationToken,
}

fn instance_name(i: usize) -> String {
    format!("sim-{i:06}")
}

/// Runs the simulation and prints its report; what the CLI returns.
#[must_use]
pub fn main(args: Args) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("relay fleet-simulation: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(simulate(args)) {
        Ok(report) => {
            print!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("relay fleet-simulation: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Why the simulation could not run (or clean up after itself).
#[derive(Debug)]
pub enum SimulationError {
    /// `--relays`, `--instances` or `--wakers` is 0.
    NothingToSimulate,
    /// A simulated relay's store client could not be set up (TLS files) or join (its lease).
    Store(StoreError),
    /// etcd did not answer at these endpoints.
    Connect {
        /// `--endpoints`.
        endpoints: Vec<String>,
        /// The client's error.
        source: etcd_client::Error,
    },
    /// etcd refused to count the keys under the prefix.
    Count(etcd_client::Error),
    /// The prefix already holds keys (the simulation deletes its prefix at the end).
    PrefixInUse {
        /// How many.
        keys: i64,
        /// `--prefix`.
        prefix: String,
    },
    /// The prefix could not be deleted at the end.
    Delete {
        /// `--prefix`.
        prefix: String,
        /// The client's error.
        source: etcd_client::Error,
    },
}

impl std::fmt::Display for SimulationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NothingToSimulate => {
                f.write_str("--relays, --instances and --wakers must be at least 1")
            }
            Self::Store(e) => e.fmt(f),
            Self::Connect { endpoints, source } => {
                write!(f, "cannot reach etcd at {endpoints:?}: {source}")
            }
            Self::Count(e) => e.fmt(f),
            Self::PrefixInUse { keys, prefix } => write!(
                f,
                "{keys} keys exist under --prefix {prefix}; pick an unused prefix (the simulation deletes its prefix at the end)"
            ),
            Self::Delete { prefix, source } => write!(f, "cannot delete {prefix}: {source}"),
        }
    }
}

impl std::error::Error for SimulationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) => Some(e),
            Self::Connect { source, .. } | Self::Delete { source, .. } => Some(source),
            Self::Count(e) => Some(e),
            Self::NothingToSimulate | Self::PrefixInUse { .. } => None,
        }
    }
}

async fn simulate(args: Args) -> Result<String, SimulationError> {
    if args.relays == 0 || args.instances == 0 || args.wakers == 0 {
        return Err(SimulationError::NothingToSimulate);
    }
    let settings = |relay_id: String| EtcdSettings {
        endpoints: args.endpoints.clone(),
        relay_id,
        prefix: args.prefix.clone(),
        lease_ttl: Duration::from_secs(10),
        dial_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(2),
        ca_file: args.ca_file.clone(),
        cert_file: args.cert_file.clone(),
        key_file: args.key_file.clone(),
        definitions_key_file: None,
    };
    let mut options = etcd_client::ConnectOptions::new();
    if let Some(tls) =
        super::etcd::tls_options(&settings(String::new())).map_err(SimulationError::Store)?
    {
        options = options.with_tls(tls);
    }
    let admin = etcd_client::Client::connect(&args.endpoints, Some(options))
        .await
        .map_err(|source| SimulationError::Connect {
            endpoints: args.endpoints.clone(),
            source,
        })?;
    let used = admin
        .kv_client()
        .get(
            args.prefix.as_str(),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .map_err(SimulationError::Count)?
        .count();
    if used > 0 {
        return Err(SimulationError::PrefixInUse {
            keys: used,
            prefix: args.prefix,
        });
    }
    let requests = Arc::new(Requests::default());
    let joined = Instant::now();
    let mut relays = Vec::with_capacity(args.relays);
    for r in 0..args.relays {
        let inner = super::etcd::EtcdStore::connect(&settings(format!("sim-relay-{r}")))
            .await
            .map_err(SimulationError::Store)?;
        relays.push(Counted {
            inner,
            requests: Arc::clone(&requests),
        });
    }
    let world = Arc::new(World {
        views: (0..args.instances)
            .map(|_| Mutex::new(vec![(Phase::Paused, Instant::now()); args.relays]))
            .collect(),
        holder: (0..args.instances).map(|_| AtomicUsize::new(0)).collect(),
        relays,
        wakes_started: AtomicU64::new(0),
        wake_cycles: AtomicU64::new(0),
        wakes_attempted: AtomicU64::new(0),
        pauses: AtomicU64::new(0),
        wake: Latencies::default(),
        pause: Latencies::default(),
        propagation: Latencies::default(),
        stop: CancellationToken::new(),
        args,
    });

    // Joining: every relay publishes a record for every instance and starts following it,
    // as a relay does for each configured instance at start.
    let tracker = tokio_util::task::TaskTracker::new();
    for r in 0..world.args.relays {
        for i in 0..world.args.instances {
            let w = Arc::clone(&world);
            tracker.spawn(async move { w.follow(r, i).await });
            let w = Arc::clone(&world);
            tracker.spawn(async move { w.pause_when_idle(r, i).await });
        }
    }
    publish_all(&world).await;
    let join_took = joined.elapsed();
    let settled_requests = requests.total();

    let started = Instant::now();
    for i in 0..world.args.instances {
        let w = Arc::clone(&world);
        tracker.spawn(async move { w.churn(i).await });
    }
    tokio::select! {
        () = tokio::time::sleep(world.args.duration) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let ran = started.elapsed();
    let churn_requests = requests.total().saturating_sub(settled_requests);
    world.stop.cancel();
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(10), tracker.wait()).await;
    for relay in &world.relays {
        relay.inner.leave().await;
    }
    let deleted = admin
        .kv_client()
        .delete(
            world.args.prefix.as_str(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .map_err(|source| SimulationError::Delete {
            prefix: world.args.prefix.clone(),
            source,
        })?
        .deleted();
    Ok(world.report(&requests, join_took, ran, churn_requests, deleted))
}

/// Every relay's first connection record for every instance, 64 requests at a time per
/// relay.
async fn publish_all(world: &Arc<World>) {
    let mut relays = tokio::task::JoinSet::new();
    for r in 0..world.args.relays {
        let w = Arc::clone(world);
        relays.spawn(async move {
            for chunk in (0..w.args.instances).collect::<Vec<_>>().chunks(64) {
                let mut set = tokio::task::JoinSet::new();
                for &i in chunk {
                    let w = Arc::clone(&w);
                    set.spawn(async move {
                        if let Some(relay) = w.relays.get(r) {
                            let _ = relay.publish(&instance_name(i), 0).await;
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            }
        });
    }
    while relays.join_next().await.is_some() {}
}

impl World {
    fn view(&self, instance: usize, relay: usize) -> Phase {
        self.view_since(instance, relay).0
    }

    fn view_since(&self, instance: usize, relay: usize) -> (Phase, Instant) {
        self.views
            .get(instance)
            .and_then(|v| v.lock().ok().and_then(|v| v.get(relay).copied()))
            .unwrap_or((Phase::Paused, Instant::now()))
    }

    /// A relay's view changes; like the relay, a compute it sees running anew starts its
    /// idle clock.
    fn set_view(&self, instance: usize, relay: usize, phase: Phase) {
        if let Some(Ok(mut v)) = self.views.get(instance).map(|v| v.lock()) {
            if let Some(slot) = v.get_mut(relay).filter(|slot| slot.0 != phase) {
                *slot = (phase, Instant::now());
            }
        }
    }

    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            () = self.stop.cancelled() => false,
        }
    }

    /// [`protocol::follow`], as `control::fleet::follow_fleet` runs it: the feed's view, then
    /// a wait for its next change.
    async fn follow(&self, r: usize, i: usize) {
        let Some(relay) = self.relays.get(r) else {
            return;
        };
        protocol::follow(relay, &instance_name(i), &self.stop, |seen| {
            let phase = seen.phase();
            if phase == self.view(i, r) {
                return;
            }
            if let Some(state) = seen.state.as_ref().filter(|s| s.relay != relay.relay_id()) {
                let lag = crate::clock::now_ms().saturating_sub(state.since_ms);
                self.propagation.record(Duration::from_millis(lag));
            }
            self.set_view(i, r, phase);
        })
        .await;
    }

    /// `control::Instance::pause_when_idle`'s fleet half: [`protocol::idle`] on each tick, then
    /// [`protocol::begin_pause`] and [`protocol::finish`].
    async fn pause_when_idle(&self, r: usize, i: usize) {
        let Some(relay) = self.relays.get(r) else {
            return;
        };
        let name = instance_name(i);
        let idle_after = self.args.idle_pause_after;
        let tick = (idle_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        // Ticks of different relays and instances do not line up.
        let offset =
            rand::thread_rng().gen_range(0..=u64::try_from(tick.as_millis()).unwrap_or(1000));
        if !self.sleep(Duration::from_millis(offset)).await {
            return;
        }
        while self.sleep(tick).await {
            let holds = self
                .holder
                .get(i)
                .is_some_and(|h| h.load(Ordering::Relaxed) == r + 1);
            let (phase, since) = self.view_since(i, r);
            if holds || phase != Phase::Running || since.elapsed() < idle_after {
                continue;
            }
            if !protocol::idle(relay, &name, idle_after, crate::clock::now_ms()).await {
                continue;
            }
            // The relay's pause, without a compute to stop between its two halves.
            let began = Instant::now();
            if protocol::begin_pause(relay, &name, false, RATE_MILLI)
                .await
                .is_ok()
                && protocol::finish(relay, &name, Phase::Paused, 0).await
            {
                self.pause.record(began.elapsed());
                self.pauses.fetch_add(1, Ordering::Relaxed);
                self.set_view(i, r, Phase::Paused);
            }
        }
    }

    /// One instance's life: paused for a while, woken by clients arriving on `wakers`
    /// relays at once, busy with one connection, then left idle for the fleet to pause.
    async fn churn(self: Arc<Self>, i: usize) {
        let name = instance_name(i);
        let mean = self.args.paused_for.as_secs_f64();
        loop {
            let gap = {
                let mut rng = rand::thread_rng();
                -mean * (1.0 - rng.r#gen::<f64>()).ln()
            };
            if !self
                .sleep(Duration::from_secs_f64(gap.min(mean * 20.0)))
                .await
            {
                return;
            }
            let first = rand::thread_rng().gen_range(0..self.args.relays);
            let wakers: Vec<usize> = (0..self.args.wakers.min(self.args.relays))
                .map(|k| (first + k) % self.args.relays)
                .collect();
            let mut attempts = tokio::task::JoinSet::new();
            for &r in &wakers {
                let w = Arc::clone(&self);
                attempts.spawn(async move { w.wake(r, i).await });
            }
            let mut woke = false;
            while let Some(ok) = attempts.join_next().await {
                woke |= ok.unwrap_or(false);
            }
            let Some(&holder) = wakers.first() else {
                return;
            };
            if !woke {
                continue;
            }
            self.wake_cycles.fetch_add(1, Ordering::Relaxed);
            // One client stays on the first relay for a while, then leaves.
            if let Some(h) = self.holder.get(i) {
                h.store(holder + 1, Ordering::Relaxed);
            }
            if let Some(relay) = self.relays.get(holder) {
                let _ = relay.publish(&name, 1).await;
                let busy = self.sleep(self.args.busy_for).await;
                let _ = relay.publish(&name, 0).await;
                if let Some(h) = self.holder.get(i) {
                    h.store(0, Ordering::Relaxed);
                }
                if !busy {
                    return;
                }
            }
            // Wait for the fleet to pause it (a relay's idle tick does).
            while self.view(i, holder) != Phase::Paused {
                if !self.sleep(Duration::from_millis(100)).await {
                    return;
                }
            }
        }
    }

    /// [`protocol::wake`], as `control::fleet::fleet_wake` runs it, without a driver: true
    /// once the instance runs.
    async fn wake(&self, r: usize, i: usize) -> bool {
        let Some(relay) = self.relays.get(r) else {
            return false;
        };
        self.wakes_attempted.fetch_add(1, Ordering::Relaxed);
        let began = Instant::now();
        let side = Simulated {
            world: self,
            instance: instance_name(i),
        };
        let woke = protocol::wake(relay, &side, WAKE_TIMEOUT).await.is_ok();
        if woke {
            self.wake.record(began.elapsed());
            self.set_view(i, r, Phase::Running);
        }
        woke
    }

    fn report(
        &self,
        requests: &Requests,
        join_took: Duration,
        ran: Duration,
        churn_requests: u64,
        deleted: i64,
    ) -> String {
        let secs = ran.as_secs_f64().max(0.001);
        #[expect(clippy::cast_precision_loss, reason = "counts, for display")]
        let per_s = |n: u64| n as f64 / secs;
        let (wakes, wake_p50, wake_p99, wake_max) = self.wake.summary();
        let (pauses, pause_p50, pause_p99, pause_max) = self.pause.summary();
        let (seen, prop_p50, prop_p99, prop_max) = self.propagation.summary();
        let started = self.wakes_started.load(Ordering::Relaxed);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let a = &self.args;
        if a.json {
            // Milliseconds to 0.01, seconds to 0.01, rates to 1, as the text report shows them.
            let round = |x: f64, places: i32| (x * 10f64.powi(places)).round() / 10f64.powi(places);
            let report = serde_json::json!({
                "relays": a.relays,
                "instances": a.instances,
                "wakers": a.wakers,
                "seconds": round(secs, 1),
                "join_seconds": round(join_took.as_secs_f64(), 2),
                "wake_cycles": load(&self.wake_cycles),
                "wakes_started": started,
                "wake_attempts": load(&self.wakes_attempted),
                "pauses": load(&self.pauses),
                "requests_per_second": round(per_s(churn_requests), 0),
                "observe": load(&requests.observe),
                "begin": load(&requests.begin),
                "finish": load(&requests.finish),
                "waits": load(&requests.watch),
                "publish": load(&requests.publish),
                "connections": load(&requests.connections),
                "errors": load(&requests.errors),
                "wake_ms": [round(wake_p50, 2), round(wake_p99, 2), round(wake_max, 2)],
                "pause_ms": [round(pause_p50, 2), round(pause_p99, 2), round(pause_max, 2)],
                "propagation_ms": [round(prop_p50, 0), round(prop_p99, 0), round(prop_max, 0)],
                "propagations": seen,
                "wakes_completed": wakes,
                "deleted_keys": deleted,
            });
            return format!("{report}\n");
        }
        format!(
            "fleet simulation: {} relays, {} instances, {} relays per wake, {:.0} s of churn\n\
             joined (every relay publishing and following every instance) in {:.2} s\n\
             instances woken {} times: driver starts {started}, wake attempts {}; pauses {}\n\
             store requests during the churn: {:.0}/s (observe {}, begin {}, finish {}, publish {}, connections {}; errors {}; in-memory waits for a change {})\n\
             wake (store share)  p50 {wake_p50:.2} ms  p99 {wake_p99:.2} ms  max {wake_max:.2} ms  ({wakes})\n\
             pause (store share) p50 {pause_p50:.2} ms  p99 {pause_p99:.2} ms  max {pause_max:.2} ms  ({pauses})\n\
             seen by the other relays after p50 {prop_p50:.0} ms  p99 {prop_p99:.0} ms  max {prop_max:.0} ms  ({seen})\n\
             deleted {deleted} keys under {}{}\n",
            a.relays,
            a.instances,
            a.wakers,
            secs,
            join_took.as_secs_f64(),
            load(&self.wake_cycles),
            load(&self.wakes_attempted),
            load(&self.pauses),
            per_s(churn_requests),
            load(&requests.observe),
            load(&requests.begin),
            load(&requests.finish),
            load(&requests.publish),
            load(&requests.connections),
            load(&requests.errors),
            load(&requests.watch),
            a.prefix,
            requests
                .last_error
                .lock()
                .ok()
                .and_then(|e| e.clone())
                .map(|e| format!("\nlast store error: {e}"))
                .unwrap_or_default(),
        )
    }
}
