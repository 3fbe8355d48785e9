//! Parking (docs/parking.md) end to end, with the kernel's cgroup files read back: an instance
//! whose open connections are all between commands pauses after `idle_pause_after` by
//! freezing its compute with the sessions intact, and the next command on any of them thaws
//! the same process; a connection in the middle of a response keeps the instance running;
//! pings and keepalive queries neither hold it running nor, once parked, thaw it (the relay
//! answers them). Needs root and cgroups, as CI has.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use tests::cgroup::frozen;
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, raw};

fn ledger_states(dir: &TempDir) -> Vec<String> {
    std::fs::read_to_string(dir.path().join("state/usage.ledger"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(2).map(str::to_owned))
        .collect()
}

fn ping(s: &mut TcpStream) {
    raw::write_packet(s, 0, &[0x0E]).unwrap();
    let (seq, ok) = raw::read_packet(s).unwrap();
    assert_eq!((seq, ok.first()), (1, Some(&0x00)), "{ok:?}");
}

fn start(dir: &TempDir) -> Relay {
    start_with(dir, "")
}

/// [`start`], with more of the instance's configuration.
fn start_with(dir: &TempDir, instance_toml: &str) -> Relay {
    Relay::start(
        dir.path(),
        RelayOptions {
            idle_pause_after: "1s",
            instance_toml: instance_toml.into(),
            ..RelayOptions::default()
        },
    )
}

#[test]
fn an_idle_pool_is_parked_on_a_frozen_compute_and_its_next_query_thaws_it() {
    let dir = TempDir::new("parking-pool");
    let relay = start(&dir);
    // A pool of two, used once, then quiet.
    let mut pool: Vec<TcpStream> = (0..2)
        .map(|_| {
            raw::login(relay.port, USER, PASSWORD, None)
                .unwrap()
                .unwrap()
        })
        .collect();
    for (i, c) in pool.iter_mut().enumerate() {
        assert_eq!(raw::one_row(c, &format!("SELECT {i}")), Some(i.to_string()));
    }
    let pid = relay.compute_pid().unwrap();

    // Idle with both connections open: parked (frozen, the sessions kept), not running.
    relay.wait_state("frozen", Duration::from_secs(60));
    assert!(frozen(pid), "the kernel reports the compute frozen");
    let (_, status) = relay.admin("GET", "/v1/instances");
    assert!(status.contains("\"parked_connections\": 2"), "{status}");

    // A query on a parked connection thaws the same compute and is answered.
    for c in &mut pool {
        c.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
            .unwrap();
    }
    assert_eq!(raw::one_row(&mut pool[1], "SELECT 7").as_deref(), Some("7"));
    assert_eq!(relay.compute_pid(), Some(pid));
    assert!(!frozen(pid));
    assert_eq!(raw::one_row(&mut pool[0], "SELECT 8").as_deref(), Some("8"));

    // Quiet again: parked again. The ledger bills the parked time as frozen.
    relay.wait_state("frozen", Duration::from_secs(60));
    let states = ledger_states(&dir);
    let parked_twice = states
        .windows(2)
        .filter(|w| w[0] == "pausing" && w[1] == "frozen")
        .count();
    assert_eq!(parked_twice, 2, "{states:?}");
    assert_eq!(raw::one_row(&mut pool[0], "SELECT 9").as_deref(), Some("9"));

    // A manual pause, not forced, parks idle sessions too.
    let (code, body) = relay.admin("POST", "/v1/instances/demo/pause");
    assert_eq!(code, 200, "{body}");
    relay.wait_state("frozen", Duration::from_secs(60));
    assert_eq!(
        raw::one_row(&mut pool[1], "SELECT 10").as_deref(),
        Some("10")
    );

    // A parked connection the client closes is let go at once, the compute still frozen.
    relay.wait_state("frozen", Duration::from_secs(60));
    drop(pool.remove(0));
    assert!(
        Relay::wait_until(Duration::from_secs(30), || {
            relay
                .admin("GET", "/v1/instances")
                .1
                .contains("\"parked_connections\": 1")
        }),
        "{}",
        relay.admin("GET", "/v1/instances").1
    );
    assert_eq!(relay.state(), "frozen");

    // A forced pause still cuts: the compute stops under the last parked connection.
    let (code, body) = relay.admin("POST", "/v1/instances/demo/pause?force=true");
    assert_eq!(code, 200, "{body}");
    assert_eq!(relay.state(), "paused");
    assert!(!tests::relay::pid_alive(pid), "the compute is gone");
    let mut c = pool.remove(0);
    assert!(
        !matches!(raw::query(&mut c, "SELECT 11"), Ok(Ok(_))),
        "a cut session answers nothing"
    );
}

#[test]
fn a_connection_whose_result_is_still_streaming_keeps_the_instance_running() {
    let dir = TempDir::new("parking-busy");
    let relay = start(&dir);
    let mut c = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    // A result far larger than the sockets' buffers, left unread: the compute is still
    // sending it, so the connection is busy however long the client takes.
    raw::send_large_result_query(&mut c).unwrap();
    // Several idle periods pass without a pause (a negative observation: it must hold for
    // the whole window).
    let running = Relay::holds_for(Duration::from_secs(5), || relay.state() == "running");
    assert!(running, "paused mid-result:\n{}", relay.log());

    // The client reads the whole result: the connection is between commands, and parks.
    c.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    assert_eq!(raw::read_large_result(&mut c), raw::LARGE_RESULT_ROWS);
    relay.wait_state("frozen", Duration::from_secs(60));
    assert_eq!(raw::one_row(&mut c, "SELECT 1").as_deref(), Some("1"));
}

#[test]
fn pings_and_keepalive_queries_neither_keep_the_instance_running_nor_thaw_it() {
    let dir = TempDir::new("parking-pings");
    // On the pump from its login, so the relay sees the keepalive query answered before it
    // parks (a spliced session's are learnt once it is taken back: relay_splice.rs).
    let relay = start_with(&dir, "kernel_splice = false\n");
    let mut c = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(raw::one_row(&mut c, "SELECT 1").as_deref(), Some("1"));
    c.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    // A pool's keepalive, well inside `idle_pause_after`: each ping is answered, and the
    // instance parks all the same.
    let parked = Relay::wait_until(Duration::from_secs(60), || {
        ping(&mut c);
        relay.state() == "frozen"
    });
    assert!(parked, "pings kept the instance running:\n{}", relay.log());
    let pid = relay.compute_pid().unwrap();

    // Parked: the relay answers the pings itself, and the compute stays frozen.
    let wakes = |dir: &TempDir| {
        ledger_states(dir)
            .iter()
            .filter(|s| *s == "resuming")
            .count()
    };
    let answered = || {
        let (_, metrics) = relay.admin("GET", "/metrics");
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("relay_parked_answers_total{instance=\"demo\",kind=\"ping\"} ")
            })
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    let (wakes_before, answered_before) = (wakes(&dir), answered());
    for _ in 0..5 {
        ping(&mut c);
    }
    assert_eq!(relay.state(), "frozen");
    assert!(frozen(pid));
    assert_eq!(wakes(&dir), wakes_before, "a ping thawed the compute");
    assert_eq!(answered(), answered_before + 5);
    // The keepalive query the compute answered on this connection before is answered again
    // by the relay, with the compute's own result: still frozen.
    assert_eq!(raw::one_row(&mut c, "SELECT 1").as_deref(), Some("1"));
    assert_eq!(relay.state(), "frozen");
    assert_eq!(
        wakes(&dir),
        wakes_before,
        "the keepalive query thawed the compute"
    );
    assert_eq!(
        relay.metric("relay_parked_answers_total{instance=\"demo\",kind=\"keepalive_query\"}"),
        1.0
    );
    // A query thaws it, on the same session.
    assert_eq!(raw::one_row(&mut c, "SELECT 2").as_deref(), Some("2"));
    assert_eq!(relay.compute_pid(), Some(pid));
}

