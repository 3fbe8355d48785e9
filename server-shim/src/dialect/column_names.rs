//! The names MySQL gives the result columns of a query that have no alias: the expression's
//! text as the client wrote it (`41+1`, `count(*)`, `@@sql_mode`), a string literal's value.
//! SQLite names such a column by the translated text (`41 + 1`,
//! `mysql_system_variable('sql_mode')`), so a translation carries MySQL's names for the
//! executor to put on the result ([`super::Translation::column_names`]). Applications that read
//! a row by column name (`$row['COUNT(*)']`, a dict cursor) see what MySQL would send.

use sqlparser::ast::{Expr, Query, Select, SelectItem, SetExpr, Statement, TableFactor};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

use super::SELECT_MODIFIERS;
use super::cursor::Significant;

/// Words that may follow `SELECT` before its first item, besides [`SELECT_MODIFIERS`].
const QUANTIFIERS: &[&str] = &["ALL", "DISTINCT", "DISTINCTROW", "SQL_CALC_FOUND_ROWS"];

/// Keywords that end a select list at its own nesting level.
const AFTER_ITEMS: &[Keyword] = &[
    Keyword::FROM,
    Keyword::INTO,
    Keyword::WHERE,
    Keyword::GROUP,
    Keyword::HAVING,
    Keyword::ORDER,
    Keyword::LIMIT,
    Keyword::WINDOW,
    Keyword::UNION,
    Keyword::EXCEPT,
    Keyword::INTERSECT,
    Keyword::FOR,
    Keyword::LOCK,
];

/// The text of each item of the first `SELECT`'s list in `tokens` (the statement as the client
/// wrote it, comments removed), trimmed; a string literal standing alone as its value. `None`
/// when the statement is not a `SELECT` (a `WITH` puts another `SELECT` first).
pub(super) fn select_list(tokens: &[Token]) -> Option<Vec<String>> {
    // Most statements are not queries (a dump's INSERTs run to megabytes): told at once.
    let starts_a_query = tokens
        .iter()
        .find(|t| !matches!(t, Token::Whitespace(_) | Token::LParen))
        .is_some_and(|t| matches!(t, Token::Word(w) if w.keyword == Keyword::SELECT));
    if !starts_a_query {
        return None;
    }
    let s = Significant::new(tokens);
    let select = (0..s.len()).find(|&i| !matches!(s.get(i), Some(Token::LParen)))?;
    if !s.is_keyword(select, Keyword::SELECT) {
        return None;
    }
    let mut first = select + 1;
    while SELECT_MODIFIERS
        .iter()
        .chain(QUANTIFIERS)
        .any(|m| s.is_word(first, m))
    {
        first += 1;
    }
    let mut items = Vec::new();
    let mut item: Vec<&Token> = Vec::new();
    let mut depth = 0_usize;
    let mut after_period = false;
    for token in tokens.get(s.position(first)?..)? {
        let qualified = after_period;
        after_period = match token {
            Token::Period => true,
            Token::Whitespace(_) => after_period,
            _ => false,
        };
        match token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => break,
            Token::RParen => depth -= 1,
            Token::SemiColon | Token::EOF if depth == 0 => break,
            Token::Comma if depth == 0 => {
                items.push(name_of(&item));
                item.clear();
                continue;
            }
            // `t.limit` is a column named like a keyword.
            Token::Word(w)
                if depth == 0
                    && !qualified
                    && w.quote_style.is_none()
                    && AFTER_ITEMS.contains(&w.keyword) =>
            {
                break;
            }
            _ => {}
        }
        item.push(token);
    }
    items.push(name_of(&item));
    Some(items)
}

/// An item's name from its tokens.
fn name_of(item: &[&Token]) -> String {
    let significant: Vec<&&Token> = item
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    if let [Token::SingleQuotedString(value) | Token::DoubleQuotedString(value)] = significant[..] {
        return value.clone();
    }
    item.iter()
        .map(ToString::to_string)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// MySQL's name for each result column of `statement` where SQLite's differs (an unaliased
/// expression that is not a column), from `items` ([`select_list`]); empty when the query's
/// columns cannot be matched to the items one to one (a `*`, a `WITH`, a count that differs).
pub(super) fn of(statement: &Statement, items: Option<Vec<String>>) -> Vec<Option<String>> {
    let (Statement::Query(query), Some(items)) = (statement, items) else {
        return Vec::new();
    };
    let Some(select) = first_select(query) else {
        return Vec::new();
    };
    let projection = &select.projection;
    if projection.len() != items.len() {
        return Vec::new();
    }
    let catalog = reads_information_schema_only(select);
    let mut names = Vec::with_capacity(items.len());
    for (item, text) in projection.iter().zip(items) {
        names.push(match item {
            // MySQL 8 names a column of its data dictionary's views as the view does, in
            // upper case, however the query spells it (`SELECT table_name` gives
            // `TABLE_NAME`); drizzle-kit reads the rows by those names.
            SelectItem::UnnamedExpr(e) if catalog && is_column(e) => column_name(e)
                .map(str::to_ascii_uppercase)
                .filter(|upper| column_name(e).is_some_and(|name| name != upper)),
            SelectItem::UnnamedExpr(e) if is_column(e) => None,
            SelectItem::ExprWithAlias { .. } | SelectItem::ExprWithAliases { .. } => None,
            SelectItem::UnnamedExpr(_) => Some(text),
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => return Vec::new(),
        });
    }
    if names.iter().all(Option::is_none) {
        return Vec::new();
    }
    names
}

/// Whether `e` is a column (`a`, `t.a`, `(a)`, `DISTINCT(a)`): named by the column, as
/// SQLite names it. sqlparser reads `@@sql_mode` and `@x` as names; they are variables.
fn is_column(e: &Expr) -> bool {
    match e {
        Expr::Identifier(id) => !id.value.starts_with('@'),
        Expr::CompoundIdentifier(_) => true,
        Expr::Nested(inner) => is_column(inner),
        _ => false,
    }
}

/// The name of the column `e` (`a`, `t.a`, `(a)`).
fn column_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Identifier(id) => Some(&id.value),
        Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.as_str()),
        Expr::Nested(inner) => column_name(inner),
        _ => None,
    }
}

/// Whether every table `select` reads is one of `information_schema`'s, named with it.
fn reads_information_schema_only(select: &Select) -> bool {
    let in_catalog = |factor: &TableFactor| {
        matches!(factor, TableFactor::Table { name, .. }
        if name.0.len() == 2
            && name.0.first().and_then(|p| p.as_ident()).is_some_and(|schema| {
                schema.value.eq_ignore_ascii_case("information_schema")
            }))
    };
    !select.from.is_empty()
        && select.from.iter().all(|from| {
            in_catalog(&from.relation) && from.joins.iter().all(|j| in_catalog(&j.relation))
        })
}

/// The query's first `SELECT` (the one a `UNION` takes its names from); none under a `WITH`.
fn first_select(query: &Query) -> Option<&Select> {
    if query.with.is_some() {
        return None;
    }
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::Select(select) => return Some(select),
            SetExpr::SetOperation { left, .. } => body = left,
            SetExpr::Query(inner) if inner.with.is_none() => body = inner.body.as_ref(),
            _ => return None,
        }
    }
}
