//! P4–P8: connect to the woken compute, read scramble B, log in with the relayed-auth payload
//! (DESIGN §3), and hand the compute's OK or ERR to the client with the client's sequence id.

use std::time::Duration;

use authplugin::packet::HandshakeResponse41;
use authplugin::packet::HandshakeV10;
use authplugin::packet::capabilities::*;
use authplugin::packet::framing::Packet;
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::{KeyRing, Scramble};
use tokio::net::TcpStream;
use zeroize::Zeroizing;

use super::login::ClientLogin;
use crate::compute_conn::{self, ComputeTarget, OnBehalfOf};
use crate::control::readiness;
use crate::outcome::ComputeError;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream, ReadError};
use crate::profile::{self, ComputeProfile, FORMAT_CHANGING, NEVER_ADVERTISED};

/// The compute's side of a login that reached a verdict.
#[derive(Debug)]
pub struct ComputeVerdict {
    /// The compute connection, ready for the byte pump if the login succeeded.
    pub compute: PacketStream<TcpStream>,
    /// The compute's OK (`0x00`) or ERR (`0xFF`) payload.
    pub reply: Packet,
}

impl ComputeVerdict {
    /// Whether the compute accepted the login.
    #[must_use]
    pub fn accepted(&self) -> bool {
        self.reply.payload.first() == Some(&0x00)
    }
}

/// Inputs of the relayed login that do not come from the client.
#[derive(Debug)]
pub struct RelayedLoginContext<'a> {
    /// The compute.
    pub compute: ComputeTarget,
    /// Who the compute connection is for (the PROXY header, when enabled).
    pub on_behalf_of: OnBehalfOf,
    /// Bound on connecting and on each read from the compute.
    pub timeout: Duration,
    /// The relay's key ring (the newest key signs).
    pub ring: &'a KeyRing,
    /// The scramble A the client answered.
    pub scramble_a: &'a Scramble,
    /// The client's address, carried in the payload.
    pub client_addr: &'a str,
}

/// Runs P4–P7 and returns the compute's verdict together with the profile its greeting had
/// (the caller persists it when it changed).
///
/// # Errors
/// [`ComputeError`] when the compute cannot be reached or misbehaves.
pub async fn relay_login(
    login: ClientLogin,
    ctx: &RelayedLoginContext<'_>,
) -> Result<(ComputeVerdict, ComputeProfile), (ComputeError, Option<ComputeProfile>)> {
    let stream = connect_with_retry(ctx.compute, ctx.on_behalf_of, ctx.timeout)
        .await
        .map_err(|e| (e, None))?;
    let mut compute =
        PacketStream::new(stream, MAX_LOGIN_PACKET_LEN).with_write_timeout(ctx.timeout);
    let greeting = read(&mut compute, ctx.timeout)
        .await
        .map_err(|e| (e, None))?;
    let greeting = HandshakeV10::decode(&greeting.payload)
        .map_err(|e| (ComputeError::Protocol(format!("bad greeting: {e}")), None))?;
    let learnt = ComputeProfile::from_greeting(&greeting);
    let scramble_b = greeting.scramble().ok_or_else(|| {
        (
            ComputeError::Protocol("greeting without a 20-byte scramble".into()),
            Some(learnt.clone()),
        )
    })?;
    let missing = login.effective_flag & FORMAT_CHANGING & !greeting.capability_flags;
    if missing != 0 {
        return Err((ComputeError::CapabilityMismatch(missing), Some(learnt)));
    }
    let response = build_response(login, &greeting, &scramble_b, ctx)
        .map_err(|e| (e, Some(learnt.clone())))?;
    compute
        .write_packet(1, &response)
        .await
        .map_err(|e| (ComputeError::Lost(e.to_string()), Some(learnt.clone())))?;
    drop(response);
    let reply = read(&mut compute, ctx.timeout)
        .await
        .map_err(|e| (e, Some(learnt.clone())))?;
    if reply.sequence_id != 2 {
        return Err((
            ComputeError::Protocol(format!("reply has sequence id {}", reply.sequence_id)),
            Some(learnt),
        ));
    }
    match reply.payload.first() {
        Some(0x00 | 0xFF) => Ok((ComputeVerdict { compute, reply }, learnt)),
        Some(other) => Err((
            ComputeError::Protocol(format!("unexpected reply {other:#04x} to relayed login")),
            Some(learnt),
        )),
        None => Err((ComputeError::Protocol("empty reply".into()), Some(learnt))),
    }
}

