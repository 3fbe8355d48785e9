//! What a relayed session's commands did to its state, for carrying it to a new compute
//! (docs/parking.md, "Sessions across a stop").
//!
//! The relay never keeps or sends a client's text again: what a session holds is read by value
//! from its compute ([`crate::session_state`]). Following the commands tells three things: a
//! command may have changed the session's state ([`Effect::changes_state`]: it is read again
//! before the session may be carried), a transaction is open, or the session holds something
//! no value can carry and is *pinned* to its compute: temporary tables, named and table locks,
//! stored procedure calls, SQL-level `PREPARE`, `SET GLOBAL`, `SET TRANSACTION`,
//! multi-statement text, executable comments, a prepared statement with a cursor or unconsumed
//! long data, and any statement the relay does not recognise. An open transaction pins it for
//! as long as it is open: from `BEGIN` (or, with autocommit off, from any statement) to
//! `COMMIT` or `ROLLBACK`, and whenever the status flags say so. `COM_RESET_CONNECTION`
//! clears pins and statements; a session that ran `COM_CHANGE_USER` stays pinned (its state
//! read names its user too).
//!
//! Prepared statements (`COM_STMT_PREPARE`) are kept until closed, with the id the client was
//! given, and prepared again on a reattach ([`crate::statement_ids`] then translates ids):
//! preparing runs nothing. `COM_SET_OPTION` (multi-statements on or off) is kept as its value.
//!
//! Pure: bytes in, a verdict out.

use std::collections::{BTreeMap, BTreeSet};

/// What a command did to its session's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing that outlives the command (not a statement: a ping, a statistics request).
    None,
    /// A statement that leaves no session state behind; with autocommit off it opens a
    /// transaction.
    Statement,
    /// A statement that sets session state (`SET`, `USE`, `COM_INIT_DB`): read back by value.
    Sets,
    /// As [`Effect::Sets`], and it turns autocommit off (`true`) or on (`false`).
    SetsAutocommit(bool),
    /// `COM_SET_OPTION` with this option: multi-statements on (0) or off (1).
    SetOption(u16),
    /// State that cannot be carried: the session stays on its compute.
    Pins(&'static str),
    /// `COM_RESET_CONNECTION`: the session is as after its login.
    Reset,
    /// `BEGIN`, `START TRANSACTION`, `COMMIT AND CHAIN`: a transaction is open (the status
    /// flags say so too, but not every compute sets them on every reply).
    Begin,
    /// `COMMIT`, `ROLLBACK`: no transaction is open.
    End,
    /// `COM_STMT_PREPARE`: the statement is kept, under the id in the compute's answer
    /// ([`Log::prepared`]).
    Prepare,
    /// `COM_STMT_EXECUTE` (without a cursor) of this statement: a statement, which also
    /// consumes the statement's long data.
    Execute(u32),
    /// `COM_STMT_SEND_LONG_DATA` for this statement: data the compute holds until the
    /// statement runs, which a reattach cannot carry.
    LongData(u32),
    /// `COM_STMT_RESET` of this statement: its long data is dropped.
    ResetStatement(u32),
    /// `COM_STMT_CLOSE` of this statement.
    CloseStatement(u32),
    /// `COM_CHANGE_USER`: the session is another user's; it stays on its compute.
    ChangeUser,
}

impl Effect {
    /// Whether the command leaves the compute's counters of what no read gives back as they
    /// were (`session_state::evidence::LEAVES_STATE`): a plain statement, a transaction's
    /// bounds, no statement at all. Anything else may move them.
    #[must_use]
    pub const fn leaves_counters(self) -> bool {
        matches!(self, Self::None | Self::Statement | Self::Begin | Self::End)
    }

    /// Whether the command may have changed what the session holds: anything that runs a
    /// statement (a `SELECT` may call a function that sets a user variable), sets a variable,
    /// or resets the session. Pings, and statements prepared, closed or fed data, do not.
    #[must_use]
    pub const fn changes_state(self) -> bool {
        !matches!(
            self,
            Self::None
                | Self::Prepare
                | Self::LongData(_)
                | Self::ResetStatement(_)
                | Self::CloseStatement(_)
        )
    }
}

use authplugin::packet::command::{
    COM_CHANGE_USER, COM_INIT_DB, COM_QUERY, COM_RESET_CONNECTION, COM_SET_OPTION,
    COM_STMT_BULK_EXECUTE, COM_STMT_CLOSE, COM_STMT_EXECUTE, COM_STMT_PREPARE, COM_STMT_RESET,
    COM_STMT_SEND_LONG_DATA,
};

