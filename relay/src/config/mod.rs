//! The relay's TOML configuration, deserialised by serde into the types the relay uses and
//! validated at start-up. Unknown keys are refused, and every error names the file and the key
//! (`relay.toml: instance[0].resume_timeout: '15' has no unit ...`), so a typo is found in one
//! read.
//!
//! Values are checked where serde reads them (addresses, durations and their minimums, names,
//! enums), and `serde_path_to_error` names the key of any failure. What one value cannot show
//! is checked after: a name or listen address used twice, and the driver. The driver's `kind`
//! decides which keys may stand beside it; serde's internally tagged enums buffer the table and
//! lose the key path, so `kind` is read first and the rest is deserialised into that kind's type.
//!
//! Relative paths (state directory, key file, admin token file, driver working directory and
//! token file) are resolved against the directory holding the configuration file, so a config
//! works from any current directory.
//!
//! - this file: the types the relay reads (`Config` and below) and the file as written;
//! - `fields`: how single values are read (addresses, names, argv, CCUs) and their defaults;
//! - `load`: reading a file, and what is checked across values;
//! - `error`: [`ConfigError`], naming the file and the key.
//!
//! What needs another module to check (the TLS files, the fleet's relay id, the nftables
//! table's name) is checked by `preflight`, which `relay check` and `relay run` call: this
//! module uses nothing of the crate but the value types below it (`duration`, `capacity`).

pub mod data_dirs;
mod error;
mod fields;
pub mod instance_file;
mod load;
mod run_as;
pub mod store_url;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::capacity::{CapacityConfig, Ccu};
use crate::duration;

pub use error::{ConfigError, ConfigProblem};
use fields::{
    HttpUrl, addr, argv, at_least_one, ccu, frozen_rate, health_check_users, instance_name,
    some_addr, some_argv, some_ccu, some_positive_duration, worker_threads,
};
pub use store_url::StoreUrl;

/// Default wait for a paused instance to become ready.
pub const DEFAULT_RESUME_TIMEOUT: Duration = Duration::from_secs(15);

/// Default wait for a client's login after the greeting.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default idle period before an instance pauses itself.
pub const DEFAULT_IDLE_PAUSE_AFTER: Duration = Duration::from_secs(300);

/// Default quiet time before an instance whose open connections are all between commands
/// parks them (freezes its compute): long enough that a pool in use is not frozen between its
/// requests, short because each second running is billed and a thaw costs half a millisecond.
pub const DEFAULT_PARK_AFTER: Duration = Duration::from_secs(10);

/// Default idle time before pausing a compute whose wake served only refused logins: long
/// enough for a client to retry with the right password, short against `idle_pause_after`.
pub const DEFAULT_FAILED_WAKE_PAUSE_AFTER: Duration = Duration::from_secs(10);

/// Default wait for a compute to exit after SIGTERM before SIGKILL.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

/// Default wait for each step of the relayed login with the compute.
pub const DEFAULT_COMPUTE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default bound on each command of the `exec` driver.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Default bound on each request of the `http` driver.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Default period of the `exec` and `http` drivers' status checks.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Default cap on connections of the whole relay that have not logged in yet. Each costs a
/// descriptor and at most one 64 KiB login buffer, so this bounds that memory (~300 MB worst
/// case) and keeps descriptors free for real logins and the admin API.
pub const DEFAULT_MAX_PENDING_CONNECTIONS: usize = 4096;

/// Default cap on pre-login connections from one source address (IPv4 address or IPv6 /64):
/// room for an application server's whole pool connecting at once (the 1,000-client storm
/// benchmark), a quarter of the relay's.
pub const DEFAULT_MAX_PENDING_PER_SOURCE: usize = 1024;

/// Default cap on one instance's pre-login connections: one instance under attack leaves
/// half of the relay's to the others.
pub const DEFAULT_INSTANCE_MAX_PENDING: usize = 2048;

/// Default counting window of the wake-cost budgets.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(3600);

/// Default time a subject stays blocked once a budget is spent.
pub const DEFAULT_BUDGET_BLOCK_FOR: Duration = Duration::from_secs(3600);

/// Default failed logins per source address per window: a person mistyping a password
/// stays far below it, a bot guessing one password a minute is stopped within 20 minutes.
pub const DEFAULT_FAILED_LOGINS_PER_SOURCE: u32 = 20;

/// Default failed logins per user of an instance per window, from all sources together (a
/// guesser spread over many addresses).
pub const DEFAULT_FAILED_LOGINS_PER_USER: u32 = 100;

/// Default wakes one source may cause per window: with the default `idle_pause_after` (5
/// minutes) a client that connects now and then wakes an instance at most 12 times an hour.
pub const DEFAULT_WAKES_PER_SOURCE: u32 = 60;

/// Default wakes one user of an instance may cause per window.
pub const DEFAULT_WAKES_PER_USER: u32 = 120;

