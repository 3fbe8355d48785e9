//! Readiness: a compute is ready when a MySQL greeting arrives on its address. Not a fixed
//! sleep, and not just an open port: the greeting proves the server accepts connections.

use std::time::Duration;

use authplugin::DecodeError;
use authplugin::packet::err::ERR_HEADER;
use authplugin::packet::{ErrPacket, HandshakeV10, Packet, write_packet};
use tokio::net::TcpStream;

use crate::compute_conn::{self, ComputeTarget, OnBehalfOf, OpenedConnection};
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream, ReadError};

/// How long one probe may take once connected.
pub const PROBE_READ_TIMEOUT: Duration = Duration::from_millis(500);

/// Why a compute is not (yet) ready.
#[derive(Debug)]
pub enum ProbeError {
    /// The connect did not finish within [`PROBE_READ_TIMEOUT`].
    ConnectTimedOut,
    /// The connect failed (nothing listens yet, most often).
    Connect(std::io::Error),
    /// No whole greeting arrived.
    Read(ReadError),
    /// The compute sent an error in place of its greeting (MariaDB: 1130, no account for the
    /// relay's host; 1040, too many connections).
    Refused(ErrPacket),
    /// What arrived is not a MySQL greeting.
    NotAGreeting(DecodeError),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ConnectTimedOut => f.write_str("connect timed out"),
            Self::Connect(e) => e.fmt(f),
            Self::Read(ReadError::TimedOut) => f.write_str("no greeting in time"),
            Self::Read(e) => e.fmt(f),
            Self::Refused(e) => write!(
                f,
                "the compute answered with error {} in place of its greeting: {}",
                e.error_code,
                String::from_utf8_lossy(&e.error_message)
            ),
            Self::NotAGreeting(e) => write!(f, "not a MySQL greeting: {e}"),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::ConnectTimedOut | Self::Refused(_) => None,
            Self::Connect(e) => Some(e),
            Self::Read(e) => Some(e),
            Self::NotAGreeting(e) => Some(e),
        }
    }
}

/// Connects once and reads the greeting. `Ok(greeting)` means ready.
///
/// # Errors
/// [`ProbeError`]: why the compute is not (yet) ready.
pub async fn probe(target: ComputeTarget) -> Result<HandshakeV10, ProbeError> {
    probe_within(target, PROBE_READ_TIMEOUT).await
}

/// [`probe`] with its own bound on the connect and on the greeting, for a compute that is
/// running and may just be busy.
///
/// # Errors
/// [`ProbeError`]: why the compute did not greet.
pub async fn probe_within(
    target: ComputeTarget,
    timeout: Duration,
) -> Result<HandshakeV10, ProbeError> {
    let stream = connect(target, timeout).await?;
    read_greeting(stream, timeout)
        .await
        .map(|(greeting, _)| greeting)
}

/// A probe's first half: the connect, within `timeout`.
///
/// # Errors
/// [`ProbeError::ConnectTimedOut`], [`ProbeError::Connect`].
pub async fn connect(target: ComputeTarget, timeout: Duration) -> Result<TcpStream, ProbeError> {
    tokio::time::timeout(timeout, compute_conn::connect(target, OnBehalfOf::Relay))
        .await
        .map_err(|_| ProbeError::ConnectTimedOut)?
        .map_err(ProbeError::Connect)
}

/// A probe's second half: the greeting, within `timeout`. The connection comes back with the
/// greeting's bytes still to be read, for a login to take over ([`compute_conn::Handover`]).
///
/// # Errors
/// [`ProbeError::Read`], [`ProbeError::NotAGreeting`].
pub async fn read_greeting(
    stream: TcpStream,
    timeout: Duration,
) -> Result<(HandshakeV10, OpenedConnection), ProbeError> {
    let mut ps = PacketStream::new(stream, MAX_LOGIN_PACKET_LEN);
    let (packet, greeting) = greeting_packet(&mut ps, timeout).await?;
    let (stream, rest) = ps.into_parts();
    let mut read_ahead = Vec::with_capacity(4 + packet.payload.len() + rest.len());
    write_packet(&mut read_ahead, packet.sequence_id, &packet.payload);
    read_ahead.extend_from_slice(&rest);
    Ok((greeting, OpenedConnection { stream, read_ahead }))
}

/// The greeting on `ps`, within `timeout`: the packet as it came, and what it says.
///
/// # Errors
/// [`ProbeError::Read`], [`ProbeError::NotAGreeting`].
pub async fn greeting_packet(
    ps: &mut PacketStream<TcpStream>,
    timeout: Duration,
) -> Result<(Packet, HandshakeV10), ProbeError> {
    let packet = ps
        .read_packet_within(timeout)
        .await
        .map_err(ProbeError::Read)?;
    if packet.payload.first() == Some(&ERR_HEADER) {
        if let Ok(refusal) = ErrPacket::decode(&packet.payload) {
            return Err(ProbeError::Refused(refusal));
        }
    }
    let greeting = HandshakeV10::decode(&packet.payload).map_err(ProbeError::NotAGreeting)?;
    Ok((packet, greeting))
}

