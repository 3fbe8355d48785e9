//! P6 and P7 in dual mode (architecture.md §3): log in to the compute with the relayed-auth payload
//! (the relay's proof over scramble B, plus scramble A and the client's answer to it) and read
//! the compute's verdict. P8, handing the verdict to the client, is the caller's.
//!
//! The payload goes only to a compute that has proven it holds the perceptron key
//! (`authplugin::compute_proof`): server-shim proves it in its greeting; a compute that does
//! not (MariaDB, whose greeting the plugin cannot change) gets a Hello in its place and must
//! answer it with a proof bound to its own challenge first. Until then the relay has sent the
//! user name and database, never scramble A or the client's answer, and it hands the client
//! no session that an unproven compute accepted.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use authplugin::compute_proof::{self, Hello, ProofError};
use authplugin::packet::auth_switch::AUTH_SWITCH_HEADER;
use authplugin::packet::capabilities::{
    CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
};
use authplugin::packet::{AuthSwitchRequest, Packet};
use authplugin::payload::{self, Binding, LoginClaim};
use authplugin::resume;
use authplugin::{AuthPlugin, KeyRing, ReplayGuard, Scramble};
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
    /// The greetings whose proofs this relay has accepted
    /// ([`compute_proof::greeting_guard`]), shared by every instance: a greeting replayed
    /// onto another connection is refused.
    pub greetings: &'a Mutex<ReplayGuard>,
    /// Ask the compute for a resumption ticket (`resumable_sessions`; payload v3).
    pub wants_ticket: bool,
}

/// Where a compute proved that it holds the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvenIn {
    /// In its greeting (server-shim).
    Greeting,
    /// In a challenge round, answering the relay's Hello (MariaDB with `perceptron_dual`).
    ChallengeRound,
    /// In the auth switch that answers the Hello of the relay's login (server-shim).
    AuthSwitch,
}

impl ProvenIn {
    /// Whether a probe of the compute's address can ask for the proof again (a greeting or
    /// an auth switch answers any connection; a challenge round needs an account's login):
    /// the relay then re-checks it while the compute runs.
    #[must_use]
    pub const fn repeatable(self) -> bool {
        matches!(self, Self::Greeting | Self::AuthSwitch)
    }

    /// Whether the compute takes the relay's connection id as its session's
    /// (`compute_leg::response_for`): server-shim, which proves the key in its greeting or an
    /// auth switch, does; MariaDB, which proves it in a challenge round, cannot
    /// (`crate::kill_ids`).
    #[must_use]
    pub const fn takes_the_relays_id(self) -> bool {
        matches!(self, Self::Greeting | Self::AuthSwitch)
    }
}

/// The compute's answer to a relayed login: its OK or ERR packet.
#[derive(Debug)]
pub struct Verdict {
    /// The compute's OK (`0x00`) or ERR (`0xFF`) packet.
    pub reply: Packet,
    /// Where the compute proved that it holds the key; `None` for an ERR from a compute that
    /// did not (an OK always comes with a proof). Switch mode has no proofs.
    pub proven_in: Option<ProvenIn>,
    /// The session's resumption ticket, when the relay asked for one and the compute issued
    /// it (right before its OK). Kept in memory for this connection only; wiped when dropped.
    pub ticket: Option<Zeroizing<Vec<u8>>>,
}

impl Verdict {
    /// Whether the compute accepted the login.
    #[must_use]
    pub fn accepted(&self) -> bool {
        self.reply.payload.first() == Some(&0x00)
    }
}

