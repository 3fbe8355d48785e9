//! Schema statements, MySQL to SQLite: `CREATE TABLE`, `CREATE INDEX`,
//! `CREATE VIEW`, `ALTER TABLE`, `DROP TABLE|VIEW|INDEX`, `TRUNCATE`, `RENAME TABLE`.
//!
//! `CREATE TABLE` (and the column definitions `ALTER TABLE ... ADD COLUMN` shares with it)
//! is printed by [`mod@create_table`]; this module dispatches, and translates the statements
//! that change one thing: indexes, views, `ALTER TABLE`, drops and renames.

mod create_table;
mod stored_rounding;
mod value_checks;

use sqlparser::ast::{
    AlterColumnOperation, AlterTable, AlterTableOperation, ColumnOption, CreateIndex, CreateView,
    Ident, IndexConstraint, ObjectName, ObjectType, OrderBySort, RenameTableNameKind, Statement,
    TableConstraint, Truncate, UniqueConstraint,
};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

pub use self::create_table::on_update_trigger;
use self::create_table::{
    Index, check_constraint, column_definition, create_table, default, foreign_key,
    has_auto_increment, index_columns, index_statements,
};
pub use self::stored_rounding::{
    Rounding, decimal_scale, round_stored, rounded_column, rounding_triggers,
};
pub use self::value_checks::violated;
use super::cursor::{self, Significant};
use super::expr::GENERAL_CI;
use super::{StatementKind, Translation, expr, quote};
use crate::sql_error::SqlError;

/// Translates a parsed schema statement.
///
/// # Errors
/// 1235 naming what SQLite cannot do (`MODIFY COLUMN`, `CREATE TABLE ... LIKE`, ...).
pub fn translate(statement: Statement) -> Result<Translation, SqlError> {
    let mut typed_columns = Vec::new();
    let statements = match statement {
        Statement::CreateTable(mut ct) => {
            // `CREATE TABLE t AS SELECT CONCAT(d)` stores what the query shows.
            if let Some(query) = &mut ct.query {
                typed_columns = super::typed_arguments::mark(query);
            }
            create_table(ct)?
        }
        Statement::CreateIndex(ci) => vec![create_index(&ci)?],
        Statement::CreateView(CreateView {
            or_replace,
            materialized,
            name,
            columns,
            mut query,
            if_not_exists,
            temporary,
            ..
        }) => {
            if materialized {
                return Err(SqlError::not_supported("materialized views"));
            }
            if temporary {
                // MySQL has none; SQLite's would be seen by every session (as a temporary
                // table would: `create_table`).
                return Err(SqlError::not_supported("CREATE TEMPORARY VIEW"));
            }
            expr::query(&mut query)?;
            let mut out = Vec::new();
            if or_replace {
                out.push(format!("DROP VIEW IF EXISTS {}", object(&name)?));
            }
            let cols = if columns.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    columns
                        .iter()
                        .map(|c| quote(&c.name.value))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            out.push(format!(
                "CREATE VIEW {}{}{cols} AS {query}",
                if if_not_exists { "IF NOT EXISTS " } else { "" },
                object(&name)?,
            ));
            out
        }
        Statement::AlterTable(AlterTable {
            name,
            if_exists,
            operations,
            location,
            on_cluster,
            ..
        }) => {
            if if_exists || location.is_some() || on_cluster.is_some() {
                return Err(SqlError::not_supported("this ALTER TABLE"));
            }
            let (statements, rebuild) = alter_table(&name, operations)?;
            return Ok(Translation {
                statements,
                kind: StatementKind::Ddl,
                rebuild,
                result_types: Vec::new(),
                found_rows: None,
                column_names: Vec::new(),
                typed_columns: Vec::new(),
                from_tables: Vec::new(),
            });
        }
        Statement::Drop {
            object_type,
            if_exists,
            names,
            ..
        } => {
            let what = match object_type {
                ObjectType::Table => "TABLE",
                ObjectType::View => "VIEW",
                ObjectType::Database | ObjectType::Schema => {
                    return Err(SqlError::not_supported("DROP DATABASE"));
                }
                _ => return Err(SqlError::not_supported("DROP of this object")),
            };
            names
                .iter()
                .map(|n| {
                    Ok(format!(
                        "DROP {what} {}{}",
                        if if_exists { "IF EXISTS " } else { "" },
                        object(n)?
                    ))
                })
                .collect::<Result<Vec<_>, SqlError>>()?
        }
        Statement::Truncate(Truncate {
            table_names,
            partitions,
            ..
        }) => {
            if partitions.is_some() {
                return Err(SqlError::not_supported("TRUNCATE ... PARTITION"));
            }
            // SQLite's truncate optimization makes an unconditional DELETE as fast.
            table_names
                .iter()
                .map(|t| Ok(format!("DELETE FROM {}", object(&t.name)?)))
                .collect::<Result<Vec<_>, SqlError>>()?
        }
        Statement::RenameTable(renames) => renames
            .iter()
            .map(|r| rename(&r.old_name, &r.new_name))
            .collect::<Result<Vec<_>, SqlError>>()?,
        other => return Err(SqlError::not_supported(&super::statement_keywords(&other))),
    };
    Ok(Translation {
        statements,
        kind: StatementKind::Ddl,
        rebuild: None,
        result_types: Vec::new(),
        found_rows: None,
        column_names: Vec::new(),
        typed_columns,
        from_tables: Vec::new(),
    })
}

