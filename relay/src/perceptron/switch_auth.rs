//! Auth-switch mode (DESIGN §2, "Stock servers"): P4–P8 for a stock MySQL or MariaDB, which
//! cannot verify a relayed payload. The relay still never holds a credential: the client is
//! switched once to the server's own plugin and answers the server's own challenge, and the
//! relay only carries the packets, renumbering their sequence ids.
//!
//! The relay does not know which plugin the user's account has (native, ed25519,
//! caching_sha2...), and clients accept only one AuthSwitchRequest per login. So it lets the
//! server decide: its HandshakeResponse41 names a plugin no server has ([`PROBE_PLUGIN`]) with
//! an empty answer, which makes the server reply with an AuthSwitchRequest for the account's
//! real plugin and a fresh challenge. That request becomes the one switch the client sees.
//! Everything after it (the answer, AuthMoreData rounds such as caching_sha2's fast path or
//! RSA exchange) is relayed as is until the server's OK or ERR.
//!
//! A login the relay abandons on the server side (the client left mid-exchange) is finished
//! with an empty answer, so the server records a failed login rather than an aborted
//! handshake, and the relay's address is never blocked by `max_connect_errors`.

use std::time::Duration;

use authplugin::packet::capabilities::*;
use authplugin::packet::{AuthSwitchRequest, HandshakeResponse41, HandshakeV10};
use tokio::net::TcpStream;
use zeroize::Zeroizing;

use super::login::ClientLogin;
use super::relayed_auth::{ComputeVerdict, connect_with_retry, read};
use crate::compute_conn::{ComputeTarget, OnBehalfOf};
use crate::outcome::ComputeError;
use crate::packet_io::{MAX_LOGIN_PACKET_LEN, PacketStream};
use crate::profile::{ComputeProfile, FORMAT_CHANGING, NEVER_ADVERTISED};

/// The plugin the relay names to make the server choose the account's plugin itself.
pub const PROBE_PLUGIN: &str = "perceptron_auth_switch";

/// What goes wrong in a switch-mode login.
#[derive(Debug)]
pub enum SwitchError {
    /// The compute failed or misbehaved.
    Compute(ComputeError),
    /// The client went away (or stalled) mid-exchange.
    ClientGone,
}

/// Inputs of a switch-mode login.
#[derive(Debug, Clone, Copy)]
pub struct SwitchContext {
    /// The compute.
    pub compute: ComputeTarget,
    /// Who the compute connection is for (PROXY header).
    pub on_behalf_of: OnBehalfOf,
    /// Bound on connecting and on each read from the compute.
    pub compute_timeout: Duration,
    /// Bound on each read from the client.
    pub client_timeout: Duration,
}

type Failure = (SwitchError, Option<ComputeProfile>);

