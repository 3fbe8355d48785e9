//! MariaDB's default collation, `utf8mb4_general_ci`, as the shim's text compares, sorts,
//! groups and matches (`LIKE`): each character weighs one 16-bit value, its code point's but
//! for the 1,108 characters of [`weights::WEIGHTS`] (case and accents folded: `é` and `E`
//! weigh `E`, `ß` weighs `S`), every character beyond the Basic Multilingual Plane weighs
//! U+FFFD (so all of them are equal), and strings compare weight by weight, the shorter one
//! padded with spaces (`PAD SPACE`: `'a'` equals `'a '`). `LIKE` matches weight by weight
//! without the padding. The weights are MariaDB's own, as it reports them
//! (`scripts/general-ci-weights`).

use core::cmp::Ordering;

mod weights;

/// The subtype that marks a side of `LIKE` written with an explicit `_ci` collation (`'C'`),
/// which decides over a `_bin` column's (see `crate::utf8mb4_bin::SUBTYPE`).
pub const SUBTYPE: rusqlite::functions::SubType = Some(67);

/// What every character beyond the Basic Multilingual Plane weighs.
const BEYOND_BMP: u16 = 0xFFFD;

/// What a space weighs: a shorter string is padded with it.
const SPACE: u16 = 0x20;

/// The weight of `c`.
#[must_use]
pub fn weight(c: char) -> u16 {
    let Ok(code) = u16::try_from(u32::from(c)) else {
        return BEYOND_BMP;
    };
    // ASCII without the search: its letters weigh their upper case.
    if (0x61..=0x7A).contains(&code) {
        return code - 0x20;
    }
    if code < 0x80 {
        return code;
    }
    weights::WEIGHTS
        .binary_search_by_key(&code, |&(from, _)| from)
        .map_or(code, |i| weights::WEIGHTS.get(i).map_or(code, |&(_, w)| w))
}

/// Two strings in the collation's order.
#[must_use]
pub fn compare(a: &str, b: &str) -> Ordering {
    compare_pad_space(
        a.chars().map(|c| u32::from(weight(c))),
        b.chars().map(|c| u32::from(weight(c))),
    )
}

/// Two strings' weights, weight by weight, the shorter padded with spaces (`PAD SPACE`, as
/// MariaDB's utf8mb4 collations compare).
pub(crate) fn compare_pad_space(
    mut a: impl Iterator<Item = u32>,
    mut b: impl Iterator<Item = u32>,
) -> Ordering {
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) => match x.cmp(&y) {
                Ordering::Equal => {}
                other => return other,
            },
            (None, None) => return Ordering::Equal,
            // The rest of the longer string against spaces.
            (Some(x), None) => return padded(x, a),
            (None, Some(y)) => return padded(y, b).reverse(),
        }
    }
}

