//! Clean stops: Ctrl-C in a terminal sends SIGINT to the whole foreground
//! process group. The relay's computes run in a group of their own, so only the relay gets it;
//! with nothing open the relay stops its compute itself and exits in well under a second
//! without a warning, and with a session open the session carries on through the drain (its
//! compute was not signalled) and the relay exits once it closes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::process::Command;
use std::time::{Duration, Instant};

use tests::relay::{PASSWORD, Relay, RelayOptions, USER, pid_alive};
use tests::{TempDir, raw};

/// The process group of `pid` (field 5 of `/proc/<pid>/stat`).
fn pgid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(") ").unwrap();
    rest.split(' ').nth(2).unwrap().parse().unwrap()
}

/// A relay leading its own process group, with its instance resumed: `(relay, compute pid)`.
fn running_relay(dir: &std::path::Path) -> (Relay, u32) {
    let relay = Relay::start(
        dir,
        RelayOptions {
            own_process_group: true,
            ..RelayOptions::default()
        },
    );
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    let compute = relay.compute_pid().expect("compute pid");
    assert!(pid_alive(compute));
    let relay_pid = relay.child.pid().unwrap();
    assert_eq!(
        pgid(relay_pid),
        relay_pid,
        "the test made the relay a group leader"
    );
    assert_eq!(
        pgid(compute),
        compute,
        "the compute leads a group of its own"
    );
    (relay, compute)
}

/// What a terminal does on Ctrl-C: SIGINT to every process of the relay's group.
fn interrupt_group(relay: &Relay) {
    let pid = relay.child.pid().unwrap();
    let ok = Command::new("kill")
        .args(["-INT", "--", &format!("-{pid}")])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn ctrl_c_with_nothing_open_stops_the_compute_and_exits_at_once_without_a_warning() {
    let dir = TempDir::new("stop-idle");
    let (mut relay, compute) = running_relay(dir.path());
    let started = Instant::now();
    interrupt_group(&relay);
    let (status, _) = relay
        .child
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the relay did not exit\n{}", relay.log()));
    let took = started.elapsed();
    assert!(status.success(), "{status:?}\n{}", relay.log());
    eprintln!("SIGINT to exit with nothing open: {took:?}");
    // "At once": the relay did not wait for the drain deadline (a time bound would not tell
    // on a loaded machine; the relay's own line does).
    assert_eq!(
        relay.log_count("drain deadline passed"),
        0,
        "{took:?}\n{}",
        relay.log()
    );
    let log = relay.log();
    // (The configuration's warnings at start, `relay::cli`, are not the shutdown's.)
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") && !l.contains(" relay::cli: "))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    // Stopped by the relay (its SIGTERM), not by the terminal's SIGINT.
    assert_eq!(
        relay.log_count("compute stopped for relay shutdown"),
        1,
        "{log}"
    );
    assert_eq!(relay.log_count("compute exited on its own"), 0, "{log}");
    assert!(!pid_alive(compute));
}

#[test]
fn ctrl_c_with_a_session_open_lets_it_finish_then_stops() {
    let dir = TempDir::new("stop-session");
    let (mut relay, compute) = running_relay(dir.path());
    let mut session = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}"));
    interrupt_group(&relay);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay
            .log()
            .contains("SIGINT received")),
        "{}",
        relay.log()
    );
    // The compute did not get the terminal's SIGINT: the session still runs queries.
    assert_eq!(
        raw::query(&mut session, "SELECT 1").unwrap(),
        Ok(vec![Some("1".into())])
    );
    assert!(pid_alive(compute));
    let closed = Instant::now();
    drop(session);
    let (status, _) = relay
        .child
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the relay did not exit\n{}", relay.log()));
    let took = closed.elapsed();
    assert!(status.success(), "{status:?}\n{}", relay.log());
    eprintln!("session close to exit: {took:?}");
    assert_eq!(
        relay.log_count("drain deadline passed"),
        0,
        "{took:?}\n{}",
        relay.log()
    );
    assert_eq!(relay.log_count("compute stopped for relay shutdown"), 1);
    assert_eq!(
        relay.log_count(" WARN ") - relay.log_count(" WARN relay::cli: "),
        0,
        "{}",
        relay.log()
    );
    assert!(!pid_alive(compute));
}
