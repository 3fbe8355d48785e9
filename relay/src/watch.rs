//! The command watch of a pumped connection, on either route (docs/parking.md, *Sessions across a
//! stop*): a [`CommandWatch`] follows its commands ([`Conversation`]) and tells its instance,
//! through the connection's [`ConnectionGuard`], only what the instance needs: whether the
//! connection is between commands, whether a command was sent or its response ended (the idle
//! clock), and whether the session could be carried to a new compute, or why not. It also answers
//! for a frozen or stopped compute (`COM_PING`, a learnt keepalive query), asks for the session's
//! state to be read by value once it has been between commands for a while after a change
//! ([`Observer::step_aside_at`], [`crate::session_state`]), keeps it for a reattach, translates
//! statement ids after one, and takes the response at which the session goes to the kernel splice.
//!
//! `COM_PING` is no use: a pool's keepalive neither restarts the idle clock nor thaws a
//! parked compute.

use authplugin::packet::capabilities::SERVER_STATUS_IN_TRANS;
use authplugin::packet::command::{COM_PING, COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA};

use crate::control::{ConnectionGuard, NotResumable, SessionLook};
use crate::conversation::{Conversation, Mark, Phase as Step, Untracked};
use crate::kill_ids;
use crate::passthrough::{Observer, Reaction};
use crate::session_effects::{self, Effect};
use crate::session_state::{SessionState, Unreadable};
use crate::statement_ids::{StatementIds, Untranslatable};

mod kernel;
mod resumable;

/// Follows one connection's commands for its instance (see the module doc).
pub struct CommandWatch<'a> {
    guard: &'a mut ConnectionGuard,
    conversation: Conversation,
    /// [`Conversation::activity`] at the last look.
    activity: u64,
    /// A command that counts was sent since the connection was last idle.
    used: bool,
    /// A keepalive query's response being recorded: the query's packet and the response so
    /// far.
    /// Boxed, as `learnt` and `pending`: most of the time there is none, and an idle
    /// connection's memory is its whole cost.
    learning: Option<Box<(Vec<u8>, Vec<u8>)>>,
    /// The last keepalive query answered by the compute on this connection, to answer it
    /// again while parked.
    learnt: Option<Box<Learnt>>,
    /// The compute issued this session a ticket: it may be stopped under it and reattached
    /// (`resumable_sessions`). Only then are its commands classified.
    ticketed: bool,
    /// What the session's commands left that the relay follows (pins, transactions,
    /// statements).
    log: session_effects::Log,
    /// The session's state as last read from its compute; `None` until then: the session is
    /// as its login left it, as a new login with the same handshake is (its character set
    /// is the handshake's, not the server's default).
    state: Option<SessionState>,
    /// A command that may have changed the session's state was sent since it was last read:
    /// the session is not carried until it is read again.
    unread: bool,
    /// Why the state last read cannot be carried, if it cannot.
    unreadable: Option<Unreadable>,
    /// A read was due while the compute was not running: not tried again before the next
    /// command (a read never thaws a compute).
    read_skipped: bool,
    /// Since when the session is between commands that count as use (pings do not).
    idle_since: Option<tokio::time::Instant>,
    /// `force_reattach_every`: commands that count since the last forced reattach, and
    /// whether one is due now.
    forced: (u32, bool),
    /// The command awaiting its response, when what it sets is kept once accepted, and the
    /// response's first bytes so far.
    pending: Option<Box<AwaitingReply>>,
    /// The compute was stopped under this session; it waits for its next command.
    detached: bool,
    /// After a reattach that gave the session's statements other ids: their translation
    /// (boxed: most sessions never need one, and a parked session's size is its cost).
    translation: Option<Box<Translation>>,
    /// Taken back from the kernel splice for parking: it goes back at its next command
    /// that counts as use ([`Observer::hand_back`]).
    from_kernel: bool,
    /// A resumable session's counters were read from its compute since its last command
    /// that may move them ([`Self::counters_read`]): it may be spliced.
    counters_known: bool,
    /// Taken back from the splice where the compute's last packet could not be read: what
    /// it did there is to be checked before its next state read ([`Self::unchecked`]).
    unchecked: bool,
    /// A command that counts as use was sent since this watch began.
    commanded: bool,
    /// Commands still to go before the session goes to the kernel splice at the end of a
    /// response ([`Self::splice_after`]); `None`: not this way.
    splice_after: Option<u8>,
    /// The compute's chunk that ended the response at which the session goes to the kernel
    /// ([`Reaction::Take`]), for the caller to write once it is spliced.
    taken: Option<Box<[u8]>>,
}

