//! Works around a use-after-free in opensrv-mysql 0.7's packet reader, and follows client
//! packet boundaries.
//!
//! opensrv's `PacketReader::next_async` keeps the rest of a read by replacing its buffer while
//! the packet it returns still points into the old one, so a packet followed in the same read
//! by another one can be garbled. A client that pipelines COM_STMT_CLOSE (no reply) with its
//! next command then got opensrv's OK for an unparsable command on top of the real reply, and
//! every later reply was off by one. So the reader hands opensrv at most one client packet per
//! read and holds back the bytes of the next one ([`ClientPackets`]).
//!
//! Following the boundaries also finds the command byte of each client packet, which the
//! COM_FIELD_LIST fix ([`super::field_list`]) and the unsupported-command ERR
//! ([`super::unsupported`]) need; payloads are never buffered for that.

use authplugin::packet::framing::{HEADER_LEN, MAX_FRAME_PAYLOAD};

/// The client side of the stream, packet by packet: the boundaries and command bytes, and the
/// bytes read past the end of the packet the last read ended.
#[derive(Debug, Default)]
pub(super) struct ClientPackets {
    commands: CommandTracker,
    /// Bytes read from the client past the end of the packet the last read ended; handed
    /// out before reading again.
    held: Vec<u8>,
}

impl ClientPackets {
    /// Held bytes of the next packet, at most `room` of them; `None` when nothing is held
    /// (read from the client then).
    pub(super) fn take_held(&mut self, room: usize) -> Option<Vec<u8>> {
        if self.held.is_empty() {
            return None;
        }
        let n = self.commands.packet_end(&self.held).min(room);
        Some(self.held.drain(..n).collect())
    }

    /// Holds `bytes` (read from the client past the end of its first packet) for the next
    /// reads.
    pub(super) fn hold(&mut self, bytes: &[u8]) {
        self.held.extend_from_slice(bytes);
    }

    /// Splits `new` (just read from the client) at the end of the packet now arriving: keeps
    /// the bytes after it for the next read and returns how many to hand out now.
    pub(super) fn hold_back(&mut self, new: &[u8]) -> usize {
        let keep = self.commands.packet_end(new);
        self.held
            .extend_from_slice(new.get(keep..).unwrap_or_default());
        keep
    }

    /// The bytes held for the next reads.
    pub(super) fn held(&self) -> &[u8] {
        &self.held
    }

    /// Replaces the first `len` held bytes (one whole packet) with `packet`.
    pub(super) fn replace_held(&mut self, len: usize, packet: &[u8]) {
        self.held
            .splice(..len.min(self.held.len()), packet.iter().copied());
    }

    /// Whether the next byte from the client starts a packet (none is partly handed out).
    pub(super) fn at_boundary(&self) -> bool {
        self.commands.at_boundary()
    }

    /// Takes note of `bytes`, handed to opensrv; returns the command bytes of the packets
    /// that started in them.
    pub(super) fn handed_out(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.commands.feed(bytes)
    }
}

/// Follows client packet boundaries in the command phase to see each command byte, without
/// buffering payloads.
#[derive(Debug, Default)]
struct CommandTracker {
    header: Vec<u8>,
    /// Payload bytes of the current packet still to skip.
    remaining: usize,
    /// A header arrived and its command byte has not yet.
    awaiting_command: bool,
    /// The current packet is 0xFFFFFF bytes long, so the next one continues its payload
    /// and starts with no command byte.
    continues: bool,
}

impl CommandTracker {
    /// Feeds bytes read from the client; returns the command bytes of the packets that
    /// started in them.
    fn feed(&mut self, mut bytes: &[u8]) -> Vec<u8> {
        let mut started = Vec::new();
        while !bytes.is_empty() {
            if self.awaiting_command {
                self.awaiting_command = false;
                started.extend(bytes.first());
            }
            if self.remaining > 0 {
                let n = self.remaining.min(bytes.len());
                self.remaining -= n;
                bytes = bytes.get(n..).unwrap_or_default();
                continue;
            }
            let need = HEADER_LEN
                .saturating_sub(self.header.len())
                .min(bytes.len());
            self.header
                .extend_from_slice(bytes.get(..need).unwrap_or_default());
            bytes = bytes.get(need..).unwrap_or_default();
            if let [a, b, c, _seq] = self.header[..] {
                let len = usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16;
                self.header.clear();
                self.remaining = len;
                self.awaiting_command = len > 0 && !self.continues;
                self.continues = len == MAX_FRAME_PAYLOAD;
            }
        }
        started
    }

