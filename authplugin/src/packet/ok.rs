//! `OK_Packet`: the end of a successful login (P7/P8) and of most commands.

use crate::packet::capabilities::{CLIENT_SESSION_TRACK, SERVER_SESSION_STATE_CHANGED};
use crate::reader::{DecodeError, Reader, put_lenenc_bytes, put_lenenc_int};

/// First byte of an OK packet.
pub const OK_HEADER: u8 = 0x00;
/// First byte of an EOF packet (and of the OK that ends a result set under
/// `CLIENT_DEPRECATE_EOF`).
pub const EOF_HEADER: u8 = 0xFE;
/// First byte of a `LOCAL INFILE` request: the server asks the client for a file.
pub const LOCAL_INFILE_HEADER: u8 = 0xFB;

/// A successful result (protocol 4.1 layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OkPacket {
    /// `affected_rows`.
    pub affected_rows: u64,
    /// `last_insert_id`.
    pub last_insert_id: u64,
    /// `status_flags`.
    pub status_flags: u16,
    /// `warnings`.
    pub warnings: u16,
    /// `info`: human-readable status text.
    pub info: Vec<u8>,
    /// `session_state_info`, present with `CLIENT_SESSION_TRACK` when the status has
    /// `SERVER_SESSION_STATE_CHANGED`.
    pub session_state_info: Option<Vec<u8>>,
}

impl OkPacket {
    /// Decodes an OK packet (header `0x00`) given the negotiated capabilities.
    ///
    /// With `CLIENT_SESSION_TRACK`, servers omit an empty `info` entirely, so its absence is
    /// accepted; without it, `info` is the rest of the packet.
    ///
    /// # Errors
    /// [`DecodeError`] naming the first missing or invalid field.
    pub fn decode(payload: &[u8], capabilities: u32) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.u8("header")? != OK_HEADER {
            return Err(DecodeError::InvalidValue("header"));
        }
        let affected_rows = r.lenenc_int("affected_rows")?;
        let last_insert_id = r.lenenc_int("last_insert_id")?;
        let status_flags = r.u16_le("status_flags")?;
        let warnings = r.u16_le("warnings")?;
        let mut ok = Self {
            affected_rows,
            last_insert_id,
            status_flags,
            warnings,
            info: Vec::new(),
            session_state_info: None,
        };
        if capabilities & CLIENT_SESSION_TRACK != 0 {
            if r.remaining() > 0 {
                ok.info = r.lenenc_bytes("info")?.to_vec();
                if status_flags & SERVER_SESSION_STATE_CHANGED != 0 {
                    ok.session_state_info = Some(r.lenenc_bytes("session_state_info")?.to_vec());
                }
            }
            r.expect_empty()?;
        } else {
            ok.info = r.rest().to_vec();
        }
        Ok(ok)
    }

    /// Appends the payload for a peer with `capabilities`.
    pub fn encode(&self, out: &mut Vec<u8>, capabilities: u32) {
        out.push(OK_HEADER);
        put_lenenc_int(out, self.affected_rows);
        put_lenenc_int(out, self.last_insert_id);
        out.extend_from_slice(&self.status_flags.to_le_bytes());
        out.extend_from_slice(&self.warnings.to_le_bytes());
        if capabilities & CLIENT_SESSION_TRACK != 0 {
            let state = self
                .session_state_info
                .as_deref()
                .filter(|_| self.status_flags & SERVER_SESSION_STATE_CHANGED != 0);
            if !self.info.is_empty() || state.is_some() {
                put_lenenc_bytes(out, &self.info);
            }
            if let Some(state) = state {
                put_lenenc_bytes(out, state);
            }
        } else {
            out.extend_from_slice(&self.info);
        }
    }
}
