//! Linux's TCP repair mode behind a safe API: read a connected socket's sequence numbers,
//! close it without a packet, and make a socket that is established at given sequence
//! numbers without a handshake. The relay's TCP splice (relay/src/splice/below_tcp.rs) uses it to
//! hand a held connection's segments to the other connection in the kernel and to take the
//! connection back. These are `setsockopt`/`getsockopt` calls the `libc` crate declares but
//! no safe wrapper covers; the relay forbids `unsafe`, so they live here, each with why it is
//! sound.
//!
//! Repair mode needs CAP_NET_ADMIN. The kernel's side is `do_tcp_setsockopt` and
//! `do_tcp_getsockopt` in `net/ipv4/tcp.c` (options `TCP_REPAIR` to `TCP_REPAIR_WINDOW`).

use std::io;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd};

/// A socket's two queues, as `TCP_REPAIR_QUEUE` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// What the socket sends: its sequence number is the next byte it will send.
    Send,
    /// What it receives: its sequence number is the next byte it expects.
    Receive,
}

/// `struct tcp_repair_window`: the windows of an established connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// The sequence number of the segment that last updated the send window.
    pub snd_wl1: u32,
    /// The peer's window, in bytes.
    pub snd_wnd: u32,
    /// The largest window the peer has offered, in bytes.
    pub max_window: u32,
    /// The window this socket last offered, in bytes.
    pub rcv_wnd: u32,
    /// The receive sequence number at which it was offered.
    pub rcv_wup: u32,
}

/// The options a connection agreed at its handshake, for a socket restored without one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The peer's maximum segment size.
    pub mss: u16,
    /// Window scales: the peer's (applied to the windows it sends) and this socket's.
    pub window_scale: Option<(u8, u8)>,
    /// Selective acknowledgements were agreed.
    pub sack: bool,
    /// Timestamps were agreed.
    pub timestamps: bool,
}

fn set<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `value` points to a live, initialised `T` of `len` bytes for the whole call,
    // which only reads it; `fd` is a descriptor the caller borrows, open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            std::ptr::from_ref(value).cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get<T: Copy + Default>(fd: BorrowedFd<'_>, name: libc::c_int) -> io::Result<T> {
    let mut value = T::default();
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `value` is a live `T` of `len` bytes the kernel may write (every `T` here is
    // plain integers, valid for any bytes); `len` is a live `socklen_t` it updates; `fd` is
    // a descriptor the caller borrows, open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            std::ptr::from_mut(&mut value).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if usize::try_from(len).ok() != Some(std::mem::size_of::<T>()) {
        return Err(io::Error::other("the kernel answered with another size"));
    }
    Ok(value)
}

/// Turns repair mode on: the socket sends nothing from now on (neither data nor a FIN or
/// reset when closed), and its queues' sequence numbers can be read.
///
/// # Errors
/// `EPERM` without CAP_NET_ADMIN or on a socket neither established nor closed.
pub fn enter(socket: impl AsFd) -> io::Result<()> {
    set(socket.as_fd(), libc::TCP_REPAIR, &1_i32)
}

/// Leaves repair mode; the socket works as any connected one again. No window probe is sent.
///
/// # Errors
/// The kernel's refusal.
pub fn leave(socket: impl AsFd) -> io::Result<()> {
    // TCP_REPAIR_OFF_NO_WP.
    set(socket.as_fd(), libc::TCP_REPAIR, &-1_i32)
}

/// The sequence number of `queue`: for [`Queue::Send`] the next byte the socket will send,
/// for [`Queue::Receive`] the next byte it expects. In repair mode only.
///
/// # Errors
/// The kernel's refusal (`EPERM` outside repair mode).
pub fn sequence(socket: impl AsFd, queue: Queue) -> io::Result<u32> {
    let fd = socket.as_fd();
    select(fd, queue)?;
    get::<u32>(fd, libc::TCP_QUEUE_SEQ)
}

/// Sets the sequence number of `queue` on a socket in repair mode that is not connected yet.
///
/// # Errors
/// The kernel's refusal (`EPERM` on a connected socket).
pub fn set_sequence(socket: impl AsFd, queue: Queue, sequence: u32) -> io::Result<()> {
    let fd = socket.as_fd();
    select(fd, queue)?;
    set(fd, libc::TCP_QUEUE_SEQ, &sequence)
}