/// P6 and P7: sends the HandshakeResponse41 carrying the client's identity and session
/// settings and reads the compute's verdict.
///
/// A compute whose greeting proves it holds the key gets the relayed-auth payload, bound to
/// the greeting's scramble B, as the login's answer. Any other gets a [`Hello`] there. A
/// compute whose auth plugin then issues its own challenge — MariaDB with `perceptron_dual`,
/// which offers a fresh scramble under `mysql_native_password` in an AuthSwitchRequest — is
/// answered with a Hello (unless its greeting proved it), must reply with a proof bound to that
/// challenge, and then gets a payload signed for it, once. A switch that repeats the greeting's
/// scramble comes from a stock native plugin (the account is not on `perceptron_dual`) and is
/// answered so that it fails. Consumes the login so the client's answer is wiped when this
/// returns.
///
/// # Errors
/// [`ComputeError`] when the payload cannot be built or sent, for a timeout, a lost
/// connection, a compute that fails to prove it holds the key
/// ([`ComputeProtocolError::Unproven`]), or any reply other than OK, ERR or that one switch.
pub async fn log_in<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut GreetedCompute<S>,
    login: ClientLogin,
    signer: &Signer<'_>,
    timeout: Duration,
) -> Result<Verdict, ComputeError> {
    exchange(compute, login, None, signer, timeout).await
}

/// A reattach (docs/protocol.md, "Resumable sessions"): as [`log_in`], with the session's
/// first login as the template (its answer empty) and the resume payload — the relay's
/// identity plus the compute's `ticket` — where a login carries the relayed-auth payload.
/// The compute proves the key first, as for a login. The verdict carries the next ticket.
///
/// # Errors
/// As [`log_in`].
pub async fn resume<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut GreetedCompute<S>,
    template: ClientLogin,
    client_addr: &str,
    ticket: &[u8],
    signer: &Signer<'_>,
    timeout: Duration,
) -> Result<Verdict, ComputeError> {
    let resume = Resume {
        client_addr: client_addr.to_owned(),
        ticket: Zeroizing::new(ticket.to_vec()),
    };
    exchange(compute, template, Some(resume), signer, timeout).await
}

/// What a reattach answers with instead of the client's login.
struct Resume {
    client_addr: String,
    ticket: Zeroizing<Vec<u8>>,
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut GreetedCompute<S>,
    login: ClientLogin,
    resume: Option<Resume>,
    signer: &Signer<'_>,
    timeout: Duration,
) -> Result<Verdict, ComputeError> {
    let mut proven = greeting_proven(compute, signer)?.then_some(ProvenIn::Greeting);
    let hello = Hello::generate(
        signer.ring.signing_key().id().clone(),
        &mut rand::rngs::OsRng,
    );
    let (response, signed) = build_response(
        login,
        resume,
        compute,
        signer,
        proven.is_none().then_some(&hello),
    )?;
    compute_leg::write(&mut compute.stream, 1, &response).await?;
    drop(response);
    let reply = read_reply(&mut compute.stream, timeout, 2).await?;
    if reply.payload.first() != Some(&AUTH_SWITCH_HEADER) {
        let (reply, ticket) = ticket_then_reply(compute, reply, signer, timeout).await?;
        return verdict(reply, proven).map(|v| Verdict { ticket, ..v });
    }
    let switch =
        AuthSwitchRequest::decode(&reply.payload).map_err(ComputeProtocolError::BadAuthSwitch)?;
    let native = switch.plugin_name == AuthPlugin::MysqlNativePassword.name().as_bytes();
    // server-shim answers the Hello in the switch itself: its scramble, then its proof.
    let switch_proof = native
        .then(|| compute_proof::switch_proof(&switch.plugin_data))
        .flatten();
    let scramble_b = match &switch_proof {
        Some((scramble, _)) => Some(scramble.clone()),
        None => native.then(|| switch.scramble()).flatten(),
    }
    .ok_or(ComputeProtocolError::UnanswerableAuthSwitch)?;
    let mut seq = 3;
    let answer = if let Some((_, proof)) = switch_proof {
        if proven.is_none() {
            hello
                .verify_proof(proof, &scramble_b, signer.ring)
                .map_err(ComputeProtocolError::Unproven)?;
            proven = Some(ProvenIn::AuthSwitch);
        }
        signed.sign_for(&scramble_b, signer)?
    } else if scramble_b == compute.scramble_b {
        // The greeting's own scramble again: MariaDB's stock mysql_native_password asking
        // for a native answer, because the account does not use perceptron_dual (or does not
        // exist). Nothing the relay holds can answer it; a random token finishes the login as
        // an ordinary failed one (ERR 1045 for the client), where a payload would make the
        // server report a malformed handshake.
        let mut token = Zeroizing::new(vec![0u8; authplugin::native_password::NATIVE_TOKEN_LEN]);
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut token);
        token
    } else {
        if proven.is_none() {
            compute_leg::write(&mut compute.stream, seq, &hello.encode()).await?;
            let reply = read_reply(&mut compute.stream, timeout, seq + 1).await?;
            if matches!(reply.payload.first(), Some(0x00 | 0xFF)) {
                // An ERR is the compute refusing the Hello (a plugin that predates the proof
                // reads it as a malformed payload); an OK would be a session nobody proved.
                return verdict(reply, None);
            }
            hello
                .verify_proof(&reply.payload, &scramble_b, signer.ring)
                .map_err(ComputeProtocolError::Unproven)?;
            proven = Some(ProvenIn::ChallengeRound);
            seq += 2;
        }
        signed.sign_for(&scramble_b, signer)?
    };
    compute_leg::write(&mut compute.stream, seq, &answer).await?;
    drop(answer);
    let reply = read_reply(&mut compute.stream, timeout, seq + 1).await?;
    if reply.payload.first() == Some(&AUTH_SWITCH_HEADER) {
        return Err(ComputeProtocolError::SecondAuthSwitch.into());
    }
    let (reply, ticket) = ticket_then_reply(compute, reply, signer, timeout).await?;
    verdict(reply, proven).map(|v| Verdict { ticket, ..v })
}

