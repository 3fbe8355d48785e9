//! Whether the relay's host translates a connection's addresses (NAT) or sequence numbers:
//! one conntrack entry asked by its tuple (`IPCTNL_MSG_CT_GET` on a `NETLINK_NETFILTER`
//! socket; the kernel finds an entry by either direction's tuple). The splice below TCP keys
//! segments by the addresses on the wire and sends them out past netfilter, so a connection
//! the host translates (a Kubernetes service address, a published container port) cannot be
//! spliced there: its segments on the wire do not carry the addresses the relay's socket has.
//!
//!
//! And forgetting a connection's entry (`IPCTNL_MSG_CT_DELETE`): a connection spliced below
//! TCP across hosts goes on past the host's netfilter, so its entry falls behind; when the
//! relay takes the session back, the next segments would be out of the entry's window
//! (`ct state invalid`, which stateful firewalls drop), where a connection without an entry
//! is picked up again as established.
//!
//! The codec is pure (fixtures below); [`translated`] and [`forget`] are one netlink round
//! trip each.

use std::net::SocketAddrV4;

use super::netlink::{self, AnswerError, ENOENT, NLA_F_NESTED, NLM_F_REQUEST};

/// `(NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET`, the answer's `IPCTNL_MSG_CT_NEW`, and
/// `IPCTNL_MSG_CT_DELETE`.
const CT_GET: u16 = 0x0101;
const CT_NEW: u16 = 0x0100;
const CT_DELETE: u16 = 0x0102;
/// `NLM_F_ACK`: the kernel answers a deletion with its outcome.
const NLM_F_ACK: u16 = 0x0004;
/// `CTA_TUPLE_ORIG`, `CTA_STATUS`; in a tuple `CTA_TUPLE_IP`, `CTA_TUPLE_PROTO`; in those
/// `CTA_IP_V4_SRC`, `CTA_IP_V4_DST`, and `CTA_PROTO_NUM`, `CTA_PROTO_SRC_PORT`,
/// `CTA_PROTO_DST_PORT` (linux/netfilter/nfnetlink_conntrack.h).
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_STATUS: u16 = 3;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
/// `IPS_SRC_NAT | IPS_DST_NAT | IPS_SEQ_ADJUST` (linux/netfilter/nf_conntrack_common.h).
const TRANSLATED: u32 = (1 << 4) | (1 << 5) | (1 << 6);
/// `struct nfgenmsg`: family, version, resource id.
const NFGENMSG_LEN: usize = 4;
const AF_INET: u8 = 2;
const IPPROTO_TCP: u8 = 6;

/// The question for the entry of the connection from `from` to `to`.
#[must_use]
pub fn encode_request(from: SocketAddrV4, to: SocketAddrV4, sequence: u32) -> Vec<u8> {
    encode(CT_GET, NLM_F_REQUEST, (from, to), sequence)
}

/// The deletion of the entry of the connection from `from` to `to`.
#[must_use]
pub fn encode_delete(from: SocketAddrV4, to: SocketAddrV4, sequence: u32) -> Vec<u8> {
    encode(CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, (from, to), sequence)
}

fn encode(
    kind: u16,
    flags: u16,
    (from, to): (SocketAddrV4, SocketAddrV4),
    sequence: u32,
) -> Vec<u8> {
    let mut ip = Vec::new();
    netlink::put_attr(&mut ip, CTA_IP_V4_SRC, &from.ip().octets());
    netlink::put_attr(&mut ip, CTA_IP_V4_DST, &to.ip().octets());
    let mut proto = Vec::new();
    netlink::put_attr(&mut proto, CTA_PROTO_NUM, &[IPPROTO_TCP]);
    netlink::put_attr(&mut proto, CTA_PROTO_SRC_PORT, &from.port().to_be_bytes());
    netlink::put_attr(&mut proto, CTA_PROTO_DST_PORT, &to.port().to_be_bytes());
    let mut tuple = Vec::new();
    netlink::put_attr(&mut tuple, CTA_TUPLE_IP | NLA_F_NESTED, &ip);
    netlink::put_attr(&mut tuple, CTA_TUPLE_PROTO | NLA_F_NESTED, &proto);
    let mut body = vec![AF_INET, 0, 0, 0];
    netlink::put_attr(&mut body, CTA_TUPLE_ORIG | NLA_F_NESTED, &tuple);
    netlink::request(kind, flags, sequence, &body)
}

/// Decodes the kernel's answer to [`encode_request`]: whether the connection is translated
/// (`false` when conntrack has no entry for it: not tracked, so not translated).
///
/// # Errors
/// The kernel's refusal, or a truncated answer.
pub fn parse_answer(buf: &[u8]) -> Result<bool, AnswerError> {
    let (kind, body) = match netlink::first_message(buf) {
        Err(AnswerError::Kernel(ENOENT)) => return Ok(false),
        other => other?,
    };
    if kind != CT_NEW {
        return Err(AnswerError::Truncated("answer type"));
    }
    let attrs = body
        .get(NFGENMSG_LEN..)
        .ok_or(AnswerError::Truncated("nfgenmsg"))?;
    let status = netlink::attr(attrs, CTA_STATUS)?
        .and_then(|data| netlink::array_at(data, 0))
        .map(u32::from_be_bytes)
        .ok_or(AnswerError::Truncated("CTA_STATUS"))?;
    Ok(status & TRANSLATED != 0)
}

