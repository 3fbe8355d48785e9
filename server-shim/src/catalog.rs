//! The database catalog: one directory per database under
//! `DATA/db/<name>/`, a lock per database that serialises its statements (and explicit
//! transactions), and the storage behind it, opened with an [`Engine`] on first use.
//!
//! Storage-agnostic: it only knows the [`Engine`]/[`Executor`] traits (GlueSQL was replaced
//! by SQLite without a change here).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::engine::{Engine, Executor};
use crate::sql_error::SqlError;

/// The longest database name, as in MySQL.
pub const MAX_DATABASE_NAME_LEN: usize = 64;

/// Whether `name` can be a database name: 1 to 64 of `A-Z a-z 0-9 _ $`, so it is always a
/// plain directory name (no `/`, no `..`, no hidden files).
#[must_use]
pub fn valid_database_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_DATABASE_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
}

/// A database's lock and, inside it, its storage (opened on first use).
pub struct Database {
    name: String,
    dir: PathBuf,
    /// The lock that serialises statements (and explicit transactions) on this database.
    slot: Arc<tokio::sync::Mutex<Slot>>,
    /// Connections for plain reads outside any transaction, which need no lock: SQLite's WAL
    /// gives each a snapshot of what was committed, while the writer goes on
    /// ([`Database::reader`]). At most [`READERS`] at once; idle ones are kept here.
    readers: Mutex<Vec<Box<dyn Executor>>>,
    reader_slots: Arc<tokio::sync::Semaphore>,
    /// How many idle read connections are kept: as many as plain reads run at once
    /// ([`readers_per_database`], read once: it reads `/proc`), and [`SNAPSHOTS_KEPT`] for
    /// transactions' reads (opening a connection costs more than a transaction's reads).
    readers_kept: usize,
    /// The transactions that read on a connection of their own before their first write
    /// (`session::Snapshot`): at most [`SNAPSHOTS`] at once, beside the plain reads' slots,
    /// so an idle transaction never keeps a plain read waiting.
    snapshot_slots: Arc<tokio::sync::Semaphore>,
    /// Dropped: no read connection is opened or kept any more (opening one would create the
    /// database's file again).
    dropped: std::sync::atomic::AtomicBool,
}

/// The most transactions of one database that read before their first write on connections
/// of their own at once.
const SNAPSHOTS: usize = 128;

/// The idle read connections a database keeps for transactions' reads, beside the plain
/// reads' (the rest are closed when given back).
const SNAPSHOTS_KEPT: usize = 8;

/// The most reads a database runs at once, each on its own SQLite connection: one per CPU
/// the process may use (as the runtime's workers), at least two.
fn readers_per_database() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

/// The storage behind a database's lock.
pub enum Slot {
    /// Not opened yet.
    Closed,
    /// Open. (The `std` mutex is never contended, the database lock is held around it; it
    /// only makes the slot `Sync`, which opensrv's connection type requires.)
    Open(Mutex<Box<dyn Executor>>),
    /// Dropped (or the server is shutting down): every use fails with 1049.
    Gone,
}

impl Database {
    /// The database's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock; hold it (with a deadline on the wait) while running statements.
    #[must_use]
    pub fn slot(&self) -> Arc<tokio::sync::Mutex<Slot>> {
        Arc::clone(&self.slot)
    }

    fn new(name: String, dir: PathBuf, slot: Slot) -> Self {
        let readers = readers_per_database();
        let readers_kept = readers + SNAPSHOTS_KEPT;
        Self {
            name,
            dir,
            slot: Arc::new(tokio::sync::Mutex::new(slot)),
            readers: Mutex::new(Vec::new()),
            reader_slots: Arc::new(tokio::sync::Semaphore::new(readers)),
            readers_kept,
            snapshot_slots: Arc::new(tokio::sync::Semaphore::new(SNAPSHOTS)),
            dropped: false.into(),
        }
    }

    /// The permit for one transaction's reads on a connection of its own, if one is free (a
    /// transaction without one takes the database's lock at its first statement).
    #[must_use]
    pub fn snapshot_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.snapshot_slots).try_acquire_owned().ok()
    }

    /// The permit to run one read ([`Self::reader`]); wait for it with a deadline.
    #[must_use]
    pub fn reader_slots(&self) -> Arc<tokio::sync::Semaphore> {
        Arc::clone(&self.reader_slots)
    }

    /// An idle read connection, or a new one opened with `engine`. Blocks (call it on a
    /// blocking thread, holding a permit from [`Self::reader_slots`]); give it back with
    /// [`Self::return_reader`].
    ///
    /// # Errors
    /// [`SqlError`] if the storage cannot be opened (1049 once the database is gone).
    pub fn reader(&self, engine: &dyn Engine) -> Result<Box<dyn Executor>, SqlError> {
        if self.is_dropped() {
            return Err(SqlError::unknown_database(&self.name));
        }
        if let Some(idle) = self.readers().pop() {
            return Ok(idle);
        }
        engine.open(&self.dir)
    }

    /// An idle read connection, if one is open: never blocks (see [`Self::reader`]).
    #[must_use]
    pub fn idle_reader(&self) -> Option<Box<dyn Executor>> {
        if self.is_dropped() {
            return None;
        }
        self.readers().pop()
    }

    /// Keeps a read connection for the next read, unless the database was dropped meanwhile
    /// or as many as plain reads use are idle already (those transactions' reads opened
    /// beside them are closed).
    pub fn return_reader(&self, reader: Box<dyn Executor>) {
        let mut readers = self.readers();
        if !self.is_dropped() && readers.len() < self.readers_kept {
            readers.push(reader);
        }
    }

    fn is_dropped(&self) -> bool {
        self.dropped.load(std::sync::atomic::Ordering::Acquire)
    }

    fn readers(&self) -> std::sync::MutexGuard<'_, Vec<Box<dyn Executor>>> {
        self.readers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Slot {
    /// The executor if the storage is open already: never blocks (see [`Self::executor`]).
    pub fn opened(&mut self) -> Option<&mut dyn Executor> {
        match self {
            Self::Open(e) => Some(e.get_mut().unwrap_or_else(PoisonError::into_inner).as_mut()),
            Self::Closed | Self::Gone => None,
        }
    }

    /// The executor, opening the storage with `engine` on first use. Blocks (call it on a
    /// blocking thread).
    ///
    /// # Errors
    /// 1049 if the database was dropped; [`SqlError`] if the storage cannot be opened.
    pub fn executor(
        &mut self,
        engine: &dyn Engine,
        db: &Database,
    ) -> Result<&mut dyn Executor, SqlError> {
        if matches!(self, Self::Closed) {
            *self = Self::Open(Mutex::new(engine.open(&db.dir)?));
        }
        match self {
            Self::Open(e) => Ok(e.get_mut().unwrap_or_else(PoisonError::into_inner).as_mut()),
            Self::Closed | Self::Gone => Err(SqlError::unknown_database(&db.name)),
        }
    }
}

