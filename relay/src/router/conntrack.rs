//! Counting the connections the kernel route sent to a compute, from the connection tracking
//! table: the relay no longer sees their bytes, but conntrack holds one entry per connection
//! with its original destination (the instance's listen address) and its reply source (the
//! compute, because of the DNAT). Pure parsing here; `kernel` reads the table.
//!
//! Both sources share one line format: `/proc/net/nf_conntrack` and `conntrack -L -o
//! extended` print
//! `ipv4 2 tcp 6 431999 ESTABLISHED src=C dst=L sport=c dport=l src=K dst=C sport=k dport=c
//! [ASSURED] mark=0 use=1`, where the first `src/dst/sport/dport` group is the original
//! direction and the second the reply direction.
//!
//! A connection counts as activity only once its client has sent a byte of payload, which the
//! relay's table marks on the connection (`mark` has [`SPOKE_MARK`], see `nft`): a bare TCP
//! connect, or one that never gets past the compute's greeting, is open ([`RoutedCount::open`],
//! which a pause waits for) but not active ([`RoutedCount::spoke`], which holds the instance
//! awake), as on the pump route.

use std::net::{IpAddr, SocketAddr};

use super::nft::{BUSY_MARK, Dnat, SPOKE_MARK};

/// One TCP entry of the table, reduced to what the count needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The TCP state (`ESTABLISHED`, `TIME_WAIT`, ...).
    pub state: &'a str,
    /// The client (after masquerading, the compute sees the relay's host instead).
    pub original_src: SocketAddr,
    /// Where the client sent its SYN.
    pub original_dst: SocketAddr,
    /// Who answers (after DNAT: the compute).
    pub reply_src: SocketAddr,
    /// The connection's mark (`mark=`; 0 when the line has none).
    pub mark: u32,
}

/// Parses one line; `None` for anything that is not a complete TCP entry.
#[must_use]
pub fn parse_line(line: &str) -> Option<Entry<'_>> {
    let mut words = line.split_whitespace().peekable();
    // `ipv4 2` (the layer-3 name and number) comes first in both sources' extended format.
    if words.peek().is_some_and(|w| w.starts_with("ipv")) {
        words.nth(1)?;
    }
    if words.next()? != "tcp" {
        return None;
    }
    // Protocol number, then the seconds left.
    words.nth(1)?;
    let state = words.next()?;
    let mut src = Vec::with_capacity(2);
    let mut dst = Vec::with_capacity(2);
    let mut sport = Vec::with_capacity(2);
    let mut dport = Vec::with_capacity(2);
    let mut mark = 0;
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        match key {
            "src" => src.push(value.parse::<IpAddr>().ok()?),
            "dst" => dst.push(value.parse::<IpAddr>().ok()?),
            "sport" => sport.push(value.parse::<u16>().ok()?),
            "dport" => dport.push(value.parse::<u16>().ok()?),
            "mark" => mark = value.parse::<u32>().ok()?,
            _ => {}
        }
    }
    Some(Entry {
        state,
        original_src: SocketAddr::new(*src.first()?, *sport.first()?),
        original_dst: SocketAddr::new(*dst.first()?, *dport.first()?),
        reply_src: SocketAddr::new(*src.get(1)?, *sport.get(1)?),
        mark,
    })
}

/// TCP states of a connection whose session is open: being set up or established. Once either
/// side has closed (`FIN_WAIT`, `CLOSE_WAIT`, `LAST_ACK`, `TIME_WAIT`, `CLOSE`) the session is
/// over, as it is on the pump route when the pump sees the first close.
const OPEN_STATES: [&str; 4] = ["SYN_SENT", "SYN_RECV", "ESTABLISHED", "SYN_SENT2"];

/// Whether `entry` is an open connection the kernel route sent from `route.listen` to
/// `route.compute`. A wildcard listen address matches every destination address (the rule
/// matched any local address); the reply source being the compute is what says "DNAT'd":
/// connections the relay accepted itself answer from the listen address.
#[must_use]
pub fn is_routed(entry: &Entry<'_>, route: &Dnat) -> bool {
    OPEN_STATES.contains(&entry.state)
        && entry.original_dst.port() == route.listen.port()
        && (route.listen.ip().is_unspecified() || entry.original_dst.ip() == route.listen.ip())
        && entry.reply_src == route.compute
}

/// The connections the kernel route sent to a compute that are open now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutedCount {
    /// Every open one, bare connects included: a pause must not cut them.
    pub open: usize,
    /// Those whose client has sent payload: the instance's activity.
    pub spoke: usize,
    /// Of those, the ones whose client sent payload last ([`BUSY_MARK`]): a command is
    /// outstanding.
    pub busy: usize,
    /// The ones that spoke, each once.
    pub sessions: Vec<RoutedSession>,
}

/// One routed connection whose client has spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutedSession {
    /// The client's address as conntrack has it (what a compute on this host sees as its
    /// peer).
    pub client: SocketAddr,
    /// The compute's address.
    pub compute: SocketAddr,
    /// A command is outstanding ([`BUSY_MARK`]).
    pub busy: bool,
}

