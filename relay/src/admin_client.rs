//! The CLI side of the admin API: `relay status | pause | resume | usage | blocks`. One request per
//! command through [`crate::http_client`] (hyper), on a small runtime of its own.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::{Method, StatusCode};

use crate::admin_api::{
    BlockJson, ClearedJson, ErrorJson, FleetJson, InstanceJson, RelayJson, RemovedJson, UsageJson,
    WaitingJson,
};
use crate::http_client::{self, HttpError};

/// Default admin address.
pub const DEFAULT_ADMIN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9100,
));

/// Why a CLI command failed; its `Display` is the message for the user.
#[derive(Debug)]
pub enum AdminError {
    /// The configuration named by `--config` is unusable.
    Config(crate::config::ConfigError),
    /// The token file cannot be read, or group or others can access it.
    TokenFile(authplugin::SecretFileError),
    /// The CLI's own runtime could not start.
    Runtime(std::io::Error),
    /// The admin API did not answer.
    Unreachable {
        /// Where it was asked.
        addr: SocketAddr,
        /// Why.
        source: HttpError,
    },
    /// The admin API answered with an error.
    Refused {
        /// The status.
        status: StatusCode,
        /// The API's `error` field, or the body.
        message: String,
    },
    /// The answer is not the JSON the command expects.
    BadAnswer(serde_json::Error),
    /// A `--from` or `--to` value is not a time.
    BadTime {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        source: crate::timefmt::TimeError,
    },
    /// `--from` is after `--to`, or the report would be too long.
    BadRange(String),
    /// No instance of that name.
    NoSuchInstance(String),
    /// The ledger file (read when no relay runs) cannot be read.
    Ledger(std::path::PathBuf, std::io::Error),
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "{e}"),
            Self::TokenFile(e) => write!(f, "{e}"),
            Self::Runtime(e) => write!(f, "cannot start the async runtime: {e}"),
            Self::Unreachable {
                addr,
                source: HttpError::Connect(source),
            } => write!(
                f,
                "cannot reach the relay's admin API at {addr}: {source} (is `relay run` \
                 running, with relay.admin_listen set?)"
            ),
            Self::Unreachable { addr, source } => write!(f, "admin API at {addr}: {source}"),
            // The API's own words; the status adds only what the words leave out.
            Self::Refused { status, message } => match *status {
                StatusCode::UNAUTHORIZED => write!(
                    f,
                    "{message} (give --token-file, or --config naming relay.admin_token_file)"
                ),
                StatusCode::FORBIDDEN => write!(f, "the admin API refused the request: {message}"),
                s if s.is_server_error() && s != StatusCode::SERVICE_UNAVAILABLE => {
                    write!(f, "the relay failed: {message}")
                }
                _ => f.write_str(message),
            },
            Self::BadAnswer(e) => write!(f, "unexpected answer: {e}"),
            Self::BadTime { flag, source } => write!(f, "--{flag}: {source}"),
            Self::BadRange(message) => f.write_str(message),
            Self::NoSuchInstance(name) => write!(f, "no instance named '{name}'"),
            Self::Ledger(path, e) => write!(f, "usage ledger {}: {e}", path.display()),
        }
    }
}

impl std::error::Error for AdminError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::TokenFile(e) => Some(e),
            Self::Runtime(e) => Some(e),
            Self::Unreachable { source, .. } => Some(source),
            Self::BadAnswer(e) => Some(e),
            Self::BadTime { source, .. } => Some(source),
            Self::Ledger(_, e) => Some(e),
            Self::Refused { .. } | Self::BadRange(_) | Self::NoSuchInstance(_) => None,
        }
    }
}

/// `relay usage --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UsageFormat {
    /// Aligned columns.
    Table,
    /// Comma-separated values with a header.
    Csv,
    /// A JSON array.
    Json,
}

/// Where to send requests and with which token.
#[derive(Debug)]
pub struct Target {
    /// The relay configuration given with `--config`: where the ledger is when no relay runs.
    config: Option<crate::config::Config>,
    addr: SocketAddr,
    token: Option<zeroize::Zeroizing<String>>,
    runtime: tokio::runtime::Runtime,
}

