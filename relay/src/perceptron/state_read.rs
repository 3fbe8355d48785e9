//! Reading a held session's state from its compute by value ([`crate::session_state`]), on
//! the session's own connection while it is between commands and the relay holds both legs.

use std::time::Duration;

use authplugin::packet::command::COM_QUERY;
use authplugin::packet::text_result::{Progress, Row, TextResult, TextResultError};

use super::compute_leg;
use super::outcome::{ComputeError, ComputeProtocolError, ComputeStep};
use crate::packet_io::PacketStream;
use crate::session_state::{
    self, MAX_STATE_BYTES, SessionState, SystemVariable, Unreadable, UserVariables,
};

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
    let session = match query(compute, session_state::READ_SESSION, deprecate_eof, timeout).await? {
        Ok(rows) => session_state::session(&rows),
        Err(why) => Err(why),
    };
    let (role, system) = match fresh(compute, deprecate_eof, timeout).await? {
        Ok((role, system)) => (Ok(role), Ok(system)),
        Err(why) => (Err(why), Err(why)),
    };
    let listed = match query(
        compute,
        session_state::READ_USER_VARIABLES,
        deprecate_eof,
        timeout,
    )
    .await?
    {
        Ok(rows) => UserVariables::listed(&rows),
        Err(why) => Err(why),
    };
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
    Ok(SessionState::new(
        session,
        role,
        (login.user, login.database),
        system,
        user,
    ))
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
    let system = match query(
        compute,
        session_state::READ_SYSTEM_VARIABLES,
        deprecate_eof,
        timeout,
    )
    .await?
    {
        Ok(rows) => session_state::system_variables(&rows),
        Err(why) => Err(why),
    };
    Ok(role.and_then(|role| Ok((role, system?))))
}

/// Runs one query; its rows, or [`Unreadable`] when the compute refused it (its ERR ends the
/// response) or answered with more than a session's state may hold (read to its end).
async fn query<S>(
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
