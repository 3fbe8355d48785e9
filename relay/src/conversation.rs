//! Where one logged-in connection is in its command/response conversation, read from the bytes
//! of both directions: idle (no command outstanding), busy (a command sent and its response not
//! yet complete: a result set still streaming, a `LOAD DATA LOCAL` upload, a `SLEEP(60)`), or
//! untracked (a protocol this module does not follow, so the connection counts as busy). Parking
//! (docs/parking.md, *Command boundaries*) freezes a compute only when every connection it
//! carries is idle, so "busy" must never be reported as "idle": whenever this module is unsure
//! it says untracked.
//!
//! Pure: bytes in, state out, nothing buffered beyond a packet's first [`HEAD_LEN`] bytes, so a
//! 16 MiB row costs nothing. The caller feeds each chunk *before* forwarding it, which keeps
//! causality: a client packet that answers a server packet (a file for `LOAD DATA LOCAL`, an
//! auth answer during `COM_CHANGE_USER`) is seen after that server packet.
//!
//! The response grammar follows MySQL's client/server protocol (docs/parking.md, *Command
//! boundaries*): OK, ERR, a text or binary result set (column count, column definitions, an EOF
//! unless `CLIENT_DEPRECATE_EOF`, rows, a terminator), `SERVER_MORE_RESULTS_EXISTS` chaining
//! further results, the `LOCAL INFILE` request, `COM_STMT_PREPARE`'s definitions, cursors
//! (`SERVER_STATUS_CURSOR_EXISTS`) and `COM_STMT_FETCH`.

use std::collections::VecDeque;

use authplugin::packet::auth_switch::AUTH_MORE_DATA_HEADER;
use authplugin::packet::capabilities::{
    CLIENT_COMPRESS, CLIENT_DEPRECATE_EOF, CLIENT_OPTIONAL_RESULTSET_METADATA,
    MARIADB_CLIENT_CACHE_METADATA, SERVER_MORE_RESULTS_EXISTS, SERVER_STATUS_CURSOR_EXISTS,
};
use authplugin::packet::command::{
    COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID, COM_CHANGE_USER, COM_FIELD_LIST, COM_PING,
    COM_PROCESS_INFO, COM_QUERY, COM_QUIT, COM_STMT_BULK_EXECUTE, COM_STMT_CLOSE, COM_STMT_EXECUTE,
    COM_STMT_FETCH, COM_STMT_PREPARE, COM_STMT_SEND_LONG_DATA,
};
use authplugin::packet::err::ERR_HEADER;
use authplugin::packet::ok::{EOF_HEADER, LOCAL_INFILE_HEADER, OK_HEADER};

/// The bytes kept of each packet: enough for an OK packet's status flags behind two
/// length-encoded integers (1 + 9 + 9 + 2) and for `COM_STMT_PREPARE_OK` (12).
pub const HEAD_LEN: usize = 24;
/// Commands sent ahead of their responses (pipelining) that are followed; more is untracked.
pub const MAX_PENDING: usize = 64;
/// A packet of this length continues in the next one (a payload of 16 MiB or more).
const MAX_PACKET_LEN: u32 = 0x00FF_FFFF;

/// The error code of MariaDB's progress reports (`MARIADB_CLIENT_PROGRESS`): an ERR packet
/// that is not an error and ends nothing.
const PROGRESS_REPORT_CODE: u16 = 0xFFFF;

/// Where the conversation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No command outstanding: the connection may be parked.
    Idle,
    /// A command was sent and its response is not complete.
    Busy,
    /// Not followed (compression, optional result-set metadata, bytes that break the
    /// grammar, too many pipelined commands): treat as busy for good.
    Untracked(Untracked),
}

/// Why a conversation is not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untracked {
    /// `CLIENT_COMPRESS`: the packets are inside compressed frames.
    Compressed,
    /// `CLIENT_OPTIONAL_RESULTSET_METADATA`, or MariaDB's `MARIADB_CLIENT_CACHE_METADATA`:
    /// result sets may come without column definitions.
    OptionalMetadata,
    /// A packet that the response grammar does not allow here.
    Unexpected,
    /// More than [`MAX_PENDING`] commands sent ahead of their responses.
    TooManyPending,
    /// `COM_QUIT` was sent: no further command will come.
    Quit,
}