/// Default wakes per source per window whose login the compute refused: a guesser that waits
/// for each pause buys this many wakes an hour, not one per guess.
pub const DEFAULT_FAILED_WAKES_PER_SOURCE: u32 = 3;

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// Relay-wide settings.
    pub relay: RelaySettings,
    /// The instances this relay fronts.
    pub instances: Vec<InstanceConfig>,
    /// Listeners shared by the instances (`[[endpoint]]`).
    pub endpoints: Vec<EndpointConfig>,
}

/// `[[endpoint]]`: one listener for many instances. The relay greets the client itself and
/// picks the instance from the login's user name (docs/endpoints.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Where it listens.
    #[serde(deserialize_with = "addr")]
    pub listen: SocketAddr,
    /// How the login names the instance.
    pub route_by: RouteBy,
    /// How long a client may take from the greeting to its login.
    #[serde(
        default = "default::handshake_timeout",
        deserialize_with = "duration::positive"
    )]
    pub handshake_timeout: Duration,
    /// `[endpoint.tls]`: the certificate the endpoint serves (needed by `route_by = "sni"`).
    #[serde(default)]
    pub tls: Option<TlsSettings>,
    /// User names whose login with an empty password is a load balancer's health check of the
    /// endpoint itself: the whole user name, without an instance part. Answered OK by the
    /// endpoint, whatever instances exist; a health-check user *with* an instance part is
    /// refused as a wrong password is, so that no login tells an instance exists.
    #[serde(
        default = "default::health_check_users",
        deserialize_with = "health_check_users"
    )]
    pub health_check_users: Vec<String>,
}

/// `[[endpoint]] route_by`: where in the login the instance's name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RouteBy {
    /// `user@instance` (as Azure's `user@server`): the part after the last `@`.
    #[serde(rename = "user@instance")]
    UserAtInstance,
    /// `instance.user` (as TiDB Cloud's `<prefix>.user`): the part before the first `.`.
    #[serde(rename = "instance.user")]
    InstanceDotUser,
    /// The TLS server name's first label (`instance.db.example.com`, as Neon routes
    /// `ep-xxx.region.neon.tech`); the user name is the compute's as it is.
    #[serde(rename = "sni")]
    ServerName,
}

impl RouteBy {
    /// The instance's name and the user name the compute sees, from a login's user name and
    /// the TLS server name it came with; `None` when they name no instance (or leave no
    /// user). Pure.
    #[must_use]
    pub fn split<'a>(
        self,
        login_user: &'a str,
        server_name: Option<&'a str>,
    ) -> Option<(&'a str, &'a str)> {
        let (instance, user) = match self {
            Self::UserAtInstance => login_user.rsplit_once('@').map(|(u, i)| (i, u))?,
            Self::InstanceDotUser => login_user.split_once('.')?,
            Self::ServerName => (server_name?.split('.').next()?, login_user),
        };
        (!instance.is_empty() && !user.is_empty()).then_some((instance, user))
    }
}

/// `[relay]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySettings {
    /// Where learnt compute profiles (and later the usage ledger) live.
    pub state_dir: PathBuf,
    /// The perceptron key ring; the newest key signs relayed logins.
    pub key_file: PathBuf,
    /// The admin API address; none disables the API.
    #[serde(default, deserialize_with = "some_addr")]
    pub admin_listen: Option<SocketAddr>,
    /// A file holding the bearer token admin requests must carry (mode 0600); none means
    /// no token (keep `admin_listen` on loopback then).
    #[serde(default)]
    pub admin_token_file: Option<PathBuf>,
    /// Threads that run connections; none means one per CPU core.
    #[serde(default, deserialize_with = "worker_threads")]
    pub worker_threads: Option<usize>,
    /// Cap on connections of the whole relay that have not logged in yet.
    #[serde(
        default = "default::max_pending_connections",
        deserialize_with = "at_least_one"
    )]
    pub max_pending_connections: usize,
    /// Cap on pre-login connections from one source address (IPv4 address or IPv6 /64).
    #[serde(
        default = "default::max_pending_per_source",
        deserialize_with = "at_least_one"
    )]
    pub max_pending_per_source: usize,
    /// `[relay.budgets]`: failed logins and wakes per source and per user.
    #[serde(default)]
    pub budgets: BudgetSettings,
    /// The nftables table of the kernel route (`route = "nftables"`); none means
    /// `perceptron_` and a hash of `state_dir` (see `crate::router::nft`).
    #[serde(default)]
    pub nftables_table: Option<String>,
    /// `[relay.store]`: where instance state lives; `local` (this relay's `state_dir`) unless
    /// the relay is one of a fleet.
    #[serde(default)]
    pub store: StoreSettings,
    /// A directory of instance files (`<name>.toml`, one instance each) the relay watches:
    /// instances added, changed and removed there while it runs (docs/instances.md).
    #[serde(default)]
    pub instances_dir: Option<PathBuf>,
}

/// `[relay.store]`: the instance-state store (see `crate::fleet`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per relay, read at start: its size does not matter"
)]
pub enum StoreSettings {
    /// This relay alone: state in `state_dir`.
    #[default]
    Local,
    /// A fleet coordinated through etcd.
    Etcd(EtcdSettings),
}

