//! Parking the kernel route's sessions (docs/parking.md, "The kernel route"). The relay never sees
//! their bytes, so it learns what it needs from the kernel instead:
//!
//! - **Between commands or not**: the routed connection's conntrack mark
//!   ([`crate::router::nft::BUSY_MARK`]): set by the client's payload, cleared by the
//!   compute's, in the order the packets passed. A `SELECT SLEEP(60)` stays busy until it
//!   answers, a fast query's command and response both pass before the next count.
//! - **Nothing in flight**: the compute's end of the connection has no unread bytes (a command
//!   not yet read) and no unacknowledged ones (a response the client has not taken in: a
//!   frozen compute could not finish sending it).
//! - **Not computing**: the compute used less than a tenth of a core since the last look (a
//!   multi-statement query may compute its next result after sending one).
//! - **For how long**: the compute's end of the connection, looked up by its address pair
//!   (`sock_diag`), reports how many milliseconds ago it last sent and received payload
//!   (`tcp_info`). So a compute on another host (whose sockets this host cannot see) keeps its
//!   routed sessions running, as before parking.
//! - **The first byte while frozen**: the relay duplicates the compute's socket of each
//!   parked session into itself (`pidfd_getfd`, root) and waits for it to become readable,
//!   never reading from it: the client's next command (or its hang-up) wakes the relay
//!   through epoll at once, with no polling, and the relay thaws the compute. The duplicates
//!   are dropped at the thaw, before the compute runs, so a socket the compute closes is
//!   closed.
//!
//! A ping on a routed session is payload like any other: it counts as use and, while parked,
//! thaws the compute (the relay cannot answer it: it is not in the path).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::router::conntrack::RoutedSession;
use crate::sys::sock_diag;

/// What the routed sessions say about the instance's idleness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutedIdleness {
    /// Sessions that hold the instance running: a command outstanding, or a compute end
    /// this host cannot see.
    pub busy: usize,
    /// How long ago the most recently used of the others sent or received payload.
    pub quiet_for: Option<Duration>,
}

/// Looks each session's compute end up (see the module doc).
#[must_use]
pub fn inspect(sessions: &[RoutedSession]) -> RoutedIdleness {
    let mut idleness = RoutedIdleness {
        busy: 0,
        quiet_for: None,
    };
    for session in sessions {
        let found = if session.busy {
            None
        } else {
            sock_diag::established_socket(session.compute, session.client)
                .ok()
                .flatten()
        };
        match found {
            // Nothing unread (a command the compute has not read yet) and nothing
            // unacknowledged (a response the client has not taken in, such as a result larger
            // than the sockets' buffers left unread); anything else is busy, whoever sent
            // payload last.
            Some(socket) if socket.unread == 0 && socket.unacked == 0 => {
                let quiet = Duration::from_millis(u64::from(
                    socket.last_sent_ms.min(socket.last_received_ms),
                ));
                idleness.quiet_for = Some(idleness.quiet_for.map_or(quiet, |q| q.min(quiet)));
            }
            _ => idleness.busy += 1,
        }
    }
    idleness
}

/// A routed session's multi-statement query can be computing its next result after the
/// compute last sent payload: to the marks and the socket that is a session between commands.
/// The compute working says otherwise. This is the share of one core above which the compute
/// counts as working between two looks (an idle MariaDB's background threads use well under
/// 1 %).
const WORKING_SHARE: f64 = 0.1;

/// The CPU time process `pid` (all its threads) has used, from `/proc/<pid>/stat`.
#[must_use]
pub fn process_cpu(pid: u32) -> Option<Duration> {
    parse_process_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `utime + stime` of a `/proc/<pid>/stat` line, in `USER_HZ` (100 per second on every Linux
/// architecture's ABI). The command name (field 2) may hold spaces and parentheses: fields are
/// counted after its last `)`.
#[must_use]
pub fn parse_process_cpu(stat: &str) -> Option<Duration> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis(
        utime.saturating_add(stime).saturating_mul(10),
    ))
}

/// Whether the compute used more than [`WORKING_SHARE`] of a core between two samples of
/// `(when, cpu time)`.
#[must_use]
pub fn working(
    before: (std::time::Instant, Duration),
    now: (std::time::Instant, Duration),
) -> bool {
    let wall = now.0.saturating_duration_since(before.0).as_secs_f64();
    let cpu = now.1.saturating_sub(before.1).as_secs_f64();
    wall > 0.0 && cpu > wall * WORKING_SHARE
}

/// The parked sessions' sockets, duplicated from the compute (see the module doc).
#[derive(Debug)]
pub struct RoutedWatch {
    /// The duplicates, only ever asked for readiness: never read or written, and never put
    /// in non-blocking mode (that flag belongs to the file description the compute shares).
    sockets: Vec<AsyncFd<OwnedFd>>,
    sessions: Vec<RoutedSession>,
}

