//! Held connections spliced in the kernel (docs/kernel-splice.md): the relayed login's two
//! sockets go into an eBPF sockhash whose stream verdict (`relay/bpf/splice.bpf.c`, compiled
//! by `build.rs`) hands each side's bytes to the other inside the kernel. Neither direction
//! wakes the relay; it waits only for either side to close.
//!
//! Loaded once at start ([`KernelSplice::load`]); without the capability (CAP_BPF and
//! CAP_NET_ADMIN, or root), on a kernel without sockmap, or in a relay built without clang,
//! loading fails with the reason, the relay says so once, and held connections stay on the
//! userspace pump.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::passthrough::PumpReport;

/// Why the kernel splice is not available.
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the relay tells the verdict about one socket (`struct control` in the program):
/// the other socket's cookie, the bytes of this socket the relay has read and forwarded
/// itself, and whether to redirect (1) or pass to the relay (0). Plain `u64`s: arrays of
/// integers are what aya reads and writes without `unsafe`.
type Control = [u64; 3];

/// What the verdict counted for one socket (`struct stats` in the program).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes passed to the relay.
    pub passed: u64,
    /// Bytes redirected to the peer.
    pub redirected: u64,
    /// `CLOCK_MONOTONIC` of the last bytes received, in nanoseconds.
    pub last_ns: u64,
}

impl Stats {
    const fn of([passed, redirected, last_ns]: [u64; 3]) -> Self {
        Self {
            passed,
            redirected,
            last_ns,
        }
    }
}

type MapData = aya::maps::MapData;

struct Maps {
    sockets: aya::maps::SockHash<MapData, u64>,
    controls: aya::maps::HashMap<MapData, u64, Control>,
    stats: aya::maps::HashMap<MapData, u64, [u64; 3]>,
}

/// The loaded program and its maps; one per relay.
pub struct KernelSplice {
    maps: Mutex<Maps>,
    /// Holds the program (and its attachment to the sockhash) for the relay's life.
    _program: Mutex<aya::Ebpf>,
}

impl std::fmt::Debug for KernelSplice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelSplice")
    }
}

/// The object `build.rs` compiled, when it could.
#[cfg(splice_bpf)]
const OBJECT: Option<&[u8]> = Some(aya::include_bytes_aligned!(concat!(
    env!("OUT_DIR"),
    "/splice.bpf.o"
)));
#[cfg(not(splice_bpf))]
const OBJECT: Option<&[u8]> = None;

impl KernelSplice {
    /// Loads the program, creates its maps and attaches the verdict.
    ///
    /// # Errors
    /// [`Unavailable`], saying why: built without clang, no permission, no sockmap.
    pub fn load() -> Result<Arc<Self>, Unavailable> {
        let object = OBJECT.ok_or_else(|| {
            Unavailable(
                "this relay was built without it (clang was not found at build time)".into(),
            )
        })?;
        let fail = |what: &str, e: &dyn std::fmt::Display| Unavailable(format!("{what}: {e}"));
        let mut ebpf = aya::Ebpf::load(object).map_err(|e| fail("cannot load the program", &e))?;
        let take = |ebpf: &mut aya::Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Unavailable(format!("the program has no map {name}")))
        };
        let sockets = aya::maps::SockHash::try_from(take(&mut ebpf, "sockets")?)
            .map_err(|e| fail("sockets", &e))?;
        let controls = aya::maps::HashMap::try_from(take(&mut ebpf, "controls")?)
            .map_err(|e| fail("controls", &e))?;
        let stats = aya::maps::HashMap::try_from(take(&mut ebpf, "stats")?)
            .map_err(|e| fail("stats", &e))?;
        let program: &mut aya::programs::SkSkb = ebpf
            .program_mut("splice_verdict")
            .ok_or_else(|| Unavailable("the program has no verdict".into()))?
            .try_into()
            .map_err(|e| fail("the verdict", &e))?;
        program
            .load()
            .map_err(|e| fail("the kernel refused the verdict", &e))?;
        program
            .attach(sockets.fd())
            .map_err(|e| fail("cannot attach the verdict to the sockhash", &e))?;
        Ok(Arc::new(Self {
            maps: Mutex::new(Maps {
                sockets,
                controls,
                stats,
            }),
            _program: Mutex::new(ebpf),
        }))
    }

    fn maps(&self) -> MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Splices `client` and `compute`: from here on, the bytes either receives go to the
    /// other in the kernel. Call it only when neither socket has unread bytes and nothing the
    /// relay read is still to be forwarded (the verdict sees only bytes that arrive later).
    ///
    /// # Errors
    /// The kernel's refusal (map full, a socket it cannot take); nothing is left in the maps.
    pub fn splice(
        self: &Arc<Self>,
        client: &TcpStream,
        compute: &TcpStream,
    ) -> std::io::Result<Spliced> {
        let client_cookie = rustix::net::sockopt::socket_cookie(client)?;
        let compute_cookie = rustix::net::sockopt::socket_cookie(compute)?;
        let spliced = Spliced {
            splice: Arc::clone(self),
            client: client_cookie,
            compute: compute_cookie,
            written_before: [written_total(client), written_total(compute)],
        };
        let mut maps = self.maps();
        for (own, peer) in [
            (client_cookie, compute_cookie),
            (compute_cookie, client_cookie),
        ] {
            let control: Control = [peer, 0, 1];
            maps.controls
                .insert(own, control, 0)
                .map_err(std::io::Error::other)?;
            maps.stats
                .insert(own, [0; 3], 0)
                .map_err(std::io::Error::other)?;
        }
        use std::os::fd::AsRawFd as _;
        maps.sockets
            .insert(client_cookie, client.as_raw_fd(), 0)
            .map_err(std::io::Error::other)?;
        maps.sockets
            .insert(compute_cookie, compute.as_raw_fd(), 0)
            .map_err(std::io::Error::other)?;
        drop(maps);
        Ok(spliced)
    }
}

