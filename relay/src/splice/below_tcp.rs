//! Held connections spliced below TCP (docs/kernel-splice.md, *Below TCP*).
//!
//! A held connection is two TCP connections through the relay. The kernel splice
//! ([`crate::kernel_splice`]) hands bytes from one socket to the other, but each byte still
//! goes up one connection's TCP stack and down the other's, through a workqueue: 0.65 × a
//! client straight to the compute. Here the relay's two sockets leave the path altogether: a
//! TC program on the ingress of the interfaces the segments arrive on
//! (`relay/bpf/tcp_splice.bpf.c`) rewrites each segment the client sends the relay into the
//! one the relay would have sent the compute (addresses, ports, sequence and acknowledgement
//! numbers, timestamps, window), and the compute's segments the other way, before any socket
//! sees them; a segment for another host leaves at once through the interface toward it. The
//! relay reads the sequence numbers it needs from its sockets in TCP repair mode
//! ([`tcp_repair`]), in which they write nothing from their queues and close without a
//! packet, and takes a quiet session back by making two new sockets established at the
//! connections' current sequence numbers.
//!
//! IPv4, where both connections cross the loopback interface (the client and the compute on
//! the relay's host), or where both leave it toward other hosts with segments of the same
//! size, untranslated by the host (no NAT). Elsewhere [`crate::kernel_splice`] carries the
//! session. The program is attached to an interface at the first session that needs it.
//! Needs CAP_BPF and CAP_NET_ADMIN (repair mode); without them [`TcpSplice::load`], or the
//! first splice, says why.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::net::TcpStream;

use super::sockhash::{Carried, TakeBack, monotonic_ns};
use super::{SpliceUnavailable, load_object, take_map};
use crate::conversation::LastPacket;
use crate::passthrough::{PumpEnd, PumpReport};

/// A direction's key in the program's maps (`struct flow_key`): the segment's source and
/// destination addresses, then its ports, as they are on the wire.
type Key = [u32; 3];

/// `struct control`: what the relay tells the program about one direction.
type Control = [u64; 15];

/// `struct stats`: fifteen counters, then the two tails' 32 bytes as four words each.
type RawStats = [u64; 23];

/// How many of a direction's last payload bytes the program keeps (`TAIL`).
const TAIL: usize = 32;

/// What the program counted for one direction (`struct stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Stats {
    /// The highest sequence number sent, plus one, in the sender's numbering.
    seq_end: u32,
    /// The highest acknowledgement, in the numbering of the connection it arrived on.
    ack_max: u32,
    /// The last window field, unscaled.
    window: u16,
    /// The delta added to the timestamp value, once `ts_set`.
    ts_set: bool,
    /// The last timestamp value sent on.
    tsval_out: u32,
    /// 1: a FIN went through; 2: a reset.
    ended: u64,
    /// Payload bytes.
    bytes: u64,
    last_ns: u64,
    used_ns: u64,
    /// The last payload bytes: of the segment before the last, then of the last.
    tail: Vec<u8>,
    /// The last segment's last payload bytes (up to `TAIL`), and the sequence number after
    /// them.
    last_segment: Vec<u8>,
    tail_end: u32,
}

impl Stats {
    fn of(raw: RawStats) -> Self {
        let [
            seq_end,
            ack_max,
            window,
            _ts_delta,
            ts_set,
            tsval_out,
            ended,
            bytes,
            last_ns,
            used_ns,
            _pinged,
            tail_len,
            tail_prev_len,
            tail_end,
            tail_prev_end,
            tail_and_prev @ ..,
        ] = raw;
        let bytes_of = |words: &[u64], len: u64| {
            let all: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let len = usize::try_from(len).unwrap_or(TAIL).min(TAIL);
            // A segment shorter than TAIL fills the start of its slot.
            all.get(..len).unwrap_or_default().to_vec()
        };
        let (last, before) = tail_and_prev.split_at(4);
        let last_segment = bytes_of(last, tail_len);
        // The segment before joins only where it ends where the last began (not after a
        // retransmission, nor before a last segment longer than the tail).
        let len = last_segment.len() as u64;
        let joins = len < TAIL as u64 && tail_prev_end == tail_end.wrapping_sub(len) & 0xffff_ffff;
        let mut tail_bytes = if joins {
            bytes_of(before, tail_prev_len)
        } else {
            Vec::new()
        };
        tail_bytes.extend(&last_segment);
        // The program stores 32- and 16-bit values in 64-bit words.
        #[allow(clippy::cast_possible_truncation)]
        Self {
            seq_end: seq_end as u32,
            ack_max: ack_max as u32,
            window: window as u16,
            ts_set: ts_set != 0,
            tsval_out: tsval_out as u32,
            ended,
            bytes,
            last_ns,
            used_ns,
            tail: tail_bytes,
            last_segment,
            tail_end: tail_end as u32,
        }
    }
}

type MapData = aya::maps::MapData;

struct Maps {
    controls: aya::maps::HashMap<MapData, Key, Control>,
    stats: aya::maps::HashMap<MapData, Key, RawStats>,
}

/// The loaded program and its maps, one per relay, and the interfaces it is attached to (their
/// ingress). An attachment is a link the relay's process holds: it goes with the process.
pub struct TcpSplice {
    maps: Mutex<Maps>,
    program: Mutex<Attached>,
}

/// The program, and where it is attached (interface indexes; 0 for loopback).
struct Attached {
    ebpf: aya::Ebpf,
    on: Vec<u32>,
}

impl std::fmt::Debug for TcpSplice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TcpSplice")
    }
}

#[cfg(splice_bpf)]
const OBJECT: Option<&[u8]> = Some(aya::include_bytes_aligned!(concat!(
    env!("OUT_DIR"),
    "/tcp_splice.bpf.o"
)));
#[cfg(not(splice_bpf))]
const OBJECT: Option<&[u8]> = None;

/// The loopback interface, whose ingress every loopback segment crosses.
const LOOPBACK: &str = "lo";

/// The classifier's name in the object.
const PROGRAM: &str = "tcp_splice";

impl TcpSplice {
    /// Loads the program, attached nowhere yet ([`Self::attach`]).
    ///
    /// # Errors
    /// [`SpliceUnavailable`], saying why: built without clang, no permission, no TC programs.
    pub fn load() -> Result<Arc<Self>, SpliceUnavailable> {
        let mut ebpf = load_object(OBJECT)?;
        let controls = aya::maps::HashMap::try_from(take_map(&mut ebpf, "controls")?)
            .map_err(|e| SpliceUnavailable::Map("controls", e))?;
        let stats = aya::maps::HashMap::try_from(take_map(&mut ebpf, "stats")?)
            .map_err(|e| SpliceUnavailable::Map("stats", e))?;
        classifier(&mut ebpf)?
            .load()
            .map_err(|e| SpliceUnavailable::Program("the kernel refused the classifier", e))?;
        Ok(Arc::new(Self {
            maps: Mutex::new(Maps { controls, stats }),
            program: Mutex::new(Attached {
                ebpf,
                on: Vec::new(),
            }),
        }))
    }