/// A command whose effect is kept once the compute accepts it, and its reply's first bytes so
/// far.
#[derive(Debug)]
struct AwaitingReply {
    payload: Vec<u8>,
    effect: Effect,
    head: Vec<u8>,
}

/// Statement ids being translated on a reattached session.
#[derive(Debug, Default)]
struct Translation {
    ids: StatementIds,
    /// Where statement ids are in the chunk at hand (kept to reuse its allocation).
    marks: Vec<Mark>,
    /// Per direction (client, compute): a statement id cut by the end of the last chunk,
    /// held back by the pump and seen again at the start of the next one.
    held: [Option<Held>; 2],
}

/// A packet whose statement id was cut by the end of a chunk ([`Reaction::Hold`]).
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Where it begins in the next chunk (its payload, the held bytes' first).
    mark: Mark,
    /// Bytes at the next chunk's start that the conversation has already seen.
    fed: usize,
}

/// A keepalive query and the compute's whole response to it on this connection.
#[derive(Debug)]
struct Learnt {
    query: Vec<u8>,
    response: Vec<u8>,
    /// The session's status flags after it: the answer is replayed only while they hold.
    status_flags: u16,
}

/// The largest keepalive response recorded (a one-row result is about 60 bytes).
const MAX_LEARNT_RESPONSE: usize = 4096;

impl std::fmt::Debug for CommandWatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandWatch")
            .field("phase", &self.conversation.phase())
            .finish_non_exhaustive()
    }
}

impl<'a> CommandWatch<'a> {
    /// Follows `guard`'s connection's commands from here on; it has just logged in, with
    /// `capabilities` and MariaDB's `mariadb_capabilities` negotiated and `status_flags` in
    /// the login's OK. Until this is called the connection counts as busy.
    pub fn new(
        guard: &'a mut ConnectionGuard,
        capabilities: u32,
        mariadb_capabilities: u32,
        status_flags: u16,
    ) -> Self {
        let mut watch = Self {
            guard,
            conversation: Conversation::new(capabilities, mariadb_capabilities, status_flags),
            activity: 0,
            used: false,
            learning: None,
            learnt: None,
            ticketed: false,
            log: session_effects::Log::default(),
            state: None,
            unread: false,
            unreadable: None,
            read_skipped: false,
            idle_since: None,
            forced: (0, false),
            pending: None,
            detached: false,
            translation: None,
            from_kernel: false,
            counters_known: false,
            unchecked: false,
            commanded: false,
            splice_after: None,
            taken: None,
        };
        watch.settle(true);
        watch
    }
}

impl CommandWatch<'_> {
    /// Brings the instance's facts up to date with the conversation. `use_counts`: whether
    /// the bytes just fed may count as use (not a keepalive query).
    fn settle(&mut self, use_counts: bool) {
        let idle = self.conversation.phase() == Step::Idle;
        let activity = self.conversation.activity();
        let sent = use_counts && activity != self.activity;
        self.activity = activity;
        self.commanded |= sent;
        self.used |= sent;
        if sent {
            self.splice_after = self.splice_after.map(|n| n.saturating_sub(1));
        }
        let ended = idle && self.used;
        if ended {
            self.used = false;
            self.count_forced_boundary();
        }
        // Pings neither start nor end the wait before a state read: they are no use.
        if sent {
            self.idle_since = None;
        } else if ended || (idle && self.idle_since.is_none()) {
            self.idle_since = Some(tokio::time::Instant::now());
        }
        let resumable = idle && self.resumable();
        let holding = (idle && !resumable && self.guard.keeps_sessions_resumable())
            .then(|| self.why_not_resumable());
        self.guard.report(SessionLook {
            idle,
            sent,
            ended,
            resumable,
            holding,
            quitting: self.conversation.phase() == Step::Untracked(Untracked::Quit),
        });
    }
}

