//! The SQLite engine: one SQLite file per database (`DATA/db/<name>/data.sqlite`),
//! in WAL mode with `synchronous=FULL`, so an OK means the change is on disk and survives
//! `kill -9`. Statements arrive as MySQL text and go through [`crate::dialect`] first; the
//! MySQL functions SQLite lacks are registered on every connection ([`crate::mysql_functions`]).
//!
//! Opening a database only opens its file (SQLite reads pages on demand), so start-up does not
//! depend on how much data there is.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::hooks::PreUpdateCase;
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension as _};

use crate::column_shape::{self, Shape, to_cell};
use crate::column_triggers;
use crate::database_scope::DatabaseScope;
use crate::dialect::{self, StatementKind};
use crate::engine::{
    Cell, Engine, Executor, IndexColumn, Outcome, SavepointAction, SessionFacts, TableMeta,
};
use crate::file_format;
use crate::information_schema;
use crate::mysql_functions::{self, ConnectionFacts};
use crate::sql_error::SqlError;
use crate::sqlite_catalog;
use crate::sqlite_value::to_sqlite;
use crate::typed_values::{ColumnKinds, DeclaredKind};

/// The SQLite file inside a database directory.
pub const SQLITE_FILE: &str = "data.sqlite";

/// How long a statement waits for another connection's write lock before failing with
/// `ER_LOCK_WAIT_TIMEOUT`, like `innodb_lock_wait_timeout` (MySQL's default is 50 s; a shim
/// serves small databases, so less).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// SQLite, one file per database.
#[derive(Debug, Default, Clone, Copy)]
pub struct SqliteEngine;

impl Engine for SqliteEngine {
    fn open(&self, dir: &Path) -> Result<Box<dyn Executor>, SqlError> {
        let db_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let conn = Connection::open_with_flags(
            dir.join(SQLITE_FILE),
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(storage_error)?;
        let mut executor = SqliteExecutor::new(conn, db_name)?;
        executor.databases = dir.parent().map(Path::to_path_buf);
        Ok(Box::new(executor))
    }
}

/// An executor on an in-memory database: what a session without a current database runs
/// statements on (`SELECT 41+1` before `USE`). Qualified names (`shop.items`) reach the
/// databases under `databases`, attached when first named.
///
/// # Errors
/// [`SqlError`] if SQLite cannot open one.
pub fn in_memory(databases: &Path) -> Result<Box<dyn Executor>, SqlError> {
    let conn = Connection::open_in_memory().map_err(storage_error)?;
    let mut executor = SqliteExecutor::new(conn, String::new())?;
    executor.databases = Some(databases.to_path_buf());
    Ok(Box::new(executor))
}

/// An executor whose `information_schema` holds `snapshot` (every database's tables) and
/// `session`'s variables, for one query; `DATABASE()` answers `current_db`.
///
/// # Errors
/// [`SqlError`] if SQLite cannot build it.
pub fn information_schema(
    snapshot: &[(String, Vec<TableMeta>)],
    current_db: Option<String>,
    session: &SessionFacts,
) -> Result<Box<dyn Executor>, SqlError> {
    let conn = Connection::open_in_memory().map_err(storage_error)?;
    // No database name: `information_schema.t` must stay qualified (the current database's
    // qualifier would become `main`).
    let exec = SqliteExecutor::new(conn, String::new())?;
    exec.scope.begin(&[information_schema::SCHEMA.to_owned()]);
    information_schema::fill(&exec.conn, snapshot, current_db, session)
        .map_err(|e| exec.error(&e))?;
    Ok(Box::new(exec))
}

/// A database that cannot be opened or set up: SQLite's reason.
fn storage_error(e: rusqlite::Error) -> SqlError {
    SqlError::internal(&format!("cannot open storage: {e}"))
}

struct SqliteExecutor {
    conn: Connection,
    /// For error messages (`Table 'db.t' doesn't exist`).
    db_name: String,
    /// Whether an explicit transaction is open.
    in_transaction: bool,
    /// Whether SQLite checks foreign keys now (`PRAGMA foreign_keys`), so the pragma runs only
    /// when a session wants the other setting.
    foreign_keys: bool,
    /// What `LAST_INSERT_ID()`, `ROW_COUNT()` and `FOUND_ROWS()` read.
    facts: Arc<ConnectionFacts>,
    /// The declared types the running statement's typed arguments read.
    column_kinds: Arc<ColumnKinds>,
    /// The directory holding every database's directory, to attach the ones a statement
    /// names (`crm.customers`); none for in-memory databases.
    databases: Option<std::path::PathBuf>,
    /// The databases attached so far, with their file's (device, inode).
    attached: Vec<(String, (u64, u64))>,
    /// The attached databases the running statement may use: those it names.
    scope: Arc<DatabaseScope>,
    /// Translations of the statements seen lately, by their MySQL text.
    translations: HashMap<String, Arc<Translated>>,
    /// The limit on the next statements' work, checked by SQLite's progress handler.
    budget: Arc<StepBudget>,
    /// The rows the running statement changed, for its affected-row count.
    changes: Arc<RowChanges>,
    /// The notes the last statement left ([`Executor::take_warnings`]).
    warnings: Vec<crate::engine::Warning>,
}

/// The rows the running statement inserted, deleted and updated, tallied by SQLite's
/// pre-update hook: its own changes only (depth 0), not a trigger's or a foreign key action's,
/// as MySQL counts affected rows. SQLite's own count leaves out the rows `REPLACE` deleted and
/// cannot tell an upsert's update from an insert.
#[derive(Debug, Default)]
struct RowChanges {
    inserted: AtomicU64,
    deleted: AtomicU64,
    /// Updated to other values.
    changed: AtomicU64,
    /// Updated to the values they had.
    unchanged: AtomicU64,
}

/// [`RowChanges`] of one statement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    inserted: u64,
    deleted: u64,
    changed: u64,
    unchanged: u64,
}

impl RowChanges {
    /// The pre-update hook.
    fn note(&self, case: &PreUpdateCase) {
        let counter = match case {
            PreUpdateCase::Insert(new) if new.get_query_depth() == 0 => &self.inserted,
            PreUpdateCase::Delete(old) if old.get_query_depth() == 0 => &self.deleted,
            PreUpdateCase::Update {
                old_value_accessor: old,
                new_value_accessor: new,
            } if old.get_query_depth() == 0 => {
                let same = (0..old.get_column_count()).all(|i| {
                    matches!(
                        (old.get_old_column_value(i), new.get_new_column_value(i)),
                        (Ok(a), Ok(b)) if a == b
                    )
                });
                if same { &self.unchanged } else { &self.changed }
            }
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The tally since the last call, which starts the next.
    /// The rows the running statement inserted or updated so far.
    fn rows(&self) -> u64 {
        self.inserted.load(Ordering::Relaxed)
            + self.changed.load(Ordering::Relaxed)
            + self.unchanged.load(Ordering::Relaxed)
    }

    fn take(&self) -> Tally {
        Tally {
            inserted: self.inserted.swap(0, Ordering::Relaxed),
            deleted: self.deleted.swap(0, Ordering::Relaxed),
            changed: self.changed.swap(0, Ordering::Relaxed),
            unchanged: self.unchanged.swap(0, Ordering::Relaxed),
        }
    }
}

/// How many SQLite VM instructions run between two calls of the progress handler.
const PROGRESS_OPS: i32 = 1000;

/// A limit on the VM instructions of the statements an executor runs next (see
/// [`Executor::set_step_budget`]), shared with the connection's progress handler.
#[derive(Debug, Default)]
struct StepBudget {
    /// Progress-handler calls allowed ([`PROGRESS_OPS`] instructions each); 0: no limit.
    calls: AtomicU32,
    /// Calls so far under the current limit.
    used: AtomicU32,
    /// The limit stopped a statement.
    over: AtomicBool,
}

impl StepBudget {
    /// The progress handler: `true` stops the running statement (SQLITE_INTERRUPT).
    fn tick(&self) -> bool {
        let calls = self.calls.load(Ordering::Relaxed);
        if calls == 0 {
            return false;
        }
        if self.used.fetch_add(1, Ordering::Relaxed) < calls {
            return false;
        }
        self.over.store(true, Ordering::Relaxed);
        true
    }

    fn limited(&self) -> bool {
        self.calls.load(Ordering::Relaxed) != 0
    }

    fn set(&self, steps: Option<u32>) {
        let calls = steps.map_or(0, |s| s.div_ceil(PROGRESS_OPS.unsigned_abs()).max(1));
        self.calls.store(calls, Ordering::Relaxed);
        self.used.store(0, Ordering::Relaxed);
        self.over.store(false, Ordering::Relaxed);
    }
}

/// The names of `text`, a dotted list of backquoted names (`` `db`.`t` ``), unquoted; empty
/// when it is not one.
fn backquoted_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text.trim();
    while let Some(after) = rest.strip_prefix('`') {
        let mut name = String::new();
        let mut chars = after.char_indices().peekable();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            if c == '`' {
                if chars.peek().is_some_and(|(_, n)| *n == '`') {
                    name.push('`');
                    chars.next();
                } else {
                    end = Some(i + 1);
                    break;
                }
            } else {
                name.push(c);
            }
        }
        let Some(end) = end else {
            return Vec::new();
        };
        names.push(name);
        rest = after.get(end..).unwrap_or_default();
        match rest.strip_prefix('.') {
            Some(r) => rest = r,
            None if rest.trim().is_empty() => return names,
            None => return Vec::new(),
        }
    }
    Vec::new()
}

