//! `CREATE TABLE`, MySQL to SQLite: the column types, column options, keys and table
//! options of a table definition (also used by `ALTER TABLE ... ADD COLUMN`).
//!
//! `CREATE TABLE` is printed here, not by sqlparser, because almost every part changes:
//! - **Types** keep their MySQL name as SQLite's declared type (`VARCHAR(40)`,
//!   `DECIMAL(10,2)`, `INT UNSIGNED`, `DATETIME`, `JSON`), so SQLite's type affinity and
//!   `PRAGMA table_info` stay meaningful. Integer display widths are dropped (SQLite's
//!   grammar allows no word after the parentheses, and MySQL 8 ignores them) except
//!   `TINYINT(1)`, the boolean convention.
//! - **`AUTO_INCREMENT`** on the column that is the whole primary key (inline or as a
//!   `PRIMARY KEY (id)` table constraint) becomes `INTEGER PRIMARY KEY AUTOINCREMENT`: a
//!   rowid alias, so `last_insert_rowid()` is MySQL's `LAST_INSERT_ID()`, and ids are
//!   never reused. Its declared type is then `INTEGER` (SQLite requires that exact word).
//!   The table option `AUTO_INCREMENT=n` seeds `sqlite_sequence` so the next id is `n`.
//! - **`ENUM('a','b')`** becomes `TEXT CONSTRAINT `enum` CHECK (col IN ('a','b'))`;
//!   **`SET('x','y')`** becomes `TEXT CONSTRAINT `set` CHECK (col = '' OR
//!   replace(replace(',' || col || ',', ',x,', ','), ',y,', ',') = ',')`. The constraint
//!   name is how the catalog finds the definition again for `SHOW CREATE TABLE`: the
//!   quoted values in the column's CHECK named `enum`/`set`, in order.
//! - **Text columns** (`CHAR`, `VARCHAR`, the `TEXT`s, `ENUM`, `SET`) get `COLLATE
//!   NOCASE`, MySQL's default case-insensitive comparison (ASCII case only); a `_bin`
//!   collation gets `BINARY`. `CHARACTER SET` and column `COMMENT` are dropped.
//! - **`ON UPDATE CURRENT_TIMESTAMP`** becomes an `AFTER UPDATE` trigger named
//!   `<table>__<column>__on_update` that sets the column when the statement did not set
//!   it and another column changed (MySQL's rule). Recursive triggers are off in SQLite,
//!   so its own UPDATE does not fire it again.
//! - **`DECIMAL(p,s)`** and **`FLOAT`** columns get two triggers that store a value as MySQL
//!   stores it (`super::stored_rounding`).
//! - **Keys**: `KEY`/`INDEX`/`UNIQUE KEY` and inline `UNIQUE` become separate `CREATE
//!   [UNIQUE] INDEX` statements. MySQL index names are per table and SQLite's per
//!   database, so an index is named `<table>__<name>` (an unnamed key takes its first
//!   column's name, as in MySQL); `DROP INDEX name ON t` uses the same rule. `FULLTEXT`
//!   and `SPATIAL` keys are dropped (only `MATCH ... AGAINST`, refused, would use them).
//!   `FOREIGN KEY` and `CHECK` stay constraints.
//! - **Table options** (`ENGINE=`, `DEFAULT CHARSET=`, `COLLATE=`, `COMMENT=`, ...) are
//!   dropped.

use std::collections::HashSet;

use sqlparser::ast::{
    CheckConstraint, ColumnDef, ColumnOption, CreateTable, CreateTableOptions, DataType,
    EnumMember, Expr, ForeignKeyConstraint, Ident, IndexColumn, IndexConstraint, ObjectName,
    PrimaryKeyConstraint, ReferentialAction, SqlOption, TableConstraint, UniqueConstraint, Value,
};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

use super::super::{expr, quote};
use super::{index_name, object, split, stored_rounding};
use crate::sql_error::SqlError;

pub(super) struct Index {
    pub(super) unique: bool,
    pub(super) name: String,
    pub(super) columns: Vec<String>,
}

