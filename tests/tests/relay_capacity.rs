//! Compute capacity end to end, with the kernel's own cgroup files read back: the
//! autoscaler raises a CPU-bound compute's quota and lowers it after the quiet window while its
//! client stays connected and every query succeeds; a pause freezes the compute (same process,
//! its connections kept) and a login or a query on an open connection thaws it; `stop_after`
//! stops a compute that stayed frozen; a relay restarted while its compute is frozen adopts it.
//! Needs root and cgroups, as CI has.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tests::cgroup::frozen;
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, raw};

/// The compute's CPU quota in microseconds per 100 ms period, read from the kernel.
fn cpu_quota_us(pid: u32) -> u64 {
    let dir = tests::cgroup::dir(pid, "cpu");
    let text = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
        .or_else(|_| std::fs::read_to_string(dir.join("cpu.max")))
        .unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_scaler_raises_the_quota_under_load_and_lowers_it_after_the_quiet_window() {
    let dir = TempDir::new("capacity-scale");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml: "capacity = { min_ccu = 0.25, max_ccu = 1, resume_ccu = 0.25, \
                            scale_down_after = \"3s\" }\n"
                .into(),
            ..RelayOptions::default()
        },
    );
    let mut s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    let pid = relay.compute_pid().unwrap();
    assert_eq!(cpu_quota_us(pid), 25_000, "a wake starts at resume_ccu");

    // A CPU-bound load on one connection, until told to stop; every query must succeed.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let load = {
        let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
        let port = relay.port;
        std::thread::spawn(move || {
            let mut c = raw::login(port, USER, PASSWORD, None).unwrap().unwrap();
            while !stop.load(Ordering::Relaxed) {
                let sum = raw::one_row(
                    &mut c,
                    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c \
                     WHERE x < 400000) SELECT SUM(x) FROM c",
                );
                assert_eq!(sum.as_deref(), Some("80000200000"));
                done.fetch_add(1, Ordering::Relaxed);
            }
            c
        })
    };
    let t0 = Instant::now();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || cpu_quota_us(pid) > 25_000),
        "never scaled up:\n{}",
        relay.log()
    );
    let up = t0.elapsed();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || cpu_quota_us(pid) == 100_000),
        "never reached max_ccu: quota {}\n{}",
        cpu_quota_us(pid),
        relay.log()
    );
    stop.store(true, Ordering::Relaxed);
    let mut c = load.join().unwrap();
    let t1 = Instant::now();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || cpu_quota_us(pid) == 25_000),
        "never scaled down: quota {}\n{}",
        cpu_quota_us(pid),
        relay.log()
    );
    let down = t1.elapsed();
    eprintln!(
        "scale-up reaction {} ms (first step), scale-down {} ms after the load stopped \
         (window 3 s), {} queries",
        up.as_millis(),
        down.as_millis(),
        done.load(Ordering::Relaxed)
    );
    // No connection was cut: both sessions still answer, on the same compute.
    assert_eq!(raw::one_row(&mut c, "SELECT 1").as_deref(), Some("1"));
    assert_eq!(raw::one_row(&mut s, "SELECT 2").as_deref(), Some("2"));
    assert_eq!(relay.compute_pid(), Some(pid));
    // The ledger billed capacity: CCU-seconds reported next to the running seconds.
    let (code, body) = relay.admin("GET", "/v1/usage");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"ccu_seconds\":"), "{body}");
    let (_, status) = relay.admin("GET", "/v1/instances");
    assert!(status.contains("\"ccu\": 0.25"), "{status}");
}

