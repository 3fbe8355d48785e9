//! P6 and P7 in dual mode (DESIGN §3): log in to the compute with the relayed-auth payload
//! (the relay's proof over scramble B, plus scramble A and the client's answer to it) and read
//! the compute's verdict. P8, handing the verdict to the client, is the caller's.

use std::time::Duration;

use authplugin::packet::Packet;
use authplugin::packet::capabilities::{
    CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
};
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::{KeyRing, Scramble};
use tokio::io::{AsyncRead, AsyncWrite};
use zeroize::Zeroizing;

use super::compute_leg::{self, GreetedCompute};
use super::login::ClientLogin;
use super::outcome::{ComputeError, ComputeProtocolError, ComputeStep};
use crate::packet_io::PacketStream;

/// The largest payload a compute without `CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA` can take: its
/// auth response has a one-byte length.
const MAX_SHORT_AUTH_RESPONSE: usize = 255;

/// What signs a relayed login besides the client's own answer.
#[derive(Debug, Clone, Copy)]
pub struct Signer<'a> {
    /// The relay's key ring (the newest key signs).
    pub ring: &'a KeyRing,
    /// The scramble A the client answered.
    pub scramble_a: &'a Scramble,
    /// The client's address, carried in the payload.
    pub client_addr: &'a str,
    /// The time the payload claims to be issued at (Unix ms).
    pub now_ms: u64,
}

/// The compute's answer to a relayed login: its OK or ERR packet.
#[derive(Debug)]
pub struct Verdict {
    /// The compute's OK (`0x00`) or ERR (`0xFF`) packet.
    pub reply: Packet,
}

impl Verdict {
    /// Whether the compute accepted the login.
    #[must_use]
    pub fn accepted(&self) -> bool {
        self.reply.payload.first() == Some(&0x00)
    }
}

/// P6: sends the HandshakeResponse41 carrying the client's identity and session settings with
/// the relayed-auth payload as its answer. Consumes the login so the client's answer is wiped
/// as soon as it is sent.
///
/// # Errors
/// [`ComputeError`] when the payload cannot be built or sent.
pub async fn send_login<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut GreetedCompute<S>,
    login: ClientLogin,
    signer: &Signer<'_>,
) -> Result<(), ComputeError> {
    let response = build_response(login, compute, signer)?;
    compute_leg::write(&mut compute.stream, 1, &response).await
}

/// P7: reads the compute's verdict, which must be the next packet (sequence id 2) and an OK or
/// an ERR.
///
/// # Errors
/// [`ComputeError`] for a timeout, a lost connection or any other packet.
pub async fn read_verdict<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut PacketStream<S>,
    timeout: Duration,
) -> Result<Verdict, ComputeError> {
    let reply = compute_leg::read(compute, timeout, ComputeStep::Login).await?;
    if reply.sequence_id != 2 {
        return Err(ComputeProtocolError::OutOfOrder {
            expected: 2,
            actual: reply.sequence_id,
        }
        .into());
    }
    match reply.payload.first() {
        Some(0x00 | 0xFF) => Ok(Verdict { reply }),
        Some(&other) => Err(ComputeProtocolError::Unexpected(other).into()),
        None => Err(ComputeProtocolError::Empty.into()),
    }
}

fn build_response<S>(
    login: ClientLogin,
    compute: &GreetedCompute<S>,
    signer: &Signer<'_>,
) -> Result<Zeroizing<Vec<u8>>, ComputeError> {
    let mut p6 = compute_leg::response_for(
        &login,
        &compute.greeting,
        payload::PLUGIN_NAME,
        Zeroizing::new(Vec::new()),
    );
    // The MAC binds the database the compute will actually see.
    let database = if p6.client_flag & CLIENT_CONNECT_WITH_DB != 0 {
        p6.database.clone().unwrap_or_default()
    } else {
        Vec::new()
    };
    let binding = Binding {
        scramble_b: &compute.scramble_b,
        user: &p6.username,
        database: &database,
    };
    let ClientLogin { plugin, answer, .. } = login;
    let claim = LoginClaim {
        scramble_a: signer.scramble_a.clone(),
        answer_a: answer,
        client_plugin: plugin,
        client_addr: signer.client_addr.to_owned(),
    };
    // The payload carries the client's answer: wiped on every path, errors included.
    let signed = Zeroizing::new(
        payload::encode_signed(&claim, signer.ring.signing_key(), signer.now_ms, &binding)
            .map_err(ComputeProtocolError::Payload)?,
    );
    drop(claim);
    if p6.client_flag & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA == 0
        && signed.len() > MAX_SHORT_AUTH_RESPONSE
    {
        return Err(ComputeProtocolError::PayloadTooLong.into());
    }
    p6.auth_response = signed;
    Ok(Zeroizing::new(p6.to_bytes()))
}
