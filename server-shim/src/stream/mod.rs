//! The stream adapter between a client socket and opensrv-mysql: the two halves
//! ([`AuthReader`], [`AuthWriter`]) and the state they share with the shim's hooks
//! ([`ConnShared`]).
//!
//! opensrv-mysql 0.7 is the whole connection loop, so what it gets wrong is fixed on the bytes
//! going in and out, one module per problem (see also `docs/server-shim.md`, "Working around
//! opensrv"):
//! - [`login_tee`]: the `authenticate` hook gets neither the login's database nor the
//!   client's plugin, so the reader copies the HandshakeResponse41 for it;
//! - [`login_err`]: a refused login gets ERR 1698 where MySQL sends 1045, so the writer sends
//!   the shim's ERR instead;
//! - [`one_packet_per_read`]: opensrv's packet reader garbles a packet that shares a read
//!   with the next one, so the reader hands it one client packet per read;
//! - [`field_list`]: the reply to COM_FIELD_LIST ends with a packet libmariadb does not take
//!   as the end, so the writer sends a short EOF instead;
//! - [`unsupported`]: commands opensrv does not implement get OK, so the writer sends ERR
//!   1047 instead;
//! - [`status_flags`]: opensrv's greeting and login OK say autocommit is off, so the writer
//!   sets it;
//! - [`deadlines`]: opensrv waits for the client forever, so both halves have deadlines;
//! - [`hello_round`]: opensrv authenticates in one round, so a relay's request for the
//!   compute's proof is turned into an auth switch that carries it;
//! - [`column_charset`]: every column opensrv defines is utf8, so the writer gives binary
//!   columns the character set `binary`;
//! - [`result_end`]: opensrv ends a result set with status flags 0 and no warnings, so the
//!   writer gives its end the session's flags and the statement's count of notes; the OK of
//!   a `COM_PING` or `COM_INIT_DB` gets the flags too;
//! - [`execute_types`]: opensrv reads an execution that does not send its parameters' types
//!   one byte early, so the reader gives it the types its statement was last sent;
//! - [`binary_literals`]: opensrv ends the connection on a statement that is not UTF-8, so
//!   the reader writes its string literals that are not in hexadecimal.
//!
//! When the server shuts down, a read that waits for the next command sees end-of-stream, so
//! the connection ends after its running statement.
//!
//! Both halves are generic over `AsyncRead`/`AsyncWrite`, so tests drive them with
//! `tokio::io::duplex`.

mod binary_literals;
mod column_charset;
mod deadlines;
mod execute_types;
#[cfg(feature = "fuzzing")]
pub use self::binary_literals::fuzz_binary_literals;
#[cfg(feature = "fuzzing")]
pub use self::execute_types::fuzz_bound_types;
mod field_list;
mod hello_round;
#[cfg(feature = "fuzzing")]
pub use self::hello_round::without_hello;
mod login_err;
mod login_tee;
mod one_packet_per_read;
mod reply_rewrite;
mod result_end;
mod status_flags;
mod unsupported;

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use authplugin::packet::framing::{HEADER_LEN, parse_packet};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use zeroize::Zeroizing;

use self::column_charset::{ColumnCharsets, Progress};
pub use self::deadlines::Timeouts;
use self::deadlines::{ReadDeadline, WriteStall};
use self::login_err::ErrReplacement;
pub use self::login_tee::LoginPacket;
use self::login_tee::{LoginTee, Teed};
use self::one_packet_per_read::ClientPackets;
use self::reply_rewrite::{MAX_REWRITTEN_REPLY, ReplyRewrite};
use self::result_end::ResultEnd;

/// State shared by the two halves of a connection and the shim's hooks.
#[derive(Debug, Default)]
pub struct ConnShared {
    inner: Mutex<SharedState>,
}