/// A name quoted for SQLite (backticks, inner ones doubled), as the dialect quotes them.
fn sqlite_name(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// `sql` (an index's or trigger's stored `CREATE`, which names no schema) creating its object
/// in `schema`: SQLite puts an index or trigger in its table's database, named by qualifying
/// the object's own name.
fn in_schema(sql: &str, schema: &str) -> String {
    if schema == "main" {
        return sql.to_owned();
    }
    let upper = sql.to_ascii_uppercase();
    let mut after = ["CREATE UNIQUE INDEX ", "CREATE INDEX ", "CREATE TRIGGER "]
        .iter()
        .find(|head| upper.starts_with(*head))
        .map_or(0, |head| head.len());
    if upper
        .get(after..)
        .is_some_and(|r| r.starts_with("IF NOT EXISTS "))
    {
        after += "IF NOT EXISTS ".len();
    }
    let (head, rest) = sql.split_at(after);
    format!("{head}{schema}.{rest}")
}

/// The bytes a WAL is cut back to after a checkpoint (SQLite's `journal_size_limit`).
const WAL_SIZE_LIMIT: i64 = 16 << 20;

/// The most databases SQLite attaches to one connection (its `SQLITE_MAX_ATTACHED` default):
/// beyond it the one used least recently is detached.
const MAX_ATTACHED: usize = 10;

/// A statement's translation and the qualifiers it names.
type Translated = (dialect::Translation, Vec<String>);

/// How many translations an executor keeps (cleared when full: statements repeat, so the
/// working set refills at once).
const TRANSLATION_CACHE_ENTRIES: usize = 512;

/// The longest statement whose translation is cached (so the cache holds at most about
/// 512 × 4 KiB of text).
const MAX_CACHED_STATEMENT_BYTES: usize = 4096;

impl SqliteExecutor {
    fn new(mut conn: Connection, db_name: String) -> Result<Self, SqlError> {
        // WAL: readers never block the writer; FULL: every commit is fsynced before the OK.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(storage_error)?;
        // A WAL that grew while a long read kept it from being checkpointed is cut back to
        // this once it can be.
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(storage_error)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(storage_error)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(storage_error)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(storage_error)?;
        conn.set_prepared_statement_cache_capacity(TRANSLATION_CACHE_ENTRIES);
        let facts = Arc::new(ConnectionFacts::default());
        mysql_functions::register(&conn, &db_name, &facts).map_err(storage_error)?;
        let column_kinds = Arc::new(ColumnKinds::default());
        crate::typed_values::register(&conn, &column_kinds).map_err(storage_error)?;
        let budget = Arc::new(StepBudget::default());
        let (sleep_budget, killed) = (Arc::clone(&budget), Arc::clone(&facts));
        conn.create_scalar_function(
            "sleep",
            1,
            rusqlite::functions::FunctionFlags::SQLITE_UTF8,
            move |ctx| {
                if sleep_budget.limited() {
                    // A read on the async runtime's thread, holding the database's shared
                    // connection: stopped as over its budget, it runs again on a blocking thread
                    // with a reader of its own, so other sessions' reads do not wait behind it.
                    sleep_budget.over.store(true, Ordering::Relaxed);
                    return Err(rusqlite::Error::UserFunctionError(
                        "SLEEP runs on a blocking thread".into(),
                    ));
                }
                match mysql_functions::sleep(
                    ctx.get::<Option<f64>>(0).ok().flatten(),
                    &killed.interrupted,
                ) {
                    // Killed: the statement fails as SQLite's interrupt fails it (1317).
                    // SQLite itself may not look at its interrupt again before the row is out.
                    1 => Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERRUPT),
                        None,
                    )),
                    slept => Ok(slept),
                }
            },
        )
        .map_err(storage_error)?;
        file_format::bring_up_to_date(&conn, "main", &db_name, storage_error)?;
        let ticks = Arc::clone(&budget);
        conn.progress_handler(PROGRESS_OPS, Some(move || ticks.tick()))
            .map_err(storage_error)?;
        let scope = DatabaseScope::install(&mut conn).map_err(storage_error)?;
        let changes = Arc::new(RowChanges::default());
        let tally = Arc::clone(&changes);
        conn.preupdate_hook(Some(move |_, _: &str, _: &str, case: &PreUpdateCase| {
            tally.note(case);
        }))
        .map_err(storage_error)?;
        Ok(Self {
            conn,
            db_name,
            in_transaction: false,
            foreign_keys: true,
            facts,
            column_kinds,
            databases: None,
            attached: Vec::new(),
            scope,
            translations: HashMap::new(),
            warnings: Vec::new(),
            budget,
            changes,
        })
    }

    /// Attaches the databases among `qualifiers` that exist and are not attached yet, so
    /// `crm.customers` works from `shop`. Names that are not databases (table aliases in
    /// `t.col`) are skipped.
    fn attach(&mut self, qualifiers: &[String]) -> Result<(), SqlError> {
        self.scope.begin(qualifiers);
        let Some(root) = self.databases.clone() else {
            return Ok(());
        };
        for name in qualifiers {
            if !crate::catalog::valid_database_name(name) || *name == self.db_name {
                continue;
            }
            let file = root.join(name).join(SQLITE_FILE);
            // The file's identity: a database dropped (and perhaps created again) since it was
            // attached is another file now, and the old attachment must not be written to.
            let current = std::fs::metadata(&file)
                .ok()
                .filter(std::fs::Metadata::is_file)
                .map(|m| (m.dev(), m.ino()));
            let known = self.attached.iter().position(|(n, _)| n == name);
            match (known, current) {
                (Some(i), Some(id)) if self.attached.get(i).map(|a| a.1) == Some(id) => {
                    // The most recently used last: the first is the one to detach for room.
                    let used = self.attached.remove(i);
                    self.attached.push(used);
                    continue;
                }
                (Some(i), _) => {
                    self.conn
                        .execute_batch(&format!("DETACH DATABASE \"{name}\""))
                        .map_err(|e| from_sqlite(&e, &self.db_name))?;
                    self.attached.remove(i);
                }
                (None, _) => {}
            }
            let Some(id) = current else {
                continue;
            };
            if file_format::is_old(&file) {
                if self.budget.calls.load(Ordering::Relaxed) != 0 {
                    // Not under a step limit (a read on the runtime's thread): the statement
                    // runs again on a blocking thread, without one.
                    self.budget.over.store(true, Ordering::Relaxed);
                    return Err(SqlError::internal("a database file to bring up to date"));
                }
                // On a connection of its own, committed before it is attached: neither this
                // connection's transaction nor its rollback takes part in it.
                SqliteEngine.open(&root.join(name)).map(drop)?;
            }
            if self.attached.len() >= MAX_ATTACHED {
                self.detach_least_recent(qualifiers)?;
            }
            self.conn
                .execute(
                    &format!("ATTACH DATABASE ?1 AS \"{name}\""),
                    [file.to_string_lossy()],
                )
                .map_err(|e| from_sqlite(&e, &self.db_name))?;
            self.attached.push((name.clone(), id));
        }
        Ok(())
    }

    /// Detaches the attached database used least recently that `keep` (the statement's
    /// qualifiers) does not name, to make room for another ([`MAX_ATTACHED`]).
    fn detach_least_recent(&mut self, keep: &[String]) -> Result<(), SqlError> {
        let Some(i) = self.attached.iter().position(|(n, _)| !keep.contains(n)) else {
            return Err(SqlError::not_supported(&format!(
                "more than {MAX_ATTACHED} other databases in one statement"
            )));
        };
        let name = self
            .attached
            .get(i)
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        // Refused (SQLITE_ERROR "database is locked") for one the open transaction used.
        self.conn
            .execute_batch(&format!("DETACH DATABASE \"{name}\""))
            .map_err(|_| {
                SqlError::not_supported(&format!(
                    "more than {MAX_ATTACHED} other databases in one transaction"
                ))
            })?;
        self.attached.remove(i);
        Ok(())
    }

    /// `sql` translated for this database, from the cache when it was seen before (the
    /// translation is a pure function of the text and the database).
    fn translate(&mut self, sql: &str) -> Result<Arc<Translated>, SqlError> {
        if let Some(hit) = self.translations.get(sql) {
            return Ok(Arc::clone(hit));
        }
        let current = (!self.db_name.is_empty()).then_some(self.db_name.as_str());
        let translated = Arc::new(dialect::translate_in(sql, current)?);
        if sql.len() > MAX_CACHED_STATEMENT_BYTES {
            // A dump's multi-megabyte INSERTs run once; caching them would only hold memory.
            return Ok(translated);
        }
        if self.translations.len() >= TRANSLATION_CACHE_ENTRIES {
            self.translations.clear();
        }
        self.translations
            .insert(sql.to_owned(), Arc::clone(&translated));
        Ok(translated)
    }

    /// The declared types of `columns`, for the functions of their arguments to read
    /// ([`crate::typed_values`]): looked up each time, so an `ALTER TABLE` since the statement
    /// was translated is seen.
    fn look_up_typed_columns(&self, columns: &[dialect::TypedArgument]) {
        self.column_kinds.set(
            columns
                .iter()
                .map(|typed| match typed {
                    dialect::TypedArgument::Column(c) => {
                        self.column_kind(c).unwrap_or(DeclaredKind::Other)
                    }
                    // The first that exists, as SQL resolves the name.
                    dialect::TypedArgument::AnyOf(candidates) => candidates
                        .iter()
                        .find_map(|c| self.column_kind(c))
                        .unwrap_or(DeclaredKind::Other),
                    dialect::TypedArgument::Number(t) => {
                        column_shape::number_declaration(&self.conn, &self.db_name, t)
                            .map_or(DeclaredKind::Other, |decl| DeclaredKind::of(&decl))
                    }
                })
                .collect(),
        );
    }

    /// What column `c`'s declared type and collation ask of its values; `None` when there is
    /// no such column.
    fn column_kind(&self, c: &dialect::TypedColumn) -> Option<DeclaredKind> {
        let kind = DeclaredKind::of(&column_shape::declared_type(&self.conn, &self.db_name, c)?);
        // Text in a `_bin` collation.
        let bin = kind == DeclaredKind::Other
            && column_shape::declared_collation(&self.conn, &self.db_name, c)
                .is_some_and(|name| dialect::is_binary_collation(&name));
        Some(if bin { DeclaredKind::TextBin } else { kind })
    }

    fn error(&self, e: &rusqlite::Error) -> SqlError {
        from_sqlite(e, &self.db_name)
    }

    /// `err`, unless the running statement failed because a name without a qualifier led into
    /// another database ([`DatabaseScope`]): then MySQL's 1146 for the current database.
    fn refusal_or(&self, err: SqlError) -> SqlError {
        match self.scope.refused() {
            Some(table) => SqlError::unknown_table(&self.db_name, &table),
            None => err,
        }
    }

    /// Runs `count` (a [`dialect::Translation::found_rows`] query) with the leading `params`
    /// its placeholders take, for `FOUND_ROWS()`.
    fn count_found_rows(&mut self, count: &str, params: &[Cell]) -> Result<(), SqlError> {
        // The count runs the query's WHERE again: its functions' warnings are not the
        // statement's a second time.
        let kept = self.facts.warnings.take();
        let counted = self.count_rows(count, params);
        self.facts.warnings.take();
        self.facts.warnings.put_back(kept);
        counted
    }

    /// [`Self::count_found_rows`]'s count.
    fn count_rows(&mut self, count: &str, params: &[Cell]) -> Result<(), SqlError> {
        let mut stmt = self
            .conn
            .prepare_cached(count)
            .map_err(|e| from_sqlite(&e, &self.db_name))?;
        let bound = params.get(..stmt.parameter_count()).unwrap_or(params);
        let found: i64 = stmt
            .query_row(
                rusqlite::params_from_iter(bound.iter().map(to_sqlite)),
                |row| row.get(0),
            )
            .map_err(|e| from_sqlite(&e, &self.db_name))?;
        self.facts.found_rows.store(found, Ordering::Relaxed);
        Ok(())
    }

    /// Rebuilds a table with `rebuild`'s changes ([`table_rebuild`]), as SQLite documents
    /// it: foreign keys off (outside any transaction, which DDL has committed), then in one
    /// transaction: renamed columns renamed in place (SQLite rewrites the indexes, triggers
    /// and views that name them), the table created again under another name with the
    /// changes, its rows copied, the old one dropped, the new one renamed, its indexes and
    /// triggers created again, and its foreign keys checked (a new one the rows break fails
    /// the statement, which then changes nothing).
    fn rebuild(&mut self, rebuild: &dialect::Rebuild) -> Result<(), SqlError> {
        let db = rebuild
            .schema
            .clone()
            .unwrap_or_else(|| self.db_name.clone());
        let schema = if db == self.db_name {
            "main".to_owned()
        } else {
            sqlite_name(&db)
        };
        let table = &rebuild.table;
        let foreign_keys = self.foreign_keys;
        if foreign_keys {
            self.set_foreign_key_checks(false)?;
        }
        // Old-style renames: the table's own rename must not rewrite the views and foreign
        // keys of other tables that name it (they name the rebuilt table once it has its
        // name back).
        let result = self
            .conn
            .execute_batch("PRAGMA legacy_alter_table = ON; BEGIN")
            .map_err(|e| self.error(&e))
            .and_then(|()| self.rebuild_in_transaction(rebuild, &schema, &db));
        let ended = match &result {
            Ok(()) => self.conn.execute_batch("COMMIT"),
            Err(_) => self.conn.execute_batch("ROLLBACK"),
        };
        let _ = self.conn.execute_batch("PRAGMA legacy_alter_table = OFF");
        if foreign_keys {
            self.set_foreign_key_checks(true)?;
        }
        result?;
        ended.map_err(|e| self.error(&e))?;
        tracing::debug!(table = %table, changes = rebuild.changes.len(), "table rebuilt");
        Ok(())
    }

    fn rebuild_in_transaction(
        &self,
        rebuild: &dialect::Rebuild,
        schema: &str,
        db: &str,
    ) -> Result<(), SqlError> {
        let table = rebuild.table.as_str();
        let run = |conn: &Connection, sql: &str| conn.execute_batch(sql);
        let fail = |e: rusqlite::Error| from_sqlite(&e, &self.db_name);
        for change in &rebuild.changes {
            if let dialect::Change::Column { old, new, .. } = change
                && old != new
            {
                run(
                    &self.conn,
                    &format!(
                        "ALTER TABLE {schema}.{} RENAME COLUMN {} TO {}",
                        sqlite_name(table),
                        sqlite_name(old),
                        sqlite_name(new)
                    ),
                )
                .map_err(fail)?;
            }
        }
        let stored: Option<String> = self
            .conn
            .query_row(
                &format!(
                    "SELECT sql FROM {schema}.sqlite_schema WHERE type = 'table' AND name = ?1"
                ),
                [table],
                |r| r.get(0),
            )
            .optional()
            .map_err(fail)?;
        let stored = stored.ok_or_else(|| SqlError::unknown_table(db, table))?;
        let temporary = format!("{table}__rebuild");
        let rewritten = crate::table_rebuild::rewrite(
            &stored,
            &rebuild.changes,
            &format!("{schema}.{}", sqlite_name(&temporary)),
        )?;
        // Its indexes and triggers, to create again; the column triggers are made anew from
        // the new columns (an ON UPDATE one where the column had one, unless a change says
        // otherwise).
        let mut others: Vec<(String, String)> = {
            let mut stmt = self
                .conn
                .prepare(&format!(
                    "SELECT name, sql FROM {schema}.sqlite_schema \
                     WHERE tbl_name = ?1 AND type IN ('index', 'trigger') AND sql IS NOT NULL"
                ))
                .map_err(fail)?;
            stmt.query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(Iterator::collect)
                .map_err(fail)?
        };
        let mut on_update: Vec<String> = others
            .iter()
            .filter_map(|(name, sql)| column_triggers::ours(table, name, sql)?.on_update)
            .collect();
        others.retain(|(name, sql)| column_triggers::ours(table, name, sql).is_none());
        for change in &rebuild.changes {
            if let dialect::Change::Column {
                old,
                new,
                on_update: has,
                ..
            } = change
            {
                on_update.retain(|c| c != old && c != new);
                if *has {
                    on_update.push(new.clone());
                }
            }
        }
        let columns = rewritten.copied.join(", ");
        let quoted = sqlite_name(table);
        for sql in [
            rewritten.create.clone(),
            format!(
                "INSERT INTO {schema}.{} ({columns}) SELECT {columns} FROM {schema}.{quoted}",
                sqlite_name(&temporary)
            ),
            format!("DROP TABLE {schema}.{quoted}"),
            format!(
                "ALTER TABLE {schema}.{} RENAME TO {quoted}",
                sqlite_name(&temporary)
            ),
        ] {
            run(&self.conn, &sql).map_err(fail)?;
        }
        for (_, sql) in &others {
            run(&self.conn, &in_schema(sql, schema)).map_err(fail)?;
        }
        let qualifier = (schema != "main").then_some(db);
        column_triggers::make(&self.conn, schema, qualifier, table, &on_update).map_err(fail)?;
        let broken: Option<String> = self
            .conn
            .query_row(
                &format!("PRAGMA {schema}.foreign_key_check({quoted})"),
                [],
                |r| r.get(2),
            )
            .optional()
            .map_err(fail)?;
        if let Some(parent) = broken {
            return Err(SqlError::foreign_key(&format!(
                "Cannot add or update a child row: a foreign key constraint fails (`{db}`.`{table}`, referencing `{parent}`)"
            )));
        }
        Ok(())
    }

    /// Runs one SQLite statement; a result set when it has columns.
    fn run(
        &mut self,
        sql: &str,
        params: &[Cell],
        kind: StatementKind,
        result_types: &[Option<dialect::ResultType>],
        aliases: &[(String, String)],
    ) -> Result<Outcome, SqlError> {
        // Cached: clients run the same statements over and over (prepared statements, ORMs);
        // SQLite re-prepares a cached statement itself when the schema changed. Long ones (a
        // dump's INSERTs) run once and are not kept.
        let mut cached;
        let mut once;
        let stmt: &mut rusqlite::Statement<'_> = if sql.len() <= MAX_CACHED_STATEMENT_BYTES {
            cached = self
                .conn
                .prepare_cached(sql)
                .map_err(|e| from_sqlite(&e, &self.db_name))?;
            &mut cached
        } else {
            once = self
                .conn
                .prepare(sql)
                .map_err(|e| from_sqlite(&e, &self.db_name))?;
            &mut once
        };
        let values: Vec<Value> = params.iter().map(to_sqlite).collect();
        if stmt.parameter_count() != values.len() {
            return Err(SqlError::syntax(&format!(
                "the statement has {} placeholders and {} values were given",
                stmt.parameter_count(),
                values.len()
            )));
        }
        if stmt.column_count() > 0 {
            // The result's columns are read once the statement has stepped: a connection
            // whose schema changed under it (a read connection, after another's ALTER TABLE)
            // prepares the statement again at its first step, and `SELECT *` may then have
            // more columns than the stale schema said.
            let conn = &self.conn;
            let db_name = &self.db_name;
            let describe =
                |stmt: &rusqlite::Statement<'_>| -> (Vec<String>, Vec<Shape>, Vec<String>) {
                    let columns = stmt.column_names().map(str::to_owned).collect();
                    // Each column's table as the statement calls it: the FROM entry of the
                    // table SQLite says the column comes from, when there is one (its name
                    // when the table is there twice: SQLite cannot say which); none when the
                    // FROM is not plain tables, or the table is not one of them (a view's).
                    let tables = if aliases.is_empty() {
                        Vec::new()
                    } else {
                        stmt.columns_with_metadata()
                            .map(|c| {
                                let Some(t) = c.table_name() else {
                                    return String::new();
                                };
                                let mut entries = aliases
                                    .iter()
                                    .filter(|(table, _)| table.eq_ignore_ascii_case(t));
                                match (entries.next(), entries.next()) {
                                    (Some((_, called)), None) => called.clone(),
                                    (Some(_), Some(_)) => t.to_owned(),
                                    (None, _) => String::new(),
                                }
                            })
                            .collect()
                    };
                    let shapes = stmt
                        .columns()
                        .enumerate()
                        .map(|(i, c)| match (c.decl_type(), result_types.get(i)) {
                            (Some(decl), _) => Shape::of(decl),
                            (None, Some(Some(t))) => column_shape::shape_of(conn, db_name, t),
                            (None, _) => Shape::Plain,
                        })
                        .collect();
                    (columns, shapes, tables)
                };
            let mut described = None;
            let mut out = Vec::new();
            {
                let mut rows = stmt
                    .query(rusqlite::params_from_iter(values))
                    .map_err(|e| from_sqlite(&e, db_name))?;
                while let Some(row) = rows.next().map_err(|e| from_sqlite(&e, db_name))? {
                    let (_, shapes, _) = described.get_or_insert_with(|| describe(row.as_ref()));
                    let mut cells = Vec::with_capacity(shapes.len());
                    for (i, shape) in shapes.iter().enumerate() {
                        let v = row.get_ref(i).map_err(|e| from_sqlite(&e, db_name))?;
                        cells.push(to_cell(v, *shape));
                    }
                    out.push(cells);
                }
            }
            let (columns, shapes, tables) = described.unwrap_or_else(|| describe(stmt));
            self.facts.found_rows.store(
                i64::try_from(out.len()).unwrap_or(i64::MAX),
                Ordering::Relaxed,
            );
            let int_widths = shapes.iter().map(Shape::int_width).collect();
            return Ok(Outcome::Rows {
                columns,
                rows: out,
                int_widths,
                tables,
            });
        }
        self.changes.take();
        let changes = Arc::clone(&self.changes);
        let changed = stmt
            .execute(rusqlite::params_from_iter(values))
            .map_err(|e| match from_sqlite(&e, &self.db_name) {
                // A DELETE breaks a foreign key only as the parent side.
                failed if kind == StatementKind::Delete && failed.code() == 1452 => {
                    SqlError::parent_row(&e.to_string())
                }
                // A value its column refuses: which row, as MySQL says (the rows before it
                // went through the pre-update hook; its constraints are checked before).
                mut failed if matches!(failed.code(), 1264 | 1265 | 1366 | 1406) => {
                    failed.message = format!("{} at row {}", failed.message, changes.rows() + 1);
                    failed
                }
                failed => failed,
            })?;
        let tally = self.changes.take();
        let last_insert_id = if matches!(kind, StatementKind::Insert | StatementKind::Replace)
            && tally.inserted > 0
        {
            // MySQL reports the first id a multi-row INSERT generated; SQLite gives the last,
            // and one statement's AUTOINCREMENT ids are consecutive.
            let last = self.conn.last_insert_rowid();
            let inserted = i64::try_from(tally.inserted).unwrap_or(0);
            let first = last.saturating_sub(inserted.saturating_sub(1));
            self.facts.last_insert_id.store(first, Ordering::Relaxed);
            u64::try_from(first).unwrap_or(0)
        } else {
            0
        };
        let affected_rows = match kind {
            // An upsert's update counts 2 and its update to the same values 1, as MySQL
            // counts them for a client with CLIENT_FOUND_ROWS (an UPDATE here counts the rows
            // it matched, too).
            StatementKind::Insert => tally.inserted + 2 * tally.changed + tally.unchanged,
            // Each row REPLACE deleted to make room counts beside the row it inserted.
            StatementKind::Replace => tally.inserted + tally.deleted,
            StatementKind::Update | StatementKind::Delete => changed as u64,
            _ => 0,
        };
        self.facts.row_count.store(
            i64::try_from(affected_rows).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        Ok(Outcome::Done {
            affected_rows,
            last_insert_id,
        })
    }
}

