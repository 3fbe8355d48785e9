//! Queries in parentheses, which MySQL takes and SQLite does not (`near "(": syntax error`):
//! `(SELECT 1) UNION (SELECT 2)`, `SELECT a FROM t UNION (SELECT b FROM u ORDER BY b LIMIT
//! 1)`, `(SELECT 1)`. One with no clauses of its own becomes its body; one with an `ORDER
//! BY`, a `LIMIT` or a `WITH` becomes a derived table of every column it has (`SELECT * FROM
//! (...) AS ...`), which keeps its names and applies its clauses to it alone, as MySQL does.

use std::sync::OnceLock;

use sqlparser::ast::{Query, SetExpr, Statement, TableFactor};
use sqlparser::parser::Parser;

use crate::mysql_dialect::Mysql;

/// The name the derived table gets (SQLite needs none; the name shows nowhere).
const DERIVED: &str = "shim_parenthesized";

/// `body` without the parentheses SQLite refuses, if it is a query in parentheses.
pub(super) fn unparenthesized(body: &mut SetExpr) {
    if !matches!(body, SetExpr::Query(_)) {
        return;
    }
    let Some(placeholder) = template() else {
        return;
    };
    let SetExpr::Query(inner) = std::mem::replace(body, placeholder) else {
        return;
    };
    // A set operation in parentheses keeps them as a derived table: printed bare, SQLite would
    // read `1 UNION ALL (1 UNION 1)` as `(1 UNION ALL 1) UNION 1`.
    let plain = inner.with.is_none()
        && inner.order_by.is_none()
        && inner.limit_clause.is_none()
        && inner.fetch.is_none()
        && inner.locks.is_empty()
        && matches!(*inner.body, SetExpr::Select(_) | SetExpr::Values(_));
    if plain {
        *body = *inner.body;
        return;
    }
    // `body` is the template now: its derived table takes the query.
    fill_derived(body, |subquery| *subquery = inner);
}

/// `q` as the query in its parentheses when it is nothing more (`(SELECT p.id, c.id ...
/// ORDER BY p.id LIMIT 5)` alone, or as a subquery): run as it is, with no derived table
/// around it, whose duplicate column names SQLite would rename (`id:1`).
pub(super) fn hoisted(q: &mut Query) {
    while q.with.is_none()
        && q.order_by.is_none()
        && q.limit_clause.is_none()
        && q.fetch.is_none()
        && q.locks.is_empty()
    {
        let SetExpr::Query(inner) = q.body.as_ref() else {
            return;
        };
        *q = (**inner).clone();
    }
}

/// A set operation whose right operand is itself one (`1 UNION 2 INTERSECT 3`, where
/// `INTERSECT` binds first): the right one becomes a derived table, as SQLite reads a chain of
/// them left to right.
pub(super) fn grouped(body: &mut SetExpr) {
    let SetExpr::SetOperation { right, .. } = body else {
        return;
    };
    if !matches!(**right, SetExpr::SetOperation { .. }) {
        return;
    }
    let Some(placeholder) = template() else {
        return;
    };
    let operation = std::mem::replace(&mut **right, placeholder);
    fill_derived(right, |subquery| *subquery.body = operation);
}

/// Sets the query of `wrapper`'s derived table (`wrapper` is [`template`]'s) with `fill`.
fn fill_derived(wrapper: &mut SetExpr, fill: impl FnOnce(&mut Box<Query>)) {
    if let SetExpr::Select(select) = wrapper
        && let Some(from) = select.from.first_mut()
        && let TableFactor::Derived { subquery, .. } = &mut from.relation
    {
        fill(subquery);
    }
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
        // Alone, with its own clauses: the query itself.
        assert_eq!(
            translated("(SELECT a, a FROM t ORDER BY a LIMIT 5)"),
            "SELECT a, a FROM t ORDER BY a LIMIT 5"
        );
        // A set operation in parentheses stays one, as a derived table.
        assert_eq!(
            translated("SELECT 1 UNION ALL (SELECT 1 UNION SELECT 1)"),
            format!("SELECT 1 UNION ALL SELECT * FROM (SELECT 1 UNION SELECT 1) AS {DERIVED}")
        );
        assert_eq!(
            translated("SELECT 1 UNION SELECT 2 INTERSECT SELECT 3"),
            format!("SELECT 1 UNION SELECT * FROM (SELECT 2 INTERSECT SELECT 3) AS {DERIVED}")
        );
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