/// The effect of one command packet's payload (its first byte is the command).
#[must_use]
pub fn effect_of(payload: &[u8]) -> Effect {
    match payload.split_first() {
        Some((&COM_QUERY, text)) => query_effect(text),
        Some((&COM_INIT_DB, _)) => Effect::Sets,
        Some((&COM_SET_OPTION, [a, b])) => Effect::SetOption(u16::from_le_bytes([*a, *b])),
        Some((&COM_RESET_CONNECTION, _)) => Effect::Reset,
        // COM_QUIT, COM_FIELD_LIST, COM_STATISTICS, COM_PROCESS_INFO, COM_PING, COM_DEBUG.
        Some((&(0x01 | 0x04 | 0x09 | 0x0A | 0x0E | 0x0D), _)) => Effect::None,
        Some((&COM_STMT_PREPARE, _)) => Effect::Prepare,
        // MariaDB's "the statement prepared last" (id -1): which one that is on the compute
        // is not followed here.
        Some((&COM_STMT_EXECUTE | &COM_STMT_BULK_EXECUTE, [0xFF, 0xFF, 0xFF, 0xFF, ..])) => {
            Effect::Pins("statement run by MariaDB's last-prepared id")
        }
        Some((&COM_STMT_EXECUTE, [a, b, c, d, flags, ..])) => {
            if *flags == 0 {
                Effect::Execute(u32::from_le_bytes([*a, *b, *c, *d]))
            } else {
                // A cursor's rows wait on the compute.
                Effect::Pins("cursor")
            }
        }
        Some((&COM_STMT_BULK_EXECUTE, [a, b, c, d, ..])) => {
            Effect::Execute(u32::from_le_bytes([*a, *b, *c, *d]))
        }
        Some((&COM_STMT_SEND_LONG_DATA, [a, b, c, d, ..])) => {
            Effect::LongData(u32::from_le_bytes([*a, *b, *c, *d]))
        }
        Some((&COM_STMT_RESET, [a, b, c, d, ..])) => {
            Effect::ResetStatement(u32::from_le_bytes([*a, *b, *c, *d]))
        }
        Some((&COM_STMT_CLOSE, [a, b, c, d, ..])) => {
            Effect::CloseStatement(u32::from_le_bytes([*a, *b, *c, *d]))
        }
        Some((&COM_CHANGE_USER, _)) => Effect::ChangeUser,
        _ => Effect::Pins("command"),
    }
}

/// The settable per-statement variables (`crate::session_state::PER_STATEMENT`), upper case:
/// a `SET` that names one pins the session.
const PER_STATEMENT_SETTINGS: &[&str] = &[
    "TIMESTAMP",
    "INSERT_ID",
    "LAST_INSERT_ID",
    "IDENTITY",
    "RAND_SEED1",
    "RAND_SEED2",
    "PSEUDO_THREAD_ID",
    "GTID_SEQ_NO",
];

/// Statements that leave no session state behind (when they name no user variable).
const STATELESS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "SHOW",
    "DESCRIBE",
    "DESC",
    "EXPLAIN",
    "WITH",
    "VALUES",
    "TABLE",
    "SAVEPOINT",
    "RELEASE",
    "CREATE",
    "ALTER",
    "DROP",
    "TRUNCATE",
    "RENAME",
    "ANALYZE",
    "OPTIMIZE",
    "CHECKSUM",
];