#[derive(Debug, Default)]
struct SharedState {
    /// The payload of the client's first packet, once complete.
    first_packet: Option<LoginPacket>,
    /// The first packet was bigger than [`login_tee::MAX_HANDSHAKE_PACKET`] or badly framed.
    first_packet_refused: bool,
    /// The ERR payload to send in place of opensrv's next packet (a refused login).
    deny: Option<Vec<u8>>,
    /// The login succeeded: reads now use the idle timeout.
    authenticated: bool,
    /// The client sent COM_FIELD_LIST; its reply needs fixing (see [`field_list`]).
    field_list_pending: bool,
    /// The client sent a command opensrv does not implement (it would answer OK without
    /// doing anything); its reply is replaced by an ERR (see [`unsupported`]).
    unsupported_pending: Option<u8>,
    /// The greeting has been written (the first packet; see [`status_flags`]).
    greeted: bool,
    /// The next packet is the login's OK (see [`status_flags`]).
    login_ok_pending: bool,
    /// The session's resumption ticket, sent to the relay right before the login's OK.
    login_ticket: Option<Vec<u8>>,
    /// The Hello a relay answered the greeting with (see [`hello_round`]).
    hello: Option<Vec<u8>>,
    /// The proof to append to the AuthSwitchRequest opensrv writes next (see
    /// [`hello_round`]).
    switch_proof: Option<Vec<u8>>,
    /// The result set opensrv writes next: which of its columns are binary (see
    /// [`column_charset`]) and how many notes its statement left (see [`result_end`]).
    result_set: Option<(Vec<bool>, u16)>,
    /// The prepared statement whose reply opensrv writes next: how many EOFs end its
    /// parameters' and columns' definitions (see [`result_end`]).
    prepared: Option<usize>,
    /// The session's status flags as its last statement left them (see [`result_end`]).
    status: u16,
    /// The client sent a command whose OK opensrv writes without the session's flags
    /// (`COM_PING`, `COM_INIT_DB`; see [`result_end`]).
    own_ok_pending: bool,
    /// The prepared statements' parameter types (see [`execute_types`]).
    bound_types: execute_types::BoundTypes,
    /// An idle timeout the session set (`wait_timeout`), for the reader to take.
    idle: Option<std::time::Duration>,
    /// How many notes the statement whose OK opensrv writes next left (opensrv writes 0).
    ok_warnings: Option<u16>,
    /// The code and SQLSTATE the ERR opensrv writes next gets, one opensrv does not have.
    err_code: Option<(u16, [u8; 5])>,
}

impl SharedState {
    /// Whether the client asked for `CLIENT_DEPRECATE_EOF` (opensrv takes the client's flags
    /// as they are).
    fn deprecates_eof(&self) -> bool {
        let flags = self
            .first_packet
            .as_deref()
            .and_then(|p| p.first_chunk::<4>());
        flags.is_some_and(|flags| {
            u32::from_le_bytes(*flags) & authplugin::packet::capabilities::CLIENT_DEPRECATE_EOF != 0
        })
    }
}

