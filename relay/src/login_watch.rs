//! Watching a direct-route login go by, without changing a byte: the client's user name from
//! its login packet, then the compute's verdict (OK, or ERR with its code). The direct route
//! uses it to charge failed logins on running instances to the same budgets as relayed ones
//! and to refuse a blocked user before its login reaches the compute.
//!
//! Pure: bytes in, events out. Bounded: it gives up (and the bytes flow on unwatched) on a TLS
//! upgrade, a packet larger than [`MAX_WATCHED_PACKET`], or more than [`MAX_VERDICT_PACKETS`]
//! packets without a verdict.

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
    /// The login cannot be followed (TLS, or bytes that are not a plain login); nothing more
    /// will be reported.
    GaveUp,
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

/// One direct-route login, watched from the client's first byte (the greeting has passed).
#[derive(Debug)]
pub struct LoginWatch {
    state: State,
    client: Vec<u8>,
    compute: Vec<u8>,
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

    /// Bytes the client sent.
    pub fn client_bytes(&mut self, bytes: &[u8]) -> Option<Event> {
        if self.state != State::ClientLogin {
            return None;
        }
        self.client.extend_from_slice(bytes);
        let (payload, _) = match complete_packet(&self.client) {
            Packet::Incomplete => return None,
            Packet::TooLarge => return Some(self.give_up()),
            Packet::Complete(payload, seq) => (payload, seq),
        };
        let event = match login_user(payload) {
            Some(user) => {
                self.state = State::Verdict(0);
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
                Packet::Complete(payload, _) => (
                    payload.first().copied(),
                    payload
                        .get(1..3)
                        .and_then(|c| c.try_into().ok())
                        .map(u16::from_le_bytes),
                    4 + payload.len(),
                ),
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

/// The user name of a HandshakeResponse41, or `None` for an SSLRequest (TLS follows) or
/// anything else.
fn login_user(payload: &[u8]) -> Option<&[u8]> {
    let flags = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    if flags & CLIENT_SSL != 0 && payload.len() == LOGIN_FIXED_LEN {
        return None;
    }
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
    fn tls_garbage_and_endless_exchanges_give_up() {
        let mut w = LoginWatch::new();
        let mut ssl = (CLIENT_SSL | 0x0200).to_le_bytes().to_vec();
        ssl.extend_from_slice(&[0; 28]);
        assert_eq!(w.client_bytes(&framed(1, &ssl)), Some(Event::GaveUp));
        assert_eq!(w.client_bytes(&login(b"u", 0)), None);

        let mut w = LoginWatch::new();
        assert_eq!(w.client_bytes(&[0xff, 0xff, 0xff, 1]), Some(Event::GaveUp));

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
}
