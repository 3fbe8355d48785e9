//! MariaDB's `utf8mb4_bin`, the collation of a column declared `COLLATE utf8mb4_bin` (SQLite's
//! `mysql_bin`): each character weighs its code point (nothing folded: `a` and `A`, `e` and
//! `é` differ), strings compare `PAD SPACE` as [`crate::general_ci`]'s do (`'a'` equals
//! `'a '`), and `LIKE` matches character by character without the padding. Its `NO PAD`
//! sibling `utf8mb4_nopad_bin` (SQLite's `mysql_nopad_bin`) counts trailing spaces.

use core::cmp::Ordering;

use crate::general_ci::{compare_pad_space, like_weighed};

/// The subtype that marks text of this collation passed to a function (`'B'`): SQLite gives
/// a function its arguments' values, not their collations. `mysql_text_typed` sets it on a
/// `_bin` column's text, `mysql_collated` on a side of `LIKE` with an explicit `_bin`; `LIKE`
/// reads it.
pub const SUBTYPE: rusqlite::functions::SubType = Some(66);

/// Two strings in the collation's order.
#[must_use]
pub fn compare(a: &str, b: &str) -> Ordering {
    compare_pad_space(a.chars().map(u32::from), b.chars().map(u32::from))
}

/// Two strings in `utf8mb4_nopad_bin`'s order: code points, trailing spaces counted (UTF-8's
/// bytes are in code point order).
#[must_use]
pub fn compare_nopad(a: &str, b: &str) -> Ordering {
    a.cmp(b)
}

/// Whether `text` matches `pattern` as MariaDB's `LIKE` matches in this collation (the
/// wildcards and the escape as [`crate::general_ci::like`] reads them).
#[must_use]
pub fn like(text: &str, pattern: &str, escape: Option<char>) -> bool {
    like_weighed(
        &text.chars().map(u32::from).collect::<Vec<_>>(),
        pattern.chars().map(|c| (c, u32::from(c))),
        escape,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MariaDB 10.11's answers (`SELECT 'a' = 'a ' COLLATE utf8mb4_bin`, ...).
    #[test]
    fn compares_code_points_with_pad_space() {
        assert_eq!(compare("a", "a  "), Ordering::Equal);
        assert_eq!(compare("a", "A"), Ordering::Greater);
        assert_eq!(compare("é", "e"), Ordering::Greater);
        assert_eq!(compare("a\t", "a"), Ordering::Less);
        assert_eq!(compare("😀", "😁"), Ordering::Less);
        assert_eq!(compare("", " "), Ordering::Equal);
    }

    #[test]
    fn likes_by_character_without_folding() {
        assert!(like("José", "Jos_", None));
        assert!(!like("José", "jos%", None));
        assert!(!like("JOSE", "jose", None));
        assert!(like("ü", "_", None));
        assert!(!like("a ", "a", None));
        assert!(like("a_b", "a\\_b", Some('\\')));
        assert!(!like("axb", "a\\_b", Some('\\')));
    }
}