/// Where the kernel shows that conntrack is loaded in this network namespace.
const CONNTRACK_LOADED: &str = "/proc/sys/net/netfilter/nf_conntrack_max";

/// Whether this host translates the connection from `from` to `to`, asked of the kernel. A
/// kernel without conntrack translates nothing.
///
/// # Errors
/// The netlink socket's error or the kernel's refusal, where conntrack is loaded (then it
/// cannot be told).
pub fn translated(from: SocketAddrV4, to: SocketAddrV4) -> std::io::Result<bool> {
    let asked = netlink::ask_once(
        nix::sys::socket::SockProtocol::NetlinkNetFilter,
        &encode_request(from, to, 1),
    )
    .and_then(|answer| parse_answer(&answer).map_err(std::io::Error::other));
    unless_unloaded(asked, false)
}

/// `asked`, or `without` when it failed on a kernel where conntrack is not loaded (no entry
/// to ask about, none to forget).
fn unless_unloaded<T>(asked: std::io::Result<T>, without: T) -> std::io::Result<T> {
    match asked {
        Err(_) if !std::path::Path::new(CONNTRACK_LOADED).exists() => Ok(without),
        other => other,
    }
}

/// Forgets the entry of the connection from `from` to `to`, if conntrack has one.
///
/// # Errors
/// The netlink socket's error or the kernel's refusal, where conntrack is loaded.
pub fn forget(from: SocketAddrV4, to: SocketAddrV4) -> std::io::Result<()> {
    let asked = netlink::ask_once(
        nix::sys::socket::SockProtocol::NetlinkNetFilter,
        &encode_delete(from, to, 1),
    )
    .and_then(|answer| match netlink::first_message(&answer) {
        Ok(_) | Err(AnswerError::Kernel(ENOENT)) => Ok(()),
        Err(e) => Err(std::io::Error::other(e)),
    });
    unless_unloaded(asked, ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `IPCTNL_MSG_CT_NEW` answer as the kernel writes it: the tuples, then the status.
    fn answer(status: u32) -> Vec<u8> {
        let request = encode_request(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:3306".parse().unwrap(),
            1,
        );
        let mut body = request[16..].to_vec();
        netlink::put_attr(&mut body, CTA_STATUS, &status.to_be_bytes());
        netlink::request(CT_NEW, 0, 1, &body)
    }

    #[test]
    fn encodes_the_tuple_nested_as_the_kernel_reads_it() {
        let req = encode_request(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:3306".parse().unwrap(),
            1,
        );
        let (_, body) = netlink::first_message(&req).unwrap();
        let tuple = netlink::attr(&body[4..], CTA_TUPLE_ORIG).unwrap().unwrap();
        let ip = netlink::attr(tuple, CTA_TUPLE_IP).unwrap().unwrap();
        assert_eq!(
            netlink::attr(ip, CTA_IP_V4_DST).unwrap(),
            Some(&[10, 0, 0, 2][..])
        );
        let proto = netlink::attr(tuple, CTA_TUPLE_PROTO).unwrap().unwrap();
        assert_eq!(netlink::attr(proto, CTA_PROTO_NUM).unwrap(), Some(&[6][..]));
        assert_eq!(
            netlink::attr(proto, CTA_PROTO_SRC_PORT).unwrap(),
            Some(&5000u16.to_be_bytes()[..])
        );
    }

    #[test]
    fn a_translated_entry_says_so_and_a_missing_one_is_not_translated() {
        // IPS_CONFIRMED | IPS_SEEN_REPLY | IPS_ASSURED: tracked, not translated.
        assert_eq!(parse_answer(&answer(0b1110)), Ok(false));
        // ... | IPS_DST_NAT | IPS_DST_NAT_DONE.
        assert_eq!(parse_answer(&answer(0b1110 | 1 << 5 | 1 << 8)), Ok(true));
        let mut gone = (-ENOENT).to_ne_bytes().to_vec();
        gone.extend_from_slice(&[0; 16]);
        assert_eq!(parse_answer(&netlink::request(2, 0, 1, &gone)), Ok(false));
        let mut refused = (-1i32).to_ne_bytes().to_vec();
        refused.extend_from_slice(&[0; 16]);
        assert!(parse_answer(&netlink::request(2, 0, 1, &refused)).is_err());
    }

    #[test]
    fn every_truncated_prefix_is_an_error() {
        let full = answer(0);
        for cut in 0..full.len() {
            assert!(parse_answer(&full[..cut]).is_err(), "{cut}");
        }
    }
}