/// A table (or view) name quoted for SQLite: `schema`.`name` or `name`.
fn object(name: &ObjectName) -> Result<String, SqlError> {
    let (schema, table) = split(name)?;
    Ok(match schema {
        Some(s) => format!("{}.{}", quote(s), quote(table)),
        None => quote(table),
    })
}

/// (schema, table) of a one- or two-part name.
fn split(name: &ObjectName) -> Result<(Option<&str>, &str), SqlError> {
    let parts = name
        .0
        .iter()
        .map(|p| p.as_ident().map(|i| i.value.as_str()))
        .collect::<Option<Vec<_>>>();
    match parts.as_deref() {
        Some([table]) => Ok((None, table)),
        Some([schema, table]) => Ok((Some(schema), table)),
        _ => Err(SqlError::syntax(&format!("bad name {name}"))),
    }
}

/// The SQLite name of MySQL index `index` on `table`, with the table's schema:
/// `schema`.`table__index`.
fn index_name(schema: Option<&str>, table: &str, index: &str) -> String {
    let name = quote(&format!("{table}__{index}"));
    match schema {
        Some(s) => format!("{}.{name}", quote(s)),
        None => name,
    }
}

fn create_index(ci: &CreateIndex) -> Result<String, SqlError> {
    let Some(name) = &ci.name else {
        return Err(SqlError::syntax("CREATE INDEX needs a name"));
    };
    if ci.concurrently
        || !ci.include.is_empty()
        || ci.nulls_distinct.is_some()
        || !ci.with.is_empty()
        || ci.predicate.is_some()
    {
        return Err(SqlError::not_supported("this CREATE INDEX"));
    }
    let (schema, table) = split(&ci.table_name)?;
    let (_, index) = split(name)?;
    let columns = ci
        .columns
        .iter()
        .map(|c| {
            let mut e = c.column.expr.clone();
            expr::expr(&mut e)?;
            let direction = match c.column.options.sort {
                Some(OrderBySort::Asc) => " ASC",
                Some(OrderBySort::Desc) => " DESC",
                _ => "",
            };
            Ok(format!("{e}{direction}"))
        })
        .collect::<Result<Vec<_>, SqlError>>()?;
    Ok(format!(
        "CREATE {}INDEX {}{} ON {} ({})",
        if ci.unique { "UNIQUE " } else { "" },
        if ci.if_not_exists {
            "IF NOT EXISTS "
        } else {
            ""
        },
        index_name(schema, table, index),
        quote(table),
        columns.join(", ")
    ))
}

/// A table SQLite must rebuild to change (`sqlite.rs` runs it): SQLite's `ALTER TABLE` cannot
/// change a column or add a constraint, so the table is created again under another name with
/// the changes made to its stored definition, its rows copied, the old one dropped and the new
/// one renamed, its indexes and triggers created again, in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    pub schema: Option<String>,
    pub table: String,
    pub changes: Vec<Change>,
}

