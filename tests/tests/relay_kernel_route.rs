//! The kernel route (`route = "nftables"`) end to end: a real relay and server-shim,
//! the kernel's own nftables and conntrack state read back with `nft -j`. Needs root (or
//! CAP_NET_ADMIN) and Debian's `nftables` package, which `scripts/test` installs; without them
//! every test here fails with a message saying so, never skips.
//!
//! Each relay gets its own table (`relay.nftables_table`, named after the test process and a
//! counter), and a guard deletes it when the test ends, whether it passed or not.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, mariadb, raw};

/// A table name of this test process, deleted from the kernel on drop (even on a panic).
struct TableGuard(String);

impl TableGuard {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        Self(format!(
            "perceptron_t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        let _ = nft(&["delete", "table", "inet", &self.0]);
    }
}

/// Runs `nft args`: `(success, stdout + stderr)`. Panics with what to do when `nft` is missing.
fn nft(args: &[&str]) -> (bool, String) {
    let out = Command::new("nft").args(args).output().unwrap_or_else(|e| {
        panic!(
            "cannot run nft ({e}): the kernel-route tests need Debian's nftables package \
             (apt-get install nftables; scripts/test installs it) and root"
        )
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Fails the test, with the kernel's answer, unless this process may create an nftables table.
fn require_nftables() {
    let probe = TableGuard::new();
    let (ok, text) = nft(&["add", "table", "inet", &probe.0]);
    assert!(
        ok,
        "the kernel refused an nftables table ({}): the kernel-route tests need root (or \
         CAP_NET_ADMIN) and a kernel with nf_tables",
        text.trim()
    );
}

fn table_exists(table: &str) -> bool {
    let (ok, text) = nft(&["list", "tables"]);
    assert!(ok, "nft list tables: {text}");
    text.lines()
        .any(|l| l.trim() == format!("table inet {table}"))
}

/// Whether the kernel holds the element routing `127.0.0.1:port` to `127.0.0.1:compute` in
/// the relay's map (read back as JSON, as the kernel reports it: a leased element's key comes
/// with its timeout and what is left of it).
fn route_installed(table: &str, port: u16, compute: u16) -> bool {
    let (ok, json) = nft(&["-j", "list", "map", "inet", table, "dnat4"]);
    assert!(ok, "nft -j list map: {json}");
    let key = format!("{{\"concat\": [\"127.0.0.1\", {port}]}}");
    let value = format!("{{\"concat\": [\"127.0.0.1\", {compute}]}}]");
    json.split("[{\"elem\": {\"val\": ")
        .skip(1)
        .any(|elem| elem.starts_with(&key) && elem.contains(&value))
}

/// Any element at all in the relay's maps.
fn any_route(table: &str) -> bool {
    let (ok, json) = nft(&["-j", "list", "table", "inet", table]);
    assert!(ok, "nft -j list table: {json}");
    json.contains("\"elem\"")
}

fn kernel_relay(dir: &TempDir, table: &TableGuard, idle: &'static str) -> Relay {
    kernel_relay_with(dir, table, idle, "")
}

fn kernel_relay_with(
    dir: &TempDir,
    table: &TableGuard,
    idle: &'static str,
    instance_toml: &str,
) -> Relay {
    require_nftables();
    Relay::start(
        dir.path(),
        RelayOptions {
            idle_pause_after: idle,
            relay_toml: format!("nftables_table = \"{}\"\n", table.0),
            instance_toml: format!("route = \"nftables\"\n{instance_toml}"),
            ..RelayOptions::default()
        },
    )
}

/// The relay's pump forwarded no connection: the kernel routed every one.
#[track_caller]
fn nothing_pumped(relay: &Relay) {
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        0.0,
        "the pump forwarded a connection the kernel should have routed"
    );
}

fn login_and_select(port: u16) -> Result<(), String> {
    let mut s = raw::login(port, USER, PASSWORD, None)
        .map_err(|e| format!("login: {e}"))?
        .map_err(|(code, m)| format!("login refused: {code} {m}"))?;
    match raw::query(&mut s, "SELECT 1").map_err(|e| format!("query: {e}"))? {
        Ok(rows) if rows == [Some("1".to_owned())] => Ok(()),
        other => Err(format!("SELECT 1 gave {other:?}")),
    }
}

#[test]
fn kernel_route_exists_exactly_while_running() {
    let dir = TempDir::new("kr-exists");
    let table = TableGuard::new();
    let mut relay = kernel_relay(&dir, &table, "5m");
    assert!(
        table_exists(&table.0),
        "the relay creates its table at start"
    );
    assert!(!any_route(&table.0), "paused: no route");

    // The first login wakes the instance through the perceptron; the route goes in.
    let out = mariadb(relay.port, USER, Some(PASSWORD), &[], "SELECT 1");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(relay.state(), "running");
    assert!(route_installed(&table.0, relay.port, relay.compute_port));

    // The next logins reach the compute straight from the kernel: the compute sees them as
    // direct logins, and the relay's pump forwards nothing.
    for _ in 0..3 {
        login_and_select(relay.port).unwrap();
    }
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay
            .log_count("route=\"direct\"")
            >= 3),
        "the compute logged no direct logins:\n{}",
        relay.log()
    );
    nothing_pumped(&relay);
    assert_eq!(
        relay.metric(
            "relay_kernel_route_changes_total{instance=\"demo\",action=\"install\",outcome=\"ok\"}"
        ),
        1.0
    );

    relay.pause();
    assert_eq!(relay.state(), "paused");
    assert!(!any_route(&table.0), "paused again: the route is gone");
    // Paused, a connection reaches the relay's own greeting again (and wakes it).
    login_and_select(relay.port).unwrap();
    assert!(route_installed(&table.0, relay.port, relay.compute_port));

    relay.stop();
    assert!(
        !table_exists(&table.0),
        "the relay deletes its table at exit"
    );
}

/// The route outlives its lease while the instance runs: each renewal sets the element's
/// expiry afresh (in place where the kernel can, installed again where it cannot), and the
/// relay counts how long each took.
#[test]
fn a_running_instances_route_outlives_its_lease() {
    let dir = TempDir::new("kr-lease");
    let table = TableGuard::new();
    let relay = kernel_relay(&dir, &table, "5m");
    login_and_select(relay.port).unwrap();
    assert!(route_installed(&table.0, relay.port, relay.compute_port));
    // Renewed every 2 s: six renewals take longer than the 10 s lease, and the route is there
    // at every look meanwhile (a renewal that left the expiry running would let it lapse, and
    // the next renewal add it again, a few hundred milliseconds later).
    let renewals = "relay_kernel_route_renewal_seconds_count{instance=\"demo\"}";
    let renewed = Relay::wait_until(Duration::from_secs(60), || {
        assert!(
            route_installed(&table.0, relay.port, relay.compute_port),
            "the route lapsed while the instance ran\n{}",
            relay.log()
        );
        relay.metric(renewals) >= 6.0
    });
    assert!(renewed, "{}", relay.log());
    assert!(!relay.logged("cannot renew"), "{}", relay.log());
    login_and_select(relay.port).unwrap();
    nothing_pumped(&relay);
}

#[test]
fn pause_resume_cycles_under_continuous_connects_lose_no_connection() {
    let dir = TempDir::new("kr-cycles");
    let table = TableGuard::new();
    let relay = kernel_relay(&dir, &table, "5m");
    login_and_select(relay.port).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, done, port) = (Arc::clone(&stop), Arc::clone(&done), relay.port);
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match login_and_select(port) {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failures.push(e),
                    }
                }
                failures
            })
        })
        .collect();

    const CYCLES: usize = 4;
    for cycle in 0..CYCLES {
        assert!(
            Relay::wait_until(Duration::from_secs(60), || relay.state() == "running"),
            "cycle {cycle}: never running again:\n{}",
            relay.log()
        );
        // Unforced: retried until the clients leave a moment with nothing open.
        relay.pause();
    }
    // Connections keep arriving after the last pause and wake it once more.
    let before = done.load(Ordering::Relaxed);
    assert!(Relay::wait_until(Duration::from_secs(60), || done
        .load(Ordering::Relaxed)
        > before + 20));
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let total = done.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} of {} connections failed across {CYCLES} pauses: {:?}\nlog:\n{}",
        failures.len(),
        total + failures.len(),
        failures.iter().take(5).collect::<Vec<_>>(),
        relay.log()
    );
    let removed = relay.metric(
        "relay_kernel_route_changes_total{instance=\"demo\",action=\"remove\",outcome=\"ok\"}",
    );
    assert!(
        removed >= CYCLES as f64,
        "{removed} removals for {CYCLES} pauses"
    );
    assert!(
        relay.log_count("route=\"direct\"") > 0,
        "no connection took the kernel route"
    );
    assert!(
        relay.log_count("relayed login accepted") > CYCLES,
        "connections during the pauses must have been held by the perceptron"
    );
}

