//! P4 and P5, and what the two ways of completing a login (dual, switch) share: connect to
//! the woken compute (retrying only while it cannot listen yet), read its greeting and
//! scramble B, check that it supports what the client negotiated, and read its answers with a
//! deadline. The compute is reached through a [`ComputeConnector`], so tests drive these
//! phases with a scripted compute on an in-memory stream.

use std::time::Duration;

use authplugin::Scramble;
use authplugin::packet::capabilities::{
    CLIENT_CONNECT_ATTRS, CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH,
    CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    CLIENT_SSL,
};
use authplugin::packet::{HandshakeResponse41, HandshakeV10, Packet, SslRequest};
use zeroize::Zeroizing;

use super::login::ClientLogin;
use super::outcome::{ComputeError, ComputeProtocolError, ComputeStep};
use crate::compute_conn::ComputeConnector;
use crate::control::readiness;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream, ReadError};
use crate::profile::{FORMAT_CHANGING, NEVER_ADVERTISED, RELAYED_MARIADB_CAPABILITIES};

/// A compute connection that has greeted (P5 done).
#[derive(Debug)]
pub struct GreetedCompute<S> {
    /// The connection.
    pub stream: PacketStream<S>,
    /// The compute's greeting.
    pub greeting: HandshakeV10,
    /// The greeting's scramble B.
    pub scramble_b: Scramble,
    /// The relay started TLS after the greeting (`compute_tls`).
    pub tls: bool,
}

/// `compute_tls`: after the greeting, sends an SSLRequest (with the flags of the login to
/// come) and runs the TLS handshake within `timeout`; the login then follows inside TLS,
/// numbered one higher on the wire. A compute that offers no TLS is refused, never used in
/// plaintext.
///
/// # Errors
/// [`ComputeError::Tls`] (no TLS offered, a failed handshake), [`ComputeError::Timeout`],
/// [`ComputeError::Lost`].
pub async fn start_tls<C: ComputeConnector>(
    connector: &C,
    compute: GreetedCompute<C::Stream>,
    login: &ClientLogin,
    timeout: Duration,
) -> Result<GreetedCompute<C::Stream>, ComputeError> {
    let GreetedCompute {
        mut stream,
        greeting,
        scramble_b,
        ..
    } = compute;
    if greeting.capability_flags & CLIENT_SSL == 0 {
        return Err(ComputeError::Tls(std::io::Error::other(
            "the compute's greeting offers no TLS",
        )));
    }
    let request = SslRequest {
        client_flag: client_flag(login, &greeting) | CLIENT_SSL,
        max_packet_size: login.response.max_packet_size,
        character_set: login.response.character_set,
        reserved: filler(login, &greeting),
    };
    let mut payload = Vec::with_capacity(32);
    request.encode(&mut payload);
    write(&mut stream, 1, &payload).await?;
    let (plain, rest) = stream.into_parts();
    if !rest.is_empty() {
        return Err(ComputeProtocolError::Unexpected(rest.first().copied().unwrap_or(0)).into());
    }
    let tls = tokio::time::timeout(timeout, connector.start_tls(plain))
        .await
        .map_err(|_| ComputeError::Timeout(ComputeStep::Login))?
        .map_err(ComputeError::Tls)?;
    Ok(GreetedCompute {
        stream: PacketStream::new(tls, MAX_LOGIN_PACKET_LEN)
            .with_write_timeout(timeout)
            .with_sequence_offset(1),
        greeting,
        scramble_b,
        tls: true,
    })
}

/// Who opened a login's connection to the compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenedBy {
    /// The wake, which handed it over ([`crate::compute_conn::Handover`]).
    Wake,
    /// The login itself.
    Login,
}

impl OpenedBy {
    /// The `opened_by` label of `relay_compute_connections_total`.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Wake => "wake",
            Self::Login => "login",
        }
    }
}