/// One change a [`Rebuild`] makes to the table's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `MODIFY`/`CHANGE COLUMN`: column `old` (renamed to `new` first when they differ)
    /// gets `definition` (SQLite's, as `CREATE TABLE` prints it); `on_update` when the
    /// column has `ON UPDATE CURRENT_TIMESTAMP` (its trigger is made again, or dropped).
    Column {
        old: String,
        new: String,
        definition: String,
        on_update: bool,
    },
    /// `ALTER COLUMN c SET DEFAULT x` (`Some`, SQLite's text of `x`) or `DROP DEFAULT`.
    Default {
        column: String,
        default: Option<String>,
    },
    /// `ADD [CONSTRAINT] FOREIGN KEY|CHECK`: the table constraint, as SQLite's text.
    Constraint(String),
    /// `DROP FOREIGN KEY name`: a table-level key declared with that name, or the unnamed one
    /// InnoDB would call so (`<table>_ibfk_<n>`).
    DropForeignKey {
        /// The table (for the names of its unnamed keys).
        table: String,
        /// The key's name.
        name: String,
    },
}

/// A declared type's name in upper case and its numeric arguments, which SQLite's grammar
/// takes last (`DECIMAL UNSIGNED(7,2)` is `("DECIMAL", [7, 2])`).
fn declared_parts(declared: &str) -> (String, Vec<u64>) {
    let (words, args) = match declared.split_once('(') {
        Some((words, rest)) => (words, rest.split_once(')').map_or("", |(args, _)| args)),
        None => (declared, ""),
    };
    let base = words.split_whitespace().next().unwrap_or_default();
    let numbers = args
        .split(',')
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    (base.to_ascii_uppercase(), numbers)
}

