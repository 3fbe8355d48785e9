//! How the token passes that run before sqlparser read a statement: its significant tokens
//! (whitespace, and so comments, skipped), each still knowing where it is in the whole token
//! list so a pass can cut tokens out with the whitespace between them. One reader, so every
//! pass agrees on what a keyword is (an unquoted word: `` `KEYS` `` is a name).

use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

/// The significant tokens of a statement, indexed from 0.
pub(super) struct Significant<'a> {
    tokens: Vec<&'a Token>,
    /// Where each significant token is in the whole token list.
    at: Vec<usize>,
}

impl<'a> Significant<'a> {
    pub(super) fn new(all: &'a [Token]) -> Self {
        let (at, tokens) = all
            .iter()
            .enumerate()
            .filter(|(_, t)| !matches!(t, Token::Whitespace(_)))
            .unzip();
        Self { tokens, at }
    }

    /// The significant tokens, in order.
    pub(super) fn as_slice(&self) -> &[&'a Token] {
        &self.tokens
    }

    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    pub(super) fn get(&self, i: usize) -> Option<&'a Token> {
        self.tokens.get(i).copied()
    }

    /// Where significant token `i` is in the whole token list.
    pub(super) fn position(&self, i: usize) -> Option<usize> {
        self.at.get(i).copied()
    }

    /// Whether token `i` is keyword `k`, unquoted.
    pub(super) fn is_keyword(&self, i: usize, k: Keyword) -> bool {
        matches!(self.get(i), Some(Token::Word(w)) if w.quote_style.is_none() && w.keyword == k)
    }

    /// Whether token `i` is the unquoted word `word` (any case): for MySQL words sqlparser
    /// has no keyword for.
    pub(super) fn is_word(&self, i: usize, word: &str) -> bool {
        matches!(self.get(i), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
    }
}

/// `all` without the tokens whose positions `cut` marks.
pub(super) fn without(all: Vec<Token>, cut: &[bool]) -> Vec<Token> {
    all.into_iter()
        .zip(cut.iter().chain(core::iter::repeat(&false)))
        .filter_map(|(t, cut)| (!cut).then_some(t))
        .collect()
}

/// Marks positions `from..=to` of the whole token list in `cut`.
pub(super) fn mark(cut: &mut [bool], from: usize, to: usize) {
    if let Some(range) = cut.get_mut(from..=to) {
        range.fill(true);
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::tokenizer::Tokenizer;

    use super::super::ddl::strip_mysql_only_tokens;
    use super::super::{drop_select_modifiers, toggles_keys};
    use super::*;
    use crate::mysql_dialect::Mysql;

    fn tokens(sql: &str) -> Vec<Token> {
        Tokenizer::new(&Mysql, sql).tokenize().unwrap()
    }

    fn text(tokens: Vec<Token>) -> String {
        tokens.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reads_significant_tokens_with_their_positions() {
        let all = tokens("SELECT /* c */ `select`, a");
        let s = Significant::new(&all);
        assert_eq!(s.len(), 4);
        assert!(s.is_keyword(0, Keyword::SELECT));
        assert!(!s.is_keyword(1, Keyword::SELECT), "a quoted word is a name");
        assert!(s.is_word(3, "A"));
        assert_eq!(s.position(1), Some(4));
        assert_eq!(s.get(4), None);
    }

    #[test]
    fn key_toggles_are_unquoted_words() {
        assert!(toggles_keys(&tokens("alter table t disable keys")));
        assert!(toggles_keys(&tokens("ALTER TABLE `s`.`t` ENABLE KEYS")));
        assert!(!toggles_keys(&tokens("ALTER TABLE t DISABLE `KEYS`")));
        assert!(!toggles_keys(&tokens(
            "ALTER TABLE t ENABLE KEYS, ADD c INT"
        )));
    }

    #[test]
    fn drops_select_modifiers_only_right_after_select() {
        assert_eq!(
            text(
                drop_select_modifiers(tokens(
                    "SELECT SQL_NO_CACHE  HIGH_PRIORITY a, SQL_CACHE FROM t"
                ))
                .0
            ),
            "SELECT    a, SQL_CACHE FROM t"
        );
        assert_eq!(
            text(drop_select_modifiers(tokens("SELECT `SQL_NO_CACHE` FROM t")).0),
            "SELECT `SQL_NO_CACHE` FROM t"
        );
    }

    #[test]
    fn strips_what_sqlite_would_not_use_with_its_spaces() {
        assert_eq!(
            text(strip_mysql_only_tokens(tokens(
                "CREATE TABLE t (a DOUBLE (8, 3) ZEROFILL, b VARCHAR(20), KEY k (b (10)) USING BTREE)"
            ))),
            "CREATE TABLE t (a DOUBLE , b VARCHAR(20), KEY k (b ) )"
        );
        assert_eq!(
            text(strip_mysql_only_tokens(tokens("SELECT a ZEROFILL"))),
            "SELECT a ZEROFILL"
        );
    }
}
