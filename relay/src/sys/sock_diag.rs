//! The kernel's socket table through netlink `sock_diag` (`NETLINK_SOCK_DIAG`,
//! `SOCK_DIAG_BY_FAMILY`), asked for listening TCP sockets (a dump of the listening table
//! only), or for one established socket by its address pair (a hash lookup, with its
//! `tcp_info`: how long since it last sent and received payload, for parking routed sessions).
//!
//! Why not `/proc/net/tcp`: reading it walks the kernel's whole established-socket hash table,
//! whose size follows the machine's memory, not the number of sockets. On a 24 GiB VM one read
//! of a table with a single line took 3.5 ms, and the owner check reads two of them on every
//! wake (the cold start went from 4.6 to 12 ms). A `sock_diag` dump whose state filter is
//! `LISTEN` alone makes the kernel walk only its listening table (`inet_diag_dump_icsk` skips
//! the established one when no other state is asked for): tens of microseconds.
//!
//! The codec is pure (bytes in, values out; fixtures below). The I/O, one netlink socket per
//! question, is [`listening_sockets`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::netlink::{
    AnswerError, ENOENT, NLMSG_DONE, NLMSG_ERROR, NLMSG_HEADER_LEN, array_at, ask, u32_at,
};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST | NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
const DUMP_REQUEST_FLAGS: u16 = 0x0001 | 0x0300;
/// `TCP_LISTEN` in the kernel's TCP state numbering, as a bit of `idiag_states`.
const TCP_LISTEN_STATE: u32 = 10;
const IPPROTO_TCP: u8 = 6;
/// `AF_INET` and `AF_INET6`.
pub const AF_INET: u8 = 2;
/// See [`AF_INET`].
pub const AF_INET6: u8 = 10;

/// `struct inet_diag_sockid`: ports, two 16-byte addresses, interface, cookie.
const SOCKID_LEN: usize = 48;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, sockid.
const REQUEST_LEN: usize = 8 + SOCKID_LEN;
/// `struct inet_diag_msg`: family, state, timer, retrans, sockid, expires, rqueue, wqueue,
/// uid, inode.
const MESSAGE_LEN: usize = 4 + SOCKID_LEN + 20;

/// One listening socket of the dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// The local address (unspecified for a wildcard listener).
    pub ip: IpAddr,
    /// The local port.
    pub port: u16,
    /// The socket's inode: `/proc/<pid>/fd/*` links to `socket:[inode]`.
    pub inode: u64,
}

/// What one buffer of the kernel's answer holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DumpPart {
    /// The sockets in this part.
    pub sockets: Vec<Listening>,
    /// `NLMSG_DONE` arrived: the dump is complete.
    pub done: bool,
}

/// The `nlmsghdr` of a `SOCK_DIAG_BY_FAMILY` request (whose `inet_diag_req_v2` follows), in a
/// buffer with room for it.
fn request_header(flags: u16, sequence: u32) -> Vec<u8> {
    let len = NLMSG_HEADER_LEN + REQUEST_LEN;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    out.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&sequence.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel
    out
}

/// The request for every listening TCP socket of `family` ([`AF_INET`] or [`AF_INET6`]).
#[must_use]
pub fn encode_listen_dump_request(family: u8, sequence: u32) -> Vec<u8> {
    let len = NLMSG_HEADER_LEN + REQUEST_LEN;
    let mut out = request_header(DUMP_REQUEST_FLAGS, sequence);
    out.extend_from_slice(&[family, IPPROTO_TCP, 0, 0]);
    out.extend_from_slice(&(1u32 << TCP_LISTEN_STATE).to_ne_bytes());
    out.resize(len, 0); // inet_diag_sockid: all zero, i.e. any socket
    out
}

