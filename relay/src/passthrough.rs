//! The byte pump: after a relayed login (and on the direct route) the relay only copies
//! bytes (architecture.md §2, P8), in both directions, with half-close: when one side finishes
//! sending, the other side's write half is shut down and the opposite direction carries on
//! until it finishes too.
//!
//! Buffers are allocated only while bytes are in flight and freed as soon as they are
//! written, so an idle connection (most of them, behind a pool) holds no copy buffer at all.
//! `tokio::io::copy_bidirectional` keeps two 8 KiB buffers per connection for its whole life,
//! which made an idle forwarded connection cost about 24 KiB of relay memory.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::tls::{ClientStream, ComputeStream};

/// A socket the pump copies from and to. `poll_read_ready` lets an idle direction wait
/// without holding a buffer.
pub trait PumpIo: AsyncRead + AsyncWrite + Unpin {
    /// Ready once a read may bring bytes (or end-of-stream). A stream that cannot tell says
    /// ready: the pump then reads into a pooled buffer and gives it back if nothing came.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>>;
}

impl<T: PumpIo + ?Sized> PumpIo for &mut T {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        (**self).poll_read_ready(cx)
    }
}

impl PumpIo for TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Self::poll_read_ready(self, cx)
    }
}

impl PumpIo for ComputeStream<TcpStream> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self {
            Self::Plain(s) => s.poll_read_ready(cx),
            Self::Tls(_) => Poll::Ready(Ok(())),
        }
    }
}

impl PumpIo for ClientStream<TcpStream> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self {
            Self::Plain(s) => s.poll_read_ready(cx),
            // rustls may hold decrypted bytes the socket no longer shows: read to find out.
            Self::Tls(_) | Self::Gone => Poll::Ready(Ok(())),
        }
    }
}

/// Capacity of a copy buffer while data flows.
const BUFFER_LEN: usize = 16 * 1024;
/// Drained buffers kept per worker thread for the next message, so a busy connection does not
/// allocate one per message; bounded, so idle connections still cost no buffer memory.
const POOL_MAX: usize = 64;

thread_local! {
    static POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of `BUFFER_LEN` initialised bytes (zeroed once, when first allocated).
fn take_buffer() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0; BUFFER_LEN])
}

fn give_back(buf: Vec<u8>) {
    if buf.len() != BUFFER_LEN {
        return;
    }
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < POOL_MAX {
            pool.push(buf);
        }
    });
}

/// Bytes copied, and how the session ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct PumpReport {
    /// Client → compute bytes.
    pub client_to_compute: u64,
    /// Compute → client bytes.
    pub compute_to_client: u64,
    /// Bytes the pump read from the client (forwarded, or answered here).
    pub client_read: u64,
    /// Bytes the pump read from the compute.
    pub compute_read: u64,
    /// How it ended.
    pub ended_by: PumpEnd,
}

/// How a forwarded session's copy ended (its `label()` is the `ended_by` of its log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PumpEnd {
    /// Both sides closed cleanly.
    #[default]
    Eof,
    /// The client's socket failed.
    ClientError,
    /// The compute's socket failed.
    ComputeError,
    /// A reset ended a session spliced below TCP.
    Reset,
    /// The compute went away under a session the observer keeps for a reattach
    /// ([`Observer::detached`]): the client's socket is left open, untouched.
    Detached,
    /// The observer ended it ([`Reaction::End`]).
    Observer,
    /// The observer handed the session to the kernel splice ([`Observer::hand_back`],
    /// [`Reaction::Take`]): both sockets untouched.
    Kernel,
    /// A session spliced below TCP could not be taken back to the relay.
    TakeBackFailed,
    /// Segments of a session spliced below TCP went past the program to the relay's own
    /// sockets, after it had rewritten others: the connections cannot go on.
    Bypassed,
    /// The observer asked for the compute leg, both directions quiet
    /// ([`Observer::step_aside_at`]): both sockets untouched; the caller pumps again after.
    Aside,
}

