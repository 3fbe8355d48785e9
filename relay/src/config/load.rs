//! Reading a configuration file: syntax, then each value (serde), then what one value
//! cannot show (names and addresses used twice, the driver, limits that must fit together).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::fields::is_private_or_loopback;
use super::{
    ArchiveConfig, AuthMode, ComputeProofMode, ComputeTlsMode, Config, ConfigError, ConfigFile,
    ConfigProblem, DriverConfig, DriverKind, EtcdSettings, ExecSpec, HttpFile, HttpSpec,
    InstanceConfig, InstanceFile, OffloadConfig, OffloadFile, OffloadMover, ProcessFile,
    RestoreMode, RouteBy, RouteMode, S3Settings, StoreSettings, TlsSettings,
};
use crate::capacity::CapacityConfig;

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
        relay.instances_dir = relay.instances_dir.map(|p| rebase(base, &p));
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
            for file in [
                &mut etcd.ca_file,
                &mut etcd.cert_file,
                &mut etcd.key_file,
                &mut etcd.definitions_key_file,
            ] {
                *file = file.as_deref().map(|p| rebase(base, p));
            }
            etcd_fits(etcd, path)?;
        }
        let fleet = relay.store != StoreSettings::Local;
        if fleet && relay.instances_dir.is_some() {
            let message = "a fleet keeps the instances defined while it runs in its store, the \
                           same for every relay (`relay instances put`); remove this key";
            return Err(ConfigError::invalid(
                path,
                "relay.instances_dir".into(),
                message,
            ));
        }
        // A fleet's store may define every instance.
        if file.instance.is_empty() && relay.instances_dir.is_none() && !fleet {
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
            match inst.listen {
                Some(listen) if !listens.insert(listen) => {
                    let message = format!("{listen} is used twice");
                    return Err(ConfigError::invalid(path, key("listen"), message));
                }
                None if file.endpoint.is_empty() => {
                    let message = "required unless an [[endpoint]] routes to the instance";
                    return Err(ConfigError::invalid(path, key("listen"), message));
                }
                _ => {}
            }
            instances.push(instance(inst, &key, base, path, fleet)?);
        }
        let mut endpoints = file.endpoint;
        for (i, endpoint) in endpoints.iter_mut().enumerate() {
            endpoint.tls = endpoint.tls.take().map(|t| tls_paths(t, base));
            if endpoint.route_by == RouteBy::ServerName && endpoint.tls.is_none() {
                return Err(ConfigError::invalid(
                    path,
                    format!("endpoint[{i}].tls"),
                    "route_by = \"sni\" needs [endpoint.tls]: the server name comes in the TLS \
                     handshake",
                ));
            }
            if !listens.insert(endpoint.listen) {
                let message = format!("{} is used twice", endpoint.listen);
                return Err(ConfigError::invalid(
                    path,
                    format!("endpoint[{i}].listen"),
                    message,
                ));
            }
        }
        Ok(Self {
            path: path.to_owned(),
            relay,
            instances,
            endpoints,
        })
    }
}

/// One instance's values, checked (everything but what needs the other instances: names and
/// addresses used twice). `key` names a field where `path` says it is.
pub(super) fn instance(
    inst: InstanceFile,
    key: &dyn Fn(&str) -> String,
    base: &Path,
    path: &Path,
    fleet: bool,
) -> Result<InstanceConfig, ConfigError> {
    // Payload v2: a compute refuses a relayed login whose scramble A is older than
    // MAX_LOGIN_AGE_MS when signed, so the longest hold must fit in it.
    let longest_hold = inst.handshake_timeout + inst.resume_timeout + 2 * inst.compute_timeout;
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
                let message = format!("min_ccu {} is above max_ccu {}", c.min_ccu, c.max_ccu);
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
    if inst.resumable_sessions && inst.auth != AuthMode::Dual {
        let message = "only with auth = \"dual\": in switch mode the compute issues no \
                       ticket, so parked sessions stay on a frozen compute";
        return Err(ConfigError::invalid(
            path,
            key("resumable_sessions"),
            message,
        ));
    }
    if inst.force_reattach_every.is_some() && !inst.resumable_sessions {
        let message = "only with resumable_sessions = true: it reattaches resumable sessions";
        return Err(ConfigError::invalid(
            path,
            key("force_reattach_every"),
            message,
        ));
    }
    if inst.resumable_sessions && inst.stop_after.is_none() {
        let message = "needs stop_after: sessions are resumed after the frozen \
                       compute is stopped";
        return Err(ConfigError::invalid(
            path,
            key("resumable_sessions"),
            message,
        ));
    }
    let offload = inst
        .offload
        .map(|o| offload(path, base, &key, &driver, o))
        .transpose()?;
    if let DriverConfig::Exec(spec) = &driver
        && offload.is_none()
        && (spec.offload.is_some() || spec.restore.is_some())
    {
        let message = "only used with [instance.offload], whose `after` says when";
        let name = if spec.offload.is_some() {
            "offload"
        } else {
            "restore"
        };
        return Err(ConfigError::invalid(
            path,
            key(&format!("driver.{name}")),
            message,
        ));
    }
    if inst.compute_proof != ComputeProofMode::Greeting && inst.auth != AuthMode::Dual {
        let message = "only used with auth = \"dual\" (no other compute holds the key)";
        return Err(ConfigError::invalid(path, key("compute_proof"), message));
    }
    Ok(InstanceConfig {
        compute_proof: inst.compute_proof,
        tls,
        require_secure_transport: inst.require_secure_transport,
        compute_tls: inst.compute_tls,
        compute_ca,
        compute_tls_name: inst.compute_tls_name,
        capacity,
        offload,
        stop_after: inst.stop_after,
        // Parking freezes the compute's cgroup, which only the process driver has.
        park: inst.park && matches!(driver, DriverConfig::Process { .. }),
        park_after: inst.park_after.min(inst.idle_pause_after),
        keepalive_queries: inst.keepalive_queries,
        resumable_sessions: inst.resumable_sessions,
        max_detached_sessions: inst.max_detached_sessions,
        force_reattach_every: inst.force_reattach_every,
        kernel_splice: inst.kernel_splice,
        splice_below_tcp: inst.splice_below_tcp,
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
        failed_wake_pause_after: inst.failed_wake_pause_after,
        on_relay_exit: inst.on_relay_exit,
        max_pending_connections: inst.max_pending_connections,
        health_check_users: inst.health_check_users,
        route: inst.route,
    })
}

