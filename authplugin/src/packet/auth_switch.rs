//! `Protocol::AuthSwitchRequest` (server → client `0xFE`, plugin name, plugin data) and
//! `Protocol::AuthMoreData` (`0x01`, data). The relay sends an AuthSwitchRequest when a client
//! answered with a plugin the compute cannot check against scramble A (P2), and relays both
//! in auth-switch mode.

use crate::credential::AuthPlugin;
use crate::reader::{DecodeError, Reader, put_nul_terminated};
use crate::scramble::Scramble;

/// First byte of an AuthSwitchRequest.
pub const AUTH_SWITCH_HEADER: u8 = 0xFE;
/// First byte of an AuthMoreData.
pub const AUTH_MORE_DATA_HEADER: u8 = 0x01;

/// A request that the client answer again with another plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSwitchRequest {
    /// `plugin_name`.
    pub plugin_name: Vec<u8>,
    /// `auth_plugin_data`: for the scramble plugins, 20 bytes and a NUL (clients such as
    /// libmariadb and sqlx insist on exactly 21); for `client_ed25519`, a bare 32-byte nonce.
    pub plugin_data: Vec<u8>,
}

impl AuthSwitchRequest {
    /// The switch every client accepts for a scramble plugin: 20 bytes and a NUL.
    #[must_use]
    pub fn for_scramble(plugin: AuthPlugin, scramble: &Scramble) -> Self {
        let mut plugin_data = scramble.as_bytes().to_vec();
        plugin_data.push(0);
        Self {
            plugin_name: plugin.name().as_bytes().to_vec(),
            plugin_data,
        }
    }

    /// Decodes an AuthSwitchRequest. The one-byte `0xFE` OldAuthSwitchRequest (pre-4.1
    /// passwords) is refused: nothing here speaks `mysql_old_password`.
    ///
    /// # Errors
    /// [`DecodeError`] for a wrong header or a plugin name without its NUL.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.u8("header")? != AUTH_SWITCH_HEADER {
            return Err(DecodeError::InvalidValue("header"));
        }
        let plugin_name = r.nul_terminated("plugin_name")?.to_vec();
        let plugin_data = r.rest().to_vec();
        Ok(Self {
            plugin_name,
            plugin_data,
        })
    }

    /// The scramble carried by a switch to a scramble plugin: exactly 20 bytes and a NUL.
    #[must_use]
    pub fn scramble(&self) -> Option<Scramble> {
        match self.plugin_data.split_last() {
            Some((0, bytes)) => Some(Scramble::from_bytes(bytes.try_into().ok()?)),
            _ => None,
        }
    }

    /// Appends the payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(AUTH_SWITCH_HEADER);
        put_nul_terminated(out, &self.plugin_name);
        out.extend_from_slice(&self.plugin_data);
    }
}

/// Extra authentication data (caching_sha2's `01 03` / `01 04`, an RSA key, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthMoreData {
    /// The data after the header byte.
    pub data: Vec<u8>,
}

impl AuthMoreData {
    /// Decodes an AuthMoreData.
    ///
    /// # Errors
    /// [`DecodeError`] for an empty payload or a wrong header.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.u8("header")? != AUTH_MORE_DATA_HEADER {
            return Err(DecodeError::InvalidValue("header"));
        }
        Ok(Self {
            data: r.rest().to_vec(),
        })
    }

    /// Appends the payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(AUTH_MORE_DATA_HEADER);
        out.extend_from_slice(&self.data);
    }
}
