//! The instance's side of the kernel route (`route = "nftables"`, see [`crate::router`]):
//! installed once the compute is ready, removed before a pause, and the connections it sent
//! counted, since the relay never sees them.

use std::time::Duration;

use super::{Instance, PauseError};
use crate::metrics::KernelRouteAction;
use crate::router::KernelRouteError;

/// How long a pause waits after removing the kernel route before it counts the connections
/// the route sent: a SYN that passed the DNAT just before the element went shows in the
/// conntrack table once it has left the hook, microseconds later. Cheap next to a pause.
const ROUTE_SETTLE: Duration = Duration::from_millis(20);

impl Instance {
    /// Closes the kernel route before a pause stops the compute. Unforced, it then counts the
    /// connections the route sent: any open one (a client that connected between the last
    /// count and the removal) abandons the pause, and the route goes back. A route that cannot
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
        let open = self.count_kernel_connections().await;
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

    /// Counts the open connections the kernel route sent to the compute (conntrack) and
    /// records the count; when it drops to zero the idle clock starts. `None` when the
    /// instance has no kernel route or the count failed (logged; the last count stands).
    pub(super) async fn count_kernel_connections(&self) -> Option<usize> {
        let kernel = self.kernel.as_ref()?;
        match kernel.open_connections().await {
            Ok(n) => {
                let mut inner = self.lock();
                if inner.kernel_open > 0 && n == 0 {
                    inner.idle_since = tokio::time::Instant::now();
                }
                inner.kernel_open = n;
                drop(inner);
                self.metrics.set_kernel_connections(&self.config.name, n);
                Some(n)
            }
            Err(e) => {
                tracing::warn!(instance = %self.config.name, error = %e, "cannot count the kernel route's connections");
                None
            }
        }
    }
}
