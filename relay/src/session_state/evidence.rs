//! What the compute says a session holds that no value carries, for a resumable session the
//! kernel splice carries (docs/kernel-splice.md, *Resumable sessions*): its commands are not
//! seen there, so what following them finds on the pump (`crate::session_effects`) is read
//! from the compute instead, before the splice and after each take-back.
//!
//! Two kinds of facts, from one query ([`query`]):
//! - what the session holds now: an open transaction (`@@in_transaction`) and any metadata
//!   lock (`information_schema.METADATA_LOCK_INFO`, MariaDB's `metadata_lock_info` plugin:
//!   `GET_LOCK`, `LOCK TABLES`, `FLUSH TABLES WITH READ LOCK`, `BACKUP LOCK`);
//! - whether the session ran, while spliced, a statement that may leave what no read gives
//!   back ([`LEAVES_STATE`]: temporary tables, prepared statements the relay never saw, a
//!   `SET` that may be `SET TRANSACTION` or the multi-statements option, `CALL`, `XA`,
//!   `HANDLER … OPEN`): its per-session counter (`information_schema.SESSION_STATUS`) moved.
//!   Such a session is pinned for good, as on the pump.
//!
//! A compute without these tables (server-shim, or MariaDB without `metadata_lock_info`)
//! refuses the query: its resumable sessions are not spliced. Pure: rows in, values out.

use authplugin::packet::text_result::Row;

/// The per-session counters of statements that may leave a session holding what no read of
/// its state gives back, with the reason a session that ran one is pinned for. MariaDB's
/// names, as `information_schema.SESSION_STATUS` spells them.
pub const LEAVES_STATE: [(&str, &str); 11] = [
    (
        "COM_CREATE_TEMPORARY_TABLE",
        "temporary table created while spliced",
    ),
    ("COM_STMT_PREPARE", "statement prepared while spliced"),
    ("COM_PREPARE_SQL", "SQL PREPARE while spliced"),
    ("COM_EXECUTE_IMMEDIATE", "EXECUTE IMMEDIATE while spliced"),
    (
        "COM_SET_OPTION",
        "SET while spliced (SET TRANSACTION is not readable)",
    ),
    ("COM_CALL_PROCEDURE", "CALL while spliced"),
    ("COM_COMPOUND_SQL", "compound statement while spliced"),
    ("COM_XA_START", "XA while spliced"),
    ("COM_HA_OPEN", "HANDLER OPEN while spliced"),
    ("COM_LOCK_TABLES", "LOCK TABLES while spliced"),
    ("COM_BACKUP_LOCK", "BACKUP LOCK while spliced"),
];

/// The query that reads the session's transaction, its metadata locks, and its
/// [`LEAVES_STATE`] counters, one `(name, value)` row each. Named `LIMIT`: a session's
/// `sql_select_limit` would cut it short.
#[must_use]
pub fn query() -> String {
    let names: Vec<String> = LEAVES_STATE
        .iter()
        .map(|(name, _)| format!("'{name}'"))
        .collect();
    format!(
        "SELECT 'IN_TRANSACTION', @@in_transaction \
         UNION ALL SELECT 'LOCKS', COUNT(*) FROM information_schema.METADATA_LOCK_INFO \
         WHERE THREAD_ID = CONNECTION_ID() \
         UNION ALL SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
         WHERE VARIABLE_NAME IN ({}) LIMIT 100",
        names.join(", ")
    )
}

/// One reading of [`query`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    in_transaction: bool,
    locks: u64,
    counters: [u64; LEAVES_STATE.len()],
}

/// The compute's answer to [`query`] is not the rows asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotEvidence;

impl Evidence {
    /// Reads [`query`]'s rows: every name once, every value a decimal number.
    ///
    /// # Errors
    /// [`NotEvidence`] for a missing, repeated or unknown name, or a value that is not a
    /// number.
    pub fn read(rows: &[Row]) -> Result<Self, NotEvidence> {
        let mut in_transaction = None;
        let mut locks = None;
        let mut counters = [None; LEAVES_STATE.len()];
        for row in rows {
            let [Some(name), Some(value)] = row.as_slice() else {
                return Err(NotEvidence);
            };
            let value = number(value).ok_or(NotEvidence)?;
            let slot = match name.to_ascii_uppercase().as_slice() {
                b"IN_TRANSACTION" => &mut in_transaction,
                b"LOCKS" => &mut locks,
                name => {
                    let at = LEAVES_STATE
                        .iter()
                        .position(|(counter, _)| counter.as_bytes() == name)
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
        })
    }

    /// Whether a transaction is open.
    #[must_use]
    pub const fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Why the session cannot be carried now, whatever it did before: it holds a lock.
    #[must_use]
    pub const fn holds(&self) -> Option<&'static str> {
        if self.locks > 0 {
            Some("a lock held (GET_LOCK, LOCK TABLES, a backup lock)")
        } else {
            None
        }
    }