/// One spliced connection. Dropping it takes both sockets out of the splice (and their
/// entries out of the maps); the sockets themselves are the caller's.
#[derive(Debug)]
pub struct Spliced {
    splice: Arc<KernelSplice>,
    client: u64,
    compute: u64,
    /// Every byte written to the client's socket and to the compute's before the splice
    /// ([`written_total`]), when the kernel said.
    written_before: [Option<u64>; 2],
}

impl Spliced {
    /// What the verdict counted on the client's socket and on the compute's.
    #[must_use]
    pub fn stats(&self) -> (Stats, Stats) {
        let maps = self.splice.maps();
        let of = |cookie| Stats::of(maps.stats.get(&cookie, 0).unwrap_or_default());
        (of(self.client), of(self.compute))
    }
}

impl Drop for Spliced {
    fn drop(&mut self) {
        let mut maps = self.splice.maps();
        for cookie in [self.client, self.compute] {
            // Absent already when the socket closed first (the kernel unhashes it).
            let _ = maps.sockets.remove(&cookie);
            let _ = maps.controls.remove(&cookie);
            let _ = maps.stats.remove(&cookie);
        }
    }
}

/// Every payload byte ever written to `socket` (by the relay or by the splice), from the
/// kernel's `sock_diag`: acknowledged by the peer plus still queued. `None` when the kernel
/// does not say.
fn written_total(socket: &TcpStream) -> Option<u64> {
    let (local, peer) = (socket.local_addr().ok()?, socket.peer_addr().ok()?);
    let found = crate::control::sock_diag::established_socket(local, peer).ok()??;
    Some(found.bytes_acked? + u64::from(found.unacked))
}

/// Longest wait, once one side has closed, for the bytes the kernel redirected from it to
/// reach the other side's socket before that one is closed behind them.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Which of a spliced session's sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Client,
    Compute,
}

/// Carries a spliced session until both sides have closed: the kernel moves the bytes, and
/// the relay wakes only when a side closes (it then closes the other's sending side, as the
/// pump does, once what was redirected to it has been sent) or when bytes were passed to it
/// instead (a socket the verdict could not redirect for: they are forwarded here, and the
/// verdict keeps passing that direction's later bytes, so they stay in order).
/// `ok_len` is what the relay wrote to the client after the splice (the login's OK).
pub async fn carry(
    client: &mut TcpStream,
    compute: &mut TcpStream,
    spliced: &Spliced,
    ok_len: u64,
) -> PumpReport {
    let mut up = Direction::default();
    let mut down = Direction::default();
    let ended_by = loop {
        if up.ended && down.ended {
            break "eof";
        }
        let from = tokio::select! {
            r = client.readable(), if !up.ended => r.map(|()| End::Client).map_err(|_| End::Client),
            r = compute.readable(), if !down.ended => r.map(|()| End::Compute).map_err(|_| End::Compute),
        };
        let from = match from {
            Ok(from) => from,
            Err(End::Client) => break "client_error",
            Err(End::Compute) => break "compute_error",
        };
        // The direction `from` starts, its socket, the other one, and what was written to
        // that one (besides what the kernel redirected) before and since the splice.
        let (direction, reader, writer, written_before, ok_len) = match from {
            End::Client => (
                &mut up,
                &mut *client,
                &mut *compute,
                spliced.written_before[1],
                0,
            ),
            End::Compute => (
                &mut down,
                &mut *compute,
                &mut *client,
                spliced.written_before[0],
                ok_len,
            ),
        };
        match pass_on(reader, writer, from).await {
            Ok(Some(n)) => direction.forwarded += n,
            Ok(None) => {
                // Closed: the other side's sending side follows, after the bytes the kernel
                // redirected to it.
                let (client_stats, compute_stats) = spliced.stats();
                let redirected = match from {
                    End::Client => client_stats.redirected,
                    End::Compute => compute_stats.redirected,
                };
                if let Some(before) = written_before {
                    drain(writer, before + redirected + direction.forwarded + ok_len).await;
                }
                let _ = writer.shutdown().await;
                direction.ended = true;
            }
            Err(failed) => {
                break match failed {
                    End::Client => "client_error",
                    End::Compute => "compute_error",
                };
            }
        }
    };
    let (client_stats, compute_stats) = spliced.stats();
    PumpReport {
        client_to_compute: client_stats.redirected + up.forwarded,
        compute_to_client: compute_stats.redirected + down.forwarded,
        ended_by,
    }
}