impl SqliteExecutor {
    /// [`Executor::execute`]'s work: `sql` translated (from the cache), then run.
    fn execute_translated(&mut self, sql: &str, params: &[Cell]) -> Result<Outcome, SqlError> {
        let translated = self.translate(sql)?;
        let (translation, qualifiers) = &*translated;
        if self.budget.limited()
            && !(translation.kind == StatementKind::Query
                && translation.statements.len() == 1
                && translation.rebuild.is_none())
        {
            // Under a limit only what a limit can stop without a trace may run: one query.
            self.budget.over.store(true, Ordering::Relaxed);
            return Err(SqlError::internal("not a single query"));
        }
        self.attach(qualifiers)?;
        if translation.kind.commits_implicitly() && self.in_transaction {
            // MySQL commits the open transaction before any DDL.
            self.commit()?;
        }
        if let Some(rebuild) = &translation.rebuild {
            self.rebuild(rebuild)?;
        }
        self.look_up_typed_columns(&translation.typed_columns);
        self.facts.strict_write.store(
            matches!(
                translation.kind,
                StatementKind::Insert
                    | StatementKind::Replace
                    | StatementKind::Update
                    | StatementKind::Ddl
            ),
            Ordering::Relaxed,
        );
        if translation.statements.len() > 1
            && matches!(
                translation.kind,
                StatementKind::Insert | StatementKind::Replace
            )
        {
            return self.insert_in_parts(translation, params);
        }
        let mut outcome = Outcome::Done {
            affected_rows: 0,
            last_insert_id: 0,
        };
        let last = translation.statements.len().saturating_sub(1);
        for (i, statement) in translation.statements.iter().enumerate() {
            // Placeholders belong to the statement the client wrote: the first one.
            let bound = if i == 0 { params } else { &[] };
            let result_types = if i == last {
                translation.result_types.as_slice()
            } else {
                &[]
            };
            if translation.kind == StatementKind::Ddl {
                self.note_missing_drop(statement);
                // `DROP TABLE t, crm.x` is one statement per table: each may use only the
                // database it names itself, never `crm` for its `t`.
                if let Some(name) = dropped(statement) {
                    match backquoted_names(name).as_slice() {
                        [db, _] if db != "main" => self.scope.begin(core::slice::from_ref(db)),
                        _ => self.scope.begin(&[]),
                    }
                }
            }
            let this = match self.run(
                statement,
                bound,
                translation.kind,
                result_types,
                &translation.from_tables,
            ) {
                // SQLite refuses to drop a column a trigger of ours names (an `ON UPDATE
                // CURRENT_TIMESTAMP` one names every column): made again without it.
                Err(e)
                    if translation.kind == StatementKind::Ddl
                        && e.message.contains(" after drop column") =>
                {
                    self.without_column_triggers(statement, &e)?
                }
                // `DROP TABLE IF EXISTS t` of a `t` only another database has: not there, as
                // `note_missing_drop` noted.
                Err(_)
                    if self.scope.refused().is_some() && dropped_if_exists(statement).is_some() =>
                {
                    Outcome::Done {
                        affected_rows: 0,
                        last_insert_id: 0,
                    }
                }
                result => result?,
            };
            if i == last || matches!(this, Outcome::Rows { .. }) {
                outcome = this;
            }
        }
        if let Some(count) = &translation.found_rows {
            self.count_found_rows(count, params)?;
        }
        if let Outcome::Rows { columns, .. } = &mut outcome {
            mysql_names(columns, &translation.column_names);
        }
        Ok(outcome)
    }
}

