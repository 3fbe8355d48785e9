//! `information_schema` for one query: MySQL's tables, with the columns
//! tools read, created in an in-memory SQLite attached as `information_schema` and filled from
//! a snapshot of every database's catalog (tables, columns, indexes). Tables MySQL has that
//! describe what the shim does not have (files, routines, triggers, partitions, checks) exist, empty,
//! so dump tools that probe them carry on. MariaDB's `SYSTEM_VARIABLES` and `USER_VARIABLES`
//! describe the session that asks: the relay reads a session's state from them by value
//! before it carries the session to another compute.

use rusqlite::Connection;

use crate::engine::{Cell, SessionFacts, TableMeta};
use crate::variables::{self, SessionVars};

/// The `information_schema` tables the shim answers, with their columns (MySQL's names and
/// order, the subset tools read). Tables MySQL has that are not here are answered as empty
/// (`FILES`, `ROUTINES`, `TRIGGERS`, ...), so dump tools that probe them carry on.
const TABLES: &[(&str, &str)] = &[
    (
        "SYSTEM_VARIABLES",
        "VARIABLE_NAME, SESSION_VALUE, GLOBAL_VALUE, DEFAULT_VALUE, VARIABLE_SCOPE, \
         VARIABLE_TYPE, READ_ONLY",
    ),
    (
        "USER_VARIABLES",
        "VARIABLE_NAME, VARIABLE_VALUE, VARIABLE_TYPE, CHARACTER_SET_NAME",
    ),
    (
        "SCHEMATA",
        "CATALOG_NAME, SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME, \
         SQL_PATH",
    ),
    (
        "TABLES",
        "TABLE_CATALOG, TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE, VERSION, ROW_FORMAT, \
         TABLE_ROWS, AVG_ROW_LENGTH, DATA_LENGTH, MAX_DATA_LENGTH, INDEX_LENGTH, \
         DATA_FREE, AUTO_INCREMENT, CREATE_TIME, UPDATE_TIME, CHECK_TIME, TABLE_COLLATION, \
         CHECKSUM, CREATE_OPTIONS, TABLE_COMMENT",
    ),
    (
        "COLUMNS",
        "TABLE_CATALOG, TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, \
         COLUMN_DEFAULT, IS_NULLABLE, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, \
         CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, \
         CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_TYPE, COLUMN_KEY, EXTRA, PRIVILEGES, \
         COLUMN_COMMENT, IS_GENERATED, GENERATION_EXPRESSION",
    ),
    (
        "STATISTICS",
        "TABLE_CATALOG, TABLE_SCHEMA, TABLE_NAME, NON_UNIQUE, INDEX_SCHEMA, INDEX_NAME, \
         SEQ_IN_INDEX, COLUMN_NAME, COLLATION, CARDINALITY, SUB_PART, PACKED, NULLABLE, \
         INDEX_TYPE, COMMENT, INDEX_COMMENT",
    ),
    (
        "KEY_COLUMN_USAGE",
        "CONSTRAINT_CATALOG, CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_CATALOG, \
         TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, \
         POSITION_IN_UNIQUE_CONSTRAINT, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME, \
         REFERENCED_COLUMN_NAME",
    ),
    (
        "TABLE_CONSTRAINTS",
        "CONSTRAINT_CATALOG, CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_SCHEMA, TABLE_NAME, \
         CONSTRAINT_TYPE",
    ),
    (
        "REFERENTIAL_CONSTRAINTS",
        "CONSTRAINT_CATALOG, CONSTRAINT_SCHEMA, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_CATALOG, \
         UNIQUE_CONSTRAINT_SCHEMA, UNIQUE_CONSTRAINT_NAME, MATCH_OPTION, UPDATE_RULE, \
         DELETE_RULE, TABLE_NAME, REFERENCED_TABLE_NAME",
    ),
    (
        "CHECK_CONSTRAINTS",
        "CONSTRAINT_CATALOG, CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, LEVEL, \
         CHECK_CLAUSE",
    ),
    (
        "VIEWS",
        "TABLE_CATALOG, TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION, CHECK_OPTION, \
         IS_UPDATABLE, DEFINER, SECURITY_TYPE, CHARACTER_SET_CLIENT, COLLATION_CONNECTION, \
         ALGORITHM",
    ),
    (
        "FILES",
        "FILE_ID, FILE_NAME, FILE_TYPE, TABLESPACE_NAME, TABLE_CATALOG, TABLE_SCHEMA, \
         TABLE_NAME, LOGFILE_GROUP_NAME, LOGFILE_GROUP_NUMBER, ENGINE, FULLTEXT_KEYS, \
         DELETED_ROWS, UPDATE_COUNT, FREE_EXTENTS, TOTAL_EXTENTS, EXTENT_SIZE, \
         INITIAL_SIZE, MAXIMUM_SIZE, AUTOEXTEND_SIZE, CREATION_TIME, LAST_UPDATE_TIME, \
         LAST_ACCESS_TIME, RECOVER_TIME, TRANSACTION_COUNTER, VERSION, ROW_FORMAT, \
         TABLE_ROWS, AVG_ROW_LENGTH, DATA_LENGTH, MAX_DATA_LENGTH, INDEX_LENGTH, \
         DATA_FREE, CREATE_TIME, UPDATE_TIME, CHECK_TIME, CHECKSUM, STATUS, EXTRA",
    ),
    (
        "ROUTINES",
        "SPECIFIC_NAME, ROUTINE_CATALOG, ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE, \
         DATA_TYPE, ROUTINE_BODY, ROUTINE_DEFINITION, EXTERNAL_NAME, EXTERNAL_LANGUAGE, \
         PARAMETER_STYLE, IS_DETERMINISTIC, SQL_DATA_ACCESS, SQL_PATH, SECURITY_TYPE, \
         CREATED, LAST_ALTERED, SQL_MODE, ROUTINE_COMMENT, DEFINER, CHARACTER_SET_CLIENT, \
         COLLATION_CONNECTION, DATABASE_COLLATION",
    ),
    (
        "TRIGGERS",
        "TRIGGER_CATALOG, TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_MANIPULATION, \
         EVENT_OBJECT_CATALOG, EVENT_OBJECT_SCHEMA, EVENT_OBJECT_TABLE, ACTION_ORDER, \
         ACTION_CONDITION, ACTION_STATEMENT, ACTION_ORIENTATION, ACTION_TIMING, \
         ACTION_REFERENCE_OLD_TABLE, ACTION_REFERENCE_NEW_TABLE, ACTION_REFERENCE_OLD_ROW, \
         ACTION_REFERENCE_NEW_ROW, CREATED, SQL_MODE, DEFINER, CHARACTER_SET_CLIENT, \
         COLLATION_CONNECTION, DATABASE_COLLATION",
    ),
    (
        "PARTITIONS",
        "TABLE_CATALOG, TABLE_SCHEMA, TABLE_NAME, PARTITION_NAME, SUBPARTITION_NAME, \
         PARTITION_ORDINAL_POSITION, SUBPARTITION_ORDINAL_POSITION, PARTITION_METHOD, \
         SUBPARTITION_METHOD, PARTITION_EXPRESSION, SUBPARTITION_EXPRESSION, \
         PARTITION_DESCRIPTION, TABLE_ROWS, AVG_ROW_LENGTH, DATA_LENGTH, MAX_DATA_LENGTH, \
         INDEX_LENGTH, DATA_FREE, CREATE_TIME, UPDATE_TIME, CHECK_TIME, CHECKSUM, \
         PARTITION_COMMENT, NODEGROUP, TABLESPACE_NAME",
    ),
    (
        "ENGINES",
        "ENGINE, SUPPORT, COMMENT, TRANSACTIONS, XA, SAVEPOINTS",
    ),
];

