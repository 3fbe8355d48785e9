//! Which other databases a statement may reach.
//!
//! The current database is SQLite's `main`; another one a statement names (`crm.t`) is
//! attached under its name and stays attached for the statements after it. SQLite resolves a
//! table name without a qualifier in `temp`, then `main`, then in every attached database in
//! turn: after `SELECT * FROM crm.t`, a `DROP TABLE t` in `shop` (which has no `t`) would drop
//! `crm.t`, and an `INSERT INTO t` would write there. MySQL looks in the current database
//! alone and answers 1146. An authorizer refuses, when a statement is prepared, every use of a
//! table in an attached database the statement itself did not name, and the refusal reaches
//! the client as MySQL's answer for a table the current database does not have.

use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};

use crate::information_schema::SCHEMA;

/// The attached databases the statement being prepared named, and the table whose use an
/// unqualified name would have taken into another.
#[derive(Debug, Default)]
pub struct DatabaseScope {
    state: Mutex<ScopeState>,
}

#[derive(Debug, Default)]
struct ScopeState {
    /// The databases the running statement names (its qualifiers).
    named: Vec<String>,
    /// The table refused since the statement began, by its name alone.
    refused: Option<String>,
}

impl DatabaseScope {
    /// A scope that names no other database, installed as `conn`'s authorizer.
    pub fn install(conn: &mut Connection) -> rusqlite::Result<Arc<Self>> {
        let scope = Arc::new(Self::default());
        let judge = Arc::clone(&scope);
        conn.authorizer(Some(move |ctx: AuthContext<'_>| judge.authorize(&ctx)))?;
        Ok(scope)
    }

    /// A statement that names `qualifiers` (databases, or table aliases, which no attached
    /// database is called) is about to run.
    pub fn begin(&self, qualifiers: &[String]) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.named.clear();
        state.named.extend_from_slice(qualifiers);
        state.refused = None;
    }

    /// The table the running statement was refused, in a database it did not name: the
    /// statement failed as it was prepared, and the client is to hear that the current
    /// database has no such table (1146).
    pub fn refused(&self) -> Option<String> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refused
            .clone()
    }

    fn authorize(&self, ctx: &AuthContext<'_>) -> Authorization {
        // `ALTER TABLE` names its database in the action (SQLite passes none beside it).
        let database = match ctx.action {
            AuthAction::AlterTable { database_name, .. } => Some(database_name),
            _ => ctx.database_name,
        };
        let Some(database) = database.filter(|d| *d != "main" && *d != "temp") else {
            return Authorization::Allow;
        };
        // SQLite's own tables (`sqlite_schema`, which dropping a table changes first): the
        // check that follows names the table itself.
        let Some(table) = table_used(&ctx.action).filter(|t| !t.starts_with("sqlite_")) else {
            return Authorization::Allow;
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A database's name is compared as MySQL compares it on Linux, with its case;
        // `information_schema`'s without.
        let named =
            |n: &String| n == database || (database == SCHEMA && n.eq_ignore_ascii_case(SCHEMA));
        if state.named.iter().any(named) {
            return Authorization::Allow;
        }
        state.refused.get_or_insert_with(|| table.to_owned());
        Authorization::Deny
    }
}

/// The table an action reads, writes, changes or drops.
fn table_used<'a>(action: &AuthAction<'a>) -> Option<&'a str> {
    match *action {
        AuthAction::Read { table_name, .. }
        | AuthAction::Update { table_name, .. }
        | AuthAction::Insert { table_name }
        | AuthAction::Delete { table_name }
        | AuthAction::DropTable { table_name }
        | AuthAction::DropView {
            view_name: table_name,
        }
        | AuthAction::DropIndex { table_name, .. }
        | AuthAction::DropTrigger { table_name, .. }
        | AuthAction::CreateIndex { table_name, .. }
        | AuthAction::CreateTrigger { table_name, .. }
        | AuthAction::AlterTable { table_name, .. }
        | AuthAction::Analyze { table_name }
        | AuthAction::Reindex {
            index_name: table_name,
        } => Some(table_name),
        _ => None,
    }
}