/// What a command's response looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grammar {
    /// One packet, whatever it is (OK, ERR, EOF, `COM_STATISTICS`'s string).
    Single,
    /// OK, ERR, `LOCAL INFILE`, or a result set; each may chain more results.
    Query,
    /// Column definitions up to a terminator (`COM_FIELD_LIST`).
    FieldList,
    /// ERR, or `COM_STMT_PREPARE_OK` and its definitions.
    Prepare,
    /// Rows up to a terminator (`COM_STMT_FETCH`).
    Fetch,
    /// An authentication exchange up to OK or ERR (`COM_CHANGE_USER`); client packets in it
    /// are answers, not commands.
    ChangeUser,
    /// A replication stream: ends only with ERR or EOF.
    Stream,
}

/// How far the response at the head of the queue has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Nothing of (this result of) the response yet.
    Start,
    /// Definitions still to come (`left`), then an EOF if `eof`.
    Definitions {
        left: u64,
        eof: bool,
        then: AfterDefinitions,
    },
    /// Rows, up to a terminator.
    Rows,
    /// The server asked for a local file; the client's packets are its content up to an
    /// empty packet.
    Infile,
}

/// What follows a run of column definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterDefinitions {
    /// A result set's rows.
    Rows,
    /// `COM_STMT_PREPARE`: the columns' definitions (`u64`), then the response is complete.
    PrepareColumns(u64),
    /// The response is complete.
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    grammar: Grammar,
    progress: Progress,
}

/// One logical packet (a payload of 16 MiB or more spans several), as far as it is kept.
#[derive(Debug, Clone, Copy)]
struct Packet {
    /// The length of its first physical packet (`MAX_PACKET_LEN` for a long payload).
    first_len: u32,
    head: [u8; HEAD_LEN],
    head_len: usize,
}

impl Packet {
    fn head(&self) -> &[u8] {
        self.head.get(..self.head_len).unwrap_or_default()
    }

    fn header(&self) -> Option<u8> {
        self.head().first().copied()
    }

    fn is_empty(&self) -> bool {
        self.first_len == 0
    }

    /// A MariaDB progress report: ERR header, error code 0xFFFF. The command goes on.
    fn is_progress_report(&self) -> bool {
        match self.head() {
            [ERR_HEADER, lo, hi, ..] => u16::from_le_bytes([*lo, *hi]) == PROGRESS_REPORT_CODE,
            _ => false,
        }
    }
}

/// Splits one direction's bytes into logical packets, keeping only each one's head.
#[derive(Debug, Clone, Default)]
struct Framer {
    header: [u8; 4],
    header_len: usize,
    /// Payload bytes of the current physical packet still to come.
    remaining: u32,
    /// The current physical packet's length.
    len: u32,
    /// A logical packet is open (its first physical packet's header was read).
    open: bool,
    first_len: u32,
    head: [u8; HEAD_LEN],
    head_len: usize,
}

impl Framer {
    /// Whether a packet has begun and not ended.
    const fn mid_packet(&self) -> bool {
        self.header_len > 0 || self.open
    }

