//! The server: the accept loop, graceful shutdown, and [`Shim`], the `AsyncMysqlShim` that
//! opensrv-mysql drives for each connection.
//!
//! Per connection: a fresh CSPRNG scramble (opensrv's default `salt()` is a constant), the
//! socket wrapped by [`crate::stream`] (teed handshake, ERR 1045 in place of opensrv's 1698,
//! read and write deadlines), the login decided by [`crate::auth::decide`], and the commands
//! handed to a [`Session`].
//!
//! Shutdown (SIGTERM or SIGINT): stop accepting; connections end after their running
//! statement (the reader turns the wait for the next command into end-of-stream); after the
//! grace period the remaining work is abandoned; every database is then closed cleanly
//! (SQLite checkpoints its write-ahead log into the database file on the last close).

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use authplugin::{Scramble, compute_proof};
use opensrv_mysql::{
    AsyncMysqlIntermediary, AsyncMysqlShim, Column, ColumnFlags, ColumnType, ErrorKind, InitWriter,
    IntermediaryOptions, ParamParser, QueryResultWriter, StatementMetaWriter,
};
use tokio::io::AsyncWrite;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::auth::{self, Attempt, Login, Verifier};
use crate::catalog::{Catalog, Slot};
use crate::results::{Reply, write_reply};
use crate::session::{Session, param_cell};
use crate::state::ServerState;
use crate::stream::{AuthReader, AuthWriter, ConnShared};
use crate::tls::Transport;
use crate::variables::SERVER_VERSION;

/// opensrv's options: a `USE db` sent as a query comes to [`AsyncMysqlShim::on_query`], as
/// every other statement does, so its OK carries the session's status flags (opensrv's own
/// says 0: a driver then forgets `NO_BACKSLASH_ESCAPES` and escapes quotes with backslashes,
/// which that mode reads as text, and a relay forgets an open transaction).
const OPENSRV_OPTIONS: IntermediaryOptions = IntermediaryOptions {
    process_use_statement_on_query: true,
    reject_connection_on_dbname_absence: false,
};

/// One connection's `AsyncMysqlShim`.
pub struct Shim {
    server: Arc<ServerState>,
    shared: Arc<ConnShared>,
    conn_id: u32,
    /// This connection's scramble: in the greeting, and what answers are checked against.
    scramble: Scramble,
    peer: SocketAddr,
    /// Set by `authenticate` (which only gets `&self`), taken by the first command.
    login: Mutex<Option<Login>>,
    session: Session,
    /// The TLS version the connection negotiated (set under the stream adapters, once the
    /// handshake is done), for the session's `Ssl_version`.
    tls_version: Arc<OnceLock<&'static str>>,
}

impl Shim {
    /// Logs a statement that failed: its code, and with `--log-failed-statements` its error
    /// and the start of its text (off by default: the text could hold a password).
    fn failed(&self, query: &str, e: &crate::sql_error::SqlError) {
        let keep = self.server.failed_statement_chars;
        if keep == 0 {
            debug!(conn_id = self.conn_id, code = e.code(), "statement failed");
            return;
        }
        let end = query
            .char_indices()
            .nth(keep)
            .map_or(query.len(), |(at, _)| at);
        warn!(
            conn_id = self.conn_id,
            code = e.code(),
            error = %String::from_utf8_lossy(e.message.as_bytes()),
            statement = %query.get(..end).unwrap_or_default().escape_debug(),
            "statement failed"
        );
    }

    /// Tells the writer what opensrv cannot write of `result`'s reply: the session's
    /// `status` (for a result set's end, and the OKs opensrv writes on its own), an OK's
    /// count of notes, an ERR's code when opensrv has no such code (3024).
    fn announce(
        &self,
        result: &Result<Reply, crate::sql_error::SqlError>,
        status: opensrv_mysql::StatusFlags,
    ) {
        self.shared.session_status(status.bits());
        match result {
            Ok(Reply::Ok { warnings, .. }) => self.shared.ok_warnings_next(*warnings),
            Err(e) => {
                if let Some((code, sql_state)) = e.code_beyond_opensrv {
                    self.shared.err_code_next(code, sql_state);
                }
            }
            Ok(_) => {}
        }
    }

