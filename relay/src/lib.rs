//! `relay`: the perceptron (wake-on-connect MySQL relay) and its control plane.
//!
//! # Layout
//! Modules are listed from the top of the dependency graph down; a module uses only modules
//! listed below it (no cycles, no upward arrows). `scripts/module-graph` checks this list
//! against the code (and `scripts/test` runs it).
//! - [`cli`]: the command line, parsed with clap; `main.rs` only calls into this crate.
//! - `admin_client`: `relay status | pause | resume | usage`, which call the admin API.
//! - `server`: the relay process: per-instance listeners, the router between the two
//!   routes, graceful shutdown.
//! - `admin`: the admin HTTP API (status, pause, resume, usage, metrics, instances added and
//!   removed).
//! - `instance_dir`: `relay.instances_dir`, instance files watched and followed.
//! - `hosting`: starting an instance in the running relay (listener, runtime, tasks) and
//!   removing it (drain or cut, then its compute stopped).
//! - `preflight`: what `relay check` and `run` verify before listening (files, programs,
//!   addresses, the admin token), and the state directory's lock.
//! - `endpoint`: a listener shared by instances (`[[endpoint]]`), routing each login by its
//!   user name onto the perceptron route.
//! - `direct`: the direct route to a running compute.
//! - `perceptron`: the perceptron route, one function per phase (P1–P8), and how its
//!   connections end (error kinds, metric labels, client-visible ERRs).
//! - `watch`: the command watch of a pumped connection, on either route: what its commands
//!   tell the instance (between commands, resumable or why not), answers for a frozen or
//!   stopped compute, what a reattach needs.
//! - `registry`: the live and draining instances, by name (what endpoints, the admin API and
//!   shutdown read).
//! - `runtime`: what every connection of one instance shares.
//! - `control`: instance lifecycle, the single-flight wake, the frozen tier, the kernel
//!   route's installation, scaling, billing rates; drivers (`control::driver`) and readiness.
//! - `fleet`: several relays sharing instances through a state store (etcd).
//! - `router`: the kernel route (nftables DNAT while running, conntrack counts) beside the
//!   pump.
//! - `compute_conn`, `proxy_protocol`: connecting to a compute, with PROXY v2 headers.
//! - `listener`: listening sockets and the shared accept loop.
//! - `budgets`: wake-cost budgets: failed logins and wakes per source and per user, blocks.
//! - `limits`: admission for the pre-login phase (caps per relay, instance and source).
//! - `splice`: held connections spliced in the kernel: an eBPF sockhash on any host
//!   (`splice::sockhash`), and below TCP on loopback, a TC program rewriting each segment from
//!   one connection into the other, taken back through TCP repair mode (`splice::below_tcp`).
//! - `passthrough`: the byte pump (both routes).
//! - `login_watch`: reading a direct-route login's verdict off the byte stream.
//! - `session_effects`: what a relayed session's commands did to its state (pins, transactions,
//!   prepared statements).
//! - `session_state`: a session's state read by value from its compute, and the statements that
//!   restore it on another.
//! - `statement_ids`: prepared statement ids mapped between a client and a new compute.
//! - `kill_ids`: the session a `KILL` names by the id the relay's greeting gave, rewritten in
//!   place to the compute's.
//! - `conversation`: where a logged-in connection is between commands (idle, busy), read
//!   off both directions' bytes.
//! - `packet_io`: the only module that reads or writes MySQL packets on a socket.
//! - `offload`: a paused instance's data moved to object storage and back (chunks, manifest).
//! - `ledger`: the usage ledger and billing.
//! - `http_client`: one HTTP/1.1 request with a deadline (the http driver and the CLI).
//! - `keys`: the key ring following its key file (polled, and on SIGHUP).
//! - `metrics`: every metric, in one place.
//! - `tls`: TLS on the client leg (rustls, ring): certificates, the client stream, the
//!   handshake and its failure classes.
//! - `config`, `duration`: the TOML configuration and its validation.
//! - `capacity`: compute capacity units (CCU) and `[instance.capacity]`.
//! - `profile`: the compute greeting profile the relay imitates.
//! - `lifecycle`, `route`: the lifecycle phases and a connection's two routes, each named
//!   once for control, ledger, metrics and the admin API.
//! - `clock`, `future`: the wall clock in Unix ms and the boxed future of `dyn` seams.
//! - `keygen`: `relay keygen`, creating or extending the key file relays and computes share.
//! - `admin_api`: the admin API's bodies as types, written by `admin`, read by `admin_client`.
//! - `timefmt`: UTC timestamps for usage reports.
//! - `logsafe`: client-supplied text escaped for log lines.
//! - `sys`: what the relay asks Linux about sockets (`sock_diag`) and listeners' owners.
//!
//! Only `cli` is public (`main.rs` calls [`cli::main`]), so the compiler reports dead code
//! everywhere else.

mod admin;
mod admin_api;
mod admin_client;
mod budgets;
mod capacity;
pub mod cli;
mod clock;
mod compute_conn;
mod config;
mod control;
mod conversation;
mod direct;
mod duration;
mod endpoint;
// Without etcd the store types are only the seam.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
mod fleet;
mod future;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod hosting;
mod http_client;
#[cfg(any(test, feature = "fuzzing"))]
mod in_memory;
mod instance_dir;
mod keygen;
mod keys;
mod kill_ids;
mod ledger;
mod lifecycle;
mod limits;
mod listener;
mod login_watch;
mod logsafe;
mod metrics;
mod offload;
mod packet_io;
mod passthrough;
mod perceptron;
mod preflight;
mod profile;
mod proxy_protocol;
mod registry;
mod route;
mod router;
mod runtime;
mod server;
mod session_effects;
mod session_state;
mod splice;
mod statement_ids;
mod sys;
mod timefmt;
mod tls;
mod watch;
