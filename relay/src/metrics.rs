//! All of the relay's metrics, in one place (see CONTRIBUTING.md, *Metrics in one module*),
//! kept by `prometheus-client`: one [`Family`] per metric with a typed label set, all in one
//! [`Registry`], each declared once in the `metrics!` list below.
//!
//! Label values come from closed enums where this module owns them (byte direction, direct
//! route outcome, route, lifecycle phase) and from the `&'static str` `label()` methods of the
//! error types otherwise (connection outcome, classification, wake outcome): both bound the
//! cardinality by construction. The `instance` label is an instance name from the
//! configuration, so it is bounded too.
//!
//! Exposition: OpenMetrics text (what `prometheus-client` writes) for scrapers that ask for it,
//! and the Prometheus text format 0.0.4 derived from it for everyone else (see
//! [`Metrics::render`]).

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::lifecycle::Phase;
use crate::route::Route;

/// Upper bounds (seconds) of the resume-time histogram buckets: our target is tens of
/// milliseconds, the reference system's is about 2 s.
pub const RESUME_BUCKETS_S: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0,
];

/// Upper bounds (seconds) of the kernel route's lease-renewal histogram buckets: a renewal
/// takes about 20 ms on an idle host; its lease ([`crate::router::nft::ROUTE_LEASE`]) lapses
/// after 10 s without one.
pub const RENEWAL_BUCKETS_S: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The counters whose label value is an error type's `label()` (owned by the phase that
/// produces it, so it stays a string here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// `relay_connections_total{instance, outcome}`: connections on the perceptron route by
    /// how they ended (`relayed`, `denied`, or the failure's label).
    Connections,
    /// `relay_classifications_total{instance, class}`: connections that were not logins.
    Classifications,
    /// `relay_wakes_total{instance, outcome}`: wake attempts (one per spawn, however many
    /// clients waited on it).
    Wakes,
    /// `relay_compute_connections_total{instance, opened_by}`: the perceptron's connections
    /// to the compute, by who opened them: `wake` (the wake's own, handed to the first login:
    /// [`crate::compute_conn::Handover`]) or `login`.
    ComputeConnections,
}

/// The values a [`Counter`] takes that are not an error type's `label()`, each named once.
pub mod outcome {
    /// `relay_connections_total`: a perceptron-route login the compute accepted.
    pub const RELAYED: &str = "relayed";
    /// `relay_connections_total`: a resumable session reattached to a new compute.
    pub const REATTACHED: &str = "reattached";
    /// `relay_connections_total`: a perceptron-route login the compute refused.
    pub const DENIED: &str = "denied";
    /// `relay_connections_total`: a detached session's next command came after its ticket
    /// expired (ERR 1927, no wake).
    pub const DETACHED_EXPIRED: &str = "detached_expired";
    /// `relay_connections_total`: a session detached beyond `max_detached_sessions` (ERR
    /// 1927 at its next command, no wake).
    pub const DETACHED_OVER_CAP: &str = "detached_over_cap";
    /// `relay_wakes_total`: the compute started (or thawed).
    pub const WOKE: &str = "ok";
    /// `relay_wakes_total`: another relay of the fleet had woken it.
    pub const FLEET_RUNNING: &str = "fleet_running";
}

/// How a connection on the direct route went (`relay_direct_connections_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[expect(
    non_camel_case_types,
    reason = "the derive writes the variant name as the label value"
)]
pub enum DirectOutcome {
    /// Connected to the compute and forwarded.
    forwarded,
    /// The compute could not be reached; handed to the perceptron route.
    fell_back,
    /// The client closed without sending a byte (port scan, TCP health check).
    closed_silently,
    /// The client sent nothing within `handshake_timeout`.
    handshake_timeout,
    /// The compute closed before the client spoke.
    compute_closed,
}