fn query_effect(text: &[u8]) -> Effect {
    let scan = Scan::of(text);
    if scan.executable_comment {
        return Effect::Pins("executable comment");
    }
    if scan.statements > 1 {
        return Effect::Pins("multi-statement query");
    }
    let words = &scan.words;
    let Some(first) = words.first() else {
        return Effect::None;
    };
    let has = |w: &str| words.iter().any(|x| x == w);
    match first.as_str() {
        // `SET STATEMENT <assignments> FOR <statement>` runs its statement: that statement's
        // effect, and its assignments end with it.
        "SET" if words.get(1).is_some_and(|w| w == "STATEMENT") => {
            let inner = words.iter().skip(2).position(|w| w == "FOR");
            match inner.and_then(|i| words.get(i + 3..)) {
                Some(inner) if inner.iter().any(|w| w == "TEMPORARY") => {
                    Effect::Pins("temporary table")
                }
                Some(inner) if inner.iter().any(|w| w == "GET_LOCK" || w == "LOCK") => {
                    Effect::Pins("lock")
                }
                Some([first, ..]) if STATELESS.contains(&first.as_str()) => Effect::Sets,
                _ => Effect::Pins("statement"),
            }
        }
        "SET" => {
            if has("GET_LOCK") {
                // `SET @x = GET_LOCK(...)`: the lock outlives the statement.
                Effect::Pins("lock")
            } else if has("GLOBAL") || has("PERSIST") || has("PERSIST_ONLY") || has("PASSWORD") {
                Effect::Pins("SET of more than the session")
            } else if words.get(1).is_some_and(|w| w == "TRANSACTION") {
                Effect::Pins("SET TRANSACTION")
            } else if PER_STATEMENT_SETTINGS
                .iter()
                .any(|name| scan.names_variable(name))
            {
                // Session-only values a new session has afresh (session_state::PER_STATEMENT):
                // one the client set would be lost.
                Effect::Pins("SET of a per-statement variable")
            } else if has("AUTOCOMMIT") {
                // With autocommit off every statement opens a transaction, which the relay
                // then follows itself: not every compute reports it in every reply's status
                // flags.
                // Off unless the text says on and nothing that could say off: a value the
                // text does not show (a prepared `SET autocommit = ?`, `= @v`) is taken as
                // off, which only keeps the session pinned longer.
                Effect::SetsAutocommit(
                    has("0")
                        || has("OFF")
                        || has("FALSE")
                        || !(has("1") || has("ON") || has("TRUE")),
                )
            } else {
                Effect::Sets
            }
        }
        "USE" => Effect::Sets,
        "BEGIN" | "START" => Effect::Begin,
        "COMMIT" | "ROLLBACK" if has("CHAIN") && !has("NO") => Effect::Begin,
        "ROLLBACK" if has("TO") => Effect::Statement,
        "COMMIT" | "ROLLBACK" => Effect::End,
        _ if has("TEMPORARY") => Effect::Pins("temporary table"),
        _ if has("GET_LOCK") || has("LOCK") => Effect::Pins("lock"),
        w if STATELESS.contains(&w) => Effect::Statement,
        _ => Effect::Pins("statement"),
    }
}

/// A look at a query's text outside quotes and comments.
#[derive(Debug, Default)]
struct Scan {
    /// Upper-cased words (letters, digits, `_`, `$`), in order.
    words: Vec<String>,
    /// For each word: whether it is a plain name (not `@name`, not a function's `name(`).
    plain: Vec<bool>,
    /// Non-empty statements separated by `;`.
    statements: usize,
    /// A `/*!` or `/*M!` comment, which MySQL runs.
    executable_comment: bool,
}

/// The most words kept: enough for every rule above.
const MAX_WORDS: usize = 4096;

impl Scan {
    fn of(text: &[u8]) -> Self {
        let mut scan = Self::default();
        let mut i = 0;
        let mut in_statement = false;
        // The last character was a single `@`: the next word is a user variable's name.
        let mut after_at = false;
        while let Some(&c) = text.get(i) {
            match c {
                b'\'' | b'"' | b'`' => {
                    i = skip_quoted(text, i + 1, c);
                    in_statement = true;
                    continue;
                }
                b'/' if text.get(i + 1) == Some(&b'*') => {
                    if matches!(text.get(i + 2), Some(b'!' | b'M')) {
                        scan.executable_comment = true;
                    }
                    i = find(text, i + 2, b"*/").map_or(text.len(), |end| end + 2);
                    continue;
                }
                b'#' => {
                    i = find(text, i, b"\n").map_or(text.len(), |end| end + 1);
                    continue;
                }
                b'-' if text.get(i + 1) == Some(&b'-')
                    && text.get(i + 2).is_none_or(u8::is_ascii_whitespace) =>
                {
                    i = find(text, i, b"\n").map_or(text.len(), |end| end + 1);
                    continue;
                }
                b'@' => {
                    // `@x` is a user variable; `@@x` a system variable, named as such.
                    if text.get(i + 1) == Some(&b'@') {
                        i += 2;
                    } else {
                        i += 1;
                        after_at = true;
                    }
                    in_statement = true;
                    continue;
                }
                b';' => {
                    if in_statement {
                        scan.statements += 1;
                    }
                    in_statement = false;
                }
                c if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' => {
                    let start = i;
                    while text
                        .get(i)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$')
                    {
                        i += 1;
                    }
                    if scan.words.len() < MAX_WORDS {
                        let word = text.get(start..i).unwrap_or_default();
                        scan.words
                            .push(String::from_utf8_lossy(word).to_ascii_uppercase());
                        let called = text
                            .get(i..)
                            .and_then(|rest| rest.iter().find(|c| !c.is_ascii_whitespace()))
                            == Some(&b'(');
                        scan.plain.push(!after_at && !called);
                    }
                    after_at = false;
                    in_statement = true;
                    continue;
                }
                c if c.is_ascii_whitespace() => {}
                _ => in_statement = true,
            }
            i += 1;
        }
        if in_statement {
            scan.statements += 1;
        }
        scan
    }
}

