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
    /// `"eof"` when both sides closed cleanly; otherwise which socket failed:
    /// `"client_error"` or `"compute_error"`; `"detached"` when the compute went away under a
    /// session the observer keeps for a reattach ([`Observer::detached`]): the client's
    /// socket is then left open, untouched.
    pub ended_by: &'static str,
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
    /// Called for every read that brought bytes (and was not answered).
    on_read: Option<OnRead>,
    /// A reply the observer made to what was read, for the other direction to write.
    answered: Option<Vec<u8>>,
    /// The compute direction of a detached session: its end-of-stream is not passed on.
    keep_open: bool,
}

/// What the pump calls when the client sends bytes (the frozen tier thaws the compute).
pub type OnRead = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Sees every chunk the pump reads, in the order read, before it is written on: parking
/// follows each connection's commands this way (docs/parking.md, *Idleness by commands*).
pub trait Observer {
    /// Bytes the client sent. With `may_answer` (nothing is on its way to the client), the
    /// observer may answer them itself: it returns the reply, which the pump writes to the
    /// client in place of forwarding the bytes (a ping on a parked connection).
    fn client_bytes(&mut self, bytes: &[u8], may_answer: bool) -> Option<Vec<u8>>;
    /// Bytes the compute sent.
    fn server_bytes(&mut self, bytes: &[u8]);
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
}

/// Which side a failure came from.
#[derive(Debug, Clone, Copy)]
enum Side {
    Client,
    Compute,
    /// Not a failure: the compute went away under a detached session.
    Detached,
}

impl Half {
    /// Starts with bytes already read from the reader side.
    fn with(early: Vec<u8>) -> Self {
        let end = early.len();
        Self {
            buf: (end > 0).then_some(early),
            end,
            ..Self::default()
        }
    }

    fn done(&self) -> bool {
        self.shut
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
        observe: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>,
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
                // Drained: give the memory back while the connection is quiet.
                self.release();
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
            let mut read_buf = ReadBuf::new(buf);
            // `poll_read`, not `try_read_buf`: on a short read it clears the socket's readiness
            // itself (edge-triggered epoll re-arms on the next byte), which saves the extra
            // `read` that would only return EAGAIN: one syscall per message and direction.
            match Pin::new(&mut *from).poll_read(cx, &mut read_buf) {
                Poll::Ready(Ok(())) => {
                    let n = read_buf.filled().len();
                    if n == 0 {
                        self.eof = true;
                        self.release();
                    } else {
                        self.start = 0;
                        self.end = n;
                        if let Some(reply) = observe(read_buf.filled()) {
                            // Answered here: nothing goes on. The pump hands the reply to
                            // the other direction before this one reads again.
                            self.end = 0;
                            self.release();
                            self.answered = Some(reply);
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        if let Some(on_read) = &self.on_read {
                            on_read();
                        }
                    }
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Err(from_side)),
                // Spurious readiness (now cleared): wait again without holding memory.
                Poll::Pending => {
                    self.release();
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Copies until both directions are done or a socket fails. Bytes either side sent before
/// the pump started (read along with the last login packet) are delivered first.
/// `on_upload` is called whenever the client sends bytes; `observer` sees every chunk, those
/// early bytes included.
pub async fn pump<C: PumpIo, D: PumpIo>(
    mut client: C,
    client_rest: Vec<u8>,
    mut compute: D,
    compute_rest: Vec<u8>,
    on_upload: Option<OnRead>,
    mut observer: Option<&mut (dyn Observer + Send)>,
) -> PumpReport {
    if let Some(o) = observer.as_mut() {
        // The compute's early bytes were sent before it saw any of the client's.
        o.server_bytes(&compute_rest);
        o.client_bytes(&client_rest, false);
    }
    let mut up = Half::with(client_rest);
    up.on_read = on_upload;
    let mut down = Half::with(compute_rest);
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
                        .and_then(|o| o.client_bytes(b, may_answer))
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
        let down_state = if down.done() {
            Poll::Ready(Ok(()))
        } else {
            down.poll_copy(
                cx,
                &mut compute,
                &mut client,
                Side::Compute,
                Side::Client,
                &mut |b| {
                    if let Some(o) = observer.as_mut() {
                        o.server_bytes(b);
                    }
                    None
                },
            )
        };
        // The client hung up owed nothing: the compute's side is closed with the pump, as the
        // compute itself would close it.
        if up.done() && down.buf.is_none() && observer.as_ref().is_some_and(|o| o.owes_nothing()) {
            return Poll::Ready(Ok(()));
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
        ended_by: match result {
            Ok(()) => "eof",
            Err(Side::Client) => "client_error",
            Err(Side::Compute) => "compute_error",
            Err(Side::Detached) => "detached",
        },
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
        assert_eq!(report.ended_by, "eof");
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
        assert_eq!(report.ended_by, "compute_error");
    }

    #[derive(Default)]
    struct Recorder {
        up: Vec<u8>,
        down: Vec<u8>,
    }

    impl Observer for Recorder {
        fn client_bytes(&mut self, bytes: &[u8], _: bool) -> Option<Vec<u8>> {
            self.up.extend_from_slice(bytes);
            None
        }
        fn server_bytes(&mut self, bytes: &[u8]) {
            self.down.extend_from_slice(bytes);
        }
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
        assert_eq!(report.ended_by, "eof");
        assert_eq!(recorder.up, [b"up:".as_slice(), &big].concat());
        assert_eq!(recorder.up, got);
        assert_eq!(recorder.down, b"down:answer");
        assert_eq!(recorder.down, back);
    }

    /// Answers `ping` itself; everything else goes through.
    struct Answerer;

    impl Observer for Answerer {
        fn client_bytes(&mut self, bytes: &[u8], may_answer: bool) -> Option<Vec<u8>> {
            (may_answer && bytes == b"ping").then(|| b"pong".to_vec())
        }
        fn server_bytes(&mut self, _: &[u8]) {}
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
        fn client_bytes(&mut self, _: &[u8], _: bool) -> Option<Vec<u8>> {
            None
        }
        fn server_bytes(&mut self, _: &[u8]) {}
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
        assert_eq!(report.ended_by, "eof");
        // The compute got the bytes, then its connection's end.
        let mut got = Vec::new();
        compute_app.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"bye");
    }
}