impl SqliteExecutor {
    /// Notes a `DROP TABLE|VIEW IF EXISTS` (as the dialect writes it: one name, quoted) of a
    /// table that is not there, as MySQL notes it: 1051 `Unknown table 'db.t'`.
    fn note_missing_drop(&mut self, statement: &str) {
        let Some(name) = dropped_if_exists(statement) else {
            return;
        };
        let parts = backquoted_names(name);
        let (schema, table) = match parts.as_slice() {
            [table] => (None, table.as_str()),
            [schema, table] => (Some(schema.as_str()), table.as_str()),
            _ => return,
        };
        let sqlite_schema = match schema {
            Some(db) if db != self.db_name => format!("{}.sqlite_schema", sqlite_name(db)),
            _ => "main.sqlite_schema".to_owned(),
        };
        let exists = self
            .conn
            .query_row(
                &format!(
                    "SELECT 1 FROM {sqlite_schema} WHERE type IN ('table', 'view') AND name = ?1"
                ),
                [table],
                |_| Ok(()),
            )
            .optional();
        if matches!(exists, Ok(None)) {
            let db = schema.unwrap_or(&self.db_name);
            self.warnings.push(crate::engine::Warning {
                level: "Note",
                code: 1051,
                message: format!("Unknown table '{db}.{table}'"),
            });
        }
    }