    /// Attaches the program to the ingress of the interface of index `ifindex` (0: loopback),
    /// unless it is already.
    ///
    /// # Errors
    /// The interface's name cannot be found, or the kernel refused the attachment.
    pub fn attach(&self, ifindex: u32) -> std::io::Result<()> {
        let mut program = self.program.lock().unwrap_or_else(PoisonError::into_inner);
        if program.on.contains(&ifindex) {
            return Ok(());
        }
        let name = if ifindex == 0 {
            LOOPBACK.to_owned()
        } else {
            // The program reads the IP header behind an Ethernet header.
            if !crate::sys::route::is_ethernet(ifindex)? {
                return Err(std::io::Error::other(format!(
                    "interface {ifindex} is not an Ethernet link (a tunnel?): the splice below \
                     TCP reads Ethernet frames"
                )));
            }
            let probe = rustix::net::socket(
                rustix::net::AddressFamily::INET,
                rustix::net::SocketType::DGRAM,
                None,
            )?;
            rustix::net::netdevice::index_to_name(&probe, ifindex)?
        };
        classifier(&mut program.ebpf)
            .map_err(std::io::Error::other)?
            .attach(&name, aya::programs::TcAttachType::Ingress)
            .map_err(|e| {
                std::io::Error::other(format!(
                    "cannot attach the splice below TCP to {name}'s ingress: {e}"
                ))
            })?;
        program.on.push(ifindex);
        tracing::info!(interface = %name, "held connections through this interface are spliced in the kernel below TCP (TC)");
        Ok(())
    }

    fn maps(&self) -> MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a session between these sockets may be spliced here: both connections IPv4,
    /// both on loopback or both not ([`Self::splice`] looks at their routes).
    #[must_use]
    pub fn applies(client: &TcpStream, compute: &TcpStream) -> bool {
        legs(client, compute)
            .is_some_and(|(c, m)| c.peer.ip().is_loopback() == m.peer.ip().is_loopback())
    }

    /// Splices the session at rest: the compute has ended its response and the client waits
    /// for `chunk`, its last bytes, which the relay holds and writes here once the rewriting
    /// is on. The relay's sockets stay open in repair mode: the caller keeps them
    /// until [`carry`] ends, and dropping them then sends nothing.
    ///
    /// # Errors
    /// [`Unspliced`] with how much of `chunk` was written (the caller writes the rest and
    /// goes on pumping): `WouldBlock` when either socket has unread bytes or bytes in flight,
    /// or its peer's FIN (a later response, then), the kernel's refusal otherwise.
    pub fn splice(
        self: &Arc<Self>,
        client: &TcpStream,
        compute: &TcpStream,
        chunk: &[u8],
    ) -> Result<TcpSpliced, Unspliced> {
        let unspliced = |error: std::io::Error| Unspliced { error, written: 0 };
        let (client_leg, compute_leg) = legs(client, compute)
            .ok_or_else(|| unspliced(std::io::Error::other("not an IPv4 session")))?;
        let client_agreed = tcp_repair::agreed(client).map_err(unspliced)?;
        let compute_agreed = tcp_repair::agreed(compute).map_err(unspliced)?;
        if !(client_agreed.established && compute_agreed.established) {
            // A peer's FIN reached the relay's socket (a client that quit right after its
            // last answer): the program would never see it, and a take-back would make the
            // connection established again. The pump reads the end instead.
            return Err(unspliced(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "a peer is closing its connection",
            )));
        }
        let path = path(&client_leg, &compute_leg).map_err(unspliced)?;
        let busy = || std::io::Error::new(std::io::ErrorKind::WouldBlock, "bytes in flight");
        if rustix::io::ioctl_fionread(client).map_err(|e| unspliced(e.into()))?
            + rustix::io::ioctl_fionread(compute).map_err(|e| unspliced(e.into()))?
            > 0
        {
            return Err(unspliced(busy()));
        }
        if let Path::Hosts { .. } = path {
            same_segments(&client_agreed, &compute_agreed).map_err(unspliced)?;
        }
        let (to_client, to_compute) = match path {
            Path::Loopback => ((0, Ipv4Addr::UNSPECIFIED), (0, Ipv4Addr::UNSPECIFIED)),
            Path::Hosts { client, compute } => (client, compute),
        };
        for (ifindex, _) in [to_client, to_compute] {
            self.attach(ifindex).map_err(unspliced)?;
        }
        if client_agreed.unacked
            + client_agreed.notsent
            + compute_agreed.unacked
            + compute_agreed.notsent
            > 0
        {
            return Err(unspliced(busy()));
        }
        let read = |socket: &TcpStream| -> std::io::Result<(u32, u32, u32)> {
            tcp_repair::enter(socket)?;
            Ok((
                tcp_repair::sequence(socket, tcp_repair::Queue::Send)?,
                tcp_repair::sequence(socket, tcp_repair::Queue::Receive)?,
                tcp_repair::timestamp(socket)?,
            ))
        };
        let undo = |error: std::io::Error| {
            let _ = tcp_repair::leave(client);
            let _ = tcp_repair::leave(compute);
            unspliced(error)
        };
        let (client_snd, client_rcv, client_ts) = read(client).map_err(undo)?;
        let (compute_snd, compute_rcv, compute_ts) = read(compute).map_err(undo)?;
        // The program continues each clock from here in whole milliseconds counted from a
        // moment read just after: 2 ms ahead, it is never behind what a peer saw (PAWS).
        let (client_ts, compute_ts) = (client_ts.wrapping_add(2), compute_ts.wrapping_add(2));
        tcp_repair::leave(client).map_err(undo)?;
        let chunk_len = u32::try_from(chunk.len()).map_err(|e| undo(std::io::Error::other(e)))?;
        let client_snd_after = client_snd.wrapping_add(chunk_len);
        let since_ns = monotonic_ns();
        let scales = |agreed: &tcp_repair::Agreed| agreed.options.window_scale.unwrap_or((0, 0));
        let (client_peer_scale, client_own_scale) = scales(&client_agreed);
        let (compute_peer_scale, compute_own_scale) = scales(&compute_agreed);
        let from_client = Direction {
            key: client_leg.peer_sends(),
            out: compute_leg.relay_sends(),
            seq_delta: compute_snd.wrapping_sub(client_rcv),
            ack_delta: compute_rcv.wrapping_sub(client_snd_after),
            scales: (client_peer_scale, compute_own_scale),
            ts_base: compute_ts,
            out_by: to_compute,
        };
        let from_compute = Direction {
            key: compute_leg.peer_sends(),
            out: client_leg.relay_sends(),
            seq_delta: client_snd_after.wrapping_sub(compute_rcv),
            ack_delta: client_rcv.wrapping_sub(compute_snd),
            scales: (compute_peer_scale, client_own_scale),
            ts_base: client_ts,
            out_by: to_client,
        };
        let spliced = TcpSpliced {
            splice: Arc::clone(self),
            directions: [from_client, from_compute],
            legs: [
                (client_leg, client_agreed.options, client_ts),
                (compute_leg, compute_agreed.options, compute_ts),
            ],
            since_ns,
            chunk_len: u64::from(chunk_len),
            compute_rcv,
            at_splice: [(client_rcv, client_snd), (compute_rcv, compute_snd)],
            bypassed: std::sync::atomic::AtomicBool::new(false),
            segs_in: [0; 2],
            across_hosts: matches!(path, Path::Hosts { .. }),
        };
        {
            let mut maps = self.maps();
            for (direction, reverse, seq_end, ack_max) in [
                (&from_client, &from_compute, client_rcv, client_snd),
                (&from_compute, &from_client, compute_rcv, compute_snd),
            ] {
                let mut stats = [0; 23];
                stats[0] = u64::from(seq_end);
                stats[1] = u64::from(ack_max);
                maps.stats
                    .insert(direction.key, stats, 0)
                    .map_err(|e| undo(std::io::Error::other(e)))?;
                maps.controls
                    .insert(direction.key, direction.control(reverse, since_ns, true), 0)
                    .map_err(|e| undo(std::io::Error::other(e)))?;
            }
        }
        // Bytes (or a close) that reached either socket while the rewriting was being set up
        // are the relay's to forward: not spliced, then.
        let still = |socket: &TcpStream| {
            rustix::io::ioctl_fionread(socket).is_ok_and(|n| n == 0)
                && tcp_repair::agreed(socket).is_ok_and(|a| a.established)
        };
        if !still(client) || !still(compute) {
            drop(spliced);
            let _ = tcp_repair::leave(compute);
            return Err(unspliced(busy()));
        }
        // The client waits for this chunk: it sends nothing before it has it all, and what it
        // sends then is rewritten for the compute.
        let written = match client.try_write(chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                drop(spliced);
                return Err(undo(e));
            }
        };
        let sent = tcp_repair::agreed(client).is_ok_and(|a| a.notsent == 0);
        if written < chunk.len() || !sent {
            // The rest needs the client's acknowledgements, which now go to the compute:
            // not spliced. Acknowledgements rewritten meanwhile are sent again by the client.
            drop(spliced);
            let _ = tcp_repair::leave(compute);
            return Err(Unspliced {
                error: busy(),
                written,
            });
        }
        // Repair mode from here: the socket writes nothing from its queue, and closes without
        // a packet; only its timers could send (the chunk again, until the client's
        // acknowledgement is seen: `release_client`).
        if let Err(e) = tcp_repair::enter(client) {
            drop(spliced);
            let _ = tcp_repair::leave(compute);
            return Err(Unspliced { error: e, written });
        }
        let mut spliced = spliced;
        let segs_in = |s: &TcpStream| tcp_repair::agreed(s).map_or(0, |a| a.segs_in);
        spliced.segs_in = [segs_in(client), segs_in(compute)];
        Ok(spliced)
    }
}