/// What `[relay.store] kind = "etcd"` needs: endpoints, a relay id that can be a key segment,
/// and requests bounded well inside the lease.
pub(super) fn etcd_fits(etcd: &EtcdSettings, path: &Path) -> Result<(), ConfigError> {
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
pub(super) fn kernel_route_fits(
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
    let Some(listen) = inst.listen else {
        return Err(ConfigError::invalid(
            path,
            key("route"),
            "\"nftables\" needs the instance's own listen address (the kernel routes it)",
        ));
    };
    if listen.is_ipv4() != inst.compute.is_ipv4() {
        return Err(ConfigError::invalid(
            path,
            key("route"),
            format!(
                "\"nftables\" needs listen ({listen}) and compute ({}) in the same address \
                 family (both IPv4 or both IPv6)",
                inst.compute
            ),
        ));
    }
    // The kernel forwards a running instance's connections without the relay seeing them, so
    // the relay cannot hold a client to TLS or to a client certificate there (docs/tls.md,
    // "Which route enforces what").
    if inst.require_secure_transport {
        return Err(ConfigError::invalid(
            path,
            key("require_secure_transport"),
            "cannot be used with route = \"nftables\": while the instance runs the kernel \
             forwards its connections and the relay never sees whether they use TLS; use \
             route = \"pump\" (the relay then terminates every login), or set \
             require_secure_transport on the compute itself",
        ));
    }
    if inst.tls.as_ref().is_some_and(|t| t.client_ca.is_some()) {
        return Err(ConfigError::invalid(
            path,
            key("tls.client_ca"),
            "cannot be used with route = \"nftables\": while the instance runs the kernel \
             forwards its connections and the relay never sees a client certificate; use \
             route = \"pump\" (the relay then terminates every login), or require client \
             certificates on the compute itself",
        ));
    }
    if inst.resumable_sessions {
        return Err(ConfigError::invalid(
            path,
            key("resumable_sessions"),
            "cannot be used with route = \"nftables\": a session survives a stop only if the \
             relay logged it in (for its ticket) and follows its commands, and the kernel \
             forwards a running instance's connections without the relay; use route = \"pump\"",
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
pub(super) fn driver(
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
            if let Some(name) = process
                .env
                .keys()
                .find(|k| k.is_empty() || k.contains(['=', '\0']))
            {
                return Err(ConfigError::invalid(
                    path,
                    format!("{key}.env"),
                    format!(
                        "'{}' is not an environment variable name",
                        name.escape_debug()
                    ),
                ));
            }
            if let Some((name, _)) = process.env.iter().find(|(_, v)| v.contains('\0')) {
                return Err(ConfigError::invalid(
                    path,
                    format!("{key}.env.{name}"),
                    "a value cannot hold a NUL byte",
                ));
            }
            let run_as = super::run_as::resolve(
                process.user.as_deref(),
                process.group.as_deref(),
                key,
                path,
            )?;
            DriverConfig::Process {
                command: process.command,
                cwd: rebase(base, &process.cwd),
                stop_grace: process.stop_grace,
                env: process.env.into_iter().collect(),
                run_as,
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
pub(super) fn tls_paths(mut tls: TlsSettings, base: &Path) -> TlsSettings {
    tls.cert = rebase(base, &tls.cert);
    tls.key = rebase(base, &tls.key);
    tls.client_ca = tls.client_ca.map(|p| rebase(base, &p));
    tls
}

/// What a missing required key reports.
pub(super) const MISSING: &str = "required, but missing";

/// Deserialises `value`, found at key path `prefix` (empty for the whole file), into `T`; an
/// error names the key it concerns.
pub(super) fn typed<T: DeserializeOwned>(
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

pub(super) fn join(key: &str, field: &str) -> String {
    if key.is_empty() {
        field.to_owned()
    } else {
        format!("{key}.{field}")
    }
}

/// A TOML syntax error, located by line and column: no key can be named in text that does
/// not parse.
pub(super) fn syntax(text: &str, e: &toml::de::Error) -> ConfigProblem {
    let start = e.span().map_or(0, |s| s.start);
    let before = text.get(..start).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    ConfigProblem::Syntax {
        line: before.matches('\n').count() + 1,
        column: before.get(line_start..).map_or(0, |l| l.chars().count()) + 1,
        message: e.message().trim().replace('\n', "; "),
    }
}

/// `[instance.offload]`: who moves the data (the relay under the process driver, the exec
/// driver's commands), the store URL parsed, the S3 keys only with an S3 store, and the
/// restore mode that store allows.
fn offload(
    path: &Path,
    base: &Path,
    key: &dyn Fn(&str) -> String,
    driver: &DriverConfig,
    o: OffloadFile,
) -> Result<OffloadConfig, ConfigError> {
    use super::StoreUrl;
    let invalid = |name: &str, message: &str| {
        ConfigError::invalid(path, key(&format!("offload.{name}")), message)
    };
    if let DriverConfig::Exec(spec) = driver {
        if spec.offload.is_none() || spec.restore.is_none() {
            let message = "with the exec driver, the driver's `offload` and `restore` commands \
                           move the data: set both";
            return Err(ConfigError::invalid(path, key("driver"), message));
        }
        let relay_only = [
            ("data_dir", o.data_dir.is_some()),
            ("restore", o.restore.is_some()),
            ("endpoint", o.endpoint.is_some()),
            ("region", o.region.is_some()),
            ("credentials_file", o.credentials_file.is_some()),
        ];
        if let Some((name, _)) = relay_only.iter().find(|(_, set)| *set) {
            return Err(invalid(
                name,
                "only with the process driver (the relay moves the data); the exec driver's \
                 offload and restore commands do here",
            ));
        }
        return Ok(OffloadConfig {
            after: o.after,
            mover: OffloadMover::Commands { store: o.store },
        });
    }
    if !matches!(driver, DriverConfig::Process { .. }) {
        let message = "needs the process driver (the relay moves the data directory of a \
                       compute on its host) or the exec driver's offload and restore commands";
        return Err(ConfigError::invalid(path, key("offload"), message));
    }
    if matches!(
        driver,
        DriverConfig::Process {
            run_as: Some(_),
            ..
        }
    ) {
        let message = "not yet with [instance.offload]: the relay restores the data directory \
                       as its own user, and a compute of another could not write it; use the \
                       exec driver's offload and restore commands";
        return Err(ConfigError::invalid(path, key("driver.user"), message));
    }
    let store = o
        .store
        .ok_or_else(|| invalid("store", "required, but missing"))?;
    let data_dir = o
        .data_dir
        .ok_or_else(|| invalid("data_dir", "required, but missing"))?;
    let url = StoreUrl::parse(&store).map_err(|e| invalid("store", &e.to_string()))?;
    let s3 = S3Settings {
        endpoint: o.endpoint,
        region: o.region,
        credentials_file: o.credentials_file.map(|p| rebase(base, &p)),
    };
    let restore = match url {
        StoreUrl::File(_) => {
            let named = [
                ("endpoint", s3.endpoint.is_some()),
                ("region", s3.region.is_some()),
                ("credentials_file", s3.credentials_file.is_some()),
            ];
            if let Some((name, _)) = named.iter().find(|(_, set)| *set) {
                return Err(invalid(name, "only used with an s3:// store"));
            }
            o.restore.unwrap_or(RestoreMode::Lazy)
        }
        StoreUrl::S3(_) => {
            if let Some(endpoint) = &s3.endpoint
                && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
            {
                let message = format!("{endpoint:?}: not an http:// or https:// URL");
                return Err(invalid("endpoint", &message));
            }
            o.restore.unwrap_or(RestoreMode::Lazy)
        }
    };
    Ok(OffloadConfig {
        after: o.after,
        mover: OffloadMover::Relay(ArchiveConfig {
            store,
            data_dir: rebase(base, &data_dir),
            restore,
            s3,
        }),
    })
}

/// A path from the file, resolved against the configuration's directory; an empty one (a
/// working directory left out) is that directory.
pub(super) fn rebase(base: &Path, p: &Path) -> PathBuf {
    if p.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(p)
    }
}
