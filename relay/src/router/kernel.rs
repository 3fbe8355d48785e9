//! The kernel route's I/O: Debian's `nft` run with a script on stdin (one transaction per
//! script), the conntrack table read from `/proc/net/nf_conntrack` (or `conntrack -L` where
//! the kernel does not offer the file), and the capability check. Every command has a
//! deadline. The scripts and the parsing live in [`super::nft`] and [`super::conntrack`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt as _;

use super::nft::{self, Dnat};
use super::{KernelRoute, conntrack};
use crate::future::BoxFuture;

/// Bound on each `nft` or `conntrack` command: a transaction on a small table takes
/// milliseconds; a command that hangs must not hold a pause or a wake forever.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// How long before its lease ends a renewal gives up: the kernel must still hold the route
/// when the renewal's `nft` commits.
const RENEWAL_MARGIN: Duration = Duration::from_millis(500);

/// A renewal this slow is logged (one takes about 10-20 ms on an idle host).
const SLOW_RENEWAL: Duration = Duration::from_secs(1);

/// `CAP_NET_ADMIN`'s bit in the capability sets of `/proc/self/status`.
const CAP_NET_ADMIN: u32 = 12;

/// Where the kernel offers the conntrack table as text (`CONFIG_NF_CONNTRACK_PROCFS`).
const PROC_CONNTRACK: &str = "/proc/net/nf_conntrack";

/// Directories searched for `nft` and `conntrack` when they are not on `PATH` (a service
/// manager's `PATH` often lacks the sbin directories where Debian installs them).
const SBIN_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin"];

/// Why the kernel route cannot be set up or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelRouteError {
    /// The relay process lacks `CAP_NET_ADMIN`.
    MissingCapability,
    /// No `nft` program was found.
    NftMissing,
    /// Neither `/proc/net/nf_conntrack` nor the `conntrack` program is available.
    ConntrackMissing,
    /// A command could not be run, or failed: what it said.
    Command {
        /// `nft` or `conntrack`.
        program: &'static str,
        /// Its exit status and standard error, or the spawn error.
        detail: String,
    },
    /// A command took longer than it was given ([`COMMAND_TIMEOUT`], or a lease's time left).
    Timeout(&'static str, Duration),
}

impl KernelRouteError {
    /// Metric label.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::MissingCapability => "missing_capability",
            Self::NftMissing => "nft_missing",
            Self::ConntrackMissing => "conntrack_missing",
            Self::Command { .. } => "command_failed",
            Self::Timeout(..) => "timeout",
        }
    }
}

impl fmt::Display for KernelRouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingCapability => f.write_str(
                "needs CAP_NET_ADMIN, which the relay process does not have: run it as root, or \
                 give it the capability as an ambient one (systemd: AmbientCapabilities=\
                 CAP_NET_ADMIN), so that the nft it runs inherits it; `setcap` on the relay \
                 binary alone is not enough",
            ),
            Self::NftMissing => f.write_str(
                "needs the nft program, which was not found on PATH or in /usr/sbin (Debian: \
                 apt-get install nftables)",
            ),
            Self::ConntrackMissing => f.write_str(
                "needs the conntrack table to count direct connections: this kernel has no \
                 /proc/net/nf_conntrack and the conntrack program was not found (Debian: \
                 apt-get install conntrack)",
            ),
            Self::Command { program, detail } => write!(f, "{program} failed: {detail}"),
            Self::Timeout(program, limit) => write!(
                f,
                "{program} did not finish within {} ms",
                limit.as_millis()
            ),
        }
    }
}

impl std::error::Error for KernelRouteError {}

/// Whether the capability set `field` (`CapEff`, `CapAmb`, ...) in the text of
/// `/proc/<pid>/status` holds capability `cap`; `None` when the field is missing or garbled.
#[must_use]
pub fn has_capability(status: &str, field: &str, cap: u32) -> Option<bool> {
    let hex = status.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })?;
    let set = u64::from_str_radix(hex, 16).ok()?;
    Some(set >> cap & 1 == 1)
}

/// How the relay reads the conntrack table.
#[derive(Debug, Clone)]
enum ConntrackSource {
    /// `/proc/net/nf_conntrack`.
    Proc(PathBuf),
    /// `conntrack -L -p tcp -o extended`.
    Tool(PathBuf),
}

/// The relay's nftables table: created (clearing what a crashed relay left) when the relay
/// starts, deleted when it exits.
#[derive(Debug)]
pub struct NftTable {
    name: String,
    nft: PathBuf,
    conntrack: ConntrackSource,
    /// The kernel renews a lease in place ([`nft::renew_script`]): found out at start.
    renews_in_place: bool,
}

