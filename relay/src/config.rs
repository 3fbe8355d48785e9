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

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use crate::capacity::{CapacityConfig, Ccu};
use crate::duration;

/// Default wait for a paused instance to become ready.
pub const DEFAULT_RESUME_TIMEOUT: Duration = Duration::from_secs(15);
/// Default wait for a client's login after the greeting.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default idle period before an instance pauses itself.
pub const DEFAULT_IDLE_PAUSE_AFTER: Duration = Duration::from_secs(300);
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

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// Relay-wide settings.
    pub relay: RelaySettings,
    /// The instances this relay fronts.
    pub instances: Vec<InstanceConfig>,
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
}

/// `[relay.store]`: the instance-state store (see `crate::fleet`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
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

/// One `[[instance]]`.
#[derive(Debug, Clone)]
pub struct InstanceConfig {
    /// Unique name, used in logs and metrics.
    pub name: String,
    /// Where clients connect.
    pub listen: SocketAddr,
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
    /// With it, a pause freezes the compute (its memory and sockets kept, thawed in
    /// milliseconds by the next login) and stops it once it has stayed frozen this long.
    pub stop_after: Option<Duration>,
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
    },
    /// `kind = "exec"`: user commands start, stop and (optionally) report on the compute.
    Exec(ExecSpec),
    /// `kind = "http"`: an external control plane, over HTTP.
    Http(HttpSpec),
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
}

/// A configuration that cannot be used: the file, the key to blame and what is wrong.
#[derive(Debug)]
pub struct ConfigError {
    /// The configuration file.
    pub path: PathBuf,
    /// The key, as a path from the top of the file (`instance[0].resume_timeout`); none when
    /// no single key is to blame (the file cannot be read or is not TOML).
    pub key: Option<String>,
    /// What is wrong.
    pub problem: ConfigProblem,
}

/// What is wrong with a configuration.
#[derive(Debug)]
pub enum ConfigProblem {
    /// A file cannot be read: the configuration itself, or a file one of its keys names.
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not TOML.
    Syntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// The TOML parser's message.
        message: String,
    },
    /// A value that is missing, not allowed here, of the wrong type or out of range.
    Invalid(String),
    /// The file configures no `[[instance]]`.
    NoInstance,
    /// A secret file others can read, or not a small text file.
    Secret(authplugin::key_file::SecretFileError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path.display())?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        match &self.problem {
            ConfigProblem::Read { file, source } if *file == self.path => {
                write!(f, "cannot read: {source}")
            }
            ConfigProblem::Read { file, source } => {
                write!(f, "cannot read {}: {source}", file.display())
            }
            ConfigProblem::Syntax {
                line,
                column,
                message,
            } => write!(f, "line {line}, column {column}: {message}"),
            ConfigProblem::Invalid(message) => f.write_str(message),
            ConfigProblem::NoInstance => f.write_str("no [[instance]] configured"),
            ConfigProblem::Secret(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            ConfigProblem::Read { source, .. } => Some(source),
            ConfigProblem::Secret(e) => Some(e),
            _ => None,
        }
    }
}

impl ConfigError {
    fn invalid(path: &Path, key: String, message: impl fmt::Display) -> Self {
        Self {
            path: path.to_owned(),
            key: Some(key),
            problem: ConfigProblem::Invalid(message.to_string()),
        }
    }
}

/// The file as written: `[relay]` and the `[[instance]]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    relay: RelaySettings,
    #[serde(default)]
    instance: Vec<InstanceFile>,
}

/// One `[[instance]]` as written: final types but for the driver (see the module docs).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceFile {
    #[serde(deserialize_with = "instance_name")]
    name: String,
    #[serde(deserialize_with = "addr")]
    listen: SocketAddr,
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

fn ccu<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Ccu, D::Error> {
    Ccu::parse(f64::deserialize(deserializer)?).map_err(D::Error::custom)
}

fn some_ccu<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Ccu>, D::Error> {
    ccu(deserializer).map(Some)
}

/// The frozen rate in CCUs (any multiple of 0.001 from 0 to 64), kept in thousandths.
fn frozen_rate<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let rate = f64::deserialize(deserializer)?;
    let milli = (rate * 1000.0).round();
    if !(0.0..=64_000.0).contains(&milli) {
        return Err(D::Error::custom(format!(
            "{rate} is not a rate between 0 and 64 CCU"
        )));
    }
    // Within 0..=64,000 (checked above).
    Ok(milli as u64)
}

fn some_positive_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration::positive(deserializer).map(Some)
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

/// Whether `ip` is on a private network or the local host: IPv4 loopback, RFC 1918 and the
/// shared address space 100.64.0.0/10 (carrier and overlay networks); IPv6 loopback and unique
/// local addresses (fc00::/7). Link-local addresses are not (cloud metadata services live
/// there), nor is the unspecified address.
#[must_use]
pub fn is_private_or_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback() || v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_private_or_loopback(v4.into()),
            None => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
        },
    }
}

/// `http://ip:port[/path]`. Plain HTTP to an IP only: the control plane sits on a private
/// network, and no DNS lookup can stall a wake.
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct HttpUrl {
    addr: SocketAddr,
    /// The `Host` header: `ip:port` as written.
    host: String,
    /// `/path` without a trailing slash, or empty.
    base_path: String,
}

impl TryFrom<String> for HttpUrl {
    type Error = BadValue;

    fn try_from(url: String) -> Result<Self, BadValue> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| BadValue::NotHttp(url.clone()))?;
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let addr = parse_addr(host)?;
        let path = path.trim_end_matches('/');
        Ok(Self {
            addr,
            host: host.to_owned(),
            base_path: if path.is_empty() {
                String::new()
            } else {
                format!("/{path}")
            },
        })
    }
}

/// A value serde read but the relay cannot use; the message serde reports at its key.
#[derive(Debug)]
enum BadValue {
    NotAnAddress(String),
    NotHttp(String),
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnAddress(text) => write!(
                f,
                "'{text}' is not an ip:port address (e.g. 127.0.0.1:3306)"
            ),
            Self::NotHttp(url) => write!(f, "'{url}' must start with http://"),
        }
    }
}

