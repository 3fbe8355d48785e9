//! The version of a database file's format, kept in its `PRAGMA user_version`, and the steps
//! that bring an older file to today's, once, when it is first opened (a file made before
//! would otherwise be searched in an order it was not built in, rows not found, a `UNIQUE`
//! key not enforced, or written as it was not meant to be):
//! - 1: `mysql_general_ci` weighs every character as MariaDB does (`crate::general_ci`:
//!   accents folded; before, ASCII case only). The file's indexes are rebuilt.
//! - 2: a column declared with a `_bin` collation has `mysql_bin` (`crate::utf8mb4_bin`:
//!   trailing spaces ignored, as MariaDB's `PAD SPACE`), where it had SQLite's `BINARY`. Each
//!   such table's declaration is rewritten in SQLite's catalog (`PRAGMA writable_schema`, as
//!   SQLite's documentation describes for changes that leave the rows as they are) and its
//!   indexes are rebuilt. A table whose `UNIQUE` key would then hold two equal values keeps
//!   `BINARY` (it may have been `utf8mb4_nopad_bin`, which the old files also wrote so), with
//!   a warning in the log.
//! - 3: the `ON UPDATE CURRENT_TIMESTAMP` trigger of a `DATETIME(p)` or `TIMESTAMP(p)` column
//!   writes the fraction of a second its type keeps (it wrote whole seconds). Each is made
//!   again.

use rusqlite::{Connection, ErrorCode};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::column_triggers;
use crate::dialect;
use crate::sql_error::SqlError;

/// Today's version.
pub const VERSION: i64 = 3;

/// Whether the database file `file` is of a format before today's (its `user_version`, read
/// on a connection of its own; a file that cannot be read is not).
#[must_use]
pub fn is_old(file: &std::path::Path) -> bool {
    Connection::open_with_flags(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|c| c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)))
    .is_ok_and(|v| v < VERSION)
}

/// Brings the file attached as `schema` (MySQL's database `database`) to today's format, in a
/// transaction of its own: called when a connection opens it, before anything else runs
/// there (another connection's file is brought up to date on one opened for it, before it is
/// attached: [`is_old`]). Two connections opening the file at once: the second finds it done.
///
/// # Errors
/// A file whose `UNIQUE` text key holds two values `utf8mb4_general_ci` now finds equal
/// (`José` and `jose`, which MariaDB would not have taken): 1062, naming the collation, until
/// one is changed; SQLite's other errors, as `storage_error` makes them.
pub fn bring_up_to_date(
    conn: &Connection,
    schema: &str,
    database: &str,
    storage_error: fn(rusqlite::Error) -> SqlError,
) -> Result<(), SqlError> {
    let version = |conn: &Connection| -> rusqlite::Result<i64> {
        conn.query_row(&format!("PRAGMA \"{schema}\".user_version"), [], |r| {
            r.get(0)
        })
    };
    if version(conn).map_err(storage_error)? >= VERSION {
        return Ok(());
    }
    let mut kept_no_pad = Vec::new();
    let brought = (|| -> rusqlite::Result<Option<i64>> {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let was = version(conn)?;
        if was < VERSION {
            if was < 1 {
                for table in tables(conn, schema)? {
                    conn.execute_batch(&format!("REINDEX {}", qualified(schema, &table)))?;
                }
            }
            if was < 2 {
                kept_no_pad = bin_collation_for_bin_columns(conn, schema)?;
            }
            if was < 3 {
                on_update_triggers_again(conn, schema)?;
            }
            conn.execute_batch(&format!("PRAGMA \"{schema}\".user_version = {VERSION}"))?;
        }
        conn.execute_batch("COMMIT")?;
        Ok((was < VERSION).then_some(was))
    })();
    match brought {
        Ok(Some(was)) => {
            tracing::info!(
                database,
                from = was,
                to = VERSION,
                "database file brought to today's format (text indexes in MariaDB's collation \
                 order: utf8mb4_general_ci folds accents, utf8mb4_bin ignores trailing spaces; \
                 ON UPDATE CURRENT_TIMESTAMP writes fractions of a second)"
            );
            for table in kept_no_pad {
                tracing::warn!(
                    database,
                    table,
                    "a UNIQUE key of this table holds two values that differ only in trailing \
                     spaces: its _bin columns go on comparing trailing spaces (as \
                     utf8mb4_nopad_bin does) until one is changed and the table rebuilt"
                );
            }
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) {
                return Err(SqlError::new(
                    opensrv_mysql::ErrorKind::ER_DUP_ENTRY,
                    format!(
                        "a UNIQUE text key of database {database} holds two values that are \
                         equal as MariaDB compares them (utf8mb4_general_ci folds accents): \
                         change one, with a server-shim before this one ({e})"
                    ),
                ));
            }
            Err(storage_error(e))
        }
    }
}

/// `schema.name`, quoted for SQLite.
fn qualified(schema: &str, name: &str) -> String {
    format!(
        "\"{}\".\"{}\"",
        schema.replace('"', "\"\""),
        name.replace('"', "\"\"")
    )
}

