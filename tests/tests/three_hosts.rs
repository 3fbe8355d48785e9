//! The relay on a host of its own: client, relay and compute each in a network namespace of
//! their own (`tests::hosts::ThreeHosts`), the relay's host routing between the client's link
//! and the compute's, as in production, where every other test has all three on loopback.
//! A connection that wakes its instance is held and spliced in the kernel below TCP across
//! hosts (each segment rewritten and sent on from the relay host's interfaces, with GRO on
//! them or off), the kernel route sends direct connections to the compute's host, and an
//! idle session is parked and found again.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use tests::hosts::ThreeHosts;
use tests::relay::{PASSWORD, Relay, RelayOptions, USER, logged_number};
use tests::{TempDir, raw, scaled};

fn relay_on_its_own_host(dir: &TempDir, hosts: &Arc<ThreeHosts>, options: RelayOptions) -> Relay {
    Relay::start(
        dir.path(),
        RelayOptions {
            hosts: Some(Arc::clone(hosts)),
            ..options
        },
    )
}

/// Logs in from the client's host to the relay's.
fn login(relay: &Relay) -> TcpStream {
    let s = TcpStream::connect((relay.host, relay.port)).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(60))))
        .unwrap();
    raw::login_on(s, USER, PASSWORD, None)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}\n{}", relay.log()))
}

/// Sends the commands after which a held session is spliced, and waits for it to be, where
/// the relay can splice: whether it can.
fn used_until_spliced(relay: &Relay, s: &mut TcpStream) -> bool {
    for _ in 0..8 {
        assert_eq!(raw::one_row(s, "SELECT 1 + 1").as_deref(), Some("2"));
    }
    let spliced = relay.logged("held connections are spliced in the kernel");
    if spliced {
        assert_eq!(
            relay.metric_reaching("relay_spliced_sessions{instance=\"demo\"}", 1.0),
            1.0,
            "{}",
            relay.log()
        );
    }
    spliced
}

/// The session answers a query.
#[track_caller]
fn answers(relay: &Relay, s: &mut TcpStream) {
    let answer = raw::query(s, "SELECT 40 + 2");
    assert!(
        matches!(&answer, Ok(Ok(rows)) if rows == &[Some("42".to_owned())]),
        "{answer:?}\n{}",
        relay.log()
    );
}

/// Where the connection came from, as the compute saw it (`USER()`'s host part).
fn seen_from(s: &mut TcpStream) -> String {
    let user = raw::one_row(s, "SELECT USER()").unwrap();
    user.rsplit('@').next().unwrap().to_owned()
}

/// A paused instance wakes for a client on another host; its held connection is spliced in
/// the kernel after a few commands, below TCP (its segments rewritten at the relay host's
/// interfaces and sent on from there), carries a 61 MB result whole, and closes cleanly.
fn a_held_connection_across_hosts_is_spliced_below_tcp(gro: bool) {
    let hosts = Arc::new(ThreeHosts::create());
    hosts.relay_gro(gro);
    held_across_hosts(&hosts, true);
}

/// A held connection whose compute the relay's host reaches through a NAT (a service
/// address): its segments on the wire do not carry the addresses of the relay's socket, so
/// it is spliced through its sockets, not below TCP, and carries the same bytes.
#[test]
fn a_held_connection_to_a_compute_behind_a_nat_is_spliced_through_its_sockets() {
    let hosts = Arc::new(ThreeHosts::behind_nat());
    held_across_hosts(&hosts, false);
}

