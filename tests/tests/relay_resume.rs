//! Resumable sessions (docs/parking.md, "Sessions across a stop") end to end on server-shim:
//! a parked pool whose sessions the compute issued tickets for outlives the compute's stop;
//! pings are answered without a wake; the first command wakes the instance once and each
//! session is reattached with its state (database, session and user variables); a session in
//! a transaction keeps the compute frozen instead. Needs root and cgroups, as CI has.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step fails the test"
)]

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use tests::bin_path;
use tests::relay::{PASSWORD, Relay, RelayOptions, USER};
use tests::{TempDir, raw};

/// A relay whose shim issues tickets (its own key, which the relay never reads), parking
/// after 1 s idle and stopping a frozen compute after 1 s.
fn start(dir: &TempDir) -> Relay {
    start_with(dir, &[])
}

/// [`start`], with more arguments for the shim.
fn start_with(dir: &TempDir, shim_args: &[&str]) -> Relay {
    start_with_instance(dir, shim_args, "")
}

/// [`start_with`], with more lines for the relay's `[[instance]]` table.
fn start_with_instance(dir: &TempDir, shim_args: &[&str], instance_toml: &str) -> Relay {
    let ticket_key = dir.path().join("ticket.key");
    tests::relay::keygen(&ticket_key, "tickets-1");
    std::fs::set_permissions(&ticket_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = dir.path();
    Relay::start(
        d,
        RelayOptions {
            idle_pause_after: "1s",
            command: Some(
                vec![
                    bin_path("server-shim").display().to_string(),
                    "run".into(),
                    "--listen".into(),
                    "127.0.0.1:{COMPUTE_PORT}".into(),
                    "--data".into(),
                    d.join("data").display().to_string(),
                    "--key-file".into(),
                    d.join("perceptron.key").display().to_string(),
                    "--ticket-key-file".into(),
                    ticket_key.display().to_string(),
                    "--instance".into(),
                    "demo".into(),
                ]
                .into_iter()
                .chain(shim_args.iter().map(|a| (*a).to_owned()))
                .collect(),
            ),
            instance_toml: format!(
                "stop_after = \"1s\"\nresumable_sessions = true\n{instance_toml}"
            ),
            ..RelayOptions::default()
        },
    )
}

fn connect(relay: &Relay) -> TcpStream {
    let s = raw::login(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    s
}

fn exec(s: &mut TcpStream, sql: &str) {
    assert!(
        matches!(raw::query(s, sql), Ok(Ok(_))),
        "{sql}: {:?}",
        raw::query(s, "SELECT 1")
    );
}

#[test]
fn a_parked_pool_outlives_the_computes_stop_and_resumes_with_its_state_on_one_wake() {
    let dir = TempDir::new("resume-pool");
    let relay = start(&dir);
    let mut a = connect(&relay);
    exec(&mut a, "CREATE DATABASE shop");
    exec(&mut a, "USE shop");
    exec(&mut a, "SET SESSION sql_mode = 'ANSI_QUOTES'");
    let pid = relay.compute_pid().unwrap();

    // Parked, then stopped under the session: the process is gone, the client is not.
    relay.wait_state("paused", Duration::from_secs(60));
    assert!(!tests::relay::pid_alive(pid), "the compute is gone");
    assert!(relay.logged("stopping the frozen compute under resumable sessions"));

    // A ping is answered by the relay, without a wake.
    raw::write_packet(&mut a, 0, &[0x0E]).unwrap();
    let (seq, ok) = raw::read_packet(&mut a).unwrap();
    assert_eq!((seq, ok.first()), (1, Some(&0x00)), "{ok:?}");
    assert_eq!(relay.state(), "paused");
    assert_eq!(relay.log_count("compute spawned"), 1);

    // A new client wakes the instance (its login is relayed: it gets a ticket too); the
    // detached session reattaches to that compute at its next command, with its state.
    let mut b = connect(&relay);
    assert_state(&relay, &mut a);
    assert_eq!(relay.log_count("compute spawned"), 2, "{}", relay.log());

    // Both parked and stopped again; the first command wakes the instance once and each
    // session reattaches at its own next command.
    relay.wait_state("paused", Duration::from_secs(60));
    assert_eq!(raw::one_row(&mut b, "SELECT 7").as_deref(), Some("7"));
    assert_state(&relay, &mut a);
    assert_eq!(relay.log_count("compute spawned"), 3, "{}", relay.log());
    assert_eq!(relay.log_count("session reattached"), 3, "{}", relay.log());
    // The compute logged each reattach as one, with the next ticket.
    assert_eq!(
        relay.log_count("resumed=true ticket=true"),
        3,
        "{}",
        relay.log()
    );
}

/// A pool opened while the instance runs survives a stop too: with resumable sessions every
/// login is the relay's, so every connection has a ticket (before, such a connection took the
/// direct route, got none, and kept the compute frozen for as long as it stayed open).
#[test]
fn connections_opened_while_the_instance_runs_survive_a_stop() {
    let dir = TempDir::new("resume-running");
    let relay = start(&dir);
    relay.resume();
    assert_eq!(relay.state(), "running");
    let mut pool: Vec<TcpStream> = (0..3).map(|_| connect(&relay)).collect();
    for (i, s) in pool.iter_mut().enumerate() {
        exec(s, &format!("SET SESSION interactive_timeout = 1000{i}"));
    }
    let pid = relay.compute_pid().unwrap();
    relay.wait_state("paused", Duration::from_secs(60));
    assert!(!tests::relay::pid_alive(pid), "the compute is gone");
    for (i, s) in pool.iter_mut().enumerate() {
        assert_eq!(
            raw::one_row(s, "SELECT @@interactive_timeout").as_deref(),
            Some(format!("1000{i}").as_str()),
            "{}",
            relay.log()
        );
    }
    assert_eq!(relay.log_count("session reattached"), 3, "{}", relay.log());
    assert_eq!(relay.log_count("compute spawned"), 2, "one wake");
}

#[track_caller]
fn assert_state(relay: &Relay, a: &mut TcpStream) {
    assert_eq!(
        raw::one_row(a, "SELECT DATABASE()").as_deref(),
        Some("shop"),
        "{}",
        relay.log()
    );
    assert_eq!(
        raw::one_row(a, "SELECT @@SESSION.sql_mode").as_deref(),
        Some("ANSI_QUOTES")
    );
}

#[test]
fn a_session_in_a_transaction_keeps_the_compute_frozen() {
    let dir = TempDir::new("resume-txn");
    let relay = start(&dir);
    let mut a = connect(&relay);
    exec(&mut a, "BEGIN");
    exec(&mut a, "SELECT 1");
    let pid = relay.compute_pid().unwrap();
    relay.wait_state("frozen", Duration::from_secs(60));
    // Well past stop_after: still frozen, the session intact.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(relay.state(), "frozen", "{}", relay.log());
    assert!(tests::relay::pid_alive(pid));
    // The status says which connection keeps it frozen, and why.
    let (_, status) = relay.admin("GET", "/v1/instances");
    let client = a.local_addr().unwrap().to_string();
    assert!(
        status.contains(&format!("\"client\": \"{client}\""))
            && status.contains("\"reason\": \"open transaction\""),
        "{status}"
    );
    exec(&mut a, "COMMIT");
    assert_eq!(relay.compute_pid(), Some(pid));
}

/// A real pool ([`tests::pools`]) across a stop: the instance parks it and stops the compute
/// under it; the pool's next checkout and query run on its old connection, reattached to a
/// new compute by the relay (no new login reaches the relay), with one wake.
/// Returns the relay, and its directory (removed when dropped, after the relay).
fn a_pool_survives_a_stop(name: &str, program: std::process::Command) -> (Relay, TempDir) {
    let dir = TempDir::new(name);
    let relay = start(&dir);
    let pool = tests::pools::Pool::start(name, program, relay.port);
    let pid = relay.compute_pid().unwrap();
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "{name}: {}\n{}",
        relay.admin("GET", "/v1/instances").1,
        relay.log()
    );
    assert!(!tests::relay::pid_alive(pid), "the compute is gone");
    let logins = || relay.metric("relay_connections_total{instance=\"demo\",outcome=\"relayed\"}");
    let before = logins();
    let second = pool.finish();
    assert!(second.parse::<u32>().is_ok(), "{second}");
    assert_eq!(
        logins(),
        before,
        "no new login: the pool kept its connection"
    );
    assert_eq!(relay.log_count("session reattached"), 1, "{}", relay.log());
    assert_eq!(relay.log_count("compute spawned"), 2, "one wake");
    (relay, dir)
}

#[test]
fn a_sqlalchemy_pool_survives_a_stop() {
    a_pool_survives_a_stop("resume-sqlalchemy", tests::pools::sqlalchemy());
}

#[test]
fn a_node_mysql2_pool_survives_a_stop() {
    a_pool_survives_a_stop("resume-mysql2", tests::pools::mysql2());
}

/// Server-side prepared statements survive the stop: prepared again on the new compute, the
/// client's ids translated to the new compute's (they differ: the client closed its first
/// statement), and a statement prepared after it gets an id the client does not hold.
#[test]
fn a_pool_of_prepared_statements_survives_a_stop() {
    let (relay, _dir) = a_pool_survives_a_stop("resume-prepared", tests::pools::mysql2_prepared());
    assert_eq!(relay.log_count("prepared=2"), 1, "{}", relay.log());
}

#[test]
fn a_hikaricp_pool_survives_a_stop() {
    a_pool_survives_a_stop("resume-hikaricp", tests::pools::hikaricp());
}

#[test]
fn a_go_pool_with_a_running_keepalive_survives_a_stop() {
    a_pool_survives_a_stop("resume-go", tests::pools::go());
}

/// A detached session whose ticket has expired gets ERR 1927 at its next command, and the
/// command wakes nothing (it used to wake the instance for a reattach the compute refuses).
#[test]
fn a_detached_session_past_its_tickets_lifetime_ends_with_1927_and_wakes_nothing() {
    let dir = TempDir::new("resume-expired");
    let relay = start_with(&dir, &["--ticket-ttl", "1ms"]);
    let mut a = connect(&relay);
    exec(&mut a, "SET SESSION interactive_timeout = 10001");
    relay.wait_state("paused", Duration::from_secs(60));
    assert!(relay.logged("stopping the frozen compute under resumable sessions"));
    let spawned = relay.log_count("compute spawned");
    match raw::query(&mut a, "SELECT 1").unwrap() {
        Err((code, message)) => assert_eq!(code, 1927, "{message}"),
        Ok(_) => panic!("an expired session was reattached\n{}", relay.log()),
    }
    assert_eq!(relay.state(), "paused");
    assert_eq!(
        relay.log_count("compute spawned"),
        spawned,
        "{}",
        relay.log()
    );
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"detached_expired\"}",
            1.0
        ),
        1.0
    );
}

