//! Held connections spliced in the kernel (docs/kernel-splice.md): the relayed login's two
//! sockets go into an eBPF sockhash whose stream verdict (`relay/bpf/splice.bpf.c`, compiled
//! by `build.rs`) hands each side's bytes to the other inside the kernel. Neither direction
//! wakes the relay; it waits only for either side to close and, on an instance that parks,
//! looks every so often whether the session has gone quiet between commands, to take it back
//! into userspace ([`TakeBack`]; docs/kernel-splice.md, *Parking a spliced session*).
//!
//! Loaded once at start ([`KernelSplice::load`]); without the capability (CAP_BPF and
//! CAP_NET_ADMIN, or root), on a kernel without sockmap, or in a relay built without clang,
//! loading fails with the reason, the relay says so once, and held connections stay on the
//! userspace pump.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use super::{SpliceUnavailable, load_object, take_map};
use crate::conversation::LastPacket;
use crate::passthrough::{PumpEnd, PumpReport};

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
    /// ... of the last bytes that were neither one `COM_PING` nor the reply to one.
    pub used_ns: u64,
    /// The last `TAIL` bytes received (fewer at first: see [`Stats::tail`]).
    tail: [u8; TAIL],
}

/// How many of a socket's last bytes the verdict keeps (`TAIL` in the program).
const TAIL: usize = 32;

/// `struct stats` as the map holds it: five `u64`s, then the tail's 32 bytes as four.
type RawStats = [u64; 9];

impl Stats {
    fn of(raw: RawStats) -> Self {
        let [passed, redirected, last_ns, used_ns, _pinged, tail @ ..] = raw;
        let mut bytes = [0; TAIL];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(tail) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Self {
            passed,
            redirected,
            last_ns,
            used_ns,
            tail: bytes,
        }
    }

    /// The last bytes received, up to `TAIL` of them.
    #[must_use]
    pub fn tail(&self) -> &[u8] {
        let received = usize::try_from(self.passed + self.redirected).unwrap_or(TAIL);
        self.tail
            .get(TAIL.saturating_sub(received)..)
            .unwrap_or_default()
    }
}

type MapData = aya::maps::MapData;

struct Maps {
    sockets: aya::maps::SockHash<MapData, u64>,
    controls: aya::maps::HashMap<MapData, u64, Control>,
    stats: aya::maps::HashMap<MapData, u64, RawStats>,
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
    /// [`SpliceUnavailable`], saying why: built without clang, no permission, no sockmap.
    pub fn load() -> Result<Arc<Self>, SpliceUnavailable> {
        let mut ebpf = load_object(OBJECT)?;
        let sockets = aya::maps::SockHash::try_from(take_map(&mut ebpf, "sockets")?)
            .map_err(|e| SpliceUnavailable::Map("sockets", e))?;
        let controls = aya::maps::HashMap::try_from(take_map(&mut ebpf, "controls")?)
            .map_err(|e| SpliceUnavailable::Map("controls", e))?;
        let stats = aya::maps::HashMap::try_from(take_map(&mut ebpf, "stats")?)
            .map_err(|e| SpliceUnavailable::Map("stats", e))?;
        let program: &mut aya::programs::SkSkb = ebpf
            .program_mut("splice_verdict")
            .ok_or(SpliceUnavailable::Missing("verdict"))?
            .try_into()
            .map_err(|e| SpliceUnavailable::Program("the verdict", e))?;
        program
            .load()
            .map_err(|e| SpliceUnavailable::Program("the kernel refused the verdict", e))?;
        program.attach(sockets.fd()).map_err(|e| {
            SpliceUnavailable::Program("cannot attach the verdict to the sockhash", e)
        })?;
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
    /// other in the kernel. Call it only where neither peer sends: the compute has ended its
    /// response and the client waits for its last bytes, which the relay holds (the login's
    /// OK, or the end of a response taken for this: `CommandWatch::splice_after`). Bytes
    /// in a socket before it joins the splice are not seen by the verdict until more arrive,
    /// so the relay must have none there: it refuses when either socket has unread bytes (a
    /// client that sent its next command early).
    ///
    /// # Errors
    /// Unread bytes, or the kernel's refusal (map full, a socket it cannot take); nothing is
    /// left in the maps.
    pub fn splice(
        self: &Arc<Self>,
        client: &TcpStream,
        compute: &TcpStream,
    ) -> std::io::Result<Spliced> {
        if rustix::io::ioctl_fionread(client)? + rustix::io::ioctl_fionread(compute)? > 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "bytes wait unread in a socket",
            ));
        }
        let client_cookie = rustix::net::sockopt::socket_cookie(client)?;
        let compute_cookie = rustix::net::sockopt::socket_cookie(compute)?;
        let spliced = Spliced {
            splice: Arc::clone(self),
            client: client_cookie,
            compute: compute_cookie,
            written_before: [written_total(client), written_total(compute)],
            since_ns: monotonic_ns(),
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
                .insert(own, [0; 9], 0)
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
    /// `CLOCK_MONOTONIC` at the splice: the session's last use, until either side sends.
    since_ns: u64,
}

