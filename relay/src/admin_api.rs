//! The admin API's bodies, as types: the server (`admin`) writes them and the CLI
//! (`admin_client`) reads them, so a field renamed on one side fails to compile on the other
//! instead of printing `0`. Field docs are the API's documentation (docs/operations.md).
//!
//! The CLI may talk to a relay of another version, so the bodies it reads take a missing (or
//! `null`) field as its default (`#[serde(default)]` on the type): an older relay's answer
//! still prints, with what it has.

use serde::{Deserialize, Deserializer, Serialize};

/// A `null` read as the type's default (serde's `default` covers only a missing field).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// The relay itself, for `GET /v1/relay` (and the first line of `relay status`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RelayJson {
    /// The relay's process id.
    pub pid: u32,
    /// The relay's version.
    pub version: String,
    /// The id of the key that signs relayed logins now (the newest of the key file).
    pub signing_key: String,
    /// Every key id of the ring in use, oldest first.
    pub key_ids: Vec<String>,
}

/// The fleet as one relay sees it, for `GET /v1/fleet`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FleetJson {
    /// This relay.
    pub relay_id: String,
    /// Whether this relay's lease is live (it can wake and pause).
    pub store_available: bool,
    /// Every live relay.
    pub relays: Vec<String>,
    /// Each instance.
    pub instances: Vec<FleetInstanceJson>,
}

/// One instance in the fleet.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FleetInstanceJson {
    /// The instance.
    pub name: String,
    /// The fleet's recorded state.
    pub state: String,
    /// The relay that made the last transition.
    pub state_by: Option<String>,
    /// The relay holding the wake/pause lock, if any.
    pub lock_holder: Option<String>,
    /// Open connections per relay.
    pub connections: std::collections::BTreeMap<String, u64>,
}

/// One block, as `GET /v1/blocks` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BlockJson {
    /// `source` or `user`.
    pub scope: String,
    /// The source address (an IPv4 address, or an IPv6 /64 as its first address).
    pub source: Option<String>,
    /// The user name.
    pub user: Option<String>,
    /// The user's instance.
    pub instance: Option<String>,
    /// `failed_logins` or `wakes`.
    pub budget: String,
    /// The count that reached the limit.
    pub count: u32,
    /// When the block ends, UTC.
    pub until: String,
    /// When the block ends, Unix ms.
    pub until_ms: u64,
}

/// One instance, as `GET /v1/instances` lists it (and as a pause, a resume or a `PUT`
/// answers with it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct InstanceJson {
    /// The instance.
    pub name: String,
    /// Its lifecycle phase (`paused`, `resuming`, `running`, `frozen`, `pausing`, `failed`).
    pub state: String,
    /// `configuration file`, or the instance file that defines it.
    pub defined_in: String,
    /// Removed, and waiting for this many connections to end before its compute stops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<usize>,
    /// When it entered its state, UTC.
    pub since: String,
    /// When it entered its state, Unix ms.
    pub since_ms: u64,
    /// `pump` or `nftables`.
    pub route: String,
    /// With `route = "nftables"`: whether the kernel route is installed now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_route_installed: Option<bool>,
    /// Open connections, by route.
    #[serde(deserialize_with = "null_as_default")]
    pub connections: ConnectionsJson,
    /// Open connections kept on the frozen compute (docs/parking.md).
    pub parked_connections: usize,
    /// Wakes since the relay started.
    pub wakes: u64,
    /// How long the last wake took.
    pub last_resume_ms: Option<u64>,
    /// Why the last wake failed, while it is the last word.
    pub failure: Option<String>,
    /// The running compute's capacity in CCUs, with `[instance.capacity]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ccu: Option<f64>,
    /// With `resumable_sessions`: the connections that keep the compute frozen rather than
    /// stopped, and why.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub held_frozen_by: Vec<HeldJson>,
    /// With `[instance.offload]`: where the data is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

/// A connection that keeps a compute frozen rather than stopped.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct HeldJson {
    /// The client's address.
    pub client: String,
    /// Why its session cannot be resumed after a stop.
    pub reason: String,
}

/// An instance's open connections, by route.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ConnectionsJson {
    /// On the direct route.
    pub direct: usize,
    /// Of `direct`, the connections the kernel route sent (conntrack's last count).
    pub kernel: usize,
    /// On the perceptron route (held).
    pub perceptron: usize,
}

/// One line of the usage report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UsageJson {
    /// The instance.
    pub instance: String,
    /// The hour's start, UTC.
    pub hour: String,
    /// The hour's start in Unix ms.
    pub hour_start_ms: u64,
    /// Seconds resuming or running in that hour.
    pub billed_seconds: u64,
    /// Capacity × time in that hour (plus the frozen rate × frozen time), in CCU-seconds
    /// with three decimals.
    pub ccu_seconds: f64,
    /// The data on the local disk in that hour, in GiB-hours with six decimals (instances
    /// with `[instance.offload]`, whose data directory the relay knows).
    #[serde(default)]
    pub local_gib_hours: f64,
    /// The offloaded copy in the object store in that hour, in GiB-hours.
    #[serde(default)]
    pub stored_gib_hours: f64,
}

/// An error answer: `{"error": "..."}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorJson {
    /// What went wrong, for the operator.
    pub error: String,
}

/// `PUT /v1/instances/{name}` when the previous definition still drains (202).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct WaitingJson {
    /// The instance.
    pub name: String,
    /// What it waits for.
    pub waiting_for: String,
    /// Connections of the previous definition still open.
    pub open: usize,
}

/// `DELETE /v1/instances/{name}` (202).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RemovedJson {
    /// The instance.
    pub name: String,
    /// Connections open when the removal began (drained, or cut when forced).
    pub open: usize,
    /// Whether they are cut rather than waited for.
    pub forced: bool,
}

/// `DELETE /v1/blocks` (200).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ClearedJson {
    /// How many blocks were lifted.
    pub cleared: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_relays_instance_reads_with_defaults_for_what_it_lacks() {
        // An answer from before `defined_in`, `parked_connections` and `held_frozen_by`
        // existed, and one with `held_frozen_by: null`.
        let old = r#"{"name": "shop", "state": "paused", "since": "2026-12-01 10:00:00",
            "since_ms": 1, "connections": {"direct": 2, "perceptron": 1}, "wakes": 3,
            "last_resume_ms": null, "failure": null, "held_frozen_by": null}"#;
        let i: InstanceJson = serde_json::from_str(old).unwrap();
        assert_eq!(
            (i.name.as_str(), i.state.as_str(), i.wakes),
            ("shop", "paused", 3)
        );
        assert_eq!((i.connections.direct, i.connections.kernel), (2, 0));
        assert!(i.defined_in.is_empty() && i.held_frozen_by.is_empty());
        assert_eq!(i.parked_connections, 0);
    }

    #[test]
    fn an_instance_round_trips() {
        let i = InstanceJson {
            name: "shop".into(),
            state: "running".into(),
            held_frozen_by: vec![HeldJson {
                client: "10.0.0.1:5000".into(),
                reason: "open transaction".into(),
            }],
            storage: Some("local".into()),
            ..InstanceJson::default()
        };
        let text = serde_json::to_string(&i).unwrap();
        assert_eq!(serde_json::from_str::<InstanceJson>(&text).unwrap(), i);
    }
}
