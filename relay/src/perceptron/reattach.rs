//! Reattaching a held session to a new compute (docs/protocol.md, "Resumable sessions"):
//! the compute that issued the session's ticket was stopped under it; at the session's next
//! command the relay wakes the instance, logs in to the new compute with the resume payload
//! (its own HMAC identity over the fresh scramble, plus the ticket), keeps the next ticket,
//! and sends again the commands that set the session's state, in order.

use std::time::Duration;

use authplugin::packet::HandshakeResponse41;
use authplugin::packet::capabilities::CLIENT_CONNECT_WITH_DB;
use authplugin::payload::{Binding, PLUGIN_NAME};
use authplugin::{AuthPlugin, KeyRing, resume};
use zeroize::Zeroizing;

use super::compute_leg::{self, GreetedCompute};
use super::dual_auth::ticket_of;
use super::login::ClientLogin;
use super::outcome::{ComputeError, ComputeProtocolError, ComputeStep};
use crate::compute_conn::ComputeConnector;
use crate::packet_io::PacketStream;

/// What a held session needs to be reattached: its login as the compute saw it (without any
/// answer) and the compute's latest ticket. Kept in memory for this connection only.
pub struct Resumption {
    /// The client's login, its answer emptied.
    login: ClientLogin,
    /// The client's address, as the first login asserted it.
    client_addr: String,
    /// The compute's latest ticket; wiped when replaced or dropped.
    ticket: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumption")
            .field("client_addr", &self.client_addr)
            .finish_non_exhaustive()
    }
}

impl Resumption {
    /// The template of `login` for later reattaches (the answer is not kept).
    #[must_use]
    pub fn template(
        login: &ClientLogin,
        client_addr: &str,
    ) -> (HandshakeResponse41, u32, bool, String) {
        let mut response = login.response.clone();
        response.auth_response = Zeroizing::new(Vec::new());
        (
            response,
            login.effective_flag,
            login.tls,
            client_addr.to_owned(),
        )
    }

    /// A resumption from a [`Self::template`] and the compute's first ticket.
    #[must_use]
    pub fn new(
        (response, effective_flag, tls, client_addr): (HandshakeResponse41, u32, bool, String),
        ticket: Zeroizing<Vec<u8>>,
    ) -> Self {
        Self {
            login: ClientLogin {
                response,
                plugin: AuthPlugin::MysqlNativePassword,
                answer: Zeroizing::new(Vec::new()),
                last_sequence_id: 0,
                effective_flag,
                tls,
            },
            client_addr,
            ticket,
        }
    }
}

/// Logs in to a new compute with the resume payload and replays `commands`; on success the
/// connection is in the command phase with the session's state, and `resumption` holds the
/// compute's next ticket.
///
/// # Errors
/// [`ComputeError`]: the compute could not be reached, refused the reattach (its ERR, as
/// [`ComputeProtocolError::Unexpected`]), did not prove the key, or refused a replayed
/// command.
pub async fn reattach<C: ComputeConnector>(
    connector: &C,
    resumption: &mut Resumption,
    ring: &KeyRing,
    greetings: &std::sync::Mutex<authplugin::ReplayGuard>,
    commands: &[Vec<u8>],
    timeout: Duration,
) -> Result<PacketStream<C::Stream>, ComputeError> {
    let (stream, _) = compute_leg::connect(connector, timeout).await?;
    let mut compute = compute_leg::read_greeting(stream, timeout).await?;
    compute_leg::check_capabilities(&resumption.login, &compute.greeting)?;
    // The ticket goes only to a compute that proves it holds the relay's key, as a login's
    // payload does (server-shim proves it in its greeting).
    {
        let mut greetings = greetings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        authplugin::compute_proof::verify_greeting(
            &compute.greeting.server_version,
            &compute.scramble_b,
            ring,
            crate::clock::now_ms(),
            &mut greetings,
        )
        .map_err(ComputeProtocolError::Unproven)?;
    }
    if connector.wants_tls() {
        compute = compute_leg::start_tls(connector, compute, &resumption.login, timeout).await?;
    }
    let response = resume_response(&compute, resumption, ring)?;
    compute_leg::write(&mut compute.stream, 1, &response).await?;
    let reply = compute_leg::read(&mut compute.stream, timeout, ComputeStep::Login).await?;
    let ticket = ticket_of(&reply.payload)
        .map(|t| Zeroizing::new(t.to_vec()))
        .ok_or_else(|| refused(&reply.payload))?;
    let ok = compute_leg::read(&mut compute.stream, timeout, ComputeStep::Login).await?;
    if ok.payload.first() != Some(&0x00) {
        return Err(refused(&ok.payload));
    }
    resumption.ticket = ticket;
    let mut stream = compute.stream;
    for command in commands {
        compute_leg::write(&mut stream, 0, command).await?;
        let reply = compute_leg::read(&mut stream, timeout, ComputeStep::Login).await?;
        if reply.payload.first() != Some(&0x00) {
            return Err(refused(&reply.payload));
        }
    }
    Ok(stream)
}

/// The HandshakeResponse41 of a reattach: the first login's fields, the resume payload as
/// its answer, bound to this greeting's scramble.
fn resume_response<S>(
    compute: &GreetedCompute<S>,
    resumption: &Resumption,
    ring: &KeyRing,
) -> Result<Zeroizing<Vec<u8>>, ComputeError> {
    let mut p6 = compute_leg::response_for(
        &resumption.login,
        compute,
        PLUGIN_NAME,
        Zeroizing::new(Vec::new()),
    );
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
    let payload = resume::encode_signed(
        ring.signing_key(),
        crate::clock::now_ms(),
        &resumption.client_addr,
        &resumption.ticket,
        &binding,
    )
    .ok_or(ComputeProtocolError::PayloadTooLong)?;
    p6.auth_response = Zeroizing::new(payload);
    Ok(Zeroizing::new(p6.to_bytes()))
}

/// The compute's refusal (an ERR, or anything else where an OK or ticket belonged).
fn refused(payload: &[u8]) -> ComputeError {
    ComputeProtocolError::Unexpected(payload.first().copied().unwrap_or(0)).into()
}
