//! `DECIMAL(p,s)` and `FLOAT` values rounded when they are stored, as MySQL stores them.
//!
//! SQLite keeps a number as the double it was given. A `DECIMAL(10,2)` holding `1.005` read
//! back as `1.01` (rounded when written), but `SUM` over three of them was `3.02` where
//! MariaDB's is `3.03`, and `WHERE d = 1.01` found nothing; a `FLOAT` holding `14.96` gave
//! `g * 2 = 29.92` where MariaDB, which keeps the 4-byte float, gives `29.920000076293945`.
//! Each such column gets two triggers, `AFTER INSERT` and `AFTER UPDATE OF` it, that set a
//! value to what MySQL stores ([`Rounding`]) where it is not that already, named
//! `<table>__<column>__rounding_insert` and `__rounding_update`. A value that needs rounding
//! costs a second write; one that does not costs the `WHEN`.
//!
//! A trigger's `UPDATE` is an update of the row: an `ON UPDATE CURRENT_TIMESTAMP` column's
//! trigger compares these columns rounded ([`changed`]), so the rounding alone never sets the
//! time, and neither does an `UPDATE` that writes the value the column already holds once
//! rounded (as in MySQL, where the row did not change).

use super::super::quote;
use super::index_name;

/// The suffixes of the triggers' names, after `<table>__<column>`.
pub const SUFFIXES: [&str; 2] = ["__rounding_insert", "__rounding_update"];

/// What MySQL stores of a value written to a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// `DECIMAL(p,s)` (`NUMERIC`, `DEC`, `FIXED`): rounded to `s` decimals, half away from
    /// zero (`mysql_round`).
    Decimal(u64),
    /// `FLOAT` (`FLOAT(p)` up to 24 bits; `FLOAT(m,d)` rounded to `d` decimals first): the
    /// nearest 4-byte float (`mysql_float`).
    Float(Option<u64>),
}

impl Rounding {
    /// The rounding of a column of declared type `declared` (as the dialect prints it, the
    /// arguments last as SQLite's grammar wants them: `DECIMAL(10,2)`, `NUMERIC(5)`, `FLOAT`,
    /// `FLOAT UNSIGNED(7,2)`), if it has one.
    pub fn of(declared: &str) -> Option<Self> {
        let (base, numbers) = super::declared_parts(declared);
        match (base.as_str(), numbers.as_slice()) {
            ("DECIMAL" | "NUMERIC" | "DEC" | "FIXED", n) => {
                Some(Self::Decimal(n.get(1).copied().unwrap_or(0)))
            }
            // FLOAT(p) with more than 24 bits of precision is a DOUBLE.
            ("FLOAT", [p]) if *p > 24 => None,
            ("FLOAT", [_]) | ("FLOAT", []) => Some(Self::Float(None)),
            ("FLOAT", [_, d]) => Some(Self::Float(Some(*d))),
            _ => None,
        }
    }

    /// The SQLite expression of what is stored of `value`.
    pub fn stored(self, value: &str) -> String {
        match self {
            Self::Decimal(s) => format!("mysql_round({value}, {s})"),
            Self::Float(None) => format!("mysql_float({value})"),
            Self::Float(Some(d)) => format!("mysql_float(mysql_round({value}, {d}))"),
        }
    }
}

/// The scale of a `DECIMAL` column of declared type `declared`.
pub fn decimal_scale(declared: &str) -> Option<u64> {
    match Rounding::of(declared)? {
        Rounding::Decimal(s) => Some(s),
        Rounding::Float(_) => None,
    }
}

