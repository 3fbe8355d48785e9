//! Works around opensrv-mysql 0.7 sending status flags `0x0000` in the packets it writes on
//! its own: the greeting, the login's OK, and the OK to COM_INIT_DB, COM_PING and
//! COM_STMT_RESET.
//!
//! MySQL sets `SERVER_STATUS_AUTOCOMMIT` there (and `SERVER_STATUS_IN_TRANS` inside a
//! transaction), and drivers believe it. PyMySQL and mysqlclient, told that autocommit is
//! off, never send `SET autocommit=0`: every statement then commits on its own and a
//! `rollback()` silently keeps the rows. The writer sets the flags of those packets to the
//! session's ([`super::ConnShared::set_status`]); the shim's own replies already carry them.

use authplugin::packet::{HandshakeV10, OkPacket};

/// `SERVER_STATUS_AUTOCOMMIT`: a session starts in autocommit mode.
pub(super) const SERVER_STATUS_AUTOCOMMIT: u16 = 0x0002;

/// COM_INIT_DB, COM_PING and COM_STMT_RESET: opensrv answers them with an OK of its own.
pub(super) fn answered_with_opensrvs_ok(command: u8) -> bool {
    matches!(command, 0x02 | 0x0e | 0x1a)
}

/// opensrv's greeting with `status`; `None` if `payload` is not a greeting.
pub(super) fn greeting_with_status(payload: &[u8], status: u16) -> Option<Vec<u8>> {
    let at = status_offset(payload)?;
    HandshakeV10::decode(payload).ok()?;
    let mut out = payload.to_vec();
    out.get_mut(at..at + 2)?
        .copy_from_slice(&status.to_le_bytes());
    Some(out)
}

/// Where a HandshakeV10's status flags are: after the protocol version, the NUL-terminated
/// server version, the connection id, the scramble's first 8 bytes, a filler, the lower
/// capability flags and the character set.
fn status_offset(payload: &[u8]) -> Option<usize> {
    let version_end = payload.iter().skip(1).position(|&b| b == 0)? + 1;
    Some(version_end + 1 + 4 + 8 + 1 + 2 + 1)
}

/// An OK of opensrv's with `status`; `None` for anything else (an ERR passes as it is).
/// opensrv never negotiates `CLIENT_SESSION_TRACK`, so the OK decodes and re-encodes without
/// it byte for byte.
pub(super) fn ok_with_status(payload: &[u8], status: u16) -> Option<Vec<u8>> {
    let mut ok = OkPacket::decode(payload, 0).ok()?;
    ok.status_flags = status;
    let mut out = Vec::with_capacity(payload.len());
    ok.encode(&mut out, 0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::stream::test_support::{T, packet};
    use crate::stream::{AuthReader, AuthWriter, ConnShared};

    /// Through the writer: the greeting says autocommit, the login's OK and a COM_PING's OK
    /// carry the session's flags (here: in a transaction), a query's reply passes untouched.
    #[tokio::test]
    async fn opensrvs_own_packets_carry_the_sessions_status() {
        let (mut client, server) = tokio::io::duplex(4096);
        let (server_w, mut client_r) = tokio::io::duplex(4096);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let mut writer = AuthWriter::new(server_w, shared.clone(), T);
        let scramble = authplugin::Scramble::generate_timed(&mut rand::rngs::OsRng, 1);
        let greeting =
            HandshakeV10::new(b"8.0.36".to_vec(), 1, &scramble, 0x0020_0200, 0x21, 0, "x")
                .to_bytes();
        let opensrv_ok = [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
        writer.write_all(&packet(0, &greeting)).await.unwrap();
        writer.flush().await.unwrap();
        shared.mark_authenticated();
        writer.write_all(&packet(2, &opensrv_ok)).await.unwrap();
        writer.flush().await.unwrap();
        // BEGIN: the shim's reply already carries its flags; then COM_PING.
        shared.set_status(0x0003);
        let begun = [0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00];
        writer.write_all(&packet(1, &begun)).await.unwrap();
        let ping = packet(0, b"\x0e");
        client.write_all(&ping).await.unwrap();
        let mut got = vec![0u8; ping.len()];
        reader.read_exact(&mut got).await.unwrap();
        writer.write_all(&packet(1, &opensrv_ok)).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);

        let mut out = Vec::new();
        client_r.read_to_end(&mut out).await.unwrap();
        let mut want = packet(0, &greeting_with_status(&greeting, 0x0002).unwrap());
        want.extend(packet(2, &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]));
        want.extend(packet(1, &begun));
        want.extend(packet(1, &[0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00]));
        assert_eq!(out, want);
    }

    /// A greeting as opensrv 0.7 writes it: status flags `00 00` after the character set.
    #[test]
    fn sets_the_greetings_status_and_nothing_else() {
        let scramble = authplugin::Scramble::generate_timed(&mut rand::rngs::OsRng, 1);
        let greeting = HandshakeV10::new(
            b"8.0.36-perceptron-shim".to_vec(),
            7,
            &scramble,
            0x81ae_f7ff,
            0x21,
            0,
            "mysql_native_password",
        )
        .to_bytes();
        let fixed = greeting_with_status(&greeting, SERVER_STATUS_AUTOCOMMIT).unwrap();
        let decoded = HandshakeV10::decode(&fixed).unwrap();
        assert_eq!(decoded.status_flags, SERVER_STATUS_AUTOCOMMIT);
        assert_eq!(decoded.scramble(), Some(scramble));
        assert_eq!(decoded.character_set, 0x21);
        let changed = greeting.iter().zip(&fixed).filter(|(a, b)| a != b).count();
        assert_eq!((fixed.len(), changed), (greeting.len(), 1));
        assert_eq!(greeting_with_status(b"\xff\x15\x04#28000denied", 2), None);
        assert_eq!(greeting_with_status(b"", 2), None);
    }

    #[test]
    fn sets_an_oks_status_and_leaves_an_err_alone() {
        // opensrv's OK: header, 0 rows, id 0, status 0, 0 warnings.
        let ok = [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
        assert_eq!(
            ok_with_status(&ok, 0x0003).unwrap(),
            [0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00]
        );
        assert_eq!(
            ok_with_status(b"\xff\x19\x04#42000Unknown database", 2),
            None
        );
        assert_eq!(ok_with_status(&[0x00, 0x00], 2), None, "truncated");
    }

    #[test]
    fn knows_which_commands_opensrv_answers_itself() {
        for command in [0x02, 0x0e, 0x1a] {
            assert!(answered_with_opensrvs_ok(command), "{command:#x}");
        }
        for command in [0x01, 0x03, 0x16, 0x17, 0x19] {
            assert!(!answered_with_opensrvs_ok(command), "{command:#x}");
        }
    }
}