    fn take_login(&mut self) {
        if !self.session.has_login()
            && let Some(login) = self
                .login
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        {
            self.session.set_login(login);
            self.conn_id = self.session.process().id();
        }
    }
}

#[async_trait]
impl<W: AsyncWrite + Send + Unpin> AsyncMysqlShim<W> for Shim {
    type Error = io::Error;

    fn version(&self) -> String {
        // The same on every route: the proof of the key goes to a relay that asks for it, in
        // the auth switch (stream::hello_round), not in what every client reads.
        SERVER_VERSION.to_owned()
    }

    fn connect_id(&self) -> u32 {
        self.conn_id
    }

    fn default_auth_plugin(&self) -> &str {
        authplugin::AuthPlugin::MysqlNativePassword.name()
    }

    async fn auth_plugin_for_username(&self, _user: &[u8]) -> &str {
        // A relay asking for the proof of the key (a Hello): the switch to
        // mysql_native_password carries it, bound to this connection's scramble.
        if let (Some(hello), Some(keys)) = (self.shared.hello(), &self.server.key_ring)
            && let Ok(hello) = compute_proof::Hello::decode(&hello)
        {
            self.shared
                .prove_in_switch(hello.prove(&self.scramble, &keys.current()));
            return authplugin::AuthPlugin::MysqlNativePassword.name();
        }
        auth::plugin_for_client(self.shared.first_packet().as_deref())
    }

    fn salt(&self) -> [u8; 20] {
        *self.scramble.as_bytes()
    }

    async fn authenticate(
        &self,
        auth_plugin: &str,
        username: &[u8],
        _salt: &[u8],
        auth_data: &[u8],
    ) -> bool {
        let handshake = self.shared.first_packet();
        let ring = self.server.key_ring.as_ref().map(|keys| keys.current());
        let now_ms = now_ms();
        let attempt = Attempt {
            handshake: handshake.as_deref(),
            plugin: auth_plugin,
            username,
            scramble: &self.scramble,
            auth_data,
            peer_ip: self.peer.ip(),
            now_ms,
        };
        let decide = |ring: Option<&authplugin::KeyRing>| {
            let verifier = Verifier {
                accounts: &self.server.accounts,
                key_ring: ring,
                replay: &self.server.replay,
                tickets: self.server.tickets.as_ref(),
            };
            auth::decide(&verifier, &attempt)
        };
        let mut decided = decide(ring.as_deref());
        // A relay that read a rotated key file before this shim did: the file may already
        // hold the key (a shared file, or the computes' file updated first, as the rotation
        // steps say). The key id is checked before the replay window, so deciding again is
        // safe.
        if let (Err(denial), Some(keys)) = (&decided, &self.server.key_ring)
            && denial.kind == "unknown_key_id"
            && let Some(newer) = crate::keys::check(keys, false)
        {
            decided = decide(Some(&newer));
        }
        match decided {
            Ok(mut login) => {
                // The id the relay greeted this session's client with, if it is free: the
                // client's KILL and CONNECTION_ID() then name this connection.
                let adopted = login.client_connection_id.filter(|&id| {
                    let taken = self.server.processes.adopt(self.session.process(), id);
                    if !taken {
                        warn!(
                            conn_id = self.conn_id,
                            client_connection_id = id,
                            "the client's connection id is in use here; the session keeps its own"
                        );
                    }
                    taken
                });
                info!(
                    conn_id = self.conn_id,
                    client_connection_id = adopted,
                    user = %login.user,
                    route = login.route.as_str(),
                    plugin = %login.plugin,
                    resumed = login.resumed,
                    ticket = login.ticket.is_some(),
                    peer = %self.peer,
                    "login"
                );
                self.shared.mark_authenticated(login.ticket.take());
                login.tls_version = self.tls_version.get().copied();
                *self.login.lock().unwrap_or_else(PoisonError::into_inner) = Some(login);
                true
            }
            Err(denial) => {
                warn!(
                    conn_id = self.conn_id,
                    user = %denial.user,
                    route = denial.route.as_str(),
                    kind = denial.kind,
                    reason = %denial.detail,
                    peer = %self.peer,
                    "login denied"
                );
                self.shared.deny_with(denial.err_payload(self.peer.ip()));
                false
            }
        }
    }