impl PumpEnd {
    /// The log field's value.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Eof => "eof",
            Self::ClientError => "client_error",
            Self::ComputeError => "compute_error",
            Self::Reset => "reset",
            Self::Detached => "detached",
            Self::Observer => "observer",
            Self::Kernel => "kernel",
            Self::TakeBackFailed => "take_back_failed",
            Self::Bypassed => "bypassed",
            Self::Aside => "aside",
        }
    }
}

impl PumpReport {
    /// This report followed by `later`'s, on the same session: the bytes added, ended as
    /// `later` ended.
    #[must_use]
    pub const fn then(self, later: &Self) -> Self {
        Self {
            client_to_compute: self.client_to_compute + later.client_to_compute,
            compute_to_client: self.compute_to_client + later.compute_to_client,
            client_read: self.client_read + later.client_read,
            compute_read: self.compute_read + later.compute_read,
            ended_by: later.ended_by,
        }
    }
}

/// One direction of the copy.
#[derive(Default)]
struct Half {
    /// Bytes read and not yet written; `None` while idle.
    buf: Option<Vec<u8>>,
    start: usize,
    end: usize,
    /// The reader reached end-of-stream.
    eof: bool,
    /// The writer was shut down after that.
    shut: bool,
    copied: u64,
    /// Bytes read from the reader (written on, answered, or still buffered).
    read: u64,
    /// Called for every read that brought bytes (and was not answered).
    on_read: Option<OnRead>,
    /// A reply the observer made to what was read, for the other direction to write.
    answered: Option<Vec<u8>>,
    /// The compute direction of a detached session: its end-of-stream is not passed on.
    keep_open: bool,
    /// Bytes read after `end` and not written: the observer sees them again, first, with the
    /// next read ([`Reaction::Hold`]).
    held: usize,
}

/// What the pump calls when the client sends bytes (the frozen tier thaws the compute).
pub type OnRead = std::sync::Arc<dyn Fn() + Send + Sync>;

/// What the pump does with a chunk its observer saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Reaction {
    /// Writes it on (as the observer left it).
    Forward,
    /// Writes this reply to the client instead (client chunks only).
    Answer(Vec<u8>),
    /// Writes on all but its last this-many bytes, which the observer sees again at the start
    /// of the next chunk (a statement id cut by the end of a read, to be translated whole).
    Hold(usize),
    /// Ends the session: closes both sides without writing the chunk.
    End,
    /// The observer took the chunk (compute chunks only, when offered: `may_take`): the pump
    /// returns at once, `"kernel"`, without writing it, both sockets untouched. The caller
    /// writes it once the session is in the kernel splice, as the login's OK is written.
    Take,
}

/// Sees every chunk the pump reads, in the order read, before it is written on: parking
/// follows each connection's commands this way (docs/parking.md, *Idleness by commands*). It
/// may change the bytes in place (a reattached session's statement ids, `statement_ids`).
pub trait Observer {
    /// Bytes the client sent. With `may_answer` (nothing is on its way to the client), the
    /// observer may answer them itself ([`Reaction::Answer`]): the pump writes the reply to
    /// the client in place of forwarding the bytes (a ping on a parked connection).
    fn client_bytes(&mut self, bytes: &mut [u8], may_answer: bool) -> Reaction;
    /// Bytes the compute sent ([`Reaction::Answer`] is taken as [`Reaction::Forward`]).
    /// With `may_take` (nothing the client sent is waiting to be written), the observer may
    /// take them ([`Reaction::Take`]).
    fn server_bytes(&mut self, bytes: &mut [u8], may_take: bool) -> Reaction;
    /// Whether the client is owed nothing more (no command outstanding): once it has hung
    /// up, the pump then ends without waiting for the compute to close (a frozen compute
    /// would not until thawed).
    fn owes_nothing(&self) -> bool {
        false
    }
    /// Whether the compute was stopped under this session, between commands, for the session
    /// to be reattached at its next command: the compute's close (or reset) then ends the
    /// pump without closing the client.
    fn detached(&self) -> bool {
        false
    }
    /// When the relay wants the session's compute leg for itself (to read the session's
    /// state), if it does: once both directions are quiet at that time, the pump returns with
    /// `ended_by` [`PumpEnd::Aside`], both sockets untouched.
    fn step_aside_at(&self) -> Option<tokio::time::Instant> {
        None
    }
    /// Whether the session may go back to the kernel splice now (a session taken back from
    /// it for parking has sent a command that counts as use): the pump then returns, as soon
    /// as nothing it read is left to write, with `ended_by` [`PumpEnd::Kernel`].
    fn hand_back(&self) -> bool {
        false
    }
}