/// Runs P4–P8 in switch mode. The server's final OK or ERR has been forwarded to the client
/// when this returns a verdict.
///
/// # Errors
/// A [`SwitchError`] and, when the greeting was read, the compute's profile.
pub async fn relay_switch_login(
    login: ClientLogin,
    client: &mut PacketStream<TcpStream>,
    ctx: &SwitchContext,
) -> Result<(ComputeVerdict, ComputeProfile), Failure> {
    let stream = connect_with_retry(ctx.compute, ctx.on_behalf_of, ctx.compute_timeout)
        .await
        .map_err(|e| (SwitchError::Compute(e), None))?;
    let mut server =
        PacketStream::new(stream, MAX_LOGIN_PACKET_LEN).with_write_timeout(ctx.compute_timeout);
    let greeting = read(&mut server, ctx.compute_timeout)
        .await
        .map_err(|e| (SwitchError::Compute(e), None))?;
    let greeting = HandshakeV10::decode(&greeting.payload).map_err(|e| {
        (
            SwitchError::Compute(ComputeError::Protocol(format!("bad greeting: {e}"))),
            None,
        )
    })?;
    let learnt = ComputeProfile::from_greeting(&greeting);
    let fail = |e: SwitchError| (e, Some(learnt.clone()));
    let missing = login.effective_flag & FORMAT_CHANGING & !greeting.capability_flags;
    if missing != 0 {
        return Err(fail(SwitchError::Compute(
            ComputeError::CapabilityMismatch(missing),
        )));
    }
    let response = probe_response(&login, &greeting);
    server
        .write_packet(1, &response)
        .await
        .map_err(|e| fail(SwitchError::Compute(ComputeError::Lost(e.to_string()))))?;
    // client sequence id = server sequence id + delta, for every relayed packet.
    let delta = login.last_sequence_id.wrapping_sub(1);
    let mut expected = 2u8;
    let mut switched = false;
    loop {
        let packet = read(&mut server, ctx.compute_timeout)
            .await
            .map_err(|e| fail(SwitchError::Compute(e)))?;
        if packet.sequence_id != expected {
            return Err(fail(SwitchError::Compute(ComputeError::Protocol(format!(
                "server packet has sequence id {}, expected {expected}",
                packet.sequence_id
            )))));
        }
        let to_client = packet.sequence_id.wrapping_add(delta);
        let needs_answer = match packet.payload.first() {
            Some(0x00 | 0xFF) => {
                client
                    .write_packet(to_client, &packet.payload)
                    .await
                    .map_err(|_| fail(SwitchError::ClientGone))?;
                return Ok((
                    ComputeVerdict {
                        compute: server,
                        reply: packet,
                    },
                    learnt,
                ));
            }
            Some(0xFE) => {
                if switched {
                    // Clients accept one switch; a second cannot be relayed.
                    abandon(&mut server, packet.last_sequence_id).await;
                    return Err(fail(SwitchError::Compute(ComputeError::Protocol(
                        "server asked for a second auth switch".into(),
                    ))));
                }
                AuthSwitchRequest::decode(&packet.payload).map_err(|e| {
                    fail(SwitchError::Compute(ComputeError::Protocol(format!(
                        "bad auth switch: {e}"
                    ))))
                })?;
                switched = true;
                true
            }
            // AuthMoreData: `01 03` (caching_sha2 fast path succeeded) is followed by an OK;
            // anything else wants the client's next packet.
            Some(0x01) => packet.payload.get(1..) != Some(&[0x03][..]),
            _ => {
                abandon(&mut server, packet.last_sequence_id).await;
                return Err(fail(SwitchError::Compute(ComputeError::Protocol(
                    "unexpected packet during authentication".into(),
                ))));
            }
        };
        if client
            .write_packet(to_client, &packet.payload)
            .await
            .is_err()
        {
            abandon(&mut server, packet.last_sequence_id).await;
            return Err(fail(SwitchError::ClientGone));
        }
        if !needs_answer {
            expected = packet.last_sequence_id.wrapping_add(1);
            continue;
        }
        let answer = match tokio::time::timeout(ctx.client_timeout, client.read_packet()).await {
            Ok(Ok(p)) if p.sequence_id == to_client.wrapping_add(1) => Zeroizing::new(p.payload),
            _ => {
                abandon(&mut server, packet.last_sequence_id).await;
                return Err(fail(SwitchError::ClientGone));
            }
        };
        let to_server = packet.last_sequence_id.wrapping_add(1);
        server
            .write_packet(to_server, &answer)
            .await
            .map_err(|e| fail(SwitchError::Compute(ComputeError::Lost(e.to_string()))))?;
        expected = to_server.wrapping_add(1);
    }
}

/// The HandshakeResponse41 to the server: the client's identity and session settings, the
/// probe plugin and no answer.
fn probe_response(login: &ClientLogin, greeting: &HandshakeV10) -> Vec<u8> {
    let server = greeting.capability_flags;
    let lenenc = server & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
    let client_flag = (login.effective_flag
        & server
        & !NEVER_ADVERTISED
        & !CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
        | CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | lenenc;
    let client = &login.response;
    HandshakeResponse41 {
        client_flag,
        max_packet_size: client.max_packet_size,
        character_set: client.character_set,
        reserved: [0; 23],
        username: client.username.clone(),
        auth_response: Zeroizing::new(Vec::new()),
        database: (client_flag & CLIENT_CONNECT_WITH_DB != 0)
            .then(|| client.database.clone().unwrap_or_default()),
        client_plugin_name: Some(PROBE_PLUGIN.as_bytes().to_vec()),
        connect_attrs: (client_flag & CLIENT_CONNECT_ATTRS != 0)
            .then(|| client.connect_attrs.clone().unwrap_or_default()),
        zstd_compression_level: None,
    }
    .to_bytes()
}

/// Finishes a login the relay gives up on: answers the server's pending request with an empty
/// packet and reads its verdict, so it is a failed login, not an aborted handshake.
async fn abandon(server: &mut PacketStream<TcpStream>, last_server_seq: u8) {
    let finish = async {
        server
            .write_packet(last_server_seq.wrapping_add(1), &[])
            .await
            .ok()?;
        server.read_packet().await.ok()
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), finish).await;
}
