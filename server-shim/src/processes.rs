//! The server's connections by id (MySQL's process list), for `KILL [QUERY | CONNECTION] id`
//! and `SHOW PROCESSLIST`.
//!
//! Each connection registers itself when it starts ([`Processes::register`]) and is removed
//! when it ends. A connection running a statement says how to interrupt it
//! ([`Process::running`]); the statement's executor is shared by the database's sessions, so
//! the connection clears that before it lets the database's lock go, and a late `KILL QUERY`
//! never interrupts another session's statement. `KILL` (the connection) interrupts its
//! statement too and cancels its token: the connection's reader then sees the end of the
//! stream, as at shutdown, and the connection ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// Interrupts the statement an executor is running (SQLite's `sqlite3_interrupt`); no effect
/// when none is.
pub type Interrupt = Box<dyn Fn() + Send + Sync>;

/// The bit set in every id a relay greets its clients with; the shim numbers its own
/// connections below it, so a relayed session can take the id its client was greeted with
/// ([`Processes::adopt`]).
pub const RELAY_IDS: u32 = 0x8000_0000;

/// One connection.
pub struct Process {
    /// `CONNECTION_ID()`.
    id: AtomicU32,
    /// The logged-in user (`None` before the login) and the host it logged in from.
    user: Mutex<Option<String>>,
    host: Mutex<String>,
    /// What `SHOW PROCESSLIST` says it is doing.
    activity: Mutex<Activity>,
    /// How to interrupt the statement it runs now.
    running: Mutex<Option<Interrupt>>,
    /// Cancelled by `KILL` (and at shutdown): the connection ends.
    ended: CancellationToken,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("id", &self.id())
            .field("user", &*lock(&self.user))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Process {
    /// `CONNECTION_ID()`.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id.load(Ordering::Relaxed)
    }

    /// Records the login's user (who may kill this connection without admin rights).
    pub fn set_user(&self, user: &str) {
        *lock(&self.user) = Some(user.to_owned());
    }

    /// Whether `user` is this connection's.
    #[must_use]
    pub fn owned_by(&self, user: &str) -> bool {
        lock(&self.user).as_deref() == Some(user)
    }

    /// Records the host the login came from (`SHOW PROCESSLIST`'s `Host`).
    pub fn set_host(&self, host: &str) {
        host.clone_into(&mut lock(&self.host));
    }

    /// The connection runs `statement` on `db` from now (`SHOW PROCESSLIST`: `Query`).
    pub fn begin(&self, statement: &str, db: Option<&str>) {
        *lock(&self.activity) = Activity {
            db: db.map(str::to_owned),
            statement: Some(statement.to_owned()),
            since: Instant::now(),
        };
    }

    /// The connection waits for its next command from now, on `db` (`Sleep`).
    pub fn idle(&self, db: Option<&str>) {
        *lock(&self.activity) = Activity {
            db: db.map(str::to_owned),
            statement: None,
            since: Instant::now(),
        };
    }

    fn row(&self) -> ProcessRow {
        let activity = lock(&self.activity).clone();
        ProcessRow {
            id: self.id(),
            user: lock(&self.user).clone(),
            host: lock(&self.host).clone(),
            db: activity.db,
            statement: activity.statement,
            seconds: activity.since.elapsed().as_secs(),
        }
    }

    /// How to interrupt the statement starting now; `None` once it has ended.
    pub fn running(&self, interrupt: Option<Interrupt>) {
        *lock(&self.running) = interrupt;
    }

    /// `KILL QUERY`: interrupts the running statement, if any (it fails with ERR 1317).
    pub fn kill_query(&self) {
        if let Some(interrupt) = lock(&self.running).as_ref() {
            interrupt();
        }
    }

    /// `KILL`: interrupts the running statement and ends the connection.
    pub fn kill(&self) {
        self.kill_query();
        self.ended.cancel();
    }

