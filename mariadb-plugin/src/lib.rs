//! `perceptron_dual`: a MariaDB server authentication plugin that verifies relayed logins.
//!
//! architecture.md §2 P7 and §3 on a stock `mariadbd`: an account `IDENTIFIED VIA perceptron_dual` is
//! challenged with a fresh scramble **B** offered under `mysql_native_password`. The reply
//! decides the route:
//!
//! - a **relayed-auth payload** (the relay's answer, recognised by its shape: longer than a
//!   native token and starting with `PCPT`) is verified as architecture.md §3 says: the relay's HMAC
//!   over B, the user and the login's database, freshness, the replay window, then the
//!   client's own answer to the relay's scramble A against the stored hash;
//! - a **native answer** (20 bytes, or empty for an empty password), from a stock client on the
//!   direct route, is checked against the same hash with B, unless
//!   `perceptron_dual_require_relay` is ON.
//!
//! The stored form is `mysql_native_password`'s (`*` + 40 hex digits), so an existing account
//! moves over with one `ALTER USER ... IDENTIFIED VIA perceptron_dual USING '*HEX'`.
//!
//! # Layout
//! - [`abi`]: the C structs MariaDB 10.11 exchanges with plugins, with size assertions.
//! - `ffi`: the exported symbols and `extern "C"` entry points — the only `unsafe` code,
//!   each entry point catching panics.
//! - [`decision`]: the safe core — classify the reply, verify it, say why a login is refused.
//! - [`stored_hash`]: `hash_password` and `preprocess_hash`: the `*HEX` text and its 20 bytes.
//! - [`key_source`]: the key ring from `perceptron_dual_key_file`, reloaded when the file
//!   changes.
//! - [`error_log`]: lines for the server's error log (its stderr).

pub mod abi;
pub mod decision;
pub mod error_log;
mod ffi;
pub mod key_source;
pub mod stored_hash;