impl Scan {
    /// Whether `name` (upper case) appears as a variable's name: not a user variable's, not a
    /// function called.
    fn names_variable(&self, name: &str) -> bool {
        self.words
            .iter()
            .zip(&self.plain)
            .any(|(w, plain)| *plain && w == name)
    }
}

/// The index after the closing `quote` (a doubled quote or a backslash escapes one).
fn skip_quoted(text: &[u8], mut i: usize, quote: u8) -> usize {
    while let Some(&c) = text.get(i) {
        if c == b'\\' && quote != b'`' {
            i += 2;
        } else if c == quote {
            if text.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    text.len()
}

fn find(text: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    text.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// One of a session's open prepared statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statement<'a> {
    /// The id the client was given.
    pub id: u32,
    /// The `COM_STMT_PREPARE` payload.
    pub payload: &'a [u8],
    /// (columns, parameters) in its first `COM_STMT_PREPARE_OK`: a statement prepared again
    /// must have the same.
    pub shape: (u16, u16),
}

/// What a session's commands left that the relay follows: pins, an open transaction, open
/// prepared statements (within a budget), the multi-statements option.
#[derive(Debug, Default)]
pub struct Log {
    /// Open prepared statements: the client's id → the `COM_STMT_PREPARE` payload and the
    /// statement's (columns, parameters).
    statements: BTreeMap<u32, (Vec<u8>, (u16, u16))>,
    /// Statements with long data sent and not yet consumed.
    long_data: BTreeSet<u32>,
    /// Bytes of `statements`.
    bytes: usize,
    pinned: Option<&'static str>,
    /// `COM_CHANGE_USER` was accepted: not cleared by `COM_RESET_CONNECTION`.
    changed_user: bool,
    /// The last `COM_SET_OPTION` the compute accepted.
    set_option: Option<u16>,
    /// A transaction is (or may be) open.
    transaction: bool,
    /// The session turned autocommit off: every statement opens a transaction.
    autocommit_off: bool,
    /// The session prepared a statement once ([`Self::prepares`]); kept across
    /// `COM_RESET_CONNECTION`.
    prepares: bool,
    /// The client sent a command before the last one's response once ([`Self::pipelines`]);
    /// kept across `COM_RESET_CONNECTION`.
    pipelines: bool,
}

/// The most bytes of prepared statements kept per session; past it the session is pinned.
pub const MAX_LOG_BYTES: usize = 16 * 1024;

impl Log {
    /// Notes a command as it is sent. What may open a transaction or pin the session counts
    /// from here, whatever the reply: a failed `BEGIN` pins the session until the next
    /// `COMMIT` or `ROLLBACK`, which is only careful. Returns whether the rest of the effect
    /// waits for the compute's OK ([`Self::accepted`]).
    pub fn sent(&mut self, effect: Effect) -> bool {
        match effect {
            Effect::None => false,
            Effect::Statement => {
                self.transaction |= self.autocommit_off;
                false
            }
            Effect::Begin => {
                self.transaction = true;
                false
            }
            Effect::Pins(why) => {
                self.pinned.get_or_insert(why);
                false
            }
            Effect::Execute(id) => {
                self.transaction |= self.autocommit_off;
                self.long_data.remove(&id);
                false
            }
            Effect::LongData(id) => {
                self.long_data.insert(id);
                false
            }
            Effect::ResetStatement(id) => {
                self.long_data.remove(&id);
                false
            }
            Effect::CloseStatement(id) => {
                self.long_data.remove(&id);
                if let Some((payload, _)) = self.statements.remove(&id) {
                    self.bytes -= payload.len();
                }
                false
            }
            Effect::ChangeUser => {
                // Pinned from the moment it is sent, whatever the compute answers.
                self.changed_user = true;
                false
            }
            Effect::Sets
            | Effect::SetsAutocommit(_)
            | Effect::SetOption(_)
            | Effect::End
            | Effect::Reset
            | Effect::Prepare => true,
        }
    }

    /// The effect of one command payload in this session: [`effect_of`]'s, and executing a
    /// prepared statement whose text does more than a plain statement (a prepared `CREATE
    /// TEMPORARY TABLE`, `SET`, `COMMIT`) has that text's effect, as if sent as a query; its
    /// long data, which running it consumes, is dropped then (for a plain statement,
    /// [`Self::sent`] does).
    #[must_use]
    pub fn effect(&mut self, payload: &[u8]) -> Effect {
        let effect = effect_of(payload);
        let Effect::Execute(id) = effect else {
            return effect;
        };
        match self
            .statements
            .get(&id)
            .map(|(prepare, _)| query_effect(prepare.get(1..).unwrap_or_default()))
        {
            None | Some(Effect::Statement | Effect::None) => effect,
            Some(text) => {
                self.long_data.remove(&id);
                text
            }
        }
    }

    /// Records a statement the compute prepared: `payload` (`COM_STMT_PREPARE`) under the id
    /// the client was given, with the compute's (columns, parameters) for it.
    pub fn prepared(&mut self, id: u32, shape: (u16, u16), payload: &[u8]) {
        self.prepares = true;
        if self.bytes + payload.len() > MAX_LOG_BYTES {
            self.pinned.get_or_insert("session statements over 16 KiB");
            return;
        }
        self.bytes += payload.len();
        if let Some((old, _)) = self.statements.insert(id, (payload.to_vec(), shape)) {
            self.bytes -= old.len();
        }
    }

    /// Records a command the compute accepted (its [`Effect`] already known).
    pub fn accepted(&mut self, effect: Effect) {
        match effect {
            Effect::None
            | Effect::Statement
            | Effect::Sets
            | Effect::Prepare
            | Effect::Execute(_)
            | Effect::LongData(_)
            | Effect::ResetStatement(_)
            | Effect::CloseStatement(_) => {}
            Effect::ChangeUser => self.changed_user = true,
            Effect::Pins(why) => {
                self.pinned.get_or_insert(why);
            }
            Effect::Reset => {
                *self = Self {
                    changed_user: self.changed_user,
                    set_option: self.set_option,
                    prepares: self.prepares,
                    pipelines: self.pipelines,
                    ..Self::default()
                };
            }
            Effect::Begin => self.transaction = true,
            Effect::End => self.transaction = false,
            Effect::SetsAutocommit(off) => self.autocommit_off = off,
            Effect::SetOption(option) => self.set_option = Some(option),
        }
    }

    /// Pins the session for `why` (something about a command the relay could not follow).
    pub fn pin(&mut self, why: &'static str) {
        self.pinned.get_or_insert(why);
    }

    /// What the compute says of the session where its commands were not followed (the
    /// kernel splice carried them): whether a transaction is open, and why the session is
    /// pinned for good if it is.
    pub fn seen_by_compute(&mut self, in_transaction: bool, pinned: Option<&'static str>) {
        self.transaction = in_transaction;
        if let Some(why) = pinned {
            self.pin(why);
        }
    }

    /// The client sent a command before the response to its last one.
    pub const fn pipelined(&mut self) {
        self.pipelines = true;
    }

    /// Whether the client ever pipelined its commands: one whose response is still on its
    /// way when the relay reads from the compute (a spliced session taken back) would take
    /// the relay's answer, so such a session is not spliced.
    #[must_use]
    pub const fn pipelines(&self) -> bool {
        self.pipelines
    }

    /// Whether the session ever prepared a statement: a client that prepares does so again,
    /// and a statement prepared where the relay does not see it (the kernel splice) pins the
    /// session for good.
    #[must_use]
    pub const fn prepares(&self) -> bool {
        self.prepares
    }

    /// Why the session cannot be carried, if it cannot.
    #[must_use]
    pub fn pinned(&self) -> Option<&'static str> {
        match self.pinned {
            None if self.changed_user => Some("COM_CHANGE_USER"),
            None if self.transaction => Some("open transaction"),
            None if !self.long_data.is_empty() => Some("prepared statement long data"),
            pinned => pinned,
        }
    }

    /// The `COM_SET_OPTION` payload that sets the multi-statements option as the session
    /// last set it, if it did.
    #[must_use]
    pub fn set_option(&self) -> Option<[u8; 3]> {
        let [lo, hi] = self.set_option?.to_le_bytes();
        Some([COM_SET_OPTION, lo, hi])
    }

    /// The open prepared statements to prepare again, by id.
    pub fn statements(&self) -> impl Iterator<Item = Statement<'_>> {
        self.statements
            .iter()
            .map(|(id, (payload, shape))| Statement {
                id: *id,
                payload,
                shape: *shape,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(sql: &str) -> Effect {
        let mut p = vec![COM_QUERY];
        p.extend_from_slice(sql.as_bytes());
        effect_of(&p)
    }

    #[test]
    fn reads_and_writes_leave_nothing() {
        for sql in [
            "SELECT 1",
            "select * from t where email = 'a@b.c'",
            "INSERT INTO t VALUES ('x;y', \"@\")",
            "  /* a comment; with @ */ UPDATE t SET a = 1",
            "SELECT @@sql_mode, @@SESSION.time_zone",
            "SELECT 1;",
            "-- note\nSELECT 1",
            "CREATE TABLE t (a INT)",
            "ROLLBACK TO SAVEPOINT s",
        ] {
            assert_eq!(q(sql), Effect::Statement, "{sql}");
        }
        assert_eq!(q(""), Effect::None);
    }

    #[test]
    fn session_settings_are_read_back_by_value() {
        for sql in [
            "SET NAMES utf8mb4",
            "set session sql_mode = 'ANSI_QUOTES'",
            "SET sql_mode=''",
            "SET @x = 1",
            "SET character_set_results = NULL",
            "USE shop",
            // Runs a statement: read back by value like any SET, never sent again.
            "SET STATEMENT max_statement_time=10 FOR INSERT INTO t VALUES (1)",
        ] {
            assert_eq!(q(sql), Effect::Sets, "{sql}");
        }
        assert_eq!(effect_of(&[COM_INIT_DB, b's']), Effect::Sets);
        assert_eq!(effect_of(&[COM_SET_OPTION, 1, 0]), Effect::SetOption(1));
        // Functions and user variables named like per-statement variables do not pin.
        assert_eq!(q("SET @id = LAST_INSERT_ID()"), Effect::Sets);
        assert_eq!(
            q("SET @timestamp = NOW(), @t = TIMESTAMP ('2020-01-01')"),
            Effect::Sets
        );
        // User variables anywhere are read back by value too.
        assert_eq!(q("SELECT @x := 1"), Effect::Statement);
        assert_eq!(q("SELECT a INTO @x FROM t"), Effect::Statement);
        for effect in [
            Effect::Sets,
            Effect::Statement,
            Effect::Reset,
            Effect::Execute(1),
        ] {
            assert!(effect.changes_state(), "{effect:?}");
        }
        for effect in [Effect::None, Effect::Prepare, Effect::CloseStatement(1)] {
            assert!(!effect.changes_state(), "{effect:?}");
        }
    }

    #[test]
    fn what_cannot_be_carried_pins() {
        for (sql, why) in [
            ("CREATE TEMPORARY TABLE t (a INT)", "temporary table"),
            ("LOCK TABLES t WRITE", "lock"),
            ("SELECT GET_LOCK('a', 1)", "lock"),
            ("SELECT 1; SET @x = 1", "multi-statement query"),
            ("/*!40101 SET NAMES utf8 */", "executable comment"),
            (
                "SET GLOBAL max_connections = 10",
                "SET of more than the session",
            ),
            (
                "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                "SET TRANSACTION",
            ),
            ("SET timestamp = 1000", "SET of a per-statement variable"),
            (
                "SET SESSION insert_id = 7",
                "SET of a per-statement variable",
            ),
            (
                "SET @@session.rand_seed1 = 7",
                "SET of a per-statement variable",
            ),
            ("PREPARE s FROM 'SELECT 1'", "statement"),
            ("CALL p()", "statement"),
        ] {
            assert_eq!(q(sql), Effect::Pins(why), "{sql}");
        }
        assert_eq!(
            effect_of(&[COM_STMT_EXECUTE, 1, 0, 0, 0, 1, 1, 0, 0, 0]),
            Effect::Pins("cursor")
        );
        assert_eq!(effect_of(&[COM_CHANGE_USER]), Effect::ChangeUser);
        assert_eq!(effect_of(&[0xEE]), Effect::Pins("command"));
        assert_eq!(effect_of(&[]), Effect::Pins("command"));
        assert_eq!(effect_of(&[COM_RESET_CONNECTION]), Effect::Reset);
        assert_eq!(effect_of(&[0x0E]), Effect::None);
    }

    #[test]
    fn prepared_statements_are_kept_until_closed() {
        let prepare = b"\x16SELECT * FROM t WHERE id = ?";
        assert_eq!(effect_of(prepare), Effect::Prepare);
        let mut log = Log::default();
        assert!(log.sent(Effect::Prepare), "kept once the compute answers");
        log.prepared(7, (2, 1), prepare);
        log.prepared(9, (1, 0), b"\x16SELECT 1");
        assert_eq!(log.pinned(), None);
        assert_eq!(
            log.statements().collect::<Vec<_>>(),
            [
                Statement {
                    id: 7,
                    payload: prepare,
                    shape: (2, 1)
                },
                Statement {
                    id: 9,
                    payload: b"\x16SELECT 1",
                    shape: (1, 0)
                }
            ]
        );
        // Running one leaves nothing; long data waits on the compute until it runs.
        let execute = [COM_STMT_EXECUTE, 7, 0, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(effect_of(&execute), Effect::Execute(7));
        assert!(!log.sent(effect_of(&execute)));
        let long_data = [COM_STMT_SEND_LONG_DATA, 7, 0, 0, 0, 0, 0, b'x'];
        assert_eq!(effect_of(&long_data), Effect::LongData(7));
        log.sent(effect_of(&long_data));
        assert_eq!(log.pinned(), Some("prepared statement long data"));
        log.sent(effect_of(&execute));
        assert_eq!(log.pinned(), None);
        log.sent(effect_of(&long_data));
        log.sent(effect_of(&[COM_STMT_RESET, 7, 0, 0, 0]));
        assert_eq!(log.pinned(), None, "a reset drops the long data");
        // Closed, it is not prepared again; with autocommit off, running one opens a
        // transaction.
        log.sent(effect_of(&[COM_STMT_CLOSE, 7, 0, 0, 0]));
        assert_eq!(log.statements().map(|s| s.id).collect::<Vec<_>>(), [9]);
        log.accepted(q("SET autocommit=0"));
        log.sent(effect_of(&[COM_STMT_BULK_EXECUTE, 9, 0, 0, 0, 0, 0]));
        assert_eq!(log.pinned(), Some("open transaction"));
        // A reset connection has no statements left; statements count in the budget.
        log.accepted(Effect::Reset);
        assert_eq!(log.statements().count(), 0);
        log.prepared(1, (0, 0), &vec![COM_STMT_PREPARE; MAX_LOG_BYTES + 1]);
        assert_eq!(log.pinned(), Some("session statements over 16 KiB"));
        assert_eq!(log.statements().count(), 0);
    }

    /// Found by node-mysql2's own suite: its tests create temporary tables with
    /// `connection.execute()`, which the relay took for a plain statement and carried the
    /// session to a new login without its table.
    #[test]
    fn a_prepared_statement_runs_with_its_texts_effect() {
        let mut log = Log::default();
        let texts: [(u32, &[u8]); 4] = [
            (1, b"\x16CREATE TEMPORARY TABLE t (a INT)"),
            (2, b"\x16SELECT ?"),
            (3, b"\x16SET @a = ?"),
            (4, b"\x16COMMIT"),
        ];
        for (id, payload) in texts {
            log.prepared(id, (0, 0), payload);
        }
        let execute = |id: u8| [COM_STMT_EXECUTE, id, 0, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(log.effect(&execute(1)), Effect::Pins("temporary table"));
        assert_eq!(log.effect(&execute(2)), Effect::Execute(2));
        assert_eq!(log.effect(&execute(3)), Effect::Sets);
        assert_eq!(log.effect(&execute(4)), Effect::End);
        assert_eq!(log.effect(&execute(5)), Effect::Execute(5), "not prepared");
        assert_eq!(log.effect(b"\x03SELECT 1"), Effect::Statement);
        // Long data for a prepared SET is consumed by running it.
        log.sent(Effect::LongData(3));
        let effect = log.effect(&execute(3));
        log.sent(effect);
        assert_eq!(log.pinned(), None);
        // MariaDB's last-prepared id: which statement that is, is not followed.
        let last = [COM_STMT_EXECUTE, 0xFF, 0xFF, 0xFF, 0xFF, 0, 1, 0, 0, 0];
        assert!(matches!(log.effect(&last), Effect::Pins(_)));
        let effect = log.effect(&execute(1));
        log.sent(effect);
        assert_eq!(log.pinned(), Some("temporary table"));
    }

    /// Found by a review: these ran a lock or a temporary table under a `SET`.
    #[test]
    fn a_set_that_takes_a_lock_or_runs_a_statement_is_that_statement() {
        assert_eq!(q("SET @x = GET_LOCK('k', 0)"), Effect::Pins("lock"));
        assert_eq!(
            q("SET STATEMENT max_statement_time=0 FOR SELECT GET_LOCK('k', 0)"),
            Effect::Pins("lock")
        );
        assert_eq!(
            q("SET STATEMENT sql_mode='' FOR CREATE TEMPORARY TABLE t (a INT)"),
            Effect::Pins("temporary table")
        );
        assert_eq!(
            q("SET STATEMENT max_statement_time=10 FOR INSERT INTO t VALUES ()"),
            Effect::Sets
        );
        assert_eq!(
            q("SET STATEMENT max_statement_time=10 FOR CALL p()"),
            Effect::Pins("statement")
        );
        // A value the text does not show counts as autocommit off.
        assert_eq!(q("SET autocommit = ?"), Effect::SetsAutocommit(true));
        assert_eq!(q("SET autocommit = @v"), Effect::SetsAutocommit(true));
        assert_eq!(q("SET autocommit = 1"), Effect::SetsAutocommit(false));
        assert_eq!(q("SET autocommit = ON"), Effect::SetsAutocommit(false));
        assert_eq!(q("SET autocommit = 0"), Effect::SetsAutocommit(true));
    }

    #[test]
    fn quotes_and_comments_hide_what_they_contain() {
        assert_eq!(q("SELECT 'it''s; @x' AS a"), Effect::Statement);
        assert_eq!(q("SELECT \"a\\\"; @b\""), Effect::Statement);
        assert_eq!(q("SELECT `we;ird@`"), Effect::Statement);
        assert_eq!(q("SELECT 1 # ; @x\n"), Effect::Statement);
        // An unterminated quote or comment ends the text; nothing panics.
        assert_eq!(q("SELECT 'abc"), Effect::Statement);
        assert_eq!(q("SELECT 1 /* abc"), Effect::Statement);
    }

    #[test]
    fn the_log_follows_pins_transactions_and_options() {
        let mut log = Log::default();
        log.accepted(Effect::Sets);
        log.accepted(Effect::None);
        assert_eq!(log.pinned(), None);
        log.accepted(Effect::Pins("lock"));
        assert_eq!(log.pinned(), Some("lock"));
        log.accepted(Effect::Reset);
        log.accepted(q("BEGIN"));
        assert_eq!(log.pinned(), Some("open transaction"));
        log.accepted(q("COMMIT"));
        assert_eq!(log.pinned(), None);
        assert_eq!(q("START TRANSACTION"), Effect::Begin);
        assert_eq!(q("SET autocommit = 0"), Effect::SetsAutocommit(true));
        assert_eq!(q("SET AUTOCOMMIT = ON"), Effect::SetsAutocommit(false));
        // With autocommit off, any statement may open a transaction; COMMIT ends it.
        let mut log = Log::default();
        log.accepted(q("SET autocommit=0"));
        assert!(!log.sent(q("SELECT 1")));
        assert_eq!(log.pinned(), Some("open transaction"));
        assert!(log.sent(q("COMMIT")));
        log.accepted(q("COMMIT"));
        assert_eq!(log.pinned(), None);
        // COM_SET_OPTION is kept as its value, across a reset.
        let mut log = Log::default();
        assert_eq!(log.set_option(), None);
        log.accepted(Effect::SetOption(1));
        log.accepted(Effect::Pins("lock"));
        log.accepted(Effect::Reset);
        assert_eq!(log.pinned(), None);
        assert_eq!(log.set_option(), Some([COM_SET_OPTION, 1, 0]));
    }

    #[test]
    fn a_changed_user_stays_pinned_through_a_reset() {
        // A pool's check-in resets the session; the user it changed to stays (MySQL keeps
        // it), so the session must not be carried as the user that logged in.
        let mut log = Log::default();
        assert!(!log.sent(effect_of(&[COM_CHANGE_USER, b'r', b'o', 0])));
        assert_eq!(log.pinned(), Some("COM_CHANGE_USER"));
        log.accepted(Effect::Reset);
        assert_eq!(log.pinned(), Some("COM_CHANGE_USER"));
    }

    #[test]
    fn what_the_compute_says_replaces_what_was_followed_and_prepares_and_pipelining_outlive_a_reset()
     {
        let mut log = Log::default();
        log.sent(Effect::Begin);
        assert_eq!(log.pinned(), Some("open transaction"));
        log.seen_by_compute(false, None);
        assert_eq!(log.pinned(), None);
        log.seen_by_compute(true, None);
        assert_eq!(log.pinned(), Some("open transaction"));
        log.seen_by_compute(false, Some("a lock held"));
        assert_eq!(log.pinned(), Some("a lock held"));
        log.seen_by_compute(false, None);
        assert_eq!(log.pinned(), Some("a lock held"), "pinned for good");

        let mut log = Log::default();
        assert!(!log.prepares());
        log.prepared(1, (1, 0), b"\x16SELECT 1");
        log.sent(Effect::CloseStatement(1));
        assert!(!log.pipelines());
        log.pipelined();
        log.accepted(Effect::Reset);
        assert!(log.prepares() && log.pipelines());
    }
}