    async fn on_prepare<'a>(
        &'a mut self,
        query: &'a str,
        info: StatementMetaWriter<'a, W>,
    ) -> io::Result<()> {
        self.take_login();
        match self.session.prepare(query).await {
            Ok((id, params, result)) => {
                let column = |name: String| Column {
                    table: String::new(),
                    column: name,
                    coltype: ColumnType::MYSQL_TYPE_VAR_STRING,
                    colflags: ColumnFlags::empty(),
                };
                self.shared
                    .statement_prepared(id, u16::try_from(params).unwrap_or(u16::MAX));
                self.shared.prepared_next(params, result.len());
                let params: Vec<Column> = (0..params).map(|i| column(format!("?{i}"))).collect();
                let result: Vec<Column> = result.into_iter().map(column).collect();
                info.reply(id, &params, &result).await
            }
            Err(e) => {
                self.failed(query, &e);
                info.error(e.kind, e.message.as_bytes()).await
            }
        }
    }

    async fn on_execute<'a>(
        &'a mut self,
        id: u32,
        params: ParamParser<'a>,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        self.take_login();
        let Some(prepared) = self.session.prepared(id) else {
            return results
                .error(
                    ErrorKind::ER_UNKNOWN_STMT_HANDLER,
                    b"Unknown prepared statement handler",
                )
                .await;
        };
        // opensrv's parameter parser indexes and unwraps the client's bytes; a malformed
        // COM_STMT_EXECUTE must cost the statement, not the connection.
        let cells = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            params
                .into_iter()
                .map(|p| param_cell(p.value.into_inner()))
                .collect::<Vec<_>>()
        }));
        let result = match cells {
            Ok(cells) if cells.len() == prepared.params => {
                self.session.execute(&prepared, cells).await
            }
            Ok(_) | Err(_) => Err(crate::sql_error::SqlError::new(
                ErrorKind::ER_WRONG_ARGUMENTS,
                "Incorrect arguments to mysqld_stmt_execute",
            )),
        };
        let status = self.session.status();
        self.announce(&result, status);
        let (shared, warnings) = (&self.shared, self.session.warning_count());
        write_reply(results, result, status, |binary| {
            shared.result_set_next(binary, warnings);
        })
        .await
    }

    async fn on_close<'a>(&'a mut self, stmt: u32)
    where
        W: 'async_trait,
    {
        self.session.close_statement(stmt);
        self.shared.statement_closed(stmt);
    }

    async fn on_query<'a>(
        &'a mut self,
        query: &'a str,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        self.take_login();
        let result = self.session.run(query, Vec::new()).await;
        if let Err(e) = &result {
            self.failed(query, e);
        }
        if let Some(idle) = self.session.wait_timeout() {
            self.shared.wait_timeout(idle);
        }
        let status = self.session.status();
        self.announce(&result, status);
        let (shared, warnings) = (&self.shared, self.session.warning_count());
        write_reply(results, result, status, |binary| {
            shared.result_set_next(binary, warnings);
        })
        .await
    }

    async fn on_init<'a>(&'a mut self, db: &'a str, w: InitWriter<'a, W>) -> io::Result<()> {
        self.take_login();
        // A login naming an empty database (mysql-connector-python sends CONNECT_WITH_DB
        // with "") selects none, as in MySQL.
        if db.is_empty() {
            return w.ok().await;
        }
        match self.session.use_database(db) {
            Ok(()) => w.ok().await,
            Err(e) => w.error(e.kind, e.message.as_bytes()).await,
        }
    }
}

