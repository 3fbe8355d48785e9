//! P1, P2 and classification: the relay greets the client with scramble A and reads its
//! login. Only a well-formed HandshakeResponse41 with a user name, answered with a plugin the
//! compute can check against scramble A, comes out of here; everything else is a
//! [`Classification`] and never wakes the instance.

use std::sync::Arc;
use std::time::Duration;

use authplugin::packet::FrameError;
use authplugin::packet::capabilities::{CLIENT_COMPRESS, CLIENT_PLUGIN_AUTH, CLIENT_SSL};
use authplugin::packet::{AuthSwitchRequest, HandshakeResponse41, HandshakeV10, SslRequest};
use authplugin::{AuthPlugin, Scramble};
use tokio::io::{AsyncRead, AsyncWrite};
use zeroize::{Zeroize as _, Zeroizing};

use rustls::ServerConfig;

use super::outcome::Classification;
use crate::packet_io::{PacketStream, ReadError};
use crate::tls::{self, ClientStream, TlsFailure};

/// A client login the perceptron will relay.
#[derive(Debug)]
pub struct ClientLogin {
    /// The client's HandshakeResponse41 (its `auth_response` may be superseded by
    /// [`ClientLogin::answer`] after a switch).
    pub response: HandshakeResponse41,
    /// The plugin `answer` was made with.
    pub plugin: AuthPlugin,
    /// The client's answer to scramble A. Wiped when dropped.
    pub answer: Zeroizing<Vec<u8>>,
    /// The sequence id of the client's last packet; the relay's reply is this plus one.
    pub last_sequence_id: u8,
    /// The client's flags that the relay's greeting offered: what the session really uses.
    /// (Clients set flags the server lacks; only the intersection counts.)
    pub effective_flag: u32,
    /// The login came inside TLS the relay terminated.
    pub tls: bool,
    /// The connection id the relay greeted the client with, which the compute is asked to
    /// take as the session's (`CONNECTION_ID()`, `KILL`; `compute_leg::response_for`).
    pub connection_id: u32,
}

/// Sends the greeting (P1) and reads the login (P2) within `timeout` (one deadline for the
/// whole exchange, TLS handshake and switch included, so a slow client cannot stretch it).
/// With `tls`, a client that sends an SSLRequest gets a TLS handshake and sends its login
/// inside it; the greeting must then offer `CLIENT_SSL`.
///
/// # Errors
/// The [`Classification`] of whatever the peer did instead of logging in. An ERR for it
/// carries the stream's [`PacketStream::next_sequence_id`].
pub async fn greet_and_read_login<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketStream<ClientStream<S>>,
    greeting: &HandshakeV10,
    scramble_a: &Scramble,
    timeout: Duration,
    answers: Answers,
    tls: Option<Arc<ServerConfig>>,
) -> Result<ClientLogin, Classification> {
    let mut stage = Stage::Plain;
    match tokio::time::timeout(
        timeout,
        exchange(client, greeting, scramble_a, answers, tls, &mut stage),
    )
    .await
    {
        Ok(result) => result,
        Err(_) if stage == Stage::TlsHandshake => Err(Classification::Tls(TlsFailure::TimedOut)),
        Err(_) => Err(Classification::HandshakeTimeout),
    }
}

/// Where the login exchange is, so a deadline that runs out can say in which step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Plain,
    TlsHandshake,
    InTls,
}

/// What the client's first packet after the greeting asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstPacket {
    /// An SSLRequest the relay answers with a TLS handshake.
    StartTls,
    /// Anything else: read as a HandshakeResponse41.
    Login,
}

/// Decides what the client's first packet (`sequence_id`, `payload`) is, for a greeting that
/// offered TLS (`tls_offered`) or not. Pure: bytes in, decision out.
///
/// # Errors
/// [`Classification::OutOfOrder`] for a wrong sequence id; [`Classification::SslRequest`]
/// for an SSLRequest the greeting did not invite.
pub fn first_packet(
    sequence_id: u8,
    payload: &[u8],
    tls_offered: bool,
) -> Result<FirstPacket, Classification> {
    if sequence_id != 1 {
        return Err(Classification::OutOfOrder);
    }
    match (SslRequest::matches(payload), tls_offered) {
        (true, true) => Ok(FirstPacket::StartTls),
        (true, false) => Err(Classification::SslRequest),
        (false, _) => Ok(FirstPacket::Login),
    }
}

