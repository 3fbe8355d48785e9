//! The session layer: one per connection, between opensrv's command hooks and the catalog
//! ([`crate::catalog::Catalog`]). It keeps the current database, `autocommit`, the open
//! transaction and the prepared statements; answers what a MySQL server answers itself
//! (databases, variables, accounts, connect-time probes, see [`crate::classify`]); and runs
//! everything else on the engine, on a blocking thread, holding the database's lock.
//!
//! Concurrency: statements on one database are serialised by its lock, waited for with a
//! deadline (`innodb_lock_wait_timeout`, ERR 1205). An explicit transaction (or the implicit
//! one of an `autocommit=0` session, which starts at its first write) holds the lock until
//! COMMIT or ROLLBACK; a session that ends with a transaction open rolls it back.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use authplugin::Credential;
use chrono::{NaiveDate, Utc};
use opensrv_mysql::{ErrorKind, StatusFlags, ValueInner};
use tokio::sync::OwnedMutexGuard;

use crate::accounts::{Account, AccountError, Role};
use crate::auth::Login;
use crate::catalog::{Database, Slot};
use crate::classify::{SessionFn, SessionItem, Statement, classify};
use crate::engine::{Cell, Executor, Outcome, SavepointAction, count_placeholders};
use crate::engine::{SessionFacts, StatementCounts};
use crate::processes::Process;
use crate::results::{Reply, status_flags};
use crate::sql_error::SqlError;
use crate::state::ServerState;
use crate::variables::{self, SERVER_VERSION, SessionVars};

mod show;

/// A transaction holding its database's lock.
struct Txn {
    db: Arc<Database>,
    /// `None` only while the guard is lent to a blocking task.
    guard: Option<OwnedMutexGuard<Slot>>,
}

impl Drop for Txn {
    /// A transaction nobody committed is rolled back (the client went away).
    fn drop(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            let mut rollback = move || {
                if let Slot::Open(e) = &mut *guard {
                    let _ = e
                        .get_mut()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .rollback();
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(rollback)),
                Err(_) => rollback(),
            }
        }
    }
}

/// A transaction's read connection before its first write. Its reads see one snapshot of
/// the database, the first read's, as InnoDB's consistent reads in a `REPEATABLE READ`
/// transaction do, and take no lock, so other sessions' transactions run meanwhile; the
/// first write (or a locking read) gives it back and takes the database's lock.
struct Snapshot {
    db: Arc<Database>,
    _slot: tokio::sync::OwnedSemaphorePermit,
    /// `None` only while lent to a blocking task (a mutex only so the session is `Sync`).
    reader: Option<std::sync::Mutex<Box<dyn Executor>>>,
}

impl Snapshot {
    fn take_reader(&mut self) -> Option<Box<dyn Executor>> {
        self.reader.take().map(|r| {
            r.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        })
    }

    fn put_reader(&mut self, reader: Box<dyn Executor>) {
        self.reader = Some(std::sync::Mutex::new(reader));
    }
}

impl Drop for Snapshot {
    /// Ends the read transaction (nothing to undo: it wrote nothing) and gives the connection
    /// back.
    fn drop(&mut self) {
        if let Some(mut reader) = self.take_reader()
            && reader.rollback().is_ok()
        {
            self.db.return_reader(reader);
        }
    }
}

/// A prepared statement.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement text.
    pub sql: String,
    /// Its number of `?` placeholders.
    pub params: usize,
    /// How the engine runs it, if it does: found once at the prepare, so each execution
    /// skips stripping and classifying the text again.
    engine: Option<EnginePlan>,
}

/// A statement the engine runs, as classified.
#[derive(Debug, Clone)]
struct EnginePlan {
    /// The text without its comments.
    sql: String,
    /// It may write.
    write: bool,
    /// It names `information_schema`.
    information_schema: bool,
}

/// One connection's session state.
pub struct Session {
    server: Arc<ServerState>,
    conn_id: u32,
    /// The connection's place in the process list (`KILL`).
    process: Arc<Process>,
    login: Option<Login>,
    database: Option<String>,
    autocommit: bool,
    /// `BEGIN` was sent; the transaction takes its database's lock at its first write.
    txn_pending: bool,
    /// Its reads before that ([`Snapshot`]).
    snapshot: Option<Snapshot>,
    txn: Option<Txn>,
    /// The id the last INSERT gave an `AUTO_INCREMENT` column (`LAST_INSERT_ID()`).
    last_insert_id: u64,
    /// Where a session without a current database evaluates expressions (`SELECT 41+1`
    /// before `USE`): an in-memory SQLite, opened on first use.
    scratch: Option<std::sync::Mutex<Box<dyn Executor>>>,
    prepared: HashMap<u32, Arc<Prepared>>,
    next_statement_id: u32,
    /// System variables the session set to a plain value ([`variables::assigned`]).
    variables: BTreeMap<String, Cell>,
    /// User variables `SET` to a value or a variable.
    user_variables: BTreeMap<String, Cell>,
    /// What the engine's functions read about this session, kept up to date with the login,
    /// `autocommit` and the variables ([`Session::refresh_facts`]); shared with the executor
    /// of each statement.
    facts: Arc<SessionFacts>,
    /// Its `ROW_COUNT()` and `FOUND_ROWS()`, carried between the executors it uses.
    counts: Arc<StatementCounts>,
    /// Savepoints set in a transaction that has not touched a database yet, oldest first
    /// ([`Session::savepoint`]).
    savepoints: Vec<String>,
}

/// Lends `guard` to a blocking thread to run `f` on the database's executor (opening its
/// storage on first use). Returns the guard (unless the task panicked) and `f`'s result.
async fn run_blocking<T: Send + 'static>(
    server: &Arc<ServerState>,
    session: ForSession,
    mut guard: OwnedMutexGuard<Slot>,
    db: Arc<Database>,
    f: impl FnOnce(&mut dyn Executor) -> Result<T, SqlError> + Send + 'static,
) -> (Option<OwnedMutexGuard<Slot>>, Result<T, SqlError>) {
    let catalog = Arc::clone(&server.catalog);
    let task = tokio::task::spawn_blocking(move || {
        let result = guard.executor(catalog.engine(), &db).and_then(|e| {
            // The database's connection is shared by its sessions: each sets the checks it
            // wants and leaves them on (SQLite ignores both inside a transaction, so one
            // begun without checks keeps none until it ends, and the end turns them on).
            e.set_foreign_key_checks(session.facts.foreign_key_checks())?;
            let result = for_session(e, session, None, f);
            e.set_foreign_key_checks(true)?;
            result
        });
        (guard, result)
    });
    match task.await {
        Ok((guard, result)) => (Some(guard), result),
        Err(_) => (
            None,
            Err(SqlError::internal("the statement failed unexpectedly")),
        ),
    }
}

/// The most SQLite VM instructions a read may run on the async runtime's own thread (about a
/// tenth of a millisecond of work here; a point select takes a few dozen).
const INLINE_READ_STEPS: u32 = 20_000;

/// The longest statement text read here rather than on a blocking thread: a new statement is
/// parsed and rewritten before it runs, and that work has no step limit.
const INLINE_READ_TEXT_BYTES: usize = 4096;

/// Runs the read `f` on `e` on the calling thread, the async runtime's, under a limit of
/// [`INLINE_READ_STEPS`]. A statement handed to a blocking thread costs two thread switches
/// (there and back), more than a point select costs itself: server-shim spent twice the CPU
/// per point select that way. Returns `None` when the read went over the limit (or was not a
/// single query): it stopped having changed nothing and the session's counts are restored,
/// so it can run again, unlimited, on a blocking thread.
fn read_inline<T>(
    e: &mut dyn Executor,
    session: ForSession,
    f: &impl Fn(&mut dyn Executor) -> Result<T, SqlError>,
) -> Option<Result<T, SqlError>> {
    let counts = Arc::clone(&session.counts);
    let before = (
        counts.row_count.load(Ordering::Relaxed),
        counts.found_rows.load(Ordering::Relaxed),
    );
    let result = for_session(e, session, Some(INLINE_READ_STEPS), f);
    let over = result.is_err() && e.over_budget();
    e.set_step_budget(None);
    if over {
        counts.row_count.store(before.0, Ordering::Relaxed);
        counts.found_rows.store(before.1, Ordering::Relaxed);
        return None;
    }
    Some(result)
}

