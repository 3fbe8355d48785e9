//! Async I/O pieces that both binaries run, kept in one place so the relay and server-shim
//! cannot drift apart: [`Rewind`] (a socket with bytes already read put back in front, for a
//! TLS ClientHello that arrived with the SSLRequest) and [`follow_key_file`] (the loop that
//! looks at a key file every second and on SIGHUP; what a reload does stays with each binary).
//!
//! `authplugin` cannot hold them: it is sans-I/O (CONTRIBUTING.md, *Pure codecs, I/O at the
//! edges*).

mod key_file;
mod rewind;

pub use key_file::{KEY_FILE_POLL_INTERVAL, follow_key_file};
pub use rewind::Rewind;
