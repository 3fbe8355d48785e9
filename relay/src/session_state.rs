//! A session's state read by value from its compute, and the statements that restore it on
//! another (docs/parking.md, *Sessions across a stop*).
//!
//! The relay never sends a client's text again. When a resumable session has been between
//! commands for a while after changing anything, the relay asks its compute, on the session's
//! own connection, for what the session holds ([`READ_SESSION`], [`READ_SYSTEM_VARIABLES`],
//! [`READ_USER_VARIABLES`], then [`UserVariables::exact_query`]), and keeps the answer as
//! values. A reattach sends only statements generated here from those values
//! ([`SessionState::restore`]): `USE`, `SET ROLE`, one `SET SESSION` per system variable that
//! the new login left otherwise, one `SET @…` — literals written as hexadecimal strings or
//! checked numbers, names in ASCII, so no value is ever parsed as SQL, under any `sql_mode` or
//! character set. A value that cannot be written back exactly (a user variable whose literal
//! does not compare equal on the compute, a name outside ASCII) makes the state [`Unreadable`],
//! and the session stays on its compute.
//!
//! The new login is compared with the state, not the old global values: what it sets itself
//! (the handshake's character set, `init_connect`, an account's limits) is put back where the
//! session had changed it, and a variable the session left at the global value is set back to
//! `DEFAULT` where the new login differs. A `SET SESSION` refused for want of a privilege, or
//! for a variable read-only in a session, is one the client could not have made itself (the
//! difference comes from a `SET GLOBAL` since its login): the new session keeps the new value.
//!
//! What is not carried, by design: system variables with no global value that hold per-statement
//! facts ([`PER_STATEMENT`]; a session that sets one is pinned instead), and the database's
//! character set and collation variables, which `USE` sets. Pure: rows in, values and
//! statements out.

pub mod evidence;

use authplugin::hex::encode as hex;
use authplugin::packet::command::COM_QUERY;
use authplugin::packet::text_result::Row;

/// The session's database and user (`USER()`: the name it logged in or changed to, `@` the
/// client's host). Every read names its limit: a session's `sql_select_limit` would cut it
/// short otherwise.
pub const READ_SESSION: &str = "SELECT DATABASE(), USER() LIMIT 1";

/// The session's active role, read apart: a compute without roles refuses it (none, then).
pub const READ_ROLE: &str = "SELECT CURRENT_ROLE() LIMIT 1";

/// The system variables whose session value differs from the global value, or for a variable
/// with no global value from its default.
pub const READ_SYSTEM_VARIABLES: &str = "SELECT VARIABLE_NAME, VARIABLE_SCOPE, VARIABLE_TYPE, \
     SESSION_VALUE, DEFAULT_VALUE FROM information_schema.SYSTEM_VARIABLES \
     WHERE VARIABLE_SCOPE <> 'GLOBAL' AND READ_ONLY = 'NO' \
     AND NOT (SESSION_VALUE <=> GLOBAL_VALUE) LIMIT 100000";

/// The session's user variables with their types (the values of strings are read exactly by
/// [`UserVariables::exact_query`]).
/// Only numbers are read from the listing (a decimal has at most 67 characters), so no value
/// makes its rows large.
pub const READ_USER_VARIABLES: &str = "SELECT VARIABLE_NAME, VARIABLE_TYPE, \
     LEFT(VARIABLE_VALUE, 100) FROM information_schema.USER_VARIABLES LIMIT 100000";

/// What a compute answers to a `SET SESSION` of a variable no session can set: read-only in a
/// session (1621) or global only (1229, 1238). Its session value differs from the global one
/// only because of a `SET GLOBAL` since the login: it is not carried.
pub const READ_ONLY_IN_SESSION: &[u16] = &[1229, 1238, 1621];