/// Decodes one buffer of the kernel's answer (one `recv`), which holds whole netlink messages.
///
/// # Errors
/// [`AnswerError`]: a truncated message, or the kernel's refusal.
pub fn parse_dump_part(mut buf: &[u8]) -> Result<DumpPart, AnswerError> {
    let mut part = DumpPart::default();
    while !buf.is_empty() {
        let truncated = || AnswerError::Truncated("nlmsghdr");
        let len = u32_at(buf, 0).ok_or_else(truncated)? as usize;
        let kind = u16::from_ne_bytes(array_at(buf, 4).ok_or_else(truncated)?);
        if len < NLMSG_HEADER_LEN {
            return Err(AnswerError::Truncated("nlmsg_len"));
        }
        let body = buf
            .get(NLMSG_HEADER_LEN..len)
            .ok_or(AnswerError::Truncated("message"))?;
        match kind {
            NLMSG_DONE => {
                part.done = true;
                return Ok(part);
            }
            NLMSG_ERROR => {
                let errno = array_at(body, 0).ok_or(AnswerError::Truncated("nlmsgerr"))?;
                return Err(AnswerError::Kernel(-i32::from_ne_bytes(errno)));
            }
            SOCK_DIAG_BY_FAMILY => part.sockets.push(parse_message(body)?),
            _ => {} // nothing else is asked for; skipped
        }
        // Messages are aligned to 4 bytes.
        let next = len.div_ceil(4) * 4;
        buf = buf.get(next..).unwrap_or_default();
    }
    Ok(part)
}

fn parse_message(body: &[u8]) -> Result<Listening, AnswerError> {
    let msg = body
        .get(..MESSAGE_LEN)
        .ok_or(AnswerError::Truncated("inet_diag_msg"))?;
    let truncated = || AnswerError::Truncated("inet_diag_msg");
    let [family] = array_at(msg, 0).ok_or_else(truncated)?;
    let port = u16::from_be_bytes(array_at(msg, 4).ok_or_else(truncated)?);
    let src: [u8; 16] = array_at(msg, 8).ok_or_else(truncated)?;
    let ip = if family == AF_INET6 {
        IpAddr::V6(Ipv6Addr::from(src))
    } else {
        let [a, b, c, d, ..] = src;
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    };
    let inode = u32_at(msg, 4 + SOCKID_LEN + 16).ok_or_else(truncated)?;
    Ok(Listening {
        ip,
        port,
        inode: u64::from(inode),
    })
}

/// `TCP_ESTABLISHED` in the kernel's TCP state numbering.
const TCP_ESTABLISHED_STATE: u8 = 1;
/// `NLM_F_REQUEST` alone: one socket by its address pair, not a dump.
const LOOKUP_REQUEST_FLAGS: u16 = 0x0001;
/// `INET_DIAG_INFO`: the attribute carrying `struct tcp_info`, asked for with bit
/// `INET_DIAG_INFO - 1` of `idiag_ext`.
const INET_DIAG_INFO: u16 = 2;
/// `INET_DIAG_NOCOOKIE`: the socket is named by its addresses alone.
const NO_COOKIE: u32 = u32::MAX;
/// Offsets in `struct tcp_info` (linux/tcp.h) of `tcpi_last_data_sent` and
/// `tcpi_last_data_recv`: milliseconds since the socket last sent, and last received, payload.
const LAST_DATA_SENT_AT: usize = 44;
const LAST_DATA_RECV_AT: usize = 52;
/// `tcpi_bytes_acked` (after the rates `tcpi_pacing_rate` and `tcpi_max_pacing_rate`).
const BYTES_ACKED_AT: usize = 120;
/// Offsets in `struct inet_diag_msg` of `idiag_rqueue` (then `idiag_wqueue`) and
/// `idiag_inode`.
const RQUEUE_AT: usize = 4 + SOCKID_LEN + 4;
const INODE_AT: usize = 4 + SOCKID_LEN + 16;

/// One established TCP socket, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Established {
    /// `/proc/<pid>/fd/*` links to `socket:[inode]`.
    pub inode: u64,
    /// Bytes received and not yet read by the socket's owner.
    pub unread: u32,
    /// Bytes written by the socket's owner and not yet acknowledged by the peer.
    pub unacked: u32,
    /// Milliseconds since the socket last sent payload.
    pub last_sent_ms: u32,
    /// Milliseconds since the socket last received payload.
    pub last_received_ms: u32,
    /// Payload bytes the peer has acknowledged (`tcpi_bytes_acked`, Linux ≥ 4.1): with
    /// [`Established::unacked`], every byte ever written to the socket.
    pub bytes_acked: Option<u64>,
}