/// A compute asked for a ticket sends it as AuthMoreData (`0x01`, then the ticket) right
/// before its OK: returns the packet after it and the ticket (none when that packet is an
/// ERR). Anything else is the reply itself. A ticket nobody asked for is a protocol error, as
/// any unexpected packet is.
async fn ticket_then_reply<S: AsyncRead + AsyncWrite + Unpin>(
    compute: &mut GreetedCompute<S>,
    reply: Packet,
    signer: &Signer<'_>,
    timeout: Duration,
) -> Result<(Packet, Option<Zeroizing<Vec<u8>>>), ComputeError> {
    let Some(ticket) = ticket_of(&reply.payload) else {
        return Ok((reply, None));
    };
    if !signer.wants_ticket {
        return Err(ComputeProtocolError::Unexpected(0x01).into());
    }
    let ticket = Zeroizing::new(ticket.to_vec());
    let next = read_reply(
        &mut compute.stream,
        timeout,
        reply.sequence_id.wrapping_add(1),
    )
    .await?;
    match next.payload.first() {
        Some(&0x00) => Ok((next, Some(ticket))),
        // The plugin issues the ticket once the user is verified; the server may still refuse
        // the login after it (ERR 1049 for a database that does not exist): the client gets
        // that ERR, and the ticket of no session is dropped.
        Some(&0xFF) => Ok((next, None)),
        other => Err(ComputeProtocolError::Unexpected(other.copied().unwrap_or(0)).into()),
    }
}

/// The ticket in an AuthMoreData packet: `0x01` followed by a ticket (server-shim), or the
/// ticket alone (a MariaDB server plugin's data packet, which the server prefixes only when
/// it starts with `0x01`, `0xFE` or `0xFF`).
#[must_use]
pub fn ticket_of(payload: &[u8]) -> Option<&[u8]> {
    let ticket = payload.strip_prefix(&[0x01]).unwrap_or(payload);
    ticket
        .starts_with(&authplugin::ticket::MAGIC)
        .then_some(ticket)
}

