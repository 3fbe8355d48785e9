//! The instance's side of the kernel route (`route = "nftables"`, see [`crate::router`]):
//! installed once the compute is ready, removed before a pause, and the connections it sent
//! counted, since the relay never sees them.

use std::time::Duration;

use super::{Instance, PauseError};
use crate::metrics::KernelRouteAction;
use crate::router::KernelRouteError;
use crate::router::conntrack::RoutedCount;

/// How long a pause waits after removing the kernel route before it counts the connections
/// the route sent: a SYN that passed the DNAT just before the element went shows in the
/// conntrack table once it has left the hook, microseconds later. Cheap next to a pause.
const ROUTE_SETTLE: Duration = Duration::from_millis(20);

/// How long a pause waits for routed connections that have not spoken yet before it stops the
/// compute under them: a client sends its login within milliseconds of the greeting.
const BARE_GRACE: Duration = Duration::from_secs(1);

impl Instance {
    /// Closes the kernel route before a pause stops the compute. Unforced, it then counts the
    /// connections the route sent: any whose client has spoken (a client that connected
    /// between the last count and the removal, given [`BARE_GRACE`] to send its login)
    /// abandons the pause, and the route goes back. A route that cannot
    /// be removed or counted abandons it too: a pause must never leave new connections a dead
    /// port or cut a session. Forced, the compute stops whatever happens here.
    pub(super) async fn close_route(&self, force: bool) -> Result<(), PauseError> {
        if self.kernel.is_none() {
            return Ok(());
        }
        let removed = self.remove_route().await;
        if force {
            return Ok(());
        }
        if let Err(e) = removed {
            return Err(PauseError::Route(e.to_string()));
        }
        tokio::time::sleep(ROUTE_SETTLE).await;
        let mut count = self.count_kernel_connections().await;
        if count.is_some_and(|n| n.spoke == 0 && n.open > 0) {
            // Routed connections whose client has not spoken: one that connected just before
            // the removal is still reading its greeting. They get BARE_GRACE to send their
            // login (no new ones arrive: the route is gone); connects that stay silent do not
            // hold the compute, as pending connections do not on the pump route.
            tokio::time::sleep(BARE_GRACE).await;
            count = self.count_kernel_connections().await;
        }
        let open = count.map(|n| n.spoke);
        if open == Some(0) {
            return Ok(());
        }
        self.install_route().await;
        Err(match open {
            Some(n) => PauseError::Busy(n),
            None => PauseError::Route("cannot count the connections it routed".into()),
        })
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
                tracing::info!(instance = %name, listen = %self.config.listen, compute = %self.config.compute, "kernel route installed: new connections go straight to the compute");
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
        if let Err(e) = kernel.keep_alive().await {
            self.metrics.kernel_route(
                &self.config.name,
                KernelRouteAction::install,
                Some(e.label()),
            );
            tracing::warn!(instance = %self.config.name, error = %e, "cannot renew the kernel route's lease; it lapses unless a later renewal succeeds (new connections then reach the relay)");
        }
        match kernel.open_connections().await {
            Ok(count) => {
                let n = count.spoke;
                let mut inner = self.lock();
                if inner.kernel_open > 0 && n == 0 {
                    inner.idle_since = tokio::time::Instant::now();
                }
                inner.kernel_open = n;
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