    /// Feeds `bytes`, telling `on_event` where each logical packet begins in them and each
    /// one completed in them.
    fn feed(&mut self, chunk: &[u8], on_event: &mut dyn FnMut(Framed)) {
        let mut bytes = chunk;
        while !bytes.is_empty() {
            if self.header_len < self.header.len() {
                let take = (self.header.len() - self.header_len).min(bytes.len());
                let (now, rest) = bytes.split_at(take);
                if let Some(slot) = self.header.get_mut(self.header_len..self.header_len + take) {
                    slot.copy_from_slice(now);
                }
                self.header_len += take;
                bytes = rest;
                if self.header_len < self.header.len() {
                    return;
                }
                let [a, b, c, _sequence_id] = self.header;
                self.len = u32::from_le_bytes([a, b, c, 0]);
                self.remaining = self.len;
                if !self.open {
                    self.open = true;
                    self.first_len = self.len;
                    self.head_len = 0;
                    on_event(Framed::Begins(Mark {
                        at: chunk.len() - bytes.len(),
                        len: self.len,
                    }));
                }
                if self.remaining == 0 {
                    self.end_physical(on_event);
                }
                continue;
            }
            let take = usize::try_from(self.remaining)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let (now, rest) = bytes.split_at(take);
            let keep = (HEAD_LEN - self.head_len).min(now.len());
            if let (Some(slot), Some(src)) = (
                self.head.get_mut(self.head_len..self.head_len + keep),
                now.get(..keep),
            ) {
                slot.copy_from_slice(src);
                self.head_len += keep;
            }
            // `take` fits: it is at most `remaining`, a u32.
            self.remaining -= u32::try_from(take).unwrap_or(self.remaining);
            bytes = rest;
            if self.remaining == 0 {
                self.end_physical(on_event);
            }
        }
    }

    fn end_physical(&mut self, on_event: &mut dyn FnMut(Framed)) {
        self.header_len = 0;
        if self.len == MAX_PACKET_LEN {
            return; // the logical packet continues in the next physical one
        }
        self.open = false;
        on_event(Framed::Ends(Packet {
            first_len: self.first_len,
            head: self.head,
            head_len: self.head_len,
        }));
    }
}

/// What a [`Framer`] finds in a chunk.
enum Framed {
    /// A logical packet begins.
    Begins(Mark),
    /// A logical packet ended.
    Ends(Packet),
}

/// Where, in a chunk just fed, a packet begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The offset of its payload's first byte (the chunk's length when only the header was
    /// in it).
    pub at: usize,
    /// Its (first physical packet's) payload length.
    pub len: u32,
}

/// One connection's conversation after its login.
#[derive(Debug, Clone)]
pub struct Conversation {
    deprecate_eof: bool,
    client: Framer,
    server: Framer,
    pending: VecDeque<Pending>,
    untracked: Option<Untracked>,
    status_flags: u16,
    /// `status_flags` are the server's: false after [`Self::forget_status_flags`] until the
    /// next OK or EOF.
    status_known: bool,
    /// Commands seen that count as use of the instance (all but `COM_PING`).
    activity: u64,
}

impl Conversation {
    /// A conversation that starts idle after a login that negotiated `capabilities` and
    /// MariaDB's extended `mariadb_capabilities` (the flags both sides set; 0 for MySQL) and
    /// ended with an OK carrying `status_flags`.
    #[must_use]
    pub fn new(capabilities: u32, mariadb_capabilities: u32, status_flags: u16) -> Self {
        let untracked = if capabilities & CLIENT_COMPRESS != 0 {
            Some(Untracked::Compressed)
        } else if capabilities & CLIENT_OPTIONAL_RESULTSET_METADATA != 0
            || mariadb_capabilities & MARIADB_CLIENT_CACHE_METADATA != 0
        {
            Some(Untracked::OptionalMetadata)
        } else {
            None
        };
        Self {
            deprecate_eof: capabilities & CLIENT_DEPRECATE_EOF != 0,
            client: Framer::default(),
            server: Framer::default(),
            pending: VecDeque::new(),
            untracked,
            status_flags,
            status_known: true,
            activity: 0,
        }
    }

    /// Forgets the status flags: the conversation is followed from a point the relay did not
    /// see the last OK or EOF of (a session taken back from the kernel splice).
    pub fn forget_status_flags(&mut self) {
        self.status_known = false;
    }

    /// The server's status flags as read elsewhere (the compute's last packet, seen by the
    /// kernel splice).
    pub const fn set_status_flags(&mut self, flags: u16) {
        self.status_flags = flags;
        self.status_known = true;
    }

    /// Where the conversation is now. A packet that has begun but not ended, in either
    /// direction, makes it busy: part of a command is already on its way.
    #[must_use]
    pub fn phase(&self) -> Phase {
        match self.untracked {
            Some(why) => Phase::Untracked(why),
            None if self.pending.is_empty()
                && !self.client.mid_packet()
                && !self.server.mid_packet() =>
            {
                Phase::Idle
            }
            None => Phase::Busy,
        }
    }