/// Whether the greeting proves the compute holds the key. A greeting without a proof is not
/// an error (the compute may prove it in a challenge round); one whose proof fails is.
fn greeting_proven<S>(
    compute: &GreetedCompute<S>,
    signer: &Signer<'_>,
) -> Result<bool, ComputeError> {
    let mut greetings = signer
        .greetings
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match compute_proof::verify_greeting(
        &compute.greeting.server_version,
        &compute.scramble_b,
        signer.ring,
        signer.now_ms,
        &mut greetings,
    ) {
        Ok(_) => Ok(true),
        Err(ProofError::Missing) => Ok(false),
        Err(e) => Err(ComputeProtocolError::Unproven(e).into()),
    }
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

/// The verdict, if `reply` is an OK or an ERR. An OK from a compute that has not proven it
/// holds the key is refused: the client's session would go to whoever it is.
fn verdict(reply: Packet, proven_in: Option<ProvenIn>) -> Result<Verdict, ComputeError> {
    match reply.payload.first() {
        Some(0x00) if proven_in.is_none() => {
            Err(ComputeProtocolError::Unproven(ProofError::Missing).into())
        }
        Some(0x00 | 0xFF) => Ok(Verdict {
            reply,
            proven_in,
            ticket: None,
        }),
        Some(&other) => Err(ComputeProtocolError::Unexpected(other).into()),
        None => Err(ComputeProtocolError::Empty.into()),
    }
}

/// What a payload is signed over besides scramble B, kept until the verdict so that a
/// compute's own challenge can be answered. The claim's answer is wiped when this is dropped.
struct Signable {
    answer: Answer,
    user: Vec<u8>,
    database: Vec<u8>,
}

/// The login's answer: the client's, or a reattach's ticket.
enum Answer {
    Login(LoginClaim),
    Resume(Resume),
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
        match &self.answer {
            // The payload carries the client's answer: wiped on every path, errors included.
            Answer::Login(claim) => payload::encode_signed_with(
                claim,
                signer.ring.signing_key(),
                signer.now_ms,
                &binding,
                signer.wants_ticket.then_some(payload::FLAG_WANTS_TICKET),
            )
            .map(Zeroizing::new)
            .map_err(|e| ComputeProtocolError::Payload(e).into()),
            Answer::Resume(r) => resume::encode_signed(
                signer.ring.signing_key(),
                signer.now_ms,
                &r.client_addr,
                &r.ticket,
                &binding,
            )
            .map(Zeroizing::new)
            .ok_or_else(|| ComputeProtocolError::PayloadTooLong.into()),
        }
    }
}

/// The P6 login and what later answers are signed over. Its answer is the payload bound to
/// the greeting's scramble, or `hello` for a compute that has not proven it holds the key.
fn build_response<S>(
    login: ClientLogin,
    resume: Option<Resume>,
    compute: &GreetedCompute<S>,
    signer: &Signer<'_>,
    hello: Option<&Hello>,
) -> Result<(Zeroizing<Vec<u8>>, Signable), ComputeError> {
    let mut p6 = compute_leg::response_for(
        &login,
        compute,
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
    let answer = match resume {
        Some(r) => Answer::Resume(r),
        None => Answer::Login(LoginClaim {
            scramble_a: signer.scramble_a.clone(),
            answer_a: answer,
            client_plugin: plugin,
            client_addr: signer.client_addr.to_owned(),
        }),
    };
    let signable = Signable {
        answer,
        user: p6.username.clone(),
        database,
    };
    let answer = match hello {
        Some(hello) => Zeroizing::new(hello.encode()),
        None => signable.sign_for(&compute.scramble_b, signer)?,
    };
    if p6.client_flag & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA == 0
        && answer.len() > MAX_SHORT_AUTH_RESPONSE
    {
        return Err(ComputeProtocolError::PayloadTooLong.into());
    }
    p6.auth_response = answer;
    Ok((Zeroizing::new(p6.to_bytes()), signable))
}
