//! Watching a direct-route login go by, without changing a byte: the client's user name from
//! its login packet, then the compute's verdict (OK, or ERR with its code). The direct route
//! uses it to charge failed logins on running instances to the same budgets as relayed ones
//! and to refuse a blocked user before its login reaches the compute.
//!
//! Pure: bytes in, events out. Bounded: it gives up (and the bytes flow on unwatched) on a TLS
//! upgrade, a compute packet larger than [`MAX_WATCHED_PACKET`], or more than
//! [`MAX_VERDICT_PACKETS`] packets without a verdict. A client login larger than that is
//! followed from its first bytes (its user name), never buffered whole.

use authplugin::packet::capabilities::CLIENT_SSL;

/// The largest packet the watch buffers (a login, an RSA public key exchange).
pub const MAX_WATCHED_PACKET: usize = 64 * 1024;
/// Server packets (auth switch, more data) read before giving up on a verdict.
pub const MAX_VERDICT_PACKETS: usize = 8;
/// The fixed part of a HandshakeResponse41 before the user name.
const LOGIN_FIXED_LEN: usize = 32;

/// The compute's answer to the login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// OK: the session is open.
    Accepted,
    /// ERR with this error code.
    Refused(u16),
}

/// What the watch learnt from a chunk of bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The client's login packet is complete; its user name.
    Login {
        /// The user name (without its NUL).
        user: Vec<u8>,
    },
    /// The compute's verdict.
    Verdict(Verdict),
    /// The login cannot be followed (bytes that are not a plain login, or a compute packet
    /// too large); nothing more will be reported.
    GaveUp,
    /// The client asked for TLS (an SSLRequest): the login goes on inside the compute's TLS,
    /// where it cannot be followed; nothing more will be reported.
    TlsUpgrade,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the client's login packet.
    ClientLogin,
    /// Reading the compute's packets for a verdict; how many were read.
    Verdict(usize),
    /// Done (a verdict, or gave up).
    Done,
}

/// What an accepted login says of the session that follows: what parking needs to follow its
/// commands ([`crate::conversation::Conversation::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The client's capability flags (the session has those the server offered too).
    pub client_capabilities: u32,
    /// The client's MariaDB extended capabilities (the last four filler bytes).
    pub client_mariadb_capabilities: u32,
    /// The status flags of the compute's OK.
    pub status_flags: u16,
}

/// One direct-route login, watched from the client's first byte (the greeting has passed).
#[derive(Debug)]
pub struct LoginWatch {
    state: State,
    client: Vec<u8>,
    compute: Vec<u8>,
    /// The login packet's capability flags and MariaDB's extended ones.
    login_capabilities: Option<(u32, u32)>,
    accepted: Option<Accepted>,
}