/// `[relay.store] kind = "etcd"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSettings {
    /// etcd client URLs (`http://10.0.0.5:2379`) or `host:port`.
    pub endpoints: Vec<String>,
    /// This relay's name in the fleet, unique per relay.
    pub relay_id: String,
    /// Every key the fleet writes is under it.
    #[serde(default = "default::etcd_prefix")]
    pub prefix: String,
    /// How long this relay's records outlive it: a dead relay's wake is taken over, and its
    /// connections stop holding instances awake, this long after it stops answering.
    #[serde(
        default = "default::lease_ttl",
        deserialize_with = "duration::at_least_1s"
    )]
    pub lease_ttl: Duration,
    /// Bound on connecting to etcd at start.
    #[serde(default = "default::dial_timeout", deserialize_with = "duration::any")]
    pub dial_timeout: Duration,
    /// Bound on each request; a slower etcd counts as unreachable.
    #[serde(
        default = "default::store_request_timeout",
        deserialize_with = "duration::any"
    )]
    pub request_timeout: Duration,
    /// The CA that signed etcd's server certificate (PEM): the connection to etcd uses TLS
    /// (`https://` endpoints) and verifies etcd against it.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// This relay's client certificate (PEM) for etcd's `--client-cert-auth`; with `key_file`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM, mode 0600).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The relays' key for instance definitions in the store (a key file, as `relay keygen`
    /// writes, mode 0600; the relays' own, never the computes'): a relay seals what it
    /// writes there and runs only what a key of this file sealed (`fleet::seal`). Without
    /// it, no definition from the store runs and the admin API cannot write one.
    #[serde(default)]
    pub definitions_key_file: Option<PathBuf>,
}

impl EtcdSettings {
    /// Whether the connection to etcd uses TLS.
    #[must_use]
    pub const fn tls(&self) -> bool {
        self.ca_file.is_some()
    }
}

/// `[relay.budgets]`: the wake-cost budgets (see `crate::budgets`). A limit of 0 turns that
/// budget off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSettings {
    /// The counting window.
    #[serde(
        default = "default::budget_window",
        deserialize_with = "duration::at_least_1s"
    )]
    pub window: Duration,
    /// How long a subject stays blocked once a budget is spent.
    #[serde(
        default = "default::budget_block_for",
        deserialize_with = "duration::at_least_1s"
    )]
    pub block_for: Duration,
    /// Failed logins (ERR 1045 from the compute) per source address per window.
    #[serde(default = "default::failed_logins_per_source")]
    pub failed_logins_per_source: u32,
    /// Failed logins per user of an instance per window.
    #[serde(default = "default::failed_logins_per_user")]
    pub failed_logins_per_user: u32,
    /// Wakes per source address per window.
    #[serde(default = "default::wakes_per_source")]
    pub wakes_per_source: u32,
    /// Wakes per user of an instance per window.
    #[serde(default = "default::wakes_per_user")]
    pub wakes_per_user: u32,
    /// Wakes per source address per window whose login the compute refused.
    #[serde(default = "default::failed_wakes_per_source")]
    pub failed_wakes_per_source: u32,
}

impl Default for BudgetSettings {
    fn default() -> Self {
        Self {
            window: DEFAULT_BUDGET_WINDOW,
            block_for: DEFAULT_BUDGET_BLOCK_FOR,
            failed_logins_per_source: DEFAULT_FAILED_LOGINS_PER_SOURCE,
            failed_logins_per_user: DEFAULT_FAILED_LOGINS_PER_USER,
            wakes_per_source: DEFAULT_WAKES_PER_SOURCE,
            wakes_per_user: DEFAULT_WAKES_PER_USER,
            failed_wakes_per_source: DEFAULT_FAILED_WAKES_PER_SOURCE,
        }
    }
}

/// The most `relay.worker_threads` accepts.
pub const MAX_WORKER_THREADS: usize = 256;

/// How the compute verifies a login the relay completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// The compute verifies the relayed-auth payload (server-shim).
    #[default]
    Dual,
    /// A stock MySQL/MariaDB: after the wake the client is switched once to the server's own
    /// plugin and scramble, and the rest of the login is relayed.
    Switch,
}

/// How new connections reach a running compute (`instance.route`, see `crate::router`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteMode {
    /// The relay accepts every connection and copies its bytes (works anywhere).
    #[default]
    Pump,
    /// While the instance runs, the kernel DNATs new connections to the compute (Linux,
    /// `CAP_NET_ADMIN`, `nft`).
    Nftables,
}

impl RouteMode {
    /// The name in the configuration, status output and logs.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pump => "pump",
            Self::Nftables => "nftables",
        }
    }
}

/// `[instance.tls]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// The certificate chain served to clients (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1); owner-only permissions.
    pub key: PathBuf,
    /// CA certificates (PEM) client certificates must chain to: mutual TLS. Without it the
    /// relay asks for no client certificate.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// The oldest TLS version accepted.
    #[serde(default)]
    pub min_version: TlsVersion,
}

