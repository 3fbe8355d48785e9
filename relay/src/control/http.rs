//! The http driver: an external control plane starts and stops the compute. The relay sends
//! JSON over plain HTTP/1.1 (put it on a private network or loopback; use a bearer token):
//!
//! | request | body | expected answer |
//! |---|---|---|
//! | `POST {url}/start` | `{"instance": "<name>"}` | any 2xx once the compute is starting |
//! | `POST {url}/stop` | `{"instance": "<name>"}` | any 2xx once it is stopping |
//! | `GET {url}/status?instance=<name>` | none | 2xx with `{"running": true \| false}` |
//!
//! After `start` the relay waits for the compute's greeting itself, as with every driver.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::driver::{BoxFuture, Driver, RunningCompute, WakeError, watch_running};
use super::readiness;
use crate::config::HttpSpec;

/// Longest answer read from the control plane.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

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

struct HttpCompute {
    driver: HttpDriver,
    exited: watch::Receiver<Option<String>>,
    stopping: Arc<AtomicBool>,
}

impl HttpDriver {
    /// One request; returns the status code and body.
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, String), String> {
        let target = format!("{}{path}", self.spec.base_path);
        let body = body.unwrap_or_default();
        let auth = self
            .spec
            .token
            .as_deref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let req = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.spec.host,
            body.len()
        );
        let exchange = async {
            let mut s = TcpStream::connect(self.spec.addr)
                .await
                .map_err(|e| e.to_string())?;
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut resp = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                resp.extend_from_slice(chunk.get(..n).unwrap_or_default());
                if resp.len() > MAX_RESPONSE_BYTES {
                    return Err("answer too large".to_owned());
                }
            }
            let text = String::from_utf8_lossy(&resp).into_owned();
            let (head, body) = text.split_once("\r\n\r\n").ok_or("malformed answer")?;
            let status = head
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or("malformed status line")?;
            Ok((status, body.to_owned()))
        };
        tokio::time::timeout(self.spec.request_timeout, exchange)
            .await
            .map_err(|_| {
                format!(
                    "{method} {target}: no answer within {:?}",
                    self.spec.request_timeout
                )
            })?
            .map_err(|e: String| format!("{method} {target}: {e}"))
    }

    async fn post(&self, action: &str) -> Result<(), String> {
        let body = serde_json::json!({ "instance": self.instance }).to_string();
        match self.call("POST", &format!("/{action}"), Some(body)).await? {
            (200..=299, _) => Ok(()),
            (code, body) => Err(format!("{action}: HTTP {code}: {}", body.trim())),
        }
    }

    async fn is_running(&self) -> bool {
        match self
            .call("GET", &format!("/status?instance={}", self.instance), None)
            .await
        {
            Ok((200..=299, body)) => serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("running").and_then(serde_json::Value::as_bool))
                .unwrap_or(false),
            _ => false,
        }
    }

    fn running(&self) -> Box<dyn RunningCompute> {
        let watcher = self.clone();
        let (exited, stopping) = watch_running(
            self.spec.poll_interval,
            1,
            "the control plane reports it is not running",
            move || {
                let watcher = watcher.clone();
                async move { watcher.is_running().await }
            },
        );
        Box::new(HttpCompute {
            driver: self.clone(),
            exited,
            stopping,
        })
    }
}

impl Driver for HttpDriver {
    fn start(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Box<dyn RunningCompute>, WakeError>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            match tokio::time::timeout_at(deadline, self.post("start")).await {
                Err(_) => return Err(WakeError::Timeout(timeout)),
                Ok(Err(e)) => return Err(WakeError::Driver(e)),
                Ok(Ok(())) => {}
            }
            if readiness::wait_ready(self.compute, deadline).await {
                return Ok(self.running());
            }
            // Not ready in time: stop whatever the start began.
            if let Err(e) = self.post("stop").await {
                tracing::warn!(instance = %self.instance, error = %e, "stop after a failed start failed");
            }
            Err(WakeError::Timeout(timeout))
        })
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Box<dyn RunningCompute>>> {
        Box::pin(async move {
            (self.is_running().await && readiness::probe(self.compute).await.is_ok())
                .then(|| self.running())
        })
    }
}

impl RunningCompute for HttpCompute {
    fn wait_exit(&self) -> BoxFuture<'_, String> {
        Box::pin(super::driver::exit_reason(self.exited.clone(), "stopped"))
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.stopping.store(true, Ordering::Release);
            if let Err(e) = self.driver.post("stop").await {
                tracing::error!(instance = %self.driver.instance, error = %e, "stop request failed; the compute may still run");
            }
        })
    }
}
