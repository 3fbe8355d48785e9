//! The system variables the shim reports (`SELECT @@x`, `SHOW VARIABLES`): what MySQL clients
//! and drivers ask for while connecting. Values mimic a MySQL 8.0 server in its defaults;
//! `autocommit` follows the session.

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
    ("have_ssl", Fixed::Text("DISABLED")),
    ("init_connect", Fixed::Text("")),
    ("interactive_timeout", Fixed::Int(28_800)),
    ("license", Fixed::Text("Apache-2.0")),
    ("lower_case_table_names", Fixed::Int(0)),
    ("max_allowed_packet", Fixed::Int(MAX_ALLOWED_PACKET as i64)),
    ("net_buffer_length", Fixed::Int(16_384)),
    ("net_write_timeout", Fixed::Int(60)),
    ("performance_schema", Fixed::Int(0)),
    ("query_cache_size", Fixed::Int(0)),
    ("query_cache_type", Fixed::Text("OFF")),
    ("sql_mode", Fixed::Text("")),
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
pub struct SessionVars {
    /// `@@autocommit`.
    pub autocommit: bool,
}

/// The value of system variable `name` (case-insensitive), or `None` if unknown.
#[must_use]
pub fn lookup(name: &str, session: SessionVars) -> Option<Cell> {
    let lower = name.to_ascii_lowercase();
    if lower == "autocommit" {
        return Some(Cell::Int(i64::from(session.autocommit)));
    }
    FIXED
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, v)| match v {
            Fixed::Int(i) => Cell::Int(*i),
            Fixed::Text(t) => Cell::Text((*t).to_owned()),
        })
}

/// Every variable as `(name, value as text)`, sorted by name, for `SHOW VARIABLES`.
#[must_use]
pub fn all(session: SessionVars) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = FIXED
        .iter()
        .map(|(n, v)| {
            let text = match v {
                Fixed::Int(i) => i.to_string(),
                Fixed::Text(t) => (*t).to_owned(),
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

    const S: SessionVars = SessionVars { autocommit: true };

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
            lookup("autocommit", SessionVars { autocommit: false }),
            Some(Cell::Int(0))
        );
        assert_eq!(lookup("no_such_thing", S), None);
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