/// Which side a failure came from.
#[derive(Debug, Clone, Copy)]
enum Side {
    Client,
    Compute,
    /// Not a failure: the compute went away under a detached session.
    Detached,
    /// The observer ended the session ([`Reaction::End`]).
    Observer,
    /// Not a failure: the session goes back to the kernel ([`Observer::hand_back`]).
    Kernel,
    /// Not a failure: the relay takes the compute leg for a moment
    /// ([`Observer::step_aside_at`]).
    Aside,
}

impl Half {
    /// Starts with bytes already read from the reader side, the last `held` of them held
    /// ([`Reaction::Hold`]).
    fn with(mut early: Vec<u8>, held: usize) -> Self {
        let len = early.len();
        let held = held.min(len);
        if held > 0 {
            // Room for the next read behind them.
            early.resize(len.max(BUFFER_LEN), 0);
        }
        Self {
            buf: (len > 0).then_some(early),
            end: len - held,
            held,
            ..Self::default()
        }
    }

    fn done(&self) -> bool {
        self.shut
    }

    /// Nothing read and not yet written, nothing held, no reply waiting, not at its end.
    fn quiet(&self) -> bool {
        self.buf.is_none() && self.held == 0 && self.answered.is_none() && !self.eof
    }

    /// Returns the buffer to the pool, so a quiet direction holds no memory.
    fn release(&mut self) {
        if let Some(buf) = self.buf.take() {
            give_back(buf);
        }
    }

