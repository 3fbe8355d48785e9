//! `Protocol::SSLRequest`: the 32-byte packet a client sends instead of its login when it
//! wants TLS first. The relay must recognise it (and refuse it unless TLS is configured)
//! rather than misread it as a truncated HandshakeResponse41.

use crate::packet::capabilities::CLIENT_SSL;
use crate::reader::{DecodeError, Reader};

/// The exact payload length of an SSLRequest.
pub const SSL_REQUEST_LEN: usize = 32;

/// A client's request to start TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslRequest {
    /// `client_flag`, with `CLIENT_SSL` set.
    pub client_flag: u32,
    /// `max_packet_size`.
    pub max_packet_size: u32,
    /// `character_set`.
    pub character_set: u8,
    /// The 23 filler bytes (MariaDB: extended capabilities in the last four).
    pub reserved: [u8; 23],
}

impl SslRequest {
    /// Whether a client payload is an SSLRequest: exactly 32 bytes with `CLIENT_SSL` set. A
    /// HandshakeResponse41 is always longer (it has at least a username terminator).
    #[must_use]
    pub fn matches(payload: &[u8]) -> bool {
        Self::decode(payload).is_ok()
    }

    /// Decodes an SSLRequest.
    ///
    /// # Errors
    /// [`DecodeError`] if the payload is not 32 bytes or lacks `CLIENT_SSL`.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let client_flag = r.u32_le("client_flag")?;
        let max_packet_size = r.u32_le("max_packet_size")?;
        let character_set = r.u8("character_set")?;
        let reserved = r.array("filler")?;
        r.expect_empty()?;
        if client_flag & CLIENT_SSL == 0 {
            return Err(DecodeError::InvalidValue("client_flag"));
        }
        Ok(Self {
            client_flag,
            max_packet_size,
            character_set,
            reserved,
        })
    }

    /// Appends the payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.client_flag | CLIENT_SSL).to_le_bytes());
        out.extend_from_slice(&self.max_packet_size.to_le_bytes());
        out.push(self.character_set);
        out.extend_from_slice(&self.reserved);
    }
}
