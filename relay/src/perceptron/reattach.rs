//! Reattaching a held session to a new compute (docs/protocol.md, "Resumable sessions"):
//! the compute that issued the session's ticket was stopped under it; at the session's next
//! command the relay wakes the instance, logs in to the new compute with the resume payload
//! (its own HMAC identity over the fresh scramble, plus the ticket), keeps the next ticket,
//! and restores the session's state with statements generated from its values
//! ([`crate::session_state`]), then prepares its statements again.

use std::time::Duration;

use authplugin::AuthPlugin;
use authplugin::packet::ErrPacket;
use authplugin::packet::ok::{EOF_HEADER, OK_HEADER};
use zeroize::Zeroizing;

use super::compute_leg;
use super::dual_auth::{self, Signer};
use super::login::ClientLogin;
use super::outcome::{ComputeError, ComputeProtocolError, ComputeStep, REFUSAL_MESSAGE_BYTES};
use crate::compute_conn::ComputeConnector;
use crate::packet_io::PacketStream;
use crate::session_effects::Statement;
use crate::session_state::{NOT_THE_CLIENTS, Restore};
use crate::statement_ids::NO_STATEMENT;

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

/// A session's login kept for its reattaches, until the compute's first ticket arrives.
pub struct Template {
    login: ClientLogin,
    client_addr: String,
}

impl Resumption {
    /// The template of `login` for later reattaches (the answer is not kept).
    #[must_use]
    pub fn template(login: &ClientLogin, client_addr: &str) -> Template {
        let mut response = login.response.clone();
        response.auth_response = Zeroizing::new(Vec::new());
        Template {
            login: ClientLogin {
                response,
                plugin: AuthPlugin::MysqlNativePassword,
                answer: Zeroizing::new(Vec::new()),
                last_sequence_id: 0,
                effective_flag: login.effective_flag,
                tls: login.tls,
                connection_id: login.connection_id,
            },
            client_addr: client_addr.to_owned(),
        }
    }

    /// A resumption from a [`Self::template`] and the compute's first ticket.
    #[must_use]
    pub fn new(template: Template, ticket: Zeroizing<Vec<u8>>) -> Self {
        Self {
            login: template.login,
            client_addr: template.client_addr,
            ticket,
        }
    }

    /// The login a session's state is checked against (its user and database).
    #[must_use]
    pub fn login(&self) -> super::state_read::Login<'_> {
        super::state_read::Login {
            user: &self.login.response.username,
            database: self.login.response.database.as_deref(),
        }
    }

    /// Whether the ticket has expired now, read from its claims (the relay cannot verify a
    /// ticket, but its expiry is in clear: a compute refuses it after that anyway); a ticket
    /// that does not decode counts as expired.
    #[must_use]
    pub fn expired(&self) -> bool {
        authplugin::ticket::decode(&self.ticket)
            .ok()
            .is_none_or(|(_, claims)| crate::clock::now_ms() >= claims.expires_ms)
    }
}

/// What a reattach restores: the session's state, and its open prepared statements.
pub struct SessionState<'a> {
    /// The state read by value from the old compute; `None`: never read, the session is as
    /// its login left it, and so is the new login.
    pub state: Option<&'a crate::session_state::SessionState>,
    /// The `COM_SET_OPTION` the session last sent, if any.
    pub set_option: Option<[u8; 3]>,
    /// Each statement: the client's id, the `COM_STMT_PREPARE` payload, and its parameter and
    /// column counts as first prepared.
    pub statements: &'a [Statement<'a>],
    /// `CLIENT_DEPRECATE_EOF` was negotiated: no EOF after definitions.
    pub deprecate_eof: bool,
}

/// A reattached connection: in the command phase with the session's state.
pub struct Reattached<S> {
    /// The connection to the new compute.
    pub stream: PacketStream<S>,
    /// The compute proved the key in its greeting.
    pub proven_in_greeting: bool,
    /// Each statement's client id and the new compute's id for it.
    pub statement_ids: Vec<(u32, u32)>,
    /// The id the new compute knows the session by (`crate::kill_ids`): its greeting's, or
    /// none where it took the relay's.
    pub compute_id: Option<u32>,
}