pub(super) fn create_table(ct: CreateTable) -> Result<Vec<String>, SqlError> {
    if ct.like.is_some() || ct.clone.is_some() {
        return Err(SqlError::not_supported("CREATE TABLE ... LIKE"));
    }
    if ct.external
        || ct.global.is_some()
        || ct.transient
        || ct.volatile
        || ct.on_cluster.is_some()
        || ct.partition_by.is_some()
        || ct.primary_key.is_some()
        || ct.order_by.is_some()
    {
        return Err(SqlError::not_supported("this CREATE TABLE"));
    }
    if ct.temporary {
        // SQLite keeps a temporary table in the TEMP schema of one connection, and the
        // shim's connections serve every session of a database: such a table would be
        // seen, changed and dropped by other sessions, of any account, and outlive its own.
        return Err(SqlError::not_supported(
            "CREATE TEMPORARY TABLE (server-shim cannot keep a table private to one session)",
        ));
    }
    let (schema, table) = split(&ct.name)?;
    let full_name = object(&ct.name)?;
    let mut out = Vec::new();
    if ct.or_replace {
        out.push(format!("DROP TABLE IF EXISTS {full_name}"));
    }
    let head = format!(
        "CREATE TABLE {}{full_name}",
        if ct.if_not_exists {
            "IF NOT EXISTS "
        } else {
            ""
        },
    );
    if let Some(mut query) = ct.query {
        if !ct.columns.is_empty() {
            return Err(SqlError::not_supported("CREATE TABLE (columns) AS SELECT"));
        }
        expr::query(&mut query)?;
        out.push(format!("{head} AS {query}"));
        return Ok(out);
    }

    // Which single column is the primary key, and which column is AUTO_INCREMENT.
    let table_pk: Option<Vec<String>> = ct
        .constraints
        .iter()
        .find_map(|c| match c {
            TableConstraint::PrimaryKey(pk) => Some(index_columns(pk.columns.clone())),
            _ => None,
        })
        .transpose()?;
    let auto_increment = ct
        .columns
        .iter()
        .find(|c| has_auto_increment(c))
        .map(|c| c.name.value.clone());
    if let Some(auto) = &auto_increment {
        let column = ct.columns.iter().find(|c| &c.name.value == auto);
        let inline_pk = column.is_some_and(|c| {
            c.options
                .iter()
                .any(|o| matches!(o.option, ColumnOption::PrimaryKey(_)))
        });
        let table_pk_is_it = matches!(table_pk.as_deref(), Some([only]) if only == auto);
        if !(inline_pk || table_pk_is_it) {
            return Err(SqlError::not_supported(
                "AUTO_INCREMENT on a column that is not the whole PRIMARY KEY",
            ));
        }
    }

    let mut indexes: Vec<Index> = Vec::new();
    let mut on_update: Vec<String> = Vec::new();
    let mut definitions = Vec::new();
    // `COLLATE=utf8mb4_bin` of the table, as a dump of such a table writes it.
    let collation = default_collation(&ct.table_options).unwrap_or(expr::GENERAL_CI);
    for column in &ct.columns {
        let is_auto = auto_increment.as_deref() == Some(column.name.value.as_str());
        definitions.push(column_definition(
            column,
            is_auto,
            collation,
            &mut indexes,
            &mut on_update,
        )?);
    }
    for constraint in &ct.constraints {
        match constraint {
            TableConstraint::PrimaryKey(PrimaryKeyConstraint { name, columns, .. }) => {
                if auto_increment.is_some() {
                    continue; // absorbed into the INTEGER PRIMARY KEY column
                }
                definitions.push(format!(
                    "{}PRIMARY KEY ({})",
                    constraint_name(name.as_ref()),
                    names(&index_columns(columns.clone())?)
                ));
            }
            TableConstraint::Unique(UniqueConstraint {
                name,
                index_name,
                columns,
                ..
            }) => indexes.push(Index {
                unique: true,
                name: index_name
                    .as_ref()
                    .or(name.as_ref())
                    .map(|i| i.value.clone())
                    .unwrap_or_default(),
                columns: index_columns(columns.clone())?,
            }),
            TableConstraint::Index(IndexConstraint { name, columns, .. }) => indexes.push(Index {
                unique: false,
                name: name.as_ref().map(|i| i.value.clone()).unwrap_or_default(),
                columns: index_columns(columns.clone())?,
            }),
            TableConstraint::ForeignKey(fk) => definitions.push(foreign_key(fk)?),
            TableConstraint::Check(check) => definitions.push(check_constraint(check)?),
            TableConstraint::FulltextOrSpatial(_) => {}
            TableConstraint::PrimaryKeyUsingIndex(_)
            | TableConstraint::UniqueUsingIndex(_)
            | TableConstraint::Exclude(_) => {
                return Err(SqlError::not_supported("this table constraint"));
            }
        }
    }
    out.push(format!("{head} ({})", definitions.join(", ")));
    out.extend(index_statements(schema, table, indexes, ct.if_not_exists)?);
    let all_columns: Vec<(&str, Option<stored_rounding::Rounding>)> = ct
        .columns
        .iter()
        .map(|c| {
            let rounding = stored_rounding::Rounding::of(&c.data_type.to_string());
            (c.name.value.as_str(), rounding)
        })
        .collect();
    for column in on_update {
        let declared = ct
            .columns
            .iter()
            .find(|c| c.name.value == column)
            .map(|c| c.data_type.to_string())
            .unwrap_or_default();
        out.push(on_update_trigger(
            schema,
            table,
            &column,
            &declared,
            &all_columns,
        ));
    }
    for (column, rounding) in &all_columns {
        if let Some(rounding) = rounding {
            out.extend(stored_rounding::rounding_triggers(
                schema, table, column, *rounding,
            ));
        }
    }
    if let (Some(_), Some(start), false) = (
        &auto_increment,
        auto_increment_start(&ct.table_options),
        ct.if_not_exists,
    ) && start > 1
    {
        let sequence = match schema {
            Some(s) => format!("{}.sqlite_sequence", quote(s)),
            None => "sqlite_sequence".to_owned(),
        };
        out.push(format!(
            "INSERT INTO {sequence} (name, seq) VALUES ({}, {})",
            Value::SingleQuotedString(table.to_owned()),
            u64::from(start) - 1
        ));
    }
    Ok(out)
}

