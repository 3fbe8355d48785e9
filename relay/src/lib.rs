//! `relay`: the perceptron (wake-on-connect MySQL relay) and its control plane.
//!
//! # Layout
//! Modules are listed from the top of the dependency graph down; a module uses only modules
//! listed below it (no cycles, no upward arrows).
//! - [`cli`]: the command line, parsed with clap; `main.rs` only calls into this crate.
//! - `admin_client`: `relay status | pause | resume | usage`, which call the admin API.
//! - `server`: the relay process: per-instance listeners, the router between the two
//!   routes, graceful shutdown.
//! - `admin`: the admin HTTP API (status, pause, resume, usage, metrics).
//! - `direct`: the direct route to a running compute.
//! - `perceptron`: the perceptron route, one function per phase (P1–P8), and how its
//!   connections end (error kinds, metric labels, client-visible ERRs).
//! - `runtime`: what every connection of one instance shares.
//! - `control`: instance lifecycle, the single-flight wake, drivers, readiness.
//! - `router`: the kernel route (nftables DNAT while running, conntrack counts) beside the
//!   pump.
//! - `compute_conn`, `proxy_protocol`: connecting to a compute, with PROXY v2 headers.
//! - `listener`: listening sockets and the shared accept loop.
//! - `limits`: admission for the pre-login phase (caps per relay, instance and source).
//! - `budgets`: wake-cost budgets: failed logins and wakes per source and per user, blocks.
//! - `passthrough`: the byte pump (both routes).
//! - `packet_io`: the only module that reads or writes MySQL packets on a socket.
//! - `ledger`: the usage ledger and billing.
//! - `http_client`: one HTTP/1.1 request with a deadline (the http driver and the CLI).
//! - `metrics`: every metric, in one place.
//! - `preflight`: what `relay check` and `run` verify before listening (files, programs,
//!   addresses), and the state directory's lock.
//! - `config`, `duration`: the TOML configuration and its validation.
//! - `profile`: the compute greeting profile the relay imitates.
//! - `lifecycle`: the lifecycle phases, named once for control, ledger and metrics.
//! - `keygen`: `relay keygen`, creating or extending the key file relays and computes share.
//! - `keys`: the key ring following its key file (polled, and on SIGHUP).
//! - `timefmt`: UTC timestamps for usage reports.
//! - `logsafe`: client-supplied text escaped for log lines.
//! - `tls`: TLS on the client leg (rustls, ring): certificates, the client stream, the
//!   handshake and its failure classes.
//!
//! Only `cli` is public (`main.rs` calls [`cli::main`]), so the compiler reports dead code
//! everywhere else.

mod admin;
mod admin_client;
mod budgets;
mod capacity;
pub mod cli;
mod compute_conn;
mod config;
mod control;
mod direct;
mod duration;
// Without etcd the store types are only the seam.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
mod fleet;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod http_client;
#[cfg(any(test, feature = "fuzzing"))]
mod in_memory;
mod keygen;
mod keys;
mod ledger;
mod lifecycle;
mod limits;
mod listener;
mod login_watch;
mod logsafe;
mod metrics;
mod packet_io;
mod passthrough;
mod perceptron;
mod preflight;
mod profile;
mod proxy_protocol;
mod router;
mod runtime;
mod server;
mod timefmt;
mod tls;