/// The P6 HandshakeResponse41: the client's identity and session settings, the relayed-auth
/// payload as the answer. Consumes the login so the answer is wiped as soon as it is sent.
fn build_response(
    login: ClientLogin,
    greeting: &HandshakeV10,
    scramble_b: &Scramble,
    ctx: &RelayedLoginContext<'_>,
) -> Result<Zeroizing<Vec<u8>>, ComputeError> {
    let ClientLogin {
        response: client,
        plugin,
        answer,
        effective_flag,
        ..
    } = login;
    let server = greeting.capability_flags;
    let lenenc = server & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    let client_flag =
        (effective_flag & server & !NEVER_ADVERTISED & !CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | lenenc;
    // The MAC must bind the database the compute will actually see.
    let database = if client_flag & CLIENT_CONNECT_WITH_DB != 0 {
        client.database.clone().unwrap_or_default()
    } else {
        Vec::new()
    };
    let binding = Binding {
        scramble_b,
        user: &client.username,
        database: &database,
    };
    let claim = LoginClaim {
        scramble_a: ctx.scramble_a.clone(),
        answer_a: answer,
        client_plugin: plugin,
        client_addr: ctx.client_addr.to_owned(),
    };
    let payload = Zeroizing::new(
        payload::encode_signed(&claim, ctx.ring.signing_key(), now_ms(), &binding)
            .map_err(|e| ComputeError::Protocol(format!("cannot build payload: {e}")))?,
    );
    drop(claim);
    if lenenc == 0 && payload.len() > 255 {
        return Err(ComputeError::Protocol(
            "compute lacks CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA and the payload exceeds 255 bytes"
                .into(),
        ));
    }
    let p6 = HandshakeResponse41 {
        client_flag,
        max_packet_size: client.max_packet_size,
        character_set: client.character_set,
        reserved: [0; 23],
        username: client.username.clone(),
        auth_response: Zeroizing::new(payload.to_vec()),
        database: (client_flag & CLIENT_CONNECT_WITH_DB != 0).then(|| database.clone()),
        client_plugin_name: Some(payload::PLUGIN_NAME.as_bytes().to_vec()),
        connect_attrs: (client_flag & CLIENT_CONNECT_ATTRS != 0)
            .then(|| client.connect_attrs.clone().unwrap_or_default()),
        zstd_compression_level: None,
    };
    Ok(Zeroizing::new(p6.to_bytes()))
}

/// Connects to the compute, retrying with backoff while it starts, within `timeout`.
///
/// # Errors
/// [`ComputeError::Connect`] or [`ComputeError::Timeout`].
pub async fn connect_with_retry(
    target: ComputeTarget,
    who: OnBehalfOf,
    timeout: Duration,
) -> Result<TcpStream, ComputeError> {
    let addr = target.addr;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut attempt = 0;
    loop {
        match tokio::time::timeout_at(deadline, compute_conn::connect(target, who)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if tokio::time::Instant::now() + readiness::backoff(attempt) < deadline => {
                tracing::debug!(%addr, error = %e, attempt, "compute connect failed; retrying");
            }
            Ok(Err(e)) => return Err(ComputeError::Connect(e)),
            Err(_) => return Err(ComputeError::Timeout),
        }
        tokio::time::sleep(readiness::backoff(attempt)).await;
        attempt += 1;
    }
}

/// Reads one packet from the compute within `timeout`.
///
/// # Errors
/// [`ComputeError`] for a timeout, a lost connection or bad framing.
pub async fn read(
    compute: &mut PacketStream<TcpStream>,
    timeout: Duration,
) -> Result<Packet, ComputeError> {
    match tokio::time::timeout(timeout, compute.read_packet()).await {
        Err(_) => Err(ComputeError::Timeout),
        Ok(Ok(p)) => Ok(p),
        Ok(Err(ReadError::Frame(e))) => Err(ComputeError::Protocol(e.to_string())),
        Ok(Err(e)) => Err(ComputeError::Lost(e.to_string())),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Persists a learnt profile when it differs from the one in use.
pub fn remember_profile(
    state_dir: &std::path::Path,
    instance: &str,
    current: &ComputeProfile,
    learnt: &ComputeProfile,
) -> bool {
    if current == learnt {
        return false;
    }
    if let Err(e) = profile::save(state_dir, instance, learnt) {
        tracing::warn!(instance, error = %e, "cannot save the compute profile");
    }
    true
}