    /// The status flags of the last OK or EOF the server sent (the login's at first): what a
    /// relay-made OK on this connection must carry, and whether a transaction is open.
    #[must_use]
    pub const fn status_flags(&self) -> u16 {
        self.status_flags
    }

    /// Whether [`Self::status_flags`] are known ([`Self::forget_status_flags`]).
    #[must_use]
    pub const fn status_flags_known(&self) -> bool {
        self.status_known
    }

    /// How many commands the client has sent that count as using the instance: every command
    /// but `COM_PING`, which pools send to keep a connection open, not to use it. A change
    /// restarts the instance's idle clock.
    #[must_use]
    pub const fn activity(&self) -> u64 {
        self.activity
    }

    /// Whether the client's next bytes begin a command: no client packet is half read, and
    /// no response is waiting for the client's own packets (a `LOCAL INFILE` upload, a
    /// `COM_CHANGE_USER` exchange). Pipelined commands begin so while responses are
    /// outstanding.
    #[must_use]
    pub fn client_may_command(&self) -> bool {
        !self.client.mid_packet() && self.next_client_packet_is_command()
    }

    /// Bytes the client sent, before they are forwarded.
    pub fn client_bytes(&mut self, bytes: &[u8]) {
        self.client_bytes_marking(bytes, None);
    }

    /// Bytes the server sent, before they are forwarded.
    pub fn server_bytes(&mut self, bytes: &[u8]) {
        self.server_bytes_marking(bytes, None);
    }

    /// [`Self::client_bytes`], and in `marks` where each command in them begins: the
    /// commands that carry a statement id are found there (a reattached session's ids are
    /// translated, `statement_ids`). A packet is a command by where the conversation is,
    /// not by its sequence id, which a long `LOCAL INFILE` upload wraps to 0.
    pub fn client_bytes_marking(&mut self, bytes: &[u8], mut marks: Option<&mut Vec<Mark>>) {
        let mut framer = std::mem::take(&mut self.client);
        framer.feed(bytes, &mut |event| match event {
            Framed::Begins(mark) => {
                if let Some(marks) = marks.as_deref_mut() {
                    if self.next_client_packet_is_command() {
                        marks.push(mark);
                    }
                }
            }
            Framed::Ends(packet) => self.on_client_packet(&packet),
        });
        self.client = framer;
    }

    /// [`Self::server_bytes`], and in `marks` where each response to `COM_STMT_PREPARE`
    /// begins (its first packet: `COM_STMT_PREPARE_OK` with the statement's id, or ERR).
    pub fn server_bytes_marking(&mut self, bytes: &[u8], mut marks: Option<&mut Vec<Mark>>) {
        let mut framer = std::mem::take(&mut self.server);
        framer.feed(bytes, &mut |event| match event {
            Framed::Begins(mark) => {
                if let Some(marks) = marks.as_deref_mut() {
                    let prepare_starts = self.untracked.is_none()
                        && self.pending.front().is_some_and(|head| {
                            head.grammar == Grammar::Prepare && head.progress == Progress::Start
                        });
                    if prepare_starts {
                        marks.push(mark);
                    }
                }
            }
            Framed::Ends(packet) => self.on_server_packet(&packet),
        });
        self.server = framer;
    }

    /// Whether the client packet that begins now is a command (see
    /// [`Self::client_may_command`], whose framer check this packet itself would fail).
    fn next_client_packet_is_command(&self) -> bool {
        self.untracked.is_none()
            && !self.pending.front().is_some_and(|head| {
                head.progress == Progress::Infile || head.grammar == Grammar::ChangeUser
            })
    }

    fn lose(&mut self, why: Untracked) {
        if self.untracked.is_none() {
            self.untracked = Some(why);
        }
        self.pending = VecDeque::new();
    }

