//! Queries in parentheses, which MySQL takes and SQLite does not (`near "(": syntax error`):
//! `(SELECT 1) UNION (SELECT 2)`, `SELECT a FROM t UNION (SELECT b FROM u ORDER BY b LIMIT
//! 1)`, `(SELECT 1)`. One with no clauses of its own becomes its body; one with an `ORDER
//! BY`, a `LIMIT` or a `WITH` becomes a derived table of every column it has (`SELECT * FROM
//! (...) AS ...`), which keeps its names and applies its clauses to it alone, as MySQL does.

use std::sync::OnceLock;

use sqlparser::ast::{SetExpr, Statement, TableFactor};
use sqlparser::parser::Parser;

use crate::mysql_dialect::Mysql;

/// The name the derived table gets (SQLite needs none; the name shows nowhere).
const DERIVED: &str = "shim_parenthesized";

/// `body` without the parentheses SQLite refuses, if it is a query in parentheses.
pub(super) fn unparenthesized(body: &mut SetExpr) {
    if !matches!(body, SetExpr::Query(_)) {
        return;
    }
    let Some(mut wrapper) = template() else {
        return;
    };
    let SetExpr::Query(inner) = std::mem::replace(body, wrapper.clone()) else {
        return;
    };
    let plain = inner.with.is_none()
        && inner.order_by.is_none()
        && inner.limit_clause.is_none()
        && inner.fetch.is_none()
        && inner.locks.is_empty();
    if plain {
        *body = *inner.body;
        // `((SELECT 1))`.
        unparenthesized(body);
        return;
    }
    if let SetExpr::Select(select) = &mut wrapper
        && let Some(from) = select.from.first_mut()
        && let TableFactor::Derived { subquery, .. } = &mut from.relation
    {
        *subquery = inner;
    }
    *body = wrapper;
}

/// `SELECT * FROM (SELECT 1) AS shim_parenthesized`, parsed once (`None` cannot happen: it
/// is a constant).
fn template() -> Option<SetExpr> {
    static TEMPLATE: OnceLock<Option<SetExpr>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let sql = format!("SELECT * FROM (SELECT 1) AS {DERIVED}");
            let statement = Parser::new(&Mysql)
                .try_with_sql(&sql)
                .and_then(|mut p| p.parse_statement())
                .ok()?;
            match statement {
                Statement::Query(q) => Some(*q.body),
                _ => None,
            }
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(sql: &str) -> String {
        crate::dialect::translate(sql).unwrap().statements.concat()
    }

    #[test]
    fn a_branch_without_clauses_loses_its_parentheses() {
        assert_eq!(
            translated("(SELECT 1) UNION (SELECT 2)"),
            "SELECT 1 UNION SELECT 2"
        );
        assert_eq!(translated("((SELECT 1))"), "SELECT 1");
        assert_eq!(
            translated("SELECT 1 UNION ALL (SELECT 2) ORDER BY 1"),
            "SELECT 1 UNION ALL SELECT 2 ORDER BY 1"
        );
    }

    #[test]
    fn a_branch_with_its_own_order_or_limit_becomes_a_derived_table() {
        let sql = translated("SELECT a FROM t UNION (SELECT b FROM u ORDER BY b LIMIT 1)");
        assert!(
            sql.ends_with(&format!(
                "UNION SELECT * FROM (SELECT b FROM u ORDER BY b LIMIT 1) AS {DERIVED}"
            )),
            "{sql}"
        );
    }
}
