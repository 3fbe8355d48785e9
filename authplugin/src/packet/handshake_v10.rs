//! `Protocol::HandshakeV10`: the server's greeting (sequence id 0). The relay writes one at P1
//! and reads the compute's at P5.

use crate::packet::capabilities::{
    CLIENT_MYSQL_MARIADB, CLIENT_PLUGIN_AUTH, CLIENT_SECURE_CONNECTION,
};
use crate::reader::{DecodeError, Reader, put_nul_terminated};
use crate::scramble::Scramble;

/// The protocol version byte every 4.1+ server sends.
pub const PROTOCOL_VERSION: u8 = 10;
/// Bytes of `auth_plugin_data_part_1`.
const PART_1_LEN: usize = 8;
/// Minimum bytes of `auth_plugin_data_part_2` when present.
const MIN_PART_2_LEN: usize = 13;

/// A server greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeV10 {
    /// `server_version` (MariaDB 10.x prefixes `5.5.5-`).
    pub server_version: Vec<u8>,
    /// `thread_id`, the connection id.
    pub connection_id: u32,
    /// `auth_plugin_data` as on the wire: part 1 (8 bytes) then part 2, usually 20 scramble
    /// bytes and a NUL. See [`HandshakeV10::scramble`].
    pub auth_plugin_data: Vec<u8>,
    /// `capability_flags`, both halves joined.
    pub capability_flags: u32,
    /// `character_set`, the server's default collation id.
    pub character_set: u8,
    /// `status_flags`.
    pub status_flags: u16,
    /// The 10 reserved bytes. MariaDB puts its extended capabilities in the last four when it
    /// clears bit 0 of the capabilities; see [`HandshakeV10::mariadb_extended_capabilities`].
    pub reserved: [u8; 10],
    /// `auth_plugin_name`, present exactly when `CLIENT_PLUGIN_AUTH` is set.
    pub auth_plugin_name: Option<Vec<u8>>,
}

impl HandshakeV10 {
    /// A greeting carrying `scramble` the standard way (20 bytes and a NUL).
    #[must_use]
    pub fn new(
        server_version: Vec<u8>,
        connection_id: u32,
        scramble: &Scramble,
        capability_flags: u32,
        character_set: u8,
        status_flags: u16,
        auth_plugin_name: &str,
    ) -> Self {
        let mut auth_plugin_data = scramble.as_bytes().to_vec();
        auth_plugin_data.push(0);
        Self {
            server_version,
            connection_id,
            auth_plugin_data,
            capability_flags: capability_flags | CLIENT_PLUGIN_AUTH | CLIENT_SECURE_CONNECTION,
            character_set,
            status_flags,
            reserved: [0; 10],
            auth_plugin_name: Some(auth_plugin_name.as_bytes().to_vec()),
        }
    }

    /// The 20-byte scramble, if the greeting carries one.
    #[must_use]
    pub fn scramble(&self) -> Option<Scramble> {
        Scramble::from_auth_plugin_data(&self.auth_plugin_data)
    }

    /// MariaDB's extended capabilities, when the greeting is from a MariaDB that sends them
    /// (bit 0 of the capabilities clear).
    #[must_use]
    pub fn mariadb_extended_capabilities(&self) -> Option<u32> {
        if self.capability_flags & CLIENT_MYSQL_MARIADB != 0 {
            return None;
        }
        let [.., a, b, c, d] = self.reserved;
        Some(u32::from_le_bytes([a, b, c, d]))
    }

    /// Decodes a greeting payload strictly: protocol version 10, every field the flags call
    /// for, and nothing after the plugin name.
    ///
    /// # Errors
    /// [`DecodeError`] naming the first missing or invalid field.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.u8("protocol_version")? != PROTOCOL_VERSION {
            return Err(DecodeError::InvalidValue("protocol_version"));
        }
        let server_version = r.nul_terminated("server_version")?.to_vec();
        let connection_id = r.u32_le("connection_id")?;
        let part1 = r.take(PART_1_LEN, "auth_plugin_data_part_1")?;
        if r.u8("filler")? != 0 {
            return Err(DecodeError::InvalidValue("filler"));
        }
        let caps_low = r.u16_le("capability_flags_1")?;
        let character_set = r.u8("character_set")?;
        let status_flags = r.u16_le("status_flags")?;
        let caps_high = r.u16_le("capability_flags_2")?;
        let capability_flags = u32::from(caps_low) | u32::from(caps_high) << 16;
        let auth_plugin_data_len = usize::from(r.u8("auth_plugin_data_len")?);
        let reserved = r.array("reserved")?;
        let mut auth_plugin_data = part1.to_vec();
        if capability_flags & CLIENT_SECURE_CONNECTION != 0 {
            let len2 = MIN_PART_2_LEN.max(auth_plugin_data_len.saturating_sub(PART_1_LEN));
            auth_plugin_data.extend_from_slice(r.take(len2, "auth_plugin_data_part_2")?);
        }
        let auth_plugin_name = if capability_flags & CLIENT_PLUGIN_AUTH != 0 {
            if auth_plugin_data_len != auth_plugin_data.len() {
                return Err(DecodeError::InvalidValue("auth_plugin_data_len"));
            }
            Some(r.nul_terminated("auth_plugin_name")?.to_vec())
        } else {
            if auth_plugin_data_len != 0 {
                return Err(DecodeError::InvalidValue("auth_plugin_data_len"));
            }
            None
        };
        r.expect_empty()?;
        Ok(Self {
            server_version,
            connection_id,
            auth_plugin_data,
            capability_flags,
            character_set,
            status_flags,
            reserved,
            auth_plugin_name,
        })
    }

    /// Appends the payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let plugin_auth = self.capability_flags & CLIENT_PLUGIN_AUTH != 0;
        let (part1, part2) = self
            .auth_plugin_data
            .split_at_checked(PART_1_LEN)
            .unwrap_or((&self.auth_plugin_data, &[]));
        out.push(PROTOCOL_VERSION);
        put_nul_terminated(out, &self.server_version);
        out.extend_from_slice(&self.connection_id.to_le_bytes());
        out.extend_from_slice(part1);
        out.resize(out.len() + (PART_1_LEN - part1.len()), 0);
        out.push(0);
        let [c0, c1, c2, c3] = self.capability_flags.to_le_bytes();
        out.extend_from_slice(&[c0, c1, self.character_set]);
        out.extend_from_slice(&self.status_flags.to_le_bytes());
        out.extend_from_slice(&[c2, c3]);
        let secure = self.capability_flags & CLIENT_SECURE_CONNECTION != 0;
        let wire_data_len = PART_1_LEN
            + if secure {
                part2.len().max(MIN_PART_2_LEN)
            } else {
                0
            };
        let data_len = if plugin_auth { wire_data_len } else { 0 };
        out.push(u8::try_from(data_len).unwrap_or(u8::MAX));
        out.extend_from_slice(&self.reserved);
        if secure {
            out.extend_from_slice(part2);
            out.resize(out.len() + MIN_PART_2_LEN.saturating_sub(part2.len()), 0);
        }
        if plugin_auth {
            put_nul_terminated(out, self.auth_plugin_name.as_deref().unwrap_or_default());
        }
    }

    /// The payload as a new vector.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.encode(&mut out);
        out
    }
}