/// With `max_detached_sessions = 1`, a session detached while another waits detached gets
/// ERR 1927 at its next command, with no wake; the first is reattached.
#[test]
fn sessions_detached_beyond_the_cap_end_with_1927() {
    let dir = TempDir::new("resume-cap");
    let relay = start_with_instance(&dir, &[], "max_detached_sessions = 1\n");
    // Each logs in while the instance is paused, so its login is relayed and gets a ticket.
    let mut a = connect(&relay);
    exec(&mut a, "SET SESSION interactive_timeout = 10001");
    relay.wait_state("paused", Duration::from_secs(60));
    let mut b = connect(&relay);
    exec(&mut b, "SET SESSION interactive_timeout = 10002");
    relay.wait_state("paused", Duration::from_secs(60));
    // `a` waits detached since the first stop; `b`, detached by the second, is over the cap.
    assert_eq!(
        raw::one_row(&mut a, "SELECT @@interactive_timeout").as_deref(),
        Some("10001"),
        "{}",
        relay.log()
    );
    let spawned = relay.log_count("compute spawned");
    match raw::query(&mut b, "SELECT @@interactive_timeout").unwrap() {
        Err((code, message)) => assert_eq!(code, 1927, "{message}"),
        Ok(_) => panic!("a session over the cap was reattached\n{}", relay.log()),
    }
    assert_eq!(relay.log_count("compute spawned"), spawned);
    assert_eq!(
        relay.metric_reaching(
            "relay_connections_total{instance=\"demo\",outcome=\"detached_over_cap\"}",
            1.0
        ),
        1.0
    );
}

