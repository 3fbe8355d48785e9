//! PROXY protocol v2 headers toward the compute (`proxy_protocol = true`), so a server that
//! accepts them from the relay (MariaDB's `proxy_protocol_networks`) sees the client's address
//! in grants, `USER()` and the process list. Pure encoding; the callers write the bytes first
//! on a new compute connection.

use std::net::SocketAddr;

/// The 12-byte v2 signature.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// A `PROXY` header: the connection was made by `client` to `relay` (the address the client
/// connected to).
#[must_use]
pub fn proxy_header(client: SocketAddr, relay: SocketAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(52);
    out.extend_from_slice(&SIGNATURE);
    out.push(0x21); // version 2, command PROXY
    match (client, relay) {
        (SocketAddr::V4(c), SocketAddr::V4(r)) => {
            out.push(0x11); // AF_INET, STREAM
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&c.ip().octets());
            out.extend_from_slice(&r.ip().octets());
            out.extend_from_slice(&c.port().to_be_bytes());
            out.extend_from_slice(&r.port().to_be_bytes());
        }
        (c, r) => {
            let v6 = |a: SocketAddr| match a {
                SocketAddr::V4(a) => a.ip().to_ipv6_mapped().octets(),
                SocketAddr::V6(a) => a.ip().octets(),
            };
            out.push(0x21); // AF_INET6, STREAM
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(c));
            out.extend_from_slice(&v6(r));
            out.extend_from_slice(&c.port().to_be_bytes());
            out.extend_from_slice(&r.port().to_be_bytes());
        }
    }
    out
}

/// A `LOCAL` header: a connection of the relay's own (readiness probes), which the server
/// treats as coming from the relay itself.
#[must_use]
pub fn local_header() -> Vec<u8> {
    let mut out = SIGNATURE.to_vec();
    out.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_ipv4_proxy_header_byte_for_byte() {
        let h = proxy_header(
            "192.0.2.7:51234".parse().unwrap(),
            "10.0.0.1:3306".parse().unwrap(),
        );
        let mut expected = SIGNATURE.to_vec();
        expected.extend_from_slice(&[0x21, 0x11, 0x00, 0x0C, 192, 0, 2, 7, 10, 0, 0, 1]);
        expected.extend_from_slice(&51234u16.to_be_bytes());
        expected.extend_from_slice(&3306u16.to_be_bytes());
        assert_eq!(h, expected);
    }

    #[test]
    fn encodes_ipv6_and_mixed_families_as_ipv6() {
        let h = proxy_header(
            "[2001:db8::1]:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0x00, 36]);
        assert_eq!(
            &h[32..48],
            &"::ffff:127.0.0.1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
    }

    #[test]
    fn local_header_has_no_addresses() {
        assert_eq!(local_header().len(), 16);
        assert_eq!(local_header()[12..], [0x20, 0, 0, 0]);
    }
}