/// Logs in to a new compute with the resume payload and restores `state`: the commands sent
/// again, the statements prepared again; on success `resumption` holds the compute's next
/// ticket. The compute proves the key first, as for any login (in its greeting, or in a
/// challenge round on MariaDB).
///
/// # Errors
/// [`ComputeError`]: the compute could not be reached, did not prove the key, refused the
/// reattach ([`ComputeProtocolError::Refused`], with what it said), sent no next ticket, refused
/// a restoring command or a statement, or prepared a statement with another shape
/// ([`ComputeProtocolError::StatementChanged`]).
pub async fn reattach<C: ComputeConnector>(
    connector: &C,
    resumption: &mut Resumption,
    signer: &Signer<'_>,
    state: &SessionState<'_>,
    timeout: Duration,
) -> Result<Reattached<C::Stream>, ComputeError> {
    let (stream, _) = compute_leg::connect(connector, timeout).await?;
    let mut compute = compute_leg::read_greeting(stream, timeout).await?;
    compute_leg::check_capabilities(&resumption.login, &compute.greeting)?;
    if connector.wants_tls() {
        compute = compute_leg::start_tls(connector, compute, &resumption.login, timeout).await?;
    }
    let template = ClientLogin {
        response: resumption.login.response.clone(),
        answer: Zeroizing::new(Vec::new()),
        ..resumption.login
    };
    let verdict = dual_auth::resume(
        &mut compute,
        template,
        &resumption.client_addr,
        &resumption.ticket,
        signer,
        timeout,
    )
    .await?;
    if !verdict.accepted() {
        return Err(refused(&verdict.reply.payload));
    }
    let in_greeting = verdict
        .proven_in
        .is_some_and(dual_auth::ProvenIn::repeatable);
    resumption.ticket = verdict
        .ticket
        .ok_or(ComputeProtocolError::Unexpected(0x00))?;
    let compute_id = (!verdict
        .proven_in
        .is_some_and(dual_auth::ProvenIn::takes_the_relays_id))
    .then_some(compute.greeting.connection_id);
    // Commands number their packets from 0 again: the SSLRequest's offset was the login's.
    let mut stream = compute.stream.with_sequence_offset(0);
    if let Some(option) = state.set_option {
        compute_leg::write(&mut stream, 0, &option).await?;
        let reply = compute_leg::read(&mut stream, timeout, ComputeStep::Login).await?;
        if !matches!(reply.payload.first(), Some(&(OK_HEADER | EOF_HEADER))) {
            return Err(refused(&reply.payload));
        }
    }
    if let Some(session) = state.state {
        // The new session as its login left it, compared with the state.
        let (role, fresh) = super::state_read::fresh(&mut stream, state.deprecate_eof, timeout)
            .await?
            .map_err(ComputeProtocolError::FreshStateUnreadable)?;
        send_restores(
            &mut stream,
            &session.restore(role.as_deref(), &fresh),
            timeout,
        )
        .await?;
        // Once more for the variables that setting others changed.
        let (_, now) = super::state_read::fresh(&mut stream, state.deprecate_eof, timeout)
            .await?
            .map_err(ComputeProtocolError::FreshStateUnreadable)?;
        send_restores(&mut stream, &session.restore_system(&now), timeout).await?;
    }
    let mut statement_ids = Vec::with_capacity(state.statements.len());
    for statement in state.statements {
        let id = match prepare(&mut stream, statement, state.deprecate_eof, timeout).await? {
            Some(id) => id,
            // The new compute cannot prepare it (its table was dropped since): the session
            // goes on, and a command naming it reaches no statement, so the client gets the
            // compute's "unknown prepared statement" where the old compute would have
            // refused to execute it too.
            None => {
                tracing::info!(
                    statement = statement.id,
                    "a prepared statement could not be prepared again; using it gets an error"
                );
                NO_STATEMENT
            }
        };
        statement_ids.push((statement.id, id));
    }
    Ok(Reattached {
        stream,
        proven_in_greeting: in_greeting,
        statement_ids,
        compute_id,
    })
}

/// Sends each statement of a restore; a variable's `SET` the compute refuses as one the
/// client could not have made ([`NOT_THE_CLIENTS`]) is left as the new session has it.
async fn send_restores<S>(
    stream: &mut PacketStream<S>,
    restores: &[Restore],
    timeout: Duration,
) -> Result<(), ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    // A statement refused that may succeed after the next one, sent again then.
    let mut again: Option<&Restore> = None;
    for restore in restores {
        compute_leg::write(stream, 0, &restore.payload).await?;
        let reply = compute_leg::read(stream, timeout, ComputeStep::Login).await?;
        if reply.payload.first() == Some(&OK_HEADER) {
            if let Some(earlier) = again.take() {
                compute_leg::write(stream, 0, &earlier.payload).await?;
                let reply = compute_leg::read(stream, timeout, ComputeStep::Login).await?;
                if reply.payload.first() != Some(&OK_HEADER) {
                    return Err(refused(&reply.payload));
                }
            }
            continue;
        }
        if restore.again_after_next && again.is_none() {
            again = Some(restore);
            continue;
        }
        let not_the_clients = ErrPacket::decode(&reply.payload)
            .is_ok_and(|e| NOT_THE_CLIENTS.contains(&e.error_code));
        if !(restore.skippable && not_the_clients) {
            return Err(refused(&reply.payload));
        }
        tracing::debug!(
            statement = %String::from_utf8_lossy(restore.payload.get(1..).unwrap_or_default()),
            "a setting the client could not have made itself is left as the new session has it"
        );
    }
    match again {
        // Refused, and the statement after it did not help.
        Some(_) => Err(ComputeProtocolError::Unexpected(0xFF).into()),
        None => Ok(()),
    }
}