impl NftTable {
    /// Checks that the relay can run the kernel route (capability, `nft`, a conntrack
    /// source), then clears table `name` and creates it afresh for `routes` (none installed).
    ///
    /// # Errors
    /// [`KernelRouteError`] saying what is missing, or what `nft` answered.
    pub async fn prepare(name: &str, routes: &[Dnat]) -> Result<Arc<Self>, KernelRouteError> {
        // procfs: answered from memory, never waits on a disk.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        // Unknown (no procfs): let nft's own answer speak.
        if has_capability(&status, "CapEff", CAP_NET_ADMIN) == Some(false) {
            return Err(KernelRouteError::MissingCapability);
        }
        let nft = find_program("nft").ok_or(KernelRouteError::NftMissing)?;
        let conntrack = if Path::new(PROC_CONNTRACK).exists() {
            ConntrackSource::Proc(PROC_CONNTRACK.into())
        } else {
            ConntrackSource::Tool(
                find_program("conntrack").ok_or(KernelRouteError::ConntrackMissing)?,
            )
        };
        let mut table = Self {
            name: name.to_owned(),
            nft,
            conntrack,
            renews_in_place: false,
        };
        table.run(&nft::create_script(name, routes)).await?;
        table.renews_in_place = table.probe_renewal_in_place().await?;
        if table.renews_in_place {
            tracing::debug!(
                table = name,
                "the kernel renews the kernel route's leases in place"
            );
        } else {
            tracing::warn!(
                table = name,
                "this kernel does not renew a set element's lease in place (Linux 6.10 does): each renewal of a kernel route installs it again, and on a loaded host its nft may take seconds to exit (it waits for the kernel to free the element it replaced)"
            );
        }
        Ok(Arc::new(table))
    }

    /// Whether the kernel renews a lease in place: [`nft::lease_probe_scripts`], run in the
    /// new table (four `nft` runs, at start only).
    async fn probe_renewal_in_place(&self) -> Result<bool, KernelRouteError> {
        let [short, renewed, list, delete] = nft::lease_probe_scripts(&self.name);
        self.run(&short).await?;
        self.run(&renewed).await?;
        let listing = self.run_within(&list, COMMAND_TIMEOUT).await;
        // Deleted whatever the listing said: the probe must never stay in the map.
        self.run(&delete).await?;
        Ok(nft::renewed_in_place(&listing?))
    }

    /// The table's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the table (relay exit). Connections it routed lose their NAT binding with it.
    ///
    /// # Errors
    /// What `nft` answered.
    pub async fn delete(&self) -> Result<(), KernelRouteError> {
        self.run(&nft::delete_script(&self.name)).await
    }

    /// Runs `script` as one transaction (`nft -f -`), within [`COMMAND_TIMEOUT`].
    async fn run(&self, script: &str) -> Result<(), KernelRouteError> {
        self.run_within(script, COMMAND_TIMEOUT).await.map(drop)
    }

