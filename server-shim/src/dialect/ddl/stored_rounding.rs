//! `DECIMAL(p,s)` values rounded to their scale when they are stored, as MySQL stores them.
//!
//! SQLite keeps a `DECIMAL` column's value as the double it was given: `1.005` in a
//! `DECIMAL(10,2)` read back as `1.01` (rounded when written), but `SUM` over three of them was
//! `3.02` where MariaDB's is `3.03`, `WHERE d = 1.01` found nothing, and `0.1 + 0.2` stayed
//! `0.30000000000000004`. Each `DECIMAL` column gets two triggers, `AFTER INSERT` and
//! `AFTER UPDATE OF` it, that set a value not at its scale to the value MySQL stores
//! (`mysql_round`: half away from zero, from the shortest text of the double), named
//! `<table>__<column>__decimal_insert` and `__decimal_update`. A rounded value that differs
//! from the stored one needs a second write; a value already at its scale costs the `WHEN`.
//!
//! A trigger's `UPDATE` is an update of the row: an `ON UPDATE CURRENT_TIMESTAMP` column's
//! trigger compares `DECIMAL` columns rounded ([`changed`]), so the rounding alone never sets
//! the time, and neither does an `UPDATE` that writes the value the column already holds
//! once rounded (as in MySQL, where the row did not change).

use super::super::quote;
use super::index_name;

/// The suffixes of the triggers' names, after `<table>__<column>`.
pub const SUFFIXES: [&str; 2] = ["__decimal_insert", "__decimal_update"];

/// The scale of a column of declared type `declared` (as the dialect prints it:
/// `DECIMAL(10,2)`, `NUMERIC(5)`, `DECIMAL`), if it is a `DECIMAL`.
pub fn decimal_scale(declared: &str) -> Option<u64> {
    let upper = declared.to_ascii_uppercase();
    let (base, args) = match upper.split_once('(') {
        Some((base, rest)) => (base.trim(), rest.split_once(')').map_or("", |(a, _)| a)),
        None => (upper.split_whitespace().next().unwrap_or_default(), ""),
    };
    if !matches!(base, "DECIMAL" | "NUMERIC" | "DEC" | "FIXED") {
        return None;
    }
    Some(
        args.split(',')
            .nth(1)
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0),
    )
}

/// The two triggers that round column `column` of `table` (in `schema`, if given) to
/// `scale` decimals when a row is inserted or the column updated.
pub fn decimal_triggers(
    schema: Option<&str>,
    table: &str,
    column: &str,
    scale: u64,
) -> [String; 2] {
    let t = quote(table);
    let c = quote(column);
    let rounded = format!("mysql_round(NEW.{c}, {scale})");
    let body = format!(
        "FOR EACH ROW WHEN NEW.{c} IS NOT {rounded} \
         BEGIN UPDATE {t} SET {c} = {rounded} WHERE rowid = NEW.rowid; END"
    );
    let [insert, update] = SUFFIXES;
    [
        format!(
            "CREATE TRIGGER {} AFTER INSERT ON {t} {body}",
            index_name(schema, table, &format!("{column}{insert}"))
        ),
        format!(
            "CREATE TRIGGER {} AFTER UPDATE OF {c} ON {t} {body}",
            index_name(schema, table, &format!("{column}{update}"))
        ),
    ]
}

/// The `UPDATE` that rounds the values column `column` of `table` (in `schema`, if given)
/// holds already, as an `ALTER TABLE` that adds or changes a `DECIMAL` column stores them.
pub fn round_stored(schema: Option<&str>, table: &str, column: &str, scale: u64) -> String {
    let c = quote(column);
    let t = match schema {
        Some(s) => format!("{}.{}", quote(s), quote(table)),
        None => quote(table),
    };
    let rounded = format!("mysql_round({c}, {scale})");
    format!("UPDATE {t} SET {c} = {rounded} WHERE {c} IS NOT {rounded}")
}

/// Whether column `column` (a `DECIMAL` of `scale` decimals, if `Some`) differs between
/// `OLD` and `NEW`, as an SQLite condition: a `DECIMAL` compared at its scale.
pub fn changed(column: &str, scale: Option<u64>) -> String {
    let q = quote(column);
    match scale {
        Some(s) => format!("mysql_round(NEW.{q}, {s}) IS NOT mysql_round(OLD.{q}, {s})"),
        None => format!("NEW.{q} IS NOT OLD.{q}"),
    }
}

/// The name of the column a trigger of ours on `table` rounds, from the trigger's name.
pub fn rounded_column<'a>(table: &str, trigger: &'a str) -> Option<&'a str> {
    let rest = trigger.strip_prefix(table)?.strip_prefix("__")?;
    SUFFIXES.iter().find_map(|s| rest.strip_suffix(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_scale_of_decimal_types_only() {
        assert_eq!(decimal_scale("DECIMAL(10,2)"), Some(2));
        assert_eq!(decimal_scale("decimal(10, 4) unsigned"), Some(4));
        assert_eq!(decimal_scale("NUMERIC(5)"), Some(0));
        assert_eq!(decimal_scale("DECIMAL"), Some(0));
        assert_eq!(decimal_scale("DOUBLE"), None);
        assert_eq!(decimal_scale("INT"), None);
        assert_eq!(decimal_scale(""), None);
    }

    #[test]
    fn triggers_round_inserted_and_updated_values_of_their_column() {
        let [insert, update] = decimal_triggers(Some("shop"), "t", "price", 2);
        assert_eq!(
            insert,
            "CREATE TRIGGER `shop`.`t__price__decimal_insert` AFTER INSERT ON `t` FOR EACH ROW \
             WHEN NEW.`price` IS NOT mysql_round(NEW.`price`, 2) BEGIN UPDATE `t` SET `price` = \
             mysql_round(NEW.`price`, 2) WHERE rowid = NEW.rowid; END"
        );
        assert!(update.starts_with(
            "CREATE TRIGGER `shop`.`t__price__decimal_update` AFTER UPDATE OF `price` ON `t` "
        ));
        assert_eq!(
            rounded_column("t", "t__price__decimal_update"),
            Some("price")
        );
        assert_eq!(rounded_column("t", "t__price__on_update"), None);
        assert_eq!(rounded_column("u", "t__price__decimal_insert"), None);
    }
}
