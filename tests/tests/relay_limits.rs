//! Pre-login connection limits end to end: thousands of silent
//! connections wait while a real login gets through, a source past its cap gets ERR 1040
//! without a wake, and silent connections on the direct route do not hold an instance awake.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::net::TcpStream;
use std::time::Duration;

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, mariadb, raw};

/// The relay's resident memory in KiB.
fn rss_kib(relay: &Relay) -> u64 {
    let pid = relay.child.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn pending(relay: &Relay) -> f64 {
    relay.metric("relay_pending_connections{instance=\"demo\"}")
}

/// A relay whose readiness probe (a connection from 127.0.0.1 that reads the greeting and
/// closes) no longer counts as pending: tests that fill a source's cap from 127.0.0.1 would
/// otherwise race with the relay noticing that close, and see one connection too many refused.
fn start(dir: &TempDir, options: RelayOptions) -> Relay {
    let relay = Relay::start(dir.path(), options);
    assert!(
        Relay::wait_until(Duration::from_secs(30), || pending(&relay) == 0.0),
        "the readiness probe still pending\n{}",
        relay.log()
    );
    relay
}

#[test]
fn a_real_login_gets_through_while_two_thousand_silent_connections_wait() {
    const SILENT: usize = 2_000;
    let dir = TempDir::new("limits-silent");
    let relay = start(
        &dir,
        RelayOptions {
            // All test sockets come from 127.0.0.1; the per-source cap is tested below.
            relay_toml: "max_pending_per_source = 4096\n".into(),
            ..RelayOptions::default()
        },
    );
    let before = rss_kib(&relay);
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(("127.0.0.1", relay.port)).unwrap())
        .collect();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || pending(&relay) >= SILENT as f64),
        "pending: {}",
        pending(&relay)
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let with_silent = rss_kib(&relay);
    eprintln!(
        "relay RSS: {before} KiB idle, {with_silent} KiB with {SILENT} silent connections \
         pending and a login through ({} bytes per pending connection)",
        (with_silent.saturating_sub(before) * 1024) / SILENT as u64
    );
    assert!(with_silent < 200 * 1024, "{with_silent} KiB");
    assert_eq!(pending(&relay), SILENT as f64);
    assert_eq!(
        relay.metric("relay_wakes_total{instance=\"demo\",outcome=\"ok\"}"),
        1.0,
        "only the real login woke the instance"
    );
    drop(silent);
    assert!(Relay::wait_until(Duration::from_secs(60), || pending(
        &relay
    ) == 0.0));
}

#[test]
fn a_source_past_its_cap_gets_err_1040_without_a_wake() {
    const CAP: usize = 20;
    let dir = TempDir::new("limits-source");
    let relay = start(
        &dir,
        RelayOptions {
            relay_toml: format!("max_pending_per_source = {CAP}\n"),
            ..RelayOptions::default()
        },
    );
    let silent: Vec<TcpStream> = (0..CAP)
        .map(|_| TcpStream::connect(("127.0.0.1", relay.port)).unwrap())
        .collect();
    assert!(Relay::wait_until(Duration::from_secs(60), || pending(
        &relay
    ) == CAP
        as f64));
    let mut over = raw::connect(relay.port).unwrap();
    let (seq, payload) = raw::read_packet(&mut over).unwrap();
    assert_eq!(seq, 0);
    assert_eq!(
        raw::err_of(&payload),
        (1040, "Too many connections".to_owned())
    );
    // A real client sees the same refusal, clearly.
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("1040") && out.stderr.contains("Too many connections"),
        "{}",
        out.stderr
    );
    assert_eq!(
        relay.metric(
            "relay_connections_refused_total{instance=\"demo\",reason=\"source_pending_limit\"}"
        ),
        2.0
    );
    assert_eq!(relay.state(), "paused", "a refusal wakes nothing");
    drop(silent);
    assert!(Relay::wait_until(Duration::from_secs(60), || pending(
        &relay
    ) == 0.0));
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn silent_direct_connections_hold_off_a_pause_only_until_their_handshake_timeout() {
    let dir = TempDir::new("limits-direct-idle");
    let relay = start(
        &dir,
        RelayOptions {
            // Not shorter: the instance must still be running when the connections below
            // arrive, on a loaded machine too.
            idle_pause_after: tests::scaled_setting(5),
            // How long a connection that never speaks holds off a pause.
            handshake_timeout: "3s",
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(relay.state(), "running");
    // Bare TCP connections on the direct route that never send a byte, kept open.
    let silent: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(("127.0.0.1", relay.port)).unwrap())
        .collect();
    assert!(Relay::wait_until(Duration::from_secs(60), || pending(
        &relay
    ) == 20.0));
    // Each counts from its accept (so no pause cuts a client that is about to speak) until
    // `handshake_timeout` closes it; it never restarts the idle clock. Before: each counted
    // for as long as it lived and restarted the idle clock when it closed, so the instance
    // never paused.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "state: {}\n{}",
        relay.state(),
        relay.log()
    );
    // They were counted on the direct route (not handed to a perceptron after a pause).
    assert_eq!(
        relay.metric_reaching(
            "relay_direct_connections_total{instance=\"demo\",outcome=\"handshake_timeout\"}",
            20.0
        ),
        20.0,
        "{}",
        relay.log()
    );
    drop(silent);
}

