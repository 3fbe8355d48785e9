//! The http driver: an external control plane starts and stops the compute. The relay sends
//! JSON over plain HTTP/1.1 with hyper's client (chunked or sized answers; put it on a private
//! network or loopback; use a bearer token):
//!
//! | request | body | expected answer |
//! |---|---|---|
//! | `POST {url}/start` | `{"instance": "<name>"}` | any 2xx once the compute is starting |
//! | `POST {url}/stop` | `{"instance": "<name>"}` | any 2xx once it is stopping |
//! | `GET {url}/status?instance=<name>` | none | 2xx with `{"running": true \| false}`, and `"cpu_seconds": <f64>` (CPU time used in all) for the autoscaler |
//! | `POST {url}/scale` | `{"instance": "<name>", "ccu": 1.5}` | any 2xx once resized (`[instance.capacity]`; on Kubernetes an in-place pod resize) |
//!
//! After `start` the relay waits for the compute's greeting itself, as with every driver.

use std::fmt;

use hyper::{Method, StatusCode};

use super::{CapacityError, ExternalControl, RunningCompute, Watched};
use crate::config::HttpSpec;
use crate::http_client::{self, HttpError};

/// Calls an external control plane.
#[derive(Debug, Clone)]
pub struct HttpDriver {
    /// The instance.
    pub instance: String,
    /// Where the compute listens.
    pub compute: crate::compute_conn::ComputeTarget,
    /// The control plane.
    pub spec: HttpSpec,
}

/// Why a call to the control plane failed.
#[derive(Debug)]
pub enum ControlPlaneError {
    /// No answer.
    Unanswered {
        /// `POST`, `GET`.
        method: Method,
        /// The request target.
        target: String,
        /// Why.
        source: HttpError,
    },
    /// An answer other than 2xx.
    Refused {
        /// `start` or `stop`.
        action: &'static str,
        /// The status.
        status: StatusCode,
        /// The body, trimmed.
        body: String,
    },
}

impl fmt::Display for ControlPlaneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unanswered {
                method,
                target,
                source,
            } => write!(f, "{method} {target}: {source}"),
            Self::Refused {
                action,
                status,
                body,
            } => write!(
                f,
                "{action}: HTTP {}: {}",
                status.as_u16(),
                // The control plane's text goes into the relay's log: escaped, so a body with
                // a newline or a terminal escape cannot forge a log line.
                crate::logsafe::Escaped(body.as_bytes())
            ),
        }
    }
}

impl std::error::Error for ControlPlaneError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unanswered { source, .. } => Some(source),
            Self::Refused { .. } => None,
        }
    }
}

impl HttpDriver {
    /// One request, within the spec's `request_timeout`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        json: Option<String>,
    ) -> Result<http_client::Reply, ControlPlaneError> {
        let target = format!("{}{path}", self.spec.base_path);
        let request = http_client::Request {
            method: method.clone(),
            addr: self.spec.addr,
            host: &self.spec.host,
            target: &target,
            token: self.spec.token.as_deref(),
            body: json.map(|j| ("application/json", j)),
            timeout: self.spec.request_timeout,
        };
        request
            .send()
            .await
            .map_err(|source| ControlPlaneError::Unanswered {
                method,
                target: target.clone(),
                source,
            })
    }

    async fn post(&self, action: &'static str) -> Result<(), ControlPlaneError> {
        let body = serde_json::json!({ "instance": self.instance }).to_string();
        let reply = self
            .call(Method::POST, &format!("/{action}"), Some(body))
            .await?;
        if reply.status.is_success() {
            Ok(())
        } else {
            Err(ControlPlaneError::Refused {
                action,
                status: reply.status,
                body: reply.body.trim().to_owned(),
            })
        }
    }
}

impl ExternalControl for HttpDriver {
    type Error = ControlPlaneError;

    fn instance(&self) -> &str {
        &self.instance
    }

    fn compute(&self) -> crate::compute_conn::ComputeTarget {
        self.compute
    }

    async fn request_start(&self) -> Result<(), ControlPlaneError> {
        self.post("start").await
    }

    async fn request_stop(&self) -> Result<(), ControlPlaneError> {
        self.post("stop").await
    }

    async fn request_scale(&self, ccu: crate::capacity::Ccu) -> Result<(), CapacityError> {
        let body =
            serde_json::json!({ "instance": self.instance, "ccu": ccu.as_f64() }).to_string();
        let reply = self
            .call(Method::POST, "/scale", Some(body))
            .await
            .map_err(|e| CapacityError::External(Box::new(e)))?;
        if reply.status.is_success() {
            Ok(())
        } else {
            Err(CapacityError::External(Box::new(
                ControlPlaneError::Refused {
                    action: "scale",
                    status: reply.status,
                    body: reply.body.trim().to_owned(),
                },
            )))
        }
    }