/// What a compute answers, at a reattach, to a `SET SESSION` the client could not have made
/// itself: [`READ_ONLY_IN_SESSION`], or a privilege it lacks (1227). The state read tried
/// every `SET` on the old session first (a refused one pins the session there), so the
/// difference comes from a `SET GLOBAL` or a revoked privilege since: the reattach skips it.
pub const NOT_THE_CLIENTS: &[u16] = &[1227, 1229, 1238, 1621];

/// Session-only variables that hold per-statement facts or the connection's identity, which a
/// new session has afresh (as `CONNECTION_ID()` and `LAST_INSERT_ID()` differ after a
/// reattach); and the database's character set and collation, which `USE` sets.
pub const PER_STATEMENT: &[&str] = &[
    "character_set_database",
    "collation_database",
    "error_count",
    "gtid_seq_no",
    "identity",
    "in_transaction",
    "insert_id",
    "last_gtid",
    "last_insert_id",
    "pseudo_thread_id",
    "rand_seed1",
    "rand_seed2",
    "timestamp",
    "warning_count",
    "wsrep_gtid_seq_no",
];

/// The most system variables a session may carry, the most user variables, the longest string
/// a user variable may hold, and the most bytes of all their literals: past any, its state is
/// [`Unreadable::TooLarge`]. They bound the relay's reads too: the longest row it reads is
/// [`MAX_USER_VARIABLES`] strings of [`MAX_STRING_BYTES`], in hexadecimal.
pub const MAX_VARIABLES: usize = 512;
/// See [`MAX_VARIABLES`].
pub const MAX_USER_VARIABLES: usize = 64;
/// See [`MAX_VARIABLES`].
pub const MAX_STRING_BYTES: usize = 8 * 1024;
/// See [`MAX_VARIABLES`].
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// Why a session's state cannot be carried by value (the session then stays on its compute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// The compute refused a read, or answered with something else (a compute without
    /// `information_schema.SYSTEM_VARIABLES` or `USER_VARIABLES`).
    NotAnswered,
    /// More variables or bytes than [`MAX_VARIABLES`] and its kin allow.
    TooLarge,
    /// A variable's name or value that no literal written here reproduces exactly.
    Inexact,
    /// The session is another user than the one that logged in (`COM_CHANGE_USER`).
    OtherUser,
    /// No database is selected, though the login named one (`DROP DATABASE`): a new login
    /// would select it again.
    NoDatabase,
}

impl Unreadable {
    /// The reason, as `relay status` gives it for a session that keeps its compute.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotAnswered => "session state not readable from the compute",
            Self::TooLarge => "session state too large to carry",
            Self::Inexact => "a variable whose value cannot be restored exactly",
            Self::OtherUser => "the session changed user",
            Self::NoDatabase => "no database selected after a login that named one",
        }
    }
}

/// A session's state by value: what a new session needs to be the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionState {
    database: Option<Vec<u8>>,
    /// The active role, if any.
    role: Option<Vec<u8>>,
    /// System variables that differ from their global values.
    system: Vec<SystemVariable>,
    /// User variables: name and literal.
    user: Vec<(Vec<u8>, String)>,
}

/// A system variable of a session, by value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemVariable {
    /// Lower case.
    pub name: String,
    /// The value as the compute reported it.
    pub value: Option<Vec<u8>>,
    /// The literal that sets it.
    pub literal: String,
}

/// Whether a name can be written into a statement whatever the connection's character set:
/// printable ASCII only.
fn ascii_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| (0x20..0x7F).contains(b))
}

/// The one row of [`READ_SESSION`]: the database, if any, and the user name (`USER()` without
/// its host).
///
/// # Errors
/// [`Unreadable::NotAnswered`] for any other shape; [`Unreadable::Inexact`] for a database
/// name outside ASCII (its bytes are in the session's result character set, the new
/// session's `USE` would read them in another).
pub fn session(rows: &[Row]) -> Result<(Option<Vec<u8>>, Vec<u8>), Unreadable> {
    let [row] = rows else {
        return Err(Unreadable::NotAnswered);
    };
    let [database, Some(user)] = row.as_slice() else {
        return Err(Unreadable::NotAnswered);
    };
    if database.as_deref().is_some_and(|d| !ascii_name(d)) {
        return Err(Unreadable::Inexact);
    }
    let name = match user.iter().rposition(|&b| b == b'@') {
        Some(at) => user.get(..at).unwrap_or_default(),
        None => user.as_slice(),
    };
    Ok((database.clone(), name.to_vec()))
}

