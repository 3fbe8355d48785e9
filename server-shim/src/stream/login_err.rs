//! Works around opensrv-mysql 0.7's refusal packet.
//!
//! On a refused login opensrv writes ERR 1698 "Authenticate failed, user: ..." where MySQL
//! (and architecture.md §3) send ERR 1045 (28000) "Access denied for user ...". When `authenticate`
//! refuses, it stores the shim's own ERR payload ([`super::ConnShared::deny_with`]); the
//! writer then sends it in place of the next packet opensrv writes, keeping opensrv's
//! sequence id, and drops everything after it.

use authplugin::packet::framing::HEADER_LEN;

/// Collects the header of opensrv's ERR to learn its sequence id.
#[derive(Debug)]
pub(super) struct ErrReplacement {
    header: Vec<u8>,
    /// The shim's ERR payload.
    replacement: Vec<u8>,
}

impl ErrReplacement {
    pub(super) fn new(replacement: Vec<u8>) -> Self {
        Self {
            header: Vec::with_capacity(HEADER_LEN),
            replacement,
        }
    }

    /// Takes the next bytes opensrv writes (all of `buf` is consumed). Once the sequence id
    /// is known, appends the replacement packet to `out` and returns `true`: everything
    /// opensrv writes after that is dropped.
    pub(super) fn feed(&mut self, buf: &[u8], out: &mut Vec<u8>) -> bool {
        let want = HEADER_LEN.saturating_sub(self.header.len()).min(buf.len());
        self.header
            .extend_from_slice(buf.get(..want).unwrap_or_default());
        let Some(&sequence_id) = self.header.get(3) else {
            return false;
        };
        authplugin::packet::write_packet(out, sequence_id, &self.replacement);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use crate::stream::test_support::{T, packet};
    use crate::stream::{AuthWriter, ConnShared};

    #[tokio::test]
    async fn replaces_login_err_keeping_its_sequence_id() {
        let (server, mut client) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server, shared.clone(), T);
        // Greeting passes untouched.
        writer.write_all(&packet(0, b"greeting")).await.unwrap();
        shared.deny_with(b"\xff\x15\x04#28000Access denied".to_vec());
        // opensrv's ERR 1698, written in two calls.
        let theirs = packet(2, b"\xff\xa2\x06#28000Authenticate failed, user: \"x\"");
        writer.write_all(&theirs[..2]).await.unwrap();
        writer.write_all(&theirs[2..]).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let mut want = packet(0, b"greeting");
        want.extend(packet(2, b"\xff\x15\x04#28000Access denied"));
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn passes_writes_through_when_login_succeeds() {
        let (server, mut client) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server, shared, T);
        let ok = packet(2, b"\x00\x00\x00\x02\x00\x00\x00");
        writer.write_all(&ok).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, ok);
    }
}
