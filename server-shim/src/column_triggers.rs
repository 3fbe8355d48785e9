//! The triggers the dialect gives a table's columns — `ON UPDATE CURRENT_TIMESTAMP`
//! (`<table>__<column>__on_update`) and the rounding of `DECIMAL` and `FLOAT` values as MySQL
//! stores them (`<table>__<column>__rounding_insert|update`) — made again from the table's
//! columns after a change SQLite makes around them: a table rebuilt, a column dropped. Each
//! names the table's other columns or its column's type, so a copy of the old text would be
//! stale.

use rusqlite::Connection;

use crate::dialect;

/// A trigger of ours on a table.
pub struct Ours {
    /// Its name.
    pub name: String,
    /// The column it sets the time of, for an `ON UPDATE` trigger.
    pub on_update: Option<String>,
}

/// Whether the trigger `name` on `table`, created by `sql`, is one of ours, and which. An
/// `ON UPDATE` trigger's column is read from its text, which SQLite rewrites when the column
/// is renamed (its name keeps the old one).
pub fn ours(table: &str, name: &str, sql: &str) -> Option<Ours> {
    let is_on_update = name
        .strip_prefix(table)
        .and_then(|rest| rest.strip_prefix("__"))
        .is_some_and(|rest| rest.ends_with("__on_update"));
    if !is_on_update {
        return dialect::rounded_column(table, name).map(|_| Ours {
            name: name.to_owned(),
            on_update: None,
        });
    }
    Some(Ours {
        name: name.to_owned(),
        on_update: Some(set_column(sql)?),
    })
}

/// The column an `ON UPDATE` trigger's text sets: `... SET <name> = <now> WHERE rowid =
/// NEW.rowid; END` (`<now>` is `CURRENT_TIMESTAMP` or `mysql_now(p)`), the name quoted with
/// backticks (as the dialect writes it) or double quotes (as SQLite's `RENAME COLUMN`
/// rewrites it).
fn set_column(sql: &str) -> Option<String> {
    let (head, _now) = sql
        .strip_suffix(" WHERE rowid = NEW.rowid; END")?
        .rsplit_once(" = ")?;
    let quoted = &head[head.rfind(" SET ")? + 5..];
    let quote = quoted.chars().next().filter(|q| *q == '`' || *q == '"')?;
    let inner = quoted.strip_prefix(quote)?.strip_suffix(quote)?;
    let doubled: String = [quote, quote].iter().collect();
    Some(inner.replace(&doubled, &quote.to_string()))
}

/// The columns of `table` (in SQLite's database `schema`) with their declared types.
fn columns(
    conn: &Connection,
    schema: &str,
    table: &str,
) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare("SELECT name, type FROM pragma_table_info(?1, ?2) ORDER BY cid")?;
    let rows = stmt.query_map([table, schema], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Each of `declared`'s columns with what MySQL stores of its values where that is not what
/// SQLite keeps.
fn with_rounding(declared: &[(String, String)]) -> Vec<(&str, Option<dialect::Rounding>)> {
    declared
        .iter()
        .map(|(c, t)| (c.as_str(), dialect::Rounding::of(t)))
        .collect()
}

/// Makes the column triggers of `table` (in SQLite's database `schema`, named for MySQL's
/// database `qualifier` where it is not `main`) from its columns as they are now: the
/// `ON UPDATE` trigger of each of `on_update` that is still a column, and the rounding of
/// each `DECIMAL` and `FLOAT` column, whose stored values are rounded first (a narrower
/// scale, or rows stored before the column had its triggers).
///
/// # Errors
/// SQLite's.
pub fn make(
    conn: &Connection,
    schema: &str,
    qualifier: Option<&str>,
    table: &str,
    on_update: &[String],
) -> rusqlite::Result<()> {
    let declared = columns(conn, schema, table)?;
    let all = with_rounding(&declared);
    for (column, rounding) in &all {
        if let Some(rounding) = rounding {
            conn.execute_batch(&dialect::round_stored(
                Some(schema),
                table,
                column,
                *rounding,
            ))?;
            for trigger in dialect::rounding_triggers(qualifier, table, column, *rounding) {
                conn.execute_batch(&trigger)?;
            }
        }
    }
    for column in on_update {
        if let Some((_, declared)) = declared.iter().find(|(c, _)| c == column) {
            conn.execute_batch(&dialect::on_update_trigger(
                qualifier, table, column, declared, &all,
            ))?;
        }
    }
    Ok(())
}

/// Drops the `ON UPDATE` trigger `trigger` of `column` of `table` (in SQLite's database
/// `schema`, named for MySQL's database `qualifier` where it is not `main`) and makes it again
/// from the table's columns as they are now.
///
/// # Errors
/// SQLite's.
pub fn on_update_again(
    conn: &Connection,
    schema: &str,
    qualifier: Option<&str>,
    table: &str,
    trigger: &str,
    column: &str,
) -> rusqlite::Result<()> {
    let declared = columns(conn, schema, table)?;
    let Some((_, column_type)) = declared.iter().find(|(c, _)| c == column) else {
        return Ok(());
    };
    let all = with_rounding(&declared);
    conn.execute(
        &format!(
            "DROP TRIGGER \"{}\".\"{}\"",
            schema.replace('"', "\"\""),
            trigger.replace('"', "\"\"")
        ),
        [],
    )?;
    conn.execute_batch(&dialect::on_update_trigger(
        qualifier,
        table,
        column,
        column_type,
        &all,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_on_update_triggers_column_is_read_from_its_text_also_after_a_rename() {
        let dialects = "CREATE TRIGGER `t__ts__on_update` AFTER UPDATE ON `t` FOR EACH ROW WHEN \
            NEW.`ts` IS OLD.`ts` AND (NEW.`d` IS NOT OLD.`d`) BEGIN UPDATE `t` SET `ts` = \
            CURRENT_TIMESTAMP WHERE rowid = NEW.rowid; END";
        let renamed = "CREATE TRIGGER `t__ts__on_update` AFTER UPDATE ON `t` FOR EACH ROW WHEN \
            NEW.\"new \"\"ts\" IS OLD.\"new \"\"ts\" BEGIN UPDATE `t` SET \"new \"\"ts\" = \
            CURRENT_TIMESTAMP WHERE rowid = NEW.rowid; END";
        let column = |sql| ours("t", "t__ts__on_update", sql).and_then(|o| o.on_update);
        assert_eq!(column(dialects).as_deref(), Some("ts"));
        let fraction = dialects.replace("CURRENT_TIMESTAMP", "mysql_now(6)");
        assert_eq!(column(&fraction).as_deref(), Some("ts"));
        assert_eq!(column(renamed).as_deref(), Some("new \"ts"));
        let rounding = ours("t", "t__d__rounding_insert", "CREATE TRIGGER ...").unwrap();
        assert_eq!(
            (rounding.name.as_str(), rounding.on_update),
            ("t__d__rounding_insert", None)
        );
        assert!(ours("t", "t__d__mine", "CREATE TRIGGER ...").is_none());
        assert!(ours("u", "t__ts__on_update", dialects).is_none());
    }
}
