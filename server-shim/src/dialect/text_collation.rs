//! A text function's result compared, sorted and grouped in the connection's collation, as
//! MariaDB does it.
//!
//! SQLite gives a column its collation (`mysql_general_ci` for the shim's text columns), but
//! an expression has none: `CONCAT(first, ' ', last) = 'john smith'` was false for
//! `John Smith` (MariaDB: true, `utf8mb4_general_ci` ignores case), and `ORDER BY
//! CONCAT(...)` sorted by bytes (`Zed` before `adam`). The result of a text function is given
//! the collation explicitly where it is compared with something that is not a column (a
//! column's own collation applies otherwise, as SQLite does), and as an `ORDER BY` or
//! `GROUP BY` term. Which calls give text is read before the translation rewrites them
//! (`CONCAT` becomes `||`).

use sqlparser::ast::{Expr, Ident, ObjectName};

/// The collation the engine registers for text as MariaDB's `utf8mb4_general_ci` orders it
/// (`crate::general_ci`): every text column's but a `_bin` one's.
pub const GENERAL_CI: &str = "mysql_general_ci";

/// The collation the engine registers for text as MariaDB's `utf8mb4_bin` orders it
/// (`crate::utf8mb4_bin`): a column declared with a `_bin` collation.
pub const BIN: &str = "mysql_bin";

/// The collation the engine registers for text as MariaDB's `utf8mb4_nopad_bin` (and MySQL
/// 8's `utf8mb4_0900_bin`) orders it: code points, trailing spaces counted.
pub const NOPAD_BIN: &str = "mysql_nopad_bin";

/// MySQL's name of SQLite's collation `sqlite` of a text column.
#[must_use]
pub fn mysql_collation(sqlite: &str) -> &'static str {
    if sqlite.eq_ignore_ascii_case(BIN) {
        "utf8mb4_bin"
    } else if sqlite.eq_ignore_ascii_case(NOPAD_BIN) {
        "utf8mb4_nopad_bin"
    } else {
        "utf8mb4_general_ci"
    }
}

/// Whether SQLite's collation `sqlite` compares text by code points (a MySQL `_bin` one):
/// `LIKE` on it folds nothing.
#[must_use]
pub fn is_binary_collation(sqlite: &str) -> bool {
    mysql_collation(sqlite).ends_with("_bin")
}

/// MySQL functions whose result is text whatever their arguments.
const TEXT_FUNCTIONS: &[&str] = &[
    "CONCAT",
    "CONCAT_WS",
    "LOWER",
    "UPPER",
    "LCASE",
    "UCASE",
    "SUBSTR",
    "SUBSTRING",
    "MID",
    "LEFT",
    "RIGHT",
    "LTRIM",
    "RTRIM",
    "REPLACE",
    "LPAD",
    "RPAD",
    "REVERSE",
    "REPEAT",
    "SUBSTRING_INDEX",
];

/// Whether `e`, as the client wrote it, is a call of a text function.
pub fn is_text_call(e: &Expr) -> bool {
    match e {
        Expr::Function(f) => match f.name.0.as_slice() {
            [part] => part.as_ident().is_some_and(|i| {
                TEXT_FUNCTIONS
                    .iter()
                    .any(|name| i.value.eq_ignore_ascii_case(name))
            }),
            _ => false,
        },
        Expr::Substring { .. } | Expr::Trim { .. } => true,
        Expr::Nested(inner) => is_text_call(inner),
        _ => false,
    }
}

/// Whether `e` is a column: its own collation decides a comparison with it.
pub fn is_column(e: &Expr) -> bool {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => true,
        Expr::Nested(inner) => is_column(inner),
        _ => false,
    }
}

/// `e` (translated) in the connection's collation.
pub fn in_collation(e: &mut Expr) {
    let inner = core::mem::replace(e, Expr::Value(sqlparser::ast::Value::Null.into()));
    *e = Expr::Collate {
        expr: Box::new(Expr::Nested(Box::new(inner))),
        collation: ObjectName::from(vec![Ident::new(GENERAL_CI)]),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql_dialect::Mysql;
    use sqlparser::parser::Parser;

    fn parsed(text: &str) -> Expr {
        Parser::new(&Mysql)
            .try_with_sql(text)
            .and_then(|mut p| p.parse_expr())
            .unwrap()
    }

    #[test]
    fn tells_text_calls_and_columns() {
        for text in [
            "CONCAT(a, b)",
            "lower(a)",
            "SUBSTRING(a FROM 2)",
            "TRIM(a)",
            "(UPPER(a))",
        ] {
            assert!(is_text_call(&parsed(text)), "{text}");
        }
        for text in ["a", "COUNT(a)", "'x'", "a + 1", "t.CONCAT(a)"] {
            assert!(!is_text_call(&parsed(text)), "{text}");
        }
        assert!(is_column(&parsed("t.a")) && is_column(&parsed("(a)")));
        assert!(!is_column(&parsed("LOWER(a)")));
        let mut e = parsed("a || b");
        in_collation(&mut e);
        assert_eq!(e.to_string(), "(a || b) COLLATE mysql_general_ci");
    }
}