/// `ALTER TABLE`: the SQLite statements it takes, and the table rebuild its operations need
/// (run first).
fn alter_table(
    name: &ObjectName,
    operations: Vec<AlterTableOperation>,
) -> Result<(Vec<String>, Option<Box<Rebuild>>), SqlError> {
    let (schema, table) = split(name)?;
    let target = object(name)?;
    let mut out = Vec::new();
    let mut changes = Vec::new();
    for operation in operations {
        match operation {
            AlterTableOperation::AddColumn {
                column_def,
                column_position,
                if_not_exists,
                ..
            } => {
                if column_position.is_some() {
                    return Err(SqlError::not_supported("ADD COLUMN ... FIRST/AFTER"));
                }
                if if_not_exists {
                    return Err(SqlError::not_supported("ADD COLUMN IF NOT EXISTS"));
                }
                if has_auto_increment(&column_def)
                    || column_def
                        .options
                        .iter()
                        .any(|o| matches!(o.option, ColumnOption::PrimaryKey(_)))
                {
                    return Err(SqlError::not_supported(
                        "ADD COLUMN with PRIMARY KEY/AUTO_INCREMENT",
                    ));
                }
                let mut indexes = Vec::new();
                let mut on_update = Vec::new();
                let definition = column_definition(
                    &column_def,
                    false,
                    GENERAL_CI,
                    &mut indexes,
                    &mut on_update,
                )?;
                if !on_update.is_empty() {
                    return Err(SqlError::not_supported("ADD COLUMN ... ON UPDATE"));
                }
                out.push(format!("ALTER TABLE {target} ADD COLUMN {definition}"));
                out.extend(index_statements(schema, table, indexes, false)?);
                if let Some(rounding) =
                    stored_rounding::Rounding::of(&column_def.data_type.to_string())
                {
                    // The rows there already hold the default, stored as MySQL stores it.
                    let column = &column_def.name.value;
                    out.push(stored_rounding::round_stored(
                        schema, table, column, rounding,
                    ));
                    out.extend(stored_rounding::rounding_triggers(
                        schema, table, column, rounding,
                    ));
                }
            }
            AlterTableOperation::DropColumn {
                column_names,
                if_exists: false,
                ..
            } => {
                for column_name in column_names {
                    out.push(format!(
                        "ALTER TABLE {target} DROP COLUMN {}",
                        quote(&column_name.value)
                    ));
                }
            }
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => {
                out.push(format!(
                    "ALTER TABLE {target} RENAME COLUMN {} TO {}",
                    quote(&old_column_name.value),
                    quote(&new_column_name.value)
                ));
            }
            AlterTableOperation::RenameTable {
                table_name: RenameTableNameKind::To(to) | RenameTableNameKind::As(to),
            } => {
                out.push(rename(name, &to)?);
            }
            AlterTableOperation::AddConstraint {
                constraint:
                    TableConstraint::Index(IndexConstraint {
                        name: index,
                        columns,
                        ..
                    }),
                ..
            } => {
                out.extend(index_statements(
                    schema,
                    table,
                    vec![Index {
                        unique: false,
                        name: index.map(|i| i.value).unwrap_or_default(),
                        columns: index_columns(columns)?,
                    }],
                    false,
                )?);
            }
            AlterTableOperation::AddConstraint {
                constraint:
                    TableConstraint::Unique(UniqueConstraint {
                        name: n,
                        index_name: index,
                        columns,
                        ..
                    }),
                ..
            } => {
                out.extend(index_statements(
                    schema,
                    table,
                    vec![Index {
                        unique: true,
                        name: index.or(n).map(|i| i.value).unwrap_or_default(),
                        columns: index_columns(columns)?,
                    }],
                    false,
                )?);
            }
            AlterTableOperation::DropIndex { name: index } => {
                out.push(format!(
                    "DROP INDEX {}",
                    index_name(schema, table, &index.value)
                ));
            }
            AlterTableOperation::DropConstraint {
                name: index,
                if_exists,
                ..
            } => {
                // `ALTER TABLE t DROP KEY i` parses as this.
                out.push(format!(
                    "DROP INDEX {}{}",
                    if if_exists { "IF EXISTS " } else { "" },
                    index_name(schema, table, &index.value)
                ));
            }
            AlterTableOperation::ChangeColumn {
                old_name,
                new_name,
                data_type,
                options,
                column_position,
            } => {
                changes.push(changed_column(
                    schema,
                    table,
                    &old_name,
                    new_name,
                    data_type,
                    options,
                    column_position.is_some(),
                    &mut out,
                )?);
            }
            AlterTableOperation::ModifyColumn {
                col_name,
                data_type,
                options,
                column_position,
            } => {
                changes.push(changed_column(
                    schema,
                    table,
                    &col_name,
                    col_name.clone(),
                    data_type,
                    options,
                    column_position.is_some(),
                    &mut out,
                )?);
            }
            AlterTableOperation::AlterColumn {
                column_name,
                op: AlterColumnOperation::SetDefault { value },
            } => changes.push(Change::Default {
                column: column_name.value,
                default: Some(default(&value)?),
            }),
            AlterTableOperation::AlterColumn {
                column_name,
                op: AlterColumnOperation::DropDefault,
            } => changes.push(Change::Default {
                column: column_name.value,
                default: None,
            }),
            AlterTableOperation::AlterColumn { .. } => {
                return Err(SqlError::not_supported(
                    "ALTER TABLE ... ALTER COLUMN other than SET/DROP DEFAULT",
                ));
            }
            AlterTableOperation::AddConstraint {
                constraint: TableConstraint::ForeignKey(fk),
                ..
            } => changes.push(Change::Constraint(foreign_key(&fk)?)),
            AlterTableOperation::AddConstraint {
                constraint: TableConstraint::Check(check),
                ..
            } => changes.push(Change::Constraint(check_constraint(&check)?)),
            AlterTableOperation::DropForeignKey { name, .. } => {
                changes.push(Change::DropForeignKey {
                    table: table.to_owned(),
                    name: name.value,
                });
            }
            AlterTableOperation::AddConstraint { .. }
            | AlterTableOperation::DropPrimaryKey { .. } => {
                return Err(SqlError::not_supported(
                    "ALTER TABLE ... ADD/DROP PRIMARY KEY",
                ));
            }
            _ => return Err(SqlError::not_supported("this ALTER TABLE operation")),
        }
    }
    let rebuild = (!changes.is_empty()).then(|| {
        Box::new(Rebuild {
            schema: schema.map(str::to_owned),
            table: table.to_owned(),
            changes,
        })
    });
    Ok((out, rebuild))
}

