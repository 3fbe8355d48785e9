//! MySQL's strict mode (`STRICT_TRANS_TABLES`, MariaDB's default) for the values written to a
//! column, as SQLite `CHECK` constraints on each column a `CREATE TABLE` or `ALTER TABLE`
//! defines.
//!
//! SQLite stores any value in any column: `'abc'` in an `INT`, eight characters in a
//! `VARCHAR(3)`, `300` in a `TINYINT`, text in a `JSON` column. MariaDB refuses each of them,
//! and a shim that kept them would answer with values MariaDB could never hold. The checks run
//! after SQLite's type affinity has converted what it can losslessly (`'12'` is the integer
//! 12 in an `INT`, as MariaDB reads it), so what they refuse is what MariaDB refuses, or a
//! value MariaDB would round (`1.5` in an `INT`): an error rather than another value.
//!
//! | type | refused | error |
//! |---|---|---|
//! | integers | a value that is not an integer | 1366 |
//! | integers | outside the type's range (`UNSIGNED`: from 0) | 1264 |
//! | `DECIMAL(p,s)` | not a number; `p - s` digits before the point exceeded | 1366; 1264 |
//! | `FLOAT`, `DOUBLE` | not a number | 1366 |
//! | `FLOAT`, `DOUBLE` | beyond a 4-byte float (`FLOAT`), below 0 (`UNSIGNED`) | 1264 |
//! | `CHAR(n)`, `VARCHAR(n)` | more than `n` characters | 1406 |
//! | `BINARY(n)`, `VARBINARY(n)`, `TINYTEXT`/`TINYBLOB`, `TEXT`/`BLOB` | more than `n` (255, 65,535) bytes | 1406 |
//! | `JSON` | not valid JSON | 1366 |
//!
//! Each constraint is named `mysql_<kind> <column>`, which SQLite puts in its error message
//! ([`violated`] reads it back). Not checked: dates and times (stored as text as written),
//! the `m - d` digits a `FLOAT(m,d)` allows before its point, `BIT`, `YEAR` (a `DECIMAL`'s and
//! a `FLOAT`'s digits after the point are rounded when stored: `stored_rounding`). Tables
//! created by an older shim keep the columns they had, without checks.

use crate::sql_error::SqlError;

/// The largest 4-byte float (C's `FLT_MAX`).
const FLOAT_MAX: f64 = 3.402_823_466_385_288_6e38;

/// SQLite's message for a failed `CHECK` constraint, before the constraint's name.
const CHECK_FAILED: &str = "CHECK constraint failed: ";

/// What a check refuses; its name is the constraint name's first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Decimal,
    Double,
    Range,
    Length,
    Json,
}

impl Kind {
    const ALL: [Self; 6] = [
        Self::Integer,
        Self::Decimal,
        Self::Double,
        Self::Range,
        Self::Length,
        Self::Json,
    ];

    const fn name(self) -> &'static str {
        match self {
            Self::Integer => "mysql_integer",
            Self::Decimal => "mysql_decimal",
            Self::Double => "mysql_double",
            Self::Range => "mysql_range",
            Self::Length => "mysql_length",
            Self::Json => "mysql_json",
        }
    }

    fn error(self, column: &str) -> SqlError {
        match self {
            Self::Integer => SqlError::incorrect_value("integer", column),
            Self::Decimal => SqlError::incorrect_value("decimal", column),
            Self::Double => SqlError::incorrect_value("double", column),
            Self::Json => SqlError::incorrect_value("JSON", column),
            Self::Range => SqlError::out_of_range(column),
            Self::Length => SqlError::data_too_long(column),
        }
    }
}

