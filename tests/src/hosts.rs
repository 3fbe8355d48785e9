//! Three hosts on one machine, for the tests that must not run on loopback alone: the test's
//! own network namespace is the client's host, and two network namespaces this creates are the
//! relay's host and the compute's host. A veth pair joins the client to the relay's host and
//! another joins the relay's host to the compute's; the relay's host routes between them, so
//! the client also reaches the compute straight, through it, as through a router:
//!
//! ```text
//! client (this namespace)  10.201.K.1 ── 10.201.K.2  relay  10.202.K.1 ── 10.202.K.2  compute
//! ```
//!
//! Everything is created under names this test process owns (`pt<pid>n<k>...`) and removed by
//! [`ThreeHosts`]'s drop: deleting a namespace deletes its end of each veth pair, and with it
//! the pair. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), `ip` (iproute2) and `nsenter`
//! (util-linux); `ethtool` for [`ThreeHosts::relay_gro`].

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Three hosts: see the module's documentation.
#[derive(Debug)]
pub struct ThreeHosts {
    relay_ns: String,
    compute_ns: String,
    /// The client's end of the link to the relay's host (in this namespace).
    client_link: String,
    /// The route to the compute's link through the relay's host (in this namespace).
    compute_route: String,
    /// The client's address.
    pub client: Ipv4Addr,
    /// The relay's address on the client's side: where clients and the admin API connect.
    pub relay: Ipv4Addr,
    /// The relay's address on the compute's side: where the relay's own connections to the
    /// compute come from.
    pub relay_inner: Ipv4Addr,
    /// The compute's address.
    pub compute: Ipv4Addr,
    /// An address the relay's host translates to the compute's ([`Self::behind_nat`]).
    service: Option<Ipv4Addr>,
}

/// Runs `ip` with `args`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A third byte for the hosts' subnets that no interface of this namespace uses yet.
fn free_subnet() -> Option<u8> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr"])
        .output()
        .ok()?;
    let used = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = u8::try_from(std::process::id() % 200).unwrap_or(0);
    (0..250_u16)
        .map(|i| u8::try_from((u16::from(start) + i) % 250 + 1).unwrap_or(1))
        .find(|k| {
            !used.contains(&format!("10.201.{k}.")) && !used.contains(&format!("10.202.{k}."))
        })
}

impl ThreeHosts {
    /// Creates the relay's and the compute's hosts.
    ///
    /// # Panics
    /// If they cannot be made (not root, no `ip`), with the command that failed; whatever was
    /// made by then is removed.
    #[must_use]
    pub fn create() -> Self {
        static MADE: AtomicU32 = AtomicU32::new(0);
        // One at a time in this process: a subnet is free until its hosts are made.
        static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = MAKING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let tag = format!("pt{}n{n}", std::process::id() % 100_000);
        let k = free_subnet().expect("no free 10.201.K.0/24 subnet for the three hosts");
        let hosts = Self {
            relay_ns: format!("{tag}r"),
            compute_ns: format!("{tag}c"),
            client_link: format!("{tag}h"),
            compute_route: format!("10.202.{k}.0/24"),
            client: Ipv4Addr::new(10, 201, k, 1),
            relay: Ipv4Addr::new(10, 201, k, 2),
            relay_inner: Ipv4Addr::new(10, 202, k, 1),
            compute: Ipv4Addr::new(10, 202, k, 2),
            service: None,
        };
        if let Err(e) = hosts.build() {
            panic!("cannot make the three hosts (root and iproute2 are needed): {e}");
        }
        hosts
    }

    /// [`Self::create`], with the compute known to the relay by a service address its host
    /// translates (DNAT in its own output path, as kube-proxy does for a Kubernetes
    /// service): an nftables table in the relay's namespace, gone with it.
    ///
    /// # Panics
    /// As [`Self::create`], or if `nft` fails.
    #[must_use]
    pub fn behind_nat() -> Self {
        let mut hosts = Self::create();
        let [_, _, k, _] = hosts.compute.octets();
        let service = Ipv4Addr::new(10, 203, k, 9);
        let rules = format!(
            "table ip service {{\n chain out {{\n type nat hook output priority -100\n \
             ip daddr {service} dnat to {}\n }}\n}}\n",
            hosts.compute
        );
        // A route to the service address, as a cluster has one, so that the output path
        // reaches the translation.
        if let Err(e) = ip(&[
            "-n",
            &hosts.relay_ns,
            "route",
            "add",
            &format!("{service}/32"),
            "dev",
            "tocompute",
        ]) {
            panic!("{e}");
        }
        hosts.relay_nft(&rules);
        hosts.service = Some(service);
        hosts
    }

