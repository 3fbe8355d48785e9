//! The admin HTTP API (loopback by default, optional bearer token, required off loopback):
//! status, pause, resume, usage and Prometheus metrics, served by hyper's HTTP/1.1 server. One
//! request per connection (`Connection: close`), a bounded request head, a deadline on the head
//! and on the whole exchange, and a graceful close of in-flight requests on shutdown. Bounded
//! work per request: `Host` and `Origin` are checked before anything runs (DNS rebinding,
//! browser forms), and a usage report is clamped to the ledger's span and to now, with a row
//! cap. [`respond`] is the whole API as a pure function of the request, so it is tested without
//! sockets.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/v1/relay` | the relay: pid, version, signing key id, key ids |
//! | GET | `/v1/instances` | JSON array of instance status (live, then draining) |
//! | PUT | `/v1/instances/{name}` (body: the instance file, TOML; token required) | 201 running, 202 waiting for the old definition to drain, 400, 409, 422 |
//! | DELETE | `/v1/instances/{name}` (`?force=true` cuts its connections; token required) | 202 draining, 404, 409 |
//! | GET | `/v1/instance-files` | the watched directory and why files in it are not used |
//! | POST | `/v1/instances/{name}/pause` (`?force=true` cuts open connections) | 200, 404, 409 |
//! | POST | `/v1/instances/{name}/resume` | 200 once running, 404, 503 |
//! | POST | `/v1/instances/{name}/offload` (a paused instance's data to the store now) | 202, 404, 409 |
//! | GET | `/v1/usage?from=T&to=T` | JSON array of billed seconds per instance and hour |
//! | GET | `/v1/blocks` | JSON array of the sources and users blocked by a budget |
//! | DELETE | `/v1/blocks` (`?source=IP`, or `?user=NAME[&instance=NAME]`; none: all) | `{"cleared": n}` |
//! | GET | `/metrics` | Prometheus text 0.0.4, or OpenMetrics when the `Accept` header asks |

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;

use crate::admin_api::{
    BlockJson, ClearedJson, ConnectionsJson, ErrorJson, FleetInstanceJson, FleetJson, HeldJson,
    InstanceJson, RelayJson, RemovedJson, UsageJson, WaitingJson,
};
use subtle::ConstantTimeEq as _;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zeroize::Zeroizing;

use authplugin::key_file::LiveKeyRing;

use crate::budgets::{Budgets, ClearFilter, Subject};
use crate::capacity::Ccu;
use crate::config::instance_file::is_instance_name;
use crate::control::PauseError;
use crate::hosting::RemoveError;
use crate::instance_dir::{FileState, InstanceDir};
use crate::ledger::{self, Ledger};
use crate::limits::Admission;
use crate::metrics::{self, AdminRefusal, Metrics};
use crate::registry::{Origin, Registered, Registry};
use crate::route::Route;
use crate::timefmt;

/// Longest request head accepted (hyper answers 431 past it).
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Longest body accepted: an instance file (`PUT /v1/instances/{name}`); no other request
/// has a body the API reads.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Deadline for receiving a request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Backstop for a whole exchange, answer included, on top of the longest `resume_timeout`
/// (a resume waits for it; a pause for the driver's stop). It only ends connections that would
/// otherwise stay open for ever (a client that never reads its answer).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(600);

/// A request's body, read before [`respond`] (only `PUT` has one the API reads).
#[derive(Debug, Clone)]
pub struct RequestBody(pub Bytes);

/// What the admin API serves.
#[derive(Debug)]
pub struct AdminState {
    /// Every instance.
    pub registry: Arc<Registry>,
    /// `relay.instances_dir`, where instances are added and removed.
    pub instance_dir: Option<Arc<InstanceDir>>,
    /// Relay metrics.
    pub metrics: Arc<Metrics>,
    /// The usage ledger.
    pub ledger: Arc<Ledger>,
    /// The bearer token requests must carry, if one is configured.
    pub token: Option<Zeroizing<String>>,
    /// Pre-login admission (each instance's slot is in the registry).
    pub admission: Arc<Admission>,
    /// Wake-cost budgets and their blocks.
    pub budgets: Arc<Budgets>,
    /// The fleet's store, when this relay is one of a fleet: usage comes from the fleet's
    /// ledger, and `GET /v1/fleet` shows the relays.
    pub fleet: Option<Arc<dyn crate::fleet::FleetStore>>,
    /// The key ring in use (its signing key id is in `GET /v1/relay`).
    pub keys: Arc<LiveKeyRing>,
}

fn relay_json(keys: &LiveKeyRing) -> RelayJson {
    let ring = keys.current();
    RelayJson {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        signing_key: ring.signing_key().id().as_str().to_owned(),
        key_ids: ring.ids().map(|id| id.as_str().to_owned()).collect(),
    }
}

async fn fleet_json(
    store: &dyn crate::fleet::FleetStore,
    registered: &[Arc<Registered>],
) -> Result<FleetJson, crate::fleet::StoreError> {
    let mut instances = Vec::with_capacity(registered.len());
    for r in registered {
        let name = &r.rt.instance.config.name;
        let seen = store.observe(name).await?;
        let conns = store.connections(name).await?;
        instances.push(FleetInstanceJson {
            name: name.clone(),
            state: seen.phase().as_str().to_owned(),
            state_by: seen.state.map(|s| s.relay),
            lock_holder: seen.lock.map(|l| l.relay),
            connections: conns
                .by_relay
                .into_iter()
                .map(|(relay, r)| (relay, r.open))
                .collect(),
        });
    }
    Ok(FleetJson {
        relay_id: store.relay_id().to_owned(),
        store_available: store.available(),
        relays: store.relays().await?,
        instances,
    })
}

