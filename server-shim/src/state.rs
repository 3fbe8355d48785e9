//! The state every connection of one server shares: the catalog, the accounts, the key
//! ring and replay window (architecture.md §3, P7), deadlines, the shutdown token and connection ids.
//!
//! Its own module so that the accept loop ([`crate::server`]) and the per-connection session
//! ([`crate::session`]) both depend on it without depending on each other.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use authplugin::ReplayGuard;
use authplugin::key_file::LiveKeyRing;
use tokio_util::sync::CancellationToken;

use crate::accounts::AccountStore;
use crate::catalog::Catalog;
use crate::stream::Timeouts;

/// Everything the connections share.
pub struct ServerState {
    /// The databases.
    pub catalog: Arc<Catalog>,
    /// The accounts.
    pub accounts: AccountStore,
    /// The perceptron key ring (`--key-file`), following the file (polled every second, read
    /// on SIGHUP, and looked at when a login names a key id the ring lacks); without it
    /// relayed logins are refused.
    pub key_ring: Option<Arc<LiveKeyRing>>,
    /// One replay window for the whole process, so a relayed login is accepted once.
    pub replay: Mutex<ReplayGuard>,
    /// Connection deadlines.
    pub timeouts: Timeouts,
    /// Longest wait for a database's lock (`innodb_lock_wait_timeout`).
    pub lock_wait: Duration,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// `--tls-cert`: the greeting offers TLS and the shim terminates it; `None` offers none.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// `--require-secure-transport`: a login without TLS gets ERR 3159.
    pub require_secure_transport: bool,
    /// `--ticket-key-file`: resumption tickets for relayed sessions; `None` issues none and
    /// refuses every reattach.
    pub tickets: Option<crate::tickets::Tickets>,
    /// The open connections, for `KILL`.
    pub processes: Arc<crate::processes::Processes>,
    /// `--log-failed-statements`: how many characters of a failed statement's text the log
    /// keeps beside its error (0: none, only the error code).
    pub failed_statement_chars: usize,
    /// The next connection id (the greeting's `connection_id`, `CONNECTION_ID()`).
    next_conn_id: AtomicU32,
}

impl ServerState {
    /// Shared state over `catalog` and `accounts`.
    #[must_use]
    pub fn new(
        catalog: Arc<Catalog>,
        accounts: AccountStore,
        key_ring: Option<Arc<LiveKeyRing>>,
        timeouts: Timeouts,
        lock_wait: Duration,
    ) -> Self {
        Self {
            catalog,
            accounts,
            key_ring,
            replay: Mutex::new(ReplayGuard::default()),
            timeouts,
            lock_wait,
            shutdown: CancellationToken::new(),
            tls: None,
            require_secure_transport: false,
            tickets: None,
            processes: Arc::default(),
            failed_statement_chars: 0,
            next_conn_id: AtomicU32::new(1),
        }
    }

    /// A fresh connection id.
    pub fn conn_id(&self) -> u32 {
        // Ids increase per connection, in the lower half (the upper is the relays',
        // `processes::RELAY_IDS`); after a wrap-around, 0 and ids still open are skipped
        // (KILL must name one connection).
        loop {
            let id =
                self.next_conn_id.fetch_add(1, Ordering::Relaxed) & !crate::processes::RELAY_IDS;
            if id != 0 && !self.processes.contains(id) {
                return id;
            }
        }
    }
}
