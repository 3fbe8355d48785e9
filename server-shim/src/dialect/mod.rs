//! Placeholder until the MySQL-to-SQLite translation lands: parses with the MySQL dialect and
//! prints the statement back.

use sqlparser::ast::Statement;

use crate::sql_error::SqlError;

/// One MySQL statement, translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translation {
    /// SQLite statements to run in order.
    pub statements: Vec<String>,
    /// What it is, for the OK packet and implicit commits.
    pub kind: StatementKind,
}

/// What a statement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// Returns rows.
    Query,
    /// `INSERT`.
    Insert,
    /// `REPLACE`.
    Replace,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// Schema changes.
    Ddl,
    /// Anything else.
    Other,
}

impl StatementKind {
    /// Whether MySQL commits the open transaction before running it.
    #[must_use]
    pub const fn commits_implicitly(self) -> bool {
        matches!(self, Self::Ddl)
    }
}

/// Translates one MySQL statement.
///
/// # Errors
/// 1064 for a syntax error.
pub fn translate(mysql: &str) -> Result<Translation, SqlError> {
    let statement = crate::engine::parse_one(mysql)?;
    let kind = match &statement {
        Statement::Query(_) => StatementKind::Query,
        Statement::Insert(i) if i.replace_into => StatementKind::Replace,
        Statement::Insert(_) => StatementKind::Insert,
        Statement::Update { .. } => StatementKind::Update,
        Statement::Delete(_) => StatementKind::Delete,
        Statement::CreateTable(_)
        | Statement::CreateIndex(_)
        | Statement::CreateView { .. }
        | Statement::Drop { .. }
        | Statement::AlterTable { .. }
        | Statement::Truncate { .. } => StatementKind::Ddl,
        _ => StatementKind::Other,
    };
    Ok(Translation {
        statements: vec![statement.to_string()],
        kind,
    })
}
