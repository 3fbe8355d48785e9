//! The instance's side of the kernel route (`route = "nftables"`, see [`crate::router`]):
//! installed once the compute is ready, removed before a pause, and the connections it sent
//! counted, since the relay never sees them.

use std::sync::Arc;
use std::time::Duration;

use super::routed_parking::{self, RoutedWatch};
use super::{Instance, PauseError, State, parking};
use crate::metrics::KernelRouteAction;
use crate::router::KernelRouteError;
use crate::router::conntrack::RoutedCount;

/// How long a pause waits after removing the kernel route before it counts the connections
/// the route sent: a SYN that passed the DNAT just before the element went shows in the
/// conntrack table once it has left the hook, microseconds later. Cheap next to a pause.
const ROUTE_SETTLE: Duration = Duration::from_millis(20);

/// The shortest time over which the compute's CPU use is judged.
const CPU_WINDOW: Duration = Duration::from_millis(500);

/// How long a pause waits for routed connections that have not spoken yet before it stops the
/// compute under them: a client sends its login within milliseconds of the greeting.
const BARE_GRACE: Duration = Duration::from_secs(1);

impl Instance {
    /// Closes the kernel route before a pause stops the compute. Unforced, it then counts the
    /// connections the route sent: any whose client has spoken (a client that connected
    /// between the last count and the removal, given [`BARE_GRACE`] to send its login)
    /// abandons the pause, and the route goes back, unless the pause parks (`park_pid`: the
    /// compute's process) and every such session is between commands: then their sockets are
    /// watched from here on ([`RoutedWatch`]), for the thaw at their next byte. A route that
    /// cannot be removed or counted abandons it too: a pause must never leave new connections
    /// a dead port or cut a session. Forced, the compute stops whatever happens here.
    pub(super) async fn close_route(
        &self,
        force: bool,
        park_pid: Option<u32>,
    ) -> Result<Option<RoutedWatch>, PauseError> {
        if self.kernel.is_none() {
            return Ok(None);
        }
        let removed = self.remove_route().await;
        if force {
            return Ok(None);
        }
        if let Err(e) = removed {
            return Err(PauseError::Route(e.to_string()));
        }
        tokio::time::sleep(ROUTE_SETTLE).await;
        let mut count = self.count_kernel_connections().await;
        if count.as_ref().is_some_and(|n| n.spoke == 0 && n.open > 0) {
            // Routed connections whose client has not spoken: one that connected just before
            // the removal is still reading its greeting. They get BARE_GRACE to send their
            // login (no new ones arrive: the route is gone); connects that stay silent do not
            // hold the compute, as pending connections do not on the pump route.
            tokio::time::sleep(BARE_GRACE).await;
            count = self.count_kernel_connections().await;
        }
        let open = count.as_ref().map(|n| n.spoke);
        if open == Some(0) {
            return Ok(None);
        }
        if let (Some(pid), Some(n)) = (park_pid, &count) {
            if let Some(watch) = self.park_routed_sessions(pid, n) {
                return Ok(Some(watch));
            }
        }
        self.install_route().await;
        Err(match open {
            Some(n) => PauseError::Busy(n),
            None => PauseError::Route("cannot count the connections it routed".into()),
        })
    }

    /// Whether the running compute is idle ([`Self::compute_working`] says not): a spliced
    /// session may be taken back for parking.
    pub fn compute_idle(&self) -> bool {
        !self.compute_working()
    }

    /// Whether the running compute worked since the last look ([`routed_parking::working`]),
    /// over half a second at least (`/proc` counts CPU time in 10 ms steps); the first look,
    /// or a compute whose CPU time cannot be read, counts as working.
    fn compute_working(&self) -> bool {
        let mut inner = self.lock();
        let State::Running(running) = &inner.state else {
            return true;
        };
        let Some(cpu) = running.pid().and_then(routed_parking::process_cpu) else {
            return true;
        };
        let now = (std::time::Instant::now(), cpu);
        match inner.cpu_sample {
            Some((before, _)) if now.0.saturating_duration_since(before.0) < CPU_WINDOW => {}
            Some((before, _)) => {
                inner.cpu_sample = Some((now, routed_parking::working(before, now)))
            }
            None => inner.cpu_sample = Some((now, true)),
        }
        inner.cpu_sample.is_none_or(|(_, working)| working)
    }

