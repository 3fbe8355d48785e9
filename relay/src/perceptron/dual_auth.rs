//! P6 and P7 in dual mode (DESIGN §3): log in to the compute with the relayed-auth payload
//! (the relay's proof over scramble B, plus scramble A and the client's answer to it) and read
//! the compute's verdict. P8, handing the verdict to the client, is the caller's.

use std::time::Duration;

use authplugin::packet::auth_switch::AUTH_SWITCH_HEADER;
use authplugin::packet::capabilities::{
    CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
};
use authplugin::packet::{AuthSwitchRequest, Packet};
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::{AuthPlugin, KeyRing, Scramble};
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

/// P6 and P7: sends the HandshakeResponse41 carrying the client's identity and session
/// settings with the relayed-auth payload as its answer, and reads the compute's verdict.
///
/// The payload is bound to the greeting's scramble B. A compute whose auth plugin issues its
/// own challenge instead — MariaDB with `perceptron_dual`, which offers a fresh scramble
/// under `mysql_native_password` in an AuthSwitchRequest — gets a payload signed for that
/// scramble, once. A switch that repeats the greeting's scramble comes from a stock native
/// plugin (the account is not on `perceptron_dual`) and is answered so that it fails.
/// Consumes the login so the client's answer is wiped when this returns.
///
/// # Errors
/// [`ComputeError`] when the payload cannot be built or sent, for a timeout, a lost
/// connection, or any reply other than OK, ERR or that one switch.
pub async fn log_in<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut GreetedCompute<S>,
    login: ClientLogin,
    signer: &Signer<'_>,
    timeout: Duration,
) -> Result<Verdict, ComputeError> {
    let (response, signed) = build_response(login, compute, signer)?;
    compute_leg::write(&mut compute.stream, 1, &response).await?;
    drop(response);
    let reply = read_reply(&mut compute.stream, timeout, 2).await?;
    if reply.payload.first() != Some(&AUTH_SWITCH_HEADER) {
        return verdict(reply);
    }
    let switch =
        AuthSwitchRequest::decode(&reply.payload).map_err(ComputeProtocolError::BadAuthSwitch)?;
    let scramble_b = (switch.plugin_name == AuthPlugin::MysqlNativePassword.name().as_bytes())
        .then(|| switch.scramble())
        .flatten()
        .ok_or(ComputeProtocolError::UnanswerableAuthSwitch)?;
    let answer = if scramble_b == compute.scramble_b {
        // The greeting's own scramble again: MariaDB's stock mysql_native_password asking
        // for a native answer, because the account does not use perceptron_dual (or does not
        // exist). Nothing the relay holds can answer it; a random token finishes the login as
        // an ordinary failed one (ERR 1045 for the client), where a payload would make the
        // server report a malformed handshake.
        let mut token = Zeroizing::new(vec![0u8; authplugin::native_password::NATIVE_TOKEN_LEN]);
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut token);
        token
    } else {
        signed.sign_for(&scramble_b, signer)?
    };
    compute_leg::write(&mut compute.stream, 3, &answer).await?;
    drop(answer);
    let reply = read_reply(&mut compute.stream, timeout, 4).await?;
    if reply.payload.first() == Some(&AUTH_SWITCH_HEADER) {
        return Err(ComputeProtocolError::SecondAuthSwitch.into());
    }
    verdict(reply)
}

/// Reads the compute's next packet, which must carry `sequence_id`.
async fn read_reply<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut PacketStream<S>,
    timeout: Duration,
    sequence_id: u8,
) -> Result<Packet, ComputeError> {
    let reply = compute_leg::read(compute, timeout, ComputeStep::Login).await?;
    if reply.sequence_id != sequence_id {
        return Err(ComputeProtocolError::OutOfOrder {
            expected: sequence_id,
            actual: reply.sequence_id,
        }
        .into());
    }
    Ok(reply)
}

/// The verdict, if `reply` is an OK or an ERR.
fn verdict(reply: Packet) -> Result<Verdict, ComputeError> {
    match reply.payload.first() {
        Some(0x00 | 0xFF) => Ok(Verdict { reply }),
        Some(&other) => Err(ComputeProtocolError::Unexpected(other).into()),
        None => Err(ComputeProtocolError::Empty.into()),
    }
}

/// What a payload is signed over besides scramble B, kept until the verdict so that a
/// compute's own challenge can be answered. The claim's answer is wiped when this is dropped.
struct Signable {
    claim: LoginClaim,
    user: Vec<u8>,
    database: Vec<u8>,
}

impl Signable {
    fn sign_for(
        &self,
        scramble_b: &Scramble,
        signer: &Signer<'_>,
    ) -> Result<Zeroizing<Vec<u8>>, ComputeError> {
        let binding = Binding {
            scramble_b,
            user: &self.user,
            database: &self.database,
        };
        // The payload carries the client's answer: wiped on every path, errors included.
        payload::encode_signed(
            &self.claim,
            signer.ring.signing_key(),
            signer.now_ms,
            &binding,
        )
        .map(Zeroizing::new)
        .map_err(|e| ComputeProtocolError::Payload(e).into())
    }
}

fn build_response<S>(
    login: ClientLogin,
    compute: &GreetedCompute<S>,
    signer: &Signer<'_>,
) -> Result<(Zeroizing<Vec<u8>>, Signable), ComputeError> {
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
    let ClientLogin { plugin, answer, .. } = login;
    let signable = Signable {
        claim: LoginClaim {
            scramble_a: signer.scramble_a.clone(),
            answer_a: answer,
            client_plugin: plugin,
            client_addr: signer.client_addr.to_owned(),
        },
        user: p6.username.clone(),
        database,
    };
    let signed = signable.sign_for(&compute.scramble_b, signer)?;
    if p6.client_flag & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA == 0
        && signed.len() > MAX_SHORT_AUTH_RESPONSE
    {
        return Err(ComputeProtocolError::PayloadTooLong.into());
    }
    p6.auth_response = signed;
    Ok((Zeroizing::new(p6.to_bytes()), signable))
}
