//! Resumption tickets on server-shim (docs/protocol.md, "Resumable sessions"): the store is
//! `authplugin::ticket_store` (shared with the MariaDB plugin); the ticket key is
//! `--ticket-key-file`, redeemed ids go to `resume-tickets.used` in the data directory.

use authplugin::Credential;
pub use authplugin::ticket_store::Tickets;

use crate::accounts::Account;

/// The file of redeemed ticket ids, in the data directory.
pub const USED_FILE: &str = "resume-tickets.used";

/// The account's stored credential and generation as bytes, for the ticket's credential tag:
/// a changed password, or the account dropped and created again (a new generation), changes
/// them.
#[must_use]
pub fn credential_bytes(account: &Account) -> Vec<u8> {
    let mut out = hash_bytes(&account.credential);
    if let Some(generation) = &account.generation {
        out.extend_from_slice(b"generation");
        out.extend_from_slice(generation);
    }
    out
}

fn hash_bytes(credential: &Credential) -> Vec<u8> {
    match credential {
        Credential::EmptyPassword => b"empty".to_vec(),
        Credential::Hashed {
            native,
            caching_sha2,
        } => {
            let mut out = b"hashed".to_vec();
            match native {
                Some(n) => {
                    out.push(1);
                    out.extend_from_slice(n.as_bytes());
                }
                None => out.push(0),
            }
            match caching_sha2 {
                Some(d) => {
                    out.push(1);
                    out.extend_from_slice(d.as_bytes());
                }
                None => out.push(0),
            }
            out
        }
    }
}