fn parse_addr(text: &str) -> Result<SocketAddr, BadValue> {
    text.parse()
        .map_err(|_| BadValue::NotAnAddress(text.to_owned()))
}

fn addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    parse_addr(&String::deserialize(deserializer)?).map_err(D::Error::custom)
}

fn some_addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<SocketAddr>, D::Error> {
    addr(deserializer).map(Some)
}

fn worker_threads<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    let n = i64::deserialize(deserializer)?;
    usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_WORKER_THREADS).contains(n))
        .map(Some)
        .ok_or_else(|| D::Error::custom(format!("{n} is not between 1 and {MAX_WORKER_THREADS}")))
}

fn at_least_one<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let n = i64::deserialize(deserializer)?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| D::Error::custom(format!("{n} must be at least 1")))
}

/// Names go into logs, metric labels and admin URLs, so they are kept to a safe alphabet.
fn instance_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(D::Error::custom(format!(
            "'{name}' must be non-empty A-Z a-z 0-9 - _"
        )));
    }
    Ok(name)
}

/// Health-check user names: non-empty, at most 80 characters (MySQL's limit).
fn health_check_users<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let users = Vec::<String>::deserialize(deserializer)?;
    if let Some(bad) = users
        .iter()
        .find(|u| u.is_empty() || u.chars().count() > 80)
    {
        return Err(D::Error::custom(format!(
            "'{bad}' must be a user name of 1 to 80 characters"
        )));
    }
    Ok(users)
}

/// A program and its arguments: at least the program.
fn argv<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(deserializer)?;
    if argv.is_empty() {
        return Err(D::Error::custom(
            "must name a program, e.g. [\"systemctl\", \"start\", \"mariadb\"]",
        ));
    }
    Ok(argv)
}

fn some_argv<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<String>>, D::Error> {
    let argv = Vec::<String>::deserialize(deserializer)?;
    if argv.is_empty() {
        return Err(D::Error::custom("must name a program or be left out"));
    }
    Ok(Some(argv))
}

/// `#[serde(default = "...")]` takes functions, not constants.
mod default {
    use super::{
        DEFAULT_COMMAND_TIMEOUT, DEFAULT_COMPUTE_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT,
        DEFAULT_IDLE_PAUSE_AFTER, DEFAULT_INSTANCE_MAX_PENDING, DEFAULT_MAX_PENDING_CONNECTIONS,
        DEFAULT_MAX_PENDING_PER_SOURCE, DEFAULT_POLL_INTERVAL, DEFAULT_REQUEST_TIMEOUT,
        DEFAULT_RESUME_TIMEOUT, DEFAULT_STOP_GRACE, Duration,
    };