    /// Runs an `INSERT` the dialect wrote as several (its rows leave different columns to
    /// their defaults) as MySQL runs the one the client sent: all rows or none, the rows of
    /// all counted, and the first id any of them generated as its insert id. The client's
    /// values are given to each part in order, as many as it has placeholders.
    fn insert_in_parts(
        &mut self,
        translation: &dialect::Translation,
        params: &[Cell],
    ) -> Result<Outcome, SqlError> {
        let db_name = self.db_name.clone();
        let fail = |e: rusqlite::Error| from_sqlite(&e, &db_name);
        self.conn
            .execute_batch("SAVEPOINT insert_in_parts")
            .map_err(fail)?;
        let mut affected = 0;
        let mut first_id = 0;
        let mut left = params;
        let mut result = Ok(());
        for statement in &translation.statements {
            let wanted = match self.conn.prepare_cached(statement) {
                Ok(stmt) => stmt.parameter_count(),
                Err(e) => {
                    result = Err(fail(e));
                    break;
                }
            };
            let (now, rest) = left.split_at(wanted.min(left.len()));
            left = rest;
            match self.run(statement, now, translation.kind, &[], &[]) {
                Ok(Outcome::Done {
                    affected_rows,
                    last_insert_id,
                }) => {
                    affected += affected_rows;
                    if first_id == 0 {
                        first_id = last_insert_id;
                    }
                }
                Ok(Outcome::Rows { .. }) => {}
                Err(mut e) => {
                    // Its row counted in the statement the client wrote: the parts before it
                    // inserted `affected` rows (each part a run of the client's rows).
                    if let Some((head, row)) = e.message.rsplit_once(" at row ")
                        && let Ok(row) = row.parse::<u64>()
                    {
                        e.message = format!("{head} at row {}", row + affected);
                    }
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() && !left.is_empty() {
            result = Err(SqlError::syntax(&format!(
                "the statement has fewer placeholders than the {} values given",
                params.len()
            )));
        }
        let end = if result.is_ok() {
            "RELEASE insert_in_parts"
        } else {
            "ROLLBACK TO insert_in_parts; RELEASE insert_in_parts"
        };
        self.conn.execute_batch(end).map_err(fail)?;
        result?;
        if first_id != 0 {
            self.facts
                .last_insert_id
                .store(i64::try_from(first_id).unwrap_or(0), Ordering::Relaxed);
        }
        self.facts.row_count.store(
            i64::try_from(affected).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        Ok(Outcome::Done {
            affected_rows: affected,
            last_insert_id: first_id,
        })
    }

    /// Runs `statement` (an `ALTER TABLE ... DROP COLUMN` that `refused` because of a
    /// trigger) with the table's column triggers dropped, then makes them again over the
    /// columns left (`column_triggers`). One table of the current database; anything else
    /// stays refused.
    fn without_column_triggers(
        &mut self,
        statement: &str,
        refused: &SqlError,
    ) -> Result<Outcome, SqlError> {
        // `ALTER TABLE `t` DROP COLUMN ...` of a table of the current database, refused by
        // the trigger SQLite names: `error in trigger <name> after drop column`.
        let table = statement
            .strip_prefix("ALTER TABLE `")
            .and_then(|rest| rest.split_once("` DROP COLUMN "))
            .map(|(t, _)| t.replace("``", "`"))
            .filter(|t| !t.contains('`'));
        let trigger = refused
            .message
            .split_once("error in trigger ")
            .and_then(|(_, rest)| rest.split_once(" after drop column"))
            .map(|(name, _)| name.to_owned());
        let (Some(table), Some(trigger)) = (table, trigger) else {
            return Err(refused.clone());
        };
        let db_name = self.db_name.clone();
        let fail = |e: rusqlite::Error| from_sqlite(&e, &db_name);
        let ours: Vec<column_triggers::Ours> = {
            let mut stmt = self
                .conn
                .prepare(
                    "SELECT name, sql FROM main.sqlite_schema \
                     WHERE type = 'trigger' AND tbl_name = ?1",
                )
                .map_err(fail)?;
            let rows = stmt
                .query_map([&table], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(fail)?;
            rows.collect::<rusqlite::Result<Vec<(String, String)>>>()
                .map_err(fail)?
                .iter()
                .filter_map(|(name, sql)| column_triggers::ours(&table, name, sql))
                .collect()
        };
        if !ours.iter().any(|o| o.name == trigger) {
            return Err(refused.clone());
        }
        // All or nothing: the triggers come back if the drop still fails.
        self.conn
            .execute_batch("SAVEPOINT drop_column")
            .map_err(fail)?;
        let result = self.drop_column_between_triggers(statement, &table, &ours);
        let end = if result.is_ok() {
            "RELEASE drop_column"
        } else {
            "ROLLBACK TO drop_column; RELEASE drop_column"
        };
        self.conn.execute_batch(end).map_err(fail)?;
        result
    }

    /// [`Self::without_column_triggers`]'s work, inside its savepoint.
    fn drop_column_between_triggers(
        &mut self,
        statement: &str,
        table: &str,
        ours: &[column_triggers::Ours],
    ) -> Result<Outcome, SqlError> {
        let db_name = self.db_name.clone();
        let fail = |e: rusqlite::Error| from_sqlite(&e, &db_name);
        for trigger in ours {
            self.conn
                .execute_batch(&format!("DROP TRIGGER main.{}", sqlite_name(&trigger.name)))
                .map_err(fail)?;
        }
        let outcome = self.run(statement, &[], StatementKind::Ddl, &[], &[])?;
        let on_update: Vec<String> = ours.iter().filter_map(|o| o.on_update.clone()).collect();
        column_triggers::make(&self.conn, "main", None, table, &on_update).map_err(fail)?;
        Ok(outcome)
    }
}

impl Executor for SqliteExecutor {
    fn execute(&mut self, sql: &str, params: &[Cell]) -> Result<Outcome, SqlError> {
        // No refusal of an earlier statement is taken for this one's (it may fail before it
        // is prepared).
        self.scope.begin(&[]);
        *self
            .facts
            .statement_time
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        let result = self
            .execute_translated(sql, params)
            .map_err(|e| self.refusal_or(e));
        if result.is_err() && self.in_transaction && self.conn.is_autocommit() {
            // SQLite rolled the whole transaction back (an interrupted write does that, where
            // InnoDB would undo the statement alone): said so with the code that tells a
            // client its transaction is gone and must be run again, never left for the
            // statements after it to run outside the transaction the client thinks is open.
            self.in_transaction = false;
            return Err(SqlError::transaction_rolled_back());
        }
        if self.budget.limited()
            && matches!(&result, Err(e) if e.code() == SqlError::lock_wait_timeout().code())
        {
            // Busy, not waited for under the limit (see `set_step_budget`).
            self.budget.over.store(true, Ordering::Relaxed);
        }
        result
    }

    fn set_step_budget(&mut self, steps: Option<u32>) {
        if self.budget.limited() != steps.is_some() {
            // Under a limit a busy database is not waited for: the read runs again where it
            // may wait (a blocking thread), not on the async runtime's thread.
            let wait = if steps.is_some() {
                Duration::ZERO
            } else {
                BUSY_TIMEOUT
            };
            let _ = self.conn.busy_timeout(wait);
        }
        self.budget.set(steps);
    }

    fn over_budget(&self) -> bool {
        self.budget.over.load(Ordering::Relaxed)
    }

    fn interrupter(&self) -> crate::processes::Interrupt {
        let handle = self.conn.get_interrupt_handle();
        let facts = Arc::clone(&self.facts);
        facts.interrupted.store(false, Ordering::Relaxed);
        Box::new(move || {
            facts.interrupted.store(true, Ordering::Relaxed);
            handle.interrupt();
        })
    }

    fn set_session(&mut self, session: Arc<crate::engine::SessionFacts>) {
        *self
            .facts
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = session;
    }

    fn set_last_insert_id(&mut self, id: u64) {
        self.facts
            .last_insert_id
            .store(i64::try_from(id).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    fn set_counts(&mut self, row_count: i64, found_rows: i64) {
        self.facts.row_count.store(row_count, Ordering::Relaxed);
        self.facts.found_rows.store(found_rows, Ordering::Relaxed);
    }

    fn take_warnings(&mut self) -> Vec<crate::engine::Warning> {
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(self.facts.warnings.take());
        warnings
    }

    fn counts(&self) -> (i64, i64) {
        (
            self.facts.row_count.load(Ordering::Relaxed),
            self.facts.found_rows.load(Ordering::Relaxed),
        )
    }

    fn begin(&mut self) -> Result<(), SqlError> {
        if self.in_transaction {
            return Ok(());
        }
        self.conn
            .execute_batch("BEGIN")
            .map_err(|e| self.error(&e))?;
        self.in_transaction = true;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        if !std::mem::replace(&mut self.in_transaction, false) {
            return Ok(());
        }
        self.conn
            .execute_batch("COMMIT")
            .map_err(|e| self.error(&e))
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        if !std::mem::replace(&mut self.in_transaction, false) {
            return Ok(());
        }
        self.conn
            .execute_batch("ROLLBACK")
            .map_err(|e| self.error(&e))
    }

    fn set_foreign_key_checks(&mut self, on: bool) -> Result<(), SqlError> {
        // Inside a transaction SQLite ignores the pragma: the setting it began with holds.
        if self.in_transaction || self.foreign_keys == on {
            return Ok(());
        }
        let sql = if on {
            "PRAGMA foreign_keys = ON"
        } else {
            "PRAGMA foreign_keys = OFF"
        };
        self.conn.execute_batch(sql).map_err(|e| self.error(&e))?;
        self.foreign_keys = on;
        Ok(())
    }

    fn savepoint(&mut self, action: SavepointAction, name: &str) -> Result<(), SqlError> {
        if !self.in_transaction {
            return Err(SqlError::no_savepoint(name));
        }
        let verb = match action {
            SavepointAction::Set => "SAVEPOINT",
            SavepointAction::RollbackTo => "ROLLBACK TO",
            SavepointAction::Release => "RELEASE",
        };
        // The name quoted as an identifier: it is the client's text.
        let sql = format!("{verb} \"{}\"", name.replace('"', "\"\""));
        self.conn.execute_batch(&sql).map_err(|e| {
            if e.to_string().contains("no such savepoint") {
                SqlError::no_savepoint(name)
            } else {
                self.error(&e)
            }
        })
    }

    fn table_names(&mut self) -> Result<Vec<String>, SqlError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') \
                 AND name NOT LIKE 'sqlite_%' ORDER BY name",
            )
            .map_err(|e| from_sqlite(&e, &self.db_name))?;
        stmt.query_map([], |r| r.get::<_, String>(0))
            .and_then(Iterator::collect)
            .map_err(|e| from_sqlite(&e, &self.db_name))
    }

    fn show_create_table(&mut self, table: &str) -> Result<Option<String>, SqlError> {
        sqlite_catalog::show_create_table(&self.conn, table).map_err(|e| self.error(&e))
    }

    fn indexes(&mut self, table: &str) -> Result<Option<Vec<IndexColumn>>, SqlError> {
        sqlite_catalog::index_columns(&self.conn, table).map_err(|e| self.error(&e))
    }

    fn result_columns(&mut self, sql: &str) -> Result<Vec<String>, SqlError> {
        self.scope.begin(&[]);
        let translated = self.translate(sql)?;
        let (translation, qualifiers) = &*translated;
        if translation.kind != StatementKind::Query {
            return Ok(Vec::new());
        }
        self.attach(qualifiers)?;
        let Some(query) = translation.statements.last() else {
            return Ok(Vec::new());
        };
        let stmt = self
            .conn
            .prepare(query)
            .map_err(|e| self.refusal_or(self.error(&e)))?;
        let mut columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        mysql_names(&mut columns, &translation.column_names);
        Ok(columns)
    }

    fn describe(&mut self) -> Result<Vec<TableMeta>, SqlError> {
        sqlite_catalog::describe(&self.conn).map_err(|e| self.error(&e))
    }
}

/// Renames `columns` (SQLite's names) with MySQL's `names` where a translation has them
/// ([`dialect::Translation::column_names`]).
fn mysql_names(columns: &mut [String], names: &[Option<String>]) {
    if columns.len() != names.len() {
        return;
    }
    for (column, name) in columns.iter_mut().zip(names) {
        if let Some(name) = name {
            column.clone_from(name);
        }
    }
}

/// The MySQL error for one of SQLite's other messages, by its wording (SQLite gives these
/// the generic `SQLITE_ERROR`); 1105 with SQLite's text when none fits.
fn engine_message(message: &str) -> SqlError {
    use opensrv_mysql::ErrorKind;
    let after = |prefix: &str| message.strip_prefix(prefix).map(|r| r.trim_matches('`'));
    // A function's warning that strict mode makes an error in a write (`CAST('x' AS SIGNED)`).
    if message.starts_with("Truncated incorrect ") {
        return SqlError::new(ErrorKind::ER_TRUNCATED_WRONG_VALUE, message.to_owned());
    }
    if let Some(column) = after("ambiguous column name: ") {
        return SqlError::new(
            ErrorKind::ER_NON_UNIQ_ERROR,
            format!("Column '{column}' in field list is ambiguous"),
        );
    }
    if let Some((_, column)) = message.split_once(" has no column named ") {
        return SqlError::unknown_column(column);
    }
    if let Some(column) = after("duplicate column name: ") {
        return SqlError::new(
            ErrorKind::ER_DUP_FIELDNAME,
            format!("Duplicate column name '{column}'"),
        );
    }
    if let Some(index) = after("index ").and_then(|r| r.strip_suffix(" already exists")) {
        return SqlError::new(
            ErrorKind::ER_DUP_KEYNAME,
            format!("Duplicate key name '{}'", index.trim_matches('`')),
        );
    }
    if let Some(index) = after("no such index: ") {
        return SqlError::new(
            ErrorKind::ER_CANT_DROP_FIELD_OR_KEY,
            format!("Can't DROP INDEX '{index}'; check that it exists"),
        );
    }
    if message.starts_with("sub-select returns") || message == "row value misused" {
        return SqlError::new(
            ErrorKind::ER_OPERAND_COLUMNS,
            "Operand should contain 1 column(s)",
        );
    }
    if message.contains("do not have the same number of result columns") {
        return SqlError::new(
            ErrorKind::ER_WRONG_NUMBER_OF_COLUMNS_IN_SELECT,
            "The used SELECT statements have a different number of columns",
        );
    }
    if message.starts_with("misuse of aggregate") {
        return SqlError::new(
            ErrorKind::ER_INVALID_GROUP_FUNC_USE,
            "Invalid use of group function",
        );
    }
    // "2 values for 3 columns", "table t has 2 columns but 3 values were supplied".
    if (message.contains(" values for ") && message.ends_with(" columns"))
        || message.ends_with(" values were supplied")
    {
        return SqlError::new(
            ErrorKind::ER_WRONG_VALUE_COUNT_ON_ROW,
            "Column count doesn't match value count at row 1",
        );
    }
    SqlError::internal(message)
}

/// SQLite's message without the ` in <statement> at offset N` it appends to some errors: the
/// client knows its statement, and the translated text is not what it sent.
fn without_statement(message: &str) -> &str {
    match (message.find(" in "), message.rfind(" at offset ")) {
        (Some(i), Some(_)) => message.get(..i).unwrap_or(message),
        _ => message,
    }
}

/// The name a `DROP TABLE|VIEW IF EXISTS` drops (as the dialect writes it).
fn dropped_if_exists(statement: &str) -> Option<&str> {
    statement
        .strip_prefix("DROP TABLE IF EXISTS ")
        .or_else(|| statement.strip_prefix("DROP VIEW IF EXISTS "))
}

/// The name a `DROP TABLE|VIEW`, with `IF EXISTS` or without, drops.
fn dropped(statement: &str) -> Option<&str> {
    dropped_if_exists(statement).or_else(|| {
        statement
            .strip_prefix("DROP TABLE ")
            .or_else(|| statement.strip_prefix("DROP VIEW "))
    })
}

/// Maps a SQLite error to the MySQL error a MySQL server would send for the same mistake.
/// `db` is the database, used in messages that name `db.table`.
#[must_use]
pub fn from_sqlite(err: &rusqlite::Error, db: &str) -> SqlError {
    let (failure, message) = match err {
        rusqlite::Error::SqliteFailure(failure, message) => {
            (failure, message.as_deref().unwrap_or_default())
        }
        // What `prepare` reports: the message and where in the statement it went wrong.
        rusqlite::Error::SqlInputError { error, msg, .. } => (error, msg.as_str()),
        other => return SqlError::internal(&other.to_string()),
    };
    let message = without_statement(message);
    match failure.code {
        ErrorCode::ConstraintViolation => {
            use rusqlite::ffi;
            match failure.extended_code {
                ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                    SqlError::duplicate_entry(message)
                }
                ffi::SQLITE_CONSTRAINT_NOTNULL => SqlError::null_in_not_null(message),
                ffi::SQLITE_CONSTRAINT_FOREIGNKEY => SqlError::foreign_key(message),
                _ => crate::dialect::value_violated(message)
                    .unwrap_or_else(|| SqlError::check_failed(message)),
            }
        }
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => SqlError::lock_wait_timeout(),
        ErrorCode::OperationInterrupted => SqlError::query_interrupted(),
        _ => {
            if let Some(table) = message.strip_prefix("no such table: ") {
                // `information_schema.x`, or another database's `d.x` (attached under its
                // name): the schema the statement named, else the current database.
                match table.split_once('.') {
                    Some((schema, table)) if schema != "main" => {
                        SqlError::unknown_table(schema, table)
                    }
                    Some((_, table)) => SqlError::unknown_table(db, table),
                    None => SqlError::unknown_table(db, table),
                }
            } else if let Some(column) = message.strip_prefix("no such column: ") {
                SqlError::unknown_column(column)
            } else if let Some(rest) = message.strip_prefix("table ") {
                match rest.strip_suffix(" already exists") {
                    Some(t) => SqlError::table_exists(t.trim_matches('`')),
                    None => engine_message(message),
                }
            } else if message.contains("syntax error")
                || message.starts_with("near ")
                || message == "incomplete input"
            {
                SqlError::syntax(message)
            } else if message.starts_with("no such function: ") {
                SqlError::not_supported(message)
            } else {
                engine_message(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use super::*;
    use crate::engine::{IntWidth, count_placeholders};

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("server-shim-sqlite-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn exec(e: &mut dyn Executor, sql: &str) -> Result<Outcome, SqlError> {
        e.execute(sql, &[])
    }

    /// The rows of the query `sql`.
    fn rows(e: &mut dyn Executor, sql: &str) -> Vec<Vec<Cell>> {
        match exec(e, sql) {
            Ok(Outcome::Rows { rows, .. }) => rows,
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// A file made before accents were folded: its UNIQUE index in the old order (ASCII case
    /// folded, other bytes as they are), `José` and `jose` both in it, or `É` alone.
    fn file_of_the_old_order(dir: &Path, values: &[&str]) {
        let c = Connection::open(dir.join(SQLITE_FILE)).unwrap();
        c.create_collation(dialect::GENERAL_CI, |a: &str, b: &str| {
            a.to_ascii_uppercase().cmp(&b.to_ascii_uppercase())
        })
        .unwrap();
        old_file(
            &c,
            &format!(
                "CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT COLLATE {} UNIQUE)",
                dialect::GENERAL_CI
            ),
            values,
        );
    }

    /// A file made by `schema` on `c`, its table `t`'s column `s` holding `values`.
    fn old_file(c: &Connection, schema: &str, values: &[&str]) {
        c.execute_batch(schema).unwrap();
        for v in values {
            c.execute("INSERT INTO t (s) VALUES (?1)", [v]).unwrap();
        }
    }

    #[test]
    fn a_file_of_the_old_text_order_is_reindexed_once_or_refused_with_its_duplicate() {
        let dir = temp_dir("old-order");
        file_of_the_old_order(&dir, &["É", "b", "Zoë"]);
        let mut e = SqliteEngine.open(&dir).unwrap();
        // Found by the index, in the new order; and the key holds for the folded value.
        assert_eq!(
            rows(e.as_mut(), "SELECT id FROM t WHERE s = 'e'"),
            vec![vec![Cell::Int(1)]]
        );
        assert_eq!(
            exec(e.as_mut(), "INSERT INTO t (s) VALUES ('é')")
                .unwrap_err()
                .code(),
            1062
        );
        let c = Connection::open(dir.join(SQLITE_FILE)).unwrap();
        let version: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, file_format::VERSION);

        let dir = temp_dir("old-order-duplicates");
        file_of_the_old_order(&dir, &["José", "jose"]);
        let refused = SqliteEngine.open(&dir).map(drop).unwrap_err();
        assert_eq!(refused.code(), 1062);
        assert!(refused.message.contains("utf8mb4_general_ci"), "{refused}");
    }

    /// A file made when a `_bin` column had SQLite's `BINARY` collation (no padding), its
    /// text indexes already in today's `mysql_general_ci` order.
    fn file_of_binary_collation(dir: &Path, values: &[&str]) {
        old_file(
            &Connection::open(dir.join(SQLITE_FILE)).unwrap(),
            "CREATE TABLE `t` (`id` INTEGER PRIMARY KEY, `s` TEXT COLLATE BINARY UNIQUE, \
             `d` TEXT DEFAULT 'COLLATE BINARY'); PRAGMA user_version = 1",
            values,
        );
    }

    #[test]
    fn a_bin_column_of_sqlites_binary_collation_gets_mysql_bin_once_or_is_refused() {
        let dir = temp_dir("binary-collation");
        file_of_binary_collation(&dir, &["b", "a", "A"]);
        let mut e = SqliteEngine.open(&dir).unwrap();
        // Trailing spaces ignored, found by the index; case kept.
        assert_eq!(
            rows(e.as_mut(), "SELECT id FROM t WHERE s = 'a  ' ORDER BY id"),
            vec![vec![Cell::Int(2)]]
        );
        assert_eq!(
            exec(e.as_mut(), "INSERT INTO t (s) VALUES ('b ')")
                .unwrap_err()
                .code(),
            1062
        );
        drop(e);
        let c = Connection::open(dir.join(SQLITE_FILE)).unwrap();
        let create = sqlite_catalog::show_create_table(&c, "t").unwrap().unwrap();
        assert!(
            create.contains("`s` text CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
                && create.contains("DEFAULT 'COLLATE BINARY'"),
            "{create}"
        );
        let version: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, file_format::VERSION);

        // A key holding `a` and `a ` (a `utf8mb4_nopad_bin` column, which the old files also
        // wrote as `BINARY`): that table keeps `BINARY`, and the file opens.
        let dir = temp_dir("binary-collation-duplicates");
        file_of_binary_collation(&dir, &["a", "a "]);
        let mut e = SqliteEngine.open(&dir).unwrap();
        assert_eq!(
            rows(e.as_mut(), "SELECT id FROM t WHERE s = 'a'"),
            vec![vec![Cell::Int(1)]]
        );
    }

    /// An old file first named inside a transaction is brought to today's format on a
    /// connection of its own: the transaction goes on, with what it wrote.
    #[test]
    fn an_old_file_attached_inside_a_transaction_leaves_the_transaction_as_it_was() {
        let root = temp_dir("old-attached-in-transaction");
        for name in ["old", "shop"] {
            fs::create_dir(root.join(name)).unwrap();
        }
        file_of_binary_collation(&root.join("old"), &["b", "a"]);
        let mut e = SqliteEngine.open(&root.join("shop")).unwrap();
        exec(e.as_mut(), "CREATE TABLE tx (i INT PRIMARY KEY)").unwrap();
        e.begin().unwrap();
        exec(e.as_mut(), "INSERT INTO tx VALUES (1), (2)").unwrap();
        assert_eq!(
            rows(e.as_mut(), "SELECT id FROM old.t WHERE s = 'a '"),
            vec![vec![Cell::Int(2)]]
        );
        e.commit().unwrap();
        assert_eq!(
            rows(e.as_mut(), "SELECT COUNT(*) FROM tx"),
            vec![vec![Cell::Int(2)]]
        );

        // The transaction's rollback does not undo the file's new format: it was brought up
        // to date on a connection of its own, before it was attached.
        fs::create_dir(root.join("older")).unwrap();
        file_of_the_old_order(&root.join("older"), &["É", "b"]);
        e.begin().unwrap();
        exec(e.as_mut(), "INSERT INTO tx VALUES (3)").unwrap();
        assert_eq!(
            rows(e.as_mut(), "SELECT id FROM older.t WHERE s = 'e'"),
            vec![vec![Cell::Int(1)]]
        );
        e.rollback().unwrap();
        let version: i64 = Connection::open(root.join("older").join(SQLITE_FILE))
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, file_format::VERSION);
        assert_eq!(
            exec(e.as_mut(), "INSERT INTO older.t (s) VALUES ('é')")
                .unwrap_err()
                .code(),
            1062
        );
        fs::remove_dir_all(root).unwrap();
    }

    /// A function's warning is the statement's, as MariaDB words it, and is gone with it.
    #[test]
    fn a_cast_that_truncates_warns_as_mariadb_does() {
        let dir = temp_dir("cast-warnings");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(
            e.as_mut(),
            "SELECT CAST('abc' AS SIGNED), CAST(' 7 ' AS SIGNED), CAST('1e3' AS UNSIGNED), \
             CAST('abc' AS CHAR(2)), CAST('ab' AS CHAR(2))",
        )
        .unwrap();
        let warnings: Vec<(&str, u16, String)> = e
            .take_warnings()
            .into_iter()
            .map(|w| (w.level, w.code, w.message))
            .collect();
        let truncated = |level, what: &str| (level, 1292, format!("Truncated incorrect {what}"));
        assert_eq!(
            warnings,
            [
                truncated("Warning", "INTEGER value: 'abc'"),
                truncated("Note", "INTEGER value: ' 7 '"),
                truncated("Warning", "INTEGER value: '1e3'"),
                truncated("Warning", "CHAR(2) value: 'abc'"),
            ]
        );
        exec(e.as_mut(), "SELECT CAST('7' AS SIGNED)").unwrap();
        assert!(e.take_warnings().is_empty());
    }

    /// A file made when the `ON UPDATE` trigger of a `DATETIME(6)` wrote whole seconds.
    #[test]
    fn an_on_update_trigger_of_whole_seconds_is_made_again_with_its_columns_fraction() {
        let dir = temp_dir("on-update-fraction");
        let c = Connection::open(dir.join(SQLITE_FILE)).unwrap();
        c.execute_batch(
            "CREATE TABLE `t` (`id` INTEGER PRIMARY KEY, `v` INT, `ts` DATETIME(6)); \
             CREATE TRIGGER `t__ts__on_update` AFTER UPDATE ON `t` FOR EACH ROW WHEN \
             NEW.`ts` IS OLD.`ts` AND (NEW.`v` IS NOT OLD.`v`) BEGIN UPDATE `t` SET `ts` = \
             CURRENT_TIMESTAMP WHERE rowid = NEW.rowid; END; \
             INSERT INTO t (id, v) VALUES (1, 1); PRAGMA user_version = 2",
        )
        .unwrap();
        drop(c);
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "UPDATE t SET v = 2").unwrap();
        // `YYYY-MM-DD hh:mm:ss.ffffff`.
        assert_eq!(
            rows(e.as_mut(), "SELECT LENGTH(ts), v FROM t"),
            vec![vec![Cell::Int(26), Cell::Int(2)]]
        );
    }

    #[test]
    fn date_and_datetime_columns_give_date_cells() {
        let dir = temp_dir("dates");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(
            e.as_mut(),
            "CREATE TABLE t (d DATE, dt DATETIME, ts TIMESTAMP NULL, s VARCHAR(20))",
        )
        .unwrap();
        exec(
            e.as_mut(),
            "INSERT INTO t VALUES ('2024-02-29', '1974-05-01 10:30:00', '2001-02-03 04:05:06.5',              '2024-02-29'), ('0000-00-00', NULL, NULL, NULL)",
        )
        .unwrap();
        let Outcome::Rows { rows, .. } = exec(e.as_mut(), "SELECT * FROM t").unwrap() else {
            panic!("expected rows");
        };
        let day = chrono::NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
        let first = chrono::NaiveDate::from_ymd_opt(1974, 5, 1)
            .unwrap()
            .and_hms_opt(10, 30, 0)
            .unwrap();
        let third = chrono::NaiveDate::from_ymd_opt(2001, 2, 3)
            .unwrap()
            .and_hms_milli_opt(4, 5, 6, 500)
            .unwrap();
        assert_eq!(
            rows,
            [
                vec![
                    Cell::Date(day),
                    Cell::DateTime(first),
                    Cell::DateTime(third),
                    Cell::Text("2024-02-29".into())
                ],
                vec![
                    Cell::Text("0000-00-00".into()),
                    Cell::Null,
                    Cell::Null,
                    Cell::Null
                ],
            ]
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn round_trips_rows_through_sqlite_and_reopen() {
        let dir = temp_dir("reopen");
        {
            let mut e = SqliteEngine.open(&dir).unwrap();
            exec(e.as_mut(), "CREATE TABLE t (id INT PRIMARY KEY, name TEXT)").unwrap();
            let out = exec(e.as_mut(), "INSERT INTO t VALUES (1, 'a'), (2, \"b\")").unwrap();
            assert_eq!(
                out,
                Outcome::Done {
                    affected_rows: 2,
                    last_insert_id: 1
                }
            );
        }
        let mut e = SqliteEngine.open(&dir).unwrap();
        let out = exec(e.as_mut(), "SELECT id, name FROM t ORDER BY id").unwrap();
        assert_eq!(
            out,
            Outcome::Rows {
                columns: vec!["id".into(), "name".into()],
                rows: vec![
                    vec![Cell::Int(1), Cell::Text("a".into())],
                    vec![Cell::Int(2), Cell::Text("b".into())],
                ],
                int_widths: vec![Some(IntWidth::Long), None],
                tables: vec!["t".into(), "t".into()],
            }
        );
        assert_eq!(e.table_names().unwrap(), vec!["t".to_owned()]);
    }

    #[test]
    fn reads_mysql_backslash_escapes_so_escaped_quotes_stay_inside_strings() {
        let dir = temp_dir("escape");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (s TEXT)").unwrap();
        // What PyMySQL sends for the value `\' OR 1=1 -- `: under PostgreSQL rules the
        // string would end early and the rest would run as SQL.
        exec(e.as_mut(), r"INSERT INTO t VALUES ('\\\' OR 1=1 -- ')").unwrap();
        exec(e.as_mut(), r"INSERT INTO t VALUES ('O\'Brien')").unwrap();
        let out = exec(e.as_mut(), "SELECT s FROM t").unwrap();
        let Outcome::Rows { rows, .. } = out else {
            panic!("rows expected")
        };
        assert_eq!(rows[0], vec![Cell::Text(r"\' OR 1=1 -- ".into())]);
        assert_eq!(rows[1], vec![Cell::Text("O'Brien".into())]);
    }

    #[test]
    fn binds_placeholders_as_values_not_text() {
        let dir = temp_dir("params");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE `t` (id INT, s TEXT)").unwrap();
        e.execute(
            "INSERT INTO t (id, s) VALUES (?, ?)",
            &[Cell::Int(7), Cell::Text("x'); DROP TABLE t; --".into())],
        )
        .unwrap();
        let out = e
            .execute("SELECT s FROM t WHERE id = ? AND s <> '?'", &[Cell::Int(7)])
            .unwrap();
        let Outcome::Rows { rows, .. } = out else {
            panic!("rows expected")
        };
        assert_eq!(rows, vec![vec![Cell::Text("x'); DROP TABLE t; --".into())]]);
        assert_eq!(
            count_placeholders("SELECT ? , '?', `?` # ?\n, ?").unwrap(),
            2
        );
    }

    #[test]
    fn rolls_back_explicit_transaction() {
        let dir = temp_dir("txn");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (id INT)").unwrap();
        e.begin().unwrap();
        exec(e.as_mut(), "INSERT INTO t VALUES (1)").unwrap();
        e.rollback().unwrap();
        let out = exec(e.as_mut(), "SELECT COUNT(*) FROM t").unwrap();
        let Outcome::Rows { rows, .. } = out else {
            panic!("rows expected")
        };
        assert_eq!(rows, vec![vec![Cell::Int(0)]]);
    }

    #[test]
    fn maps_real_engine_errors_to_mysql_codes() {
        let dir = temp_dir("errors");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (id INT PRIMARY KEY, s TEXT)").unwrap();
        exec(e.as_mut(), "INSERT INTO t VALUES (1, 'a')").unwrap();
        let cases = [
            ("SELEKT 1", 1064),
            ("SELECT * FROM missing", 1146),
            ("INSERT INTO missing VALUES (1)", 1146),
            ("CREATE TABLE t (id INT)", 1050),
            ("INSERT INTO t VALUES (1, 'b')", 1062),
            ("SELECT nope FROM t", 1054),
            ("", 1065),
            ("SELECT 1; SELECT 2", 1064),
            ("SELECT 1 DIV", 1064),
            ("SELECT id FROM t a JOIN t b ON 1", 1052),
            ("INSERT INTO t (id, nope) VALUES (2, 'x')", 1054),
            ("ALTER TABLE t ADD COLUMN s TEXT", 1060),
            ("CREATE INDEX i ON t (s)", 0),
            ("CREATE INDEX i ON t (id)", 1061),
            ("DROP INDEX nope ON t", 1091),
            ("SELECT 1 FROM t WHERE id = (SELECT 1, 2)", 1241),
            ("SELECT 1 UNION SELECT 1, 2", 1222),
            ("SELECT id FROM t WHERE SUM(id) > 0", 1111),
            ("INSERT INTO t VALUES (3, 'c', 'd')", 1136),
        ];
        for (sql, code) in cases {
            if code == 0 {
                exec(e.as_mut(), sql).unwrap();
                continue;
            }
            let err = exec(e.as_mut(), sql).unwrap_err();
            assert_eq!(err.code(), code, "{sql}: {err}");
        }
    }

    #[test]
    fn answers_information_schema_from_the_catalog() {
        let dir = temp_dir("information-schema");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(
            e.as_mut(),
            "CREATE TABLE items (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(40) NOT NULL)",
        )
        .unwrap();
        let snapshot = vec![("shop".to_owned(), e.describe().unwrap())];
        let mut schema =
            information_schema(&snapshot, Some("shop".into()), &SessionFacts::default()).unwrap();
        let out = exec(
            schema.as_mut(),
            "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY, IS_NULLABLE, EXTRA \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
             ORDER BY ORDINAL_POSITION",
        )
        .unwrap();
        let text = |v: &str| Cell::Text(v.into());
        assert_eq!(
            out,
            Outcome::Rows {
                columns: [
                    "TABLE_NAME",
                    "COLUMN_NAME",
                    "COLUMN_TYPE",
                    "COLUMN_KEY",
                    "IS_NULLABLE",
                    "EXTRA"
                ]
                .map(String::from)
                .to_vec(),
                // MySQL 8 shows no display width.
                rows: vec![
                    ["items", "id", "int", "PRI", "NO", "auto_increment"]
                        .map(text)
                        .to_vec(),
                    ["items", "name", "varchar(40)", "", "NO", ""]
                        .map(text)
                        .to_vec(),
                ],
                int_widths: vec![None; 6],
                tables: vec!["COLUMNS".into(); 6],
            }
        );
        let out = exec(
            schema.as_mut(),
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA",
        )
        .unwrap();
        assert!(matches!(out, Outcome::Rows { rows, .. } if rows == vec![vec![text("shop")]]));
        let out = exec(
            schema.as_mut(),
            "SELECT COUNT(*) FROM information_schema.FILES",
        )
        .unwrap();
        assert!(matches!(out, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(0)]]));
    }

    #[test]
    fn a_step_budget_stops_a_long_read_and_refuses_writes_leaving_the_transaction_as_it_was() {
        let dir = temp_dir("budget");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (id INT PRIMARY KEY, v INT)").unwrap();
        e.begin().unwrap();
        exec(
            e.as_mut(),
            "INSERT INTO t WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n \
             WHERE i < 5000) SELECT i, i FROM n",
        )
        .unwrap();
        e.set_step_budget(Some(2000));
        // A point read fits.
        let point = exec(e.as_mut(), "SELECT v FROM t WHERE id = 42").unwrap();
        assert!(matches!(point, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(42)]]));
        assert!(!e.over_budget());
        // A scan of 5,000 rows does not.
        assert!(exec(e.as_mut(), "SELECT MAX(v + 0) FROM t").is_err());
        assert!(e.over_budget());
        // Nor does a write, however small: refused before it runs.
        e.set_step_budget(Some(2000));
        assert!(exec(e.as_mut(), "UPDATE t SET v = 0 WHERE id = 1").is_err());
        assert!(e.over_budget());
        // Unlimited again, the transaction is intact and the stopped scan runs.
        e.set_step_budget(None);
        let max = exec(e.as_mut(), "SELECT MAX(v + 0) FROM t").unwrap();
        assert!(matches!(max, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(5000)]]));
        e.commit().unwrap();
        let count = exec(e.as_mut(), "SELECT COUNT(*) FROM t").unwrap();
        assert!(matches!(count, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(5000)]]));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn found_rows_after_sql_calc_found_rows_counts_past_the_limit() {
        let dir = temp_dir("found-rows");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(
            e.as_mut(),
            "CREATE TABLE t (id INT PRIMARY KEY, tag VARCHAR(10))",
        )
        .unwrap();
        exec(
            e.as_mut(),
            "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'a'), (4, 'a'), (5, 'a')",
        )
        .unwrap();
        let page = e
            .execute(
                "SELECT SQL_CALC_FOUND_ROWS id FROM t WHERE tag = ? ORDER BY id LIMIT ?, ?",
                &[Cell::Text("a".into()), Cell::Int(1), Cell::Int(2)],
            )
            .unwrap();
        assert!(
            matches!(page, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(3)], vec![Cell::Int(4)]])
        );
        let found = exec(e.as_mut(), "SELECT FOUND_ROWS()").unwrap();
        assert!(matches!(found, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(4)]]));
        // Without the modifier, FOUND_ROWS() is the rows sent.
        exec(e.as_mut(), "SELECT id FROM t LIMIT 2").unwrap();
        let found = exec(e.as_mut(), "SELECT FOUND_ROWS()").unwrap();
        assert!(matches!(found, Outcome::Rows { rows, .. } if rows == vec![vec![Cell::Int(2)]]));
        fs::remove_dir_all(dir).unwrap();
    }

    /// The affected rows (and insert id) of the OK packet after `sql`.
    fn done(e: &mut dyn Executor, sql: &str) -> (u64, u64) {
        match exec(e, sql).unwrap() {
            Outcome::Done {
                affected_rows,
                last_insert_id,
            } => (affected_rows, last_insert_id),
            rows @ Outcome::Rows { .. } => panic!("{sql}: {rows:?}"),
        }
    }

    #[test]
    fn replace_and_upserts_count_affected_rows_as_mysql_does() {
        let dir = temp_dir("affected");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(
            e.as_mut(),
            "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, code VARCHAR(5) UNIQUE, n INT)",
        )
        .unwrap();
        assert_eq!(
            done(
                e.as_mut(),
                "INSERT INTO t (code, n) VALUES ('a', 1), ('b', 2)"
            ),
            (2, 1)
        );
        // REPLACE: 1 for a new row, 2 for a row replaced, 3 when it replaced two rows (one by
        // each unique key).
        assert_eq!(
            done(
                e.as_mut(),
                "REPLACE INTO t (id, code, n) VALUES (3, 'c', 3)"
            ),
            (1, 3)
        );
        assert_eq!(
            done(
                e.as_mut(),
                "REPLACE INTO t (id, code, n) VALUES (3, 'c', 4)"
            )
            .0,
            2
        );
        assert_eq!(
            done(
                e.as_mut(),
                "REPLACE INTO t (id, code, n) VALUES (1, 'b', 5)"
            )
            .0,
            3
        );
        // ON DUPLICATE KEY UPDATE: 1 per row inserted, 2 per row changed, 1 per row left as
        // it was (CLIENT_FOUND_ROWS); an update inserts nothing, so reports no insert id.
        let upsert =
            "INSERT INTO t (code, n) VALUES ('x', 9) ON DUPLICATE KEY UPDATE n = VALUES(n)";
        assert_eq!(done(e.as_mut(), upsert), (1, 4));
        let changed =
            "INSERT INTO t (code, n) VALUES ('x', 10) ON DUPLICATE KEY UPDATE n = VALUES(n)";
        assert_eq!(done(e.as_mut(), changed), (2, 0));
        assert_eq!(done(e.as_mut(), changed), (1, 0));
        let two = "INSERT INTO t (code, n) VALUES ('x', 11), ('y', 1) ON DUPLICATE KEY UPDATE n = VALUES(n)";
        assert_eq!(done(e.as_mut(), two).0, 3);
        // The ON UPDATE trigger's own write is not the statement's.
        exec(
            e.as_mut(),
            "CREATE TABLE s (k INT PRIMARY KEY, n INT, \
             at TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)",
        )
        .unwrap();
        let touch = "INSERT INTO s (k, n) VALUES (1, 1) ON DUPLICATE KEY UPDATE n = n + 1";
        assert_eq!(done(e.as_mut(), touch).0, 1);
        assert_eq!(done(e.as_mut(), touch).0, 2);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn results_and_prepared_columns_carry_mysqls_names() {
        let dir = temp_dir("names");
        let mut e = SqliteEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (id INT PRIMARY KEY)").unwrap();
        let sql = "SELECT id, 41+1, 'abc', NOW() + INTERVAL 1 DAY > '2000-01-01' FROM t";
        let names = ["id", "41+1", "abc", "NOW() + INTERVAL 1 DAY > '2000-01-01'"];
        assert!(
            matches!(exec(e.as_mut(), sql).unwrap(), Outcome::Rows { columns, .. } if columns == names)
        );
        assert_eq!(e.result_columns(sql).unwrap(), names);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn any_number_of_other_databases_is_reached_ten_at_a_time() {
        let root = temp_dir("attach");
        for i in 0..14 {
            let dir = root.join(format!("m{i}"));
            fs::create_dir(&dir).unwrap();
            let mut db = SqliteEngine.open(&dir).unwrap();
            exec(db.as_mut(), "CREATE TABLE t (i INT)").unwrap();
            exec(db.as_mut(), &format!("INSERT INTO t VALUES ({i})")).unwrap();
        }
        fs::create_dir(root.join("here")).unwrap();
        let mut e = SqliteEngine.open(&root.join("here")).unwrap();
        let one = |e: &mut dyn Executor, sql: &str| {
            rows(e, sql)
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
        };
        // Fourteen other databases, one after another: the least recently used is detached.
        for i in 0..14 {
            assert_eq!(
                one(e.as_mut(), &format!("SELECT i FROM m{i}.t")),
                Some(Cell::Int(i))
            );
        }
        assert_eq!(one(e.as_mut(), "SELECT i FROM m0.t"), Some(Cell::Int(0)));
        // Inside a transaction, the ones it used stay attached: an eleventh is refused.
        e.begin().unwrap();
        for i in 0..10 {
            one(e.as_mut(), &format!("SELECT i FROM m{i}.t"));
        }
        let err = exec(e.as_mut(), "SELECT i FROM m12.t").unwrap_err();
        assert_eq!(err.code(), 1235, "{err}");
        e.rollback().unwrap();
        assert_eq!(one(e.as_mut(), "SELECT i FROM m12.t"), Some(Cell::Int(12)));
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_name_without_a_database_never_reaches_another_database_attached_before() {
        let root = temp_dir("scope");
        for name in ["crm", "shop"] {
            fs::create_dir(root.join(name)).unwrap();
        }
        let mut crm = SqliteEngine.open(&root.join("crm")).unwrap();
        exec(crm.as_mut(), "CREATE TABLE t (i INT PRIMARY KEY)").unwrap();
        exec(crm.as_mut(), "INSERT INTO t VALUES (1)").unwrap();
        let mut e = SqliteEngine.open(&root.join("shop")).unwrap();
        // `crm` is attached by a statement that names it, and stays attached.
        assert!(matches!(
            exec(e.as_mut(), "SELECT i FROM crm.t").unwrap(),
            Outcome::Rows { rows, .. } if rows == [[Cell::Int(1)]]
        ));
        // `shop` has no `t`: each statement is MySQL's 1146 for `shop.t`, and changes nothing.
        for sql in [
            "SELECT i FROM t",
            "INSERT INTO t VALUES (2)",
            "UPDATE t SET i = 3",
            "DELETE FROM t",
            "DROP TABLE t",
            "ALTER TABLE t ADD COLUMN j INT",
            "CREATE INDEX ti ON t (i)",
        ] {
            let err = exec(e.as_mut(), sql).unwrap_err();
            assert_eq!(
                (err.code(), err.message.as_str()),
                (1146, "Table 'shop.t' doesn't exist"),
                "{sql}"
            );
        }
        // The next statement's own error, not the refusal before it (one the translation
        // refuses, before any database is attached).
        assert_eq!(exec(e.as_mut(), "DELETE FROM t").unwrap_err().code(), 1146);
        assert_eq!(exec(e.as_mut(), "SELECT TOP 1 1").unwrap_err().code(), 1235);
        assert!(matches!(
            exec(e.as_mut(), "DROP TABLE IF EXISTS t").unwrap(),
            Outcome::Done {
                affected_rows: 0,
                ..
            }
        ));
        assert_eq!(e.take_warnings().len(), 1);
        assert_eq!(e.indexes("t").unwrap(), None);
        assert_eq!(e.show_create_table("t").unwrap(), None);
        assert!(matches!(
            exec(e.as_mut(), "SELECT * FROM crm.t").unwrap(),
            Outcome::Rows { columns, rows, .. } if columns == ["i"] && rows == [[Cell::Int(1)]]
        ));
        // One statement that drops `t` and `crm.x`: each table in the database it names.
        exec(crm.as_mut(), "CREATE TABLE x (i INT)").unwrap();
        let err = exec(e.as_mut(), "DROP TABLE t, crm.x").unwrap_err();
        assert_eq!(err.code(), 1146, "{err}");
        exec(e.as_mut(), "DROP TABLE IF EXISTS t, crm.x").unwrap();
        assert!(matches!(
            exec(e.as_mut(), "SELECT i FROM crm.t").unwrap(),
            Outcome::Rows { rows, .. } if rows == [[Cell::Int(1)]]
        ));
        assert_eq!(
            exec(e.as_mut(), "SELECT * FROM crm.x").unwrap_err().code(),
            1146
        );
        // Its own `t`, once it has one, and `crm.t` by name.
        exec(e.as_mut(), "CREATE TABLE t (i INT)").unwrap();
        exec(e.as_mut(), "INSERT INTO t SELECT i + 10 FROM crm.t").unwrap();
        assert!(matches!(
            exec(e.as_mut(), "SELECT i FROM t").unwrap(),
            Outcome::Rows { rows, .. } if rows == [[Cell::Int(11)]]
        ));
        fs::remove_dir_all(root).unwrap();
    }
}