/// An answer, before it becomes an HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl Response {
    fn json<T: Serialize>(status: StatusCode, value: &T) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into()) + "\n",
        }
    }

    fn error(status: StatusCode, message: &str) -> Self {
        Self::json(
            status,
            &ErrorJson {
                error: message.to_owned(),
            },
        )
    }

    fn into_http(self) -> hyper::Response<Full<Bytes>> {
        let mut response = hyper::Response::new(Full::new(Bytes::from(self.body)));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Answers one request (its body is never read) that arrived on `local`, the address of
/// the admin listener the client connected to.
///
/// Before routing, in this order: the `Host` header must name `local`'s address or loopback
/// (a web page that rebinds its own DNS name to 127.0.0.1 still sends its own name); a
/// mutating request that carries an `Origin` (or `Sec-Fetch-Site`) from elsewhere is refused
/// (a page the operator visits cannot `POST …/pause` through the browser); and the bearer
/// token, when one is configured, must be given.
pub async fn respond<B>(
    state: &AdminState,
    req: &hyper::Request<B>,
    local: SocketAddr,
) -> Response {
    let header = |name: header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let refuse = |reason: AdminRefusal, status: StatusCode, message: &str| {
        state.metrics.admin_refused(reason);
        Response::error(status, message)
    };
    let host = header(header::HOST).unwrap_or_default();
    if !host_allowed(host, local) {
        return refuse(
            AdminRefusal::host,
            StatusCode::FORBIDDEN,
            "Host header must name the admin address, localhost, 127.0.0.1 or [::1]",
        );
    }
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD);
    if mutating
        && !same_origin(
            header(header::ORIGIN),
            header(header::HeaderName::from_static("sec-fetch-site")),
            host,
        )
    {
        return refuse(
            AdminRefusal::origin,
            StatusCode::FORBIDDEN,
            "cross-origin requests may not change anything",
        );
    }
    if let Some(token) = &state.token {
        let given = header(header::AUTHORIZATION)
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            return refuse(
                AdminRefusal::token,
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token",
            );
        }
    }
    // Names and values percent-decoded (`+` is a space); bytes that are not UTF-8 after
    // decoding become U+FFFD, which no configured instance or account name contains.
    let query: Vec<(String, String)> =
        form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let param = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
    let body = req
        .extensions()
        .get::<RequestBody>()
        .map_or(&[][..], |b| &b.0[..]);
    let segments: Vec<&str> = req.uri().path().trim_matches('/').split('/').collect();
    match (req.method(), segments.as_slice()) {
        (&Method::GET, ["metrics"]) => {
            let format = metrics::Format::negotiate(header(header::ACCEPT));
            Response {
                status: StatusCode::OK,
                content_type: format.content_type(),
                body: render_metrics(state, format),
            }
        }
        (&Method::GET, ["v1", "fleet"]) => {
            let Some(store) = &state.fleet else {
                return Response::error(
                    StatusCode::NOT_FOUND,
                    "this relay is not one of a fleet ([relay.store] kind = \"local\")",
                );
            };
            match fleet_json(store.as_ref(), &state.registry.live()).await {
                Ok(fleet) => Response::json(StatusCode::OK, &fleet),
                Err(e) => Response::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            }
        }
        (&Method::GET, ["v1", "relay"]) => Response::json(StatusCode::OK, &relay_json(&state.keys)),
        (&Method::GET, ["v1", "instances"]) => {
            let live = state.registry.live().into_iter().map(|r| (r, false));
            let draining = state.registry.removed().into_iter();
            let list: Vec<InstanceJson> = live
                .chain(draining.map(|r| (r, true)))
                .map(|(r, draining)| registered_json(&r, draining))
                .collect();
            Response::json(StatusCode::OK, &list)
        }
        (&Method::GET, ["v1", "instance-files"]) => {
            let Some(dir) = &state.instance_dir else {
                return Response::error(StatusCode::NOT_FOUND, NO_INSTANCES_DIR);
            };
            let problems = dir.problems().await;
            Response::json(
                StatusCode::OK,
                &serde_json::json!({ "at": dir.describe(), "problems": problems }),
            )
        }
        (&Method::PUT, ["v1", "instances", name]) => {
            if let Some(refusal) = changes_instances(state) {
                return refusal;
            }
            if !is_instance_name(name) {
                return Response::error(
                    StatusCode::BAD_REQUEST,
                    "an instance name is non-empty A-Z a-z 0-9 - _",
                );
            }
            put_instance(state, name, body).await
        }
        (&Method::DELETE, ["v1", "instances", name]) => {
            if let Some(refusal) = changes_instances(state) {
                return refusal;
            }
            let force = matches!(param("force"), Some("true" | "1"));
            delete_instance(state, name, force).await
        }
        (&Method::POST, ["v1", "instances", name, action @ ("pause" | "resume")]) => {
            let Some(r) = state.registry.get(name) else {
                return Response::error(
                    StatusCode::NOT_FOUND,
                    &format!("no instance named '{name}'"),
                );
            };
            let rt = &r.rt;
            if *action == "pause" {
                let force = matches!(param("force"), Some("true" | "1"));
                match rt.instance.pause(force, "admin request").await {
                    Ok(()) => Response::json(StatusCode::OK, &registered_json(&r, false)),
                    Err(e @ (PauseError::Busy(_) | PauseError::NotRunning(_))) => {
                        Response::error(StatusCode::CONFLICT, &e.to_string())
                    }
                    Err(e @ (PauseError::Route(_) | PauseError::Fleet(_))) => {
                        Response::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
                    }
                }
            } else {
                match rt.instance.ensure_running().await {
                    Ok(_) => Response::json(StatusCode::OK, &registered_json(&r, false)),
                    Err(e) => Response::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
                }
            }
        }
        (&Method::POST, ["v1", "instances", name, "offload"]) => {
            let Some(r) = state.registry.get(name) else {
                return Response::error(
                    StatusCode::NOT_FOUND,
                    &format!("no instance named '{name}'"),
                );
            };
            match r.rt.instance.offload_now() {
                Ok(what) => Response::json(
                    StatusCode::ACCEPTED,
                    &serde_json::json!({ "offload": what.as_str() }),
                ),
                Err(e) => Response::error(StatusCode::CONFLICT, &e.to_string()),
            }
        }
        (&Method::GET, ["v1", "usage"]) => {
            let range = match UsageRange::parse(param("from"), param("to")) {
                Ok(r) => r,
                Err(e) => {
                    return refuse(AdminRefusal::range, StatusCode::BAD_REQUEST, &e.to_string());
                }
            };
            let read = match &state.fleet {
                Some(store) => store
                    .ledger_text()
                    .await
                    .map(|text| (ledger::parse(&text).0, ledger::parse_storage(&text)))
                    .map_err(|e| e.to_string()),
                None => state
                    .ledger
                    .read()
                    .and_then(|(events, _skipped)| Ok((events, state.ledger.read_storage()?)))
                    .map_err(|e| e.to_string()),
            };
            let (events, storage) = match read {
                Ok(events) => events,
                Err(e) => {
                    return Response::error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!("cannot read the ledger: {e}"),
                    );
                }
            };
            match usage(
                &events,
                &storage,
                range,
                crate::clock::now_ms(),
                ledger::MAX_BILL_ROWS,
            ) {
                Ok(rows) => Response::json(StatusCode::OK, &rows),
                Err(e) => refuse(AdminRefusal::rows, StatusCode::BAD_REQUEST, &e.to_string()),
            }
        }
        (&Method::GET, ["v1", "blocks"]) => {
            Response::json(StatusCode::OK, &blocks_json(&state.budgets))
        }
        (&Method::DELETE, ["v1", "blocks"]) => {
            let filter = match (param("source"), param("user")) {
                (None, None) => ClearFilter::All,
                (Some(ip), None) => match ip.parse() {
                    Ok(ip) => ClearFilter::Source(ip),
                    Err(_) => {
                        return Response::error(
                            StatusCode::BAD_REQUEST,
                            "source must be an IP address",
                        );
                    }
                },
                (None, Some(user)) => ClearFilter::User {
                    instance: param("instance").map(str::to_owned),
                    user: user.as_bytes().to_vec(),
                },
                (Some(_), Some(_)) => {
                    return Response::error(
                        StatusCode::BAD_REQUEST,
                        "give source or user, not both",
                    );
                }
            };
            let cleared = state.budgets.clear(&filter, std::time::Instant::now());
            tracing::info!(
                ?filter,
                cleared,
                "budget blocks cleared by an admin request"
            );
            Response::json(StatusCode::OK, &ClearedJson { cleared })
        }
        (
            _,
            ["metrics"]
            | ["v1", "instances"]
            | ["v1", "instance-files"]
            | ["v1", "instances", _]
            | ["v1", "relay"]
            | ["v1", "usage"]
            | ["v1", "blocks"]
            | ["v1", "instances", _, "pause" | "resume" | "offload"],
        ) => Response::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => Response::error(StatusCode::NOT_FOUND, "no such endpoint"),
    }
}