    fn on_client_packet(&mut self, packet: &Packet) {
        if self.untracked.is_some() {
            return;
        }
        // Inside a response that the client takes part in, its packets are not commands.
        if let Some(head) = self.pending.front_mut() {
            if head.progress == Progress::Infile {
                if packet.is_empty() {
                    // The file is complete: OK or ERR follows (which may chain results).
                    head.progress = Progress::Start;
                }
                return;
            }
            if head.grammar == Grammar::ChangeUser {
                return;
            }
        }
        let Some(command) = packet.header() else {
            // An empty packet outside `LOAD DATA LOCAL` is not a command.
            self.lose(Untracked::Unexpected);
            return;
        };
        if command != COM_PING {
            self.activity += 1;
        }
        let grammar = match command {
            COM_QUIT => {
                self.lose(Untracked::Quit);
                return;
            }
            COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA => return, // no response
            COM_QUERY | COM_PROCESS_INFO | COM_STMT_EXECUTE | COM_STMT_BULK_EXECUTE => {
                Grammar::Query
            }
            COM_FIELD_LIST => Grammar::FieldList,
            COM_STMT_PREPARE => Grammar::Prepare,
            COM_STMT_FETCH => Grammar::Fetch,
            COM_CHANGE_USER => Grammar::ChangeUser,
            COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID => Grammar::Stream,
            _ => Grammar::Single,
        };
        if self.pending.len() >= MAX_PENDING {
            self.lose(Untracked::TooManyPending);
            return;
        }
        let progress = if grammar == Grammar::Fetch {
            Progress::Rows
        } else {
            Progress::Start
        };
        self.pending.push_back(Pending { grammar, progress });
    }

    fn on_server_packet(&mut self, packet: &Packet) {
        if self.untracked.is_some() || packet.is_progress_report() {
            return;
        }
        let Some(mut head) = self.pending.front().copied() else {
            // Unsolicited: a server that kills or shuts down a session may say so in an ERR.
            if packet.header() != Some(ERR_HEADER) {
                self.lose(Untracked::Unexpected);
            }
            return;
        };
        match self.advance(&mut head, packet) {
            Step::Continue => {
                if let Some(front) = self.pending.front_mut() {
                    *front = head;
                }
            }
            Step::Complete => {
                self.pending.pop_front();
                if self.pending.is_empty() {
                    // Between commands a connection holds no queue: an idle one's memory is
                    // its whole cost (BENCHMARKS.md §3), worth an allocation per command on
                    // the pump.
                    self.pending = VecDeque::new();
                }
            }
            Step::Lost => self.lose(Untracked::Unexpected),
        }
    }

    /// Whether `packet` ends a run of rows or definitions: an EOF, or with
    /// `CLIENT_DEPRECATE_EOF` an OK packet with the EOF header. A row may also start with
    /// 0xFE (a length-encoded string of 16 MiB or more), but then the packet is longer.
    fn is_terminator(&self, packet: &Packet) -> bool {
        let short = if self.deprecate_eof {
            packet.first_len < MAX_PACKET_LEN
        } else {
            packet.first_len < 9
        };
        packet.header() == Some(EOF_HEADER) && short
    }

