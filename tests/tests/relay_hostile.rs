//! The hostile-input suite: clients that dribble, stall, send malformed
//! framings or split their login at every byte, against the real relay and server-shim. Each
//! asserts what the peer got (ERR code and SQLSTATE, or a clean close), that nothing it sent
//! woke the instance, and that the relay kept serving real logins meanwhile.
//!
//! Thousands of silent connections are covered by `relay_limits.rs`
//! (`a_real_login_gets_through_while_two_thousand_silent_connections_wait`), not repeated here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use authplugin::packet::capabilities::{
    CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
};
use authplugin::packet::{AuthSwitchRequest, ErrPacket, HandshakeResponse41, HandshakeV10};
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, raw};

/// The handshake timeout of the relays in this file: short, so the stalls end quickly.
const HANDSHAKE_TIMEOUT: &str = "2s";

fn relay_with_short_handshake(dir: &TempDir) -> Relay {
    Relay::start(
        dir.path(),
        RelayOptions {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            ..RelayOptions::default()
        },
    )
}

fn wakes(relay: &Relay) -> f64 {
    relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}")
}

fn classified(relay: &Relay, label: &str) -> f64 {
    relay.metric(&format!(
        "relay_classifications_total{{instance=\"demo\",class=\"{label}\"}}"
    ))
}

/// The framed HandshakeResponse41 (sequence id 1) a stock client sends in answer to
/// `greeting`: `mysql_native_password`, database `db` if given.
fn login_bytes(greeting: &[u8], user: &str, password: &str, db: Option<&str>) -> Vec<u8> {
    let g = HandshakeV10::decode(greeting).expect("a MySQL greeting");
    let scramble = g.scramble().expect("a 20-byte scramble");
    let mut flags = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    if db.is_some() {
        flags |= CLIENT_CONNECT_WITH_DB;
    }
    let response = HandshakeResponse41 {
        client_flag: flags,
        max_packet_size: 1 << 24,
        character_set: 45,
        reserved: [0; 23],
        username: user.as_bytes().to_vec(),
        auth_response: zeroize::Zeroizing::new(authplugin::native_password::token(
            password.as_bytes(),
            &scramble,
        )),
        database: db.map(|d| d.as_bytes().to_vec()),
        client_plugin_name: Some(b"mysql_native_password".to_vec()),
        connect_attrs: None,
        zstd_compression_level: None,
    };
    let mut framed = Vec::new();
    authplugin::packet::write_packet(&mut framed, 1, &response.to_bytes());
    framed
}

/// Connects and reads the greeting.
fn greeted(port: u16) -> (TcpStream, Vec<u8>) {
    let mut s = raw::connect(port).unwrap();
    s.set_nodelay(true).unwrap();
    let (seq, greeting) = raw::read_packet(&mut s).unwrap();
    assert_eq!(seq, 0);
    (s, greeting)
}

/// Logs in with the login packet written in two pieces, `[..split]` then `[split..]`, with
/// `gap` between them; follows one native AuthSwitchRequest. The session, or the ERR.
fn split_login(port: u16, split: usize, gap: Duration) -> Result<TcpStream, (u16, String)> {
    let (mut s, greeting) = greeted(port);
    let login = login_bytes(&greeting, USER, PASSWORD, None);
    s.write_all(&login[..split]).unwrap();
    s.flush().unwrap();
    std::thread::sleep(gap);
    s.write_all(&login[split..]).unwrap();
    let (seq, mut reply) = raw::read_packet(&mut s).unwrap();
    if reply.first() == Some(&0xFE) {
        let switch = AuthSwitchRequest::decode(&reply).unwrap();
        let b = switch.scramble().unwrap();
        let answer = authplugin::native_password::token(PASSWORD.as_bytes(), &b);
        raw::write_packet(&mut s, seq.wrapping_add(1), &answer).unwrap();
        (_, reply) = raw::read_packet(&mut s).unwrap();
    }
    match reply.first() {
        Some(0x00) => Ok(s),
        _ => Err(raw::err_of(&reply)),
    }
}

