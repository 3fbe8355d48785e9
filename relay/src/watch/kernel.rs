//! The watch's side of the kernel splice (docs/kernel-splice.md): when a session goes to it,
//! at the end of which response, and how it comes back.

use super::{CommandWatch, Step};

impl CommandWatch<'_> {
    /// The session was taken back from the kernel splice between commands
    /// (docs/kernel-splice.md); it goes back to the kernel at its next command that counts
    /// as use. Unless `flags_known` (read off the compute's last packet), its status flags
    /// are unknown until the compute's next OK or EOF: until then a ping while parked thaws
    /// the compute.
    pub fn taken_back_from_kernel(&mut self, flags_known: bool) {
        if !flags_known {
            self.conversation.forget_status_flags();
        }
        self.from_kernel = true;
    }

    /// The session was taken back from the splice below TCP (docs/kernel-splice.md): it goes
    /// back at the end of the response to its next command that counts as use. Its status
    /// flags as [`Self::taken_back_from_kernel`].
    pub fn taken_back_below_tcp(&mut self, flags_known: bool) {
        if !flags_known {
            self.conversation.forget_status_flags();
        }
        self.splice_after = Some(1);
    }

    /// The session goes to the kernel splice at the end of a response, once `commands` more
    /// commands that count as use have been sent: the pump takes the compute's chunk that
    /// ends it ([`super::Reaction::Take`]; then the compute has nothing more to send and the client
    /// waits for that chunk, so neither socket holds a byte the kernel could overtake), and
    /// the caller splices the session, writes [`Self::take_chunk`] and carries it
    /// (docs/kernel-splice.md, *When a session is spliced*).
    pub const fn splice_after(&mut self, commands: u8) {
        self.splice_after = Some(commands);
    }

    /// The session stays on the pump from here: no chunk is taken for a splice.
    pub const fn stay_on_pump(&mut self) {
        self.splice_after = None;
    }

    /// The chunk taken at the end of a response for the kernel splice, with the status flags
    /// it left the session in.
    pub fn take_chunk(&mut self) -> Option<(Box<[u8]>, u16)> {
        let chunk = self.taken.take()?;
        Some((chunk, self.conversation.status_flags()))
    }

    /// Whether the chunk just followed ends a response, at which the session may go to the
    /// kernel splice ([`Self::splice_after`]).
    pub(super) fn goes_to_kernel(&self) -> bool {
        self.splice_after == Some(0)
            && self.conversation.phase() == Step::Idle
            && self.conversation.status_flags_known()
            && self.translation.is_none()
            && !self.detached
            && !(self.ticketed
                && (self.log.prepares() || self.log.pipelines() || !self.counters_known))
    }
}
