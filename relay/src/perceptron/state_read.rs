//! Reading a held session's state from its compute by value ([`crate::session_state`]), on
//! the session's own connection while it is between commands and the relay holds both legs.

use std::time::Duration;

use authplugin::packet::command::COM_QUERY;
use authplugin::packet::err::{ERR_HEADER, ErrPacket};
use authplugin::packet::ok::OK_HEADER;
use authplugin::packet::text_result::{Progress, Row, TextResult, TextResultError};

use super::compute_leg;
use super::outcome::{ComputeError, ComputeProtocolError, ComputeStep};
use crate::packet_io::PacketStream;
use crate::session_state::{
    self, MAX_STATE_BYTES, READ_ONLY_IN_SESSION, SessionState, SystemVariable, Unreadable,
    UserVariables,
};

/// The largest packet of a session state's read: a row of every user variable's string in
/// hexadecimal, at most ([`crate::session_state::MAX_USER_VARIABLES`] strings).
pub const MAX_PACKET: usize = 2
    * crate::session_state::MAX_USER_VARIABLES
    * (2 * crate::session_state::MAX_STRING_BYTES + 64);

/// The login a session's state is checked against: its user name and database.
pub struct Login<'a> {
    /// The user the session logged in as.
    pub user: &'a [u8],
    /// The database the login named, if any.
    pub database: Option<&'a [u8]>,
}

/// Reads the session's state: its database and user, the system variables that differ from
/// a new session's, the user variables exactly. `Ok(Err)`: the compute answered, and the
/// state cannot be carried (the reason).
///
/// # Errors
/// [`ComputeError`]: the connection failed, timed out, or is out of step (an answer that is
/// not the result set asked for); the session cannot go on.
pub async fn read<S>(
    compute: &mut PacketStream<S>,
    deprecate_eof: bool,
    login: &Login<'_>,
    timeout: Duration,
) -> Result<Result<SessionState, Unreadable>, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let session = query(compute, session_state::READ_SESSION, deprecate_eof, timeout)
        .await?
        .and_then(|rows| session_state::session(&rows));
    let (role, system) = match fresh(compute, deprecate_eof, timeout).await? {
        Ok((role, system)) => (Ok(role), Ok(system)),
        Err(why) => (Err(why), Err(why)),
    };
    let listed = query(
        compute,
        session_state::READ_USER_VARIABLES,
        deprecate_eof,
        timeout,
    )
    .await?
    .and_then(|rows| UserVariables::listed(&rows));
    let (session, role, system, listed) = match (session, role, system, listed) {
        (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
        (Err(why), ..) | (_, Err(why), ..) | (.., Err(why), _) | (.., Err(why)) => {
            return Ok(Err(why));
        }
    };
    let user = match listed.exact_query() {
        None => Vec::new(),
        Some(q) => match query(compute, &q, deprecate_eof, timeout).await? {
            Ok(rows) => match listed.exact(&rows) {
                Ok(user) => user,
                Err(why) => return Ok(Err(why)),
            },
            Err(why) => return Ok(Err(why)),
        },
    };
    let mut state =
        match SessionState::new(session, role, (login.user, login.database), system, user) {
            Ok(state) => state,
            Err(why) => return Ok(Err(why)),
        };
    // Every SET a reattach would send is tried on this session first, where it changes
    // nothing: one the compute refuses here (a value it no longer takes, a privilege revoked
    // since the client used it) keeps the session on its compute rather than failing its
    // reattach later, or being skipped there as one the client could not have made.
    if !sets_hold(compute, &mut state, deprecate_eof, timeout).await? {
        return Ok(Err(Unreadable::Inexact));
    }
    Ok(Ok(state))
}

/// Sends `state`'s `SET SESSION`s to the session they were read from, then, where setting
/// one changed another (`max_join_size` turns `sql_big_selects` off), sets that back: whether
/// the compute took them all. A variable no session can set is left out of the state.
async fn sets_hold<S>(
    compute: &mut PacketStream<S>,
    state: &mut SessionState,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<bool, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    for restore in state.restore_system(&[]) {
        match refusal(compute, &restore.payload, timeout).await? {
            None => {}
            Some(code) if READ_ONLY_IN_SESSION.contains(&code) => {
                if let Some(name) = &restore.variable {
                    state.forget_system_variable(name);
                }
            }
            Some(_) => return Ok(false),
        }
    }
    let Ok((_, now)) = fresh(compute, deprecate_eof, timeout).await? else {
        return Ok(false);
    };
    for restore in state.restore_system(&now) {
        match refusal(compute, &restore.payload, timeout).await? {
            None => {}
            Some(code) if READ_ONLY_IN_SESSION.contains(&code) => {}
            Some(_) => return Ok(false),
        }
    }
    Ok(true)
}

/// Sends a statement that is answered with an OK or an ERR: `None` for an OK, else the
/// ERR's code.
async fn refusal<S>(
    compute: &mut PacketStream<S>,
    payload: &[u8],
    timeout: Duration,
) -> Result<Option<u16>, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    compute_leg::write(compute, 0, payload).await?;
    let reply = compute_leg::read(compute, timeout, ComputeStep::Login).await?;
    match reply.payload.first() {
        Some(&OK_HEADER) => Ok(None),
        Some(&ERR_HEADER) => Ok(Some(
            ErrPacket::decode(&reply.payload).map_or(0, |e| e.error_code),
        )),
        other => Err(ComputeProtocolError::Unexpected(other.copied().unwrap_or(0)).into()),
    }
}

/// The role and the system variables of a session, as [`read`] reads them: what a new
/// session is compared with at a reattach ([`SessionState::restore`]). A compute that refuses
/// the role's query has no roles.
///
/// # Errors
/// As [`read`].
pub async fn fresh<S>(
    compute: &mut PacketStream<S>,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Result<(Option<Vec<u8>>, Vec<SystemVariable>), Unreadable>, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let role = match query(compute, session_state::READ_ROLE, deprecate_eof, timeout).await? {
        Ok(rows) => session_state::role(&rows),
        Err(Unreadable::NotAnswered) => Ok(None),
        Err(why) => Err(why),
    };
    let system = query(
        compute,
        session_state::READ_SYSTEM_VARIABLES,
        deprecate_eof,
        timeout,
    )
    .await?
    .and_then(|rows| session_state::system_variables(&rows));
    Ok(role.and_then(|role| Ok((role, system?))))
}

/// Runs one query; its rows, or [`Unreadable`] when the compute refused it (its ERR ends the
/// response) or answered with more than a session's state may hold (read to its end).
///
/// # Errors
/// As [`read`].
pub(super) async fn query<S>(
    compute: &mut PacketStream<S>,
    text: impl AsRef<[u8]>,
    deprecate_eof: bool,
    timeout: Duration,
) -> Result<Result<Vec<Row>, Unreadable>, ComputeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let text = text.as_ref();
    let mut payload = Vec::with_capacity(text.len() + 1);
    payload.push(COM_QUERY);
    payload.extend_from_slice(text);
    compute_leg::write(compute, 0, &payload).await?;
    let mut result = TextResult::new(deprecate_eof, MAX_STATE_BYTES);
    loop {
        let packet = compute_leg::read(compute, timeout, ComputeStep::Login).await?;
        match result.feed(&packet.payload) {
            Ok(Progress::More) => {}
            Ok(Progress::Done) => {
                return Ok(result.finish().map_err(|_| Unreadable::TooLarge));
            }
            Err(TextResultError::Refused(_)) => return Ok(Err(Unreadable::NotAnswered)),
            Err(e) => return Err(ComputeProtocolError::StateRead(e).into()),
        }
    }
}