/// What the login phase needs from the client's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// Dual mode: an answer to scramble A the compute can check (switching the client once
    /// to `mysql_native_password` if needed).
    CheckableAgainstA,
    /// Switch mode: the answer is discarded (the client will answer the server's own
    /// scramble after the one switch), so it is taken as it is and never switched here:
    /// clients accept only one switch per login.
    Discarded,
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketStream<ClientStream<S>>,
    greeting: &HandshakeV10,
    scramble_a: &Scramble,
    answers: Answers,
    tls: Option<Arc<ServerConfig>>,
    stage: &mut Stage,
) -> Result<ClientLogin, Classification> {
    client
        .write_packet(0, &greeting.to_bytes())
        .await
        .map_err(|_| Classification::ClosedSilently)?;
    let mut packet = client
        .read_packet()
        .await
        .map_err(|e| classify_read_error(&e, client.buffered()))?;
    let tls_offered = tls.is_some() && greeting.capability_flags & CLIENT_SSL != 0;
    if first_packet(packet.sequence_id, &packet.payload, tls_offered)? == FirstPacket::StartTls {
        let Some(config) = tls else {
            return Err(Classification::SslRequest);
        };
        *stage = Stage::TlsHandshake;
        // Boxed: a connection that has not answered its greeting yet keeps no room for it.
        Box::pin(start_tls(client, config)).await?;
        *stage = Stage::InTls;
        // The login follows inside TLS, numbered after the SSLRequest.
        packet = client
            .read_packet()
            .await
            .map_err(|e| classify_read_error(&e, &[]))?;
        if packet.sequence_id != 2 || SslRequest::matches(&packet.payload) {
            return Err(Classification::OutOfOrder);
        }
    }
    let in_tls = *stage == Stage::InTls;
    let decoded =
        HandshakeResponse41::decode_for_server(&packet.payload, greeting.capability_flags);
    // The raw login holds the client's answer; only the decoded (zeroizing) copy may live on.
    packet.payload.zeroize();
    let mut response = decoded.map_err(|_| Classification::Malformed)?;
    // The relay never offers compression (`profile::NEVER_ADVERTISED`). A client that asks
    // for it anyway goes on to compress (mysql-connector-python and node-mysql2 do), and
    // neither end could read the other: refused here with its reason, never left to hang.
    if response.client_flag & CLIENT_COMPRESS & !greeting.capability_flags != 0 {
        return Err(Classification::CompressionUnoffered);
    }
    offered_only(
        &mut response,
        greeting.mariadb_extended_capabilities().unwrap_or(0),
    );
    if response.username.is_empty() {
        return Err(Classification::EmptyUser);
    }
    let effective_flag = response.effective_flags(greeting.capability_flags);
    let named = if effective_flag & CLIENT_PLUGIN_AUTH != 0 {
        response.client_plugin_name.as_deref().unwrap_or_default()
    } else {
        b"mysql_native_password"
    };
    if answers == Answers::Discarded {
        return Ok(ClientLogin {
            plugin: AuthPlugin::from_name(named).unwrap_or(AuthPlugin::MysqlNativePassword),
            answer: Zeroizing::new(Vec::new()),
            last_sequence_id: packet.last_sequence_id,
            effective_flag,
            response,
            tls: in_tls,
            connection_id: greeting.connection_id,
        });
    }
    if let Some(plugin) =
        AuthPlugin::from_name(named).filter(|p| answer_fits(*p, &response.auth_response))
    {
        let answer = response.auth_response.clone();
        return Ok(ClientLogin {
            response,
            plugin,
            answer,
            last_sequence_id: packet.last_sequence_id,
            effective_flag,
            tls: in_tls,
            connection_id: greeting.connection_id,
        });
    }
    // The client answered for a plugin the compute cannot check against scramble A
    // (ed25519, sha256_password, clear text...): ask once for mysql_native_password on the
    // same scramble. Clients accept exactly one switch.
    let switch = AuthSwitchRequest::for_scramble(AuthPlugin::MysqlNativePassword, scramble_a);
    let mut out = Vec::with_capacity(48);
    switch.encode(&mut out);
    let switch_seq = packet.last_sequence_id.wrapping_add(1);
    client
        .write_packet(switch_seq, &out)
        .await
        .map_err(|_| Classification::ClosedSilently)?;
    let again = client
        .read_packet()
        .await
        .map_err(|e| classify_read_error(&e, &[]))?;
    if again.sequence_id != switch_seq.wrapping_add(1) {
        return Err(Classification::OutOfOrder);
    }
    let answer = Zeroizing::new(again.payload);
    if !answer_fits(AuthPlugin::MysqlNativePassword, &answer) {
        return Err(Classification::UnsupportedAuth);
    }
    Ok(ClientLogin {
        response,
        plugin: AuthPlugin::MysqlNativePassword,
        answer,
        last_sequence_id: again.last_sequence_id,
        effective_flag,
        tls: in_tls,
        connection_id: greeting.connection_id,
    })
}