    /// The watch over `count`'s sessions, when they are all between commands and their
    /// sockets can be watched in process `pid`. They are looked up again here rather than
    /// read from `kernel_busy`: the count that returned `count` ran while the instance was
    /// already pausing, when the compute's CPU is not judged and counts as working (the
    /// decision to pause judged it, while running).
    fn park_routed_sessions(&self, pid: u32, count: &RoutedCount) -> Option<RoutedWatch> {
        if count.busy > 0 || routed_parking::inspect(&count.sessions).busy > 0 {
            return None;
        }
        match RoutedWatch::prepare(pid, &count.sessions) {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::warn!(instance = %self.config.name, error = %e, "cannot watch the kernel route's sessions in the compute; they keep it running");
                None
            }
        }
    }

    /// Once frozen: thaws the compute at the first byte a parked routed session sends (or
    /// at once, if one turned busy while the freeze was under way), until the instance leaves
    /// `Frozen`. Returns how many sessions it watches.
    pub(super) fn watch_routed_sessions(self: &Arc<Self>, watch: RoutedWatch) -> usize {
        let sessions = watch.len();
        let stop = tokio_util::sync::CancellationToken::new();
        {
            let mut inner = self.lock();
            if !matches!(inner.state, State::Frozen(_)) {
                return 0;
            }
            inner.kernel_parked = sessions;
            inner.routed_watch = Some(stop.clone());
        }
        let instance = Arc::clone(self);
        tokio::spawn(async move {
            // A command sent between the last look and the freeze: the compute may have read
            // it before it froze, so no byte waits in its socket (one lookup per session, not
            // the conntrack table: the thaw must not wait behind a table walk).
            if !watch.commanded() {
                tokio::select! {
                    () = watch.first_byte() => {}
                    () = stop.cancelled() => return,
                }
            }
            drop(watch);
            if !stop.is_cancelled() {
                parking::thaw_for_command(&instance);
            }
        });
        sessions
    }

    /// Installs the kernel route, if the instance has one. A failure is logged and counted;
    /// the instance still runs, reached through the pump (the relay keeps listening).
    pub(super) async fn install_route(&self) {
        let Some(kernel) = &self.kernel else {
            return;
        };
        let name = &self.config.name;
        if !self.trusted(self.lock().trust) {
            // Installed once a probe or a relayed login proves the key (`Instance::mark_proven`).
            tracing::info!(instance = %name, "kernel route not installed: the compute has not proven it holds the key");
            return;
        }
        match kernel.install().await {
            Ok(()) => {
                self.lock().kernel_installed = true;
                self.metrics
                    .kernel_route(name, KernelRouteAction::install, None);
                tracing::info!(instance = %name, listen = ?self.config.listen, compute = %self.config.compute, "kernel route installed: new connections go straight to the compute");
            }
            Err(e) => {
                self.metrics
                    .kernel_route(name, KernelRouteAction::install, Some(e.label()));
                tracing::error!(instance = %name, error = %e, "cannot install the kernel route; forwarding through the relay (pump) instead");
            }
        }
    }

    /// Removes the kernel route, if the instance has one: new connections reach the relay
    /// again; the ones it routed keep their compute.
    pub(super) async fn remove_route(&self) -> Result<(), KernelRouteError> {
        let Some(kernel) = &self.kernel else {
            return Ok(());
        };
        let name = &self.config.name;
        let removed = kernel.remove().await;
        match &removed {
            Ok(()) => {
                self.lock().kernel_installed = false;
                self.metrics
                    .kernel_route(name, KernelRouteAction::remove, None);
                tracing::info!(instance = %name, "kernel route removed: new connections reach the relay");
            }
            Err(e) => {
                self.metrics
                    .kernel_route(name, KernelRouteAction::remove, Some(e.label()));
                tracing::error!(instance = %name, error = %e, "cannot remove the kernel route");
            }
        }
        removed
    }

    /// Renews the kernel route's lease when due (see [`crate::router::nft::ROUTE_LEASE`]),
    /// then counts the open connections the kernel route sent to the compute (conntrack) and
    /// records those whose client has spoken as the instance's activity: when that drops to
    /// zero the idle clock starts, and bare connects never count. `None` when the instance has
    /// no kernel route or the count failed (logged; the last count stands).
    pub(super) async fn count_kernel_connections(&self) -> Option<RoutedCount> {
        let kernel = self.kernel.as_ref()?;
        match kernel.keep_alive().await {
            Ok(Some(took)) => self.metrics.kernel_route_renewed(&self.config.name, took),
            Ok(None) => {}
            Err(e) => {
                self.metrics.kernel_route(
                    &self.config.name,
                    KernelRouteAction::install,
                    Some(e.label()),
                );
                tracing::warn!(instance = %self.config.name, error = %e, "cannot renew the kernel route's lease; it lapses unless a later renewal succeeds (new connections then reach the relay)");
            }
        }
        match kernel.open_connections().await {
            Ok(count) => {
                let n = count.spoke;
                // Without parking every session that spoke holds the instance running.
                let idleness = if self.config.park && count.busy == 0 && n > 0 {
                    let mut idleness = routed_parking::inspect(&count.sessions);
                    if idleness.busy == 0 && self.compute_working() {
                        idleness.busy = 1;
                    }
                    idleness
                } else {
                    routed_parking::RoutedIdleness {
                        busy: n,
                        quiet_for: None,
                    }
                };
                let now = tokio::time::Instant::now();
                let mut inner = self.lock();
                if inner.kernel_open > 0 && n == 0 {
                    inner.idle_since = now;
                }
                // The routed sessions' last payload is use, as a pumped command is.
                if let Some(used) = idleness.quiet_for.and_then(|q| now.checked_sub(q)) {
                    inner.idle_since = inner.idle_since.max(used);
                }
                inner.kernel_open = n;
                inner.kernel_busy = idleness.busy;
                // Kernel-routed sessions that spoke: their logins' outcomes are not seen.
                if n > 0 {
                    inner.logins_since_wake.accepted = true;
                }
                drop(inner);
                self.metrics.set_kernel_connections(&self.config.name, n);
                Some(count)
            }
            Err(e) => {
                tracing::warn!(instance = %self.config.name, error = %e, "cannot count the kernel route's connections");
                None
            }
        }
    }
}