    /// Moves bytes from `from` to `to` until it would block. `Ready(Ok)` once this direction
    /// is finished (end-of-stream seen, everything written, writer shut down).
    fn poll_copy<F: PumpIo, T: PumpIo>(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut F,
        to: &mut T,
        from_side: Side,
        to_side: Side,
        observe: &mut dyn FnMut(&mut [u8]) -> Reaction,
    ) -> Poll<Result<(), Side>> {
        loop {
            if let Some(buf) = &self.buf {
                while self.start < self.end {
                    let pending = buf.get(self.start..self.end).unwrap_or_default();
                    let n =
                        ready!(Pin::new(&mut *to).poll_write(cx, pending)).map_err(|_| to_side)?;
                    if n == 0 {
                        return Poll::Ready(Err(to_side));
                    }
                    self.start += n;
                    self.copied += n as u64;
                }
                if self.held > 0 {
                    // Held bytes go first in the next chunk.
                    if let Some(buf) = self.buf.as_mut() {
                        buf.copy_within(self.end..self.end + self.held, 0);
                    }
                } else {
                    // Drained: give the memory back while the connection is quiet.
                    self.release();
                }
                self.start = 0;
                self.end = 0;
            }
            if self.eof {
                if self.keep_open {
                    return Poll::Ready(Err(Side::Detached));
                }
                if !self.shut {
                    // The peer may already be gone; the other direction reports that.
                    let _ = ready!(Pin::new(&mut *to).poll_shutdown(cx));
                    self.shut = true;
                }
                return Poll::Ready(Ok(()));
            }
            // Wait without holding a buffer; take one only to read what has arrived.
            ready!(from.poll_read_ready(cx)).map_err(|_| from_side)?;
            let buf = self.buf.get_or_insert_with(take_buffer);
            let held = std::mem::take(&mut self.held);
            if held >= buf.len() {
                // An observer that held a whole chunk still needs room to read into.
                buf.resize(held + BUFFER_LEN, 0);
            }
            let mut read_buf = ReadBuf::new(buf.get_mut(held..).unwrap_or_default());
            // `poll_read`, not `try_read_buf`: on a short read it clears the socket's readiness
            // itself (edge-triggered epoll re-arms on the next byte), which saves the extra
            // `read` that would only return EAGAIN: one syscall per message and direction.
            match Pin::new(&mut *from).poll_read(cx, &mut read_buf) {
                Poll::Ready(Ok(())) => {
                    let n = read_buf.filled().len();
                    if n == 0 {
                        // Held bytes are the start of a command that will never be whole.
                        self.eof = true;
                        self.release();
                    } else {
                        self.read += n as u64;
                        let n = held + n;
                        self.start = 0;
                        self.end = n;
                        let chunk = self.buf.as_mut().and_then(|b| b.get_mut(..n));
                        match observe(chunk.unwrap_or_default()) {
                            Reaction::Forward => {}
                            Reaction::Hold(k) => {
                                self.held = k.min(n);
                                self.end = n - self.held;
                            }
                            Reaction::Answer(reply) => {
                                // Answered here: nothing goes on. The pump hands the reply to
                                // the other direction before this one reads again.
                                self.end = 0;
                                self.release();
                                self.answered = Some(reply);
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                            Reaction::End => {
                                self.end = 0;
                                self.release();
                                return Poll::Ready(Err(Side::Observer));
                            }
                            Reaction::Take => {
                                self.end = 0;
                                self.release();
                                return Poll::Ready(Err(Side::Kernel));
                            }
                        }
                        if let Some(on_read) = &self.on_read {
                            on_read();
                        }
                    }
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Err(from_side)),
                // Spurious readiness (now cleared): wait again without holding memory.
                Poll::Pending => {
                    self.held = held;
                    if held == 0 {
                        self.release();
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Copies until both directions are done or a socket fails. Bytes either side sent before
/// the pump started (read along with the last login packet) are delivered first.
/// `on_upload` is called whenever the client sends bytes; `observer` sees every chunk, those
/// early bytes included (here, when the pump is made).
///
/// Not an `async fn`: an `async fn` keeps its arguments beside what is made of them for the
/// pump's whole life, and an idle connection's memory is its whole cost (BENCHMARKS.md §3).
pub fn pump<'a, C: PumpIo + 'a, D: PumpIo + 'a>(
    mut client: C,
    mut client_rest: Vec<u8>,
    mut compute: D,
    mut compute_rest: Vec<u8>,
    on_upload: Option<OnRead>,
    mut observer: Option<&'a mut (dyn Observer + Send)>,
) -> impl Future<Output = PumpReport> + 'a {
    let (mut up_early_held, mut down_early_held) = (0, 0);
    let mut ended_early = false;
    if let Some(o) = observer.as_mut() {
        // The compute's early bytes were sent before it saw any of the client's.
        let early = [
            o.server_bytes(&mut compute_rest, false),
            o.client_bytes(&mut client_rest, false),
        ];
        ended_early = early.contains(&Reaction::End);
        let [down_held, up_held] = early.map(|r| match r {
            Reaction::Hold(k) => k,
            _ => 0,
        });
        (up_early_held, down_early_held) = (up_held, down_held);
    }
    let mut up = Half::with(client_rest, up_early_held);
    up.on_read = on_upload;
    let mut down = Half::with(compute_rest, down_early_held);
    async move {
        if ended_early {
            return PumpReport {
                ended_by: PumpEnd::Observer,
                ..PumpReport::default()
            };
        }
        // Armed while the observer wants the compute leg at some time and both sides are quiet.
        let mut aside: Option<Pin<Box<tokio::time::Sleep>>> = None;
        let result = poll_fn(|cx| {
            // Only a direction with nothing in flight takes a reply made by the observer.
            let may_answer = down.buf.is_none() && !down.eof;
            let up_state = if up.done() {
                Poll::Ready(Ok(()))
            } else {
                up.poll_copy(
                    cx,
                    &mut client,
                    &mut compute,
                    Side::Client,
                    Side::Compute,
                    &mut |b| {
                        observer
                            .as_mut()
                            .map_or(Reaction::Forward, |o| o.client_bytes(b, may_answer))
                    },
                )
            };
            if let Some(reply) = up.answered.take() {
                down.end = reply.len();
                down.start = 0;
                down.buf = Some(reply);
            }
            if let Poll::Ready(Err(side)) = up_state {
                return Poll::Ready(Err(side));
            }
            down.keep_open = observer.as_ref().is_some_and(|o| o.detached());
            let may_take = up.quiet();
            let down_state = if down.done() {
                Poll::Ready(Ok(()))
            } else {
                down.poll_copy(
                    cx,
                    &mut compute,
                    &mut client,
                    Side::Compute,
                    Side::Client,
                    &mut |b| match observer.as_mut().map(|o| o.server_bytes(b, may_take)) {
                        Some(Reaction::End) => Reaction::End,
                        Some(Reaction::Take) if may_take => Reaction::Take,
                        _ => Reaction::Forward,
                    },
                )
            };
            // The client hung up owed nothing: the compute's side is closed with the pump, as the
            // compute itself would close it.
            if up.done()
                && down.buf.is_none()
                && observer.as_ref().is_some_and(|o| o.owes_nothing())
            {
                return Poll::Ready(Ok(()));
            }
            if up.quiet() && down.quiet() && observer.as_ref().is_some_and(|o| o.hand_back()) {
                return Poll::Ready(Err(Side::Kernel));
            }
            let step_aside_at = observer.as_ref().and_then(|o| o.step_aside_at());
            match step_aside_at {
                Some(at) if up.quiet() && down.quiet() => {
                    if at <= tokio::time::Instant::now() {
                        return Poll::Ready(Err(Side::Aside));
                    }
                    let sleep = aside.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                    if sleep.deadline() != at {
                        sleep.as_mut().reset(at);
                    }
                    if sleep.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(Side::Aside));
                    }
                }
                _ => aside = None,
            }
            match (up_state, down_state) {
                // A reset from a compute stopped under a detached session is its going away too.
                (_, Poll::Ready(Err(Side::Compute))) if down.keep_open => {
                    Poll::Ready(Err(Side::Detached))
                }
                (_, Poll::Ready(Err(side))) => Poll::Ready(Err(side)),
                (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
                _ => Poll::Pending,
            }
        })
        .await;
        PumpReport {
            client_to_compute: up.copied,
            compute_to_client: down.copied,
            client_read: up.read,
            compute_read: down.read,
            ended_by: match result {
                Ok(()) => PumpEnd::Eof,
                Err(Side::Client) => PumpEnd::ClientError,
                Err(Side::Compute) => PumpEnd::ComputeError,
                Err(Side::Detached) => PumpEnd::Detached,
                Err(Side::Observer) => PumpEnd::Observer,
                Err(Side::Kernel) => PumpEnd::Kernel,
                Err(Side::Aside) => PumpEnd::Aside,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn copies_both_ways_with_half_close_and_early_bytes() {
        // client_app <-> [client | relay pump | compute] <-> compute_app
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        let uploads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&uploads);
        let pump = tokio::spawn(pump(
            client,
            b"early-up".to_vec(),
            compute,
            b"early-down".to_vec(),
            Some(std::sync::Arc::new(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })),
            None,
        ));
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        client_app.write_all(&big).await.unwrap();
        client_app.shutdown().await.unwrap();
        // The compute sees the early bytes, then everything, then end-of-stream.
        let mut got = Vec::new();
        compute_app.read_to_end(&mut got).await.unwrap();
        assert_eq!(&got[..8], b"early-up");
        assert!(got[8..] == big[..]);
        // The other direction still works after the client's half-close.
        compute_app.write_all(b"reply").await.unwrap();
        compute_app.shutdown().await.unwrap();
        let mut back = Vec::new();
        client_app.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"early-downreply");
        let report = pump.await.unwrap();
        assert_eq!(report.ended_by, PumpEnd::Eof);
        assert_eq!(report.client_to_compute, 8 + 200_000);
        assert_eq!(report.compute_to_client, 15);
        // Every read of the client's bytes was reported (the early bytes were not read).
        assert!(uploads.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn reports_the_side_that_failed() {
        let (mut client_app, client) = pair().await;
        let (compute, compute_app) = pair().await;
        let pump = tokio::spawn(pump(client, Vec::new(), compute, Vec::new(), None, None));
        // The compute goes away; the client keeps sending: writes to the compute fail.
        drop(compute_app);
        let chunk = vec![7u8; 64 * 1024];
        for _ in 0..64 {
            if client_app.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let report = pump.await.unwrap();
        assert_eq!(report.ended_by, PumpEnd::ComputeError);
    }

    #[derive(Default)]
    struct Recorder {
        up: Vec<u8>,
        down: Vec<u8>,
    }

    impl Observer for Recorder {
        fn client_bytes(&mut self, bytes: &mut [u8], _: bool) -> Reaction {
            self.up.extend_from_slice(bytes);
            Reaction::Forward
        }
        fn server_bytes(&mut self, bytes: &mut [u8], _: bool) -> Reaction {
            self.down.extend_from_slice(bytes);
            Reaction::Forward
        }
    }

    /// Takes the compute's first chunk that ends a response (`;`).
    #[derive(Default)]
    struct Taker {
        taken: Option<Vec<u8>>,
    }

    impl Observer for Taker {
        fn client_bytes(&mut self, _: &mut [u8], _: bool) -> Reaction {
            Reaction::Forward
        }
        fn server_bytes(&mut self, bytes: &mut [u8], may_take: bool) -> Reaction {
            if may_take && bytes.ends_with(b";") {
                self.taken = Some(bytes.to_vec());
                return Reaction::Take;
            }
            Reaction::Forward
        }
    }

    /// A chunk the observer takes is not written: the pump returns at once, `"kernel"`,
    /// with everything before it delivered and both sockets open.
    #[tokio::test]
    async fn a_taken_chunk_ends_the_pump_unwritten_with_both_sockets_open() {
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        let mut taker = Taker::default();
        let apps = async {
            client_app.write_all(b"query").await.unwrap();
            let mut got = [0; 5];
            compute_app.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"query");
            compute_app.write_all(b"rows...").await.unwrap();
            let mut rows = [0; 7];
            client_app.read_exact(&mut rows).await.unwrap();
            assert_eq!(&rows, b"rows...");
            compute_app.write_all(b"end;").await.unwrap();
        };
        let (mut client, mut compute) = (client, compute);
        let (report, ()) = tokio::join!(
            pump(
                &mut client,
                Vec::new(),
                &mut compute,
                Vec::new(),
                None,
                Some(&mut taker)
            ),
            apps
        );
        assert_eq!(report.ended_by, PumpEnd::Kernel);
        assert_eq!(taker.taken.as_deref(), Some(b"end;".as_slice()));
        assert_eq!((report.compute_read, report.compute_to_client), (11, 7));
        // Neither socket was closed: both still carry bytes.
        compute_app.write_all(b"more").await.unwrap();
        let mut more = [0; 4];
        compute.read_exact(&mut more).await.unwrap();
        client.write_all(b"next").await.unwrap();
        client_app.read_exact(&mut more).await.unwrap();
        assert_eq!(&more, b"next");
    }

    #[tokio::test]
    async fn the_observer_sees_every_byte_of_both_directions_early_ones_first() {
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let sent = big.clone();
        let apps = tokio::spawn(async move {
            client_app.write_all(&sent).await.unwrap();
            client_app.shutdown().await.unwrap();
            let mut got = Vec::new();
            compute_app.read_to_end(&mut got).await.unwrap();
            compute_app.write_all(b"answer").await.unwrap();
            compute_app.shutdown().await.unwrap();
            let mut back = Vec::new();
            client_app.read_to_end(&mut back).await.unwrap();
            (got, back)
        });
        let mut recorder = Recorder::default();
        let report = pump(
            client,
            b"up:".to_vec(),
            compute,
            b"down:".to_vec(),
            None,
            Some(&mut recorder),
        )
        .await;
        let (got, back) = apps.await.unwrap();
        assert_eq!(report.ended_by, PumpEnd::Eof);
        assert_eq!(recorder.up, [b"up:".as_slice(), &big].concat());
        assert_eq!(recorder.up, got);
        assert_eq!(recorder.down, b"down:answer");
        assert_eq!(recorder.down, back);
    }

    /// Rewrites `1` to `2` in both directions; ends the session at `end`.
    struct Rewriter;

    impl Observer for Rewriter {
        fn client_bytes(&mut self, bytes: &mut [u8], _: bool) -> Reaction {
            self.server_bytes(bytes, false)
        }
        fn server_bytes(&mut self, bytes: &mut [u8], _: bool) -> Reaction {
            if bytes.ends_with(b"end") {
                return Reaction::End;
            }
            bytes
                .iter_mut()
                .filter(|b| **b == b'1')
                .for_each(|b| *b = b'2');
            Reaction::Forward
        }
    }

    #[tokio::test]
    async fn what_the_observer_changes_is_what_goes_on_and_it_may_end_the_session() {
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        let apps = tokio::spawn(async move {
            client_app.write_all(b"a1b1").await.unwrap();
            let mut got = [0u8; 5];
            compute_app.read_exact(&mut got).await.unwrap();
            compute_app.write_all(b"11").await.unwrap();
            let mut back = [0u8; 2];
            client_app.read_exact(&mut back).await.unwrap();
            client_app.write_all(b"end").await.unwrap();
            // Both sides are closed; the last chunk never reaches the compute.
            let mut rest = Vec::new();
            compute_app.read_to_end(&mut rest).await.unwrap();
            let mut closed = Vec::new();
            client_app.read_to_end(&mut closed).await.unwrap();
            (got, back, rest, closed)
        });
        let report = pump(
            client,
            b"1".to_vec(),
            compute,
            Vec::new(),
            None,
            Some(&mut Rewriter),
        )
        .await;
        assert_eq!(report.ended_by, PumpEnd::Observer);
        let (got, back, rest, closed) =
            tokio::time::timeout(std::time::Duration::from_secs(10), apps)
                .await
                .unwrap()
                .unwrap();
        assert_eq!(&got, b"2a2b2", "the early byte too");
        assert_eq!(&back, b"22");
        assert!(rest.is_empty() && closed.is_empty());
    }

    /// Holds back whatever follows the last `.` of a chunk, and records what it saw.
    #[derive(Default)]
    struct Holder {
        seen: Vec<Vec<u8>>,
    }

    impl Observer for Holder {
        fn client_bytes(&mut self, bytes: &mut [u8], _: bool) -> Reaction {
            self.seen.push(bytes.to_vec());
            let whole = bytes.iter().rposition(|b| *b == b'.').map_or(0, |i| i + 1);
            Reaction::Hold(bytes.len() - whole)
        }
        fn server_bytes(&mut self, _: &mut [u8], _: bool) -> Reaction {
            Reaction::Forward
        }
    }

    #[tokio::test]
    async fn held_bytes_wait_and_come_again_first_with_the_next_read() {
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        let apps = tokio::spawn(async move {
            let mut got = [0u8; 3];
            compute_app.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ab.", "the early bytes' whole part");
            client_app.write_all(b"cd").await.unwrap();
            // Held: nothing arrives until the `.`.
            let mut early = [0u8; 1];
            let waited = tokio::time::timeout(
                std::time::Duration::from_millis(50),
                compute_app.read(&mut early),
            )
            .await;
            assert!(waited.is_err(), "held bytes were written");
            client_app.write_all(b"e.").await.unwrap();
            let mut got = [0u8; 5];
            compute_app.read_exact(&mut got).await.unwrap();
            client_app.shutdown().await.unwrap();
            compute_app.shutdown().await.unwrap();
            got
        });
        let mut holder = Holder::default();
        let report = pump(
            client,
            b"ab.x".to_vec(),
            compute,
            Vec::new(),
            None,
            Some(&mut holder),
        )
        .await;
        let got = apps.await.unwrap();
        assert_eq!(&got, b"xcde.");
        assert_eq!(report.ended_by, PumpEnd::Eof);
        assert_eq!(
            holder.seen[..3],
            [b"ab.x".to_vec(), b"xcd".to_vec(), b"xcde.".to_vec()]
        );
    }

    /// Answers `ping` itself; everything else goes through.
    struct Answerer;

    impl Observer for Answerer {
        fn client_bytes(&mut self, bytes: &mut [u8], may_answer: bool) -> Reaction {
            if may_answer && bytes == b"ping" {
                Reaction::Answer(b"pong".to_vec())
            } else {
                Reaction::Forward
            }
        }
        fn server_bytes(&mut self, _: &mut [u8], _: bool) -> Reaction {
            Reaction::Forward
        }
    }

    #[tokio::test]
    async fn a_reply_made_by_the_observer_reaches_the_client_and_the_compute_sees_nothing() {
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        let apps = tokio::spawn(async move {
            let mut reply = [0u8; 4];
            for _ in 0..3 {
                client_app.write_all(b"ping").await.unwrap();
                client_app.read_exact(&mut reply).await.unwrap();
                assert_eq!(&reply, b"pong");
            }
            client_app.write_all(b"query").await.unwrap();
            let mut got = [0u8; 5];
            compute_app.read_exact(&mut got).await.unwrap();
            compute_app.write_all(b"rows").await.unwrap();
            client_app.read_exact(&mut reply).await.unwrap();
            client_app.shutdown().await.unwrap();
            compute_app.shutdown().await.unwrap();
            let mut rest = Vec::new();
            compute_app.read_to_end(&mut rest).await.unwrap();
            (got, reply, rest)
        });
        let mut answerer = Answerer;
        let uploads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&uploads);
        let report = pump(
            client,
            Vec::new(),
            compute,
            Vec::new(),
            Some(std::sync::Arc::new(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })),
            Some(&mut answerer),
        )
        .await;
        let (got, reply, rest) = apps.await.unwrap();
        assert_eq!(&got, b"query", "the pings never reached the compute");
        assert_eq!(&reply, b"rows");
        assert!(rest.is_empty());
        assert_eq!(report.client_to_compute, 5);
        assert_eq!(
            uploads.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "an answered read is not an upload (it thaws nothing)"
        );
    }

    /// Owes the client nothing, whatever it sent.
    struct Quiet;

    impl Observer for Quiet {
        fn client_bytes(&mut self, _: &mut [u8], _: bool) -> Reaction {
            Reaction::Forward
        }
        fn server_bytes(&mut self, _: &mut [u8], _: bool) -> Reaction {
            Reaction::Forward
        }
        fn owes_nothing(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn a_client_that_hangs_up_owed_nothing_ends_the_pump_without_the_compute() {
        let (mut client_app, client) = pair().await;
        let (compute, mut compute_app) = pair().await;
        client_app.write_all(b"bye").await.unwrap();
        client_app.shutdown().await.unwrap();
        // The compute never answers nor closes (a frozen compute cannot).
        let report = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            pump(
                client,
                Vec::new(),
                compute,
                Vec::new(),
                None,
                Some(&mut Quiet),
            ),
        )
        .await
        .expect("the pump waited for the compute");
        assert_eq!(report.ended_by, PumpEnd::Eof);
        // The compute got the bytes, then its connection's end.
        let mut got = Vec::new();
        compute_app.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"bye");
    }
}
