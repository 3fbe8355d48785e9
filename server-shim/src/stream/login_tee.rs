//! Works around opensrv-mysql 0.7 hiding the client's login packet.
//!
//! opensrv runs the connection phase itself. Its `authenticate(plugin, user, salt, data)` hook
//! gets neither the login's database, which the relayed-auth MAC binds (architecture.md §3), nor the
//! plugin the client named, and the parsed handshake stays private to opensrv. So the reader
//! copies the client's first packet (its HandshakeResponse41) as it passes through, and
//! `authenticate` decodes that copy with `authplugin` (see [`crate::auth`]).
//!
//! The copy holds the client's answer (or the relayed-auth payload), so it is wiped from memory
//! when dropped, and so is every buffer it passed through (see CONTRIBUTING.md, *Secrets stay secret*).

use core::fmt;
use core::ops::Deref;

use authplugin::packet::framing::{HEADER_LEN, parse_packet};
use zeroize::Zeroizing;

/// The largest first packet the reader keeps. A HandshakeResponse41 with a relayed-auth
/// payload and connect attributes is well under 2 KiB; anything over this is refused.
pub(super) const MAX_HANDSHAKE_PACKET: usize = 64 * 1024;

/// The payload of the client's first packet (its HandshakeResponse41). Wiped when dropped;
/// its `Debug` shows only the length.
#[derive(Clone, PartialEq, Eq)]
pub struct LoginPacket(Zeroizing<Vec<u8>>);

impl Deref for LoginPacket {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for LoginPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoginPacket({} bytes)", self.0.len())
    }
}

/// How the tee ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Teed {
    /// The first packet's payload, whole.
    Packet(LoginPacket),
    /// The first packet was bigger than [`MAX_HANDSHAKE_PACKET`] or badly framed.
    Refused,
}

/// Copies the client's first packet out of the bytes handed to opensrv.
#[derive(Debug)]
pub(super) struct LoginTee {
    /// Bytes of the first packet while it is still arriving; `None` once done.
    buf: Option<Zeroizing<Vec<u8>>>,
}

impl LoginTee {
    pub(super) fn new() -> Self {
        Self {
            buf: Some(Zeroizing::new(Vec::new())),
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
        extend_wiping(tee, bytes);
        let teed = match parse_packet(tee, MAX_HANDSHAKE_PACKET) {
            Ok(None) => return None,
            Ok(Some((packet, _))) => Teed::Packet(LoginPacket(Zeroizing::new(packet.payload))),
            Err(_) => Teed::Refused,
        };
        self.buf = None;
        Some(teed)
    }
}

/// Appends `bytes` to `buf` without leaving an unwiped copy behind: a buffer that must grow
/// is copied into a bigger one here, and the old one is wiped as it is dropped (a plain
/// `extend` would leave the old allocation to the allocator as it is).
pub(super) fn extend_wiping(buf: &mut Zeroizing<Vec<u8>>, bytes: &[u8]) {
    let needed = buf.len() + bytes.len();
    if needed > buf.capacity() {
        let capacity = needed
            .max(buf.capacity() * 2)
            .min(MAX_HANDSHAKE_PACKET + HEADER_LEN);
        let mut bigger = Zeroizing::new(Vec::with_capacity(capacity.max(needed)));
        bigger.extend_from_slice(buf);
        *buf = bigger;
    }
    buf.extend_from_slice(bytes);
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
        // Arrives in two pieces, split inside the first packet: handed on once whole.
        client.write_all(&bytes[..5]).await.unwrap();
        let mut got = vec![0u8; 13];
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(50), reader.read(&mut got)).await;
        assert!(early.is_err(), "handed on before it was whole");
        assert_eq!(shared.first_packet(), None);
        client.write_all(&bytes[5..]).await.unwrap();
        reader.read_exact(&mut got).await.unwrap();
        assert_eq!(shared.first_packet().as_deref(), Some(&b"handshake"[..]));
        let mut rest = vec![0u8; bytes.len() - 13];
        reader.read_exact(&mut rest).await.unwrap();
        got.extend(rest);
        assert_eq!(got, bytes);
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

    #[test]
    fn grows_the_tee_keeping_its_bytes() {
        let mut buf = Zeroizing::new(Vec::new());
        for chunk in [&b"ab"[..], b"cdef", &[9; 100]] {
            extend_wiping(&mut buf, chunk);
        }
        assert_eq!(buf.len(), 106);
        assert_eq!(buf.get(..6), Some(&b"abcdef"[..]));
        assert!(buf.capacity() >= 106);
    }

    #[test]
    fn hides_the_login_packet_in_debug_output() {
        let packet = LoginPacket(Zeroizing::new(b"secret answer".to_vec()));
        assert_eq!(format!("{packet:?}"), "LoginPacket(13 bytes)");
    }
}