pub(super) fn has_auto_increment(column: &ColumnDef) -> bool {
    column.options.iter().any(|o| match &o.option {
        ColumnOption::DialectSpecific(tokens) => tokens.iter().any(|t| matches!(t, Token::Word(w) if w.keyword == Keyword::AUTO_INCREMENT || w.value.eq_ignore_ascii_case("AUTOINCREMENT"))),
        _ => false,
    })
}

/// A `FOREIGN KEY` table constraint, as SQLite's text (`CREATE TABLE`, `ALTER TABLE ... ADD`).
pub(super) fn foreign_key(fk: &ForeignKeyConstraint) -> Result<String, SqlError> {
    Ok(format!(
        "{}FOREIGN KEY ({}) {}",
        constraint_name(fk.name.as_ref()),
        idents(&fk.columns),
        references(
            &fk.foreign_table,
            &fk.referred_columns,
            fk.on_delete,
            fk.on_update
        )?
    ))
}

/// A `CHECK` table constraint, as SQLite's text.
pub(super) fn check_constraint(check: &CheckConstraint) -> Result<String, SqlError> {
    let mut expr = check.expr.as_ref().clone();
    expr::expr(&mut expr)?;
    Ok(format!(
        "{}CHECK ({expr})",
        constraint_name(check.name.as_ref())
    ))
}

fn constraint_name(name: Option<&Ident>) -> String {
    name.map(|n| format!("CONSTRAINT {} ", quote(&n.value)))
        .unwrap_or_default()
}

fn idents(columns: &[Ident]) -> String {
    columns
        .iter()
        .map(|c| quote(&c.value))
        .collect::<Vec<_>>()
        .join(", ")
}

