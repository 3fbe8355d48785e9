//! The system variables the shim reports (`SELECT @@x`, `SHOW VARIABLES`): what MySQL clients
//! and drivers ask for while connecting. Values mimic a MySQL 8.0 server in its defaults;
//! `autocommit` follows the session, and a variable the session `SET` to a plain value reads
//! back as set (`sql_mode`, `time_zone`, ...), though the shim keeps one behaviour for each.

use std::collections::BTreeMap;

use crate::engine::Cell;

/// The version string in the greeting and in `VERSION()`.
pub const SERVER_VERSION: &str = "8.0.36-perceptron-shim";
/// `@@version_comment`, which the `mariadb` CLI shows on connect.
pub const VERSION_COMMENT: &str = "Perceptron server-shim";
/// `@@max_allowed_packet`.
pub const MAX_ALLOWED_PACKET: u64 = 64 * 1024 * 1024;

/// Fixed variables, sorted by name.
const FIXED: &[(&str, Fixed)] = &[
    ("auto_increment_increment", Fixed::Int(1)),
    ("auto_increment_offset", Fixed::Int(1)),
    ("character_set_client", Fixed::Text("utf8mb4")),
    ("character_set_connection", Fixed::Text("utf8mb4")),
    ("character_set_database", Fixed::Text("utf8mb4")),
    ("character_set_results", Fixed::Text("utf8mb4")),
    ("character_set_server", Fixed::Text("utf8mb4")),
    ("collation_connection", Fixed::Text("utf8mb4_general_ci")),
    ("collation_database", Fixed::Text("utf8mb4_general_ci")),
    ("collation_server", Fixed::Text("utf8mb4_general_ci")),
    ("default_storage_engine", Fixed::Text("SQLite")),
    ("foreign_key_checks", Fixed::Int(1)),
    ("have_ssl", Fixed::Text("DISABLED")),
    ("init_connect", Fixed::Text("")),
    ("interactive_timeout", Fixed::Int(28_800)),
    ("license", Fixed::Text("Apache-2.0")),
    // Milliseconds a SELECT may run (0: no limit), as MySQL 8's; the session enforces it.
    ("max_execution_time", Fixed::Int(0)),
    ("lower_case_table_names", Fixed::Int(0)),
    ("max_allowed_packet", Fixed::Int(MAX_ALLOWED_PACKET as i64)),
    ("net_buffer_length", Fixed::Int(16_384)),
    ("net_write_timeout", Fixed::Int(60)),
    ("performance_schema", Fixed::Int(0)),
    ("query_cache_size", Fixed::Int(0)),
    ("query_cache_type", Fixed::Text("OFF")),
    // No Unix socket: the shim listens on TCP only (clients read it to find one).
    ("socket", Fixed::Text("")),
    ("sql_auto_is_null", Fixed::Int(0)),
    // Strict, as MariaDB's default: a column refuses what its type cannot hold
    // (dialect::ddl::value_checks), whatever a session sets.
    ("sql_mode", Fixed::Text("STRICT_TRANS_TABLES")),
    ("system_time_zone", Fixed::Text("UTC")),
    ("time_zone", Fixed::Text("+00:00")),
    ("transaction_isolation", Fixed::Text("REPEATABLE-READ")),
    ("transaction_read_only", Fixed::Int(0)),
    ("tx_isolation", Fixed::Text("REPEATABLE-READ")),
    ("tx_read_only", Fixed::Int(0)),
    ("version", Fixed::Text(SERVER_VERSION)),
    ("version_comment", Fixed::Text(VERSION_COMMENT)),
    ("version_compile_machine", Fixed::Text("x86_64")),
    ("version_compile_os", Fixed::Text("Linux")),
    ("wait_timeout", Fixed::Int(28_800)),
];

#[derive(Debug, Clone, Copy)]
enum Fixed {
    Int(i64),
    Text(&'static str),
}

/// The session-dependent inputs.
#[derive(Debug, Clone, Copy)]
pub struct SessionVars<'a> {
    /// `@@autocommit`.
    pub autocommit: bool,
    /// What the session `SET`, by lower-case name ([`assigned`]).
    pub set: &'a BTreeMap<String, Cell>,
}

/// The value of system variable `name` (case-insensitive), or `None` if unknown.
#[must_use]
pub fn lookup(name: &str, session: SessionVars<'_>) -> Option<Cell> {
    let lower = name.to_ascii_lowercase();
    if lower == "autocommit" {
        return Some(Cell::Int(i64::from(session.autocommit)));
    }
    if let Some(value) = session.set.get(&lower) {
        return Some(value.clone());
    }
    fixed(&lower).map(|v| match v {
        Fixed::Int(i) => Cell::Int(i),
        Fixed::Text(t) => Cell::Text(t.to_owned()),
    })
}