/// The tables of `schema` (SQLite's own left out).
fn tables(conn: &Connection, schema: &str) -> rusqlite::Result<Vec<String>> {
    conn.prepare(&format!(
        "SELECT name FROM \"{schema}\".sqlite_schema WHERE type = 'table' \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ))?
    .query_map([], |r| r.get(0))?
    .collect()
}

/// Step 2: each table and view of `schema` with a column or an expression of SQLite's
/// `BINARY` collation gets [`dialect::BIN`] in its place, one at a time, and a table's
/// indexes are rebuilt. A table whose `UNIQUE` key would then hold two equal values (`a` and
/// `a `, which a column of `utf8mb4_nopad_bin` takes: the old files wrote both as `BINARY`)
/// keeps `BINARY`; those are returned.
fn bin_collation_for_bin_columns(conn: &Connection, schema: &str) -> rusqlite::Result<Vec<String>> {
    let objects: Vec<(String, String, String)> = conn
        .prepare(&format!(
            "SELECT type, name, sql FROM \"{schema}\".sqlite_schema \
             WHERE type IN ('table', 'view') AND sql IS NOT NULL"
        ))?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut kept = Vec::new();
    for (kind, name, sql) in objects {
        let Some(rewritten) = with_bin_collation(&sql) else {
            continue;
        };
        conn.execute_batch("SAVEPOINT bin_collation")?;
        let changed = set_sql(conn, schema, &kind, &name, &rewritten).and_then(|()| {
            if kind == "table" {
                conn.execute_batch(&format!("REINDEX {}", qualified(schema, &name)))
            } else {
                Ok(())
            }
        });
        match changed {
            Ok(()) => conn.execute_batch("RELEASE bin_collation")?,
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                // Back to the catalog as it was, read again.
                conn.execute_batch(
                    "ROLLBACK TO bin_collation; RELEASE bin_collation; \
                     PRAGMA writable_schema = RESET",
                )?;
                kept.push(name);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(kept)
}

/// Writes `sql` as the declaration of `schema`'s `kind` `name` in SQLite's catalog, and has
/// every connection (this one too) read the catalog again.
fn set_sql(
    conn: &Connection,
    schema: &str,
    kind: &str,
    name: &str,
    sql: &str,
) -> rusqlite::Result<()> {
    let schema_version: i64 =
        conn.query_row(&format!("PRAGMA \"{schema}\".schema_version"), [], |r| {
            r.get(0)
        })?;
    conn.execute_batch("PRAGMA writable_schema = ON")?;
    let written = conn
        .execute(
            &format!(
                "UPDATE \"{schema}\".sqlite_schema SET sql = ?1 WHERE type = ?2 AND name = ?3"
            ),
            [sql, kind, name],
        )
        .and_then(|_| {
            // The other connections read the catalog again.
            conn.execute_batch(&format!(
                "PRAGMA \"{schema}\".schema_version = {}",
                schema_version + 1
            ))
        });
    // `RESET`: this one too, before the indexes are rebuilt in their new collation.
    conn.execute_batch("PRAGMA writable_schema = RESET")?;
    written
}

/// Step 3: each `ON UPDATE` trigger of `schema`'s tables made again from its column's type.
fn on_update_triggers_again(conn: &Connection, schema: &str) -> rusqlite::Result<()> {
    let triggers: Vec<(String, String, String)> = conn
        .prepare(&format!(
            "SELECT tbl_name, name, sql FROM \"{schema}\".sqlite_schema \
             WHERE type = 'trigger' AND sql IS NOT NULL"
        ))?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let qualifier = (schema != "main").then_some(schema);
    for (table, name, sql) in &triggers {
        if let Some(column) = column_triggers::ours(table, name, sql).and_then(|o| o.on_update) {
            column_triggers::on_update_again(conn, schema, qualifier, table, name, &column)?;
        }
    }
    Ok(())
}

/// `sql` (a `CREATE TABLE` as SQLite keeps it) with each `COLLATE BINARY` made
/// `COLLATE mysql_bin`; `None` when it has none. Read token by token, so a string or a
/// comment that holds the words is left as it is.
fn with_bin_collation(sql: &str) -> Option<String> {
    let tokens = Tokenizer::new(&SQLiteDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let line_starts: Vec<usize> = core::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    // Byte offset of a 1-based line and character column.
    let offset = |line: u64, column: u64| -> Option<usize> {
        let start = *line_starts.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let skip = usize::try_from(column).ok()?.checked_sub(1)?;
        Some(
            sql.get(start..)?
                .char_indices()
                .nth(skip)
                .map_or(sql.len(), |(i, _)| start + i),
        )
    };
    let mut spans = Vec::new();
    let mut words = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)));
    let mut previous_is_collate = false;
    for t in words.by_ref() {
        if let Token::Word(w) = &t.token {
            if previous_is_collate
                && w.quote_style.is_none()
                && w.value.eq_ignore_ascii_case("BINARY")
            {
                spans.push((
                    offset(t.span.start.line, t.span.start.column)?,
                    offset(t.span.end.line, t.span.end.column)?,
                ));
            }
            previous_is_collate =
                w.quote_style.is_none() && w.value.eq_ignore_ascii_case("COLLATE");
        } else {
            previous_is_collate = false;
        }
    }
    if spans.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (start, end) in spans {
        out.push_str(sql.get(at..start)?);
        out.push_str(dialect::BIN);
        at = end;
    }
    out.push_str(sql.get(at..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::with_bin_collation;

    #[test]
    fn binary_collations_become_mysql_bin_and_nothing_else_changes() {
        assert_eq!(
            with_bin_collation(
                "CREATE TABLE `t` (`a` TEXT COLLATE BINARY UNIQUE,\n  `é` VARCHAR(3) collate binary \
                 DEFAULT 'COLLATE BINARY', -- COLLATE BINARY\n `c` TEXT COLLATE mysql_general_ci)"
            )
            .as_deref(),
            Some(
                "CREATE TABLE `t` (`a` TEXT COLLATE mysql_bin UNIQUE,\n  `é` VARCHAR(3) collate mysql_bin \
                 DEFAULT 'COLLATE BINARY', -- COLLATE BINARY\n `c` TEXT COLLATE mysql_general_ci)"
            )
        );
        assert_eq!(
            with_bin_collation("CREATE TABLE t (a TEXT COLLATE mysql_general_ci, b BINARY)"),
            None
        );
    }
}