/// Whether a pool program pings on its own while it waits (a keepalive), or only when it
/// checks a connection out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keepalive {
    AtCheckout,
    Running,
}

/// Runs a pool program ([`tests::pools`]) and checks what parking promises a real pool: the
/// instance parks with the pool open, a running keepalive neither keeps it running nor thaws
/// it, and the pool's next query runs on the same session of the same compute. Returns how
/// many pings the relay answered while the compute was frozen.
fn a_pool_parks_and_keeps_its_session(name: &str, program: Command, keepalive: Keepalive) -> f64 {
    let dir = TempDir::new(name);
    let relay = start(&dir);
    let pool = tests::pools::Pool::start(name, program, relay.port);
    let pid = relay.compute_pid().unwrap();

    relay.wait_state("frozen", Duration::from_secs(60));
    assert!(frozen(pid));
    let answered = || relay.metric("relay_parked_answers_total{instance=\"demo\",kind=\"ping\"}");
    let pings = answered();
    if keepalive == Keepalive::Running {
        assert!(
            Relay::wait_until(Duration::from_secs(30), || answered() >= pings + 5.0),
            "the keepalive's pings answered while parked: {}\n{}",
            answered() - pings,
            relay.log()
        );
        assert_eq!(relay.state(), "frozen", "no thaw for a keepalive");
        assert!(frozen(pid));
    }
    let first = pool.first.clone();
    assert_eq!(pool.finish(), first, "the same session");
    assert_eq!(relay.compute_pid(), Some(pid), "thawed, not restarted");
    answered() - pings
}