impl Spliced {
    /// What the verdict counted on the client's socket and on the compute's.
    #[must_use]
    pub fn stats(&self) -> (Stats, Stats) {
        let maps = self.splice.maps();
        let of = |cookie| Stats::of(maps.stats.get(&cookie, 0).unwrap_or_default());
        (of(self.client), of(self.compute))
    }

    /// Tells the verdict what the relay has taken itself from each socket (`relayed.read`)
    /// and whether to redirect (`on`) or pass every later byte to the relay. With `on`, the
    /// verdict redirects a socket's bytes once the relay has taken all it passed before them.
    ///
    /// # Errors
    /// The kernel's refusal to update the map (it does not fail on a map the relay created
    /// with room for every socket it holds).
    pub fn set(&self, relayed: &Relayed, on: bool) -> std::io::Result<()> {
        let mut maps = self.splice.maps();
        for (own, peer, taken) in [
            (self.client, self.compute, relayed.read[0]),
            (self.compute, self.client, relayed.read[1]),
        ] {
            maps.controls
                .insert(own, [peer, taken, u64::from(on)], 0)
                .map_err(std::io::Error::other)?;
        }
        Ok(())
    }

    /// Takes the session back from the kernel when it is quiet between commands (see
    /// [`TakeBack`]), used at least `quiet` ago; `asked` by a pause, the compute's CPU is not
    /// judged (the kernel route's pause does not either). `None`: still spliced.
    async fn take_back(
        &self,
        client: &TcpStream,
        compute: &TcpStream,
        relayed: &Relayed,
        when: &TakeBack<'_>,
        (quiet, asked): (Duration, bool),
    ) -> Option<Carried> {
        let (from_client, from_compute) = self.stats();
        let used_ns = from_client
            .used_ns
            .max(from_compute.used_ns)
            .max(self.since_ns);
        let quiet_for = Duration::from_nanos(monotonic_ns().saturating_sub(used_ns));
        let between_commands = from_client.last_ns <= from_compute.last_ns
            && from_client.passed == relayed.read[0]
            && from_compute.passed == relayed.read[1]
            && quiet_for >= quiet;
        if !between_commands {
            return None;
        }
        // Everything the kernel redirected has entered the socket it was for (the psock's
        // backlog is empty, so nothing the kernel still holds can follow what the relay
        // writes from now on); the sockets' own queues keep their order whatever is sent.
        let delivered = |socket: &TcpStream, end: End, redirected: u64| {
            self.written_before(end).is_some_and(|before| {
                written_with_nothing_unread(socket)
                    == Some(before + relayed.written_to(end) + redirected)
            })
        };
        if !delivered(client, End::Client, from_compute.redirected)
            || !delivered(compute, End::Compute, from_client.redirected)
            || !(asked || (when.compute_idle)())
        {
            return None;
        }
        // The compute's last packet: its status flags, unless it says more results follow
        // (a multi-statement query computing its next result).
        let status_flags = if from_compute.passed + from_compute.redirected == 0 {
            Some(when.status_flags)
        } else {
            match crate::conversation::last_packet(from_compute.tail()) {
                LastPacket::Ended(flags) => Some(flags),
                LastPacket::Unknown => None,
                LastPacket::MoreResults => return None,
            }
        };
        self.set(relayed, false).ok()?;
        // A verdict that read the switch just before it turned ran on (microseconds, with
        // preemption off); after the grace every later one passes. Redirected bytes since
        // the look above mean the session was used meanwhile: it stays spliced.
        tokio::time::sleep(VERDICT_GRACE).await;
        let (client_now, compute_now) = self.stats();
        if client_now.redirected != from_client.redirected
            || compute_now.redirected != from_compute.redirected
        {
            let _ = self.set(relayed, true);
            return None;
        }
        Some(Carried::TakenBack {
            quiet_for,
            status_flags,
        })
    }