/// Where the client's segments arrive by another link than the relay's go back by (routing
/// that is not symmetric), the splice below TCP, attached where the route to the client
/// leaves, does not see them: the relay finds them at its own socket, backs the splice out
/// (nothing was rewritten yet), and the session goes on on the pump, whole.
#[test]
fn a_held_connection_whose_routing_is_not_symmetric_goes_on_on_the_pump() {
    let hosts = Arc::new(ThreeHosts::asymmetric());
    let dir = TempDir::new("three-hosts-asymmetric");
    let relay = relay_on_its_own_host(&dir, &hosts, RelayOptions::default());
    let mut s = login(&relay);
    used_until_spliced(&relay, &mut s);
    raw::send_large_result_query(&mut s).unwrap();
    assert_eq!(raw::read_large_result(&mut s), raw::LARGE_RESULT_ROWS);
    answers(&relay, &mut s);
    drop(s);
    let line = relay.closed_session();
    assert!(line.contains("ended_by=\"eof\""), "{line}");
    if relay.logged("held connections may be spliced in the kernel below TCP") {
        assert!(
            relay.logged("do not pass the splice below TCP"),
            "{}",
            relay.log()
        );
    }
}

/// The held connection of [`a_held_connection_across_hosts_is_spliced_below_tcp`], spliced
/// below TCP where `below` and the relay can (through its sockets otherwise).
fn held_across_hosts(hosts: &Arc<ThreeHosts>, below: bool) {
    let dir = TempDir::new("three-hosts-held");
    let relay = relay_on_its_own_host(
        &dir,
        hosts,
        RelayOptions {
            instance_toml: "park = false\n".into(),
            ..RelayOptions::default()
        },
    );
    assert_eq!(relay.state(), "paused");
    let mut s = login(&relay);
    assert!(relay.logged("resuming"), "{}", relay.log());
    assert!(
        relay.compute_listening(),
        "the compute listens on its own host"
    );
    // The relayed login tells the compute where its client is.
    assert_eq!(seen_from(&mut s), hosts.client.to_string());
    if !used_until_spliced(&relay, &mut s) {
        eprintln!(
            "this kernel cannot splice held connections: carried on the pump\n{}",
            relay.log()
        );
    }
    raw::send_large_result_query(&mut s).unwrap();
    assert_eq!(raw::read_large_result(&mut s), raw::LARGE_RESULT_ROWS);
    assert_eq!(raw::one_row(&mut s, "SELECT 40 + 2").as_deref(), Some("42"));
    drop(s);
    let line = relay.closed_session();
    assert!(line.contains("ended_by=\"eof\""), "{line}");
    let log = relay.log();
    // Below TCP wherever the relay could load that program (attached to both of its links),
    // unless the host translates the connection.
    let loaded = relay.logged("held connections may be spliced in the kernel below TCP");
    assert_eq!(line.contains("below_tcp=true"), below && loaded, "{log}");
    if loaded && !below {
        assert!(relay.logged("this host translates the connection"), "{log}");
    }
    let below = below && loaded;
    if relay.logged("held connections are spliced in the kernel") {
        assert!(line.contains("spliced=true"), "{log}");
    }
    if below {
        for link in ["toclient", "tocompute"] {
            assert!(
                log.lines()
                    .any(|l| l.contains("spliced in the kernel below TCP") && l.contains(link)),
                "{log}"
            );
        }
        assert!(logged_number(&line, "down") > 60_000_000, "{line}");
    }
}

#[test]
fn a_connection_from_another_host_wakes_the_instance_and_is_spliced_below_tcp() {
    a_held_connection_across_hosts_is_spliced_below_tcp(false);
}

/// The same with GRO on the relay host's links: the program sees segments merged into one
/// (up to 64 KB), rewrites their one header, and the interface out splits them again.
#[test]
fn a_held_connection_across_hosts_is_spliced_below_tcp_with_gro_on() {
    a_held_connection_across_hosts_is_spliced_below_tcp(true);
}

