//! Database-qualified names (`shop.items`). SQLite names the connection's own database
//! `main` and every other one by the name it was attached under, so a qualifier that is the
//! current database becomes `main`, and the others are reported so the engine can attach
//! those databases before the statement runs.
//!
//! This works on tokens, before parsing: `a.b` is a database-qualified table when `a` is a
//! database, and a column of table `a` otherwise; only the engine knows which names are
//! databases. A table or alias named like the current database would be read as the
//! database (`main.col`), so such a name must be qualified with its table name instead.

use sqlparser::tokenizer::{Token, Word};

/// Rewrites qualifiers naming `current_db` to `main`; returns the other qualifiers seen (the
/// first part of each `a.b`), in order of appearance, without duplicates.
pub fn qualify(mut tokens: Vec<Token>, current_db: Option<&str>) -> (Vec<Token>, Vec<String>) {
    let mut others: Vec<String> = Vec::new();
    for i in 0..tokens.len() {
        let starts_name = i == 0 || !matches!(tokens.get(i - 1), Some(Token::Period));
        let qualifies = matches!(tokens.get(i + 1), Some(Token::Period))
            && matches!(tokens.get(i + 2), Some(Token::Word(_)));
        if !starts_name || !qualifies {
            continue;
        }
        let Some(Token::Word(word)) = tokens.get_mut(i) else {
            continue;
        };
        if Some(word.value.as_str()) == current_db {
            *word = Word {
                value: "main".into(),
                quote_style: None,
                keyword: sqlparser::keywords::Keyword::NoKeyword,
            };
        } else if !others.contains(&word.value) {
            others.push(word.value.clone());
        }
    }
    (tokens, others)
}

/// Whether `sql` names `schema` as a qualifier (`information_schema.TABLES`), outside
/// strings and comments.
#[must_use]
pub fn names_schema(tokens: &[Token], schema: &str) -> bool {
    tokens.windows(2).any(|w| {
        matches!(w, [Token::Word(word), Token::Period] if word.value.eq_ignore_ascii_case(schema))
    })
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn run(sql: &str, db: Option<&str>) -> (String, Vec<String>) {
        let tokens = Tokenizer::new(&MySqlDialect {}, sql).tokenize().unwrap();
        let (tokens, others) = qualify(tokens, db);
        (tokens.iter().map(ToString::to_string).collect(), others)
    }

    #[test]
    fn rewrites_the_current_database_to_main_and_reports_the_others() {
        let (sql, others) = run(
            "SELECT i.name FROM shop.items i JOIN `crm`.`customers` c ON c.id = i.id",
            Some("shop"),
        );
        assert_eq!(
            sql,
            "SELECT i.name FROM main.items i JOIN `crm`.`customers` c ON c.id = i.id"
        );
        assert_eq!(others, ["i", "crm", "c"]);
    }

    #[test]
    fn leaves_three_part_names_second_parts_alone() {
        let (sql, _) = run("SELECT shop.items.id FROM shop.items", Some("shop"));
        assert_eq!(sql, "SELECT main.items.id FROM main.items");
        let (sql, others) = run("SELECT 1", None);
        assert_eq!((sql.as_str(), others.len()), ("SELECT 1", 0));
    }
}