fn fixed(lower: &str) -> Option<Fixed> {
    FIXED.iter().find(|(n, _)| *n == lower).map(|(_, v)| *v)
}

/// Whether `name` (lower case) is a system variable the shim reports.
#[must_use]
pub fn is_known(name: &str) -> bool {
    name == "autocommit" || fixed(name).is_some()
}

/// What a session keeps for `SET name = value` (`value` as the statement wrote it, quotes
/// removed): the value, typed as the variable is, when `name` is a known variable and `value`
/// a plain one. `None` for the rest, which is accepted and changes nothing: an unknown
/// variable, or an expression (`CONCAT(@@sql_mode, ...)`) the shim does not evaluate.
#[must_use]
pub fn assigned(name: &str, value: &str) -> Option<Cell> {
    if name == "autocommit" || value.contains(['(', '@']) {
        return None;
    }
    Some(match fixed(name)? {
        Fixed::Int(_) => Cell::Int(match value.to_ascii_lowercase().as_str() {
            "on" | "true" => 1,
            "off" | "false" => 0,
            number => number.parse().ok()?,
        }),
        Fixed::Text(_) if value.eq_ignore_ascii_case("default") => return None,
        Fixed::Text(_) => Cell::Text(value.to_owned()),
    })
}

/// The character sets the shim speaks: UTF-8 (and ASCII, a part of it), or bytes as they are.
const CHARSETS: &[&str] = &["utf8mb4", "utf8mb3", "utf8", "ascii", "binary", "default"];

/// Time zones that are the shim's own, UTC.
const UTC_ZONES: &[&str] = &[
    "+00:00",
    "+0:00",
    "-00:00",
    "utc",
    "gmt",
    "etc/utc",
    "universal",
    "zulu",
    "system",
    "default",
];

/// Why `SET name = value` is refused: a value that would make MySQL answer otherwise than
/// the shim does (a `sql_mode` flag it does not follow, [`crate::sql_mode`]; another time
/// zone for `NOW()`; another character set for the bytes). `None` when the shim can take it.
#[must_use]
pub fn refused(name: &str, value: &str) -> Option<&'static str> {
    let value = value.trim().to_ascii_lowercase();
    match name {
        "sql_mode" => crate::sql_mode::not_followed(&value)
            .map(|_| "server-shim computes as MySQL's default sql_mode does"),
        "time_zone" => {
            (!UTC_ZONES.contains(&value.as_str())).then_some("server-shim keeps its time in UTC")
        }
        "names" | "character_set_client" | "character_set_connection" => {
            (!CHARSETS.contains(&value.as_str())).then_some("server-shim speaks UTF-8 only")
        }
        "character_set_results" => (!CHARSETS.contains(&value.as_str()) && value != "null")
            .then_some("server-shim speaks UTF-8 only"),
        "collation_connection" => (!CHARSETS
            .iter()
            .any(|c| value == *c || value.starts_with(&format!("{c}_"))))
        .then_some("server-shim speaks UTF-8 only"),
        _ => None,
    }
}

/// Every variable as `(name, value as text)`, sorted by name, for `SHOW VARIABLES`.
#[must_use]
pub fn all(session: SessionVars<'_>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = FIXED
        .iter()
        .map(|(n, v)| {
            let text = match (session.set.get(*n), v) {
                (Some(Cell::Int(i)), _) => i.to_string(),
                (Some(Cell::Text(t)), _) => t.clone(),
                (_, Fixed::Int(i)) => i.to_string(),
                (_, Fixed::Text(t)) => (*t).to_owned(),
            };
            ((*n).to_owned(), text)
        })
        .collect();
    out.push((
        "autocommit".into(),
        if session.autocommit { "ON" } else { "OFF" }.into(),
    ));
    out.sort();
    out
}

/// SQL `LIKE` matching, case-insensitive (MySQL's default collations): `%` any run, `_` one
/// character, `\` escapes the next character.
#[must_use]
pub fn like(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.to_lowercase().chars().collect();
    let t: Vec<char> = text.to_lowercase().chars().collect();
    like_at(&p, &t)
}

