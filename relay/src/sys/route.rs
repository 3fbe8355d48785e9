//! Which interface the kernel sends a connection's segments out of: `RTM_GETROUTE` on a
//! `NETLINK_ROUTE` socket, as `ip route get <peer> from <own>` asks it (the output lookup,
//! with the source address, so that policy routing by source is followed). The splice below
//! TCP sends a rewritten segment out of that interface, and expects the peer's segments on
//! it (routing between the relay and a peer is symmetric).
//!
//! Also what kind of link an interface is (`RTM_GETLINK`): the splice reads segments at a
//! fixed offset behind an Ethernet header.
//!
//! The codec is pure (fixtures below); [`toward`] and [`is_ethernet`] are one netlink round
//! trip each.

use std::net::Ipv4Addr;

use super::netlink::{self, AnswerError, NLM_F_REQUEST};

/// `RTM_NEWLINK`, `RTM_GETLINK` (linux/rtnetlink.h).
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// `ARPHRD_ETHER` (linux/if_arp.h).
const ARPHRD_ETHER: u16 = 1;
/// `RTM_NEWROUTE`, `RTM_GETROUTE` (linux/rtnetlink.h).
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
/// `RTA_DST`, `RTA_SRC`, `RTA_OIF`, `RTA_GATEWAY`.
const RTA_DST: u16 = 1;
const RTA_SRC: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
/// `RTN_UNICAST`, `RTN_LOCAL`: a route's type.
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
/// `struct rtmsg`.
const RTMSG_LEN: usize = 12;
/// `AF_INET`.
const AF_INET: u8 = 2;

/// Where the kernel sends segments for a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The peer is this host: the segments go through the loopback interface.
    Local,
    /// Out of the interface of this index, toward another host, through this next hop (a
    /// gateway, or the peer itself on the interface's link).
    Out(u32, Ipv4Addr),
}