/// The two triggers that store column `column` of `table` (in `schema`, if given) as
/// `rounding` asks when a row is inserted or the column updated.
pub fn rounding_triggers(
    schema: Option<&str>,
    table: &str,
    column: &str,
    rounding: Rounding,
) -> [String; 2] {
    let t = quote(table);
    let c = quote(column);
    let stored = rounding.stored(&format!("NEW.{c}"));
    let body = format!(
        "FOR EACH ROW WHEN NEW.{c} IS NOT {stored} \
         BEGIN UPDATE {t} SET {c} = {stored} WHERE rowid = NEW.rowid; END"
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
/// holds already, as an `ALTER TABLE` that adds or changes such a column stores them.
pub fn round_stored(schema: Option<&str>, table: &str, column: &str, rounding: Rounding) -> String {
    let c = quote(column);
    let t = match schema {
        Some(s) => format!("{}.{}", quote(s), quote(table)),
        None => quote(table),
    };
    let stored = rounding.stored(&c);
    format!("UPDATE {t} SET {c} = {stored} WHERE {c} IS NOT {stored}")
}

/// Whether column `column` (stored with `rounding`, if any) differs between `OLD` and `NEW`,
/// as an SQLite condition: a rounded column compared as stored.
pub fn changed(column: &str, rounding: Option<Rounding>) -> String {
    let q = quote(column);
    match rounding {
        Some(r) => format!(
            "{} IS NOT {}",
            r.stored(&format!("NEW.{q}")),
            r.stored(&format!("OLD.{q}"))
        ),
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
    fn reads_what_each_declared_type_stores() {
        assert_eq!(Rounding::of("DECIMAL(10,2)"), Some(Rounding::Decimal(2)));
        assert_eq!(
            Rounding::of("decimal(10, 4) unsigned"),
            Some(Rounding::Decimal(4))
        );
        assert_eq!(Rounding::of("NUMERIC(5)"), Some(Rounding::Decimal(0)));
        assert_eq!(Rounding::of("DECIMAL"), Some(Rounding::Decimal(0)));
        assert_eq!(Rounding::of("FLOAT"), Some(Rounding::Float(None)));
        assert_eq!(Rounding::of("FLOAT(24)"), Some(Rounding::Float(None)));
        assert_eq!(Rounding::of("FLOAT(25)"), None);
        assert_eq!(
            Rounding::of("FLOAT UNSIGNED(7,2)"),
            Some(Rounding::Float(Some(2)))
        );
        assert_eq!(
            Rounding::of("DECIMAL UNSIGNED(7,3)"),
            Some(Rounding::Decimal(3))
        );
        assert_eq!(decimal_scale("FLOAT"), None);
        assert_eq!(decimal_scale("DEC(5,1)"), Some(1));
        for other in ["DOUBLE", "REAL", "INT", ""] {
            assert_eq!(Rounding::of(other), None, "{other}");
        }
    }

    #[test]
    fn triggers_round_inserted_and_updated_values_of_their_column() {
        let [insert, update] = rounding_triggers(Some("shop"), "t", "price", Rounding::Decimal(2));
        assert_eq!(
            insert,
            "CREATE TRIGGER `shop`.`t__price__rounding_insert` AFTER INSERT ON `t` FOR EACH ROW \
             WHEN NEW.`price` IS NOT mysql_round(NEW.`price`, 2) BEGIN UPDATE `t` SET `price` = \
             mysql_round(NEW.`price`, 2) WHERE rowid = NEW.rowid; END"
        );
        assert!(update.starts_with(
            "CREATE TRIGGER `shop`.`t__price__rounding_update` AFTER UPDATE OF `price` ON `t` "
        ));
        let [insert, _] = rounding_triggers(None, "t", "g", Rounding::Float(Some(1)));
        assert!(
            insert.contains("WHEN NEW.`g` IS NOT mysql_float(mysql_round(NEW.`g`, 1))"),
            "{insert}"
        );
        assert_eq!(
            rounded_column("t", "t__price__rounding_update"),
            Some("price")
        );
        assert_eq!(rounded_column("t", "t__price__on_update"), None);
        assert_eq!(rounded_column("u", "t__price__rounding_insert"), None);
    }
}
