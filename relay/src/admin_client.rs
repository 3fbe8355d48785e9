//! The CLI side of the admin API: `relay status | pause | resume | usage`. A blocking
//! HTTP/1.1 client is enough for one request per command.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::admin::UsageJson;
use crate::cli::{AdminArgs, UsageFormat};

/// Default admin address.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9100";

/// Where to send requests and with which token.
#[derive(Debug)]
pub struct Target {
    addr: SocketAddr,
    token: Option<String>,
}

impl Target {
    /// Resolves the flags (and the configuration they may name).
    ///
    /// # Errors
    /// A message for an unreadable configuration or token file.
    pub fn from_args(args: &AdminArgs) -> Result<Self, String> {
        let config = args
            .config
            .as_deref()
            .map(crate::config::Config::load)
            .transpose()
            .map_err(|e| e.to_string())?;
        let addr = args
            .admin
            .or_else(|| config.as_ref().and_then(|c| c.relay.admin_listen))
            .unwrap_or_else(|| {
                DEFAULT_ADMIN
                    .parse()
                    .unwrap_or_else(|_| unreachable!("valid literal"))
            });
        let token_file = args.token_file.clone().or_else(|| {
            config
                .as_ref()
                .and_then(|c| c.relay.admin_token_file.clone())
        });
        let token = token_file
            .map(|p| {
                std::fs::read_to_string(&p)
                    .map(|t| t.trim().to_owned())
                    .map_err(|e| format!("{}: {e}", p.display()))
            })
            .transpose()?;
        Ok(Self { addr, token })
    }

    /// Sends a request; returns the status and body.
    ///
    /// # Errors
    /// A message when the relay cannot be reached or answers garbage.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, String), String> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(3))
            .map_err(|e| format!("cannot reach the relay's admin API at {}: {e} (is `relay run` running, with relay.admin_listen set?)", self.addr))?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let auth = self
            .token
            .as_deref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)
            .map_err(|e| format!("reading the answer: {e}"))?;
        let (head, body) = resp.split_once("\r\n\r\n").ok_or("malformed answer")?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or("malformed status line")?;
        Ok((status, body.to_owned()))
    }
}

/// Turns an error body into a message.
fn error_of(status: u16, body: &str) -> String {
    let msg = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned());
    format!("HTTP {status}: {msg}")
}

/// `relay status`.
///
/// # Errors
/// A message for the user.
pub fn status(t: &Target) -> Result<String, String> {
    let (code, body) = t.request("GET", "/v1/instances", Duration::from_secs(10))?;
    if code != 200 {
        return Err(error_of(code, &body));
    }
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let mut out = format!(
        "{:<16} {:<9} {:<21} {:>7} {:>10} {:>6} {:>10}\n",
        "INSTANCE", "STATE", "SINCE", "DIRECT", "PERCEPTRON", "WAKES", "LAST WAKE"
    );
    for i in list {
        let s = |k: &str| i.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_owned();
        let n = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_u64);
        let conns = i.get("connections");
        out.push_str(&format!(
            "{:<16} {:<9} {:<21} {:>7} {:>10} {:>6} {:>10}\n",
            s("name"),
            s("state"),
            s("since"),
            n(conns.and_then(|c| c.get("direct"))).unwrap_or(0),
            n(conns.and_then(|c| c.get("perceptron"))).unwrap_or(0),
            n(i.get("wakes")).unwrap_or(0),
            n(i.get("last_resume_ms")).map_or("-".into(), |ms| format!("{ms} ms")),
        ));
        if let Some(f) = i.get("failure").and_then(|v| v.as_str()) {
            out.push_str(&format!("  failure: {f}\n"));
        }
    }
    Ok(out)
}

/// `relay pause` / `relay resume`.
///
/// # Errors
/// A message for the user.
pub fn action(t: &Target, name: &str, action: &str, force: bool) -> Result<String, String> {
    let q = if force { "?force=true" } else { "" };
    let (code, body) = t.request(
        "POST",
        &format!("/v1/instances/{name}/{action}{q}"),
        Duration::from_secs(120),
    )?;
    if code != 200 {
        return Err(error_of(code, &body));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    Ok(format!(
        "{name}: {}\n",
        v.get("state").and_then(|s| s.as_str()).unwrap_or("?")
    ))
}

/// `relay usage`.
///
/// # Errors
/// A message for the user.
pub fn usage(
    t: &Target,
    from: Option<&str>,
    to: Option<&str>,
    format: UsageFormat,
) -> Result<String, String> {
    let mut q = Vec::new();
    for (k, v) in [("from", from), ("to", to)] {
        if let Some(v) = v {
            crate::timefmt::parse_utc(v).map_err(|e| format!("--{k}: {e}"))?;
            q.push(format!("{k}={v}"));
        }
    }
    let path = if q.is_empty() {
        "/v1/usage".to_owned()
    } else {
        format!("/v1/usage?{}", q.join("&"))
    };
    let (code, body) = t.request("GET", &path, Duration::from_secs(30))?;
    if code != 200 {
        return Err(error_of(code, &body));
    }
    let rows: Vec<UsageJson> = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    Ok(match format {
        UsageFormat::Json => body,
        UsageFormat::Csv => {
            let mut out = "instance,hour,billed_seconds\n".to_owned();
            for r in &rows {
                out.push_str(&format!("{},{},{}\n", r.instance, r.hour, r.billed_seconds));
            }
            out
        }
        UsageFormat::Table => {
            let mut out = format!(
                "{:<16} {:<21} {:>14}\n",
                "INSTANCE", "HOUR (UTC)", "BILLED SECONDS"
            );
            let mut total = 0;
            for r in &rows {
                total += r.billed_seconds;
                out.push_str(&format!(
                    "{:<16} {:<21} {:>14}\n",
                    r.instance, r.hour, r.billed_seconds
                ));
            }
            out.push_str(&format!("{:<16} {:<21} {:>14}\n", "total", "", total));
            out
        }
    })
}
