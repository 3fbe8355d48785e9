//! `relay`: the perceptron (wake-on-connect MySQL relay) and its control plane.
//!
//! # Layout
//! - [`cli`]: the command line, parsed with clap; `main.rs` only calls into this crate.
//! - [`config`], [`duration`]: the TOML configuration and its validation.
//! - [`keygen`]: `relay keygen`, creating or extending the key file relays and computes share.
//! - [`server`]: listeners, accept loops, graceful shutdown.
//! - [`perceptron`]: the perceptron route, one module per phase (P1–P8).
//! - [`control`]: instance lifecycle, the single-flight wake, drivers, readiness.
//! - [`packet_io`]: the only module that reads or writes MySQL packets on a socket.
//! - [`direct`]: the direct route to a running compute.
//! - [`passthrough`]: the byte pump (both routes).
//! - [`compute_conn`], [`proxy_protocol`]: connecting to a compute, with PROXY v2 headers.
//! - [`ledger`]: the usage ledger and billing.
//! - [`profile`]: the compute greeting profile the relay imitates.
//! - [`outcome`]: how a connection ended: error kinds, metric labels, client-visible ERRs.
//! - [`metrics`]: every metric, in one place.
//! - [`admin`]: the admin HTTP API (status, pause, resume, usage, metrics).
//! - [`admin_client`]: `relay status | pause | resume | usage`, which call it.
//! - [`timefmt`]: UTC timestamps for usage reports.

pub mod admin;
pub mod admin_client;
pub mod cli;
pub mod compute_conn;
pub mod config;
pub mod control;
pub mod direct;
pub mod duration;
pub mod keygen;
pub mod ledger;
pub mod metrics;
pub mod outcome;
pub mod packet_io;
pub mod passthrough;
pub mod perceptron;
pub mod profile;
pub mod proxy_protocol;
pub mod server;
pub mod timefmt;
