//! The nftables rules of the kernel route, as text for `nft -f -`: pure functions from the
//! configuration to a script, so every rule the relay can ever install is a fixture in the
//! tests below. `kernel` runs the scripts.
//!
//! # The table
//! One table per relay, `inet perceptron_<id>`, owned entirely by the relay:
//!
//! - chains `prerouting` (clients on other hosts) and `output` (clients on this host,
//!   loopback included: locally generated connections never pass `prerouting`), both
//!   `type nat`, priority -100 (dstnat), each with the same four static rules that DNAT a new
//!   connection through a verdict map:
//!   `dnat ip to ip daddr . tcp dport map @dnat4` (an instance listening on one address),
//!   `fib daddr type local dnat ip to tcp dport map @dnat4_any` (an instance listening on
//!   `0.0.0.0`: any local address), and the same two for IPv6;
//! - chain `postrouting` (`type nat`, priority 100): connections DNAT'd to a compute on
//!   another host leave masqueraded (`@masq4`, `@masq6`), so the compute answers the relay's
//!   host, which un-NATs the reply: the compute sees the relay's address, as on the pump
//!   route. Computes on this host are reached through `lo` and never masqueraded.
//!
//! A running instance is one element in one map (`listen → compute`); pausing deletes it.
//! Elements rather than rules because the kernel forgets the NAT bindings of established
//! connections when the last rule holding a `dnat` expression goes (measured on 6.18: a
//! connection DNAT'd before `flush chain` is reset on its next packet), while deleting a map
//! element leaves them alone: connections already routed keep their compute, only new ones
//! reach the relay. For the same reason the relay deletes its table only when it exits.
//!
//! Every script is one `nft -f` transaction: applied whole or not at all.
//!
//! # Leases
//! The maps have `flags timeout` and each element is installed with a timeout of
//! [`ROUTE_LEASE`], which the relay renews every [`LEASE_RENEW`] while the instance runs: in
//! place where the kernel can ([`renew_script`]), else by installing the element again. The
//! kernel expires an element the relay stopped renewing: a relay killed by SIGKILL, or hung,
//! cannot leave a route behind for longer than the lease, so a compute it no longer watches
//! (stopped, its port taken by another process) is not reached through a route nobody
//! controls. New connections then reach the relay's listener (if a relay runs)
//! or nothing. Established connections are not affected by an element's expiry, as by its
//! deletion.
//!
//! # Activity
//! Chains `spoke_in` and `spoke_out` (`type filter`, on `prerouting` and `output`) follow who
//! sent payload last on each DNAT'd connection, in two bits of its conntrack mark: the
//! client's payload (a packet longer than its IP and TCP headers; one rule per TCP data
//! offset, IPv4 without IP options and IPv6 without extension headers) sets [`SPOKE_MARK`] and
//! [`BUSY_MARK`], the compute's payload clears [`BUSY_MARK`]. The relay counts only connections
//! with [`SPOKE_MARK`] as activity (`conntrack`): a bare connect, which only ever sends headers,
//! does not keep the instance awake. [`BUSY_MARK`] tells a session between commands from one
//! whose command is outstanding (a `SELECT SLEEP(60)` sends nothing until it answers), exactly,
//! in the order the packets passed: what parking a routed session needs (docs/parking.md). TCP
//! keepalive probes carry no payload and change nothing. The other bits of the mark are left
//! as they are.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

/// How long the kernel keeps a route the relay stopped renewing.
pub const ROUTE_LEASE: Duration = Duration::from_secs(10);

/// How often a running instance's route is renewed: a few renewals per lease, so one slow or
/// failed `nft` run does not let a healthy relay's route lapse.
pub const LEASE_RENEW: Duration = Duration::from_secs(2);

/// The conntrack mark bit of a routed connection whose client has sent payload.
pub const SPOKE_MARK: u32 = 0x0080_0000;

/// The conntrack mark bit of a routed connection whose client sent payload last: set by the
/// client's payload, cleared by the compute's. Set, a command is outstanding (a query running,
/// an upload under way); clear, the compute spoke last and the session is between commands,
/// or in the middle of a response the compute is still sending.
pub const BUSY_MARK: u32 = 0x0040_0000;

/// The family of the relay's table: one table serves IPv4 and IPv6.
pub const FAMILY: &str = "inet";