/// `min_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3 (the default: MySQL 5.7-era clients and Connector/J 5 stop at 1.2).
    #[default]
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    Tls13,
}

/// `compute_tls`: TLS on the compute leg of a relayed login.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeTlsMode {
    /// Plaintext (a trusted network between relay and compute).
    #[default]
    Off,
    /// TLS without checking the compute's certificate: encryption against a passive
    /// observer only.
    On,
    /// TLS, the compute's certificate checked against `compute_ca` and its name.
    Verify,
}

/// `compute_proof` (dual mode): where the compute proves that it holds the perceptron key,
/// which decides what the relay trusts before a relayed login has checked it (README,
/// "Security model").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeProofMode {
    /// To any connection that asks (server-shim: in its auth switch, or in its greeting
    /// before that form): a compute is routed to directly, and adopted as trusted, only once
    /// a probe (or a relayed login) has proven the key.
    #[default]
    Greeting,
    /// Only in a relayed login's challenge round (MariaDB with `perceptron_dual`, whose
    /// greeting the plugin cannot change): a greeting without a proof is trusted for the
    /// direct route, as the relay cannot ask for more without a login.
    Login,
}

/// One `[[instance]]`.
#[derive(Debug, Clone)]
pub struct InstanceConfig {
    /// Unique name, used in logs and metrics.
    pub name: String,
    /// Where clients connect; none for an instance reached only through endpoints.
    pub listen: Option<SocketAddr>,
    /// Where the compute listens once running.
    pub compute: SocketAddr,
    /// How logins are completed.
    pub auth: AuthMode,
    /// Send a PROXY protocol v2 header on every compute connection.
    pub proxy_protocol: bool,
    /// Bound on the wake (P3) and compute readiness.
    pub resume_timeout: Duration,
    /// Bound on the client's login after the greeting (P2).
    pub handshake_timeout: Duration,
    /// Bound on each exchange with the compute during the relayed login (P5–P7).
    pub compute_timeout: Duration,
    /// Idle time before pausing (acted on by the control-plane work).
    pub idle_pause_after: Duration,
    /// Idle time before pausing a compute woken for logins that were all refused (ERR 1045)
    /// and used by no accepted one: a password guess buys this, not `idle_pause_after`.
    pub failed_wake_pause_after: Duration,
    /// What happens to a running compute when the relay exits.
    pub on_relay_exit: OnRelayExit,
    /// Cap on this instance's connections that have not logged in yet.
    pub max_pending_connections: usize,
    /// Users whose login with an empty password is a load balancer's health check: answered
    /// OK by the relay itself on the perceptron route, without a wake, and closed.
    pub health_check_users: Vec<String>,
    /// `[instance.capacity]`: live CPU and memory limits scaled with the load, billed in
    /// CCU-seconds; `None` runs the compute without limits (billed as one CCU).
    pub capacity: Option<CapacityConfig>,
    /// `[instance.offload]`: the data moved to an object store while paused.
    pub offload: Option<OffloadConfig>,
    /// With it, a pause freezes the compute (its memory and sockets kept, thawed in
    /// milliseconds by the next login) and stops it once it has stayed frozen this long.
    pub stop_after: Option<Duration>,
    /// Whether an idle pause with connections open parks them (docs/parking.md): the compute
    /// is frozen with their sessions intact when every one is between commands. Process
    /// driver only; the relay must be able to create the compute's cgroup.
    pub park: bool,
    /// How long every open connection must have been between commands before a `park`
    /// instance freezes under them (at most `idle_pause_after`, which still governs an
    /// instance with no connection). Short because a parked pool costs a thaw of about half
    /// a millisecond on its next command, and every second running is billed.
    pub park_after: Duration,
    /// Whether held sessions are resumable (docs/parking.md, "Sessions across a stop"): the
    /// relay asks the compute for a ticket at each relayed login, and a frozen compute whose
    /// open connections are all resumable is stopped after `stop_after`, the sessions
    /// reattached at their next command. Dual mode with a compute that issues tickets
    /// (server-shim with `--ticket-key-file`).
    pub resumable_sessions: bool,
    /// With `resumable_sessions`: how many sessions may wait detached from a stopped compute
    /// at once; the ones detached beyond it get ERR 1927 at their next command, with no wake.
    pub max_detached_sessions: usize,
    /// With `resumable_sessions`, for testing that a carried session is the same session: after
    /// every this-many commands, a session between commands is read and reattached to the
    /// running compute (a new login with its ticket, its state restored), as after a stop but
    /// without one. `None`: never (the default).
    pub force_reattach_every: Option<std::num::NonZeroU32>,
    /// Whether the connections this instance's relayed logins hold are spliced in the kernel
    /// (docs/kernel-splice.md) when the relay can: their bytes then never wake it. Held
    /// connections the relay must follow stay on its pump: TLS on either leg, and, until
    /// parking takes connections back from the kernel, instances with `park` or
    /// `resumable_sessions`.
    pub kernel_splice: bool,
    /// With `kernel_splice`: whether held connections whose client and compute are both on
    /// the relay's host (loopback), or both on other hosts, are spliced below TCP
    /// (docs/kernel-splice.md, *Below TCP*) rather than through their sockets.
    pub splice_below_tcp: bool,
    /// Queries pools send to keep a connection open (exact `COM_QUERY` texts): not use of the
    /// instance, and answered while parked with the compute's own last answer to the same
    /// query on the same connection.
    pub keepalive_queries: Vec<String>,
    /// How new connections reach the compute while it runs.
    pub route: RouteMode,
    /// How the compute is started and stopped.
    pub driver: DriverConfig,
    /// `[instance.tls]`: the perceptron route offers TLS and terminates it; `None` offers
    /// none.
    pub tls: Option<TlsSettings>,
    /// A login without TLS gets ERR 3159 before anything wakes (MySQL's
    /// `require_secure_transport`); needs `[instance.tls]`.
    pub require_secure_transport: bool,
    /// TLS on the compute leg of relayed logins.
    pub compute_tls: ComputeTlsMode,
    /// CA certificates the compute's certificate must chain to (`compute_tls = "verify"`).
    pub compute_ca: Option<PathBuf>,
    /// The name the compute's certificate must carry (default: the compute's IP address).
    pub compute_tls_name: Option<String>,
    /// Where a dual-mode compute proves it holds the key.
    pub compute_proof: ComputeProofMode,
}

