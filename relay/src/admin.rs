//! The admin HTTP API (loopback by default, optional bearer token): status, pause, resume,
//! usage and Prometheus metrics, served by hyper's HTTP/1.1 server. One request per connection
//! (`Connection: close`), a bounded request head, a deadline on the head and on the whole
//! exchange, and a graceful close of in-flight requests on shutdown. [`respond`] is the whole
//! API as a pure function of the request, so it is tested without sockets.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/v1/instances` | JSON array of instance status |
//! | POST | `/v1/instances/{name}/pause` (`?force=true` cuts open connections) | 200, 404, 409 |
//! | POST | `/v1/instances/{name}/resume` | 200 once running, 404, 503 |
//! | GET | `/v1/usage?from=T&to=T` | JSON array of billed seconds per instance and hour |
//! | GET | `/metrics` | Prometheus text 0.0.4, or OpenMetrics when the `Accept` header asks |

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use subtle::ConstantTimeEq as _;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zeroize::Zeroizing;

use crate::control::PauseError;
use crate::ledger::{self, Ledger};
use crate::metrics::{self, Metrics, Route};
use crate::runtime::InstanceRuntime;
use crate::timefmt;

/// Longest request head accepted (hyper answers 431 past it). Requests carry no body that
/// the API reads.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Deadline for receiving a request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Backstop for a whole exchange, answer included, on top of the longest `resume_timeout`
/// (a resume waits for it; a pause for the driver's stop). It only ends connections that would
/// otherwise stay open for ever (a client that never reads its answer).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(600);

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
        Self::json(status, &serde_json::json!({ "error": message }))
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

/// Answers one request (its body is never read).
pub async fn respond<B>(state: &AdminState, req: &hyper::Request<B>) -> Response {
    let header = |name: header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(token) = &state.token {
        let given = header(header::AUTHORIZATION)
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            return Response::error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
        }
    }
    let query: Vec<(&str, &str)> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    let param = |k: &str| query.iter().find(|(q, _)| *q == k).map(|(_, v)| *v);
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
        (&Method::GET, ["v1", "instances"]) => {
            let list: Vec<InstanceJson> =
                state.runtimes.iter().map(|rt| instance_json(rt)).collect();
            Response::json(StatusCode::OK, &list)
        }
        (&Method::POST, ["v1", "instances", name, action @ ("pause" | "resume")]) => {
            let Some(rt) = state
                .runtimes
                .iter()
                .find(|rt| rt.instance.config.name == *name)
            else {
                return Response::error(
                    StatusCode::NOT_FOUND,
                    &format!("no instance named '{name}'"),
                );
            };
            if *action == "pause" {
                let force = matches!(param("force"), Some("true" | "1"));
                match rt.instance.pause(force, "admin request").await {
                    Ok(()) => Response::json(StatusCode::OK, &instance_json(rt)),
                    Err(e @ (PauseError::Busy(_) | PauseError::NotRunning(_))) => {
                        Response::error(StatusCode::CONFLICT, &e.to_string())
                    }
                }
            } else {
                match rt.instance.ensure_running().await {
                    Ok(_) => Response::json(StatusCode::OK, &instance_json(rt)),
                    Err(e) => Response::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
                }
            }
        }
        (&Method::GET, ["v1", "usage"]) => {
            let from = match param("from").map(timefmt::parse_utc).transpose() {
                Ok(v) => v.unwrap_or(0),
                Err(e) => return Response::error(StatusCode::BAD_REQUEST, &format!("from: {e}")),
            };
            let to = match param("to").map(timefmt::parse_utc).transpose() {
                Ok(v) => v.unwrap_or_else(ledger::now_ms),
                Err(e) => return Response::error(StatusCode::BAD_REQUEST, &format!("to: {e}")),
            };
            match state.ledger.read() {
                Ok((events, _skipped)) => Response::json(StatusCode::OK, &usage(&events, from, to)),
                Err(e) => Response::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("cannot read the ledger: {e}"),
                ),
            }
        }
        (
            _,
            ["metrics"]
            | ["v1", "instances"]
            | ["v1", "usage"]
            | ["v1", "instances", _, "pause" | "resume"],
        ) => Response::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => Response::error(StatusCode::NOT_FOUND, "no such endpoint"),
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

/// Serves the admin API on `listener` until `shutdown` fires; requests in flight then finish
/// (their connections are tracked by `tracker`, which the caller drains with a deadline).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    crate::listener::accept_until(listener, shutdown.clone(), "admin", |stream, peer| {
        tracker.spawn(handle(stream, peer, Arc::clone(&state), shutdown.clone()));
    })
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
        .runtimes
        .iter()
        .map(|rt| rt.instance.config.resume_timeout)
        .max()
        .unwrap_or_default();
    let backstop = EXCHANGE_TIMEOUT.saturating_add(longest_resume);
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let state = Arc::clone(&state);
        async move {
            let response = respond(&state, &req).await;
            tracing::info!(client = %peer, method = %req.method(), path = %req.uri().path(), status = response.status.as_u16(), "admin request");
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

    fn state(token: Option<&str>) -> AdminState {
        let dir = std::env::temp_dir().join(format!("relay-admin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        AdminState {
            runtimes: Vec::new(),
            metrics: Arc::new(Metrics::default()),
            ledger: Arc::new(Ledger::open(&dir).unwrap()),
            token: token.map(|t| Zeroizing::new(t.to_owned())),
        }
    }

    fn request(method: &str, uri: &str, auth: Option<&str>) -> hyper::Request<()> {
        let mut b = hyper::Request::builder().method(method).uri(uri);
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
            let r = respond(&state, &request("GET", "/v1/instances", auth)).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{auth:?}");
            let http = r.into_http();
            assert_eq!(http.headers()["www-authenticate"], "Bearer");
        }
        let ok = respond(
            &state,
            &request("GET", "/v1/instances", Some("Bearer 0123456789abcdef")),
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
            let r = respond(&state, &request(method, uri, None)).await;
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
        let ok = exchange(b"GET /v1/instances HTTP/1.1\r\nHost: t\r\n\r\n".to_vec()).await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("connection: close\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\n[]\n"), "{ok}");
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD_BYTES + 100, b'a');
        let too_large = exchange(big).await;
        assert!(too_large.starts_with("HTTP/1.1 431 "), "{too_large}");
        let garbage = exchange(b"\x16\x03\x01 garbage\r\n\r\n".to_vec()).await;
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
        shutdown.cancel();
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .unwrap();
    }
}