impl Target {
    /// Resolves where the admin API is and its token: the flags given (`admin`,
    /// `token_file`), else what the relay configuration `config` names, else the defaults.
    ///
    /// # Errors
    /// [`AdminError`] for an unreadable configuration or token file.
    pub fn resolve(
        admin: Option<SocketAddr>,
        config: Option<&std::path::Path>,
        token_file: Option<&std::path::Path>,
    ) -> Result<Self, AdminError> {
        let config = config
            .map(crate::config::Config::load)
            .transpose()
            .map_err(AdminError::Config)?;
        let addr = admin
            .or_else(|| config.as_ref().and_then(|c| c.relay.admin_listen))
            .unwrap_or(DEFAULT_ADMIN);
        // A relay listening on every address (`0.0.0.0`, `::`) is asked on loopback: the API
        // accepts only a `Host` naming the address a request arrived on, or loopback.
        let addr = match addr.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, addr.port()))
            }
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()))
            }
            _ => addr,
        };
        let token_file = token_file.map(std::path::Path::to_path_buf).or_else(|| {
            config
                .as_ref()
                .and_then(|c| c.relay.admin_token_file.clone())
        });
        let token = token_file
            .map(|path| authplugin::read_secret_file(&path))
            .transpose()
            .map_err(AdminError::TokenFile)?
            .map(|text| zeroize::Zeroizing::new(text.trim().to_owned()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(AdminError::Runtime)?;
        Ok(Self {
            config,
            addr,
            token,
            runtime,
        })
    }

    /// Sends a request and returns the body of a 200 answer.
    ///
    /// # Errors
    /// [`AdminError::Unreachable`] without an answer, [`AdminError::Refused`] for any other
    /// status.
    pub fn request(
        &self,
        method: Method,
        target: &str,
        timeout: Duration,
    ) -> Result<String, AdminError> {
        self.request_with(method, target, None, timeout)
            .map(|(_, body)| body)
    }

    /// [`Target::request`] with a body (content type, text); any 2xx answer is a success,
    /// returned with its status.
    ///
    /// # Errors
    /// As [`Target::request`].
    pub fn request_with(
        &self,
        method: Method,
        target: &str,
        body: Option<(&'static str, String)>,
        timeout: Duration,
    ) -> Result<(StatusCode, String), AdminError> {
        let host = self.addr.to_string();
        let request = http_client::Request {
            method,
            addr: self.addr,
            host: &host,
            target,
            token: self.token.as_ref().map(|t| t.as_str()),
            body,
            timeout,
        };
        let reply =
            self.runtime
                .block_on(request.send())
                .map_err(|source| AdminError::Unreachable {
                    addr: self.addr,
                    source,
                })?;
        if reply.status.is_success() {
            Ok((reply.status, reply.body))
        } else {
            Err(AdminError::Refused {
                status: reply.status,
                message: error_message(&reply.body),
            })
        }
    }
}

/// The `error` field of an error body, else the body.
fn error_message(body: &str) -> String {
    serde_json::from_str::<ErrorJson>(body).map_or_else(|_| body.trim().to_owned(), |e| e.error)
}

/// `relay status`.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn status(t: &Target, json: bool) -> Result<String, AdminError> {
    let body = t.request(Method::GET, "/v1/instances", Duration::from_secs(10))?;
    // `--json` passes the relay's answer on as it is (with fields this CLI does not know).
    let raw: serde_json::Value = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    // A relay older than `GET /v1/relay` answers 404: its instances are still worth showing.
    let relay: Option<RelayJson> =
        match t.request(Method::GET, "/v1/relay", Duration::from_secs(10)) {
            Ok(body) => Some(serde_json::from_str(&body).map_err(AdminError::BadAnswer)?),
            Err(AdminError::Refused { status, .. }) if status == StatusCode::NOT_FOUND => None,
            Err(e) => return Err(e),
        };
    if json {
        let all = serde_json::json!({ "relay": relay, "instances": raw });
        return Ok(serde_json::to_string_pretty(&all).map_err(AdminError::BadAnswer)? + "\n");
    }
    let mut out = relay.map_or_else(String::new, |relay| {
        format!(
            "relay pid {}, version {}, signing key {} (key ring: {})\n",
            relay.pid,
            relay.version,
            relay.signing_key,
            relay.key_ids.join(", ")
        )
    });
    let list: Vec<InstanceJson> = serde_json::from_value(raw).map_err(AdminError::BadAnswer)?;
    out.push_str(&format!(
        "{:<16} {:<9} {:<21} {:>7} {:>10} {:>6} {:>10}\n",
        "INSTANCE", "STATE", "SINCE", "DIRECT", "PERCEPTRON", "WAKES", "LAST WAKE"
    ));
    for i in list {
        out.push_str(&format!(
            "{:<16} {:<9} {:<21} {:>7} {:>10} {:>6} {:>10}\n",
            i.name,
            i.state,
            i.since,
            i.connections.direct,
            i.connections.perceptron,
            i.wakes,
            i.last_resume_ms.map_or("-".into(), |ms| format!("{ms} ms")),
        ));
        if let Some(open) = i.draining {
            out.push_str(&format!(
                "  removed: draining, {open} connection(s) left; then its compute stops \
                 (`relay instances remove {} --force` cuts them)\n",
                i.name
            ));
        }
        if i.parked_connections > 0 {
            out.push_str(&format!(
                "  parked: {} connection(s) kept on the frozen compute\n",
                i.parked_connections
            ));
        }
        for held in &i.held_frozen_by {
            out.push_str(&format!(
                "  kept frozen, not stopped, by {}: {}\n",
                held.client, held.reason
            ));
        }
        if let Some(f) = &i.failure {
            out.push_str(&format!("  failure: {f}\n"));
        }
        if let Some(storage) = &i.storage {
            out.push_str(&format!("  data: {storage}\n"));
        }
    }
    Ok(out)
}