#[test]
fn a_crashed_relays_route_expires_and_a_restart_clears_the_stale_table() {
    let dir = TempDir::new("kr-crash");
    let table = TableGuard::new();
    let mut relay = kernel_relay(&dir, &table, "5m");
    login_and_select(relay.port).unwrap();
    assert!(route_installed(&table.0, relay.port, relay.compute_port));

    relay.child.kill9();
    assert!(
        table_exists(&table.0),
        "SIGKILL leaves the table behind (what the next start must clear)"
    );
    // But not the route: nobody renews its lease, so the kernel expires it and the compute
    // (which the dead relay no longer watches) is not reached through it.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || !route_installed(
            &table.0,
            relay.port,
            relay.compute_port
        )),
        "the route outlived the relay that controlled it"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", relay.port)).is_err(),
        "with no relay and no route, nothing answers on the instance's port"
    );
    // Something stale that no instance of the next relay owns.
    let (ok, text) = nft(&[
        "add",
        "element",
        "inet",
        &table.0,
        "dnat4",
        "{ 127.0.0.2 . 9 : 127.0.0.1 . 9 }",
    ]);
    assert!(ok, "{text}");

    let restarted = relay.restart();
    // `restart` waits for a greeting on the port, which the stale route answers from the
    // compute itself: the new relay is up once its admin API answers (after the table).
    assert!(
        Relay::wait_until(Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", restarted.admin_port)).is_ok()
        }),
        "the restarted relay never answered:\n{}",
        restarted.log()
    );
    assert!(
        !nft(&["-j", "list", "map", "inet", &table.0, "dnat4"])
            .1
            .contains("127.0.0.2"),
        "the stale element survived the restart"
    );
    // The compute the crashed relay started is adopted, and routed again.
    assert_eq!(restarted.state(), "running");
    assert!(route_installed(
        &table.0,
        restarted.port,
        restarted.compute_port
    ));
    login_and_select(restarted.port).unwrap();
}