/// The role in [`READ_ROLE`]'s rows.
///
/// # Errors
/// [`Unreadable::NotAnswered`] for another shape, [`Unreadable::Inexact`] for a name outside
/// ASCII.
pub fn role(rows: &[Row]) -> Result<Option<Vec<u8>>, Unreadable> {
    let [row] = rows else {
        return Err(Unreadable::NotAnswered);
    };
    let [role] = row.as_slice() else {
        return Err(Unreadable::NotAnswered);
    };
    match role {
        Some(r) if !ascii_name(r) => Err(Unreadable::Inexact),
        r => Ok(r.clone()),
    }
}

/// The system variables that differ from their global values, from
/// [`READ_SYSTEM_VARIABLES`]' rows, in the order they are set in.
///
/// # Errors
/// [`Unreadable`]: a row of another shape, a name that is not a plain identifier, a number
/// that is not one, or too many.
pub fn system_variables(rows: &[Row]) -> Result<Vec<SystemVariable>, Unreadable> {
    let mut out = Vec::new();
    for row in rows {
        let [Some(name), Some(scope), Some(kind), value, default] = row.as_slice() else {
            return Err(Unreadable::NotAnswered);
        };
        let name = String::from_utf8(name.to_ascii_lowercase()).map_err(|_| Unreadable::Inexact)?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(Unreadable::Inexact);
        }
        if PER_STATEMENT.contains(&name.as_str())
            || (scope.eq_ignore_ascii_case(b"SESSION ONLY") && value == default)
        {
            continue;
        }
        let literal = match value {
            None => "NULL".to_owned(),
            Some(v) if is_numeric_type(kind) => number(v).ok_or(Unreadable::Inexact)?,
            Some(v) => format!("X'{}'", hex(v)),
        };
        out.push(SystemVariable {
            name,
            value: value.clone(),
            literal,
        });
    }
    out.sort_by_key(|v| setting_order(&v.name));
    Ok(out)
}

/// Where a variable goes among the `SET`s: a character set before its collation (setting one
/// resets the other), and `sql_big_selects` after `max_join_size` (setting the limit turns it
/// off).
fn setting_order(name: &str) -> u8 {
    if name.starts_with("character_set_") {
        0
    } else if name.starts_with("collation_") {
        1
    } else if name == "sql_big_selects" {
        3
    } else {
        2
    }
}

fn is_numeric_type(kind: &[u8]) -> bool {
    let kind = kind.to_ascii_uppercase();
    matches!(
        kind.as_slice(),
        b"INT" | b"BIGINT" | b"INT UNSIGNED" | b"BIGINT UNSIGNED" | b"DOUBLE" | b"DECIMAL"
    )
}

/// `text` as a numeric literal, when it is one: digits with at most a sign, a point and an
/// exponent.
fn number(text: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(text).ok()?;
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(at) => (s.get(..at)?, Some(s.get(at + 1..)?)),
        None => (s, None),
    };
    let unsigned = mantissa.strip_prefix('-').unwrap_or(mantissa);
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    (!whole.is_empty() && digits(whole) && digits(fraction) && exponent_ok).then(|| s.to_owned())
}

/// A session's user variables as [`READ_USER_VARIABLES`] listed them, before their exact
/// values are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserVariables {
    /// Name and, when known from the listing alone, the literal; `None`: a string, read by
    /// [`Self::exact_query`].
    listed: Vec<(Vec<u8>, Option<String>)>,
}

