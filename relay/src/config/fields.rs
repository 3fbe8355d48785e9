//! How single values of the file are read: each deserializer refuses a bad value with a
//! message, and `serde_path_to_error` adds the key.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::MAX_WORKER_THREADS;
use crate::capacity::Ccu;
use crate::duration;

/// Whether `name` can name an instance: non-empty, A-Z a-z 0-9 - _ only (so it is also a
/// safe file name, a metric label and an etcd key segment).
#[must_use]
pub fn is_instance_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub(super) fn ccu<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Ccu, D::Error> {
    Ccu::parse(f64::deserialize(deserializer)?).map_err(D::Error::custom)
}

pub(super) fn some_ccu<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Ccu>, D::Error> {
    ccu(deserializer).map(Some)
}

/// The frozen rate in CCUs (any multiple of 0.001 from 0 to 64), kept in thousandths.
pub(super) fn frozen_rate<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
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

pub(super) fn some_positive_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration::positive(deserializer).map(Some)
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
pub(super) struct HttpUrl {
    pub(super) addr: SocketAddr,
    /// The `Host` header: `ip:port` as written.
    pub(super) host: String,
    /// `/path` without a trailing slash, or empty.
    pub(super) base_path: String,
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
pub(super) enum BadValue {
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

pub(super) fn parse_addr(text: &str) -> Result<SocketAddr, BadValue> {
    text.parse()
        .map_err(|_| BadValue::NotAnAddress(text.to_owned()))
}

pub(super) fn addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    parse_addr(&String::deserialize(deserializer)?).map_err(D::Error::custom)
}

pub(super) fn some_addr<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    addr(deserializer).map(Some)
}

pub(super) fn worker_threads<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<usize>, D::Error> {
    let n = i64::deserialize(deserializer)?;
    usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_WORKER_THREADS).contains(n))
        .map(Some)
        .ok_or_else(|| D::Error::custom(format!("{n} is not between 1 and {MAX_WORKER_THREADS}")))
}

pub(super) fn at_least_one<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let n = i64::deserialize(deserializer)?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| D::Error::custom(format!("{n} must be at least 1")))
}

/// Names go into logs, metric labels and admin URLs, so they are kept to a safe alphabet.
pub(super) fn instance_name<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if !is_instance_name(&name) {
        return Err(D::Error::custom(format!(
            "'{name}' must be non-empty A-Z a-z 0-9 - _"
        )));
    }
    Ok(name)
}

/// Health-check user names: non-empty, at most 80 characters (MySQL's limit).
pub(super) fn health_check_users<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
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
pub(super) fn argv<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(deserializer)?;
    if argv.is_empty() {
        return Err(D::Error::custom(
            "must name a program, e.g. [\"systemctl\", \"start\", \"mariadb\"]",
        ));
    }
    Ok(argv)
}

pub(super) fn some_argv<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    let argv = Vec::<String>::deserialize(deserializer)?;
    if argv.is_empty() {
        return Err(D::Error::custom("must name a program or be left out"));
    }
    Ok(Some(argv))
}