    fn advance(&mut self, pending: &mut Pending, packet: &Packet) -> Step {
        let header = packet.header();
        match (pending.grammar, pending.progress) {
            (Grammar::Single, _) => {
                if let Some(flags) = ok_status_flags(packet).or_else(|| eof_status_flags(packet)) {
                    self.set_status_flags(flags);
                }
                Step::Complete
            }
            (Grammar::Stream, _) => match header {
                Some(ERR_HEADER) => Step::Complete,
                _ if self.is_terminator(packet) => Step::Complete,
                _ => Step::Continue,
            },
            (Grammar::ChangeUser, _) => match header {
                Some(OK_HEADER) => {
                    if let Some(flags) = ok_status_flags(packet) {
                        self.set_status_flags(flags);
                    }
                    Step::Complete
                }
                Some(ERR_HEADER) => Step::Complete,
                Some(EOF_HEADER | AUTH_MORE_DATA_HEADER) => Step::Continue,
                _ => Step::Lost,
            },
            (_, Progress::Infile) => Step::Lost, // the server speaks while the client uploads
            (Grammar::Query, Progress::Start) => match header {
                Some(OK_HEADER) => self.result_end(ok_status_flags(packet), pending),
                Some(ERR_HEADER) => Step::Complete,
                Some(LOCAL_INFILE_HEADER) => {
                    pending.progress = Progress::Infile;
                    Step::Continue
                }
                _ => match column_count(packet) {
                    Some(columns) if columns > 0 => {
                        pending.progress = Progress::Definitions {
                            left: columns,
                            eof: !self.deprecate_eof,
                            then: AfterDefinitions::Rows,
                        };
                        Step::Continue
                    }
                    _ => Step::Lost,
                },
            },
            (Grammar::FieldList, Progress::Start | Progress::Rows) => match header {
                Some(ERR_HEADER) => Step::Complete,
                _ if self.is_terminator(packet) => Step::Complete,
                _ => {
                    pending.progress = Progress::Rows;
                    Step::Continue
                }
            },
            (Grammar::Prepare, Progress::Start) => match header {
                Some(ERR_HEADER) => Step::Complete,
                Some(OK_HEADER) => {
                    let Some((columns, params)) = prepare_ok_counts(packet) else {
                        return Step::Lost;
                    };
                    pending.progress = Progress::Definitions {
                        left: params,
                        eof: params > 0 && !self.deprecate_eof,
                        then: AfterDefinitions::PrepareColumns(columns),
                    };
                    self.after_definitions(pending)
                }
                _ => Step::Lost,
            },
            (_, Progress::Definitions { left, eof, then }) => {
                if left > 0 {
                    if header == Some(ERR_HEADER) {
                        return Step::Lost; // definitions are not interrupted by errors
                    }
                    pending.progress = Progress::Definitions {
                        left: left - 1,
                        eof,
                        then,
                    };
                    return self.after_definitions(pending);
                }
                // `left == 0`, so an EOF is expected (`after_definitions` moved on otherwise).
                let Some(flags) = eof_status_flags(packet) else {
                    return Step::Lost;
                };
                self.set_status_flags(flags);
                pending.progress = Progress::Definitions {
                    left: 0,
                    eof: false,
                    then,
                };
                if then == AfterDefinitions::Rows && flags & SERVER_STATUS_CURSOR_EXISTS != 0 {
                    // The rows wait behind a cursor; `COM_STMT_FETCH` asks for them.
                    return Step::Complete;
                }
                self.after_definitions(pending)
            }
            (_, Progress::Rows) => match header {
                Some(ERR_HEADER) => Step::Complete,
                _ if self.is_terminator(packet) => {
                    let flags = if self.deprecate_eof {
                        ok_status_flags(packet)
                    } else {
                        eof_status_flags(packet)
                    };
                    self.result_end(flags, pending)
                }
                _ => Step::Continue,
            },
            (_, Progress::Start) => Step::Lost,
        }
    }

    /// Moves past finished definitions: to the EOF after them, to the rows, to the prepared
    /// statement's columns, or to the end.
    fn after_definitions(&self, pending: &mut Pending) -> Step {
        let Progress::Definitions { left, eof, then } = pending.progress else {
            return Step::Continue;
        };
        if left > 0 || eof {
            return Step::Continue;
        }
        match then {
            AfterDefinitions::Rows => {
                pending.progress = Progress::Rows;
                Step::Continue
            }
            AfterDefinitions::PrepareColumns(columns) => {
                pending.progress = Progress::Definitions {
                    left: columns,
                    eof: columns > 0 && !self.deprecate_eof,
                    then: AfterDefinitions::Done,
                };
                self.after_definitions(pending)
            }
            AfterDefinitions::Done => Step::Complete,
        }
    }