impl InstanceConfig {
    /// Whether every login must reach the relay's TLS: `require_secure_transport` or
    /// `[instance.tls] client_ca`. The relay can only hold a client to them where it
    /// terminates TLS, so such an instance has no direct route: while it runs, its
    /// connections take the perceptron route too (the kernel route is refused with them).
    #[must_use]
    pub fn relay_terminates_every_login(&self) -> bool {
        self.require_secure_transport || self.tls.as_ref().is_some_and(|t| t.client_ca.is_some())
    }

    /// Whether every login takes the perceptron route, also while the instance runs: where the
    /// relay terminates every login ([`Self::relay_terminates_every_login`]); with
    /// `[instance.tls]`, so that a TLS login is read by the relay and charged to the
    /// failed-login budgets (on the direct route it would be ciphertext the relay cannot
    /// read, and a guesser on TLS would have no limit); and with `resumable_sessions`, so
    /// that every connection is logged in by the relay and gets a resumption ticket, whenever
    /// it was opened (a pool opened while the instance runs survives a stop too). Both routes
    /// forward through the same pump, so this costs a connection its login's round trips
    /// through the relay, not throughput.
    #[must_use]
    pub fn relays_every_login(&self) -> bool {
        self.relay_terminates_every_login() || self.reads_tls_logins() || self.resumable_sessions
    }

    /// Whether `[instance.tls]` takes the direct route away, so that the relay reads (and
    /// charges) every TLS login: not in switch mode with a plaintext compute leg, where a
    /// relayed login cannot carry the answers that are the password itself (a MySQL 8
    /// account's caching_sha2 full authentication, which fills its cache, could then never
    /// happen), so the compute's own TLS serves the direct route there.
    #[must_use]
    pub fn reads_tls_logins(&self) -> bool {
        self.tls.is_some()
            && !(self.auth == AuthMode::Switch && self.compute_tls == ComputeTlsMode::Off)
    }

    /// Whether held connections may be spliced in the kernel. Resumable sessions only below
    /// TCP, where the splice is faster than the pump (across hosts the sockhash is not):
    /// what they did while spliced is read from the compute when they are taken back
    /// (docs/kernel-splice.md, *Resumable sessions*).
    #[must_use]
    pub fn splices_held(&self) -> bool {
        self.kernel_splice && (!self.resumable_sessions || self.splice_below_tcp)
    }
}

/// `instance.on_relay_exit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnRelayExit {
    /// Stop the compute (the default: a relay that goes away takes its computes with it).
    #[default]
    Pause,
    /// Leave it running; the next relay adopts it without a restart or double billing.
    Leave,
}

/// `[instance.driver]`, chosen by its `kind` key.
#[derive(Debug, Clone)]
pub enum DriverConfig {
    /// `kind = "process"`: spawn `command` as a child process; ready when `compute` greets.
    Process {
        /// Program and arguments.
        command: Vec<String>,
        /// The child's working directory.
        cwd: PathBuf,
        /// SIGTERM → SIGKILL grace.
        stop_grace: Duration,
        /// `env`: variables the child gets beyond the few it inherits (see
        /// `control::driver::process::INHERITED_ENV`); nothing else of the relay's
        /// environment reaches it.
        env: Vec<(String, String)>,
        /// `user` and `group`: whom the compute runs as (`None`: the relay's own user).
        run_as: Option<RunAs>,
    },
    /// `kind = "exec"`: user commands start, stop and (optionally) report on the compute.
    Exec(ExecSpec),
    /// `kind = "http"`: an external control plane, over HTTP.
    Http(HttpSpec),
}

