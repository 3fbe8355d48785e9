//! The one place the relay reads and writes MySQL packets on a socket (CONTRIBUTING.md, *One owner for each kind of I/O*). The
//! phases call [`PacketStream`]; the byte pump takes the socket back (with any bytes already
//! buffered) once the login is done.

use std::io;
use std::time::Duration;

use authplugin::packet::{FrameError, Packet, parse_packet, write_packet};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use zeroize::Zeroize as _;

/// The least spare room a read is given (and a new stream's buffer): a login's packets fit.
const MIN_READ: usize = 512;

/// Default bound on writing one packet.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest connection-phase packet the relay accepts. Logins are a few hundred bytes; the
/// limit only has to leave room for generous connect attributes.
pub const MAX_LOGIN_PACKET_LEN: usize = 64 * 1024;

/// Why a packet could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The socket failed.
    Io(io::Error),
    /// The peer closed the connection. `partial` is whether it left half a packet behind.
    Closed {
        /// Bytes of an incomplete packet were buffered.
        partial: bool,
    },
    /// The framing is invalid (too large, continuation out of sequence).
    Frame(FrameError),
    /// No whole packet arrived within the caller's deadline.
    TimedOut,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "read failed: {e}"),
            Self::Closed { partial: false } => f.write_str("peer closed the connection"),
            Self::Closed { partial: true } => f.write_str("peer closed the connection mid-packet"),
            Self::Frame(e) => write!(f, "bad framing: {e}"),
            Self::TimedOut => f.write_str("no packet within the deadline"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Frame(e) => Some(e),
            Self::Closed { .. } | Self::TimedOut => None,
        }
    }
}

/// A socket with a packet read buffer.
#[derive(Debug)]
pub struct PacketStream<S> {
    stream: S,
    buf: Vec<u8>,
    max_payload: usize,
    /// The sequence id the next packet of this conversation carries: one past the last
    /// packet read or written. An ERR sent at any point of the login must carry it.
    next_sequence_id: u8,
    /// Bound on each write: a peer that stops reading cannot hold the task.
    write_timeout: Duration,
    /// Added to every sequence id on the wire (subtracted on reads): a compute leg that sent
    /// an SSLRequest first numbers its login one higher, and the login code keeps numbering
    /// as if it had not.
    sequence_offset: u8,
}

impl<S: AsyncRead + AsyncWrite + Unpin> PacketStream<S> {
    /// Wraps a socket; packets bigger than `max_payload` are refused.
    pub fn new(stream: S, max_payload: usize) -> Self {
        Self {
            stream,
            buf: Vec::with_capacity(MIN_READ),
            max_payload,
            next_sequence_id: 0,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            sequence_offset: 0,
        }
    }

    /// Starts with `bytes` already received from the socket (a connection someone else
    /// opened and read from: [`crate::compute_conn::Handover`]); they are read first.
    #[must_use]
    pub fn with_read_ahead(mut self, bytes: Vec<u8>) -> Self {
        self.buf = bytes;
        self
    }

    /// Numbers packets on the wire `offset` higher than the caller does (see the field).
    #[must_use]
    pub const fn with_sequence_offset(mut self, offset: u8) -> Self {
        self.sequence_offset = offset;
        self
    }

    /// Sets the bound on each write (default [`DEFAULT_WRITE_TIMEOUT`]).
    #[must_use]
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// The sequence id the next packet of the conversation carries (one past the last packet
    /// read or written).
    pub const fn next_sequence_id(&self) -> u8 {
        self.next_sequence_id
    }

    /// The bytes received but not yet returned as a packet. Classification looks at these to
    /// tell HTTP or TLS from MySQL.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Reads one whole packet. Callers bound it with a deadline.
    ///
    /// # Errors
    /// [`ReadError`]; after one, the stream should be closed.
    pub async fn read_packet(&mut self) -> Result<Packet, ReadError> {
        loop {
            if let Some((packet, used)) =
                parse_packet(&self.buf, self.max_payload).map_err(ReadError::Frame)?
            {
                // Wipe what is consumed: login packets carry answers.
                self.buf.get_mut(..used).map(<[u8]>::zeroize);
                self.buf.drain(..used);
                let mut packet = packet;
                packet.sequence_id = packet.sequence_id.wrapping_sub(self.sequence_offset);
                packet.last_sequence_id =
                    packet.last_sequence_id.wrapping_sub(self.sequence_offset);
                self.next_sequence_id = packet.last_sequence_id.wrapping_add(1);
                return Ok(packet);
            }
            // Straight into the buffer's spare room: a chunk on the stack would be part of
            // every future that awaits a packet (4 KB a login kept for as long as its client
            // took to answer: bench/memory).
            self.make_room();
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(ReadError::Io)?;
            if n == 0 {
                return Err(ReadError::Closed {
                    partial: !self.buf.is_empty(),
                });
            }
        }
    }