impl RoutedWatch {
    /// Duplicates the compute's end of each of `sessions` out of process `pid`.
    ///
    /// # Errors
    /// A session whose socket is not found in the compute, or a duplicate the kernel refuses
    /// (no `CAP_SYS_PTRACE`, a kernel before 5.6): its sessions cannot be parked.
    pub fn prepare(pid: u32, sessions: &[RoutedSession]) -> std::io::Result<Self> {
        let mut wanted: HashMap<String, RoutedSession> = HashMap::new();
        for session in sessions {
            let socket = sock_diag::established_socket(session.compute, session.client)?
                .ok_or_else(|| {
                    std::io::Error::other(format!(
                        "no socket of the compute's for the session from {}",
                        session.client
                    ))
                })?;
            wanted.insert(format!("socket:[{}]", socket.inode), *session);
        }
        let raw_pid = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| std::io::Error::other(format!("bad pid {pid}")))?;
        let pidfd = rustix::process::pidfd_open(raw_pid, rustix::process::PidfdFlags::empty())?;
        let mut sockets = Vec::with_capacity(wanted.len());
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue;
            };
            let Some(target) = target.to_str() else {
                continue;
            };
            if wanted.remove(target).is_none() {
                continue;
            }
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let socket = rustix::process::pidfd_getfd(
                &pidfd,
                fd,
                rustix::process::PidfdGetfdFlags::empty(),
            )?;
            // Deprecated for fds whose owner may close them while registered; this one is
            // owned by the AsyncFd for its whole registration. (`TcpStream::from_std` refuses
            // a blocking socket, and making it non-blocking would change the compute's.)
            #[allow(deprecated)]
            let watched = AsyncFd::with_interest(socket, tokio::io::Interest::READABLE)?;
            sockets.push(watched);
        }
        if let Some(missing) = wanted.values().next() {
            return Err(std::io::Error::other(format!(
                "the compute (pid {pid}) holds no socket for the session from {}",
                missing.client
            )));
        }
        Ok(Self {
            sockets,
            sessions: sessions.to_vec(),
        })
    }

    /// Whether a session's compute end received payload after it last sent some: a command
    /// that arrived between the last look and the freeze, which the compute may have read
    /// before it froze (so no byte waits in its socket). One lookup per session, right after
    /// the freeze; a socket gone or unreadable counts as commanded.
    #[must_use]
    pub fn commanded(&self) -> bool {
        self.sessions.iter().any(|session| {
            match sock_diag::established_socket(session.compute, session.client) {
                Ok(Some(socket)) => socket.last_received_ms < socket.last_sent_ms,
                _ => true,
            }
        })
    }

    /// How many sessions it watches.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// Resolves when a client has sent something (or hung up) on any watched session. The
    /// bytes stay in the socket for the compute; dropping the watch closes the duplicates.
    /// An empty watch never resolves.
    pub async fn first_byte(&self) {
        let mut readable: Vec<_> = self
            .sockets
            .iter()
            .map(|s| Box::pin(s.readable()))
            .collect();
        std::future::poll_fn(|cx| {
            if readable.iter_mut().any(|r| r.as_mut().poll(cx).is_ready()) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_time_from_a_stat_line_and_tells_work_from_idling() {
        // Captured from /proc/<pid>/stat of a mariadbd; the name made harder.
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 5410 0 0 0 150 37 0 0 20 0 \
                    12 0 108337 1415753728 26457 18446744073709551615 1 1 0 0 0 0 0 4096 9448 0 \
                    0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_process_cpu(stat), Some(Duration::from_millis(1870)));
        assert_eq!(parse_process_cpu("4242 (x) S 1 2"), None);
        assert_eq!(parse_process_cpu(""), None);
        let t0 = std::time::Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let cpu = Duration::from_millis;
        assert!(
            !working((t0, cpu(1000)), (t1, cpu(1005))),
            "background threads"
        );
        assert!(
            working((t0, cpu(1000)), (t1, cpu(1900))),
            "a query computing"
        );
        assert!(!working((t0, cpu(1000)), (t0, cpu(1900))), "no time passed");
        assert!(process_cpu(std::process::id()).is_some());
    }

    /// A session between commands on a socket pair of this process: found, quiet for a few
    /// milliseconds; its watch wakes at the first byte the client sends, which stays unread.
    #[tokio::test]
    async fn a_local_session_is_inspected_and_watched_until_its_first_byte() {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let compute = listener.local_addr().unwrap();
        let mut client = std::net::TcpStream::connect(compute).unwrap();
        let (mut server, client_addr) = listener.accept().unwrap();
        server.write_all(b"greeting").unwrap();
        let mut buf = [0u8; 8];
        client.read_exact(&mut buf).unwrap();
        let session = RoutedSession {
            client: client_addr,
            compute,
            busy: false,
        };
        let idleness = inspect(&[session]);
        assert_eq!(idleness.busy, 0);
        assert!(
            idleness
                .quiet_for
                .is_some_and(|q| q < Duration::from_secs(5))
        );
        // Marked busy, or a peer nobody here holds: busy.
        let busy = RoutedSession {
            busy: true,
            ..session
        };
        let elsewhere = RoutedSession {
            client: "127.0.0.1:9".parse().unwrap(),
            ..session
        };
        assert_eq!(inspect(&[busy, elsewhere, session]).busy, 2);

        let watch = RoutedWatch::prepare(std::process::id(), &[session]).unwrap();
        assert_eq!(watch.len(), 1);
        assert!(!watch.commanded(), "the compute spoke last");
        let woke = tokio::time::timeout(Duration::from_millis(100), watch.first_byte()).await;
        assert!(woke.is_err(), "nothing sent yet");
        client.write_all(b"\x01\x00\x00\x00\x0e").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watch.first_byte())
            .await
            .expect("woken by the client's byte");
        drop(watch);
        // The byte is still there for the compute.
        let mut got = [0u8; 5];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, *b"\x01\x00\x00\x00\x0e");
        // Read by the compute and not answered: a command outstanding, which the socket's times
        // show (received 100 ms after the compute last sent).
        let again = RoutedWatch::prepare(std::process::id(), &[session]).unwrap();
        assert!(again.commanded());
        assert!(RoutedWatch::prepare(std::process::id(), &[elsewhere]).is_err());
    }
}