/// The request for the one TCP socket whose local address is `local` and whose peer is
/// `remote`, with its `tcp_info`. Both addresses must be of one family (map IPv4 into IPv6
/// to ask an IPv6 socket about an IPv4 peer).
#[must_use]
pub fn encode_lookup_request(
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
    sequence: u32,
) -> Vec<u8> {
    let family = if local.is_ipv4() { AF_INET } else { AF_INET6 };
    let addr = |a: std::net::SocketAddr| -> [u8; 16] {
        match a.ip() {
            IpAddr::V4(v4) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&v4.octets());
                b
            }
            IpAddr::V6(v6) => v6.octets(),
        }
    };
    let mut out = request_header(LOOKUP_REQUEST_FLAGS, sequence);
    out.extend_from_slice(&[family, IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0]);
    out.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    out.extend_from_slice(&local.port().to_be_bytes());
    out.extend_from_slice(&remote.port().to_be_bytes());
    out.extend_from_slice(&addr(local));
    out.extend_from_slice(&addr(remote));
    out.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    out.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    out.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    out
}

/// Decodes the answer to [`encode_lookup_request`]: the socket, or `None` when the kernel has
/// no such socket (`ENOENT`).
///
/// # Errors
/// A truncated answer, one without `tcp_info`, or another refusal.
pub fn parse_lookup_answer(buf: &[u8]) -> Result<Option<Established>, AnswerError> {
    let body = match super::netlink::first_message(buf) {
        Err(AnswerError::Kernel(ENOENT)) => return Ok(None),
        Ok((SOCK_DIAG_BY_FAMILY, body)) => body,
        Ok(_) => return Err(AnswerError::Truncated("answer type")),
        Err(e) => return Err(e),
    };
    let msg = body
        .get(..MESSAGE_LEN)
        .ok_or(AnswerError::Truncated("inet_diag_msg"))?;
    // The kernel's lookup falls back to a listening socket on the local address: only an
    // established socket is the one asked for.
    if array_at::<1>(msg, 1) != Some([TCP_ESTABLISHED_STATE]) {
        return Ok(None);
    }
    let unread = u32_at(msg, RQUEUE_AT).ok_or(AnswerError::Truncated("inet_diag_msg"))?;
    let unacked = u32_at(msg, RQUEUE_AT + 4).ok_or(AnswerError::Truncated("inet_diag_msg"))?;
    let inode = u32_at(msg, INODE_AT).ok_or(AnswerError::Truncated("inet_diag_msg"))?;
    let data = super::netlink::attr(body.get(MESSAGE_LEN..).unwrap_or_default(), INET_DIAG_INFO)?
        .ok_or(AnswerError::Truncated("INET_DIAG_INFO"))?;
    let info = |at| u32_at(data, at).ok_or(AnswerError::Truncated("tcp_info"));
    Ok(Some(Established {
        inode: u64::from(inode),
        unread,
        unacked,
        last_sent_ms: info(LAST_DATA_SENT_AT)?,
        last_received_ms: info(LAST_DATA_RECV_AT)?,
        bytes_acked: array_at(data, BYTES_ACKED_AT).map(u64::from_ne_bytes),
    }))
}

