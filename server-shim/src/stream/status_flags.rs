//! Works around opensrv-mysql 0.7 sending status flags `0x0000` in the greeting and in the
//! login's OK.
//!
//! MySQL sets `SERVER_STATUS_AUTOCOMMIT` there, and drivers believe it. PyMySQL and
//! mysqlclient, told at login that autocommit is off, never send `SET autocommit=0`: every
//! statement then commits on its own and a `rollback()` silently keeps the rows. The writer
//! sets `SERVER_STATUS_AUTOCOMMIT` in those two packets (a session always starts in autocommit
//! mode). Left as opensrv writes them: the end of a result set and the OKs opensrv writes on
//! its own later (COM_PING, COM_INIT_DB), whose flags drivers do not act on; the OKs of the
//! shim's statements carry the session's flags. The relay's parking compares a keepalive's
//! flags with the session's last ones, so those packets must keep agreeing with each other.

pub(super) use authplugin::packet::capabilities::SERVER_STATUS_AUTOCOMMIT;
use authplugin::packet::{ErrPacket, HandshakeV10, OkPacket};

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
    ok_changed(payload, |ok| ok.status_flags = status)
}

/// An OK of opensrv's with `warnings` notes (opensrv writes 0 whatever it is told); `None`
/// for anything else.
pub(super) fn ok_with_warnings(payload: &[u8], warnings: u16) -> Option<Vec<u8>> {
    ok_changed(payload, |ok| ok.warnings = warnings)
}

/// An ERR of opensrv's with `code` and `sql_state` in place of its own; `None` for anything
/// else (a reply that is not an ERR passes as it is).
pub(super) fn err_with_code(payload: &[u8], code: u16, sql_state: &[u8; 5]) -> Option<Vec<u8>> {
    let mut err = ErrPacket::decode(payload).ok()?;
    err.error_code = code;
    err.sql_state = Some(*sql_state);
    Some(err.to_bytes())
}

/// An OK of opensrv's with `change` made to it, re-encoded; `None` for anything else.
fn ok_changed(payload: &[u8], change: impl FnOnce(&mut OkPacket)) -> Option<Vec<u8>> {
    let mut ok = OkPacket::decode(payload, 0).ok()?;
    change(&mut ok);
    let mut out = Vec::with_capacity(payload.len());
    ok.encode(&mut out, 0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use crate::stream::test_support::{T, packet};
    use crate::stream::{AuthWriter, ConnShared};

    /// Through the writer: the greeting and the login's OK say autocommit; the next reply
    /// passes untouched.
    #[tokio::test]
    async fn the_greeting_and_the_logins_ok_say_autocommit() {
        let (server_w, mut client_r) = tokio::io::duplex(4096);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server_w, shared.clone(), T);
        let scramble = authplugin::Scramble::generate_timed(&mut rand::rngs::OsRng, 1);
        let greeting =
            HandshakeV10::new(b"8.0.36".to_vec(), 1, &scramble, 0x0020_0200, 0x21, 0, "x")
                .to_bytes();
        let opensrv_ok = [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
        writer.write_all(&packet(0, &greeting)).await.unwrap();
        writer.flush().await.unwrap();
        shared.mark_authenticated(None);
        writer.write_all(&packet(2, &opensrv_ok)).await.unwrap();
        writer.write_all(&packet(1, &opensrv_ok)).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);

        let mut out = Vec::new();
        client_r.read_to_end(&mut out).await.unwrap();
        let mut want = packet(0, &greeting_with_status(&greeting, 0x0002).unwrap());
        want.extend(packet(2, &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]));
        want.extend(packet(1, &opensrv_ok));
        assert_eq!(out, want);
    }

    /// A relayed session's ticket goes right before the login's OK, as AuthMoreData with the
    /// OK's sequence id; the OK takes the next one.
    #[tokio::test]
    async fn the_ticket_precedes_the_logins_ok() {
        let (server_w, mut client_r) = tokio::io::duplex(4096);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server_w, shared.clone(), T);
        let scramble = authplugin::Scramble::generate_timed(&mut rand::rngs::OsRng, 1);
        let greeting =
            HandshakeV10::new(b"8.0.36".to_vec(), 1, &scramble, 0x0020_0200, 0x21, 0, "x")
                .to_bytes();
        writer.write_all(&packet(0, &greeting)).await.unwrap();
        shared.mark_authenticated(Some(b"PCTK-ticket".to_vec()));
        writer.write_all(&packet(2, &[0; 7])).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);

        let mut out = Vec::new();
        client_r.read_to_end(&mut out).await.unwrap();
        let mut want = packet(0, &greeting_with_status(&greeting, 0x0002).unwrap());
        want.extend(packet(2, b"\x01PCTK-ticket"));
        want.extend(packet(3, &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]));
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
        assert_eq!(
            ok_with_warnings(&ok, 1).unwrap(),
            [0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00]
        );
    }
}