    /// The session's bytes each way since the splice, the kernel's and the relay's own
    /// (`relayed`), for a session that `ended_by` so.
    #[must_use]
    pub fn report(&self, relayed: &Relayed, ended_by: PumpEnd) -> PumpReport {
        let (from_client, from_compute) = self.stats();
        PumpReport {
            client_to_compute: from_client.redirected + relayed.written[1],
            compute_to_client: from_compute.redirected + relayed.written[0],
            client_read: relayed.read[0],
            compute_read: relayed.read[1],
            ended_by,
        }
    }

    /// [`Self::written_before`] for one end.
    const fn written_before(&self, end: End) -> Option<u64> {
        match end {
            End::Client => self.written_before[0],
            End::Compute => self.written_before[1],
        }
    }
}

/// What the relay itself read from and wrote to a spliced session's sockets since the
/// splice, `[client, compute]`: the login's OK, bytes the verdict passed to it, and the pump
/// of a session taken back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relayed {
    pub read: [u64; 2],
    pub written: [u64; 2],
}

impl Relayed {
    /// What the relay wrote to `end` itself.
    const fn written_to(&self, end: End) -> u64 {
        match end {
            End::Client => self.written[0],
            End::Compute => self.written[1],
        }
    }

    /// The relay forwarded `n` bytes it read from `from`.
    const fn forwarded(&mut self, from: End, n: u64) {
        match from {
            End::Client => {
                self.read[0] += n;
                self.written[1] += n;
            }
            End::Compute => {
                self.read[1] += n;
                self.written[0] += n;
            }
        }
    }

    /// Adds what a pump between the two sockets read and wrote.
    pub fn add(&mut self, pumped: &PumpReport) {
        self.read[0] += pumped.client_read;
        self.read[1] += pumped.compute_read;
        self.written[0] += pumped.compute_to_client;
        self.written[1] += pumped.client_to_compute;
    }
}

/// When [`carry`] takes a spliced session back into userspace, for parking: every `quiet`
/// (when set: the instance parks) it looks whether the compute spoke last, its last use at
/// least `quiet` ago, everything redirected has entered its socket, the compute's last packet
/// ends a response, and `compute_idle` says the compute is not computing, as the kernel route
/// judges its sessions (docs/parking.md). A pause that will freeze the compute asks for a
/// look at once, without the quiet time, through `look_now` (`notify_waiters`).
/// `status_flags`: the session's status when it was spliced, until the compute sends
/// anything.
pub struct TakeBack<'a> {
    pub quiet: Option<Duration>,
    pub compute_idle: &'a (dyn Fn() -> bool + Send + Sync),
    pub look_now: &'a tokio::sync::Notify,
    pub status_flags: u16,
}

/// How [`carry`] returned.
#[derive(Debug)]
pub enum Carried {
    /// Both sides closed, or one failed.
    Ended(PumpReport),
    /// The session was taken back between commands ([`TakeBack`]): every later byte of
    /// either side is passed to the relay, in order. It was last used `quiet_for` ago (pings
    /// are not use); its status flags, when the compute's last packet said them.
    TakenBack {
        quiet_for: Duration,
        status_flags: Option<u16>,
    },
}

/// How long [`carry`] keeps looking after a pause asked, and how often.
const ASKED_FOR: Duration = Duration::from_millis(200);
const ASKED_RETRY: Duration = Duration::from_millis(5);

/// How long after turning the splice off [`Spliced::take_back`] looks again.
const VERDICT_GRACE: Duration = Duration::from_millis(5);

/// `CLOCK_MONOTONIC` in nanoseconds, the BPF programs' clock (`bpf_ktime_get_ns`).
pub(crate) fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
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
    let found = established(socket)?;
    Some(found.bytes_acked? + u64::from(found.unacked))
}

/// [`written_total`], when `socket` has nothing unread; otherwise (or when the kernel does
/// not say) `None`.
fn written_with_nothing_unread(socket: &TcpStream) -> Option<u64> {
    let found = established(socket)?;
    (found.unread == 0).then_some(found.bytes_acked? + u64::from(found.unacked))
}

fn established(socket: &TcpStream) -> Option<crate::sys::sock_diag::Established> {
    let (local, peer) = (socket.local_addr().ok()?, socket.peer_addr().ok()?);
    crate::sys::sock_diag::established_socket(local, peer).ok()?
}

/// Longest wait, once one side has closed, for the bytes the kernel redirected from it to
/// reach the other side's socket before that one is closed behind them.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What woke [`carry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Readable(End),
    /// Time to look whether the session can be taken back.
    Tick,
    /// A pause asked for that look.
    Asked,
}