#[test]
fn bare_connects_through_the_kernel_route_do_not_keep_the_instance_awake() {
    let dir = TempDir::new("kr-bare");
    let table = TableGuard::new();
    let relay = kernel_relay(&dir, &table, "3s");
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    assert!(route_installed(&table.0, relay.port, relay.compute_port));
    // A bot connects every 300 ms and holds each connection 1.5 s without sending a byte, so
    // one is always open: the instance still pauses once idle (and the pause does not wait
    // for them).
    let mut connects = 0;
    let mut held: std::collections::VecDeque<(Instant, std::net::TcpStream)> =
        std::collections::VecDeque::new();
    let paused = Relay::wait_until(Duration::from_secs(60), || {
        while held
            .front()
            .is_some_and(|(at, _)| at.elapsed() > Duration::from_millis(1_500))
        {
            held.pop_front();
        }
        let due = held
            .back()
            .is_none_or(|(at, _)| at.elapsed() >= Duration::from_millis(300));
        if due && let Ok(c) = std::net::TcpStream::connect(("127.0.0.1", relay.port)) {
            connects += 1;
            held.push_back((Instant::now(), c));
        }
        relay.state() == "paused"
    });
    drop(held);
    assert!(
        paused,
        "{connects} bare connects kept the instance awake:\n{}",
        relay.log()
    );
    assert!(connects >= 3, "only {connects} connects");
    assert!(!any_route(&table.0));
}