/// The schema's name, under which its tables are attached.
pub const SCHEMA: &str = "information_schema";

/// Creates the tables in `conn` (attached as `information_schema`) and fills them from
/// `snapshot` (database name, its tables) and `session` (the asking session's variables);
/// `DATABASE()` answers `current_db`.
///
/// # Errors
/// SQLite's, if a table cannot be created or filled.
pub fn fill(
    conn: &Connection,
    snapshot: &[(String, Vec<TableMeta>)],
    current_db: Option<String>,
    session: &SessionFacts,
) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "database",
        0,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8,
        move |_| Ok(current_db.clone()),
    )?;
    conn.execute_batch(&format!("ATTACH DATABASE ':memory:' AS {SCHEMA}"))?;
    for (table, columns) in TABLES {
        // Names compare and sort without case, as MySQL's `utf8mb3_general_ci` columns do.
        let columns = columns
            .split(',')
            .map(|c| format!("{} COLLATE {}", c.trim(), crate::dialect::GENERAL_CI))
            .collect::<Vec<_>>()
            .join(", ");
        conn.execute_batch(&format!(
            "CREATE TABLE information_schema.{table} ({columns})"
        ))?;
    }
    let tx = conn.unchecked_transaction()?;
    fill_variables(&tx, session)?;
    for (db, tables) in snapshot {
        tx.execute(
            "INSERT INTO information_schema.SCHEMATA VALUES ('def', ?1, 'utf8mb4', 'utf8mb4_general_ci', NULL)",
            [db],
        )?;
        for t in tables {
            tx.execute(
                "INSERT INTO information_schema.TABLES (TABLE_CATALOG, TABLE_SCHEMA, TABLE_NAME, \
                 TABLE_TYPE, ENGINE, VERSION, ROW_FORMAT, TABLE_COLLATION, CREATE_OPTIONS, \
                 TABLE_COMMENT) VALUES ('def', ?1, ?2, ?3, ?4, 10, 'Dynamic', \
                 'utf8mb4_general_ci', '', '')",
                rusqlite::params![
                    db,
                    t.name,
                    if t.view { "VIEW" } else { "BASE TABLE" },
                    if t.view { None } else { Some("InnoDB") },
                ],
            )?;
            for (position, c) in (1_i64..).zip(&t.columns) {
                let (data_type, length, precision, scale) = split_type(&c.column_type);
                let (default, extra) = as_mysql8_shows(c.default.as_deref(), &c.extra);
                let text = length.is_some() && data_type != "blob";
                // Fractional seconds of a DATETIME(p), TIMESTAMP(p), TIME(p): p, else 0.
                let datetime_precision =
                    matches!(data_type.as_str(), "datetime" | "timestamp" | "time").then(|| {
                        c.column_type
                            .split_once('(')
                            .and_then(|(_, p)| p.strip_suffix(')'))
                            .and_then(|p| p.trim().parse::<i64>().ok())
                            .unwrap_or(0)
                    });
                tx.execute(
                    "INSERT INTO information_schema.COLUMNS (TABLE_CATALOG, TABLE_SCHEMA, \
                     TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_DEFAULT, IS_NULLABLE, \
                     DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, CHARACTER_OCTET_LENGTH, \
                     NUMERIC_PRECISION, NUMERIC_SCALE, CHARACTER_SET_NAME, COLLATION_NAME, \
                     COLUMN_TYPE, COLUMN_KEY, EXTRA, PRIVILEGES, COLUMN_COMMENT, IS_GENERATED, \
                     DATETIME_PRECISION) \
                     VALUES ('def', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
                     ?15, ?16, 'select,insert,update,references', '', 'NEVER', ?17)",
                    rusqlite::params![
                        db,
                        t.name,
                        c.name,
                        position,
                        default,
                        if c.not_null { "NO" } else { "YES" },
                        data_type,
                        length,
                        length.map(|n| n * 4),
                        precision,
                        scale,
                        text.then_some("utf8mb4"),
                        text.then_some(c.collation),
                        without_display_width(&c.column_type),
                        c.key,
                        extra,
                        datetime_precision,
                    ],
                )?;
            }
            for index in t.indexes.iter().filter(|i| i.unique) {
                tx.execute(
                    "INSERT INTO information_schema.TABLE_CONSTRAINTS VALUES ('def', ?1, ?2, ?1, \
                     ?3, ?4)",
                    rusqlite::params![
                        db,
                        index.name,
                        t.name,
                        if index.name == "PRIMARY" {
                            "PRIMARY KEY"
                        } else {
                            "UNIQUE"
                        }
                    ],
                )?;
            }
            fill_foreign_keys(&tx, db, t)?;
            for index in &t.indexes {
                for (seq, column) in (1_i64..).zip(&index.columns) {
                    tx.execute(
                        "INSERT INTO information_schema.STATISTICS VALUES ('def', ?1, ?2, ?3, ?1, \
                         ?4, ?5, ?6, 'A', NULL, NULL, NULL, '', 'BTREE', '', '')",
                        rusqlite::params![
                            db,
                            t.name,
                            i64::from(!index.unique),
                            index.name,
                            seq + 1,
                            column
                        ],
                    )?;
                    if index.unique {
                        tx.execute(
                            "INSERT INTO information_schema.KEY_COLUMN_USAGE VALUES ('def', ?1, \
                             ?2, 'def', ?1, ?3, ?4, ?5, NULL, NULL, NULL, NULL)",
                            rusqlite::params![db, index.name, t.name, column, seq],
                        )?;
                    }
                }
            }
        }
    }
    tx.commit()
}

