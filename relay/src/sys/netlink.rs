//! What every netlink question of the relay shares: the message header, attributes (`struct
//! rtattr` and `struct nlattr` have one layout), the kernel's error answer, and the I/O of
//! one question on a fresh socket. The questions themselves are [`super::sock_diag`],
//! [`super::route`] and [`super::conntrack_entry`].

use nix::sys::socket::SockProtocol;

/// `NLMSG_ERROR` and `NLMSG_DONE` (linux/netlink.h).
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x0001;
/// `struct nlmsghdr`.
pub const NLMSG_HEADER_LEN: usize = 16;
/// `NLA_F_NESTED`: an attribute whose data are attributes.
pub const NLA_F_NESTED: u16 = 0x8000;
/// `ENOENT`: the kernel has no such object.
pub const ENOENT: i32 = 2;

/// Why an answer could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// A header or message shorter than its type needs.
    Truncated(&'static str),
    /// The kernel answered `NLMSG_ERROR` with this (positive) errno.
    Kernel(i32),
}

impl std::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated(what) => write!(f, "netlink answer truncated in {what}"),
            Self::Kernel(errno) => write!(f, "the kernel refused: errno {errno}"),
        }
    }
}

impl std::error::Error for AnswerError {}

/// A request: the `nlmsghdr` of a message of type `kind` whose body is `body`.
#[must_use]
pub fn request(kind: u16, flags: u16, sequence: u32, body: &[u8]) -> Vec<u8> {
    let len = NLMSG_HEADER_LEN + body.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&sequence.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel
    out.extend_from_slice(body);
    out
}

/// Appends one attribute of type `kind` holding `data`, padded to 4 bytes.
pub fn put_attr(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = u16::try_from(4 + data.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(4) * 4, 0);
}

/// The first message of an answer: its type and body. An `NLMSG_ERROR` that reports an error
/// is [`AnswerError::Kernel`].
///
/// # Errors
/// [`AnswerError`].
pub fn first_message(buf: &[u8]) -> Result<(u16, &[u8]), AnswerError> {
    let truncated = || AnswerError::Truncated("nlmsghdr");
    let len = u32_at(buf, 0).ok_or_else(truncated)? as usize;
    let kind = u16::from_ne_bytes(array_at(buf, 4).ok_or_else(truncated)?);
    let body = buf
        .get(NLMSG_HEADER_LEN..len.max(NLMSG_HEADER_LEN))
        .ok_or(AnswerError::Truncated("message"))?;
    if kind == NLMSG_ERROR {
        let errno =
            i32::from_ne_bytes(array_at(body, 0).ok_or(AnswerError::Truncated("nlmsgerr"))?);
        if errno != 0 {
            return Err(AnswerError::Kernel(-errno));
        }
    }
    Ok((kind, body))
}

/// The attributes in `buf` as (type without its flags, data), in order; a truncated one ends
/// the walk with an error.
pub fn attrs(mut buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), AnswerError>> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes(array_at(buf, 0)?));
        let kind = u16::from_ne_bytes(array_at(buf, 2)?) & !NLA_F_NESTED;
        let Some(data) = buf.get(4..len.max(4)) else {
            buf = &[];
            return Some(Err(AnswerError::Truncated("attribute")));
        };
        buf = buf.get(len.max(4).div_ceil(4) * 4..).unwrap_or_default();
        Some(Ok((kind, data)))
    })
}

/// The data of the first attribute of type `kind` in `buf`, if any.
///
/// # Errors
/// A truncated attribute before it.
pub fn attr(buf: &[u8], kind: u16) -> Result<Option<&[u8]>, AnswerError> {
    for a in attrs(buf) {
        let (k, data) = a?;
        if k == kind {
            return Ok(Some(data));
        }
    }
    Ok(None)
}

/// `N` bytes of `buf` from `at`, if it holds them.
#[must_use]
pub fn array_at<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

#[must_use]
pub fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    array_at(buf, at).map(u32::from_ne_bytes)
}

/// A fresh non-blocking netlink socket of `protocol` that has sent `request`. The kernel
/// answers while it handles the send, so the answer is there to read at once (or, for a
/// dump, produced as it is read): an answer that is not there is an error, never a wait.
///
/// # Errors
/// The socket's error (no such netlink family, a sandbox that forbids it).
pub fn ask(protocol: SockProtocol, request: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockType, sendto, socket,
    };
    use std::os::fd::AsRawFd as _;

    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        protocol,
    )?;
    sendto(
        fd.as_raw_fd(),
        request,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    Ok(fd)
}

/// [`ask`], then the kernel's one answer (at most 4 KB: one message).
///
/// # Errors
/// [`ask`]'s, or the read's.
pub fn ask_once(protocol: SockProtocol, request: &[u8]) -> std::io::Result<Vec<u8>> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd as _;

    let fd = ask(protocol, request)?;
    let mut buf = vec![0u8; 4096];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_their_padding() {
        let mut buf = Vec::new();
        put_attr(&mut buf, 1, &[7]);
        put_attr(&mut buf, 2 | NLA_F_NESTED, &[1, 2, 3, 4]);
        assert_eq!(buf.len(), 8 + 8);
        let all: Vec<_> = attrs(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(all, vec![(1, &[7][..]), (2, &[1, 2, 3, 4][..])]);
        assert_eq!(attr(&buf, 2).unwrap(), Some(&[1, 2, 3, 4][..]));
        assert_eq!(attr(&buf, 3).unwrap(), None);
    }

    #[test]
    fn a_truncated_attribute_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        put_attr(&mut buf, 1, &[1, 2, 3, 4, 5, 6, 7, 8]);
        for cut in 1..buf.len() {
            let walked: Vec<_> = attrs(&buf[..cut]).collect();
            assert!(
                walked.iter().all(|a| a.is_err()) || walked.is_empty(),
                "{cut}"
            );
        }
    }

    #[test]
    fn the_kernels_error_answer_is_its_errno() {
        let mut body = (-ENOENT).to_ne_bytes().to_vec();
        body.extend_from_slice(&[0; 16]);
        let answer = request(NLMSG_ERROR, 0, 1, &body);
        assert_eq!(first_message(&answer), Err(AnswerError::Kernel(ENOENT)));
        for cut in 0..answer.len() {
            assert!(first_message(&answer[..cut]).is_err(), "{cut}");
        }
    }
}