/// `MODIFY`/`CHANGE COLUMN old new <definition>`: the change, and in `out` the indexes an
/// inline `UNIQUE` asks for.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of one ALTER TABLE operation, as sqlparser gives them"
)]
fn changed_column(
    schema: Option<&str>,
    table: &str,
    old: &Ident,
    new: Ident,
    data_type: sqlparser::ast::DataType,
    options: Vec<ColumnOption>,
    positioned: bool,
    out: &mut Vec<String>,
) -> Result<Change, SqlError> {
    if positioned {
        return Err(SqlError::not_supported(
            "MODIFY/CHANGE COLUMN ... FIRST/AFTER",
        ));
    }
    let column = sqlparser::ast::ColumnDef {
        name: new,
        data_type,
        options: options
            .into_iter()
            .map(|option| sqlparser::ast::ColumnOptionDef { name: None, option })
            .collect(),
    };
    let mut indexes = Vec::new();
    let mut on_update = Vec::new();
    let definition = column_definition(
        &column,
        has_auto_increment(&column),
        GENERAL_CI,
        &mut indexes,
        &mut on_update,
    )?;
    out.extend(index_statements(schema, table, indexes, false)?);
    Ok(Change::Column {
        old: old.value.clone(),
        new: column.name.value,
        definition,
        on_update: !on_update.is_empty(),
    })
}

/// `ALTER TABLE a RENAME TO b`; SQLite cannot move a table to another database.
fn rename(from: &ObjectName, to: &ObjectName) -> Result<String, SqlError> {
    let (from_schema, _) = split(from)?;
    let (to_schema, to_table) = split(to)?;
    if to_schema.is_some_and(|s| Some(s) != from_schema) {
        return Err(SqlError::not_supported("RENAME TABLE to another database"));
    }
    Ok(format!(
        "ALTER TABLE {} RENAME TO {}",
        object(from)?,
        quote(to_table)
    ))
}

/// `DROP INDEX [IF EXISTS] i ON t [ALGORITHM=..] [LOCK=..]`, recognised from its tokens:
/// sqlparser parses `DROP INDEX i ON t` but not the online-DDL options MySQL allows after
/// it. `None` for anything else.
///
/// # Errors
/// 1064 when the statement is malformed.
pub fn from_tokens(tokens: &[Token]) -> Result<Option<Translation>, SqlError> {
    let significant = Significant::new(tokens);
    let is = |i: usize, k: Keyword| significant.is_keyword(i, k);
    let words = significant.as_slice();
    if !(is(0, Keyword::DROP) && is(1, Keyword::INDEX)) {
        return Ok(None);
    }
    let if_exists = is(2, Keyword::IF) && is(3, Keyword::EXISTS);
    let rest = words
        .get(if if_exists { 4 } else { 2 }..)
        .unwrap_or_default();
    let mut parts = rest.split(
        |t| matches!(t, Token::Word(w) if w.keyword == Keyword::ON && w.quote_style.is_none()),
    );
    let (Some(index), Some(table)) = (parts.next(), parts.next()) else {
        return Ok(None);
    };
    // `ALGORITHM=...`/`LOCK=...` after the table change nothing here.
    let table_end = table.iter().position(|t| matches!(t, Token::Word(w) if w.quote_style.is_none() && (w.value.eq_ignore_ascii_case("ALGORITHM") || w.keyword == Keyword::LOCK))).unwrap_or(table.len());
    let table = name_of(table.get(..table_end).unwrap_or_default())?;
    let index = name_of(index)?;
    let (schema, table) = split(&table)?;
    let (_, index) = split(&index)?;
    Ok(Some(Translation {
        statements: vec![format!(
            "DROP INDEX {}{}",
            if if_exists { "IF EXISTS " } else { "" },
            index_name(schema, table, index)
        )],
        kind: StatementKind::Ddl,
        rebuild: None,
        result_types: Vec::new(),
        found_rows: None,
        column_names: Vec::new(),
        typed_columns: Vec::new(),
        from_tables: Vec::new(),
    }))
}

