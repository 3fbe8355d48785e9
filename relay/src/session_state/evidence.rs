//! What the compute says a session holds that no value carries, for a resumable session the
//! kernel splice carries (docs/kernel-splice.md, *Resumable sessions*): its commands are not
//! seen there, so what following them finds on the pump (`crate::session_effects`) is read
//! from the compute instead.
//!
//! From one query ([`QUERY`]):
//! - what the session holds now: an open transaction (`@@in_transaction`) and user locks
//!   (`GET_LOCK`, also from inside a function: `information_schema.METADATA_LOCK_INFO`,
//!   MariaDB's `metadata_lock_info` plugin);
//! - whether it ran, since a reading taken at a point where the relay saw every command
//!   after it, a statement that may leave what no read gives back ([`LEAVES_STATE`]: temporary
//!   tables, prepared statements the relay never saw, a `SET` that may be `SET TRANSACTION` or
//!   the multi-statements option, `CALL`, `XA`, `HANDLER … OPEN`, `LOCK TABLES`, `FLUSH`,
//!   `BACKUP`): the session's own counters (`information_schema.SESSION_STATUS`) moved. Such
//!   a session is pinned for good, as on the pump.
//! - whether those counters are the ones read before: `BYTES_RECEIVED` must have grown by
//!   exactly the bytes sent to the compute since. `FLUSH STATUS`, `COM_RESET_CONNECTION` and
//!   `COM_CHANGE_USER` reset the counters, and with them that count, so a reset cannot bring
//!   a counter back to its old value unseen.
//!
//! A compute without these tables (server-shim, or MariaDB without `metadata_lock_info`)
//! refuses the query: its resumable sessions are not spliced. Pure: rows in, values out.

use authplugin::packet::text_result::Row;

/// The per-session counters of statements that may leave a session holding what no read of
/// its state gives back. MariaDB's names, as `information_schema.SESSION_STATUS` spells them.
pub const LEAVES_STATE: [&str; 13] = [
    "COM_CREATE_TEMPORARY_TABLE",
    "COM_STMT_PREPARE",
    "COM_PREPARE_SQL",
    "COM_EXECUTE_IMMEDIATE",
    "COM_SET_OPTION",
    "COM_CALL_PROCEDURE",
    "COM_COMPOUND_SQL",
    "COM_XA_START",
    "COM_HA_OPEN",
    "COM_LOCK_TABLES",
    "COM_BACKUP_LOCK",
    "COM_BACKUP",
    "COM_FLUSH",
];

/// Why a session whose [`LEAVES_STATE`] counters moved unseen is pinned.
pub const LEFT_STATE: &str = "the compute counted a statement that may leave what no read \
     gives back (a temporary table, PREPARE, SET, CALL, XA, HANDLER, LOCK, FLUSH or BACKUP) \
     that the relay did not see";

/// Why a session whose counters were reset unseen is pinned.
pub const RESET: &str = "the session's status counters were reset (FLUSH STATUS, a reset \
     or a change of user) where the relay did not see it";

/// The session's bytes received, as `information_schema.SESSION_STATUS` names it.
const BYTES_RECEIVED: &str = "BYTES_RECEIVED";

/// The query that reads the session's transaction, its user locks, its [`LEAVES_STATE`]
/// counters and its bytes received, one `(name, value)` row each. Named `LIMIT`: a session's
/// `sql_select_limit` would cut it short. Written once, from [`LEAVES_STATE`].
pub static QUERY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let names: Vec<String> = LEAVES_STATE
        .iter()
        .chain([&BYTES_RECEIVED])
        .map(|name| format!("'{name}'"))
        .collect();
    format!(
        "SELECT 'IN_TRANSACTION', @@in_transaction \
         UNION ALL SELECT 'LOCKS', COUNT(*) FROM information_schema.METADATA_LOCK_INFO \
         WHERE THREAD_ID = CONNECTION_ID() AND LOCK_TYPE = 'User lock' \
         UNION ALL SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
         WHERE VARIABLE_NAME IN ({}) LIMIT 100",
        names.join(", ")
    )
});

/// One reading of [`QUERY`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    in_transaction: bool,
    locks: u64,
    counters: [u64; LEAVES_STATE.len()],
    bytes_received: u64,
}