/// The prefix of every table a relay creates: a table without it is never touched.
pub const TABLE_PREFIX: &str = "perceptron_";

/// Priority of the DNAT chains: `dstnat` (written as a number, which every nft accepts in the
/// `output` hook).
const DSTNAT_PRIORITY: i32 = -100;
/// Priority of the masquerade chain: `srcnat`.
const SRCNAT_PRIORITY: i32 = 100;

/// The table a relay uses when `relay.nftables_table` is not set: `perceptron_` and 16 hex
/// digits of a hash of its state directory. One relay runs per state directory, so two relays
/// on one host (two test relays, say) never share a table, and a restarted relay finds the
/// table it left behind.
#[must_use]
pub fn default_table_name(state_dir: &Path) -> String {
    // FNV-1a, 64 bits: stable across builds and platforms (std's hasher is not).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in state_dir.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{TABLE_PREFIX}{hash:016x}")
}

/// Whether `name` may be the relay's table: the relay prefix, then 1 to 48 of `a-z 0-9 _`.
/// The relay deletes and recreates its table at start, so it must never name a table someone
/// else owns.
#[must_use]
pub fn valid_table_name(name: &str) -> bool {
    name.strip_prefix(TABLE_PREFIX).is_some_and(|rest| {
        (1..=48).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// One instance's kernel route: new connections for `listen` go to `compute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dnat {
    /// Where clients connect (the instance's `listen`).
    pub listen: SocketAddr,
    /// Where the compute listens (the instance's `compute`).
    pub compute: SocketAddr,
}

impl Dnat {
    /// The map this route's element lives in.
    #[must_use]
    pub const fn map(&self) -> &'static str {
        match (self.listen.ip().is_unspecified(), self.listen.is_ipv4()) {
            (false, true) => "dnat4",
            (true, true) => "dnat4_any",
            (false, false) => "dnat6",
            (true, false) => "dnat6_any",
        }
    }

    /// The element's key: `addr . port`, or the port alone for a wildcard listen address.
    #[must_use]
    pub fn key(&self) -> String {
        if self.listen.ip().is_unspecified() {
            self.listen.port().to_string()
        } else {
            format!("{} . {}", self.listen.ip(), self.listen.port())
        }
    }

    /// Where the element sends a connection: `compute-addr . compute-port`.
    #[must_use]
    pub fn target(&self) -> String {
        format!("{} . {}", self.compute.ip(), self.compute.port())
    }

    /// The whole element: `key : compute-addr . compute-port`.
    #[must_use]
    pub fn element(&self) -> String {
        format!("{} : {}", self.key(), self.target())
    }

    /// Whether connections to the compute leave the host (and are masqueraded).
    #[must_use]
    pub fn compute_is_remote(&self) -> bool {
        !self.compute.ip().is_loopback()
    }
}

/// Clears whatever a previous relay left in `table` (a crash leaves it behind) and creates it
/// afresh with no instance routed, in one transaction. `add table` first makes the `delete`
/// succeed when there is nothing to clear (nft 1.0.6 has no `destroy`).
#[must_use]
pub fn create_script(table: &str, routes: &[Dnat]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "add table {FAMILY} {table}");
    let _ = writeln!(s, "delete table {FAMILY} {table}");
    let _ = writeln!(s, "table {FAMILY} {table} {{");
    for (name, key, data) in [
        (
            "dnat4",
            "ipv4_addr . inet_service",
            "ipv4_addr . inet_service",
        ),
        ("dnat4_any", "inet_service", "ipv4_addr . inet_service"),
        (
            "dnat6",
            "ipv6_addr . inet_service",
            "ipv6_addr . inet_service",
        ),
        ("dnat6_any", "inet_service", "ipv6_addr . inet_service"),
    ] {
        let _ = writeln!(
            s,
            "\tmap {name} {{\n\t\ttype {key} : {data}\n\t\tflags timeout\n\t}}"
        );
    }
    for (name, family) in [("masq4", IpFamily::V4), ("masq6", IpFamily::V6)] {
        let _ = write!(
            s,
            "\tset {name} {{\n\t\ttype {}_addr . inet_service\n",
            family.addr_type()
        );
        let members: Vec<String> = routes
            .iter()
            .filter(|r| r.compute_is_remote() && IpFamily::of(r.compute.ip()) == family)
            .map(Dnat::target)
            .collect();
        if !members.is_empty() {
            let _ = writeln!(s, "\t\telements = {{ {} }}", members.join(", "));
        }
        let _ = writeln!(s, "\t}}");
    }
    for hook in ["prerouting", "output"] {
        let _ = writeln!(
            s,
            "\tchain {hook} {{\n\t\ttype nat hook {hook} priority {DSTNAT_PRIORITY}; policy accept;"
        );
        let _ = writeln!(s, "\t\tdnat ip to ip daddr . tcp dport map @dnat4");
        let _ = writeln!(
            s,
            "\t\tfib daddr type local dnat ip to tcp dport map @dnat4_any"
        );
        let _ = writeln!(s, "\t\tdnat ip6 to ip6 daddr . tcp dport map @dnat6");
        let _ = writeln!(
            s,
            "\t\tfib daddr type local dnat ip6 to tcp dport map @dnat6_any"
        );
        let _ = writeln!(s, "\t}}");
    }
    let _ = writeln!(
        s,
        "\tchain postrouting {{\n\t\ttype nat hook postrouting priority {SRCNAT_PRIORITY}; policy accept;"
    );
    let _ = writeln!(
        s,
        "\t\toifname != \"lo\" ct status dnat ip daddr . tcp dport @masq4 masquerade"
    );
    let _ = writeln!(
        s,
        "\t\toifname != \"lo\" ct status dnat ip6 daddr . tcp dport @masq6 masquerade"
    );
    let _ = writeln!(s, "\t}}");
    for (chain, hook) in [("spoke_in", "prerouting"), ("spoke_out", "output")] {
        let _ = writeln!(
            s,
            "\tchain {chain} {{\n\t\ttype filter hook {hook} priority 0; policy accept;"
        );
        let spoke_busy = SPOKE_MARK | BUSY_MARK;
        let not_busy = !BUSY_MARK;
        // A packet longer than its headers carries payload: one rule per TCP data offset (5
        // to 15 words), 8 first (Linux sends timestamps), for IPv4 without options and IPv6
        // without extension headers. The client's payload sets both bits (when BUSY is
        // clear); the compute's clears BUSY (when set): all other packets fail the cheap
        // mark test first.
        for doff in std::iter::once(8u32).chain((5..=15).filter(|d| *d != 8)) {
            let header = 4 * doff;
            let v4 = format!("ip hdrlength 5 tcp doff {doff} ip length > {}", 20 + header);
            let v6 = format!("ip6 nexthdr tcp tcp doff {doff} ip6 length > {header}");
            for payload in [&v4, &v6] {
                let _ = writeln!(
                    s,
                    "\t\tct status dnat ct direction original ct mark & {BUSY_MARK:#010x} == 0 \
                     {payload} ct mark set ct mark | {spoke_busy:#010x}"
                );
                let _ = writeln!(
                    s,
                    "\t\tct status dnat ct direction reply ct mark & {BUSY_MARK:#010x} != 0 \
                     {payload} ct mark set ct mark & {not_busy:#010x}"
                );
            }
        }
        let _ = writeln!(s, "\t}}");
    }
    let _ = writeln!(s, "}}");
    s
}

