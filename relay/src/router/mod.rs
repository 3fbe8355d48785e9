//! The router (architecture.md §6, "out of the data path once running"): how new connections reach a
//! running compute. Two routes, chosen per instance with `route`:
//!
//! - `pump` (the default, works anywhere): the relay accepts every connection and, while the
//!   instance runs, copies its bytes to the compute (`crate::direct`).
//! - `nftables` (Linux, `CAP_NET_ADMIN`): while the instance runs, the kernel DNATs new
//!   connections for the instance's listen address straight to the compute; the relay sees
//!   none of their bytes. Before the compute stops, the route is removed, so new connections
//!   reach the relay's own listener again (the perceptron) while the ones already routed keep
//!   their compute (conntrack). The relay learns how many are open from conntrack, and
//!   auto-pause counts those whose client has spoken. Each route is a lease the relay
//!   renews: a relay that dies (even by SIGKILL) leaves no route behind for longer than
//!   [`nft::ROUTE_LEASE`].
//!
//! # Layout
//! - [`nft`]: the table, its chains and maps, and each instance's element, as `nft` script
//!   text (pure).
//! - [`conntrack`]: counting an instance's routed connections in the conntrack table (pure).
//! - [`kernel`]: running `nft`, reading conntrack, checking `CAP_NET_ADMIN` (the I/O).
//!
//! The control plane drives a route through [`KernelRoute`], so its ordering (the route goes
//! before the compute stops; a pause that finds routed connections after the route is gone
//! puts it back) is tested with a scripted route, without root.

pub mod conntrack;
pub mod kernel;
pub mod nft;

pub use kernel::KernelRouteError;

use std::time::Duration;

use crate::future::BoxFuture;

/// One instance's route in the kernel.
pub trait KernelRoute: Send + Sync {
    /// Sends new connections for the instance's listen address to its compute. Idempotent.
    fn install(&self) -> BoxFuture<'_, Result<(), KernelRouteError>>;
    /// Stops sending new connections to the compute; established ones keep it. Idempotent.
    fn remove(&self) -> BoxFuture<'_, Result<(), KernelRouteError>>;
    /// How many connections the route sent to the compute are open now, and how many of
    /// those have carried client payload.
    fn open_connections(&self) -> BoxFuture<'_, Result<conntrack::RoutedCount, KernelRouteError>>;
    /// Renews the installed route's lease (see [`nft::ROUTE_LEASE`]) when it is due; nothing
    /// when the route is not installed. Called about once a second while the instance runs.
    /// How long the renewal took, when one ran.
    fn keep_alive(&self) -> BoxFuture<'_, Result<Option<Duration>, KernelRouteError>> {
        Box::pin(async { Ok(None) })
    }
}
