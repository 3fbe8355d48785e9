//! `Protocol::HandshakeResponse41`: the client's login (P2), and the relay's login to the
//! compute (P6).

use zeroize::Zeroizing;

use crate::packet::capabilities::{
    CLIENT_CONNECT_ATTRS, CLIENT_CONNECT_WITH_DB, CLIENT_MYSQL_MARIADB, CLIENT_PLUGIN_AUTH,
    CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    CLIENT_ZSTD_COMPRESSION_ALGORITHM,
};
use crate::reader::{DecodeError, Reader, put_lenenc_bytes, put_nul_terminated};

/// Connect attributes as (key, value) pairs in wire order.
pub type ConnectAttrs = Vec<(Vec<u8>, Vec<u8>)>;

/// A client's login packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeResponse41 {
    /// `client_flag`: the client's capabilities. It decides which fields below exist.
    pub client_flag: u32,
    /// `max_packet_size`.
    pub max_packet_size: u32,
    /// `character_set`: the connection's collation id.
    pub character_set: u8,
    /// The 23 filler bytes. MariaDB clients put extended capabilities in the last four when
    /// the server's greeting cleared bit 0; see
    /// [`HandshakeResponse41::mariadb_extended_capabilities`].
    pub reserved: [u8; 23],
    /// `username`.
    pub username: Vec<u8>,
    /// `auth_response`: the client's answer to the scramble. Wiped from memory when dropped.
    pub auth_response: Zeroizing<Vec<u8>>,
    /// `database`, present exactly when `CLIENT_CONNECT_WITH_DB` is set.
    pub database: Option<Vec<u8>>,
    /// `client_plugin_name`, present exactly when `CLIENT_PLUGIN_AUTH` is set.
    pub client_plugin_name: Option<Vec<u8>>,
    /// Connect attributes in wire order, present exactly when `CLIENT_CONNECT_ATTRS` is set.
    pub connect_attrs: Option<ConnectAttrs>,
    /// `zstd_compression_level`, present exactly when `CLIENT_ZSTD_COMPRESSION_ALGORITHM` is
    /// set.
    pub zstd_compression_level: Option<u8>,
}

impl HandshakeResponse41 {
    /// MariaDB's extended client capabilities (the last four filler bytes), meaningful when
    /// the client cleared bit 0 of `client_flag`.
    #[must_use]
    pub fn mariadb_extended_capabilities(&self) -> Option<u32> {
        if self.client_flag & CLIENT_MYSQL_MARIADB != 0 {
            return None;
        }
        let [.., a, b, c, d] = self.reserved;
        Some(u32::from_le_bytes([a, b, c, d]))
    }