    /// A stateful firewall on the relay's host that drops what conntrack takes for invalid
    /// (`ct state invalid drop` on input, as ufw and firewalld have it): an nftables table in
    /// the relay's namespace, gone with it.
    ///
    /// # Panics
    /// If `nft` fails.
    pub fn relay_firewall(&self) {
        self.relay_nft(
            "table inet firewall {\n counter invalid {}\n chain input {\n \
             type filter hook input priority 0\n ct state invalid counter name invalid drop\n \
             }\n}\n",
        );
    }

    /// How many segments [`Self::relay_firewall`] dropped as invalid.
    ///
    /// # Panics
    /// If `nft` fails or says no number.
    #[must_use]
    pub fn relay_firewall_dropped(&self) -> u64 {
        let out = self
            .relay_command("nft")
            .args(["list", "counter", "inet", "firewall", "invalid"])
            .output()
            .expect("nft");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split("packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("nft list counter: {text}"))
    }

    /// Loads `rules` with `nft -f -` on the relay's host.
    fn relay_nft(&self, rules: &str) {
        let mut nft = self
            .relay_command("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nft (Debian: apt-get install nftables)");
        if let Some(mut stdin) = nft.stdin.take() {
            std::io::Write::write_all(&mut stdin, rules.as_bytes()).expect("nft's input");
        }
        let out = nft.wait_with_output().expect("nft");
        assert!(
            out.status.success(),
            "nft {rules}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The address the relay is given for the compute: its own, or the service address.
    #[must_use]
    pub fn compute_named(&self) -> Ipv4Addr {
        self.service.unwrap_or(self.compute)
    }

    fn build(&self) -> Result<(), String> {
        let (r, c, h) = (
            self.relay_ns.as_str(),
            self.compute_ns.as_str(),
            self.client_link.as_str(),
        );
        let client = format!("{}/24", self.client);
        let relay = format!("{}/24", self.relay);
        let relay_inner = self.relay_inner.to_string();
        let compute = format!("{}/24", self.compute);
        ip(&["netns", "add", r])?;
        ip(&["netns", "add", c])?;
        ip(&[
            "link", "add", h, "type", "veth", "peer", "name", "toclient", "netns", r,
        ])?;
        ip(&[
            "-n",
            r,
            "link",
            "add",
            "tocompute",
            "type",
            "veth",
            "peer",
            "name",
            "torelay",
            "netns",
            c,
        ])?;
        ip(&["addr", "add", &client, "dev", h])?;
        ip(&["link", "set", h, "up"])?;
        ip(&["-n", r, "addr", "add", &relay, "dev", "toclient"])?;
        ip(&[
            "-n",
            r,
            "addr",
            "add",
            &format!("{relay_inner}/24"),
            "dev",
            "tocompute",
        ])?;
        ip(&["-n", c, "addr", "add", &compute, "dev", "torelay"])?;
        for (ns, link) in [
            (r, "lo"),
            (r, "toclient"),
            (r, "tocompute"),
            (c, "lo"),
            (c, "torelay"),
        ] {
            ip(&["-n", ns, "link", "set", link, "up"])?;
        }
        ip(&["-n", c, "route", "add", "default", "via", &relay_inner])?;
        ip(&[
            "route",
            "add",
            &self.compute_route,
            "via",
            &self.relay.to_string(),
        ])?;
        // The relay's host routes between its links (a new namespace does not forward).
        self.relay_sysctl("net.ipv4.ip_forward=1")
    }

    /// Sets `setting` (`key=value`) on the relay's host.
    fn relay_sysctl(&self, setting: &str) -> Result<(), String> {
        let r = &self.relay_ns;
        let set = self
            .relay_command("sysctl")
            .args(["-q", "-w", setting])
            .status()
            .map_err(|e| format!("sysctl in {r}: {e}"))?;
        if set.success() {
            Ok(())
        } else {
            Err(format!("sysctl {setting} in {r}: {set}"))
        }
    }

    /// [`Self::create`], with routing that is not symmetric: the client's segments to the
    /// relay go by a second link, which arrives at the relay's host as `toclient2`, while the
    /// relay's to the client go back by the first (a route for the relay's address only,
    /// from the client's usual address, gone with the link). Reverse-path filtering off on
    /// the relay's host, as such a host has it.
    ///
    /// # Panics
    /// As [`Self::create`].
    #[must_use]
    pub fn asymmetric() -> Self {
        let hosts = Self::create();
        let [_, _, k, _] = hosts.client.octets();
        let link = format!("{}2", hosts.client_link);
        let (near, far) = (format!("10.204.{k}.1/24"), format!("10.204.{k}.2"));
        let relay = format!("{}/32", hosts.relay);
        let r = hosts.relay_ns.as_str();
        let made = ip(&[
            "link",
            "add",
            &link,
            "type",
            "veth",
            "peer",
            "name",
            "toclient2",
            "netns",
            r,
        ])
        .and_then(|()| ip(&["addr", "add", &near, "dev", &link]))
        .and_then(|()| ip(&["link", "set", &link, "up"]))
        .and_then(|()| {
            ip(&[
                "-n",
                r,
                "addr",
                "add",
                &format!("{far}/24"),
                "dev",
                "toclient2",
            ])
        })
        .and_then(|()| ip(&["-n", r, "link", "set", "toclient2", "up"]))
        .and_then(|()| hosts.relay_sysctl("net.ipv4.conf.all.rp_filter=0"))
        .and_then(|()| hosts.relay_sysctl("net.ipv4.conf.toclient2.rp_filter=0"))
        .and_then(|()| {
            ip(&[
                "route",
                "add",
                &relay,
                "via",
                &far,
                "dev",
                &link,
                "src",
                &hosts.client.to_string(),
            ])
        });
        if let Err(e) = made {
            panic!("cannot make the second link: {e}");
        }
        hosts
    }

    /// Turns GRO on (or off) at both of the relay host's links (`ethtool`; a veth merges
    /// segments only with it on).
    ///
    /// # Panics
    /// If `ethtool` fails, with what it said.
    pub fn relay_gro(&self, on: bool) {
        for link in ["toclient", "tocompute"] {
            let out = self
                .relay_command("ethtool")
                .args(["-K", link, "gro", if on { "on" } else { "off" }])
                .output()
                .expect("ethtool (Debian: apt-get install ethtool)");
            assert!(
                out.status.success(),
                "ethtool -K {link} gro: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// `program`, to run on the relay's host ([`Self::on_relay`]).
    fn relay_command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(self.on_relay().get(1..).unwrap_or_default())
            .arg(program);
        command
    }

    /// The words that run a program on the relay's host: `nsenter` into its network
    /// namespace only (`ip netns exec` would also mount a `/sys` of its own, without the
    /// cgroup hierarchy the relay freezes computes with). The program keeps the process id
    /// `nsenter` started with.
    #[must_use]
    pub fn on_relay(&self) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}", self.relay_ns),
        ]
    }

    /// The words that run a program on the compute's host.
    #[must_use]
    pub fn on_compute(&self) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}", self.compute_ns),
        ]
    }
}

impl Drop for ThreeHosts {
    fn drop(&mut self) {
        let _ = ip(&["route", "del", &self.compute_route]);
        let _ = ip(&["netns", "del", &self.relay_ns]);
        let _ = ip(&["netns", "del", &self.compute_ns]);
        // Gone with their peers; removed here should the relay's namespace not have been made.
        let _ = ip(&["link", "del", &self.client_link]);
        let _ = ip(&["link", "del", &format!("{}2", self.client_link)]);
    }
}
