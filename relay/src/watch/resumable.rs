//! The watch's side of a resumable session spliced below TCP (docs/kernel-splice.md,
//! *Resumable sessions*): what the compute said of it stands for the commands it did not see.

use authplugin::packet::capabilities::SERVER_STATUS_IN_TRANS;

use super::CommandWatch;

impl CommandWatch<'_> {
    /// A resumable session taken back from the splice below TCP, last used `quiet_for` ago,
    /// its commands there unseen: its status flags if the compute's last packet gave them,
    /// and what the compute says of it (`session_state::evidence`): its transaction, why it
    /// is pinned for good if it is. Its state is unread until [`Self::state_read`]; it goes
    /// back at the end of the response to its next command that counts as use.
    pub fn taken_back_resumable(
        &mut self,
        (flags, quiet_for): (Option<u16>, std::time::Duration),
        (in_transaction, pinned): (bool, Option<&'static str>),
    ) {
        self.guard.used_ago(quiet_for);
        let flags = flags.ok_or_else(|| self.conversation.status_flags());
        self.in_transaction_said(flags, in_transaction);
        self.unchecked = flags.is_err();
        (self.splice_after, self.unread) = (Some(1), true);
        self.log.seen_by_compute(in_transaction, pinned);
    }

    /// The compute's counters were read (`session_state::evidence`) with nothing pending
    /// (`true`), or are not known from here (`false`: not read, the compute did not say).
    pub const fn counters_read(&mut self, known: bool) {
        self.counters_known = known;
    }

    /// What the compute said of a session taken back unchecked, once between commands
    /// (`resumable_splice::check`): its transaction, why it is pinned for good if it is.
    pub fn checked_by_compute(&mut self, (in_transaction, pinned): (bool, Option<&'static str>)) {
        self.unchecked = false;
        self.log.seen_by_compute(in_transaction, pinned);
        let flags = self.conversation.status_flags();
        let known = self.conversation.status_flags_known();
        self.in_transaction_said(if known { Ok(flags) } else { Err(flags) }, in_transaction);
    }

    /// Sets the session's status flags to `flags` (`Err`: as last known, not the server's
    /// now, so still unknown until its next OK or EOF), their transaction bit as the compute
    /// said.
    fn in_transaction_said(&mut self, flags: Result<u16, u16>, in_transaction: bool) {
        let in_trans = SERVER_STATUS_IN_TRANS * u16::from(in_transaction);
        let (Ok(other) | Err(other)) = flags;
        self.conversation
            .set_status_flags(other & !SERVER_STATUS_IN_TRANS | in_trans);
        if flags.is_err() {
            self.conversation.forget_status_flags();
        }
    }

    /// Whether the compute's counters are to be checked against their last reading before
    /// the state read: the session was taken back from the splice unchecked
    /// ([`Self::taken_back_resumable`] without its flags), or every command since that
    /// reading was one that leaves them as they were (so any that moved them anyway, such as
    /// a function run by a `SELECT` making a temporary table, pins the session).
    pub const fn to_check(&self) -> bool {
        self.unchecked || self.counters_known
    }
}