/// The program in `ebpf`.
fn classifier(
    ebpf: &mut aya::Ebpf,
) -> Result<&mut aya::programs::SchedClassifier, SpliceUnavailable> {
    ebpf.program_mut(PROGRAM)
        .ok_or(SpliceUnavailable::Missing("classifier"))?
        .try_into()
        .map_err(|e| SpliceUnavailable::Program("the classifier", e))
}

/// A session that could not be spliced: why, and how much of the chunk was written.
#[derive(Debug)]
pub struct Unspliced {
    pub error: std::io::Error,
    pub written: usize,
}

/// The two connections of a session, from the relay's side: its own address and the peer's.
#[derive(Debug, Clone, Copy)]
struct Leg {
    own: SocketAddrV4,
    peer: SocketAddrV4,
}

impl Leg {
    /// The key of the segments the peer sends the relay.
    fn peer_sends(&self) -> Key {
        key(self.peer, self.own)
    }

    /// The addresses and ports of the segments the relay sends the peer.
    const fn relay_sends(&self) -> (SocketAddrV4, SocketAddrV4) {
        (self.own, self.peer)
    }
}

/// The wire layout of `struct flow_key` for a segment from `from` to `to`.
fn key(from: SocketAddrV4, to: SocketAddrV4) -> Key {
    let [a, b] = from.port().to_be_bytes();
    let [c, d] = to.port().to_be_bytes();
    [
        u32::from_ne_bytes(from.ip().octets()),
        u32::from_ne_bytes(to.ip().octets()),
        u32::from_ne_bytes([a, b, c, d]),
    ]
}

/// Both legs of an IPv4 session.
fn legs(client: &TcpStream, compute: &TcpStream) -> Option<(Leg, Leg)> {
    let v4 = |a: SocketAddr| match a {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(_) => None,
    };
    let leg = |s: &TcpStream| {
        Some(Leg {
            own: v4(s.local_addr().ok()?)?,
            peer: v4(s.peer_addr().ok()?)?,
        })
    };
    Some((leg(client)?, leg(compute)?))
}

/// Where a session's segments go through the relay's host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Both connections through the loopback interface: the client and the compute here.
    Loopback,
    /// Both connections through interfaces toward other hosts: each one's interface index
    /// and next hop.
    Hosts {
        client: (u32, Ipv4Addr),
        compute: (u32, Ipv4Addr),
    },
}

/// Where the session's segments go, from the kernel's routes, when the splice can follow
/// them: both legs on loopback, with the peers' own sockets here at the addresses the
/// relay's name (behind a NAT, a container's published port on 127.0.0.1, they are not, and
/// the segments would be rewritten for an address nothing listens on); or both toward other
/// hosts, neither translated by this host's conntrack.
fn path(client: &Leg, compute: &Leg) -> std::io::Result<Path> {
    use crate::sys::route::{Route, toward};
    let route = |leg: &Leg| {
        if leg.peer.ip().is_loopback() {
            Ok(Route::Local)
        } else {
            toward(*leg.own.ip(), *leg.peer.ip())
        }
    };
    match (route(client)?, route(compute)?) {
        (Route::Local, Route::Local) => {
            for leg in [client, compute] {
                let here = crate::sys::sock_diag::established_socket(
                    SocketAddr::V4(leg.peer),
                    SocketAddr::V4(leg.own),
                );
                if !matches!(here, Ok(Some(_))) {
                    return Err(std::io::Error::other(format!(
                        "no socket on this host at {} connected to {}: not the peer's own \
                         address (NAT?)",
                        leg.peer, leg.own
                    )));
                }
            }
            Ok(Path::Loopback)
        }
        (Route::Out(client_if, client_hop), Route::Out(compute_if, compute_hop)) => {
            for leg in [client, compute] {
                if crate::sys::conntrack_entry::translated(leg.own, leg.peer)? {
                    return Err(std::io::Error::other(format!(
                        "this host translates the connection between {} and {} (NAT): its \
                         segments do not carry the addresses the relay's socket has",
                        leg.own, leg.peer
                    )));
                }
            }
            Ok(Path::Hosts {
                client: (client_if, client_hop),
                compute: (compute_if, compute_hop),
            })
        }
        _ => Err(std::io::Error::other(
            "one peer on this host and one on another: their segments differ in size",
        )),
    }
}