#[test]
fn a_direct_connection_counts_as_pending_until_its_login_verdict() {
    const CAP: usize = 20;
    let dir = TempDir::new("limits-direct-byte");
    let relay = start(
        &dir,
        RelayOptions {
            relay_toml: format!("max_pending_per_source = {CAP}\n"),
            ..RelayOptions::default()
        },
    );
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(relay.state(), "running");
    // Connections on the direct route that read the greeting, send one byte of a login and
    // stall there.
    let stalled: Vec<TcpStream> = (0..CAP)
        .map(|_| {
            let mut s = raw::connect(relay.port).unwrap();
            raw::read_packet(&mut s).unwrap();
            std::io::Write::write_all(&mut s, &[0x20]).unwrap();
            s
        })
        .collect();
    let forwarded = "relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}";
    assert!(Relay::wait_until(Duration::from_secs(60), || relay
        .metric(forwarded)
        >= CAP as f64));
    // Before: each stopped counting at its first byte, so one source could open any number.
    let mut over = raw::connect(relay.port).unwrap();
    let (_, payload) = raw::read_packet(&mut over).unwrap();
    assert_eq!(
        raw::err_of(&payload),
        (1040, "Too many connections".to_owned())
    );
    drop(stalled);
    assert!(Relay::wait_until(Duration::from_secs(60), || pending(
        &relay
    ) == 0.0));
}

/// Two sources fill an instance's pre-login cap with silent connections (each within its own
/// per-source cap); a real login from a third source still gets through, by evicting the
/// oldest silent connection of the largest holder (before: ERR 1040 for everyone else).
#[test]
fn a_few_sources_cannot_fill_the_cap_for_everyone() {
    let dir = TempDir::new("limits-fair");
    let relay = start(
        &dir,
        RelayOptions {
            relay_toml: "max_pending_per_source = 32\n".into(),
            instance_toml: "max_pending_connections = 64\n".into(),
            ..RelayOptions::default()
        },
    );
    let silent: Vec<TcpStream> = ["127.0.0.1", "127.0.0.2"]
        .iter()
        .flat_map(|source| {
            (0..32).map(|_| raw::connect_from(source.parse().unwrap(), relay.port).unwrap())
        })
        .collect();
    assert!(
        Relay::wait_until(Duration::from_secs(30), || pending(&relay) >= 64.0),
        "pending: {}\n{}",
        pending(&relay),
        relay.log()
    );
    let mut s = raw::login_from(
        "127.0.0.3".parse().unwrap(),
        relay.port,
        USER,
        PASSWORD,
        None,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        raw::query(&mut s, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    assert_eq!(
        relay.metric("relay_connections_refused_total{instance=\"demo\",reason=\"evicted\"}"),
        1.0
    );
    // Exactly one silent connection was closed by the relay.
    let closed = silent
        .into_iter()
        .filter(|c| {
            let mut c = c;
            c.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut buf = [0u8; 256];
            // Each was greeted; an evicted one then reads end of stream, the others time out.
            loop {
                match std::io::Read::read(&mut c, &mut buf) {
                    Ok(0) => return true,
                    Ok(_) => {}
                    Err(_) => return false,
                }
            }
        })
        .count();
    assert_eq!(closed, 1);
}