    /// Whether no packet is partly handed out.
    const fn at_boundary(&self) -> bool {
        self.remaining == 0 && self.header.is_empty() && !self.continues
    }

    /// How many of `bytes` (the next bytes from the client) belong to the packet now
    /// arriving: all of them, or those up to its end. At least one unless `bytes` is empty.
    fn packet_end(&self, bytes: &[u8]) -> usize {
        if self.remaining > 0 {
            return self.remaining.min(bytes.len());
        }
        let need = HEADER_LEN.saturating_sub(self.header.len());
        let (Some(header_end), Some(payload)) = (bytes.get(..need), bytes.get(need..)) else {
            return bytes.len();
        };
        let mut header = self.header.clone();
        header.extend_from_slice(header_end);
        let len = match header[..] {
            [a, b, c, _seq] => usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16,
            _ => 0,
        };
        need + len.min(payload.len())
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::stream::test_support::{T, packet};
    use crate::stream::{AuthReader, AuthWriter, ConnShared};

    #[test]
    fn tracks_command_bytes_across_split_reads() {
        let mut t = CommandTracker::default();
        let mut bytes = packet(0, b"\x03SELECT 1");
        bytes.extend(packet(0, b"\x04t\0"));
        let (a, b) = bytes.split_at(15);
        assert_eq!(t.feed(a), [0x03]);
        assert_eq!(t.feed(b), [0x04]);
        // A 0x04 inside a payload is not a command.
        assert_eq!(t.feed(&packet(0, b"\x03\x04\x04")), [0x03]);
    }

    #[test]
    fn continuation_frames_carry_no_command_byte() {
        let mut t = CommandTracker::default();
        let mut big = vec![0xFF, 0xFF, 0xFF, 0, 0x03];
        big.resize(HEADER_LEN + 0xFF_FFFF, 0x11);
        assert_eq!(t.feed(&big), [0x03]);
        // The continuation starts with 0x11 (COM_CHANGE_USER's byte) but is payload.
        assert_eq!(t.feed(&[2, 0, 0, 1, 0x11, 0x11]), Vec::<u8>::new());
        assert_eq!(t.feed(&packet(0, b"\x0e")), [0x0e]);
    }

    /// COM_STMT_CLOSE (no reply) and the next command, sent by the client in one write (as
    /// mysql-connector-python does on `cursor.close()` + `cursor()`'s ping), must reach
    /// opensrv in separate reads: see the module docs.
    #[tokio::test]
    async fn hands_out_one_client_packet_per_read() {
        let (mut client, server) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        shared.mark_authenticated(None);
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let close = packet(0, b"\x19\x01\x00\x00\x00");
        let ping = packet(0, b"\x0e");
        let field_list = packet(0, b"\x04t\0");
        let mut bytes = close.clone();
        bytes.extend(&ping);
        bytes.extend(&field_list[..2]);
        client.write_all(&bytes).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], close[..]);
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], ping[..]);
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], field_list[..2]);
        // The rest of a packet split across reads, with the start of the next one behind it.
        client.write_all(&field_list[2..]).await.unwrap();
        client.write_all(&ping).await.unwrap();
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], field_list[2..]);
        assert!(shared.take_field_list());
        assert_eq!(shared.take_unsupported(), None);
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], ping[..]);
    }

    #[tokio::test]
    async fn hands_out_handshake_alone() {
        let (mut client, server) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let handshake = packet(1, b"handshake");
        let mut bytes = handshake.clone();
        bytes.extend(packet(0, b"\x0e"));
        client.write_all(&bytes).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], handshake[..]);
        assert_eq!(shared.first_packet().as_deref(), Some(&b"handshake"[..]));
    }

    /// The symptom end to end, through opensrv: a COM_STMT_CLOSE pipelined with a COM_PING
    /// gets no reply, the ping exactly one OK.
    #[tokio::test]
    async fn opensrv_answers_pipelined_stmt_close_and_ping_once() {
        struct Closes(Arc<ConnShared>, Arc<Mutex<Vec<u32>>>);
        #[async_trait::async_trait]
        impl<W: AsyncWrite + Send + Unpin> opensrv_mysql::AsyncMysqlShim<W> for Closes {
            type Error = io::Error;
            async fn authenticate(&self, _: &str, _: &[u8], _: &[u8], _: &[u8]) -> bool {
                self.0.mark_authenticated(None);
                true
            }
            async fn on_prepare<'a>(
                &'a mut self,
                _: &'a str,
                _: opensrv_mysql::StatementMetaWriter<'a, W>,
            ) -> io::Result<()> {
                unreachable!()
            }
            async fn on_execute<'a>(
                &'a mut self,
                _: u32,
                _: opensrv_mysql::ParamParser<'a>,
                _: opensrv_mysql::QueryResultWriter<'a, W>,
            ) -> io::Result<()> {
                unreachable!()
            }
            async fn on_close<'a>(&'a mut self, stmt: u32)
            where
                W: 'async_trait,
            {
                self.1.lock().unwrap().push(stmt);
            }
            async fn on_query<'a>(
                &'a mut self,
                _: &'a str,
                _: opensrv_mysql::QueryResultWriter<'a, W>,
            ) -> io::Result<()> {
                unreachable!()
            }
        }

        async fn read_packet(r: &mut (impl AsyncRead + Unpin)) -> (u8, Vec<u8>) {
            let mut header = [0u8; 4];
            r.read_exact(&mut header).await.unwrap();
            let len =
                usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
            let mut payload = vec![0u8; len];
            r.read_exact(&mut payload).await.unwrap();
            (header[3], payload)
        }

        for _ in 0..20 {
            let (mut client_w, server_r) = tokio::io::duplex(64 * 1024);
            let (server_w, mut client_r) = tokio::io::duplex(64 * 1024);
            let shared = Arc::new(ConnShared::default());
            let closes = Arc::new(Mutex::new(Vec::new()));
            let reader = AuthReader::new(server_r, shared.clone(), T, CancellationToken::new());
            let writer = AuthWriter::new(server_w, shared.clone(), T);
            let server = tokio::spawn(opensrv_mysql::AsyncMysqlIntermediary::run_on(
                Closes(shared, closes.clone()),
                reader,
                writer,
            ));
            let _greeting = read_packet(&mut client_r).await;
            // HandshakeResponse41: PROTOCOL_41 | SECURE_CONNECTION | PLUGIN_AUTH.
            let mut response = (0x0000_0200u32 | 0x8000 | 0x8_0000).to_le_bytes().to_vec();
            response.extend(0x0100_0000u32.to_le_bytes());
            response.push(45);
            response.extend([0u8; 23]);
            response.extend(b"u\0");
            response.push(20);
            response.extend([7u8; 20]);
            response.extend(b"mysql_native_password\0");
            client_w.write_all(&packet(1, &response)).await.unwrap();
            let (_, ok) = read_packet(&mut client_r).await;
            assert_eq!(ok.first(), Some(&0x00));
            // Heap blocks after opensrv's read buffer, so that freeing it does not merely
            // return it to the top of the heap (the allocator then writes its free-list
            // links into the freed bytes, which opensrv 0.7 may still be parsing).
            let _pinned: Vec<Vec<u8>> = (0..16).map(|i| vec![i; 8192]).collect();

            let mut bytes = packet(0, b"\x19\x01\x00\x00\x00");
            bytes.extend(packet(0, b"\x0e"));
            client_w.write_all(&bytes).await.unwrap();
            let (seq, ok) = read_packet(&mut client_r).await;
            assert_eq!((seq, ok.first()), (1, Some(&0x00)));
            client_w.write_all(&packet(0, b"\x01")).await.unwrap();
            server.await.unwrap().unwrap();
            let mut rest = Vec::new();
            client_r.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"", "a stray reply after the ping's OK");
            assert_eq!(*closes.lock().unwrap(), [1]);
        }
    }
}