/// What a statement's executor is given about its session.
struct ForSession {
    facts: Arc<SessionFacts>,
    counts: Arc<StatementCounts>,
    /// The connection, for `KILL QUERY` to interrupt the statement.
    process: Arc<Process>,
}

/// Runs `f` on `e` for a session: its facts and its `ROW_COUNT()`/`FOUND_ROWS()` set in
/// first, the counts read back after; interruptible by `KILL QUERY` while it runs (and only
/// then: the executor serves the database's other sessions next). `steps` limits its work
/// ([`Executor::set_step_budget`]); set for every statement, so no limit outlives the one it
/// was for (not even past a panic).
fn for_session<T>(
    e: &mut dyn Executor,
    ForSession {
        facts,
        counts,
        process,
    }: ForSession,
    steps: Option<u32>,
    f: impl FnOnce(&mut dyn Executor) -> Result<T, SqlError>,
) -> Result<T, SqlError> {
    e.set_step_budget(steps);
    e.set_session(facts);
    e.set_counts(
        counts.row_count.load(Ordering::Relaxed),
        counts.found_rows.load(Ordering::Relaxed),
    );
    // Another session's statement may have left notes on this shared executor.
    let _ = e.take_warnings();
    process.running(Some(e.interrupter()));
    let result = f(e);
    process.running(None);
    let (row_count, found_rows) = e.counts();
    counts.row_count.store(row_count, Ordering::Relaxed);
    counts.found_rows.store(found_rows, Ordering::Relaxed);
    keep_warnings(&counts, e.take_warnings());
    result
}

/// Makes `warnings`, a statement's notes, the session's (`SHOW WARNINGS`), if it left any:
/// a statement that leaves none keeps the last one's.
fn keep_warnings(counts: &StatementCounts, warnings: Vec<crate::engine::Warning>) {
    if !warnings.is_empty() {
        counts.own_warnings.store(warnings.len(), Ordering::Relaxed);
        *counts
            .warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = warnings;
    }
}

/// The text of a hexadecimal string literal (`X'6869'`), when `value` is one of valid UTF-8.
fn hex_string(value: &str) -> Option<String> {
    let hex = value
        .strip_prefix(['X', 'x'])?
        .strip_prefix('\'')?
        .strip_suffix('\'')?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

fn parse_flag(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" => Some(true),
        "0" | "off" | "false" => Some(false),
        _ => None,
    }
}

impl Session {
    /// A session for connection `process`.
    #[must_use]
    pub fn new(server: Arc<ServerState>, process: Arc<Process>) -> Self {
        let conn_id = process.id();
        Self {
            server,
            conn_id,
            process,
            login: None,
            database: None,
            autocommit: true,
            txn_pending: false,
            snapshot: None,
            txn: None,
            last_insert_id: 0,
            scratch: None,
            prepared: HashMap::new(),
            next_statement_id: 1,
            variables: BTreeMap::new(),
            user_variables: BTreeMap::new(),
            facts: Arc::new(SessionFacts {
                connection_id: conn_id,
                autocommit: true,
                ..SessionFacts::default()
            }),
            counts: Arc::default(),
            savepoints: Vec::new(),
        }
    }

    /// Records the login (once, right after authentication).
    pub fn set_login(&mut self, login: Login) {
        self.process.set_user(&login.user);
        self.process.set_host(&login.host);
        // A relayed session may have taken its client's id (`Processes::adopt`).
        self.conn_id = self.process.id();
        self.login = Some(login);
        self.refresh_facts();
    }

    /// What a statement's executor is given about this session.
    fn statement_facts(&self) -> ForSession {
        ForSession {
            facts: Arc::clone(&self.facts),
            counts: Arc::clone(&self.counts),
            process: Arc::clone(&self.process),
        }
    }

    /// Brings [`Self::facts`] up to date after the login or a `SET`.
    fn refresh_facts(&mut self) {
        self.facts = Arc::new(SessionFacts {
            connection_id: self.conn_id,
            user: self
                .login
                .as_ref()
                .map(|l| (l.user.clone(), l.host.clone())),
            autocommit: self.autocommit,
            variables: self.variables.clone(),
            user_variables: self.user_variables.clone(),
        });
    }

    /// The connection's place in the process list.
    #[must_use]
    pub const fn process(&self) -> &Arc<Process> {
        &self.process
    }

    /// Whether the login is known.
    #[must_use]
    pub fn has_login(&self) -> bool {
        self.login.is_some()
    }

    /// The status flags for OK packets.
    #[must_use]
    pub fn status(&self) -> StatusFlags {
        let mut flags = status_flags(self.autocommit, self.txn.is_some() || self.txn_pending);
        if self.sql_mode().no_backslash_escapes {
            flags |= StatusFlags::SERVER_STATUS_NO_BACKSLASH_ESCAPES;
        }
        flags
    }

    /// The flags of the session's `sql_mode` that change how its statements read.
    fn sql_mode(&self) -> crate::sql_mode::SqlMode {
        match self.variables.get("sql_mode") {
            Some(Cell::Text(mode)) => crate::sql_mode::SqlMode::of(mode),
            _ => crate::sql_mode::SqlMode::default(),
        }
    }