/// What `/v1/instance-files` and the instance changes answer on a relay without one.
const NO_INSTANCES_DIR: &str =
    "this relay has no relay.instances_dir: instances are added and removed there";

/// The refusal of a request that adds or removes instances, if it must be refused: such a
/// request needs a token even on loopback (any local process could otherwise point an
/// instance's driver at a program of its choice), and the instances directory.
fn changes_instances(state: &AdminState) -> Option<Response> {
    if state.token.is_none() {
        state.metrics.admin_refused(AdminRefusal::token);
        return Some(Response::error(
            StatusCode::FORBIDDEN,
            "adding or removing instances needs relay.admin_token_file (a bearer token)",
        ));
    }
    if state.instance_dir.is_none() {
        return Some(Response::error(StatusCode::NOT_FOUND, NO_INSTANCES_DIR));
    }
    None
}

/// `PUT /v1/instances/{name}`: checks `body` as instance `name`'s file, writes it, and
/// answers once the scan that follows has started it (201), or when the previous definition
/// must drain first (202). A file the relay could not start (its listen address in use) is
/// taken back: what was there before is restored.
async fn put_instance(state: &AdminState, name: &str, body: &[u8]) -> Response {
    let Some(dir) = &state.instance_dir else {
        return Response::error(StatusCode::NOT_FOUND, NO_INSTANCES_DIR);
    };
    if state
        .registry
        .get(name)
        .is_some_and(|r| r.origin == Origin::ConfigFile)
    {
        return Response::error(
            StatusCode::CONFLICT,
            &format!(
                "instance '{name}' is an [[instance]] of the configuration file: change it there \
                 and restart the relay"
            ),
        );
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return Response::error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text");
    };
    if let Err(problem) = dir.check(name, text) {
        return Response::error(StatusCode::BAD_REQUEST, &problem.to_string());
    }
    let _one_at_a_time = dir.one_change().await;
    let before = match dir.write(name, text).await {
        Ok(before) => before,
        Err(e) => return Response::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    match dir.scan_for(name).await {
        FileState::Running => match state.registry.get(name) {
            Some(r) => Response::json(StatusCode::CREATED, &registered_json(&r, false)),
            None => Response::error(StatusCode::CONFLICT, "removed again meanwhile"),
        },
        FileState::WaitingForDrain => Response::json(
            StatusCode::ACCEPTED,
            &WaitingJson {
                name: name.to_owned(),
                waiting_for: "the previous definition's connections to end".to_owned(),
                open: state
                    .registry
                    .draining(name)
                    .map_or(0, |r| r.open_connections()),
            },
        ),
        FileState::Absent => {
            Response::error(StatusCode::CONFLICT, "the file was removed meanwhile")
        }
        FileState::Problem(problem) => {
            if let Err(e) = dir.restore(name, before.as_deref()).await {
                tracing::error!(instance = name, error = %e, "cannot take back an instance file the relay could not use");
            }
            dir.scan().await;
            Response::error(StatusCode::UNPROCESSABLE_ENTITY, &problem)
        }
    }
}

/// `DELETE /v1/instances/{name}`: removes its file and drains it (or cuts its connections).
async fn delete_instance(state: &AdminState, name: &str, force: bool) -> Response {
    let Some(dir) = &state.instance_dir else {
        return Response::error(StatusCode::NOT_FOUND, NO_INSTANCES_DIR);
    };
    let _one_at_a_time = dir.one_change().await;
    match dir.remove(name, force).await {
        Ok(removal) => Response::json(
            StatusCode::ACCEPTED,
            &RemovedJson {
                name: name.to_owned(),
                open: removal.open,
                forced: removal.forced,
            },
        ),
        Err(e @ RemoveError::NotFound(_)) => Response::error(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e @ RemoveError::ConfigFile(_)) => {
            Response::error(StatusCode::CONFLICT, &e.to_string())
        }
        Err(e @ RemoveError::File(..)) => {
            Response::error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
        }
    }
}

/// Whether a `Host` header value names the address the request arrived on (`local`) or
/// loopback: `localhost`, `127.0.0.1`, `[::1]` (any loopback address), each with or without
/// `local`'s port. Anything else, names above all, is what DNS rebinding sends.
#[must_use]
pub fn host_allowed(host: &str, local: SocketAddr) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return false;
        };
        match after {
            "" => (ip, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (ip, Some(p)),
                None => return false,
            },
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if let Some(port) = port {
        if port.parse::<u16>().ok() != Some(local.port()) {
            return false;
        }
    }
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let ip: Option<std::net::IpAddr> = if host.starts_with('[') {
        name.parse::<std::net::Ipv6Addr>().ok().map(Into::into)
    } else {
        name.parse::<std::net::Ipv4Addr>().ok().map(Into::into)
    };
    ip.is_some_and(|ip| ip.is_loopback() || ip == local.ip())
}