#[test]
fn a_pause_freezes_and_a_login_or_a_query_thaws_the_same_compute() {
    let dir = TempDir::new("capacity-freeze");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml: "stop_after = \"10m\"\n".into(),
            ..RelayOptions::default()
        },
    );
    let mut idle = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    let pid = relay.compute_pid().unwrap();
    assert!(!frozen(pid));
    // The wake's readiness probe opened the login's connection to the compute.
    let opened_by = |who: &str| {
        relay.metric(&format!(
            "relay_compute_connections_total{{instance=\"demo\",opened_by=\"{who}\"}}"
        ))
    };
    assert_eq!((opened_by("wake"), opened_by("login")), (1.0, 0.0));

    // Paused with a connection open: frozen, not stopped.
    let (code, body) = relay.admin("POST", "/v1/instances/demo/pause?force=true");
    assert_eq!(code, 200, "{body}");
    relay.wait_state("frozen", Duration::from_secs(60));
    assert!(frozen(pid), "the kernel reports the compute frozen");
    assert!(tests::relay::pid_alive(pid));

    // A new login thaws it: the same process, and the open connection works again.
    let t = Instant::now();
    let mut fresh = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    eprintln!("frozen → login OK in {} ms", t.elapsed().as_millis());
    assert_eq!(relay.state(), "running");
    assert!(!frozen(pid));
    assert_eq!(relay.compute_pid(), Some(pid));
    // The login opened its own connection this time, during the thaw (the frozen compute's
    // kernel completed it).
    assert_eq!((opened_by("wake"), opened_by("login")), (1.0, 1.0));
    assert_eq!(raw::one_row(&mut idle, "SELECT 3").as_deref(), Some("3"));
    assert_eq!(raw::one_row(&mut fresh, "SELECT 4").as_deref(), Some("4"));
    drop(fresh);

    // Frozen again; a query on the connection that stayed open thaws it by itself.
    let (code, body) = relay.admin("POST", "/v1/instances/demo/pause?force=true");
    assert_eq!(code, 200, "{body}");
    relay.wait_state("frozen", Duration::from_secs(60));
    idle.set_read_timeout(Some(tests::scaled(Duration::from_secs(20))))
        .unwrap();
    assert_eq!(raw::one_row(&mut idle, "SELECT 5").as_deref(), Some("5"));
    // The thawed compute can answer before the relay has recorded the thaw (the route is
    // installed first), so the state may still say resuming for a moment.
    relay.wait_state("running", Duration::from_secs(10));
    assert_eq!(relay.compute_pid(), Some(pid));
}

#[test]
fn a_compute_frozen_for_stop_after_is_stopped() {
    let dir = TempDir::new("capacity-stop-after");
    let relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml: "stop_after = \"1s\"\n".into(),
            ..RelayOptions::default()
        },
    );
    drop(
        raw::login(relay.port, USER, PASSWORD, None)
            .unwrap()
            .unwrap(),
    );
    let pid = relay.compute_pid().unwrap();
    assert_eq!(
        relay.admin("POST", "/v1/instances/demo/pause?force=true").0,
        200
    );
    relay.wait_state("paused", Duration::from_secs(60));
    assert!(
        Relay::wait_until(Duration::from_secs(60), || !tests::relay::pid_alive(pid)),
        "the frozen compute was not stopped"
    );
    // The ledger went running → pausing → frozen → pausing → paused.
    let ledger = std::fs::read_to_string(dir.path().join("state/usage.ledger")).unwrap();
    let states: Vec<&str> = ledger.lines().filter_map(|l| l.split(' ').nth(2)).collect();
    assert!(
        states.ends_with(&["running", "pausing", "frozen", "pausing", "paused"]),
        "{ledger}"
    );
    // A login starts a new compute.
    drop(
        raw::login(relay.port, USER, PASSWORD, None)
            .unwrap()
            .unwrap(),
    );
    assert_ne!(relay.compute_pid(), Some(pid));
}

#[test]
fn a_relay_restarted_while_its_compute_is_frozen_adopts_it() {
    let dir = TempDir::new("capacity-adopt-frozen");
    let mut relay = Relay::start(
        dir.path(),
        RelayOptions {
            instance_toml: "stop_after = \"10m\"\n".into(),
            ..RelayOptions::default()
        },
    );
    drop(
        raw::login(relay.port, USER, PASSWORD, None)
            .unwrap()
            .unwrap(),
    );
    let pid = relay.compute_pid().unwrap();
    assert_eq!(
        relay.admin("POST", "/v1/instances/demo/pause?force=true").0,
        200
    );
    relay.wait_state("frozen", Duration::from_secs(60));
    relay.child.kill9();
    let relay = relay.restart();
    assert_eq!(relay.state(), "frozen", "{}", relay.log());
    assert!(frozen(pid));
    let mut s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    assert_eq!(relay.compute_pid(), Some(pid), "thawed, not restarted");
    assert_eq!(raw::one_row(&mut s, "SELECT 6").as_deref(), Some("6"));
    // The ledger recorded no new wake-up: frozen, then resuming and running after the login.
    let ledger = std::fs::read_to_string(dir.path().join("state/usage.ledger")).unwrap();
    let states: Vec<&str> = ledger.lines().filter_map(|l| l.split(' ').nth(2)).collect();
    assert!(
        states.ends_with(&["frozen", "resuming", "running"]),
        "{ledger}"
    );
}