    fn vars(&self) -> SessionVars<'_> {
        SessionVars {
            autocommit: self.autocommit,
            set: &self.variables,
        }
    }

    /// `USE db` / COM_INIT_DB / the login's database.
    ///
    /// # Errors
    /// 1049 if there is no such database.
    pub fn use_database(&mut self, name: &str) -> Result<(), SqlError> {
        let db = self.server.catalog.get(name)?;
        self.database = Some(db.name().to_owned());
        self.process.idle(self.database.as_deref());
        Ok(())
    }

    fn current_database(&self) -> Result<Arc<Database>, SqlError> {
        let name = self.database.as_deref().ok_or_else(SqlError::no_database)?;
        self.server.catalog.get(name)
    }

    async fn lock(&self, db: &Arc<Database>) -> Result<OwnedMutexGuard<Slot>, SqlError> {
        tokio::time::timeout(self.server.lock_wait, db.slot().lock_owned())
            .await
            .map_err(|_| SqlError::lock_wait_timeout())
    }

    /// Runs one statement (text protocol, or a prepared statement with `params`).
    ///
    /// # Errors
    /// The statement's [`SqlError`]; the session stays usable.
    pub async fn run(&mut self, sql: &str, params: Vec<Cell>) -> Result<Reply, SqlError> {
        // Only a statement that uses a table starts a new list (read only when there is one).
        if !self.warnings().is_empty() && crate::classify::uses_a_table(sql) {
            self.warnings().clear();
        }
        self.counts.own_warnings.store(0, Ordering::Relaxed);
        self.sql_mode().check(sql)?;
        let limit = self.time_limit(sql);
        self.process.begin(sql, self.database.as_deref());
        let reply = self.within(limit, |s| s.run_statement(sql, params)).await;
        self.process.idle(self.database.as_deref());
        self.note_last_insert_id(&reply);
        self.with_warning_count(reply)
    }

    /// The notes of the session's last statement.
    fn warnings(&self) -> std::sync::MutexGuard<'_, Vec<crate::engine::Warning>> {
        self.counts
            .warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many notes the session's last statement left itself (`SHOW WARNINGS` also lists
    /// those an earlier one left, where the last used no table).
    #[must_use]
    pub fn warning_count(&self) -> u16 {
        u16::try_from(self.counts.own_warnings.load(Ordering::Relaxed)).unwrap_or(u16::MAX)
    }

    /// `reply` with the count of the statement's notes in its OK packet.
    fn with_warning_count(&self, reply: Result<Reply, SqlError>) -> Result<Reply, SqlError> {
        match reply {
            Ok(Reply::Ok {
                affected_rows,
                last_insert_id,
                ..
            }) => Ok(Reply::Ok {
                affected_rows,
                last_insert_id,
                warnings: self.warning_count(),
            }),
            other => other,
        }
    }

    /// How long `sql` may run: a `SELECT`'s `/*+ MAX_EXECUTION_TIME(ms) */` hint, else the
    /// session's `max_execution_time` (MySQL 8 limits nothing else).
    fn time_limit(&self, sql: &str) -> Option<Duration> {
        let ms = crate::classify::max_execution_time_hint(sql).or_else(|| {
            let is_select = sql
                .trim_start()
                .get(..6)
                .is_some_and(|w| w.eq_ignore_ascii_case("select"));
            match self.variables.get("max_execution_time") {
                Some(Cell::Int(ms)) if is_select && *ms > 0 => u64::try_from(*ms).ok(),
                _ => None,
            }
        })?;
        Some(Duration::from_millis(ms))
    }

    /// Runs `statement` on the session, interrupted past `limit` as `KILL QUERY` interrupts
    /// it: then MySQL's 3024, "maximum statement execution time exceeded".
    async fn within<'s, F>(
        &'s mut self,
        limit: Option<Duration>,
        statement: impl FnOnce(&'s mut Self) -> F,
    ) -> Result<Reply, SqlError>
    where
        F: std::future::Future<Output = Result<Reply, SqlError>> + 's,
    {
        let Some(limit) = limit else {
            return statement(self).await;
        };
        let process = Arc::clone(&self.process);
        let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let timer = tokio::spawn({
            let fired = Arc::clone(&fired);
            async move {
                tokio::time::sleep(limit).await;
                fired.store(true, Ordering::Relaxed);
                process.kill_query();
            }
        });
        let reply = statement(self).await;
        timer.abort();
        match reply {
            Err(e)
                if fired.load(Ordering::Relaxed)
                    && e.code() == SqlError::query_interrupted().code() =>
            {
                Err(SqlError::query_timeout())
            }
            other => other,
        }
    }

    /// The session's `wait_timeout`, when it set one: how long its connection may wait for
    /// its next command.
    #[must_use]
    pub fn wait_timeout(&self) -> Option<Duration> {
        match self.variables.get("wait_timeout") {
            Some(Cell::Int(s)) if *s > 0 => Some(Duration::from_secs(u64::try_from(*s).ok()?)),
            _ => None,
        }
    }

    /// Runs the prepared statement `prepared` with `params`.
    ///
    /// # Errors
    /// The statement's [`SqlError`]; the session stays usable.
    pub async fn execute(
        &mut self,
        prepared: &Prepared,
        params: Vec<Cell>,
    ) -> Result<Reply, SqlError> {
        self.warnings().clear();
        self.counts.own_warnings.store(0, Ordering::Relaxed);
        self.process.begin(&prepared.sql, self.database.as_deref());
        let reply = match &prepared.engine {
            Some(plan) => {
                self.engine(&plan.sql, params, plan.write, plan.information_schema)
                    .await
            }
            None => self.run_statement(&prepared.sql, params).await,
        };
        self.process.idle(self.database.as_deref());
        self.note_last_insert_id(&reply);
        self.with_warning_count(reply)
    }

    /// `SHOW [FULL] PROCESSLIST`, as MySQL 8 shows it: every connection to an admin, an
    /// account's own to the others; a statement's first 100 characters unless `full`.
    fn show_process_list(&self, full: bool) -> Reply {
        let own = match self.login.as_ref() {
            Some(l) if l.role == Role::Admin => None,
            Some(l) => Some(l.user.as_str()),
            None => Some(""),
        };
        let text = |v: Option<String>| v.map_or(Cell::Null, Cell::Text);
        rows(
            &[
                "Id", "User", "Host", "db", "Command", "Time", "State", "Info",
            ],
            self.server
                .processes
                .list(own)
                .into_iter()
                .map(|p| {
                    let info = p
                        .statement
                        .map(|s| crate::processes::without_secrets(&s))
                        .map(|s| {
                            if full {
                                s
                            } else {
                                s.chars().take(100).collect()
                            }
                        });
                    let running = info.is_some();
                    vec![
                        Cell::Int(i64::from(p.id)),
                        Cell::Text(p.user.unwrap_or_else(|| "unauthenticated user".into())),
                        Cell::Text(p.host),
                        text(p.db),
                        Cell::Text(if running { "Query" } else { "Sleep" }.into()),
                        Cell::Int(i64::try_from(p.seconds).unwrap_or(i64::MAX)),
                        Cell::Text(if running { "executing" } else { "" }.into()),
                        text(info),
                    ]
                })
                .collect(),
        )
    }

    fn note_last_insert_id(&mut self, reply: &Result<Reply, SqlError>) {
        if let Ok(Reply::Ok { last_insert_id, .. }) = reply
            && *last_insert_id != 0
        {
            self.last_insert_id = *last_insert_id;
        }
    }

    async fn run_statement(&mut self, sql: &str, params: Vec<Cell>) -> Result<Reply, SqlError> {
        // What MySQL executes: a dump's `/*!40101 SET NAMES utf8mb4 */` is a SET.
        let sql = crate::dialect::strip_comments(sql)?;
        let sql = sql.as_str();
        let statement = classify(sql)?;
        if !params.is_empty() && !matches!(statement, Statement::Engine { .. }) {
            return Err(SqlError::not_supported("parameters in this statement"));
        }
        match statement {
            Statement::Use(name) => {
                self.use_database(&name)?;
                Ok(ok(0))
            }
            Statement::ShowDatabases { like } => Ok(rows(
                &["Database"],
                self.server
                    .catalog
                    .names()
                    .into_iter()
                    .filter(|n| like.as_deref().is_none_or(|p| variables::like(p, n)))
                    .map(|n| vec![Cell::Text(n)])
                    .collect(),
            )),
            Statement::ShowTables {
                full,
                database,
                like,
            } => self.show_tables(full, database, like).await,
            Statement::ShowColumns { table, full } => self.show_columns(table, full).await,
            Statement::ShowTableStatus { like } => self.show_table_status(like).await,
            Statement::ShowCreateTable { table } => self.show_create_table(table).await,
            Statement::ShowIndex { table } => self.show_index(table).await,
            Statement::ShowVariables { like } => Ok(rows(
                &["Variable_name", "Value"],
                variables::all(self.vars())
                    .into_iter()
                    .filter(|(n, _)| like.as_deref().is_none_or(|p| variables::like(p, n)))
                    .map(|(n, v)| vec![Cell::Text(n), Cell::Text(v)])
                    .collect(),
            )),
            Statement::ShowSslVersion => Ok(rows(
                &["Variable_name", "Value"],
                vec![vec![
                    Cell::Text("Ssl_version".into()),
                    Cell::Text(
                        self.login
                            .as_ref()
                            .and_then(|l| l.tls_version)
                            .unwrap_or_default()
                            .into(),
                    ),
                ]],
            )),
            Statement::ShowWarnings => Ok(rows(
                &["Level", "Code", "Message"],
                self.warnings()
                    .iter()
                    .map(|w| {
                        vec![
                            Cell::Text(w.level.to_owned()),
                            Cell::Int(i64::from(w.code)),
                            Cell::Text(w.message.clone()),
                        ]
                    })
                    .collect(),
            )),
            Statement::ShowNone(columns) => Ok(rows(columns, Vec::new())),
            Statement::ShowProcessList { full } => Ok(self.show_process_list(full)),
            Statement::ShowPlugins => Ok(rows(
                &["Name", "Status", "Type", "Library", "License"],
                PLUGINS
                    .iter()
                    .map(|(name, kind)| {
                        vec![
                            Cell::Text((*name).to_owned()),
                            Cell::Text("ACTIVE".to_owned()),
                            Cell::Text((*kind).to_owned()),
                            Cell::Null,
                            Cell::Text("GPL".to_owned()),
                        ]
                    })
                    .collect(),
            )),
            Statement::CreateDatabase {
                name,
                if_not_exists,
            } => {
                let catalog = Arc::clone(&self.server.catalog);
                tokio::task::spawn_blocking(move || catalog.create(&name, if_not_exists))
                    .await
                    .map_err(|_| SqlError::internal("CREATE DATABASE failed unexpectedly"))??;
                Ok(ok(1))
            }
            Statement::DropDatabase { name, if_exists } => {
                self.drop_database(name, if_exists).await
            }
            Statement::Set(assignments) => self.set(assignments).await,
            Statement::Begin => {
                // MySQL commits an open transaction when a new one starts.
                self.end_transaction(true).await?;
                self.txn_pending = true;
                Ok(ok(0))
            }
            Statement::Commit => {
                self.end_transaction(true).await?;
                Ok(ok(0))
            }
            Statement::Rollback => {
                self.end_transaction(false).await?;
                Ok(ok(0))
            }
            Statement::Savepoint(name) => self.savepoint(SavepointAction::Set, name).await,
            Statement::RollbackToSavepoint(name) => {
                self.savepoint(SavepointAction::RollbackTo, name).await
            }
            Statement::ReleaseSavepoint(name) => {
                self.savepoint(SavepointAction::Release, name).await
            }
            Statement::CreateUser {
                name,
                password,
                if_not_exists,
            } => {
                self.require_admin()?;
                let credential = Credential::from_password(password.as_bytes());
                let result = self
                    .accounts(move |store| store.add(&name, Account::new(Role::User, credential)))
                    .await;
                match result {
                    Ok(()) => Ok(ok(0)),
                    Err(AccountError::Exists(_)) if if_not_exists => Ok(ok(0)),
                    Err(e) => Err(account_error("CREATE USER", &e)),
                }
            }
            Statement::AlterUser {
                name,
                password,
                if_exists,
            } => {
                self.require_admin()?;
                let credential = Credential::from_password(password.as_bytes());
                match self
                    .accounts(move |store| store.set_credential(&name, credential))
                    .await
                {
                    Ok(()) => Ok(ok(0)),
                    Err(AccountError::NotFound(_)) if if_exists => Ok(ok(0)),
                    Err(e) => Err(account_error("ALTER USER", &e)),
                }
            }
            Statement::DropUser { names, if_exists } => {
                self.require_admin()?;
                for name in names {
                    match self.accounts(move |store| store.remove(&name)).await {
                        Ok(()) => {}
                        Err(AccountError::NotFound(_)) if if_exists => {}
                        Err(e) => return Err(account_error("DROP USER", &e)),
                    }
                }
                Ok(ok(0))
            }
            Statement::SessionSelect(items) => self.session_select(items),
            Statement::Ignored => Ok(ok(0)),
            Statement::Kill { id, query } => self.kill(id, query),
            Statement::TableMaintenance { op, tables } => self.table_maintenance(&op, tables).await,
            Statement::Engine { write } => {
                let information_schema = crate::dialect::names_schema(sql, "information_schema");
                self.engine(sql, params, write, information_schema).await
            }
        }
    }

    /// `KILL [QUERY] id`: the connection's own user, or an admin, may. Killing its own
    /// connection ends it after this ERR 1317, as MySQL does.
    fn kill(&self, id: u64, query: bool) -> Result<Reply, SqlError> {
        let target = self
            .server
            .processes
            .get(id)
            .ok_or_else(|| SqlError::no_such_thread(id))?;
        let admin = self.login.as_ref().is_some_and(|l| l.role == Role::Admin);
        let user = self.login.as_ref().map(|l| l.user.as_str());
        if !admin && !user.is_some_and(|u| target.owned_by(u)) {
            return Err(SqlError::kill_denied(id));
        }
        tracing::info!(conn_id = self.conn_id, target = id, query, "KILL");
        if query {
            target.kill_query();
            return Ok(ok(0));
        }
        target.kill();
        if Arc::ptr_eq(&target, &self.process) {
            return Err(SqlError::query_interrupted());
        }
        Ok(ok(0))
    }

    fn require_admin(&self) -> Result<(), SqlError> {
        match &self.login {
            Some(l) if l.role == Role::Admin => Ok(()),
            _ => Err(SqlError::needs_privilege("CREATE USER")),
        }
    }

    async fn accounts(
        &self,
        f: impl FnOnce(&crate::accounts::AccountStore) -> Result<(), AccountError> + Send + 'static,
    ) -> Result<(), AccountError> {
        let server = Arc::clone(&self.server);
        tokio::task::spawn_blocking(move || f(&server.accounts))
            .await
            .unwrap_or_else(|_| {
                Err(AccountError::Io {
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other("account update failed unexpectedly"),
                })
            })
    }

    /// Runs `f` on `db`'s executor inside the open transaction when it is on `db`; on the
    /// transaction's snapshot before its first write; else on a read connection.
    async fn with_executor<T: Send + 'static>(
        &mut self,
        db: Arc<Database>,
        f: impl FnOnce(&mut dyn Executor) -> Result<T, SqlError> + Send + 'static,
    ) -> Result<T, SqlError> {
        if self.txn.is_none()
            && self
                .snapshot
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(&s.db, &db))
        {
            // A transaction that has not written yet: what it reads (`SHOW CREATE TABLE`, a
            // prepare's columns) is of its snapshot, and waits for no other transaction.
            return self.on_snapshot(f).await;
        }
        let facts = self.statement_facts();
        if let Some(txn) = self.txn.as_mut().filter(|t| t.db.name() == db.name()) {
            let guard = txn
                .guard
                .take()
                .ok_or_else(|| SqlError::internal("transaction lost"))?;
            let (guard, result) = run_blocking(&self.server, facts, guard, db, f).await;
            match guard {
                Some(g) => txn.guard = Some(g),
                None => self.txn = None,
            }
            if matches!(&result, Err(e) if e.rolled_back_the_transaction()) {
                // The engine ended the transaction: so does the session (its lock goes).
                self.txn = None;
                self.savepoints.clear();
            }
            return result;
        }
        // Outside a transaction on `db` its callers only read the catalog (`SHOW`, a
        // prepare's columns): on a read connection, waiting for no other session's
        // transaction (`mariadb-dump`'s `SHOW TABLES` failed with 1205 behind one, and the
        // dump went on without the tables).
        let permit = tokio::time::timeout(self.server.lock_wait, db.reader_slots().acquire_owned())
            .await
            .map_err(|_| SqlError::lock_wait_timeout())?
            .map_err(|_| SqlError::internal("the database's readers are closed"))?;
        self.read_blocking(permit, db, None, f).await
    }

    /// Runs `f` on one of `db`'s read connections, without its lock: a plain read outside
    /// any transaction sees what was committed (SQLite's WAL snapshot) and does not wait for
    /// another session's statement or open transaction, as InnoDB's consistent reads do not.
    /// A free connection already open runs it here first ([`read_inline`]); otherwise, or if
    /// it is too long for that, it runs on a blocking thread. Waits for a free connection
    /// with the lock-wait deadline.
    async fn read<T: Send + 'static>(
        &self,
        db: Arc<Database>,
        inline: bool,
        f: impl Fn(&mut dyn Executor) -> Result<T, SqlError> + Send + 'static,
    ) -> Result<T, SqlError> {
        let slots = db.reader_slots();
        if inline && let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
            let mut reader = db.idle_reader();
            if let Some(r) = reader.as_mut()
                && let Some(result) = read_inline(r.as_mut(), self.statement_facts(), &f)
            {
                if let Some(r) = reader {
                    db.return_reader(r);
                }
                return result;
            }
            return self.read_blocking(permit, db, reader, f).await;
        }
        let permit = tokio::time::timeout(self.server.lock_wait, slots.acquire_owned())
            .await
            .map_err(|_| SqlError::lock_wait_timeout())?
            .map_err(|_| SqlError::internal("the database's readers are closed"))?;
        self.read_blocking(permit, db, None, f).await
    }

    /// [`Self::read`] on a blocking thread, with `reader` or a connection of `db`'s.
    async fn read_blocking<T: Send + 'static>(
        &self,
        permit: tokio::sync::OwnedSemaphorePermit,
        db: Arc<Database>,
        reader: Option<Box<dyn Executor>>,
        f: impl FnOnce(&mut dyn Executor) -> Result<T, SqlError> + Send + 'static,
    ) -> Result<T, SqlError> {
        let session = self.statement_facts();
        let catalog = Arc::clone(&self.server.catalog);
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut reader = match reader {
                Some(r) => r,
                None => db.reader(catalog.engine())?,
            };
            let result = for_session(reader.as_mut(), session, None, f);
            db.return_reader(reader);
            result
        });
        task.await
            .unwrap_or_else(|_| Err(SqlError::internal("the statement failed unexpectedly")))
    }

    /// Whether the session's transaction reads on its snapshot ([`Snapshot`]) of `db`, taken
    /// (and its read transaction begun) now if it has none; `false` when it cannot have one
    /// (none free, or `SERIALIZABLE`): the transaction then takes the database's lock, as a
    /// write does.
    ///
    /// # Errors
    /// 1179 when its snapshot is of another database (or of this one before it was dropped
    /// and made again); a read connection that cannot be opened.
    async fn has_snapshot(&mut self, db: &Arc<Database>) -> Result<bool, SqlError> {
        match &self.snapshot {
            Some(s) if !Arc::ptr_eq(&s.db, db) => Err(SqlError::not_in_transaction(
                "a statement on another database; COMMIT or ROLLBACK first",
            )),
            Some(_) => Ok(true),
            None if self.serializable() => Ok(false),
            None => {
                self.snapshot = self.take_snapshot(db).await?;
                Ok(self.snapshot.is_some())
            }
        }
    }

    /// Runs the read `f` on the transaction's snapshot ([`Self::has_snapshot`]): here if it
    /// is short ([`read_inline`]), else on a blocking thread.
    async fn read_in_snapshot<T: Send + 'static>(
        &mut self,
        inline: bool,
        f: impl Fn(&mut dyn Executor) -> Result<T, SqlError> + Send + 'static,
    ) -> Result<T, SqlError> {
        if inline {
            let facts = self.statement_facts();
            if let Some(snapshot) = self.snapshot.as_mut()
                && let Some(mut reader) = snapshot.take_reader()
            {
                let result = read_inline(reader.as_mut(), facts, &f);
                snapshot.put_reader(reader);
                if let Some(result) = result {
                    return result;
                }
            }
        }
        self.on_snapshot(f).await
    }

    /// Runs `f` on the transaction's read connection ([`Snapshot`]) on a blocking thread.
    async fn on_snapshot<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut dyn Executor) -> Result<T, SqlError> + Send + 'static,
    ) -> Result<T, SqlError> {
        let session = self.statement_facts();
        let mut reader = self
            .snapshot
            .as_mut()
            .and_then(Snapshot::take_reader)
            .ok_or_else(|| SqlError::internal("transaction lost"))?;
        let task = tokio::task::spawn_blocking(move || {
            let result = for_session(reader.as_mut(), session, None, f);
            (reader, result)
        });
        match task.await {
            Ok((reader, result)) => {
                if let Some(s) = self.snapshot.as_mut() {
                    s.put_reader(reader);
                }
                result
            }
            Err(_) => {
                self.snapshot = None;
                Err(SqlError::internal("the statement failed unexpectedly"))
            }
        }
    }

    /// Whether the session asked for `SERIALIZABLE` transactions: its reads then take the
    /// lock, as its writes do (no snapshot), so two of them never both read before writing.
    fn serializable(&self) -> bool {
        ["transaction_isolation", "tx_isolation"]
            .iter()
            .any(|name| {
                matches!(self.variables.get(*name), Some(Cell::Text(level))
                if level.to_ascii_uppercase().contains("SERIALIZABLE"))
            })
    }

    /// A read connection of `db`'s with its read transaction begun, for [`Snapshot`]; `None`
    /// when [`Database::snapshot_slot`] has none free.
    async fn take_snapshot(&self, db: &Arc<Database>) -> Result<Option<Snapshot>, SqlError> {
        let Some(slot) = db.snapshot_slot() else {
            return Ok(None);
        };
        let reader = match db.idle_reader() {
            Some(r) => r,
            None => {
                let catalog = Arc::clone(&self.server.catalog);
                let opening = Arc::clone(db);
                tokio::task::spawn_blocking(move || opening.reader(catalog.engine()))
                    .await
                    .map_err(|_| SqlError::internal("opening the database failed unexpectedly"))??
            }
        };
        let mut snapshot = Snapshot {
            db: Arc::clone(db),
            _slot: slot,
            reader: None,
        };
        // SQLite's read transaction takes its snapshot at its first read, as InnoDB's does.
        let mut reader = reader;
        let begun = reader.begin();
        snapshot.put_reader(reader);
        begun.map(|()| Some(snapshot))
    }

    /// Runs the read `f` here inside the session's open transaction on `db`, if its storage
    /// is open ([`read_inline`]); `None` when it must run on a blocking thread.
    fn read_in_transaction<T>(
        &mut self,
        db: &Database,
        f: &impl Fn(&mut dyn Executor) -> Result<T, SqlError>,
    ) -> Option<Result<T, SqlError>> {
        let session = self.statement_facts();
        let txn = self.txn.as_mut().filter(|t| t.db.name() == db.name())?;
        let executor = txn.guard.as_mut()?.opened()?;
        read_inline(executor, session, f)
    }

    async fn engine(
        &mut self,
        sql: &str,
        params: Vec<Cell>,
        write: bool,
        information_schema: bool,
    ) -> Result<Reply, SqlError> {
        if information_schema {
            return self.information_schema(sql, params).await;
        }
        if self.database.is_none() {
            let ddl = commits_implicitly(sql);
            if ddl {
                // As with a current database: DDL commits the open transaction first.
                self.end_transaction(true).await?;
            }
            return self.without_database(sql, params, ddl);
        }
        if commits_implicitly(sql) {
            // MySQL commits the open transaction before DDL and runs the DDL outside any.
            self.end_transaction(true).await?;
            let db = self.current_database()?;
            let guard = self.lock(&db).await?;
            let sql = sql.to_owned();
            let last = self.last_insert_id;
            return run_blocking(&self.server, self.statement_facts(), guard, db, move |e| {
                e.set_last_insert_id(last);
                e.execute(&sql, &params)
            })
            .await
            .1
            .map(reply);
        }
        let db = self.current_database()?;
        // A locking read (`FOR UPDATE`) runs under the lock, and begins a transaction where a
        // write would.
        let write = write
            || locking_read(sql)
            || (!self.autocommit && plain_select(sql) && self.serializable());
        let read = !write && plain_select(sql);
        let inline_read = read && sql.len() <= INLINE_READ_TEXT_BYTES;
        let sql = sql.to_owned();
        let last = self.last_insert_id;
        if let Some(txn) = &self.txn {
            if txn.db.name() != db.name() {
                return Err(SqlError::not_in_transaction(
                    "a statement on another database; COMMIT or ROLLBACK first",
                ));
            }
            let statement = move |e: &mut dyn Executor| {
                e.set_last_insert_id(last);
                e.execute(&sql, &params)
            };
            if inline_read && let Some(result) = self.read_in_transaction(&db, &statement) {
                return result.map(reply);
            }
            return self.with_executor(db, statement).await.map(reply);
        }
        if read && !self.txn_pending {
            return self
                .read(db, inline_read, move |e| {
                    e.set_last_insert_id(last);
                    e.execute(&sql, &params)
                })
                .await
                .map(reply);
        }
        if self.txn_pending && !write && snapshot_read(&sql) && self.has_snapshot(&db).await? {
            return self
                .read_in_snapshot(inline_read, move |e| {
                    e.set_last_insert_id(last);
                    e.execute(&sql, &params)
                })
                .await
                .map(reply);
        }
        // The transaction's first write: its reads' snapshot ends before the lock is waited
        // for. Held while waiting, it kept SQLite from checkpointing behind the writer
        // (oltp_read_write 15 % slower); a write that times out waiting leaves the transaction
        // reading anew.
        self.snapshot = None;
        let guard = self.lock(&db).await?;
        if self.txn_pending || (!self.autocommit && write) {
            // Savepoints set before the transaction touched a database mark its start.
            let savepoints: Vec<String> = self.savepoints.drain(..).collect();
            let (guard, result) = run_blocking(
                &self.server,
                self.statement_facts(),
                guard,
                Arc::clone(&db),
                move |e| {
                    e.begin()?;
                    for name in &savepoints {
                        e.savepoint(SavepointAction::Set, name)?;
                    }
                    e.set_last_insert_id(last);
                    Ok(e.execute(&sql, &params))
                },
            )
            .await;
            let statement_result = result?;
            self.txn_pending = false;
            if matches!(&statement_result, Err(e) if e.rolled_back_the_transaction()) {
                return statement_result.map(reply);
            }
            self.txn = guard.map(|g| Txn { db, guard: Some(g) });
            return statement_result.map(reply);
        }
        run_blocking(&self.server, self.statement_facts(), guard, db, move |e| {
            e.set_last_insert_id(last);
            e.execute(&sql, &params)
        })
        .await
        .1
        .map(reply)
    }

    /// Answers a query on `information_schema` from a snapshot of every database's catalog,
    /// taken now (each database read under its lock).
    async fn information_schema(
        &mut self,
        sql: &str,
        params: Vec<Cell>,
    ) -> Result<Reply, SqlError> {
        let mut snapshot = Vec::new();
        for name in self.server.catalog.names() {
            let db = self.server.catalog.get(&name)?;
            // Read as a plain read is, never waiting for another session's transaction (a
            // relay's state read of an idle session, an ORM's introspection): only the
            // session's own transaction's database is read in it (under the lock it holds,
            // or on its snapshot before its first write).
            let own = self.txn.as_ref().is_some_and(|t| t.db.name() == db.name())
                || self
                    .snapshot
                    .as_ref()
                    .is_some_and(|s| Arc::ptr_eq(&s.db, &db));
            let tables = if own {
                self.with_executor(db, |e| e.describe()).await?
            } else {
                self.read(db, false, |e| e.describe()).await?
            };
            snapshot.push((name, tables));
        }
        let mut schema =
            crate::sqlite::information_schema(&snapshot, self.database.clone(), &self.facts)?;
        schema.execute(sql, &params).map(reply)
    }

    /// The session's in-memory scratch database, opened on first use.
    fn scratch(&mut self) -> Result<&mut Box<dyn Executor>, SqlError> {
        if self.scratch.is_none() {
            let databases = self.server.catalog.root();
            self.scratch = Some(std::sync::Mutex::new(crate::sqlite::in_memory(databases)?));
        }
        Ok(self
            .scratch
            .as_mut()
            .ok_or_else(|| SqlError::internal("scratch database lost"))?
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Runs a statement of a session that has no current database on its in-memory scratch
    /// database: expressions (`SELECT 41+1`) and qualified names (`shop.items`) work. A
    /// table without its database gets 1046 as in MySQL, and so does a write that names no
    /// database (it would land in the scratch database and vanish) or that would run inside a
    /// transaction (the scratch database does not take part in the session's transaction).
    /// DDL (`ddl`, its transaction already committed) runs outside any, as in MySQL, even
    /// with autocommit off (PyMySQL's default): `CREATE TABLE app.t` works there too.
    fn without_database(
        &mut self,
        sql: &str,
        params: Vec<Cell>,
        ddl: bool,
    ) -> Result<Reply, SqlError> {
        let (translation, qualifiers) = crate::dialect::translate_in(sql, None)?;
        if translation.statements.is_empty() {
            // Accepted with nothing to run (`UNLOCK TABLES`, which `mariadb-dump
            // --single-transaction` sends before choosing a database).
            return Ok(ok(0));
        }
        let in_transaction = !ddl && (self.txn.is_some() || self.txn_pending || !self.autocommit);
        if translation.kind != crate::dialect::StatementKind::Query
            && (qualifiers.is_empty() || in_transaction)
        {
            return Err(SqlError::no_database());
        }
        let facts = Arc::clone(&self.facts);
        let process = Arc::clone(&self.process);
        let counts = Arc::clone(&self.counts);
        let scratch = self.scratch()?;
        scratch.set_session(facts);
        let _ = scratch.take_warnings();
        // Interruptible by KILL QUERY (a `SELECT SLEEP(60)`) while it runs.
        process.running(Some(scratch.interrupter()));
        let executed = scratch.execute(sql, &params);
        process.running(None);
        keep_warnings(&counts, scratch.take_warnings());
        match executed {
            Ok(outcome) => Ok(reply(outcome)),
            // A table without its database: MySQL's answer.
            Err(e) if e.code() == 1146 && qualifiers.is_empty() => Err(SqlError::no_database()),
            Err(e) => Err(e),
        }
    }

    /// Commits (or rolls back) the open transaction, if any.
    async fn end_transaction(&mut self, commit: bool) -> Result<(), SqlError> {
        self.txn_pending = false;
        self.snapshot = None;
        self.savepoints.clear();
        let Some(mut txn) = self.txn.take() else {
            return Ok(());
        };
        let Some(guard) = txn.guard.take() else {
            return Ok(());
        };
        let db = Arc::clone(&txn.db);
        run_blocking(&self.server, self.statement_facts(), guard, db, move |e| {
            if commit { e.commit() } else { e.rollback() }
        })
        .await
        .1
    }

    /// `SAVEPOINT`, `ROLLBACK TO SAVEPOINT`, `RELEASE SAVEPOINT`. In a transaction that has
    /// touched its database they run there (SQLite's own savepoints). In one that has not yet
    /// (after `START TRANSACTION`, as `mariadb-dump --single-transaction` sets its savepoint
    /// before it reads anything), the names are kept and set right after the transaction
    /// begins, so rolling back to one undoes everything the transaction did after it. Outside
    /// a transaction, as in MySQL, a savepoint is forgotten at once: rolling back to it or
    /// releasing it is ERR 1305.
    async fn savepoint(&mut self, what: SavepointAction, name: String) -> Result<Reply, SqlError> {
        let Some(txn) = &self.txn else {
            let pending = self.txn_pending || !self.autocommit;
            let found = self
                .savepoints
                .iter()
                .position(|n| n.eq_ignore_ascii_case(&name));
            match (what, found) {
                (SavepointAction::Set, _) => {
                    // A name used again moves the savepoint, as in MySQL.
                    self.savepoints.retain(|n| !n.eq_ignore_ascii_case(&name));
                    if pending {
                        self.savepoints.push(name);
                    }
                }
                (SavepointAction::RollbackTo, Some(at)) => self.savepoints.truncate(at + 1),
                (SavepointAction::Release, Some(at)) => self.savepoints.truncate(at),
                (_, None) => return Err(SqlError::no_savepoint(&name)),
            }
            return Ok(ok(0));
        };
        let db = Arc::clone(&txn.db);
        self.with_executor(db, move |e| e.savepoint(what, &name))
            .await
            .map(|()| ok(0))
    }

    async fn drop_database(&mut self, name: String, if_exists: bool) -> Result<Reply, SqlError> {
        let db = match self.server.catalog.get(&name) {
            Ok(db) => db,
            Err(_) if if_exists => return Ok(ok(0)),
            Err(_) => return Err(SqlError::drop_missing_database(&name)),
        };
        // DDL commits an open transaction, as in MySQL.
        self.end_transaction(true).await?;
        let mut guard = self.lock(&db).await?;
        let catalog = Arc::clone(&self.server.catalog);
        tokio::task::spawn_blocking(move || catalog.drop_locked(&db, &mut guard))
            .await
            .map_err(|_| SqlError::internal("DROP DATABASE failed unexpectedly"))??;
        if self.database.as_deref() == Some(name.as_str()) {
            self.database = None;
        }
        Ok(ok(0))
    }

    async fn set(&mut self, assignments: Vec<(String, String)>) -> Result<Reply, SqlError> {
        for (name, value) in assignments {
            // `@@x` and `@x` on the right are read; `SET @OLD_X = @@X, X = 0` and, at the
            // end, `SET X = @OLD_X` is how dumps save and restore a variable.
            let read = self.read_variable(&value);
            let value = match &read {
                Some(cell) => cell.to_text().unwrap_or_default(),
                // `X'2B30303A3030'`, as the relay restores a carried session's variables.
                None => hex_string(&value).unwrap_or(value),
            };
            if let Some(why) = variables::refused(&name, &value) {
                let shown = if name == "names" {
                    "character_set_client"
                } else {
                    name.as_str()
                };
                return Err(SqlError::new(
                    ErrorKind::ER_WRONG_VALUE_FOR_VAR,
                    format!("Variable '{shown}' can't be set to the value of '{value}' ({why})"),
                ));
            }
            if let Some(user) = name.strip_prefix('@') {
                let cell = match read {
                    Some(cell) => cell,
                    None if value.contains('(') => continue,
                    None => Cell::Text(value),
                };
                self.user_variables.insert(user.to_ascii_lowercase(), cell);
            } else if name == "autocommit" {
                let on = parse_flag(&value).ok_or_else(|| {
                    SqlError::new(
                        ErrorKind::ER_WRONG_VALUE_FOR_VAR,
                        "Variable 'autocommit' can't be set to this value",
                    )
                })?;
                if on && !self.autocommit {
                    // Turning autocommit on commits the open transaction, as in MySQL.
                    self.end_transaction(true).await?;
                }
                self.autocommit = on;
            }
            // Everything else the shim can take ([`variables::refused`]: not a character set,
            // sql_mode or time zone it would not follow) is accepted: a known variable set to
            // a plain value reads back as set (ORMs check `sql_mode`); set to NULL or to what
            // the shim does not evaluate, it is the default again. `foreign_key_checks`,
            // `wait_timeout` and `max_execution_time` act.
            else if let Some(value) = variables::assigned(&name, &value) {
                self.variables.insert(name, value);
            } else if variables::is_known(&name) && (read.is_some() || !value.contains('(')) {
                self.variables.remove(&name);
            }
        }
        self.refresh_facts();
        Ok(ok(0))
    }

    /// The value `text` reads when it names a variable: `@@x` (`@@session.x`) a system
    /// variable, `@x` a user variable (NULL if never set). `None` for anything else.
    fn read_variable(&self, text: &str) -> Option<Cell> {
        let name = text.to_ascii_lowercase();
        if !name.starts_with('@') || name.contains(|c: char| c.is_whitespace() || c == '(') {
            return None;
        }
        if let Some(system) = name.strip_prefix("@@") {
            let system = ["session.", "global.", "local."]
                .iter()
                .find_map(|p| system.strip_prefix(p))
                .unwrap_or(system);
            return variables::lookup(system, self.vars()).or(Some(Cell::Null));
        }
        let user = name.strip_prefix('@')?;
        Some(self.user_variables.get(user).cloned().unwrap_or(Cell::Null))
    }

    fn session_select(&self, items: Vec<(String, SessionItem)>) -> Result<Reply, SqlError> {
        let mut columns = Vec::with_capacity(items.len());
        let mut row = Vec::with_capacity(items.len());
        for (label, item) in items {
            let value = match item {
                SessionItem::Variable(name) => variables::lookup(&name, self.vars())
                    .ok_or_else(|| SqlError::unknown_variable(&name))?,
                SessionItem::UserVariable(name) => self
                    .user_variables
                    .get(&name)
                    .cloned()
                    .unwrap_or(Cell::Null),
                SessionItem::Literal(c) => c,
                SessionItem::Function(f) => self.session_fn(f),
            };
            columns.push(label);
            row.push(value);
        }
        Ok(Reply::Rows {
            columns,
            rows: vec![row],
            int_widths: Vec::new(),
            tables: Vec::new(),
        })
    }

    fn session_fn(&self, f: SessionFn) -> Cell {
        match f {
            SessionFn::Version => Cell::Text(SERVER_VERSION.into()),
            SessionFn::Database => self.database.clone().map_or(Cell::Null, Cell::Text),
            SessionFn::User => self
                .login
                .as_ref()
                .map_or(Cell::Null, |l| Cell::Text(format!("{}@{}", l.user, l.host))),
            SessionFn::CurrentUser => self
                .login
                .as_ref()
                .map_or(Cell::Null, |l| Cell::Text(format!("{}@%", l.user))),
            SessionFn::ConnectionId => Cell::UInt(u64::from(self.conn_id)),
            SessionFn::Now => Cell::DateTime(Utc::now().naive_utc().with_nanosecond_zero()),
            SessionFn::LastInsertId => Cell::UInt(self.last_insert_id),
        }
    }

    /// Registers a prepared statement; returns its id and parameter count.
    ///
    /// # Errors
    /// 1064 if the text does not tokenize or classify.
    pub async fn prepare(&mut self, sql: &str) -> Result<(u32, usize, Vec<String>), SqlError> {
        self.sql_mode().check(sql)?;
        let stripped = crate::dialect::strip_comments(sql)?;
        let statement = classify(&stripped)?;
        let params = count_placeholders(sql)?;
        let engine = match statement {
            Statement::Engine { write } => Some(EnginePlan {
                information_schema: crate::dialect::names_schema(&stripped, "information_schema"),
                sql: stripped,
                write,
            }),
            _ => None,
        };
        // Clients (libmariadb) take a statement's result columns from its prepare reply and
        // treat a statement that announced none as returning no rows.
        let columns = if engine.is_some() {
            self.result_columns(sql).await?
        } else {
            Vec::new()
        };
        let id = self.next_statement_id;
        self.next_statement_id = self.next_statement_id.wrapping_add(1).max(1);
        self.prepared.insert(
            id,
            Arc::new(Prepared {
                sql: sql.to_owned(),
                params,
                engine,
            }),
        );
        Ok((id, params, columns))
    }

    async fn result_columns(&mut self, sql: &str) -> Result<Vec<String>, SqlError> {
        let sql = sql.to_owned();
        if crate::dialect::names_schema(&sql, "information_schema") {
            return Ok(Vec::new());
        }
        if self.database.is_none() {
            return self.scratch()?.result_columns(&sql);
        }
        let db = self.current_database()?;
        self.with_executor(db, move |e| e.result_columns(&sql))
            .await
    }

    /// The prepared statement `id`.
    #[must_use]
    pub fn prepared(&self, id: u32) -> Option<Arc<Prepared>> {
        self.prepared.get(&id).cloned()
    }

    /// Forgets prepared statement `id`.
    pub fn close_statement(&mut self, id: u32) {
        self.prepared.remove(&id);
    }
}

trait NanosZero {
    fn with_nanosecond_zero(self) -> Self;
}

impl NanosZero for chrono::NaiveDateTime {
    fn with_nanosecond_zero(self) -> Self {
        use chrono::Timelike as _;
        self.with_nanosecond(0).unwrap_or(self)
    }
}

fn ok(affected_rows: u64) -> Reply {
    Reply::Ok {
        affected_rows,
        last_insert_id: 0,
        warnings: 0,
    }
}

/// What `SHOW PLUGINS` lists, built in (no library): the plugins a client may log in with
/// directly (`auth`) and the storage engine, as (name, type).
const PLUGINS: &[(&str, &str)] = &[
    ("mysql_native_password", "AUTHENTICATION"),
    ("caching_sha2_password", "AUTHENTICATION"),
    ("SQLite", "STORAGE ENGINE"),
];

fn rows(columns: &[&str], rows: Vec<Vec<Cell>>) -> Reply {
    Reply::Rows {
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        rows,
        int_widths: Vec::new(),
        tables: Vec::new(),
    }
}

/// Whether MySQL commits the open transaction before `sql` and runs it outside any: DDL.
/// A statement that only reads: one that begins with `SELECT` (the session answers its own
/// `SELECT`s before the engine). Anything else, even one behind a leading comment, is taken
/// as possibly writing.
fn plain_select(sql: &str) -> bool {
    let mut words = sql
        .trim_start()
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    words
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("select"))
}