/// One direction of a spliced session, as the relay sees it.
#[derive(Debug, Default)]
struct Direction {
    /// Bytes the relay forwarded itself (passed to it instead of redirected).
    forwarded: u64,
    /// Its sender closed, and the receiver's sending side was closed after it.
    ended: bool,
}

/// Forwards what `reader` has for the relay: `Some(bytes)` (0 when it had nothing after
/// all), `None` at its end of stream, the failed side on an error.
async fn pass_on(
    reader: &mut TcpStream,
    writer: &mut TcpStream,
    from: End,
) -> Result<Option<u64>, End> {
    let to = match from {
        End::Client => End::Compute,
        End::Compute => End::Client,
    };
    // Allocated only when a side wakes the relay, which the splice makes rare.
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut total = 0u64;
    loop {
        buf.clear();
        match reader.try_read_buf(&mut buf) {
            Ok(0) if total == 0 => return Ok(None),
            Ok(0) => return Ok(Some(total)),
            Ok(n) => {
                writer.write_all(&buf).await.map_err(|_| to)?;
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(Some(total)),
            Err(_) => return Err(from),
        }
    }
}

/// Waits (at most [`DRAIN_LIMIT`]) until `socket` has taken in `target` bytes in all.
async fn drain(socket: &TcpStream, target: u64) {
    let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
    while written_total(socket).is_some_and(|w| w < target)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A loopback connection: (the peer's end, the relay's end).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (relays, _) = listener.accept().await.unwrap();
        (peer, relays)
    }

    /// Bytes either peer sends reach the other without the relay reading its sockets, and
    /// the closes travel as the pump carries them.
    #[tokio::test]
    async fn splices_two_connections_both_ways() {
        let splice = match KernelSplice::load() {
            Ok(s) => s,
            Err(why) => {
                assert!(!why.0.contains("built without it"), "{why}");
                eprintln!("skipped: {why}");
                return;
            }
        };
        let (mut client, mut relay_client) = pair().await;
        let (mut relay_compute, mut compute) = pair().await;
        let spliced = splice.splice(&relay_client, &relay_compute).unwrap();
        let carried = tokio::spawn(async move {
            let report = carry(&mut relay_client, &mut relay_compute, &spliced, 0).await;
            (report, spliced.stats())
        });
        let big: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client
        });
        let mut got = vec![0; big.len()];
        compute.read_exact(&mut got).await.unwrap();
        assert!(got == big, "the bytes arrived changed");
        let mut client = writer.await.unwrap();
        compute.write_all(b"and back").await.unwrap();
        let mut back = [0; 8];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"and back");
        // The client closes: the compute sees its end of stream, closes too, and the
        // client sees that.
        client.shutdown().await.unwrap();
        assert_eq!(compute.read(&mut back).await.unwrap(), 0);
        drop(compute);
        assert_eq!(client.read(&mut back).await.unwrap(), 0);
        let (report, (client_stats, compute_stats)) = carried.await.unwrap();
        assert_eq!(report.ended_by, "eof");
        assert_eq!(
            (report.client_to_compute, report.compute_to_client),
            (4_000_000, 8)
        );
        assert_eq!((client_stats.passed, compute_stats.passed), (0, 0));
        assert_eq!(client_stats.redirected, 4_000_000);
        assert!(client_stats.last_ns > 0);
        // The maps are empty again once the splice is dropped.
        let maps = splice.maps();
        assert_eq!(maps.controls.keys().count(), 0);
        assert_eq!(maps.stats.keys().count(), 0);
    }
}