impl CommandWatch<'_> {
    /// The compute issued this session a ticket (`resumable_sessions`).
    pub fn ticketed(&mut self) {
        self.ticketed = true;
        self.settle(false);
    }

    /// Whether the session could be carried to a new compute now: ticketed, nothing pinned
    /// it, no transaction open, its state read since its last change and fit to carry.
    fn resumable(&self) -> bool {
        self.ticketed
            && self.log.pinned().is_none()
            && self.conversation.status_flags() & SERVER_STATUS_IN_TRANS == 0
            && !self.unread
            && !self.unchecked
            && self.unreadable.is_none()
    }

    /// Why the session could not be carried to a new compute now (it is not
    /// [`Self::resumable`]).
    fn why_not_resumable(&self) -> NotResumable {
        if !self.ticketed {
            return NotResumable::NoTicket;
        }
        if let Some(why) = self.log.pinned() {
            return NotResumable::Pinned(why);
        }
        if self.conversation.status_flags() & SERVER_STATUS_IN_TRANS != 0 {
            return NotResumable::Transaction;
        }
        match self.unreadable {
            Some(why) => NotResumable::Pinned(why.as_str()),
            None => NotResumable::Unread,
        }
    }

    /// The session's state as last read, to restore on a new compute; `None`: never read,
    /// as its login left it.
    pub const fn state(&self) -> Option<&SessionState> {
        self.state.as_ref()
    }

    /// The `COM_SET_OPTION` that restores the session's multi-statements option, if it set
    /// one.
    pub fn set_option(&self) -> Option<[u8; 3]> {
        self.log.set_option()
    }

    /// With `force_reattach_every`: one more command ended; at every Nth, a reattach is due,
    /// or, for a session that could not be carried now, the boundary is logged as pinned.
    fn count_forced_boundary(&mut self) {
        let Some(every) = self.guard.force_reattach_every().filter(|_| self.ticketed) else {
            return;
        };
        self.forced.0 += 1;
        if self.forced.0 < every.get() {
            return;
        }
        self.forced.0 = 0;
        match self.log.pinned().or_else(|| {
            (self.conversation.status_flags() & SERVER_STATUS_IN_TRANS != 0)
                .then_some("open transaction")
        }) {
            None => self.forced.1 = true,
            Some(why) => tracing::info!(
                instance = %self.guard.instance_name(), client = %self.guard.client(), why,
                "forced reattach skipped: the session is pinned"
            ),
        }
    }

    /// Whether a forced reattach is due (`force_reattach_every`); it is no longer after this.
    pub fn take_forced_reattach(&mut self) -> bool {
        std::mem::take(&mut self.forced.1)
    }

    /// Whether the session could be carried to a new compute now, and if not, why.
    pub fn carriable(&self) -> Result<(), NotResumable> {
        if self.resumable() {
            Ok(())
        } else {
            Err(self.why_not_resumable())
        }
    }

    /// Whether the session's state changed since it was last read, and a read may be tried.
    pub const fn state_unread(&self) -> bool {
        self.unread && !self.read_skipped
    }

    /// Takes the compute's leg for the relay's own use ([`ConnectionGuard::step_aside`]):
    /// `false` when the compute is not running. [`Self::step_back`] ends it.
    pub fn step_aside(&mut self) -> bool {
        self.guard.step_aside()
    }

    /// The relay is done with the compute's leg: the connection is between commands again.
    pub fn step_back(&mut self) {
        self.settle(false);
    }

    /// Before reading the session's state: takes the compute's leg for the relay (the
    /// connection counts as busy, so no pause freezes the compute under the read). `false`
    /// when the compute is not running: the read waits for the next command.
    pub fn begin_state_read(&mut self) -> bool {
        let running = self.step_aside();
        self.read_skipped = !running;
        running
    }

    /// The session's state as read from its compute, or why it cannot be carried; the
    /// connection is between commands again.
    pub fn state_read(&mut self, read: Result<SessionState, Unreadable>) {
        self.unread = false;
        match read {
            Ok(state) => {
                self.state = Some(state);
                self.unreadable = None;
            }
            Err(why) => self.unreadable = Some(why),
        }
        self.settle(false);
    }

    /// The session's open prepared statements, to prepare again on a new compute.
    pub fn statements(&self) -> Vec<session_effects::Statement<'_>> {
        self.log.statements().collect()
    }

    /// The session was reattached, to a compute that knows it as `compute_id` (none: by the
    /// id the relay's greeting gave), and its statements prepared again: `(client id, new
    /// compute id)` for each. Ids are translated from here on when any differs.
    pub fn reattached(&mut self, statements: &[(u32, u32)], compute_id: Option<u32>) {
        self.guard.session_moved(compute_id);
        self.counters_known = false;
        self.translation = StatementIds::after_reattach(statements).map(|ids| {
            Box::new(Translation {
                ids,
                ..Translation::default()
            })
        });
    }

    /// Marks the session detached (its compute stopped under it) or reattached.
    pub fn set_detached(&mut self, detached: bool) {
        self.detached = detached;
        if detached {
            // Its compute is gone, and a new one reuses ids: no KILL is sent to the old id.
            self.guard.session_moved(None);
        }
    }

    /// While detached: the relay's own answer to `bytes` (a ping, a learnt keepalive query),
    /// or `None` when they are a command for the compute.
    pub fn answer_detached(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        let (reply, kind) = if let Some(r) = self.answer_ping(bytes) {
            (r, "ping")
        } else {
            (self.answer_keepalive(bytes)?, "keepalive_query")
        };
        self.guard.answered_for_compute(kind);
        Some(reply)
    }

    /// Whether the relay answers for the compute now: it is frozen, or stopped under this
    /// detached session.
    fn answering(&self) -> bool {
        self.detached || self.guard.compute_frozen()
    }

    /// Classifies the commands `bytes` start, for a ticketed session; returns how many (not
    /// counting pings) it classified. A chunk of one whole command sent between commands
    /// waits for the compute's OK before a setting is kept; pipelined commands (several in
    /// one chunk, or sent while replies are outstanding, as Connector/J does at connect) are
    /// kept as sent: a setting the compute refused then fails its replay, and the reattach
    /// closes that session with an ERR rather than lose state.
    fn classify(&mut self, bytes: &[u8], keepalive: bool) -> u64 {
        if !self.ticketed || !self.conversation.client_may_command() || bytes.is_empty() {
            return 0;
        }
        // Only a command sent between commands can wait for its own reply: behind others,
        // the next reply is theirs.
        let idle = self.conversation.phase() == Step::Idle;
        let mut packets = Vec::new();
        let mut rest = bytes;
        while let [a, b, c, 0, tail @ ..] = rest {
            let len = u32::from_le_bytes([*a, *b, *c, 0]) as usize;
            if len >= 0xFF_FFFF || tail.len() < len {
                break;
            }
            let (payload, after) = tail.split_at(len);
            packets.push(payload);
            rest = after;
        }
        if packets.is_empty() || !rest.is_empty() {
            // Split across reads: not followed closely enough to carry.
            self.log.pin("command not read whole");
            return 0;
        }
        // `COM_STMT_CLOSE` and `COM_STMT_SEND_LONG_DATA` get no reply: a driver sends the
        // next command right behind them, and that one's reply is still the next.
        let replied = packets
            .iter()
            .filter(|p| !matches!(p.first(), Some(&(COM_STMT_SEND_LONG_DATA | COM_STMT_CLOSE))))
            .count();
        let one = idle && replied == 1;
        if replied > 1 || (!idle && replied > 0) {
            self.log.pipelined();
        }
        let mut counted = 0;
        for payload in packets {
            counted += u64::from(payload.first() != Some(&0x0E));
            let effect = self.log.effect(payload);
            self.counters_known &= effect.leaves_counters();
            // A configured keepalive query is taken to leave the session as it was.
            if effect.changes_state() && !keepalive {
                self.unread = true;
                self.read_skipped = false;
            }
            if self.log.sent(effect) {
                if one {
                    self.pending = Some(Box::new(AwaitingReply {
                        payload: payload.to_vec(),
                        effect,
                        head: Vec::with_capacity(13),
                    }));
                } else if effect == Effect::Prepare {
                    // Its id is in a reply behind others' replies.
                    self.log.pin("prepared statement sent with other commands");
                } else {
                    self.log.accepted(effect);
                }
            }
        }
        counted
    }

    /// Follows the compute's reply to the one command awaiting it (`pending`): a setting is
    /// kept, a statement recorded under its id, once the compute accepted it (an OK or
    /// `COM_STMT_PREPARE_OK`: the first byte after the reply's 4-byte header). The reply may
    /// arrive in pieces.
    fn follow_reply(&mut self, bytes: &[u8]) {
        let Some(pending) = &mut self.pending else {
            return;
        };
        let AwaitingReply {
            payload,
            effect,
            head,
        } = &mut **pending;
        // A prepared statement's id, column and parameter counts follow the OK byte.
        let need = if *effect == Effect::Prepare { 13 } else { 5 };
        let want = need - head.len().min(need);
        head.extend(bytes.iter().take(want));
        if head.len() < need {
            return;
        }
        if head.get(4) == Some(&0x00) {
            match (*effect, head.get(5..13)) {
                (Effect::Prepare, Some(&[a, b, c, d, c0, c1, p0, p1])) => {
                    let shape = (u16::from_le_bytes([c0, c1]), u16::from_le_bytes([p0, p1]));
                    self.log
                        .prepared(u32::from_le_bytes([a, b, c, d]), shape, payload);
                }
                _ => self.log.accepted(*effect),
            }
        }
        self.pending = None;
    }

    /// Feeds the conversation; after a reattach that changed statement ids, translates them
    /// in `bytes` (a client chunk when `from_client`). [`Reaction::Hold`] when an id runs past
    /// the chunk's end (the pump presents those bytes again, first, with the next chunk);
    /// [`Reaction::End`] when the ids cannot be followed.
    fn feed(&mut self, bytes: &mut [u8], from_client: bool) -> Reaction {
        let Some(t) = self.translation.as_deref_mut() else {
            if from_client {
                self.conversation.client_bytes(bytes);
            } else {
                self.conversation.server_bytes(bytes);
            }
            return Reaction::Forward;
        };
        let side = usize::from(!from_client);
        let held = t.held.get_mut(side).and_then(Option::take);
        let fed = held.map_or(0, |h| h.fed).min(bytes.len());
        t.marks.clear();
        t.marks.extend(held.map(|h| h.mark));
        let first_new = t.marks.len();
        let new = bytes.get(fed..).unwrap_or_default();
        if from_client {
            self.conversation
                .client_bytes_marking(new, Some(&mut t.marks));
        } else {
            self.conversation
                .server_bytes_marking(new, Some(&mut t.marks));
        }
        for mark in t.marks.iter_mut().skip(first_new) {
            mark.at += fed;
        }
        let mut failed = matches!(
            self.conversation.phase(),
            Step::Untracked(why) if why != Untracked::Quit
        )
        .then(|| "the conversation is no longer followed".to_owned());
        for mark in &t.marks {
            if failed.is_some() {
                break;
            }
            let payload = bytes.get_mut(mark.at..).unwrap_or_default();
            let translated = if from_client {
                t.ids.command(payload, mark.len as usize)
            } else {
                t.ids.prepared(payload)
            };
            match translated {
                Ok(()) => {}
                Err(Untranslatable::Split) => {
                    // The id runs past the chunk: its bytes wait for the rest.
                    let keep = bytes.len().saturating_sub(mark.at);
                    let mark = Mark { at: 0, ..*mark };
                    if let Some(slot) = t.held.get_mut(side) {
                        *slot = Some(Held { mark, fed: keep });
                    }
                    return Reaction::Hold(keep);
                }
                Err(e) => failed = Some(e.to_string()),
            }
        }
        let Some(why) = failed else {
            return Reaction::Forward;
        };
        tracing::warn!(
            instance = %self.guard.instance_name(), client = %self.guard.client(),
            %why, "cannot translate the reattached session's statement ids; closing it"
        );
        Reaction::End
    }

    /// The reply to `bytes` when they are a `COM_PING` on a parked connection: an OK with the
    /// session's own status flags, as the compute would send, so the compute stays frozen.
    fn answer_ping(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        if bytes != PING
            || self.conversation.phase() != Step::Idle
            || !self.conversation.status_flags_known()
        {
            return None;
        }
        if !self.answering() {
            return None;
        }
        let [lo, hi] = self.conversation.status_flags().to_le_bytes();
        // OK: no rows affected, no insert id, the status flags, no warnings; sequence id 1.
        Some(vec![7, 0, 0, 1, 0x00, 0, 0, lo, hi, 0, 0])
    }

    /// Whether `bytes` are exactly one configured keepalive query (`COM_QUERY`, sequence id
    /// 0), sent between commands.
    fn is_keepalive(&self, bytes: &[u8]) -> bool {
        let [a, b, c, 0, 0x03, text @ ..] = bytes else {
            return false;
        };
        let len = u32::from_le_bytes([*a, *b, *c, 0]);
        self.conversation.phase() == Step::Idle
            && usize::try_from(len).is_ok_and(|len| len == text.len() + 1)
            && self.guard.is_keepalive_query(text)
    }

    /// The compute's own response to `bytes` when they repeat the keepalive query it last
    /// answered on this connection, the session's status flags unchanged since; only on a
    /// parked connection.
    fn answer_keepalive(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let learnt = self.learnt.as_ref()?;
        if learnt.query != bytes
            || !self.conversation.status_flags_known()
            || learnt.status_flags != self.conversation.status_flags()
            || self.conversation.phase() != Step::Idle
            || !self.answering()
        {
            return None;
        }
        Some(learnt.response.clone())
    }
}