/// `t`'s foreign keys in `TABLE_CONSTRAINTS`, `REFERENTIAL_CONSTRAINTS` and
/// `KEY_COLUMN_USAGE` (with the referenced columns), as ORMs read them to compare a schema
/// with their models (TypeORM's `synchronize`, `drizzle-kit push`, Django's introspection).
fn fill_foreign_keys(conn: &Connection, db: &str, t: &TableMeta) -> rusqlite::Result<()> {
    for fk in &t.foreign_keys {
        conn.execute(
            "INSERT INTO information_schema.TABLE_CONSTRAINTS VALUES ('def', ?1, ?2, ?1, ?3, \
             'FOREIGN KEY')",
            rusqlite::params![db, fk.name, t.name],
        )?;
        conn.execute(
            "INSERT INTO information_schema.REFERENTIAL_CONSTRAINTS VALUES ('def', ?1, ?2, \
             'def', ?1, ?3, 'NONE', ?4, ?5, ?6, ?7)",
            rusqlite::params![
                db,
                fk.name,
                "PRIMARY",
                fk.update_rule,
                fk.delete_rule,
                t.name,
                fk.referenced_table
            ],
        )?;
        for (position, (column, referenced)) in
            (1_i64..).zip(fk.columns.iter().zip(&fk.referenced_columns))
        {
            conn.execute(
                "INSERT INTO information_schema.KEY_COLUMN_USAGE VALUES ('def', ?1, ?2, 'def', \
                 ?1, ?3, ?4, ?5, ?5, ?1, ?6, ?7)",
                rusqlite::params![
                    db,
                    fk.name,
                    t.name,
                    column,
                    position,
                    fk.referenced_table,
                    referenced
                ],
            )?;
        }
    }
    Ok(())
}