    /// Cancelled when the connection is to end (`KILL`, or the server's shutdown).
    #[must_use]
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }
}

/// What a connection is doing, as `SHOW PROCESSLIST` shows it.
#[derive(Debug, Clone)]
struct Activity {
    /// Its current database.
    db: Option<String>,
    /// The statement it runs; `None` between statements (MySQL's `Sleep`).
    statement: Option<String>,
    /// Since when it has been doing that (`Time`).
    since: Instant,
}

/// One row of `SHOW PROCESSLIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRow {
    pub id: u32,
    /// `None` before its login (MySQL's `unauthenticated user`).
    pub user: Option<String>,
    pub host: String,
    pub db: Option<String>,
    /// The statement it runs, `None` while it sleeps.
    pub statement: Option<String>,
    /// Whole seconds in that state.
    pub seconds: u64,
}

/// `statement` as `SHOW PROCESSLIST` shows it: one that may carry a password (`IDENTIFIED
/// BY`, `PASSWORD`) with every quoted string in it shown as `'<secret>'`, as MySQL 8 hides
/// them; any other as it is.
#[must_use]
pub fn without_secrets(statement: &str) -> String {
    let lower = statement.to_ascii_lowercase();
    if !(lower.contains("identified") || lower.contains("password")) {
        return statement.to_owned();
    }
    let mut out = String::with_capacity(statement.len());
    let mut chars = statement.chars();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            out.push(c);
            continue;
        }
        // Skipped to its closing quote: a backslash escapes the next character, a doubled
        // quote stands for one (an unclosed string runs to the end).
        loop {
            match chars.next() {
                None => break,
                Some('\\') => {
                    chars.next();
                }
                Some(d) if d == c => {
                    if chars.clone().next() == Some(c) {
                        chars.next();
                    } else {
                        break;
                    }
                }
                Some(_) => {}
            }
        }
        out.push_str("'<secret>'");
    }
    out
}

/// Every open connection, by id.
#[derive(Debug, Default)]
pub struct Processes {
    by_id: Mutex<HashMap<u32, Arc<Process>>>,
}

impl Processes {
    /// Registers connection `id`, ended with `shutdown` too. It is removed when the returned
    /// [`Registered`] drops.
    pub fn register(self: &Arc<Self>, id: u32, shutdown: &CancellationToken) -> Registered {
        let process = Arc::new(Process {
            id: AtomicU32::new(id),
            user: Mutex::new(None),
            host: Mutex::new(String::new()),
            activity: Mutex::new(Activity {
                db: None,
                statement: None,
                since: Instant::now(),
            }),
            running: Mutex::new(None),
            ended: shutdown.child_token(),
        });
        lock(&self.by_id).insert(id, Arc::clone(&process));
        Registered {
            processes: Arc::clone(self),
            process,
        }
    }

    /// Connection `id`, if open.
    #[must_use]
    pub fn get(&self, id: u64) -> Option<Arc<Process>> {
        let id = u32::try_from(id).ok()?;
        lock(&self.by_id).get(&id).cloned()
    }

    /// A relayed session takes the id `id` its client was greeted with by the relay (in
    /// [`RELAY_IDS`]' half), unless a connection has it already: `false` then, and it keeps
    /// its own.
    pub fn adopt(&self, process: &Arc<Process>, id: u32) -> bool {
        let mut by_id = lock(&self.by_id);
        if id & RELAY_IDS == 0 || by_id.contains_key(&id) {
            return false;
        }
        by_id.remove(&process.id());
        process.id.store(id, Ordering::Relaxed);
        by_id.insert(id, Arc::clone(process));
        true
    }

