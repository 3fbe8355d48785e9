//! Resumption tickets on server-shim (docs/protocol.md, "Resumable sessions"): the store is
//! `authplugin::ticket_store` (shared with the MariaDB plugin); the ticket key is
//! `--ticket-key-file`, redeemed ids go to `resume-tickets.used` in the data directory.

use authplugin::Credential;
pub use authplugin::ticket_store::Tickets;

/// The file of redeemed ticket ids, in the data directory.
pub const USED_FILE: &str = "resume-tickets.used";

/// The account's stored credential as bytes, for the ticket's credential tag: a changed
/// password (or plugin hashes) changes them.
pub fn credential_bytes(credential: &Credential) -> Vec<u8> {
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
