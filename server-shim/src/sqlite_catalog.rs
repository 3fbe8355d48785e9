//! What MySQL tools read about a table, answered from SQLite's own catalog
//! (`pragma_table_info`, `pragma_index_list`, `sqlite_schema`): `SHOW CREATE TABLE` rendered
//! in MySQL's syntax, and the index columns `SHOW INDEX` lists.
//!
//! Indexes that MySQL declares inside `CREATE TABLE` (`KEY name (...)`) become separate
//! SQLite indexes named `<table>__<name>`, since SQLite's index names are per database and
//! MySQL's per table; the prefix is removed here again.

use rusqlite::Connection;

use crate::engine::{ColumnMeta, ForeignKeyMeta, IndexColumn, IndexMeta, TableMeta};

/// One column as SQLite's catalog has it.
struct Column {
    name: String,
    decl_type: String,
    not_null: bool,
    default: Option<String>,
    /// 1-based position in the primary key, 0 when not part of it.
    pk: i64,
    /// Its MySQL collation, for a text column.
    collation: &'static str,
}

/// One index and its columns, in order.
struct Index {
    name: String,
    unique: bool,
    /// `pk` for the primary key's own index, `u` for a UNIQUE constraint, `c` for CREATE INDEX.
    origin: String,
    columns: Vec<String>,
}

/// `table`'s columns in `schema` (`main`, or `temp`: never an attached database's).
fn columns(conn: &Connection, schema: &str, table: &str) -> rusqlite::Result<Vec<Column>> {
    let mut stmt = conn.prepare(
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1, ?2) ORDER BY cid",
    )?;
    stmt.query_map([table, schema], |r| {
        let name: String = r.get(0)?;
        // A view's columns have none (SQLite refuses to say).
        let collation = conn
            .column_metadata(Some(schema), table, name.as_str())
            .ok()
            .and_then(|(_, collation, ..)| collation);
        Ok(Column {
            collation: crate::dialect::mysql_collation(
                &collation
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            name,
            decl_type: r.get(1)?,
            not_null: r.get::<_, i64>(2)? != 0,
            default: r.get(3)?,
            pk: r.get(4)?,
        })
    })?
    .collect()
}