/// Routes new connections for `route.listen` to `route.compute` for [`ROUTE_LEASE`], and
/// renews that lease when run again. Idempotent: an element left with another compute, or
/// with less of its lease left, is replaced (add, delete, add: the first add makes the delete
/// safe).
#[must_use]
pub fn install_script(table: &str, route: &Dnat) -> String {
    let (map, key, element, target) = (route.map(), route.key(), route.element(), route.target());
    let lease = ROUTE_LEASE.as_secs();
    format!(
        "add element {FAMILY} {table} {map} {{ {element} }}\n\
         delete element {FAMILY} {table} {map} {{ {key} }}\n\
         add element {FAMILY} {table} {map} {{ {key} timeout {lease}s : {target} }}\n"
    )
}

/// Renews `route`'s lease in place: the element's timeout and expiry set to [`ROUTE_LEASE`]
/// again, nothing deleted. Linux 6.10 and later update an existing element so; earlier kernels
/// leave it as it was, which [`lease_probe_scripts`] finds out when the relay starts. Nothing
/// deleted matters: `nft` exits only once the kernel has freed what the transactions before
/// it deleted (its netlink socket's close flushes nf_tables' destroy work, which waits for an
/// RCU grace period), and on a loaded host that wait took from 0.2 to over 5 s.
#[must_use]
pub fn renew_script(table: &str, route: &Dnat) -> String {
    let (map, key, target) = (route.map(), route.key(), route.target());
    let lease = ROUTE_LEASE.as_secs();
    format!(
        "add element {FAMILY} {table} {map} {{ {key} timeout {lease}s expires {lease}s : {target} }}\n"
    )
}