/// An account removed and added again with the same password (server-shim's own CLI, while the
/// compute is stopped) is a new account: a detached session of the old one is not reattached
/// (ERR 1927: its ticket carries the old account's generation), and the new one logs in.
#[test]
fn an_account_created_again_with_the_same_password_reattaches_none_of_the_old_sessions() {
    let dir = TempDir::new("resume-recreated");
    let relay = start(&dir);
    let mut a = connect(&relay);
    exec(&mut a, "SET SESSION interactive_timeout = 10001");
    relay.wait_state("paused", Duration::from_secs(60));
    let data = dir.path().join("data");
    let shim = |args: &[&str], input: &[u8]| {
        let mut cmd = std::process::Command::new(bin_path("server-shim"));
        cmd.arg("user").args(args).arg("--data").arg(&data);
        let out = tests::run_with_input(&mut cmd, input, Duration::from_secs(60));
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    };
    shim(&["remove", USER], b"");
    shim(
        &["add", USER, "--password-stdin"],
        format!("{PASSWORD}\n").as_bytes(),
    );
    match raw::query(&mut a, "SELECT 1").unwrap() {
        Err((code, message)) => assert_eq!(code, 1927, "{message}"),
        Ok(_) => panic!("the old account's session was reattached\n{}", relay.log()),
    }
    let mut b = connect(&relay);
    assert_eq!(raw::one_row(&mut b, "SELECT 1").as_deref(), Some("1"));
}

