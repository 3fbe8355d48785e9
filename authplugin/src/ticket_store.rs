//! A compute's resumption tickets (docs/protocol.md, "Resumable sessions"): issued on a
//! relayed login that asks for one, redeemed once on a reattach. Used by server-shim and the
//! MariaDB plugin.
//!
//! The ticket key is the compute's alone: the relay never reads it, so it cannot mint a
//! ticket. A redeemed ticket's id is appended (and synced) to the used-ids file before the
//! reattach is accepted, so a ticket works once even across restarts of the compute, which is
//! exactly when tickets are used. Ids are forgotten once their ticket has expired.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use rand::RngCore as _;

use crate::payload::Binding;
use crate::replay::ReplayGuard;
use crate::ticket::{self, Expected, ID_LEN, TicketClaims, TicketError};
use crate::{KeyId, KeyRing, resume};
/// How far ahead of this compute's clock a ticket's issue time may be.
const SKEW_MS: u64 = 60_000;
/// The most unexpired redeemed ids kept; beyond it, reattaches are refused until some expire.
const MAX_USED: usize = 1_000_000;

/// Issues and redeems this compute's tickets.
#[derive(Debug)]
pub struct Tickets {
    ring: KeyRing,
    instance: String,
    ttl_ms: u64,
    used: Mutex<Used>,
}

#[derive(Debug)]
struct Used {
    ids: HashMap<[u8; ID_LEN], u64>,
    file: File,
}