/// Clears the MariaDB extended capabilities the client asks for that the greeting did not
/// offer (`offered`), as [`ClientLogin::effective_flag`] keeps only the offered standard ones: a
/// client may set any bits, and one the compute lacks would end its login in an ERR naming the
/// instance (through an endpoint, a way to tell an instance from a name that is none).
fn offered_only(response: &mut HandshakeResponse41, offered: u32) {
    if let Some(asked) = response.mariadb_extended_capabilities()
        && let Some(slot) = response.reserved.get_mut(19..23)
    {
        slot.copy_from_slice(&(asked & offered).to_le_bytes());
    }
}

/// Swaps the client's socket for TLS after its SSLRequest (bytes buffered past it are the
/// start of the ClientHello).
async fn start_tls<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut PacketStream<ClientStream<S>>,
    config: Arc<ServerConfig>,
) -> Result<(), Classification> {
    let early = client.take_buffered();
    let ClientStream::Plain(plain) = std::mem::replace(client.stream_mut(), ClientStream::Gone)
    else {
        // An SSLRequest inside TLS.
        return Err(Classification::OutOfOrder);
    };
    *client.stream_mut() = tls::accept(config, plain, early)
        .await
        .map_err(Classification::Tls)?;
    Ok(())
}

/// Whether `answer` has a length the plugin can produce: empty (empty password) or one
/// digest.
fn answer_fits(plugin: AuthPlugin, answer: &[u8]) -> bool {
    let digest = match plugin {
        AuthPlugin::MysqlNativePassword => authplugin::native_password::NATIVE_TOKEN_LEN,
        AuthPlugin::CachingSha2Password => authplugin::caching_sha2::CACHING_SHA2_TOKEN_LEN,
    };
    answer.is_empty() || answer.len() == digest
}

/// Names what a peer sent when it was not a MySQL packet we could read.
#[must_use]
pub fn classify_read_error(e: &ReadError, buffered: &[u8]) -> Classification {
    if let Some(c) = sniff(buffered) {
        return c;
    }
    match e {
        ReadError::Closed { partial: false } | ReadError::Io(_) => Classification::ClosedSilently,
        ReadError::Closed { partial: true } => Classification::ClosedMidPacket,
        ReadError::Frame(FrameError::TooLarge { .. }) => Classification::Oversized,
        ReadError::Frame(FrameError::SequenceMismatch { .. }) => Classification::OutOfOrder,
        ReadError::TimedOut => Classification::HandshakeTimeout,
    }
}

/// Recognises protocols that clients mistakenly (or scanners deliberately) send to a MySQL
/// port, from their first bytes.
#[must_use]
pub fn sniff(first: &[u8]) -> Option<Classification> {
    const HTTP_METHODS: [&[u8]; 9] = [
        b"GET ", b"POST", b"HEAD", b"PUT ", b"DELE", b"OPTI", b"PATC", b"CONN", b"PRI ",
    ];
    match first {
        [0x16, 0x03, ..] => Some(Classification::TlsClientHello),
        _ if HTTP_METHODS.iter().any(|m| first.starts_with(m)) => Some(Classification::Http),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
