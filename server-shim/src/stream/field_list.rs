//! Works around opensrv-mysql 0.7's reply to COM_FIELD_LIST.
//!
//! opensrv answers COM_FIELD_LIST (which the `mariadb` CLI sends for tab completion after
//! `USE`) with an 8-byte `0xFE` OK packet; libmariadb only takes a `0xFE` packet shorter
//! than 8 bytes as the end of the list, so the CLI waited forever. The reader notes the
//! command byte (see [`super::one_packet_per_read`]) and the writer replaces that one reply
//! with [`FIELD_LIST_EOF`], keeping its sequence id.

pub(super) use authplugin::packet::command::COM_FIELD_LIST;

/// The EOF packet payload that ends a COM_FIELD_LIST reply: no warnings, autocommit.
pub(super) const FIELD_LIST_EOF: [u8; 5] = [0xFE, 0, 0, 0x02, 0];

/// The payload to send in place of opensrv's reply `payload` to COM_FIELD_LIST: the short
/// EOF for its `0xFE` packet, `None` (send it as it is) for anything else.
pub(super) fn fixed_reply(payload: &[u8]) -> Option<&'static [u8]> {
    (payload.first() == Some(&0xFE)).then_some(&FIELD_LIST_EOF[..])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::stream::test_support::{T, packet};
    use crate::stream::{AuthReader, AuthWriter, ConnShared};

    #[tokio::test]
    async fn replaces_field_list_reply_with_short_eof() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (server_w, mut client_r) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        shared.mark_authenticated(None);
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let mut writer = AuthWriter::new(server_w, shared, T);
        let cmd = packet(0, b"\x04t\0");
        client.write_all(&cmd).await.unwrap();
        let mut got = vec![0u8; cmd.len()];
        reader.read_exact(&mut got).await.unwrap();
        writer
            .write_all(&packet(1, &[0xFE, 0, 0, 0, 0, 0, 0, 0]))
            .await
            .unwrap();
        writer.flush().await.unwrap();
        // The next reply passes untouched.
        writer.write_all(&packet(1, b"\x00\x00\x00")).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        let mut out = Vec::new();
        client_r.read_to_end(&mut out).await.unwrap();
        let mut want = packet(1, &FIELD_LIST_EOF);
        want.extend(packet(1, b"\x00\x00\x00"));
        assert_eq!(out, want);
    }
}