/// Across hosts, each peer's segments must be what the other connection carries: the same
/// options (the program rewrites them, never adds or removes one), and no larger than the
/// relay itself may send on the other connection (its path's MTU and the peer's MSS). On
/// loopback both are this kernel's, and always are.
fn same_segments(client: &tcp_repair::Agreed, compute: &tcp_repair::Agreed) -> std::io::Result<()> {
    let (c, m) = (&client.options, &compute.options);
    if (c.timestamps, c.sack) != (m.timestamps, m.sack) {
        return Err(std::io::Error::other(format!(
            "the connections agreed different options (timestamps {} and {}, SACK {} and {})",
            c.timestamps, m.timestamps, c.sack, m.sack
        )));
    }
    let options = c.segment_option_bytes();
    for (from, to, name) in [
        (client, compute, "client's"),
        (compute, client, "compute's"),
    ] {
        let largest = from.advmss.saturating_sub(options);
        if largest > u32::from(to.options.mss) {
            return Err(std::io::Error::other(format!(
                "the {name} segments (up to {largest} bytes) are larger than the other \
                 connection carries ({})",
                to.options.mss
            )));
        }
    }
    Ok(())
}

/// One direction's rewriting.
#[derive(Debug, Clone, Copy)]
struct Direction {
    key: Key,
    /// The segment's new source and destination.
    out: (SocketAddrV4, SocketAddrV4),
    seq_delta: u32,
    ack_delta: u32,
    /// The sender's window scale and the one the receiver applies.
    scales: (u8, u8),
    /// The relay's timestamp clock on the outgoing connection at the splice.
    ts_base: u32,
    /// The interface the rewritten segment leaves by (0: up the stack, on loopback), and its
    /// next hop there.
    out_by: (u32, Ipv4Addr),
}

impl Direction {
    fn control(&self, reverse: &Self, setup_ns: u64, rewrite: bool) -> Control {
        let [saddr, daddr, ports] = key(self.out.0, self.out.1);
        let [sport_a, sport_b, dport_a, dport_b] = ports.to_ne_bytes();
        let [r0, r1, r2] = reverse.key;
        [
            u64::from(saddr),
            u64::from(daddr),
            u64::from(u16::from_ne_bytes([sport_a, sport_b])),
            u64::from(u16::from_ne_bytes([dport_a, dport_b])),
            u64::from(self.seq_delta),
            u64::from(self.ack_delta),
            u64::from(rewrite),
            u64::from(self.scales.0),
            u64::from(self.scales.1),
            u64::from(self.ts_base),
            setup_ns,
            u64::from(r0) | (u64::from(r1) << 32),
            u64::from(r2),
            u64::from(self.out_by.0),
            u64::from(u32::from_ne_bytes(self.out_by.1.octets())),
        ]
    }

    /// The window the receiver last saw offered, in bytes, for a window field `window` from
    /// the sender (as the program rewrites it).
    fn window_out(&self, window: u16) -> u32 {
        let bytes = (u32::from(window) << self.scales.0) >> self.scales.1;
        bytes.min(0xffff) << self.scales.1
    }
}

/// One session spliced below TCP. Dropping it takes its directions out of the program's
/// maps: from then on the segments reach the relay's sockets as they are.
#[derive(Debug)]
pub struct TcpSpliced {
    splice: Arc<TcpSplice>,
    /// `[from the client, from the compute]`.
    directions: [Direction; 2],
    /// `[client, compute]`: the connection, its options, the relay's timestamp clock then.
    legs: [(Leg, tcp_repair::Options, u32); 2],
    since_ns: u64,
    chunk_len: u64,
    /// The relay's receive sequence number on the compute's connection at the splice.
    compute_rcv: u32,
    /// Each direction's counters as the splice set them (`[from the client, from the
    /// compute]`: the highest sequence number and acknowledgement), which only a segment the
    /// program rewrote moves.
    at_splice: [(u32, u32); 2],
    /// [`carry`] found the session's segments going past the program, and backed out.
    bypassed: std::sync::atomic::AtomicBool,
    /// The relay's sockets' counts of segments received once spliced (`[client, compute]`).
    segs_in: [u32; 2],
    /// Both peers on other hosts (not loopback).
    across_hosts: bool,
}

impl TcpSpliced {
    fn stats(&self) -> (Stats, Stats) {
        let maps = self.splice.maps();
        let of = |d: &Direction| Stats::of(maps.stats.get(&d.key, 0).unwrap_or([0; 23]));
        let [from_client, from_compute] = &self.directions;
        (of(from_client), of(from_compute))
    }

    fn set_rewrite(&self, on: bool) -> std::io::Result<()> {
        let mut maps = self.splice.maps();
        let [a, b] = &self.directions;
        for (d, r) in [(a, b), (b, a)] {
            maps.controls
                .insert(d.key, d.control(r, self.since_ns, on), 0)
                .map_err(std::io::Error::other)?;
        }
        Ok(())
    }

    /// Once the client has acknowledged the chunk the relay wrote at the splice, closes the
    /// relay's socket on its side (in repair mode: without a packet), so that it never sends
    /// the chunk again; until then it would, were the chunk lost. Whether it is closed.
    fn release_client(&self, client: &TcpStream, from_client: &Stats) -> bool {
        let [_, m] = &self.directions;
        // The chunk ends where the compute's bytes start in the client's numbering.
        let chunk_end = m.seq_delta.wrapping_add(self.compute_rcv);
        if from_client.ack_max.wrapping_sub(chunk_end) >= 1 << 31 {
            return false;
        }
        rustix::net::connect_unspec(client).is_ok()
    }

    /// Whether the session's segments pass the program: they never reach the relay's own
    /// sockets while it is spliced (the socket on the client's side until it is released),
    /// unless routing is not symmetric (a peer's segments arrive by another interface than
    /// the route to it leaves by) or the interface is gone. Counted by the sockets' own
    /// count of segments received, which the kernel keeps before it discards one (an
    /// acknowledgement of bytes the relay's socket never sent). `None`: none reached them.
    /// `Some(true)`: the program has seen nothing of either connection either, so the
    /// relay's sockets are still each connection's own; `Some(false)`: it has, and the
    /// connections have moved on past what the relay's sockets know.
    fn segments_bypass(
        &self,
        (client, compute): (&TcpStream, &TcpStream),
        client_released: bool,
        (from_client, from_compute): (&Stats, &Stats),
    ) -> Option<bool> {
        let arrived = |s: &TcpStream, at: u32| tcp_repair::agreed(s).is_ok_and(|a| a.segs_in != at);
        let [client_at, compute_at] = self.segs_in;
        if !(arrived(compute, compute_at) || !client_released && arrived(client, client_at)) {
            return None;
        }
        Some(self.untouched(from_client, from_compute))
    }

    /// Whether the program has seen nothing of either connection since the splice: each
    /// direction's counters as the splice set them.
    fn untouched(&self, from_client: &Stats, from_compute: &Stats) -> bool {
        let as_set = |stats: &Stats, (seq_end, ack_max): (u32, u32)| {
            (stats.seq_end, stats.ack_max, stats.ended) == (seq_end, ack_max, 0)
        };
        let [at_client, at_compute] = self.at_splice;
        as_set(from_client, at_client) && as_set(from_compute, at_compute)
    }