/// `relay fleet`: the fleet as the relay at `t` sees it (`GET /v1/fleet`).
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn fleet(t: &Target, json: bool) -> Result<String, AdminError> {
    let body = t.request(Method::GET, "/v1/fleet", Duration::from_secs(10))?;
    if json {
        return Ok(format!("{body}\n"));
    }
    let fleet: FleetJson = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    let mut out = format!(
        "relay {} ({}); live relays: {}\n{:<16} {:<9} {:<16} {:<16} CONNECTIONS BY RELAY\n",
        fleet.relay_id,
        if fleet.store_available {
            "in touch with the store"
        } else {
            "CUT OFF from the store: wakes refused, nothing paused"
        },
        fleet.relays.join(", "),
        "INSTANCE",
        "STATE",
        "LAST CHANGE BY",
        "LOCK HELD BY"
    );
    for i in fleet.instances {
        let conns: Vec<String> = i
            .connections
            .iter()
            .map(|(relay, open)| format!("{relay}={open}"))
            .collect();
        out.push_str(&format!(
            "{:<16} {:<9} {:<16} {:<16} {}\n",
            i.name,
            i.state,
            i.state_by.as_deref().unwrap_or("-"),
            i.lock_holder.as_deref().unwrap_or("-"),
            if conns.is_empty() {
                "-".to_owned()
            } else {
                conns.join(" ")
            }
        ));
    }
    Ok(out)
}

/// `relay pause` / `relay resume`.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn action(t: &Target, name: &str, action: &str, force: bool) -> Result<String, AdminError> {
    // Idempotent for scripts: an instance already in the state asked for is a success.
    let done: &[&str] = if action == "pause" {
        &["paused", "frozen"]
    } else {
        &["running"]
    };
    let before = instance_state(t, name)?;
    if done.contains(&before.as_str()) {
        return Ok(format!("{name}: already {before}\n"));
    }
    let q = if force { "?force=true" } else { "" };
    let body = match t.request(
        Method::POST,
        &format!("/v1/instances/{name}/{action}{q}"),
        Duration::from_secs(120),
    ) {
        Ok(body) => body,
        Err(e @ AdminError::Refused { status, .. }) if status == StatusCode::CONFLICT => {
            // Paused meanwhile (an idle pause between the two requests)?
            let now = instance_state(t, name)?;
            if done.contains(&now.as_str()) {
                return Ok(format!("{name}: already {now}\n"));
            }
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let instance: InstanceJson = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    Ok(format!("{name}: {}\n", shown(&instance.state)))
}

/// A state as printed: `?` when the relay gave none.
fn shown(state: &str) -> &str {
    if state.is_empty() { "?" } else { state }
}

/// `relay instances put`: sends `text` as instance `name`'s file.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn instance_put(t: &Target, name: &str, text: String) -> Result<String, AdminError> {
    let (status, body) = t.request_with(
        Method::PUT,
        &format!("/v1/instances/{name}"),
        Some(("application/toml", text)),
        Duration::from_secs(120),
    )?;
    Ok(if status == StatusCode::ACCEPTED {
        let waiting: WaitingJson = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
        format!(
            "{name}: written; its previous definition drains first ({} connection(s) left), \
             then it starts\n",
            waiting.open
        )
    } else {
        let instance: InstanceJson = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
        format!("{name}: {}\n", shown(&instance.state))
    })
}