impl ConnShared {
    fn state(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client's first packet (its HandshakeResponse41), if it arrived whole and within
    /// [`login_tee::MAX_HANDSHAKE_PACKET`].
    #[must_use]
    pub fn first_packet(&self) -> Option<LoginPacket> {
        let state = self.state();
        if state.first_packet_refused {
            return None;
        }
        state.first_packet.clone()
    }

    /// The Hello a relay's login carried in place of its answer (see [`hello_round`]).
    #[must_use]
    pub fn hello(&self) -> Option<Vec<u8>> {
        self.state().hello.clone()
    }

    /// Makes the writer append `proof` to the AuthSwitchRequest opensrv writes next.
    pub fn prove_in_switch(&self, proof: Vec<u8>) {
        self.state().switch_proof = Some(proof);
    }

    /// Announces the result set opensrv writes next: which of its columns are binary (the
    /// writer gives their definitions the character set `binary`, see [`column_charset`])
    /// and how many notes its statement left (its end says so, see [`result_end`]).
    pub fn result_set_next(&self, binary: Vec<bool>, warnings: u16) {
        // Replaced at every result set, so an announcement never outlives its own.
        self.state().result_set = Some((binary, warnings));
    }

    /// Announces the reply to a `COM_STMT_PREPARE` opensrv writes next, with `params`
    /// parameters and `columns` columns: the EOFs after their definitions (when the client
    /// reads EOFs) carry the session's flags (see [`result_end`]).
    pub fn prepared_next(&self, params: usize, columns: usize) {
        self.state().prepared = Some(usize::from(params > 0) + usize::from(columns > 0));
    }

    /// The session's status flags are now `status` (autocommit, in transaction): the end of
    /// a result set and the OKs opensrv writes on its own carry them.
    pub fn session_status(&self, status: u16) {
        self.state().status = status;
    }

    /// Statement `id` was prepared with `params` parameters (see [`execute_types`]).
    pub fn statement_prepared(&self, id: u32, params: u16) {
        self.state().bound_types.prepared(id, params);
    }

    /// Statement `id` was closed.
    pub fn statement_closed(&self, id: u32) {
        self.state().bound_types.closed(id);
    }

    /// The OK opensrv writes next counts `warnings` notes (`SHOW WARNINGS`).
    pub fn ok_warnings_next(&self, warnings: u16) {
        self.state().ok_warnings = (warnings > 0).then_some(warnings);
    }

    /// The ERR opensrv writes next gets `code` and `sql_state` (MySQL codes opensrv's
    /// `ErrorKind` lacks, such as 3024).
    pub fn err_code_next(&self, code: u16, sql_state: [u8; 5]) {
        self.state().err_code = Some((code, sql_state));
    }

    /// The session set `wait_timeout`: the wait for its next command ends after `idle`,
    /// counted from now.
    pub fn wait_timeout(&self, idle: std::time::Duration) {
        self.state().idle = Some(idle);
    }

    /// Makes the writer send `err_payload` (an ERR packet payload) in place of the next
    /// packet opensrv writes, and drop everything after it.
    pub fn deny_with(&self, err_payload: Vec<u8>) {
        self.state().deny = Some(err_payload);
    }

    /// Marks the login as done: reads switch from the handshake deadline to the idle one,
    /// and the login's OK says autocommit ([`status_flags`]). A relayed session's `ticket`
    /// goes before the OK, as an AuthMoreData packet (docs/protocol.md).
    pub fn mark_authenticated(&self, ticket: Option<Vec<u8>>) {
        let mut state = self.state();
        state.authenticated = true;
        state.greeted = true;
        state.login_ok_pending = true;
        state.status = status_flags::SERVER_STATUS_AUTOCOMMIT;
        state.login_ticket = ticket;
    }

    fn authenticated(&self) -> bool {
        self.state().authenticated
    }

    /// The result set announced ([`Self::result_set_next`]): which columns are binary, and
    /// what its end is to say.
    fn take_result_set(&self) -> Option<(Vec<bool>, ResultEnd)> {
        let mut state = self.state();
        let (binary, warnings) = state.result_set.take()?;
        let end = ResultEnd::new(state.status, warnings, state.deprecates_eof());
        Some((binary, end))
    }

    /// The prepared statement's reply announced ([`Self::prepared_next`]), if it has EOFs.
    fn take_prepared(&self) -> Option<ResultEnd> {
        let mut state = self.state();
        let eofs = state.prepared.take().filter(|n| *n > 0)?;
        (!state.deprecates_eof()).then(|| ResultEnd::prepared(state.status, eofs))
    }

    fn take_deny(&self) -> Option<Vec<u8>> {
        self.state().deny.take()
    }

    #[cfg(test)]
    fn take_field_list(&self) -> bool {
        std::mem::take(&mut self.state().field_list_pending)
    }

    #[cfg(test)]
    fn take_unsupported(&self) -> Option<u8> {
        self.state().unsupported_pending.take()
    }

    /// The rewrite the reply now being written needs, if any (each is taken once).
    fn take_reply_rewrite(&self) -> Option<ReplyRewrite> {
        let mut state = self.state();
        let autocommit = status_flags::SERVER_STATUS_AUTOCOMMIT;
        if !std::mem::replace(&mut state.greeted, true) {
            return Some(ReplyRewrite::GreetingStatus(autocommit));
        }
        if std::mem::take(&mut state.field_list_pending) {
            return Some(ReplyRewrite::FieldList);
        }
        if let Some(proof) = state.switch_proof.take() {
            return Some(ReplyRewrite::SwitchProof(proof));
        }
        if std::mem::take(&mut state.login_ok_pending) {
            return Some(ReplyRewrite::LoginOk {
                status: autocommit,
                ticket: state.login_ticket.take(),
            });
        }
        if let Some(warnings) = state.ok_warnings.take() {
            return Some(ReplyRewrite::OkWarnings(warnings));
        }
        if std::mem::take(&mut state.own_ok_pending) {
            return Some(ReplyRewrite::OkStatus(state.status));
        }
        if let Some((code, sql_state)) = state.err_code.take() {
            return Some(ReplyRewrite::ErrCode(code, sql_state));
        }
        let command = state.unsupported_pending.take()?;
        Some(ReplyRewrite::Unsupported(
            unsupported::unsupported_command_err(command),
        ))
    }
}

/// The read half: tees the first packet, hands opensrv one packet per read, notes commands
/// whose reply needs a rewrite, enforces read deadlines, ends on shutdown.
pub struct AuthReader<R> {
    inner: R,
    shared: Arc<ConnShared>,
    tee: LoginTee,
    deadline: ReadDeadline,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    packets: ClientPackets,
    /// The client's first packet while it arrives: opensrv gets it only whole (see
    /// [`hello_round`]); `None` once handed on.
    first: Option<Zeroizing<Vec<u8>>>,
    /// The first packet, whole, as opensrv gets it, until it has all of it.
    first_out: Zeroizing<Vec<u8>>,
}

impl<R> AuthReader<R> {
    /// Wraps `inner`; the handshake deadline starts now.
    pub fn new(
        inner: R,
        shared: Arc<ConnShared>,
        timeouts: Timeouts,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inner,
            shared,
            tee: LoginTee::new(),
            deadline: ReadDeadline::new(timeouts),
            shutdown: Box::pin(shutdown.cancelled_owned()),
            packets: ClientPackets::default(),
            first: Some(Zeroizing::new(Vec::new())),
            first_out: Zeroizing::new(Vec::new()),
        }
    }

