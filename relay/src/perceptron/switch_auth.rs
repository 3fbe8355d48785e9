//! Auth-switch mode (architecture.md §2, "Stock servers"): P4–P8 for a stock MySQL or MariaDB, which
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

use authplugin::packet::AuthSwitchRequest;
use tokio::io::{AsyncRead, AsyncWrite};
use zeroize::Zeroizing;

use super::compute_leg::{self, GreetedCompute};
use super::dual_auth::Verdict;
use super::login::ClientLogin;
use super::outcome::{ComputeProtocolError, ComputeStep, PerceptronError, PlaintextAsk};
use crate::packet_io::PacketStream;

/// The plugin the relay names to make the server choose the account's plugin itself.
pub const PROBE_PLUGIN: &str = "perceptron_auth_switch";

/// How long the relay spends finishing a login it abandons (see [`abandon`]).
const ABANDON_TIMEOUT: Duration = Duration::from_secs(2);

/// Plugins whose answer proves the password without revealing it (challenge-response): the
/// only ones a switch may name on a compute leg without TLS. An allow-list, so a plugin whose
/// answer is the password (clear text, PAM's dialog, `sha256_password` to a client on TLS) or
/// one the relay does not know is refused there; caching_sha2_password's full authentication,
/// which asks for the password, is refused separately.
const CHALLENGE_RESPONSE_PLUGINS: [&str; 3] = [
    "mysql_native_password",
    "client_ed25519",
    "caching_sha2_password",
];

/// The longest plugin name a refusal keeps (for its log line).
const MAX_PLUGIN_NAME_KEPT: usize = 64;

/// The deadlines of a switch-mode login.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Bound on each read from the compute.
    pub compute: Duration,
    /// Bound on each read from the client.
    pub client: Duration,
}

/// P6–P8 in switch mode: the probe login, then every packet of the exchange relayed with its
/// sequence id renumbered, until the server's OK or ERR, which has been forwarded to the
/// client when this returns.
///
/// # Errors
/// [`PerceptronError::Compute`] when the server fails or misbehaves,
/// [`PerceptronError::ClientGone`] when the client leaves or stalls mid-exchange (the server's
/// side of the login is then finished with an empty answer).
pub async fn relay_login<C, S>(
    client: &mut PacketStream<C>,
    server: &mut GreetedCompute<S>,
    login: &ClientLogin,
    timeouts: Timeouts,
) -> Result<Verdict, PerceptronError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Without TLS to the compute, the relay carries no answer that is the password itself:
    // whoever sits on that leg (or squats the compute's address) would read it.
    let plaintext_leg = !server.tls;
    let probe = compute_leg::response_for(login, server, PROBE_PLUGIN, Zeroizing::new(Vec::new()));
    let server = &mut server.stream;
    compute_leg::write(server, 1, &probe.to_bytes()).await?;
    // client sequence id = server sequence id + delta, for every relayed packet.
    let delta = login.last_sequence_id.wrapping_sub(1);
    let mut expected = 2u8;
    let mut switched = false;
    loop {
        let packet = compute_leg::read(server, timeouts.compute, ComputeStep::Login).await?;
        if packet.sequence_id != expected {
            return Err(ComputeProtocolError::OutOfOrder {
                expected,
                actual: packet.sequence_id,
            }
            .into());
        }
        let to_client = packet.sequence_id.wrapping_add(delta);
        let needs_answer = match packet.payload.first() {
            Some(0x00 | 0xFF) => {
                client
                    .write_packet(to_client, &packet.payload)
                    .await
                    .map_err(|_| PerceptronError::ClientGone)?;
                return Ok(Verdict {
                    reply: packet,
                    proven_in: None,
                    ticket: None,
                });
            }
            Some(0xFE) => {
                let refused = if switched {
                    // Clients accept one switch; a second cannot be relayed.
                    Some(ComputeProtocolError::SecondAuthSwitch)
                } else {
                    AuthSwitchRequest::decode(&packet.payload)
                        .err()
                        .map(ComputeProtocolError::BadAuthSwitch)
                };
                let refused = refused.or_else(|| {
                    let switch = AuthSwitchRequest::decode(&packet.payload).ok()?;
                    let listed = CHALLENGE_RESPONSE_PLUGINS
                        .into_iter()
                        .any(|p| switch.plugin_name.as_slice() == p.as_bytes());
                    let mut name = switch.plugin_name;
                    name.truncate(MAX_PLUGIN_NAME_KEPT);
                    (plaintext_leg && !listed).then_some(
                        ComputeProtocolError::PasswordOnPlaintextLeg(PlaintextAsk::Plugin(name)),
                    )
                });
                if let Some(e) = refused {
                    abandon(server, packet.last_sequence_id).await;
                    return Err(e.into());
                }
                switched = true;
                true
            }
            // On a leg without TLS, AuthMoreData is relayed only as caching_sha2_password's
            // fast-path success (`01 03`, exactly). Its full authentication (`01 04`, which a
            // client on TLS answers with its password in clear, and which clients recognise by
            // the second byte alone, `01 04 00` too) and a public key exchange (a key an
            // attacker on this leg could replace) are refused.
            Some(0x01) if plaintext_leg && packet.payload.get(1..) != Some(&[0x03][..]) => {
                abandon(server, packet.last_sequence_id).await;
                return Err(ComputeProtocolError::PasswordOnPlaintextLeg(
                    PlaintextAsk::AuthMoreData,
                )
                .into());
            }
            // AuthMoreData: `01 03` (caching_sha2 fast path succeeded) is followed by an OK;
            // anything else wants the client's next packet.
            Some(0x01) => packet.payload.get(1..) != Some(&[0x03][..]),
            first => {
                abandon(server, packet.last_sequence_id).await;
                return Err(first
                    .map_or(ComputeProtocolError::Empty, |&b| {
                        ComputeProtocolError::Unexpected(b)
                    })
                    .into());
            }
        };
        if client
            .write_packet(to_client, &packet.payload)
            .await
            .is_err()
        {
            abandon(server, packet.last_sequence_id).await;
            return Err(PerceptronError::ClientGone);
        }
        if !needs_answer {
            expected = packet.last_sequence_id.wrapping_add(1);
            continue;
        }
        let answer = match client.read_packet_within(timeouts.client).await {
            Ok(p) if p.sequence_id == to_client.wrapping_add(1) => Zeroizing::new(p.payload),
            _ => {
                abandon(server, packet.last_sequence_id).await;
                return Err(PerceptronError::ClientGone);
            }
        };
        let to_server = packet.last_sequence_id.wrapping_add(1);
        compute_leg::write(server, to_server, &answer).await?;
        expected = to_server.wrapping_add(1);
    }
}

/// Finishes a login the relay gives up on: answers the server's pending request with an empty
/// packet and reads its verdict, so it is a failed login, not an aborted handshake.
async fn abandon<S: AsyncRead + AsyncWrite + Unpin>(
    server: &mut PacketStream<S>,
    last_server_seq: u8,
) {
    let finish = async {
        server
            .write_packet(last_server_seq.wrapping_add(1), &[])
            .await
            .ok()?;
        server.read_packet().await.ok()
    };
    let _ = tokio::time::timeout(ABANDON_TIMEOUT, finish).await;
}