    /// Backs a splice out that the program has seen nothing of: the rewriting off, the
    /// counters looked at once more after a segment the program may have been rewriting has
    /// gone through, then both sockets out of repair mode, each still its connection's own.
    /// Whether it was backed out (`false`: the program did see something by then).
    async fn back_out(&self, client: &TcpStream, compute: &TcpStream) -> bool {
        if self.set_rewrite(false).is_err() {
            return false;
        }
        tokio::time::sleep(GRACE).await;
        let (from_client, from_compute) = self.stats();
        if !self.untouched(&from_client, &from_compute) {
            return false;
        }
        if tcp_repair::leave(client)
            .and(tcp_repair::leave(compute))
            .is_err()
        {
            return false;
        }
        self.bypassed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// Ends a session whose connections have gone past what the relay's sockets know: the
    /// rewriting off, each connection given a new socket at where the program's counters put
    /// it, which closes with a reset the peer takes (at its next expected sequence number), so
    /// that neither end waits for bytes that will not come.
    fn reset_both(
        &self,
        (client, compute): (&mut TcpStream, &mut TcpStream),
        (from_client, from_compute): (&Stats, &Stats),
    ) {
        let _ = self.set_rewrite(false);
        let (client_state, compute_state) = self.restored(from_client, from_compute, Vec::new());
        for (state, socket) in [(client_state, client), (compute_state, compute)] {
            if restore(&state, socket).is_ok() {
                let _ = rustix::net::sockopt::set_socket_linger(&*socket, Some(Duration::ZERO));
            }
        }
    }

    /// Whether [`carry`] returned the session because its segments went past the program:
    /// not to be spliced below TCP again.
    #[must_use]
    pub fn was_bypassed(&self) -> bool {
        self.bypassed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every byte each way went through and was acknowledged: nothing for a peer to send
    /// again that a new socket would not know.
    fn settled(&self, from_client: &Stats, from_compute: &Stats) -> bool {
        let [c, m] = &self.directions;
        from_client.ack_max == from_compute.seq_end.wrapping_add(m.seq_delta)
            && from_compute.ack_max == from_client.seq_end.wrapping_add(c.seq_delta)
    }

    /// How the session ended, once it has: both sides' FINs through and acknowledged, or a
    /// reset.
    fn ended(&self, from_client: &Stats, from_compute: &Stats) -> Option<PumpEnd> {
        if from_client.ended == 2 || from_compute.ended == 2 {
            return Some(PumpEnd::Reset);
        }
        (from_client.ended == 1
            && from_compute.ended == 1
            && self.settled(from_client, from_compute))
        .then_some(PumpEnd::Eof)
    }

    /// The session's bytes each way since the splice, the chunk the relay wrote included.
    #[must_use]
    pub fn report(&self, ended_by: PumpEnd) -> PumpReport {
        let (from_client, from_compute) = self.stats();
        PumpReport {
            client_to_compute: from_client.bytes,
            compute_to_client: from_compute.bytes + self.chunk_len,
            client_read: 0,
            compute_read: 0,
            ended_by,
        }
    }

    /// Where each connection stands by the program's counters, for a new socket of the
    /// relay's to go on from: on the client's, the relay sends from where the compute's bytes
    /// reached (`in_flight` the last of them, not yet acknowledged) and expects the client's
    /// next byte; on the compute's, the other way.
    fn restored(
        &self,
        from_client: &Stats,
        from_compute: &Stats,
        in_flight: Vec<u8>,
    ) -> (Restored, Restored) {
        let [c, m] = &self.directions;
        let elapsed_ms = u32::try_from((monotonic_ns() - self.since_ns) / 1_000_000).unwrap_or(0);
        let clock = |(_, _, base): &(Leg, tcp_repair::Options, u32), out: &Stats| {
            let continued = base.wrapping_add(elapsed_ms);
            // Never behind what the peer last saw (PAWS), even with the lowest bit cleared.
            if out.ts_set && out.tsval_out.wrapping_sub(continued) < 1 << 31 {
                out.tsval_out.wrapping_add(2)
            } else {
                continued.wrapping_add(2)
            }
        };
        let [client_leg, compute_leg] = &self.legs;
        // The client's connection: the relay sends from where the compute's bytes reached
        // and expects the client's next byte.
        let client_state = Restored {
            leg: client_leg.0,
            options: client_leg.1,
            snd: from_compute.seq_end.wrapping_add(m.seq_delta),
            in_flight,
            rcv: from_client.seq_end,
            snd_wnd: u32::from(from_client.window) << c.scales.0,
            rcv_wnd: m.window_out(from_compute.window),
            timestamp: clock(client_leg, from_compute),
        };
        let compute_state = Restored {
            leg: compute_leg.0,
            options: compute_leg.1,
            snd: from_client.seq_end.wrapping_add(c.seq_delta),
            in_flight: Vec::new(),
            rcv: from_compute.seq_end,
            snd_wnd: u32::from(from_compute.window) << m.scales.0,
            rcv_wnd: c.window_out(from_client.window),
            timestamp: clock(compute_leg, from_client),
        };
        (client_state, compute_state)
    }

    /// Takes the session back when quiet between commands (the conditions of
    /// [`crate::kernel_splice`]'s take-back), by making two new sockets established where
    /// the connections are now; `asked` by a pause, the compute's CPU is not judged.
    /// `None`: still spliced.
    async fn take_back(
        &self,
        client: &mut TcpStream,
        compute: &mut TcpStream,
        when: &TakeBack<'_>,
        (quiet, asked): (Duration, bool),
    ) -> Option<Result<(Duration, Option<u16>), ()>> {
        let (from_client, from_compute) = self.stats();
        let used_ns = from_client
            .used_ns
            .max(from_compute.used_ns)
            .max(self.since_ns);
        let quiet_for = Duration::from_nanos(monotonic_ns().saturating_sub(used_ns));
        if from_client.last_ns > from_compute.last_ns
            || quiet_for < quiet
            || from_client.ended != 0
            || from_compute.ended != 0
            || !(asked || (when.compute_idle)())
        {
            return None;
        }
        let in_flight = in_flight_to_client(&self.directions, &from_client, &from_compute)?;
        let status_flags = if from_compute.bytes == 0 {
            Some(when.status_flags)
        } else if from_compute.tail_end != from_compute.seq_end {
            // The kept bytes are a segment sent again, not the stream's end.
            None
        } else {
            match crate::conversation::last_packet(&from_compute.tail) {
                LastPacket::Ended(flags) => Some(flags),
                LastPacket::Unknown => None,
                LastPacket::MoreResults => return None,
            }
        };
        // Segments from here are dropped (their senders send them again, to the new sockets).
        if self.set_rewrite(false).is_err() {
            // One direction may be off: on again, or the session cannot go on.
            return self.set_rewrite(true).is_err().then_some(Err(()));
        }
        // A segment the program took before the switch is rewritten within microseconds.
        tokio::time::sleep(GRACE).await;
        let (client_now, compute_now) = self.stats();
        let moved = |a: &Stats, b: &Stats| {
            (a.seq_end, a.ack_max, a.window, a.ended) != (b.seq_end, b.ack_max, b.window, b.ended)
        };
        if moved(&client_now, &from_client) || moved(&compute_now, &from_compute) {
            return self.set_rewrite(true).is_err().then_some(Err(()));
        }
        let (client_state, compute_state) = self.restored(&from_client, &from_compute, in_flight);
        if self.across_hosts {
            // This host's conntrack saw none of the spliced segments: its entries would take
            // the next ones for out of window (`ct state invalid`). Without them, the next
            // segments start new entries, as established.
            for (leg, _, _) in &self.legs {
                if let Err(e) = crate::sys::conntrack_entry::forget(leg.own, leg.peer) {
                    tracing::debug!(error = %e, "cannot forget a connection's conntrack entry");
                }
            }
        }
        if let Err(e) =
            restore(&client_state, client).and_then(|()| restore(&compute_state, compute))
        {
            // The old sockets are gone: the session cannot be carried on either way.
            tracing::warn!(error = %e, "could not take a session back from the TCP splice; it is cut");
            return Some(Err(()));
        }
        let mut maps = self.splice.maps();
        for d in &self.directions {
            let _ = maps.controls.remove(&d.key);
        }
        drop(maps);
        Some(Ok((quiet_for, status_flags)))
    }
}

/// The compute's bytes the client has not acknowledged yet, once the compute has acknowledged
/// all the client sent: what the relay's new socket on the client's side must hold, to send
/// again should they be lost. Known only when they are the end of the compute's last
/// segment, as the program kept it (a pool's ping reply, whose acknowledgement the client
/// delays until its next ping); `None` otherwise.
fn in_flight_to_client(
    [c, m]: &[Direction; 2],
    from_client: &Stats,
    from_compute: &Stats,
) -> Option<Vec<u8>> {
    if from_compute.ack_max != from_client.seq_end.wrapping_add(c.seq_delta) {
        return None;
    }
    let in_flight = from_compute
        .seq_end
        .wrapping_add(m.seq_delta)
        .wrapping_sub(from_client.ack_max);
    if in_flight == 0 {
        return Some(Vec::new());
    }
    let n = usize::try_from(in_flight).ok()?;
    let last = &from_compute.last_segment;
    if from_compute.tail_end != from_compute.seq_end || n > last.len() {
        return None;
    }
    last.get(last.len() - n..).map(<[u8]>::to_vec)
}

impl Drop for TcpSpliced {
    fn drop(&mut self) {
        let mut maps = self.splice.maps();
        for d in &self.directions {
            let _ = maps.controls.remove(&d.key);
            let _ = maps.stats.remove(&d.key);
        }
    }
}

/// A connection's state for a socket made established in repair mode.
struct Restored {
    leg: Leg,
    options: tcp_repair::Options,
    /// The next byte to send.
    snd: u32,
    /// The bytes before `snd` sent and not acknowledged yet.
    in_flight: Vec<u8>,
    rcv: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
    timestamp: u32,
}

/// Replaces `socket` (in repair mode, so its connection goes without a packet) by a new one
/// established at `state`, without a handshake.
fn restore(state: &Restored, socket: &mut TcpStream) -> std::io::Result<()> {
    use rustix::net::{AddressFamily, SocketType, ipproto};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, Some(ipproto::TCP))?;
    // Repair mode lets it bind beside the relay's listener (the kernel's SK_FORCE_REUSE;
    // setting SO_REUSEADDR after it would undo that).
    tcp_repair::enter(&fd)?;
    let in_flight = u32::try_from(state.in_flight.len()).map_err(std::io::Error::other)?;
    tcp_repair::set_sequence(
        &fd,
        tcp_repair::Queue::Send,
        state.snd.wrapping_sub(in_flight),
    )?;
    tcp_repair::set_sequence(&fd, tcp_repair::Queue::Receive, state.rcv)?;
    // The old connection goes first, freeing its addresses (its descriptor stays open until
    // replaced below).
    rustix::net::connect_unspec(&*socket)?;
    rustix::net::bind(&fd, &state.leg.own)?;
    // Not fatal: a clamp the kernel refuses (a peer's MSS under 88 bytes) leaves the default,
    // smaller segments, and the old socket is gone already.
    if let Err(e) = tcp_repair::set_max_segment(&fd, &state.options) {
        tracing::debug!(error = %e, mss = state.options.mss, "the restored socket keeps the default MSS");
    }
    rustix::net::connect(&fd, &state.leg.peer)?;
    tcp_repair::set_options(&fd, &state.options)?;
    tcp_repair::set_window(
        &fd,
        &tcp_repair::Window {
            snd_wl1: state.rcv,
            snd_wnd: state.snd_wnd,
            max_window: state.snd_wnd,
            rcv_wnd: state.rcv_wnd,
            rcv_wup: state.rcv,
        },
    )?;
    if state.options.timestamps {
        tcp_repair::set_timestamp(&fd, state.timestamp)?;
    }
    let mut new = std::net::TcpStream::from(fd);
    if !state.in_flight.is_empty() {
        // Written in repair mode to the send queue: counted as sent, not acknowledged.
        tcp_repair::select_queue(&new, tcp_repair::Queue::Send)?;
        std::io::Write::write_all(&mut new, &state.in_flight)?;
    }
    tcp_repair::leave(&new)?;
    // As the relay's sockets are made (perceptron, compute_conn): the pump writes small
    // responses that must not wait for the peer's delayed acknowledgement.
    new.set_nodelay(true)?;
    new.set_nonblocking(true)?;
    *socket = TcpStream::from_std(new)?;
    Ok(())
}

/// How long after turning the rewriting off [`TcpSpliced::take_back`] looks again.
const GRACE: Duration = Duration::from_millis(1);

/// How often [`carry`] looks whether the session has ended, when it does not look more often
/// for a take-back.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Carries a session spliced below TCP until it ends (both FINs through, or a reset) or, with
/// `take_back`, until it is taken back between commands: then `client` and `compute` are new
/// sockets, established where the connections stood, for the pump.
pub async fn carry(
    client: &mut TcpStream,
    compute: &mut TcpStream,
    spliced: &TcpSpliced,
    take_back: Option<&TakeBack<'_>>,
) -> Carried {
    let look_every = take_back
        .and_then(|t| t.quiet)
        .map_or(LOOK_EVERY, |q| q.min(LOOK_EVERY));
    // After a pause asked: looks again every few milliseconds until then (the client's
    // acknowledgement of the last response may still be on its way).
    let mut asked_until: Option<tokio::time::Instant> = None;
    let mut client_released = false;
    let mut last_look = tokio::time::Instant::now();
    // The client acknowledges the splice's chunk within its delayed-ACK time; looked for
    // often that long, then at each look.
    let release_by = last_look + Duration::from_secs(1);
    loop {
        let now = tokio::time::Instant::now();
        let asking = asked_until.is_some_and(|until| now < until);
        let wait = if asking || (!client_released && now < release_by) {
            ASKED_RETRY
        } else {
            look_every
        };
        let ask = async {
            match take_back {
                Some(when) => when.look_now.notified().await,
                None => std::future::pending().await,
            }
        };
        let asked = tokio::select! {
            () = tokio::time::sleep(wait) => asking,
            () = ask => {
                asked_until = Some(tokio::time::Instant::now() + ASKED_FOR);
                true
            }
        };
        let (from_client, from_compute) = spliced.stats();
        match spliced.segments_bypass(
            (client, compute),
            client_released,
            (&from_client, &from_compute),
        ) {
            None => {}
            Some(true) if spliced.back_out(client, compute).await => {
                tracing::warn!(
                    "a held session's segments do not pass the splice below TCP (routing not symmetric?); it goes on on the pump"
                );
                return Carried::TakenBack {
                    quiet_for: Duration::ZERO,
                    status_flags: take_back.map(|t| t.status_flags),
                };
            }
            Some(_) => {
                tracing::warn!(
                    "a held session's segments do not all pass the splice below TCP (routing not symmetric?); it cannot go on, and both ends are reset"
                );
                spliced.reset_both((client, compute), (&from_client, &from_compute));
                return Carried::Ended(spliced.report(PumpEnd::Bypassed));
            }
        }
        if !client_released {
            client_released = spliced.release_client(client, &from_client);
        }
        if let Some(ended_by) = spliced.ended(&from_client, &from_compute) {
            return Carried::Ended(spliced.report(ended_by));
        }
        let Some(when) = take_back else {
            continue;
        };
        let quiet = match when.quiet {
            _ if asked => (Duration::ZERO, true),
            Some(every) if last_look.elapsed() >= look_every => (every, false),
            _ => continue,
        };
        last_look = tokio::time::Instant::now();
        match spliced.take_back(client, compute, when, quiet).await {
            None => {}
            Some(Ok((quiet_for, status_flags))) => {
                return Carried::TakenBack {
                    quiet_for,
                    status_flags,
                };
            }
            Some(Err(())) => return Carried::Ended(spliced.report(PumpEnd::TakeBackFailed)),
        }
    }
}

/// How long [`carry`] keeps looking after a pause asked, and how often.
const ASKED_FOR: Duration = Duration::from_millis(200);
const ASKED_RETRY: Duration = Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// The program, or `None` (with the reason printed) where this process lacks the
    /// capabilities; as root (CI), a program the kernel refuses fails the test, as does a
    /// relay built without clang.
    fn loaded() -> Option<Arc<TcpSplice>> {
        match TcpSplice::load() {
            Ok(s) => Some(s),
            Err(why) => {
                assert!(!matches!(why, SpliceUnavailable::NotBuilt), "{why}");
                assert!(!rustix::process::geteuid().is_root(), "{why}");
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

    /// A session with a first exchange through the relay's own sockets, as the pump carries
    /// it before the splice: (client, relay's client side, relay's compute side, compute).
    async fn session() -> (TcpStream, TcpStream, TcpStream, TcpStream) {
        let (mut client, mut relay_client) = pair().await;
        let (mut relay_compute, mut compute) = pair().await;
        let mut got = [0; 5];
        client.write_all(b"hello").await.unwrap();
        relay_client.read_exact(&mut got).await.unwrap();
        relay_compute.write_all(&got).await.unwrap();
        compute.read_exact(&mut got).await.unwrap();
        compute.write_all(b"world").await.unwrap();
        relay_compute.read_exact(&mut got).await.unwrap();
        // The compute's acknowledgement of "hello" came with "world"; the client's of the
        // relay's bytes comes with its next segment.
        (client, relay_client, relay_compute, compute)
    }

    #[test]
    fn a_key_is_the_segments_addresses_and_ports_as_on_the_wire() {
        let from: SocketAddrV4 = "127.0.0.1:5000".parse().unwrap();
        let to: SocketAddrV4 = "127.0.0.2:3306".parse().unwrap();
        let bytes: Vec<u8> = key(from, to).iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes, [127, 0, 0, 1, 127, 0, 0, 2, 0x13, 0x88, 0x0c, 0xea]);
    }

    fn direction(seq_delta: u32, scales: (u8, u8)) -> Direction {
        let any: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
        Direction {
            key: [0; 3],
            out: (any, any),
            seq_delta,
            ack_delta: 0,
            scales,
            ts_base: 0,
            out_by: (0, Ipv4Addr::UNSPECIFIED),
        }
    }

    fn agreed(advmss: u32, mss: u16, timestamps: bool) -> tcp_repair::Agreed {
        tcp_repair::Agreed {
            options: tcp_repair::Options {
                mss,
                window_scale: Some((7, 7)),
                sack: true,
                timestamps,
            },
            advmss,
            ..tcp_repair::Agreed::default()
        }
    }

    #[test]
    fn across_hosts_each_peers_segments_must_fit_the_other_connection() {
        // Two Ethernet links (MTU 1500) with timestamps: 1,460 advertised, 1,448 sent.
        let ethernet = agreed(1460, 1448, true);
        assert!(same_segments(&ethernet, &ethernet).is_ok());
        // A client on a link with jumbo frames would send segments the compute's link
        // cannot carry.
        let jumbo = agreed(8960, 8948, true);
        assert!(same_segments(&jumbo, &ethernet).is_err());
        assert!(same_segments(&ethernet, &jumbo).is_err());
        // Without timestamps on one side the program would have to remove or add them.
        assert!(same_segments(&ethernet, &agreed(1460, 1460, false)).is_err());
        let plain = agreed(1460, 1460, false);
        assert!(same_segments(&plain, &plain).is_ok());
    }

    #[test]
    fn a_window_keeps_its_bytes_across_scales_up_to_the_field_s_limit() {
        // 512 << 7 = 65,536 bytes, 64 in a scale of 10.
        assert_eq!(direction(0, (7, 10)).window_out(512), 65_536);
        // 65,535 << 10 does not fit a field without scale: the most it can say.
        assert_eq!(direction(0, (10, 0)).window_out(0xffff), 0xffff);
    }

    /// `struct stats` as the map holds it: counters, then the last segment's tail and the
    /// one's before it.
    fn raw(seq_end: u32, ack_max: u32, last: &[u8], before: &[u8], tail_end: u32) -> RawStats {
        raw_joined(
            seq_end,
            ack_max,
            (last, before),
            (tail_end, tail_end - last.len() as u32),
        )
    }

    fn raw_joined(
        seq_end: u32,
        ack_max: u32,
        (last, before): (&[u8], &[u8]),
        (tail_end, tail_prev_end): (u32, u32),
    ) -> RawStats {
        let words = |b: &[u8]| {
            let mut padded = [0_u8; TAIL];
            padded[..b.len()].copy_from_slice(b);
            let mut w = [0_u64; 4];
            for (word, chunk) in w.iter_mut().zip(padded.chunks_exact(8)) {
                *word = u64::from_le_bytes(chunk.try_into().unwrap());
            }
            w
        };
        let mut r = [0_u64; 23];
        r[0] = u64::from(seq_end);
        r[1] = u64::from(ack_max);
        r[11] = last.len() as u64;
        r[12] = before.len() as u64;
        r[13] = u64::from(tail_end);
        r[14] = u64::from(tail_prev_end);
        r[15..19].copy_from_slice(&words(last));
        r[19..23].copy_from_slice(&words(before));
        r
    }

    #[test]
    fn the_tail_joins_the_last_two_segments_where_they_meet() {
        let s = Stats::of(raw(0, 0, b"\x07\x00\x00\x01", b"abc", 100));
        assert_eq!(s.tail, b"abc\x07\x00\x00\x01");
        assert_eq!(s.last_segment, b"\x07\x00\x00\x01");
        // The one before ended elsewhere (the last was sent again): the last alone.
        let resent = Stats::of(raw_joined(0, 0, (b"\x07\x00", b"abc"), (100, 90)));
        assert_eq!(resent.tail, b"\x07\x00");
        // A last segment as long as the tail: it is the whole tail.
        let long = [9_u8; TAIL];
        let whole = Stats::of(raw_joined(0, 0, (&long, b"abc"), (100, 68)));
        assert_eq!(whole.tail, long);
    }

    #[test]
    fn only_the_compute_s_last_segment_may_be_in_flight_at_a_take_back() {
        // The compute's next byte is 1,000 in its numbering, 5,000 in the client's.
        let directions = [direction(100, (0, 0)), direction(4_000, (0, 0))];
        let reply = b"\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00";
        let from_compute = Stats::of(raw(1_000, 600, reply, b"", 1_000));
        // The client acknowledged everything; the compute all the client sent (500 + 100).
        let acked = Stats::of(raw(500, 5_000, b"", b"", 0));
        assert_eq!(
            in_flight_to_client(&directions, &acked, &from_compute),
            Some(Vec::new())
        );
        // The ping reply not yet acknowledged: the new socket holds it.
        let delayed = Stats::of(raw(500, 4_989, b"", b"", 0));
        assert_eq!(
            in_flight_to_client(&directions, &delayed, &from_compute).as_deref(),
            Some(&reply[..])
        );
        // More than the program kept: not now.
        let behind = Stats::of(raw(500, 4_900, b"", b"", 0));
        assert_eq!(
            in_flight_to_client(&directions, &behind, &from_compute),
            None
        );
        // The compute has not acknowledged the client's last bytes: not now.
        let unanswered = Stats::of(raw(510, 5_000, b"", b"", 0));
        assert_eq!(
            in_flight_to_client(&directions, &unanswered, &from_compute),
            None
        );
        // The kept segment was a retransmission, not the stream's end: not now.
        let resent = Stats::of(raw(1_000, 600, reply, b"", 990));
        assert_eq!(in_flight_to_client(&directions, &delayed, &resent), None);
    }

    #[tokio::test]
    async fn segments_go_end_to_end_and_the_closes_with_them() {
        let Some(splice) = loaded() else {
            return;
        };
        let (mut client, mut relay_client, mut relay_compute, mut compute) = session().await;
        let spliced = splice
            .splice(&relay_client, &relay_compute, b"world")
            .unwrap();
        let mut got = [0; 5];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"world");
        let big: Vec<u8> = (0..8_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client
        });
        let mut received = vec![0; big.len()];
        compute.read_exact(&mut received).await.unwrap();
        assert!(received == big, "the bytes arrived changed");
        let mut client = writer.await.unwrap();
        let back = big.clone();
        let writer = tokio::spawn(async move {
            compute.write_all(&back).await.unwrap();
            compute
        });
        client.read_exact(&mut received).await.unwrap();
        assert!(received == big, "the bytes back arrived changed");
        let mut compute = writer.await.unwrap();
        // The relay's sockets saw none of it.
        assert_eq!(rustix::io::ioctl_fionread(&relay_client).unwrap(), 0);
        assert_eq!(rustix::io::ioctl_fionread(&relay_compute).unwrap(), 0);
        client.shutdown().await.unwrap();
        assert_eq!(compute.read(&mut got).await.unwrap(), 0);
        drop(compute);
        assert_eq!(client.read(&mut got).await.unwrap(), 0);
        let carried = carry(&mut relay_client, &mut relay_compute, &spliced, None).await;
        let Carried::Ended(report) = carried else {
            panic!("taken back without a TakeBack");
        };
        assert_eq!(report.ended_by, PumpEnd::Eof);
        assert_eq!(
            (report.client_to_compute, report.compute_to_client),
            (8_000_000, 8_000_005)
        );
    }