/// `[instance.driver] user` and `group`, resolved when the file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id (the user's primary group unless `group` names another).
    pub gid: u32,
}

/// `kind = "http"`.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    /// The control plane's address.
    pub addr: SocketAddr,
    /// The `Host` header.
    pub host: String,
    /// The path prefix of the endpoints (no trailing slash).
    pub base_path: String,
    /// Bearer token, read from `token_file`.
    pub token: Option<String>,
    /// Bound on each request.
    pub request_timeout: Duration,
    /// How often a running compute's status is checked.
    pub poll_interval: Duration,
}

/// `kind = "exec"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSpec {
    /// Starts the compute; must return once it is starting.
    #[serde(deserialize_with = "argv")]
    pub start: Vec<String>,
    /// Stops the compute.
    #[serde(deserialize_with = "argv")]
    pub stop: Vec<String>,
    /// Exit status 0 means running; without it the relay probes the compute's address.
    #[serde(default, deserialize_with = "some_argv")]
    pub status: Option<Vec<String>>,
    /// The commands' working directory (default: the configuration file's directory).
    #[serde(default)]
    pub cwd: PathBuf,
    /// Bound on each command.
    #[serde(
        default = "default::command_timeout",
        deserialize_with = "duration::any"
    )]
    pub command_timeout: Duration,
    /// How often a running compute is checked.
    #[serde(default = "default::poll_interval", deserialize_with = "duration::any")]
    pub poll_interval: Duration,
    /// Resizes the compute (`[instance.capacity]`); `{CCU}` in an argument becomes the new
    /// capacity, e.g. `1.5`.
    #[serde(default, deserialize_with = "some_argv")]
    pub scale: Option<Vec<String>>,
    /// Prints the CPU time the compute has used in all, in seconds (the autoscaler's input).
    #[serde(default, deserialize_with = "some_argv")]
    pub cpu_usage: Option<Vec<String>>,
    /// With `[instance.offload]`: moves the stopped compute's data to the store; exit 0 only
    /// once it is there and the compute cannot start without `restore`, non-zero with the
    /// data left where it was.
    #[serde(default, deserialize_with = "some_argv")]
    pub offload: Option<Vec<String>>,
    /// With `[instance.offload]`: brings the data back before a start; must also succeed
    /// (doing nothing) when the data is already back.
    #[serde(default, deserialize_with = "some_argv")]
    pub restore: Option<Vec<String>>,
}

/// The file as written: `[relay]` and the `[[instance]]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    relay: RelaySettings,
    #[serde(default)]
    instance: Vec<InstanceFile>,
    #[serde(default)]
    endpoint: Vec<EndpointConfig>,
}

/// One `[[instance]]` as written: final types but for the driver (see the module docs).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceFile {
    #[serde(deserialize_with = "instance_name")]
    name: String,
    #[serde(default, deserialize_with = "some_addr")]
    listen: Option<SocketAddr>,
    #[serde(deserialize_with = "addr")]
    compute: SocketAddr,
    #[serde(default)]
    auth: AuthMode,
    #[serde(default)]
    proxy_protocol: bool,
    #[serde(
        default = "default::resume_timeout",
        deserialize_with = "duration::positive"
    )]
    resume_timeout: Duration,
    #[serde(
        default = "default::handshake_timeout",
        deserialize_with = "duration::positive"
    )]
    handshake_timeout: Duration,
    #[serde(
        default = "default::compute_timeout",
        deserialize_with = "duration::positive"
    )]
    compute_timeout: Duration,
    #[serde(
        default = "default::idle_pause_after",
        deserialize_with = "duration::at_least_1s"
    )]
    idle_pause_after: Duration,
    #[serde(
        default = "default::failed_wake_pause_after",
        deserialize_with = "duration::at_least_1s"
    )]
    failed_wake_pause_after: Duration,
    #[serde(default)]
    on_relay_exit: OnRelayExit,
    #[serde(
        default = "default::instance_max_pending",
        deserialize_with = "at_least_one"
    )]
    max_pending_connections: usize,
    #[serde(
        default = "default::health_check_users",
        deserialize_with = "health_check_users"
    )]
    health_check_users: Vec<String>,
    capacity: Option<CapacityFile>,
    #[serde(default, deserialize_with = "some_positive_duration")]
    stop_after: Option<Duration>,
    #[serde(default = "default::park")]
    park: bool,
    #[serde(
        default = "default::park_after",
        deserialize_with = "duration::positive"
    )]
    park_after: Duration,
    #[serde(default = "default::keepalive_queries")]
    keepalive_queries: Vec<String>,
    #[serde(default)]
    resumable_sessions: bool,
    #[serde(default = "default::max_detached_sessions")]
    max_detached_sessions: usize,
    #[serde(default)]
    force_reattach_every: Option<std::num::NonZeroU32>,
    #[serde(default = "default::kernel_splice")]
    kernel_splice: bool,
    #[serde(default = "default::kernel_splice")]
    splice_below_tcp: bool,
    #[serde(default)]
    route: RouteMode,
    driver: toml::Table,
    tls: Option<TlsSettings>,
    #[serde(default)]
    require_secure_transport: bool,
    #[serde(default)]
    compute_tls: ComputeTlsMode,
    compute_ca: Option<PathBuf>,
    compute_tls_name: Option<String>,
    #[serde(default)]
    compute_proof: ComputeProofMode,
    offload: Option<OffloadFile>,
}