/// Selects the queue that the next [`sequence`], [`set_sequence`] or write works on: in
/// repair mode, bytes written to [`Queue::Send`] count as sent and not yet acknowledged.
///
/// # Errors
/// The kernel's refusal (`EPERM` outside repair mode).
pub fn select_queue(socket: impl AsFd, queue: Queue) -> io::Result<()> {
    select(socket.as_fd(), queue)
}

fn select(fd: BorrowedFd<'_>, queue: Queue) -> io::Result<()> {
    // TCP_RECV_QUEUE = 1, TCP_SEND_QUEUE = 2 (include/uapi/linux/tcp.h).
    let which: i32 = match queue {
        Queue::Receive => 1,
        Queue::Send => 2,
    };
    set(fd, libc::TCP_REPAIR_QUEUE, &which)
}

impl Options {
    /// The bytes of options every segment carries: the timestamps' 12 (aligned), if agreed.
    #[must_use]
    pub fn segment_option_bytes(&self) -> u32 {
        if self.timestamps { 12 } else { 0 }
    }

    /// The peer's MSS as its SYN would have said it (the send MSS plus the options every
    /// segment carries, which the send MSS leaves out): what the kernel clamps the send MSS to.
    #[must_use]
    pub fn mss_clamp(&self) -> u32 {
        u32::from(self.mss) + self.segment_option_bytes()
    }
}

/// Clamps the MSS of a socket in repair mode, before its connect: the kernel sets the send
/// MSS at the connect, from this clamp and the route's MTU, and never again on its own (the
/// MSS of [`set_options`], after the connect, changes the clamp only). Without it a restored
/// connection sends segments of 524 bytes (the 536 of RFC 9293 less the timestamps). The
/// kernel takes a clamp of at most 32767 bytes, so a loopback connection (65483) comes back
/// with segments of 32755.
///
/// # Errors
/// The kernel's refusal.
pub fn set_max_segment(socket: impl AsFd, options: &Options) -> io::Result<()> {
    // MAX_TCP_WINDOW.
    let clamp = libc::c_int::try_from(options.mss_clamp().min(32_767))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set(socket.as_fd(), libc::TCP_MAXSEG, &clamp)
}