/// The open connections in `table` (the text of either source) the kernel route sent from
/// `route.listen` to `route.compute`.
#[must_use]
pub fn count_routed(table: &str, route: &Dnat) -> RoutedCount {
    let mut count = RoutedCount::default();
    for entry in table
        .lines()
        .filter_map(parse_line)
        .filter(|e| is_routed(e, route))
    {
        count.open += 1;
        if entry.mark & SPOKE_MARK != 0 {
            let busy = entry.mark & BUSY_MARK != 0;
            count.spoke += 1;
            count.busy += usize::from(busy);
            count.sessions.push(RoutedSession {
                client: entry.original_src,
                compute: entry.reply_src,
                busy,
            });
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `/proc/net/nf_conntrack` on the test VM (kernel 6.18): a DNAT'd
    /// connection whose client spoke (relay 19020 → compute 19021), the same after it closed, a connection the
    /// relay accepted itself, the relay's own connection to the compute, and UDP.
    const PROC: &str = "\
ipv4     2 tcp      6 300 ESTABLISHED src=127.0.0.1 dst=127.0.0.1 sport=41904 dport=19020 src=127.0.0.1 dst=127.0.0.1 sport=19021 dport=41904 [ASSURED] mark=8388608 zone=0 use=2
ipv4     2 tcp      6 118 TIME_WAIT src=127.0.0.1 dst=127.0.0.1 sport=41906 dport=19020 src=127.0.0.1 dst=127.0.0.1 sport=19021 dport=41906 [ASSURED] mark=0 zone=0 use=2
ipv4     2 tcp      6 431999 ESTABLISHED src=127.0.0.1 dst=127.0.0.1 sport=41908 dport=19020 src=127.0.0.1 dst=127.0.0.1 sport=19020 dport=41908 [ASSURED] mark=0 zone=0 use=2
ipv4     2 tcp      6 431999 ESTABLISHED src=127.0.0.1 dst=127.0.0.1 sport=41910 dport=19021 src=127.0.0.1 dst=127.0.0.1 sport=19021 dport=41910 [ASSURED] mark=0 zone=0 use=2
ipv4     2 tcp      6 117 SYN_SENT src=10.0.0.9 dst=10.0.0.1 sport=5000 dport=19020 [UNREPLIED] src=127.0.0.1 dst=10.0.0.9 sport=19021 dport=5000 mark=0 zone=0 use=2
ipv4     2 udp      17 29 src=127.0.0.1 dst=127.0.0.53 sport=40000 dport=53 src=127.0.0.53 dst=127.0.0.1 sport=53 dport=40000 mark=0 zone=0 use=2
";

    /// `conntrack -L -o extended` (conntrack-tools 1.4.7) prints the same fields.
    const CLI: &str = "\
ipv6     10 tcp      6 431999 ESTABLISHED src=::1 dst=::1 sport=5000 dport=3306 src=::1 dst=::1 sport=13306 dport=5000 [ASSURED] mark=8388609 use=1
conntrack v1.4.7 (conntrack-tools): 1 flow entries have been shown.
";

    fn route(listen: &str, compute: &str) -> Dnat {
        Dnat {
            listen: listen.parse().unwrap(),
            compute: compute.parse().unwrap(),
        }
    }

    #[test]
    fn decodes_both_directions_of_an_entry() {
        let e = parse_line(PROC.lines().next().unwrap()).unwrap();
        assert_eq!(e.state, "ESTABLISHED");
        assert_eq!(e.original_src, "127.0.0.1:41904".parse().unwrap());
        assert_eq!(e.original_dst, "127.0.0.1:19020".parse().unwrap());
        assert_eq!(e.reply_src, "127.0.0.1:19021".parse().unwrap());
        assert_eq!(e.mark, SPOKE_MARK);
    }

    #[test]
    fn counts_only_open_dnatted_connections() {
        // The established one and the SYN_SENT one from another host; not the closed one,
        // the relay's own, the relay-to-compute leg or UDP. Only the established one spoke:
        // the SYN_SENT one is open (a pause waits for it) but no activity.
        let count = |listen, compute| {
            let n = count_routed(PROC, &route(listen, compute));
            (n.open, n.spoke, n.busy)
        };
        assert_eq!(count("127.0.0.1:19020", "127.0.0.1:19021"), (1, 1, 0));
        assert_eq!(count("0.0.0.0:19020", "127.0.0.1:19021"), (2, 1, 0));
        assert_eq!(count("127.0.0.1:19020", "127.0.0.1:19099"), (0, 0, 0));
        let n = count_routed(PROC, &route("127.0.0.1:19020", "127.0.0.1:19021"));
        assert_eq!(
            n.sessions,
            [RoutedSession {
                client: "127.0.0.1:41904".parse().unwrap(),
                compute: "127.0.0.1:19021".parse().unwrap(),
                busy: false,
            }]
        );
    }

    #[test]
    fn decodes_the_conntrack_tool_and_ipv6() {
        let n = count_routed(CLI, &route("[::1]:3306", "[::1]:13306"));
        assert_eq!(
            (n.open, n.spoke, n.busy),
            (1, 1, 0),
            "another mark bit is left alone"
        );
        // 0x00c00000: spoke, and the client sent payload last (a command outstanding).
        let busy = CLI.replace("mark=8388609", "mark=12582913");
        let n = count_routed(&busy, &route("[::1]:3306", "[::1]:13306"));
        assert_eq!((n.open, n.spoke, n.busy), (1, 1, 1));
        assert!(n.sessions.iter().all(|s| s.busy));
    }

    #[test]
    fn rejects_truncated_and_garbled_lines() {
        let line = PROC.lines().next().unwrap();
        // Every prefix that cuts the reply tuple short is not an entry.
        let reply_sport = line.find("sport=19021").unwrap();
        for end in 0..reply_sport {
            let prefix = line.get(..end).unwrap();
            assert!(parse_line(prefix).is_none(), "{prefix}");
        }
        assert!(parse_line("ipv4 2 tcp 6 1 ESTABLISHED src=x dst=y").is_none());
        assert!(parse_line("").is_none());
    }
}