/// Why the admin API refused a request (`relay_admin_refused_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[expect(
    non_camel_case_types,
    reason = "the derive writes the variant name as the label value"
)]
pub enum AdminRefusal {
    /// A `Host` header that names neither the admin address nor loopback (DNS rebinding).
    host,
    /// A mutating request from another origin (a web page driving the browser).
    origin,
    /// A missing or wrong bearer token.
    token,
    /// A usage range that is malformed or reversed.
    range,
    /// A usage report that would exceed its row cap.
    rows,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AdminRefusalLabels {
    reason: AdminRefusal,
}

/// What the relay did to an instance's kernel route
/// (`relay_kernel_route_changes_total{action}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[expect(
    non_camel_case_types,
    reason = "the derive writes the variant name as the label value"
)]
pub enum KernelRouteAction {
    /// New connections go straight to the compute.
    install,
    /// New connections reach the relay again.
    remove,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KernelRouteLabels {
    instance: String,
    action: KernelRouteAction,
    /// `ok`, or the `KernelRouteError` label.
    outcome: &'static str,
}

/// Which way bytes were copied (`relay_bytes_total{direction}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[expect(
    non_camel_case_types,
    reason = "the derive writes the variant name as the label value"
)]
enum Direction {
    client_to_compute,
    compute_to_client,
}