/// Without parking (`park = false`), a routed session holds the instance running however
/// quiet it is.
#[test]
fn auto_pause_counts_connections_only_the_kernel_saw() {
    let dir = TempDir::new("kr-idle");
    let table = TableGuard::new();
    // 5 s: long enough that a loaded machine does not pause it between the resume and the
    // login below; the session is then watched for more than two idle periods.
    let relay = kernel_relay_with(&dir, &table, "5s", "park = false\n");
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    assert!(route_installed(&table.0, relay.port, relay.compute_port));

    // One session through the kernel, idle for several idle periods: never paused.
    let mut session = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(12) {
        assert_eq!(
            relay.state(),
            "running",
            "paused with a direct connection open:\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, status) = relay.admin("GET", "/v1/instances");
    assert!(
        status.contains("\"kernel\": 1"),
        "the relay counts the session it never saw: {status}"
    );
    assert_eq!(
        relay.metric("relay_kernel_route_connections{instance=\"demo\"}"),
        1.0
    );
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        0.0
    );
    // The session still works: the relay never touched it.
    assert_eq!(
        raw::query(&mut session, "SELECT 2").unwrap(),
        Ok(vec![Some("2".to_owned())])
    );

    drop(session);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "never paused once the direct connection closed:\n{}",
        relay.log()
    );
    assert!(!any_route(&table.0));
}

#[test]
fn refuses_to_start_without_cap_net_admin_naming_the_instance() {
    let dir = TempDir::new("kr-nocap");
    let table = TableGuard::new();
    // A working relay first (key, data, config), then the same config without the capability:
    // `setpriv` (util-linux) drops CAP_NET_ADMIN from the bounding set before the exec.
    let mut relay = kernel_relay(&dir, &table, "5m");
    relay.stop();
    let out = Command::new("setpriv")
        .args(["--bounding-set", "-net_admin"])
        .arg(tests::bin_path("relay"))
        .args(["run", "--config"])
        .arg(dir.path().join("relay.toml"))
        .output()
        .unwrap_or_else(|e| panic!("setpriv (util-linux): {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started without CAP_NET_ADMIN: {stderr}"
    );
    assert!(
        stderr.contains("relay: instance 'demo': route = \"nftables\" needs CAP_NET_ADMIN"),
        "{stderr}"
    );
    assert!(
        !table_exists(&table.0),
        "nothing created without the capability"
    );
}

/// Parking on the kernel route (docs/parking.md): a session the relay never sees, quiet, is
/// parked (the compute frozen under it, the route gone); its next command, the first byte the
/// compute's socket receives, thaws the same compute and is answered on the same session. A
/// response the client has not taken in yet holds the instance running.
#[test]
fn an_idle_routed_session_is_parked_and_its_next_command_thaws_the_compute() {
    let dir = TempDir::new("kr-park");
    let table = TableGuard::new();
    let relay = kernel_relay(&dir, &table, "2s");
    let (status, body) = relay.admin("POST", "/v1/instances/demo/resume");
    assert_eq!(status, 200, "{body}");
    assert!(route_installed(&table.0, relay.port, relay.compute_port));
    let mut s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    let id = raw::one_row(&mut s, "SELECT CONNECTION_ID()");
    let pid = relay.compute_pid().unwrap();

    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "frozen"),
        "never parked: {}\n{}",
        relay.state(),
        relay.log()
    );
    assert!(tests::cgroup::frozen(pid), "the kernel reports it frozen");
    assert!(!any_route(&table.0), "no route while frozen");
    let (_, status) = relay.admin("GET", "/v1/instances");
    assert!(status.contains("\"parked_connections\": 1"), "{status}");

    // The next command thaws the same compute, on the same session, and the route is back.
    assert_eq!(raw::one_row(&mut s, "SELECT 5").as_deref(), Some("5"));
    assert_eq!(raw::one_row(&mut s, "SELECT CONNECTION_ID()"), id);
    assert_eq!(relay.compute_pid(), Some(pid), "thawed, not restarted");
    // The compute answers as soon as it is thawed; the relay reinstalls the route, then
    // counts it running.
    assert!(Relay::wait_until(Duration::from_secs(30), || relay.state() == "running"));
    assert!(route_installed(&table.0, relay.port, relay.compute_port));
    assert_eq!(
        relay.metric("relay_direct_connections_total{instance=\"demo\",outcome=\"forwarded\"}"),
        0.0,
        "the session never passed through the relay"
    );

    // A result far larger than the sockets' buffers, left unread: the compute cannot finish
    // sending it, so the session is busy however long the client waits.
    raw::send_large_result_query(&mut s).unwrap();
    let running = Relay::holds_for(Duration::from_secs(6), || relay.state() == "running");
    assert!(running, "parked mid-result:\n{}", relay.log());
    assert_eq!(raw::read_large_result(&mut s), raw::LARGE_RESULT_ROWS);
    // Quiet again: parked again; closing the session while parked lets the compute stop.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "frozen"),
        "{}",
        relay.log()
    );
    drop(s);
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "the compute outlived its last parked session: {}\n{}",
        relay.state(),
        relay.log()
    );
}