    /// Every open connection's row, by id; only `user`'s when given (an account without
    /// admin rights sees its own connections, as MySQL without the PROCESS privilege).
    #[must_use]
    pub fn list(&self, user: Option<&str>) -> Vec<ProcessRow> {
        let mut rows: Vec<ProcessRow> = lock(&self.by_id)
            .values()
            .map(|p| p.row())
            .filter(|r| user.is_none_or(|u| r.user.as_deref() == Some(u)))
            .collect();
        rows.sort_by_key(|r| r.id);
        rows
    }

    /// Whether connection `id` is open.
    #[must_use]
    pub fn contains(&self, id: u32) -> bool {
        lock(&self.by_id).contains_key(&id)
    }
}

/// A connection's place in [`Processes`], for as long as it lives.
#[derive(Debug)]
pub struct Registered {
    processes: Arc<Processes>,
    process: Arc<Process>,
}

impl Registered {
    /// The connection.
    #[must_use]
    pub fn process(&self) -> &Arc<Process> {
        &self.process
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut by_id = lock(&self.processes.by_id);
        let id = self.process.id();
        if by_id
            .get(&id)
            .is_some_and(|p| Arc::ptr_eq(p, &self.process))
        {
            by_id.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn statements_that_may_carry_a_password_hide_their_strings() {
        assert_eq!(
            without_secrets("CREATE USER 'zz1'@'%' IDENTIFIED BY 'S3cret''Pw\\'1'"),
            "CREATE USER '<secret>'@'<secret>' IDENTIFIED BY '<secret>'"
        );
        assert_eq!(
            without_secrets("SET PASSWORD FOR u = \"pw\""),
            "SET PASSWORD FOR u = '<secret>'"
        );
        assert_eq!(without_secrets("SELECT 'a'"), "SELECT 'a'");
        assert_eq!(
            without_secrets("ALTER USER u IDENTIFIED BY 'open"),
            "ALTER USER u IDENTIFIED BY '<secret>'"
        );
    }

    #[test]
    fn kills_reach_the_running_statement_and_the_connection_and_end_with_it() {
        let processes = Arc::new(Processes::default());
        let shutdown = CancellationToken::new();
        let registered = processes.register(7, &shutdown);
        let process = processes.get(7).unwrap();
        process.set_user("app");
        assert!(process.owned_by("app") && !process.owned_by("root"));
        let interrupts = Arc::new(AtomicUsize::new(0));
        // Idle: nothing to interrupt.
        process.kill_query();
        let counted = Arc::clone(&interrupts);
        process.running(Some(Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })));
        process.kill_query();
        assert_eq!(interrupts.load(Ordering::SeqCst), 1);
        assert!(!process.ended().is_cancelled());
        process.kill();
        assert_eq!(interrupts.load(Ordering::SeqCst), 2);
        assert!(process.ended().is_cancelled());
        // A statement that ended is not interrupted by a late KILL QUERY.
        process.running(None);
        process.kill_query();
        assert_eq!(interrupts.load(Ordering::SeqCst), 2);
        drop(registered);
        assert!(processes.get(7).is_none());
        assert!(processes.get(u64::from(u32::MAX) + 1).is_none());
        // A relayed session takes its client's id, once free and in the relay's half.
        let relayed = processes.register(9, &shutdown);
        let other = processes.register(10, &shutdown);
        assert!(!processes.adopt(relayed.process(), 11), "not a relay's id");
        assert!(processes.adopt(relayed.process(), RELAY_IDS | 5));
        assert_eq!(relayed.process().id(), RELAY_IDS | 5);
        assert!(processes.get(9).is_none());
        assert!(processes.get(u64::from(RELAY_IDS | 5)).is_some());
        assert!(!processes.adopt(other.process(), RELAY_IDS | 5), "taken");
        assert_eq!(other.process().id(), 10);
        drop(relayed);
        assert!(processes.get(u64::from(RELAY_IDS | 5)).is_none());
        drop(other);
        // Shutdown ends every connection.
        let other = processes.register(8, &shutdown);
        shutdown.cancel();
        assert!(other.process().ended().is_cancelled());
    }
}