fn like_at(p: &[char], t: &[char]) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some(('%', rest)) => {
            (0..=t.len()).any(|i| t.get(i..).is_some_and(|tail| like_at(rest, tail)))
        }
        Some(('_', rest)) => t.split_first().is_some_and(|(_, tt)| like_at(rest, tt)),
        Some(('\\', rest)) if !rest.is_empty() => match (rest.split_first(), t.split_first()) {
            (Some((pc, pr)), Some((tc, tr))) => pc == tc && like_at(pr, tr),
            _ => false,
        },
        Some((pc, rest)) => t
            .split_first()
            .is_some_and(|(tc, tr)| pc == tc && like_at(rest, tr)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: &BTreeMap<String, Cell> = &BTreeMap::new();
    const S: SessionVars<'static> = SessionVars {
        autocommit: true,
        set: NONE,
    };

    #[test]
    fn knows_what_drivers_ask_for_at_connect() {
        for name in [
            "max_allowed_packet",
            "transaction_isolation",
            "tx_isolation",
            "version_comment",
            "character_set_client",
            "sql_mode",
            "wait_timeout",
            "TIME_ZONE",
        ] {
            assert!(lookup(name, S).is_some(), "{name}");
        }
        assert_eq!(lookup("autocommit", S), Some(Cell::Int(1)));
        assert_eq!(
            lookup(
                "autocommit",
                SessionVars {
                    autocommit: false,
                    set: NONE
                }
            ),
            Some(Cell::Int(0))
        );
        assert_eq!(lookup("no_such_thing", S), None);
    }

    /// What would make MySQL answer otherwise than the shim is refused; what changes nothing
    /// the shim answers (dumps set `NO_AUTO_VALUE_ON_ZERO` and `+00:00`) is taken.
    #[test]
    fn refuses_the_settings_it_would_not_follow() {
        for (name, value) in [
            ("sql_mode", "HIGH_NOT_PRECEDENCE"),
            ("sql_mode", "STRICT_TRANS_TABLES,oracle"),
            ("time_zone", "+08:00"),
            ("time_zone", "Europe/Paris"),
            ("names", "latin1"),
            ("character_set_client", "cp1251"),
            ("collation_connection", "latin1_swedish_ci"),
        ] {
            assert!(refused(name, value).is_some(), "{name} = {value}");
        }
        for (name, value) in [
            ("sql_mode", ""),
            ("sql_mode", "NO_AUTO_VALUE_ON_ZERO"),
            // Followed statement by statement (`crate::sql_mode`).
            ("sql_mode", "ANSI,NO_BACKSLASH_ESCAPES"),
            (
                "sql_mode",
                "TRADITIONAL,ONLY_FULL_GROUP_BY,NO_ENGINE_SUBSTITUTION",
            ),
            ("time_zone", "+00:00"),
            ("time_zone", "UTC"),
            ("names", "utf8mb4"),
            ("names", "UTF8"),
            ("character_set_results", "NULL"),
            ("collation_connection", "utf8mb4_unicode_ci"),
            ("wait_timeout", "1"),
        ] {
            assert_eq!(refused(name, value), None, "{name} = {value}");
        }
    }

    /// Django and Rails set `sql_mode` and read it back; Django asks for `sql_auto_is_null`.
    #[test]
    fn a_session_reads_back_what_it_set_to_a_plain_value() {
        let mut set = BTreeMap::new();
        for (name, value) in [
            ("sql_mode", "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES"),
            ("sql_auto_is_null", "OFF"),
            ("wait_timeout", "600"),
            ("time_zone", "CONCAT(@@time_zone, '')"),
            ("no_such_variable", "1"),
            ("wait_timeout_x", "1"),
            ("interactive_timeout", "soon"),
        ] {
            if let Some(cell) = assigned(name, value) {
                set.insert(name.to_owned(), cell);
            }
        }
        let session = SessionVars {
            autocommit: true,
            set: &set,
        };
        assert_eq!(
            lookup("SQL_MODE", session),
            Some(Cell::Text("ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES".into()))
        );
        assert_eq!(lookup("sql_auto_is_null", session), Some(Cell::Int(0)));
        assert_eq!(lookup("wait_timeout", session), Some(Cell::Int(600)));
        // An expression, an unknown variable, a number that is not one: nothing kept.
        assert_eq!(
            lookup("time_zone", session),
            Some(Cell::Text("+00:00".into()))
        );
        assert_eq!(set.len(), 3, "{set:?}");
        assert!(
            all(session)
                .iter()
                .any(|(n, v)| n == "sql_mode" && v == "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES")
        );
        assert_eq!(assigned("autocommit", "0"), None, "the session's own");
    }

    #[test]
    fn matches_like_patterns() {
        assert!(like("sql_mode", "sql_mode"));
        assert!(like("%isolation", "transaction_isolation"));
        assert!(like("character\\_set\\_%", "character_set_client"));
        assert!(!like("character\\_set\\_%", "characterXset_client"));
        assert!(like("LOWER_case%", "lower_case_table_names"));
        assert!(like("w_it_timeout", "wait_timeout"));
        assert!(!like("wait", "wait_timeout"));
    }

    #[test]
    fn lists_every_variable_sorted() {
        let all = all(S);
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(all.iter().any(|(n, v)| n == "autocommit" && v == "ON"));
    }
}
