//! Which process listens on the compute's address (Linux `/proc`).
//!
//! A greeting on the compute address proves that *something* serves MySQL there, not that it is
//! the compute the process driver started: a local process that bound the port first would be
//! handed scramble A, the client's answer and the client's queries. So the process
//! driver trusts readiness only when the listening socket belongs to its child (or one of the
//! child's children). The listening sockets come from the kernel's `sock_diag` netlink
//! interface ([`super::sock_diag`]: only the listening table is walked, microseconds), or from
//! `/proc/net/tcp{,6}` where netlink is not available (a read walks every socket hash bucket:
//! milliseconds on a large machine, on every wake). Parsing is pure ([`listening_inodes`],
//! [`serving`]); reading the kernel is at the edge ([`owned_by`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::sock_diag::{self, Listening};

/// `st` of a listening socket in `/proc/net/tcp{,6}`.
const TCP_LISTEN: &str = "0A";

/// The inodes of the sockets listening on `addr` (or on the wildcard address of its port) in
/// one `/proc/net/tcp` or `/proc/net/tcp6` table.
#[must_use]
pub fn listening_inodes(table: &str, addr: SocketAddr) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            if *state != TCP_LISTEN {
                return None;
            }
            let (ip, port) = local.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let ip = parse_ip(ip)?;
            let serves = port == addr.port() && (ip.is_unspecified() || same_ip(ip, addr.ip()));
            serves.then(|| inode.parse().ok()).flatten()
        })
        .collect()
}

/// The inodes of the listening sockets of `sockets` that serve `addr`: bound to it, or to the
/// wildcard address of its port.
#[must_use]
pub fn serving(sockets: &[Listening], addr: SocketAddr) -> Vec<u64> {
    sockets
        .iter()
        .filter(|s| s.port == addr.port() && (s.ip.is_unspecified() || same_ip(s.ip, addr.ip())))
        .map(|s| s.inode)
        .collect()
}

/// The kernel prints each 32-bit word of the address in the host's byte order.
fn parse_ip(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
        let text = hex.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(text, 16).ok()?.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

fn same_ip(listening: IpAddr, wanted: IpAddr) -> bool {
    match (listening, wanted) {
        (IpAddr::V6(l), IpAddr::V4(w)) => l.to_ipv4_mapped() == Some(w),
        (l, w) => l == w,
    }
}

/// Whether the socket listening on `addr` belongs to process `pid` or one of its children.
/// `None` when `/proc` cannot tell (not Linux, or no listening socket found at all).
#[must_use]
pub fn owned_by(pid: u32, addr: SocketAddr) -> Option<bool> {
    let inodes = listening_on(addr);
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut pids = vec![pid];
    pids.extend(children(pid));
    Some(pids.iter().any(|p| holds_any(*p, &wanted)))
}

/// The inodes of the sockets listening on `addr`, from `sock_diag`, else from `/proc`.
fn listening_on(addr: SocketAddr) -> Vec<u64> {
    let mut inodes = Vec::new();
    for (family, table) in [
        (sock_diag::AF_INET, "/proc/net/tcp"),
        (sock_diag::AF_INET6, "/proc/net/tcp6"),
    ] {
        match sock_diag::listening_sockets(family) {
            Ok(sockets) => inodes.extend(serving(&sockets, addr)),
            Err(e) => {
                tracing::debug!(error = %e, table, "sock_diag unavailable; reading /proc");
                if let Ok(text) = std::fs::read_to_string(table) {
                    inodes.extend(listening_inodes(&text, addr));
                }
            }
        }
    }
    inodes
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn holds_any(pid: u32, sockets: &[String]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from /proc/net/tcp and /proc/net/tcp6 on x86_64 (little-endian words).
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:3307 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41001 1 0000000000000000 100 0 0 10 0
   1: 00000000:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41002 1 0000000000000000 100 0 0 10 0
   2: 0100007F:3307 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 41003 1 0000000000000000 20 4 30 10 -1
   3: 0500007F:3307 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41004 1 0000000000000000 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0CEA 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42001 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:3307 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42002 1 0000000000000000 100 0 0 10 0
";

    #[test]
    #[cfg(target_endian = "little")]
    fn finds_the_listening_sockets_of_an_address() {
        let compute: SocketAddr = "127.0.0.1:13063".parse().unwrap();
        // 0x3307 = 13063: the exact address; not the established connection, not 127.0.0.5.
        assert_eq!(listening_inodes(TCP, compute), vec![41001]);
        // 0x0CEA = 3306 on 0.0.0.0 serves 127.0.0.1:3306.
        let wildcard: SocketAddr = "127.0.0.1:3306".parse().unwrap();
        assert_eq!(listening_inodes(TCP, wildcard), vec![41002]);
        // IPv6: the wildcard, and a v4-mapped 127.0.0.1.
        assert_eq!(listening_inodes(TCP6, wildcard), vec![42001]);
        assert_eq!(listening_inodes(TCP6, compute), vec![42002]);
        assert!(listening_inodes("garbage\nmore garbage", compute).is_empty());
    }

    #[test]
    fn finds_the_sockets_serving_an_address_in_a_sock_diag_dump() {
        let at = |ip: &str, port, inode| Listening {
            ip: ip.parse().unwrap(),
            port,
            inode,
        };
        let dump = [
            at("127.0.0.1", 13063, 1),
            at("0.0.0.0", 3306, 2),
            at("127.0.0.5", 13063, 3),
            at("::", 3306, 4),
            at("::ffff:127.0.0.1", 13063, 5),
        ];
        assert_eq!(serving(&dump, "127.0.0.1:13063".parse().unwrap()), [1, 5]);
        assert_eq!(serving(&dump, "127.0.0.1:3306".parse().unwrap()), [2, 4]);
        assert!(serving(&dump, "127.0.0.1:1".parse().unwrap()).is_empty());
    }

    #[test]
    fn this_process_owns_its_listener_and_not_another() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert_eq!(owned_by(std::process::id(), addr), Some(true));
        // Another process (sockets are close-on-exec, so a child does not inherit it).
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert_eq!(owned_by(other.id(), addr), Some(false));
        other.kill().unwrap();
        other.wait().unwrap();
        drop(listener);
        assert_eq!(owned_by(std::process::id(), addr), None);
    }
}