/// `relay instances remove`.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn instance_remove(t: &Target, name: &str, force: bool) -> Result<String, AdminError> {
    let q = if force { "?force=true" } else { "" };
    let (_, body) = t.request_with(
        Method::DELETE,
        &format!("/v1/instances/{name}{q}"),
        None,
        Duration::from_secs(30),
    )?;
    let removed: RemovedJson = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    Ok(match (removed.open, force) {
        (0, _) => format!("{name}: removed; its compute stops\n"),
        (n, true) => format!("{name}: removed; {n} connection(s) cut; its compute stops\n"),
        (n, false) => format!(
            "{name}: removed; draining {n} connection(s), then its compute stops (--force cuts \
             them)\n"
        ),
    })
}

/// The state of instance `name` as the admin API reports it.
fn instance_state(t: &Target, name: &str) -> Result<String, AdminError> {
    let body = t.request(Method::GET, "/v1/instances", Duration::from_secs(10))?;
    let list: Vec<InstanceJson> = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    list.into_iter()
        .find(|i| i.name == name)
        .map(|i| i.state)
        .ok_or_else(|| AdminError::NoSuchInstance(name.to_owned()))
}

/// `relay blocks list`.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn blocks_list(t: &Target, json: bool) -> Result<String, AdminError> {
    let body = t.request(Method::GET, "/v1/blocks", Duration::from_secs(10))?;
    let blocks: Vec<BlockJson> = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    if json {
        return Ok(body);
    }
    let mut out = format!(
        "{:<6} {:<40} {:<16} {:<13} {:>6} {:<21}\n",
        "SCOPE", "WHO", "INSTANCE", "BUDGET", "COUNT", "UNTIL (UTC)"
    );
    for b in &blocks {
        let who = b.source.as_deref().or(b.user.as_deref()).unwrap_or("-");
        out.push_str(&format!(
            "{:<6} {:<40} {:<16} {:<13} {:>6} {:<21}\n",
            b.scope,
            crate::logsafe::Escaped(who.as_bytes()).to_string(),
            b.instance.as_deref().unwrap_or("-"),
            b.budget,
            b.count,
            b.until
        ));
    }
    Ok(out)
}

/// `relay blocks clear`: a source, a user (of one instance or all), or everything when
/// neither is given.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn blocks_clear(
    t: &Target,
    source: Option<std::net::IpAddr>,
    user: Option<&str>,
    instance: Option<&str>,
) -> Result<String, AdminError> {
    let mut q = Vec::new();
    if let Some(ip) = source {
        q.push(format!("source={ip}"));
    }
    if let Some(user) = user {
        q.push(format!("user={}", percent_encode(user)));
    }
    if let Some(instance) = instance {
        q.push(format!("instance={}", percent_encode(instance)));
    }
    let path = if q.is_empty() {
        "/v1/blocks".to_owned()
    } else {
        format!("/v1/blocks?{}", q.join("&"))
    };
    let body = t.request(Method::DELETE, &path, Duration::from_secs(10))?;
    let cleared: ClearedJson = serde_json::from_str(&body).map_err(AdminError::BadAnswer)?;
    Ok(format!("cleared {} block(s)\n", cleared.cleared))
}

/// Every byte but unreserved ones as `%XX`, for a query value.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The usage report read from `state_dir/usage.ledger` directly (no relay runs; the file is
/// only read), as the admin API would make it.
fn usage_from_ledger(
    state_dir: &std::path::Path,
    range: crate::admin::UsageRange,
) -> Result<Vec<UsageJson>, AdminError> {
    let path = state_dir.join("usage.ledger");
    let text = std::fs::read_to_string(&path).map_err(|e| AdminError::Ledger(path.clone(), e))?;
    let (events, _torn) = crate::ledger::parse(&text);
    crate::admin::usage(
        &events,
        &crate::ledger::parse_storage(&text),
        range,
        crate::clock::now_ms(),
        crate::ledger::MAX_BILL_ROWS,
    )
    .map_err(|e| AdminError::BadRange(e.to_string()))
}