/// The key of the element with which the relay asks the kernel whether it renews a lease in
/// place: address 0.0.0.0, port 0, where no connection goes.
const PROBE_KEY: &str = "0.0.0.0 . 0";

/// How long the probe element is added for: far longer than [`ROUTE_LEASE`], so that its
/// renewal shows whichever way the kernel took it, however slow the host.
const PROBE_LEASE: Duration = Duration::from_secs(60);

/// The scripts that find out whether the kernel renews a lease in place ([`renew_script`]),
/// run one after the other in the new table: the probe element with [`PROBE_LEASE`], then
/// renewed as a route is (to [`ROUTE_LEASE`]), then the map listed (for
/// [`renewed_in_place`]), then the element deleted.
#[must_use]
pub fn lease_probe_scripts(table: &str) -> [String; 4] {
    let element = |lease: Duration| {
        let lease = lease.as_secs();
        format!(
            "add element {FAMILY} {table} dnat4 {{ {PROBE_KEY} timeout {lease}s expires \
             {lease}s : 127.0.0.1 . 9 }}\n"
        )
    };
    [
        element(PROBE_LEASE),
        element(ROUTE_LEASE),
        format!("list map {FAMILY} {table} dnat4\n"),
        format!(
            "add element {FAMILY} {table} dnat4 {{ {PROBE_KEY} : 127.0.0.1 . 9 }}\n\
             delete element {FAMILY} {table} dnat4 {{ {PROBE_KEY} }}\n"
        ),
    ]
}

/// Whether `listing` (`nft list map`, after [`lease_probe_scripts`]' first two) shows the
/// probe element with at most [`ROUTE_LEASE`] left: renewed in place. A kernel that leaves
/// an existing element as it was shows the [`PROBE_LEASE`] it was added with, less the time
/// since; one that ignores `expires` on an add shows its timeout (60 s).
#[must_use]
pub fn renewed_in_place(listing: &str) -> bool {
    let Some(at) = listing.find(PROBE_KEY) else {
        return false;
    };
    let Some((_, left)) = listing[at..].split_once(" expires ") else {
        return false;
    };
    // `9s992ms`, `992ms`, `59s990ms`, `1m`: whole seconds before an `s`, or none before `ms`.
    let digits = left.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = left.split_at(digits);
    let Ok(n) = number.parse::<u64>() else {
        return false;
    };
    if unit.starts_with("ms") {
        return true;
    }
    unit.starts_with('s') && n <= ROUTE_LEASE.as_secs()
}

/// Stops routing new connections for `route.listen` (established ones keep their compute).
/// Idempotent: succeeds when the element is already gone.
#[must_use]
pub fn remove_script(table: &str, route: &Dnat) -> String {
    let (map, key, element) = (route.map(), route.key(), route.element());
    format!(
        "add element {FAMILY} {table} {map} {{ {element} }}\n\
         delete element {FAMILY} {table} {map} {{ {key} }}\n"
    )
}