    /// A client that quit right after its answer: its FIN reached the relay's socket before
    /// the splice, which must not hide it from the pump.
    #[tokio::test]
    async fn a_connection_whose_peer_has_closed_is_left_to_the_pump() {
        let Some(splice) = loaded() else {
            return;
        };
        let (mut client, mut relay_client, relay_compute, _compute) = session().await;
        client.shutdown().await.unwrap();
        while tcp_repair::agreed(&relay_client).unwrap().established {
            tokio::task::yield_now().await;
        }
        let refused = splice.splice(&relay_client, &relay_compute, b"world");
        let Err(unspliced) = refused else {
            panic!("spliced a closing connection");
        };
        assert_eq!(
            unspliced.error.kind(),
            std::io::ErrorKind::WouldBlock,
            "{}",
            unspliced.error
        );
        let mut got = [0; 1];
        assert_eq!(relay_client.read(&mut got).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_quiet_session_is_taken_back_onto_new_sockets_and_spliced_again() {
        let Some(splice) = loaded() else {
            return;
        };
        let (mut client, mut relay_client, mut relay_compute, mut compute) = session().await;
        let mss = |s: &TcpStream| tcp_repair::agreed(s).unwrap().options.mss;
        let mss_before = (mss(&relay_client), mss(&relay_compute));
        let spliced = splice
            .splice(&relay_client, &relay_compute, b"world")
            .unwrap();
        let mut got = [0; 8];
        client.read_exact(&mut got[..5]).await.unwrap();
        client.write_all(b"command1").await.unwrap();
        compute.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"command1");
        compute.write_all(b"answer-1").await.unwrap();
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer-1");
        let idle = || true;
        let look_now = tokio::sync::Notify::new();
        let take_back = TakeBack {
            quiet: Some(Duration::from_millis(50)),
            compute_idle: &idle,
            look_now: &look_now,
            status_flags: 2,
        };
        let carried = carry(
            &mut relay_client,
            &mut relay_compute,
            &spliced,
            Some(&take_back),
        )
        .await;
        let Carried::TakenBack { quiet_for, .. } = carried else {
            panic!("not taken back: {carried:?}");
        };
        assert!(quiet_for >= Duration::from_millis(50), "{quiet_for:?}");
        drop(spliced);
        // The new sockets send segments as large as the old ones did (not RFC 9293's 536), up
        // to the 32755 bytes the kernel lets a socket be clamped to before its connect.
        let clamped = |m: u16| m.min(32_755);
        assert_eq!(
            (mss(&relay_client), mss(&relay_compute)),
            (clamped(mss_before.0), clamped(mss_before.1))
        );
        // Taken back: the relay's new sockets carry the session.
        client.write_all(b"command2").await.unwrap();
        relay_client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"command2");
        relay_compute.write_all(&got).await.unwrap();
        compute.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"command2");
        compute.write_all(b"answer-2").await.unwrap();
        relay_compute.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer-2");
        // Spliced again at the end of that response.
        let spliced = splice
            .splice(&relay_client, &relay_compute, b"answer-2")
            .unwrap();
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer-2");
        client.write_all(b"command3").await.unwrap();
        compute.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"command3");
        compute.write_all(b"answer-3").await.unwrap();
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer-3");
        // The compute dies: the client sees the close at once.
        drop(compute);
        assert_eq!(client.read(&mut got).await.unwrap(), 0);
        drop(client);
        let carried = carry(&mut relay_client, &mut relay_compute, &spliced, None).await;
        assert!(matches!(carried, Carried::Ended(_)), "{carried:?}");
    }
}