/// Probes spaced 1 ms apart for this many attempts: a server-shim greets about 1.5 ms after
/// it is spawned, and every millisecond of polling lag is a millisecond of cold start.
const FAST_ATTEMPTS: u32 = 20;

/// The wait before probe attempt `n` (0-based): 1 ms for the first [`FAST_ATTEMPTS`] (a
/// refused connect on loopback costs microseconds), then doubling from 2 ms and capped at
/// 50 ms so a slow compute (MariaDB, a container) costs little CPU.
#[must_use]
pub fn backoff(attempt: u32) -> Duration {
    match attempt.checked_sub(FAST_ATTEMPTS) {
        None => Duration::from_millis(1),
        Some(n) => Duration::from_millis((2u64 << n.min(5)).min(50)),
    }
}

/// Probes until the compute greets or `deadline` passes; `true` once it greeted.
pub async fn wait_ready(target: ComputeTarget, deadline: tokio::time::Instant) -> bool {
    let mut attempt = 0;
    loop {
        if let Ok(Ok(_)) = tokio::time::timeout_at(deadline, probe(target)).await {
            return true;
        }
        if tokio::time::Instant::now() + backoff(attempt) >= deadline {
            return false;
        }
        tokio::time::sleep(backoff(attempt)).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_then_caps() {
        let waits: Vec<u64> = (0..28).map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(waits[..20], [1; 20]);
        assert_eq!(waits[20..], [2, 4, 8, 16, 32, 50, 50, 50]);
    }

    /// A probe's connection keeps the greeting for the login that takes it over: the login
    /// reads the very packet, then whatever the compute sent after it, in order.
    #[tokio::test]
    async fn a_probes_connection_reads_as_if_nobody_had_read_from_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scramble = authplugin::Scramble::generate_timed(&mut rand::rngs::OsRng, 1);
        let greeting = crate::profile::ComputeProfile::server_shim_default().greeting(7, &scramble);
        let payload = greeting.to_bytes();
        let sent = payload.clone();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let mut ps = PacketStream::new(s, 1 << 20);
            // The greeting and the next packet in one write: both arrive in one read.
            let mut both = Vec::new();
            write_packet(&mut both, 0, &sent);
            write_packet(&mut both, 1, b"after");
            tokio::io::AsyncWriteExt::write_all(ps.stream_mut(), &both)
                .await
                .unwrap();
            // The login's answer comes back on the same connection.
            ps.read_packet().await.unwrap()
        });
        let target = ComputeTarget {
            addr,
            proxy_protocol: false,
        };
        let stream = connect(target, PROBE_READ_TIMEOUT).await.unwrap();
        let (probed, opened) = read_greeting(stream, PROBE_READ_TIMEOUT).await.unwrap();
        assert_eq!(probed.scramble(), Some(scramble.clone()));

        let mut login = PacketStream::new(opened.stream, MAX_LOGIN_PACKET_LEN)
            .with_read_ahead(opened.read_ahead);
        let first = login.read_packet().await.unwrap();
        assert_eq!((first.sequence_id, first.payload), (0, payload));
        let second = login.read_packet().await.unwrap();
        assert_eq!(
            (second.sequence_id, &second.payload[..]),
            (1, &b"after"[..])
        );
        login.write_packet(2, b"answer").await.unwrap();
        let answer = server.await.unwrap();
        assert_eq!(
            (answer.sequence_id, &answer.payload[..]),
            (2, &b"answer"[..])
        );
    }

    /// A compute that sends `bytes` to its first connection, then keeps it open: where to
    /// probe it, and its task.
    async fn sends(bytes: Vec<u8>) -> (ComputeTarget, tokio::task::JoinHandle<TcpStream>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut s, &bytes)
                .await
                .unwrap();
            s
        });
        let target = ComputeTarget {
            addr,
            proxy_protocol: false,
        };
        (target, server)
    }

    #[tokio::test]
    async fn probe_refuses_a_port_that_does_not_greet() {
        let (target, server) = sends(b"\x05\x00\x00\x00hello".to_vec()).await;
        let err = probe(target).await.unwrap_err();
        assert!(matches!(err, ProbeError::NotAGreeting(_)), "{err}");
        drop(server.await);
    }

    /// MariaDB's answer to a host without an account, byte for byte: an ERR packet without a
    /// SQLSTATE in place of the greeting. The probe says what the compute said.
    #[tokio::test]
    async fn probe_reports_an_error_sent_in_place_of_the_greeting() {
        let message = b"Host '10.202.1.1' is not allowed to connect to this MariaDB server";
        let mut packet = vec![0xff, 0x6a, 0x04];
        packet.extend_from_slice(message);
        let mut framed = Vec::new();
        write_packet(&mut framed, 0, &packet);
        let (target, server) = sends(framed).await;
        let err = probe(target).await.unwrap_err();
        assert!(
            matches!(&err, ProbeError::Refused(e) if e.error_code == 1130),
            "{err}"
        );
        assert!(err.to_string().contains("error 1130") && err.to_string().contains("not allowed"));
        drop(server.await);
    }
}