impl UserVariables {
    /// Reads [`READ_USER_VARIABLES`]' rows.
    ///
    /// # Errors
    /// [`Unreadable`]: another shape, a number that is not one, too many.
    pub fn listed(rows: &[Row]) -> Result<Self, Unreadable> {
        if rows.len() > MAX_USER_VARIABLES {
            return Err(Unreadable::TooLarge);
        }
        let mut listed = Vec::with_capacity(rows.len());
        for row in rows {
            let [Some(name), Some(kind), value] = row.as_slice() else {
                return Err(Unreadable::NotAnswered);
            };
            if !ascii_name(name) || name.contains(&b'`') {
                return Err(Unreadable::Inexact);
            }
            let literal = match (kind.to_ascii_uppercase().as_slice(), value) {
                (_, None) => Some("NULL".to_owned()),
                (b"INT", Some(v)) => Some(number(v).ok_or(Unreadable::Inexact)?),
                (b"INT UNSIGNED", Some(v)) => Some(format!(
                    "CAST({} AS UNSIGNED)",
                    number(v).ok_or(Unreadable::Inexact)?
                )),
                // An unsigned decimal or double comes back signed: the exactness check
                // still holds (their values are not negative).
                (b"DECIMAL" | b"DECIMAL UNSIGNED", Some(v)) => {
                    Some(number(v).ok_or(Unreadable::Inexact)?)
                }
                // MariaDB writes doubles so that they read back the same; the exactness check
                // confirms it.
                (b"DOUBLE" | b"REAL" | b"DOUBLE UNSIGNED", Some(v)) => {
                    let n = number(v).ok_or(Unreadable::Inexact)?;
                    Some(if n.contains(['e', 'E']) {
                        n
                    } else {
                        format!("{n}E0")
                    })
                }
                _ => None,
            };
            listed.push((name.clone(), literal));
        }
        Ok(Self { listed })
    }

    /// The query that reads each string's length, bytes (none past [`MAX_STRING_BYTES`]) and
    /// collation, and checks that every other literal compares equal (`<=>`) to its variable:
    /// one row. `None` without variables.
    #[must_use]
    pub fn exact_query(&self) -> Option<Vec<u8>> {
        if self.listed.is_empty() {
            return None;
        }
        let mut q = b"SELECT ".to_vec();
        for (i, (name, literal)) in self.listed.iter().enumerate() {
            if i > 0 {
                q.extend_from_slice(b", ");
            }
            let var = variable(name);
            match literal {
                None => {
                    let limit = MAX_STRING_BYTES.to_string();
                    for part in [
                        b"LENGTH(".as_slice(),
                        &var,
                        b"), HEX(IF(LENGTH(",
                        &var,
                        b") > ",
                        limit.as_bytes(),
                        b", X'', ",
                        &var,
                        b")), COLLATION(",
                        &var,
                        b")",
                    ] {
                        q.extend_from_slice(part);
                    }
                }
                Some(literal) => {
                    q.push(b'(');
                    q.extend_from_slice(&var);
                    q.extend_from_slice(b" <=> ");
                    q.extend_from_slice(literal.as_bytes());
                    q.push(b')');
                }
            }
        }
        Some(q)
    }