/// A name written as words separated by `.`.
fn name_of(tokens: &[&Token]) -> Result<ObjectName, SqlError> {
    let mut parts = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match (i % 2, t) {
            (0, Token::Word(w)) => parts.push(match w.quote_style {
                Some(q) => Ident::with_quote(q, w.value.clone()),
                None => Ident::new(w.value.clone()),
            }),
            (1, Token::Period) => {}
            _ => return Err(SqlError::syntax("expected a table name")),
        }
    }
    if parts.is_empty() || tokens.len().is_multiple_of(2) {
        return Err(SqlError::syntax("expected a table name"));
    }
    Ok(ObjectName::from(parts))
}

/// Removes what MySQL allows in table and index definitions and SQLite would not use:
/// `USING BTREE|HASH`, key prefix lengths (`KEY k (name(10))`, a MySQL storage limit; SQLite
/// indexes the whole value) and `ZEROFILL` (display padding only), and the `(M,D)` of
/// `DOUBLE`/`REAL` (MySQL's deprecated display width and rounding). sqlparser parses all but
/// `REAL(M,D)`, but keeps them in the tree (a prefix length as a function call); cut here,
/// `CREATE TABLE`'s printer never sees them. `FLOAT(M,D)` (the MySQL "world" sample schema's
/// `float(10,2)`) keeps its `(M,D)`: its values are stored rounded to `D` decimals
/// (`stored_rounding`).
pub fn strip_mysql_only_tokens(tokens: Vec<Token>) -> Vec<Token> {
    let mut cut = vec![false; tokens.len()];
    let s = Significant::new(&tokens);
    if !(s.is_keyword(0, Keyword::CREATE) || s.is_keyword(0, Keyword::ALTER)) {
        return tokens;
    }
    let at = |i: usize| s.position(i).unwrap_or(usize::MAX);
    // After KEY/INDEX/UNIQUE, the next `(` opens a key list; depth inside it.
    let mut awaiting_list = false;
    let mut list_depth = 0_usize;
    let mut i = 0;
    while let Some(t) = s.get(i) {
        match t {
            Token::Word(w)
                if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("ZEROFILL") =>
            {
                cursor::mark(&mut cut, at(i), at(i));
            }
            Token::Word(w)
                if w.quote_style.is_none()
                    && list_depth == 0
                    && matches!(w.keyword, Keyword::DOUBLE | Keyword::REAL) =>
            {
                if let (
                    Some(Token::LParen),
                    Some(Token::Number(..)),
                    Some(Token::Comma),
                    Some(Token::Number(..)),
                    Some(Token::RParen),
                ) = (
                    s.get(i + 1),
                    s.get(i + 2),
                    s.get(i + 3),
                    s.get(i + 4),
                    s.get(i + 5),
                ) {
                    // The `(M,D)` and the space before it; the type word stays.
                    cursor::mark(&mut cut, at(i) + 1, at(i + 5));
                    i += 5;
                }
            }
            Token::Word(w) if w.quote_style.is_none() && w.keyword == Keyword::USING => {
                if matches!(s.get(i + 1), Some(Token::Word(m)) if m.value.eq_ignore_ascii_case("BTREE") || m.value.eq_ignore_ascii_case("HASH"))
                {
                    cursor::mark(&mut cut, at(i), at(i + 1));
                    i += 1;
                }
            }
            Token::Word(w)
                if w.quote_style.is_none()
                    && list_depth == 0
                    && matches!(w.keyword, Keyword::KEY | Keyword::INDEX | Keyword::UNIQUE) =>
            {
                awaiting_list = true;
            }
            Token::LParen if awaiting_list && list_depth == 0 => {
                awaiting_list = false;
                list_depth = 1;
            }
            Token::LParen if list_depth > 0 => {
                // `name(10)` inside a key list: drop `(10)`.
                if let (Some(Token::Number(..)), Some(Token::RParen)) = (s.get(i + 1), s.get(i + 2))
                {
                    cursor::mark(&mut cut, at(i), at(i + 2));
                    i += 2;
                } else {
                    list_depth += 1;
                }
            }
            Token::RParen if list_depth > 0 => list_depth -= 1,
            Token::Comma if list_depth == 0 => awaiting_list = false,
            _ => {}
        }
        i += 1;
    }
    cursor::without(tokens, &cut)
}