/// `relay usage`.
///
/// # Errors
/// [`AdminError`], whose `Display` is the message for the user.
pub fn usage(
    t: &Target,
    from: Option<&str>,
    to: Option<&str>,
    format: UsageFormat,
) -> Result<String, AdminError> {
    let mut q = Vec::new();
    for (k, v) in [("from", from), ("to", to)] {
        if let Some(v) = v {
            crate::timefmt::parse_utc(v)
                .map_err(|source| AdminError::BadTime { flag: k, source })?;
            q.push(format!("{k}={v}"));
        }
    }
    // Refused here too, not only by the API: the ledger may be read without a relay.
    let range = crate::admin::UsageRange::parse(from, to)
        .map_err(|e| AdminError::BadRange(e.to_string()))?;
    let path = if q.is_empty() {
        "/v1/usage".to_owned()
    } else {
        format!("/v1/usage?{}", q.join("&"))
    };
    let rows: Vec<UsageJson> = match t.request(Method::GET, &path, Duration::from_secs(30)) {
        Ok(body) => serde_json::from_str(&body).map_err(AdminError::BadAnswer)?,
        Err(
            unreachable @ AdminError::Unreachable {
                source: HttpError::Connect(_),
                ..
            },
        ) => {
            let Some(config) = t
                .config
                .as_ref()
                .filter(|c| c.relay.store == crate::config::StoreSettings::Local)
            else {
                return Err(unreachable);
            };
            usage_from_ledger(&config.relay.state_dir, range)?
        }
        Err(e) => return Err(e),
    };
    Ok(match format {
        UsageFormat::Json => {
            serde_json::to_string_pretty(&rows).map_err(AdminError::BadAnswer)? + "\n"
        }
        UsageFormat::Csv => {
            let mut out =
                "instance,hour,billed_seconds,ccu_seconds,local_gib_hours,stored_gib_hours\n"
                    .to_owned();
            for r in &rows {
                out.push_str(&format!(
                    "{},{},{},{:.3},{:.6},{:.6}\n",
                    r.instance,
                    r.hour,
                    r.billed_seconds,
                    r.ccu_seconds,
                    r.local_gib_hours,
                    r.stored_gib_hours
                ));
            }
            out
        }
        UsageFormat::Table => {
            let mut out = format!(
                "{:<16} {:<21} {:>14} {:>14} {:>14} {:>14}\n",
                "INSTANCE",
                "HOUR (UTC)",
                "SECONDS UP",
                "CCU-SECONDS",
                "LOCAL GiB-h",
                "STORED GiB-h"
            );
            let (mut seconds, mut ccu_seconds, mut local, mut stored) = (0, 0.0, 0.0, 0.0);
            for r in &rows {
                seconds += r.billed_seconds;
                ccu_seconds += r.ccu_seconds;
                local += r.local_gib_hours;
                stored += r.stored_gib_hours;
                out.push_str(&format!(
                    "{:<16} {:<21} {:>14} {:>14.3} {:>14.6} {:>14.6}\n",
                    r.instance,
                    r.hour,
                    r.billed_seconds,
                    r.ccu_seconds,
                    r.local_gib_hours,
                    r.stored_gib_hours
                ));
            }
            out.push_str(&format!(
                "{:<16} {:<21} {seconds:>14} {ccu_seconds:>14.3} {local:>14.6} {stored:>14.6}\n",
                "total", ""
            ));
            out.push_str(&format!(
                "{:<16} {:<21} {:>14} {:>14.6}\n",
                "CCU-hours",
                "",
                "",
                ccu_seconds / 3600.0
            ));
            out.push_str(
                "charged: CCU-SECONDS (capacity x time, frozen at its own rate) and the \
                 storage GiB-hours of each tier; SECONDS UP is the time resuming or running, \
                 whatever the capacity\n",
            );
            out
        }
    })
}