    async fn cpu_used(&self) -> Option<std::time::Duration> {
        let reply = self
            .call(
                Method::GET,
                &format!("/status?instance={}", self.instance),
                None,
            )
            .await
            .ok()
            .filter(|r| r.status.is_success())?;
        let seconds = serde_json::from_str::<serde_json::Value>(&reply.body)
            .ok()?
            .get("cpu_seconds")?
            .as_f64()?;
        std::time::Duration::try_from_secs_f64(seconds).ok()
    }

    async fn is_running(&self) -> bool {
        match self
            .call(
                Method::GET,
                &format!("/status?instance={}", self.instance),
                None,
            )
            .await
        {
            Ok(reply) if reply.status.is_success() => {
                serde_json::from_str::<serde_json::Value>(&reply.body)
                    .ok()
                    .and_then(|v| v.get("running").and_then(serde_json::Value::as_bool))
                    .unwrap_or(false)
            }
            _ => false,
        }
    }

    fn watched(&self) -> Box<dyn RunningCompute> {
        Watched::start(
            self,
            self.spec.poll_interval,
            1,
            "the control plane reports it is not running",
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_body_is_logged_escaped() {
        let e = super::ControlPlaneError::Refused {
            action: "start",
            status: hyper::StatusCode::BAD_GATEWAY,
            body: "no\n2026-12-03T00:00:00Z  INFO forged \x1b[2J".to_owned(),
        };
        let text = e.to_string();
        assert!(!text.contains('\n') && !text.contains('\x1b'), "{text}");
        assert!(text.starts_with("start: HTTP 502: no"), "{text}");
    }

    use super::super::Driver;
    use super::*;
    use std::time::Duration;

    use crate::http_client::tests::answer_once;

    fn driver(addr: std::net::SocketAddr) -> HttpDriver {
        HttpDriver {
            instance: "demo".into(),
            compute: crate::compute_conn::ComputeTarget {
                addr: "127.0.0.1:9".parse().unwrap(),
                proxy_protocol: false,
            },
            spec: HttpSpec {
                addr,
                host: "cp.test".into(),
                base_path: "/cp".into(),
                token: None,
                request_timeout: Duration::from_secs(5),
                poll_interval: Duration::from_secs(1),
            },
        }
    }

    #[tokio::test]
    async fn reads_a_chunked_status_reply_as_running() {
        let (addr, server) = answer_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              11\r\n{\"running\": true}\r\n0\r\n\r\n",
        )
        .await;
        assert!(driver(addr).is_running().await);
        let head = server.await.unwrap();
        assert!(
            head.starts_with("GET /cp/status?instance=demo HTTP/1.1\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn reports_a_refused_start_with_its_status() {
        let (addr, _server) =
            answer_once(b"HTTP/1.1 409 Conflict\r\nContent-Length: 5\r\n\r\nbusy\n").await;
        let err = driver(addr).post("start").await.unwrap_err();
        assert!(
            matches!(
                err,
                ControlPlaneError::Refused {
                    status: StatusCode::CONFLICT,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.to_string(), "start: HTTP 409: busy");
    }

    /// Before: a start the control plane had not answered when `resume_timeout` passed was
    /// dropped and stop never sent, so a compute it went on to start ran unwatched.
    #[tokio::test]
    async fn a_start_that_outlives_the_resume_timeout_is_followed_by_stop() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let plane = tokio::spawn(async move {
            let mut heads = Vec::new();
            let mut held = Vec::new();
            while heads.len() < 2 {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                if head.starts_with("POST /cp/start") {
                    // Never answered: the start outlives the wake's timeout.
                    held.push(s);
                } else {
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                        .await;
                }
                heads.push(head.lines().next().unwrap_or_default().to_owned());
            }
            heads
        });
        let e = Driver::start(&driver(addr), Duration::from_millis(300))
            .await
            .err()
            .unwrap();
        assert!(matches!(e, super::super::WakeError::Timeout(_)), "{e}");
        let heads = tokio::time::timeout(Duration::from_secs(5), plane)
            .await
            .expect("stop was never sent")
            .unwrap();
        assert_eq!(heads[1], "POST /cp/stop HTTP/1.1", "{heads:?}");
    }
}