/// Whether a mutating request may come from where its `Origin` and `Sec-Fetch-Site` headers
/// say: from no browser at all (neither header: the CLI, curl, scripts), or from a page of
/// the admin API itself (`Origin: http://<host>`). Browsers send `Origin` with every POST, so a
/// form or `fetch` on any other page is refused.
#[must_use]
pub fn same_origin(origin: Option<&str>, fetch_site: Option<&str>, host: &str) -> bool {
    if let Some(site) = fetch_site {
        if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
            return false;
        }
    }
    origin.is_none_or(|o| {
        o.strip_prefix("http://")
            .is_some_and(|h| h.eq_ignore_ascii_case(host))
    })
}

/// The range of a usage report, as asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageRange {
    /// Start (Unix ms), inclusive; the ledger's beginning when not given.
    pub from_ms: Option<u64>,
    /// End (Unix ms), exclusive; now when not given.
    pub to_ms: Option<u64>,
}

impl UsageRange {
    /// Parses the `from` and `to` query parameters.
    ///
    /// # Errors
    /// [`RangeError`], whose `Display` is the message for a 400.
    pub fn parse(from: Option<&str>, to: Option<&str>) -> Result<Self, RangeError> {
        let time = |param: &'static str, text: Option<&str>| {
            text.map(timefmt::parse_utc)
                .transpose()
                .map_err(|source| RangeError::Time { param, source })
        };
        let (from_ms, to_ms) = (time("from", from)?, time("to", to)?);
        if let (Some(from_ms), Some(to_ms)) = (from_ms, to_ms) {
            if from_ms > to_ms {
                return Err(RangeError::Reversed { from_ms, to_ms });
            }
        }
        Ok(Self { from_ms, to_ms })
    }
}

/// Why a usage range was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeError {
    /// `from` or `to` is not a time.
    Time {
        /// The parameter.
        param: &'static str,
        /// What is wrong with it.
        source: timefmt::TimeError,
    },
    /// `from` is after `to`.
    Reversed {
        /// `from`, Unix ms.
        from_ms: u64,
        /// `to`, Unix ms.
        to_ms: u64,
    },
}

impl std::fmt::Display for RangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Time { param, source } => write!(f, "{param}: {source}"),
            Self::Reversed { from_ms, to_ms } => write!(
                f,
                "from ({}) is after to ({}): the range is reversed",
                timefmt::format_utc(*from_ms),
                timefmt::format_utc(*to_ms)
            ),
        }
    }
}

impl std::error::Error for RangeError {}