fn names(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| quote(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The column names of a key's column list (`KEY k (a, b)`); a key on an expression has no
/// SQLite form here.
pub(super) fn index_columns(columns: Vec<IndexColumn>) -> Result<Vec<String>, SqlError> {
    columns
        .into_iter()
        .map(|c| match c.column.expr {
            Expr::Identifier(i) => Ok(i.value),
            _ => Err(SqlError::not_supported("a key on an expression")),
        })
        .collect()
}

/// A table's options (`ENGINE=`, `AUTO_INCREMENT=`, `COLLATE=`).
fn table_options(options: &CreateTableOptions) -> &[SqlOption] {
    match options {
        CreateTableOptions::None => &[],
        CreateTableOptions::With(o)
        | CreateTableOptions::Options(o)
        | CreateTableOptions::Plain(o)
        | CreateTableOptions::TableProperties(o) => o,
    }
}

/// SQLite's collation for the table option `[DEFAULT] COLLATE[=]x`, its text columns'
/// without one of their own.
fn default_collation(options: &CreateTableOptions) -> Option<&'static str> {
    table_options(options).iter().find_map(|o| match o {
        SqlOption::KeyValue { key, value } => {
            let key = key.to_string().to_ascii_uppercase();
            (key == "COLLATE" || key == "DEFAULT COLLATE").then(|| {
                expr::collation_for(&ObjectName::from(vec![Ident::new(value.to_string())]))
            })
        }
        _ => None,
    })
}

/// The table option `AUTO_INCREMENT=n`.
fn auto_increment_start(options: &CreateTableOptions) -> Option<u32> {
    table_options(options).iter().find_map(|o| match o {
        SqlOption::KeyValue {
            key,
            value: Expr::Value(v),
        } if key.to_string().eq_ignore_ascii_case("AUTO_INCREMENT") => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        _ => None,
    })
}

/// `REFERENCES t (cols) [ON DELETE ..] [ON UPDATE ..]`. SQLite's foreign keys cannot name
/// another schema, so only the table part is kept.
fn references(
    table: &ObjectName,
    columns: &[Ident],
    on_delete: Option<ReferentialAction>,
    on_update: Option<ReferentialAction>,
) -> Result<String, SqlError> {
    let (_, name) = split(table)?;
    let mut out = format!("REFERENCES {}", quote(name));
    if !columns.is_empty() {
        out.push_str(&format!(" ({})", idents(columns)));
    }
    if let Some(a) = on_delete {
        out.push_str(&format!(" ON DELETE {a}"));
    }
    if let Some(a) = on_update {
        out.push_str(&format!(" ON UPDATE {a}"));
    }
    Ok(out)
}

/// One column of `CREATE TABLE` (or `ADD COLUMN`); inline `UNIQUE` goes to `indexes`,
/// `ON UPDATE CURRENT_TIMESTAMP` to `on_update`.
pub(super) fn column_definition(
    column: &ColumnDef,
    is_auto: bool,
    table_collation: &'static str,
    indexes: &mut Vec<Index>,
    on_update: &mut Vec<String>,
) -> Result<String, SqlError> {
    let name = quote(&column.name.value);
    if is_auto {
        if !is_integer(&column.data_type) {
            return Err(SqlError::not_supported(
                "AUTO_INCREMENT on a non-integer column",
            ));
        }
        // NOT NULL would make an inserted NULL fail instead of taking the next id.
        let mut out = format!("{name} INTEGER PRIMARY KEY AUTOINCREMENT");
        for option in &column.options {
            if let ColumnOption::Check(c) = &option.option {
                let mut c = c.expr.as_ref().clone();
                expr::expr(&mut c)?;
                out.push_str(&format!(" CHECK ({c})"));
            }
        }
        return Ok(out);
    }
    let (declared, text_like, check) = declared_type(&column.data_type, &name)?;
    let mut out = format!("{name} {declared}");
    if text_like {
        // The last COLLATE wins, as in MySQL.
        let collation = column
            .options
            .iter()
            .filter_map(|o| match &o.option {
                ColumnOption::Collation(c) => Some(c),
                _ => None,
            })
            .next_back()
            .map_or_else(
                || {
                    // A character set named alone: its own default collation, not the
                    // table's (MariaDB's `utf8mb4_general_ci`).
                    let own_charset = column
                        .options
                        .iter()
                        .any(|o| matches!(o.option, ColumnOption::CharacterSet(_)));
                    if own_charset {
                        expr::GENERAL_CI
                    } else {
                        table_collation
                    }
                },
                expr::collation_for,
            );
        out.push_str(&format!(" COLLATE {collation}"));
    }
    if let Some(check) = check {
        out.push_str(&format!(" {check}"));
    }
    for check in super::value_checks::column_checks(&declared, &column.name.value) {
        out.push_str(&format!(" {check}"));
    }
    for option in &column.options {
        match &option.option {
            ColumnOption::Null
            | ColumnOption::CharacterSet(_)
            | ColumnOption::Comment(_)
            | ColumnOption::Collation(_) => {}
            ColumnOption::NotNull => out.push_str(" NOT NULL"),
            ColumnOption::Default(d) => out.push_str(&format!(" DEFAULT {}", default(d)?)),
            ColumnOption::PrimaryKey(_) => out.push_str(" PRIMARY KEY"),
            ColumnOption::Unique(_) => indexes.push(Index {
                unique: true,
                name: column.name.value.clone(),
                columns: vec![column.name.value.clone()],
            }),
            ColumnOption::ForeignKey(ForeignKeyConstraint {
                foreign_table,
                referred_columns,
                on_delete,
                on_update: on_upd,
                ..
            }) => {
                out.push_str(&format!(
                    " {}",
                    references(foreign_table, referred_columns, *on_delete, *on_upd)?
                ));
            }
            ColumnOption::Check(c) => {
                let mut c = c.expr.as_ref().clone();
                expr::expr(&mut c)?;
                out.push_str(&format!(" CHECK ({c})"));
            }
            ColumnOption::OnUpdate(e) => {
                if !is_now(e) {
                    return Err(SqlError::not_supported(
                        "ON UPDATE other than CURRENT_TIMESTAMP",
                    ));
                }
                on_update.push(column.name.value.clone());
            }
            ColumnOption::Generated {
                generation_expr: Some(g),
                generation_expr_mode,
                ..
            } => {
                let mut g = g.clone();
                expr::expr(&mut g)?;
                let stored = matches!(
                    generation_expr_mode,
                    Some(sqlparser::ast::GeneratedExpressionMode::Stored)
                );
                out.push_str(&format!(
                    " GENERATED ALWAYS AS ({g}) {}",
                    if stored { "STORED" } else { "VIRTUAL" }
                ));
            }
            // MySQL-only words sqlparser keeps as tokens (`AUTO_INCREMENT` is handled above).
            ColumnOption::DialectSpecific(_) => {}
            other => {
                return Err(SqlError::not_supported(&format!(
                    "the column option {other}"
                )));
            }
        }
    }
    Ok(out)
}

fn is_integer(t: &DataType) -> bool {
    let name = t.to_string().to_ascii_uppercase();
    let base = name.split(['(', ' ']).next().unwrap_or_default();
    matches!(
        base,
        "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "INTEGER" | "BIGINT" | "SERIAL"
    )
}

/// `NOW()`, `CURRENT_TIMESTAMP[(p)]`, `LOCALTIMESTAMP[()]`, ... (the trigger that sets such a
/// column on update writes the fraction its type keeps, whatever `p` says, as MariaDB does).
fn is_now(e: &Expr) -> bool {
    let mut e = e.clone();
    expr::expr(&mut e).is_ok() && {
        let text = e.to_string();
        text.eq_ignore_ascii_case("CURRENT_TIMESTAMP")
            || text.starts_with(&format!("{}(", expr::NOW_FN))
    }
}

/// A DEFAULT clause's value: literals and SQLite's date keywords bare, anything else in
/// parentheses (SQLite's rule for expressions).
pub(super) fn default(d: &Expr) -> Result<String, SqlError> {
    let mut d = d.clone();
    expr::expr(&mut d)?;
    let text = d.to_string();
    let bare = match &d {
        Expr::Value(_) => true,
        Expr::UnaryOp { expr: inner, .. } => {
            matches!(inner.as_ref(), Expr::Value(v) if matches!(v.value, Value::Number(..)))
        }
        _ => ["CURRENT_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME"]
            .iter()
            .any(|k| text.eq_ignore_ascii_case(k)),
    };
    Ok(if bare { text } else { format!("({text})") })
}

/// (declared type, whether it is text, the ENUM/SET check) for a MySQL column type.
fn declared_type(t: &DataType, column: &str) -> Result<(String, bool, Option<String>), SqlError> {
    match t {
        DataType::Enum(values, _) => {
            let list = values
                .iter()
                .map(|v| match v {
                    EnumMember::Name(v) | EnumMember::NamedValue(v, _) => v,
                })
                .map(|v| Value::SingleQuotedString(v.clone()).to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Ok((
                "TEXT".to_owned(),
                true,
                Some(format!("CONSTRAINT `enum` CHECK ({column} IN ({list}))")),
            ));
        }
        DataType::Set(values) => {
            let mut chain = format!("',' || {column} || ','");
            for v in values {
                chain = format!(
                    "replace({chain}, {}, ',')",
                    Value::SingleQuotedString(format!(",{v},"))
                );
            }
            return Ok((
                "TEXT".to_owned(),
                true,
                Some(format!(
                    "CONSTRAINT `set` CHECK ({column} = '' OR {chain} = ',')"
                )),
            ));
        }
        _ => {}
    }
    let printed = t.to_string().to_ascii_uppercase();
    let (outside, args) = match (printed.find('('), printed.rfind(')')) {
        (Some(open), Some(close)) if open < close => (
            format!(
                "{} {}",
                printed.get(..open).unwrap_or_default(),
                printed.get(close + 1..).unwrap_or_default()
            ),
            printed
                .get(open + 1..close)
                .unwrap_or_default()
                .replace(' ', ""),
        ),
        _ => (printed.clone(), String::new()),
    };
    let words: Vec<&str> = outside.split_whitespace().collect();
    if words.is_empty()
        || words
            .iter()
            .any(|w| !w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(SqlError::not_supported(&format!("column type {printed}")));
    }
    let numeric_args = !args.is_empty()
        && args
            .split(',')
            .all(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_digit()));
    let keep_args =
        numeric_args && (!is_integer(t) || (words.first() == Some(&"TINYINT") && args == "1"));
    // MySQL's BOOL/BOOLEAN is TINYINT(1), and its catalog says so (ORMs reflect that type).
    if matches!(words.as_slice(), ["BOOL" | "BOOLEAN"]) {
        return Ok(("TINYINT(1)".to_owned(), false, None));
    }
    // SQLite's grammar takes the arguments last only: `DECIMAL UNSIGNED(7,2)`.
    let mut declared = words.join(" ");
    if keep_args {
        declared.push_str(&format!("({args})"));
    }
    let text_like = declared.contains("CHAR") || declared.contains("TEXT");
    Ok((declared, text_like, None))
}

/// `CREATE [UNIQUE] INDEX` for the keys of a table, with unique per-table names.
pub(super) fn index_statements(
    schema: Option<&str>,
    table: &str,
    indexes: Vec<Index>,
    if_not_exists: bool,
) -> Result<Vec<String>, SqlError> {
    let mut used = HashSet::new();
    let mut out = Vec::new();
    for index in indexes {
        let first = index
            .columns
            .first()
            .cloned()
            .ok_or_else(|| SqlError::syntax("index without columns"))?;
        let base = if index.name.is_empty() {
            first
        } else {
            index.name
        };
        let mut name = base.clone();
        let mut n = 2;
        while !used.insert(name.to_ascii_lowercase()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        out.push(format!(
            "CREATE {}INDEX {}{} ON {} ({})",
            if index.unique { "UNIQUE " } else { "" },
            if if_not_exists { "IF NOT EXISTS " } else { "" },
            index_name(schema, table, &name),
            quote(table),
            index
                .columns
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    Ok(out)
}

/// The trigger of an `ON UPDATE CURRENT_TIMESTAMP` column `column`, of declared type
/// `declared`: it sets the time, with the fraction of a second the type keeps (MariaDB's
/// `DATETIME(6) ... ON UPDATE CURRENT_TIMESTAMP` writes microseconds), when another of
/// `all_columns` (name, and what is stored of a rounded one) changed and the statement did
/// not set the column itself.
pub fn on_update_trigger(
    schema: Option<&str>,
    table: &str,
    column: &str,
    declared: &str,
    all_columns: &[(&str, Option<stored_rounding::Rounding>)],
) -> String {
    let fraction = declared
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(digits, _)| digits.trim().parse::<u8>().ok())
        .filter(|p| (1..=6).contains(p));
    let now = fraction.map_or_else(
        || "CURRENT_TIMESTAMP".to_owned(),
        |p| format!("{}({p})", expr::NOW_FN),
    );
    let col = quote(column);
    let changed = all_columns
        .iter()
        .filter(|(c, _)| *c != column)
        .map(|(c, rounding)| stored_rounding::changed(c, *rounding))
        .collect::<Vec<_>>();
    let changed = if changed.is_empty() {
        String::new()
    } else {
        format!(" AND ({})", changed.join(" OR "))
    };
    format!(
        "CREATE TRIGGER {} AFTER UPDATE ON {t} FOR EACH ROW WHEN NEW.{col} IS OLD.{col}{changed} \
         BEGIN UPDATE {t} SET {col} = {now} WHERE rowid = NEW.rowid; END",
        index_name(schema, table, &format!("{column}__on_update")),
        t = quote(table),
    )
}
