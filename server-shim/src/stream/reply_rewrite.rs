//! The replies of opensrv's that the writer replaces once each is whole: which, and with
//! what (the modules beside this one say why).

use super::{field_list, hello_round, status_flags};

/// The longest reply the writer collects to rewrite. The replies it rewrites are short (an OK,
/// an EOF); anything longer is not one of them and passes untouched.
pub(super) const MAX_REWRITTEN_REPLY: usize = 64 * 1024;

/// A reply of opensrv's that the writer replaces once it is whole.
#[derive(Debug)]
pub(super) enum ReplyRewrite {
    /// The reply to COM_FIELD_LIST (see [`super::field_list`]).
    FieldList,
    /// The OK to a command opensrv does not implement: this ERR payload instead (see
    /// [`super::unsupported`]).
    Unsupported(Vec<u8>),
    /// The greeting, with these status flags (see [`super::status_flags`]).
    GreetingStatus(u16),
    /// The AuthSwitchRequest, with this proof after it (see [`super::hello_round`]).
    SwitchProof(Vec<u8>),
    /// The login's OK, with these status flags (see [`super::status_flags`]), after the session's
    /// resumption ticket if it has one.
    LoginOk {
        status: u16,
        ticket: Option<Vec<u8>>,
    },
    /// A statement's OK, with the count of the notes it left.
    OkWarnings(u16),
    /// An OK opensrv writes on its own, with the session's status flags.
    OkStatus(u16),
    /// A statement's ERR, with a code and SQLSTATE of MySQL's that opensrv lacks.
    ErrCode(u16, [u8; 5]),
}

impl ReplyRewrite {
    /// The payload to send in place of opensrv's `payload`; `None` to send it as it is.
    pub(super) fn replacement(&self, payload: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::FieldList => field_list::fixed_reply(payload).map(<[u8]>::to_vec),
            Self::Unsupported(err) => Some(err.clone()),
            Self::GreetingStatus(status) => status_flags::greeting_with_status(payload, *status),
            Self::SwitchProof(proof) => hello_round::switch_with_proof(payload, proof),
            Self::LoginOk { status, .. } => status_flags::ok_with_status(payload, *status),
            Self::OkWarnings(warnings) => status_flags::ok_with_warnings(payload, *warnings),
            Self::OkStatus(status) => status_flags::ok_with_status(payload, *status),
            Self::ErrCode(code, sql_state) => {
                status_flags::err_with_code(payload, *code, sql_state)
            }
        }
    }

    /// A packet to send before the replacement, numbered with the reply's sequence id (the
    /// replacement then takes the next one): the ticket before the login's OK, as
    /// AuthMoreData (`0x01`, then the ticket).
    pub(super) fn packet_before(&self, payload: &[u8]) -> Option<Vec<u8>> {
        let Self::LoginOk {
            ticket: Some(ticket),
            ..
        } = self
        else {
            return None;
        };
        // Only before an OK: an ERR (a refused login) is never preceded by a ticket.
        if payload.first() != Some(&0x00) {
            return None;
        }
        let mut more_data = Vec::with_capacity(1 + ticket.len());
        more_data.push(0x01);
        more_data.extend_from_slice(ticket);
        Some(more_data)
    }
}