/// The billing report for `range`, clamped to what the ledger can hold: nothing before its
/// first record, nothing after `now_ms` (the future is not billed yet), at most `max_rows`.
/// Compute (`events`) and storage (`storage`) are settled on the same rows.
///
/// # Errors
/// [`ledger::TooManyRows`] when the clamped range still needs more than `max_rows` rows.
pub fn usage(
    events: &[ledger::Event],
    storage: &[ledger::StorageEvent],
    range: UsageRange,
    now_ms: u64,
    max_rows: usize,
) -> Result<Vec<UsageJson>, ledger::TooManyRows> {
    let first = ledger::first_event_ms(events)
        .into_iter()
        .chain(storage.iter().map(|r| r.at_ms).min())
        .min();
    let Some(first) = first else {
        return Ok(Vec::new());
    };
    let from_ms = range.from_ms.unwrap_or(0).max(first);
    let to_ms = range.to_ms.unwrap_or(now_ms).min(now_ms);
    if from_ms >= to_ms {
        return Ok(Vec::new());
    }
    let compute = ledger::bill(events, from_ms, to_ms, max_rows)?;
    let stored = ledger::storage_hours(storage, from_ms, to_ms, max_rows)?;
    let mut rows: std::collections::BTreeMap<(String, u64), UsageJson> = compute
        .into_iter()
        .map(|((instance, hour_start_ms), used)| {
            let row = UsageJson {
                instance: instance.clone(),
                hour: timefmt::format_utc(hour_start_ms),
                hour_start_ms,
                billed_seconds: used.seconds,
                // Thousandths: exact in an f64 far beyond any report's size.
                ccu_seconds: used.milli_ccu_seconds as f64 / 1000.0,
                local_gib_hours: 0.0,
                stored_gib_hours: 0.0,
            };
            ((instance, hour_start_ms), row)
        })
        .collect();
    for ((instance, hour_start_ms), used) in stored {
        if rows.len() >= max_rows && !rows.contains_key(&(instance.clone(), hour_start_ms)) {
            return Err(ledger::TooManyRows { max_rows });
        }
        let row = rows
            .entry((instance.clone(), hour_start_ms))
            .or_insert_with(|| UsageJson {
                instance,
                hour: timefmt::format_utc(hour_start_ms),
                hour_start_ms,
                billed_seconds: 0,
                ccu_seconds: 0.0,
                local_gib_hours: 0.0,
                stored_gib_hours: 0.0,
            });
        row.local_gib_hours = round6(ledger::StorageUsage::gib_hours(used.local_byte_ms));
        row.stored_gib_hours = round6(ledger::StorageUsage::gib_hours(used.stored_byte_ms));
    }
    Ok(rows.into_values().collect())
}

/// Rounded up to millionths (a GiB-hour's millionth is 3.9 KiB for an hour): a row with any
/// storage shows it.
fn round6(x: f64) -> f64 {
    (x * 1e6).ceil() / 1e6
}

fn registered_json(r: &Registered, draining: bool) -> InstanceJson {
    let rt = &r.rt;
    let s = rt.instance.status();
    InstanceJson {
        defined_in: r.origin.describe(),
        draining: draining.then(|| r.open_connections()),
        name: s.name,
        state: s.phase.as_str().to_owned(),
        since: timefmt::format_utc(s.since_ms),
        since_ms: s.since_ms,
        route: rt.instance.config.route.as_str().to_owned(),
        kernel_route_installed: s.kernel_route_installed,
        connections: ConnectionsJson {
            direct: s.direct_connections,
            kernel: s.kernel_connections,
            perceptron: s.perceptron_connections,
        },
        parked_connections: s.parked_connections,
        wakes: s.wakes,
        last_resume_ms: s
            .last_resume
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        failure: s.failure,
        ccu: s.ccu.map(Ccu::as_f64),
        held_frozen_by: s
            .held_frozen_by
            .into_iter()
            .map(|(client, reason)| HeldJson {
                client,
                reason: reason.as_str().to_owned(),
            })
            .collect(),
        storage: s.storage.map(str::to_owned),
    }
}

/// Every block in force, for `GET /v1/blocks`.
fn blocks_json(budgets: &Budgets) -> Vec<BlockJson> {
    let now = std::time::Instant::now();
    let now_ms = crate::clock::now_ms();
    budgets
        .blocks(now)
        .into_iter()
        .map(|b| {
            let until_ms =
                now_ms.saturating_add(u64::try_from(b.remaining.as_millis()).unwrap_or(u64::MAX));
            let (source, user, instance) = match &b.subject {
                Subject::Source { ip, instance } => (Some(ip.to_string()), None, instance.clone()),
                Subject::User { instance, user } => (
                    None,
                    Some(String::from_utf8_lossy(user).into_owned()),
                    Some(instance.clone()),
                ),
            };
            BlockJson {
                scope: b.subject.scope().as_str().to_owned(),
                source,
                user,
                instance,
                budget: b.budget.as_str().to_owned(),
                count: b.count,
                until: timefmt::format_utc(until_ms),
                until_ms,
            }
        })
        .collect()
}

fn render_metrics(state: &AdminState, format: metrics::Format) -> String {
    for r in state.registry.all() {
        let s = r.rt.instance.status();
        state
            .metrics
            .set_pending(&s.name, state.admission.pending(r.slot));
        state
            .metrics
            .set_active(&s.name, Route::Direct, s.direct_connections);
        state
            .metrics
            .set_active(&s.name, Route::Perceptron, s.perceptron_connections);
        state.metrics.set_parked(&s.name, s.parked_connections);
        if let Some(place) = s.storage {
            state.metrics.set_data(
                &s.name,
                place,
                &crate::control::driver::offloading::Storage::NAMES,
            );
        }
    }
    let (blocks, untracked) = state.budgets.gauge(std::time::Instant::now());
    let blocks: Vec<_> = blocks
        .into_iter()
        .map(|((scope, budget), n)| ((scope.as_str(), budget.as_str()), n))
        .collect();
    state.metrics.set_budget_blocks(&blocks, untracked);
    state.metrics.render(format)
}

/// Serves the admin API on `listener` until `shutdown` fires; requests in flight then finish
/// (their connections are tracked by `tracker`, which the caller drains with a deadline).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let metrics = Arc::clone(&state.metrics);
    crate::listener::accept_until(
        listener,
        shutdown.clone(),
        "admin",
        &metrics,
        |stream, peer| {
            tracker.spawn(handle(stream, peer, Arc::clone(&state), shutdown.clone()));
        },
    )
    .await;
}