/// `force_reattach_every = 1` (for testing): after every command the session is carried to a
/// new login on the running compute, its state restored from values, as after a stop.
#[test]
fn a_session_reattached_after_every_command_keeps_its_state() {
    let dir = TempDir::new("resume-forced");
    let relay = start_with_instance(&dir, &[], "force_reattach_every = 1\n");
    let mut a = connect(&relay);
    exec(&mut a, "CREATE DATABASE shop");
    exec(&mut a, "USE shop");
    exec(&mut a, "SET SESSION sql_mode = 'ANSI_QUOTES'");
    for _ in 0..3 {
        assert_state(&relay, &mut a);
    }
    assert!(
        relay.log_count("session reattached by force") >= 5,
        "{}",
        relay.log()
    );
}

/// A `KILL QUERY` by the id the handshake gave reaches the session: server-shim takes the
/// relay's id as its session's, so the relay sends the KILL as it is, before and after the
/// session is carried across a stop (`relay/src/kill_ids.rs` rewrites it only for a compute
/// that cannot take the id, MariaDB: `tests/tests/mariadb_dual.rs`).
#[test]
fn a_kill_by_the_handshakes_id_reaches_the_session_before_and_after_a_stop() {
    let dir = TempDir::new("resume-kill");
    let relay = start(&dir);
    let (a, greeted_as) = raw::login_greeted(relay.port, USER, PASSWORD, None)
        .unwrap()
        .unwrap();
    a.set_read_timeout(Some(tests::scaled(Duration::from_secs(60))))
        .unwrap();
    let interrupted = |mut a: TcpStream| {
        assert_eq!(
            raw::one_row(&mut a, "SELECT CONNECTION_ID()"),
            Some(greeted_as.to_string())
        );
        let sleeping = std::thread::spawn(move || {
            let answer = raw::query(&mut a, "SELECT SLEEP(60)");
            (a, answer)
        });
        let mut b = connect(&relay);
        // Sent until the sleep ends: one that arrives before it starts stops nothing.
        assert!(
            Relay::wait_until(Duration::from_secs(30), || {
                let killed = raw::query(&mut b, &format!("KILL QUERY {greeted_as}"));
                assert!(matches!(killed, Ok(Ok(_))), "{killed:?}\n{}", relay.log());
                sleeping.is_finished()
            }),
            "{}",
            relay.log()
        );
        let (a, answer) = sleeping.join().unwrap();
        match answer {
            Ok(Err((code, _))) => assert_eq!(code, 1317, "{}", relay.log()),
            other => panic!("SLEEP not interrupted: {other:?}\n{}", relay.log()),
        }
        a
    };
    let a = interrupted(a);
    // Carried across a stop.
    assert!(
        Relay::wait_until(Duration::from_secs(60), || relay.state() == "paused"),
        "{}",
        relay.log()
    );
    interrupted(a);
    assert!(relay.logged("session reattached"), "{}", relay.log());
}