    /// The variables and their literals, from [`Self::exact_query`]'s row (none without
    /// variables).
    ///
    /// # Errors
    /// [`Unreadable`]: another shape, a literal that does not compare equal, a collation that
    /// is not a plain name.
    pub fn exact(self, rows: &[Row]) -> Result<Vec<(Vec<u8>, String)>, Unreadable> {
        if self.listed.is_empty() {
            return Ok(Vec::new());
        }
        let [row] = rows else {
            return Err(Unreadable::NotAnswered);
        };
        let mut cells = row.iter();
        let mut out = Vec::with_capacity(self.listed.len());
        for (name, literal) in self.listed {
            let literal = match literal {
                Some(literal) => {
                    if cells.next().ok_or(Unreadable::NotAnswered)?.as_deref() != Some(b"1") {
                        return Err(Unreadable::Inexact);
                    }
                    literal
                }
                None => {
                    let (Some(length), Some(bytes), Some(collation)) = (
                        cells.next().ok_or(Unreadable::NotAnswered)?,
                        cells.next().ok_or(Unreadable::NotAnswered)?,
                        cells.next().ok_or(Unreadable::NotAnswered)?,
                    ) else {
                        // NULL listed as a string, or a value gone since the listing.
                        return Err(Unreadable::Inexact);
                    };
                    let length = std::str::from_utf8(length)
                        .ok()
                        .and_then(|l| l.parse::<usize>().ok())
                        .ok_or(Unreadable::NotAnswered)?;
                    if length > MAX_STRING_BYTES {
                        return Err(Unreadable::TooLarge);
                    }
                    if bytes.len() != 2 * length {
                        return Err(Unreadable::Inexact);
                    }
                    string_literal(bytes, collation)?
                }
            };
            out.push((name, literal));
        }
        if cells.next().is_some() {
            return Err(Unreadable::NotAnswered);
        }
        Ok(out)
    }
}

/// A string of the hexadecimal `bytes` (as `HEX()` gives them) in `collation`.
fn string_literal(hex_bytes: &[u8], collation: &[u8]) -> Result<String, Unreadable> {
    if hex_bytes.len() % 2 != 0 || !hex_bytes.iter().all(u8::is_ascii_hexdigit) {
        return Err(Unreadable::Inexact);
    }
    let hex_bytes = std::str::from_utf8(hex_bytes).map_err(|_| Unreadable::Inexact)?;
    let collation = std::str::from_utf8(collation).map_err(|_| Unreadable::Inexact)?;
    if collation.is_empty()
        || !collation
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(Unreadable::Inexact);
    }
    if collation.eq_ignore_ascii_case("binary") {
        return Ok(format!("X'{hex_bytes}'"));
    }
    let charset = collation.split('_').next().unwrap_or(collation);
    Ok(format!(
        "CONVERT(X'{hex_bytes}' USING {charset}) COLLATE {collation}"
    ))
}

/// `@name` when the name is a plain identifier, else `@`name`` with a backtick inside doubled.
fn variable(name: &[u8]) -> Vec<u8> {
    if !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
        return [b"@".as_slice(), name].concat();
    }
    quoted_variable(name)
}

/// `@`name``, a backtick inside doubled.
fn quoted_variable(name: &[u8]) -> Vec<u8> {
    let mut out = b"@`".to_vec();
    for &b in name {
        out.push(b);
        if b == b'`' {
            out.push(b'`');
        }
    }
    out.push(b'`');
    out
}

/// `` `name` ``, a backtick inside doubled.
fn identifier(name: &[u8]) -> Vec<u8> {
    let mut out = quoted_variable(name);
    out.remove(0);
    out
}

/// One statement of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    /// The `COM_QUERY` payload.
    pub payload: Vec<u8>,
    /// A refusal with one of [`NOT_THE_CLIENTS`] codes is skipped rather than failing the
    /// reattach (a system variable's `SET SESSION`).
    pub skippable: bool,
    /// A refusal is not final: the statement is sent once more after the next one (`USE`
    /// under the login's default role, and again under the session's role).
    pub again_after_next: bool,
    /// The system variable it sets, if it sets one.
    pub variable: Option<String>,
}

impl Restore {
    fn query(parts: &[&[u8]], skippable: bool) -> Self {
        let mut payload = vec![COM_QUERY];
        for part in parts {
            payload.extend_from_slice(part);
        }
        Self {
            payload,
            skippable,
            again_after_next: false,
            variable: None,
        }
    }
}

