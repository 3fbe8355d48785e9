//! The stream adapter between a client socket and opensrv-mysql.
//!
//! opensrv-mysql 0.7 runs the whole connection phase itself and hides two things the shim
//! needs (see `docs/server-shim.md`, "Working around opensrv"):
//! - its `authenticate` hook gets neither the login's database nor the plugin the client
//!   named, but the relayed-auth MAC (DESIGN §3) binds user **and** database;
//! - on a refused login it writes ERR 1698 "Authenticate failed, user: ..." where MySQL (and
//!   DESIGN §3) send ERR 1045 (28000) "Access denied for user ...".
//!
//! So the socket is wrapped before opensrv sees it:
//! - [`AuthReader`] tees the first client packet (the HandshakeResponse41, at most
//!   [`MAX_HANDSHAKE_PACKET`] bytes) into [`ConnShared`], where `authenticate` decodes it
//!   strictly with `authplugin`. It also puts deadlines on reads: the whole login must arrive
//!   within the handshake timeout, and an idle connection is closed after the idle timeout.
//!   When the server shuts down, a read that waits for the next command sees end-of-stream,
//!   so the connection ends after its running statement.
//! - [`AuthWriter`] replaces opensrv's ERR with the shim's own ERR (same sequence id) once
//!   `authenticate` has refused the login, and fails a write that makes no progress within
//!   the write timeout. It also fixes opensrv's reply to COM_FIELD_LIST (an 8-byte `0xFE`
//!   packet that libmariadb does not take as the end of the list, which froze the `mariadb`
//!   CLI's tab completion after `USE`) into a 5-byte EOF.
//!
//! - [`AuthReader`] hands opensrv at most one client packet per read, holding back the
//!   bytes of the next one: opensrv's `PacketReader::next_async` keeps the rest of a read
//!   by replacing its buffer while the packet it returns still points into the old one
//!   (a use-after-free), so a packet followed in the same read by another one can be
//!   garbled. A client that pipelines COM_STMT_CLOSE (no reply) with its next command then
//!   got opensrv's OK for an unparsable command on top of the real reply, and every later
//!   reply was off by one.
//!
//! Both halves are generic over `AsyncRead`/`AsyncWrite`, so tests drive them with
//! `tokio::io::duplex`.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use authplugin::packet::framing::{HEADER_LEN, parse_packet};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The largest first packet the reader keeps. A HandshakeResponse41 with a relayed-auth
/// payload and connect attributes is well under 2 KiB; anything over this is refused.
pub const MAX_HANDSHAKE_PACKET: usize = 64 * 1024;

/// State shared by the two halves of a connection and the shim's hooks.
#[derive(Debug, Default)]
pub struct ConnShared {
    inner: Mutex<SharedState>,
}

#[derive(Debug, Default)]
struct SharedState {
    /// The payload of the client's first packet, once complete.
    first_packet: Option<Vec<u8>>,
    /// The first packet was bigger than [`MAX_HANDSHAKE_PACKET`] or badly framed.
    first_packet_refused: bool,
    /// The ERR payload to send in place of opensrv's next packet (a refused login).
    deny: Option<Vec<u8>>,
    /// The login succeeded: reads now use the idle timeout.
    authenticated: bool,
    /// The client sent COM_FIELD_LIST; its reply needs fixing (see [`AuthWriter`]).
    field_list_pending: bool,
    /// The client sent a command opensrv does not implement (it would answer OK without
    /// doing anything); its reply is replaced by an ERR (see [`AuthWriter`]).
    unsupported_pending: Option<u8>,
}

