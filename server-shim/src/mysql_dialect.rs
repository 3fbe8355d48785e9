//! The one MySQL dialect every tokenizer and parser in the shim uses (the translation in
//! [`crate::dialect`], the session's classification in [`crate::classify`], and
//! [`crate::engine`]'s statement parsing and placeholder count), so a statement is read the
//! same way wherever it is read.

use core::any::TypeId;

use sqlparser::ast::{Expr, Statement};
use sqlparser::dialect::{Dialect, MySqlDialect, Precedence};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// sqlparser's MySQL dialect with its 0.52 gaps fixed: `a DIV b` (the stock parser
/// swallows the rest of the expression as the right operand, and unwraps a parse error)
/// and `a MOD b` (not parsed at all), both at `*`'s precedence as in MySQL. It
/// masquerades as [`MySqlDialect`] so every MySQL-only parse path stays on.
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
        true
    }
    fn supports_numeric_prefix(&self) -> bool {
        true
    }
    fn require_interval_qualifier(&self) -> bool {
        true
    }
    fn supports_limit_comma(&self) -> bool {
        true
    }
    fn parse_statement(&self, parser: &mut Parser<'_>) -> Option<Result<Statement, ParserError>> {
        MySqlDialect {}.parse_statement(parser)
    }
    fn get_next_precedence(&self, parser: &Parser<'_>) -> Option<Result<u8, ParserError>> {
        Self::infix_keyword(parser).map(|_| Ok(self.prec_value(Precedence::MulDivModOp)))
    }
    fn parse_infix(
        &self,
        parser: &mut Parser<'_>,
        expr: &Expr,
        _precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        let keyword = Self::infix_keyword(parser)?;
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