/// The session's system variables (each as it reads now, its default as the global value)
/// and its user variables, typed as MariaDB names them.
fn fill_variables(conn: &Connection, session: &SessionFacts) -> rusqlite::Result<()> {
    let none = std::collections::BTreeMap::new();
    let now = variables::all(SessionVars {
        autocommit: session.autocommit,
        set: &session.variables,
    });
    let defaults = variables::all(SessionVars {
        autocommit: true,
        set: &none,
    });
    for ((name, value), (_, default)) in now.iter().zip(&defaults) {
        let kind = match variables::lookup(
            name,
            SessionVars {
                autocommit: true,
                set: &none,
            },
        ) {
            _ if name == "autocommit" => "BOOLEAN",
            Some(Cell::Int(_)) => "BIGINT",
            _ => "VARCHAR",
        };
        conn.execute(
            "INSERT INTO information_schema.SYSTEM_VARIABLES VALUES (?1, ?2, ?3, ?3, 'SESSION', \
             ?4, 'NO')",
            rusqlite::params![name.to_ascii_uppercase(), value, default, kind],
        )?;
    }
    for (name, value) in &session.user_variables {
        let (kind, charset) = match value {
            Cell::Int(_) | Cell::UInt(_) => ("INT", "binary"),
            Cell::Float(_) => ("DOUBLE", "binary"),
            Cell::Float32(..) => ("FLOAT", "binary"),
            Cell::Decimal(_) => ("DECIMAL", "binary"),
            Cell::Null | Cell::Bytes(_) | Cell::Bit(_) => ("VARCHAR", "binary"),
            Cell::Text(_) | Cell::Json(_) | Cell::Date(_) | Cell::DateTime(_) | Cell::Time(_) => {
                ("VARCHAR", "utf8mb4")
            }
        };
        conn.execute(
            "INSERT INTO information_schema.USER_VARIABLES VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![name, value.to_text(), kind, charset],
        )?;
    }
    Ok(())
}