/// Whether a transaction may run `sql` on its snapshot ([`Snapshot`]): a `SELECT`, one in
/// parentheses (`(SELECT ..) UNION ..`), or a `WITH` query that names no write.
fn snapshot_read(sql: &str) -> bool {
    let text = sql
        .trim_start()
        .trim_start_matches(|c: char| c == '(' || c.is_whitespace());
    if plain_select(text) {
        return true;
    }
    let upper = sql.to_ascii_uppercase();
    let mut words = upper.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    words.next().is_some_and(|w| w == "WITH")
        && !upper
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| ["INSERT", "UPDATE", "DELETE", "REPLACE"].contains(&w))
}

/// Whether a `SELECT` locks what it reads (`FOR UPDATE`, `FOR SHARE`, `LOCK IN SHARE MODE`):
/// it runs under the database's lock, as a write does. Read from the statement's tokens (a
/// string holding the words is not one). `NOWAIT` and `SKIP LOCKED` ones stay plain reads:
/// they must not wait, and the lock here is the whole database's.
fn locking_read(sql: &str) -> bool {
    // Most statements name neither word: those are not tokenized.
    let names = |word: &[u8]| {
        sql.as_bytes()
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word))
    };
    if !names(b"update") && !names(b"share") {
        return false;
    }
    let Ok(tokens) =
        sqlparser::tokenizer::Tokenizer::new(&crate::mysql_dialect::Mysql, sql).tokenize()
    else {
        return false;
    };
    let words: Vec<String> = tokens
        .iter()
        .filter_map(|t| match t {
            sqlparser::tokenizer::Token::Word(w) if w.quote_style.is_none() => {
                Some(w.value.to_ascii_uppercase())
            }
            _ => None,
        })
        .collect();
    let pair = |a: &str, b: &str| {
        words
            .windows(2)
            .any(|w| matches!(w, [x, y] if x == a && y == b))
    };
    (pair("FOR", "UPDATE") || pair("FOR", "SHARE") || pair("SHARE", "MODE"))
        && !words.iter().any(|w| w == "NOWAIT")
        && !pair("SKIP", "LOCKED")
}