impl Default for LoginWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl LoginWatch {
    /// A watch waiting for the client's login packet.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            state: State::ClientLogin,
            client: Vec::new(),
            compute: Vec::new(),
            login_capabilities: None,
            accepted: None,
        }
    }

    /// Whether nothing more will be reported.
    #[must_use]
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the client's login packet is still incomplete.
    #[must_use]
    pub fn awaiting_login(&self) -> bool {
        self.state == State::ClientLogin
    }

    /// The accepted login's facts, once the compute's OK has been seen.
    #[must_use]
    pub const fn accepted(&self) -> Option<Accepted> {
        self.accepted
    }

    /// Bytes the client sent.
    pub fn client_bytes(&mut self, bytes: &[u8]) -> Option<Event> {
        if self.state != State::ClientLogin {
            return None;
        }
        self.client.extend_from_slice(bytes);
        let (payload, _) = match complete_packet(&self.client) {
            Packet::Incomplete => return None,
            // A login padded past what is buffered (connect attributes make one as large as
            // the client likes, and MariaDB accepts it) is followed from its first bytes:
            // the user name comes early. The rest flows on unbuffered.
            Packet::TooLarge => match self.client.get(4..).map(oversized_login_user) {
                Some(Prefix::NeedMore) => return None,
                Some(Prefix::User(user, caps)) => {
                    self.state = State::Verdict(0);
                    self.login_capabilities = caps;
                    self.client = Vec::new();
                    return Some(Event::Login { user });
                }
                Some(Prefix::NotALogin) | None => return Some(self.give_up()),
            },
            Packet::Complete(payload, seq) => (payload, seq),
        };
        if is_ssl_request(payload) {
            self.give_up();
            return Some(Event::TlsUpgrade);
        }
        let event = match login_user(payload) {
            Some(user) => {
                self.state = State::Verdict(0);
                self.login_capabilities = login_capabilities(payload);
                Event::Login {
                    user: user.to_vec(),
                }
            }
            None => return Some(self.give_up()),
        };
        self.client = Vec::new();
        Some(event)
    }

    /// Bytes the compute sent.
    pub fn compute_bytes(&mut self, bytes: &[u8]) -> Option<Event> {
        let State::Verdict(mut seen) = self.state else {
            // Nothing the compute says before the login is a verdict.
            return None;
        };
        self.compute.extend_from_slice(bytes);
        loop {
            let (first, code, used) = match complete_packet(&self.compute) {
                Packet::Incomplete => {
                    self.state = State::Verdict(seen);
                    return None;
                }
                Packet::TooLarge => return Some(self.give_up()),
                Packet::Complete(payload, _) => {
                    if let (Some(0x00), Some((caps, mariadb))) =
                        (payload.first(), self.login_capabilities)
                    {
                        self.accepted = ok_status_flags(payload).map(|status_flags| Accepted {
                            client_capabilities: caps,
                            client_mariadb_capabilities: mariadb,
                            status_flags,
                        });
                    }
                    (
                        payload.first().copied(),
                        payload
                            .get(1..3)
                            .and_then(|c| c.try_into().ok())
                            .map(u16::from_le_bytes),
                        4 + payload.len(),
                    )
                }
            };
            self.compute.drain(..used);
            seen += 1;
            let verdict = match (first, code) {
                (Some(0x00), _) => Some(Verdict::Accepted),
                (Some(0xFF), Some(code)) => Some(Verdict::Refused(code)),
                // An auth switch or more data: the exchange goes on.
                (Some(0x01 | 0xFE), _) if seen < MAX_VERDICT_PACKETS => None,
                _ => return Some(self.give_up()),
            };
            if let Some(v) = verdict {
                self.state = State::Done;
                self.compute = Vec::new();
                return Some(Event::Verdict(v));
            }
        }
    }

    fn give_up(&mut self) -> Event {
        self.state = State::Done;
        self.client = Vec::new();
        self.compute = Vec::new();
        Event::GaveUp
    }
}

enum Packet<'a> {
    Incomplete,
    TooLarge,
    Complete(&'a [u8], u8),
}

fn complete_packet(buf: &[u8]) -> Packet<'_> {
    let Some(&[a, b, c, seq]) = buf.get(..4) else {
        return Packet::Incomplete;
    };
    let len = usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16;
    if len > MAX_WATCHED_PACKET {
        return Packet::TooLarge;
    }
    buf.get(4..4 + len)
        .map_or(Packet::Incomplete, |p| Packet::Complete(p, seq))
}

/// A HandshakeResponse41's capability flags and MariaDB's extended ones (the last four of
/// its 23 filler bytes, after the flags, the maximum packet size and the character set).
fn login_capabilities(payload: &[u8]) -> Option<(u32, u32)> {
    let flags = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let mariadb = u32::from_le_bytes(payload.get(28..32)?.try_into().ok()?);
    Some((flags, mariadb))
}

