//! The MySQL connection-phase packets the relay and the compute exchange, with strict
//! decoders over a checked reader and encoders into a `Vec<u8>`.
//!
//! Why not `mysql_common`'s packet types: they are client-side codecs that tolerate trailing
//! bytes and missing optional fields, do not keep MariaDB's extended capability bytes, and
//! would pull a large dependency tree into this small, security-critical crate. The relay
//! faces the internet, so it needs decoders that refuse anything not exactly well formed.

pub mod auth_switch;
pub mod capabilities;
pub mod command;
pub mod err;
pub mod framing;
pub mod handshake_response41;
pub mod handshake_v10;
pub mod ok;
pub mod ssl_request;
pub mod text_result;

pub use auth_switch::{AuthMoreData, AuthSwitchRequest};
pub use err::ErrPacket;
pub use framing::{FrameError, Packet, parse_packet, write_packet};
pub use handshake_response41::HandshakeResponse41;
pub use handshake_v10::HandshakeV10;
pub use ok::OkPacket;
pub use ssl_request::SslRequest;