/// With the kernel route, the relay's host sends a direct connection to the compute's host
/// itself (DNAT in the relay's namespace), and the relay counts the connection from its host's
/// conntrack table.
#[test]
fn the_kernel_route_sends_a_connection_to_the_compute_on_its_host() {
    let hosts = Arc::new(ThreeHosts::create());
    let dir = TempDir::new("three-hosts-route");
    let relay = relay_on_its_own_host(
        &dir,
        &hosts,
        RelayOptions {
            instance_toml: "route = \"nftables\"\n".into(),
            ..RelayOptions::default()
        },
    );
    let (code, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(code, 200, "{body}");
    assert!(relay.logged("kernel route installed"), "{}", relay.log());
    let mut s = login(&relay);
    // Masqueraded on its way out of the relay's host (the compute's replies must come back
    // through it), so the compute sees the relay's inner address here too; the relay's own
    // count from its host's conntrack table says the kernel carried it.
    assert_eq!(seen_from(&mut s), hosts.relay_inner.to_string());
    assert_eq!(
        relay.metric_reaching("relay_kernel_route_connections{instance=\"demo\"}", 1.0),
        1.0,
        "{}",
        relay.log()
    );
    assert_eq!(raw::one_row(&mut s, "SELECT 40 + 2").as_deref(), Some("42"));
}

/// A session from another host, idle, is parked (its compute frozen under it, on its own
/// host), and its next command thaws the compute and finds it answering; `held`: it woke
/// the instance and was spliced first. The relay and the session's `session closed` line.
fn parked_and_thawed(held: bool, firewall: bool) -> (Relay, String) {
    let (relay, line, _) = parked_and_thawed_on(held, firewall);
    (relay, line)
}

/// [`parked_and_thawed`], and the hosts it ran on.
fn parked_and_thawed_on(held: bool, firewall: bool) -> (Relay, String, Arc<ThreeHosts>) {
    let hosts = Arc::new(ThreeHosts::create());
    if firewall {
        hosts.relay_firewall();
    }
    let dir = TempDir::new("three-hosts-park");
    let relay = relay_on_its_own_host(
        &dir,
        &hosts,
        RelayOptions {
            idle_pause_after: "1s",
            ..RelayOptions::default()
        },
    );
    if !held {
        let (code, body) = relay.admin("POST", "/v1/instances/demo/resume");
        assert_eq!(code, 200, "{body}");
    }
    let mut s = login(&relay);
    if held {
        used_until_spliced(&relay, &mut s);
        // 61 MB while spliced: the connections move far past where the relay host's
        // conntrack last saw them.
        raw::send_large_result_query(&mut s).unwrap();
        assert_eq!(raw::read_large_result(&mut s), raw::LARGE_RESULT_ROWS);
    } else {
        answers(&relay, &mut s);
    }
    relay.wait_state("frozen", Duration::from_secs(60));
    answers(&relay, &mut s);
    assert_eq!(relay.state(), "running");
    drop(s);
    let line = relay.closed_session();
    assert!(line.contains("ended_by=\"eof\""), "{line}");
    (relay, line, hosts)
}

#[test]
fn an_idle_session_from_another_host_is_parked_and_its_next_command_thaws_the_compute() {
    parked_and_thawed(false, false);
}

/// A held session spliced below TCP across hosts is taken back into the relay when idle (new
/// sockets at the connections' sequence numbers) before it is parked.
#[test]
fn a_held_session_spliced_across_hosts_is_taken_back_parked_and_thawed() {
    taken_back_parked_and_thawed(false);
}

/// The same behind a stateful firewall on the relay's host: its conntrack saw none of the
/// spliced segments, and the relay's sockets after the take-back must not look invalid to it.
#[test]
fn a_held_session_taken_back_across_hosts_passes_a_firewall_that_drops_invalid_segments() {
    taken_back_parked_and_thawed(true);
}

fn taken_back_parked_and_thawed(firewall: bool) {
    let (relay, line, hosts) = parked_and_thawed_on(true, firewall);
    if firewall {
        // Not one segment of the session looked invalid to it.
        assert_eq!(hosts.relay_firewall_dropped(), 0, "{}", relay.log());
    }
    if relay.logged("held connections may be spliced in the kernel below TCP") {
        assert!(
            line.contains("below_tcp=true") && !line.contains("taken_back=0"),
            "{}",
            relay.log()
        );
    }
}

/// A resumable session (MariaDB with `perceptron_dual` on the compute's host, issuing
/// tickets) from the client's host wakes the instance, is spliced below TCP across hosts,
/// taken back when idle, and outlives the stop of MariaDB: its next statement finds its
/// database and its row.
#[test]
fn a_resumable_session_from_another_host_is_spliced_below_tcp_and_outlives_a_stop() {
    let hosts = Arc::new(ThreeHosts::create());
    let dir = TempDir::new("three-hosts-resumable");
    let tickets = dir.path().join("tickets.key");
    tests::relay::keygen(&tickets, "tickets-1");
    // The accounts exist before the first greeting: MariaDB answers a host without one (the
    // relay's, here) with error 1130 in place of its greeting.
    let accounts = dir.path().join("accounts.sql");
    std::fs::write(
        &accounts,
        format!(
            "CREATE USER IF NOT EXISTS {USER}@'%' IDENTIFIED VIA perceptron_dual \
             USING PASSWORD('{PASSWORD}');\nGRANT ALL ON *.* TO {USER}@'%';\n\
             CREATE DATABASE IF NOT EXISTS shop;\n\
             CREATE TABLE IF NOT EXISTS shop.orders (id INT AUTO_INCREMENT PRIMARY KEY);\n"
        ),
    )
    .unwrap();
    let relay = tests::mariadb::dual_relay_using(
        dir.path(),
        &[
            &format!("--init-file={}", accounts.display()),
            &format!(
                "--loose-perceptron-dual-ticket-key-file={}",
                tickets.display()
            ),
            "--loose-perceptron-dual-instance=demo",
            "--plugin-load-add=metadata_lock_info.so",
        ],
        RelayOptions {
            hosts: Some(Arc::clone(&hosts)),
            idle_pause_after: "2s",
            instance_toml: "stop_after = \"1s\"\nresumable_sessions = true\n".into(),
            ..RelayOptions::default()
        },
    );
    assert_eq!(relay.state(), "paused");
    let mut s = login(&relay);
    // MariaDB names the connection's peer: the relay's host.
    assert_eq!(seen_from(&mut s), hosts.relay_inner.to_string());
    let spliced = used_until_spliced(&relay, &mut s);
    for sql in ["USE shop", "INSERT INTO orders VALUES ()"] {
        let result = raw::query(&mut s, sql);
        assert!(matches!(result, Ok(Ok(_))), "{sql}: {result:?}");
    }
    relay.carried_across_a_stop(&mut s, relay.compute_pid().unwrap());
    if spliced && relay.logged("held connections may be spliced in the kernel below TCP") {
        for link in ["toclient", "tocompute"] {
            assert!(
                relay
                    .log()
                    .lines()
                    .any(|l| l.contains("below TCP") && l.contains(link)),
                "{}",
                relay.log()
            );
        }
        // Spliced below TCP again on its new compute connection: the client's connection,
        // in new sockets since the take-back, still carries segments of full size.
        let spliced_again = Relay::wait_until(Duration::from_secs(60), || {
            assert_eq!(raw::one_row(&mut s, "SELECT 1 + 1").as_deref(), Some("2"));
            relay.metric("relay_spliced_sessions{instance=\"demo\"}") >= 1.0
        });
        assert!(
            spliced_again && !relay.log().contains("is not spliced below TCP"),
            "{}",
            relay.log()
        );
    }
    drop(s);
    // Its first life ended detached, at the stop; the second at the client's quit.
    let closed = Relay::wait_until(Duration::from_secs(60), || {
        relay
            .log()
            .lines()
            .any(|l| l.contains("session closed") && l.contains("ended_by=\"eof\""))
    });
    assert!(closed, "{}", relay.log());
}