/// The checks for a column named `column` (unquoted) of the declared type `declared` (as the
/// dialect prints it: upper case, `INT UNSIGNED`, `VARCHAR(40)`, `DECIMAL(10,2)`), each a
/// column constraint's text.
pub(super) fn column_checks(declared: &str, column: &str) -> Vec<String> {
    let q = super::super::quote(column);
    let check = |kind: Kind, condition: String| {
        format!(
            "CONSTRAINT {} CHECK ({condition})",
            super::super::quote(&format!("{} {column}", kind.name()))
        )
    };
    let (base, numbers) = super::declared_parts(declared);
    let base = base.as_str();
    let unsigned = declared.contains("UNSIGNED");
    let number = |i: usize| numbers.get(i).copied();
    let is_integer = format!("typeof({q}) IN ('integer', 'null')");
    let is_number = format!("typeof({q}) IN ('integer', 'real', 'null')");
    let at_most = |bytes: bool, n: u64| {
        let measured = if bytes {
            format!("CAST({q} AS BLOB)")
        } else {
            q.clone()
        };
        check(Kind::Length, format!("length({measured}) <= {n}"))
    };
    match base {
        "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "INTEGER" | "BIGINT" => {
            let bits = match base {
                "TINYINT" => 8,
                "SMALLINT" => 16,
                "MEDIUMINT" => 24,
                "BIGINT" => 64,
                _ => 32,
            };
            let (low, high): (i128, i128) = if unsigned {
                (0, (1 << bits) - 1)
            } else {
                (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
            };
            let mut checks = vec![check(Kind::Integer, is_integer)];
            // SQLite's integers are BIGINT's range already.
            if bits < 64 || unsigned {
                checks.push(check(
                    Kind::Range,
                    format!("typeof({q}) <> 'integer' OR {q} BETWEEN {low} AND {high}"),
                ));
            }
            checks
        }
        "DECIMAL" | "NUMERIC" | "DEC" | "FIXED" => {
            let precision = number(0).unwrap_or(10);
            let scale = number(1).unwrap_or(0);
            let digits = precision.saturating_sub(scale);
            let mut range = format!("abs(round({q}, {scale})) < 1e{digits}");
            if unsigned {
                range.push_str(&format!(" AND {q} >= 0"));
            }
            vec![
                check(Kind::Decimal, is_number),
                check(
                    Kind::Range,
                    format!("typeof({q}) NOT IN ('integer', 'real') OR ({range})"),
                ),
            ]
        }
        "FLOAT" | "DOUBLE" | "REAL" => {
            let mut limits = Vec::new();
            // A 4-byte FLOAT (up to 24 bits of precision) holds at most FLT_MAX.
            if base == "FLOAT" && (numbers.len() != 1 || number(0).is_some_and(|p| p <= 24)) {
                limits.push(format!("abs({q}) <= {FLOAT_MAX:e}"));
            }
            if unsigned {
                limits.push(format!("{q} >= 0"));
            }
            let mut checks = vec![check(Kind::Double, is_number)];
            if !limits.is_empty() {
                checks.push(check(
                    Kind::Range,
                    format!(
                        "typeof({q}) NOT IN ('integer', 'real') OR ({})",
                        limits.join(" AND ")
                    ),
                ));
            }
            checks
        }
        "CHAR" | "VARCHAR" | "NCHAR" | "NVARCHAR" | "CHARACTER" => {
            // CHAR without a length is CHAR(1).
            vec![at_most(false, number(0).unwrap_or(1))]
        }
        "BINARY" | "VARBINARY" => vec![at_most(true, number(0).unwrap_or(1))],
        "TINYTEXT" | "TINYBLOB" => vec![at_most(true, 255)],
        "TEXT" | "BLOB" if numbers.is_empty() => vec![at_most(true, 65_535)],
        "JSON" => vec![check(Kind::Json, format!("{q} IS NULL OR json_valid({q})"))],
        _ => Vec::new(),
    }
}

/// The MySQL error for SQLite's `message` when it names one of these checks.
pub fn violated(message: &str) -> Option<SqlError> {
    let name = message.strip_prefix(CHECK_FAILED)?;
    let (kind, column) = name.split_once(' ')?;
    let kind = Kind::ALL.into_iter().find(|k| k.name() == kind)?;
    Some(kind.error(column))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_get_a_type_and_a_range() {
        assert_eq!(
            column_checks("TINYINT UNSIGNED", "n"),
            [
                "CONSTRAINT `mysql_integer n` CHECK (typeof(`n`) IN ('integer', 'null'))",
                "CONSTRAINT `mysql_range n` CHECK (typeof(`n`) <> 'integer' OR `n` BETWEEN 0 AND 255)",
            ]
        );
        assert!(column_checks("INT", "n")[1].contains("BETWEEN -2147483648 AND 2147483647"));
        assert!(column_checks("TINYINT(1)", "n")[1].contains("BETWEEN -128 AND 127"));
        assert_eq!(column_checks("BIGINT", "n").len(), 1);
        assert!(
            column_checks("BIGINT UNSIGNED", "n")[1].contains("BETWEEN 0 AND 18446744073709551615")
        );
    }

    #[test]
    fn lengths_count_characters_or_bytes() {
        assert_eq!(
            column_checks("VARCHAR(40)", "a`b"),
            ["CONSTRAINT `mysql_length a``b` CHECK (length(`a``b`) <= 40)"]
        );
        assert!(column_checks("VARBINARY(2)", "b")[0].contains("length(CAST(`b` AS BLOB)) <= 2"));
        assert!(column_checks("TEXT", "b")[0].contains("<= 65535"));
        assert!(column_checks("CHAR", "b")[0].contains("<= 1"));
        assert!(column_checks("MEDIUMTEXT", "b").is_empty());
        assert!(column_checks("DATETIME", "b").is_empty());
    }

    #[test]
    fn decimals_keep_their_digits_before_the_point() {
        let checks = column_checks("DECIMAL(5,2)", "c");
        assert!(checks[1].contains("abs(round(`c`, 2)) < 1e3"), "{checks:?}");
        assert!(column_checks("DECIMAL", "c")[1].contains("< 1e10"));
        assert!(column_checks("DECIMAL(5,2) UNSIGNED", "c")[1].contains("`c` >= 0"));
    }

    #[test]
    fn a_failed_check_is_mysqls_error_for_the_column() {
        let e = violated("CHECK constraint failed: mysql_integer my col").unwrap();
        assert_eq!(e.code(), 1366);
        assert!(e.message.contains("'my col'"), "{e}");
        assert_eq!(
            violated("CHECK constraint failed: mysql_length b")
                .unwrap()
                .code(),
            1406
        );
        assert_eq!(
            violated("CHECK constraint failed: mysql_range b")
                .unwrap()
                .code(),
            1264
        );
        assert_eq!(violated("CHECK constraint failed: price > 0"), None);
        assert_eq!(violated("CHECK constraint failed: mysql_other b"), None);
    }
}