/// Serves one connection: one request, then close.
async fn handle(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
) {
    let longest_resume = state
        .registry
        .live()
        .iter()
        .map(|r| r.rt.instance.config.resume_timeout)
        .max()
        .unwrap_or_default();
    let backstop = EXCHANGE_TIMEOUT.saturating_add(longest_resume);
    let Ok(local) = stream.local_addr() else {
        return;
    };
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let state = Arc::clone(&state);
        async move {
            let (parts, incoming) = req.into_parts();
            let mut req = hyper::Request::from_parts(parts, ());
            if req.method() == Method::PUT {
                // Bounded in size and time: the token is checked only after.
                let read = Limited::new(incoming, MAX_BODY_BYTES).collect();
                match tokio::time::timeout(READ_TIMEOUT, read).await {
                    Ok(Ok(body)) => {
                        req.extensions_mut().insert(RequestBody(body.to_bytes()));
                    }
                    Ok(Err(_)) => {
                        let refusal = Response::error(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            &format!("the body must hold at most {MAX_BODY_BYTES} bytes"),
                        );
                        return Ok::<_, Infallible>(refusal.into_http());
                    }
                    Err(_) => {
                        let refusal = Response::error(
                            StatusCode::REQUEST_TIMEOUT,
                            &format!("the body must arrive within {}s", READ_TIMEOUT.as_secs()),
                        );
                        return Ok::<_, Infallible>(refusal.into_http());
                    }
                }
            }
            let response = respond(&state, &req, local).await;
            let path = crate::logsafe::Escaped(req.uri().path().as_bytes());
            let status = response.status.as_u16();
            // Reads (`relay status --watch`, Prometheus) would flood the relay's log at info;
            // what changes something stays there.
            if req.method() == hyper::Method::GET || req.method() == hyper::Method::HEAD {
                tracing::debug!(client = %peer, method = %req.method(), %path, status, "admin request");
            } else {
                tracing::info!(client = %peer, method = %req.method(), %path, status, "admin request");
            }
            Ok::<_, Infallible>(response.into_http())
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let exchange = async {
        tokio::select! {
            done = conn.as_mut() => return done,
            () = shutdown.cancelled() => {}
        }
        // Finish the request in flight (if any), then close.
        conn.as_mut().graceful_shutdown();
        conn.as_mut().await
    };
    match tokio::time::timeout(backstop, exchange).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(client = %peer, error = %e, "admin connection failed"),
        Err(_) => tracing::warn!(client = %peer, "admin connection cut after {backstop:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The admin listener's address in these tests.
    const LOCAL: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        9100,
    ));

    fn state(token: Option<&str>) -> AdminState {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state_in(&format!("state-{n}"), token)
    }

    /// A state whose ledger is in a directory of its own (`name`).
    fn state_in(name: &str, token: Option<&str>) -> AdminState {
        let dir = std::env::temp_dir().join(format!("relay-admin-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        AdminState {
            registry: Arc::default(),
            instance_dir: None,
            metrics: Arc::new(Metrics::default()),
            ledger: Arc::new(Ledger::open(&dir).unwrap()),
            token: token.map(|t| Zeroizing::new(t.to_owned())),
            admission: Admission::new(
                crate::limits::PendingCaps {
                    per_relay: 1,
                    per_source: 1,
                },
                Vec::new(),
            ),
            budgets: Arc::new(Budgets::new(crate::config::BudgetSettings::default())),
            fleet: None,
            keys: Arc::new(LiveKeyRing::fixed(
                authplugin::KeyRing::new(vec![authplugin::PerceptronKey::generate(
                    authplugin::KeyId::new("k1").unwrap(),
                    &mut rand::rngs::OsRng,
                )])
                .unwrap(),
            )),
        }
    }

    fn request(method: &str, uri: &str, auth: Option<&str>) -> hyper::Request<()> {
        request_with(method, uri, auth, &[("host", "127.0.0.1:9100")])
    }

    fn request_with(
        method: &str,
        uri: &str,
        auth: Option<&str>,
        headers: &[(&str, &str)],
    ) -> hyper::Request<()> {
        let mut b = hyper::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        b.body(()).unwrap()
    }

    #[tokio::test]
    async fn refuses_a_missing_or_wrong_token() {
        let state = state(Some("0123456789abcdef"));
        for auth in [
            None,
            Some("Bearer 0123456789abcdeX"),
            Some("0123456789abcdef"),
        ] {
            let r = respond(&state, &request("GET", "/v1/instances", auth), LOCAL).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{auth:?}");
            let http = r.into_http();
            assert_eq!(http.headers()["www-authenticate"], "Bearer");
        }
        let ok = respond(
            &state,
            &request("GET", "/v1/instances", Some("Bearer 0123456789abcdef")),
            LOCAL,
        )
        .await;
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.body, "[]\n");
    }

    #[tokio::test]
    async fn routes_by_method_and_path() {
        let state = state(None);
        for (method, uri, status) in [
            ("GET", "/v1/instances", StatusCode::OK),
            ("GET", "/v1/relay", StatusCode::OK),
            ("GET", "/metrics", StatusCode::OK),
            (
                "GET",
                "/v1/usage?from=2025-11-29&to=1764424800",
                StatusCode::OK,
            ),
            ("GET", "/v1/usage?from=yesterday", StatusCode::BAD_REQUEST),
            (
                "POST",
                "/v1/instances/nope/pause?force=true",
                StatusCode::NOT_FOUND,
            ),
            (
                "GET",
                "/v1/instances/demo/pause",
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            ("DELETE", "/metrics", StatusCode::METHOD_NOT_ALLOWED),
            ("GET", "/admin", StatusCode::NOT_FOUND),
        ] {
            let r = respond(&state, &request(method, uri, None), LOCAL).await;
            assert_eq!(r.status, status, "{method} {uri}: {}", r.body);
        }
    }

    #[tokio::test]
    async fn serves_one_request_per_connection_and_bounds_the_head() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let state = Arc::new(state(None));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        tokio::spawn(serve(listener, state, shutdown.clone(), tracker.clone()));
        let exchange = |raw: Vec<u8>| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&raw).await.unwrap();
            let mut out = String::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
                .await
                .unwrap()
                .unwrap();
            out
        };
        let ok =
            exchange(format!("GET /v1/instances HTTP/1.1\r\nHost: {addr}\r\n\r\n").into_bytes())
                .await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("connection: close\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\n[]\n"), "{ok}");
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD_BYTES + 100, b'a');
        let too_large = exchange(big).await;
        assert!(too_large.starts_with("HTTP/1.1 431 "), "{too_large}");
        let rebound =
            exchange(b"GET /v1/instances HTTP/1.1\r\nHost: evil.example\r\n\r\n".to_vec()).await;
        assert!(rebound.starts_with("HTTP/1.1 403 "), "{rebound}");
        let garbage = exchange(b"\x16\x03\x01 garbage\r\n\r\n".to_vec()).await;
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
        shutdown.cancel();
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn usage_up_to_the_year_9999_is_clamped_to_now() {
        // The request that OOM-killed the relay: an instance still running, billed "up to"
        // the end of the calendar (one row per hour, ~70 million rows).
        let state = state_in("far-future", None);
        let started_ms = crate::clock::now_ms() - 90 * 60_000;
        std::fs::write(state.ledger.path(), format!("{started_ms} demo running\n")).unwrap();
        let started = std::time::Instant::now();
        let r = respond(
            &state,
            &request("GET", "/v1/usage?to=9999-12-31", None),
            LOCAL,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let rows: Vec<UsageJson> = serde_json::from_str(&r.body).unwrap();
        // Running for 90 minutes: two or three hourly rows, not one per hour until 9999.
        assert!((2..=3).contains(&rows.len()), "{rows:?}");
        let billed: u64 = rows.iter().map(|u| u.billed_seconds).sum();
        assert!((5_400..=5_403).contains(&billed), "{billed}");
        assert!(
            rows.iter()
                .all(|u| u.hour_start_ms <= crate::clock::now_ms())
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        let r = respond(
            &state,
            &request("GET", "/v1/usage?to=18446744073709551", None),
            LOCAL,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }

    #[tokio::test]
    async fn refuses_a_reversed_range_with_a_clear_message() {
        let state = state_in("reversed", None);
        let r = respond(
            &state,
            &request("GET", "/v1/usage?from=2026-02-01&to=2026-01-01", None),
            LOCAL,
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.body.contains(
                "from (2026-02-01T00:00:00Z) is after to (2026-01-01T00:00:00Z): the range is reversed"
            ),
            "{}",
            r.body
        );
        let metrics = state.metrics.render(metrics::Format::Prometheus);
        assert!(
            metrics.contains("relay_admin_refused_total{reason=\"range\"} 1"),
            "{metrics}"
        );
    }

    #[test]
    fn a_report_past_its_row_cap_is_refused_and_the_range_clamped_to_the_ledger() {
        let hour = ledger::HOUR_MS;
        let events = [ledger::Event {
            at_ms: 10 * hour,
            instance: "demo".into(),
            state: crate::lifecycle::Phase::Running,
            rate_milli: 1_000,
        }];
        let all = UsageRange {
            from_ms: None,
            to_ms: None,
        };
        // Ten hours of running, now = 20 h: ten rows, none before the first record.
        let rows = usage(&events, &[], all, 20 * hour, 10).unwrap();
        assert_eq!(rows.len(), 10);
        assert_eq!(rows.first().unwrap().hour_start_ms, 10 * hour);
        assert_eq!(
            usage(&events, &[], all, 21 * hour, 10),
            Err(ledger::TooManyRows { max_rows: 10 })
        );
        // A range wholly before the ledger or after now is empty, not an error.
        let before = UsageRange {
            from_ms: Some(0),
            to_ms: Some(hour),
        };
        assert_eq!(usage(&events, &[], before, 20 * hour, 10), Ok(Vec::new()));
        let after = UsageRange {
            from_ms: Some(30 * hour),
            to_ms: Some(u64::MAX),
        };
        assert_eq!(usage(&events, &[], after, 20 * hour, 10), Ok(Vec::new()));
        assert_eq!(usage(&[], &[], all, 20 * hour, 10), Ok(Vec::new()));

        // Storage shares the compute's rows and adds its own: an offloaded instance with no
        // compute time still has a row for each hour its data is held.
        let gib = 1u64 << 30;
        let storage = [ledger::StorageEvent {
            at_ms: 10 * hour,
            instance: "offloaded".into(),
            local_bytes: 0,
            stored_bytes: gib,
        }];
        let rows = usage(&events, &storage, all, 12 * hour, 10).unwrap();
        let rows: Vec<(&str, u64, u64, f64)> = rows
            .iter()
            .map(|r| {
                let hour = r.hour_start_ms / hour;
                (
                    r.instance.as_str(),
                    hour,
                    r.billed_seconds,
                    r.stored_gib_hours,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("demo", 10, 3600, 0.0),
                ("demo", 11, 3600, 0.0),
                ("offloaded", 10, 0, 1.0),
                ("offloaded", 11, 0, 1.0)
            ]
        );
    }

    #[test]
    fn accepts_only_hosts_naming_the_admin_address_or_loopback() {
        let any: SocketAddr = "10.1.2.3:9100".parse().unwrap();
        for (host, local, ok) in [
            ("127.0.0.1:9100", LOCAL, true),
            ("127.0.0.1", LOCAL, true),
            ("localhost:9100", LOCAL, true),
            ("LOCALHOST", LOCAL, true),
            ("[::1]:9100", LOCAL, true),
            ("[::1]", LOCAL, true),
            ("127.0.0.2:9100", LOCAL, true),
            ("10.1.2.3:9100", any, true),
            ("10.1.2.3", any, true),
            ("localhost:9100", any, true),
            // DNS rebinding: the attacker's own name, resolving to us.
            ("evil.example:9100", LOCAL, false),
            ("evil.example", LOCAL, false),
            ("localhost.evil.example", LOCAL, false),
            ("127.0.0.1.nip.io:9100", LOCAL, false),
            // Another port, another address, malformed.
            ("127.0.0.1:9101", LOCAL, false),
            ("localhost:", LOCAL, false),
            ("10.1.2.4:9100", any, false),
            ("10.1.2.3:9100", LOCAL, false),
            ("[::1", LOCAL, false),
            ("[::1]x", LOCAL, false),
            ("[127.0.0.1]", LOCAL, false),
            ("::1", LOCAL, false),
            ("", LOCAL, false),
        ] {
            assert_eq!(host_allowed(host, local), ok, "{host} on {local}");
        }
    }

    #[tokio::test]
    async fn refuses_rebound_hosts_and_cross_origin_changes() {
        let state = state(None);
        let host = ("host", "127.0.0.1:9100");
        for (method, uri, headers, status) in [
            (
                "GET",
                "/v1/instances",
                vec![("host", "evil.example")],
                StatusCode::FORBIDDEN,
            ),
            ("GET", "/v1/instances", vec![], StatusCode::FORBIDDEN),
            (
                "POST",
                "/v1/instances/demo/pause?force=true",
                vec![host, ("origin", "http://evil.example")],
                StatusCode::FORBIDDEN,
            ),
            (
                "POST",
                "/v1/instances/demo/pause",
                vec![host, ("origin", "null")],
                StatusCode::FORBIDDEN,
            ),
            (
                "POST",
                "/v1/instances/demo/resume",
                vec![host, ("origin", "https://127.0.0.1:9100")],
                StatusCode::FORBIDDEN,
            ),
            (
                "POST",
                "/v1/instances/demo/resume",
                vec![host, ("sec-fetch-site", "cross-site")],
                StatusCode::FORBIDDEN,
            ),
            // Same origin, or no browser at all, reach the router (no such instance here).
            (
                "POST",
                "/v1/instances/demo/pause",
                vec![host, ("origin", "http://127.0.0.1:9100")],
                StatusCode::NOT_FOUND,
            ),
            (
                "POST",
                "/v1/instances/demo/pause",
                vec![host],
                StatusCode::NOT_FOUND,
            ),
            // A cross-origin read cannot change anything, and the browser hides its answer.
            (
                "GET",
                "/v1/instances",
                vec![host, ("origin", "http://evil.example")],
                StatusCode::OK,
            ),
        ] {
            let r = respond(&state, &request_with(method, uri, None, &headers), LOCAL).await;
            assert_eq!(r.status, status, "{method} {uri} {headers:?}: {}", r.body);
        }
        let metrics = state.metrics.render(metrics::Format::Prometheus);
        assert!(
            metrics.contains("relay_admin_refused_total{reason=\"host\"} 2"),
            "{metrics}"
        );
        assert!(
            metrics.contains("relay_admin_refused_total{reason=\"origin\"} 4"),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn lists_and_clears_budget_blocks() {
        let state = state(Some("a-token-of-enough-length"));
        let auth = Some("Bearer a-token-of-enough-length");
        let now = std::time::Instant::now();
        for _ in 0..20 {
            state
                .budgets
                .record_failed_login("10.0.0.7".parse().unwrap(), "demo", b"ro ot", now);
        }
        let r = respond(&state, &request("GET", "/v1/blocks", auth), LOCAL).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let blocks: Vec<BlockJson> = serde_json::from_str(&r.body).unwrap();
        assert_eq!(blocks.len(), 1, "{blocks:?}");
        assert_eq!(blocks[0].scope, "source");
        assert_eq!(blocks[0].source.as_deref(), Some("10.0.0.7"));
        assert_eq!(blocks[0].budget, "failed_logins");
        assert_eq!(blocks[0].count, 20);
        let metrics = render_metrics(&state, metrics::Format::Prometheus);
        assert!(
            metrics.contains("relay_budget_blocks{scope=\"source\",budget=\"failed_logins\"} 1"),
            "{metrics}"
        );
        // Clearing changes something: the token is required.
        let r = respond(&state, &request("DELETE", "/v1/blocks", None), LOCAL).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let r = respond(
            &state,
            &request("DELETE", "/v1/blocks?source=nope", auth),
            LOCAL,
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = respond(
            &state,
            &request("DELETE", "/v1/blocks?source=10.0.0.8", auth),
            LOCAL,
        )
        .await;
        assert_eq!(r.body.trim(), "{\n  \"cleared\": 0\n}");
        let r = respond(
            &state,
            &request("DELETE", "/v1/blocks?source=10.0.0.7", auth),
            LOCAL,
        )
        .await;
        assert_eq!(r.body.trim(), "{\n  \"cleared\": 1\n}");
        assert!(state.budgets.blocks(now).is_empty());
        // A user name with a space, percent-encoded; the user had 20 of 100 failures: nothing
        // blocked, but its counts go.
        let r = respond(
            &state,
            &request("DELETE", "/v1/blocks?user=ro%20ot&instance=demo", auth),
            LOCAL,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
    }
}