impl CommandWatch<'_> {
    /// A `KILL` of one of the instance's relayed sessions by the id its client knows, in
    /// `bytes` (one whole packet), is given the compute's id for it (`crate::kill_ids`).
    fn kill_on_the_compute(&self, bytes: &mut [u8]) {
        let Some(([a, b, c, _], payload)) = bytes.split_first_chunk_mut::<4>() else {
            return;
        };
        if u32::from_le_bytes([*a, *b, *c, 0]) as usize != payload.len()
            || !self.conversation.client_may_command()
        {
            return;
        }
        let Some(target) = kill_ids::killed_id(payload) else {
            return;
        };
        if let Some(id) = self
            .guard
            .compute_id_of(target.id)
            .filter(|id| *id != target.id)
            && !kill_ids::rewrite(payload, &target, id)
        {
            tracing::debug!(
                session = target.id,
                "KILL's id left as sent: too short for the compute's"
            );
        }
    }
}

/// A whole `COM_PING` packet (sequence id 0), as pools send it.
const PING: &[u8] = &[1, 0, 0, 0, COM_PING];

impl Observer for CommandWatch<'_> {
    fn client_bytes(&mut self, bytes: &mut [u8], may_answer: bool) -> Reaction {
        if may_answer {
            if let Some(reply) = self.answer_ping(bytes) {
                self.guard.answered_for_compute("ping");
                return Reaction::Answer(reply);
            }
            if let Some(reply) = self.answer_keepalive(bytes) {
                self.guard.answered_for_compute("keepalive_query");
                return Reaction::Answer(reply);
            }
        }
        self.kill_on_the_compute(bytes);
        let keepalive = self.is_keepalive(bytes);
        self.learning = keepalive.then(|| Box::new((bytes.to_vec(), Vec::new())));
        let before = self.conversation.activity();
        // Classified as the client sent them: the log keeps the client's statement ids.
        let classified = self.classify(bytes, keepalive);
        let reaction = self.feed(bytes, true);
        if reaction == Reaction::End {
            return reaction;
        }
        if self.ticketed && self.conversation.activity() - before > classified {
            // A command that started while another's response was outstanding: not seen
            // whole, so not carried.
            self.log.pin("pipelined command");
            self.log.pipelined();
        }
        self.settle(!keepalive);
        reaction
    }

    fn server_bytes(&mut self, bytes: &mut [u8], may_take: bool) -> Reaction {
        // Translated first: the reply to a prepare is followed with the client's id.
        let reaction = self.feed(bytes, false);
        let forwarded = match reaction {
            Reaction::End => return reaction,
            Reaction::Hold(k) => bytes.len().saturating_sub(k),
            _ => bytes.len(),
        };
        let bytes = bytes.get(..forwarded).unwrap_or_default();
        self.follow_reply(bytes);
        if let Some(learning) = &mut self.learning {
            learning.1.extend_from_slice(bytes);
            if learning.1.len() > MAX_LEARNT_RESPONSE {
                self.learning = None;
            }
        }
        if self.conversation.phase() == Step::Idle && self.conversation.status_flags_known() {
            if let Some(learning) = self.learning.take() {
                let (query, response) = *learning;
                self.learnt = Some(Box::new(Learnt {
                    query,
                    response,
                    status_flags: self.conversation.status_flags(),
                }));
            }
        }
        self.settle(true);
        if may_take && reaction == Reaction::Forward && self.goes_to_kernel() {
            self.splice_after = None;
            self.taken = Some(bytes.into());
            return Reaction::Take;
        }
        reaction
    }

    fn owes_nothing(&self) -> bool {
        matches!(
            self.conversation.phase(),
            Step::Idle | Step::Untracked(Untracked::Quit)
        )
    }

    fn detached(&self) -> bool {
        self.guard.counted_resumable()
            && self.conversation.phase() == Step::Idle
            && self.guard.detaching()
    }

    /// A session taken back from the kernel goes back once it is used, or once the
    /// conversation cannot be followed (it was not between commands after all): the next
    /// take-back starts afresh. Not after `COM_QUIT`: the pump sees the close.
    fn step_aside_at(&self) -> Option<tokio::time::Instant> {
        if self.forced.1 && !self.detached && self.conversation.phase() == Step::Idle {
            // Due since the command ended (a fixed time: the pump steps aside at once).
            return self
                .idle_since
                .or_else(|| Some(tokio::time::Instant::now()));
        }
        // Taken back from the splice unchecked: due whatever its flags (the check reads them).
        let due = self.ticketed
            && self.conversation.phase() == Step::Idle
            && !self.read_skipped
            && !self.detached
            && (self.unchecked
                || self.unread
                    && self.log.pinned().is_none()
                    && self.conversation.status_flags_known()
                    && self.conversation.status_flags() & SERVER_STATUS_IN_TRANS == 0);
        let since = self.idle_since.filter(|_| due)?;
        Some(since + self.guard.state_read_after())
    }

    fn hand_back(&self) -> bool {
        self.from_kernel
            && match self.conversation.phase() {
                Step::Untracked(Untracked::Quit) => false,
                Step::Untracked(_) => true,
                Step::Idle | Step::Busy => self.commanded,
            }
    }
}