    /// Takes note of `bytes`, just handed to opensrv.
    fn client_bytes(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match self.tee.feed(bytes) {
            Some(Teed::Packet(payload)) => self.shared.state().first_packet = Some(payload),
            Some(Teed::Refused) => self.shared.state().first_packet_refused = true,
            None => {}
        }
        let commands = self.packets.handed_out(bytes);
        if self.deadline.command_phase() {
            self.deadline.restart_idle();
            for command in commands {
                let mut state = self.shared.state();
                if command == field_list::COM_FIELD_LIST {
                    state.field_list_pending = true;
                } else if result_end::OWN_OK_COMMANDS.contains(&command) {
                    state.own_ok_pending = true;
                } else if !unsupported::opensrv_handles(command) {
                    state.unsupported_pending = Some(command);
                }
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AuthReader<R> {
    /// Reads the client's first packet whole, then hands it to opensrv: as it came, or for
    /// a relay's login that asks for the compute's proof, without the Hello
    /// ([`hello_round::without_hello`]). Bytes after it are held for the next reads. A
    /// packet too long or badly framed goes on as it came (the tee refuses it).
    fn poll_first(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.first_out.is_empty() {
                let n = self.first_out.len().min(buf.remaining());
                let handed = Zeroizing::new(self.first_out.drain(..n).collect::<Vec<u8>>());
                buf.put_slice(&handed);
                self.client_bytes(&handed);
                return Poll::Ready(Ok(()));
            }
            let Some(collecting) = self.first.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match parse_packet(collecting, login_tee::MAX_HANDSHAKE_PACKET) {
                Ok(Some((packet, used))) => {
                    self.packets
                        .hold(collecting.get(used..).unwrap_or_default());
                    self.first_out = match hello_round::without_hello(&packet.payload) {
                        Some((login, hello)) => {
                            self.shared.state().hello = Some(hello);
                            let mut out = Zeroizing::new(Vec::with_capacity(login.len() + 4));
                            authplugin::packet::write_packet(&mut out, packet.sequence_id, &login);
                            out
                        }
                        None => Zeroizing::new(collecting.get(..used).unwrap_or_default().to_vec()),
                    };
                    self.first = None;
                }
                Ok(None) if collecting.len() <= login_tee::MAX_HANDSHAKE_PACKET + HEADER_LEN => {
                    let mut chunk = Zeroizing::new([0u8; 4096]);
                    let mut read = ReadBuf::new(&mut chunk[..]);
                    match Pin::new(&mut self.inner).poll_read(cx, &mut read) {
                        Poll::Ready(Ok(())) if read.filled().is_empty() => {
                            // The client left mid-login: opensrv sees what came, then the end.
                            self.first_out = std::mem::take(collecting);
                            self.first = None;
                            if self.first_out.is_empty() {
                                return Poll::Ready(Ok(()));
                            }
                        }
                        Poll::Ready(Ok(())) => login_tee::extend_wiping(collecting, read.filled()),
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => {
                            return match self.deadline.expired(cx) {
                                Some(timed_out) => Poll::Ready(Err(timed_out)),
                                None => Poll::Pending,
                            };
                        }
                    }
                }
                Ok(None) | Err(_) => {
                    self.first_out = std::mem::take(collecting);
                    self.first = None;
                }
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AuthReader<R> {
    /// With the start of a `COM_STMT_EXECUTE` or a `COM_QUERY` held, reads until it is
    /// whole, then gives an execution the types of its statement's last execution where it
    /// left them out ([`execute_types`]) and a statement that is not UTF-8 its literals in
    /// hexadecimal ([`binary_literals`]). Ready when the held bytes can be handed out.
    fn poll_whole_packet(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.packets.at_boundary() {
            return Poll::Ready(Ok(()));
        }
        let Some(len) = whole_packet_len(self.packets.held()) else {
            return Poll::Ready(Ok(()));
        };
        while self.packets.held().len() < len {
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut self.inner).poll_read(cx, &mut read) {
                // The client left mid-packet: opensrv sees what came, then the end.
                Poll::Ready(Ok(())) if read.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => self.packets.hold(read.filled()),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    return match self.deadline.expired(cx) {
                        Some(timed_out) => Poll::Ready(Err(timed_out)),
                        None => Poll::Pending,
                    };
                }
            }
        }
        let packet = self.packets.held().get(..len).unwrap_or_default();
        if packet
            .get(HEADER_LEN..)
            .is_some_and(result_end::answered_by_opensrv)
        {
            self.shared.result_set_next(vec![false], 0);
        }
        let rewritten = match execute_types::execute_len(packet) {
            Some(_) => self.shared.state().bound_types.with_bound_types(packet),
            None => binary_literals::as_utf8(packet),
        };
        if let Some(rewritten) = rewritten {
            self.packets.replace_held(len, &rewritten);
        }
        Poll::Ready(Ok(()))
    }
}

/// Whether `bytes`, read at a packet boundary, start a packet of `command` in one frame, and
/// if so the length of that whole packet.
fn one_frame_len(bytes: &[u8], command: u8) -> Option<usize> {
    match bytes {
        [a, b, c, _seq, first, ..] if *first == command => {
            let len = usize::from(*a) | usize::from(*b) << 8 | usize::from(*c) << 16;
            (len < authplugin::packet::framing::MAX_FRAME_PAYLOAD).then_some(HEADER_LEN + len)
        }
        _ => None,
    }
}

/// The length of the packet `bytes` start (at a packet boundary) when the reader takes it
/// whole before opensrv reads it: a `COM_STMT_EXECUTE` or a `COM_QUERY` in one frame.
fn whole_packet_len(bytes: &[u8]) -> Option<usize> {
    execute_types::execute_len(bytes).or_else(|| binary_literals::query_len(bytes))
}

impl<R: AsyncRead + Unpin> AsyncRead for AuthReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.deadline.command_phase() && this.shared.authenticated() {
            this.deadline.enter_command_phase();
        }
        if let Some(idle) = this.shared.state().idle.take() {
            this.deadline.set_idle(idle);
        }
        // A shutdown turns the wait for the next command (or for a login) into end-of-stream:
        // opensrv then ends the connection cleanly, after the statement that was running.
        if this.shutdown.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(()));
        }
        if this.first.is_some() || !this.first_out.is_empty() {
            return this.poll_first(cx, buf);
        }
        let before = buf.filled().len();
        if this.deadline.command_phase() {
            ready!(this.poll_whole_packet(cx))?;
        }
        if let Some(bytes) = this.packets.take_held(buf.remaining()) {
            buf.put_slice(&bytes);
            this.client_bytes(&bytes);
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled().get(before..).unwrap_or_default();
                if this.deadline.command_phase()
                    && this.packets.at_boundary()
                    && whole_packet_len(new).is_some()
                {
                    // An execution or a statement: collected whole before opensrv gets it
                    // (in this poll when it came whole, as it usually does).
                    this.packets.hold(new);
                    buf.set_filled(before);
                    ready!(this.poll_whole_packet(cx))?;
                    if let Some(bytes) = this.packets.take_held(buf.remaining()) {
                        buf.put_slice(&bytes);
                        this.client_bytes(&bytes);
                    }
                    return Poll::Ready(Ok(()));
                }
                let keep = this.packets.hold_back(new);
                buf.set_filled(before + keep);
                this.client_bytes(buf.filled().get(before..).unwrap_or_default());
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.deadline.expired(cx) {
                Some(timed_out) => Poll::Ready(Err(timed_out)),
                None => Poll::Pending,
            },
        }
    }
}

/// What the writer does with opensrv's bytes.
#[derive(Debug)]
enum WriteMode {
    /// Pass them on.
    Pass,
    /// A login was refused: send the shim's ERR in place of opensrv's (see [`login_err`]).
    DenyLogin(ErrReplacement),
    /// The replacement ERR is queued; drop everything opensrv writes.
    Discard,
    /// Collect opensrv's next reply (one packet) to send `rewrite`'s replacement instead.
    Rewrite {
        packet: Vec<u8>,
        rewrite: ReplyRewrite,
    },
    /// A result set starts: mark its binary columns (see [`column_charset`]), then end it
    /// with the session's flags and the statement's notes (see [`result_end`]).
    Columns(ColumnCharsets, ResultEnd),
    /// A result set's rows, or a prepared statement's definitions: end them (see
    /// [`result_end`]).
    Rows(ResultEnd),
}

/// The write half: replaces the replies opensrv gets wrong, enforces the write-stall
/// deadline.
pub struct AuthWriter<W> {
    inner: W,
    shared: Arc<ConnShared>,
    mode: WriteMode,
    /// Bytes waiting to be sent: our own replacements, and opensrv's packets gathered until
    /// its flush at the end of each reply (see [`COALESCE_BYTES`]).
    out: Vec<u8>,
    /// How much of `out` is sent.
    sent: usize,
    stall: WriteStall,
}

/// opensrv writes each packet of a reply on its own, its header in one write and the rest in
/// another, then flushes once at the end of the reply. Passed on as they come, a point select's
/// five packets took eight `send` calls, each waking the client for a fragment (server-shim
/// spent 66 µs of CPU per point select, most of it switching tasks). The writer gathers them and
/// sends at the flush, or once this many bytes wait, so a large result still streams.
const COALESCE_BYTES: usize = 16 * 1024;

/// Once sent, a buffer that grew beyond this for a large reply is freed rather than kept for
/// the connection's life.
const KEEP_BUFFER_BYTES: usize = 4 * 1024;

impl<W> AuthWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W, shared: Arc<ConnShared>, timeouts: Timeouts) -> Self {
        Self {
            inner,
            shared,
            mode: WriteMode::Pass,
            out: Vec::new(),
            sent: 0,
            stall: WriteStall::new(timeouts),
        }
    }

    /// Takes `buf` (opensrv's bytes) into the current rewrite; returns once it is consumed.
    fn rewrite(&mut self, buf: &[u8]) {
        match &mut self.mode {
            WriteMode::Pass | WriteMode::Discard => {}
            WriteMode::DenyLogin(replacement) => {
                if replacement.feed(buf, &mut self.out) {
                    self.mode = WriteMode::Discard;
                }
            }
            WriteMode::Columns(columns, end) => match columns.feed(buf, &mut self.out) {
                Progress::More => {}
                Progress::Passed => self.mode = WriteMode::Pass,
                Progress::Defined(rest) => {
                    let mut end = std::mem::replace(end, ResultEnd::new(0, 0, true));
                    self.mode = if end.feed(&rest, &mut self.out) {
                        WriteMode::Pass
                    } else {
                        WriteMode::Rows(end)
                    };
                }
            },
            WriteMode::Rows(end) => {
                if end.feed(buf, &mut self.out) {
                    self.mode = WriteMode::Pass;
                }
            }
            WriteMode::Rewrite { packet, rewrite } => {
                packet.extend_from_slice(buf);
                if let Ok(Some((p, used))) = parse_packet(packet, MAX_REWRITTEN_REPLY) {
                    let mut sequence_id = p.sequence_id;
                    if let Some(before) = rewrite.packet_before(&p.payload) {
                        authplugin::packet::write_packet(&mut self.out, sequence_id, &before);
                        sequence_id = sequence_id.wrapping_add(1);
                    }
                    match rewrite.replacement(&p.payload) {
                        Some(payload) => {
                            authplugin::packet::write_packet(&mut self.out, sequence_id, &payload);
                        }
                        // Renumbered if a packet went before it.
                        None if sequence_id != p.sequence_id => {
                            authplugin::packet::write_packet(
                                &mut self.out,
                                sequence_id,
                                &p.payload,
                            );
                        }
                        None => self
                            .out
                            .extend_from_slice(packet.get(..used).unwrap_or_default()),
                    }
                    self.out
                        .extend_from_slice(packet.get(used..).unwrap_or_default());
                    self.mode = WriteMode::Pass;
                } else if packet.len() > MAX_REWRITTEN_REPLY {
                    // Not the reply we expected: pass it on untouched.
                    self.out.append(packet);
                    self.mode = WriteMode::Pass;
                }
            }
        }
    }
}

