//! The admin HTTP API (loopback by default, optional bearer token): status, pause, resume,
//! usage and Prometheus metrics. A deliberately small HTTP/1.1 server: one request per
//! connection, bounded request head, a deadline on every read, `Connection: close`.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/v1/instances` | JSON array of instance status |
//! | POST | `/v1/instances/{name}/pause` (`?force=true` cuts open connections) | 200, 404, 409 |
//! | POST | `/v1/instances/{name}/resume` | 200 once running, 404, 503 |
//! | GET | `/v1/usage?from=T&to=T` | JSON array of billed seconds per instance and hour |
//! | GET | `/metrics` | Prometheus text format |

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use subtle_eq::ct_eq;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zeroize::Zeroizing;

use crate::control::PauseError;
use crate::ledger::{self, Ledger};
use crate::metrics::{self, Metrics, Route};
use crate::runtime::InstanceRuntime;
use crate::timefmt;

/// Longest request head accepted.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Deadline for reading a request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the admin API serves.
#[derive(Debug)]
pub struct AdminState {
    /// Every instance.
    pub runtimes: Vec<Arc<InstanceRuntime>>,
    /// Relay metrics.
    pub metrics: Arc<Metrics>,
    /// The usage ledger.
    pub ledger: Arc<Ledger>,
    /// The bearer token requests must carry, if one is configured.
    pub token: Option<Zeroizing<String>>,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// Query parameters in order.
    pub query: Vec<(String, String)>,
    /// The `Authorization` header, if present.
    pub authorization: Option<String>,
    /// The `Accept` header, if present.
    pub accept: Option<String>,
}

/// Why a request head could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Not HTTP/1.x, or a malformed request line.
    Malformed,
    /// The head exceeds [`MAX_HEAD_BYTES`].
    TooLarge,
}

/// Parses a request head once it is complete (`Ok(None)`: need more bytes).
///
/// # Errors
/// [`RequestError`] for a malformed or oversized head.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, RequestError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD_BYTES {
            Err(RequestError::TooLarge)
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(buf.get(..end).unwrap_or_default())
        .map_err(|_| RequestError::Malformed)?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err(RequestError::Malformed);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(RequestError::Malformed);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    let headers: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once(':')).collect();
    let header = |wanted: &str| {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.trim().to_owned())
    };
    Ok(Some(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query,
        authorization: header("authorization"),
        accept: header("accept"),
    }))
}

/// A response to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl Response {
    fn json<T: Serialize>(status: u16, value: &T) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into()) + "\n",
        }
    }

    fn error(status: u16, message: &str) -> Self {
        Self::json(status, &serde_json::json!({ "error": message }))
    }

    fn to_bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            405 => "Method Not Allowed",
            409 => "Conflict",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "Status",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.status == 401 {
            out.push_str("WWW-Authenticate: Bearer\r\n");
        }
        out.push_str("\r\n");
        out.push_str(&self.body);
        out.into_bytes()
    }
}

#[derive(Debug, Serialize)]
struct InstanceJson {
    name: String,
    state: &'static str,
    since: String,
    since_ms: u64,
    connections: ConnectionsJson,
    wakes: u64,
    last_resume_ms: Option<u64>,
    failure: Option<String>,
}

#[derive(Debug, Serialize)]
struct ConnectionsJson {
    direct: usize,
    perceptron: usize,
}

/// One line of the usage report.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct UsageJson {
    /// The instance.
    pub instance: String,
    /// The hour's start, UTC.
    pub hour: String,
    /// The hour's start in Unix ms.
    pub hour_start_ms: u64,
    /// Billed seconds in that hour.
    pub billed_seconds: u64,
}

/// Answers one request.
pub async fn respond(state: &AdminState, req: &Request) -> Response {
    if let Some(token) = &state.token {
        let given = req
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !ct_eq(given.as_bytes(), token.as_bytes()) {
            return Response::error(401, "missing or wrong bearer token");
        }
    }
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["metrics"]) => {
            let format = metrics::Format::negotiate(req.accept.as_deref());
            Response {
                status: 200,
                content_type: format.content_type(),
                body: render_metrics(state, format),
            }
        }
        ("GET", ["v1", "instances"]) => {
            let list: Vec<InstanceJson> =
                state.runtimes.iter().map(|rt| instance_json(rt)).collect();
            Response::json(200, &list)
        }
        ("POST", ["v1", "instances", name, action @ ("pause" | "resume")]) => {
            let Some(rt) = state
                .runtimes
                .iter()
                .find(|rt| rt.instance.config.name == *name)
            else {
                return Response::error(404, &format!("no instance named '{name}'"));
            };
            if *action == "pause" {
                let force = req
                    .query
                    .iter()
                    .any(|(k, v)| k == "force" && (v == "true" || v == "1"));
                match rt.instance.pause(force, "admin request").await {
                    Ok(()) => Response::json(200, &instance_json(rt)),
                    Err(e @ PauseError::Busy(_)) => Response::error(409, &e.to_string()),
                    Err(e @ PauseError::NotRunning(_)) => Response::error(409, &e.to_string()),
                }
            } else {
                match rt.instance.ensure_running().await {
                    Ok(_) => Response::json(200, &instance_json(rt)),
                    Err(e) => Response::error(503, &e.to_string()),
                }
            }
        }
        ("GET", ["v1", "usage"]) => {
            let param = |k: &str| {
                req.query
                    .iter()
                    .find(|(q, _)| q == k)
                    .map(|(_, v)| v.as_str())
            };
            let from = match param("from").map(timefmt::parse_utc).transpose() {
                Ok(v) => v.unwrap_or(0),
                Err(e) => return Response::error(400, &format!("from: {e}")),
            };
            let to = match param("to").map(timefmt::parse_utc).transpose() {
                Ok(v) => v.unwrap_or_else(ledger::now_ms),
                Err(e) => return Response::error(400, &format!("to: {e}")),
            };
            match state.ledger.read() {
                Ok((events, _skipped)) => Response::json(200, &usage(&events, from, to)),
                Err(e) => Response::error(503, &format!("cannot read the ledger: {e}")),
            }
        }
        (
            _,
            ["metrics"]
            | ["v1", "instances"]
            | ["v1", "usage"]
            | ["v1", "instances", _, "pause" | "resume"],
        ) => Response::error(405, "method not allowed"),
        _ => Response::error(404, "no such endpoint"),
    }
}