/// Which of a spliced session's sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Client,
    Compute,
}

/// Carries a spliced session until both sides have closed, or (with `take_back`) until it
/// is taken back into userspace between commands: the kernel moves the bytes, and the relay
/// wakes only when a side closes (it then closes the other's sending side, as the pump does,
/// once what was redirected to it has been sent), when bytes were passed to it instead (after
/// a splice turned on again, the bytes that arrived before it: they are forwarded here and
/// the verdict redirects again once the relay has caught up, so they stay in order), or to
/// look whether the session is quiet. `relayed` is what the relay read and wrote itself since
/// the splice, kept up to date here.
pub async fn carry(
    client: &mut TcpStream,
    compute: &mut TcpStream,
    spliced: &Spliced,
    relayed: &mut Relayed,
    take_back: Option<&TakeBack<'_>>,
) -> Carried {
    let mut ended = [false; 2];
    let look_every = take_back.and_then(|t| t.quiet);
    // After a pause asked: looks again every few milliseconds until then (a redirected
    // response may still be on its way into the client's socket).
    let mut asked_until = None;
    let ended_by = loop {
        if ended == [true; 2] {
            break PumpEnd::Eof;
        }
        let may_look = take_back.is_some() && ended == [false; 2];
        let asked = async {
            match take_back {
                Some(when) => when.look_now.notified().await,
                None => std::future::pending().await,
            }
        };
        let asking = asked_until.is_some_and(|until| tokio::time::Instant::now() < until);
        let next_look = if asking {
            Some(ASKED_RETRY)
        } else {
            look_every
        };
        let woke = tokio::select! {
            r = client.readable(), if !ended[0] => r.map(|()| Wake::Readable(End::Client)).map_err(|_| End::Client),
            r = compute.readable(), if !ended[1] => r.map(|()| Wake::Readable(End::Compute)).map_err(|_| End::Compute),
            () = tokio::time::sleep(next_look.unwrap_or(Duration::MAX)), if may_look && next_look.is_some() => Ok(if asking { Wake::Asked } else { Wake::Tick }),
            () = asked, if may_look => {
                asked_until = Some(tokio::time::Instant::now() + ASKED_FOR);
                Ok(Wake::Asked)
            }
        };
        let from = match woke {
            Ok(Wake::Readable(from)) => from,
            Ok(look) => {
                // Quiet for a tick at least; for a pause, quiet now.
                let quiet = match look_every {
                    Some(every) if look == Wake::Tick => (every, false),
                    _ => (Duration::ZERO, true),
                };
                if let Some(when) = take_back {
                    if let Some(taken) = spliced
                        .take_back(client, compute, relayed, when, quiet)
                        .await
                    {
                        return taken;
                    }
                }
                continue;
            }
            Err(End::Client) => break PumpEnd::ClientError,
            Err(End::Compute) => break PumpEnd::ComputeError,
        };
        // The side `from`, and the other one.
        let (reader, writer, to) = match from {
            End::Client => (&mut *client, &mut *compute, End::Compute),
            End::Compute => (&mut *compute, &mut *client, End::Client),
        };
        match pass_on(reader, writer, from).await {
            Ok(Some(0)) => {}
            Ok(Some(n)) => {
                relayed.forwarded(from, n);
                // Caught up: the verdict may redirect this side's next bytes.
                let _ = spliced.set(relayed, true);
            }
            Ok(None) => {
                // Closed: the other side's sending side follows, after the bytes the kernel
                // redirected to it.
                let (client_stats, compute_stats) = spliced.stats();
                let redirected = match from {
                    End::Client => client_stats.redirected,
                    End::Compute => compute_stats.redirected,
                };
                if let Some(before) = spliced.written_before(to) {
                    drain(writer, before + redirected + relayed.written_to(to)).await;
                }
                let _ = writer.shutdown().await;
                match from {
                    End::Client => ended[0] = true,
                    End::Compute => ended[1] = true,
                }
            }
            Err(failed) => {
                break match failed {
                    End::Client => PumpEnd::ClientError,
                    End::Compute => PumpEnd::ComputeError,
                };
            }
        }
    };
    Carried::Ended(spliced.report(relayed, ended_by))
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

    /// The program, or `None` (with the reason printed) where this kernel or this process
    /// cannot load it; a relay built without clang fails the test.
    fn loaded() -> Option<Arc<KernelSplice>> {
        match KernelSplice::load() {
            Ok(s) => Some(s),
            Err(why) => {
                assert!(!matches!(why, SpliceUnavailable::NotBuilt), "{why}");
                eprintln!("skipped: {why}");
                None
            }
        }
    }

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
        let Some(splice) = loaded() else {
            return;
        };
        let (mut client, mut relay_client) = pair().await;
        let (mut relay_compute, mut compute) = pair().await;
        let spliced = splice.splice(&relay_client, &relay_compute).unwrap();
        let carried = tokio::spawn(async move {
            let mut relayed = Relayed::default();
            let Carried::Ended(report) = carry(
                &mut relay_client,
                &mut relay_compute,
                &spliced,
                &mut relayed,
                None,
            )
            .await
            else {
                panic!("taken back without a TakeBack");
            };
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
        assert_eq!(report.ended_by, PumpEnd::Eof);
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

    /// Once the compute has answered and both sides are quiet, the session is taken back:
    /// later bytes reach the relay, not the peer. Spliced again while a command waits unread
    /// in the relay's socket, the relay forwards it and what follows it, in order, and the
    /// verdict redirects again only after that.
    #[tokio::test]
    async fn takes_a_quiet_session_back_and_splices_it_again_in_order() {
        let Some(splice) = loaded() else {
            return;
        };
        let (mut client, mut relay_client) = pair().await;
        let (mut relay_compute, mut compute) = pair().await;
        let spliced = splice.splice(&relay_client, &relay_compute).unwrap();
        let mut relayed = Relayed::default();
        let idle = || true;
        let look_now = tokio::sync::Notify::new();
        let take_back = TakeBack {
            quiet: Some(Duration::from_millis(50)),
            compute_idle: &idle,
            look_now: &look_now,
            status_flags: 2,
        };
        let mut got = [0; 8];

        // A command and its response, carried by the kernel, while the relay waits.
        let carrying = async {
            carry(
                &mut relay_client,
                &mut relay_compute,
                &spliced,
                &mut relayed,
                Some(&take_back),
            )
            .await
        };
        let exchange = async {
            client.write_all(b"command1").await.unwrap();
            compute.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"command1");
            compute.write_all(b"answer-1").await.unwrap();
            client.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"answer-1");
        };
        let (carried, ()) = tokio::join!(carrying, exchange);
        let Carried::TakenBack {
            quiet_for,
            status_flags,
        } = carried
        else {
            panic!("not taken back: {carried:?}");
        };
        // "answer-1" is no OK or EOF.
        assert_eq!(status_flags, None);
        assert!(quiet_for >= Duration::from_millis(50), "{quiet_for:?}");
        let (from_client, from_compute) = spliced.stats();
        assert_eq!((from_client.redirected, from_compute.redirected), (8, 8));
        assert!(from_client.last_ns <= from_compute.last_ns);

        // Taken back: the client's next command waits for the relay.
        client.write_all(b"command2").await.unwrap();
        relay_client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"command2");
        relay_compute.write_all(&got).await.unwrap();
        relayed.forwarded(End::Client, 8);
        compute.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"command2");
        // Its answer also reaches the relay, and is left unread while the splice turns on.
        compute.write_all(b"answer-2").await.unwrap();
        while spliced.stats().1.passed < 8 {
            relay_compute.readable().await.unwrap();
        }
        spliced.set(&relayed, true).unwrap();
        compute.write_all(b"answer-3").await.unwrap();
        // The relay forwards what was passed to it; what follows keeps its place.
        let carrying = async {
            carry(
                &mut relay_client,
                &mut relay_compute,
                &spliced,
                &mut relayed,
                None,
            )
            .await
        };
        let reading = async {
            let mut both = [0; 16];
            client.read_exact(&mut both).await.unwrap();
            assert_eq!(&both, b"answer-2answer-3");
            // Caught up: the kernel carries the next bytes.
            compute.write_all(b"answer-4").await.unwrap();
            client.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"answer-4");
            client.shutdown().await.unwrap();
            assert_eq!(compute.read(&mut got).await.unwrap(), 0);
            drop(compute);
        };
        let (carried, ()) = tokio::join!(carrying, reading);
        let Carried::Ended(report) = carried else {
            panic!("taken back without a TakeBack");
        };
        assert_eq!(report.ended_by, PumpEnd::Eof);
        let (from_client, from_compute) = spliced.stats();
        assert!(from_compute.redirected >= 16, "{from_compute:?}");
        assert_eq!(
            from_compute.passed + from_compute.redirected,
            32,
            "{from_compute:?}"
        );
        assert_eq!(
            (report.client_to_compute, report.compute_to_client),
            (16, 32)
        );
        assert_eq!(from_client.passed, 8);
    }
}