impl ConnShared {
    fn state(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client's first packet (its HandshakeResponse41), if it arrived whole and within
    /// [`MAX_HANDSHAKE_PACKET`].
    #[must_use]
    pub fn first_packet(&self) -> Option<Vec<u8>> {
        let state = self.state();
        if state.first_packet_refused {
            return None;
        }
        state.first_packet.clone()
    }

    /// Makes the writer send `err_payload` (an ERR packet payload) in place of the next
    /// packet opensrv writes, and drop everything after it.
    pub fn deny_with(&self, err_payload: Vec<u8>) {
        self.state().deny = Some(err_payload);
    }

    /// Marks the login as done: reads switch from the handshake deadline to the idle one.
    pub fn mark_authenticated(&self) {
        self.state().authenticated = true;
    }

    fn authenticated(&self) -> bool {
        self.state().authenticated
    }

    fn take_deny(&self) -> Option<Vec<u8>> {
        self.state().deny.take()
    }

    fn take_field_list(&self) -> bool {
        std::mem::take(&mut self.state().field_list_pending)
    }

    fn take_unsupported(&self) -> Option<u8> {
        self.state().unsupported_pending.take()
    }
}

/// Commands opensrv-mysql 0.7 implements (query, init db, field list, the COM_STMT_* family,
/// quit, ping). For any other command its parser fails and it answers OK without doing
/// anything: a COM_CHANGE_USER would "succeed" and leave the session as the old user, a
/// COM_RESET_CONNECTION would leave a transaction open in a pooled connection. COM_STMT_RESET
/// (nothing to reset: long data is sent per execution) is the one harmless case.
fn opensrv_handles(command: u8) -> bool {
    matches!(command, 0x01..=0x04 | 0x0e | 0x16..=0x1a)
}

/// The ERR that replaces opensrv's silent OK to a command it does not implement.
fn unsupported_command_err(command: u8) -> Vec<u8> {
    let message = match command {
        0x11 => "COM_CHANGE_USER is not supported by server-shim; open a new connection as the other user".to_owned(),
        0x1f => "COM_RESET_CONNECTION is not supported by server-shim; open a new connection".to_owned(),
        other => format!("Unknown command {other:#04x}"),
    };
    // ER_UNKNOWN_COM_ERROR
    authplugin::packet::ErrPacket::new(1047, b"08S01", &message).to_bytes()
}

/// Deadlines applied by the adapter.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From accept until the login is complete.
    pub handshake: Duration,
    /// Longest wait for a client's next command (MySQL's `wait_timeout`).
    pub idle: Duration,
    /// Longest time a write may make no progress (MySQL's `net_write_timeout`).
    pub write_stall: Duration,
}

/// The read half: tees the first packet, enforces read deadlines, ends on shutdown.
pub struct AuthReader<R> {
    inner: R,
    shared: Arc<ConnShared>,
    timeouts: Timeouts,
    /// Bytes of the first packet while it is still arriving; `None` once done.
    tee: Option<Vec<u8>>,
    deadline: Pin<Box<Sleep>>,
    /// Whether the deadline is already the idle one.
    command_phase: bool,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    /// Follows client packet boundaries; finds the command byte of each client packet in
    /// the command phase.
    commands: CommandTracker,
    /// Bytes read from the client past the end of the packet the last read ended; handed
    /// out before reading again. See the module docs: opensrv must not get two packets in
    /// one read.
    held: Vec<u8>,
}

/// The MySQL command byte of COM_FIELD_LIST.
const COM_FIELD_LIST: u8 = 0x04;
/// A frame this long is continued by the next one (payloads of 16 MiB or more).
const MAX_FRAME_PAYLOAD: usize = 0xFF_FFFF;

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

