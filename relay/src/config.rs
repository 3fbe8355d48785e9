//! The relay's TOML configuration, validated at start-up. Every error names the file and the
//! key (`instance[0].resume_timeout`), so a typo is found in one read.
//!
//! Relative paths (state directory, key file, driver working directory) are resolved against
//! the directory holding the configuration file, so a config works from any current directory.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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
#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Where learnt compute profiles (and later the usage ledger) live.
    pub state_dir: PathBuf,
    /// The perceptron key ring; the newest key signs relayed logins.
    pub key_file: PathBuf,
    /// The admin API address; none disables the API.
    pub admin_listen: Option<SocketAddr>,
    /// A file holding the bearer token admin requests must carry (mode 0600); none means
    /// no token (keep `admin_listen` on loopback then).
    pub admin_token_file: Option<PathBuf>,
    /// Threads that run connections; none means one per CPU core.
    pub worker_threads: Option<usize>,
}

/// The most `relay.worker_threads` accepts.
pub const MAX_WORKER_THREADS: usize = 256;

/// How the compute verifies a login the relay completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// The compute verifies the relayed-auth payload (server-shim).
    Dual,
    /// A stock MySQL/MariaDB: after the wake the client is switched once to the server's own
    /// plugin and scramble, and the rest of the login is relayed.
    Switch,
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
    /// How the compute is started and stopped.
    pub driver: DriverConfig,
}

/// `instance.on_relay_exit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRelayExit {
    /// Stop the compute (the default: a relay that goes away takes its computes with it).
    Pause,
    /// Leave it running; the next relay adopts it without a restart or double billing.
    Leave,
}

/// `[instance.driver]`.
#[derive(Debug, Clone)]
pub enum DriverConfig {
    /// Spawn `command` as a child process; ready when `compute` greets.
    Process {
        /// Program and arguments.
        command: Vec<String>,
        /// The child's working directory.
        cwd: PathBuf,
        /// SIGTERM → SIGKILL grace.
        stop_grace: Duration,
    },
    /// User commands start, stop and (optionally) report on the compute.
    Exec(ExecSpec),
    /// An external control plane, over HTTP.
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
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// Starts the compute; must return once it is starting.
    pub start: Vec<String>,
    /// Stops the compute.
    pub stop: Vec<String>,
    /// Exit status 0 means running; without it the relay probes the compute's address.
    pub status: Option<Vec<String>>,
    /// The commands' working directory.
    pub cwd: PathBuf,
    /// Bound on each command.
    pub command_timeout: Duration,
    /// How often a running compute is checked.
    pub poll_interval: Duration,
}

/// A configuration that cannot be used, with the file and key it concerns.
#[derive(Debug)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, starting with the key.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    relay: RawRelay,
    #[serde(default)]
    instance: Vec<RawInstance>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    state_dir: String,
    key_file: String,
    admin_listen: Option<String>,
    admin_token_file: Option<String>,
    worker_threads: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    name: String,
    listen: String,
    compute: String,
    #[serde(default = "default_auth")]
    auth: String,
    #[serde(default)]
    proxy_protocol: bool,
    resume_timeout: Option<String>,
    handshake_timeout: Option<String>,
    compute_timeout: Option<String>,
    idle_pause_after: Option<String>,
    on_relay_exit: Option<String>,
    driver: RawDriver,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    kind: String,
    #[serde(default)]
    command: Vec<String>,
    cwd: Option<String>,
    stop_grace: Option<String>,
    #[serde(default)]
    start: Vec<String>,
    #[serde(default)]
    stop: Vec<String>,
    status: Option<Vec<String>>,
    command_timeout: Option<String>,
    poll_interval: Option<String>,
    url: Option<String>,
    token_file: Option<String>,
    request_timeout: Option<String>,
}

fn default_auth() -> String {
    "dual".into()
}