    /// At least [`MIN_READ`] bytes of spare room in the buffer, doubling it when it grows; the
    /// old allocation is wiped first (login packets carry answers), which a `Vec`'s own
    /// growth would not do.
    fn make_room(&mut self) {
        if self.buf.capacity() - self.buf.len() >= MIN_READ {
            return;
        }
        let wanted = (self.buf.len() + MIN_READ).max(self.buf.capacity() * 2);
        let mut bigger = Vec::with_capacity(wanted);
        bigger.extend_from_slice(&self.buf);
        self.buf.zeroize();
        self.buf = bigger;
    }

    /// Reads one whole packet within `timeout`.
    ///
    /// # Errors
    /// [`ReadError`], [`ReadError::TimedOut`] when the deadline passes first.
    pub async fn read_packet_within(&mut self, timeout: Duration) -> Result<Packet, ReadError> {
        tokio::time::timeout(timeout, self.read_packet())
            .await
            .unwrap_or(Err(ReadError::TimedOut))
    }

    /// Writes one packet and flushes it.
    ///
    /// # Errors
    /// The socket's error, or `TimedOut` when the peer does not take the bytes in time.
    pub async fn write_packet(&mut self, sequence_id: u8, payload: &[u8]) -> io::Result<()> {
        let mut out = Vec::with_capacity(payload.len() + 4);
        write_packet(
            &mut out,
            sequence_id.wrapping_add(self.sequence_offset),
            payload,
        );
        let write = async {
            self.stream.write_all(&out).await?;
            self.stream.flush().await
        };
        let result = tokio::time::timeout(self.write_timeout, write)
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "peer stopped reading",
                ))
            });
        out.zeroize();
        self.next_sequence_id = sequence_id.wrapping_add(1);
        result
    }

    /// The stream.
    pub const fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// Takes the bytes received past the last packet (after an SSLRequest: the start of the
    /// TLS handshake, which belongs to the TLS layer, not to the packet reader).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Gives the socket back with the bytes read past the last packet, which belong to the
    /// next phase (the byte pump forwards them first).
    pub fn into_parts(self) -> (S, Vec<u8>) {
        (self.stream, self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_packets_split_across_writes_and_keeps_leftover() {
        let (mut a, b) = tokio::io::duplex(64);
        let mut ps = PacketStream::new(b, 1024);
        let writer = tokio::spawn(async move {
            a.write_all(&[3, 0, 0]).await.unwrap();
            a.write_all(&[1, b'a', b'b']).await.unwrap();
            a.write_all(&[b'c', 9, 9]).await.unwrap();
            a
        });
        let p = ps.read_packet().await.unwrap();
        assert_eq!((p.sequence_id, p.payload.as_slice()), (1, &b"abc"[..]));
        let _a = writer.await.unwrap();
        let (_, rest) = ps.into_parts();
        assert_eq!(rest, [9, 9]);
    }

    #[tokio::test]
    async fn reports_close_mid_packet() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(&[10, 0, 0, 1, 1, 2]).await.unwrap();
        drop(a);
        let mut ps = PacketStream::new(b, 1024);
        assert!(matches!(
            ps.read_packet().await,
            Err(ReadError::Closed { partial: true })
        ));
    }

    #[tokio::test]
    async fn refuses_oversized_packet_from_header() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(&[0xFF, 0xFF, 0x0F, 1]).await.unwrap();
        let mut ps = PacketStream::new(b, 1024);
        assert!(matches!(
            ps.read_packet().await,
            Err(ReadError::Frame(FrameError::TooLarge { .. }))
        ));
    }
}