fn commits_implicitly(sql: &str) -> bool {
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or_default();
    ["create", "alter", "drop", "rename", "truncate"]
        .iter()
        .any(|k| first.eq_ignore_ascii_case(k))
}

fn reply(outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Rows {
            columns,
            rows,
            int_widths,
            tables,
        } => Reply::Rows {
            columns,
            rows,
            int_widths,
            tables,
        },
        Outcome::Done {
            affected_rows,
            last_insert_id,
        } => Reply::Ok {
            affected_rows,
            last_insert_id,
            warnings: 0,
        },
    }
}

fn account_error(operation: &str, e: &AccountError) -> SqlError {
    match e {
        AccountError::Exists(n) | AccountError::NotFound(n) => {
            SqlError::user_operation_failed(operation, n)
        }
        AccountError::BadName => SqlError::user_operation_failed(operation, "?"),
        other => {
            tracing::error!(error = %other, "account store failed");
            SqlError::internal("the account store failed; see the server log")
        }
    }
}

/// Converts a prepared-statement parameter to a [`Cell`].
#[must_use]
pub fn param_cell(value: ValueInner<'_>) -> Cell {
    match value {
        ValueInner::NULL => Cell::Null,
        ValueInner::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => Cell::Text(s.to_owned()),
            Err(_) => Cell::Bytes(b.to_vec()),
        },
        ValueInner::Int(i) => Cell::Int(i),
        // Drivers send non-negative integers as unsigned; the engine's INT is signed.
        ValueInner::UInt(u) => i64::try_from(u).map_or(Cell::UInt(u), Cell::Int),
        ValueInner::Double(f) => Cell::Float(f),
        ValueInner::Date(b) => date_from_binary(b).map_or(Cell::Null, Cell::Date),
        ValueInner::Datetime(b) => match (date_from_binary(b), b.get(4..7)) {
            (Some(d), Some(&[h, m, s])) => d
                .and_hms_opt(h.into(), m.into(), s.into())
                .map_or(Cell::Null, Cell::DateTime),
            (Some(d), None) => d.and_hms_opt(0, 0, 0).map_or(Cell::Null, Cell::DateTime),
            _ => Cell::Null,
        },
        ValueInner::Time(b) => match b.get(5..8) {
            Some(&[h, m, s]) => {
                let days = b
                    .get(1..5)
                    .and_then(|d| <[u8; 4]>::try_from(d).ok())
                    .map_or(0, u32::from_le_bytes);
                let sign = if b.first() == Some(&1) { "-" } else { "" };
                Cell::Text(format!(
                    "{sign}{:02}:{m:02}:{s:02}",
                    u64::from(days) * 24 + u64::from(h)
                ))
            }
            _ => Cell::Text("00:00:00".into()),
        },
    }
}