/// P4: takes the connection the wake opened, if the connector has one, or connects to the
/// compute within `timeout`, retrying with backoff while the connect error says the compute
/// is not listening yet (it may still be starting after the wake).
///
/// # Errors
/// [`ComputeError::Connect`] for an error a retry cannot fix or the last one before the
/// deadline, [`ComputeError::Timeout`] when a single attempt outlives it.
pub async fn connect<C: ComputeConnector>(
    connector: &C,
    timeout: Duration,
) -> Result<(PacketStream<C::Stream>, OpenedBy), ComputeError> {
    if let Some((stream, read_ahead)) = connector.take_opened() {
        let stream = PacketStream::new(stream, MAX_LOGIN_PACKET_LEN)
            .with_write_timeout(timeout)
            .with_read_ahead(read_ahead);
        return Ok((stream, OpenedBy::Wake));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut attempt = 0;
    loop {
        let error = match tokio::time::timeout_at(deadline, connector.connect()).await {
            Ok(Ok(s)) => {
                let stream = PacketStream::new(s, MAX_LOGIN_PACKET_LEN).with_write_timeout(timeout);
                return Ok((stream, OpenedBy::Login));
            }
            Ok(Err(e)) => ComputeError::Connect(e),
            Err(_) => return Err(ComputeError::Timeout(ComputeStep::Connect)),
        };
        let pause = readiness::backoff(attempt);
        if !error.retryable() || tokio::time::Instant::now() + pause >= deadline {
            return Err(error);
        }
        tracing::debug!(error = %error, attempt, "compute connect failed; retrying");
        tokio::time::sleep(pause).await;
        attempt += 1;
    }
}

/// One connect attempt within `within`, none on failure: a login opening its connection to
/// a frozen compute while the compute thaws (the kernel completes the handshake for it).
/// Writes on it are bounded by `write_timeout`.
pub async fn connect_once<C: ComputeConnector>(
    connector: &C,
    within: Duration,
    write_timeout: Duration,
) -> Option<PacketStream<C::Stream>> {
    let stream = tokio::time::timeout(within, connector.connect())
        .await
        .ok()?
        .ok()?;
    Some(PacketStream::new(stream, MAX_LOGIN_PACKET_LEN).with_write_timeout(write_timeout))
}

/// P5: reads the compute's greeting and its scramble B. The caller learns the compute's
/// profile from [`GreetedCompute::greeting`] before anything else can fail.
///
/// # Errors
/// [`ComputeError`]: timeout, lost connection, or a greeting that is not HandshakeV10 with a
/// 20-byte scramble.
pub async fn read_greeting<S>(
    mut stream: PacketStream<S>,
    timeout: Duration,
) -> Result<GreetedCompute<S>, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let packet = read(&mut stream, timeout, ComputeStep::Greeting).await?;
    let greeting =
        HandshakeV10::decode(&packet.payload).map_err(ComputeProtocolError::BadGreeting)?;
    let scramble_b = greeting
        .scramble()
        .ok_or(ComputeProtocolError::NoScramble)?;
    Ok(GreetedCompute {
        stream,
        greeting,
        scramble_b,
        tls: false,
    })
}

/// Refuses a login whose session would use capabilities the compute does not have: they
/// change the format of later packets, so the relay could not forward them. It happens when
/// the client was greeted with a stale profile.
///
/// # Errors
/// [`ComputeError::CapabilityMismatch`] with the missing bits.
pub fn check_capabilities(
    login: &ClientLogin,
    greeting: &HandshakeV10,
) -> Result<(), ComputeError> {
    let missing = login.effective_flag & FORMAT_CHANGING & !greeting.capability_flags;
    let asked = requested_mariadb_capabilities(login);
    let missing_mariadb = asked & !greeting.mariadb_extended_capabilities().unwrap_or(0);
    if missing == 0 && missing_mariadb == 0 {
        Ok(())
    } else {
        Err(ComputeError::CapabilityMismatch {
            flags: missing,
            mariadb: missing_mariadb,
        })
    }
}

/// The MariaDB extended capabilities the client asked the relay for, of those the relay
/// offers and carries ([`RELAYED_MARIADB_CAPABILITIES`]).
fn requested_mariadb_capabilities(login: &ClientLogin) -> u32 {
    login.response.mariadb_extended_capabilities().unwrap_or(0) & RELAYED_MARIADB_CAPABILITIES
}

/// The MariaDB extended capabilities of the relay's login to the compute, and so of the
/// session: what the client asked for that the compute offers (after [`check_capabilities`],
/// all it asked for).
#[must_use]
pub fn mariadb_capabilities(login: &ClientLogin, greeting: &HandshakeV10) -> u32 {
    requested_mariadb_capabilities(login) & greeting.mariadb_extended_capabilities().unwrap_or(0)
}