/// The status flags of an OK packet (protocol 4.1: after the affected rows and the last
/// insert id, two length-encoded integers).
fn ok_status_flags(payload: &[u8]) -> Option<u16> {
    let lenenc_len = |b: u8| match b {
        0xFC => Some(3),
        0xFD => Some(4),
        0xFE => Some(9),
        0xFB | 0xFF => None,
        _ => Some(1),
    };
    let rows = lenenc_len(*payload.get(1)?)?;
    let id_at = 1 + rows;
    let id = lenenc_len(*payload.get(id_at)?)?;
    let at = id_at + id;
    Some(u16::from_le_bytes(
        payload.get(at..at + 2)?.try_into().ok()?,
    ))
}

/// The longest user name looked for at the start of an oversized login (MariaDB's limit is
/// 80 characters, up to 4 bytes each in utf8mb4).
const MAX_USER_NAME: usize = 320;

/// What the first bytes of an oversized login say.
enum Prefix {
    /// Not enough bytes yet.
    NeedMore,
    /// Its user name and capability flags.
    User(Vec<u8>, Option<(u32, u32)>),
    /// No user name where one must be.
    NotALogin,
}

/// The user name at the start of a login packet too large to buffer (`prefix`: its payload's
/// first bytes).
fn oversized_login_user(prefix: &[u8]) -> Prefix {
    let Some(rest) = prefix.get(LOGIN_FIXED_LEN..) else {
        return Prefix::NeedMore;
    };
    match rest.iter().take(MAX_USER_NAME + 1).position(|&b| b == 0) {
        Some(end) => Prefix::User(
            rest.get(..end).unwrap_or_default().to_vec(),
            login_capabilities(prefix),
        ),
        None if rest.len() > MAX_USER_NAME => Prefix::NotALogin,
        None => Prefix::NeedMore,
    }
}

/// The user name of a HandshakeResponse41, or `None` for an SSLRequest (TLS follows) or
/// anything else.
/// Whether a client's first packet is an SSLRequest: the fixed part alone, `CLIENT_SSL` set.
fn is_ssl_request(payload: &[u8]) -> bool {
    payload.len() == LOGIN_FIXED_LEN
        && payload
            .get(..4)
            .and_then(|f| f.try_into().ok())
            .is_some_and(|f| u32::from_le_bytes(f) & CLIENT_SSL != 0)
}