impl<R> AuthReader<R> {
    /// Wraps `inner`; the handshake deadline starts now.
    pub fn new(
        inner: R,
        shared: Arc<ConnShared>,
        timeouts: Timeouts,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inner,
            shared,
            timeouts,
            tee: Some(Vec::new()),
            deadline: Box::pin(tokio::time::sleep(timeouts.handshake)),
            command_phase: false,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            commands: CommandTracker::default(),
            held: Vec::new(),
        }
    }

    /// Takes note of `bytes`, just handed to opensrv.
    fn client_bytes(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.tee.is_some() {
            self.tee_bytes(bytes);
        }
        let commands = self.commands.feed(bytes);
        if self.command_phase {
            self.deadline
                .as_mut()
                .reset(Instant::now() + self.timeouts.idle);
            for command in commands {
                let mut state = self.shared.state();
                if command == COM_FIELD_LIST {
                    state.field_list_pending = true;
                } else if !opensrv_handles(command) {
                    state.unsupported_pending = Some(command);
                }
            }
        }
    }

    fn tee_bytes(&mut self, bytes: &[u8]) {
        let Some(tee) = self.tee.as_mut() else {
            return;
        };
        if tee.len() + bytes.len() > MAX_HANDSHAKE_PACKET + HEADER_LEN {
            self.tee = None;
            self.shared.state().first_packet_refused = true;
            return;
        }
        tee.extend_from_slice(bytes);
        match parse_packet(tee, MAX_HANDSHAKE_PACKET) {
            Ok(None) => {}
            Ok(Some((packet, _))) => {
                self.shared.state().first_packet = Some(packet.payload);
                self.tee = None;
            }
            Err(_) => {
                self.shared.state().first_packet_refused = true;
                self.tee = None;
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for AuthReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.command_phase && this.shared.authenticated() {
            this.command_phase = true;
            this.deadline
                .as_mut()
                .reset(Instant::now() + this.timeouts.idle);
        }
        // A shutdown turns the wait for the next command (or for a login) into end-of-stream:
        // opensrv then ends the connection cleanly, after the statement that was running.
        if this.shutdown.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        if !this.held.is_empty() {
            let n = this.commands.packet_end(&this.held).min(buf.remaining());
            let bytes: Vec<u8> = this.held.drain(..n).collect();
            buf.put_slice(&bytes);
            this.client_bytes(&bytes);
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled().get(before..).unwrap_or_default();
                let keep = this.commands.packet_end(new);
                this.held
                    .extend_from_slice(new.get(keep..).unwrap_or_default());
                buf.set_filled(before + keep);
                this.client_bytes(buf.filled().get(before..).unwrap_or_default());
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    let what = if this.command_phase {
                        "client idle for longer than the idle timeout"
                    } else {
                        "login not completed within the handshake timeout"
                    };
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
                }
                Poll::Pending
            }
        }
    }
}

/// What the writer does with opensrv's bytes.
#[derive(Debug)]
enum WriteMode {
    /// Pass them on.
    Pass,
    /// A login was refused: collect the header of opensrv's ERR to learn its sequence id.
    Capture {
        header: Vec<u8>,
        replacement: Vec<u8>,
    },
    /// The replacement ERR is queued; drop everything opensrv writes.
    Discard,
    /// Collect opensrv's reply to COM_FIELD_LIST (one packet) to send a real EOF instead.
    FieldList { packet: Vec<u8> },
    /// Collect opensrv's OK to an unsupported command to send this ERR instead.
    Unsupported { packet: Vec<u8>, err: Vec<u8> },
}

/// The EOF packet payload that ends a COM_FIELD_LIST reply: no warnings, autocommit.
///
/// opensrv answers COM_FIELD_LIST (which the `mariadb` CLI sends for tab completion after
/// `USE`) with an 8-byte `0xFE` OK packet; libmariadb only takes a `0xFE` packet shorter
/// than 8 bytes as the end of the list, so the CLI would wait forever.
const FIELD_LIST_EOF: [u8; 5] = [0xFE, 0, 0, 0x02, 0];

/// The write half: replaces opensrv's login ERR, enforces the write-stall deadline.
pub struct AuthWriter<W> {
    inner: W,
    shared: Arc<ConnShared>,
    mode: WriteMode,
    /// Bytes of our own to send before anything else.
    out: Vec<u8>,
    stall_timeout: Duration,
    /// Running while the inner writer makes no progress.
    stall: Option<Pin<Box<Sleep>>>,
}

impl<W> AuthWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W, shared: Arc<ConnShared>, timeouts: Timeouts) -> Self {
        Self {
            inner,
            shared,
            mode: WriteMode::Pass,
            out: Vec::new(),
            stall_timeout: timeouts.write_stall,
            stall: None,
        }
    }
}