/// `varchar(40)` → (`varchar`, length 40, -, -); `decimal(10,2)` → (`decimal`, -, 10, 2);
/// `int(11) unsigned` → (`int`, -, 10, 0).
fn split_type(column_type: &str) -> (String, Option<i64>, Option<i64>, Option<i64>) {
    let base: String = column_type
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let args: Vec<i64> = column_type
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inner, _)| {
            inner
                .split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let first = args.first().copied();
    match base.as_str() {
        // The longest value's length, as MySQL gives it.
        "enum" => {
            let longest = column_type
                .split('\'')
                .skip(1)
                .step_by(2)
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0);
            (base, i64::try_from(longest).ok(), None, None)
        }
        "char" | "varchar" | "binary" | "varbinary" => (base, first.or(Some(255)), None, None),
        "text" | "mediumtext" | "longtext" | "tinytext" | "blob" => {
            (base, Some(65_535), None, None)
        }
        "decimal" | "numeric" => (
            base,
            None,
            first.or(Some(10)),
            args.get(1).copied().or(Some(0)),
        ),
        "int" | "integer" => ("int".into(), None, Some(10), Some(0)),
        "bigint" => (base, None, Some(19), Some(0)),
        "smallint" => (base, None, Some(5), Some(0)),
        "tinyint" => (base, None, Some(3), Some(0)),
        _ => (base, None, None, None),
    }
}

/// A column's default and `EXTRA` as MySQL 8's `information_schema.COLUMNS` shows them, from
/// the default as `SHOW CREATE TABLE` writes it (`'free'`, `0.00`, `current_timestamp(6)`): a
/// string without its quotes, `true` as `1`, an expression (`CURRENT_TIMESTAMP(6)`, `uuid()`)
/// without its parentheses and marked `DEFAULT_GENERATED` in `EXTRA`, `NULL` as no default.
/// ORMs built for MySQL (TypeORM, drizzle-kit) compare these with their schema.
fn as_mysql8_shows(default: Option<&str>, extra: &str) -> (Option<String>, String) {
    let extra = match extra.split_once("on update ") {
        Some((before, timestamp)) => format!("{before}on update {}", current_timestamp(timestamp)),
        None => extra.to_owned(),
    };
    let Some(d) = default.map(str::trim) else {
        return (None, extra);
    };
    if d.eq_ignore_ascii_case("null") {
        return (None, extra);
    }
    if let Some(inner) = d.strip_prefix('\'').and_then(|r| r.strip_suffix('\''))
        && !inner.replace("''", "").contains('\'')
    {
        return (Some(inner.replace("''", "'")), extra);
    }
    if d.eq_ignore_ascii_case("true") || d.eq_ignore_ascii_case("false") {
        return (
            Some(
                if d.eq_ignore_ascii_case("true") {
                    "1"
                } else {
                    "0"
                }
                .into(),
            ),
            extra,
        );
    }
    let number = d
        .strip_prefix('-')
        .unwrap_or(d)
        .split_once('.')
        .map_or_else(
            || {
                d.strip_prefix('-')
                    .unwrap_or(d)
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            },
            |(w, f)| (w.bytes().chain(f.bytes())).all(|b| b.is_ascii_digit()),
        );
    if number && !d.is_empty() {
        return (Some(d.to_owned()), extra);
    }
    let parenthesized = d.strip_prefix('(').and_then(|e| e.strip_suffix(')'));
    let expression = match parenthesized {
        // `DEFAULT (now())` or `DEFAULT (CURRENT_TIMESTAMP)`, an expression default (stored as
        // SQLite's keyword): MySQL 8 prints the expression's function, `now()`.
        Some(e) if e.eq_ignore_ascii_case("current_timestamp") => "now()",
        Some(e) => e,
        None => d,
    };
    let extra = if extra.is_empty() {
        "DEFAULT_GENERATED".to_owned()
    } else {
        format!("DEFAULT_GENERATED {extra}")
    };
    (Some(current_timestamp(expression)), extra)
}