    /// [`Self::run`] within `limit`: what `nft` printed.
    async fn run_within(&self, script: &str, limit: Duration) -> Result<String, KernelRouteError> {
        let command = async {
            let mut child = tokio::process::Command::new(&self.nft)
                .args(["-f", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| command_error("nft", e.to_string()))?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin
                    .write_all(script.as_bytes())
                    .await
                    .map_err(|e| command_error("nft", e.to_string()))?;
            }
            let out = child
                .wait_with_output()
                .await
                .map_err(|e| command_error("nft", e.to_string()))?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(command_error(
                    "nft",
                    format!(
                        "{}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                ))
            }
        };
        tokio::time::timeout(limit, command)
            .await
            .map_err(|_| KernelRouteError::Timeout("nft", limit))?
    }

    /// The conntrack table as text.
    async fn conntrack_table(&self) -> Result<String, KernelRouteError> {
        let read = async {
            match &self.conntrack {
                ConntrackSource::Proc(path) => {
                    // A large table takes the kernel a while to print: off the async threads.
                    let path = path.clone();
                    tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
                        .await
                        .map_err(|e| command_error("conntrack", e.to_string()))?
                        .map_err(|e| command_error("conntrack", e.to_string()))
                }
                ConntrackSource::Tool(program) => {
                    let out = tokio::process::Command::new(program)
                        .args(["-L", "-p", "tcp", "-o", "extended"])
                        .stdin(Stdio::null())
                        .stderr(Stdio::null())
                        .kill_on_drop(true)
                        .output()
                        .await
                        .map_err(|e| command_error("conntrack", e.to_string()))?;
                    if out.status.success() {
                        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
                    } else {
                        Err(command_error("conntrack", out.status.to_string()))
                    }
                }
            }
        };
        tokio::time::timeout(COMMAND_TIMEOUT, read)
            .await
            .map_err(|_| KernelRouteError::Timeout("conntrack", COMMAND_TIMEOUT))?
    }
}

fn command_error(program: &'static str, detail: String) -> KernelRouteError {
    KernelRouteError::Command { program, detail }
}

/// `name` on `PATH`, else in one of [`SBIN_DIRS`].
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// One instance's route in the relay's table.
#[derive(Debug)]
pub struct NftRoute {
    table: Arc<NftTable>,
    dnat: Dnat,
    /// When the route was last installed or renewed; `None` while it is not installed. Held
    /// across each `nft` run, so a renewal and a removal never interleave (a renewal that
    /// ran after a removal would put the route back behind the pause's back).
    leased: tokio::sync::Mutex<Option<Instant>>,
}

impl NftRoute {
    /// The route `dnat` in `table`.
    #[must_use]
    pub fn new(table: Arc<NftTable>, dnat: Dnat) -> Self {
        Self {
            table,
            dnat,
            leased: tokio::sync::Mutex::new(None),
        }
    }
}

impl KernelRoute for NftRoute {
    fn install(&self) -> BoxFuture<'_, Result<(), KernelRouteError>> {
        Box::pin(async move {
            let mut leased = self.leased.lock().await;
            let started = Instant::now();
            self.table
                .run(&nft::install_script(&self.table.name, &self.dnat))
                .await?;
            *leased = Some(started);
            Ok(())
        })
    }

    fn remove(&self) -> BoxFuture<'_, Result<(), KernelRouteError>> {
        Box::pin(async move {
            let mut leased = self.leased.lock().await;
            // Not renewed from here on, even if the removal fails: the lease then ends it.
            *leased = None;
            self.table
                .run(&nft::remove_script(&self.table.name, &self.dnat))
                .await
        })
    }

    fn open_connections(&self) -> BoxFuture<'_, Result<conntrack::RoutedCount, KernelRouteError>> {
        Box::pin(async move {
            let text = self.table.conntrack_table().await?;
            Ok(conntrack::count_routed(&text, &self.dnat))
        })
    }

    fn keep_alive(&self) -> BoxFuture<'_, Result<Option<Duration>, KernelRouteError>> {
        Box::pin(async move {
            let mut leased = self.leased.lock().await;
            let Some(age) = leased.map(|at| at.elapsed()) else {
                return Ok(None);
            };
            if age < nft::LEASE_RENEW {
                return Ok(None);
            }
            // As long as the lease has left, and at least the usual timeout: an `nft` slowed
            // by a loaded host still renews it, where a fixed timeout would end the run and
            // leave the next try too little time. (A removal waits for the renewal under way,
            // so a pause may wait up to 7.5 s for it.)
            let limit = nft::ROUTE_LEASE
                .saturating_sub(age)
                .saturating_sub(RENEWAL_MARGIN)
                .max(COMMAND_TIMEOUT);
            let started = Instant::now();
            let script = if self.table.renews_in_place {
                nft::renew_script(&self.table.name, &self.dnat)
            } else {
                nft::install_script(&self.table.name, &self.dnat)
            };
            self.table.run_within(&script, limit).await?;
            *leased = Some(started);
            let took = started.elapsed();
            if took >= SLOW_RENEWAL {
                tracing::warn!(table = %self.table.name, took_ms = took.as_millis(), lease_age_ms = age.as_millis(), "renewing the kernel route's lease took long (nft ran slowly: a loaded host?)");
            }
            Ok(Some(took))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\trelay\nUid:\t1000\t1000\t1000\t1000\n\
        CapInh:\t0000000000000000\nCapPrm:\t0000000000001000\nCapEff:\t0000000000001000\n\
        CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";

    #[test]
    fn reads_capability_sets_from_proc_status() {
        assert_eq!(has_capability(STATUS, "CapEff", CAP_NET_ADMIN), Some(true));
        assert_eq!(has_capability(STATUS, "CapAmb", CAP_NET_ADMIN), Some(false));
        assert_eq!(has_capability(STATUS, "CapEff", 21), Some(false));
        assert_eq!(has_capability("Name:\trelay\n", "CapEff", 12), None);
        assert_eq!(has_capability("CapEff:\tzz\n", "CapEff", 12), None);
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = KernelRouteError::MissingCapability.to_string();
        assert!(
            e.contains("CAP_NET_ADMIN") && e.contains("AmbientCapabilities"),
            "{e}"
        );
        assert!(
            KernelRouteError::NftMissing
                .to_string()
                .contains("apt-get install nftables")
        );
    }
}