impl Config {
    /// Reads and validates a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the offending key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_owned(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, path)
    }

    /// Validates configuration text that came from `path`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the offending key.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError {
            path: path.to_owned(),
            message,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        let resolve = |p: &str| base.join(p);
        let relay = RelaySettings {
            state_dir: resolve(&raw.relay.state_dir),
            key_file: resolve(&raw.relay.key_file),
            admin_listen: raw
                .relay
                .admin_listen
                .as_deref()
                .map(|a| parse_addr(a).map_err(|m| err(format!("relay.admin_listen: {m}"))))
                .transpose()?,
            admin_token_file: raw.relay.admin_token_file.as_deref().map(resolve),
            worker_threads: raw
                .relay
                .worker_threads
                .map(|n| {
                    usize::try_from(n)
                        .ok()
                        .filter(|n| (1..=MAX_WORKER_THREADS).contains(n))
                        .ok_or_else(|| {
                            err(format!(
                                "relay.worker_threads: {n} is not between 1 and {MAX_WORKER_THREADS}"
                            ))
                        })
                })
                .transpose()?,
        };
        if raw.instance.is_empty() {
            return Err(err("no [[instance]] configured".into()));
        }
        let mut names = HashSet::new();
        let mut listens = HashSet::new();
        let mut instances = Vec::new();
        for (i, inst) in raw.instance.into_iter().enumerate() {
            let key = |field: &str| format!("instance[{i}].{field}");
            let bad = |field: &str, m: String| err(format!("{}: {m}", key(field)));
            if inst.name.is_empty()
                || !inst
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(bad(
                    "name",
                    format!("'{}' must be non-empty A-Z a-z 0-9 - _", inst.name),
                ));
            }
            if !names.insert(inst.name.clone()) {
                return Err(bad("name", format!("'{}' is used twice", inst.name)));
            }
            let listen = parse_addr(&inst.listen).map_err(|m| bad("listen", m))?;
            if !listens.insert(listen) {
                return Err(bad("listen", format!("{listen} is used twice")));
            }
            let compute = parse_addr(&inst.compute).map_err(|m| bad("compute", m))?;
            let auth = match inst.auth.as_str() {
                "dual" => AuthMode::Dual,
                "switch" => AuthMode::Switch,
                other => {
                    return Err(bad(
                        "auth",
                        format!("'{other}' is not one of \"dual\", \"switch\""),
                    ));
                }
            };
            let dur = |field: &str, v: &Option<String>, default: Duration| {
                v.as_deref()
                    .map(duration::parse)
                    .transpose()
                    .map(|d| d.unwrap_or(default))
                    .map_err(|m| bad(field, m.to_string()))
            };
            let resume_timeout = dur(
                "resume_timeout",
                &inst.resume_timeout,
                DEFAULT_RESUME_TIMEOUT,
            )?;
            let handshake_timeout = dur(
                "handshake_timeout",
                &inst.handshake_timeout,
                DEFAULT_HANDSHAKE_TIMEOUT,
            )?;
            let compute_timeout = dur(
                "compute_timeout",
                &inst.compute_timeout,
                DEFAULT_COMPUTE_TIMEOUT,
            )?;
            let idle_pause_after = dur(
                "idle_pause_after",
                &inst.idle_pause_after,
                DEFAULT_IDLE_PAUSE_AFTER,
            )?;
            for (field, d) in [
                ("resume_timeout", resume_timeout),
                ("handshake_timeout", handshake_timeout),
                ("compute_timeout", compute_timeout),
            ] {
                if d.is_zero() {
                    return Err(bad(field, "must be greater than zero".into()));
                }
            }
            if idle_pause_after < Duration::from_secs(1) {
                return Err(bad("idle_pause_after", "must be at least 1s".into()));
            }
            let on_relay_exit = match inst.on_relay_exit.as_deref() {
                None | Some("pause") => OnRelayExit::Pause,
                Some("leave") => OnRelayExit::Leave,
                Some(other) => {
                    return Err(bad(
                        "on_relay_exit",
                        format!("'{other}' is not one of \"pause\", \"leave\""),
                    ));
                }
            };
            let driver = match inst.driver.kind.as_str() {
                "process" => {
                    if inst.driver.command.is_empty() {
                        return Err(bad(
                            "driver.command",
                            "must name a program, e.g. [\"server-shim\", \"run\", ...]".into(),
                        ));
                    }
                    DriverConfig::Process {
                        command: inst.driver.command,
                        cwd: inst
                            .driver
                            .cwd
                            .as_deref()
                            .map_or_else(|| base.clone(), resolve),
                        stop_grace: dur(
                            "driver.stop_grace",
                            &inst.driver.stop_grace,
                            DEFAULT_STOP_GRACE,
                        )?,
                    }
                }
                "exec" => {
                    for (field, argv) in [
                        ("driver.start", &inst.driver.start),
                        ("driver.stop", &inst.driver.stop),
                    ] {
                        if argv.is_empty() {
                            return Err(bad(
                                field,
                                "must name a program, e.g. [\"systemctl\", \"start\", \"mariadb\"]"
                                    .into(),
                            ));
                        }
                    }
                    if inst.driver.status.as_ref().is_some_and(Vec::is_empty) {
                        return Err(bad(
                            "driver.status",
                            "must name a program or be left out".into(),
                        ));
                    }
                    DriverConfig::Exec(ExecSpec {
                        start: inst.driver.start,
                        stop: inst.driver.stop,
                        status: inst.driver.status,
                        cwd: inst
                            .driver
                            .cwd
                            .as_deref()
                            .map_or_else(|| base.clone(), resolve),
                        command_timeout: dur(
                            "driver.command_timeout",
                            &inst.driver.command_timeout,
                            Duration::from_secs(60),
                        )?,
                        poll_interval: dur(
                            "driver.poll_interval",
                            &inst.driver.poll_interval,
                            Duration::from_secs(5),
                        )?,
                    })
                }
                "http" => {
                    let url = inst.driver.url.as_deref().ok_or_else(|| {
                        bad(
                            "driver.url",
                            "required for kind = \"http\", e.g. \"http://10.0.0.5:8080/v1\"".into(),
                        )
                    })?;
                    let (addr, host, base_path) =
                        parse_http_url(url).map_err(|m| bad("driver.url", m))?;
                    let token = inst
                        .driver
                        .token_file
                        .as_deref()
                        .map(|p| {
                            std::fs::read_to_string(resolve(p))
                                .map(|t| t.trim().to_owned())
                                .map_err(|e| bad("driver.token_file", format!("{p}: {e}")))
                        })
                        .transpose()?;
                    DriverConfig::Http(HttpSpec {
                        addr,
                        host,
                        base_path,
                        token,
                        request_timeout: dur(
                            "driver.request_timeout",
                            &inst.driver.request_timeout,
                            Duration::from_secs(30),
                        )?,
                        poll_interval: dur(
                            "driver.poll_interval",
                            &inst.driver.poll_interval,
                            Duration::from_secs(5),
                        )?,
                    })
                }
                other => {
                    return Err(bad(
                        "driver.kind",
                        format!(
                            "'{other}' is not supported (supported: \"process\", \"exec\", \"http\")"
                        ),
                    ));
                }
            };
            instances.push(InstanceConfig {
                name: inst.name,
                listen,
                compute,
                auth,
                proxy_protocol: inst.proxy_protocol,
                resume_timeout,
                handshake_timeout,
                compute_timeout,
                idle_pause_after,
                on_relay_exit,
                driver,
            });
        }
        Ok(Self {
            path: path.to_owned(),
            relay,
            instances,
        })
    }
}

/// `http://ip:port[/path]` → (address, host header, path prefix). Plain HTTP to an IP only:
/// the control plane sits on a private network, and no DNS lookup can stall a wake.
fn parse_http_url(url: &str) -> Result<(SocketAddr, String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("'{url}' must start with http://"))?;
    let (hostport, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let addr = parse_addr(hostport)?;
    let path = path.trim_end_matches('/');
    let base = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    Ok((addr, hostport.to_owned(), base))
}

fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("'{text}' is not an ip:port address (e.g. 127.0.0.1:3306)"))
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
}