impl Tickets {
    /// Tickets sealed with `ring`'s signing key for `instance`, valid `ttl_ms`; redeemed ids
    /// are kept in the file `used` (created when missing).
    ///
    /// # Errors
    /// The used-ids file cannot be read, rewritten or opened for appending.
    pub fn open(
        ring: KeyRing,
        instance: String,
        ttl_ms: u64,
        used: &Path,
        now_ms: u64,
    ) -> io::Result<Self> {
        let path = used.to_path_buf();
        let mut ids = HashMap::new();
        let mut lines = 0;
        match File::open(&path) {
            Ok(f) => {
                for line in BufReader::new(f).lines() {
                    lines += 1;
                    if let Some((id, expires)) = parse_line(&line?)
                        && expires > now_ms
                    {
                        ids.insert(id, expires);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Rewritten without the expired ids when there were any, then appended to. (Not
        // on every start: a compute's start is on a waking client's path.)
        if lines > ids.len() {
            let mut text = String::new();
            for (id, expires) in &ids {
                text.push_str(&format_line(id, *expires));
            }
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text)?;
            File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self {
            ring,
            instance,
            ttl_ms,
            used: Mutex::new(Used { ids, file }),
        })
    }

    /// A ticket for a session of `user`, from the client connection `client_addr`, first
    /// logged in at `login_ms`, whose account's stored credential is `credential`; `None` if a
    /// field does not fit (a user name over 255 bytes).
    #[must_use]
    pub fn issue(
        &self,
        user: &str,
        client_addr: &str,
        login_ms: u64,
        now_ms: u64,
        credential: &[u8],
    ) -> Option<Vec<u8>> {
        let key = self.ring.signing_key();
        let mut ticket_id = [0; ID_LEN];
        rand::rngs::OsRng.fill_bytes(&mut ticket_id);
        let claims = TicketClaims {
            ticket_id,
            instance: self.instance.clone(),
            user: user.to_owned(),
            client_addr: client_addr.to_owned(),
            login_ms,
            issued_ms: now_ms,
            expires_ms: now_ms.saturating_add(self.ttl_ms),
            credential_tag: ticket::credential_tag(key, credential),
        };
        ticket::seal(&claims, key).ok()
    }

    /// Opens and checks `bytes` for a reattach of `user` from `client_addr` (the account's
    /// stored credential now: `None` if the account is gone), and records it used.
    ///
    /// # Errors
    /// Why the ticket is refused ([`TicketError`]).
    pub fn redeem(
        &self,
        bytes: &[u8],
        user: &str,
        client_addr: &str,
        credential: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<TicketClaims, TicketError> {
        // The tag is keyed with the key that sealed this ticket (a rotated ring still opens it).
        let (key_id, claims) = ticket::open(bytes, &self.ring)?;
        let key = self
            .ring
            .get(&key_id)
            .ok_or(TicketError::UnknownKeyId(key_id))?;
        let expected = Expected {
            instance: &self.instance,
            user,
            client_addr,
            credential_tag: credential.map(|c| ticket::credential_tag(key, c)),
            now_ms,
            skew_ms: SKEW_MS,
        };
        ticket::check(&claims, &expected)?;
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        if used.ids.len() >= MAX_USED {
            used.ids.retain(|_, expires| *expires > now_ms);
        }
        if used.ids.contains_key(&claims.ticket_id) || used.ids.len() >= MAX_USED {
            return Err(TicketError::Used);
        }
        // Durable before the reattach is accepted: a ticket must not work twice, even if this
        // process dies right after.
        let line = format_line(&claims.ticket_id, claims.expires_ms);
        if used
            .file
            .write_all(line.as_bytes())
            .and_then(|()| used.file.sync_data())
            .is_err()
        {
            return Err(TicketError::Unrecorded);
        }
        used.ids.insert(claims.ticket_id, claims.expires_ms);
        Ok(claims)
    }
}

/// A reattach the compute accepted.
#[derive(Debug)]
pub struct Reattached {
    /// The relay key that signed the resume payload.
    pub relay_key_id: KeyId,
    /// The client's address, as the session's first login asserted it.
    pub client_addr: String,
    /// The session's next ticket, for the relay (`None` only if a field did not fit).
    pub next_ticket: Option<Vec<u8>>,
}

/// A refused reattach: a fixed label and the precise reason, for the compute's log only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReattachRefusal {
    /// A fixed label (`malformed`, `bad_mac`, `ticket_used`, …).
    pub kind: &'static str,
    /// The precise reason. Never a secret.
    pub detail: String,
}

impl Tickets {
    /// A reattach (docs/protocol.md, "Resumable sessions"), as both computes check it: the
    /// relay's identity over this connection's `binding` (its key in `relay_ring`, freshness
    /// from `replay`), then this compute's ticket, redeemed once for `user` against the
    /// account's stored `credential` now (`None`: the account is gone); then the session's
    /// next ticket.
    ///
    /// # Errors
    /// The first check that failed.
    #[allow(
        clippy::too_many_arguments,
        reason = "what one login attempt is checked against"
    )]
    pub fn reattach(
        &self,
        payload: &[u8],
        binding: &Binding<'_>,
        relay_ring: &KeyRing,
        replay: &Mutex<ReplayGuard>,
        user: &str,
        credential: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<Reattached, ReattachRefusal> {
        if payload.len() > resume::MAX_RESUME_LEN {
            return Err(ReattachRefusal {
                kind: "malformed",
                detail: "resume payload longer than the format allows".into(),
            });
        }
        let verified = {
            let guard = replay.lock().unwrap_or_else(PoisonError::into_inner);
            resume::verify(payload, binding, relay_ring, &guard, now_ms)
        }
        .map_err(|reason| ReattachRefusal {
            kind: reason.kind(),
            detail: reason.to_string(),
        })?;
        let claims = self
            .redeem(
                &verified.ticket,
                user,
                &verified.client_addr,
                credential,
                now_ms,
            )
            .map_err(|e| ReattachRefusal {
                kind: e.kind(),
                detail: e.to_string(),
            })?;
        let next_ticket = credential
            .and_then(|c| self.issue(user, &verified.client_addr, claims.login_ms, now_ms, c));
        Ok(Reattached {
            relay_key_id: verified.key_id,
            client_addr: verified.client_addr,
            next_ticket,
        })
    }
}

fn format_line(id: &[u8; ID_LEN], expires_ms: u64) -> String {
    format!("{} {expires_ms}\n", crate::hex::encode(id))
}

fn parse_line(line: &str) -> Option<([u8; ID_LEN], u64)> {
    let (id, expires) = line.split_once(' ')?;
    Some((crate::hex::decode_array(id)?, expires.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{KeyId, KeySecret, PerceptronKey};

    fn ring(byte: u8) -> KeyRing {
        KeyRing::new(vec![PerceptronKey::new(
            KeyId::new("t1").unwrap(),
            KeySecret::from_bytes([byte; 32]),
        )])
        .unwrap()
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn a_ticket_is_redeemed_once_even_after_a_restart() {
        let dir = tempfile_dir("once");
        let pw: &[u8] = b"stored hash";
        let tickets =
            Tickets::open(ring(1), "demo".into(), 3_600_000, &dir.join("used"), NOW).unwrap();
        let t = tickets
            .issue("app", "127.0.0.1:5000", NOW - 10, NOW, pw)
            .unwrap();
        let claims = tickets
            .redeem(&t, "app", "127.0.0.1:5000", Some(pw), NOW + 1)
            .unwrap();
        assert_eq!(claims.login_ms, NOW - 10);
        assert_eq!(
            tickets.redeem(&t, "app", "127.0.0.1:5000", Some(pw), NOW + 2),
            Err(TicketError::Used)
        );
        drop(tickets);
        let again = Tickets::open(
            ring(1),
            "demo".into(),
            3_600_000,
            &dir.join("used"),
            NOW + 3,
        )
        .unwrap();
        assert_eq!(
            again.redeem(&t, "app", "127.0.0.1:5000", Some(pw), NOW + 4),
            Err(TicketError::Used)
        );
        // Once expired, the id is forgotten at the next start (the ticket is refused anyway).
        let later = Tickets::open(
            ring(1),
            "demo".into(),
            3_600_000,
            &dir.join("used"),
            NOW + 3_600_001,
        )
        .unwrap();
        assert!(later.used.lock().unwrap().ids.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn another_key_another_instance_or_a_new_password_refuse_it() {
        let dir = tempfile_dir("refuse");
        let pw: &[u8] = b"stored hash";
        let tickets =
            Tickets::open(ring(1), "demo".into(), 3_600_000, &dir.join("used"), NOW).unwrap();
        let forged =
            Tickets::open(ring(2), "demo".into(), 3_600_000, &dir.join("used"), NOW).unwrap();
        let other =
            Tickets::open(ring(1), "other".into(), 3_600_000, &dir.join("used"), NOW).unwrap();
        let t = tickets.issue("app", "a:1", NOW, NOW, pw).unwrap();
        assert_eq!(
            forged.redeem(&t, "app", "a:1", Some(pw), NOW),
            Err(TicketError::BadMac)
        );
        assert_eq!(
            other.redeem(&t, "app", "a:1", Some(pw), NOW),
            Err(TicketError::WrongInstance)
        );
        let new_pw: &[u8] = b"new stored hash";
        assert_eq!(
            tickets.redeem(&t, "app", "a:1", Some(new_pw), NOW),
            Err(TicketError::CredentialChanged)
        );
        assert_eq!(
            tickets.redeem(&t, "app", "a:1", None, NOW),
            Err(TicketError::CredentialChanged)
        );
        assert_eq!(
            tickets.redeem(&t, "app", "a:1", Some(pw), NOW + 3_600_000),
            Err(TicketError::Expired)
        );
        // None of the refusals used it up.
        assert!(tickets.redeem(&t, "app", "a:1", Some(pw), NOW).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("authplugin-tickets-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