impl<W: AsyncWrite + Unpin> AuthWriter<W> {
    /// Sends the waiting bytes.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(unsent) = self.out.get(self.sent..).filter(|u| !u.is_empty()) {
            match Pin::new(&mut self.inner).poll_write(cx, unsent) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.stall.progress();
                    self.sent += n;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.stall.pending_or_timeout(cx),
            }
        }
        self.sent = 0;
        if self.out.capacity() > KEEP_BUFFER_BYTES {
            self.out = Vec::new();
        } else {
            self.out.clear();
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for AuthWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.out.len() >= COALESCE_BYTES {
            ready!(this.poll_drain(cx))?;
        }
        if matches!(this.mode, WriteMode::Pass) {
            if let Some(replacement) = this.shared.take_deny() {
                this.mode = WriteMode::DenyLogin(ErrReplacement::new(replacement));
            } else if let Some(rewrite) = this.shared.take_reply_rewrite() {
                this.mode = WriteMode::Rewrite {
                    packet: Vec::new(),
                    rewrite,
                };
            } else if let Some((binary, end)) = this.shared.take_result_set() {
                this.mode = WriteMode::Columns(ColumnCharsets::new(binary), end);
            } else if let Some(end) = this.shared.take_prepared() {
                this.mode = WriteMode::Rows(end);
            }
        }
        if !matches!(this.mode, WriteMode::Pass) {
            this.rewrite(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        if this.out.is_empty() && buf.len() >= COALESCE_BYTES {
            // Large enough to send on its own, without a copy.
            let written = Pin::new(&mut this.inner).poll_write(cx, buf);
            return this.stall.watch(cx, written);
        }
        this.out.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        this.stall.watch(cx, flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// What the tests of every workaround share.
#[cfg(test)]
mod test_support {
    use std::time::Duration;

    use super::Timeouts;

    pub(super) const T: Timeouts = Timeouts {
        handshake: Duration::from_secs(10),
        idle: Duration::from_secs(100),
        write_stall: Duration::from_secs(5),
    };

    /// One packet: header and `payload`.
    pub(super) fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        authplugin::packet::write_packet(&mut out, seq, payload);
        out
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::test_support::T;
    use super::*;

    /// A socket stand-in that counts the writes it gets.
    #[derive(Default)]
    struct CountingWriter {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl AsyncWrite for CountingWriter {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_replys_packets_leave_in_one_write_at_the_flush_and_a_large_one_unbuffered() {
        use tokio::io::AsyncWriteExt as _;
        let shared = Arc::new(ConnShared::default());
        let mut writer = AuthWriter::new(CountingWriter::default(), shared, T);
        let mut reply = Vec::new();
        for (seq, payload) in [
            &b"\x01"[..],
            b"column",
            b"\xfe\0\0\x02\0",
            b"row",
            b"\xfe\0\0\x02\0",
        ]
        .iter()
        .enumerate()
        {
            let packet = super::test_support::packet(u8::try_from(seq).unwrap(), payload);
            // As opensrv writes a packet: its header, then the rest.
            writer.write_all(&packet[..4]).await.unwrap();
            writer.write_all(&packet[4..]).await.unwrap();
            reply.extend_from_slice(&packet);
        }
        assert_eq!(writer.inner.writes, 0, "nothing is sent before the flush");
        writer.flush().await.unwrap();
        assert_eq!(writer.inner.writes, 1);
        assert_eq!(writer.inner.bytes, reply);
        let large = vec![7_u8; COALESCE_BYTES];
        writer.write_all(&large).await.unwrap();
        assert_eq!(
            writer.inner.writes, 2,
            "a large write is passed on as it comes"
        );
        writer.flush().await.unwrap();
        assert_eq!(writer.inner.bytes.len(), reply.len() + large.len());
    }

    #[tokio::test]
    async fn ends_stream_when_server_shuts_down() {
        let (_client, server) = tokio::io::duplex(64);
        let shared = Arc::new(ConnShared::default());
        let token = CancellationToken::new();
        let mut reader = AuthReader::new(server, shared, T, token.clone());
        token.cancel();
        let mut b = [0u8; 1];
        assert_eq!(reader.read(&mut b).await.unwrap(), 0);
    }
}
