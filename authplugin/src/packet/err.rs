//! `ERR_Packet`: how every failure reaches a MySQL client, and the error codes Perceptron
//! sends (MySQL's own numbers and SQLSTATEs, so client libraries classify them correctly).

use crate::reader::{DecodeError, Reader};

/// First byte of an ERR packet.
pub const ERR_HEADER: u8 = 0xFF;

/// An error result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrPacket {
    /// `error_code`.
    pub error_code: u16,
    /// `sql_state` (5 ASCII characters), absent in the ERR a server sends in place of its
    /// greeting (e.g. "Host is not allowed to connect").
    pub sql_state: Option<[u8; 5]>,
    /// `error_message`.
    pub error_message: Vec<u8>,
}

impl ErrPacket {
    /// An error with a SQLSTATE, as sent after the greeting.
    #[must_use]
    pub fn new(error_code: u16, sql_state: &[u8; 5], error_message: &str) -> Self {
        Self {
            error_code,
            sql_state: Some(*sql_state),
            error_message: error_message.as_bytes().to_vec(),
        }
    }

    /// Decodes an ERR packet; the `#` SQLSTATE marker is optional.
    ///
    /// # Errors
    /// [`DecodeError`] for a wrong header or a truncated code or SQLSTATE.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.u8("header")? != ERR_HEADER {
            return Err(DecodeError::InvalidValue("header"));
        }
        let error_code = r.u16_le("error_code")?;
        let sql_state = if r.peek() == Some(b'#') {
            r.take(1, "sql_state_marker")?;
            Some(r.array("sql_state")?)
        } else {
            None
        };
        Ok(Self {
            error_code,
            sql_state,
            error_message: r.rest().to_vec(),
        })
    }

    /// Appends the payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(ERR_HEADER);
        out.extend_from_slice(&self.error_code.to_le_bytes());
        if let Some(state) = &self.sql_state {
            out.push(b'#');
            out.extend_from_slice(state);
        }
        out.extend_from_slice(&self.error_message);
    }

    /// The payload as a new vector.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.error_message.len());
        self.encode(&mut out);
        out
    }
}

/// MySQL error codes used by Perceptron, with the SQLSTATE MySQL pairs them with.
pub mod codes {
    /// `ER_CON_COUNT_ERROR` "Too many connections".
    pub const ER_CON_COUNT_ERROR: (u16, &[u8; 5]) = (1040, b"08004");
    /// `ER_HANDSHAKE_ERROR` "Bad handshake".
    pub const ER_HANDSHAKE_ERROR: (u16, &[u8; 5]) = (1043, b"08S01");
    /// `ER_ACCESS_DENIED_ERROR` "Access denied for user ...".
    pub const ER_ACCESS_DENIED_ERROR: (u16, &[u8; 5]) = (1045, b"28000");
    /// `ER_NET_PACKET_TOO_LARGE` "Got a packet bigger than 'max_allowed_packet' bytes".
    pub const ER_NET_PACKET_TOO_LARGE: (u16, &[u8; 5]) = (1153, b"08S01");
    /// `ER_NET_READ_ERROR` "Got an error reading communication packets".
    pub const ER_NET_READ_ERROR: (u16, &[u8; 5]) = (1158, b"08S01");
    /// `ER_NET_READ_INTERRUPTED` "Got timeout reading communication packets".
    pub const ER_NET_READ_INTERRUPTED: (u16, &[u8; 5]) = (1159, b"08S01");
    /// `ER_NET_PACKETS_OUT_OF_ORDER` "Got packets out of order".
    pub const ER_NET_PACKETS_OUT_OF_ORDER: (u16, &[u8; 5]) = (1156, b"08S01");
    /// `ER_NOT_SUPPORTED_AUTH_MODE` "Client does not support authentication protocol
    /// requested by server".
    pub const ER_NOT_SUPPORTED_AUTH_MODE: (u16, &[u8; 5]) = (1251, b"08004");
    /// `ER_SERVER_SHUTDOWN` "Server shutdown in progress".
    pub const ER_SERVER_SHUTDOWN: (u16, &[u8; 5]) = (1053, b"08S01");
    /// `ER_HOST_IS_BLOCKED` "Host '...' is blocked because of many connection errors".
    pub const ER_HOST_IS_BLOCKED: (u16, &[u8; 5]) = (1129, b"HY000");
    /// `ER_USER_LIMIT_REACHED` "User '...' has exceeded the '...' resource".
    pub const ER_USER_LIMIT_REACHED: (u16, &[u8; 5]) = (1226, b"42000");
    /// `ER_SECURE_TRANSPORT_REQUIRED` "Connections using insecure transport are prohibited
    /// while --require_secure_transport=ON."
    pub const ER_SECURE_TRANSPORT_REQUIRED: (u16, &[u8; 5]) = (3159, b"HY000");
    /// `ER_QUERY_INTERRUPTED` (used by MySQL when a wait is cut short).
    pub const ER_QUERY_INTERRUPTED: (u16, &[u8; 5]) = (1317, b"70100");
    /// `ER_UNKNOWN_COM_ERROR` "Unknown command".
    pub const ER_UNKNOWN_COM_ERROR: (u16, &[u8; 5]) = (1047, b"08S01");
    /// `ER_CONNECTION_KILLED` "Connection was killed".
    pub const ER_CONNECTION_KILLED: (u16, &[u8; 5]) = (1927, b"70100");
}