/// Sets the options the connection agreed, on a socket in repair mode just connected.
///
/// # Errors
/// The kernel's refusal.
pub fn set_options(socket: impl AsFd, options: &Options) -> io::Result<()> {
    // struct tcp_repair_opt { __u32 opt_code; __u32 opt_val; }, codes as TCPOPT_*.
    let mut list = vec![[2_u32, options.mss_clamp()]];
    if let Some((peer, own)) = options.window_scale {
        list.push([3, u32::from(peer) | (u32::from(own) << 16)]);
    }
    if options.sack {
        list.push([4, 0]);
    }
    if options.timestamps {
        list.push([8, 0]);
    }
    let fd = socket.as_fd();
    let len = libc::socklen_t::try_from(list.len() * 8)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `list` is a live vector of `[u32; 2]` (the layout of struct tcp_repair_opt)
    // holding `len` bytes, only read by the call; `fd` is borrowed and open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_REPAIR_OPTIONS,
            list.as_ptr().cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The socket's timestamp clock now (the value its next segment would carry), in ms.
/// Since Linux 6.7 the option's lowest bit says whether the clock counts microseconds
/// (a route's `tcp_usec_ts` feature).
///
/// # Errors
/// The kernel's refusal, or a clock counting microseconds.
pub fn timestamp(socket: impl AsFd) -> io::Result<u32> {
    let value = get::<u32>(socket.as_fd(), libc::TCP_TIMESTAMP)?;
    if value & 1 == 1 {
        return Err(io::Error::other(
            "the connection's timestamps count microseconds (tcp_usec_ts)",
        ));
    }
    Ok(value)
}

/// Sets the socket's timestamp clock to read `now_ms` now, counting milliseconds (the
/// lowest bit, which would ask for microseconds, is cleared: the clock reads at most 1 ms
/// less). In repair mode only.
///
/// # Errors
/// The kernel's refusal.
pub fn set_timestamp(socket: impl AsFd, now_ms: u32) -> io::Result<()> {
    set(socket.as_fd(), libc::TCP_TIMESTAMP, &(now_ms & !1))
}

/// The connection's windows. In repair mode only.
///
/// # Errors
/// The kernel's refusal.
pub fn window(socket: impl AsFd) -> io::Result<Window> {
    let [snd_wl1, snd_wnd, max_window, rcv_wnd, rcv_wup] =
        get::<[u32; 5]>(socket.as_fd(), libc::TCP_REPAIR_WINDOW)?;
    Ok(Window {
        snd_wl1,
        snd_wnd,
        max_window,
        rcv_wnd,
        rcv_wup,
    })
}

/// Sets the connection's windows, on a socket in repair mode just connected.
///
/// # Errors
/// The kernel's refusal (`EINVAL` for windows that do not fit its sequence numbers).
pub fn set_window(socket: impl AsFd, window: &Window) -> io::Result<()> {
    let raw = [
        window.snd_wl1,
        window.snd_wnd,
        window.max_window,
        window.rcv_wnd,
        window.rcv_wup,
    ];
    set(socket.as_fd(), libc::TCP_REPAIR_WINDOW, &raw)
}

/// What `TCP_INFO` says of the options the connection agreed, and how much it has in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Agreed {
    /// The options ([`Options`]), the MSS being the socket's current send MSS.
    pub options: Options,
    /// Segments sent and not acknowledged.
    pub unacked: u32,
    /// Bytes written by the application and not sent yet.
    pub notsent: u32,
    /// The connection is established (not closing).
    pub established: bool,
    /// The MSS this socket advertised (`tcpi_advmss`): the peer's segments carry at most this
    /// many bytes, less their options.
    pub advmss: u32,
    /// Segments the socket received (`tcpi_segs_in`), counted before any is discarded.
    pub segs_in: u32,
}

/// The options the connection agreed and what it has in flight (`TCP_INFO`).
///
/// # Errors
/// The kernel's refusal.
pub fn agreed(socket: impl AsFd) -> io::Result<Agreed> {
    // struct tcp_info (include/uapi/linux/tcp.h) read as u32 words: word 0 holds tcpi_state
    // (its byte 0), word 1 tcpi_options (its byte 1) and the window scales (byte 2, the
    // peer's in the low nibble); word 4 is tcpi_snd_mss, 6 tcpi_unacked, 21 tcpi_advmss, 35
    // tcpi_segs_in, 36 tcpi_notsent_bytes.
    let info = get_info(socket.as_fd())?;
    let second = info.get(1).map_or([0; 4], |w| w.to_ne_bytes());
    // Byte 5 (tcpi_options), byte 6 (tcpi_snd_wscale:4, tcpi_rcv_wscale:4).
    let options_bits = second[1];
    let wscales = second[2];
    let snd_mss = info.get(4).copied().unwrap_or(0);
    Ok(Agreed {
        options: Options {
            mss: u16::try_from(snd_mss).unwrap_or(u16::MAX),
            window_scale: (options_bits & 4 != 0).then_some((wscales & 0x0f, wscales >> 4)),
            sack: options_bits & 2 != 0,
            timestamps: options_bits & 1 != 0,
        },
        unacked: info.get(6).copied().unwrap_or(0),
        // tcpi_state, byte 0: TCP_ESTABLISHED is 1.
        established: info.first().is_some_and(|w| w.to_ne_bytes()[0] == 1),
        notsent: info.get(36).copied().unwrap_or(0),
        advmss: info.get(21).copied().unwrap_or(0),
        segs_in: info.get(35).copied().unwrap_or(0),
    })
}

fn get_info(fd: BorrowedFd<'_>) -> io::Result<[u32; 64]> {
    let mut value = [0_u32; 64];
    let mut len = libc::socklen_t::try_from(std::mem::size_of_val(&value))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `value` is a live array of `len` bytes the kernel may write (any bytes are
    // valid u32s; it writes at most `len`); `len` is a live `socklen_t` it updates; `fd` is
    // borrowed and open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            value.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}