/// Deletes the relay's table (at exit). Succeeds when it is already gone.
#[must_use]
pub fn delete_script(table: &str) -> String {
    format!("add table {FAMILY} {table}\ndelete table {FAMILY} {table}\n")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    const fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    const fn addr_type(self) -> &'static str {
        match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(listen: &str, compute: &str) -> Dnat {
        Dnat {
            listen: listen.parse().unwrap(),
            compute: compute.parse().unwrap(),
        }
    }

    #[test]
    fn creates_the_table_from_scratch_in_one_transaction() {
        let script = create_script(
            "perceptron_t",
            &[
                route("127.0.0.1:3306", "127.0.0.1:13306"),
                route("0.0.0.0:3307", "10.0.0.5:3306"),
                route("[::1]:3308", "[fd00::7]:3306"),
            ],
        );
        let expected = "\
add table inet perceptron_t
delete table inet perceptron_t
table inet perceptron_t {
\tmap dnat4 {
\t\ttype ipv4_addr . inet_service : ipv4_addr . inet_service
\t\tflags timeout
\t}
\tmap dnat4_any {
\t\ttype inet_service : ipv4_addr . inet_service
\t\tflags timeout
\t}
\tmap dnat6 {
\t\ttype ipv6_addr . inet_service : ipv6_addr . inet_service
\t\tflags timeout
\t}
\tmap dnat6_any {
\t\ttype inet_service : ipv6_addr . inet_service
\t\tflags timeout
\t}
\tset masq4 {
\t\ttype ipv4_addr . inet_service
\t\telements = { 10.0.0.5 . 3306 }
\t}
\tset masq6 {
\t\ttype ipv6_addr . inet_service
\t\telements = { fd00::7 . 3306 }
\t}
\tchain prerouting {
\t\ttype nat hook prerouting priority -100; policy accept;
\t\tdnat ip to ip daddr . tcp dport map @dnat4
\t\tfib daddr type local dnat ip to tcp dport map @dnat4_any
\t\tdnat ip6 to ip6 daddr . tcp dport map @dnat6
\t\tfib daddr type local dnat ip6 to tcp dport map @dnat6_any
\t}
\tchain output {
\t\ttype nat hook output priority -100; policy accept;
\t\tdnat ip to ip daddr . tcp dport map @dnat4
\t\tfib daddr type local dnat ip to tcp dport map @dnat4_any
\t\tdnat ip6 to ip6 daddr . tcp dport map @dnat6
\t\tfib daddr type local dnat ip6 to tcp dport map @dnat6_any
\t}
\tchain postrouting {
\t\ttype nat hook postrouting priority 100; policy accept;
\t\toifname != \"lo\" ct status dnat ip daddr . tcp dport @masq4 masquerade
\t\toifname != \"lo\" ct status dnat ip6 daddr . tcp dport @masq6 masquerade
\t}
";
        let (head, spoke) = script.split_at(script.find("\tchain spoke_in").unwrap());
        assert_eq!(head, expected);
        // The activity chains: one rule per TCP data offset and family, in each hook.
        assert!(spoke.starts_with(
            "\tchain spoke_in {\n\t\ttype filter hook prerouting priority 0; policy accept;\n\
             \t\tct status dnat ct direction original ct mark & 0x00400000 == 0 ip hdrlength 5 \
             tcp doff 8 ip length > 52 ct mark set ct mark | 0x00c00000\n\
             \t\tct status dnat ct direction reply ct mark & 0x00400000 != 0 ip hdrlength 5 \
             tcp doff 8 ip length > 52 ct mark set ct mark & 0xffbfffff\n\
             \t\tct status dnat ct direction original ct mark & 0x00400000 == 0 ip6 nexthdr tcp \
             tcp doff 8 ip6 length > 32 ct mark set ct mark | 0x00c00000\n"
        ));
        assert!(spoke.contains("tcp doff 5 ip length > 40 "), "{spoke}");
        assert!(spoke.contains("tcp doff 15 ip6 length > 60 "), "{spoke}");
        assert!(spoke.contains("\tchain spoke_out {\n\t\ttype filter hook output priority 0;"));
        // 11 data offsets × 2 families × 2 directions × 2 hooks.
        assert_eq!(spoke.matches("ct mark set").count(), 88);
        assert!(spoke.ends_with("\t}\n}\n"));
    }

    #[test]
    fn loopback_computes_are_never_masqueraded() {
        let script = create_script("perceptron_t", &[route("127.0.0.1:1", "127.0.0.1:2")]);
        assert!(!script.contains("elements"), "{script}");
    }

    #[test]
    fn installs_and_removes_one_element_idempotently() {
        let r = route("127.0.0.1:3306", "127.0.0.1:13306");
        assert_eq!(
            install_script("perceptron_t", &r),
            "add element inet perceptron_t dnat4 { 127.0.0.1 . 3306 : 127.0.0.1 . 13306 }\n\
             delete element inet perceptron_t dnat4 { 127.0.0.1 . 3306 }\n\
             add element inet perceptron_t dnat4 { 127.0.0.1 . 3306 timeout 10s : 127.0.0.1 . 13306 }\n"
        );
        assert_eq!(
            remove_script("perceptron_t", &r),
            "add element inet perceptron_t dnat4 { 127.0.0.1 . 3306 : 127.0.0.1 . 13306 }\n\
             delete element inet perceptron_t dnat4 { 127.0.0.1 . 3306 }\n"
        );
    }

    #[test]
    fn renews_a_lease_in_place_without_deleting() {
        let r = route("127.0.0.1:3307", "127.0.0.1:3306");
        assert_eq!(
            renew_script("perceptron_t", &r),
            "add element inet perceptron_t dnat4 { 127.0.0.1 . 3307 timeout 10s expires 10s : \
             127.0.0.1 . 3306 }\n"
        );
    }

    /// Listings as nft 1.0.6 prints them on Linux 6.18 (renewed in place) and as an older
    /// kernel leaves the element (its expiry running on).
    #[test]
    fn reads_whether_the_probe_was_renewed_in_place() {
        let listing = |left: &str| {
            format!(
                "table inet perceptron_t {{\n\tmap dnat4 {{\n\t\ttype ipv4_addr . inet_service : \
                 ipv4_addr . inet_service\n\t\tflags timeout\n\t\telements = {{ 0.0.0.0 . 0 \
                 timeout 10s expires {left} : 127.0.0.1 . 9 }}\n\t}}\n}}\n"
            )
        };
        assert!(renewed_in_place(&listing("9s992ms")));
        assert!(renewed_in_place(&listing("10s")));
        assert!(renewed_in_place(&listing("992ms")));
        // Left as it was added (60 s), or with its timeout (an `expires` ignored).
        assert!(!renewed_in_place(&listing("59s10ms")));
        assert!(!renewed_in_place(&listing("1m")));
        assert!(!renewed_in_place(&listing("11s")));
        assert!(!renewed_in_place("table inet perceptron_t {\n}\n"));
        assert!(!renewed_in_place("0.0.0.0 . 0 timeout 10s expires"));
        let scripts = lease_probe_scripts("perceptron_t");
        assert!(scripts[0].contains("0.0.0.0 . 0 timeout 60s expires 60s"));
        assert!(scripts[1].contains("0.0.0.0 . 0 timeout 10s expires 10s"));
        assert!(scripts[3].ends_with("delete element inet perceptron_t dnat4 { 0.0.0.0 . 0 }\n"));
    }

    #[test]
    fn wildcard_and_ipv6_listen_addresses_pick_their_maps() {
        let any4 = route("0.0.0.0:3306", "127.0.0.1:13306");
        assert_eq!((any4.map(), any4.key()), ("dnat4_any", "3306".to_owned()));
        let v6 = route("[::1]:3306", "[::1]:13306");
        assert_eq!(
            (v6.map(), v6.element().as_str()),
            ("dnat6", "::1 . 3306 : ::1 . 13306")
        );
        let any6 = route("[::]:3306", "[::1]:13306");
        assert_eq!(any6.map(), "dnat6_any");
    }

    #[test]
    fn deletes_the_table_even_when_it_is_gone() {
        assert_eq!(
            delete_script("perceptron_t"),
            "add table inet perceptron_t\ndelete table inet perceptron_t\n"
        );
    }

    #[test]
    fn default_table_names_differ_per_state_dir_and_are_stable() {
        let a = default_table_name(Path::new("/var/lib/perceptron/a"));
        let b = default_table_name(Path::new("/var/lib/perceptron/b"));
        assert_ne!(a, b);
        assert_eq!(a, default_table_name(Path::new("/var/lib/perceptron/a")));
        assert!(valid_table_name(&a), "{a}");
        // FNV-1a of the empty input: the offset basis.
        assert_eq!(
            default_table_name(Path::new("")),
            "perceptron_cbf29ce484222325"
        );
    }

    #[test]
    fn rejects_table_names_the_relay_does_not_own() {
        for bad in [
            "filter",
            "perceptron_",
            "perceptron_A",
            "perceptron_a-b",
            "nat",
        ] {
            assert!(!valid_table_name(bad), "{bad}");
        }
        assert!(!valid_table_name(&format!("perceptron_{}", "a".repeat(49))));
        assert!(valid_table_name("perceptron_test_42"));
    }
}