/// The filler of the relay's login to the compute: zeros, and MariaDB's extended capabilities
/// in the last four bytes.
fn filler(login: &ClientLogin, greeting: &HandshakeV10) -> [u8; 23] {
    let mut reserved = [0; 23];
    if let Some(slot) = reserved.get_mut(19..) {
        slot.copy_from_slice(&mariadb_capabilities(login, greeting).to_le_bytes());
    }
    reserved
}

/// The HandshakeResponse41 the relay sends the compute for `login`: the client's identity and
/// session settings, limited to what the compute offers, with `plugin` and `auth_response`.
/// `database` is what the compute will see (the MAC of a dual login binds it).
#[must_use]
pub fn response_for<S>(
    login: &ClientLogin,
    compute: &GreetedCompute<S>,
    plugin: &str,
    auth_response: Zeroizing<Vec<u8>>,
) -> HandshakeResponse41 {
    // Inside TLS the login repeats the SSLRequest's CLIENT_SSL, as a MySQL client's does.
    let tls = if compute.tls { CLIENT_SSL } else { 0 };
    // Connect attributes always: they carry the client's connection id (server-shim reads
    // them whether it offered them or not; MariaDB offers them).
    let client_flag = client_flag(login, &compute.greeting) | tls | CLIENT_CONNECT_ATTRS;
    let client = &login.response;
    let mut connect_attrs: Vec<(Vec<u8>, Vec<u8>)> = client
        .connect_attrs
        .iter()
        .flatten()
        .filter(|(key, _)| key.as_slice() != CONNECTION_ID_ATTR.as_bytes())
        .cloned()
        .collect();
    connect_attrs.push((
        CONNECTION_ID_ATTR.as_bytes().to_vec(),
        login.connection_id.to_string().into_bytes(),
    ));
    HandshakeResponse41 {
        client_flag,
        max_packet_size: client.max_packet_size,
        character_set: client.character_set,
        reserved: filler(login, &compute.greeting),
        username: client.username.clone(),
        auth_response,
        database: (client_flag & CLIENT_CONNECT_WITH_DB != 0)
            .then(|| client.database.clone().unwrap_or_default()),
        client_plugin_name: Some(plugin.as_bytes().to_vec()),
        connect_attrs: Some(connect_attrs),
        zstd_compression_level: None,
    }
}

/// The client's own attribute of this name is dropped.
pub use authplugin::payload::CONNECTION_ID_ATTR;

/// The capability flags of the relay's login to the compute: the session's flags the compute
/// also has, minus those the relay never negotiates, plus what every relayed login needs.
#[must_use]
pub fn client_flag(login: &ClientLogin, greeting: &HandshakeV10) -> u32 {
    let server = greeting.capability_flags;
    (login.effective_flag & server & !NEVER_ADVERTISED & !CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
        | CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | (server & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
}

/// Reads one packet from the compute within `timeout`.
///
/// # Errors
/// [`ComputeError`] for a timeout (in `step`), a lost connection or bad framing.
pub async fn read<S>(
    compute: &mut PacketStream<S>,
    timeout: Duration,
    step: ComputeStep,
) -> Result<Packet, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    compute
        .read_packet_within(timeout)
        .await
        .map_err(|e| match e {
            ReadError::TimedOut => ComputeError::Timeout(step),
            ReadError::Frame(e) => ComputeProtocolError::Framing(e).into(),
            ReadError::Io(e) => ComputeError::Lost(e),
            ReadError::Closed { partial } => ComputeError::Lost(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                if partial {
                    "compute closed the connection mid-packet"
                } else {
                    "compute closed the connection"
                },
            )),
        })
}

/// Writes one packet to the compute.
///
/// # Errors
/// [`ComputeError::Timeout`] when the compute does not take the bytes within the stream's
/// write timeout, else [`ComputeError::Lost`].
pub async fn write<S>(
    compute: &mut PacketStream<S>,
    sequence_id: u8,
    payload: &[u8],
) -> Result<(), ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    compute
        .write_packet(sequence_id, payload)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => ComputeError::Timeout(ComputeStep::Login),
            _ => ComputeError::Lost(e),
        })
}