    pub fn etcd_prefix() -> String {
        "/perceptron".into()
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

impl Config {
    /// Reads and validates a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the offending key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError {
            path: path.to_owned(),
            key: None,
            problem: ConfigProblem::Read {
                file: path.to_owned(),
                source,
            },
        })?;
        Self::parse(&text, path)
    }

    /// Validates configuration text that came from `path`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the offending key.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError {
            path: path.to_owned(),
            key: None,
            problem: syntax(text, &e),
        })?;
        let file: ConfigFile = typed(toml::Value::Table(table), "", path)?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut relay = file.relay;
        relay.state_dir = rebase(base, &relay.state_dir);
        relay.key_file = rebase(base, &relay.key_file);
        relay.admin_token_file = relay.admin_token_file.map(|p| rebase(base, &p));
        if let Some(addr) = relay.admin_listen {
            // Off loopback, anyone who can route to the port could pause instances or read
            // usage: a token is the only thing between them and the API.
            if !addr.ip().is_loopback() && relay.admin_token_file.is_none() {
                return Err(ConfigError::invalid(
                    path,
                    "relay.admin_token_file".into(),
                    format!(
                        "required because relay.admin_listen ({addr}) is not a loopback \
                         address; create a token file (mode 0600, at least 16 characters) or \
                         listen on 127.0.0.1"
                    ),
                ));
            }
        }
        if let StoreSettings::Etcd(etcd) = &mut relay.store {
            for file in [&mut etcd.ca_file, &mut etcd.cert_file, &mut etcd.key_file] {
                *file = file.as_deref().map(|p| rebase(base, p));
            }
            etcd_fits(etcd, path)?;
        }
        let fleet = relay.store != StoreSettings::Local;
        if file.instance.is_empty() {
            return Err(ConfigError {
                path: path.to_owned(),
                key: None,
                problem: ConfigProblem::NoInstance,
            });
        }
        let mut names = HashSet::new();
        let mut listens = HashSet::new();
        let mut instances = Vec::with_capacity(file.instance.len());
        for (i, inst) in file.instance.into_iter().enumerate() {
            let key = |field: &str| format!("instance[{i}].{field}");
            if !names.insert(inst.name.clone()) {
                let message = format!("'{}' is used twice", inst.name);
                return Err(ConfigError::invalid(path, key("name"), message));
            }
            if !listens.insert(inst.listen) {
                let message = format!("{} is used twice", inst.listen);
                return Err(ConfigError::invalid(path, key("listen"), message));
            }
            // Payload v2: a compute refuses a relayed login whose scramble A is older than
            // MAX_LOGIN_AGE_MS when signed, so the longest hold must fit in it.
            let longest_hold =
                inst.handshake_timeout + inst.resume_timeout + 2 * inst.compute_timeout;
            let max_hold = Duration::from_millis(authplugin::payload::MAX_LOGIN_AGE_MS);
            if inst.auth == AuthMode::Dual && longest_hold > max_hold {
                let message = format!(
                    "handshake_timeout + resume_timeout + 2 × compute_timeout is {}, longer than \
                     a relayed login may be held ({}): the compute would refuse it",
                    humantime::format_duration(longest_hold),
                    humantime::format_duration(max_hold)
                );
                return Err(ConfigError::invalid(path, key("resume_timeout"), message));
            }
            if inst.route == RouteMode::Nftables {
                kernel_route_fits(&inst, path, &key)?;
            }
            let capacity = inst
                .capacity
                .map(|c| {
                    if c.min_ccu > c.max_ccu {
                        let message =
                            format!("min_ccu {} is above max_ccu {}", c.min_ccu, c.max_ccu);
                        return Err(ConfigError::invalid(path, key("capacity.min_ccu"), message));
                    }
                    let resume = c.resume_ccu.unwrap_or(c.max_ccu);
                    if resume < c.min_ccu || resume > c.max_ccu {
                        let message = format!(
                            "{resume} is outside min_ccu..max_ccu ({}..{})",
                            c.min_ccu, c.max_ccu
                        );
                        return Err(ConfigError::invalid(
                            path,
                            key("capacity.resume_ccu"),
                            message,
                        ));
                    }
                    Ok(CapacityConfig {
                        min: c.min_ccu,
                        max: c.max_ccu,
                        resume,
                        scale_down_after: c.scale_down_after,
                        frozen_milli_ccu: c.frozen_rate_ccu,
                    })
                })
                .transpose()?;
            let driver = driver(inst.driver, &key("driver"), base, path)?;
            if fleet && matches!(driver, DriverConfig::Process { .. }) {
                let message = "a fleet ([relay.store] kind = \"etcd\") needs a driver every \
                               relay can use, \"exec\" or \"http\": the process driver's compute \
                               is a child of one relay";
                return Err(ConfigError::invalid(path, key("driver.kind"), message));
            }
            if fleet && inst.route == RouteMode::Nftables {
                let message = "the kernel route is not available in a fleet yet (each relay's \
                               table would route on its own machine only); use route = \"pump\"";
                return Err(ConfigError::invalid(path, key("route"), message));
            }
            if inst.stop_after.is_some() && !matches!(driver, DriverConfig::Process { .. }) {
                let message = "the frozen tier needs the process driver (it freezes the \
                               compute's cgroup); other drivers pause by stopping";
                return Err(ConfigError::invalid(path, key("stop_after"), message));
            }
            let tls = inst.tls.map(|t| tls_paths(t, base));
            if inst.require_secure_transport && tls.is_none() {
                let message = "needs [instance.tls]: without a certificate no client could log in";
                return Err(ConfigError::invalid(
                    path,
                    key("require_secure_transport"),
                    message,
                ));
            }
            let compute_ca = inst.compute_ca.map(|p| rebase(base, &p));
            if compute_ca.is_some() && inst.compute_tls != ComputeTlsMode::Verify {
                let message = "only used with compute_tls = \"verify\"";
                return Err(ConfigError::invalid(path, key("compute_ca"), message));
            }
            if inst.compute_tls == ComputeTlsMode::Verify && compute_ca.is_none() {
                let message = "compute_tls = \"verify\" needs compute_ca";
                return Err(ConfigError::invalid(path, key("compute_tls"), message));
            }
            instances.push(InstanceConfig {
                tls,
                require_secure_transport: inst.require_secure_transport,
                compute_tls: inst.compute_tls,
                compute_ca,
                compute_tls_name: inst.compute_tls_name,
                capacity,
                stop_after: inst.stop_after,
                driver,
                name: inst.name,
                listen: inst.listen,
                compute: inst.compute,
                auth: inst.auth,
                proxy_protocol: inst.proxy_protocol,
                resume_timeout: inst.resume_timeout,
                handshake_timeout: inst.handshake_timeout,
                compute_timeout: inst.compute_timeout,
                idle_pause_after: inst.idle_pause_after,
                on_relay_exit: inst.on_relay_exit,
                max_pending_connections: inst.max_pending_connections,
                health_check_users: inst.health_check_users,
                route: inst.route,
            });
        }
        Ok(Self {
            path: path.to_owned(),
            relay,
            instances,
        })
    }
}

/// What `[relay.store] kind = "etcd"` needs: endpoints, a relay id that can be a key segment,
/// and requests bounded well inside the lease.
fn etcd_fits(etcd: &EtcdSettings, path: &Path) -> Result<(), ConfigError> {
    if etcd.endpoints.is_empty() {
        let message = "list at least one etcd endpoint, e.g. [\"http://127.0.0.1:2379\"]";
        return Err(ConfigError::invalid(
            path,
            "relay.store.endpoints".into(),
            message,
        ));
    }
    if etcd.cert_file.is_some() != etcd.key_file.is_some() {
        let (key, message) = if etcd.cert_file.is_some() {
            (
                "key_file",
                "required with cert_file (the client certificate's private key)",
            )
        } else {
            (
                "cert_file",
                "required with key_file (the client certificate)",
            )
        };
        return Err(ConfigError::invalid(
            path,
            format!("relay.store.{key}"),
            message,
        ));
    }
    if etcd.cert_file.is_some() && !etcd.tls() {
        let message = "a client certificate needs TLS: set ca_file to the CA of etcd's server \
                       certificate";
        return Err(ConfigError::invalid(
            path,
            "relay.store.ca_file".into(),
            message,
        ));
    }
    let scheme = if etcd.tls() { "https://" } else { "http://" };
    if let Some(bad) = etcd
        .endpoints
        .iter()
        .find(|e| e.contains("://") && !e.starts_with(scheme))
    {
        let message = if etcd.tls() {
            format!("'{bad}': with ca_file set the connection uses TLS; write https://")
        } else {
            format!("'{bad}': https needs ca_file (the CA of etcd's server certificate)")
        };
        return Err(ConfigError::invalid(
            path,
            "relay.store.endpoints".into(),
            message,
        ));
    }
    if etcd.request_timeout.is_zero() || etcd.request_timeout * 2 > etcd.lease_ttl {
        let message = format!(
            "must be more than zero and at most half of lease_ttl ({}), so a stalled etcd is \
             noticed while this relay's lease still holds",
            humantime::format_duration(etcd.lease_ttl)
        );
        return Err(ConfigError::invalid(
            path,
            "relay.store.request_timeout".into(),
            message,
        ));
    }
    Ok(())
}