impl SessionState {
    /// The state read from a compute: `session` ([`session`]) checked against the login's
    /// user and database, the role ([`role`]), the system and user variables.
    ///
    /// # Errors
    /// [`Unreadable::OtherUser`], [`Unreadable::NoDatabase`], [`Unreadable::TooLarge`].
    pub fn new(
        session: (Option<Vec<u8>>, Vec<u8>),
        role: Option<Vec<u8>>,
        login: (&[u8], Option<&[u8]>),
        system: Vec<SystemVariable>,
        user: Vec<(Vec<u8>, String)>,
    ) -> Result<Self, Unreadable> {
        let (database, user_name) = session;
        let (login_user, login_database) = login;
        if user_name != login_user {
            return Err(Unreadable::OtherUser);
        }
        if database.is_none() && login_database.is_some_and(|d| !d.is_empty()) {
            return Err(Unreadable::NoDatabase);
        }
        let bytes: usize = system
            .iter()
            .map(|v| v.name.len() + 2 * v.literal.len())
            .chain(user.iter().map(|(n, l)| n.len() + l.len()))
            .sum();
        if system.len() + user.len() > MAX_VARIABLES || bytes > MAX_STATE_BYTES {
            return Err(Unreadable::TooLarge);
        }
        Ok(Self {
            database,
            role,
            system,
            user,
        })
    }

    /// The statements that make a new session of the same login, whose role is `fresh_role`
    /// and whose system variables differing from their global values are `fresh`, the same as
    /// this one, in order; each is answered with an OK. Setting one variable may change
    /// another (`max_join_size` turns `sql_big_selects` off): after them, the caller reads
    /// the system variables again and sends [`Self::restore_system`] once more.
    #[must_use]
    pub fn restore(&self, fresh_role: Option<&[u8]>, fresh: &[SystemVariable]) -> Vec<Restore> {
        let mut out = Vec::new();
        // The database first, under the login's role (the session may have dropped the role
        // that let it in), and again under the session's role if that one is needed.
        let role = (self.role.as_deref() != fresh_role).then(|| match &self.role {
            Some(role) => Restore::query(&[b"SET ROLE ", &identifier(role)], false),
            None => Restore::query(&[b"SET ROLE NONE"], false),
        });
        if let Some(database) = &self.database {
            let mut use_database = Restore::query(&[b"USE ", &identifier(database)], false);
            use_database.again_after_next = role.is_some();
            out.push(use_database);
        }
        out.extend(role);
        out.extend(self.restore_system(fresh));
        if !self.user.is_empty() {
            let mut q = b"SET ".to_vec();
            for (i, (name, literal)) in self.user.iter().enumerate() {
                if i > 0 {
                    q.extend_from_slice(b", ");
                }
                q.extend_from_slice(&variable(name));
                q.extend_from_slice(b" = ");
                q.extend_from_slice(literal.as_bytes());
            }
            out.push(Restore::query(&[&q], false));
        }
        out
    }

    /// The `SET SESSION`s that make a session whose system variables differing from their
    /// global values are `fresh` hold this one's: this session's value where the other
    /// differs, the global value (`DEFAULT`) where this one had it and the other does not.
    #[must_use]
    pub fn restore_system(&self, fresh: &[SystemVariable]) -> Vec<Restore> {
        let mut sets: Vec<(&str, &str)> = self
            .system
            .iter()
            .filter(|v| !fresh.iter().any(|f| f.name == v.name && f.value == v.value))
            .map(|v| (v.name.as_str(), v.literal.as_str()))
            .chain(
                fresh
                    .iter()
                    .filter(|f| !self.system.iter().any(|v| v.name == f.name))
                    .map(|f| (f.name.as_str(), "DEFAULT")),
            )
            .collect();
        sets.sort_by_key(|(name, _)| setting_order(name));
        sets.into_iter()
            .map(|(name, literal)| Restore {
                variable: Some(name.to_owned()),
                ..Restore::query(
                    &[
                        b"SET SESSION ",
                        &identifier(name.as_bytes()),
                        b" = ",
                        literal.as_bytes(),
                    ],
                    true,
                )
            })
            .collect()
    }

    /// Leaves the system variable `name` out of the state (one no session can set).
    pub fn forget_system_variable(&mut self, name: &str) {
        self.system.retain(|v| v.name != name);
    }
}

#[cfg(test)]
mod tests;