fn date_from_binary(b: &[u8]) -> Option<NaiveDate> {
    let &[y0, y1, m, d, ..] = b else {
        return None;
    };
    NaiveDate::from_ymd_opt(
        i32::from(u16::from_le_bytes([y0, y1])),
        u32::from(m),
        u32::from(d),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_binary_parameters() {
        assert_eq!(param_cell(ValueInner::Int(-3)), Cell::Int(-3));
        assert_eq!(
            param_cell(ValueInner::Bytes(b"caf\xc3\xa9")),
            Cell::Text("café".into())
        );
        assert_eq!(
            param_cell(ValueInner::Bytes(b"\xff\xfe")),
            Cell::Bytes(vec![0xff, 0xfe])
        );
        assert_eq!(
            param_cell(ValueInner::Date(&[0xe8, 0x07, 2, 29])),
            Cell::Date(NaiveDate::from_ymd_opt(2024, 2, 29).unwrap())
        );
        assert_eq!(param_cell(ValueInner::Date(&[1])), Cell::Null);
        assert_eq!(
            param_cell(ValueInner::Time(&[0, 1, 0, 0, 0, 2, 3, 4])),
            Cell::Text("26:03:04".into())
        );
    }

    #[test]
    fn parses_autocommit_values() {
        assert_eq!(parse_flag("ON"), Some(true));
        assert_eq!(parse_flag("0"), Some(false));
        assert_eq!(parse_flag("maybe"), None);
    }
}