/// SQLAlchemy's QueuePool on PyMySQL with `pool_pre_ping` (a `COM_PING` at every checkout):
/// the pre-ping of the checkout after the quiet spell is answered by the relay while the
/// compute is still frozen; the query then thaws it. (SQLAlchemy sends nothing while the
/// application is quiet; at check-in it sends a ROLLBACK, which is a command and restarts the
/// idle clock.)
#[test]
fn a_sqlalchemy_pool_with_pre_ping_parks_and_keeps_its_session() {
    let answered = a_pool_parks_and_keeps_its_session(
        "parking-sqlalchemy",
        tests::pools::sqlalchemy(),
        Keepalive::AtCheckout,
    );
    assert_eq!(answered, 1.0, "the pre-ping was answered while parked");
}

/// Node's `mysql2` `createPool`: an idle pooled connection is parked and reused.
#[test]
fn a_node_mysql2_pool_parks_and_keeps_its_session() {
    a_pool_parks_and_keeps_its_session(
        "parking-mysql2",
        tests::pools::mysql2(),
        Keepalive::AtCheckout,
    );
}

/// HikariCP (Debian's 2.7) on MariaDB Connector/J: the checkout after the quiet spell checks
/// the idle connection with `isValid()` (a `COM_PING`), answered by the relay while the compute
/// is still frozen; the query then thaws it, on the same session.
#[test]
fn a_hikaricp_pool_parks_and_keeps_its_session() {
    let answered = a_pool_parks_and_keeps_its_session(
        "parking-hikaricp",
        tests::pools::hikaricp(),
        Keepalive::AtCheckout,
    );
    assert_eq!(
        answered, 1.0,
        "the checkout's isValid() was answered while parked"
    );
}

/// Go's `database/sql` on go-sql-driver/mysql, kept alive with `db.Ping()` every 200 ms as Go
/// services do: the instance parks although the pings never stop, they are answered without a
/// thaw, and the next query runs on the same session.
#[test]
fn a_go_pool_with_a_running_keepalive_parks_and_keeps_its_session() {
    a_pool_parks_and_keeps_its_session("parking-go", tests::pools::go(), Keepalive::Running);
}