    /// Decodes strictly, using the client's own flags to decide which fields exist and how
    /// the answer's length is encoded. Every flagged field must be present and nothing may
    /// follow the last one.
    ///
    /// Some clients (PyMySQL, libmariadb) pick the answer's length encoding from the *server's*
    /// flags; for answers under 251 bytes both encodings are the same byte, so this is moot
    /// for every real scramble answer.
    ///
    /// # Errors
    /// [`DecodeError`] naming the first missing or invalid field;
    /// `InvalidValue("client_flag")` for a pre-4.1 (HandshakeResponse320) login.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        Self::decode_for_server(payload, u32::MAX)
    }

    /// Decodes a login sent to a server that advertised `server_capabilities`. Clients set
    /// flags the server lacks (libmariadb sets `CLIENT_CONNECT_ATTRS` and then, seeing the
    /// server lacks it, sends no attributes), and servers only honour the flags both sides
    /// have, so which fields exist is decided by `client_flag & server_capabilities`.
    /// `client_flag` itself is kept as sent.
    ///
    /// # Errors
    /// As [`HandshakeResponse41::decode`].
    pub fn decode_for_server(
        payload: &[u8],
        server_capabilities: u32,
    ) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let sent_flag = r.u32_le("client_flag")?;
        let client_flag = sent_flag & server_capabilities;
        if sent_flag & CLIENT_PROTOCOL_41 == 0 {
            return Err(DecodeError::InvalidValue("client_flag"));
        }
        let max_packet_size = r.u32_le("max_packet_size")?;
        let character_set = r.u8("character_set")?;
        let reserved = r.array("filler")?;
        let username = r.nul_terminated("username")?.to_vec();
        let auth_response = if client_flag & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            r.lenenc_bytes("auth_response")?
        } else if client_flag & CLIENT_SECURE_CONNECTION != 0 {
            r.u8_prefixed("auth_response")?
        } else {
            r.nul_terminated("auth_response")?
        };
        let auth_response = Zeroizing::new(auth_response.to_vec());
        let database = (client_flag & CLIENT_CONNECT_WITH_DB != 0)
            .then(|| r.nul_terminated("database").map(<[u8]>::to_vec))
            .transpose()?;
        let client_plugin_name = (client_flag & CLIENT_PLUGIN_AUTH != 0)
            .then(|| r.nul_terminated("client_plugin_name").map(<[u8]>::to_vec))
            .transpose()?;
        // Known client quirk, tolerated on purpose: mysql-connector-python writes its
        // connect attributes whenever it set CLIENT_CONNECT_ATTRS itself, even to a server
        // that did not offer the flag. One well-formed attribute block is accepted there —
        // in the bytes left before the zstd level, which is not an attribute block.
        let zstd_len = usize::from(client_flag & CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0);
        let attrs_sent = client_flag & CLIENT_CONNECT_ATTRS != 0
            || (sent_flag & CLIENT_CONNECT_ATTRS != 0 && r.remaining() > zstd_len);
        let connect_attrs = attrs_sent
            .then(|| decode_attrs(r.lenenc_bytes("connect_attrs")?))
            .transpose()?;
        let zstd_compression_level = (client_flag & CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0)
            .then(|| r.u8("zstd_compression_level"))
            .transpose()?;
        r.expect_empty()?;
        Ok(Self {
            client_flag: sent_flag,
            max_packet_size,
            character_set,
            reserved,
            username,
            auth_response,
            database,
            client_plugin_name,
            connect_attrs,
            zstd_compression_level,
        })
    }

    /// Appends the payload. Fields are written exactly when `client_flag` calls for them, so
    /// a field set without its flag is dropped and a flag without its field writes an empty
    /// one: the output always decodes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_for_server(out, u32::MAX);
    }

    /// Appends the payload as sent to a server with `server_capabilities`: fields follow
    /// `client_flag & server_capabilities` (see [`HandshakeResponse41::decode_for_server`]).
    pub fn encode_for_server(&self, out: &mut Vec<u8>, server_capabilities: u32) {
        out.extend_from_slice(&self.client_flag.to_le_bytes());
        let flag = self.client_flag & server_capabilities;
        out.extend_from_slice(&self.max_packet_size.to_le_bytes());
        out.push(self.character_set);
        out.extend_from_slice(&self.reserved);
        put_nul_terminated(out, &self.username);
        if flag & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            put_lenenc_bytes(out, &self.auth_response);
        } else if flag & CLIENT_SECURE_CONNECTION != 0 {
            // The one-byte length cannot say more than 255; longer answers need the lenenc
            // flag, so they are cut rather than written as a packet that does not decode.
            let answer = self.auth_response.get(..255).unwrap_or(&self.auth_response);
            out.push(answer.len() as u8);
            out.extend_from_slice(answer);
        } else {
            put_nul_terminated(out, &self.auth_response);
        }
        if flag & CLIENT_CONNECT_WITH_DB != 0 {
            put_nul_terminated(out, self.database.as_deref().unwrap_or_default());
        }
        if flag & CLIENT_PLUGIN_AUTH != 0 {
            put_nul_terminated(out, self.client_plugin_name.as_deref().unwrap_or_default());
        }
        // Attributes the client sent under the quirk above are written back the same way, so
        // what decoded re-encodes to what decodes to it again.
        let quirk_attrs =
            self.client_flag & CLIENT_CONNECT_ATTRS != 0 && self.connect_attrs.is_some();
        if flag & CLIENT_CONNECT_ATTRS != 0 || quirk_attrs {
            let mut attrs = Vec::new();
            for (k, v) in self.connect_attrs.as_deref().unwrap_or_default() {
                put_lenenc_bytes(&mut attrs, k);
                put_lenenc_bytes(&mut attrs, v);
            }
            put_lenenc_bytes(out, &attrs);
        }
        if flag & CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
            out.push(self.zstd_compression_level.unwrap_or_default());
        }
    }

    /// The payload as a new vector.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.encode(&mut out);
        out
    }

    /// The flags both sides have: what the server honours.
    #[must_use]
    pub const fn effective_flags(&self, server_capabilities: u32) -> u32 {
        self.client_flag & server_capabilities
    }
}

fn decode_attrs(bytes: &[u8]) -> Result<ConnectAttrs, DecodeError> {
    let mut r = Reader::new(bytes);
    let mut attrs = Vec::new();
    while r.remaining() > 0 {
        let key = r.lenenc_bytes("connect_attrs key")?.to_vec();
        let value = r.lenenc_bytes("connect_attrs value")?.to_vec();
        attrs.push((key, value));
    }
    Ok(attrs)
}