/// The databases of a data directory: `DATA/db/<name>/`, one storage each.
pub struct Catalog {
    root: PathBuf,
    engine: Arc<dyn Engine>,
    /// Every database known, by name. The map's own lock is held only briefly, never across
    /// I/O on a database.
    databases: Mutex<HashMap<String, Arc<Database>>>,
}

impl Catalog {
    /// Lists the databases under `data_dir/db` (creating that directory when missing). Does
    /// not open any storage: start-up cost does not grow with the data.
    ///
    /// # Errors
    /// An I/O error if the directory cannot be created or listed.
    pub fn open(data_dir: &Path, engine: Arc<dyn Engine>) -> std::io::Result<Self> {
        let root = data_dir.join("db");
        fs::create_dir_all(&root)?;
        let mut databases = HashMap::new();
        for entry in fs::read_dir(&root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_dir() && valid_database_name(&name) {
                databases.insert(
                    name.clone(),
                    Arc::new(Database::new(name, entry.path(), Slot::Closed)),
                );
            }
        }
        Ok(Self {
            root,
            engine,
            databases: Mutex::new(databases),
        })
    }

    /// The storage engine.
    #[must_use]
    pub fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Database>>> {
        self.databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory holding one directory per database.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Database names, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.map().keys().cloned().collect();
        names.sort();
        names
    }

    /// The database called `name`.
    ///
    /// # Errors
    /// 1049 if there is none.
    pub fn get(&self, name: &str) -> Result<Arc<Database>, SqlError> {
        self.map()
            .get(name)
            .cloned()
            .ok_or_else(|| SqlError::unknown_database(name))
    }

    /// Creates a database: its directory and (eagerly, so errors show now) its storage.
    /// Blocks; call it on a blocking thread. Returns `false` if it already existed.
    ///
    /// # Errors
    /// 1102 for a bad name, 1007 if it exists and `if_not_exists` is false, [`SqlError`] on
    /// I/O failure.
    pub fn create(&self, name: &str, if_not_exists: bool) -> Result<bool, SqlError> {
        if !valid_database_name(name) {
            return Err(SqlError::bad_database_name(name));
        }
        let mut map = self.map();
        if map.contains_key(name) {
            return if if_not_exists {
                Ok(false)
            } else {
                Err(SqlError::database_exists(name))
            };
        }
        let dir = self.root.join(name);
        fs::create_dir_all(&dir)
            .map_err(|e| SqlError::internal(&format!("cannot create database: {e}")))?;
        let executor = self.engine.open(&dir)?;
        sync_dir(&self.root);
        map.insert(
            name.to_owned(),
            Arc::new(Database::new(
                name.to_owned(),
                dir,
                Slot::Open(Mutex::new(executor)),
            )),
        );
        Ok(true)
    }

    /// Removes `db` (whose lock the caller holds, as `slot`) from the catalog and deletes its
    /// files. Blocks; call it on a blocking thread.
    ///
    /// # Errors
    /// [`SqlError`] on I/O failure.
    pub fn drop_locked(&self, db: &Database, slot: &mut Slot) -> Result<(), SqlError> {
        *slot = Slot::Gone;
        {
            // Under the pool's lock, so no reader is put back after the pool is emptied.
            let mut readers = db.readers();
            db.dropped.store(true, std::sync::atomic::Ordering::Release);
            readers.clear();
        }
        self.map().remove(&db.name);
        let result = fs::remove_dir_all(&db.dir);
        sync_dir(&self.root);
        result.map_err(|e| SqlError::internal(&format!("cannot remove database files: {e}")))
    }

    /// Every database, for shutdown.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Database>> {
        self.map().values().cloned().collect()
    }
}

/// Makes a directory's entries (a created or removed child) durable.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_database_names_that_are_not_plain_directory_names() {
        for bad in ["", "..", "a/b", ".hidden", "a b", &"x".repeat(65)] {
            assert!(!valid_database_name(bad), "{bad}");
        }
        assert!(valid_database_name("app_db$1"));
    }
}
