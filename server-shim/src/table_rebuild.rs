//! The text of a table rebuilt with changes ([`crate::dialect::Rebuild`]): SQLite's `ALTER
//! TABLE` can add, drop and rename columns but not change one or add a constraint, so
//! `MODIFY`/`CHANGE COLUMN`, `ALTER COLUMN .. SET|DROP DEFAULT` and `ADD FOREIGN KEY|CHECK`
//! create the table again (SQLite's documented procedure for "other kinds of table schema
//! changes", run by `sqlite.rs`). This module only rewrites the stored `CREATE TABLE`: pure,
//! text in and text out.
//!
//! The stored definition is the shim's own (`dialect::ddl::create_table` printed it, SQLite
//! kept it as written), so it is split on its top-level commas into column definitions and
//! table constraints; a changed column's definition is replaced whole, a default is changed
//! in that column's definition as sqlparser reads it, a constraint is appended.

use sqlparser::ast::{ColumnOption, Statement};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;

use crate::dialect::Change;
use crate::sql_error::SqlError;

/// The rebuilt table's `CREATE TABLE`, and the columns its rows are copied through.
#[derive(Debug, PartialEq, Eq)]
pub struct Rewritten {
    /// `CREATE TABLE <new_name> (...)`.
    pub create: String,
    /// The columns to copy (all but generated ones), quoted, in order.
    pub copied: Vec<String>,
}

/// Rewrites `create` (a table's stored `CREATE TABLE`) with `changes`, for a table named
/// `new_name` (already quoted and qualified). A column change names the column as it is
/// now (a rename is made before, in place).
///
/// # Errors
/// 1054 for a column the table does not have; 1064 when the stored definition cannot be
/// read (not one the shim wrote).
pub fn rewrite(create: &str, changes: &[Change], new_name: &str) -> Result<Rewritten, SqlError> {
    let (items, tail) = split_definition(create)
        .ok_or_else(|| SqlError::syntax("the table's stored definition cannot be read"))?;
    let mut items: Vec<String> = items.into_iter().map(str::to_owned).collect();
    for change in changes {
        match change {
            Change::Column {
                new, definition, ..
            } => {
                let item = column_item(&mut items, new)?;
                definition.clone_into(item);
            }
            Change::Default { column, default } => {
                let item = column_item(&mut items, column)?;
                *item = with_default(item, default.as_deref())?;
            }
            Change::Constraint(constraint) => items.push(constraint.clone()),
            Change::DropForeignKey { table, name } => {
                let at = foreign_key_item(&items, table, name)
                    .ok_or_else(|| SqlError::cant_drop_key(name))?;
                items.remove(at);
            }
        }
    }
    let copied = items
        .iter()
        .filter(|item| !item.to_ascii_uppercase().contains(" GENERATED ALWAYS "))
        .filter_map(|item| item_column(item))
        .map(|name| format!("`{}`", name.replace('`', "``")))
        .collect();
    Ok(Rewritten {
        create: format!("CREATE TABLE {new_name} ({}){tail}", items.join(", ")),
        copied,
    })
}

/// The place among `items` of the table-level foreign key named `name`: declared so
/// (`CONSTRAINT name FOREIGN KEY`), or the unnamed one InnoDB numbers so
/// (`<table>_ibfk_<n>`, the n-th unnamed table-level key).
fn foreign_key_item(items: &[String], table: &str, name: &str) -> Option<usize> {
    let mut unnamed = 0;
    items.iter().position(|item| {
        let item = item.trim_start();
        let upper = item.to_ascii_uppercase();
        if let Some(rest) = item
            .get("CONSTRAINT ".len()..)
            .filter(|_| upper.starts_with("CONSTRAINT "))
        {
            let declared = item_column(rest).unwrap_or_default();
            upper.contains(" FOREIGN KEY") && declared.eq_ignore_ascii_case(name)
        } else if upper.starts_with("FOREIGN KEY") {
            unnamed += 1;
            format!("{table}_ibfk_{unnamed}").eq_ignore_ascii_case(name)
        } else {
            false
        }
    })
}

/// The definition of column `name` among `items`.
fn column_item<'a>(items: &'a mut [String], name: &str) -> Result<&'a mut String, SqlError> {
    items
        .iter_mut()
        .find(|item| item_column(item).is_some_and(|c| c.eq_ignore_ascii_case(name)))
        .ok_or_else(|| SqlError::unknown_column(name))
}

/// `item` (one column's definition) with its `DEFAULT` replaced by `default` (SQLite's text
/// of the value) or removed.
fn with_default(item: &str, default: Option<&str>) -> Result<String, SqlError> {
    let unreadable = || SqlError::syntax("the column's stored definition cannot be read");
    let statements = Parser::parse_sql(&SQLiteDialect {}, &format!("CREATE TABLE t ({item})"))
        .map_err(|_| unreadable())?;
    let Some(Statement::CreateTable(mut table)) = statements.into_iter().next() else {
        return Err(unreadable());
    };
    let mut column = table.columns.pop().ok_or_else(unreadable)?;
    column
        .options
        .retain(|o| !matches!(o.option, ColumnOption::Default(_)));
    Ok(match default {
        Some(value) => format!("{column} DEFAULT {value}"),
        None => column.to_string(),
    })
}

