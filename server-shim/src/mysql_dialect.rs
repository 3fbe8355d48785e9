//! The one MySQL dialect every tokenizer and parser in the shim uses (the translation in
//! [`crate::dialect`], the session's classification in [`crate::classify`], and
//! [`crate::engine`]'s statement parsing and placeholder count), so a statement is read the
//! same way wherever it is read.

use core::any::TypeId;

use sqlparser::ast::{Expr, Statement};
use sqlparser::dialect::{BindPlaceholderStyle, Dialect, MySqlDialect, Precedence};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// sqlparser's MySQL dialect with `a MOD b` (which the stock dialect does not parse) and
/// `a DIV b` parsed here, both at `*`'s precedence as in MySQL. It masquerades as
/// [`MySqlDialect`] and delegates every other hook to it, so every MySQL-only parse path
/// stays on.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mysql;

impl Mysql {
    fn infix_keyword(parser: &Parser<'_>) -> Option<Keyword> {
        match parser.peek_token().token {
            Token::Word(w) if w.quote_style.is_none() && matches!(w.keyword, Keyword::DIV) => {
                Some(Keyword::DIV)
            }
            Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("MOD") => {
                Some(Keyword::MOD)
            }
            _ => None,
        }
    }
}

impl Dialect for Mysql {
    fn dialect(&self) -> TypeId {
        TypeId::of::<MySqlDialect>()
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        MySqlDialect {}.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        MySqlDialect {}.is_identifier_part(ch)
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        MySqlDialect {}.is_delimited_identifier_start(ch)
    }
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        MySqlDialect {}.identifier_quote_style(identifier)
    }
    fn supports_string_literal_backslash_escape(&self) -> bool {
        MySqlDialect {}.supports_string_literal_backslash_escape()
    }
    fn supports_numeric_prefix(&self) -> bool {
        MySqlDialect {}.supports_numeric_prefix()
    }
    fn require_interval_qualifier(&self) -> bool {
        MySqlDialect {}.require_interval_qualifier()
    }
    fn supports_limit_comma(&self) -> bool {
        MySqlDialect {}.supports_limit_comma()
    }
    fn supports_string_literal_table_alias(&self, explicit: bool) -> bool {
        MySqlDialect {}.supports_string_literal_table_alias(explicit)
    }
    fn ordered_bind_placeholder_style(&self) -> Option<BindPlaceholderStyle> {
        MySqlDialect {}.ordered_bind_placeholder_style()
    }
    fn is_table_factor_alias(&self, explicit: bool, kw: &Keyword, parser: &mut Parser<'_>) -> bool {
        MySqlDialect {}.is_table_factor_alias(explicit, kw, parser)
    }
    fn supports_string_literal_concatenation(&self) -> bool {
        MySqlDialect {}.supports_string_literal_concatenation()
    }
    /// `'a\_b'` keeps its backslash, as MySQL does (for LIKE to use as its escape; `SELECT
    /// 'a\_b'` is `a\_b`); the dialect gives every LIKE without an `ESCAPE` MySQL's default
    /// one, `\`, since SQLite's LIKE has none unless told.
    fn ignores_wildcard_escapes(&self) -> bool {
        true
    }
    fn supports_literal_prefix_in_qualified_name(&self) -> bool {
        MySqlDialect {}.supports_literal_prefix_in_qualified_name()
    }
    fn supports_bitwise_shift_operators(&self) -> bool {
        MySqlDialect {}.supports_bitwise_shift_operators()
    }
    fn supports_singular_value_keyword(&self) -> bool {
        MySqlDialect {}.supports_singular_value_keyword()
    }
    fn supports_multiline_comment_hints(&self) -> bool {
        MySqlDialect {}.supports_multiline_comment_hints()
    }
    fn supports_create_table_select(&self) -> bool {
        MySqlDialect {}.supports_create_table_select()
    }
    fn supports_insert_set(&self) -> bool {
        MySqlDialect {}.supports_insert_set()
    }
    fn supports_user_host_grantee(&self) -> bool {
        MySqlDialect {}.supports_user_host_grantee()
    }
    fn supports_table_hints(&self) -> bool {
        MySqlDialect {}.supports_table_hints()
    }
    fn requires_single_line_comment_whitespace(&self) -> bool {
        MySqlDialect {}.requires_single_line_comment_whitespace()
    }
    fn supports_hash_comment(&self) -> bool {
        MySqlDialect {}.supports_hash_comment()
    }
    fn supports_match_against(&self) -> bool {
        MySqlDialect {}.supports_match_against()
    }
    fn supports_select_modifiers(&self) -> bool {
        MySqlDialect {}.supports_select_modifiers()
    }
    fn supports_set_names(&self) -> bool {
        MySqlDialect {}.supports_set_names()
    }
    fn supports_comma_separated_set_assignments(&self) -> bool {
        MySqlDialect {}.supports_comma_separated_set_assignments()
    }
    fn supports_alter_column_position(&self) -> bool {
        MySqlDialect {}.supports_alter_column_position()
    }
    fn supports_update_order_by(&self) -> bool {
        MySqlDialect {}.supports_update_order_by()
    }
    fn supports_data_type_signed_suffix(&self) -> bool {
        MySqlDialect {}.supports_data_type_signed_suffix()
    }
    fn supports_data_type_zerofill_suffix(&self) -> bool {
        MySqlDialect {}.supports_data_type_zerofill_suffix()
    }
    fn supports_cross_join_constraint(&self) -> bool {
        MySqlDialect {}.supports_cross_join_constraint()
    }
    fn supports_double_ampersand_operator(&self) -> bool {
        MySqlDialect {}.supports_double_ampersand_operator()
    }
    fn supports_binary_kw_as_cast(&self) -> bool {
        MySqlDialect {}.supports_binary_kw_as_cast()
    }
    fn supports_table_partitions(&self) -> bool {
        MySqlDialect {}.supports_table_partitions()
    }
    fn supports_comment_optimizer_hint(&self) -> bool {
        MySqlDialect {}.supports_comment_optimizer_hint()
    }
    fn supports_constraint_keyword_without_name(&self) -> bool {
        MySqlDialect {}.supports_constraint_keyword_without_name()
    }
    fn supports_key_column_option(&self) -> bool {
        MySqlDialect {}.supports_key_column_option()
    }
    fn supports_group_by_with_modifier(&self) -> bool {
        MySqlDialect {}.supports_group_by_with_modifier()
    }
    fn supports_left_associative_joins_without_parens(&self) -> bool {
        MySqlDialect {}.supports_left_associative_joins_without_parens()
    }
    fn parse_statement(&self, parser: &mut Parser<'_>) -> Option<Result<Statement, ParserError>> {
        MySqlDialect {}.parse_statement(parser)
    }
    fn get_next_precedence(&self, parser: &Parser<'_>) -> Option<Result<u8, ParserError>> {
        match Self::infix_keyword(parser) {
            Some(_) => Some(Ok(self.prec_value(Precedence::MulDivModOp))),
            None => MySqlDialect {}.get_next_precedence(parser),
        }
    }
    fn parse_infix(
        &self,
        parser: &mut Parser<'_>,
        expr: &Expr,
        precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        let Some(keyword) = Self::infix_keyword(parser) else {
            return MySqlDialect {}.parse_infix(parser, expr, precedence);
        };
        parser.next_token();
        let op = if keyword == Keyword::DIV {
            sqlparser::ast::BinaryOperator::MyIntegerDivide
        } else {
            sqlparser::ast::BinaryOperator::Modulo
        };
        let right = parser.parse_subexpr(self.prec_value(Precedence::MulDivModOp));
        Some(right.map(|right| Expr::BinaryOp {
            left: Box::new(expr.clone()),
            op,
            right: Box::new(right),
        }))
    }
}