fn login_user(payload: &[u8]) -> Option<&[u8]> {
    let rest = payload.get(LOGIN_FIXED_LEN..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    rest.get(..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use authplugin::packet::{ErrPacket, write_packet};

    fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_packet(&mut out, seq, payload);
        out
    }

    fn login(user: &[u8], flags: u32) -> Vec<u8> {
        let mut p = flags.to_le_bytes().to_vec();
        p.extend_from_slice(&[0; 28]);
        p.extend_from_slice(user);
        p.push(0);
        p.push(20);
        p.extend_from_slice(&[7; 20]);
        framed(1, &p)
    }

    #[test]
    fn a_refused_login_reports_the_user_then_the_code_at_every_split() {
        let client = login(b"app", 0x000a_a685);
        let err = framed(
            2,
            &ErrPacket::new(1045, b"28000", "Access denied").to_bytes(),
        );
        for cut in 0..=client.len() {
            let mut w = LoginWatch::new();
            assert_eq!(w.compute_bytes(&err), None, "no verdict before the login");
            let mut events: Vec<Event> = [&client[..cut], &client[cut..]]
                .iter()
                .filter_map(|c| w.client_bytes(c))
                .collect();
            for byte in &err {
                events.extend(w.compute_bytes(&[*byte]));
            }
            assert_eq!(
                events,
                [
                    Event::Login {
                        user: b"app".to_vec()
                    },
                    Event::Verdict(Verdict::Refused(1045))
                ],
                "split at {cut}"
            );
            assert!(w.done());
        }
    }

    #[test]
    fn a_switch_and_more_data_lead_to_the_ok() {
        let mut w = LoginWatch::new();
        w.client_bytes(&login(b"u", 0x000a_a685));
        let mut server = framed(2, b"\xfemysql_native_password\0aaaaaaaaaaaaaaaaaaaa\0");
        server.extend(framed(4, b"\x01\x03"));
        server.extend(framed(5, &[0, 0, 0, 2, 0, 0, 0]));
        assert_eq!(
            w.compute_bytes(&server),
            Some(Event::Verdict(Verdict::Accepted))
        );
        // Later bytes (query results) are not watched.
        assert_eq!(w.compute_bytes(&framed(1, &[0xFF, 0x15, 0x04])), None);
    }

    #[test]
    fn an_accepted_login_gives_the_session_capabilities_and_status_flags() {
        let mut w = LoginWatch::new();
        let mut packet = login(b"u", 0x000a_a685);
        // MariaDB's extended capabilities: the last four filler bytes (payload 28..32).
        packet[4 + 28..4 + 32].copy_from_slice(&0x0000_0014u32.to_le_bytes());
        w.client_bytes(&packet);
        assert_eq!(w.accepted(), None);
        // OK: 0 rows, last insert id 0x1234 (three bytes, 0xFC), status 0x4003.
        w.compute_bytes(&framed(2, &[0, 0, 0xFC, 0x34, 0x12, 0x03, 0x40, 0, 0]));
        assert_eq!(
            w.accepted(),
            Some(Accepted {
                client_capabilities: 0x000a_a685,
                client_mariadb_capabilities: 0x14,
                status_flags: 0x4003,
            })
        );
        // A refused login has none.
        let mut w = LoginWatch::new();
        w.client_bytes(&login(b"u", 0x000a_a685));
        w.compute_bytes(&framed(2, &[0xFF, 0x15, 0x04, b'#']));
        assert_eq!(w.accepted(), None);
    }

    #[test]
    fn tls_garbage_and_endless_exchanges_give_up() {
        let mut w = LoginWatch::new();
        let mut ssl = (CLIENT_SSL | 0x0200).to_le_bytes().to_vec();
        ssl.extend_from_slice(&[0; 28]);
        assert_eq!(w.client_bytes(&framed(1, &ssl)), Some(Event::TlsUpgrade));
        assert_eq!(w.client_bytes(&login(b"u", 0)), None);

        // An oversized packet without a user name where a login has one.
        let mut w = LoginWatch::new();
        assert_eq!(w.client_bytes(&[0xff, 0xff, 0xff, 1]), None);
        assert_eq!(w.client_bytes(&[7; 400]), Some(Event::GaveUp));

        let mut w = LoginWatch::new();
        assert_eq!(w.client_bytes(&framed(1, b"short")), Some(Event::GaveUp));

        let mut w = LoginWatch::new();
        w.client_bytes(&login(b"u", 0));
        let more = framed(3, b"\x01\x04");
        for _ in 0..MAX_VERDICT_PACKETS - 1 {
            assert_eq!(w.compute_bytes(&more), None);
        }
        assert_eq!(w.compute_bytes(&more), Some(Event::GaveUp));
        assert!(w.done());
    }

    #[test]
    fn a_login_padded_past_the_buffer_is_followed_from_its_first_bytes() {
        // 65,617 bytes of connect attributes, as a client may send and MariaDB accepts.
        let mut payload = 0x000a_a685u32.to_le_bytes().to_vec();
        payload.extend_from_slice(&[0; 28]);
        payload.extend_from_slice(b"app\0");
        payload.resize(65_617, b'x');
        let client = framed(1, &payload);
        let err = framed(
            2,
            &ErrPacket::new(1045, b"28000", "Access denied").to_bytes(),
        );
        for cut in [1, 4, 20, 36, 39, 40, 41, 1000] {
            let mut w = LoginWatch::new();
            let mut events: Vec<Event> = client
                .chunks(cut)
                .filter_map(|c| w.client_bytes(c))
                .collect();
            events.extend(w.compute_bytes(&err));
            assert_eq!(
                events,
                [
                    Event::Login {
                        user: b"app".to_vec()
                    },
                    Event::Verdict(Verdict::Refused(1045))
                ],
                "chunks of {cut}"
            );
        }
    }
}