/// The parenthesised list of a `CREATE TABLE`, split on its top-level commas (each item
/// trimmed), and what follows its closing parenthesis (`WITHOUT ROWID`, `STRICT`).
fn split_definition(create: &str) -> Option<(Vec<&str>, &str)> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = None;
    let mut quote: Option<char> = None;
    let mut chars = create.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if let Some(q) = quote {
            if c == q {
                // A doubled quote is one quote character inside the quoted text.
                if chars.peek().is_some_and(|&(_, next)| next == q) {
                    chars.next();
                } else {
                    quote = None;
                }
            }
            continue;
        }
        match c {
            '\'' | '"' | '`' => quote = Some(c),
            '(' => {
                depth += 1;
                if depth == 1 {
                    start = Some(i + 1);
                }
            }
            ',' if depth == 1 => {
                items.push(create.get(start?..i)?.trim());
                start = Some(i + 1);
            }
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    items.push(create.get(start?..i)?.trim());
                    return Some((items, create.get(i + 1..)?));
                }
            }
            _ => {}
        }
    }
    None
}

/// The column an item defines (`None` for a table constraint).
fn item_column(item: &str) -> Option<String> {
    let item = item.trim_start();
    let mut chars = item.chars();
    match chars.next()? {
        q @ ('`' | '"') => {
            let mut name = String::new();
            let mut chars = chars.peekable();
            while let Some(c) = chars.next() {
                if c == q {
                    if chars.peek() == Some(&q) {
                        chars.next();
                    } else {
                        return Some(name);
                    }
                }
                name.push(c);
            }
            None
        }
        _ => {
            let word: String = item
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            let constraint = ["CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"]
                .iter()
                .any(|k| k.eq_ignore_ascii_case(&word));
            (!word.is_empty() && !constraint).then_some(word)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORED: &str = "CREATE TABLE `t` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, \
        `name` VARCHAR(40) COLLATE NOCASE NOT NULL DEFAULT 'it''s, (fine)', \
        `kind` TEXT COLLATE NOCASE CONSTRAINT `enum` CHECK (`kind` IN ('a','b')), \
        \"n\" INT, FOREIGN KEY (`n`) REFERENCES `other` (`id`))";

    #[test]
    fn splits_a_stored_definition_on_its_top_level_commas_only() {
        let (items, tail) = split_definition(STORED).unwrap();
        assert_eq!(items.len(), 5, "{items:?}");
        assert_eq!(
            items[1],
            "`name` VARCHAR(40) COLLATE NOCASE NOT NULL DEFAULT 'it''s, (fine)'"
        );
        assert_eq!(tail, "");
        let names: Vec<_> = items.iter().map(|i| item_column(i)).collect();
        assert_eq!(
            names,
            [
                Some("id".into()),
                Some("name".into()),
                Some("kind".into()),
                Some("n".into()),
                None
            ]
        );
        let (_, tail) = split_definition("CREATE TABLE x (a INT) WITHOUT ROWID").unwrap();
        assert_eq!(tail, " WITHOUT ROWID");
        assert_eq!(split_definition("CREATE TABLE x (a INT"), None);
    }

    #[test]
    fn replaces_a_column_changes_a_default_and_appends_a_constraint() {
        let changes = [
            Change::Column {
                old: "n".into(),
                new: "N".into(),
                definition: "`n` BIGINT NOT NULL".into(),
                on_update: false,
            },
            Change::Default {
                column: "name".into(),
                default: None,
            },
            Change::Default {
                column: "kind".into(),
                default: Some("'b'".into()),
            },
            Change::Constraint("CHECK (`n` > 0)".into()),
        ];
        let rewritten = rewrite(STORED, &changes, "`t__rebuild`").unwrap();
        assert_eq!(
            rewritten.create,
            "CREATE TABLE `t__rebuild` (`id` INTEGER PRIMARY KEY AUTOINCREMENT, \
             `name` VARCHAR(40) COLLATE NOCASE NOT NULL, \
             `kind` TEXT COLLATE NOCASE CONSTRAINT `enum` CHECK (`kind` IN ('a', 'b')) DEFAULT 'b', \
             `n` BIGINT NOT NULL, FOREIGN KEY (`n`) REFERENCES `other` (`id`), CHECK (`n` > 0))"
        );
        assert_eq!(rewritten.copied, ["`id`", "`name`", "`kind`", "`n`"]);
        let missing = rewrite(
            STORED,
            &[Change::Default {
                column: "nope".into(),
                default: None,
            }],
            "`x`",
        );
        assert_eq!(missing.unwrap_err().code(), 1054);
    }
}