/// What `route = "nftables"` needs of an instance's other keys: a DNAT target the kernel
/// can reach in the listen address's family, and no PROXY header (the kernel cannot write
/// one).
fn kernel_route_fits(
    inst: &InstanceFile,
    path: &Path,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if inst.compute.ip().is_unspecified() {
        return Err(ConfigError::invalid(
            path,
            key("compute"),
            format!(
                "{} cannot be a DNAT target: route = \"nftables\" needs the compute's own address",
                inst.compute
            ),
        ));
    }
    if inst.listen.is_ipv4() != inst.compute.is_ipv4() {
        return Err(ConfigError::invalid(
            path,
            key("route"),
            format!(
                "\"nftables\" needs listen ({}) and compute ({}) in the same address family \
                 (both IPv4 or both IPv6)",
                inst.listen, inst.compute
            ),
        ));
    }
    if inst.proxy_protocol {
        return Err(ConfigError::invalid(
            path,
            key("proxy_protocol"),
            "cannot be used with route = \"nftables\": the kernel route forwards packets and \
             cannot send PROXY headers (the compute sees the client's address on direct \
             connections, or the relay host's for a compute on another host)",
        ));
    }
    Ok(())
}

/// `[instance.driver]` (at `key`): `kind` picks the type the other keys are read into.
fn driver(
    mut table: toml::Table,
    key: &str,
    base: &Path,
    path: &Path,
) -> Result<DriverConfig, ConfigError> {
    let kind_key = format!("{key}.kind");
    let kind = table
        .remove("kind")
        .ok_or_else(|| ConfigError::invalid(path, kind_key.clone(), MISSING))?;
    let kind: DriverKind = typed(kind, &kind_key, path)?;
    let rest = toml::Value::Table(table);
    Ok(match kind {
        DriverKind::Process => {
            let process: ProcessFile = typed(rest, key, path)?;
            DriverConfig::Process {
                command: process.command,
                cwd: rebase(base, &process.cwd),
                stop_grace: process.stop_grace,
            }
        }
        DriverKind::Exec => {
            let mut exec: ExecSpec = typed(rest, key, path)?;
            exec.cwd = rebase(base, &exec.cwd);
            DriverConfig::Exec(exec)
        }
        DriverKind::Http => {
            let http: HttpFile = typed(rest, key, path)?;
            if !http.allow_public && !is_private_or_loopback(http.url.addr.ip()) {
                return Err(ConfigError::invalid(
                    path,
                    format!("{key}.url"),
                    format!(
                        "{} is a public address: plain HTTP with a bearer token belongs on a \
                         private network (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) or \
                         loopback; set allow_public = true to use it anyway",
                        http.url.addr.ip()
                    ),
                ));
            }
            let token = http
                .token_file
                .map(|file| {
                    let file = rebase(base, &file);
                    // A bearer token is a secret like the key file: refused if others can
                    // read it.
                    authplugin::read_secret_file(&file)
                        .map(|t| t.trim().to_owned())
                        .map_err(|e| ConfigError {
                            path: path.to_owned(),
                            key: Some(format!("{key}.token_file")),
                            problem: match e {
                                authplugin::key_file::SecretFileError::Io { source, .. } => {
                                    ConfigProblem::Read { file, source }
                                }
                                other => ConfigProblem::Secret(other),
                            },
                        })
                })
                .transpose()?;
            DriverConfig::Http(HttpSpec {
                addr: http.url.addr,
                host: http.url.host,
                base_path: http.url.base_path,
                token,
                request_timeout: http.request_timeout,
                poll_interval: http.poll_interval,
            })
        }
    })
}

/// `[instance.tls]` with its paths resolved (`relay check` and `run` load it before anything
/// listens: see `preflight`).
fn tls_paths(mut tls: TlsSettings, base: &Path) -> TlsSettings {
    tls.cert = rebase(base, &tls.cert);
    tls.key = rebase(base, &tls.key);
    tls.client_ca = tls.client_ca.map(|p| rebase(base, &p));
    tls
}

/// What a missing required key reports.
const MISSING: &str = "required, but missing";

/// Deserialises `value`, found at key path `prefix` (empty for the whole file), into `T`; an
/// error names the key it concerns.
fn typed<T: DeserializeOwned>(
    value: toml::Value,
    prefix: &str,
    path: &Path,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut key = prefix.to_owned();
        let at = e.path().to_string();
        if at != "." {
            key = join(&key, &at);
        }
        let message = e.inner().message().trim();
        // serde reports a missing key on the table that lacks it; name the key itself. (An
        // unknown key is already in the path.)
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            return ConfigError::invalid(path, join(&key, field), MISSING);
        }
        if let Some((_, expected)) = message
            .strip_prefix("unknown field `")
            .and_then(|m| m.split_once("`, "))
        {
            return ConfigError::invalid(path, key, format!("unknown key; {expected}"));
        }
        ConfigError::invalid(path, key, message)
    })
}

fn join(key: &str, field: &str) -> String {
    if key.is_empty() {
        field.to_owned()
    } else {
        format!("{key}.{field}")
    }
}

/// A TOML syntax error, located by line and column: no key can be named in text that does
/// not parse.
fn syntax(text: &str, e: &toml::de::Error) -> ConfigProblem {
    let start = e.span().map_or(0, |s| s.start);
    let before = text.get(..start).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    ConfigProblem::Syntax {
        line: before.matches('\n').count() + 1,
        column: before.get(line_start..).map_or(0, |l| l.chars().count()) + 1,
        message: e.message().trim().replace('\n', "; "),
    }
}