/// What a reading leaves to compare a later one with: the sum of the [`LEAVES_STATE`]
/// counters (each only grows, short of a reset) and the bytes received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    counters: u64,
    bytes_received: u64,
}

/// The compute's answer to [`QUERY`] is not the rows asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotEvidence;

impl Evidence {
    /// Reads [`QUERY`]'s rows: every name once, every value a decimal number.
    ///
    /// # Errors
    /// [`NotEvidence`] for a missing, repeated or unknown name, or a value that is not a
    /// number.
    pub fn read(rows: &[Row]) -> Result<Self, NotEvidence> {
        let mut in_transaction = None;
        let mut locks = None;
        let mut bytes_received = None;
        let mut counters = [None; LEAVES_STATE.len()];
        for row in rows {
            let [Some(name), Some(value)] = row.as_slice() else {
                return Err(NotEvidence);
            };
            let value = number(value).ok_or(NotEvidence)?;
            let slot = match name.to_ascii_uppercase().as_slice() {
                b"IN_TRANSACTION" => &mut in_transaction,
                b"LOCKS" => &mut locks,
                b"BYTES_RECEIVED" => &mut bytes_received,
                name => {
                    let at = LEAVES_STATE
                        .iter()
                        .position(|counter| counter.as_bytes() == name)
                        .ok_or(NotEvidence)?;
                    counters.get_mut(at).ok_or(NotEvidence)?
                }
            };
            if slot.replace(value).is_some() {
                return Err(NotEvidence);
            }
        }
        let mut read = [0; LEAVES_STATE.len()];
        for (to, from) in read.iter_mut().zip(counters) {
            *to = from.ok_or(NotEvidence)?;
        }
        Ok(Self {
            in_transaction: in_transaction.ok_or(NotEvidence)? != 0,
            locks: locks.ok_or(NotEvidence)?,
            counters: read,
            bytes_received: bytes_received.ok_or(NotEvidence)?,
        })
    }

    /// What a later reading is compared with ([`Self::left_since`]).
    #[must_use]
    pub fn mark(&self) -> Mark {
        Mark {
            counters: self
                .counters
                .iter()
                .fold(0, |sum, n| sum.saturating_add(*n)),
            bytes_received: self.bytes_received,
        }
    }

    /// Whether a transaction is open.
    #[must_use]
    pub const fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Why the session cannot be carried: it holds a user lock (pinned for good, as
    /// `GET_LOCK` on the pump).
    #[must_use]
    pub const fn holds(&self) -> Option<&'static str> {
        if self.locks > 0 {
            Some("a user lock held (GET_LOCK)")
        } else {
            None
        }
    }

    /// Why a session read as `self` is pinned for good, given its reading `before` and the
    /// bytes `sent` to the compute since that reading, this reading's query included: a
    /// [`LEAVES_STATE`] counter moved ([`LEFT_STATE`]), or the counters are not those read
    /// before, their bytes received not grown by exactly `sent` ([`RESET`]).
    #[must_use]
    pub fn left_since(&self, before: Mark, sent: u64) -> Option<&'static str> {
        let now = self.mark();
        if before.bytes_received.checked_add(sent) != Some(now.bytes_received) {
            Some(RESET)
        } else if now.counters != before.counters {
            Some(LEFT_STATE)
        } else {
            None
        }
    }
}

