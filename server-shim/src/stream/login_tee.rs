//! Works around opensrv-mysql 0.7 hiding the client's login packet.
//!
//! opensrv runs the connection phase itself. Its `authenticate(plugin, user, salt, data)` hook
//! gets neither the login's database, which the relayed-auth MAC binds (DESIGN §3), nor the
//! plugin the client named, and the parsed handshake stays private to opensrv. So the reader
//! copies the client's first packet (its HandshakeResponse41) as it passes through, and
//! `authenticate` decodes that copy with `authplugin` (see [`crate::auth`]).

use authplugin::packet::framing::{HEADER_LEN, parse_packet};

/// The largest first packet the reader keeps. A HandshakeResponse41 with a relayed-auth
/// payload and connect attributes is well under 2 KiB; anything over this is refused.
pub(super) const MAX_HANDSHAKE_PACKET: usize = 64 * 1024;

/// How the tee ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Teed {
    /// The first packet's payload, whole.
    Packet(Vec<u8>),
    /// The first packet was bigger than [`MAX_HANDSHAKE_PACKET`] or badly framed.
    Refused,
}

/// Copies the client's first packet out of the bytes handed to opensrv.
#[derive(Debug)]
pub(super) struct LoginTee {
    /// Bytes of the first packet while it is still arriving; `None` once done.
    buf: Option<Vec<u8>>,
}

impl LoginTee {
    pub(super) const fn new() -> Self {
        Self {
            buf: Some(Vec::new()),
        }
    }

    /// Takes note of the next client `bytes`; returns the outcome once the first packet is
    /// whole or refused (exactly once), `None` before and after.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Option<Teed> {
        let tee = self.buf.as_mut()?;
        if tee.len() + bytes.len() > MAX_HANDSHAKE_PACKET + HEADER_LEN {
            self.buf = None;
            return Some(Teed::Refused);
        }
        tee.extend_from_slice(bytes);
        let teed = match parse_packet(tee, MAX_HANDSHAKE_PACKET) {
            Ok(None) => return None,
            Ok(Some((packet, _))) => Teed::Packet(packet.payload),
            Err(_) => Teed::Refused,
        };
        self.buf = None;
        Some(teed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::stream::test_support::{T, packet};
    use crate::stream::{AuthReader, ConnShared};

    #[tokio::test]
    async fn tees_first_packet_while_passing_every_byte_through() {
        let (mut client, server) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let mut bytes = packet(1, b"handshake");
        bytes.extend(packet(0, b"\x03SELECT 1"));
        // Arrives in two pieces, split inside the first packet.
        client.write_all(&bytes[..5]).await.unwrap();
        let mut got = vec![0u8; 5];
        reader.read_exact(&mut got).await.unwrap();
        assert_eq!(shared.first_packet(), None);
        client.write_all(&bytes[5..]).await.unwrap();
        let mut rest = vec![0u8; bytes.len() - 5];
        reader.read_exact(&mut rest).await.unwrap();
        got.extend(rest);
        assert_eq!(got, bytes);
        assert_eq!(shared.first_packet().as_deref(), Some(&b"handshake"[..]));
    }

    #[tokio::test]
    async fn refuses_first_packet_over_the_cap() {
        let (mut client, server) = tokio::io::duplex(256 * 1024);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let big = packet(1, &vec![7u8; MAX_HANDSHAKE_PACKET + 1]);
        let n = big.len();
        tokio::spawn(async move { client.write_all(&big).await });
        let mut sink = vec![0u8; n];
        reader.read_exact(&mut sink).await.unwrap();
        assert_eq!(shared.first_packet(), None);
    }
}