/// A path from the file, resolved against the configuration's directory; an empty one (a
/// working directory left out) is that directory.
fn rebase(base: &Path, p: &Path) -> PathBuf {
    if p.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[relay]
state_dir = "state"
key_file = "perceptron.key"
admin_listen = "127.0.0.1:9100"

[[instance]]
name = "demo"
listen = "127.0.0.1:3306"
compute = "127.0.0.1:13306"
auth = "dual"
resume_timeout = "15s"
handshake_timeout = "10s"
idle_pause_after = "5m"
[instance.driver]
kind = "process"
command = ["server-shim", "run"]
"#;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/perceptron/relay.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_the_documented_example() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.relay.state_dir, Path::new("/etc/perceptron/state"));
        assert_eq!(
            c.relay.key_file,
            Path::new("/etc/perceptron/perceptron.key")
        );
        let i = &c.instances[0];
        assert_eq!(i.name, "demo");
        assert_eq!(i.resume_timeout, Duration::from_secs(15));
        assert_eq!(i.idle_pause_after, Duration::from_secs(300));
        let DriverConfig::Process { command, cwd, .. } = &i.driver else {
            panic!("process driver expected");
        };
        assert_eq!(command, &["server-shim", "run"]);
        assert_eq!(cwd, Path::new("/etc/perceptron"));
        assert_eq!(c.relay.worker_threads, None);
        assert_eq!(
            c.relay.max_pending_connections,
            DEFAULT_MAX_PENDING_CONNECTIONS
        );
        assert_eq!(
            c.relay.max_pending_per_source,
            DEFAULT_MAX_PENDING_PER_SOURCE
        );
        assert_eq!(i.max_pending_connections, DEFAULT_INSTANCE_MAX_PENDING);
        assert_eq!(c.relay.budgets, BudgetSettings::default());
        assert_eq!(c.relay.budgets.failed_logins_per_source, 20);
        assert_eq!(i.health_check_users, ["haproxy"]);
        let tuned = parse(&GOOD.replace(
            "[[instance]]",
            "[relay.budgets]\nwindow = \"10m\"\nwakes_per_user = 0\n\n[[instance]]\nhealth_check_users = []",
        ))
        .unwrap();
        assert_eq!(tuned.relay.budgets.window, Duration::from_secs(600));
        assert_eq!(tuned.relay.budgets.wakes_per_user, 0);
        assert_eq!(
            tuned.relay.budgets.wakes_per_source,
            DEFAULT_WAKES_PER_SOURCE
        );
        assert!(tuned.instances[0].health_check_users.is_empty());
        assert!(
            parse(&GOOD.replace("[[instance]]", "[relay.budgets]\nwakes = 3\n\n[[instance]]"))
                .unwrap_err()
                .contains("relay.budgets.wakes: unknown key")
        );
        assert!(
            parse(&GOOD.replace(
                "[[instance]]",
                "[relay.budgets]\nblock_for = \"0s\"\n\n[[instance]]"
            ))
            .unwrap_err()
            .contains("relay.budgets.block_for: must be at least 1s")
        );
        let one = parse(&GOOD.replace("[relay]", "[relay]\nworker_threads = 1")).unwrap();
        assert_eq!(one.relay.worker_threads, Some(1));
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let cases = [
            (
                GOOD.replace("\"15s\"", "\"15\""),
                "instance[0].resume_timeout",
            ),
            (
                GOOD.replace("127.0.0.1:13306", "localhost"),
                "instance[0].compute",
            ),
            (GOOD.replace("\"dual\"", "\"magic\""), "instance[0].auth"),
            (
                GOOD.replace("\"process\"", "\"k8s\""),
                "instance[0].driver.kind",
            ),
            (
                GOOD.replace("\"5m\"", "\"0s\""),
                "instance[0].idle_pause_after",
            ),
            (
                GOOD.replace("command = [\"server-shim\", \"run\"]", "command = []"),
                "instance[0].driver.command",
            ),
            (
                GOOD.replace("handshake_timeout", "handshake_timout"),
                "handshake_timout",
            ),
            (
                GOOD.replace("[relay]", "[relay]\nworker_threads = 0"),
                "relay.worker_threads",
            ),
            (
                GOOD.replace("[relay]", "[relay]\nworker_threads = -2"),
                "relay.worker_threads",
            ),
        ];
        for (text, key) in cases {
            let e = parse(&text).unwrap_err();
            assert!(e.starts_with("/etc/perceptron/relay.toml: "), "{e}");
            assert!(e.contains(key), "expected {key} in: {e}");
        }
    }

    #[test]
    fn parses_exec_and_http_drivers() {
        let exec = GOOD.replace(
            "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
            "kind = \"exec\"\nstart = [\"systemctl\", \"start\", \"db\"]\nstop = [\"systemctl\", \"stop\", \"db\"]\ncommand_timeout = \"20s\"",
        );
        let c = parse(&exec).unwrap();
        let DriverConfig::Exec(spec) = &c.instances[0].driver else {
            panic!("exec driver expected");
        };
        assert_eq!(spec.start, ["systemctl", "start", "db"]);
        assert_eq!(spec.status, None);
        assert_eq!(spec.command_timeout, Duration::from_secs(20));
        let no_stop = exec.replace("stop = [\"systemctl\", \"stop\", \"db\"]\n", "");
        assert!(
            parse(&no_stop)
                .unwrap_err()
                .contains("instance[0].driver.stop")
        );

        let http = GOOD.replace(
            "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
            "kind = \"http\"\nurl = \"http://10.0.0.5:8080/v1/\"",
        );
        let c = parse(&http).unwrap();
        let DriverConfig::Http(spec) = &c.instances[0].driver else {
            panic!("http driver expected");
        };
        assert_eq!(spec.addr, "10.0.0.5:8080".parse().unwrap());
        assert_eq!(spec.base_path, "/v1");
        let bad = http.replace("http://10.0.0.5:8080/v1/", "https://cp.example/v1");
        assert!(parse(&bad).unwrap_err().contains("instance[0].driver.url"));
    }

    #[test]
    fn refuses_a_public_http_control_plane_unless_allowed() {
        let http = |url: &str, extra: &str| {
            GOOD.replace(
                "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
                &format!("kind = \"http\"\nurl = \"{url}\"{extra}"),
            )
        };
        for url in [
            "http://10.0.0.5:8080",
            "http://172.31.0.1:80",
            "http://192.168.1.1:80",
            "http://100.100.1.1:80",
            "http://127.0.0.1:80",
            "http://[::1]:80",
            "http://[fd00::5]:80",
        ] {
            parse(&http(url, "")).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        for url in [
            "http://8.8.8.8:80",
            "http://172.32.0.1:80",
            "http://169.254.169.254:80",
            "http://0.0.0.0:80",
            "http://[2001:db8::1]:80",
            "http://[::ffff:8.8.8.8]:80",
        ] {
            let e = parse(&http(url, "")).unwrap_err();
            assert!(
                e.contains("instance[0].driver.url: ") && e.contains("is a public address"),
                "{url}: {e}"
            );
        }
        let c = parse(&http("http://8.8.8.8:80", "\nallow_public = true")).unwrap();
        assert!(matches!(c.instances[0].driver, DriverConfig::Http(_)));
    }

    #[test]
    fn refuses_a_non_loopback_admin_address_without_a_token_file() {
        for addr in ["0.0.0.0:9100", "10.0.0.5:9100", "[::]:9100"] {
            assert_eq!(
                error_after("127.0.0.1:9100", addr),
                format!(
                    "/etc/perceptron/relay.toml: relay.admin_token_file: required because \
                     relay.admin_listen ({addr}) is not a loopback address; create a token file \
                     (mode 0600, at least 16 characters) or listen on 127.0.0.1"
                )
            );
        }
        let with_token = GOOD.replace(
            "admin_listen = \"127.0.0.1:9100\"",
            "admin_listen = \"0.0.0.0:9100\"\nadmin_token_file = \"admin.token\"",
        );
        let c = parse(&with_token).unwrap();
        assert_eq!(
            c.relay.admin_token_file.as_deref(),
            Some(Path::new("/etc/perceptron/admin.token"))
        );
        parse(&GOOD.replace("127.0.0.1:9100", "[::1]:9100")).unwrap();
    }

    #[test]
    fn parses_the_route_and_the_nftables_table() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.instances[0].route, RouteMode::Pump, "the default");
        assert_eq!(c.relay.nftables_table, None);
        let c = parse(
            &GOOD
                .replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"nftables\"")
                .replace(
                    "admin_listen = \"127.0.0.1:9100\"",
                    "admin_listen = \"127.0.0.1:9100\"\nnftables_table = \"perceptron_ci_7\"",
                ),
        )
        .unwrap();
        assert_eq!(c.instances[0].route, RouteMode::Nftables);
        assert_eq!(c.relay.nftables_table.as_deref(), Some("perceptron_ci_7"));
    }

    #[test]
    fn rejects_kernel_routes_it_cannot_install() {
        let routed = GOOD.replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"nftables\"");
        let file = "/etc/perceptron/relay.toml";
        let cases = [
            (
                routed.replace("\"127.0.0.1:13306\"", "\"[::1]:13306\""),
                "instance[0].route: \"nftables\" needs listen (127.0.0.1:3306) and compute \
                 ([::1]:13306) in the same address family (both IPv4 or both IPv6)",
            ),
            (
                routed.replace("\"127.0.0.1:13306\"", "\"0.0.0.0:13306\""),
                "instance[0].compute: 0.0.0.0:13306 cannot be a DNAT target: route = \
                 \"nftables\" needs the compute's own address",
            ),
            (
                routed.replace("auth = \"dual\"", "auth = \"dual\"\nproxy_protocol = true"),
                "instance[0].proxy_protocol: cannot be used with route = \"nftables\": the \
                 kernel route forwards packets and cannot send PROXY headers (the compute sees \
                 the client's address on direct connections, or the relay host's for a \
                 compute on another host)",
            ),
            (
                GOOD.replace("auth = \"dual\"", "auth = \"dual\"\nroute = \"iptables\""),
                "instance[0].route: unknown variant `iptables`, expected `pump` or `nftables`",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(&text).unwrap_err(), format!("{file}: {want}"));
        }
    }

    #[test]
    fn rejects_duplicate_names_and_listeners() {
        let two = format!("{GOOD}\n{}", &GOOD[GOOD.find("[[instance]]").unwrap()..]);
        assert!(
            parse(&two)
                .unwrap_err()
                .contains("instance[1].name: 'demo' is used twice")
        );
        let two = two.replacen("name = \"demo\"", "name = \"other\"", 1);
        assert!(parse(&two).unwrap_err().contains("instance[1].listen"));
    }

    #[test]
    fn a_fleet_store_is_parsed_and_checked() {
        let exec = "kind = \"exec\"\nstart = [\"up\"]\nstop = [\"down\"]\n";
        let store = "\n[relay.store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n\
                     relay_id = \"relay-a\"\n";
        let fleet = |store: &str| {
            GOOD.replace(
                "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]\n",
                exec,
            )
            .replacen("[[instance]]", &format!("{store}\n[[instance]]"), 1)
        };
        let c = parse(&fleet(store)).unwrap();
        let StoreSettings::Etcd(etcd) = &c.relay.store else {
            panic!("etcd expected");
        };
        assert_eq!(etcd.relay_id, "relay-a");
        assert_eq!(etcd.prefix, "/perceptron");
        assert_eq!(etcd.lease_ttl, Duration::from_secs(10));
        assert_eq!(parse(GOOD).unwrap().relay.store, StoreSettings::Local);
        let tls = store.replace("http://", "https://")
            + "ca_file = \"etcd-ca.pem\"\ncert_file = \"relay.pem\"\nkey_file = \"relay-key.pem\"\n";
        let c = parse(&fleet(&tls)).unwrap();
        let StoreSettings::Etcd(etcd) = &c.relay.store else {
            panic!("etcd expected");
        };
        // Relative to the configuration file, like every other path.
        assert_eq!(
            etcd.key_file.as_deref(),
            Some(Path::new("/etc/perceptron/relay-key.pem"))
        );
        assert!(etcd.tls());
        let file = "/etc/perceptron/relay.toml";
        for (text, message) in [
            (
                fleet(&store.replace("[\"http://127.0.0.1:2379\"]", "[]")),
                "relay.store.endpoints: list at least one etcd endpoint",
            ),
            (
                fleet(&format!(
                    "{store}lease_ttl = \"2s\"\nrequest_timeout = \"1500ms\"\n"
                )),
                "relay.store.request_timeout: must be more than zero and at most half of lease_ttl",
            ),
            (
                GOOD.replacen("[[instance]]", &format!("{store}\n[[instance]]"), 1),
                "instance[0].driver.kind: a fleet",
            ),
            (
                fleet(&format!("{store}cert_file = \"relay.pem\"\n")),
                "relay.store.key_file: required with cert_file",
            ),
            (
                fleet(&format!(
                    "{store}cert_file = \"relay.pem\"\nkey_file = \"relay-key.pem\"\n"
                )),
                "relay.store.ca_file: a client certificate needs TLS",
            ),
            (
                fleet(&store.replace("http://", "https://")),
                "relay.store.endpoints: 'https://127.0.0.1:2379': https needs ca_file",
            ),
            (
                fleet(&format!("{store}ca_file = \"etcd-ca.pem\"\n")),
                "relay.store.endpoints: 'http://127.0.0.1:2379': with ca_file set",
            ),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.starts_with(&format!("{file}: {message}")), "{e}");
        }
    }

    /// `GOOD` with `from` replaced by `to` (which must be there), or the error it gives.
    fn error_after(from: &str, to: &str) -> String {
        assert!(GOOD.contains(from), "{from}");
        parse(&GOOD.replacen(from, to, 1)).unwrap_err()
    }

    #[test]
    fn error_messages_name_the_file_and_the_key() {
        let file = "/etc/perceptron/relay.toml";
        let two = format!("{GOOD}\n{}", &GOOD[GOOD.find("[[instance]]").unwrap()..]);
        let cases = [
            // unknown key
            (
                error_after("handshake_timeout", "handshake_timout"),
                "instance[0].handshake_timout: unknown key; expected one of `name`, `listen`, \
                 `compute`, `auth`, `proxy_protocol`, `resume_timeout`, `handshake_timeout`, \
                 `compute_timeout`, `idle_pause_after`, `on_relay_exit`, \
                 `max_pending_connections`, `health_check_users`, `capacity`, `stop_after`, `route`, `driver`, `tls`, \
                 `require_secure_transport`, `compute_tls`, `compute_ca`, `compute_tls_name`",
            ),
            (
                error_after("[relay]", "[relay]\ncolour = \"blue\""),
                "relay.colour: unknown key; expected one of `state_dir`, `key_file`, \
                 `admin_listen`, `admin_token_file`, `worker_threads`, \
                 `max_pending_connections`, `max_pending_per_source`, `budgets`, `nftables_table`, `store`",
            ),
            // a key of another driver kind
            (
                error_after(
                    "kind = \"process\"",
                    "kind = \"process\"\nurl = \"http://1.2.3.4:1\"",
                ),
                "instance[0].driver.url: unknown key; expected one of `command`, `cwd`, \
                 `stop_grace`",
            ),
            // wrong type
            (
                error_after("\"15s\"", "15"),
                "instance[0].resume_timeout: invalid type: integer `15`, expected a string",
            ),
            (
                error_after("[relay]", "[relay]\nworker_threads = \"4\""),
                "relay.worker_threads: invalid type: string \"4\", expected i64",
            ),
            // bad duration, and one under its minimum
            (
                error_after("\"15s\"", "\"15\""),
                "instance[0].resume_timeout: '15' has no unit (use e.g. 500ms, 15s, 5m, 1h)",
            ),
            (
                error_after("\"10s\"", "\"0ms\""),
                "instance[0].handshake_timeout: must be greater than zero",
            ),
            (
                error_after("\"5m\"", "\"999ms\""),
                "instance[0].idle_pause_after: must be at least 1s",
            ),
            // bad address
            (
                error_after("127.0.0.1:13306", "localhost"),
                "instance[0].compute: 'localhost' is not an ip:port address (e.g. 127.0.0.1:3306)",
            ),
            (
                error_after("127.0.0.1:9100", "127.0.0.1"),
                "relay.admin_listen: '127.0.0.1' is not an ip:port address (e.g. 127.0.0.1:3306)",
            ),
            // duplicates
            (
                parse(&two).unwrap_err(),
                "instance[1].name: 'demo' is used twice",
            ),
            (
                parse(&two.replacen("name = \"demo\"", "name = \"other\"", 1)).unwrap_err(),
                "instance[1].listen: 127.0.0.1:3306 is used twice",
            ),
            // missing required key
            (
                error_after("listen = \"127.0.0.1:3306\"\n", ""),
                "instance[0].listen: required, but missing",
            ),
            (
                error_after("key_file = \"perceptron.key\"\n", ""),
                "relay.key_file: required, but missing",
            ),
            (
                error_after("kind = \"process\"\n", ""),
                "instance[0].driver.kind: required, but missing",
            ),
            // enums
            (
                error_after("\"process\"", "\"k8s\""),
                "instance[0].driver.kind: unknown variant `k8s`, expected one of `process`, \
                 `exec`, `http`",
            ),
            (
                error_after("\"dual\"", "\"magic\""),
                "instance[0].auth: unknown variant `magic`, expected `dual` or `switch`",
            ),
            // range and alphabet
            (
                error_after("[relay]", "[relay]\nworker_threads = 257"),
                "relay.worker_threads: 257 is not between 1 and 256",
            ),
            (
                error_after("[relay]", "[relay]\nmax_pending_per_source = 0"),
                "relay.max_pending_per_source: 0 must be at least 1",
            ),
            (
                error_after(
                    "idle_pause_after = \"5m\"",
                    "idle_pause_after = \"5m\"\nmax_pending_connections = -1",
                ),
                "instance[0].max_pending_connections: -1 must be at least 1",
            ),
            (
                error_after("\"demo\"", "\"my db\""),
                "instance[0].name: 'my db' must be non-empty A-Z a-z 0-9 - _",
            ),
            // capacity
            (
                error_after(
                    "idle_pause_after = \"5m\"",
                    "idle_pause_after = \"5m\"\ncapacity = { min_ccu = 0.3, max_ccu = 1 }",
                ),
                "instance[0].capacity.min_ccu: 0.3 is not a positive multiple of 0.25 CCU",
            ),
            (
                error_after(
                    "idle_pause_after = \"5m\"",
                    "idle_pause_after = \"5m\"\ncapacity = { min_ccu = 2, max_ccu = 1 }",
                ),
                "instance[0].capacity.min_ccu: min_ccu 2 is above max_ccu 1",
            ),
            (
                error_after(
                    "idle_pause_after = \"5m\"",
                    "idle_pause_after = \"5m\"\ncapacity = { min_ccu = 1, max_ccu = 2, \
                     resume_ccu = 4 }",
                ),
                "instance[0].capacity.resume_ccu: 4 is outside min_ccu..max_ccu (1..2)",
            ),
            (
                error_after(
                    "idle_pause_after = \"5m\"",
                    "idle_pause_after = \"5m\"\nstop_after = \"0s\"",
                ),
                "instance[0].stop_after: must be greater than zero",
            ),
            (
                error_after("[\"server-shim\", \"run\"]", "[]"),
                "instance[0].driver.command: must name a program, e.g. [\"systemctl\", \
                 \"start\", \"mariadb\"]",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, format!("{file}: {want}"));
        }
    }

    #[test]
    fn errors_without_a_key_say_where_or_what() {
        assert_eq!(
            error_after("[relay]", "[relay"),
            "/etc/perceptron/relay.toml: line 2, column 7: invalid table header; expected `.`, `]`"
        );
        assert_eq!(
            parse(&GOOD[..GOOD.find("[[instance]]").unwrap()]).unwrap_err(),
            "/etc/perceptron/relay.toml: no [[instance]] configured"
        );
        let missing = Path::new("/nonexistent/relay.toml");
        let e = Config::load(missing).unwrap_err();
        assert!(matches!(e.problem, ConfigProblem::Read { .. }));
        assert!(
            e.to_string()
                .starts_with("/nonexistent/relay.toml: cannot read: "),
            "{e}"
        );
    }

    #[test]
    fn rejects_an_unreadable_token_file_naming_its_key() {
        let http = GOOD.replace(
            "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
            "kind = \"http\"\nurl = \"http://10.0.0.5:8080\"\ntoken_file = \"no-such.token\"",
        );
        let e = Config::parse(&http, Path::new("/nonexistent/relay.toml")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("instance[0].driver.token_file"));
        assert!(
            e.to_string().starts_with(
                "/nonexistent/relay.toml: instance[0].driver.token_file: cannot read \
                 /nonexistent/no-such.token: "
            ),
            "{e}"
        );
    }

    #[test]
    fn tls_paths_are_resolved_and_its_errors_name_the_key() {
        let pki = crate::tls::tests::Pki::new("config");
        let dir = pki.settings.cert.parent().unwrap().to_owned();
        let config_path = dir.join("relay.toml");
        let with =
            |extra: &str| GOOD.replace("[instance.driver]", &format!("{extra}\n[instance.driver]"));
        let tls = "require_secure_transport = true\n[instance.tls]\ncert = \"server.pem\"\n\
                   key = \"server.key\"\nclient_ca = \"ca.pem\"\nmin_version = \"1.3\"";
        let c = Config::parse(&with(tls), &config_path).unwrap();
        let inst = &c.instances[0];
        assert!(inst.require_secure_transport);
        let t = inst.tls.as_ref().unwrap();
        assert_eq!(t.cert, dir.join("server.pem"));
        assert_eq!(t.client_ca.as_deref(), Some(dir.join("ca.pem").as_path()));
        assert_eq!(t.min_version, crate::config::TlsVersion::Tls13);

        let e = Config::parse(&with("[instance.tls]\ncert = \"server.pem\""), &config_path)
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("instance[0].tls.key"));
        assert!(e.to_string().ends_with("required, but missing"), "{e}");

        let e = Config::parse(&with("require_secure_transport = true"), &config_path).unwrap_err();
        assert_eq!(
            e.key.as_deref(),
            Some("instance[0].require_secure_transport")
        );
        let c = Config::parse(
            &with("compute_tls = \"verify\"\ncompute_ca = \"ca.pem\"\ncompute_tls_name = \"db.internal\""),
            &config_path,
        )
        .unwrap();
        assert_eq!(c.instances[0].compute_tls, ComputeTlsMode::Verify);
        assert_eq!(
            c.instances[0].compute_ca.as_deref(),
            Some(dir.join("ca.pem").as_path())
        );
        let e = Config::parse(&with("compute_tls = \"verify\""), &config_path).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("instance[0].compute_tls"));
        assert!(e.to_string().ends_with("needs compute_ca"), "{e}");
        let e = Config::parse(&with("compute_ca = \"ca.pem\""), &config_path).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("instance[0].compute_ca"));
        let e = Config::parse(&with("compute_tls = \"sometimes\""), &config_path).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("instance[0].compute_tls"));
    }

    #[test]
    fn refuses_a_token_file_others_can_read() {
        use std::os::unix::fs::PermissionsExt as _;
        let file = std::env::temp_dir().join(format!("relay-config-{}.token", std::process::id()));
        std::fs::write(&file, "a-bearer-token-of-some-length").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let http = GOOD.replace(
            "kind = \"process\"\ncommand = [\"server-shim\", \"run\"]",
            &format!(
                "kind = \"http\"\nurl = \"http://10.0.0.5:8080\"\ntoken_file = \"{}\"",
                file.display()
            ),
        );
        let e = Config::parse(&http, Path::new("/nonexistent/relay.toml")).unwrap_err();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(e.key.as_deref(), Some("instance[0].driver.token_file"));
        assert!(matches!(e.problem, ConfigProblem::Secret(_)), "{e}");
        assert!(e.to_string().contains("has mode 0644"), "{e}");
    }

    #[test]
    fn refuses_a_dual_instance_that_could_hold_a_login_too_long() {
        let text = GOOD.replace("resume_timeout = \"15s\"", "resume_timeout = \"11m\"");
        let e = parse(&text).unwrap_err();
        assert!(e.contains("instance[0].resume_timeout"), "{e}");
        assert!(
            e.contains("longer than a relayed login may be held (10m)"),
            "{e}"
        );
    }

    #[test]
    fn loads_every_example() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
                assert!(!config.instances.is_empty(), "{}", path.display());
                loaded += 1;
            }
        }
        assert!(loaded >= 2, "examples not found in {}", dir.display());
    }

    #[test]
    fn parses_the_readme_example() {
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
        let text = std::fs::read_to_string(&readme).unwrap();
        let section = &text[text.find("## Configuration").unwrap()..];
        let start = section.find("```toml\n").unwrap() + "```toml\n".len();
        let end = start + section[start..].find("```").unwrap();
        parse(&section[start..end]).unwrap();
    }
}
