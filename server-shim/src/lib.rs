//! `server-shim`: Perceptron's stand-in compute node (DESIGN §1, issue 3). An
//! `opensrv-mysql` server whose login hook implements dual verification (DESIGN §3, P7), an
//! account store that keeps only password hashes, and an embedded persistent SQL engine
//! (GlueSQL on redb), with a user-management CLI.
//!
//! # Layout
//! - [`cli`]: the command line (`run`, `user add|remove|list`); `main.rs` only calls it.
//! - [`server`]: the accept loop, graceful shutdown, and the `AsyncMysqlShim` per connection.
//! - [`stream`]: the socket adapter that tees the login packet and rewrites a refused login's
//!   ERR to 1045, with read and write deadlines.
//! - [`auth`]: the login decision, relayed (payload verification) and direct.
//! - [`accounts`]: the account file (hashes only, mode 0600, atomic writes).
//! - [`session`]: per-connection state and statement dispatch.
//! - [`classify`]: which statements the session answers and which go to the engine.
//! - [`variables`]: the system variables clients ask for.
//! - [`engine`]: the `Engine`/`Executor` traits, GlueSQL over redb, the database catalog.
//! - [`results`]: writing result sets, OK and ERR packets.
//! - [`sql_error`]: MySQL error codes for every failure (one place).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod accounts;
pub mod auth;
pub mod classify;
pub mod cli;
pub mod engine;
pub mod results;
pub mod server;
pub mod session;
pub mod sql_error;
pub mod stream;
pub mod variables;