/// Parking on the kernel route in front of a stock MariaDB (switch mode): a `SELECT SLEEP(4)`
/// that has not answered is a command outstanding (the conntrack mark says the client spoke
/// last) and is never frozen, though the relay sees none of its bytes; once it has answered,
/// the quiet session parks, and its next query thaws the same mariadbd on the same session.
#[test]
fn a_routed_mariadb_session_in_a_sleep_is_never_frozen_and_parks_after_it() {
    let dir = TempDir::new("kr-park-maria");
    let table = TableGuard::new();
    require_nftables();
    let relay = tests::mariadb::switch_relay(
        dir.path(),
        &[],
        RelayOptions {
            idle_pause_after: "2s",
            relay_toml: format!("nftables_table = \"{}\"\n", table.0),
            instance_toml: "route = \"nftables\"\n".into(),
            ..RelayOptions::default()
        },
    );
    let setup = mariadb(
        relay.port,
        "root",
        None,
        &[],
        "CREATE USER nat@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('nat-pw');\
         GRANT ALL ON *.* TO nat@'%';",
    );
    assert_eq!(setup.code, Some(0), "{}\n{}", setup.stderr, relay.log());
    assert!(Relay::wait_until(Duration::from_secs(30), || {
        route_installed(&table.0, relay.port, relay.compute_port)
    }));
    let mut s = raw::login(relay.port, "nat", "nat-pw", None)
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(30))))
        .unwrap();
    let id = raw::one_row(&mut s, "SELECT CONNECTION_ID()");
    let pid = relay.compute_pid().unwrap();

    raw::write_packet(&mut s, 0, b"\x03SELECT SLEEP(4)").unwrap();
    // Within the SLEEP's 4 s (the window is not stretched on a loaded machine: the SLEEP is not).
    let running = Relay::holds_for(Duration::from_millis(3500), || relay.state() == "running");
    assert!(running, "frozen mid-query:\n{}", relay.log());
    let (_, columns) = raw::read_packet(&mut s).unwrap();
    assert_eq!(columns, [1], "the SLEEP's answer");
    loop {
        let (_, p) = raw::read_packet(&mut s).unwrap();
        if p.first() == Some(&0xFE) && p.len() < 9 && p.len() > 1 {
            // The EOF after the column definition, then the row, then this one.
            let (_, row) = raw::read_packet(&mut s).unwrap();
            assert_eq!(row, b"\x010");
            let (_, eof) = raw::read_packet(&mut s).unwrap();
            assert_eq!(eof.first(), Some(&0xFE));
            break;
        }
    }

    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "frozen"),
        "never parked: {}\n{}",
        relay.state(),
        relay.log()
    );
    assert!(tests::cgroup::frozen(pid));
    assert_eq!(raw::one_row(&mut s, "SELECT CONNECTION_ID()"), id);
    assert_eq!(relay.compute_pid(), Some(pid), "thawed, not restarted");
}