/// The route's name (`relay_active_connections{route}`).
impl EncodeLabelValue for Route {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// The phase's name, as in the ledger and the admin API.
impl EncodeLabelValue for Phase {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// What a look at the key file did (`relay_key_reloads_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[expect(
    non_camel_case_types,
    reason = "the derive writes the variant name as the label value"
)]
pub enum KeyReload {
    /// The file changed and its ring is in use.
    reloaded,
    /// The file changed but is unusable; the ring in use stays.
    refused,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KeyReloadLabels {
    outcome: KeyReload,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RelayLabels {
    relay_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InstanceLabels {
    instance: String,
}

impl InstanceLabels {
    fn of(instance: &str) -> Self {
        Self {
            instance: instance.to_owned(),
        }
    }
}

/// A count as a gauge's value, saturating: a count beyond `i64::MAX` reads as the maximum.
fn gauge_count(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    instance: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClassLabels {
    instance: String,
    class: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpenedByLabels {
    instance: String,
    opened_by: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    instance: String,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    instance: String,
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DataLabels {
    instance: String,
    place: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BlockLabels {
    scope: &'static str,
    budget: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DirectLabels {
    instance: String,
    outcome: DirectOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DirectionLabels {
    instance: String,
    direction: Direction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    instance: String,
    route: Route,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    instance: String,
    state: Phase,
}

type HistogramFamily = Family<InstanceLabels, Histogram, fn() -> Histogram>;

/// Wraps every registered metric: by default its `# HELP` and `# TYPE` lines are written even
/// before it has a sample, so a scraper (and `packaging/monitoring`'s dashboard and alerts) sees
/// every family the relay has from its first scrape on, and its help text with it.
#[derive(Debug)]
struct Described<M> {
    metric: M,
    /// The family is left out of a scrape while it has no sample (metrics that only some
    /// configurations have, such as `[instance.tls]`'s).
    when_sampled: bool,
}

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(&self, encoder: MetricEncoder<'_>) -> fmt::Result {
        self.metric.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.metric.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.when_sampled && self.metric.is_empty()
    }
}

fn resume_histogram() -> Histogram {
    Histogram::new(RESUME_BUCKETS_S)
}

fn renewal_histogram() -> Histogram {
    Histogram::new(RENEWAL_BUCKETS_S)
}

/// Declares [`Metrics`]: one entry per metric, with its field, kind and label set (the type),
/// exposed name, help text and unit side by side; the struct and the registration of every
/// field are generated from the list, so nothing about a metric is written twice.
///
/// Counter names are written without `_total` (the encoder appends it), and a unit is
/// appended to the name by the encoder too (`relay_resume` with `Seconds` is
/// `relay_resume_seconds`). `new:` builds a metric that `Default` cannot (a histogram with our
/// buckets); `when_sampled` leaves a family out of a scrape until it has a sample.
macro_rules! metrics {
    ($(
        $field:ident: $ty:ty {
            name: $name:literal,
            help: $help:literal,
            $(unit: $unit:ident,)?
            $(new: $new:expr,)?
            $(when_sampled: $when_sampled:literal,)?
        }
    )*) => {
        /// Every metric of the relay and the registry that exposes them.
        #[derive(Debug)]
        pub struct Metrics {
            /// Holds a handle to every family below, for encoding.
            registry: Registry,
            $(
                #[doc = concat!("`", $name, "`: ", $help, ".")]
                $field: $ty,
            )*
        }

        impl Default for Metrics {
            fn default() -> Self {
                let mut registry = Registry::default();
                $(
                    let $field: $ty = metrics!(@new $($new)?);
                    let described = Described {
                        metric: $field.clone(),
                        when_sampled: metrics!(@when_sampled $($when_sampled)?),
                    };
                    match metrics!(@unit $($unit)?) {
                        Some(unit) => registry.register_with_unit($name, $help, unit, described),
                        None => registry.register($name, $help, described),
                    }
                )*
                Self { registry, $($field),* }
            }
        }
    };
    (@new) => { Default::default() };
    (@new $new:expr) => { $new };
    (@when_sampled) => { false };
    (@when_sampled $when_sampled:literal) => { $when_sampled };
    (@unit) => { None::<Unit> };
    (@unit $unit:ident) => { Some(Unit::$unit) };
}

metrics! {
    connections: Family<OutcomeLabels, PromCounter> {
        name: "relay_connections",
        help: "Connections on the perceptron route by how they ended",
    }
    classifications: Family<ClassLabels, PromCounter> {
        name: "relay_classifications",
        help: "Connections that were not logins, by class",
    }
    wakes: Family<OutcomeLabels, PromCounter> {
        name: "relay_wakes",
        help: "Wake attempts by outcome (one per spawn, however many clients waited)",
    }
    compute_connections: Family<OpenedByLabels, PromCounter> {
        name: "relay_compute_connections",
        help: "The perceptron's connections to the compute, by who opened them (wake, login)",
    }
    direct: Family<DirectLabels, PromCounter> {
        name: "relay_direct_connections",
        help: "Connections on the direct route by outcome",
    }
    bytes: Family<DirectionLabels, PromCounter> {
        name: "relay_bytes",
        help: "Bytes copied on either route, per direction",
    }
    resume: HistogramFamily {
        name: "relay_resume",
        help: "Time from a wake's start until the compute was ready",
        unit: Seconds,
        new: HistogramFamily::new_with_constructor(resume_histogram),
    }
    state: Family<StateLabels, Gauge> {
        name: "relay_instance_state",
        help: "1 for the lifecycle state the instance is in, 0 for the others",
    }
    active: Family<RouteLabels, Gauge> {
        name: "relay_active_connections",
        help: "Open connections per route",
    }
    admin_refused: Family<AdminRefusalLabels, PromCounter> {
        name: "relay_admin_refused",
        help: "Admin API requests refused, by reason",
    }
    refused: Family<ReasonLabels, PromCounter> {
        name: "relay_connections_refused",
        help: "Connections refused before a greeting (ERR 1040), by the cap that was full; evicted: pending connections closed for a smaller source's when a cap was full",
    }
    endpoint_logins: Family<EndpointLabels, PromCounter> {
        name: "relay_endpoint_logins",
        help: "Logins read on an [[endpoint]], by outcome: routed (to its instance), \
               unknown_instance and switch_mode (ERR 1045, nothing woken), insecure (ERR 3159 \
               on an sni endpoint), not_a_login",
    }
    accept_errors: Family<ListenerLabels, PromCounter> {
        name: "relay_accept_errors",
        help: "Failed accepts (descriptor exhaustion and the like), each followed by a back-off",
    }
    pending: Family<InstanceLabels, Gauge> {
        name: "relay_pending_connections",
        help: "Connections that have not logged in yet",
    }
    parked: Family<InstanceLabels, Gauge> {
        name: "relay_parked_connections",
        help: "Open connections kept on a frozen compute, all between commands",
    }
    data: Family<DataLabels, Gauge> {
        name: "relay_instance_data",
        help: "With [instance.offload]: 1 for where the instance's data is now (local, offloading, offloaded, restoring), 0 for the other places",
    }
    parked_answers: Family<KindLabels, PromCounter> {
        name: "relay_parked_answers",
        help: "Commands the relay answered itself on parked connections (the compute stayed frozen), by kind: ping or keepalive_query",
    }
    budget_refusals: Family<ReasonLabels, PromCounter> {
        name: "relay_budget_refusals",
        help: "Logins refused without a wake because a failed-login or wake budget is spent, by \
               which one (ERR 1129 for a source, 1226 for a user)",
    }
    budget_blocks: Family<BlockLabels, Gauge> {
        name: "relay_budget_blocks",
        help: "Sources and users blocked now, by scope and budget",
    }
    budget_untracked: Gauge {
        name: "relay_budget_untracked_events",
        help: "Failed logins and wakes not counted because the budget table was full",
    }
    health_checks: Family<InstanceLabels, PromCounter> {
        name: "relay_health_checks",
        help: "Health-check logins answered by the relay itself, without a wake",
    }
    ccu: Family<InstanceLabels, Gauge<f64, AtomicU64>> {
        name: "relay_instance_ccu",
        help: "The running compute's capacity in CCUs (instances with [instance.capacity])",
    }
    kernel_route_changes: Family<KernelRouteLabels, PromCounter> {
        name: "relay_kernel_route_changes",
        help: "Kernel route (nftables) installs and removals, by outcome",
    }
    kernel_route_renewals: HistogramFamily {
        name: "relay_kernel_route_renewal",
        help: "Time each renewal of the kernel route's lease took (one nft transaction, about \
               every 2 s while the instance runs; the lease lapses after 10 s without one)",
        unit: Seconds,
        new: HistogramFamily::new_with_constructor(renewal_histogram),
        when_sampled: true,
    }
    kernel_connections: Family<InstanceLabels, Gauge> {
        name: "relay_kernel_route_connections",
        help: "Open connections the kernel route sent straight to the compute whose client \
               has sent payload (conntrack), at the last count",
    }
    spliced_sessions: Family<InstanceLabels, Gauge> {
        name: "relay_spliced_sessions",
        help: "Held sessions the kernel splice carries now (the others the relay's pump \
               carries, or holds parked)",
    }
    key_reloads: Family<KeyReloadLabels, PromCounter> {
        name: "relay_key_reloads",
        help: "Key file changes (or SIGHUPs) by outcome: reloaded, or refused with the key ring \
               in use kept",
    }
    tls_expiry: Family<InstanceLabels, Gauge> {
        name: "relay_tls_certificate_expiry",
        help: "Unix time at which the certificate the instance serves expires ([instance.tls])",
        unit: Seconds,
        when_sampled: true,
    }
    tls_reloads: Family<OutcomeLabels, PromCounter> {
        name: "relay_tls_reloads",
        help: "Certificate reloads ([instance.tls], on SIGHUP or a file change), by outcome",
        when_sampled: true,
    }
    fleet_store: Family<RelayLabels, Gauge> {
        name: "relay_fleet_store_available",
        help: "1 while this relay (relay_id) holds a live lease in its fleet's store, 0 while cut \
               off (logins that need a wake get ERR 1053 and nothing is paused); absent for a \
               single relay",
    }
}

impl Metrics {
    /// Adds one to a counter labelled by an error type's `label()`.
    pub fn inc(&self, counter: Counter, instance: &str, value: &'static str) {
        let instance = instance.to_owned();
        match counter {
            Counter::Connections => self.connections.get_or_create(&OutcomeLabels {
                instance,
                outcome: value,
            }),
            Counter::Classifications => self.classifications.get_or_create(&ClassLabels {
                instance,
                class: value,
            }),
            Counter::Wakes => self.wakes.get_or_create(&OutcomeLabels {
                instance,
                outcome: value,
            }),
            Counter::ComputeConnections => {
                self.compute_connections.get_or_create(&OpenedByLabels {
                    instance,
                    opened_by: value,
                })
            }
        }
        .inc();
    }

    /// Whether this relay is in touch with its fleet's store.
    pub fn fleet_store_available(&self, relay_id: &str, available: bool) {
        self.fleet_store
            .get_or_create(&RelayLabels {
                relay_id: relay_id.to_owned(),
            })
            .set(i64::from(available));
    }

    /// Counts a connection on the direct route.
    pub fn direct(&self, instance: &str, outcome: DirectOutcome) {
        self.direct
            .get_or_create(&DirectLabels {
                instance: instance.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts the bytes a byte pump copied for `instance`, per direction.
    pub fn add_pumped(&self, instance: &str, client_to_compute: u64, compute_to_client: u64) {
        for (direction, n) in [
            (Direction::client_to_compute, client_to_compute),
            (Direction::compute_to_client, compute_to_client),
        ] {
            self.bytes
                .get_or_create(&DirectionLabels {
                    instance: instance.to_owned(),
                    direction,
                })
                .inc_by(n);
        }
    }

    /// Counts a key file reload or refusal.
    pub fn key_reload(&self, outcome: KeyReload) {
        self.key_reloads
            .get_or_create(&KeyReloadLabels { outcome })
            .inc();
    }

    /// Counts an admin request refused for `reason`.
    pub fn admin_refused(&self, reason: AdminRefusal) {
        self.admin_refused
            .get_or_create(&AdminRefusalLabels { reason })
            .inc();
    }

    /// Counts a connection refused before its greeting because the cap `reason` was full.
    pub fn refused(&self, instance: &str, reason: &'static str) {
        self.refused
            .get_or_create(&ReasonLabels {
                instance: instance.to_owned(),
                reason,
            })
            .inc();
    }

    /// Counts a login read on `endpoint` (its label), by `outcome`.
    pub fn endpoint_login(&self, endpoint: &str, outcome: &'static str) {
        self.endpoint_logins
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts a login (or, for a blocked source, a connection) refused because the budget
    /// `reason` is spent.
    pub fn budget_refused(&self, instance: &str, reason: &'static str) {
        self.budget_refusals
            .get_or_create(&ReasonLabels {
                instance: instance.to_owned(),
                reason,
            })
            .inc();
    }

    /// Records the blocks in force by scope and budget, and the events the budget table had
    /// no room for (set when scraped).
    pub fn set_budget_blocks(
        &self,
        blocks: &[((&'static str, &'static str), usize)],
        untracked: u64,
    ) {
        for ((scope, budget), n) in blocks {
            self.budget_blocks
                .get_or_create(&BlockLabels { scope, budget })
                .set(gauge_count(*n));
        }
        self.budget_untracked.set(gauge_count(untracked));
    }

    /// Counts a health-check login the relay answered itself.
    pub fn health_check(&self, instance: &str) {
        self.health_checks
            .get_or_create(&InstanceLabels::of(instance))
            .inc();
    }

    /// Counts an install or removal of `instance`'s kernel route; `failure` is the error's
    /// label, none when it worked.
    pub fn kernel_route(
        &self,
        instance: &str,
        action: KernelRouteAction,
        failure: Option<&'static str>,
    ) {
        self.kernel_route_changes
            .get_or_create(&KernelRouteLabels {
                instance: instance.to_owned(),
                action,
                outcome: failure.unwrap_or("ok"),
            })
            .inc();
    }

    /// Records that renewing `instance`'s kernel route lease took `took`.
    pub fn kernel_route_renewed(&self, instance: &str, took: std::time::Duration) {
        self.kernel_route_renewals
            .get_or_create(&InstanceLabels::of(instance))
            .observe(took.as_secs_f64());
    }

    /// Records how many connections the kernel route sent to `instance`'s compute are open.
    pub fn set_kernel_connections(&self, instance: &str, open: usize) {
        self.kernel_connections
            .get_or_create(&InstanceLabels::of(instance))
            .set(gauge_count(open));
    }

    /// Records how many held sessions of `instance` the kernel splice carries now.
    pub fn set_spliced_sessions(&self, instance: &str, sessions: usize) {
        self.spliced_sessions
            .get_or_create(&InstanceLabels::of(instance))
            .set(gauge_count(sessions));
    }

    /// Records when the certificate `instance` serves expires (Unix seconds; 0 when it could
    /// not be read from the certificate).
    pub fn set_tls_expiry(&self, instance: &str, not_after: Option<i64>) {
        self.tls_expiry
            .get_or_create(&InstanceLabels::of(instance))
            .set(not_after.unwrap_or(0));
    }

    /// Counts a certificate reload of `instance`: `"ok"` or `"failed"` (the previous
    /// certificate stays in use).
    pub fn tls_reload(&self, instance: &str, outcome: &'static str) {
        self.tls_reloads
            .get_or_create(&OutcomeLabels {
                instance: instance.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts a failed accept on `listener` (an instance name, or `admin`).
    pub fn accept_error(&self, listener: &str) {
        self.accept_errors
            .get_or_create(&ListenerLabels {
                listener: listener.to_owned(),
            })
            .inc();
    }

    /// Records how many connections of `instance` have not logged in yet (set when scraped).
    pub fn set_pending(&self, instance: &str, pending: usize) {
        self.pending
            .get_or_create(&InstanceLabels::of(instance))
            .set(gauge_count(pending));
    }

    /// Records how many connections of `instance` are parked on its frozen compute (set when
    /// scraped).
    pub fn set_parked(&self, instance: &str, parked: usize) {
        self.parked
            .get_or_create(&InstanceLabels::of(instance))
            .set(gauge_count(parked));
    }

    /// Records where `instance`'s data is, one of `places` (set when scraped).
    pub fn set_data(&self, instance: &str, place: &'static str, places: &[&'static str]) {
        for p in places {
            self.data
                .get_or_create(&DataLabels {
                    instance: instance.to_owned(),
                    place: p,
                })
                .set(i64::from(*p == place));
        }
    }

    /// Counts a command answered on a parked connection: `kind` is `ping` or
    /// `keepalive_query`.
    pub fn parked_answer(&self, instance: &str, kind: &'static str) {
        self.parked_answers
            .get_or_create(&KindLabels {
                instance: instance.to_owned(),
                kind,
            })
            .inc();
    }

    /// Records the capacity an instance's compute has now.
    pub fn set_ccu(&self, instance: &str, ccu: f64) {
        self.ccu
            .get_or_create(&InstanceLabels::of(instance))
            .set(ccu);
    }

    /// Records how long a successful wake took.
    pub fn observe_resume(&self, instance: &str, took: Duration) {
        self.resume
            .get_or_create(&InstanceLabels::of(instance))
            .observe(took.as_secs_f64());
    }

    /// Records the phase an instance entered: its series is 1, every other phase's 0.
    pub fn set_phase(&self, instance: &str, phase: Phase) {
        for p in Phase::ALL {
            self.state
                .get_or_create(&StateLabels {
                    instance: instance.to_owned(),
                    state: p,
                })
                .set(i64::from(p == phase));
        }
    }

    /// Records how many connections of `instance` are open on `route` (set when scraped, from
    /// the instance's own count).
    pub fn set_active(&self, instance: &str, route: Route, open: usize) {
        self.active
            .get_or_create(&RouteLabels {
                instance: instance.to_owned(),
                route,
            })
            .set(gauge_count(open));
    }

    /// Drops the gauges of an instance that was removed (`places`: its data's places), so a
    /// gone instance neither shows as paused nor costs a series per gauge for ever. Its
    /// counters stay: a scrape still sees their last totals, as `rate()` expects.
    pub fn forget_instance(&self, instance: &str, places: &[&'static str]) {
        let labels = InstanceLabels::of(instance);
        for family in [
            &self.pending,
            &self.parked,
            &self.kernel_connections,
            &self.spliced_sessions,
            &self.tls_expiry,
        ] {
            family.remove(&labels);
        }
        self.ccu.remove(&labels);
        for state in Phase::ALL {
            self.state.remove(&StateLabels {
                instance: instance.to_owned(),
                state,
            });
        }
        for route in [Route::Direct, Route::Perceptron] {
            self.active.remove(&RouteLabels {
                instance: instance.to_owned(),
                route,
            });
        }
        for place in places {
            self.data.remove(&DataLabels {
                instance: instance.to_owned(),
                place,
            });
        }
    }

    /// The exposition in `format`.
    #[must_use]
    pub fn render(&self, format: Format) -> String {
        let mut open_metrics = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut open_metrics, &self.registry)
        {
            // Writing into a String cannot fail; a label encoder could, and then the scrape
            // is partial rather than absent.
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        match format {
            Format::OpenMetrics => open_metrics,
            Format::Prometheus => to_prometheus_text(&open_metrics),
        }
    }
}

/// Which exposition format a scraper gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, for scrapers that accept `application/openmetrics-text`.
    OpenMetrics,
    /// Prometheus text format 0.0.4 (what the relay always served before), for the rest.
    Prometheus,
}

impl Format {
    /// The `Content-Type` of this format.
    #[must_use]
    pub const fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Prometheus => "text/plain; version=0.0.4",
        }
    }

    /// The format to answer a request whose `Accept` header is `accept`.
    #[must_use]
    pub fn negotiate(accept: Option<&str>) -> Self {
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            Self::OpenMetrics
        } else {
            Self::Prometheus
        }
    }
}

/// Rewrites OpenMetrics text as Prometheus text 0.0.4: a counter's `# HELP` and `# TYPE` name
/// its samples (with `_total`), and the `# UNIT` and `# EOF` lines go (0.0.4 has neither).
/// Sample lines are the same in both formats.
///
/// Not `prometheus_client::encoding::prometheus_text::encode` (0.26): it writes a histogram's
/// `le` label last and its bounds as `1` rather than `1.0`, so every `relay_resume_seconds`
/// bucket series would change its labels on upgrade and scrapers would see new series.
fn to_prometheus_text(open_metrics: &str) -> String {
    // HELP comes before TYPE: learn which families are counters first.
    let counters: std::collections::HashSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        for marker in ["# HELP ", "# TYPE "] {
            if let Some(rest) = line.strip_prefix(marker) {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{marker}{name}_total {tail}\n"));
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        if line.starts_with('#') {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metrics {
        let m = Metrics::default();
        m.inc(Counter::Wakes, "demo", "ok");
        m.inc(Counter::Wakes, "demo", "ok");
        m.inc(Counter::Classifications, "demo", "http");
        m.direct("demo", DirectOutcome::fell_back);
        m.add_pumped("demo", 10, 20);
        m.observe_resume("demo", Duration::from_millis(30));
        m.set_phase("demo", Phase::Running);
        m.set_active("demo", Route::Perceptron, 3);
        m.admin_refused(AdminRefusal::origin);
        m.refused("demo", "source_pending_limit");
        m.endpoint_login("endpoint 127.0.0.1:3306", "unknown_instance");
        m.accept_error("demo");
        m.set_pending("demo", 7);
        m.budget_refused("demo", "source_failed_logins");
        m.set_budget_blocks(&[(("source", "failed_logins"), 2)], 0);
        m.health_check("demo");
        m.kernel_route("demo", KernelRouteAction::install, None);
        m.kernel_route("demo", KernelRouteAction::remove, Some("timeout"));
        m.set_kernel_connections("demo", 4);
        m.inc(Counter::Connections, "demo", "relayed");
        m.set_ccu("demo", 0.5);
        m.set_tls_expiry("demo", Some(1_900_000_000));
        m.tls_reload("demo", "ok");
        m.key_reload(KeyReload::refused);
        m.fleet_store_available("relay-1", true);
        m
    }

    #[test]
    fn a_removed_instance_leaves_no_gauge_behind() {
        let m = sample();
        m.set_phase("gone", Phase::Paused);
        m.set_active("gone", Route::Direct, 1);
        m.set_pending("gone", 0);
        m.set_data("gone", "local", &["local", "stored"]);
        let rendered = m.render(Format::Prometheus);
        assert!(rendered.contains("instance=\"gone\""));
        m.forget_instance("gone", &["local", "stored"]);
        let rendered = m.render(Format::Prometheus);
        assert!(!rendered.contains("instance=\"gone\""), "{rendered}");
        assert!(rendered.contains("instance=\"demo\""));
    }

    #[test]
    fn renders_counters_histogram_and_state() {
        let text = sample().render(Format::Prometheus);
        for line in [
            "# TYPE relay_wakes_total counter",
            "relay_wakes_total{instance=\"demo\",outcome=\"ok\"} 2",
            "relay_classifications_total{instance=\"demo\",class=\"http\"} 1",
            "relay_direct_connections_total{instance=\"demo\",outcome=\"fell_back\"} 1",
            "relay_bytes_total{instance=\"demo\",direction=\"client_to_compute\"} 10",
            "relay_bytes_total{instance=\"demo\",direction=\"compute_to_client\"} 20",
            "# TYPE relay_resume_seconds histogram",
            // prometheus-client writes `le` first and bounds as floats (`1.0`).
            "relay_resume_seconds_bucket{le=\"0.025\",instance=\"demo\"} 0",
            "relay_resume_seconds_bucket{le=\"0.05\",instance=\"demo\"} 1",
            "relay_resume_seconds_bucket{le=\"+Inf\",instance=\"demo\"} 1",
            "relay_resume_seconds_count{instance=\"demo\"} 1",
            "relay_instance_state{instance=\"demo\",state=\"running\"} 1",
            "relay_instance_state{instance=\"demo\",state=\"paused\"} 0",
            "relay_active_connections{instance=\"demo\",route=\"perceptron\"} 3",
            "relay_admin_refused_total{reason=\"origin\"} 1",
            "relay_connections_refused_total{instance=\"demo\",reason=\"source_pending_limit\"} 1",
            "relay_accept_errors_total{listener=\"demo\"} 1",
            "relay_pending_connections{instance=\"demo\"} 7",
            "relay_budget_refusals_total{instance=\"demo\",reason=\"source_failed_logins\"} 1",
            "relay_budget_blocks{scope=\"source\",budget=\"failed_logins\"} 2",
            "relay_budget_untracked_events 0",
            "relay_health_checks_total{instance=\"demo\"} 1",
            "relay_kernel_route_changes_total{instance=\"demo\",action=\"install\",outcome=\"ok\"} 1",
            "relay_kernel_route_changes_total{instance=\"demo\",action=\"remove\",outcome=\"timeout\"} 1",
            "relay_kernel_route_connections{instance=\"demo\"} 4",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line} in:\n{text}"
            );
        }
    }

    #[test]
    fn every_metric_has_help_text_in_both_formats() {
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = Metrics::default().render(format);
            let family = |marker: &str| -> Vec<String> {
                text.lines()
                    .filter_map(|l| l.strip_prefix(marker))
                    .map(|rest| rest.split(' ').next().unwrap_or_default().to_owned())
                    .collect()
            };
            let (typed, helped) = (family("# TYPE "), family("# HELP "));
            assert!(typed.len() >= 20, "{text}");
            assert_eq!(typed, helped, "{text}");
            for line in text.lines().filter(|l| l.starts_with("# HELP ")) {
                assert!(line.split(' ').nth(3).is_some(), "empty help: {line}");
            }
        }
        let text = sample().render(Format::Prometheus);
        assert!(
            text.contains("# HELP relay_wakes_total Wake attempts by outcome"),
            "{text}"
        );
    }

    #[test]
    fn prometheus_text_has_a_type_before_every_sample_and_only_samples_otherwise() {
        let text = sample().render(Format::Prometheus);
        let mut typed = Vec::new();
        for line in text.lines() {
            if line.starts_with("# HELP ") {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.push(rest.split(' ').next().unwrap_or_default().to_owned());
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
            let name = series.split('{').next().unwrap();
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                typed.iter().any(|t| t == name || t == base),
                "no TYPE before {line}"
            );
        }
    }

    #[test]
    fn open_metrics_keeps_help_and_ends_with_eof() {
        let text = sample().render(Format::OpenMetrics);
        assert!(text.contains("# TYPE relay_wakes counter\n"), "{text}");
        assert!(
            text.contains("# UNIT relay_resume_seconds seconds\n"),
            "{text}"
        );
        assert!(text.contains("relay_wakes_total{instance=\"demo\",outcome=\"ok\"} 2\n"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn negotiates_open_metrics_only_when_asked() {
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
    }
}
