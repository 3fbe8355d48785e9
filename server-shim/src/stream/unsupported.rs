//! Works around opensrv-mysql 0.7 answering OK to commands it does not implement.
//!
//! For a command byte outside the ones it parses, opensrv's command parser fails and it
//! answers OK without doing anything: a COM_CHANGE_USER would "succeed" and leave the
//! session as the old user, a COM_RESET_CONNECTION would leave a transaction open in a pooled
//! connection. The reader notes such a command byte (see [`super::one_packet_per_read`]) and
//! the writer replaces opensrv's reply with [`unsupported_command_err`], keeping its sequence
//! id.

/// Commands opensrv-mysql 0.7 implements (query, init db, field list, the COM_STMT_* family,
/// quit, ping). COM_STMT_RESET (nothing to reset: long data is sent per execution) is the one
/// harmless case of a command it "answers" without doing anything.
pub(super) fn opensrv_handles(command: u8) -> bool {
    matches!(command, 0x01..=0x04 | 0x0e | 0x16..=0x1a)
}

/// The ERR that replaces opensrv's silent OK to a command it does not implement.
pub(super) fn unsupported_command_err(command: u8) -> Vec<u8> {
    let message = match command {
        0x11 => "COM_CHANGE_USER is not supported by server-shim; open a new connection as the other user".to_owned(),
        0x1f => "COM_RESET_CONNECTION is not supported by server-shim; open a new connection".to_owned(),
        other => format!("Unknown command {other:#04x}"),
    };
    // ER_UNKNOWN_COM_ERROR
    let (code, state) = authplugin::packet::err::codes::ER_UNKNOWN_COM_ERROR;
    authplugin::packet::ErrPacket::new(code, state, &message).to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_which_commands_opensrv_implements() {
        for implemented in [0x01, 0x02, 0x03, 0x04, 0x0e, 0x16, 0x17, 0x18, 0x19, 0x1a] {
            assert!(opensrv_handles(implemented), "{implemented:#x}");
        }
        for missing in [0x00, 0x09, 0x0a, 0x11, 0x12, 0x1f, 0xff] {
            assert!(!opensrv_handles(missing), "{missing:#x}");
        }
        let err = authplugin::packet::ErrPacket::decode(&unsupported_command_err(0x11)).unwrap();
        assert_eq!((err.error_code, err.sql_state), (1047, Some(*b"08S01")));
        assert!(String::from_utf8_lossy(&err.error_message).contains("COM_CHANGE_USER"));
    }
}