/// Prepares `statement` again; returns the compute's id for it, or `None` when the compute
/// refuses to prepare it (an ERR: a table it names was dropped since, say).
///
/// # Errors
/// [`ComputeError`]: the compute went away, answered with something else than
/// `COM_STMT_PREPARE_OK` or ERR, or prepared the statement with another shape
/// ([`ComputeProtocolError::StatementChanged`]).
async fn prepare<S>(
    stream: &mut PacketStream<S>,
    statement: &Statement<'_>,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Option<u32>, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    compute_leg::write(stream, 0, statement.payload).await?;
    let reply = compute_leg::read(stream, timeout, ComputeStep::Login).await?;
    if ErrPacket::decode(&reply.payload).is_ok() {
        return Ok(None);
    }
    let Some((id, shape)) = prepare_ok(&reply.payload) else {
        return Err(refused(&reply.payload));
    };
    if shape != statement.shape {
        return Err(ComputeProtocolError::StatementChanged(statement.id).into());
    }
    // The definitions the client already has: parameters, then columns, each run followed
    // by an EOF unless CLIENT_DEPRECATE_EOF.
    let (columns, params) = shape;
    let runs = [params, columns];
    let definitions: usize = runs
        .iter()
        .map(|&n| usize::from(n) + usize::from(n > 0 && !deprecate_eof))
        .sum();
    for _ in 0..definitions {
        let packet = compute_leg::read(stream, timeout, ComputeStep::Login).await?;
        if packet.payload.first() == Some(&0xFF) {
            return Err(refused(&packet.payload));
        }
    }
    Ok(Some(id))
}

/// `COM_STMT_PREPARE_OK`'s statement id and (columns, parameters); `None` for anything else.
fn prepare_ok(payload: &[u8]) -> Option<(u32, (u16, u16))> {
    match payload {
        [0x00, a, b, c, d, c0, c1, p0, p1, ..] => Some((
            u32::from_le_bytes([*a, *b, *c, *d]),
            (
                u16::from_le_bytes([*c0, *c1]),
                u16::from_le_bytes([*p0, *p1]),
            ),
        )),
        _ => None,
    }
}

/// The compute's refusal: an ERR with what it said, or anything else where an OK belonged.
fn refused(payload: &[u8]) -> ComputeError {
    match ErrPacket::decode(payload) {
        Ok(err) => ComputeProtocolError::Refused {
            code: err.error_code,
            message: err
                .error_message
                .iter()
                .copied()
                .take(REFUSAL_MESSAGE_BYTES)
                .collect(),
        },
        Err(_) => ComputeProtocolError::Unexpected(payload.first().copied().unwrap_or(0)),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prepares the client's statement 5 (one column, no parameters, `CLIENT_DEPRECATE_EOF`)
    /// against a compute that answers with `replies`.
    async fn prepare_against(replies: Vec<Vec<u8>>) -> Result<Option<u32>, ComputeError> {
        let (relay_side, compute_side) = tokio::io::duplex(1 << 16);
        let compute = tokio::spawn(async move {
            let mut ps = PacketStream::new(compute_side, 1 << 20);
            let _ = ps.read_packet().await;
            for (seq, reply) in (1u8..).zip(&replies) {
                ps.write_packet(seq, reply).await.unwrap();
            }
            ps
        });
        let mut stream = PacketStream::new(relay_side, 1 << 20);
        let statement = Statement {
            id: 5,
            payload: b"\x16SELECT a FROM t",
            shape: (1, 0),
        };
        let prepared = prepare(&mut stream, &statement, true, Duration::from_secs(5)).await;
        drop(compute.await);
        prepared
    }

    fn prepare_ok(id: u32, columns: u16, params: u16) -> Vec<u8> {
        let mut p = vec![0x00];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&columns.to_le_bytes());
        p.extend_from_slice(&params.to_le_bytes());
        p.extend_from_slice(&[0, 0, 0]);
        p
    }

    /// A statement whose table was dropped since cannot be prepared again: the reattach goes
    /// on without it (a command naming it gets "unknown prepared statement"), where it used
    /// to end the session with ERR 1927 (mysql-connector-python's suite).
    #[tokio::test]
    async fn a_statement_the_compute_cannot_prepare_again_is_left_out_not_fatal() {
        let gone = ErrPacket::new(1146, b"42S02", "Table 't.t' doesn't exist").to_bytes();
        assert!(matches!(prepare_against(vec![gone]).await, Ok(None)));
        let definition =
            b"\x03def\x01t\x01t\x01t\x01a\x01a\x0c\x3f\x00\x0b\x00\x00\x00\x03\x00\x00\x00\x00\x00"
                .to_vec();
        assert!(matches!(
            prepare_against(vec![prepare_ok(9, 1, 0), definition.clone()]).await,
            Ok(Some(9))
        ));
        // Another shape is still fatal: the client's idea of the statement is wrong.
        assert!(matches!(
            prepare_against(vec![prepare_ok(9, 2, 0), definition.clone(), definition]).await,
            Err(ComputeError::Protocol(
                ComputeProtocolError::StatementChanged(5)
            ))
        ));
    }
}