/// The question for the route from `own` to `peer`.
#[must_use]
pub fn encode_request(own: Ipv4Addr, peer: Ipv4Addr, sequence: u32) -> Vec<u8> {
    let mut body = vec![AF_INET, 32, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    netlink::put_attr(&mut body, RTA_DST, &peer.octets());
    netlink::put_attr(&mut body, RTA_SRC, &own.octets());
    netlink::request(RTM_GETROUTE, NLM_F_REQUEST, sequence, &body)
}

/// Decodes the kernel's answer to [`encode_request`] for `peer`.
///
/// # Errors
/// The kernel's refusal (no route: `ENETUNREACH`), a truncated answer, or a route that is
/// neither to another host nor to this one (a blackhole, a prohibit).
pub fn parse_answer(buf: &[u8], peer: Ipv4Addr) -> Result<Route, AnswerError> {
    let (kind, body) = netlink::first_message(buf)?;
    if kind != RTM_NEWROUTE {
        return Err(AnswerError::Truncated("answer type"));
    }
    let rtmsg = body
        .get(..RTMSG_LEN)
        .ok_or(AnswerError::Truncated("rtmsg"))?;
    match rtmsg.get(7).copied() {
        Some(RTN_LOCAL) => Ok(Route::Local),
        Some(RTN_UNICAST) => {
            let attrs = body.get(RTMSG_LEN..).unwrap_or_default();
            let oif = netlink::attr(attrs, RTA_OIF)?
                .and_then(|data| netlink::u32_at(data, 0))
                .ok_or(AnswerError::Truncated("RTA_OIF"))?;
            let gateway = match netlink::attr(attrs, RTA_GATEWAY)? {
                Some(data) => Some(
                    netlink::array_at::<4>(data, 0).ok_or(AnswerError::Truncated("RTA_GATEWAY"))?,
                ),
                None => None,
            };
            Ok(Route::Out(oif, gateway.map_or(peer, Ipv4Addr::from)))
        }
        _ => Err(AnswerError::Truncated("a unicast or local route")),
    }
}

/// The route from `own` (an address of this host) to `peer`, asked of the kernel.
///
/// # Errors
/// The netlink socket's error, or the answer's ([`parse_answer`]).
pub fn toward(own: Ipv4Addr, peer: Ipv4Addr) -> std::io::Result<Route> {
    let answer = netlink::ask_once(
        nix::sys::socket::SockProtocol::NetlinkRoute,
        &encode_request(own, peer, 1),
    )?;
    parse_answer(&answer, peer).map_err(std::io::Error::other)
}

/// The question for the link of index `ifindex`.
#[must_use]
pub fn encode_link_request(ifindex: u32, sequence: u32) -> Vec<u8> {
    let mut body = vec![0; IFINFOMSG_LEN];
    if let Some(index) = body.get_mut(4..8) {
        index.copy_from_slice(&ifindex.to_ne_bytes());
    }
    netlink::request(RTM_GETLINK, NLM_F_REQUEST, sequence, &body)
}

/// Decodes the kernel's answer to [`encode_link_request`]: whether the link is Ethernet.
///
/// # Errors
/// The kernel's refusal (no such link), or a truncated answer.
pub fn parse_link_answer(buf: &[u8]) -> Result<bool, AnswerError> {
    let (kind, body) = netlink::first_message(buf)?;
    if kind != RTM_NEWLINK {
        return Err(AnswerError::Truncated("answer type"));
    }
    let link_type = netlink::array_at(body, 2)
        .map(u16::from_ne_bytes)
        .filter(|_| body.len() >= IFINFOMSG_LEN)
        .ok_or(AnswerError::Truncated("ifinfomsg"))?;
    Ok(link_type == ARPHRD_ETHER)
}

/// Whether the interface of index `ifindex` is an Ethernet link (not a tunnel such as
/// WireGuard's, whose packets have no link-layer header), asked of the kernel.
///
/// # Errors
/// The netlink socket's error, or the answer's ([`parse_link_answer`]).
pub fn is_ethernet(ifindex: u32) -> std::io::Result<bool> {
    let answer = netlink::ask_once(
        nix::sys::socket::SockProtocol::NetlinkRoute,
        &encode_link_request(ifindex, 1),
    )?;
    parse_link_answer(&answer).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `RTM_NEWROUTE` answer as the kernel writes it for `ip route get`: the rtmsg, then
    /// its table, destination, output interface, source and preferred source.
    fn answer(kind: u8, oif: Option<u32>, gateway: Option<[u8; 4]>) -> Vec<u8> {
        let mut body = vec![AF_INET, 32, 32, 0, 254, 0, 0, kind, 0, 2, 0, 0];
        netlink::put_attr(&mut body, 15, &254u32.to_ne_bytes());
        netlink::put_attr(&mut body, RTA_DST, &[10, 202, 7, 2]);
        if let Some(gateway) = gateway {
            netlink::put_attr(&mut body, RTA_GATEWAY, &gateway);
        }
        if let Some(oif) = oif {
            netlink::put_attr(&mut body, RTA_OIF, &oif.to_ne_bytes());
        }
        netlink::put_attr(&mut body, RTA_SRC, &[10, 202, 7, 1]);
        netlink::request(RTM_NEWROUTE, 0, 1, &body)
    }

    #[test]
    fn encodes_an_output_lookup_with_the_source() {
        let req = encode_request(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 9);
        assert_eq!(req.len(), 16 + 12 + 8 + 8);
        assert_eq!(&req[4..6], &RTM_GETROUTE.to_ne_bytes());
        assert_eq!(&req[16..19], &[AF_INET, 32, 32]);
        assert_eq!(&req[28..36], &[8, 0, 1, 0, 10, 0, 0, 2]);
        assert_eq!(&req[36..44], &[8, 0, 2, 0, 10, 0, 0, 1]);
    }

    #[test]
    fn decodes_a_route_out_of_an_interface_and_one_to_this_host() {
        let peer = Ipv4Addr::new(10, 202, 7, 2);
        // On the interface's link, the next hop is the peer; elsewhere, the gateway.
        assert_eq!(
            parse_answer(&answer(RTN_UNICAST, Some(3), None), peer),
            Ok(Route::Out(3, peer))
        );
        assert_eq!(
            parse_answer(&answer(RTN_UNICAST, Some(3), Some([10, 0, 0, 1])), peer),
            Ok(Route::Out(3, Ipv4Addr::new(10, 0, 0, 1)))
        );
        assert_eq!(
            parse_answer(&answer(RTN_LOCAL, Some(1), None), peer),
            Ok(Route::Local)
        );
        assert!(parse_answer(&answer(RTN_UNICAST, None, None), peer).is_err());
        // A blackhole route (RTN_BLACKHOLE) is no way to the peer.
        assert!(parse_answer(&answer(6, Some(3), None), peer).is_err());
    }

    #[test]
    fn every_truncated_prefix_is_an_error() {
        let full = answer(RTN_UNICAST, Some(3), Some([10, 0, 0, 1]));
        for cut in 0..full.len() {
            assert!(
                parse_answer(&full[..cut], Ipv4Addr::LOCALHOST).is_err(),
                "{cut}"
            );
        }
    }

    #[test]
    fn decodes_a_link_s_type() {
        let link = |link_type: u16| {
            let mut body = vec![0; IFINFOMSG_LEN];
            body[2..4].copy_from_slice(&link_type.to_ne_bytes());
            netlink::put_attr(&mut body, 3, b"eth0\0");
            netlink::request(RTM_NEWLINK, 0, 1, &body)
        };
        assert_eq!(parse_link_answer(&link(ARPHRD_ETHER)), Ok(true));
        // ARPHRD_NONE: a WireGuard or tun device.
        assert_eq!(parse_link_answer(&link(0xfffe)), Ok(false));
        let full = link(ARPHRD_ETHER);
        for cut in 0..full.len() {
            assert!(parse_link_answer(&full[..cut]).is_err(), "{cut}");
        }
        let request = encode_link_request(7, 1);
        assert_eq!(&request[16 + 4..16 + 8], &7u32.to_ne_bytes());
    }

    /// The kernel's answer for this host's own loopback address.
    #[test]
    fn the_kernel_routes_loopback_locally() {
        let local = Ipv4Addr::LOCALHOST;
        assert_eq!(toward(local, local).unwrap(), Route::Local);
    }
}