/// The TCP socket of this host whose local address is `local` and whose peer is `remote`
/// (an IPv4 pair is also looked up as IPv4-mapped IPv6, for a dual-stack listener), or
/// `None` when there is none. One netlink round trip: no table is walked.
///
/// # Errors
/// The netlink socket's error, or an answer that does not decode.
pub fn established_socket(
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> std::io::Result<Option<Established>> {
    let found = lookup(local, remote)?;
    if found.is_some() {
        return Ok(found);
    }
    let mapped = |a: std::net::SocketAddr| match a.ip() {
        IpAddr::V4(v4) => Some(std::net::SocketAddr::new(
            IpAddr::V6(v4.to_ipv6_mapped()),
            a.port(),
        )),
        IpAddr::V6(_) => None,
    };
    match (mapped(local), mapped(remote)) {
        (Some(l), Some(r)) => lookup(l, r),
        _ => Ok(None),
    }
}

fn lookup(
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> std::io::Result<Option<Established>> {
    let answer = super::netlink::ask_once(
        nix::sys::socket::SockProtocol::NetlinkSockDiag,
        &encode_lookup_request(local, remote, 1),
    )?;
    parse_lookup_answer(&answer).map_err(std::io::Error::other)
}

/// Most answer bytes read for one family: a relay host listens on tens of sockets (72 bytes
/// each), not thousands.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Every listening TCP socket of `family`, asked of the kernel ([`ask`]).
///
/// # Errors
/// The socket's error (no netlink, a sandbox that forbids it), the kernel's refusal, or an
/// answer that does not decode or does not end.
pub fn listening_sockets(family: u8) -> std::io::Result<Vec<Listening>> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd as _;

    let fd = ask(
        nix::sys::socket::SockProtocol::NetlinkSockDiag,
        &encode_listen_dump_request(family, 1),
    )?;
    let mut sockets = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    let mut read = 0usize;
    loop {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        read += n;
        if n == 0 || read > MAX_ANSWER_BYTES {
            return Err(std::io::Error::other("sock_diag answer did not end"));
        }
        let part =
            parse_dump_part(buf.get(..n).unwrap_or_default()).map_err(std::io::Error::other)?;
        sockets.extend(part.sockets);
        if part.done {
            return Ok(sockets);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `inet_diag_msg` answer as the kernel writes it (host byte order for the header and
    /// inode; network order for the port; the address as bytes).
    fn message(family: u8, ip: &[u8], port: u16, inode: u32) -> Vec<u8> {
        let mut m = Vec::new();
        let len = (NLMSG_HEADER_LEN + MESSAGE_LEN) as u32;
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        m.extend_from_slice(&1u32.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(&[family, TCP_LISTEN_STATE as u8, 0, 0]);
        m.extend_from_slice(&port.to_be_bytes());
        m.extend_from_slice(&[0, 0]); // dport
        let mut src = [0u8; 16];
        src[..ip.len()].copy_from_slice(ip);
        m.extend_from_slice(&src);
        m.extend_from_slice(&[0u8; 16 + 4 + 8]); // dst, interface, cookie
        m.extend_from_slice(&[0u8; 16]); // expires, rqueue, wqueue, uid
        m.extend_from_slice(&inode.to_ne_bytes());
        m
    }

    fn done() -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&[0u8; 8]);
        m.extend_from_slice(&0i32.to_ne_bytes());
        m
    }

    #[test]
    fn encodes_a_dump_of_listening_tcp_sockets() {
        let r = encode_listen_dump_request(AF_INET6, 7);
        assert_eq!(r.len(), 72);
        assert_eq!(u32_at(&r, 0), Some(72));
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), SOCK_DIAG_BY_FAMILY);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), 0x0301);
        assert_eq!(u32_at(&r, 8), Some(7));
        assert_eq!(&r[16..20], &[AF_INET6, IPPROTO_TCP, 0, 0]);
        assert_eq!(u32_at(&r, 20), Some(1 << 10));
        assert!(r[24..].iter().all(|b| *b == 0));
    }

    #[test]
    fn decodes_sockets_of_both_families_and_the_end() {
        let mut buf = message(AF_INET, &[127, 0, 0, 1], 13306, 41001);
        let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets();
        buf.extend(message(AF_INET6, &mapped, 3306, 42002));
        buf.extend(done());
        let part = parse_dump_part(&buf).unwrap();
        assert!(part.done);
        assert_eq!(
            part.sockets,
            [
                Listening {
                    ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                    port: 13306,
                    inode: 41001
                },
                Listening {
                    ip: IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
                    port: 3306,
                    inode: 42002
                },
            ]
        );
        // Without NLMSG_DONE the dump goes on in the next buffer.
        assert!(
            !parse_dump_part(&message(AF_INET, &[0; 4], 1, 1))
                .unwrap()
                .done
        );
    }

    #[test]
    fn decodes_the_kernels_refusal() {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&[0u8; 8]);
        m.extend_from_slice(&(-1i32).to_ne_bytes()); // EPERM
        m.extend_from_slice(&[0u8; 16]);
        assert_eq!(parse_dump_part(&m), Err(AnswerError::Kernel(1)));
    }

    #[test]
    fn rejects_every_truncated_prefix_of_a_message() {
        let whole = message(AF_INET, &[127, 0, 0, 1], 13306, 41001);
        for n in 1..whole.len() {
            assert!(
                parse_dump_part(&whole[..n]).is_err(),
                "a {n}-byte prefix decoded"
            );
        }
        // A length below the header's own size cannot loop forever.
        let mut zero = whole.clone();
        zero[..4].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(
            parse_dump_part(&zero),
            Err(AnswerError::Truncated("nlmsg_len"))
        );
    }

    #[test]
    fn the_kernel_lists_a_listener_of_this_process_with_its_inode() {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", listener.as_raw_fd()))
            .unwrap()
            .ino();
        let sockets = listening_sockets(AF_INET).unwrap();
        assert!(
            sockets.contains(&Listening {
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port,
                inode
            }),
            "{sockets:?}"
        );
        // (Not asserted: that it is gone once dropped. Another test of this process may fork
        // while it is open, and the child holds it until its exec.)
    }

    /// The answer to a lookup: `inet_diag_msg` with `state`, 3 unread and 5 unacknowledged
    /// bytes, inode 777, then an `INET_DIAG_INFO` attribute with `tcp_info`'s last data sent
    /// 1,500 ms and received 2,500 ms ago (another attribute before it, to be skipped).
    fn lookup_answer(state: u8) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&[AF_INET, state, 0, 0]);
        body.extend_from_slice(&[0u8; SOCKID_LEN]);
        body.extend_from_slice(&0u32.to_ne_bytes()); // expires
        body.extend_from_slice(&3u32.to_ne_bytes());
        body.extend_from_slice(&5u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes()); // uid
        body.extend_from_slice(&777u32.to_ne_bytes());
        // INET_DIAG_MEMINFO (1), 16 bytes of data.
        body.extend_from_slice(&20u16.to_ne_bytes());
        body.extend_from_slice(&1u16.to_ne_bytes());
        body.extend_from_slice(&[0u8; 16]);
        let mut info = vec![0u8; 232];
        info[LAST_DATA_SENT_AT..LAST_DATA_SENT_AT + 4].copy_from_slice(&1500u32.to_ne_bytes());
        info[LAST_DATA_RECV_AT..LAST_DATA_RECV_AT + 4].copy_from_slice(&2500u32.to_ne_bytes());
        info[BYTES_ACKED_AT..BYTES_ACKED_AT + 8].copy_from_slice(&123_456u64.to_ne_bytes());
        body.extend_from_slice(&(4 + info.len() as u16).to_ne_bytes());
        body.extend_from_slice(&INET_DIAG_INFO.to_ne_bytes());
        body.extend_from_slice(&info);
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HEADER_LEN + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn encodes_a_lookup_by_address_pair_with_tcp_info() {
        let r = encode_lookup_request(
            "127.0.0.1:3306".parse().unwrap(),
            "10.0.0.9:40000".parse().unwrap(),
            9,
        );
        assert_eq!(r.len(), 72);
        assert_eq!(
            u16::from_ne_bytes([r[6], r[7]]),
            0x0001,
            "a request, not a dump"
        );
        assert_eq!(&r[16..20], &[AF_INET, IPPROTO_TCP, 0x02, 0]);
        assert_eq!(u32_at(&r, 20), Some(u32::MAX));
        assert_eq!(
            &r[24..28],
            &[0x0c, 0xea, 0x9c, 0x40],
            "ports, network order"
        );
        assert_eq!(&r[28..32], &[127, 0, 0, 1]);
        assert_eq!(&r[44..48], &[10, 0, 0, 9]);
        assert_eq!(&r[64..72], &[0xff; 8], "no cookie");
    }

    #[test]
    fn decodes_a_lookup_answer() {
        assert_eq!(
            parse_lookup_answer(&lookup_answer(1)),
            Ok(Some(Established {
                inode: 777,
                unread: 3,
                unacked: 5,
                last_sent_ms: 1500,
                last_received_ms: 2500,
                bytes_acked: Some(123_456),
            }))
        );
        // The kernel's fallback to the listening socket is not the socket asked for.
        assert_eq!(
            parse_lookup_answer(&lookup_answer(TCP_LISTEN_STATE as u8)),
            Ok(None)
        );
        let mut enoent = done();
        enoent[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        enoent[16..20].copy_from_slice(&(-2i32).to_ne_bytes());
        assert_eq!(parse_lookup_answer(&enoent), Ok(None));
        enoent[16..20].copy_from_slice(&(-13i32).to_ne_bytes());
        assert_eq!(parse_lookup_answer(&enoent), Err(AnswerError::Kernel(13)));
        // Every truncation is an error or nothing, never a panic or a wrong socket.
        let whole = lookup_answer(1);
        for end in 0..whole.len() {
            let mut cut = whole[..end].to_vec();
            if cut.len() >= 4 {
                cut[..4].copy_from_slice(&(end as u32).to_ne_bytes());
            }
            assert!(parse_lookup_answer(&cut).is_err(), "cut at {end}");
        }
    }
}