/// `[instance.offload]`: after `after` paused, the compute's data goes to the store; a wake
/// restores it before the compute starts (docs/offload.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadConfig {
    /// How long the instance stays paused before its data is offloaded.
    pub after: Duration,
    /// Who moves the data.
    pub mover: OffloadMover,
}

/// Who moves an instance's data to the store and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffloadMover {
    /// The relay itself: the process driver's compute keeps its data in a directory on the
    /// relay's host.
    Relay(ArchiveConfig),
    /// The exec driver's `offload` and `restore` commands (the data is wherever the compute
    /// is); `store`, if given, is passed to them.
    Commands {
        /// `[instance.offload] store`, as written.
        store: Option<String>,
    },
}

/// What the relay needs to move a data directory itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveConfig {
    /// The store's URL.
    pub store: String,
    /// The compute's data directory (the path its command is given), relative to the
    /// configuration file's directory unless absolute.
    pub data_dir: PathBuf,
    /// How a wake brings the data back.
    pub restore: RestoreMode,
    /// How an `s3://` store is reached (empty for a `file://` one).
    pub s3: S3Settings,
}

/// `[instance.offload]`'s S3 keys. Credentials are never among them: they come from
/// `credentials_file` or the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// An S3-compatible server's URL (`https://host:port`, or `http://` on a trusted network);
    /// none is AWS itself.
    pub endpoint: Option<String>,
    /// The bucket's region; none takes `AWS_REGION` or `us-east-1`.
    pub region: Option<String>,
    /// A TOML file (owner-only) with `access_key_id`, `secret_access_key` and optionally
    /// `session_token`; none takes the environment's (`AWS_ACCESS_KEY_ID`, ...).
    pub credentials_file: Option<PathBuf>,
}

/// `[instance.offload] restore`: how a wake brings offloaded data back (default `lazy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestoreMode {
    /// server-shim's databases (`data.sqlite`) are left in the store and read as queries need
    /// them, filled in behind them; every other file is restored before the start. A
    /// directory without such files (MariaDB's) is restored in full. The compute reads a
    /// `file://` store's directory itself, and an `s3://` store through the relay's socket.
    Lazy,
    /// Every file is restored before the compute starts.
    Full,
}

/// `[instance.offload]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OffloadFile {
    store: Option<String>,
    #[serde(deserialize_with = "duration::at_least_1s")]
    after: Duration,
    data_dir: Option<PathBuf>,
    restore: Option<RestoreMode>,
    endpoint: Option<String>,
    region: Option<String>,
    credentials_file: Option<PathBuf>,
}

/// `[instance.capacity]` as written, in CCUs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityFile {
    #[serde(deserialize_with = "ccu")]
    min_ccu: Ccu,
    #[serde(deserialize_with = "ccu")]
    max_ccu: Ccu,
    #[serde(default, deserialize_with = "some_ccu")]
    resume_ccu: Option<Ccu>,
    #[serde(
        default = "default::scale_down_after",
        deserialize_with = "duration::at_least_1s"
    )]
    scale_down_after: Duration,
    #[serde(default, deserialize_with = "frozen_rate")]
    frozen_rate_ccu: u64,
}

/// `[instance.driver]`'s `kind`.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum DriverKind {
    Process,
    Exec,
    Http,
}

/// The other keys of `kind = "process"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessFile {
    #[serde(deserialize_with = "argv")]
    command: Vec<String>,
    #[serde(default)]
    cwd: PathBuf,
    #[serde(default = "default::stop_grace", deserialize_with = "duration::any")]
    stop_grace: Duration,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    /// A user name or numeric id.
    user: Option<String>,
    /// A group name or numeric id.
    group: Option<String>,
}

/// The other keys of `kind = "http"`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    url: HttpUrl,
    token_file: Option<PathBuf>,
    #[serde(
        default = "default::request_timeout",
        deserialize_with = "duration::any"
    )]
    request_timeout: Duration,
    #[serde(default = "default::poll_interval", deserialize_with = "duration::any")]
    poll_interval: Duration,
    /// Allow a control plane on a public address (the bearer token then crosses networks in
    /// clear text).
    #[serde(default)]
    allow_public: bool,
}