/// A column type as MySQL 8 shows it: integers without a display width (`int`, not
/// `int(11)`), but for `tinyint(1)`, which it keeps as the mark of a boolean.
fn without_display_width(column_type: &str) -> String {
    let Some((base, rest)) = column_type.split_once('(') else {
        return column_type.to_owned();
    };
    let integer = matches!(
        base,
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint"
    );
    match rest.split_once(')') {
        Some((width, after)) if integer && !(base == "tinyint" && width == "1") => {
            format!("{base}{after}")
        }
        _ => column_type.to_owned(),
    }
}

/// `current_timestamp()` as MySQL 8 writes it, `CURRENT_TIMESTAMP` (with its precision when it
/// has one); any other text as it is.
fn current_timestamp(text: &str) -> String {
    let Some(rest) = text
        .get(..17)
        .filter(|p| p.eq_ignore_ascii_case("current_timestamp"))
        .and_then(|_| text.get(17..))
    else {
        return text.to_owned();
    };
    if rest == "()" || rest.is_empty() {
        "CURRENT_TIMESTAMP".to_owned()
    } else {
        format!("CURRENT_TIMESTAMP{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::as_mysql8_shows;

    #[test]
    fn integer_types_are_shown_without_their_display_width() {
        use super::without_display_width as shown;
        assert_eq!(shown("int(11)"), "int");
        assert_eq!(shown("int(10) unsigned"), "int unsigned");
        assert_eq!(shown("bigint(20)"), "bigint");
        assert_eq!(shown("tinyint(1)"), "tinyint(1)");
        assert_eq!(shown("tinyint(4)"), "tinyint");
        assert_eq!(shown("varchar(40)"), "varchar(40)");
        assert_eq!(shown("decimal(10,2)"), "decimal(10,2)");
    }

    /// As MySQL 8.0 shows these defaults in `information_schema.COLUMNS`.
    #[test]
    fn defaults_are_shown_as_mysql_8_shows_them() {
        let shown = |d: Option<&str>, extra: &str| {
            let (d, e) = as_mysql8_shows(d, extra);
            (d.unwrap_or_else(|| "<null>".into()), e)
        };
        let plain = |d: &str| (d.to_owned(), String::new());
        assert_eq!(shown(Some("'free'"), ""), plain("free"));
        assert_eq!(shown(Some("'it''s'"), ""), plain("it's"));
        assert_eq!(shown(Some("'0.00'"), ""), plain("0.00"));
        assert_eq!(shown(Some("0.00"), ""), plain("0.00"));
        assert_eq!(shown(Some("-1"), ""), plain("-1"));
        assert_eq!(shown(Some("true"), ""), plain("1"));
        assert_eq!(shown(Some("NULL"), ""), plain("<null>"));
        assert_eq!(shown(None, ""), plain("<null>"));
        assert_eq!(
            shown(Some("current_timestamp()"), ""),
            ("CURRENT_TIMESTAMP".into(), "DEFAULT_GENERATED".into())
        );
        assert_eq!(
            shown(
                Some("current_timestamp(6)"),
                "on update current_timestamp(6)"
            ),
            (
                "CURRENT_TIMESTAMP(6)".into(),
                "DEFAULT_GENERATED on update CURRENT_TIMESTAMP(6)".into()
            )
        );
        assert_eq!(
            shown(Some("(uuid())"), ""),
            ("uuid()".into(), "DEFAULT_GENERATED".into())
        );
        assert_eq!(
            shown(Some("(CURRENT_TIMESTAMP)"), ""),
            ("now()".into(), "DEFAULT_GENERATED".into())
        );
        assert_eq!(
            shown(None, "auto_increment"),
            ("<null>".into(), "auto_increment".into())
        );
    }
}