/// Serves connections on `listener` until `state.shutdown` is cancelled, then drains for at
/// most `grace` and closes every database.
///
/// Accept errors are logged and retried after a pause.
pub async fn serve(listener: TcpListener, state: Arc<ServerState>, grace: Duration) {
    let tracker = TaskTracker::new();
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let state = Arc::clone(&state);
                    tracker.spawn(connection(socket, peer, state));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    drop(listener);
    tracker.close();
    info!(
        connections = tracker.len(),
        grace_ms = grace.as_millis() as u64,
        "shutting down: draining connections"
    );
    let deadline = tokio::time::Instant::now() + grace;
    if tokio::time::timeout_at(deadline, tracker.wait())
        .await
        .is_err()
    {
        warn!(
            connections = tracker.len(),
            "grace period over; abandoning remaining connections"
        );
    }
    close_databases(&state.catalog, deadline).await;
    info!("shutdown complete");
}

/// Closes every open database (waiting for its lock until `deadline`), so storage files are
/// flushed and marked clean.
async fn close_databases(catalog: &Catalog, deadline: tokio::time::Instant) {
    for db in catalog.all() {
        let slot = db.slot();
        match tokio::time::timeout_at(deadline, slot.lock_owned()).await {
            Ok(mut guard) => {
                let _ = tokio::task::spawn_blocking(move || {
                    *guard = Slot::Gone;
                })
                .await;
            }
            Err(_) => warn!(database = db.name(), "database still busy at shutdown"),
        }
    }
}

async fn connection(socket: TcpStream, peer: SocketAddr, state: Arc<ServerState>) {
    let _ = socket.set_nodelay(true);
    let conn_id = state.conn_id();
    // In the process list while it lives; `KILL` ends it as shutdown does.
    let registered = state.processes.register(conn_id, &state.shutdown);
    let shared = Arc::new(ConnShared::default());
    let timeouts = state.timeouts;
    let shutdown = registered.process().ended().clone();
    let tls = state.tls.clone();
    let state_require_tls = state.require_secure_transport;
    let tls_version = Arc::new(OnceLock::new());
    let connection_shared = Arc::clone(&shared);
    let shim = Shim {
        session: Session::new(Arc::clone(&state), Arc::clone(registered.process())),
        server: state,
        shared,
        conn_id,
        // Timed, so a relay can tell a fresh greeting proof from a replayed one.
        scramble: Scramble::generate_timed(&mut rand::rngs::OsRng, now_ms()),
        peer,
        login: Mutex::new(None),
        tls_version: Arc::clone(&tls_version),
    };
    let ended = match tls {
        None => {
            let (read, write) = socket.into_split();
            let reader = AuthReader::new(read, Arc::clone(&connection_shared), timeouts, shutdown);
            let writer = AuthWriter::new(write, connection_shared, timeouts);
            AsyncMysqlIntermediary::run_with_options(shim, reader, writer, &OPENSRV_OPTIONS).await
        }
        Some(tls) => {
            // TLS on request, under the adapters (see `crate::tls`).
            let (read, write) = tokio::io::split(Transport::new(
                socket,
                tls,
                state_require_tls,
                Arc::clone(&tls_version),
            ));
            let reader = AuthReader::new(read, Arc::clone(&connection_shared), timeouts, shutdown);
            let writer = AuthWriter::new(write, connection_shared, timeouts);
            AsyncMysqlIntermediary::run_with_options(shim, reader, writer, &OPENSRV_OPTIONS).await
        }
    };
    drop(registered);
    match ended {
        Ok(()) => debug!(conn_id, "connection closed"),
        // A refused login was logged by `authenticate`.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
        // The kind only: opensrv's messages can quote the client's handshake bytes.
        Err(e) => debug!(conn_id, kind = ?e.kind(), "connection ended"),
    }
}

/// Wall-clock time in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