fn indexes(conn: &Connection, schema: &str, table: &str) -> rusqlite::Result<Vec<Index>> {
    let mut list = conn.prepare(
        "SELECT name, \"unique\", origin FROM pragma_index_list(?1, ?2) ORDER BY seq DESC",
    )?;
    let heads: Vec<(String, bool, String)> = list
        .query_map([table, schema], |r| {
            Ok((r.get(0)?, r.get::<_, i64>(1)? != 0, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut info = conn.prepare("SELECT name FROM pragma_index_info(?1, ?2) ORDER BY seqno")?;
    heads
        .into_iter()
        .map(|(name, unique, origin)| {
            let columns = info
                .query_map([name.as_str(), schema], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(Index {
                name,
                unique,
                origin,
                columns,
            })
        })
        .collect()
}

/// One `FOREIGN KEY` of a table.
struct ForeignKey {
    /// As declared (`CONSTRAINT name FOREIGN KEY`), or as MySQL names an unnamed one
    /// (`<table>_ibfk_<n>`, counting the unnamed ones in declaration order).
    name: String,
    columns: Vec<String>,
    parent: String,
    /// Empty when the key names no parent columns (SQLite then means the parent's primary key).
    parent_columns: Vec<String>,
    on_delete: String,
    on_update: String,
}

/// `table`'s foreign keys in declaration order (SQLite numbers them last first).
fn foreign_keys(conn: &Connection, table: &str) -> rusqlite::Result<Vec<ForeignKey>> {
    let schema = "main";
    let mut stmt = conn.prepare(
        "SELECT id, \"table\", \"from\", \"to\", on_update, on_delete \
         FROM pragma_foreign_key_list(?1, ?2) ORDER BY id DESC, seq",
    )?;
    let rows: Vec<(i64, String, String, Option<String>, String, String)> = stmt
        .query_map([table, schema], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut keys: Vec<(i64, ForeignKey)> = Vec::new();
    for (id, parent, from, to, on_update, on_delete) in rows {
        if keys.last().is_none_or(|(last, _)| *last != id) {
            keys.push((
                id,
                ForeignKey {
                    name: String::new(),
                    columns: Vec::new(),
                    parent,
                    parent_columns: Vec::new(),
                    on_delete,
                    on_update,
                },
            ));
        }
        if let Some((_, key)) = keys.last_mut() {
            key.columns.push(from);
            key.parent_columns.extend(to);
        }
    }
    let mut keys: Vec<ForeignKey> = keys.into_iter().map(|(_, k)| k).collect();
    let sql: String = conn
        .query_row(
            "SELECT coalesce(sql, '') FROM sqlite_schema WHERE name = ?1",
            [table],
            |r| r.get(0),
        )
        .unwrap_or_default();
    let declared = declared_foreign_keys(&sql);
    // InnoDB numbers the unnamed keys only.
    let mut unnamed = 0;
    for key in &mut keys {
        let columns = key.columns.join(",");
        let found = declared
            .iter()
            .find(|d| d.columns.eq_ignore_ascii_case(&columns));
        key.name = match found.and_then(|d| d.name.clone()) {
            Some(name) => name,
            None => {
                unnamed += 1;
                format!("{table}_ibfk_{unnamed}")
            }
        };
        key.on_update = mysql_rule(&key.on_update, found.is_some_and(|d| d.update_no_action));
        key.on_delete = mysql_rule(&key.on_delete, found.is_some_and(|d| d.delete_no_action));
    }
    for key in &mut keys {
        if key.parent_columns.is_empty() {
            key.parent_columns = primary_key(&columns(conn, schema, &key.parent)?)
                .into_iter()
                .map(str::to_owned)
                .collect();
        }
    }
    Ok(keys)
}

/// A foreign key's line in `SHOW CREATE TABLE`. SQLite keeps no constraint names, so the
/// key gets the name InnoDB generates, `<table>_ibfk_<n>`; the referential actions are
/// printed unless they are the default (`NO ACTION`, which MySQL treats as `RESTRICT`).
fn foreign_key_line(key: &ForeignKey) -> String {
    let mut line = format!(
        "  CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({})",
        quote(&key.name),
        quoted_list(&key.columns),
        quote(&key.parent),
        quoted_list(&key.parent_columns)
    );
    for (what, action) in [("DELETE", &key.on_delete), ("UPDATE", &key.on_update)] {
        if !action.eq_ignore_ascii_case("RESTRICT") {
            line.push_str(&format!(" ON {what} {}", action.to_ascii_uppercase()));
        }
    }
    line
}

/// The name MySQL knows an index by.
fn mysql_index_name(table: &str, index: &Index) -> String {
    let prefix = format!("{table}__");
    match index.name.strip_prefix(&prefix) {
        Some(name) => name.to_owned(),
        // SQLite's own name for a UNIQUE constraint; MySQL names it after its first column.
        None if index.name.starts_with("sqlite_autoindex_") => {
            index.columns.first().cloned().unwrap_or_default()
        }
        None => index.name.clone(),
    }
}

/// The primary key's columns, in key order.
fn primary_key(columns: &[Column]) -> Vec<&str> {
    let mut pk: Vec<&Column> = columns.iter().filter(|c| c.pk > 0).collect();
    pk.sort_by_key(|c| c.pk);
    pk.into_iter().map(|c| c.name.as_str()).collect()
}

fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn quoted_list(names: &[impl AsRef<str>]) -> String {
    names
        .iter()
        .map(|n| quote(n.as_ref()))
        .collect::<Vec<_>>()
        .join(",")
}

/// `table`'s `CREATE TABLE` in MySQL's syntax, or `None` if there is no such table.
///
/// # Errors
/// SQLite's, if the catalog cannot be read.
pub fn show_create_table(conn: &Connection, table: &str) -> rusqlite::Result<Option<String>> {
    let sql: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    let Some(sql) = sql else {
        return Ok(None);
    };
    let autoincrement = sql.to_ascii_uppercase().contains("AUTOINCREMENT");
    let columns = columns(conn, "main", table)?;
    let enums = enum_types(&sql);
    let pk = primary_key(&columns);
    let on_update = on_update_columns(conn, table)?;
    let mut lines = Vec::new();
    for c in &columns {
        let rowid_alias = autoincrement && pk.len() == 1 && c.pk == 1;
        let decl = if let Some((_, t)) = enums.iter().find(|(n, _)| *n == c.name) {
            t.clone()
        } else if c.decl_type.is_empty() {
            "text".to_owned()
        } else if rowid_alias && c.decl_type.eq_ignore_ascii_case("integer") {
            "int(11)".to_owned()
        } else {
            mysql_type(&c.decl_type)
        };
        let mut line = format!("  {} {decl}", quote(&c.name));
        if c.collation != "utf8mb4_general_ci" {
            // MariaDB names a column's collation where it is not the table's.
            line.push_str(&format!(" CHARACTER SET utf8mb4 COLLATE {}", c.collation));
        }
        if c.not_null || c.pk > 0 {
            line.push_str(" NOT NULL");
        }
        match &c.default {
            Some(d) => {
                line.push_str(" DEFAULT ");
                line.push_str(&mysql_default(d));
            }
            None if !c.not_null && c.pk == 0 => line.push_str(" DEFAULT NULL"),
            None => {}
        }
        if on_update.contains(&c.name) {
            line.push_str(&format!(" ON UPDATE {}", on_update_clause(&c.decl_type)));
        }
        if rowid_alias {
            line.push_str(" AUTO_INCREMENT");
        }
        lines.push(line);
    }
    if !pk.is_empty() {
        lines.push(format!("  PRIMARY KEY ({})", quoted_list(&pk)));
    }
    for index in indexes(conn, "main", table)?
        .iter()
        .filter(|i| i.origin != "pk")
    {
        let kind = if index.unique { "UNIQUE KEY" } else { "KEY" };
        lines.push(format!(
            "  {kind} {} ({})",
            quote(&mysql_index_name(table, index)),
            quoted_list(&index.columns)
        ));
    }
    for key in &foreign_keys(conn, table)? {
        lines.push(foreign_key_line(key));
    }
    Ok(Some(format!(
        "CREATE TABLE {} (\n{}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        quote(table),
        lines.join(",\n")
    )))
}

/// The columns of `table`'s indexes, primary key first, or `None` if there is no such table.
///
/// # Errors
/// SQLite's, if the catalog cannot be read.
pub fn index_columns(conn: &Connection, table: &str) -> rusqlite::Result<Option<Vec<IndexColumn>>> {
    // A temporary table hides the database's own of that name, as in MySQL.
    let mut schema = "temp";
    let mut columns = self::columns(conn, schema, table)?;
    if columns.is_empty() {
        schema = "main";
        columns = self::columns(conn, schema, table)?;
    }
    if columns.is_empty() {
        return Ok(None);
    }
    let mut out: Vec<IndexColumn> = primary_key(&columns)
        .into_iter()
        .zip(1..)
        .map(|(c, seq)| IndexColumn {
            key_name: "PRIMARY".into(),
            non_unique: false,
            seq_in_index: seq,
            column: c.to_owned(),
        })
        .collect();
    for index in indexes(conn, schema, table)?
        .iter()
        .filter(|i| i.origin != "pk")
    {
        let name = mysql_index_name(table, index);
        out.extend(index.columns.iter().zip(1..).map(|(c, seq)| IndexColumn {
            key_name: name.clone(),
            non_unique: !index.unique,
            seq_in_index: seq,
            column: c.clone(),
        }));
    }
    Ok(Some(out))
}

/// `table`'s foreign keys for `information_schema`, in MySQL's words.
fn foreign_key_metas(conn: &Connection, table: &str) -> rusqlite::Result<Vec<ForeignKeyMeta>> {
    Ok(foreign_keys(conn, table)?
        .into_iter()
        .map(|key| ForeignKeyMeta {
            name: key.name,
            columns: key.columns,
            referenced_table: key.parent,
            referenced_columns: key.parent_columns,
            update_rule: key.on_update,
            delete_rule: key.on_delete,
        })
        .collect())
}

/// A declared type as MySQL writes it: lower case, the arguments after the type's name
/// (`decimal(7,2) unsigned`; SQLite's grammar wants them last, `DECIMAL UNSIGNED(7,2)`).
fn mysql_type(decl_type: &str) -> String {
    let lower = decl_type.to_lowercase();
    match lower.split_once('(') {
        Some((words, rest)) if words.trim().contains(' ') => {
            let mut words = words.split_whitespace();
            let name = words.next().unwrap_or_default();
            let after: Vec<&str> = words.collect();
            format!("{name}({rest} {}", after.join(" "))
        }
        _ => lower,
    }
}

/// What an `ON UPDATE` column of declared type `decl_type` is set to, as MariaDB writes it:
/// the trigger's precision is the column's (`datetime(6)`).
fn on_update_clause(decl_type: &str) -> String {
    let p = decl_type
        .split_once('(')
        .and_then(|(_, p)| p.strip_suffix(')'))
        .unwrap_or_default();
    format!("current_timestamp({p})")
}

/// The columns of `table` an `ON UPDATE CURRENT_TIMESTAMP` trigger sets (the dialect names
/// each `<table>__<column>__on_update`).
fn on_update_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let prefix = format!("{table}__");
    let mut stmt =
        conn.prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?1")?;
    let names: Vec<String> = stmt
        .query_map([table], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(names
        .iter()
        .filter_map(|n| n.strip_prefix(&prefix)?.strip_suffix("__on_update"))
        .map(str::to_owned)
        .collect())
}

/// A column default as SQLite keeps it, in MySQL's words: `CURRENT_TIMESTAMP` is
/// `current_timestamp()`, the dialect's `(mysql_now(6))` is `current_timestamp(6)`; the rest
/// as it is.
fn mysql_default(d: &str) -> String {
    if d.eq_ignore_ascii_case("current_timestamp") {
        return "current_timestamp()".to_owned();
    }
    // SQLite gives the expression with or without its parentheses.
    let inner = d
        .strip_prefix('(')
        .and_then(|e| e.strip_suffix(')'))
        .unwrap_or(d);
    let precision = inner
        .strip_prefix(&format!("{}(", crate::dialect::NOW_FN))
        .and_then(|rest| rest.strip_suffix(')'))
        .filter(|p| p.len() == 1 && p.bytes().all(|b| b.is_ascii_digit()));
    match precision {
        Some(p) => format!("current_timestamp({p})"),
        None => d.to_owned(),
    }
}

/// Each `ENUM` column's MySQL type (`enum('free','pro')`), by column name, from the checks the
/// dialect writes for them in a `CREATE TABLE` text (`CONSTRAINT \`enum\` CHECK (\`tier\` IN
/// ('free', 'pro'))`).
fn enum_types(sql: &str) -> Vec<(String, String)> {
    const MARK: &str = "CONSTRAINT `enum` CHECK (";
    let mut out = Vec::new();
    for (at, _) in sql.match_indices(MARK) {
        let Some(rest) = sql.get(at + MARK.len()..) else {
            continue;
        };
        let Some(in_at) = rest.find(" IN (") else {
            continue;
        };
        let column = rest
            .get(..in_at)
            .unwrap_or_default()
            .trim()
            .trim_matches(['`', '"'])
            .to_owned();
        let mut values = Vec::new();
        let mut chars = rest
            .get(in_at + " IN (".len()..)
            .unwrap_or_default()
            .chars();
        let mut value: Option<String> = None;
        while let Some(c) = chars.next() {
            match (&mut value, c) {
                (None, '\'') => value = Some(String::new()),
                (None, ')') => break,
                (None, _) => {}
                (Some(v), '\'') => {
                    // A doubled quote is one quote; a single one ends the value.
                    let mut peek = chars.clone();
                    if peek.next() == Some('\'') {
                        v.push('\'');
                        chars.next();
                    } else {
                        values.push(core::mem::take(v));
                        value = None;
                    }
                }
                (Some(v), c) => v.push(c),
            }
        }
        let list: Vec<String> = values
            .iter()
            .map(|v| format!("'{}'", v.replace('\'', "''")))
            .collect();
        out.push((column, format!("enum({})", list.join(","))));
    }
    out
}

/// A table-level `FOREIGN KEY` as its `CREATE TABLE` text declares it.
struct DeclaredKey {
    /// Its columns, unquoted, joined by `,`.
    columns: String,
    /// `CONSTRAINT name`, if given.
    name: Option<String>,
    /// Whether it says `ON UPDATE NO ACTION` (SQLite lists a key without one the same).
    update_no_action: bool,
    /// Whether it says `ON DELETE NO ACTION`.
    delete_no_action: bool,
}

/// Each table-level `[CONSTRAINT name] FOREIGN KEY (columns) REFERENCES ...` of a `CREATE
/// TABLE` text, in order.
fn declared_foreign_keys(sql: &str) -> Vec<DeclaredKey> {
    let unquote = |s: &str| s.trim().trim_matches(['`', '"', '[', ']']).to_owned();
    let upper = sql.to_ascii_uppercase();
    let starts: Vec<usize> = upper
        .match_indices("FOREIGN KEY")
        .map(|(at, _)| at)
        .collect();
    let mut out = Vec::new();
    for (n, &at) in starts.iter().enumerate() {
        let clause_end = starts.get(n + 1).copied().unwrap_or(sql.len());
        let (Some(clause), Some(clause_upper)) =
            (sql.get(at..clause_end), upper.get(at..clause_end))
        else {
            continue;
        };
        let (Some(open), Some(close)) = (clause.find('('), clause.find(')')) else {
            continue;
        };
        let columns = clause
            .get(open + 1..close)
            .unwrap_or_default()
            .split(',')
            .map(unquote)
            .collect::<Vec<_>>()
            .join(",");
        // `CONSTRAINT name ` right before it.
        let before = upper.get(..at).unwrap_or_default().trim_end();
        let name = before.rfind("CONSTRAINT ").and_then(|c| {
            let name = unquote(sql.get(c + "CONSTRAINT ".len()..at).unwrap_or_default());
            (!name.is_empty() && !name.contains(char::is_whitespace)).then_some(name)
        });
        out.push(DeclaredKey {
            columns,
            name,
            update_no_action: clause_upper.contains("ON UPDATE NO ACTION"),
            delete_no_action: clause_upper.contains("ON DELETE NO ACTION"),
        });
    }
    out
}

/// A referential action SQLite lists in MySQL's words: `NO ACTION` is what SQLite lists for a
/// key declared without one, which MySQL calls `RESTRICT`, unless `NO ACTION` was declared.
fn mysql_rule(sqlite: &str, declared_no_action: bool) -> String {
    match sqlite {
        "NO ACTION" if declared_no_action => "NO ACTION".to_owned(),
        "NO ACTION" | "" => "RESTRICT".to_owned(),
        other => other.to_owned(),
    }
}

/// Every table and view of the database `conn` holds, for `information_schema`.
///
/// # Errors
/// SQLite's, if the catalog cannot be read.
pub fn describe(conn: &Connection) -> rusqlite::Result<Vec<TableMeta>> {
    let mut stmt = conn.prepare(
        "SELECT name, type = 'view', coalesce(sql, '') FROM sqlite_schema \
         WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let heads: Vec<(String, bool, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    heads
        .into_iter()
        .map(|(name, view, sql)| {
            let autoincrement = sql.to_ascii_uppercase().contains("AUTOINCREMENT");
            let enums = enum_types(&sql);
            let on_update = on_update_columns(conn, &name)?;
            let cols = columns(conn, "main", &name)?;
            let pk = primary_key(&cols)
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            let mut indexes = Vec::new();
            if !pk.is_empty() {
                indexes.push(IndexMeta {
                    name: "PRIMARY".into(),
                    unique: true,
                    columns: pk.clone(),
                });
            }
            for index in self::indexes(conn, "main", &name)?
                .iter()
                .filter(|i| i.origin != "pk")
            {
                indexes.push(IndexMeta {
                    name: mysql_index_name(&name, index),
                    unique: index.unique,
                    columns: index.columns.clone(),
                });
            }
            // MySQL's COLUMN_KEY: from the indexes that start with the column.
            let first_of = |column: &str| {
                let leading: Vec<&IndexMeta> = indexes
                    .iter()
                    .filter(|i| i.columns.first().map(String::as_str) == Some(column))
                    .collect();
                (
                    leading.iter().any(|i| i.name == "PRIMARY"),
                    leading.iter().any(|i| i.unique && i.columns.len() == 1),
                    !leading.is_empty(),
                )
            };
            let columns = cols
                .iter()
                .map(|c| {
                    let rowid_alias = autoincrement && pk.len() == 1 && c.pk == 1;
                    let (primary, unique, indexed) = first_of(&c.name);
                    ColumnMeta {
                        name: c.name.clone(),
                        column_type: if let Some((_, t)) = enums.iter().find(|(n, _)| *n == c.name)
                        {
                            t.clone()
                        } else if rowid_alias && c.decl_type.eq_ignore_ascii_case("integer") {
                            "int(11)".into()
                        } else if c.decl_type.is_empty() {
                            "text".into()
                        } else {
                            mysql_type(&c.decl_type)
                        },
                        not_null: c.not_null || c.pk > 0,
                        collation: c.collation,
                        default: c.default.as_deref().map(mysql_default),
                        key: if primary {
                            "PRI"
                        } else if unique {
                            "UNI"
                        } else if indexed {
                            "MUL"
                        } else {
                            ""
                        },
                        extra: if rowid_alias {
                            "auto_increment".to_owned()
                        } else if on_update.contains(&c.name) {
                            format!("on update {}", on_update_clause(&c.decl_type))
                        } else {
                            String::new()
                        },
                    }
                })
                .collect();
            let foreign_keys = foreign_key_metas(conn, &name)?;
            Ok(TableMeta {
                name,
                view,
                columns,
                indexes,
                foreign_keys,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_are_written_as_mysql_writes_them() {
        assert_eq!(mysql_type("DECIMAL UNSIGNED(7,2)"), "decimal(7,2) unsigned");
        assert_eq!(mysql_type("FLOAT UNSIGNED(7,2)"), "float(7,2) unsigned");
        assert_eq!(mysql_type("VARCHAR(40)"), "varchar(40)");
        assert_eq!(mysql_type("INT UNSIGNED"), "int unsigned");
    }

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE items (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                name VARCHAR(40) NOT NULL DEFAULT '' COLLATE NOCASE,
                price DECIMAL(10,2),
                created DATETIME DEFAULT CURRENT_TIMESTAMP,
                UNIQUE (name)
            );
            CREATE INDEX items__price_idx ON items (price);",
        )
        .unwrap();
        c
    }

    /// A view's columns have no collation: the catalog is described all the same.
    #[test]
    fn a_view_is_described_beside_the_tables() {
        let c = conn();
        c.execute_batch("CREATE VIEW cheap AS SELECT id, name FROM items WHERE price < 10")
            .unwrap();
        let tables = describe(&c).unwrap();
        let view = tables.iter().find(|t| t.name == "cheap").unwrap();
        assert_eq!(view.columns.len(), 2);
        assert_eq!(view.columns[1].collation, "utf8mb4_general_ci");
        assert!(show_create_table(&c, "items").unwrap().is_some());
    }

    #[test]
    fn renders_create_table_in_mysql_syntax() {
        let sql = show_create_table(&conn(), "items").unwrap().unwrap();
        assert_eq!(
            sql,
            "CREATE TABLE `items` (\n  \
             `id` int(11) NOT NULL AUTO_INCREMENT,\n  \
             `name` varchar(40) NOT NULL DEFAULT '',\n  \
             `price` decimal(10,2) DEFAULT NULL,\n  \
             `created` datetime DEFAULT current_timestamp(),\n  \
             PRIMARY KEY (`id`),\n  \
             UNIQUE KEY `name` (`name`),\n  \
             KEY `price_idx` (`price`)\n\
             ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        );
        assert_eq!(show_create_table(&conn(), "missing").unwrap(), None);
    }

    #[test]
    fn renders_foreign_keys_with_innodb_names() {
        let c = conn();
        c.execute_batch(
            "CREATE TABLE orders (
                id INTEGER PRIMARY KEY,
                item_id INTEGER NOT NULL REFERENCES items (id) ON DELETE CASCADE,
                other INTEGER REFERENCES items,
                a INT, b INT,
                FOREIGN KEY (a, b) REFERENCES pairs (x, y) ON UPDATE SET NULL
            );",
        )
        .unwrap();
        let sql = show_create_table(&c, "orders").unwrap().unwrap();
        let fks: Vec<&str> = sql.lines().filter(|l| l.contains("FOREIGN KEY")).collect();
        assert_eq!(
            fks,
            [
                "  CONSTRAINT `orders_ibfk_1` FOREIGN KEY (`item_id`) REFERENCES `items` (`id`) \
                 ON DELETE CASCADE,",
                "  CONSTRAINT `orders_ibfk_2` FOREIGN KEY (`other`) REFERENCES `items` (`id`),",
                "  CONSTRAINT `orders_ibfk_3` FOREIGN KEY (`a`,`b`) REFERENCES `pairs` (`x`,`y`) \
                 ON UPDATE SET NULL",
            ]
        );
    }

    #[test]
    fn defaults_are_shown_in_mysqls_words() {
        assert_eq!(mysql_default("CURRENT_TIMESTAMP"), "current_timestamp()");
        assert_eq!(mysql_default("mysql_now(6)"), "current_timestamp(6)");
        assert_eq!(mysql_default("(mysql_now(3))"), "current_timestamp(3)");
        assert_eq!(mysql_default("'free'"), "'free'");
    }

    /// An `ENUM` column is shown as one (SQLite stores it as text with a check): `SHOW CREATE
    /// TABLE` and `information_schema` give its values, so a dump restores the check and an
    /// ORM that compares types finds no change.
    #[test]
    fn an_enum_column_is_shown_with_its_values() {
        let c = conn();
        c.execute_batch(
            "CREATE TABLE plans (id INTEGER PRIMARY KEY, \
             tier TEXT COLLATE NOCASE CONSTRAINT `enum` CHECK (`tier` IN ('free', 'pro''s')) NOT NULL DEFAULT 'free')",
        )
        .unwrap();
        let sql = show_create_table(&c, "plans").unwrap().unwrap();
        assert!(
            sql.contains("`tier` enum('free','pro''s') NOT NULL DEFAULT 'free'"),
            "{sql}"
        );
        let tables = describe(&c).unwrap();
        let plans = tables.iter().find(|t| t.name == "plans").unwrap();
        assert_eq!(plans.columns[1].column_type, "enum('free','pro''s')");
    }

    /// A key declared with a name keeps it (TypeORM and Drizzle compare their names with
    /// the schema's), in `SHOW CREATE TABLE` and for `information_schema`.
    #[test]
    fn a_named_foreign_key_keeps_its_name() {
        let c = conn();
        c.execute_batch(
            "CREATE TABLE lines (
                id INTEGER PRIMARY KEY,
                item INT, other INT,
                CONSTRAINT `FK_3f1e` FOREIGN KEY (`item`) REFERENCES `items` (`id`) ON DELETE CASCADE ON UPDATE NO ACTION,
                FOREIGN KEY (other) REFERENCES items (id)
            );",
        )
        .unwrap();
        let tables = describe(&c).unwrap();
        let lines = tables.iter().find(|t| t.name == "lines").unwrap();
        let keys: Vec<(&str, &str, &str, &str)> = lines
            .foreign_keys
            .iter()
            .map(|k| {
                (
                    k.name.as_str(),
                    k.columns[0].as_str(),
                    k.delete_rule.as_str(),
                    k.update_rule.as_str(),
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("FK_3f1e", "item", "CASCADE", "NO ACTION"),
                ("lines_ibfk_1", "other", "RESTRICT", "RESTRICT")
            ]
        );
        let sql = show_create_table(&c, "lines").unwrap().unwrap();
        assert!(
            sql.contains("CONSTRAINT `FK_3f1e` FOREIGN KEY (`item`)"),
            "{sql}"
        );
    }

    #[test]
    fn lists_index_columns_primary_first() {
        let idx = index_columns(&conn(), "items").unwrap().unwrap();
        let summary: Vec<(&str, bool, u32, &str)> = idx
            .iter()
            .map(|i| {
                (
                    i.key_name.as_str(),
                    i.non_unique,
                    i.seq_in_index,
                    i.column.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("PRIMARY", false, 1, "id"),
                ("name", false, 1, "name"),
                ("price_idx", true, 1, "price"),
            ]
        );
        assert_eq!(index_columns(&conn(), "missing").unwrap(), None);
    }

    #[test]
    fn describes_tables_for_information_schema() {
        let tables = describe(&conn()).unwrap();
        assert_eq!(tables.len(), 1);
        let t = &tables[0];
        let keys: Vec<(&str, &str, &str, bool)> = t
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.column_type.as_str(), c.key, c.not_null))
            .collect();
        assert_eq!(
            keys,
            [
                ("id", "int(11)", "PRI", true),
                ("name", "varchar(40)", "UNI", true),
                ("price", "decimal(10,2)", "MUL", false),
                ("created", "datetime", "", false),
            ]
        );
        assert_eq!(t.columns[0].extra, "auto_increment");
        let names: Vec<&str> = t.indexes.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["PRIMARY", "name", "price_idx"]);
    }
}