/// A decimal number of at most 19 digits, as MariaDB writes a counter.
fn number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, &str)]) -> Vec<Row> {
        pairs
            .iter()
            .map(|(n, v)| vec![Some(n.as_bytes().to_vec()), Some(v.as_bytes().to_vec())])
            .collect()
    }

    /// Every name MariaDB answers, as `information_schema.SESSION_STATUS` spells them.
    fn answer(in_transaction: &str, locks: &str, counters: [&str; 13], bytes: &str) -> Vec<Row> {
        let mut pairs = vec![
            ("IN_TRANSACTION", in_transaction),
            ("LOCKS", locks),
            ("BYTES_RECEIVED", bytes),
        ];
        pairs.extend(LEAVES_STATE.iter().copied().zip(counters));
        rows(&pairs)
    }

    const ZEROS: [&str; 13] = ["0"; 13];

    #[test]
    fn reads_a_quiet_session() {
        let read = Evidence::read(&answer("0", "0", ZEROS, "500")).unwrap();
        assert!(!read.in_transaction());
        assert_eq!(read.holds(), None);
        assert_eq!(read.left_since(read.mark(), 0), None);
    }

    #[test]
    fn a_transaction_and_a_user_lock_are_what_the_session_holds_now() {
        let read = Evidence::read(&answer("1", "2", ZEROS, "500")).unwrap();
        assert!(read.in_transaction());
        assert!(read.holds().unwrap().contains("GET_LOCK"));
        let quiet = Evidence::read(&answer("0", "0", ZEROS, "500")).unwrap();
        assert_eq!(quiet.holds(), None);
    }

    #[test]
    fn a_counter_that_moved_pins() {
        let before = Evidence::read(&answer("0", "0", ZEROS, "500")).unwrap();
        for at in 0..13 {
            let mut moved = ZEROS;
            moved[at] = "1";
            let after = Evidence::read(&answer("0", "0", moved, "600")).unwrap();
            assert_eq!(
                after.left_since(before.mark(), 100),
                Some(LEFT_STATE),
                "{at}"
            );
        }
        let after = Evidence::read(&answer("0", "0", ZEROS, "600")).unwrap();
        assert_eq!(after.left_since(before.mark(), 100), None);
    }

    #[test]
    fn counters_reset_meanwhile_pin_whatever_they_read() {
        // A temporary table made, then FLUSH STATUS: the counter is back at its old value,
        // but the bytes received are not the old count and what was sent since.
        let before = Evidence::read(&answer("0", "0", ZEROS, "500")).unwrap();
        let after = Evidence::read(&answer("0", "0", ZEROS, "120")).unwrap();
        assert_eq!(after.left_since(before.mark(), 100), Some(RESET));
        let more = Evidence::read(&answer("0", "0", ZEROS, "601")).unwrap();
        assert_eq!(more.left_since(before.mark(), 100), Some(RESET));
        let huge = Evidence::read(&answer("0", "0", ZEROS, "5")).unwrap();
        assert_eq!(huge.left_since(before.mark(), u64::MAX), Some(RESET));
    }

    #[test]
    fn names_are_matched_whatever_their_case_in_any_order() {
        let mut pairs: Vec<(String, &str)> = LEAVES_STATE
            .iter()
            .rev()
            .map(|n| (n.to_ascii_lowercase(), "7"))
            .collect();
        pairs.push(("locks".into(), "0"));
        pairs.push(("Bytes_Received".into(), "9"));
        pairs.push(("In_Transaction".into(), "0"));
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let read = Evidence::read(&rows(&borrowed)).unwrap();
        assert_eq!(read.counters, [7; 13]);
        assert_eq!(
            read.mark(),
            Mark {
                counters: 91,
                bytes_received: 9
            }
        );
    }

    #[test]
    fn anything_else_is_not_evidence() {
        let full = answer("0", "0", ZEROS, "500");
        // A name missing, repeated, unknown; a value that is not a number; a NULL; a third
        // column.
        assert_eq!(Evidence::read(&full[1..]), Err(NotEvidence));
        let mut repeated = full.clone();
        repeated.push(full[3].clone());
        assert_eq!(Evidence::read(&repeated), Err(NotEvidence));
        let mut unknown = full.clone();
        unknown.push(rows(&[("COM_SELECT", "1")]).remove(0));
        assert_eq!(Evidence::read(&unknown), Err(NotEvidence));
        for bad in ["", "-1", "1.0", " 1", "12345678901234567890", "x"] {
            let mut rows = full.clone();
            rows[3][1] = Some(bad.as_bytes().to_vec());
            assert_eq!(Evidence::read(&rows), Err(NotEvidence), "{bad:?}");
        }
        let mut null = full.clone();
        null[0][1] = None;
        assert_eq!(Evidence::read(&null), Err(NotEvidence));
        let mut wide = full;
        wide[0].push(None);
        assert_eq!(Evidence::read(&wide), Err(NotEvidence));
        assert_eq!(Evidence::read(&[]), Err(NotEvidence));
    }
}