/// The billing report for `[from, to)`.
#[must_use]
pub fn usage(events: &[ledger::Event], from_ms: u64, to_ms: u64) -> Vec<UsageJson> {
    ledger::bill(events, from_ms, to_ms)
        .into_iter()
        .map(|((instance, hour_start_ms), billed_seconds)| UsageJson {
            instance,
            hour: timefmt::format_utc(hour_start_ms),
            hour_start_ms,
            billed_seconds,
        })
        .collect()
}

fn instance_json(rt: &InstanceRuntime) -> InstanceJson {
    let s = rt.instance.status();
    InstanceJson {
        name: s.name,
        state: s.phase.as_str(),
        since: timefmt::format_utc(s.since_ms),
        since_ms: s.since_ms,
        connections: ConnectionsJson {
            direct: s.direct_connections,
            perceptron: s.perceptron_connections,
        },
        wakes: s.wakes,
        last_resume_ms: s
            .last_resume
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        failure: s.failure,
    }
}

fn render_metrics(state: &AdminState, format: metrics::Format) -> String {
    for rt in &state.runtimes {
        let s = rt.instance.status();
        state
            .metrics
            .set_active(&s.name, Route::direct, s.direct_connections);
        state
            .metrics
            .set_active(&s.name, Route::perceptron, s.perceptron_connections);
    }
    state.metrics.render(format)
}

/// Serves the admin API on `listener` until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    crate::listener::accept_until(listener, shutdown, "admin", |stream, peer| {
        tracker.spawn(handle(stream, peer, Arc::clone(&state)));
    })
    .await;
}

async fn handle(mut stream: TcpStream, peer: SocketAddr, state: Arc<AdminState>) {
    let mut buf = Vec::with_capacity(1024);
    let request = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            match parse_request(&buf) {
                Ok(Some(r)) => return Ok(r),
                Err(e) => return Err(e),
                Ok(None) => {}
            }
            let mut chunk = [0u8; 2048];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return Err(RequestError::Malformed),
                Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            }
        }
    })
    .await;
    let response = match request {
        Ok(Ok(req)) => {
            let r = respond(&state, &req).await;
            tracing::info!(client = %peer, method = %req.method, path = %req.path, status = r.status, "admin request");
            r
        }
        Ok(Err(RequestError::TooLarge)) => Response::error(431, "request head too large"),
        Ok(Err(RequestError::Malformed)) => Response::error(400, "malformed request"),
        Err(_) => Response::error(400, "request not received in time"),
    };
    let _ = stream.write_all(&response.to_bytes()).await;
    let _ = stream.shutdown().await;
}

mod subtle_eq {
    /// Constant-time equality for the bearer token (length is not secret).
    pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_line_query_and_authorization() {
        let raw = b"POST /v1/instances/demo/pause?force=true HTTP/1.1\r\nHost: x\r\nauthorization: Bearer abc\r\n\r\n";
        let r = parse_request(raw).unwrap().unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/instances/demo/pause");
        assert_eq!(r.query, vec![("force".to_owned(), "true".to_owned())]);
        assert_eq!(r.authorization.as_deref(), Some("Bearer abc"));
    }

    #[test]
    fn waits_for_a_complete_head_and_bounds_it() {
        assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost"), Ok(None));
        assert_eq!(
            parse_request(&vec![b'a'; MAX_HEAD_BYTES + 1]),
            Err(RequestError::TooLarge)
        );
        assert_eq!(
            parse_request(b"\x16\x03\x01 garbage\r\n\r\n"),
            Err(RequestError::Malformed)
        );
        assert_eq!(
            parse_request(b"GET relative HTTP/1.1\r\n\r\n"),
            Err(RequestError::Malformed)
        );
    }

    #[test]
    fn constant_time_comparison_is_correct() {
        assert!(subtle_eq::ct_eq(b"token", b"token"));
        assert!(!subtle_eq::ct_eq(b"token", b"tokem"));
        assert!(!subtle_eq::ct_eq(b"token", b"token2"));
    }
}