impl<W: AsyncWrite + Unpin> AuthWriter<W> {
    /// Turns a `Pending` from the inner writer into a timeout error once it lasted too long.
    fn pending_or_timeout<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.stall_timeout;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stall.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not read within the write timeout",
            )));
        }
        Poll::Pending
    }

    /// Sends the queued bytes of our own.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.out) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.stall = None;
                    self.out.drain(..n.min(self.out.len()));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.pending_or_timeout(cx),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for AuthWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        if matches!(this.mode, WriteMode::Pass)
            && let Some(replacement) = this.shared.take_deny()
        {
            this.mode = WriteMode::Capture {
                header: Vec::with_capacity(HEADER_LEN),
                replacement,
            };
        } else if matches!(this.mode, WriteMode::Pass) && this.shared.take_field_list() {
            this.mode = WriteMode::FieldList { packet: Vec::new() };
        } else if matches!(this.mode, WriteMode::Pass)
            && let Some(command) = this.shared.take_unsupported()
        {
            this.mode = WriteMode::Unsupported {
                packet: Vec::new(),
                err: unsupported_command_err(command),
            };
        }
        match &mut this.mode {
            WriteMode::Pass => match Pin::new(&mut this.inner).poll_write(cx, buf) {
                Poll::Ready(r) => {
                    this.stall = None;
                    Poll::Ready(r)
                }
                Poll::Pending => this.pending_or_timeout(cx),
            },
            WriteMode::Capture {
                header,
                replacement,
            } => {
                let want = HEADER_LEN.saturating_sub(header.len()).min(buf.len());
                header.extend_from_slice(buf.get(..want).unwrap_or_default());
                if let Some(&sequence_id) = header.get(3) {
                    authplugin::packet::write_packet(&mut this.out, sequence_id, replacement);
                    this.mode = WriteMode::Discard;
                }
                Poll::Ready(Ok(buf.len()))
            }
            WriteMode::Discard => Poll::Ready(Ok(buf.len())),
            WriteMode::FieldList { packet } => {
                packet.extend_from_slice(buf);
                if let Ok(Some((p, used))) = parse_packet(packet, MAX_HANDSHAKE_PACKET) {
                    let rest = packet.get(used..).unwrap_or_default().to_vec();
                    if p.payload.first() == Some(&0xFE) {
                        authplugin::packet::write_packet(
                            &mut this.out,
                            p.sequence_id,
                            &FIELD_LIST_EOF,
                        );
                    } else {
                        this.out
                            .extend_from_slice(packet.get(..used).unwrap_or_default());
                    }
                    this.out.extend_from_slice(&rest);
                    this.mode = WriteMode::Pass;
                } else if packet.len() > MAX_HANDSHAKE_PACKET {
                    // Not the reply we expected: pass it on untouched.
                    this.out.append(packet);
                    this.mode = WriteMode::Pass;
                }
                Poll::Ready(Ok(buf.len()))
            }
            WriteMode::Unsupported { packet, err } => {
                packet.extend_from_slice(buf);
                if let Ok(Some((p, used))) = parse_packet(packet, MAX_HANDSHAKE_PACKET) {
                    let rest = packet.get(used..).unwrap_or_default().to_vec();
                    authplugin::packet::write_packet(&mut this.out, p.sequence_id, err);
                    this.out.extend_from_slice(&rest);
                    this.mode = WriteMode::Pass;
                } else if packet.len() > MAX_HANDSHAKE_PACKET {
                    this.out.append(packet);
                    this.mode = WriteMode::Pass;
                }
                Poll::Ready(Ok(buf.len()))
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                this.stall = None;
                Poll::Ready(r)
            }
            Poll::Pending => this.pending_or_timeout(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    const T: Timeouts = Timeouts {
        handshake: Duration::from_secs(10),
        idle: Duration::from_secs(100),
        write_stall: Duration::from_secs(5),
    };

    fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        authplugin::packet::write_packet(&mut out, seq, payload);
        out
    }

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

    #[tokio::test(start_paused = true)]
    async fn times_out_when_login_does_not_arrive() {
        let (_client, server) = tokio::io::duplex(64);
        let shared = Arc::new(ConnShared::default());
        let mut reader = AuthReader::new(server, shared, T, CancellationToken::new());
        let mut b = [0u8; 1];
        let err = reader.read(&mut b).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn ends_stream_when_server_shuts_down() {
        let (_client, server) = tokio::io::duplex(64);
        let shared = Arc::new(ConnShared::default());
        let token = CancellationToken::new();
        let mut reader = AuthReader::new(server, shared, T, token.clone());
        token.cancel();
        let mut b = [0u8; 1];
        assert_eq!(reader.read(&mut b).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn replaces_login_err_keeping_its_sequence_id() {
        let (server, mut client) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server, shared.clone(), T);
        // Greeting passes untouched.
        writer.write_all(&packet(0, b"greeting")).await.unwrap();
        shared.deny_with(b"\xff\x15\x04#28000Access denied".to_vec());
        // opensrv's ERR 1698, written in two calls.
        let theirs = packet(2, b"\xff\xa2\x06#28000Authenticate failed, user: \"x\"");
        writer.write_all(&theirs[..2]).await.unwrap();
        writer.write_all(&theirs[2..]).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let mut want = packet(0, b"greeting");
        want.extend(packet(2, b"\xff\x15\x04#28000Access denied"));
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn passes_writes_through_when_login_succeeds() {
        let (server, mut client) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server, shared, T);
        let ok = packet(2, b"\x00\x00\x00\x02\x00\x00\x00");
        writer.write_all(&ok).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, ok);
    }

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

    #[test]
    fn knows_which_commands_opensrv_implements() {
        for implemented in [0x01, 0x02, 0x03, 0x04, 0x0e, 0x16, 0x17, 0x18, 0x19, 0x1a] {
            assert!(opensrv_handles(implemented), "{implemented:#x}");
        }
        for missing in [0x00, 0x09, 0x0a, 0x11, 0x12, 0x1f, 0xff] {
            assert!(!opensrv_handles(missing), "{missing:#x}");
        }
        let err = authplugin::packet::ErrPacket::decode(&unsupported_command_err(0x11)).unwrap();
        assert_eq!((err.error_code, err.sql_state), (1047, Some(*b"08S01")));
        assert!(String::from_utf8_lossy(&err.error_message).contains("COM_CHANGE_USER"));
    }

    #[tokio::test]
    async fn replaces_field_list_reply_with_short_eof() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (server_w, mut client_r) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        shared.mark_authenticated();
        let mut reader = AuthReader::new(server, shared.clone(), T, CancellationToken::new());
        let mut writer = AuthWriter::new(server_w, shared, T);
        let cmd = packet(0, b"\x04t\0");
        client.write_all(&cmd).await.unwrap();
        let mut got = vec![0u8; cmd.len()];
        reader.read_exact(&mut got).await.unwrap();
        writer
            .write_all(&packet(1, &[0xFE, 0, 0, 0, 0, 0, 0, 0]))
            .await
            .unwrap();
        writer.flush().await.unwrap();
        // The next reply passes untouched.
        writer.write_all(&packet(1, b"\x00\x00\x00")).await.unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        let mut out = Vec::new();
        client_r.read_to_end(&mut out).await.unwrap();
        let mut want = packet(1, &FIELD_LIST_EOF);
        want.extend(packet(1, b"\x00\x00\x00"));
        assert_eq!(out, want);
    }

    /// COM_STMT_CLOSE (no reply) and the next command, sent by the client in one write (as
    /// mysql-connector-python does on `cursor.close()` + `cursor()`'s ping), must reach
    /// opensrv in separate reads: see the module docs.
    #[tokio::test]
    async fn hands_out_one_client_packet_per_read() {
        let (mut client, server) = tokio::io::duplex(1024);
        let shared = Arc::new(ConnShared::default());
        shared.mark_authenticated();
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
                self.0.mark_authenticated();
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

    #[tokio::test(start_paused = true)]
    async fn times_out_when_client_stops_reading() {
        let (server, _client) = tokio::io::duplex(8);
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(server, shared, T);
        let err = writer.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