    /// The end of one result: complete unless the server says another follows.
    fn result_end(&mut self, flags: Option<u16>, pending: &mut Pending) -> Step {
        let Some(flags) = flags else {
            return Step::Lost;
        };
        self.set_status_flags(flags);
        if flags & SERVER_MORE_RESULTS_EXISTS != 0 {
            pending.progress = Progress::Start;
            Step::Continue
        } else {
            Step::Complete
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Continue,
    Complete,
    Lost,
}

/// A length-encoded integer at the start of `bytes`, and the bytes after it.
fn lenenc_int(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (&first, rest) = bytes.split_first()?;
    let width = match first {
        0..=0xFA => return Some((u64::from(first), rest)),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        _ => return None, // 0xFB (NULL) and 0xFF are not integers
    };
    let digits = rest.get(..width)?;
    let mut le = [0u8; 8];
    le.get_mut(..width)?.copy_from_slice(digits);
    Some((u64::from_le_bytes(le), rest.get(width..)?))
}

/// What the last bytes a server sent say about its conversation, read where the relay did
/// not follow it (a session the kernel splice carried): its last packet, found as the one
/// OK or EOF that ends exactly where the bytes end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastPacket {
    /// An OK or EOF that ends a response, with its status flags.
    Ended(u16),
    /// An OK or EOF saying another result follows: the response is not over.
    MoreResults,
    /// Neither found, or more than one reading (an ERR, an OK with a long message, a
    /// truncated tail).
    Unknown,
}

/// Reads `tail`, the last bytes a server sent, for its last packet ([`LastPacket`]).
#[must_use]
pub fn last_packet(tail: &[u8]) -> LastPacket {
    let mut found = None;
    for len in 5..=tail.len().saturating_sub(4) {
        let start = tail.len() - 4 - len;
        let (Some(header), Some(payload)) = (tail.get(start..start + 3), tail.get(start + 4..))
        else {
            continue;
        };
        if header
            != u32::try_from(len)
                .unwrap_or(0)
                .to_le_bytes()
                .get(..3)
                .unwrap_or_default()
        {
            continue;
        }
        let flags = match payload {
            [EOF_HEADER, _, _, lo, hi] => Some(u16::from_le_bytes([*lo, *hi])),
            [OK_HEADER | EOF_HEADER, rest @ ..] => lenenc_int(rest)
                .and_then(|(_, rest)| lenenc_int(rest))
                .and_then(|(_, rest)| match rest {
                    // Status flags, warnings, then any message.
                    [lo, hi, _, _, ..] => Some(u16::from_le_bytes([*lo, *hi])),
                    _ => None,
                }),
            _ => None,
        };
        if let Some(flags) = flags {
            if found.is_some() {
                return LastPacket::Unknown;
            }
            found = Some(flags);
        }
    }
    match found {
        None => LastPacket::Unknown,
        Some(flags) if flags & SERVER_MORE_RESULTS_EXISTS != 0 => LastPacket::MoreResults,
        Some(flags) => LastPacket::Ended(flags),
    }
}

/// The status flags of an OK packet (header 0x00, or 0xFE as a terminator): after the header,
/// affected rows and last insert id.
fn ok_status_flags(packet: &Packet) -> Option<u16> {
    let (_, rest) = packet.head().split_first()?;
    let (_, rest) = lenenc_int(rest)?;
    let (_, rest) = lenenc_int(rest)?;
    let flags = rest.get(..2)?;
    Some(u16::from_le_bytes([*flags.first()?, *flags.get(1)?]))
}

/// The status flags of an EOF packet: 0xFE, warnings (2), status (2).
fn eof_status_flags(packet: &Packet) -> Option<u16> {
    let head = packet.head();
    if packet.first_len >= 9 || head.first() != Some(&EOF_HEADER) {
        return None;
    }
    Some(u16::from_le_bytes([*head.get(3)?, *head.get(4)?]))
}

/// A result set's column count.
fn column_count(packet: &Packet) -> Option<u64> {
    lenenc_int(packet.head()).map(|(n, _)| n)
}

/// `COM_STMT_PREPARE_OK`: 0x00, statement id (4), columns (2), parameters (2).
fn prepare_ok_counts(packet: &Packet) -> Option<(u64, u64)> {
    let head = packet.head();
    let columns = u16::from_le_bytes([*head.get(5)?, *head.get(6)?]);
    let params = u16::from_le_bytes([*head.get(7)?, *head.get(8)?]);
    Some((u64::from(columns), u64::from(params)))
}

#[cfg(test)]
mod tests;