/// Whether two socket addresses would be the same listener: the same port and the same
/// address, or either is the unspecified address (which takes the port on every address).
#[must_use]
pub fn same_listener(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// Why an instance's `compute` cannot be `addr`, where `key` has the relay listen: the relay
/// would log in to itself. `None` when they are different sockets.
#[must_use]
pub fn compute_on_relay_listener(
    compute: SocketAddr,
    key: &str,
    addr: SocketAddr,
) -> Option<String> {
    same_listener(compute, addr).then(|| {
        format!(
            "{compute} is also {key} ({addr}): the relay would answer its own logins; the \
             compute needs an address of its own"
        )
    })
}

impl Config {
    /// Where the configuration file's instances and endpoints have the relay listen, each
    /// with its key.
    pub fn listen_addresses(&self) -> impl Iterator<Item = (String, SocketAddr)> + '_ {
        let instances = self
            .instances
            .iter()
            .enumerate()
            .filter_map(|(i, inst)| Some((format!("instance[{i}].listen"), inst.listen?)));
        let endpoints = self
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, ep)| (format!("endpoint[{i}].listen"), ep.listen));
        instances.chain(endpoints)
    }
}

/// `#[serde(default = "...")]` takes functions, not constants.
mod default {
    use super::{
        DEFAULT_COMMAND_TIMEOUT, DEFAULT_COMPUTE_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT,
        DEFAULT_IDLE_PAUSE_AFTER, DEFAULT_INSTANCE_MAX_PENDING, DEFAULT_MAX_PENDING_CONNECTIONS,
        DEFAULT_MAX_PENDING_PER_SOURCE, DEFAULT_POLL_INTERVAL, DEFAULT_REQUEST_TIMEOUT,
        DEFAULT_RESUME_TIMEOUT, DEFAULT_STOP_GRACE, Duration,
    };

    pub const fn park() -> bool {
        true
    }
    pub const fn park_after() -> Duration {
        super::DEFAULT_PARK_AFTER
    }
    pub const fn kernel_splice() -> bool {
        true
    }
    /// What pools send: HikariCP's and c3p0's usual test query, SQLAlchemy's and Django's
    /// forms, the Oracle-compatible form.
    pub fn keepalive_queries() -> Vec<String> {
        [
            "SELECT 1",
            "select 1",
            "/* ping */ SELECT 1",
            "SELECT 1 FROM DUAL",
        ]
        .map(String::from)
        .to_vec()
    }
    pub fn etcd_prefix() -> String {
        "/perceptron".into()
    }
    pub const fn max_detached_sessions() -> usize {
        1024
    }

    pub const fn lease_ttl() -> Duration {
        Duration::from_secs(10)
    }
    pub const fn dial_timeout() -> Duration {
        Duration::from_secs(5)
    }
    pub const fn store_request_timeout() -> Duration {
        Duration::from_secs(2)
    }
    pub fn budget_window() -> Duration {
        super::DEFAULT_BUDGET_WINDOW
    }
    pub fn budget_block_for() -> Duration {
        super::DEFAULT_BUDGET_BLOCK_FOR
    }
    pub fn failed_logins_per_source() -> u32 {
        super::DEFAULT_FAILED_LOGINS_PER_SOURCE
    }
    pub fn failed_logins_per_user() -> u32 {
        super::DEFAULT_FAILED_LOGINS_PER_USER
    }
    pub fn wakes_per_source() -> u32 {
        super::DEFAULT_WAKES_PER_SOURCE
    }
    pub fn wakes_per_user() -> u32 {
        super::DEFAULT_WAKES_PER_USER
    }
    pub fn failed_wakes_per_source() -> u32 {
        super::DEFAULT_FAILED_WAKES_PER_SOURCE
    }
    /// HAProxy's `option mysql-check user haproxy`, the documented example.
    pub fn scale_down_after() -> Duration {
        Duration::from_secs(30)
    }

    pub fn health_check_users() -> Vec<String> {
        vec!["haproxy".to_owned()]
    }

    pub fn max_pending_connections() -> usize {
        DEFAULT_MAX_PENDING_CONNECTIONS
    }
    pub fn max_pending_per_source() -> usize {
        DEFAULT_MAX_PENDING_PER_SOURCE
    }
    pub fn instance_max_pending() -> usize {
        DEFAULT_INSTANCE_MAX_PENDING
    }

    pub fn resume_timeout() -> Duration {
        DEFAULT_RESUME_TIMEOUT
    }
    pub fn handshake_timeout() -> Duration {
        DEFAULT_HANDSHAKE_TIMEOUT
    }
    pub fn compute_timeout() -> Duration {
        DEFAULT_COMPUTE_TIMEOUT
    }
    pub fn idle_pause_after() -> Duration {
        DEFAULT_IDLE_PAUSE_AFTER
    }
    pub fn failed_wake_pause_after() -> Duration {
        super::DEFAULT_FAILED_WAKE_PAUSE_AFTER
    }
    pub fn stop_grace() -> Duration {
        DEFAULT_STOP_GRACE
    }
    pub fn command_timeout() -> Duration {
        DEFAULT_COMMAND_TIMEOUT
    }
    pub fn request_timeout() -> Duration {
        DEFAULT_REQUEST_TIMEOUT
    }
    pub fn poll_interval() -> Duration {
        DEFAULT_POLL_INTERVAL
    }
}