/// `first` and `rest`, the tail of the longer string, against the spaces that pad the shorter.
fn padded(first: u32, rest: impl Iterator<Item = u32>) -> Ordering {
    core::iter::once(first)
        .chain(rest)
        .map(|w| w.cmp(&u32::from(SPACE)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Whether `text` matches `pattern` as MariaDB's `LIKE` matches in this collation: `%` any
/// run of characters, `_` one character (both wildcards even when they are the escape),
/// `escape` makes the next character plain, the others equal when they weigh the same; no
/// padding (`'a '` does not match `'a'`).
#[must_use]
pub fn like(text: &str, pattern: &str, escape: Option<char>) -> bool {
    like_weighed(
        &text
            .chars()
            .map(|c| u32::from(weight(c)))
            .collect::<Vec<_>>(),
        pattern.chars().map(|c| (c, u32::from(weight(c)))),
        escape,
    )
}

/// [`like`] for binary strings (a `BLOB` or `VARBINARY` value): byte by byte, nothing folded.
#[must_use]
pub fn like_bytes(text: &[u8], pattern: &[u8], escape: Option<char>) -> bool {
    like_weighed(
        &text.iter().map(|&b| u32::from(b)).collect::<Vec<_>>(),
        pattern.iter().map(|&b| (char::from(b), u32::from(b))),
        escape,
    )
}

/// `text`'s weights against `pattern`'s characters and their weights.
pub(crate) fn like_weighed(
    text: &[u32],
    mut pattern: impl Iterator<Item = (char, u32)>,
    escape: Option<char>,
) -> bool {
    let mut items = Vec::new();
    while let Some((c, w)) = pattern.next() {
        items.push(match c {
            '%' => Item::Any,
            '_' => Item::One,
            _ if Some(c) == escape => Item::Char(pattern.next().map_or(w, |(_, next)| next)),
            _ => Item::Char(w),
        });
    }
    matches(text, &items)
}

/// One element of a `LIKE` pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    /// `%`.
    Any,
    /// `_`.
    One,
    /// A character, by its weight.
    Char(u32),
}

/// Iterative wildcard matching (the last `%` is where a failed match resumes): linear in the
/// text for each `%`, never exponential.
fn matches(text: &[u32], pattern: &[Item]) -> bool {
    let (mut t, mut p) = (0, 0);
    let mut resume: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Item::Any) => {
                resume = Some((p, t));
                p += 1;
            }
            Some(Item::One) => {
                t += 1;
                p += 1;
            }
            Some(Item::Char(w)) if text.get(t) == Some(w) => {
                t += 1;
                p += 1;
            }
            _ => match resume {
                Some((star, at)) => {
                    p = star + 1;
                    t = at + 1;
                    resume = Some((star, at + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|i| *i == Item::Any))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_case_and_accents_as_mariadb_weighs_them() {
        assert_eq!(weight('a'), u16::from(b'A'));
        assert_eq!(weight('é'), u16::from(b'E'));
        assert_eq!(weight('ß'), u16::from(b'S'));
        assert_eq!(weight('Æ'), 0xC6);
        assert_eq!(weight('æ'), 0xC6);
        assert_eq!(weight('µ'), 0x39C);
        assert_eq!(weight('😀'), 0xFFFD);
        assert_eq!(weight('_'), u16::from(b'_'));
        assert!(weights::WEIGHTS.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn compares_with_pad_space() {
        assert_eq!(compare("José", "jose"), Ordering::Equal);
        assert_eq!(compare("a", "a  "), Ordering::Equal);
        assert_eq!(compare("a", "a\t"), Ordering::Greater);
        assert_eq!(compare("a\t", "a"), Ordering::Less);
        assert_eq!(compare("a", "_"), Ordering::Less);
        assert_eq!(compare("Straße", "STRASE"), Ordering::Equal);
        assert_eq!(compare("😀", "😁"), Ordering::Equal);
        assert_eq!(compare("ñ", "n"), Ordering::Equal);
        assert_eq!(compare("", ""), Ordering::Equal);
        assert_eq!(compare("b", "a"), Ordering::Greater);
    }

    #[test]
    fn likes_by_weight_without_padding() {
        assert!(like("José", "jose", None));
        assert!(like("José", "J_S%", None));
        assert!(like("abc", "%", None));
        assert!(like("", "%", None));
        assert!(!like("a ", "a", None));
        assert!(!like("", "_", None));
        assert!(like("50%", "50\\%", Some('\\')));
        assert!(!like("500", "50\\%", Some('\\')));
        assert!(like("a_b", "a\\_b", Some('\\')));
        assert!(!like("axb", "a\\_b", Some('\\')));
        assert!(like("mississippi", "%iss%ppi", None));
        assert!(!like("mississippi", "%iss%ppx", None));
        assert!(like("aaa", "%a%a%a%", None));
        assert!(!like("aa", "%a%a%a%", None));
        // A trailing escape matches itself.
        assert!(like("a\\", "a\\", Some('\\')));
        // The wildcards first, even as the escape (MariaDB: 'ab' LIKE 'a%' ESCAPE '%').
        assert!(like("ab", "a%", Some('%')));
        assert!(like("abc", "a%%", Some('%')));
        // Bytes: nothing folded.
        assert!(!like_bytes("José".as_bytes(), b"jose", Some('\\')));
        assert!(like_bytes(b"Jo\xffe", b"Jo_e", Some('\\')));
        assert!(like_bytes(b"a_b", b"a\\_b", Some('\\')));
    }
}