    /// Why a session read as `self` after the splice, `before` it, is pinned for good: the
    /// first [`LEAVES_STATE`] counter that moved. A counter that went down was reset
    /// (`FLUSH STATUS`): what ran meanwhile is unknown, so that pins as well.
    #[must_use]
    pub fn left_since(&self, before: &Self) -> Option<&'static str> {
        self.counters
            .iter()
            .zip(&before.counters)
            .zip(LEAVES_STATE)
            .find(|((now, then), _)| now != then)
            .map(|(_, (_, why))| why)
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
    fn answer(in_transaction: &str, locks: &str, counters: [&str; 11]) -> Vec<Row> {
        let mut pairs = vec![("IN_TRANSACTION", in_transaction), ("LOCKS", locks)];
        pairs.extend(LEAVES_STATE.iter().map(|(n, _)| *n).zip(counters));
        rows(&pairs)
    }

    const ZEROS: [&str; 11] = ["0"; 11];

    #[test]
    fn reads_a_quiet_session() {
        let read = Evidence::read(&answer("0", "0", ZEROS)).unwrap();
        assert!(!read.in_transaction());
        assert_eq!(read.holds(), None);
        assert_eq!(read.left_since(&read), None);
    }

    #[test]
    fn a_transaction_and_a_lock_are_what_the_session_holds_now() {
        let read = Evidence::read(&answer("1", "2", ZEROS)).unwrap();
        assert!(read.in_transaction());
        assert!(read.holds().unwrap().contains("GET_LOCK"));
        assert_eq!(
            Evidence::read(&answer("0", "0", ZEROS)).unwrap().holds(),
            None
        );
    }

    #[test]
    fn a_counter_that_moved_names_what_pins() {
        let before = Evidence::read(&answer("0", "0", ZEROS)).unwrap();
        let mut moved = ZEROS;
        moved[0] = "1";
        let after = Evidence::read(&answer("0", "0", moved)).unwrap();
        assert_eq!(
            after.left_since(&before),
            Some("temporary table created while spliced")
        );
        let mut set = ["3"; 11];
        set[4] = "4";
        let (before, after) = (
            Evidence::read(&answer("0", "0", ["3"; 11])).unwrap(),
            Evidence::read(&answer("0", "0", set)).unwrap(),
        );
        assert!(after.left_since(&before).unwrap().starts_with("SET while"));
    }

    #[test]
    fn a_counter_reset_pins_too() {
        let before = Evidence::read(&answer("0", "0", ["2"; 11])).unwrap();
        let mut reset = ["2"; 11];
        reset[1] = "0";
        let after = Evidence::read(&answer("0", "0", reset)).unwrap();
        assert_eq!(
            after.left_since(&before),
            Some("statement prepared while spliced")
        );
    }

    #[test]
    fn names_are_matched_whatever_their_case_in_any_order() {
        let mut pairs: Vec<(String, &str)> = LEAVES_STATE
            .iter()
            .rev()
            .map(|(n, _)| (n.to_ascii_lowercase(), "7"))
            .collect();
        pairs.push(("locks".into(), "0"));
        pairs.push(("In_Transaction".into(), "0"));
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let read = Evidence::read(&rows(&borrowed)).unwrap();
        assert_eq!(read.counters, [7; 11]);
    }

    #[test]
    fn anything_else_is_not_evidence() {
        let full = answer("0", "0", ZEROS);
        // A name missing, repeated, unknown; a value that is not a number; a NULL; a third
        // column.
        assert_eq!(Evidence::read(&full[1..]), Err(NotEvidence));
        let mut repeated = full.clone();
        repeated.push(full[2].clone());
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