/// What the relay did with a connection after the test stopped sending: the ERR it sent (if
/// any), and whether it then closed. Reads until EOF or `deadline`.
fn outcome(s: &mut TcpStream, deadline: Duration) -> (Option<ErrPacket>, bool) {
    s.set_read_timeout(Some(deadline)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // A reset after the ERR (the peer had unread bytes) is a close too.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    let err = authplugin::packet::parse_packet(&got, 1 << 20)
        .ok()
        .flatten()
        .map(|(p, _)| ErrPacket::decode(&p.payload).expect("an ERR packet"));
    (err, closed)
}

fn assert_err(err: Option<ErrPacket>, code: u16, state: &[u8; 5]) {
    let err = err.unwrap_or_else(|| panic!("no ERR packet; expected {code}"));
    assert_eq!(
        (err.error_code, err.sql_state),
        (code, Some(*state)),
        "{}",
        String::from_utf8_lossy(&err.error_message)
    );
}

/// A client that sends a valid login one byte a second is cut off once `handshake_timeout`
/// has passed since its greeting (one deadline for the whole login, not per read), with
/// ERR 1159; it wakes nothing, and a real login gets through while it dribbles.
#[test]
fn a_login_dribbled_one_byte_a_second_is_cut_off_at_the_handshake_timeout() {
    let dir = TempDir::new("hostile-slowloris");
    let relay = relay_with_short_handshake(&dir);
    let port = relay.port;
    let dribbler = std::thread::spawn(move || {
        // Started before the connect: the relay's deadline runs from before its greeting,
        // which this client reads a moment later (1.2 ms earlier once, on a loaded machine).
        let started = Instant::now();
        let (mut s, greeting) = greeted(port);
        let login = login_bytes(&greeting, USER, PASSWORD, None);
        // One byte, then a second of listening (the read timeout is the dribble's pace).
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut sent = 0;
        for byte in &login {
            if s.write_all(std::slice::from_ref(byte)).is_err() {
                break;
            }
            sent += 1;
            let mut peek = [0u8; 1];
            match s.peek(&mut peek) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                // Something arrived (the ERR) or the relay closed.
                _ => break,
            }
        }
        let (err, closed) = outcome(&mut s, Duration::from_secs(30));
        (sent, login.len(), started.elapsed(), err, closed)
    });
    // While it dribbles, it holds a pre-login slot and nothing wakes.
    assert!(Relay::wait_until(Duration::from_secs(60), || relay
        .metric("relay_pending_connections{instance=\"demo\"}")
        == 1.0));
    assert_eq!(relay.state(), "paused");
    assert_eq!(wakes(&relay), 0.0);
    // A real login meanwhile (it wakes the instance: that is the only wake).
    let mut session = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        raw::query(&mut session, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    let (sent, total, took, err, closed) = dribbler.join().unwrap();
    assert!(sent < total, "the whole login ({total} bytes) went through");
    assert!(
        took >= Duration::from_secs(2),
        "cut off before the timeout: {took:?}"
    );
    assert_err(err, 1159, b"08S01");
    assert!(closed, "the relay closed the connection after its ERR");
    assert_eq!(classified(&relay, "handshake_timeout"), 1.0);
    assert_eq!(wakes(&relay), 1.0, "only the real login woke the instance");
}

/// Half a login, then nothing: ERR 1159 at the timeout, then a close; no wake.
#[test]
fn half_a_login_then_a_stall_is_closed_at_the_handshake_timeout_without_a_wake() {
    let dir = TempDir::new("hostile-half");
    let relay = relay_with_short_handshake(&dir);
    let (mut s, greeting) = greeted(relay.port);
    let login = login_bytes(&greeting, USER, PASSWORD, None);
    // The header announces the whole packet; half its payload follows.
    s.write_all(&login[..4 + (login.len() - 4) / 2]).unwrap();
    let started = Instant::now();
    let (err, closed) = outcome(&mut s, Duration::from_secs(30));
    assert!(started.elapsed() >= Duration::from_millis(1_500));
    assert_err(err, 1159, b"08S01");
    assert!(closed);
    assert_eq!(classified(&relay, "handshake_timeout"), 1.0);
    assert_eq!(relay.state(), "paused");
    assert_eq!(wakes(&relay), 0.0);
    assert!(
        raw::login(relay.port, USER, PASSWORD, None)
            .unwrap()
            .is_ok()
    );
}

/// Framings that are not a login, each on its own connection after the greeting: what the
/// client gets (the relay's MySQL error where a MySQL client could read one, else a plain
/// close) and how it is counted. None of them wakes the instance, and the relay serves a
/// real login afterwards.
#[test]
fn malformed_framings_get_a_clear_err_or_a_close_and_wake_nothing() {
    struct Case {
        what: &'static str,
        bytes: Vec<u8>,
        /// `(code, SQLSTATE)` of the ERR, or `None` for a close without one.
        err: Option<(u16, &'static [u8; 5])>,
        class: &'static str,
    }
    let dir = TempDir::new("hostile-framing");
    let relay = relay_with_short_handshake(&dir);
    let (_, greeting) = greeted(relay.port);
    let login = login_bytes(&greeting, USER, PASSWORD, None);
    let with_seq = |seq: u8| {
        let mut l = login.clone();
        l[3] = seq;
        l
    };
    // A TLS 1.2 ClientHello's record and handshake headers (what `openssl s_client` sends
    // first), without the MySQL SSLRequest that must precede it.
    let client_hello = {
        let mut h = vec![
            0x16, 0x03, 0x01, 0x00, 0x2f, 0x01, 0x00, 0x00, 0x2b, 0x03, 0x03,
        ];
        h.extend_from_slice(&[0x42; 32]);
        h.extend_from_slice(&[0x00, 0x00, 0x02, 0x00, 0x2f, 0x01, 0x00]);
        h
    };
    let cases = [
        Case {
            what: "a zero-length packet as the login",
            bytes: vec![0, 0, 0, 1],
            err: Some((1043, b"08S01")),
            class: "malformed",
        },
        Case {
            what: "a login with sequence id 0",
            bytes: with_seq(0),
            err: Some((1156, b"08S01")),
            class: "out_of_order",
        },
        Case {
            what: "a login with sequence id 7",
            bytes: with_seq(7),
            err: Some((1156, b"08S01")),
            class: "out_of_order",
        },
        Case {
            what: "a header announcing 16 MiB",
            bytes: vec![0xFF, 0xFF, 0xFF, 1],
            err: Some((1153, b"08S01")),
            class: "oversized",
        },
        Case {
            what: "garbage framed as a packet",
            bytes: vec![8, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef],
            err: Some((1043, b"08S01")),
            class: "malformed",
        },
        Case {
            what: "garbage whose first bytes read as a 7 MB length",
            bytes: b"hello, is this the database?\r\n".to_vec(),
            err: Some((1153, b"08S01")),
            class: "oversized",
        },
        Case {
            what: "a TLS ClientHello",
            bytes: client_hello,
            err: None,
            class: "tls_client_hello",
        },
        Case {
            what: "an HTTP request",
            bytes: b"GET / HTTP/1.1\r\nHost: db\r\n\r\n".to_vec(),
            err: None,
            class: "http",
        },
    ];
    for case in &cases {
        let (mut s, _) = greeted(relay.port);
        s.write_all(&case.bytes).unwrap();
        let (err, closed) = outcome(&mut s, Duration::from_secs(30));
        assert!(closed, "{}: not closed", case.what);
        match case.err {
            Some((code, state)) => {
                let e = err.unwrap_or_else(|| panic!("{}: no ERR", case.what));
                assert_eq!(
                    (e.error_code, e.sql_state),
                    (code, Some(*state)),
                    "{}: {}",
                    case.what,
                    String::from_utf8_lossy(&e.error_message)
                );
            }
            None => assert!(err.is_none(), "{}: a non-MySQL peer got an ERR", case.what),
        }
    }
    for class in ["malformed", "out_of_order", "oversized"] {
        let expected = cases.iter().filter(|c| c.class == class).count() as f64;
        assert_eq!(classified(&relay, class), expected, "{class}");
    }
    assert_eq!(classified(&relay, "tls_client_hello"), 1.0);
    assert_eq!(classified(&relay, "http"), 1.0);
    assert_eq!(relay.state(), "paused");
    assert_eq!(wakes(&relay), 0.0);
    let mut session = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        raw::query(&mut session, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
}

/// A login split in two at byte `k` logs in, for every `k`.
///
/// Where each route's parser is covered: the relay's own login parser (perceptron route,
/// paused instance) is exercised at every split point in memory, by
/// `relay/src/perceptron/tests.rs` (`a_login_split_at_every_byte_boundary_is_relayed`), where
/// the gap between the two writes is deterministic (paused time) and 90 logins cost
/// milliseconds. End to end, each split on the perceptron route costs a wake and a pause, so a
/// handful of points covers the real socket path there: inside the header, right after it,
/// inside the user name, inside the answer, the last byte. On the running instance the login
/// goes the direct route, where the relay's login watch (which reads the user name to apply
/// the failed-login budget) and the compute parse it: every split point is cheap there, so
/// all of them run.
#[test]
fn a_login_split_at_any_byte_boundary_logs_in_on_both_routes() {
    let dir = TempDir::new("hostile-split");
    let relay = Relay::start(dir.path(), RelayOptions::default());
    let len = {
        let (_, greeting) = greeted(relay.port);
        login_bytes(&greeting, USER, PASSWORD, None).len()
    };
    // A gap long enough that the two writes arrive as two segments, read apart.
    let gap = Duration::from_millis(20);
    // Perceptron route: the header is 4 bytes, the fixed fields 32, then "app\0", the
    // answer's length byte and 20 bytes of answer, the plugin name.
    let perceptron_points = [1, 3, 4, 5, 36, 38, 41, 50, len - 1];
    for (round, k) in perceptron_points.into_iter().enumerate() {
        assert_eq!(relay.state(), "paused", "split at {k}");
        let mut s = split_login(relay.port, k, gap)
            .unwrap_or_else(|e| panic!("split at {k}: {e:?}\n{}", relay.log()));
        assert_eq!(
            raw::query(&mut s, "SELECT 1").unwrap(),
            Ok(vec![Some("1".into())]),
            "split at {k}"
        );
        drop(s);
        relay.pause();
        assert_eq!(wakes(&relay), (round + 1) as f64);
    }
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"relayed\"}",
            perceptron_points.len() as f64
        ),
        perceptron_points.len() as f64
    );
    // Direct route: one wake, then every split point.
    let _wake = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(relay.state(), "running");
    let direct_len = {
        let (_, greeting) = greeted(relay.port);
        login_bytes(&greeting, USER, PASSWORD, None).len()
    };
    for k in 1..direct_len {
        let mut s = split_login(relay.port, k, Duration::from_millis(2))
            .unwrap_or_else(|e| panic!("direct, split at {k}: {e:?}"));
        assert_eq!(
            raw::query(&mut s, "SELECT 1").unwrap(),
            Ok(vec![Some("1".into())]),
            "direct, split at {k}"
        );
    }
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        (direct_len - 1) as f64,
        "every split login went the direct route"
    );
}
